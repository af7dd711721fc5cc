//! cubby: a sandboxed tool runtime for AI agents.
//!
//! An agent gets a [`Toolset`]: `read_file`, `write_file`, `edit_file`,
//! `glob`, `list_files`, `search` and `changes` (commands come with the
//! command providers; `web_fetch` and `web_search`, host-side, when the
//! policy grants them: see [`web`]). Every tool acts inside a [`Sandbox`]
//! under a [`Policy`], and every result passes one output choke point that
//! redacts secrets.
//!
//! # The flow of one call
//!
//! ```text
//! front (MCP | CLI `call` | library)
//!   │ JSON arguments
//!   ▼
//! Toolset::call ── shape check, policy gate (is the tool offered?)
//!   ▼
//! tool module ── WorkspacePath::parse, path policy, read-before-write guard
//!   ▼
//! Sandbox (virtual | local): openat2 beneath the root
//!   ▼
//! output shaping: redact secrets → ToolOutput { text, structured, is_error }
//! ```
//!
//! # Example
//!
//! ```
//! use cubby::{MemoryFs, Toolset, WorkspacePath, virtual_sandbox};
//! use serde_json::json;
//!
//! let fs = MemoryFs::new();
//! fs.insert(&WorkspacePath::parse("notes.txt")?, b"hello\nworld\n".to_vec(), 0o644)?;
//! let tools = Toolset::builder(virtual_sandbox(fs)).build()?;
//!
//! let out = tools.call("read_file", json!({"path": "notes.txt"}));
//! assert!(!out.is_error);
//! assert!(out.text.starts_with("     1\thello"));
//!
//! let out = tools.call("read_file", json!({"path": "../etc/passwd"}));
//! assert!(out.text.starts_with("ERROR path_escape:"));
//! # Ok::<(), cubby::Error>(())
//! ```
//!
//! # Limitations
//!
//! The `local` provider confines the file tools only; it is not an OS
//! boundary for commands. Guards against concurrent writers are best-effort:
//! the stale check and the write are two steps.

#![deny(missing_docs)]

pub mod artifact;
pub mod config;
mod config_file;
mod error;
pub mod exec_policy;
pub mod git;
pub mod host;
mod host_env;
pub mod kubernetes;
pub mod mounts;
mod net;
pub mod output;
mod path;
pub mod policy;
pub mod process;
pub mod remote;
pub mod sandbox;
pub mod skills;
mod sync;
mod tools;
mod toolset;
pub mod upstream;
pub mod web;
pub mod workspace;

pub use config::{Config, Limits, NetworkMode, ReadScope, SandboxLimits};
pub use error::{Error, ErrorKind, Result};
pub use host_env::HostEnv;
pub use net::{
    GATEWAY_TOKEN_ENV, GATEWAY_URL_ENV, GatewayEvent, GatewayOptions, GatewayRun, Gateways,
    MAX_GATEWAY_CONNECTIONS, MAX_GATEWAY_EVENTS, MAX_GATEWAY_IN_FLIGHT,
};
pub use output::{Attachment, ImageData, Redactor, Secret, ToolOutput};
pub use path::{MAX_NAME_BYTES, MAX_PATH_BYTES, WorkspacePath};
pub use policy::{Mode, Modes, Policy, PolicyBuilder, PolicyDigest};
pub use sandbox::{
    FileSystem, LinuxOptions, LinuxSandbox, LocalFs, MemoryFs, ProviderKind, Sandbox,
    local_sandbox, virtual_sandbox,
};
pub use tools::schema;
pub use tools::{
    Annotations, Cost, CustomTool, Describe, Family, MAX_CUSTOM_TOOL_NAME_BYTES,
    MAX_DESCRIPTION_CHARS, MAX_LOG_LINE_CHARS, SourceCall, ToolContext, ToolFacts, ToolResult,
    ToolSource, ToolSpec, builtin_tools,
};
pub use toolset::{
    CallOptions, MAX_ARGUMENT_BYTES, MAX_SOURCE_ATTACHMENT_BYTES, MAX_SOURCE_STRUCTURED_BYTES,
    MAX_SOURCE_TEXT_BYTES, MAX_TOOL_NAME_CHARS, RunEnd, ToolCatalog, Toolset, ToolsetBuilder,
};
pub use workspace::{SourcesMaker, ToolsetFactory, Workspace};
