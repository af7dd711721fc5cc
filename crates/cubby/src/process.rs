//! The processes of one run: spawning under the reaper shim, bounded capture,
//! paging, stopping.
//!
//! Every command (a `run` or a `start_process`) becomes a [`Proc`]: a reader
//! thread pulls its combined stdout+stderr (one pipe for both, so the kernel
//! keeps the arrival order), strips ANSI escapes, redacts secrets (safe across
//! pipe reads), and appends the result to a retained window (a ring, default
//! 1 MiB) and, for `run`, to a head+tail capture. Memory per process is
//! bounded whatever the command prints. Subscribers receive each shaped
//! chunk as it arrives.
//!
//! # Caveats
//!
//! - Stopping sends the shim `SIGTERM` (forwarded to the command's group and
//!   every orphan), then, after the grace, `SIGUSR1`: the shim kills the whole
//!   tree — daemons and double-forks included — and exits. The shim itself is
//!   never sent `SIGKILL`, which would hand the tree to init.
//! - If the server process itself is killed with `SIGKILL`, its shims and
//!   their commands outlive it.
//! - Finished processes are kept so their logs can be paged, up to
//!   [`MAX_FINISHED_PROCESSES`]; older ones are forgotten.

use std::collections::{BTreeMap, VecDeque};
use std::io::Read;
use std::os::fd::OwnedFd;
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use crate::error::{Error, ErrorKind, Result};
use crate::output::{AnsiStripper, HeadTail, Redactor, StreamRedactor};

/// The signal that asks a command's shim (`sandbox::local::shim`) to stop its
/// command politely.
pub(crate) const SIGNAL_STOP: rustix::process::Signal = rustix::process::Signal::TERM;
/// The signal that asks a command's shim to kill its command's whole tree now.
pub(crate) const SIGNAL_KILL_TREE: rustix::process::Signal = rustix::process::Signal::USR1;

/// Bytes of output retained per process for `process_logs`.
pub const RETAINED_LOG_BYTES: usize = 1024 * 1024;
/// Finished processes kept for paging.
pub const MAX_FINISHED_PROCESSES: usize = 64;
/// Grace between the polite stop and the kill.
pub const STOP_GRACE: Duration = Duration::from_secs(2);
/// How often a kill request is repeated until the process is gone.
const KILL_RESEND: Duration = Duration::from_millis(100);
/// Longest wait for a killed tree to be reaped.
const KILL_WAIT: Duration = Duration::from_secs(10);
/// Size of one read from a command's pipe.
const READ_CHUNK_BYTES: usize = 256 * 1024;

/// A cancellation flag shared between a caller and a running call.
#[derive(Clone, Debug, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// A token not yet cancelled.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }
    /// Cancels: a `run` waiting on this token kills its whole tree.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    /// True once cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// One shaped chunk of a process's output, as it arrives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputEvent {
    /// The process name (`run-3`, or the `start_process` name).
    pub process: String,
    /// Redacted, ANSI-stripped text.
    pub chunk: String,
}

/// A subscriber to output events.
pub type Subscriber = Arc<dyn Fn(&OutputEvent) + Send + Sync>;

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Still running.
    Running,
    /// Exited with a code.
    Exited(i32),
    /// Killed by a signal.
    Signaled(i32),
}

impl Status {
    /// `running`, `exited N` or `killed SIG` as shown to the model.
    pub fn describe(self) -> String {
        match self {
            Status::Running => "running".into(),
            Status::Exited(c) => format!("exited {c}"),
            Status::Signaled(s) => format!("killed {}", signal_name(s)),
        }
    }
}

/// `KILL`, `TERM`, … for a signal number.
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        1 => "HUP",
        2 => "INT",
        3 => "QUIT",
        4 => "ILL",
        6 => "ABRT",
        7 => "BUS",
        8 => "FPE",
        9 => "KILL",
        10 => "USR1",
        11 => "SEGV",
        12 => "USR2",
        13 => "PIPE",
        14 => "ALRM",
        15 => "TERM",
        24 => "XCPU",
        25 => "XFSZ",
        _ => return sig.to_string(),
    };
    name.to_string()
}

/// The retained window of a process's output, addressed by absolute offset.
#[derive(Debug)]
struct LogRing {
    buf: VecDeque<u8>,
    cap: usize,
    /// Absolute offset of `buf[0]`.
    start: u64,
}

impl LogRing {
    fn push(&mut self, bytes: &[u8]) {
        if bytes.len() >= self.cap {
            let drop = self.buf.len() as u64 + (bytes.len() - self.cap) as u64;
            self.start += drop;
            self.buf.clear();
            self.buf.extend(&bytes[bytes.len() - self.cap..]);
            return;
        }
        let overflow = (self.buf.len() + bytes.len()).saturating_sub(self.cap);
        self.buf.drain(..overflow);
        self.start += overflow as u64;
        self.buf.extend(bytes);
    }

    fn end(&self) -> u64 {
        self.start + self.buf.len() as u64
    }

    /// Up to `max` bytes from `cursor`; returns (bytes, their start offset).
    fn read(&self, cursor: u64, max: usize) -> (Vec<u8>, u64) {
        let from = cursor.clamp(self.start, self.end());
        let skip = (from - self.start) as usize;
        let take = max.min(self.buf.len() - skip);
        let mut out: Vec<u8> = self.buf.range(skip..skip + take).copied().collect();
        // End on a UTF-8 boundary when we stopped early.
        if skip + take < self.buf.len() {
            let keep = utf8_complete_len(&out);
            out.truncate(keep);
        }
        (out, from)
    }
}

/// Length of the longest prefix of `b` that does not end inside a
/// multi-byte UTF-8 character.
fn utf8_complete_len(b: &[u8]) -> usize {
    let n = b.len();
    for back in 1..=4.min(n) {
        let c = b[n - back];
        if c & 0xC0 != 0x80 {
            let need = match c {
                0xF0.. => 4,
                0xE0.. => 3,
                0xC0.. => 2,
                _ => 1,
            };
            return if back >= need { n } else { n - back };
        }
    }
    n
}

/// Mutable state of a process.
#[derive(Debug)]
struct State {
    status: Status,
    log: LogRing,
    capture: Option<HeadTail>,
    ended: Option<Instant>,
    output_closed: bool,
}

/// A process of the run.
pub struct Proc {
    /// Unique among live processes.
    pub name: String,
    /// The command line as the model gave it.
    pub command: String,
    /// The pid of the shim that owns the command's tree.
    pub pid: u32,
    /// When it started.
    pub started: Instant,
    /// Wall-clock start.
    pub started_at: SystemTime,
    state: Mutex<State>,
    changed: Condvar,
    child: Arc<dyn ProcessHandle>,
    reaped: AtomicBool,
    stdin: Mutex<Option<std::fs::File>>,
}

impl std::fmt::Debug for Proc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proc")
            .field("name", &self.name)
            .field("pid", &self.pid)
            .finish()
    }
}

/// Locks `m`, recovering the data of a poisoned lock (a panicking
/// holder never leaves these structures half-written).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Proc {
    /// Current status.
    pub fn status(&self) -> Status {
        lock(&self.state).status
    }

    /// When it ended, if it has.
    pub fn ended(&self) -> Option<Instant> {
        lock(&self.state).ended
    }

    /// Bytes of output seen so far (the next cursor at the end).
    pub fn output_end(&self) -> u64 {
        lock(&self.state).log.end()
    }

    /// Output from `cursor`, at most `max` bytes: (text, start offset, next
    /// cursor, bytes dropped before `cursor` because the window moved on).
    pub fn read_log(&self, cursor: u64, max: usize) -> (String, u64, u64, u64) {
        let state = lock(&self.state);
        let (bytes, from) = state.log.read(cursor, max);
        let dropped = from.saturating_sub(cursor);
        let next = from + bytes.len() as u64;
        (
            String::from_utf8_lossy(&bytes).into_owned(),
            from,
            next,
            dropped,
        )
    }

    /// The head+tail capture rendered with the standard marker.
    pub fn captured(&self) -> (String, u64, u64) {
        let state = lock(&self.state);
        match &state.capture {
            Some(c) => (
                c.render(|n| {
                    format!(
                        "[{} bytes cut, use process_logs name={}]",
                        crate::output::thousands(n),
                        self.name
                    )
                }),
                c.total(),
                c.cut(),
            ),
            None => (String::new(), 0, 0),
        }
    }

    /// Waits until the process has ended and its output is drained, or until
    /// `deadline`, or until `cancel` fires. Returns true when it ended.
    pub fn wait_until(&self, deadline: Option<Instant>, cancel: Option<&CancelToken>) -> bool {
        let mut state = lock(&self.state);
        loop {
            if state.status != Status::Running && state.output_closed {
                return true;
            }
            if cancel.is_some_and(CancelToken::is_cancelled) {
                return false;
            }
            let now = Instant::now();
            let mut wait = Duration::from_millis(50);
            if let Some(d) = deadline {
                if now >= d {
                    return false;
                }
                wait = wait.min(d - now);
            }
            state = match self.changed.wait_timeout(state, wait) {
                Ok((s, _)) => s,
                Err(p) => p.into_inner().0,
            };
        }
    }

    /// Kills the whole tree now and waits (bounded) until it is reaped.
    pub fn kill_tree(&self) {
        let deadline = Instant::now() + KILL_WAIT;
        while Instant::now() < deadline {
            if self.status() == Status::Running {
                self.child.kill_tree();
            }
            if self.wait_until(Some(Instant::now() + KILL_RESEND), None) {
                return;
            }
        }
        tracing::error!(name = %self.name, pid = self.pid, "process tree did not die");
    }

    /// `SIGTERM` to the whole tree, then the kill after `grace`.
    pub fn stop(&self, grace: Duration) {
        if self.status() == Status::Running {
            self.child.stop();
        }
        if self.wait_until(Some(Instant::now() + grace), None) {
            return;
        }
        self.kill_tree();
    }

    /// Writes to the process's stdin without blocking; returns bytes written.
    ///
    /// # Errors
    ///
    /// `invalid_input` when the process was started without `stdin: true`;
    /// `limit` when it is not reading.
    pub fn write_stdin(&self, input: &[u8]) -> Result<usize> {
        use std::io::Write;
        let mut guard = lock(&self.stdin);
        let Some(pipe) = guard.as_mut() else {
            return Err(Error::invalid_input(format!(
                "process `{}` was not started with `stdin: true` (or its stdin is closed); \
                 start it again with stdin: true",
                self.name
            )));
        };
        let mut written = 0;
        while written < input.len() {
            match pipe.write(&input[written..]) {
                Ok(0) => break,
                Ok(n) => written += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    *guard = None;
                    return Err(Error::new(
                        ErrorKind::InvalidInput,
                        format!("process `{}` no longer reads its stdin: {e}", self.name),
                    ));
                }
            }
        }
        Ok(written)
    }
}

/// A started command as its provider controls it.
pub trait ProcessHandle: Send + Sync {
    /// The pid shown for it (the reaper shim's, or the pid-namespace init's).
    fn id(&self) -> u32;
    /// Asks the command to stop (`SIGTERM` to its process group).
    fn stop(&self);
    /// Kills the command's whole tree now.
    fn kill_tree(&self);
    /// Waits until it has exited; its status is the command's.
    ///
    /// # Errors
    ///
    /// When the status cannot be had.
    fn wait(&self) -> std::io::Result<ExitStatus>;
}

/// A command under the reaper shim (`sandbox/local/shim.rs`): the shim's pid is
/// what gets signalled and waited for.
pub struct ShimChild {
    pid: u32,
    child: Mutex<Child>,
}

impl ShimChild {
    /// Wraps the `Child` of a command spawned under the shim.
    pub fn new(child: Child) -> ShimChild {
        ShimChild {
            pid: child.id(),
            child: Mutex::new(child),
        }
    }

    fn signal(&self, sig: rustix::process::Signal) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.pid as i32) {
            let _ = rustix::process::kill_process(pid, sig);
        }
    }
}

impl ProcessHandle for ShimChild {
    fn id(&self) -> u32 {
        self.pid
    }
    fn stop(&self) {
        self.signal(SIGNAL_STOP);
    }
    fn kill_tree(&self) {
        self.signal(SIGNAL_KILL_TREE);
    }
    fn wait(&self) -> std::io::Result<ExitStatus> {
        lock(&self.child).wait()
    }
}

/// What a provider hands back for a spawned command.
pub struct Spawned {
    /// The command's handle.
    pub child: Box<dyn ProcessHandle>,
    /// Read end of the combined stdout+stderr pipe.
    pub output: OwnedFd,
    /// Write end of the stdin pipe, when asked for.
    pub stdin: Option<OwnedFd>,
    /// Called once the process has been reaped (providers release what the
    /// command held).
    pub on_exit: Option<Box<dyn FnOnce() + Send>>,
}

/// Options for tracking a spawned process.
pub(crate) struct Track {
    pub name: String,
    pub command: String,
    pub capture_bytes: Option<usize>,
    pub retained_bytes: usize,
    /// The subscriber of the call that started it.
    pub call_subscriber: Option<Subscriber>,
}

/// The processes of one run.
pub struct ProcessTable {
    procs: Mutex<BTreeMap<String, Arc<Proc>>>,
    finished_order: Mutex<VecDeque<String>>,
    next_run: AtomicU64,
    redactor: Redactor,
    subscribers: Arc<Mutex<Vec<Subscriber>>>,
}

impl std::fmt::Debug for ProcessTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessTable").finish_non_exhaustive()
    }
}

impl ProcessTable {
    pub(crate) fn new(
        redactor: Redactor,
        subscribers: Arc<Mutex<Vec<Subscriber>>>,
    ) -> ProcessTable {
        ProcessTable {
            procs: Mutex::new(BTreeMap::new()),
            finished_order: Mutex::new(VecDeque::new()),
            next_run: AtomicU64::new(1),
            redactor,
            subscribers,
        }
    }

    /// A fresh name for a `run`: `run-1`, `run-2`, …
    pub(crate) fn next_run_name(&self) -> String {
        format!("run-{}", self.next_run.fetch_add(1, Ordering::Relaxed))
    }

    /// Finds a process by name.
    pub fn get(&self, name: &str) -> Option<Arc<Proc>> {
        lock(&self.procs).get(name).cloned()
    }

    /// Every process, in name order.
    pub fn list(&self) -> Vec<Arc<Proc>> {
        lock(&self.procs).values().cloned().collect()
    }

    /// True when a live process has this name.
    pub(crate) fn name_is_live(&self, name: &str) -> bool {
        lock(&self.procs)
            .get(name)
            .is_some_and(|p| p.status() == Status::Running)
    }

    /// Registers a spawned process and starts its reader.
    pub(crate) fn track(&self, spawned: Spawned, track: Track) -> Result<Arc<Proc>> {
        let stdin = spawned.stdin.map(|fd| {
            let _ = rustix::fs::fcntl_setfl(&fd, rustix::fs::OFlags::NONBLOCK);
            std::fs::File::from(fd)
        });
        let proc = Arc::new(Proc {
            name: track.name.clone(),
            command: track.command,
            pid: spawned.child.id(),
            reaped: AtomicBool::new(false),
            started: Instant::now(),
            started_at: SystemTime::now(),
            state: Mutex::new(State {
                status: Status::Running,
                log: LogRing {
                    buf: VecDeque::new(),
                    cap: track.retained_bytes.max(1),
                    start: 0,
                },
                capture: track.capture_bytes.map(HeadTail::new),
                ended: None,
                output_closed: false,
            }),
            changed: Condvar::new(),
            child: Arc::from(spawned.child),
            stdin: Mutex::new(stdin),
        });
        {
            let mut procs = lock(&self.procs);
            if let Some(old) = procs.get(&track.name)
                && old.status() == Status::Running
            {
                return Err(Error::invalid_input(format!(
                    "a process named `{}` is already running; stop it or pick another name",
                    track.name
                )));
            }
            procs.insert(track.name.clone(), proc.clone());
        }
        let reader = Reader {
            on_exit: spawned.on_exit,
            proc: proc.clone(),
            pipe: std::fs::File::from(spawned.output),
            stripper: AnsiStripper::default(),
            redactor: self.redactor.stream(),
            subscribers: self.subscribers.clone(),
            call_subscriber: track.call_subscriber,
        };
        std::thread::Builder::new()
            .name(format!("cubby-proc-{}", track.name))
            .spawn(move || reader.run())
            .map_err(|e| Error::internal(format!("cannot start the output reader: {e}")))?;
        Ok(proc)
    }

    /// Records that a process finished, forgetting the oldest finished ones.
    pub(crate) fn retire(&self, name: &str) {
        let mut order = lock(&self.finished_order);
        order.retain(|n| n != name);
        order.push_back(name.to_string());
        while order.len() > MAX_FINISHED_PROCESSES {
            if let Some(old) = order.pop_front() {
                let mut procs = lock(&self.procs);
                if procs
                    .get(&old)
                    .is_some_and(|p| p.status() != Status::Running)
                {
                    procs.remove(&old);
                }
            }
        }
    }

    /// Kills every live process (the run is ending).
    pub fn stop_all(&self) {
        let live: Vec<Arc<Proc>> = self
            .list()
            .into_iter()
            .filter(|p| p.status() == Status::Running)
            .collect();
        std::thread::scope(|s| {
            for p in &live {
                s.spawn(|| p.kill_tree());
            }
        });
    }
}

impl Drop for ProcessTable {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// Drains one process's output, then reaps it.
struct Reader {
    on_exit: Option<Box<dyn FnOnce() + Send>>,
    proc: Arc<Proc>,
    pipe: std::fs::File,
    stripper: AnsiStripper,
    redactor: StreamRedactor,
    subscribers: Arc<Mutex<Vec<Subscriber>>>,
    call_subscriber: Option<Subscriber>,
}

impl Reader {
    fn run(mut self) {
        let mut buf = vec![0u8; READ_CHUNK_BYTES];
        loop {
            match self.pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let stripped = self.stripper.push(&buf[..n]);
                    let shaped = self.redactor.push(&stripped);
                    self.deliver(&shaped);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let rest = self.redactor.finish();
        self.deliver(&rest);
        {
            let mut state = lock(&self.proc.state);
            state.output_closed = true;
        }
        self.proc.changed.notify_all();
        let waited = if self.proc.reaped.swap(true, Ordering::SeqCst) {
            None
        } else {
            Some(self.proc.child.wait())
        };
        let status = match waited {
            Some(Ok(s)) => {
                use std::os::unix::process::ExitStatusExt;
                match (s.code(), s.signal()) {
                    (Some(c), _) => Status::Exited(c),
                    (None, Some(sig)) => Status::Signaled(sig),
                    _ => Status::Exited(-1),
                }
            }
            _ => Status::Exited(-1),
        };
        *lock(&self.proc.stdin) = None;
        if let Some(release) = self.on_exit.take() {
            release();
        }
        {
            let mut state = lock(&self.proc.state);
            state.status = status;
            state.ended = Some(Instant::now());
        }
        self.proc.changed.notify_all();
    }

    fn deliver(&self, shaped: &[u8]) {
        if shaped.is_empty() {
            return;
        }
        {
            let mut state = lock(&self.proc.state);
            state.log.push(shaped);
            if let Some(c) = state.capture.as_mut() {
                c.push(shaped);
            }
        }
        let subscribers = lock(&self.subscribers).clone();
        if !subscribers.is_empty() || self.call_subscriber.is_some() {
            let event = OutputEvent {
                process: self.proc.name.clone(),
                chunk: String::from_utf8_lossy(shaped).into_owned(),
            };
            for s in subscribers.iter().chain(self.call_subscriber.iter()) {
                s(&event);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_the_last_bytes_with_offsets() {
        let mut r = LogRing {
            buf: VecDeque::new(),
            cap: 10,
            start: 0,
        };
        r.push(b"0123456789abc");
        assert_eq!(r.start, 3);
        assert_eq!(r.end(), 13);
        r.push(b"de");
        assert_eq!(r.start, 5);
        let (bytes, from) = r.read(0, 100);
        assert_eq!((bytes.as_slice(), from), (&b"56789abcde"[..], 5));
        let (bytes, from) = r.read(12, 100);
        assert_eq!((bytes.as_slice(), from), (&b"cde"[..], 12));
        let (bytes, _) = r.read(15, 100);
        assert!(bytes.is_empty());
    }

    #[test]
    fn ring_read_stops_on_a_char_boundary() {
        let mut r = LogRing {
            buf: VecDeque::new(),
            cap: 100,
            start: 0,
        };
        r.push("aé€b".as_bytes());
        let (bytes, _) = r.read(0, 4);
        assert_eq!(bytes, "aé".as_bytes());
        let (bytes, _) = r.read(0, 3);
        assert_eq!(bytes, "aé".as_bytes());
        let (bytes, _) = r.read(0, 6);
        assert_eq!(bytes, "aé€".as_bytes());
    }
}
