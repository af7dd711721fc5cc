//! The official MCP conformance suite (`@modelcontextprotocol/conformance`,
//! server scenarios) against `cubby serve`, through
//! `tests/mcp/conformance.sh`: the script installs the suite and Node 22 into
//! `target/mcp-conformance` (npm) the first time, starts the server on a free
//! loopback port, runs every scenario and fails on any failure not listed in
//! `tests/mcp/conformance-baseline.txt`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::repo_root;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest the script may take, a first install of the suite included.
const DEADLINE: Duration = Duration::from_secs(15 * 60);

fn signal_group(pgid: u32, signal: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pgid as i32) {
        let _ = rustix::process::kill_process_group(pid, signal);
    }
}

#[test]
fn official_conformance_suite_passes_outside_the_baseline() {
    let root = repo_root();
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut child = Command::new("bash")
        .arg(root.join("tests/mcp/conformance.sh"))
        .env("CUBBY_BIN", env!("CARGO_BIN_EXE_cubby"))
        .current_dir(&root)
        .stdin(Stdio::null())
        .stdout(log.reopen().unwrap())
        .stderr(log.reopen().unwrap())
        .process_group(0)
        .spawn()
        .expect("bash is needed to run tests/mcp/conformance.sh");
    let pgid = child.id();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > DEADLINE {
            signal_group(pgid, rustix::process::Signal::TERM);
            std::thread::sleep(Duration::from_secs(5));
            signal_group(pgid, rustix::process::Signal::KILL);
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = std::fs::read_to_string(log.path()).unwrap_or_default();
    eprintln!("{output}");
    match status {
        Some(s) => assert!(
            s.success(),
            "tests/mcp/conformance.sh failed ({s}):\n{output}"
        ),
        None => panic!(
            "tests/mcp/conformance.sh did not finish in {}s:\n{output}",
            DEADLINE.as_secs()
        ),
    }
}
