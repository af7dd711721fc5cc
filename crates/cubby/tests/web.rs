//! `web_fetch` and `web_search` against servers this file starts on
//! 127.0.0.1 and stops itself: never the internet.
//!
//! Names (`allowed.test`, `sub.allowed.test`, `evil.test`, …) reach the test
//! server through a resolver hook, and only because the toolset lists
//! `127.0.0.0/8` in `allowed_cidrs`: the first tests show that without it the
//! same servers are refused. The search backends are tested against local
//! fakes of the Brave and SearXNG JSON APIs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::Pinned;
use cubby::config::{NetworkConfig, SearchBackendKind, WebSearchConfig};
use cubby::process::CancelToken;
use cubby::web::{BraveSearch, SearchBackend, SearxngSearch};
use cubby::{CallOptions, Limits, MemoryFs, Policy, ToolOutput, Toolset, ToolsetBuilder};
use serde_json::{Value, json};

// ---------------------------------------------------------------- server

/// A request as the test server saw it.
#[derive(Clone, Debug)]
struct Request {
    target: String,
    headers: Vec<(String, String)>,
}

impl Request {
    fn path(&self) -> &str {
        self.target.split('?').next().unwrap()
    }
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn host(&self) -> &str {
        self.header("host").unwrap_or("")
    }
    fn query(&self) -> HashMap<String, String> {
        let q = self.target.split_once('?').map_or("", |(_, q)| q);
        url::form_urlencoded::parse(q.as_bytes())
            .into_owned()
            .collect()
    }
}

/// What the server answers.
enum Reply {
    Full {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: Vec<u8>,
    },
    /// Headers of a `total`-byte body, then the body in 64 KiB chunks.
    Stream {
        content_type: &'static str,
        total: usize,
    },
    /// Reads nothing, answers nothing, until the client goes away.
    Hang,
}

fn page(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Reply {
    Reply::Full {
        status,
        headers: vec![("Content-Type", content_type.to_string())],
        body: body.into(),
    }
}

fn redirect(status: u16, location: String) -> Reply {
    Reply::Full {
        status,
        headers: vec![("Location", location)],
        body: Vec::new(),
    }
}

type Handler = dyn Fn(&Request, u16) -> Reply + Send + Sync;

struct Server {
    port: u16,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<Request>>>,
    /// Connections the client closed before the server was done.
    aborted: Arc<AtomicUsize>,
    accept: Option<JoinHandle<()>>,
}

impl Server {
    fn start(handler: impl Fn(&Request, u16) -> Reply + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let aborted = Arc::new(AtomicUsize::new(0));
        let handler: Arc<Handler> = Arc::new(handler);
        let accept = {
            let (stop, seen, aborted) = (stop.clone(), seen.clone(), aborted.clone());
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let (stop, seen, aborted, handler) =
                        (stop.clone(), seen.clone(), aborted.clone(), handler.clone());
                    std::thread::spawn(move || {
                        serve(conn, port, &*handler, &stop, &seen, &aborted);
                    });
                }
            })
        };
        Server {
            port,
            stop,
            seen,
            aborted,
            accept: Some(accept),
        }
    }

    fn url(&self, host: &str, path: &str) -> String {
        format!("http://{host}:{}{path}", self.port)
    }

    fn hosts(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.host().to_string())
            .collect()
    }

    fn requests(&self) -> Vec<Request> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

fn serve(
    mut conn: TcpStream,
    port: u16,
    handler: &Handler,
    stop: &AtomicBool,
    seen: &Mutex<Vec<Request>>,
    aborted: &AtomicUsize,
) {
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match conn.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
        if head.len() > 64 * 1024 {
            return;
        }
    }
    let text = String::from_utf8_lossy(&head);
    let mut lines = text.split("\r\n");
    let request_line = lines.next().unwrap_or("");
    let target = request_line.split(' ').nth(1).unwrap_or("").to_string();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let request = Request { target, headers };
    seen.lock().unwrap().push(request.clone());
    match handler(&request, port) {
        Reply::Full {
            status,
            headers,
            body,
        } => {
            let mut out = format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\n", body.len());
            for (k, v) in headers {
                out.push_str(&format!("{k}: {v}\r\n"));
            }
            out.push_str("Connection: close\r\n\r\n");
            let _ = conn.write_all(out.as_bytes());
            let _ = conn.write_all(&body);
        }
        Reply::Stream {
            content_type,
            total,
        } => {
            let out = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {total}\r\n\
                 Connection: close\r\n\r\n"
            );
            if conn.write_all(out.as_bytes()).is_err() {
                return;
            }
            let chunk = b"<p>lorem ipsum dolor sit amet</p>\n".repeat(2048);
            let mut sent = 0;
            while sent < total {
                let n = chunk.len().min(total - sent);
                if conn.write_all(&chunk[..n]).is_err() {
                    aborted.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                sent += n;
            }
        }
        Reply::Hang => {
            conn.set_read_timeout(Some(Duration::from_millis(20)))
                .unwrap();
            let mut buf = [0u8; 256];
            while !stop.load(Ordering::SeqCst) {
                match conn.read(&mut buf) {
                    Ok(0) => {
                        aborted.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    Ok(_) => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(_) => {
                        aborted.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                }
            }
        }
    }
}

// ------------------------------------------------------------- toolsets

fn pinned() -> Arc<Pinned> {
    let lo: IpAddr = "127.0.0.1".parse().unwrap();
    let mut names = HashMap::new();
    for name in [
        "allowed.test",
        "sub.allowed.test",
        "deep.sub.allowed.test",
        "notallowed.test",
        "evil.test",
        "sub.evil.test",
        "other.test",
    ] {
        names.insert(name, vec![lo]);
    }
    names.insert("mapped.test", vec!["::ffff:127.0.0.1".parse().unwrap()]);
    names.insert("mixed.test", vec![lo, "127.0.0.2".parse().unwrap()]);
    names.insert("loop2.test", vec!["127.0.0.2".parse().unwrap()]);
    Arc::new(Pinned::new(names))
}

fn net(allowed: &[&str], denied: &[&str], cidrs: &[&str]) -> NetworkConfig {
    NetworkConfig {
        allowed_domains: allowed.iter().map(|s| s.to_string()).collect(),
        denied_domains: denied.iter().map(|s| s.to_string()).collect(),
        allowed_cidrs: cidrs.iter().map(|s| s.to_string()).collect(),
        ..NetworkConfig::default()
    }
}

/// The loopback range the test servers live in.
const LOOPBACK: &[&str] = &["127.0.0.0/8"];

fn builder() -> ToolsetBuilder {
    builder_of(Policy::builder().allow(["web_fetch", "web_search"]))
}

fn builder_of(policy: &mut cubby::PolicyBuilder) -> ToolsetBuilder {
    Toolset::builder(cubby::virtual_sandbox(MemoryFs::new()))
        .policy(policy.build().unwrap())
        .track_changes(false)
}

/// [`builder`] with these `[network]` rules.
fn net_builder(network: NetworkConfig) -> ToolsetBuilder {
    builder_of(
        Policy::builder()
            .allow(["web_fetch", "web_search"])
            .network(network),
    )
}

/// [`net_builder`] with these limits.
fn net_builder_with(network: NetworkConfig, limits: Limits) -> ToolsetBuilder {
    builder_of(
        Policy::builder()
            .allow(["web_fetch", "web_search"])
            .network(network)
            .limits(limits),
    )
}

fn fetcher(network: NetworkConfig) -> Toolset {
    net_builder(network).resolver(pinned()).build().unwrap()
}

fn fetcher_with(network: NetworkConfig, limits: Limits) -> Toolset {
    net_builder_with(network, limits)
        .resolver(pinned())
        .build()
        .unwrap()
}

fn fetch(t: &Toolset, url: &str) -> ToolOutput {
    t.call("web_fetch", json!({ "url": url }))
}

/// The error kind of a result, or "ok".
fn kind(out: &ToolOutput) -> String {
    if out.is_error {
        out.structured["error"]["kind"]
            .as_str()
            .unwrap()
            .to_string()
    } else {
        "ok".to_string()
    }
}

fn expect_kind(out: &ToolOutput, want: &str) {
    assert_eq!(kind(out), want, "{}", out.text);
}

const HTML_PAGE: &str = "<!doctype html><html><head><title>T</title>\
    <script>var secret=1</script><style>body{}</style></head><body><h1>Title</h1>\
    <p>Some <b>bold</b> and a <a href=\"https://example.org/x\">link</a>.</p>\
    <ul><li>one</li><li>two</li></ul></body></html>";

/// A server with the routes most tests use.
fn site() -> Server {
    Server::start(|req, port| {
        let path = req.path();
        match path {
            "/" | "/landing" => page(200, "text/html", "<h1>Landing</h1><p>hello</p>"),
            "/html" => page(200, "text/html; charset=utf-8", HTML_PAGE),
            "/json" => page(200, "application/json", "{\"a\": [1, 2, 3]}\n"),
            "/latin1" => page(200, "text/plain; charset=iso-8859-1", b"caf\xe9\n".to_vec()),
            "/notype" => Reply::Full {
                status: 200,
                headers: vec![],
                body: b"<!DOCTYPE html><html><body><h2>Sniffed</h2></body></html>".to_vec(),
            },
            "/png" => page(
                200,
                "image/png",
                [&b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"[..], &[0u8; 64][..]].concat(),
            ),
            "/disguised" => page(200, "text/plain", b"GIF89a\0\0\x01\x02".to_vec()),
            "/missing" => page(404, "text/html", "<h1>Not here</h1>"),
            "/long" => page(200, "text/plain", "0123456789".repeat(3_000)),
            "/huge" => Reply::Stream {
                content_type: "text/html",
                total: 64 * 1024 * 1024,
            },
            "/slow" => Reply::Hang,
            "/to-evil" => redirect(302, format!("http://evil.test:{port}/landing")),
            "/to-sub" => redirect(301, format!("http://sub.allowed.test:{port}/landing")),
            "/to-loop2" => redirect(307, format!("http://127.0.0.2:{port}/landing")),
            "/to-loop2-name" => redirect(308, format!("http://loop2.test:{port}/landing")),
            "/to-mapped" => redirect(302, format!("http://mapped.test:{port}/landing")),
            "/to-file" => redirect(302, "file:///etc/passwd".to_string()),
            "/to-userinfo" => {
                redirect(302, format!("http://allowed.test@evil.test:{port}/landing"))
            }
            "/to-ftp" => redirect(303, format!("ftp://allowed.test:{port}/")),
            "/relative" => redirect(302, "/landing".to_string()),
            p if p.starts_with("/chain/") => {
                let n: u32 = p["/chain/".len()..].parse().unwrap();
                if n == 0 {
                    page(200, "text/plain", "end of chain")
                } else {
                    redirect(302, format!("/chain/{}", n - 1))
                }
            }
            _ => page(404, "text/plain", "no such route"),
        }
    })
}

// ---------------------------------------------------------------- policy

#[test]
fn web_tools_are_off_unless_allowed() {
    let t = Toolset::builder(cubby::virtual_sandbox(MemoryFs::new()))
        .policy(
            Policy::builder()
                .network(NetworkConfig::default())
                .build()
                .unwrap(),
        )
        .track_changes(false)
        .build()
        .unwrap();
    assert!(!t.tool_names().contains(&"web_fetch"));
    assert!(!t.tool_names().contains(&"web_search"));
    let out = fetch(&t, "http://allowed.test/");
    expect_kind(&out, "denied");
    assert!(out.text.contains("allow"), "{}", out.text);
    expect_kind(&t.call("web_search", json!({"query": "x"})), "denied");

    let t = fetcher(net(&[], &[], LOOPBACK));
    let names = t.tool_names();
    assert!(names.contains(&"web_fetch") && names.contains(&"web_search"));
    let spec = t
        .tools()
        .into_iter()
        .find(|s| s.name == "web_fetch")
        .unwrap();
    assert!(spec.annotations.open_world);
    assert_eq!(spec.input_schema["required"], json!(["url"]));
}

#[test]
fn without_network_rules_the_web_tools_are_unsupported() {
    let server = site();
    let t = builder().resolver(pinned()).build().unwrap();
    let out = fetch(&t, &server.url("allowed.test", "/"));
    expect_kind(&out, "unsupported");
    assert!(out.text.contains("network"), "{}", out.text);
    assert!(server.requests().is_empty());
}

// ------------------------------------------------------- addresses, DNS

#[test]
fn loopback_is_refused_unless_allowed_cidrs_lists_it() {
    let server = site();
    let closed = fetcher(NetworkConfig::default());
    for url in [
        server.url("127.0.0.1", "/"),
        server.url("allowed.test", "/"),
        server.url("[::1]", "/"),
        server.url("mapped.test", "/"),
    ] {
        let out = fetch(&closed, &url);
        expect_kind(&out, "network");
        assert!(out.text.contains("loopback"), "{}", out.text);
        assert!(out.text.contains("allowed_cidrs"), "{}", out.text);
    }
    assert!(server.requests().is_empty(), "{:?}", server.hosts());

    let open = fetcher(net(&[], &[], LOOPBACK));
    let out = fetch(&open, &server.url("allowed.test", "/"));
    expect_kind(&out, "ok");
    assert!(out.text.contains("# Landing"), "{}", out.text);
    let out = fetch(&open, &server.url("127.0.0.1", "/"));
    expect_kind(&out, "ok");
    // An IPv4-mapped answer is judged, and reached, as the IPv4 address.
    expect_kind(&fetch(&open, &server.url("mapped.test", "/")), "ok");
    assert_eq!(server.requests().len(), 3);
}

#[test]
fn an_answer_with_any_refused_address_is_refused_whole() {
    let server = site();
    let t = fetcher(net(&[], &[], &["127.0.0.1/32"]));
    expect_kind(&fetch(&t, &server.url("allowed.test", "/")), "ok");
    for name in ["mixed.test", "loop2.test"] {
        let out = fetch(&t, &server.url(name, "/"));
        expect_kind(&out, "network");
        assert!(out.text.contains("127.0.0.2"), "{}", out.text);
    }
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn each_hop_is_resolved_once_and_unknown_names_fail_cleanly() {
    let server = site();
    let resolver = pinned();
    let t = net_builder(net(&[], &[], LOOPBACK))
        .resolver(resolver.clone())
        .build()
        .unwrap();
    expect_kind(&fetch(&t, &server.url("allowed.test", "/to-sub")), "ok");
    assert_eq!(
        *resolver.lookups.lock().unwrap(),
        vec!["allowed.test".to_string(), "sub.allowed.test".to_string()]
    );
    let out = fetch(&t, &server.url("nowhere.test", "/"));
    expect_kind(&out, "network");
    assert!(out.text.contains("cannot be resolved"), "{}", out.text);
}

#[test]
fn a_closed_port_is_a_network_error() {
    // A socket bound and never listening: connections to its port are
    // refused, and no other process can take the port while it is held (a
    // port found free and released could be taken, and then answer).
    let held = rustix::net::socket(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::STREAM,
        None,
    )
    .unwrap();
    let any = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0);
    rustix::net::bind(&held, &any).unwrap();
    let bound = rustix::net::getsockname(&held).unwrap();
    let port = std::net::SocketAddr::try_from(bound).unwrap().port();
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "port {port} answers"
    );
    let t = fetcher(net(&[], &[], LOOPBACK));
    let out = fetch(&t, &format!("http://allowed.test:{port}/"));
    expect_kind(&out, "network");
    assert!(out.text.contains("connection"), "{}", out.text);
}

// ---------------------------------------------------------- domain lists

#[test]
fn allow_and_deny_lists_cover_subdomains_and_denial_wins() {
    let server = site();
    // (allowed_domains, denied_domains, host, expected)
    let cases: &[(&[&str], &[&str], &str, &str)] = &[
        (&[], &[], "allowed.test", "ok"),
        (&[], &[], "evil.test", "ok"),
        (&["allowed.test"], &[], "allowed.test", "ok"),
        (&["allowed.test"], &[], "sub.allowed.test", "ok"),
        (&["allowed.test"], &[], "deep.sub.allowed.test", "ok"),
        (&["allowed.test"], &[], "ALLOWED.test", "ok"),
        (&["allowed.test"], &[], "allowed.test.", "ok"),
        (&["allowed.test"], &[], "notallowed.test", "denied"),
        (&["allowed.test"], &[], "evil.test", "denied"),
        (&["allowed.test"], &[], "127.0.0.1", "denied"),
        (&["sub.allowed.test"], &[], "allowed.test", "denied"),
        (&["sub.allowed.test"], &[], "deep.sub.allowed.test", "ok"),
        (&["*.allowed.test"], &[], "sub.allowed.test", "ok"),
        (&["Allowed.Test."], &[], "sub.allowed.test", "ok"),
        (&[], &["evil.test"], "evil.test", "denied"),
        (&[], &["evil.test"], "sub.evil.test", "denied"),
        (&[], &["evil.test"], "allowed.test", "ok"),
        (&[], &["EVIL.TEST"], "evil.test.", "denied"),
        (
            &["allowed.test"],
            &["sub.allowed.test"],
            "sub.allowed.test",
            "denied",
        ),
        (
            &["allowed.test"],
            &["sub.allowed.test"],
            "deep.sub.allowed.test",
            "denied",
        ),
        (
            &["allowed.test"],
            &["sub.allowed.test"],
            "allowed.test",
            "ok",
        ),
        (
            &["allowed.test"],
            &["allowed.test"],
            "allowed.test",
            "denied",
        ),
        (&["127.0.0.1"], &[], "127.0.0.1", "ok"),
        (&[], &["127.0.0.1"], "127.0.0.1", "denied"),
    ];
    for (allowed, denied, host, want) in cases {
        let before = server.requests().len();
        let t = fetcher(net(allowed, denied, LOOPBACK));
        let out = fetch(&t, &server.url(host, "/"));
        assert_eq!(
            kind(&out),
            *want,
            "allowed={allowed:?} denied={denied:?} host={host}: {}",
            out.text
        );
        let after = server.requests().len();
        if *want == "ok" {
            assert_eq!(after, before + 1);
            let seen = server.requests().pop().unwrap();
            assert_eq!(
                seen.host(),
                format!("{}:{}", host.to_ascii_lowercase(), server.port),
                "the request names the host asked for"
            );
        } else {
            assert_eq!(after, before, "a denied host is never contacted ({host})");
            assert!(out.text.contains("network."), "{}", out.text);
        }
    }
}

#[test]
fn bad_list_entries_fail_the_build() {
    let err = net_builder(net(&["ok.test", "bad..entry"], &[], &[]))
        .build()
        .unwrap_err();
    assert!(err.message().contains("bad..entry"), "{err}");
    let err = net_builder(net(&[], &[], &["127.0.0.0/99"]))
        .build()
        .unwrap_err();
    assert!(err.message().contains("allowed_cidrs"), "{err}");
}

// -------------------------------------------------------------- redirects

#[test]
fn redirects_are_followed_and_checked_at_every_hop() {
    let server = site();
    let t = fetcher(net(&["allowed.test"], &["evil.test"], LOOPBACK));

    let out = fetch(&t, &server.url("allowed.test", "/relative"));
    expect_kind(&out, "ok");
    assert_eq!(
        out.structured["final_url"],
        server.url("allowed.test", "/landing")
    );
    assert_eq!(
        out.structured["redirects"],
        json!([server.url("allowed.test", "/relative")])
    );
    assert!(out.text.contains("redirected 1 time from"), "{}", out.text);

    let out = fetch(&t, &server.url("allowed.test", "/to-sub"));
    expect_kind(&out, "ok");
    assert!(
        server
            .hosts()
            .iter()
            .any(|h| h.starts_with("sub.allowed.test:"))
    );

    let out = fetch(&t, &server.url("allowed.test", "/to-evil"));
    expect_kind(&out, "denied");
    assert!(out.text.contains("evil.test"), "{}", out.text);
    assert!(
        !server.hosts().iter().any(|h| h.starts_with("evil.test")),
        "the denied hop was never requested: {:?}",
        server.hosts()
    );

    // Without the deny entry, evil.test is still outside the allow list.
    let t2 = fetcher(net(&["allowed.test"], &[], LOOPBACK));
    expect_kind(
        &fetch(&t2, &server.url("allowed.test", "/to-evil")),
        "denied",
    );

    for path in ["/to-file", "/to-userinfo", "/to-ftp"] {
        let out = fetch(&t, &server.url("allowed.test", path));
        expect_kind(&out, "network");
        assert!(out.text.contains("will not follow"), "{path}: {}", out.text);
    }
    assert!(!server.hosts().iter().any(|h| h.starts_with("evil.test")));
}

#[test]
fn redirects_to_refused_addresses_are_refused() {
    let server = site();
    // Only the server's own address is open.
    let t = fetcher(net(&[], &[], &["127.0.0.1/32"]));
    for path in ["/to-loop2", "/to-loop2-name"] {
        let before = server.requests().len();
        let out = fetch(&t, &server.url("allowed.test", path));
        expect_kind(&out, "network");
        assert!(out.text.contains("127.0.0.2"), "{}", out.text);
        assert!(out.text.contains("loopback"), "{}", out.text);
        assert_eq!(
            server.requests().len(),
            before + 1,
            "only the first hop went out"
        );
    }
    // The mapped form of a refused address is refused too.
    let t = fetcher(net(&[], &[], &["127.0.0.1/32"]));
    let out = fetch(&t, &server.url("allowed.test", "/to-mapped"));
    expect_kind(&out, "ok"); // ::ffff:127.0.0.1 is 127.0.0.1, which is open
    let t = fetcher(net(&[], &[], &["127.0.0.2/32"]));
    let out = fetch(&t, &server.url("mapped.test", "/"));
    expect_kind(&out, "network");
}

#[test]
fn at_most_five_redirects_are_followed() {
    let server = site();
    let t = fetcher(net(&[], &[], LOOPBACK));
    let out = fetch(&t, &server.url("allowed.test", "/chain/5"));
    expect_kind(&out, "ok");
    assert!(out.text.contains("end of chain"));
    assert_eq!(out.structured["redirects"].as_array().unwrap().len(), 5);
    let before = server.requests().len();
    let out = fetch(&t, &server.url("allowed.test", "/chain/6"));
    expect_kind(&out, "limit");
    assert!(out.text.contains("more than 5"), "{}", out.text);
    assert_eq!(server.requests().len(), before + 6, "no seventh request");
}

// ------------------------------------------------------- time and cancel

#[test]
fn a_slow_server_hits_the_time_limit() {
    let server = site();
    let mut limits = Limits::default();
    limits.web_fetch.timeout_ms = 500;
    let t = fetcher_with(net(&[], &[], LOOPBACK), limits);
    let started = Instant::now();
    let out = fetch(&t, &server.url("allowed.test", "/slow"));
    let took = started.elapsed();
    expect_kind(&out, "timeout");
    assert!(out.text.contains("0.5 s"), "{}", out.text);
    assert!(took >= Duration::from_millis(450), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    // The abandoned request's connection is closed.
    wait_for(|| server.aborted.load(Ordering::SeqCst) >= 1);
}

#[test]
fn cancellation_aborts_the_request() {
    let server = site();
    let t = fetcher(net(&[], &[], LOOPBACK));
    let token = CancelToken::new();
    let canceller = {
        let token = token.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            token.cancel();
        })
    };
    let started = Instant::now();
    let out = t.call_with(
        "web_fetch",
        json!({"url": server.url("allowed.test", "/slow")}),
        &CallOptions {
            cancel: Some(token),
            on_output: None,
        },
    );
    canceller.join().unwrap();
    assert!(out.is_error);
    assert!(out.text.contains("cancelled"), "{}", out.text);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // The server sees the connection go away: the request was aborted.
    wait_for(|| server.aborted.load(Ordering::SeqCst) >= 1);
}

fn wait_for(cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "condition not met within 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ------------------------------------------------------------- contents

#[test]
fn html_becomes_markdown() {
    let server = site();
    let t = fetcher(net(&[], &[], LOOPBACK));
    let out = fetch(&t, &server.url("allowed.test", "/html"));
    expect_kind(&out, "ok");
    let first = out.text.lines().next().unwrap();
    assert_eq!(
        first,
        format!(
            "200 OK {} (text/html, {} bytes)",
            server.url("allowed.test", "/html"),
            HTML_PAGE.len()
        )
    );
    let content = out.structured["content"].as_str().unwrap();
    assert!(content.contains("# Title"), "{content}");
    assert!(content.contains("**bold**"), "{content}");
    assert!(
        content.contains("[link](https://example.org/x)"),
        "{content}"
    );
    assert!(
        content.contains("one") && content.contains("two"),
        "{content}"
    );
    assert!(
        !content.contains("secret") && !content.contains("body{}"),
        "{content}"
    );
    assert_eq!(out.structured["binary"], false);
    assert_eq!(out.structured["truncated"], false);
    assert_eq!(out.structured["media_type"], "text/html");

    let out = fetch(&t, &server.url("allowed.test", "/notype"));
    expect_kind(&out, "ok");
    assert!(out.text.contains("## Sniffed"), "{}", out.text);
}

#[test]
fn other_text_passes_through() {
    let server = site();
    let t = fetcher(net(&[], &[], LOOPBACK));
    let out = fetch(&t, &server.url("allowed.test", "/json"));
    expect_kind(&out, "ok");
    assert_eq!(out.structured["content"], "{\"a\": [1, 2, 3]}\n");
    assert_eq!(out.structured["media_type"], "application/json");
    assert!(out.text.ends_with("{\"a\": [1, 2, 3]}\n"), "{}", out.text);

    let out = fetch(&t, &server.url("allowed.test", "/latin1"));
    expect_kind(&out, "ok");
    assert_eq!(out.structured["content"], "café\n");
}

#[test]
fn binary_content_is_metadata() {
    let server = site();
    let t = fetcher(net(&[], &[], LOOPBACK));
    let out = fetch(&t, &server.url("allowed.test", "/png"));
    expect_kind(&out, "ok");
    assert_eq!(out.structured["binary"], true);
    assert_eq!(out.structured["media_type"], "image/png");
    assert!(out.structured.get("content").is_none());
    assert_eq!(out.structured["bytes"], 80);
    assert!(
        out.text.contains("binary content (image/png), not shown"),
        "{}",
        out.text
    );
    assert!(!out.text.contains("IHDR"));

    // A declared text type with NUL bytes is binary all the same.
    let out = fetch(&t, &server.url("allowed.test", "/disguised"));
    assert_eq!(out.structured["binary"], true, "{}", out.text);
    assert_eq!(out.structured["media_type"], "image/gif");
}

#[test]
fn an_error_status_is_a_result_not_an_error() {
    let server = site();
    let t = fetcher(net(&[], &[], LOOPBACK));
    let out = fetch(&t, &server.url("allowed.test", "/missing"));
    expect_kind(&out, "ok");
    assert!(out.text.starts_with("404 Not Found "), "{}", out.text);
    assert_eq!(out.structured["status"], 404);
    assert!(out.text.contains("# Not here"));
}

#[test]
fn a_huge_body_is_cut_and_the_output_stays_bounded() {
    let server = site();
    let t = fetcher(net(&[], &[], LOOPBACK));
    let started = Instant::now();
    let out = fetch(&t, &server.url("allowed.test", "/huge"));
    expect_kind(&out, "ok");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(out.structured["body_complete"], false);
    assert_eq!(
        out.structured["bytes"],
        cubby::config::WEB_FETCH_MAX_BODY_BYTES as u64
    );
    assert_eq!(out.structured["truncated"], true);
    let chars = out.text.chars().count();
    assert!(
        chars <= cubby::config::WEB_FETCH_MAX_OUTPUT_CHARS,
        "{chars}"
    );
    assert!(chars > 9_000, "{chars}");
    assert!(
        out.text.contains("first 5,242,880 bytes of a longer body"),
        "{}",
        &out.text[..300]
    );
    assert!(
        out.text.contains("[content cut at "),
        "{}",
        &out.text[out.text.len() - 200..]
    );
    assert!(out.text.contains("lorem ipsum"));
    // cubby stopped reading: the server could not send the rest.
    wait_for(|| server.aborted.load(Ordering::SeqCst) >= 1);
}

#[test]
fn the_output_limit_is_configurable() {
    let server = site();
    let mut limits = Limits::default();
    limits.web_fetch.max_output_chars = 1_000;
    let t = fetcher_with(net(&[], &[], LOOPBACK), limits);
    let out = fetch(&t, &server.url("allowed.test", "/long"));
    expect_kind(&out, "ok");
    assert!(out.text.chars().count() <= 1_000, "{}", out.text.len());
    assert!(out.text.contains("of 30,000 chars"), "{}", out.text);
    assert_eq!(out.structured["total_chars"], 30_000);
    let shown = out.structured["content"].as_str().unwrap();
    assert!(shown.len() > 700 && "0123456789".repeat(3_000).starts_with(shown));

    // The default shows the 30,000 chars cut to 10,000.
    let t = fetcher(net(&[], &[], LOOPBACK));
    let out = fetch(&t, &server.url("allowed.test", "/long"));
    let n = out.text.chars().count();
    assert!((9_800..=10_000).contains(&n), "{n}");
}

// ------------------------------------------------------------ bad input

#[test]
fn malformed_urls_are_invalid_input_and_reach_nothing() {
    let server = site();
    let t = fetcher(net(&[], &[], LOOPBACK));
    let p = server.port;
    let long = format!("http://allowed.test:{p}/{}", "a".repeat(2_048));
    let bad = [
        String::new(),
        "allowed.test".into(),
        format!("allowed.test:{p}/"),
        format!("ftp://allowed.test:{p}/"),
        "file:///etc/passwd".into(),
        "javascript:alert(1)".into(),
        "data:text/html,<h1>x</h1>".into(),
        format!("http:/allowed.test:{p}/"),
        "http://".into(),
        format!("http://allowed test:{p}/"),
        format!("http://allowed.test:{p}/\u{0}"),
        format!("http://allowed.test\u{0}.evil.test:{p}/"),
        format!("http://user:pw@allowed.test:{p}/"),
        format!("http://allowed.test@evil.test:{p}/"),
        format!("http://evil.test\\@allowed.test:{p}/"),
        format!("http://allowed%2etest:{p}/"),
        format!("http://ａｌｌｏｗｅｄ.test:{p}/"),
        format!("http://allowed。test:{p}/"),
        format!("http://0x7f.0.0.1:{p}/"),
        format!("http://2130706433:{p}/"),
        format!("http://127.1:{p}/"),
        format!("http://[::1%25lo]:{p}/"),
        format!("http://allowed..test:{p}/"),
        "http://allowed.test:99999/".into(),
        "http://allowed.test:0/".into(),
        long,
    ];
    for url in &bad {
        let out = fetch(&t, url);
        expect_kind(&out, "invalid_input");
        assert!(out.text.len() < 1_000, "{}", out.text);
    }
    // Wrong shapes of the argument are invalid_input too.
    for args in [
        json!({}),
        json!({"url": 7}),
        json!({"url": "http://x.test/", "extra": 1}),
    ] {
        expect_kind(&t.call("web_fetch", args), "invalid_input");
    }
    assert!(server.requests().is_empty(), "{:?}", server.hosts());
}

// ---------------------------------------------------------------- search

/// Brave's documented answer shape, `web.results[]`.
fn brave_answer(results: &[(&str, &str, &str)]) -> Vec<u8> {
    let results: Vec<Value> = results
        .iter()
        .map(|(title, url, description)| {
            json!({
                "type": "search_result",
                "title": title,
                "url": url,
                "description": description,
                "is_source_local": false,
                "language": "en",
                "profile": {"name": "Site", "url": url},
            })
        })
        .collect();
    json!({
        "type": "search",
        "query": {"original": "q", "more_results_available": true},
        "mixed": {"type": "mixed", "main": []},
        "web": {"type": "search", "results": results, "family_friendly": true},
    })
    .to_string()
    .into_bytes()
}

/// SearXNG's `format=json` answer shape, `results[]`.
fn searxng_answer(results: &[(&str, &str, &str)]) -> Vec<u8> {
    let results: Vec<Value> = results
        .iter()
        .map(|(title, url, content)| {
            json!({
                "title": title,
                "url": url,
                "content": content,
                "engine": "duckduckgo",
                "engines": ["duckduckgo"],
                "score": 1.0,
                "category": "general",
            })
        })
        .collect();
    json!({
        "query": "q",
        "number_of_results": 0,
        "results": results,
        "answers": [],
        "corrections": [],
        "infoboxes": [],
        "suggestions": [],
        "unresponsive_engines": [],
    })
    .to_string()
    .into_bytes()
}

const EIGHT: [(&str, &str, &str); 8] = [
    (
        "Rust <b>Book</b>",
        "https://doc.rust-lang.org/book/",
        "The <strong>Rust</strong> Programming Language &amp; more",
    ),
    ("Evil", "https://evil.test/rust", "bad"),
    ("Docs", "https://docs.rs/serde", "Serde docs"),
    ("Sub evil", "https://sub.evil.test/x", "bad"),
    ("Blog", "https://blog.rust-lang.org/", "Rust blog"),
    (
        "Crates",
        "https://crates.io/crates/serde",
        "serde on crates.io",
    ),
    ("Users", "https://users.rust-lang.org/", "forum"),
    ("Reddit", "https://www.reddit.com/r/rust/", "subreddit"),
];

fn searcher(network: NetworkConfig, backend: Arc<dyn SearchBackend>) -> Toolset {
    net_builder(network)
        .search_backend(backend)
        .build()
        .unwrap()
}

fn search(t: &Toolset, query: &str) -> ToolOutput {
    t.call("web_search", json!({ "query": query }))
}

#[test]
fn brave_backend_reads_the_documented_format() {
    let server = Server::start(|req, _| {
        assert_eq!(req.path(), "/res/v1/web/search");
        if req.header("x-subscription-token") != Some("test-key") {
            return page(401, "application/json", "{\"type\":\"ErrorResponse\"}");
        }
        assert!(req.header("accept").unwrap().contains("application/json"));
        let q = req.query();
        assert_eq!(q["count"], "20");
        assert_eq!(q["q"], "rust serde & co");
        page(200, "application/json", brave_answer(&EIGHT))
    });
    let brave =
        BraveSearch::new(&server.url("127.0.0.1", "/res/v1/web/search"), "test-key").unwrap();
    // The backend's own endpoint is trusted config: no allowed_cidrs needed.
    let t = searcher(net(&[], &["evil.test"], &[]), Arc::new(brave));
    let out = search(&t, "rust serde & co");
    expect_kind(&out, "ok");
    let results = out.structured["results"].as_array().unwrap();
    assert_eq!(results.len(), 5, "{}", out.text);
    assert_eq!(out.structured["filtered"], 2);
    assert_eq!(out.structured["truncated"], true);
    assert_eq!(out.structured["backend"], "brave");
    let urls: Vec<&str> = results.iter().map(|r| r["url"].as_str().unwrap()).collect();
    assert_eq!(
        urls,
        [
            "https://doc.rust-lang.org/book/",
            "https://docs.rs/serde",
            "https://blog.rust-lang.org/",
            "https://crates.io/crates/serde",
            "https://users.rust-lang.org/",
        ]
    );
    assert_eq!(results[0]["title"], "Rust **Book**");
    assert_eq!(
        results[0]["snippet"],
        "The **Rust** Programming Language & more"
    );
    assert!(
        out.text.starts_with(
            "5 results from brave for \"rust serde & co\" (2 removed by the domain lists)\n\n\
             1. Rust **Book**\n   https://doc.rust-lang.org/book/\n   The **Rust**"
        ),
        "{}",
        out.text
    );
    assert!(!out.text.contains("evil.test"));

    // A wrong key: the backend's refusal, not a crash.
    let wrong = BraveSearch::new(&server.url("127.0.0.1", "/res/v1/web/search"), "nope").unwrap();
    let t = searcher(net(&[], &[], &[]), Arc::new(wrong));
    let out = search(&t, "rust");
    expect_kind(&out, "denied");
    assert!(out.text.contains("401"), "{}", out.text);
}

#[test]
fn searxng_backend_reads_the_documented_format() {
    let server = Server::start(|req, _| {
        assert_eq!(req.path(), "/searx/search");
        let q = req.query();
        assert_eq!(q["format"], "json");
        assert_eq!(q["q"], "tokio runtime");
        page(200, "application/json", searxng_answer(&EIGHT))
    });
    let searx = SearxngSearch::new(&server.url("127.0.0.1", "/searx")).unwrap();
    // Only rust-lang.org and its subdomains are allowed.
    let t = searcher(net(&["rust-lang.org"], &[], &[]), Arc::new(searx));
    let out = search(&t, "tokio runtime");
    expect_kind(&out, "ok");
    let results = out.structured["results"].as_array().unwrap();
    let urls: Vec<&str> = results.iter().map(|r| r["url"].as_str().unwrap()).collect();
    assert_eq!(
        urls,
        [
            "https://doc.rust-lang.org/book/",
            "https://blog.rust-lang.org/",
            "https://users.rust-lang.org/",
        ]
    );
    assert_eq!(out.structured["filtered"], 5);
    assert_eq!(out.structured["truncated"], false);
    assert_eq!(out.structured["backend"], "searxng");
    assert!(
        out.text.starts_with("3 results from searxng"),
        "{}",
        out.text
    );
}

#[test]
fn search_results_are_cut_to_the_limits() {
    let big = "lorem ipsum ".repeat(2_000);
    let server = Server::start(move |_, _| {
        let many: Vec<(String, String, String)> = (0..15)
            .map(|i| {
                (
                    format!("Title {i} {big}"),
                    format!("https://site{i}.test/page"),
                    big.clone(),
                )
            })
            .collect();
        let refs: Vec<(&str, &str, &str)> = many
            .iter()
            .map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str()))
            .collect();
        page(200, "application/json", searxng_answer(&refs))
    });
    let searx = SearxngSearch::new(&server.url("127.0.0.1", "")).unwrap();
    let t = searcher(NetworkConfig::default(), Arc::new(searx));
    let out = search(&t, "anything");
    expect_kind(&out, "ok");
    let results = out.structured["results"].as_array().unwrap();
    assert_eq!(results.len(), 5);
    assert!(
        out.text.chars().count() <= 10_000,
        "{}",
        out.text.chars().count()
    );
    for r in results {
        let chars: usize = ["title", "url", "snippet"]
            .iter()
            .map(|k| r[k].as_str().unwrap().chars().count())
            .sum();
        assert!(chars <= 2_000, "{chars}");
        assert!(r["snippet"].as_str().unwrap().ends_with('…'));
    }
    assert!(out.text.matches("\n\n").count() >= 5);

    // A smaller configured limit holds as well.
    let mut limits = Limits::default();
    limits.web_search.max_results = 2;
    limits.web_search.max_output_chars = 1_500;
    let searx = SearxngSearch::new(&server.url("127.0.0.1", "")).unwrap();
    let t = net_builder_with(NetworkConfig::default(), limits)
        .search_backend(Arc::new(searx))
        .build()
        .unwrap();
    let out = search(&t, "anything");
    expect_kind(&out, "ok");
    assert!(out.text.chars().count() <= 1_500);
    assert!(out.structured["results"].as_array().unwrap().len() <= 2);
}

#[test]
fn search_backend_failures_are_clear_errors() {
    let server = Server::start(|req, _| match req.query()["q"].as_str() {
        "limited" => page(429, "application/json", "{\"error\":\"rate\"}"),
        "broken" => page(500, "text/plain", "boom"),
        "garbage" => page(200, "application/json", "{not json"),
        "slow" => Reply::Hang,
        _ => page(200, "application/json", searxng_answer(&[])),
    });
    let mut limits = Limits::default();
    limits.web_search.timeout_ms = 500;
    let searx = SearxngSearch::new(&server.url("127.0.0.1", "")).unwrap();
    let t = net_builder_with(NetworkConfig::default(), limits)
        .search_backend(Arc::new(searx))
        .build()
        .unwrap();
    expect_kind(&search(&t, "limited"), "limit");
    let out = search(&t, "broken");
    expect_kind(&out, "network");
    assert!(out.text.contains("500"), "{}", out.text);
    expect_kind(&search(&t, "garbage"), "network");
    let started = Instant::now();
    expect_kind(&search(&t, "slow"), "timeout");
    assert!(started.elapsed() < Duration::from_secs(5));
    let out = search(&t, "nothing");
    expect_kind(&out, "ok");
    assert!(
        out.text.starts_with("no results from searxng"),
        "{}",
        out.text
    );
}

#[test]
fn search_input_and_configuration_are_checked() {
    let t = net_builder(NetworkConfig::default()).build().unwrap();
    let out = search(&t, "x");
    expect_kind(&out, "unsupported");
    assert!(out.text.contains("backend"), "{}", out.text);

    let searx = SearxngSearch::new("http://127.0.0.1:9").unwrap();
    let t = searcher(NetworkConfig::default(), Arc::new(searx));
    expect_kind(&search(&t, "   "), "invalid_input");
    let out = search(&t, &"q".repeat(2_001));
    expect_kind(&out, "invalid_input");
    assert!(out.text.contains("2,000"), "{}", out.text);
    expect_kind(
        &t.call("web_search", json!({"query": "x", "count": 3})),
        "invalid_input",
    );
}

#[test]
fn a_configured_brave_key_comes_from_the_environment_and_is_redacted() {
    // Cargo sets CARGO_MANIFEST_DIR for test processes: a real environment
    // variable this test can name without changing the environment.
    let key = env!("CARGO_MANIFEST_DIR");
    let server = Server::start(move |req, _| {
        let token = req.header("x-subscription-token").unwrap_or("").to_string();
        assert_eq!(token, key);
        // A backend that echoes the key: it must not reach the model.
        let title = format!("token was {token}");
        page(
            200,
            "application/json",
            brave_answer(&[(title.as_str(), "https://ok.test/", "fine")]),
        )
    });
    let t = net_builder(NetworkConfig::default())
        .host_env(cubby::HostEnv::capture())
        .web_search(WebSearchConfig {
            backend: Some(SearchBackendKind::Brave),
            url: Some(server.url("127.0.0.1", "/res/v1/web/search")),
            api_key_env: Some("CARGO_MANIFEST_DIR".into()),
        })
        .build()
        .unwrap();
    let out = search(&t, "whatever");
    expect_kind(&out, "ok");
    assert!(
        out.text.contains("token was [REDACTED:CARGO_MANIFEST_DIR]"),
        "{}",
        out.text
    );
    assert!(!out.text.contains(key));
    assert!(!out.structured.to_string().contains(key));
    assert_eq!(server.requests().len(), 1);

    // Named but unset: web_search says which variable is missing.
    let t = net_builder(NetworkConfig::default())
        .web_search(WebSearchConfig {
            backend: Some(SearchBackendKind::Brave),
            url: None,
            api_key_env: Some("CUBBY_TEST_SURELY_UNSET_KEY".into()),
        })
        .build()
        .unwrap();
    let out = search(&t, "x");
    expect_kind(&out, "unsupported");
    assert!(
        out.text.contains("CUBBY_TEST_SURELY_UNSET_KEY"),
        "{}",
        out.text
    );
}

#[test]
fn web_config_sections_parse_and_are_validated() {
    let config = cubby::Config::from_toml(
        r#"
allow = ["web_fetch", "web_search"]

[network]
allowed_domains = ["docs.rs", "*.rust-lang.org"]
denied_domains = ["evil.test"]
allowed_cidrs = ["10.0.0.0/8", "fd00::/8"]

[limits.web_fetch]
timeout_ms = 5000
max_output_chars = 4000
max_body_bytes = 1048576

[limits.web_search]
max_results = 3

[web_search]
backend = "searxng"
url = "http://127.0.0.1:8888"
"#,
        "cubby.toml",
    )
    .unwrap();
    assert_eq!(config.limits.web_fetch.timeout_ms, 5_000);
    assert_eq!(config.limits.web_search.max_results, 3);
    assert_eq!(config.limits.web_search.max_result_chars, 2_000);
    assert_eq!(config.web_search.backend, Some(SearchBackendKind::Searxng));

    for (text, needle) in [
        ("[network]\ndenied_domains = [\"a..b\"]", "a..b"),
        ("[network]\nallowed_cidrs = [\"nope\"]", "nope"),
        ("[web_search]\nbackend = \"searxng\"", "url"),
        ("[web_search]\nbackend = \"bing\"", "bing"),
        ("[limits.web_fetch]\nmax_output_chars = 10", "1000"),
        ("[limits.web_fetch]\ntimeout = 5", "timeout"),
    ] {
        let err = cubby::Config::from_toml(text, "cubby.toml").unwrap_err();
        assert!(err.message().contains(needle), "{text}: {err}");
    }
}

/// Redaction comes before the 10,000-char cut (SPEC §2): a page made of a
/// secret repeated, shifted by half a secret between two pages, so that one
/// of the two cuts falls at least 16 characters into a value.
#[test]
fn the_output_cut_never_shows_part_of_a_secret() {
    const SECRET: &str = "sk-live-0123456789abcdefghijklmn";
    let server = Server::start(|req, _| {
        let shift = if req.path() == "/shifted" { 16 } else { 0 };
        let body = format!("{}{}", "x".repeat(shift), SECRET.repeat(1_000));
        page(200, "text/plain", body)
    });
    let redacting = net_builder(net(&[], &[], LOOPBACK))
        .resolver(pinned())
        .secret("API_KEY", SECRET)
        .build()
        .unwrap();
    let plain = fetcher(net(&[], &[], LOOPBACK));
    let mut longest_part_shown = 0;
    for path in ["/aligned", "/shifted"] {
        let url = server.url("allowed.test", path);
        // Control: without the secret registered, the cut ends in part of one.
        let out = fetch(&plain, &url);
        expect_kind(&out, "ok");
        let content = out.structured["content"].as_str().unwrap();
        let part = (1..SECRET.len())
            .rev()
            .find(|n| content.ends_with(&SECRET[..*n]))
            .unwrap_or(0);
        longest_part_shown = longest_part_shown.max(part);
        let out = fetch(&redacting, &url);
        expect_kind(&out, "ok");
        assert_eq!(out.structured["truncated"], true);
        let both = format!("{}\n{}", out.text, out.structured);
        for i in 0..=SECRET.len() - 6 {
            assert!(!both.contains(&SECRET[i..i + 6]), "{path}: {both}");
        }
        assert!(out.text.contains("[REDACTED:API_KEY]"));
    }
    assert!(longest_part_shown >= 16, "{longest_part_shown}");
}
