//! [`ToolSource`]: where a toolset's tools come from.
//!
//! The built-in tools are one source ([`BuiltIns`], over the registry);
//! upstream MCP servers and a remote cubby will be others. Whatever the
//! source, a call passes the same door ([`crate::Toolset`]): the policy's
//! gate (allow, deny, the modes the tool's facts name), the provider's
//! capabilities (no command tools where no commands run), then the source,
//! then the toolset's output limit for other sources' results, redaction
//! and the neutralising of control characters.

use std::sync::Arc;

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

    /// Whether `name` (one of [`list`](Self::list)'s) is offered now: a
    /// source whose tools come and go (an upstream server hiding a tool
    /// whose definition changed) says no, and the tool leaves the
    /// listings. Default: yes. Its calls still reach [`call`](Self::call),
    /// which refuses them with the reason (`denied`, or why the server
    /// cannot be reached).
    fn available(&self, _name: &str) -> bool {
        true
    }

    /// For a name the source does not list: why a call to it is refused,
    /// when the name is one the source owns (an upstream server's
    /// `<label>__…` outside its allow-list) — the gate answers `denied`
    /// with it instead of "no such tool". Default: `None`.
    fn refusal(&self, _name: &str) -> Option<String> {
        None
    }

    /// The run ends ([`Toolset::end`](crate::Toolset::end)): release what
    /// the source holds for it (an upstream server's process tree). Called
    /// once, after the run's processes are stopped. Default: nothing.
    fn end(&self) {}

    /// Registers `notify`, to be called whenever the set of tools this
    /// source offers changes (MCP `notifications/tools/list_changed`).
    /// Default: the set never changes, `notify` is dropped.
    fn watch(&self, _notify: Arc<dyn Fn() + Send + Sync>) {}
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

    /// The call's id (the front's, or `call-<n>`).
    pub fn call_id(&self) -> &str {
        self.ctx.call_id
    }

    /// True when the front wants this call's progress ([`SourceCall::progress`]).
    pub fn wants_progress(&self) -> bool {
        self.ctx.on_output.is_some()
    }

    /// Sends `message` as the call's progress (MCP progress notifications),
    /// redacted first; nothing when the front asked for none. The caller
    /// bounds how often it sends.
    pub fn progress(&self, source: &str, message: &str) {
        if let Some(subscriber) = self.ctx.on_output {
            subscriber(&crate::process::OutputEvent {
                process: source.to_string(),
                chunk: crate::output::neutralize_controls(&self.ctx.redactor.redact_str(message))
                    .into_owned(),
            });
        }
    }

    /// Publishes `bytes` as an artifact of the run named `name` (media type
    /// declared or sniffed, SPEC §5.1): returns the line the model reads
    /// and the attachments (the artifact's link, and an image within
    /// `view_file`'s bounds when it is one). Refused like a custom tool's
    /// publication: a secret in the name or the bytes, over the limits.
    ///
    /// # Errors
    ///
    /// `denied`, `limit`, `invalid_input` as [`crate::artifact::Artifacts`].
    pub fn publish(
        &self,
        name: &str,
        media_type: Option<&str>,
        bytes: &[u8],
    ) -> Result<(String, Vec<crate::output::Attachment>)> {
        let redactor = self.ctx.redactor;
        if redactor.finds(name.as_bytes()) {
            return Err(Error::denied(
                "the result would publish a secret's value (in the name of an artifact); it is \
                 not published",
            ));
        }
        crate::artifact::inflate::refuse_secret(redactor, "an artifact of the result", bytes)?;
        let request = crate::artifact::Publish {
            name: name.to_string(),
            media_type: media_type.map(str::to_string),
            path: None,
        };
        let published = self.ctx.run.artifacts().publish_bytes(&request, bytes)?;
        let line = super::publish::line(&published.file);
        let attachments = super::publish::attachments(self.ctx.run.artifacts(), &published);
        Ok((line, attachments))
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
