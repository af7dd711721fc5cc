//! The escape suite's lab: a `linux` sandbox on a fresh workspace beside a
//! directory outside it, and the verdicts that inspect the host afterwards.
//!
//! Every attack is a shell command run through the `run` tool. An attack
//! is *contained* when the host afterwards shows no trace of it (no file
//! outside the root, protected paths unchanged, no connection accepted, no
//! process left, the host's process alive), whatever the command printed.

use crate::common::processes_with;
use cubby::{HostEnv, Limits, LinuxSandbox, Policy, PolicyBuilder, ToolOutput, Toolset};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Set in the child process that runs the suite as the unprivileged user.
pub const CHILD_ENV: &str = "CUBBY_ESCAPE_CHILD";
/// Limits small enough to hit quickly.
pub const TEST_PROCESSES: u64 = 400;
pub const TEST_FILE_SIZE_MB: u64 = 8;
pub const TEST_ADDRESS_SPACE_MB: u64 = 1024;

/// `/tmp` and `/dev/shm` of the labs that fill them.
pub const TEST_TMP_MB: u64 = 16;

/// Where labs are made: a directory commands can see (unlike `/tmp`, which
/// is private inside the sandbox), so that attacks on the outside directory
/// meet only the sandbox's own defences.
pub const LAB_BASE: &str = "/var/tmp";

/// A `deny_read` path below the root's top level.
pub const NESTED_SECRET_DIR: &str = "nested/deep/secrets";

/// A workspace and a sibling directory outside it, under one parent.
pub struct Lab {
    pub base: tempfile::TempDir,
    pub ws: PathBuf,
    pub outside: PathBuf,
    pub tools: Toolset,
}

/// A lab's directories: the workspace and a sibling outside it, under one
/// temporary parent beneath [`LAB_BASE`].
pub fn lab_dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let base = tempfile::Builder::new()
        .prefix("cubby-escape-")
        .tempdir_in(LAB_BASE)
        .unwrap();
    let ws = base.path().join("ws");
    let outside = base.path().join("ws-outside");
    std::fs::create_dir(&ws).unwrap();
    std::fs::create_dir(&outside).unwrap();
    (base, ws, outside)
}

/// The lab's toolset: a `linux` sandbox on `ws` opened from `policy`, and
/// the toolset under the same policy.
pub fn open_lab(base: tempfile::TempDir, ws: PathBuf, outside: PathBuf, policy: Policy) -> Lab {
    open_lab_in(base, ws, outside, policy, HostEnv::capture())
}

/// [`open_lab`] with `host` as cubby's environment (for the sandbox and the
/// toolset both).
pub fn open_lab_in(
    base: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
    policy: Policy,
    host: HostEnv,
) -> Lab {
    let sandbox = LinuxSandbox::open(&ws, &policy, &host).unwrap();
    let tools = Toolset::builder(Arc::new(sandbox))
        .policy(policy)
        .host_env(host)
        .track_changes(false)
        .build()
        .unwrap();
    Lab {
        base,
        ws,
        outside,
        tools,
    }
}

pub fn lab_with(configure: impl FnOnce(&mut PolicyBuilder, &mut Limits, &Path)) -> Lab {
    lab_in(HostEnv::capture(), configure)
}

/// [`lab_with`] with `host` as cubby's environment (a `PATH` or `HOME` of
/// the attack's).
pub fn lab_in(
    host: HostEnv,
    configure: impl FnOnce(&mut PolicyBuilder, &mut Limits, &Path),
) -> Lab {
    let (base, ws, outside) = lab_dirs();
    std::fs::write(outside.join("target.txt"), "original\n").unwrap();
    let nested = format!("{NESTED_SECRET_DIR}/");
    let mut policy = Policy::builder();
    policy.deny_read(["secrets/", nested.as_str(), ".env"]);
    let mut limits = Limits::default();
    limits.sandbox.processes = TEST_PROCESSES;
    limits.sandbox.file_size_mb = TEST_FILE_SIZE_MB;
    limits.sandbox.address_space_mb = TEST_ADDRESS_SPACE_MB;
    configure(&mut policy, &mut limits, &ws);
    let policy = policy.limits(limits).build().unwrap();
    open_lab_in(base, ws, outside, policy, host)
}

pub fn lab() -> Lab {
    lab_with(|_, _, _| {})
}

impl Drop for Lab {
    /// Lets the lab's directory be removed: copies of the masks of
    /// `deny_read` paths (`cp -r secrets s2`) are mode 000, which only root
    /// can list.
    fn drop(&mut self) {
        fn open_up(dir: &Path) {
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    open_up(&entry.path());
                }
            }
        }
        open_up(self.base.path());
    }
}

impl Lab {
    /// Runs `command` in the sandbox (the result is informative only).
    pub fn sh(&self, command: &str) -> ToolOutput {
        let out = self
            .tools
            .call("run", json!({"command": command, "timeout_ms": 20_000}));
        assert!(
            !out.text.starts_with("ERROR"),
            "the attack did not run at all: {}",
            out.text
        );
        out
    }

    pub fn out(&self, name: &str) -> PathBuf {
        self.outside.join(name)
    }
}

pub type Verdict = Result<(), String>;

/// Nothing at `path`. A placeholder cubby leaves there for the next
/// command (an empty directory of mode 0600, or a read-only file of at
/// most a byte) is waited for: it goes within cubby's `LINGER` (2 s); what
/// a command made stays, and fails.
pub fn absent(path: &Path) -> Verdict {
    use std::os::unix::fs::PermissionsExt;
    let deadline = std::time::Instant::now() + PLACEHOLDER_LINGER;
    loop {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return Ok(());
        };
        let mode = meta.permissions().mode() & 0o7777;
        let placeholder = (meta.is_dir()
            && mode == 0o600
            && std::fs::read_dir(path).is_ok_and(|mut d| d.next().is_none()))
            || (meta.is_file() && mode == 0o400 && meta.len() <= 1);
        if !placeholder || std::time::Instant::now() > deadline {
            return Err(format!("{} exists", path.display()));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// How long a placeholder nobody uses may stay in the workspace (cubby's
/// `LINGER`, 2 s), with room for a loaded machine.
const PLACEHOLDER_LINGER: std::time::Duration = std::time::Duration::from_secs(20);

pub fn unchanged(path: &Path, expected: &str) -> Verdict {
    let now = std::fs::read_to_string(path).unwrap_or_default();
    if now == expected {
        Ok(())
    } else {
        Err(format!("{} now holds {now:?}", path.display()))
    }
}

pub fn not_in(out: &ToolOutput, secret: &str) -> Verdict {
    if out.text.contains(secret) {
        Err(format!("output shows {secret:?}: {}", out.text))
    } else {
        Ok(())
    }
}

pub fn none_left(marker: &str) -> Verdict {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = processes_with(marker);
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("still running: {left:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn marker(tag: &str) -> String {
    format!("cubbyesc{tag}{}", std::process::id())
}

/// A python one-liner run with the system interpreter.
pub fn py(code: &str) -> String {
    format!("/usr/bin/python3 -c '{code}'")
}

/// Runs a python program on the host, as the user running the suite;
/// what it prints.
pub fn host_py(code: &str) -> String {
    let out = std::process::Command::new("/usr/bin/python3")
        .args(["-c", code])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}
