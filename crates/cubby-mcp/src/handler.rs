//! The rmcp `ServerHandler`: tool listing, calls, progress, cancellation and
//! the run of each session.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cubby::process::{CancelToken, OutputEvent, Subscriber};
use cubby::{Attachment, CallOptions, Cost, ToolCatalog, ToolOutput, Toolset};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Cursor,
    GetSkillRequestParams, GetSkillResult, Implementation, InitializeRequestParams,
    InitializeResult, JsonObject, JsonRpcMessage, ListResourceTemplatesResult, ListResourcesResult,
    ListSkillsResult, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, RequestId, Resource,
    ResourceContents, ResourceTemplate, ServerCapabilities, ServerConfig, ServerResult, Skill,
    SkillFrontmatter, SkillResource, SkillResources, Tool, ToolAnnotations,
};
// Logging is deprecated by SEP-2577 (2026-07-28) but part of 2025-11-25.
#[allow(deprecated)]
use rmcp::model::SetLevelRequestParams;
use rmcp::service::{RequestContext, TxJsonRpcMessage};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value;

use crate::pool::FilePool;
use crate::{McpOptions, SERVER_NAME, SERVER_VERSION, ToolsetFactory};

/// What every session of one server shares.
pub(crate) struct Shared {
    factory: ToolsetFactory,
    options: McpOptions,
    /// What the first toolset showed: its tools, instructions and skills
    /// (a session whose skills are the same shares it).
    view: Arc<View>,
    /// Every tool the toolsets have, offered or not, with its facts (what
    /// the scheduling reads).
    catalog: ToolCatalog,
    /// The run of requests that belong to no session.
    stateless: Mutex<Option<Toolset>>,
    /// The sessions' runs, so that the server ends each before it returns.
    runs: Arc<Runs>,
    /// Runs the file-tool calls, server-wide, on a fixed set of threads.
    /// On the blocking pool a client that pipelines requests gets a thread
    /// per request in flight (tens to hundreds), which costs memory and
    /// lock contention but buys no speed. Command tools stay on the blocking
    /// pool: one may wait on another.
    files: FilePool,
    /// On stdio: `tools/call` requests the framing guard has forwarded and
    /// whose call has not finished. A cheap file-tool call that is alone
    /// runs inline (see [`runs_inline`]).
    calls_in_flight: OnceLock<Arc<AtomicUsize>>,
}

/// What a session shows of its run: the tools (the `skill` tool's `name`
/// is an enum of the skills), the `instructions` (with the catalog of
/// skills) and whether the skills extension (SEP-2640) is declared — as the
/// session's own toolset found the skills when it started, so that a
/// changed skill directory is seen by the next session.
pub(crate) struct View {
    tools: Vec<Tool>,
    instructions: String,
    /// The skills the toolset found (compared with a new session's).
    skills: cubby::skills::Skills,
}

impl View {
    fn of(toolset: &Toolset, options: McpOptions) -> View {
        View {
            tools: toolset
                .tools()
                .iter()
                .map(|spec| mcp_tool(spec, options))
                .collect(),
            instructions: instructions(toolset),
            skills: toolset.skills().clone(),
        }
    }
}

/// Whether a call runs on the event loop's thread instead of the pool:
/// only when nothing else is queued or running (a client waiting for each
/// answer: the two thread hand-offs would be most of its latency) and only
/// for calls whose cost is bounded by construction (the tool's facts say
/// [`Cost::Bounded`] and its arguments keep it so: one `read_file`, at most
/// its byte limit; one `list_files` of a single directory). Under
/// pipelining the pool keeps the parsing and the work on separate cores.
fn runs_inline(catalog: &ToolCatalog, name: &str, arguments: &Value, alone: bool) -> bool {
    alone && catalog.is_bounded(name, arguments)
}

/// Whether the stdio front may answer a call of `name` without rmcp's
/// request dispatch when it carries no `_meta` (no progress token, no
/// per-request protocol data): tools of cost [`Cost::Bounded`], which
/// stream nothing and which a cancellation does not stop (see
/// `stdio::serve_stdio`).
pub(crate) fn is_direct(catalog: &ToolCatalog, name: &str) -> bool {
    catalog
        .facts(name)
        .is_some_and(|f| f.cost == Cost::Bounded && !f.streaming)
}

/// Counts a call out of the in-flight count when it ends, however it ends.
struct CallDone(Option<Arc<AtomicUsize>>);

impl Drop for CallDone {
    fn drop(&mut self) {
        if let Some(n) = &self.0 {
            let _ = n.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1));
        }
    }
}

/// File-tool calls that run at once, per core: enough to keep every core
/// busy while some calls wait on the disk.
const FILE_CALLS_PER_CORE: usize = 2;

fn file_call_slots() -> usize {
    std::thread::available_parallelism().map_or(4, |n| n.get()) * FILE_CALLS_PER_CORE
}

impl Shared {
    /// Runs `job` on the file-tool pool.
    pub(crate) fn run_file_job(&self, job: impl FnOnce() + Send + 'static) {
        drop(self.files.run(job));
    }

    /// Whether nothing but the caller is in flight (see [`runs_inline`]).
    pub(crate) fn alone(&self) -> bool {
        self.calls_in_flight
            .get()
            .is_some_and(|n| n.load(Ordering::Relaxed) <= 1)
    }

    /// The in-flight `tools/call` count, for the stdio guard to increment.
    pub(crate) fn count_calls(&self) -> Arc<AtomicUsize> {
        Arc::clone(self.calls_in_flight.get_or_init(Arc::default))
    }

    /// Ends the server-wide run (its processes die with it).
    pub(crate) fn take_stateless(&self) -> Option<Toolset> {
        self.stateless.lock().map(|mut s| s.take()).unwrap_or(None)
    }

    /// Ends every run of the server (blocking: call it off the event loop)
    /// — the sessions' still open, the server-wide one — and waits for the
    /// ends of sessions closed earlier: when it returns, every run's
    /// processes are stopped and its output directory collected
    /// ([`Toolset::end`]).
    pub(crate) fn end_runs(&self) {
        let live: Vec<Arc<SessionRun>> = lock(&self.runs.live)
            .drain(..)
            .filter_map(|run| run.upgrade())
            .collect();
        let mut toolsets: Vec<Toolset> = live.iter().filter_map(|run| run.take()).collect();
        toolsets.extend(self.take_stateless());
        std::thread::scope(|s| {
            for toolset in &toolsets {
                s.spawn(|| toolset.end());
            }
        });
        drop(toolsets);
        let ending: Vec<_> = lock(&self.runs.ending).drain(..).collect();
        for end in ending {
            let _ = end.join();
        }
    }
}

/// A lock whose data a panicking holder left as it was.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The sessions' runs of one server: those open, and the ends under way.
#[derive(Default)]
pub(crate) struct Runs {
    /// Every session's run (dead entries pruned as sessions come).
    live: Mutex<Vec<std::sync::Weak<SessionRun>>>,
    /// The threads ending the runs of sessions that closed.
    ending: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

/// A run that ends when its session does ([`Toolset::end`]: its processes
/// stopped, its output directory collected), on a plain thread so that no
/// async worker blocks; the server waits for that thread before it
/// returns ([`Shared::end_runs`]).
struct SessionRun {
    toolset: Mutex<Option<Toolset>>,
    /// What the session shows, set with its toolset.
    view: Mutex<Option<Arc<View>>>,
    runs: Arc<Runs>,
}

impl SessionRun {
    fn take(&self) -> Option<Toolset> {
        self.toolset.lock().map(|mut t| t.take()).unwrap_or(None)
    }
}

impl Drop for SessionRun {
    fn drop(&mut self) {
        if let Some(toolset) = self.take() {
            let started = std::thread::Builder::new()
                .name("cubby-session-end".into())
                .spawn(move || {
                    toolset.end();
                });
            if let Ok(end) = started {
                let mut ending = lock(&self.runs.ending);
                ending.retain(|e| !e.is_finished());
                ending.push(end);
            }
        }
    }
}

/// One MCP session's handler.
#[derive(Clone)]
pub struct CubbyHandler {
    shared: Arc<Shared>,
    run: Arc<SessionRun>,
    /// False for HTTP handlers, whose requests may carry no session.
    always_session: bool,
}

fn to_object(v: &Value) -> Arc<JsonObject> {
    Arc::new(v.as_object().cloned().unwrap_or_default())
}

/// A tool as `tools/list` shows it: its `outputSchema` only when results
/// carry `structuredContent` (the one goes with the other).
fn mcp_tool(spec: &cubby::ToolSpec, options: McpOptions) -> Tool {
    let a = spec.annotations;
    let tool = Tool::new(
        spec.name.clone(),
        spec.description.clone(),
        to_object(&spec.input_schema),
    )
    .with_annotations(
        ToolAnnotations::new()
            .read_only(a.read_only)
            .destructive(a.destructive)
            .idempotent(a.idempotent)
            .open_world(a.open_world),
    );
    if options.structured_content {
        tool.with_raw_output_schema(to_object(&spec.output_schema))
    } else {
        tool
    }
}

/// A tool as `tools/list` shows it, as JSON (for `cubby tools --format
/// mcp`): the one MCP conversion of a [`cubby::ToolSpec`].
pub fn tool_definition(spec: &cubby::ToolSpec, options: McpOptions) -> Value {
    serde_json::to_value(mcp_tool(spec, options)).unwrap_or(Value::Null)
}

/// Longest `instructions`, in chars (SPEC §6: Claude Code cuts at 2,048).
pub const MAX_INSTRUCTIONS_CHARS: usize = 2_000;

/// The server's `instructions`: what cubby is and when to use its tools
/// (clients may show only these and a tool search), at most
/// [`MAX_INSTRUCTIONS_CHARS`]: the list of protected paths is shortened to
/// fit.
pub(crate) fn instructions(template: &Toolset) -> String {
    template.instructions(MAX_INSTRUCTIONS_CHARS)
}

impl CubbyHandler {
    /// A handler factory's shared state, from a toolset factory. The first
    /// toolset is built here to list the tools (and fail early).
    ///
    /// # Errors
    ///
    /// Whatever building a toolset fails with.
    pub(crate) fn shared(
        factory: ToolsetFactory,
        options: McpOptions,
    ) -> cubby::Result<Arc<Shared>> {
        let template = factory()?;
        let view = Arc::new(View::of(&template, options));
        let catalog = template.catalog().clone();
        Ok(Arc::new(Shared {
            factory,
            options,
            view,
            catalog,
            stateless: Mutex::new(Some(template)),
            runs: Arc::default(),
            files: FilePool::new(file_call_slots()),
            calls_in_flight: OnceLock::new(),
        }))
    }

    /// A handler for a new session.
    pub(crate) fn new(shared: Arc<Shared>, always_session: bool) -> CubbyHandler {
        let run = Arc::new(SessionRun {
            toolset: Mutex::new(None),
            view: Mutex::new(None),
            runs: Arc::clone(&shared.runs),
        });
        {
            let mut live = lock(&shared.runs.live);
            live.retain(|r| r.strong_count() > 0);
            live.push(Arc::downgrade(&run));
        }
        CubbyHandler {
            shared,
            run,
            always_session,
        }
    }

    /// The toolset of the run this request belongs to.
    fn toolset(&self, ctx: &RequestContext<RoleServer>) -> Result<Toolset, McpError> {
        let in_session = self.always_session
            || ctx
                .extensions
                .get::<axum::http::request::Parts>()
                .is_some_and(|p| p.headers.contains_key("mcp-session-id"));
        self.toolset_of(in_session)
    }

    /// Whether a direct call (see [`is_direct`]) of `name` runs inline.
    pub(crate) fn direct_inline(&self, name: &str, arguments: &Value) -> bool {
        runs_inline(&self.shared.catalog, name, arguments, self.shared.alone())
    }

    /// Whether the stdio front may answer a call of `name` itself (see
    /// [`is_direct`]).
    pub(crate) fn is_direct(&self, name: &str) -> bool {
        is_direct(&self.shared.catalog, name)
    }

    /// The answer to a direct call (see [`is_direct`]; counted in
    /// flight by the caller) in a session opened with `initialize` on a
    /// revision before 2026-07-28: what `call_tool` answers for it, shaped
    /// as rmcp sends it to such a peer.
    pub(crate) fn direct_answer(
        &self,
        id: RequestId,
        name: &str,
        arguments: Value,
    ) -> TxJsonRpcMessage<RoleServer> {
        let _done = CallDone(self.shared.calls_in_flight.get().cloned());
        match self.toolset_of(true) {
            Ok(toolset) => {
                let options = CallOptions {
                    call_id: Some(id.to_string()),
                    ..CallOptions::default()
                };
                let out = toolset.call_with(name, arguments, &options);
                let result = to_result(out, self.shared.options);
                let mut result = ServerResult::from(CallToolResponse::from(result));
                // As rmcp answers a peer on a revision before 2026-07-28,
                // the only sessions direct calls come from.
                result.strip_result_type_for_legacy_peer();
                result.strip_non_object_output_for_legacy_peer();
                JsonRpcMessage::response(result, id)
            }
            Err(e) => JsonRpcMessage::error(e, Some(id)),
        }
    }

    /// The session's run (`in_session`) or the server-wide one.
    fn toolset_of(&self, in_session: bool) -> Result<Toolset, McpError> {
        let slot = if in_session {
            &self.run.toolset
        } else {
            &self.shared.stateless
        };
        let mut guard = slot
            .lock()
            .map_err(|_| McpError::internal_error("session state poisoned", None))?;
        if let Some(t) = guard.as_ref() {
            return Ok(t.clone());
        }
        let toolset = (self.shared.factory)().map_err(|e| {
            McpError::internal_error(format!("cannot start the session: {e}"), None)
        })?;
        if in_session {
            let same_tools = self
                .shared
                .view
                .tools
                .iter()
                .map(|t| t.name.as_ref())
                .eq(toolset.tool_names());
            let view = if same_tools && toolset.skills() == &self.shared.view.skills {
                Arc::clone(&self.shared.view)
            } else {
                Arc::new(View::of(&toolset, self.shared.options))
            };
            *lock(&self.run.view) = Some(view);
        }
        *guard = Some(toolset.clone());
        Ok(toolset)
    }

    /// What this session shows: its own run's view once it has one, else
    /// the server's.
    fn view(&self) -> Arc<View> {
        lock(&self.run.view)
            .clone()
            .unwrap_or_else(|| Arc::clone(&self.shared.view))
    }
}

/// The MCP result of a tool output: the text (and images), and the
/// structured value only when `options` ask for it (SPEC §2).
fn to_result(out: ToolOutput, options: McpOptions) -> CallToolResult {
    if out.is_error {
        CallToolResult::error(vec![ContentBlock::text(out.text)])
    } else {
        // Not `CallToolResult::structured`, which also renders the value as
        // a JSON text block that would be thrown away here.
        let mut r = CallToolResult::success(vec![ContentBlock::text(out.text)]);
        if options.structured_content {
            r.structured_content = Some(out.structured);
        }
        r.content
            .extend(out.attachments.into_iter().map(content_block));
        r
    }
}

/// The content block of an attachment: the one place attachments become
/// MCP content.
fn content_block(attachment: Attachment) -> ContentBlock {
    match attachment {
        Attachment::Image(image) => {
            use base64::Engine as _;
            let data = base64::engine::general_purpose::STANDARD.encode(&image.bytes);
            ContentBlock::image(data, image.media_type)
        }
        Attachment::Artifact(file) => ContentBlock::resource_link(resource(&file)),
    }
}

/// An artifact as MCP shows it (`resources/list`, `resource_link`).
fn resource(file: &cubby::artifact::FileRef) -> Resource {
    let mut description = format!("sha256:{}", file.sha256);
    if let Some(path) = &file.path {
        description.push_str(&format!("; in the sandbox at {path}"));
    }
    Resource::new(file.uri.clone(), file.name.clone())
        .with_mime_type(file.media_type.clone())
        .with_size(file.size)
        .with_description(description)
}

/// Artifacts per `resources/list` page.
pub const RESOURCES_PAGE: usize = 100;

/// Largest artifact `resources/read` returns as text (1 MiB).
pub const MAX_RESOURCE_TEXT_BYTES: u64 = 1024 * 1024;

/// Largest artifact `resources/read` returns as a blob (8 MiB).
pub const MAX_RESOURCE_BLOB_BYTES: u64 = 8 * 1024 * 1024;

/// The template of artifact URIs.
pub const ARTIFACT_TEMPLATE: &str = "cubby://artifacts/{sha256}/{name}";

/// True for media types `resources/read` returns as text.
fn is_text(media_type: &str) -> bool {
    let essence = media_type.split(';').next().unwrap_or("").trim();
    essence.starts_with("text/")
        || matches!(
            essence,
            "application/json" | "application/xml" | "application/javascript" | "application/toml"
        )
        || essence.ends_with("+json")
        || essence.ends_with("+xml")
}

/// One page of `artifacts` (newest first): the cursor is how many of the
/// run's oldest artifacts the next page still has, so artifacts published
/// meanwhile (newest, on the first page) shift nothing.
fn resources_page(
    artifacts: &[cubby::artifact::FileRef],
    cursor: Option<&str>,
) -> Result<ListResourcesResult, McpError> {
    // `artifacts` is newest first; `end` counts from the oldest.
    let total = artifacts.len();
    let end = match cursor {
        None => total,
        Some(c) => c
            .parse::<usize>()
            .ok()
            .filter(|&n| n <= total)
            .ok_or_else(|| {
                McpError::invalid_params(
                    "unknown cursor: pass the nextCursor of the previous resources/list page",
                    None,
                )
            })?,
    };
    let start = end.saturating_sub(RESOURCES_PAGE);
    let page: Vec<Resource> = artifacts[total - end..total - start]
        .iter()
        .map(resource)
        .collect();
    let mut result = ListResourcesResult::with_all_items(page);
    result.next_cursor = (start > 0).then(|| Cursor::from(start.to_string()));
    Ok(result)
}

/// Skills per `skills/list` page (each is read and hashed whole).
pub const SKILLS_PAGE: usize = 20;

/// The scheme of skill files' URIs (SEP-2640): `skill://<name>/<path>`.
const SKILL_SCHEME: &str = "skill://";

/// What a skill file's path keeps unencoded in its URI: RFC 3986's
/// unreserved characters (each segment encoded on its own).
fn encode_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The URI of file `path` (`/`-separated) of skill `name`.
fn skill_uri(name: &str, path: &str) -> String {
    let path: Vec<String> = path.split('/').map(encode_segment).collect();
    format!("{SKILL_SCHEME}{}/{}", encode_segment(name), path.join("/"))
}

/// The skill name and file path a `skill://` URI names (decoded), when it
/// is one.
fn parse_skill_uri(uri: &str) -> Option<(String, String)> {
    let rest = uri.strip_prefix(SKILL_SCHEME)?;
    if rest.contains(['?', '#']) {
        return None;
    }
    let (name, path) = rest.split_once('/')?;
    let decode = |s: &str| -> Option<String> {
        let mut bytes = Vec::with_capacity(s.len());
        let mut it = s.bytes();
        while let Some(b) = it.next() {
            if b == b'%' {
                let hex = [it.next()?, it.next()?];
                bytes.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
            } else {
                bytes.push(b);
            }
        }
        String::from_utf8(bytes).ok()
    };
    let segments: Option<Vec<String>> = path.split('/').map(decode).collect();
    Some((decode(name)?, segments?.join("/")))
}

/// A skill as the skills extension lists it: its `SKILL.md` URI, its
/// frontmatter, and each file it can serve with digest and size (read
/// through the confined resolver, [`Toolset::read_skill_file`]; a file it
/// will not serve is left out). `None` when its `SKILL.md` cannot be served.
fn skill_entry(toolset: &Toolset, skill: &cubby::skills::Skill) -> Option<Skill> {
    let files: Vec<SkillResource> = skill
        .files
        .iter()
        .filter_map(|f| {
            let bytes = toolset
                .read_skill_file(&skill.name, &f.path, cubby::skills::MAX_SKILL_BYTES)
                .ok()?;
            Some(SkillResource::from_bytes(
                skill_uri(&skill.name, &f.path),
                &bytes,
            ))
        })
        .collect();
    let entry = skill_uri(&skill.name, cubby::skills::SKILL_FILE);
    if !files.iter().any(|f| f.uri == entry) {
        return None;
    }
    let mut frontmatter = SkillFrontmatter::new(skill.name.clone(), skill.description.clone());
    for (key, value) in &skill.fields {
        frontmatter = frontmatter.with_field(key.clone(), value.clone());
    }
    Some(Skill::new(entry, frontmatter, SkillResources::Files(files)))
}

/// `resources/read` of a skill's file: text (UTF-8) of at most 1 MiB, any
/// other of at most 8 MiB as a blob, read as [`skill_entry`] reads it.
async fn read_skill_resource(
    toolset: Toolset,
    uri: String,
) -> Result<ReadResourceResponse, McpError> {
    let Some((name, file)) = parse_skill_uri(&uri) else {
        return Err(McpError::invalid_params(
            format!(
                "{uri} is not a skill file's URI (skill://<name>/<path>, as skills/list gives them)"
            ),
            None,
        ));
    };
    let read = tokio::task::spawn_blocking(move || {
        toolset.read_skill_file(&name, &file, MAX_RESOURCE_BLOB_BYTES)
    })
    .await
    .map_err(|e| McpError::internal_error(format!("read task failed: {e}"), None))?;
    let bytes = read.map_err(|e| resource_error(&uri, &e))?;
    let media_type = if uri.ends_with(".md") {
        "text/markdown"
    } else {
        "text/plain"
    };
    let contents = match String::from_utf8(bytes) {
        Ok(text) if text.len() as u64 <= MAX_RESOURCE_TEXT_BYTES => {
            ResourceContents::text(text, uri).with_mime_type(media_type)
        }
        text => {
            use base64::Engine as _;
            let bytes = text.map_or_else(|e| e.into_bytes(), String::into_bytes);
            let blob = base64::engine::general_purpose::STANDARD.encode(&bytes);
            ResourceContents::blob(blob, uri).with_mime_type("application/octet-stream")
        }
    };
    Ok(ReadResourceResult::new(vec![contents]).into())
}

/// The `resources/read` error for a cubby error.
fn resource_error(uri: &str, e: &cubby::Error) -> McpError {
    match e.kind() {
        cubby::ErrorKind::NotFound => McpError::resource_not_found(e.to_string(), None),
        cubby::ErrorKind::Internal => McpError::internal_error(e.to_string(), None),
        _ => McpError::invalid_params(format!("{e}"), Some(serde_json::json!({ "uri": uri }))),
    }
}

impl ServerHandler for CubbyHandler {
    // `logging` is declared for `logging/setLevel`; rmcp marks it deprecated
    // (SEP-2577), but it is part of the revisions up to 2025-11-25.
    #[allow(deprecated)]
    fn get_info(&self) -> ServerConfig {
        let view = self.view();
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_logging()
            .enable_resources()
            .enable_resources_list_changed();
        // The skills extension (SEP-2640) when the session has skills.
        let capabilities = if view.skills.is_empty() {
            capabilities
        } else {
            capabilities.enable_skills()
        };
        ServerConfig::new(capabilities.build())
            .with_server_info(Implementation::new(SERVER_NAME, SERVER_VERSION))
            .with_instructions(view.instructions.clone())
    }

    /// `initialize` opens a session: its run starts here, so that the
    /// answer's `instructions` (the catalog of skills) and capabilities
    /// are the session's own, from the skill directories as they are now.
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        let toolset = self.toolset_of(true)?;
        // A source whose offered tools change (an upstream server's
        // listing): the session's view is made anew and the client told.
        let run = Arc::downgrade(&self.run);
        let peer = ctx.peer.clone();
        let options = self.shared.options;
        let events = tokio::runtime::Handle::current();
        toolset.watch_tools(Arc::new(move || {
            let Some(run) = run.upgrade() else { return };
            let Some(toolset) = lock(&run.toolset).clone() else {
                return;
            };
            *lock(&run.view) = Some(Arc::new(View::of(&toolset, options)));
            let peer = peer.clone();
            events.spawn(async move {
                let _ = peer.notify_tool_list_changed().await;
            });
        }));
        ctx.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.view().tools.clone()))
    }

    /// `skills/list` (SEP-2640): the session's skills, a page at a time,
    /// each with its files' digests and sizes.
    async fn list_skills(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListSkillsResult, McpError> {
        let toolset = self.toolset(&ctx)?;
        let start = match request.and_then(|r| r.cursor) {
            None => 0,
            Some(c) => c
                .parse::<usize>()
                .ok()
                .filter(|&n| n <= toolset.skills().found.len())
                .ok_or_else(|| {
                    McpError::invalid_params(
                        "unknown cursor: pass the nextCursor of the previous skills/list page",
                        None,
                    )
                })?,
        };
        // Off the event loop: the files are read and hashed.
        tokio::task::spawn_blocking(move || {
            let found = &toolset.skills().found;
            let end = (start + SKILLS_PAGE).min(found.len());
            let skills = found[start..end]
                .iter()
                .filter_map(|skill| skill_entry(&toolset, skill))
                .collect();
            let mut result = ListSkillsResult::with_all_items(skills);
            result.next_cursor = (end < found.len()).then(|| Cursor::from(end.to_string()));
            result
        })
        .await
        .map_err(|e| McpError::internal_error(format!("skills/list failed: {e}"), None))
    }

    /// `skills/get` (SEP-2640): one skill by the URI of its `SKILL.md`.
    async fn get_skill(
        &self,
        request: GetSkillRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetSkillResult, McpError> {
        let toolset = self.toolset(&ctx)?;
        let uri = request.uri;
        let not_served = || {
            McpError::invalid_params(
                format!(
                    "{uri} is not the SKILL.md of a skill of this session; skills/list names them"
                ),
                None,
            )
        };
        let (name, file) = parse_skill_uri(&uri).ok_or_else(not_served)?;
        if file != cubby::skills::SKILL_FILE || toolset.skills().get(&name).is_none() {
            return Err(not_served());
        }
        let entry = tokio::task::spawn_blocking(move || {
            toolset
                .skills()
                .get(&name)
                .and_then(|skill| skill_entry(&toolset, skill))
        })
        .await
        .map_err(|e| McpError::internal_error(format!("skills/get failed: {e}"), None))?;
        entry.map(GetSkillResult::new).ok_or_else(not_served)
    }

    /// `resources/list`: this run's artifacts, newest first, paged.
    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let toolset = self.toolset(&ctx)?;
        let cursor = request.and_then(|r| r.cursor);
        resources_page(&toolset.artifacts().list(), cursor.as_deref())
    }

    /// `resources/templates/list`: the artifact URI template.
    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new(ARTIFACT_TEMPLATE, "artifact").with_description(
                "A file this session's tools or commands published (resources/list lists them)",
            ),
        ]))
    }

    /// `resources/read`: an artifact of this run (text ≤ 1 MiB, blob ≤ 8 MiB).
    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let toolset = self.toolset(&ctx)?;
        let uri = request.uri;
        if uri.starts_with(SKILL_SCHEME) {
            return read_skill_resource(toolset, uri).await;
        }
        let file = toolset
            .artifacts()
            .resolve(&uri)
            .map_err(|e| resource_error(&uri, &e))?;
        let text = is_text(&file.media_type);
        let max = if text {
            MAX_RESOURCE_TEXT_BYTES
        } else {
            MAX_RESOURCE_BLOB_BYTES
        };
        let what = if text { "text" } else { "binary" };
        if file.size > max {
            return Err(McpError::invalid_params(
                format!(
                    "artifact {} is {} bytes, over the {max}-byte limit of resources/read for {what} artifacts; its bytes are in the sandbox{}",
                    file.name,
                    file.size,
                    file.path
                        .as_deref()
                        .map(|p| format!(" at {p}"))
                        .unwrap_or_default()
                ),
                Some(serde_json::json!({ "uri": uri, "size": file.size, "limit": max })),
            ));
        }
        // Off the event loop: up to 8 MiB read and encoded.
        let read = tokio::task::spawn_blocking(move || {
            toolset
                .read_artifact(&uri, max)
                .map(|(file, bytes)| (uri, file, bytes))
        })
        .await
        .map_err(|e| McpError::internal_error(format!("read task failed: {e}"), None))?;
        let (uri, file, bytes) = read.map_err(|e| resource_error(&file.uri, &e))?;
        let contents = match (text, String::from_utf8(bytes)) {
            (true, Ok(s)) => ResourceContents::text(s, uri).with_mime_type(file.media_type),
            (_, bytes) => {
                use base64::Engine as _;
                let bytes = bytes.map_or_else(|e| e.into_bytes(), String::into_bytes);
                let blob = base64::engine::general_purpose::STANDARD.encode(&bytes);
                ResourceContents::blob(blob, uri).with_mime_type(file.media_type)
            }
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.view().tools.iter().find(|t| t.name == name).cloned()
    }

    /// `logging/setLevel`: accepted (the `logging` capability is declared so
    /// that clients may send it). cubby sends no `notifications/message`
    /// (command output streams as progress), so there is nothing to filter.
    #[allow(deprecated)]
    async fn set_level(
        &self,
        _request: SetLevelRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        Ok(())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let in_flight = self.shared.calls_in_flight.get().cloned();
        let alone = in_flight
            .as_ref()
            .is_some_and(|n| n.load(Ordering::Relaxed) <= 1);
        let _done = CallDone(in_flight);
        // An unknown tool is a protocol error (JSON-RPC -32602), not a tool
        // result: MCP's tools/call error handling. A cubby tool the policy
        // does not offer is known, and answers `ERROR denied` (SPEC §4).
        let facts = self.shared.catalog.facts(&request.name);
        let view = self.view();
        if !view.tools.iter().any(|t| t.name == request.name) && facts.is_none() {
            let names: Vec<&str> = view.tools.iter().map(|t| t.name.as_ref()).collect();
            return Err(McpError::invalid_params(
                format!(
                    "Unknown tool: {}; available tools: {}",
                    request.name,
                    names.join(", ")
                ),
                None,
            ));
        }
        let toolset = self.toolset(&ctx)?;
        // Bounded and short calls go to the file pool; long ones (commands,
        // the network) to the blocking pool, and a cancellation waits for them.
        let pooled = facts.is_some_and(|f| f.cost != Cost::Long);
        let arguments = request.arguments.map(Value::Object).unwrap_or(Value::Null);
        let cancel = CancelToken::new();
        let progress_token = ctx.meta.get_progress_token();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let on_output: Option<Subscriber> = progress_token.is_some().then(|| {
            Arc::new(move |e: &OutputEvent| {
                let _ = tx.send(e.chunk.clone());
            }) as Subscriber
        });
        let options = CallOptions {
            cancel: Some(cancel.clone()),
            // What a custom tool reads as its call id: the request's, which
            // `notifications/cancelled` names.
            call_id: Some(ctx.id.to_string()),
            on_output,
        };
        let name = request.name.to_string();
        let published_before = toolset.artifacts().usage().1;
        let published = toolset.clone();
        // `notifications/resources/list_changed` when the call published.
        let notify = |ctx: &RequestContext<RoleServer>| {
            let changed = published.artifacts().usage().1 != published_before;
            let peer = ctx.peer.clone();
            async move {
                if changed {
                    let _ = peer.notify_resource_list_changed().await;
                }
            }
        };
        if pooled && runs_inline(&self.shared.catalog, &name, &arguments, alone) {
            let out = toolset.call_with(&name, arguments, &options);
            notify(&ctx).await;
            return Ok(to_result(out, self.shared.options).into());
        }
        let call = move || toolset.call_with(&name, arguments, &options);
        let mut job: Pin<Box<dyn Future<Output = Result<ToolOutput, String>> + Send>> = if pooled {
            let answer = self.shared.files.run(call);
            Box::pin(async move { answer.await.map_err(|e| e.to_string()) })
        } else {
            let task = tokio::task::spawn_blocking(call);
            Box::pin(async move { task.await.map_err(|e| e.to_string()) })
        };
        let mut sent = 0u64;
        loop {
            tokio::select! {
                done = &mut job => {
                    let out = done.map_err(|e| McpError::internal_error(format!("tool task failed: {e}"), None))?;
                    // Progress that arrived with the end still goes first.
                    while let Ok(chunk) = rx.try_recv() {
                        sent += chunk.len() as u64;
                        if let Some(token) = &progress_token {
                            let _ = ctx.peer.notify_progress(
                                ProgressNotificationParam::new(token.clone(), sent as f64).with_message(chunk),
                            ).await;
                        }
                    }
                    notify(&ctx).await;
                    return Ok(to_result(out, self.shared.options).into());
                }
                Some(chunk) = rx.recv() => {
                    sent += chunk.len() as u64;
                    if let Some(token) = &progress_token {
                        let _ = ctx.peer.notify_progress(
                            ProgressNotificationParam::new(token.clone(), sent as f64).with_message(chunk),
                        ).await;
                    }
                }
                _ = ctx.ct.cancelled() => {
                    cancel.cancel();
                    // A command's tree is gone once its call returns; a file
                    // tool is short, and its answer is simply dropped.
                    if !pooled {
                        let _ = job.await;
                    }
                    return Err(McpError::internal_error("the request was cancelled", None));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cubby::Mode;

    fn toolset(provider: &str, policy: &cubby::PolicyBuilder, root: &std::path::Path) -> Toolset {
        let sandbox = match provider {
            "virtual" => cubby::virtual_sandbox(cubby::MemoryFs::new()),
            _ => cubby::local_sandbox(root).unwrap(),
        };
        Toolset::builder(sandbox)
            .policy(policy.build().unwrap())
            .build()
            .unwrap()
    }

    fn files(n: usize) -> Vec<cubby::artifact::FileRef> {
        // Newest first, as `Artifacts::list` gives them.
        (0..n)
            .rev()
            .map(|i| {
                let sha = format!("{i:064x}");
                cubby::artifact::FileRef {
                    uri: cubby::artifact::uri_of(&sha, &format!("f{i}")),
                    sha256: sha,
                    name: format!("f{i}"),
                    media_type: "text/plain".into(),
                    size: 1,
                    path: None,
                }
            })
            .collect()
    }

    #[test]
    fn resources_are_paged_newest_first_and_later_publications_shift_nothing() {
        let first = resources_page(&files(250), None).unwrap();
        assert_eq!(first.resources.len(), RESOURCES_PAGE);
        assert_eq!(first.resources[0].name, "f249");
        let cursor = first.next_cursor.clone().unwrap();
        // Three more published between the pages.
        let second = resources_page(&files(253), Some(&cursor)).unwrap();
        assert_eq!(second.resources[0].name, "f149");
        let third = resources_page(&files(253), second.next_cursor.as_deref()).unwrap();
        assert_eq!(third.resources.len(), 50);
        assert_eq!(third.resources[49].name, "f0");
        assert!(third.next_cursor.is_none());
        assert!(resources_page(&files(3), Some("999")).is_err());
        assert!(resources_page(&files(3), Some("x")).is_err());
    }

    #[test]
    fn text_types_are_read_as_text_and_images_as_blobs() {
        assert!(is_text("text/plain"));
        assert!(is_text("application/json"));
        assert!(is_text("image/svg+xml"));
        assert!(!is_text("image/png"));
        assert!(!is_text("application/pdf"));
    }

    #[test]
    fn instructions_fit_and_say_when_to_use_the_tools() {
        let dir = tempfile::tempdir().unwrap();
        let mut default = cubby::Policy::builder();
        default.mode(Mode::WorkspaceWrite);
        let mut read_only = cubby::Policy::builder();
        read_only.mode(Mode::ReadOnly);
        let mut web = cubby::Policy::builder();
        web.mode(Mode::FullAccess)
            .allow(["web_fetch", "web_search"]);
        // More protected paths than fit: the list is shortened.
        let mut crowded = cubby::Policy::builder();
        crowded.mode(Mode::WorkspaceWrite);
        for i in 0..300 {
            crowded.protect(format!("generated/protected-directory-number-{i}/"));
        }
        let cases = [
            ("default", toolset("local", &default, dir.path())),
            ("read-only", toolset("local", &read_only, dir.path())),
            ("web tools", toolset("local", &web, dir.path())),
            ("no commands", toolset("virtual", &default, dir.path())),
            ("crowded", toolset("local", &crowded, dir.path())),
        ];
        for (config, t) in &cases {
            let text = instructions(t);
            assert!(
                text.chars().count() <= MAX_INSTRUCTIONS_CHARS,
                "{config}: {} chars",
                text.chars().count()
            );
            assert!(
                text.contains("instead of your client's built-in ones"),
                "{config}: {text}"
            );
            // Every offered tool is named.
            assert!(
                text.contains(&format!("Tools: {}.", t.tool_names().join(", "))),
                "{config}: {text}"
            );
        }
        let text =
            |config: &str| instructions(&cases.iter().find(|(c, _)| *c == config).unwrap().1);
        assert!(text("default").contains("commands in this workspace"));
        assert!(text("default").contains("edit_file changes it"));
        assert!(!text("read-only").contains("write_file"));
        assert!(!text("no commands").contains("commands in this workspace"));
        assert!(text("crowded").contains(" more."), "{}", text("crowded"));
        assert!(text("crowded").contains("protected-directory-number-0/"));
    }
}
