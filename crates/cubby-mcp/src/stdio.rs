//! MCP over stdio, behind a framing guard.
//!
//! rmcp drops a line that is not JSON without answering, and ends the
//! session when a notification or response arrives before `initialize`. The
//! guard sits between stdin and rmcp and answers what rmcp would not:
//!
//! 1. A line longer than [`MAX_MESSAGE_BYTES`] is skipped to its end (never
//!    buffered) and answered with `-32600`.
//! 2. A line that is not JSON is answered with `-32700`; one that is JSON
//!    but not an object with `jsonrpc: "2.0"` with `-32600` (batches too:
//!    the protocol has none since 2025-06-18).
//! 3. Before the session starts, notifications and responses are dropped.
//! 4. Everything else goes to rmcp unchanged, which answers unknown methods
//!    with `-32601` and keeps serving.
//!
//! One writer task puts rmcp's lines and the guard's answers on stdout, a
//! whole line at a time.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use rmcp::ServiceExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::handler::CubbyHandler;
use crate::{ServeError, ToolsetFactory};

/// Largest message accepted on stdio, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
/// Longest wait for rmcp to answer a request that opens the session.
const OPENING_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// Capacity of the in-process pipes between the guard and rmcp.
const PIPE_BYTES: usize = 1024 * 1024;

fn error_line(code: i64, message: &str, id: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

/// What to do with one input line.
#[derive(Debug, PartialEq)]
enum Verdict {
    Forward,
    /// Forward a `tools/call` request of a started session.
    ForwardCall,
    /// Forward, and this request may start the session: its id.
    ForwardOpening(String),
    Drop,
    Answer(String),
}

/// Whether the session has started, as seen from both tasks: the guard
/// records the ids of requests that may start it, and the writer marks it
/// started when rmcp answers one of them with a result.
#[derive(Default)]
struct Lifecycle {
    started: std::sync::atomic::AtomicBool,
    opening: std::sync::Mutex<std::collections::HashSet<String>>,
    answered: tokio::sync::Notify,
}

impl Lifecycle {
    fn started(&self) -> bool {
        self.started.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// True while an opening request waits for rmcp's answer.
    fn pending(&self) -> bool {
        !self.started() && self.opening.lock().is_ok_and(|ids| !ids.is_empty())
    }

    /// Waits (bounded) until no opening request is pending, so that a
    /// client's `notifications/initialized`, sent right behind its
    /// `initialize`, is judged after the answer.
    async fn settle(&self) {
        let deadline = tokio::time::Instant::now() + OPENING_WAIT;
        while self.pending() {
            let notified = self.answered.notified();
            if !self.pending() {
                break;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                break;
            }
        }
    }

    fn expect(&self, id: String) {
        if let Ok(mut ids) = self.opening.lock() {
            ids.insert(id);
        }
    }

    /// Looks at one line rmcp wrote.
    fn observe(&self, line: &[u8]) {
        if self.started() {
            return;
        }
        let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        let id = map.get("id").map(Value::to_string).unwrap_or_default();
        let was_opening = self.opening.lock().is_ok_and(|mut ids| ids.remove(&id));
        if was_opening {
            if map.contains_key("result") {
                self.started
                    .store(true, std::sync::atomic::Ordering::SeqCst);
            }
            self.answered.notify_waiters();
        }
    }
}

fn judge(line: &[u8], started: bool) -> Verdict {
    let trimmed = line.trim_ascii();
    if trimmed.is_empty() {
        return Verdict::Drop;
    }
    let value: Value = match serde_json::from_slice(trimmed) {
        Ok(v) => v,
        Err(e) => {
            return Verdict::Answer(error_line(
                -32700,
                &format!("parse error: {e}"),
                Value::Null,
            ));
        }
    };
    let Value::Object(map) = &value else {
        return Verdict::Answer(error_line(
            -32600,
            "invalid request: send one JSON-RPC object per line (batches are not supported)",
            Value::Null,
        ));
    };
    let id = map.get("id").cloned().unwrap_or(Value::Null);
    if map.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Verdict::Answer(error_line(
            -32600,
            "invalid request: `jsonrpc` must be \"2.0\"",
            id,
        ));
    }
    let method = map.get("method").and_then(Value::as_str);
    let is_request = method.is_some() && map.contains_key("id");
    if let Some(id) = map.get("id")
        && !(id.is_string() || id.is_i64() || id.is_u64())
    {
        return Verdict::Answer(error_line(
            -32600,
            "invalid request: `id` must be a string or an integer",
            Value::Null,
        ));
    }
    if method.is_some_and(|m| !m.is_empty())
        && map
            .get("params")
            .is_some_and(|p| !p.is_object() && !p.is_null())
    {
        return match is_request {
            true => Verdict::Answer(error_line(
                -32602,
                "invalid params: `params` must be an object",
                id,
            )),
            false => Verdict::Drop,
        };
    }
    if !started {
        if !is_request {
            return Verdict::Drop;
        }
        let has_meta_version = map
            .get("params")
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"))
            .is_some();
        if method == Some("initialize") || has_meta_version {
            return Verdict::ForwardOpening(id.to_string());
        }
    }
    if is_request && method == Some("tools/call") {
        return Verdict::ForwardCall;
    }
    Verdict::Forward
}

/// Reads one line of at most `max` bytes; a longer line is consumed to its
/// end and reported as `Err(len)`. `Ok(None)` at end of input.
async fn read_line<R: AsyncBufReadExt + Unpin>(
    r: &mut R,
    max: usize,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<Result<(), usize>>> {
    buf.clear();
    let mut total = 0usize;
    let mut overflow = false;
    loop {
        let chunk = r.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(if total == 0 {
                None
            } else if overflow {
                Some(Err(total))
            } else {
                Some(Ok(()))
            });
        }
        let (take, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        total += take;
        if !overflow {
            if buf.len() + take > max {
                overflow = true;
                buf.clear();
            } else {
                buf.extend_from_slice(&chunk[..take]);
            }
        }
        r.consume(take);
        if done {
            return Ok(Some(if overflow { Err(total) } else { Ok(()) }));
        }
    }
}

/// Serves MCP on the given streams until input ends (`stdin`/`stdout` for
/// `cubby mcp`).
///
/// # Errors
///
/// Building the first toolset, or an I/O failure of the streams.
pub async fn serve_stdio<R, W>(
    factory: ToolsetFactory,
    input: R,
    output: W,
) -> Result<(), ServeError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let shared = CubbyHandler::shared(factory).map_err(|e| ServeError(e.to_string()))?;
    let handler = CubbyHandler::new(Arc::clone(&shared), true);
    let (to_rmcp, rmcp_in) = tokio::io::duplex(PIPE_BYTES);
    let (rmcp_out, from_rmcp) = tokio::io::duplex(PIPE_BYTES);
    let (answers_tx, mut answers_rx) = mpsc::unbounded_channel::<String>();
    let lifecycle = Arc::new(Lifecycle::default());
    let calls_in_flight = shared.count_calls();
    let seen = Arc::clone(&lifecycle);

    // The guard: stdin → rmcp, or an answer.
    let guard = tokio::spawn(async move {
        let mut to_rmcp = to_rmcp;
        let mut input = BufReader::with_capacity(64 * 1024, input);
        let mut buf = Vec::new();
        loop {
            match read_line(&mut input, MAX_MESSAGE_BYTES, &mut buf).await {
                Ok(None) | Err(_) => break,
                Ok(Some(Err(len))) => {
                    let _ = answers_tx.send(error_line(
                        -32600,
                        &format!(
                            "message of {len} bytes is larger than the limit of {MAX_MESSAGE_BYTES}"
                        ),
                        Value::Null,
                    ));
                }
                Ok(Some(Ok(()))) => {
                    lifecycle.settle().await;
                    match judge(&buf, lifecycle.started()) {
                        verdict @ (Verdict::Forward
                        | Verdict::ForwardCall
                        | Verdict::ForwardOpening(_)) => {
                            match verdict {
                                Verdict::ForwardOpening(id) => lifecycle.expect(id),
                                Verdict::ForwardCall => {
                                    calls_in_flight.fetch_add(1, Ordering::Relaxed);
                                }
                                _ => {}
                            }
                            if !buf.ends_with(b"\n") {
                                buf.push(b'\n');
                            }
                            if to_rmcp.write_all(&buf).await.is_err() {
                                break;
                            }
                        }
                        Verdict::Drop => {}
                        Verdict::Answer(line) => {
                            let _ = answers_tx.send(line);
                        }
                    }
                }
            }
        }
        // End of input: rmcp sees EOF and ends the session.
        let _ = to_rmcp.shutdown().await;
    });

    // The writer: whole lines from rmcp and from the guard. Lines go through
    // a buffer that is flushed whenever no further line is ready, so a burst
    // of answers costs one write to stdout instead of one per line.
    let writer = tokio::spawn(async move {
        let mut output = tokio::io::BufWriter::with_capacity(64 * 1024, output);
        let mut from_rmcp = BufReader::with_capacity(64 * 1024, from_rmcp);
        let mut line = Vec::new();
        let mut rmcp_open = true;
        loop {
            let line_ready = from_rmcp.buffer().contains(&b'\n');
            if !line_ready && answers_rx.is_empty() && output.flush().await.is_err() {
                break;
            }
            tokio::select! {
                read = from_rmcp.read_until(b'\n', &mut line), if rmcp_open => {
                    match read {
                        Ok(0) | Err(_) => rmcp_open = false,
                        Ok(_) => {
                            seen.observe(&line);
                            if output.write_all(&line).await.is_err() { break; }
                            line.clear();
                        }
                    }
                }
                answer = answers_rx.recv() => {
                    match answer {
                        Some(a) => {
                            if output.write_all(a.as_bytes()).await.is_err() || output.write_all(b"\n").await.is_err() { break; }
                        }
                        None if !rmcp_open => break,
                        None => {
                            // The guard is done; drain rmcp to its end.
                            while let Ok(n) = from_rmcp.read_until(b'\n', &mut line).await {
                                if n == 0 || output.write_all(&line).await.is_err() { break; }
                                line.clear();
                            }
                            break;
                        }
                    }
                }
            }
        }
        let _ = output.flush().await;
    });

    let running = match handler.serve((rmcp_in, rmcp_out)).await {
        Ok(running) => Some(running),
        // Input ended before a handshake (a client that only discovered, or
        // none at all): a clean end, not a failure.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => None,
        Err(e) => return Err(ServeError(format!("MCP session failed to start: {e}"))),
    };
    if let Some(running) = running {
        let _ = running.waiting().await;
    }
    let _ = guard.await;
    let _ = writer.await;
    // The server-wide run ends with the server.
    let stateless = shared.take_stateless();
    drop(stateless);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judges_lines() {
        assert_eq!(judge(b"  \n", false), Verdict::Drop);
        assert!(matches!(judge(b"{not json", false), Verdict::Answer(a) if a.contains("-32700")));
        assert!(matches!(judge(b"[1,2]", false), Verdict::Answer(a) if a.contains("-32600")));
        assert!(
            matches!(judge(br#"{"id":1,"method":"x"}"#, false), Verdict::Answer(a) if a.contains("-32600"))
        );
        // Before the session starts, notifications are dropped.
        let note = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        assert_eq!(judge(note, false), Verdict::Drop);
        assert_eq!(
            judge(
                br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
                false
            ),
            Verdict::ForwardOpening("1".into())
        );
        assert_eq!(judge(note, true), Verdict::Forward);
        let call = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}"#;
        assert_eq!(judge(call, true), Verdict::ForwardCall);
        assert!(matches!(
            judge(br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":[1]}"#, true),
            Verdict::Answer(a) if a.contains("-32602")
        ));
    }

    #[test]
    fn only_a_successful_opening_starts_the_session() {
        let l = Lifecycle::default();
        l.expect("16".into());
        assert!(l.pending());
        l.observe(br#"{"jsonrpc":"2.0","id":16,"error":{"code":-32602,"message":"x"}}"#);
        assert!(!l.started());
        assert!(!l.pending());
        l.observe(br#"{"jsonrpc":"2.0","id":3,"result":{}}"#);
        assert!(!l.started());
        l.expect("\"init\"".into());
        l.observe(br#"{"jsonrpc":"2.0","id":"init","result":{"protocolVersion":"2025-11-25"}}"#);
        assert!(l.started());
    }
}
