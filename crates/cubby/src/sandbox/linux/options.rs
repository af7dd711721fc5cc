//! [`LinuxOptions`]: how a `linux` sandbox confines its commands, and
//! the options that enforce a [`Policy`].

use std::path::PathBuf;

use crate::config::{NetworkMode, ReadScope, SandboxLimits};
use crate::net::EgressOptions;
use crate::path::WorkspacePath;
use crate::policy::{Mode, Policy};

/// How a `linux` sandbox confines its commands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinuxOptions {
    /// `read-only` makes everything read-only; `full-access` runs commands
    /// unconfined.
    pub mode: Mode,
    /// `off`: a network namespace with loopback only and no non-unix
    /// sockets; `allow`: the same namespace, where the egress proxy listens
    /// (its only route out); `on`: the host's network.
    pub network: NetworkMode,
    /// What the egress proxy enforces with network `allow`.
    pub egress: EgressOptions,
    /// Extra writable directories (absolute or relative to the root).
    pub writable_roots: Vec<PathBuf>,
    /// Paths (relative to the root) that commands may not change.
    pub protected: Vec<WorkspacePath>,
    /// Paths (relative to the root) that commands may not read, whenever
    /// they are created.
    pub deny_read: Vec<WorkspacePath>,
    /// Host paths (absolute, or `~/` for `$HOME`) that commands may not
    /// read, on top of the built-in credential stores (SPEC §4; see
    /// `read_view.rs`). Default: none.
    pub host_deny_read: Vec<PathBuf>,
    /// `Host` (default): commands read the whole host but the credential
    /// stores; `System`: only the system directories, `PATH`'s toolchains,
    /// the workspace, the writable roots and [`readable_roots`].
    ///
    /// [`readable_roots`]: LinuxOptions::readable_roots
    pub read_scope: ReadScope,
    /// With [`ReadScope::System`]: more directories commands read
    /// (absolute, `~/`, or relative to the root; they must exist).
    /// Default: none.
    pub readable_roots: Vec<PathBuf>,
    /// rlimits.
    pub limits: SandboxLimits,
    /// Git's executable surface as the caller read it a moment ago (the
    /// policy's, [`Policy::git_surface`]): the sandbox's open and its first
    /// command use it instead of reading the files again while it is
    /// fresh ([`crate::git::SHARE_WINDOW`]). Taken by
    /// [`LinuxSandbox::open`]. Default: none (read at the open).
    pub git_surface: Option<crate::git::SurfaceRead>,
}

impl LinuxOptions {
    /// Options that enforce `policy` (mode, protected paths, `deny_read`)
    /// with the network off and default limits.
    pub fn from_policy(policy: &Policy) -> LinuxOptions {
        LinuxOptions {
            mode: policy.mode(),
            network: if policy.mode() == Mode::FullAccess {
                NetworkMode::On
            } else {
                NetworkMode::Off
            },
            egress: EgressOptions::default(),
            writable_roots: Vec::new(),
            protected: policy.protected_paths().cloned().collect(),
            deny_read: policy.deny_read_paths().cloned().collect(),
            host_deny_read: Vec::new(),
            read_scope: ReadScope::Host,
            readable_roots: Vec::new(),
            limits: SandboxLimits::default(),
            git_surface: policy.git_surface().cloned(),
        }
    }
}
