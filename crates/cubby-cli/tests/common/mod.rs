//! Helpers shared by the black-box tests of the `cubby` binary: the repo
//! root, a `cubby serve` process on a loopback port of its own (port 0, the
//! bound address read from its stderr), raw HTTP requests, package installs,
//! and a client run in a process group of its own.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The workspace's root directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The line `cubby serve` prints on stderr once it listens, before the
/// address.
const SERVING_AT: &str = "cubby: listening on http://";

/// Longest wait for `cubby serve` to say where it listens.
const SERVE_START_WAIT: Duration = Duration::from_secs(60);

/// `cubby serve --provider local` on a port the kernel picks (port 0; the
/// server prints the address it bound, so no other process can take the
/// port between a probe and the bind); stopped (TERM, then KILL after
/// 10 s) when dropped.
pub struct Serve {
    pub child: Child,
    pub port: u16,
}

impl Serve {
    /// Starts the server on `root` and returns once it listens (it prints
    /// its address after binding; connections queue from then on).
    pub fn start(root: &Path) -> Serve {
        Serve::start_with(root, &[])
    }

    /// [`Serve::start`] with more arguments (`--config FILE`, …).
    pub fn start_with(root: &Path, args: &[&std::ffi::OsStr]) -> Serve {
        Serve::start_with_env(root, args, &[])
    }

    /// [`Serve::start_with`] with environment variables set (`CUBBY_TOKEN`).
    pub fn start_with_env(root: &Path, args: &[&std::ffi::OsStr], env: &[(&str, &str)]) -> Serve {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cubby"))
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(["--provider", "local", "--root"])
            .arg(root)
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("CUBBY_TOKEN")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (addr, _reader) = listening_address(&mut child, "cubby serve", SERVE_START_WAIT, None);
        let port = addr
            .rsplit_once(':')
            .and_then(|(_, port)| port.parse::<u16>().ok())
            .unwrap_or_else(|| panic!("cubby serve printed no port: {addr}"));
        Serve { child, port }
    }

    /// The MCP endpoint.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A config file (in a temporary directory of its own, outside any
/// workspace) that turns on `structuredContent` and `outputSchema` over MCP.
pub fn structured_config() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cubby.toml");
    std::fs::write(&path, "[mcp]\nstructured_content = true\n").unwrap();
    (dir, path)
}

/// One HTTP/1.1 request to `/mcp` (`Connection: close`); returns (status,
/// head, body). A body the server stops reading (413) is not an error.
pub fn request(
    port: u16,
    method: &str,
    body: &[u8],
    headers: &[(&str, &str)],
) -> (u16, String, String) {
    request_to(port, method, "/mcp", body, headers)
}

/// [`request`] to another path of the server.
pub fn request_to(
    port: u16,
    method: &str,
    path: &str,
    body: &[u8],
    headers: &[(&str, &str)],
) -> (u16, String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head.to_string(), body.to_string())
}

/// Where the `cubby serve` `child` (its stderr piped) listens: its stderr
/// is read to the end on a thread of its own (the server must never block
/// on a full pipe), each line passed on to the test's stderr after `[tag]`
/// and appended to `log` when one is given; the `ip:port` of the first
/// listening line comes back, with the reading thread. When none comes
/// within `wait`, the child is killed and the test fails.
pub fn listening_address(
    child: &mut Child,
    tag: &'static str,
    wait: Duration,
    log: Option<std::sync::Arc<std::sync::Mutex<String>>>,
) -> (String, std::thread::JoinHandle<()>) {
    let stderr = child.stderr.take().expect("the server's stderr is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(log) = &log {
                let mut all = log.lock().unwrap();
                all.push_str(&line);
                all.push('\n');
            }
            if let Some(addr) = line
                .strip_prefix(SERVING_AT)
                .and_then(|rest| rest.strip_suffix("/mcp"))
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(addr.to_string());
            }
            eprintln!("[{tag}] {line}");
        }
    });
    match rx.recv_timeout(wait) {
        Ok(addr) => (addr, reader),
        Err(_) => {
            let _ = child.kill();
            let status = child.wait();
            panic!("{tag} did not say where it listens ({status:?})");
        }
    }
}

/// Pauses before each retry of a package install: the registries (npm's
/// above all, whose `node` package fetches its binary in a second, nested
/// install) fail now and then for a minute at a time.
const INSTALL_BACKOFF: [Duration; 3] = [
    Duration::from_secs(10),
    Duration::from_secs(30),
    Duration::from_secs(60),
];

/// Runs the package install `make()` builds, again after each pause of
/// [`INSTALL_BACKOFF`] while it fails; panics naming `what` if the last try
/// fails too.
pub fn install_with_retries(what: &str, mut make: impl FnMut() -> Command) {
    let mut pauses = INSTALL_BACKOFF.iter();
    loop {
        let status = make()
            .status()
            .unwrap_or_else(|e| panic!("{what}: cannot start the installer: {e}"));
        if status.success() {
            return;
        }
        match pauses.next() {
            Some(pause) => {
                eprintln!("{what} failed ({status}); trying again in {pause:?}");
                std::thread::sleep(*pause);
            }
            None => panic!(
                "{what} failed ({status}) after {} tries",
                INSTALL_BACKOFF.len() + 1
            ),
        }
    }
}

/// Pinned npm `packages` installed into `dir` (scripts on: some packages
/// put their native binary in place by an install script) the first time,
/// and again when the package list changes or `present()` says what they
/// install is missing. Callers serialize installs into one `dir`.
pub fn npm_install(dir: &Path, packages: &[&str], present: impl Fn() -> bool) {
    let want = packages.join(" ");
    let ready = dir.join(".ready");
    if std::fs::read_to_string(&ready).ok().as_deref() != Some(want.as_str()) || !present() {
        std::fs::create_dir_all(dir).unwrap();
        let _ = std::fs::remove_file(&ready);
        install_with_retries(&format!("npm install {want}"), || {
            let mut npm = Command::new("npm");
            npm.args(["install", "--no-audit", "--no-fund", "--save-exact"])
                .args(["--ignore-scripts=false", "--loglevel=error", "--prefix"])
                .arg(dir)
                .args(packages)
                .current_dir(dir);
            npm
        });
        std::fs::write(&ready, &want).unwrap();
    }
}

/// A venv under `target/<name>` with `packages` pip-installed, made the
/// first time (and again when the package list changes); its python.
/// Tests of one binary that share a venv are serialized by a lock.
pub fn python_venv(name: &str, packages: &[&str]) -> PathBuf {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let want = packages.join(" ");
    let venv = repo_root().join("target").join(name);
    let python = venv.join("bin/python");
    let ready = venv.join(".ready");
    if std::fs::read_to_string(&ready).ok().as_deref() != Some(want.as_str()) || !python.exists() {
        let _ = std::fs::remove_file(&ready);
        let status = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("python3 with venv is needed for the MCP client tests");
        assert!(status.success(), "python3 -m venv failed");
        install_with_retries(&format!("pip install {want}"), || {
            let mut pip = Command::new(&python);
            pip.args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(packages);
            pip
        });
        std::fs::write(&ready, &want).unwrap();
    }
    python
}

/// What [`run_in_group`] saw of a process and the ones it started.
pub struct GroupRun {
    /// The exit status; `None` when the deadline ended the process.
    pub status: Option<ExitStatus>,
    /// Everything it wrote on stdout.
    pub stdout: String,
    /// Everything it wrote on stderr.
    pub stderr: String,
    /// From the start to its exit (or to the deadline).
    pub elapsed: Duration,
    /// Whether processes of its group were still running `grace` after it
    /// exited (they were killed then).
    pub lingered: bool,
}

fn signal_group(pgid: u32, signal: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pgid as i32) {
        let _ = rustix::process::kill_process_group(pid, signal);
    }
}

fn group_alive(pgid: u32) -> bool {
    rustix::process::Pid::from_raw(pgid as i32)
        .is_some_and(|pid| rustix::process::test_kill_process_group(pid).is_ok())
}

/// Runs `cmd` with stdin closed in a process group of its own (what it
/// starts inherits the group, unless it makes its own). Ends the whole group
/// (TERM, then KILL 2 s later) if the process outlives `deadline`; after it
/// exits, waits up to `grace` for the rest of the group to end, and kills
/// what is left. Its output goes through temporary files (removed on
/// return), so that nothing blocks on a full pipe.
pub fn run_in_group(mut cmd: Command, deadline: Duration, grace: Duration) -> GroupRun {
    let out = tempfile::NamedTempFile::new().unwrap();
    let err = tempfile::NamedTempFile::new().unwrap();
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(out.reopen().unwrap())
        .stderr(err.reopen().unwrap())
        .process_group(0)
        .spawn()
        .unwrap();
    let pgid = child.id();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > deadline {
            signal_group(pgid, rustix::process::Signal::TERM);
            std::thread::sleep(Duration::from_secs(2));
            signal_group(pgid, rustix::process::Signal::KILL);
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = started.elapsed();
    let exited = Instant::now();
    while group_alive(pgid) && exited.elapsed() < grace {
        std::thread::sleep(Duration::from_millis(20));
    }
    let lingered = group_alive(pgid);
    if lingered {
        signal_group(pgid, rustix::process::Signal::KILL);
    }
    GroupRun {
        status,
        stdout: std::fs::read_to_string(out.path()).unwrap_or_default(),
        stderr: std::fs::read_to_string(err.path()).unwrap_or_default(),
        elapsed,
        lingered,
    }
}

/// The body of an HTTP answer without its chunked framing.
pub fn dechunk(head: &str, body: &str) -> String {
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return body.to_string();
    }
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

/// The JSON-RPC message of an answer to a POST (plain JSON, or the
/// `data:` line of an event stream).
pub fn mcp_message(head: &str, body: &str) -> serde_json::Value {
    let body = dechunk(head, body);
    let json = body
        .lines()
        .find_map(|l| {
            l.strip_prefix("data:")
                .map(str::trim)
                .filter(|d| d.starts_with('{'))
        })
        .unwrap_or(body.trim());
    serde_json::from_str(json).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// The header `name` of an answer.
pub fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// A TCP connection to `to` from `source`, a loopback address of its own
/// (127.0.0.2, …), so a server counts it as another peer than 127.0.0.1.
pub fn connect_from(source: std::net::Ipv4Addr, to: std::net::SocketAddr) -> TcpStream {
    use rustix::net::{AddressFamily, SocketType, bind, connect, socket};
    let fd = socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
    bind(
        &fd,
        &std::net::SocketAddr::from(std::net::SocketAddrV4::new(source, 0)),
    )
    .unwrap();
    connect(&fd, &to).unwrap();
    TcpStream::from(fd)
}

/// `VmHWM` (peak resident set) of process `pid` (a number, or `self`), in
/// KiB.
pub fn peak_kib(pid: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}
