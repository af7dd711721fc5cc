//! Reservations of missing protected paths for the `linux` provider.
//!
//! A protected path that does not exist yet (`.codex/`, `.mcp.json`, …)
//! must not be creatable by a command, and Landlock cannot refuse the
//! creation of one name in a writable directory. So while a command runs,
//! the missing path is *reserved*: an empty directory (mode
//! [`PLACEHOLDER_MODE`](crate::sandbox::local::PLACEHOLDER_MODE)) that the command's mount namespace binds
//! read-only onto itself — a mount point cannot be removed or renamed, and
//! nothing can be created in it. The host's git does not list empty
//! directories. Commands running at once share a reservation; it leaves the
//! workspace when the last of them ends. Every sandbox of this process on
//! one workspace directory shares one table ([`Reservations::shared`]): an
//! upstream MCP server's sandbox and the workspace's.
//!
//! Two names inside a git directory cannot be directories: git reads
//! `commondir` and `config.worktree` whenever they exist, and a directory
//! there breaks the repository. They are reserved by a read-only *file*
//! placeholder git takes as if the file were missing ([`Kind::for_path`]):
//! `commondir` holding `.` (the common directory is the git directory
//! itself), `config.worktree` empty. `sequencer` is an empty file too: git
//! reads `sequencer/todo` on every `git status`, and quietly takes "not a
//! directory" for no sequence, where the empty directory it cannot search
//! would print an error each time. File placeholders are made and removed.
//!
//! Making and removing a directory costs an inode allocation each time
//! (and on ext4 without a journal, a scan past recently freed inodes that
//! grows with the churn). So a released directory placeholder is not
//! removed but *moved* into a stash outside the workspace — a directory of
//! this sandbox's own, `cubby-reserve-<uid>/<pid>-<start>-<n>` in the
//! system temp dir (both mode 0700), when that is on the workspace's file
//! system — and the next reservation moves it back: two renames instead of
//! `mkdir` and `rmdir`. A placeholder nobody uses lingers in the workspace
//! for [`LINGER`] first: a command that starts meanwhile takes it in place
//! (commands in quick succession skip the renames and their checks), and a
//! thread of the process puts it away when it is due; nothing is left in
//! the workspace two seconds after the last command.
//! Only an empty placeholder cubby made goes into the stash or comes out of
//! it; one that is not empty when released (root can write in it,
//! permissions notwithstanding; the file tools refuse to) stays in the
//! workspace as the user's, with a warning. Where no stash can be had
//! (another file system, a umask that strips the owner's write bit, `cubby
//! exec`'s single command: [`Reservations::without_stash`]), placeholders
//! are made and removed each time.
//!
//! Each table holds a shared `flock` on the workspace directory while it
//! lives ([`Reservations::hold`]); the sweep of leftovers at an open runs
//! only under an exclusive one ([`Reservations::sweep_guard`]), so that no
//! process removes the placeholders another live process's commands hold.
//!
//! The stash is emptied and removed when its sandbox is dropped (the CLI
//! drops its sandboxes on stdin EOF, SIGTERM and SIGINT); the stash of a
//! process that was killed is removed by the next one that opens a stash
//! (its pid no longer runs that process), and placeholders it left in the
//! workspace by the next sandbox on that workspace (`LinuxSandbox::open`).

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, Mode, OFlags};

use super::placeholder::{Placeholders, Unstash};
use crate::error::Result;
use crate::path::WorkspacePath;
use crate::sandbox::local::is_placeholder_mode;
use crate::sandbox::{DirEntry, FileSystem, LocalFs, Metadata, OpenFile};
use crate::sync::lock;

/// Stashes made by this process (part of each stash's name).
static STASHES: AtomicU64 = AtomicU64::new(0);

/// What stands in for a missing protected path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An empty directory of mode [`PLACEHOLDER_MODE`](crate::sandbox::local::PLACEHOLDER_MODE)
    /// (stashed for reuse).
    Dir,
    /// A read-only file with this content, which git reads as it would the
    /// file's absence.
    File(&'static [u8]),
}

impl Kind {
    /// The placeholder for `path`: a file for `commondir` (`.`: the git
    /// directory is its own common directory), `config.worktree` (empty: no
    /// settings) and `sequencer` (empty: no cherry-pick or revert sequence;
    /// git reads `sequencer/todo` quietly as missing); a directory for
    /// everything else.
    pub(crate) fn for_path(path: &WorkspacePath) -> Kind {
        match path.file_name().and_then(|n| n.to_str()) {
            Some("commondir") => Kind::File(b"."),
            Some("config.worktree" | "sequencer") => Kind::File(b""),
            _ => Kind::Dir,
        }
    }
}

/// One reserved path: the placeholder's inode, kind and users.
#[derive(Debug)]
struct Placeholder {
    ino: u64,
    kind: Kind,
    users: usize,
    /// When its last user let go (it lingers: [`LINGER`]).
    idle_since: Option<Instant>,
}

/// Released placeholders, kept outside the workspace for reuse.
#[derive(Debug)]
struct Stash {
    /// The stash directory (`O_PATH`), this sandbox's own.
    dir: OwnedFd,
    /// Its name in the base directory.
    name: OsString,
    /// The base directory (`cubby-reserve-<uid>`, `O_PATH`).
    base: OwnedFd,
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
    /// The workspace directory's device and inode, read once: what
    /// [`Reservations::shared`] compares, for every live sandbox, at each
    /// open (an `fstat` each made an open cost grow with the sandboxes
    /// alive: a server holding a thousand).
    root: Option<(u64, u64)>,
    inner: Mutex<Inner>,
    /// A shared `flock` on the workspace directory, held while this table
    /// lives: another process's sandbox opening on the workspace sweeps
    /// leftover placeholders only when it can lock it exclusively — when
    /// no live process holds reservations there (red-team pass 15, S1: a
    /// second `cubby call` removed a running command's placeholders, and
    /// the command made `.claude/`).
    hold: Mutex<Option<OwnedFd>>,
}

/// Every sandbox's reservations in this process, for [`empty_stashes`].
static LIVE: Mutex<Vec<Weak<Reservations>>> = Mutex::new(Vec::new());

/// The placeholders of sandboxes that were dropped, kept for this
/// process's next sandboxes on the same file system: a server that makes a
/// sandbox per caller would otherwise `mkdir` every placeholder at each
/// sandbox's first command (on ext4 without a journal, past a scan of
/// recently freed inodes that grows with the churn: about 2.5 ms a first
/// command on this project's test machine) and `rmdir` them at its end.
/// A stash like the others (named for this process, removed by
/// [`empty_stashes`], or by the next process after a kill); a placeholder
/// taken from it is checked as one from a sandbox's own stash is (the
/// inode it was stashed with, the mode, empty).
static SPARE: Mutex<Option<Stash>> = Mutex::new(None);

/// Most placeholders [`SPARE`] keeps.
const MAX_SPARE: usize = 256;

/// Registers [`remove_spare_at_exit`] once, when [`SPARE`] is first kept
/// or a placeholder first lingers.
static AT_EXIT: std::sync::Once = std::sync::Once::new();

/// Removes [`SPARE`], and puts away the placeholders that linger, when the
/// process exits normally, for a process that never calls
/// [`empty_stashes`] and keeps a sandbox to its end (a test binary's
/// static one, an embedder that calls `exit` right after a command):
/// nothing of it is left in the temporary directory or the workspaces.
/// A process killed leaves it for the next one to reclaim, as any stash.
/// Registers [`remove_spare_at_exit`] with the C library.
#[allow(unsafe_code)]
fn register_spare_removal() {
    // SAFETY: `atexit` takes a function of no arguments that returns
    // nothing; this one never unwinds (it catches any panic) and touches
    // only process-wide state that outlives `main`.
    unsafe {
        libc::atexit(remove_spare_at_exit);
    }
}

extern "C" fn remove_spare_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        // What lingers in the workspaces goes too (a process that exits
        // without dropping its sandboxes or calling `empty_stashes`); a
        // table another thread holds is left (exit must not wait).
        let live: Vec<Arc<Reservations>> = match LIVE.try_lock() {
            Ok(live) => live.iter().filter_map(Weak::upgrade).collect(),
            Err(_) => Vec::new(),
        };
        for r in &live {
            if let Ok(mut inner) = r.inner.try_lock() {
                r.put_away_idle_in(&mut inner, None);
            }
        }
        drop(live);
        if let Ok(mut spare) = SPARE.try_lock()
            && let Some(spare) = spare.take()
        {
            spare.remove();
        }
    });
}

/// Empties and removes the stash of every sandbox of this process, and
/// lets them make and remove placeholders from now on: for a process about
/// to exit, whose sandboxes may never be dropped (a tool call still running
/// on a thread holds one). Placeholders of commands still running stay in
/// their workspaces, for the next sandbox there to sweep.
pub(crate) fn empty_stashes() {
    EXITING.store(true, Ordering::Relaxed);
    let live: Vec<Arc<Reservations>> = lock(&LIVE).iter().filter_map(Weak::upgrade).collect();
    for r in live {
        // What lingers leaves the workspace now, with the stash.
        r.put_away_idle(None);
        let mut inner = lock(&r.inner);
        if let Some(Some(stash)) = inner.stash.take() {
            stash.remove();
        }
        inner.stash = Some(None);
    }
    if let Some(spare) = lock(&SPARE).take() {
        spare.remove();
    }
    // A sandbox whose last user is being dropped on another thread (a
    // tool call's, as the runtime shuts down) is emptying its stash there:
    // it is done when it has left the list.
    let deadline = std::time::Instant::now() + DROP_WAIT;
    while lock(&LIVE).iter().any(|w| w.strong_count() == 0) && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// False once [`empty_stashes`] has run (the process is exiting): a stash
/// retired then is removed, not kept as [`SPARE`].
fn empty_stashes_not_called() -> bool {
    !EXITING.load(Ordering::Relaxed)
}

/// Set by [`empty_stashes`].
static EXITING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// How long [`empty_stashes`] waits for sandboxes being dropped elsewhere.
const DROP_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

impl Reservations {
    pub(crate) fn new(fs: Arc<LocalFs>) -> Arc<Reservations> {
        let r = Reservations::made(fs);
        lock(&LIVE).push(Arc::downgrade(&r));
        r
    }

    fn made(fs: Arc<LocalFs>) -> Arc<Reservations> {
        Arc::new(Reservations {
            root: fs.root_id(),
            fs,
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                stash: None,
            }),
            hold: Mutex::new(None),
        })
    }

    /// An exclusive lock on the workspace directory when no other table
    /// (of this process or another) holds it — the leave to sweep
    /// leftover placeholders, until it drops; `None` when one does, or the
    /// lock cannot be had (then nothing is swept).
    pub(crate) fn sweep_guard(&self) -> Option<OwnedFd> {
        let fd = self.fs.reopen_root().ok()?;
        rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive).ok()?;
        Some(fd)
    }

    /// Takes this table's shared lock on the workspace directory (once;
    /// it waits for a sweep under way elsewhere to end).
    pub(crate) fn hold(&self) {
        let mut hold = lock(&self.hold);
        if hold.is_some() {
            return;
        }
        if let Ok(fd) = self.fs.reopen_root()
            && rustix::fs::flock(&fd, rustix::fs::FlockOperation::LockShared).is_ok()
        {
            *hold = Some(fd);
        }
    }

    /// The reservations of the workspace `fs` is on, shared by every
    /// sandbox of this process on that directory (the workspace's own and
    /// each upstream MCP server's): a placeholder one sandbox's command
    /// holds is a use the others take, not a directory they find there,
    /// and it leaves the workspace only when no command of any of them
    /// uses it. With reservations of their own, two sandboxes would race
    /// to make one placeholder (`EEXIST`), and one's release would move a
    /// placeholder out from under the other's running command (its
    /// read-only mount detached, the protected name creatable).
    pub(crate) fn shared(fs: Arc<LocalFs>) -> Arc<Reservations> {
        let Some(id) = fs.root_id() else {
            return Reservations::new(fs);
        };
        let mut live = lock(&LIVE);
        // Upgraded under the lock, dropped after it: the last `Arc` of
        // one being dropped elsewhere takes the lock in its `Drop`.
        let alive: Vec<Arc<Reservations>> = live.iter().filter_map(Weak::upgrade).collect();
        let found = alive
            .iter()
            .find(|r| r.root == Some(id) && !r.stashless())
            .cloned();
        let r = match found {
            Some(r) => r,
            None => {
                let r = Reservations::made(fs);
                live.push(Arc::downgrade(&r));
                r
            }
        };
        drop(live);
        drop(alive);
        r
    }

    /// Whether [`without_stash`](Self::without_stash) was called (`cubby
    /// exec`'s one command): not shared.
    fn stashless(&self) -> bool {
        matches!(lock(&self.inner).stash, Some(None))
    }

    /// From now on, no stash: placeholders are made and removed (for a
    /// process that runs one command and exits without dropping its
    /// sandbox, `cubby exec`). A stash already opened is emptied.
    pub(crate) fn without_stash(&self) {
        self.put_away_idle(None);
        let mut inner = lock(&self.inner);
        if let Some(Some(stash)) = inner.stash.take() {
            stash.remove();
        }
        inner.stash = Some(None);
        // What killed servers left is reclaimed here too.
        if let Ok(base) = rustix::fs::open(
            base_path(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) && rustix::fs::fstat(&base)
            .is_ok_and(|s| s.st_uid == rustix::process::getuid().as_raw() && s.st_mode & 0o077 == 0)
        {
            reclaim(&base);
            remove_base_if_empty(&base);
        }
    }

    /// Whether `path` is reserved now.
    #[cfg(test)]
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
        self.take_use(&mut lock(&self.inner), path)
    }

    /// [`claim`](Self::claim) with the lock held.
    fn take_use(&self, inner: &mut Inner, path: &WorkspacePath) -> Option<u64> {
        let slot = inner.map.get_mut(path)?;
        if self.fs.is_placeholder(path, slot.ino) {
            slot.users += 1;
            slot.idle_since = None;
            return Some(slot.ino);
        }
        None
    }

    /// Reserves the missing `path` with a placeholder of `kind`; returns
    /// the placeholder's inode.
    ///
    /// When a placeholder of `path` is already reserved (a command starting
    /// at the same time made it), this takes a use of it instead.
    ///
    /// # Errors
    ///
    /// As `mkdir` (something may have appeared there meanwhile).
    pub(crate) fn reserve(&self, path: &WorkspacePath, kind: Kind) -> Result<u64> {
        let mut inner = lock(&self.inner);
        // Another command's start reserved it between the caller's `claim`
        // and this call (both looked at the missing path at once): share it.
        if let Some(ino) = self.take_use(&mut inner, path) {
            return Ok(ino);
        }
        if let Kind::File(content) = kind {
            let ino = self.fs.mkfile_placeholder(path, content)?;
            inner.map.insert(
                path.clone(),
                Placeholder {
                    ino,
                    kind,
                    users: 1,
                    idle_since: None,
                },
            );
            return Ok(ino);
        }
        if inner.stash.is_none() {
            inner.stash = Some(open_stash(&self.fs));
        }
        let mut ino = None;
        if let Some(Some(stash)) = inner.stash.as_mut() {
            if let Some((name, stashed)) = stash.free.pop() {
                match self
                    .fs
                    .unstash_placeholder(path, stashed, &stash.dir, &name)
                {
                    Unstash::Moved => ino = Some(stashed),
                    // Not what was stashed: that name is not used again.
                    Unstash::Refused => {}
                    // Something is there now (then `mkdir` says so below),
                    // or the move failed: make one.
                    Unstash::Failed => stash.free.push((name, stashed)),
                }
            } else {
                // Only with a stash of its own: the base directory is then
                // on this workspace's file system and out of its reach.
                ino = self.take_spare(path);
            }
        }
        let ino = match ino {
            Some(ino) => ino,
            None => self.fs.mkdir_placeholder(path)?,
        };
        // A stale entry (its placeholder removed on the host while a command
        // still used it) gives way; that command's lease releases nothing.
        inner.map.insert(
            path.clone(),
            Placeholder {
                ino,
                kind,
                users: 1,
                idle_since: None,
            },
        );
        Ok(ino)
    }

    /// A placeholder from [`SPARE`] moved to `path`, if one is there.
    fn take_spare(&self, path: &WorkspacePath) -> Option<u64> {
        let mut spare = lock(&SPARE);
        let spare = spare.as_mut()?;
        while let Some((name, stashed)) = spare.free.pop() {
            match self
                .fs
                .unstash_placeholder(path, stashed, &spare.dir, &name)
            {
                Unstash::Moved => return Some(stashed),
                Unstash::Refused => {}
                Unstash::Failed => {
                    spare.free.push((name, stashed));
                    return None;
                }
            }
        }
        None
    }

    /// Removes the placeholder `ino` at `path` that a killed cubby left
    /// (the sweep at a sandbox's open), unless a command of any sandbox of
    /// this process on the workspace holds `path` now: that placeholder is
    /// a live reservation, and removing it would detach the read-only
    /// mount of the running command (a mount point in another mount
    /// namespace can be removed) and fail one being set up (`ENOENT`).
    /// Under the table's lock, so no reservation is made meanwhile.
    pub(crate) fn remove_leftover(&self, path: &WorkspacePath, ino: u64) {
        let inner = lock(&self.inner);
        if inner.map.contains_key(path) {
            return;
        }
        self.fs.remove_placeholder(path, ino);
    }

    /// The workspace these reservations are in.
    pub(crate) fn fs(&self) -> &LocalFs {
        &self.fs
    }

    /// Lets go of one use of each `(path, inode)`. A placeholder nobody
    /// uses any more lingers in the workspace for [`LINGER`] (the next
    /// command takes it in place), then leaves: into the stash. Without a
    /// stash (`cubby exec`'s one command) it is removed at once.
    pub(crate) fn release(&self, paths: &[(WorkspacePath, u64)]) {
        let mut inner = lock(&self.inner);
        let Inner { map, stash } = &mut *inner;
        let mut stash = stash.get_or_insert_with(|| open_stash(&self.fs)).as_mut();
        // Lingering needs the thread that puts placeholders away.
        let linger = stash.is_some() && putter_running();
        let now = Instant::now();
        let mut idle = false;
        let mut gone = Vec::new();
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
            if linger && lingers(path) {
                slot.idle_since = Some(now);
                idle = true;
            } else {
                gone.push(path.clone());
            }
        }
        for path in gone {
            if let Some(slot) = map.remove(&path) {
                self.put_away(stash.as_deref_mut(), &path, &slot);
            }
        }
        drop(inner);
        if idle {
            linger_until(now + LINGER);
        }
    }

    /// Puts away the placeholders nobody has used for [`LINGER`] by `now`
    /// (every unused one when `now` is `None`): into the stash when there
    /// is one, else removed. Returns when the next of those still
    /// lingering is due.
    pub(super) fn put_away_idle(&self, now: Option<Instant>) -> Option<Instant> {
        self.put_away_idle_in(&mut lock(&self.inner), now)
    }

    /// [`put_away_idle`](Self::put_away_idle) with the lock held.
    fn put_away_idle_in(&self, inner: &mut Inner, now: Option<Instant>) -> Option<Instant> {
        let Inner { map, stash } = inner;
        let mut stash = stash.as_mut().and_then(Option::as_mut);
        let mut next: Option<Instant> = None;
        let due: Vec<WorkspacePath> = map
            .iter()
            .filter_map(|(path, slot)| {
                let since = slot.idle_since.filter(|_| slot.users == 0)?;
                let at = since + LINGER;
                if now.is_none_or(|now| at <= now) {
                    return Some(path.clone());
                }
                next = Some(next.map_or(at, |n| n.min(at)));
                None
            })
            .collect();
        for path in due {
            let Some(slot) = map.remove(&path) else {
                continue;
            };
            self.put_away(stash.as_deref_mut(), &path, &slot);
        }
        next
    }

    /// Moves the unused placeholder `slot` at `path` into `stash` (a
    /// directory, when there is a stash) or removes it — unless a command
    /// of another process holds it ([`Placeholders::hold_foreign`]): then
    /// it stays, no longer this table's (the next sandbox opened on the
    /// workspace with no process on it sweeps it).
    fn put_away(&self, stash: Option<&mut Stash>, path: &WorkspacePath, slot: &Placeholder) {
        let Some(_lock) = self.fs.lock_to_put_away(path, slot.ino) else {
            tracing::debug!("`{path}` is held by another process's command: left in place");
            return;
        };
        if let (Some(stash), Kind::Dir) = (stash, slot.kind) {
            let name = OsString::from(stash.named.to_string());
            if self.fs.stash_placeholder(path, slot.ino, &stash.dir, &name) {
                stash.named += 1;
                stash.free.push((name, slot.ino));
                return;
            }
        }
        self.fs.remove_placeholder(path, slot.ino);
    }
}

/// How long a placeholder nobody uses stays in the workspace before it
/// goes back to the stash: commands in quick succession (parallel calls,
/// a script of calls) take it in place, one `statat` each, instead of its
/// two renames and their checks (about twenty system calls a placeholder,
/// forty-odd placeholders in a repository: most of a warm command's cost
/// before this). For that long after a command the host sees the empty
/// placeholders it saw while the command ran.
pub(crate) const LINGER: Duration = Duration::from_secs(2);

/// Git's own state names, whose placeholders do not linger: the host's git
/// reads them whenever they exist (an empty `rebase-merge` makes `git
/// status` say a rebase is under way, a `sequencer` file fails a
/// `cherry-pick`; red-team pass 18), so they leave the workspace as soon as
/// no command uses them.
const GIT_STATE_NAMES: [&str; 7] = [
    ".git",
    "rebase-merge",
    "rebase-apply",
    "sequencer",
    "commondir",
    "config.worktree",
    "gitdir",
];

/// Whether the placeholder of `path` lingers after its last command.
fn lingers(path: &WorkspacePath) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_none_or(|n| !GIT_STATE_NAMES.contains(&n))
}

/// When the lingering placeholders of this process's tables are next due
/// to be put away (`None`: none linger), and the putter's wake-up.
static DUE: Mutex<Option<Instant>> = Mutex::new(None);
static DUE_CHANGED: Condvar = Condvar::new();
/// Starts the putter thread once.
static PUTTER: std::sync::Once = std::sync::Once::new();

/// Set once the putter thread runs.
static PUTTER_RUNNING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Starts the putter thread if it does not run yet; whether it runs (when
/// it cannot be started, placeholders are put away at once, as before
/// they lingered).
fn putter_running() -> bool {
    PUTTER.call_once(|| {
        match std::thread::Builder::new()
            .name("cubby-placeholders".into())
            .spawn(put_away_when_due)
        {
            Ok(_) => PUTTER_RUNNING.store(true, Ordering::Release),
            Err(e) => {
                tracing::warn!("cannot start the thread that puts placeholders away: {e}");
            }
        }
    });
    PUTTER_RUNNING.load(Ordering::Acquire)
}

/// Has the putter thread (started by [`putter_running`]) put lingering
/// placeholders away at `at` (or earlier, when something else is due
/// first).
fn linger_until(at: Instant) {
    AT_EXIT.call_once(register_spare_removal);
    let mut due = lock(&DUE);
    if due.is_none_or(|d| at < d) {
        *due = Some(at);
        DUE_CHANGED.notify_one();
    }
}

/// The putter thread: waits until lingering placeholders are due, puts
/// them away in every live table, and waits for the next.
fn put_away_when_due() {
    loop {
        let mut due = lock(&DUE);
        loop {
            match *due {
                None => due = DUE_CHANGED.wait(due).unwrap_or_else(|p| p.into_inner()),
                Some(at) => {
                    let now = Instant::now();
                    if at <= now {
                        break;
                    }
                    due = DUE_CHANGED
                        .wait_timeout(due, at - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }
        }
        *due = None;
        drop(due);
        let live: Vec<Arc<Reservations>> = lock(&LIVE).iter().filter_map(Weak::upgrade).collect();
        let now = Instant::now();
        let next = live.iter().filter_map(|r| r.put_away_idle(Some(now))).min();
        drop(live);
        if let Some(next) = next {
            linger_until(next);
        }
    }
}

impl Drop for Reservations {
    fn drop(&mut self) {
        // No lease is left (each holds an `Arc`): nothing is in use, and
        // what lingers goes to the stash (and with it to the spare).
        self.put_away_idle(None);
        let inner = self.inner.get_mut().unwrap_or_else(|p| p.into_inner());
        for (path, slot) in inner.map.drain() {
            self.fs.remove_placeholder(&path, slot.ino);
        }
        if let Some(Some(stash)) = inner.stash.take() {
            stash.retire();
        }
        // Done: off the list (see `empty_stashes`).
        let me: *const Reservations = self;
        lock(&LIVE).retain(|w| !std::ptr::eq(w.as_ptr(), me));
    }
}

impl Stash {
    /// Hands the placeholders of a sandbox being dropped to [`SPARE`] (the
    /// stash itself becomes it when there is none; else they are moved
    /// there, up to [`MAX_SPARE`]), then removes what is left; the last
    /// sandbox of the process removes the spare too.
    fn retire(mut self) {
        // The last sandbox of the process: nothing to keep them for (a
        // process that never calls `empty_stashes`, a test's, leaves
        // nothing behind).
        let others = lock(&LIVE).iter().any(|w| w.strong_count() > 0);
        if !others {
            let kept = lock(&SPARE).take();
            if let Some(kept) = kept {
                kept.remove();
            }
            self.remove();
            return;
        }
        let mut spare = lock(&SPARE);
        let same_fs = |a: &OwnedFd, b: &OwnedFd| {
            rustix::fs::fstat(a)
                .ok()
                .zip(rustix::fs::fstat(b).ok())
                .is_some_and(|(a, b)| a.st_dev == b.st_dev)
        };
        match spare.as_mut() {
            None if !self.free.is_empty() && empty_stashes_not_called() => {
                AT_EXIT.call_once(register_spare_removal);
                self.free.truncate(MAX_SPARE);
                *spare = Some(self);
                return;
            }
            Some(kept) if same_fs(&kept.dir, &self.dir) => {
                while kept.free.len() < MAX_SPARE {
                    let Some((name, ino)) = self.free.pop() else {
                        break;
                    };
                    let as_name = OsString::from(kept.named.to_string());
                    if rustix::fs::renameat_with(
                        &self.dir,
                        &name,
                        &kept.dir,
                        &as_name,
                        rustix::fs::RenameFlags::NOREPLACE,
                    )
                    .is_ok()
                    {
                        kept.named += 1;
                        kept.free.push((as_name, ino));
                    } else {
                        self.free.push((name, ino));
                        break;
                    }
                }
            }
            _ => {}
        }
        drop(spare);
        self.remove();
    }

    /// Removes the placeholders in the stash, then the stash (and the base
    /// directory when no other process has a stash in it).
    fn remove(self) {
        for (name, _) in &self.free {
            let _ = rustix::fs::unlinkat(&self.dir, name, AtFlags::REMOVEDIR);
        }
        if rustix::fs::unlinkat(&self.base, &self.name, AtFlags::REMOVEDIR).is_err() {
            tracing::warn!(
                "the placeholder stash `{}` holds something cubby did not put there: left in place",
                self.name.to_string_lossy()
            );
        }
        remove_base_if_empty(&self.base);
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
    fn root_identity(&self) -> Option<(u64, u64)> {
        self.0.fs.root_identity()
    }

    fn create_dir_all(&self, path: &WorkspacePath) -> Result<()> {
        self.refuse_reserved(path)?;
        self.0.fs.create_dir_all(path)
    }

    fn remove_empty_dir(&self, path: &WorkspacePath) -> Result<bool> {
        self.refuse_reserved(path)?;
        self.0.fs.remove_empty_dir(path)
    }

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

    fn read_dir_bounded(&self, path: &WorkspacePath, max: usize) -> Result<(Vec<DirEntry>, bool)> {
        self.refuse_reserved(path)?;
        let (mut entries, more) = self.0.fs.read_dir_bounded(path, max)?;
        self.0.hide_in(path, &mut entries);
        Ok((entries, more))
    }

    fn write_atomic(&self, path: &WorkspacePath, content: &[u8]) -> Result<()> {
        // Protected paths are refused before a write reaches a provider; a
        // write that still met a placeholder fails on the directory.
        self.0.fs.write_atomic(path, content)
    }
}

/// The base directory of the stashes: `cubby-reserve-<uid>` in the
/// system temp dir.
fn base_path() -> std::path::PathBuf {
    let uid = rustix::process::getuid().as_raw();
    std::env::temp_dir().join(format!("cubby-reserve-{uid}"))
}

/// Removes the base directory when it holds nothing (another process may
/// be making its stash in it: its `mkdir` then fails, and it makes the
/// base again).
fn remove_base_if_empty(base: &OwnedFd) {
    let Ok(parent) = rustix::fs::openat(
        base,
        c"..",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return;
    };
    let path = base_path();
    if let Some(name) = path.file_name()
        && rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW)
            .ok()
            .zip(rustix::fs::fstat(base).ok())
            .is_some_and(|(a, b)| a.st_ino == b.st_ino && a.st_dev == b.st_dev)
    {
        let _ = rustix::fs::unlinkat(&parent, name, AtFlags::REMOVEDIR);
    }
}

/// The start time of process `pid` (clock ticks after boot, field 22 of
/// `/proc/<pid>/stat`), which tells a process from a later one with its pid.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Opens a stash of this sandbox's own for the workspace of `fs`: a new
/// directory (mode 0700) in `cubby-reserve-<uid>` (mode 0700, the user's)
/// in the system temp dir, when that is on the workspace's file system and
/// not beneath the workspace. Stashes of processes that no longer run are
/// removed (their empty placeholders, then the directory; what is not an
/// empty placeholder stays).
fn open_stash(fs: &LocalFs) -> Option<Stash> {
    let uid = rustix::process::getuid().as_raw();
    let base_path = base_path();
    let pid = std::process::id();
    let name = OsString::from(format!(
        "{pid}-{}-{}",
        start_time(pid)?,
        STASHES.fetch_add(1, Ordering::Relaxed)
    ));
    // Twice: another process may remove an empty base between our two steps.
    for _ in 0..2 {
        let _ = std::fs::DirBuilder::new().mode(0o700).create(&base_path);
        let base = rustix::fs::open(
            &base_path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let stat = rustix::fs::fstat(&base).ok()?;
        // Someone else's, or shared: not a place to move workspace entries to.
        if stat.st_uid != uid || stat.st_mode & 0o077 != 0 || Some(stat.st_dev) != fs.root_dev() {
            return None;
        }
        // Nor one that commands can reach (`TMPDIR` inside the workspace).
        if std::fs::canonicalize(&base_path).map_or(true, |b| b.starts_with(fs.root_path())) {
            return None;
        }
        reclaim(&base);
        match rustix::fs::mkdirat(&base, &name, Mode::from_raw_mode(0o700)) {
            Ok(()) => {}
            Err(rustix::io::Errno::NOENT) => continue,
            Err(_) => return None,
        }
        let dir = rustix::fs::openat(
            &base,
            &name,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let mine = rustix::fs::fstat(&dir).ok()?;
        if mine.st_uid != uid || mine.st_mode & 0o7777 != 0o700 {
            let _ = rustix::fs::unlinkat(&base, &name, AtFlags::REMOVEDIR);
            return None;
        }
        return Some(Stash {
            dir,
            name,
            base,
            free: Vec::new(),
            named: 0,
        });
    }
    None
}

/// Removes what processes that no longer run left in the base directory:
/// their stashes (`<pid>-<start>-<n>`: empty placeholders inside, then the
/// stash) and placeholders of older cubbies (`<pid>-<n>-<m>`, directly in
/// the base).
fn reclaim(base: &OwnedFd) {
    let listing = rustix::fs::openat(
        base,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .and_then(rustix::fs::Dir::new);
    let Ok(entries) = listing else {
        return;
    };
    for entry in entries.flatten() {
        let name = OsString::from(std::ffi::OsStr::from_bytes(entry.file_name().to_bytes()));
        let Some(text) = name.to_str() else {
            continue;
        };
        let mut parts = text.split('-');
        let (Some(pid), Some(second)) = (
            parts.next().and_then(|p| p.parse::<u32>().ok()),
            parts.next().and_then(|p| p.parse::<u64>().ok()),
        ) else {
            continue;
        };
        let Ok(meta) = rustix::fs::statat(base, &name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        if rustix::fs::FileType::from_raw_mode(meta.st_mode) != rustix::fs::FileType::Directory {
            continue;
        }
        if is_placeholder_mode(meta.st_mode) {
            // An older cubby's placeholder, directly in the base.
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                let _ = rustix::fs::unlinkat(base, &name, AtFlags::REMOVEDIR);
            }
            continue;
        }
        // A stash: its process ended, or its pid is another process's now.
        if start_time(pid) == Some(second) {
            continue;
        }
        let Ok(stash) = rustix::fs::openat(
            base,
            &name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            continue;
        };
        let inside: Vec<OsString> = match rustix::fs::Dir::read_from(&stash) {
            Ok(list) => list
                .flatten()
                .map(|e| OsString::from(std::ffi::OsStr::from_bytes(e.file_name().to_bytes())))
                .filter(|n| n != "." && n != "..")
                .collect(),
            Err(_) => continue,
        };
        for placeholder in inside {
            if rustix::fs::statat(&stash, &placeholder, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|m| {
                rustix::fs::FileType::from_raw_mode(m.st_mode) == rustix::fs::FileType::Directory
                    && is_placeholder_mode(m.st_mode)
            }) {
                let _ = rustix::fs::unlinkat(&stash, &placeholder, AtFlags::REMOVEDIR);
            }
        }
        let _ = rustix::fs::unlinkat(base, &name, AtFlags::REMOVEDIR);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::local::PLACEHOLDER_MODE;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    /// Releases and puts away what that left unused at once, as the
    /// putter thread does [`LINGER`] later.
    fn release_now(r: &Reservations, paths: &[(WorkspacePath, u64)]) {
        r.release(paths);
        r.put_away_idle(None);
    }

    /// The tests share the stash directory (and take over each other's
    /// leftovers): one at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        let one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        // Each test starts with no spare placeholders (an earlier test's
        // dropped sandboxes left theirs there).
        if let Some(spare) = lock(&SPARE).take() {
            spare.remove();
        }
        one
    }

    fn stash_dir() -> std::path::PathBuf {
        std::env::temp_dir().join(format!(
            "cubby-reserve-{}",
            rustix::process::getuid().as_raw()
        ))
    }

    #[test]
    fn what_an_ended_process_left_is_removed_and_never_handed_out() {
        let _one = serial();
        let (dir, fs) = workspace();
        let base = stash_dir();
        let _ = std::fs::DirBuilder::new().mode(0o700).create(&base);
        // A killed server's stash (a pid that runs no process), with a
        // placeholder and something that is not one; and a placeholder of
        // an older cubby, directly in the base.
        let dead = base.join("999999999-1-0");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dead)
            .unwrap();
        std::fs::DirBuilder::new()
            .mode(PLACEHOLDER_MODE)
            .create(dead.join("0"))
            .unwrap();
        let old = base.join("999999999-0-0");
        std::fs::DirBuilder::new()
            .mode(PLACEHOLDER_MODE)
            .create(&old)
            .unwrap();
        let r = Reservations::new(fs);
        let claude = WorkspacePath::parse(".claude").unwrap();
        let ino = r.reserve(&claude, Kind::Dir).unwrap();
        assert_eq!(ino_at(&dead), None, "the dead stash is reclaimed");
        assert_eq!(ino_at(&old), None);
        // Nothing was taken over: this sandbox's stash is empty.
        let mine = match &lock(&r.inner).stash {
            Some(Some(stash)) => base.join(&stash.name),
            _ => unreachable!(),
        };
        assert_eq!(std::fs::read_dir(&mine).unwrap().count(), 0);
        release_now(&r, &[(claude, ino)]);
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

    /// A released placeholder lingers: the next command within [`LINGER`]
    /// takes the same directory in place (nothing goes through the stash),
    /// and once nobody has used it for that long, the putter thread moves
    /// it into the stash.
    #[test]
    fn a_placeholder_lingers_for_the_next_command_then_goes_to_the_stash() {
        let _one = serial();
        let (dir, fs) = workspace();
        let r = Reservations::new(fs);
        let claude = WorkspacePath::parse(".claude").unwrap();
        let at = dir.path().join(".claude");
        let ino = r.reserve(&claude, Kind::Dir).unwrap();
        let released = Instant::now();
        r.release(&[(claude.clone(), ino)]);
        let stashed = || match &lock(&r.inner).stash {
            Some(Some(stash)) => stash.free.len(),
            _ => panic!("the temp dir is on this file system"),
        };
        if released.elapsed() < LINGER {
            assert_eq!(ino_at(&at), Some(ino), "it lingers");
            assert!(r.hides(&claude), "the file tools still do not see it");
            assert_eq!(r.claim(&claude), Some(ino), "taken in place");
            assert_eq!(stashed(), 0, "through no stash");
            r.release(&[(claude.clone(), ino)]);
        }
        let deadline = Instant::now() + LINGER + Duration::from_secs(30);
        while ino_at(&at).is_some() {
            assert!(Instant::now() < deadline, "still in the workspace");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(stashed(), 1, "put away into the stash");
        assert!(!r.holds(&claude));
        assert_eq!(r.reserve(&claude, Kind::Dir).unwrap(), ino, "and back");
        release_now(&r, &[(claude, ino)]);
    }

    #[test]
    fn a_released_placeholder_leaves_the_workspace_and_comes_back_from_the_stash() {
        let _one = serial();
        let (dir, fs) = workspace();
        let r = Reservations::new(fs);
        let codex = WorkspacePath::parse(".codex").unwrap();
        let ino = r.reserve(&codex, Kind::Dir).unwrap();
        let meta = std::fs::symlink_metadata(dir.path().join(".codex")).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.mode() & 0o7777, PLACEHOLDER_MODE);
        release_now(&r, &[(codex.clone(), ino)]);
        assert!(
            matches!(lock(&r.inner).stash, Some(Some(_))),
            "the temp dir is on this file system"
        );
        assert_eq!(ino_at(&dir.path().join(".codex")), None, "nothing stays");
        // The next reservation is the same directory, moved back.
        assert_eq!(r.reserve(&codex, Kind::Dir).unwrap(), ino);
        assert_eq!(ino_at(&dir.path().join(".codex")), Some(ino));
        release_now(&r, &[(codex, ino)]);
        let stash_dir = stash_dir();
        let mine = match &lock(&r.inner).stash {
            Some(Some(stash)) => stash_dir.join(&stash.name),
            _ => unreachable!(),
        };
        let meta = std::fs::symlink_metadata(&mine).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o700, "the sandbox's own, private");
        let stashed = || {
            std::fs::read_dir(&mine)
                .map(|d| {
                    d.flatten()
                        .map(|e| e.metadata().unwrap().ino())
                        .collect::<Vec<u64>>()
                })
                .unwrap_or_default()
        };
        assert_eq!(stashed(), vec![ino], "in the stash");
        // Another sandbox of the process lives on (the last one's drop
        // removes the spare).
        let (_keeper_dir, keeper_fs) = workspace();
        let keeper = Reservations::new(keeper_fs);
        drop(r);
        // Dropping the sandbox hands its placeholders to the process's
        // spare (its stash becomes it: there was none), for the next
        // sandbox; the workspace keeps nothing.
        let spare: Vec<u64> = lock(&SPARE)
            .as_ref()
            .map(|s| s.free.iter().map(|(_, ino)| *ino).collect())
            .unwrap_or_default();
        assert_eq!(spare, vec![ino]);
        assert_eq!(ino_at(&dir.path().join(".codex")), None);
        empty_spare();
        assert_eq!(
            ino_at(&mine),
            None,
            "the spare is removed with the process's stashes"
        );
        drop(keeper);
    }

    fn empty_spare() {
        if let Some(spare) = lock(&SPARE).take() {
            spare.remove();
        }
    }

    /// A server that makes a sandbox per caller: the placeholders of a
    /// sandbox dropped serve the next one's first command (two renames, no
    /// `mkdir` and `rmdir`), checked as a stash's are: one that something
    /// was put in while spare is never handed out.
    #[test]
    fn a_dropped_sandboxs_placeholders_serve_the_next_sandbox() {
        let _one = serial();
        let codex = WorkspacePath::parse(".codex").unwrap();
        let (_keeper_dir, keeper_fs) = workspace();
        let keeper = Reservations::new(keeper_fs);
        let (_first_dir, first) = workspace();
        let r = Reservations::new(first);
        let ino = r.reserve(&codex, Kind::Dir).unwrap();
        release_now(&r, &[(codex.clone(), ino)]);
        drop(r);
        let (second_dir, second) = workspace();
        let r = Reservations::new(second);
        assert_eq!(
            r.reserve(&codex, Kind::Dir).unwrap(),
            ino,
            "the same directory"
        );
        assert_eq!(ino_at(&second_dir.path().join(".codex")), Some(ino));
        release_now(&r, &[(codex.clone(), ino)]);
        drop(r);
        // Something put in the spare placeholder (root can): not handed out.
        let (spare_dir, name) = match lock(&SPARE).as_ref() {
            Some(spare) => (
                stash_dir().join(&spare.name),
                spare.free.last().unwrap().0.clone(),
            ),
            None => unreachable!("the sandbox's placeholders are spare"),
        };
        let inside = spare_dir.join(&name).join("planted");
        std::fs::write(&inside, "x").unwrap();
        let (third_dir, third) = workspace();
        let r = Reservations::new(third);
        let fresh = r.reserve(&codex, Kind::Dir).unwrap();
        assert_ne!(fresh, ino, "a new placeholder");
        assert!(dir_is_empty_at(&third_dir.path().join(".codex")));
        release_now(&r, &[(codex, fresh)]);
        drop(r);
        std::fs::remove_file(&inside).unwrap();
        std::fs::remove_dir(spare_dir.join(&name)).unwrap();
        empty_spare();
        drop(keeper);
    }

    fn dir_is_empty_at(path: &std::path::Path) -> bool {
        std::fs::read_dir(path).unwrap().next().is_none()
    }

    #[test]
    fn something_else_in_the_stash_is_not_brought_into_the_workspace() {
        let _one = serial();
        let (dir, fs) = workspace();
        let r = Reservations::new(fs);
        let codex = WorkspacePath::parse(".codex").unwrap();
        let ino = r.reserve(&codex, Kind::Dir).unwrap();
        release_now(&r, &[(codex.clone(), ino)]);
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
        let again = r.reserve(&codex, Kind::Dir).unwrap();
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
        let ino = r.reserve(&mcp, Kind::Dir).unwrap();
        assert_eq!(r.claim(&mcp), Some(ino));
        release_now(&r, &[(mcp.clone(), ino)]);
        assert_eq!(
            ino_at(&dir.path().join(".mcp.json")),
            Some(ino),
            "still used"
        );
        release_now(&r, &[(mcp.clone(), ino)]);
        assert_eq!(ino_at(&dir.path().join(".mcp.json")), None);
        assert_eq!(r.claim(&mcp), None);
    }

    #[test]
    fn what_the_host_put_in_its_place_is_left_alone() {
        let _one = serial();
        let (dir, fs) = workspace();
        let r = Reservations::new(fs);
        let claude = WorkspacePath::parse(".claude").unwrap();
        let ino = r.reserve(&claude, Kind::Dir).unwrap();
        // The host replaces the placeholder with a directory of its own.
        std::fs::remove_dir(dir.path().join(".claude")).unwrap();
        std::fs::create_dir(dir.path().join(".claude")).unwrap();
        std::fs::write(dir.path().join(".claude/settings.json"), "{}").unwrap();
        assert_eq!(r.claim(&claude), None, "not ours any more");
        release_now(&r, &[(claude, ino)]);
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
        let ino = r.reserve(&toml, Kind::Dir).unwrap();
        assert!(dir.path().join("cubby.toml").is_dir());
        release_now(&r, &[(toml.clone(), ino)]);
        assert_eq!(ino_at(&dir.path().join("cubby.toml")), None);
        // Something that appeared meanwhile is not taken over.
        std::fs::write(dir.path().join("cubby.toml"), "x").unwrap();
        assert!(r.reserve(&toml, Kind::Dir).is_err());
    }

    #[test]
    fn two_starts_reserving_one_missing_path_share_its_placeholder() {
        // Commands starting at once both find `HEAD` missing and reserve it
        // (a `claim` of each came before the other's `reserve`).
        let _one = serial();
        let (dir, fs) = workspace();
        let r = Reservations::new(fs);
        let head = WorkspacePath::parse("HEAD").unwrap();
        let first = r.reserve(&head, Kind::for_path(&head)).unwrap();
        let second = r.reserve(&head, Kind::for_path(&head)).unwrap();
        assert_eq!(first, second);
        release_now(&r, &[(head.clone(), first)]);
        assert_eq!(ino_at(&dir.path().join("HEAD")), Some(first), "still used");
        release_now(&r, &[(head, second)]);
        assert_eq!(ino_at(&dir.path().join("HEAD")), None);
    }

    #[test]
    fn a_placeholder_something_was_put_in_is_never_stashed() {
        let _one = serial();
        let (dir, fs) = workspace();
        let r = Reservations::new(fs);
        let git = WorkspacePath::parse(".git").unwrap();
        let ino = r.reserve(&git, Kind::Dir).unwrap();
        // As root could, permissions notwithstanding.
        let placeholder = dir.path().join(".git");
        std::fs::set_permissions(&placeholder, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(placeholder.join("settings.json"), "{}").unwrap();
        std::fs::set_permissions(
            &placeholder,
            std::fs::Permissions::from_mode(PLACEHOLDER_MODE),
        )
        .unwrap();
        release_now(&r, &[(git.clone(), ino)]);
        let mine = match &lock(&r.inner).stash {
            Some(Some(stash)) => stash_dir().join(&stash.name),
            _ => unreachable!(),
        };
        assert_eq!(std::fs::read_dir(&mine).unwrap().count(), 0, "not stashed");
        assert_eq!(ino_at(&placeholder), Some(ino), "left where it was");
        // Nor handed out again: the next reservation finds it there.
        assert!(r.reserve(&git, Kind::Dir).is_err());
        drop(r);
        std::fs::set_permissions(&placeholder, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(placeholder.join("settings.json").exists());
    }

    #[test]
    fn a_file_placeholder_holds_what_git_reads_as_missing_and_goes() {
        let _one = serial();
        let (dir, fs) = workspace();
        std::fs::create_dir(dir.path().join(".git")).unwrap();
        let r = Reservations::new(fs);
        let common = WorkspacePath::parse(".git/commondir").unwrap();
        assert_eq!(Kind::for_path(&common), Kind::File(b"."));
        let ino = r.reserve(&common, Kind::for_path(&common)).unwrap();
        let at = dir.path().join(".git/commondir");
        assert_eq!(std::fs::read(&at).unwrap(), b".");
        assert_eq!(
            std::fs::symlink_metadata(&at).unwrap().mode() & 0o7777,
            super::super::placeholder::PLACEHOLDER_FILE_MODE
        );
        assert!(r.holds(&common));
        release_now(&r, &[(common, ino)]);
        assert_eq!(ino_at(&at), None);
    }
}
