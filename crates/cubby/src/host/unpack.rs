//! A workspace from a tar the caller sends (`POST /v1/sandboxes` with a
//! tar body): the archive unpacked into the new, empty directory the host
//! made, before the sandbox is opened over it.
//!
//! Unpacking is an attack surface, so it follows rules of its own rather
//! than a general-purpose extractor's; any entry that breaks one fails the
//! whole create (the host then removes the directory):
//!
//! - **Names**: relative, no `..`, no NUL or other control character, no
//!   name over [`MAX_NAME_BYTES`], at most [`Caps::max_depth`] components
//!   and [`Caps::max_path_bytes`] bytes (`invalid_input`). A leading `./`
//!   and the entry `./` itself (the root) are accepted.
//! - **Nothing is followed**: every directory on an entry's way is opened
//!   with `O_NOFOLLOW` from the root's descriptor, so an entry through a
//!   link the tar made earlier (`a -> /etc`, then `a/x`) is refused
//!   (`denied`), and nothing is ever written outside the root.
//! - **Links**: a symbolic link's target must be relative, its `..`
//!   components all leading (`../../lib/x`, not `a/../x`), and climb no
//!   higher than the link's own directory is deep (`denied` otherwise).
//!   The link's directory is a real one (nothing is unpacked through a
//!   link), so the climb is real, and the names after it lead down through
//!   entries whose own links obey the same rule: every link of the tree
//!   resolves inside it (a `..` after a name could climb out of where a link
//!   on the way led). (A command in the sandbox can make any link it
//!   likes, so the file tools and the sandbox confine every resolution
//!   anyway; this keeps the caller's tree from starting out pointing
//!   outside.) A hard link must name an entry already unpacked, reached
//!   without following links, that is a regular file (a hard link to a
//!   symbolic link would move it, target and all, to another directory);
//!   it is made with `linkat` without `AT_SYMLINK_FOLLOW`.
//! - **Kinds**: regular files, directories, symbolic and hard links only;
//!   devices, FIFOs, sparse files and anything else are refused
//!   (`invalid_input`). Owners, extended attributes and directory times
//!   are not restored; a file's modification time is.
//! - **Modes**: permission bits only (setuid, setgid and sticky stripped);
//!   the owner can always read and write a file and read, write and enter
//!   a directory (so the host can read the tree and remove it).
//! - **Policy**: every path, and each directory on its way, must be one
//!   the server's policy lets the file tools write ([`Policy::write_decision`]:
//!   no `.git` at all, no protected path, nothing `deny_read` covers), as
//!   the `/v1` file calls (`denied`).
//! - **Floods**: a file over [`Caps::max_file_bytes`], a total over
//!   [`Caps::max_total_bytes`] (both checked from the headers, before the
//!   content is read) or more than [`Caps::max_entries`] entries is
//!   `too_large`.
//! - A truncated or malformed archive is `invalid_input` naming what broke.
//!   GNU long names and pax `path`/`linkpath` are honoured, each such
//!   header read up to [`MAX_EXTENSION_BYTES`] (the crate's own handling
//!   reads one whole into memory, whatever its size); pax global headers
//!   and other pax records (a pax `size` among them) are ignored.
//!
//! A gzip-compressed tar is recognised by its magic bytes.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;

use crate::error::{Error, ErrorKind, Result};
use crate::path::{MAX_NAME_BYTES, WorkspacePath, escape_name};
use crate::policy::Policy;

/// Default cap on the bytes of all files of one archive, unpacked.
pub const MAX_UNPACKED_BYTES: u64 = 1024 * 1024 * 1024;
/// Default cap on the entries of one archive.
pub const MAX_ENTRIES: usize = 100_000;
/// Default cap on the bytes of the archive as read (a gzipped one
/// decompressed): its files, and the headers and padding of as many
/// entries as it may hold. Beyond the files' own caps, this bounds what an
/// ignored entry (a pax global header) can make the unpack read: a gzip of
/// zeros decompresses a thousandfold.
pub const MAX_ARCHIVE_BYTES: u64 = MAX_UNPACKED_BYTES + (MAX_ENTRIES as u64) * 3 * 512;
/// Default cap on the components of an entry's path.
pub const MAX_DEPTH: usize = 64;
/// Default cap on the bytes of an entry's path (and a link's target).
pub const MAX_PATH_BYTES: usize = crate::path::MAX_PATH_BYTES;
// What the `remote` provider sends at create, the host reads.
const _: () = assert!(crate::remote::wire::MAX_UPLOAD_BYTES <= super::http::MAX_BODY_BYTES);

/// Largest GNU long-name or pax header entry read.
pub const MAX_EXTENSION_BYTES: u64 = 64 * 1024;
/// Mode of the directories made on an entry's way (none of its own).
const IMPLICIT_DIR_MODE: u32 = 0o755;
/// Permission bits kept from an entry's mode.
const PERMISSION_BITS: u32 = 0o777;
/// Bits always set on a file: the owner reads and writes it.
const FILE_OWNER_BITS: u32 = 0o600;
/// Bits always set on a directory: the owner reads, writes and enters it.
const DIR_OWNER_BITS: u32 = 0o700;
/// The first bytes of a gzip stream.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// How much one archive may hold.
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    /// Largest file.
    pub max_file_bytes: u64,
    /// Bytes of all files together.
    pub max_total_bytes: u64,
    /// Bytes of the archive as read, decompressed.
    pub max_archive_bytes: u64,
    /// Entries of the archive (all kinds).
    pub max_entries: usize,
    /// Components of a path.
    pub max_depth: usize,
    /// Bytes of a path or of a link's target.
    pub max_path_bytes: usize,
}

impl Caps {
    /// The defaults, with files capped at `max_file_bytes` (the server's
    /// `write_file` limit: what a caller may write through the API).
    pub fn with_file_limit(max_file_bytes: u64) -> Caps {
        Caps {
            max_file_bytes,
            max_total_bytes: MAX_UNPACKED_BYTES,
            max_archive_bytes: MAX_ARCHIVE_BYTES,
            max_entries: MAX_ENTRIES,
            max_depth: MAX_DEPTH,
            max_path_bytes: MAX_PATH_BYTES,
        }
    }
}

/// What an archive held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unpacked {
    /// Entries unpacked (the root's `./` included).
    pub entries: usize,
    /// Bytes of file content written.
    pub bytes: u64,
}

fn shown(bytes: &[u8]) -> String {
    let name = escape_name(bytes);
    if name.len() > 200 {
        let cut = (0..=200)
            .rev()
            .find(|i| name.is_char_boundary(*i))
            .unwrap_or(0);
        format!("{}…", &name[..cut])
    } else {
        name.into_owned()
    }
}

fn malformed(e: &std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::FileTooLarge {
        return too_large(format!("{e}; send a smaller workspace"));
    }
    Error::invalid_input(format!(
        "the tar is malformed or truncated ({e}); send a complete tar (optionally gzipped)"
    ))
}

fn too_large(message: String) -> Error {
    Error::new(ErrorKind::TooLarge, message)
}

/// Unpacks `archive` (a tar, or a gzipped one) into `root`, an empty
/// directory nobody else writes to meanwhile, under `policy`'s write rules
/// and `caps` (see the module's docs).
///
/// # Errors
///
/// `invalid_input`, `denied` or `too_large` for an entry the rules
/// refuse; `internal` when the file system fails. What was unpacked
/// before the error stays: the caller removes `root`.
pub fn unpack(
    mut archive: impl Read,
    root: &Path,
    policy: &Policy,
    caps: &Caps,
) -> Result<Unpacked> {
    let root_fd = rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::internal(format!("cannot open the new workspace: {e}")))?;
    // The first bytes, to tell gzip (a stream may hand them one by one).
    let mut head = [0u8; GZIP_MAGIC.len()];
    let mut got = 0;
    while got < head.len() {
        match archive.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(malformed(&e)),
        }
    }
    let whole = std::io::Cursor::new(head[..got].to_vec()).chain(archive);
    let cap = caps.max_archive_bytes;
    if head[..got] == GZIP_MAGIC {
        let tar = Capped::new(flate2::read::GzDecoder::new(whole), cap);
        unpack_from(tar, &root_fd, policy, caps)
    } else {
        unpack_from(Capped::new(whole, cap), &root_fd, policy, caps)
    }
}

/// A reader that fails with `FileTooLarge` past `left` bytes.
struct Capped<R> {
    inner: R,
    left: u64,
    cap: u64,
}

impl<R: Read> Capped<R> {
    fn new(inner: R, cap: u64) -> Capped<R> {
        Capped {
            inner,
            left: cap,
            cap,
        }
    }
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            // One byte more tells an archive that ends at the cap from one
            // that goes on.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(std::io::Error::new(
                    std::io::ErrorKind::FileTooLarge,
                    format!(
                        "the tar comes to more than {} bytes as read (decompressed), this \
                         host's limit",
                        self.cap
                    ),
                )),
            };
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.left -= n as u64;
        Ok(n)
    }
}

fn unpack_from(
    reader: impl Read,
    root: &OwnedFd,
    policy: &Policy,
    caps: &Caps,
) -> Result<Unpacked> {
    let mut archive = tar::Archive::new(reader);
    let mut done = Unpacked::default();
    // Raw: the crate's own handling reads a long name or a pax header
    // whole into memory, however large its header says it is (a gzip bomb
    // of one name); here each is read up to [`MAX_EXTENSION_BYTES`].
    let mut long_name: Option<Vec<u8>> = None;
    let mut long_link: Option<Vec<u8>> = None;
    let mut pax: Option<Vec<u8>> = None;
    for entry in archive.entries().map_err(|e| malformed(&e))?.raw(true) {
        let mut entry = entry.map_err(|e| malformed(&e))?;
        done.entries += 1;
        if done.entries > caps.max_entries {
            return Err(too_large(format!(
                "the tar has more than {} entries, this host's limit; send fewer files",
                caps.max_entries
            )));
        }
        let kind = entry.header().entry_type();
        let slot = match kind {
            tar::EntryType::XGlobalHeader => continue,
            tar::EntryType::GNULongName => Some(&mut long_name),
            tar::EntryType::GNULongLink => Some(&mut long_link),
            tar::EntryType::XHeader => Some(&mut pax),
            _ => None,
        };
        if let Some(slot) = slot {
            if slot.is_some() {
                return Err(Error::invalid_input(
                    "the tar is malformed: two long-name or pax headers for one entry; send a \
                     tar made by a standard tool",
                ));
            }
            *slot = Some(read_extension(&mut entry)?);
            continue;
        }
        let pax_data = pax.take();
        let raw = long_name
            .take()
            .map(strip_nul)
            .or_else(|| pax_value(pax_data.as_deref(), b"path"))
            .unwrap_or_else(|| entry.header().path_bytes().into_owned());
        let link = long_link
            .take()
            .map(strip_nul)
            .or_else(|| pax_value(pax_data.as_deref(), b"linkpath"))
            .or_else(|| entry.header().link_name_bytes().map(|c| c.into_owned()));
        let names = entry_names(&raw, caps)?;
        let is_dir = kind.is_dir();
        check_policy(policy, &names, &raw)?;
        let Some((last, parents)) = names.split_last() else {
            // `./`: the root itself, which the host made.
            if is_dir {
                continue;
            }
            return Err(Error::invalid_input(format!(
                "tar entry `{}` names the workspace's root but is not a directory",
                shown(&raw)
            )));
        };
        let parent = walk(root, parents, &raw, true)?;
        let mode = entry.header().mode().map_err(|e| malformed(&e))? & PERMISSION_BITS;
        match kind {
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let size = entry.size();
                if size > caps.max_file_bytes {
                    return Err(too_large(format!(
                        "tar entry `{}` is {size} bytes, over this host's limit of {} bytes a \
                         file (limits.write_file.max_bytes); send it another way or leave it out",
                        shown(&raw),
                        caps.max_file_bytes
                    )));
                }
                if done.bytes.saturating_add(size) > caps.max_total_bytes {
                    return Err(too_large(format!(
                        "the tar's files come to more than {} bytes unpacked, this host's \
                         limit; send less",
                        caps.max_total_bytes
                    )));
                }
                replace_non_dir(&parent, last, &raw)?;
                let fd = rustix::fs::openat(
                    &parent,
                    *last,
                    OFlags::WRONLY
                        | OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(FILE_OWNER_BITS),
                )
                .map_err(|e| fs_error(&raw, "create", e))?;
                let mut file = std::fs::File::from(fd);
                let written =
                    std::io::copy(&mut (&mut entry).take(size), &mut file).map_err(|e| match e
                        .raw_os_error()
                    {
                        Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG) => too_large(format!(
                            "no room to write tar entry `{}` in the new workspace: {e}",
                            shown(&raw)
                        )),
                        _ => malformed(&e),
                    })?;
                if written != size {
                    return Err(Error::invalid_input(format!(
                        "the tar is truncated inside entry `{}`; send a complete tar",
                        shown(&raw)
                    )));
                }
                file.flush()
                    .map_err(|e| Error::internal(format!("cannot write the workspace: {e}")))?;
                done.bytes += size;
                rustix::fs::fchmod(&file, Mode::from_raw_mode(mode | FILE_OWNER_BITS))
                    .map_err(|e| fs_error(&raw, "set the mode of", e))?;
                if let Ok(mtime) = entry.header().mtime() {
                    let when = rustix::fs::Timespec {
                        tv_sec: i64::try_from(mtime).unwrap_or(i64::MAX),
                        tv_nsec: 0,
                    };
                    let times = rustix::fs::Timestamps {
                        last_access: when,
                        last_modification: when,
                    };
                    let _ = rustix::fs::futimens(&file, &times);
                }
            }
            tar::EntryType::Directory => {
                let dir = match rustix::fs::mkdirat(
                    &parent,
                    *last,
                    Mode::from_raw_mode(DIR_OWNER_BITS),
                ) {
                    Ok(()) | Err(Errno::EXIST) => walk(&parent, &[*last], &raw, false)?,
                    Err(e) => return Err(fs_error(&raw, "make", e)),
                };
                rustix::fs::fchmod(&dir, Mode::from_raw_mode(mode | DIR_OWNER_BITS))
                    .map_err(|e| fs_error(&raw, "set the mode of", e))?;
            }
            tar::EntryType::Symlink => {
                let target = link_target(link, &raw)?;
                check_link_target(&target, parents, &raw, caps)?;
                replace_non_dir(&parent, last, &raw)?;
                rustix::fs::symlinkat(OsStr::from_bytes(&target), &parent, *last)
                    .map_err(|e| fs_error(&raw, "make the link", e))?;
            }
            tar::EntryType::Link => {
                let target = link_target(link, &raw)?;
                let target_names = entry_names(&target, caps)?;
                let Some((target_last, target_parents)) = target_names.split_last() else {
                    return Err(Error::invalid_input(format!(
                        "tar entry `{}` is a hard link to the root; links to directories are \
                         not made",
                        shown(&raw)
                    )));
                };
                let target_parent = walk(root, target_parents, &target, false)?;
                // Only a regular file: a hard link to a symbolic link would
                // move it, and its target with it, to another directory.
                match rustix::fs::statat(&target_parent, *target_last, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st)
                        if rustix::fs::FileType::from_raw_mode(st.st_mode)
                            == rustix::fs::FileType::RegularFile => {}
                    Ok(_) => {
                        return Err(Error::denied(format!(
                            "tar entry `{}` is a hard link to `{}`, which is not a regular \
                             file; hard links in the tar must name files",
                            shown(&raw),
                            shown(&target)
                        )));
                    }
                    Err(Errno::NOENT) => {
                        return Err(Error::invalid_input(format!(
                            "tar entry `{}` is a hard link to `{}`, which the tar does not hold \
                             before it",
                            shown(&raw),
                            shown(&target)
                        )));
                    }
                    Err(e) => return Err(fs_error(&raw, "reach the target of", e)),
                }
                replace_non_dir(&parent, last, &raw)?;
                rustix::fs::linkat(
                    &target_parent,
                    *target_last,
                    &parent,
                    *last,
                    AtFlags::empty(),
                )
                .map_err(|e| match e {
                    Errno::NOENT => Error::invalid_input(format!(
                        "tar entry `{}` is a hard link to `{}`, which the tar does not hold \
                         before it",
                        shown(&raw),
                        shown(&target)
                    )),
                    e => fs_error(&raw, "make the hard link", e),
                })?;
            }
            other => {
                return Err(Error::invalid_input(format!(
                    "tar entry `{}` is a {}, which this host does not unpack (only files, \
                     directories and links); leave it out",
                    shown(&raw),
                    kind_name(other)
                )));
            }
        }
    }
    if long_name.is_some() || long_link.is_some() || pax.is_some() {
        return Err(Error::invalid_input(
            "the tar is malformed or truncated: it ends after a long-name or pax header; send \
             a complete tar",
        ));
    }
    Ok(done)
}

/// The content of a long-name or pax header entry, at most
/// [`MAX_EXTENSION_BYTES`].
fn read_extension<R: Read>(entry: &mut tar::Entry<'_, R>) -> Result<Vec<u8>> {
    let size = entry.header().size().map_err(|e| malformed(&e))?;
    if size > MAX_EXTENSION_BYTES {
        return Err(Error::invalid_input(format!(
            "the tar has a long-name or pax header of {size} bytes, over this host's limit of \
             {MAX_EXTENSION_BYTES}; send a tar with shorter names"
        )));
    }
    let mut data = Vec::new();
    entry
        .take(MAX_EXTENSION_BYTES)
        .read_to_end(&mut data)
        .map_err(|e| malformed(&e))?;
    if data.len() as u64 != size {
        return Err(Error::invalid_input(
            "the tar is truncated inside a long-name or pax header; send a complete tar",
        ));
    }
    Ok(data)
}

/// A GNU long name without its terminating NUL.
fn strip_nul(mut name: Vec<u8>) -> Vec<u8> {
    if name.last() == Some(&0) {
        name.pop();
    }
    name
}

/// The value of record `key` of pax header `data`.
fn pax_value(data: Option<&[u8]>, key: &[u8]) -> Option<Vec<u8>> {
    tar::PaxExtensions::new(data?)
        .filter_map(std::result::Result::ok)
        .find(|f| f.key_bytes() == key)
        .map(|f| f.value_bytes().to_vec())
}

fn kind_name(kind: tar::EntryType) -> &'static str {
    match kind {
        tar::EntryType::Char => "character device",
        tar::EntryType::Block => "block device",
        tar::EntryType::Fifo => "FIFO",
        tar::EntryType::GNUSparse => "sparse file",
        _ => "special entry",
    }
}

/// The components of an entry's path (`.` and empty ones dropped), under
/// the name rules of the module's docs.
fn entry_names<'a>(raw: &'a [u8], caps: &Caps) -> Result<Vec<&'a [u8]>> {
    if raw.len() > caps.max_path_bytes {
        return Err(Error::invalid_input(format!(
            "a tar entry's path is {} bytes long, over this host's limit of {}; use shorter paths",
            raw.len(),
            caps.max_path_bytes
        )));
    }
    if raw.iter().any(|b| *b < 0x20 || *b == 0x7f) {
        return Err(Error::invalid_input(format!(
            "tar entry `{}` has a control character (or NUL) in its name; rename it",
            shown(raw)
        )));
    }
    if raw.first() == Some(&b'/') {
        return Err(Error::new(
            ErrorKind::PathEscape,
            format!(
                "tar entry `{}` is an absolute path; make the tar with paths relative to the \
                 workspace (tar -C DIR -c .)",
                shown(raw)
            ),
        ));
    }
    let mut names = Vec::new();
    for name in raw.split(|b| *b == b'/') {
        match name {
            b"" | b"." => {}
            b".." => {
                return Err(Error::new(
                    ErrorKind::PathEscape,
                    format!(
                        "tar entry `{}` has a `..` component; make the tar with plain relative \
                         paths",
                        shown(raw)
                    ),
                ));
            }
            name if name.len() > MAX_NAME_BYTES => {
                return Err(Error::invalid_input(format!(
                    "a name in tar entry `{}` is {} bytes long, the limit is {MAX_NAME_BYTES}",
                    shown(raw),
                    name.len()
                )));
            }
            name => names.push(name),
        }
    }
    if names.len() > caps.max_depth {
        return Err(Error::invalid_input(format!(
            "tar entry `{}` is {} directories deep, over this host's limit of {}",
            shown(raw),
            names.len(),
            caps.max_depth
        )));
    }
    Ok(names)
}

/// Refuses a path (or a directory on its way) the file tools may not write.
fn check_policy(policy: &Policy, names: &[&[u8]], raw: &[u8]) -> Result<()> {
    let mut path = WorkspacePath::root();
    for name in names {
        path = path.join_name(OsStr::from_bytes(name));
        let decision = policy.write_decision(&path);
        if !decision.allowed {
            return Err(Error::denied(format!(
                "tar entry `{}` is refused: writing `{path}` is not allowed ({}); leave it out \
                 of the tar",
                shown(raw),
                decision.rule
            )));
        }
    }
    Ok(())
}

/// Opens the directory `names` lead to from `from`, following no link;
/// missing directories are made when `make`.
fn walk(from: &OwnedFd, names: &[&[u8]], raw: &[u8], make: bool) -> Result<OwnedFd> {
    let open = |dir: &OwnedFd, name: &[u8]| {
        rustix::fs::openat(
            dir,
            OsStr::from_bytes(name),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
    };
    let mut dir = rustix::io::dup(from)
        .map_err(|e| Error::internal(format!("cannot open the new workspace: {e}")))?;
    for name in names {
        let next = match open(&dir, name) {
            Err(Errno::NOENT) if make => {
                match rustix::fs::mkdirat(
                    &dir,
                    OsStr::from_bytes(name),
                    Mode::from_raw_mode(IMPLICIT_DIR_MODE),
                ) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(fs_error(raw, "make a directory for", e)),
                }
                rustix::fs::fchmod(
                    open(&dir, name)
                        .map_err(|e| way_error(raw, name, e))?
                        .as_fd(),
                    Mode::from_raw_mode(IMPLICIT_DIR_MODE),
                )
                .map_err(|e| fs_error(raw, "set the mode of a directory for", e))?;
                open(&dir, name)
            }
            other => other,
        };
        dir = next.map_err(|e| way_error(raw, name, e))?;
    }
    Ok(dir)
}

/// An entry whose way is not a plain directory.
fn way_error(raw: &[u8], name: &[u8], e: Errno) -> Error {
    match e {
        Errno::LOOP | Errno::NOTDIR => Error::denied(format!(
            "tar entry `{}` goes through `{}`, which is a link or a file, not a directory \
             (nothing is unpacked through a link); fix the tar",
            shown(raw),
            shown(name)
        )),
        Errno::NOENT => Error::invalid_input(format!(
            "tar entry `{}` names `{}`, which the tar does not hold before it",
            shown(raw),
            shown(name)
        )),
        e => fs_error(raw, "reach", e),
    }
}

fn fs_error(raw: &[u8], what: &str, e: Errno) -> Error {
    match e {
        Errno::NOSPC | Errno::DQUOT => too_large(format!(
            "no space left to {what} tar entry `{}`: {e}",
            shown(raw)
        )),
        Errno::EXIST | Errno::ISDIR | Errno::NOTDIR | Errno::NOTEMPTY => {
            Error::invalid_input(format!(
                "cannot {what} tar entry `{}`: {e} (an earlier entry of another kind has its \
                 name); fix the tar",
                shown(raw)
            ))
        }
        e => Error::internal(format!(
            "cannot {what} tar entry `{}` in the new workspace: {e}",
            shown(raw)
        )),
    }
}

/// Removes what an earlier entry left at `name` in `parent`, unless it
/// is a directory (a later entry replaces an earlier one, as `tar -x`).
fn replace_non_dir(parent: &OwnedFd, name: &[u8], raw: &[u8]) -> Result<()> {
    match rustix::fs::unlinkat(parent, OsStr::from_bytes(name), AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(Errno::ISDIR | Errno::PERM) => Err(Error::invalid_input(format!(
            "tar entry `{}` would replace a directory an earlier entry made; fix the tar",
            shown(raw)
        ))),
        Err(e) => Err(fs_error(raw, "replace", e)),
    }
}

fn link_target(link: Option<Vec<u8>>, raw: &[u8]) -> Result<Vec<u8>> {
    match link {
        Some(target) if !target.is_empty() => Ok(target),
        _ => Err(Error::invalid_input(format!(
            "tar entry `{}` is a link without a target; fix the tar",
            shown(raw)
        ))),
    }
}

/// Refuses a symbolic link's target that is absolute or climbs out of the
/// workspace, read lexically from the link's directory `parents`.
fn check_link_target(target: &[u8], parents: &[&[u8]], raw: &[u8], caps: &Caps) -> Result<()> {
    let escapes = || {
        Error::denied(format!(
            "tar entry `{}` is a link to `{}`, outside the workspace; links in the tar must \
             stay inside it",
            shown(raw),
            shown(target)
        ))
    };
    if target.len() > caps.max_path_bytes || target.iter().any(|b| *b < 0x20 || *b == 0x7f) {
        return Err(Error::invalid_input(format!(
            "tar entry `{}` is a link whose target is too long or holds a control character",
            shown(raw)
        )));
    }
    if target.first() == Some(&b'/') {
        return Err(escapes());
    }
    let mut depth = parents.len();
    let mut named = false;
    for name in target.split(|b| *b == b'/') {
        match name {
            b"" | b"." => {}
            b".." if named => {
                return Err(Error::denied(format!(
                    "tar entry `{}` is a link to `{}`, with a `..` after a name; a link's `..` \
                     must all come first (`../../x`), so that it cannot climb out through \
                     another link",
                    shown(raw),
                    shown(target)
                )));
            }
            b".." => depth = depth.checked_sub(1).ok_or_else(escapes)?,
            _ => named = true,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tar of `(path, kind, content or target, mode)`, written raw so
    /// that it may break every rule.
    fn tar_of(entries: &[(&str, tar::EntryType, &str, u32)]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, kind, body, mode) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(*kind);
            header.set_mode(*mode);
            header.set_mtime(1_700_000_000);
            let is_link = matches!(kind, tar::EntryType::Symlink | tar::EntryType::Link);
            header.set_size(if is_link { 0 } else { body.len() as u64 });
            // Raw names: `append_data` refuses `..` and absolute paths.
            let name = &mut header.as_old_mut().name;
            name[..path.len()].copy_from_slice(path.as_bytes());
            if is_link {
                let link = &mut header.as_old_mut().linkname;
                link[..body.len()].copy_from_slice(body.as_bytes());
            }
            header.set_cksum();
            let data: &[u8] = if is_link { b"" } else { body.as_bytes() };
            builder.append(&header, data).unwrap();
        }
        builder.into_inner().unwrap()
    }

    fn caps() -> Caps {
        Caps::with_file_limit(1024)
    }

    fn run(archive: &[u8], caps: &Caps) -> (tempfile::TempDir, Result<Unpacked>) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("ws")).unwrap();
        let policy = Policy::builder().build().unwrap();
        let result = unpack(archive, &dir.path().join("ws"), &policy, caps);
        (dir, result)
    }

    use tar::EntryType as T;

    #[test]
    fn files_directories_links_and_modes() {
        let archive = tar_of(&[
            ("./", T::Directory, "", 0o755),
            ("src/", T::Directory, "", 0o750),
            ("src/main.rs", T::Regular, "fn main() {}\n", 0o644),
            ("run.sh", T::Regular, "echo hi\n", 0o6755),
            ("link", T::Symlink, "src/main.rs", 0o777),
            ("src/up", T::Symlink, "../run.sh", 0o777),
            ("hard", T::Link, "run.sh", 0o644),
            ("deep/er/file", T::Regular, "x", 0o400),
        ]);
        let (dir, result) = run(&archive, &caps());
        let done = result.unwrap();
        assert_eq!(done.entries, 8);
        let ws = dir.path().join("ws");
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        assert_eq!(
            std::fs::read_to_string(ws.join("src/main.rs")).unwrap(),
            "fn main() {}\n"
        );
        let mode = |p: &str| {
            std::fs::symlink_metadata(ws.join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(mode("run.sh"), 0o755, "setuid and setgid stripped");
        assert_eq!(mode("src"), 0o750);
        assert_eq!(mode("deep/er/file"), 0o600);
        assert_eq!(
            std::fs::read_link(ws.join("link")).unwrap(),
            Path::new("src/main.rs")
        );
        assert_eq!(
            std::fs::read_to_string(ws.join("src/up")).unwrap(),
            "echo hi\n"
        );
        assert_eq!(
            std::fs::metadata(ws.join("hard")).unwrap().ino(),
            std::fs::metadata(ws.join("run.sh")).unwrap().ino()
        );
        assert_eq!(
            std::fs::metadata(ws.join("run.sh")).unwrap().mtime(),
            1_700_000_000
        );
    }

    #[test]
    fn long_names_and_pax_paths_are_honoured_and_bounded() {
        let long_dir = "d123456789/".repeat(12);
        let long_file = format!("{long_dir}file.txt");
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o644);
        header.set_size(5);
        builder
            .append_data(&mut header, &long_file, &b"long\n"[..])
            .unwrap();
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(T::Symlink);
        header.set_mode(0o777);
        header.set_size(0);
        builder
            .append_link(&mut header, "l", format!("{long_dir}file.txt"))
            .unwrap();
        // A pax header naming the next entry, whose own name differs.
        let record = "pax/named.txt";
        let line_len = record.len() + " path=\n".len();
        let line = format!("{} path={record}\n", line_len + 2);
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(T::XHeader);
        header.set_size(line.len() as u64);
        header.set_path("PaxHeader").unwrap();
        header.set_cksum();
        builder.append(&header, line.as_bytes()).unwrap();
        let mut header = tar::Header::new_ustar();
        header.set_mode(0o644);
        header.set_size(4);
        header.set_path("ignored.txt").unwrap();
        header.set_cksum();
        builder.append(&header, &b"pax\n"[..]).unwrap();
        let archive = builder.into_inner().unwrap();
        let (dir, result) = run(&archive, &caps());
        result.unwrap();
        let ws = dir.path().join("ws");
        assert_eq!(
            std::fs::read_to_string(ws.join(&long_file)).unwrap(),
            "long\n"
        );
        assert_eq!(std::fs::read_to_string(ws.join("l")).unwrap(), "long\n");
        assert_eq!(
            std::fs::read_to_string(ws.join("pax/named.txt")).unwrap(),
            "pax\n"
        );
        assert!(!ws.join("ignored.txt").exists());

        // A long name of 1 MiB (a gzip bomb's), refused before it is read.
        let name = vec![b'a'; 1024 * 1024];
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(T::GNULongName);
        header.set_size(name.len() as u64);
        header.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
        header.set_cksum();
        let mut builder = tar::Builder::new(Vec::new());
        builder.append(&header, &name[..]).unwrap();
        let err = run(&builder.into_inner().unwrap(), &caps()).1.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        assert!(err.message().contains("long-name or pax header"), "{err}");
    }

    #[test]
    fn a_gzipped_tar_is_unpacked_too() {
        let archive = tar_of(&[("a.txt", T::Regular, "gz\n", 0o644)]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&archive).unwrap();
        let (dir, result) = run(&gz.finish().unwrap(), &caps());
        result.unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("ws/a.txt")).unwrap(),
            "gz\n"
        );
    }

    /// A stream that hands out one byte a read (a body's chunks may split
    /// anywhere, the gzip magic too).
    struct ByteByByte<'a>(&'a [u8]);

    impl Read for ByteByByte<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let Some((first, rest)) = self.0.split_first() else {
                return Ok(0);
            };
            if buf.is_empty() {
                return Ok(0);
            }
            buf[0] = *first;
            self.0 = rest;
            Ok(1)
        }
    }

    #[test]
    fn a_stream_split_anywhere_is_unpacked_gzipped_or_not() {
        let archive = tar_of(&[("a.txt", T::Regular, "streamed\n", 0o644)]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&archive).unwrap();
        for bytes in [archive.clone(), gz.finish().unwrap()] {
            let dir = tempfile::tempdir().unwrap();
            let ws = dir.path().join("ws");
            std::fs::create_dir(&ws).unwrap();
            let policy = Policy::builder().build().unwrap();
            unpack(ByteByByte(&bytes), &ws, &policy, &caps()).unwrap();
            assert_eq!(
                std::fs::read_to_string(ws.join("a.txt")).unwrap(),
                "streamed\n"
            );
        }
    }

    /// An entry the unpack skips (a pax global header) of a megabyte of
    /// zeros, gzipped to a kilobyte: read through to its end once, it now
    /// stops at the archive's cap (a body of 1 GiB of such zeros would
    /// decompress to a terabyte).
    #[test]
    fn a_skipped_entry_stops_at_the_archives_cap() {
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(T::XGlobalHeader);
        header.set_size(1024 * 1024);
        header.set_path("pax_global_header").unwrap();
        header.set_cksum();
        builder
            .append(&header, &vec![0u8; 1024 * 1024][..])
            .unwrap();
        let mut file = tar::Header::new_gnu();
        file.set_size(1);
        file.set_mode(0o644);
        builder.append_data(&mut file, "a.txt", &b"x"[..]).unwrap();
        let archive = builder.into_inner().unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&archive).unwrap();
        let gz = gz.finish().unwrap();
        assert!(gz.len() < 16 * 1024, "{}", gz.len());
        let mut capped = caps();
        capped.max_archive_bytes = 64 * 1024;
        let (_dir, result) = run(&gz, &capped);
        assert_eq!(result.unwrap_err().kind(), ErrorKind::TooLarge);
        // At the default cap it is unpacked.
        let (dir, result) = run(&gz, &caps());
        result.unwrap();
        assert!(dir.path().join("ws/a.txt").exists());
    }

    #[test]
    fn every_rule_refuses_and_nothing_lands_outside() {
        let cases: Vec<(&str, Vec<u8>, ErrorKind)> = vec![
            (
                "absolute",
                tar_of(&[("/etc/x", T::Regular, "x", 0o644)]),
                ErrorKind::PathEscape,
            ),
            (
                "dotdot",
                tar_of(&[("../out", T::Regular, "x", 0o644)]),
                ErrorKind::PathEscape,
            ),
            (
                "dotdot inside",
                tar_of(&[("a/../../out", T::Regular, "x", 0o644)]),
                ErrorKind::PathEscape,
            ),
            (
                "link out",
                tar_of(&[("l", T::Symlink, "../out", 0o777)]),
                ErrorKind::Denied,
            ),
            (
                "link abs",
                tar_of(&[("l", T::Symlink, "/etc", 0o777)]),
                ErrorKind::Denied,
            ),
            (
                "hard link to a link",
                tar_of(&[
                    ("a/b/l1", T::Symlink, "../..", 0o777),
                    ("h", T::Link, "a/b/l1", 0o777),
                ]),
                ErrorKind::Denied,
            ),
            (
                // Lexically `a/b`, but `l1` is the root: `l2` would be its parent.
                "link chain",
                tar_of(&[
                    ("a/b/l1", T::Symlink, "../..", 0o777),
                    ("l2", T::Symlink, "a/b/l1/..", 0o777),
                ]),
                ErrorKind::Denied,
            ),
            (
                "through a link",
                tar_of(&[
                    ("l", T::Symlink, ".", 0o777),
                    ("l/x", T::Regular, "x", 0o644),
                ]),
                ErrorKind::Denied,
            ),
            (
                "hard link out",
                tar_of(&[("h", T::Link, "../out", 0o644)]),
                ErrorKind::PathEscape,
            ),
            (
                "hard link through a link",
                tar_of(&[
                    ("l", T::Symlink, "d", 0o777),
                    ("d/", T::Directory, "", 0o755),
                    ("d/f", T::Regular, "x", 0o644),
                    ("h", T::Link, "l/f", 0o644),
                ]),
                ErrorKind::Denied,
            ),
            (
                "fifo",
                tar_of(&[("p", T::Fifo, "", 0o644)]),
                ErrorKind::InvalidInput,
            ),
            (
                "device",
                tar_of(&[("c", T::Char, "", 0o644)]),
                ErrorKind::InvalidInput,
            ),
            (
                "control",
                tar_of(&[("a\x01b", T::Regular, "x", 0o644)]),
                ErrorKind::InvalidInput,
            ),
            (
                "git dir",
                tar_of(&[(".git/", T::Directory, "", 0o755)]),
                ErrorKind::Denied,
            ),
            (
                "git hook",
                tar_of(&[(".git/hooks/pre-commit", T::Regular, "x", 0o755)]),
                ErrorKind::Denied,
            ),
            (
                "nested git config",
                tar_of(&[("sub/.git/config", T::Regular, "x", 0o644)]),
                ErrorKind::Denied,
            ),
            (
                "big file",
                tar_of(&[("big", T::Regular, &"x".repeat(1025), 0o644)]),
                ErrorKind::TooLarge,
            ),
        ];
        for (what, archive, kind) in cases {
            let (dir, result) = run(&archive, &caps());
            let err = result.expect_err(what);
            assert_eq!(err.kind(), kind, "{what}: {err}");
            let outside: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(outside, ["ws"], "{what}: something was written outside");
        }
    }

    #[test]
    fn floods_stop_at_the_caps() {
        let many: Vec<(String, T, &str, u32)> = (0..5)
            .map(|i| (format!("f{i}"), T::Regular, "0123456789", 0o644))
            .collect();
        let many: Vec<(&str, T, &str, u32)> = many
            .iter()
            .map(|(p, k, b, m)| (p.as_str(), *k, *b, *m))
            .collect();
        let archive = tar_of(&many);
        let mut total = caps();
        total.max_total_bytes = 45;
        assert_eq!(
            run(&archive, &total).1.unwrap_err().kind(),
            ErrorKind::TooLarge
        );
        let mut entries = caps();
        entries.max_entries = 4;
        assert_eq!(
            run(&archive, &entries).1.unwrap_err().kind(),
            ErrorKind::TooLarge
        );
        let mut depth = caps();
        depth.max_depth = 3;
        let deep = tar_of(&[("a/b/c/d", T::Regular, "x", 0o644)]);
        assert_eq!(
            run(&deep, &depth).1.unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
        assert!(run(&archive, &caps()).1.is_ok());
    }

    #[test]
    fn a_truncated_or_malformed_tar_says_so() {
        let archive = tar_of(&[("a.txt", T::Regular, &"x".repeat(600), 0o644)]);
        for broken in [&archive[..700], &b"not a tar at all, just some text"[..]] {
            let err = run(broken, &caps()).1.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
            assert!(err.message().contains("tar"), "{err}");
        }
    }
}
