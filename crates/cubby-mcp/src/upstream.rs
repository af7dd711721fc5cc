//! Upstream MCP servers (SPEC §5.4) as a [`ToolSource`]: rmcp's client,
//! one connection per server per run.
//!
//! - A stdio server (`command`) is started with the library's command
//!   contract ([`cubby::sandbox::Sandbox::exec`]) in a sandbox of its own
//!   ([`Workspace::upstream_sandbox`]): its own network, an environment made
//!   only of the inherited basics, `env.pass` and `env.secrets`
//!   ([`cubby::upstream::upstream_env`]); its stderr goes to `/dev/null`
//!   (`sh -c 'exec "$@" 2>/dev/null'`, the argv passed as arguments, never
//!   parsed by a shell) so that stdout carries the protocol alone. Its whole
//!   tree is killed when the run ends ([`ToolSource::end`]).
//! - An HTTP server (`url`) is reached with a client that connects only to
//!   the addresses [`cubby::upstream::http_client`] checked against
//!   `[network]`.
//! - Messages from a stdio server are read line by line, each at most
//!   [`MAX_MESSAGE_BYTES`]: a longer one is skipped (never held), and when
//!   it answers a request, that request gets an error naming the size.
//! - Only the tools of `tools` are offered, through the library's
//!   [`cubby::upstream::Routes`]; a tool whose definition differs from its
//!   pinned one is withheld ([`cubby::upstream::Pins`]).
//! - A call waits at most `call_timeout`; then it answers `ERROR timeout`
//!   and the server is sent `notifications/cancelled`. A client's
//!   cancellation is relayed the same way (polled every [`CANCEL_POLL`]).
//!   Progress is relayed at most every [`PROGRESS_EVERY`], the latest
//!   kept: a flood costs no memory.
//! - A server that died is restarted on the next call, at most
//!   [`MAX_RESTARTS_PER_MINUTE`] times a minute with a doubling back-off;
//!   calls in between answer `ERROR network` saying when it retries.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine;
use cubby::config::{UPSTREAM_CALL_TIMEOUT_SECS, UPSTREAM_STARTUP_TIMEOUT_SECS, UpstreamConfig};
use cubby::sandbox::{ExecSpec, ProcessHandle};
use cubby::upstream::{Definition, PinState, Route};
use cubby::{
    Annotations, Attachment, Cost, Describe, Error, ErrorKind, Family, Modes, SourceCall,
    SourcesMaker, ToolFacts, ToolOutput, ToolSource, ToolSpec, Workspace, WorkspacePath,
};
use rmcp::ClientHandler;
use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, ProgressNotificationParam, ServerJsonRpcMessage,
    ServerResult,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
use rmcp::service::{NotificationContext, PeerRequestOptions, RoleClient, RunningService};
use serde_json::{Value, json};

/// Longest message read from a stdio server, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// Restarts of a dead server allowed in a minute.
pub const MAX_RESTARTS_PER_MINUTE: usize = 3;
/// The first wait before a restart; doubled after each.
pub const RESTART_BACKOFF: Duration = Duration::from_secs(1);
/// How often a call checks for the client's cancellation.
pub const CANCEL_POLL: Duration = Duration::from_millis(10);
/// At most one relayed progress notification per this interval.
pub const PROGRESS_EVERY: Duration = Duration::from_millis(50);
/// How much of an oversized message is kept to find its id (each end).
const ID_WINDOW: usize = 4096;
/// Reads from a stdio server's output, in bytes.
const READ_CHUNK: usize = 64 * 1024;
/// Messages waiting between the reader thread and the client.
const INCOMING_QUEUE: usize = 64;
/// The runtime's worker threads (shared by every upstream connection).
const RUNTIME_THREADS: usize = 2;
/// Most pages of one `tools/list` (red-team pass 11, U4: an endless
/// listing grew the process by 2 GB before its time ran out).
pub const MAX_LIST_PAGES: usize = 100;
/// Most tools one listing may hold over all its pages.
pub const MAX_LISTED_TOOLS: usize = 10_000;
/// Largest definition of a tool in `tools` (its description and schemas,
/// encoded): a larger one is not offered (U5: a 10 MB schema reached every
/// session's context).
pub const MAX_DEFINITION_BYTES: usize = 64 * 1024;
/// Most bytes of requests waiting for a stdio server to read them; past it
/// a request is refused at once (red-team pass 11, U7: a server that
/// stopped reading held every timed-out call's arguments, 551 MB).
pub const MAX_QUEUED_BYTES: usize = 64 * 1024 * 1024;

/// The sources of every `[upstream.*]` of a workspace, for
/// [`Workspace::factory_with`]: one per server with tools, connected when
/// the run is made (each run its own connection and, for a stdio server,
/// its own process tree).
pub fn upstream_sources() -> SourcesMaker {
    Arc::new(|workspace: &Workspace| {
        let mut out: Vec<Arc<dyn ToolSource>> = Vec::new();
        for (label, config) in &workspace.config().upstream {
            let routes: Vec<Route> = workspace.upstream_routes().of(label).cloned().collect();
            out.push(Upstream::start(
                workspace.clone(),
                label,
                config.clone(),
                routes,
            )?);
        }
        Ok(out)
    })
}

fn runtime() -> cubby::Result<&'static tokio::runtime::Runtime> {
    static RT: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(RUNTIME_THREADS)
            .thread_name("cubby-upstream")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| {
        Error::new(
            ErrorKind::Internal,
            format!("the upstream client's runtime cannot start: {e}"),
        )
    })
}

/// One upstream server of one run.
struct Upstream {
    inner: Arc<Inner>,
}

struct Inner {
    label: String,
    config: UpstreamConfig,
    workspace: Workspace,
    routes: Vec<Route>,
    state: Mutex<State>,
    /// Signalled when a connection attempt ends.
    settled: Condvar,
    watchers: Mutex<Vec<Arc<dyn Fn() + Send + Sync>>>,
    /// Progress tokens of the calls in flight → their latest progress.
    progress: Mutex<HashMap<String, Arc<Mutex<Option<String>>>>>,
    ended: AtomicBool,
    /// The listing that a `tools/list_changed` asked for: one at a time,
    /// however many arrive (U3: one thread each aborted the process).
    relist: Mutex<Relist>,
    /// One per stdio server started: disconnected when its reader thread
    /// has reaped the server and dropped its sandbox.
    readers: Mutex<Vec<std::sync::mpsc::Receiver<()>>>,
}

/// The listing again after `tools/list_changed`.
#[derive(Default)]
struct Relist {
    /// A listing is under way.
    running: bool,
    /// Another notification came during it: list once more after.
    again: bool,
}

#[derive(Default)]
struct State {
    connecting: bool,
    conn: Option<Conn>,
    /// The upstream's definitions of the allowed tools, by upstream name.
    listed: BTreeMap<String, Definition>,
    /// Exposed names offered now.
    offered: BTreeSet<String>,
    /// When the server was (re)started, the last minute's.
    starts: VecDeque<Instant>,
    /// Why the last attempt failed or the server died.
    down: Option<String>,
    /// Not before this instant: the next restart.
    retry_at: Option<Instant>,
    attempts: u32,
    /// The stdio server being started now (killed by an end that comes
    /// before its start does: red-team pass 12, P3).
    starting: Option<Arc<dyn ProcessHandle>>,
}

struct Conn {
    client: RunningService<RoleClient, Client>,
    process: Option<Arc<dyn ProcessHandle>>,
    /// A stdio server's pipe, for calls made past rmcp.
    pipe: Option<Arc<Pipe>>,
}

impl Upstream {
    fn start(
        workspace: Workspace,
        label: &str,
        config: UpstreamConfig,
        routes: Vec<Route>,
    ) -> cubby::Result<Arc<dyn ToolSource>> {
        runtime()?;
        let start = !routes.is_empty();
        let inner = Arc::new(Inner {
            label: label.to_string(),
            config,
            workspace,
            routes,
            state: Mutex::new(State {
                // A server with no tools in `tools` is never started.
                connecting: start,
                ..State::default()
            }),
            settled: Condvar::new(),
            watchers: Mutex::default(),
            progress: Mutex::default(),
            ended: AtomicBool::new(false),
            relist: Mutex::default(),
            readers: Mutex::new(Vec::new()),
        });
        if !start {
            return Ok(Arc::new(Upstream { inner }));
        }
        // Connected in the background: the run's first listing waits for it.
        let first = inner.clone();
        std::thread::Builder::new()
            .name(format!("upstream-{label}"))
            .spawn(move || first.connect())
            .map_err(|e| Error::new(ErrorKind::Internal, format!("cannot start a thread: {e}")))?;
        Ok(Arc::new(Upstream { inner }))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn unavailable(message: String) -> Error {
    Error::new(ErrorKind::Network, message)
}

impl Inner {
    fn startup_timeout(&self) -> Duration {
        Duration::from_secs(
            self.config
                .startup_timeout
                .unwrap_or(UPSTREAM_STARTUP_TIMEOUT_SECS),
        )
    }

    fn call_timeout(&self) -> Duration {
        Duration::from_secs(
            self.config
                .call_timeout
                .unwrap_or(UPSTREAM_CALL_TIMEOUT_SECS),
        )
    }

    /// Waits until no connection attempt is under way (bounded).
    fn settle(&self) -> std::sync::MutexGuard<'_, State> {
        let deadline = Instant::now() + self.startup_timeout() + Duration::from_secs(1);
        let mut state = lock(&self.state);
        while state.connecting {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            state = self
                .settled
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        state
    }

    /// Starts (or restarts) the server and lists its tools; the outcome is
    /// in the state. Called with `connecting` set.
    fn connect(self: &Arc<Self>) {
        // A panic in the client must not leave `connecting` set (every
        // listing and call would wait for it): it is a failed attempt.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.try_connect()))
            .unwrap_or_else(|_| {
                Err(Error::new(
                    ErrorKind::Internal,
                    format!(
                        "upstream `{}`: the client failed while connecting",
                        self.label
                    ),
                ))
            });
        let mut state = lock(&self.state);
        state.connecting = false;
        state.starting = None;
        state.starts.push_back(Instant::now());
        match outcome {
            Ok((conn, listed)) if !self.ended.load(Ordering::Acquire) => {
                state.conn = Some(conn);
                state.down = None;
                state.retry_at = None;
                state.attempts = 0;
                drop(state);
                self.apply_listing(listed);
            }
            Ok((conn, _)) => {
                drop(state);
                close(conn);
            }
            Err(e) => {
                state.attempts += 1;
                state.down = Some(e.message().to_string());
                state.retry_at =
                    Some(Instant::now() + RESTART_BACKOFF * 2u32.pow(state.attempts.min(6) - 1));
                tracing::warn!("upstream `{}`: {}", self.label, e.message());
            }
        }
        self.settled.notify_all();
    }

    fn try_connect(self: &Arc<Self>) -> cubby::Result<(Conn, BTreeMap<String, Definition>)> {
        let rt = runtime()?;
        let timeout = self.startup_timeout();
        let handler = Client {
            inner: Arc::downgrade(self),
        };
        let (client, process, pipe) = if let Some(argv) = &self.config.command {
            let sandbox = self.workspace.upstream_sandbox(&self.label)?;
            let root = self.workspace.root();
            let env = cubby::upstream::upstream_env(&self.config, self.workspace.host_env(), root)?;
            // Started in `/`, not in the workspace the model writes to: a
            // launcher that loads code from its working directory (`python
            // -m`, `npx`, `uvx`) would load the model's (U6).
            let mut wrapped = vec![
                "/bin/sh".to_string(),
                "-c".to_string(),
                "cd / && exec \"$@\" 2>/dev/null".to_string(),
                format!("cubby-upstream-{}", self.label),
            ];
            let root_text = root.to_string_lossy();
            wrapped.extend(
                argv.iter()
                    .map(|a| a.replace(cubby::upstream::WORKSPACE_ARG, &root_text)),
            );
            let spec = ExecSpec {
                argv: wrapped,
                cwd: WorkspacePath::root(),
                env,
                stdin: true,
                output_dir: None,
            };
            let spawned = sandbox.exec(&spec)?;
            let handle: Arc<dyn ProcessHandle> = Arc::from(spawned.handle);
            {
                let mut state = lock(&self.state);
                if self.ended.load(Ordering::Acquire) {
                    handle.kill_tree();
                } else {
                    state.starting = Some(handle.clone());
                }
            }
            let (transport, reaped) = PipeTransport::start(
                &self.label,
                spawned.output,
                spawned.stdin,
                handle.clone(),
                spawned.on_exit,
                sandbox,
            )?;
            {
                let mut readers = lock(&self.readers);
                readers.retain(|r| {
                    !matches!(
                        r.try_recv(),
                        Err(std::sync::mpsc::TryRecvError::Disconnected)
                    )
                });
                readers.push(reaped);
            }
            let pipe = transport.pipe.clone();
            let lifecycle = lifecycle(self.config.protocol);
            let started = run_bounded(rt, timeout, async move {
                handler.serve_with_lifecycle(transport, lifecycle).await
            });
            match started {
                Ok(Ok(client)) => (client, Some(handle), Some(pipe)),
                Ok(Err(e)) => {
                    handle.kill_tree();
                    return Err(unavailable(format!(
                        "upstream `{}` did not start: {e}",
                        self.label
                    )));
                }
                Err(()) => {
                    handle.kill_tree();
                    return Err(unavailable(format!(
                        "upstream `{}` did not answer `initialize` within {} s; it is \
                         stopped (check its command)",
                        self.label,
                        timeout.as_secs()
                    )));
                }
            }
        } else {
            let url = self.config.url.clone().unwrap_or_default();
            let http = cubby::upstream::http_client(
                &url,
                &self.workspace.config().network,
                &cubby::web::SystemResolver,
            )?;
            let config =
                rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                    url.clone(),
                );
            let lifecycle = lifecycle(self.config.protocol);
            // Made on the runtime: the transport spawns its worker there.
            let started = run_bounded(rt, timeout, async move {
                let transport =
                    rmcp::transport::StreamableHttpClientTransport::with_client(http, config);
                handler.serve_with_lifecycle(transport, lifecycle).await
            });
            match started {
                Ok(Ok(client)) => (client, None, None),
                Ok(Err(e)) => {
                    return Err(unavailable(format!(
                        "upstream `{}` at {url} cannot be reached: {e}",
                        self.label
                    )));
                }
                Err(()) => {
                    return Err(unavailable(format!(
                        "upstream `{}` at {url} did not answer `initialize` within {} s",
                        self.label,
                        timeout.as_secs()
                    )));
                }
            }
        };
        let conn = Conn {
            client,
            process,
            pipe,
        };
        match self.list(&conn) {
            Ok(listed) => Ok((conn, listed)),
            Err(e) => {
                close(conn);
                Err(e)
            }
        }
    }

    /// The upstream's definitions of the tools in `tools`.
    fn list(&self, conn: &Conn) -> cubby::Result<BTreeMap<String, Definition>> {
        self.list_peer(conn.client.peer().clone())
    }

    /// [`Inner::list`] over `peer`: page by page, within
    /// [`MAX_LIST_PAGES`], [`MAX_LISTED_TOOLS`] and the startup timeout;
    /// only the tools in `tools` are kept, each within
    /// [`MAX_DEFINITION_BYTES`].
    fn list_peer(
        &self,
        peer: rmcp::Peer<RoleClient>,
    ) -> cubby::Result<BTreeMap<String, Definition>> {
        let allowed: BTreeSet<String> = self.routes.iter().map(|r| r.tool.clone()).collect();
        let label = self.label.clone();
        let listed = run_bounded(runtime()?, self.startup_timeout(), async move {
            let mut listed = BTreeMap::new();
            let mut cursor = None;
            let mut seen = 0usize;
            for _ in 0..MAX_LIST_PAGES {
                let params = rmcp::model::PaginatedRequestParams::default().with_cursor(cursor);
                let page = peer
                    .list_tools(Some(params))
                    .await
                    .map_err(|e| format!("cannot list its tools: {e}"))?;
                seen = seen.saturating_add(page.tools.len());
                if seen > MAX_LISTED_TOOLS {
                    return Err(format!("lists more than {MAX_LISTED_TOOLS} tools"));
                }
                for tool in page.tools {
                    if !allowed.contains(tool.name.as_ref()) {
                        continue;
                    }
                    let def = definition(&tool);
                    let bytes = def.description.len()
                        + serde_json::to_vec(&def.input_schema).map_or(usize::MAX, |v| v.len())
                        + def
                            .output_schema
                            .as_ref()
                            .map_or(0, |s| serde_json::to_vec(s).map_or(usize::MAX, |v| v.len()));
                    if bytes > MAX_DEFINITION_BYTES {
                        tracing::warn!(
                            "upstream `{label}`: the definition of `{}` is {bytes} bytes, over \
                             {MAX_DEFINITION_BYTES}; it is not offered",
                            tool.name.chars().take(200).collect::<String>()
                        );
                        continue;
                    }
                    listed.insert(tool.name.to_string(), def);
                }
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => return Ok(listed),
                }
            }
            Err(format!(
                "lists its tools over more than {MAX_LIST_PAGES} pages"
            ))
        })
        .map_err(|()| {
            unavailable(format!(
                "upstream `{}` did not list its tools within {} s",
                self.label,
                self.startup_timeout().as_secs()
            ))
        })?;
        listed.map_err(|e| unavailable(format!("upstream `{}` {e}", self.label)))
    }

    /// Lists again after `tools/list_changed`, once more for every
    /// notification that came meanwhile (however many: one listing after
    /// them), on a thread of its own.
    fn relist(self: &Arc<Self>) {
        {
            let mut relist = lock(&self.relist);
            if relist.running {
                relist.again = true;
                return;
            }
            relist.running = true;
        }
        let inner = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name(format!("upstream-{}-list", self.label))
            .spawn(move || {
                loop {
                    let peer = {
                        let state = lock(&inner.state);
                        state.conn.as_ref().map(|c| c.client.peer().clone())
                    };
                    if let Some(peer) = peer
                        && !inner.ended.load(Ordering::Acquire)
                    {
                        match inner.list_peer(peer) {
                            Ok(listed) => inner.apply_listing(listed),
                            Err(e) => tracing::warn!("{}", e.message()),
                        }
                    }
                    let mut relist = lock(&inner.relist);
                    if !std::mem::take(&mut relist.again) {
                        relist.running = false;
                        return;
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("upstream `{}`: cannot list again: {e}", self.label);
            lock(&self.relist).running = false;
        }
    }

    /// Pins the listing and offers what it allows; tells the watchers when
    /// the offered set changed.
    fn apply_listing(&self, listed: BTreeMap<String, Definition>) {
        let states = match self.workspace.upstream_pins().check(&self.label, &listed) {
            Ok(states) => states,
            Err(e) => {
                tracing::warn!("upstream `{}`: {}", self.label, e.message());
                BTreeMap::new()
            }
        };
        let offered: BTreeSet<String> = self
            .routes
            .iter()
            .filter(|r| matches!(states.get(&r.tool), Some(PinState::New | PinState::Same)))
            .map(|r| r.exposed.clone())
            .collect();
        for (tool, state) in &states {
            if *state == PinState::Changed {
                tracing::warn!(
                    "upstream `{}`: the definition of `{tool}` changed since it was first \
                     listed; it is hidden until accepted (`cubby doctor`)",
                    self.label
                );
            }
        }
        let changed = {
            let mut state = lock(&self.state);
            state.listed = listed;
            let changed = state.offered != offered;
            state.offered = offered;
            changed
        };
        if changed {
            for watcher in lock(&self.watchers).iter() {
                watcher();
            }
        }
    }

    /// A live connection's peer, (re)starting the server when it is down
    /// and the back-off allows.
    fn peer(self: &Arc<Self>) -> cubby::Result<(rmcp::Peer<RoleClient>, Option<Arc<Pipe>>)> {
        let mut state = self.settle();
        let alive = state.conn.as_ref().map(|c| {
            !c.client.is_closed()
                && !c.client.peer().is_transport_closed()
                && !c
                    .pipe
                    .as_ref()
                    .is_some_and(|p| p.ended.load(Ordering::Acquire))
        });
        match alive {
            Some(true) => {
                if let Some(conn) = &state.conn {
                    return Ok((conn.client.peer().clone(), conn.pipe.clone()));
                }
            }
            Some(false) => {
                if let Some(conn) = state.conn.take() {
                    close(conn);
                }
                state.down = Some("it exited".to_string());
                state.retry_at = Some(Instant::now());
            }
            None => {}
        }
        if self.ended.load(Ordering::Acquire) {
            return Err(unavailable(format!(
                "upstream `{}`: the run has ended",
                self.label
            )));
        }
        let now = Instant::now();
        while state
            .starts
            .front()
            .is_some_and(|t| now.duration_since(*t) > Duration::from_secs(60))
        {
            state.starts.pop_front();
        }
        let why = state
            .down
            .clone()
            .unwrap_or_else(|| "it is not connected".to_string());
        let wait = state.retry_at.map(|t| t.saturating_duration_since(now));
        if state.starts.len() > MAX_RESTARTS_PER_MINUTE {
            return Err(unavailable(format!(
                "upstream `{}` is unavailable ({why}); it was restarted \
                 {MAX_RESTARTS_PER_MINUTE} times in the last minute, so cubby waits; try again \
                 in a minute or use another tool",
                self.label
            )));
        }
        if let Some(wait) = wait.filter(|w| !w.is_zero()) {
            return Err(unavailable(format!(
                "upstream `{}` is unavailable ({why}); cubby restarts it in {:.1} s, try again \
                 then",
                self.label,
                wait.as_secs_f64()
            )));
        }
        state.connecting = true;
        drop(state);
        self.connect();
        let state = lock(&self.state);
        match &state.conn {
            Some(conn) => Ok((conn.client.peer().clone(), conn.pipe.clone())),
            None => Err(unavailable(format!(
                "upstream `{}` is unavailable: {}",
                self.label,
                state.down.as_deref().unwrap_or("it did not start")
            ))),
        }
    }

    fn call(
        self: &Arc<Self>,
        route: &Route,
        arguments: Value,
        call: &SourceCall<'_>,
    ) -> cubby::Result<ToolOutput> {
        let (peer, pipe) = self.peer()?;
        if !lock(&self.state).offered.contains(&route.exposed) {
            return Err(Error::new(
                ErrorKind::Denied,
                format!(
                    "{} is not offered now: upstream `{}` does not list `{}`, or its definition \
                 changed since it was first listed and the operator has not accepted the change \
                 (`cubby doctor` shows it); use another tool",
                    route.exposed, self.label, route.tool
                ),
            ));
        }
        let arguments = match arguments {
            Value::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        let params =
            rmcp::model::CallToolRequestParams::new(route.tool.clone()).with_arguments(arguments);
        // The request is sent and its answer awaited on this thread (rmcp's
        // request futures only use channels): no hop through the runtime on
        // the call's path. Between wake-ups, at most every CANCEL_POLL, the
        // progress is relayed and the cancellation and deadline checked.
        let latest: Arc<Mutex<Option<String>>> = Arc::default();
        let deadline = Instant::now() + self.call_timeout();
        let mut last_progress = Instant::now() - PROGRESS_EVERY;
        let source = format!("upstream:{}", self.label);
        let mut tick = || {
            if call.wants_progress()
                && last_progress.elapsed() >= PROGRESS_EVERY
                && let Some(message) = lock(&latest).take()
            {
                call.progress(&source, &message);
                last_progress = Instant::now();
            }
            if call.cancel().is_some_and(|c| c.is_cancelled()) {
                Some(CANCELLED_BY_CLIENT)
            } else if Instant::now() >= deadline {
                Some(CALL_TIMEOUT)
            } else {
                None
            }
        };
        let answer = match pipe.filter(|p| p.handshake.load(Ordering::Acquire)) {
            Some(pipe) => self.call_direct(&pipe, params, &latest, &mut tick),
            None => {
                let request =
                    ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(params));
                self.call_rmcp(&peer, request, &latest, &mut tick)
            }
        };
        let answer = match answer {
            Ok(answer) => answer,
            Err(Stop::Failed(e)) => {
                return Err(unavailable(format!(
                    "{} failed in upstream `{}`: {e}",
                    route.exposed, self.label
                )));
            }
            Err(Stop::Stopped(reason)) => return Err(self.stopped(route, reason)),
        };
        match answer {
            Ok(ServerResult::CallToolResult(result)) => {
                let value = serde_json::to_value(&result).unwrap_or(Value::Null);
                Ok(shape(&self.label, &value, call))
            }
            Ok(other) => {
                let value = serde_json::to_value(&other).unwrap_or(Value::Null);
                Ok(shape(&self.label, &value, call))
            }
            Err(e) if e.contains(TOO_LARGE_MARK) => Err(Error::new(
                ErrorKind::TooLarge,
                format!(
                    "{}: {e}; ask for less (a narrower query, a page)",
                    route.exposed
                ),
            )),
            Err(e) => Err(unavailable(format!(
                "{} failed in upstream `{}`: {e}",
                route.exposed, self.label
            ))),
        }
    }

    /// A call through rmcp's client (an HTTP server, or one that speaks
    /// the 2026-07-28 revision): the server's answer, or why there is none.
    fn call_rmcp(
        &self,
        peer: &rmcp::Peer<RoleClient>,
        request: ClientRequest,
        latest: &Arc<Mutex<Option<String>>>,
        tick: &mut dyn FnMut() -> Option<&'static str>,
    ) -> Result<Result<ServerResult, String>, Stop> {
        let handle = match wait_here(
            peer.send_request_with_option(request, PeerRequestOptions::no_options()),
            tick,
        ) {
            Ok(Ok(handle)) => handle,
            Ok(Err(e)) => return Err(Stop::Failed(e.to_string())),
            Err(reason) => return Err(Stop::Stopped(reason)),
        };
        let rmcp::service::RequestHandle {
            rx,
            peer,
            id,
            progress_token,
            ..
        } = handle;
        let token = progress_token.0.to_string();
        lock(&self.progress).insert(token.clone(), latest.clone());
        let waited = wait_here(rx, tick);
        lock(&self.progress).remove(&token);
        match waited {
            Ok(Ok(Ok(result))) => Ok(Ok(result)),
            Ok(Ok(Err(e))) => Ok(Err(e.to_string())),
            Ok(Err(_)) => Ok(Err("the upstream closed the connection".to_string())),
            Err(reason) => {
                let note = rmcp::model::CancelledNotification::new(
                    rmcp::model::CancelledNotificationParam::new(
                        Some(id),
                        Some(reason.to_string()),
                    ),
                );
                let until = Instant::now() + NOTIFY_WAIT;
                let _ = wait_here(peer.send_notification(note.into()), &mut || {
                    (Instant::now() >= until).then_some(reason)
                });
                Err(Stop::Stopped(reason))
            }
        }
    }

    /// A call written to a stdio server's pipe by this thread, its answer
    /// handed here by the reader thread (sessions begun with the
    /// `initialize` handshake, whose requests need no per-request
    /// metadata): what [`Inner::call_rmcp`] does, without the two hops
    /// through rmcp's service task. Progress still arrives through rmcp
    /// (the token is this call's id).
    fn call_direct(
        &self,
        pipe: &Pipe,
        params: rmcp::model::CallToolRequestParams,
        latest: &Arc<Mutex<Option<String>>>,
        tick: &mut dyn FnMut() -> Option<&'static str>,
    ) -> Result<Result<ServerResult, String>, Stop> {
        let n = pipe.next_id.fetch_add(1, Ordering::Relaxed);
        let id = format!("{DIRECT_ID_PREFIX}{n}");
        let token =
            rmcp::model::ProgressToken(rmcp::model::NumberOrString::String(id.as_str().into()));
        let mut params = serde_json::to_value(&params).map_err(|e| Stop::Failed(e.to_string()))?;
        if let Value::Object(map) = &mut params {
            map.insert("_meta".to_string(), json!({ "progressToken": id }));
        }
        let request = json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": "tools/call",
            "params": params,
        });
        let bytes = serde_json::to_vec(&request).map_err(|e| Stop::Failed(e.to_string()))?;
        let (tx, rx) = std::sync::mpsc::channel();
        lock(&pipe.waiting).insert(id.clone(), tx);
        let progress_key = token.0.to_string();
        lock(&self.progress).insert(progress_key.clone(), latest.clone());
        // Checked after the waiter is in: the reader thread marks its end
        // before it drops the waiters.
        let closed = || "the upstream closed the connection".to_string();
        let answer = match pipe.write(bytes) {
            _ if pipe.ended.load(Ordering::Acquire) => Ok(Err(closed())),
            Err(e) => Err(Stop::Failed(e.to_string())),
            Ok(()) => loop {
                match rx.recv_timeout(CANCEL_POLL) {
                    Ok(message) => break Ok(answer_of(message)),
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                        break Ok(Err(closed()));
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                        if pipe.ended.load(Ordering::Acquire) || lock(&pipe.stdin).closed {
                            break Ok(Err(closed()));
                        }
                        if let Some(reason) = tick() {
                            let note = json!({
                                "jsonrpc": "2.0",
                                "method": "notifications/cancelled",
                                "params": {"requestId": id, "reason": reason},
                            });
                            let _ = pipe.write(note.to_string().into_bytes());
                            break Err(Stop::Stopped(reason));
                        }
                    }
                }
            },
        };
        lock(&pipe.waiting).remove(&id);
        lock(&self.progress).remove(&progress_key);
        answer
    }

    /// The error of a call stopped by the client's cancellation or its
    /// `call_timeout` (the upstream was sent `notifications/cancelled`).
    fn stopped(&self, route: &Route, reason: &str) -> Error {
        if reason == CANCELLED_BY_CLIENT {
            return Error::new(
                ErrorKind::Timeout,
                format!(
                    "{} was cancelled; the upstream was told to stop",
                    route.exposed
                ),
            );
        }
        Error::new(
            ErrorKind::Timeout,
            format!(
                "{} took longer than its call_timeout of {} s; the upstream was told to \
                 cancel it. Try again with less work, or use another tool",
                route.exposed,
                self.call_timeout().as_secs()
            ),
        )
    }

    fn end(&self) {
        if self.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        // A server still starting is killed now, not waited for (its
        // start then fails at once).
        let starting = lock(&self.state).starting.take();
        if let Some(handle) = starting {
            handle.kill_tree();
        }
        let conn = self.settle().conn.take();
        if let Some(conn) = conn {
            close(conn);
        }
        // Each server's sandbox is dropped on its reader thread once its
        // tree is reaped (the last one's, and those of servers that died or
        // never answered): an ended run waits for them (bounded), so that
        // nothing of a server's sandbox outlives the run (its placeholder
        // stash, were the process to exit next).
        let deadline = Instant::now() + END_WAIT;
        for reaped in std::mem::take(&mut *lock(&self.readers)) {
            let _ = reaped.recv_timeout(deadline.saturating_duration_since(Instant::now()));
        }
    }
}

/// How long [`ToolSource::end`] waits for a stdio server's tree to be
/// reaped and its sandbox dropped.
const END_WAIT: Duration = Duration::from_secs(5);

/// How a session with an upstream starts, by its `protocol`: `auto`
/// probes with `server/discover` (2026-07-28) and falls back to the
/// `initialize` handshake (2025-11-25) when the server says it does not
/// know it.
/// The definition of a listed tool, as pinned.
fn definition(tool: &rmcp::model::Tool) -> Definition {
    Definition {
        description: tool.description.as_deref().unwrap_or("").to_string(),
        input_schema: Value::Object((*tool.input_schema).clone()),
        output_schema: tool
            .output_schema
            .as_ref()
            .map(|s| Value::Object((**s).clone())),
    }
}

fn lifecycle(protocol: cubby::config::UpstreamProtocol) -> ClientLifecycleMode {
    use cubby::config::UpstreamProtocol;
    use rmcp::model::ProtocolVersion;
    match protocol {
        UpstreamProtocol::Auto => ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::V_2025_11_25),
        },
        UpstreamProtocol::Handshake => ClientLifecycleMode::Initialize,
        UpstreamProtocol::Discover => ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    }
}

/// Stops a connection: the client's service, then the server's whole tree.
fn close(conn: Conn) {
    if let Some(process) = &conn.process {
        process.kill_tree();
    }
    if let Ok(rt) = runtime() {
        let client = conn.client;
        rt.spawn(async move {
            let _ = client.cancel().await;
        });
    }
    if let Some(process) = conn.process {
        // Reaped by the reader thread; the kill is resent until it is.
        process.kill_tree();
    }
}

/// Why a call got no answer.
enum Stop {
    /// It could not be sent.
    Failed(String),
    /// The client's cancellation or the `call_timeout` stopped it (the
    /// upstream was told to cancel): the reason.
    Stopped(&'static str),
}

/// A server's answer to a call made past rmcp: its result as rmcp reads
/// one, or the error's text.
fn answer_of(message: ServerJsonRpcMessage) -> Result<ServerResult, String> {
    match message {
        rmcp::model::JsonRpcMessage::Response(r) => Ok(r.result),
        // As rmcp's `ServiceError` shows it.
        rmcp::model::JsonRpcMessage::Error(e) => Err(format!("Mcp error: {}", e.error)),
        _ => Err("the upstream answered with something that is not an answer".to_string()),
    }
}

/// Why a call stopped before its answer: the client cancelled it.
const CANCELLED_BY_CLIENT: &str = "cancelled by the client";
/// Why a call stopped before its answer: its `call_timeout` passed.
const CALL_TIMEOUT: &str = "call_timeout";
/// How long a stopped call waits for `notifications/cancelled` to be
/// handed to the connection.
const NOTIFY_WAIT: Duration = Duration::from_secs(1);

/// Wakes the thread that [`wait_here`] parked.
struct Unpark(std::thread::Thread);

impl std::task::Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `work` on this thread until it is ready, parked in between (woken
/// by the future, or after [`CANCEL_POLL`]); after each wake-up `tick`
/// may stop the wait with a reason. For futures that need no runtime
/// (rmcp's request and notification sends and answers: channels).
fn wait_here<F: std::future::Future>(
    work: F,
    tick: &mut dyn FnMut() -> Option<&'static str>,
) -> Result<F::Output, &'static str> {
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut work = std::pin::pin!(work);
    loop {
        if let std::task::Poll::Ready(out) = work.as_mut().poll(&mut cx) {
            return Ok(out);
        }
        if let Some(reason) = tick() {
            return Err(reason);
        }
        std::thread::park_timeout(CANCEL_POLL);
    }
}

/// Runs `work` on the runtime and waits at most `timeout` for it, from a
/// thread outside the runtime. `Err(())` on the timeout (the work is
/// dropped).
fn run_bounded<T: Send + 'static>(
    rt: &tokio::runtime::Runtime,
    timeout: Duration,
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, ()> {
    let (tx, rx) = std::sync::mpsc::channel();
    let task = rt.spawn(async move {
        let _ = tx.send(work.await);
    });
    match rx.recv_timeout(timeout) {
        Ok(v) => Ok(v),
        Err(_) => {
            task.abort();
            Err(())
        }
    }
}

/// What the text of an answer names when the answer was over
/// [`MAX_MESSAGE_BYTES`].
const TOO_LARGE_MARK: &str = "over cubby's limit of";

/// An upstream result → cubby's: text blocks joined; images, audio and
/// blobs published as artifacts (an image also shown within `view_file`'s
/// bounds); embedded text resources inline; resource links as text only
/// (cubby never reads them).
fn shape(label: &str, result: &Value, call: &SourceCall<'_>) -> ToolOutput {
    let mut text: Vec<String> = Vec::new();
    let mut attachments: Vec<Attachment> = Vec::new();
    let empty = Vec::new();
    let blocks = result
        .get("content")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let mut n = 0usize;
    let mut publish =
        |kind: &str, data: &str, mime: Option<&str>, name: Option<&str>, text: &mut Vec<String>| {
            n += 1;
            let bytes = match base64::engine::general_purpose::STANDARD.decode(data.as_bytes()) {
                Ok(b) => b,
                Err(_) => {
                    text.push(format!(
                        "[{kind} from upstream `{label}` skipped: its data is not base64]"
                    ));
                    return;
                }
            };
            let name = name
                .map(str::to_string)
                .unwrap_or_else(|| format!("{label}-{kind}-{n}{}", extension(mime)));
            match call.publish(&name, mime, &bytes) {
                Ok((line, more)) => {
                    text.push(line);
                    attachments.extend(more);
                }
                Err(e) => text.push(format!(
                    "[{kind} of {} bytes from upstream `{label}` not published: {}]",
                    bytes.len(),
                    e.message()
                )),
            }
        };
    for block in blocks {
        let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
        let s = |k: &str| block.get(k).and_then(Value::as_str);
        match kind {
            "text" => text.push(s("text").unwrap_or("").to_string()),
            "image" | "audio" => {
                publish(
                    kind,
                    s("data").unwrap_or(""),
                    s("mimeType"),
                    None,
                    &mut text,
                );
            }
            "resource" => {
                let res = block.get("resource").cloned().unwrap_or(Value::Null);
                let uri = res.get("uri").and_then(Value::as_str).unwrap_or("");
                let mime = res.get("mimeType").and_then(Value::as_str);
                if let Some(t) = res.get("text").and_then(Value::as_str) {
                    text.push(format!("resource {uri}:\n{t}"));
                } else if let Some(blob) = res.get("blob").and_then(Value::as_str) {
                    let name = uri
                        .rsplit('/')
                        .next()
                        .filter(|n| !n.is_empty() && !n.contains(':'));
                    publish("resource", blob, mime, name, &mut text);
                }
            }
            "resource_link" => {
                let uri = s("uri").unwrap_or("");
                let name = s("name").unwrap_or("");
                let mime = s("mimeType").map(|m| format!(", {m}")).unwrap_or_default();
                text.push(format!(
                    "resource link (not read by cubby): {uri} ({name}{mime})"
                ));
            }
            other => text.push(format!(
                "[a `{other}` block from upstream `{label}` is not shown]"
            )),
        }
    }
    let is_error = result
        .get("isError")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let structured = result
        .get("structuredContent")
        .cloned()
        .unwrap_or(json!({}));
    ToolOutput {
        text: text.join("\n"),
        structured,
        is_error,
        attachments,
    }
}

fn extension(mime: Option<&str>) -> &'static str {
    match mime.unwrap_or("") {
        "image/png" => ".png",
        "image/jpeg" => ".jpg",
        "image/gif" => ".gif",
        "image/webp" => ".webp",
        "image/svg+xml" => ".svg",
        "audio/wav" | "audio/x-wav" => ".wav",
        "audio/mpeg" => ".mp3",
        "application/pdf" => ".pdf",
        _ => ".bin",
    }
}

impl ToolSource for Upstream {
    fn list(&self) -> Vec<(String, ToolFacts)> {
        self.inner
            .routes
            .iter()
            .map(|r| {
                (
                    r.exposed.clone(),
                    ToolFacts {
                        family: Family::Other,
                        read_only: false,
                        streaming: true,
                        cost: Cost::Long,
                        modes: Modes::WRITING,
                        snapshot: false,
                        skills: false,
                    },
                )
            })
            .collect()
    }

    fn spec(&self, name: &str, _describe: &Describe<'_>) -> Option<ToolSpec> {
        let route = self.inner.routes.iter().find(|r| r.exposed == name)?;
        let state = self.inner.settle();
        if !state.offered.contains(name) {
            return None;
        }
        let def = state.listed.get(&route.tool)?;
        // Redacted, cut to `MAX_DESCRIPTION_CHARS` and its controls shown
        // by the toolset, as every source's.
        let description = format!("[upstream `{}`] {}", self.inner.label, def.description);
        Some(ToolSpec {
            name: name.to_string(),
            description,
            input_schema: def.input_schema.clone(),
            output_schema: def
                .output_schema
                .clone()
                .unwrap_or_else(|| json!({"type": "object"})),
            annotations: Annotations {
                read_only: false,
                destructive: true,
                idempotent: false,
                open_world: true,
            },
            facts: ToolFacts {
                family: Family::Other,
                read_only: false,
                streaming: true,
                cost: Cost::Long,
                modes: Modes::WRITING,
                snapshot: false,
                skills: false,
            },
        })
    }

    fn available(&self, name: &str) -> bool {
        self.inner.settle().offered.contains(name)
    }

    fn call(
        &self,
        name: &str,
        arguments: Value,
        call: &SourceCall<'_>,
    ) -> cubby::Result<ToolOutput> {
        let Some(route) = self
            .inner
            .routes
            .iter()
            .find(|r| r.exposed == name)
            .cloned()
        else {
            return Err(Error::new(
                ErrorKind::Denied,
                format!(
                    "{name} is not among the tools of upstream `{}`'s `tools`",
                    self.inner.label
                ),
            ));
        };
        self.inner.call(&route, arguments, call)
    }

    fn refusal(&self, name: &str) -> Option<String> {
        let rest = name
            .strip_prefix(&self.inner.label)?
            .strip_prefix(cubby::upstream::SEPARATOR)?;
        // What the policy denies is not named (red-team pass 11, I1).
        let policy = self.inner.workspace.policy();
        let offered: Vec<&str> = self
            .inner
            .routes
            .iter()
            .filter(|r| policy.tool_decision(&r.exposed, Modes::WRITING).allowed)
            .map(|r| r.exposed.as_str())
            .collect();
        Some(format!(
            "`{}` is not in `[upstream.{}] tools`, so it is not offered; the tools of this \
             server offered are: {}",
            rest.chars().take(200).collect::<String>(),
            self.inner.label,
            offered.join(", ")
        ))
    }

    fn end(&self) {
        self.inner.end();
    }

    fn watch(&self, notify: Arc<dyn Fn() + Send + Sync>) {
        lock(&self.inner.watchers).push(notify);
    }
}

/// The client side's handler: progress and list changes from the server.
#[derive(Clone)]
struct Client {
    inner: std::sync::Weak<Inner>,
}

impl ClientHandler for Client {
    /// What the handshake announces: the last revision that has one
    /// (2025-11-25; rmcp's default is the newest revision, 2026-07-28,
    /// which has no handshake, and a server that echoes it back would take
    /// the session for that revision).
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let mut info = rmcp::model::ClientConfig::default();
        info.protocol_version = rmcp::model::ProtocolVersion::V_2025_11_25;
        info
    }

    fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + rmcp::service::MaybeSendFuture + '_ {
        if let Some(inner) = self.inner.upgrade() {
            let token = params.progress_token.0.to_string();
            let slot = lock(&inner.progress).get(&token).cloned();
            if let Some(slot) = slot {
                let mut message = match &params.total {
                    Some(total) => format!("{}/{}", params.progress, total),
                    None => format!("{}", params.progress),
                };
                if let Some(m) = &params.message {
                    message.push(' ');
                    message.extend(m.chars().take(1_000));
                }
                // The latest only: a flood overwrites, it never queues.
                *lock(&slot) = Some(message);
            }
        }
        std::future::ready(())
    }

    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + rmcp::service::MaybeSendFuture + '_ {
        if let Some(inner) = self.inner.upgrade() {
            // Off the runtime (the listing waits on it), one at a time.
            inner.relist();
        }
        std::future::ready(())
    }
}

/// The stdio transport over the command contract's streams: a reader
/// thread that frames the output into messages (each at most
/// [`MAX_MESSAGE_BYTES`]), a writer thread that feeds stdin.
struct PipeTransport {
    incoming: tokio::sync::mpsc::Receiver<ServerJsonRpcMessage>,
    /// The server's stdin and the calls made past rmcp.
    pipe: Arc<Pipe>,
}

/// A stdio server's connection as the calls made past rmcp use it
/// ([`Inner::call_direct`]): the server's stdin, shared with rmcp's sends
/// and the writer thread, and the calls waiting for their answers, which
/// the reader thread hands them itself. A call then costs no hop through
/// rmcp's service task on either way (two thread wake-ups fewer).
struct Pipe {
    /// The server's stdin, shared with the writer thread.
    stdin: Arc<Mutex<Stdin>>,
    /// What the writer thread is to write, in order.
    queue: Mutex<std::sync::mpsc::Sender<Vec<u8>>>,
    /// Id → the waiting call, for the ids [`DIRECT_ID_PREFIX`] names.
    waiting: Mutex<HashMap<String, std::sync::mpsc::Sender<ServerJsonRpcMessage>>>,
    /// The session began with the `initialize` handshake: requests carry
    /// no per-request protocol metadata, so a call can be written by hand.
    handshake: AtomicBool,
    /// The reader thread has stopped: no answer comes any more.
    ended: AtomicBool,
    next_id: std::sync::atomic::AtomicU64,
}

/// The prefix of the (string) ids of calls made past rmcp; rmcp's own ids
/// are numbers.
const DIRECT_ID_PREFIX: &str = "cubby-";

impl Pipe {
    /// Writes one message (its line feed added): at once when nothing waits
    /// before it, else after what waits, by the writer thread.
    fn write(&self, mut bytes: Vec<u8>) -> std::io::Result<()> {
        let closed = || {
            std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the upstream server's stdin is closed",
            )
        };
        bytes.push(b'\n');
        let mut stdin = lock(&self.stdin);
        if stdin.closed {
            return Err(closed());
        }
        if stdin.queued_bytes + bytes.len() > MAX_QUEUED_BYTES {
            return Err(std::io::Error::other(format!(
                "the upstream server is not reading its input: {} bytes wait for it \
                 already, so this request was not sent",
                stdin.queued_bytes
            )));
        }
        let from = if stdin.queued == 0 {
            match stdin.write_some(&bytes) {
                Wrote::All => return Ok(()),
                Wrote::Part(n) => n,
                Wrote::Failed => return Err(closed()),
            }
        } else {
            0
        };
        // Queued under the lock: nothing is written before it.
        stdin.queued += 1;
        bytes.drain(..from);
        stdin.queued_bytes += bytes.len();
        lock(&self.queue).send(bytes).map_err(|_| closed())
    }

    /// Hands an answer to the call made past rmcp that waits for it; gives
    /// back what is not such an answer (rmcp's). An answer nobody waits
    /// for any more (its call stopped) is dropped.
    fn deliver(&self, message: ServerJsonRpcMessage) -> Option<ServerJsonRpcMessage> {
        let id = match &message {
            rmcp::model::JsonRpcMessage::Response(r) => Some(&r.id),
            rmcp::model::JsonRpcMessage::Error(e) => e.id.as_ref(),
            _ => None,
        };
        let Some(rmcp::model::NumberOrString::String(id)) = id else {
            return Some(message);
        };
        if !id.starts_with(DIRECT_ID_PREFIX) {
            return Some(message);
        }
        if let Some(waiter) = lock(&self.waiting).remove(&**id) {
            let _ = waiter.send(message);
        }
        None
    }
}

/// A stdio server's stdin (non-blocking). A message is written at once
/// when nothing waits before it (no thread between the call and the
/// pipe); what does not fit in the pipe goes to the writer thread, and so
/// does every message after it until the thread has written them all. The
/// lock is only held for one non-blocking write.
struct Stdin {
    pipe: Box<dyn Write + Send>,
    /// Messages handed to the writer thread and not yet written whole.
    queued: usize,
    /// Their bytes (at most [`MAX_QUEUED_BYTES`]).
    queued_bytes: usize,
    /// The pipe failed: the server stopped reading.
    closed: bool,
}

/// What a write to a non-blocking pipe did.
enum Wrote {
    All,
    /// The pipe is full; this many bytes went in.
    Part(usize),
    Failed,
}

impl Stdin {
    fn write_some(&mut self, bytes: &[u8]) -> Wrote {
        let mut done = 0;
        while done < bytes.len() {
            match self.pipe.write(&bytes[done..]) {
                Ok(0) => {
                    self.closed = true;
                    return Wrote::Failed;
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Wrote::Part(done),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.closed = true;
                    return Wrote::Failed;
                }
            }
        }
        Wrote::All
    }
}

impl PipeTransport {
    fn start(
        label: &str,
        output: Box<dyn Read + Send>,
        stdin: Option<Box<dyn Write + Send>>,
        handle: Arc<dyn ProcessHandle>,
        on_exit: Option<Box<dyn FnOnce() + Send>>,
        sandbox: Arc<dyn cubby::Sandbox>,
    ) -> cubby::Result<(PipeTransport, std::sync::mpsc::Receiver<()>)> {
        let stdin = stdin.ok_or_else(|| {
            Error::new(ErrorKind::Internal, "the server was started without stdin")
        })?;
        let (in_tx, in_rx) = tokio::sync::mpsc::channel(INCOMING_QUEUE);
        let (out_tx, out_rx) = std::sync::mpsc::channel::<Vec<u8>>();
        let stdin = Arc::new(Mutex::new(Stdin {
            pipe: stdin,
            queued: 0,
            queued_bytes: 0,
            closed: false,
        }));
        let writer_stdin = stdin.clone();
        let pipe = Arc::new(Pipe {
            stdin,
            queue: Mutex::new(out_tx),
            waiting: Mutex::default(),
            handshake: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            next_id: std::sync::atomic::AtomicU64::new(0),
        });
        let reader_pipe = pipe.clone();
        let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name)
                .spawn(f)
                .map(|_| ())
                .map_err(|e| Error::new(ErrorKind::Internal, format!("cannot start a thread: {e}")))
        };
        let reader_label = label.to_string();
        let (reaped_tx, reaped) = std::sync::mpsc::channel::<()>();
        spawn(
            format!("upstream-{label}-out"),
            Box::new(move || {
                read_messages(&reader_label, output, &in_tx, &reader_pipe);
                drop(in_tx);
                // The calls still waiting get no answer: theirs are gone.
                reader_pipe.ended.store(true, Ordering::Release);
                lock(&reader_pipe.waiting).clear();
                let _ = handle.wait();
                if let Some(on_exit) = on_exit {
                    on_exit();
                }
                // The sandbox lives as long as its server.
                drop(sandbox);
                drop(reaped_tx);
            }),
        )?;
        spawn(
            format!("upstream-{label}-in"),
            Box::new(move || write_messages(&writer_stdin, &out_rx)),
        )?;
        Ok((
            PipeTransport {
                incoming: in_rx,
                pipe,
            },
            reaped,
        ))
    }
}

impl rmcp::transport::Transport<RoleClient> for PipeTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let rmcp::model::JsonRpcMessage::Request(r) = &item
            && matches!(r.request, ClientRequest::InitializeRequest(_))
        {
            self.pipe.handshake.store(true, Ordering::Release);
        }
        let sent = serde_json::to_vec(&item)
            .map_err(std::io::Error::other)
            .and_then(|bytes| self.pipe.write(bytes));
        std::future::ready(sent)
    }

    fn receive(
        &mut self,
    ) -> impl std::future::Future<Output = Option<ServerJsonRpcMessage>> + Send {
        self.incoming.recv()
    }

    fn close(&mut self) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send {
        self.incoming.close();
        std::future::ready(Ok(()))
    }
}

/// How long the writer thread waits before it tries a full pipe again.
const FULL_PIPE_WAIT: Duration = Duration::from_millis(1);

/// Writes what [`PipeTransport::send`] could not write at once, in order
/// (waiting and retrying while the server does not read, without holding
/// the lock), until the transport is dropped or the server stops reading.
fn write_messages(stdin: &Mutex<Stdin>, rx: &std::sync::mpsc::Receiver<Vec<u8>>) {
    while let Ok(bytes) = rx.recv() {
        let mut from = 0;
        loop {
            let mut pipe = lock(stdin);
            match pipe.write_some(&bytes[from..]) {
                Wrote::All => {
                    pipe.queued -= 1;
                    pipe.queued_bytes -= bytes.len();
                    break;
                }
                Wrote::Part(n) => from += n,
                Wrote::Failed => return,
            }
            drop(pipe);
            std::thread::sleep(FULL_PIPE_WAIT);
        }
    }
}

/// Frames the server's output into messages: one JSON value a line, at
/// most [`MAX_MESSAGE_BYTES`]; a longer line is skipped as it arrives
/// (only its ends kept, to find its id) and its request answered with an
/// error; a line that is not a message is logged and skipped.
fn read_messages(
    label: &str,
    mut output: Box<dyn Read + Send>,
    tx: &tokio::sync::mpsc::Sender<ServerJsonRpcMessage>,
    pipe: &Pipe,
) {
    let mut line: Vec<u8> = Vec::new();
    // For a line over the limit: its head, its tail and its length.
    let mut over: Option<(Vec<u8>, Vec<u8>, usize)> = None;
    let mut chunk = vec![0u8; READ_CHUNK];
    loop {
        let n = match output.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mut rest = &chunk[..n];
        while !rest.is_empty() {
            let (part, ended) = match memchr_newline(rest) {
                Some(i) => (&rest[..i], true),
                None => (rest, false),
            };
            rest = if ended { &rest[part.len() + 1..] } else { &[] };
            if let Some((_, tail, total)) = &mut over {
                *total += part.len();
                tail.extend_from_slice(part);
                if tail.len() > 2 * ID_WINDOW {
                    tail.drain(..tail.len() - ID_WINDOW);
                }
            } else if line.len() + part.len() > MAX_MESSAGE_BYTES {
                let total = line.len() + part.len();
                let head = line[..line.len().min(ID_WINDOW)].to_vec();
                let mut tail = line[line.len().saturating_sub(ID_WINDOW)..].to_vec();
                tail.extend_from_slice(part);
                if tail.len() > ID_WINDOW {
                    tail.drain(..tail.len() - ID_WINDOW);
                }
                line = Vec::new();
                over = Some((head, tail, total));
            } else {
                line.extend_from_slice(part);
            }
            if !ended {
                continue;
            }
            let message = if let Some((head, tail, total)) = over.take() {
                tracing::warn!(
                    "upstream `{label}` sent a message of {total} bytes, over the limit of \
                     {MAX_MESSAGE_BYTES}; skipped"
                );
                find_id(&tail, true)
                    .or_else(|| find_id(&head, false))
                    .and_then(|id| {
                        serde_json::from_value::<ServerJsonRpcMessage>(json!({
                            "jsonrpc": "2.0",
                            "id": id,
                            "error": {
                                "code": -32603,
                                "message": format!(
                                    "the upstream's answer was {total} bytes, {TOO_LARGE_MARK} \
                                     {MAX_MESSAGE_BYTES} bytes a message"
                                ),
                            },
                        }))
                        .ok()
                    })
            } else {
                let text = std::mem::take(&mut line);
                let trimmed = text.trim_ascii();
                if trimmed.is_empty() {
                    None
                } else {
                    match serde_json::from_slice::<ServerJsonRpcMessage>(trimmed) {
                        Ok(m) => Some(m),
                        Err(e) => {
                            tracing::debug!(
                                "upstream `{label}`: a line that is not a message: {e}"
                            );
                            None
                        }
                    }
                }
            };
            let Some(message) = message else { continue };
            if let Some(message) = pipe.deliver(message)
                && tx.blocking_send(message).is_err()
            {
                return;
            }
        }
    }
}

fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|b| *b == b'\n')
}

/// The JSON-RPC id in a window of a message: the last `"id":` (from the
/// tail) or the first (from the head), a number or a string.
fn find_id(window: &[u8], last: bool) -> Option<Value> {
    let key = b"\"id\"";
    let positions: Vec<usize> = window
        .windows(key.len())
        .enumerate()
        .filter(|(_, w)| *w == key)
        .map(|(i, _)| i)
        .collect();
    let at = if last {
        positions.last()
    } else {
        positions.first()
    }?;
    let rest = &window[at + key.len()..];
    let rest = rest
        .trim_ascii_start()
        .strip_prefix(b":")?
        .trim_ascii_start();
    if let Some(s) = rest.strip_prefix(b"\"") {
        let end = s.iter().position(|b| *b == b'"')?;
        return Some(Value::String(
            String::from_utf8_lossy(&s[..end]).into_owned(),
        ));
    }
    let end = rest
        .iter()
        .position(|b| !(b.is_ascii_digit() || *b == b'-'))
        .unwrap_or(rest.len());
    std::str::from_utf8(&rest[..end])
        .ok()?
        .parse::<i64>()
        .ok()
        .map(Value::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_found_at_either_end() {
        assert_eq!(
            find_id(br#"{"jsonrpc":"2.0","id":17,"result":{"#, false),
            Some(json!(17))
        );
        assert_eq!(
            find_id(br#"aaa"}]},"jsonrpc":"2.0","id":"x-1"}"#, true),
            Some(json!("x-1"))
        );
        assert_eq!(find_id(br#"no id here"#, true), None);
    }

    #[test]
    fn an_oversized_line_is_skipped_and_answered() {
        let big = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\"{}\"}}]}}}}\n{{\"jsonrpc\":\"2.0\",\"id\":6,\"result\":{{}}}}\n",
            "x".repeat(MAX_MESSAGE_BYTES + 10)
        );
        let (tx, mut rx) = tokio::sync::mpsc::channel(4);
        let pipe = pipe_for_tests();
        read_messages(
            "t",
            Box::new(std::io::Cursor::new(big.into_bytes())),
            &tx,
            &pipe,
        );
        drop(tx);
        let first = serde_json::to_value(rx.blocking_recv().unwrap()).unwrap();
        assert_eq!(first["id"], 5);
        assert!(
            first["error"]["message"]
                .as_str()
                .unwrap()
                .contains(TOO_LARGE_MARK)
        );
        let second = serde_json::to_value(rx.blocking_recv().unwrap()).unwrap();
        assert_eq!(second["id"], 6);
        assert!(rx.blocking_recv().is_none());
    }

    fn pipe_for_tests() -> Pipe {
        let (queue, _) = std::sync::mpsc::channel();
        Pipe {
            stdin: Arc::new(Mutex::new(Stdin {
                pipe: Box::new(std::io::sink()),
                queued: 0,
                queued_bytes: 0,
                closed: false,
            })),
            queue: Mutex::new(queue),
            waiting: Mutex::default(),
            handshake: AtomicBool::new(true),
            ended: AtomicBool::new(false),
            next_id: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The answers to calls made past rmcp go to their callers, an
    /// oversized one as its error, one nobody waits for nowhere; rmcp gets
    /// the rest (its own answers, notifications).
    #[test]
    fn answers_to_calls_made_past_rmcp_go_to_their_callers() {
        let input = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":\"{DIRECT_ID_PREFIX}1\",\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\"{}\"}}]}}}}\n\
             {{\"jsonrpc\":\"2.0\",\"id\":\"{DIRECT_ID_PREFIX}2\",\"result\":{{\"content\":[]}}}}\n\
             {{\"jsonrpc\":\"2.0\",\"id\":\"{DIRECT_ID_PREFIX}9\",\"result\":{{}}}}\n\
             {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}}\n\
             {{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{{}}}}\n",
            "x".repeat(MAX_MESSAGE_BYTES + 10)
        );
        let pipe = pipe_for_tests();
        let (one, one_rx) = std::sync::mpsc::channel();
        let (two, two_rx) = std::sync::mpsc::channel();
        lock(&pipe.waiting).insert(format!("{DIRECT_ID_PREFIX}1"), one);
        lock(&pipe.waiting).insert(format!("{DIRECT_ID_PREFIX}2"), two);
        let (tx, mut rx) = tokio::sync::mpsc::channel(8);
        read_messages(
            "t",
            Box::new(std::io::Cursor::new(input.into_bytes())),
            &tx,
            &pipe,
        );
        drop(tx);
        let first = answer_of(one_rx.recv().unwrap()).unwrap_err();
        assert!(first.contains(TOO_LARGE_MARK), "{first}");
        assert!(answer_of(two_rx.recv().unwrap()).is_ok());
        assert!(lock(&pipe.waiting).is_empty());
        let kinds: Vec<Value> = std::iter::from_fn(|| rx.blocking_recv())
            .map(|m| serde_json::to_value(m).unwrap())
            .collect();
        assert_eq!(kinds.len(), 2, "{kinds:?}");
        assert_eq!(kinds[0]["method"], "notifications/tools/list_changed");
        assert_eq!(kinds[1]["id"], 7);
    }
}
