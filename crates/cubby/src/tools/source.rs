//! [`ToolSource`]: where a toolset's tools come from.
//!
//! The built-in tools are one source ([`BuiltIns`], over the registry);
//! upstream MCP servers and a remote cubby will be others. Whatever the
//! source, a call passes the same door ([`crate::Toolset`]): the policy's
//! gate (allow, deny, the modes the tool's facts name), the provider's
//! capabilities (no command tools where no commands run), then the source,
//! then the toolset's output limit for other sources' results, redaction
//! and the neutralising of control characters.

use serde_json::Value;

use super::{Ctx, Describe, REGISTRY, ToolFacts, ToolSpec};
use crate::config::Limits;
use crate::error::{Error, Result};
use crate::output::ToolOutput;
use crate::process::CancelToken;

/// A set of tools a [`Toolset`](crate::Toolset) offers through its one
/// door. Add one with
/// [`ToolsetBuilder::source`](crate::ToolsetBuilder::source); its names
/// may not clash with another source's (the built-in tools are the first).
pub trait ToolSource: Send + Sync {
    /// Every tool of the source, offered or not: its name and facts. Read
    /// once, when a toolset is built (the gate decides from the facts).
    fn list(&self) -> Vec<(String, ToolFacts)>;

    /// The definition of `name` in this toolset: `describe` has the limits
    /// in force and says which tools are offered beside it. `None` for a
    /// name the source does not have.
    fn spec(&self, name: &str, describe: &Describe<'_>) -> Option<ToolSpec>;

    /// Calls `name`, which the gate has let through, with a JSON object of
    /// arguments. An `Err` becomes an `ERROR <kind>: …` result.
    ///
    /// # Errors
    ///
    /// Whatever the tool fails with.
    fn call(&self, name: &str, arguments: Value, call: &SourceCall<'_>) -> Result<ToolOutput>;

    /// For a tool whose cost is [`Cost::Bounded`](super::Cost::Bounded):
    /// whether a call with `arguments` stays bounded. Default: yes.
    fn bounded(&self, _name: &str, _arguments: &Value) -> bool {
        true
    }
}

/// What a source sees of the call in progress.
pub struct SourceCall<'a> {
    pub(crate) ctx: &'a Ctx<'a>,
}

impl SourceCall<'_> {
    /// Fires when the client cancels the call.
    pub fn cancel(&self) -> Option<&CancelToken> {
        self.ctx.cancel
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        self.ctx.limits
    }
}

/// The built-in tools, as a source: [`REGISTRY`].
pub(crate) struct BuiltIns;

impl ToolSource for BuiltIns {
    fn list(&self) -> Vec<(String, ToolFacts)> {
        REGISTRY
            .iter()
            .map(|e| (e.name.to_string(), e.facts))
            .collect()
    }

    fn spec(&self, name: &str, describe: &Describe<'_>) -> Option<ToolSpec> {
        REGISTRY
            .iter()
            .find(|e| e.name == name)
            .map(|e| (e.spec)(describe))
    }

    fn call(&self, name: &str, arguments: Value, call: &SourceCall<'_>) -> Result<ToolOutput> {
        match REGISTRY.iter().find(|e| e.name == name) {
            Some(e) => (e.call)(call.ctx, arguments),
            None => Err(Error::internal(format!(
                "{name} is not a built-in tool; the server is still running"
            ))),
        }
    }

    fn bounded(&self, name: &str, arguments: &Value) -> bool {
        REGISTRY
            .iter()
            .find(|e| e.name == name)
            .is_some_and(|e| (e.bounded)(arguments))
    }
}
