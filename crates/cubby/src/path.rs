//! [`WorkspacePath`]: the one place a model-supplied path becomes a path.
//!
//! Parsing here is lexical and provider-independent: it refuses what can be
//! refused by looking at the string (absolute paths, NUL bytes, `..` that
//! climbs out of the root, over-long names and paths) and produces a
//! normalised relative path. It does **not** make the path safe to open on its
//! own: the `local` provider opens every `WorkspacePath` with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)` from
//! a directory fd of the root, so the kernel enforces confinement at the
//! moment of use, whatever happens to the tree in between.
//!
//! It is also where a path becomes text: [`escape_name`] is the one function
//! every listing and every message that names a path goes through, so a
//! name cannot forge lines or reach a terminal as an escape sequence.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};
use crate::output::truncate_for_message;

/// Longest path, in bytes, a model may pass (Linux `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest single name, in bytes (Linux `NAME_MAX`).
pub const MAX_NAME_BYTES: usize = 255;

/// True for a character a name is quoted for: a control character (C0,
/// DEL, C1), a Unicode line or paragraph separator (a line break to some
/// clients), a bidirectional-text control (which reorders what a reader
/// sees), the quote and the backslash (so that a quoted form is never
/// ambiguous).
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '"' | '\\'
                | '\u{61c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// A name or path as the model sees it (SPEC §2, "names cannot forge
/// lines").
///
/// A name of plain characters is shown as it is. One holding a control
/// character (a newline, ESC, …), a bidirectional-text control, invalid
/// UTF-8, a `"` or a `\` is shown inside double quotes, escaped as git
/// quotes paths: `\n`, `\r`, `\t`, `\"`, `\\`, `\xHH` for the other
/// ASCII controls and for each byte of invalid UTF-8, `\u{HHHH}` for C1 and
/// bidirectional controls. `x<LF>D forged.rs` is shown `"x\nD forged.rs"`:
/// one line, no escape byte.
///
/// The name is redacted with the current call's redactor
/// ([`crate::output::CallScope`]) before it is escaped, so that escaping
/// cannot hide a secret (one holding a `"`, say) from the redaction.
pub fn escape_name(bytes: &[u8]) -> Cow<'_, str> {
    escape_name_unless(bytes, |_| false)
}

/// A name as a `search` line shows it (`path:line: text`, and
/// `path-line- text` for context lines): [`escape_name`], and also quoted
/// when the name holds a `:`, or — with `context` — a `-` followed by
/// digits and another `-`. A name shown unquoted then ends at the first
/// `:` of a match line (the first `-<digits>-` of a context line), so a
/// file called `src/main.rs:1: fn x()` cannot pass for a hit in
/// `src/main.rs`.
pub fn escape_name_for_hits(bytes: &[u8], context: bool) -> Cow<'_, str> {
    escape_name_unless(bytes, |plain| {
        plain.contains(':') || (context && has_dash_number_dash(plain))
    })
}

/// True when `s` holds `-<one or more ASCII digits>-`.
fn has_dash_number_dash(s: &str) -> bool {
    let b = s.as_bytes();
    b.iter().enumerate().any(|(i, &c)| {
        if c != b'-' {
            return false;
        }
        let digits = b[i + 1..].iter().take_while(|d| d.is_ascii_digit()).count();
        digits > 0 && b.get(i + 1 + digits) == Some(&b'-')
    })
}

/// [`escape_name`], quoting also a plain (redacted) name for which
/// `ambiguous` is true.
fn escape_name_unless(bytes: &[u8], ambiguous: impl Fn(&str) -> bool) -> Cow<'_, str> {
    let bytes = crate::output::redact_bytes_for_cut(bytes);
    if let Ok(plain) = std::str::from_utf8(&bytes)
        && !plain.chars().any(needs_escape)
        && !ambiguous(plain)
    {
        return match bytes {
            Cow::Borrowed(b) => Cow::Borrowed(std::str::from_utf8(b).unwrap_or_default()),
            Cow::Owned(_) => Cow::Owned(plain.to_string()),
        };
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    out.push('"');
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c => push_escaped(&mut out, c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out.push('"');
    Cow::Owned(out)
}

/// Pushes `c`, escaped as [`escape_name`] escapes it when it is a control
/// or bidirectional character (`\n`, `\x1b`, `\u{202e}`).
fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if (c as u32) < 0x80 && c.is_control() => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c if needs_escape(c) && c != '"' && c != '\\' => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
        c => out.push(c),
    }
}

/// `text` (a message built by a library from the model's input, such as
/// serde's `unknown field` naming a key) with every control and
/// bidirectional character escaped as in [`escape_name`], quotes and
/// backslashes left as they are: one line, whatever the input held.
/// Redacted with the current call's redactor first, as [`escape_name`] is.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    let text = crate::output::redact_for_cut(text);
    if !text
        .chars()
        .any(|c| needs_escape(c) && c != '"' && c != '\\')
    {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        push_escaped(&mut out, c);
    }
    Cow::Owned(out)
}

/// A normalised path relative to the workspace root.
///
/// It never starts with `/`, never contains `.` or `..` components and never
/// contains a NUL byte. The empty path is the root itself.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct WorkspacePath {
    rel: PathBuf,
}

impl WorkspacePath {
    /// The workspace root itself.
    pub fn root() -> WorkspacePath {
        WorkspacePath::default()
    }

    /// Parses a path a model passed.
    ///
    /// `..` is resolved lexically; a path that climbs above the root is a
    /// `path_escape`, as is any absolute path (even one inside the root).
    /// `""` and `"."` name the root.
    ///
    /// # Errors
    ///
    /// `invalid_input` for NUL bytes and over-long paths or names,
    /// `path_escape` for absolute paths and climbs out of the root.
    pub fn parse(input: &str) -> Result<WorkspacePath> {
        if input.contains('\0') {
            return Err(Error::invalid_input(format!(
                "path `{}` contains a NUL byte; pass a path without control characters",
                truncate_for_message(&escape_name(input.as_bytes()))
            )));
        }
        if input.len() > MAX_PATH_BYTES {
            return Err(Error::invalid_input(format!(
                "path is {} bytes long, the limit is {MAX_PATH_BYTES}; pass a shorter path",
                input.len()
            )));
        }
        let path = Path::new(input);
        if path.has_root() {
            return Err(Error::new(
                ErrorKind::PathEscape,
                format!(
                    "`{}` is an absolute path; pass a path relative to the workspace root \
                     (for example `src/main.rs`, or `.` for the root itself)",
                    truncate_for_message(&escape_name(input.as_bytes()))
                ),
            ));
        }
        // Shape first (SPEC §2: invalid_input before path_escape).
        if let Some(name) = path
            .components()
            .map(Component::as_os_str)
            .find(|name| name.len() > MAX_NAME_BYTES)
        {
            return Err(Error::invalid_input(format!(
                "a name in `{}` is {} bytes long, the limit is {MAX_NAME_BYTES}; \
                 use shorter names",
                truncate_for_message(&escape_name(input.as_bytes())),
                name.len()
            )));
        }
        let mut parts: Vec<&OsStr> = Vec::new();
        for component in path.components() {
            match component {
                Component::Normal(name) => parts.push(name),
                Component::CurDir => {}
                Component::ParentDir => {
                    if parts.pop().is_none() {
                        return Err(Error::path_escape(&escape_name(input.as_bytes())));
                    }
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(Error::path_escape(&escape_name(input.as_bytes())));
                }
            }
        }
        Ok(WorkspacePath {
            rel: parts.iter().collect(),
        })
    }

    /// This path with one more name appended (a directory entry).
    ///
    /// `name` must be a single component, as read from a directory.
    pub fn join_name(&self, name: &OsStr) -> WorkspacePath {
        // One allocation of the final size (`Path::join` grows it twice).
        let mut rel = PathBuf::with_capacity(self.rel.as_os_str().len() + 1 + name.len());
        rel.push(&self.rel);
        rel.push(name);
        WorkspacePath { rel }
    }

    /// The relative path, empty for the root.
    pub fn as_path(&self) -> &Path {
        &self.rel
    }

    /// True for the root itself.
    pub fn is_root(&self) -> bool {
        self.rel.as_os_str().is_empty()
    }

    /// The last component, if any.
    pub fn file_name(&self) -> Option<&OsStr> {
        self.rel.file_name()
    }

    /// The parent directory; the root is its own parent.
    pub fn parent(&self) -> WorkspacePath {
        WorkspacePath {
            rel: self.rel.parent().map(Path::to_path_buf).unwrap_or_default(),
        }
    }

    /// The components as byte strings.
    pub fn components(&self) -> impl Iterator<Item = &OsStr> {
        self.rel.components().map(Component::as_os_str)
    }

    /// True when `self` is `other` or lies beneath it.
    pub fn starts_with(&self, other: &WorkspacePath) -> bool {
        self.rel.starts_with(&other.rel)
    }

    /// The path as the model sees it: `.` for the root, otherwise as
    /// [`escape_name`] shows it (quoted and escaped when it holds a control
    /// character, invalid UTF-8, `"` or `\\`).
    pub fn display(&self) -> String {
        if self.is_root() {
            ".".to_string()
        } else {
            escape_name(self.as_bytes()).into_owned()
        }
    }

    /// The path as a `search` line shows it: [`escape_name_for_hits`].
    pub fn display_for_hits(&self, context: bool) -> String {
        escape_name_for_hits(self.as_bytes(), context).into_owned()
    }

    /// The path of a directory as a listing shows it: [`display`](Self::display)
    /// with a `/` at the end (inside the quotes of a quoted one).
    pub fn display_dir(&self) -> String {
        let mut bytes = self.as_bytes().to_vec();
        bytes.push(b'/');
        escape_name(&bytes).into_owned()
    }

    /// The path for the kernel: `.` for the root.
    pub(crate) fn for_open(&self) -> &OsStr {
        if self.is_root() {
            OsStr::new(".")
        } else {
            self.rel.as_os_str()
        }
    }

    /// Raw bytes of the relative path.
    pub fn as_bytes(&self) -> &[u8] {
        self.rel.as_os_str().as_bytes()
    }

    /// The owned relative path.
    pub fn into_os_string(self) -> OsString {
        self.rel.into_os_string()
    }
}

impl fmt::Display for WorkspacePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display())
    }
}

/// The errors of working on a path (here, above the call scope's redactor
/// that their messages' cuts use).
impl Error {
    /// Maps an I/O error met while working on `path` to the kind the model
    /// should see.
    pub(crate) fn from_io(err: &std::io::Error, path: &str) -> Error {
        use std::io::ErrorKind as Io;
        let shown = if path.is_empty() { "." } else { path };
        match err.raw_os_error() {
            // ELOOP: a symbolic link on the way; EXDEV: RESOLVE_BENEATH refused a climb out.
            Some(libc_errno::ELOOP) | Some(libc_errno::EXDEV) => Error::path_escape(shown),
            Some(libc_errno::ENOTDIR) => Error::new(
                ErrorKind::NotFound,
                format!("`{shown}` does not exist: a component of it is not a directory"),
            ),
            Some(libc_errno::EISDIR) => Error::new(
                ErrorKind::IsDirectory,
                format!("`{shown}` is a directory; use list_files to see what it holds"),
            ),
            Some(libc_errno::ENAMETOOLONG) => Error::invalid_input(format!(
                "path `{}` is too long; use a shorter path",
                truncate_for_message(shown)
            )),
            _ => match err.kind() {
                Io::NotFound => Error::new(
                    ErrorKind::NotFound,
                    format!(
                        "`{shown}` does not exist; use list_files or glob to find the right path"
                    ),
                ),
                Io::PermissionDenied => {
                    Error::denied(format!("the operating system refused access to `{shown}`"))
                }
                Io::StorageFull | Io::QuotaExceeded => Error::new(
                    ErrorKind::Limit,
                    format!("no space left to write `{shown}`"),
                ),
                Io::FileTooLarge => Error::new(
                    ErrorKind::TooLarge,
                    format!("`{shown}` is larger than the file system allows"),
                ),
                _ => Error::internal(format!("I/O error on `{shown}`: {err}")),
            },
        }
    }

    /// The error for a path that leaves the root or passes through a link.
    pub(crate) fn path_escape(path: &str) -> Error {
        Error::new(
            ErrorKind::PathEscape,
            format!(
                "`{}` is outside the workspace or passes through a symbolic link; \
                 pass a path relative to the workspace root, without `..` that climbs out \
                 and without symbolic links",
                truncate_for_message(path)
            ),
        )
    }
}

/// The errno values `Error::from_io` distinguishes (Linux numbering).
mod libc_errno {
    pub const ENOTDIR: i32 = rustix::io::Errno::NOTDIR.raw_os_error();
    pub const EISDIR: i32 = rustix::io::Errno::ISDIR.raw_os_error();
    pub const ELOOP: i32 = rustix::io::Errno::LOOP.raw_os_error();
    pub const EXDEV: i32 = rustix::io::Errno::XDEV.raw_os_error();
    pub const ENAMETOOLONG: i32 = rustix::io::Errno::NAMETOOLONG.raw_os_error();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_map_to_contract_kinds() {
        let eloop = std::io::Error::from_raw_os_error(libc_errno::ELOOP);
        assert_eq!(Error::from_io(&eloop, "a").kind(), ErrorKind::PathEscape);
        let exdev = std::io::Error::from_raw_os_error(libc_errno::EXDEV);
        assert_eq!(Error::from_io(&exdev, "a").kind(), ErrorKind::PathEscape);
        let enoent = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(Error::from_io(&enoent, "a").kind(), ErrorKind::NotFound);
    }

    fn ok(s: &str) -> String {
        WorkspacePath::parse(s)
            .map(|p| p.display())
            .unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn kind(s: &str) -> ErrorKind {
        match WorkspacePath::parse(s) {
            Ok(p) => panic!("{s} parsed as {p}"),
            Err(e) => e.kind(),
        }
    }

    #[test]
    fn normalises_relative_paths() {
        assert_eq!(ok(""), ".");
        assert_eq!(ok("."), ".");
        assert_eq!(ok("./a//b/./c"), "a/b/c");
        assert_eq!(ok("a/b/../c"), "a/c");
        assert_eq!(ok("a/.."), ".");
        assert_eq!(ok("a/"), "a");
        assert_eq!(ok("..."), "...");
        assert_eq!(ok("a. /b "), "a. /b ");
    }

    #[test]
    fn refuses_climbs_and_absolute_paths() {
        for p in [
            "..",
            "../x",
            "a/../../x",
            "a/b/../../..",
            "/etc/passwd",
            "/",
            "//x",
        ] {
            assert_eq!(kind(p), ErrorKind::PathEscape, "{p}");
        }
    }

    #[test]
    fn names_that_could_forge_lines_are_quoted_and_escaped() {
        let shown = |b: &[u8]| escape_name(b).into_owned();
        assert_eq!(shown(b"src/main.rs"), "src/main.rs");
        assert_eq!(shown("é ü/ß.txt".as_bytes()), "é ü/ß.txt");
        assert_eq!(shown(b"x\nD forged.rs"), "\"x\\nD forged.rs\"");
        assert_eq!(shown(b"a\rb\tc"), "\"a\\rb\\tc\"");
        assert_eq!(shown(b"t\x1b]0;x\x07"), "\"t\\x1b]0;x\\x07\"");
        assert_eq!(shown(b"bad\xff"), "\"bad\\xff\"");
        assert_eq!(shown("c1\u{9b}31m".as_bytes()), "\"c1\\u{9b}31m\"");
        assert_eq!(
            shown("rtl\u{202e}txt.exe".as_bytes()),
            "\"rtl\\u{202e}txt.exe\""
        );
        // Quotes and backslashes are escaped, so the quoted form is unambiguous.
        assert_eq!(shown(b"\"x\\nD\""), "\"\\\"x\\\\nD\\\"\"");
        for out in [shown(b"x\nD"), shown(b"\x1b[2J"), shown(b"\xff\xfe")] {
            assert!(!out.chars().any(char::is_control), "{out:?}");
        }
        let p = WorkspacePath::root().join_name(OsStr::from_bytes(b"d\ne"));
        assert_eq!(p.display(), "\"d\\ne\"");
        assert_eq!(p.display_dir(), "\"d\\ne/\"");
    }

    #[test]
    fn names_that_could_pass_for_a_hit_are_quoted_in_search_lines() {
        let hit = |b: &[u8], context| escape_name_for_hits(b, context).into_owned();
        assert_eq!(hit(b"src/main.rs", true), "src/main.rs");
        assert_eq!(hit(b"src/main.rs:1: x", false), "\"src/main.rs:1: x\"");
        assert_eq!(hit(b"a:b", true), "\"a:b\"");
        // `-<digits>-` is a separator only where context lines are shown.
        assert_eq!(hit(b"2024-01-15-post.md", false), "2024-01-15-post.md");
        assert_eq!(hit(b"2024-01-15-post.md", true), "\"2024-01-15-post.md\"");
        assert_eq!(hit(b"my-file-v2.rs", true), "my-file-v2.rs");
        assert_eq!(hit(b"a-1", true), "a-1");
        assert_eq!(hit(b"x\nD", false), "\"x\\nD\"");
        // Listings are not changed.
        assert_eq!(escape_name(b"a:b"), "a:b");
    }

    #[test]
    fn a_secret_in_a_name_is_redacted_before_it_is_escaped() {
        let r = crate::output::Redactor::new(&[crate::output::Secret {
            name: "PW".into(),
            value: "pa\"ss\\wd".into(),
        }])
        .unwrap();
        let _scope = crate::output::CallScope::enter(&r);
        assert_eq!(escape_name(b"dir/pa\"ss\\wd.txt"), "dir/[REDACTED:PW].txt");
    }

    #[test]
    fn refuses_nul_and_long_input() {
        assert_eq!(kind("a\0b"), ErrorKind::InvalidInput);
        assert_eq!(kind(&"a".repeat(256)), ErrorKind::InvalidInput);
        assert_eq!(kind(&"a/".repeat(2100)), ErrorKind::InvalidInput);
        assert_eq!(ok(&"a".repeat(255)).len(), 255);
    }
}
