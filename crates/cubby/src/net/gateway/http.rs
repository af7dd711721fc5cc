//! A gateway listener's connections: HTTP/1.1 read from the raw bytes (so
//! that every header line is seen as sent — a parser that folds duplicated
//! `Content-Length` lines, or drops `Content-Length` beside
//! `Transfer-Encoding`, would hide the very requests that must be
//! refused), checked, forwarded with reqwest, and the answer written back.
//!
//! One request at a time per connection (keep-alive and pipelining work;
//! requests are answered in order). A refusal closes the connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, watch};

use super::path::{Target, check_target};
use super::{
    Gateway, GatewayEvent, MAX_GATEWAY_CONNECTIONS, MAX_GATEWAY_IN_FLIGHT, RunLog, Shared,
    until_closed,
};
use crate::output::StreamRedactor;
use crate::output::truncate_for_message;

/// How long a client may take to send a request head (and may stay idle
/// between requests): a slow client is cut off after it.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// An answer of at most this many bytes (by its `Content-Length`) is read
/// whole and sent in one write; a larger one streams.
const SMALL_ANSWER_BYTES: u64 = 64 * 1024;
/// How long a client may take to send a request body.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest request head.
const MAX_HEAD_BYTES: usize = 32 * 1024;
/// The most header lines in a request head.
const MAX_HEADERS: usize = 100;
/// The longest chunk-size line of a chunked body.
const MAX_CHUNK_LINE: usize = 1024;
/// Bytes read from a client at once.
const READ_BYTES: usize = 16 * 1024;
/// How long a refused client's remaining bytes are read (and dropped)
/// before the socket closes.
const LINGER: Duration = Duration::from_secs(2);
/// The most bytes read from a refused client before the socket closes.
const MAX_LINGER_BYTES: usize = 4 * 1024 * 1024;
/// Pause after a failed `accept` (e.g. out of fds) before the next.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);
/// Marks the gateway's own answers (refusals).
const REFUSAL_HEADER: &str = "x-cubby-gateway";
/// The header a command may send its token in, instead of `Authorization`.
const TOKEN_HEADER: &str = "x-cubby-gateway-token";

/// Request headers never forwarded: hop-by-hop, the command's own
/// credentials and proxy claims, method and URL overrides, and what the
/// gateway sets itself.
const DROPPED_REQUEST_HEADERS: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "http2-settings",
    "authorization",
    "cookie",
    "cookie2",
    "forwarded",
    "via",
    "x-real-ip",
    "true-client-ip",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "x-original-url",
    "x-rewrite-url",
    "x-original-method",
    "host",
    "content-length",
    "expect",
    "accept-encoding",
    TOKEN_HEADER,
];
/// Response headers never relayed.
const DROPPED_RESPONSE_HEADERS: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "set-cookie",
    "set-cookie2",
    "content-length",
];

/// What every connection of one listener shares.
pub(super) struct Listener {
    gateway: Arc<Gateway>,
    shared: Arc<Shared>,
    alive: watch::Receiver<()>,
    connections: Arc<Semaphore>,
    in_flight: Arc<Semaphore>,
    /// Refusals past the connection cap being written: each holds its
    /// socket for a while, so they are bounded too.
    refusals: Arc<Semaphore>,
}

impl Listener {
    pub(super) fn new(
        gateway: Arc<Gateway>,
        shared: Arc<Shared>,
        alive: watch::Receiver<()>,
    ) -> Listener {
        Listener {
            gateway,
            shared,
            alive,
            connections: Arc::new(Semaphore::new(MAX_GATEWAY_CONNECTIONS)),
            in_flight: Arc::new(Semaphore::new(MAX_GATEWAY_IN_FLIGHT)),
            refusals: Arc::new(Semaphore::new(MAX_GATEWAY_REFUSALS)),
        }
    }
}

/// Most refusals past [`MAX_GATEWAY_CONNECTIONS`] written at once.
const MAX_GATEWAY_REFUSALS: usize = 64;

/// Accepts until the listener fails for good or the servers drop.
pub(super) async fn accept(listener: tokio::net::TcpListener, ctx: Arc<Listener>) {
    loop {
        let mut stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::debug!("gateway: accept failed: {e}");
                tokio::time::sleep(ACCEPT_RETRY).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let Ok(permit) = ctx.connections.clone().try_acquire_owned() else {
            // Over the cap: a short answer, and the socket closed; past
            // the refusals' own cap, closed at once (a flood of connects
            // must not hold the server's descriptors).
            let Ok(refusing) = ctx.refusals.clone().try_acquire_owned() else {
                drop(stream);
                continue;
            };
            let ctx = ctx.clone();
            tokio::spawn(async move {
                let _refusing = refusing;
                let refusal = Refusal::new(
                    503,
                    format!(
                        "the gateway already holds {MAX_GATEWAY_CONNECTIONS} connections; \
                         retry, or reuse a connection"
                    ),
                );
                refuse(&mut stream, &refusal).await;
                drop(ctx);
            });
            continue;
        };
        let conn = ctx.clone();
        tokio::spawn(until_closed(ctx.alive.clone(), async move {
            serve(stream, &conn).await;
            drop(permit);
        }));
    }
}

/// A refusal: a status and a message for the command.
#[derive(Debug)]
struct Refusal {
    status: u16,
    message: String,
    route: Option<String>,
}

impl Refusal {
    fn new(status: u16, message: impl Into<String>) -> Refusal {
        Refusal {
            status,
            message: message.into(),
            route: None,
        }
    }

    /// Writes the answer (`Connection: close`).
    async fn write(&self, stream: &mut TcpStream) -> std::io::Result<()> {
        let body = format!("cubby gateway: {}\n", self.message);
        let head = format!(
            "HTTP/1.1 {} {}\r\ncontent-type: text/plain; charset=utf-8\r\n{REFUSAL_HEADER}: \
             refused\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            self.status,
            reason(self.status),
            body.len()
        );
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.flush().await
    }
}

/// Writes `refusal`, then closes gently: the write side shut first, and
/// what the client still sends (the rest of a refused body) read and
/// dropped for a moment — closing a socket with unread bytes resets the
/// connection, and the client could lose the answer.
async fn refuse(stream: &mut TcpStream, refusal: &Refusal) {
    if tokio::time::timeout(HEADER_TIMEOUT, refusal.write(stream))
        .await
        .is_err()
    {
        return;
    }
    let _ = stream.shutdown().await;
    let _ = tokio::time::timeout(LINGER, async {
        let mut sink = [0u8; READ_BYTES];
        let mut total = 0;
        while total < MAX_LINGER_BYTES {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    })
    .await;
}

fn reason(status: u16) -> &'static str {
    hyper::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("")
}

/// A parsed request head, owned.
struct Head {
    method: String,
    target: Vec<u8>,
    /// HTTP/1.`minor`.
    minor: u8,
    /// Names in lower case, values raw, in order.
    headers: Vec<(String, Vec<u8>)>,
}

impl Head {
    fn all<'h>(&'h self, name: &'h str) -> impl Iterator<Item = &'h [u8]> + 'h {
        self.headers
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }
}

/// How a request's body is framed.
enum Framing {
    None,
    Length(u64),
    Chunked,
}

/// The connection loop: a head, its checks, the body, the answer; again
/// while the connection is kept alive.
async fn serve(mut stream: TcpStream, ctx: &Listener) {
    let mut buf: Vec<u8> = Vec::with_capacity(READ_BYTES);
    loop {
        let head =
            match tokio::time::timeout(HEADER_TIMEOUT, read_head(&mut stream, &mut buf)).await {
                Err(_) => {
                    if !buf.is_empty() {
                        let r = Refusal::new(
                            408,
                            format!("the request head did not arrive within {HEADER_TIMEOUT:?}"),
                        );
                        refuse(&mut stream, &r).await;
                    }
                    return;
                }
                Ok(Ok(None)) => return,
                Ok(Ok(Some(head))) => head,
                Ok(Err(refusal)) => {
                    refuse(&mut stream, &refusal).await;
                    record(ctx, None, "-", &refusal, 0, Instant::now(), None);
                    return;
                }
            };
        let started = Instant::now();
        let method = truncate_for_message(&head.method);
        match handle(&mut stream, &mut buf, &head, ctx, started).await {
            Ok(keep_alive) => {
                if !keep_alive {
                    return;
                }
            }
            Err((refusal, run)) => {
                refuse(&mut stream, &refusal).await;
                record(ctx, run.as_deref(), &method, &refusal, 0, started, None);
                return;
            }
        }
    }
}

fn record(
    ctx: &Listener,
    run: Option<&RunLog>,
    method: &str,
    refusal: &Refusal,
    bytes_in: u64,
    started: Instant,
    bytes_out: Option<u64>,
) {
    ctx.shared.record(
        GatewayEvent {
            gateway: ctx.gateway.name.clone(),
            method: method.chars().take(16).collect(),
            route: refusal.route.clone(),
            status: refusal.status,
            bytes_in,
            bytes_out: bytes_out.unwrap_or(0),
            ms: started.elapsed().as_millis() as u64,
        },
        run,
    );
}

/// Reads one request head into `buf` (keeping what follows it there);
/// `None` when the client closed before sending anything.
async fn read_head(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> std::result::Result<Option<Head>, Refusal> {
    loop {
        if !buf.is_empty() {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(buf) {
                Ok(httparse::Status::Complete(len)) => {
                    let head = Head {
                        method: req.method.unwrap_or_default().to_string(),
                        target: req.path.unwrap_or_default().as_bytes().to_vec(),
                        minor: req.version.unwrap_or(0),
                        headers: req
                            .headers
                            .iter()
                            .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
                            .collect(),
                    };
                    buf.drain(..len);
                    return Ok(Some(head));
                }
                Ok(httparse::Status::Partial) => {}
                Err(httparse::Error::TooManyHeaders) => {
                    return Err(Refusal::new(
                        431,
                        format!("the request has more than {MAX_HEADERS} header lines"),
                    ));
                }
                Err(e) => {
                    return Err(Refusal::new(
                        400,
                        format!(
                            "the request line or a header is malformed ({e}); send HTTP/1.1 \
                             with a path of printable ASCII"
                        ),
                    ));
                }
            }
            if buf.len() >= MAX_HEAD_BYTES {
                return Err(Refusal::new(
                    431,
                    format!("the request head is over {MAX_HEAD_BYTES} bytes"),
                ));
            }
        }
        let before = buf.len();
        buf.reserve(READ_BYTES);
        let n = stream
            .read_buf(buf)
            .await
            .map_err(|e| Refusal::new(400, format!("cannot read the request: {e}")))?;
        if n == 0 {
            if before == 0 {
                return Ok(None);
            }
            return Err(Refusal::new(
                400,
                "the connection closed inside a request head",
            ));
        }
    }
}

/// Checks the head (steps 1–4 of the module doc); the framing of its body.
fn check_head<'h>(head: &'h Head) -> std::result::Result<(Target<'h>, Framing), Refusal> {
    let bad = |m: String| Refusal::new(400, m);
    if head.minor != 1 {
        return Err(bad("only HTTP/1.1 is accepted".into()));
    }
    if head.method == "CONNECT" {
        return Err(bad(
            "CONNECT is refused: the gateway forwards requests to its own upstream only".into(),
        ));
    }
    let target = check_target(&head.target).map_err(bad)?;
    if head.all("upgrade").next().is_some() {
        return Err(bad(
            "`Upgrade` is refused: the gateway speaks plain HTTP/1.1 only".into(),
        ));
    }
    let lengths: Vec<&[u8]> = head.all("content-length").collect();
    let codings: Vec<&[u8]> = head.all("transfer-encoding").collect();
    if lengths.len() > 1 {
        return Err(bad(
            "`Content-Length` is sent more than once; send it once".into()
        ));
    }
    if !lengths.is_empty() && !codings.is_empty() {
        return Err(bad(
            "`Content-Length` and `Transfer-Encoding` together are refused; send one".into(),
        ));
    }
    let framing = if let Some(value) = lengths.first() {
        let n = std::str::from_utf8(value)
            .ok()
            .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|t| t.parse::<u64>().ok())
            .ok_or_else(|| bad("`Content-Length` is not a number".into()))?;
        Framing::Length(n)
    } else if !codings.is_empty() {
        if codings.len() > 1 || !codings[0].eq_ignore_ascii_case(b"chunked") {
            return Err(bad(
                "`Transfer-Encoding` other than a single `chunked` is refused".into(),
            ));
        }
        Framing::Chunked
    } else {
        Framing::None
    };
    if let Some(expect) = head.all("expect").next()
        && !expect.eq_ignore_ascii_case(b"100-continue")
    {
        return Err(Refusal::new(
            417,
            "only `Expect: 100-continue` is understood",
        ));
    }
    Ok((target, framing))
}

/// The token a request carries: `Authorization: Bearer <t>` or
/// `X-Cubby-Gateway-Token: <t>`.
fn token_of(head: &Head) -> Option<&str> {
    let bearer = head.all("authorization").find_map(|v| {
        let v = std::str::from_utf8(v).ok()?;
        let (scheme, rest) = v.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
    });
    bearer.or_else(|| {
        head.all(TOKEN_HEADER)
            .find_map(|v| std::str::from_utf8(v).ok().map(str::trim))
    })
}

/// Whether the client asked to close after this request.
fn wants_close(head: &Head) -> bool {
    head.all("connection").any(|v| {
        v.split(|b| *b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"))
    })
}

type Failed = (Refusal, Option<Arc<RunLog>>);

/// One request after its head: checks, body, forwarding, answer. `Ok`
/// says whether the connection stays open.
async fn handle(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    head: &Head,
    ctx: &Listener,
    started: Instant,
) -> std::result::Result<bool, Failed> {
    let (target, framing) = check_head(head).map_err(|r| (r, None))?;
    let gateway = &ctx.gateway;
    let run = token_of(head).and_then(|t| ctx.shared.run_of(t));
    let Some(run) = run else {
        return Err((
            Refusal::new(
                401,
                format!(
                    "no valid token: send `Authorization: Bearer ${}` (a run's token works \
                     only while the run lasts, and only at its own sandbox's gateways)",
                    super::GATEWAY_TOKEN_ENV
                ),
            ),
            None,
        ));
    };
    let route = gateway
        .routes
        .iter()
        .find(|r| r.matches(&head.method, &target.segments));
    let Some(route) = route else {
        let allowed: Vec<&str> = gateway.routes.iter().map(|r| r.text.as_str()).collect();
        let path_known = gateway
            .routes
            .iter()
            .any(|r| r.matches_path(&target.segments));
        let what = if path_known {
            format!("{} is not allowed on this path", head.method)
        } else {
            "no route matches this path".to_string()
        };
        return Err((
            Refusal::new(
                403,
                format!(
                    "{what}; gateway `{}` allows only: {}",
                    gateway.name,
                    allowed.join(", ")
                ),
            ),
            Some(run),
        ));
    };
    let limited = |status: u16, message: String| {
        let mut r = Refusal::new(status, message);
        r.route = Some(route.text.clone());
        (r, Some(run.clone()))
    };
    let too_large = |n: String| {
        limited(
            413,
            format!(
                "the request body is {n} bytes; route `{}` takes at most {} (its `max_body`)",
                route.text, route.max_body
            ),
        )
    };
    let expect = head.all("expect").next().is_some();
    let body = match framing {
        Framing::None => None,
        Framing::Length(n) if n > route.max_body => return Err(too_large(n.to_string())),
        Framing::Length(n) => {
            if expect {
                continue_100(stream).await;
            }
            let got =
                tokio::time::timeout(BODY_TIMEOUT, read_exact_body(stream, buf, n as usize)).await;
            match got {
                Ok(Ok(body)) => Some(body),
                Ok(Err(why)) => return Err(limited(400, why)),
                Err(_) => {
                    return Err(limited(
                        408,
                        format!("the body did not arrive within {BODY_TIMEOUT:?}"),
                    ));
                }
            }
        }
        Framing::Chunked => {
            if expect {
                continue_100(stream).await;
            }
            let got =
                tokio::time::timeout(BODY_TIMEOUT, read_chunked(stream, buf, route.max_body)).await;
            match got {
                Ok(Ok(body)) => Some(body),
                Ok(Err(ChunkError::TooLarge)) => {
                    return Err(too_large(format!("over {}", route.max_body)));
                }
                Ok(Err(ChunkError::Bad(why))) => return Err(limited(400, why)),
                Err(_) => {
                    return Err(limited(
                        408,
                        format!("the body did not arrive within {BODY_TIMEOUT:?}"),
                    ));
                }
            }
        }
    };
    let bytes_in = body.as_ref().map_or(0, |b| b.len() as u64);
    // A turn to forward (bounded memory: each holds its body).
    let Ok(_turn) = ctx.in_flight.clone().acquire_owned().await else {
        return Err(limited(503, "the gateway is shutting down".into()));
    };
    let url = format!(
        "{}{}{}",
        gateway.base,
        target.path,
        target.query.map(|q| format!("?{q}")).unwrap_or_default()
    );
    // The URL must carry the checked path and query as they are.
    let parsed = url::Url::parse(&url).ok().filter(|u| {
        u.path() == format!("{}{}", gateway.base_path, target.path) && u.query() == target.query
    });
    let Some(parsed) = parsed else {
        return Err(limited(
            400,
            "the path or query cannot be forwarded exactly as sent; percent-encode its \
             special characters"
                .into(),
        ));
    };
    let method = reqwest::Method::from_bytes(head.method.as_bytes())
        .map_err(|_| limited(400, "the method is not a token".into()))?;
    let headers = forwarded_headers(head, gateway);
    let client = gateway.client().map_err(|e| limited(502, e))?;
    let mut request = client.request(method, parsed).headers(headers);
    if let Some(body) = body {
        request = request.body(body);
    }
    let response = match request.send().await {
        Ok(r) => r,
        Err(e) => {
            return Err(limited(
                502,
                format!("the upstream cannot be reached: {}", describe(&e)),
            ));
        }
    };
    let status = response.status().as_u16();
    let coded = response
        .headers()
        .get_all(hyper::header::CONTENT_ENCODING)
        .iter()
        .flat_map(|v| v.to_str().unwrap_or("?").split(','))
        .map(str::trim)
        .any(|c| !c.is_empty() && !c.eq_ignore_ascii_case("identity"));
    if coded {
        return Err(limited(
            502,
            "the upstream answered compressed although the gateway asked for `identity`; \
             its answer cannot be checked for the credential"
                .into(),
        ));
    }
    let max = gateway.max_response;
    if response.content_length().is_some_and(|n| n > max) {
        return Err(limited(
            502,
            format!(
                "the upstream's answer is {} bytes; this gateway relays at most {max} \
                 (`max_response`)",
                response.content_length().unwrap_or(0)
            ),
        ));
    }
    let no_body = head.method == "HEAD" || status == 204 || status == 304 || status < 200;
    // A small answer of known length is read whole and sent in one write
    // with its (redacted) length; a larger one streams, chunked.
    let whole = !no_body
        && response
            .content_length()
            .is_some_and(|n| n <= SMALL_ANSWER_BYTES);
    let mut out_headers = response.headers().clone();
    let upstream_length = out_headers.get(hyper::header::CONTENT_LENGTH).cloned();
    filter_response_headers(&mut out_headers, gateway);
    let keep_alive = !wants_close(head);
    let mut text = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    for (name, value) in &out_headers {
        text.push_str(name.as_str());
        text.push_str(": ");
        // Header values are visible ASCII or were dropped above.
        text.push_str(&String::from_utf8_lossy(value.as_bytes()));
        text.push_str("\r\n");
    }
    if no_body {
        if head.method == "HEAD"
            && let Some(length) = upstream_length
        {
            text.push_str("content-length: ");
            text.push_str(&String::from_utf8_lossy(length.as_bytes()));
            text.push_str("\r\n");
        }
    } else if !whole {
        text.push_str("transfer-encoding: chunked\r\n");
    }
    if !keep_alive {
        text.push_str("connection: close\r\n");
    }
    text.push_str("\r\n");
    let event = |status: u16, bytes_out: u64| GatewayEvent {
        gateway: gateway.name.clone(),
        method: head.method.chars().take(16).collect(),
        route: Some(route.text.clone()),
        status,
        bytes_in,
        bytes_out,
        ms: started.elapsed().as_millis() as u64,
    };
    if whole {
        let body = response.bytes().await.map_err(|e| {
            limited(
                502,
                format!("the upstream's answer failed: {}", describe(&e)),
            )
        })?;
        let body = gateway.redactor.redact_bytes(&body);
        let mut out = text.into_bytes();
        // Before the empty line that ends the head.
        out.truncate(out.len() - 2);
        out.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
        out.extend_from_slice(&body);
        let sent = stream.write_all(&out).await.is_ok();
        ctx.shared
            .record(event(status, body.len() as u64), Some(&run));
        return Ok(keep_alive && sent);
    }
    if stream.write_all(text.as_bytes()).await.is_err() {
        ctx.shared.record(event(status, 0), Some(&run));
        return Ok(false);
    }
    if no_body {
        let _ = stream.flush().await;
        ctx.shared.record(event(status, 0), Some(&run));
        return Ok(keep_alive);
    }
    let (sent, complete) = relay_body(stream, response, gateway.redactor.stream(), max).await;
    ctx.shared.record(event(status, sent), Some(&run));
    Ok(keep_alive && complete)
}

/// Streams the answer's body as chunks, redacted, at most `max` bytes
/// from upstream; returns the bytes relayed and whether the body ended
/// well (else the connection is closed without the last chunk, and the
/// client sees a cut answer).
async fn relay_body(
    stream: &mut TcpStream,
    mut response: reqwest::Response,
    mut redact: StreamRedactor,
    max: u64,
) -> (u64, bool) {
    let mut seen: u64 = 0;
    let mut sent: u64 = 0;
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(e) => {
                tracing::debug!("gateway: the upstream's body failed: {e}");
                return (sent, false);
            }
        };
        seen += chunk.len() as u64;
        if seen > max {
            tracing::debug!("gateway: an answer passed max_response ({max} bytes); cut");
            return (sent, false);
        }
        let out = redact.push(&chunk);
        if !out.is_empty() {
            if write_chunk(stream, &out).await.is_err() {
                return (sent, false);
            }
            sent += out.len() as u64;
        }
    }
    let rest = redact.finish();
    if !rest.is_empty() {
        if write_chunk(stream, &rest).await.is_err() {
            return (sent, false);
        }
        sent += rest.len() as u64;
    }
    let done = stream.write_all(b"0\r\n\r\n").await.is_ok() && stream.flush().await.is_ok();
    (sent, done)
}

async fn write_chunk(stream: &mut TcpStream, data: &[u8]) -> std::io::Result<()> {
    let mut framed = Vec::with_capacity(data.len() + 16);
    framed.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
    framed.extend_from_slice(data);
    framed.extend_from_slice(b"\r\n");
    stream.write_all(&framed).await
}

async fn continue_100(stream: &mut TcpStream) {
    let _ = stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await;
}

/// The request headers the upstream gets: the command's, less the dropped
/// ones and those `Connection` names, plus the credential and
/// `Accept-Encoding: identity` (a compressed answer could not be checked
/// for the credential).
fn forwarded_headers(head: &Head, gateway: &Gateway) -> HeaderMap {
    let named: Vec<String> = head
        .all("connection")
        .flat_map(|v| v.split(|b| *b == b','))
        .filter_map(|t| std::str::from_utf8(t.trim_ascii()).ok())
        .map(str::to_ascii_lowercase)
        .collect();
    let mut headers = HeaderMap::new();
    for (name, value) in &head.headers {
        let dropped = DROPPED_REQUEST_HEADERS.contains(&name.as_str())
            || name.starts_with("x-forwarded-")
            || named.iter().any(|n| n == name)
            || gateway
                .credential
                .as_ref()
                .is_some_and(|(h, _)| h.as_str() == name);
        if dropped {
            continue;
        }
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value),
        ) {
            headers.append(n, v);
        }
    }
    headers.insert(
        hyper::header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    if let Some((name, value)) = &gateway.credential {
        headers.insert(name.clone(), value.clone());
    }
    headers
}

/// Drops what is never relayed and redacts the credential's value; a
/// header whose name holds the value is dropped, and so is one whose value
/// is not visible ASCII.
fn filter_response_headers(headers: &mut HeaderMap, gateway: &Gateway) {
    let connection_named: Vec<String> = headers
        .get_all(hyper::header::CONNECTION)
        .iter()
        .flat_map(|v| v.to_str().unwrap_or("").split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    let names: Vec<HeaderName> = headers.keys().cloned().collect();
    for name in names {
        let n = name.as_str();
        // A header given more than once whose lines together hold the
        // value, split between them (G1): dropped whole.
        let values: Vec<&[u8]> = headers
            .get_all(&name)
            .iter()
            .map(HeaderValue::as_bytes)
            .collect();
        let split = values.len() > 1
            && [&b""[..], b", ", b","].iter().any(|sep| {
                let joined = values.join(*sep);
                gateway.redactor.finds(&joined)
                    || gateway.lower_value.as_ref().is_some_and(|v| {
                        joined
                            .to_ascii_lowercase()
                            .windows(v.len())
                            .any(|w| w == v.as_bytes())
                    })
            });
        let drop = split
            || DROPPED_RESPONSE_HEADERS.contains(&n)
            || connection_named.iter().any(|c| c == n)
            || gateway
                .lower_value
                .as_ref()
                .is_some_and(|v| n.contains(v.as_str()));
        if drop {
            headers.remove(&name);
        }
    }
    let mut unfit = Vec::new();
    for (name, value) in headers.iter_mut() {
        let bytes = value.as_bytes();
        if !bytes
            .iter()
            .all(|b| (0x20..0x7f).contains(b) || *b == b'\t')
        {
            unfit.push(name.clone());
            continue;
        }
        if let std::borrow::Cow::Owned(redacted) = gateway.redactor.redact_lines(bytes) {
            match HeaderValue::from_bytes(&redacted) {
                Ok(v) => *value = v,
                Err(_) => unfit.push(name.clone()),
            }
        }
    }
    for name in unfit {
        headers.remove(name);
    }
}

/// Reads `n` body bytes (some may be in `buf` already).
async fn read_exact_body(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    n: usize,
) -> std::result::Result<Bytes, String> {
    fill(stream, buf, n).await?;
    let body: Vec<u8> = buf.drain(..n).collect();
    Ok(Bytes::from(body))
}

/// Reads until `buf` holds `n` bytes.
async fn fill(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    n: usize,
) -> std::result::Result<(), String> {
    while buf.len() < n {
        buf.reserve((n - buf.len()).min(READ_BYTES * 4));
        let got = stream
            .read_buf(buf)
            .await
            .map_err(|e| format!("cannot read the body: {e}"))?;
        if got == 0 {
            return Err("the connection closed inside the body".into());
        }
    }
    Ok(())
}

enum ChunkError {
    TooLarge,
    Bad(String),
}

/// Reads a CRLF-ended line from `buf`/`stream` (at most `MAX_CHUNK_LINE`).
async fn read_line(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> std::result::Result<Vec<u8>, ChunkError> {
    loop {
        if let Some(at) = memchr::memmem::find(buf, b"\r\n") {
            let line: Vec<u8> = buf.drain(..at + 2).take(at).collect();
            return Ok(line);
        }
        if buf.len() > MAX_CHUNK_LINE {
            return Err(ChunkError::Bad("a chunk line is too long".into()));
        }
        let want = buf.len() + 1;
        fill(stream, buf, want).await.map_err(ChunkError::Bad)?;
    }
}

/// Decodes a chunked body of at most `max` bytes (trailers are read and
/// dropped).
async fn read_chunked(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    max: u64,
) -> std::result::Result<Bytes, ChunkError> {
    let mut body = Vec::new();
    loop {
        let line = read_line(stream, buf).await?;
        let size_text = line.split(|b| *b == b';').next().unwrap_or_default();
        let size = std::str::from_utf8(size_text.trim_ascii())
            .ok()
            .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|t| u64::from_str_radix(t, 16).ok())
            .ok_or_else(|| ChunkError::Bad("a chunk size is not a hex number".into()))?;
        if size == 0 {
            // Trailers, up to the empty line.
            loop {
                if read_line(stream, buf).await?.is_empty() {
                    return Ok(Bytes::from(body));
                }
            }
        }
        if size > max.saturating_sub(body.len() as u64) {
            return Err(ChunkError::TooLarge);
        }
        let size = size as usize;
        fill(stream, buf, size + 2).await.map_err(ChunkError::Bad)?;
        body.extend_from_slice(&buf[..size]);
        if &buf[size..size + 2] != b"\r\n" {
            return Err(ChunkError::Bad("a chunk does not end with CRLF".into()));
        }
        buf.drain(..size + 2);
    }
}

/// A reqwest error in words, with its causes.
fn describe(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
