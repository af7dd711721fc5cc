//! `changes`: the workspace now against its state when the toolset was made.
//!
//! The baseline is a snapshot of every file the walk sees (same rules as
//! `list_files`): size, modification and change times, inode, and the sha256 of small
//! files; the digest of every ignore file the walk read; and git's own state
//! (`git_state.rs`: refs, index flags). It is taken on a background thread
//! when the toolset is built; writes of this run wait for it, so none of
//! them can slip into it. A file whose metadata is unchanged is unchanged;
//! otherwise, when both sides have a digest, the digests decide (a rewrite
//! with the same bytes is not a change); otherwise it is modified.
//!
//! Nothing is silently unseen (SPEC §2), also when a command tries to hide
//! a change:
//! - a file the baseline saw is compared whatever ignore rules appear
//!   later (appended to, then ignored: `M`, not a false `D`);
//! - what the walk leaves out by a rule of an ignore file made or changed
//!   since the baseline is counted and said (`newly_ignored`), with the
//!   ignore files; what the baseline's own ignore files hide is not;
//! - git's state is compared too: a ref that moved (a branch rewritten
//!   with a commit of the same message), a path git's index now marks
//!   `skip-worktree` or `assume-unchanged` (which hide its changes from the
//!   host's `git status`). It is read from git's files, not from a git
//!   process, so nothing a command rewrites decides what is shown;
//! - what lies under `deny_read` paths (which the walks never enter) is
//!   snapshotted too, by metadata only: the files there that were added,
//!   changed or removed are counted, their names and contents withheld, the
//!   rules named (red-team pass 5, F8);
//! - a git directory or gitfile below the root (a repository a command
//!   made, or the surface of one that was there: its config, hooks,
//!   pointers) that appeared, changed or went is named (red-team pass 5,
//!   F6): the host's git runs its fsmonitor and hooks there.

use std::collections::BTreeMap;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::git_state::{GitNote, GitState, MAX_GIT_NOTES};
use super::walk::{Flow, Hooks, Unseen, Walk};
use super::{Ctx, Once, READ_ONLY, Sha, Tool, sha256, sha256_file};
use crate::error::{Error, Result};
use crate::output::ToolOutput;
use crate::path::WorkspacePath;
use crate::policy::Policy;
use crate::sandbox::{EntryKind, FileSystem, Metadata};

/// Files up to this size are hashed in the baseline.
const HASH_MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Total bytes hashed for one baseline.
const HASH_BUDGET_BYTES: u64 = 64 * 1024 * 1024;
/// Entries a `newly_ignored` report names.
const MAX_IGNORED_EXAMPLES: usize = 5;
/// Ignore files a `newly_ignored` report names.
const MAX_IGNORE_FILES_NAMED: usize = 20;
/// Entries under `deny_read` paths one snapshot holds (past it they are
/// not compared, and `changes` says the count may be short).
const MAX_DENIED_ENTRIES: usize = 100_000;
/// Git directories below the root one snapshot fingerprints.
const MAX_NESTED_GIT_DIRS: usize = 1_000;
/// Entries of one directory of a nested git directory's surface (`hooks/`)
/// that its fingerprint reads.
const MAX_GIT_SURFACE_ENTRIES: usize = 1_000;
/// Nested git directories a `changes` result names.
const MAX_GIT_DIRS_NAMED: usize = 20;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FileState {
    size: u64,
    mtime_ns: i128,
    /// The change time: no process can set it back (`touch -d` sets only
    /// the access and modification times), so an edit in place that keeps
    /// the size and restores the mtime still moves it (red-team pass 5, F7).
    ctime_ns: i128,
    ino: u64,
    sha: Option<Sha>,
}

/// What the baseline (or a call) saw.
#[derive(Debug)]
pub(crate) struct Snapshot {
    /// Every file the walk saw.
    files: BTreeMap<WorkspacePath, FileState>,
    /// Every ignore file the walk read, and the digest of its bytes.
    ignore_files: BTreeMap<WorkspacePath, Sha>,
    /// Git's refs and index flags.
    git: GitState,
    /// Every entry under a `deny_read` path (metadata only, no digest), and
    /// whether there were more than [`MAX_DENIED_ENTRIES`].
    denied: BTreeMap<WorkspacePath, FileState>,
    denied_more: bool,
    /// Each `.git` below the root and the digest of its surface's metadata,
    /// and whether there were more than [`MAX_NESTED_GIT_DIRS`].
    git_dirs: BTreeMap<WorkspacePath, Sha>,
    git_dirs_more: bool,
}

/// What a walk's `denied` and `git_dir` hooks gathered.
#[derive(Default)]
struct Hidden {
    denied: Vec<(WorkspacePath, EntryKind)>,
    git_dirs: Vec<WorkspacePath>,
}

impl Hidden {
    /// The metadata of every entry under the `deny_read` paths gathered.
    fn denied_states(&self, fs: &dyn FileSystem) -> (BTreeMap<WorkspacePath, FileState>, bool) {
        let mut out = BTreeMap::new();
        let mut more = false;
        for (path, kind) in &self.denied {
            more |= !collect_denied(fs, path, *kind, 0, &mut out);
        }
        (out, more)
    }

    /// The digest of each gathered `.git`'s surface.
    fn git_prints(&self, fs: &dyn FileSystem) -> (BTreeMap<WorkspacePath, Sha>, bool) {
        let more = self.git_dirs.len() > MAX_NESTED_GIT_DIRS;
        let prints = self
            .git_dirs
            .iter()
            .take(MAX_NESTED_GIT_DIRS)
            .map(|p| (p.clone(), git_print(fs, p)))
            .collect();
        (prints, more)
    }
}

/// Adds `path` (of `kind`) and, for a directory, what it holds to `out`;
/// false when [`MAX_DENIED_ENTRIES`] was reached first. Directories count
/// as entries but are not compared (their times move with what they hold).
fn collect_denied(
    fs: &dyn FileSystem,
    path: &WorkspacePath,
    kind: EntryKind,
    depth: usize,
    out: &mut BTreeMap<WorkspacePath, FileState>,
) -> bool {
    if out.len() >= MAX_DENIED_ENTRIES {
        return false;
    }
    if kind != EntryKind::Dir {
        let st = fs
            .metadata(path)
            .map_or(UNREADABLE, |meta| state(&meta, None));
        out.insert(path.clone(), st);
        return true;
    }
    if depth >= super::walk::MAX_WALK_DEPTH {
        return true;
    }
    let Ok((entries, more)) =
        fs.read_dir_bounded(path, super::walk::MAX_DIR_ENTRIES.min(MAX_DENIED_ENTRIES))
    else {
        return true;
    };
    for e in entries {
        if !collect_denied(fs, &path.join_name(&e.name), e.kind, depth + 1, out) {
            return false;
        }
    }
    !more
}

/// The state of an entry whose metadata could not be read.
const UNREADABLE: FileState = FileState {
    size: 0,
    mtime_ns: 0,
    ctime_ns: 0,
    ino: 0,
    sha: None,
};

/// The digest of the metadata of `git` (a `.git` below the root) and of
/// its surface: what the host's git would run or follow there.
fn git_print(fs: &dyn FileSystem, git: &WorkspacePath) -> Sha {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    let mut add = |p: &WorkspacePath, meta: Option<&Metadata>| {
        h.update(p.as_path().as_os_str().as_encoded_bytes());
        match meta {
            Some(m) => h.update(format!(
                "\0{:?} {} {} {} {}\n",
                m.kind, m.size, m.mtime_ns, m.ctime_ns, m.ino
            )),
            None => h.update(b"\0-\n"),
        }
    };
    let top = fs.metadata(git).ok();
    add(git, top.as_ref());
    if top.is_some_and(|m| m.kind == EntryKind::Dir) {
        for name in crate::git::SURFACE_NAMES {
            let p = git.join_name(std::ffi::OsStr::new(name));
            let meta = fs.metadata(&p).ok();
            add(&p, meta.as_ref());
            if meta.is_some_and(|m| m.kind == EntryKind::Dir)
                && let Ok((mut entries, _)) = fs.read_dir_bounded(&p, MAX_GIT_SURFACE_ENTRIES)
            {
                entries.sort_by(|a, b| a.name.cmp(&b.name));
                for e in entries {
                    let c = p.join_name(&e.name);
                    let meta = fs.metadata(&c).ok();
                    add(&c, meta.as_ref());
                }
            }
        }
    }
    h.finalize().into()
}

fn snapshot(fs: &dyn FileSystem, policy: &Policy) -> Result<Snapshot> {
    let mut paths = Vec::new();
    let mut ignore_files = BTreeMap::new();
    let mut hidden = Hidden::default();
    Walk::new(fs, policy).run_noting(
        &WorkspacePath::root(),
        &mut |v| {
            if v.kind == EntryKind::File {
                paths.push(v.path.clone());
            }
            Flow::Continue
        },
        &mut Hooks {
            ignored: &mut |_, _| {},
            ignore_file: &mut |p, bytes| {
                ignore_files.insert(p.clone(), sha256(bytes));
            },
            denied: &mut |v| hidden.denied.push((v.path.clone(), v.kind)),
            git_dir: &mut |p| hidden.git_dirs.push(p.clone()),
        },
    )?;
    let (denied, denied_more) = hidden.denied_states(fs);
    let (git_dirs, git_dirs_more) = hidden.git_prints(fs);
    let mut budget = HASH_BUDGET_BYTES;
    let mut files = BTreeMap::new();
    for path in paths {
        let Ok(meta) = fs.metadata(&path) else {
            continue;
        };
        let sha = if meta.size <= HASH_MAX_FILE_BYTES && meta.size <= budget {
            budget -= meta.size;
            sha256_file(fs, &path).ok()
        } else {
            None
        };
        files.insert(path, state(&meta, sha));
    }
    Ok(Snapshot {
        files,
        ignore_files,
        git: GitState::read(fs),
        denied,
        denied_more,
        git_dirs,
        git_dirs_more,
    })
}

fn state(meta: &Metadata, sha: Option<Sha>) -> FileState {
    FileState {
        size: meta.size,
        mtime_ns: meta.mtime_ns,
        ctime_ns: meta.ctime_ns,
        ino: meta.ino,
        sha,
    }
}

/// `M` when the file at `path` (now `meta`) differs from `old`, else none.
fn compare(
    fs: &dyn FileSystem,
    path: &WorkspacePath,
    old: &FileState,
    meta: &Metadata,
) -> Option<&'static str> {
    if old.size == meta.size
        && old.mtime_ns == meta.mtime_ns
        && old.ctime_ns == meta.ctime_ns
        && old.ino == meta.ino
    {
        return None;
    }
    match old.sha {
        Some(sha) if old.size == meta.size => match sha256_file(fs, path) {
            Ok(now) if now == sha => None,
            _ => Some("M"),
        },
        _ => Some("M"),
    }
}

/// The state of the workspace when the toolset was built.
pub(crate) struct Baseline {
    snap: Once<Arc<Result<Snapshot>>>,
}

impl Baseline {
    /// Starts taking the snapshot on a background thread.
    pub(crate) fn start(fs: Arc<dyn crate::sandbox::Sandbox>, policy: Policy) -> Arc<Baseline> {
        let baseline = Arc::new(Baseline { snap: Once::new() });
        let b = baseline.clone();
        let spawned = std::thread::Builder::new()
            .name("cubby-baseline".into())
            .spawn(move || {
                let snap = snapshot(fs.fs(), &policy);
                b.snap.set(Arc::new(snap));
            });
        if let Err(e) = spawned {
            baseline.snap.set(Arc::new(Err(Error::internal(format!(
                "cannot start the baseline thread: {e}"
            )))));
        }
        baseline
    }

    /// Blocks until the snapshot is taken.
    pub(crate) fn wait(&self) -> Arc<Result<Snapshot>> {
        self.snap
            .wait()
            .unwrap_or_else(|| Arc::new(Err(Error::internal("the baseline was lost"))))
    }
}

/// Arguments of `changes` (none).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Params {}

/// One changed path.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Change {
    /// `A` added, `M` modified, `D` deleted.
    pub status: String,
    /// Path relative to the workspace root.
    pub path: String,
}

/// Entries the walk left out by rules of ignore files made or changed since
/// the session started.
#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct NewlyIgnored {
    /// How many (a directory counts once: it is not entered).
    pub entries: u64,
    /// The ignore files whose new rules left them out.
    pub ignore_files: Vec<String>,
    /// The first few of them, relative to the root.
    pub examples: Vec<String>,
}

/// Files under `deny_read` paths added, changed or removed since the
/// session started: counted, never named.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DeniedChanges {
    /// How many.
    pub files: u64,
    /// The `deny_read` rules they fall under.
    pub rules: Vec<String>,
    /// True when there were too many entries to hold them all (the count
    /// may be short).
    pub partial: bool,
}

/// A git directory or gitfile below the root that appeared, changed or went.
#[derive(Debug, Serialize, JsonSchema)]
pub struct GitDirChange {
    /// `A` appeared, `M` its surface (config, hooks, pointers) changed,
    /// `D` went.
    pub status: String,
    /// Its path, relative to the root.
    pub path: String,
}

/// Result of `changes`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Output {
    /// Changed paths, sorted.
    pub changes: Vec<Change>,
    /// What the walk of the workspace now did not enter, and why (absent
    /// when it saw everything): changes there are not listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unseen: Option<Unseen>,
    /// What ignore files made or changed since the session started hide
    /// (absent when nothing): changes there are not listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub newly_ignored: Option<NewlyIgnored>,
    /// What git's own state says changed: refs that moved, paths its index
    /// now hides from `git status` (absent when nothing).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub git: Vec<GitNote>,
    /// Git notes beyond the first 200, not listed.
    #[serde(skip_serializing_if = "is_zero")]
    pub git_not_listed: u64,
    /// What changed under `deny_read` paths (absent when nothing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deny_read: Option<DeniedChanges>,
    /// Git directories below the root that appeared, changed or went.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub git_dirs: Vec<GitDirChange>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The `changes` tool.
pub struct Changes;

impl Tool for Changes {
    const NAME: &'static str = "changes";
    const FACTS: super::ToolFacts = super::ToolFacts {
        snapshot: true,
        ..super::reads_files(super::Cost::Short)
    };
    fn description(_d: &super::Describe<'_>) -> String {
        "List what changed in the sandboxed workspace since this session started, whoever \
         changed it (your edits and what commands did); use it to review the session's work, \
         instead of `git status`, which also shows what was changed before. `A path` (added), \
         `M path` (modified), `D path` (deleted); `git <dir>: …` lines say a branch or tag \
         moved, the index now hides a file from git, or a file that decides which commits git \
         shows (grafts, shallow, alternates) changed (commits are not files: read them with \
         `git log -p`); a `[not listed: …]` note counts files that ignore rules made during the \
         session leave out."
            .to_string()
    }
    const ANNOTATIONS: super::Annotations = READ_ONLY;
    type Params = Params;
    type Output = Output;

    fn call(ctx: &Ctx<'_>, _params: Params) -> Result<ToolOutput<Output>> {
        let Some(baseline) = &ctx.run.baseline else {
            return Err(Error::new(
                crate::ErrorKind::Unsupported,
                "change tracking is off for this toolset",
            ));
        };
        let before = baseline.wait();
        let before: &Snapshot = match before.as_ref() {
            Ok(s) => s,
            Err(e) => return Err(e.clone()),
        };
        let mut now_paths = Vec::new();
        let mut now_ignore_files = BTreeMap::new();
        let mut now_hidden = Hidden::default();
        // Per ignore file: the entries its rules left out (files the
        // baseline saw are compared below instead), and the first few.
        let mut hidden: BTreeMap<WorkspacePath, (u64, Vec<String>)> = BTreeMap::new();
        let unseen = Walk::new(ctx.fs, ctx.policy).run_noting(
            &WorkspacePath::root(),
            &mut |v| {
                if v.kind == EntryKind::File {
                    now_paths.push(v.path.clone());
                }
                Flow::Continue
            },
            &mut Hooks {
                ignored: &mut |v, by| {
                    if v.kind == EntryKind::File && before.files.contains_key(v.path) {
                        return;
                    }
                    let shown = if v.kind == EntryKind::Dir {
                        v.path.display_dir()
                    } else {
                        v.path.display()
                    };
                    match hidden.get_mut(by) {
                        Some((n, examples)) => {
                            *n += 1;
                            if examples.len() < MAX_IGNORED_EXAMPLES {
                                examples.push(shown);
                            }
                        }
                        None => {
                            hidden.insert(by.clone(), (1, vec![shown]));
                        }
                    }
                },
                ignore_file: &mut |p, bytes| {
                    now_ignore_files.insert(p.clone(), sha256(bytes));
                },
                denied: &mut |v| now_hidden.denied.push((v.path.clone(), v.kind)),
                git_dir: &mut |p| now_hidden.git_dirs.push(p.clone()),
            },
        )?;
        let deny_read = denied_changes(ctx.policy, before, &now_hidden.denied_states(ctx.fs));
        let git_dirs = git_dir_changes(before, &now_hidden.git_prints(ctx.fs));
        let mut changes = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for path in now_paths {
            let Ok(meta) = ctx.fs.metadata(&path) else {
                continue;
            };
            let status = match before.files.get(&path) {
                None => Some("A"),
                Some(old) => compare(ctx.fs, &path, old, &meta),
            };
            if let Some(status) = status {
                changes.push(Change {
                    status: status.into(),
                    path: path.display(),
                });
            }
            seen.insert(path);
        }
        // A file the baseline saw and the walk did not (ignored now, or in
        // a directory it did not enter) is compared where it is.
        for (path, old) in &before.files {
            if seen.contains(path) {
                continue;
            }
            let status = match ctx.fs.metadata(path) {
                Ok(meta) if meta.kind == EntryKind::File => compare(ctx.fs, path, old, &meta),
                _ => Some("D"),
            };
            if let Some(status) = status {
                changes.push(Change {
                    status: status.into(),
                    path: path.display(),
                });
            }
        }
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        // What ignore files made or changed since the baseline hide.
        let mut newly = NewlyIgnored::default();
        for (file, (n, examples)) in hidden {
            if before.ignore_files.get(&file) == now_ignore_files.get(&file) {
                continue;
            }
            newly.entries += n;
            if newly.ignore_files.len() < MAX_IGNORE_FILES_NAMED {
                newly.ignore_files.push(file.display());
            }
            for e in examples {
                if newly.examples.len() < MAX_IGNORED_EXAMPLES {
                    newly.examples.push(e);
                }
            }
        }
        let mut git = before.git.notes(&GitState::read(ctx.fs));
        let git_not_listed = git.len().saturating_sub(MAX_GIT_NOTES) as u64;
        git.truncate(MAX_GIT_NOTES);
        let mut text = if !changes.is_empty() {
            changes
                .iter()
                .map(|c| format!("{} {}", c.status, c.path))
                .collect::<Vec<_>>()
                .join("\n")
        } else if git.is_empty() && newly.entries == 0 && deny_read.is_none() && git_dirs.is_empty()
        {
            "No changes since the session started.".to_string()
        } else {
            "No file changed since the session started.".to_string()
        };
        for note in &git {
            text.push('\n');
            text.push_str(&note.line());
        }
        if git_not_listed > 0 {
            text.push_str(&format!(
                "\n[git: {} more not listed]",
                crate::output::thousands(git_not_listed)
            ));
        }
        if !git.is_empty() {
            text.push_str(
                "\n[git's state changed: commits are not files — review them with `git log -p`; \
                 `git ls-files -v` shows index flags (S: skip-worktree, lowercase: \
                 assume-unchanged)]",
            );
        }
        if !git_dirs.is_empty() {
            let shown: Vec<String> = git_dirs
                .iter()
                .take(MAX_GIT_DIRS_NAMED)
                .map(|g| format!("{} {}", g.status, g.path))
                .collect();
            text.push_str(&format!(
                "\n[git repositories below the root: {}{} — the host's git runs a repository's \
                 config (core.fsmonitor) and hooks when anything works in its directory; read \
                 its config and hooks, or remove it, before the user works there]",
                shown.join(", "),
                if git_dirs.len() > MAX_GIT_DIRS_NAMED {
                    format!(", and {} more", git_dirs.len() - MAX_GIT_DIRS_NAMED)
                } else {
                    String::new()
                },
            ));
        }
        if let Some(d) = &deny_read {
            text.push_str(&format!(
                "\n[not listed: {}{} {} under paths listed in deny_read ({}) added, changed or \
                 removed since the session started; their names and contents are not shown — \
                 ask the user to review them]",
                if d.partial { "at least " } else { "" },
                crate::output::thousands(d.files),
                if d.files == 1 { "file" } else { "files" },
                d.rules.join(", "),
            ));
        }
        if newly.entries > 0 {
            text.push_str(&format!(
                "\n[not listed: {} {} left out by rules of ignore files made or changed since the \
                 session started ({}): {}{}; read those ignore files to see what they hide]",
                crate::output::thousands(newly.entries),
                if newly.entries == 1 {
                    "entry"
                } else {
                    "entries"
                },
                newly.ignore_files.join(", "),
                newly.examples.join(", "),
                if newly.entries > newly.examples.len() as u64 {
                    ", …"
                } else {
                    ""
                },
            ));
        }
        if let Some(note) = unseen.note() {
            text.push('\n');
            text.push_str(&note);
        }
        Ok(ToolOutput::ok(
            text,
            Output {
                changes,
                unseen: unseen.into_option(),
                newly_ignored: (newly.entries > 0).then_some(newly),
                git,
                git_not_listed,
                deny_read,
                git_dirs,
            },
        ))
    }
}

/// The files under `deny_read` paths added, changed or removed between the
/// baseline and `now`, counted by rule.
fn denied_changes(
    policy: &Policy,
    before: &Snapshot,
    now: &(BTreeMap<WorkspacePath, FileState>, bool),
) -> Option<DeniedChanges> {
    let (now, now_more) = now;
    let mut files = 0u64;
    let mut rules = std::collections::BTreeSet::new();
    let mut count = |path: &WorkspacePath| {
        files += 1;
        if let Some(rule) = policy.deny_read_rule(path) {
            rules.insert(format!("`{rule}`"));
        }
    };
    for (path, st) in now {
        if before.denied.get(path) != Some(st) {
            count(path);
        }
    }
    for path in before.denied.keys() {
        if !now.contains_key(path) {
            count(path);
        }
    }
    (files > 0).then(|| DeniedChanges {
        files,
        rules: rules.into_iter().collect(),
        partial: before.denied_more || *now_more,
    })
}

/// The `.git`s below the root that appeared, changed or went.
fn git_dir_changes(
    before: &Snapshot,
    now: &(BTreeMap<WorkspacePath, Sha>, bool),
) -> Vec<GitDirChange> {
    let (now, now_more) = now;
    let mut out = Vec::new();
    for (path, print) in now {
        let status = match before.git_dirs.get(path) {
            None if before.git_dirs_more => continue,
            None => "A",
            Some(old) if old != print => "M",
            Some(_) => continue,
        };
        out.push(GitDirChange {
            status: status.into(),
            path: path.display(),
        });
    }
    for path in before.git_dirs.keys() {
        if !now.contains_key(path) && !now_more {
            out.push(GitDirChange {
                status: "D".into(),
                path: path.display(),
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}
