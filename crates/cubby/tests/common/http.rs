//! A loopback HTTP/1.1 server on a port the kernel picks (`127.0.0.1:0`),
//! answering with a handler of the test's and recording what it saw; stopped
//! (its accept loop joined) when dropped.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// A request as the test server saw it.
#[derive(Clone, Debug)]
pub struct Request {
    pub target: String,
    pub headers: Vec<(String, String)>,
}

impl Request {
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap()
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn host(&self) -> &str {
        self.header("host").unwrap_or("")
    }
    pub fn query(&self) -> HashMap<String, String> {
        let q = self.target.split_once('?').map_or("", |(_, q)| q);
        url::form_urlencoded::parse(q.as_bytes())
            .into_owned()
            .collect()
    }
}

/// What the server answers.
pub enum Reply {
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

pub fn page(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Reply {
    Reply::Full {
        status,
        headers: vec![("Content-Type", content_type.to_string())],
        body: body.into(),
    }
}

pub fn redirect(status: u16, location: String) -> Reply {
    Reply::Full {
        status,
        headers: vec![("Location", location)],
        body: Vec::new(),
    }
}

pub type Handler = dyn Fn(&Request, u16) -> Reply + Send + Sync;

pub struct Server {
    pub port: u16,
    pub stop: Arc<AtomicBool>,
    pub seen: Arc<Mutex<Vec<Request>>>,
    /// Connections the client closed before the server was done.
    pub aborted: Arc<AtomicUsize>,
    pub accept: Option<JoinHandle<()>>,
}

impl Server {
    pub fn start(handler: impl Fn(&Request, u16) -> Reply + Send + Sync + 'static) -> Server {
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

    pub fn url(&self, host: &str, path: &str) -> String {
        format!("http://{host}:{}{path}", self.port)
    }

    pub fn hosts(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.host().to_string())
            .collect()
    }

    pub fn requests(&self) -> Vec<Request> {
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
