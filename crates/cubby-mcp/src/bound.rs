//! MCP sessions bound to one hosted sandbox each (`serve --host`, SPEC §7):
//! `/v1/sandboxes/{id}/mcp` is a streamable-HTTP MCP endpoint whose
//! sessions each get a run of their own (a toolset) on sandbox `id`, under
//! the host's policy: the tools act in that sandbox's workspace and its
//! commands run there, as `/mcp`'s act in the served root.
//!
//! It takes the host's token (the `/v1` bearer check covers it), the same
//! `Host`/`Origin` checks as `/mcp`, and nothing of a server that waits for
//! its bind. Each sandbox's endpoint is made at its first request and
//! ended with the sandbox: a destroy ends every run bound to it (their
//! processes killed) before the sandbox's own commands and workspace go,
//! and closes its sessions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cubby::host::http::HostApi;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::McpOptions;
use crate::gate::{SessionGate, too_many};
use crate::handler::{CubbyHandler, Shared};

/// Most MCP sessions open at once on one sandbox's endpoint (a new one
/// past it: 429); each holds a run until it ends or idles out (red-team
/// pass 7, G5: ~68 KB a session, unbounded before).
pub const MAX_SESSIONS_PER_SANDBOX: usize = 64;

/// The MCP endpoint of one hosted sandbox.
struct Endpoint {
    service: StreamableHttpService<CubbyHandler, LocalSessionManager>,
    /// The service's sessions, at most [`MAX_SESSIONS_PER_SANDBOX`].
    gate: Arc<SessionGate>,
    shared: Arc<Shared>,
    /// Closes the endpoint's sessions.
    closed: CancellationToken,
}

/// The endpoints of a host's sandboxes.
pub(crate) struct Bound {
    api: HostApi,
    config: StreamableHttpServerConfig,
    options: McpOptions,
    session_idle: std::time::Duration,
    endpoints: Mutex<HashMap<String, Arc<Endpoint>>>,
}

impl Bound {
    /// Endpoints over `api`'s host, their sessions configured as `config`
    /// (its cancellation token closes them all), idle sessions closed
    /// after `session_idle`. A destroy on the host ends its sandbox's.
    pub(crate) fn new(
        api: HostApi,
        config: StreamableHttpServerConfig,
        options: McpOptions,
        session_idle: std::time::Duration,
    ) -> Arc<Bound> {
        let bound = Arc::new(Bound {
            api,
            config,
            options,
            session_idle,
            endpoints: Mutex::new(HashMap::new()),
        });
        let weak = Arc::downgrade(&bound);
        bound.api.host().on_destroy(Arc::new(move |id: &str| {
            if let Some(bound) = weak.upgrade() {
                bound.end(id);
            }
        }));
        // A sandbox with a session open is in use (the session's commands
        // and processes are its run's, not the host's to see): it does not
        // expire idle while one is (sessions close after `session_idle`).
        let weak = Arc::downgrade(&bound);
        bound.api.host().on_busy(Arc::new(move |id: &str| {
            weak.upgrade().is_some_and(|bound| {
                bound
                    .endpoints
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .get(id)
                    .is_some_and(|e| e.gate.in_use())
            })
        }));
        bound
    }

    /// Ends sandbox `id`'s endpoint: its runs (blocking, as a destroy is),
    /// then its sessions.
    fn end(&self, id: &str) {
        let endpoint = self
            .endpoints
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(id);
        if let Some(endpoint) = endpoint {
            endpoint.closed.cancel();
            endpoint.shared.end_runs();
        }
    }

    /// The endpoint of sandbox `id`, made at its first request (the first
    /// run is built then, off the event loop).
    async fn endpoint(self: &Arc<Self>, id: &str) -> Result<Arc<Endpoint>, cubby::Error> {
        if let Some(found) = self
            .endpoints
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(id)
        {
            return Ok(Arc::clone(found));
        }
        let factory = self.api.host().factory(id)?;
        let options = self.options;
        let shared = tokio::task::spawn_blocking(move || CubbyHandler::shared(factory, options))
            .await
            .map_err(|e| {
                cubby::Error::new(
                    cubby::ErrorKind::Internal,
                    format!("a host task failed: {e}"),
                )
            })??;
        let closed = self.config.cancellation_token.child_token();
        let mut sessions = LocalSessionManager::default();
        sessions.session_config.keep_alive = Some(self.session_idle);
        let sessions = Arc::new(sessions);
        let config = self.config.clone().with_cancellation_token(closed.clone());
        let for_sessions = Arc::clone(&shared);
        let service = StreamableHttpService::new(
            move || Ok(CubbyHandler::new(Arc::clone(&for_sessions), false)),
            Arc::clone(&sessions),
            config,
        );
        let made = Arc::new(Endpoint {
            service,
            gate: SessionGate::new(sessions, MAX_SESSIONS_PER_SANDBOX),
            shared,
            closed,
        });
        let mut endpoints = self
            .endpoints
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Made at once by two first requests: one is kept. A destroy
        // meanwhile: the sandbox is gone from the host, its run refused.
        if let Some(first) = endpoints.get(id) {
            let first = Arc::clone(first);
            drop(endpoints);
            made.shared.end_runs();
            return Ok(first);
        }
        if self.api.host().factory(id).is_err() {
            drop(endpoints);
            made.shared.end_runs();
            return Err(cubby::Error::new(
                cubby::ErrorKind::NotFound,
                format!("no sandbox `{id}` on this host (destroyed meanwhile)"),
            ));
        }
        endpoints.insert(id.to_string(), Arc::clone(&made));
        Ok(made)
    }

    /// Answers one request to `/v1/sandboxes/{id}/mcp` (the token already
    /// checked).
    pub(crate) async fn handle(self: Arc<Self>, id: String, req: Request) -> Response {
        if self.api.awaits_bind() {
            return refusal(StatusCode::FORBIDDEN, &cubby::host::http::awaiting_bind());
        }
        match self.endpoint(&id).await {
            Ok(endpoint) => {
                // A session's requests keep the sandbox from expiring idle.
                self.api.host().touch(&id);
                // A request that opens a session holds a slot until it is
                // answered.
                let _slot = if SessionGate::opens(&req) {
                    match endpoint.gate.admit().await {
                        Some(slot) => Some(slot),
                        None => {
                            return too_many(format!(
                                "sandbox `{id}` has {} MCP sessions open, its limit; end one \
                                 (HTTP DELETE with its Mcp-Session-Id) first",
                                endpoint.gate.max()
                            ));
                        }
                    }
                } else {
                    None
                };
                endpoint
                    .service
                    .handle(req)
                    .await
                    .map(axum::body::Body::new)
                    .into_response()
            }
            Err(e) => {
                let status = if e.kind() == cubby::ErrorKind::NotFound {
                    StatusCode::NOT_FOUND
                } else {
                    StatusCode::INTERNAL_SERVER_ERROR
                };
                refusal(status, &e)
            }
        }
    }
}

/// An error answer in the `/v1` API's shape.
fn refusal(status: StatusCode, e: &cubby::Error) -> Response {
    let body = serde_json::json!({"kind": e.kind().as_str(), "message": e.message()});
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
