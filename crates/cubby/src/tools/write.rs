//! `write_file`: whole-file atomic writes behind the read-before-write and
//! stale guards.
//!
//! Guards run in SPEC order: input shape, policy (`denied`), path
//! (`path_escape`, `is_directory`), read-before-write (`not_read`), staleness
//! (`stale`). The stale check compares the sha256 recorded at the last read of
//! this run with the file's sha256 now.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::edit::EditFile;
use super::read::ReadFile;
use super::{Annotations, Ctx, Shown, Tool, hex, sha256, sha256_file, thousands};
use crate::error::{Error, ErrorKind, Result};
use crate::output::ToolOutput;
use crate::path::WorkspacePath;
use crate::sandbox::EntryKind;

/// Arguments of `write_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// File path relative to the workspace root; missing parent directories are created.
    pub path: String,
    /// The whole new content of the file.
    pub content: String,
}

/// Result of `write_file`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Output {
    /// The path written, relative to the root.
    pub path: String,
    /// True when the file did not exist before.
    pub created: bool,
    /// Size written, in bytes.
    pub size: u64,
    /// sha256 of the new content, hex; of its redacted form (as `read_file`
    /// shows it) when `redacted`.
    pub sha256: String,
    /// True when the content holds secrets (`sha256` is then of the
    /// content as shown).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub redacted: bool,
}

/// The `write_file` tool.
pub struct WriteFile;

/// Checks that `path` may be replaced: when it exists, returns its digest
/// and the size it was shown with at its last read (`redacted` unset).
///
/// Existing files must have been read in this run (`not_read`) and be
/// unchanged since (`stale`).
pub(crate) fn guard_overwrite(ctx: &Ctx<'_>, path: &WorkspacePath) -> Result<Option<Shown>> {
    let meta = match ctx.fs.metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    match meta.kind {
        EntryKind::File => {}
        EntryKind::Dir => {
            return Err(Error::new(
                ErrorKind::IsDirectory,
                format!("`{path}` is a directory; pass a file path"),
            ));
        }
        EntryKind::Symlink => return Err(Error::path_escape(&path.display())),
        EntryKind::Special => {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!("`{path}` is not a regular file; it cannot be written"),
            ));
        }
    }
    let Some((seen, shown_size)) = ctx.run.last_read(path) else {
        return Err(Error::new(
            ErrorKind::NotRead,
            format!(
                "`{path}` exists and has not been read in this run; call {} on it first, then write",
                ReadFile::NAME
            ),
        ));
    };
    let now = sha256_file(ctx.fs, path)?;
    if now != seen {
        return Err(stale(path));
    }
    // Unchanged since the read: as big as it was shown then (the size on
    // disk of a redacted file would tell its secrets' length).
    Ok(Some(Shown {
        sha: now,
        size: shown_size,
        redacted: false,
    }))
}

/// Refuses a write beneath a `.git` (the first of the path, at any depth:
/// red-team pass 5, F6) unless that `.git` is a directory already: the
/// write would create git's directory (a repository whose `config` and
/// `commondir` the tools wrote), or it meets a gitfile. A `.git` reserved
/// while a command runs is missing to the tools, and refused the same way.
pub(crate) fn guard_git_dir(ctx: &Ctx<'_>, path: &WorkspacePath) -> Result<()> {
    let names: Vec<&std::ffi::OsStr> = path.components().collect();
    let Some(at) = names.iter().position(|n| *n == crate::git::GIT_DIR_NAME) else {
        return Ok(());
    };
    if at + 1 == names.len() {
        return Ok(());
    }
    let git = names[..=at]
        .iter()
        .fold(WorkspacePath::root(), |p, n| p.join_name(n));
    match ctx.fs.metadata(&git) {
        Ok(m) if m.kind == EntryKind::Dir => Ok(()),
        Ok(_) => Err(Error::denied(format!(
            "writing `{path}` is not allowed: `{git}` is a gitfile, not a directory; the tools \
             do not change where it points"
        ))),
        Err(e) if e.kind() == ErrorKind::NotFound => Err(Error::denied(format!(
            "writing `{path}` is not allowed: it would create `{git}`, git's directory, which \
             the tools do not make; write somewhere else in the workspace (the user runs \
             `git init`)"
        ))),
        Err(e) => Err(e),
    }
}

fn stale(path: &WorkspacePath) -> Error {
    Error::new(
        ErrorKind::Stale,
        format!(
            "`{path}` changed since it was last read in this run; call read_file again and \
             redo the change on the current content"
        ),
    )
}

/// Writes `content` to `path` and records it as read, so that a following
/// edit needs no new read; the digest of `content` as the tools show it.
pub(crate) fn commit(ctx: &Ctx<'_>, path: &WorkspacePath, content: &[u8]) -> Result<Shown> {
    ctx.run.before_mutation();
    ctx.fs.write_atomic(path, content)?;
    let sha = sha256(content);
    let shown = Shown::of(ctx.redactor, content, sha);
    ctx.run.record_read(path, sha, shown.size);
    Ok(shown)
}

impl Tool for WriteFile {
    const NAME: &'static str = "write_file";
    const FACTS: super::ToolFacts = super::WRITES_FILES;
    fn description(d: &super::Describe<'_>) -> String {
        format!(
            "Write a whole file in the sandboxed workspace (created with its parent directories, \
             or replaced atomically); {} file-writing tool. Overwriting an existing file needs a \
             {} of it in this session, and the file unchanged since. Content up to {}.{}",
            super::PREFER,
            ReadFile::NAME,
            super::size(d.limits.write_file.max_bytes),
            d.mention(EditFile::NAME, |edit| format!(
                " For a change to part of a file use {edit}."
            )),
        )
    }
    const ANNOTATIONS: Annotations = Annotations {
        read_only: false,
        destructive: true,
        idempotent: true,
        open_world: false,
    };
    type Params = Params;
    type Output = Output;

    fn call(ctx: &Ctx<'_>, params: Params) -> Result<ToolOutput<Output>> {
        let path = WorkspacePath::parse(&params.path)?;
        let max = ctx.limits.write_file.max_bytes;
        if params.content.len() as u64 > max {
            return Err(Error::new(
                ErrorKind::TooLarge,
                format!(
                    "content is {} bytes, the limit is {}; write a smaller file or build it \
                     with several edits",
                    thousands(params.content.len() as u64),
                    thousands(max)
                ),
            ));
        }
        if path.is_root() {
            return Err(Error::new(
                ErrorKind::IsDirectory,
                "`.` is the workspace root, a directory; pass a file path",
            ));
        }
        ctx.policy.check_write(&path)?;
        super::publish::refuse_output_write(&path)?;
        guard_git_dir(ctx, &path)?;
        let existing = guard_overwrite(ctx, &path)?;
        let digest = commit(ctx, &path, params.content.as_bytes())?;
        let size = params.content.len() as u64;
        let text = match existing {
            None => format!("Created `{path}` ({} bytes).", thousands(size)),
            Some(old) => format!(
                "Wrote `{path}` ({} bytes, was {} bytes).",
                thousands(size),
                thousands(old.size)
            ),
        };
        Ok(ToolOutput::ok(
            text,
            Output {
                path: path.display(),
                created: existing.is_none(),
                size,
                sha256: hex(&digest.sha),
                redacted: digest.redacted,
            },
        ))
    }
}
