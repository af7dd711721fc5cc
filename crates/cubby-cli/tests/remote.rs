//! The `remote` provider against a real far `cubby serve --host`: the token
//! (401 without the right one), a far server killed mid-call (`ERROR
//! network` within 10 s, nothing left running), and two hosts of their own
//! (two network namespaces joined by a veth pair, each with its address):
//! a script of file tools and commands through `cubby call --provider
//! remote`, then a partition mid-command.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cubby::remote::{RemoteOptions, RemoteSandbox};
use serde_json::{Value, json};

/// Longest wait for a far server to say where it listens.
const START_WAIT: Duration = Duration::from_secs(60);
/// What SPEC §7 allows a lost far side to hold a call.
const NETWORK_ERROR_WITHIN: Duration = Duration::from_secs(10);
/// Longest a partitioned `cubby call` may take to exit (its answer, then
/// the far sandbox's destroy, not waited for long once the far side is
/// seen lost).
const EXIT_AFTER_PARTITION: Duration = Duration::from_secs(15);

/// Where far servers' directories are made: a directory commands see.
const FAR_BASE: &str = "/var/tmp";

/// A far `cubby serve --host`, on port 0 of `ip` (its address read from
/// its stderr), run under `wrap` (e.g. `ip netns exec NS`); killed when
/// dropped.
struct Far {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
    token: String,
    /// Everything it wrote to stderr so far.
    log: std::sync::Arc<std::sync::Mutex<String>>,
    /// The thread that reads its stderr.
    reader: Option<std::thread::JoinHandle<()>>,
}

fn token() -> String {
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut b)
        .unwrap();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl Far {
    fn start(wrap: &[&str], ip: &str, extra: &[&str]) -> Far {
        Far::start_logging(wrap, ip, extra, None)
    }

    /// As [`Far::start`], with `RUST_LOG` set to `log` when given.
    fn start_logging(wrap: &[&str], ip: &str, extra: &[&str], log: Option<&str>) -> Far {
        Far::start_full(wrap, ip, extra, log, true)
    }

    /// As [`Far::start_logging`]; without `host_dir`, the server makes its
    /// own directory of workspaces (in its `TMPDIR`, outside `/tmp`).
    fn start_full(
        wrap: &[&str],
        ip: &str,
        extra: &[&str],
        log: Option<&str>,
        host_dir: bool,
    ) -> Far {
        // Outside `/tmp`, which is private to the `linux` provider's
        // commands: the host's directory and token file are on the host's
        // tree commands see, as an operator's would be.
        let dir = tempfile::Builder::new()
            .prefix("cubby-far-")
            .tempdir_in(FAR_BASE)
            .unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let token = token();
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, format!("{token}\n")).unwrap();
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        let mut cmd = match wrap.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(env!("CARGO_BIN_EXE_cubby"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_cubby")),
        };
        match log {
            Some(filter) => cmd.env("RUST_LOG", filter),
            None => cmd.env_remove("RUST_LOG"),
        };
        cmd.args(["serve", "--host", "--listen", &format!("{ip}:0")]);
        if host_dir {
            cmd.arg("--host-dir").arg(dir.path().join("sandboxes"));
        }
        let mut child = cmd
            .arg("--token-file")
            .arg(&token_file)
            .arg("--root")
            .arg(&root)
            .args(extra)
            .env_remove("CUBBY_TOKEN")
            // Its temporary files (the placeholder stash a SIGKILLed server
            // leaves for the next start to reclaim) in the test's directory.
            .env("TMPDIR", &tmp)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (addr, reader) =
            common::listening_address(&mut child, "far cubby", START_WAIT, Some(log.clone()));
        Far {
            child,
            addr,
            _dir: dir,
            token,
            log,
            reader: Some(reader),
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Ends it and returns all it wrote to stderr.
    fn end_and_log(&mut self) -> String {
        self.kill();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Far {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One raw HTTP/1.1 request (`Connection: close`): (status, body).
fn http(addr: &str, method: &str, path: &str, auth: Option<&str>, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if let Some(auth) = auth {
        req.push_str(&format!("Authorization: {auth}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, body.to_string())
}

/// Processes whose `argv[0]` is `marker` (set by `exec -a`; a process
/// whose arguments merely mention it, as the `cubby call` that starts it,
/// is not one).
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().into_string().unwrap_or_default();
        if !name.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
        if argv0 == marker.as_bytes() {
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            found.push(format!("{name}: {text}"));
        }
    }
    found
}

fn wait_for(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_host_api_needs_the_token() {
    let mut far = Far::start_logging(
        &[],
        "127.0.0.1",
        &["--provider", "local", "--host-max", "1"],
        Some("trace"),
    );
    let good = format!("Bearer {}", far.token);
    for auth in [
        None,
        Some("Bearer "),
        Some("Bearer wrong"),
        Some(&good[..good.len() - 1]),
        Some(&format!("{good}x")),
        Some(&format!("Basic {}", far.token)),
    ] {
        let (status, _) = http(&far.addr, "POST", "/v1/sandboxes", auth, "{}");
        assert_eq!(status, 401, "{auth:?}");
        let (status, _) = http(&far.addr, "GET", "/v1/sandboxes", auth, "");
        assert_eq!(status, 401, "{auth:?}");
    }
    let (status, body) = http(&far.addr, "POST", "/v1/sandboxes", Some(&good), "{}");
    assert_eq!(status, 201, "{body}");
    let created: serde_json::Value = serde_json::from_str(&body).unwrap();
    let id = created["id"].as_str().unwrap();
    // `--host-max 1`: a second one is refused while the first lives.
    let (status, body) = http(&far.addr, "POST", "/v1/sandboxes", Some(&good), "{}");
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("\"limit\""), "{body}");
    // The id alone lets nobody in.
    let (status, _) = http(
        &far.addr,
        "DELETE",
        &format!("/v1/sandboxes/{id}"),
        None,
        "",
    );
    assert_eq!(status, 401);
    let (status, _) = http(
        &far.addr,
        "DELETE",
        &format!("/v1/sandboxes/{id}"),
        Some(&good),
        "",
    );
    assert_eq!(status, 204);
    // Without `--host-bind` there is no bind, and the token stays.
    let (status, body) = http(&far.addr, "POST", "/v1/bind", Some(&good), "");
    assert_eq!(status, 404, "{body}");
    assert!(!body.contains("cubby-claim-"), "{body}");
    let (status, _) = http(&far.addr, "GET", "/v1/sandboxes", Some(&good), "");
    assert_eq!(status, 200);
    // The client says what went wrong, and never the token.
    let wrong = RemoteSandbox::open(&RemoteOptions {
        url: far.url(),
        token: "not-the-token-4242".into(),
        root: None,
        upload: None,
    });
    let message = wrong.err().unwrap().to_string();
    assert!(message.starts_with("ERROR denied:"), "{message}");
    assert!(!message.contains("not-the-token-4242"), "{message}");
    // The far server logged at `trace` (each connection), never a token.
    let log = far.end_and_log();
    assert!(
        log.contains("accepted"),
        "the far server logged no connection: {log}"
    );
    assert!(!log.contains(&far.token), "the far server logged its token");
    assert!(
        !log.contains("not-the-token-4242"),
        "the far server logged a token"
    );
}

#[test]
fn host_mode_refuses_to_start_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args([
            "serve",
            "--host",
            "--listen",
            "127.0.0.1:0",
            "--provider",
            "local",
            "--root",
        ])
        .arg(dir.path())
        .env_remove("CUBBY_TOKEN")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--host needs a bearer token"), "{err}");
}

/// The marker of a far command, unique to this test process.
fn marker(tag: &str) -> String {
    format!("cubby-remote-{tag}-{}", std::process::id())
}

#[test]
fn killing_the_far_server_fails_calls_in_flight_with_network_errors() {
    let mut far = Far::start(&[], "127.0.0.1", &["--provider", "linux"]);
    let sandbox = near_sandbox(&far);
    let t = cubby::Toolset::builder(std::sync::Arc::new(sandbox))
        .host_env(cubby::HostEnv::capture())
        .build()
        .unwrap();
    let out = t.call("write_file", json!({"path": "a.txt", "content": "hello\n"}));
    assert!(!out.is_error, "{}", out.text);
    let mark = marker("kill");
    let calls = t.clone();
    let command = format!("exec -a {mark} sleep 1000");
    let running = std::thread::spawn(move || {
        let out = calls.call("run", json!({"command": command, "timeout_ms": 120_000}));
        (out, Instant::now())
    });
    wait_for("the far command starts", Duration::from_secs(30), || {
        !processes_with(&mark).is_empty()
    });
    let killed = Instant::now();
    far.kill();
    let (out, ended) = running.join().unwrap();
    assert!(out.text.starts_with("ERROR network:"), "{}", out.text);
    assert!(
        ended - killed < NETWORK_ERROR_WITHIN,
        "ended {:?} after the kill",
        ended - killed
    );
    let started = Instant::now();
    let out = t.call("read_file", json!({"path": "a.txt"}));
    assert!(out.text.starts_with("ERROR network:"), "{}", out.text);
    assert!(started.elapsed() < NETWORK_ERROR_WITHIN);
    assert!(!out.text.contains(&far.token));
    // The far command's tree ends with its sandbox's holder.
    wait_for("the far command ends", Duration::from_secs(10), || {
        processes_with(&mark).is_empty()
    });
}

/// A child process killed and reaped when dropped (also on a failed
/// assertion).
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Two network namespaces joined by a veth pair, each a host with an
/// address of its own; deleted when dropped.
struct TwoHosts {
    near: String,
    far: String,
    far_link: String,
    far_ip: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl TwoHosts {
    fn make() -> TwoHosts {
        let id = std::process::id() % 50_000;
        let (near, far) = (format!("cbn{id}"), format!("cbf{id}"));
        let (near_link, far_link) = (format!("vn{id}"), format!("vf{id}"));
        let octet = 1 + id % 250;
        let (near_ip, far_ip) = (format!("10.231.{octet}.1"), format!("10.231.{octet}.2"));
        // Made first, so that a failure below still deletes what was made.
        let hosts = TwoHosts {
            near: near.clone(),
            far: far.clone(),
            far_link: far_link.clone(),
            far_ip: far_ip.clone(),
        };
        ip(&["netns", "add", &near]);
        ip(&["netns", "add", &far]);
        ip(&[
            "link", "add", &near_link, "netns", &near, "type", "veth", "peer", "name", &far_link,
            "netns", &far,
        ]);
        for (ns, link, addr) in [(&near, &near_link, &near_ip), (&far, &far_link, &far_ip)] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", link]);
            ip(&["-n", ns, "link", "set", link, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        hosts
    }
}

impl Drop for TwoHosts {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.near])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.far])
            .status();
    }
}

/// `cubby call` on the near host with the `remote` provider.
fn call_near(
    hosts: &TwoHosts,
    config: &Path,
    root: &Path,
    tool: &str,
    args: serde_json::Value,
) -> (bool, String) {
    let out = Command::new("ip")
        .args(["netns", "exec", &hosts.near])
        .arg(env!("CARGO_BIN_EXE_cubby"))
        .args([
            "call",
            tool,
            &args.to_string(),
            "--provider",
            "remote",
            "--config",
        ])
        .arg(config)
        .arg("--root")
        .arg(root)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn two_hosts_of_their_own_over_a_veth_pair() {
    let hosts = TwoHosts::make();
    // Each `cubby call` is a run with a far sandbox of its own: they share
    // one far workspace, adopted (the far server allows it under `shared`).
    let shared = tempfile::tempdir().unwrap();
    let workspace = shared.path().canonicalize().unwrap().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let adopt = shared.path().to_str().unwrap().to_string();
    let far = Far::start(
        &["ip", "netns", "exec", &hosts.far],
        &hosts.far_ip,
        &["--provider", "linux", "--host-adopt", &adopt],
    );
    assert!(far.addr.starts_with(&hosts.far_ip), "{}", far.addr);
    let near = tempfile::tempdir().unwrap();
    let token_file = near.path().join("token");
    std::fs::write(&token_file, &far.token).unwrap();
    let config = near.path().join("near.toml");
    std::fs::write(
        &config,
        format!(
            "provider = \"remote\"\n[remote]\nurl = \"{}\"\ntoken_file = \"{}\"\nroot = \"{}\"\n",
            far.url(),
            token_file.display(),
            workspace.display()
        ),
    )
    .unwrap();
    let root = near.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let (ok, text) = call_near(
        &hosts,
        &config,
        &root,
        "run",
        json!({"command": "printf 'x\\ny\\n' > f.txt; mkdir -p d/e; echo inside > d/e/g.txt; cat f.txt; hostname -I 2>/dev/null | grep -c . || true"}),
    );
    assert!(ok && text.starts_with("OK exit=0 "), "{text}");
    assert!(text.contains("x\ny\n"), "{text}");
    let (ok, text) = call_near(
        &hosts,
        &config,
        &root,
        "write_file",
        json!({"path": "src/main.rs", "content": "fn main() {}\n// needle\n"}),
    );
    assert!(ok, "{text}");
    let (ok, text) = call_near(
        &hosts,
        &config,
        &root,
        "read_file",
        json!({"path": "src/main.rs"}),
    );
    assert!(ok && text.contains("     2\t// needle"), "{text}");
    // Logging everything (`trace`), the near side writes the token nowhere.
    let out = Command::new("ip")
        .args(["netns", "exec", &hosts.near])
        .arg(env!("CARGO_BIN_EXE_cubby"))
        .args(["call", "run", r#"{"command": "echo traced"}"#])
        .args(["--provider", "remote", "--config"])
        .arg(&config)
        .arg("--root")
        .arg(&root)
        .env("RUST_LOG", "trace")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(stdout.contains("traced"), "{stdout}");
    assert!(stderr.contains("TRACE"), "nothing was logged: {stderr}");
    assert!(!stdout.contains(&far.token) && !stderr.contains(&far.token));
    let (ok, text) = call_near(&hosts, &config, &root, "run", json!({"command": "exit 3"}));
    assert!(ok && text.starts_with("FAILED exit=3 "), "{text}");
    let (ok, text) = call_near(&hosts, &config, &root, "read_file", json!({"path": "../x"}));
    assert!(!ok && text.starts_with("ERROR path_escape"), "{text}");
    // A partition mid-command: the far host's link goes down.
    let mark = marker("partition");
    let mut call = Reaped(
        Command::new("ip")
            .args(["netns", "exec", &hosts.near])
            .arg(env!("CARGO_BIN_EXE_cubby"))
            .args(["call", "run"])
            .arg(
                json!({"command": format!("exec -a {mark} sleep 1000"), "timeout_ms": 120_000})
                    .to_string(),
            )
            .args(["--provider", "remote", "--config"])
            .arg(&config)
            .arg("--root")
            .arg(&root)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("the far command starts", Duration::from_secs(30), || {
        !processes_with(&mark).is_empty()
    });
    // `cubby call` prints its result, then ends its run (the far sandbox's
    // destroy, waited for briefly once the far side was seen lost): the
    // result is timed as it arrives, the exit bounded apart.
    let mut stdout = call.0.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut first = [0u8; 1];
        let n = stdout.read(&mut first).unwrap();
        let at = Instant::now();
        let mut text = String::from_utf8_lossy(&first[..n]).into_owned();
        stdout.read_to_string(&mut text).unwrap();
        (text, at)
    });
    let cut = Instant::now();
    ip(&["-n", &hosts.far, "link", "set", &hosts.far_link, "down"]);
    let mut status = None;
    wait_for("the partitioned call ends", EXIT_AFTER_PARTITION, || {
        status = call.0.try_wait().unwrap();
        status.is_some()
    });
    let (text, answered) = reader.join().unwrap();
    assert!(text.starts_with("ERROR network:"), "{text}");
    let took = answered - cut;
    assert!(
        took < NETWORK_ERROR_WITHIN,
        "the partitioned call answered after {took:?}"
    );
    // The far side lost its client: the command's tree is killed there.
    wait_for("the far command ends", Duration::from_secs(30), || {
        processes_with(&mark).is_empty()
    });
}

/// Starts `script` (bash) in far sandbox `id` by a raw `exec` request and
/// returns the connection once the answer's head has arrived (its body,
/// the command's frames, still streaming).
fn exec_raw(far: &Far, id: &str, script: &str) -> TcpStream {
    let body = json!({
        "argv": ["/bin/bash", "-c", script],
        "cwd": "",
        "env": [],
        "stdin": false,
        "output_dir": null,
    })
    .to_string();
    let mut s = TcpStream::connect(&far.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let req = format!(
        "POST /v1/sandboxes/{id}/exec HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        far.addr,
        far.token,
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "the exec answer broke off");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    s
}

#[test]
fn a_dropped_client_and_a_destroy_leave_no_process_behind() {
    let far = Far::start(&[], "127.0.0.1", &["--provider", "linux"]);
    let good = format!("Bearer {}", far.token);
    let (status, body) = http(&far.addr, "POST", "/v1/sandboxes", Some(&good), "{}");
    assert_eq!(status, 201, "{body}");
    let created: serde_json::Value = serde_json::from_str(&body).unwrap();
    let id = created["id"].as_str().unwrap().to_string();

    // A client that goes away mid-command: the command's tree is killed,
    // a daemon it left in the background too.
    let (fore, daemon) = (marker("dropped"), marker("dropped-daemon"));
    let stream = exec_raw(
        &far,
        &id,
        &format!("(setsid bash -c 'exec -a {daemon} sleep 1000' &); exec -a {fore} sleep 1000"),
    );
    wait_for("the far command starts", Duration::from_secs(30), || {
        !processes_with(&fore).is_empty() && !processes_with(&daemon).is_empty()
    });
    drop(stream);
    wait_for(
        "the dropped client's command and its daemon end",
        NETWORK_ERROR_WITHIN,
        || processes_with(&fore).is_empty() && processes_with(&daemon).is_empty(),
    );
    // The sandbox lives on: a second command runs.
    let (fore, daemon) = (marker("destroyed"), marker("destroyed-daemon"));
    let _stream = exec_raw(
        &far,
        &id,
        &format!("(setsid bash -c 'exec -a {daemon} sleep 1000' &); exec -a {fore} sleep 1000"),
    );
    wait_for("the second command starts", Duration::from_secs(30), || {
        !processes_with(&fore).is_empty() && !processes_with(&daemon).is_empty()
    });
    // Its destroy answers once everything in it is gone.
    let (status, body) = http(
        &far.addr,
        "DELETE",
        &format!("/v1/sandboxes/{id}"),
        Some(&good),
        "",
    );
    assert_eq!(status, 204, "{body}");
    assert_eq!(processes_with(&fore), Vec::<String>::new());
    assert_eq!(processes_with(&daemon), Vec::<String>::new());
    let (status, body) = http(&far.addr, "GET", "/v1/sandboxes", Some(&good), "");
    assert_eq!((status, body.as_str()), (200, "[]"));
}

/// Red-team pass 6, F1: with `read_scope = "host"` a command of one
/// hosted sandbox read every other sandbox's workspace under `--host-dir`,
/// the adoptable directories and the server's `--token-file`. It sees its
/// own workspace only; the same script on the host reads all of it.
#[test]
fn a_hosted_command_reads_no_other_sandbox_nor_the_token() {
    let adopt = tempfile::Builder::new()
        .prefix("cubby-adopt-")
        .tempdir_in(FAR_BASE)
        .unwrap();
    let adopt_dir = adopt.path().canonicalize().unwrap();
    std::fs::create_dir(adopt_dir.join("a")).unwrap();
    std::fs::create_dir(adopt_dir.join("other")).unwrap();
    std::fs::write(adopt_dir.join("other/adopted.txt"), "ADOPTED-SECRET\n").unwrap();
    let far = Far::start(
        &[],
        "127.0.0.1",
        &[
            "--provider",
            "linux",
            "--host-adopt",
            adopt_dir.to_str().unwrap(),
        ],
    );
    let good = format!("Bearer {}", far.token);
    let create = |body: &str| {
        let (status, body) = http(&far.addr, "POST", "/v1/sandboxes", Some(&good), body);
        assert_eq!(status, 201, "{body}");
        let created: serde_json::Value = serde_json::from_str(&body).unwrap();
        created["id"].as_str().unwrap().to_string()
    };
    let a = create("{}");
    let b = create("{}");
    let adopted = create(&json!({"root": adopt_dir.join("a").to_str().unwrap()}).to_string());
    let (status, body) = http(
        &far.addr,
        "PUT",
        &fs_path(&b, "file", "secret.txt"),
        Some(&good),
        "SANDBOX-B-SECRET",
    );
    assert_eq!(status, 204, "{body}");
    let host_dir = far._dir.path().canonicalize().unwrap().join("sandboxes");
    let token_file = far._dir.path().canonicalize().unwrap().join("token");
    // The served `/mcp` workspace too (red-team pass 7, G2).
    let served_root = far._dir.path().canonicalize().unwrap().join("root");
    std::fs::write(served_root.join("main.txt"), "MAIN-ROOT-SECRET\n").unwrap();
    let script = format!(
        "cat {hd}/{b}/secret.txt; cat {tok}; echo \"HD:$(ls {hd} | tr '\\n' ,)\"; \
         echo \"AD:$(ls {ad} | tr '\\n' ,)\"; cat {ad}/other/adopted.txt; \
         cat {root}/main.txt; echo own > mine.txt; cat mine.txt",
        hd = host_dir.display(),
        tok = token_file.display(),
        ad = adopt_dir.display(),
        root = served_root.display(),
    );
    let leaks = |out: &str| -> Vec<String> {
        let listed = |tag: &str| {
            out.split(tag)
                .nth(1)
                .and_then(|rest| rest.lines().next())
                .unwrap_or_default()
                .to_string()
        };
        let mut found = Vec::new();
        for secret in [
            "SANDBOX-B-SECRET",
            far.token.as_str(),
            "ADOPTED-SECRET",
            "MAIN-ROOT-SECRET",
        ] {
            if out.contains(secret) {
                found.push(secret.to_string());
            }
        }
        if listed("HD:").contains(b.as_str()) {
            found.push(format!("{b} listed"));
        }
        if listed("AD:").contains("other") {
            found.push("other listed".to_string());
        }
        found
    };
    // The control: on the host, from A's workspace, the script reads all.
    let control = Command::new("bash")
        .args(["-c", &script])
        .current_dir(host_dir.join(&a))
        .output()
        .unwrap();
    let control = String::from_utf8_lossy(&control.stdout).into_owned();
    assert_eq!(leaks(&control).len(), 6, "{control}");
    std::fs::remove_file(host_dir.join(&a).join("mine.txt")).unwrap();
    for id in [&a, &adopted] {
        let mut stream = exec_raw(&far, id, &script);
        // The chunked body to its last chunk (the connection stays open).
        let mut raw = Vec::new();
        let mut buf = [0u8; 4096];
        while !raw.ends_with(b"\r\n0\r\n\r\n") {
            let n = stream.read(&mut buf).unwrap();
            assert!(n > 0, "the exec answer broke off");
            raw.extend_from_slice(&buf[..n]);
        }
        let out = String::from_utf8_lossy(&raw).into_owned();
        assert_eq!(leaks(&out), Vec::<String>::new(), "{out}");
        assert!(out.contains("own"), "its own workspace is there: {out}");
        assert!(out.contains("exited"), "{out}");
    }
}

/// Red-team pass 7, G1: without `--host-dir` the server makes its own
/// directory of workspaces (in `TMPDIR`, here outside `/tmp`); the served
/// `/mcp` workspace's commands must not read it either.
#[test]
fn the_default_host_dir_is_hidden_from_the_served_workspace() {
    let far = Far::start_full(&[], "127.0.0.1", &["--provider", "linux"], None, false);
    let good = format!("Bearer {}", far.token);
    let (status, body) = http(&far.addr, "POST", "/v1/sandboxes", Some(&good), "{}");
    assert_eq!(status, 201, "{body}");
    let created: Value = serde_json::from_str(&body).unwrap();
    let b = created["id"].as_str().unwrap().to_string();
    let (status, body) = http(
        &far.addr,
        "PUT",
        &fs_path(&b, "file", "secret.txt"),
        Some(&good),
        "SANDBOX-B-SECRET",
    );
    assert_eq!(status, 204, "{body}");
    let tmp = far._dir.path().canonicalize().unwrap().join("tmp");
    let script = format!(
        "echo \"LISTED:$(ls {t}/cubby-host-*/ | tr '\\n' ,)\"; cat {t}/cubby-host-*/{b}/secret.txt",
        t = tmp.display()
    );
    // The control: on the host, the script reads it.
    let control = Command::new("bash").args(["-c", &script]).output().unwrap();
    let control = String::from_utf8_lossy(&control.stdout).into_owned();
    assert!(
        control.contains("SANDBOX-B-SECRET") && control.contains(&b),
        "{control}"
    );
    let (_, session) = mcp_session(&far, "/mcp");
    let (status, _, text) = mcp_call(&far, "/mcp", &session, "run", json!({"command": script}));
    assert_eq!(status, 200, "{text}");
    // cat's complaint names the path it was given (b's id in it), so only
    // the listing is checked for the id.
    let listed = text
        .lines()
        .find_map(|l| l.split_once("LISTED:").map(|(_, rest)| rest.to_string()))
        .unwrap_or_else(|| panic!("no LISTED line: {text}"));
    assert!(!listed.contains(&b), "{text}");
    assert!(!text.contains("SANDBOX-B-SECRET"), "{text}");
}

/// A `remote` sandbox on `far`, a new empty workspace there.
fn near_sandbox(far: &Far) -> RemoteSandbox {
    RemoteSandbox::open(&RemoteOptions {
        url: far.url(),
        token: far.token.clone(),
        root: None,
        upload: None,
    })
    .unwrap()
}

/// `n` new empty sandboxes on `far`: their ids.
fn create_sandboxes(far: &Far, n: usize) -> Vec<String> {
    let good = format!("Bearer {}", far.token);
    (0..n)
        .map(|_| {
            let (status, body) = http(&far.addr, "POST", "/v1/sandboxes", Some(&good), "{}");
            assert_eq!(status, 201, "{body}");
            let created: Value = serde_json::from_str(&body).unwrap();
            created["id"].as_str().unwrap().to_string()
        })
        .collect()
}

/// The ids of the sandboxes `far` holds (`GET /v1/sandboxes`).
fn listed_sandboxes(far: &Far) -> Vec<String> {
    let good = format!("Bearer {}", far.token);
    let (status, body) = http(&far.addr, "GET", "/v1/sandboxes", Some(&good), "");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str::<Vec<String>>(&body).unwrap()
}

/// Issue 18: a sandbox nobody uses (its caller died without the destroy:
/// a near side killed, a partition) is destroyed after `--host-idle`; one
/// with a command running stays, and goes once the command has ended and
/// the time has passed again. A call on an expired sandbox says so.
#[test]
fn idle_sandboxes_expire_and_busy_ones_stay() {
    let far = Far::start_full(
        &[],
        "127.0.0.1",
        &["--provider", "linux", "--host-idle", "1"],
        None,
        true,
    );
    let good = format!("Bearer {}", far.token);
    let ids = create_sandboxes(&far, 3);
    let (quiet, busy, held) = (&ids[0], &ids[1], &ids[2]);
    let workspace = far._dir.path().join("sandboxes").join(quiet);
    assert!(workspace.is_dir());
    let stream = exec_raw(&far, busy, "sleep 60");
    // An MCP session bound to it keeps it (its commands are the session's
    // run's), with a background process the host does not see (red-team
    // pass 9, M1: it was killed at the first expiry).
    let (_, session) = bound_session(&far, held);
    let (status, is_error, text) = bound_call(
        &far,
        held,
        &session,
        "start_process",
        json!({"name": "slow", "command": "sleep 60"}),
    );
    assert!(status == 200 && !is_error, "{text}");
    let listed = || listed_sandboxes(&far);
    wait_for("the idle sandbox expired", Duration::from_secs(20), || {
        !listed().contains(quiet)
    });
    assert!(!workspace.exists(), "its workspace is removed");
    let mut alive = vec![busy.clone(), held.clone()];
    alive.sort();
    assert_eq!(listed(), alive);
    let (status, body) = http(
        &far.addr,
        "GET",
        &format!("/v1/sandboxes/{quiet}/commands"),
        Some(&good),
        "",
    );
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("expired"), "{body}");
    // The session ends (its process with it), the command ends with its
    // stream: then the others go too.
    let port: u16 = far.addr.rsplit_once(':').unwrap().1.parse().unwrap();
    let (status, head, _) = common::request_to(
        port,
        "DELETE",
        &format!("/v1/sandboxes/{held}/mcp"),
        b"",
        &[
            ("Authorization", good.as_str()),
            ("Mcp-Session-Id", session.as_str()),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
    );
    assert!(status == 200 || status == 204, "{head}");
    drop(stream);
    wait_for(
        "the busy sandbox expired once idle",
        Duration::from_secs(20),
        || listed().is_empty(),
    );
}

/// The `remote` provider keeps its far sandbox while it holds it, idle or
/// not (an agent that thinks long, a stdio session left open): the far
/// side names its idle period at create, and the near side sends a cheap
/// request well within it. A sandbox nobody keeps expires meanwhile.
#[test]
fn a_held_remote_sandbox_is_kept_while_an_orphan_expires() {
    let far = Far::start_full(
        &[],
        "127.0.0.1",
        &["--provider", "linux", "--host-idle", "2"],
        None,
        true,
    );
    let good = format!("Bearer {}", far.token);
    let (status, body) = http(&far.addr, "POST", "/v1/sandboxes", Some(&good), "{}");
    assert_eq!(status, 201, "{body}");
    let created: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(created["idle_secs"], json!(2), "{body}");
    let orphan = created["id"].as_str().unwrap().to_string();
    let held = near_sandbox(&far);
    let held_id = held.url().rsplit('/').next().unwrap().to_string();
    let listed = || listed_sandboxes(&far);
    assert!(listed().contains(&held_id));
    // Idle on this side too: no call is made on `held` while the orphan,
    // made first, goes; then a while longer.
    wait_for("the orphan expired", Duration::from_secs(20), || {
        !listed().contains(&orphan)
    });
    let quiet_until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < quiet_until {
        assert!(listed().contains(&held_id), "the held sandbox expired");
        std::thread::sleep(Duration::from_millis(200));
    }
    let t = cubby::Toolset::builder(std::sync::Arc::new(held))
        .host_env(cubby::HostEnv::capture())
        .build()
        .unwrap();
    let out = t.call(
        "write_file",
        json!({"path": "kept.txt", "content": "still here\n"}),
    );
    assert!(!out.is_error, "{}", out.text);
    drop(t);
    wait_for(
        "the held sandbox destroyed when let go",
        Duration::from_secs(10),
        || listed().is_empty(),
    );
}

/// Red-team pass 8, M1: each run's artifact store was in `$TMPDIR`, and
/// each workspace hid only its own, so with `TMPDIR` outside `/tmp` a
/// hosted sandbox's commands read another's published files and the
/// `/mcp` workspace's, and the other way round. Every store of the server
/// now lies in the host's directory, which every command has covered.
#[test]
fn no_command_reads_another_runs_artifacts() {
    let far = Far::start_full(&[], "127.0.0.1", &["--provider", "linux"], None, false);
    let ids = create_sandboxes(&far, 2);
    let (a, b) = (&ids[0], &ids[1]);
    let (_, session_b) = bound_session(&far, b);
    let (status, is_error, text) = bound_call(
        &far,
        b,
        &session_b,
        "run",
        json!({"command": "echo ARTIFACT-SECRET-B > \"$CUBBY_OUTPUT_DIR/b.txt\""}),
    );
    assert!(status == 200 && !is_error, "{text}");
    let (_, session) = mcp_session(&far, "/mcp");
    let (status, is_error, text) = mcp_call(
        &far,
        "/mcp",
        &session,
        "run",
        json!({"command": "echo ARTIFACT-SECRET-MCP > \"$CUBBY_OUTPUT_DIR/m.txt\""}),
    );
    assert!(status == 200 && !is_error, "{text}");
    let tmp = far._dir.path().canonicalize().unwrap().join("tmp");
    let script = format!(
        "grep -rhs ARTIFACT-SECRET {} ; echo SEARCHED",
        tmp.display()
    );
    // The control: on the host, both stores hold their published file.
    let control = Command::new("bash").args(["-c", &script]).output().unwrap();
    let control = String::from_utf8_lossy(&control.stdout).into_owned();
    assert!(
        control.contains("ARTIFACT-SECRET-B") && control.contains("ARTIFACT-SECRET-MCP"),
        "{control}"
    );
    let from_a = exec_output(&far, a, &script);
    assert!(from_a.contains("SEARCHED"), "{from_a}");
    assert!(!from_a.contains("ARTIFACT-SECRET-"), "{from_a}");
    let (_, _, from_mcp) = mcp_call(&far, "/mcp", &session, "run", json!({"command": script}));
    assert!(from_mcp.contains("SEARCHED"), "{from_mcp}");
    assert!(!from_mcp.contains("ARTIFACT-SECRET-B"), "{from_mcp}");
    let (_, _, from_b) = bound_call(&far, b, &session_b, "run", json!({"command": script}));
    assert!(from_b.contains("SEARCHED"), "{from_b}");
    assert!(!from_b.contains("ARTIFACT-SECRET-MCP"), "{from_b}");
}

/// Red-team pass 8, L1: the cap on a sandbox's MCP sessions was read,
/// then the session made after an await; `initialize` requests arriving
/// together all saw room (750 sessions past a cap of 64). A request that
/// may open a session now takes a slot first.
#[test]
fn a_burst_of_initializes_opens_no_more_sessions_than_the_cap() {
    const BURST: usize = 160;
    let far = Far::start_full(&[], "127.0.0.1", &["--provider", "linux"], None, false);
    let good = format!("Bearer {}", far.token);
    let (status, body) = http(&far.addr, "POST", "/v1/sandboxes", Some(&good), "{}");
    assert_eq!(status, 201, "{body}");
    let created: Value = serde_json::from_str(&body).unwrap();
    let id = created["id"].as_str().unwrap().to_string();
    // The endpoint made by a first session, so the burst races on sessions
    // alone.
    bound_session(&far, &id);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "burst", "version": "1"}}})
    .to_string();
    let request = format!(
        "POST /v1/sandboxes/{id}/mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {good}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{init}",
        init.len(),
        addr = far.addr,
    );
    let (most, last) = request.as_bytes().split_at(request.len() - 1);
    // Every request but its last byte, then the last bytes together.
    let mut streams: Vec<TcpStream> = (0..BURST)
        .map(|_| {
            let mut s = TcpStream::connect(&far.addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            s.write_all(most).unwrap();
            s
        })
        .collect();
    for s in &mut streams {
        s.write_all(last).unwrap();
    }
    let mut opened = 0;
    let mut refused = 0;
    for mut s in streams {
        let (status, _) = read_head(&mut s);
        match status {
            200 => opened += 1,
            429 => refused += 1,
            other => panic!("status {other}"),
        }
    }
    // One session was open before the burst; a slot is counted before the
    // sessions are, which errs on the side of the cap.
    assert!(
        (1..cubby_mcp::MAX_SESSIONS_PER_SANDBOX).contains(&opened),
        "{opened} opened, {refused} refused"
    );
    assert_eq!(refused, BURST - opened);
    // One by one, the rest of the cap opens, and no more.
    let port: u16 = far.addr.rsplit_once(':').unwrap().1.parse().unwrap();
    let path = format!("/v1/sandboxes/{id}/mcp");
    let mut total = 1 + opened;
    loop {
        let (status, head, _) = common::request_to(
            port,
            "POST",
            &path,
            init.as_bytes(),
            &[("Authorization", good.as_str())],
        );
        if status == 429 {
            break;
        }
        assert_eq!(status, 200, "{head}");
        total += 1;
        assert!(total <= cubby_mcp::MAX_SESSIONS_PER_SANDBOX, "{total} open");
    }
    assert_eq!(total, cubby_mcp::MAX_SESSIONS_PER_SANDBOX);
}

/// Red-team pass 8, L1 (the server-wide side): `/mcp` opens at most
/// [`cubby_mcp::MAX_MCP_SESSIONS`] sessions, then answers 429 with what to
/// do; ending one makes room for one more.
#[test]
fn the_servers_own_mcp_endpoint_opens_no_more_sessions_than_its_cap() {
    let far = Far::start_full(&[], "127.0.0.1", &["--provider", "linux"], None, false);
    let good = format!("Bearer {}", far.token);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "cap", "version": "1"}}})
    .to_string();
    let port: u16 = far.addr.rsplit_once(':').unwrap().1.parse().unwrap();
    let mut sessions = Vec::new();
    let refused = loop {
        let (status, head, body) = common::request_to(
            port,
            "POST",
            "/mcp",
            init.as_bytes(),
            &[("Authorization", good.as_str())],
        );
        if status != 200 {
            break (status, body);
        }
        sessions.push(common::header(&head, "mcp-session-id").unwrap().to_string());
        assert!(
            sessions.len() <= cubby_mcp::MAX_MCP_SESSIONS,
            "{} open",
            sessions.len()
        );
    };
    assert_eq!(refused.0, 429, "{}", refused.1);
    assert!(refused.1.contains("limit"), "{}", refused.1);
    assert_eq!(sessions.len(), cubby_mcp::MAX_MCP_SESSIONS);
    let (status, head, _) = common::request_to(
        port,
        "DELETE",
        "/mcp",
        b"",
        &[
            ("Authorization", good.as_str()),
            ("Mcp-Session-Id", sessions[0].as_str()),
        ],
    );
    assert_eq!(status, 204, "{head}");
    let opened = || {
        common::request_to(
            port,
            "POST",
            "/mcp",
            init.as_bytes(),
            &[("Authorization", good.as_str())],
        )
        .0
    };
    wait_for("a session's end makes room", ANSWER_WAIT, || {
        opened() == 200
    });
    assert_eq!(opened(), 429);
}

/// Red-team pass 7, G3: a layout that puts the token's file or the hosted
/// workspaces in another workspace's reach is refused at start, with what
/// to do, and leaves nothing behind.
#[test]
fn a_host_layout_with_one_directory_inside_another_is_refused() {
    let base = tempfile::Builder::new()
        .prefix("cubby-layout-")
        .tempdir_in(FAR_BASE)
        .unwrap();
    let b = base.path().canonicalize().unwrap();
    for d in ["root", "adopt", "elsewhere"] {
        std::fs::create_dir(b.join(d)).unwrap();
    }
    std::fs::write(b.join("root/tok"), "t0ken\n").unwrap();
    std::fs::write(b.join("tok"), "t0ken\n").unwrap();
    let s = |p: &str| b.join(p).display().to_string();
    let cases: [(&[String], &str); 4] = [
        (
            &[
                "--token-file".into(),
                s("root/tok"),
                "--host-dir".into(),
                s("hd"),
            ],
            "the token file",
        ),
        (
            &[
                "--token-file".into(),
                s("tok"),
                "--host-dir".into(),
                s("root/hd"),
            ],
            "--host-dir",
        ),
        (
            &[
                "--token-file".into(),
                s("tok"),
                "--host-dir".into(),
                s("adopt/hd"),
                "--host-adopt".into(),
                s("adopt"),
            ],
            "--host-adopt",
        ),
        (
            &[
                "--token-file".into(),
                s("tok"),
                "--host-dir".into(),
                s("hd"),
                "--host-adopt".into(),
                s("root"),
            ],
            "--host-adopt",
        ),
    ];
    for (args, names) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_cubby"))
            .args([
                "serve",
                "--host",
                "--listen",
                "127.0.0.1:0",
                "--provider",
                "local",
            ])
            .args(["--root", &s("root")])
            .args(args)
            .env_remove("CUBBY_TOKEN")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} started: {err}");
        assert!(
            err.contains(names) && err.contains("choose") || err.contains("keep it outside"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("t0ken"), "{err}");
    }
    // Nothing made: neither `hd` here nor in the root or the adoptable one.
    assert!(!b.join("hd").exists() && !b.join("root/hd").exists() && !b.join("adopt/hd").exists());
    // The control: the same flags apart start.
    let mut ok = Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args([
            "serve",
            "--host",
            "--listen",
            "127.0.0.1:0",
            "--provider",
            "local",
        ])
        .args([
            "--root",
            &s("root"),
            "--token-file",
            &s("tok"),
            "--host-dir",
            &s("hd"),
        ])
        .args(["--host-adopt", &s("adopt")])
        .env_remove("CUBBY_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (_addr, reader) = common::listening_address(&mut ok, "layout", START_WAIT, None);
    let _ = ok.kill();
    let _ = ok.wait();
    let _ = reader.join();
}

/// Red-team pass 8, L2: `--host-dir` bound inside the served root (in a
/// mount namespace the test makes) is the same directory under a name in
/// `/mcp`'s reach — every hosted workspace readable there. The paths lie
/// apart, so the check by name let it start (seen with the code before
/// this check: the server listened). Refused at start, naming both.
#[test]
fn a_host_dir_bound_inside_the_root_is_refused() {
    let base = tempfile::Builder::new()
        .prefix("cubby-layout-")
        .tempdir_in(FAR_BASE)
        .unwrap();
    let b = base.path().canonicalize().unwrap();
    for d in ["root/alias", "hd"] {
        std::fs::create_dir_all(b.join(d)).unwrap();
    }
    std::fs::write(b.join("hd/mark"), "").unwrap();
    let mut server = Command::new("unshare")
        .args(["-rm", "--propagation", "private", "sh", "-c"])
        .arg(
            "mount --bind \"$1\" \"$2\" || exit 96; test -e \"$2/mark\" || exit 97; \
             shift 2; exec \"$@\"",
        )
        .arg("sh")
        .arg(b.join("hd"))
        .arg(b.join("root/alias"))
        .arg(env!("CARGO_BIN_EXE_cubby"))
        .args(["serve", "--host", "--listen", "127.0.0.1:0"])
        .args(["--provider", "local", "--root"])
        .arg(b.join("root"))
        .arg("--host-dir")
        .arg(b.join("hd"))
        .env("CUBBY_TOKEN", "t0ken-t0ken-t0ken-t0ken")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its exit is waited for; one still running at the deadline started.
    let deadline = Instant::now() + START_WAIT;
    let status = loop {
        if let Some(status) = server.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if status.is_none() {
        let _ = server.kill();
        let _ = server.wait();
    }
    let mut err = String::new();
    std::io::Read::read_to_string(&mut server.stderr.take().unwrap(), &mut err).unwrap();
    let status = status.unwrap_or_else(|| panic!("the server started: {err}"));
    assert_ne!(status.code(), Some(97), "the bind did not reach --host-dir");
    assert_ne!(status.code(), Some(96), "mount --bind failed: {err}");
    assert!(!status.success());
    assert!(
        err.contains("--host-dir") && err.contains("choose directories apart"),
        "{err}"
    );
}

/// An MCP session at `/v1/sandboxes/{id}/mcp` of `far`: (port, headers
/// with the session) once initialized.
fn bound_session(far: &Far, id: &str) -> (u16, String) {
    mcp_session(far, &format!("/v1/sandboxes/{id}/mcp"))
}

/// An MCP session at `path` of `far` (`/mcp`, or a sandbox's).
fn mcp_session(far: &Far, path: &str) -> (u16, String) {
    let port: u16 = far.addr.rsplit_once(':').unwrap().1.parse().unwrap();
    let bearer = format!("Bearer {}", far.token);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "bound-test", "version": "1"}}})
    .to_string();
    let (status, head, body) = common::request_to(
        port,
        "POST",
        path,
        init.as_bytes(),
        &[("Authorization", bearer.as_str())],
    );
    assert_eq!(status, 200, "{head}\n{body}");
    let answer = common::mcp_message(&head, &body);
    assert_eq!(
        answer["result"]["serverInfo"]["name"],
        json!("cubby"),
        "{answer}"
    );
    let session = common::header(&head, "mcp-session-id")
        .expect("a session id")
        .to_string();
    let (status, head, body) = common::request_to(
        port,
        "POST",
        path,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
            .to_string()
            .as_bytes(),
        &[
            ("Authorization", bearer.as_str()),
            ("Mcp-Session-Id", session.as_str()),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
    );
    assert!(status == 200 || status == 202, "{status} {head}\n{body}");
    (port, session)
}

/// A `tools/call` on a bound session: (HTTP status, is_error, text).
fn bound_call(
    far: &Far,
    id: &str,
    session: &str,
    name: &str,
    arguments: Value,
) -> (u16, bool, String) {
    mcp_call(
        far,
        &format!("/v1/sandboxes/{id}/mcp"),
        session,
        name,
        arguments,
    )
}

/// A `tools/call` on an MCP session at `path`: (HTTP status, is_error, text).
fn mcp_call(
    far: &Far,
    path: &str,
    session: &str,
    name: &str,
    arguments: Value,
) -> (u16, bool, String) {
    let port: u16 = far.addr.rsplit_once(':').unwrap().1.parse().unwrap();
    let bearer = format!("Bearer {}", far.token);
    let (status, head, body) = common::request_to(
        port,
        "POST",
        path,
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}})
        .to_string()
        .as_bytes(),
        &[
            ("Authorization", bearer.as_str()),
            ("Mcp-Session-Id", session),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
    );
    if status != 200 {
        return (status, true, body);
    }
    let answer = common::mcp_message(&head, &body);
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (status, answer["result"]["isError"] == json!(true), text)
}

/// Issue 18: MCP sessions bound to one sandbox each
/// (`/v1/sandboxes/{id}/mcp`): the tools act in that sandbox alone, the
/// host's token is needed, and destroying the sandbox ends the session's
/// processes and the session.
#[test]
fn an_mcp_session_bound_to_a_sandbox_acts_in_it_alone() {
    let far = Far::start(&[], "127.0.0.1", &["--provider", "linux"]);
    let good = format!("Bearer {}", far.token);
    let create = || {
        let (status, body) = http(&far.addr, "POST", "/v1/sandboxes", Some(&good), "{}");
        assert_eq!(status, 201, "{body}");
        let created: Value = serde_json::from_str(&body).unwrap();
        created["id"].as_str().unwrap().to_string()
    };
    let (a, b) = (create(), create());
    let port: u16 = far.addr.rsplit_once(':').unwrap().1.parse().unwrap();
    // The token is needed; an unknown sandbox is not found.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "bound-test", "version": "1"}}})
    .to_string();
    let path_a = format!("/v1/sandboxes/{a}/mcp");
    let (status, head, _) = common::request_to(port, "POST", &path_a, init.as_bytes(), &[]);
    assert_eq!(status, 401, "{head}");
    let (status, head, _) = common::request_to(
        port,
        "POST",
        "/v1/sandboxes/1-0000000000000000/mcp",
        init.as_bytes(),
        &[("Authorization", good.as_str())],
    );
    assert_eq!(status, 404, "{head}");

    let (_, session_a) = bound_session(&far, &a);
    let (_, session_b) = bound_session(&far, &b);
    let (status, failed, text) = bound_call(
        &far,
        &a,
        &session_a,
        "write_file",
        json!({"path": "note.txt", "content": "from a's session\n"}),
    );
    assert!(status == 200 && !failed, "{status} {text}");
    let (_, failed, text) = bound_call(
        &far,
        &b,
        &session_b,
        "run",
        json!({"command": "ls; cat note.txt"}),
    );
    assert!(
        !text.contains("from a's session"),
        "b sees a's file: {failed} {text}"
    );
    let (_, failed, text) = bound_call(
        &far,
        &a,
        &session_a,
        "run",
        json!({"command": "cat note.txt"}),
    );
    assert!(!failed && text.contains("from a's session"), "{text}");
    // Through /v1: the file is in a's workspace, not in b's nor the root.
    let (status, body) = http(
        &far.addr,
        "GET",
        &fs_path(&a, "file", "note.txt"),
        Some(&good),
        "",
    );
    assert!(
        status == 200 && body.contains("from a's session\n"),
        "{status} {body}"
    );
    let (status, _) = http(
        &far.addr,
        "GET",
        &fs_path(&b, "file", "note.txt"),
        Some(&good),
        "",
    );
    assert_eq!(status, 404);
    assert!(!far._dir.path().join("root/note.txt").exists());

    // A process the session started dies with the sandbox; the session ends.
    let daemon = marker("bound-session");
    let (_, failed, text) = bound_call(
        &far,
        &a,
        &session_a,
        "start_process",
        json!({"name": "bg", "command": format!("exec -a {daemon} sleep 1000")}),
    );
    assert!(!failed, "{text}");
    wait_for(
        "the session's process starts",
        Duration::from_secs(30),
        || !processes_with(&daemon).is_empty(),
    );
    let (status, body) = http(
        &far.addr,
        "DELETE",
        &format!("/v1/sandboxes/{a}"),
        Some(&good),
        "",
    );
    assert_eq!(status, 204, "{body}");
    assert_eq!(processes_with(&daemon), Vec::<String>::new());
    let (status, failed, text) = bound_call(
        &far,
        &a,
        &session_a,
        "run",
        json!({"command": "echo still"}),
    );
    assert!(status != 200 || failed, "{status} {text}");
    assert!(!text.contains("still"), "{text}");
    // The other sandbox's session goes on.
    let (_, failed, text) = bound_call(
        &far,
        &b,
        &session_b,
        "run",
        json!({"command": "echo alive"}),
    );
    assert!(!failed && text.contains("alive"), "{text}");

    // Sessions on one sandbox are bounded (red-team pass 7, G5): b has
    // one; the cap's worth opens, the next is refused with 429 until one
    // ends.
    let port: u16 = far.addr.rsplit_once(':').unwrap().1.parse().unwrap();
    let path_b = format!("/v1/sandboxes/{b}/mcp");
    let mut opened = vec![session_b];
    while opened.len() < cubby_mcp::MAX_SESSIONS_PER_SANDBOX {
        opened.push(bound_session(&far, &b).1);
    }
    let (status, head, body) = common::request_to(
        port,
        "POST",
        &path_b,
        init.as_bytes(),
        &[("Authorization", good.as_str())],
    );
    assert_eq!(status, 429, "{head}\n{body}");
    assert!(body.contains("limit"), "{body}");
    let last = opened.pop().unwrap();
    let (status, head, _) = common::request_to(
        port,
        "DELETE",
        &path_b,
        b"",
        &[
            ("Authorization", good.as_str()),
            ("Mcp-Session-Id", last.as_str()),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
    );
    assert!(status == 200 || status == 204, "{head}");
    bound_session(&far, &b);
}

/// `/v1/sandboxes/{id}/fs/{op}?path=` of a workspace path.
fn fs_path(id: &str, op: &str, path: &str) -> String {
    format!(
        "/v1/sandboxes/{id}/fs/{op}?path={}",
        cubby::remote::wire::encode_bytes(path.as_bytes())
    )
}

#[test]
fn the_host_applies_its_own_policy_to_file_calls() {
    // A far server whose config denies reading a file (and protects, as
    // always, git's surface and the skills directory), in a workspace it
    // lets the caller adopt.
    let shared = tempfile::tempdir().unwrap();
    let workspace = shared.path().canonicalize().unwrap().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    std::fs::write(workspace.join("secret.env"), "KEY=1\n").unwrap();
    std::fs::write(workspace.join("plain.txt"), "plain\n").unwrap();
    let config = shared.path().join("far.toml");
    std::fs::write(
        &config,
        "deny_read = [\"secret.env\"]\n[limits.write_file]\nmax_bytes = 100\n\
         [limits.edit_file]\nmax_bytes = 100\n",
    )
    .unwrap();
    let far = Far::start(
        &[],
        "127.0.0.1",
        &[
            "--provider",
            "linux",
            "--config",
            config.to_str().unwrap(),
            "--host-adopt",
            shared.path().to_str().unwrap(),
        ],
    );
    let good = format!("Bearer {}", far.token);
    let body = json!({"root": workspace.to_str().unwrap()}).to_string();
    let (status, body) = http(&far.addr, "POST", "/v1/sandboxes", Some(&good), &body);
    assert_eq!(status, 201, "{body}");
    let created: serde_json::Value = serde_json::from_str(&body).unwrap();
    let id = created["id"].as_str().unwrap();
    let put = |path: &str| {
        http(
            &far.addr,
            "PUT",
            &fs_path(id, "file", path),
            Some(&good),
            "x",
        )
    };
    // What the file tools may do, the API may do; no more than they may.
    assert_eq!(put("a.txt").0, 204);
    let (status, body) = http(
        &far.addr,
        "PUT",
        &fs_path(id, "file", "big.txt"),
        Some(&good),
        &"y".repeat(101),
    );
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("too_large"), "{body}");
    assert!(!workspace.join("big.txt").exists());
    let (status, body) = http(
        &far.addr,
        "GET",
        &fs_path(id, "file", "plain.txt"),
        Some(&good),
        "",
    );
    // (chunked: the content streams)
    assert!(status == 200 && body.contains("plain\n"), "{status} {body}");
    // What they may not, it may not: git's executable surface, a protected
    // path, a denied one (read or written).
    for path in [
        ".git/config",
        ".git/hooks/pre-commit",
        "skills/a/SKILL.md",
        "secret.env",
    ] {
        let (status, body) = put(path);
        assert_eq!(status, 403, "{path}: {body}");
        assert!(body.contains("\"denied\""), "{body}");
    }
    let (status, _) = http(
        &far.addr,
        "POST",
        &fs_path(id, "mkdir", ".git/hooks"),
        Some(&good),
        "",
    );
    assert_eq!(status, 403);
    let (status, body) = http(
        &far.addr,
        "GET",
        &fs_path(id, "file", "secret.env"),
        Some(&good),
        "",
    );
    assert_eq!(status, 403, "{body}");
    assert!(!body.contains("KEY=1"), "{body}");
    assert!(!workspace.join(".git").exists() && !workspace.join("skills").exists());
    assert_eq!(
        std::fs::read_to_string(workspace.join("secret.env")).unwrap(),
        "KEY=1\n"
    );

    // A far server in mode read-only changes nothing through the API.
    let far = Far::start(
        &[],
        "127.0.0.1",
        &["--provider", "linux", "--mode", "read-only"],
    );
    let good = format!("Bearer {}", far.token);
    let (status, body) = http(&far.addr, "POST", "/v1/sandboxes", Some(&good), "{}");
    assert_eq!(status, 201, "{body}");
    let created: serde_json::Value = serde_json::from_str(&body).unwrap();
    let id = created["id"].as_str().unwrap();
    let (status, body) = http(
        &far.addr,
        "PUT",
        &fs_path(id, "file", "a.txt"),
        Some(&good),
        "x",
    );
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("read-only"), "{body}");
    let (status, _) = http(
        &far.addr,
        "POST",
        &fs_path(id, "mkdir", "d"),
        Some(&good),
        "",
    );
    assert_eq!(status, 403);
    let (status, _) = http(
        &far.addr,
        "GET",
        &fs_path(id, "metadata", "a.txt"),
        Some(&good),
        "",
    );
    assert_eq!(status, 404);
    // The caller's tar is the workspace's start, not a change by the
    // tools: a read-only host takes it (under the same path rules).
    let archive = raw_tar(&[("seed.txt", tar::EntryType::Regular, b"seed\n", 0o644)]);
    let (status, body) = http_bytes(&far, "/v1/sandboxes", "application/x-tar", &archive);
    assert_eq!(status, 201, "{body}");
    let created: serde_json::Value = serde_json::from_str(&body).unwrap();
    let id = created["id"].as_str().unwrap();
    let (status, body) = http(
        &far.addr,
        "GET",
        &fs_path(id, "file", "seed.txt"),
        Some(&good),
        "",
    );
    assert!(status == 200 && body.contains("seed\n"), "{status} {body}");
    let archive = raw_tar(&[(".git/config", tar::EntryType::Regular, b"x", 0o644)]);
    let (status, body) = http_bytes(&far, "/v1/sandboxes", "application/x-tar", &archive);
    assert_eq!(status, 403, "{body}");
}

/// One raw HTTP/1.1 request with a binary body of `content_type`:
/// (status, body).
fn http_bytes(far: &Far, path: &str, content_type: &str, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(&far.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
         Content-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        far.addr,
        far.token,
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    // The server may answer (and close) before reading it all.
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, body.to_string())
}

/// A tar entry written raw (so that it may break every rule): path, kind,
/// content (or a link's target), mode.
type RawEntry<'a> = (&'a str, tar::EntryType, &'a [u8], u32);

fn raw_tar(entries: &[RawEntry<'_>]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, kind, body, mode) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(*kind);
        header.set_mode(*mode);
        let is_link = matches!(kind, tar::EntryType::Symlink | tar::EntryType::Link);
        let data: &[u8] = if is_link || kind.is_dir() { b"" } else { body };
        header.set_size(data.len() as u64);
        let old = header.as_old_mut();
        old.name[..path.len()].copy_from_slice(path.as_bytes());
        if is_link {
            old.linkname[..body.len()].copy_from_slice(body);
        }
        header.set_cksum();
        builder.append(&header, data).unwrap();
    }
    builder.into_inner().unwrap()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(data).unwrap();
    gz.finish().unwrap()
}

/// The text of a finished raw `exec` answer (its chunked frames).
fn exec_output(far: &Far, id: &str, script: &str) -> String {
    let mut stream = exec_raw(far, id, script);
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    while !raw.ends_with(b"\r\n0\r\n\r\n") {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "the exec answer broke off");
        raw.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&raw).into_owned()
}

/// Issue 18: a tar body larger than the server's cap on a request body
/// (`MAX_BODY_BYTES`, 64 MiB, which the tar body was once read whole
/// under: refused with 413) makes a workspace, unpacked as it arrives:
/// the far server's peak resident set grows by far less than the body,
/// which this side writes as it makes it (nothing holds it whole).
#[test]
fn a_tar_larger_than_a_request_body_is_unpacked_as_it_arrives() {
    const FILES: usize = 10;
    const FILE_BYTES: usize = 8 * 1024 * 1024;
    const CHUNK: usize = 64 * 1024;
    /// Most the server's peak may grow by (the body is 80 MiB).
    const MAX_GROWTH_KIB: u64 = 32 * 1024;
    let far = Far::start(&[], "127.0.0.1", &["--provider", "linux"]);
    let pid = far.child.id().to_string();
    let before = common::peak_kib(&pid);
    let total = FILES * (512 + FILE_BYTES) + 1024;
    let mut s = TcpStream::connect(&far.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let head = format!(
        "POST /v1/sandboxes HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/x-tar\r\nContent-Length: {total}\r\nConnection: close\r\n\r\n",
        far.addr, far.token
    );
    s.write_all(head.as_bytes()).unwrap();
    for i in 0..FILES {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(0o644);
        header.set_size(FILE_BYTES as u64);
        header.set_path(format!("f{i}.bin")).unwrap();
        header.set_cksum();
        s.write_all(header.as_bytes()).unwrap();
        let chunk: Vec<u8> = (0..CHUNK).map(|j| ((i * 7 + j) % 251) as u8).collect();
        for _ in 0..FILE_BYTES / CHUNK {
            s.write_all(&chunk).unwrap();
        }
    }
    s.write_all(&[0u8; 1024]).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    assert!(text.starts_with("HTTP/1.1 201"), "{text}");
    let grown = common::peak_kib(&pid).saturating_sub(before);
    assert!(
        grown < MAX_GROWTH_KIB,
        "the server's peak grew by {grown} KiB for an 80 MiB body"
    );
    let body = text.split_once("\r\n\r\n").unwrap().1;
    let created: Value = serde_json::from_str(body).unwrap();
    let id = created["id"].as_str().unwrap();
    let out = exec_output(
        &far,
        id,
        "cat f*.bin | wc -c; tail -c 3 f9.bin | od -An -tu1 | tr -s ' '",
    );
    let want = (FILES * FILE_BYTES).to_string();
    assert!(out.contains(&want), "{out}");
    // The last three bytes of f9: the end of its chunk's pattern.
    let tail: String = (CHUNK - 3..CHUNK)
        .map(|j| format!(" {}", (9 * 7 + j) % 251))
        .collect();
    assert!(out.contains(&tail), "{out}");
    eprintln!("the server's peak grew by {grown} KiB");
}

/// Issue 18: a sandbox whose workspace starts from a tar the caller sends
/// (raw, then gzipped by the `remote` provider's upload): its files, modes
/// and links are there for the file calls and commands, setuid is
/// stripped, and `changes` starts from the unpacked tree.
#[test]
fn a_workspace_from_a_tar_the_caller_sends() {
    use tar::EntryType as T;
    let far = Far::start(&[], "127.0.0.1", &["--provider", "linux"]);
    let good = format!("Bearer {}", far.token);
    // Over the 2 MB a web framework's extractors take by default.
    let big: Vec<u8> = (0..3 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    let archive = raw_tar(&[
        ("./", T::Directory, b"", 0o755),
        ("big.bin", T::Regular, &big, 0o644),
        ("src/", T::Directory, b"", 0o755),
        ("src/main.rs", T::Regular, b"fn main() {}\n", 0o644),
        (
            "bin/run.sh",
            T::Regular,
            b"#!/bin/sh\necho ran-from-tar\n",
            0o4755,
        ),
        ("empty/", T::Directory, b"", 0o750),
        ("link", T::Symlink, b"src/main.rs", 0o777),
    ]);
    let (status, body) = http_bytes(&far, "/v1/sandboxes", "application/x-tar", &archive);
    assert_eq!(status, 201, "{body}");
    let created: serde_json::Value = serde_json::from_str(&body).unwrap();
    let id = created["id"].as_str().unwrap().to_string();
    let (status, body) = http(
        &far.addr,
        "GET",
        &fs_path(&id, "file", "src/main.rs"),
        Some(&good),
        "",
    );
    assert!(
        status == 200 && body.contains("fn main() {}"),
        "{status} {body}"
    );
    let out = exec_output(
        &far,
        &id,
        "cat link; stat -c '%a %n' bin/run.sh empty; ./bin/run.sh; wc -c < big.bin",
    );
    for expected in [
        "3145728",
        "fn main() {}",
        "755 bin/run.sh",
        "750 empty",
        "ran-from-tar",
    ] {
        assert!(out.contains(expected), "{expected}: {out}");
    }
    let (status, body) = http(
        &far.addr,
        "GET",
        &format!("/v1/sandboxes/{id}/changes"),
        Some(&good),
        "",
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("No changes"), "{body}");

    // The `remote` provider's upload: a directory of this side, gzipped.
    let near = tempfile::tempdir().unwrap();
    std::fs::create_dir(near.path().join("docs")).unwrap();
    std::fs::write(near.path().join("docs/notes.md"), "uploaded notes\n").unwrap();
    std::os::unix::fs::symlink("docs/notes.md", near.path().join("notes")).unwrap();
    let sandbox = RemoteSandbox::open(&RemoteOptions {
        url: far.url(),
        token: far.token.clone(),
        root: None,
        upload: Some(near.path().to_path_buf()),
    })
    .unwrap();
    let t = cubby::Toolset::builder(std::sync::Arc::new(sandbox))
        .host_env(cubby::HostEnv::capture())
        .build()
        .unwrap();
    let out = t.call("read_file", json!({"path": "docs/notes.md"}));
    assert!(out.text.contains("uploaded notes"), "{}", out.text);
    let out = t.call("run", json!({"command": "cat notes; readlink notes"}));
    assert!(
        out.text.contains("uploaded notes") && out.text.contains("docs/notes.md"),
        "{}",
        out.text
    );
    let out = t.call("changes", json!({}));
    assert!(out.text.contains("No changes"), "{}", out.text);

    // An upload holding a link out of its tree is refused by the far side,
    // and says why.
    std::os::unix::fs::symlink("/etc", near.path().join("etc")).unwrap();
    let refused = RemoteSandbox::open(&RemoteOptions {
        url: far.url(),
        token: far.token.clone(),
        root: None,
        upload: Some(near.path().to_path_buf()),
    });
    let message = refused.err().unwrap().to_string();
    assert!(
        message.starts_with("ERROR denied:") && message.contains("outside the workspace"),
        "{message}"
    );
}

/// Issue 18: every tar that breaks an unpacking rule fails the create
/// whole: nothing lands outside (an outside directory the tar aims at
/// stays empty), no workspace is left in `--host-dir`, a flood stops at
/// the server's caps, a malformed tar gets a 400 that says so, and the
/// server keeps serving.
#[test]
fn a_tar_that_breaks_a_rule_makes_no_workspace() {
    use tar::EntryType as T;
    let outside = tempfile::Builder::new()
        .prefix("cubby-outside-")
        .tempdir_in(FAR_BASE)
        .unwrap();
    let out_dir = outside.path().canonicalize().unwrap();
    let config = outside.path().join("far.toml");
    std::fs::write(
        &config,
        "[limits.write_file]\nmax_bytes = 1048576\n[limits.edit_file]\nmax_bytes = 1048576\n",
    )
    .unwrap();
    let far = Far::start(
        &[],
        "127.0.0.1",
        &["--provider", "linux", "--config", config.to_str().unwrap()],
    );
    let target = out_dir.join("target");
    std::fs::create_dir(&target).unwrap();
    let abs = format!("{}/x", target.display());
    let abs_dir = target.display().to_string();
    // `..` enough to climb from the host's workspace to `/`, then down.
    let climb = format!("../../../../../../../..{}/x", target.display());
    let bomb = vec![0u8; 8 * 1024 * 1024];
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "absolute path",
            raw_tar(&[(&abs, T::Regular, b"x", 0o644)]),
            403,
            "absolute",
        ),
        (
            "a climb",
            raw_tar(&[(&climb, T::Regular, b"x", 0o644)]),
            403,
            "`..`",
        ),
        (
            "a link out, then through it",
            raw_tar(&[
                ("a", T::Symlink, abs_dir.as_bytes(), 0o777),
                ("a/x", T::Regular, b"x", 0o644),
            ]),
            403,
            "outside the workspace",
        ),
        (
            "a relative link out",
            raw_tar(&[("a", T::Symlink, climb.as_bytes(), 0o777)]),
            403,
            "outside the workspace",
        ),
        (
            "through a link inside",
            raw_tar(&[
                ("d/", T::Directory, b"", 0o755),
                ("a", T::Symlink, b"d", 0o777),
                ("a/x", T::Regular, b"x", 0o644),
            ]),
            403,
            "through `a`",
        ),
        (
            "a hard link out",
            raw_tar(&[("h", T::Link, abs.as_bytes(), 0o644)]),
            403,
            "absolute",
        ),
        (
            "a FIFO",
            raw_tar(&[("p", T::Fifo, b"", 0o644)]),
            400,
            "FIFO",
        ),
        (
            "a device",
            raw_tar(&[("c", T::Block, b"", 0o644)]),
            400,
            "block device",
        ),
        (
            "a git hook",
            raw_tar(&[(".git/hooks/pre-commit", T::Regular, b"#!/bin/sh\n", 0o755)]),
            403,
            ".git",
        ),
        (
            "git's config",
            raw_tar(&[("sub/.git/config", T::Regular, b"[core]\n", 0o644)]),
            403,
            ".git",
        ),
        (
            "a control character",
            raw_tar(&[("a\nb", T::Regular, b"x", 0o644)]),
            400,
            "control character",
        ),
        (
            "a gzip bomb",
            gzip(&raw_tar(&[("zeros", T::Regular, &bomb, 0o644)])),
            413,
            "limits.write_file.max_bytes",
        ),
        (
            "garbage",
            b"this is not a tar, only text; it is long enough to not be one".repeat(20),
            400,
            "malformed",
        ),
        (
            "a truncated tar",
            raw_tar(&[("a.txt", T::Regular, &[b'x'; 4000], 0o644)])[..2000].to_vec(),
            400,
            "truncated",
        ),
    ];
    let host_dir = far._dir.path().join("sandboxes");
    let good = format!("Bearer {}", far.token);
    for (what, archive, status, says) in &cases {
        let (got, body) = http_bytes(&far, "/v1/sandboxes", "application/x-tar", archive);
        assert_eq!(got, *status, "{what}: {body}");
        assert!(body.contains(says), "{what}: {body}");
        assert_eq!(
            std::fs::read_dir(&target).unwrap().count(),
            0,
            "{what}: written outside"
        );
        assert_eq!(
            std::fs::read_dir(&host_dir)
                .unwrap()
                .flatten()
                .filter(|e| e.file_name() != ".stores")
                .count(),
            0,
            "{what}: a workspace was left behind"
        );
        let (_, ids) = http(&far.addr, "GET", "/v1/sandboxes", Some(&good), "");
        assert_eq!(ids, "[]", "{what}");
    }
    // The server keeps serving: JSON and tar creates both work.
    let (status, body) = http(&far.addr, "POST", "/v1/sandboxes", Some(&good), "{}");
    assert_eq!(status, 201, "{body}");
    let ok = gzip(&raw_tar(&[("a.txt", T::Regular, b"fine\n", 0o644)]));
    let (status, body) = http_bytes(&far, "/v1/sandboxes", "application/gzip", &ok);
    assert_eq!(status, 201, "{body}");
}

/// Issue 18: `[remote] upload = "DIR"` (relative to the near workspace's
/// root) starts the far workspace with that directory's tree, through
/// `cubby call`.
#[test]
fn the_remote_config_uploads_a_directory_at_create() {
    let far = Far::start(&[], "127.0.0.1", &["--provider", "linux"]);
    let near = tempfile::tempdir().unwrap();
    let seed = near.path().join("seed");
    std::fs::create_dir_all(seed.join("sub")).unwrap();
    std::fs::write(seed.join("sub/a.txt"), "seeded by the config\n").unwrap();
    let token_file = near.path().join("token");
    std::fs::write(&token_file, &far.token).unwrap();
    let config = near.path().join("near.toml");
    std::fs::write(
        &config,
        format!(
            "[remote]\nurl = \"{}\"\ntoken_file = \"{}\"\nupload = \"seed\"\n",
            far.url(),
            token_file.display()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args([
            "call",
            "run",
            &json!({"command": "cat sub/a.txt; ls"}).to_string(),
            "--provider",
            "remote",
            "--config",
        ])
        .arg(&config)
        .arg("--root")
        .arg(near.path())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("seeded by the config"), "{stdout}");
    // The tree of `seed`, not the near root: no `seed/` nor the token.
    assert!(
        !stdout.contains("token") && !stdout.contains("seed\n"),
        "{stdout}"
    );
}

/// Sends a request head (and no body) to the far server from `source`:
/// `headers` are added to `Host` and the token.
fn head_only(
    far: &Far,
    source: std::net::Ipv4Addr,
    method: &str,
    path: &str,
    headers: &str,
) -> TcpStream {
    let mut s = common::connect_from(source, far.addr.parse().unwrap());
    s.set_read_timeout(Some(ANSWER_WAIT)).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n{headers}\r\n",
        far.addr, far.token
    );
    s.write_all(head.as_bytes()).unwrap();
    s
}

/// Reads an answer's head (up to its blank line): the status and the head.
fn read_head(s: &mut TcpStream) -> (u16, String) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            other => panic!(
                "the answer broke off ({other:?}) after {:?}",
                String::from_utf8_lossy(&head)
            ),
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head)
}

/// Reads a whole answer (`Connection: close` or a body of known length):
/// the status and the text.
fn read_answer(s: &mut TcpStream) -> (u16, String) {
    let (status, head) = read_head(s);
    let length = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().to_string())
        })
        .and_then(|v| v.parse::<usize>().ok());
    let mut body = vec![0u8; length.unwrap_or(0)];
    s.read_exact(&mut body).unwrap();
    (status, format!("{head}{}", String::from_utf8_lossy(&body)))
}

/// Longest wait for an answer the server should give at once.
const ANSWER_WAIT: Duration = Duration::from_secs(10);

/// Waits for the server to close `s` (what it says first is read); the
/// time from `since`.
fn closed_after(s: &mut TcpStream, since: Instant) -> Duration {
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return since.elapsed(),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return since.elapsed(),
            Err(e) => panic!("the server kept the connection open: {e}"),
        }
    }
}

fn loopback(n: u8) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::new(127, 0, 0, n)
}

/// Red-team pass 6, F3: connections that never finish their request head
/// (no token needed) took every descriptor of the server. Now one address
/// holds at most its share (a connection past it is closed at once), the
/// server stays reachable to others (`/healthz`, the token holder), and a
/// half-sent head is closed after the header timeout.
#[test]
fn half_sent_heads_cannot_take_the_server() {
    use cubby::host::http::{ConnectionLimits, HEADER_READ_TIMEOUT};
    let far = Far::start(&[], "127.0.0.1", &["--provider", "local"]);
    let addr: std::net::SocketAddr = far.addr.parse().unwrap();
    // `cubby serve` raises its open-files limit to the hard one.
    let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum;
    let per_peer = ConnectionLimits::fitting(hard).max_per_peer;
    let start = Instant::now();
    let mut halves: Vec<TcpStream> = (0..per_peer)
        .map(|_| {
            let mut s = common::connect_from(loopback(1), addr);
            s.set_read_timeout(Some(HEADER_READ_TIMEOUT + ANSWER_WAIT))
                .unwrap();
            s.write_all(b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\n")
                .unwrap();
            s
        })
        .collect();
    let mut extra = common::connect_from(loopback(1), addr);
    extra.set_read_timeout(Some(HEADER_READ_TIMEOUT)).unwrap();
    let since = Instant::now();
    let took = closed_after(&mut extra, since);
    assert!(took < HEADER_READ_TIMEOUT / 2, "closed after {took:?}");
    // Others are served meanwhile: the probe without a token, and the API.
    let mut probe = common::connect_from(loopback(2), addr);
    probe.set_read_timeout(Some(ANSWER_WAIT)).unwrap();
    probe
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let (status, text) = read_answer(&mut probe);
    assert_eq!(status, 200, "{text}");
    let mut list = head_only(&far, loopback(2), "GET", "/v1/sandboxes", "");
    let (status, text) = read_answer(&mut list);
    assert_eq!(status, 200, "{text}");
    // The half-sent heads are closed once their time is up.
    for s in &mut halves {
        let took = closed_after(s, start);
        assert!(
            took < HEADER_READ_TIMEOUT + ANSWER_WAIT,
            "closed after {took:?}"
        );
    }
}

/// A far server whose sandboxes write files of at most `max` bytes, with a
/// sandbox: the server and the sandbox's id.
fn far_with_file_limit(max: Option<u64>) -> (Far, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut extra = vec!["--provider".to_string(), "local".to_string()];
    if let Some(max) = max {
        let config = dir.path().join("far.toml");
        std::fs::write(
            &config,
            format!(
                "[limits.write_file]\nmax_bytes = {max}\n[limits.edit_file]\nmax_bytes = {max}\n"
            ),
        )
        .unwrap();
        extra.push("--config".into());
        extra.push(config.to_str().unwrap().into());
    }
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let far = Far::start(&[], "127.0.0.1", &extra);
    let good = format!("Bearer {}", far.token);
    let (status, body) = http(&far.addr, "POST", "/v1/sandboxes", Some(&good), "{}");
    assert_eq!(status, 201, "{body}");
    let created: serde_json::Value = serde_json::from_str(&body).unwrap();
    let id = created["id"].as_str().unwrap().to_string();
    (far, id, dir)
}

/// Red-team pass 6, F5: a file body was read (up to 64 MiB) before the
/// sandbox's write limit was checked. Now a `Content-Length` over the
/// limit is answered 413 at once, without the body.
#[test]
fn a_file_longer_than_the_limit_is_refused_before_its_body() {
    let (far, id, _dir) = far_with_file_limit(Some(1000));
    let mut put = head_only(
        &far,
        loopback(1),
        "PUT",
        &fs_path(&id, "file", "big.txt"),
        "Content-Length: 1001\r\n",
    );
    let (status, text) = read_answer(&mut put);
    assert_eq!(status, 413, "{text}");
    assert!(
        text.contains("too_large") && text.contains("limits.write_file.max_bytes"),
        "{text}"
    );
}

/// Red-team pass 6, F5: nothing capped the bodies held at once (four
/// 60 MiB bodies in flight took 254 MB). Now every body is counted in
/// the server's budget from its head: a request that does not fit is
/// answered 429 at once (`/v1` and `/mcp` share the budget), and the
/// budget is free again when the held bodies go.
#[test]
fn bodies_in_flight_are_bounded_by_the_servers_budget() {
    use cubby::host::http::MAX_BODY_BUDGET_BYTES;
    const BODY: usize = 30 * 1024 * 1024;
    const SENT: usize = 1024 * 1024;
    let (far, id, _dir) = far_with_file_limit(None);
    let path = fs_path(&id, "file", "big.bin");
    let length = format!("Content-Length: {BODY}\r\nExpect: 100-continue\r\n");
    // Each body is reserved when the server asks for it (100 Continue).
    let held: Vec<TcpStream> = (0..MAX_BODY_BUDGET_BYTES / BODY)
        .map(|_| {
            let mut s = head_only(&far, loopback(1), "PUT", &path, &length);
            let (status, head) = read_head(&mut s);
            assert_eq!(status, 100, "{head}");
            s.write_all(&vec![b'x'; SENT]).unwrap();
            s
        })
        .collect();
    let mut refused = head_only(&far, loopback(2), "PUT", &path, &length);
    let (status, text) = read_answer(&mut refused);
    assert_eq!(status, 429, "{text}");
    assert!(text.contains("limit") && text.contains("retry"), "{text}");
    let mut mcp = head_only(
        &far,
        loopback(2),
        "POST",
        "/mcp",
        &format!(
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{length}"
        ),
    );
    let (status, text) = read_answer(&mut mcp);
    assert_eq!(status, 429, "{text}");
    // The MCP endpoint bound to a sandbox counts in the same budget (its
    // layers were once added before its route, which they then missed).
    let mut bound = head_only(
        &far,
        loopback(2),
        "POST",
        &format!("/v1/sandboxes/{id}/mcp"),
        &format!(
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{length}"
        ),
    );
    let (status, text) = read_answer(&mut bound);
    assert_eq!(status, 429, "{text}");
    drop(held);
    let good = format!("Bearer {}", far.token);
    wait_for("the held bodies' bytes are free", ANSWER_WAIT, || {
        http(&far.addr, "PUT", &path, Some(&good), &"y".repeat(SENT)).0 == 204
    });
}

/// Starts `sleep` with stdin (never read) in far sandbox `id`: the
/// answer's connection (the command lives while it is open) and the
/// command's number.
fn exec_never_reading(far: &Far, id: &str) -> (TcpStream, u64) {
    let body = json!({
        "argv": ["/bin/sleep", "300"],
        "cwd": "",
        "env": [],
        "stdin": true,
        "output_dir": null,
    })
    .to_string();
    let mut s = head_only(
        far,
        loopback(1),
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        &format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ),
    );
    s.write_all(body.as_bytes()).unwrap();
    let (status, head) = read_head(&mut s);
    assert_eq!(status, 200, "{head}");
    let command = head
        .lines()
        .find_map(|l| l.strip_prefix("x-cubby-command: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no command number in {head}"));
    (s, command)
}

/// Whether the server has answered (or closed) the request on `s`, without
/// waiting.
fn answered(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let got = s.peek(&mut [0u8; 1]);
    s.set_nonblocking(false).unwrap();
    !matches!(got, Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// Red-team pass 6, F6: each stdin write to a command that does not read
/// held a thread of tokio's blocking pool for 30 s; 560 of them stalled
/// every sandbox's file calls for 20 s. Now a command takes one write at
/// a time (the others: 409 at once), on a thread of its own, and another
/// sandbox's file call answers at once.
#[test]
fn stdin_writes_to_a_command_that_never_reads_hold_up_nothing() {
    /// Writes sent at once: more than tokio's blocking pool (512 threads).
    const WRITES: usize = 600;
    /// Addresses they come from: 75 each, under the per-peer cap even
    /// under an open-files limit of 1,024 (128).
    const FLOOD_ADDRESSES: usize = 8;
    let (far, id, _dir) = far_with_file_limit(None);
    let good = format!("Bearer {}", far.token);
    let (status, body) = http(&far.addr, "POST", "/v1/sandboxes", Some(&good), "{}");
    assert_eq!(status, 201, "{body}");
    let created: serde_json::Value = serde_json::from_str(&body).unwrap();
    let other = created["id"].as_str().unwrap().to_string();
    let (_command_stream, n) = exec_never_reading(&far, &id);
    let stdin = format!("/v1/sandboxes/{id}/commands/{n}/stdin");
    let write = |source: std::net::Ipv4Addr, size: usize| {
        let mut s = head_only(
            &far,
            source,
            "POST",
            &stdin,
            &format!("Content-Length: {size}\r\nConnection: close\r\n"),
        );
        s.write_all(&vec![b'i'; size]).unwrap();
        s
    };
    // More than the pipe holds: this write waits for the command.
    let mut pending = write(loopback(1), 256 * 1024);
    // What the second writes were answered, for a failure's message.
    let mut answers = Vec::new();
    let deadline = Instant::now() + ANSWER_WAIT;
    loop {
        let (status, text) = read_answer(&mut write(loopback(1), 10));
        if status == 409 {
            break;
        }
        answers.push(text);
        // On a busy machine a small write can hold the slot when the large
        // one arrives, which is then refused: send it again.
        if answered(&pending) {
            pending = write(loopback(1), 256 * 1024);
        }
        assert!(
            Instant::now() < deadline,
            "a second write is not refused within {ANSWER_WAIT:?}: {} answers, the last: {:?}",
            answers.len(),
            answers.last()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Many at once, from a few addresses (each under its connection cap).
    let mut flood: Vec<TcpStream> = (0..WRITES)
        .map(|i| write(loopback(2 + (i % FLOOD_ADDRESSES) as u8), 10))
        .collect();
    let started = Instant::now();
    let (status, body) = http(
        &far.addr,
        "GET",
        &fs_path(&other, "metadata", "."),
        Some(&good),
        "",
    );
    let took = started.elapsed();
    assert_eq!(status, 200, "{body}");
    assert!(took < FILE_CALL_WITHIN, "the file call took {took:?}");
    let mut busy = 0;
    for s in &mut flood {
        let (status, text) = read_answer(s);
        assert!(status == 409 || status == 200, "{text}");
        if status == 409 {
            assert!(
                text.contains("\"kind\":\"limit\"") && text.contains("stdin write waiting"),
                "{text}"
            );
            busy += 1;
        }
    }
    // The pending write may end (after 30 s) while they are answered.
    assert!(busy >= WRITES - 2, "{busy} of {WRITES} refused");
}

/// Longest a file call may take while stdin writes wait (generous: it
/// took 21.7 s with the pool full, 0.00 s without).
const FILE_CALL_WITHIN: Duration = Duration::from_secs(5);
