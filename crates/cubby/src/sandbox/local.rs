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
    AtFlags, Dir, FileType, Mode, OFlags, RenameFlags, ResolveFlags, Stat, fchmod, fstat, fsync,
    mkdirat, openat2, renameat, renameat_with, statat, unlinkat,
};
use rustix::io::Errno;

use super::{DirEntry, EntryKind, FileSystem, Metadata, OpenFile};
use crate::error::{Error, ErrorKind, Result};
use crate::path::WorkspacePath;

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

fn kind_of(stat: &Stat) -> EntryKind {
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => EntryKind::File,
        FileType::Directory => EntryKind::Dir,
        FileType::Symlink => EntryKind::Symlink,
        _ => EntryKind::Special,
    }
}

/// A parent directory: the root's fd, or one opened beneath it.
enum ParentFd<'a> {
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

/// Mode of a file placeholder: read-only for its owner. It stands in for a
/// missing file git reads when it is there (`commondir`, `config.worktree`),
/// with content git takes as if it were missing (see `reserve.rs`).
pub(crate) const PLACEHOLDER_FILE_MODE: u32 = 0o400;

/// Most bytes a file placeholder holds.
pub(crate) const MAX_PLACEHOLDER_FILE_BYTES: i64 = 1;

/// Whether `stat` is of the placeholder (directory, or file) with inode `ino`.
fn is_placeholder(stat: &Stat, ino: u64) -> bool {
    stat.st_ino == ino
        && match kind_of(stat) {
            EntryKind::Dir => is_placeholder_mode(stat.st_mode),
            EntryKind::File => {
                stat.st_mode & 0o7777 & !PLACEHOLDER_FILE_MODE == 0
                    && stat.st_size <= MAX_PLACEHOLDER_FILE_BYTES
            }
            _ => false,
        }
}

/// Whether the directory `dir` holds nothing (`false` when it cannot be
/// listed).
pub(crate) fn dir_is_empty(dir: impl AsFd, name: &OsStr) -> bool {
    let Ok(fd) = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return false;
    };
    let Ok(mut listing) = Dir::new(fd) else {
        return false;
    };
    while let Some(entry) = listing.read() {
        match entry {
            Ok(e) if e.file_name().to_bytes() == b"." || e.file_name().to_bytes() == b".." => {}
            _ => return false,
        }
    }
    true
}

/// What [`LocalFs::unstash_placeholder`] did.
pub(crate) enum Unstash {
    /// The placeholder is at the path.
    Moved,
    /// The name in the stash held something else; it stays there.
    Refused,
    /// Nothing moved (something is at the path, or the stash entry is gone).
    Failed,
}

fn metadata_of(stat: &Stat) -> Metadata {
    Metadata {
        kind: kind_of(stat),
        size: stat.st_size as u64,
        mode: stat.st_mode & 0o7777,
        mtime_ns: stat.st_mtime as i128 * 1_000_000_000 + stat.st_mtime_nsec as i128,
        ctime_ns: stat.st_ctime as i128 * 1_000_000_000 + stat.st_ctime_nsec as i128,
        ino: stat.st_ino,
    }
}

fn io_err(e: Errno, path: &WorkspacePath) -> Error {
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

    /// Creates `path` as an empty directory with mode
    /// [`PLACEHOLDER_MODE`] (a mount point that reserves a missing
    /// protected name). Its parent must exist. Returns the new directory's
    /// inode number.
    pub(crate) fn mkdir_placeholder(&self, path: &WorkspacePath) -> Result<u64> {
        let (parent, name) = self.parent_of(path)?;
        mkdirat(&parent, name, Mode::from_raw_mode(PLACEHOLDER_MODE))
            .map_err(|e| io_err(e, path))?;
        let dir = self
            .resolve_in(
                &parent,
                name,
                OFlags::PATH | OFlags::DIRECTORY,
                Mode::empty(),
            )
            .map_err(|e| io_err(e, path))?;
        let stat = fstat(&dir).map_err(|e| io_err(e, path))?;
        Ok(stat.st_ino)
    }

    /// Creates the missing `path` as a file placeholder (mode
    /// [`PLACEHOLDER_FILE_MODE`]) holding `content`; returns its inode.
    pub(crate) fn mkfile_placeholder(&self, path: &WorkspacePath, content: &[u8]) -> Result<u64> {
        let (parent, name) = self.parent_of(path)?;
        let fd = rustix::fs::openat(
            &parent,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(PLACEHOLDER_FILE_MODE),
        )
        .map_err(|e| io_err(e, path))?;
        let mut file = File::from(fd);
        if let Err(e) = std::io::Write::write_all(&mut file, content) {
            let _ = unlinkat(&parent, name, AtFlags::empty());
            return Err(Error::from_io(&e, &path.display()));
        }
        let stat = fstat(&file).map_err(|e| io_err(e, path))?;
        Ok(stat.st_ino)
    }

    /// Whether `path` is still the placeholder with inode `ino`.
    pub(crate) fn is_placeholder(&self, path: &WorkspacePath, ino: u64) -> bool {
        self.placeholder_at(path, ino).is_some()
    }

    /// Whether `path` is still the placeholder directory with inode `ino`,
    /// and its parent's fd and its name.
    fn placeholder_at<'p>(
        &self,
        path: &'p WorkspacePath,
        ino: u64,
    ) -> Option<(ParentFd<'_>, &'p OsStr)> {
        let (parent, name) = self.parent_of(path).ok()?;
        statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|s| is_placeholder(&s, ino))
            .then_some((parent, name))
    }

    /// Removes the placeholder `path` if it is still the empty directory
    /// with inode `ino` that [`LocalFs::mkdir_placeholder`] made.
    pub(crate) fn remove_placeholder(&self, path: &WorkspacePath, ino: u64) {
        if let Some((parent, name)) = self.placeholder_at(path, ino) {
            let dir = statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|s| kind_of(&s) == EntryKind::Dir);
            if dir {
                // Fails (ENOTEMPTY) if anything was put inside: then it
                // stays, as the user's.
                if unlinkat(&parent, name, AtFlags::REMOVEDIR) == Err(Errno::NOTEMPTY) {
                    tracing::warn!(
                        "`{path}` was reserved for a command and is not empty now: left in place"
                    );
                }
            } else {
                let _ = unlinkat(&parent, name, AtFlags::empty());
            }
        }
    }

    /// Moves the placeholder `path` (inode `ino`) out of the workspace
    /// into `stash` as `as_name`, for [`LocalFs::unstash_placeholder`] to
    /// bring back: a rename costs a fraction of a `mkdir` and an `rmdir`.
    /// False when it is no longer the placeholder or cannot be moved.
    pub(crate) fn stash_placeholder(
        &self,
        path: &WorkspacePath,
        ino: u64,
        stash: impl AsFd,
        as_name: &OsStr,
    ) -> bool {
        let Some((parent, name)) = self.placeholder_at(path, ino) else {
            return false;
        };
        // Only an empty directory goes: what was put in one stays in the
        // workspace, as the user's.
        if !statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|s| kind_of(&s) == EntryKind::Dir)
            || !dir_is_empty(&parent, name)
        {
            return false;
        }
        if renameat_with(&parent, name, &stash, as_name, RenameFlags::NOREPLACE).is_err() {
            return false;
        }
        // Replaced or filled between the check and the move: put it back.
        if !statat(&stash, as_name, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|s| s.st_ino == ino)
            || !dir_is_empty(&stash, as_name)
        {
            let _ = renameat_with(&stash, as_name, &parent, name, RenameFlags::NOREPLACE);
            return false;
        }
        true
    }

    /// Moves the stashed `name` back to `path` (which must be missing) if it
    /// is the placeholder with inode `ino`.
    pub(crate) fn unstash_placeholder(
        &self,
        path: &WorkspacePath,
        ino: u64,
        stash: impl AsFd,
        name: &OsStr,
    ) -> Unstash {
        let Ok((parent, leaf)) = self.parent_of(path) else {
            return Unstash::Failed;
        };
        if renameat_with(&stash, name, &parent, leaf, RenameFlags::NOREPLACE).is_err() {
            return Unstash::Failed;
        }
        if statat(&parent, leaf, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|s| is_placeholder(&s, ino) && kind_of(&s) == EntryKind::Dir)
            && dir_is_empty(&parent, leaf)
        {
            return Unstash::Moved;
        }
        // Something else was in the stash under that name: back it goes.
        let _ = renameat_with(&parent, leaf, &stash, name, RenameFlags::NOREPLACE);
        Unstash::Refused
    }

    /// The device the root is on.
    pub(crate) fn root_dev(&self) -> Option<u64> {
        fstat(&self.root).ok().map(|s| s.st_dev)
    }

    /// The directory fd of `path`'s parent (the root's own for a name at
    /// the top) and `path`'s last component.
    fn parent_of<'p>(&self, path: &'p WorkspacePath) -> Result<(ParentFd<'_>, &'p OsStr)> {
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
    fn resolve_in(
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
        let fd = self.resolve(path, OFlags::RDONLY | OFlags::DIRECTORY)?;
        let mut dir = Dir::new(fd).map_err(|e| io_err(e, path))?;
        let mut entries = Vec::new();
        while let Some(entry) = dir.read() {
            let entry = entry.map_err(|e| io_err(e, path))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
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
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
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
