//! Artifacts over MCP stdio, end to end with the real `cubby mcp`: a
//! `run` that leaves files in `$CUBBY_OUTPUT_DIR` answers with their lines
//! and `resource_link`s after a `notifications/resources/list_changed`;
//! `resources/list`, `resources/templates/list`, `resources/read` (text,
//! a 9 MiB blob over the limit, a bogus digest, another session's
//! artifact); the same over the streamable HTTP front. The run's end (EOF,
//! SIGTERM, `DELETE`) collects what a background process left in
//! `$CUBBY_OUTPUT_DIR`, and leaves nothing in `$TMPDIR`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

struct Server {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    lines: mpsc::Receiver<String>,
    next: u64,
}

impl Server {
    /// `cubby mcp` on `local` over `root`, its state in `config`'s
    /// `state_dir`, initialized.
    fn start(root: &Path, config: &Path) -> Server {
        Server::start_in(root, Some(config), None)
    }

    /// [`Server::start`] with an optional config and `$TMPDIR`.
    fn start_in(root: &Path, config: Option<&Path>, tmp: Option<&Path>) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cubby"));
        command
            .args(["mcp", "--provider", "local", "--root"])
            .arg(root)
            .env_remove("RUST_LOG");
        if let Some(config) = config {
            command.arg("--config").arg(config);
        }
        if let Some(tmp) = tmp {
            command.env("TMPDIR", tmp);
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
        let mut s = Server {
            child,
            stdin: Some(stdin),
            lines: rx,
            next: 0,
        };
        let (init, _) = s.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "artifacts", "version": "1"}}),
        );
        assert_eq!(
            init["result"]["capabilities"]["resources"]["listChanged"], true,
            "{init}"
        );
        s.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        s
    }

    fn send(&mut self, v: &Value) {
        let mut line = serde_json::to_vec(v).unwrap();
        line.push(b'\n');
        self.stdin.as_mut().unwrap().write_all(&line).unwrap();
    }

    /// Ends the session (`End::Eof`: stdin closed; `End::Term`: SIGTERM) and
    /// waits (a minute at most) for the server to exit.
    fn end(mut self, how: End) -> std::process::ExitStatus {
        match how {
            End::Eof => drop(self.stdin.take()),
            End::Term => {
                let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
                rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "cubby mcp did not exit after {how:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The response to a request, and the lines seen before it.
    fn request(&mut self, method: &str, params: Value) -> (Value, Vec<Value>) {
        self.next += 1;
        let id = json!(self.next);
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut others = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .expect("no answer from cubby mcp");
            let v: Value = serde_json::from_str(&line).unwrap();
            if v.get("id") == Some(&id) && v.get("method").is_none() {
                return (v, others);
            }
            others.push(v);
        }
    }
}

impl Drop for Server {
    /// EOF (the session ends, its store is removed), a kill only if the
    /// server does not exit within 30 s.
    fn drop(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(30);
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

/// How a session ends.
#[derive(Clone, Copy, Debug)]
enum End {
    /// The client closes stdin.
    Eof,
    /// SIGTERM (how Codex CLI ends its servers).
    Term,
}

/// Waits (a minute at most) until a file named `name` is in an output
/// directory of the workspace at `root`.
fn wait_for_output(root: &Path, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let found = std::fs::read_dir(root.join(".cubby/output"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|run| run.path().join(name).is_file());
        if found {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} never appeared in the output directory"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The run of `cubby mcp` ends at EOF and on SIGTERM (SPEC §5.1, "when the
/// run ends"; ARCHITECTURE.md, *MCP sessions and runs*): what a background
/// process left in `$CUBBY_OUTPUT_DIR` after the last `run` is collected
/// into the configured `state_dir`'s store, and the process is stopped.
/// Without a `state_dir`, the store the session published into (in
/// `$TMPDIR`) is gone once the server has exited: nothing is left in the
/// temporary directory.
#[test]
fn the_run_ends_at_eof_and_on_sigterm_and_leaves_nothing_in_tmpdir() {
    for how in [End::Eof, End::Term] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let root = root.canonicalize().unwrap();
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        let state = dir.path().join("state");
        let config = dir.path().join("cubby.toml");
        std::fs::write(&config, format!("state_dir = \"{}\"\n", state.display())).unwrap();

        // A configured store: the end collects what was left.
        let mut s = Server::start_in(&root, Some(&config), Some(&tmp));
        // Its pid first, then late.txt renamed in whole (what the test
        // waits for), then it stays.
        let command = "echo $$ > \"$CUBBY_OUTPUT_DIR/../late.pid\" && \
            printf 'late bytes' > \"$CUBBY_OUTPUT_DIR/../late.tmp\" && \
            mv \"$CUBBY_OUTPUT_DIR/../late.tmp\" \"$CUBBY_OUTPUT_DIR/late.txt\" && exec sleep 600";
        let (started, _) = s.request(
            "tools/call",
            json!({"name": "start_process", "arguments": {"name": "late", "command": command}}),
        );
        assert_eq!(started["result"]["isError"], false, "{started}");
        wait_for_output(&root, "late.txt");
        let status = s.end(how);
        assert!(status.success(), "{how:?}: {status:?}");
        let sha = sha256_hex(b"late bytes");
        let blob = state.join("artifacts/sha256").join(&sha[..2]).join(&sha);
        assert_eq!(
            std::fs::read(&blob).ok().as_deref(),
            Some(&b"late bytes"[..]),
            "{how:?}: the run's end did not collect late.txt"
        );
        let pid: i32 = std::fs::read_to_string(root.join(".cubby/output/late.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let gone = rustix::process::test_kill_process(rustix::process::Pid::from_raw(pid).unwrap())
            .is_err();
        assert!(gone, "{how:?}: the background process outlived the run");

        // The default store: gone with the server.
        let mut s = Server::start_in(&root, None, Some(&tmp));
        let (call, _) = s.request(
            "tools/call",
            json!({"name": "run", "arguments": {"command":
                "printf 'x' > \"$CUBBY_OUTPUT_DIR/x.txt\""}}),
        );
        assert_eq!(call["result"]["isError"], false, "{call}");
        let made: Vec<String> = std::fs::read_dir(&tmp)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(
            made.len() == 1 && made[0].starts_with("cubby-run-"),
            "{how:?}: {made:?}"
        );
        let status = s.end(how);
        assert!(status.success(), "{how:?}: {status:?}");
        let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().collect();
        assert!(left.is_empty(), "{how:?}: left in $TMPDIR: {left:?}");
    }
}

#[test]
fn artifacts_are_resources_of_their_session_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let root = root.canonicalize().unwrap();
    let state = dir.path().join("state");
    let config = dir.path().join("cubby.toml");
    std::fs::write(&config, format!("state_dir = \"{}\"\n", state.display())).unwrap();
    let mut s = Server::start(&root, &config);
    let (call, before) = s.request(
        "tools/call",
        json!({"name": "run", "arguments": {"command":
            "printf 'report\\n' > \"$CUBBY_OUTPUT_DIR/report.txt\" && head -c 9437184 /dev/urandom > \"$CUBBY_OUTPUT_DIR/big.bin\""}}),
    );
    let result = &call["result"];
    assert_eq!(result["isError"], false, "{call}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("artifact report.txt — text/plain, 7 B, sha256:"),
        "{text}"
    );
    assert!(
        text.contains("artifact big.bin — application/octet-stream, 9.4 MB"),
        "{text}"
    );
    let links: Vec<&Value> = result["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "resource_link")
        .collect();
    assert_eq!(links.len(), 2, "{call}");
    assert!(
        before
            .iter()
            .any(|v| v["method"] == "notifications/resources/list_changed"),
        "{before:?}"
    );
    // resources/list: newest first.
    let (list, _) = s.request("resources/list", json!({}));
    let resources = list["result"]["resources"].as_array().unwrap();
    let names: Vec<&str> = resources
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["report.txt", "big.bin"], "{list}");
    assert!(list["result"].get("nextCursor").is_none());
    let report_uri = resources[0]["uri"].as_str().unwrap().to_string();
    let big_uri = resources[1]["uri"].as_str().unwrap().to_string();
    assert_eq!(resources[1]["size"], 9_437_184);
    assert_eq!(resources[0]["mimeType"], "text/plain");
    // The template.
    let (templates, _) = s.request("resources/templates/list", json!({}));
    assert_eq!(
        templates["result"]["resourceTemplates"][0]["uriTemplate"],
        "cubby://artifacts/{sha256}/{name}",
        "{templates}"
    );
    // Text.
    let (read, _) = s.request("resources/read", json!({"uri": report_uri}));
    let contents = &read["result"]["contents"][0];
    assert_eq!(contents["text"], "report\n", "{read}");
    assert_eq!(contents["uri"], report_uri.as_str());
    assert_eq!(contents["mimeType"], "text/plain");
    // 9 MiB: over the blob limit, named with the size.
    let (read, _) = s.request("resources/read", json!({"uri": big_uri}));
    let message = read["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("9437184 bytes") && message.contains("8388608-byte limit"),
        "{read}"
    );
    // A bogus digest.
    let bogus = format!("cubby://artifacts/{}/report.txt", "0".repeat(64));
    let (read, _) = s.request("resources/read", json!({"uri": bogus}));
    assert_eq!(read["error"]["code"], -32002, "{read}");
    let (read, _) = s.request("resources/read", json!({"uri": "cubby://artifacts/nope"}));
    assert!(read["error"]["code"].is_number(), "{read}");
    // Another session (another server over the same store) does not see
    // this one's artifacts.
    let mut other = Server::start(&root, &config);
    let (read, _) = other.request("resources/read", json!({"uri": report_uri}));
    assert_eq!(read["error"]["code"], -32002, "{read}");
    let (list, _) = other.request("resources/list", json!({}));
    assert_eq!(list["result"]["resources"], json!([]), "{list}");
    // The URI names the bytes stored.
    let sha = report_uri
        .strip_prefix("cubby://artifacts/")
        .unwrap()
        .split('/')
        .next()
        .unwrap();
    assert_eq!(
        std::fs::read(state.join("artifacts/sha256").join(&sha[..2]).join(sha)).unwrap(),
        b"report\n"
    );
}

/// Benchmark (docs/PERFORMANCE.md): `resources/read` of an 8 MiB artifact
/// over stdio vs `base64` of the same file by a process, median of 20.
/// `cargo test --release -p cubby-cli --test mcp_artifacts -- --ignored --nocapture`
#[test]
#[ignore = "benchmark"]
fn bench_resources_read_of_8_mib_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let root = root.canonicalize().unwrap();
    let config = dir.path().join("cubby.toml");
    std::fs::write(
        &config,
        format!("state_dir = \"{}\"\n", dir.path().join("state").display()),
    )
    .unwrap();
    let mut s = Server::start(&root, &config);
    let (call, _) = s.request(
        "tools/call",
        json!({"name": "run", "arguments": {"command":
            "head -c 8388608 /dev/urandom > \"$CUBBY_OUTPUT_DIR/blob.bin\""}}),
    );
    let (list, _) = s.request("resources/list", json!({}));
    let uri = list["result"]["resources"][0]["uri"]
        .as_str()
        .unwrap()
        .to_string();
    let path = root.join(
        list["result"]["resources"][0]["description"]
            .as_str()
            .unwrap()
            .split("in the sandbox at ")
            .nth(1)
            .unwrap(),
    );
    assert!(path.is_file(), "{call}");
    let mut read = Vec::new();
    let mut base64 = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let (r, _) = s.request("resources/read", json!({"uri": uri}));
        read.push(t.elapsed());
        assert_eq!(
            r["result"]["contents"][0]["blob"].as_str().unwrap().len(),
            11_184_812
        );
        let t = Instant::now();
        let out = Command::new("base64")
            .arg("-w0")
            .arg(&path)
            .output()
            .unwrap();
        base64.push(t.elapsed());
        assert_eq!(out.stdout.len(), 11_184_812);
    }
    read.sort();
    base64.sort();
    println!(
        "resources/read 8 MiB over stdio: {:.1} ms | base64 -w0 of the file: {:.1} ms",
        read[10].as_secs_f64() * 1000.0,
        base64[10].as_secs_f64() * 1000.0
    );
}

/// The JSON-RPC messages of an HTTP answer's body: server-sent events'
/// `data:` lines, or one JSON document.
fn messages(body: &str) -> Vec<Value> {
    let events: Vec<Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect();
    if events.is_empty() {
        serde_json::from_str(body.trim()).into_iter().collect()
    } else {
        events
    }
}

/// One MCP session over `cubby serve`'s streamable HTTP.
struct HttpSession {
    port: u16,
    id: String,
    next: u64,
    /// The answer to `initialize`.
    init: Value,
}

impl HttpSession {
    fn open(port: u16) -> HttpSession {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "artifacts-http", "version": "1"}}});
        let (status, head, body) = common::request(port, "POST", init.to_string().as_bytes(), &[]);
        assert_eq!(status, 200, "{head}\n{body}");
        let id = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("mcp-session-id")
                    .then(|| v.trim().to_string())
            })
            .expect("a session id");
        let init = messages(&body).remove(0);
        assert_eq!(
            init["result"]["capabilities"]["resources"]["listChanged"], true,
            "{body}"
        );
        let session = HttpSession {
            port,
            id,
            next: 0,
            init,
        };
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        common::request(
            port,
            "POST",
            note.to_string().as_bytes(),
            &session.headers(),
        );
        session
    }

    fn headers(&self) -> [(&str, &str); 2] {
        [
            ("Mcp-Session-Id", self.id.as_str()),
            ("MCP-Protocol-Version", "2025-11-25"),
        ]
    }

    /// The answer to one request.
    fn ask(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = json!(self.next);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let (status, head, body) = common::request(
            self.port,
            "POST",
            body.to_string().as_bytes(),
            &self.headers(),
        );
        assert_eq!(status, 200, "{method}: {head}\n{body}");
        messages(&body)
            .into_iter()
            .find(|m| m.get("id") == Some(&id) && m.get("method").is_none())
            .unwrap_or_else(|| panic!("{method}: no answer in {body}"))
    }

    /// Ends the session (`DELETE`).
    fn close(self) {
        let (status, head, _) = common::request(self.port, "DELETE", b"", &self.headers());
        assert!((200..300).contains(&status), "DELETE: {head}");
    }
}

/// `resources/list`, `resources/templates/list` and `resources/read` over
/// the streamable HTTP front (a real `cubby serve` on port 0): a session's
/// `run` publishes a text and a binary file; the list gives them newest
/// first; the text comes back as text, the binary as a blob of the same
/// bytes; a bogus digest is an error; another session lists nothing and
/// cannot read the first one's artifact. `DELETE` ends the first session's
/// run: what its background process left in `$CUBBY_OUTPUT_DIR` is
/// collected into the `state_dir`'s store.
#[test]
fn resources_over_streamable_http_and_the_run_ends_at_delete() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let root = root.canonicalize().unwrap();
    let state = dir.path().join("state");
    let config = dir.path().join("cubby.toml");
    std::fs::write(&config, format!("state_dir = \"{}\"\n", state.display())).unwrap();
    let server = common::Serve::start_with(&root, &["--config".as_ref(), config.as_os_str()]);
    let mut a = HttpSession::open(server.port);
    let call = a.ask(
        "tools/call",
        json!({"name": "run", "arguments": {"command":
            "printf 'report\\n' > \"$CUBBY_OUTPUT_DIR/report.txt\" && \
             head -c 3000 /dev/urandom > \"$CUBBY_OUTPUT_DIR/data.bin\""}}),
    );
    assert_eq!(call["result"]["isError"], false, "{call}");
    let list = a.ask("resources/list", json!({}));
    let resources = list["result"]["resources"].as_array().unwrap();
    let names: Vec<&str> = resources
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{list}");
    let uri_of = |name: &str| {
        resources
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} not in {list}"))["uri"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (text_uri, blob_uri) = (uri_of("report.txt"), uri_of("data.bin"));
    let templates = a.ask("resources/templates/list", json!({}));
    assert_eq!(
        templates["result"]["resourceTemplates"][0]["uriTemplate"],
        "cubby://artifacts/{sha256}/{name}",
        "{templates}"
    );
    let read = a.ask("resources/read", json!({"uri": text_uri}));
    assert_eq!(read["result"]["contents"][0]["text"], "report\n", "{read}");
    let read = a.ask("resources/read", json!({"uri": blob_uri}));
    let blob = base64::engine::general_purpose::STANDARD
        .decode(read["result"]["contents"][0]["blob"].as_str().unwrap())
        .unwrap();
    let output = std::fs::read_dir(root.join(".cubby/output"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert_eq!(blob, std::fs::read(output.join("data.bin")).unwrap());
    let bogus = format!("cubby://artifacts/{}/report.txt", "0".repeat(64));
    let read = a.ask("resources/read", json!({"uri": bogus}));
    assert!(read.get("error").is_some(), "{read}");

    // Another session: none of it.
    let mut b = HttpSession::open(server.port);
    let list = b.ask("resources/list", json!({}));
    assert_eq!(list["result"]["resources"], json!([]), "{list}");
    let read = b.ask("resources/read", json!({"uri": text_uri}));
    assert!(read.get("error").is_some(), "{read}");
    b.close();

    // The end of the first session's run collects what was left.
    let command = "printf 'left at the end' > \"$CUBBY_OUTPUT_DIR/../late.tmp\" && \
        mv \"$CUBBY_OUTPUT_DIR/../late.tmp\" \"$CUBBY_OUTPUT_DIR/late.txt\" && exec sleep 600";
    let started = a.ask(
        "tools/call",
        json!({"name": "start_process", "arguments": {"name": "late", "command": command}}),
    );
    assert_eq!(started["result"]["isError"], false, "{started}");
    wait_for_output(&root, "late.txt");
    let sha = sha256_hex(b"left at the end");
    let blob = state.join("artifacts/sha256").join(&sha[..2]).join(&sha);
    assert!(!blob.exists());
    a.close();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !blob.exists() {
        assert!(
            Instant::now() < deadline,
            "DELETE did not end the run: late.txt was never collected"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(std::fs::read(&blob).unwrap(), b"left at the end");
    drop(server);
}

/// Writes skill `name` (a `SKILL.md` with `description`) under `root`.
fn skill(root: &Path, name: &str, description: &str) -> String {
    let dir = root.join("skills").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let text = format!("---\nname: {name}\ndescription: {description}\n---\nSteps of {name}.\n");
    std::fs::write(dir.join("SKILL.md"), &text).unwrap();
    text
}

/// SPEC §5.3: "a changed skill directory is picked up by the next
/// session", over the streamable HTTP front, whose server starts once: a
/// session opened after a skill was added has it in its `instructions`,
/// its `skill` tool's enum and the skills extension's `skills/list`
/// (SEP-2640), and reads its `SKILL.md` through `resources/read`; the
/// session opened before keeps the catalog it started with.
#[test]
fn a_new_http_session_sees_the_skills_as_they_are_now() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let root = root.canonicalize().unwrap();
    skill(&root, "alpha", "First skill.");
    let server = common::Serve::start(&root);
    let mut before = HttpSession::open(server.port);
    let instructions = |s: &HttpSession| {
        s.init["result"]["instructions"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(instructions(&before).contains("alpha"), "{}", before.init);
    assert!(!instructions(&before).contains("beta"), "{}", before.init);
    let beta = skill(&root, "beta", "Second skill, added while serving.");

    let mut after = HttpSession::open(server.port);
    assert!(
        instructions(&after).contains("beta"),
        "the new session's catalog is the one of the server's start: {}",
        after.init
    );
    assert!(
        after.init["result"]["capabilities"]["extensions"]["io.modelcontextprotocol/skills"]
            .is_object(),
        "{}",
        after.init
    );
    let tools = after.ask("tools/list", json!({}));
    let skill_tool = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "skill")
        .unwrap_or_else(|| panic!("no skill tool in {tools}"));
    let names = skill_tool["inputSchema"]["properties"]["name"]["enum"].to_string();
    assert!(
        names.contains("alpha") && names.contains("beta"),
        "{skill_tool}"
    );
    let listed = |s: &mut HttpSession| -> Vec<String> {
        let list = s.ask("skills/list", json!({}));
        list["result"]["skills"]
            .as_array()
            .unwrap_or_else(|| panic!("{list}"))
            .iter()
            .map(|k| k["frontmatter"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(listed(&mut after), ["alpha", "beta"]);
    let read = after.ask("resources/read", json!({"uri": "skill://beta/SKILL.md"}));
    assert_eq!(
        read["result"]["contents"][0]["text"],
        beta.as_str(),
        "{read}"
    );
    // The session opened before keeps its catalog.
    assert_eq!(listed(&mut before), ["alpha"]);
    before.close();
    after.close();
    drop(server);
}
