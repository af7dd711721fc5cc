//! Timing helpers shared by the benchmark examples.

#![allow(dead_code)]

use std::time::{Duration, Instant};

/// The median of `v`, in milliseconds.
pub fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1000.0
}

/// Runs `f` `n` times; the median wall time in milliseconds.
pub fn time<F: FnMut()>(n: usize, mut f: F) -> f64 {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f();
        samples.push(t.elapsed());
    }
    median(samples)
}

/// A `kB` field (`VmRSS:`, `Pss:` …) of a `/proc` status-like file, in KiB
/// (0 when absent).
pub fn kib_field(path: &str, field: &str) -> f64 {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0)
}

/// This process's peak RSS in MiB.
pub fn peak_rss_mib() -> f64 {
    kib_field("/proc/self/status", "VmHWM:") / 1024.0
}
