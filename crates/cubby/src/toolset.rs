//! [`Toolset`]: the tools one agent run is offered, and the one door to them.
//!
//! A call goes: arguments (JSON) → shape check → policy gate (is the tool
//! offered?) → the tool (which parses paths into [`WorkspacePath`]s and checks
//! path policy) → the sandbox → output shaping (secret redaction) → a
//! [`ToolOutput`]. A panic inside a tool becomes an `internal` error result;
//! the toolset keeps serving.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use serde_json::Value;

use crate::config::Limits;
use crate::error::{Error, ErrorKind, Result};
use crate::output::{Redactor, Secret, ToolOutput};
use crate::policy::{COMMAND_TOOLS, Policy};
use crate::sandbox::Sandbox;
use crate::tools::{Baseline, Ctx, Entry, REGISTRY, RunState, ToolSpec};

/// Largest JSON argument document accepted, in bytes.
pub const MAX_ARGUMENT_BYTES: usize = 64 * 1024 * 1024;

/// The tools of one run, bound to a sandbox and a policy.
///
/// Cheap to clone; clones share the run (read tracker, baseline).
#[derive(Clone)]
pub struct Toolset {
    inner: Arc<Inner>,
}

struct Inner {
    sandbox: Arc<dyn Sandbox>,
    policy: Policy,
    limits: Limits,
    redactor: Redactor,
    run: RunState,
    offered: Vec<&'static Entry>,
}

impl std::fmt::Debug for Toolset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Toolset")
            .field("provider", &self.inner.sandbox.kind())
            .field("mode", &self.inner.policy.mode())
            .field("tools", &self.tool_names())
            .finish()
    }
}

impl Toolset {
    /// A builder for a toolset acting in `sandbox`.
    pub fn builder(sandbox: Arc<dyn Sandbox>) -> ToolsetBuilder {
        ToolsetBuilder {
            sandbox,
            policy: None,
            limits: Limits::default(),
            secrets: Vec::new(),
            track_changes: true,
        }
    }

    /// Names of the offered tools, in order.
    pub fn tool_names(&self) -> Vec<&'static str> {
        self.inner.offered.iter().map(|e| e.name).collect()
    }

    /// Definitions of the offered tools.
    pub fn tools(&self) -> Vec<ToolSpec> {
        self.inner.offered.iter().map(|e| (e.spec)()).collect()
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        &self.inner.policy
    }

    /// The sandbox the tools act in.
    pub fn sandbox(&self) -> &Arc<dyn Sandbox> {
        &self.inner.sandbox
    }

    /// Calls a tool with JSON text arguments (what a front receives).
    /// Malformed or oversized JSON is an `invalid_input` result.
    pub fn call_json(&self, name: &str, arguments: &[u8]) -> ToolOutput {
        if arguments.len() > MAX_ARGUMENT_BYTES {
            return self.finish(Err(Error::new(
                ErrorKind::TooLarge,
                format!(
                    "the arguments are {} bytes, the limit is {MAX_ARGUMENT_BYTES}; send less",
                    arguments.len()
                ),
            )));
        }
        let trimmed = arguments.trim_ascii();
        if trimmed.is_empty() {
            return self.call(name, Value::Null);
        }
        match serde_json::from_slice::<Value>(trimmed) {
            Ok(v) => self.call(name, v),
            Err(e) => self.finish(Err(Error::invalid_input(format!(
                "the arguments are not valid JSON ({e}); pass one JSON object"
            )))),
        }
    }

    /// Calls a tool. Never panics: every failure is an error result.
    pub fn call(&self, name: &str, arguments: Value) -> ToolOutput {
        let result = catch_unwind(AssertUnwindSafe(|| self.dispatch(name, arguments)))
            .unwrap_or_else(|_| {
                Err(Error::internal(format!(
                    "{name} failed unexpectedly; the server is still running, try again or \
                     use another approach"
                )))
            });
        self.finish(result)
    }

    fn finish(&self, result: Result<ToolOutput>) -> ToolOutput {
        let mut out = match result {
            Ok(out) => out,
            Err(e) => ToolOutput::error(&e),
        };
        self.inner.redactor.redact_output(&mut out);
        out
    }

    fn dispatch(&self, name: &str, arguments: Value) -> Result<ToolOutput> {
        let arguments = match arguments {
            Value::Null => Value::Object(Default::default()),
            v @ Value::Object(_) => v,
            other => {
                return Err(Error::invalid_input(format!(
                    "the arguments must be a JSON object, got {}",
                    json_type(&other)
                )));
            }
        };
        let Some(entry) = REGISTRY.iter().find(|e| e.name == name) else {
            if COMMAND_TOOLS.contains(&name) {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!(
                        "{name} is not available: the {} provider runs no commands",
                        self.inner.sandbox.kind().as_str()
                    ),
                ));
            }
            return Err(Error::invalid_input(format!(
                "there is no tool named `{}`; available tools: {}",
                crate::error::truncate_for_message(name),
                self.tool_names().join(", ")
            )));
        };
        if !self.inner.offered.iter().any(|e| e.name == name) {
            let decision = self.inner.policy.tool_decision(name);
            return Err(Error::denied(format!(
                "{name} is not offered in this session: {}",
                decision.rule
            )));
        }
        let ctx = Ctx {
            fs: self.inner.sandbox.fs(),
            policy: &self.inner.policy,
            limits: &self.inner.limits,
            run: &self.inner.run,
        };
        (entry.call)(&ctx, arguments)
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Builds a [`Toolset`].
pub struct ToolsetBuilder {
    sandbox: Arc<dyn Sandbox>,
    policy: Option<Policy>,
    limits: Limits,
    secrets: Vec<Secret>,
    track_changes: bool,
}

impl ToolsetBuilder {
    /// The policy. Default: [`Policy::default`] (`workspace-write`).
    pub fn policy(mut self, policy: Policy) -> ToolsetBuilder {
        self.policy = Some(policy);
        self
    }

    /// Per-tool limits. Default: [`Limits::default`].
    pub fn limits(mut self, limits: Limits) -> ToolsetBuilder {
        self.limits = limits;
        self
    }

    /// Adds a secret to redact from every output. Default: none.
    pub fn secret(mut self, name: impl Into<String>, value: impl Into<String>) -> ToolsetBuilder {
        self.secrets.push(Secret {
            name: name.into(),
            value: value.into(),
        });
        self
    }

    /// Whether to snapshot the workspace for `changes` (on a background
    /// thread, at build). Default: true. When false, `changes` is not offered.
    pub fn track_changes(mut self, yes: bool) -> ToolsetBuilder {
        self.track_changes = yes;
        self
    }

    /// Validates and builds.
    ///
    /// # Errors
    ///
    /// `invalid_input` for contradictory limits; `limit` when the secrets
    /// cannot be compiled.
    pub fn build(self) -> Result<Toolset> {
        self.limits.validate()?;
        let policy = self.policy.unwrap_or_default();
        let redactor = Redactor::new(&self.secrets)?;
        let offered: Vec<&'static Entry> = REGISTRY
            .iter()
            .filter(|e| policy.tool_decision(e.name).allowed)
            .filter(|e| self.track_changes || e.name != "changes")
            .collect();
        let baseline = (self.track_changes && offered.iter().any(|e| e.name == "changes"))
            .then(|| Baseline::start(self.sandbox.clone(), policy.clone()));
        Ok(Toolset {
            inner: Arc::new(Inner {
                sandbox: self.sandbox,
                policy,
                limits: self.limits,
                redactor,
                run: RunState::new(baseline),
                offered,
            }),
        })
    }
}
