//! Reservations of missing protected paths for the `linux` provider.
//!
//! A protected path that does not exist yet (`.codex/`, `.mcp.json`, …)
//! must not be creatable by a command, and Landlock cannot refuse the
//! creation of one name in a writable directory. So while a command runs,
//! the missing path is *reserved*: an empty directory (mode
//! [`PLACEHOLDER_MODE`]) that the command's mount namespace binds
//! read-only onto itself — a mount point cannot be removed or renamed, and
//! nothing can be created in it. The host's git does not list empty
//! directories. Commands running at once share a reservation; it leaves the
//! workspace when the last of them ends.
//!
//! Making and removing a directory costs an inode allocation each time
//! (and on ext4 without a journal, a scan past recently freed inodes that
//! grows with the churn). So a released placeholder is not removed but
//! *moved* into a stash outside the workspace — a directory of cubby's in
//! the system temp dir, when that is on the workspace's file system — and
//! the next reservation moves it back: two renames instead of `mkdir` and
//! `rmdir`, and nothing left in the workspace between commands. Where no
//! stash can be had (another file system, a umask that strips the owner's
//! write bit), placeholders are made and removed each time.
//!
//! Stashed placeholders are removed when their sandbox is dropped; those of
//! a process that was killed are removed by the next one that opens a
//! stash, and placeholders it left in the workspace by the next sandbox on
//! that workspace (`LinuxSandbox::open`).

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustix::fs::{AtFlags, Mode, OFlags};

use super::local::Unstash;
use super::local::{PLACEHOLDER_MODE, is_placeholder_mode};
use super::{DirEntry, FileSystem, LocalFs, Metadata, OpenFile};
use crate::error::Result;
use crate::path::WorkspacePath;
use crate::process::lock;

/// Stashes made by this process (part of each stash's name).
static STASHES: AtomicU64 = AtomicU64::new(0);

/// One reserved path: the placeholder's inode and its users.
#[derive(Debug)]
struct Placeholder {
    ino: u64,
    users: usize,
}

/// Released placeholders, kept outside the workspace for reuse.
#[derive(Debug)]
struct Stash {
    /// The stash directory (`O_PATH`).
    dir: OwnedFd,
    /// Names in it start with this (`<pid>-<n>-`).
    prefix: String,
    /// Placeholders in the stash: name and inode.
    free: Vec<(OsString, u64)>,
    /// Names handed out so far.
    named: u64,
}

#[derive(Debug)]
struct Inner {
    map: HashMap<WorkspacePath, Placeholder>,
    /// Opened when first needed (`None` inside: none can be had).
    stash: Option<Option<Stash>>,
}

/// The reservations of one sandbox's workspace.
#[derive(Debug)]
pub(crate) struct Reservations {
    fs: Arc<LocalFs>,
    inner: Mutex<Inner>,
}

impl Reservations {
    pub(crate) fn new(fs: Arc<LocalFs>) -> Arc<Reservations> {
        Arc::new(Reservations {
            fs,
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                stash: None,
            }),
        })
    }

    /// Whether `path` is reserved now.
    pub(crate) fn holds(&self, path: &WorkspacePath) -> bool {
        lock(&self.inner).map.contains_key(path)
    }

    /// Whether `path` is reserved now and still cubby's placeholder.
    fn hides(&self, path: &WorkspacePath) -> bool {
        let inner = lock(&self.inner);
        inner
            .map
            .get(path)
            .is_some_and(|slot| self.fs.is_placeholder(path, slot.ino))
    }

    /// Takes out of `entries`, the listing of directory `dir`, the
    /// placeholders of reserved paths.
    fn hide_in(&self, dir: &WorkspacePath, entries: &mut Vec<DirEntry>) {
        let inner = lock(&self.inner);
        for (path, slot) in &inner.map {
            if let Some(name) = path.file_name()
                && path.parent() == *dir
                && self.fs.is_placeholder(path, slot.ino)
            {
                entries.retain(|entry| entry.name != name);
            }
        }
    }

    /// Takes a use of the reservation at `path` when there is one and its
    /// placeholder is still the directory cubby made (it may have been
    /// removed or replaced on the host meanwhile); returns its inode.
    /// `None`: not reserved, the caller looks at what is there.
    pub(crate) fn claim(&self, path: &WorkspacePath) -> Option<u64> {
        let mut inner = lock(&self.inner);
        let slot = inner.map.get_mut(path)?;
        if self.fs.is_placeholder(path, slot.ino) {
            slot.users += 1;
            return Some(slot.ino);
        }
        None
    }

    /// Whether `path` is a placeholder directory with inode `ino`.
    /// Reserves the missing `path`; returns the placeholder's inode.
    ///
    /// # Errors
    ///
    /// As `mkdir` (something may have appeared there meanwhile).
    pub(crate) fn reserve(&self, path: &WorkspacePath) -> Result<u64> {
        let mut inner = lock(&self.inner);
        if inner.stash.is_none() {
            inner.stash = Some(open_stash(&self.fs));
        }
        let mut ino = None;
        if let Some(Some(stash)) = inner.stash.as_mut()
            && let Some((name, stashed)) = stash.free.pop()
        {
            match self
                .fs
                .unstash_placeholder(path, stashed, &stash.dir, &name)
            {
                Unstash::Moved => ino = Some(stashed),
                // Not what was stashed: that name is not used again.
                Unstash::Refused => {}
                // Something is there now (then `mkdir` says so below), or
                // the move failed: make one.
                Unstash::Failed => stash.free.push((name, stashed)),
            }
        }
        let ino = match ino {
            Some(ino) => ino,
            None => self.fs.mkdir_placeholder(path)?,
        };
        // A stale entry (its placeholder removed on the host while a command
        // still used it) gives way; that command's lease releases nothing.
        inner
            .map
            .insert(path.clone(), Placeholder { ino, users: 1 });
        Ok(ino)
    }

    /// Lets go of one use of each `(path, inode)`; a placeholder nobody
    /// uses any more leaves the workspace: into the stash, or removed where
    /// there is none.
    pub(crate) fn release(&self, paths: &[(WorkspacePath, u64)]) {
        let mut inner = lock(&self.inner);
        let Inner { map, stash } = &mut *inner;
        let mut stash = stash.get_or_insert_with(|| open_stash(&self.fs)).as_mut();
        for (path, ino) in paths {
            let Some(slot) = map.get_mut(path) else {
                continue;
            };
            if slot.ino != *ino {
                continue;
            }
            slot.users = slot.users.saturating_sub(1);
            if slot.users > 0 {
                continue;
            }
            map.remove(path);
            if let Some(stash) = stash.as_mut() {
                let name = OsString::from(format!("{}{}", stash.prefix, stash.named));
                if self.fs.stash_placeholder(path, *ino, &stash.dir, &name) {
                    stash.named += 1;
                    stash.free.push((name, *ino));
                    continue;
                }
            }
            self.fs.remove_placeholder(path, *ino);
        }
    }
}

impl Drop for Reservations {
    fn drop(&mut self) {
        // No lease is left (each holds an `Arc`): nothing is in use.
        let inner = self.inner.get_mut().unwrap_or_else(|p| p.into_inner());
        for (path, slot) in inner.map.drain() {
            self.fs.remove_placeholder(&path, slot.ino);
        }
        if let Some(Some(stash)) = inner.stash.take() {
            for (name, _) in stash.free {
                let _ = rustix::fs::unlinkat(&stash.dir, &name, AtFlags::REMOVEDIR);
            }
        }
    }
}

/// The file tools' view of a `linux` sandbox's workspace: the host's files
/// without the placeholders that reserve missing protected paths while
/// commands run. A reserved path is missing to the tools, as it is on the
/// host between commands; what the host put at a protected path (not
/// cubby's placeholder) is shown as it is.
#[derive(Debug)]
pub(crate) struct WithoutReservations(pub(crate) Arc<Reservations>);

impl WithoutReservations {
    /// `not_found` for a reserved path, as for any missing one.
    fn refuse_reserved(&self, path: &WorkspacePath) -> Result<()> {
        if self.0.hides(path) {
            return Err(crate::Error::from_io(
                &std::io::Error::from(rustix::io::Errno::NOENT),
                &path.display(),
            ));
        }
        Ok(())
    }
}

impl FileSystem for WithoutReservations {
    fn metadata(&self, path: &WorkspacePath) -> Result<Metadata> {
        self.refuse_reserved(path)?;
        self.0.fs.metadata(path)
    }

    fn open(&self, path: &WorkspacePath) -> Result<OpenFile> {
        self.refuse_reserved(path)?;
        self.0.fs.open(path)
    }

    fn read_dir(&self, path: &WorkspacePath) -> Result<Vec<DirEntry>> {
        self.refuse_reserved(path)?;
        let mut entries = self.0.fs.read_dir(path)?;
        self.0.hide_in(path, &mut entries);
        Ok(entries)
    }

    fn write_atomic(&self, path: &WorkspacePath, content: &[u8]) -> Result<()> {
        // Protected paths are refused before a write reaches a provider; a
        // write that still met a placeholder fails on the directory.
        self.0.fs.write_atomic(path, content)
    }
}

/// At most this many placeholders left by ended processes are taken over
/// when a stash opens (the rest are removed).
const ADOPT_AT_MOST: usize = 8;

/// Opens this process's stash for the workspace of `fs`: the directory
/// `cubby-reserve-<uid>` in the system temp dir, made private to the user,
/// when it is on the workspace's file system and not beneath the workspace.
/// Placeholders that processes which have ended left there (`cubby exec`
/// leaves its own; a killed cubby, its free ones) are taken over, up to
/// [`ADOPT_AT_MOST`], or removed.
fn open_stash(fs: &LocalFs) -> Option<Stash> {
    let uid = rustix::process::getuid().as_raw();
    let base = std::env::temp_dir().join(format!("cubby-reserve-{uid}"));
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&base);
    let dir = rustix::fs::open(
        &base,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let stat = rustix::fs::fstat(&dir).ok()?;
    // Someone else's, or shared: not a place to move workspace entries to.
    if stat.st_uid != uid || stat.st_mode & 0o077 != 0 || Some(stat.st_dev) != fs.root_dev() {
        return None;
    }
    // Nor one that commands can reach (`TMPDIR` inside the workspace).
    if std::fs::canonicalize(&base).map_or(true, |b| b.starts_with(fs.root_path())) {
        return None;
    }
    let n = STASHES.fetch_add(1, Ordering::Relaxed);
    let mut stash = Stash {
        dir,
        prefix: format!("{}-{n}-", std::process::id()),
        free: Vec::new(),
        named: 0,
    };
    // `stash.dir` is `O_PATH`: listing takes a descriptor opened for reading.
    let listing = rustix::fs::openat(
        &stash.dir,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .and_then(rustix::fs::Dir::new);
    let Ok(entries) = listing else {
        return Some(stash);
    };
    for entry in entries.flatten() {
        let name = OsString::from(std::ffi::OsStr::from_bytes(entry.file_name().to_bytes()));
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(meta) = rustix::fs::statat(&stash.dir, &name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        let placeholder = rustix::fs::FileType::from_raw_mode(meta.st_mode)
            == rustix::fs::FileType::Directory
            && is_placeholder_mode(meta.st_mode);
        if !placeholder || std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        // Placeholders of another mode (made under a umask that cleared a
        // bit, or by a cubby that made them write-only) are removed.
        if meta.st_mode & 0o7777 == PLACEHOLDER_MODE && stash.free.len() < ADOPT_AT_MOST {
            let mine = OsString::from(format!("{}{}", stash.prefix, stash.named));
            // Another process may take it first: then it is gone here.
            if rustix::fs::renameat_with(
                &stash.dir,
                &name,
                &stash.dir,
                &mine,
                rustix::fs::RenameFlags::NOREPLACE,
            )
            .is_ok()
            {
                stash.named += 1;
                stash.free.push((mine, meta.st_ino));
            }
        } else {
            let _ = rustix::fs::unlinkat(&stash.dir, &name, AtFlags::REMOVEDIR);
        }
    }
    Some(stash)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// The tests share the stash directory (and take over each other's
    /// leftovers): one at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn stash_dir() -> std::path::PathBuf {
        std::env::temp_dir().join(format!(
            "cubby-reserve-{}",
            rustix::process::getuid().as_raw()
        ))
    }

    #[test]
    fn what_an_ended_process_left_in_the_stash_is_taken_over() {
        let _one = serial();
        let (dir, fs) = workspace();
        // Clear what earlier processes left (taken over, then removed).
        {
            let clear = Reservations::new(fs.clone());
            lock(&clear.inner).stash = Some(open_stash(&fs));
        }
        let r = Reservations::new(fs);
        // `cubby exec` leaves its placeholder in the stash; a pid that is
        // not running stands for it.
        let _ = std::fs::DirBuilder::new().mode(0o700).create(stash_dir());
        let left = stash_dir().join("999999999-0-0");
        std::fs::DirBuilder::new()
            .mode(PLACEHOLDER_MODE)
            .create(&left)
            .unwrap();
        let left_ino = std::fs::symlink_metadata(&left).unwrap().ino();
        let claude = WorkspacePath::parse(".claude").unwrap();
        assert_eq!(r.reserve(&claude).unwrap(), left_ino, "moved in, not made");
        assert_eq!(ino_at(&dir.path().join(".claude")), Some(left_ino));
        assert_eq!(ino_at(&left), None);
        drop(r);
        assert_eq!(ino_at(&dir.path().join(".claude")), None);
    }

    fn workspace() -> (tempfile::TempDir, Arc<LocalFs>) {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(LocalFs::open(dir.path()).unwrap());
        (dir, fs)
    }

    fn ino_at(path: &std::path::Path) -> Option<u64> {
        std::fs::symlink_metadata(path).ok().map(|m| m.ino())
    }

    #[test]
    fn a_released_placeholder_leaves_the_workspace_and_comes_back_from_the_stash() {
        let _one = serial();
        let (dir, fs) = workspace();
        let r = Reservations::new(fs);
        let codex = WorkspacePath::parse(".codex").unwrap();
        let ino = r.reserve(&codex).unwrap();
        let meta = std::fs::symlink_metadata(dir.path().join(".codex")).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.mode() & 0o7777, PLACEHOLDER_MODE);
        r.release(&[(codex.clone(), ino)]);
        assert!(
            matches!(lock(&r.inner).stash, Some(Some(_))),
            "the temp dir is on this file system"
        );
        assert_eq!(ino_at(&dir.path().join(".codex")), None, "nothing stays");
        // The next reservation is the same directory, moved back.
        assert_eq!(r.reserve(&codex).unwrap(), ino);
        assert_eq!(ino_at(&dir.path().join(".codex")), Some(ino));
        r.release(&[(codex, ino)]);
        let stash_dir = stash_dir();
        let prefix = match &lock(&r.inner).stash {
            Some(Some(stash)) => stash.prefix.clone(),
            _ => unreachable!(),
        };
        let stashed = || {
            std::fs::read_dir(&stash_dir)
                .unwrap()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| e.metadata().unwrap().ino())
                .collect::<Vec<_>>()
        };
        assert!(stashed().contains(&ino), "in the stash");
        drop(r);
        assert_eq!(
            stashed(),
            Vec::<u64>::new(),
            "dropping the sandbox empties its stash"
        );
        assert_eq!(ino_at(&dir.path().join(".codex")), None);
    }

    #[test]
    fn something_else_in_the_stash_is_not_brought_into_the_workspace() {
        let _one = serial();
        let (dir, fs) = workspace();
        let r = Reservations::new(fs);
        let codex = WorkspacePath::parse(".codex").unwrap();
        let ino = r.reserve(&codex).unwrap();
        r.release(&[(codex.clone(), ino)]);
        let (stash_fd, name) = match &lock(&r.inner).stash {
            Some(Some(stash)) => (
                rustix::io::fcntl_dupfd_cloexec(&stash.dir, 0).unwrap(),
                stash.free.last().unwrap().0.clone(),
            ),
            _ => unreachable!(),
        };
        let stashed = std::path::PathBuf::from(format!("/proc/self/fd/{}", {
            use std::os::fd::AsRawFd;
            stash_fd.as_raw_fd()
        }))
        .join(&name);
        std::fs::remove_dir(&stashed).unwrap();
        std::os::unix::fs::symlink("/etc", &stashed).unwrap();
        let again = r.reserve(&codex).unwrap();
        let meta = std::fs::symlink_metadata(dir.path().join(".codex")).unwrap();
        assert!(meta.is_dir(), "a placeholder, not the symlink");
        assert_eq!(meta.ino(), again);
        assert!(std::fs::symlink_metadata(&stashed).unwrap().is_symlink());
        std::fs::remove_file(&stashed).unwrap();
    }

    #[test]
    fn commands_share_a_reservation_until_the_last_ends() {
        let _one = serial();
        let (dir, fs) = workspace();
        let r = Reservations::new(fs);
        let mcp = WorkspacePath::parse(".mcp.json").unwrap();
        let ino = r.reserve(&mcp).unwrap();
        assert_eq!(r.claim(&mcp), Some(ino));
        r.release(&[(mcp.clone(), ino)]);
        assert_eq!(
            ino_at(&dir.path().join(".mcp.json")),
            Some(ino),
            "still used"
        );
        r.release(&[(mcp.clone(), ino)]);
        assert_eq!(ino_at(&dir.path().join(".mcp.json")), None);
        assert_eq!(r.claim(&mcp), None);
    }

    #[test]
    fn what_the_host_put_in_its_place_is_left_alone() {
        let _one = serial();
        let (dir, fs) = workspace();
        let r = Reservations::new(fs);
        let claude = WorkspacePath::parse(".claude").unwrap();
        let ino = r.reserve(&claude).unwrap();
        // The host replaces the placeholder with a directory of its own.
        std::fs::remove_dir(dir.path().join(".claude")).unwrap();
        std::fs::create_dir(dir.path().join(".claude")).unwrap();
        std::fs::write(dir.path().join(".claude/settings.json"), "{}").unwrap();
        assert_eq!(r.claim(&claude), None, "not ours any more");
        r.release(&[(claude, ino)]);
        assert_eq!(
            std::fs::read_to_string(dir.path().join(".claude/settings.json")).unwrap(),
            "{}"
        );
    }

    #[test]
    fn without_the_stash_placeholders_are_made_and_removed() {
        let _one = serial();
        let (dir, fs) = workspace();
        let r = Reservations::new(fs);
        // As where the temp dir is on another file system.
        lock(&r.inner).stash = Some(None);
        let toml = WorkspacePath::parse("cubby.toml").unwrap();
        let ino = r.reserve(&toml).unwrap();
        assert!(dir.path().join("cubby.toml").is_dir());
        r.release(&[(toml.clone(), ino)]);
        assert_eq!(ino_at(&dir.path().join("cubby.toml")), None);
        // Something that appeared meanwhile is not taken over.
        std::fs::write(dir.path().join("cubby.toml"), "x").unwrap();
        assert!(r.reserve(&toml).is_err());
    }
}
