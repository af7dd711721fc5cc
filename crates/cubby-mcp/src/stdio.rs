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
//! The guard hands rmcp parsed messages (a sink/stream transport, no
//! second parse of the line), and one writer task puts rmcp's messages and
//! the guard's answers on stdout, a whole line at a time.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequest, ClientRequest, JsonRpcMessage, JsonRpcRequest};
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::direct::{Route, route};
use crate::handler::CubbyHandler;
use crate::{McpOptions, ServeError, ToolsetFactory};

/// Largest message accepted on stdio, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
/// Longest wait for rmcp to answer a request that opens the session.
const OPENING_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// Messages queued between the guard, rmcp and the writer (each way): the
/// guard stops reading input when rmcp falls this far behind, and rmcp
/// stops when output does.
const MESSAGE_QUEUE: usize = 256;
/// Initial capacity of an encoded answer (most file-tool answers fit).
const ANSWER_CAPACITY: usize = 2048;
/// The first protocol revision without a handshake (lifecycle in each
/// request's `_meta`, `resultType` in results).
const FIRST_INLINE_REVISION: &str = "2026-07-28";

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
    /// The session was opened with `initialize` and a protocol revision
    /// before 2026-07-28: results go without `resultType` (rmcp strips it
    /// for such peers), and the guard may answer direct calls.
    legacy: std::sync::atomic::AtomicBool,
    opening: std::sync::Mutex<std::collections::HashSet<String>>,
    answered: tokio::sync::Notify,
}

impl Lifecycle {
    fn legacy(&self) -> bool {
        self.legacy.load(std::sync::atomic::Ordering::SeqCst)
    }

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
            if let Some(result) = map.get("result") {
                let legacy = result
                    .get("protocolVersion")
                    .and_then(Value::as_str)
                    .is_some_and(|v| v < FIRST_INLINE_REVISION);
                self.legacy
                    .store(legacy, std::sync::atomic::Ordering::SeqCst);
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

/// A `tools/call` request read straight into rmcp's `CallToolRequest`:
/// rmcp's own `Deserialize` for its message enum tries each of its ~20
/// untagged request variants in turn (a seventh of the server's time per
/// call). One whose params do not fit gets `-32602` saying why (rmcp would
/// take it for an unknown method): the `Err` is that answer.
fn read_call(line: &[u8]) -> Result<JsonRpcRequest<CallToolRequest>, String> {
    serde_json::from_slice(line).map_err(|e| {
        let (_, id) = request_id(line);
        error_line(
            -32602,
            &format!(
                "invalid params for tools/call: {e}; send {{\"name\": <tool>, \"arguments\": {{...}}}}"
            ),
            id,
        )
    })
}

/// For an answer to a line rmcp cannot read: whether it is a request (a
/// `method` and an `id`), and its id (`null` when it has none).
fn request_id(line: &[u8]) -> (bool, Value) {
    let value: Value = serde_json::from_slice(line).unwrap_or(Value::Null);
    let is_request = value.get("method").is_some() && value.get("id").is_some();
    (is_request, value.get("id").cloned().unwrap_or(Value::Null))
}

/// A call as rmcp receives it.
fn call_message(request: JsonRpcRequest<CallToolRequest>) -> RxJsonRpcMessage<RoleServer> {
    JsonRpcMessage::Request(JsonRpcRequest {
        jsonrpc: request.jsonrpc,
        id: request.id,
        request: ClientRequest::from(request.request),
    })
}

/// Any other forwarded line, for rmcp. A request rmcp cannot read gets
/// `-32600` with its id (rmcp's transport would answer with a null id): the
/// `Err` is that answer; a message that is not a request is dropped.
fn parse_for_rmcp(line: &[u8]) -> Result<RxJsonRpcMessage<RoleServer>, Option<String>> {
    serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(line).map_err(|e| {
        let (is_request, id) = request_id(line);
        is_request.then(|| error_line(-32600, &format!("invalid request: {e}"), id))
    })
}

/// One outgoing message as a line.
fn encode(message: &TxJsonRpcMessage<RoleServer>) -> Option<Vec<u8>> {
    let mut line = Vec::with_capacity(ANSWER_CAPACITY);
    serde_json::to_writer(&mut line, message).ok()?;
    line.push(b'\n');
    Some(line)
}

/// Serves MCP on the given streams until input ends (`stdin`/`stdout` for
/// `cubby mcp`); the session's run has ended ([`cubby::Toolset::end`]:
/// processes stopped, `$CUBBY_OUTPUT_DIR` collected) when it returns.
///
/// # Errors
///
/// Building the first toolset, or an I/O failure of the streams.
pub async fn serve_stdio<R, W>(
    factory: ToolsetFactory,
    options: McpOptions,
    input: R,
    output: W,
) -> Result<(), ServeError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    serve_stdio_until(factory, options, input, output, CancellationToken::new()).await
}

/// Longest wait, once `shutdown` fired and the run ended, for the session
/// to finish its answers.
const SHUTDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// [`serve_stdio`], which also ends when `shutdown` is cancelled (a
/// signal): as at the end of input, the run is ended first (its processes
/// stopped, so calls in flight return) and the session then closes; when
/// this returns, the run has ended.
///
/// # Errors
///
/// As [`serve_stdio`].
pub async fn serve_stdio_until<R, W>(
    factory: ToolsetFactory,
    options: McpOptions,
    input: R,
    output: W,
    shutdown: CancellationToken,
) -> Result<(), ServeError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let fast_path = options.fast_path;
    let shared = CubbyHandler::shared(factory, options).map_err(|e| ServeError(e.to_string()))?;
    let handler = CubbyHandler::new(Arc::clone(&shared), true);
    let direct = handler.clone();
    let pool = Arc::clone(&shared);
    // Parsed messages go to rmcp; every outgoing line (rmcp's and the
    // guard's answers) goes to the writer through one channel, in order.
    let (to_rmcp, from_guard) = mpsc::channel::<RxJsonRpcMessage<RoleServer>>(MESSAGE_QUEUE);
    let (lines_tx, mut lines_rx) = mpsc::channel::<Vec<u8>>(MESSAGE_QUEUE);
    let lifecycle = Arc::new(Lifecycle::default());
    let calls_in_flight = shared.count_calls();

    // The guard: stdin → rmcp, or an answer.
    let answers = lines_tx.clone();
    let seen = Arc::clone(&lifecycle);
    let stop_reading = shutdown.clone();
    let guard = tokio::spawn(async move {
        let mut input = BufReader::with_capacity(64 * 1024, input);
        let mut buf = Vec::new();
        let answer = |line: String| {
            let answers = answers.clone();
            async move {
                let mut bytes = line.into_bytes();
                bytes.push(b'\n');
                answers.send(bytes).await.is_ok()
            }
        };
        loop {
            let read = tokio::select! {
                read = read_line(&mut input, MAX_MESSAGE_BYTES, &mut buf) => read,
                () = stop_reading.cancelled() => break,
            };
            let open = match read {
                Ok(None) | Err(_) => break,
                Ok(Some(Err(len))) => {
                    answer(error_line(
                        -32600,
                        &format!(
                            "message of {len} bytes is larger than the limit of {MAX_MESSAGE_BYTES}"
                        ),
                        Value::Null,
                    ))
                    .await
                }
                Ok(Some(Ok(()))) => {
                    seen.settle().await;
                    // More input already read: the client pipelines, so
                    // the work goes to the pool while this task parses on.
                    let pipelining = !input.buffer().is_empty();
                    let line = buf.trim_ascii();
                    match judge(line, seen.started()) {
                        Verdict::ForwardCall => match read_call(line) {
                            Err(line) => answer(line).await,
                            Ok(request) => {
                                calls_in_flight.fetch_add(1, Ordering::Relaxed);
                                match route(request, line, seen.legacy(), fast_path, |n| {
                                    direct.is_direct(n)
                                }) {
                                    Route::Direct(id, name, arguments) => {
                                        if !pipelining && direct.direct_inline(&name, &arguments) {
                                            let answer = direct.direct_answer(id, &name, arguments);
                                            match encode(&answer) {
                                                Some(line) => answers.send(line).await.is_ok(),
                                                None => true,
                                            }
                                        } else {
                                            let direct = direct.clone();
                                            let lines = answers.clone();
                                            pool.run_file_job(move || {
                                                let answer =
                                                    direct.direct_answer(id, &name, arguments);
                                                if let Some(line) = encode(&answer) {
                                                    let _ = lines.blocking_send(line);
                                                }
                                            });
                                            true
                                        }
                                    }
                                    Route::Rmcp(request) => {
                                        to_rmcp.send(call_message(request)).await.is_ok()
                                    }
                                }
                            }
                        },
                        verdict @ (Verdict::Forward | Verdict::ForwardOpening(_)) => {
                            match parse_for_rmcp(line) {
                                Ok(message) => {
                                    if let Verdict::ForwardOpening(id) = verdict {
                                        seen.expect(id);
                                    }
                                    to_rmcp.send(message).await.is_ok()
                                }
                                Err(Some(line)) => answer(line).await,
                                Err(None) => true,
                            }
                        }
                        Verdict::Drop => true,
                        Verdict::Answer(line) => answer(line).await,
                    }
                }
            };
            if !open {
                break;
            }
        }
        // End of input: rmcp's stream ends, and with it the session.
    });

    // rmcp's side of the channels.
    let incoming = Box::pin(futures::stream::unfold(from_guard, |mut rx| async move {
        rx.recv().await.map(|message| (message, rx))
    }));
    let outgoing = Box::pin(futures::sink::unfold(
        (lines_tx, Arc::clone(&lifecycle)),
        |(lines, seen), message: TxJsonRpcMessage<RoleServer>| async move {
            let mut line = Vec::with_capacity(ANSWER_CAPACITY);
            serde_json::to_writer(&mut line, &message).map_err(std::io::Error::other)?;
            seen.observe(&line);
            line.push(b'\n');
            lines
                .send(line)
                .await
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))?;
            Ok::<_, std::io::Error>((lines, seen))
        },
    ));

    // The writer: whole lines, through a buffer that is flushed whenever no
    // further line is ready, so a burst of answers costs one write.
    let writer = tokio::spawn(async move {
        let mut output = tokio::io::BufWriter::with_capacity(64 * 1024, output);
        while let Some(line) = lines_rx.recv().await {
            if output.write_all(&line).await.is_err() {
                break;
            }
            if lines_rx.is_empty() && output.flush().await.is_err() {
                break;
            }
        }
        let _ = output.flush().await;
    });

    let running = match handler.serve((outgoing, incoming)).await {
        Ok(running) => Some(running),
        // Input ended before a handshake (a client that only discovered, or
        // none at all): a clean end, not a failure.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => None,
        Err(e) => return Err(ServeError(format!("MCP session failed to start: {e}"))),
    };
    let ending = Arc::clone(&shared);
    let end_runs = || async move {
        let _ = tokio::task::spawn_blocking(move || ending.end_runs()).await;
    };
    let session = async move {
        if let Some(running) = running {
            let _ = running.waiting().await;
        }
        let _ = guard.await;
    };
    tokio::pin!(session);
    let signalled = tokio::select! {
        () = &mut session => false,
        () = shutdown.cancelled() => true,
    };
    // The run ends (at the end of input, or first thing on a signal: its
    // processes stopped, the calls in flight return and the session can
    // close).
    end_runs().await;
    if signalled {
        let _ = tokio::time::timeout(SHUTDOWN_WAIT, &mut session).await;
        // Every line sent is written, or the wait ends (a client that no
        // longer reads).
        let _ = tokio::time::timeout(SHUTDOWN_WAIT, writer).await;
    } else {
        let _ = writer.await;
    }
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
    fn a_call_read_directly_is_what_rmcp_would_read() {
        let lines: [&[u8]; 4] = [
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"a"}}}"#,
            br#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"run","arguments":{"command":"ls"},"_meta":{"progressToken":"p"}}}"#,
            br#"{"params":{"name":"glob"},"method":"tools/call","id":3,"jsonrpc":"2.0"}"#,
            br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"list_files","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
        ];
        for line in lines {
            let direct = call_message(read_call(line).unwrap());
            let general: RxJsonRpcMessage<RoleServer> = serde_json::from_slice(line).unwrap();
            assert!(
                matches!(&direct, JsonRpcMessage::Request(r) if matches!(r.request, ClientRequest::CallToolRequest(_)))
            );
            assert_eq!(
                serde_json::to_value(&direct).unwrap(),
                serde_json::to_value(&general).unwrap(),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn a_call_with_bad_params_is_told_why_and_others_take_the_general_path() {
        let bad = br#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":7}}"#;
        let answer: Value = serde_json::from_str(&read_call(bad).unwrap_err()).unwrap();
        assert_eq!(answer["id"], 9);
        assert_eq!(answer["error"]["code"], -32602);
        let ping = br#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;
        assert!(parse_for_rmcp(ping).is_ok());
        // Not a request, and unreadable: dropped without an answer.
        let note = br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":7}"#;
        assert!(matches!(parse_for_rmcp(note), Err(None)));
    }

    /// Runs a stdio session over in-memory pipes: sends `lines`, returns
    /// every answer by id.
    async fn session(
        lines: &[String],
        options: McpOptions,
    ) -> std::collections::HashMap<String, Value> {
        use tokio::io::AsyncReadExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "one\ntwo\n").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b.md"), "b").unwrap();
        let root = dir.path().to_path_buf();
        let factory: ToolsetFactory =
            Arc::new(move || cubby::Toolset::builder(cubby::local_sandbox(&root)?).build());
        let (client_in, server_in) = tokio::io::duplex(1 << 20);
        let (server_out, mut client_out) = tokio::io::duplex(1 << 20);
        let server = tokio::spawn(serve_stdio(factory, options, server_in, server_out));
        let mut client_in = client_in;
        for line in lines {
            client_in.write_all(line.as_bytes()).await.unwrap();
            client_in.write_all(b"\n").await.unwrap();
        }
        drop(client_in);
        let mut out = String::new();
        client_out.read_to_string(&mut out).await.unwrap();
        server.await.unwrap().unwrap();
        out.lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .map(|v| (v["id"].to_string(), v))
            .collect()
    }

    fn open(version: &str) -> String {
        json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}})
        .to_string()
    }

    /// The same calls answered directly (no `_meta`) and through rmcp
    /// (with an empty `_meta`), for each revision's session, with
    /// `structuredContent` off and on.
    #[tokio::test]
    async fn direct_answers_are_rmcps_answers() {
        for structured_content in [false, true] {
            for fast_path in [true, false] {
                direct_answers_are_rmcps_answers_with(McpOptions {
                    structured_content,
                    fast_path,
                })
                .await;
            }
        }
    }

    async fn direct_answers_are_rmcps_answers_with(options: McpOptions) {
        let calls = [
            json!({"name": "read_file", "arguments": {"path": "a.txt"}}),
            json!({"name": "read_file", "arguments": {"path": "missing.txt"}}),
            json!({"name": "read_file", "arguments": {"path": "../x"}}),
            json!({"name": "read_file", "arguments": {"path": "a.txt", "bogus": 1}}),
            json!({"name": "read_file"}),
            json!({"name": "list_files", "arguments": {"depth": 1}}),
            json!({"name": "list_files", "arguments": {"path": "sub", "depth": 1}}),
            json!({"name": "list_files", "arguments": {"path": "a.txt", "depth": 1}}),
        ];
        for version in ["2025-06-18", "2025-11-25", "2026-07-28"] {
            let mut lines = vec![
                open(version),
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
            ];
            for (i, params) in calls.iter().enumerate() {
                let mut with_meta = params.clone();
                with_meta["_meta"] = json!({});
                for (id, p) in [
                    (format!("d{i}"), params.clone()),
                    (format!("r{i}"), with_meta),
                ] {
                    lines.push(
                        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": p})
                            .to_string(),
                    );
                }
            }
            let answers = session(&lines, options).await;
            for i in 0..calls.len() {
                let direct = &answers[&format!("\"d{i}\"")];
                let general = &answers[&format!("\"r{i}\"")];
                assert_eq!(direct["result"], general["result"], "{version} call {i}");
                assert_eq!(direct["error"], general["error"], "{version} call {i}");
                assert!(direct.get("result").is_some() || direct.get("error").is_some());
                if let Some(result) = direct.get("result") {
                    let ok = result["isError"] != true;
                    assert_eq!(
                        result.get("structuredContent").is_some(),
                        ok && options.structured_content,
                        "{version} call {i}: {result}"
                    );
                }
            }
        }
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
