//! `run` and background processes on the `local` and `linux` providers:
//! verdicts, output order and caps, redaction, whole-tree cleanup,
//! concurrency, servers. One suite (`suites/commands.rs`), included once
//! per provider.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

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

/// The `local` provider: host processes under the reaper shim.
mod local {
    use super::*;

    fn sandbox(dir: &std::path::Path) -> Arc<dyn Sandbox> {
        cubby::local_sandbox(dir).unwrap()
    }

    fn networked_sandbox(dir: &std::path::Path) -> Arc<dyn Sandbox> {
        sandbox(dir)
    }

    fn networked_policy() -> Policy {
        Policy::default()
    }

    include!("suites/commands.rs");
}

/// The `linux` provider: namespaces, Landlock, seccomp, rlimits.
mod linux {
    use super::*;

    fn sandbox(dir: &std::path::Path) -> Arc<dyn Sandbox> {
        Arc::new(LinuxSandbox::open(dir, &Policy::default(), &HostEnv::capture()).unwrap())
    }

    /// A server the test reaches from the host needs the host's network.
    fn networked_policy() -> Policy {
        Policy::default().with_command_network(NetworkMode::On)
    }

    fn networked_sandbox(dir: &std::path::Path) -> Arc<dyn Sandbox> {
        Arc::new(LinuxSandbox::open(dir, &networked_policy(), &HostEnv::capture()).unwrap())
    }

    include!("suites/commands.rs");

    #[test]
    fn commands_get_pseudo_terminals_of_their_own() {
        let dir = workspace();
        let t = tools(dir.path());
        let out = run(
            &t,
            json!({"command": "python3 -c 'import os; m, s = os.openpty(); print(os.ttyname(s)); os.write(m, b\"typed\\n\"); print(os.read(s, 16))'; script -qec 'tty' /dev/null"}),
        );
        assert!(out.text.starts_with("OK exit=0 "), "{}", out.text);
        // Python's, then `script`'s (the number may be reused).
        assert_eq!(out.text.matches("\n/dev/pts/").count(), 2, "{}", out.text);
        assert!(out.text.contains("b'typed\\n'"), "{}", out.text);
    }

    #[test]
    fn file_tools_do_not_see_the_reservations_of_a_running_command() {
        let dir = workspace();
        std::fs::write(dir.path().join("notes.txt"), "hello\n").unwrap();
        let t = tools(dir.path());
        let marker = unique("reserved");
        let script = sleeper(dir.path(), &marker);
        let out = t.call("start_process", json!({"name": "svc", "command": script}));
        assert!(!out.is_error, "{}", out.text);
        // On the host, missing protected paths are placeholders now.
        let reserved = [".mcp.json", ".codex", ".claude", "cubby.toml", ".git"];
        for name in reserved {
            assert!(dir.path().join(name).is_dir(), "{name} is reserved");
        }
        let listing = t.call("list_files", json!({"path": "", "depth": 3}));
        let found = t.call("glob", json!({"pattern": "**/*"}));
        let hidden = t.call("glob", json!({"pattern": ".*"}));
        for out in [&listing, &found, &hidden] {
            assert!(!out.is_error, "{}", out.text);
            for name in reserved {
                assert!(!out.text.contains(name), "{name}: {}", out.text);
            }
        }
        assert!(listing.text.contains("notes.txt"), "{}", listing.text);
        assert!(found.text.contains("notes.txt"), "{}", found.text);
        for (tool, args) in [
            ("read_file", json!({"path": ".mcp.json"})),
            ("read_file", json!({"path": "cubby.toml"})),
            ("list_files", json!({"path": ".claude"})),
            ("view_file", json!({"path": ".codex"})),
        ] {
            let out = t.call(tool, args.clone());
            assert!(
                out.text.starts_with("ERROR not_found"),
                "{tool} {args}: {}",
                out.text
            );
        }
        let out = t.call("search", json!({"query": "hello"}));
        assert!(out.text.contains("notes.txt"), "{}", out.text);
        assert!(!t.call("stop_process", json!({"name": "svc"})).is_error);
        for name in reserved {
            assert!(!dir.path().join(name).exists(), "{name} is released");
        }
    }
}
