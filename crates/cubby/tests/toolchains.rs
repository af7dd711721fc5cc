//! Toolchains keep working in the `linux` provider's read views (SPEC §4
//! "What commands read"): with `read_scope = "host"` (the credential stores
//! masked) and `"system"` (only system directories, `PATH`'s toolchains,
//! the workspace and the configured roots readable). Each test runs the
//! same work in both scopes, through the `run` tool.
//!
//! What is tested, and what is not: `cargo build` of a crate without
//! dependencies, offline, with the `~/.cargo` and `~/.rustup` of the user
//! running the tests; a Python venv made in the workspace and run; `git
//! add` and `git commit` in a repository the user made on the host; `npm
//! ci` with network `allow` of a lock file without dependencies (the tests
//! reach only the loopback, so no registry fetch is made: what that would
//! add is the egress proxy's, tested in `egress.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use cubby::{HostEnv, LinuxSandbox, NetworkMode, Policy, ReadScope, ToolOutput, Toolset};
use serde_json::json;

/// A command's time limit: a first `cargo build` on a busy machine.
const RUN_TIMEOUT_MS: u64 = 120_000;

/// Where workspaces are made (seen by commands as on the host).
const BASE: &str = "/var/tmp";

fn workspace() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("cubby-toolchain-")
        .tempdir_in(BASE)
        .unwrap()
}

fn tools(root: &Path, scope: ReadScope, network: NetworkMode) -> Toolset {
    let policy = Policy::builder()
        .read_scope(scope)
        .command_network(network)
        .build()
        .unwrap();
    let host = HostEnv::capture();
    let sandbox = LinuxSandbox::open(root, &policy, &host).unwrap();
    Toolset::builder(Arc::new(sandbox))
        .policy(policy)
        .host_env(host)
        .track_changes(false)
        .build()
        .unwrap()
}

fn run(t: &Toolset, command: &str) -> ToolOutput {
    t.call(
        "run",
        json!({"command": command, "timeout_ms": RUN_TIMEOUT_MS}),
    )
}

/// Fails unless `tool` runs on the host (the control: what the sandbox
/// must then run too).
fn on_host(tool: &str) {
    let ok = std::process::Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(ok, "{tool} is not installed on this machine");
}

const SCOPES: [ReadScope; 2] = [ReadScope::Host, ReadScope::System];

#[test]
fn cargo_builds_a_crate_offline() {
    on_host("cargo");
    for scope in SCOPES {
        let dir = workspace();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(
            dir.path().join("Cargo.toml"),
            "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("src/main.rs"),
            "fn main() { println!(\"tiny {}\", 6 * 7); }\n",
        )
        .unwrap();
        let t = tools(dir.path(), scope, NetworkMode::Off);
        let out = run(&t, "cargo build --offline -q && ./target/debug/tiny");
        assert!(
            out.text.starts_with("OK exit=0") && out.text.contains("tiny 42"),
            "{scope:?}: {}",
            out.text
        );
    }
}

#[test]
fn a_python_venv_in_the_workspace() {
    on_host("python3");
    for scope in SCOPES {
        let dir = workspace();
        let t = tools(dir.path(), scope, NetworkMode::Off);
        let out = run(
            &t,
            "python3 -m venv .venv && .venv/bin/python -c 'import sys; print(sys.prefix == sys.base_prefix, 6 * 7)'",
        );
        assert!(
            out.text.starts_with("OK exit=0") && out.text.contains("False 42"),
            "{scope:?}: {}",
            out.text
        );
    }
}

#[test]
fn git_add_and_commit_in_the_users_repository() {
    on_host("git");
    for scope in SCOPES {
        let dir = workspace();
        let init = std::process::Command::new("git")
            .args(["init", "-q"])
            .current_dir(dir.path())
            .status()
            .unwrap();
        assert!(init.success());
        std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
        let t = tools(dir.path(), scope, NetworkMode::Off);
        let out = run(
            &t,
            "git add a.txt && git -c user.name=t -c user.email=t@example.com commit -qm first \
             && git log --oneline | wc -l && git status --short",
        );
        assert!(
            out.text.starts_with("OK exit=0") && out.text.contains("\n1\n"),
            "{scope:?}: {}",
            out.text
        );
    }
}

#[test]
fn npm_ci_with_network_allow() {
    on_host("npm");
    for scope in SCOPES {
        let dir = workspace();
        std::fs::write(
            dir.path().join("package.json"),
            r#"{"name": "tiny", "version": "1.0.0"}"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("package-lock.json"),
            r#"{"name": "tiny", "version": "1.0.0", "lockfileVersion": 3, "requires": true,
                "packages": {"": {"name": "tiny", "version": "1.0.0"}}}"#,
        )
        .unwrap();
        let t = tools(dir.path(), scope, NetworkMode::Allow);
        // `npm ci` refuses to run without a lock file that matches.
        let out = run(&t, "npm ci --no-audit --no-fund");
        assert!(
            out.text.starts_with("OK exit=0") && out.text.contains("up to date"),
            "{scope:?}: {}",
            out.text
        );
    }
}

/// Renames and hard links across directories (what `pip`, `cargo`'s
/// uplifting and `mv` of a build's output do): each Landlock layer of a
/// command must handle and grant `REFER`, or the kernel refuses them with
/// `EXDEV` (and `mv` falls back to copying). Control: the same on the host.
#[test]
fn renames_and_links_across_directories() {
    on_host("python3");
    let script = "import os\n\
        os.makedirs('a/x', exist_ok=True); os.makedirs('b', exist_ok=True)\n\
        open('a/f', 'w').write('f'); open('a/x/g', 'w').write('g')\n\
        os.rename('a/f', 'b/f'); os.rename('a/x', 'b/x'); os.link('b/f', 'a/f2')\n\
        print('moved', open('b/x/g').read(), open('a/f2').read())\n";
    let host = workspace();
    std::fs::write(host.path().join("t.py"), script).unwrap();
    let out = std::process::Command::new("python3")
        .arg("t.py")
        .current_dir(host.path())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "moved g f\n",
        "control: {out:?}"
    );
    for scope in SCOPES {
        let dir = workspace();
        std::fs::write(dir.path().join("t.py"), script).unwrap();
        let t = tools(dir.path(), scope, NetworkMode::Off);
        let out = run(
            &t,
            "python3 t.py && mkdir -p /tmp/c && echo t > /tmp/c/t && mv /tmp/c/t t2 && cat t2",
        );
        assert!(
            out.text.starts_with("OK exit=0") && out.text.contains("moved g f\nt\n"),
            "{scope:?}: {}",
            out.text
        );
    }
}
