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
}
