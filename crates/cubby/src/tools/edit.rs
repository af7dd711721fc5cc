//! `edit_file`: replace text that occurs exactly once (or every occurrence
//! with `replace_all`), with diagnostics that name the closest line when the
//! text is not there.
//!
//! Line endings: in a file with CRLF line endings an LF-only `find` matches,
//! and the replacement is written with CRLF, so the file stays CRLF.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use similar::TextDiff;
use std::borrow::Cow;

use super::read::ReadFile;
use super::write::WriteFile;
use super::write::{commit, guard_overwrite};
use super::{Annotations, Ctx, Tool, hex, thousands};
use crate::error::{Error, ErrorKind, Result};
use crate::output::Redactor;
use crate::output::ToolOutput;
use crate::output::cap_head_tail;
use crate::output::truncate_for_message;
use crate::path::WorkspacePath;

/// Most line numbers listed in an `ambiguous_match` error.
const MAX_LISTED_MATCHES: usize = 20;
/// Cap on the diff shown in the result, in bytes.
const MAX_DIFF_BYTES: usize = 20 * 1024;
/// Lines of context around each diff hunk.
const DIFF_CONTEXT_LINES: usize = 3;
/// File lines compared when looking for the closest line.
const MAX_DIAGNOSTIC_LINES: usize = 20_000;

/// Arguments of `edit_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// File path relative to the workspace root.
    pub path: String,
    /// The exact text to replace, including whitespace and indentation. It must occur exactly once unless `replace_all` is true.
    pub find: String,
    /// The text to put in its place.
    pub replace: String,
    /// Replace every occurrence instead of requiring exactly one (default false).
    #[serde(default)]
    pub replace_all: Option<bool>,
}

/// Result of `edit_file`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Output {
    /// The path edited, relative to the root.
    pub path: String,
    /// Occurrences replaced.
    pub replacements: u64,
    /// Unified diff of the change.
    pub diff: String,
    /// sha256 of the new content, hex; of its redacted form when `redacted`.
    pub sha256: String,
    /// Size of the new content, in bytes; of its redacted form when `redacted`.
    pub size: u64,
    /// True when the new content holds secrets: `sha256` and `size` are
    /// those of the content as `read_file` shows it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub redacted: bool,
}

/// The `edit_file` tool.
pub struct EditFile;

impl Tool for EditFile {
    const NAME: &'static str = "edit_file";
    const FACTS: super::ToolFacts = super::WRITES_FILES;
    fn description(d: &super::Describe<'_>) -> String {
        format!(
            "Replace exact text in a file of the sandboxed workspace and get a unified diff; {} \
             edit tool. `find` must occur exactly once (copy it from {} output, without \
             the line numbers), or set `replace_all` to replace every occurrence. Needs a \
             {} of the file in this session. Files up to {}.",
            super::PREFER,
            ReadFile::NAME,
            ReadFile::NAME,
            super::size(d.limits.edit_file.max_bytes),
        )
    }
    const ANNOTATIONS: Annotations = Annotations {
        read_only: false,
        destructive: true,
        idempotent: false,
        open_world: false,
    };
    type Params = Params;
    type Output = Output;

    fn call(ctx: &Ctx<'_>, params: Params) -> Result<ToolOutput<Output>> {
        let path = WorkspacePath::parse(&params.path)?;
        if params.find.is_empty() {
            return Err(Error::invalid_input(format!(
                "`find` is empty; pass the exact text to replace (use {} to create a file)",
                WriteFile::NAME
            )));
        }
        ctx.policy.check_write(&path)?;
        super::publish::refuse_output_write(&path)?;
        let Some(_meta) = guard_overwrite(ctx, &path)? else {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!(
                    "`{path}` does not exist; use {} to create it",
                    WriteFile::NAME
                ),
            ));
        };
        let max = ctx.limits.edit_file.max_bytes;
        let bytes = ctx.fs.read_to_vec(&path, max)?;
        let head = &bytes[..bytes.len().min(super::read::BINARY_SNIFF_BYTES)];
        let text = (!super::read::looks_binary(head))
            .then(|| String::from_utf8(bytes).ok())
            .flatten();
        let Some(old) = text else {
            return Err(Error::new(
                ErrorKind::Binary,
                format!(
                    "`{path}` is binary (a NUL byte or invalid UTF-8); {} only edits text files, use {} to replace it whole",
                    Self::NAME,
                    WriteFile::NAME
                ),
            ));
        };
        let replace_all = params.replace_all.unwrap_or(false);
        let (new, count) = apply(
            &old,
            &params.find,
            &params.replace,
            replace_all,
            &path,
            ctx.redactor,
        )?;
        let digest = commit(ctx, &path, new.as_bytes())?;
        let shown = path.display();
        // The diff is of the contents as `read_file` shows them: a secret
        // spanning lines is redacted before the lines are cut and prefixed,
        // which the redaction of the result alone could no longer see.
        let (old_shown, new_shown) = (as_shown(ctx.redactor, &old), as_shown(ctx.redactor, &new));
        let diff = TextDiff::from_lines(old_shown.as_ref(), new_shown.as_ref())
            .unified_diff()
            .context_radius(DIFF_CONTEXT_LINES)
            .header(&format!("a/{shown}"), &format!("b/{shown}"))
            .to_string();
        let diff = cap_head_tail(&diff, MAX_DIFF_BYTES, |n| {
            format!(
                "[{} bytes of diff cut; {} shows the result]",
                thousands(n),
                ReadFile::NAME
            )
        });
        let text = format!(
            "Edited `{path}`: {count} replacement{}.\n{diff}",
            if count == 1 { "" } else { "s" }
        );
        Ok(ToolOutput::ok(
            text,
            Output {
                path: shown,
                replacements: count,
                diff,
                sha256: hex(&digest.sha),
                size: digest.size,
                redacted: digest.redacted,
            },
        ))
    }
}

/// `text` as `read_file` shows it: every secret replaced by its marker,
/// the line feeds it held kept.
fn as_shown<'t>(redactor: &Redactor, text: &'t str) -> Cow<'t, str> {
    match redactor.redact_lines(text.as_bytes()) {
        Cow::Borrowed(_) => Cow::Borrowed(text),
        Cow::Owned(bytes) => Cow::Owned(String::from_utf8_lossy(&bytes).into_owned()),
    }
}

/// Applies the edit; returns the new text and the number of replacements.
/// The diagnostics quote `old` as shown through `redactor`.
fn apply(
    old: &str,
    find: &str,
    replace: &str,
    replace_all: bool,
    path: &WorkspacePath,
    redactor: &Redactor,
) -> Result<(String, u64)> {
    let crlf = old.contains("\r\n") && !find.contains('\r');
    let (find_eff, replace_eff) = if crlf {
        (to_crlf(find), to_crlf(replace))
    } else {
        (find.to_string(), replace.to_string())
    };
    let positions: Vec<usize> = old.match_indices(&find_eff).map(|(i, _)| i).collect();
    match positions.len() {
        0 => Err(no_match(&as_shown(redactor, old), find, path)),
        1 => Ok((old.replacen(&find_eff, &replace_eff, 1), 1)),
        n if replace_all => Ok((old.replace(&find_eff, &replace_eff), n as u64)),
        n => {
            let lines: Vec<String> = positions
                .iter()
                .take(MAX_LISTED_MATCHES)
                .map(|&i| line_of(old, i).to_string())
                .collect();
            let more = if n > MAX_LISTED_MATCHES { ", …" } else { "" };
            Err(Error::new(
                ErrorKind::AmbiguousMatch,
                format!(
                    "`find` occurs {n} times in `{path}` (lines {}{more}); add surrounding \
                     lines to `find` so it matches once, or set replace_all to true",
                    lines.join(", ")
                ),
            ))
        }
    }
}

fn to_crlf(s: &str) -> String {
    s.replace("\r\n", "\n").replace('\n', "\r\n")
}

/// 1-based line number of byte offset `i`.
fn line_of(text: &str, i: usize) -> usize {
    text.as_bytes()[..i].iter().filter(|b| **b == b'\n').count() + 1
}

/// Collapses whitespace runs (spaces, tabs, NBSP) and trims: two lines equal
/// under this differ only in invisible ways.
fn loose(line: &str) -> String {
    line.split(|c: char| c.is_whitespace() || c == '\u{a0}')
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Names the invisible difference between a file line and a `find` line.
fn describe_difference(file_line: &str, find_line: &str) -> String {
    let mut reasons = Vec::new();
    if file_line.ends_with('\r') && !find_line.ends_with('\r') {
        reasons.push("the file line ends with CRLF".to_string());
    }
    let file_line = file_line.trim_end_matches('\r');
    let file_ws: String = file_line
        .chars()
        .take_while(|c| c.is_whitespace())
        .collect();
    let find_ws: String = find_line
        .chars()
        .take_while(|c| c.is_whitespace())
        .collect();
    if file_ws != find_ws {
        let show = |s: &str| {
            let tabs = s.matches('\t').count();
            let spaces = s.matches(' ').count();
            match (tabs, spaces) {
                (0, 0) => "no indentation".to_string(),
                (t, 0) => format!("{t} tab{}", if t == 1 { "" } else { "s" }),
                (0, s) => format!("{s} space{}", if s == 1 { "" } else { "s" }),
                (t, s) => format!("{t} tabs and {s} spaces"),
            }
        };
        reasons.push(format!(
            "indentation differs: the file has {}, `find` has {}",
            show(&file_ws),
            show(&find_ws)
        ));
    }
    if file_line.contains('\u{a0}') != find_line.contains('\u{a0}') {
        let side = if file_line.contains('\u{a0}') {
            "the file"
        } else {
            "`find`"
        };
        reasons.push(format!(
            "{side} has a non-breaking space (U+00A0) where the other has a plain space"
        ));
    }
    let file_trail = file_line.len() - file_line.trim_end().len();
    let find_trail = find_line.len() - find_line.trim_end().len();
    if file_trail != find_trail {
        reasons.push(format!(
            "trailing whitespace differs: the file line has {file_trail} trailing, `find` has {find_trail}"
        ));
    }
    let inner_tabs = |s: &str| s.trim().matches('\t').count();
    if file_ws == find_ws && inner_tabs(file_line) != inner_tabs(find_line) {
        reasons.push("tabs and spaces differ inside the line".to_string());
    }
    if reasons.is_empty() {
        "whitespace differs".to_string()
    } else {
        reasons.join("; ")
    }
}

/// The `no_match` error; `old` is the file as shown (secrets redacted).
fn no_match(old: &str, find: &str, path: &WorkspacePath) -> Error {
    let file_lines: Vec<&str> = old.split('\n').take(MAX_DIAGNOSTIC_LINES).collect();
    let find_lines: Vec<&str> = find.split('\n').map(|l| l.trim_end_matches('\r')).collect();
    let advice = format!("call {} again and copy the text exactly", ReadFile::NAME);
    if find.contains("\r\n") && !old.contains("\r\n") {
        let plain = find.replace("\r\n", "\n");
        if old.contains(&plain) {
            return Error::new(
                ErrorKind::NoMatch,
                format!(
                    "`find` does not occur in `{path}`: `find` has CRLF line endings but the \
                     file uses LF; pass `find` with plain \\n line endings"
                ),
            );
        }
    }
    // 1. A window of file lines equal to `find` up to invisible differences.
    let loose_find: Vec<String> = find_lines.iter().map(|l| loose(l)).collect();
    let anchor = loose_find.iter().position(|l| !l.is_empty()).unwrap_or(0);
    for (i, fl) in file_lines.iter().enumerate() {
        if loose(fl) != loose_find[anchor] || loose_find[anchor].is_empty() {
            continue;
        }
        let start = i as isize - anchor as isize;
        if start < 0 {
            continue;
        }
        let start = start as usize;
        let all_loose_equal = find_lines.iter().enumerate().all(|(k, l)| {
            file_lines
                .get(start + k)
                .is_some_and(|f| loose(f) == loose(l))
        });
        if !all_loose_equal {
            continue;
        }
        for (k, l) in find_lines.iter().enumerate() {
            let f = file_lines[start + k];
            if f != *l {
                return Error::new(
                    ErrorKind::NoMatch,
                    format!(
                        "`find` does not occur in `{path}`. The closest text starts at line {}; \
                         line {} is `{}` and differs from `find` only in whitespace: {}. {advice}.",
                        start + 1,
                        start + k + 1,
                        truncate_for_message(&visible(f.trim_end_matches('\r'))),
                        describe_difference(f, l)
                    ),
                );
            }
        }
    }
    // 2. Otherwise the most similar single line.
    let target = find_lines.get(anchor).copied().unwrap_or("");
    let mut best: Option<(f32, usize)> = None;
    for (i, fl) in file_lines.iter().enumerate() {
        if fl.trim().is_empty() {
            continue;
        }
        let ratio = TextDiff::from_chars(target.trim(), fl.trim()).ratio();
        if best.is_none_or(|(r, _)| ratio > r) {
            best = Some((ratio, i));
        }
    }
    match best {
        Some((ratio, i)) if ratio >= 0.5 => Error::new(
            ErrorKind::NoMatch,
            format!(
                "`find` does not occur in `{path}`. The most similar line is line {} ({:.0}% \
                 similar): `{}`. {advice}.",
                i + 1,
                ratio * 100.0,
                truncate_for_message(&visible(file_lines[i].trim_end_matches('\r')))
            ),
        ),
        _ => Error::new(
            ErrorKind::NoMatch,
            format!(
                "`find` does not occur in `{path}` and no line is similar to it; use search to \
                 locate the text, then {advice}."
            ),
        ),
    }
}

/// Shows tabs and NBSPs so the model can see them.
fn visible(s: &str) -> String {
    s.replace('\t', "→").replace('\u{a0}', "⍽")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> WorkspacePath {
        WorkspacePath::parse("f.txt").unwrap()
    }

    #[test]
    fn replaces_exactly_once() {
        let (new, n) = apply("a b c", "b", "B", false, &p(), &Redactor::default()).unwrap();
        assert_eq!((new.as_str(), n), ("a B c", 1));
    }

    #[test]
    fn ambiguous_lists_lines() {
        let err = apply("x\ny\nx\n", "x", "z", false, &p(), &Redactor::default()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::AmbiguousMatch);
        assert!(err.message().contains("2 times"));
        assert!(err.message().contains("lines 1, 3"));
        let (new, n) = apply("x\ny\nx\n", "x", "z", true, &p(), &Redactor::default()).unwrap();
        assert_eq!((new.as_str(), n), ("z\ny\nz\n", 2));
    }

    #[test]
    fn crlf_files_match_lf_find_and_stay_crlf() {
        let old = "one\r\ntwo\r\nthree\r\n";
        let (new, _) = apply(
            old,
            "one\ntwo",
            "uno\ndos",
            false,
            &p(),
            &Redactor::default(),
        )
        .unwrap();
        assert_eq!(new, "uno\r\ndos\r\nthree\r\n");
    }

    #[test]
    fn no_match_names_tab_versus_spaces() {
        let err = apply(
            "fn a() {\n\tlet x = 1;\n}\n",
            "    let x = 1;",
            "",
            false,
            &p(),
            &Redactor::default(),
        )
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NoMatch);
        assert!(err.message().contains("line 2"), "{err}");
        assert!(err.message().contains("1 tab"), "{err}");
        assert!(err.message().contains("4 spaces"), "{err}");
    }

    #[test]
    fn no_match_names_nbsp_and_trailing_space() {
        let err = apply(
            "let\u{a0}x = 1;\n",
            "let x = 1;",
            "",
            false,
            &p(),
            &Redactor::default(),
        )
        .unwrap_err();
        assert!(err.message().contains("U+00A0"), "{err}");
        let err = apply(
            "let x = 1;  \nnext\n",
            "let x = 1;\nnext",
            "",
            false,
            &p(),
            &Redactor::default(),
        )
        .unwrap_err();
        assert!(err.message().contains("trailing"), "{err}");
    }

    #[test]
    fn no_match_names_crlf() {
        // `find` carries a CR that the LF file does not have.
        let err = apply("a\nb\n", "a\r\nb", "", false, &p(), &Redactor::default()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NoMatch);
        assert!(err.message().contains("CRLF"), "{err}");
        // CRLF file with a find containing CR on one line only.
        let err = apply(
            "a\r\nb\r\n",
            "a\r\nb\nc",
            "",
            false,
            &p(),
            &Redactor::default(),
        )
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NoMatch);
    }

    #[test]
    fn no_match_suggests_the_most_similar_line() {
        let err = apply(
            "let counter = 10;\nother\n",
            "let countr = 10;",
            "",
            false,
            &p(),
            &Redactor::default(),
        )
        .unwrap_err();
        assert!(err.message().contains("line 1"), "{err}");
        assert!(err.message().contains("similar"), "{err}");
    }
}
