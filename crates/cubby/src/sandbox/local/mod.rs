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
use std::process::{Command, Stdio};

use rustix::pipe::{PipeFlags, pipe_with};

pub use fs::LocalFs;
pub(crate) use fs::{PLACEHOLDER_MODE, ParentFd, io_err, is_placeholder_mode, kind_of};

use super::{ExecSpec, FileSystem, ProviderKind, Sandbox};
use crate::error::{Error, ErrorKind, Result};
use crate::path::WorkspacePath;
use crate::process::Spawned;

/// Capacity asked for the output pipe.
const OUTPUT_PIPE_BYTES: usize = 1024 * 1024;

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
        Ok(Spawned {
            child: Box::new(crate::process::ShimChild::new(child)),
            output: out_r,
            stdin: stdin_w,
            on_exit: None,
        })
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
