//! The gateway's upstream in these tests (an outer edge): an HTTPS server
//! on loopback with a CA of its own (made with `openssl`), which counts
//! every request it receives and answers by path:
//!
//! - `/leak/…`: the credential it was sent, echoed in a header and in a
//!   body split across two chunks mid-value;
//! - `/redirect/…`: a 302 to another host;
//! - `/cookie/…`: a `Set-Cookie`;
//! - `/big/<n>`, `/big/chunked-<n>`: `n` bytes, with a length or chunked;
//! - anything else: the request echoed (method, target, headers, body).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// How much of a request body the echo shows.
const ECHOED_BODY_BYTES: usize = 4096;

/// A request the upstream received.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub target: String,
    /// Lower-case names, in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

pub struct Upstream {
    pub port: u16,
    pub ca_file: PathBuf,
    count: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Upstream {
    pub fn start() -> Upstream {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        openssl(
            d,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=cubby test CA",
            ],
        );
        openssl(
            d,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "srv.key",
                "-out",
                "srv.csr",
                "-subj",
                "/CN=localhost",
            ],
        );
        std::fs::write(
            d.join("ext.cnf"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
        )
        .unwrap();
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                "srv.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "srv.pem",
                "-days",
                "2",
                "-extfile",
                "ext.cnf",
            ],
        );
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(d.join("srv.pem"))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let key = PrivateKeyDer::from_pem_file(d.join("srv.key")).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let count = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let accept = {
            let (count, seen, stop) = (count.clone(), seen.clone(), stop.clone());
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let (config, count, seen) = (config.clone(), count.clone(), seen.clone());
                    std::thread::spawn(move || serve(conn, config, &count, &seen));
                }
            })
        };
        Upstream {
            port,
            ca_file: d.join("ca.pem"),
            count,
            seen,
            stop,
            accept: Some(accept),
            _dir: dir,
        }
    }

    /// Requests received so far.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// The last request whose target starts with `prefix`.
    pub fn seen(&self, prefix: &str) -> Option<Seen> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|s| s.target.starts_with(prefix))
            .cloned()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

fn serve(
    conn: TcpStream,
    config: Arc<rustls::ServerConfig>,
    count: &AtomicUsize,
    seen: &Mutex<Vec<Seen>>,
) {
    conn.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    conn.set_nodelay(true).unwrap();
    let Ok(server) = rustls::ServerConnection::new(config) else {
        return;
    };
    let mut tls = rustls::StreamOwned::new(server, conn);
    let mut buf: Vec<u8> = Vec::new();
    loop {
        // One request head.
        let (req, head_len) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut r = httparse::Request::new(&mut headers);
            if let Ok(httparse::Status::Complete(n)) = r.parse(&buf) {
                let req = Seen {
                    method: r.method.unwrap_or("").to_string(),
                    target: r.path.unwrap_or("").to_string(),
                    headers: r
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.name.to_ascii_lowercase(),
                                String::from_utf8_lossy(h.value).into_owned(),
                            )
                        })
                        .collect(),
                    body: Vec::new(),
                };
                break (req, n);
            }
            let mut chunk = [0u8; 16384];
            match tls.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        buf.drain(..head_len);
        let mut req = req;
        let length: usize = req
            .header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while buf.len() < length {
            let mut chunk = [0u8; 65536];
            match tls.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        req.body = buf.drain(..length).collect();
        count.fetch_add(1, Ordering::SeqCst);
        seen.lock().unwrap().push(req.clone());
        if answer(&mut tls, &req).is_err() {
            return;
        }
    }
}

fn answer(tls: &mut impl Write, req: &Seen) -> std::io::Result<()> {
    let credential = req.header("authorization").unwrap_or("").to_string();
    if req.target.starts_with("/leak") {
        // The value split across two chunks, and in a header.
        let body = format!("you sent: {credential} (end)\n");
        let (a, b) = body.split_at(body.len() / 2);
        write!(
            tls,
            "HTTP/1.1 200 OK\r\nx-echo: {credential}\r\ntransfer-encoding: chunked\r\n\r\n\
             {:x}\r\n{a}\r\n",
            a.len()
        )?;
        tls.flush()?;
        write!(tls, "{:x}\r\n{b}\r\n0\r\n\r\n", b.len())?;
        return tls.flush();
    }
    if req.target.starts_with("/reflect") {
        // The token in the forms origins echo it in, and split over two
        // lines of one header.
        use base64::Engine;
        let token = credential.strip_prefix("Bearer ").unwrap_or(&credential);
        let (a, b) = token.split_at(token.len() / 2);
        let body = format!(
            "upper={}\nlower={}\npercent={}\nbase64={}\n",
            token.to_ascii_uppercase(),
            token.to_ascii_lowercase(),
            percent_encoding::utf8_percent_encode(token, percent_encoding::NON_ALPHANUMERIC),
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(token),
        );
        write!(
            tls,
            "HTTP/1.1 200 OK\r\nx-multi: {a}\r\nx-multi: {b}\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )?;
        return tls.flush();
    }
    if let Some(n) = req.target.strip_prefix("/big/") {
        // `n` bytes, with a length; `/big/chunked-<n>` without one.
        let (chunked, n) = match n.strip_prefix("chunked-") {
            Some(n) => (true, n),
            None => (false, n),
        };
        let n: usize = n.parse().unwrap_or(0);
        let body = vec![b'x'; n];
        if chunked {
            write!(tls, "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")?;
            for part in body.chunks(65536) {
                write!(tls, "{:x}\r\n", part.len())?;
                tls.write_all(part)?;
                write!(tls, "\r\n")?;
            }
            write!(tls, "0\r\n\r\n")?;
        } else {
            write!(tls, "HTTP/1.1 200 OK\r\ncontent-length: {n}\r\n\r\n")?;
            tls.write_all(&body)?;
        }
        return tls.flush();
    }
    if req.target.starts_with("/redirect") {
        write!(
            tls,
            "HTTP/1.1 302 Found\r\nlocation: https://elsewhere.example/steal\r\n\
             content-length: 0\r\n\r\n"
        )?;
        return tls.flush();
    }
    let mut body = format!("method={}\ntarget={}\n", req.method, req.target);
    for (n, v) in &req.headers {
        body.push_str(&format!("header {n}: {v}\n"));
    }
    // The body's length, and its start.
    body.push_str(&format!("body_len={}\nbody=", req.body.len()));
    let mut bytes = body.into_bytes();
    bytes.extend_from_slice(&req.body[..req.body.len().min(ECHOED_BODY_BYTES)]);
    let cookie = if req.target.starts_with("/cookie") {
        "set-cookie: session=abc; Path=/\r\n"
    } else {
        ""
    };
    // One write: one TLS record, one segment.
    let mut out = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n{cookie}content-length: {}\r\n\r\n",
        bytes.len()
    )
    .into_bytes();
    out.extend_from_slice(&bytes);
    tls.write_all(&out)?;
    tls.flush()
}
