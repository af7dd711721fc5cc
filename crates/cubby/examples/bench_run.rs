//! Side-by-side timing of `run` through the library against a bare spawn.
//!
//! ```text
//! cargo run --release -p cubby --example bench_run -- [ITERATIONS] [OUTPUT_MIB]
//! ```
//!
//! 1. `run` of `true` (bash -c, under the reaper shim, output captured)
//!    against `std::process::Command::new("sh").args(["-c", "true"]).status()`.
//! 2. A command printing OUTPUT_MIB MiB through `run` against the same
//!    command with its output sent to /dev/null by the shell.
//!
//! Prints medians in milliseconds and the ratios, and the peak RSS.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/mod.rs"]
mod support;

use std::process::Command;
use support::{peak_rss_mib, time};

use serde_json::json;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(500);
    let mib: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let dir = tempfile_dir();
    let tools = cubby::Toolset::builder(cubby::local_sandbox(&dir).unwrap())
        .host_env(cubby::HostEnv::capture())
        .track_changes(false)
        .build()
        .unwrap();
    // Warm up both paths.
    for _ in 0..20 {
        tools.call("run", json!({"command": "true"}));
        Command::new("sh").args(["-c", "true"]).status().unwrap();
    }
    let bare = time(n, || {
        Command::new("sh").args(["-c", "true"]).status().unwrap();
    });
    let bash_bare = time(n, || {
        Command::new("bash").args(["-c", "true"]).status().unwrap();
    });
    let run = time(n, || {
        let out = tools.call("run", json!({"command": "true"}));
        assert!(out.text.starts_with("OK exit=0"), "{}", out.text);
    });
    println!("run `true` ({n} iterations, median ms)");
    println!("  bare spawn sh -c true     {bare:8.3}");
    println!("  bare spawn bash -c true   {bash_bare:8.3}");
    println!(
        "  cubby run (bash -c)       {run:8.3}   ratio vs sh {:.2}x, vs bash {:.2}x",
        run / bare,
        run / bash_bare
    );

    let bytes = mib * 1024 * 1024;
    let cmd = format!("head -c {bytes} /dev/zero | tr '\\0' 'x'");
    let rounds = 5;
    let devnull = time(rounds, || {
        Command::new("bash")
            .args(["-c", &format!("{cmd} > /dev/null")])
            .status()
            .unwrap();
    });
    let rss_before = peak_rss_mib();
    let through = time(rounds, || {
        let out = tools.call("run", json!({"command": cmd, "timeout_ms": 120000}));
        assert!(
            out.text.starts_with("OK exit=0"),
            "{}",
            &out.text[..200.min(out.text.len())]
        );
    });
    let rss_after = peak_rss_mib();
    println!("{mib} MiB of output ({rounds} rounds, median ms)");
    println!("  bash -c '… > /dev/null'   {devnull:8.1}");
    println!(
        "  cubby run (captured)      {through:8.1}   ratio {:.2}x",
        through / devnull
    );
    println!(
        "  throughput through run    {:8.0} MiB/s",
        mib as f64 / (through / 1000.0)
    );
    println!("peak RSS {rss_after:.1} MiB (before the output runs: {rss_before:.1} MiB)");
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("cubby-bench-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
