//! The accept loop of cubby's HTTP servers (`cubby serve`'s `/mcp` and
//! `/v1`, and [`crate::host::http::serve`]), and the budget of request
//! bytes they hold at once.
//!
//! A client without a token must not be able to take the server from
//! everyone else (red-team pass 6, F3). So:
//!
//! - A connection has [`HEADER_READ_TIMEOUT`] to send a complete request
//!   head, from its accept and again after each answer (hyper starts the
//!   clock when it begins reading a head, with no byte received yet, so an
//!   idle keep-alive connection is closed after the same time): a half-sent
//!   head or an idle connection holds a descriptor for that long at most.
//! - At most [`ConnectionLimits::max_connections`] connections are served
//!   at once. At the cap the loop **waits** (stops accepting): the waiting
//!   clients queue in the kernel's backlog, cost the server no descriptor,
//!   and are served in their order as connections end (at the latest when a
//!   silent one's head timeout fires).
//! - One peer address (an IPv6 peer: its /64) holds at most
//!   [`ConnectionLimits::max_per_peer`] of them; a connection past that is
//!   **accepted and closed** at once (its address is only known after the
//!   accept), so a single client cannot fill the server and leaves room
//!   for others (a kubelet's probe of `/healthz`, the token holder).
//!
//! - A request body must keep coming ([`PacedBody`]): no more than
//!   [`BodyPace::stall`] without a byte, and after [`BodyPace::grace`] an
//!   average of at least [`BodyPace::min_bytes_per_sec`]; a body that falls
//!   behind breaks off (its handler sees an error and answers it), so a
//!   half-sent body holds its connection, its share of the
//!   [`BodyBudget`] and whatever its route took (an MCP session slot) for a
//!   bounded time.
//!
//! Everything is HTTP/1.1 (no HTTP/2: the header timeout is HTTP/1's).

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::{Request, Response};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use crate::sync::lock;

/// Longest a connection may take to send a complete request head, counted
/// from its accept or from the end of its previous answer (an idle
/// keep-alive connection is closed after it too).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Most connections a server serves at once (lowered to a
/// [`CONNECTION_FD_SHARE`] of the open-files limit when that is smaller).
pub const MAX_CONNECTIONS: usize = 1024;
/// Most connections one peer address holds at once (lowered to half of the
/// server's cap when that is smaller).
pub const MAX_CONNECTIONS_PER_PEER: usize = 256;
/// Connections may use at most the soft `RLIMIT_NOFILE` divided by this:
/// the rest stays for commands' pipes, file calls and the sandboxes.
pub const CONNECTION_FD_SHARE: u64 = 4;
/// Bytes of request bodies a server holds in memory at once, over all its
/// connections (a body is counted from its head until its request is done).
pub const MAX_BODY_BUDGET_BYTES: usize = 256 * 1024 * 1024;
/// Longest a request body may go without a byte once its handler reads it.
pub const BODY_STALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Time a request body has before [`MIN_BODY_BYTES_PER_SEC`] applies.
pub const BODY_GRACE: Duration = Duration::from_secs(30);
/// Slowest average a request body may arrive at after [`BODY_GRACE`]
/// (a 64 MiB body within about 4.8 minutes).
pub const MIN_BODY_BYTES_PER_SEC: u64 = 256 * 1024;
/// Pause after a failed `accept` (descriptors exhausted) before the next.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// Bits of an IPv6 peer's address that name it for the per-peer cap (a
/// host holds a whole /64).
const IPV6_PEER_PREFIX_BITS: u32 = 64;

/// The limits of one server's connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Most connections served at once (the loop waits at the cap).
    pub max_connections: usize,
    /// Most connections of one peer address (more are closed at once).
    pub max_per_peer: usize,
    /// Longest wait for a complete request head.
    pub header_read_timeout: Duration,
    /// How fast a request body must keep coming.
    pub body_pace: BodyPace,
}

/// How fast a request body must arrive ([`PacedBody`]), counted from the
/// first time its handler reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyPace {
    /// Longest time without a byte.
    pub stall: Duration,
    /// Time before `min_bytes_per_sec` applies.
    pub grace: Duration,
    /// Slowest average after `grace`, in bytes a second.
    pub min_bytes_per_sec: u64,
}

impl Default for BodyPace {
    /// [`BODY_STALL_TIMEOUT`], [`BODY_GRACE`], [`MIN_BODY_BYTES_PER_SEC`].
    fn default() -> BodyPace {
        BodyPace {
            stall: BODY_STALL_TIMEOUT,
            grace: BODY_GRACE,
            min_bytes_per_sec: MIN_BODY_BYTES_PER_SEC,
        }
    }
}

impl ConnectionLimits {
    /// [`MAX_CONNECTIONS`], [`MAX_CONNECTIONS_PER_PEER`] and
    /// [`HEADER_READ_TIMEOUT`], lowered to fit this process's soft
    /// `RLIMIT_NOFILE` as read now (see [`CONNECTION_FD_SHARE`]).
    pub fn for_this_process() -> ConnectionLimits {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        ConnectionLimits::fitting(soft)
    }

    /// The standard limits under a soft open-files limit of `soft` (`None`:
    /// unlimited).
    pub fn fitting(soft: Option<u64>) -> ConnectionLimits {
        let share = soft.map_or(usize::MAX, |soft| {
            usize::try_from(soft / CONNECTION_FD_SHARE).unwrap_or(usize::MAX)
        });
        let max_connections = MAX_CONNECTIONS.min(share).max(2);
        ConnectionLimits {
            max_connections,
            max_per_peer: MAX_CONNECTIONS_PER_PEER.min(max_connections / 2),
            header_read_timeout: HEADER_READ_TIMEOUT,
            body_pace: BodyPace::default(),
        }
    }
}

/// The address that stands for `ip` in the per-peer count.
fn peer_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let mask = u128::MAX << (128 - IPV6_PEER_PREFIX_BITS);
            IpAddr::V6((u128::from(v6) & mask).into())
        }
        v4 => v4,
    }
}

/// Connections open per peer.
type PeerCounts = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// One connection of a peer, counted until dropped.
struct PeerSlot {
    counts: PeerCounts,
    key: IpAddr,
}

impl PeerSlot {
    /// A slot for `key`, unless it holds `max` already.
    fn take(counts: &PeerCounts, key: IpAddr, max: usize) -> Option<PeerSlot> {
        let mut map = lock(counts);
        let held = map.entry(key).or_insert(0);
        if *held >= max {
            return None;
        }
        *held += 1;
        Some(PeerSlot {
            counts: counts.clone(),
            key,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut map = lock(&self.counts);
        if let Some(held) = map.get_mut(&self.key) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                map.remove(&self.key);
            }
        }
    }
}

/// Serves `service` over HTTP/1.1 on `listener` within `limits` until
/// `shutdown` completes, then stops accepting, lets every connection finish
/// the request it is answering (idle ones close at once) and returns when
/// all have ended.
///
/// `admit` sees each accepted connection first (false: it is closed
/// unanswered); `tune` then sets its socket options.
pub async fn serve_http1<S, B>(
    listener: TcpListener,
    limits: ConnectionLimits,
    admit: impl Fn(&TcpStream, SocketAddr) -> bool,
    tune: impl Fn(&TcpStream),
    service: S,
    shutdown: impl Future<Output = ()>,
) where
    S: hyper::service::Service<Request<PacedBody>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let peers = PeerCounts::default();
    let (stop, _) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!("accept failed: {e}; retrying");
                tokio::select! {
                    () = tokio::time::sleep(ACCEPT_RETRY) => continue,
                    () = &mut shutdown => break,
                }
            }
        };
        let Some(peer_slot) = PeerSlot::take(&peers, peer_key(peer.ip()), limits.max_per_peer)
        else {
            tracing::debug!(
                "closed a connection from {peer}: its address holds {} connections already",
                limits.max_per_peer
            );
            continue;
        };
        if !admit(&stream, peer) {
            continue;
        }
        tracing::trace!("accepted a connection from {peer}");
        tune(&stream);
        tokio::spawn(connection(
            stream,
            service.clone(),
            limits.header_read_timeout,
            limits.body_pace,
            stop.subscribe(),
            (permit, peer_slot),
        ));
    }
    drop(listener);
    stop.send_replace(true);
    // Every connection holds a receiver until it ends.
    stop.closed().await;
}

/// Serves one connection; `held` (its slots) is released when it ends.
async fn connection<S, B>(
    stream: TcpStream,
    service: S,
    header_read_timeout: Duration,
    pace: BodyPace,
    mut stop: watch::Receiver<bool>,
    held: (OwnedSemaphorePermit, PeerSlot),
) where
    S: hyper::service::Service<Request<PacedBody>, Response = Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let served = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .serve_connection(
            hyper_util::rt::TokioIo::new(stream),
            hyper::service::service_fn(move |req: Request<Incoming>| {
                service.call(req.map(|body| PacedBody::new(body, pace)))
            }),
        );
    tokio::pin!(served);
    let ended = tokio::select! {
        ended = served.as_mut() => ended,
        () = async { let _ = stop.wait_for(|stopping| *stopping).await; } => {
            served.as_mut().graceful_shutdown();
            served.await
        }
    };
    if let Err(e) = ended {
        tracing::debug!("a connection ended: {e}");
    }
    drop(held);
}

/// A request body that breaks off when it falls behind its [`BodyPace`]:
/// what every route of [`serve_http1`] reads.
pub struct PacedBody {
    inner: Incoming,
    pace: BodyPace,
    /// When the handler first read it, and the deadline then set.
    clock: Option<(tokio::time::Instant, std::pin::Pin<Box<tokio::time::Sleep>>)>,
    /// Bytes of the body seen so far.
    seen: u64,
    /// It broke off (nothing more is read).
    broken: bool,
}

impl PacedBody {
    fn new(inner: Incoming, pace: BodyPace) -> PacedBody {
        PacedBody {
            inner,
            pace,
            clock: None,
            seen: 0,
            broken: false,
        }
    }

    /// The next deadline: a stall from now, or the average's due time.
    fn deadline(&self, started: tokio::time::Instant) -> tokio::time::Instant {
        let now = tokio::time::Instant::now();
        let rate = self.pace.min_bytes_per_sec.max(1);
        let earned = Duration::from_secs(self.seen / rate)
            + Duration::from_nanos((self.seen % rate) * 1_000_000_000 / rate);
        (now + self.pace.stall).min(started + self.pace.grace + earned)
    }
}

impl std::fmt::Debug for PacedBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacedBody")
            .field("seen", &self.seen)
            .field("broken", &self.broken)
            .finish_non_exhaustive()
    }
}

impl Body for PacedBody {
    type Data = bytes::Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, Self::Error>>> {
        use std::task::Poll;
        let this = &mut *self;
        if this.broken {
            return Poll::Ready(None);
        }
        let polled = std::pin::Pin::new(&mut this.inner).poll_frame(cx);
        if this.clock.is_none() && !this.inner.is_end_stream() {
            let started = tokio::time::Instant::now();
            let first = this.deadline(started);
            this.clock = Some((started, Box::pin(tokio::time::sleep_until(first))));
        }
        match polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.seen = this.seen.saturating_add(data.len() as u64);
                    if let Some((started, _)) = &this.clock {
                        let next = this.deadline(*started);
                        if let Some((_, sleep)) = this.clock.as_mut() {
                            sleep.as_mut().reset(next);
                        }
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(Box::new(e)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let Some((_, sleep)) = this.clock.as_mut() else {
                    return Poll::Pending;
                };
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                this.broken = true;
                tracing::debug!("a request body fell behind after {} bytes", this.seen);
                Poll::Ready(Some(Err(format!(
                    "the request body came too slowly ({} bytes, then nothing for {:?} \
                     or under {} bytes a second); send it at once",
                    this.seen, this.pace.stall, this.pace.min_bytes_per_sec
                )
                .into())))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.broken || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// The bytes of request bodies a server may hold at once
/// ([`MAX_BODY_BUDGET_BYTES`] by default), shared by its routes: a body is
/// reserved ([`BodyBudget::reserve`]) before it is read, and a request that
/// does not fit is refused (429) instead of waiting.
#[derive(Clone, Debug)]
pub struct BodyBudget {
    bytes: Arc<Semaphore>,
    total: usize,
}

impl Default for BodyBudget {
    fn default() -> BodyBudget {
        BodyBudget::new(MAX_BODY_BUDGET_BYTES)
    }
}

impl BodyBudget {
    /// A budget of `total` bytes.
    pub fn new(total: usize) -> BodyBudget {
        let total = total.min(Semaphore::MAX_PERMITS);
        BodyBudget {
            bytes: Arc::new(Semaphore::new(total)),
            total,
        }
    }

    /// Its size in bytes.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Bytes not reserved now.
    pub fn available(&self) -> usize {
        self.bytes.available_permits()
    }

    /// Reserves `n` bytes until the reservation is dropped; `None` when
    /// fewer are free.
    pub fn reserve(&self, n: usize) -> Option<BodyReservation> {
        let mut held = BodyReservation {
            budget: self.clone(),
            permit: None,
            bytes: 0,
        };
        held.grow(n).then_some(held)
    }
}

/// Bytes of a [`BodyBudget`] held by one request body.
#[derive(Debug)]
pub struct BodyReservation {
    budget: BodyBudget,
    permit: Option<OwnedSemaphorePermit>,
    bytes: usize,
}

impl BodyReservation {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Holds `more` bytes besides; false (nothing changed) when the budget
    /// has fewer free.
    pub fn grow(&mut self, more: usize) -> bool {
        if more == 0 {
            return true;
        }
        let Ok(n) = u32::try_from(more) else {
            return false;
        };
        let Ok(extra) = self.budget.bytes.clone().try_acquire_many_owned(n) else {
            return false;
        };
        match self.permit.as_mut() {
            Some(permit) => permit.merge(extra),
            None => self.permit = Some(extra),
        }
        self.bytes += more;
        true
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::io::{Read, Write};
    use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
    use std::time::Instant;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};

    use super::*;

    /// The header timeout of these tests (short, so they are quick).
    const TIMEOUT: Duration = Duration::from_millis(700);
    /// Longest any answer or close these tests wait for beyond its due time.
    const MARGIN: Duration = Duration::from_secs(10);

    /// A client socket from `source` (a loopback address of its own, so
    /// the server counts it as another peer) to `to`.
    fn connect_from(source: Ipv4Addr, to: SocketAddr) -> TcpStream {
        use rustix::net::{AddressFamily, SocketType, bind, connect, socket};
        let fd = socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
        bind(&fd, &SocketAddr::V4(SocketAddrV4::new(source, 0))).unwrap();
        connect(&fd, &to).unwrap();
        let stream = TcpStream::from(fd);
        stream.set_read_timeout(Some(MARGIN)).unwrap();
        stream
    }

    /// Sends the start of a request head, never its end.
    fn half_head(source: Ipv4Addr, to: SocketAddr) -> TcpStream {
        let mut s = connect_from(source, to);
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
        s
    }

    /// Waits for the server to close `s` (anything it says first is read);
    /// how long that took from `since`.
    fn closed(s: &mut TcpStream, since: Instant) -> Duration {
        let mut buf = [0u8; 1024];
        loop {
            match s.read(&mut buf) {
                Ok(0) => return since.elapsed(),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    return since.elapsed();
                }
                Err(e) => panic!("the server did not close the connection: {e}"),
            }
        }
    }

    /// One `GET /` (`Connection: close`) from `source`: the status line.
    fn get(source: Ipv4Addr, to: SocketAddr) -> String {
        let mut s = connect_from(source, to);
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        answer.lines().next().unwrap_or_default().to_string()
    }

    /// A server of `limits` answering `ok` on a runtime of its own: its
    /// address, the sender whose drop shuts it down, the receiver of its
    /// end, and whether a request to `/slow` has reached it.
    struct TestServer {
        rt: tokio::runtime::Runtime,
        addr: SocketAddr,
        stop: Option<tokio::sync::oneshot::Sender<()>>,
        ended: tokio::sync::oneshot::Receiver<()>,
        entered: watch::Receiver<bool>,
    }

    impl TestServer {
        fn start(limits: ConnectionLimits, release: watch::Receiver<bool>) -> TestServer {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            let listener = rt
                .block_on(TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
                .unwrap();
            let addr = listener.local_addr().unwrap();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let (done, ended) = tokio::sync::oneshot::channel();
            // `/slow` says it was entered and answers once `release` says so.
            let (enter, entered) = watch::channel(false);
            let enter = Arc::new(enter);
            let service = hyper::service::service_fn(move |req: Request<PacedBody>| {
                let mut release = release.clone();
                let enter = enter.clone();
                async move {
                    // `/body` reads the body: its length, or 408 when it broke off.
                    if req.uri().path() == "/body" {
                        let (status, said) = match req.into_body().collect().await {
                            Ok(body) => (200, body.to_bytes().len().to_string()),
                            Err(e) => (408, e.to_string()),
                        };
                        let mut answer = Response::new(Full::new(Bytes::from(said)).boxed_unsync());
                        *answer.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                        return Ok::<_, std::convert::Infallible>(answer);
                    }
                    if req.uri().path() == "/slow" {
                        enter.send_replace(true);
                        let _ = release.wait_for(|go| *go).await;
                    }
                    let body = if req.uri().path() == "/trickle" {
                        Trickle {
                            left: TRICKLE_CHUNKS,
                            pause: Box::pin(tokio::time::sleep(TRICKLE_PAUSE)),
                        }
                        .boxed_unsync()
                    } else {
                        Full::new(Bytes::from("ok\n")).boxed_unsync()
                    };
                    Ok::<_, std::convert::Infallible>(Response::new(body))
                }
            });
            rt.spawn(async move {
                serve_http1(listener, limits, |_, _| true, |_| {}, service, async move {
                    let _ = stopped.await;
                })
                .await;
                let _ = done.send(());
            });
            TestServer {
                rt,
                addr,
                stop: Some(stop),
                ended,
                entered,
            }
        }
    }

    /// Chunks of `/trickle`'s answer, one each [`TRICKLE_PAUSE`]: it lasts
    /// longer than the header timeout.
    const TRICKLE_CHUNKS: u32 = 6;
    const TRICKLE_PAUSE: Duration = Duration::from_millis(250);

    /// An answer that comes slowly: `x` after each pause.
    struct Trickle {
        left: u32,
        pause: std::pin::Pin<Box<tokio::time::Sleep>>,
    }

    impl Body for Trickle {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
            if self.left == 0 {
                return std::task::Poll::Ready(None);
            }
            std::task::ready!(self.pause.as_mut().poll(cx));
            self.left -= 1;
            let next = tokio::time::Instant::now() + TRICKLE_PAUSE;
            self.pause.as_mut().reset(next);
            std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(Bytes::from("x")))))
        }
    }

    /// A server whose bodies must keep `pace` (one these tests can see
    /// quickly).
    fn paced_server(pace: BodyPace) -> TestServer {
        let limits = ConnectionLimits {
            max_connections: 8,
            max_per_peer: 8,
            header_read_timeout: MARGIN,
            body_pace: pace,
        };
        // `/body` does not wait for a release.
        TestServer::start(limits, watch::channel(true).1)
    }

    /// Sends `POST /body` declaring `length` bytes, then `chunks` of `each`
    /// bytes `pause` apart (stopping when the server has closed); the
    /// answer's status line and body, and how long it took from the head.
    fn post_paced(
        to: SocketAddr,
        length: usize,
        chunks: usize,
        each: usize,
        pause: Duration,
    ) -> (String, Duration) {
        let mut s = connect_from(Ipv4Addr::LOCALHOST, to);
        let since = Instant::now();
        write!(
            s,
            "POST /body HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {length}\r\n\r\n"
        )
        .unwrap();
        let mut writer = s.try_clone().unwrap();
        let sending = std::thread::spawn(move || {
            for _ in 0..chunks {
                if writer.write_all(&vec![b'x'; each]).is_err() {
                    return;
                }
                std::thread::sleep(pause);
            }
        });
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        let took = since.elapsed();
        drop(s);
        sending.join().unwrap();
        (answer, took)
    }

    #[test]
    fn a_stalled_request_body_breaks_off() {
        let stall = Duration::from_millis(500);
        let server = paced_server(BodyPace {
            stall,
            grace: MARGIN * 6,
            min_bytes_per_sec: 1,
        });
        // Ten bytes of a hundred, then nothing.
        let (answer, took) = post_paced(server.addr, 100, 1, 10, MARGIN * 2);
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("came too slowly (10 bytes"), "{answer}");
        assert!(took >= stall && took < MARGIN, "{took:?}");
    }

    #[test]
    fn a_trickled_request_body_breaks_off_after_its_grace() {
        let grace = Duration::from_millis(800);
        let server = paced_server(BodyPace {
            stall: MARGIN,
            grace,
            min_bytes_per_sec: 1000,
        });
        // A byte every 50 ms (never a stall): 20 bytes a second.
        let (answer, took) = post_paced(server.addr, 1000, 1000, 1, Duration::from_millis(50));
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(took >= grace && took < MARGIN, "{took:?}");
    }

    #[test]
    fn a_request_body_at_its_pace_is_read_whole() {
        let server = paced_server(BodyPace {
            stall: Duration::from_millis(600),
            grace: Duration::from_millis(300),
            min_bytes_per_sec: 200,
        });
        // 100 bytes every 100 ms for a second: longer than the grace and
        // than a stall, at 1,000 bytes a second.
        let (answer, took) = post_paced(server.addr, 1000, 10, 100, Duration::from_millis(100));
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("\r\n\r\n1000"), "{answer}");
        assert!(took >= Duration::from_millis(900), "{took:?}");
    }

    #[test]
    fn an_answer_longer_than_the_header_timeout_is_not_cut() {
        let limits = ConnectionLimits {
            max_connections: 8,
            max_per_peer: 8,
            header_read_timeout: TIMEOUT,
            body_pace: BodyPace::default(),
        };
        assert!(TRICKLE_PAUSE * TRICKLE_CHUNKS > TIMEOUT);
        let (_release, held) = watch::channel(true);
        let server = TestServer::start(limits, held);
        let mut s = connect_from(peer(1), server.addr);
        s.write_all(b"GET /trickle HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert_eq!(answer.matches("\r\nx\r\n").count(), 6, "{answer}");
        assert!(answer.ends_with("0\r\n\r\n"), "{answer}");
    }

    fn peer(n: u8) -> Ipv4Addr {
        Ipv4Addr::new(127, 0, 0, n)
    }

    #[test]
    fn half_sent_heads_and_idle_connections_are_closed_and_one_peer_cannot_fill_it() {
        let limits = ConnectionLimits {
            max_connections: 8,
            max_per_peer: 3,
            header_read_timeout: TIMEOUT,
            body_pace: BodyPace::default(),
        };
        let (_release, held) = watch::channel(true);
        let server = TestServer::start(limits, held);
        let addr = server.addr;
        let start = Instant::now();
        let mut halves: Vec<TcpStream> = (0..3).map(|_| half_head(peer(1), addr)).collect();
        // The peer's fourth is closed at once, long before any timeout.
        let since = Instant::now();
        let mut extra = half_head(peer(1), addr);
        let took = closed(&mut extra, since);
        assert!(took < TIMEOUT / 2, "closed after {took:?}");
        // Another peer is served meanwhile.
        assert_eq!(get(peer(2), addr), "HTTP/1.1 200 OK");
        // The half-sent heads are closed by the header timeout.
        for s in &mut halves {
            let took = closed(s, start);
            assert!(
                took >= TIMEOUT / 2 && took < TIMEOUT + MARGIN,
                "closed after {took:?}"
            );
        }
        // A kept-alive connection idle after its answer: closed as well.
        let mut idle = connect_from(peer(3), addr);
        idle.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut buf = [0u8; 256];
        let n = idle.read(&mut buf).unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        let since = Instant::now();
        let took = closed(&mut idle, since);
        assert!(
            took >= TIMEOUT / 2 && took < TIMEOUT + MARGIN,
            "closed after {took:?}"
        );
        drop(server);
    }

    #[test]
    fn at_the_cap_a_connection_waits_for_a_slot() {
        let limits = ConnectionLimits {
            max_connections: 2,
            max_per_peer: 2,
            header_read_timeout: TIMEOUT,
            body_pace: BodyPace::default(),
        };
        let (_release, held) = watch::channel(true);
        let server = TestServer::start(limits, held);
        let start = Instant::now();
        let _halves: Vec<TcpStream> = (1..=2).map(|n| half_head(peer(n), server.addr)).collect();
        // Not refused: answered once a half-sent head's timeout frees a slot.
        assert_eq!(get(peer(3), server.addr), "HTTP/1.1 200 OK");
        let took = start.elapsed();
        assert!(
            took >= TIMEOUT / 2 && took < TIMEOUT + MARGIN,
            "answered after {took:?}"
        );
    }

    #[test]
    fn a_shutdown_lets_the_request_in_flight_finish() {
        let limits = ConnectionLimits {
            max_connections: 8,
            max_per_peer: 8,
            header_read_timeout: TIMEOUT,
            body_pace: BodyPace::default(),
        };
        let (release, held) = watch::channel(false);
        let mut server = TestServer::start(limits, held);
        let mut slow = connect_from(peer(1), server.addr);
        slow.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut entered = server.entered.clone();
        server
            .rt
            .block_on(async { tokio::time::timeout(MARGIN, entered.wait_for(|e| *e)).await })
            .unwrap()
            .unwrap();
        drop(server.stop.take());
        // The server waits for the slow answer.
        let waiting = server
            .rt
            .block_on(async { tokio::time::timeout(TIMEOUT, &mut server.ended).await })
            .is_err();
        assert!(waiting, "the server ended with a request in flight");
        release.send_replace(true);
        let mut answer = String::new();
        slow.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("ok\n"), "{answer}");
        server
            .rt
            .block_on(async { tokio::time::timeout(MARGIN, &mut server.ended).await })
            .unwrap()
            .unwrap();
        // It no longer listens.
        assert!(TcpStream::connect(server.addr).is_err());
    }

    #[test]
    fn standard_limits_fit_the_open_files_limit() {
        let roomy = ConnectionLimits::fitting(Some(1 << 20));
        assert_eq!(roomy.max_connections, MAX_CONNECTIONS);
        assert_eq!(roomy.max_per_peer, MAX_CONNECTIONS_PER_PEER);
        assert_eq!(roomy.header_read_timeout, HEADER_READ_TIMEOUT);
        let tight = ConnectionLimits::fitting(Some(1024));
        assert_eq!(tight.max_connections, 256);
        assert_eq!(tight.max_per_peer, 128);
        assert_eq!(ConnectionLimits::fitting(None), roomy);
    }

    #[test]
    fn a_budget_refuses_what_does_not_fit_and_frees_on_drop() {
        let budget = BodyBudget::new(100);
        let mut a = budget.reserve(60).unwrap();
        assert!(budget.reserve(41).is_none());
        assert!(a.grow(40));
        assert_eq!(a.bytes(), 100);
        assert!(!a.grow(1));
        assert_eq!(budget.available(), 0);
        drop(a);
        assert_eq!(budget.available(), 100);
        assert!(budget.reserve(101).is_none());
        assert!(budget.reserve(0).is_some());
    }
}
