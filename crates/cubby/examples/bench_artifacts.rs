//! Artifacts side by side with the shell doing the same by hand, through
//! the library.
//!
//! ```text
//! cargo run --release -p cubby --example bench_artifacts -- [ITERATIONS]
//! ```
//!
//! 1. Publishing a 25 MB file (`Artifacts::publish` from the open file:
//!    hash while copying into a fresh store, fsync, rename) vs
//!    `sha256sum f && cp f dst && sync dst`.
//! 2. Collecting 1,000 small files from `$CUBBY_OUTPUT_DIR`: a `run` that
//!    writes them there vs the same `run` writing them elsewhere in the
//!    workspace (the difference is the collection); each round a new run.
//!    By hand: `sha256sum src/* && cp src/* dst/ && sync -f dst` of 1,000
//!    such files (hashed, copied, one flush of the file system).
//!
//! Prints the median wall time in milliseconds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/mod.rs"]
mod support;

use std::sync::Arc;

use cubby::artifact::{Artifacts, Budget, Publish, Store};
use serde_json::json;
use support::time_rounds;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let dir = std::env::temp_dir().join(format!("cubby-bench-artifacts-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("root")).unwrap();
    let big = dir.join("big.bin");
    // 25 MB of pseudo-random bytes (xorshift).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let bytes: Vec<u8> = (0..25_000_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    std::fs::write(&big, &bytes).unwrap();
    drop(bytes);
    let mut round = 0usize;
    let mut publish = || {
        round += 1;
        let store_dir = dir.join(format!("store-{round}"));
        let artifacts = Artifacts::new(
            Arc::new(Store::open(&store_dir).unwrap()),
            Budget::default(),
        );
        let mut file = std::fs::File::open(&big).unwrap();
        let size = file.metadata().unwrap().len();
        artifacts
            .publish(
                &Publish {
                    name: "big.bin".into(),
                    ..Publish::default()
                },
                size,
                &mut file,
            )
            .unwrap();
        std::fs::remove_dir_all(&store_dir).unwrap();
    };
    let dst = dir.join("copy.bin");
    let mut shell = || {
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "sha256sum {0} > /dev/null && cp {0} {1} && sync {1}",
                big.display(),
                dst.display()
            ))
            .status()
            .unwrap();
        assert!(status.success());
        std::fs::remove_file(&dst).unwrap();
    };
    let publishing = time_rounds(n.min(5), n, &mut [&mut publish, &mut shell]);
    println!(
        "publish 25 MB: Artifacts::publish {:.1} ms | sha256sum + cp + sync {:.1} ms",
        publishing[0], publishing[1]
    );

    let root = dir.join("root").canonicalize().unwrap();
    let state = dir.join("state");
    let store = Arc::new(Store::lazy(&state.join("artifacts")));
    let toolset = || {
        cubby::Toolset::builder(cubby::local_sandbox(&root).unwrap())
            .track_changes(false)
            .artifact_store(store.clone())
            .build()
            .unwrap()
    };
    let k = std::cell::Cell::new(0usize);
    let mut collected = || {
        k.set(k.get() + 1);
        let k = k.get();
        let t = toolset();
        let out = t.call(
            "run",
            json!({"command": format!("cd \"$CUBBY_OUTPUT_DIR\" && for i in $(seq 1000); do echo {k}-$i > f$i; done")}),
        );
        assert!(!out.is_error, "{}", out.text);
        assert_eq!(out.artifacts().len(), 1000);
        std::fs::remove_dir_all(root.join(".cubby")).unwrap();
    };
    let mut elsewhere = || {
        k.set(k.get() + 1);
        let k = k.get();
        let t = toolset();
        let out = t.call(
            "run",
            json!({"command": format!("mkdir -p plain && cd plain && for i in $(seq 1000); do echo {k}-$i > f$i; done")}),
        );
        assert!(!out.is_error, "{}", out.text);
        std::fs::remove_dir_all(root.join("plain")).unwrap();
        let _ = std::fs::remove_dir_all(root.join(".cubby"));
    };
    let src = dir.join("hand-src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 1..=1000 {
        std::fs::write(src.join(format!("f{i}")), format!("0-{i}\n")).unwrap();
    }
    let hand_dst = dir.join("hand-dst");
    let mut by_hand = || {
        std::fs::create_dir_all(&hand_dst).unwrap();
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "sha256sum {0}/* > /dev/null && cp {0}/* {1}/ && sync -f {1}",
                src.display(),
                hand_dst.display()
            ))
            .status()
            .unwrap();
        assert!(status.success());
        std::fs::remove_dir_all(&hand_dst).unwrap();
    };
    let collecting = time_rounds(
        n.min(5),
        n,
        &mut [&mut collected, &mut elsewhere, &mut by_hand],
    );
    println!(
        "1,000 output files: run + collection {:.1} ms | the same run, files elsewhere {:.1} ms | collection {:.1} ms | sha256sum + cp + sync -f {:.1} ms",
        collecting[0],
        collecting[1],
        collecting[0] - collecting[1],
        collecting[2]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
