//! A command that prints 1 GiB finishes with capped output, and the server's
//! peak memory grows by less than 32 MiB. Alone in its test binary so that no
//! other test moves the process's high-water mark.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

/// Peak resident set size of this process, in KiB (`VmHWM`).
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn one_gib_of_output_keeps_memory_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let tools = cubby::Toolset::builder(cubby::local_sandbox(dir.path()).unwrap())
        .host_env(cubby::HostEnv::capture())
        .secret("NEVER_PRINTED", "this-value-is-not-in-the-output")
        .build()
        .unwrap();
    // Warm up: threads, buffers and the first process are part of the baseline.
    let out = tools.call("run", json!({"command": "echo warm"}));
    assert!(!out.is_error);
    let before = peak_rss_kib();
    let out = tools.call(
        "run",
        json!({"command": "head -c 1073741824 /dev/zero | tr '\\0' 'x'", "timeout_ms": 120000}),
    );
    let after = peak_rss_kib();
    assert!(
        out.text.starts_with("OK exit=0"),
        "{}",
        &out.text[..out.text.len().min(300)]
    );
    assert_eq!(out.structured["output_bytes"], 1u64 << 30);
    assert!(
        out.text.len() < 16_384 + 200,
        "{} bytes shown",
        out.text.len()
    );
    assert!(out.text.contains("bytes cut, use process_logs name=run-2]"));
    let growth_mib = (after - before) as f64 / 1024.0;
    eprintln!("peak RSS before {before} KiB, after {after} KiB, growth {growth_mib:.1} MiB");
    assert!(growth_mib < 32.0, "peak RSS grew by {growth_mib:.1} MiB");
}
