//! [`Toolset`]: the tools one agent run is offered, and the one door to them.
//!
//! A call goes: arguments (JSON) → shape check → policy gate (is the tool
//! offered? from its facts: the modes that give it, its family against the
//! provider's capabilities) → its [`ToolSource`] (a built-in tool parses
//! paths into [`WorkspacePath`](crate::WorkspacePath)s and checks path
//! policy, then acts in the sandbox) → the output limit (results of other
//! sources) → output shaping (secret redaction) → a [`ToolOutput`]. A panic
//! inside a tool becomes an `internal` error result; the toolset keeps
//! serving.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use std::sync::Mutex;

use crate::artifact::{Artifacts, FileRef, Store};
use crate::config::{Limits, WebSearchConfig};
use crate::error::{Error, ErrorKind, Result};
use crate::exec_policy::BeforeRun;
use crate::host_env::HostEnv;
use crate::output::{Redactor, Secret, ToolOutput};
use crate::path::WorkspacePath;
use crate::policy::Policy;
use crate::process::{
    CancelToken, ProcessTable, RETAINED_LOG_BYTES, RETAINED_LOG_TOTAL_BYTES, Subscriber,
};
use crate::sandbox::{CommandEnv, Sandbox};
use crate::skills::{SKILLS_DIR_ENV, Skills};
use crate::tools::{
    Baseline, BuiltIns, Cost, Ctx, CustomTool, CustomTools, Describe, ExecSettings, Family,
    MAX_DESCRIPTION_CHARS, Pending, RunState, SourceCall, ToolFacts, ToolSource, ToolSpec,
};
use crate::web::{Configured, Resolver, SearchBackend, SystemResolver, WebSettings};

/// Largest JSON argument document accepted, in bytes.
pub const MAX_ARGUMENT_BYTES: usize = 64 * 1024 * 1024;

/// Longest text of a result from a source other than the built-in tools,
/// in bytes (head and tail kept); the built-in tools keep their own limits.
pub const MAX_SOURCE_TEXT_BYTES: usize = 64 * 1024;

/// Largest structured value of such a result, JSON-encoded, in bytes; a
/// larger one is replaced by `{"cut": true, "bytes": N}`.
pub const MAX_SOURCE_STRUCTURED_BYTES: usize = 256 * 1024;

/// Most bytes of attachments such a result may carry; the attachments
/// past it are dropped, and the text says so.
pub const MAX_SOURCE_ATTACHMENT_BYTES: usize = 8 * 1024 * 1024;

/// Where [`Toolset::seed`] puts an artifact that has no path, relative to
/// the root: `<SEED_DIR>/<name>`.
pub const SEED_DIR: &str = ".cubby/input";

/// The directory of the artifact store in a state directory.
pub const ARTIFACTS_DIR: &str = "artifacts";

/// Longest tool name a source may have, in chars (the MCP limit).
pub const MAX_TOOL_NAME_CHARS: usize = 64;

/// A tool the toolset knows, offered or not.
#[derive(Clone)]
struct Known {
    name: String,
    facts: ToolFacts,
    /// Index into the sources (0: the built-in tools).
    source: usize,
    offered: bool,
}

/// What a front may know of a toolset's tools without a run: each known
/// tool's facts, and whether a call stays bounded. Cheap to clone; the same
/// for every toolset a factory builds.
#[derive(Clone)]
pub struct ToolCatalog {
    known: Arc<[Known]>,
    sources: Arc<[Arc<dyn ToolSource>]>,
}

impl std::fmt::Debug for ToolCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.known.iter().map(|k| &k.name))
            .finish()
    }
}

impl ToolCatalog {
    fn find(&self, name: &str) -> Option<&Known> {
        self.known.iter().find(|k| k.name == name)
    }

    /// The facts of `name`, offered or not; `None` for a tool the toolset
    /// does not have.
    pub fn facts(&self, name: &str) -> Option<ToolFacts> {
        self.find(name).map(|k| k.facts)
    }

    /// Every tool the toolset has, offered or not, in order, with its facts.
    pub fn tools(&self) -> impl Iterator<Item = (&str, ToolFacts)> {
        self.known.iter().map(|k| (k.name.as_str(), k.facts))
    }

    /// True when a call of `name` with `arguments` costs
    /// [`Cost::Bounded`]: the tool's cost class is, and its source says
    /// these arguments keep it so.
    pub fn is_bounded(&self, name: &str, arguments: &Value) -> bool {
        self.find(name).is_some_and(|k| {
            k.facts.cost == Cost::Bounded && self.sources[k.source].bounded(name, arguments)
        })
    }
}

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
    redactor: Redactor,
    run: RunState,
    catalog: ToolCatalog,
    exec: ExecSettings,
    web: WebSettings,
    /// The skills found when the toolset was built.
    skills: Arc<Skills>,
    subscribers: Arc<Mutex<Vec<Subscriber>>>,
    /// The number of the next call made without an id (`call-<n>`).
    next_call: AtomicU64,
    /// This run's gateway token (revoked when the run ends).
    gateway: Option<crate::net::GatewayRun>,
    /// True once the run has ended ([`Toolset::end`], or the last clone
    /// dropped).
    ended: std::sync::atomic::AtomicBool,
    // Declared last: dropped after everything else, and its Drop kills
    // every process still running when the run ends.
    procs: ProcessTable,
}

/// What the end of a run collected (see [`Toolset::end`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunEnd {
    /// The artifacts the last collection of `$CUBBY_OUTPUT_DIR` published:
    /// what the run's commands (a background process of `start_process`,
    /// say) left there after its last `run`.
    pub published: Vec<FileRef>,
    /// What that collection skipped, each as `path: why` (the first 20,
    /// then a line counting the rest).
    pub skipped: Vec<String>,
}

impl Inner {
    /// Ends the run once: its processes stopped (their trees killed and
    /// reaped, so nothing writes any more), `$CUBBY_OUTPUT_DIR` collected
    /// a last time, the directory removed when nothing is left in it.
    fn end(&self) -> RunEnd {
        if self.ended.swap(true, Ordering::AcqRel) {
            return RunEnd::default();
        }
        if let Some(gateway) = &self.gateway {
            gateway.revoke();
        }
        self.procs.close();
        for source in self.catalog.sources.iter() {
            source.end();
        }
        let fs = self.sandbox.fs();
        let Some(dir) = self.run.made_output_dir(fs) else {
            return RunEnd::default();
        };
        let found = crate::tools::publish::collect(fs, &self.redactor, &self.run, &dir);
        self.run.tidy_output_dir(fs, &dir);
        if !found.is_empty() {
            tracing::debug!(
                "the run's end collected {} artifact(s) from its output directory, skipped {}",
                found.published.len(),
                found.skipped.len() + found.skipped_more
            );
        }
        RunEnd {
            published: found.published.iter().map(|p| p.file.clone()).collect(),
            skipped: found.skipped_lines(),
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // A run dropped without `end` ends here; a panic of the collection
        // must not become an abort.
        let _ = catch_unwind(AssertUnwindSafe(|| self.end()));
    }
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
            host: HostEnv::default(),
            secrets: Vec::new(),
            redacted: Vec::new(),
            track_changes: true,
            before_run: None,
            shell: None,
            retained_log_bytes: RETAINED_LOG_BYTES,
            retained_log_total_bytes: RETAINED_LOG_TOTAL_BYTES,
            subscribers: Vec::new(),
            web_search: None,
            search_backend: None,
            resolver: None,
            sources: Vec::new(),
            custom: Vec::new(),
            artifact_store: None,
            artifact_budget: crate::artifact::Budget::default(),
        }
    }

    /// The run's artifacts (SPEC §5.1): what its tools and commands
    /// published, newest first through [`Artifacts::list`].
    pub fn artifacts(&self) -> &Artifacts {
        self.inner.run.artifacts()
    }

    /// The bytes of this run's artifact `uri`, when they are at most `max`
    /// bytes (what `resources/read` serves).
    ///
    /// # Errors
    ///
    /// `invalid_input` for a malformed URI; `not_found` for an artifact of
    /// another run or an unknown digest; `too_large` naming the size and
    /// the limit; `denied` when the bytes hold a registered secret, also
    /// inside a compressed stream, or hold streams too large to check (an
    /// artifact leaves unredacted, so it does not leave at all).
    pub fn read_artifact(&self, uri: &str, max: u64) -> Result<(FileRef, Vec<u8>)> {
        let artifacts = self.artifacts();
        let file = artifacts.resolve(uri)?;
        let bytes = artifacts.read(&file, max)?;
        match crate::artifact::inflate::find_secret(&self.inner.redactor, &bytes) {
            Ok(None) => {}
            Ok(Some(_)) => {
                return Err(Error::denied(format!(
                    "artifact {} holds a secret's value (in its bytes or in compressed data); \
                     artifacts are not redacted, so it is not served",
                    crate::path::escape_name(file.name.as_bytes())
                )));
            }
            Err(e) => {
                return Err(Error::denied(format!(
                    "artifact {} is not served: {}, so it cannot be checked for secrets",
                    crate::path::escape_name(file.name.as_bytes()),
                    e.message()
                )));
            }
        }
        Ok((file, bytes))
    }

    /// Seeds this run with artifacts of earlier runs of the workspace (a
    /// follow-up turn): each FileRef's bytes, from the workspace's store,
    /// are written into the sandbox at its `path` (or at
    /// `.cubby/input/<name>` when it has none, or when its path is in the
    /// runs' output directories, `.cubby/output/`: an ended run's, or
    /// another live run's) and published in this run;
    /// the FileRefs of this run come back, in order.
    ///
    /// # Errors
    ///
    /// `not_found` for a digest the store does not hold; `invalid_input`
    /// for a bad name or path; what the sandbox says of the write (a
    /// protected path, a read-only mode); as [`Artifacts::publish`].
    pub fn seed(&self, files: &[FileRef]) -> Result<Vec<FileRef>> {
        let artifacts = self.artifacts();
        let mut seeded = Vec::with_capacity(files.len());
        for file in files {
            let name = crate::artifact::name::check_name(&file.name)?;
            // A path in the runs' output directories (where an earlier
            // run's command left the file) is not written again: that
            // directory was its run's, removed when the run ended, and a
            // live one is another run's, whose next collection would
            // publish what was put there (R4-7). Such a file is seeded at
            // `<SEED_DIR>/<name>`, as one with no path.
            let path = match &file.path {
                Some(p) => Some(WorkspacePath::parse(p)?)
                    .filter(|p| crate::tools::publish::refuse_output_write(p).is_ok()),
                None => None,
            };
            let path = match path {
                Some(p) => p,
                None => WorkspacePath::parse(&format!("{SEED_DIR}/{name}"))?,
            };
            self.inner.policy.check_write(&path)?;
            let mut blob = artifacts.store().open_blob(&file.sha256)?;
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(
                &mut std::io::Read::take(&mut blob, crate::artifact::MAX_ARTIFACT_BYTES + 1),
                &mut bytes,
            )
            .map_err(|e| Error::new(ErrorKind::Internal, format!("artifact store: {e}")))?;
            self.inner.run.before_mutation();
            self.inner.sandbox.fs().write_atomic(&path, &bytes)?;
            let published = artifacts.publish_bytes(
                &crate::artifact::Publish {
                    name,
                    media_type: Some(file.media_type.clone()),
                    path: Some(path.display()),
                },
                &bytes,
            )?;
            if published.file.sha256 != file.sha256 {
                return Err(Error::new(
                    ErrorKind::Internal,
                    format!(
                        "artifact store: the blob of {} does not hash to its digest",
                        file.sha256
                    ),
                ));
            }
            seeded.push(published.file);
        }
        Ok(seeded)
    }

    /// Subscribes to the output of every command of this run: each chunk,
    /// redacted and ANSI-stripped, as it arrives.
    pub fn subscribe(&self, subscriber: Subscriber) {
        if let Ok(mut subs) = self.inner.subscribers.lock() {
            subs.push(subscriber);
        }
    }

    /// The processes of this run.
    pub fn processes(&self) -> &ProcessTable {
        &self.inner.procs
    }

    /// Ends the run's processes now (they also end when the last clone of
    /// the toolset is dropped).
    pub fn stop_processes(&self) {
        self.inner.procs.stop_all();
    }

    /// The requests this run's commands made through the sandbox's
    /// gateways (`[gateway.<name>]`), oldest first: method, route, status,
    /// bytes, ms. Empty without gateways.
    pub fn gateway_events(&self) -> Vec<crate::net::GatewayEvent> {
        self.inner
            .gateway
            .as_ref()
            .map_or_else(Vec::new, crate::net::GatewayRun::events)
    }

    /// Ends the run (SPEC §5.1, "when the run ends"): its processes are
    /// stopped, then `$CUBBY_OUTPUT_DIR` is collected a last time — what
    /// background processes left there since the last `run` becomes
    /// artifacts of the run, in [`Toolset::artifacts`] and in the store
    /// (their FileRefs can [seed](Toolset::seed) a later run of the
    /// workspace) — and the directory is removed when nothing is left in
    /// it. Done once: a second call, and the drop of the last clone
    /// (which ends a run not ended yet), find nothing more. The MCP fronts
    /// call it when a session ends.
    pub fn end(&self) -> RunEnd {
        self.inner.end()
    }

    /// The bytes of file `file` (a path in the skill's directory, from its
    /// file list; `SKILL.md` among them) of skill `name`, as the toolset
    /// found it: read through the confined file system and `deny_read`,
    /// as the `skill` tool reads one (no link, no second hard link), at
    /// most `max` bytes. What the MCP skills extension (SEP-2640) serves.
    ///
    /// # Errors
    ///
    /// `not_found` for a skill or file the catalog does not have;
    /// `path_escape` for a path out of the skill; `too_large` naming the
    /// size and `max`; `denied` for a `deny_read` path, a hard link, or
    /// bytes that hold a registered secret (they are served unredacted, so
    /// they are not served).
    pub fn read_skill_file(&self, name: &str, file: &str, max: u64) -> Result<Vec<u8>> {
        let skill = self.inner.skills.get(name).ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound,
                format!(
                    "no skill `{}` in this session; skills/list names the skills",
                    crate::output::truncate_for_message(name)
                ),
            )
        })?;
        let bytes = crate::tools::skill::read_skill_bytes(
            self.inner.sandbox.fs(),
            &self.inner.policy,
            skill,
            file,
            max,
        )?;
        if self.inner.redactor.finds(&bytes) {
            return Err(Error::denied(format!(
                "file `{}` of skill `{name}` holds a secret's value; it is served unredacted, \
                 so it is not served (the `skill` tool shows it redacted)",
                crate::output::truncate_for_message(file)
            )));
        }
        // Compressed too (R4-1's rule for what leaves unredacted).
        crate::artifact::inflate::refuse_secret(
            &self.inner.redactor,
            &format!(
                "file `{}` of skill `{name}`",
                crate::output::truncate_for_message(file)
            ),
            &bytes,
        )?;
        Ok(bytes)
    }

    /// True once the run has ended ([`Toolset::end`]).
    pub fn has_ended(&self) -> bool {
        self.inner.ended.load(Ordering::Acquire)
    }

    /// Names of the offered tools, in order.
    pub fn tool_names(&self) -> Vec<&str> {
        self.offered().map(|k| k.name.as_str()).collect()
    }

    fn offered(&self) -> impl Iterator<Item = &Known> {
        let sources = &self.inner.catalog.sources;
        self.inner
            .catalog
            .known
            .iter()
            .filter(|k| k.offered && sources[k.source].available(&k.name))
    }

    /// Calls `notify` whenever a source's set of offered tools changes
    /// (an upstream server's listing): the MCP fronts send
    /// `notifications/tools/list_changed`.
    pub fn watch_tools(&self, notify: Arc<dyn Fn() + Send + Sync>) {
        for source in self.inner.catalog.sources.iter() {
            source.watch(notify.clone());
        }
    }

    /// Definitions of the offered tools; their descriptions quote the
    /// limits of this toolset and name only tools it offers.
    pub fn tools(&self) -> Vec<ToolSpec> {
        let names = self.tool_names();
        let skills = self.inner.skills.names();
        let describe = Describe::new(self.inner.policy.limits(), &names).with_skills(&skills);
        let sources = &self.inner.catalog.sources;
        self.offered()
            .filter_map(|k| {
                let mut spec = sources[k.source].spec(&k.name, &describe)?;
                // The facts the gate decided from.
                spec.name.clone_from(&k.name);
                spec.facts = k.facts;
                // What another program wrote (an upstream's definitions)
                // leaves as a result does: redacted, then cut, its control
                // characters shown, never acted on (red-team pass 11, U5).
                let redactor = &self.inner.redactor;
                let mut description = redactor.redact_str(&spec.description);
                if description.chars().nth(MAX_DESCRIPTION_CHARS).is_some()
                    && let Some((at, _)) = description.char_indices().nth(MAX_DESCRIPTION_CHARS - 1)
                {
                    description.truncate(at);
                    description.push('…');
                }
                spec.description = crate::output::neutralize_controls(&description).into_owned();
                for schema in [&mut spec.input_schema, &mut spec.output_schema] {
                    redactor.redact_value(schema);
                    crate::output::neutralize_value(schema);
                }
                Some(spec)
            })
            .collect()
    }

    /// The skills this toolset found when it was built (the `skill`
    /// tool's, the catalog of [`Toolset::instructions`]; `cubby doctor`
    /// lists them and the skipped ones).
    pub fn skills(&self) -> &Skills {
        &self.inner.skills
    }

    /// The server's instructions for a front that has them (MCP): what
    /// cubby is and when to use its tools, then the catalog of skills
    /// (when `skill` is offered), at most `max_chars` in all: the list of
    /// protected paths is shortened to fit, and the catalog shows as many
    /// skills as fit in what is left (at most
    /// [`crate::skills::MAX_CATALOG_CHARS`]).
    ///
    /// What comes from the workspace (skill descriptions, protected names)
    /// is redacted before it is cut, and its control characters are
    /// neutralised, as in a tool's result; the whole text is redacted again.
    pub fn instructions(&self, max_chars: usize) -> String {
        let _scope = crate::output::CallScope::enter(&self.inner.redactor);
        let text = self
            .inner
            .redactor
            .redact_str(&self.instructions_unredacted(max_chars));
        crate::output::neutralize_controls(&text).into_owned()
    }

    fn instructions_unredacted(&self, max_chars: usize) -> String {
        let base = self.base_instructions(max_chars);
        let skills = &self.inner.skills;
        let offered = self
            .offered()
            .any(|k| k.facts.skills && k.source == BUILT_IN);
        if !offered || skills.is_empty() {
            return base;
        }
        let room = max_chars.saturating_sub(base.chars().count() + 2);
        let mut catalog = skills.catalog(room.min(crate::skills::MAX_CATALOG_CHARS));
        if catalog.is_empty() {
            catalog = format!(
                "{} skills: call `skill` for the catalog.",
                skills.found.len()
            );
            if catalog.chars().count() > room {
                return base;
            }
        }
        format!("{base}\n\n{catalog}")
    }

    fn base_instructions(&self, max_chars: usize) -> String {
        let policy = self.policy();
        let names = self.tool_names();
        let (commands, guard) =
            crate::tools::guidance(&Describe::new(self.inner.policy.limits(), &names));
        let head = format!(
            "cubby serves one workspace directory in a sandbox (provider `{}`, mode `{}`). For \
             files{commands} in this workspace, use these tools instead of your client's built-in \
             ones: they act inside the sandbox and its policy. Every path is relative to the \
             workspace root; absolute paths, `..` that leaves the root and symbolic links are \
             refused.{guard} Errors read `ERROR <kind>: <message>` and say what to do next.",
            self.sandbox().kind().as_str(),
            policy.mode().as_str(),
        );
        let tail = format!(" Tools: {}.", names.join(", "));
        // Names escaped (redacted first) as every tool shows a path.
        let protected: Vec<std::borrow::Cow<'_, str>> = policy
            .protected()
            .map(|p| crate::path::escape_name(p.as_bytes()))
            .collect();
        let mut shown = protected.len();
        loop {
            let mut list = protected[..shown].join(", ");
            if shown < protected.len() {
                list.push_str(&format!(" and {} more", protected.len() - shown));
            }
            let middle = if protected.is_empty() {
                String::new()
            } else {
                format!(" Protected (read-only) paths: {list}.")
            };
            let text = format!("{head}{middle}{tail}");
            if text.chars().count() <= max_chars || shown == 0 {
                return text;
            }
            shown -= 1;
        }
    }

    /// What a front may know of the tools without a run (facts, bounded
    /// calls); the same for every toolset of one factory.
    pub fn catalog(&self) -> &ToolCatalog {
        &self.inner.catalog
    }

    /// The limits in force (the policy's).
    pub fn limits(&self) -> &Limits {
        self.inner.policy.limits()
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
        self.call_cancellable(name, arguments, None)
    }

    /// Calls a tool that `cancel` can interrupt: a `run` waiting on it kills
    /// its command's whole tree when the token fires.
    pub fn call_cancellable(
        &self,
        name: &str,
        arguments: Value,
        cancel: Option<&CancelToken>,
    ) -> ToolOutput {
        let options = CallOptions {
            cancel: cancel.cloned(),
            ..CallOptions::default()
        };
        self.call_with(name, arguments, &options)
    }

    /// Calls a tool with per-call options: cancellation, and a subscriber
    /// that receives this call's command output as it arrives (for progress
    /// notifications).
    pub fn call_with(&self, name: &str, arguments: Value, options: &CallOptions) -> ToolOutput {
        let result = catch_unwind(AssertUnwindSafe(|| {
            // Every cut made while the result is built redacts first.
            let _scope = crate::output::CallScope::enter(&self.inner.redactor);
            self.dispatch(name, arguments, options)
        }))
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
            // A source's error text (an upstream's, a custom tool's) is cut
            // like its results, redacted before the cut.
            Err(e) if e.message().len() > MAX_SOURCE_TEXT_BYTES => {
                let _scope = crate::output::CallScope::enter(&self.inner.redactor);
                let cut = crate::output::cap_head_tail(e.message(), MAX_SOURCE_TEXT_BYTES, |n| {
                    format!("\n[… {n} bytes of the error cut …]\n")
                });
                ToolOutput::error(&Error::new(e.kind(), cut))
            }
            Err(e) => ToolOutput::error(&e),
        };
        self.inner.redactor.redact_output(&mut out);
        // Last: no escape sequence from a file, a name or a command leaves.
        crate::output::neutralize_output(&mut out);
        out
    }

    fn dispatch(&self, name: &str, arguments: Value, options: &CallOptions) -> Result<ToolOutput> {
        let arguments = match arguments {
            Value::Null => Value::Object(Default::default()),
            v @ Value::Object(_) => v,
            other => {
                return Err(Error::invalid_input(format!(
                    "the arguments must be a JSON object, got {}",
                    crate::tools::json_kind(&other)
                )));
            }
        };
        let catalog = &self.inner.catalog;
        let Some(known) = catalog.find(name) else {
            if let Some(why) = catalog.sources.iter().find_map(|s| s.refusal(name)) {
                return Err(Error::denied(why));
            }
            return Err(Error::invalid_input(format!(
                "there is no tool named `{}`; available tools: {}",
                crate::output::truncate_for_message(&crate::path::escape_controls(name)),
                self.tool_names().join(", ")
            )));
        };
        if known.facts.family == Family::Commands && !self.inner.sandbox.supports_commands() {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "{name} is not available: the {} provider runs no commands",
                    self.inner.sandbox.kind().as_str()
                ),
            ));
        }
        if !known.offered && known.facts.skills && self.inner.skills.is_empty() {
            let dirs: Vec<String> = self
                .inner
                .policy
                .skills_dirs()
                .iter()
                .map(|d| format!("`{}`", d.display_dir()))
                .collect();
            return Err(Error::denied(format!(
                "{name} is not offered in this session: no skills were found{}; a skill is \
                 `<dir>/<name>/SKILL.md`, read when a session starts",
                if dirs.is_empty() {
                    " (no skills directory is configured: `[skills] dirs`)".to_string()
                } else {
                    format!(" in {}", dirs.join(", "))
                }
            )));
        }
        if !known.offered {
            let decision = self.inner.policy.tool_decision(name, known.facts.modes);
            return Err(Error::denied(format!(
                "{name} is not offered in this session: {}",
                decision.rule
            )));
        }
        let call_id = match &options.call_id {
            Some(id) => std::borrow::Cow::Borrowed(id.as_str()),
            None => std::borrow::Cow::Owned(format!(
                "call-{}",
                self.inner.next_call.fetch_add(1, Ordering::Relaxed)
            )),
        };
        let ctx = Ctx {
            fs: self.inner.sandbox.fs(),
            redactor: &self.inner.redactor,
            sandbox: self.inner.sandbox.as_ref(),
            policy: &self.inner.policy,
            limits: self.inner.policy.limits(),
            run: &self.inner.run,
            procs: &self.inner.procs,
            exec: &self.inner.exec,
            cancel: options.cancel.as_ref(),
            call_id: &call_id,
            on_output: options.on_output.as_ref(),
            web: &self.inner.web,
            skills: &self.inner.skills,
        };
        let out = catalog.sources[known.source].call(name, arguments, &SourceCall { ctx: &ctx })?;
        Ok(if known.source == BUILT_IN {
            out
        } else {
            bound_source_output(out)
        })
    }
}

/// The index of the built-in tools among the sources.
const BUILT_IN: usize = 0;

/// A result of another source held to the limits every result leaves
/// under: text at most [`MAX_SOURCE_TEXT_BYTES`] (head and tail, redacted
/// before the cut), the structured value at most
/// [`MAX_SOURCE_STRUCTURED_BYTES`], attachments at most
/// [`MAX_SOURCE_ATTACHMENT_BYTES`].
fn bound_source_output(mut out: ToolOutput) -> ToolOutput {
    out.text = crate::output::cap_head_tail(&out.text, MAX_SOURCE_TEXT_BYTES, |cut| {
        format!(
            "\n[{} bytes cut: the result is over the limit of {MAX_SOURCE_TEXT_BYTES} bytes]\n",
            crate::output::thousands(cut)
        )
    });
    let encoded = serde_json::to_vec(&out.structured).map_or(usize::MAX, |v| v.len());
    if encoded > MAX_SOURCE_STRUCTURED_BYTES {
        out.structured = serde_json::json!({"cut": true, "bytes": encoded});
    }
    let mut total = 0usize;
    let before = out.attachments.len();
    out.attachments.retain(|a| {
        let size = match a {
            crate::output::Attachment::Image(image) => image.bytes.len(),
            crate::output::Attachment::Artifact(_) => 0,
        };
        total = total.saturating_add(size);
        total <= MAX_SOURCE_ATTACHMENT_BYTES
    });
    let dropped = before - out.attachments.len();
    if dropped > 0 {
        out.text.push_str(&format!(
            "\n[{dropped} attachment(s) dropped: over the limit of \
             {MAX_SOURCE_ATTACHMENT_BYTES} bytes]"
        ));
    }
    out
}

/// Per-call options for [`Toolset::call_with`].
#[derive(Clone, Default)]
pub struct CallOptions {
    /// Cancels the call (a waiting `run` kills its whole tree; a custom
    /// tool sees it in [`ToolContext::cancelled`](crate::ToolContext::cancelled)).
    pub cancel: Option<CancelToken>,
    /// The front's id of the call (MCP: the JSON-RPC request id, as text),
    /// what a custom tool reads as [`ToolContext::call_id`](crate::ToolContext::call_id).
    /// Default: none (the toolset numbers the call, `call-<n>`).
    pub call_id: Option<String>,
    /// Receives this call's command output, shaped, as it arrives.
    pub on_output: Option<Subscriber>,
}

impl std::fmt::Debug for CallOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallOptions")
            .field("cancel", &self.cancel)
            .field("call_id", &self.call_id)
            .field("on_output", &self.on_output.is_some())
            .finish()
    }
}

/// Builds a [`Toolset`].
pub struct ToolsetBuilder {
    sandbox: Arc<dyn Sandbox>,
    policy: Option<Policy>,
    host: HostEnv,
    secrets: Vec<Secret>,
    /// Values redacted from every output that commands never get (an
    /// upstream server's secrets).
    redacted: Vec<Secret>,
    track_changes: bool,
    before_run: Option<BeforeRun>,
    shell: Option<Vec<String>>,
    retained_log_bytes: usize,
    retained_log_total_bytes: usize,
    subscribers: Vec<Subscriber>,
    web_search: Option<WebSearchConfig>,
    search_backend: Option<Arc<dyn SearchBackend>>,
    resolver: Option<Arc<dyn Resolver>>,
    sources: Vec<Arc<dyn ToolSource>>,
    custom: Vec<Pending>,
    artifact_store: Option<Arc<Store>>,
    artifact_budget: crate::artifact::Budget,
}

impl ToolsetBuilder {
    /// Adds a tool written in Rust ([`CustomTool`]), offered in the modes
    /// its [`CustomTool::modes`] name (by default: every mode for a
    /// read-only tool, the writing modes for any other) unless `deny` names
    /// it. Its handler runs host-side, never in the sandbox. The custom
    /// tools are one source, offered after the built-in tools and the
    /// sources added with [`source`](Self::source). Its name is checked at
    /// [`build`](Self::build): a bad name, a built-in tool's name or one
    /// another tool has is an error naming it.
    pub fn tool(self, tool: impl CustomTool) -> ToolsetBuilder {
        self.tool_offered(tool, true)
    }

    /// Adds a custom tool as [`tool`](Self::tool) does, offered only when
    /// `offered` is true (in the modes it names) or the policy's `allow`
    /// names it; `deny` always wins.
    pub fn tool_offered(mut self, tool: impl CustomTool, offered: bool) -> ToolsetBuilder {
        self.custom.push(Pending::new(tool, offered));
        self
    }

    /// Adds a source of tools, offered after the built-in tools and the
    /// sources added before it, through the same gate (allow, deny, the
    /// modes its facts name), output limit and redaction. Default: only the
    /// built-in tools.
    pub fn source(mut self, source: Arc<dyn ToolSource>) -> ToolsetBuilder {
        self.sources.push(source);
        self
    }

    /// cubby's environment ([`HostEnv::capture`] in a front): what commands
    /// inherit of it (SPEC §4, `env.pass`), the search backend's key, the
    /// values of `[[network.inject]]` secrets (redacted), `bash` found on
    /// its `PATH`. Default: empty — commands inherit nothing, no key is
    /// found and `run` wraps commands in `sh -c`.
    pub fn host_env(mut self, host: HostEnv) -> ToolsetBuilder {
        self.host = host;
        self
    }

    /// The `[web_search]` section: which backend `web_search` asks. Its API
    /// key is read from the [`host_env`](Self::host_env) at
    /// [`build`](Self::build) and redacted like a secret. Default: none (`web_search` answers
    /// `unsupported`). [`search_backend`](Self::search_backend) wins.
    pub fn web_search(mut self, config: WebSearchConfig) -> ToolsetBuilder {
        self.web_search = Some(config);
        self
    }

    /// A search backend for `web_search` (e.g. a [`crate::web::BraveSearch`]
    /// built with a key from a vault). Default: none; wins over
    /// [`web_search`](Self::web_search).
    pub fn search_backend(mut self, backend: Arc<dyn SearchBackend>) -> ToolsetBuilder {
        self.search_backend = Some(backend);
        self
    }

    /// How `web_fetch` resolves host names. Default:
    /// [`SystemResolver`]. Whatever it answers is still checked against the
    /// refused ranges and `allowed_cidrs` before anything connects.
    pub fn resolver(mut self, resolver: Arc<dyn Resolver>) -> ToolsetBuilder {
        self.resolver = Some(resolver);
        self
    }

    /// A callback consulted before every command, after the exec rules.
    /// Default: none.
    pub fn before_run(mut self, hook: BeforeRun) -> ToolsetBuilder {
        self.before_run = Some(hook);
        self
    }

    /// How `run` wraps a command line. Default: `["bash", "-c"]`, or
    /// `["sh", "-c"]` where there is no bash.
    pub fn shell(mut self, shell: Vec<String>) -> ToolsetBuilder {
        self.shell = Some(shell);
        self
    }

    /// Bytes of output kept per process for `process_logs`. Default: 1 MiB.
    pub fn retained_log_bytes(mut self, bytes: usize) -> ToolsetBuilder {
        self.retained_log_bytes = bytes.max(1);
        self
    }

    /// Bytes of output kept by all the processes of the run together,
    /// running and finished: past it, new processes get smaller windows
    /// and the largest shrink, down to
    /// [`crate::process::MIN_RETAINED_LOG_BYTES`] each. Default:
    /// [`crate::process::RETAINED_LOG_TOTAL_BYTES`] (64 MiB).
    pub fn retained_log_total_bytes(mut self, bytes: usize) -> ToolsetBuilder {
        self.retained_log_total_bytes = bytes.max(1);
        self
    }

    /// Subscribes to command output from the start (see [`Toolset::subscribe`]).
    pub fn subscribe(mut self, subscriber: Subscriber) -> ToolsetBuilder {
        self.subscribers.push(subscriber);
        self
    }

    /// The policy: the tools offered, the paths, exec rules, `[network]`,
    /// `[env]` and limits. Default: [`Policy::default`]
    /// (`workspace-write`). A sandbox that confines commands must have been
    /// opened with the same policy (see [`build`](Self::build)).
    pub fn policy(mut self, policy: Policy) -> ToolsetBuilder {
        self.policy = Some(policy);
        self
    }

    /// Adds a secret to redact from every output; commands get it with this
    /// value. Default: none.
    pub fn secret(mut self, name: impl Into<String>, value: impl Into<String>) -> ToolsetBuilder {
        self.secrets.push(Secret {
            name: name.into(),
            value: value.into(),
        });
        self
    }

    /// Redacts `value` (as `[REDACTED:<name>]`) from every output of the
    /// run without giving it to commands: `name` is withheld from their
    /// environment (an upstream server's secrets: only its own process
    /// gets them).
    pub fn redact(mut self, name: impl Into<String>, value: impl Into<String>) -> ToolsetBuilder {
        self.redacted.push(Secret {
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

    /// The limits of the run's artifacts: the largest file, the bytes and
    /// the count of a run, how long one collection of the output directory
    /// takes. Default: [`crate::artifact::Budget::default`] (SPEC §5.1).
    pub fn artifact_budget(mut self, budget: crate::artifact::Budget) -> ToolsetBuilder {
        self.artifact_budget = budget;
        self
    }

    /// The content-addressed store the run's artifacts go to (share one
    /// between the runs of a workspace, as [`crate::Workspace`] does: then a
    /// run can be [seeded](Toolset::seed) with another's artifacts).
    /// Default: a store of the run's own in the temporary directory, made
    /// at the first publication and removed when the run ends.
    pub fn artifact_store(mut self, store: Arc<Store>) -> ToolsetBuilder {
        self.artifact_store = Some(store);
        self
    }

    /// Validates and builds.
    ///
    /// # Errors
    ///
    /// `invalid_input` for contradictory limits, a sandbox that enforces
    /// another policy on commands than this one (its
    /// [`Sandbox::enforced`] digest is not the policy's
    /// [`Policy::sandbox_digest`]), bad `[network]` entries, a bad `[env]`,
    /// a `[web_search]` section that cannot work or a secret that
    /// `env.set` also sets; `limit` when the secrets cannot be compiled.
    pub fn build(self) -> Result<Toolset> {
        let policy = self.policy.unwrap_or_default();
        policy.limits().validate()?;
        if let Some(enforced) = self.sandbox.enforced() {
            let given = policy.sandbox_digest();
            if *enforced != given {
                return Err(Error::invalid_input(format!(
                    "the {} sandbox holds commands to another policy (digest {enforced}) than \
                     the one given to the toolset ({given}): the file tools and commands would \
                     obey different rules; open the sandbox with the toolset's policy (e.g. \
                     through `cubby::Workspace`)",
                    self.sandbox.kind().as_str()
                )));
            }
        }
        let host = self.host;
        let user_secrets = self.secrets.clone();
        let redacted_only: Vec<String> = self.redacted.iter().map(|s| s.name.clone()).collect();
        let mut secrets = self.secrets;
        secrets.extend(self.redacted);
        let network = policy.network();
        let rules = network.map(crate::web::NetRules::from_config).transpose()?;
        let search = match (self.search_backend, &self.web_search) {
            (Some(backend), _) => Ok(backend),
            (None, config) => {
                let config = config.clone().unwrap_or_default();
                match crate::web::backend_from_config(&config, &|name| host.var(name))? {
                    Configured::Ready(backend, secret) => {
                        secrets.extend(secret);
                        Ok(backend)
                    }
                    Configured::None(why) => Err(why),
                }
            }
        };
        for entry in network.iter().flat_map(|n| n.inject.iter()) {
            if let Some(value) = host.non_empty(&entry.secret) {
                secrets.push(Secret {
                    name: entry.secret.clone(),
                    value,
                });
            }
        }
        // The sandbox's gateways: this run's token, and every credential,
        // are secrets (redacted); commands get the token, never a
        // credential.
        let gateway = self.sandbox.gateway_run()?;
        if let Some(run) = &gateway {
            secrets.push(Secret {
                name: crate::net::GATEWAY_TOKEN_ENV.to_string(),
                value: run.token().to_string(),
            });
        }
        let credentials: Vec<String> = policy
            .gateways()
            .values()
            .filter_map(|g| g.credential.as_ref().map(|c| c.secret.clone()))
            .collect();
        for name in &credentials {
            if let Some(value) = host.non_empty(name) {
                secrets.push(Secret {
                    name: name.clone(),
                    value,
                });
            }
        }
        // Credentials git's configs hold (a CI checkout's token in
        // `.git/config`): redacted like the others, never given.
        if let Some(read) = policy.git_surface() {
            for (name, value) in crate::git::config_credentials(read.root(), &host) {
                secrets.push(Secret {
                    name: name.to_string(),
                    value,
                });
            }
        }
        let redactor = Redactor::new(&secrets)?;
        let commands = self.sandbox.supports_commands();
        // Read anew for every toolset: a session sees the skills as they are
        // when it starts.
        let skills = crate::skills::discover(self.sandbox.fs(), policy.skills_dirs(), &policy);
        let mut sources: Vec<Arc<dyn ToolSource>> = vec![Arc::new(BuiltIns)];
        sources.extend(self.sources);
        // The custom tools last: the sources keep their numbers.
        let custom = (!self.custom.is_empty()).then_some(sources.len());
        if custom.is_some() {
            sources.push(Arc::new(CustomTools::new(self.custom)?));
        }
        let mut known: Vec<Known> = Vec::new();
        for (index, source) in sources.iter().enumerate() {
            for (name, facts) in source.list() {
                check_tool_name(&name, index, custom == Some(index), &known)?;
                let offered = policy.tool_decision(&name, facts.modes).allowed
                    && (commands || facts.family != Family::Commands)
                    && (self.track_changes || !facts.snapshot)
                    && (!facts.skills || !skills.is_empty());
                known.push(Known {
                    name,
                    facts,
                    source: index,
                    offered,
                });
            }
        }
        let names: Vec<&str> = known.iter().map(|k| k.name.as_str()).collect();
        policy.check_tools(&names)?;
        let baseline = (self.track_changes && known.iter().any(|k| k.offered && k.facts.snapshot))
            .then(|| Baseline::start(self.sandbox.clone(), policy.clone()));
        let shell = match self.shell {
            Some(s) if s.is_empty() => {
                return Err(Error::invalid_input(
                    "`shell` must name a program, e.g. [\"bash\", \"-c\"]",
                ));
            }
            Some(s) => s,
            None => default_shell(&host),
        };
        let subscribers = Arc::new(Mutex::new(self.subscribers));
        let procs = ProcessTable::new(
            redactor.clone(),
            subscribers.clone(),
            self.retained_log_total_bytes,
        );
        // Variables only cubby itself may use: never in a command's env.
        let mut env = CommandEnv::new(&policy.env().pass, &policy.env().set)?;
        for secret in &user_secrets {
            env.secret(secret.name.clone(), secret.value.clone())?;
        }
        for name in crate::sandbox::HOST_ONLY_ENV {
            env.withhold(name);
        }
        for name in redacted_only {
            env.withhold(name);
        }
        if let Some(var) = self.web_search.as_ref().and_then(|w| w.api_key_env.clone()) {
            env.withhold(var);
        }
        // Secrets the egress proxy injects: commands see placeholders (the
        // linux provider sets them), never the values.
        for entry in network.iter().flat_map(|n| n.inject.iter()) {
            env.withhold(entry.secret.clone());
        }
        for name in credentials {
            env.withhold(name);
        }
        if let Some(run) = &gateway {
            env.cubby_var(crate::net::GATEWAY_TOKEN_ENV, run.token().into());
        }
        // Where commands read the skills (read-only: the directory is a
        // protected path).
        if let Some(dir) = skills
            .dirs
            .first()
            .and_then(|d| self.sandbox.command_path(d))
        {
            env.cubby_var(SKILLS_DIR_ENV, dir.into_os_string());
        }
        let exec_rules = policy.exec_rules().to_vec();
        let artifact_store = self
            .artifact_store
            .unwrap_or_else(|| Arc::new(Store::private(&crate::artifact::temp_dir(&host))));
        Ok(Toolset {
            inner: Arc::new(Inner {
                sandbox: self.sandbox,
                policy,
                redactor,
                run: RunState::new(baseline, artifact_store, self.artifact_budget),
                catalog: ToolCatalog {
                    known: known.into(),
                    sources: sources.into(),
                },
                exec: ExecSettings {
                    rules: exec_rules,
                    before_run: self.before_run,
                    shell,
                    retained_log_bytes: self.retained_log_bytes,
                    env,
                    host,
                },
                web: WebSettings {
                    rules,
                    resolver: self.resolver.unwrap_or_else(|| Arc::new(SystemResolver)),
                    search,
                },
                skills: Arc::new(skills),
                subscribers,
                next_call: AtomicU64::new(1),
                gateway,
                ended: std::sync::atomic::AtomicBool::new(false),
                procs,
            }),
        })
    }
}

/// `Err(invalid_input)` for a name a source may not give its tool: empty,
/// over [`MAX_TOOL_NAME_CHARS`], other characters than letters, digits,
/// `_`, `-` and `.`, or a name an earlier source (the built-in tools first)
/// already has. `custom`: the source is the custom tools (checked by
/// [`CustomTools::new`] already, and named as such).
fn check_tool_name(name: &str, source: usize, custom: bool, known: &[Known]) -> Result<()> {
    let well_formed = !name.is_empty()
        && name.chars().count() <= MAX_TOOL_NAME_CHARS
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !well_formed {
        return Err(Error::invalid_input(format!(
            "source {source} has a tool named `{}`; a tool name is 1 to {MAX_TOOL_NAME_CHARS} \
             letters, digits, `_`, `-` or `.`",
            crate::output::truncate_for_message(name)
        )));
    }
    if let Some(other) = known.iter().find(|k| k.name == name) {
        let whose = if other.source == BUILT_IN {
            "a built-in tool".to_string()
        } else {
            format!("a tool of source {}", other.source)
        };
        if custom {
            return Err(Error::invalid_input(format!(
                "custom tool `{name}`: the name of {whose}; rename one of them"
            )));
        }
        return Err(Error::invalid_input(format!(
            "source {source} has a tool named `{name}`, the name of {whose}; rename one of them"
        )));
    }
    Ok(())
}

/// `bash -c`, or `sh -c` when no bash is on `host`'s `PATH`.
fn default_shell(host: &HostEnv) -> Vec<String> {
    let has_bash = host
        .var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(paths).any(|dir| dir.join("bash").is_file()));
    let shell = if has_bash { "bash" } else { "sh" };
    vec![shell.to_string(), "-c".to_string()]
}
