//! The tools, one module per family, behind one small trait.
//!
//! Each tool module holds, in order: its `Params` (serde, `deny_unknown_fields`;
//! doc comments become the model-facing argument help), its limits, its
//! guards in SPEC order, the handler, and tests. Each tool states its facts
//! ([`ToolFacts`]: family, read-only, streaming, cost, the modes that give
//! it), and everything else reads them: the policy's mode sets, a provider
//! without commands, the MCP crate's scheduling. [`REGISTRY`] is the only
//! list of tools: a new tool is its module plus one line there. The
//! built-in tools are one [`ToolSource`]; a toolset may have others.

mod changes;
mod custom;
mod edit;
mod find;
mod git_state;
mod procs;
pub(crate) mod publish;
mod read;
pub(crate) mod run;
mod search;
pub(crate) mod skill;
mod source;
mod view;
mod walk;
mod web;
mod write;

pub use custom::{
    CustomTool, MAX_CUSTOM_TOOL_NAME_BYTES, MAX_LOG_LINE_CHARS, ToolContext, ToolResult,
};
pub(crate) use custom::{CustomTools, Pending};
pub(crate) use source::BuiltIns;
pub use source::{SourceCall, ToolSource};

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sha2::{Digest, Sha256};

pub(crate) use changes::Baseline;

use crate::config::Limits;
use crate::error::{Error, ErrorKind, Result};
use crate::output::ToolOutput;
pub(crate) use crate::output::thousands;
use crate::path::WorkspacePath;
use crate::policy::{Modes, Policy};
use crate::sandbox::FileSystem;

/// A sha256 digest.
pub(crate) type Sha = [u8; 32];

/// Lower-case hex of a digest.
pub(crate) fn hex(sha: &Sha) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(sha.len() * 2);
    for b in sha {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    s
}

/// sha256 of bytes.
pub(crate) fn sha256(bytes: &[u8]) -> Sha {
    Sha256::digest(bytes).into()
}

/// The sha256 and size of contents as the tools show them (SPEC §2,
/// redaction): of the bytes with every secret replaced by its marker, the
/// line feeds it held kept (as `read_file` shows them). A digest of the raw
/// bytes of a file holding a secret would let the model confirm a guessed
/// secret offline; the raw digest stays inside, for the stale guard.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shown {
    /// sha256 of the redacted contents.
    pub sha: Sha,
    /// Size of the redacted contents, in bytes.
    pub size: u64,
    /// True when a secret was redacted (the digest is not the file's).
    pub redacted: bool,
}

impl Shown {
    /// The digest of `bytes` as shown, `raw` being their sha256.
    pub(crate) fn of(redactor: &crate::output::Redactor, bytes: &[u8], raw: Sha) -> Shown {
        match redactor.redact_lines(bytes) {
            std::borrow::Cow::Borrowed(b) => Shown {
                sha: raw,
                size: b.len() as u64,
                redacted: false,
            },
            std::borrow::Cow::Owned(b) => Shown {
                sha: sha256(&b),
                size: b.len() as u64,
                redacted: true,
            },
        }
    }
}

/// sha256 of a whole file, streamed.
pub(crate) fn sha256_file(fs: &dyn FileSystem, path: &WorkspacePath) -> Result<Sha> {
    let mut file = fs.open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file
            .reader
            .read(&mut buf)
            .map_err(|e| Error::from_io(&e, &path.display()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().into())
}

use std::io::Read as _;

/// State that lives as long as one run: the read-before-write tracker,
/// the `changes` baseline and the run's artifacts.
pub(crate) struct RunState {
    /// The digest of the bytes on disk at the last read of each path, and
    /// the size of its contents as shown then (redacted).
    reads: Mutex<HashMap<WorkspacePath, (Sha, u64)>>,
    pub(crate) baseline: Option<Arc<Baseline>>,
    /// The run's artifacts (SPEC §5.1), over the workspace's store.
    artifacts: crate::artifact::Artifacts,
    /// The run's output directory while it exists: its name (128 random
    /// bits, hex) and the inode this run made it with. A name is used for
    /// one directory only: once tidied away, the next command gets a new
    /// one (R4-7: a name another session saw cannot be made again for it).
    output: Mutex<Option<(String, u64)>>,
    /// Held while a command is given the output directory and started, and
    /// while a `run` decides to remove it: a command never starts with a
    /// directory being removed.
    pub(crate) output_lock: Mutex<()>,
    /// The files of the output directory collected so far, with the stamp
    /// (inode, size, mtime, ctime) they had when read: a later collection
    /// skips a file whose stamp is the same (unchanged: any write moves its
    /// ctime), and reads again one that changed.
    pub(crate) collected: Mutex<HashMap<WorkspacePath, publish::Stamp>>,
    /// The files of the output directory refused for what they hold (a
    /// secret, streams that cannot be checked, too large), with the stamp
    /// they had and why: not read again while unchanged (R4-5).
    pub(crate) refused: Mutex<HashMap<WorkspacePath, (publish::Stamp, String)>>,
}

/// Random bytes in the name of a run's output directory.
const OUTPUT_NAME_RANDOM_BYTES: usize = 16;

/// Attempts at a fresh output directory before a run goes without one.
const OUTPUT_NAME_TRIES: usize = 4;

/// A new output directory name: [`OUTPUT_NAME_RANDOM_BYTES`] from
/// `/dev/urandom`, in hex (unguessable by another session).
fn random_output_name() -> Option<String> {
    crate::artifact::store::random_hex(OUTPUT_NAME_RANDOM_BYTES)
        .map_err(|e| tracing::warn!("no random bytes for an output directory: {e}"))
        .ok()
}

impl RunState {
    /// A fresh run, with an optional `changes` baseline, publishing into
    /// `store`.
    pub(crate) fn new(
        baseline: Option<Arc<Baseline>>,
        store: Arc<crate::artifact::Store>,
        budget: crate::artifact::Budget,
    ) -> RunState {
        RunState {
            reads: Mutex::default(),
            baseline,
            artifacts: crate::artifact::Artifacts::new(store, budget),
            output: Mutex::new(None),
            output_lock: Mutex::new(()),
            collected: Mutex::default(),
            refused: Mutex::default(),
        }
    }

    /// The run's output directory (`.cubby/output/<name>`), where the
    /// policy lets the tools write it; `None` where it cannot be. The one
    /// this run made when it is still there (the same inode), else a new
    /// one: a fresh random name, made by this run and empty — a directory
    /// that exists already under a new name was planted, and another name
    /// is drawn.
    pub(crate) fn output_dir(&self, fs: &dyn FileSystem, policy: &Policy) -> Option<WorkspacePath> {
        if policy.mode() == crate::config::Mode::ReadOnly {
            return None;
        }
        let at =
            |name: &str| WorkspacePath::parse(&format!("{}/{name}", publish::OUTPUT_ROOT)).ok();
        let mut output = crate::sync::lock(&self.output);
        if let Some((name, ino)) = output.as_ref()
            && let Some(dir) = at(name)
            && fs
                .metadata(&dir)
                .is_ok_and(|m| m.kind == crate::sandbox::EntryKind::Dir && m.ino == *ino)
        {
            return Some(dir);
        }
        *output = None;
        for _ in 0..OUTPUT_NAME_TRIES {
            let name = random_output_name()?;
            let dir = at(&name)?;
            policy.check_write(&dir).ok()?;
            if fs.metadata(&dir).is_ok() {
                tracing::warn!(
                    "output directory {dir} exists before this run made it; drawing another"
                );
                continue;
            }
            if let Err(e) = fs.create_dir_all(&dir) {
                tracing::debug!("no output directory for this run: {e}");
                return None;
            }
            let made = fs.metadata(&dir).ok()?;
            if made.kind != crate::sandbox::EntryKind::Dir
                || !fs.read_dir(&dir).is_ok_and(|e| e.is_empty())
            {
                continue;
            }
            *output = Some((name, made.ino));
            return Some(dir);
        }
        None
    }

    /// The output directory when a command of the run was given it (and
    /// it is still the one the run made).
    pub(crate) fn made_output_dir(&self, fs: &dyn FileSystem) -> Option<WorkspacePath> {
        let output = crate::sync::lock(&self.output);
        let (name, ino) = output.as_ref()?;
        let dir = WorkspacePath::parse(&format!("{}/{name}", publish::OUTPUT_ROOT)).ok()?;
        fs.metadata(&dir)
            .is_ok_and(|m| m.kind == crate::sandbox::EntryKind::Dir && m.ino == *ino)
            .then_some(dir)
    }

    /// Removes the output directory `dir` when it is empty (and the empty
    /// directories above it); once removed, its name is not used again.
    pub(crate) fn tidy_output_dir(&self, fs: &dyn FileSystem, dir: &WorkspacePath) {
        if publish::tidy(fs, dir) {
            *crate::sync::lock(&self.output) = None;
        }
    }

    /// The run's artifacts: publish with [`crate::artifact::Artifacts::publish`]
    /// (or `publish_bytes`), list, resolve and read them.
    pub(crate) fn artifacts(&self) -> &crate::artifact::Artifacts {
        &self.artifacts
    }

    /// Records that the model has seen `path` with this content (`sha` of
    /// its bytes), shown as `shown_size` bytes.
    pub(crate) fn record_read(&self, path: &WorkspacePath, sha: Sha, shown_size: u64) {
        if let Ok(mut reads) = self.reads.lock() {
            reads.insert(path.clone(), (sha, shown_size));
        }
    }

    /// The digest recorded at the last read (or write) of `path`, and the
    /// size the model was shown then.
    pub(crate) fn last_read(&self, path: &WorkspacePath) -> Option<(Sha, u64)> {
        self.reads.lock().ok().and_then(|r| r.get(path).copied())
    }

    /// Blocks until the `changes` baseline is taken, so that no write of
    /// this run can end up in it.
    pub(crate) fn before_mutation(&self) {
        if let Some(b) = &self.baseline {
            b.wait();
        }
    }
}

/// How commands are run in this toolset.
pub(crate) struct ExecSettings {
    /// Ordered exec rules from the config.
    pub rules: Vec<crate::config::ExecRule>,
    /// The library's callback, consulted after the rules.
    pub before_run: Option<crate::exec_policy::BeforeRun>,
    /// How a command line is wrapped (`bash -c`).
    pub shell: Vec<String>,
    /// Bytes of output kept per process for paging.
    pub retained_log_bytes: usize,
    /// How every command's environment is made (SPEC §4).
    pub env: crate::sandbox::CommandEnv,
    /// cubby's environment, what commands inherit from.
    pub host: crate::host_env::HostEnv,
}

/// What a tool handler sees.
pub(crate) struct Ctx<'a> {
    pub fs: &'a dyn FileSystem,
    /// The run's secrets: what a tool redacts before it cuts text.
    pub redactor: &'a crate::output::Redactor,
    pub sandbox: &'a dyn crate::sandbox::Sandbox,
    pub policy: &'a Policy,
    pub limits: &'a Limits,
    pub run: &'a RunState,
    pub procs: &'a crate::process::ProcessTable,
    pub exec: &'a ExecSettings,
    pub cancel: Option<&'a crate::process::CancelToken>,
    /// The call's id (the front's, or `call-<n>` numbered per run).
    pub call_id: &'a str,
    pub on_output: Option<&'a crate::process::Subscriber>,
    pub web: &'a crate::web::WebSettings,
    /// The skills this toolset found when it was built.
    pub skills: &'a crate::skills::Skills,
}

/// Hints for clients (MCP tool annotations).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Annotations {
    /// The tool does not change its environment.
    pub read_only: bool,
    /// The tool may destroy or overwrite data.
    pub destructive: bool,
    /// Repeating a call with the same arguments has no further effect.
    pub idempotent: bool,
    /// The tool reaches beyond the workspace (network).
    pub open_world: bool,
}

/// Longest tool description, in chars (SPEC §6: Claude Code cuts at 2,048).
pub const MAX_DESCRIPTION_CHARS: usize = 2_000;

/// Which kind of work a tool does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Family {
    /// Works on the workspace's files, through the sandbox's file system.
    Files,
    /// Runs or manages commands: offered only by providers that run
    /// commands.
    Commands,
    /// Reaches the network from the host.
    Web,
    /// Something else (a tool of another source).
    Other,
}

/// What a call costs, for a front that schedules it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cost {
    /// Bounded by construction for the arguments
    /// [`ToolCatalog::is_bounded`](crate::ToolCatalog::is_bounded) accepts
    /// (else [`Cost::Short`]): a front
    /// may run the call on the thread that read it when nothing else is in
    /// flight, and the stdio fast path may answer it past the SDK's
    /// dispatch. Streams nothing; a cancellation does not stop it.
    Bounded,
    /// Short and bound by the CPU or the disk: a fixed pool of threads; a
    /// cancelled call's answer is dropped.
    Short,
    /// May wait a long time (a command, the network, another process): a
    /// thread of its own; a cancelled call is awaited, so that what it
    /// started has ended when the cancellation is answered.
    Long,
}

/// What a tool is, stated once by the tool: what the policy's mode sets,
/// the toolset's gate and the fronts' scheduling read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct ToolFacts {
    /// The kind of work it does.
    pub family: Family,
    /// It does not change its environment (the `readOnlyHint`).
    pub read_only: bool,
    /// It streams output while it runs (progress notifications).
    pub streaming: bool,
    /// How a front schedules a call.
    pub cost: Cost,
    /// The modes that give it without `allow` naming it.
    pub modes: Modes,
    /// It reads the workspace snapshot taken when the run starts
    /// (`changes`): offered only when the toolset tracks changes.
    pub snapshot: bool,
    /// It serves the skills the toolset found (`skill`): offered only when
    /// there are some.
    pub skills: bool,
}

/// Facts of a file tool that only reads: every mode gives it.
pub(crate) const fn reads_files(cost: Cost) -> ToolFacts {
    ToolFacts {
        family: Family::Files,
        read_only: true,
        streaming: false,
        cost,
        modes: Modes::ALL,
        snapshot: false,
        skills: false,
    }
}

/// Facts of a file tool that writes: the writing modes give it.
pub(crate) const WRITES_FILES: ToolFacts = ToolFacts {
    family: Family::Files,
    read_only: false,
    streaming: false,
    cost: Cost::Short,
    modes: Modes::WRITING,
    snapshot: false,
    skills: false,
};

/// Facts of a command tool (`read_only` as its annotations say).
pub(crate) const fn command(read_only: bool) -> ToolFacts {
    ToolFacts {
        family: Family::Commands,
        read_only,
        streaming: false,
        cost: Cost::Long,
        modes: Modes::WRITING,
        snapshot: false,
        skills: false,
    }
}

/// Facts of a web tool: no mode gives it, only `allow`.
pub(crate) const WEB: ToolFacts = ToolFacts {
    family: Family::Web,
    read_only: true,
    streaming: false,
    cost: Cost::Long,
    modes: Modes::NONE,
    snapshot: false,
    skills: false,
};

/// A tool's definition: name, description, JSON Schemas and facts.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: String,
    /// What the model reads about it: what it does and when to prefer it
    /// (first sentence), then the limits in force. At most
    /// [`MAX_DESCRIPTION_CHARS`].
    pub description: String,
    /// JSON Schema of the arguments (`additionalProperties: false`).
    pub input_schema: Value,
    /// JSON Schema of the structured result.
    pub output_schema: Value,
    /// Behaviour hints.
    pub annotations: Annotations,
    /// What the tool is (family, cost, modes, …).
    pub facts: ToolFacts,
}

impl ToolSpec {
    /// The OpenAI Chat Completions function tool: strict parameters
    /// ([`schema::strict`]).
    pub fn openai(&self) -> Value {
        serde_json::json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": schema::strict(&self.input_schema),
                "strict": true,
            },
        })
    }

    /// The Anthropic Messages API tool: name, description, `input_schema`.
    pub fn anthropic(&self) -> Value {
        serde_json::json!({
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        })
    }
}

/// What a description is written from: the limits in force and the tools
/// offered beside it (a description names only tools the model has).
pub struct Describe<'a> {
    limits: &'a Limits,
    offered: &'a [&'a str],
    skills: &'a [&'a str],
}

impl<'a> Describe<'a> {
    pub(crate) fn new(limits: &'a Limits, offered: &'a [&'a str]) -> Describe<'a> {
        Describe {
            limits,
            offered,
            skills: &[],
        }
    }

    /// The same, with the names of the skills the toolset found.
    pub(crate) fn with_skills(mut self, skills: &'a [&'a str]) -> Describe<'a> {
        self.skills = skills;
        self
    }

    /// The names of the skills the toolset found, sorted (the `skill`
    /// tool's `name` enum).
    pub fn skills(&self) -> &'a [&'a str] {
        self.skills
    }

    /// The limits in force.
    pub fn limits(&self) -> &'a Limits {
        self.limits
    }

    /// Whether `tool` is offered in this toolset.
    pub fn offers(&self, tool: &str) -> bool {
        self.offered.contains(&tool)
    }

    /// `text(tool)` when `tool` is offered, else nothing: a sentence that
    /// names another tool, written from that tool's own `NAME`.
    pub fn mention(&self, tool: &str, text: impl FnOnce(&str) -> String) -> String {
        if self.offers(tool) {
            text(tool)
        } else {
            String::new()
        }
    }
}

/// The first sentence's second half for a tool that has a counterpart among
/// a client's built-in tools.
pub(crate) const PREFER: &str = "in this workspace, prefer it to your client's built-in";

/// A byte size as a model reads it: `50 KiB`, `32 MiB`, `1,000 bytes`.
pub(crate) fn size(bytes: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;
    if bytes >= MIB && bytes % MIB == 0 {
        format!("{} MiB", thousands(bytes / MIB))
    } else if bytes >= KIB && bytes % KIB == 0 {
        format!("{} KiB", thousands(bytes / KIB))
    } else {
        format!("{} bytes", thousands(bytes))
    }
}

/// A duration in milliseconds as a model reads it: `30 s`, `1.5 s`, `500 ms`.
pub(crate) fn millis(ms: u64) -> String {
    if ms >= 1000 && ms % 1000 == 0 {
        format!("{} s", thousands(ms / 1000))
    } else if ms >= 1000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{ms} ms")
    }
}

/// One tool: typed params in, a [`ToolOutput`] of its typed output out.
pub(crate) trait Tool {
    const NAME: &'static str;
    /// What the tool is; `read_only` agrees with the annotations.
    const FACTS: ToolFacts;
    /// What the model reads about the tool in this toolset.
    fn description(d: &Describe<'_>) -> String;
    const ANNOTATIONS: Annotations;
    type Params: DeserializeOwned + JsonSchema;
    type Output: Serialize + JsonSchema;

    fn call(ctx: &Ctx<'_>, params: Self::Params) -> Result<ToolOutput<Self::Output>>;

    /// Adjusts the input schema derived from `Params` to this toolset (the
    /// hook for what a type cannot say: `skill`'s `name` is an enum of the
    /// skills found). Default: the derived schema as it is.
    fn adjust_schema(_d: &Describe<'_>, _schema: &mut Value) {}

    /// For a [`Cost::Bounded`] tool: whether a call with `arguments` stays
    /// bounded (else it costs [`Cost::Short`]).
    fn bounded(_arguments: &Value) -> bool {
        true
    }
}

/// Annotations of a tool that only reads the workspace.
pub(crate) const READ_ONLY: Annotations = Annotations {
    read_only: true,
    destructive: false,
    idempotent: true,
    open_world: false,
};

/// A registry entry: the facts, the spec and a type-erased handler.
pub(crate) struct Entry {
    pub name: &'static str,
    pub facts: ToolFacts,
    pub spec: fn(&Describe<'_>) -> ToolSpec,
    pub call: fn(&Ctx<'_>, Value) -> Result<ToolOutput>,
    pub bounded: fn(&Value) -> bool,
}

fn spec_of<T: Tool>(d: &Describe<'_>) -> ToolSpec {
    let mut input_schema = schema::input_schema::<T::Params>();
    T::adjust_schema(d, &mut input_schema);
    ToolSpec {
        name: T::NAME.to_string(),
        description: T::description(d),
        input_schema,
        output_schema: schema::output_schema::<T::Output>(),
        annotations: T::ANNOTATIONS,
        facts: T::FACTS,
    }
}

fn call_of<T: Tool>(ctx: &Ctx<'_>, args: Value) -> Result<ToolOutput> {
    let params: T::Params = serde_json::from_value(args).map_err(|e| {
        Error::invalid_input(format!(
            "arguments for {} do not fit its schema: {}; see the tool's input schema",
            T::NAME,
            // serde names an unknown key or variant as it came: escaped,
            // a key holding a line feed cannot start a line of its own.
            crate::output::truncate_for_message(&crate::path::escape_controls(&e.to_string()))
        ))
    })?;
    let out = T::call(ctx, params)?;
    let structured = serde_json::to_value(&out.structured)
        .map_err(|e| Error::internal(format!("result of {} cannot be encoded: {e}", T::NAME)))?;
    Ok(out.map(|_| structured))
}

const fn entry<T: Tool>() -> Entry {
    Entry {
        name: T::NAME,
        facts: T::FACTS,
        spec: spec_of::<T>,
        call: call_of::<T>,
        bounded: T::bounded,
    }
}

/// Every built-in tool, in the order they are offered: one line per tool.
pub(crate) static REGISTRY: &[Entry] = &[
    entry::<read::ReadFile>(),
    entry::<write::WriteFile>(),
    entry::<edit::EditFile>(),
    entry::<find::Glob>(),
    entry::<find::ListFiles>(),
    entry::<search::Search>(),
    entry::<changes::Changes>(),
    entry::<view::ViewFile>(),
    entry::<skill::Skill>(),
    entry::<run::Run>(),
    entry::<procs::StartProcess>(),
    entry::<procs::ProcessLogs>(),
    entry::<procs::StopProcess>(),
    entry::<procs::ListProcesses>(),
    entry::<procs::WriteStdin>(),
    entry::<procs::Preview>(),
    entry::<web::WebFetch>(),
    entry::<web::WebSearch>(),
];

/// The built-in tools: each one's name and facts, in the order they are
/// offered (what a front that has no toolset yet may read, e.g. to decide
/// whether a call needs the `changes` snapshot).
pub fn builtin_tools() -> impl Iterator<Item = (&'static str, ToolFacts)> {
    REGISTRY.iter().map(|e| (e.name, e.facts))
}

/// The sentences of a front's instructions that name tools: whether
/// commands are offered (`, searches and commands` or ` and searches`) and
/// the read-before-write guard (or nothing).
pub(crate) fn guidance(d: &Describe<'_>) -> (&'static str, String) {
    let commands = if d.offers(run::Run::NAME) {
        ", searches and commands"
    } else {
        " and searches"
    };
    (commands, read::guard(d, true))
}

/// Parses an optional path argument; `None` is the root.
pub(crate) fn parse_dir_arg(path: Option<&str>) -> Result<WorkspacePath> {
    match path {
        None => Ok(WorkspacePath::root()),
        Some(p) => WorkspacePath::parse(p),
    }
}

/// Cuts a line to `max_chars` characters, saying so.
///
/// The line is redacted first with the current call's redactor
/// ([`crate::output::CallScope`]), so the cut never shows a part of a secret.
pub(crate) fn cut_line(line: &str, max_chars: usize) -> std::borrow::Cow<'_, str> {
    let line = crate::output::redact_for_cut(line);
    match line.char_indices().nth(max_chars) {
        None => line,
        Some((idx, _)) => {
            std::borrow::Cow::Owned(format!("{}… [line cut at {max_chars} chars]", &line[..idx]))
        }
    }
}

/// An `invalid_input` error for a regex or glob the model wrote.
pub(crate) fn pattern_error(what: &str, pattern: &str, err: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::InvalidInput,
        format!(
            "{what} `{}` is not valid: {err}; fix the pattern and call again",
            crate::output::truncate_for_message(pattern)
        ),
    )
}

/// A condition a waiter can block on until a value is set once.
pub(crate) struct Once<T> {
    value: Mutex<Option<T>>,
    ready: Condvar,
}

impl<T: Clone> Once<T> {
    pub(crate) fn new() -> Once<T> {
        Once {
            value: Mutex::new(None),
            ready: Condvar::new(),
        }
    }

    pub(crate) fn set(&self, value: T) {
        if let Ok(mut v) = self.value.lock() {
            *v = Some(value);
            self.ready.notify_all();
        }
    }

    pub(crate) fn wait(&self) -> Option<T> {
        let mut guard = self.value.lock().ok()?;
        while guard.is_none() {
            guard = self.ready.wait(guard).ok()?;
        }
        guard.clone()
    }
}

/// JSON Schema generation and the strict forms clients need.
pub mod schema {
    use schemars::JsonSchema;
    use schemars::generate::SchemaSettings;
    use serde_json::{Map, Value};

    /// The input schema of a params type: inline, draft 2020-12 without the
    /// `$schema` key, `additionalProperties: false` on every object.
    pub(crate) fn input_schema<T: JsonSchema>() -> Value {
        let generator = SchemaSettings::draft2020_12()
            .with(|s| {
                s.inline_subschemas = true;
                s.meta_schema = None;
            })
            .for_deserialize()
            .into_generator();
        let mut value = generator.into_root_schema_for::<T>().to_value();
        tidy(&mut value);
        if let Value::Object(map) = &mut value {
            // The tool's own description says what the arguments are for.
            map.remove("description");
        }
        value
    }

    /// The output schema of a result type.
    pub(crate) fn output_schema<T: JsonSchema>() -> Value {
        let generator = SchemaSettings::draft2020_12()
            .with(|s| {
                s.inline_subschemas = true;
                s.meta_schema = None;
            })
            .for_serialize()
            .into_generator();
        let mut value = generator.into_root_schema_for::<T>().to_value();
        tidy(&mut value);
        value
    }

    fn tidy(value: &mut Value) {
        if let Value::Object(map) = value {
            map.remove("title");
            map.remove("$schema");
            let types: Vec<&str> = match map.get("type") {
                Some(Value::String(t)) => vec![t.as_str()],
                Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            let object = types.contains(&"object");
            // schemars' `uint64`/`int32` formats are not JSON Schema
            // formats: validators warn about them and strict function
            // calling may refuse them (`minimum: 0` already says unsigned).
            let numeric = types.iter().any(|t| matches!(*t, "integer" | "number"));
            if numeric {
                map.remove("format");
            }
            // `default: null` says nothing a nullable type does not, and
            // strict function calling does not take `default`.
            if map.get("default") == Some(&Value::Null) {
                map.remove("default");
            }
            if object {
                map.entry("properties")
                    .or_insert_with(|| Value::Object(Map::new()));
                map.insert("additionalProperties".into(), Value::Bool(false));
            }
            for (_, v) in map.iter_mut() {
                tidy(v);
            }
        } else if let Value::Array(items) = value {
            items.iter_mut().for_each(tidy);
        }
    }

    /// The strict form OpenAI function calling accepts: every property
    /// required (optional ones are already nullable), no `format` keywords,
    /// `additionalProperties: false` everywhere.
    pub fn strict(schema: &Value) -> Value {
        let mut value = schema.clone();
        make_strict(&mut value);
        value
    }

    fn make_strict(value: &mut Value) {
        match value {
            Value::Object(map) => {
                map.remove("format");
                map.remove("default");
                if let Some(Value::Object(props)) = map.get("properties") {
                    let keys: Vec<Value> = props.keys().cloned().map(Value::String).collect();
                    map.insert("required".into(), Value::Array(keys));
                    map.insert("additionalProperties".into(), Value::Bool(false));
                }
                if let Some(Value::Object(props)) = map.get_mut("properties") {
                    for (_, v) in props.iter_mut() {
                        make_strict(v);
                    }
                }
                for key in ["items", "anyOf", "oneOf", "allOf"] {
                    if let Some(v) = map.get_mut(key) {
                        make_strict(v);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(make_strict),
            _ => {}
        }
    }
}

/// What kind of JSON value `v` is, as a message says it (arguments that
/// are not an object).
pub(crate) fn json_kind(v: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_line_respects_char_boundaries() {
        assert_eq!(cut_line("héllo", 10), "héllo");
        assert_eq!(cut_line("héllo", 2), "hé… [line cut at 2 chars]");
    }

    /// A toolset on `provider` ("virtual": no commands; "local") with this
    /// policy and these limits.
    fn toolset(
        provider: &str,
        policy: &crate::PolicyBuilder,
        limits: Limits,
        root: &std::path::Path,
    ) -> crate::Toolset {
        let sandbox = match provider {
            "virtual" => crate::virtual_sandbox(crate::MemoryFs::new()),
            _ => crate::local_sandbox(root).unwrap(),
        };
        crate::Toolset::builder(sandbox)
            .policy(
                policy
                    .clone()
                    .limits(limits)
                    .network(crate::config::NetworkConfig::default())
                    .build()
                    .unwrap(),
            )
            .track_changes(true)
            .build()
            .unwrap()
    }

    /// Limits other than the defaults, each of them.
    fn changed_limits() -> Limits {
        let mut l = Limits::default();
        l.read_file.max_lines = 100;
        l.read_file.max_bytes = 4096;
        l.write_file.max_bytes = 1024 * 1024;
        l.edit_file.max_bytes = 2 * 1024 * 1024;
        l.glob.max_matches = 50;
        l.list_files.max_matches = 70;
        l.search.max_matches = 20;
        l.run.timeout_ms = 5_000;
        l.run.max_timeout_ms = 10_000;
        l.run.max_output_bytes = 4096;
        l.web_fetch.timeout_ms = 7_000;
        l.web_fetch.max_output_chars = 3_000;
        l.web_fetch.max_body_bytes = 1024 * 1024;
        l.web_search.timeout_ms = 9_000;
        l.web_search.max_results = 3;
        l.web_search.max_result_chars = 1_500;
        l.web_search.max_output_chars = 4_000;
        l
    }

    /// Every configuration that changes what the descriptions say: limits,
    /// modes that drop tools, a provider without commands, web tools on,
    /// tools denied.
    fn configurations(root: &std::path::Path) -> Vec<(&'static str, crate::Toolset)> {
        use crate::Mode;
        let mut default = crate::Policy::builder();
        default.mode(Mode::WorkspaceWrite);
        let mut read_only = crate::Policy::builder();
        read_only.mode(Mode::ReadOnly);
        let mut web = crate::Policy::builder();
        web.mode(Mode::FullAccess)
            .allow(["web_fetch", "web_search"]);
        let mut denied = crate::Policy::builder();
        denied.mode(Mode::WorkspaceWrite).deny([
            "edit_file",
            "process_logs",
            "start_process",
            "view_file",
        ]);
        let mut skills = crate::Policy::builder();
        skills.mode(Mode::ReadOnly).skills_dirs(["skills"]);
        let demo = root.join("skills/demo");
        std::fs::create_dir_all(&demo).unwrap();
        std::fs::write(
            demo.join("SKILL.md"),
            "---\nname: demo\ndescription: A demo skill.\n---\nDo it.\n",
        )
        .unwrap();
        vec![
            ("skills", toolset("local", &skills, Limits::default(), root)),
            (
                "default",
                toolset("local", &default, Limits::default(), root),
            ),
            (
                "changed limits",
                toolset("local", &web, changed_limits(), root),
            ),
            (
                "read-only",
                toolset("local", &read_only, Limits::default(), root),
            ),
            ("web tools", toolset("local", &web, Limits::default(), root)),
            (
                "no commands",
                toolset("virtual", &default, Limits::default(), root),
            ),
            (
                "denied tools",
                toolset("local", &denied, Limits::default(), root),
            ),
        ]
    }

    #[test]
    fn descriptions_fit_say_when_to_use_the_tool_and_name_only_offered_tools() {
        let dir = tempfile::tempdir().unwrap();
        for (config, t) in configurations(dir.path()) {
            let offered = t.tool_names();
            for spec in t.tools() {
                let d = &spec.description;
                let name = spec.name;
                assert!(
                    d.chars().count() <= MAX_DESCRIPTION_CHARS,
                    "{config}: {name} has {} chars",
                    d.chars().count()
                );
                // The first sentence says what it does and when to use it,
                // and where it acts (the web tools act on the host).
                let first = d.split(". ").next().unwrap();
                assert!(
                    first.contains("sandbox")
                        || first.contains("this session")
                        || name.starts_with("web_"),
                    "{config}: {name}: {first}"
                );
                assert!(
                    ["prefer it to", "use it", "instead of", "to open in"]
                        .iter()
                        .any(|w| first.contains(w)),
                    "{config}: {name}: {first}"
                );
                for other in REGISTRY.iter().map(|e| e.name).filter(|n| n.contains('_')) {
                    let named = d
                        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .any(|w| w == other);
                    assert!(
                        !named || offered.contains(&other),
                        "{config}: {name} names {other}, which is not offered: {d}"
                    );
                }
            }
        }
    }

    #[test]
    fn descriptions_quote_the_limits_in_force() {
        let dir = tempfile::tempdir().unwrap();
        let all = configurations(dir.path());
        let described = |config: &str, tool: &str| -> String {
            let t = &all.iter().find(|(c, _)| *c == config).unwrap().1;
            t.tools()
                .into_iter()
                .find(|s| s.name == tool)
                .unwrap_or_else(|| panic!("{config}: no {tool}"))
                .description
        };
        let expect = [
            (
                "default",
                "read_file",
                &["2,000 lines", "50 KiB", "2,000 chars"][..],
            ),
            (
                "default",
                "run",
                &["16 KiB", "Timeout 30 s", "at most 120 s"],
            ),
            ("default", "search", &["at most 100 lines"]),
            ("skills", "skill", &["2,000 lines", "50 KiB"]),
            ("default", "glob", &["at most 1,000"]),
            ("default", "list_files", &["At most 1,000 entries"]),
            ("default", "write_file", &["32 MiB"]),
            ("default", "edit_file", &["32 MiB"]),
            (
                "web tools",
                "web_fetch",
                &["20 s limit", "10,000 chars", "5 MiB"],
            ),
            (
                "web tools",
                "web_search",
                &[
                    "up to 5 results",
                    "2,000 chars each",
                    "10,000 in all",
                    "20 s",
                ],
            ),
            ("changed limits", "read_file", &["100 lines", "4 KiB"]),
            (
                "changed limits",
                "run",
                &["4 KiB", "Timeout 5 s", "at most 10 s"],
            ),
            ("changed limits", "search", &["at most 20 lines"]),
            ("changed limits", "glob", &["at most 50"]),
            ("changed limits", "list_files", &["At most 70 entries"]),
            ("changed limits", "write_file", &["1 MiB"]),
            ("changed limits", "edit_file", &["2 MiB"]),
            (
                "changed limits",
                "web_fetch",
                &["7 s limit", "3,000 chars", "1 MiB"],
            ),
            (
                "changed limits",
                "web_search",
                &["up to 3 results", "1,500 chars each", "4,000 in all", "9 s"],
            ),
        ];
        for (config, tool, quotes) in expect {
            let d = described(config, tool);
            for q in quotes {
                assert!(d.contains(q), "{config}: {tool} does not say `{q}`: {d}");
            }
        }
        // What a mode or a denial takes away is not pointed to.
        assert!(!described("read-only", "read_file").contains("write_file"));
        assert!(described("default", "read_file").contains("edit_file"));
        assert!(!described("denied tools", "run").contains("process_logs"));
        assert!(described("default", "run").contains("process_logs"));
    }

    #[test]
    fn the_facts_give_each_mode_and_front_the_tools_the_old_lists_named() {
        use crate::Mode;
        let named = |keep: &dyn Fn(&ToolFacts) -> bool| -> Vec<&str> {
            REGISTRY
                .iter()
                .filter(|e| keep(&e.facts))
                .map(|e| e.name)
                .collect()
        };
        let files = [
            "read_file",
            "write_file",
            "edit_file",
            "glob",
            "list_files",
            "search",
            "changes",
            "view_file",
            "skill",
        ];
        let commands = [
            "run",
            "start_process",
            "process_logs",
            "stop_process",
            "list_processes",
            "write_stdin",
            "preview",
        ];
        let reading = [
            "read_file",
            "glob",
            "list_files",
            "search",
            "changes",
            "view_file",
            "skill",
        ];
        let writing: Vec<&str> = files.iter().chain(commands.iter()).copied().collect();
        assert_eq!(named(&|f| f.modes.contains(Mode::ReadOnly)), reading);
        assert_eq!(named(&|f| f.modes.contains(Mode::WorkspaceWrite)), writing);
        assert_eq!(named(&|f| f.modes.contains(Mode::FullAccess)), writing);
        assert_eq!(named(&|f| f.family == Family::Files), files);
        assert_eq!(named(&|f| f.family == Family::Commands), commands);
        assert_eq!(
            named(&|f| f.family == Family::Web),
            ["web_fetch", "web_search"]
        );
        // The MCP scheduling: the file pool for the file tools, the event
        // loop and the fast path for the two bounded ones, progress for run.
        assert_eq!(named(&|f| f.cost != Cost::Long), files);
        assert_eq!(
            named(&|f| f.cost == Cost::Bounded),
            ["read_file", "list_files"]
        );
        assert_eq!(named(&|f| f.streaming), ["run"]);
        assert_eq!(named(&|f| f.snapshot), ["changes"]);
        assert_eq!(named(&|f| f.skills), ["skill"]);
        // Read-only is stated once more by the annotations: they agree, and
        // a read-only mode gives only tools that only read files.
        let limits = Limits::default();
        for e in REGISTRY {
            let spec = (e.spec)(&Describe::new(&limits, &[]));
            assert_eq!(spec.facts, e.facts, "{}", e.name);
            assert_eq!(e.facts.read_only, spec.annotations.read_only, "{}", e.name);
            if e.facts.modes.contains(Mode::ReadOnly) {
                assert!(
                    e.facts.read_only && e.facts.family == Family::Files,
                    "{}",
                    e.name
                );
            }
        }
    }

    #[test]
    fn a_call_is_bounded_when_its_tool_and_arguments_say_so() {
        let dir = tempfile::tempdir().unwrap();
        let t = toolset(
            "local",
            &crate::Policy::builder(),
            Limits::default(),
            dir.path(),
        );
        let catalog = t.catalog();
        let bounded = |name: &str, args: Value| catalog.is_bounded(name, &args);
        assert!(bounded("read_file", serde_json::json!({"path": "a"})));
        assert!(bounded("list_files", serde_json::json!({"depth": 1})));
        assert!(bounded(
            "list_files",
            serde_json::json!({"path": "a", "depth": 0})
        ));
        assert!(!bounded("list_files", serde_json::json!({})));
        assert!(!bounded("list_files", serde_json::json!({"depth": 2})));
        assert!(!bounded("glob", serde_json::json!({"pattern": "*"})));
        assert!(!bounded("run", serde_json::json!({"command": "true"})));
        assert!(!bounded("no_such_tool", serde_json::json!({})));
    }

    #[test]
    fn sizes_and_durations_read_well() {
        assert_eq!(size(50 * 1024), "50 KiB");
        assert_eq!(size(32 * 1024 * 1024), "32 MiB");
        assert_eq!(size(1000), "1,000 bytes");
        assert_eq!(size(1536), "1,536 bytes");
        assert_eq!(millis(30_000), "30 s");
        assert_eq!(millis(1_500), "1.5 s");
        assert_eq!(millis(500), "500 ms");
    }

    #[test]
    fn every_schema_is_a_closed_object() {
        let names: Vec<&'static str> = REGISTRY.iter().map(|e| e.name).collect();
        let limits = Limits::default();
        for e in REGISTRY {
            let spec = (e.spec)(&Describe::new(&limits, &names));
            assert_eq!(spec.name, e.name);
            assert_eq!(spec.input_schema["type"], "object", "{}", e.name);
            assert_eq!(
                spec.input_schema["additionalProperties"], false,
                "{}",
                e.name
            );
            let strict = schema::strict(&spec.input_schema);
            let props = strict["properties"].as_object().unwrap();
            assert_eq!(strict["required"].as_array().unwrap().len(), props.len());
            assert!(!strict.to_string().contains("\"format\""), "{}", e.name);
        }
    }
}
