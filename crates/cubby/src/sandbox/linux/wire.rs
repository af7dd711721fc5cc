//! The protocol between the server and the `linux` provider's fork-side
//! programs: the holder's report pipe, the messages on the holder's socket
//! and on each command's own, and the payload of a command request.
//!
//! - **Report pipe** (holder → server, once): empty and closed when the
//!   holder is ready; otherwise one [`HolderStep`] byte and the errno (four
//!   bytes, little-endian) of the step that failed.
//! - **Messages** ([`Msg`], 24 bytes, native byte order, fds beside them):
//!   [`MSG_LANDLOCK`] (server → holder, once: the Landlock ruleset's fd),
//!   [`MSG_LISTENER`] (holder → server, once, first, with network `allow`:
//!   the egress proxy's listening socket), [`MSG_RUN`] (server → holder: a
//!   command, with `[payload memfd, stdin, stdout, stderr, the store
//!   layer, the command's socket]`), and on the command's socket
//!   [`MSG_STARTED`] (its init's pid in the sandbox's namespace and a
//!   pidfd), [`MSG_EXEC_FAILED`] or [`MSG_FORK_FAILED`] (an errno), then
//!   [`MSG_EXITED`] (the wait status).
//! - **Payload** of `MSG_RUN` ([`encode_run`]; read by the init through
//!   [`Payload`]): three little-endian `u32` counts (protected paths and
//!   masks, argv, env) and then NUL-terminated strings: the working
//!   directory (empty for the root), each protected path prefixed by `r`,
//!   `w` or [`ENTRY_PLACEHOLDER`], each mask prefixed by [`ENTRY_DENY_READ`] or [`ENTRY_STORE`],
//!   argv, env (`NAME=value`).
//!
//! The server's side uses `rustix`; the fork-side programs use
//! [`recv_msg`] and [`send_msg`], which allocate nothing.

#![allow(unsafe_code)]

use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Mutex;

use super::start_error;
use super::syscalls::errno;
use crate::error::{Error, Result};
use crate::sync::lock;

/// A payload entry for a `deny_read` path (relative to the root): masked,
/// the directories above it pinned, unless masked already.
pub(super) const ENTRY_DENY_READ: u8 = b'd';
/// A payload entry for a credential store (absolute): masked unless masked
/// already.
pub(super) const ENTRY_STORE: u8 = b'm';
/// A payload entry for a protected path bound read-only.
const ENTRY_READ_ONLY: u8 = b'r';
/// A payload entry for a directory above a protected path, bound onto
/// itself writable (pinned).
pub(super) const ENTRY_PINNED: u8 = b'w';
/// A payload entry for a reservation's placeholder directory, covered by
/// the holder's read-only placeholder object (one bind, no remount).
pub(super) const ENTRY_PLACEHOLDER: u8 = b'p';
/// Bytes of the three counts at the start of a payload.
pub(super) const PAYLOAD_HEADER_BYTES: usize = 12;

/// The holder's setup steps, reported (one byte + errno) when one fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum HolderStep {
    Unshare = 1,
    UidMap,
    GidMap,
    MountPrivate,
    OpenRebind,
    MountTmp,
    Rebind,
    MountShm,
    Mask,
    Loopback,
    Cgroup,
    Listener,
    Bounding,
    Seccomp,
    ReadOnly,
    Pin,
    Devices,
    Fork,
    Limits,
    ReadRules,
    IpcLimits,
    Run,
    RootChanged,
}

impl HolderStep {
    /// Names the step for an error message.
    pub(super) fn describe(byte: u8) -> &'static str {
        match byte {
            1 => "creating the user, IPC, mount, UTS and network namespaces",
            2 => "mapping the user id into the user namespace",
            3 => "mapping the group id into the user namespace",
            4 => "making the mount tree private",
            5 => "opening the workspace or a writable root",
            6 => "mounting the private /tmp",
            7 => "binding the workspace or a writable root back, writable",
            8 => "mounting the private /dev/shm",
            9 => "masking a deny_read path",
            10 => "bringing up the loopback interface",
            11 => "joining the sandbox's pids cgroup",
            12 => "opening the egress proxy's listening socket",
            13 => "dropping the capability bounding set",
            14 => "installing the seccomp filter",
            15 => "making every mount read-only (mount_setattr)",
            16 => "pinning the directories above a deny_read path",
            17 => "making the sandbox's own /dev",
            18 => "forking the first process of the sandbox's pid namespace",
            19 => "setting the sandbox's process, inotify and fanotify limits",
            20 => "opening what commands read (read_scope = \"system\")",
            21 => "setting the sandbox's System V shared memory and message queue limits",
            22 => "covering the host's /run with the sandbox's own",
            23 => {
                "binding the workspace root (its path no longer names the directory the \
                 sandbox opened: it was moved or replaced; open the sandbox again)"
            }
            _ => "setting up the sandbox",
        }
    }
}

/// Bytes of a holder's failure report: the step and its errno.
pub(super) const REPORT_BYTES: usize = 5;

/// The error for a holder's failure report (`n` bytes of it read).
pub(super) fn holder_error(report: &[u8; REPORT_BYTES], n: usize) -> Error {
    let step = HolderStep::describe(report[0]);
    let errno = if n == REPORT_BYTES {
        i32::from_le_bytes([report[1], report[2], report[3], report[4]])
    } else {
        0
    };
    start_error(format!(
        "{step} failed: {}",
        std::io::Error::from_raw_os_error(errno)
    ))
}

/// Message kinds on the holder's socket.
pub(super) const MSG_LANDLOCK: u32 = 1;
pub(super) const MSG_RUN: u32 = 2;
pub(super) const MSG_FORK_FAILED: u32 = 4;
pub(super) const MSG_STARTED: u32 = 5;
pub(super) const MSG_EXEC_FAILED: u32 = 6;
pub(super) const MSG_EXITED: u32 = 7;
/// Sent once, first, when the plan asks for it: the proxy's listener.
pub(super) const MSG_LISTENER: u32 = 8;
/// Most fds one message carries.
pub(super) const MSG_MAX_FDS: usize = 6;
/// Where a `MSG_RUN`'s fds for the command's stdin, stdout and stderr sit
/// (after the payload memfd, before the store layer). Only these reach the
/// command.
pub(super) const RUN_STDIO: std::ops::Range<usize> = 1..4;
/// Where a `MSG_RUN`'s store layer sits: the Landlock ruleset of
/// `read_view::HostStores::layer`, which the command's last steps
/// restrict it with (the command's socket comes last, after it).
pub(super) const RUN_STORE_LAYER: usize = 4;
/// Bytes of one message.
const MSG_BYTES: usize = 24;

/// One message on the holder's socket (fds travel beside it; see the
/// module doc).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Msg {
    pub kind: u32,
    /// errno or wait status.
    pub arg: i32,
    pub id: u64,
    /// Payload length (`MSG_RUN`) or the init's pid (`MSG_STARTED`).
    pub len: u64,
}

impl Msg {
    /// The message as bytes.
    #[inline]
    pub(super) fn to_bytes(self) -> [u8; MSG_BYTES] {
        let mut out = [0u8; MSG_BYTES];
        out[..4].copy_from_slice(&self.kind.to_ne_bytes());
        out[4..8].copy_from_slice(&self.arg.to_ne_bytes());
        out[8..16].copy_from_slice(&self.id.to_ne_bytes());
        out[16..].copy_from_slice(&self.len.to_ne_bytes());
        out
    }

    /// Parses a message.
    #[inline]
    pub(super) fn from_bytes(b: &[u8]) -> Option<Msg> {
        if b.len() != MSG_BYTES {
            return None;
        }
        Some(Msg {
            kind: u32::from_ne_bytes(b[..4].try_into().ok()?),
            arg: i32::from_ne_bytes(b[4..8].try_into().ok()?),
            id: u64::from_ne_bytes(b[8..16].try_into().ok()?),
            len: u64::from_ne_bytes(b[16..].try_into().ok()?),
        })
    }
}

/// One message from the holder or an init and the fds beside it; `None`
/// once the socket has closed (or failed). The server's side.
pub(super) fn recv(sock: &OwnedFd) -> Option<(Option<Msg>, Vec<OwnedFd>)> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    loop {
        let mut bytes = [0u8; MSG_BYTES];
        let mut space =
            [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MSG_MAX_FDS))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let received = rustix::net::recvmsg(
            sock,
            &mut [std::io::IoSliceMut::new(&mut bytes)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        );
        let n = match received {
            Ok(r) => r.bytes,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => 0,
        };
        let mut fds: Vec<OwnedFd> = Vec::new();
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(rights) = message {
                fds.extend(rights);
            }
        }
        if n == 0 {
            return None;
        }
        return Some((Msg::from_bytes(&bytes[..n]), fds));
    }
}

/// A listener the holder opened (the egress proxy's first, then the
/// gateways'), in the order it sends them.
pub(super) fn recv_listener(sock: &OwnedFd) -> Result<OwnedFd> {
    match recv(sock) {
        Some((Some(msg), fds)) if msg.kind == MSG_LISTENER => fds
            .into_iter()
            .next()
            .ok_or_else(|| start_error("the holder sent no listening socket")),
        _ => Err(start_error("the holder did not send a listening socket")),
    }
}

/// Sends one message with fds to the holder, one sender at a time
/// (`one`). The server's side.
pub(super) fn send(
    sock: &OwnedFd,
    one: &Mutex<()>,
    msg: Msg,
    fds: &[BorrowedFd<'_>],
) -> Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let bytes = msg.to_bytes();
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MSG_MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(Error::internal("too many fds for one request"));
    }
    let _one = lock(one);
    loop {
        match rustix::net::sendmsg(
            sock,
            &[std::io::IoSlice::new(&bytes)],
            &mut control,
            SendFlags::NOSIGNAL,
        ) {
            Ok(_) => return Ok(()),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(start_error(format!("the sandbox's holder is gone: {e}"))),
        }
    }
}

/// The payload of a `MSG_RUN` (see the module doc): `cwd` (empty for the
/// root), `protect` (each path relative to the root and whether it is
/// pinned writable), `masks` (entries made by [`mask_entry`]), `argv`,
/// `env`.
///
/// # Errors
///
/// `invalid_input` when a string holds a NUL byte.
pub(super) fn encode_run(
    cwd: &[u8],
    protect: &[(String, bool)],
    placeholders: &[String],
    masks: &[Vec<u8>],
    argv: &[String],
    env: &[(std::ffi::OsString, std::ffi::OsString)],
) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for n in [protect.len() + masks.len(), argv.len(), env.len()] {
        out.extend_from_slice(&(n as u32).to_le_bytes());
    }
    let mut push = |bytes: &[u8]| -> Result<()> {
        if bytes.contains(&0) {
            return Err(Error::invalid_input(
                "a command, argument or variable contains a NUL byte",
            ));
        }
        out.extend_from_slice(bytes);
        out.push(0);
        Ok(())
    };
    push(cwd)?;
    for (path, writable) in protect {
        let mut entry = vec![if *writable {
            ENTRY_PINNED
        } else if placeholders.contains(path) {
            ENTRY_PLACEHOLDER
        } else {
            ENTRY_READ_ONLY
        }];
        entry.extend_from_slice(path.as_bytes());
        push(&entry)?;
    }
    for entry in masks {
        push(entry)?;
    }
    for arg in argv {
        push(arg.as_bytes())?;
    }
    for (k, v) in env {
        let mut entry = k.as_bytes().to_vec();
        entry.push(b'=');
        entry.extend_from_slice(v.as_bytes());
        push(&entry)?;
    }
    Ok(out)
}

/// A mask entry of a payload: `kind` ([`ENTRY_DENY_READ`] or
/// [`ENTRY_STORE`]) and the path.
pub(super) fn mask_entry(kind: u8, path: &std::path::Path) -> Vec<u8> {
    let mut entry = vec![kind];
    entry.extend_from_slice(path.as_os_str().as_bytes());
    entry
}

/// Room for the control message of [`recv_msg`]: one `SCM_RIGHTS` of
/// [`MSG_MAX_FDS`] fds, in `u64`s (aligned as a `cmsghdr` must be).
const RECV_CONTROL_WORDS: usize = 8;
const _: () = assert!(
    RECV_CONTROL_WORDS * 8 >= 16 + (MSG_MAX_FDS * std::mem::size_of::<RawFd>()).next_multiple_of(8),
    "the control buffer holds a cmsghdr and MSG_MAX_FDS fds"
);
/// Room for the control message of [`send_msg`] (one fd).
const SEND_CONTROL_WORDS: usize = 4;

/// Receives one message and up to [`MSG_MAX_FDS`] fds (the rest are
/// closed). Returns the number of fds, or `None` at end of stream. The
/// fork-side programs' side.
///
/// # Safety
///
/// Async-signal-safe. The caller owns every fd that arrives (they are new
/// in this process) and `sock`.
#[inline]
pub(super) unsafe fn recv_msg(
    sock: RawFd,
    msg: &mut Msg,
    fds: &mut [RawFd; MSG_MAX_FDS],
) -> Option<usize> {
    let mut bytes = [0u8; MSG_BYTES];
    let mut iov = libc::iovec {
        iov_base: bytes.as_mut_ptr().cast(),
        iov_len: bytes.len(),
    };
    let mut control = [0u64; RECV_CONTROL_WORDS];
    // SAFETY: `msghdr` is plain data; all-zero is a valid empty header.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = control.as_mut_ptr().cast();
    hdr.msg_controllen = std::mem::size_of_val(&control);
    let n = loop {
        // SAFETY: `hdr` points at `iov` (→ `bytes`) and `control`, stack
        // buffers of the lengths it gives, alive for the call.
        let n = unsafe { libc::recvmsg(sock, &mut hdr, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 && errno() == libc::EINTR {
            continue;
        }
        break n;
    };
    if n <= 0 {
        return None;
    }
    let mut count = 0;
    // SAFETY: `hdr` was filled by the kernel; its control buffer is ours.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&hdr) };
    while !cmsg.is_null() {
        // SAFETY: a non-null `cmsg` from CMSG_FIRSTHDR/NXTHDR points at a
        // whole header inside `control`.
        let (level, kind, len) =
            unsafe { ((*cmsg).cmsg_level, (*cmsg).cmsg_type, (*cmsg).cmsg_len) };
        if level == libc::SOL_SOCKET && kind == libc::SCM_RIGHTS {
            // SAFETY: as above; the data follows the header.
            let data = unsafe { libc::CMSG_DATA(cmsg) } as *const RawFd;
            // SAFETY: CMSG_LEN is arithmetic.
            let header = unsafe { libc::CMSG_LEN(0) } as usize;
            let fd_count = (len - header) / std::mem::size_of::<RawFd>();
            for i in 0..fd_count {
                // SAFETY: the kernel wrote `fd_count` fds after the header,
                // inside `control` (it truncates what does not fit).
                let fd = unsafe { std::ptr::read_unaligned(data.add(i)) };
                if count < MSG_MAX_FDS {
                    fds[count] = fd;
                    count += 1;
                } else {
                    // SAFETY: the fd just arrived: this process's own.
                    unsafe { libc::close(fd) };
                }
            }
        }
        // SAFETY: `cmsg` is a header of `hdr`'s control buffer.
        cmsg = unsafe { libc::CMSG_NXTHDR(&hdr, cmsg) };
    }
    *msg = Msg::from_bytes(&bytes[..n as usize]).unwrap_or_default();
    Some(count)
}

/// Sends one message, with `fd` beside it when `fd >= 0`. The fork-side
/// programs' side.
///
/// # Safety
///
/// Async-signal-safe; `fd`, when given, is open.
#[inline]
pub(super) unsafe fn send_msg(sock: RawFd, msg: Msg, fd: RawFd) {
    let mut bytes = msg.to_bytes();
    let mut iov = libc::iovec {
        iov_base: bytes.as_mut_ptr().cast(),
        iov_len: bytes.len(),
    };
    let mut control = [0u64; SEND_CONTROL_WORDS];
    // SAFETY: `msghdr` is plain data; all-zero is a valid empty header.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    if fd >= 0 {
        hdr.msg_control = control.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE and CMSG_LEN are arithmetic.
        let (space, len) = unsafe {
            (
                libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32),
                libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32),
            )
        };
        hdr.msg_controllen = space as usize;
        // SAFETY: `control` holds `space` bytes (one fd's worth, checked
        // by the size of `control`), so the first header is inside it.
        let cmsg = unsafe { libc::CMSG_FIRSTHDR(&hdr) };
        // SAFETY: `cmsg` points at a header-sized spot in `control`, its
        // data (one fd) after it.
        unsafe {
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = len as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut RawFd, fd);
        }
    }
    // SAFETY: `hdr` points at stack buffers of the lengths it gives.
    while unsafe { libc::sendmsg(sock, &hdr, libc::MSG_NOSIGNAL) } < 0 && errno() == libc::EINTR {}
}

/// A cursor over the request payload (NUL-terminated strings), in the
/// init.
pub(super) struct Payload {
    at: *const u8,
    end: *const u8,
}

impl Payload {
    /// A cursor over `base[start..len]`.
    ///
    /// # Safety
    ///
    /// `base..base + len` is a readable mapping that outlives the cursor and
    /// every string it hands out, and `start <= len`.
    #[inline]
    pub(super) unsafe fn new(base: *const u8, start: usize, len: usize) -> Payload {
        // SAFETY: both offsets are within the mapping (the caller's promise).
        unsafe {
            Payload {
                at: base.add(start),
                end: base.add(len),
            }
        }
    }

    /// The next string (pointer to its first byte, NUL-terminated; the end
    /// of the mapping when the payload is exhausted or malformed).
    #[inline]
    pub(super) fn next(&mut self) -> *const libc::c_char {
        let start = self.at;
        while self.at < self.end {
            // SAFETY: `at < end`: inside the mapping ([`Payload::new`]).
            let byte = unsafe { *self.at };
            // SAFETY: `at < end`, so `at + 1 <= end`.
            self.at = unsafe { self.at.add(1) };
            if byte == 0 {
                break;
            }
        }
        start.cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_survives_its_bytes() {
        let msg = Msg {
            kind: MSG_STARTED,
            arg: -3,
            id: 42,
            len: 7,
        };
        assert_eq!(Msg::from_bytes(&msg.to_bytes()), Some(msg));
        assert_eq!(Msg::from_bytes(&msg.to_bytes()[..23]), None);
    }

    #[test]
    fn a_run_payload_reads_back_through_the_cursor() {
        let payload = encode_run(
            b"src",
            &[
                (".git".to_string(), true),
                (".git/config".to_string(), false),
                (".claude".to_string(), false),
            ],
            &[".claude".to_string()],
            &[mask_entry(
                ENTRY_STORE,
                std::path::Path::new("/home/u/.ssh"),
            )],
            &["sh".to_string(), "-c".to_string()],
            &[("A".into(), "1".into())],
        )
        .unwrap();
        let counts: Vec<u32> = payload[..PAYLOAD_HEADER_BYTES]
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(counts, [4, 2, 1]);
        // SAFETY: `payload` outlives the cursor and its strings.
        let mut cursor =
            unsafe { Payload::new(payload.as_ptr(), PAYLOAD_HEADER_BYTES, payload.len()) };
        let mut strings = Vec::new();
        for _ in 0..8 {
            // SAFETY: each string the cursor gives is NUL-terminated inside
            // `payload`.
            strings.push(
                unsafe { std::ffi::CStr::from_ptr(cursor.next()) }
                    .to_bytes()
                    .to_vec(),
            );
        }
        let expected: [&[u8]; 8] = [
            b"src",
            b"w.git",
            b"r.git/config",
            b"p.claude",
            b"m/home/u/.ssh",
            b"sh",
            b"-c",
            b"A=1",
        ];
        assert_eq!(strings, expected);
        assert!(encode_run(b"", &[], &[], &[], &["a\0b".to_string()], &[]).is_err());
    }
}
