//! Attacks on network. The network with `network = off`; and with network
//! `allow`, an injected secret reflected by the host it is bound to.
//!
//! [`ATTACKS`] is this section's table of the escape suite: commands on the
//! `linux` provider, a row per attack (what it tries, what the host must show
//! afterwards, the control it makes, if any), run by `escape_suite_as_*` in
//! `main.rs`.

use crate::Attack;
use crate::common::Pinned;
use crate::lab::*;
use cubby::config::{InjectConfig, NetworkConfig};
use cubby::{HostEnv, LinuxSandbox, NetworkMode, Policy, Toolset};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The escape suite's attacks on network.
pub const ATTACKS: &[Attack] = &[
    Attack {
        name: "TCP to a host loopback server",
        expect: "no connection accepted",
        control: None,
        run: tcp_to_host_loopback,
    },
    Attack {
        name: "UDP to a host loopback socket",
        expect: "no datagram received",
        control: None,
        run: udp_to_host_loopback,
    },
    Attack {
        name: "DNS lookup",
        expect: "no name resolved",
        control: None,
        run: dns_lookup,
    },
    Attack {
        name: "raw, packet, IPv6 and netlink sockets",
        expect: "no socket opened",
        control: None,
        run: raw_and_packet_sockets,
    },
    Attack {
        name: "connect to a host abstract unix socket",
        expect: "no connection accepted",
        control: None,
        run: abstract_unix_socket_of_host,
    },
    Attack {
        name: "an injected secret reflected by its bound host (headers, body, chunks, gzip, stored)",
        expect: "the command gets the placeholder back, never the real value",
        control: Some("the host reflects the real value to a request made outside the sandbox"),
        run: injected_secret_reflected,
    },
];

fn tcp_to_host_loopback(l: &Lab) -> Verdict {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    l.sh(&format!(
        "echo hi > /dev/tcp/127.0.0.1/{port}; {}",
        py(&format!(
            "import socket; socket.create_connection((\"127.0.0.1\", {port}), 2)"
        ))
    ));
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
        other => Err(format!("the host listener saw {other:?}")),
    }
}

fn udp_to_host_loopback(l: &Lab) -> Verdict {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_nonblocking(true).unwrap();
    let port = sock.local_addr().unwrap().port();
    l.sh(&format!(
        "echo hi > /dev/udp/127.0.0.1/{port}; {}",
        py(&format!(
            "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b\"x\", (\"127.0.0.1\", {port}))"
        ))
    ));
    std::thread::sleep(Duration::from_millis(100));
    let mut buf = [0u8; 16];
    match sock.recv_from(&mut buf) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
        other => Err(format!("the host socket received {other:?}")),
    }
}

fn dns_lookup(l: &Lab) -> Verdict {
    let out = l.sh(&format!(
        "getent hosts localhost.localdomain.invalid example.com; {}; echo rc=$?",
        py("import socket; print(\"RESOLVED\", socket.getaddrinfo(\"example.com\", 80))")
    ));
    not_in(&out, "RESOLVED")
}

fn raw_and_packet_sockets(l: &Lab) -> Verdict {
    let out = l.sh(&py(
        "import socket\nfor f, t in ((socket.AF_INET, socket.SOCK_RAW), (socket.AF_PACKET, socket.SOCK_RAW), (socket.AF_INET6, socket.SOCK_DGRAM), (socket.AF_NETLINK, socket.SOCK_RAW)):\n  try:\n    socket.socket(f, t, 1 if t == socket.SOCK_RAW and f == socket.AF_INET else 0); print(\"OPENED\", f)\n  except OSError as e: print(\"refused\", f, e.errno)",
    ));
    not_in(&out, "OPENED")
}

fn abstract_unix_socket_of_host(l: &Lab) -> Verdict {
    use std::os::linux::net::SocketAddrExt;
    let name = marker("abstract");
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    listener.set_nonblocking(true).unwrap();
    l.sh(&py(&format!(
        "import socket; s=socket.socket(socket.AF_UNIX); s.connect(\"\\0{name}\")"
    )));
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
        other => Err(format!("the host socket accepted {other:?}")),
    }
}

/// The real value of the secret injected for `bound.test`.
const REFLECTED_TOKEN: &str = "ghp_real4c0ffee9b1d2e3f";

/// A host on loopback that reflects what it is sent: by path, the
/// `Authorization` it got in a header and the body (`/headers`), in a body
/// of one-byte chunks (`/chunked`), gzipped whatever was asked (`/gzip`),
/// or the last one it got, to a request without one (`/stored`).
struct Reflector {
    port: u16,
    stop: Arc<AtomicBool>,
    /// The path of each request and the body it answered (before framing
    /// and compression).
    answers: Arc<Mutex<Vec<(String, String)>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Reflector {
    fn start() -> Reflector {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let answers = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (stop, answers) = (stop.clone(), answers.clone());
            std::thread::spawn(move || {
                let mut last = String::new();
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(mut conn) = conn else { continue };
                    let (path, body, answer) = reflect(&mut conn, &mut last);
                    let _ = conn.write_all(&answer);
                    answers.lock().unwrap().push((path, body));
                }
            })
        };
        Reflector {
            port,
            stop,
            answers,
            thread: Some(thread),
        }
    }
}

impl Drop for Reflector {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads a request; returns its path, the body answered and the answer.
fn reflect(conn: &mut std::net::TcpStream, last: &mut String) -> (String, String, Vec<u8>) {
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match conn.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let path = head.split(' ').nth(1).unwrap_or("").to_string();
    let auth = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("authorization")
            .then(|| value.trim().to_string())
    });
    if let Some(a) = &auth {
        *last = a.clone();
    }
    let auth = auth.unwrap_or_else(|| last.clone());
    let body = format!("you sent:\n{head}auth={auth}\n");
    let framed = |extra: &str, body: &[u8]| {
        let mut out = format!(
            "HTTP/1.1 200 OK\r\nX-Echo-Auth: {auth}\r\n{extra}Content-Length: {}\r\n\
             Connection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(body);
        out
    };
    let answer = match path.as_str() {
        "/chunked" => {
            let mut out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\
                            Connection: close\r\n\r\n"
                .to_vec();
            for b in body.bytes() {
                out.extend_from_slice(format!("1\r\n{}\r\n", b as char).as_bytes());
            }
            out.extend_from_slice(b"0\r\n\r\n");
            out
        }
        "/gzip" => framed("Content-Encoding: gzip\r\n", &gzip_stored(body.as_bytes())),
        _ => framed("", body.as_bytes()),
    };
    (path, body, answer)
}

/// `data` as a gzip member of one stored (uncompressed) deflate block.
fn gzip_stored(data: &[u8]) -> Vec<u8> {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                0xedb8_8320 ^ (crc >> 1)
            } else {
                crc >> 1
            };
        }
    }
    let len = data.len() as u16;
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, 1];
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&(!len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&(!crc).to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out
}

fn reversed(s: &str) -> String {
    s.chars().rev().collect()
}

/// N3 (red-team pass 2): the egress proxy put the real value of a
/// `[[network.inject]]` secret into requests to its bound host but relayed
/// the host's answers as they were, so a host that reflects headers handed
/// the value to the command (which `rev` then got past redaction). What the
/// command receives — saved in the workspace and read from the host — must
/// hold the placeholder, never the value.
fn injected_secret_reflected(_: &Lab) -> Verdict {
    let host = Reflector::start();
    let port = host.port;
    // Control: asked directly (outside the sandbox) with the real value,
    // the host reflects it, in a header and in the body, plain and gzipped.
    for path in ["/headers", "/gzip"] {
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(
            c,
            "GET {path} HTTP/1.1\r\nHost: bound.test\r\n\
             Authorization: Bearer {REFLECTED_TOKEN}\r\n\r\n"
        )
        .unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        let shows = |b: &[u8]| memchr::memmem::find(b, REFLECTED_TOKEN.as_bytes()).is_some();
        if !shows(&got) {
            return Err(format!("control: {path} did not reflect the value"));
        }
    }
    host.answers.lock().unwrap().clear();

    let (base, ws, outside) = lab_dirs();
    let rules = NetworkConfig {
        mode: NetworkMode::Allow,
        allowed_domains: vec!["bound.test".into()],
        allowed_cidrs: vec!["127.0.0.1/32".into()],
        inject: vec![InjectConfig {
            secret: "CUBBY_ATTACK_TOKEN".into(),
            hosts: vec!["bound.test".into()],
            headers: vec!["authorization".into()],
        }],
        ..NetworkConfig::default()
    };
    let policy = Policy::builder().network(rules).build().unwrap();
    let env = HostEnv::capture().with("CUBBY_ATTACK_TOKEN", REFLECTED_TOKEN);
    let names = [("bound.test", vec!["127.0.0.1".parse().unwrap()])];
    let sandbox = LinuxSandbox::open(&ws, &policy, &env)
        .unwrap()
        .with_resolver(Arc::new(Pinned::new(names.into_iter().collect())));
    let tools = Toolset::builder(Arc::new(sandbox))
        .policy(policy)
        .host_env(env)
        .secret("CUBBY_ATTACK_TOKEN", REFLECTED_TOKEN)
        .track_changes(false)
        .build()
        .unwrap();
    let l = Lab {
        base,
        ws,
        outside,
        tools,
    };
    let url = format!("http://bound.test:{port}");
    let auth = "-H \"Authorization: Bearer $CUBBY_ATTACK_TOKEN\"";
    let out = l.sh(&format!(
        "for p in headers chunked; do curl -s -i {auth} {url}/$p; done > got.txt; \
         curl -s -i {url}/stored >> got.txt; \
         curl -s -i --compressed {auth} {url}/gzip >> got.txt; \
         printf 'placeholder=%s\n' \"$CUBBY_ATTACK_TOKEN\"; rev got.txt"
    ));
    let answers = host.answers.lock().unwrap().clone();
    drop(host);
    // The bound host did get (and reflect) the real value through the
    // proxy, on every path: what the sandbox then saw is the verdict.
    for path in ["/headers", "/chunked", "/stored", "/gzip"] {
        if !answers
            .iter()
            .any(|(p, body)| p == path && body.contains(REFLECTED_TOKEN))
        {
            return Err(format!(
                "control: the bound host did not reflect the value on {path}: {answers:?} {}",
                out.text
            ));
        }
    }
    let got = std::fs::read_to_string(l.ws.join("got.txt")).unwrap_or_default();
    let placeholder = out
        .text
        .lines()
        .find_map(|line| line.strip_prefix("placeholder="))
        .unwrap_or("")
        .trim()
        .to_string();
    if !placeholder.starts_with("cubby-placeholder-") {
        return Err(format!("no placeholder in the sandbox: {}", out.text));
    }
    let lower = got.to_ascii_lowercase();
    if lower.contains(&REFLECTED_TOKEN.to_ascii_lowercase()) {
        return Err(format!("the command received the real value:\n{got}"));
    }
    if out.text.contains(&reversed(REFLECTED_TOKEN)) || out.text.contains(REFLECTED_TOKEN) {
        return Err(format!("the output shows the real value: {}", out.text));
    }
    // What came back is the placeholder, in a header and in each body
    // (headers, chunked, stored); the gzipped answer was refused.
    let echoed = got.matches(placeholder.as_str()).count();
    if echoed < 7 || !got.contains("relayed only uncompressed") {
        return Err(format!("the answers did not come back as expected:\n{got}"));
    }
    Ok(())
}
