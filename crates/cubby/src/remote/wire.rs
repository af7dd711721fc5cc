//! The sandbox host API's wire format (`/v1/…`), shared by the serving side
//! (`host/`) and the `remote` provider (its client): the JSON bodies, the
//! framing of a command's streamed output, and how paths, names and
//! environment values (bytes, not always UTF-8) travel.
//!
//! Bytes that may not be UTF-8 (workspace paths, directory entry names,
//! environment variables) travel as unpadded URL-safe base64. Errors are
//! `{"kind": "<SPEC §2 kind>", "message": "…"}` with an HTTP status.
//!
//! A command's output is a sequence of frames: one tag byte, a big-endian
//! `u32` length, then that many bytes. [`FRAME_OUTPUT`] carries output,
//! [`FRAME_BEAT`] (empty) is sent after [`BEAT`] without output so that
//! either side notices a dead peer, [`FRAME_EXIT`] carries the [`WireStatus`]
//! as JSON and ends the stream, [`FRAME_ERROR`] a [`WireError`].

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::path::WorkspacePath;
use crate::sandbox::{DirEntry, EntryKind, ExitStatus, Metadata};

/// The API's version prefix.
pub const PREFIX: &str = "/v1";
/// Where a bindable host is bound (after [`PREFIX`]; `serve --host-bind`).
pub const BIND_PATH: &str = "/bind";

/// The answer to a bind: `cubby-claim-<64 hex digits>`.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Bound {
    /// The token every request must carry from now on.
    pub token: String,
}
/// Header of an exec answer: the command's number on the serving side.
pub const COMMAND_HEADER: &str = "x-cubby-command";
/// Header of an exec answer: the id the serving side shows for it (a pid).
pub const PID_HEADER: &str = "x-cubby-pid";
/// Header of a file answer: the file's [`WireMetadata`] as JSON.
pub const METADATA_HEADER: &str = "x-cubby-metadata";
/// Media type of a framed output stream.
pub const FRAMES_TYPE: &str = "application/x-cubby-frames";

/// Frame tag: command output.
pub const FRAME_OUTPUT: u8 = b'o';
/// Frame tag: a heartbeat (no payload).
pub const FRAME_BEAT: u8 = b'h';
/// Frame tag: the command's end, a [`WireStatus`] as JSON; the last frame.
pub const FRAME_EXIT: u8 = b'x';
/// Frame tag: an error after the start, a [`WireError`] as JSON.
pub const FRAME_ERROR: u8 = b'e';
/// Bytes of a frame's header (tag and length).
pub const FRAME_HEADER_BYTES: usize = 5;
/// Largest frame payload either side sends or accepts.
pub const MAX_FRAME_BYTES: usize = 256 * 1024;
/// A stream quiet for this long gets a heartbeat frame.
pub const BEAT: Duration = Duration::from_secs(2);

/// The body of `POST /v1/sandboxes`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRequest {
    /// An existing directory to serve as the workspace (absolute); only
    /// under the directory the server lets callers adopt
    /// (`serve --host-adopt DIR`). Default: a new, empty workspace.
    #[serde(default)]
    pub root: Option<String>,
}

/// Content types of a `POST /v1/sandboxes` body that is a tar to unpack
/// into the new workspace (the first: what the `remote` provider sends,
/// gzipped; the server tells gzip by its magic bytes).
pub const TAR_TYPES: [&str; 4] = [
    "application/gzip",
    "application/x-gzip",
    "application/x-tar",
    "application/tar",
];

/// Largest tar body of a create the `remote` provider sends: what a far
/// server reads of one request body (`host::http::MAX_BODY_BYTES`, checked
/// at compile time in `host/unpack.rs`).
pub const MAX_UPLOAD_BYTES: usize = 64 * 1024 * 1024;

/// The answer to `POST /v1/sandboxes`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Created {
    /// The sandbox's id (its path segment).
    pub id: String,
    /// The provider that holds it on the serving side.
    pub provider: String,
    /// Whether it runs commands.
    pub commands: bool,
    /// Where its commands see the workspace root (base64 bytes), when it
    /// runs commands.
    pub command_root: Option<String>,
    /// How its root is shown in verdict lines.
    pub shown_root: String,
    /// Seconds with no command and no request after which the serving side
    /// destroys it (`serve --host-idle`; absent: never): a caller that
    /// keeps it while idle itself sends a request well within it.
    #[serde(default)]
    pub idle_secs: Option<u64>,
}

/// The body of `POST /v1/sandboxes/{id}/exec`: an [`crate::sandbox::ExecSpec`].
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Working directory (base64 bytes of the workspace path).
    pub cwd: String,
    /// The command's whole environment (base64 name, base64 value).
    pub env: Vec<(String, String)>,
    /// Whether the command gets a stdin sink.
    pub stdin: bool,
    /// The run's output directory (base64 bytes of the workspace path).
    pub output_dir: Option<String>,
}

/// A file system object's facts.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WireMetadata {
    /// `file`, `dir`, `symlink` or `special`.
    pub kind: String,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// Change time or counter.
    pub ctime_ns: i64,
    /// Inode or unique id.
    pub ino: u64,
    /// Hard links.
    pub nlink: u64,
}

/// One directory entry.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WireEntry {
    /// The name (base64 bytes).
    pub name: String,
    /// `file`, `dir`, `symlink` or `special`.
    pub kind: String,
}

/// The answer to a directory listing.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Listing {
    /// The entries.
    pub entries: Vec<WireEntry>,
    /// Whether the listing stopped at its bound.
    pub more: bool,
}

/// One live command of a sandbox (`GET /v1/sandboxes/{id}/commands`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CommandInfo {
    /// Its number on the serving side.
    pub id: u64,
    /// The id shown for it (a pid).
    pub pid: u32,
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Seconds since it started.
    pub seconds: f64,
}

/// How a command ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireStatus {
    /// Exited with a code.
    Exited(i32),
    /// Killed by a signal.
    Signaled(i32),
    /// Its end is unknown (the reason).
    Lost(String),
}

/// An error as it travels.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WireError {
    /// The SPEC §2 kind (`not_found`, …).
    pub kind: String,
    /// The message.
    pub message: String,
}

impl From<&Error> for WireError {
    fn from(e: &Error) -> WireError {
        WireError {
            kind: e.kind().as_str().to_string(),
            message: e.message().to_string(),
        }
    }
}

impl WireError {
    /// Back into cubby's error (an unknown kind becomes `internal`).
    pub fn into_error(self) -> Error {
        let kind = ErrorKind::ALL
            .into_iter()
            .find(|k| k.as_str() == self.kind)
            .unwrap_or(ErrorKind::Internal);
        Error::new(kind, self.message)
    }
}

impl From<&ExitStatus> for WireStatus {
    fn from(s: &ExitStatus) -> WireStatus {
        match s {
            ExitStatus::Exited(c) => WireStatus::Exited(*c),
            ExitStatus::Signaled(s) => WireStatus::Signaled(*s),
            ExitStatus::Lost(r) => WireStatus::Lost(r.clone()),
        }
    }
}

impl From<WireStatus> for ExitStatus {
    fn from(s: WireStatus) -> ExitStatus {
        match s {
            WireStatus::Exited(c) => ExitStatus::Exited(c),
            WireStatus::Signaled(s) => ExitStatus::Signaled(s),
            WireStatus::Lost(r) => ExitStatus::Lost(r),
        }
    }
}

/// Bytes as they travel: unpadded URL-safe base64.
pub fn encode_bytes(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Bytes back from [`encode_bytes`].
///
/// # Errors
///
/// `invalid_input` naming `what` for text that is not such base64.
pub fn decode_bytes(text: &str, what: &str) -> Result<Vec<u8>> {
    URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|_| Error::invalid_input(format!("{what} is not unpadded URL-safe base64")))
}

/// A workspace path as it travels.
pub fn encode_path(path: &WorkspacePath) -> String {
    encode_bytes(path.as_bytes())
}

/// A workspace path back from [`encode_path`], checked as any path is:
/// relative, no `.`/`..` climbing out, no NUL.
///
/// # Errors
///
/// `invalid_input` for bad base64 or a bad path, `path_escape` for a path
/// out of the root.
pub fn decode_path(text: &str) -> Result<WorkspacePath> {
    let bytes = decode_bytes(text, "the path")?;
    let mut path = WorkspacePath::root();
    if bytes.is_empty() {
        return Ok(path);
    }
    if bytes.first() == Some(&b'/') {
        return Err(Error::path_escape(&crate::path::escape_name(&bytes)));
    }
    for name in bytes.split(|b| *b == b'/') {
        match name {
            b"" | b"." => {}
            b".." => return Err(Error::path_escape(&crate::path::escape_name(&bytes))),
            name if name.contains(&0) => {
                return Err(Error::invalid_input("a path holds a NUL byte"));
            }
            name if name.len() > crate::path::MAX_NAME_BYTES => {
                return Err(Error::invalid_input(format!(
                    "a name is longer than {} bytes",
                    crate::path::MAX_NAME_BYTES
                )));
            }
            name => path = path.join_name(OsStr::from_bytes(name)),
        }
    }
    if path.as_bytes().len() > crate::path::MAX_PATH_BYTES {
        return Err(Error::invalid_input(format!(
            "a path is longer than {} bytes",
            crate::path::MAX_PATH_BYTES
        )));
    }
    Ok(path)
}

/// An OS string as it travels.
pub fn encode_os(s: &OsStr) -> String {
    encode_bytes(s.as_bytes())
}

/// An OS string back from [`encode_os`].
///
/// # Errors
///
/// `invalid_input` for bad base64.
pub fn decode_os(text: &str, what: &str) -> Result<OsString> {
    decode_bytes(text, what).map(OsString::from_vec)
}

/// The wire name of an entry kind.
pub fn kind_name(kind: EntryKind) -> &'static str {
    match kind {
        EntryKind::File => "file",
        EntryKind::Dir => "dir",
        EntryKind::Symlink => "symlink",
        EntryKind::Special => "special",
    }
}

/// An entry kind from its wire name.
///
/// # Errors
///
/// `internal` for a name the API does not define.
pub fn kind_from(name: &str) -> Result<EntryKind> {
    Ok(match name {
        "file" => EntryKind::File,
        "dir" => EntryKind::Dir,
        "symlink" => EntryKind::Symlink,
        "special" => EntryKind::Special,
        other => {
            return Err(Error::internal(format!(
                "the remote cubby sent an unknown entry kind `{other}`"
            )));
        }
    })
}

impl From<&Metadata> for WireMetadata {
    fn from(m: &Metadata) -> WireMetadata {
        WireMetadata {
            kind: kind_name(m.kind).to_string(),
            size: m.size,
            mode: m.mode,
            mtime_ns: clamp_i64(m.mtime_ns),
            ctime_ns: clamp_i64(m.ctime_ns),
            ino: m.ino,
            nlink: m.nlink,
        }
    }
}

fn clamp_i64(v: i128) -> i64 {
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

impl WireMetadata {
    /// Back into cubby's metadata.
    ///
    /// # Errors
    ///
    /// `internal` for an unknown kind.
    pub fn into_metadata(self) -> Result<Metadata> {
        Ok(Metadata {
            kind: kind_from(&self.kind)?,
            size: self.size,
            mode: self.mode,
            mtime_ns: i128::from(self.mtime_ns),
            ctime_ns: i128::from(self.ctime_ns),
            ino: self.ino,
            nlink: self.nlink,
        })
    }
}

impl From<&DirEntry> for WireEntry {
    fn from(e: &DirEntry) -> WireEntry {
        WireEntry {
            name: encode_os(&e.name),
            kind: kind_name(e.kind).to_string(),
        }
    }
}

impl WireEntry {
    /// Back into a directory entry; the name must be one component.
    ///
    /// # Errors
    ///
    /// `internal` for bad base64, an unknown kind or a name that is not one
    /// component.
    pub fn into_entry(self) -> Result<DirEntry> {
        let name = decode_bytes(&self.name, "an entry name")
            .map_err(|e| Error::internal(e.message().to_string()))?;
        if name.is_empty()
            || name == b"."
            || name == b".."
            || name.contains(&b'/')
            || name.contains(&0)
        {
            return Err(Error::internal(
                "the remote cubby sent an entry name that is not one component",
            ));
        }
        Ok(DirEntry {
            name: OsString::from_vec(name),
            kind: kind_from(&self.kind)?,
        })
    }
}

/// One frame: header and payload in one buffer.
pub fn frame(tag: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEADER_BYTES + payload.len());
    out.push(tag);
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Incremental reader of frames from a byte stream split anywhere.
#[derive(Default)]
pub struct FrameReader {
    buf: Vec<u8>,
}

impl FrameReader {
    /// Adds bytes received.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole frame, if one is buffered.
    ///
    /// # Errors
    ///
    /// `network` for a frame longer than [`MAX_FRAME_BYTES`] (not cubby's
    /// stream).
    pub fn next_frame(&mut self) -> Result<Option<(u8, Vec<u8>)>> {
        if self.buf.len() < FRAME_HEADER_BYTES {
            return Ok(None);
        }
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if len > MAX_FRAME_BYTES {
            return Err(Error::new(
                ErrorKind::Network,
                format!(
                    "the remote cubby sent a frame of {len} bytes, over the limit of {MAX_FRAME_BYTES}"
                ),
            ));
        }
        if self.buf.len() < FRAME_HEADER_BYTES + len {
            return Ok(None);
        }
        let tag = self.buf[0];
        let payload = self.buf[FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + len].to_vec();
        self.buf.drain(..FRAME_HEADER_BYTES + len);
        Ok(Some((tag, payload)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_survive_any_split() {
        let mut bytes = frame(FRAME_OUTPUT, b"hello");
        bytes.extend(frame(FRAME_BEAT, b""));
        bytes.extend(frame(FRAME_EXIT, br#"{"exited":3}"#));
        for split in 0..bytes.len() {
            let mut r = FrameReader::default();
            let mut got = Vec::new();
            r.push(&bytes[..split]);
            while let Some(f) = r.next_frame().unwrap() {
                got.push(f);
            }
            r.push(&bytes[split..]);
            while let Some(f) = r.next_frame().unwrap() {
                got.push(f);
            }
            assert_eq!(got.len(), 3, "split at {split}");
            assert_eq!(got[0], (FRAME_OUTPUT, b"hello".to_vec()));
            let status: WireStatus = serde_json::from_slice(&got[2].1).unwrap();
            assert_eq!(status, WireStatus::Exited(3));
        }
        let mut r = FrameReader::default();
        r.push(&[FRAME_OUTPUT, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(r.next_frame().unwrap_err().kind(), ErrorKind::Network);
    }

    #[test]
    fn paths_are_checked_when_they_arrive() {
        let p = WorkspacePath::parse("a/b\u{1}c").unwrap();
        assert_eq!(decode_path(&encode_path(&p)).unwrap(), p);
        assert!(
            decode_path(&encode_path(&WorkspacePath::root()))
                .unwrap()
                .is_root()
        );
        for bad in [&b"/etc"[..], b"a/../../x", b".."] {
            assert_eq!(
                decode_path(&encode_bytes(bad)).unwrap_err().kind(),
                ErrorKind::PathEscape,
                "{bad:?}"
            );
        }
        assert_eq!(
            decode_path(&encode_bytes(b"a\0b")).unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
        assert_eq!(
            decode_path("!!").unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
    }
}
