//! The command's last steps: the third of the `linux` provider's fork-side
//! programs, pid 2 of the command's pid namespace. Its init starts it with
//! `clone(CLONE_VM | CLONE_VFORK)`: it runs in the init's memory, on a
//! stack of its own, while the init waits until it execs or fails, so it
//! allocates nothing and changes nothing of that memory but its stack.
//!
//! In order ([`command_exec`]): its stdio only (never the payload or the
//! socket its init reports its end on), the signals the holder ignored
//! reset, its rlimits, `PR_SET_NO_NEW_PRIVS` and the sandbox's Landlock
//! ruleset, the store layer (with its own `/proc` added), the read layer
//! with `read_scope = "system"`, every capability
//! dropped, its seccomp filter, then `execve` (with a `PATH` search as
//! `execvp` would, in the command's own `PATH`). A failure's errno goes to
//! the init on the exec-error pipe.

#![allow(unsafe_code)]

use std::os::fd::RawFd;
use std::sync::atomic::Ordering;

use super::holder::{CommandSetup, IGNORED_SIGNALS};
use super::landlock::{READ_RULES, restrict_store_layer};
use super::syscalls::{self, errno};
use super::wire::{MSG_MAX_FDS, RUN_STDIO, RUN_STORE_LAYER};

/// Stack of the command's last steps (they use a few KiB).
pub(super) const COMMAND_STACK_BYTES: usize = 256 * 1024;
/// Exit status of a command whose last steps failed.
const COMMAND_FAILED: libc::c_int = 127;
/// Room for one candidate of the `PATH` search (`PATH_MAX`).
const MAX_EXEC_PATH_BYTES: usize = 4096;
/// Signals the command resets (the bits of [`IGNORED_SIGNALS`]).
const MAX_SIGNAL: libc::c_int = 64;

/// What the command's last steps need, on the init's stack.
pub(super) struct LastSteps<'a> {
    pub setup: &'a CommandSetup,
    pub landlock_fd: RawFd,
    pub fds: &'a [RawFd; MSG_MAX_FDS],
    /// Null-terminated arrays of NUL-terminated strings, in the init's
    /// memory.
    pub argv: *const *const libc::c_char,
    pub envp: *const *const libc::c_char,
    /// The value of the command's `PATH`, or null.
    pub path_var: *const libc::c_char,
    /// Write end of the exec pipe: the errno goes there if exec fails.
    pub err_fd: RawFd,
}

/// Entry of the command's child (`clone` with `CLONE_VM | CLONE_VFORK`).
#[inline]
pub(super) extern "C" fn command_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the init's `LastSteps`, alive while the init waits
    // (`CLONE_VFORK`) for this child to exec or exit.
    let steps = unsafe { &*(arg as *const LastSteps<'_>) };
    // SAFETY: this is that child; `steps` was filled by the init.
    let err = unsafe { command_exec(steps) };
    syscalls::write_bytes(steps.err_fd, &err.to_ne_bytes());
    // SAFETY: `_exit` ends this process without running anything else (it
    // never returns into the init's stack frames).
    unsafe { libc::_exit(COMMAND_FAILED) }
}

/// The command's last steps before `execve`; returns the errno of the
/// failure (never returns on success).
///
/// # Safety
///
/// The init's `CLONE_VM | CLONE_VFORK` child only (see [`command_main`]):
/// it changes this process's fds, signals, limits and credentials, which
/// are its own, and reads `steps`' arrays, which the init made.
#[inline]
unsafe fn command_exec(steps: &LastSteps<'_>) -> i32 {
    let setup = steps.setup;
    // Its stdio only: never the payload or the socket its init reports its
    // end on (a command holding that could report its own exit).
    for (target, fd) in steps.fds[RUN_STDIO].iter().enumerate() {
        // SAFETY: dup2 takes fds; 0–2 are this process's to replace.
        if unsafe { libc::dup2(*fd, target as libc::c_int) } < 0 {
            return errno();
        }
    }
    let ignored = IGNORED_SIGNALS.load(Ordering::Relaxed);
    for sig in 1..=MAX_SIGNAL {
        if ignored & (1 << (sig - 1)) != 0 {
            // SAFETY: the default disposition, which runs no code here.
            unsafe { libc::signal(sig, libc::SIG_DFL) };
        }
    }
    for &(resource, value) in &setup.rlimits {
        let limit = libc::rlimit {
            rlim_cur: value,
            rlim_max: value,
        };
        // SAFETY: `limit` is a valid rlimit, only read.
        if unsafe { libc::setrlimit(resource, &limit) } != 0 {
            return errno();
        }
    }
    // SAFETY: prctl with integer arguments only.
    let no_new_privs = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } == 0;
    // Without the ruleset the command does not start (`EPERM`).
    if steps.landlock_fd < 0 {
        return libc::EPERM;
    }
    if !no_new_privs {
        return errno();
    }
    // SAFETY: landlock_restrict_self takes an fd and flags.
    if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, steps.landlock_fd, 0u32) } != 0 {
        return errno();
    }
    // The store layer (`read_view.rs`): credential stores unreadable by
    // what it grants, whatever happens to the masks on their names.
    let e = restrict_store_layer(steps.fds[RUN_STORE_LAYER]);
    if e != 0 {
        return e;
    }
    if READ_RULES.system_scope() {
        let e = READ_RULES.restrict();
        if e != 0 {
            return e;
        }
    }
    if !syscalls::drop_capabilities() {
        return errno();
    }
    if syscalls::install_filter(&setup.filter) != 0 {
        return errno();
    }
    // SAFETY: `argv` holds at least the program and a null (the init
    // refuses an empty argv).
    let program = unsafe { *steps.argv };
    // SAFETY: `program` is NUL-terminated.
    let has_slash = !unsafe { libc::strchr(program, b'/' as libc::c_int) }.is_null();
    if !has_slash && !steps.path_var.is_null() {
        // SAFETY: `program` and `path_var` are NUL-terminated; the arrays
        // are the init's.
        return unsafe { exec_in_path(program, steps.path_var, steps.argv, steps.envp) };
    }
    // SAFETY: `program` and both arrays are NUL- and null-terminated.
    unsafe { libc::execve(program, steps.argv, steps.envp) };
    errno()
}

/// Searches `path_var` (a `PATH` value) for `program` as `execvp` would
/// and execs the first that can be; returns the errno that explains the
/// failure (`ENOENT` when none was found).
///
/// # Safety
///
/// `program` and `path_var` are NUL-terminated; `argv` and `envp` are
/// null-terminated arrays of NUL-terminated strings.
#[inline]
unsafe fn exec_in_path(
    program: *const libc::c_char,
    path_var: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
) -> i32 {
    // SAFETY: the caller's promise: both are NUL-terminated.
    let (program, path) = unsafe {
        (
            std::ffi::CStr::from_ptr(program).to_bytes(),
            std::ffi::CStr::from_ptr(path_var).to_bytes(),
        )
    };
    let mut buf = [0u8; MAX_EXEC_PATH_BYTES];
    let mut last = libc::ENOENT;
    for dir in path.split(|&b| b == b':') {
        if dir.len() + program.len() + 2 > buf.len() {
            continue;
        }
        // An empty entry is the working directory.
        let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
        let at = dir.len();
        buf[..at].copy_from_slice(dir);
        buf[at] = b'/';
        buf[at + 1..at + 1 + program.len()].copy_from_slice(program);
        buf[at + 1 + program.len()] = 0;
        // SAFETY: `buf` is NUL-terminated just now; the arrays are the
        // caller's (see the promise above).
        unsafe { libc::execve(buf.as_ptr().cast(), argv, envp) };
        let e = errno();
        if e != libc::ENOENT && e != libc::ENOTDIR {
            last = e;
        }
    }
    last
}
