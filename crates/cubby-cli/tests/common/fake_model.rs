//! A scripted fake model on loopback for the Codex CLI and Claude Code tests
//! (a test double at the outer edge: the model; the clients, cubby, its
//! sandbox and the MCP transport are all real).
//!
//! It serves, on 127.0.0.1 port 0, the two APIs the clients speak, each
//! with server-sent events: the OpenAI Responses API (`POST /v1/responses`,
//! Codex) and the Anthropic Messages API (`POST /v1/messages`, Claude Code).
//! Every request body is recorded. Each turn answers the next call of a
//! [`Script`], chosen from the transcript the client sends (the number of
//! tool results in it), so that a retried request gets the same answer; the
//! result of the previous call is read from that transcript and kept as the
//! client passed it on ([`Seen`]). When every call has its result, the turn
//! answers the script's final text.
//!
//! Claude Code lists MCP tools only through its tool search: as a model
//! would, the first Messages turn calls the request's tool-search tool (the
//! one whose description speaks of deferred tools and that takes a
//! `query`) with `select:` and the script's tools, named as the request
//! lists them (`mcp__<server>__<tool>`). A later turn calls a tool only
//! when the request offers it; anything unexpected is a problem the test
//! reads from [`FakeModel::problems`].

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use serde_json::{Value, json};

/// One tool call of a script: the tool's name on its MCP server and the
/// arguments.
#[derive(Clone, Debug)]
pub struct Call {
    /// The tool's name as the MCP server lists it.
    pub tool: String,
    /// The arguments object.
    pub args: Value,
}

/// `tool` called with `args`.
pub fn call(tool: &str, args: Value) -> Call {
    Call {
        tool: tool.to_string(),
        args,
    }
}

/// What the fake model does in one session.
#[derive(Clone, Debug)]
pub struct Script {
    /// The MCP server's name in the client's config (`cubby`).
    pub server: String,
    /// The tool calls, one a turn, in order.
    pub calls: Vec<Call>,
    /// The final answer, once every call has its result.
    pub answer: String,
}

/// A tool result as the client passed it on to the model.
#[derive(Clone, Debug)]
pub struct Seen {
    /// The text parts, in order.
    pub texts: Vec<String>,
    /// The image parts: (media type, base64 data).
    pub images: Vec<(String, String)>,
    /// Whether the client marked it as an error (Messages API only).
    pub is_error: bool,
    /// The tool-result object as it came (a `tool_result` block or a
    /// `function_call_output` item).
    pub raw: Value,
}

/// What Codex puts before an MCP tool's result.
const CODEX_PREFIX: &str = "Wall time: ";

impl Seen {
    /// The text parts joined by newlines: what the model reads.
    pub fn text(&self) -> String {
        self.texts.join("\n")
    }

    /// [`Seen::text`] without the `Wall time: …\nOutput:` lines Codex puts
    /// before a tool's result: the part that came from the MCP server.
    pub fn body(&self) -> String {
        let text = self.text();
        if text.starts_with(CODEX_PREFIX)
            && let Some((_, rest)) = text.split_once("\nOutput:")
        {
            return rest.strip_prefix('\n').unwrap_or(rest).to_string();
        }
        text
    }

    /// Bytes of the text parts plus the base64 of the image parts: what
    /// reaches the model for this result.
    pub fn bytes(&self) -> usize {
        self.texts.iter().map(String::len).sum::<usize>()
            + self.images.iter().map(|(_, d)| d.len()).sum::<usize>()
    }
}

/// Which API a request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Api {
    Responses,
    Messages,
}

#[derive(Default)]
struct Record {
    /// Every request: the path and the body (JSON, or a string when it is
    /// not JSON).
    requests: Vec<(String, Value)>,
    /// The result of each call of the transcript, by its index (Claude
    /// Code's first is the tool search's).
    results: BTreeMap<usize, Value>,
    /// The API the turns came in on.
    api: Option<Api>,
    /// What went unlike a model would expect.
    problems: Vec<String>,
}

struct Shared {
    script: Script,
    record: Mutex<Record>,
}

/// The fake model, serving until dropped.
pub struct FakeModel {
    addr: SocketAddr,
    shared: Arc<Shared>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl FakeModel {
    /// Serves `script` on 127.0.0.1, on a port the kernel picks.
    pub fn start(script: Script) -> FakeModel {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            script,
            record: Mutex::new(Record::default()),
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let app = axum::Router::new()
            .fallback(handle)
            .layer(DefaultBodyLimit::disable())
            .with_state(shared.clone());
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let _ = axum::serve(listener, app).await;
        });
        FakeModel {
            addr,
            shared,
            runtime: Some(runtime),
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far: path and body.
    pub fn requests(&self) -> Vec<(String, Value)> {
        self.shared.record.lock().unwrap().requests.clone()
    }

    /// What went unlike the script: empty when every turn went as planned.
    pub fn problems(&self) -> Vec<String> {
        self.shared.record.lock().unwrap().problems.clone()
    }

    /// The results of the script's calls as the client passed them on,
    /// one for each call (`None` for a call whose result never came). With
    /// Claude Code the tool search's result is left out.
    pub fn results(&self) -> Vec<Option<Seen>> {
        let record = self.shared.record.lock().unwrap();
        let skip = usize::from(record.api == Some(Api::Messages));
        (0..self.shared.script.calls.len())
            .map(|i| {
                record.results.get(&(i + skip)).map(|raw| match record.api {
                    Some(Api::Messages) => seen_of_tool_result(raw),
                    _ => seen_of_function_call_output(raw),
                })
            })
            .collect()
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

fn problem(shared: &Shared, text: String) {
    shared.record.lock().unwrap().problems.push(text);
}

async fn handle(State(shared): State<Arc<Shared>>, uri: Uri, body: Bytes) -> Response {
    let path = uri.path().to_string();
    let parsed: Option<Value> = serde_json::from_slice(&body).ok();
    shared.record.lock().unwrap().requests.push((
        uri.to_string(),
        parsed
            .clone()
            .unwrap_or_else(|| Value::String(String::from_utf8_lossy(&body).into_owned())),
    ));
    let Some(req) = parsed else {
        problem(&shared, format!("{path}: a body that is not JSON"));
        return plain(StatusCode::BAD_REQUEST, "the body is not JSON");
    };
    match path.as_str() {
        "/v1/messages/count_tokens" => json_response(&json!({"input_tokens": 100})),
        "/v1/messages" => sse(&messages_turn(&shared, &req)),
        "/v1/responses" => sse(&responses_turn(&shared, &req)),
        _ => {
            problem(&shared, format!("a request to {path}"));
            plain(StatusCode::NOT_FOUND, "not here")
        }
    }
}

fn plain(status: StatusCode, text: &str) -> Response {
    Response::builder()
        .status(status)
        .header("content-type", "text/plain")
        .body(Body::from(text.to_string()))
        .unwrap()
}

fn json_response(value: &Value) -> Response {
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(value.to_string()))
        .unwrap()
}

/// Server-sent events, each `(event, data)`.
fn sse(events: &[(&str, Value)]) -> Response {
    let mut out = String::new();
    for (event, data) in events {
        out.push_str(&format!("event: {event}\ndata: {data}\n\n"));
    }
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from(out))
        .unwrap()
}

/// Stores the result of call `index`; a second copy (a retried request)
/// replaces the first.
fn record_result(shared: &Shared, api: Api, index: usize, raw: &Value) {
    let mut record = shared.record.lock().unwrap();
    record.api = Some(api);
    record.results.insert(index, raw.clone());
}

/// The id the fake gives call `index` of a transcript.
fn call_id(api: Api, index: usize) -> String {
    match api {
        Api::Messages => format!("toolu_{index:04}"),
        Api::Responses => format!("call_{index:04}"),
    }
}

// ---- the Anthropic Messages API (Claude Code) ----

/// The name a tool of `server` has in Claude Code.
fn claude_name(server: &str, tool: &str) -> String {
    format!("mcp__{server}__{tool}")
}

/// The events of one Messages API turn.
fn messages_turn(shared: &Shared, req: &Value) -> Vec<(&'static str, Value)> {
    let tools = req["tools"].as_array().cloned().unwrap_or_default();
    if tools.is_empty() {
        // Not the agent loop (a title, a summary): a short text.
        return messages_events(req, json!({"type": "text", "text": "ok"}), "end_turn");
    }
    let results: Vec<&Value> = req["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .collect();
    let done = results.len();
    for (i, r) in results.iter().enumerate() {
        if r["tool_use_id"] != call_id(Api::Messages, i).as_str() {
            problem(
                shared,
                format!("tool result {i} answers {}", r["tool_use_id"]),
            );
        }
    }
    if let Some(last) = results.last() {
        record_result(shared, Api::Messages, done - 1, last);
    } else {
        shared.record.lock().unwrap().api = Some(Api::Messages);
    }
    let script = &shared.script;
    let id = call_id(Api::Messages, done);
    let block = if done == 0 {
        match tool_search_call(shared, req, &tools) {
            Some((name, input)) => {
                json!({"type": "tool_use", "id": id, "name": name, "input": input})
            }
            None => return final_text(req, "the tool search tool is missing"),
        }
    } else if let Some(call) = script.calls.get(done - 1) {
        let name = claude_name(&script.server, &call.tool);
        let offered = tools
            .iter()
            .any(|t| t["name"] == name.as_str() && t["input_schema"].is_object());
        if !offered {
            problem(
                shared,
                format!("turn {done}: {name} is not among the request's tools"),
            );
            return final_text(req, "a tool is missing");
        }
        json!({"type": "tool_use", "id": id, "name": name, "input": call.args})
    } else {
        return final_text(req, &script.answer);
    };
    messages_events(req, block, "tool_use")
}

/// The tool-search call of the first turn: the tool whose description
/// speaks of deferred tools and that takes a `query`, asked for the
/// script's tools by the names the request lists them under.
fn tool_search_call(shared: &Shared, req: &Value, tools: &[Value]) -> Option<(String, Value)> {
    let Some(search) = tools.iter().find(|t| {
        t["description"]
            .as_str()
            .is_some_and(|d| d.contains("deferred tools"))
            && t["input_schema"]["properties"]["query"].is_object()
    }) else {
        problem(shared, "no tool-search tool in the first request".into());
        return None;
    };
    let text = req["messages"].to_string() + &req["system"].to_string();
    let mut wanted: Vec<String> = Vec::new();
    for call in &shared.script.calls {
        let name = claude_name(&shared.script.server, &call.tool);
        if !wanted.contains(&name) {
            if !text.contains(&name) {
                problem(
                    shared,
                    format!("{name} is not among the deferred tools of the first request"),
                );
            }
            wanted.push(name);
        }
    }
    let name = search["name"].as_str()?.to_string();
    Some((
        name,
        json!({"query": format!("select:{}", wanted.join(","))}),
    ))
}

fn final_text(req: &Value, text: &str) -> Vec<(&'static str, Value)> {
    messages_events(req, json!({"type": "text", "text": text}), "end_turn")
}

/// A Messages API stream holding one content block.
fn messages_events(req: &Value, block: Value, stop: &str) -> Vec<(&'static str, Value)> {
    let (start, delta) = if block["type"] == "tool_use" {
        let mut start = block.clone();
        start["input"] = json!({});
        let delta = json!({"type": "input_json_delta", "partial_json": block["input"].to_string()});
        (start, delta)
    } else {
        (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": block["text"]}),
        )
    };
    vec![
        (
            "message_start",
            json!({"type": "message_start", "message": {
                "id": "msg_fake", "type": "message", "role": "assistant",
                "model": req["model"], "content": [], "stop_reason": null,
                "stop_sequence": null, "usage": {"input_tokens": 1, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": start}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
                   "usage": {"output_tokens": 1}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ]
}

/// A `tool_result` block as the model reads it.
fn seen_of_tool_result(raw: &Value) -> Seen {
    let mut seen = Seen {
        texts: Vec::new(),
        images: Vec::new(),
        is_error: raw["is_error"] == true,
        raw: raw.clone(),
    };
    match &raw["content"] {
        Value::String(s) => seen.texts.push(s.clone()),
        Value::Array(blocks) => {
            for b in blocks {
                match b["type"].as_str() {
                    Some("text") => seen.texts.push(b["text"].as_str().unwrap_or("").into()),
                    Some("image") => seen.images.push((
                        b["source"]["media_type"].as_str().unwrap_or("").into(),
                        b["source"]["data"].as_str().unwrap_or("").into(),
                    )),
                    _ => seen.texts.push(b.to_string()),
                }
            }
        }
        _ => {}
    }
    seen
}

// ---- the OpenAI Responses API (Codex) ----

/// The events of one Responses API turn.
fn responses_turn(shared: &Shared, req: &Value) -> Vec<(&'static str, Value)> {
    let tools = req["tools"].as_array().cloned().unwrap_or_default();
    if tools.is_empty() {
        return responses_events(message_item("ok"));
    }
    let results: Vec<&Value> = req["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == "function_call_output")
        .collect();
    let done = results.len();
    for (i, r) in results.iter().enumerate() {
        if r["call_id"] != call_id(Api::Responses, i).as_str() {
            problem(shared, format!("tool output {i} answers {}", r["call_id"]));
        }
    }
    if let Some(last) = results.last() {
        record_result(shared, Api::Responses, done - 1, last);
    } else {
        shared.record.lock().unwrap().api = Some(Api::Responses);
    }
    let script = &shared.script;
    let Some(call) = script.calls.get(done) else {
        return responses_events(message_item(&script.answer));
    };
    let namespace = format!("mcp__{}", script.server);
    let in_namespace = tools.iter().any(|t| {
        t["type"] == "namespace"
            && t["name"] == namespace.as_str()
            && t["tools"]
                .as_array()
                .is_some_and(|ts| ts.iter().any(|f| f["name"] == call.tool.as_str()))
    });
    let flat = format!("{namespace}__{}", call.tool);
    let mut item = json!({
        "type": "function_call", "id": format!("fc_{done:04}"),
        "call_id": call_id(Api::Responses, done),
        "arguments": call.args.to_string(),
    });
    if in_namespace {
        item["namespace"] = json!(namespace);
        item["name"] = json!(call.tool);
    } else if tools.iter().any(|t| t["name"] == flat.as_str()) {
        item["name"] = json!(flat);
    } else {
        problem(
            shared,
            format!(
                "turn {done}: {} is not among the request's tools",
                call.tool
            ),
        );
        return responses_events(message_item("a tool is missing"));
    }
    responses_events(item)
}

fn message_item(text: &str) -> Value {
    json!({"type": "message", "role": "assistant", "id": "msg_fake",
           "content": [{"type": "output_text", "text": text}]})
}

/// A Responses API stream holding one output item.
fn responses_events(item: Value) -> Vec<(&'static str, Value)> {
    vec![
        (
            "response.created",
            json!({"type": "response.created", "response": {"id": "resp_fake"}}),
        ),
        (
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        ),
        (
            "response.completed",
            json!({"type": "response.completed", "response": {"id": "resp_fake", "usage": {
                "input_tokens": 1, "input_tokens_details": null, "output_tokens": 1,
                "output_tokens_details": null, "total_tokens": 2}}}),
        ),
    ]
}

/// A `function_call_output` item as the model reads it.
fn seen_of_function_call_output(raw: &Value) -> Seen {
    let mut seen = Seen {
        texts: Vec::new(),
        images: Vec::new(),
        is_error: false,
        raw: raw.clone(),
    };
    match &raw["output"] {
        Value::String(s) => seen.texts.push(s.clone()),
        Value::Array(parts) => {
            for p in parts {
                match p["type"].as_str() {
                    Some("input_text") => seen.texts.push(p["text"].as_str().unwrap_or("").into()),
                    Some("input_image") => {
                        let url = p["image_url"].as_str().unwrap_or("");
                        let (head, data) = url.split_once(',').unwrap_or(("", url));
                        let media = head
                            .strip_prefix("data:")
                            .and_then(|h| h.strip_suffix(";base64"))
                            .unwrap_or("");
                        seen.images.push((media.into(), data.into()));
                    }
                    _ => seen.texts.push(p.to_string()),
                }
            }
        }
        _ => {}
    }
    seen
}
