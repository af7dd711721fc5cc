//! The init: the second of the `linux` provider's three fork-side programs,
//! pid 1 of one command's own pid namespace, forked by the holder (ahead of
//! its request, or for it) and never exec'd. It allocates nothing: it is a
//! copy of the holder, itself a fork of the multi-threaded server.
//!
//! Its stages, in order:
//!
//! 1. Before its request comes ([`init_prepare`]): a session of its own (no
//!    controlling terminal; under `cubby exec` a process group of its own
//!    instead), a death signal, its `SIGTERM` handler, its own mount
//!    namespace with a fresh `/proc`, the exec-error pipe and the stack of
//!    the command's last steps.
//! 2. Once it has the request ([`namespace_init`]): it maps the payload,
//!    binds the protected paths read-only (the directories above them
//!    pinned), masks what the holder did not (made or replaced since),
//!    changes into the working directory beneath the root, and starts the
//!    command ([`command`](super::command), pid 2) in its memory.
//! 3. It reports `started` (or the exec's errno) on the command's socket,
//!    forwards a `SIGTERM` to its process group, and when the command ends
//!    reports its wait status and exits: the kernel then kills everything
//!    left in the namespace.

#![allow(unsafe_code)]

use std::ffi::CStr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};

use super::command::{self, COMMAND_STACK_BYTES, LastSteps};
use super::holder::{CommandSetup, close_each};
use super::mask::{MASK_DEV, cover_placeholder, mask_late};
use super::syscalls::{self, GUARD_BYTES, errno};
use super::wire::{
    self, ENTRY_DENY_READ, ENTRY_PINNED, ENTRY_PLACEHOLDER, ENTRY_STORE, MSG_EXEC_FAILED,
    MSG_EXITED, MSG_MAX_FDS, MSG_STARTED, Msg, PAYLOAD_HEADER_BYTES, Payload, RUN_STDIO,
};
use crate::sandbox::local::shim;

/// Exit status of an init whose command could not start.
const INIT_FAILED: libc::c_int = 127;

/// Set by the init's `SIGTERM` handler.
static INIT_TERM: AtomicBool = AtomicBool::new(false);

#[inline]
extern "C" fn on_init_term(_: libc::c_int) {
    INIT_TERM.store(true, Ordering::SeqCst);
}

/// The init's handler of the terminal's `SIGINT` and `SIGQUIT`: nothing.
/// They reach the command too (the same process group), and the init
/// reports how it ended. A handler, unlike `SIG_IGN`, is not inherited
/// past the command's `execve`.
#[inline]
extern "C" fn on_init_interrupt(_: libc::c_int) {}

/// What an init sets up before its request comes.
pub(super) struct Prepared {
    /// 0, or the errno of the step that failed (reported with the request).
    errno: i32,
    /// The command's exec-error pipe (read end, write end).
    exec_pipe: [libc::c_int; 2],
    /// The stack of the command's last steps (guard page first).
    stack: *mut libc::c_void,
}

/// One command's request, as the init has it.
pub(super) struct Request {
    /// The `MSG_RUN` message.
    pub msg: Msg,
    /// `[payload memfd, stdin, stdout, stderr, the command's socket]`.
    pub fds: [RawFd; MSG_MAX_FDS],
    /// The init's pid in the sandbox's pid namespace (0 if unknown).
    pub host_pid: libc::pid_t,
    /// The pipe on which the init forked ahead tells the holder that it
    /// took a request (-1 for one forked for its request).
    pub taken_fd: RawFd,
}

/// Installs `handler` for `sig` (no flags, nothing blocked in it).
#[inline]
fn handle(sig: libc::c_int, handler: extern "C" fn(libc::c_int)) {
    // SAFETY: `sigaction` is plain data; all-zero is valid.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler as *const () as libc::sighandler_t;
    // SAFETY: `action.sa_mask` is a valid signal set to empty.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    // SAFETY: `action` is a valid action; its handler only stores to an
    // atomic (or does nothing), which is async-signal-safe.
    unsafe { libc::sigaction(sig, &action, std::ptr::null_mut()) };
}

/// The first steps of the init of one command's pid namespace (pid 1),
/// which need no request: its process group, death signal and `SIGTERM`
/// handler, its own mount namespace with a fresh `/proc`, the exec-error
/// pipe and the stack of the command's last steps.
///
/// # Safety
///
/// A forked child of the holder only (single-threaded, allocating nothing).
#[inline]
pub(super) unsafe fn init_prepare(setup: &CommandSetup) -> Prepared {
    let mut prepared = Prepared {
        errno: 0,
        exec_pipe: [-1; 2],
        stack: libc::MAP_FAILED,
    };
    if setup.foreground {
        // `cubby exec`: the caller's session and terminal are kept.
        // SAFETY: setpgid takes integers.
        unsafe { libc::setpgid(0, 0) };
    } else {
        // A session of its own, without a controlling terminal: the
        // server's (an agent's terminal, when it started cubby) is not the
        // command's `/dev/tty`. Also a process group of its own.
        // SAFETY: setsid takes nothing.
        unsafe { libc::setsid() };
    }
    // SAFETY: prctl with integer arguments only.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    let empty = shim::signal_set(&[]);
    // SAFETY: `empty` is a valid signal set; the old mask is not wanted.
    unsafe { libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) };
    handle(libc::SIGTERM, on_init_term);
    handle(libc::SIGINT, on_init_interrupt);
    handle(libc::SIGQUIT, on_init_interrupt);
    // SAFETY: unshare takes an integer; this process is single-threaded.
    let ok = unsafe { libc::unshare(libc::CLONE_NEWNS) } == 0
        // SAFETY: `root` is NUL-terminated.
        && unsafe { libc::chdir(setup.root.as_ptr()) } == 0
        && syscalls::mount(
            Some(c"proc"),
            c"/proc",
            Some(c"proc"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            None,
        )
        // SAFETY: `exec_pipe` has room for the two fds.
        && unsafe { libc::pipe2(prepared.exec_pipe.as_mut_ptr(), libc::O_CLOEXEC) } == 0;
    if !ok {
        prepared.errno = errno();
        return prepared;
    }
    // The command's last steps run in the init's memory (CLONE_VM) on a
    // stack of their own while the init waits (CLONE_VFORK) until they exec
    // or fail: no page tables copied, no copy-on-write faults after.
    match syscalls::map_stack(COMMAND_STACK_BYTES) {
        Some(stack) => prepared.stack = stack,
        None => prepared.errno = errno(),
    }
    prepared
}

/// Sends `kind` with `arg` for `request` on the command's socket.
#[inline]
fn report(request: &Request, kind: u32, arg: i32) {
    let msg = Msg {
        kind,
        arg,
        id: request.msg.id,
        len: 0,
    };
    // SAFETY: the command's socket, the init's own copy.
    unsafe { wire::send_msg(request.fds[MSG_MAX_FDS - 1], msg, -1) };
}

/// Reports that the command could not start (`errno`) and ends the init.
#[inline]
fn fail(request: &Request, errno: i32) -> ! {
    report(request, MSG_EXEC_FAILED, errno);
    // SAFETY: `_exit` ends this process without running anything else.
    unsafe { libc::_exit(INIT_FAILED) }
}

/// The rest of the init of one command's pid namespace, once its request
/// has come: binds the protected paths, forks the command, forwards a stop
/// to its group, and when the command ends reports its status and exits —
/// whereupon the kernel kills everything left in the namespace.
///
/// # Safety
///
/// A forked child of the holder only, after [`init_prepare`]; the fds of
/// `request` are its own.
#[inline]
pub(super) unsafe fn namespace_init(
    setup: &CommandSetup,
    landlock_fd: RawFd,
    request: &Request,
    prepared: &Prepared,
) -> ! {
    let fds = &request.fds;
    if prepared.errno != 0 {
        fail(request, prepared.errno);
    }
    let len = request.msg.len as usize;
    // SAFETY: a new private read-only mapping of the payload memfd; it
    // aliases nothing of this process.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len.max(1),
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            fds[0],
            0,
        )
    };
    if map == libc::MAP_FAILED || len < PAYLOAD_HEADER_BYTES {
        fail(request, errno());
    }
    let base = map as *const u8;
    let count = |i: usize| {
        let mut b = [0u8; 4];
        // SAFETY: `i < 3`: the counts lie within the mapping's first
        // `PAYLOAD_HEADER_BYTES` (checked above).
        unsafe { std::ptr::copy_nonoverlapping(base.add(i * 4), b.as_mut_ptr(), 4) };
        u32::from_le_bytes(b) as usize
    };
    let (nprotect, argc, envc) = (count(0), count(1), count(2));
    // SAFETY: the mapping is `len` bytes, readable, and stays mapped for
    // the init's life (and the command's, which execs a new image).
    let mut payload = unsafe { Payload::new(base, PAYLOAD_HEADER_BYTES, len) };
    // SAFETY: the server NUL-terminates every string of the payload
    // (`wire::encode_run`), so each string the cursor hands out ends within
    // the mapping (the same holds for each `CStr::from_ptr` below).
    let cwd = unsafe { CStr::from_ptr(payload.next()) };
    let mask_dev = MASK_DEV.load(Ordering::Relaxed);
    for _ in 0..nprotect {
        // SAFETY: see above.
        let entry = unsafe { CStr::from_ptr(payload.next()) };
        let Some((&kind, _)) = entry.to_bytes().split_first() else {
            continue;
        };
        // SAFETY: one byte on, still within the same NUL-terminated string.
        let path = unsafe { CStr::from_ptr(entry.as_ptr().add(1)) };
        if kind == ENTRY_DENY_READ || kind == ENTRY_STORE {
            let e = mask_late(path, kind == ENTRY_DENY_READ, mask_dev);
            if e != 0 {
                fail(request, e);
            }
            continue;
        }
        if kind == ENTRY_PLACEHOLDER {
            if !cover_placeholder(path) {
                fail(request, errno());
            }
            continue;
        }
        if !syscalls::bind_onto_itself(path) {
            fail(request, errno());
        }
        if kind != ENTRY_PINNED && !syscalls::remount_bind(path, libc::MS_RDONLY) {
            fail(request, errno());
        }
    }
    if !cwd.is_empty() {
        // SAFETY: `cwd` is NUL-terminated; the fd opened is closed here.
        let e = unsafe { enter_beneath(cwd) };
        if e != 0 {
            fail(request, e);
        }
    }
    // argv and envp arrays in an anonymous mapping.
    let slots = argc + envc + 2;
    // SAFETY: a new anonymous mapping aliases nothing.
    let ptrs = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            slots * std::mem::size_of::<usize>(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    } as *mut *const libc::c_char;
    if ptrs as *mut libc::c_void == libc::MAP_FAILED || argc == 0 {
        fail(request, libc::EINVAL);
    }
    // The writes below: `ptrs` has `slots` pointer-sized slots: `argc`
    // arguments, a null, `envc` variables, a null.
    for i in 0..argc {
        // SAFETY: see above; `i < argc`.
        unsafe { *ptrs.add(i) = payload.next() };
    }
    // SAFETY: see above; slot `argc`.
    unsafe { *ptrs.add(argc) = std::ptr::null() };
    // SAFETY: see above; slot `argc + 1` is within `slots`.
    let envp = unsafe { ptrs.add(argc + 1) };
    let mut path_var: *const libc::c_char = std::ptr::null();
    for i in 0..envc {
        let e = payload.next();
        // SAFETY: see the payload's note above: `e` is NUL-terminated.
        if unsafe { CStr::from_ptr(e) }
            .to_bytes()
            .starts_with(b"PATH=")
        {
            // SAFETY: five bytes on, within the same string.
            path_var = unsafe { e.add(5) };
        }
        // SAFETY: see above; `i < envc`.
        unsafe { *envp.add(i) = e };
    }
    // SAFETY: see above; the last slot.
    unsafe { *envp.add(envc) = std::ptr::null() };
    if setup.foreground {
        take_terminal(fds[RUN_STDIO.start]);
    }
    let exec_pipe = prepared.exec_pipe;
    let stack = prepared.stack;
    let mut last_steps = LastSteps {
        setup,
        landlock_fd,
        fds,
        argv: ptrs,
        envp,
        path_var,
        err_fd: exec_pipe[1],
    };
    // SAFETY: the child runs `command_main` on the stack mapped by
    // `init_prepare` (its top passed; nothing else uses it), sharing this
    // memory; `CLONE_VFORK` keeps this process waiting (and `last_steps`
    // alive) until the child execs or exits.
    let command = unsafe {
        libc::clone(
            command::command_main,
            syscalls::stack_top(stack, COMMAND_STACK_BYTES),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&mut last_steps as *mut LastSteps<'_>).cast(),
        )
    };
    if command < 0 {
        fail(request, errno());
    }
    // SAFETY: the child has exec'd or exited: nothing runs on its stack.
    unsafe { libc::munmap(stack, COMMAND_STACK_BYTES + GUARD_BYTES) };
    // SAFETY: the init's own fds: the exec pipe's write end and all of the
    // request's but the command's socket.
    unsafe {
        libc::close(exec_pipe[1]);
        close_each(&fds[..MSG_MAX_FDS - 1]);
    }
    let mut raw = [0u8; 4];
    let n = syscalls::read_bytes(exec_pipe[0], &mut raw);
    // SAFETY: the init's own, closed once.
    unsafe { libc::close(exec_pipe[0]) };
    let exec_failed = n == 4;
    if exec_failed {
        report(request, MSG_EXEC_FAILED, i32::from_ne_bytes(raw));
    } else {
        // pid 1 of its own namespace is the init itself.
        // SAFETY: pidfd_open takes integers.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, 1, 0) } as RawFd;
        let started = Msg {
            kind: MSG_STARTED,
            arg: 0,
            id: request.msg.id,
            len: request.host_pid as u64,
        };
        // SAFETY: the command's socket and the pidfd just made (or none).
        unsafe { wire::send_msg(fds[MSG_MAX_FDS - 1], started, pidfd) };
        if pidfd >= 0 {
            // SAFETY: made above, closed once.
            unsafe { libc::close(pidfd) };
        }
    }
    // The init forked ahead tells the holder it took a request (so that
    // the holder reads the socket again, and forks the next one).
    if request.taken_fd >= 0 {
        syscalls::write_bytes(request.taken_fd, &[1u8]);
        // SAFETY: the init's own copy, closed once.
        unsafe { libc::close(request.taken_fd) };
    }
    loop {
        if INIT_TERM.swap(false, Ordering::SeqCst) {
            // The group is the init's own; it ignores what it forwards.
            // SAFETY: signal and kill take integers; the group is the
            // init's own.
            unsafe {
                libc::signal(libc::SIGTERM, libc::SIG_IGN);
                libc::kill(0, libc::SIGTERM);
            }
        }
        let mut status: libc::c_int = 0;
        // SAFETY: `status` is a valid out-pointer.
        let reaped = unsafe { libc::waitpid(-1, &mut status, 0) };
        if reaped == command {
            if !exec_failed {
                report(request, MSG_EXITED, status);
            }
            // SAFETY: `_exit` ends this process without running anything else.
            unsafe { libc::_exit(0) }
        }
        if reaped < 0 && errno() == libc::ECHILD {
            // SAFETY: as above.
            unsafe { libc::_exit(0) }
        }
    }
}

/// Changes into `dir`, relative to the working directory (the root),
/// resolved beneath it without links; 0, or the errno.
///
/// # Safety
///
/// An init only (it changes the process's working directory).
#[inline]
unsafe fn enter_beneath(dir: &CStr) -> i32 {
    // SAFETY: `open_how` is plain data; all-zero is valid.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: `how` has the kernel's layout and the size given; `dir` is
    // NUL-terminated.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            dir.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    } as libc::c_int;
    // SAFETY: fchdir takes an fd (a failed open's -1 fails it).
    if fd < 0 || unsafe { libc::fchdir(fd) } != 0 {
        return errno();
    }
    // SAFETY: opened above, closed once.
    unsafe { libc::close(fd) };
    0
}

/// Makes the init's process group the foreground one of `tty` when `tty`
/// is the controlling terminal of the init's session; does nothing
/// otherwise (not a terminal, or another session's).
#[inline]
fn take_terminal(tty: RawFd) {
    // SAFETY: isatty takes an fd.
    if unsafe { libc::isatty(tty) } != 1 {
        return;
    }
    // A background group's tcsetpgrp is stopped by SIGTTOU unless the
    // caller ignores it.
    // SAFETY: `sigaction` is plain data; all-zero is valid.
    let mut ignore: libc::sigaction = unsafe { std::mem::zeroed() };
    ignore.sa_sigaction = libc::SIG_IGN;
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: `ignore` is a valid action, `old` a valid out-pointer, and
    // the old action is put back below.
    unsafe {
        libc::sigaction(libc::SIGTTOU, &ignore, &mut old);
        libc::tcsetpgrp(tty, libc::getpgrp());
        libc::sigaction(libc::SIGTTOU, &old, std::ptr::null_mut());
    }
}
