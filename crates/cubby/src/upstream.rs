//! Upstream MCP servers (`[upstream.<label>]`, SPEC §5.4): the parts the
//! library owns. The MCP client itself lives in `cubby-mcp` (the only
//! crate that knows the SDK), as a [`ToolSource`](crate::ToolSource) the
//! fronts add to each run's toolset.
//!
//! - [`check_upstream`]: one section's rules (label, `command` xor `url`,
//!   `env`, the exposed names), a config error naming the key;
//! - [`Routes`]: the table from an exposed name (`<label>__<tool>`) to the
//!   server and the upstream's own tool name. Calls are routed through it,
//!   never by splitting a name (an upstream tool may hold `__` itself);
//! - [`check_url`]: an HTTP upstream's host against the `[network]` domain
//!   lists and its addresses against the refused ranges and
//!   `allowed_cidrs`, before anything connects;
//! - [`upstream_env`]: the stdio server's whole environment;
//! - [`Pins`]: the first-seen definitions (description, schemas) of each
//!   offered tool; a tool whose definition changes is hidden until the
//!   operator accepts it (`cubby doctor --accept-upstream <label>`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::config::{NetworkConfig, UPSTREAM_MAX_TIMEOUT_SECS, UpstreamConfig};
use crate::error::{Error, ErrorKind, Result};
use crate::host_env::HostEnv;
use crate::net::{Host, NetRules, Resolver, WebUrl};
use crate::sandbox::CommandEnv;

/// Longest label, in bytes (`^[a-z][a-z0-9-]{0,23}$`).
pub const MAX_LABEL_BYTES: usize = 24;
/// What joins a label and a tool name in the exposed name.
pub const SEPARATOR: &str = "__";
/// Longest exposed name, in bytes (the MCP limit of tool names).
pub const MAX_EXPOSED_NAME_BYTES: usize = 64;
/// Longest upstream tool list in one section.
pub const MAX_UPSTREAM_TOOLS: usize = 256;

/// Checks a label: `^[a-z][a-z0-9-]{0,23}$`.
fn label_ok(label: &str) -> bool {
    let mut bytes = label.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z'))
        && label.len() <= MAX_LABEL_BYTES
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-'))
}

/// The name `tool` of upstream `label` is offered under.
pub fn exposed_name(label: &str, tool: &str) -> String {
    format!("{label}{SEPARATOR}{tool}")
}

/// Checks one `[upstream.<label>]` section.
///
/// # Errors
///
/// `invalid_input` naming `upstream.<label>` and the key that breaks a
/// rule, and what to write instead.
pub fn check_upstream(label: &str, config: &UpstreamConfig) -> Result<()> {
    let key = format!("upstream.{label}");
    if !label_ok(label) {
        return Err(Error::invalid_input(format!(
            "`[{}]`: the label must match ^[a-z][a-z0-9-]{{0,23}}$ (lower-case letters, digits \
             and `-`, a letter first, at most {MAX_LABEL_BYTES} bytes); e.g. `[upstream.github]`",
            crate::output::truncate_for_message(&key)
        )));
    }
    match (&config.command, &config.url) {
        (Some(_), Some(_)) | (None, None) => {
            return Err(Error::invalid_input(format!(
                "`[{key}]`: give exactly one of `command` (an argv, run over stdio in a sandbox) \
                 and `url` (a streamable-HTTP server)"
            )));
        }
        (Some(argv), None) => {
            if argv.is_empty() || argv[0].is_empty() {
                return Err(Error::invalid_input(format!(
                    "`{key}.command` must name a program: an argv such as \
                     [\"node\", \"server.js\"] (no shell)"
                )));
            }
            if argv.iter().any(|a| a.contains('\0')) {
                return Err(Error::invalid_input(format!(
                    "`{key}.command` holds a NUL byte; remove it"
                )));
            }
            if !config.sees_workspace() && argv.iter().any(|a| a.contains(WORKSPACE_ARG)) {
                return Err(Error::invalid_input(format!(
                    "`{key}.command` names `{WORKSPACE_ARG}`, but this server does not get the \
                     workspace: it holds `env.secrets` or a `network`, and what the model writes \
                     in the workspace (a nested repository's hooks, a Makefile) would run with \
                     them. Give the workspace to a server without secrets and network, or set \
                     `workspace = true` to accept that risk"
                )));
            }
        }
        (None, Some(url)) => {
            WebUrl::parse(url)
                .map_err(|e| Error::invalid_input(format!("`{key}.url`: {}", e.message())))?;
            if !config.env.pass.is_empty() || !config.env.secrets.is_empty() {
                return Err(Error::invalid_input(format!(
                    "`{key}.env` is for servers started with `command`; an HTTP server gets \
                     no environment from cubby (remove `env`)"
                )));
            }
            if config.network.is_some() {
                return Err(Error::invalid_input(format!(
                    "`{key}.network` is the sandbox network of a `command` server; an HTTP \
                     server is reached under `[network]` (remove `network`)"
                )));
            }
            if config.workspace.is_some() {
                return Err(Error::invalid_input(format!(
                    "`{key}.workspace` says whether a `command` server's sandbox is the \
                     workspace; an HTTP server runs elsewhere (remove `workspace`)"
                )));
            }
        }
    }
    crate::sandbox::env::validate(&config.env.pass, &BTreeMap::new(), &config.env.secrets)
        .map_err(|e| Error::invalid_input(format!("`[{key}]`: {}", e.message())))?;
    for (what, value) in [
        ("call_timeout", config.call_timeout),
        ("startup_timeout", config.startup_timeout),
    ] {
        if let Some(secs) = value
            && !(1..=UPSTREAM_MAX_TIMEOUT_SECS).contains(&secs)
        {
            return Err(Error::invalid_input(format!(
                "`{key}.{what}` is {secs} s; give 1 to {UPSTREAM_MAX_TIMEOUT_SECS} seconds"
            )));
        }
    }
    if config.tools.len() > MAX_UPSTREAM_TOOLS {
        return Err(Error::invalid_input(format!(
            "`{key}.tools` lists {} tools; at most {MAX_UPSTREAM_TOOLS}",
            config.tools.len()
        )));
    }
    for (i, tool) in config.tools.iter().enumerate() {
        let exposed = exposed_name(label, tool);
        let fits = !tool.is_empty()
            && exposed.len() <= MAX_EXPOSED_NAME_BYTES
            && exposed
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !fits {
            return Err(Error::invalid_input(format!(
                "`{key}.tools` entry `{}`: it would be offered as `{}`, and a tool name is 1 to \
                 {MAX_EXPOSED_NAME_BYTES} bytes of [A-Za-z0-9_-] ({} bytes here); use a shorter \
                 label, or leave this tool out",
                crate::path::escape_controls(&crate::output::truncate_for_message(tool)),
                crate::path::escape_controls(&crate::output::truncate_for_message(&exposed)),
                exposed.len()
            )));
        }
        if config.tools[..i].contains(tool) {
            return Err(Error::invalid_input(format!(
                "`{key}.tools` lists `{tool}` twice; list it once"
            )));
        }
    }
    Ok(())
}

/// One offered upstream tool: the name the model calls, the server, and
/// the server's own name of the tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// `<label>__<tool>`.
    pub exposed: String,
    /// The server's label.
    pub label: String,
    /// The tool's name on the server, exactly as listed in `tools`.
    pub tool: String,
}

/// The routing table of every upstream tool of a config.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Routes {
    routes: Vec<Route>,
}

impl Routes {
    /// The table of `upstreams` (each section already checked by
    /// [`check_upstream`]); `reserved` says which names another source has
    /// (the built-in tools).
    ///
    /// # Errors
    ///
    /// `invalid_input` naming the key of a name that clashes with a
    /// reserved one or another upstream's.
    pub fn new(
        upstreams: &BTreeMap<String, UpstreamConfig>,
        reserved: impl Fn(&str) -> bool,
    ) -> Result<Routes> {
        let mut routes: Vec<Route> = Vec::new();
        for (label, config) in upstreams {
            for tool in &config.tools {
                let exposed = exposed_name(label, tool);
                if reserved(&exposed) {
                    return Err(Error::invalid_input(format!(
                        "`upstream.{label}.tools` entry `{tool}` would be offered as `{exposed}`, \
                         the name of a built-in tool; choose another label"
                    )));
                }
                if let Some(other) = routes.iter().find(|r| r.exposed == exposed) {
                    return Err(Error::invalid_input(format!(
                        "`upstream.{label}.tools` entry `{tool}` would be offered as `{exposed}`, \
                         as `upstream.{}.tools` entry `{}` is; rename a label or leave one out",
                        other.label, other.tool
                    )));
                }
                routes.push(Route {
                    exposed,
                    label: label.clone(),
                    tool: tool.clone(),
                });
            }
        }
        Ok(Routes { routes })
    }

    /// The route of an exposed name.
    pub fn find(&self, exposed: &str) -> Option<&Route> {
        self.routes.iter().find(|r| r.exposed == exposed)
    }

    /// The routes of server `label`.
    pub fn of<'a>(&'a self, label: &'a str) -> impl Iterator<Item = &'a Route> + 'a {
        self.routes.iter().filter(move |r| r.label == label)
    }

    /// Every route, in config order.
    pub fn iter(&self) -> impl Iterator<Item = &Route> {
        self.routes.iter()
    }
}

/// Checks an HTTP upstream's URL against `[network]`: its host against the
/// domain lists (`denied` names the entry), then every address it resolves
/// to against the refused ranges (private, loopback, link-local, …) unless
/// `allowed_cidrs` lists it. Blocking (it resolves).
///
/// Returns the host name and the addresses the connection must go to
/// (pinned: the client is not let resolve again).
///
/// # Errors
///
/// `invalid_input` for a URL that breaks a rule, `denied` for a host the
/// domain lists refuse, `network` for one that does not resolve or
/// resolves to a refused address.
pub fn check_url(
    url: &str,
    network: &NetworkConfig,
    resolver: &dyn Resolver,
) -> Result<(String, Vec<SocketAddr>)> {
    let parsed = WebUrl::parse(url)?;
    let rules = NetRules::from_config(network)?;
    rules.check_host(parsed.host())?;
    let ips: Vec<IpAddr> = match parsed.host() {
        Host::Ip(ip) => vec![*ip],
        Host::Domain(name) => resolver.resolve(name).map_err(|e| {
            Error::new(
                ErrorKind::Network,
                format!("`{name}` cannot be resolved: {e}; check the upstream's url"),
            )
        })?,
    };
    if ips.is_empty() {
        return Err(Error::new(
            ErrorKind::Network,
            format!("`{}` has no addresses", parsed.host()),
        ));
    }
    for ip in &ips {
        if let Some(range) = rules.address_refusal(*ip) {
            return Err(Error::new(
                ErrorKind::Network,
                format!(
                    "`{}` resolves to {ip}, a {range} address; list it in \
                     `network.allowed_cidrs` to reach this upstream",
                    parsed.host()
                ),
            ));
        }
    }
    let port = parsed.port();
    Ok((
        parsed.host().match_name(),
        ips.into_iter()
            .map(|ip| SocketAddr::new(ip, port))
            .collect(),
    ))
}

/// The HTTP client of an HTTP upstream: [`check_url`] first, then a
/// client that connects only to the addresses checked (no proxy, no
/// redirects followed, cubby's TLS).
///
/// # Errors
///
/// As [`check_url`]; `network` when https cannot be verified on this host.
pub fn http_client(
    url: &str,
    network: &NetworkConfig,
    resolver: &dyn Resolver,
) -> Result<reqwest::Client> {
    let (host, addrs) = check_url(url, network, resolver)?;
    crate::web::check_https(url)?;
    crate::web::client_builder()?
        .pool_max_idle_per_host(UPSTREAM_IDLE_CONNECTIONS)
        .resolve_to_addrs(&host, &addrs)
        .build()
        .map_err(|e| Error::internal(format!("the HTTP client cannot be made: {e}")))
}

/// Idle connections an HTTP upstream's client keeps.
const UPSTREAM_IDLE_CONNECTIONS: usize = 4;

/// The whole environment of a stdio server: the variables every command
/// inherits (`PATH`, `HOME`, `LANG`, …, SPEC §4), the names in `env.pass`
/// and the `env.secrets` with their values from `host`; nothing else of
/// cubby's environment (not the workspace's `[env]` or `secrets`). The
/// secrets' values are redacted by the run (`Workspace::factory_with`).
///
/// # Errors
///
/// `invalid_input` as [`CommandEnv::new`].
pub fn upstream_env(
    config: &UpstreamConfig,
    host: &HostEnv,
    workspace: &std::path::Path,
) -> Result<Vec<(OsString, OsString)>> {
    let mut fixed = BTreeMap::new();
    // The server starts outside the workspace (red-team pass 11, U6); it
    // is told where the workspace is when it gets it, and Python does not
    // put its working directory or script's on `sys.path`.
    if config.sees_workspace() {
        fixed.insert(
            WORKSPACE_ENV.to_string(),
            workspace.to_string_lossy().into_owned(),
        );
    }
    fixed.insert("PYTHONSAFEPATH".to_string(), "1".to_string());
    // Git run by the server on a repository the model made (any path it
    // names) does not run that repository's fsmonitor or hooks (red-team
    // pass 12, P1): configuration given this way outranks the
    // repository's own.
    fixed.insert("GIT_CONFIG_COUNT".to_string(), GIT_FIXED.len().to_string());
    for (i, (key, value)) in GIT_FIXED.iter().enumerate() {
        fixed.insert(format!("GIT_CONFIG_KEY_{i}"), (*key).to_string());
        fixed.insert(format!("GIT_CONFIG_VALUE_{i}"), (*value).to_string());
    }
    let mut env = CommandEnv::new(&config.env.pass, &fixed)?;
    for name in &config.env.secrets {
        if let Some(value) = host.non_empty(name) {
            env.secret(name.clone(), value)?;
        }
    }
    for name in crate::sandbox::HOST_ONLY_ENV {
        env.withhold(name);
    }
    Ok(env.build(host.vars(), false))
}

/// Git settings every stdio upstream's git runs with: a repository's own
/// `core.fsmonitor` and hooks, which the model can write in a nested
/// repository, never run. (Filters and diff drivers a repository names
/// cannot be turned off this way: a server given the workspace runs them;
/// see `UpstreamConfig::sees_workspace`.)
pub const GIT_FIXED: [(&str, &str); 2] =
    [("core.fsmonitor", "false"), ("core.hooksPath", "/dev/null")];

/// The variable that tells a stdio upstream where the workspace is (its
/// working directory is `/`); set only for a server that gets it.
pub const WORKSPACE_ENV: &str = "CUBBY_WORKSPACE";
/// In an argv entry of a stdio upstream: replaced by the workspace's path.
pub const WORKSPACE_ARG: &str = "{workspace}";

/// A tool's definition as pinned: what a change of hides it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Definition {
    /// The upstream's description.
    pub description: String,
    /// Its input schema.
    pub input_schema: Value,
    /// Its output schema, when it has one.
    #[serde(default)]
    pub output_schema: Option<Value>,
}

/// What [`Pins::check`] found of a listed definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PinState {
    /// First seen: pinned now, offered.
    New,
    /// As pinned: offered.
    Same,
    /// Changed since pinned: hidden until accepted.
    Changed,
}

/// The pinned definitions of one server, as stored.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PinFile {
    /// Tool name → the definition first seen (or last accepted).
    pub pinned: BTreeMap<String, Definition>,
    /// Tool name → the changed definition seen since, waiting for the
    /// operator.
    #[serde(default)]
    pub pending: BTreeMap<String, Definition>,
}

/// The first-seen definitions of the upstreams' tools: in
/// `<state_dir>/upstream/<label>.json` when a `state_dir` is configured
/// (kept across restarts; `cubby doctor` shows and accepts changes), else
/// in memory for the life of the process.
#[derive(Debug)]
pub struct Pins {
    dir: Option<PathBuf>,
    memory: Mutex<BTreeMap<String, PinFile>>,
}

/// The directory of the pin files under a state directory.
pub const PINS_DIR: &str = "upstream";

impl Pins {
    /// Pins kept under `state_dir` (or in memory without one).
    pub fn new(state_dir: Option<&Path>) -> Arc<Pins> {
        Arc::new(Pins {
            dir: state_dir.map(|d| d.join(PINS_DIR)),
            memory: Mutex::default(),
        })
    }

    fn path(&self, label: &str) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join(format!("{label}.json")))
    }

    /// The pins of `label`, as stored.
    ///
    /// # Errors
    ///
    /// `internal` when the pin file cannot be read or parsed.
    pub fn load(&self, label: &str) -> Result<PinFile> {
        let Some(path) = self.path(label) else {
            return Ok(crate::sync::lock(&self.memory)
                .get(label)
                .cloned()
                .unwrap_or_default());
        };
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                Error::internal(format!(
                    "the pin file {} cannot be parsed: {e}; remove it to pin the tools anew",
                    path.display()
                ))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(PinFile::default()),
            Err(e) => Err(Error::internal(format!(
                "the pin file {} cannot be read: {e}",
                path.display()
            ))),
        }
    }

    fn store(&self, label: &str, pins: &PinFile) -> Result<()> {
        let Some(path) = self.path(label) else {
            crate::sync::lock(&self.memory).insert(label.to_string(), pins.clone());
            return Ok(());
        };
        let fail = |e: std::io::Error| {
            Error::internal(format!(
                "the pin file {} cannot be written: {e}",
                path.display()
            ))
        };
        let dir = path.parent().unwrap_or(Path::new("/"));
        std::fs::create_dir_all(dir).map_err(fail)?;
        let bytes = serde_json::to_vec_pretty(pins)
            .map_err(|e| Error::internal(format!("pins cannot be encoded: {e}")))?;
        // Atomic: a temp file in the same directory, fsync, rename.
        let tmp = dir.join(format!(".{label}.json.{}.tmp", std::process::id()));
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            fail(e)
        })
    }

    /// Checks the definitions `listed` of server `label` (only the tools
    /// in its `tools`): each new one is pinned, each changed one recorded
    /// as pending. Returns each tool's state.
    ///
    /// # Errors
    ///
    /// As [`Pins::load`]; `internal` when the pins cannot be written.
    pub fn check(
        &self,
        label: &str,
        listed: &BTreeMap<String, Definition>,
    ) -> Result<BTreeMap<String, PinState>> {
        let _guard = crate::sync::lock(&PIN_WRITES);
        let mut pins = self.load(label)?;
        let mut changed = false;
        let mut states = BTreeMap::new();
        for (tool, def) in listed {
            let state = match pins.pinned.get(tool) {
                None => {
                    pins.pinned.insert(tool.clone(), def.clone());
                    changed = true;
                    PinState::New
                }
                Some(pinned) if pinned == def => {
                    changed |= pins.pending.remove(tool).is_some();
                    PinState::Same
                }
                Some(_) => {
                    if pins.pending.get(tool) != Some(def) {
                        pins.pending.insert(tool.clone(), def.clone());
                        changed = true;
                    }
                    PinState::Changed
                }
            };
            states.insert(tool.clone(), state);
        }
        if changed {
            self.store(label, &pins)?;
        }
        Ok(states)
    }

    /// Accepts every pending definition of `label`: they become the pins.
    /// Returns the tools accepted.
    ///
    /// # Errors
    ///
    /// As [`Pins::load`] and storing.
    pub fn accept(&self, label: &str) -> Result<Vec<String>> {
        let _guard = crate::sync::lock(&PIN_WRITES);
        let mut pins = self.load(label)?;
        let pending = std::mem::take(&mut pins.pending);
        let names: Vec<String> = pending.keys().cloned().collect();
        pins.pinned.extend(pending);
        self.store(label, &pins)?;
        Ok(names)
    }
}

/// One writer of pin files at a time in this process.
static PIN_WRITES: Mutex<()> = Mutex::new(());

/// The change of one definition, in lines (`-` pinned, `+` seen), for
/// `cubby doctor`.
pub fn describe_change(old: &Definition, new: &Definition) -> String {
    let show = |d: &Definition| {
        serde_json::to_string_pretty(d).unwrap_or_else(|_| "(unprintable)".to_string())
    };
    let (old, new) = (show(old), show(new));
    similar::TextDiff::from_lines(&old, &new)
        .unified_diff()
        .context_radius(2)
        .header("pinned", "seen")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(tools: &[&str]) -> UpstreamConfig {
        UpstreamConfig {
            command: Some(vec!["srv".into()]),
            tools: tools.iter().map(|t| (*t).to_string()).collect(),
            ..UpstreamConfig::default()
        }
    }

    #[test]
    fn labels_follow_the_pattern() {
        let longest = "a".repeat(24);
        for good in ["a", "github", "git-hub", "a1", longest.as_str()] {
            assert!(check_upstream(good, &section(&[])).is_ok(), "{good}");
        }
        let over = "a".repeat(25);
        for bad in [
            "git_hub",
            "GitHub",
            "1a",
            "-a",
            "",
            over.as_str(),
            "a.b",
            "ä",
        ] {
            let err = check_upstream(bad, &section(&[])).unwrap_err();
            assert!(err.message().contains("label"), "{bad}: {err}");
        }
    }

    #[test]
    fn exposed_names_fit_or_are_config_errors() {
        // "gh__" + 60 bytes = 64: fits; one more: refused, naming the key.
        let fits = "t".repeat(60);
        assert!(check_upstream("gh", &section(&[&fits])).is_ok());
        let over = "t".repeat(61);
        let err = check_upstream("gh", &section(&[&over])).unwrap_err();
        assert!(err.message().contains("upstream.gh.tools"), "{err}");
        assert!(err.message().contains("65 bytes"), "{err}");
        for bad in ["a b", "a.b", "é", ""] {
            let err = check_upstream("gh", &section(&[bad])).unwrap_err();
            assert!(err.message().contains("upstream.gh.tools"), "{bad}: {err}");
        }
        let err = check_upstream("gh", &section(&["x", "x"])).unwrap_err();
        assert!(err.message().contains("twice"), "{err}");
    }

    #[test]
    fn command_xor_url() {
        let mut both = section(&[]);
        both.url = Some("https://example.com/mcp".into());
        assert!(check_upstream("a", &both).is_err());
        let neither = UpstreamConfig::default();
        assert!(check_upstream("a", &neither).is_err());
        let empty = UpstreamConfig {
            command: Some(vec![]),
            ..UpstreamConfig::default()
        };
        assert!(check_upstream("a", &empty).is_err());
        let bad_url = UpstreamConfig {
            url: Some("ftp://x/mcp".into()),
            ..UpstreamConfig::default()
        };
        let err = check_upstream("a", &bad_url).unwrap_err();
        assert!(err.message().contains("upstream.a.url"), "{err}");
    }

    /// Red-team pass 12, P1: a server holding secrets or a network does
    /// not get the workspace unless the operator says so, and `{workspace}`
    /// in its argv is a config error naming the key.
    #[test]
    fn only_a_server_without_secrets_or_network_gets_the_workspace() {
        let mut s = section(&[]);
        s.command = Some(vec!["srv".into(), "{workspace}".into()]);
        assert!(s.sees_workspace());
        assert!(check_upstream("fs", &s).is_ok());
        let mut secret = s.clone();
        secret.env.secrets = vec!["UP_SECRET".into()];
        assert!(!secret.sees_workspace());
        let err = check_upstream("fs", &secret).unwrap_err();
        assert!(err.message().contains("upstream.fs.command"), "{err}");
        assert!(err.message().contains("workspace = true"), "{err}");
        let mut networked = s.clone();
        networked.network = Some(crate::config::NetworkMode::On);
        assert!(!networked.sees_workspace());
        assert!(check_upstream("fs", &networked).is_err());
        networked.network = Some(crate::config::NetworkMode::Off);
        assert!(networked.sees_workspace());
        secret.workspace = Some(true);
        assert!(secret.sees_workspace());
        assert!(check_upstream("fs", &secret).is_ok());
        s.workspace = Some(false);
        assert!(!s.sees_workspace());
        assert!(check_upstream("fs", &s).is_err());
        let http = UpstreamConfig {
            url: Some("https://example.com/mcp".into()),
            workspace: Some(true),
            ..UpstreamConfig::default()
        };
        let err = check_upstream("a", &http).unwrap_err();
        assert!(err.message().contains("upstream.a.workspace"), "{err}");
    }

    #[test]
    fn credential_names_are_refused_in_pass() {
        let mut s = section(&[]);
        s.env.pass = vec!["GITHUB_TOKEN".into()];
        let err = check_upstream("gh", &s).unwrap_err();
        assert!(err.message().contains("upstream.gh"), "{err}");
        assert!(err.message().contains("secrets"), "{err}");
        s.env.pass = vec![];
        s.env.secrets = vec!["GITHUB_TOKEN".into()];
        assert!(check_upstream("gh", &s).is_ok());
    }

    #[test]
    fn routes_come_from_the_table_and_clashes_name_the_key() {
        let mut ups = BTreeMap::new();
        ups.insert("a".to_string(), section(&["b__c", "x"]));
        ups.insert("a__b".to_string(), section(&["c"]));
        // `a__b__c` from two sections: refused. (A label cannot hold `_`:
        // build the clash with the table directly.)
        let err = Routes::new(&ups, |_| false).unwrap_err();
        assert!(err.message().contains("upstream.a"), "{err}");
        let mut ups = BTreeMap::new();
        ups.insert("a".to_string(), section(&["b__c"]));
        let routes = Routes::new(&ups, |_| false).unwrap();
        let route = routes.find("a__b__c").unwrap();
        assert_eq!((route.label.as_str(), route.tool.as_str()), ("a", "b__c"));
        assert!(routes.find("a__b").is_none());
        let err = Routes::new(&ups, |n| n == "a__b__c").unwrap_err();
        assert!(err.message().contains("built-in"), "{err}");
    }

    #[test]
    fn pins_hide_changes_until_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let pins = Pins::new(Some(dir.path()));
        let def = |d: &str| Definition {
            description: d.into(),
            input_schema: serde_json::json!({"type": "object"}),
            output_schema: None,
        };
        let mut listed = BTreeMap::new();
        listed.insert("t".to_string(), def("one"));
        assert_eq!(pins.check("s", &listed).unwrap()["t"], PinState::New);
        assert_eq!(pins.check("s", &listed).unwrap()["t"], PinState::Same);
        listed.insert("t".to_string(), def("two"));
        assert_eq!(pins.check("s", &listed).unwrap()["t"], PinState::Changed);
        // Kept across processes: a new store over the same directory.
        let again = Pins::new(Some(dir.path()));
        assert_eq!(again.check("s", &listed).unwrap()["t"], PinState::Changed);
        let file = again.load("s").unwrap();
        let diff = describe_change(&file.pinned["t"], &file.pending["t"]);
        assert!(diff.contains("-  \"description\": \"one\""), "{diff}");
        assert_eq!(again.accept("s").unwrap(), ["t"]);
        assert_eq!(pins.check("s", &listed).unwrap()["t"], PinState::Same);
    }

    #[test]
    fn url_hosts_follow_the_network_rules() {
        struct Fixed(Vec<IpAddr>);
        impl Resolver for Fixed {
            fn resolve(&self, _: &str) -> std::io::Result<Vec<IpAddr>> {
                Ok(self.0.clone())
            }
        }
        let public = Fixed(vec!["93.184.215.14".parse().unwrap()]);
        let loopback = Fixed(vec!["127.0.0.1".parse().unwrap()]);
        let mut net = NetworkConfig::default();
        assert!(check_url("https://example.com/mcp", &net, &public).is_ok());
        let err = check_url("http://example.com/mcp", &net, &loopback).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Network, "{err}");
        let err = check_url("http://127.0.0.1:9/mcp", &net, &public).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Network, "{err}");
        net.denied_domains = vec!["example.com".into()];
        let err = check_url("https://api.example.com/mcp", &net, &public).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Denied, "{err}");
        net.denied_domains.clear();
        net.allowed_domains = vec!["other.org".into()];
        assert!(check_url("https://example.com/mcp", &net, &public).is_err());
        net.allowed_domains.clear();
        net.allowed_cidrs = vec!["127.0.0.1/32".into()];
        let (_, addrs) = check_url("http://127.0.0.1:9/mcp", &net, &public).unwrap();
        assert_eq!(addrs, ["127.0.0.1:9".parse::<SocketAddr>().unwrap()]);
    }
}
