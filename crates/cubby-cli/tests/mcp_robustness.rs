//! Robustness of the MCP fronts: well over 1,000 malformed, truncated,
//! oversized and wrong-typed messages, over stdio and over HTTP; the server
//! never dies and answers a valid call afterwards.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const INIT: &str = r#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"robustness","version":"1"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// Deterministic pseudo-random malformed messages.
fn malformed(count: usize) -> Vec<Vec<u8>> {
    let shapes: Vec<Vec<u8>> = vec![
        b"not json at all".to_vec(),
        b"{".to_vec(),
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"read_file\",\"arguments\":{\"path\":".to_vec(),
        b"[]".to_vec(),
        b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]".to_vec(),
        b"42".to_vec(),
        b"\"a string\"".to_vec(),
        b"null".to_vec(),
        b"{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}".to_vec(),
        b"{\"jsonrpc\":\"2.0\",\"id\":{\"x\":1},\"method\":\"ping\"}".to_vec(),
        b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":42}".to_vec(),
        b"{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/call\",\"params\":[1,2]}".to_vec(),
        b"{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":{\"name\":7}}".to_vec(),
        b"{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"tools/call\",\"params\":{\"name\":\"read_file\",\"arguments\":\"oops\"}}".to_vec(),
        b"{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"tools/call\",\"params\":{\"name\":\"no_such_tool\",\"arguments\":{}}}".to_vec(),
        b"{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"tools/call\",\"params\":{\"name\":\"read_file\",\"arguments\":{\"path\":[\"x\"]}}}".to_vec(),
        b"{\"jsonrpc\":\"2.0\",\"id\":13,\"method\":\"no/such/method\"}".to_vec(),
        b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/unknown\"}".to_vec(),
        b"{\"jsonrpc\":\"2.0\",\"id\":14,\"result\":{}}".to_vec(),
        b"\xff\xfe\xfd invalid utf-8".to_vec(),
        b"{\"jsonrpc\":\"2.0\",\"id\":15,\"method\":\"tools/list\",\"params\":{\"cursor\":{}}}".to_vec(),
        b"{\"jsonrpc\":\"2.0\",\"id\":16,\"method\":\"initialize\",\"params\":{}}".to_vec(),
    ];
    let mut out = Vec::with_capacity(count);
    let mut seed: u64 = 7;
    for i in 0..count {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut msg = shapes[i % shapes.len()].clone();
        // Every third message is also truncated at a random point.
        if i % 3 == 2 && msg.len() > 2 {
            let cut = 1 + (seed >> 33) as usize % (msg.len() - 1);
            msg.truncate(cut);
        }
        out.push(msg);
    }
    out
}

struct StdioServer {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl StdioServer {
    fn start(root: &std::path::Path) -> StdioServer {
        StdioServer::start_with(root, None)
    }

    /// With `config` (a file outside `root`) as `--config`.
    fn start_with(root: &std::path::Path, config: Option<&std::path::Path>) -> StdioServer {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cubby"));
        command
            .args(["mcp", "--provider", "local", "--root"])
            .arg(root);
        StdioServer::spawn(command, config)
    }

    /// `cubby mcp` with `provider`, started by util-linux's `prlimit` with
    /// the open-files limits `soft:hard` (it execs cubby: the same pid).
    fn start_with_nofile(
        root: &std::path::Path,
        provider: &str,
        soft: u64,
        hard: u64,
    ) -> StdioServer {
        let mut command = Command::new("prlimit");
        command
            .arg(format!("--nofile={soft}:{hard}"))
            .arg(env!("CARGO_BIN_EXE_cubby"))
            .args(["mcp", "--provider", provider, "--root"])
            .arg(root);
        StdioServer::spawn(command, None)
    }

    fn spawn(mut command: Command, config: Option<&std::path::Path>) -> StdioServer {
        if let Some(config) = config {
            command.arg("--config").arg(config);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        StdioServer {
            child,
            stdin: Some(stdin),
            lines: rx,
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(bytes).unwrap();
        stdin.write_all(b"\n").unwrap();
    }

    /// Waits for the response with this id, returning it and every other
    /// line seen meanwhile.
    fn wait_for(&self, id: &Value) -> (Value, Vec<Value>) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut others = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .expect("no answer from cubby mcp");
            let v: Value = serde_json::from_str(&line).unwrap();
            if v.get("id") == Some(id) && v.get("method").is_none() {
                return (v, others);
            }
            others.push(v);
        }
    }
}

/// How long a server may take to end its session after EOF before it is
/// killed (a killed server leaves its private artifact store behind).
const EXIT_WAIT: Duration = Duration::from_secs(30);

impl Drop for StdioServer {
    /// EOF (the session ends, its store is removed), a kill only if the
    /// server does not exit.
    fn drop(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + EXIT_WAIT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// With the stdio fast path (the default) and without it (`[mcp]
/// fast_path = false`: every call through rmcp's dispatch).
#[test]
fn stdio_survives_a_flood_of_bad_messages() {
    stdio_survives_a_flood_of_bad_messages_with(None);
    let conf = tempfile::tempdir().unwrap();
    let file = conf.path().join("cubby.toml");
    std::fs::write(&file, "[mcp]\nfast_path = false\n").unwrap();
    stdio_survives_a_flood_of_bad_messages_with(Some(&file));
}

fn stdio_survives_a_flood_of_bad_messages_with(config: Option<&std::path::Path>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "alive\n").unwrap();
    let mut server = StdioServer::start_with(dir.path(), config);
    // Garbage before the handshake is answered or dropped, not fatal.
    for msg in malformed(60) {
        server.send(&msg);
    }
    server.send(INIT.as_bytes());
    let (init, before) = server.wait_for(&json!("init"));
    assert_eq!(init["result"]["serverInfo"]["name"], "cubby");
    assert!(
        before.iter().any(|v| v["error"]["code"] == -32700),
        "{before:?}"
    );
    server.send(INITIALIZED.as_bytes());
    let flood = malformed(1200);
    for msg in &flood {
        server.send(msg);
    }
    // Oversized: a 65 MiB line is skipped and answered, never buffered whole.
    let mut huge = b"{\"jsonrpc\":\"2.0\",\"id\":\"huge\",\"method\":\"tools/call\",\"params\":{\"name\":\"write_file\",\"arguments\":{\"path\":\"h\",\"content\":\"".to_vec();
    huge.resize(65 * 1024 * 1024, b'x');
    huge.extend_from_slice(b"\"}}}");
    server.send(&huge);
    server.send(br#"{"jsonrpc":"2.0","id":"final","method":"tools/call","params":{"name":"read_file","arguments":{"path":"a.txt"}}}"#);
    let (last, seen) = server.wait_for(&json!("final"));
    assert_eq!(
        last["result"]["content"][0]["text"], "     1\talive\n",
        "{last}"
    );
    let parse_errors = seen.iter().filter(|v| v["error"]["code"] == -32700).count();
    let invalid = seen.iter().filter(|v| v["error"]["code"] == -32600).count();
    assert!(parse_errors > 300, "{parse_errors} parse errors answered");
    assert!(invalid > 100, "{invalid} invalid requests answered");
    assert!(seen.iter().any(|v| {
        v["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("larger than the limit")
    }));
    // Tool-level problems are tool results, not protocol errors.
    assert!(
        seen.iter().any(|v| v["result"]["isError"] == true),
        "no tool error results seen"
    );
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "cubby mcp exited"
    );
}

/// The soft and hard open-files limits of process `pid`.
fn nofile_limits(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .to_string();
    let mut fields = line["Max open files".len()..].split_whitespace();
    (
        fields.next().unwrap().to_string(),
        fields.next().unwrap().to_string(),
    )
}

/// A tools/call request.
fn tool_call(id: &str, tool: &str, args: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": args}
    }))
    .unwrap()
}

/// Red-team pass 5, F10: background processes hold the server's
/// descriptors. At start cubby raises its soft limit to the hard one; with
/// both low, a start past the budget is refused with `ERROR limit` (never
/// `EMFILE` in the middle of a spawn) and the server keeps serving.
#[test]
fn background_processes_do_not_exhaust_the_servers_descriptors() {
    const SOFT: u64 = 256;
    const MOST_STARTS: usize = 200;
    const STOPPED: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "alive\n").unwrap();
    // The soft limit raised to the hard one.
    let mut raised = StdioServer::start_with_nofile(dir.path(), "local", SOFT, 4 * SOFT);
    raised.send(INIT.as_bytes());
    raised.wait_for(&json!("init"));
    let limits = nofile_limits(raised.child.id());
    assert_eq!(limits, ((4 * SOFT).to_string(), (4 * SOFT).to_string()));
    drop(raised);
    // Both low: starts are refused before the descriptors run out.
    let mut server = StdioServer::start_with_nofile(dir.path(), "linux", SOFT, SOFT);
    server.send(INIT.as_bytes());
    server.wait_for(&json!("init"));
    server.send(INITIALIZED.as_bytes());
    let mut refused = None;
    for i in 0..MOST_STARTS {
        let id = format!("p{i}");
        server.send(&tool_call(
            &id,
            "start_process",
            json!({"name": id, "command": "sleep 600"}),
        ));
        let (answer, _) = server.wait_for(&json!(id));
        if answer["result"]["isError"] == true {
            refused = Some((i, answer["result"]["content"][0]["text"].clone()));
            break;
        }
    }
    let (started, text) = refused.expect("every start succeeded: nothing bounded them");
    let text = text.as_str().unwrap_or_default().to_string();
    assert!(started > 0, "no process started: {text}");
    assert!(
        text.starts_with("ERROR limit:") && text.contains("open files"),
        "start #{started} failed otherwise: {text}"
    );
    // Still serving: the file tools, and a command once a process stops.
    server.send(&tool_call("read", "read_file", json!({"path": "a.txt"})));
    let (read, _) = server.wait_for(&json!("read"));
    assert_eq!(
        read["result"]["content"][0]["text"], "     1\talive\n",
        "{read}"
    );
    // Stopping a few frees what a command needs (each holds about three).
    for i in 0..STOPPED.min(started) {
        let id = format!("stop{i}");
        server.send(&tool_call(
            &id,
            "stop_process",
            json!({"name": format!("p{i}")}),
        ));
        let (stop, _) = server.wait_for(&json!(id));
        assert_ne!(stop["result"]["isError"], true, "{stop}");
    }
    server.send(&tool_call(
        "run",
        "run",
        json!({"command": "echo still-serving"}),
    ));
    let (run, _) = server.wait_for(&json!("run"));
    assert!(
        run["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("still-serving"),
        "{run}"
    );
}

/// Most base64 characters an image block may carry: Anthropic's API takes
/// images of up to 5 MB of base64 (SPEC §5.1: 3.75 MB before encoding).
const MAX_IMAGE_BASE64_CHARS: usize = 5_000_000;

/// A PNG of 16-bit RGBA noise, `edge` px square: about 8 bytes a pixel.
fn noise_png(edge: u32) -> Vec<u8> {
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let samples: Vec<u16> = (0..edge as usize * edge as usize * 4)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 16) as u16
        })
        .collect();
    let img = image::ImageBuffer::<image::Rgba<u16>, _>::from_raw(edge, edge, samples).unwrap();
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    out.into_inner()
}

#[test]
fn stdio_image_blocks_stay_within_the_clients_limits() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().unwrap();
    // Within the 1,568 px edge limit, but ~20 MB: as it is, 27 MB of base64,
    // over Anthropic's 5 MB and rmcp's 16 MiB message cap.
    let png = noise_png(1568);
    assert!(png.len() > 19_000_000, "{}", png.len());
    std::fs::write(dir.path().join("noise.png"), &png).unwrap();
    let mut server = StdioServer::start(dir.path());
    server.send(INIT.as_bytes());
    server.wait_for(&json!("init"));
    server.send(INITIALIZED.as_bytes());
    server.send(br#"{"jsonrpc":"2.0","id":"view","method":"tools/call","params":{"name":"view_file","arguments":{"path":"noise.png"}}}"#);
    let (answer, _) = server.wait_for(&json!("view"));
    let result = &answer["result"];
    assert_eq!(result["isError"], false, "{}", result["content"][0]);
    let content = result["content"].as_array().unwrap();
    // The text, the image, and the file as an artifact (`view_file`
    // publishes what it shows: SPEC §5.1), whose bytes are not inlined.
    assert_eq!(
        content.len(),
        3,
        "text, image and resource link: {content:?}"
    );
    assert_eq!(content[0]["type"], "text");
    let text = content[0]["text"].as_str().unwrap();
    let block = content
        .iter()
        .find(|b| b["type"] == "image")
        .expect("an image block");
    // The artifact is the image shown (red-team pass 4, R4-1), named for
    // the format it was sent in.
    let link = content
        .iter()
        .find(|b| b["type"] == "resource_link")
        .expect("a resource link");
    let shown_name = match block["mimeType"].as_str() {
        Some("image/jpeg") => "/noise.jpg",
        _ => "/noise.png",
    };
    assert!(
        link["uri"]
            .as_str()
            .is_some_and(|u| u.starts_with("cubby://artifacts/") && u.ends_with(shown_name)),
        "{link}"
    );
    assert_eq!(link["mimeType"], block["mimeType"], "{link}");
    let data = block["data"].as_str().unwrap();
    assert!(
        data.len() <= MAX_IMAGE_BASE64_CHARS,
        "{} base64 characters: {text}",
        data.len()
    );
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap();
    let format = image::guess_format(&bytes).unwrap();
    assert_eq!(block["mimeType"], format.to_mime_type(), "{text}");
    let img = image::load_from_memory_with_format(&bytes, format).unwrap();
    assert!(img.width() <= 1568 && img.height() <= 1568);
    assert!(
        text.contains(&format!("shown as {}", format.to_mime_type())),
        "{text}"
    );
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "cubby mcp exited"
    );
}

/// The decoding budget of `view_file` (SPEC §5.1: 256 MiB).
const MAX_DECODE_BYTES: u64 = 256 * 1024 * 1024;
/// What the server may hold beside the decoding budget while it views an
/// image: the file's bytes, the downscaled image and its encoding.
const VIEW_OVERHEAD_BYTES: u64 = 32 * 1024 * 1024;

/// The peak resident memory of a process so far (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// A valid 8-bit RGBA PNG of `edge`×`edge` black pixels, written row by
/// row: a few hundred KB on disk, `edge² × 4` bytes decoded.
fn black_png(edge: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, edge, edge);
    encoder.set_color(png::ColorType::Rgba);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(png::Compression::Fast);
    let mut writer = encoder.write_header().unwrap();
    let mut stream = writer.stream_writer().unwrap();
    let row = vec![0u8; edge as usize * 4];
    for _ in 0..edge {
        stream.write_all(&row).unwrap();
    }
    stream.finish().unwrap();
    writer.finish().unwrap();
    out
}

#[test]
fn stdio_view_file_stays_within_its_memory_bound() {
    let dir = tempfile::tempdir().unwrap();
    // The largest image view_file decodes: 8,000×8,000 px, 244 MiB of RGBA.
    std::fs::write(dir.path().join("big.png"), black_png(8_000)).unwrap();
    let mut server = StdioServer::start(dir.path());
    server.send(INIT.as_bytes());
    server.wait_for(&json!("init"));
    server.send(INITIALIZED.as_bytes());
    let before = peak_rss(server.child.id());
    server.send(br#"{"jsonrpc":"2.0","id":"view","method":"tools/call","params":{"name":"view_file","arguments":{"path":"big.png"}}}"#);
    let (answer, _) = server.wait_for(&json!("view"));
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert_eq!(answer["result"]["content"][1]["type"], "image");
    let grown = peak_rss(server.child.id()).saturating_sub(before);
    assert!(
        grown <= MAX_DECODE_BYTES + VIEW_OVERHEAD_BYTES,
        "viewing an 8,000×8,000 px PNG grew the peak memory by {} MiB",
        grown / (1024 * 1024)
    );
}

#[test]
fn http_survives_a_flood_of_bad_messages() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "alive\n").unwrap();
    let mut server = common::Serve::start(dir.path());
    let port = server.port;
    let post = |body: &[u8], headers: &[(&str, &str)]| common::request(port, "POST", body, headers);
    let (status, head, _) = post(INIT.as_bytes(), &[]);
    assert_eq!(status, 200, "{head}");
    let session = head
        .lines()
        .find_map(|l| {
            l.strip_prefix("mcp-session-id: ")
                .or_else(|| l.strip_prefix("Mcp-Session-Id: "))
        })
        .expect("a session id")
        .trim()
        .to_string();
    let sid = [
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    post(INITIALIZED.as_bytes(), &sid);
    let mut statuses = std::collections::BTreeMap::new();
    for msg in malformed(1100) {
        let (status, _, _) = post(&msg, &sid);
        assert!(
            status != 0 && status < 500 || status == 500,
            "no HTTP answer"
        );
        *statuses.entry(status).or_insert(0) += 1;
    }
    // Wrong Host and Origin: DNS-rebinding protection.
    let (status, _, _) = {
        let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        let body = INIT.as_bytes();
        let req = format!(
            "POST /mcp HTTP/1.1\r\nHost: evil.example\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        s.write_all(req.as_bytes()).unwrap();
        s.write_all(body).unwrap();
        let mut raw = String::new();
        let _ = s.read_to_string(&mut raw);
        let status: u16 = raw
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        (status, (), ())
    };
    assert_eq!(status, 403);
    let (status, _, _) = post(INIT.as_bytes(), &[("Origin", "http://evil.example")]);
    assert_eq!(status, 403);
    // Oversized body.
    let huge = vec![b'x'; 70 * 1024 * 1024];
    let (status, _, _) = post(&huge, &sid);
    assert_eq!(status, 413);
    // Still serving.
    let call = br#"{"jsonrpc":"2.0","id":"final","method":"tools/call","params":{"name":"read_file","arguments":{"path":"a.txt"}}}"#;
    let (status, _, body) = post(call, &sid);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#"1\talive"#), "{body}");
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "cubby serve exited"
    );
    assert!(
        statuses.keys().all(|s| *s < 500),
        "server errors: {statuses:?}"
    );
}

/// Sends `initialize` to the server on `port` from a python process (as
/// `uid`, when given) and says what came back: the status line's first
/// bytes, or `closed`.
fn initialize_as(port: u16, uid: Option<u32>) -> String {
    use std::os::unix::process::CommandExt;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{INIT}",
        INIT.len()
    );
    let code = format!(
        "import socket\ns = socket.create_connection((\"127.0.0.1\", {port}))\ns.settimeout(30)\ns.sendall(bytes.fromhex(\"{}\"))\ntry:\n  got = s.recv(12)\nexcept OSError:\n  got = b\"\"\nprint(got.decode() if got else \"closed\")",
        request
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    let mut cmd = std::process::Command::new("python3");
    cmd.args(["-c", &code]);
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The uid of `nobody`, another user than the suite's.
const NOBODY: u32 = 65534;

/// Red-team pass 3, R3-3: on loopback without a token, any local user
/// drove the server (and ran commands with its rights). Only sockets of the
/// server's own user are let in; the control: the same request from the
/// server's user is answered.
#[test]
fn loopback_serve_without_a_token_answers_only_its_own_user() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::Serve::start(dir.path());
    assert_eq!(initialize_as(server.port, None), "HTTP/1.1 200");
    if rustix::process::geteuid().is_root() {
        assert_eq!(initialize_as(server.port, Some(NOBODY)), "closed");
    }
    // And it keeps serving its own user.
    assert_eq!(initialize_as(server.port, None), "HTTP/1.1 200");
}

/// The bearer token of [`health_check_needs_no_token_and_opens_nothing_else`].
const HEALTH_TEST_TOKEN: &str = "health-test-token-4711";

/// A kubelet's probe carries no token: `GET /healthz` answers `200 ok`
/// without one (deploy/kubernetes probes it). Nothing else is let in
/// through it: `/mcp` still answers 401 without the token or with a wrong
/// one, also by paths that name the health check, and the health answer
/// says nothing but `ok`.
#[test]
fn health_check_needs_no_token_and_opens_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let server =
        common::Serve::start_with_env(dir.path(), &[], &[("CUBBY_TOKEN", HEALTH_TEST_TOKEN)]);
    let (status, head, body) = common::request_to(server.port, "GET", "/healthz", b"", &[]);
    assert_eq!(status, 200, "{head}");
    assert_eq!(body, "ok\n");
    let bearer = format!("Bearer {HEALTH_TEST_TOKEN}");
    let wrong = format!("Bearer {HEALTH_TEST_TOKEN}x");
    for path in ["/mcp", "/healthz/../mcp", "/mcp/../healthz", "/mcp?healthz"] {
        for auth in [None, Some(wrong.as_str())] {
            let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", *a)).collect();
            let (status, head, body) =
                common::request_to(server.port, "POST", path, INIT.as_bytes(), &headers);
            assert_eq!(status, 401, "{path} with {auth:?}: {head}\n{body}");
        }
    }
    let (status, head, body) = common::request_to(
        server.port,
        "POST",
        "/mcp",
        INIT.as_bytes(),
        &[("Authorization", bearer.as_str())],
    );
    assert_eq!(status, 200, "{head}\n{body}");
    assert!(body.contains("serverInfo"), "{body}");
}
