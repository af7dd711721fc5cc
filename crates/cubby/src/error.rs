//! The one error type of the crate.
//!
//! Every failure a tool can report is an [`Error`] with an [`ErrorKind`] taken
//! from the contract (SPEC §2). Its `Display` form is exactly what the model
//! reads: `ERROR <kind>: <message>`, and the message says what to do next.
//! A command that ran and failed is *not* an error: it is a normal result with
//! a `FAILED` verdict.

use std::fmt;

/// The kind of an [`Error`]; the variants are the error kinds of SPEC §2.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The arguments do not have the shape the tool expects.
    InvalidInput,
    /// The path names nothing.
    NotFound,
    /// The path leaves the workspace root or passes through a symbolic link.
    PathEscape,
    /// A file was expected and the path names a directory.
    IsDirectory,
    /// The file is binary where text is required.
    Binary,
    /// The file or argument is larger than the tool accepts.
    TooLarge,
    /// An existing file was about to be overwritten without being read first.
    NotRead,
    /// The file changed since it was last read.
    Stale,
    /// `edit_file` found no occurrence of `find`.
    NoMatch,
    /// `edit_file` found more than one occurrence of `find`.
    AmbiguousMatch,
    /// The policy refuses the call.
    Denied,
    /// The sandbox or provider cannot do this.
    Unsupported,
    /// The operation ran out of time.
    Timeout,
    /// A budget or limit was exhausted.
    Limit,
    /// A network failure or a refused address.
    Network,
    /// A fault of cubby itself.
    Internal,
}

impl ErrorKind {
    /// Every kind, in the order SPEC §2 lists them.
    pub const ALL: [ErrorKind; 16] = [
        ErrorKind::InvalidInput,
        ErrorKind::NotFound,
        ErrorKind::PathEscape,
        ErrorKind::IsDirectory,
        ErrorKind::Binary,
        ErrorKind::TooLarge,
        ErrorKind::NotRead,
        ErrorKind::Stale,
        ErrorKind::NoMatch,
        ErrorKind::AmbiguousMatch,
        ErrorKind::Denied,
        ErrorKind::Unsupported,
        ErrorKind::Timeout,
        ErrorKind::Limit,
        ErrorKind::Network,
        ErrorKind::Internal,
    ];

    /// The snake_case name the model sees, e.g. `path_escape`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidInput => "invalid_input",
            ErrorKind::NotFound => "not_found",
            ErrorKind::PathEscape => "path_escape",
            ErrorKind::IsDirectory => "is_directory",
            ErrorKind::Binary => "binary",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::NotRead => "not_read",
            ErrorKind::Stale => "stale",
            ErrorKind::NoMatch => "no_match",
            ErrorKind::AmbiguousMatch => "ambiguous_match",
            ErrorKind::Denied => "denied",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Limit => "limit",
            ErrorKind::Network => "network",
            ErrorKind::Internal => "internal",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failure a tool reports to the model.
///
/// `Display` renders `ERROR <kind>: <message>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    /// An error of `kind` whose `message` tells the model what to do next.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
        }
    }

    /// The kind of this error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, without the `ERROR <kind>:` prefix.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn invalid_input(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidInput, message)
    }

    pub(crate) fn denied(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Denied, message)
    }

    pub(crate) fn internal(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Internal, message)
    }

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

/// Most characters of an input echoed in a message.
pub(crate) const MAX_ECHO_CHARS: usize = 200;

/// Keeps messages short when the input was huge.
///
/// The input is redacted first with the current call's redactor
/// ([`crate::output::CallScope`]): the cut never shows a prefix of a secret
/// that the redaction of the whole message could no longer recognise.
pub(crate) fn truncate_for_message(s: &str) -> String {
    let s = crate::output::redact_for_cut(s);
    match s.char_indices().nth(MAX_ECHO_CHARS) {
        None => s.into_owned(),
        Some((at, _)) => format!("{}…", &s[..at]),
    }
}

/// The errno values this module distinguishes (Linux numbering).
mod libc_errno {
    pub const ENOTDIR: i32 = rustix::io::Errno::NOTDIR.raw_os_error();
    pub const EISDIR: i32 = rustix::io::Errno::ISDIR.raw_os_error();
    pub const ELOOP: i32 = rustix::io::Errno::LOOP.raw_os_error();
    pub const EXDEV: i32 = rustix::io::Errno::XDEV.raw_os_error();
    pub const ENAMETOOLONG: i32 = rustix::io::Errno::NAMETOOLONG.raw_os_error();
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ERROR {}: {}", self.kind, self.message)
    }
}

impl std::error::Error for Error {}

/// The result type of the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_the_model_facing_form() {
        let err = Error::new(ErrorKind::NotRead, "read it first");
        assert_eq!(err.to_string(), "ERROR not_read: read it first");
    }

    #[test]
    fn every_kind_has_a_distinct_snake_case_name() {
        let names: std::collections::HashSet<_> =
            ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), ErrorKind::ALL.len());
        assert!(
            names
                .iter()
                .all(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        );
    }

    #[test]
    fn io_errors_map_to_contract_kinds() {
        let eloop = std::io::Error::from_raw_os_error(libc_errno::ELOOP);
        assert_eq!(Error::from_io(&eloop, "a").kind(), ErrorKind::PathEscape);
        let exdev = std::io::Error::from_raw_os_error(libc_errno::EXDEV);
        assert_eq!(Error::from_io(&exdev, "a").kind(), ErrorKind::PathEscape);
        let enoent = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(Error::from_io(&enoent, "a").kind(), ErrorKind::NotFound);
    }
}
