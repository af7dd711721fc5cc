//! Command egress with network mode `allow` (`linux` provider): from inside
//! the sandbox, `curl` reaches allowed hosts only through cubby's egress
//! proxy, and an injected secret's real value goes only to its bound host.
//!
//! Everything is local: an HTTP echo server this file starts on the host
//! (all interfaces, so that the raw-IP attack has a real target), an HTTPS
//! server (python3's `ssl`, certificate from `openssl`), and names
//! (`www.allowed.test`, …) pinned to 127.0.0.1 by a resolver hook, reachable
//! only because `allowed_cidrs` lists exactly 127.0.0.1.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use common::Pinned;
use cubby::config::{InjectConfig, NetworkConfig};
use cubby::{HostEnv, LinuxSandbox, NetworkMode, Policy, Toolset};
use serde_json::json;

/// The injected secret's real value: it must reach only `api.allowed.test`.
const REAL_TOKEN: &str = "real-token-6b1d0c9e54";

// ------------------------------------------------------------ echo server

/// A request the echo server received.
#[derive(Clone, Debug)]
struct Seen {
    path: String,
    host: String,
    authorization: String,
}

/// Answers every request with `host=… path=… auth=…` and records it.
struct Echo {
    port: u16,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<Seen>>>,
    accept: Option<JoinHandle<()>>,
}

impl Echo {
    fn start() -> Echo {
        let listener = TcpListener::bind("0.0.0.0:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let accept = {
            let (stop, seen) = (stop.clone(), seen.clone());
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let seen = seen.clone();
                    std::thread::spawn(move || echo(conn, &seen));
                }
            })
        };
        Echo {
            port,
            stop,
            seen,
            accept: Some(accept),
        }
    }

    fn seen(&self, path: &str) -> Option<Seen> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .find(|s| s.path == path)
            .cloned()
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

fn echo(mut conn: TcpStream, seen: &Mutex<Vec<Seen>>) {
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match conn.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let path = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .unwrap_or("")
        .to_string();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let got = Seen {
        path,
        host: headers.get("host").cloned().unwrap_or_default(),
        authorization: headers.get("authorization").cloned().unwrap_or_default(),
    };
    let body = format!(
        "host={} path={} auth={}\n",
        got.host, got.path, got.authorization
    );
    seen.lock().unwrap().push(got);
    let _ = write!(
        conn,
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
}

// ------------------------------------------------------------ the sandbox

fn resolver() -> Arc<Pinned> {
    let lo: IpAddr = "127.0.0.1".parse().unwrap();
    let mut names = HashMap::new();
    for name in [
        "www.allowed.test",
        "api.allowed.test",
        "secure.allowed.test",
        "blocked.allowed.test",
        "evil.test",
    ] {
        names.insert(name, vec![lo]);
    }
    // Allowed by name, refused by address (127.0.0.2 is not listed).
    names.insert("loop2.allowed.test", vec!["127.0.0.2".parse().unwrap()]);
    names.insert("private.allowed.test", vec!["10.1.2.3".parse().unwrap()]);
    Arc::new(Pinned::new(names))
}

fn toolset(dir: &Path) -> Toolset {
    let rules = NetworkConfig {
        mode: NetworkMode::Allow,
        allowed_domains: vec!["allowed.test".into()],
        denied_domains: vec!["blocked.allowed.test".into()],
        allowed_cidrs: vec!["127.0.0.1/32".into()],
        inject: vec![InjectConfig {
            secret: "API_TOKEN".into(),
            hosts: vec!["api.allowed.test".into()],
            headers: vec!["authorization".into()],
        }],
    };
    let policy = Policy::builder().network(rules).build().unwrap();
    // The injected secret's value comes from cubby's environment.
    let host = HostEnv::capture().with("API_TOKEN", REAL_TOKEN);
    let sandbox = LinuxSandbox::open(dir, &policy, &host)
        .unwrap()
        .with_resolver(resolver());
    Toolset::builder(Arc::new(sandbox))
        .policy(policy)
        .host_env(host)
        .secret("API_TOKEN", REAL_TOKEN)
        .build()
        .unwrap()
}

/// Runs `command` with `run`; returns the model-facing text.
fn run(t: &Toolset, command: &str) -> String {
    let out = t.call("run", json!({"command": command, "timeout_ms": 60_000}));
    assert!(
        !out.text.contains(REAL_TOKEN),
        "the real secret leaked into tool output:\n{}",
        out.text
    );
    if std::env::var_os("EGRESS_DEBUG").is_some() {
        eprintln!("$ {command}\n{}\n", out.text);
    }
    out.text
}

/// This machine's address on its default route (not loopback).
fn host_address() -> IpAddr {
    let probe = UdpSocket::bind("0.0.0.0:0").unwrap();
    probe.connect("192.0.2.1:9").unwrap();
    let ip = probe.local_addr().unwrap().ip();
    assert!(!ip.is_loopback(), "no non-loopback address to test with");
    ip
}

// ------------------------------------------------------------ the tests

#[test]
fn allowed_hosts_are_reached_through_the_proxy_and_nothing_else_is() {
    let echo = Echo::start();
    let dir = tempfile::tempdir().unwrap();
    let t = toolset(dir.path());
    let port = echo.port;

    // Allowed, plain HTTP through the proxy.
    let text = run(
        &t,
        &format!("curl -sS -f http://www.allowed.test:{port}/plain"),
    );
    assert!(
        text.contains(&format!("host=www.allowed.test:{port} path=/plain")),
        "{text}"
    );
    // Allowed, tunnelled with CONNECT (as for https).
    let text = run(
        &t,
        &format!("curl -sS -f --proxytunnel http://www.allowed.test:{port}/tunnel"),
    );
    assert!(text.contains("path=/tunnel"), "{text}");
    assert!(echo.seen("/plain").is_some() && echo.seen("/tunnel").is_some());

    // Denied by name: the denied subdomain, and a host outside the list,
    // plain and tunnelled. The proxy answers 403 and says why.
    for (url_host, path, tunnel) in [
        ("blocked.allowed.test", "/denied-sub", false),
        ("evil.test", "/denied-other", false),
        ("evil.test", "/denied-tunnel", true),
    ] {
        let flag = if tunnel { "--proxytunnel" } else { "" };
        let text = run(
            &t,
            &format!("curl -sS -f {flag} http://{url_host}:{port}{path}; echo rc=$?"),
        );
        assert!(!text.contains("rc=0"), "{url_host}: {text}");
        assert!(text.contains("403"), "{url_host}: {text}");
        assert!(echo.seen(path).is_none(), "{url_host} was reached");
    }
    // The proxy's reason reaches the command.
    let text = run(&t, &format!("curl -sS http://evil.test:{port}/reason"));
    assert!(text.contains("network.allowed_domains"), "{text}");

    // Allowed by name, refused by address: loopback other than the listed
    // 127.0.0.1, and a private range.
    for name in ["loop2.allowed.test", "private.allowed.test"] {
        let text = run(
            &t,
            &format!("curl -sS -f http://{name}:{port}/addr; echo rc=$?"),
        );
        assert!(
            !text.contains("rc=0") && text.contains("403"),
            "{name}: {text}"
        );
    }

    // By raw IP: through the proxy (an address is not an allowed domain),
    // and around it (no route out of the sandbox's network namespace).
    let ip = host_address();
    assert!(
        TcpStream::connect((ip, port)).is_ok(),
        "control: the echo server answers on {ip} from the host"
    );
    let text = run(
        &t,
        &format!("curl -sS -f http://{ip}:{port}/raw-proxied; echo rc=$?"),
    );
    assert!(!text.contains("rc=0") && text.contains("403"), "{text}");
    let text = run(
        &t,
        &format!(
            "curl -sS -f --max-time 5 --noproxy '*' http://{ip}:{port}/raw-direct; echo rc=$?"
        ),
    );
    assert!(!text.contains("rc=0"), "{text}");

    // Without the proxy variables: no name resolution, no route.
    let text = run(
        &t,
        &format!(
            "env -u HTTP_PROXY -u http_proxy -u HTTPS_PROXY -u https_proxy \
             curl -sS -f --max-time 5 http://www.allowed.test:{port}/unset; echo rc=$?"
        ),
    );
    assert!(!text.contains("rc=0"), "{text}");
    // Nor with a raw socket to the host's address, UDP or TCP.
    let text = run(
        &t,
        &format!(
            "python3 -c \"import socket; s=socket.create_connection(('{ip}', {port}), 5)\"; \
             echo rc=$?"
        ),
    );
    assert!(!text.contains("rc=0"), "{text}");
    // Sockets of other families stay refused (seccomp): packet, netlink.
    for family in ["AF_PACKET, socket.SOCK_RAW", "AF_NETLINK, socket.SOCK_RAW"] {
        let text = run(
            &t,
            &format!("python3 -c \"import socket; socket.socket(socket.{family})\"; echo rc=$?"),
        );
        assert!(
            !text.contains("rc=0") && text.contains("Operation not permitted"),
            "{family}: {text}"
        );
    }
    for path in ["/raw-proxied", "/raw-direct", "/unset"] {
        assert!(echo.seen(path).is_none(), "{path} reached the server");
    }
}

#[test]
fn an_injected_secret_goes_only_to_its_bound_host() {
    let echo = Echo::start();
    let dir = tempfile::tempdir().unwrap();
    let t = toolset(dir.path());
    let port = echo.port;

    // The command sees a placeholder, never the value.
    let text = run(&t, "printf 'env=%s\\n' \"$API_TOKEN\"");
    let placeholder = text
        .lines()
        .find_map(|l| l.strip_prefix("env="))
        .unwrap()
        .trim()
        .to_string();
    assert!(
        placeholder.starts_with("cubby-placeholder-API_TOKEN-"),
        "{text}"
    );

    let header = "-H \"Authorization: Bearer $API_TOKEN\"";
    let text = run(
        &t,
        &format!(
            "curl -sS -f {header} http://api.allowed.test:{port}/bound; \
             curl -sS -f {header} http://www.allowed.test:{port}/unbound; \
             curl -sS -f --proxytunnel {header} http://api.allowed.test:{port}/tunnelled"
        ),
    );
    // The bound host got the real value; it echoed it, and the proxy
    // swapped it back: the command got the placeholder (and `run` checked
    // the tool's output holds no trace of the value).
    assert_eq!(
        echo.seen("/bound").unwrap().authorization,
        format!("Bearer {REAL_TOKEN}")
    );
    assert!(
        text.contains(&format!("path=/bound auth=Bearer {placeholder}")),
        "{text}"
    );
    // Another allowed host, and a tunnel (opaque), got the placeholder.
    assert_eq!(
        echo.seen("/unbound").unwrap().authorization,
        format!("Bearer {placeholder}")
    );
    assert_eq!(
        echo.seen("/tunnelled").unwrap().authorization,
        format!("Bearer {placeholder}")
    );
    // Only the configured header is swapped.
    run(
        &t,
        &format!(
            "curl -sS -f -H \"X-Api-Key: $API_TOKEN\" http://api.allowed.test:{port}/other-header"
        ),
    );
    assert!(echo.seen("/other-header").is_some());
}

/// An HTTPS server on 127.0.0.1 for `secure.allowed.test`, with a
/// certificate made here; killed on drop.
struct Tls {
    child: Child,
    port: u16,
}

impl Drop for Tls {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tls_server(dir: &Path) -> Tls {
    let status = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=secure.allowed.test",
            "-addext",
            "subjectAltName=DNS:secure.allowed.test",
            "-keyout",
        ])
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.pem"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl is needed for the HTTPS test");
    assert!(status.success());
    let script = r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("secure hello path=%s\n" % self.path).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
server = http.server.HTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
server.socket = ctx.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(dir.join("cert.pem"))
        .arg(dir.join("key.pem"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line.trim().parse().unwrap();
    Tls { child, port }
}

#[test]
fn https_goes_end_to_end_through_the_tunnel() {
    let dir = tempfile::tempdir().unwrap();
    let tls = tls_server(dir.path());
    let t = toolset(dir.path());
    let port = tls.port;
    let text = run(
        &t,
        &format!("curl -sS -f --cacert cert.pem https://secure.allowed.test:{port}/tls"),
    );
    assert!(text.contains("secure hello path=/tls"), "{text}");
    // The certificate's name is checked against the name asked for: the
    // proxy does not terminate TLS.
    let text = run(
        &t,
        &format!("curl -sS -f --cacert cert.pem https://www.allowed.test:{port}/tls; echo rc=$?"),
    );
    assert!(!text.contains("rc=0"), "{text}");
    // And a denied name is refused before any TLS.
    let text = run(
        &t,
        &format!("curl -sS -f --cacert cert.pem https://evil.test:{port}/tls; echo rc=$?"),
    );
    assert!(!text.contains("rc=0") && text.contains("403"), "{text}");
}

#[test]
fn a_broken_client_gets_an_answer_and_the_proxy_keeps_serving() {
    let echo = Echo::start();
    let dir = tempfile::tempdir().unwrap();
    let t = toolset(dir.path());
    let port = echo.port;
    // Requests sent to the proxy itself, garbage, a CONNECT without a port,
    // a userinfo trick and an https URL in absolute form.
    let script = r#"
import os, socket, sys
port = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
def ask(data):
    s = socket.create_connection(("127.0.0.1", port), 5)
    s.sendall(data)
    s.settimeout(5)
    out = b""
    try:
        while True:
            b = s.recv(4096)
            if not b: break
            out += b
    except Exception:
        pass
    s.close()
    return out.split(b"\r\n", 1)[0].decode(errors="replace")
print("origin:", ask(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n"))
print("garbage:", ask(b"\x00\xff garbage\r\n\r\n"))
print("noport:", ask(b"CONNECT www.allowed.test HTTP/1.1\r\nHost: www.allowed.test\r\n\r\n"))
print("userinfo:", ask(b"GET http://evil.test@www.allowed.test:1/ HTTP/1.1\r\nHost: x\r\n\r\n"))
print("https:", ask(b"GET https://www.allowed.test/ HTTP/1.1\r\nHost: x\r\n\r\n"))
"#;
    std::fs::write(dir.path().join("broken.py"), script).unwrap();
    let text = run(&t, "python3 broken.py");
    for (case, status) in [
        ("origin", "400"),
        ("garbage", "400"),
        ("noport", "400"),
        ("userinfo", "400"),
        ("https", "400"),
    ] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{case}:")))
            .unwrap_or_else(|| panic!("{case} missing: {text}"));
        assert!(line.contains(status), "{case}: {line}\n{text}");
    }
    let text = run(
        &t,
        &format!("curl -sS -f http://www.allowed.test:{port}/after"),
    );
    assert!(text.contains("path=/after"), "{text}");
}
