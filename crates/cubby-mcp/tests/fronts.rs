//! The two MCP fronts give the same answers, with `structuredContent` off
//! (the default) and on: the stdio front (its direct path for `read_file`
//! and `list_files`, and rmcp's dispatch for every tool) and the streamable
//! HTTP front, each in a fresh copy of one workspace, driven call by call
//! through the same script. With the setting off no result carries
//! `structuredContent` and no tool an `outputSchema`; with it on, every
//! successful result does and every tool has one. Error results are text
//! either way.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::Duration;

use cubby_mcp::{HttpOptions, McpOptions, ToolsetFactory, serve_http, serve_stdio};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

/// The protocol revision of the sessions (one with `initialize`, so that
/// the stdio front's direct path answers).
const REVISION: &str = "2025-11-25";
/// Longest wait for one answer.
const ANSWER_WAIT: Duration = Duration::from_secs(60);

/// A fresh workspace: a text file, a file in a directory, an empty file.
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "alpha\nbeta\ngamma\n").unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/b.md"), "# beta\n").unwrap();
    std::fs::write(dir.path().join("empty.txt"), "").unwrap();
    dir
}

/// What every front serves: a workspace assembled from a config (the
/// `local` provider) by the library, as `cubby mcp` and `cubby serve` do.
fn factory(root: &std::path::Path) -> ToolsetFactory {
    let root = std::fs::canonicalize(root).unwrap();
    let config = cubby::Config {
        provider: Some(cubby::ProviderKind::Local),
        ..cubby::Config::default()
    };
    cubby::Workspace::from_config(&root, &config, None, &cubby::HostEnv::capture())
        .unwrap()
        .factory(true)
        .unwrap()
}

/// The script: (tool, arguments, whether its answer is the same in every
/// session). `run` says how long it took, so only its shape is compared.
fn script() -> Vec<(&'static str, Value, bool)> {
    vec![
        ("read_file", json!({"path": "a.txt"}), true),
        (
            "read_file",
            json!({"path": "a.txt", "offset": 2, "limit": 1}),
            true,
        ),
        ("read_file", json!({"path": "missing.txt"}), true),
        ("list_files", json!({"depth": 1}), true),
        ("list_files", json!({"path": "sub", "depth": 1}), true),
        ("list_files", json!({}), true),
        ("glob", json!({"pattern": "**/*.md"}), true),
        ("search", json!({"query": "beta"}), true),
        (
            "edit_file",
            json!({"path": "sub/b.md", "find": "beta", "replace": "B"}),
            true,
        ),
        (
            "edit_file",
            json!({"path": "a.txt", "find": "beta", "replace": "BETA"}),
            true,
        ),
        (
            "write_file",
            json!({"path": "new/c.txt", "content": "c\n"}),
            true,
        ),
        ("view_file", json!({"path": "a.txt"}), true),
        ("changes", json!({}), true),
        ("run", json!({"command": "echo hello"}), false),
        ("run", json!({"command": "exit 3"}), false),
        ("list_processes", json!({}), false),
        ("read_file", json!({"path": "../outside"}), true),
    ]
}

fn request(id: &str, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn initialize() -> Value {
    request(
        "init",
        "initialize",
        json!({"protocolVersion": REVISION, "capabilities": {},
               "clientInfo": {"name": "fronts", "version": "1"}}),
    )
}

/// What one session answered: the `initialize` result, the tools and the
/// result of each call of the script, in order.
#[derive(Debug)]
struct Answers {
    init: Value,
    tools: Value,
    calls: Vec<Value>,
}

/// A stdio session over in-memory pipes, one message at a time.
struct Stdio {
    input: tokio::io::DuplexStream,
    output: BufReader<tokio::io::DuplexStream>,
    server: tokio::task::JoinHandle<Result<(), cubby_mcp::ServeError>>,
}

impl Stdio {
    fn start(root: &std::path::Path, options: McpOptions) -> Stdio {
        let (input, server_in) = tokio::io::duplex(1 << 20);
        let (server_out, output) = tokio::io::duplex(1 << 20);
        let server = tokio::spawn(serve_stdio(factory(root), options, server_in, server_out));
        Stdio {
            input,
            output: BufReader::new(output),
            server,
        }
    }

    async fn send(&mut self, message: &Value) {
        let mut line = message.to_string().into_bytes();
        line.push(b'\n');
        self.input.write_all(&line).await.unwrap();
    }

    /// Sends a request and returns its answer (notifications skipped).
    async fn ask(&mut self, message: Value) -> Value {
        let id = message["id"].clone();
        self.send(&message).await;
        let mut line = String::new();
        loop {
            line.clear();
            let n = tokio::time::timeout(ANSWER_WAIT, self.output.read_line(&mut line))
                .await
                .expect("an answer in time")
                .unwrap();
            assert!(n > 0, "the stdio server ended before answering {message}");
            let answer: Value = serde_json::from_str(&line).unwrap();
            if answer["id"] == id {
                return answer;
            }
        }
    }

    async fn end(self) {
        drop(self.input);
        let mut rest = Vec::new();
        let mut output = self.output;
        output.read_to_end(&mut rest).await.unwrap();
        self.server.await.unwrap().unwrap();
    }
}

/// The script through the stdio front. `meta` adds an empty `_meta` to each
/// call, which sends every call through rmcp's dispatch.
async fn over_stdio(options: McpOptions, meta: bool) -> Answers {
    let ws = workspace();
    let mut s = Stdio::start(ws.path(), options);
    let init = s.ask(initialize()).await;
    s.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let tools = s.ask(request("list", "tools/list", json!({}))).await;
    let mut calls = Vec::new();
    for (i, (name, arguments, _)) in script().into_iter().enumerate() {
        let mut params = json!({"name": name, "arguments": arguments});
        if meta {
            params["_meta"] = json!({});
        }
        calls.push(s.ask(request(&format!("c{i}"), "tools/call", params)).await);
    }
    s.end().await;
    Answers { init, tools, calls }
}

/// One HTTP/1.1 request to `/mcp` (`Connection: close`): the status, the
/// head, and the JSON-RPC message the body carries (JSON or SSE), if any.
async fn http(
    addr: SocketAddr,
    method: &str,
    body: Option<&Value>,
    headers: &[(&str, &str)],
) -> (u16, String, Option<Value>) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut head = format!(
        "{method} /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\
         Connection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(ANSWER_WAIT, stream.read_to_end(&mut raw))
        .await
        .expect("an HTTP answer in time")
        .unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap();
    let chunked = head
        .lines()
        .any(|l| l.eq_ignore_ascii_case("transfer-encoding: chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    // SSE: the message is the `data:` line that holds a JSON-RPC answer.
    let message = body
        .lines()
        .map(|l| l.strip_prefix("data:").unwrap_or(l).trim())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v.get("id").is_some());
    (status, head.to_string(), message)
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap();
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].strip_prefix("\r\n").unwrap_or(&rest[size..]);
    }
    out
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// The script through the HTTP front, in one session that ends with
/// `DELETE`; also returns the status of that `DELETE`.
async fn over_http(options: McpOptions) -> (Answers, u16) {
    let ws = workspace();
    let shutdown = CancellationToken::new();
    let (ready, bound) = tokio::sync::oneshot::channel();
    let server = tokio::spawn(serve_http(
        factory(ws.path()),
        HttpOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            token: None,
            mcp: options,
            host: None,
            limits: cubby::host::http::ConnectionLimits::for_this_process(),
        },
        shutdown.clone(),
        Some(ready),
    ));
    let addr = bound.await.unwrap();
    let (status, head, init) = http(addr, "POST", Some(&initialize()), &[]).await;
    assert_eq!(status, 200, "{head}");
    let session = header(&head, "mcp-session-id")
        .expect("a session id")
        .to_string();
    let headers = [
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", REVISION),
    ];
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, head, _) = http(addr, "POST", Some(&note), &headers).await;
    assert_eq!(status, 202, "{head}");
    let ask = |message: Value| async move {
        let (status, head, answer) = http(addr, "POST", Some(&message), &headers).await;
        assert_eq!(status, 200, "{head}");
        answer.unwrap_or_else(|| panic!("no answer to {message}: {head}"))
    };
    let tools = ask(request("list", "tools/list", json!({}))).await;
    let mut calls = Vec::new();
    for (i, (name, arguments, _)) in script().into_iter().enumerate() {
        let params = json!({"name": name, "arguments": arguments});
        calls.push(ask(request(&format!("c{i}"), "tools/call", params)).await);
    }
    let (deleted, _, _) = http(addr, "DELETE", None, &headers).await;
    shutdown.cancel();
    server.await.unwrap().unwrap();
    (
        Answers {
            init: init.unwrap(),
            tools,
            calls,
        },
        deleted,
    )
}

/// Checks one front's answers against the setting.
fn check_shape(front: &str, answers: &Answers, options: McpOptions) {
    let on = options.structured_content;
    let tools = answers.tools["result"]["tools"].as_array().unwrap();
    assert!(tools.len() >= 10, "{front}: {}", answers.tools);
    let instructions = answers.init["result"]["instructions"].as_str().unwrap();
    assert!(
        instructions.chars().count() <= cubby_mcp::MAX_INSTRUCTIONS_CHARS,
        "{front}: {instructions}"
    );
    for tool in tools {
        let description = tool["description"].as_str().unwrap();
        assert!(
            description.chars().count() <= cubby::MAX_DESCRIPTION_CHARS,
            "{front}: {tool}"
        );
        assert_eq!(
            tool.get("outputSchema").is_some(),
            on,
            "{front}, structured_content = {on}: {tool}"
        );
        assert_eq!(tool["inputSchema"]["type"], "object", "{front}: {tool}");
    }
    for ((name, arguments, _), answer) in script().iter().zip(&answers.calls) {
        let result = &answer["result"];
        assert!(result.is_object(), "{front} {name} {arguments}: {answer}");
        let content = result["content"].as_array().unwrap();
        assert_eq!(content[0]["type"], "text", "{front} {name}: {result}");
        let text = content[0]["text"].as_str().unwrap();
        assert!(!text.is_empty(), "{front} {name}: {result}");
        let is_error = result["isError"] == true;
        assert_eq!(
            is_error,
            text.starts_with("ERROR "),
            "{front} {name}: {result}"
        );
        assert_eq!(
            result.get("structuredContent").is_some(),
            on && !is_error,
            "{front}, structured_content = {on}, {name} {arguments}: {result}"
        );
        if !is_error && on {
            // The structured value is the one the schema describes.
            let schema = tools.iter().find(|t| t["name"] == *name).unwrap();
            let properties = schema["outputSchema"]["properties"].as_object().unwrap();
            for key in result["structuredContent"].as_object().unwrap().keys() {
                assert!(
                    properties.contains_key(key),
                    "{front} {name}: `{key}` not in {schema}"
                );
            }
        }
    }
    // What the script is there to show, whatever the setting.
    let text = |i: usize| {
        answers.calls[i]["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
    };
    assert_eq!(
        text(0),
        "     1\talpha\n     2\tbeta\n     3\tgamma\n",
        "{front}"
    );
    assert!(
        text(2).starts_with("ERROR not_found:"),
        "{front}: {}",
        text(2)
    );
    assert!(
        text(8).starts_with("ERROR not_read:"),
        "{front}: {}",
        text(8)
    );
    assert!(text(9).contains("+BETA"), "{front}: {}", text(9));
    assert!(text(12).contains("M a.txt"), "{front}: {}", text(12));
    assert!(text(13).starts_with("OK exit=0"), "{front}: {}", text(13));
    assert!(
        text(14).starts_with("FAILED exit=3"),
        "{front}: {}",
        text(14)
    );
    assert!(
        text(16).starts_with("ERROR path_escape:"),
        "{front}: {}",
        text(16)
    );
}

/// The answers of two fronts are the same.
fn same(a_front: &str, a: &Answers, b_front: &str, b: &Answers) {
    let tools = |x: &Answers| x.tools["result"].clone();
    assert_eq!(tools(a), tools(b), "tools/list: {a_front} vs {b_front}");
    assert_eq!(
        a.init["result"]["instructions"], b.init["result"]["instructions"],
        "instructions: {a_front} vs {b_front}"
    );
    assert_eq!(
        a.init["result"]["capabilities"], b.init["result"]["capabilities"],
        "capabilities: {a_front} vs {b_front}"
    );
    for (i, (name, arguments, stable)) in script().into_iter().enumerate() {
        let (x, y) = (&a.calls[i]["result"], &b.calls[i]["result"]);
        if stable {
            assert_eq!(x, y, "{name} {arguments}: {a_front} vs {b_front}");
        } else {
            let keys = |v: &Value| {
                let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
                k.sort();
                k
            };
            assert_eq!(keys(x), keys(y), "{name}: {a_front} vs {b_front}");
            if let (Some(sx), Some(sy)) = (x.get("structuredContent"), y.get("structuredContent")) {
                assert_eq!(keys(sx), keys(sy), "{name}: {a_front} vs {b_front}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_fronts_answer_alike_with_structured_content_off_and_on() {
    for structured_content in [false, true] {
        let options = McpOptions {
            structured_content,
            ..McpOptions::default()
        };
        let direct = over_stdio(options, false).await;
        let rmcp = over_stdio(options, true).await;
        let (http, deleted) = over_http(options).await;
        // Ending the session answers 200 or 204 (SPEC §6), not 202.
        assert!(matches!(deleted, 200 | 204), "DELETE answered {deleted}");
        check_shape("stdio direct", &direct, options);
        check_shape("stdio rmcp", &rmcp, options);
        check_shape("http", &http, options);
        same("stdio direct", &direct, "stdio rmcp", &rmcp);
        same("stdio direct", &direct, "http", &http);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_sends_no_structured_content() {
    let answers = over_stdio(McpOptions::default(), false).await;
    check_shape(
        "stdio default",
        &answers,
        McpOptions {
            structured_content: false,
            ..McpOptions::default()
        },
    );
}
