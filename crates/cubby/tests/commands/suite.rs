//! The command suite: each case a function of a [`Fixture`] (the provider
//! under test), instantiated once per provider by `main.rs`.

use crate::*;

pub fn verdict_forms(p: &dyn Fixture) {
    let dir = workspace();
    let t = tools(p, dir.path());
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let out = run(&t, json!({"command": "echo hi"}));
    let first = out.text.lines().next().unwrap();
    assert!(
        first.starts_with("OK exit=0 ") && first.ends_with(&format!("s cwd={}", root.display())),
        "{first}"
    );
    assert_eq!(out.text.lines().nth(1), Some("output:"));
    assert_eq!(out.structured["exit_code"], 0);
    let out = run(&t, json!({"command": "exit 7"}));
    assert!(out.text.starts_with("FAILED exit=7 "), "{}", out.text);
    assert_eq!(out.structured["exit_code"], 7);
    let started = Instant::now();
    let out = run(&t, json!({"command": "sleep 30", "timeout_ms": 300}));
    assert!(
        out.text.starts_with("FAILED timeout 0.3s cwd="),
        "{}",
        out.text
    );
    assert_eq!(out.structured["timed_out"], true);
    assert!(started.elapsed() < Duration::from_secs(5));
    let out = run(&t, json!({"command": "kill -KILL $$"}));
    assert!(out.text.starts_with("FAILED signal=KILL "), "{}", out.text);
    assert_eq!(out.structured["signal"], "KILL");
    let out = run(&t, json!({"command": "kill -TERM $$"}));
    assert!(out.text.starts_with("FAILED signal=TERM "), "{}", out.text);
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let out = run(&t, json!({"command": "pwd", "cwd": "sub"}));
    assert!(
        out.text.ends_with(&format!("{}/sub\n", root.display())),
        "{}",
        out.text
    );
    assert!(
        t.call("run", json!({"command": "pwd", "cwd": "../"}))
            .text
            .starts_with("ERROR path_escape")
    );
    assert!(
        t.call("run", json!({"command": "pwd", "cwd": "nope"}))
            .text
            .starts_with("ERROR not_found")
    );
    assert!(
        t.call("run", json!({"command": "  "}))
            .text
            .starts_with("ERROR invalid_input")
    );
}

pub fn interleaved_stdout_and_stderr_keep_their_order(p: &dyn Fixture) {
    let dir = workspace();
    let t = tools(p, dir.path());
    let out = run(
        &t,
        json!({"command": "for i in 1 2 3 4 5 6; do echo out$i; echo err$i >&2; done"}),
    );
    let body: Vec<&str> = out.text.lines().skip(2).collect();
    assert_eq!(
        body,
        [
            "out1", "err1", "out2", "err2", "out3", "err3", "out4", "err4", "out5", "err5", "out6",
            "err6"
        ]
    );
}

pub fn output_is_capped_with_a_marker_and_pageable(p: &dyn Fixture) {
    let dir = workspace();
    let limits = Limits {
        run: RunLimits {
            max_output_bytes: 1024,
            ..RunLimits::default()
        },
        ..Limits::default()
    };
    let t = Toolset::builder(p.sandbox(dir.path()))
        .host_env(cubby::HostEnv::capture())
        .policy(cubby::Policy::builder().limits(limits).build().unwrap())
        .build()
        .unwrap();
    let out = run(&t, json!({"command": "seq 1 20000"}));
    let name = out.structured["name"].as_str().unwrap().to_string();
    let total = out.structured["output_bytes"].as_u64().unwrap();
    assert_eq!(total, 108_894);
    let cut = out.structured["cut_bytes"].as_u64().unwrap();
    assert_eq!(cut, total - 1024);
    let marker = format!("[107,870 bytes cut, use process_logs name={name}]");
    assert!(out.text.contains(&marker), "{}", out.text);
    assert!(out.text.contains("\n1\n2\n3\n"));
    assert!(out.text.ends_with("19999\n20000\n"));
    assert!(out.text.len() < 1024 + 200);
    // The whole output pages back through process_logs.
    let mut cursor = 0;
    let mut all = String::new();
    loop {
        let page = t.call("process_logs", json!({"name": name, "cursor": cursor}));
        assert!(!page.is_error, "{}", page.text);
        all.push_str(page.structured["output"].as_str().unwrap());
        cursor = page.structured["next_cursor"].as_u64().unwrap();
        assert!(
            page.structured["status"]
                .as_str()
                .unwrap()
                .starts_with("exited 0")
        );
        if page.structured["more"] == false {
            break;
        }
    }
    let expected: String = (1..=20000).map(|i| format!("{i}\n")).collect();
    assert_eq!(all, expected);
}

pub fn ansi_is_stripped_and_secrets_are_redacted_across_reads(p: &dyn Fixture) {
    let dir = workspace();
    let t = Toolset::builder(p.sandbox(dir.path()))
        .host_env(cubby::HostEnv::capture())
        .secret("API_KEY", "sk-live-0123456789")
        .build()
        .unwrap();
    let cmd = "printf '\\033[1;31mred\\033[0m '; printf 'sk-live-01'; sleep 0.2; printf '23456789 done\\n'; \
               printf 'sk-live-0123456789' >&2";
    let out = run(&t, json!({"command": cmd}));
    assert!(!out.text.contains("sk-live"), "{}", out.text);
    assert!(
        out.text
            .contains("red [REDACTED:API_KEY] done\n[REDACTED:API_KEY]"),
        "{}",
        out.text
    );
    assert!(!out.text.contains('\u{1b}'));
    let name = out.structured["name"].as_str().unwrap();
    let logs = t.call("process_logs", json!({"name": name}));
    assert!(!logs.text.contains("sk-live") && logs.text.contains("[REDACTED:API_KEY]"));
}

pub fn environment_is_non_interactive(p: &dyn Fixture) {
    let dir = workspace();
    let t = tools(p, dir.path());
    let started = Instant::now();
    let out = run(
        &t,
        json!({"command": "read x; echo \"read=$? x=$x\"; echo $CI $GIT_TERMINAL_PROMPT $PAGER $NO_COLOR $TERM"}),
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        out.text.contains("read=1 x=\n1 0 cat 1 dumb\n"),
        "{}",
        out.text
    );
}

pub fn timeout_kills_a_double_forked_daemon(p: &dyn Fixture) {
    let dir = workspace();
    let t = tools(p, dir.path());
    let marker = unique("timeout");
    let script = sleeper(dir.path(), &marker);
    let out = run(
        &t,
        json!({"command": format!("setsid sh -c '{script} &' & sleep 30"), "timeout_ms": 1000}),
    );
    assert!(out.text.starts_with("FAILED timeout 1.0s"), "{}", out.text);
    assert_eq!(processes_with(&marker), Vec::<String>::new());
}

pub fn a_finished_run_leaves_no_daemon_behind(p: &dyn Fixture) {
    let dir = workspace();
    let t = tools(p, dir.path());
    let marker = unique("finished");
    let script = sleeper(dir.path(), &marker);
    let out = run(
        &t,
        json!({"command": format!("setsid sh -c '{script} &' & echo started")}),
    );
    assert!(out.text.starts_with("OK exit=0"), "{}", out.text);
    assert_eq!(processes_with(&marker), Vec::<String>::new());
}

pub fn stop_process_kills_a_double_forked_daemon(p: &dyn Fixture) {
    let dir = workspace();
    let t = tools(p, dir.path());
    let marker = unique("stop");
    let script = sleeper(dir.path(), &marker);
    let out = t.call(
        "start_process",
        json!({"name": "svc", "command": format!("setsid sh -c '{script} &' & {script}")}),
    );
    assert!(!out.is_error, "{}", out.text);
    let deadline = Instant::now() + Duration::from_secs(10);
    // The shell itself, the escaped daemon and the foreground script, once
    // the intermediate `sh -c '… &'` has gone (a moment on a loaded machine).
    let settled =
        |found: &[String]| found.len() == 3 && !found.iter().any(|p| p.contains("sh -c ./"));
    let mut found = processes_with(&marker);
    while !settled(&found) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        found = processes_with(&marker);
    }
    assert!(settled(&found), "{found:?}");
    let out = t.call("stop_process", json!({"name": "svc"}));
    assert!(!out.is_error, "{}", out.text);
    assert!(
        out.text.contains("killed TERM") || out.text.contains("exited"),
        "{}",
        out.text
    );
    assert_eq!(processes_with(&marker), Vec::<String>::new());
    let out = t.call("list_processes", json!({}));
    assert!(out.text.contains("svc"), "{}", out.text);
}

pub fn stop_process_kills_what_ignores_sigterm(p: &dyn Fixture) {
    let dir = workspace();
    let t = tools(p, dir.path());
    let out = t.call(
        "start_process",
        json!({"name": "stubborn", "command": "trap '' TERM; while true; do sleep 0.1; done"}),
    );
    assert!(!out.is_error, "{}", out.text);
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let out = t.call("stop_process", json!({"name": "stubborn"}));
    assert!(out.text.contains("killed KILL"), "{}", out.text);
    assert!(
        started.elapsed() >= Duration::from_secs(2) && started.elapsed() < Duration::from_secs(6)
    );
}

pub fn cancellation_kills_the_whole_tree(p: &dyn Fixture) {
    let dir = workspace();
    let t = tools(p, dir.path());
    let marker = unique("cancel");
    let script = sleeper(dir.path(), &marker);
    let token = CancelToken::new();
    let (t2, tok2) = (t.clone(), token.clone());
    let handle = std::thread::spawn(move || {
        t2.call_cancellable(
            "run",
            json!({"command": format!("setsid sh -c '{script} &' & sleep 60")}),
            Some(&tok2),
        )
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while processes_with(&marker).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let started = Instant::now();
    token.cancel();
    let out = handle.join().unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(out.text.starts_with("FAILED cancelled"), "{}", out.text);
    assert_eq!(processes_with(&marker), Vec::<String>::new());
}

pub fn concurrent_runs_complete_and_release_everything(p: &dyn Fixture) {
    if rerun_isolated(p.name(), "concurrent_runs_complete_and_release_everything") {
        return;
    }
    let dir = workspace();
    let t = tools(p, dir.path());
    // Warm up once so lazily opened fds (e.g. /dev/null) are counted in the baseline.
    run(&t, json!({"command": "true"}));
    // The warm-up's reader closes its pipe just after the verdict: settle.
    let mut fds = open_fds();
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(50));
        let now = open_fds();
        if now == fds {
            break;
        }
        fds = now;
    }
    let children = child_count();
    let handles: Vec<_> = (0..32)
        .map(|i| {
            let t = t.clone();
            std::thread::spawn(move || {
                let out = t.call("run", json!({"command": format!("echo start-{i}; sleep 0.3; echo end-{i} >&2; exit {}", i % 3)}));
                (i, out)
            })
        })
        .collect();
    for h in handles {
        let (i, out) = h.join().unwrap();
        assert!(!out.is_error, "{}", out.text);
        assert_eq!(out.structured["exit_code"], i % 3);
        assert!(
            out.text
                .ends_with(&format!("output:\nstart-{i}\nend-{i}\n")),
            "{}",
            out.text
        );
    }
    // Reader threads close their pipes just after the verdict: allow them a moment.
    let deadline = Instant::now() + Duration::from_secs(20);
    while (open_fds() != fds || child_count() != children) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(open_fds(), fds);
    assert_eq!(child_count(), children);
}

pub fn start_process_with_port_serves_pages_and_stops(p: &dyn Fixture) {
    let dir = workspace();
    std::fs::write(dir.path().join("index.html"), "hello from cubby\n").unwrap();
    let t = Toolset::builder(p.networked_sandbox(dir.path()))
        .host_env(cubby::HostEnv::capture())
        .policy(p.networked_policy())
        .track_changes(false)
        .build()
        .unwrap();
    // The server shares the held port (`SO_REUSEPORT`), so no other
    // process can take it between the test's choice and the server's bind.
    let held = held_port();
    let port = held.port;
    assert!(
        std::net::TcpListener::bind(("127.0.0.1", port)).is_err(),
        "port {port} is not held"
    );
    let server = format!(
        "python3 -u -c 'import http.server as h\n\
         class S(h.ThreadingHTTPServer): allow_reuse_port = True\n\
         S((\"127.0.0.1\", {port}), h.SimpleHTTPRequestHandler).serve_forever()'"
    );
    let out = t.call(
        "start_process",
        json!({"name": "web", "command": server, "port": port}),
    );
    assert!(!out.is_error, "{}", out.text);
    let url = out.structured["url"].as_str().unwrap().to_string();
    assert_eq!(url, format!("http://127.0.0.1:{port}/"));
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .write_all(b"GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    stream.read_to_string(&mut body).unwrap();
    assert!(
        body.starts_with("HTTP/1.0 200") && body.ends_with("hello from cubby\n"),
        "{body}"
    );
    // The request shows up in its log.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut logs;
    loop {
        logs = t.call("process_logs", json!({"name": "web"}));
        if logs.text.contains("GET /index.html") || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(logs.text.contains("GET /index.html"), "{}", logs.text);
    assert_eq!(logs.structured["status"], "running");
    let next = logs.structured["next_cursor"].as_u64().unwrap();
    let again = t.call("process_logs", json!({"name": "web", "cursor": next}));
    assert_eq!(again.structured["output"], "");
    let dup = t.call("start_process", json!({"name": "web", "command": "true"}));
    assert!(dup.text.starts_with("ERROR invalid_input"), "{}", dup.text);
    let out = t.call("stop_process", json!({"name": "web"}));
    assert!(!out.is_error, "{}", out.text);
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
    let out = t.call("preview", json!({"port": port, "path": "/index.html"}));
    assert_eq!(out.text, format!("http://127.0.0.1:{port}/index.html"));
}

pub fn write_stdin_feeds_a_process(p: &dyn Fixture) {
    let dir = workspace();
    let t = tools(p, dir.path());
    let out = t.call(
        "start_process",
        json!({"name": "cat", "command": "cat", "stdin": true}),
    );
    assert!(!out.is_error, "{}", out.text);
    let out = t.call("write_stdin", json!({"name": "cat", "input": "ping\n"}));
    assert!(!out.is_error, "{}", out.text);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let logs = t.call("process_logs", json!({"name": "cat"}));
        if logs.structured["output"] == "ping\n" {
            break;
        }
        assert!(Instant::now() < deadline, "{}", logs.text);
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = t.call(
        "start_process",
        json!({"name": "nostdin", "command": "sleep 5"}),
    );
    assert!(!out.is_error);
    let out = t.call("write_stdin", json!({"name": "nostdin", "input": "x"}));
    assert!(out.text.starts_with("ERROR invalid_input"), "{}", out.text);
    let out = t.call("write_stdin", json!({"name": "ghost", "input": "x"}));
    assert!(out.text.starts_with("ERROR not_found"), "{}", out.text);
}

pub fn dropping_the_toolset_ends_its_processes(p: &dyn Fixture) {
    let dir = workspace();
    let marker = unique("drop");
    let script = sleeper(dir.path(), &marker);
    {
        let t = tools(p, dir.path());
        let out = t.call("start_process", json!({"name": "bg", "command": script}));
        assert!(!out.is_error, "{}", out.text);
        // Seen once, twice in a row (the script is still starting at first).
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut seen = 0;
        while seen < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            seen = if processes_with(&marker).len() == 1 {
                seen + 1
            } else {
                0
            };
        }
        assert_eq!(seen, 2, "{:?}", processes_with(&marker));
    }
    assert_eq!(processes_with(&marker), Vec::<String>::new());
}

pub fn runs_are_kept_as_finished_processes(p: &dyn Fixture) {
    let dir = workspace();
    let t = tools(p, dir.path());
    let out = run(&t, json!({"command": "echo one"}));
    assert_eq!(out.structured["name"], "run-1");
    run(&t, json!({"command": "echo two"}));
    let list = t.call("list_processes", json!({}));
    let names: Vec<&str> = list.structured["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["run-1", "run-2"]);
    let logs = t.call("process_logs", json!({"name": "run-1"}));
    assert_eq!(logs.structured["output"], "one\n");
    assert_eq!(logs.structured["status"], "exited 0");
}

pub fn exec_rules_and_before_run_decide(p: &dyn Fixture) {
    let dir = workspace();
    let rules = vec![
        ExecRule {
            prefix: vec!["git".into(), "push".into()],
            decision: ExecDecision::Deny,
            replacement: None,
        },
        ExecRule {
            prefix: vec!["greet".into()],
            decision: ExecDecision::Rewrite,
            replacement: Some(vec!["echo".into(), "hello".into()]),
        },
    ];
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let t = Toolset::builder(p.sandbox(dir.path()))
        .host_env(cubby::HostEnv::capture())
        .policy(cubby::Policy::builder().exec_rules(rules).build().unwrap())
        .before_run(Arc::new(move |cmd: &str, _cwd: &cubby::WorkspacePath| {
            seen2.lock().unwrap().push(cmd.to_string());
            if cmd.contains("rm -rf") {
                RunDecision::Refuse("no recursive deletes".into())
            } else if cmd == "date" {
                RunDecision::Replace("echo replaced".into())
            } else {
                RunDecision::Allow
            }
        }))
        .build()
        .unwrap();
    let out = t.call("run", json!({"command": "echo ok && git push origin main"}));
    assert!(
        out.text.starts_with("ERROR denied:") && out.text.contains("rule 1"),
        "{}",
        out.text
    );
    let out = run(&t, json!({"command": "greet world"}));
    assert!(out.text.ends_with("output:\nhello world\n"), "{}", out.text);
    let out = t.call("run", json!({"command": "rm -rf build"}));
    assert!(
        out.text.starts_with("ERROR denied:") && out.text.contains("no recursive deletes"),
        "{}",
        out.text
    );
    let out = run(&t, json!({"command": "date"}));
    assert!(out.text.ends_with("output:\nreplaced\n"), "{}", out.text);
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        ["echo hello world", "rm -rf build", "date"]
    );
    let out = t.call("start_process", json!({"name": "p", "command": "git push"}));
    assert!(out.text.starts_with("ERROR denied:"), "{}", out.text);
}

pub fn events_stream_shaped_chunks(p: &dyn Fixture) {
    let dir = workspace();
    let got = Arc::new(Mutex::new(Vec::new()));
    let got2 = got.clone();
    let t = Toolset::builder(p.sandbox(dir.path()))
        .host_env(cubby::HostEnv::capture())
        .secret("TOKEN", "abcdef123")
        .subscribe(Arc::new(move |e: &cubby::process::OutputEvent| {
            got2.lock()
                .unwrap()
                .push((e.process.clone(), e.chunk.clone()));
        }))
        .build()
        .unwrap();
    run(
        &t,
        json!({"command": "printf '\\033[32mone\\033[0m\\n'; sleep 0.2; echo abcdef123"}),
    );
    let events = got.lock().unwrap().clone();
    assert!(events.len() >= 2, "{events:?}");
    assert!(events.iter().all(|(p, _)| p == "run-1"));
    let all: String = events.iter().map(|(_, c)| c.as_str()).collect();
    assert_eq!(all, "one\n[REDACTED:TOKEN]\n");
}

/// Call options whose subscriber gathers the call's streamed output.
fn collect_output() -> (Arc<Mutex<String>>, cubby::CallOptions) {
    let got = Arc::new(Mutex::new(String::new()));
    let sink = got.clone();
    let options = cubby::CallOptions {
        on_output: Some(Arc::new(move |e: &cubby::process::OutputEvent| {
            sink.lock().unwrap().push_str(&e.chunk);
        })),
        ..cubby::CallOptions::default()
    };
    (got, options)
}

/// Red-team pass 5, F4: what streams to a client as a command runs (over
/// MCP, progress notifications) has its control characters neutralized as
/// the final result has: a backspace and a C1 CSI (U+009B, which a terminal
/// takes as ESC `[`) are shown, not sent.
pub fn events_have_their_control_characters_neutralized(p: &dyn Fixture) {
    let dir = workspace();
    let t = tools(p, dir.path());
    let (got, options) = collect_output();
    let out = t.call_with(
        "run",
        json!({"command": "printf 'A\\010B\\302\\23331mC\\007D\\n'"}),
        &options,
    );
    assert!(!out.is_error, "{}", out.text);
    // The control: the final result shows them as pictures.
    assert!(
        out.text.contains("A\u{2408}B\u{fffd}31mC\u{2407}D"),
        "{}",
        out.text
    );
    let streamed = got.lock().unwrap().clone();
    assert_eq!(
        streamed, "A\u{2408}B\u{fffd}31mC\u{2407}D\n",
        "{streamed:?}"
    );
}

/// Red-team pass 5, F7: a command edits a file in place (same inode), keeps
/// its size and puts its modification time back (`touch -d`, nanoseconds
/// included); `changes` still says `M`: the change time, which no process
/// can set, is compared too. The control: size, mtime and inode are indeed
/// what they were (what the old comparison looked at).
pub fn changes_sees_an_in_place_edit_with_the_mtime_put_back(p: &dyn Fixture) {
    use std::os::unix::fs::MetadataExt;
    let dir = workspace();
    let file = dir.path().join("main.rs");
    std::fs::write(&file, "fn main() { println!(\"hello\"); }\n").unwrap();
    let before = std::fs::metadata(&file).unwrap();
    let t = Toolset::builder(p.sandbox(dir.path()))
        .host_env(HostEnv::capture())
        .build()
        .unwrap();
    let out = t.call("changes", json!({}));
    assert!(out.text.contains("No changes"), "{}", out.text);
    let out = run(
        &t,
        json!({"command": "t=$(stat -c %y main.rs); printf pwned | dd of=main.rs bs=1 seek=22 conv=notrunc 2>/dev/null; touch -d \"$t\" main.rs; cat main.rs"}),
    );
    assert!(out.text.contains("pwned\"); }"), "{}", out.text);
    let after = std::fs::metadata(&file).unwrap();
    assert_eq!(
        (
            before.size(),
            before.mtime(),
            before.mtime_nsec(),
            before.ino()
        ),
        (after.size(), after.mtime(), after.mtime_nsec(), after.ino()),
        "control: the edit kept size, mtime and inode"
    );
    let out = t.call("changes", json!({}));
    assert!(!out.is_error, "{}", out.text);
    assert_eq!(out.text.lines().next(), Some("M main.rs"), "{}", out.text);
}

pub fn a_call_subscriber_gets_only_its_own_output(p: &dyn Fixture) {
    let dir = workspace();
    let t = tools(p, dir.path());
    let (got, options) = collect_output();
    let other = t.clone();
    let noise = std::thread::spawn(move || {
        other.call(
            "run",
            json!({"command": "for i in 1 2 3; do echo noise; sleep 0.05; done"}),
        )
    });
    let out = t.call_with(
        "run",
        json!({"command": "echo mine; sleep 0.1; echo also-mine"}),
        &options,
    );
    assert!(!out.is_error, "{}", out.text);
    noise.join().unwrap();
    assert_eq!(got.lock().unwrap().as_str(), "mine\nalso-mine\n");
}

pub fn walking_the_workspace_finds_nothing_unreadable(p: &dyn Fixture) {
    // On `linux`, missing protected paths are reserved by empty directories
    // while a command runs: the usual walks must see them as the empty
    // directories they are, without errors or a failing exit status.
    let dir = workspace();
    std::fs::write(dir.path().join("notes.txt"), "hello\n").unwrap();
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(dir.path())
        .status()
        .expect("git is needed for this test");
    assert!(git.success());
    let t = tools(p, dir.path());
    for (command, want) in [
        ("find . -name '*.txt' 2>&1", "./notes.txt"),
        ("grep -r hello . 2>&1", "./notes.txt:hello"),
        (
            "git status --porcelain --untracked-files=all 2>&1",
            "?? notes.txt",
        ),
        ("ls -A . >/dev/null 2>&1 && echo listed", "listed"),
    ] {
        let out = run(&t, json!({ "command": command }));
        assert!(
            out.text.starts_with("OK exit=0 "),
            "{command}: {}",
            out.text
        );
        let lines: Vec<&str> = out.text.lines().skip(2).collect();
        assert_eq!(lines, [want], "{command}: {}", out.text);
    }
}

/// What an agent client leaves in cubby's environment (issue 13, finding
/// 9), plus a name the config passes on.
const HOST_KEYS: [(&str, &str); 5] = [
    ("OPENAI_API_KEY", "sk-openai-4711"),
    ("ANTHROPIC_API_KEY", "sk-ant-4711"),
    ("AWS_SECRET_ACCESS_KEY", "aws-secret-4711"),
    ("GITHUB_TOKEN", "ghp-github-4711"),
    ("CUBBY_TEST_PASSED", "passed-value-4711"),
];

/// Commands get none of the API keys in cubby's environment (SPEC §4),
/// through `run` and `start_process`; `env.pass` passes a name, `env.set`
/// sets one, a secret reaches the command and is redacted. Control: a plain
/// child of the same process sees every key.
pub fn the_hosts_api_keys_never_reach_commands(p: &dyn Fixture) {
    if rerun_isolated_with(
        p.name(),
        "the_hosts_api_keys_never_reach_commands",
        &HOST_KEYS,
    ) {
        return;
    }
    let plain = std::process::Command::new("env").output().unwrap();
    let plain = String::from_utf8_lossy(&plain.stdout);
    for (name, value) in HOST_KEYS {
        assert!(
            plain.contains(&format!("{name}={value}")),
            "control: {plain}"
        );
    }
    let dir = workspace();
    let sandbox = p.sandbox(dir.path());
    let linux = sandbox.kind() == cubby::ProviderKind::Linux;
    let set =
        std::collections::BTreeMap::from([("CUBBY_TEST_SET".to_string(), "set-value".to_string())]);
    let env = cubby::config::EnvConfig {
        pass: vec!["CUBBY_TEST_PASSED".to_string()],
        set,
    };
    let t = Toolset::builder(sandbox)
        .host_env(cubby::HostEnv::capture())
        .track_changes(false)
        .policy(cubby::Policy::builder().env(env).build().unwrap())
        .secret("CUBBY_TEST_SECRET", "secret-value-4711")
        .build()
        .unwrap();
    // On `linux`, no process a command sees holds them either (the holder
    // and its inits are not dumpable); on `local`, commands are host
    // processes and may read cubby's /proc/<pid>/environ (not a boundary).
    let procs = if linux {
        "; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null"
    } else {
        ""
    };
    let command = format!(
        "env{procs}; [ \"$CUBBY_TEST_SECRET\" = secret-value-4711 ] && echo secret-is-there"
    );
    let out = run(&t, json!({ "command": command }));
    t.call("start_process", json!({"name": "env", "command": "env"}));
    let deadline = Instant::now() + Duration::from_secs(20);
    let logs = loop {
        let logs = t.call("process_logs", json!({"name": "env"}));
        if logs.structured["status"] != "running" || Instant::now() > deadline {
            break logs;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    for text in [&out.text, &logs.text] {
        for (name, value) in &HOST_KEYS[..4] {
            assert!(
                !text.contains(value) && !text.contains(name),
                "{name}: {text}"
            );
        }
        assert!(
            text.contains("CUBBY_TEST_PASSED=passed-value-4711"),
            "{text}"
        );
        assert!(text.contains("CUBBY_TEST_SET=set-value"), "{text}");
        assert!(
            text.contains("CUBBY_TEST_SECRET=[REDACTED:CUBBY_TEST_SECRET]"),
            "{text}"
        );
        assert!(!text.contains("secret-value-4711"), "{text}");
        assert!(
            text.contains("\nPATH=") && text.contains("\nCI=1\n"),
            "{text}"
        );
    }
    assert!(out.text.contains("secret-is-there"), "{}", out.text);
}

/// R3-8: every running process kept its whole window (1 MiB by default)
/// and nothing bounded the sum (300 processes took the server to 457 MB).
/// The windows of one run now share a budget: the bytes the table holds
/// (counted by `process_logs`, what the model can read back) stay within
/// it however many processes print, each window keeps at least the floor
/// and its newest output, and what a shrunk window lost is said as dropped
/// bytes. Past the floor a process is refused (`limit`) and not left
/// running. The control: with no budget the same processes hold more.
pub fn retained_logs_of_many_processes_stay_within_the_budget(p: &dyn Fixture) {
    use cubby::process::MIN_RETAINED_LOG_BYTES;
    const WINDOW: usize = 256 * 1024;
    const BUDGET: usize = 1024 * 1024;
    const PRINTED: u64 = 300_000;
    let dir = workspace();
    let marker = unique("budget");
    let script = sleeper(dir.path(), &marker);
    let toolset = |budget: usize| {
        Toolset::builder(p.sandbox(dir.path()))
            .host_env(cubby::HostEnv::capture())
            .track_changes(false)
            .retained_log_bytes(WINDOW)
            .retained_log_total_bytes(budget)
            .build()
            .unwrap()
    };
    let start = |t: &Toolset, name: &str| {
        t.call(
            "start_process",
            json!({"name": name, "command": format!("head -c {PRINTED} /dev/zero | tr '\\0' a; echo END; exec {script}")}),
        )
    };
    // Every process has printed all its output (`END` ends it).
    let printed_all = |t: &Toolset, names: &[String]| {
        for name in names {
            let proc = t.processes().get(name).unwrap();
            let deadline = Instant::now() + Duration::from_secs(60);
            while proc.output_end() < PRINTED + 4 {
                assert!(
                    Instant::now() < deadline,
                    "{name} printed {}",
                    proc.output_end()
                );
                proc.wait_until(Some(Instant::now() + Duration::from_millis(20)), None);
            }
        }
    };
    // What `process_logs` can show of each: from the oldest byte kept to
    // the end.
    let kept = |t: &Toolset, name: &str| -> (u64, String) {
        let first = t.call("process_logs", json!({"name": name, "cursor": 0}));
        assert!(!first.is_error, "{}", first.text);
        let from = first.structured["cursor"].as_u64().unwrap();
        assert_eq!(first.structured["dropped_bytes"].as_u64().unwrap(), from);
        (PRINTED + 4 - from, first.text)
    };
    let names: Vec<String> = (0..12).map(|i| format!("p{i}")).collect();
    // The control: no budget to speak of, every window whole.
    {
        let t = toolset(usize::MAX);
        for name in &names {
            let out = start(&t, name);
            assert!(!out.is_error, "{}", out.text);
        }
        printed_all(&t, &names);
        let total: u64 = names.iter().map(|n| kept(&t, n).0).sum();
        assert_eq!(total, 12 * WINDOW as u64);
        assert!(total > BUDGET as u64);
    }
    let t = toolset(BUDGET);
    for name in &names {
        let out = start(&t, name);
        assert!(!out.is_error, "{}", out.text);
    }
    printed_all(&t, &names);
    let (held, budget) = t.processes().retained_log_bytes();
    assert_eq!(budget, BUDGET);
    assert!(held <= BUDGET, "{held} bytes held");
    let mut total = 0;
    for name in &names {
        let (bytes, text) = kept(&t, name);
        assert!(bytes >= MIN_RETAINED_LOG_BYTES as u64, "{name}: {bytes}");
        assert!(bytes < WINDOW as u64, "{name}: {bytes}");
        assert!(
            text.contains("bytes of output)]") && text.contains("no longer kept"),
            "{name}: {}",
            &text[..200.min(text.len())]
        );
        total += bytes;
    }
    assert!(total <= BUDGET as u64, "{total} bytes kept");
    assert_eq!(total, held as u64);
    // The newest output is what is kept.
    let last = t.call("process_logs", json!({"name": "p0", "cursor": PRINTED - 6}));
    assert_eq!(last.structured["output"], "aaaaaaEND\n", "{}", last.text);
    // Past the floor: refused, and nothing is left running.
    let mut refused = None;
    for i in names.len()..BUDGET / MIN_RETAINED_LOG_BYTES + 1 {
        let out = start(&t, &format!("p{i}"));
        if out.is_error {
            refused = Some((i, out));
            break;
        }
    }
    let (i, out) = refused.expect("a process past the floor is refused");
    assert_eq!(i, BUDGET / MIN_RETAINED_LOG_BYTES, "{}", out.text);
    assert!(out.text.starts_with("ERROR limit: "), "{}", out.text);
    assert!(t.processes().get(&format!("p{i}")).is_none());
    assert!(t.processes().retained_log_bytes().0 <= BUDGET);
    drop(t);
    assert_eq!(processes_with(&marker), Vec::<String>::new());
}

/// A start the run's log budget refuses never runs: its window is taken
/// before the spawn (the command was spawned, then killed). The witness is
/// the shell's access time, which `execve` moves (the kernel reads the
/// script's first bytes) before a start returns; the control is the start
/// before it, which the budget has room for.
pub fn a_start_refused_by_the_log_budget_never_runs(p: &dyn Fixture) {
    use cubby::process::MIN_RETAINED_LOG_BYTES;
    use std::time::SystemTime;
    let dir = workspace();
    let shell = dir.path().join("witness-sh");
    std::fs::write(&shell, "#!/bin/sh\nexec /bin/sh \"$@\"\n").unwrap();
    std::fs::set_permissions(&shell, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // Long ago (2000-01-01): a read moves it, whatever `relatime` says.
    let long_ago = SystemTime::UNIX_EPOCH + Duration::from_secs(946_684_800);
    let age = || {
        let times = std::fs::FileTimes::new()
            .set_accessed(long_ago)
            .set_modified(long_ago);
        std::fs::File::options()
            .write(true)
            .open(&shell)
            .unwrap()
            .set_times(times)
            .unwrap();
    };
    let accessed = || std::fs::metadata(&shell).unwrap().accessed().unwrap();
    let t = Toolset::builder(p.sandbox(dir.path()))
        .host_env(cubby::HostEnv::capture())
        .track_changes(false)
        .shell(vec![shell.to_str().unwrap().into(), "-c".into()])
        .retained_log_bytes(MIN_RETAINED_LOG_BYTES)
        .retained_log_total_bytes(MIN_RETAINED_LOG_BYTES)
        .build()
        .unwrap();
    // The control: room for one window; its shell runs.
    age();
    let first = t.call(
        "start_process",
        json!({"name": "first", "command": "exit 0"}),
    );
    assert!(!first.is_error, "{}", first.text);
    let proc = t.processes().get("first").unwrap();
    assert!(proc.wait_until(Some(Instant::now() + Duration::from_secs(60)), None));
    assert!(accessed() > long_ago, "the control's shell did not run");
    // No room for a second (the first's window is kept for paging).
    age();
    let second = t.call(
        "start_process",
        json!({"name": "second", "command": "exit 0"}),
    );
    assert!(second.text.starts_with("ERROR limit: "), "{}", second.text);
    assert!(t.processes().get("second").is_none());
    assert_eq!(accessed(), long_ago, "the refused start ran its shell");
    // Nor does a `run`, and the refusals left the budget as it was.
    let run = t.call("run", json!({"command": "exit 0"}));
    assert!(run.text.starts_with("ERROR limit: "), "{}", run.text);
    assert_eq!(accessed(), long_ago, "the refused run ran its shell");
    assert!(t.processes().retained_log_bytes().0 <= MIN_RETAINED_LOG_BYTES);
}
