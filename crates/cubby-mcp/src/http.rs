//! MCP over streamable HTTP at `/mcp`.
//!
//! Safety on a network, in the order a request meets it:
//!
//! 1. Off loopback the server refuses to start without a bearer token
//!    (`CUBBY_TOKEN`); with a token, every request must carry
//!    `Authorization: Bearer <token>`, compared in constant time (401).
//!    On loopback without a token, a connection is accepted only from a
//!    socket of the user the server runs as ([`SameUser`]; others are
//!    closed at once): the tools act with the server's rights.
//! 2. `Host` must name an address the server serves and `Origin`, when
//!    present, a loopback or served origin (DNS-rebinding protection; 403).
//! 3. Bodies over [`MAX_BODY_BYTES`] are refused (413), and every body is
//!    counted, while it is read, in one budget of the server's
//!    ([`cubby::host::http::BodyBudget`], shared with `/v1`): a body that
//!    does not fit now is refused (429).
//!
//! Connections are served by cubby's own accept loop
//! ([`cubby::host::http::serve_http1`]): a complete request head within
//! [`cubby::host::http::HEADER_READ_TIMEOUT`] (idle connections are closed
//! after it too), and caps on connections, in all and per peer address, so
//! a client without a token cannot hold the server's descriptors.
//!
//! One route needs none of this: `GET` [`HEALTH_PATH`] answers `200 ok`
//! to anyone who reaches the socket (a kubelet's probe carries no token),
//! and says nothing else.
//!
//! With [`HttpOptions::host`], the sandbox host API (`/v1/…`,
//! `cubby::host::http`) is served on the same listener; it needs the token
//! (the server refuses to start without one) and checks it itself. So do
//! the MCP endpoints bound to one hosted sandbox each,
//! `/v1/sandboxes/{id}/mcp` (`bound.rs`).
//!
//! Each MCP session is its own run; sessions idle for
//! [`SESSION_IDLE`] are closed, which stops their processes. A `DELETE`
//! that ends a session answers 204 (see [`session_end_is_no_content`]).

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use cubby::host::http::{BodyBudget, BodyReservation, ConnectionLimits};
use hyper::body::{Frame, SizeHint};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use crate::gate::{SessionGate, too_many};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::handler::CubbyHandler;
use crate::{McpOptions, ServeError, ToolsetFactory};

/// Largest request body, in bytes.
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;
/// A session with no message for this long is closed.
pub const SESSION_IDLE: Duration = Duration::from_secs(3600);
/// The health check: `200 ok` without a token while the server serves.
pub const HEALTH_PATH: &str = "/healthz";

/// How to serve HTTP.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Bearer token required on every request (required off loopback).
    pub token: Option<String>,
    /// What results and listings carry besides the text.
    pub mcp: McpOptions,
    /// The sandbox host API (`/v1/…`, SPEC §7) served beside `/mcp`, when
    /// on; it checks its own token on every request.
    pub host: Option<cubby::host::http::HostApi>,
    /// The connection caps and the header timeout
    /// ([`ConnectionLimits::for_this_process`] by default).
    pub limits: ConnectionLimits,
}

/// On loopback without a token: whether the client socket of `io` belongs
/// to `uid` (found in the kernel's socket tables, [`crate::peer`]); the
/// others are closed unanswered.
fn same_user_socket(io: &tokio::net::TcpStream, peer: SocketAddr, uid: u32) -> bool {
    let owner = io
        .local_addr()
        .ok()
        .and_then(|local| crate::peer::uid_of_peer(peer, local));
    if owner == Some(uid) {
        return true;
    }
    tracing::warn!(
        "refused a connection from {peer}: its socket belongs to {} (not uid {uid}); \
         set CUBBY_TOKEN to let other users in",
        owner.map_or_else(|| "no user found".to_string(), |u| format!("uid {u}")),
    );
    false
}

/// A plain-text refusal.
fn refusal(status: StatusCode, message: String) -> Response {
    (status, message).into_response()
}

/// Counts an `/mcp` request's body in the server's `budget` while it is
/// read: a declared length (`Content-Length`) over [`MAX_BODY_BYTES`] is
/// refused at once (413), one that does not fit in the budget now too
/// (429); a body without one reserves as it arrives and breaks off when
/// the budget is full.
async fn count_body(budget: BodyBudget, req: Request, next: Next) -> Response {
    let declared = usize::try_from(req.body().size_hint().lower()).unwrap_or(usize::MAX);
    if declared > MAX_BODY_BYTES {
        return refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the request body is {declared} bytes, over the limit of {MAX_BODY_BYTES}; \
                 send less at once"
            ),
        );
    }
    let Some(held) = budget.reserve(declared) else {
        return refusal(StatusCode::TOO_MANY_REQUESTS, budget_full(&budget));
    };
    let req = req.map(|inner| {
        Body::new(Budgeted {
            inner,
            held,
            seen: 0,
            budget,
        })
    });
    next.run(req).await
}

/// What a request whose body does not fit in `budget` is told.
fn budget_full(budget: &BodyBudget) -> String {
    format!(
        "the server holds {} bytes of request bodies at once and is full; retry in a moment",
        budget.total()
    )
}

/// A request body whose bytes are counted in the server's budget until it
/// is dropped (once read).
struct Budgeted {
    inner: Body,
    held: BodyReservation,
    /// Bytes of the body seen so far.
    seen: usize,
    budget: BodyBudget,
}

impl HttpBody for Budgeted {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                this.seen = this.seen.saturating_add(data.len());
                let beyond = this.seen.saturating_sub(this.held.bytes());
                if !this.held.grow(beyond) {
                    return Poll::Ready(Some(Err(axum::Error::new(budget_full(&this.budget)))));
                }
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

fn token_missing(token: Option<&str>) -> bool {
    token.is_none_or(str::is_empty)
}

/// Constant-time comparison of two byte strings.
fn same(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    for (x, y) in a.iter().zip(b.iter().cycle()) {
        diff |= x ^ y;
    }
    diff == 0
}

/// The token a request must carry.
enum Bearer {
    /// The one the server started with.
    Fixed(Arc<String>),
    /// The sandbox host API's, which a bind may change.
    Host(cubby::host::http::HostApi),
}

async fn require_bearer(
    check: Arc<Bearer>,
    req: Request,
    next: Next,
) -> Result<Response, StatusCode> {
    let given = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let accepted = match check.as_ref() {
        Bearer::Fixed(token) => same(given.as_bytes(), token.as_bytes()),
        Bearer::Host(api) => {
            // A pool's key opens `/v1/bind` and nothing else: no MCP
            // session or sandbox made with it survives the bind. One look
            // at the token and the bind state (`admit`).
            use cubby::host::http::Admission;
            let bind = format!(
                "{}{}",
                cubby::remote::wire::PREFIX,
                cubby::remote::wire::BIND_PATH
            );
            match api.admit(given.as_bytes()) {
                Admission::Refused => false,
                Admission::BindOnly if req.uri().path() != bind => {
                    let e = cubby::host::http::awaiting_bind();
                    let body =
                        serde_json::json!({"kind": e.kind().as_str(), "message": e.message()});
                    return Ok((
                        StatusCode::FORBIDDEN,
                        [(axum::http::header::CONTENT_TYPE, "application/json")],
                        body.to_string(),
                    )
                        .into_response());
                }
                Admission::BindOnly | Admission::Full => true,
            }
        }
    };
    if accepted {
        Ok(next.run(req).await)
    } else {
        Err(StatusCode::UNAUTHORIZED)
    }
}

/// Destroys the host's idle sandboxes every so often (a quarter of `idle`,
/// between 1 s and a minute) until `stop`.
async fn expire_idle_sandboxes(
    api: cubby::host::http::HostApi,
    idle: std::time::Duration,
    stop: CancellationToken,
) {
    let period = (idle / 4).clamp(
        std::time::Duration::from_secs(1),
        std::time::Duration::from_secs(60),
    );
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
        let api = api.clone();
        // A destroy waits for its commands to be reaped: off the event loop.
        let _ =
            tokio::task::spawn_blocking(move || api.host().expire_idle(std::time::Instant::now()))
                .await;
    }
}

/// Most MCP sessions open at once at `/mcp` (a new one past it: 429);
/// each holds a run (about 68 KB, more with its processes) until it ends
/// or idles out after [`SESSION_IDLE`] (red-team pass 7, G5).
pub const MAX_MCP_SESSIONS: usize = 1024;

/// rmcp answers the `DELETE` that ends a session with 202 Accepted; the
/// session is closed by then, and SPEC §6 (like the Python SDK, which logs
/// "Session termination failed: 202") wants 200 or 204: 204 No Content, the
/// body is empty. Other answers to a `DELETE` (400, 404, 405) pass as they are.
async fn session_end_is_no_content(req: Request, next: Next) -> Response {
    let delete = req.method() == Method::DELETE;
    let mut response = next.run(req).await;
    if delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    response
}

/// Serves MCP over streamable HTTP until `shutdown` fires.
///
/// # Errors
///
/// A non-loopback address without a token, a port that cannot be bound, or
/// a first toolset that cannot be built.
pub async fn serve_http(
    factory: ToolsetFactory,
    options: HttpOptions,
    shutdown: CancellationToken,
    ready: Option<tokio::sync::oneshot::Sender<SocketAddr>>,
) -> Result<(), ServeError> {
    let loopback = options.listen.ip().is_loopback();
    if !loopback && token_missing(options.token.as_deref()) {
        return Err(ServeError(format!(
            "refusing to listen on {} without a bearer token: set CUBBY_TOKEN, or listen on 127.0.0.1",
            options.listen
        )));
    }
    let shared =
        CubbyHandler::shared(factory, options.mcp).map_err(|e| ServeError(e.to_string()))?;
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|e| ServeError(format!("cannot listen on {}: {e}", options.listen)))?;
    let local = listener
        .local_addr()
        .map_err(|e| ServeError(format!("cannot read the listening address: {e}")))?;
    let port = local.port();
    let mut hosts = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
        "[::1]".to_string(),
    ];
    if !loopback {
        hosts.push(local.ip().to_string());
    }
    let mut origins = vec![
        format!("http://localhost:{port}"),
        format!("http://127.0.0.1:{port}"),
        format!("http://[::1]:{port}"),
    ];
    if !loopback {
        origins.push(format!("http://{local}"));
        origins.push(format!("https://{local}"));
    }
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(SESSION_IDLE);
    let sessions = Arc::new(sessions);
    let gate = SessionGate::new(Arc::clone(&sessions), MAX_MCP_SESSIONS);
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .enforce_origin_validation()
        .with_max_request_body_bytes(MAX_BODY_BYTES)
        .with_cancellation_token(shutdown.child_token());
    let bound_config = config.clone();
    let factory_shared = Arc::clone(&shared);
    let service = StreamableHttpService::new(
        move || Ok(CubbyHandler::new(Arc::clone(&factory_shared), false)),
        sessions,
        config,
    );
    // One budget of body bytes for the server: the host API's when on.
    let budget = options
        .host
        .as_ref()
        .map_or_else(BodyBudget::default, |api| api.body_budget().clone());
    let mut app = Router::new()
        .nest_service("/mcp", service)
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            let gate = Arc::clone(&gate);
            async move {
                let _slot = if SessionGate::opens(&req) {
                    match gate.admit().await {
                        Some(slot) => Some(slot),
                        None => {
                            return too_many(format!(
                                "this server has {} MCP sessions open, its limit; end one (HTTP \
                                 DELETE with its Mcp-Session-Id) first",
                                gate.max()
                            ));
                        }
                    }
                } else {
                    None
                };
                next.run(req).await
            }
        }));
    if let Some(api) = options.host.clone() {
        if token_missing(options.token.as_deref()) {
            return Err(ServeError(
                "the sandbox host API (/v1) needs a bearer token: set CUBBY_TOKEN or --token-file"
                    .into(),
            ));
        }
        // MCP sessions bound to one hosted sandbox each.
        let bound = crate::bound::Bound::new(api.clone(), bound_config, options.mcp, SESSION_IDLE);
        app = app.route(
            "/v1/sandboxes/{id}/mcp",
            axum::routing::any(
                move |axum::extract::Path(id): axum::extract::Path<String>, req: Request| {
                    let bound = Arc::clone(&bound);
                    async move { bound.handle(id, req).await }
                },
            ),
        );
    }
    // The MCP routes (/mcp and the bound sessions) count their bodies in the
    // budget and end sessions with 204; the host API's routes, added after,
    // count their own bodies as they read them.
    app = app
        .layer(middleware::from_fn(session_end_is_no_content))
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            count_body(budget.clone(), req, next)
        }));
    if let Some(api) = options.host.clone() {
        if let Some(idle) = api.host().idle() {
            tokio::spawn(expire_idle_sandboxes(
                api.clone(),
                idle,
                shutdown.child_token(),
            ));
        }
        app = app.route(
            "/v1/{*rest}",
            axum::routing::any(move |req: Request| {
                let api = api.clone();
                async move {
                    cubby::host::http::handle(api, req)
                        .await
                        .map(axum::body::Body::new)
                }
            }),
        );
    }
    let token = options.token.filter(|t| !t.is_empty());
    let same_user = token.is_none();
    if let Some(token) = token {
        // With the host API, its token is the one in force: a bindable API
        // (`serve --host-bind`) exchanges it once, for /mcp too.
        let check = match options.host.clone() {
            Some(api) => Bearer::Host(api),
            None => Bearer::Fixed(Arc::new(token)),
        };
        let check = Arc::new(check);
        app = app.layer(middleware::from_fn(move |req: Request, next: Next| {
            require_bearer(Arc::clone(&check), req, next)
        }));
    }
    // Added after the token's layer, which therefore does not cover it.
    app = app.route(HEALTH_PATH, axum::routing::get(|| async { "ok\n" }));
    tracing::info!("listening on http://{local}/mcp");
    if let Some(ready) = ready {
        let _ = ready.send(local);
    }
    // Without a token (loopback only, above), the socket's owner decides.
    let uid = same_user.then(|| rustix::process::geteuid().as_raw());
    cubby::host::http::serve_http1(
        listener,
        options.limits,
        move |io, peer| uid.is_none_or(|uid| same_user_socket(io, peer, uid)),
        cubby::host::http::tune_accepted,
        hyper_util::service::TowerToHyperService::new(app),
        shutdown.cancelled_owned(),
    )
    .await;
    // Every run ends before the server returns: the sessions still open,
    // the server-wide run, and the ends of sessions closed before.
    let ending = Arc::clone(&shared);
    let _ = tokio::task::spawn_blocking(move || ending.end_runs()).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn budgeted(content: &'static [u8], budget: &BodyBudget) -> Body {
        Body::new(Budgeted {
            inner: Body::from(content),
            held: budget.reserve(0).unwrap(),
            seen: 0,
            budget: budget.clone(),
        })
    }

    #[test]
    fn an_mcp_body_is_counted_in_the_budget_while_it_is_read() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let budget = BodyBudget::new(16);
        let read = rt.block_on(axum::body::to_bytes(budgeted(b"0123456789", &budget), 100));
        assert_eq!(read.unwrap().as_ref(), b"0123456789");
        assert_eq!(budget.available(), 16);
        let other = budget.reserve(10).unwrap();
        let read = rt.block_on(axum::body::to_bytes(budgeted(b"0123456789", &budget), 100));
        let e = read.unwrap_err().to_string();
        assert!(e.contains("retry in a moment"), "{e}");
        assert_eq!(budget.available(), 6);
        drop(other);
        assert_eq!(budget.available(), 16);
    }

    #[test]
    fn constant_time_comparison() {
        assert!(same(b"secret", b"secret"));
        assert!(!same(b"secret", b"secreT"));
        assert!(!same(b"secret", b"secret-longer"));
        assert!(!same(b"", b"x"));
        assert!(same(b"", b""));
    }
}
