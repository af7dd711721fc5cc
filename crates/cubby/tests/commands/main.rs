//! `run` and background processes on the `local`, `linux` and `remote` providers:
//! verdicts, output order and caps, redaction, whole-tree cleanup,
//! concurrency, servers.
//!
//! One suite (`suite.rs`): each case is a function of a [`Fixture`], which
//! opens the provider under test over a workspace, as the file-tool suite
//! is made. [`providers!`] at the bottom instantiates every case for each
//! provider (a module per provider: `local::verdict_forms`), with the cases
//! that hold on one provider only (`linux_only.rs`). A new provider is one
//! `Fixture` and one line there.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;
mod linux_only;
mod suite;

use common::processes_with;
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cubby::config::{ExecDecision, ExecRule, Limits, RunLimits};
use cubby::exec_policy::RunDecision;
use cubby::process::CancelToken;
use cubby::sandbox::Sandbox;
use cubby::{HostEnv, LinuxSandbox, NetworkMode, Policy, ToolOutput, Toolset};
use serde_json::{Value, json};

fn workspace() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn run(t: &Toolset, args: Value) -> ToolOutput {
    let out = t.call("run", args.clone());
    assert!(!out.is_error, "run {args}: {}", out.text);
    out
}

fn unique(tag: &str) -> String {
    format!(
        "cubby-test-{tag}-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos() ^ (std::ptr::addr_of!(tag) as u128)
    )
}

/// A script in the workspace that sleeps, so its name marks its processes.
fn sleeper(dir: &std::path::Path, marker: &str) -> String {
    let path = dir.join(format!("{marker}.sh"));
    std::fs::write(&path, "#!/bin/sh\nsleep 1000\n").unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    format!("./{marker}.sh")
}

/// Runs the calling test again alone in a child process (fd and child
/// counts are per process, and other tests would move them). Returns true
/// in the parent, which should then return; false in the child.
fn rerun_isolated(module: &str, test: &str) -> bool {
    rerun_isolated_with(module, test, &[])
}

/// [`rerun_isolated`] with `vars` added to the child's environment (what
/// cubby's environment holds when an agent client starts it), without
/// touching this process's environment.
fn rerun_isolated_with(module: &str, test: &str, vars: &[(&str, &str)]) -> bool {
    if std::env::var_os("CUBBY_TEST_ISOLATED").is_some() {
        return false;
    }
    let name = format!(
        "{}::{test}",
        module.split_once("::").map_or(module, |(_, rest)| rest)
    );
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &name, "--test-threads=1", "--nocapture"])
        .env("CUBBY_TEST_ISOLATED", "1")
        .envs(vars.iter().copied())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{name} in a child process:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    true
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn child_count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .map(|task| {
            std::fs::read_to_string(task.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .count()
        })
        .sum()
}

/// A loopback port held for a server that a command starts on it: a
/// socket bound with `SO_REUSEPORT` that never listens. No other process
/// can bind the port while it is held (unlike a port found free and
/// released, which another test may take first); a server of the same user
/// that also sets `SO_REUSEPORT` can, and only it accepts connections.
struct HeldPort {
    _socket: std::os::fd::OwnedFd,
    port: u16,
}

fn held_port() -> HeldPort {
    use rustix::net::{AddressFamily, SocketType, sockopt};
    let socket = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
    sockopt::set_socket_reuseport(&socket, true).unwrap();
    let any = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0);
    rustix::net::bind(&socket, &any).unwrap();
    let bound = rustix::net::getsockname(&socket).unwrap();
    let port = std::net::SocketAddr::try_from(bound).unwrap().port();
    HeldPort {
        _socket: socket,
        port,
    }
}

#[test]
fn virtual_provider_offers_no_commands() {
    let t = Toolset::builder(cubby::virtual_sandbox(cubby::MemoryFs::new()))
        .build()
        .unwrap();
    assert!(!t.tool_names().contains(&"run"));
    let out = t.call("run", json!({"command": "true"}));
    assert!(out.text.starts_with("ERROR unsupported:"), "{}", out.text);
}

/// The provider under test, as the command suite sees it.
trait Fixture {
    /// The name of the module its cases are instantiated in (the test
    /// binary's filter for re-running one case alone).
    fn name(&self) -> &'static str;
    /// A sandbox over `dir`, with the provider's defaults.
    fn sandbox(&self, dir: &std::path::Path) -> Arc<dyn Sandbox>;
    /// A sandbox over `dir` whose commands reach the host's network (a
    /// server the test reaches from the host needs it).
    fn networked_sandbox(&self, dir: &std::path::Path) -> Arc<dyn Sandbox>;
    /// The policy a toolset over [`Fixture::networked_sandbox`] is given
    /// (the one the sandbox enforces).
    fn networked_policy(&self) -> Policy;
}

/// The `local` provider: host processes under the reaper shim.
struct Local;

impl Fixture for Local {
    fn name(&self) -> &'static str {
        "local"
    }

    fn sandbox(&self, dir: &std::path::Path) -> Arc<dyn Sandbox> {
        cubby::local_sandbox(dir).unwrap()
    }

    fn networked_sandbox(&self, dir: &std::path::Path) -> Arc<dyn Sandbox> {
        self.sandbox(dir)
    }

    fn networked_policy(&self) -> Policy {
        Policy::default()
    }
}

/// The `linux` provider: namespaces, Landlock, seccomp, rlimits.
struct Linux;

impl Fixture for Linux {
    fn name(&self) -> &'static str {
        "linux"
    }

    fn sandbox(&self, dir: &std::path::Path) -> Arc<dyn Sandbox> {
        Arc::new(LinuxSandbox::open(dir, &Policy::default(), &HostEnv::capture()).unwrap())
    }

    /// A server the test reaches from the host needs the host's network.
    fn networked_policy(&self) -> Policy {
        Policy::default().with_command_network(NetworkMode::On)
    }

    fn networked_sandbox(&self, dir: &std::path::Path) -> Arc<dyn Sandbox> {
        Arc::new(LinuxSandbox::open(dir, &self.networked_policy(), &HostEnv::capture()).unwrap())
    }
}

/// The `remote` provider: a `linux` sandbox of a far cubby (in this
/// process, over loopback HTTP) whose workspace is `dir`.
struct Remote;

impl Fixture for Remote {
    fn name(&self) -> &'static str {
        "remote"
    }

    fn sandbox(&self, dir: &std::path::Path) -> Arc<dyn Sandbox> {
        common::remote::far_linux().sandbox(dir)
    }

    /// The local policy does not confine the far side's commands: the far
    /// cubby's config lets them reach the network.
    fn networked_policy(&self) -> Policy {
        Policy::default()
    }

    fn networked_sandbox(&self, dir: &std::path::Path) -> Arc<dyn Sandbox> {
        common::remote::far_linux_networked().sandbox(dir)
    }
}

/// A toolset over the provider's sandbox on `dir` (no change tracking).
fn tools(p: &dyn Fixture, dir: &std::path::Path) -> Toolset {
    Toolset::builder(p.sandbox(dir))
        .host_env(HostEnv::capture())
        .track_changes(false)
        .build()
        .unwrap()
}

/// One provider's module: a `#[test]` per case of the suite, calling it
/// with the provider's fixture, and the provider's own cases.
macro_rules! instantiate {
    ($provider:ident, $fixture:expr, [$($case:ident),* $(,)?], [$($own:ident :: $own_case:ident),* $(,)?]) => {
        mod $provider {
            $(
                #[test]
                fn $case() {
                    super::suite::$case(&$fixture);
                }
            )*
            $(
                #[test]
                fn $own_case() {
                    super::$own::$own_case(&$fixture);
                }
            )*
        }
    };
}

/// Instantiates the suite's cases for every provider listed.
macro_rules! providers {
    ($cases:tt; $($provider:ident: $fixture:expr => $own:tt),* $(,)?) => {
        $( instantiate!($provider, $fixture, $cases, $own); )*
    };
}

providers!(
    [
        verdict_forms,
        interleaved_stdout_and_stderr_keep_their_order,
        output_is_capped_with_a_marker_and_pageable,
        ansi_is_stripped_and_secrets_are_redacted_across_reads,
        environment_is_non_interactive,
        timeout_kills_a_double_forked_daemon,
        a_finished_run_leaves_no_daemon_behind,
        stop_process_kills_a_double_forked_daemon,
        stop_process_kills_what_ignores_sigterm,
        cancellation_kills_the_whole_tree,
        concurrent_runs_complete_and_release_everything,
        start_process_with_port_serves_pages_and_stops,
        write_stdin_feeds_a_process,
        dropping_the_toolset_ends_its_processes,
        runs_are_kept_as_finished_processes,
        exec_rules_and_before_run_decide,
        events_stream_shaped_chunks,
        events_have_their_control_characters_neutralized,
        changes_sees_an_in_place_edit_with_the_mtime_put_back,
        a_call_subscriber_gets_only_its_own_output,
        walking_the_workspace_finds_nothing_unreadable,
        the_hosts_api_keys_never_reach_commands,
        retained_logs_of_many_processes_stay_within_the_budget,
        a_start_refused_by_the_log_budget_never_runs,
    ];
    local: crate::Local => [],
    remote: crate::Remote => [],
    linux: crate::Linux => [
        linux_only::commands_get_pseudo_terminals_of_their_own,
        linux_only::file_tools_do_not_see_the_reservations_of_a_running_command,
        linux_only::ports_of_a_network_of_its_own_are_not_handed_out_as_the_hosts,
        linux_only::a_root_replaced_before_the_first_command_is_refused,
    ],
);
