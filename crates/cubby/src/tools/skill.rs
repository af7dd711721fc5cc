//! `skill`: the skills this session found (SPEC §5.3) — the catalog, one
//! skill's `SKILL.md` with its file list, or one of its files.
//!
//! Offered only when the toolset found skills (its facts say `skills`);
//! its `name` is an enum of them ([`Tool::adjust_schema`]). A file is read
//! as `read_file` reads it — the same confined resolver, `deny_read`, line
//! and byte limits, redaction — after its path is checked against the
//! skill's own file list: `file` is relative to the skill's directory and
//! may not leave it (`../../etc/passwd` is `path_escape`).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::read::{self, ReadFile};
use super::{Ctx, READ_ONLY, Tool, cut_line, thousands};
use crate::error::{Error, ErrorKind, Result};
use crate::output::ToolOutput;
use crate::path::WorkspacePath;
use crate::skills::{self, SKILL_FILE, SKILLS_DIR_ENV};

/// Most files a skill's file list shows (all of them: a skill has at
/// most this many).
const MAX_LISTED_FILES: usize = skills::MAX_SKILL_FILES;

/// Arguments of `skill`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// The skill to read (its instructions and file list); omit it for the
    /// catalog of every skill.
    #[serde(default)]
    pub name: Option<String>,
    /// One file of the skill `name`, relative to its directory, as its file
    /// list shows it (e.g. `scripts/fill.py`).
    #[serde(default)]
    pub file: Option<String>,
    /// With `file`: the 1-based line to start at (default 1).
    #[serde(default)]
    pub offset: Option<u64>,
    /// With `file`: the number of lines to return (default and most: the
    /// line limit of `read_file`).
    #[serde(default)]
    pub limit: Option<u64>,
}

/// A skill in the catalog.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Entry {
    /// Its name.
    pub name: String,
    /// What it is for.
    pub description: String,
    /// Its directory, relative to the root.
    pub path: String,
}

/// A directory that is not a skill.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SkippedEntry {
    /// The directory, relative to the root.
    pub path: String,
    /// The rule it breaks.
    pub reason: String,
}

/// One file of a skill.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FileEntry {
    /// Its path inside the skill's directory.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
}

/// Result of `skill`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Output {
    /// What was returned: `catalog`, `skill` or `file`.
    pub kind: String,
    /// The catalog: every skill (`catalog`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<Entry>,
    /// The directories skipped, with their reasons (`catalog`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedEntry>,
    /// The skill's name (`skill`, `file`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The skill's directory, relative to the root (`skill`, `file`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Its other frontmatter fields, information only: `allowed-tools` is
    /// not obeyed, the policy decides (`skill`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub fields: BTreeMap<String, String>,
    /// `SKILL.md` after its frontmatter (`skill`), within `read_file`'s
    /// limits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// True when `instructions` stop before the end.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// The skill's files (`skill`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileEntry>,
    /// The file read, as `read_file` returns it (`file`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<read::Output>,
}

impl Output {
    fn of(kind: &str) -> Output {
        Output {
            kind: kind.to_string(),
            skills: Vec::new(),
            skipped: Vec::new(),
            name: None,
            path: None,
            fields: BTreeMap::new(),
            instructions: None,
            truncated: false,
            files: Vec::new(),
            file: None,
        }
    }
}

/// The `skill` tool.
pub struct Skill;

impl Tool for Skill {
    const NAME: &'static str = "skill";
    const FACTS: super::ToolFacts = super::ToolFacts {
        skills: true,
        ..super::reads_files(super::Cost::Short)
    };
    fn description(d: &super::Describe<'_>) -> String {
        let l = &d.limits().read_file;
        format!(
            "Read the skills of this session's workspace (instructions for tasks, in the Agent \
             Skills format); use it when a task matches a skill of the catalog in the server's \
             instructions. Without `name`: the catalog (every skill's name and description, and \
             the directories skipped with their reasons). With `name`: that skill's SKILL.md \
             and its file list. With `name` and `file`: one file of the skill as numbered lines \
             (at most {} lines or {} a call; `offset`, `limit`). A skill is text to read: \
             cubby runs nothing of it, and its `allowed-tools` are shown, never obeyed.",
            thousands(l.max_lines as u64),
            super::size(l.max_bytes as u64),
        )
    }
    const ANNOTATIONS: super::Annotations = READ_ONLY;
    type Params = Params;
    type Output = Output;

    fn adjust_schema(d: &super::Describe<'_>, schema: &mut Value) {
        let Some(name) = schema.pointer_mut("/properties/name") else {
            return;
        };
        let mut names: Vec<Value> = d
            .skills()
            .iter()
            .map(|n| Value::String((*n).to_string()))
            .collect();
        // Optional arguments are nullable: the enum keeps `null` allowed.
        let nullable = match name.get("type") {
            Some(Value::Array(types)) => types.iter().any(|t| t == "null"),
            _ => false,
        };
        if nullable {
            names.push(Value::Null);
        }
        if let Value::Object(map) = name {
            map.insert("enum".into(), Value::Array(names));
        }
    }

    fn call(ctx: &Ctx<'_>, params: Params) -> Result<ToolOutput<Output>> {
        let found = ctx.skills;
        let Some(name) = params.name else {
            if params.file.is_some() {
                return Err(Error::invalid_input(
                    "`file` needs `name`: the skill whose file it is; call skill without \
                     arguments for the catalog",
                ));
            }
            return Ok(catalog(ctx));
        };
        let Some(skill) = found.get(&name) else {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!(
                    "there is no skill named `{}`; the skills are: {}",
                    crate::output::truncate_for_message(&name),
                    found.names().join(", ")
                ),
            ));
        };
        match params.file {
            None => Ok(one_skill(ctx, skill)),
            Some(file) => read_one_file(ctx, skill, &file, params.offset, params.limit),
        }
    }
}

/// The catalog: every skill on one line, then what was skipped, within
/// `read_file`'s byte limit.
fn catalog(ctx: &Ctx<'_>) -> ToolOutput<Output> {
    let found = ctx.skills;
    let max_bytes = ctx.limits.read_file.max_bytes;
    let mut text = format!(
        "{} skills (call skill with `name` for one's instructions and files):\n",
        thousands(found.found.len() as u64)
    );
    let mut out = Output::of("catalog");
    let mut shown = 0usize;
    for s in &found.found {
        let line = format!(
            "- {}: {}\n",
            s.name,
            skills::escape_catalog_text(&crate::output::redact_for_cut(&s.description))
        );
        if text.len() + line.len() > max_bytes {
            break;
        }
        text.push_str(&line);
        shown += 1;
        out.skills.push(Entry {
            name: s.name.clone(),
            description: s.description.clone(),
            path: s.dir.display(),
        });
    }
    if shown < found.found.len() {
        text.push_str(&format!(
            "… and {} more (their names are the values of `name`)\n",
            thousands((found.found.len() - shown) as u64)
        ));
    }
    if !found.skipped.is_empty() {
        text.push_str(&format!(
            "Skipped ({}), each with the rule it breaks:\n",
            found.skipped.len()
        ));
        for s in &found.skipped {
            let line = format!("- {}: {}\n", s.path, skills::escape_catalog_text(&s.reason));
            if text.len() + line.len() > max_bytes {
                text.push_str("- … (the rest: see `cubby doctor`)\n");
                break;
            }
            text.push_str(&line);
            out.skipped.push(SkippedEntry {
                path: s.path.clone(),
                reason: s.reason.clone(),
            });
        }
    }
    ToolOutput::ok(text.trim_end().to_string(), out)
}

/// Where commands read `skill`.
fn command_location(ctx: &Ctx<'_>, skill: &skills::Skill) -> String {
    if !ctx.sandbox.supports_commands() {
        return String::new();
    }
    if ctx.skills.dirs.first() == Some(&skill.dir.parent()) {
        format!(
            " Commands read it at `${SKILLS_DIR_ENV}/{}` (read-only).",
            skill.name
        )
    } else {
        format!(
            " Commands read it at `{}` of the workspace (read-only).",
            skill.dir.display_dir()
        )
    }
}

/// One skill: its facts, the instructions of its SKILL.md (within
/// `read_file`'s limits) and its file list.
fn one_skill(ctx: &Ctx<'_>, skill: &skills::Skill) -> ToolOutput<Output> {
    let limits = &ctx.limits.read_file;
    let mut out = Output::of("skill");
    out.name = Some(skill.name.clone());
    out.path = Some(skill.dir.display_dir());
    let mut text = format!(
        "Skill `{}` ({}, {} files, {} bytes).{}\n",
        skill.name,
        skill.dir.display_dir(),
        thousands(skill.files.len() as u64),
        thousands(skill.bytes),
        command_location(ctx, skill),
    );
    for (key, value) in &skill.fields {
        let shown = skills::escape_catalog_text(value);
        let note = if key == "allowed-tools" {
            " (shown, not obeyed: the policy decides what runs)"
        } else {
            ""
        };
        text.push_str(&format!(
            "{key}: {}{note}\n",
            cut_line(&shown, crate::config::READ_MAX_LINE_CHARS)
        ));
        out.fields.insert(key.clone(), value.clone());
    }
    // The instructions, redacted before any cut, then held to the limits
    // of read_file: lines, bytes, long lines.
    let body = crate::output::redact_for_cut(&skill.body);
    let mut shown = String::new();
    let mut next_line = None;
    for (n, line) in body.lines().enumerate() {
        let line = cut_line(line, crate::config::READ_MAX_LINE_CHARS);
        if n >= limits.max_lines || shown.len() + line.len() + 1 > limits.max_bytes {
            next_line = Some(skill.body_line + n as u64);
            break;
        }
        shown.push_str(&line);
        shown.push('\n');
    }
    text.push('\n');
    text.push_str(&shown);
    if let Some(line) = next_line {
        out.truncated = true;
        text.push_str(&format!(
            "[{SKILL_FILE} cut here: read on with file = `{SKILL_FILE}`, offset = {line}]\n"
        ));
    }
    out.instructions = Some(shown);
    text.push_str(&format!(
        "\nFiles (read one with skill, `name` = `{}`, `file` = its path):\n",
        skill.name
    ));
    for f in skill.files.iter().take(MAX_LISTED_FILES) {
        text.push_str(&format!("  {} ({} bytes)\n", f.path, thousands(f.size)));
        out.files.push(FileEntry {
            path: f.path.clone(),
            size: f.size,
        });
    }
    ToolOutput::ok(text.trim_end().to_string(), out)
}

/// The workspace path of file `file` of `skill`: a path inside the skill's
/// directory (no absolute path, no `..` out of it) that its file list
/// names, and a plain file now (no second hard link, which may lie outside
/// the workspace).
fn listed_path(
    fs: &dyn crate::sandbox::FileSystem,
    skill: &skills::Skill,
    file: &str,
) -> Result<WorkspacePath> {
    let shown = || crate::output::truncate_for_message(file);
    // `file` is a path of its own, rooted at the skill's directory: no
    // absolute path, no `..` out of it.
    let inner = WorkspacePath::parse(file).map_err(|e| {
        Error::new(
            e.kind(),
            format!(
                "`file` `{}` is not a path inside skill `{}`: {}; pass a path from its file \
                 list",
                shown(),
                skill.name,
                e.message()
            ),
        )
    })?;
    let rel = inner.display();
    let Some(listed) = skill.files.iter().find(|f| f.path == rel) else {
        let some: Vec<&str> = skill
            .files
            .iter()
            .take(20)
            .map(|f| f.path.as_str())
            .collect();
        return Err(Error::new(
            ErrorKind::NotFound,
            format!(
                "skill `{}` has no file `{}`; its files: {}{}",
                skill.name,
                shown(),
                some.join(", "),
                if skill.files.len() > some.len() {
                    ", …"
                } else {
                    ""
                }
            ),
        ));
    };
    let path = WorkspacePath::parse(&format!("{}/{}", skill.dir.display(), listed.path))?;
    // Checked again now: the file may have been replaced since discovery.
    let m = fs.metadata(&path)?;
    if m.nlink > 1 {
        return Err(Error::new(
            ErrorKind::Denied,
            format!(
                "`{}` has {} hard links now (another name may lie outside the workspace); \
                 the skill's files must be plain files",
                path.display(),
                m.nlink
            ),
        ));
    }
    Ok(path)
}

/// The bytes of file `file` of `skill` (as [`listed_path`] finds it),
/// through the confined file system and the policy's read rules, at most
/// `max` bytes (`too_large` naming both beyond): what the MCP skills
/// extension serves through `resources/read`.
pub(crate) fn read_skill_bytes(
    fs: &dyn crate::sandbox::FileSystem,
    policy: &crate::policy::Policy,
    skill: &skills::Skill,
    file: &str,
    max: u64,
) -> Result<Vec<u8>> {
    let path = listed_path(fs, skill, file)?;
    policy.check_read(&path)?;
    fs.read_to_vec(&path, max)
}

/// One file of `skill`, read as `read_file` reads it.
fn read_one_file(
    ctx: &Ctx<'_>,
    skill: &skills::Skill,
    file: &str,
    offset: Option<u64>,
    limit: Option<u64>,
) -> Result<ToolOutput<Output>> {
    let path = listed_path(ctx.fs, skill, file)?;
    let read = ReadFile::call(
        ctx,
        read::Params {
            path: path.display(),
            offset,
            limit,
        },
    )?;
    Ok(read.map(|file| {
        let mut out = Output::of("file");
        out.name = Some(skill.name.clone());
        out.path = Some(skill.dir.display_dir());
        out.file = Some(file);
        out
    }))
}
