//! The command contract: what a provider is given to start a command
//! ([`ExecSpec`]) and what it hands back ([`Spawned`]), which the process
//! table (`process.rs`) consumes.
//!
//! Nothing here assumes a kernel process on this machine:
//!
//! - the output is a byte stream ([`Spawned::output`], any `Read`): the
//!   `local` and `linux` providers pass the read end of a pipe; a provider
//!   that runs commands elsewhere (another machine, a VM) passes the body of
//!   its response as it arrives;
//! - stdin is a byte sink ([`Spawned::stdin`], any `Write` that does not
//!   block);
//! - the end of a command is cubby's own [`ExitStatus`], including
//!   [`ExitStatus::Lost`] for a command whose end cannot be known (its
//!   machine went away);
//! - stopping and killing the whole tree are methods of the handle
//!   ([`ProcessHandle`]): a signal to a shim or an init here, a request over
//!   the wire elsewhere.
//!
//! A provider implements [`Sandbox::exec`](super::Sandbox::exec) (output
//! captured by cubby) and, for `cubby exec`,
//! [`Sandbox::exec_attached`](super::Sandbox::exec_attached) (the command
//! connected to this process's own stdin, stdout and stderr).
//!
//! # What cubby does with a [`Spawned`]
//!
//! 1. One thread reads [`Spawned::output`] in chunks of a fixed size until
//!    it returns `Ok(0)` or an error (end of stream); memory stays bounded
//!    whatever the command prints, provided the reader itself does not
//!    buffer without bound (a remote provider streams its body, it does not
//!    read it whole).
//! 2. Then it calls [`ProcessHandle::wait`] once and records the status.
//! 3. It drops [`Spawned::stdin`] and calls [`Spawned::on_exit`].
//!
//! `stop` and `kill_tree` may come from other threads at any time before or
//! after, and repeatedly: a kill is resent until the output has ended and
//! the status is known.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;

use crate::path::WorkspacePath;

/// A command to start in a sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecSpec {
    /// Program and arguments (already wrapped in the shell).
    pub argv: Vec<String>,
    /// Working directory, confined to the root.
    pub cwd: WorkspacePath,
    /// The command's whole environment, made by
    /// [`CommandEnv::build`](super::CommandEnv::build): the provider adds
    /// only its own variables (the `linux` provider's `TMPDIR` and proxy
    /// variables) and nothing of cubby's environment.
    pub env: Vec<(OsString, OsString)>,
    /// Give the process a stdin sink (otherwise its stdin is at end of
    /// input at once). Ignored by
    /// [`exec_attached`](super::Sandbox::exec_attached), whose command reads
    /// this process's stdin.
    pub stdin: bool,
    /// The run's own output directory (`$CUBBY_OUTPUT_DIR`), when it has
    /// one: the `linux` provider binds it writable and the rest of
    /// `.cubby/output` read-only, so that no other session's command
    /// writes there (red-team 4, R4-7).
    pub output_dir: Option<WorkspacePath>,
}

/// How a command ended, as cubby reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// It exited with this code.
    Exited(i32),
    /// It was killed by this signal number (for providers without signals:
    /// the number of the signal that would have had the same effect, `9`
    /// for a kill).
    Signaled(i32),
    /// Its end cannot be known (the status could not be read, or the
    /// machine that ran it went away); the reason is for logs.
    Lost(String),
}

impl ExitStatus {
    /// The status a raw `waitpid` status stands for.
    pub fn from_wait_status(raw: i32) -> ExitStatus {
        use std::os::unix::process::ExitStatusExt;
        std::process::ExitStatus::from_raw(raw).into()
    }

    /// True for an exit with code 0.
    pub fn success(&self) -> bool {
        *self == ExitStatus::Exited(0)
    }
}

impl From<std::process::ExitStatus> for ExitStatus {
    fn from(status: std::process::ExitStatus) -> ExitStatus {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(code), _) => ExitStatus::Exited(code),
            (None, Some(sig)) => ExitStatus::Signaled(sig),
            _ => ExitStatus::Lost(format!(
                "a wait status with neither code nor signal: {status}"
            )),
        }
    }
}

impl From<std::io::Result<std::process::ExitStatus>> for ExitStatus {
    fn from(waited: std::io::Result<std::process::ExitStatus>) -> ExitStatus {
        match waited {
            Ok(status) => status.into(),
            Err(e) => ExitStatus::Lost(format!("cannot wait for the command: {e}")),
        }
    }
}

/// A started command as its provider controls it.
pub trait ProcessHandle: Send + Sync {
    /// The number shown for it (the reaper shim's pid, the pid-namespace
    /// init's, or a provider's own command number).
    fn id(&self) -> u32;
    /// Asks the command to stop (`SIGTERM` to its process group, or what
    /// stands for it).
    fn stop(&self);
    /// Kills the command's whole tree now, daemons and double-forks
    /// included. May be called again until the status is known.
    fn kill_tree(&self);
    /// Blocks until the command has ended; its status is the command's.
    fn wait(&self) -> ExitStatus;
}

/// What a provider hands back for a command started by
/// [`Sandbox::exec`](super::Sandbox::exec).
pub struct Spawned {
    /// The command's handle.
    pub handle: Box<dyn ProcessHandle>,
    /// The command's combined stdout and stderr, in arrival order; ends
    /// (`Ok(0)`) once nothing can write to it any more.
    pub output: Box<dyn Read + Send>,
    /// The command's stdin, when [`ExecSpec::stdin`] asked for it. Its
    /// writes never block: when the command is not reading they return
    /// `WouldBlock` (or write fewer bytes); an error means the command no
    /// longer reads. Dropping it ends the command's input.
    pub stdin: Option<Box<dyn Write + Send>>,
    /// Called once the command has ended and been waited for (providers
    /// release what the command held).
    pub on_exit: Option<Box<dyn FnOnce() + Send>>,
}

impl Spawned {
    /// A command whose output and stdin are pipes of this kernel: `output`
    /// is the read end of its stdout+stderr pipe, `stdin` the write end of
    /// its stdin pipe (made non-blocking here).
    pub fn from_pipes(
        handle: Box<dyn ProcessHandle>,
        output: OwnedFd,
        stdin: Option<OwnedFd>,
        on_exit: Option<Box<dyn FnOnce() + Send>>,
    ) -> Spawned {
        let stdin = stdin.map(|fd| {
            let _ = rustix::fs::fcntl_setfl(&fd, rustix::fs::OFlags::NONBLOCK);
            Box::new(std::fs::File::from(fd)) as Box<dyn Write + Send>
        });
        Spawned {
            handle,
            output: Box::new(std::fs::File::from(output)),
            stdin,
            on_exit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_statuses_become_cubbys_own() {
        // 3 << 8: exited 3; 9: killed by SIGKILL; 0x7f: stopped (no code,
        // no signal of death).
        assert_eq!(ExitStatus::from_wait_status(3 << 8), ExitStatus::Exited(3));
        assert_eq!(ExitStatus::from_wait_status(0), ExitStatus::Exited(0));
        assert!(ExitStatus::from_wait_status(0).success());
        assert_eq!(ExitStatus::from_wait_status(9), ExitStatus::Signaled(9));
        assert!(matches!(
            ExitStatus::from_wait_status(0x137f),
            ExitStatus::Lost(_)
        ));
        let err: std::io::Result<std::process::ExitStatus> =
            Err(std::io::Error::from_raw_os_error(libc::ECHILD));
        assert!(matches!(ExitStatus::from(err), ExitStatus::Lost(r) if r.contains("wait")));
    }
}
