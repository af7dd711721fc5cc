//! A SKILL.md's frontmatter: the `---` block at the top, read as a
//! restricted subset of YAML.
//!
//! Why a subset and not a YAML crate: the frontmatter of an Agent Skill is a
//! flat map of a few string fields (`name`, `description`, `license`,
//! `allowed-tools`, `compatibility`, a `metadata` map). A full YAML parser
//! brings anchors and aliases, whose expansion is the "billion laughs"
//! bomb; the maintained serde forks (`serde_yaml_ng`, `serde_norway`) sit on
//! a C-to-Rust translation of libyaml, and `saphyr`/`yaml-rust2` must be
//! told their own limits. This reader needs no dependency and cannot
//! explode: it refuses anchors (`&`), aliases (`*`), tags (`!`) and
//! directives outright, reads each line once (time linear in the at most
//! [`MAX_FRONTMATTER_BYTES`](super::MAX_FRONTMATTER_BYTES) it is given) and
//! never builds anything larger than its input.
//!
//! What it reads: `key: value` at the start of a line (keys of letters,
//! digits, `_`, `-`, `.`; a key given twice refused), the value a plain
//! scalar (continued on more-indented lines, folded with spaces), a single-
//! or double-quoted scalar on one line (YAML's escapes), a literal (`|`) or
//! folded (`>`) block scalar with an optional chomping indicator, or an
//! indented block (a nested map or a list), which is kept as its text, as
//! is a flow collection (`[a, b]`). Comments (`#` at a line's start or
//! after a blank) and blank lines are skipped.

use std::fmt::Write as _;

/// One field's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Value {
    /// A scalar: plain, quoted or a block scalar.
    Text(String),
    /// A nested block or a flow collection, kept as its text (information
    /// only: never interpreted).
    Raw(String),
}

impl Value {
    /// The value as text (a raw block as written).
    pub(crate) fn as_text(&self) -> &str {
        match self {
            Value::Text(s) | Value::Raw(s) => s,
        }
    }
}

/// The fields, in the order written.
pub(crate) type Fields = Vec<(String, Value)>;

/// Reads the frontmatter's lines (between the `---` delimiters, LF line
/// ends). `Err` says what is wrong, for a skipped skill's reason.
pub(crate) fn parse(text: &str) -> Result<Fields, String> {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut fields: Fields = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let number = i + 1;
        i += 1;
        if is_blank_or_comment(line) {
            continue;
        }
        if line.starts_with([' ', '\t']) {
            return Err(format!(
                "frontmatter line {number} is indented but belongs to no field"
            ));
        }
        if line.starts_with('%') {
            return Err(format!(
                "frontmatter line {number} is a YAML directive, which is not accepted"
            ));
        }
        let Some((key, rest)) = split_key(line) else {
            return Err(format!(
                "frontmatter line {number} is not `key: value` (only a map of fields is \
                 accepted)"
            ));
        };
        if fields.iter().any(|(k, _)| k == key) {
            return Err(format!("the frontmatter gives `{key}` twice"));
        }
        // The lines that continue this field: indented or blank.
        let start = i;
        while i < lines.len() && (lines[i].starts_with([' ', '\t']) || lines[i].trim().is_empty()) {
            i += 1;
        }
        let mut more = &lines[start..i];
        // Trailing blank lines belong to nothing.
        while more.last().is_some_and(|l| l.trim().is_empty()) {
            more = &more[..more.len() - 1];
        }
        let value = value(key, rest, more, number)?;
        fields.push((key.to_string(), value));
    }
    Ok(fields)
}

fn is_blank_or_comment(line: &str) -> bool {
    let t = line.trim_start();
    t.is_empty() || t.starts_with('#')
}

/// `key` and what follows its `:`, for a line `key: …` or `key:`.
fn split_key(line: &str) -> Option<(&str, &str)> {
    let colon = line.find(':')?;
    let key = &line[..colon];
    let rest = &line[colon + 1..];
    let key_ok = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    (key_ok && (rest.is_empty() || rest.starts_with([' ', '\t']))).then_some((key, rest))
}

/// Refuses a token YAML would read as an anchor, an alias or a tag.
fn refuse_node_properties(s: &str, key: &str) -> Result<(), String> {
    match s.chars().next() {
        Some('&' | '*') => Err(format!(
            "`{key}` uses a YAML anchor or alias (`&`, `*`), which cubby does not expand; \
             write the value out"
        )),
        Some('!') => Err(format!(
            "`{key}` uses a YAML tag (`!`), which is not accepted; write a plain value"
        )),
        Some('@' | '`') => Err(format!(
            "`{key}` starts with a character YAML reserves (`@`, `` ` ``); quote the value"
        )),
        _ => Ok(()),
    }
}

/// Anchors, aliases and tags anywhere a nested block or a flow collection
/// could start a node: at its start, after `- `, `: `, `[`, `{` or `,`.
fn refuse_in_raw(raw: &str, key: &str) -> Result<(), String> {
    for line in raw.lines() {
        let t = line.trim_start();
        let t = t.strip_prefix("- ").unwrap_or(t).trim_start();
        refuse_node_properties(t, key)?;
        let bytes = t.as_bytes();
        for (at, &b) in bytes.iter().enumerate() {
            let starts_node = matches!(b, b'[' | b'{' | b',')
                || (b == b':' && bytes.get(at + 1).is_some_and(|n| *n == b' '))
                || (b == b'-' && at == 0);
            if starts_node {
                refuse_node_properties(t[at + 1..].trim_start(), key)?;
            }
        }
    }
    Ok(())
}

fn value(key: &str, rest: &str, more: &[&str], number: usize) -> Result<Value, String> {
    let first = strip_comment(rest.trim());
    if first.is_empty() {
        // A nested block (map or list) or nothing.
        let raw = dedent(more);
        refuse_in_raw(&raw, key)?;
        return Ok(if raw.is_empty() {
            Value::Text(String::new())
        } else {
            Value::Raw(raw)
        });
    }
    refuse_node_properties(first, key)?;
    match first.as_bytes()[0] {
        b'|' | b'>' => block_scalar(key, first, more, number).map(Value::Text),
        b'"' | b'\'' => {
            if !more.iter().all(|l| is_blank_or_comment(l)) {
                return Err(format!(
                    "`{key}` (line {number}): a quoted value must end on its own line"
                ));
            }
            quoted(key, rest.trim(), number).map(Value::Text)
        }
        b'[' | b'{' => {
            let mut raw = first.to_string();
            for l in more {
                raw.push('\n');
                raw.push_str(l.trim());
            }
            refuse_in_raw(&raw, key)?;
            Ok(Value::Raw(raw))
        }
        _ => {
            // A plain scalar, maybe continued on indented lines.
            let mut text = first.to_string();
            for l in more {
                let t = l.trim();
                if t.is_empty() {
                    text.push('\n');
                } else if !t.starts_with('#') {
                    if !text.ends_with('\n') {
                        text.push(' ');
                    }
                    text.push_str(strip_comment(t));
                }
            }
            Ok(Value::Text(text))
        }
    }
}

/// A plain scalar's text without a trailing ` # comment`.
fn strip_comment(s: &str) -> &str {
    let bytes = s.as_bytes();
    for (at, &b) in bytes.iter().enumerate() {
        if b == b'#' && (at == 0 || matches!(bytes[at - 1], b' ' | b'\t')) {
            return s[..at].trim_end();
        }
    }
    s
}

/// The lines of a nested block without their common indentation.
fn dedent(lines: &[&str]) -> String {
    let indent = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let mut out = String::new();
    for (n, l) in lines.iter().enumerate() {
        if n > 0 {
            out.push('\n');
        }
        out.push_str(l.get(indent..).unwrap_or("").trim_end());
    }
    out
}

/// A literal (`|`) or folded (`>`) block scalar; `header` is the
/// indicator line (`|`, `>-`, `|+`, `>2`).
fn block_scalar(key: &str, header: &str, more: &[&str], number: usize) -> Result<String, String> {
    let literal = header.starts_with('|');
    let mut chomp = ' ';
    let mut explicit_indent = None;
    for c in header[1..].chars() {
        match c {
            '-' | '+' if chomp == ' ' => chomp = c,
            '1'..='9' if explicit_indent.is_none() => {
                explicit_indent = Some(c as usize - '0' as usize);
            }
            _ => {
                return Err(format!(
                    "`{key}` (line {number}): `{header}` is not a block scalar header"
                ));
            }
        }
    }
    let indent = explicit_indent.unwrap_or_else(|| {
        more.iter()
            .find(|l| !l.trim().is_empty())
            .map_or(0, |l| l.len() - l.trim_start_matches(' ').len())
    });
    let mut lines: Vec<&str> = Vec::with_capacity(more.len());
    for l in more {
        if l.trim().is_empty() {
            lines.push("");
        } else if l.len() - l.trim_start_matches(' ').len() < indent {
            return Err(format!(
                "`{key}` (line {number}): a line of the block is indented less than its first"
            ));
        } else {
            lines.push(&l[indent..]);
        }
    }
    let mut text = String::new();
    if literal {
        for l in &lines {
            text.push_str(l);
            text.push('\n');
        }
    } else {
        // Folding: a line break between two lines of text becomes a space;
        // blank lines stay line breaks; more-indented lines keep theirs.
        let mut previous_text = false;
        for l in &lines {
            if l.is_empty() {
                text.push('\n');
                previous_text = false;
            } else if l.starts_with([' ', '\t']) {
                if previous_text {
                    text.push('\n');
                }
                text.push_str(l);
                text.push('\n');
                previous_text = false;
            } else {
                if previous_text {
                    text.push(' ');
                }
                text.push_str(l);
                previous_text = true;
            }
        }
        if previous_text {
            text.push('\n');
        }
    }
    match chomp {
        '+' => {}
        '-' => text.truncate(text.trim_end_matches('\n').len()),
        _ => {
            text.truncate(text.trim_end_matches('\n').len());
            if !text.is_empty() {
                text.push('\n');
            }
        }
    }
    Ok(text)
}

/// A quoted scalar on one line, with what follows it (only a comment may).
fn quoted(key: &str, s: &str, number: usize) -> Result<String, String> {
    let quote = s.as_bytes()[0] as char;
    let mut out = String::new();
    let mut chars = s[1..].char_indices();
    let bad = |what: &str| format!("`{key}` (line {number}): {what}");
    loop {
        let Some((at, c)) = chars.next() else {
            return Err(bad("the quoted value is not closed on its line"));
        };
        if c == quote {
            if quote == '\'' && s[1 + at + 1..].starts_with('\'') {
                out.push('\'');
                chars.next();
                continue;
            }
            let after = s[1 + at + 1..].trim();
            if !(after.is_empty() || after.starts_with('#')) {
                return Err(bad("text follows the closing quote"));
            }
            return Ok(out);
        }
        if c == '\\' && quote == '"' {
            let Some((_, e)) = chars.next() else {
                return Err(bad("the quoted value ends in a lone `\\`"));
            };
            let simple = match e {
                '0' => Some('\0'),
                'a' => Some('\u{7}'),
                'b' => Some('\u{8}'),
                't' | '\t' => Some('\t'),
                'n' => Some('\n'),
                'v' => Some('\u{b}'),
                'f' => Some('\u{c}'),
                'r' => Some('\r'),
                'e' => Some('\u{1b}'),
                ' ' => Some(' '),
                '"' => Some('"'),
                '/' => Some('/'),
                '\\' => Some('\\'),
                'N' => Some('\u{85}'),
                '_' => Some('\u{a0}'),
                'L' => Some('\u{2028}'),
                'P' => Some('\u{2029}'),
                _ => None,
            };
            if let Some(c) = simple {
                out.push(c);
                continue;
            }
            let digits = match e {
                'x' => 2,
                'u' => 4,
                'U' => 8,
                _ => {
                    let mut msg = String::new();
                    let _ = write!(msg, "`\\{e}` is not a YAML escape");
                    return Err(bad(&msg));
                }
            };
            let mut code = 0u32;
            for _ in 0..digits {
                let d = chars
                    .next()
                    .and_then(|(_, d)| d.to_digit(16))
                    .ok_or_else(|| bad("a `\\x`/`\\u` escape needs hex digits"))?;
                code = code * 16 + d;
            }
            let c = char::from_u32(code).ok_or_else(|| bad("an escape names no character"))?;
            out.push(c);
            continue;
        }
        out.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(fields: &Fields, key: &str) -> String {
        fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_text().to_string())
            .unwrap()
    }

    #[test]
    fn reads_the_forms_skills_use() {
        let f = parse(
            "name: pdf-tools # the name\n\
             description: Fill PDF forms,\n  merge and split them.\n\
             license: 'Apache-2.0 ''with'' terms'\n\
             compatibility: \"needs \\\"qpdf\\\" \\u00e9\"\n\
             allowed-tools: [Bash, Read]\n\
             metadata:\n  author: someone\n  version: \"1.0\"\n\
             notes: |\n  line one\n  line two\n\
             folded: >-\n  one\n  two\n\n  three\n",
        )
        .unwrap();
        assert_eq!(text(&f, "name"), "pdf-tools");
        assert_eq!(
            text(&f, "description"),
            "Fill PDF forms, merge and split them."
        );
        assert_eq!(text(&f, "license"), "Apache-2.0 'with' terms");
        assert_eq!(text(&f, "compatibility"), "needs \"qpdf\" é");
        assert_eq!(text(&f, "allowed-tools"), "[Bash, Read]");
        assert_eq!(text(&f, "metadata"), "author: someone\nversion: \"1.0\"");
        assert_eq!(text(&f, "notes"), "line one\nline two\n");
        assert_eq!(text(&f, "folded"), "one two\nthree");
    }

    #[test]
    fn refuses_what_yaml_would_expand_or_misread() {
        for (doc, says) in [
            ("a: &x [1]\nb: *x\n", "anchor or alias"),
            ("a: [*x, *x]\n", "anchor or alias"),
            ("a:\n  - &x lol\n  - *x\n", "anchor or alias"),
            ("a:\n  k: *x\n", "anchor or alias"),
            ("a: !!str x\n", "tag"),
            ("%YAML 1.2\na: b\n", "directive"),
            ("name: a\nname: b\n", "twice"),
            ("  name: a\n", "indented"),
            ("just text\n", "not `key: value`"),
            ("a: 'open\n", "not closed"),
            ("a: \"x\" y\n", "follows the closing quote"),
            ("a: \"\\q\"\n", "not a YAML escape"),
        ] {
            let err = parse(doc).unwrap_err();
            assert!(err.contains(says), "{doc:?}: {err}");
        }
    }
}
