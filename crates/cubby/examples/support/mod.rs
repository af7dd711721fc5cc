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

/// Runs each of `fs` `n` times in all, in `rounds` rounds (each round
/// runs every one in turn, `n / rounds` times), so that a slow spell of
/// the machine does not fall on one of them only; the medians in
/// milliseconds, in the order of `fs`.
pub fn time_rounds(rounds: usize, n: usize, fs: &mut [&mut dyn FnMut()]) -> Vec<f64> {
    let per = (n / rounds.max(1)).max(1);
    let mut samples: Vec<Vec<Duration>> = fs.iter().map(|_| Vec::with_capacity(n)).collect();
    for _ in 0..rounds.max(1) {
        for (f, out) in fs.iter_mut().zip(samples.iter_mut()) {
            for _ in 0..per {
                let t = Instant::now();
                f();
                out.push(t.elapsed());
            }
        }
    }
    samples.into_iter().map(median).collect()
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
