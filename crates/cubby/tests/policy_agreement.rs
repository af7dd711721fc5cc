//! One policy, given once: a toolset refuses a sandbox that holds commands
//! to another policy than its own (docs/SECURITY.md, "One policy"), and
//! [`cubby::Workspace`] assembles the sandbox and the toolsets from one.
//!
//! The attack: a library user opens a `linux` sandbox with one policy and
//! builds the toolset with another that lists `secrets/` in `deny_read`.
//! Before the check, the build succeeded: `read_file` refused
//! `secrets/key` while `run cat secrets/key` printed it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use cubby::{Config, HostEnv, LinuxSandbox, Policy, ProviderKind, Toolset, Workspace};
use serde_json::json;

const SECRET_LINE: &str = "hunter2-in-a-denied-file";

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("secrets")).unwrap();
    std::fs::write(dir.path().join("secrets/key"), format!("{SECRET_LINE}\n")).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "hello\n").unwrap();
    dir
}

fn deny_secrets() -> Policy {
    Policy::builder().deny_read(["secrets/"]).build().unwrap()
}

#[test]
fn a_toolset_refuses_a_linux_sandbox_opened_with_another_policy() {
    let dir = workspace();
    let host = HostEnv::capture();
    let other = Policy::builder().build().unwrap();
    let sandbox = LinuxSandbox::open(dir.path(), &other, &host).unwrap();
    let built = Toolset::builder(Arc::new(sandbox))
        .policy(deny_secrets())
        .host_env(host)
        .track_changes(false)
        .build();
    if let Ok(tools) = &built {
        let run = tools.call("run", json!({"command": "cat secrets/key"}));
        panic!(
            "the toolset was built over a sandbox enforcing another policy; \
             run printed: {}",
            run.text
        );
    }
    let err = built.err().unwrap();
    assert_eq!(err.kind(), cubby::ErrorKind::InvalidInput, "{err}");
    assert!(err.message().contains("another policy"), "{err}");
}

#[test]
fn the_same_policy_on_both_sides_holds_files_and_commands_alike() {
    let dir = workspace();
    let host = HostEnv::capture();
    let policy = deny_secrets();
    let sandbox = LinuxSandbox::open(dir.path(), &policy, &host).unwrap();
    assert_eq!(
        cubby::Sandbox::enforced(&sandbox),
        Some(&policy.sandbox_digest())
    );
    let tools = Toolset::builder(Arc::new(sandbox))
        .policy(policy)
        .host_env(host)
        .track_changes(false)
        .build()
        .unwrap();
    let read = tools.call("read_file", json!({"path": "secrets/key"}));
    assert!(read.text.starts_with("ERROR denied:"), "{}", read.text);
    let run = tools.call("run", json!({"command": "cat secrets/key; cat notes.txt"}));
    assert!(!run.text.contains(SECRET_LINE), "{}", run.text);
    assert!(run.text.contains("hello"), "{}", run.text);
}

#[test]
fn what_only_the_toolset_enforces_may_differ() {
    // Tools offered are the toolset's alone: the sandbox holds commands to
    // the same rules either way.
    let dir = workspace();
    let host = HostEnv::capture();
    let sandbox = LinuxSandbox::open(dir.path(), &deny_secrets(), &host).unwrap();
    let fewer = Policy::builder()
        .deny_read(["secrets/"])
        .deny(["search"])
        .build()
        .unwrap();
    assert_eq!(fewer.sandbox_digest(), deny_secrets().sandbox_digest());
    let tools = Toolset::builder(Arc::new(sandbox))
        .policy(fewer)
        .track_changes(false)
        .build()
        .unwrap();
    assert!(!tools.tool_names().contains(&"search"));
}

#[test]
fn providers_that_confine_no_command_say_so() {
    let dir = workspace();
    let local = cubby::local_sandbox(dir.path()).unwrap();
    assert_eq!(local.enforced(), None);
    let virt = cubby::virtual_sandbox(cubby::MemoryFs::new());
    assert_eq!(virt.enforced(), None);
    // So any policy builds over them (commands on `local` are host
    // processes, as before: docs/SECURITY.md).
    Toolset::builder(local)
        .policy(deny_secrets())
        .track_changes(false)
        .build()
        .unwrap();
}

#[test]
fn a_workspace_gives_the_sandbox_and_every_toolset_one_policy() {
    let dir = workspace();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let config = Config {
        deny_read: vec!["secrets/".into()],
        secrets: vec!["CUBBY_AGREEMENT_TOKEN".into()],
        provider: Some(ProviderKind::Linux),
        ..Config::default()
    };
    // A made-up environment: the library reads nothing else.
    let host = HostEnv::capture().with("CUBBY_AGREEMENT_TOKEN", "tok-4711-abcdef");
    let workspace = Workspace::from_config(&root, &config, None, &host).unwrap();
    let factory = workspace.factory(false).unwrap();
    let tools = factory().unwrap();
    let read = tools.call("read_file", json!({"path": "secrets/key"}));
    assert!(read.text.starts_with("ERROR denied:"), "{}", read.text);
    let run = tools.call(
        "run",
        json!({"command": "cat secrets/key; echo \"token=$CUBBY_AGREEMENT_TOKEN\""}),
    );
    assert!(!run.text.contains(SECRET_LINE), "{}", run.text);
    assert!(
        run.text.contains("token=[REDACTED:CUBBY_AGREEMENT_TOKEN]"),
        "{}",
        run.text
    );
    // A second run of the factory: the same sandbox, the same policy.
    assert!(factory().is_ok());
}
