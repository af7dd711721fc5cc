//! Reading and checking a config file: [`Config::from_toml`] and
//! [`Config::load`].
//!
//! The config types live in `config`, low in the stack; a file is checked
//! here, above the layers whose rules it must satisfy (the `[env]` rules of
//! `sandbox::env`, the `[network]` and `[web_search]` rules of `web` and
//! `net`), so that `config` imports none of them.

use std::path::Path;

use crate::config::Config;
use crate::error::{Error, ErrorKind, Result};

impl Config {
    /// Parses TOML text; `origin` names the file in errors.
    ///
    /// # Errors
    ///
    /// `invalid_input` naming the unknown key or the bad value.
    pub fn from_toml(text: &str, origin: &str) -> Result<Config> {
        let config: Config = toml::from_str(text)
            .map_err(|e| Error::invalid_input(format!("config `{origin}`: {e}")))?;
        config.limits.validate()?;
        crate::sandbox::env::validate(&config.env.pass, &config.env.set, &config.secrets)
            .map_err(|e| Error::invalid_input(format!("config `{origin}`: {}", e.message())))?;
        crate::web::validate_config(&config.network, &config.web_search)
            .map_err(|e| Error::invalid_input(format!("config `{origin}`: {}", e.message())))?;
        crate::skills::parse_dirs(&config.skills.dirs)
            .map_err(|e| Error::invalid_input(format!("config `{origin}`: {}", e.message())))?;
        for (name, gateway) in &config.gateway {
            crate::net::check_gateway(name, gateway)
                .map_err(|e| Error::invalid_input(format!("config `{origin}`: {}", e.message())))?;
        }
        for (label, upstream) in &config.upstream {
            crate::upstream::check_upstream(label, upstream)
                .map_err(|e| Error::invalid_input(format!("config `{origin}`: {}", e.message())))?;
        }
        config.check_consistency(origin)?;
        Ok(config)
    }

    /// Reads and parses a config file.
    ///
    /// # Errors
    ///
    /// `not_found` when the file cannot be read; see [`Config::from_toml`].
    pub fn load(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::new(
                ErrorKind::NotFound,
                format!("config file `{}` cannot be read: {e}", path.display()),
            )
        })?;
        Config::from_toml(&text, &path.display().to_string())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::*;
    use crate::policy::Mode;

    #[test]
    fn the_kubernetes_section_has_defaults_and_errors_name_the_key() {
        let config = Config::from_toml(
            "provider = \"kubernetes\"\n[kubernetes]\npool_key_file = \"/k\"\n",
            "t.toml",
        )
        .unwrap();
        assert_eq!(config.provider, Some(ProviderKind::Kubernetes));
        let k = config.kubernetes.unwrap();
        assert_eq!(
            (k.namespace.as_str(), k.warm_pool.as_str(), k.port),
            ("cubby", "cubby", KUBERNETES_POD_PORT)
        );
        assert_eq!(k.ready_timeout_secs(), KUBERNETES_READY_TIMEOUT_SECS);
        assert_eq!(k.shutdown_after_secs(), KUBERNETES_SHUTDOWN_AFTER_SECS);
        assert_eq!(k.api_server, None);
        for (text, key) in [
            ("provider = \"kubernetes\"\n", "[kubernetes]"),
            ("[kubernetes]\nnamespace = \"x\"\n", "pool_key_file"),
            (
                "[kubernetes]\npool_key_file = \"/k\"\nnamespace = \"Bad_NS\"\n",
                "namespace",
            ),
            (
                "[kubernetes]\npool_key_file = \"/k\"\nwarm_pool = \"-x\"\n",
                "warm_pool",
            ),
            (
                "[kubernetes]\npool_key_file = \"/k\"\nready_timeout = 0\n",
                "ready_timeout",
            ),
            (
                "[kubernetes]\npool_key_file = \"/k\"\nshutdown_after = 9999999\n",
                "shutdown_after",
            ),
            ("[kubernetes]\npool_key_file = \"/k\"\nport = 0\n", "port"),
            (
                "[kubernetes]\npool_key_file = \"/k\"\napi_server = \"ftp://x\"\n",
                "api_server",
            ),
            (
                "[kubernetes]\npool_key_file = \"/k\"\nwarmpool = \"x\"\n",
                "warmpool",
            ),
        ] {
            let err = Config::from_toml(text, "t.toml").unwrap_err();
            assert!(err.message().contains(key), "{text}: {}", err.message());
        }
    }

    #[test]
    fn parses_the_spec_example() {
        let text = r#"
mode = "workspace-write"
provider = "linux"
allow = ["web_fetch"]
deny = ["write_stdin"]
secrets = ["GITHUB_TOKEN"]
writable_roots = ["../cache"]
deny_read = ["secrets/"]
shell = ["bash", "-c"]

[limits.run]
timeout_ms = 30000
max_timeout_ms = 120000
max_output_bytes = 16384

[limits.search]
max_matches = 100

[network]
mode = "off"
allowed_domains = ["crates.io"]
denied_domains = []
allowed_cidrs = []

[[exec.rules]]
prefix = ["git", "push"]
decision = "deny"
"#;
        let c = Config::from_toml(text, "test").unwrap();
        assert_eq!(c.mode, Some(Mode::WorkspaceWrite));
        assert_eq!(c.provider, Some(ProviderKind::Linux));
        assert_eq!(c.limits.search.max_matches, 100);
        assert_eq!(c.limits.glob.max_matches, GLOB_MAX_MATCHES);
        assert_eq!(c.exec.rules[0].decision, ExecDecision::Deny);
    }

    #[test]
    fn unknown_keys_are_named() {
        let err = Config::from_toml("mdoe = \"read-only\"", "cubby.toml").unwrap_err();
        assert!(err.message().contains("mdoe"), "{err}");
        let err = Config::from_toml("[limits.search]\nmax_match = 3", "cubby.toml").unwrap_err();
        assert!(err.message().contains("max_match"), "{err}");
    }

    #[test]
    fn read_view_keys() {
        let c = Config::from_toml(
            "host_deny_read = [\"~/work/other\", \"/srv/keys\"]\nread_scope = \"system\"\n\
             readable_roots = [\"~/.cache/pip\"]",
            "c",
        )
        .unwrap();
        assert_eq!(c.read_scope, ReadScope::System);
        assert_eq!(c.host_deny_read, ["~/work/other", "/srv/keys"]);
        assert_eq!(Config::default().read_scope, ReadScope::Host);
        let err = Config::from_toml("read_scope = \"everything\"", "c").unwrap_err();
        assert!(err.message().contains("read_scope"), "{err}");
        let err = Config::from_toml("host_deny_read = [\"rel/path\"]", "c").unwrap_err();
        assert!(err.message().contains("host_deny_read"), "{err}");
        let err = Config::from_toml("readable_roots = [\"/opt/x\"]", "c").unwrap_err();
        assert!(err.message().contains("readable_roots"), "{err}");
    }

    #[test]
    fn contradictory_limits_are_refused() {
        let err = Config::from_toml("[limits.run]\ntimeout_ms = 500000", "c").unwrap_err();
        assert!(err.message().contains("max_timeout_ms"));
        let err = Config::from_toml("[limits.run]\nmax_output_bytes = 10", "c").unwrap_err();
        assert!(err.message().contains("256"));
    }

    #[test]
    fn the_fast_path_is_on_unless_turned_off() {
        assert!(Config::default().mcp.fast_path);
        assert!(Config::from_toml("[mcp]\n", "c").unwrap().mcp.fast_path);
        let c = Config::from_toml("[mcp]\nfast_path = false", "c").unwrap();
        assert!(!c.mcp.fast_path);
    }

    #[test]
    fn structured_content_is_off_unless_turned_on() {
        assert!(!Config::default().mcp.structured_content);
        let c = Config::from_toml("[mcp]\nstructured_content = false", "c").unwrap();
        assert!(!c.mcp.structured_content);
        let c = Config::from_toml("[mcp]\nstructured_content = true", "c").unwrap();
        assert!(c.mcp.structured_content);
        let err = Config::from_toml("[mcp]\nstructured = true", "c").unwrap_err();
        assert!(err.message().contains("structured"), "{err}");
        let err = Config::from_toml("[mcp]\nstructured_content = \"yes\"", "c").unwrap_err();
        assert!(
            err.message().contains("structured_content") || err.message().contains("bool"),
            "{err}"
        );
    }

    #[test]
    fn the_sandbox_keeps_a_tmp() {
        let c = Config::from_toml("[limits.sandbox]\nprocesses = 1024\ntmp_mb = 64", "c").unwrap();
        assert_eq!(c.limits.sandbox.tmp_mb, 64);
        assert_eq!(Limits::default().sandbox.tmp_mb, SANDBOX_TMP_MB);
        let err = Config::from_toml("[limits.sandbox]\ntmp_mb = 0", "c").unwrap_err();
        assert!(err.message().contains("limits.sandbox.tmp_mb"), "{err}");
    }

    #[test]
    fn gateways_are_checked_at_load_naming_the_key() {
        let ok = r#"
[gateway.github]
base_url = "https://api.github.com"
credential = { secret = "GITHUB_TOKEN", header = "Authorization", format = "Bearer {}" }
routes = ["GET /repos/:owner/:repo/issues", { route = "POST /repos/:owner/:repo/issues", max_body = "2MB" }]
max_body = "1MB"
"#;
        let c = Config::from_toml(ok, "c").unwrap();
        let g = &c.gateway["github"];
        assert_eq!(g.max_body, Some(ByteSize(1_000_000)));
        assert_eq!(g.routes[1].text(), "POST /repos/:owner/:repo/issues");
        let base = "[gateway.gh]\nbase_url = \"https://api.example\"\nroutes = [\"GET /a\"]\n";
        for (extra, key) in [
            ("", ""),
            ("bogus = 1\n", "bogus"),
            ("max_body = \"1 parsec\"\n", "max_body"),
            ("ca_file = \"/nonexistent/ca.pem\"\n", "gateway.gh.ca_file"),
            (
                "credential = { secret = \"T\", header = \"Authorization\", format = \"Bearer\" }\n",
                "gateway.gh.credential.format",
            ),
            (
                "credential = { secret = \"T\", header = \"bad header\" }\n",
                "gateway.gh.credential.header",
            ),
        ] {
            let text = format!("{base}{extra}");
            match Config::from_toml(&text, "c") {
                Ok(_) => assert!(key.is_empty(), "{text} passed"),
                Err(e) => assert!(!key.is_empty() && e.message().contains(key), "{key}: {e}"),
            }
        }
        for (text, key) in [
            (
                "[gateway.gh]\nbase_url = \"http://api.example\"\nroutes = [\"GET /a\"]",
                "gateway.gh.base_url",
            ),
            (
                "[gateway.gh]\nbase_url = \"https://api.example\"\nroutes = []",
                "gateway.gh.routes",
            ),
            (
                "[gateway.gh]\nbase_url = \"https://api.example\"\nroutes = [\"GET /a/../b\"]",
                "gateway.gh.routes",
            ),
            (
                "[gateway.gh]\nbase_url = \"https://api.example\"\nroutes = [\"fetch /a\"]",
                "gateway.gh.routes",
            ),
            (
                "[gateway.Git_Hub]\nbase_url = \"https://api.example\"\nroutes = [\"GET /a\"]",
                "gateway.Git_Hub",
            ),
        ] {
            let err = Config::from_toml(text, "c").unwrap_err();
            assert!(err.message().contains(key), "{key}: {err}");
        }
    }
}
