//! Syscall wrappers the `linux` provider's fork-side programs (holder,
//! init, command) share. Each one is async-signal-safe: it allocates
//! nothing, takes no lock and makes plain syscalls on the stack data and
//! NUL-terminated strings it is given, so a forked child of a
//! multi-threaded process may call it.
//!
//! Those that touch no memory but what their arguments lend them (and own
//! every fd they open) are safe functions; the `unsafe` ones say what their
//! callers must keep.
//!
//! Every fork-side function is `#[inline]`, here and in the other
//! fork-side files, so that it is compiled into the holder's codegen unit
//! beside the holder (see `holder.rs`, "Where its code lies").

#![allow(unsafe_code)]

use std::ffi::CStr;
use std::os::fd::RawFd;

/// An inaccessible page below each stack the fork-side programs map for a
/// `clone`d child: an overflow faults instead of writing into the memory of
/// the process it shares.
pub(super) const GUARD_BYTES: usize = 4096;

/// The calling thread's `errno`.
#[inline]
pub(super) fn errno() -> i32 {
    // SAFETY: `__errno_location` points at the calling thread's errno.
    unsafe { *libc::__errno_location() }
}

/// `buf` up to its first NUL, as a C string (empty when it has none): what
/// `CStr::from_bytes_until_nul` gives, without a call out of this file.
#[inline]
pub(super) fn until_nul(buf: &[u8]) -> &CStr {
    let Some(n) = buf.iter().position(|&b| b == 0) else {
        return c"";
    };
    // SAFETY: `buf[n]` is the first NUL: `buf[..=n]` ends with it and holds
    // no other.
    unsafe { CStr::from_bytes_with_nul_unchecked(&buf[..=n]) }
}

/// Sets the calling thread's `errno` (to report a step's failure with the
/// errno of an earlier call).
#[inline]
pub(super) fn set_errno(value: i32) {
    // SAFETY: `__errno_location` points at the calling thread's errno.
    unsafe { *libc::__errno_location() = value };
}

/// A null pointer, or the string's.
#[inline]
fn ptr_or_null(s: Option<&CStr>) -> *const libc::c_char {
    s.map_or(std::ptr::null(), CStr::as_ptr)
}

/// `mount(2)`; true when it succeeded (`errno` says why not).
#[inline]
pub(super) fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> bool {
    // SAFETY: every pointer is null or a NUL-terminated string borrowed
    // for the call.
    unsafe {
        libc::mount(
            ptr_or_null(source),
            target.as_ptr(),
            ptr_or_null(fstype),
            flags,
            ptr_or_null(data).cast(),
        ) == 0
    }
}

/// Binds `path` onto itself, recursively (a mount point cannot be renamed
/// or removed); true when it succeeded.
#[inline]
pub(super) fn bind_onto_itself(path: &CStr) -> bool {
    mount(Some(path), path, None, libc::MS_BIND | libc::MS_REC, None)
}

/// `mkdir(2)`; true when it succeeded.
#[inline]
pub(super) fn mkdir(path: &CStr, mode: libc::mode_t) -> bool {
    // SAFETY: `path` is NUL-terminated, borrowed for the call.
    unsafe { libc::mkdir(path.as_ptr(), mode) == 0 }
}

/// `open(2)` of `path`: the new fd (the caller's to close), or -1.
#[inline]
pub(super) fn open(path: &CStr, flags: libc::c_int) -> RawFd {
    // SAFETY: `path` is NUL-terminated, borrowed for the call; no mode is
    // read without `O_CREAT`, which callers pass to [`create`] instead.
    unsafe { libc::open(path.as_ptr(), flags) }
}

/// `open(2)` of `path` with `O_CREAT` and `mode`: the new fd, or -1.
#[inline]
pub(super) fn create(path: &CStr, flags: libc::c_int, mode: libc::mode_t) -> RawFd {
    // SAFETY: `path` is NUL-terminated, borrowed for the call.
    unsafe { libc::open(path.as_ptr(), flags | libc::O_CREAT, mode) }
}

/// `stat(2)` of `path`.
#[inline]
pub(super) fn stat(path: &CStr) -> Option<libc::stat> {
    // SAFETY: `stat` is plain data; all-zero is valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and `st` a valid out-pointer.
    (unsafe { libc::stat(path.as_ptr(), &mut st) } == 0).then_some(st)
}

/// Writes `data` to the file at `path` in one `write`.
#[inline]
pub(super) fn write_file(path: &CStr, data: &[u8]) -> bool {
    let fd = open(path, libc::O_WRONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return false;
    }
    // SAFETY: `data` is a valid buffer of its length; `fd` was opened just
    // now and is closed here, once.
    unsafe {
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        libc::close(fd);
        n == data.len() as isize
    }
}

/// Writes all of `data` to `fd` in one `write` (a pipe's few bytes; a
/// failure only loses them).
#[inline]
pub(super) fn write_bytes(fd: RawFd, data: &[u8]) {
    // SAFETY: `data` is a valid buffer of its length; writing to a bad fd
    // only fails.
    unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
}

/// Reads up to `buf.len()` bytes from `fd`; `read(2)`'s result.
#[inline]
pub(super) fn read_bytes(fd: RawFd, buf: &mut [u8]) -> isize {
    // SAFETY: `buf` is a valid, writable buffer of its length.
    unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) }
}

/// An anonymous private mapping of `len` bytes for a child's stack, its
/// lowest [`GUARD_BYTES`] inaccessible; `None` when either step failed.
#[inline]
pub(super) fn map_stack(len: usize) -> Option<*mut libc::c_void> {
    // SAFETY: a new anonymous mapping aliases nothing.
    let stack = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len + GUARD_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if stack == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: the first page of the mapping just made; nothing uses it.
    if unsafe { libc::mprotect(stack, GUARD_BYTES, libc::PROT_NONE) } != 0 {
        return None;
    }
    Some(stack)
}

/// The top of a stack of `len` bytes mapped by [`map_stack`] (stacks grow
/// down).
#[inline]
pub(super) fn stack_top(stack: *mut libc::c_void, len: usize) -> *mut libc::c_void {
    stack.cast::<u8>().wrapping_add(len + GUARD_BYTES).cast()
}

/// The mount flags that must be kept when remounting `path` read-only in a
/// user namespace (the kernel locks them on mounts from a parent namespace).
#[inline]
pub(super) fn locked_flags(path: &CStr) -> libc::c_ulong {
    // SAFETY: `statvfs` is plain data; all-zero is valid.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and `st` a valid out-pointer.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return 0;
    }
    let f = st.f_flag;
    let mut flags = 0;
    for (st_flag, ms_flag) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if f & st_flag != 0 {
            flags |= ms_flag;
        }
    }
    if f & (libc::ST_NOATIME | libc::ST_RELATIME) == 0 {
        flags |= libc::MS_STRICTATIME;
    }
    flags
}

/// Remounts the bind at `path` with `extra` flags (`MS_RDONLY` or none)
/// and the flags the kernel keeps locked; true when it succeeded.
#[inline]
pub(super) fn remount_bind(path: &CStr, extra: libc::c_ulong) -> bool {
    mount(
        None,
        path,
        None,
        libc::MS_REMOUNT | libc::MS_BIND | extra | locked_flags(path),
        None,
    )
}

/// Installs a seccomp filter on the calling thread; `prctl`'s result.
#[inline]
pub(super) fn install_filter(filter: &[libc::sock_filter]) -> libc::c_int {
    let prog = libc::sock_fprog {
        len: filter.len() as libc::c_ushort,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: the kernel copies the program from `prog` (which borrows
    // `filter` for the call) and writes nothing.
    unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER as libc::c_ulong,
            &prog as *const libc::sock_fprog,
            0,
            0,
        )
    }
}

/// Empties the capability bounding set (the holder does, once); true when
/// done (`errno` says why not).
#[inline]
pub(super) fn drop_bounding_set() -> bool {
    /// Higher than any capability number the kernel knows.
    const CAP_SCAN_LIMIT: libc::c_ulong = 64;
    for cap in 0..CAP_SCAN_LIMIT {
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
            // Capabilities are numbered without gaps: EINVAL means past
            // the last one the kernel knows.
            if errno() == libc::EINVAL && cap > 0 {
                break;
            }
            return false;
        }
    }
    true
}

/// Empties the ambient, effective, permitted and inheritable capability
/// sets; with the bounding set empty (the holder's), nothing the command
/// execs can regain any. True when done (`errno` says why not).
#[inline]
pub(super) fn drop_capabilities() -> bool {
    /// `_LINUX_CAPABILITY_VERSION_3`.
    const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    // SAFETY: prctl with integer arguments only.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    let header = Header {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: `header` and `data` have the kernel's layout (version 3 takes
    // two `Data`); the kernel only reads them.
    unsafe { libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) == 0 }
}
