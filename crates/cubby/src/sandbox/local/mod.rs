//! The `local` provider: a host directory for the file tools and host
//! processes for commands. Commands run as the host user: this is not an
//! OS boundary.
//!
//! - `mod.rs`: [`LocalSandbox`], the provider (its `Sandbox` impl starts
//!   each command under the reaper shim, so its whole tree can be killed).
//! - `fs.rs`: [`LocalFs`], the host directory confined by `openat2`; the
//!   `linux` provider's file tools use it too.
//! - `shim.rs`: the reaper shim, forked between `fork` and `exec` of each
//!   command (the provider's only `unsafe` code), and small async-signal-
//!   safe helpers the `linux` provider's fork-side programs share.

mod fs;
pub(crate) mod shim;

use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

use rustix::pipe::{PipeFlags, pipe_with};

pub use fs::LocalFs;
pub(crate) use fs::{PLACEHOLDER_MODE, ParentFd, io_err, is_placeholder_mode, kind_of};

use super::{ExecSpec, ExitStatus, FileSystem, ProcessHandle, ProviderKind, Sandbox, Spawned};
use crate::error::{Error, ErrorKind, Result};
use crate::path::WorkspacePath;
use crate::sync::lock;

/// Capacity asked for the output pipe.
const OUTPUT_PIPE_BYTES: usize = 1024 * 1024;

/// The signal that asks a command's shim (`shim.rs`) to stop its command
/// politely.
pub(crate) const SIGNAL_STOP: rustix::process::Signal = rustix::process::Signal::TERM;
/// The signal that asks a command's shim to kill its command's whole tree now.
pub(crate) const SIGNAL_KILL_TREE: rustix::process::Signal = rustix::process::Signal::USR1;

/// A command under the reaper shim (`shim.rs`): the shim's pid is what gets
/// signalled and waited for.
pub(crate) struct ShimChild {
    pid: u32,
    child: Mutex<Child>,
}

impl ShimChild {
    /// Wraps the `Child` of a command spawned under the shim.
    pub(crate) fn new(child: Child) -> ShimChild {
        ShimChild {
            pid: child.id(),
            child: Mutex::new(child),
        }
    }
}

/// Sends `sig` to the process `pid` (a no-op for a pid that cannot be one).
fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

impl ProcessHandle for ShimChild {
    fn id(&self) -> u32 {
        self.pid
    }
    fn stop(&self) {
        signal(self.pid, SIGNAL_STOP);
    }
    fn kill_tree(&self) {
        signal(self.pid, SIGNAL_KILL_TREE);
    }
    fn wait(&self) -> ExitStatus {
        lock(&self.child).wait().into()
    }
}

/// A host command attached to this process's terminal (`cubby exec` on the
/// `local` provider, and on `linux` in `full-access`, which runs it as this
/// provider does): no shim, so that it shares this process's group and is
/// the terminal's foreground job with it. Its descendants are therefore out
/// of reach: `kill_tree` kills the command alone.
struct AttachedChild {
    pid: u32,
    child: Mutex<Child>,
}

impl AttachedChild {
    /// Wraps the `Child` of a command spawned with inherited stdio.
    fn new(child: Child) -> AttachedChild {
        AttachedChild {
            pid: child.id(),
            child: Mutex::new(child),
        }
    }
}

impl ProcessHandle for AttachedChild {
    fn id(&self) -> u32 {
        self.pid
    }
    fn stop(&self) {
        signal(self.pid, rustix::process::Signal::TERM);
    }
    fn kill_tree(&self) {
        signal(self.pid, rustix::process::Signal::KILL);
    }
    fn wait(&self) -> ExitStatus {
        lock(&self.child).wait().into()
    }
}

/// The `local` provider.
#[derive(Debug)]
pub struct LocalSandbox {
    fs: LocalFs,
}

impl LocalSandbox {
    /// Opens `root` as a local sandbox.
    ///
    /// # Errors
    ///
    /// `not_found` when `root` is not an existing directory.
    pub fn open(root: &Path) -> Result<LocalSandbox> {
        Ok(LocalSandbox {
            fs: LocalFs::open(root)?,
        })
    }
}

fn spawn_error(e: impl std::fmt::Display, what: &str) -> Error {
    Error::new(ErrorKind::Internal, format!("cannot start {what}: {e}"))
}

/// The error of a program that did not start: `not_found` when there is no
/// such program, `denied` when it cannot be executed (the contract's kinds
/// for `exec_attached`, see `Sandbox::exec_attached`).
fn program_error(e: &std::io::Error, program: &str) -> Error {
    match e.kind() {
        std::io::ErrorKind::NotFound => Error::new(
            ErrorKind::NotFound,
            format!("`{program}`: no such program (nor on the command's PATH)"),
        ),
        std::io::ErrorKind::PermissionDenied => Error::new(
            ErrorKind::Denied,
            format!("`{program}` cannot be executed: {e}"),
        ),
        _ => spawn_error(e, program),
    }
}

impl Sandbox for LocalSandbox {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Local
    }

    fn fs(&self) -> &dyn FileSystem {
        &self.fs
    }

    fn supports_commands(&self) -> bool {
        true
    }

    fn exec(&self, spec: &ExecSpec) -> Result<Spawned> {
        let Some((program, args)) = spec.argv.split_first() else {
            return Err(Error::invalid_input("empty command"));
        };
        let dir = self.fs.open_dir(&spec.cwd)?;
        let (out_r, out_w) = pipe_with(PipeFlags::CLOEXEC).map_err(|e| spawn_error(e, "a pipe"))?;
        let err_w = out_w.try_clone().map_err(|e| spawn_error(e, "a pipe"))?;
        // A larger pipe means fewer wake-ups for chatty commands; best effort.
        let _ = rustix::pipe::fcntl_setpipe_size(&out_r, OUTPUT_PIPE_BYTES);
        let mut cmd = Command::new(program);
        // The spec's environment and nothing of cubby's (SPEC §4).
        cmd.args(args)
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::from(out_w))
            .stderr(Stdio::from(err_w))
            .process_group(0);
        let stdin_w = if spec.stdin {
            let (r, w) = pipe_with(PipeFlags::CLOEXEC).map_err(|e| spawn_error(e, "a pipe"))?;
            cmd.stdin(Stdio::from(r));
            Some(w)
        } else {
            cmd.stdin(Stdio::null());
            None
        };
        use std::os::unix::process::CommandExt;
        shim::run_under_shim(&mut cmd, dir.as_raw_fd());
        let child = cmd.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::new(
                ErrorKind::Unsupported,
                format!("`{program}` is not installed; cubby needs it to run commands"),
            ),
            _ => spawn_error(e, program),
        })?;
        // The parent's copies of the child's ends close here.
        drop(cmd);
        drop(dir);
        Ok(Spawned::from_pipes(
            Box::new(ShimChild::new(child)),
            out_r,
            stdin_w,
            None,
        ))
    }

    fn exec_attached(&self, spec: &ExecSpec) -> Result<Box<dyn ProcessHandle>> {
        let Some((program, args)) = spec.argv.split_first() else {
            return Err(Error::invalid_input("empty command"));
        };
        // The spec's environment and nothing of cubby's (SPEC §4); stdio
        // inherited.
        let child = Command::new(program)
            .args(args)
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .current_dir(self.fs.root_path().join(spec.cwd.as_path()))
            .spawn()
            .map_err(|e| program_error(&e, program))?;
        Ok(Box::new(AttachedChild::new(child)))
    }

    fn command_path(&self, path: &WorkspacePath) -> Option<std::path::PathBuf> {
        Some(self.fs.root_path().join(path.as_path()))
    }

    fn show_cwd(&self, cwd: &WorkspacePath) -> String {
        if cwd.is_root() {
            self.fs.root_path().display().to_string()
        } else {
            self.fs
                .root_path()
                .join(cwd.as_path())
                .display()
                .to_string()
        }
    }
}
