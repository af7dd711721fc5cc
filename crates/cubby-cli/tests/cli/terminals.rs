//! Terminals and streams: `cubby mcp` at early EOF, `cubby exec` on a
//! terminal, tool commands without the server's terminal, no escape
//! sequence printed.

use crate::*;

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
/// program that is not there is 127 and one that cannot be executed 126 on
/// each of them (as a shell, `env` and `docker run` report them), a sandbox
/// that cannot start 125; a provider without commands is refused.
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
        for missing in [
            "/nonexistent/cubby-no-such-program",
            "cubby-no-such-program",
        ] {
            let out = exec(flags, &[missing]);
            assert_eq!(out.status.code(), Some(127), "{flags:?}: {out:?}");
            assert!(
                String::from_utf8_lossy(&out.stderr).contains("cubby-no-such-program"),
                "{flags:?}: {out:?}"
            );
        }
        // Control: the file is there, and the shell reads it.
        let plain = dir.path().join("plain.txt");
        std::fs::write(&plain, "not a program\n").unwrap();
        let out = exec(flags, &["cat", plain.to_str().unwrap()]);
        assert_eq!(out.stdout, b"not a program\n", "{flags:?}: {out:?}");
        let out = exec(flags, &[plain.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(126), "{flags:?}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("plain.txt"),
            "{flags:?}: {out:?}"
        );
    }
    // A sandbox that cannot start (a `deny_read` path that is a link,
    // which it cannot hide): 125.
    let odd = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("elsewhere", odd.path().join("secret")).unwrap();
    std::fs::write(odd.path().join("cubby.toml"), "deny_read = [\"secret\"]\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args(["exec", "--root"])
        .arg(odd.path())
        .args(["--provider", "linux", "--", "true"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("secret"),
        "{out:?}"
    );
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
    let doctor = |flags: &[&str]| crate::env::cubby_with_keys(dir.path(), &["doctor"], flags);
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
