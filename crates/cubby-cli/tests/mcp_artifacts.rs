//! Artifacts over MCP stdio, end to end with the real `cubby mcp`: a
//! `run` that leaves files in `$CUBBY_OUTPUT_DIR` answers with their lines
//! and `resource_link`s after a `notifications/resources/list_changed`;
//! `resources/list`, `resources/templates/list`, `resources/read` (text,
//! a 9 MiB blob over the limit, a bogus digest, another session's
//! artifact).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

struct Server {
    child: Child,
    stdin: std::process::ChildStdin,
    lines: mpsc::Receiver<String>,
    next: u64,
}

impl Server {
    /// `cubby mcp` on `local` over `root`, its state in `config`'s
    /// `state_dir`, initialized.
    fn start(root: &Path, config: &Path) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cubby"))
            .args(["mcp", "--provider", "local", "--root"])
            .arg(root)
            .arg("--config")
            .arg(config)
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
            stdin,
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
        self.stdin.write_all(&line).unwrap();
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
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
