//! The directory walk shared by `glob`, `list_files`, `search` and `changes`.
//!
//! It goes through [`FileSystem::read_dir`], so on the `local` provider every
//! directory is opened with `openat2` beneath the root: a directory swapped
//! for a link mid-walk is refused by the kernel, never followed. Rules, in
//! the order they are applied to each entry:
//!
//! 1. `.git` is never listed or entered.
//! 2. Paths listed in `deny_read` are never listed or entered.
//! 3. `.gitignore` files (of the directory and of every ancestor up to the
//!    root) are respected, the deepest rule deciding, as git does. They apply
//!    whether or not the workspace is a git repository.
//! 4. Symbolic links are reported with their kind and never followed.
//!
//! Entries are visited in sorted path order.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

use crate::error::{ErrorKind, Result};
use crate::path::WorkspacePath;
use crate::policy::Policy;
use crate::sandbox::{EntryKind, FileSystem};

/// Largest `.gitignore` read.
const MAX_GITIGNORE_BYTES: u64 = 1024 * 1024;
/// Deepest directory nesting walked (deeper directories are not entered).
pub(crate) const MAX_WALK_DEPTH: usize = 512;

/// What the visitor wants next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Go on (and enter this entry if it is a directory).
    Continue,
    /// End the walk.
    Stop,
}

/// A walk over a provider's file system.
pub(crate) struct Walk<'a> {
    fs: &'a dyn FileSystem,
    policy: &'a Policy,
    /// Deepest level visited: 1 is the start directory's entries.
    max_depth: usize,
    respect_gitignore: bool,
}

/// The visitor's view of one entry.
pub(crate) struct Visit<'p> {
    pub path: &'p WorkspacePath,
    pub kind: EntryKind,
}

impl<'a> Walk<'a> {
    pub(crate) fn new(fs: &'a dyn FileSystem, policy: &'a Policy) -> Walk<'a> {
        Walk {
            fs,
            policy,
            max_depth: MAX_WALK_DEPTH,
            respect_gitignore: true,
        }
    }

    /// Deepest level to visit (1: direct entries only).
    pub(crate) fn max_depth(mut self, depth: usize) -> Walk<'a> {
        self.max_depth = depth.clamp(1, MAX_WALK_DEPTH);
        self
    }

    /// Walks `start` (a directory), calling `visit` for each entry.
    ///
    /// # Errors
    ///
    /// Errors opening `start` itself; errors deeper down (a directory
    /// swapped or removed mid-walk) skip that directory.
    pub(crate) fn run(
        &self,
        start: &WorkspacePath,
        visit: &mut dyn FnMut(&Visit<'_>) -> Flow,
    ) -> Result<()> {
        let entries = self.fs.read_dir(start)?;
        let mut ignores = Vec::new();
        if self.respect_gitignore {
            // Ancestors' rules apply to the start directory's contents.
            let mut dir = WorkspacePath::root();
            for name in start.components() {
                if let Some(g) = self.load_gitignore(&dir) {
                    ignores.push(g);
                }
                dir = dir.join_name(name);
            }
            // The start's own, last (deepest), only if its listing has one.
            let has_own = entries
                .iter()
                .any(|e| e.name == ".gitignore" && e.kind == EntryKind::File);
            if has_own && let Some(g) = self.load_gitignore(start) {
                ignores.push(g);
            }
        }
        self.walk_entries(start, entries, 1, &mut ignores, visit);
        Ok(())
    }

    fn load_gitignore(&self, dir: &WorkspacePath) -> Option<Gitignore> {
        let path = dir.join_name(OsStr::new(".gitignore"));
        let bytes = self.fs.read_to_vec(&path, MAX_GITIGNORE_BYTES).ok()?;
        let text = String::from_utf8_lossy(&bytes);
        let mut builder = GitignoreBuilder::new(anchor(dir.as_path()));
        for line in text.lines() {
            // A bad line is skipped, as git does.
            let _ = builder.add_line(None, line);
        }
        builder.build().ok().filter(|g| !g.is_empty())
    }

    fn ignored(&self, ignores: &[Gitignore], path: &WorkspacePath, is_dir: bool) -> bool {
        if ignores.is_empty() {
            return false;
        }
        let anchored = anchor(path.as_path());
        for g in ignores.iter().rev() {
            match g.matched(&anchored, is_dir) {
                Match::Ignore(_) => return true,
                Match::Whitelist(_) => return false,
                Match::None => {}
            }
        }
        false
    }

    /// Returns false when the walk must stop.
    fn walk_entries(
        &self,
        dir: &WorkspacePath,
        entries: Vec<crate::sandbox::DirEntry>,
        depth: usize,
        ignores: &mut Vec<Gitignore>,
        visit: &mut dyn FnMut(&Visit<'_>) -> Flow,
    ) -> bool {
        let check_deny = self.policy.has_deny_read_within(dir);
        for entry in entries {
            if entry.name == ".git" {
                continue;
            }
            let path = dir.join_name(&entry.name);
            if check_deny && self.policy.hidden_from_walks(&path) {
                continue;
            }
            if self.respect_gitignore && self.ignored(ignores, &path, entry.kind == EntryKind::Dir)
            {
                continue;
            }
            let flow = visit(&Visit {
                path: &path,
                kind: entry.kind,
            });
            if flow == Flow::Stop {
                return false;
            }
            if entry.kind == EntryKind::Dir && depth < self.max_depth {
                let children = match self.fs.read_dir(&path) {
                    Ok(c) => c,
                    // Swapped for a link, removed, or unreadable: not entered.
                    Err(e) if matches!(e.kind(), ErrorKind::PathEscape | ErrorKind::NotFound) => {
                        continue;
                    }
                    Err(_) => continue,
                };
                let pushed = if self.respect_gitignore
                    && children
                        .iter()
                        .any(|c| c.name == ".gitignore" && c.kind == EntryKind::File)
                {
                    match self.load_gitignore(&path) {
                        Some(g) => {
                            ignores.push(g);
                            true
                        }
                        None => false,
                    }
                } else {
                    false
                };
                let go_on = self.walk_entries(&path, children, depth + 1, ignores, visit);
                if pushed {
                    ignores.pop();
                }
                if !go_on {
                    return false;
                }
            }
        }
        true
    }
}

/// Gitignore matchers want absolute-looking paths under their root: anchor
/// workspace paths at a fixed `/`.
fn anchor(rel: &Path) -> PathBuf {
    Path::new("/").join(rel)
}
