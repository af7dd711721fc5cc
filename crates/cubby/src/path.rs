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

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, ErrorKind, Result, truncate_for_message};

/// Longest path, in bytes, a model may pass (Linux `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest single name, in bytes (Linux `NAME_MAX`).
pub const MAX_NAME_BYTES: usize = 255;

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
                truncate_for_message(&input.replace('\0', "\\0"))
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
                    truncate_for_message(input)
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
                truncate_for_message(input),
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
                        return Err(Error::path_escape(input));
                    }
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(Error::path_escape(input));
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

    /// The path as the model sees it: `.` for the root, lossy UTF-8 otherwise.
    pub fn display(&self) -> String {
        if self.is_root() {
            ".".to_string()
        } else {
            self.rel.to_string_lossy().into_owned()
        }
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn refuses_nul_and_long_input() {
        assert_eq!(kind("a\0b"), ErrorKind::InvalidInput);
        assert_eq!(kind(&"a".repeat(256)), ErrorKind::InvalidInput);
        assert_eq!(kind(&"a/".repeat(2100)), ErrorKind::InvalidInput);
        assert_eq!(ok(&"a".repeat(255)).len(), 255);
    }
}
