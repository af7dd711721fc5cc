//! Cases of the command suite that hold only on the `linux` provider
//! (its pseudo-terminals, its reservations of missing protected paths).

use crate::*;

pub fn commands_get_pseudo_terminals_of_their_own(p: &dyn Fixture) {
    let dir = workspace();
    let t = tools(p, dir.path());
    let out = run(
        &t,
        json!({"command": "python3 -c 'import os; m, s = os.openpty(); print(os.ttyname(s)); os.write(m, b\"typed\\n\"); print(os.read(s, 16))'; script -qec 'tty' /dev/null"}),
    );
    assert!(out.text.starts_with("OK exit=0 "), "{}", out.text);
    // Python's, then `script`'s (the number may be reused).
    assert_eq!(out.text.matches("\n/dev/pts/").count(), 2, "{}", out.text);
    assert!(out.text.contains("b'typed\\n'"), "{}", out.text);
}

pub fn file_tools_do_not_see_the_reservations_of_a_running_command(p: &dyn Fixture) {
    let dir = workspace();
    std::fs::write(dir.path().join("notes.txt"), "hello\n").unwrap();
    let t = tools(p, dir.path());
    let marker = unique("reserved");
    let script = sleeper(dir.path(), &marker);
    let out = t.call("start_process", json!({"name": "svc", "command": script}));
    assert!(!out.is_error, "{}", out.text);
    // On the host, missing protected paths are placeholders now.
    let reserved = [".mcp.json", ".codex", ".claude", "cubby.toml", ".git"];
    for name in reserved {
        assert!(dir.path().join(name).is_dir(), "{name} is reserved");
    }
    let listing = t.call("list_files", json!({"path": "", "depth": 3}));
    let found = t.call("glob", json!({"pattern": "**/*"}));
    let hidden = t.call("glob", json!({"pattern": ".*"}));
    for out in [&listing, &found, &hidden] {
        assert!(!out.is_error, "{}", out.text);
        for name in reserved {
            assert!(!out.text.contains(name), "{name}: {}", out.text);
        }
    }
    assert!(listing.text.contains("notes.txt"), "{}", listing.text);
    assert!(found.text.contains("notes.txt"), "{}", found.text);
    for (tool, args) in [
        ("read_file", json!({"path": ".mcp.json"})),
        ("read_file", json!({"path": "cubby.toml"})),
        ("list_files", json!({"path": ".claude"})),
        ("view_file", json!({"path": ".codex"})),
    ] {
        let out = t.call(tool, args.clone());
        assert!(
            out.text.starts_with("ERROR not_found"),
            "{tool} {args}: {}",
            out.text
        );
    }
    let out = t.call("search", json!({"query": "hello"}));
    assert!(out.text.contains("notes.txt"), "{}", out.text);
    assert!(!t.call("stop_process", json!({"name": "svc"})).is_error);
    // Released: each lingers for the next command for `LINGER` (2 s), then
    // leaves the workspace.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    for name in reserved {
        while dir.path().join(name).exists() {
            assert!(std::time::Instant::now() < deadline, "{name} is released");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// Red-team pass 3, R3-12: with a network of its own (the default `off`),
/// a port a command listens on is not the host's; `preview` and
/// `start_process` with `port` answered with the *host's* port (a host
/// service listening there made the start look ready). The control: the
/// host's listener is really there.
pub fn ports_of_a_network_of_its_own_are_not_handed_out_as_the_hosts(p: &dyn Fixture) {
    let dir = workspace();
    let t = tools(p, dir.path());
    let host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = host.local_addr().unwrap().port();
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    let out = t.call("preview", json!({"port": port}));
    assert!(out.text.starts_with("ERROR unsupported"), "{}", out.text);
    assert!(
        out.text.contains("curl -s http://127.0.0.1:"),
        "{}",
        out.text
    );
    let out = t.call(
        "start_process",
        json!({"name": "web", "command": "sleep 30", "port": port}),
    );
    assert!(out.text.starts_with("ERROR unsupported"), "{}", out.text);
    let listed = t.call("list_processes", json!({}));
    assert!(!listed.text.contains("web"), "{}", listed.text);
    // Without `port` it starts.
    let out = t.call(
        "start_process",
        json!({"name": "web", "command": "sleep 30"}),
    );
    assert!(!out.is_error, "{}", out.text);
    t.stop_processes();
}

/// The workspace root is opened once when the sandbox opens; commands get
/// it bound by path when the first one starts. A root moved away and
/// replaced at its path in between (a directory, or a link to another)
/// must not become the commands' workspace while the file tools act in
/// the old one: the holder binds the path only when it still names the
/// directory opened. The control: the impostor is there and readable.
pub fn a_root_replaced_before_the_first_command_is_refused(p: &dyn Fixture) {
    let dir = workspace();
    std::fs::write(dir.path().join("mine.txt"), "mine\n").unwrap();
    let t = tools(p, dir.path());
    let moved = dir.path().with_extension("moved");
    std::fs::rename(dir.path(), &moved).unwrap();
    let elsewhere = workspace();
    std::fs::write(elsewhere.path().join("impostor.txt"), "impostor\n").unwrap();
    for replacement in ["dir", "link"] {
        match replacement {
            "dir" => {
                std::fs::create_dir(dir.path()).unwrap();
                std::fs::write(dir.path().join("impostor.txt"), "impostor\n").unwrap();
            }
            _ => std::os::unix::fs::symlink(elsewhere.path(), dir.path()).unwrap(),
        }
        assert!(dir.path().join("impostor.txt").is_file());
        let out = t.call("run", json!({"command": "ls"}));
        assert!(
            out.text.starts_with("ERROR") && out.text.contains("moved or replaced"),
            "{replacement}: {}",
            out.text
        );
        assert!(!out.text.contains("impostor.txt"), "{}", out.text);
        match replacement {
            "dir" => std::fs::remove_dir_all(dir.path()).unwrap(),
            _ => std::fs::remove_file(dir.path()).unwrap(),
        }
    }
    // The file tools act in the directory opened, wherever it went.
    let out = t.call("read_file", json!({"path": "mine.txt"}));
    assert!(out.text.contains("mine"), "{}", out.text);
    drop(t);
    std::fs::remove_dir_all(&moved).unwrap();
    std::fs::create_dir(dir.path()).unwrap();
}
