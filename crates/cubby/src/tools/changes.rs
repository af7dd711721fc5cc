//! `changes`: the workspace now against its state when the toolset was made.
//!
//! The baseline is a snapshot of every file the walk sees (same rules as
//! `list_files`): size, modification time, inode, and the sha256 of small
//! files. It is taken on a background thread when the toolset is built;
//! writes of this run wait for it, so none of them can slip into it. A file
//! whose metadata is unchanged is unchanged; otherwise, when both sides have a
//! digest, the digests decide (a rewrite with the same bytes is not a change);
//! otherwise it is modified.

use std::collections::BTreeMap;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::walk::{Flow, Unseen, Walk};
use super::{Ctx, Once, READ_ONLY, Sha, Tool, sha256_file};
use crate::error::{Error, Result};
use crate::output::ToolOutput;
use crate::path::WorkspacePath;
use crate::policy::Policy;
use crate::sandbox::{EntryKind, FileSystem, Metadata};

/// Files up to this size are hashed in the baseline.
const HASH_MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Total bytes hashed for one baseline.
const HASH_BUDGET_BYTES: u64 = 64 * 1024 * 1024;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FileState {
    size: u64,
    mtime_ns: i128,
    ino: u64,
    sha: Option<Sha>,
}

pub(crate) type Snapshot = BTreeMap<WorkspacePath, FileState>;

fn snapshot(fs: &dyn FileSystem, policy: &Policy) -> Result<Snapshot> {
    let mut paths = Vec::new();
    Walk::new(fs, policy).run(&WorkspacePath::root(), &mut |v| {
        if v.kind == EntryKind::File {
            paths.push(v.path.clone());
        }
        Flow::Continue
    })?;
    let mut budget = HASH_BUDGET_BYTES;
    let mut snap = Snapshot::new();
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
        snap.insert(path, state(&meta, sha));
    }
    Ok(snap)
}

fn state(meta: &Metadata, sha: Option<Sha>) -> FileState {
    FileState {
        size: meta.size,
        mtime_ns: meta.mtime_ns,
        ino: meta.ino,
        sha,
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

/// Result of `changes`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Output {
    /// Changed paths, sorted.
    pub changes: Vec<Change>,
    /// What the walk of the workspace now did not enter, and why (absent
    /// when it saw everything): changes there are not listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unseen: Option<Unseen>,
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
         changed it (your edits and what commands did): `A path` (added), `M path` (modified), \
         `D path` (deleted); use it to review the session's work, instead of `git status`, \
         which also shows what was changed before."
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
        let before = match before.as_ref() {
            Ok(s) => s,
            Err(e) => return Err(e.clone()),
        };
        let mut now_paths = Vec::new();
        let unseen = Walk::new(ctx.fs, ctx.policy).run(&WorkspacePath::root(), &mut |v| {
            if v.kind == EntryKind::File {
                now_paths.push(v.path.clone());
            }
            Flow::Continue
        })?;
        let mut changes = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for path in now_paths {
            let Ok(meta) = ctx.fs.metadata(&path) else {
                continue;
            };
            let status = match before.get(&path) {
                None => Some("A"),
                Some(old)
                    if old.size == meta.size
                        && old.mtime_ns == meta.mtime_ns
                        && old.ino == meta.ino =>
                {
                    None
                }
                Some(old) => match old.sha {
                    Some(sha) if old.size == meta.size => match sha256_file(ctx.fs, &path) {
                        Ok(now) if now == sha => None,
                        _ => Some("M"),
                    },
                    _ => Some("M"),
                },
            };
            if let Some(status) = status {
                changes.push(Change {
                    status: status.into(),
                    path: path.display(),
                });
            }
            seen.insert(path);
        }
        for path in before.keys() {
            if !seen.contains(path) {
                changes.push(Change {
                    status: "D".into(),
                    path: path.display(),
                });
            }
        }
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        let mut text = if changes.is_empty() {
            "No changes since the session started.".to_string()
        } else {
            changes
                .iter()
                .map(|c| format!("{} {}", c.status, c.path))
                .collect::<Vec<_>>()
                .join("\n")
        };
        if let Some(note) = unseen.note() {
            text.push('\n');
            text.push_str(&note);
        }
        Ok(ToolOutput::ok(
            text,
            Output {
                changes,
                unseen: unseen.into_option(),
            },
        ))
    }
}
