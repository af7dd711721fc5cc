//! cubby's tools over the Model Context Protocol, on `rmcp`.
//!
//! This crate is the only place that knows the MCP SDK, so its churn stays
//! out of the core. It maps a [`cubby::Toolset`] to MCP:
//!
//! - `tools/list`: every offered tool with its input schema, `outputSchema`
//!   and annotations (`readOnlyHint`, `destructiveHint`, `idempotentHint`,
//!   `openWorldHint`).
//! - `tools/call`: the model-facing text as a text block, the structured
//!   value as `structuredContent` (omitted on error results, which carry
//!   `isError: true`), command output streamed as `notifications/progress`
//!   while the call runs (when the client sent a progress token), and
//!   `notifications/cancelled` killing the command's whole tree.
//! - One run per session: each MCP session gets its own toolset (read
//!   tracker, processes), created on its first call and ended — processes
//!   killed — when the session ends. Stateless requests (the 2026-07-28
//!   revision over HTTP has no sessions) share one server-wide run.
//!
//! Fronts: [`serve_stdio`] (with a framing guard that answers malformed
//! lines with JSON-RPC errors instead of dropping them) and [`serve_http`]
//! (streamable HTTP at `/mcp`, bearer token, Host/Origin checks, body limit).

#![deny(missing_docs)]

mod handler;
mod http;
mod pool;
mod stdio;

use std::sync::Arc;

pub use handler::CubbyHandler;
pub use http::{HttpOptions, serve_http};
pub use stdio::serve_stdio;

/// Builds a fresh toolset: one per run (MCP session).
pub type ToolsetFactory = Arc<dyn Fn() -> cubby::Result<cubby::Toolset> + Send + Sync>;

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
