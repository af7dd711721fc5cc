//! Custom tools (SPEC §5.2): tools the library's user writes in Rust and
//! adds with [`ToolsetBuilder::tool`](crate::ToolsetBuilder::tool).
//!
//! A [`CustomTool`] has a name, a description, typed `Params` (serde +
//! schemars: the input schema is derived, as the built-in tools' are) and a
//! handler. Every custom tool of a toolset lives in one [`ToolSource`],
//! [`CustomTools`], offered after the built-in tools; a call goes through
//! the toolset's one door like any other: the policy's gate, then the
//! arguments parsed into `Params` (a field that does not fit is an
//! `invalid_input` naming it, and the handler is not called), then the
//! handler, then the output limit of other sources' results, redaction and
//! the neutralising of control characters.
//!
//! The handler runs host-side, never in the sandbox, with the rights of
//! the process that serves the toolset. It is synchronous: the toolset's
//! call path is, and the MCP fronts call it on a thread of the blocking
//! pool (a custom tool's cost is [`Cost::Long`]: a thread of its own, and a
//! cancelled call is awaited). A handler that needs async work runs its own
//! runtime (`block_on`) on that thread. It receives a [`ToolContext`]: the
//! call id, the cancellation token, the run's metadata, a logger whose lines
//! go to the run's events, and the artifact publisher.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Annotations, Ctx, Describe, Family, REGISTRY, ToolFacts, ToolSpec};
use super::{Cost, MAX_DESCRIPTION_CHARS, SourceCall, ToolSource, cut_line, schema};
use crate::artifact::{FileRef, Publish, Published};
use crate::config::{Limits, Mode, ProviderKind};
use crate::error::{Error, Result};
use crate::output::ToolOutput;
use crate::path::WorkspacePath;
use crate::policy::Modes;
use crate::process::{CancelToken, OutputEvent};

/// Longest name of a custom tool, in bytes (the MCP limit).
pub const MAX_CUSTOM_TOOL_NAME_BYTES: usize = 64;

/// Longest line a custom tool logs, in chars (longer ones are cut, saying
/// so).
pub const MAX_LOG_LINE_CHARS: usize = 4_000;

/// How often [`ToolContext::wait_cancelled`] looks at the token.
const CANCEL_POLL: Duration = Duration::from_millis(5);

/// A tool written in Rust, added with
/// [`ToolsetBuilder::tool`](crate::ToolsetBuilder::tool).
///
/// ```
/// use cubby::{CustomTool, ToolContext, ToolResult, Toolset, virtual_sandbox, MemoryFs};
/// use schemars::JsonSchema;
/// use serde::Deserialize;
///
/// #[derive(Deserialize, JsonSchema)]
/// #[serde(deny_unknown_fields)]
/// struct Params {
///     /// Who to greet.
///     name: String,
/// }
///
/// struct Greet;
///
/// impl CustomTool for Greet {
///     type Params = Params;
///     fn name(&self) -> &str {
///         "greet"
///     }
///     fn description(&self) -> String {
///         "Greets someone; use it when asked to greet.".into()
///     }
///     fn call(&self, p: Params, ctx: &ToolContext<'_>) -> cubby::Result<ToolResult> {
///         ctx.log(&format!("greeting {}", p.name));
///         Ok(ToolResult::text(format!("Hello, {}!", p.name)))
///     }
/// }
///
/// let tools = Toolset::builder(virtual_sandbox(MemoryFs::new())).tool(Greet).build()?;
/// let out = tools.call("greet", serde_json::json!({"name": "Ada"}));
/// assert_eq!(out.text, "Hello, Ada!");
/// # Ok::<(), cubby::Error>(())
/// ```
pub trait CustomTool: Send + Sync + 'static {
    /// The arguments. The input schema is derived from it (draft 2020-12,
    /// inline, every object closed, as the built-in tools' schemas); doc
    /// comments on its fields become the model's argument help. A struct:
    /// the arguments are a JSON object. `#[serde(deny_unknown_fields)]`
    /// makes a misspelt argument an error instead of being ignored.
    type Params: DeserializeOwned + JsonSchema;

    /// The tool's name: 1 to 64 ASCII letters, digits, `_` or `-`, unique
    /// in the toolset, and not the name of a built-in tool (every name
    /// [`builtin_tools`](crate::builtin_tools) lists is reserved, offered
    /// or not in a given toolset: `read_file`, `run`, `view_file`,
    /// `skill`, …).
    fn name(&self) -> &str;

    /// What the model reads about the tool: what it does and when to use
    /// it (first sentence). 1 to [`MAX_DESCRIPTION_CHARS`] chars.
    fn description(&self) -> String;

    /// Hints for clients (MCP tool annotations). Default: what MCP assumes
    /// of a tool that says nothing — not read-only, destructive, not
    /// idempotent, open world.
    fn annotations(&self) -> Annotations {
        Annotations {
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: true,
        }
    }

    /// The modes that offer the tool when the builder offers it (see
    /// [`ToolsetBuilder::tool_offered`](crate::ToolsetBuilder::tool_offered)).
    /// Default: every mode for a read-only tool
    /// ([`annotations`](Self::annotations)), the writing modes
    /// (`workspace-write`, `full-access`) for any other.
    fn modes(&self) -> Modes {
        if self.annotations().read_only {
            Modes::ALL
        } else {
            Modes::WRITING
        }
    }

    /// JSON Schema of the structured part of the tool's results (the MCP
    /// `outputSchema`, sent when the front sends structured content).
    /// Default: any object. Declare a narrower one only if every result
    /// carries a value of it (a result of text alone carries `{}`).
    fn output_schema(&self) -> Value {
        serde_json::json!({"type": "object"})
    }

    /// Handles one call, host-side, on the caller's thread. `Err` becomes an
    /// `ERROR <kind>: <message>` result: say what the model should do next.
    /// A panic becomes an `ERROR internal: …` result and the toolset keeps
    /// serving.
    ///
    /// # Errors
    ///
    /// Whatever the tool fails with.
    fn call(&self, params: Self::Params, ctx: &ToolContext<'_>) -> Result<ToolResult>;
}

/// One instance serves the toolsets of every run: a factory adds
/// `Arc::clone(&tool)` to each.
impl<T: CustomTool> CustomTool for std::sync::Arc<T> {
    type Params = T::Params;
    fn name(&self) -> &str {
        (**self).name()
    }
    fn description(&self) -> String {
        (**self).description()
    }
    fn annotations(&self) -> Annotations {
        (**self).annotations()
    }
    fn modes(&self) -> Modes {
        (**self).modes()
    }
    fn output_schema(&self) -> Value {
        (**self).output_schema()
    }
    fn call(&self, params: T::Params, ctx: &ToolContext<'_>) -> Result<ToolResult> {
        (**self).call(params, ctx)
    }
}

/// What a custom tool returns: text for the model, and optionally a JSON
/// object (MCP `structuredContent`). Both are redacted, neutralised and
/// held to the limits of [`crate::MAX_SOURCE_TEXT_BYTES`] and
/// [`crate::MAX_SOURCE_STRUCTURED_BYTES`] on the way out.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolResult {
    text: String,
    structured: Option<Value>,
}

impl ToolResult {
    /// A result of text alone (its structured part is `{}`).
    pub fn text(text: impl Into<String>) -> ToolResult {
        ToolResult {
            text: text.into(),
            structured: None,
        }
    }

    /// Text and a JSON object.
    ///
    /// # Errors
    ///
    /// `internal` when `value` does not encode as a JSON object.
    pub fn json(text: impl Into<String>, value: &impl Serialize) -> Result<ToolResult> {
        match serde_json::to_value(value) {
            Ok(v @ Value::Object(_)) => Ok(ToolResult {
                text: text.into(),
                structured: Some(v),
            }),
            Ok(other) => Err(Error::internal(format!(
                "a custom tool's JSON result must be an object, not {}",
                super::json_kind(&other)
            ))),
            Err(e) => Err(Error::internal(format!(
                "a custom tool's JSON result cannot be encoded: {e}"
            ))),
        }
    }

    /// The model-facing text.
    pub fn text_part(&self) -> &str {
        &self.text
    }

    /// The JSON object, when there is one.
    pub fn structured(&self) -> Option<&Value> {
        self.structured.as_ref()
    }
}

/// What a custom tool's handler sees of its call and its run.
pub struct ToolContext<'a> {
    ctx: &'a Ctx<'a>,
    tool: &'a str,
    cancel: CancelToken,
    /// What the call published, in order: each one a line and attachments
    /// of its result.
    published: Mutex<Vec<Published>>,
}

impl std::fmt::Debug for ToolContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("tool", &self.tool)
            .field("call_id", &self.ctx.call_id)
            .finish_non_exhaustive()
    }
}

impl ToolContext<'_> {
    /// The call's id: the front's id of the request (MCP: the JSON-RPC
    /// request id, as text — what `notifications/cancelled` names), else
    /// `call-<n>`, numbered per run.
    pub fn call_id(&self) -> &str {
        self.ctx.call_id
    }

    /// The tool's name.
    pub fn tool_name(&self) -> &str {
        self.tool
    }

    /// The call's cancellation token: fired when the client cancels the
    /// call (MCP `notifications/cancelled`). A call made without one gets a
    /// token that never fires.
    pub fn cancel_token(&self) -> &CancelToken {
        &self.cancel
    }

    /// True once the client has cancelled the call: stop, and return
    /// whatever says so (the client no longer waits for the answer).
    pub fn cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Waits up to `timeout`, returning early when the call is cancelled;
    /// true when it was. A handler's sleep that cancellation ends.
    pub fn wait_cancelled(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.cancelled() {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            std::thread::sleep(CANCEL_POLL.min(deadline - now));
        }
    }

    /// The provider of the run's sandbox.
    pub fn provider(&self) -> ProviderKind {
        self.ctx.sandbox.kind()
    }

    /// The policy's mode.
    pub fn mode(&self) -> Mode {
        self.ctx.policy.mode()
    }

    /// The workspace root on the host (where commands see it too), for
    /// the providers that have one (`local`, `linux`); `None` for
    /// `virtual`. The handler runs with the server's rights: what it does
    /// there is not confined by the sandbox.
    pub fn workspace_root(&self) -> Option<std::path::PathBuf> {
        self.ctx.sandbox.command_path(&WorkspacePath::root())
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        self.ctx.limits
    }

    /// Logs a line to the run's events: every subscriber of the run
    /// ([`Toolset::subscribe`](crate::Toolset::subscribe)) and the call's
    /// own ([`CallOptions::on_output`](crate::CallOptions::on_output): over
    /// MCP, a progress notification when the client asked for progress),
    /// as an [`OutputEvent`] of process `tool:<name>`. The line is
    /// redacted, cut at [`MAX_LOG_LINE_CHARS`] and its control characters
    /// neutralised; a line feed ends it.
    pub fn log(&self, line: &str) {
        let redacted = self.ctx.redactor.redact_str(line);
        let cut = cut_line(&redacted, MAX_LOG_LINE_CHARS);
        let shown = crate::output::neutralize_line(&cut);
        let event = OutputEvent {
            process: format!("tool:{}", self.tool),
            chunk: format!("{shown}\n"),
        };
        self.ctx.procs.emit(&event, self.ctx.on_output);
    }

    /// Publishes `bytes` as an artifact of the run (SPEC §5.1) named
    /// `name`, of `media_type` (`None`: detected from the name and the
    /// bytes): into the run's content-addressed store, held to its budget
    /// (25 MB a file, 100 MB and 1,000 artifacts a run), the media type
    /// checked against the bytes' signature. The call's result gets, after
    /// the handler's text, the line the model reads for each artifact the
    /// handler published, and its attachments (a `resource_link` over MCP;
    /// the image too when it is one that can be shown), as every tool's
    /// artifacts do.
    ///
    /// # Errors
    ///
    /// `invalid_input` for a bad name or a declared type the bytes do not
    /// have; `denied` when the name or the bytes hold a registered secret,
    /// also inside a compressed stream (an artifact leaves unredacted, so
    /// nothing secret is published); `limit` over the budget or when those
    /// streams cannot be checked; `internal` when the store fails.
    pub fn publish(&self, name: &str, media_type: Option<&str>, bytes: &[u8]) -> Result<FileRef> {
        let redactor = self.ctx.redactor;
        if redactor.finds(name.as_bytes()) {
            return Err(Error::denied(format!(
                "{} would publish a secret's value (in the name of an artifact); \
                 artifacts leave unredacted, so it is not published",
                self.tool
            )));
        }
        crate::artifact::inflate::refuse_secret(
            redactor,
            &format!(
                "the artifact {} of {}",
                crate::path::escape_name(name.as_bytes()),
                self.tool
            ),
            bytes,
        )?;
        let request = Publish {
            name: name.to_string(),
            media_type: media_type.map(str::to_string),
            path: None,
        };
        let published = self.ctx.run.artifacts().publish_bytes(&request, bytes)?;
        let file = published.file.clone();
        crate::sync::lock(&self.published).push(published);
        Ok(file)
    }
}

/// Type erasure of [`CustomTool`]: arguments as JSON.
trait Erased: Send + Sync {
    fn call(&self, arguments: Value, ctx: &ToolContext<'_>) -> Result<ToolOutput>;
}

struct Typed<T>(T);

impl<T: CustomTool> Erased for Typed<T> {
    fn call(&self, arguments: Value, ctx: &ToolContext<'_>) -> Result<ToolOutput> {
        let params: T::Params = serde_path_to_error::deserialize(arguments).map_err(|e| {
            let path = e.path().to_string();
            let at = if path == "." {
                String::new()
            } else {
                format!("`{path}`: ")
            };
            Error::invalid_input(format!(
                "arguments for {} do not fit its schema: {at}{}; see the tool's input schema",
                ctx.tool,
                crate::output::truncate_for_message(&e.into_inner().to_string())
            ))
        })?;
        let result = self.0.call(params, ctx)?;
        let structured = result
            .structured
            .unwrap_or_else(|| Value::Object(Default::default()));
        let mut out = ToolOutput::ok(result.text, structured);
        for published in crate::sync::lock(&ctx.published).iter() {
            if !out.text.is_empty() && !out.text.ends_with('\n') {
                out.text.push('\n');
            }
            out.text.push_str(&super::publish::line(&published.file));
            out.attachments.extend(super::publish::attachments(
                ctx.ctx.run.artifacts(),
                published,
            ));
        }
        Ok(out)
    }
}

/// One custom tool, checked, its definition made once.
struct Registered {
    name: String,
    facts: ToolFacts,
    description: String,
    input_schema: Value,
    output_schema: Value,
    annotations: Annotations,
    tool: Box<dyn Erased>,
}

/// A custom tool before the toolset is built: kept with the builder until
/// [`CustomTools::new`] checks it.
pub(crate) struct Pending {
    registered: Registered,
}

impl Pending {
    /// `tool`, offered (in the modes it names) or only when `allow` names
    /// it.
    pub(crate) fn new<T: CustomTool>(tool: T, offered: bool) -> Pending {
        let annotations = tool.annotations();
        let facts = ToolFacts {
            family: Family::Other,
            read_only: annotations.read_only,
            streaming: false,
            cost: Cost::Long,
            modes: if offered { tool.modes() } else { Modes::NONE },
            snapshot: false,
            skills: false,
        };
        Pending {
            registered: Registered {
                name: tool.name().to_string(),
                facts,
                description: tool.description(),
                input_schema: schema::input_schema::<T::Params>(),
                output_schema: tool.output_schema(),
                annotations,
                tool: Box::new(Typed(tool)),
            },
        }
    }
}

/// Every custom tool of a toolset, as one [`ToolSource`].
pub(crate) struct CustomTools {
    tools: Vec<Registered>,
}

impl CustomTools {
    /// The source of `pending`, each checked: its name (well formed, not
    /// reserved, unique among them), its description, its schema.
    ///
    /// # Errors
    ///
    /// `invalid_input` naming the first tool that fails a check.
    pub(crate) fn new(pending: Vec<Pending>) -> Result<CustomTools> {
        let mut tools: Vec<Registered> = Vec::with_capacity(pending.len());
        for Pending { registered } in pending {
            check(&registered, &tools)?;
            tools.push(registered);
        }
        Ok(CustomTools { tools })
    }

    fn find(&self, name: &str) -> Option<&Registered> {
        self.tools.iter().find(|t| t.name == name)
    }
}

/// `Err(invalid_input)` naming `tool` when it may not be added beside
/// `earlier`.
fn check(tool: &Registered, earlier: &[Registered]) -> Result<()> {
    let name = &tool.name;
    let fail = |why: String| {
        Err(Error::invalid_input(format!(
            "custom tool `{}`: {why}",
            crate::output::truncate_for_message(name)
        )))
    };
    let well_formed = (1..=MAX_CUSTOM_TOOL_NAME_BYTES).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'));
    if !well_formed {
        return fail(format!(
            "a custom tool's name is 1 to {MAX_CUSTOM_TOOL_NAME_BYTES} ASCII letters, digits, \
             `_` or `-`; rename it"
        ));
    }
    // The MCP fronts add no tools of their own: the built-in names are all
    // the reserved ones.
    if REGISTRY.iter().any(|e| e.name == name) {
        return fail("the name is reserved for a built-in tool; rename the custom tool".into());
    }
    if earlier.iter().any(|t| t.name == *name) {
        return fail("two custom tools have this name; rename one".into());
    }
    let chars = tool.description.chars().count();
    if tool.description.trim().is_empty() || chars > MAX_DESCRIPTION_CHARS {
        return fail(format!(
            "its description has {chars} chars; a description is 1 to \
             {MAX_DESCRIPTION_CHARS} chars and says what the tool does and when to use it"
        ));
    }
    if tool.input_schema.get("type") != Some(&Value::String("object".into())) {
        return fail(
            "its `Params` is not a JSON object (a struct): a tool's arguments are an object".into(),
        );
    }
    if tool.output_schema.get("type") != Some(&Value::String("object".into())) {
        return fail("its output schema is not of an object (`\"type\": \"object\"`)".into());
    }
    Ok(())
}

impl ToolSource for CustomTools {
    fn list(&self) -> Vec<(String, ToolFacts)> {
        self.tools
            .iter()
            .map(|t| (t.name.clone(), t.facts))
            .collect()
    }

    fn spec(&self, name: &str, _describe: &Describe<'_>) -> Option<ToolSpec> {
        self.find(name).map(|t| ToolSpec {
            name: t.name.clone(),
            description: t.description.clone(),
            input_schema: t.input_schema.clone(),
            output_schema: t.output_schema.clone(),
            annotations: t.annotations,
            facts: t.facts,
        })
    }

    fn call(&self, name: &str, arguments: Value, call: &SourceCall<'_>) -> Result<ToolOutput> {
        let Some(tool) = self.find(name) else {
            return Err(Error::internal(format!(
                "{name} is not a custom tool; the server is still running"
            )));
        };
        let context = ToolContext {
            ctx: call.ctx,
            tool: &tool.name,
            cancel: call.ctx.cancel.cloned().unwrap_or_default(),
            published: Mutex::default(),
        };
        tool.tool.call(arguments, &context)
    }
}
