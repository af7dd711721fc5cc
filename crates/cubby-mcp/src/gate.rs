//! A bound on the MCP sessions one streamable-HTTP endpoint holds: a
//! request that would open a session takes a slot first, so a burst of
//! `initialize` requests cannot all see room before any session exists
//! (red-team pass 8, L1: the count was read, then the session made after
//! an await, and one burst opened 750 sessions past a cap of 64).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

/// The sessions of one endpoint, and the requests opening one now.
pub(crate) struct SessionGate {
    sessions: Arc<LocalSessionManager>,
    opening: AtomicUsize,
    max: usize,
}

/// A slot held by a request that may open a session: given back when the
/// request is answered (the session, if made, is counted by then) or
/// dropped.
pub(crate) struct Opening(Arc<SessionGate>);

impl Drop for Opening {
    fn drop(&mut self) {
        self.0.opening.fetch_sub(1, Ordering::SeqCst);
    }
}

impl SessionGate {
    /// A gate of at most `max` sessions over `sessions`.
    pub(crate) fn new(sessions: Arc<LocalSessionManager>, max: usize) -> Arc<SessionGate> {
        Arc::new(SessionGate {
            sessions,
            opening: AtomicUsize::new(0),
            max,
        })
    }

    /// Whether `req` opens a session (a `POST` without a session id).
    pub(crate) fn opens(req: &Request) -> bool {
        req.method() == Method::POST && !req.headers().contains_key("mcp-session-id")
    }

    /// A slot for one more session, or `None` at the cap. The slot is
    /// counted before the sessions are: two requests racing each count
    /// the other (a request that ends between the two looks is counted
    /// twice, which errs on the side of the cap).
    pub(crate) async fn admit(self: &Arc<Self>) -> Option<Opening> {
        let before = self.opening.fetch_add(1, Ordering::SeqCst);
        let slot = Opening(Arc::clone(self));
        let open = self.sessions.sessions.read().await.len();
        (open + before < self.max).then_some(slot)
    }

    /// Whether a session is open or being opened (a map being written to
    /// counts as one).
    pub(crate) fn in_use(&self) -> bool {
        self.opening.load(Ordering::SeqCst) > 0
            || self
                .sessions
                .sessions
                .try_read()
                .map_or(true, |s| !s.is_empty())
    }

    /// The most sessions this gate lets be open.
    pub(crate) fn max(&self) -> usize {
        self.max
    }
}

/// A `429` whose JSON body says what to do, in the `/v1` API's shape.
pub(crate) fn too_many(message: String) -> Response {
    let body = serde_json::json!({"kind": "limit", "message": message});
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
