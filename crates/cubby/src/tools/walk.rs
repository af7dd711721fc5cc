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
//!
//! Nothing is silently unseen (SPEC §2): a directory the walk does not
//! enter for a reason of its own — deeper than [`MAX_WALK_DEPTH`], unreadable,
//! or with an ignore file it will not load — is counted in the [`Unseen`]
//! (and one of more than [`MAX_DIR_ENTRIES`] entries is listed only to that
//! bound, red-team pass 5, F5, so a walk's memory does not grow with what a
//! command made in one directory)
//! the walk returns, and every tool that walks says so in its result.
//! (`.git`, `deny_read` paths and ignored paths are left out by rule, a
//! `depth` the model asked for by request: neither is counted.)
//!
//! Ignore files are bounded: each compiled rule costs memory (up to ~5 KiB
//! for a short wildcard pattern, measured), so a file over
//! [`MAX_IGNORE_FILE_BYTES`] or [`MAX_IGNORE_FILE_PATTERNS`], or one that
//! would take the rules held at once past [`MAX_IGNORE_HELD_PATTERNS`] or
//! the rules compiled by one walk past [`MAX_IGNORE_WALK_PATTERNS`], is not
//! loaded, and its directory is **not entered** (its rules are unknown, so
//! what it hides cannot be told; entering it as if unignored would show
//! what the workspace asked to hide). The directory is reported unseen.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use schemars::JsonSchema;
use serde::Serialize;

use super::thousands;
use crate::error::{ErrorKind, Result};
use crate::path::WorkspacePath;
use crate::policy::Policy;
use crate::sandbox::{EntryKind, FileSystem};

/// Largest ignore file loaded, in bytes.
pub(crate) const MAX_IGNORE_FILE_BYTES: u64 = 64 * 1024;
/// Most rules (lines that are neither blank nor comments) an ignore file
/// may hold to be loaded.
pub(crate) const MAX_IGNORE_FILE_PATTERNS: usize = 2_000;
/// Most rules one walk holds compiled at once (the ignore files of the
/// directory being walked and of its ancestors): bounds a walk's memory.
pub(crate) const MAX_IGNORE_HELD_PATTERNS: usize = 8_000;
/// Most rules one walk compiles in all: bounds its time.
pub(crate) const MAX_IGNORE_WALK_PATTERNS: usize = 100_000;
/// Deepest directory nesting walked (deeper directories are not entered).
pub(crate) const MAX_WALK_DEPTH: usize = 512;
/// Most entries a walk reads from one directory: past it the directory is
/// listed only in part (which entries is the file system's order) and
/// counted in [`Unseen::crowded`]. Bounds the memory and time one listing
/// costs (red-team pass 5, F5: a million entries cost 260–737 MB a call).
pub(crate) const MAX_DIR_ENTRIES: usize = 50_000;
/// Directories named in an [`Unseen`] report.
const MAX_UNSEEN_EXAMPLES: usize = 5;

/// What a walk did not see, and why.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Unseen {
    /// Directories not entered because they lie deeper than 512 levels.
    pub too_deep: u64,
    /// Directories that could not be read.
    pub unreadable: u64,
    /// Directories not entered because their ignore file could not be
    /// loaded: too large, too many rules, or unreadable.
    pub ignore_not_loaded: u64,
    /// Directories of more than 50,000 entries, listed only to that many.
    #[serde(skip_serializing_if = "is_zero")]
    pub crowded: u64,
    /// The first few of those directories, relative to the root.
    pub examples: Vec<String>,
}

impl Unseen {
    /// True when the walk saw everything it meant to.
    pub(crate) fn is_empty(&self) -> bool {
        self.total() == 0
    }

    fn total(&self) -> u64 {
        self.too_deep + self.unreadable + self.ignore_not_loaded + self.crowded
    }

    fn add_example(&mut self, dir: &WorkspacePath) {
        if self.examples.len() < MAX_UNSEEN_EXAMPLES {
            self.examples.push(dir.display_dir());
        }
    }

    /// `Some(self)` when something was unseen (the structured field).
    pub(crate) fn into_option(self) -> Option<Unseen> {
        (!self.is_empty()).then_some(self)
    }

    /// The line a result carries when something was unseen.
    pub(crate) fn note(&self) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let dirs = |n: u64| {
            format!(
                "{} director{}",
                thousands(n),
                if n == 1 { "y" } else { "ies" }
            )
        };
        let mut parts = Vec::new();
        if self.too_deep > 0 {
            parts.push(format!(
                "{} deeper than {MAX_WALK_DEPTH} levels (pass a `path` inside them to walk them)",
                dirs(self.too_deep)
            ));
        }
        if self.unreadable > 0 {
            parts.push(format!(
                "{} that could not be read (check their permissions)",
                dirs(self.unreadable)
            ));
        }
        if self.ignore_not_loaded > 0 {
            parts.push(format!(
                "{} whose .gitignore was not loaded: over {} KiB or {} rules, or over the \
                 walk's budget of rules, or unreadable (shorten it)",
                dirs(self.ignore_not_loaded),
                MAX_IGNORE_FILE_BYTES / 1024,
                thousands(MAX_IGNORE_FILE_PATTERNS as u64)
            ));
        }
        if self.crowded > 0 {
            parts.push(format!(
                "{} of more than {} entries, listed only to that many (pass a narrower \
                 `path` or pattern, or thin the directory out)",
                dirs(self.crowded),
                thousands(MAX_DIR_ENTRIES as u64)
            ));
        }
        let mut note = format!("[not seen: {}", parts.join("; "));
        if !self.examples.is_empty() {
            note.push_str("; not entered: ");
            note.push_str(&self.examples.join(", "));
            if self.total() > self.examples.len() as u64 {
                note.push_str(", …");
            }
        }
        note.push(']');
        Some(note)
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Why an ignore file was not loaded.
struct NotLoaded;

/// The mutable part of one walk: what it did not see and its ignore budget.
#[derive(Default)]
struct WalkState {
    unseen: Unseen,
    /// Rules of the ignore files on the current stack.
    held_patterns: usize,
    /// Rules compiled by this walk so far.
    loaded_patterns: usize,
    /// The ignore files in force: the start's ancestors', then those of
    /// the directories being walked, deepest last.
    ignores: Vec<Loaded>,
}

/// One loaded ignore file and the rules it holds.
struct Loaded {
    rules: Gitignore,
    patterns: usize,
    /// The ignore file itself.
    file: WorkspacePath,
}

/// What a walk tells, besides the entries it visits, to a caller that
/// must say what ignore rules hid ([`Walk::run_noting`], for `changes`).
pub(crate) struct Hooks<'h> {
    /// Each entry an ignore rule left out (a directory is not entered),
    /// with the ignore file whose rule decided.
    pub ignored: &'h mut dyn FnMut(&Visit<'_>, &WorkspacePath),
    /// Each ignore file the walk read, with its bytes (also one that holds
    /// no rule).
    pub ignore_file: &'h mut dyn FnMut(&WorkspacePath, &[u8]),
    /// Each entry a `deny_read` rule left out (a directory is not entered).
    pub denied: &'h mut dyn FnMut(&Visit<'_>),
    /// Each `.git` below the walk's root directory (never entered).
    pub git_dir: &'h mut dyn FnMut(&WorkspacePath),
}

impl Hooks<'_> {
    /// Calls `f` with hooks that note nothing.
    pub(crate) fn none<T>(f: impl FnOnce(&mut Hooks<'_>) -> T) -> T {
        f(&mut Hooks {
            ignored: &mut |_, _| {},
            ignore_file: &mut |_, _| {},
            denied: &mut |_| {},
            git_dir: &mut |_| {},
        })
    }
}

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

    /// Walks `start` (a directory), calling `visit` for each entry, and
    /// returns what it did not see.
    ///
    /// # Errors
    ///
    /// Errors opening `start` itself; errors deeper down (a directory
    /// swapped or removed mid-walk) skip that directory.
    pub(crate) fn run(
        &self,
        start: &WorkspacePath,
        visit: &mut dyn FnMut(&Visit<'_>) -> Flow,
    ) -> Result<Unseen> {
        Hooks::none(|hooks| self.run_noting(start, visit, hooks))
    }

    /// [`Walk::run`], telling `hooks` what the ignore rules left out and
    /// which ignore files were read.
    ///
    /// # Errors
    ///
    /// As [`Walk::run`].
    pub(crate) fn run_noting(
        &self,
        start: &WorkspacePath,
        visit: &mut dyn FnMut(&Visit<'_>) -> Flow,
        hooks: &mut Hooks<'_>,
    ) -> Result<Unseen> {
        let mut state = WalkState::default();
        let entries = self.listing(start, &mut state)?;
        if self.respect_gitignore {
            // Ancestors' rules apply to the start directory's contents; the
            // start's own comes last (deepest), only if its listing has one.
            let mut dirs = Vec::new();
            let mut dir = WorkspacePath::root();
            for name in start.components() {
                let next = dir.join_name(name);
                dirs.push(dir);
                dir = next;
            }
            if entries
                .iter()
                .any(|e| e.name == ".gitignore" && e.kind == EntryKind::File)
            {
                dirs.push(start.clone());
            }
            for dir in &dirs {
                match self.load_gitignore(dir, &mut state, hooks) {
                    Ok(Some(g)) => state.ignores.push(g),
                    Ok(None) => {}
                    Err(NotLoaded) => {
                        // What the start holds is hidden by rules unknown.
                        state.unseen.ignore_not_loaded += 1;
                        state.unseen.add_example(start);
                        return Ok(state.unseen);
                    }
                }
            }
        }
        self.walk_entries(start, entries, 1, &mut state, visit, hooks);
        Ok(state.unseen)
    }

    /// The entries of `dir`, sorted, at most [`MAX_DIR_ENTRIES`] of them
    /// (a directory of more is counted in [`Unseen::crowded`]).
    fn listing(
        &self,
        dir: &WorkspacePath,
        state: &mut WalkState,
    ) -> Result<Vec<crate::sandbox::DirEntry>> {
        let (mut entries, more) = self.fs.read_dir_bounded(dir, MAX_DIR_ENTRIES)?;
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        if more {
            state.unseen.crowded += 1;
            state.unseen.add_example(dir);
        }
        Ok(entries)
    }

    /// Loads `dir/.gitignore` within the bounds: `Ok(None)` when there is
    /// none (or it holds no rule), `Err` when it exists but is not loaded.
    /// A loaded file's rules count as held until [`Walk::release`].
    fn load_gitignore(
        &self,
        dir: &WorkspacePath,
        state: &mut WalkState,
        hooks: &mut Hooks<'_>,
    ) -> Result<Option<Loaded>, NotLoaded> {
        let path = dir.join_name(OsStr::new(".gitignore"));
        let bytes = match self.fs.read_to_vec(&path, MAX_IGNORE_FILE_BYTES) {
            Ok(b) => b,
            // Removed since it was listed (or never there): no rules.
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(_) => return Err(NotLoaded),
        };
        (hooks.ignore_file)(&path, &bytes);
        let text = String::from_utf8_lossy(&bytes);
        let rules = || {
            text.lines().filter(|l| {
                let l = l.trim();
                !l.is_empty() && !l.starts_with('#')
            })
        };
        let patterns = rules().count();
        if patterns == 0 {
            return Ok(None);
        }
        if patterns > MAX_IGNORE_FILE_PATTERNS
            || state.held_patterns + patterns > MAX_IGNORE_HELD_PATTERNS
            || state.loaded_patterns + patterns > MAX_IGNORE_WALK_PATTERNS
        {
            return Err(NotLoaded);
        }
        let mut builder = GitignoreBuilder::new(anchor(dir.as_path()));
        for line in rules() {
            // A bad line is skipped, as git does.
            let _ = builder.add_line(None, line);
        }
        state.loaded_patterns += patterns;
        match builder.build() {
            Ok(g) if !g.is_empty() => {
                state.held_patterns += patterns;
                Ok(Some(Loaded {
                    rules: g,
                    patterns,
                    file: path,
                }))
            }
            _ => Ok(None),
        }
    }

    /// Ends the hold of a loaded ignore file's rules.
    fn release(loaded: Option<Loaded>, state: &mut WalkState) {
        if let Some(l) = loaded {
            state.held_patterns -= l.patterns;
        }
    }

    /// The ignore file whose rule leaves `path` out, if one does.
    fn ignored<'i>(
        &self,
        ignores: &'i [Loaded],
        path: &WorkspacePath,
        is_dir: bool,
    ) -> Option<&'i WorkspacePath> {
        if ignores.is_empty() {
            return None;
        }
        let anchored = anchor(path.as_path());
        for g in ignores.iter().rev() {
            match g.rules.matched(&anchored, is_dir) {
                Match::Ignore(_) => return Some(&g.file),
                Match::Whitelist(_) => return None,
                Match::None => {}
            }
        }
        None
    }

    /// Returns false when the walk must stop.
    fn walk_entries(
        &self,
        dir: &WorkspacePath,
        entries: Vec<crate::sandbox::DirEntry>,
        depth: usize,
        state: &mut WalkState,
        visit: &mut dyn FnMut(&Visit<'_>) -> Flow,
        hooks: &mut Hooks<'_>,
    ) -> bool {
        let check_deny = self.policy.has_deny_read_within(dir);
        for entry in entries {
            if entry.name == ".git" {
                if !dir.is_root() {
                    (hooks.git_dir)(&dir.join_name(&entry.name));
                }
                continue;
            }
            let path = dir.join_name(&entry.name);
            if check_deny && self.policy.hidden_from_walks(&path) {
                (hooks.denied)(&Visit {
                    path: &path,
                    kind: entry.kind,
                });
                continue;
            }
            if self.respect_gitignore
                && let Some(by) = self.ignored(&state.ignores, &path, entry.kind == EntryKind::Dir)
            {
                (hooks.ignored)(
                    &Visit {
                        path: &path,
                        kind: entry.kind,
                    },
                    by,
                );
                continue;
            }
            let flow = visit(&Visit {
                path: &path,
                kind: entry.kind,
            });
            if flow == Flow::Stop {
                return false;
            }
            if entry.kind != EntryKind::Dir {
                continue;
            }
            if depth >= self.max_depth {
                // A depth the model asked for is not a shortfall; the
                // walk's own limit is.
                if self.max_depth >= MAX_WALK_DEPTH {
                    state.unseen.too_deep += 1;
                    state.unseen.add_example(&path);
                }
                continue;
            }
            let children = match self.listing(&path, state) {
                Ok(c) => c,
                // Swapped for a link or removed since it was listed: it is
                // no longer a directory of the tree.
                Err(e) if matches!(e.kind(), ErrorKind::PathEscape | ErrorKind::NotFound) => {
                    continue;
                }
                Err(_) => {
                    state.unseen.unreadable += 1;
                    state.unseen.add_example(&path);
                    continue;
                }
            };
            let loaded = if self.respect_gitignore
                && children
                    .iter()
                    .any(|c| c.name == ".gitignore" && c.kind == EntryKind::File)
            {
                match self.load_gitignore(&path, state, hooks) {
                    Ok(l) => l,
                    Err(NotLoaded) => {
                        state.unseen.ignore_not_loaded += 1;
                        state.unseen.add_example(&path);
                        continue;
                    }
                }
            } else {
                None
            };
            let pushed = loaded.is_some();
            if let Some(l) = loaded {
                state.ignores.push(l);
            }
            let go_on = self.walk_entries(&path, children, depth + 1, state, visit, hooks);
            if pushed {
                let popped = state.ignores.pop();
                Walk::release(popped, state);
            }
            if !go_on {
                return false;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::MemoryFs;

    fn wp(p: &str) -> WorkspacePath {
        WorkspacePath::parse(p).unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    /// Files the walk lists, and what it did not see.
    fn walk(fs: &MemoryFs) -> (Vec<String>, Unseen) {
        let policy = Policy::builder().build().unwrap_or_else(|e| panic!("{e}"));
        let mut files = Vec::new();
        let unseen = Walk::new(fs, &policy)
            .run(&WorkspacePath::root(), &mut |v| {
                if v.kind == EntryKind::File {
                    files.push(v.path.display());
                }
                Flow::Continue
            })
            .unwrap_or_else(|e| panic!("{e}"));
        (files, unseen)
    }

    #[test]
    fn the_rules_one_walk_compiles_are_bounded() {
        let fs = MemoryFs::new();
        let per_dir = MAX_IGNORE_FILE_PATTERNS;
        let dirs = MAX_IGNORE_WALK_PATTERNS / per_dir + 1;
        let rules: String = (0..per_dir).map(|i| format!("r{i}.tmp\n")).collect();
        for d in 0..dirs {
            let put = |p: &str, b: &[u8]| {
                fs.insert(&wp(p), b.to_vec(), 0o644)
                    .unwrap_or_else(|e| panic!("{e}"))
            };
            put(&format!("d{d:03}/.gitignore"), rules.as_bytes());
            put(&format!("d{d:03}/r1.tmp"), b"x");
            put(&format!("d{d:03}/kept.txt"), b"x");
        }
        let (files, unseen) = walk(&fs);
        // Every directory within the budget is walked with its rules.
        let kept = files.iter().filter(|f| f.ends_with("/kept.txt")).count();
        assert_eq!(kept, dirs - 1);
        assert!(!files.iter().any(|f| f.ends_with("/r1.tmp")), "{files:?}");
        // The one past it is not entered, and the walk says so.
        assert_eq!(unseen.ignore_not_loaded, 1, "{unseen:?}");
        assert_eq!(unseen.examples, [format!("d{:03}/", dirs - 1)]);
        assert!(
            unseen
                .note()
                .is_some_and(|n| n.contains("1 directory whose .gitignore"))
        );
    }

    #[test]
    fn a_removed_ignore_file_is_no_rules_and_blank_files_cost_nothing() {
        let fs = MemoryFs::new();
        let comments = "# only comments\n\n".repeat(100);
        fs.insert(&wp("a/.gitignore"), comments.into_bytes(), 0o644)
            .unwrap_or_else(|e| panic!("{e}"));
        fs.insert(&wp("a/f.txt"), b"x".to_vec(), 0o644)
            .unwrap_or_else(|e| panic!("{e}"));
        let (files, unseen) = walk(&fs);
        assert_eq!(files, ["a/.gitignore", "a/f.txt"]);
        assert!(unseen.is_empty() && unseen.note().is_none());
    }
}
