//! Custom tools over MCP. The example `examples/custom_tool.rs` is
//! compiled into this test binary (the same source, `mod example`: cargo
//! gives integration tests the paths of binaries only, not of examples, and
//! a nested `cargo build` would compile cubby a second time), which runs
//! itself as the example (its `main`, selected by [`AS_EXAMPLE`]) and
//! speaks to it over its real stdio: `initialize`, `tools/list` showing
//! the custom tool with its derived schema, a `tools/call` that publishes
//! an artifact (its link, its bytes through `resources/read`), bad
//! arguments, a call cancelled with `notifications/cancelled` (its handler
//! stops: its log line on the example's stderr says so), the next call
//! answered, the end at EOF. And a panicking custom tool through the stdio
//! front: `ERROR internal`, and the server keeps serving.
//!
//! The binary has its own `main` (`harness = false` in Cargo.toml): the
//! example's stdout must carry nothing but its MCP answers, and libtest
//! would print there first. It runs the tests in [`TESTS`] one after the
//! other, takes name filters (`--exact` too) and `--list`, and exits
//! non-zero when one fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../examples/custom_tool.rs"]
#[allow(dead_code)]
mod example;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use cubby::{CustomTool, ToolContext, ToolResult, Toolset};
use cubby_mcp::{McpOptions, ToolsetFactory, serve_stdio};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

/// The protocol revision of the sessions.
const REVISION: &str = "2025-11-25";
/// Longest wait for one answer or one line (a busy machine).
const WAIT: Duration = Duration::from_secs(60);

/// Set in the environment of the child this binary starts: it then runs
/// as the example, with the arguments it was given.
const AS_EXAMPLE: &str = "CUBBY_TEST_AS_EXAMPLE";

/// The tests, by name.
const TESTS: [(&str, fn()); 2] = [
    (
        "the_example_serves_its_custom_tool_over_stdio",
        the_example_serves_its_custom_tool_over_stdio,
    ),
    (
        "a_panicking_custom_tool_is_internal_and_the_stdio_server_keeps_serving",
        a_panicking_custom_tool_is_internal_and_the_stdio_server_keeps_serving,
    ),
];

/// libtest's options that take a value (skipped, not taken as filters).
const VALUE_OPTIONS: [&str; 6] = [
    "--test-threads",
    "--skip",
    "--color",
    "--format",
    "--logfile",
    "-Z",
];

fn main() -> ExitCode {
    if std::env::var_os(AS_EXAMPLE).is_some() {
        return example::main();
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut filters = Vec::new();
    let mut skips = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--skip" {
            skips.extend(it.next().cloned());
        } else if VALUE_OPTIONS.contains(&arg.as_str()) {
            it.next();
        } else if !arg.starts_with('-') {
            filters.push(arg.clone());
        }
    }
    let exact = args.iter().any(|a| a == "--exact");
    let chosen: Vec<(&str, fn())> = TESTS
        .into_iter()
        .filter(|(name, _)| {
            let hit = |f: &String| {
                if exact {
                    name == f
                } else {
                    name.contains(f.as_str())
                }
            };
            (filters.is_empty() || filters.iter().any(hit)) && !skips.iter().any(hit)
        })
        .collect();
    if args.iter().any(|a| a == "--list") {
        for (name, _) in &chosen {
            println!("{name}: test");
        }
        return ExitCode::SUCCESS;
    }
    // No test of this binary is ignored.
    if args.iter().any(|a| a == "--ignored") {
        println!("\nrunning 0 tests\n\ntest result: ok. 0 passed; 0 failed\n");
        return ExitCode::SUCCESS;
    }
    println!("\nrunning {} tests", chosen.len());
    let mut failed = Vec::new();
    for (name, test) in &chosen {
        let ok = std::panic::catch_unwind(test).is_ok();
        println!("test {name} ... {}", if ok { "ok" } else { "FAILED" });
        if !ok {
            failed.push(*name);
        }
    }
    println!(
        "\ntest result: {}. {} passed; {} failed\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        chosen.len() - failed.len(),
        failed.len()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        for name in failed {
            println!("failed: {name}");
        }
        ExitCode::FAILURE
    }
}

/// This binary, started as the example with `args`.
fn example(args: &[&std::ffi::OsStr]) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.env(AS_EXAMPLE, "1").args(args);
    command
}

/// Lines a child writes on one stream, read on a thread of their own.
fn lines(stream: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The example, running, and its streams.
struct Example {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Receiver<String>,
    stderr: Receiver<String>,
}

impl Example {
    fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a request and returns its answer (notifications skipped).
    fn ask(&mut self, message: &Value) -> Value {
        self.send(message);
        loop {
            let line = self.stdout.recv_timeout(WAIT).expect("an answer in time");
            let answer: Value = serde_json::from_str(&line).unwrap();
            if answer["id"] == message["id"] {
                return answer;
            }
        }
    }

    /// Waits for a line on stderr that contains `text`.
    fn wait_log(&self, text: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(line) if line.contains(text) => return line,
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                    panic!("no line with `{text}` on the example's stderr")
                }
            }
        }
    }
}

impl Drop for Example {
    fn drop(&mut self) {
        // A test that failed half-way leaves no process behind.
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn initialize() -> Value {
    request(
        1,
        "initialize",
        json!({"protocolVersion": REVISION, "capabilities": {},
               "clientInfo": {"name": "custom-tools", "version": "1"}}),
    )
}

fn call(id: u64, name: &str, arguments: Value) -> Value {
    request(
        id,
        "tools/call",
        json!({"name": name, "arguments": arguments}),
    )
}

/// The text of a `tools/call` answer, and whether it is an error.
fn text_of(answer: &Value) -> (String, bool) {
    let result = &answer["result"];
    (
        result["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        result["isError"] == true,
    )
}

fn the_example_serves_its_custom_tool_over_stdio() {
    let store = tempfile::tempdir().unwrap();
    let mut child = example(&["--store".as_ref(), store.path().as_os_str()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take();
    let stdout = lines(child.stdout.take().unwrap());
    let stderr = lines(child.stderr.take().unwrap());
    let mut ex = Example {
        child,
        stdin,
        stdout,
        stderr,
    };

    let init = ex.ask(&initialize());
    assert_eq!(init["result"]["serverInfo"]["name"], "cubby", "{init}");
    ex.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));

    // tools/list: the custom tool after the built-in ones, its schema
    // derived from its Params.
    let list = ex.ask(&request(2, "tools/list", json!({})));
    let tools = list["result"]["tools"].as_array().unwrap();
    assert!(tools.iter().any(|t| t["name"] == "read_file"));
    let tool = tools.last().unwrap();
    assert_eq!(tool["name"], "make_report", "{tool}");
    assert!(
        tool["description"]
            .as_str()
            .unwrap()
            .starts_with("Makes a CSV report")
    );
    let schema = &tool["inputSchema"];
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(schema["required"], json!(["rows"]));
    assert_eq!(schema["properties"]["rows"]["type"], "integer");
    assert_eq!(schema["properties"]["rows"]["minimum"], 0);
    assert_eq!(
        schema["properties"]["rows"]["description"],
        "Rows of the report, 1 to 100,000."
    );
    assert!(schema["properties"]["delay_ms"].is_object());
    assert!(schema.get("$schema").is_none());
    assert_eq!(tool["annotations"]["readOnlyHint"], true);
    assert!(
        tool.get("outputSchema").is_none(),
        "structured content is off"
    );

    // A call that publishes: the text says where the artifact is, and the
    // store holds the bytes.
    let answer = ex.ask(&call(
        3,
        "make_report",
        json!({"rows": 4, "name": "squares.csv"}),
    ));
    let (text, is_error) = text_of(&answer);
    assert!(!is_error, "{answer}");
    let csv = "n,square,running_sum\n1,1,1\n2,4,5\n3,9,14\n4,16,30\n";
    let (head, line) = text.split_once('\n').unwrap();
    assert_eq!(
        head,
        "Made a report of 4 rows; the sum of the squares is 30."
    );
    assert!(
        line.starts_with(&format!(
            "artifact squares.csv — text/csv, {} B, sha256:",
            csv.len()
        )),
        "{text}"
    );
    // The artifact's link, and its bytes through resources/read.
    let link = &answer["result"]["content"][1];
    assert_eq!(link["type"], "resource_link", "{answer}");
    let uri = link["uri"].as_str().unwrap();
    assert!(uri.starts_with("cubby://artifacts/") && uri.ends_with("/squares.csv"));
    assert!(line.ends_with(uri), "{line}");
    let read = ex.ask(&request(30, "resources/read", json!({"uri": uri})));
    assert_eq!(read["result"]["contents"][0]["text"], csv, "{read}");
    // Its log line, with the MCP request id as the call id.
    ex.wait_log("[tool:make_report] call 3: 4 rows into squares.csv");

    // Bad arguments: named, and the handler is not called.
    let answer = ex.ask(&call(4, "make_report", json!({"rows": "many"})));
    let (text, is_error) = text_of(&answer);
    assert!(is_error);
    assert!(
        text.starts_with(
            "ERROR invalid_input: arguments for make_report do not fit its schema: `rows`:"
        ),
        "{text}"
    );

    // A slow call, cancelled once its handler is at work: the handler
    // stops (its own fallback would be 100,000 s away).
    ex.send(&call(
        5,
        "make_report",
        json!({"rows": 100_000, "delay_ms": 1000}),
    ));
    ex.wait_log("[tool:make_report] call 5: row 1 of 100000");
    let cancelled_at = Instant::now();
    ex.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": 5, "reason": "the test cancels"}}),
    );
    let line = ex.wait_log("call 5: cancelled after");
    let took = cancelled_at.elapsed();
    assert!(
        line.ends_with("of 100000 rows; nothing published"),
        "{line}"
    );
    eprintln!("cancellation reached the handler over MCP stdio in {took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");

    // The server keeps serving.
    let answer = ex.ask(&call(6, "make_report", json!({"rows": 1})));
    let (text, is_error) = text_of(&answer);
    assert!(!is_error, "{answer}");
    assert!(
        text.contains("\nartifact report.csv — text/csv, "),
        "{text}"
    );

    // EOF ends the server.
    drop(ex.stdin.take());
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = ex.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the example did not end at EOF");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoParams {}

/// Panics.
struct Panics;

impl CustomTool for Panics {
    type Params = NoParams;
    fn name(&self) -> &str {
        "falls_over"
    }
    fn description(&self) -> String {
        "Panics; use it to test the server.".into()
    }
    fn call(&self, _: NoParams, _: &ToolContext<'_>) -> cubby::Result<ToolResult> {
        panic!("the handler fell over")
    }
}

/// Says its call id.
struct Says;

impl CustomTool for Says {
    type Params = NoParams;
    fn name(&self) -> &str {
        "says"
    }
    fn description(&self) -> String {
        "Says its call id; use it to test the server.".into()
    }
    fn call(&self, _: NoParams, ctx: &ToolContext<'_>) -> cubby::Result<ToolResult> {
        Ok(ToolResult::text(format!("call {}", ctx.call_id())))
    }
}

fn a_panicking_custom_tool_is_internal_and_the_stdio_server_keeps_serving() {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(a_panicking_custom_tool_over_stdio());
}

async fn a_panicking_custom_tool_over_stdio() {
    let factory: ToolsetFactory = std::sync::Arc::new(|| {
        Toolset::builder(cubby::virtual_sandbox(cubby::MemoryFs::new()))
            .tool(Panics)
            .tool(Says)
            .build()
    });
    let (mut input, server_in) = tokio::io::duplex(1 << 20);
    let (server_out, output) = tokio::io::duplex(1 << 20);
    let server = tokio::spawn(serve_stdio(
        factory,
        McpOptions::default(),
        server_in,
        server_out,
    ));
    let mut output = tokio::io::BufReader::new(output);
    {
        let mut ask = async |message: Value| -> Value {
            let mut line = message.to_string().into_bytes();
            line.push(b'\n');
            input.write_all(&line).await.unwrap();
            loop {
                let mut line = String::new();
                let n = tokio::time::timeout(WAIT, output.read_line(&mut line))
                    .await
                    .expect("an answer in time")
                    .unwrap();
                assert!(n > 0, "the server ended");
                let answer: Value = serde_json::from_str(&line).unwrap();
                if answer["id"] == message["id"] {
                    return answer;
                }
            }
        };
        ask(initialize()).await;
        let answer = ask(call(2, "falls_over", json!({}))).await;
        let (text, is_error) = text_of(&answer);
        assert!(is_error, "{answer}");
        assert!(
            text.starts_with(
                "ERROR internal: falls_over failed unexpectedly; the server is still running"
            ),
            "{text}"
        );
        for id in 3..5 {
            let answer = ask(call(id, "says", json!({}))).await;
            assert_eq!(text_of(&answer), (format!("call {id}"), false), "{answer}");
        }
    }
    drop(input);
    server.await.unwrap().unwrap();
}
