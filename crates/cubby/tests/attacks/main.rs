//! The attack suite: one test binary, a module per section (paths;
//! symlinks and swaps; git surface; protected paths; environment and
//! credentials; devices and terminals; resources and floods; network;
//! processes and privileges).
//!
//! Each section holds two kinds of attack:
//! - the *escape suite*: commands on the `linux` provider try to get out,
//!   and each attempt is proved contained from the host's side. Each
//!   section's `ATTACKS` table lists them, a row per attack ([`Attack`]:
//!   what it tries, what the host must show afterwards, the control it
//!   makes); [`SECTIONS`] gathers the tables, and `run_suite` runs every row
//!   in a fresh lab ([`lab`]). It runs twice: as the user running the tests
//!   (root here, and in CI) and as an unprivileged user that the test
//!   creates (`cubby-escape`): user namespaces, Landlock, capabilities and
//!   `RLIMIT_NPROC` behave differently for the two. The unprivileged run
//!   re-executes this test binary (copied where that user can read it)
//!   under that user's uid.
//! - attacks on path confinement through the file tools of the `local`
//!   provider, a `#[test]` each, on the layout of [`fixture`] (sections
//!   paths, symlinks and swaps, devices).
//!
//! A new attack is a function and a row in its section's table (or a
//! `#[test]` in its section, for the file tools); a new section is a module
//! and a line in [`SECTIONS`]. `CUBBY_ATTACKS=text` runs only the rows whose
//! name holds `text` (both runs; for working on one attack).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;
mod fixture;
mod lab;

mod devices;
mod env;
mod git;
mod network;
mod paths;
mod processes;
mod protected;
mod resources;
mod symlinks;

use common::processes_with;
use lab::{CHILD_ENV, Lab, Verdict, is_root, lab, marker, none_left};
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;

/// The unprivileged user the suite creates and runs as.
const ESCAPE_USER: &str = "cubby-escape";

/// The minimum number of attacks the suite must hold.
const MIN_ATTACKS: usize = 30;

/// Runs only the escape suite's rows whose name holds its value.
const ONLY_ENV: &str = "CUBBY_ATTACKS";

/// One attack of the escape suite: a row of its section's table.
pub struct Attack {
    /// What the command tries.
    pub name: &'static str,
    /// What the host shows afterwards when the sandbox holds: the verdict.
    pub expect: &'static str,
    /// The control the attack also makes, in the same run (mostly first),
    /// proving that its verdict can see an escape: the same done on the
    /// host, or with the sandbox's defaults. The attack returns
    /// `Err("control: …")` when it fails. `None` when the verdict needs none.
    pub control: Option<&'static str>,
    /// Runs the attack; `Err` describes the escape.
    pub run: fn(&Lab) -> Verdict,
}

/// The escape suite's tables, by section.
const SECTIONS: &[(&str, &[Attack])] = &[
    ("paths", paths::ATTACKS),
    ("symlinks and swaps", symlinks::ATTACKS),
    ("protected paths", protected::ATTACKS),
    ("environment and credentials", env::ATTACKS),
    ("devices and terminals", devices::ATTACKS),
    ("network", network::ATTACKS),
    ("processes and privileges", processes::ATTACKS),
    ("resources and floods", resources::ATTACKS),
    ("git surface", git::ATTACKS),
];

/// Runs every attack in a fresh lab; panics listing every escape.
fn run_suite(who: &str) {
    let total: usize = SECTIONS.iter().map(|(_, attacks)| attacks.len()).sum();
    assert!(total >= MIN_ATTACKS);
    // Controls: the sandbox does run commands, which may write inside, and
    // a marked process is seen from the host while it lives (so that the
    // "nothing left" checks are not vacuous).
    let control = lab();
    let m = marker("control");
    let out = control.sh(&format!(
        "echo inside > inside.txt && id -u && (bash -c 'exec -a {m} sleep 2' &) && sleep 0.5 && echo started"
    ));
    assert_eq!(
        std::fs::read_to_string(control.ws.join("inside.txt")).unwrap(),
        "inside\n",
        "[{who}] control: {}",
        out.text
    );
    let uid = rustix::process::getuid().as_raw();
    assert!(
        out.text.contains(&format!("\n{uid}\n")),
        "[{who}] control: {}",
        out.text
    );
    let out = control.tools.call(
        "start_process",
        json!({"name": "control", "command": format!("exec -a {m} sleep 30")}),
    );
    assert!(!out.is_error, "{}", out.text);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        processes_with(&m).len(),
        1,
        "[{who}] control process not seen"
    );
    drop(control);
    none_left(&m).unwrap();
    let mut escapes = Vec::new();
    let only = std::env::var(ONLY_ENV).ok();
    for (section, attacks) in SECTIONS {
        for Attack {
            name,
            expect,
            control,
            run,
        } in *attacks
        {
            if only.as_ref().is_some_and(|o| !name.contains(o.as_str())) {
                continue;
            }
            let lab = lab();
            let started = Instant::now();
            let verdict = run(&lab);
            eprintln!(
                "[{who}] {:<9} {section}: {name} ({} ms)",
                if verdict.is_ok() {
                    "contained"
                } else {
                    "ESCAPED"
                },
                started.elapsed().as_millis()
            );
            if let Err(detail) = verdict {
                let control = control.map_or(String::new(), |c| format!("; control: {c}"));
                escapes.push(format!(
                    "{section}: {name}: {detail} (expected: {expect}{control})"
                ));
            }
        }
    }
    assert!(
        escapes.is_empty(),
        "[{who}] {} of {total} attacks escaped:\n{}",
        escapes.len(),
        escapes.join("\n")
    );
}

#[test]
fn escape_suite_as_invoking_user() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    if !is_root() {
        eprintln!("note: not root; the suite runs as the invoking (unprivileged) user");
    }
    run_suite(if is_root() { "root" } else { "invoking user" });
}

/// Creates `cubby-escape` if needed and returns its uid and gid.
fn escape_user() -> (u32, u32) {
    let lookup = || {
        std::fs::read_to_string("/etc/passwd")
            .unwrap()
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.first() == Some(&ESCAPE_USER))
                    .then(|| (f[2].parse().unwrap(), f[3].parse().unwrap()))
            })
    };
    if let Some(ids) = lookup() {
        return ids;
    }
    let status = std::process::Command::new("useradd")
        .args([
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
        ])
        .arg(ESCAPE_USER)
        .status()
        .unwrap();
    assert!(status.success() || lookup().is_some(), "useradd failed");
    lookup().unwrap()
}

#[test]
fn escape_suite_as_unprivileged_user() {
    if std::env::var_os(CHILD_ENV).is_some() || !is_root() {
        run_suite("unprivileged");
        return;
    }
    use std::os::unix::process::CommandExt;
    let (uid, gid) = escape_user();
    // Copy this test binary where the unprivileged user can execute it.
    let dir = tempfile::Builder::new()
        .prefix("cubby-escape-bin-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("escape");
    std::fs::copy(std::env::current_exe().unwrap(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A home of its own, beneath /home (the read attacks plant credential
    // stores there).
    let home = PathBuf::from(format!("/home/cubby-escape-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(uid), Some(gid)).unwrap();
    struct Remove(PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _home = Remove(home.clone());
    let mut child = std::process::Command::new(&bin)
        .args([
            "--exact",
            "escape_suite_as_unprivileged_user",
            "--test-threads=1",
            "--nocapture",
        ])
        .env_clear()
        .env(CHILD_ENV, "1")
        .envs(std::env::var_os(ONLY_ENV).map(|v| (ONLY_ENV, v)))
        .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
        .env("HOME", &home)
        .env("TMPDIR", "/tmp")
        .current_dir("/tmp")
        .uid(uid)
        .gid(gid)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = String::new();
    let mut stderr = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    eprintln!("{stderr}");
    assert!(
        status.success() && stdout.contains("1 passed"),
        "the suite as {ESCAPE_USER} (uid {uid}) failed:\n{stdout}\n{stderr}"
    );
}
