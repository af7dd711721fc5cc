//! Sessions leave nothing behind (issue 13): the placeholder stash however
//! `cubby mcp` / `cubby serve` end, and reclaimed after a kill.

use crate::*;

/// A workspace and a private temp dir (the placeholder stash's home) on
/// one file system, for a server started by the test.
struct StashLab {
    _base: tempfile::TempDir,
    ws: std::path::PathBuf,
    tmp: std::path::PathBuf,
}

impl StashLab {
    fn new() -> StashLab {
        let base = tempfile::tempdir().unwrap();
        let ws = base.path().join("ws");
        let tmp = base.path().join("tmp");
        std::fs::create_dir(&ws).unwrap();
        std::fs::create_dir(&tmp).unwrap();
        StashLab {
            _base: base,
            ws,
            tmp,
        }
    }

    fn stash_base(&self) -> std::path::PathBuf {
        self.tmp.join(format!(
            "cubby-reserve-{}",
            rustix::process::getuid().as_raw()
        ))
    }

    /// What the stash base holds (placeholders, stashes), `None` when it is gone.
    fn stash_entries(&self) -> Option<Vec<String>> {
        let dir = std::fs::read_dir(self.stash_base()).ok()?;
        Some(
            dir.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
        )
    }

    fn mcp(&self) -> std::process::Child {
        Command::new(env!("CARGO_BIN_EXE_cubby"))
            .args(["mcp", "--provider", "linux", "--root"])
            .arg(&self.ws)
            .env("TMPDIR", &self.tmp)
            .env_remove("RUST_LOG")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    }

    /// Nothing of cubby's left in the workspace (placeholders at the
    /// missing protected paths).
    fn workspace_clean(&self) {
        let left: Vec<String> = std::fs::read_dir(&self.ws)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(left.is_empty(), "left in the workspace: {left:?}");
    }
}

/// Sends the handshake and the `tools/call` request `call` (id 2) to a
/// `cubby mcp`, and gives back its stdin and the answer's line; what else
/// the server writes is read and dropped.
fn call_once(child: &mut std::process::Child, call: &str) -> (std::process::ChildStdin, String) {
    use std::io::{BufRead, Write};
    let mut stdin = child.stdin.take().unwrap();
    for line in [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        call,
    ] {
        writeln!(stdin, "{line}").unwrap();
    }
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let answer = loop {
        let line = lines.next().expect("the server answered").unwrap();
        if line.contains(r#""id":2"#) {
            break line;
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (stdin, answer)
}

/// Sends the handshake and one `run` to a `cubby mcp`, and waits for its
/// answer: by then the command's placeholders went into the stash.
fn run_one_command(child: &mut std::process::Child) -> std::process::ChildStdin {
    let (stdin, answer) = call_once(
        child,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run","arguments":{"command":"echo ran"}}}"#,
    );
    assert!(answer.contains("OK exit=0"), "{answer}");
    stdin
}

/// Finding 18: a `cubby mcp` session ended by stdin EOF, SIGTERM (how
/// Codex CLI ends MCP servers) or SIGINT leaves no placeholder and no
/// stash. The control: while the session lives, its stash is there.
#[test]
fn mcp_sessions_leave_no_placeholder_stash_however_they_end() {
    for end in ["eof", "SIGTERM", "SIGINT"] {
        let lab = StashLab::new();
        let mut child = lab.mcp();
        let stdin = run_one_command(&mut child);
        let live = lab.stash_entries().unwrap_or_default();
        assert_eq!(
            live.len(),
            1,
            "[{end}] control: the session's stash: {live:?}"
        );
        match end {
            "eof" => drop(stdin),
            signal => {
                let sig = if signal == "SIGTERM" {
                    rustix::process::Signal::TERM
                } else {
                    rustix::process::Signal::INT
                };
                let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
                rustix::process::kill_process(pid, sig).unwrap();
            }
        }
        let status = child.wait().unwrap();
        assert!(status.success(), "[{end}] {status:?}");
        assert_eq!(lab.stash_entries(), None, "[{end}] the stash is removed");
        lab.workspace_clean();
    }
}

/// Finding 18 for `cubby serve`: ended by SIGTERM or SIGINT after a
/// command ran, it leaves no stash.
#[test]
fn serve_leaves_no_placeholder_stash_on_sigterm_and_sigint() {
    use std::io::{BufRead, Read, Write};
    for sig in [rustix::process::Signal::TERM, rustix::process::Signal::INT] {
        let lab = StashLab::new();
        let mut child = Command::new(env!("CARGO_BIN_EXE_cubby"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--provider",
                "linux",
                "--root",
            ])
            .arg(&lab.ws)
            .env("TMPDIR", &lab.tmp)
            .env_remove("RUST_LOG")
            .env_remove("CUBBY_TOKEN")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let addr = loop {
            let line = stderr.next().expect("serve names its address").unwrap();
            if let Some(rest) = line.split("http://").nth(1) {
                break rest.trim_end_matches("/mcp").to_string();
            }
        };
        std::thread::spawn(move || for _ in stderr {});
        let post = |body: &str, session: Option<&str>| -> String {
            let mut s = std::net::TcpStream::connect(&addr).unwrap();
            let session = session
                .map(|id| format!("Mcp-Session-Id: {id}\r\n"))
                .unwrap_or_default();
            write!(
                s,
                "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
                 Accept: application/json, text/event-stream\r\n{session}\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            let mut answer = String::new();
            s.read_to_string(&mut answer).unwrap();
            answer
        };
        let init = post(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
            None,
        );
        let session = init
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .starts_with("mcp-session-id:")
                    .then(|| l.split(':').nth(1).unwrap().trim().to_string())
            })
            .unwrap_or_else(|| panic!("no session: {init}"));
        post(
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            Some(&session),
        );
        let ran = post(
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run","arguments":{"command":"echo ran"}}}"#,
            Some(&session),
        );
        assert!(ran.contains("OK exit=0"), "{ran}");
        assert!(
            !lab.stash_entries().unwrap_or_default().is_empty(),
            "control: the server stashed its placeholders"
        );
        let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
        rustix::process::kill_process(pid, sig).unwrap();
        let status = child.wait().unwrap();
        assert!(status.success(), "{sig:?}: {status:?}");
        assert_eq!(lab.stash_entries(), None, "{sig:?}: the stash is removed");
        lab.workspace_clean();
    }
}

/// The stash of a SIGKILLed server (which drops nothing) is reclaimed by
/// the next start: a `cubby exec`, and a new session.
#[test]
fn a_killed_servers_stash_is_reclaimed_by_the_next_start() {
    for next in ["exec", "mcp"] {
        let lab = StashLab::new();
        let mut child = lab.mcp();
        let _stdin = run_one_command(&mut child);
        child.kill().unwrap();
        child.wait().unwrap();
        let left = lab.stash_entries().unwrap_or_default();
        assert_eq!(
            left.len(),
            1,
            "control: a killed server leaves its stash: {left:?}"
        );
        if next == "exec" {
            let out = Command::new(env!("CARGO_BIN_EXE_cubby"))
                .args(["exec", "--provider", "linux", "--root"])
                .arg(&lab.ws)
                .args(["--", "true"])
                .env("TMPDIR", &lab.tmp)
                .env_remove("RUST_LOG")
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
        } else {
            let mut again = lab.mcp();
            let stdin = run_one_command(&mut again);
            drop(stdin);
            assert!(again.wait().unwrap().success());
        }
        assert_eq!(lab.stash_entries(), None, "[{next}] reclaimed");
        lab.workspace_clean();
    }
}

/// Red-team pass 15, S1: while a command ran, a sandbox that another
/// process opened on the workspace (`cubby call`) removed the command's
/// placeholders as leftovers of a killed cubby — the read-only mount went
/// with them, and the command made `.claude/settings.json`. Now a sandbox
/// sweeps only when no live process holds reservations on the workspace.
/// The control: the placeholder is there while the command runs, before
/// the second process opens.
#[test]
fn another_process_opening_the_workspace_keeps_a_running_commands_placeholders() {
    let lab = StashLab::new();
    let mut child = lab.mcp();
    let command = "while [ ! -e go ]; do sleep 0.02; done; \
                   mkdir -p .claude 2>/dev/null; echo x > .claude/settings.json 2>/dev/null; \
                   touch done";
    let call = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "start_process", "arguments": {"name": "waiter", "command": command}}});
    let (stdin, answer) = call_once(&mut child, &call.to_string());
    assert!(!answer.contains("\"isError\":true"), "{answer}");
    // The control: the running command's placeholder.
    let claude = lab.ws.join(".claude");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !claude.exists() {
        assert!(std::time::Instant::now() < deadline, "no placeholder");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // Another process opens a sandbox on the workspace, runs, ends.
    let other = Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args(["call", "--provider", "linux", "--root"])
        .arg(&lab.ws)
        .args(["run", r#"{"command":"echo other"}"#])
        .env("TMPDIR", &lab.tmp)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&other.stdout).contains("other"),
        "{other:?}"
    );
    assert!(claude.exists(), "the other process removed the placeholder");
    std::fs::write(lab.ws.join("go"), "").unwrap();
    let done = lab.ws.join("done");
    while !done.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the command did not end"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        !claude.join("settings.json").exists(),
        "the command wrote a protected path"
    );
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

/// Red-team pass 18, F1: a command of another process that starts while a
/// session's placeholders linger after its command binds them as existing
/// protected paths; when the session's putter moved them into its stash,
/// the bind went with them and the command made `.claude/settings.json`
/// on the host (seen with the code before the lock: the file written).
/// Now the command holds each such placeholder with a shared lock, and the
/// putter leaves a held one in place. The control that the command did
/// start within the linger: the session's `.claude` is still there, left
/// in place, when the command ends.
#[test]
fn a_command_of_another_process_keeps_a_lingering_placeholders_cover() {
    let lab = StashLab::new();
    let init = Command::new("git")
        .args(["init", "-q"])
        .arg(&lab.ws)
        .status()
        .unwrap();
    assert!(init.success());
    let mut child = lab.mcp();
    let stdin = run_one_command(&mut child);
    // Within the session's linger (2 s): the command outlives it.
    let other = Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args(["exec", "--provider", "linux", "--root"])
        .arg(&lab.ws)
        .args([
            "--",
            "sh",
            "-c",
            "sleep 4; mkdir -p .claude; echo x > .claude/settings.json && echo WROTE",
        ])
        .env("TMPDIR", &lab.tmp)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&other.stdout);
    assert!(!said.contains("WROTE"), "{other:?}");
    assert!(
        !lab.ws.join(".claude/settings.json").exists(),
        "the command wrote a protected path"
    );
    assert!(
        lab.ws.join(".claude").is_dir(),
        "control: the command did not start while the placeholder lingered"
    );
    drop(stdin);
    assert!(child.wait().unwrap().success());
}
