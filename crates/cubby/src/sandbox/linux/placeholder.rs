//! The placeholders of the `linux` provider's reservations (see
//! `reserve.rs`), as operations on the workspace's [`LocalFs`]: made,
//! recognised, removed, and moved into a stash and back, each step
//! confined beneath the root as every [`LocalFs`] operation is, and each
//! checking that what it acts on is still the placeholder cubby made (its
//! inode, kind and mode).

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::AsFd;

use rustix::fs::{
    AtFlags, Dir, Mode, OFlags, RenameFlags, Stat, fstat, mkdirat, renameat_with, statat, unlinkat,
};
use rustix::io::Errno;

use crate::error::{Error, Result};
use crate::path::WorkspacePath;
use crate::sandbox::EntryKind;
use crate::sandbox::local::{
    LocalFs, PLACEHOLDER_MODE, ParentFd, io_err, is_placeholder_mode, kind_of,
};

/// Mode of a file placeholder: read-only for its owner. It stands in for a
/// missing file git reads when it is there (`commondir`, `config.worktree`),
/// with content git takes as if it were missing (see `reserve.rs`).
pub(crate) const PLACEHOLDER_FILE_MODE: u32 = 0o400;

/// Most bytes a file placeholder holds.
pub(crate) const MAX_PLACEHOLDER_FILE_BYTES: i64 = 1;

/// Whether `stat` is of the placeholder (directory, or file) with inode `ino`.
fn is_placeholder_stat(stat: &Stat, ino: u64) -> bool {
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

/// What [`Placeholders::unstash_placeholder`] did.
pub(crate) enum Unstash {
    /// The placeholder is at the path.
    Moved,
    /// The name in the stash held something else; it stays there.
    Refused,
    /// Nothing moved (something is at the path, or the stash entry is gone).
    Failed,
}

/// Whether `path` is still the placeholder directory with inode `ino`,
/// and its parent's fd and its name.
fn placeholder_at<'f, 'p>(
    fs: &'f LocalFs,
    path: &'p WorkspacePath,
    ino: u64,
) -> Option<(ParentFd<'f>, &'p OsStr)> {
    let (parent, name) = fs.parent_of(path).ok()?;
    statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|s| is_placeholder_stat(&s, ino))
        .then_some((parent, name))
}

/// What [`Placeholders::hold_foreign`] found at a protected path.
pub(crate) enum Foreign {
    /// Something else than a placeholder (or nothing): bound as it is.
    NotPlaceholder,
    /// A placeholder (another process's, or left by a killed one), held
    /// with a shared lock until the fd closes: its maker leaves it in place
    /// while the lock is held.
    Held(std::os::fd::OwnedFd),
    /// Its maker moved or removed it while this waited for the lock: look
    /// at the path again.
    Moved,
}

/// Opens the placeholder at `name` in `parent` to lock it (a directory or
/// a regular file, never a link, FIFO or device).
fn open_to_lock(parent: &ParentFd<'_>, name: &OsStr) -> Option<std::os::fd::OwnedFd> {
    rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()
}

/// The placeholder operations on a workspace.
pub(crate) trait Placeholders {
    /// Creates `path` as an empty directory with mode
    /// [`PLACEHOLDER_MODE`] (a mount point that reserves a missing
    /// protected name). Its parent must exist. Returns the new directory's
    /// inode number.
    fn mkdir_placeholder(&self, path: &WorkspacePath) -> Result<u64>;

    /// Creates the missing `path` as a file placeholder (mode
    /// [`PLACEHOLDER_FILE_MODE`]) holding `content`; returns its inode.
    fn mkfile_placeholder(&self, path: &WorkspacePath, content: &[u8]) -> Result<u64>;

    /// Whether `path` is still the placeholder with inode `ino`.
    fn is_placeholder(&self, path: &WorkspacePath, ino: u64) -> bool;

    /// Removes the placeholder `path` if it is still the empty directory
    /// with inode `ino` that [`Placeholders::mkdir_placeholder`] made.
    fn remove_placeholder(&self, path: &WorkspacePath, ino: u64);

    /// Moves the placeholder `path` (inode `ino`) out of the workspace
    /// into `stash` as `as_name`, for [`Placeholders::unstash_placeholder`] to
    /// bring back: a rename costs a fraction of a `mkdir` and an `rmdir`.
    /// False when it is no longer the placeholder or cannot be moved.
    fn stash_placeholder(
        &self,
        path: &WorkspacePath,
        ino: u64,
        stash: impl AsFd,
        as_name: &OsStr,
    ) -> bool;

    /// Cubby processes on one workspace each see the other's placeholders
    /// as existing protected paths, and a command binds one onto itself;
    /// when its maker then moved it into its stash, the bind went with it
    /// and the name was free again in that command's view (red-team pass
    /// 18, F1). So a placeholder bound this way is held with a shared
    /// `flock` while the command runs, and its maker takes an exclusive one
    /// (not waiting) before it moves or removes it, leaving it in place when
    /// it cannot ([`Placeholders::lock_to_put_away`]). This looks at
    /// `path` and takes that shared lock when it is a placeholder, waiting
    /// out a maker that is moving it.
    fn hold_foreign(&self, path: &WorkspacePath) -> Foreign;

    /// The exclusive lock on the placeholder `path` (inode `ino`) that
    /// moving or removing it takes: `Some` with the lock (or with nothing to
    /// lock: the path is gone or not the placeholder, which the move checks
    /// again), `None` when another process's command holds it.
    fn lock_to_put_away(
        &self,
        path: &WorkspacePath,
        ino: u64,
    ) -> Option<Option<std::os::fd::OwnedFd>>;

    /// Moves the stashed `name` back to `path` (which must be missing) if it
    /// is the placeholder with inode `ino`.
    fn unstash_placeholder(
        &self,
        path: &WorkspacePath,
        ino: u64,
        stash: impl AsFd,
        name: &OsStr,
    ) -> Unstash;
}

impl Placeholders for LocalFs {
    fn mkdir_placeholder(&self, path: &WorkspacePath) -> Result<u64> {
        let (parent, name) = self.parent_of(path)?;
        mkdirat(&parent, name, Mode::from_raw_mode(PLACEHOLDER_MODE))
            .map_err(|e| io_err(e, path))?;
        // One `statat` of the name in the confined parent (not a second
        // open and close): what is there now must be the directory just
        // made, with the placeholder's mode — a link or anything else put
        // in its place meanwhile is refused.
        let stat = statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| io_err(e, path))?;
        if kind_of(&stat) != EntryKind::Dir || !is_placeholder_mode(stat.st_mode) {
            return Err(io_err(Errno::EXIST, path));
        }
        Ok(stat.st_ino)
    }

    fn mkfile_placeholder(&self, path: &WorkspacePath, content: &[u8]) -> Result<u64> {
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

    fn is_placeholder(&self, path: &WorkspacePath, ino: u64) -> bool {
        placeholder_at(self, path, ino).is_some()
    }

    fn remove_placeholder(&self, path: &WorkspacePath, ino: u64) {
        let Ok((parent, name)) = self.parent_of(path) else {
            return;
        };
        // One `statat`: the placeholder still, and of which kind.
        let Some(stat) = statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW)
            .ok()
            .filter(|s| is_placeholder_stat(s, ino))
        else {
            return;
        };
        if kind_of(&stat) == EntryKind::Dir {
            // Fails (ENOTEMPTY) if anything was put inside: then it stays,
            // as the user's.
            if unlinkat(&parent, name, AtFlags::REMOVEDIR) == Err(Errno::NOTEMPTY) {
                tracing::warn!(
                    "`{path}` was reserved for a command and is not empty now: left in place"
                );
            }
        } else {
            let _ = unlinkat(&parent, name, AtFlags::empty());
        }
    }

    fn stash_placeholder(
        &self,
        path: &WorkspacePath,
        ino: u64,
        stash: impl AsFd,
        as_name: &OsStr,
    ) -> bool {
        let Some((parent, name)) = placeholder_at(self, path, ino) else {
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

    fn hold_foreign(&self, path: &WorkspacePath) -> Foreign {
        use rustix::fs::FlockOperation;
        let Ok((parent, name)) = self.parent_of(path) else {
            return Foreign::NotPlaceholder;
        };
        let looks = |s: &Stat| is_placeholder_stat(s, s.st_ino);
        let Some(before) = statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW)
            .ok()
            .filter(looks)
        else {
            return Foreign::NotPlaceholder;
        };
        let Some(fd) = open_to_lock(&parent, name) else {
            return Foreign::Moved;
        };
        if !fstat(&fd).is_ok_and(|s| s.st_ino == before.st_ino && looks(&s)) {
            return Foreign::Moved;
        }
        if rustix::fs::flock(&fd, FlockOperation::LockShared).is_err() {
            return Foreign::NotPlaceholder;
        }
        // Still at its name once locked: its maker cannot move it now.
        if statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|s| s.st_ino == before.st_ino)
        {
            Foreign::Held(fd)
        } else {
            Foreign::Moved
        }
    }

    fn lock_to_put_away(
        &self,
        path: &WorkspacePath,
        ino: u64,
    ) -> Option<Option<std::os::fd::OwnedFd>> {
        use rustix::fs::FlockOperation;
        let Some((parent, name)) = placeholder_at(self, path, ino) else {
            return Some(None);
        };
        let Some(fd) = open_to_lock(&parent, name) else {
            return Some(None);
        };
        if !fstat(&fd).is_ok_and(|s| s.st_ino == ino) {
            return Some(None);
        }
        match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Some(Some(fd)),
            Err(Errno::WOULDBLOCK) => None,
            Err(_) => Some(None),
        }
    }

    fn unstash_placeholder(
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
            .is_ok_and(|s| is_placeholder_stat(&s, ino) && kind_of(&s) == EntryKind::Dir)
            && dir_is_empty(&parent, leaf)
        {
            return Unstash::Moved;
        }
        // Something else was in the stash under that name: back it goes.
        let _ = renameat_with(&parent, leaf, &stash, name, RenameFlags::NOREPLACE);
        Unstash::Refused
    }
}
