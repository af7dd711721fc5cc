//! The reaper shim of the `local` provider (its only `unsafe` code), and
//! the async-signal-safe helpers it shares with the `linux` provider's
//! fork-side programs ([`signal_set`], [`decimal`], [`page_size`]).
//!
//! Every command runs under a small shim process that cubby forks between
//! `fork` and `exec` of the command (in `pre_exec`), in four stages:
//!
//! 1. The child of `Command::spawn` changes into the confined working
//!    directory (`fchdir` on a directory fd opened beneath the root), makes
//!    itself a child subreaper (`PR_SET_CHILD_SUBREAPER`) and blocks `SIGTERM`
//!    and `SIGUSR1`.
//! 2. It forks again. The grandchild — the command — puts itself in a new
//!    process group, unblocks the signals and returns, so that `std` execs
//!    the command with the stdio it prepared.
//! 3. The child becomes the shim: it installs handlers for `SIGTERM` ("stop
//!    politely") and `SIGUSR1` ("kill everything now"), closes every fd (so
//!    it holds no pipe and `spawn` returns) and waits for children. Every
//!    descendant that is orphaned — a daemon that double-forks, a `setsid`
//!    escapee — is re-parented to the shim, so the shim always finds them.
//! 4. When the command exits, or on `SIGUSR1`, it kills the command's group
//!    and every child it has (reading `/proc/<shim>/task/<shim>/children`),
//!    again and again, until it has none left; then it exits with the
//!    command's status (re-raising the command's signal when it died of one).
//!
//! Between `fork` and `exec` nothing may allocate or take a lock: every
//! buffer here lives on the stack and every call is a plain syscall.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Set by the shim's signal handlers, read by its wait loop.
static SHIM_FLAGS: AtomicU32 = AtomicU32::new(0);
const FLAG_TERM: u32 = 1;
const FLAG_KILL: u32 = 2;

/// Pause between kill passes while descendants are still dying.
const KILL_PASS_PAUSE_NS: libc::c_long = 1_000_000;

extern "C" fn on_signal(sig: libc::c_int) {
    let flag = if sig == libc::SIGUSR1 {
        FLAG_KILL
    } else {
        FLAG_TERM
    };
    SHIM_FLAGS.fetch_or(flag, Ordering::SeqCst);
}

/// Arranges for `cmd` to run under a reaper shim, in the directory `cwd_fd`.
///
/// The pid `spawn` reports is the shim's: signal it with [`SIGNAL_STOP`](super::SIGNAL_STOP) or
/// [`SIGNAL_KILL_TREE`](super::SIGNAL_KILL_TREE), never with `SIGKILL` (that would orphan the tree to
/// init). Its exit status is the command's.
pub(crate) fn run_under_shim(cmd: &mut Command, cwd_fd: RawFd) {
    // SAFETY: the closure runs in the child between fork and exec. It only
    // calls async-signal-safe syscalls through libc, uses stack buffers, and
    // never allocates or locks (io::Error::last_os_error does not allocate).
    unsafe {
        cmd.pre_exec(move || shim_pre_exec(cwd_fd));
    }
}

#[inline]
pub(crate) fn signal_set(signals: &[libc::c_int]) -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it fully.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, exclusive sigset_t.
    unsafe {
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
    }
    set
}

fn shim_pre_exec(cwd_fd: RawFd) -> io::Result<()> {
    // SAFETY: fchdir/prctl/sigprocmask/fork are async-signal-safe syscalls on
    // valid arguments; `cwd_fd` stays open in the parent until spawn returns.
    unsafe {
        if libc::fchdir(cwd_fd) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        let set = signal_set(&[libc::SIGTERM, libc::SIGUSR1]);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        let pid = libc::fork();
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // The command: its own group, signals as they were; std execs it.
            libc::setpgid(0, 0);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            return Ok(());
        }
        shim_main(pid, &set, false, -1)
    }
}

/// The shim's life after the fork. Never returns.
///
/// With `pid_namespace`, `command` is the init of the command's own pid
/// namespace: killing it takes every descendant with it, and orphans are
/// re-parented to it rather than to the shim, so the shim has no other
/// children to sweep. The init writes the command's wait status to
/// `status_fd` (else `-1`) before it exits.
///
/// # Safety
///
/// Must only run in a forked, single-threaded child.
pub(crate) unsafe fn shim_main(
    command: libc::pid_t,
    blocked: &libc::sigset_t,
    pid_namespace: bool,
    status_fd: libc::c_int,
) -> ! {
    // SAFETY: plain syscalls on valid arguments in a single-threaded child.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as *const () as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
        libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut());
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        libc::sigprocmask(libc::SIG_UNBLOCK, blocked, std::ptr::null_mut());
        // Hold no fd: the pipes must reach EOF when the tree is gone, and
        // spawn() must see the exec-status pipe close.
        if status_fd >= 0 {
            let keep = status_fd as libc::c_uint;
            if keep > 0 {
                libc::close_range(0, keep - 1, 0);
            }
            libc::close_range(keep + 1, libc::c_uint::MAX, 0);
        } else {
            libc::close_range(0, libc::c_uint::MAX, 0);
        }

        let me = libc::getpid();
        let mut command_status: Option<libc::c_int> = None;
        let mut killing = false;
        loop {
            let flags = SHIM_FLAGS.swap(0, Ordering::SeqCst);
            if flags & FLAG_KILL != 0 {
                killing = true;
            }
            if flags & FLAG_TERM != 0 && !killing {
                libc::kill(-command, libc::SIGTERM);
                if !pid_namespace {
                    signal_children(me, libc::SIGTERM);
                }
            }
            let sweeping = killing || command_status.is_some();
            if sweeping {
                if !pid_namespace {
                    libc::kill(-command, libc::SIGKILL);
                    signal_children(me, libc::SIGKILL);
                } else if command_status.is_none() {
                    // The namespace's init: the kernel kills the rest.
                    libc::kill(command, libc::SIGKILL);
                }
            }
            let mut status: libc::c_int = 0;
            let options = if sweeping { libc::WNOHANG } else { 0 };
            let reaped = libc::waitpid(-1, &mut status, options);
            if reaped == command {
                command_status = Some(status);
            } else if reaped == 0 {
                let pause = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: KILL_PASS_PAUSE_NS,
                };
                libc::nanosleep(&pause, std::ptr::null_mut());
            } else if reaped < 0 {
                let errno = *libc::__errno_location();
                if errno == libc::ECHILD {
                    break;
                }
            }
        }
        // In a pid namespace, `command` is the namespace's init; it sends
        // the real command's wait status before it exits.
        if status_fd >= 0 {
            let mut raw = [0u8; 4];
            if libc::read(status_fd, raw.as_mut_ptr().cast(), raw.len()) == 4 {
                command_status = Some(libc::c_int::from_ne_bytes(raw));
            }
        }
        match command_status {
            Some(status) if libc::WIFSIGNALED(status) => {
                let sig = libc::WTERMSIG(status);
                libc::signal(sig, libc::SIG_DFL);
                let all = signal_set(&[sig]);
                libc::sigprocmask(libc::SIG_UNBLOCK, &all, std::ptr::null_mut());
                libc::kill(me, sig);
                libc::_exit(128 + sig)
            }
            Some(status) if libc::WIFEXITED(status) => libc::_exit(libc::WEXITSTATUS(status)),
            _ => libc::_exit(255),
        }
    }
}

/// Sends `sig` to every child of `me` (orphans re-parented to the shim
/// included), read from `/proc/<me>/task/<me>/children` into a stack buffer.
///
/// # Safety
///
/// Async-signal-safe; no allocation.
unsafe fn signal_children(me: libc::pid_t, sig: libc::c_int) {
    let digits = decimal(me);
    let pid = &digits.0[..digits.1];
    let parts: [&[u8]; 5] = [b"/proc/", pid, b"/task/", pid, b"/children"];
    let mut path = [0u8; 64];
    let mut len = 0;
    for part in parts {
        path[len..len + part.len()].copy_from_slice(part);
        len += part.len();
    }
    path[len] = 0;
    // SAFETY: `path` is NUL-terminated; the fd is closed below.
    unsafe {
        let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return;
        }
        let mut buf = [0u8; 8192];
        let mut carry: libc::pid_t = 0;
        let mut in_number = false;
        loop {
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            if n <= 0 {
                break;
            }
            for &b in &buf[..n as usize] {
                if b.is_ascii_digit() {
                    carry = carry
                        .saturating_mul(10)
                        .saturating_add((b - b'0') as libc::pid_t);
                    in_number = true;
                } else if in_number {
                    libc::kill(carry, sig);
                    carry = 0;
                    in_number = false;
                }
            }
        }
        if in_number {
            libc::kill(carry, sig);
        }
        libc::close(fd);
    }
}

/// The system's page size in bytes (`None` if it cannot tell).
pub(crate) fn page_size() -> Option<u64> {
    // SAFETY: sysconf reads a constant of the system; no memory is involved.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(page).ok().filter(|&p| p > 0)
}

/// Decimal digits of a pid, on the stack.
#[inline]
pub(crate) fn decimal(mut n: libc::pid_t) -> ([u8; 12], usize) {
    let mut out = [0u8; 12];
    let mut tmp = [0u8; 12];
    let mut i = 0;
    if n <= 0 {
        out[0] = b'0';
        return (out, 1);
    }
    while n > 0 && i < tmp.len() {
        tmp[i] = b'0' + (n % 10) as u8;
        n /= 10;
        i += 1;
    }
    for k in 0..i {
        out[k] = tmp[i - 1 - k];
    }
    (out, i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_digits() {
        let (d, n) = decimal(40213);
        assert_eq!(&d[..n], b"40213");
        let (d, n) = decimal(7);
        assert_eq!(&d[..n], b"7");
    }
}
