//! The `kubernetes` provider against a Kubernetes API stand-in on loopback
//! (no cluster can run here; the API server is an outer edge). The stand-in
//! serves just what the provider uses — create, get, watch and delete of
//! `SandboxClaim`s — and its warm pool's pod is a real `cubby serve --host
//! --host-bind` with the pool key as its token, started before any claim
//! (as a warm pool's are), adopted by a claim once its `/healthz` answers
//! (the readiness probe), and killed when the claim is deleted.
//!
//! Cases: the full flow (claim, watch until Ready, bind, `write_file` and
//! `run` through it, the claim deleted when the sandbox ends), through the
//! library and through `cubby call` with a config file; the bind's rules
//! (the pool key dead after it, a second bind refused); a claim that never
//! becomes Ready (a `timeout` naming the claim and its condition, the
//! claim deleted); the pod lost mid-run (`ERROR network` within 10 s).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use cubby::kubernetes::ClaimOptions;
use serde_json::{Value, json};

/// Longest wait for the pod's server to say where it listens.
const START_WAIT: Duration = Duration::from_secs(60);
/// What SPEC §7 allows a lost far side to hold a call.
const NETWORK_ERROR_WITHIN: Duration = Duration::from_secs(10);
/// How long a watch waits for a change before it looks at the stand-in's
/// stop flag again.
const WATCH_TICK: Duration = Duration::from_millis(100);
/// How long a deleted pod's server has to end after SIGTERM (the kubelet's
/// default grace period is 30 s).
const POD_GRACE: Duration = Duration::from_secs(30);
/// Longest a request to the stand-in may take to arrive whole.
const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The bearer token the stand-in wants for its API.
const API_TOKEN: &str = "stand-in-api-token";
/// The namespace and the warm pool of every case.
const NAMESPACE: &str = "cubby";
const POOL: &str = "cubby";
/// The claims' API path.
const CLAIMS: &str = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/cubby/sandboxclaims";

fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut b)
        .unwrap();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The warm pool's pod: a real `cubby serve --host --host-bind`.
struct Pod {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Pod {
    fn start(pool_key: &str) -> Pod {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let key_file = dir.path().join("key");
        std::fs::write(&key_file, format!("{pool_key}\n")).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_cubby"))
            .args(["serve", "--host", "--host-bind", "--listen", "127.0.0.1:0"])
            .arg("--token-file")
            .arg(&key_file)
            .arg("--host-dir")
            .arg(dir.path().join("sandboxes"))
            .arg("--root")
            .arg(&root)
            .args(["--provider", "linux"])
            .env_remove("CUBBY_TOKEN")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (addr, _reader) = common::listening_address(&mut child, "pod", START_WAIT, None);
        let port = addr.rsplit_once(':').unwrap().1.parse().unwrap();
        Pod {
            child,
            port,
            _dir: dir,
        }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A node lost: SIGKILL.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// A pod deleted: SIGTERM, as the kubelet sends, then SIGKILL after the
    /// grace period.
    fn delete(&mut self) {
        let pid = rustix::process::Pid::from_child(&self.child);
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        let deadline = Instant::now() + POD_GRACE;
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        self.delete();
    }
}

/// What the stand-in's claims do.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Behaviour {
    /// A claim adopts the warm pod once its `/healthz` answers.
    Adopt,
    /// A claim stays pending for ever (no warm pod).
    NeverReady,
}

/// The stand-in's state.
#[derive(Default)]
struct State {
    claims: BTreeMap<String, Value>,
    /// Every request, as `METHOD path`.
    log: Vec<String>,
    /// Bumped on every change (the claims' `resourceVersion`).
    version: u64,
    /// The bodies of the claims as created.
    created: Vec<Value>,
    /// Claims someone watches (the controller adopts a pod for a claim
    /// only once it is watched, so every case goes through the watch).
    watched: std::collections::BTreeSet<String>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    stop: AtomicBool,
    pod: Mutex<Option<Pod>>,
    behaviour: Behaviour,
    /// The next watches that expire at once (410 Gone): the first as an
    /// HTTP 410, the next as an `ERROR` event in the stream.
    gone: std::sync::atomic::AtomicUsize,
}

/// The Kubernetes API stand-in.
struct StandIn {
    addr: String,
    shared: Arc<Shared>,
    acceptor: Option<std::thread::JoinHandle<()>>,
    pool_key: String,
    pod_port: u16,
}

impl StandIn {
    fn start(behaviour: Behaviour) -> StandIn {
        let pool_key = format!("pool-key-{}", random_hex(16));
        let pod = (behaviour == Behaviour::Adopt).then(|| Pod::start(&pool_key));
        let pod_port = pod.as_ref().map_or(1, |p| p.port);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            pod: Mutex::new(pod),
            behaviour,
            gone: std::sync::atomic::AtomicUsize::new(0),
        });
        let accepting = shared.clone();
        let acceptor = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if accepting.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let shared = accepting.clone();
                std::thread::spawn(move || serve_one(&shared, conn));
            }
        });
        StandIn {
            addr,
            shared,
            acceptor: Some(acceptor),
            pool_key,
            pod_port,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn options(&self, ready_timeout: Duration) -> ClaimOptions {
        ClaimOptions {
            api_server: self.url(),
            api_token: Some(API_TOKEN.to_string()),
            ca_file: None,
            namespace: NAMESPACE.to_string(),
            warm_pool: POOL.to_string(),
            pool_key: self.pool_key.clone(),
            port: self.pod_port,
            ready_timeout,
            shutdown_after: Duration::from_secs(600),
            upload: None,
        }
    }

    fn log(&self) -> Vec<String> {
        self.shared.state.lock().unwrap().log.clone()
    }

    fn claims(&self) -> Vec<String> {
        self.shared
            .state
            .lock()
            .unwrap()
            .claims
            .keys()
            .cloned()
            .collect()
    }

    fn created(&self) -> Vec<Value> {
        self.shared.state.lock().unwrap().created.clone()
    }

    fn pod_alive(&self) -> bool {
        self.shared.pod.lock().unwrap().is_some()
    }

    /// Kills the pod (a node lost, say) without touching the claim.
    fn kill_pod(&self) {
        if let Some(mut pod) = self.shared.pod.lock().unwrap().take() {
            pod.kill();
        }
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        // Wakes the acceptor, which then sees the flag.
        let _ = TcpStream::connect(&self.addr);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        self.kill_pod();
    }
}

/// One request: method, path with query, headers (lowercase names), body.
struct Request {
    method: String,
    target: String,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

fn read_request(conn: &mut TcpStream) -> Option<Request> {
    conn.set_read_timeout(Some(REQUEST_READ_TIMEOUT)).ok()?;
    let mut reader = BufReader::new(conn.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let target = parts.next()?.to_string();
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (name, value) = h.split_once(':')?;
        headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        target,
        headers,
        body,
    })
}

fn respond(conn: &mut TcpStream, status: u16, body: &Value) {
    let text = body.to_string();
    let _ = write!(
        conn,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{text}",
        text.len()
    );
}

fn status_object(code: u16, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "message": message})
}

fn serve_one(shared: &Arc<Shared>, mut conn: TcpStream) {
    let Some(req) = read_request(&mut conn) else {
        return;
    };
    let (path, query) = req
        .target
        .split_once('?')
        .map_or((req.target.as_str(), ""), |(p, q)| (p, q));
    shared
        .state
        .lock()
        .unwrap()
        .log
        .push(format!("{} {path}", req.method));
    if req.headers.get("authorization").map(String::as_str) != Some(&format!("Bearer {API_TOKEN}"))
    {
        respond(&mut conn, 401, &status_object(401, "Unauthorized"));
        return;
    }
    let name = path.strip_prefix(CLAIMS).map(|r| r.trim_start_matches('/'));
    match (req.method.as_str(), name) {
        ("POST", Some("")) => create(shared, &mut conn, &req.body),
        ("GET", Some("")) if query.contains("watch=true") => watch(shared, &mut conn, query),
        ("GET", Some(name)) => {
            let claim = shared.state.lock().unwrap().claims.get(name).cloned();
            match claim {
                Some(c) => respond(&mut conn, 200, &c),
                None => respond(&mut conn, 404, &status_object(404, "not found")),
            }
        }
        ("DELETE", Some(name)) => {
            let removed = {
                let mut state = shared.state.lock().unwrap();
                let removed = state.claims.remove(name);
                state.version += 1;
                removed
            };
            shared.changed.notify_all();
            match removed {
                Some(c) => {
                    // The claim's pod goes with it (shutdownPolicy Delete).
                    if let Some(mut pod) = shared.pod.lock().unwrap().take() {
                        pod.delete();
                    }
                    respond(&mut conn, 200, &c);
                }
                None => respond(&mut conn, 404, &status_object(404, "not found")),
            }
        }
        _ => respond(&mut conn, 404, &status_object(404, "no such endpoint")),
    }
}

fn pending_status(reason: &str, message: &str) -> Value {
    json!({"conditions": [{"type": "Ready", "status": "False", "reason": reason, "message": message}]})
}

fn create(shared: &Arc<Shared>, conn: &mut TcpStream, body: &[u8]) {
    let Ok(mut claim) = serde_json::from_slice::<Value>(body) else {
        respond(conn, 400, &status_object(400, "not JSON"));
        return;
    };
    let Some(name) = claim.pointer("/metadata/name").and_then(Value::as_str) else {
        respond(conn, 422, &status_object(422, "metadata.name is required"));
        return;
    };
    let name = name.to_string();
    {
        let mut state = shared.state.lock().unwrap();
        state.created.push(claim.clone());
        state.version += 1;
        claim["metadata"]["resourceVersion"] = json!(state.version.to_string());
        claim["status"] = match shared.behaviour {
            Behaviour::Adopt => pending_status("WarmPodNotReady", "waiting for the pod's probe"),
            Behaviour::NeverReady => pending_status("NoWarmPod", "the warm pool has no pod"),
        };
        state.claims.insert(name.clone(), claim.clone());
    }
    respond(conn, 201, &claim);
    if shared.behaviour == Behaviour::Adopt {
        // The controller: adopts the warm pod once its readiness probe
        // (`/healthz`) passes.
        let shared = shared.clone();
        std::thread::spawn(move || {
            let port = match shared.pod.lock().unwrap().as_ref() {
                Some(pod) => pod.port,
                None => return,
            };
            let deadline = Instant::now() + START_WAIT;
            while !probe(port) {
                if Instant::now() > deadline || shared.stop.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(WATCH_TICK);
            }
            let mut state = shared.state.lock().unwrap();
            while !state.watched.contains(&name) {
                if Instant::now() > deadline || shared.stop.load(Ordering::SeqCst) {
                    return;
                }
                state = shared.changed.wait_timeout(state, WATCH_TICK).unwrap().0;
            }
            state.version += 1;
            let version = state.version.to_string();
            if let Some(claim) = state.claims.get_mut(&name) {
                claim["metadata"]["resourceVersion"] = json!(version);
                claim["status"] = json!({
                    "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": ""}],
                    "sandbox": {"name": format!("{POOL}-warm-0"), "podIPs": ["127.0.0.1"]},
                });
            }
            drop(state);
            shared.changed.notify_all();
        });
    }
}

/// The pod's readiness probe.
fn probe(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(REQUEST_READ_TIMEOUT));
    if s.write_all(b"GET /healthz HTTP/1.1\r\nHost: pod\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}

/// A watch of one claim by name: a line per change, until it is deleted,
/// the client goes, or the stand-in stops.
fn watch(shared: &Arc<Shared>, conn: &mut TcpStream, query: &str) {
    let Some(name) = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("fieldSelector=metadata.name%3D"))
        .map(str::to_string)
    else {
        respond(conn, 400, &status_object(400, "a watch by name only"));
        return;
    };
    let gone = shared
        .gone
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .ok();
    if gone == Some(2) {
        respond(conn, 410, &status_object(410, "too old resource version"));
        return;
    }
    if gone == Some(1) {
        let event =
            json!({"type": "ERROR", "object": status_object(410, "too old resource version")});
        let _ = conn.write_all(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{event}\n"
            )
            .as_bytes(),
        );
        return;
    }
    if conn
        .write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n",
        )
        .is_err()
    {
        return;
    }
    let mut seen = 0u64;
    let mut state = shared.state.lock().unwrap();
    state.watched.insert(name.clone());
    shared.changed.notify_all();
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        if state.version != seen {
            seen = state.version;
            let event = match state.claims.get(&name) {
                Some(c) => json!({"type": "MODIFIED", "object": c}),
                None => json!({"type": "DELETED", "object": {"metadata": {"name": name}}}),
            };
            let deleted = event["type"] == "DELETED";
            drop(state);
            if conn.write_all(format!("{event}\n").as_bytes()).is_err() || deleted {
                return;
            }
            state = shared.state.lock().unwrap();
            continue;
        }
        state = shared.changed.wait_timeout(state, WATCH_TICK).unwrap().0;
    }
}

/// One raw HTTP/1.1 request to `addr`: (status, body).
fn http(addr: &str, method: &str, path: &str, auth: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(REQUEST_READ_TIMEOUT)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {auth}\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    let _ = s.read_to_string(&mut raw);
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, body.to_string())
}

fn toolset(sandbox: cubby::remote::RemoteSandbox) -> cubby::Toolset {
    cubby::Toolset::builder(Arc::new(sandbox))
        .host_env(cubby::HostEnv::capture())
        .build()
        .unwrap()
}

fn wait_for(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_claim_is_made_watched_bound_used_and_deleted() {
    let stand_in = StandIn::start(Behaviour::Adopt);
    let pod_addr = stand_in.shared.pod.lock().unwrap().as_ref().unwrap().addr();
    let sandbox = cubby::kubernetes::open(&stand_in.options(Duration::from_secs(60))).unwrap();
    assert_eq!(
        cubby::sandbox::Sandbox::kind(&sandbox),
        cubby::config::ProviderKind::Kubernetes
    );
    // The claim as made: from the pool, with a shutdownTime.
    let created = stand_in.created();
    assert_eq!(created.len(), 1);
    let claim = &created[0];
    assert_eq!(claim["spec"]["warmPoolRef"]["name"], POOL);
    assert_eq!(claim["spec"]["lifecycle"]["shutdownPolicy"], "Delete");
    let shutdown = claim["spec"]["lifecycle"]["shutdownTime"].as_str().unwrap();
    assert!(
        shutdown.len() == 20 && shutdown.ends_with('Z') && shutdown.as_bytes()[10] == b'T',
        "{shutdown}"
    );
    let name = claim["metadata"]["name"].as_str().unwrap().to_string();
    // It was watched, not only read.
    assert!(
        stand_in.log().iter().any(|l| l == &format!("GET {CLAIMS}")),
        "{:?}",
        stand_in.log()
    );
    // The pool key is dead on the bound pod, for /v1 and /mcp alike; a
    // second bind with it is refused.
    let key = stand_in.pool_key.clone();
    assert_eq!(http(&pod_addr, "GET", "/v1/sandboxes", &key).0, 401);
    assert_eq!(http(&pod_addr, "POST", "/v1/bind", &key).0, 401);
    assert_eq!(http(&pod_addr, "POST", "/mcp", &key).0, 401);

    let t = toolset(sandbox);
    let out = t.call(
        "write_file",
        json!({"path": "a.txt", "content": "from the claim\n"}),
    );
    assert!(!out.is_error, "{}", out.text);
    let out = t.call("run", json!({"command": "cat a.txt && echo ran-in-pod"}));
    assert!(!out.is_error, "{}", out.text);
    assert!(
        out.text.contains("from the claim") && out.text.contains("ran-in-pod"),
        "{}",
        out.text
    );
    assert!(!out.text.contains(&key));
    assert_eq!(stand_in.claims(), vec![name.clone()]);
    drop(t);
    // The sandbox gone, its claim is deleted (and the stand-in ends the pod).
    assert!(stand_in.claims().is_empty(), "{:?}", stand_in.claims());
    assert!(
        stand_in
            .log()
            .iter()
            .any(|l| l == &format!("DELETE {CLAIMS}/{name}")),
        "{:?}",
        stand_in.log()
    );
    assert!(!stand_in.pod_alive());
}

#[test]
fn a_bound_pod_takes_only_its_claims_token_and_binds_once() {
    let stand_in = StandIn::start(Behaviour::Adopt);
    let pod_addr = stand_in.shared.pod.lock().unwrap().as_ref().unwrap().addr();
    let key = stand_in.pool_key.clone();
    assert_eq!(http(&pod_addr, "POST", "/v1/bind", "wrong").0, 401);
    // Before the bind the key opens the bind alone (red-team pass 6, F2:
    // a sandbox, command or MCP session made with it outlived the bind and
    // watched the claim's work).
    assert_eq!(http(&pod_addr, "GET", "/v1/sandboxes", &key).0, 403);
    let (status, body) = http(&pod_addr, "POST", "/v1/sandboxes", &key);
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("POST /v1/bind"), "{body}");
    assert_eq!(http(&pod_addr, "POST", "/mcp", &key).0, 403);
    assert_eq!(http(&pod_addr, "GET", "/v1/sandboxes", "wrong").0, 401);
    let (status, body) = http(&pod_addr, "POST", "/v1/bind", &key);
    assert_eq!(status, 200, "{body}");
    let bound: Value = serde_json::from_str(&body).unwrap();
    let token = bound["token"].as_str().unwrap().to_string();
    assert!(
        token.starts_with("cubby-claim-") && token.len() > 40,
        "{token}"
    );
    assert_eq!(http(&pod_addr, "GET", "/v1/sandboxes", &key).0, 401);
    assert_eq!(http(&pod_addr, "POST", "/v1/bind", &key).0, 401);
    assert_eq!(http(&pod_addr, "GET", "/v1/sandboxes", &token).0, 200);
    assert_eq!(http(&pod_addr, "POST", "/v1/bind", &token).0, 409);
    // /mcp on the same listener follows: the key refused, the token let in
    // (to rmcp, which wants more of a request than this one has).
    assert_eq!(http(&pod_addr, "POST", "/mcp", &key).0, 401);
    let (status, _) = http(&pod_addr, "POST", "/mcp", &token);
    assert!(status != 401 && status != 0, "{status}");
    // A claim of the provider on a pod bound before fails with a clear
    // error, and its claim is deleted.
    let err = cubby::kubernetes::open(&stand_in.options(Duration::from_secs(60)))
        .err()
        .expect("a bound pod is refused");
    assert_eq!(err.kind(), cubby::ErrorKind::Denied, "{}", err.message());
    assert!(err.message().contains("401"), "{}", err.message());
    assert!(!err.message().contains(&key));
    assert!(stand_in.claims().is_empty());
}

/// A pod that answers the bind but holds a sandbox already (one a cubby
/// pod no longer lets the pool key make): the claim is refused and deleted.
/// The pod is a stand-in of a far server (an outer edge): a real one cannot
/// be brought to this state.
#[test]
fn a_pod_holding_sandboxes_before_the_bind_is_refused() {
    let stand_in = StandIn::start(Behaviour::Adopt);
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    let fake_port = fake.local_addr().unwrap().port();
    let answering = std::thread::spawn(move || {
        // The bind, then the listing.
        for _ in 0..2 {
            let Ok((mut conn, _)) = fake.accept() else {
                return;
            };
            let Some(req) = read_request(&mut conn) else {
                return;
            };
            if req.target.ends_with("/bind") {
                respond(
                    &mut conn,
                    200,
                    &json!({"token": "cubby-claim-from-a-lying-pod"}),
                );
            } else {
                respond(&mut conn, 200, &json!(["1-made-before-the-bind"]));
            }
        }
    });
    let mut options = stand_in.options(Duration::from_secs(60));
    options.port = fake_port;
    let err = cubby::kubernetes::open(&options)
        .err()
        .expect("a pod holding sandboxes is refused");
    assert_eq!(err.kind(), cubby::ErrorKind::Denied, "{}", err.message());
    assert!(
        err.message().contains("made before the bind"),
        "{}",
        err.message()
    );
    assert!(stand_in.claims().is_empty());
    answering.join().unwrap();
}

/// A watch that expires (410 Gone: as an HTTP status, then as an `ERROR`
/// event) is taken up again from a fresh read of the claim, not failed.
#[test]
fn an_expired_watch_is_watched_anew() {
    let stand_in = StandIn::start(Behaviour::Adopt);
    stand_in.shared.gone.store(2, Ordering::SeqCst);
    let sandbox = cubby::kubernetes::open(&stand_in.options(Duration::from_secs(60)))
        .expect("the claim is bound after the expired watches");
    let watches = stand_in
        .log()
        .iter()
        .filter(|l| **l == format!("GET {CLAIMS}"))
        .count();
    assert!(watches >= 3, "{:?}", stand_in.log());
    assert_eq!(stand_in.shared.gone.load(Ordering::SeqCst), 0);
    drop(sandbox);
    assert!(stand_in.claims().is_empty(), "{:?}", stand_in.claims());
}

#[test]
fn a_claim_that_never_becomes_ready_times_out_and_is_deleted() {
    let stand_in = StandIn::start(Behaviour::NeverReady);
    let started = Instant::now();
    let err = cubby::kubernetes::open(&stand_in.options(Duration::from_secs(2)))
        .err()
        .expect("never Ready");
    let took = started.elapsed();
    assert_eq!(err.kind(), cubby::ErrorKind::Timeout, "{}", err.message());
    let name = stand_in.created()[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let message = err.message();
    assert!(message.contains(&name), "{message}");
    assert!(message.contains("Ready condition"), "{message}");
    assert!(message.contains("NoWarmPod"), "{message}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(10),
        "{took:?}"
    );
    assert!(stand_in.claims().is_empty(), "{:?}", stand_in.claims());
    assert!(
        stand_in
            .log()
            .iter()
            .any(|l| l == &format!("DELETE {CLAIMS}/{name}")),
        "{:?}",
        stand_in.log()
    );
}

#[test]
fn a_pod_lost_mid_run_fails_the_call_with_a_network_error() {
    let stand_in = StandIn::start(Behaviour::Adopt);
    let sandbox = cubby::kubernetes::open(&stand_in.options(Duration::from_secs(60))).unwrap();
    let t = toolset(sandbox);
    let out = t.call("write_file", json!({"path": "a.txt", "content": "x\n"}));
    assert!(!out.is_error, "{}", out.text);
    let calls = t.clone();
    let marker = format!("cubby-kube-lost-{}", std::process::id());
    let command = format!("echo started; exec -a {marker} sleep 1000");
    let running = std::thread::spawn(move || {
        let out = calls.call("run", json!({"command": command, "timeout_ms": 120_000}));
        (out, Instant::now())
    });
    // The command runs on the pod (a process of this machine, here).
    let marker_seen = marker.clone();
    wait_for("the pod's command starts", Duration::from_secs(30), || {
        std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| c.split(|b| *b == 0).next() == Some(marker_seen.as_bytes()))
                .unwrap_or(false)
        })
    });
    let killed = Instant::now();
    stand_in.kill_pod();
    let (out, ended) = running.join().unwrap();
    assert!(out.text.contains("ERROR network"), "{}", out.text);
    assert!(
        ended.duration_since(killed) < NETWORK_ERROR_WITHIN,
        "{:?}",
        ended.duration_since(killed)
    );
    let out = t.call("read_file", json!({"path": "a.txt"}));
    assert!(out.text.starts_with("ERROR network:"), "{}", out.text);
    drop(t);
    // The claim is deleted all the same, and the pod's command is gone with
    // the pod.
    assert!(stand_in.claims().is_empty(), "{:?}", stand_in.claims());
    wait_for("the lost pod's command ends", NETWORK_ERROR_WITHIN, || {
        !std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| c.split(|b| *b == 0).next() == Some(marker.as_bytes()))
                .unwrap_or(false)
        })
    });
}

/// A config file of `provider = "kubernetes"` for `stand_in`.
fn config_for(stand_in: &StandIn, dir: &Path) -> PathBuf {
    let key_file = dir.join("pool-key");
    std::fs::write(&key_file, &stand_in.pool_key).unwrap();
    let token_file = dir.join("api-token");
    std::fs::write(&token_file, API_TOKEN).unwrap();
    let config = dir.join("cubby.toml");
    std::fs::write(
        &config,
        format!(
            "provider = \"kubernetes\"\n\n[kubernetes]\n\
             namespace = \"{NAMESPACE}\"\nwarm_pool = \"{POOL}\"\npool_key_file = {:?}\n\
             api_server = \"{}\"\ntoken_file = {:?}\nport = {}\nready_timeout = 60\n\
             shutdown_after = 600\n",
            key_file.display().to_string(),
            stand_in.url(),
            token_file.display().to_string(),
            stand_in.pod_port
        ),
    )
    .unwrap();
    config
}

/// `cubby call` with a `[kubernetes]` config: the claim, an upload the
/// pod's workspace starts with, a command there, the claim deleted.
#[test]
fn cubby_call_with_a_kubernetes_config_claims_runs_and_deletes() {
    let stand_in = StandIn::start(Behaviour::Adopt);
    let dir = tempfile::tempdir().unwrap();
    let config = config_for(&stand_in, dir.path());
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    // The pod's workspace starts with a directory of this side's.
    std::fs::create_dir(root.join("seed")).unwrap();
    std::fs::write(root.join("seed/hello.txt"), "uploaded-to-the-pod\n").unwrap();
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("upload = \"seed\"\n");
    std::fs::write(&config, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cubby"))
        .arg("call")
        .arg("run")
        .arg(json!({"command": "cat hello.txt && echo hello-from-the-pod"}).to_string())
        .arg("--config")
        .arg(&config)
        .arg("--root")
        .arg(&root)
        .env_remove("RUST_LOG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("hello-from-the-pod"), "{stdout}\n{stderr}");
    assert!(stdout.contains("uploaded-to-the-pod"), "{stdout}\n{stderr}");
    assert!(!stdout.contains(&stand_in.pool_key) && !stderr.contains(&stand_in.pool_key));
    assert_eq!(stand_in.created().len(), 1);
    assert!(stand_in.claims().is_empty(), "{:?}", stand_in.claims());

    // A config error names the key.
    std::fs::write(
        &config,
        "provider = \"kubernetes\"\n[kubernetes]\npool_key_file = \"/k\"\nnamespace = \"Bad_NS\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args(["call", "read_file", r#"{"path":"x"}"#])
        .arg("--config")
        .arg(&config)
        .arg("--root")
        .arg(&root)
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success());
    assert!(all.contains("[kubernetes] namespace"), "{all}");
}
