//! [`HostEnv`]: a snapshot of cubby's own process environment, passed down.
//!
//! The library never reads the process environment itself: a front takes
//! one snapshot ([`HostEnv::capture`], defined beside [`crate::workspace`],
//! the one place that reads it) and hands it to whatever needs a variable —
//! the command environment (`PATH`, `HOME`, `LANG`, `env.pass`, secrets),
//! the `linux` provider (`HOME` for `~/` and the credential stores, `PATH`,
//! `CARGO_HOME` and `RUSTUP_HOME` for `read_scope = "system"`, the values
//! of `[[network.inject]]` secrets), the search backend's key, git's config
//! locations. A test or an embedder passes a made-up one
//! ([`HostEnv::from_vars`]) instead, and the library sees nothing else.

use std::ffi::{OsStr, OsString};
use std::sync::Arc;

/// cubby's environment as it was when the snapshot was taken. Cheap to
/// clone. The default is empty: commands then inherit nothing.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct HostEnv {
    vars: Arc<[(OsString, OsString)]>,
}

impl std::fmt::Debug for HostEnv {
    /// Names only: values may be secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.vars.iter().map(|(k, _)| k))
            .finish()
    }
}

impl HostEnv {
    /// A snapshot of these variables (the last of a repeated name wins, as
    /// in a process environment).
    pub fn from_vars<I, K, V>(vars: I) -> HostEnv
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<OsString>,
        V: Into<OsString>,
    {
        let mut out: Vec<(OsString, OsString)> = Vec::new();
        for (k, v) in vars {
            let (k, v) = (k.into(), v.into());
            out.retain(|(name, _)| *name != k);
            out.push((k, v));
        }
        HostEnv { vars: out.into() }
    }

    /// The value of `name`, if set.
    pub fn var_os(&self, name: &str) -> Option<&OsStr> {
        self.vars
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_os_str())
    }

    /// The value of `name`, if set and valid UTF-8 (as `std::env::var`).
    pub fn var(&self, name: &str) -> Option<String> {
        self.var_os(name)?.to_str().map(str::to_string)
    }

    /// The value of `name`, if set, valid UTF-8 and not empty.
    pub fn non_empty(&self, name: &str) -> Option<String> {
        self.var(name).filter(|v| !v.is_empty())
    }

    /// Every variable, in the order taken.
    pub fn vars(&self) -> impl Iterator<Item = (OsString, OsString)> + '_ {
        self.vars.iter().cloned()
    }

    /// A copy with `name` set to `value` (or added).
    #[must_use]
    pub fn with(&self, name: impl Into<OsString>, value: impl Into<OsString>) -> HostEnv {
        HostEnv::from_vars(
            self.vars()
                .chain(std::iter::once((name.into(), value.into()))),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_of_a_name_wins_and_debug_shows_no_value() {
        let env = HostEnv::from_vars([("A", "1"), ("B", "2"), ("A", "3")]);
        assert_eq!(env.var("A").as_deref(), Some("3"));
        assert_eq!(env.vars().count(), 2);
        assert_eq!(env.with("B", "").non_empty("B"), None);
        assert!(!format!("{env:?}").contains('3'));
    }
}
