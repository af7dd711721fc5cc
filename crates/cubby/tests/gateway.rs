//! The scoped gateway (SPEC §5.5), driven from inside a real `linux`
//! sandbox (network `off`) with curl and Python, against an HTTPS upstream
//! on loopback with its own CA (`gateway/upstream.rs`) that counts what it
//! receives: what is refused never reaches it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "gateway/upstream.rs"]
mod upstream;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use cubby::config::{GatewayConfig, GatewayCredential, GatewayRoute};
use cubby::{HostEnv, LinuxSandbox, Policy, Sandbox, Toolset};
use serde_json::json;
use upstream::Upstream;

/// The tests' gateway relays answers of at most this many bytes.
const MAX_RESPONSE: u64 = 200_000;

/// The credential's real value: it must reach only the upstream.
const REAL: &str = "ghp_real_credential_5f1e9a";

fn gateways(up: &Upstream) -> BTreeMap<String, GatewayConfig> {
    let routes = [
        "GET /repos/:owner/:repo/issues",
        "POST /repos/:owner/:repo/issues",
        "GET /leak/:x",
        "GET /reflect/:x",
        "GET /redirect/:x",
        "GET /cookie/:x",
        "GET /big/:n",
    ];
    let config = GatewayConfig {
        base_url: format!("https://localhost:{}", up.port),
        credential: Some(GatewayCredential {
            secret: "GW_SECRET".into(),
            header: "Authorization".into(),
            format: "Bearer {}".into(),
        }),
        routes: routes
            .iter()
            .map(|r| GatewayRoute::Plain(r.to_string()))
            .collect(),
        max_body: None,
        max_response: Some(cubby::config::ByteSize(MAX_RESPONSE)),
        ca_file: Some(up.ca_file.display().to_string()),
    };
    BTreeMap::from([("gh".to_string(), config)])
}

fn policy(up: &Upstream) -> Policy {
    Policy::builder().gateways(gateways(up)).build().unwrap()
}

fn host() -> HostEnv {
    HostEnv::capture().with("GW_SECRET", REAL)
}

fn sandbox(dir: &Path, up: &Upstream) -> Arc<dyn Sandbox> {
    Arc::new(LinuxSandbox::open(dir, &policy(up), &host()).unwrap())
}

fn toolset(sandbox: &Arc<dyn Sandbox>, up: &Upstream) -> Toolset {
    Toolset::builder(sandbox.clone())
        .policy(policy(up))
        .host_env(host())
        .build()
        .unwrap()
}

/// Runs `command`; returns the model-facing text (never holding the
/// credential).
fn run(t: &Toolset, command: &str) -> String {
    let out = t.call("run", json!({"command": command, "timeout_ms": 120_000}));
    assert!(
        !out.text.contains(REAL),
        "the credential leaked:\n{}",
        out.text
    );
    if std::env::var_os("GATEWAY_DEBUG").is_some() {
        eprintln!("$ {command}\n{}\n", out.text);
    }
    out.text
}

const AUTH: &str = "-H \"Authorization: Bearer $CUBBY_GATEWAY_TOKEN\"";

/// A Python client sending raw requests (`@TOKEN@` replaced by the run's
/// token) one connection each, printing `<name> <status>`.
const RAW_CLIENT: &str = r#"
import json, os, socket, sys
port = int(os.environ['CUBBY_GATEWAY_URL'].rsplit(':', 1)[1])
tok = os.environ['CUBBY_GATEWAY_TOKEN'].encode()
for name, raw in json.load(open(sys.argv[1])):
    data = bytes.fromhex(raw).replace(b'@TOKEN@', tok)
    s = socket.create_connection(('127.0.0.1', port), 20)
    s.sendall(data)
    resp = b''
    while True:
        try:
            c = s.recv(65536)
        except OSError:
            break
        if not c:
            break
        resp += c
    s.close()
    status = resp.split(b' ', 2)[1].decode() if resp.startswith(b'HTTP/1.1 ') else 'none'
    print(name, status)
"#;

#[test]
fn the_gateway_forwards_allowed_calls_with_the_credential_and_refuses_the_rest_unsent() {
    let up = Upstream::start();
    let dir = tempfile::tempdir().unwrap();
    let sb = sandbox(dir.path(), &up);
    let t = toolset(&sb, &up);

    // An allowed call: the real header, none of the sandbox's own, and the
    // stripped headers gone.
    let text = run(
        &t,
        &format!(
            "curl -sS -f {AUTH} -H 'X-HTTP-Method-Override: DELETE' -H 'X-Original-URL: /admin' \
             -H 'X-Forwarded-For: 1.2.3.4' -H 'Cookie: a=b' -H 'X-Keep: yes' \
             -H 'Connection: X-Secret-Hop' -H 'X-Secret-Hop: 1' \
             \"$CUBBY_GATEWAY_URL/repos/o/r/issues?state=open\"; echo rc=$?"
        ),
    );
    assert!(text.contains("rc=0"), "{text}");
    let seen = up.seen("/repos/o/r/issues").expect("forwarded");
    assert_eq!(seen.target, "/repos/o/r/issues?state=open");
    assert_eq!(
        seen.header("authorization"),
        Some(&*format!("Bearer {REAL}"))
    );
    assert_eq!(
        seen.headers
            .iter()
            .filter(|(n, _)| n == "authorization")
            .count(),
        1
    );
    for gone in [
        "x-http-method-override",
        "x-original-url",
        "x-forwarded-for",
        "cookie",
        "x-secret-hop",
        "x-cubby-gateway-token",
    ] {
        assert!(seen.header(gone).is_none(), "{gone} reached the upstream");
    }
    assert_eq!(seen.header("x-keep"), Some("yes"));
    assert!(!text.contains("cubby-gw-"), "the token is redacted: {text}");

    // `Connection: Authorization` cannot keep the command's own header
    // either (it is dropped whatever `Connection` names).
    run(
        &t,
        &format!(
            "curl -sS {AUTH} -H 'Connection: Authorization' \"$CUBBY_GATEWAY_URL/repos/o/conn/issues\""
        ),
    );
    let seen = up.seen("/repos/o/conn/issues").unwrap();
    assert_eq!(
        seen.header("authorization"),
        Some(&*format!("Bearer {REAL}"))
    );

    // A placeholder-looking body goes as it is: nothing is substituted.
    std::fs::write(
        dir.path().join("body.json"),
        "{\"t\": \"${GW_SECRET}\", \"f\": \"Bearer {}\", \"p\": \"$CUBBY_GATEWAY_TOKEN\"}",
    )
    .unwrap();
    run(
        &t,
        &format!(
            "curl -sS -f {AUTH} --data-binary @body.json \"$CUBBY_GATEWAY_URL/repos/o/r/issues\""
        ),
    );
    let seen = up.seen("/repos/o/r/issues").unwrap();
    assert_eq!(seen.method, "POST");
    assert_eq!(
        seen.body,
        b"{\"t\": \"${GW_SECRET}\", \"f\": \"Bearer {}\", \"p\": \"$CUBBY_GATEWAY_TOKEN\"}"
    );

    // The requests that must never reach the upstream.
    let before = up.count();
    let get = |target: &str, extra: &str| {
        format!("GET {target} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer @TOKEN@\r\n{extra}\r\n")
    };
    let mut cases: Vec<(&str, String)> = vec![
        ("dotdot", get("/repos/o/r/issues/../../user", "")),
        ("enc-dotdot", get("/repos/%2e%2e/r/issues", "")),
        ("enc-slash", get("/repos/a%2Fb/r/issues", "")),
        ("double-enc", get("/repos/a%252Fb/r/issues", "")),
        ("backslash", get("/repos/a%5Cb/r/issues", "")),
        ("semicolon", get("/repos/o/r/issues;x=y", "")),
        ("dotdot-semi", get("/repos/..;x/r/issues", "")),
        ("double-slash", get("//repos/o/r/issues", "")),
        ("empty-seg", get("/repos/o//issues", "")),
        ("fullwidth", get("/repos/o/r/\u{ff49}ssues", "")),
        ("absolute", get("http://localhost/repos/o/r/issues", "")),
        (
            "connect",
            "CONNECT localhost:443 HTTP/1.1\r\nHost: localhost:443\r\nAuthorization: Bearer @TOKEN@\r\n\r\n".into(),
        ),
        ("upgrade", get("/repos/o/r/issues", "Connection: Upgrade\r\nUpgrade: websocket\r\n")),
        (
            "cl-te",
            "POST /repos/o/r/issues HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer @TOKEN@\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".into(),
        ),
        (
            "cl-twice",
            "POST /repos/o/r/issues HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer @TOKEN@\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nhi".into(),
        ),
        // A chunk size near u64::MAX after a first chunk: the body cap's
        // sum overflowed (found in review); refused as too large, unsent.
        (
            "chunk-overflow",
            "POST /repos/o/r/issues HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer @TOKEN@\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nfffffffffffffffd\r\n".into(),
        ),
        ("http10", "GET /repos/o/r/issues HTTP/1.0\r\nAuthorization: Bearer @TOKEN@\r\n\r\n".into()),
        ("unlisted-method", get("/repos/o/r/issues", "").replacen("GET", "DELETE", 1)),
        ("unlisted-path", get("/user", "")),
        ("no-token", "GET /repos/o/r/issues HTTP/1.1\r\nHost: gw\r\n\r\n".into()),
        ("bad-token", get("/repos/o/r/issues", "").replace("@TOKEN@", "cubby-gw-00")),
    ];
    // CR, LF and NUL in the target: raw bytes, hex-coded for the client.
    let mut raw_cases: Vec<(String, String)> = cases
        .drain(..)
        .map(|(n, r)| (n.to_string(), hex(r.as_bytes())))
        .collect();
    for (name, bad) in [("cr", b'\r'), ("lf", b'\n'), ("nul", 0u8)] {
        let mut r = b"GET /repos/o/r".to_vec();
        r.push(bad);
        r.extend_from_slice(
            b"/issues HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer @TOKEN@\r\n\r\n",
        );
        raw_cases.push((name.to_string(), hex(&r)));
    }
    std::fs::write(dir.path().join("raw.py"), RAW_CLIENT).unwrap();
    std::fs::write(
        dir.path().join("cases.json"),
        serde_json::to_string(&raw_cases).unwrap(),
    )
    .unwrap();
    let text = run(&t, "python3 raw.py cases.json");
    let status: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once(' ')).collect();
    for (name, _) in &raw_cases {
        let want = match name.as_str() {
            "unlisted-method" | "unlisted-path" => "403",
            "no-token" | "bad-token" => "401",
            "cr" | "lf" | "nul" => "400",
            "chunk-overflow" => "413",
            _ => "400",
        };
        assert_eq!(status.get(name.as_str()), Some(&want), "{name}: {text}");
    }
    assert_eq!(up.count(), before, "a refused request reached the upstream");
    // The 403 lists the allowed routes.
    let text = run(
        &t,
        &format!("curl -sS {AUTH} -X DELETE \"$CUBBY_GATEWAY_URL/repos/o/r/issues\""),
    );
    assert!(text.contains("GET /repos/:owner/:repo/issues"), "{text}");

    // Bodies: 1 MB passes, 1 MB + 1 is 413 and never sent.
    run(
        &t,
        "head -c 1000000 /dev/zero > mb && head -c 1000001 /dev/zero > mb1",
    );
    let text = run(
        &t,
        &format!(
            "curl -sS -o /dev/null -w '%{{http_code}}\\n' {AUTH} --data-binary @mb \
             \"$CUBBY_GATEWAY_URL/repos/o/mb/issues\"; curl -sS -o /dev/null -w '%{{http_code}}\\n' \
             {AUTH} --data-binary @mb1 \"$CUBBY_GATEWAY_URL/repos/o/mb1/issues\""
        ),
    );
    assert!(text.contains("200\n413"), "{text}");
    assert_eq!(up.seen("/repos/o/mb/issues").unwrap().body.len(), 1_000_000);
    assert!(up.seen("/repos/o/mb1/").is_none());

    // The answers: the credential redacted (header and a body split
    // mid-value across chunks), a cross-host redirect returned as it is,
    // Set-Cookie dropped.
    let text = run(
        &t,
        &format!("curl -sS -i {AUTH} \"$CUBBY_GATEWAY_URL/leak/1\""),
    );
    assert!(
        text.contains("you sent: Bearer [REDACTED:GW_SECRET] (end)"),
        "{text}"
    );
    assert!(
        text.contains("x-echo: Bearer [REDACTED:GW_SECRET]"),
        "{text}"
    );
    // Red-team pass 11, G1: the origin's usual reflections of the value —
    // its case changed, percent-encoded, base64, split over two lines of
    // one header — are redacted (or the header dropped) too.
    let text = run(
        &t,
        &format!("curl -sS -i {AUTH} \"$CUBBY_GATEWAY_URL/reflect/1\""),
    );
    for form in ["upper", "lower", "percent", "base64"] {
        assert!(
            text.contains(&format!("{form}=[REDACTED:GW_SECRET]")),
            "{form}: {text}"
        );
    }
    assert!(!text.to_ascii_lowercase().contains("x-multi"), "{text}");
    assert!(!text.to_ascii_lowercase().contains(&REAL[..8]), "{text}");
    // Redacted before it reached the command, not only in the tool's output.
    let text = run(
        &t,
        &format!("curl -sS {AUTH} \"$CUBBY_GATEWAY_URL/leak/2\" | grep -c REDACTED"),
    );
    assert!(text.contains('1'), "{text}");
    let text = run(
        &t,
        &format!("curl -sS -i {AUTH} \"$CUBBY_GATEWAY_URL/redirect/1\""),
    );
    assert!(text.contains("302"), "{text}");
    assert!(
        text.contains("location: https://elsewhere.example/steal"),
        "{text}"
    );
    let text = run(
        &t,
        &format!("curl -sS -i {AUTH} \"$CUBBY_GATEWAY_URL/cookie/1\""),
    );
    assert!(text.contains("200"), "{text}");
    assert!(!text.to_ascii_lowercase().contains("set-cookie"), "{text}");

    // Answers are capped: one within the cap passes whole; one whose
    // length says it is over is 502; one that passes the cap while it
    // streams is cut (curl: the transfer closed early).
    let text = run(
        &t,
        &format!(
            "curl -sS -o big -w 'size %{{size_download}} code %{{http_code}}\\n' {AUTH} \
             \"$CUBBY_GATEWAY_URL/big/{MAX_RESPONSE}\"; \
             curl -sS -o /dev/null -w 'code %{{http_code}}\\n' {AUTH} \"$CUBBY_GATEWAY_URL/big/{}\"; \
             curl -sS -o /dev/null {AUTH} \"$CUBBY_GATEWAY_URL/big/chunked-{}\"; echo rc=$?",
            MAX_RESPONSE + 1,
            MAX_RESPONSE * 3
        ),
    );
    assert!(
        text.contains(&format!("size {MAX_RESPONSE} code 200")),
        "{text}"
    );
    assert!(text.contains("code 502"), "{text}");
    assert!(text.contains("rc=18"), "{text}");

    // Network off: the gateway is all the command reaches; the upstream
    // itself is not.
    let text = run(
        &t,
        &format!(
            "curl -sS --max-time 5 --cacert /dev/null https://localhost:{}/repos/o/r/issues; echo rc=$?",
            up.port
        ),
    );
    assert!(!text.contains("rc=0"), "{text}");

    // An event per request: method, route, status, bytes.
    let events = t.gateway_events();
    let posted = events
        .iter()
        .find(|e| e.method == "POST" && e.status == 200)
        .expect("an event for the POST");
    assert_eq!(
        posted.route.as_deref(),
        Some("POST /repos/:owner/:repo/issues")
    );
    assert!(posted.bytes_in > 0 && posted.bytes_out > 0, "{posted:?}");
    assert!(events.iter().any(|e| e.status == 413));
    assert!(events.iter().any(|e| e.status == 403 && e.route.is_none()));
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn a_token_dies_with_its_run_and_works_only_at_its_own_sandbox() {
    let up = Upstream::start();
    let dir = tempfile::tempdir().unwrap();
    let sb = sandbox(dir.path(), &up);
    let first = toolset(&sb, &up);
    // The command hands its token over through a file (tool output is
    // redacted).
    run(&first, "printf %s \"$CUBBY_GATEWAY_TOKEN\" > token");
    let old = std::fs::read_to_string(dir.path().join("token")).unwrap();
    assert!(old.starts_with("cubby-gw-"), "{old}");
    let call = |t: &Toolset, token: &str| {
        run(
            t,
            &format!(
                "curl -sS -o /dev/null -w '%{{http_code}}\\n' -H 'Authorization: Bearer {token}' \
                 \"$CUBBY_GATEWAY_URL/repos/o/r/issues\""
            ),
        )
    };
    assert!(call(&first, &old).contains("200"));
    // The run ends while a clone of its toolset is still held (a call in
    // flight, a library user): the token is dead from then on (found in
    // review: it lived until the last clone dropped).
    let held = first.clone();
    first.end();
    let ended_run_checker = toolset(&sb, &up);
    let before = up.count();
    assert!(
        call(&ended_run_checker, &old).contains("401"),
        "after end()"
    );
    assert_eq!(up.count(), before);
    drop(ended_run_checker);
    drop(held);
    drop(first);
    // A new run over the same sandbox: the old run's token is dead.
    let second = toolset(&sb, &up);
    let before = up.count();
    assert!(call(&second, &old).contains("401"));
    assert_eq!(up.count(), before);
    run(&second, "printf %s \"$CUBBY_GATEWAY_TOKEN\" > token");
    let live = std::fs::read_to_string(dir.path().join("token")).unwrap();
    assert_ne!(live, old);
    assert!(call(&second, &live).contains("200"));
    // Another sandbox's gateway (same config) does not know it.
    let other_dir = tempfile::tempdir().unwrap();
    let other_sb = sandbox(other_dir.path(), &up);
    let other = toolset(&other_sb, &up);
    let before = up.count();
    assert!(
        call(&other, &live).contains("401"),
        "another sandbox's token"
    );
    assert_eq!(up.count(), before);
}

/// The test process's peak resident memory (the gateway runs in it), KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// 1,000 clients at once, each with its own connection.
const CONCURRENT: &str = r#"
import asyncio, os, sys
port = int(os.environ['CUBBY_GATEWAY_URL'].rsplit(':', 1)[1])
tok = os.environ['CUBBY_GATEWAY_TOKEN']
N = int(sys.argv[1])
async def one(i):
    r, w = await asyncio.open_connection('127.0.0.1', port)
    w.write(f'GET /repos/o/c{i}/issues HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {tok}\r\nConnection: close\r\n\r\n'.encode())
    await w.drain()
    data = await r.read()
    w.close()
    return data.split(b' ', 2)[1].decode() if data.startswith(b'HTTP/1.1 ') else 'none'
async def main():
    got = await asyncio.gather(*(one(i) for i in range(N)), return_exceptions=True)
    codes = {}
    for g in got:
        k = g if isinstance(g, str) else type(g).__name__
        codes[k] = codes.get(k, 0) + 1
    print('codes', sorted(codes.items()))
asyncio.run(main())
"#;

/// A slow client: a head sent one byte a second, never finished.
const SLOWLORIS: &str = r#"
import os, socket, time
port = int(os.environ['CUBBY_GATEWAY_URL'].rsplit(':', 1)[1])
s = socket.create_connection(('127.0.0.1', port))
s.sendall(b'GET /repos/o/r/issues HTTP/1.1\r\nHost: gw\r\nX-Slow: ')
start = time.monotonic()
s.settimeout(1.0)
closed = None
while time.monotonic() - start < 60:
    try:
        s.sendall(b'a')
        data = s.recv(4096)
        closed = (time.monotonic() - start, data[:12])
        break
    except socket.timeout:
        continue
    except OSError as e:
        closed = (time.monotonic() - start, repr(e))
        break
print('closed after', int(closed[0]) if closed else 'never', closed[1] if closed else '')
"#;

#[test]
fn a_thousand_concurrent_requests_stay_bounded_and_a_slow_client_is_cut_off() {
    let up = Upstream::start();
    let dir = tempfile::tempdir().unwrap();
    let sb = sandbox(dir.path(), &up);
    let t = toolset(&sb, &up);
    std::fs::write(dir.path().join("many.py"), CONCURRENT).unwrap();
    std::fs::write(dir.path().join("slow.py"), SLOWLORIS).unwrap();
    // Warm: the sandbox and the gateway's client up.
    assert!(run(&t, "python3 many.py 1").contains("('200', 1)"));
    let before_rss = peak_rss_kib();
    let before = up.count();
    let text = run(&t, "python3 many.py 1000");
    assert!(text.contains("codes [('200', 1000)]"), "{text}");
    assert_eq!(up.count() - before, 1000);
    let grown_mib = peak_rss_kib().saturating_sub(before_rss) / 1024;
    eprintln!("1,000 concurrent requests: peak RSS grew {grown_mib} MiB");
    assert!(grown_mib < 256, "peak RSS grew {grown_mib} MiB");

    // The slow client is cut off at the head timeout (10 s), and the
    // gateway answers others meanwhile.
    let text = run(
        &t,
        &format!(
            "python3 slow.py & sleep 1; curl -sS -o /dev/null -w 'during %{{http_code}}\\n' {AUTH} \
             \"$CUBBY_GATEWAY_URL/repos/o/r/issues\"; wait"
        ),
    );
    assert!(text.contains("during 200"), "{text}");
    let after: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("closed after "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the slow client was never cut off: {text}"));
    assert!((9..=20).contains(&after), "cut off after {after} s: {text}");
}

/// The benchmark client: `n` sequential keep-alive requests, direct
/// (HTTPS, the CA given) or through the gateway (plain HTTP inside the
/// sandbox); then `n` more from 8 threads. Prints p50/p99 in µs and
/// requests a second.
const BENCH: &str = r#"
import http.client, os, ssl, sys, threading, time
mode, n, up_port, ca = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
tok = os.environ['CUBBY_GATEWAY_TOKEN']
gw_port = int(os.environ['CUBBY_GATEWAY_URL'].rsplit(':', 1)[1])
def conn():
    if mode in ('direct', 'relay'):
        ctx = ssl.create_default_context(cafile=ca)
        return http.client.HTTPSConnection('localhost', up_port, context=ctx), {'Authorization': 'Bearer real'}
    return http.client.HTTPConnection('127.0.0.1', gw_port), {'Authorization': 'Bearer ' + tok}
def one(c, h, i):
    c.request('GET', f'/repos/o/r{i % 7}/issues', headers=h)
    r = c.getresponse(); r.read()
    assert r.status == 200, r.status
c, h = conn()
for i in range(50): one(c, h, i)
lat = []
for i in range(n):
    t = time.perf_counter(); one(c, h, i); lat.append(time.perf_counter() - t)
lat.sort()
p50, p99 = lat[len(lat) // 2] * 1e6, lat[int(len(lat) * 0.99)] * 1e6
seq = n / sum(lat)
def worker(k):
    c, h = conn()
    for i in range(n // 8): one(c, h, i)
ts = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
t = time.perf_counter()
for x in ts: x.start()
for x in ts: x.join()
par = (n // 8 * 8) / (time.perf_counter() - t)
print(f'{mode} p50_us={p50:.0f} p99_us={p99:.0f} seq_rps={seq:.0f} par8_rps={par:.0f}')
"#;

/// The gateway against a direct request to the same upstream, side by
/// side in one run (docs/PERFORMANCE.md). Network `on`: the sandbox shares
/// the host's network, so that one client inside it reaches both.
#[test]
#[ignore = "a benchmark: cargo test -p cubby --test gateway -- --ignored --nocapture"]
fn bench_gateway_against_direct() {
    let up = Upstream::start();
    let dir = tempfile::tempdir().unwrap();
    let network = cubby::config::NetworkConfig {
        mode: cubby::NetworkMode::On,
        ..Default::default()
    };
    let policy = Policy::builder()
        .gateways(gateways(&up))
        .network(network)
        .build()
        .unwrap();
    let sb: Arc<dyn Sandbox> = Arc::new(LinuxSandbox::open(dir.path(), &policy, &host()).unwrap());
    let t = Toolset::builder(sb)
        .policy(policy)
        .host_env(host())
        .build()
        .unwrap();
    std::fs::write(dir.path().join("bench.py"), BENCH).unwrap();
    let n = std::env::var("GATEWAY_BENCH_N").unwrap_or_else(|_| "2000".into());
    // The sandbox has a /tmp of its own: the CA goes into the workspace.
    std::fs::copy(&up.ca_file, dir.path().join("ca.pem")).unwrap();
    let ca = "ca.pem";
    // The anchor for the hop itself: a relay that only copies bytes
    // (the client's TLS passes through it to the upstream).
    let relay = relay_to(up.port);
    for round in 0..2 {
        for mode in ["direct", "relay", "gateway"] {
            let port = if mode == "relay" { relay } else { up.port };
            let text = run(&t, &format!("python3 bench.py {mode} {n} {port} {ca}"));
            let line = text
                .lines()
                .find(|l| l.starts_with(mode))
                .unwrap_or_else(|| panic!("{text}"));
            eprintln!("round {round}: {line}");
        }
    }
}

/// A bare TCP relay on loopback to `port` (two copying threads a
/// connection): its port. Its threads end with the test's process.
fn relay_to(port: u16) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let relay = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(upstream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
                continue;
            };
            let _ = client.set_nodelay(true);
            let _ = upstream.set_nodelay(true);
            let (mut c_in, mut u_out) =
                (client.try_clone().unwrap(), upstream.try_clone().unwrap());
            std::thread::spawn(move || std::io::copy(&mut c_in, &mut u_out));
            let (mut u_in, mut c_out) = (upstream, client);
            std::thread::spawn(move || std::io::copy(&mut u_in, &mut c_out));
        }
    });
    relay
}

/// A connect flood past the connection cap: holds `MAX_GATEWAY_CONNECTIONS`
/// idle connections, then opens more without sending or closing, and
/// sorts them by what the gateway did — answered 503 (a refusal, which
/// holds its socket while it lingers) or closed with no answer at once.
/// Stops at the first closed at once (or after `extra`), then reports.
const FLOOD: &str = r#"
import os, resource, socket, sys
held, extra = int(sys.argv[1]), int(sys.argv[2])
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
port = int(os.environ['CUBBY_GATEWAY_URL'].rsplit(':', 1)[1])
idle = [socket.create_connection(('127.0.0.1', port), 20) for _ in range(held)]
refused, closed, open_ = [], 0, []
for i in range(extra):
    s = socket.create_connection(('127.0.0.1', port), 20)
    s.settimeout(20)
    got = b''
    try:
        while True:
            c = s.recv(4096)
            if not c:
                break
            got += c
    except ConnectionResetError:
        pass
    if got.startswith(b'HTTP/1.1 503'):
        refused.append(s)
    elif got == b'':
        closed += 1
        s.close()
        break
    else:
        print('other', got[:40])
        s.close()
print(f'refused {len(refused)} closed {closed}')
"#;

/// Past the connection cap the gateway answers 503 to at most
/// `MAX_GATEWAY_REFUSALS` (64) connections at once (each lingers to let
/// its client read the answer); the next is closed at once, so a connect
/// flood cannot hold the server's descriptors (found in review: every
/// refusal held its socket). Seen failing without the refusals' cap: the
/// flood got 503 on every connection and none was closed.
#[test]
fn a_connect_flood_past_the_cap_is_closed_at_once_beyond_64_refusals() {
    // The gateway runs in this process: room for its side of the flood.
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        },
    )
    .unwrap();
    let up = Upstream::start();
    let dir = tempfile::tempdir().unwrap();
    let sb = sandbox(dir.path(), &up);
    let t = toolset(&sb, &up);
    std::fs::write(dir.path().join("flood.py"), FLOOD).unwrap();
    let text = run(
        &t,
        &format!("python3 flood.py {} 1000", cubby::MAX_GATEWAY_CONNECTIONS),
    );
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("refused "))
        .unwrap_or_else(|| panic!("{text}"));
    let (refused, closed) = line.split_once(" closed ").unwrap();
    let (refused, closed): (usize, usize) = (refused.parse().unwrap(), closed.parse().unwrap());
    assert_eq!(closed, 1, "no connection was closed at once: {text}");
    assert!(
        refused >= 64,
        "the cap of refusals is 64 at once, and the first 64 were answered: {text}"
    );
    assert!(!text.contains("other"), "{text}");
    drop(t);
}
