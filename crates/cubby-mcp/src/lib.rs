//! cubby's tools over the Model Context Protocol, on `rmcp`.
//!
//! This crate is the only place that knows the MCP SDK, so its churn stays
//! out of the core. It maps a [`cubby::Toolset`] to MCP:
//!
//! - `tools/list`: every offered tool with its input schema and annotations
//!   (`readOnlyHint`, `destructiveHint`, `idempotentHint`,
//!   `openWorldHint`); its `outputSchema` only with
//!   [`McpOptions::structured_content`].
//! - `tools/call`: the model-facing text as a text block (images as image
//!   blocks), error results with `isError: true`; the structured value as
//!   `structuredContent` only with [`McpOptions::structured_content`] and
//!   never on error results; command output streamed as
//!   `notifications/progress` while the call runs (when the client sent a
//!   progress token), and `notifications/cancelled` killing the command's
//!   whole tree.
//! - One run per session: each MCP session gets its own toolset (read
//!   tracker, processes), created on its first call and ended — processes
//!   killed — when the session ends. Stateless requests (the 2026-07-28
//!   revision over HTTP has no sessions) share one server-wide run.
//!
//! Fronts: [`serve_stdio`] (with a framing guard that answers malformed
//! lines with JSON-RPC errors instead of dropping them) and [`serve_http`]
//! (streamable HTTP at `/mcp`, bearer token, Host/Origin checks, body limit).

#![deny(missing_docs)]

mod bound;
mod direct;
mod gate;
mod handler;
mod http;
mod peer;
mod pool;
mod stdio;
mod upstream;

pub use bound::MAX_SESSIONS_PER_SANDBOX;
pub use handler::{CubbyHandler, MAX_INSTRUCTIONS_CHARS, tool_definition};
pub use http::{HttpOptions, MAX_MCP_SESSIONS, serve_http};
pub use stdio::{serve_stdio, serve_stdio_until};
pub use upstream::{
    CANCEL_POLL, MAX_DEFINITION_BYTES, MAX_LIST_PAGES, MAX_LISTED_TOOLS, MAX_MESSAGE_BYTES,
    MAX_QUEUED_BYTES, MAX_RESTARTS_PER_MINUTE, PROGRESS_EVERY, RESTART_BACKOFF, upstream_sources,
};

/// Builds a fresh toolset: one per run (MCP session); a front gets one from
/// [`cubby::Workspace::factory`].
pub use cubby::ToolsetFactory;

/// What the MCP fronts send besides the model-facing text, and how the
/// stdio front answers (`[mcp]` in the config).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct McpOptions {
    /// Send each successful result's `structuredContent` and each tool's
    /// `outputSchema`. Off by default: the clients agents run in (Codex CLI
    /// 0.171, Claude Code 2.1.332) hand the model `structuredContent` as
    /// JSON instead of the text whenever it is present, so the model would
    /// lose the line numbers, verdict lines and cut markers (SPEC §2).
    pub structured_content: bool,
    /// Let the stdio front answer plain `read_file` and `list_files` calls
    /// itself (`direct.rs`), past rmcp's dispatch: the same answers, a
    /// task and a context fewer per call. On by default.
    pub fast_path: bool,
}

impl Default for McpOptions {
    fn default() -> McpOptions {
        McpOptions::from_config(&cubby::config::McpConfig::default())
    }
}

impl McpOptions {
    /// The options a config file asks for.
    pub fn from_config(config: &cubby::config::McpConfig) -> McpOptions {
        McpOptions {
            structured_content: config.structured_content,
            fast_path: config.fast_path,
        }
    }
}

/// Why a server could not start or stopped.
#[derive(Debug)]
pub struct ServeError(pub String);

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ServeError {}

/// The server name reported to clients.
pub const SERVER_NAME: &str = "cubby";
/// The server version reported to clients.
pub const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");
