//! The TypeScript MCP SDK `Client` lists and calls cubby's tools over stdio
//! (`tests/mcp/node_client.mjs`), with cubby's defaults (text results only)
//! and with `[mcp] structured_content = true`. The SDK is installed into
//! `target/mcp-node` with npm the first time this test runs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::repo_root;
use std::path::PathBuf;
use std::process::Command;

/// The TypeScript SDK version the test is written against.
const SDK: &str = "@modelcontextprotocol/sdk@1.32.2";

fn sdk_dir() -> PathBuf {
    let dir = repo_root().join("target/mcp-node");
    let ready = dir.join(".ready");
    if std::fs::read_to_string(&ready).ok().as_deref() != Some(SDK) {
        std::fs::create_dir_all(&dir).unwrap();
        common::install_with_retries(&format!("npm install {SDK}"), || {
            let mut npm = Command::new("npm");
            npm.args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
                .arg(&dir)
                .arg(SDK);
            npm
        });
        std::fs::write(&ready, SDK).unwrap();
    }
    dir
}

#[test]
fn typescript_sdk_client_over_stdio() {
    run_client(None);
}

#[test]
fn typescript_sdk_client_over_stdio_with_structured_content() {
    let (_dir, config) = common::structured_config();
    run_client(Some(&config));
}

fn run_client(config: Option<&std::path::Path>) {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let modules = sdk_dir();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("seed.txt"), "seed\n").unwrap();
    // Node resolves packages from the script's directory upwards: run a copy
    // of the script placed beside the installed node_modules.
    let script = modules.join("node_client.mjs");
    std::fs::copy(repo_root().join("tests/mcp/node_client.mjs"), &script).unwrap();
    let out = Command::new("node")
        .arg(&script)
        .arg(env!("CARGO_BIN_EXE_cubby"))
        .arg(ws.path())
        .args(config)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "node client failed:\n{stdout}\n{stderr}"
    );
    let want = if config.is_some() {
        "ok: node client structured\n"
    } else {
        "ok: node client\n"
    };
    assert!(stdout.contains(want), "{stdout}\n{stderr}");
}
