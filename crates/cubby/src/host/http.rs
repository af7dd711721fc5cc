//! The `/v1` API of a [`Host`] over HTTP: one handler ([`handle`]) that the
//! MCP server mounts beside `/mcp`, and [`serve`], the same handler on a
//! listener of its own (for library users and tests).
//!
//! Every request needs `Authorization: Bearer <token>`, compared in constant
//! time (401 otherwise, before anything else is read). Bodies are capped at
//! [`MAX_BODY_BYTES`]. The endpoints (all under `/v1`; `{p}` is a workspace
//! path as unpadded URL-safe base64 in `?path=`):
//!
//! | method and path | what |
//! |---|---|
//! | `POST /sandboxes` | create (`{}` or `{"root": DIR}`) → 201 `Created` |
//! | `POST /sandboxes` with a tar body ([`is_tar`]) | create, the workspace unpacked from it ([`super::unpack`]) → 201 |
//! | `GET /sandboxes` | the ids |
//! | `DELETE /sandboxes/{id}` | destroy → 204 |
//! | `POST /sandboxes/{id}/exec` | start a command; the answer streams frames |
//! | `GET /sandboxes/{id}/commands` | live commands |
//! | `POST /sandboxes/{id}/commands/{n}/stop` · `/kill` | TERM · kill the tree → 204 |
//! | `POST /sandboxes/{id}/commands/{n}/stdin` | write the body → `{"written": N}` |
//! | `DELETE /sandboxes/{id}/commands/{n}/stdin` | close stdin → 204 |
//! | `GET /sandboxes/{id}/fs/metadata?path=` | metadata |
//! | `GET /sandboxes/{id}/fs/file?path=` | content (streamed), metadata in a header |
//! | `PUT /sandboxes/{id}/fs/file?path=` | atomic write of the body → 204 |
//! | `GET /sandboxes/{id}/fs/dir?path=&max=` | listing |
//! | `POST /sandboxes/{id}/fs/mkdir?path=` · `/fs/rmdir?path=` | make · remove when empty |
//! | `GET /sandboxes/{id}/changes` | the `changes` tool's result |
//! | `POST /sandboxes/{id}/tools/{name}` | any tool of the sandbox's toolset |
//!
//! A command's answer ends with its exit frame; closing it earlier kills
//! the command's tree.
//!
//! # Binding (a warm pool's pods)
//!
//! An API made [`HostApi::allow_bind`] also answers `POST /v1/bind`, once: the
//! caller, holding the starting token (a warm pool's key), gets a fresh
//! random token (`{"token": …}`), and from then on only that token is
//! accepted ([`HostApi::accepts`]; the key is dead for this server). A
//! second bind answers 409. So a pod of a pool waits warm with the shared
//! key and serves one claim with a token of that claim's own. Until the
//! bind, the key opens nothing else (every other route answers 403, and
//! `/mcp` beside it too, [`HostApi::awaits_bind`]): whoever holds the
//! shared key could otherwise leave a sandbox, a command or a stream behind
//! that outlives the bind and watches the claim's work.

use std::convert::Infallible;
use std::io::Read;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Body, Frame};
use hyper::{Method, Request, Response, StatusCode};

use super::{Host, Running};
use crate::error::{Error, ErrorKind, Result};
use crate::remote::wire;

/// Largest request body (a file written, stdin, a tool's arguments).
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;
/// How long data a server sent may stay unacknowledged before the
/// connection is dropped (`TCP_USER_TIMEOUT`): a client cut off by a
/// partition is noticed through the heartbeats of its command's stream,
/// and the command killed.
pub const TCP_USER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Sets [`TCP_USER_TIMEOUT`] and `TCP_NODELAY` on an accepted connection.
///
/// Without `TCP_NODELAY`, a command's first output frame, written just after
/// the answer's head, waited for the head's acknowledgement, which a client
/// delays up to 40 ms (Nagle's algorithm against delayed ACKs): every
/// command's first output came 40 ms late (docs/PERFORMANCE.md, issue 18).
pub fn tune_accepted(stream: &tokio::net::TcpStream) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!("cannot set TCP_NODELAY: {e}");
    }
    let ms = u32::try_from(TCP_USER_TIMEOUT.as_millis()).unwrap_or(u32::MAX);
    if let Err(e) = rustix::net::sockopt::set_tcp_user_timeout(stream, ms) {
        tracing::debug!("cannot set TCP_USER_TIMEOUT: {e}");
    }
}

/// Chunks of output in flight between a command's reader and its answer.
const STREAM_CHUNKS: usize = 8;

/// The body of every answer.
pub type HostBody = UnsyncBoxBody<Bytes, std::io::Error>;

/// Random bytes in a token [`HostApi::allow_bind`] hands out.
pub const BOUND_TOKEN_RANDOM_BYTES: usize = 32;

/// What a handler needs: the host and its token.
#[derive(Clone)]
pub struct HostApi {
    host: Arc<Host>,
    auth: Arc<std::sync::Mutex<Auth>>,
}

/// The token in force and whether it may still be exchanged.
struct Auth {
    token: Arc<[u8]>,
    /// `POST /v1/bind` is answered (set by [`HostApi::allow_bind`]).
    bindable: bool,
    /// The token was exchanged: a bind answers 409.
    bound: bool,
}

impl std::fmt::Debug for HostApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostApi")
            .field("sandboxes", &self.host.len())
            .field("token", &"[REDACTED]")
            .finish()
    }
}

impl HostApi {
    /// The API of `host`, open to requests that carry `token`.
    ///
    /// # Errors
    ///
    /// `invalid_input` for an empty token (the API is never open without one).
    pub fn new(host: Arc<Host>, token: &str) -> Result<HostApi> {
        if token.is_empty() {
            return Err(Error::invalid_input(
                "the sandbox host API needs a bearer token; set one (--token-file or CUBBY_TOKEN)",
            ));
        }
        Ok(HostApi {
            host,
            auth: Arc::new(std::sync::Mutex::new(Auth {
                token: Arc::from(token.as_bytes()),
                bindable: false,
                bound: false,
            })),
        })
    }

    /// Makes this API (and its clones) answer `POST /v1/bind` once (see
    /// the module's docs).
    pub fn allow_bind(&self) {
        crate::sync::lock(&self.auth).bindable = true;
    }

    /// Whether `given` (a bearer token) is the one in force, compared in
    /// constant time (what `/mcp` on the same listener checks too).
    pub fn accepts(&self, given: &[u8]) -> bool {
        let token = crate::sync::lock(&self.auth).token.clone();
        same(given, &token)
    }

    /// Whether this API waits for its bind ([`HostApi::allow_bind`], not
    /// bound yet): then only `POST /v1/bind` is answered, the rest of `/v1`
    /// and `/mcp` refused.
    pub fn awaits_bind(&self) -> bool {
        let auth = crate::sync::lock(&self.auth);
        auth.bindable && !auth.bound
    }

    /// Exchanges the token in force (already checked) for a fresh one: the
    /// answer (200 with [`Bound`]; 404 when not bindable; 409 when bound).
    fn bind(&self) -> Response<HostBody> {
        let mut auth = crate::sync::lock(&self.auth);
        if !auth.bindable {
            return error(&Error::new(
                ErrorKind::NotFound,
                "this server was not started to be bound (serve --host-bind)",
            ));
        }
        if auth.bound {
            return json(
                StatusCode::CONFLICT,
                &wire::WireError {
                    kind: "denied".into(),
                    message: "this server is bound already; a claim binds it once".into(),
                },
            );
        }
        let random = match crate::artifact::store::random_hex(BOUND_TOKEN_RANDOM_BYTES) {
            Ok(random) => random,
            Err(e) => return error(&Error::internal(format!("cannot read /dev/urandom: {e}"))),
        };
        let token = format!("cubby-claim-{random}");
        auth.token = Arc::from(token.as_bytes());
        auth.bound = true;
        json(StatusCode::OK, &wire::Bound { token })
    }

    /// The host.
    pub fn host(&self) -> &Arc<Host> {
        &self.host
    }
}

/// Constant-time comparison of two byte strings.
fn same(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for (x, y) in a.iter().zip(b.iter().cycle()) {
        diff |= x ^ y;
    }
    diff == 0 && !b.is_empty()
}

fn full(bytes: impl Into<Bytes>) -> HostBody {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed_unsync()
}

fn answer(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<HostBody> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    resp
}

fn json(status: StatusCode, value: &impl serde::Serialize) -> Response<HostBody> {
    answer(
        status,
        "application/json",
        serde_json::to_vec(value).unwrap_or_default(),
    )
}

fn no_content() -> Response<HostBody> {
    answer(StatusCode::NO_CONTENT, "text/plain", Bytes::new())
}

/// The HTTP status of an error kind.
fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Denied | ErrorKind::PathEscape => StatusCode::FORBIDDEN,
        ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::Limit => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::Internal | ErrorKind::Network => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorKind::Unsupported => StatusCode::NOT_IMPLEMENTED,
        ErrorKind::Timeout => StatusCode::GATEWAY_TIMEOUT,
        _ => StatusCode::BAD_REQUEST,
    }
}

fn error(e: &Error) -> Response<HostBody> {
    json(status_of(e.kind()), &wire::WireError::from(e))
}

/// What a server waiting for its bind answers to all but the bind.
pub fn awaiting_bind() -> Error {
    Error::new(
        ErrorKind::Denied,
        "this server waits for its claim: POST /v1/bind with the pool key first, then use \
         the token it answers",
    )
}

fn unauthorized() -> Response<HostBody> {
    let mut resp = json(
        StatusCode::UNAUTHORIZED,
        &wire::WireError {
            kind: "denied".into(),
            message: "a bearer token is required (Authorization: Bearer <token>)".into(),
        },
    );
    resp.headers_mut().insert(
        hyper::header::WWW_AUTHENTICATE,
        hyper::header::HeaderValue::from_static("Bearer"),
    );
    resp
}

/// Runs blocking work off the event loop.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| Err(Error::internal(format!("a host task failed: {e}"))))
}

/// Reads a request body whole, up to [`MAX_BODY_BYTES`].
async fn read_body<B>(body: B) -> Result<Bytes>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error:
        std::fmt::Display + Send + Sync + 'static + Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                Err(Error::new(
                    ErrorKind::TooLarge,
                    format!("the request body is over {MAX_BODY_BYTES} bytes; send less at once"),
                ))
            } else {
                Err(Error::new(
                    ErrorKind::Network,
                    format!("the request body broke off: {e}"),
                ))
            }
        }
    }
}

/// Whether a create's body is a tar (`application/x-tar`, `application/tar`)
/// or a gzipped one (`application/gzip`, `application/x-gzip`; a tar type
/// whose body starts with gzip's magic is unpacked as gzip too), rather
/// than the JSON [`wire::CreateRequest`].
pub fn is_tar(headers: &hyper::HeaderMap) -> bool {
    let Some(value) = headers
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim();
    wire::TAR_TYPES
        .iter()
        .any(|t| essence.eq_ignore_ascii_case(t))
}

/// A query parameter's raw value.
fn query<'a>(req_query: Option<&'a str>, name: &str) -> Option<&'a str> {
    req_query?
        .split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
}

fn path_param(q: Option<&str>) -> Result<crate::path::WorkspacePath> {
    wire::decode_path(query(q, "path").unwrap_or(""))
}

/// Answers one request of the `/v1` API (any other path: 404).
pub async fn handle<B>(api: HostApi, req: Request<B>) -> Response<HostBody>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error:
        std::fmt::Display + Send + Sync + 'static + Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let given = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        .unwrap_or(b"");
    if !api.accepts(given) {
        return unauthorized();
    }
    if req.uri().path() == format!("{}{}", wire::PREFIX, wire::BIND_PATH)
        && req.method() == Method::POST
    {
        return api.bind();
    }
    if api.awaits_bind() {
        return error(&awaiting_bind());
    }
    match route(api, req).await {
        Ok(resp) => resp,
        Err(e) => error(&e),
    }
}

async fn route<B>(api: HostApi, req: Request<B>) -> Result<Response<HostBody>>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error:
        std::fmt::Display + Send + Sync + 'static + Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let q = parts.uri.query().map(str::to_string);
    let q = q.as_deref();
    let Some(rest) = path.strip_prefix(wire::PREFIX) else {
        return Err(Error::new(
            ErrorKind::NotFound,
            "no such endpoint; see docs/REFERENCE.md",
        ));
    };
    let segments: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    let host = api.host.clone();
    let method = parts.method.clone();
    let unknown = || {
        Error::new(
            ErrorKind::NotFound,
            format!("no endpoint {method} {path}; see docs/REFERENCE.md"),
        )
    };
    let command_no = |s: &str| {
        s.parse::<u64>()
            .map_err(|_| Error::invalid_input(format!("`{s}` is not a command number")))
    };
    match (parts.method.clone(), segments.as_slice()) {
        (Method::POST, ["sandboxes"]) => {
            let tar = is_tar(&parts.headers);
            let body = read_body(body).await?;
            if tar {
                let created = blocking(move || host.create_from_tar(&body)).await?;
                return Ok(json(StatusCode::CREATED, &created));
            }
            let request: wire::CreateRequest = if body.iter().all(u8::is_ascii_whitespace) {
                wire::CreateRequest::default()
            } else {
                serde_json::from_slice(&body).map_err(|e| {
                    Error::invalid_input(format!("the create request is malformed: {e}"))
                })?
            };
            let created = blocking(move || host.create(&request)).await?;
            Ok(json(StatusCode::CREATED, &created))
        }
        (Method::GET, ["sandboxes"]) => Ok(json(StatusCode::OK, &host.ids())),
        (Method::DELETE, ["sandboxes", id]) => {
            let id = id.to_string();
            blocking(move || host.destroy(&id)).await?;
            Ok(no_content())
        }
        (Method::POST, ["sandboxes", id, "exec"]) => {
            let body = read_body(body).await?;
            let request: wire::ExecRequest = serde_json::from_slice(&body)
                .map_err(|e| Error::invalid_input(format!("the exec request is malformed: {e}")))?;
            let id = id.to_string();
            let started = blocking(move || host.exec(&id, request)).await?;
            exec_answer(started)
        }
        (Method::GET, ["sandboxes", id, "commands"]) => {
            let id = id.to_string();
            Ok(json(
                StatusCode::OK,
                &blocking(move || host.commands(&id)).await?,
            ))
        }
        (Method::POST, ["sandboxes", id, "commands", n, signal @ ("stop" | "kill")]) => {
            let (id, n, kill) = (id.to_string(), command_no(n)?, *signal == "kill");
            blocking(move || host.signal(&id, n, kill)).await?;
            Ok(no_content())
        }
        (Method::POST, ["sandboxes", id, "commands", n, "stdin"]) => {
            let (id, n) = (id.to_string(), command_no(n)?);
            let input = read_body(body).await?;
            let written = blocking(move || host.write_stdin(&id, n, &input)).await?;
            Ok(json(
                StatusCode::OK,
                &serde_json::json!({ "written": written }),
            ))
        }
        (Method::DELETE, ["sandboxes", id, "commands", n, "stdin"]) => {
            let (id, n) = (id.to_string(), command_no(n)?);
            blocking(move || host.close_stdin(&id, n)).await?;
            Ok(no_content())
        }
        (Method::GET, ["sandboxes", id, "fs", "metadata"]) => {
            let (id, p) = (id.to_string(), path_param(q)?);
            let m = blocking(move || host.metadata(&id, &p)).await?;
            Ok(json(StatusCode::OK, &wire::WireMetadata::from(&m)))
        }
        (Method::GET, ["sandboxes", id, "fs", "file"]) => {
            let (id, p) = (id.to_string(), path_param(q)?);
            let file = blocking(move || host.open(&id, &p)).await?;
            file_answer(file)
        }
        (Method::PUT, ["sandboxes", id, "fs", "file"]) => {
            let (id, p) = (id.to_string(), path_param(q)?);
            let content = read_body(body).await?;
            blocking(move || host.write(&id, &p, &content)).await?;
            Ok(no_content())
        }
        (Method::GET, ["sandboxes", id, "fs", "dir"]) => {
            let (id, p) = (id.to_string(), path_param(q)?);
            let max = match query(q, "max") {
                Some(m) => m
                    .parse::<usize>()
                    .map_err(|_| Error::invalid_input("max is not a number"))?,
                None => usize::MAX,
            };
            let (entries, more) = blocking(move || host.read_dir(&id, &p, max)).await?;
            let listing = wire::Listing {
                entries: entries.iter().map(wire::WireEntry::from).collect(),
                more,
            };
            Ok(json(StatusCode::OK, &listing))
        }
        (Method::POST, ["sandboxes", id, "fs", "mkdir"]) => {
            let (id, p) = (id.to_string(), path_param(q)?);
            blocking(move || host.mkdir(&id, &p)).await?;
            Ok(no_content())
        }
        (Method::POST, ["sandboxes", id, "fs", "rmdir"]) => {
            let (id, p) = (id.to_string(), path_param(q)?);
            let removed = blocking(move || host.rmdir(&id, &p)).await?;
            Ok(json(StatusCode::OK, &removed))
        }
        (Method::GET, ["sandboxes", id, "changes"]) => {
            let id = id.to_string();
            let out =
                blocking(move || host.call_tool(&id, "changes", serde_json::json!({}))).await?;
            Ok(json(StatusCode::OK, &out))
        }
        (Method::POST, ["sandboxes", id, "tools", name]) => {
            let (id, name) = (id.to_string(), name.to_string());
            let body = read_body(body).await?;
            let args: serde_json::Value = if body.is_empty() {
                serde_json::json!({})
            } else {
                serde_json::from_slice(&body)
                    .map_err(|e| Error::invalid_input(format!("the arguments are not JSON: {e}")))?
            };
            let out = blocking(move || host.call_tool(&id, &name, args)).await?;
            Ok(json(StatusCode::OK, &out))
        }
        _ => Err(unknown()),
    }
}

/// A streamed answer: chunks from a reader thread, heartbeats while quiet;
/// dropping it early (the client went away) kills the command it carries.
struct Streamed {
    rx: tokio::sync::mpsc::Receiver<Bytes>,
    beat: Option<tokio::time::Interval>,
    command: Option<Arc<Running>>,
}

impl Body for Streamed {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, std::io::Error>>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(chunk)) => return Poll::Ready(Some(Ok(Frame::data(chunk)))),
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => {}
        }
        if let Some(beat) = self.beat.as_mut() {
            if beat.poll_tick(cx).is_ready() {
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from(wire::frame(
                    wire::FRAME_BEAT,
                    b"",
                ))))));
            }
        }
        Poll::Pending
    }
}

impl Drop for Streamed {
    fn drop(&mut self) {
        if let Some(command) = &self.command {
            command.kill_unless_ended();
        }
    }
}

fn beat() -> tokio::time::Interval {
    let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + wire::BEAT, wire::BEAT);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    beat
}

fn exec_answer(started: super::Started) -> Result<Response<HostBody>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(STREAM_CHUNKS);
    let (command, pid, running) = (started.command, started.pid, started.running.clone());
    let spawned = std::thread::Builder::new()
        .name("cubby-host-exec".into())
        .spawn(move || {
            let status = started.pump(|chunk| {
                chunk.chunks(wire::MAX_FRAME_BYTES).all(|part| {
                    tx.blocking_send(Bytes::from(wire::frame(wire::FRAME_OUTPUT, part)))
                        .is_ok()
                })
            });
            let status = serde_json::to_vec(&wire::WireStatus::from(&status)).unwrap_or_default();
            let _ = tx.blocking_send(Bytes::from(wire::frame(wire::FRAME_EXIT, &status)));
        });
    if let Err(e) = spawned {
        running.kill_unless_ended();
        return Err(Error::internal(format!(
            "cannot start a reader thread: {e}"
        )));
    }
    let body = Streamed {
        rx,
        beat: Some(beat()),
        command: Some(running),
    };
    let mut resp = Response::new(body.boxed_unsync());
    let headers = resp.headers_mut();
    headers.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(wire::FRAMES_TYPE),
    );
    headers.insert(wire::COMMAND_HEADER, command.into());
    headers.insert(wire::PID_HEADER, pid.into());
    Ok(resp)
}

fn file_answer(file: crate::sandbox::OpenFile) -> Result<Response<HostBody>> {
    let meta = serde_json::to_string(&wire::WireMetadata::from(&file.metadata)).unwrap_or_default();
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(STREAM_CHUNKS);
    let mut reader = file.reader;
    std::thread::Builder::new()
        .name("cubby-host-file".into())
        .spawn(move || {
            let mut buf = vec![0u8; super::OUTPUT_CHUNK_BYTES];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if tx.blocking_send(Bytes::copy_from_slice(&buf[..n])).is_err() {
                            break;
                        }
                    }
                }
            }
        })
        .map_err(|e| Error::internal(format!("cannot start a reader thread: {e}")))?;
    let body = Streamed {
        rx,
        beat: None,
        command: None,
    };
    let mut resp = Response::new(body.boxed_unsync());
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/octet-stream"),
    );
    if let Ok(v) = hyper::header::HeaderValue::from_str(&meta) {
        resp.headers_mut().insert(wire::METADATA_HEADER, v);
    }
    Ok(resp)
}

/// A `/v1` server of its own, until dropped (then every sandbox is
/// destroyed).
pub struct Served {
    addr: std::net::SocketAddr,
    stop: Option<tokio::sync::watch::Sender<()>>,
    api: HostApi,
}

impl Served {
    /// The address it listens on.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// `http://<addr>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop.take();
        self.api.host.destroy_all();
    }
}

static RUNTIME: crate::net::RuntimeSlot = std::sync::OnceLock::new();

/// Serves `api` on `listener` (HTTP/1.1) on a runtime of the process until
/// the returned [`Served`] is dropped.
///
/// # Errors
///
/// `internal` when the runtime or the listener cannot be set up.
pub fn serve(listener: std::net::TcpListener, api: HostApi) -> Result<Served> {
    let rt = crate::net::service_runtime(&RUNTIME, 2, "cubby-host", "the sandbox host")?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::internal(format!("cannot read the listening address: {e}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::internal(format!("cannot set up the listener: {e}")))?;
    let (stop, alive) = tokio::sync::watch::channel(());
    let served_api = api.clone();
    let listener = {
        let _guard = rt.enter();
        tokio::net::TcpListener::from_std(listener)
            .map_err(|e| Error::internal(format!("cannot set up the listener: {e}")))?
    };
    rt.spawn(crate::net::until_closed(alive.clone(), async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tune_accepted(&stream);
            let api = served_api.clone();
            let alive = alive.clone();
            tokio::spawn(crate::net::until_closed(alive, async move {
                let service =
                    hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                        let api = api.clone();
                        async move { Ok::<_, Infallible>(handle(api, req).await) }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            }));
        }
    }));
    Ok(Served {
        addr,
        stop: Some(stop),
        api,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_in_constant_time_and_never_empty() {
        assert!(same(b"secret", b"secret"));
        assert!(!same(b"secreT", b"secret"));
        assert!(!same(b"secret-longer", b"secret"));
        assert!(!same(b"", b"secret"));
        assert!(!same(b"", b""));
    }
}
