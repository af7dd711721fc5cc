//! Black-box tests of the `cubby` binary: `call`, `tools`, config and flags.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn cubby(root: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args(args)
        .arg("--root")
        .arg(root)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn call_prints_model_text_and_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "hello\n").unwrap();
    let out = cubby(dir.path(), &["call", "read_file", r#"{"path":"a.txt"}"#]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "     1\thello\n");
    let out = cubby(dir.path(), &["call", "read_file", r#"{"path":"../a.txt"}"#]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).starts_with("ERROR path_escape: "));
    let out = cubby(dir.path(), &["call", "read_file", "{not json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).starts_with("ERROR invalid_input: "));
}

#[test]
fn call_json_prints_one_object() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "x\n").unwrap();
    let out = cubby(
        dir.path(),
        &["call", "read_file", r#"{"path":"a.txt"}"#, "--json"],
    );
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["is_error"], false);
    assert_eq!(v["text"], "     1\tx\n");
    assert_eq!(v["structured"]["total_lines"], 1);
    let out = cubby(
        dir.path(),
        &["call", "glob", r#"{"pattern":"["}"#, "--json"],
    );
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["is_error"], true);
    assert_eq!(v["structured"]["error"]["kind"], "invalid_input");
}

#[test]
fn call_reads_arguments_from_stdin() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args(["call", "write_file", "-", "--root"])
        .arg(dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"path":"n/new.txt","content":"made"}"#)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("n/new.txt")).unwrap(),
        "made"
    );
}

#[test]
fn tools_formats_are_valid_and_strict() {
    let dir = tempfile::tempdir().unwrap();
    for format in ["mcp", "openai", "anthropic"] {
        let out = cubby(dir.path(), &["tools", "--format", format]);
        assert_eq!(out.status.code(), Some(0));
        let tools: Vec<Value> = serde_json::from_str(&stdout(&out)).unwrap();
        let names: Vec<&str> = tools
            .iter()
            .map(|t| {
                t["name"]
                    .as_str()
                    .or(t["function"]["name"].as_str())
                    .unwrap()
            })
            .collect();
        assert_eq!(
            names,
            [
                "read_file",
                "write_file",
                "edit_file",
                "glob",
                "list_files",
                "search",
                "changes",
                "view_file",
                "run",
                "start_process",
                "process_logs",
                "stop_process",
                "list_processes",
                "write_stdin",
                "preview"
            ],
            "{format}"
        );
        for t in &tools {
            let schema = match format {
                "mcp" => &t["inputSchema"],
                "anthropic" => &t["input_schema"],
                _ => &t["function"]["parameters"],
            };
            assert_eq!(schema["type"], "object");
            assert_eq!(schema["additionalProperties"], false);
            if format == "openai" {
                assert_eq!(t["type"], "function");
                assert_eq!(t["function"]["strict"], true);
                let props = schema["properties"].as_object().unwrap();
                let required: Vec<&str> = schema["required"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap())
                    .collect();
                assert_eq!(required.len(), props.len(), "{t}");
                for (name, prop) in props {
                    assert!(required.contains(&name.as_str()));
                    assert!(prop.get("format").is_none(), "{t}");
                }
            }
            if format == "mcp" {
                // As `tools/list` shows them: no outputSchema by default.
                assert!(t.get("outputSchema").is_none(), "{t}");
                assert!(t["annotations"]["readOnlyHint"].is_boolean());
            }
        }
    }
}

#[test]
fn tools_show_output_schemas_with_structured_content_on() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cubby.toml"),
        "[mcp]\nstructured_content = true\n",
    )
    .unwrap();
    let out = cubby(dir.path(), &["tools", "--format", "mcp"]);
    assert_eq!(out.status.code(), Some(0));
    let tools: Vec<Value> = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(!tools.is_empty());
    for t in &tools {
        assert_eq!(t["outputSchema"]["type"], "object", "{t}");
    }
    // The other formats have no output schema to show.
    let out = cubby(dir.path(), &["tools", "--format", "anthropic"]);
    let tools: Vec<Value> = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(tools.iter().all(|t| t.get("outputSchema").is_none()));
    // An unknown key under [mcp] is an error that names it.
    std::fs::write(dir.path().join("cubby.toml"), "[mcp]\nstructured = true\n").unwrap();
    let out = cubby(dir.path(), &["tools"]);
    assert_ne!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("structured"), "{stderr}");
}

#[test]
fn read_only_mode_from_flag_hides_write_tools() {
    let dir = tempfile::tempdir().unwrap();
    let out = cubby(dir.path(), &["tools", "--mode", "read-only"]);
    let tools: Vec<Value> = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(
        tools
            .iter()
            .all(|t| t["name"] != "write_file" && t["name"] != "edit_file")
    );
    let out = cubby(
        dir.path(),
        &[
            "call",
            "write_file",
            r#"{"path":"x","content":"y"}"#,
            "--mode",
            "read-only",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).starts_with("ERROR denied: "));
    assert!(!dir.path().join("x").exists());
}

#[test]
fn config_file_is_read_protected_and_flags_win() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cubby.toml"),
        "mode = \"read-only\"\ndeny = [\"search\"]\n",
    )
    .unwrap();
    let out = cubby(dir.path(), &["tools"]);
    let tools: Vec<Value> = serde_json::from_str(&stdout(&out)).unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(
        !names.contains(&"search") && !names.contains(&"write_file"),
        "{names:?}"
    );
    // The flag wins over the file's mode.
    let out = cubby(
        dir.path(),
        &[
            "call",
            "write_file",
            r#"{"path":"w.txt","content":"y"}"#,
            "--mode",
            "workspace-write",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    // The config file itself is protected.
    let out = cubby(
        dir.path(),
        &[
            "call",
            "write_file",
            r#"{"path":"cubby.toml","content":"mode = \"full-access\""}"#,
            "--mode",
            "workspace-write",
        ],
    );
    assert!(
        stdout(&out).starts_with("ERROR denied: "),
        "{}",
        stdout(&out)
    );
    // A config file elsewhere that lies inside the root is protected too.
    std::fs::create_dir(dir.path().join("conf")).unwrap();
    std::fs::write(dir.path().join("conf/other.toml"), "").unwrap();
    let cfg = dir.path().join("conf/other.toml");
    let out = cubby(
        dir.path(),
        &[
            "call",
            "write_file",
            r#"{"path":"conf/other.toml","content":"x"}"#,
            "--config",
            cfg.to_str().unwrap(),
        ],
    );
    assert!(
        stdout(&out).starts_with("ERROR denied: "),
        "{}",
        stdout(&out)
    );
}

#[test]
fn unknown_config_keys_are_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cubby.toml"),
        "mode = \"read-only\"\nalow = [\"web_fetch\"]\n",
    )
    .unwrap();
    let out = cubby(dir.path(), &["tools"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("alow"), "{err}");
}

#[test]
fn virtual_provider_keeps_writes_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("seed.txt"), "seeded\n").unwrap();
    let out = cubby(
        dir.path(),
        &[
            "call",
            "read_file",
            r#"{"path":"seed.txt"}"#,
            "--provider",
            "virtual",
        ],
    );
    assert_eq!(stdout(&out), "     1\tseeded\n");
    let out = cubby(
        dir.path(),
        &[
            "call",
            "write_file",
            r#"{"path":"mem.txt","content":"x"}"#,
            "--provider",
            "virtual",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(!dir.path().join("mem.txt").exists());
}

#[test]
fn secrets_from_config_are_redacted() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cubby.toml"),
        "secrets = [\"CUBBY_TEST_TOKEN\"]\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("leak.txt"), "token=tok-123456789\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args(["call", "read_file", r#"{"path":"leak.txt"}"#, "--root"])
        .arg(dir.path())
        .env("CUBBY_TEST_TOKEN", "tok-123456789")
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(text.contains("token=[REDACTED:CUBBY_TEST_TOKEN]"), "{text}");
    assert!(!text.contains("tok-123456789"));
}

#[test]
fn host_side_keys_never_reach_commands() {
    let dir = tempfile::tempdir().unwrap();
    // A name commands get only when the config passes it on.
    std::fs::write(
        dir.path().join("cubby.toml"),
        "[env]\npass = [\"CUBBY_VISIBLE\"]\n",
    )
    .unwrap();
    for provider in ["linux", "local"] {
        // The subcommand, the common flags, then the rest (after `--` for exec).
        let run = |args: &[&str]| {
            Command::new(env!("CARGO_BIN_EXE_cubby"))
                .arg(args[0])
                .arg("--root")
                .arg(dir.path())
                .args(["--provider", provider])
                .args(&args[1..])
                .env_remove("RUST_LOG")
                .env("CUBBY_TOKEN", "token-value-4711")
                .env("BRAVE_API_KEY", "brave-value-4711")
                .env("CUBBY_VISIBLE", "visible-value-4711")
                .output()
                .unwrap()
        };
        let out = run(&["call", "run", r#"{"command": "env"}"#]);
        let text = stdout(&out);
        assert!(text.contains("visible-value-4711"), "{provider}: {text}");
        assert!(!text.contains("token-value-4711"), "{provider}: {text}");
        assert!(!text.contains("brave-value-4711"), "{provider}: {text}");
        if provider == "linux" {
            let out = run(&["exec", "--", "env"]);
            let text = stdout(&out);
            assert!(text.contains("visible-value-4711"), "exec: {text}");
            assert!(!text.contains("token-value-4711"), "exec: {text}");
            assert!(!text.contains("brave-value-4711"), "exec: {text}");
        }
    }
}

/// `[network] mode = "allow"` from the config file, with a secret bound to
/// `localhost` by `[[network.inject]]`: the command reaches a local server
/// through the egress proxy (the system resolver, `allowed_cidrs` listing
/// loopback; `--noproxy ''` because `NO_PROXY` keeps `localhost` inside the
/// sandbox otherwise), sees only a placeholder, and the server gets the real value;
/// the tool's output never shows it. `cubby exec --network allow` takes the
/// same route, and a name outside the list is refused.
#[test]
fn network_allow_from_the_config_goes_through_the_egress_proxy() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let server = {
        let seen = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().take(2) {
                let mut conn = conn.unwrap();
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let auth = head
                    .lines()
                    .find_map(|l| l.strip_prefix("Authorization: "))
                    .unwrap_or("")
                    .to_string();
                let body = format!("auth={auth}\n");
                seen.lock().unwrap().push(auth);
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        })
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cubby.toml");
    std::fs::write(
        &config,
        r#"
secrets = []
[network]
mode = "allow"
allowed_domains = ["localhost"]
allowed_cidrs = ["127.0.0.0/8", "::1/128"]
[[network.inject]]
secret = "CUBBY_TEST_TOKEN"
hosts = ["localhost"]
headers = ["Authorization"]
"#,
    )
    .unwrap();
    let real = "real-cli-token-90210";
    let command = format!(
        "printenv CUBBY_TEST_TOKEN; curl -sS -f --noproxy '' \
         -H \"Authorization: $CUBBY_TEST_TOKEN\" http://localhost:{port}/cli; \
         curl -sS -f http://example.com/; echo rc=$?"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args(["call", "run", "--provider", "linux", "--root"])
        .arg(dir.path())
        .arg(serde_json::json!({ "command": command }).to_string())
        .env("CUBBY_TEST_TOKEN", real)
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(!text.contains(real), "{text}");
    assert!(
        text.contains("cubby-placeholder-CUBBY_TEST_TOKEN-"),
        "{text}"
    );
    assert!(text.contains("auth=[REDACTED:CUBBY_TEST_TOKEN]"), "{text}");
    assert!(text.contains("403") && !text.contains("rc=0"), "{text}");
    assert_eq!(seen.lock().unwrap()[0], real);

    let out = Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args(["exec", "--network", "allow", "--root"])
        .arg(dir.path())
        .args(["--", "curl", "-sS", "-f", "--noproxy", ""])
        .arg(format!("http://localhost:{port}/exec"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains("auth="), "{out:?}");
    server.join().unwrap();
}

/// `cubby mcp` ends cleanly (status 0) when its input ends before any
/// handshake, or after a client only discovered the server.
#[test]
fn mcp_stdio_ends_cleanly_when_input_ends_early() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let discover = r#"{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{}}"#;
    for input in ["", discover] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cubby"))
            .args(["mcp", "--provider", "virtual", "--root"])
            .arg(dir.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        if !input.is_empty() {
            writeln!(stdin, "{input}").unwrap();
        }
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "input {input:?}: {out:?}");
        if !input.is_empty() {
            assert!(stdout(&out).contains(r#""id":1"#), "{out:?}");
        }
    }
}

/// A new pseudo-terminal: its master, and its terminal side (for a child
/// to take as its controlling terminal, with `setsid --ctty`).
fn new_terminal() -> (std::os::fd::OwnedFd, std::fs::File) {
    use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).unwrap();
    grantpt(&master).unwrap();
    unlockpt(&master).unwrap();
    let name = ptsname(&master, Vec::new()).unwrap();
    let terminal = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(name.to_str().unwrap())
        .unwrap();
    (master, terminal)
}

/// `cubby exec` passes the caller's terminal through: a command must not
/// push input into it (`TIOCSTI`), which the caller's shell would read and
/// run once `cubby` exits. The same push without cubby is the control.
#[test]
fn exec_cannot_push_input_into_the_callers_terminal() {
    use rustix::fs::{OFlags, fcntl_setfl};
    use std::io::Read;
    use std::process::Stdio;

    const PUSH: &str = "import fcntl, termios\n\
        try:\n  [fcntl.ioctl(0, termios.TIOCSTI, bytes([c])) for c in b\"pushed-by-the-command\\n\"]\n  print(\"PUSHED\")\n\
        except OSError as e:\n  print(\"refused\", e.errno)";
    let ws = tempfile::tempdir().unwrap();
    // Runs the push with a fresh terminal as its controlling one; what it
    // printed, and what reached that terminal's input.
    let attempt = |through_cubby: bool| -> (String, String) {
        let (master, terminal) = new_terminal();
        let mut cmd = Command::new("setsid");
        cmd.args(["--wait", "--ctty"]);
        if through_cubby {
            cmd.arg(env!("CARGO_BIN_EXE_cubby"))
                .args(["exec", "--root"])
                .arg(ws.path())
                .arg("--");
        }
        let out = cmd
            .args(["/usr/bin/python3", "-c", PUSH])
            .stdin(terminal.try_clone().unwrap())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .expect("setsid (util-linux) runs the attempt");
        fcntl_setfl(&terminal, OFlags::NONBLOCK).unwrap();
        let mut pushed = Vec::new();
        let _ = (&terminal).read_to_end(&mut pushed);
        drop(master);
        (
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            String::from_utf8_lossy(&pushed).into_owned(),
        )
    };
    let legacy =
        std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti").is_ok_and(|v| v.trim() == "1");
    let (printed, pushed) = attempt(false);
    if legacy {
        assert!(printed.contains("PUSHED"), "control: {printed}");
        assert_eq!(pushed, "pushed-by-the-command\n", "control: {printed}");
    } else {
        // This kernel refuses the push to everyone without CAP_SYS_ADMIN.
        assert!(printed.contains("refused"), "control: {printed}");
    }
    let (printed, pushed) = attempt(true);
    assert!(printed.contains("refused 1"), "cubby exec: {printed}");
    assert_eq!(pushed, "", "cubby exec: {printed}");
}

/// `cubby exec` passes the command's stdout and stderr through apart and
/// untouched and gives its exit code (128 + the signal that killed it), on
/// every provider that runs commands, through the one `Sandbox` contract; a
/// command that cannot start is 125 on each of them; a provider without
/// commands is refused.
#[test]
fn exec_passes_streams_and_exit_codes_through_on_every_provider() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [&[&str]; 3] = [
        &["--provider", "linux"],
        &["--provider", "linux", "--mode", "full-access"],
        &["--provider", "local"],
    ];
    let exec = |flags: &[&str], command: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_cubby"))
            .args(["exec", "--root"])
            .arg(dir.path())
            .args(flags)
            .arg("--")
            .args(command)
            .env_remove("RUST_LOG")
            .output()
            .unwrap()
    };
    for flags in cases {
        let out = exec(
            flags,
            &["sh", "-c", "printf 'out\\033[1m\\n'; echo err >&2; exit 7"],
        );
        assert_eq!(out.status.code(), Some(7), "{flags:?}: {out:?}");
        assert_eq!(out.stdout, b"out\x1b[1m\n", "{flags:?}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).ends_with("err\n"),
            "{flags:?}: {out:?}"
        );
        let out = exec(flags, &["sh", "-c", "kill -TERM $$"]);
        assert_eq!(out.status.code(), Some(128 + 15), "{flags:?}: {out:?}");
        let out = exec(flags, &["/nonexistent/cubby-no-such-program"]);
        assert_eq!(out.status.code(), Some(125), "{flags:?}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("cubby-no-such-program"),
            "{flags:?}: {out:?}"
        );
    }
    let out = exec(&["--provider", "virtual"], &["true"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("runs no commands"),
        "{out:?}"
    );
}

/// `cubby doctor` reports on the provider asked for: `linux` (the default)
/// with the kernel's facts, `local` with what it is (host processes, no OS
/// boundary; nothing to refuse), `virtual` with no commands.
#[test]
fn doctor_reports_on_the_provider_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let doctor = |flags: &[&str]| cubby_with_keys(dir.path(), &["doctor"], flags);
    let out = doctor(&[]);
    let text = stdout(&out);
    assert!(text.contains("\nlandlock:   "), "{text}");
    assert!(
        text.contains("(provider linux, mode ") || text.contains("start the linux provider"),
        "{text}"
    );
    let out = doctor(&["--provider", "local"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(!text.contains("landlock:"), "{text}");
    assert!(
        text.contains("run commands (provider local, mode workspace-write) as host processes"),
        "{text}"
    );
    let out = doctor(&["--provider", "virtual"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("run no commands (provider virtual"), "{text}");
}

/// Under `cubby exec` on a terminal the command is the terminal's
/// foreground job: it may set terminal modes (a background job would be
/// stopped by `SIGTTOU`, and `cubby exec` would wait for ever).
#[test]
fn exec_makes_the_command_the_terminals_foreground_job() {
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let ws = tempfile::tempdir().unwrap();
    let (master, terminal) = new_terminal();
    let out = tempfile::NamedTempFile::new().unwrap();
    let mut child = Command::new("setsid")
        .args(["--wait", "--ctty"])
        .arg(env!("CARGO_BIN_EXE_cubby"))
        .args(["exec", "--root"])
        .arg(ws.path())
        .args(["--", "sh", "-c", "stty sane && echo foreground-ok; exit 3"])
        .stdin(terminal)
        .stdout(out.reopen().unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(master);
    let printed = std::fs::read_to_string(out.path()).unwrap();
    let status = status.unwrap_or_else(|| panic!("cubby exec hung: {printed}"));
    assert_eq!(status.code(), Some(3), "{printed}");
    assert!(printed.contains("foreground-ok"), "{printed}");
}

/// A tool's command does not get the terminal of the process that serves
/// it (an agent started in a terminal passes that terminal on to cubby):
/// it runs in a session of its own, so `/dev/tty` leads nowhere. The same
/// command outside cubby, in that session, is the control.
#[test]
fn tool_commands_do_not_get_the_servers_terminal() {
    const PROBE: &str = "if : < /dev/tty; then echo HAS-TERMINAL; else echo no-terminal; fi 2>&1";
    let ws = tempfile::tempdir().unwrap();
    let args = serde_json::json!({ "command": PROBE }).to_string();
    let attempt = |through_cubby: bool| -> String {
        let (master, terminal) = new_terminal();
        let mut command = Command::new("setsid");
        command.args(["--wait", "--ctty"]);
        if through_cubby {
            command
                .arg(env!("CARGO_BIN_EXE_cubby"))
                .args(["call", "--provider", "linux", "--root"])
                .arg(ws.path())
                .args(["run", &args]);
        } else {
            command.args(["sh", "-c", PROBE]);
        }
        let out = command.stdin(terminal).output().unwrap();
        drop(master);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let control = attempt(false);
    assert!(control.contains("HAS-TERMINAL"), "control: {control}");
    let printed = attempt(true);
    assert!(printed.contains("no-terminal"), "{printed}");
}

/// `cubby call` prints model-facing text to a terminal: no escape sequence
/// from a file name or a file's contents may reach it (SPEC §2). Run on
/// `local`, where the names are made on the host, and checked byte by byte.
#[test]
fn call_never_prints_an_escape_sequence() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let osc = b"title\x1b]0;owned\x07\x1b[2J\x9b.txt";
    std::fs::write(dir.path().join(std::ffi::OsStr::from_bytes(osc)), "x\n").unwrap();
    std::fs::write(dir.path().join("x\nD forged.rs"), "x\n").unwrap();
    std::fs::write(
        dir.path().join("esc.txt"),
        "red \x1b[31mRED\x1b[0m \x1b]8;;http://evil\x07link\x1b]8;;\x07 \u{9b}2J\n",
    )
    .unwrap();
    // Control: the bytes are on disk as written.
    let raw = std::fs::read(dir.path().join("esc.txt")).unwrap();
    assert!(raw.contains(&0x1b));
    for args in [
        vec!["call", "list_files", "{}"],
        vec!["call", "glob", r#"{"pattern":"*"}"#],
        vec!["call", "search", r#"{"query":"RED"}"#],
        vec!["call", "read_file", r#"{"path":"esc.txt"}"#],
        vec!["call", "read_file", r#"{"path":"esc.txt"}"#, "--json"],
        vec!["call", "read_file", r#"{"path":"gone\u001b]0;x\u0007"}"#],
    ] {
        let mut full = args.clone();
        full.extend(["--provider", "local"]);
        let out = cubby(dir.path(), &full);
        assert!(!out.stdout.is_empty(), "{args:?}");
        assert!(
            !out.stdout.contains(&0x1b) && !out.stdout.contains(&0x07),
            "{args:?}: {:?}",
            String::from_utf8_lossy(&out.stdout)
        );
        // No C1 control (U+0080–U+009F, UTF-8 C2 80–C2 9F) either.
        assert!(
            !out.stdout
                .windows(2)
                .any(|w| w[0] == 0xc2 && (0x80..=0x9f).contains(&w[1])),
            "{args:?}: {:?}",
            String::from_utf8_lossy(&out.stdout)
        );
        if args[1] == "list_files" {
            let text = stdout(&out);
            assert!(text.contains(r#""x\nD forged.rs""#), "{text}");
            assert!(!text.lines().any(|l| l.starts_with("D ")), "{text}");
        }
    }
}

/// What an agent client leaves in cubby's environment (issue 13, finding
/// 9), a name the config passes on, and a secret.
const HOST_KEYS: [(&str, &str); 6] = [
    ("OPENAI_API_KEY", "sk-openai-4711"),
    ("ANTHROPIC_API_KEY", "sk-ant-4711"),
    ("AWS_SECRET_ACCESS_KEY", "aws-secret-4711"),
    ("GITHUB_TOKEN", "ghp-github-4711"),
    ("CUBBY_TEST_PASSED", "passed-value-4711"),
    ("CUBBY_TEST_SECRET", "secret-value-4711"),
];

/// The config of the environment tests: a name passed, one set, a secret.
const ENV_CONFIG: &str = "secrets = [\"CUBBY_TEST_SECRET\"]\n\
    [env]\n\
    pass = [\"CUBBY_TEST_PASSED\"]\n\
    set = { CUBBY_TEST_SET = \"set-value\" }\n";

/// `cubby <args> --root <root> [rest]` with [`HOST_KEYS`] in its environment.
fn cubby_with_keys(root: &Path, args: &[&str], rest: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args(args)
        .arg("--root")
        .arg(root)
        .args(rest)
        .env_remove("RUST_LOG")
        .envs(HOST_KEYS)
        .output()
        .unwrap()
}

/// The finding's reproduction: `OPENAI_API_KEY=… ANTHROPIC_API_KEY=…
/// AWS_SECRET_ACCESS_KEY=… GITHUB_TOKEN=… cubby call run '{"command":"env"}'`
/// printed all four. Now none reaches a command, on `linux` and `local`,
/// through `run` and `cubby exec`; `env.pass`, `env.set` and `secrets` do
/// (a secret redacted in what `run` returns; `cubby exec` passes the
/// command's stdio through untouched). Control: a plain `env` started by
/// this test with the same variables prints them all.
#[test]
fn the_hosts_api_keys_never_reach_commands() {
    let control = Command::new("env").envs(HOST_KEYS).output().unwrap();
    let control = stdout(&control);
    for (name, value) in HOST_KEYS {
        assert!(
            control.contains(&format!("{name}={value}")),
            "control: {control}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cubby.toml"), ENV_CONFIG).unwrap();
    for provider in ["linux", "local"] {
        let common = ["--provider", provider];
        let run = cubby_with_keys(
            dir.path(),
            &["call", "run", r#"{"command":"env"}"#],
            &common,
        );
        let exec = cubby_with_keys(
            dir.path(),
            &["exec"],
            &[&common[..], &["--", "env"]].concat(),
        );
        for (what, out) in [("run", &run), ("exec", &exec)] {
            let text = stdout(out);
            assert_eq!(out.status.code(), Some(0), "{provider} {what}: {text}");
            for (name, value) in &HOST_KEYS[..4] {
                assert!(
                    !text.contains(value) && !text.contains(name),
                    "{provider} {what}: {name} reached the command:\n{text}"
                );
            }
            assert!(
                text.contains("CUBBY_TEST_PASSED=passed-value-4711"),
                "{provider} {what}: {text}"
            );
            assert!(
                text.contains("CUBBY_TEST_SET=set-value"),
                "{provider} {what}: {text}"
            );
            assert!(text.contains("\nPATH="), "{provider} {what}: {text}");
        }
        let text = stdout(&run);
        assert!(
            text.contains("CUBBY_TEST_SECRET=[REDACTED:CUBBY_TEST_SECRET]"),
            "{provider}: {text}"
        );
        assert!(!text.contains("secret-value-4711"), "{provider}: {text}");
        assert!(
            stdout(&exec).contains("CUBBY_TEST_SECRET=secret-value-4711"),
            "{provider} exec"
        );
    }
}

/// An `env.pass` name that looks like a credential is a config error that
/// names it and says to list it under `secrets`; `cubby doctor` says the
/// same and fails. Control: an innocent name in its place is accepted.
#[test]
fn a_credential_looking_env_pass_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cubby.toml");
    for name in [
        "OPENAI_API_KEY",
        "npm_token",
        "DB_Password",
        "SESSION_COOKIE",
    ] {
        std::fs::write(&config, format!("[env]\npass = [\"{name}\"]\n")).unwrap();
        let out = cubby_with_keys(dir.path(), &["call", "run", r#"{"command":"true"}"#], &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{name}: {err}");
        assert!(
            err.contains(&format!("`{name}`")) && err.contains("`secrets`"),
            "{name}: {err}"
        );
        let out = cubby_with_keys(dir.path(), &["doctor"], &[]);
        assert_eq!(out.status.code(), Some(1), "doctor, {name}");
        assert!(
            stdout(&out).contains(&format!("`{name}`")),
            "doctor, {name}: {}",
            stdout(&out)
        );
    }
    std::fs::write(&config, "[env]\npass = [\"CARGO_HOME\"]\n").unwrap();
    let out = cubby_with_keys(dir.path(), &["call", "run", r#"{"command":"true"}"#], &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Unknown keys of `[env]` are named; `env.set` cannot change what `run` fixes.
    for (text, want) in [
        ("[env]\npasss = []\n", "passs"),
        ("[env]\nset = { CI = \"0\" }\n", "`CI`"),
    ] {
        std::fs::write(&config, text).unwrap();
        let out = cubby_with_keys(dir.path(), &["call", "run", r#"{"command":"true"}"#], &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{text}");
        assert!(err.contains(want), "{text}: {err}");
    }
}

/// `cubby doctor` lists what commands get and what they do not, by name
/// only: never a value.
#[test]
fn doctor_lists_the_environment_of_commands_by_name() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cubby.toml"), ENV_CONFIG).unwrap();
    let out = cubby_with_keys(dir.path(), &["doctor"], &[]);
    let text = stdout(&out);
    let line = |prefix: &str| -> String {
        text.lines()
            .find(|l| l.trim_start().starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` line:\n{text}"))
            .to_string()
    };
    assert!(line("inherited:").contains("PATH"), "{text}");
    assert!(line("env.pass:").contains("CUBBY_TEST_PASSED"), "{text}");
    assert!(line("env.set:").contains("CUBBY_TEST_SET"), "{text}");
    assert!(line("secrets:").contains("CUBBY_TEST_SECRET"), "{text}");
    assert!(line("run fixes:").contains("GIT_TERMINAL_PROMPT"), "{text}");
    let not_given = line("not given:");
    for (name, _) in &HOST_KEYS[..4] {
        assert!(not_given.contains(name), "{name}: {text}");
    }
    for (_, value) in HOST_KEYS {
        assert!(!text.contains(value), "a value in doctor's output: {text}");
    }
    assert!(!text.contains("set-value"), "{text}");
}

// ------------------------------------------ sessions leave nothing behind (issue 13)

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

/// Sends the handshake and one `run` to a `cubby mcp`, and waits for its
/// answer: by then the command's placeholders went into the stash.
fn run_one_command(child: &mut std::process::Child) -> std::process::ChildStdin {
    use std::io::{BufRead, Write};
    let mut stdin = child.stdin.take().unwrap();
    for line in [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run","arguments":{"command":"echo ran"}}}"#,
    ] {
        writeln!(stdin, "{line}").unwrap();
    }
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        let line = lines.next().expect("the server answered").unwrap();
        if line.contains(r#""id":2"#) {
            assert!(line.contains("OK exit=0"), "{line}");
            break;
        }
    }
    // Keep reading (and dropping) what else it writes.
    std::thread::spawn(move || for _ in lines {});
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
