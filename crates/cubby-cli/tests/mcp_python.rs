//! The MCP server driven by the official Python SDK client
//! (`tests/mcp/python_client.py`) over stdio and streamable HTTP, with the
//! initialize handshake (`legacy`) and with the 2026-07-28 revision
//! (`auto`: `server/discover` first); with the defaults (cubby's text only)
//! and with `[mcp] structured_content = true` (structuredContent validated
//! against outputSchema by the SDK).
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
    run_client_with(workspace, target, mode, None);
}

/// Runs the client; `config` (a cubby.toml turning structured content on)
/// tells it what to expect, and over stdio it passes it to `cubby mcp`.
fn run_client_with(workspace: &Path, target: &str, mode: &str, config: Option<&Path>) {
    let out = Command::new(python())
        .arg(repo_root().join("tests/mcp/python_client.py"))
        .arg(env!("CARGO_BIN_EXE_cubby"))
        .arg(workspace)
        .arg(target)
        .arg(mode)
        .args(config)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "client failed ({target} {mode}):\n{stdout}\n{stderr}"
    );
    // The SDK ends an HTTP session with DELETE and logs this when the
    // answer is neither 200 nor 204.
    assert!(
        !stderr.contains("Session termination failed"),
        "{target} {mode}: {stderr}"
    );
    let structured = if config.is_some() { " structured" } else { "" };
    assert!(
        stdout.contains(&format!("ok: {target} {mode}{structured}\n")),
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

#[test]
fn python_sdk_over_stdio_with_structured_content() {
    let ws = workspace();
    let (_dir, config) = common::structured_config();
    run_client_with(ws.path(), "stdio", "legacy", Some(&config));
}

#[test]
fn python_sdk_over_http_with_structured_content() {
    let ws = workspace();
    let (_dir, config) = common::structured_config();
    let server = Serve::start_with(ws.path(), &["--config".as_ref(), config.as_os_str()]);
    run_client_with(ws.path(), &server.url(), "auto", Some(&config));
}

/// `DELETE` of a session, as a raw HTTP request: 204, and the session is
/// gone (a request in it is 404); a `DELETE` without a session id is
/// still refused.
#[test]
fn http_delete_ends_the_session_with_no_content() {
    let ws = workspace();
    let server = Serve::start(ws.path());
    let init = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let (status, head, _) = common::request(server.port, "POST", init, &[]);
    assert_eq!(status, 200, "{head}");
    let session = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("mcp-session-id")
                .then(|| v.trim().to_string())
        })
        .unwrap();
    let headers = [
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let (status, head, body) = common::request(server.port, "DELETE", b"", &headers);
    assert_eq!(status, 204, "{head}\n{body}");
    assert!(body.is_empty(), "{body}");
    let list = br#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    let (status, head, _) = common::request(server.port, "POST", list, &headers);
    assert_eq!(status, 404, "{head}");
    let (status, head, _) = common::request(
        server.port,
        "DELETE",
        b"",
        &[("MCP-Protocol-Version", "2025-11-25")],
    );
    assert_eq!(status, 400, "{head}");
}
