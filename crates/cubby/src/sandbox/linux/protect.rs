//! Protected paths for each command of a `linux` sandbox: which paths its
//! init binds read-only (the configured ones and git's executable surface),
//! which directories above them it pins, and which missing ones are
//! reserved by placeholders while it runs (`reserve.rs`); and the sweep, at
//! the sandbox's open, of placeholders a killed cubby left behind.

use super::LinuxSandbox;
use super::client::Lease;
use super::placeholder::{Foreign, PLACEHOLDER_FILE_MODE, Placeholders};
use super::reserve::Kind;
use crate::config::Mode;
use crate::error::{Error, ErrorKind, Result};
use crate::path::WorkspacePath;
use crate::sandbox::local::is_placeholder_mode;
use crate::sandbox::{EntryKind, FileSystem};
use crate::sync::lock;

/// Names at the top of a git directory that git writes by opening them
/// (following a link: `fopen`, `O_APPEND`), not by a rename into place,
/// and the directories of [`GIT_SWEPT_TREES`] themselves.
const GIT_OPENED_NAMES: [&str; 16] = [
    "logs",
    "rr-cache",
    "FETCH_HEAD",
    "COMMIT_EDITMSG",
    "MERGE_MSG",
    "SQUASH_MSG",
    "TAG_EDITMSG",
    "NOTES_EDITMSG",
    "EDIT_DESCRIPTION",
    "BISECT_LOG",
    "MERGE_RR",
    "ADD_EDIT.patch",
    "addp-hunk-edit.diff",
    "gc.log",
    "description",
    "shallow",
];
/// Trees of a git directory swept whole: reflogs (appended with
/// `O_APPEND`) and rerere's cache (its `preimage` written by name).
const GIT_SWEPT_TREES: [&str; 2] = ["logs", "rr-cache"];
/// Most entries one sweep of such a tree looks at. One past it (or deeper
/// than a path can name) is not left half-swept: the tree is renamed
/// aside, where git does not look (a reflog or a rerere cache is
/// history, not the repository), and git starts it anew.
const MAX_SWEPT_ENTRIES: usize = 1_000_000;

/// Removes the symbolic links a command may have planted where the host's
/// git writes by following a name (red-team passes 16 and 17): in each of
/// `git_dirs` (workspace-relative), the top-level names of
/// [`GIT_OPENED_NAMES`], everything under [`GIT_SWEPT_TREES`] (a tree
/// too large to sweep whole is renamed aside) and the fan-out directories
/// of `objects/` (`00`–`ff`: loose objects land in whatever such a link
/// names; `objects/pack` and `objects/info` as links are left, as some
/// layouts share them). Git makes no links there; commands need them
/// writable (git in the sandbox writes reflogs and objects), so they are
/// swept when each command ends and when a sandbox opens. Nothing is
/// followed: each directory is opened beneath the git directory with
/// `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, and only an entry that is a
/// link is removed. What a process still running plants after the sweep
/// stays until the next one (docs/SECURITY.md).
pub(super) fn unlink_planted_links(
    fs: &crate::sandbox::local::LocalFs,
    git_dirs: &[WorkspacePath],
) {
    for git_dir in git_dirs {
        // A missing one costs a look, and no error made.
        if fs.metadata_if_any(git_dir).is_none() {
            continue;
        }
        let Ok(top) = fs.open_dir(git_dir) else {
            continue;
        };
        // One listing of the top (its entries' kinds come with it) rather
        // than a look at each name: this runs at every command's end.
        let mut links = Vec::new();
        each_entry(&top, &mut |name, kind| {
            if GIT_OPENED_NAMES.iter().any(|n| name == *n) && is_link_kind(&top, name, kind) {
                links.push(name.to_os_string());
            }
            true
        });
        for name in links {
            unlink_logged(&top, &name);
        }
        for tree in GIT_SWEPT_TREES {
            if !sweep_tree(&top, tree) {
                let aside = format!("{tree}.cubby-aside-{}", std::process::id());
                match rustix::fs::renameat(&top, tree, &top, aside.as_str()) {
                    Ok(()) => tracing::warn!(
                        "`{tree}` of a git directory held more than cubby sweeps for planted \
                         links; renamed to `{aside}`, where git does not look"
                    ),
                    Err(e) => tracing::error!(
                        "`{tree}` of a git directory could not be swept for planted links nor \
                         renamed aside: {e}"
                    ),
                }
            }
        }
        if let Ok(objects) = open_beneath(&top, std::path::Path::new("objects")) {
            let mut links = Vec::new();
            each_entry(&objects, &mut |name, kind| {
                let fan_out =
                    name.len() == 2 && name.as_encoded_bytes().iter().all(u8::is_ascii_hexdigit);
                if fan_out && is_link_kind(&objects, name, kind) {
                    links.push(name.to_os_string());
                }
                true
            });
            for name in links {
                unlink_logged(&objects, &name);
            }
        }
    }
}

/// Opens the directory `rel` beneath `dir`, no link followed on the way.
fn open_beneath(
    dir: &impl std::os::fd::AsFd,
    rel: &std::path::Path,
) -> rustix::io::Result<std::os::fd::OwnedFd> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    rustix::fs::openat2(
        dir,
        rel,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
}

/// Calls `each` with every entry of `dir` (not `.` nor `..`) until it
/// returns false; false when the listing broke off.
fn each_entry(
    dir: &std::os::fd::OwnedFd,
    each: &mut dyn FnMut(&std::ffi::OsStr, rustix::fs::FileType) -> bool,
) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(mut entries) = rustix::fs::Dir::read_from(dir) else {
        return false;
    };
    loop {
        match entries.next() {
            None => return true,
            Some(Err(_)) => return false,
            Some(Ok(entry)) => {
                let name = std::ffi::OsStr::from_bytes(entry.file_name().to_bytes());
                if name == "." || name == ".." {
                    continue;
                }
                if !each(name, entry.file_type()) {
                    return false;
                }
            }
        }
    }
}

fn is_link_at(dir: &impl std::os::fd::AsFd, name: &std::ffi::OsStr) -> bool {
    use rustix::fs::{AtFlags, FileType};
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink)
}

fn is_link_kind(
    dir: &impl std::os::fd::AsFd,
    name: &std::ffi::OsStr,
    kind: rustix::fs::FileType,
) -> bool {
    use rustix::fs::FileType;
    kind == FileType::Symlink || (kind == FileType::Unknown && is_link_at(dir, name))
}

fn unlink_logged(dir: &impl std::os::fd::AsFd, name: &std::ffi::OsStr) {
    if rustix::fs::unlinkat(dir, name, rustix::fs::AtFlags::empty()).is_ok() {
        tracing::warn!(
            "removed a symbolic link `{}` a command planted in a git directory",
            name.to_string_lossy()
        );
    }
}

/// Removes every link in the tree `name` of the git directory `top`;
/// false when it could not look at all of it (over [`MAX_SWEPT_ENTRIES`],
/// a directory it could not open).
fn sweep_tree(top: &std::os::fd::OwnedFd, name: &str) -> bool {
    use rustix::fs::FileType;
    use rustix::io::Errno;
    let mut pending: Vec<std::path::PathBuf> = vec![std::path::PathBuf::from(name)];
    let mut looked = 0usize;
    while let Some(rel) = pending.pop() {
        let dir = match open_beneath(top, &rel) {
            Ok(dir) => dir,
            // Gone meanwhile, or not a directory (the top one missing).
            Err(Errno::NOENT | Errno::NOTDIR) => continue,
            // A link where a directory was listed: swapped meanwhile.
            Err(Errno::LOOP | Errno::XDEV) => return false,
            Err(_) => return false,
        };
        let mut links = Vec::new();
        let complete = each_entry(&dir, &mut |entry, kind| {
            looked += 1;
            if looked > MAX_SWEPT_ENTRIES || pending.len() > MAX_SWEPT_ENTRIES {
                return false;
            }
            if is_link_kind(&dir, entry, kind) {
                links.push(entry.to_os_string());
            } else if kind == FileType::Directory
                || (kind == FileType::Unknown
                    && rustix::fs::statat(&dir, entry, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory))
            {
                pending.push(rel.join(entry));
            }
            true
        });
        for link in links {
            unlink_logged(&dir, &link);
        }
        if !complete {
            return false;
        }
    }
    true
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
            held: Vec::new(),
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
            if lease.reserved.iter().any(|(r, _)| path.starts_with(r))
                || lease.held.iter().any(|(r, _)| path.starts_with(r))
            {
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
                // Another process's placeholder (or one a killed cubby
                // left): held while the command runs, so that its maker
                // leaves it in place (red-team pass 18, F1).
                if let Foreign::Held(fd) = self.fs.hold_foreign(&prefix) {
                    lease.held.push((prefix.clone(), fd));
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
        let reservations = std::sync::Arc::clone(&sandbox.reservations);
        drop(lease);
        reservations.put_away_idle(None);
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
