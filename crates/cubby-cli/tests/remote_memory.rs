//! A gibibyte of command output through the `remote` provider with bounded
//! memory on both sides: the far `cubby serve --host` (its peak resident
//! set, `VmHWM`) and this process, the near side (alone in its test
//! binary, so its peak is the call's).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use cubby::remote::{RemoteOptions, RemoteSandbox};
use serde_json::json;

/// Bytes the command prints.
const TOTAL: u64 = 1 << 30;
/// Most either side's peak resident set may grow by while it streams.
const MAX_GROWTH_KIB: u64 = 96 * 1024;

#[test]
fn a_gibibyte_of_output_through_remote_keeps_both_sides_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut b)
        .unwrap();
    let token: String = b.iter().map(|x| format!("{x:02x}")).collect();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, &token).unwrap();
    let mut far = Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args([
            "serve",
            "--host",
            "--listen",
            "127.0.0.1:0",
            "--provider",
            "linux",
        ])
        .arg("--token-file")
        .arg(&token_file)
        .arg("--host-dir")
        .arg(dir.path().join("sandboxes"))
        .arg("--root")
        .arg(&root)
        .env_remove("RUST_LOG")
        // Its temporary files (the placeholder stash a SIGKILLed server
        // leaves for the next start to reclaim) in the test's directory.
        .env("TMPDIR", dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let far_pid = far.id().to_string();
    let (addr, _reader) =
        common::listening_address(&mut far, "far cubby", Duration::from_secs(60), None);
    let result = std::panic::catch_unwind(|| {
        let sandbox = RemoteSandbox::open(&RemoteOptions {
            url: format!("http://{addr}"),
            token: token.clone(),
            root: None,
            upload: None,
        })
        .unwrap();
        let t = cubby::Toolset::builder(std::sync::Arc::new(sandbox))
            .host_env(cubby::HostEnv::capture())
            .track_changes(false)
            .build()
            .unwrap();
        // A first command: both sides at their working size.
        let out = t.call(
            "run",
            json!({"command": "head -c 1048576 /dev/zero | tr '\\0' a"}),
        );
        assert!(out.text.starts_with("OK exit=0"), "{}", out.text);
        let (near_before, far_before) = (common::peak_kib("self"), common::peak_kib(&far_pid));
        let out = t.call(
            "run",
            json!({
                "command": format!("head -c {TOTAL} /dev/zero | tr '\\0' a"),
                "timeout_ms": 120_000
            }),
        );
        assert!(
            out.text.starts_with("OK exit=0"),
            "{}",
            &out.text[..200.min(out.text.len())]
        );
        assert_eq!(out.structured["output_bytes"], TOTAL);
        let (near_after, far_after) = (common::peak_kib("self"), common::peak_kib(&far_pid));
        eprintln!(
            "peak RSS: near {near_before} → {near_after} KiB, far {far_before} → {far_after} KiB"
        );
        assert!(
            near_after - near_before < MAX_GROWTH_KIB,
            "near side grew {} KiB",
            near_after - near_before
        );
        assert!(
            far_after - far_before < MAX_GROWTH_KIB,
            "far side grew {} KiB",
            far_after - far_before
        );
    });
    let _ = far.kill();
    let _ = far.wait();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
