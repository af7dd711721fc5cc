//! `glob` and `list_files`: finding files by name.
//!
//! Glob semantics (globset): `*` and `?` never cross `/`, `**` crosses any
//! number of directories, `{a,b}` alternates, `[ab]` is a class. In `glob`
//! the pattern is matched against the path relative to `path` (so `*.rs`
//! lists the top level and `**/*.rs` every level). The `glob` filter of
//! `list_files` and `search` works as ripgrep's `--glob`: a pattern without
//! `/` matches the file name at any depth.

use globset::{GlobBuilder, GlobMatcher};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::walk::{Flow, Unseen, Walk};
use super::{Ctx, READ_ONLY, Tool, parse_dir_arg, pattern_error, thousands};
use crate::error::{Error, ErrorKind, Result};
use crate::output::ToolOutput;
use crate::path::WorkspacePath;
use crate::sandbox::EntryKind;

/// Longest glob pattern accepted.
pub(crate) const MAX_GLOB_PATTERN_BYTES: usize = 1024;

/// Compiles a pattern with `/`-aware wildcards.
pub(crate) fn compile(pattern: &str) -> Result<GlobMatcher> {
    if pattern.len() > MAX_GLOB_PATTERN_BYTES {
        return Err(Error::invalid_input(format!(
            "glob pattern is {} bytes, the limit is {MAX_GLOB_PATTERN_BYTES}",
            pattern.len()
        )));
    }
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| pattern_error("glob pattern", pattern, e))
}

/// A `--glob`-style filter: name-only patterns match the file name.
pub(crate) struct NameFilter {
    matcher: GlobMatcher,
    by_name: bool,
}

impl NameFilter {
    pub(crate) fn new(pattern: &str) -> Result<NameFilter> {
        Ok(NameFilter {
            matcher: compile(pattern)?,
            by_name: !pattern.contains('/'),
        })
    }

    pub(crate) fn matches(&self, path: &WorkspacePath) -> bool {
        if self.by_name {
            path.file_name()
                .is_some_and(|n| self.matcher.is_match(std::path::Path::new(n)))
        } else {
            self.matcher.is_match(path.as_path())
        }
    }
}

/// The start directory of a walk: must exist and be a directory.
pub(crate) fn start_dir(ctx: &Ctx<'_>, path: Option<&str>) -> Result<WorkspacePath> {
    let dir = parse_dir_arg(path)?;
    ctx.policy.check_read(&dir)?;
    let meta = ctx.fs.metadata(&dir)?;
    match meta.kind {
        EntryKind::Dir => Ok(dir),
        EntryKind::File => Err(Error::invalid_input(format!(
            "`{dir}` is a file, not a directory; pass a directory as `path` (or read the file with {})",
            super::read::ReadFile::NAME
        ))),
        EntryKind::Symlink => Err(Error::path_escape(&dir.display())),
        EntryKind::Special => Err(Error::new(
            ErrorKind::Unsupported,
            format!("`{dir}` is not a directory"),
        )),
    }
}

/// Arguments of `glob`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobParams {
    /// Glob pattern matched against paths relative to `path`, e.g. `**/*.rs` (every level) or `src/*.ts` (one level).
    pub pattern: String,
    /// Directory to search in, relative to the workspace root (default: the root).
    #[serde(default)]
    pub path: Option<String>,
}

/// Result of `glob` and `list_files`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ListOutput {
    /// Paths relative to the workspace root, sorted; directories end in `/`.
    pub entries: Vec<String>,
    /// How many matched in all.
    pub total: u64,
    /// True when `entries` was capped.
    pub truncated: bool,
    /// What the walk did not enter, and why (absent when it saw everything).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unseen: Option<Unseen>,
}

/// The `glob` tool.
pub struct Glob;

impl Tool for Glob {
    const NAME: &'static str = "glob";
    const FACTS: super::ToolFacts = super::reads_files(super::Cost::Short);
    fn description(d: &super::Describe<'_>) -> String {
        format!(
            "Find files of the sandboxed workspace by glob pattern (`**/*.rs`, \
             `src/**/test_*.py`, `*.{{js,ts}}`); {} file-finding tool. Returns matching file \
             paths relative to the workspace root, sorted, at most {} (the total is counted). \
             .gitignore is respected and .git/ is never listed.",
            super::PREFER,
            super::thousands(d.limits.glob.max_matches as u64),
        )
    }
    const ANNOTATIONS: super::Annotations = READ_ONLY;
    type Params = GlobParams;
    type Output = ListOutput;

    fn call(ctx: &Ctx<'_>, params: GlobParams) -> Result<ToolOutput<ListOutput>> {
        let matcher = compile(&params.pattern)?;
        let start = start_dir(ctx, params.path.as_deref())?;
        let cap = ctx.limits.glob.max_matches;
        let mut entries = Vec::new();
        let mut total = 0u64;
        let prefix_len = start.as_path().components().count();
        let unseen = Walk::new(ctx.fs, ctx.policy)
            .run(&start, &mut |v| {
                if v.kind == EntryKind::File {
                    let rel: std::path::PathBuf =
                        v.path.as_path().components().skip(prefix_len).collect();
                    if matcher.is_match(&rel) {
                        total += 1;
                        if entries.len() < cap {
                            entries.push(v.path.display());
                        }
                    }
                }
                Flow::Continue
            })
            .map_err(|e| start_dir(ctx, params.path.as_deref()).err().unwrap_or(e))?;
        let truncated = total > entries.len() as u64;
        let mut text = if entries.is_empty() {
            format!(
                "No files match `{}`.",
                crate::output::truncate_for_message(&params.pattern)
            )
        } else {
            entries.join("\n")
        };
        if truncated {
            text.push_str(&format!(
                "\n[showing {} of {} matches; use a narrower pattern or path]",
                thousands(entries.len() as u64),
                thousands(total)
            ));
        }
        if let Some(note) = unseen.note() {
            text.push('\n');
            text.push_str(&note);
        }
        Ok(ToolOutput::ok(
            text,
            ListOutput {
                entries,
                total,
                truncated,
                unseen: unseen.into_option(),
            },
        ))
    }
}

/// Arguments of `list_files`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// Directory to list, relative to the workspace root (default: the root).
    #[serde(default)]
    pub path: Option<String>,
    /// Only files matching this glob; without `/` it matches file names at any depth (e.g. `*.md`).
    #[serde(default)]
    pub glob: Option<String>,
    /// How deep to list: 1 lists direct entries only (default: no limit).
    #[serde(default)]
    pub depth: Option<u64>,
}

/// The `list_files` tool.
pub struct ListFiles;

impl Tool for ListFiles {
    const NAME: &'static str = "list_files";
    const FACTS: super::ToolFacts = super::reads_files(super::Cost::Bounded);
    fn description(d: &super::Describe<'_>) -> String {
        format!(
            "List files and directories of the sandboxed workspace (directories end in `/`), \
             sorted, relative to the root; {} listing tool and to `ls`. `depth` limits recursion \
             (1: direct entries only) and `glob` filters files. At most {} entries are shown (the \
             total is counted). .gitignore is respected and .git/ is never listed.",
            super::PREFER,
            super::thousands(d.limits.list_files.max_matches as u64),
        )
    }
    const ANNOTATIONS: super::Annotations = READ_ONLY;
    type Params = ListParams;
    type Output = ListOutput;

    /// One directory (`depth` at most 1) is bounded by construction: at
    /// most `max_matches` entries of one listing.
    fn bounded(arguments: &serde_json::Value) -> bool {
        arguments
            .get("depth")
            .and_then(serde_json::Value::as_u64)
            .is_some_and(|d| d <= 1)
    }

    fn call(ctx: &Ctx<'_>, params: ListParams) -> Result<ToolOutput<ListOutput>> {
        let filter = params.glob.as_deref().map(NameFilter::new).transpose()?;
        // The walk opens the start directory itself; `start_dir`'s checks
        // (and its clearer errors) run only when that fails.
        let start = parse_dir_arg(params.path.as_deref())?;
        ctx.policy.check_read(&start)?;
        let cap = ctx.limits.list_files.max_matches;
        let mut entries = Vec::new();
        let mut total = 0u64;
        let mut walk = Walk::new(ctx.fs, ctx.policy);
        if let Some(depth) = params.depth {
            walk = walk.max_depth(depth.min(usize::MAX as u64) as usize);
        }
        let unseen = walk
            .run(&start, &mut |v| {
                let shown = match (v.kind, &filter) {
                    (EntryKind::Dir, None) => Some(v.path.display_dir()),
                    (EntryKind::Dir, Some(_)) => None,
                    (EntryKind::File, f) => f
                        .as_ref()
                        .is_none_or(|f| f.matches(v.path))
                        .then(|| v.path.display()),
                    (EntryKind::Symlink, None) => {
                        Some(format!("{} (symlink, not followed)", v.path.display()))
                    }
                    _ => None,
                };
                if let Some(shown) = shown {
                    total += 1;
                    if entries.len() < cap {
                        entries.push(shown);
                    }
                }
                Flow::Continue
            })
            .map_err(|e| start_dir(ctx, params.path.as_deref()).err().unwrap_or(e))?;
        let truncated = total > entries.len() as u64;
        let mut text = if entries.is_empty() {
            format!("`{start}` has no entries to show.")
        } else {
            entries.join("\n")
        };
        if truncated {
            text.push_str(&format!(
                "\n[showing {} of {} entries; pass a deeper `path`, a `depth` or a `glob`]",
                thousands(entries.len() as u64),
                thousands(total)
            ));
        }
        if let Some(note) = unseen.note() {
            text.push('\n');
            text.push_str(&note);
        }
        Ok(ToolOutput::ok(
            text,
            ListOutput {
                entries,
                total,
                truncated,
                unseen: unseen.into_option(),
            },
        ))
    }
}
