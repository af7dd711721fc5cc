//! The host-directory file system, confined by the kernel.
//!
//! Every path is resolved with `openat2` relative to a directory fd of the
//! root, with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`.
//! The kernel refuses, at the moment of the open, any resolution that would
//! leave the root or cross a symbolic link, so a directory swapped for a link
//! between a check and a use cannot redirect anything: there is no separate
//! check. Files are opened `O_NOFOLLOW | O_NONBLOCK` after an `O_PATH` probe
//! whose `fstat` proves they are regular, and checked again on the real fd.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{
    AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags, Stat, fchmod, fstat, fsync, mkdirat,
    openat2, renameat, statat, unlinkat,
};
use rustix::io::Errno;

use crate::error::{Error, ErrorKind, Result};
use crate::path::WorkspacePath;
use crate::sandbox::{DirEntry, EntryKind, FileSystem, Metadata, OpenFile};

/// How many times an `openat2` that reports a concurrent rename (`EAGAIN`)
/// is retried before giving up.
const MAX_RESOLVE_RETRIES: usize = 16;

/// Mode for newly created files (before the umask).
const NEW_FILE_MODE: u32 = 0o666;
/// Mode for newly created directories (before the umask).
const NEW_DIR_MODE: u32 = 0o777;

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A host directory seen through `openat2`.
#[derive(Debug)]
pub struct LocalFs {
    root: OwnedFd,
    root_path: std::path::PathBuf,
}

fn resolve_flags() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

pub(crate) fn kind_of(stat: &Stat) -> EntryKind {
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => EntryKind::File,
        FileType::Directory => EntryKind::Dir,
        FileType::Symlink => EntryKind::Symlink,
        _ => EntryKind::Special,
    }
}

/// A parent directory: the root's fd, or one opened beneath it.
pub(crate) enum ParentFd<'a> {
    Root(BorrowedFd<'a>),
    Opened(OwnedFd),
}

impl AsFd for ParentFd<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            ParentFd::Root(fd) => *fd,
            ParentFd::Opened(fd) => fd.as_fd(),
        }
    }
}

/// Mode of a placeholder (see `reserve.rs`): read and write for its owner,
/// no search. Nobody but root can create anything in it (that takes search
/// permission); cubby can still move it to another directory (which
/// rewrites its `..`, and takes write permission on it); and its owner can
/// list it, so that `find`, `grep -r`, `rg` or `git status` run in the
/// workspace while it is there walk it as the empty directory it is instead
/// of reporting it unreadable (and `find` and `grep` exiting non-zero).
pub(crate) const PLACEHOLDER_MODE: u32 = 0o600;

/// Whether `mode` is one a placeholder can have: no bit but the owner's
/// read and write ones (the umask may have cleared some; placeholders made
/// before they were readable have the write bit only). Inode numbers are
/// reused at once; a directory made in a placeholder's place has other
/// bits (a directory without search permission is of no use to anyone).
pub(crate) fn is_placeholder_mode(mode: u32) -> bool {
    mode & 0o7777 & !PLACEHOLDER_MODE == 0
}

// `nlink_t` is `u64` here and `u32` on other targets.
#[allow(clippy::useless_conversion)]
fn metadata_of(stat: &Stat) -> Metadata {
    Metadata {
        kind: kind_of(stat),
        size: stat.st_size as u64,
        mode: stat.st_mode & 0o7777,
        mtime_ns: stat.st_mtime as i128 * 1_000_000_000 + stat.st_mtime_nsec as i128,
        ctime_ns: stat.st_ctime as i128 * 1_000_000_000 + stat.st_ctime_nsec as i128,
        ino: stat.st_ino,
        nlink: u64::from(stat.st_nlink),
    }
}

pub(crate) fn io_err(e: Errno, path: &WorkspacePath) -> Error {
    Error::from_io(&std::io::Error::from(e), &path.display())
}

fn special_error(path: &WorkspacePath) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!(
            "`{path}` is not a regular file (a FIFO, socket or device); \
             only regular files and directories can be used"
        ),
    )
}

impl LocalFs {
    /// Opens the root directory. The path is canonicalised once, here.
    ///
    /// # Errors
    ///
    /// `not_found` when `root` is not an existing directory.
    pub fn open(root: &Path) -> Result<LocalFs> {
        let root_path = std::fs::canonicalize(root).map_err(|e| {
            Error::new(
                ErrorKind::NotFound,
                format!("workspace root `{}` cannot be opened: {e}", root.display()),
            )
        })?;
        let fd = rustix::fs::open(
            &root_path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| {
            Error::new(
                ErrorKind::NotFound,
                format!(
                    "workspace root `{}` is not a directory: {e}",
                    root_path.display()
                ),
            )
        })?;
        Ok(LocalFs {
            root: fd,
            root_path,
        })
    }

    /// Opens the directory `path` (confined) for use as a working directory.
    pub(crate) fn open_dir(&self, path: &WorkspacePath) -> Result<OwnedFd> {
        self.resolve(path, OFlags::RDONLY | OFlags::DIRECTORY)
    }

    /// The canonical host path of the root.
    pub fn root_path(&self) -> &Path {
        &self.root_path
    }

    /// A new open file description of the root directory (for a lock of
    /// its own: `flock` locks belong to one).
    pub(crate) fn reopen_root(&self) -> std::io::Result<OwnedFd> {
        rustix::fs::openat(
            &self.root,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(std::io::Error::from)
    }

    /// The root directory's device and inode, read now
    /// (two `LocalFs` of one path may be of two directories when it was
    /// replaced in between).
    pub(crate) fn root_id(&self) -> Option<(u64, u64)> {
        fstat(&self.root).ok().map(|s| (s.st_dev, s.st_ino))
    }

    /// The device the root is on.
    pub(crate) fn root_dev(&self) -> Option<u64> {
        fstat(&self.root).ok().map(|s| s.st_dev)
    }

    /// The directory fd of `path`'s parent (the root's own for a name at
    /// the top) and `path`'s last component.
    pub(crate) fn parent_of<'p>(
        &self,
        path: &'p WorkspacePath,
    ) -> Result<(ParentFd<'_>, &'p OsStr)> {
        let Some(name) = path.file_name() else {
            return Err(Error::invalid_input("the workspace root has no parent"));
        };
        let parent = path.parent();
        if parent.is_root() {
            return Ok((ParentFd::Root(self.root.as_fd()), name));
        }
        let parent = self.resolve(&parent, OFlags::PATH | OFlags::DIRECTORY)?;
        Ok((ParentFd::Opened(parent), name))
    }

    /// `openat2` beneath `dir`, retrying the kernel's `EAGAIN` (a rename
    /// raced with the resolution).
    pub(crate) fn resolve_in(
        &self,
        dir: impl AsFd,
        path: &OsStr,
        flags: OFlags,
        mode: Mode,
    ) -> Result<OwnedFd, Errno> {
        let mut tries = 0;
        loop {
            match openat2(
                dir.as_fd(),
                path,
                flags | OFlags::CLOEXEC | OFlags::NOFOLLOW,
                mode,
                resolve_flags(),
            ) {
                Err(Errno::AGAIN) if tries < MAX_RESOLVE_RETRIES => tries += 1,
                Err(Errno::AGAIN) => return Err(Errno::XDEV),
                other => return other,
            }
        }
    }

    /// `path`'s metadata, or `None` when it cannot be looked at (missing,
    /// through a link, …): [`FileSystem::metadata`] without making an
    /// error, for looks where most paths are missing.
    pub(crate) fn metadata_if_any(&self, path: &WorkspacePath) -> Option<Metadata> {
        let fd = self
            .resolve_in(&self.root, path.for_open(), OFlags::PATH, Mode::empty())
            .ok()?;
        fstat(&fd).ok().map(|stat| metadata_of(&stat))
    }

    fn resolve(&self, path: &WorkspacePath, flags: OFlags) -> Result<OwnedFd> {
        self.resolve_in(&self.root, path.for_open(), flags, Mode::empty())
            .map_err(|e| self.explain(e, &self.root, path.for_open(), path))
    }

    /// Maps an error of a confined open. `O_DIRECTORY` on a final symbolic
    /// link reports `ENOTDIR`, not `ELOOP`: look again with `O_PATH`. A link is
    /// `path_escape`; so is a directory, since one that was not a directory
    /// a moment ago was a link swapped out again (files do not turn into
    /// directories in place).
    fn explain(&self, e: Errno, dir: impl AsFd, rel: &OsStr, path: &WorkspacePath) -> Error {
        if e == Errno::NOTDIR {
            match self.resolve_in(dir, rel, OFlags::PATH, Mode::empty()) {
                Err(Errno::LOOP | Errno::XDEV) => return Error::path_escape(&path.display()),
                // O_PATH|O_NOFOLLOW opens a final link itself rather than failing.
                Ok(fd)
                    if fstat(&fd).is_ok_and(|s| {
                        matches!(kind_of(&s), EntryKind::Dir | EntryKind::Symlink)
                    }) =>
                {
                    return Error::path_escape(&path.display());
                }
                _ => {}
            }
        }
        io_err(e, path)
    }

    /// Opens (creating as needed) the directory `path`, one component at a
    /// time, each step confined beneath the previous directory fd.
    fn open_dir_creating(&self, path: &WorkspacePath) -> Result<OwnedFd> {
        let mut current =
            self.resolve(&WorkspacePath::root(), OFlags::RDONLY | OFlags::DIRECTORY)?;
        for name in path.components() {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY;
            let next = match self.resolve_in(&current, name, flags, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => {
                    match mkdirat(&current, name, Mode::from_raw_mode(NEW_DIR_MODE)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(io_err(e, path)),
                    }
                    self.resolve_in(&current, name, flags, Mode::empty())
                        .map_err(|e| io_err(e, path))?
                }
                Err(Errno::NOTDIR) => {
                    let err = self.explain(Errno::NOTDIR, &current, name, path);
                    if err.kind() == ErrorKind::PathEscape {
                        return Err(err);
                    }
                    return Err(Error::invalid_input(format!(
                        "cannot create `{path}`: `{}` is a file, not a directory",
                        name.to_string_lossy()
                    )));
                }
                Err(e) => return Err(io_err(e, path)),
            };
            // A placeholder reserving a protected path while a command
            // runs (`reserve.rs`): nothing of the tools goes in it (root
            // could, permissions notwithstanding), so that it stays empty
            // and leaves the workspace as it came.
            if fstat(&next).is_ok_and(|s| is_placeholder_mode(s.st_mode)) {
                return Err(Error::denied(format!(
                    "cannot write `{path}`: `{}` is held for a protected path while a command \
                     runs; write there once the command has ended",
                    name.to_string_lossy()
                )));
            }
            current = next;
        }
        Ok(current)
    }
}

impl FileSystem for LocalFs {
    fn root_identity(&self) -> Option<(u64, u64)> {
        self.root_id()
    }

    fn create_dir_all(&self, path: &WorkspacePath) -> Result<()> {
        self.open_dir_creating(path).map(drop)
    }

    fn remove_empty_dir(&self, path: &WorkspacePath) -> Result<bool> {
        let Some(name) = path.file_name() else {
            return Ok(false);
        };
        let parent = match self.resolve(&path.parent(), OFlags::RDONLY | OFlags::DIRECTORY) {
            Ok(fd) => fd,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        match unlinkat(&parent, name, AtFlags::REMOVEDIR) {
            Ok(()) => Ok(true),
            Err(Errno::NOTEMPTY | Errno::EXIST | Errno::NOENT | Errno::NOTDIR) => Ok(false),
            Err(e) => Err(io_err(e, path)),
        }
    }

    fn metadata(&self, path: &WorkspacePath) -> Result<Metadata> {
        let fd = self.resolve(path, OFlags::PATH)?;
        let stat = fstat(&fd).map_err(|e| io_err(e, path))?;
        Ok(metadata_of(&stat))
    }

    fn open(&self, path: &WorkspacePath) -> Result<OpenFile> {
        // Probe with O_PATH: it opens nothing (no FIFO wait, no device side
        // effect) and tells what the object is.
        let probe = self.resolve(path, OFlags::PATH)?;
        let stat = fstat(&probe).map_err(|e| io_err(e, path))?;
        match kind_of(&stat) {
            EntryKind::File => {}
            EntryKind::Dir => {
                return Err(Error::new(
                    ErrorKind::IsDirectory,
                    format!("`{path}` is a directory; use list_files to see what it holds"),
                ));
            }
            EntryKind::Symlink => return Err(Error::path_escape(&path.display())),
            EntryKind::Special => return Err(special_error(path)),
        }
        drop(probe);
        // The object may have been swapped since the probe: O_NONBLOCK keeps a
        // FIFO from hanging, and the second fstat refuses anything irregular.
        let fd = self.resolve(path, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY)?;
        let stat = fstat(&fd).map_err(|e| io_err(e, path))?;
        if kind_of(&stat) != EntryKind::File {
            return Err(special_error(path));
        }
        Ok(OpenFile {
            reader: Box::new(File::from(fd)),
            metadata: metadata_of(&stat),
        })
    }

    fn read_dir(&self, path: &WorkspacePath) -> Result<Vec<DirEntry>> {
        let (mut entries, _) = self.read_dir_bounded(path, usize::MAX)?;
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    fn read_dir_bounded(&self, path: &WorkspacePath, max: usize) -> Result<(Vec<DirEntry>, bool)> {
        let fd = self.resolve(path, OFlags::RDONLY | OFlags::DIRECTORY)?;
        let mut dir = Dir::new(fd).map_err(|e| io_err(e, path))?;
        let mut entries = Vec::new();
        while let Some(entry) = dir.read() {
            let entry = entry.map_err(|e| io_err(e, path))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if entries.len() == max {
                return Ok((entries, true));
            }
            let name = OsStr::from_bytes(name).to_os_string();
            let kind = match entry.file_type() {
                FileType::RegularFile => EntryKind::File,
                FileType::Directory => EntryKind::Dir,
                FileType::Symlink => EntryKind::Symlink,
                FileType::Unknown => {
                    let child = path.join_name(&name);
                    match self.metadata(&child) {
                        Ok(m) => m.kind,
                        Err(e) if e.kind() == ErrorKind::PathEscape => EntryKind::Symlink,
                        Err(_) => continue,
                    }
                }
                _ => EntryKind::Special,
            };
            entries.push(DirEntry { name, kind });
        }
        Ok((entries, false))
    }

    fn write_atomic(&self, path: &WorkspacePath, content: &[u8]) -> Result<()> {
        let Some(name) = path.file_name() else {
            return Err(Error::new(
                ErrorKind::IsDirectory,
                "the workspace root is a directory; pass a file path",
            ));
        };
        let parent = self.open_dir_creating(&path.parent())?;
        let mode = match statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => match kind_of(&stat) {
                EntryKind::File => Some(stat.st_mode & 0o7777),
                EntryKind::Dir => {
                    return Err(Error::new(
                        ErrorKind::IsDirectory,
                        format!("`{path}` is a directory; pass a file path"),
                    ));
                }
                EntryKind::Symlink => return Err(Error::path_escape(&path.display())),
                EntryKind::Special => return Err(special_error(path)),
            },
            Err(Errno::NOENT) => None,
            Err(e) => return Err(io_err(e, path)),
        };
        let tmp_name = temp_name(name);
        let tmp = rustix::fs::openat(
            &parent,
            tmp_name.as_os_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode.unwrap_or(NEW_FILE_MODE)),
        )
        .map_err(|e| io_err(e, path))?;
        let result = (|| -> Result<(), Errno> {
            let mut file = File::from(tmp);
            std::io::Write::write_all(&mut file, content)
                .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))?;
            if let Some(mode) = mode {
                // Creation applied the umask; restore the exact old bits.
                fchmod(&file, Mode::from_raw_mode(mode))?;
            }
            fsync(&file)?;
            renameat(&parent, tmp_name.as_os_str(), &parent, name)?;
            Ok(())
        })();
        if let Err(e) = result {
            let _ = unlinkat(&parent, tmp_name.as_os_str(), AtFlags::empty());
            return Err(io_err(e, path));
        }
        // Make the rename itself durable.
        let _ = fsync(&parent);
        Ok(())
    }
}

/// A temp name beside the target: hidden, unique within this process and
/// marked as cubby's.
fn temp_name(target: &OsStr) -> OsString {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut stem: Vec<u8> = target.as_bytes().iter().copied().take(100).collect();
    stem.retain(|b| *b != b'/');
    let mut name = OsString::from(".");
    name.push(OsStr::from_bytes(&stem));
    name.push(format!(".cubby-tmp.{}.{n}", std::process::id()));
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_are_unique_and_hidden() {
        let a = temp_name(OsStr::new("file.txt"));
        let b = temp_name(OsStr::new("file.txt"));
        assert_ne!(a, b);
        assert!(a.as_bytes().starts_with(b".file.txt.cubby-tmp."));
        assert!(temp_name(OsStr::new(&"x".repeat(255))).len() < 255);
    }
}
