//! Crash safety of `write_file`: a writer killed with SIGKILL at a random
//! moment, 100 times, always leaves the target whole — old or new content,
//! never a mix or a truncation.
//!
//! The writer is this same test binary, re-run with `writer_child --exact`
//! and an environment variable naming the workspace; without the variable
//! that test does nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cubby::Toolset;
use serde_json::json;

const ENV_ROOT: &str = "CUBBY_CRASH_TEST_ROOT";
const CONTENT_BYTES: usize = 1024 * 1024;
const KILLS: usize = 100;

fn content(fill: u8) -> String {
    String::from_utf8(vec![fill; CONTENT_BYTES]).unwrap()
}

/// The child: reads and rewrites the target forever, flipping its content.
#[test]
fn writer_child() {
    let Ok(root) = std::env::var(ENV_ROOT) else {
        return;
    };
    let tools = Toolset::builder(cubby::local_sandbox(std::path::Path::new(&root)).unwrap())
        .track_changes(false)
        .build()
        .unwrap();
    let (a, b) = (content(b'a'), content(b'b'));
    loop {
        let out = tools.call("read_file", json!({"path": "target.txt", "limit": 1}));
        assert!(!out.is_error, "{}", out.text);
        let next = if out.text.contains("aaaa") { &b } else { &a };
        let out = tools.call("write_file", json!({"path": "target.txt", "content": next}));
        assert!(!out.is_error, "{}", out.text);
    }
}

#[test]
fn sigkill_mid_write_leaves_old_or_new_content() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target.txt");
    std::fs::write(&target, content(b'a')).unwrap();
    let exe = std::env::current_exe().unwrap();
    // A small deterministic generator for kill delays (5..=204 ms).
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut seen = [0usize; 2];
    for round in 0..KILLS {
        let mut child = Command::new(&exe)
            .args(["writer_child", "--exact", "--nocapture", "--test-threads=1"])
            .env(ENV_ROOT, dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let delay = 5 + (seed >> 33) % 200;
        std::thread::sleep(Duration::from_millis(delay));
        let started = Instant::now();
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(
            status.code().is_none(),
            "round {round}: the writer exited by itself: {status}"
        );
        let bytes = std::fs::read(&target).unwrap();
        assert_eq!(
            bytes.len(),
            CONTENT_BYTES,
            "round {round}: target has {} bytes",
            bytes.len()
        );
        let first = bytes[0];
        assert!(first == b'a' || first == b'b', "round {round}");
        assert!(
            bytes.iter().all(|b| *b == first),
            "round {round}: mixed content"
        );
        seen[(first - b'a') as usize] += 1;
    }
    // Both contents were observed: the writer really was writing when killed.
    assert!(seen[0] > 0 && seen[1] > 0, "seen {seen:?}");
    // Whatever temp files the kills left behind are hidden siblings, never the target.
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(
            name == "target.txt" || name.starts_with(".target.txt.cubby-tmp."),
            "{name}"
        );
    }
}
