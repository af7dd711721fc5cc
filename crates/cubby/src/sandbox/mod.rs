//! Sandboxes: where the tools act.
//!
//! A [`Sandbox`] gives the tools a [`FileSystem`] and says which capabilities
//! it has. The tools never know which provider they run on: they speak only
//! in [`WorkspacePath`]s and the operations below, and every provider must
//! keep the same promises:
//!
//! 1. No operation reads, lists or writes anything outside the workspace root.
//! 2. A path that passes through a symbolic link is refused with `path_escape`;
//!    directory listings report links but never follow them.
//! 3. Only regular files are opened for reading; FIFOs, sockets and devices
//!    are refused without blocking.
//! 4. [`FileSystem::write_atomic`] leaves either the old or the new content,
//!    never a mix, and keeps the old mode bits.
//!
//! Providers: [`LocalFs`] (a host directory, confined with `openat2`) and
//! [`MemoryFs`] (the `virtual` provider, in memory) for files;
//! [`LocalSandbox`] (host processes) and [`LinuxSandbox`] (namespaces,
//! Landlock, seccomp) for commands.
//!
//! Commands follow one contract (`sandbox/exec.rs`): an [`ExecSpec`] in, a
//! [`Spawned`] out — a [`ProcessHandle`] (stop, kill the tree, wait for
//! cubby's own [`ExitStatus`]), the output as a byte stream and stdin as a
//! byte sink — so that a provider need not run its commands on this kernel.
//! What a provider needs of this machine before it opens is its [`probe`]
//! (`cubby doctor`).

pub mod env;
mod exec;
mod linux;
mod local;
mod memory;
mod probe;

use std::ffi::OsString;
use std::io::Read;
use std::sync::Arc;

pub use crate::config::ProviderKind;
pub use env::{CommandEnv, HOST_ONLY_ENV};
pub use exec::{ExecSpec, ExitStatus, ProcessHandle, Spawned};
pub use linux::{Capabilities, LinuxOptions, LinuxSandbox};
pub use local::{LocalFs, LocalSandbox};
pub use memory::MemoryFs;
pub use probe::{Probe, probe};

use crate::error::Result;
use crate::path::WorkspacePath;

/// What kind of object a path names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (never followed).
    Symlink,
    /// A FIFO, socket or device: never opened.
    Special,
}

/// Facts about one file system object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Metadata {
    /// The kind of object.
    pub kind: EntryKind,
    /// Size in bytes (0 for directories on the virtual provider).
    pub size: u64,
    /// Permission bits (`0o7777` mask).
    pub mode: u32,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i128,
    /// Change time (local) or a change counter (virtual).
    pub ctime_ns: i128,
    /// Inode number, or a unique id on the virtual provider.
    pub ino: u64,
    /// Number of hard links (1 on the virtual provider).
    pub nlink: u64,
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's name (one component).
    pub name: OsString,
    /// Its kind, without following links.
    pub kind: EntryKind,
}

/// An open regular file.
pub struct OpenFile {
    /// The file's content.
    pub reader: Box<dyn Read + Send>,
    /// Metadata taken from the open handle.
    pub metadata: Metadata,
}

/// The file operations every provider implements.
///
/// See the module docs for the promises each implementation keeps.
pub trait FileSystem: Send + Sync {
    /// Metadata of `path`, without following a final symbolic link (a link
    /// anywhere on the way is `path_escape`).
    fn metadata(&self, path: &WorkspacePath) -> Result<Metadata>;

    /// Opens a regular file for reading. Directories are `is_directory`;
    /// special files are refused without being opened.
    fn open(&self, path: &WorkspacePath) -> Result<OpenFile>;

    /// The entries of a directory, sorted by name, without `.` and `..`.
    fn read_dir(&self, path: &WorkspacePath) -> Result<Vec<DirEntry>>;

    /// At most `max` entries of the directory at `path` (in no set order
    /// when there are more), and whether there are more: a listing that
    /// stops at its bound instead of holding every entry first.
    fn read_dir_bounded(&self, path: &WorkspacePath, max: usize) -> Result<(Vec<DirEntry>, bool)> {
        let mut entries = self.read_dir(path)?;
        let more = entries.len() > max;
        entries.truncate(max);
        Ok((entries, more))
    }

    /// Replaces (or creates) `path` with `content` atomically, creating
    /// missing parent directories. An existing file keeps its mode bits.
    fn write_atomic(&self, path: &WorkspacePath, content: &[u8]) -> Result<()>;

    /// Creates `path` and its missing parents as directories (an existing
    /// directory is fine). Default: `unsupported`.
    fn create_dir_all(&self, path: &WorkspacePath) -> Result<()> {
        Err(crate::Error::new(
            crate::ErrorKind::Unsupported,
            format!("this file system cannot create the directory `{path}`"),
        ))
    }

    /// Removes the directory `path` when it is empty; `Ok(false)` when it
    /// holds something (or is not there). Default: `Ok(false)`.
    fn remove_empty_dir(&self, path: &WorkspacePath) -> Result<bool> {
        let _ = path;
        Ok(false)
    }

    /// The device and inode of the directory the root was opened as, for a
    /// file system over a host directory (`None` for others): which
    /// directory it is, whatever its path names now.
    fn root_identity(&self) -> Option<(u64, u64)> {
        None
    }

    /// Reads a whole regular file of at most `max` bytes (`too_large` beyond).
    fn read_to_vec(&self, path: &WorkspacePath, max: u64) -> Result<Vec<u8>> {
        let file = self.open(path)?;
        if file.metadata.size > max {
            return Err(crate::Error::new(
                crate::ErrorKind::TooLarge,
                format!(
                    "`{path}` is {} bytes, the limit here is {max}",
                    file.metadata.size
                ),
            ));
        }
        let mut buf = Vec::with_capacity(file.metadata.size as usize);
        file.reader
            .take(max.saturating_add(1))
            .read_to_end(&mut buf)
            .map_err(|e| crate::Error::from_io(&e, &path.display()))?;
        if buf.len() as u64 > max {
            return Err(crate::Error::new(
                crate::ErrorKind::TooLarge,
                format!("`{path}` grew past the limit of {max} bytes while being read"),
            ));
        }
        Ok(buf)
    }
}

impl<T: FileSystem + ?Sized> FileSystem for Arc<T> {
    fn metadata(&self, path: &WorkspacePath) -> Result<Metadata> {
        (**self).metadata(path)
    }
    fn open(&self, path: &WorkspacePath) -> Result<OpenFile> {
        (**self).open(path)
    }
    fn read_dir(&self, path: &WorkspacePath) -> Result<Vec<DirEntry>> {
        (**self).read_dir(path)
    }
    fn read_dir_bounded(&self, path: &WorkspacePath, max: usize) -> Result<(Vec<DirEntry>, bool)> {
        (**self).read_dir_bounded(path, max)
    }
    fn write_atomic(&self, path: &WorkspacePath, content: &[u8]) -> Result<()> {
        (**self).write_atomic(path, content)
    }
    fn create_dir_all(&self, path: &WorkspacePath) -> Result<()> {
        (**self).create_dir_all(path)
    }
    fn remove_empty_dir(&self, path: &WorkspacePath) -> Result<bool> {
        (**self).remove_empty_dir(path)
    }
    fn root_identity(&self) -> Option<(u64, u64)> {
        (**self).root_identity()
    }
}

/// Where the tools act: a file system plus capabilities.
pub trait Sandbox: Send + Sync {
    /// Which provider this is.
    fn kind(&self) -> ProviderKind;
    /// The sandbox's file system.
    fn fs(&self) -> &dyn FileSystem;
    /// True when the provider can run commands.
    fn supports_commands(&self) -> bool;

    /// The digest of the policy this sandbox holds commands to
    /// ([`crate::Policy::sandbox_digest`]), when it confines them: a
    /// toolset refuses a sandbox whose digest is not its own policy's.
    /// `None` for a provider that confines no command — it runs none
    /// (`virtual`) or runs them as host processes (`local`) — so that no
    /// policy can disagree with it.
    fn enforced(&self) -> Option<&crate::policy::PolicyDigest> {
        None
    }

    /// Starts a command whose whole process tree the sandbox can kill, its
    /// output and stdin handed back as streams (the contract is in
    /// `sandbox/exec.rs`: [`Spawned`]).
    ///
    /// # Errors
    ///
    /// `unsupported` on providers without commands.
    fn exec(&self, spec: &ExecSpec) -> Result<Spawned> {
        let _ = spec;
        Err(runs_no_commands(self.kind()))
    }

    /// Starts a command connected to this process's own stdin, stdout and
    /// stderr (`cubby exec`: a raw passthrough, the command the terminal's
    /// foreground job). A provider of this machine hands the descriptors
    /// over; one that runs commands elsewhere pumps them. [`ExecSpec::stdin`]
    /// is ignored: the command reads this process's stdin.
    ///
    /// # Errors
    ///
    /// `unsupported` on providers without commands; for a program that did
    /// not start, `not_found` when there is no such program (nor on the
    /// command's `PATH`) and `denied` when it cannot be executed (`cubby
    /// exec` exits 127 and 126, as a shell does; 125 for any other error).
    fn exec_attached(&self, spec: &ExecSpec) -> Result<Box<dyn ProcessHandle>> {
        let _ = spec;
        Err(runs_no_commands(self.kind()))
    }

    /// Where commands see `path` of the workspace (an absolute path in
    /// their file system), for variables that point into it
    /// (`$CUBBY_SKILLS_DIR`). `None` for a provider that runs no commands.
    fn command_path(&self, path: &WorkspacePath) -> Option<std::path::PathBuf> {
        let _ = path;
        None
    }

    /// How a working directory is shown in verdict lines.
    fn show_cwd(&self, cwd: &WorkspacePath) -> String {
        format!("/{}", cwd.as_path().display())
    }

    /// A new run's hold on the sandbox's gateways (`[gateway.<name>]`,
    /// SPEC §5.5): the token its commands get, live until it drops. `None`
    /// for a sandbox without gateways (every provider but `linux`).
    ///
    /// # Errors
    ///
    /// `internal` when no token can be made.
    fn gateway_run(&self) -> Result<Option<crate::net::GatewayRun>> {
        Ok(None)
    }

    /// The latest requests the sandbox's gateways answered, oldest first.
    fn gateway_events(&self) -> Vec<crate::net::GatewayEvent> {
        Vec::new()
    }
}

/// The error of starting a command on a provider without commands.
fn runs_no_commands(kind: ProviderKind) -> crate::Error {
    crate::Error::new(
        crate::ErrorKind::Unsupported,
        format!("the {} provider runs no commands", kind.as_str()),
    )
}

/// A sandbox made of a file system and no command runner: the `virtual`
/// provider, and the file half of the host providers until commands land.
pub struct FsSandbox<F> {
    kind: ProviderKind,
    fs: F,
}

impl<F: FileSystem> FsSandbox<F> {
    /// The file system.
    pub fn inner(&self) -> &F {
        &self.fs
    }

    /// Wraps `fs` as a provider of `kind`.
    pub fn new(kind: ProviderKind, fs: F) -> FsSandbox<F> {
        FsSandbox { kind, fs }
    }
}

impl<F: FileSystem> Sandbox for FsSandbox<F> {
    fn kind(&self) -> ProviderKind {
        self.kind
    }
    fn fs(&self) -> &dyn FileSystem {
        &self.fs
    }
    fn supports_commands(&self) -> bool {
        false
    }
}

/// A `virtual` sandbox over `fs` (pass an `Arc<MemoryFs>` to keep a handle
/// on the tree).
pub fn virtual_sandbox<F: FileSystem + 'static>(fs: F) -> Arc<dyn Sandbox> {
    Arc::new(FsSandbox::new(ProviderKind::Virtual, fs))
}

/// A `local` sandbox rooted at `root`: confined file tools, and commands
/// that run as host processes (not an OS boundary).
///
/// # Errors
///
/// `not_found` when `root` is not an existing directory.
pub fn local_sandbox(root: &std::path::Path) -> Result<Arc<dyn Sandbox>> {
    Ok(Arc::new(LocalSandbox::open(root)?))
}
