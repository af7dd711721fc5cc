//! The `/v1` API of a [`Host`] over HTTP: one handler ([`handle`]) that the
//! MCP server mounts beside `/mcp`, and [`serve`], the same handler on a
//! listener of its own (for library users and tests).
//!
//! Every request needs `Authorization: Bearer <token>`, compared in constant
//! time (401 otherwise, before anything else is read). Bodies are capped at
//! [`MAX_BODY_BYTES`], a file written at the sandbox's own limit
//! (`limits.write_file.max_bytes`; a longer `Content-Length` is refused
//! before any of the body is read, 413), and every body is counted in the
//! server's [`BodyBudget`] while it is held (full: 429). A command takes one
//! stdin write at a time (a second while one waits: 409), written on a
//! thread of its own, so a command that never reads holds no thread the
//! file calls need. The endpoints (all under `/v1`; `{p}` is a workspace
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
//! | `POST /sandboxes/{id}/commands/{n}/stdin` | write the body → `{"written": N}` (409 while another waits) |
//! | `DELETE /sandboxes/{id}/commands/{n}/stdin` | close stdin → 204 |
//! | `GET /sandboxes/{id}/fs/metadata?path=` | metadata |
//! | `GET /sandboxes/{id}/fs/file?path=` | content (streamed), metadata in a header |
//! | `PUT /sandboxes/{id}/fs/file?path=` | atomic write of the body → 204 |
//! | `GET /sandboxes/{id}/fs/dir?path=&max=` | listing |
//! | `POST /sandboxes/{id}/fs/mkdir?path=` · `/fs/rmdir?path=` | make · remove when empty |
//! | `GET /sandboxes/{id}/changes` | the `changes` tool's result |
//! | `POST /sandboxes/{id}/tools/{name}` | any tool of the sandbox's toolset |
//! | `/sandboxes/{id}/mcp` | MCP sessions bound to the sandbox (served by `cubby-mcp`) |
//!
//! A command's answer ends with its exit frame; closing it earlier kills
//! the command's tree.
//!
//! [`serve`] and `cubby serve` run the same accept loop ([`serve_http1`],
//! `crate::net`'s): a header read timeout, caps on connections in all and
//! per peer, and a graceful end.
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

use std::collections::HashSet;
use std::convert::Infallible;
use std::io::Read;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame};
use hyper::{Method, Request, Response, StatusCode};

use super::{Host, Running};
use crate::error::{Error, ErrorKind, Result};
use crate::remote::wire;

pub use crate::net::{
    BODY_GRACE, BODY_STALL_TIMEOUT, BodyBudget, BodyPace, BodyReservation, CONNECTION_FD_SHARE,
    ConnectionLimits, HEADER_READ_TIMEOUT, MAX_BODY_BUDGET_BYTES, MAX_CONNECTIONS,
    MAX_CONNECTIONS_PER_PEER, MIN_BODY_BYTES_PER_SEC, PacedBody, serve_http1,
};

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
    /// The bytes of request bodies held at once (shared with `/mcp` on
    /// the same server).
    budget: BodyBudget,
    /// Commands with a stdin write waiting (sandbox id, command number).
    stdin_pending: Arc<Mutex<HashSet<(String, u64)>>>,
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
            budget: BodyBudget::default(),
            stdin_pending: Arc::default(),
        })
    }

    /// The budget of request body bytes this API counts its bodies in
    /// ([`MAX_BODY_BUDGET_BYTES`]); a server serving other routes beside it
    /// counts theirs in the same.
    pub fn body_budget(&self) -> &BodyBudget {
        &self.budget
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

    /// What a request carrying `given` may do, the token and the bind
    /// state read under one lock: with two looks, a pool-key request let
    /// in just before the bind and looked at again just after it would
    /// reach every route (red-team pass 7).
    pub fn admit(&self, given: &[u8]) -> Admission {
        let auth = crate::sync::lock(&self.auth);
        if !same(given, &auth.token) {
            Admission::Refused
        } else if auth.bindable && !auth.bound {
            Admission::BindOnly
        } else {
            Admission::Full
        }
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

/// What [`HostApi::admit`] lets a request do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Not the token in force: 401.
    Refused,
    /// The pool's key of a server waiting for its bind: `POST /v1/bind`
    /// alone.
    BindOnly,
    /// Every route.
    Full,
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

/// Runs blocking work that may wait long (a stdin write) on a thread of
/// its own, not tokio's blocking pool, where it would hold up the file
/// calls of every sandbox.
async fn on_own_thread<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let _ = tx.send(work());
        })
        .map_err(|e| Error::internal(format!("cannot start a thread: {e}")))?;
    rx.await
        .unwrap_or_else(|_| Err(Error::internal("a host thread failed")))
}

/// A body over `limit` bytes (`what` names the limit).
fn too_large(size: impl std::fmt::Display, limit: usize, what: &str) -> Error {
    Error::new(
        ErrorKind::TooLarge,
        format!(
            "the request body is {size} bytes, over {what} of {limit} bytes; send less at once"
        ),
    )
}

/// Reads a request body whole: refused before any byte is read when its
/// declared length (`Content-Length`) is over `limit` (413) or does not fit
/// in `budget` now (429); counted in `budget` as it arrives, until the
/// returned reservation is dropped (after the request's work). `what`
/// names the limit in messages.
async fn read_body<B>(
    body: B,
    limit: usize,
    what: &str,
    budget: &BodyBudget,
) -> Result<(Bytes, BodyReservation)>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error:
        std::fmt::Display + Send + Sync + 'static + Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let declared = usize::try_from(body.size_hint().lower()).unwrap_or(usize::MAX);
    if declared > limit {
        return Err(too_large(declared, limit, what));
    }
    let full = |wanted: usize| {
        if wanted > budget.total() {
            too_large(
                format!("at least {wanted}"),
                budget.total(),
                "the server's budget of request bytes",
            )
        } else {
            Error::new(
                ErrorKind::Limit,
                format!(
                    "the server holds {} bytes of request bodies at once and is full; \
                     retry in a moment",
                    budget.total()
                ),
            )
        }
    };
    let mut held = budget.reserve(declared).ok_or_else(|| full(declared))?;
    let mut collected = BytesMut::with_capacity(declared);
    let mut body = std::pin::pin!(body);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            Error::new(
                ErrorKind::Network,
                format!("the request body broke off: {e}"),
            )
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let size = collected.len().saturating_add(data.len());
        if size > limit {
            return Err(too_large(format!("over {limit}"), limit, what));
        }
        if size > held.bytes() && !held.grow(size - held.bytes()) {
            return Err(full(size));
        }
        collected.extend_from_slice(&data);
    }
    Ok((collected.freeze(), held))
}

/// Largest tar body of a create, as sent: the archive's own cap
/// ([`super::unpack::MAX_ARCHIVE_BYTES`]). Streamed, never held whole.
pub const MAX_TAR_BODY_BYTES: u64 = super::unpack::MAX_ARCHIVE_BYTES;
/// Chunks of a tar body in flight between the connection and the unpack.
const TAR_CHUNKS: usize = 8;

/// A sandbox whose workspace is unpacked from the request's tar body as
/// it arrives: the body is handed to the unpack chunk by chunk (at most
/// [`TAR_CHUNKS`] held, counted in `budget`), never read whole, so a
/// workspace is not bounded by [`MAX_BODY_BYTES`] and the server's memory
/// does not grow with it. The unpack runs on a thread of its own (it waits
/// on the client's pace, which [`PacedBody`] bounds) and reads no further
/// than the archive's end; a body that breaks off or passes
/// [`MAX_TAR_BODY_BYTES`] fails the create (the workspace is removed).
async fn create_from_tar_body<B>(
    host: Arc<Host>,
    body: B,
    budget: &BodyBudget,
) -> Result<wire::Created>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: std::fmt::Display,
{
    let declared = body.size_hint().lower();
    if declared > MAX_TAR_BODY_BYTES {
        return Err(tar_too_large(declared));
    }
    let (tx, rx) = tokio::sync::mpsc::channel(TAR_CHUNKS);
    let created = on_own_thread("cubby-host-unpack", move || {
        host.create_from_tar(TarBodyReader {
            rx,
            chunk: Bytes::new(),
            _held: None,
        })
    });
    let pump = async move {
        let mut seen: u64 = 0;
        let mut body = std::pin::pin!(body);
        while let Some(frame) = body.frame().await {
            let data = match frame {
                Ok(frame) => match frame.into_data() {
                    Ok(data) => data,
                    Err(_) => continue,
                },
                Err(e) => {
                    let message = format!("the request body broke off: {e}");
                    let _ = tx.send(Err(std::io::Error::other(message.clone()))).await;
                    return Err(Error::new(ErrorKind::Network, message));
                }
            };
            seen = seen.saturating_add(data.len() as u64);
            if seen > MAX_TAR_BODY_BYTES {
                let _ = tx
                    .send(Err(std::io::Error::other("the tar body is too large")))
                    .await;
                return Err(tar_too_large(seen));
            }
            // Held while in flight: a chunk at a time, as the unpack takes it.
            let Some(held) = budget.reserve(data.len()) else {
                let _ = tx
                    .send(Err(std::io::Error::other(
                        "the server's body budget is full",
                    )))
                    .await;
                return Err(Error::new(
                    ErrorKind::Limit,
                    "the server holds as many request bytes as it may; retry in a moment",
                ));
            };
            if tx.send(Ok((data, held))).await.is_err() {
                // The unpack is done (the archive ended) or failed: the
                // rest of the body is not read.
                break;
            }
        }
        Ok(())
    };
    let (pumped, created) = tokio::join!(pump, created);
    pumped?;
    created
}

fn tar_too_large(size: u64) -> Error {
    Error::new(
        ErrorKind::TooLarge,
        format!(
            "the tar body is {size} bytes, over this host's limit of {MAX_TAR_BODY_BYTES}; \
             send a smaller workspace (or gzip it)"
        ),
    )
}

/// The tar body of a create as the unpack reads it (see
/// [`create_from_tar_body`]): each chunk's budget reservation is dropped
/// when the next one is taken.
struct TarBodyReader {
    rx: tokio::sync::mpsc::Receiver<std::io::Result<(Bytes, BodyReservation)>>,
    chunk: Bytes,
    /// `chunk`'s reservation.
    _held: Option<BodyReservation>,
}

impl Read for TarBodyReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use bytes::Buf;
        while self.chunk.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok((chunk, held))) => {
                    self.chunk = chunk;
                    self._held = Some(held);
                }
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk[..n]);
        self.chunk.advance(n);
        Ok(n)
    }
}

/// The limit of a body that is not a file.
const BODY_LIMIT: &str = "the limit of a request";

/// A command's pending stdin write, until dropped.
struct StdinSlot {
    pending: Arc<Mutex<HashSet<(String, u64)>>>,
    key: (String, u64),
}

impl StdinSlot {
    /// The slot of command `n` of sandbox `id`, unless a write holds it.
    fn take(pending: &Arc<Mutex<HashSet<(String, u64)>>>, id: &str, n: u64) -> Option<StdinSlot> {
        let key = (id.to_string(), n);
        crate::sync::lock(pending)
            .insert(key.clone())
            .then(|| StdinSlot {
                pending: pending.clone(),
                key,
            })
    }
}

impl Drop for StdinSlot {
    fn drop(&mut self) {
        crate::sync::lock(&self.pending).remove(&self.key);
    }
}

/// The answer to a stdin write while another to the same command waits.
fn stdin_busy(command: u64) -> Response<HostBody> {
    json(
        StatusCode::CONFLICT,
        &wire::WireError {
            kind: ErrorKind::Limit.as_str().into(),
            message: format!(
                "command {command} has a stdin write waiting already (up to {} s for the \
                 command to read); send the next one after its answer",
                super::STDIN_WAIT.as_secs()
            ),
        },
    )
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
    let admission = api.admit(given);
    if admission == Admission::Refused {
        return unauthorized();
    }
    if req.uri().path() == format!("{}{}", wire::PREFIX, wire::BIND_PATH)
        && req.method() == Method::POST
    {
        return api.bind();
    }
    if admission == Admission::BindOnly {
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
    let budget = &api.budget;
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
            if is_tar(&parts.headers) {
                let created = create_from_tar_body(host, body, budget).await?;
                return Ok(json(StatusCode::CREATED, &created));
            }
            let (body, _held) = read_body(body, MAX_BODY_BYTES, BODY_LIMIT, budget).await?;
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
            let (body, _held) = read_body(body, MAX_BODY_BYTES, BODY_LIMIT, budget).await?;
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
            let Some(slot) = StdinSlot::take(&api.stdin_pending, &id, n) else {
                return Ok(stdin_busy(n));
            };
            let (input, held) = read_body(body, MAX_BODY_BYTES, BODY_LIMIT, budget).await?;
            let written = on_own_thread("cubby-host-stdin", move || {
                let written = host.write_stdin(&id, n, &input);
                drop((slot, held));
                written
            })
            .await?;
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
            let limit = usize::try_from(host.write_limit(&id)?).unwrap_or(usize::MAX);
            let (content, held) = read_body(
                body,
                limit,
                "this host's limit of a file (limits.write_file.max_bytes)",
                budget,
            )
            .await?;
            blocking(move || {
                let written = host.write(&id, &p, &content);
                drop(held);
                written
            })
            .await?;
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
            let (body, _held) = read_body(body, MAX_BODY_BYTES, BODY_LIMIT, budget).await?;
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
/// the returned [`Served`] is dropped, within the standard
/// [`ConnectionLimits::for_this_process`].
///
/// # Errors
///
/// `internal` when the runtime or the listener cannot be set up.
pub fn serve(listener: std::net::TcpListener, api: HostApi) -> Result<Served> {
    serve_within(listener, api, ConnectionLimits::for_this_process())
}

/// [`serve`] within `limits` (the connection caps and the header timeout).
/// When the [`Served`] is dropped, the server stops accepting and each
/// connection finishes the request it is answering.
///
/// # Errors
///
/// `internal` when the runtime or the listener cannot be set up.
pub fn serve_within(
    listener: std::net::TcpListener,
    api: HostApi,
    limits: ConnectionLimits,
) -> Result<Served> {
    let rt = crate::net::service_runtime(&RUNTIME, 2, "cubby-host", "the sandbox host")?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::internal(format!("cannot read the listening address: {e}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::internal(format!("cannot set up the listener: {e}")))?;
    let (stop, mut alive) = tokio::sync::watch::channel(());
    let served_api = api.clone();
    let listener = {
        let _guard = rt.enter();
        tokio::net::TcpListener::from_std(listener)
            .map_err(|e| Error::internal(format!("cannot set up the listener: {e}")))?
    };
    let service = hyper::service::service_fn(move |req: Request<PacedBody>| {
        let api = served_api.clone();
        async move { Ok::<_, Infallible>(handle(api, req).await) }
    });
    rt.spawn(serve_http1(
        listener,
        limits,
        |_, _| true,
        tune_accepted,
        service,
        async move { while alive.changed().await.is_ok() {} },
    ));
    Ok(Served {
        addr,
        stop: Some(stop),
        api,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body of chunks, its length not told (as a chunked request's).
    struct Chunks(std::collections::VecDeque<Bytes>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<std::result::Result<Frame<Bytes>, std::io::Error>>> {
            Poll::Ready(self.0.pop_front().map(|chunk| Ok(Frame::data(chunk))))
        }
    }

    fn chunks(n: usize, size: usize) -> Chunks {
        Chunks((0..n).map(|_| Bytes::from(vec![b'x'; size])).collect())
    }

    /// A body that declares its length and must not be read.
    struct Declared(u64);

    impl Body for Declared {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<std::result::Result<Frame<Bytes>, std::io::Error>>> {
            panic!("a body refused by its declared length was read")
        }

        fn size_hint(&self) -> hyper::body::SizeHint {
            hyper::body::SizeHint::with_exact(self.0)
        }
    }

    fn run<T>(fut: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(fut)
    }

    #[test]
    fn bodies_are_read_within_their_limit_and_the_budget() {
        let budget = BodyBudget::new(100);
        // Within both: held in the budget until the reservation goes.
        let (bytes, held) = run(read_body(chunks(3, 10), 100, BODY_LIMIT, &budget)).unwrap();
        assert_eq!(bytes.len(), 30);
        assert_eq!(budget.available(), 70);
        drop(held);
        assert_eq!(budget.available(), 100);
        // A length told over the limit: refused unread.
        let e = run(read_body(Declared(101), 100, "the file limit", &budget)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TooLarge);
        assert!(e.to_string().contains("the file limit of 100 bytes"), "{e}");
        // A length told that does not fit in the budget now: refused unread.
        let other = budget.reserve(50).unwrap();
        let e = run(read_body(Declared(60), 100, BODY_LIMIT, &budget)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Limit);
        assert!(e.to_string().contains("retry in a moment"), "{e}");
        // Untold lengths are counted as they come: over the limit, over the
        // budget; what they held is free again.
        let e = run(read_body(chunks(3, 10), 25, BODY_LIMIT, &budget)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TooLarge);
        let e = run(read_body(chunks(6, 10), 100, BODY_LIMIT, &budget)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Limit);
        assert_eq!(budget.available(), 50);
        drop(other);
        // Larger than the whole budget: too large, not "retry".
        let e = run(read_body(Declared(101), 200, BODY_LIMIT, &budget)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TooLarge);
    }

    #[test]
    fn one_stdin_write_waits_per_command() {
        let pending = Arc::default();
        let first = StdinSlot::take(&pending, "a", 1).unwrap();
        assert!(StdinSlot::take(&pending, "a", 1).is_none());
        let other = StdinSlot::take(&pending, "a", 2).unwrap();
        let elsewhere = StdinSlot::take(&pending, "b", 1).unwrap();
        drop(first);
        assert!(StdinSlot::take(&pending, "a", 1).is_some());
        drop((other, elsewhere));
        assert!(crate::sync::lock(&pending).is_empty());
    }

    #[test]
    fn tokens_compare_in_constant_time_and_never_empty() {
        assert!(same(b"secret", b"secret"));
        assert!(!same(b"secreT", b"secret"));
        assert!(!same(b"secret-longer", b"secret"));
        assert!(!same(b"", b"secret"));
        assert!(!same(b"", b""));
    }
}
