//! The egress proxy: with network mode `allow`, the only route out of a
//! `linux` sandbox.
//!
//! The sandbox's network namespace has nothing but loopback. Its holder
//! opens a TCP listener on `127.0.0.1` there and hands the socket to cubby;
//! cubby accepts on it in its own (the host's) namespace, so the proxy sees
//! the sandbox's connections and makes its own, host-side. Commands find it
//! through `HTTP_PROXY` / `HTTPS_PROXY`; a command that ignores them has no
//! route anywhere.
//!
//! ```text
//! command ─► 127.0.0.1:<port> in the sandbox ─► cubby (host side)
//!   CONNECT host:port                    GET http://host:port/path
//!   │ domain lists on host (403)         │ domain lists on host (403)
//!   │ resolved host-side, every address checked: refused ranges and
//!   │ `allowed_cidrs` (403); no answer or no connection (502)
//!   │ connect to exactly the checked addresses
//!   │ 200, then bytes both ways          │ the request in origin form, hop-by-hop
//!   │ (TLS passes through untouched)     │ headers dropped, `Host` set from the URL,
//!   │                                    │ placeholders swapped for bound hosts;
//!   ▼                                    ▼ their answers: values swapped back
//! ```
//!
//! **Secret injection.** A command sees a configured secret as a random
//! placeholder. In a plain-HTTP request to a host the secret is bound to,
//! the proxy replaces the placeholder with the real value in the request
//! headers (all of them, or the configured ones). Nowhere else: not in
//! requests to other hosts, not in bodies or URLs, and not inside CONNECT
//! tunnels, which are opaque (TLS) — a command that sends the placeholder
//! over HTTPS sends the placeholder.
//!
//! **Swap-back.** The command must not get the value back from the host
//! either (one that reflects headers would hand it over). Every plain-HTTP
//! answer of a bound host — whether or not its request carried the value —
//! comes to the command with each secret's value replaced by its
//! placeholder: in the headers (a header whose name holds a value is
//! dropped), in the body, streamed with a tail held back so that a value
//! split across reads or chunks is caught, and in trailers; the body is
//! re-framed (no `Content-Length`) when a placeholder is not as long as its
//! value. Requests to a bound host ask for `Accept-Encoding: identity`, and
//! an answer that is compressed anyway (`Content-Encoding`, or a transfer
//! coding other than `chunked`) is refused with 502: a compressed value
//! cannot be found. CONNECT tunnels carry no injected value and are not
//! looked into.
//!
//! Every connection and tunnel belongs to its sandbox: dropping the
//! [`EgressProxy`] ends them all.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, watch};

use super::address::{Host, WebUrl, parse_domain};
use super::rules::{NetRules, covers};
use super::{Resolver, SystemResolver, address_refusal, resolve, until_closed};
use crate::config::NetworkConfig;
use crate::error::{Error, ErrorKind, Result};
use crate::output::{Redactor, StreamRedactor, truncate_for_message};

/// Connections (and tunnels) one sandbox may hold open through the proxy.
pub const MAX_EGRESS_CONNECTIONS: usize = 256;
/// How long the proxy tries to connect to one upstream address.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send a request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause after a failed `accept` (e.g. out of fds) before the next.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);
/// Random bytes in a placeholder.
const PLACEHOLDER_RANDOM_BYTES: usize = 16;
/// Marks the proxy's own answers (refusals), for people reading a trace.
const REFUSAL_HEADER: &str = "x-cubby-egress";

/// What the egress proxy of a `linux` sandbox enforces (network mode
/// `allow`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EgressOptions {
    /// The domain lists and `allowed_cidrs` (its `mode` and `inject` are not
    /// read: injected secrets come with their values in `inject` below).
    pub rules: NetworkConfig,
    /// Secrets commands see as placeholders.
    pub inject: Vec<Injection>,
}

/// A secret the proxy injects: commands see a placeholder under `name`;
/// plain-HTTP requests to `hosts` carry `value` in its place.
#[derive(Clone, PartialEq, Eq)]
pub struct Injection {
    /// The environment variable commands find the placeholder in.
    pub name: String,
    /// The real value. The proxy swaps it back to the placeholder in what
    /// a bound host answers over plain HTTP; register it with the toolset
    /// as a secret too ([`crate::ToolsetBuilder::secret`]) so that it is
    /// redacted from tool output whatever way it comes.
    pub value: String,
    /// Domain-list entries: the hosts the value may go to (an entry covers
    /// its subdomains).
    pub hosts: Vec<String>,
    /// Header names the placeholder is swapped in; empty: every header.
    pub headers: Vec<String>,
}

impl std::fmt::Debug for Injection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Injection")
            .field("name", &self.name)
            .field("value", &"…")
            .field("hosts", &self.hosts)
            .field("headers", &self.headers)
            .finish()
    }
}

/// One injection, parsed.
struct Binding {
    name: String,
    placeholder: String,
    value: Vec<u8>,
    hosts: Vec<Host>,
    /// Empty: every header.
    headers: Vec<HeaderName>,
}

/// The rules and bindings of one sandbox's proxy, checked once.
pub(crate) struct Egress {
    rules: NetRules,
    resolver: Arc<dyn Resolver>,
    bindings: Vec<Binding>,
    /// Every binding's value to its placeholder: what the proxy relays from
    /// a bound host passes through it.
    swap_back: Redactor,
    /// The values in lower case, for header names (which are).
    lower_values: Vec<String>,
    /// Every placeholder as long as its value: a swapped body keeps its
    /// length, and its `Content-Length` stands.
    same_lengths: bool,
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress")
            .field("rules", &self.rules)
            .field("secrets", &self.bindings.len())
            .finish_non_exhaustive()
    }
}

impl Egress {
    /// Checks `options` and draws a placeholder for each injected secret.
    ///
    /// # Errors
    ///
    /// `invalid_input` naming the entry that cannot work.
    pub(crate) fn new(options: &EgressOptions) -> Result<Egress> {
        let rules = NetRules::from_config(&options.rules)?;
        let mut bindings = Vec::new();
        for injection in &options.inject {
            bindings.push(binding(injection)?);
        }
        let pairs: Vec<(&str, &str)> = options
            .inject
            .iter()
            .zip(&bindings)
            .map(|(i, b)| (i.value.as_str(), b.placeholder.as_str()))
            .collect();
        let swap_back = Redactor::replacing(&pairs)?;
        let lower_values = options
            .inject
            .iter()
            .map(|i| i.value.to_ascii_lowercase())
            .collect();
        let same_lengths = pairs.iter().all(|(v, p)| v.len() == p.len());
        Ok(Egress {
            rules,
            resolver: Arc::new(SystemResolver),
            bindings,
            swap_back,
            lower_values,
            same_lengths,
        })
    }

    /// Resolves names with `resolver` instead of the system's.
    pub(crate) fn set_resolver(&mut self, resolver: Arc<dyn Resolver>) {
        self.resolver = resolver;
    }

    /// The variables each command gets: the proxy's address (and loopback
    /// excepted from it) and each injected secret's placeholder.
    pub(crate) fn command_env(&self, port: u16) -> Vec<(String, String)> {
        let proxy = format!("http://127.0.0.1:{port}");
        let local = "localhost,127.0.0.1,::1".to_string();
        let mut env = vec![
            ("HTTP_PROXY".to_string(), proxy.clone()),
            ("HTTPS_PROXY".to_string(), proxy.clone()),
            ("http_proxy".to_string(), proxy.clone()),
            ("https_proxy".to_string(), proxy),
            ("NO_PROXY".to_string(), local.clone()),
            ("no_proxy".to_string(), local),
            // Node 24+ honours the variables only when asked.
            ("NODE_USE_ENV_PROXY".to_string(), "1".to_string()),
        ];
        for b in &self.bindings {
            env.push((b.name.clone(), b.placeholder.clone()));
        }
        env
    }

    /// Connects to `host:port` if the rules allow it: 403 for a denied
    /// host or a refused address, 502 when it cannot be resolved or reached.
    async fn connect(&self, host: &Host, port: u16) -> std::result::Result<TcpStream, Refusal> {
        self.rules.check_host(host).map_err(Refusal::from_error)?;
        let ips = resolve(host, &self.resolver)
            .await
            .map_err(|e| Refusal::new(StatusCode::BAD_GATEWAY, e.message()))?;
        for ip in &ips {
            if let Some(why) = address_refusal(host, *ip, &self.rules) {
                return Err(Refusal::new(StatusCode::FORBIDDEN, why));
            }
        }
        let mut last = String::from("no address");
        for ip in ips {
            let addr = SocketAddr::new(ip.to_canonical(), port);
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => return Ok(stream),
                Ok(Err(e)) => last = format!("{addr}: {e}"),
                Err(_) => last = format!("{addr}: no answer within {CONNECT_TIMEOUT:?}"),
            }
        }
        Err(Refusal::new(
            StatusCode::BAD_GATEWAY,
            format!("cannot connect to {host} port {port} ({last})"),
        ))
    }

    /// True when a secret is bound to `host`: its requests may carry a real
    /// value, and its answers are relayed through the swap-back.
    fn binds(&self, host: &Host) -> bool {
        self.bindings
            .iter()
            .any(|b| b.hosts.iter().any(|entry| covers(entry, host)))
    }

    /// Swaps every secret's value back to its placeholder in `headers`
    /// (an answer's, or its trailers); a header whose name holds a value
    /// is dropped, and so is one whose value cannot hold the placeholder.
    fn swap_back_headers(&self, headers: &mut HeaderMap) {
        let named: Vec<HeaderName> = headers
            .keys()
            .filter(|name| {
                self.lower_values
                    .iter()
                    .any(|v| name.as_str().contains(v.as_str()))
            })
            .cloned()
            .collect();
        for name in named {
            headers.remove(name);
        }
        let mut unfit = Vec::new();
        for (name, value) in headers.iter_mut() {
            // A header value holds no line feed: this swaps, nothing more.
            if let std::borrow::Cow::Owned(swapped) = self.swap_back.redact_lines(value.as_bytes())
            {
                match HeaderValue::from_bytes(&swapped) {
                    Ok(v) => *value = v,
                    Err(_) => unfit.push(name.clone()),
                }
            }
        }
        for name in unfit {
            headers.remove(name);
        }
    }

    /// The answer of a bound host as the command gets it: refused when its
    /// body is compressed (the proxy asked for `identity`; a compressed
    /// value cannot be found), else with every secret's value swapped back
    /// to its placeholder in the headers, the body (streamed) and the
    /// trailers, the reason phrase and header casing upstream sent
    /// dropped, and `Content-Length` dropped (the body re-framed) when a
    /// placeholder's length is not its value's.
    fn swap_back(
        self: &Arc<Self>,
        authority: &str,
        mut parts: hyper::http::response::Parts,
        body: Incoming,
    ) -> std::result::Result<Response<ProxyBody>, Refusal> {
        let codings = |name: HeaderName| {
            parts
                .headers
                .get_all(name)
                .iter()
                .flat_map(|v| v.to_str().unwrap_or("?").split(','))
                .map(|c| c.trim().to_ascii_lowercase())
                .filter(|c| !c.is_empty())
                .collect::<Vec<_>>()
        };
        let content = codings(header::CONTENT_ENCODING);
        let transfer = codings(header::TRANSFER_ENCODING);
        if let Some(coding) = content
            .iter()
            .find(|c| c.as_str() != "identity")
            .or_else(|| transfer.iter().find(|c| c.as_str() != "chunked"))
        {
            return Err(Refusal::new(
                StatusCode::BAD_GATEWAY,
                format!(
                    "{authority} answered with its body encoded as `{}` although the proxy \
                     asked for `identity`; a secret is bound to this host, and its answers are \
                     relayed only uncompressed, so that the secret's value can be taken out \
                     of them",
                    truncate_for_message(coding)
                ),
            ));
        }
        remove_hop_by_hop(&mut parts.headers);
        parts.extensions = hyper::http::Extensions::new();
        self.swap_back_headers(&mut parts.headers);
        if !self.same_lengths {
            parts.headers.remove(header::CONTENT_LENGTH);
        }
        let body = SwapBackBody {
            inner: body.boxed(),
            stream: self.swap_back.stream(),
            egress: self.clone(),
            trailers: None,
            done: false,
            exact: self.same_lengths,
        };
        Ok(Response::from_parts(parts, body.boxed()))
    }

    /// Swaps each bound placeholder for its value in `headers`, for a
    /// request to `host`.
    fn inject(&self, host: &Host, headers: &mut HeaderMap) {
        for b in &self.bindings {
            if !b.hosts.iter().any(|entry| covers(entry, host)) {
                continue;
            }
            let needle = b.placeholder.as_bytes();
            for (name, value) in headers.iter_mut() {
                if !b.headers.is_empty() && !b.headers.contains(name) {
                    continue;
                }
                let bytes = value.as_bytes();
                if memchr::memmem::find(bytes, needle).is_none() {
                    continue;
                }
                let swapped = replace_all(bytes, needle, &b.value);
                // The value was checked to be a valid header value.
                if let Ok(v) = HeaderValue::from_bytes(&swapped) {
                    *value = v;
                }
            }
        }
    }
}

/// Checks an injection as [`Egress::new`] would (for config validation).
///
/// # Errors
///
/// `invalid_input` naming what cannot work.
pub(crate) fn check_injection(injection: &Injection) -> Result<()> {
    binding(injection).map(drop)
}

fn binding(injection: &Injection) -> Result<Binding> {
    let name = &injection.name;
    let what = |why: String| Error::invalid_input(format!("`network.inject` `{name}`: {why}"));
    if name.is_empty() || name.contains(['=', '\0']) {
        return Err(what(
            "the secret's name must be an environment variable name".into(),
        ));
    }
    if injection.hosts.is_empty() {
        return Err(what(
            "`hosts` is empty; name the hosts the secret may be sent to".into(),
        ));
    }
    let hosts = injection
        .hosts
        .iter()
        .map(|h| {
            parse_domain(h).map_err(|why| {
                what(format!(
                    "host `{}` is not a domain: {why}",
                    truncate_for_message(h)
                ))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let headers = injection
        .headers
        .iter()
        .map(|h| {
            HeaderName::from_bytes(h.trim().as_bytes()).map_err(|_| {
                what(format!(
                    "`{}` is not a header name",
                    truncate_for_message(h)
                ))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    if injection.value.is_empty() || HeaderValue::from_str(&injection.value).is_err() {
        return Err(what(
            "the value is empty or cannot be sent in a header (control characters)".into(),
        ));
    }
    Ok(Binding {
        name: name.clone(),
        placeholder: placeholder(name)?,
        value: injection.value.as_bytes().to_vec(),
        hosts,
        headers,
    })
}

/// `cubby-placeholder-<name>-<32 hex digits>`, random per sandbox.
fn placeholder(name: &str) -> Result<String> {
    use std::io::Read;
    let mut random = [0u8; PLACEHOLDER_RANDOM_BYTES];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut random))
        .map_err(|e| Error::internal(format!("cannot read /dev/urandom: {e}")))?;
    let mut out = format!("cubby-placeholder-{name}-");
    for b in random {
        out.push_str(&format!("{b:02x}"));
    }
    Ok(out)
}

fn replace_all(haystack: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len() + with.len());
    let mut rest = haystack;
    while let Some(at) = memchr::memmem::find(rest, needle) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(with);
        rest = &rest[at + needle.len()..];
    }
    out.extend_from_slice(rest);
    out
}

/// A running proxy. Dropping it closes the listener and ends every
/// connection and tunnel it carries.
pub(crate) struct EgressProxy {
    port: u16,
    /// Dropped: every task sees the channel close and ends.
    _alive: watch::Sender<()>,
}

impl std::fmt::Debug for EgressProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressProxy")
            .field("port", &self.port)
            .finish()
    }
}

impl EgressProxy {
    /// Serves `listener` (a listening TCP socket, whatever its network
    /// namespace) under `egress`.
    ///
    /// # Errors
    ///
    /// `internal` when the socket or the proxy's runtime cannot be used.
    pub(crate) fn start(listener: OwnedFd, egress: Arc<Egress>) -> Result<EgressProxy> {
        let internal = |e: &dyn std::fmt::Display| {
            Error::internal(format!("the egress proxy cannot start: {e}"))
        };
        let listener = std::net::TcpListener::from(listener);
        let port = listener.local_addr().map_err(|e| internal(&e))?.port();
        listener.set_nonblocking(true).map_err(|e| internal(&e))?;
        let runtime = runtime()?;
        let listener = {
            let _entered = runtime.enter();
            tokio::net::TcpListener::from_std(listener).map_err(|e| internal(&e))?
        };
        let (alive, watch) = watch::channel(());
        runtime.spawn(until_closed(watch.clone(), accept(listener, egress, watch)));
        Ok(EgressProxy {
            port,
            _alive: alive,
        })
    }

    /// The port the proxy listens on (inside the sandbox, on 127.0.0.1).
    pub(crate) fn port(&self) -> u16 {
        self.port
    }
}

/// The runtime every sandbox's proxy runs on: one worker thread.
fn runtime() -> Result<&'static tokio::runtime::Runtime> {
    static RUNTIME: super::RuntimeSlot = std::sync::OnceLock::new();
    super::service_runtime(&RUNTIME, 1, "cubby-egress", "the egress proxy")
}

async fn accept(
    listener: tokio::net::TcpListener,
    egress: Arc<Egress>,
    alive: watch::Receiver<()>,
) {
    let slots = Arc::new(Semaphore::new(MAX_EGRESS_CONNECTIONS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::debug!("egress proxy: accept failed: {e}");
                tokio::time::sleep(ACCEPT_RETRY).await;
                continue;
            }
        };
        let connection = Connection {
            egress: egress.clone(),
            slots: slots.clone(),
            alive: alive.clone(),
        };
        tokio::spawn(until_closed(alive.clone(), async move {
            connection.serve(stream).await;
            drop(permit);
        }));
    }
}

/// The response body the proxy sends: upstream's, or its own text.
type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// A bound host's body on its way to the command: each secret's value is
/// swapped back to its placeholder as the bytes stream through, holding
/// back at most the longest value's length less one byte (a value split
/// across reads or chunks is still caught; memory stays bounded whatever
/// the body's size). Trailers are swapped as headers are.
struct SwapBackBody {
    inner: ProxyBody,
    stream: StreamRedactor,
    egress: Arc<Egress>,
    /// Trailers to send after the held-back bytes.
    trailers: Option<HeaderMap>,
    done: bool,
    /// The body keeps its length (every placeholder as long as its value).
    exact: bool,
}

impl hyper::body::Body for SwapBackBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        if let Some(trailers) = this.trailers.take() {
            return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
        }
        if this.done {
            return Poll::Ready(None);
        }
        loop {
            let frame = match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => frame,
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => {
                    this.done = true;
                    let rest = this.stream.finish();
                    if rest.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(rest)))));
                }
            };
            let frame = match frame.into_data() {
                Ok(data) => {
                    let out = this.stream.push(&data);
                    if out.is_empty() {
                        continue;
                    }
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                }
                Err(frame) => frame,
            };
            let Ok(mut trailers) = frame.into_trailers() else {
                continue;
            };
            this.egress.swap_back_headers(&mut trailers);
            this.done = true;
            let rest = this.stream.finish();
            if rest.is_empty() {
                return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
            }
            this.trailers = Some(trailers);
            return Poll::Ready(Some(Ok(Frame::data(Bytes::from(rest)))));
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.trailers.is_none()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        if self.exact {
            self.inner.size_hint()
        } else {
            hyper::body::SizeHint::default()
        }
    }
}

/// What one accepted connection needs.
#[derive(Clone)]
struct Connection {
    egress: Arc<Egress>,
    slots: Arc<Semaphore>,
    alive: watch::Receiver<()>,
}

impl Connection {
    async fn serve(self, stream: TcpStream) {
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let this = self.clone();
            async move {
                let answer = if req.method() == Method::CONNECT {
                    this.tunnel(req).await
                } else {
                    this.forward(req).await
                };
                Ok::<_, Infallible>(answer.unwrap_or_else(Refusal::response))
            }
        });
        let served = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT)
            .preserve_header_case(true)
            .title_case_headers(true)
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades()
            .await;
        if let Err(e) = served {
            tracing::debug!("egress proxy: connection ended: {e}");
        }
    }

    /// `CONNECT host:port`: checks, connects, answers 200 and then copies
    /// bytes both ways until either side closes.
    async fn tunnel(
        &self,
        req: Request<Incoming>,
    ) -> std::result::Result<Response<ProxyBody>, Refusal> {
        let authority = req.uri().authority().cloned().ok_or_else(|| {
            Refusal::new(StatusCode::BAD_REQUEST, "CONNECT needs a host:port target")
        })?;
        if authority.port_u16().is_none() {
            return Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                "CONNECT needs a host:port target",
            ));
        }
        let target = parse_target(authority.as_str())?;
        let slot = self.slots.clone().try_acquire_owned().map_err(|_| {
            Refusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("this sandbox already has {MAX_EGRESS_CONNECTIONS} connections open"),
            )
        })?;
        let mut upstream = self.egress.connect(target.host(), target.port()).await?;
        tracing::debug!("egress proxy: tunnel to {authority}");
        tokio::spawn(until_closed(self.alive.clone(), async move {
            match hyper::upgrade::on(req).await {
                Ok(upgraded) => {
                    let mut client = TokioIo::new(upgraded);
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                }
                Err(e) => tracing::debug!("egress proxy: upgrade failed: {e}"),
            }
            drop(slot);
        }));
        Ok(Response::new(empty()))
    }

    /// A plain-HTTP request in absolute form: checks, connects, sends it on
    /// in origin form with the placeholders of bound secrets swapped, and
    /// streams the answer back.
    async fn forward(
        &self,
        req: Request<Incoming>,
    ) -> std::result::Result<Response<ProxyBody>, Refusal> {
        match req.uri().scheme_str() {
            Some("http") => {}
            Some(_) => {
                return Err(Refusal::new(
                    StatusCode::BAD_REQUEST,
                    "only http:// requests are forwarded; for https the client must tunnel \
                     with CONNECT (it does when HTTPS_PROXY is set)",
                ));
            }
            None => {
                return Err(Refusal::new(
                    StatusCode::BAD_REQUEST,
                    "this is cubby's egress proxy: send requests through it (HTTP_PROXY, \
                     HTTPS_PROXY), not to it",
                ));
            }
        }
        let authority =
            req.uri().authority().cloned().ok_or_else(|| {
                Refusal::new(StatusCode::BAD_REQUEST, "the request URL has no host")
            })?;
        let target = parse_target(authority.as_str())?;
        let host = target.host().clone();
        let upstream = self.egress.connect(&host, target.port()).await?;
        let (mut parts, body) = req.into_parts();
        remove_hop_by_hop(&mut parts.headers);
        // RFC 9112 §3.2.2: the target URI's authority replaces any Host.
        let host_header = HeaderValue::from_str(authority.as_str())
            .map_err(|_| Refusal::new(StatusCode::BAD_REQUEST, "the request's host is invalid"))?;
        parts.headers.insert(header::HOST, host_header);
        self.egress.inject(&host, &mut parts.headers);
        let bound = self.egress.binds(&host);
        if bound {
            // A compressed answer could carry a secret's value where the
            // swap-back cannot see it: ask for the body as it is.
            parts.headers.insert(
                header::ACCEPT_ENCODING,
                HeaderValue::from_static("identity"),
            );
        }
        parts.uri = parts.uri.path_and_query().map_or_else(
            || Uri::from_static("/"),
            |pq| Uri::try_from(pq.as_str()).unwrap_or_else(|_| Uri::from_static("/")),
        );
        let bad_gateway = |e: hyper::Error| {
            Refusal::new(
                StatusCode::BAD_GATEWAY,
                format!("{authority}: the request failed: {e}"),
            )
        };
        let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
            .preserve_header_case(true)
            .title_case_headers(true)
            .handshake(TokioIo::new(upstream))
            .await
            .map_err(bad_gateway)?;
        tokio::spawn(until_closed(self.alive.clone(), async move {
            if let Err(e) = conn.await {
                tracing::debug!("egress proxy: upstream connection ended: {e}");
            }
        }));
        let response = sender
            .send_request(Request::from_parts(parts, body))
            .await
            .map_err(bad_gateway)?;
        let (mut parts, body) = response.into_parts();
        if bound {
            return self.egress.swap_back(authority.as_str(), parts, body);
        }
        remove_hop_by_hop(&mut parts.headers);
        Ok(Response::from_parts(parts, body.boxed()))
    }
}

/// The host and port of a request's target, held to the web tools' strict
/// host rules (no user info, no `%`, no odd IPv4 forms, ASCII only).
fn parse_target(authority: &str) -> std::result::Result<WebUrl, Refusal> {
    WebUrl::parse(&format!("http://{authority}/")).map_err(|e| {
        Refusal::new(
            StatusCode::BAD_REQUEST,
            format!(
                "the target `{}` is not accepted: {}",
                truncate_for_message(authority),
                e.message()
            ),
        )
    })
}

/// Headers that belong to one connection, not to the request (RFC 9110
/// §7.6.1), plus those the `Connection` header names.
fn remove_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
    headers.remove("keep-alive");
    headers.remove("proxy-connection");
}

fn empty() -> ProxyBody {
    Full::new(Bytes::new())
        .map_err(|never| match never {})
        .boxed()
}

/// The proxy's own answer when it will not or cannot pass a request on.
#[derive(Debug)]
struct Refusal {
    status: StatusCode,
    message: String,
}

impl Refusal {
    fn new(status: StatusCode, message: impl Into<String>) -> Refusal {
        Refusal {
            status,
            message: message.into(),
        }
    }

    fn from_error(err: Error) -> Refusal {
        let status = match err.kind() {
            ErrorKind::Denied => StatusCode::FORBIDDEN,
            ErrorKind::InvalidInput => StatusCode::BAD_REQUEST,
            _ => StatusCode::BAD_GATEWAY,
        };
        Refusal::new(status, err.message())
    }

    fn response(self) -> Response<ProxyBody> {
        tracing::debug!("egress proxy: {} {}", self.status, self.message);
        let body = format!("cubby egress proxy: {}\n", self.message);
        let mut response = Response::new(
            Full::new(Bytes::from(body))
                .map_err(|never| match never {})
                .boxed(),
        );
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        headers.insert(REFUSAL_HEADER, HeaderValue::from_static("refused"));
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn injection(hosts: &[&str], headers: &[&str]) -> Injection {
        Injection {
            name: "API_TOKEN".into(),
            value: "real-value".into(),
            hosts: hosts.iter().map(|s| s.to_string()).collect(),
            headers: headers.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn egress(inject: Vec<Injection>) -> Egress {
        Egress::new(&EgressOptions {
            rules: NetworkConfig::default(),
            inject,
        })
        .unwrap()
    }

    #[test]
    fn placeholders_are_swapped_only_for_bound_hosts_and_headers() {
        let e = egress(vec![injection(&["api.example.com"], &["authorization"])]);
        let placeholder = e.bindings[0].placeholder.clone();
        assert!(placeholder.starts_with("cubby-placeholder-API_TOKEN-"));
        let headers = || {
            let mut h = HeaderMap::new();
            h.insert(
                header::AUTHORIZATION,
                HeaderValue::from_str(&format!("Bearer {placeholder}")).unwrap(),
            );
            h.insert("x-other", HeaderValue::from_str(&placeholder).unwrap());
            h
        };
        let bound = Host::Domain("v2.api.example.com".into());
        let mut h = headers();
        e.inject(&bound, &mut h);
        assert_eq!(h[header::AUTHORIZATION], "Bearer real-value");
        assert_eq!(h["x-other"], placeholder.as_str());

        for other in [
            "example.com",
            "api.example.com.evil.test",
            "badapi.example.com",
        ] {
            let mut h = headers();
            e.inject(&Host::Domain(other.into()), &mut h);
            assert_eq!(
                h[header::AUTHORIZATION],
                format!("Bearer {placeholder}").as_str(),
                "{other}"
            );
        }

        let all = egress(vec![injection(&["api.example.com"], &[])]);
        let p = all.bindings[0].placeholder.clone();
        let mut h = HeaderMap::new();
        h.insert(
            "x-api-key",
            HeaderValue::from_str(&format!("{p},{p}")).unwrap(),
        );
        all.inject(&Host::Domain("api.example.com".into()), &mut h);
        assert_eq!(h["x-api-key"], "real-value,real-value");
    }

    #[test]
    fn placeholders_differ_per_sandbox() {
        let a = egress(vec![injection(&["a.test"], &[])]);
        let b = egress(vec![injection(&["a.test"], &[])]);
        assert_ne!(a.bindings[0].placeholder, b.bindings[0].placeholder);
    }

    #[test]
    fn bad_injections_are_refused_with_the_reason() {
        let cases = [
            (injection(&[], &[]), "`hosts` is empty"),
            (injection(&["exa mple.com"], &[]), "is not a domain"),
            (
                injection(&["a.test"], &["bad header"]),
                "is not a header name",
            ),
            (
                Injection {
                    value: "line\nbreak".into(),
                    ..injection(&["a.test"], &[])
                },
                "cannot be sent in a header",
            ),
            (
                Injection {
                    name: "A=B".into(),
                    ..injection(&["a.test"], &[])
                },
                "environment variable name",
            ),
        ];
        for (inj, want) in cases {
            let err = Egress::new(&EgressOptions {
                rules: NetworkConfig::default(),
                inject: vec![inj],
            })
            .unwrap_err();
            assert!(err.message().contains(want), "{err}");
        }
    }

    #[test]
    fn hop_by_hop_headers_are_dropped() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-secret-hop"),
        );
        h.insert("x-secret-hop", HeaderValue::from_static("1"));
        h.insert(
            "proxy-authorization",
            HeaderValue::from_static("Basic eA=="),
        );
        h.insert("proxy-connection", HeaderValue::from_static("keep-alive"));
        h.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        remove_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1, "{h:?}");
        assert!(h.contains_key(header::ACCEPT));
    }

    #[test]
    fn the_proxy_environment_names_the_port_and_the_placeholders() {
        let e = egress(vec![injection(&["a.test"], &[])]);
        let env = e.command_env(4711);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("HTTPS_PROXY").unwrap(), "http://127.0.0.1:4711");
        assert_eq!(get("http_proxy").unwrap(), "http://127.0.0.1:4711");
        assert!(get("NO_PROXY").unwrap().contains("127.0.0.1"));
        assert_eq!(get("API_TOKEN").unwrap(), e.bindings[0].placeholder);
    }

    /// A scripted upstream on 127.0.0.1: answers by path, reflecting the
    /// request's `Authorization` (or, for `/stored`, the last one seen);
    /// records each request's head and every answer it wrote.
    struct Upstream {
        port: u16,
        seen: Arc<std::sync::Mutex<Vec<(String, String)>>>,
    }

    fn upstream() -> Upstream {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(std::sync::Mutex::new(Vec::<(String, String)>::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            let mut last_auth = String::new();
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if conn.read(&mut byte).unwrap_or(0) == 0 {
                        break;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let path = head.split(' ').nth(1).unwrap_or("").to_string();
                if path == "/quit" {
                    return;
                }
                let auth = head
                    .lines()
                    .find_map(|l| l.strip_prefix("Authorization: Bearer "))
                    .map(str::to_string);
                if let Some(a) = &auth {
                    last_auth = a.clone();
                }
                let a = auth.unwrap_or_else(|| last_auth.clone());
                let answer = match path.as_str() {
                    "/len" | "/stored" => {
                        let body = format!("auth={a}\n");
                        format!(
                            "HTTP/1.1 200 OK\r\nX-Echo: Bearer {a}\r\nX-{a}: 1\r\n\
                             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        )
                    }
                    "/chunked" => {
                        // The value split across one-byte chunks.
                        let mut out = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\
                                       Trailer: X-Late\r\nConnection: close\r\n\r\n"
                            .to_string();
                        for c in format!("auth={a}\n").chars() {
                            out.push_str(&format!("1\r\n{c}\r\n"));
                        }
                        out.push_str(&format!("0\r\nX-Late: {a}\r\n\r\n"));
                        out
                    }
                    "/reason" => format!(
                        "HTTP/1.1 200 {a}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    ),
                    "/gzip" => "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\
                                Content-Length: 4\r\nConnection: close\r\n\r\nabcd"
                        .to_string(),
                    _ => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_string(),
                };
                // Recorded before it is written: the proxy relays an
                // answer of known length as soon as it has read it, and the
                // test reads the record as soon as the relayed answer ends.
                log.lock().unwrap().push((head, answer.clone()));
                let _ = conn.write_all(answer.as_bytes());
            }
        });
        Upstream { port, seen }
    }

    impl Drop for Upstream {
        fn drop(&mut self) {
            use std::io::Write;
            if let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = c.write_all(b"GET /quit HTTP/1.1\r\n\r\n");
            }
        }
    }

    struct Loopback;

    impl Resolver for Loopback {
        fn resolve(&self, _: &str) -> std::io::Result<Vec<std::net::IpAddr>> {
            Ok(vec![std::net::Ipv4Addr::LOCALHOST.into()])
        }
    }

    /// A proxy on 127.0.0.1 whose secret `API_TOKEN` (value
    /// `real-value`) is bound to `bound.test`; `other.test` is allowed too.
    fn proxy() -> (EgressProxy, String) {
        let mut egress = Egress::new(&EgressOptions {
            rules: NetworkConfig {
                allowed_domains: vec!["bound.test".into(), "other.test".into()],
                allowed_cidrs: vec!["127.0.0.1/32".into()],
                ..NetworkConfig::default()
            },
            inject: vec![injection(&["bound.test"], &["authorization"])],
        })
        .unwrap();
        egress.set_resolver(Arc::new(Loopback));
        let placeholder = egress.bindings[0].placeholder.clone();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy = EgressProxy::start(OwnedFd::from(listener), Arc::new(egress)).unwrap();
        (proxy, placeholder)
    }

    /// What a command gets asking the proxy for `http://host:port/path`
    /// with the placeholder in `Authorization` (`with_auth`).
    fn get(proxy: &EgressProxy, host: &str, port: u16, path: &str, auth: Option<&str>) -> String {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let auth = auth.map_or(String::new(), |a| format!("Authorization: Bearer {a}\r\n"));
        write!(
            c,
            "GET http://{host}:{port}{path} HTTP/1.1\r\nHost: {host}\r\nTE: trailers\r\n\
             Accept-Encoding: gzip\r\n{auth}Connection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn a_bound_hosts_answers_never_hold_the_real_value() {
        let up = upstream();
        let (proxy, placeholder) = proxy();
        let p = placeholder.as_str();
        let swapped = |path: &str| {
            let got = get(&proxy, "bound.test", up.port, path, Some(p));
            // Control: the upstream received the real value and wrote it
            // into this answer.
            let seen = up.seen.lock().unwrap();
            let (head, answer) = seen.last().unwrap();
            assert!(head.contains("Bearer real-value\r\n"), "{head}");
            assert!(answer.contains("real-value"), "{answer}");
            drop(seen);
            assert!(
                !got.to_ascii_lowercase().contains("real-value"),
                "{path}: {got}"
            );
            got
        };
        let got = swapped("/len");
        assert!(got.contains(&format!("X-Echo: Bearer {p}\r\n")), "{got}");
        // Re-framed: the placeholder is longer than the value.
        let lower = got.to_ascii_lowercase();
        assert!(!lower.contains("content-length"), "{got}");
        assert!(lower.contains("transfer-encoding: chunked\r\n"), "{got}");
        assert_eq!(dechunk(&got), format!("auth={p}\n"));
        let got = swapped("/chunked");
        assert_eq!(dechunk(&got), format!("auth={p}\n"));
        let got = swapped("/reason");
        assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
        // The bound host was asked for an uncompressed answer; a compressed
        // one is refused.
        let got = get(&proxy, "bound.test", up.port, "/gzip", Some(p));
        assert!(got.starts_with("HTTP/1.1 502"), "{got}");
        assert!(got.contains("relayed only uncompressed"), "{got}");
        let seen = up.seen.lock().unwrap();
        assert!(
            seen.last()
                .unwrap()
                .0
                .contains("Accept-Encoding: identity\r\n")
        );
        drop(seen);
        // A value the host stored and serves later, to a request without it.
        let got = get(&proxy, "bound.test", up.port, "/stored", None);
        assert!(
            up.seen
                .lock()
                .unwrap()
                .last()
                .unwrap()
                .1
                .contains("real-value")
        );
        assert!(!got.contains("real-value"), "{got}");
        assert!(got.contains(&format!("auth={p}")), "{got}");
        // Another host is not rewritten (it never got the value).
        let got = get(&proxy, "other.test", up.port, "/len", Some(p));
        assert!(got.contains(&format!("auth={p}\n")), "{got}");
        assert!(got.contains("Content-Length: "), "{got}");
        let got = get(&proxy, "other.test", up.port, "/gzip", Some(p));
        assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    }

    /// The body of a chunked HTTP/1.1 answer.
    fn dechunk(answer: &str) -> String {
        let (_, mut rest) = answer.split_once("\r\n\r\n").unwrap();
        let mut body = String::new();
        loop {
            let (size, after) = rest.split_once("\r\n").unwrap();
            let n = usize::from_str_radix(size.trim(), 16).unwrap();
            if n == 0 {
                return body;
            }
            body.push_str(&after[..n]);
            rest = &after[n + 2..];
        }
    }
}
