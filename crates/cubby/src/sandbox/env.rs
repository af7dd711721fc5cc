//! The environment of commands (SPEC §4).
//!
//! Agent clients start cubby with their own API keys in its environment, so
//! a command never inherits that environment whole. [`CommandEnv::build`] is
//! the one place that makes a command's environment; every provider sets
//! exactly what it returns (plus its own variables, below) and nothing of
//! cubby's environment besides. In the order it is applied:
//!
//! 1. From cubby's environment, the [`INHERITED`] names, every `LC_*`, every
//!    `*_CA_BUNDLE`, and the names in `env.pass`; none of the withheld names
//!    (cubby's own: `CUBBY_TOKEN`, the search backend's key, the secrets the
//!    egress proxy injects).
//! 2. The `secrets` with their values (redacted from every output); a
//!    withheld name is not given even when it is listed here.
//! 3. The values of `env.set`. They may not name a secret, nor a variable
//!    `run` fixes ([`NON_INTERACTIVE_ENV`]): config errors.
//! 4. cubby's own variables (`CUBBY_SKILLS_DIR`, [`CommandEnv::cubby_var`]).
//! 5. For `run` and `start_process`, the [`NON_INTERACTIVE_ENV`] variables.
//!
//! Then the provider adds its own: the `linux` provider sets `TMPDIR` to its
//! private `/tmp`, and with network `allow` the proxy variables and the
//! placeholders of injected secrets; these win over `env.set`.
//!
//! An `env.pass` name that looks like a credential ([`credential_word`]) is
//! refused: a credential a command needs goes under `secrets`, so that its
//! value is redacted everywhere.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};

use crate::error::{Error, Result};

/// Names every command gets from cubby's environment, when they are set
/// (with every `LC_*` and every `*_CA_BUNDLE`).
pub const INHERITED: [&str; 12] = [
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "TERM",
    "TZ",
    "TMPDIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
];

/// Prefix of the inherited locale variables.
const LOCALE_PREFIX: &str = "LC_";

/// Suffix of the inherited certificate-bundle variables
/// (`REQUESTS_CA_BUNDLE`, `CURL_CA_BUNDLE`, `AWS_CA_BUNDLE`, …).
const CA_BUNDLE_SUFFIX: &str = "_CA_BUNDLE";

/// Words that make a name look like a credential (compared in upper case).
pub const CREDENTIAL_WORDS: [&str; 8] = [
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
];

/// Variables `run` and `start_process` fix so that tools behave
/// non-interactively; `env.set` may not change them.
pub const NON_INTERACTIVE_ENV: [(&str, &str); 7] = [
    ("CI", "1"),
    ("GIT_TERMINAL_PROMPT", "0"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
    ("NO_COLOR", "1"),
    ("TERM", "dumb"),
    ("DEBIAN_FRONTEND", "noninteractive"),
];

/// Variables that belong to cubby on the host and never reach a command:
/// the HTTP front's bearer token and the default search backend key.
pub const HOST_ONLY_ENV: [&str; 2] = ["CUBBY_TOKEN", crate::config::BRAVE_API_KEY_ENV];

/// True when commands get `name` from cubby's environment without being
/// told: one of [`INHERITED`], a locale `LC_*` or a `*_CA_BUNDLE`. A name
/// the wildcards match that looks like a credential ([`credential_word`]:
/// `LC_GITHUB_TOKEN`, carried by SSH's `SendEnv LC_*`) is not inherited.
pub fn inherited(name: &str) -> bool {
    let wildcard = (name.len() > LOCALE_PREFIX.len() && name.starts_with(LOCALE_PREFIX))
        || (name.len() > CA_BUNDLE_SUFFIX.len() && name.ends_with(CA_BUNDLE_SUFFIX));
    INHERITED.contains(&name) || (wildcard && credential_word(name).is_none())
}

/// The word of [`CREDENTIAL_WORDS`] that `name` contains (in any case), if
/// any.
pub fn credential_word(name: &str) -> Option<&'static str> {
    let upper = name.to_ascii_uppercase();
    CREDENTIAL_WORDS
        .into_iter()
        .find(|word| upper.contains(word))
}

/// Why a variable is in a command's environment, or why not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// One of the names every command gets from cubby's environment.
    Inherited,
    /// Listed in `env.pass`.
    Pass,
    /// Listed in `secrets` (redacted from every output).
    Secret,
    /// Its value comes from `env.set`.
    Set,
    /// Fixed by `run` and `start_process`.
    Run,
    /// In cubby's environment and not given to commands.
    NotPassed,
    /// cubby's own (a token, a search key, a secret the proxy injects):
    /// never given, whatever the config lists.
    Withheld,
}

/// How commands' environments are made: `env.pass`, `env.set`, the secrets
/// and the withheld names. Cheap to clone; build one environment per
/// command with [`CommandEnv::build`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommandEnv {
    pass: Vec<String>,
    set: Vec<(String, String)>,
    secrets: Vec<(String, String)>,
    withheld: Vec<String>,
    /// cubby's own variables for commands (`CUBBY_SKILLS_DIR`): set last,
    /// over `env.set`.
    cubby: Vec<(String, OsString)>,
}

/// Refuses a name no environment can hold.
fn check_name(name: &str, what: &str) -> Result<()> {
    if name.is_empty() || name.contains('=') || name.contains('\0') {
        return Err(Error::invalid_input(format!(
            "`{what}` has the name {name:?}, which cannot be a variable name; \
             use a name without `=` or NUL, e.g. `MY_VAR`"
        )));
    }
    Ok(())
}

/// Checks `env.pass` and `env.set` against the rules of the module doc;
/// `secrets` are the names listed under `secrets`.
///
/// # Errors
///
/// `invalid_input` naming the offending name and what to do instead.
pub fn validate(pass: &[String], set: &BTreeMap<String, String>, secrets: &[String]) -> Result<()> {
    for name in pass {
        check_name(name, "env.pass")?;
        if let Some(word) = credential_word(name) {
            return Err(Error::invalid_input(format!(
                "`env.pass` lists `{name}`, which looks like a credential (it contains \
                 `{word}`); list it under `secrets` instead: commands get it and its value is \
                 redacted from every output"
            )));
        }
    }
    for (name, value) in set {
        check_name(name, "env.set")?;
        if value.contains('\0') {
            return Err(Error::invalid_input(format!(
                "`env.set` gives `{name}` a value with a NUL byte; remove it"
            )));
        }
        if NON_INTERACTIVE_ENV.iter().any(|(fixed, _)| fixed == name) {
            return Err(Error::invalid_input(format!(
                "`env.set` cannot set `{name}`: `run` fixes it so that commands never wait \
                 for input; remove it from `env.set`"
            )));
        }
        if secrets.iter().any(|s| s == name) {
            return Err(Error::invalid_input(format!(
                "`env.set` cannot set `{name}`: it is listed under `secrets`, whose values come \
                 from cubby's environment; remove it from one of the two"
            )));
        }
    }
    Ok(())
}

impl CommandEnv {
    /// A policy passing the names in `pass` and setting the values in
    /// `set`, with no secrets (add them with [`CommandEnv::secret`]).
    ///
    /// # Errors
    ///
    /// `invalid_input` as for [`validate`].
    pub fn new(pass: &[String], set: &BTreeMap<String, String>) -> Result<CommandEnv> {
        validate(pass, set, &[])?;
        Ok(CommandEnv {
            pass: pass.to_vec(),
            set: set.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            secrets: Vec::new(),
            withheld: Vec::new(),
            cubby: Vec::new(),
        })
    }

    /// The policy of a config file: its `[env]`, its `secrets` with the
    /// values `lookup` finds (cubby's environment; unset or empty ones are
    /// left out), and cubby's own variables withheld (`CUBBY_TOKEN`, the
    /// search backend's key, the `[[network.inject]]` secrets).
    ///
    /// # Errors
    ///
    /// `invalid_input` as for [`validate`].
    pub fn from_config(
        config: &crate::Config,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<CommandEnv> {
        validate(&config.env.pass, &config.env.set, &config.secrets)?;
        let mut env = CommandEnv::new(&config.env.pass, &config.env.set)?;
        for name in &config.secrets {
            if let Some(value) = lookup(name).filter(|v| !v.is_empty()) {
                env.secret(name.clone(), value)?;
            }
        }
        for name in HOST_ONLY_ENV {
            env.withhold(name);
        }
        if let Some(var) = &config.web_search.api_key_env {
            env.withhold(var.clone());
        }
        for entry in &config.network.inject {
            env.withhold(entry.secret.clone());
        }
        Ok(env)
    }

    /// Gives commands the secret `name` with `value` (its value is redacted
    /// from outputs by the toolset's redactor, not here).
    ///
    /// # Errors
    ///
    /// `invalid_input` when `env.set` sets the same name, or the name is not
    /// a variable name.
    pub fn secret(&mut self, name: String, value: String) -> Result<()> {
        check_name(&name, "secrets")?;
        if self.set.iter().any(|(k, _)| *k == name) {
            return Err(Error::invalid_input(format!(
                "`env.set` cannot set `{name}`: it is a secret, whose value comes from \
                 cubby's environment; remove it from one of the two"
            )));
        }
        self.secrets.retain(|(k, _)| *k != name);
        self.secrets.push((name, value));
        Ok(())
    }

    /// Never gives commands `name`, whatever `env.pass`, `env.set` or the
    /// secrets say.
    pub fn withhold(&mut self, name: impl Into<String>) {
        let name = name.into();
        if !self.withheld.contains(&name) {
            self.withheld.push(name);
        }
    }

    /// Gives every command `name` = `value`, a variable of cubby's own
    /// (`CUBBY_SKILLS_DIR`): it wins over `env.set` and what is inherited.
    pub fn cubby_var(&mut self, name: impl Into<String>, value: OsString) {
        let name = name.into();
        self.cubby.retain(|(k, _)| *k != name);
        self.cubby.push((name, value));
    }

    fn is_withheld(&self, name: &str) -> bool {
        self.withheld.iter().any(|w| w == name)
    }

    /// Why `name` of cubby's environment is given to commands, or not.
    pub fn source(&self, name: &str, run: bool) -> Source {
        if self.is_withheld(name) {
            Source::Withheld
        } else if run && NON_INTERACTIVE_ENV.iter().any(|(k, _)| *k == name) {
            Source::Run
        } else if self.set.iter().any(|(k, _)| k == name) {
            Source::Set
        } else if self.secrets.iter().any(|(k, _)| k == name) {
            Source::Secret
        } else if self.pass.iter().any(|p| p == name) {
            Source::Pass
        } else if inherited(name) {
            Source::Inherited
        } else {
            Source::NotPassed
        }
    }

    /// A command's whole environment from `host` (cubby's environment:
    /// `std::env::vars_os()`), in the order of the module doc; `run` adds
    /// the [`NON_INTERACTIVE_ENV`] variables. Each name appears once.
    pub fn build(
        &self,
        host: impl IntoIterator<Item = (OsString, OsString)>,
        run: bool,
    ) -> Vec<(OsString, OsString)> {
        let mut env: Vec<(OsString, OsString)> = host
            .into_iter()
            .filter(|(name, _)| {
                name.to_str().is_some_and(|name| {
                    !self.is_withheld(name)
                        && (inherited(name) || self.pass.iter().any(|p| p == name))
                })
            })
            .collect();
        let mut put = |name: &str, value: &OsStr| {
            env.retain(|(k, _)| k != name);
            env.push((name.into(), value.into()));
        };
        for (name, value) in &self.secrets {
            if !self.is_withheld(name) {
                put(name, value.as_ref());
            }
        }
        for (name, value) in &self.set {
            if !self.is_withheld(name) {
                put(name, value.as_ref());
            }
        }
        for (name, value) in &self.cubby {
            put(name, value);
        }
        if run {
            for (name, value) in NON_INTERACTIVE_ENV {
                put(name, value.as_ref());
            }
        }
        // Unique names, each in the first place it came from the host.
        let mut seen = std::collections::HashSet::new();
        env.retain(|(k, _)| seen.insert(k.clone()));
        env
    }

    /// What commands get and what they do not, by name and [`Source`]:
    /// every name of `host`, `env.set` and the secrets, sorted by name.
    /// Values are never part of it.
    pub fn describe(
        &self,
        host: impl IntoIterator<Item = (OsString, OsString)>,
        run: bool,
    ) -> Vec<(String, Source)> {
        let mut names: Vec<String> = host
            .into_iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        names.extend(self.set.iter().map(|(k, _)| k.clone()));
        names.extend(self.secrets.iter().map(|(k, _)| k.clone()));
        if run {
            names.extend(NON_INTERACTIVE_ENV.iter().map(|(k, _)| k.to_string()));
        }
        names.sort();
        names.dedup();
        names
            .into_iter()
            .map(|name| {
                let source = self.source(&name, run);
                (name, source)
            })
            .collect()
    }

    /// The names listed in `env.pass`.
    pub fn pass(&self) -> &[String] {
        &self.pass
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    fn get<'a>(env: &'a [(OsString, OsString)], name: &str) -> Option<&'a str> {
        env.iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.to_str())
    }

    const HOST: [(&str, &str); 9] = [
        ("PATH", "/usr/bin"),
        ("HOME", "/home/u"),
        ("LC_ALL", "C.UTF-8"),
        ("REQUESTS_CA_BUNDLE", "/etc/ca.pem"),
        ("OPENAI_API_KEY", "sk-1"),
        ("GITHUB_TOKEN", "ghp-1"),
        ("CUBBY_TOKEN", "bearer-1"),
        ("CARGO_HOME", "/home/u/.cargo"),
        ("TERM", "xterm"),
    ];

    #[test]
    fn only_the_listed_names_pass() {
        let env = CommandEnv::default().build(host(&HOST), false);
        let names: Vec<&str> = env.iter().filter_map(|(k, _)| k.to_str()).collect();
        assert_eq!(
            names,
            ["PATH", "HOME", "LC_ALL", "REQUESTS_CA_BUNDLE", "TERM"]
        );
        assert_eq!(get(&env, "TERM"), Some("xterm"));
    }

    #[test]
    fn wildcards_do_not_pass_credential_names() {
        let host = host(&[
            ("LC_GITHUB_TOKEN", "ghp-lc"),
            ("LC_SECRET", "s-lc"),
            ("X_AUTH_CA_BUNDLE", "a-ca"),
            ("LC_CTYPE", "C.UTF-8"),
            ("CURL_CA_BUNDLE", "/etc/ca.pem"),
        ]);
        let env = CommandEnv::default().build(host, false);
        let names: Vec<&str> = env.iter().filter_map(|(k, _)| k.to_str()).collect();
        assert_eq!(names, ["LC_CTYPE", "CURL_CA_BUNDLE"]);
        let policy = CommandEnv::default();
        assert_eq!(policy.source("LC_GITHUB_TOKEN", false), Source::NotPassed);
        assert_eq!(policy.source("LC_CTYPE", false), Source::Inherited);
    }

    #[test]
    fn pass_set_secrets_run_and_withheld_in_order() {
        let set = BTreeMap::from([("GREETING".to_string(), "hi".to_string())]);
        let mut policy = CommandEnv::new(&["CARGO_HOME".to_string()], &set).unwrap();
        policy
            .secret("GITHUB_TOKEN".into(), "ghp-1".into())
            .unwrap();
        policy
            .secret("CUBBY_TOKEN".into(), "bearer-1".into())
            .unwrap();
        policy.withhold("CUBBY_TOKEN");
        let env = policy.build(host(&HOST), true);
        assert_eq!(get(&env, "CARGO_HOME"), Some("/home/u/.cargo"));
        assert_eq!(get(&env, "GREETING"), Some("hi"));
        assert_eq!(get(&env, "GITHUB_TOKEN"), Some("ghp-1"));
        assert_eq!(get(&env, "CUBBY_TOKEN"), None);
        assert_eq!(get(&env, "OPENAI_API_KEY"), None);
        assert_eq!(get(&env, "TERM"), Some("dumb"));
        assert_eq!(get(&env, "CI"), Some("1"));
        assert_eq!(env.iter().filter(|(k, _)| k == "TERM").count(), 1);
        assert_eq!(policy.source("OPENAI_API_KEY", true), Source::NotPassed);
        assert_eq!(policy.source("CUBBY_TOKEN", true), Source::Withheld);
        assert_eq!(policy.source("GITHUB_TOKEN", true), Source::Secret);
        assert_eq!(policy.source("TERM", true), Source::Run);
        assert_eq!(policy.source("TERM", false), Source::Inherited);
    }

    #[test]
    fn credential_looking_pass_names_are_refused_by_name() {
        for name in [
            "OPENAI_API_KEY",
            "gh_token",
            "MySecret",
            "DB_PASSWD",
            "X_AUTH",
            "COOKIE_JAR",
        ] {
            let err = CommandEnv::new(&[name.to_string()], &BTreeMap::new()).unwrap_err();
            assert!(err.message().contains(name), "{err}");
            assert!(err.message().contains("secrets"), "{err}");
        }
        assert!(CommandEnv::new(&["CARGO_HOME".to_string()], &BTreeMap::new()).is_ok());
    }

    #[test]
    fn set_may_not_override_run_or_secrets() {
        for name in ["CI", "TERM", "PAGER"] {
            let set = BTreeMap::from([(name.to_string(), "x".to_string())]);
            let err = CommandEnv::new(&[], &set).unwrap_err();
            assert!(err.message().contains(name), "{err}");
        }
        let set = BTreeMap::from([("GITHUB_TOKEN".to_string(), "x".to_string())]);
        let err = validate(&[], &set, &["GITHUB_TOKEN".to_string()]).unwrap_err();
        assert!(err.message().contains("GITHUB_TOKEN"), "{err}");
        let mut policy = CommandEnv::new(&[], &set).unwrap();
        assert!(policy.secret("GITHUB_TOKEN".into(), "v".into()).is_err());
        let bad = BTreeMap::from([("A=B".to_string(), "x".to_string())]);
        assert!(CommandEnv::new(&[], &bad).is_err());
    }
}
