//! Policy: which tools are offered and which paths they may touch.
//!
//! Every policy decision is made here, by pure functions of (policy, request)
//! that return the decision together with the rule that made it. The order of
//! precedence for a tool name is:
//!
//! 1. `deny` names the tool: denied (deny always wins).
//! 2. `allow` names the tool: allowed.
//! 3. The tool is in the mode's set: allowed.
//! 4. Otherwise: denied.
//!
//! Command tools are further removed when the provider cannot run commands;
//! that is a capability, not a policy, and the toolset applies it.
//!
//! Paths: `deny_read` entries are unreadable (and invisible to walks);
//! protected paths are read-only for the file tools whether or not they exist.
//! Git's executable surface (SPEC §4, [`crate::git`]) is protected on top of
//! the listed paths, by name: `.git` itself (a directory or a gitfile: never
//! created, replaced or removed by a tool), and beneath it every component
//! named in [`crate::git::SURFACE_NAMES`] (`config`, `config.worktree`,
//! `commondir`, `gitdir`, `hooks`, also in `.git/modules/**` and
//! `.git/worktrees/**`). [`PolicyBuilder::git_of`] adds what the
//! repository's git config names inside the workspace (`core.hooksPath`,
//! included config files), read when the policy is built.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::path::WorkspacePath;

/// Agent configuration files and git's own, protected in every mode (SPEC
/// §4). Each entry covers everything beneath it. (Git's surface is also
/// matched by name: see the module doc.)
pub const DEFAULT_PROTECTED: [&str; 9] = [
    // The root's `HEAD`, present or missing: with `HEAD`, `objects/` and
    // `refs/` the root itself is a bare repository to git whenever `.git`
    // is missing or broken (its `HEAD` stays writable), and a `config`
    // beside them with a `core.worktree` runs its fsmonitor and hooks on
    // the host. Without a `HEAD` that git can read, the root is none.
    "HEAD",
    ".git/hooks/",
    ".git/config",
    ".git/config.worktree",
    ".git/commondir",
    ".git/gitdir",
    ".mcp.json",
    ".codex/",
    ".claude/",
];

/// The name of the config file in the workspace root (also protected).
pub const CONFIG_FILE_NAME: &str = "cubby.toml";

/// The sandbox mode (SPEC §4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Reading tools only.
    ReadOnly,
    /// File tools and commands; commands write only in the workspace.
    #[default]
    WorkspaceWrite,
    /// Commands unconfined, network on.
    FullAccess,
}

impl Mode {
    /// The name used in config and flags.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::ReadOnly => "read-only",
            Mode::WorkspaceWrite => "workspace-write",
            Mode::FullAccess => "full-access",
        }
    }
}

/// The modes that give a tool without `allow` naming it: one of the facts
/// each tool states (`cubby::ToolFacts::modes`), so that a mode's set of
/// tools is the tools that name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Modes {
    read_only: bool,
    workspace_write: bool,
    full_access: bool,
}

impl Modes {
    /// No mode: only `allow` offers the tool (the web tools).
    pub const NONE: Modes = Modes {
        read_only: false,
        workspace_write: false,
        full_access: false,
    };
    /// Every mode (tools that only read the workspace).
    pub const ALL: Modes = Modes {
        read_only: true,
        workspace_write: true,
        full_access: true,
    };
    /// The modes that may change the workspace: `workspace-write` and
    /// `full-access` (tools that write, commands).
    pub const WRITING: Modes = Modes {
        read_only: false,
        workspace_write: true,
        full_access: true,
    };

    /// True when `mode` is one of these.
    pub const fn contains(self, mode: Mode) -> bool {
        match mode {
            Mode::ReadOnly => self.read_only,
            Mode::WorkspaceWrite => self.workspace_write,
            Mode::FullAccess => self.full_access,
        }
    }

    /// The modes, in the order of [`Mode`].
    pub fn iter(self) -> impl Iterator<Item = Mode> {
        [Mode::ReadOnly, Mode::WorkspaceWrite, Mode::FullAccess]
            .into_iter()
            .filter(move |m| self.contains(*m))
    }
}

impl Serialize for Modes {
    /// The mode names, as a list (`["workspace-write", "full-access"]`).
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter().map(Mode::as_str))
    }
}

impl std::str::FromStr for Mode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Mode> {
        match s {
            "read-only" => Ok(Mode::ReadOnly),
            "workspace-write" => Ok(Mode::WorkspaceWrite),
            "full-access" => Ok(Mode::FullAccess),
            other => Err(Error::invalid_input(format!(
                "unknown mode `{other}`; expected one of: read-only, workspace-write, full-access"
            ))),
        }
    }
}

/// A policy decision and the rule that made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// True when the request may proceed.
    pub allowed: bool,
    /// Which rule decided, in words.
    pub rule: String,
}

impl Decision {
    fn allow(rule: impl Into<String>) -> Decision {
        Decision {
            allowed: true,
            rule: rule.into(),
        }
    }
    fn deny(rule: impl Into<String>) -> Decision {
        Decision {
            allowed: false,
            rule: rule.into(),
        }
    }
}

/// A path rule: a path and everything beneath it (a rule naming a file
/// also stops anything being created "inside" it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathRule {
    path: WorkspacePath,
    shown: String,
}

impl PathRule {
    /// Parses a rule (relative to the root; a trailing `/` is allowed).
    ///
    /// # Errors
    ///
    /// `invalid_input` for a path that is not relative to the root.
    pub fn parse(spec: &str) -> Result<PathRule> {
        let path = WorkspacePath::parse(spec).map_err(|e| {
            Error::invalid_input(format!(
                "path rule `{spec}` must be relative to the workspace root: {}",
                e.message()
            ))
        })?;
        if path.is_root() {
            return Err(Error::invalid_input(format!(
                "path rule `{spec}` names the whole workspace; name a file or directory in it"
            )));
        }
        Ok(PathRule {
            path,
            shown: spec.to_string(),
        })
    }

    /// True when the rule covers `path`.
    pub fn covers(&self, path: &WorkspacePath) -> bool {
        path.starts_with(&self.path)
    }

    /// True when `dir` lies on the way to the rule's path (so a walk of `dir`
    /// may meet it).
    fn is_within(&self, dir: &WorkspacePath) -> bool {
        self.path.starts_with(dir)
    }
}

/// The policy of one toolset. Build it with [`Policy::builder`].
#[derive(Clone, Debug)]
pub struct Policy {
    mode: Mode,
    allow: BTreeSet<String>,
    deny: BTreeSet<String>,
    protected: Vec<PathRule>,
    deny_read: Vec<PathRule>,
    /// Git's surface as read by [`PolicyBuilder::build`] (with `git_of`).
    git: Option<crate::git::SurfaceRead>,
}

impl Default for Policy {
    fn default() -> Policy {
        // The defaults are valid by construction.
        let mut b = PolicyBuilder::default();
        b.protect_defaults();
        Policy {
            mode: Mode::default(),
            allow: BTreeSet::new(),
            deny: BTreeSet::new(),
            protected: b.protected.clone(),
            deny_read: Vec::new(),
            git: None,
        }
    }
}

impl Policy {
    /// A builder with the defaults: `workspace-write`, nothing added or
    /// removed, the SPEC's protected paths plus `cubby.toml`.
    pub fn builder() -> PolicyBuilder {
        let mut b = PolicyBuilder::default();
        b.protect_defaults();
        b
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Whether `tool`, which the modes `modes` give (its facts), is
    /// offered, and why.
    pub fn tool_decision(&self, tool: &str, modes: Modes) -> Decision {
        if self.deny.contains(tool) {
            Decision::deny(format!("`deny` names {tool}"))
        } else if self.allow.contains(tool) {
            Decision::allow(format!("`allow` names {tool}"))
        } else if modes.contains(self.mode) {
            Decision::allow(format!("mode {} gives {tool}", self.mode.as_str()))
        } else {
            Decision::deny(format!(
                "mode {} does not give {tool} and `allow` does not name it",
                self.mode.as_str()
            ))
        }
    }

    /// `Err(invalid_input)` when `allow` or `deny` names a tool that is not
    /// among `known` (every tool a toolset has, offered or not, in order).
    ///
    /// # Errors
    ///
    /// `invalid_input` naming the first unknown tool and listing `known`.
    pub fn check_tools(&self, known: &[&str]) -> Result<()> {
        match self
            .allow
            .iter()
            .chain(self.deny.iter())
            .find(|n| !known.contains(&n.as_str()))
        {
            None => Ok(()),
            Some(name) => Err(Error::invalid_input(format!(
                "unknown tool `{name}` in allow/deny; known tools: {}",
                known.join(", ")
            ))),
        }
    }

    /// Whether the file tools may write `path`, and why.
    pub fn write_decision(&self, path: &WorkspacePath) -> Decision {
        if let Some(rule) = git_surface_rule(path) {
            return Decision::deny(rule);
        }
        if let Some(rule) = self.protected.iter().find(|r| r.covers(path)) {
            return Decision::deny(format!("`{}` is a protected path", rule.shown));
        }
        if let Some(rule) = self.deny_read.iter().find(|r| r.covers(path)) {
            return Decision::deny(format!("`{}` is listed in deny_read", rule.shown));
        }
        Decision::allow("inside the workspace and not protected")
    }

    /// Whether the tools may read `path`, and why.
    pub fn read_decision(&self, path: &WorkspacePath) -> Decision {
        match self.deny_read.iter().find(|r| r.covers(path)) {
            Some(rule) => Decision::deny(format!("`{}` is listed in deny_read", rule.shown)),
            None => Decision::allow("not listed in deny_read"),
        }
    }

    /// `Err(denied)` unless the file tools may write `path`.
    pub(crate) fn check_write(&self, path: &WorkspacePath) -> Result<()> {
        let d = self.write_decision(path);
        if d.allowed {
            Ok(())
        } else {
            Err(Error::denied(format!(
                "writing `{path}` is not allowed: {}; write somewhere else in the workspace",
                d.rule
            )))
        }
    }

    /// `Err(denied)` unless the tools may read `path`.
    pub(crate) fn check_read(&self, path: &WorkspacePath) -> Result<()> {
        let d = self.read_decision(path);
        if d.allowed {
            Ok(())
        } else {
            Err(Error::denied(format!(
                "reading `{path}` is not allowed: {}",
                d.rule
            )))
        }
    }

    /// True when a walk should not show or enter `path`.
    pub(crate) fn hidden_from_walks(&self, path: &WorkspacePath) -> bool {
        self.deny_read.iter().any(|r| r.covers(path))
    }

    /// True when some `deny_read` rule lies at or below `dir` (used to decide
    /// whether a walk of `dir` needs per-entry checks).
    pub(crate) fn has_deny_read_within(&self, dir: &WorkspacePath) -> bool {
        self.deny_read
            .iter()
            .any(|r| r.is_within(dir) || r.covers(dir))
    }

    /// The protected path rules.
    pub fn protected(&self) -> impl Iterator<Item = &str> {
        self.protected.iter().map(|r| r.shown.as_str())
    }

    /// The protected paths, parsed (for providers that enforce them on
    /// commands).
    pub fn protected_paths(&self) -> impl Iterator<Item = &WorkspacePath> {
        self.protected.iter().map(|r| &r.path)
    }

    /// The `deny_read` paths, parsed.
    pub fn deny_read_paths(&self) -> impl Iterator<Item = &WorkspacePath> {
        self.deny_read.iter().map(|r| &r.path)
    }

    /// Git's executable surface as [`PolicyBuilder::build`] read it (with
    /// [`PolicyBuilder::git_of`]), for a sandbox opened right after to
    /// share (see [`crate::git::SHARE_WINDOW`]).
    pub fn git_surface(&self) -> Option<&crate::git::SurfaceRead> {
        self.git.as_ref()
    }
}

/// The rule of git's executable surface that covers `path`, by name: `.git`
/// itself, or a [`crate::git::SURFACE_NAMES`] component beneath it.
fn git_surface_rule(path: &WorkspacePath) -> Option<String> {
    let mut names = path.components();
    if names.next()? != crate::git::GIT_DIR_NAME {
        return None;
    }
    let mut at = PathBuf::from(crate::git::GIT_DIR_NAME);
    let mut any = false;
    for name in names {
        any = true;
        at.push(name);
        if crate::git::SURFACE_NAMES.iter().any(|s| *s == name) {
            return Some(format!(
                "`{}` is protected: part of git's executable surface (configuration, hooks, \
                 pointers to other git directories), which the host's git would act on",
                at.display()
            ));
        }
    }
    (!any).then(|| {
        "`.git` is protected: git's directory or gitfile, which tools may not create, replace \
         or remove"
            .to_string()
    })
}

/// Builds a [`Policy`].
#[derive(Clone, Debug, Default)]
pub struct PolicyBuilder {
    mode: Mode,
    allow: Vec<String>,
    deny: Vec<String>,
    protected: Vec<PathRule>,
    protected_specs: Vec<String>,
    deny_read: Vec<String>,
    git_root: Option<PathBuf>,
}

impl PolicyBuilder {
    fn protect_defaults(&mut self) {
        for spec in DEFAULT_PROTECTED
            .iter()
            .chain(std::iter::once(&CONFIG_FILE_NAME))
        {
            if let Ok(rule) = PathRule::parse(spec) {
                self.protected.push(rule);
            }
        }
    }

    /// The mode. Default: `workspace-write`.
    pub fn mode(&mut self, mode: Mode) -> &mut PolicyBuilder {
        self.mode = mode;
        self
    }

    /// Tools added to what the mode gives. Default: none.
    pub fn allow<I, S>(&mut self, tools: I) -> &mut PolicyBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.allow.extend(tools.into_iter().map(Into::into));
        self
    }

    /// Tools removed from what the mode and `allow` give; deny wins.
    /// Default: none.
    pub fn deny<I, S>(&mut self, tools: I) -> &mut PolicyBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.deny.extend(tools.into_iter().map(Into::into));
        self
    }

    /// One more protected path (relative to the root; a trailing `/` covers a
    /// directory). The defaults of SPEC §4 and `cubby.toml` are always there.
    pub fn protect(&mut self, spec: impl Into<String>) -> &mut PolicyBuilder {
        self.protected_specs.push(spec.into());
        self
    }

    /// Protects, on top of the defaults, what the git configuration of the
    /// workspace at `root` names inside it: the `core.hooksPath` directory
    /// (and `.husky/` for husky's `.husky/_`), config files included from
    /// the tree, the git directory a `.git` gitfile names (see
    /// [`crate::git::surface`]). Read from the host's files when
    /// [`PolicyBuilder::build`] runs; the `linux` provider reads them again
    /// at every command. Default: not read.
    pub fn git_of(&mut self, root: impl Into<PathBuf>) -> &mut PolicyBuilder {
        self.git_root = Some(root.into());
        self
    }

    /// Paths unreadable for tools (and, with a command provider, commands).
    /// Default: none.
    pub fn deny_read<I, S>(&mut self, specs: I) -> &mut PolicyBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.deny_read.extend(specs.into_iter().map(Into::into));
        self
    }

    /// Validates and builds.
    ///
    /// # Errors
    ///
    /// `invalid_input` for a path rule that is not relative to the root.
    /// (Tool names in `allow`/`deny` are checked against the tools a
    /// toolset has, when it is built: [`Policy::check_tools`].)
    pub fn build(&self) -> Result<Policy> {
        let mut protected = self.protected.clone();
        for spec in &self.protected_specs {
            protected.push(PathRule::parse(spec)?);
        }
        let git = self.git_root.as_ref().map(|root| {
            let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.clone());
            crate::git::SurfaceRead::now(&root)
        });
        if let Some(read) = &git {
            for path in read.surface().paths() {
                if !protected.iter().any(|r| r.covers(&path)) {
                    protected.push(PathRule {
                        shown: path.display(),
                        path,
                    });
                }
            }
        }
        let deny_read = self
            .deny_read
            .iter()
            .map(|s| PathRule::parse(s))
            .collect::<Result<Vec<_>>>()?;
        Ok(Policy {
            mode: self.mode,
            allow: self.allow.iter().cloned().collect(),
            deny: self.deny.iter().cloned().collect(),
            protected,
            deny_read,
            git,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> WorkspacePath {
        WorkspacePath::parse(s).unwrap()
    }

    #[test]
    fn deny_wins_over_allow_and_mode() {
        let policy = Policy::builder()
            .allow(["web_fetch", "read_file"])
            .deny(["read_file"])
            .build()
            .unwrap();
        let d = policy.tool_decision("read_file", Modes::ALL);
        assert!(!d.allowed);
        assert!(d.rule.contains("deny"));
        assert!(policy.tool_decision("web_fetch", Modes::NONE).allowed);
        assert!(!policy.tool_decision("web_search", Modes::NONE).allowed);
    }

    #[test]
    fn a_mode_gives_the_tools_whose_modes_name_it() {
        let policy = Policy::builder().mode(Mode::ReadOnly).build().unwrap();
        assert!(policy.tool_decision("a", Modes::ALL).allowed);
        for modes in [Modes::WRITING, Modes::NONE] {
            let d = policy.tool_decision("a", modes);
            assert!(!d.allowed);
            assert_eq!(
                d.rule,
                "mode read-only does not give a and `allow` does not name it"
            );
        }
        let policy = Policy::builder().build().unwrap();
        assert_eq!(
            policy.tool_decision("a", Modes::WRITING).rule,
            "mode workspace-write gives a"
        );
        assert_eq!(
            serde_json::to_value(Modes::WRITING).unwrap(),
            serde_json::json!(["workspace-write", "full-access"])
        );
    }

    #[test]
    fn protected_paths_cover_missing_files_and_subtrees() {
        let policy = Policy::builder().protect("secrets.env").build().unwrap();
        for path in [
            ".git/hooks/pre-commit",
            ".git/hooks",
            ".git/config",
            ".mcp.json",
            ".codex/config.toml",
            ".claude/settings.json",
            "cubby.toml",
            "secrets.env",
            "./.git/hooks/../config",
        ] {
            assert!(!policy.write_decision(&p(path)).allowed, "{path}");
        }
        for path in [
            ".git/HEAD",
            ".gitconfig",
            "src/.mcp.json",
            ".claude-notes",
            "cubby.toml.bak",
        ] {
            assert!(policy.write_decision(&p(path)).allowed, "{path}");
        }
    }

    #[test]
    fn git_s_executable_surface_is_protected_by_name() {
        let policy = Policy::default();
        for path in [
            ".git",
            ".git/commondir",
            ".git/config.worktree",
            ".git/gitdir",
            ".git/modules/sub/config",
            ".git/modules/a/b/modules/c/hooks/pre-commit",
            ".git/worktrees/w/commondir",
            ".git/worktrees/w/gitdir",
        ] {
            let d = policy.write_decision(&p(path));
            assert!(!d.allowed, "{path}");
            assert!(d.rule.contains("git"), "{path}: {}", d.rule);
        }
        for path in [
            ".git/HEAD",
            ".git/refs/heads/main",
            ".git/info/exclude",
            ".gitignore",
            "a/.git",
        ] {
            assert!(policy.write_decision(&p(path)).allowed, "{path}");
        }
    }

    #[test]
    fn git_of_protects_the_hooks_path_in_the_workspace() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(".git")).unwrap();
        std::fs::write(
            dir.path().join(".git/config"),
            "[core]\n\thooksPath = .husky\n",
        )
        .unwrap();
        let without = Policy::builder().build().unwrap();
        assert!(without.write_decision(&p(".husky/pre-commit")).allowed);
        let policy = Policy::builder().git_of(dir.path()).build().unwrap();
        assert!(!policy.write_decision(&p(".husky/pre-commit")).allowed);
        assert!(policy.write_decision(&p(".huskyx")).allowed);
    }

    #[test]
    fn unknown_tools_are_refused_with_the_list() {
        let policy = Policy::builder().allow(["raed_file"]).build().unwrap();
        let err = policy.check_tools(&["read_file", "glob"]).unwrap_err();
        assert_eq!(
            err.message(),
            "unknown tool `raed_file` in allow/deny; known tools: read_file, glob"
        );
        let policy = Policy::builder().deny(["glob"]).build().unwrap();
        assert!(policy.check_tools(&["read_file", "glob"]).is_ok());
    }

    #[test]
    fn deny_read_hides_subtrees() {
        let policy = Policy::builder()
            .deny_read(["secret/", "key.pem"])
            .build()
            .unwrap();
        assert!(!policy.read_decision(&p("secret/a")).allowed);
        assert!(!policy.read_decision(&p("key.pem")).allowed);
        assert!(policy.read_decision(&p("secretive")).allowed);
        assert!(policy.has_deny_read_within(&p(".")));
    }
}
