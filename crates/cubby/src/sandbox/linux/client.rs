//! The server's side of a started `linux` sandbox: the live holder and its
//! socket ([`Live`]), each command as the server holds it
//! ([`SandboxChild`]: its init's pidfd and the command's own socket, on
//! which its status comes), the wait for a command to start, and what a
//! command holds while it runs ([`Lease`]).

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::reserve::Reservations;
use super::start_error;
use super::wire::{self, MSG_EXEC_FAILED, MSG_EXITED, MSG_FORK_FAILED, MSG_STARTED};
use crate::error::{Error, ErrorKind, Result};
use crate::net::EgressProxy;
use crate::path::WorkspacePath;
use crate::sandbox::{ExitStatus, ProcessHandle};
use crate::sync::lock;

/// A started sandbox: the holder, its socket, and what answers arrive.
pub(super) struct Live {
    pub(super) holder: Mutex<Child>,
    /// The server's end of the holder's socket.
    pub(super) sock: OwnedFd,
    /// One request at a time on the socket.
    pub(super) send: Mutex<()>,
    pub(super) next_id: AtomicU64,
    pub(super) cgroup: Option<PathBuf>,
    pub(super) private_tmp: bool,
    /// The egress proxy (network `allow`); dropped after the holder ends.
    pub(super) _proxy: Option<EgressProxy>,
    /// What every command's environment gets on top (proxy variables,
    /// placeholders).
    pub(super) extra_env: Vec<(String, String)>,
}

impl Drop for Live {
    fn drop(&mut self) {
        // The holder (and an init waiting for a request) see the end of
        // the stream.
        let _ = rustix::net::shutdown(&self.sock, rustix::net::Shutdown::Both);
        let _ = lock(&self.holder).wait();
        if let Some(dir) = &self.cgroup {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Longest wait for the holder to start a command.
const START_WAIT: Duration = Duration::from_secs(30);
/// `SIGKILL` as a raw wait status.
const KILLED_STATUS: i32 = libc::SIGKILL;

/// A command in the sandbox: its init's pidfd, and the init's end of the
/// command's own socket, on which its exit status comes.
pub(super) struct SandboxChild {
    pid: u32,
    /// Dropped once the command has been waited for.
    pidfd: Mutex<Option<OwnedFd>>,
    /// The server's end of the command's socket (the init holds the other);
    /// closed once the status is known (a finished command's handle may be
    /// kept a while, for listings).
    chan: Mutex<Option<OwnedFd>>,
    /// The status, once known.
    status: Mutex<Option<i32>>,
    /// The sandbox outlives its commands.
    _live: Arc<Live>,
}

impl SandboxChild {
    fn signal(&self, sig: rustix::process::Signal) {
        if let Some(fd) = lock(&self.pidfd).as_ref() {
            let _ = rustix::process::pidfd_send_signal(fd, sig);
        }
    }
}

impl ProcessHandle for SandboxChild {
    fn id(&self) -> u32 {
        self.pid
    }
    fn stop(&self) {
        // The init forwards it to the command's process group.
        self.signal(rustix::process::Signal::TERM);
    }
    fn kill_tree(&self) {
        // Killing a pid namespace's init kills everything in it.
        self.signal(rustix::process::Signal::KILL);
    }
    fn wait(&self) -> ExitStatus {
        let mut status = lock(&self.status);
        if status.is_none() {
            // The init reports before it exits; killed, it reports nothing
            // and its end closes.
            let chan = lock(&self.chan).take();
            let reported = loop {
                match chan.as_ref().and_then(wire::recv) {
                    Some((Some(msg), _)) if msg.kind == MSG_EXITED => {
                        break msg.arg;
                    }
                    Some(_) => continue,
                    None => break KILLED_STATUS,
                }
            };
            *status = Some(reported);
            lock(&self.pidfd).take();
        }
        ExitStatus::from_wait_status(status.unwrap_or(KILLED_STATUS))
    }
}

/// Waits for the init of the command just requested to answer on `chan`
/// (or its end to close: the holder or the init died; a request still
/// queued is dropped with the holder's socket), then hands back the
/// command, `lease` now holding `live` too.
pub(super) fn await_start(
    live: Arc<Live>,
    chan: OwnedFd,
    program: &str,
    mut lease: Lease,
) -> Result<(SandboxChild, Lease)> {
    let mut polls = [rustix::event::PollFd::new(
        &chan,
        rustix::event::PollFlags::IN,
    )];
    let wait = rustix::event::Timespec {
        tv_sec: START_WAIT.as_secs() as i64,
        tv_nsec: 0,
    };
    loop {
        match rustix::event::poll(&mut polls, Some(&wait)) {
            Ok(0) => return Err(start_error("no answer from the sandbox in time")),
            Ok(_) => break,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(start_error(e)),
        }
    }
    match wire::recv(&chan) {
        Some((Some(msg), fds)) if msg.kind == MSG_STARTED => {
            lease.live = Some(live.clone());
            let pidfd = fds.into_iter().next();
            Ok((
                SandboxChild {
                    // The init tells its pid in the sandbox's namespace;
                    // the host's is in the pidfd.
                    pid: pidfd.as_ref().and_then(host_pid).unwrap_or(msg.len as u32),
                    pidfd: Mutex::new(pidfd),
                    chan: Mutex::new(Some(chan)),
                    status: Mutex::new(None),
                    _live: live,
                },
                lease,
            ))
        }
        Some((Some(msg), _)) if msg.kind == MSG_EXEC_FAILED || msg.kind == MSG_FORK_FAILED => {
            Err(exec_error(program, msg.arg))
        }
        _ => Err(start_error("the sandbox's holder has gone")),
    }
}

/// A command started by [`super::LinuxSandbox::spawn_inherited`]; what it
/// holds in the sandbox is released when this is dropped (after it is
/// waited for).
pub(super) struct InheritedChild {
    pub(super) child: InheritedInner,
    pub(super) _lease: Option<Lease>,
}

pub(super) enum InheritedInner {
    /// `full-access`: a host process in this process's group (the
    /// terminal's foreground job), so signals reach it alone.
    Host {
        pid: u32,
        child: Mutex<Child>,
    },
    Sandboxed(Box<SandboxChild>),
}

impl InheritedInner {
    pub(super) fn host(child: Child) -> InheritedInner {
        InheritedInner::Host {
            pid: child.id(),
            child: Mutex::new(child),
        }
    }

    /// Sends `sig` to a `full-access` command.
    fn signal_host(pid: u32, sig: rustix::process::Signal) {
        if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(pid, sig);
        }
    }
}

impl ProcessHandle for InheritedChild {
    fn id(&self) -> u32 {
        match &self.child {
            InheritedInner::Host { pid, .. } => *pid,
            InheritedInner::Sandboxed(c) => c.id(),
        }
    }
    fn stop(&self) {
        match &self.child {
            InheritedInner::Host { pid, .. } => {
                InheritedInner::signal_host(*pid, rustix::process::Signal::TERM);
            }
            InheritedInner::Sandboxed(c) => c.stop(),
        }
    }
    fn kill_tree(&self) {
        match &self.child {
            InheritedInner::Host { pid, .. } => {
                InheritedInner::signal_host(*pid, rustix::process::Signal::KILL);
            }
            InheritedInner::Sandboxed(c) => c.kill_tree(),
        }
    }
    fn wait(&self) -> ExitStatus {
        match &self.child {
            InheritedInner::Host { child, .. } => lock(child).wait().into(),
            InheritedInner::Sandboxed(c) => c.wait(),
        }
    }
}

/// Holds a command's reservations (and the live sandbox) until it ends.
pub(super) struct Lease {
    pub(super) reservations: Arc<Reservations>,
    /// Each reserved path and its placeholder's inode.
    pub(super) reserved: Vec<(WorkspacePath, u64)>,
    pub(super) live: Option<Arc<Live>>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.reservations.release(&self.reserved);
    }
}

/// The pid of a pidfd's process in this process's pid namespace.
fn host_pid(pidfd: &OwnedFd) -> Option<u32> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd())).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|p| p.trim().parse().ok())
}

/// The error for a command that could not be exec'd (or set up).
fn exec_error(program: &str, errno: i32) -> Error {
    let err = std::io::Error::from_raw_os_error(errno);
    match errno {
        libc::EAGAIN => Error::new(
            ErrorKind::Limit,
            format!(
                "cannot start `{program}`: the sandbox's processes reach \
                 `limits.sandbox.processes`; stop some (`list_processes`, \
                 `stop_process`) or raise the limit"
            ),
        ),
        libc::ENOENT => Error::new(
            ErrorKind::Unsupported,
            format!("`{program}` is not installed in the sandbox; cubby needs it to run commands"),
        ),
        libc::EACCES | libc::EPERM => Error::new(
            ErrorKind::Denied,
            format!("`{program}` cannot be executed in the sandbox: {err}"),
        ),
        _ => Error::new(
            ErrorKind::Internal,
            format!("cannot start `{program}` in the sandbox: {err}"),
        ),
    }
}

pub(super) fn spawn(cmd: &mut Command, program: &str) -> Result<Child> {
    cmd.spawn().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::new(
            ErrorKind::Unsupported,
            format!("`{program}` is not installed in the sandbox; cubby needs it to run commands"),
        ),
        _ => Error::new(
            ErrorKind::Internal,
            format!("cannot start `{program}` in the sandbox: {e}"),
        ),
    })
}
