//! The MCP server driven by the official Python SDK client
//! (`tests/mcp/python_client.py`) over stdio and streamable HTTP, with the
//! initialize handshake (`legacy`) and with the 2026-07-28 revision
//! (`auto`: `server/discover` first).
//!
//! The SDK is installed by this test into `target/mcp-venv` (pip, from
//! PyPI) the first time it runs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
mod common;

use std::process::Command;

use common::{Serve, repo_root};

/// The Python MCP SDK version the tests are written against.
const MCP_SDK: &str = "mcp==2.3.0";

/// The venv's python with the SDK (installed on first use).
fn python() -> PathBuf {
    common::python_venv("mcp-venv", &[MCP_SDK])
}

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("seed.txt"), "seed\n").unwrap();
    let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    png.extend_from_slice(&[0u8; 64]);
    std::fs::write(dir.path().join("image.png"), png).unwrap();
    dir
}

fn run_client(workspace: &Path, target: &str, mode: &str) {
    let out = Command::new(python())
        .arg(repo_root().join("tests/mcp/python_client.py"))
        .arg(env!("CARGO_BIN_EXE_cubby"))
        .arg(workspace)
        .arg(target)
        .arg(mode)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "client failed ({target} {mode}):\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains(&format!("ok: {target} {mode}")),
        "{stdout}\n{stderr}"
    );
}

#[test]
fn python_sdk_over_stdio_with_the_handshake() {
    let ws = workspace();
    run_client(ws.path(), "stdio", "legacy");
}

#[test]
fn python_sdk_over_stdio_with_discover() {
    let ws = workspace();
    run_client(ws.path(), "stdio", "auto");
}

#[test]
fn python_sdk_over_http_with_the_handshake() {
    let ws = workspace();
    let server = Serve::start(ws.path());
    run_client(ws.path(), &server.url(), "legacy");
}

#[test]
fn python_sdk_over_http_with_discover() {
    let ws = workspace();
    let server = Serve::start(ws.path());
    run_client(ws.path(), &server.url(), "auto");
}
