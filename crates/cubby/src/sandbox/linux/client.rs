//! The server's side of a started `linux` sandbox: the live holder and its
//! socket ([`Live`]), each command as the server holds it
//! ([`SandboxChild`]: its init's pidfd and the command's own socket, on
//! which its status comes), the wait for a command to start, and what a
//! command holds while it runs ([`Lease`]).

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::Child;
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
    /// The gateways' listeners; dropped after the holder ends.
    pub(super) _gateways: Option<crate::net::GatewayServers>,
    /// What every command's environment gets on top (proxy variables,
    /// placeholders).
    pub(super) extra_env: Vec<(String, String)>,
    /// `O_PATH` fds of the holder's directories the store layer grants
    /// (its `/dev`, its private `/tmp`), opened while it could be reached.
    pub(super) store_dirs: Vec<OwnedFd>,
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
/// command, `lease` now holding `live` too. `attached`: the command of
/// `cubby exec` (see [`exec_error`]).
pub(super) fn await_start(
    live: Arc<Live>,
    chan: OwnedFd,
    program: &str,
    mut lease: Lease,
    attached: bool,
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
            Err(exec_error(program, msg.arg, attached))
        }
        _ => Err(start_error("the sandbox's holder has gone")),
    }
}

/// A command started by [`super::LinuxSandbox::spawn_inherited`]; what it
/// holds in the sandbox is released when this is dropped (after it is
/// waited for).
pub(super) struct InheritedChild {
    pub(super) child: SandboxChild,
    pub(super) _lease: Lease,
}

impl ProcessHandle for InheritedChild {
    fn id(&self) -> u32 {
        self.child.id()
    }
    fn stop(&self) {
        self.child.stop();
    }
    fn kill_tree(&self) {
        self.child.kill_tree();
    }
    fn wait(&self) -> ExitStatus {
        self.child.wait()
    }
}

/// Holds a command's reservations (and the live sandbox) until it ends.
pub(super) struct Lease {
    pub(super) reservations: Arc<Reservations>,
    /// Each reserved path and its placeholder's inode.
    pub(super) reserved: Vec<(WorkspacePath, u64)>,
    /// Placeholders of other processes bound for this command, each with
    /// its shared lock ([`Placeholders::hold_foreign`](super::placeholder::Placeholders::hold_foreign)),
    /// released when the lease drops.
    pub(super) held: Vec<(WorkspacePath, std::os::fd::OwnedFd)>,
    pub(super) live: Option<Arc<Live>>,
    /// The workspace's git directories, swept for planted links when the
    /// command ends ([`super::protect::unlink_planted_links`]).
    pub(super) git_dirs: Vec<WorkspacePath>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.reservations.release(&self.reserved);
        super::protect::unlink_planted_links(self.reservations.fs(), &self.git_dirs);
    }
}

/// The pid of a pidfd's process in this process's pid namespace.
fn host_pid(pidfd: &OwnedFd) -> Option<u32> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd())).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|p| p.trim().parse().ok())
}

/// The error for a command that could not be exec'd (or set up). For
/// `cubby exec` (`attached`), a program that is not there is `not_found`
/// and one that cannot be executed `denied`, as the contract has it
/// (`Sandbox::exec_attached`); for the tools, a shell that is not there is
/// `unsupported`.
fn exec_error(program: &str, errno: i32, attached: bool) -> Error {
    let err = std::io::Error::from_raw_os_error(errno);
    match errno {
        libc::ENOENT if attached => Error::new(
            ErrorKind::NotFound,
            format!("`{program}`: no such program in the sandbox (nor on the command's PATH)"),
        ),
        libc::ENOEXEC if attached => Error::new(
            ErrorKind::Denied,
            format!("`{program}` cannot be executed in the sandbox: {err}"),
        ),
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
