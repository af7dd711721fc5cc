//! What `changes` reads of git's own state, so that a command cannot hide a
//! change behind git (SPEC §2, "nothing is silently unseen"): the refs of
//! every git directory in the workspace (`HEAD`, loose refs, `packed-refs`,
//! a reftable's table list), the paths its index marks `skip-worktree`
//! or `assume-unchanged` (which make the host's `git status` and `git diff`
//! pass over a file's changes), and the files that change which commits
//! and objects git sees (`info/grafts`, `shallow`,
//! `objects/info/alternates`, the commit-graph: a graft, a shallow line or
//! a forged commit-graph hides history from the host's `git log`) and the
//! state the host's next `git commit` takes (`MERGE_HEAD`,
//! `CHERRY_PICK_HEAD`, `MERGE_MSG`, …: a merge's extra parent, a
//! cherry-pick's author, the message), by their digests.
//!
//! Everything is read from the files themselves through the provider's
//! [`FileSystem`] — no git process runs, and nothing a command can rewrite
//! (a config, an alias, a hook) takes part. `changes` compares this state at
//! the baseline with the state now and says every ref that moved and every
//! path newly marked; what it cannot read (an index it does not know, more
//! refs than it keeps) it says it did not compare.
//!
//! Not covered: the object store. A command can replace or shadow an
//! object (a commit under an id the branch already names); `git fsck` on
//! the host finds that (docs/SECURITY.md).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;

use schemars::JsonSchema;
use serde::Serialize;

use crate::error::ErrorKind;
use crate::path::WorkspacePath;
use crate::sandbox::{EntryKind, FileSystem};

/// Most bytes read of `HEAD` or of one loose ref.
const MAX_REF_FILE_BYTES: u64 = 4096;
/// Most bytes read of `packed-refs`.
const MAX_PACKED_REFS_BYTES: u64 = 32 * 1024 * 1024;
/// Most bytes read of an index (one of 400,000 files is about 40 MB).
const MAX_INDEX_BYTES: u64 = 128 * 1024 * 1024;
/// Most refs kept for one git directory; beyond, its refs are not compared.
const MAX_REFS: usize = 100_000;
/// Deepest directory beneath `refs/` looked into.
const MAX_REF_DEPTH: usize = 16;
/// Directories looked into below `.git/modules` (as `git.rs` does).
const MAX_MODULE_DEPTH: usize = 8;
/// Most notes one `changes` result lists; the rest are counted.
pub(crate) const MAX_GIT_NOTES: usize = 200;
/// Bytes of a SHA-1 and of a SHA-256 object id.
const HASH_LENS: [usize; 2] = [20, 32];
/// The files of a git directory that change which commits and objects git
/// sees, compared by digest: a graft or a `shallow` line cuts a commit's
/// parents off (the host's `git log` stops there), an alternate lends
/// objects from another store, a commit-graph answers for the commits
/// themselves (git reads parents from it without checking its checksum).
/// A name ending in `/` is a directory, compared by the names and bytes of
/// its files (a split commit-graph's chain and layers).
pub(crate) const HISTORY_FILES: [&str; 6] = [
    "info/grafts",
    "shallow",
    "objects/info/alternates",
    "objects/info/http-alternates",
    "objects/info/commit-graph",
    "objects/info/commit-graphs/",
];
/// The files of a git directory that the host's next `git commit` takes
/// (red-team pass 4, R4-6): `MERGE_HEAD` adds parents (a merge pulling in
/// a hidden commit), `CHERRY_PICK_HEAD` and `REVERT_HEAD` give the
/// commit's author, the `*_MSG` files its message, `MERGE_MODE` and
/// `AUTO_MERGE` how the merge is recorded. Compared by digest.
pub(crate) const PENDING_FILES: [&str; 7] = [
    "MERGE_HEAD",
    "CHERRY_PICK_HEAD",
    "REVERT_HEAD",
    "MERGE_MSG",
    "MERGE_MODE",
    "SQUASH_MSG",
    "AUTO_MERGE",
];
/// Most files of a [`HISTORY_FILES`] directory read (a split commit-graph
/// has a layer per write, merged as they grow).
const MAX_HISTORY_DIR_FILES: usize = 64;
/// Most bytes read of one of [`HISTORY_FILES`] or [`PENDING_FILES`] (a
/// shallow clone lists a line per boundary commit), or of all files of a
/// directory among them.
const MAX_HISTORY_FILE_BYTES: u64 = 32 * 1024 * 1024;
/// Hex digits of a digest shown for a file of [`HISTORY_FILES`].
const SHOWN_DIGEST_HEX: usize = 16;
/// An index entry's fixed part before its object id (stat data, mode).
const INDEX_STAT_BYTES: usize = 40;

/// An index flag that makes git pass over a file's changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Flag {
    AssumeUnchanged,
    SkipWorktree,
}

impl Flag {
    fn as_str(self) -> &'static str {
        match self {
            Flag::AssumeUnchanged => "assume-unchanged",
            Flag::SkipWorktree => "skip-worktree",
        }
    }
}

/// What one git directory's files say, or why they could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
struct DirState {
    refs: Result<Refs, String>,
    flags: Result<BTreeSet<(String, Flag)>, String>,
    /// Each of [`HISTORY_FILES`] present: its digest, or why it could not be
    /// read.
    history: BTreeMap<&'static str, Result<String, String>>,
    /// Each of [`PENDING_FILES`] present, the same way.
    pending: BTreeMap<&'static str, Result<String, String>>,
}

/// The refs of a git directory, and the lines of its `packed-refs` that
/// name no ref git would accept (skipped, so that a line written to forge
/// a `changes` line is never shown as a ref).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Refs {
    refs: BTreeMap<String, String>,
    skipped: usize,
}

/// Git's state in a workspace at one moment: per git directory (relative
/// to the root), its refs and index flags.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct GitState {
    dirs: BTreeMap<WorkspacePath, DirState>,
}

/// One thing git's state says changed since the baseline.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct GitNote {
    /// The git directory, relative to the root (`.git`).
    pub git_dir: String,
    /// `ref` (a ref moved, appeared or went), `skip-worktree` or
    /// `assume-unchanged` (the index now marks the path: git passes over
    /// its changes), `history` (a file that decides which commits and
    /// objects git sees — `info/grafts`, `shallow`,
    /// `objects/info/alternates` — appeared, changed or went; `before` and
    /// `after` are digests), `pending` (a file the host's next `git commit`
    /// takes — `MERGE_HEAD`, `CHERRY_PICK_HEAD`, `MERGE_MSG`, … — appeared,
    /// changed or went; digests), `not_compared` (what could not be read;
    /// `name` says what, `after` why).
    pub kind: String,
    /// The ref (`HEAD`, `refs/heads/main`), the path, or the file within
    /// the git directory (`info/grafts`).
    pub name: String,
    /// A ref's value at the baseline (`None`: it did not exist).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// A ref's value now (`None`: it is gone), or why it was not compared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

impl GitNote {
    /// The note's line in the text of `changes`; every name and value is
    /// escaped (a command chose them).
    pub(crate) fn line(&self) -> String {
        let esc = |s: &str| crate::path::escape_name(s.as_bytes()).into_owned();
        let dir = esc(&self.git_dir);
        let name = esc(&self.name);
        match (self.kind.as_str(), &self.before, &self.after) {
            ("ref", Some(b), Some(a)) => {
                format!("git {dir}: {name} moved {} → {}", esc(b), esc(a))
            }
            ("ref", None, Some(a)) => format!("git {dir}: {name} added at {}", esc(a)),
            ("ref", Some(b), None) => format!("git {dir}: {name} removed (was {})", esc(b)),
            ("history", before, after) => {
                let what = match (before, after) {
                    (None, _) => "added",
                    (_, None) => "removed",
                    _ => "changed",
                };
                format!(
                    "git {dir}: {name} {what} (it decides which commits and objects git sees: \
                     the host's `git log` may show another history)"
                )
            }
            ("pending", before, after) => {
                let what = match (before, after) {
                    (None, _) => "added",
                    (_, None) => "removed",
                    _ => "changed",
                };
                format!(
                    "git {dir}: {name} {what} (the host's next `git commit` takes it: \
                     a merge's parents, a cherry-pick's author or the message)"
                )
            }
            ("not_compared", _, why) => format!(
                "git {dir}: {name} not compared: {}",
                esc(why.as_deref().unwrap_or(""))
            ),
            (flag, _, _) => format!(
                "git {dir}: {flag} {name} (git's index now hides this file's changes from \
                 `git status` and `git diff`)"
            ),
        }
    }
}

impl GitState {
    /// Reads the state of every git directory in the workspace `fs` shows.
    pub(crate) fn read(fs: &dyn FileSystem) -> GitState {
        let dirs = git_dirs(fs)
            .into_iter()
            .map(|dir| {
                let state = DirState {
                    refs: refs(fs, &dir),
                    flags: index_flags(fs, &dir),
                    history: digests(fs, &dir, &HISTORY_FILES),
                    pending: digests(fs, &dir, &PENDING_FILES),
                };
                (dir, state)
            })
            .collect();
        GitState { dirs }
    }

    /// What changed from `self` (the baseline) to `now`, in order of git
    /// directory and name.
    pub(crate) fn notes(&self, now: &GitState) -> Vec<GitNote> {
        let mut out = Vec::new();
        let names: BTreeSet<&WorkspacePath> = self.dirs.keys().chain(now.dirs.keys()).collect();
        let empty = DirState {
            refs: Ok(Refs::default()),
            flags: Ok(BTreeSet::new()),
            history: BTreeMap::new(),
            pending: BTreeMap::new(),
        };
        for dir in names {
            let before = self.dirs.get(dir).unwrap_or(&empty);
            let after = now.dirs.get(dir).unwrap_or(&empty);
            let git_dir = dir.display();
            let note =
                |kind: &str, name: &str, before: Option<&String>, after: Option<&String>| GitNote {
                    git_dir: git_dir.clone(),
                    kind: kind.to_string(),
                    name: name.to_string(),
                    before: before.cloned(),
                    after: after.cloned(),
                };
            match (&before.refs, &after.refs) {
                (Ok(b), Ok(a)) => {
                    let refs: BTreeSet<&String> = b.refs.keys().chain(a.refs.keys()).collect();
                    for name in refs {
                        let (was, is) = (b.refs.get(name), a.refs.get(name));
                        if was != is {
                            out.push(note("ref", name, was, is));
                        }
                    }
                    if a.skipped != b.skipped && a.skipped > 0 {
                        let why = format!(
                            "{} line{} naming no valid ref (skipped, not shown)",
                            crate::output::thousands(a.skipped as u64),
                            if a.skipped == 1 { "" } else { "s" }
                        );
                        out.push(note("not_compared", "packed-refs", None, Some(&why)));
                    }
                }
                (_, Err(why)) | (Err(why), _) => {
                    out.push(note("not_compared", "refs", None, Some(why)));
                }
            }
            match (&before.flags, &after.flags) {
                (Ok(b), Ok(a)) => {
                    for (path, flag) in a.difference(b) {
                        out.push(note(flag.as_str(), path, None, None));
                    }
                }
                (_, Err(why)) | (Err(why), _) => {
                    out.push(note("not_compared", "index", None, Some(why)));
                }
            }
            for (kind, b, a) in [
                ("history", &before.history, &after.history),
                ("pending", &before.pending, &after.pending),
            ] {
                let files: BTreeSet<&&str> = b.keys().chain(a.keys()).collect();
                for name in files {
                    match (b.get(name), a.get(name)) {
                        (_, Some(Err(why))) | (Some(Err(why)), _) => {
                            out.push(note("not_compared", name, None, Some(why)));
                        }
                        (was, is) if was != is => {
                            let (was, is) = (
                                was.and_then(|r| r.as_ref().ok()),
                                is.and_then(|r| r.as_ref().ok()),
                            );
                            out.push(note(kind, name, was, is));
                        }
                        _ => {}
                    }
                }
            }
        }
        out
    }
}

/// The git directories in the workspace: `.git` (a directory, or the
/// directory a gitfile names by a relative path inside the root), its
/// `worktrees/*` and `modules/**`.
fn git_dirs(fs: &dyn FileSystem) -> Vec<WorkspacePath> {
    let dot = WorkspacePath::root().join_name(OsStr::new(crate::git::GIT_DIR_NAME));
    let main = match fs.metadata(&dot) {
        Ok(m) if m.kind == EntryKind::Dir => dot,
        Ok(m) if m.kind == EntryKind::File => {
            let Some(target) = fs
                .read_to_vec(&dot, MAX_REF_FILE_BYTES)
                .ok()
                .and_then(|b| gitfile_target(&b))
            else {
                return Vec::new();
            };
            target
        }
        _ => return Vec::new(),
    };
    let mut out = vec![main.clone()];
    if let Ok(entries) = fs.read_dir(&main.join_name(OsStr::new("worktrees"))) {
        for e in entries {
            if e.kind == EntryKind::Dir && out.len() < crate::git::MAX_GIT_DIRS {
                out.push(main.join_name(OsStr::new("worktrees")).join_name(&e.name));
            }
        }
    }
    modules(fs, &main.join_name(OsStr::new("modules")), 0, &mut out);
    out
}

/// The directory a gitfile's `gitdir: <path>` names, when the path is
/// relative and stays inside the root.
fn gitfile_target(bytes: &[u8]) -> Option<WorkspacePath> {
    let text = std::str::from_utf8(bytes).ok()?;
    let target = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    if target.is_empty() || target.starts_with('/') {
        return None;
    }
    WorkspacePath::parse(target).ok().filter(|p| !p.is_root())
}

/// The git directories below `dir` (a `modules` directory): each directory
/// holding a `HEAD`, and those in its own `modules`.
fn modules(fs: &dyn FileSystem, dir: &WorkspacePath, depth: usize, out: &mut Vec<WorkspacePath>) {
    if depth > MAX_MODULE_DEPTH {
        return;
    }
    let Ok(entries) = fs.read_dir(dir) else {
        return;
    };
    for e in entries {
        if e.kind != EntryKind::Dir || out.len() >= crate::git::MAX_GIT_DIRS {
            continue;
        }
        let path = dir.join_name(&e.name);
        if fs
            .metadata(&path.join_name(OsStr::new("HEAD")))
            .is_ok_and(|m| m.kind == EntryKind::File)
        {
            out.push(path.clone());
            modules(fs, &path.join_name(OsStr::new("modules")), depth + 1, out);
        } else {
            modules(fs, &path, depth + 1, out);
        }
    }
}

/// A small file's text, its trailing line ends taken off; `Ok(None)` when
/// it is missing.
fn small_text(
    fs: &dyn FileSystem,
    path: &WorkspacePath,
    max: u64,
) -> Result<Option<String>, String> {
    match fs.read_to_vec(path, max) {
        Ok(b) => Ok(Some(
            String::from_utf8_lossy(&b)
                .trim_end_matches(['\n', '\r'])
                .to_string(),
        )),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("`{path}` could not be read: {}", e.message())),
    }
}

/// The refs of the git directory `dir`: `HEAD`, `packed-refs` overridden
/// by loose refs, and a reftable's table list (by its digest).
fn refs(fs: &dyn FileSystem, dir: &WorkspacePath) -> Result<Refs, String> {
    let mut out = BTreeMap::new();
    let mut skipped = 0;
    if let Some(head) = small_text(fs, &dir.join_name(OsStr::new("HEAD")), MAX_REF_FILE_BYTES)? {
        out.insert("HEAD".to_string(), head);
    }
    if let Some(packed) = small_text(
        fs,
        &dir.join_name(OsStr::new("packed-refs")),
        MAX_PACKED_REFS_BYTES,
    )? {
        for line in packed.lines() {
            if line.starts_with(['#', '^']) {
                continue;
            }
            match line.split_once(' ') {
                Some((oid, name)) if is_object_id(oid) && is_ref_name(name) => {
                    out.insert(name.to_string(), oid.to_string());
                }
                _ => skipped += 1,
            }
        }
    }
    let tables = dir
        .join_name(OsStr::new("reftable"))
        .join_name(OsStr::new("tables.list"));
    if let Some(list) = small_text(fs, &tables, MAX_PACKED_REFS_BYTES)? {
        let digest = super::sha256(list.as_bytes());
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        out.insert("reftable/tables.list".to_string(), format!("sha256 {hex}…"));
    }
    loose_refs(fs, &dir.join_name(OsStr::new("refs")), "refs", 0, &mut out)?;
    if out.len() > MAX_REFS {
        return Err(format!(
            "more than {} refs",
            crate::output::thousands(MAX_REFS as u64)
        ));
    }
    Ok(Refs { refs: out, skipped })
}

/// True for a SHA-1 or SHA-256 object id in lower-case hex, as git writes
/// them in `packed-refs`.
fn is_object_id(s: &str) -> bool {
    HASH_LENS.iter().any(|n| s.len() == n * 2)
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// True for a name `git check-ref-format` accepts beneath `refs/`: no
/// control character, space or any of `~^:?*[\`, no `..`, `@{` or `//`, no
/// component that starts with `.` or ends with `.lock`, and no `/` or `.`
/// at the end.
fn is_ref_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("refs/") else {
        return false;
    };
    !rest.is_empty()
        && !name
            .chars()
            .any(|c| c.is_control() || matches!(c, ' ' | '~' | '^' | ':' | '?' | '*' | '[' | '\\'))
        && !name.contains("..")
        && !name.contains("@{")
        && !name.ends_with(['/', '.'])
        && rest
            .split('/')
            .all(|part| !part.is_empty() && !part.starts_with('.') && !part.ends_with(".lock"))
}

/// The digest of each of `names` in the git directory `dir` that exists
/// (`sha256 <16 hex>…`), or why it could not be read. A name ending in `/`
/// is a directory: the digest of its regular files' names and bytes.
fn digests(
    fs: &dyn FileSystem,
    dir: &WorkspacePath,
    names: &[&'static str],
) -> BTreeMap<&'static str, Result<String, String>> {
    let mut out = BTreeMap::new();
    for &name in names {
        let path = name
            .trim_end_matches('/')
            .split('/')
            .fold(dir.clone(), |p, part| p.join_name(OsStr::new(part)));
        let bytes = if name.ends_with('/') {
            dir_bytes(fs, &path)
        } else {
            fs.read_to_vec(&path, MAX_HISTORY_FILE_BYTES).map_err(|e| {
                (
                    e.kind(),
                    format!("`{path}` could not be read: {}", e.message()),
                )
            })
        };
        let state = match bytes {
            Ok(bytes) => {
                let digest = super::sha256(&bytes);
                let hex: String = digest
                    .iter()
                    .take(SHOWN_DIGEST_HEX / 2)
                    .map(|b| format!("{b:02x}"))
                    .collect();
                Ok(format!("sha256 {hex}…"))
            }
            Err((ErrorKind::NotFound, _)) => continue,
            Err((_, why)) => Err(why),
        };
        out.insert(name, state);
    }
    out
}

/// The names and bytes of the regular files in `dir`, in name order, each
/// name and content preceded by its length (no two listings give the same
/// bytes); within [`MAX_HISTORY_DIR_FILES`] files and
/// [`MAX_HISTORY_FILE_BYTES`] in all.
fn dir_bytes(
    fs: &dyn FileSystem,
    dir: &WorkspacePath,
) -> std::result::Result<Vec<u8>, (ErrorKind, String)> {
    let mut entries = fs.read_dir(dir).map_err(|e| {
        (
            e.kind(),
            format!("`{dir}` could not be listed: {}", e.message()),
        )
    })?;
    if entries.len() > MAX_HISTORY_DIR_FILES {
        return Err((
            ErrorKind::Limit,
            format!(
                "`{dir}` holds {} entries; at most {MAX_HISTORY_DIR_FILES} are compared",
                entries.len()
            ),
        ));
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = Vec::new();
    for e in entries {
        let name = e.name.as_encoded_bytes();
        out.extend_from_slice(&(name.len() as u64).to_le_bytes());
        out.extend_from_slice(name);
        let path = dir.join_name(&e.name);
        let bytes = match e.kind {
            EntryKind::File => {
                let left = MAX_HISTORY_FILE_BYTES.saturating_sub(out.len() as u64);
                fs.read_to_vec(&path, left).map_err(|e| {
                    (
                        ErrorKind::Limit,
                        format!("`{path}` could not be read: {}", e.message()),
                    )
                })?
            }
            // Not a file git reads as a layer, but a change all the same.
            _ => format!("{:?}", e.kind).into_bytes(),
        };
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(&bytes);
    }
    Ok(out)
}

/// The loose refs beneath `dir` (named `name/…`) into `out`.
fn loose_refs(
    fs: &dyn FileSystem,
    dir: &WorkspacePath,
    name: &str,
    depth: usize,
    out: &mut BTreeMap<String, String>,
) -> Result<(), String> {
    let entries = match fs.read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("`{dir}` could not be listed: {}", e.message())),
    };
    if depth > MAX_REF_DEPTH {
        return Err(format!("`{dir}` lies deeper than {MAX_REF_DEPTH} levels"));
    }
    for e in entries {
        if out.len() > MAX_REFS {
            return Ok(());
        }
        let path = dir.join_name(&e.name);
        let child = format!("{name}/{}", e.name.to_string_lossy());
        match e.kind {
            EntryKind::Dir => loose_refs(fs, &path, &child, depth + 1, out)?,
            EntryKind::File => {
                if let Some(value) = small_text(fs, &path, MAX_REF_FILE_BYTES)? {
                    out.insert(child, value);
                }
            }
            // git writes none; one a command made is a ref that changed.
            _ => {
                out.insert(child, "(not a file)".to_string());
            }
        }
    }
    Ok(())
}

/// The paths `dir/index` marks `skip-worktree` or `assume-unchanged`.
fn index_flags(
    fs: &dyn FileSystem,
    dir: &WorkspacePath,
) -> Result<BTreeSet<(String, Flag)>, String> {
    let path = dir.join_name(OsStr::new("index"));
    match fs.read_to_vec(&path, MAX_INDEX_BYTES) {
        Ok(bytes) => parse_index(&bytes).map_err(|why| format!("`{path}`: {why}")),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(BTreeSet::new()),
        Err(e) => Err(format!("`{path}` could not be read: {}", e.message())),
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The flagged paths of an index file (versions 2 to 4). The object id's
/// length (SHA-1 or SHA-256) is the one with which every entry and
/// extension parses and the file ends exactly at its checksum. A split
/// index (`link` extension: the flags of most entries are in another file)
/// is not read.
fn parse_index(bytes: &[u8]) -> Result<BTreeSet<(String, Flag)>, String> {
    if bytes.get(..4) != Some(b"DIRC") {
        return Err("not a git index".into());
    }
    let version = be32(bytes, 4).ok_or("cut short")?;
    if !(2..=4).contains(&version) {
        return Err(format!("index version {version} is not read"));
    }
    let count = be32(bytes, 8).ok_or("cut short")? as usize;
    let mut last = Err("its entries do not parse".to_string());
    for hash in HASH_LENS {
        match parse_entries(bytes, version, count, hash) {
            Ok((flags, end)) => match extensions(bytes, end, hash) {
                Ok(true) => return Err("a split index is not read".into()),
                Ok(false) => return Ok(flags),
                Err(why) => last = Err(why),
            },
            Err(why) => last = Err(why),
        }
    }
    last
}

/// The flagged entries, and where the entries end.
fn parse_entries(
    b: &[u8],
    version: u32,
    count: usize,
    hash: usize,
) -> Result<(BTreeSet<(String, Flag)>, usize), String> {
    let bad = || "its entries do not parse".to_string();
    let mut out = BTreeSet::new();
    let mut at = 12;
    let mut prev: Vec<u8> = Vec::new();
    for _ in 0..count {
        let flags_at = at + INDEX_STAT_BYTES + hash;
        let flags = be16(b, flags_at).ok_or_else(bad)?;
        let mut name_at = flags_at + 2;
        let mut extended = 0;
        if flags & 0x4000 != 0 {
            if version < 3 {
                return Err(bad());
            }
            extended = be16(b, name_at).ok_or_else(bad)?;
            name_at += 2;
        }
        let name: Vec<u8>;
        if version == 4 {
            // The name: how many bytes of the previous one to drop (git's
            // offset varint), then the rest, NUL-terminated.
            let mut i = name_at;
            let mut c = *b.get(i).ok_or_else(bad)?;
            i += 1;
            let mut strip: usize = (c & 0x7f) as usize;
            while c & 0x80 != 0 {
                c = *b.get(i).ok_or_else(bad)?;
                i += 1;
                strip = strip
                    .checked_add(1)
                    .and_then(|s| s.checked_mul(128))
                    .and_then(|s| s.checked_add((c & 0x7f) as usize))
                    .ok_or_else(bad)?;
            }
            let nul = b[i..].iter().position(|&x| x == 0).ok_or_else(bad)?;
            if strip > prev.len() {
                return Err(bad());
            }
            let mut n = prev[..prev.len() - strip].to_vec();
            n.extend_from_slice(&b[i..i + nul]);
            name = n;
            at = i + nul + 1;
        } else {
            let rest = b.get(name_at..).ok_or_else(bad)?;
            let nul = rest.iter().position(|&x| x == 0).ok_or_else(bad)?;
            let len = (flags & 0x0fff) as usize;
            if len < 0x0fff && len != nul {
                return Err(bad());
            }
            name = rest[..nul].to_vec();
            // Padded with NULs to a multiple of 8 bytes.
            let size = (name_at - at + nul + 8) & !7;
            let pad = b.get(name_at + nul..at + size).ok_or_else(bad)?;
            if pad.iter().any(|&x| x != 0) {
                return Err(bad());
            }
            at += size;
        }
        let shown = String::from_utf8_lossy(&name).into_owned();
        if flags & 0x8000 != 0 {
            out.insert((shown.clone(), Flag::AssumeUnchanged));
        }
        if extended & 0x4000 != 0 {
            out.insert((shown, Flag::SkipWorktree));
        }
        prev = name;
    }
    Ok((out, at))
}

/// Walks the extensions from `at` to the checksum: `Ok(true)` when one is
/// `link` (a split index), `Err` unless they end exactly at the checksum.
fn extensions(b: &[u8], mut at: usize, hash: usize) -> Result<bool, String> {
    let end = b
        .len()
        .checked_sub(hash)
        .ok_or("cut short before its checksum")?;
    let mut split = false;
    while at + 8 <= end {
        let sig = &b[at..at + 4];
        let size = be32(b, at + 4).ok_or("cut short")? as usize;
        split |= sig == b"link";
        at = at
            .checked_add(8 + size)
            .ok_or("an extension's size is out of range")?;
    }
    if at == end {
        Ok(split)
    } else {
        Err("its extensions do not end at the checksum".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_index_is_said_not_read() {
        assert!(parse_index(b"XXXX").is_err());
        let mut v5 = b"DIRC".to_vec();
        v5.extend_from_slice(&5u32.to_be_bytes());
        v5.extend_from_slice(&0u32.to_be_bytes());
        assert!(parse_index(&v5).unwrap_err().contains("version 5"));
        // An empty index of version 2 with a SHA-1 checksum.
        let mut empty = b"DIRC".to_vec();
        empty.extend_from_slice(&2u32.to_be_bytes());
        empty.extend_from_slice(&0u32.to_be_bytes());
        empty.extend_from_slice(&[0; 20]);
        assert_eq!(parse_index(&empty), Ok(BTreeSet::new()));
        // Cut short of its checksum.
        assert!(parse_index(&empty[..20]).is_err());
    }

    #[test]
    fn packed_refs_keep_only_names_git_accepts() {
        let oid = "0123456789abcdef0123456789abcdef01234567";
        assert!(is_object_id(oid));
        assert!(is_object_id(&"ab".repeat(32)));
        assert!(!is_object_id("M"));
        assert!(!is_object_id(&oid.to_uppercase()));
        for good in [
            "refs/heads/main",
            "refs/tags/v1.0",
            "refs/remotes/origin/feature/x-y",
        ] {
            assert!(is_ref_name(good), "{good}");
        }
        for bad in [
            "fake.rs",
            "HEAD",
            "refs/",
            "refs/heads/a b",
            "refs/heads/a\nA forged.rs",
            "refs/heads/a\u{1b}[31m",
            "refs/heads/../x",
            "refs/heads/.hidden",
            "refs/heads/x.lock",
            "refs/heads/x/",
            "refs/heads//x",
            "refs/heads/x.",
            "refs/heads/a@{1}",
            "refs/heads/a~1",
            "refs/heads/a:b",
        ] {
            assert!(!is_ref_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn gitfile_targets_inside_the_root_only() {
        assert_eq!(
            gitfile_target(b"gitdir: store/wt\n"),
            WorkspacePath::parse("store/wt").ok()
        );
        assert_eq!(gitfile_target(b"gitdir: /elsewhere/.git\n"), None);
        assert_eq!(gitfile_target(b"gitdir: ../out\n"), None);
        assert_eq!(gitfile_target(b"nothing\n"), None);
    }
}
