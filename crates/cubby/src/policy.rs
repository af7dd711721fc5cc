//! Policy: everything a workspace allows, stated once.
//!
//! A [`Policy`] says which tools are offered (mode, `allow`, `deny`), which
//! paths they and commands may touch (protected paths, `deny_read`, the
//! writable roots, what commands read of the host: `host_deny_read`,
//! `read_scope`, `readable_roots`), which commands run (exec rules), what
//! the network reaches (the `[network]` mode, domain lists and address
//! rules, the injected secrets' bindings), what commands' environments get
//! (`[env]`) and the limits every tool and command is clamped to. It is
//! given once: the `linux` provider is opened from it and enforces its part
//! on commands, and a toolset refuses a sandbox that enforces another
//! ([`Policy::sandbox_digest`], [`crate::Sandbox::enforced`]).
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
//! `commondir`, `gitdir`, `hooks`, and the sequencer's state
//! `rebase-merge`, `rebase-apply`, `sequencer`; also in `.git/modules/**`
//! and `.git/worktrees/**`). [`PolicyBuilder::git_of`] adds what the
//! repository's git config names inside the workspace (`core.hooksPath`,
//! included config files), read when the policy is built.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub use crate::config::Mode;
use crate::config::{
    EnvConfig, ExecRule, GatewayConfig, Limits, NetworkConfig, NetworkMode, ReadScope,
};
use crate::error::{Error, Result};
use crate::host_env::HostEnv;
use crate::path::WorkspacePath;
use serde::Serialize;

/// Agent configuration files and git's own, protected in every mode (SPEC
/// §4). Each entry covers everything beneath it. (Git's surface is also
/// matched by name: see the module doc.)
///
/// The agents' and editors' project configs are those through which a
/// tool on the host starts a program when the user opens the project or
/// its agent runs: MCP servers, hooks, tasks, plugins, permission lists
/// (docs/SECURITY.md, "Protected paths", gives the reason for each). A
/// directory is protected whole where what it holds keeps growing; only
/// the program-starting parts of `.kiro/` and `.roo/`, whose other files
/// (specs, rules) are documents an agent edits.
pub const DEFAULT_PROTECTED: [&str; 48] = [
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
    // Claude Code, Codex.
    ".mcp.json",
    ".codex/",
    ".claude/",
    // Gemini CLI: `settings.json` (MCP servers, hooks), `commands/` (shell
    // expansions), `.env`, extensions.
    ".gemini/",
    // Cursor: `mcp.json`, `environment.json` (install commands),
    // `hooks.json`, `worktrees.json` (setup commands), `cli.json`
    // (permissions).
    ".cursor/",
    // VS Code and Copilot: `mcp.json`, `tasks.json` (tasks run on folder
    // open), `settings.json` (executable paths, terminal profiles).
    ".vscode/",
    // opencode: its config at the root and its directory (plugins, agents,
    // commands).
    "opencode.json",
    "opencode.jsonc",
    ".opencode/",
    // Kiro: MCP settings, agent hooks, CLI agents (MCP servers and hooks).
    ".kiro/settings/",
    ".kiro/hooks/",
    ".kiro/agents/",
    // Roo Code: its MCP servers.
    ".roo/mcp.json",
    // Amazon Q: `mcp.json`, `default.json`, CLI agents.
    ".amazonq/",
    // Continue: `mcpServers/` and config blocks.
    ".continue/",
    // Windsurf: `hooks.json` (Cascade hooks run shell commands).
    ".windsurf/",
    // Zed: `settings.json` (context servers, language servers),
    // `tasks.json`.
    ".zed/",
    // Qwen Code (a fork of Gemini CLI): `settings.json` (MCP servers).
    ".qwen/",
    // aider: `lint-cmd` and `test-cmd`, run after each edit.
    ".aider.conf.yml",
    // Crush: MCP servers and language-server commands, started with it.
    "crush.json",
    ".crush.json",
    // Cline: hook scripts.
    ".clinerules/hooks/",
    // JetBrains Junie: MCP servers.
    ".junie/mcp/",
    // Factory Droid: `settings.json` hooks, `mcp.json` (red-team pass 5, F3).
    ".factory/",
    // Kilo Code: project MCP servers (`.kilocode/mcp.json`,
    // `.kilo/kilo.json(c)`, `kilo.json(c)`).
    ".kilocode/",
    ".kilo/",
    "kilo.json",
    "kilo.jsonc",
    // OpenHands: `setup.sh` (run when it starts on the repository),
    // `hooks.json`.
    ".openhands/",
    // Helix: `languages.toml` (language servers, formatters it starts).
    ".helix/",
    // Amp: workspace settings, found searching upward from the cwd.
    ".amp/",
    // rustup: a toolchain `path` runs the workspace's `cargo`/`rustc` on
    // any call in the directory (`cargo --version`, rust-analyzer, a shell
    // prompt); cargo's config: `rustc-wrapper`, runners and aliases, run by
    // the `cargo check` rust-analyzer starts on its own (red-team pass 3).
    "rust-toolchain.toml",
    "rust-toolchain",
    ".cargo/config.toml",
    ".cargo/config",
    // Version queries that run the workspace's code (red-team pass 4,
    // R4-4): yarn's `yarn-path` / `yarnPath` (`yarn --version` runs that
    // script), Maven's `.mvn/jvm.config` (`-javaagent:` on `mvn --version`)
    // and the rest of `.mvn/` (extensions, the wrapper's distribution URL),
    // sbt's JVM options, bazelisk's config (the Bazel binary it fetches
    // and runs), .NET's `global.json` (`sdk.paths`: the SDK `dotnet` runs).
    ".yarnrc",
    ".yarnrc.yml",
    ".mvn/",
    ".jvmopts",
    ".sbtopts",
    ".bazeliskrc",
    "global.json",
];

/// Names of [`DEFAULT_PROTECTED`] that their tools also obey in every
/// directory below the root (rustup and cargo look in the current
/// directory and each parent, as yarn, Maven and `dotnet` do): the file
/// tools refuse them at any depth (red-team pass 4, R4-3). A name ending
/// in `/` covers a directory and what it holds; one with a `/` inside is
/// matched as the last components of a path. Commands are refused them at
/// the root only (docs/SECURITY.md, "Toolchain files below the root").
pub const PROTECTED_AT_ANY_DEPTH: [&str; 12] = [
    "rust-toolchain.toml",
    "rust-toolchain",
    ".cargo/config.toml",
    ".cargo/config",
    ".yarnrc",
    ".yarnrc.yml",
    ".mvn/",
    ".jvmopts",
    ".sbtopts",
    ".bazeliskrc",
    "global.json",
    // Amp looks for `.amp/settings.json` upward from its directory.
    ".amp/",
];

/// The name of the config file in the workspace root (also protected).
pub const CONFIG_FILE_NAME: &str = "cubby.toml";

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

/// What a workspace allows. Build it with [`Policy::builder`].
#[derive(Clone, Debug)]
pub struct Policy {
    mode: Mode,
    allow: BTreeSet<String>,
    deny: BTreeSet<String>,
    protected: Vec<PathRule>,
    deny_read: Vec<PathRule>,
    /// Git's surface as read by [`PolicyBuilder::build`] (with `git_of`).
    git: Option<crate::git::SurfaceRead>,
    /// How many of `protected` were configured (the rest come from the
    /// git surface read, which the `linux` provider reads again itself).
    configured_protected: usize,
    writable_roots: Vec<PathBuf>,
    host_deny_read: Vec<PathBuf>,
    host_private_dirs: Vec<PathBuf>,
    read_scope: ReadScope,
    readable_roots: Vec<PathBuf>,
    network: Option<NetworkConfig>,
    command_network: NetworkMode,
    exec_rules: Vec<ExecRule>,
    env: EnvConfig,
    limits: Limits,
    /// The skills directories (protected: in `protected` too).
    skills_dirs: Vec<WorkspacePath>,
    gateways: BTreeMap<String, GatewayConfig>,
}

impl Default for Policy {
    fn default() -> Policy {
        let mut b = PolicyBuilder::default();
        b.protect_defaults();
        // The defaults name no tool and no path rule: nothing to refuse.
        let protected = b.protected.clone();
        let configured = protected.len();
        b.assemble(protected, configured, Vec::new(), None)
    }
}

/// A digest of what a sandbox holds commands to under a policy (see
/// [`Policy::sandbox_digest`]): equal digests, equal confinement.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PolicyDigest([u8; 32]);

impl std::fmt::Display for PolicyDigest {
    /// The first 12 hex digits (enough to tell two apart in a message).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in &self.0[..DIGEST_SHOWN_BYTES] {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for PolicyDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PolicyDigest({self})")
    }
}

/// Bytes of a [`PolicyDigest`] shown in messages.
const DIGEST_SHOWN_BYTES: usize = 6;

/// What [`Policy::sandbox_digest`] covers, in the order it is hashed.
#[derive(serde::Serialize)]
struct DigestFacts<'a> {
    mode: Mode,
    protected: ShownRules<'a>,
    deny_read: ShownRules<'a>,
    writable_roots: PathBytes<'a>,
    host_deny_read: PathBytes<'a>,
    host_private_dirs: PathBytes<'a>,
    read_scope: ReadScope,
    readable_roots: PathBytes<'a>,
    network: NetworkMode,
    allowed_domains: &'a [String],
    denied_domains: &'a [String],
    allowed_cidrs: &'a [String],
    inject: Bindings<'a>,
    limits: &'a crate::config::SandboxLimits,
    gateways: &'a BTreeMap<String, GatewayConfig>,
}

/// Path rules as their paths show (`WorkspacePath::display`), serialised
/// without a string made for each.
struct ShownRules<'a>(&'a [PathRule]);

impl serde::Serialize for ShownRules<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|r| {
            if r.path.is_root() {
                std::borrow::Cow::Borrowed(".")
            } else {
                crate::path::escape_name(r.path.as_bytes())
            }
        }))
    }
}

/// Host paths as their bytes (any path serialises; two differ in the
/// digest whenever they differ).
struct PathBytes<'a>(&'a [PathBuf]);

impl serde::Serialize for PathBytes<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use std::os::unix::ffi::OsStrExt;
        s.collect_seq(self.0.iter().map(|p| p.as_os_str().as_bytes()))
    }
}

/// The bindings of injected secrets: each one's secret, hosts and headers
/// (not its value, which the policy does not hold).
struct Bindings<'a>(&'a [crate::config::InjectConfig]);

impl serde::Serialize for Bindings<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|i| (&i.secret, &i.hosts, &i.headers)))
    }
}

/// An `io::Write` that feeds a SHA-256.
struct HashWriter(sha2::Sha256);

impl std::io::Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        sha2::Digest::update(&mut self.0, buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
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
        if let Some(rule) = any_depth_rule(path) {
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

    /// The `deny_read` rule (as configured) that covers `path`, if one does.
    pub(crate) fn deny_read_rule(&self, path: &WorkspacePath) -> Option<&str> {
        self.deny_read
            .iter()
            .find(|r| r.covers(path))
            .map(|r| r.shown.as_str())
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

    /// The skills directories (relative to the root, protected).
    pub fn skills_dirs(&self) -> &[WorkspacePath] {
        &self.skills_dirs
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

    /// Extra directories commands may write (absolute or relative to the
    /// root), none in `read-only` mode.
    pub fn writable_roots(&self) -> &[PathBuf] {
        &self.writable_roots
    }

    /// Host paths commands may not read (absolute or `~/`), on top of the
    /// built-in credential stores.
    pub fn host_deny_read(&self) -> &[PathBuf] {
        &self.host_deny_read
    }

    /// Host directories whose content commands never see but for the
    /// sandbox's own roots beneath them (see
    /// [`PolicyBuilder::host_private_dirs`]).
    pub fn host_private_dirs(&self) -> &[PathBuf] {
        &self.host_private_dirs
    }

    /// What commands read of the host.
    pub fn read_scope(&self) -> ReadScope {
        self.read_scope
    }

    /// With `read_scope = "system"`: more directories commands read.
    pub fn readable_roots(&self) -> &[PathBuf] {
        &self.readable_roots
    }

    /// The `[network]` rules: the domain lists and address rules the web
    /// tools and the egress proxy enforce, the injected secrets' bindings.
    /// `None`: none given, and then the web tools answer `unsupported` even
    /// when offered, and commands' network is off (on in `full-access`).
    pub fn network(&self) -> Option<&NetworkConfig> {
        self.network.as_ref()
    }

    /// The gateways, by name (`[gateway.<name>]`).
    pub fn gateways(&self) -> &BTreeMap<String, GatewayConfig> {
        &self.gateways
    }

    /// The network commands get: [`PolicyBuilder::command_network`] when
    /// set, else `on` in `full-access`, else the `[network]` mode (`off`
    /// without one).
    pub fn command_network(&self) -> NetworkMode {
        self.command_network
    }

    /// This policy with commands' network set to `network` (as
    /// [`PolicyBuilder::command_network`]).
    #[must_use]
    pub fn with_command_network(mut self, network: NetworkMode) -> Policy {
        self.command_network = network;
        self
    }

    /// This policy for a sandbox rooted outside the workspace `workspace`
    /// (a secluded upstream server's): the workspace and the writable
    /// roots — every place the model's commands write — are masked as
    /// `host_deny_read` paths and nothing is writable but the new root;
    /// path rules and git's surface, which name places in the workspace,
    /// are left out; relative readable roots are made absolute against
    /// `workspace`.
    #[must_use]
    pub fn secluded_from(mut self, workspace: &Path) -> Policy {
        let written: Vec<PathBuf> = std::mem::take(&mut self.writable_roots)
            .into_iter()
            .map(|w| {
                if w.is_absolute() {
                    w
                } else {
                    workspace.join(w)
                }
            })
            .collect();
        for r in &mut self.readable_roots {
            if !r.is_absolute() && !r.starts_with("~") {
                *r = workspace.join(&*r);
            }
        }
        // A readable root in a masked place is unreadable anyway.
        self.readable_roots
            .retain(|r| !r.starts_with(workspace) && !written.iter().any(|w| r.starts_with(w)));
        self.host_deny_read.push(workspace.to_path_buf());
        self.host_deny_read.extend(written);
        self.protected.clear();
        self.configured_protected = 0;
        self.deny_read.clear();
        self.git = None;
        self.skills_dirs.clear();
        self
    }

    /// The ordered exec rules (`[[exec.rules]]`).
    pub fn exec_rules(&self) -> &[ExecRule] {
        &self.exec_rules
    }

    /// What commands' environments get (`[env]`: `pass`, `set`).
    pub fn env(&self) -> &EnvConfig {
        &self.env
    }

    /// The limits every tool and command is clamped to.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// A digest of the part of the policy a sandbox enforces on commands:
    /// the mode, protected paths (those git's config adds are read again by
    /// the provider itself) and `deny_read` paths, writable roots, what
    /// commands read of the host, their network and its rules (domain
    /// lists, addresses, injected secrets' bindings) and the sandbox's
    /// limits. A provider that confines commands reports the digest of the
    /// policy it was opened with ([`crate::Sandbox::enforced`]) and
    /// [`crate::ToolsetBuilder::build`] refuses a sandbox whose digest is
    /// not its policy's. Stable within one build of cubby.
    pub fn sandbox_digest(&self) -> PolicyDigest {
        use sha2::Digest;
        let no_rules = NetworkConfig::default();
        let rules = self.network.as_ref().unwrap_or(&no_rules);
        let facts = DigestFacts {
            mode: self.mode,
            protected: ShownRules(&self.protected[..self.configured_protected]),
            deny_read: ShownRules(&self.deny_read),
            writable_roots: PathBytes(&self.writable_roots),
            host_deny_read: PathBytes(&self.host_deny_read),
            host_private_dirs: PathBytes(&self.host_private_dirs),
            read_scope: self.read_scope,
            readable_roots: PathBytes(&self.readable_roots),
            network: self.command_network,
            allowed_domains: &rules.allowed_domains,
            denied_domains: &rules.denied_domains,
            allowed_cidrs: &rules.allowed_cidrs,
            inject: Bindings(&rules.inject),
            limits: &self.limits.sandbox,
            gateways: &self.gateways,
        };
        // Serialised straight into the hasher: a sandbox's open computes
        // this, and a tree of JSON values (a few dozen allocations, freed at
        // once) would land in the holes of the server's heap, pages that
        // every holder forked earlier then keeps a copy of (see
        // docs/PERFORMANCE.md, issue 15's idle sandboxes).
        let mut hasher = HashWriter(sha2::Sha256::new());
        if serde_json::to_writer(&mut hasher, &facts).is_err() {
            // Not reached: strings, bytes and numbers into a writer that
            // cannot fail. Were it, the digest would match no other.
            hasher.0.update(std::process::id().to_le_bytes());
        }
        PolicyDigest(hasher.0.finalize().into())
    }
}

/// The rule of git's executable surface that covers `path`, by name: `.git`
/// itself, or a [`crate::git::SURFACE_NAMES`] component beneath it, for the
/// first `.git` of the path at any depth (red-team pass 5, F6: the host's
/// git runs the fsmonitor and hooks of a repository below the root as it
/// does the root's, when an editor or a shell prompt works there).
fn git_surface_rule(path: &WorkspacePath) -> Option<String> {
    let names: Vec<&std::ffi::OsStr> = path.components().collect();
    let git = names.iter().position(|n| *n == crate::git::GIT_DIR_NAME)?;
    let mut at: PathBuf = names[..=git].iter().collect();
    let mut any = false;
    for name in names[git + 1..].iter().copied() {
        any = true;
        at.push(name);
        if crate::git::SURFACE_NAMES.iter().any(|s| *s == name) {
            return Some(format!(
                "`{}` is protected: part of git's executable surface (configuration, hooks, \
                 pointers to other git directories, the state of a rebase, cherry-pick or \
                 revert), which the host's git would act on",
                at.display()
            ));
        }
    }
    (!any).then(|| {
        format!(
            "`{}` is protected: git's directory or gitfile (at any depth: the host's git acts \
             on a repository below the root too), which tools may not create, replace or remove",
            at.display()
        )
    })
}

/// The rule of [`PROTECTED_AT_ANY_DEPTH`] that covers `path`, in any
/// directory.
fn any_depth_rule(path: &WorkspacePath) -> Option<String> {
    let names: Vec<&std::ffi::OsStr> = path.components().collect();
    for spec in PROTECTED_AT_ANY_DEPTH {
        let (spec, dir) = match spec.strip_suffix('/') {
            Some(s) => (s, true),
            None => (spec, false),
        };
        let parts: Vec<&str> = spec.split('/').collect();
        // Where the spec's components end in `path`: at its end, or (a
        // directory) anywhere before it.
        let ends = if dir {
            (parts.len()..=names.len()).collect::<Vec<_>>()
        } else {
            vec![names.len()]
        };
        for end in ends {
            let Some(start) = end.checked_sub(parts.len()) else {
                continue;
            };
            if names[start..end].iter().zip(&parts).all(|(n, p)| n == p) {
                let at: PathBuf = names[..end].iter().collect();
                return Some(format!(
                    "`{}` is protected: `{spec}` is obeyed by a tool the host runs (rustup, \
                     cargo, yarn, Maven, sbt, bazelisk, dotnet, Amp) in its directory and below, in \
                     any directory",
                    at.display()
                ));
            }
        }
    }
    None
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
    git_root: Option<(PathBuf, HostEnv)>,
    writable_roots: Vec<PathBuf>,
    host_deny_read: Vec<PathBuf>,
    host_private_dirs: Vec<PathBuf>,
    read_scope: ReadScope,
    readable_roots: Vec<PathBuf>,
    network: Option<NetworkConfig>,
    command_network: Option<NetworkMode>,
    exec_rules: Vec<ExecRule>,
    env: EnvConfig,
    limits: Limits,
    skills_dirs: Vec<String>,
    gateways: BTreeMap<String, GatewayConfig>,
}

impl PolicyBuilder {
    /// The policy of these settings with these (checked) path rules.
    fn assemble(
        &self,
        protected: Vec<PathRule>,
        configured_protected: usize,
        deny_read: Vec<PathRule>,
        git: Option<crate::git::SurfaceRead>,
    ) -> Policy {
        let command_network = match (self.command_network, self.mode) {
            (Some(n), _) => n,
            (None, Mode::FullAccess) => NetworkMode::On,
            (None, _) => self.network.as_ref().map_or(NetworkMode::Off, |n| n.mode),
        };
        Policy {
            mode: self.mode,
            allow: self.allow.iter().cloned().collect(),
            deny: self.deny.iter().cloned().collect(),
            protected,
            configured_protected,
            deny_read,
            git,
            writable_roots: self.writable_roots.clone(),
            host_deny_read: self.host_deny_read.clone(),
            host_private_dirs: self.host_private_dirs.clone(),
            read_scope: self.read_scope,
            readable_roots: self.readable_roots.clone(),
            network: self.network.clone(),
            command_network,
            exec_rules: self.exec_rules.clone(),
            env: self.env.clone(),
            limits: self.limits.clone(),
            skills_dirs: Vec::new(),
            gateways: self.gateways.clone(),
        }
    }

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
    /// [`PolicyBuilder::build`] runs (git's global and system config found
    /// through `host`: `HOME`, `XDG_CONFIG_HOME`, `GIT_CONFIG_*`); the
    /// `linux` provider reads them again at every command. Default: not
    /// read.
    pub fn git_of(&mut self, root: impl Into<PathBuf>, host: &HostEnv) -> &mut PolicyBuilder {
        self.git_root = Some((root.into(), host.clone()));
        self
    }

    /// Extra directories commands may write (absolute or relative to the
    /// root; they must exist when the sandbox opens). Default: none.
    pub fn writable_roots<I, P>(&mut self, roots: I) -> &mut PolicyBuilder
    where
        I: IntoIterator<Item = P>,
        P: Into<PathBuf>,
    {
        self.writable_roots
            .extend(roots.into_iter().map(Into::into));
        self
    }

    /// Host paths (absolute, or `~/` for `$HOME`) commands may not read, on
    /// top of the built-in credential stores. Default: none.
    pub fn host_deny_read<I, P>(&mut self, paths: I) -> &mut PolicyBuilder
    where
        I: IntoIterator<Item = P>,
        P: Into<PathBuf>,
    {
        self.host_deny_read
            .extend(paths.into_iter().map(Into::into));
        self
    }

    /// Host directories (absolute, or `~/` for `$HOME`) whose content
    /// commands never see, except the sandbox's own workspace and writable
    /// and readable roots beneath them: a directory where many sandboxes'
    /// workspaces live side by side (`serve --host`'s). The `linux`
    /// provider covers each with an empty directory of the sandbox's own
    /// and binds those roots back at their paths; one that is missing, or
    /// lies in the private `/tmp` (hidden there already) or in the
    /// workspace, is left as it is. Default: none.
    pub fn host_private_dirs<I, P>(&mut self, paths: I) -> &mut PolicyBuilder
    where
        I: IntoIterator<Item = P>,
        P: Into<PathBuf>,
    {
        self.host_private_dirs
            .extend(paths.into_iter().map(Into::into));
        self
    }

    /// What commands read of the host. Default: [`ReadScope::Host`].
    pub fn read_scope(&mut self, scope: ReadScope) -> &mut PolicyBuilder {
        self.read_scope = scope;
        self
    }

    /// With [`ReadScope::System`]: more directories commands read
    /// (absolute, `~/`, or relative to the root). Default: none.
    pub fn readable_roots<I, P>(&mut self, roots: I) -> &mut PolicyBuilder
    where
        I: IntoIterator<Item = P>,
        P: Into<PathBuf>,
    {
        self.readable_roots
            .extend(roots.into_iter().map(Into::into));
        self
    }

    /// The `[network]` section: commands' network mode (unless `full-access`
    /// or [`command_network`](Self::command_network) says otherwise), the
    /// domain lists and `allowed_cidrs` the web tools and the egress proxy
    /// enforce, the secrets the proxy injects. Default: none, and then
    /// `web_fetch` and `web_search` answer `unsupported` even when offered,
    /// so that a front that forgets its `[network]` section never widens
    /// what they reach. Pass `NetworkConfig::default()` for "every public
    /// address, no domain lists".
    pub fn network(&mut self, network: NetworkConfig) -> &mut PolicyBuilder {
        self.network = Some(network);
        self
    }

    /// The gateways (`[gateway.<name>]`, SPEC §5.5) commands reach inside
    /// the sandbox. Default: none.
    pub fn gateways(&mut self, gateways: BTreeMap<String, GatewayConfig>) -> &mut PolicyBuilder {
        self.gateways = gateways;
        self
    }

    /// The network commands get, whatever the mode and `[network]` say
    /// (`cubby exec --network`). Default: not set.
    pub fn command_network(&mut self, network: NetworkMode) -> &mut PolicyBuilder {
        self.command_network = Some(network);
        self
    }

    /// Ordered exec rules (`[[exec.rules]]`). Default: none.
    pub fn exec_rules(&mut self, rules: Vec<ExecRule>) -> &mut PolicyBuilder {
        self.exec_rules = rules;
        self
    }

    /// What commands' environments get (`[env]`: `pass`, `set`; see
    /// `sandbox::env`). Default: only the names SPEC §4 lists.
    pub fn env(&mut self, env: EnvConfig) -> &mut PolicyBuilder {
        self.env = env;
        self
    }

    /// The limits of every tool and of the sandbox. Default:
    /// [`Limits::default`].
    pub fn limits(&mut self, limits: Limits) -> &mut PolicyBuilder {
        self.limits = limits;
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

    /// Directories of skills (`skills.dirs`, relative to the root), read
    /// by each toolset when it is built and protected: read-only for the
    /// file tools and, on `linux`, for commands. Default: none (a
    /// [`crate::Workspace`] gives the config's, `["skills"]` by default).
    pub fn skills_dirs<I, S>(&mut self, dirs: I) -> &mut PolicyBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.skills_dirs.extend(dirs.into_iter().map(Into::into));
        self
    }

    /// Validates and builds.
    ///
    /// # Errors
    ///
    /// `invalid_input` for a path rule or a skills directory that is not
    /// relative to the root.
    /// (Tool names in `allow`/`deny` are checked against the tools a
    /// toolset has, when it is built: [`Policy::check_tools`].)
    pub fn build(&self) -> Result<Policy> {
        let mut protected = self.protected.clone();
        for spec in &self.protected_specs {
            protected.push(PathRule::parse(spec)?);
        }
        let mut skills_dirs = Vec::new();
        for spec in &self.skills_dirs {
            let rule = PathRule::parse(spec).map_err(|e| {
                Error::invalid_input(format!(
                    "skills.dirs entry `{spec}`: {}; name a directory inside the workspace, \
                     e.g. \"skills\"",
                    e.message()
                ))
            })?;
            skills_dirs.push(rule.path.clone());
            if !protected.iter().any(|r| r.covers(&rule.path)) {
                protected.push(PathRule {
                    shown: format!("{}/", rule.path.display()),
                    path: rule.path,
                });
            }
        }
        let configured = protected.len();
        let git = self.git_root.as_ref().map(|(root, host)| {
            let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.clone());
            crate::git::SurfaceRead::now(&root, host)
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
        let mut policy = self.assemble(protected, configured, deny_read, git);
        policy.skills_dirs = skills_dirs;
        Ok(policy)
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
            // A nested repository's, too (REDTEAM-5 F6).
            "a/.git",
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
        let policy = Policy::builder()
            .git_of(dir.path(), &HostEnv::default())
            .build()
            .unwrap();
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
    fn the_sandbox_digest_covers_what_commands_are_held_to_and_only_that() {
        let base = Policy::default().sandbox_digest();
        assert_eq!(Policy::builder().build().unwrap().sandbox_digest(), base);
        let mut limits = Limits::default();
        limits.run.max_output_bytes = 1;
        let same = [
            Policy::builder().deny(["search"]).build().unwrap(),
            Policy::builder().allow(["web_fetch"]).build().unwrap(),
            Policy::builder().limits(limits).build().unwrap(),
            Policy::builder()
                .command_network(NetworkMode::Off)
                .build()
                .unwrap(),
        ];
        for p in &same {
            assert_eq!(p.sandbox_digest(), base, "{p:?}");
        }
        let mut limits = Limits::default();
        limits.sandbox.processes = 7;
        let network = NetworkConfig {
            allowed_domains: vec!["example.com".into()],
            ..NetworkConfig::default()
        };
        let other = [
            Policy::builder().deny_read(["secrets/"]).build().unwrap(),
            Policy::builder().protect("keep.txt").build().unwrap(),
            Policy::builder().mode(Mode::ReadOnly).build().unwrap(),
            Policy::builder().writable_roots(["/srv"]).build().unwrap(),
            Policy::builder().host_deny_read(["~/x"]).build().unwrap(),
            Policy::builder()
                .host_private_dirs(["/srv/sandboxes"])
                .build()
                .unwrap(),
            Policy::builder()
                .read_scope(ReadScope::System)
                .build()
                .unwrap(),
            Policy::builder().limits(limits).build().unwrap(),
            Policy::builder().network(network).build().unwrap(),
            Policy::default().with_command_network(NetworkMode::On),
        ];
        for p in &other {
            assert_ne!(p.sandbox_digest(), base, "{p:?}");
        }
        // `full-access` gives commands the network unless told otherwise.
        let full = Policy::builder().mode(Mode::FullAccess).build().unwrap();
        assert_eq!(full.command_network(), NetworkMode::On);
    }

    #[test]
    fn the_sandbox_digest_takes_any_host_path() {
        use std::os::unix::ffi::OsStrExt;
        let root = |bytes: &[u8]| PathBuf::from(std::ffi::OsStr::from_bytes(bytes));
        let with = |bytes: &[u8]| {
            Policy::builder()
                .writable_roots([root(bytes)])
                .build()
                .unwrap()
                .sandbox_digest()
        };
        let (a, b) = (with(b"/srv/\xff"), with(b"/srv/\xfe"));
        assert_ne!(a, b);
        assert_ne!(a, Policy::default().sandbox_digest());
        assert_eq!(a, with(b"/srv/\xff"));
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
