//! Protected paths for each command of a `linux` sandbox: which paths its
//! init binds read-only (the configured ones and git's executable surface),
//! which directories above them it pins, and which missing ones are
//! reserved by placeholders while it runs (`reserve.rs`); and the sweep, at
//! the sandbox's open, of placeholders a killed cubby left behind.

use super::LinuxSandbox;
use super::client::Lease;
use super::placeholder::PLACEHOLDER_FILE_MODE;
use super::reserve::Kind;
use crate::config::Mode;
use crate::error::{Error, ErrorKind, Result};
use crate::path::WorkspacePath;
use crate::sandbox::local::is_placeholder_mode;
use crate::sandbox::{EntryKind, FileSystem};
use crate::sync::lock;

/// Names at the top of a git directory that git writes by opening them
/// (following a link: `fopen`, `O_APPEND`), not by a rename into place.
const GIT_OPENED_NAMES: [&str; 13] = [
    // The reflogs' directory itself: a link there leads every reflog
    // elsewhere. (`objects` as a link is left: some layouts share it.)
    "logs",
    "FETCH_HEAD",
    "COMMIT_EDITMSG",
    "MERGE_MSG",
    "SQUASH_MSG",
    "TAG_EDITMSG",
    "NOTES_EDITMSG",
    "EDIT_DESCRIPTION",
    "BISECT_LOG",
    "MERGE_RR",
    "gc.log",
    "description",
    "shallow",
];
/// Most directory entries one sweep of a git directory's `logs` looks at
/// (a reflog per ref: a repository past this keeps the rest unlooked).
const MAX_LOG_ENTRIES: usize = 20_000;
/// Deepest a sweep goes below `logs` (`logs/refs/remotes/origin/a/b`).
const MAX_LOG_DEPTH: usize = 16;

/// Removes the symbolic links a command may have planted where the host's
/// git writes by following a name (red-team pass 16): in each of
/// `git_dirs` (workspace-relative), the top-level names of
/// [`GIT_OPENED_NAMES`] (`logs` itself among them), everything under `logs/` (reflogs are appended
/// with `O_APPEND`, so `logs/HEAD -> ~/.bashrc` took a line with a branch
/// name the model chose) and the fan-out directories of `objects/`
/// (loose objects land in whatever such a link names). Git makes no links
/// there; commands need them writable (git in the sandbox writes reflogs
/// and objects), so they are swept when each command ends and when a
/// sandbox opens. Nothing is followed: each directory is opened beneath
/// the last with `O_NOFOLLOW`, and only an entry that is a link is
/// removed. What a process still running plants after the sweep stays
/// until the next one (docs/SECURITY.md).
pub(super) fn unlink_planted_links(
    fs: &crate::sandbox::local::LocalFs,
    git_dirs: &[WorkspacePath],
) {
    use rustix::fs::{AtFlags, FileType, Mode, OFlags};
    use std::os::fd::OwnedFd;
    let open_in = |dir: &OwnedFd, name: &std::ffi::OsStr| {
        rustix::fs::openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()
    };
    let is_link = |dir: &OwnedFd, name: &std::ffi::OsStr, kind: FileType| {
        kind == FileType::Symlink
            || (kind == FileType::Unknown
                && rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink))
    };
    let unlink = |dir: &OwnedFd, name: &std::ffi::OsStr| {
        if rustix::fs::unlinkat(dir, name, AtFlags::empty()).is_ok() {
            tracing::warn!(
                "removed a symbolic link `{}` a command planted in a git directory",
                name.to_string_lossy()
            );
        }
    };
    // Every link beneath `dir`, at most `left` entries looked at.
    fn walk(
        dir: &OwnedFd,
        depth: usize,
        left: &mut usize,
        each: &mut dyn FnMut(&OwnedFd, &std::ffi::OsStr, FileType) -> Option<OwnedFd>,
    ) {
        let Ok(mut entries) = rustix::fs::Dir::read_from(dir) else {
            return;
        };
        let mut below = Vec::new();
        while let Some(Ok(entry)) = entries.next() {
            let name = std::ffi::OsStr::from_bytes(entry.file_name().to_bytes()).to_os_string();
            if name == "." || name == ".." {
                continue;
            }
            if *left == 0 {
                return;
            }
            *left -= 1;
            if let Some(sub) = each(dir, &name, entry.file_type()) {
                below.push(sub);
            }
        }
        if depth < MAX_LOG_DEPTH {
            for sub in below {
                walk(&sub, depth + 1, left, each);
            }
        }
    }
    use std::os::unix::ffi::OsStrExt;
    for git_dir in git_dirs {
        let Ok(top) = fs.open_dir(git_dir) else {
            continue;
        };
        for name in GIT_OPENED_NAMES {
            let name = std::ffi::OsStr::new(name);
            if rustix::fs::statat(&top, name, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink)
            {
                unlink(&top, name);
            }
        }
        for (sub, deep) in [("logs", true), ("objects", false)] {
            let sub = std::ffi::OsStr::new(sub);
            let Some(dir) = open_in(&top, sub) else {
                continue;
            };
            let mut left = MAX_LOG_ENTRIES;
            walk(&dir, 0, &mut left, &mut |dir, name, kind| {
                if is_link(dir, name, kind) {
                    unlink(dir, name);
                    None
                } else if deep && (kind == FileType::Directory || kind == FileType::Unknown) {
                    open_in(dir, name)
                } else {
                    None
                }
            });
        }
    }
}

impl LinuxSandbox {
    /// Removes empty placeholder directories (no mode bit but the owner's
    /// read and write ones) at protected paths: reservations left by a
    /// cubby that was killed while a command ran — only when no live
    /// process holds reservations on the workspace (its table's lock,
    /// [`Reservations::hold`](super::reserve::Reservations::hold)), and
    /// never one that a command of another sandbox of this process holds
    /// now ([`Reservations::remove_leftover`](super::reserve::Reservations::remove_leftover)). `read`: git's surface as
    /// the caller read it, used when it is fresh.
    pub(super) fn sweep_placeholders(&self, read: Option<crate::git::SurfaceRead>) {
        let root = self.fs.root_path();
        let read = read
            .filter(|r| r.fresh_for(root).is_some())
            .unwrap_or_else(|| crate::git::SurfaceRead::now(root, &self.options.host));
        // Only when no live process (this one included) holds reservations
        // on the workspace: another's running command may hold these.
        if let Some(guard) = self.reservations.sweep_guard() {
            self.sweep_with(&read);
            drop(guard);
        }
        if self.options.mode != Mode::ReadOnly {
            unlink_planted_links(&self.fs, &read.surface().git_dirs);
        }
        self.reservations.hold();
        *lock(&self.git_at_open) = Some(read);
    }

    fn sweep_with(&self, read: &crate::git::SurfaceRead) {
        // The configured paths borrowed, git's surface's that are not among
        // them (an open runs this: no copy of the list on the heap).
        let protected = &self.options.protected;
        let surface = read.surface().paths();
        let paths = protected
            .iter()
            .chain(surface.iter().filter(|p| !protected.contains(p)));
        // Directories already looked at (and kept) on the way to an
        // earlier path.
        let mut kept: Vec<WorkspacePath> = Vec::new();
        for path in paths {
            let mut prefix = WorkspacePath::root();
            for name in path.components() {
                prefix = prefix.join_name(name);
                if kept.contains(&prefix) {
                    continue;
                }
                // Most are missing: no error made for them.
                let Some(meta) = self.fs.metadata_if_any(&prefix) else {
                    break;
                };
                let leftover = match (meta.kind, Kind::for_path(&prefix)) {
                    (EntryKind::Dir, _) => {
                        is_placeholder_mode(meta.mode)
                            && self.fs.read_dir(&prefix).is_ok_and(|e| e.is_empty())
                    }
                    // A file placeholder: read-only, its content.
                    (EntryKind::File, Kind::File(content)) => {
                        meta.mode & !PLACEHOLDER_FILE_MODE == 0 && meta.size == content.len() as u64
                    }
                    _ => false,
                };
                if leftover {
                    self.reservations.remove_leftover(&prefix, meta.ino);
                } else if meta.kind == EntryKind::Dir {
                    kept.push(prefix.clone());
                }
            }
        }
    }

    /// What each command's init binds, in order (a directory before what
    /// lies beneath it): every protected path read-only — the configured
    /// ones and git's executable surface as the host's files show it now
    /// ([`crate::git::surface`], read again at every command, so that a
    /// `core.hooksPath` the user set meanwhile is covered) — a missing one
    /// reserved by a placeholder; and every directory of the workspace
    /// above one bound onto itself, writable, so that no command can
    /// rename or remove it to put another tree in its place (a mount point
    /// is `EBUSY`). A `.git` gitfile is bound read-only.
    pub(super) fn protect_plan(&self) -> Result<(Vec<(String, bool)>, Lease)> {
        let mut lease = Lease {
            reservations: self.reservations.clone(),
            reserved: Vec::new(),
            live: None,
            git_dirs: Vec::new(),
        };
        // The first command uses what the sandbox read when it opened, if
        // it comes right after (`cubby exec`); later ones read it again.
        let root = self.fs.root_path();
        let surface = match lock(&self.git_at_open).take() {
            Some(read) if read.fresh_for(root).is_some() => read.into_surface(),
            _ => crate::git::surface(root, &self.options.host),
        };
        if surface.overflow {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "the workspace holds more than {} git directories (submodules, worktrees); \
                     cubby cannot keep all their configs and hooks read-only for commands",
                    crate::git::MAX_GIT_DIRS
                ),
            ));
        }
        if self.options.mode != Mode::ReadOnly {
            // `.git` whatever the surface read (the first command's may be
            // the open's, from before a `git init`).
            lease.git_dirs.clone_from(&surface.git_dirs);
            let dot_git = WorkspacePath::root().join_name(std::ffi::OsStr::new(".git"));
            if !lease.git_dirs.contains(&dot_git) {
                lease.git_dirs.push(dot_git);
            }
        }
        let mut paths: Vec<WorkspacePath> = self.options.protected.clone();
        for path in surface.paths() {
            if !paths.iter().any(|p| path.starts_with(p)) {
                paths.push(path);
            }
        }
        let mut binds: Vec<(WorkspacePath, bool)> = Vec::new();
        // Read-only wins over a pin of the same directory.
        let add = |path: &WorkspacePath, writable: bool, binds: &mut Vec<(WorkspacePath, bool)>| {
            match binds.iter_mut().find(|(p, _)| p == path) {
                Some((_, w)) => *w &= writable,
                None => binds.push((path.clone(), writable)),
            }
        };
        // Directories already looked at on the way to an earlier path.
        let mut dirs: Vec<WorkspacePath> = Vec::new();
        'paths: for path in &paths {
            if lease.reserved.iter().any(|(r, _)| path.starts_with(r)) {
                continue;
            }
            let mut prefix = WorkspacePath::root();
            for name in path.components() {
                prefix = prefix.join_name(name);
                if prefix != *path && dirs.contains(&prefix) {
                    continue;
                }
                // Reserved already (by a running command, or lingering).
                if let Some(ino) = self.reservations.claim(&prefix) {
                    lease.reserved.push((prefix.clone(), ino));
                    add(&prefix, false, &mut binds);
                    continue 'paths;
                }
                match self.fs.metadata(&prefix) {
                    Ok(m) if m.kind == EntryKind::Symlink => {
                        return Err(Error::new(
                            ErrorKind::Unsupported,
                            format!(
                                "protected path `{prefix}` is a symbolic link; cubby cannot keep \
                                 it read-only for commands. Replace it with the directory or \
                                 file itself"
                            ),
                        ));
                    }
                    Ok(_) if prefix == *path => {
                        add(&prefix, false, &mut binds);
                        break;
                    }
                    // A directory above a protected path: pinned.
                    Ok(m) if m.kind == EntryKind::Dir => {
                        add(&prefix, true, &mut binds);
                        dirs.push(prefix.clone());
                    }
                    // A file on the way (a `.git` gitfile): nothing can be
                    // created beneath it, and it must not change.
                    Ok(_) => {
                        add(&prefix, false, &mut binds);
                        break;
                    }
                    // Read-only mode: every directory of the workspace is
                    // bound read-only for commands (writable roots too), so
                    // none can make the missing name; no placeholder (a
                    // `mkdir` and an `rmdir` each) is needed.
                    Err(e)
                        if e.kind() == ErrorKind::NotFound
                            && self.options.mode == Mode::ReadOnly =>
                    {
                        break;
                    }
                    Err(e) if e.kind() == ErrorKind::NotFound => {
                        let ino = self
                            .reservations
                            .reserve(&prefix, Kind::for_path(&prefix))?;
                        lease.reserved.push((prefix.clone(), ino));
                        add(&prefix, false, &mut binds);
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        // Parents first: a bind of a directory would otherwise cover (with
        // `MS_REC`, copy) what was bound beneath it in a different order.
        binds.sort_by_key(|(p, _)| p.components().count());
        let protect = binds
            .into_iter()
            .map(|(p, w)| (p.as_path().to_string_lossy().into_owned(), w))
            .collect();
        Ok((protect, lease))
    }
}

#[cfg(test)]
mod tests {
    use std::fmt::Write;

    use super::super::plan::golden;
    use super::*;
    use crate::policy::Policy;

    fn open(root: &std::path::Path, policy: crate::policy::PolicyBuilder) -> LinuxSandbox {
        LinuxSandbox::open(
            root,
            &policy.build().unwrap(),
            &crate::host_env::HostEnv::default(),
        )
        .unwrap()
    }

    #[test]
    fn protected_paths_are_bound_pinned_or_reserved() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
        std::fs::create_dir_all(root.join("ci")).unwrap();
        std::fs::write(root.join("ci/deploy.sh"), "").unwrap();
        let mut policy = Policy::builder();
        policy.protect("ci/deploy.sh").protect("tools/release/");
        let sandbox = open(root, policy);
        let (binds, lease) = sandbox.protect_plan().unwrap();
        let mut text = String::new();
        for (path, pinned) in &binds {
            let how = if *pinned { "pin" } else { "read-only" };
            writeln!(text, "{how} {path}").unwrap();
        }
        for (path, _) in &lease.reserved {
            writeln!(text, "reserved {path}").unwrap();
        }
        golden("protect", &text);
        assert!(
            root.join("tools").exists(),
            "reserved while the lease lives"
        );
        drop(lease);
        assert!(!root.join("tools").exists(), "released with the lease");
    }

    /// A second sandbox opened on the workspace while a command of the
    /// first holds a reservation leaves that placeholder alone: its sweep
    /// takes only what a killed cubby left. (The sweep removed it: the
    /// running command's read-only mount detached, a starting one failed
    /// with `ENOENT`.)
    #[test]
    fn a_second_sandbox_keeps_the_reservations_of_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let mut policy = Policy::builder();
        policy.protect("tools/release/");
        let first = open(root, policy);
        let (_, lease) = first.protect_plan().unwrap();
        assert!(
            lease.reserved.iter().any(|(p, _)| p.to_string() == "tools"),
            "{:?}",
            lease.reserved
        );
        let mut policy = Policy::builder();
        policy.protect("tools/release/");
        let second = open(root, policy);
        assert!(root.join("tools").is_dir(), "the first's placeholder kept");
        // A leftover of a killed cubby is still swept at an open.
        drop(lease);
        drop(first);
        drop(second);
        std::fs::create_dir(root.join("tools")).unwrap();
        std::fs::set_permissions(
            root.join("tools"),
            std::os::unix::fs::PermissionsExt::from_mode(crate::sandbox::local::PLACEHOLDER_MODE),
        )
        .unwrap();
        let mut policy = Policy::builder();
        policy.protect("tools/release/");
        let _third = open(root, policy);
        assert!(!root.join("tools").exists(), "a leftover swept");
    }

    /// In read-only mode nothing in the workspace is writable for
    /// commands: the missing protected paths get no placeholder (the
    /// attack "write in read-only mode" tries to make them), the present
    /// ones are still bound.
    #[test]
    fn read_only_mode_reserves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        let mut policy = Policy::builder();
        policy.mode(crate::Mode::ReadOnly);
        let sandbox = open(root, policy);
        let (binds, lease) = sandbox.protect_plan().unwrap();
        assert!(lease.reserved.is_empty(), "{:?}", lease.reserved);
        assert!(
            binds.iter().any(|(p, w)| p == ".git/hooks" && !*w),
            "{binds:?}"
        );
        let names: Vec<_> = std::fs::read_dir(root)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [".git"], "no placeholder in the workspace");
    }
}
