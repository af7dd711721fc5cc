//! Agent frameworks list and execute cubby's tools through their own MCP
//! clients, over stdio (`cubby mcp`), with no language model and no network
//! beyond the package registries:
//!
//! - the Vercel AI SDK (`createMCPClient` from `@ai-sdk/mcp`):
//!   `tests/mcp/ai_sdk_client.mjs`;
//! - Mastra's `MCPClient` (`@mastra/mcp`): `tests/mcp/mastra_client.mjs`;
//! - the OpenAI Agents SDK (`agents.mcp.MCPServerStdio`, Python):
//!   `tests/mcp/agents_sdk_client.py`.
//!
//! Each client lists the tools, writes a file and reads it back, lists files
//! and gets an error result, through the framework's tool objects too: its
//! input schema conversion (zod, Mastra's schema layer, the Agents SDK's
//! strict JSON schema), its output schema validation where it has one, and
//! its agent loop driven by a scripted model. Each runs cubby with its
//! defaults (text results only, no outputSchema) and, on another
//! connection, with `[mcp] structured_content = true` (a config file passed
//! with `--config`). A client prints `ok: ...` when every check passed.
//!
//! The packages are installed the first time, at the pinned versions below:
//! the Node ones with Node 22 (they need Node >= 22; the npm package `node`
//! ships the binary) into `target/mcp-frameworks-node`, the Python one into
//! the venv `target/mcp-agents-venv`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use common::repo_root;

/// Node.js for the Node clients (`@ai-sdk/mcp` and `@mastra/*` need >= 22).
const NODE: &str = "node@22.23.3";
/// The Vercel AI SDK.
const AI: &str = "ai@7.0.173";
/// The AI SDK's MCP client.
const AI_SDK_MCP: &str = "@ai-sdk/mcp@2.0.99";
/// zod, a peer dependency of the AI SDK; the test builds zod schemas from
/// cubby's JSON schemas with it.
const ZOD: &str = "zod@4.6.7";
/// Mastra's MCP client.
const MASTRA_MCP: &str = "@mastra/mcp@2.0.0";
/// Mastra's core, a peer dependency of `@mastra/mcp` (the `Agent`).
const MASTRA_CORE: &str = "@mastra/core@1.71.0";
/// The OpenAI Agents SDK.
const OPENAI_AGENTS: &str = "openai-agents==0.24.0";
/// The Python MCP SDK under it (it accepts `mcp>=1.19,<3`).
const PYTHON_MCP: &str = "mcp==2.3.0";

/// Longest a client may run, its cubby processes included.
const CLIENT_DEADLINE: Duration = Duration::from_secs(180);
/// How long cubby may take to exit after its client did.
const EXIT_GRACE: Duration = Duration::from_secs(5);

static NODE_LOCK: Mutex<()> = Mutex::new(());

/// The directory holding `node_modules` with the Node packages, and its node
/// binary; installs them on first use.
fn node_dir() -> (PathBuf, PathBuf) {
    let _guard = NODE_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let packages = [NODE, AI, AI_SDK_MCP, ZOD, MASTRA_MCP, MASTRA_CORE];
    let dir = repo_root().join("target/mcp-frameworks-node");
    let node = dir.join("node_modules/node/bin/node");
    // Scripts on: the `node` package installs its binary by a preinstall
    // script.
    common::npm_install(&dir, &packages, || node.exists());
    let version = Command::new(&node).arg("--version").output().unwrap();
    let version = String::from_utf8_lossy(&version.stdout);
    assert_eq!(
        version.trim(),
        format!("v{}", NODE.trim_start_matches("node@")),
        "{}",
        node.display()
    );
    (dir, node)
}

/// The venv's python with the Agents SDK, installed on first use.
fn agents_python() -> PathBuf {
    common::python_venv("mcp-agents-venv", &[OPENAI_AGENTS, PYTHON_MCP])
}

/// A workspace with `seed.txt` in it.
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("seed.txt"), "seed\n").unwrap();
    dir
}

/// Runs a client in its own process group (its cubby processes inherit it)
/// and checks it printed `ok: {what}`. Ends the whole group if the client
/// outlives [`CLIENT_DEADLINE`], and fails if anything it started outlives
/// it by more than [`EXIT_GRACE`].
fn run_client(cmd: Command, what: &str) {
    let run = common::run_in_group(cmd, CLIENT_DEADLINE, EXIT_GRACE);
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    let Some(status) = run.status else {
        panic!(
            "the {what} client did not finish in {}s:\n{stdout}\n{stderr}",
            CLIENT_DEADLINE.as_secs()
        );
    };
    assert!(
        status.success(),
        "the {what} client failed ({status}):\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains(&format!("ok: {what}")),
        "{stdout}\n{stderr}"
    );
    assert!(
        !run.lingered,
        "processes of the {what} client were still running {}s after it exited",
        EXIT_GRACE.as_secs()
    );
    for line in stdout.lines() {
        println!("{line}");
    }
    println!("{what}: {:.1}s", run.elapsed.as_secs_f64());
}

/// The scripts' shared helper (a scripted model), copied beside them.
const NODE_HELPER: &str = "scripted_model.mjs";

/// Runs a copy of `tests/mcp/{script}` (and its helper) placed beside the
/// installed node_modules (Node resolves packages from the script's
/// directory up).
fn node_client(script: &str, args: &[&Path], what: &str) {
    let (dir, node) = node_dir();
    let scripts = repo_root().join("tests/mcp");
    std::fs::copy(scripts.join(NODE_HELPER), dir.join(NODE_HELPER)).unwrap();
    let copy = dir.join(script);
    std::fs::copy(scripts.join(script), &copy).unwrap();
    let mut cmd = Command::new(node);
    cmd.arg(&copy).arg(env!("CARGO_BIN_EXE_cubby")).args(args);
    run_client(cmd, what);
}

#[test]
fn vercel_ai_sdk_mcp_client_lists_and_executes_the_tools() {
    let ws = workspace();
    let (_dir, config) = common::structured_config();
    node_client("ai_sdk_client.mjs", &[ws.path(), &config], "ai sdk client");
}

#[test]
fn mastra_mcp_client_lists_and_executes_the_tools() {
    let ws = workspace();
    let legacy = tempfile::tempdir().unwrap();
    let (_dir, config) = common::structured_config();
    node_client(
        "mastra_client.mjs",
        &[ws.path(), legacy.path(), &config],
        "mastra client",
    );
}

#[test]
fn openai_agents_sdk_lists_and_executes_the_tools() {
    let ws = workspace();
    let mut cmd = Command::new(agents_python());
    let (_dir, config) = common::structured_config();
    cmd.arg(repo_root().join("tests/mcp/agents_sdk_client.py"))
        .arg(env!("CARGO_BIN_EXE_cubby"))
        .arg(ws.path())
        .arg(&config)
        // No trace export (it would need an API key and the network).
        .env("OPENAI_AGENTS_DISABLE_TRACING", "1");
    run_client(cmd, "agents sdk client");
}
