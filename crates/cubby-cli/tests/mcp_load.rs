//! Load: 64 concurrent HTTP sessions × 100 tool calls, zero errors; the
//! server's open fds and RSS come back to their baseline (a server warmed
//! up by the same concurrency) once the sessions are closed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::request;

const SESSIONS: usize = 64;
const CALLS: usize = 100;

fn proc_stat(pid: u32) -> (usize, u64) {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    (fds, rss)
}

/// One session: handshake, `calls` reads, DELETE. Returns errors seen.
fn session(port: u16, calls: usize, tag: usize) -> Vec<String> {
    let mut errors = Vec::new();
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"load","version":"1"}}}"#;
    let (status, head, _) = request(port, "POST", init.as_bytes(), &[]);
    if status != 200 {
        return vec![format!("initialize: HTTP {status}")];
    }
    let Some(sid) = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("mcp-session-id")
            .then(|| v.trim().to_string())
    }) else {
        return vec!["no session id".into()];
    };
    let headers = [
        ("Mcp-Session-Id", sid.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    request(
        port,
        "POST",
        br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        &headers,
    );
    for i in 0..calls {
        let file = (tag + i) % 8;
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"read_file","arguments":{{"path":"f{file}.txt"}}}}}}"#,
            i + 1
        );
        let (status, _, body) = request(port, "POST", body.as_bytes(), &headers);
        let expected = format!(r#"content of f{file}"#);
        if status != 200 || !body.contains(&expected) || body.contains(r#""isError":true"#) {
            errors.push(format!(
                "call {i}: HTTP {status}: {}",
                body.chars().take(200).collect::<String>()
            ));
        }
    }
    let (status, _, _) = request(port, "DELETE", b"", &headers);
    if !(200..300).contains(&status) {
        errors.push(format!("DELETE: HTTP {status}"));
    }
    errors
}

#[test]
fn sixty_four_sessions_of_a_hundred_calls() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..8 {
        std::fs::write(
            dir.path().join(format!("f{i}.txt")),
            format!("content of f{i}\n"),
        )
        .unwrap();
    }
    let server = common::Serve::start(dir.path());
    let port = server.port;
    let pid = server.child.id();
    // Warm up with the same concurrency (short sessions), so that the
    // allocator's per-thread arenas and lazily built state are part of the
    // baseline: what must come back is what the load itself added.
    let warm: Vec<_> = (0..SESSIONS)
        .map(|tag| std::thread::spawn(move || session(port, 5, tag)))
        .collect();
    for h in warm {
        assert_eq!(h.join().unwrap(), Vec::<String>::new());
    }
    std::thread::sleep(Duration::from_millis(500));
    let (fds0, rss0) = proc_stat(pid);
    let started = Instant::now();
    let handles: Vec<_> = (0..SESSIONS)
        .map(|tag| std::thread::spawn(move || session(port, CALLS, tag)))
        .collect();
    let mut errors = Vec::new();
    for h in handles {
        errors.extend(h.join().unwrap());
    }
    let elapsed = started.elapsed();
    assert!(
        errors.is_empty(),
        "{} errors, first: {:?}",
        errors.len(),
        errors.first()
    );
    let (_, rss_peak) = proc_stat(pid);
    // Sessions end asynchronously after DELETE: give them a moment.
    let deadline = Instant::now() + Duration::from_secs(15);
    let (mut fds1, mut rss1) = proc_stat(pid);
    while fds1 > fds0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        (fds1, rss1) = proc_stat(pid);
    }
    eprintln!(
        "{} calls in {:.2}s ({:.0}/s); fds {fds0} -> {fds1}; RSS {rss0} KiB -> peak {rss_peak} KiB -> {rss1} KiB",
        SESSIONS * CALLS,
        elapsed.as_secs_f64(),
        (SESSIONS * CALLS) as f64 / elapsed.as_secs_f64()
    );
    assert!(fds1 <= fds0, "open fds did not come back: {fds0} -> {fds1}");
    // Back to baseline: within 16 MiB of the warmed-up server (the load adds
    // 6-9 MiB of allocator retention; a per-call leak would add far more
    // over 6,400 calls).
    assert!(
        rss1 <= rss0 + 16 * 1024,
        "RSS did not come back: {rss0} KiB -> {rss1} KiB"
    );
}
