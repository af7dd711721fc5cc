//! [`LinuxOptions`]: how a `linux` sandbox confines its commands, and
//! the options that enforce a [`Policy`].

use std::path::PathBuf;

use crate::config::{NetworkMode, ReadScope, SandboxLimits};
use crate::host_env::HostEnv;
use crate::net::{EgressOptions, GatewayOptions, Injection};
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
    /// The gateways commands reach inside the sandbox (`[gateway.<name>]`,
    /// whatever the network mode; none in `full-access`). Default: none.
    pub gateways: Vec<GatewayOptions>,
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
    /// Host directories (absolute, or `~/`) covered by an empty directory
    /// of the sandbox's own, the sandbox's roots beneath them bound back
    /// ([`PolicyBuilder::host_private_dirs`](crate::PolicyBuilder::host_private_dirs)).
    /// Default: none.
    pub host_private_dirs: Vec<PathBuf>,
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
    /// cubby's environment: `HOME` (`~/`, the credential stores, git's
    /// config), `PATH` and the toolchain homes (`read_scope = "system"`).
    pub host: HostEnv,
}

impl LinuxOptions {
    /// The options that enforce `policy` on commands: its mode, protected
    /// and `deny_read` paths, writable roots, what commands read of the
    /// host, their network ([`Policy::command_network`]) and its rules,
    /// the sandbox's limits; the `[[network.inject]]` secrets' values from
    /// `host` (an unset one gets no placeholder, with a warning).
    pub fn from_policy(policy: &Policy, host: &HostEnv) -> LinuxOptions {
        let rules = policy.network().cloned().unwrap_or_default();
        let mut inject = Vec::new();
        for entry in &rules.inject {
            match host.non_empty(&entry.secret) {
                Some(value) => inject.push(Injection {
                    name: entry.secret.clone(),
                    value,
                    hosts: entry.hosts.clone(),
                    headers: entry.headers.clone(),
                }),
                None => tracing::warn!(
                    "network.inject: `{}` is not set in the environment; commands get no \
                     placeholder",
                    entry.secret
                ),
            }
        }
        let gateways = policy
            .gateways()
            .iter()
            .map(|(name, config)| GatewayOptions {
                name: name.clone(),
                config: config.clone(),
                credential: config.credential.as_ref().and_then(|c| {
                    let value = host.non_empty(&c.secret);
                    if value.is_none() {
                        tracing::warn!(
                            "gateway.{name}: `{}` is not set in the environment; the gateway \
                             adds no credential",
                            c.secret
                        );
                    }
                    value
                }),
            })
            .collect();
        LinuxOptions {
            mode: policy.mode(),
            gateways,
            network: policy.command_network(),
            egress: EgressOptions { rules, inject },
            writable_roots: policy.writable_roots().to_vec(),
            protected: policy.protected_paths().cloned().collect(),
            deny_read: policy.deny_read_paths().cloned().collect(),
            host_deny_read: policy.host_deny_read().to_vec(),
            host_private_dirs: policy.host_private_dirs().to_vec(),
            read_scope: policy.read_scope(),
            readable_roots: policy.readable_roots().to_vec(),
            limits: policy.limits().sandbox.clone(),
            git_surface: policy.git_surface().cloned(),
            host: host.clone(),
        }
    }
}
