//! The `linux` provider's code between `fork` and `exec`: the only other
//! `unsafe` module besides the reaper shim.
//!
//! Two programs run here, both in children forked by `Command::spawn`, so
//! (like the shim) nothing may allocate or take a lock: every path and
//! buffer was prepared by the parent, and every call is a plain syscall.
//!
//! - The **holder** is forked once per sandbox. It creates the user, mount,
//!   IPC, UTS, pid and (with network off or `allow`) network namespaces,
//!   maps the invoking user to itself, and goes on as the first process of
//!   the pid namespace (a child: the process the server started waits for
//!   it), where it sets the sandbox's `pid_max` and its inotify and
//!   fanotify limits. It makes the mount tree private, mounts a private
//!   tmpfs of `tmp_mb` on `/tmp` (binding back the workspace and writable
//!   roots that lived there), covers `/dev` with its own (a few of the
//!   host's devices and a private `/dev/shm` of the same size), masks the
//!   `deny_read` paths and credential stores, brings the
//!   loopback up (with network `allow`, opens the egress proxy's listening
//!   socket there and hands it to the server). It never execs.
//!   Then it serves: each command request (over a unix socket, with the
//!   command's stdio fds and a memfd holding argv, env, working directory
//!   and protected paths) is forked with `CLONE_NEWPID` — from this small
//!   process, not from the server — and answered with the child's pidfd.
//! - **The init** of each command's pid namespace (pid 1) starts a session
//!   of its own (no controlling terminal; not under `cubby exec`), takes its own
//!   mount namespace, binds the protected paths read-only, masks what the
//!   holder did not (made or replaced since), changes into the
//!   working directory beneath the root, mounts its `/proc`, and forks the
//!   command (pid 2), which sets its stdio, rlimits, Landlock, drops every
//!   capability, installs the seccomp filter and execs. The init reports
//!   `started` (or the exec's errno), forwards a `SIGTERM` to its process
//!   group, and when the command ends reports its wait status and exits:
//!   the kernel then kills everything left in the namespace.

#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;

use super::sys;

/// Rebinds, pins and masks the holder can take (they live in stack arrays).
pub(crate) const MAX_HOLDER_MOUNTS: usize = 128;
/// Directories a command may read with `read_scope = "system"` (their
/// `O_PATH` fds stay open in the holder).
pub(crate) const MAX_READ_RULES: usize = 64;
/// A payload entry for a `deny_read` path (relative to the root): masked,
/// the directories above it pinned, unless masked already.
pub(crate) const ENTRY_DENY_READ: u8 = b'd';
/// A payload entry for a credential store (absolute): masked unless masked
/// already.
pub(crate) const ENTRY_STORE: u8 = b'm';
/// Host devices the holder can bind into the sandbox's own `/dev`.
pub(crate) const MAX_DEVICES: usize = 8;
/// The sandbox's `/dev`: a small tmpfs, read-only once made.
const DEV_DIR: &CStr = c"/dev";
const DEV_OPTIONS: &CStr = c"mode=0755,size=64k";
/// Made in the sandbox's `/dev`: where the private `/dev/shm` goes, a
/// `devpts` instance of the sandbox's own (pseudo-terminals for `script`,
/// `expect` and the like; none of the host's), and the usual links.
const DEV_SHM: &CStr = c"/dev/shm";
const DEV_PTS: &CStr = c"/dev/pts";
const DEV_PTS_OPTIONS: &CStr = c"newinstance,ptmxmode=0666,mode=0620";
const DEV_LINKS: [(&CStr, &CStr); 5] = [
    (c"pts/ptmx", c"/dev/ptmx"),
    (c"/proc/self/fd", c"/dev/fd"),
    (c"/proc/self/fd/0", c"/dev/stdin"),
    (c"/proc/self/fd/1", c"/dev/stdout"),
    (c"/proc/self/fd/2", c"/dev/stderr"),
];

/// `MOUNT_ATTR_RDONLY` of `linux/mount.h`.
const MOUNT_ATTR_RDONLY: u64 = 0x1;

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Where the holder keeps the objects it masks `deny_read` paths and
/// credential stores with: a tiny tmpfs, mode 000 and read-only once made,
/// that stays mounted for the inits to mask what appears later.
const MASK_STORE: &CStr = c"/dev/shm/.cubby-mask";
const MASK_FILE: &CStr = c"/dev/shm/.cubby-mask/f";
const MASK_DIR: &CStr = c"/dev/shm/.cubby-mask/d";

/// The holder's setup steps, reported (one byte + errno) when one fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum HolderStep {
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
}

impl HolderStep {
    /// Names the step for an error message.
    pub(crate) fn describe(byte: u8) -> &'static str {
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
            _ => "setting up the sandbox",
        }
    }
}

/// The workspace root or a writable root: bound again, writable (unless
/// `readonly`), once every mount is read-only; one that lives under `/tmp`
/// on the host also stays visible (the same inode) beneath the private
/// `/tmp`.
#[derive(Debug)]
pub(crate) struct Rebind {
    /// Its absolute path.
    pub path: CString,
    /// Directories to create in the private `/tmp`, outermost first (the
    /// last is `path` itself); none for a path outside `/tmp`.
    pub mkdirs: Vec<CString>,
    /// Bound read-only (`read-only` mode, or a path on a read-only mount).
    pub readonly: bool,
}

/// A `deny_read` path or credential store to hide behind an empty,
/// unreadable object (a directory for a directory, a file otherwise; what
/// is missing when the holder gets to it is skipped).
#[derive(Debug)]
pub(crate) struct Mask {
    /// Its absolute path.
    pub path: CString,
}

/// Everything the holder needs, prepared by the parent.
#[derive(Debug)]
pub(crate) struct HolderPlan {
    /// The namespaces of the sandbox, made together (the IPC namespace
    /// apart, before them: see `ipc_sysctls`).
    pub unshare_flags: libc::c_int,
    /// The outer user namespace's maps: its root is the invoking user.
    pub outer_uid_map: Vec<u8>,
    pub outer_gid_map: Vec<u8>,
    /// The sandbox's user namespace's maps: the invoking user as itself,
    /// through the outer namespace's root.
    pub uid_map: Vec<u8>,
    pub gid_map: Vec<u8>,
    /// Files under `/proc/sys/kernel` and what to write there: the System V
    /// IPC limits of the sandbox's IPC namespace. The kernel lets only
    /// the root of the user namespace that owns an IPC namespace write
    /// them (by uid, not by capability), and the sandbox's user namespace
    /// maps the invoking user as itself, so it has no root unless that
    /// user is root. The holder therefore first makes an outer user
    /// namespace whose root is the invoking user, makes the IPC namespace
    /// there and writes these as its root, and only then makes the
    /// sandbox's user namespace inside it (with the other namespaces).
    /// Commands hold no capability in the outer namespace (an ancestor of
    /// theirs), and Landlock keeps them from writing `/proc/sys`.
    pub ipc_sysctls: Vec<(CString, CString)>,
    pub private_tmp: bool,
    /// Mount options of the private `/tmp` and of `/dev/shm` (mode, size,
    /// inodes).
    pub tmp_options: CString,
    /// Files under `/proc/sys` and what to write there, in order, by the
    /// holder as the first process of the sandbox's pid namespace and with
    /// every capability in its user namespace: that namespace's `pid_max`
    /// and its inotify and fanotify limits (the kernel charges each
    /// namespace's count to every namespace above it, so these bound the
    /// whole sandbox within the user's own limits). Each must succeed.
    pub sysctls: Vec<(CString, CString)>,
    pub rebinds: Vec<Rebind>,
    /// Directories between the root and a `deny_read` path, outermost
    /// first: each is bound onto itself, so that no command can rename
    /// it (a mount point cannot be) and carry the hidden path off to a
    /// name nothing hides.
    pub pins: Vec<CString>,
    pub masks: Vec<Mask>,
    /// With `read_scope = "system"`, what commands may read (at most
    /// [`MAX_READ_RULES`]; what is missing is skipped): each command gets a
    /// second Landlock layer granting reads beneath these and its `/proc`
    /// only. Empty: no such layer.
    pub read_rules: Vec<CString>,
    /// The host devices commands get (at the same paths, which must exist;
    /// at most [`MAX_DEVICES`]): the sandbox's `/dev` holds only these,
    /// `shm` and links into `/proc`.
    pub devices: Vec<CString>,
    pub loopback: bool,
    /// Keep an init forked ahead for the next command (not for a sandbox
    /// that runs one command: `cubby exec`).
    pub fork_ahead: bool,
    /// Open a TCP listener on `127.0.0.1` inside the network namespace and
    /// send it to the server (`MSG_LISTENER`): the egress proxy's socket.
    pub proxy_listener: bool,
    /// The holder's end of its socket: requests come in, replies go out,
    /// and the holder ends when the other end closes.
    pub sock_fd: RawFd,
    /// The sandbox's seccomp filter, which the holder installs once and
    /// every command inherits.
    pub filter: Vec<libc::sock_filter>,
    /// What every command gets.
    pub commands: CommandSetup,
    /// Write end of the report pipe (step + errno on failure).
    pub report_fd: RawFd,
}

/// What the holder applies to every command, prepared before its fork.
#[derive(Debug)]
pub(crate) struct CommandSetup {
    /// Absolute path of the workspace root.
    pub root: CString,
    /// `cgroup.procs` of the sandbox's pids cgroup, when there is one (the
    /// holder joins it; everything it forks inherits it).
    pub cgroup_procs: Option<CString>,
    pub rlimits: Vec<(libc::__rlimit_resource_t, libc::rlim_t)>,
    /// Each command's own seccomp filter (on top of the holder's).
    pub filter: Arc<Vec<libc::sock_filter>>,
    /// The command's stdin is the caller's own (`cubby exec`): when that is
    /// the caller's terminal, the init makes its process group the
    /// terminal's foreground one, so that the command can set terminal
    /// modes and read it (as a shell's job would) instead of being stopped
    /// by `SIGTTOU`/`SIGTTIN`.
    pub foreground: bool,
}

/// Message kinds on the holder's socket.
pub(crate) const MSG_LANDLOCK: u32 = 1;
pub(crate) const MSG_RUN: u32 = 2;
pub(crate) const MSG_FORK_FAILED: u32 = 4;
pub(crate) const MSG_STARTED: u32 = 5;
pub(crate) const MSG_EXEC_FAILED: u32 = 6;
pub(crate) const MSG_EXITED: u32 = 7;
/// Sent once, first, when the plan asks for it: the proxy's listener.
pub(crate) const MSG_LISTENER: u32 = 8;
/// Most fds one message carries.
pub(crate) const MSG_MAX_FDS: usize = 5;
/// Where a `MSG_RUN`'s fds for the command's stdin, stdout and stderr sit
/// (after the payload memfd, before the command's socket). Only these
/// reach the command.
const RUN_STDIO: std::ops::Range<usize> = 1..4;

/// One message on the holder's socket (fds travel beside it).
///
/// `MSG_RUN` carries `[payload memfd, stdin, stdout, stderr, the command's
/// socket]`; the command's init answers on that socket (`MSG_STARTED` with
/// its pid and a pidfd, or `MSG_EXEC_FAILED`, then `MSG_EXITED`), and the
/// holder there when it cannot fork one (`MSG_FORK_FAILED`). The payload
/// is three little-endian `u32` counts (protected paths, argv, env) and then
/// NUL-terminated strings: the working directory (empty for the root), each
/// protected path prefixed by `r` or `w`, argv, env.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Msg {
    pub kind: u32,
    /// errno or wait status.
    pub arg: i32,
    pub id: u64,
    /// Payload length (`MSG_RUN`) or the init's pid (`MSG_STARTED`).
    pub len: u64,
}

impl Msg {
    /// The message as bytes.
    pub(crate) fn to_bytes(self) -> [u8; 24] {
        let mut out = [0u8; 24];
        out[..4].copy_from_slice(&self.kind.to_ne_bytes());
        out[4..8].copy_from_slice(&self.arg.to_ne_bytes());
        out[8..16].copy_from_slice(&self.id.to_ne_bytes());
        out[16..].copy_from_slice(&self.len.to_ne_bytes());
        out
    }

    /// Parses a message.
    pub(crate) fn from_bytes(b: &[u8]) -> Option<Msg> {
        if b.len() != 24 {
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

/// Fails the holder: reports `step` and the errno, returns the error.
///
/// # Safety
///
/// Async-signal-safe; called only in the forked holder.
unsafe fn holder_fail(report_fd: RawFd, step: HolderStep) -> io::Error {
    let err = io::Error::last_os_error();
    let errno = err.raw_os_error().unwrap_or(0);
    let mut msg = [0u8; 5];
    msg[0] = step as u8;
    msg[1..].copy_from_slice(&errno.to_le_bytes());
    // SAFETY: `msg` is a valid buffer; a failed write only loses the detail.
    unsafe {
        libc::write(report_fd, msg.as_ptr().cast(), msg.len());
    }
    err
}

/// Writes `data` to the file at `path` in one `write`.
///
/// # Safety
///
/// Async-signal-safe.
unsafe fn write_file(path: &CStr, data: &[u8]) -> bool {
    // SAFETY: `path` is NUL-terminated; the fd is closed before returning.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        libc::close(fd);
        n == data.len() as isize
    }
}

/// `/proc/self/fd/<fd>` into a stack buffer.
fn proc_fd_path(fd: RawFd, buf: &mut [u8; 32]) {
    let (digits, n) = sys::decimal(fd);
    let prefix = b"/proc/self/fd/";
    buf[..prefix.len()].copy_from_slice(prefix);
    buf[prefix.len()..prefix.len() + n].copy_from_slice(&digits[..n]);
    buf[prefix.len() + n] = 0;
}

/// Covers the host's `/dev` with the sandbox's own: a tmpfs holding the
/// devices of `fds` (opened from `devices`, bound at the same paths), the
/// directory for `/dev/shm`, a private `devpts` on `/dev/pts` and the
/// links; read-only once made. Commands then cannot open the host's
/// terminals, consoles, disks or any other device, whatever their
/// permissions.
///
/// # Safety
///
/// The holder only, in its own mount namespace.
unsafe fn own_dev(fds: &[RawFd], devices: &[CString]) -> bool {
    // SAFETY: plain syscalls on NUL-terminated paths and stack buffers.
    unsafe {
        let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        if libc::mount(
            c"tmpfs".as_ptr(),
            DEV_DIR.as_ptr(),
            c"tmpfs".as_ptr(),
            flags,
            DEV_OPTIONS.as_ptr().cast(),
        ) != 0
        {
            return false;
        }
        for (fd, dev) in fds.iter().zip(devices) {
            let spot = libc::open(
                dev.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
                0o666,
            );
            if spot < 0 {
                return false;
            }
            libc::close(spot);
            let mut source = [0u8; 32];
            proc_fd_path(*fd, &mut source);
            let bound = libc::mount(
                source.as_ptr().cast(),
                dev.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            );
            libc::close(*fd);
            if bound != 0 {
                return false;
            }
        }
        if libc::mkdir(DEV_SHM.as_ptr(), 0o755) != 0 || libc::mkdir(DEV_PTS.as_ptr(), 0o755) != 0 {
            return false;
        }
        if libc::mount(
            c"devpts".as_ptr(),
            DEV_PTS.as_ptr(),
            c"devpts".as_ptr(),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            DEV_PTS_OPTIONS.as_ptr().cast(),
        ) != 0
        {
            return false;
        }
        for (target, link) in DEV_LINKS {
            if libc::symlink(target.as_ptr(), link.as_ptr()) != 0 {
                return false;
            }
        }
        libc::mount(
            std::ptr::null(),
            DEV_DIR.as_ptr(),
            std::ptr::null(),
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags,
            std::ptr::null(),
        ) == 0
    }
}

/// Arranges for `cmd` to become a sandbox's holder.
pub(crate) fn run_as_holder(cmd: &mut std::process::Command, plan: Arc<HolderPlan>) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec; it only
    // makes syscalls on data prepared before the fork and never allocates.
    unsafe {
        cmd.pre_exec(move || {
            // Ready or failed (reported on the report pipe), the holder
            // never returns to std: it closed std's error pipe at once.
            let _ = holder_main(&plan);
            libc::_exit(HOLDER_FAILED)
        });
    }
}

/// Exit status of a holder that could not set the sandbox up.
const HOLDER_FAILED: libc::c_int = 127;

/// Closes every fd from 3 up except `keep` (async-signal-safe).
///
/// # Safety
///
/// Forked child only: fds of other owners are closed under them.
unsafe fn close_all_but(keep: &mut [RawFd]) {
    keep.sort_unstable();
    let mut from: libc::c_uint = 3;
    for &fd in keep.iter() {
        let Ok(fd) = libc::c_uint::try_from(fd) else {
            continue;
        };
        if fd > from {
            // SAFETY: closing fds this process does not use.
            unsafe { libc::close_range(from, fd - 1, 0) };
        }
        from = from.max(fd + 1);
    }
    // SAFETY: as above.
    unsafe { libc::close_range(from, libc::c_uint::MAX, 0) };
}

/// The holder: sets the namespaces up, then waits. Returns only on error.
fn holder_main(plan: &HolderPlan) -> io::Result<()> {
    let report = plan.report_fd;
    // SAFETY: plain syscalls on NUL-terminated paths and stack buffers in a
    // single-threaded forked child.
    unsafe {
        // Closing std's exec-error pipe lets `spawn` return now: the server
        // prepares the rest while the holder sets up, and learns the
        // outcome from the report pipe (closed when ready).
        close_all_but(&mut [plan.sock_fd, report]);
        // Joining a cgroup is slow (the kernel waits for an RCU grace
        // period): the holder joins once and every command inherits it.
        if let Some(procs) = &plan.commands.cgroup_procs
            && !write_file(procs, b"0")
        {
            return Err(holder_fail(report, HolderStep::Cgroup));
        }
        // The outer user namespace and, owned by it, the sandbox's IPC
        // namespace with its limits (see `HolderPlan::ipc_sysctls`).
        if libc::unshare(libc::CLONE_NEWUSER) != 0 {
            return Err(holder_fail(report, HolderStep::Unshare));
        }
        // Absent on kernels before 3.19; then it is not needed either.
        write_file(c"/proc/self/setgroups", b"deny");
        if !write_file(c"/proc/self/uid_map", &plan.outer_uid_map) {
            return Err(holder_fail(report, HolderStep::UidMap));
        }
        if !write_file(c"/proc/self/gid_map", &plan.outer_gid_map) {
            return Err(holder_fail(report, HolderStep::GidMap));
        }
        if libc::unshare(libc::CLONE_NEWIPC) != 0 {
            return Err(holder_fail(report, HolderStep::Unshare));
        }
        for (path, value) in &plan.ipc_sysctls {
            if !write_file(path, value.as_bytes()) {
                return Err(holder_fail(report, HolderStep::IpcLimits));
            }
        }
        if libc::unshare(plan.unshare_flags) != 0 {
            return Err(holder_fail(report, HolderStep::Unshare));
        }
        // Denied already, inherited from the outer namespace.
        write_file(c"/proc/self/setgroups", b"deny");
        if !write_file(c"/proc/self/uid_map", &plan.uid_map) {
            return Err(holder_fail(report, HolderStep::UidMap));
        }
        if !write_file(c"/proc/self/gid_map", &plan.gid_map) {
            return Err(holder_fail(report, HolderStep::GidMap));
        }
        // The sandbox's pid namespace (`unshare_flags` asks for one) takes
        // the holder's children, not the holder itself: the holder goes on
        // as its first process, from which every command's own pid
        // namespace nests (a process there holds a pid in the sandbox's
        // too, so the sandbox's `pid_max` bounds them all). The process
        // the server started stays behind and ends with it.
        if plan.unshare_flags & libc::CLONE_NEWPID != 0 {
            become_pid_one(plan)
        }
        holder_setup(plan)
    }
}

/// The holder's setup in its namespaces, then its service. Returns only
/// on error.
///
/// # Safety
///
/// The holder only, once its user namespace is mapped.
unsafe fn holder_setup(plan: &HolderPlan) -> io::Result<()> {
    let report = plan.report_fd;
    // SAFETY: as in `holder_main`.
    unsafe {
        for (path, value) in &plan.sysctls {
            if !write_file(path, value.as_bytes()) {
                return Err(holder_fail(report, HolderStep::Limits));
            }
        }
        let name = b"cubby";
        libc::sethostname(name.as_ptr().cast(), name.len());
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            return Err(holder_fail(report, HolderStep::MountPrivate));
        }
        // Opened before anything covers them (the private /tmp).
        let mut fds = [-1 as RawFd; MAX_HOLDER_MOUNTS];
        for (slot, rebind) in fds.iter_mut().zip(&plan.rebinds) {
            *slot = libc::open(
                rebind.path.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            );
            if *slot < 0 {
                return Err(holder_fail(report, HolderStep::OpenRebind));
            }
        }
        // The devices kept, opened before the sandbox's /dev covers them.
        let mut dev_fds = [-1 as RawFd; MAX_DEVICES];
        for (slot, dev) in dev_fds.iter_mut().zip(&plan.devices) {
            *slot = libc::open(dev.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
            if *slot < 0 {
                return Err(holder_fail(report, HolderStep::Devices));
            }
        }
        // Every mount read-only: Landlock leaves a file's mode, owner,
        // times and extended attributes to the mount (a read-only one
        // refuses them); the workspace and the writable roots are bound
        // again below, writable.
        let attr = MountAttr {
            attr_set: MOUNT_ATTR_RDONLY,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        };
        if libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            c"/".as_ptr(),
            libc::AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        ) != 0
        {
            return Err(holder_fail(report, HolderStep::ReadOnly));
        }
        if plan.private_tmp
            && libc::mount(
                c"tmpfs".as_ptr(),
                c"/tmp".as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                plan.tmp_options.as_ptr().cast(),
            ) != 0
        {
            return Err(holder_fail(report, HolderStep::MountTmp));
        }
        for (fd, rebind) in fds.iter().zip(&plan.rebinds) {
            for dir in &rebind.mkdirs {
                libc::mkdir(dir.as_ptr(), 0o755);
            }
            let mut source = [0u8; 32];
            proc_fd_path(*fd, &mut source);
            if libc::mount(
                source.as_ptr().cast(),
                rebind.path.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            ) != 0
            {
                return Err(holder_fail(report, HolderStep::Rebind));
            }
            // A bind takes its source's flags: read-only, until remounted
            // with the flags the kernel keeps locked and without it.
            let readonly = if rebind.readonly { libc::MS_RDONLY } else { 0 };
            if libc::mount(
                std::ptr::null(),
                rebind.path.as_ptr(),
                std::ptr::null(),
                libc::MS_REMOUNT | libc::MS_BIND | readonly | locked_flags(&rebind.path),
                std::ptr::null(),
            ) != 0
            {
                return Err(holder_fail(report, HolderStep::Rebind));
            }
            libc::close(*fd);
        }
        for pin in &plan.pins {
            if libc::mount(
                pin.as_ptr(),
                pin.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            ) != 0
            {
                return Err(holder_fail(report, HolderStep::Pin));
            }
        }
        if !own_dev(&dev_fds, &plan.devices) {
            return Err(holder_fail(report, HolderStep::Devices));
        }
        if libc::mount(
            c"tmpfs".as_ptr(),
            DEV_SHM.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            plan.tmp_options.as_ptr().cast(),
        ) != 0
        {
            return Err(holder_fail(report, HolderStep::MountShm));
        }
        // Always: an init masks what appears later with the same objects.
        mask_paths(plan)?;
        if plan.loopback && !loopback_up() {
            return Err(holder_fail(report, HolderStep::Loopback));
        }
        if plan.proxy_listener {
            let listener = loopback_listener();
            if listener < 0 {
                return Err(holder_fail(report, HolderStep::Listener));
            }
            let msg = Msg {
                kind: MSG_LISTENER,
                ..Msg::default()
            };
            send_msg(plan.sock_fd, msg, listener);
            // Closed with the rest below: only the server holds it now.
        }
        // Once for every command: nothing they exec can gain a capability.
        // The holder and its inits keep their effective sets for mounts.
        if drop_bounding_set().is_err() {
            return Err(holder_fail(report, HolderStep::Bounding));
        }
        // Installed once (the kernel compiles and caches it), inherited by
        // every init and command; it lets `mount` through for the inits.
        if install_filter(&plan.filter) != 0 {
            return Err(holder_fail(report, HolderStep::Seccomp));
        }
        // What commands read with `read_scope = "system"`, in this view.
        let mut keep = [-1 as RawFd; MAX_READ_RULES + 1];
        keep[0] = plan.sock_fd;
        let mut kept = 1;
        let mut files = 0u64;
        for rule in plan.read_rules.iter().take(MAX_READ_RULES) {
            let fd = libc::open(rule.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
            if fd < 0 {
                if *libc::__errno_location() == libc::ENOENT {
                    continue;
                }
                return Err(holder_fail(report, HolderStep::ReadRules));
            }
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(fd, &mut st) != 0 {
                return Err(holder_fail(report, HolderStep::ReadRules));
            }
            if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                files |= 1 << (kept - 1);
            }
            READ_RULES[kept - 1].store(fd, std::sync::atomic::Ordering::Relaxed);
            keep[kept] = fd;
            kept += 1;
        }
        READ_RULE_FILES.store(files, std::sync::atomic::Ordering::Relaxed);
        READ_RULE_COUNT.store(kept - 1, std::sync::atomic::Ordering::Relaxed);
        SYSTEM_SCOPE.store(
            !plan.read_rules.is_empty(),
            std::sync::atomic::Ordering::Relaxed,
        );
        // Ready: closing the report pipe with the rest tells the server.
        close_all_but(&mut keep[..kept]);
        for fd in 0..3 {
            libc::close(fd);
        }
        // Hold 0, 1 and 2 so that received fds never take those numbers
        // (a command's stdio is dup2'd onto them).
        for _ in 0..3 {
            libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        }
        serve(plan)
    }
}

/// Stack of the holder as the first process of the sandbox's pid
/// namespace (it uses a few KiB; inits forked from it copy it).
const HOLDER_STACK_BYTES: usize = 1024 * 1024;

/// Entry of the holder as the first process of the sandbox's pid namespace.
extern "C" fn pid_one_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the plan, which lives as long as the memory both
    // processes share; the child makes only syscalls on it.
    unsafe {
        let plan = &*(arg as *const HolderPlan);
        // Its end is the sandbox's: killed with the process waiting for it
        // (then the kernel kills every process in the namespace).
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
        let _ = holder_setup(plan);
        libc::_exit(HOLDER_FAILED)
    }
}

/// Starts the first process of the pid namespace just made (pid 1 there),
/// which goes on as the holder ([`holder_setup`]); the calling process
/// closes every fd, waits for it and exits with its status. The two share
/// their memory (`CLONE_VM`: no page tables copied, none kept twice) and
/// the waiting one only waits; the holder runs on a stack of its own. A
/// failed start is reported and ends the caller.
///
/// # Safety
///
/// The holder only, after `unshare(CLONE_NEWPID)`.
unsafe fn become_pid_one(plan: &HolderPlan) -> ! {
    // SAFETY: plain syscalls; the child runs `pid_one_main` on its own
    // stack while this process only waits for it.
    unsafe {
        let stack = libc::mmap(
            std::ptr::null_mut(),
            HOLDER_STACK_BYTES + GUARD_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        );
        if stack == libc::MAP_FAILED || libc::mprotect(stack, GUARD_BYTES, libc::PROT_NONE) != 0 {
            holder_fail(plan.report_fd, HolderStep::Fork);
            libc::_exit(HOLDER_FAILED);
        }
        let pid = libc::clone(
            pid_one_main,
            stack
                .cast::<u8>()
                .add(HOLDER_STACK_BYTES + GUARD_BYTES)
                .cast(),
            libc::CLONE_VM | libc::SIGCHLD,
            (plan as *const HolderPlan).cast_mut().cast(),
        );
        if pid < 0 {
            holder_fail(plan.report_fd, HolderStep::Fork);
            libc::_exit(HOLDER_FAILED);
        }
        libc::close_range(0, libc::c_uint::MAX, 0);
        let mut status = 0;
        loop {
            let reaped = libc::waitpid(pid, &mut status, 0);
            if reaped == pid || (reaped < 0 && *libc::__errno_location() != libc::EINTR) {
                break;
            }
        }
        let code = if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            HOLDER_FAILED
        };
        libc::_exit(code)
    }
}

/// Receives one message and up to [`MSG_MAX_FDS`] fds (the rest are
/// closed). Returns the number of fds, or `None` at end of stream.
///
/// # Safety
///
/// Async-signal-safe.
unsafe fn recv_msg(sock: RawFd, msg: &mut Msg, fds: &mut [RawFd; MSG_MAX_FDS]) -> Option<usize> {
    // SAFETY: msghdr/iovec/cmsg on stack buffers of the sizes given.
    unsafe {
        let mut bytes = [0u8; 24];
        let mut iov = libc::iovec {
            iov_base: bytes.as_mut_ptr().cast(),
            iov_len: bytes.len(),
        };
        let mut control = [0u64; 8];
        let mut hdr: libc::msghdr = std::mem::zeroed();
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        hdr.msg_control = control.as_mut_ptr().cast();
        hdr.msg_controllen = std::mem::size_of_val(&control);
        let n = loop {
            let n = libc::recvmsg(sock, &mut hdr, libc::MSG_CMSG_CLOEXEC);
            if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            break n;
        };
        if n <= 0 {
            return None;
        }
        let mut count = 0;
        let mut cmsg = libc::CMSG_FIRSTHDR(&hdr);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg) as *const RawFd;
                let len = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<RawFd>();
                for i in 0..len {
                    let fd = std::ptr::read_unaligned(data.add(i));
                    if count < MSG_MAX_FDS {
                        fds[count] = fd;
                        count += 1;
                    } else {
                        libc::close(fd);
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(&hdr, cmsg);
        }
        *msg = Msg::from_bytes(&bytes[..n as usize]).unwrap_or_default();
        Some(count)
    }
}

/// Sends one message, with `fd` beside it when `fd >= 0`.
///
/// # Safety
///
/// Async-signal-safe.
unsafe fn send_msg(sock: RawFd, msg: Msg, fd: RawFd) {
    // SAFETY: msghdr/iovec/cmsg on stack buffers of the sizes given.
    unsafe {
        let mut bytes = msg.to_bytes();
        let mut iov = libc::iovec {
            iov_base: bytes.as_mut_ptr().cast(),
            iov_len: bytes.len(),
        };
        let mut control = [0u64; 4];
        let mut hdr: libc::msghdr = std::mem::zeroed();
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        if fd >= 0 {
            hdr.msg_control = control.as_mut_ptr().cast();
            hdr.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
            let cmsg = libc::CMSG_FIRSTHDR(&hdr);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut RawFd, fd);
        }
        while libc::sendmsg(sock, &hdr, libc::MSG_NOSIGNAL) < 0
            && *libc::__errno_location() == libc::EINTR
        {}
    }
}

/// The holder's loop: keeps one init forked ahead (into a fresh pid
/// namespace, its mount namespace and `/proc` already made) that takes the
/// next request itself; forks one on demand when requests come faster;
/// reaps what ends; exits when the server's end closes.
///
/// # Safety
///
/// Holder only (single-threaded, never execs).
unsafe fn serve(plan: &HolderPlan) -> ! {
    // SAFETY: plain syscalls on stack data in the single-threaded holder.
    unsafe {
        let sock = plan.sock_fd;
        let chld = sys::signal_set(&[libc::SIGCHLD]);
        libc::sigprocmask(libc::SIG_BLOCK, &chld, std::ptr::null_mut());
        let sigfd = libc::signalfd(-1, &chld, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        let mut ignored = 0u64;
        for sig in 1..libc::SIGRTMAX().min(64) + 1 {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction == libc::SIG_IGN
            {
                ignored |= 1 << (sig - 1);
            }
        }
        IGNORED_SIGNALS.store(ignored, std::sync::atomic::Ordering::Relaxed);
        // The init forked ahead writes the id of the request it took here.
        let mut taken = [-1 as RawFd; 2];
        if libc::pipe2(taken.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            libc::_exit(HOLDER_FAILED);
        }
        let holder = Holder { plan, sigfd, taken };
        let mut landlock_fd: RawFd = -1;
        // The init forked ahead, waiting for a request (0: none).
        let mut ready: libc::pid_t = 0;
        loop {
            if ready == 0 && landlock_fd >= 0 && plan.fork_ahead {
                ready = holder.fork_init(landlock_fd, None).unwrap_or(0);
            }
            let mut polls = [
                libc::pollfd {
                    fd: taken[0],
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: sigfd,
                    events: libc::POLLIN,
                    revents: 0,
                },
                // While an init waits on it, the holder only watches for
                // the server's end closing.
                libc::pollfd {
                    fd: sock,
                    events: if ready == 0 { libc::POLLIN } else { 0 },
                    revents: 0,
                },
            ];
            if libc::poll(polls.as_mut_ptr(), 3, -1) < 0 {
                continue;
            }
            // Before reaping: an init that took a request and then died has
            // said so first.
            if polls[0].revents != 0 {
                let mut byte = [0u8; 1];
                if libc::read(taken[0], byte.as_mut_ptr().cast(), 1) == 1 {
                    ready = 0;
                }
            }
            if polls[1].revents != 0 {
                let mut info = [0u8; 128];
                while libc::read(sigfd, info.as_mut_ptr().cast(), info.len()) > 0 {}
                let mut status = 0;
                loop {
                    let pid = libc::waitpid(-1, &mut status, libc::WNOHANG);
                    if pid <= 0 {
                        break;
                    }
                    if pid == ready {
                        ready = 0;
                    }
                }
            }
            if polls[2].revents & (libc::POLLHUP | libc::POLLERR) != 0 && ready != 0 {
                libc::_exit(0);
            }
            if polls[2].revents == 0 || ready != 0 {
                continue;
            }
            let mut msg = Msg::default();
            let mut fds = [-1 as RawFd; MSG_MAX_FDS];
            let Some(count) = recv_msg(sock, &mut msg, &mut fds) else {
                libc::_exit(0);
            };
            match msg.kind {
                MSG_LANDLOCK if count == 1 => {
                    landlock_fd = fds[0];
                    // The server has read what it needed through
                    // /proc/<holder>. From now on the holder and every init
                    // (copies of the server's memory) are not dumpable, so
                    // no command can read them through /proc.
                    libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
                }
                MSG_RUN if count == MSG_MAX_FDS => {
                    if let Err(errno) = holder.fork_init(landlock_fd, Some((msg, &fds))) {
                        let failed = Msg {
                            kind: MSG_FORK_FAILED,
                            arg: errno,
                            id: msg.id,
                            len: 0,
                        };
                        send_msg(fds[MSG_MAX_FDS - 1], failed, -1);
                    }
                    for fd in &fds[..count] {
                        libc::close(*fd);
                    }
                }
                _ => {
                    for fd in &fds[..count] {
                        libc::close(*fd);
                    }
                }
            }
        }
    }
}

/// The holder's fds that its inits close.
struct Holder<'a> {
    plan: &'a HolderPlan,
    sigfd: RawFd,
    /// Read and write ends of the pipe on which the init forked ahead says
    /// that it took a request.
    taken: [RawFd; 2],
}

impl Holder<'_> {
    /// Forks an init into a fresh pid namespace: for `request`, or (none
    /// given) ahead, to take the next request from the socket itself.
    /// Returns its pid, or the errno of the failed fork.
    ///
    /// # Safety
    ///
    /// Holder only.
    unsafe fn fork_init(
        &self,
        landlock_fd: RawFd,
        request: Option<(Msg, &[RawFd; MSG_MAX_FDS])>,
    ) -> Result<libc::pid_t, i32> {
        // SAFETY: plain syscalls; the child runs only async-signal-safe code.
        unsafe {
            // The init's pid in the sandbox's pid namespace, which only the
            // holder learns (the init is pid 1 in its own); the server finds
            // its own view of it through the pidfd.
            let mut pid_pipe = [-1 as RawFd; 2];
            if libc::pipe2(pid_pipe.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
                return Err(*libc::__errno_location());
            }
            let pid = libc::syscall(
                libc::SYS_clone,
                (libc::CLONE_NEWPID | libc::SIGCHLD) as libc::c_ulong,
                0usize,
                0usize,
                0usize,
                0usize,
            ) as libc::pid_t;
            if pid != 0 {
                let errno = *libc::__errno_location();
                if pid > 0 {
                    let raw = pid.to_ne_bytes();
                    libc::write(pid_pipe[1], raw.as_ptr().cast(), raw.len());
                }
                libc::close(pid_pipe[0]);
                libc::close(pid_pipe[1]);
                return if pid > 0 { Ok(pid) } else { Err(errno) };
            }
            libc::close(self.sigfd);
            libc::close(self.taken[0]);
            libc::close(pid_pipe[1]);
            let mut raw = [0u8; 4];
            let host_pid = if libc::read(pid_pipe[0], raw.as_mut_ptr().cast(), raw.len()) == 4 {
                libc::pid_t::from_ne_bytes(raw)
            } else {
                0
            };
            libc::close(pid_pipe[0]);
            let sock = self.plan.sock_fd;
            let setup = &self.plan.commands;
            let prepared = init_prepare(setup);
            match request {
                Some((msg, fds)) => {
                    libc::close(self.taken[1]);
                    libc::close(sock);
                    namespace_init(setup, landlock_fd, msg, fds, &prepared, host_pid, -1)
                }
                None => {
                    let mut msg = Msg::default();
                    let mut fds = [-1 as RawFd; MSG_MAX_FDS];
                    loop {
                        let Some(count) = recv_msg(sock, &mut msg, &mut fds) else {
                            libc::_exit(0);
                        };
                        if msg.kind == MSG_RUN && count == MSG_MAX_FDS {
                            break;
                        }
                        for fd in &fds[..count] {
                            libc::close(*fd);
                        }
                    }
                    libc::close(sock);
                    namespace_init(
                        setup,
                        landlock_fd,
                        msg,
                        &fds,
                        &prepared,
                        host_pid,
                        self.taken[1],
                    )
                }
            }
        }
    }
}

/// The signals the holder ignores (bit `n - 1` for signal `n`), read once:
/// an ignored disposition survives `execve` (a handler does not), so the
/// command resets these alone.
static IGNORED_SIGNALS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The device of the holder's mask objects, set once they are made: an
/// init tells a path masked already by it.
static MASK_DEV: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(u64::MAX);

/// With `read_scope = "system"`: the holder's `O_PATH` fds of what commands
/// read, how many, and which are not directories (bit `i` for fd `i`).
static READ_RULES: [std::sync::atomic::AtomicI32; MAX_READ_RULES] =
    [const { std::sync::atomic::AtomicI32::new(-1) }; MAX_READ_RULES];
static READ_RULE_COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static READ_RULE_FILES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// Whether commands get the second Landlock layer (`read_scope = "system"`).
static SYSTEM_SCOPE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Landlock's file access rights (`linux/landlock.h`) the second layer
/// handles.
const LL_EXECUTE: u64 = 1 << 0;
const LL_READ_FILE: u64 = 1 << 2;
const LL_READ_DIR: u64 = 1 << 3;
/// `LANDLOCK_RULE_PATH_BENEATH`.
const LL_RULE_PATH_BENEATH: libc::c_int = 1;

/// `struct landlock_ruleset_attr`, its first field only (the kernel takes
/// the size given).
#[repr(C)]
struct LandlockRulesetAttr {
    handled_access_fs: u64,
}

/// `struct landlock_path_beneath_attr` (packed in the kernel's header).
#[repr(C, packed)]
struct LandlockPathBeneath {
    allowed_access: u64,
    parent_fd: i32,
}

/// Set by the init's `SIGTERM` handler.
static INIT_TERM: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_init_term(_: libc::c_int) {
    INIT_TERM.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// The init's handler of the terminal's `SIGINT` and `SIGQUIT`: nothing.
/// They reach the command too (the same process group), and the init
/// reports how it ended. A handler, unlike `SIG_IGN`, is not inherited
/// past the command's `execve`.
extern "C" fn on_init_interrupt(_: libc::c_int) {}

/// A cursor over the request payload (NUL-terminated strings).
struct Payload {
    at: *const u8,
    end: *const u8,
}

impl Payload {
    /// The next string (pointer to its first byte, NUL-terminated).
    ///
    /// # Safety
    ///
    /// `at..end` must be a readable mapping.
    unsafe fn next(&mut self) -> *const libc::c_char {
        let start = self.at;
        // SAFETY: stays within the mapping; the server NUL-terminates each string.
        unsafe {
            while self.at < self.end && *self.at != 0 {
                self.at = self.at.add(1);
            }
            if self.at < self.end {
                self.at = self.at.add(1);
            }
        }
        start.cast()
    }
}

/// What an init sets up before its request comes.
struct Prepared {
    /// 0, or the errno of the step that failed (reported with the request).
    errno: i32,
    /// The command's exec-error pipe (read end, write end).
    exec_pipe: [libc::c_int; 2],
    /// The stack of the command's last steps (guard page first).
    stack: *mut libc::c_void,
}

/// The first steps of the init of one command's pid namespace (pid 1),
/// which need no request: its process group, death signal and `SIGTERM`
/// handler, its own mount namespace with a fresh `/proc`,
/// the exec-error pipe and the stack of the command's last steps.
///
/// # Safety
///
/// Forked child of the holder only.
unsafe fn init_prepare(setup: &CommandSetup) -> Prepared {
    // SAFETY: plain syscalls on stack data.
    unsafe {
        let mut prepared = Prepared {
            errno: 0,
            exec_pipe: [-1; 2],
            stack: libc::MAP_FAILED,
        };
        if setup.foreground {
            // `cubby exec`: the caller's session and terminal are kept.
            libc::setpgid(0, 0);
        } else {
            // A session of its own, without a controlling terminal: the
            // server's (an agent's terminal, when it started cubby) is not
            // the command's `/dev/tty`. Also a process group of its own.
            libc::setsid();
        }
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
        let empty = sys::signal_set(&[]);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_init_term as *const () as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
        action.sa_sigaction = on_init_interrupt as *const () as libc::sighandler_t;
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut());
        libc::sigaction(libc::SIGQUIT, &action, std::ptr::null_mut());
        let ok = libc::unshare(libc::CLONE_NEWNS) == 0
            && libc::chdir(setup.root.as_ptr()) == 0
            && libc::mount(
                c"proc".as_ptr(),
                c"/proc".as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            ) == 0
            && libc::pipe2(prepared.exec_pipe.as_mut_ptr(), libc::O_CLOEXEC) == 0;
        if !ok {
            prepared.errno = *libc::__errno_location();
            return prepared;
        }
        // The command's last steps run in the init's memory (CLONE_VM) on a
        // stack of their own while the init waits (CLONE_VFORK) until they
        // exec or fail: no page tables copied, no copy-on-write faults after.
        prepared.stack = libc::mmap(
            std::ptr::null_mut(),
            COMMAND_STACK_BYTES + GUARD_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        );
        if prepared.stack == libc::MAP_FAILED
            || libc::mprotect(prepared.stack, GUARD_BYTES, libc::PROT_NONE) != 0
        {
            prepared.errno = *libc::__errno_location();
        }
        prepared
    }
}

/// The rest of the init of one command's pid namespace, once its request
/// has come: binds the protected paths, forks the command, forwards a stop
/// to its group, and when the command ends reports its status and exits —
/// whereupon the kernel kills everything left in the namespace.
///
/// # Safety
///
/// Forked child of the holder only, after [`init_prepare`].
unsafe fn namespace_init(
    setup: &CommandSetup,
    landlock_fd: RawFd,
    request: Msg,
    fds: &[RawFd; MSG_MAX_FDS],
    prepared: &Prepared,
    host_pid: libc::pid_t,
    taken_fd: RawFd,
) -> ! {
    // SAFETY: plain syscalls on stack data and on the payload mapping.
    unsafe {
        let chan = fds[MSG_MAX_FDS - 1];
        let report = |kind: u32, arg: i32| {
            send_msg(
                chan,
                Msg {
                    kind,
                    arg,
                    id: request.id,
                    len: 0,
                },
                -1,
            )
        };
        // The init forked ahead tells the holder it took a request (so
        // that the holder reads the socket again, and forks the next one).
        let tell_taken = || {
            if taken_fd >= 0 {
                libc::write(taken_fd, [1u8].as_ptr().cast(), 1);
                libc::close(taken_fd);
            }
        };
        let fail = |step_errno: i32| -> ! {
            report(MSG_EXEC_FAILED, step_errno);
            libc::_exit(127)
        };
        let errno = || *libc::__errno_location();
        if prepared.errno != 0 {
            fail(prepared.errno);
        }
        let len = request.len as usize;
        let map = libc::mmap(
            std::ptr::null_mut(),
            len.max(1),
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            fds[0],
            0,
        );
        if map == libc::MAP_FAILED || len < 12 {
            fail(errno());
        }
        let base = map as *const u8;
        let count = |i: usize| {
            let mut b = [0u8; 4];
            std::ptr::copy_nonoverlapping(base.add(i * 4), b.as_mut_ptr(), 4);
            u32::from_le_bytes(b) as usize
        };
        let (nprotect, argc, envc) = (count(0), count(1), count(2));
        let mut payload = Payload {
            at: base.add(12),
            end: base.add(len),
        };
        let cwd = payload.next();
        let mask_dev = MASK_DEV.load(std::sync::atomic::Ordering::Relaxed);
        for _ in 0..nprotect {
            let entry = payload.next();
            let kind = *entry as u8;
            let path = entry.add(1);
            if kind == ENTRY_DENY_READ || kind == ENTRY_STORE {
                let errno = mask_late(path, kind == ENTRY_DENY_READ, mask_dev);
                if errno != 0 {
                    fail(errno);
                }
                continue;
            }
            let writable = kind == b'w';
            if libc::mount(
                path,
                path,
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            ) != 0
            {
                fail(errno());
            }
            if !writable
                && libc::mount(
                    std::ptr::null(),
                    path,
                    std::ptr::null(),
                    libc::MS_REMOUNT
                        | libc::MS_BIND
                        | libc::MS_RDONLY
                        | locked_flags(CStr::from_ptr(path)),
                    std::ptr::null(),
                ) != 0
            {
                fail(errno());
            }
        }
        if *cwd != 0 {
            let mut how: libc::open_how = std::mem::zeroed();
            how.flags = (libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64;
            how.resolve =
                libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
            let fd = libc::syscall(
                libc::SYS_openat2,
                libc::AT_FDCWD,
                cwd,
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            ) as libc::c_int;
            if fd < 0 || libc::fchdir(fd) != 0 {
                fail(errno());
            }
            libc::close(fd);
        }
        // argv and envp arrays in an anonymous mapping.
        let slots = argc + envc + 2;
        let ptrs = libc::mmap(
            std::ptr::null_mut(),
            slots * std::mem::size_of::<usize>(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        ) as *mut *const libc::c_char;
        if ptrs as *mut libc::c_void == libc::MAP_FAILED || argc == 0 {
            fail(libc::EINVAL);
        }
        for i in 0..argc {
            *ptrs.add(i) = payload.next();
        }
        *ptrs.add(argc) = std::ptr::null();
        let envp = ptrs.add(argc + 1);
        let mut path_var: *const libc::c_char = std::ptr::null();
        for i in 0..envc {
            let e = payload.next();
            if libc::strncmp(e, c"PATH=".as_ptr(), 5) == 0 {
                path_var = e.add(5);
            }
            *envp.add(i) = e;
        }
        *envp.add(envc) = std::ptr::null();
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
        let command = libc::clone(
            command_main,
            stack
                .cast::<u8>()
                .add(COMMAND_STACK_BYTES + GUARD_BYTES)
                .cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&mut last_steps as *mut LastSteps<'_>).cast(),
        );
        if command < 0 {
            fail(errno());
        }
        libc::munmap(stack, COMMAND_STACK_BYTES + GUARD_BYTES);
        libc::close(exec_pipe[1]);
        // All but the command's socket.
        for fd in &fds[..MSG_MAX_FDS - 1] {
            libc::close(*fd);
        }
        let mut raw = [0u8; 4];
        let n = libc::read(exec_pipe[0], raw.as_mut_ptr().cast(), raw.len());
        libc::close(exec_pipe[0]);
        if n == 4 {
            report(MSG_EXEC_FAILED, i32::from_ne_bytes(raw));
        } else {
            // pid 1 of its own namespace is the init itself.
            let pidfd = libc::syscall(libc::SYS_pidfd_open, 1, 0) as RawFd;
            let started = Msg {
                kind: MSG_STARTED,
                arg: 0,
                id: request.id,
                len: host_pid as u64,
            };
            send_msg(chan, started, pidfd);
            if pidfd >= 0 {
                libc::close(pidfd);
            }
        }
        tell_taken();
        loop {
            if INIT_TERM.swap(false, std::sync::atomic::Ordering::SeqCst) {
                // The group is the init's own; it ignores what it forwards.
                libc::signal(libc::SIGTERM, libc::SIG_IGN);
                libc::kill(0, libc::SIGTERM);
            }
            let mut status: libc::c_int = 0;
            let reaped = libc::waitpid(-1, &mut status, 0);
            if reaped == command {
                if n != 4 {
                    report(MSG_EXITED, status);
                }
                libc::_exit(0);
            }
            if reaped < 0 && errno() == libc::ECHILD {
                libc::_exit(0);
            }
        }
    }
}

/// Makes the init's process group the foreground one of `tty` when `tty`
/// is the controlling terminal of the init's session; does nothing
/// otherwise (not a terminal, or another session's).
///
/// # Safety
///
/// Async-signal-safe; an init only.
unsafe fn take_terminal(tty: RawFd) {
    // SAFETY: plain syscalls on stack data.
    unsafe {
        if libc::isatty(tty) != 1 {
            return;
        }
        // A background group's tcsetpgrp is stopped by SIGTTOU unless the
        // caller ignores it.
        let mut ignore: libc::sigaction = std::mem::zeroed();
        ignore.sa_sigaction = libc::SIG_IGN;
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGTTOU, &ignore, &mut old);
        libc::tcsetpgrp(tty, libc::getpgrp());
        libc::sigaction(libc::SIGTTOU, &old, std::ptr::null_mut());
    }
}

/// Stack of the command's last steps (they use a few KiB).
const COMMAND_STACK_BYTES: usize = 256 * 1024;
/// An inaccessible page below that stack: an overflow faults instead of
/// writing into the init's memory.
const GUARD_BYTES: usize = 4096;

/// What the command's last steps need, on the init's stack.
struct LastSteps<'a> {
    setup: &'a CommandSetup,
    landlock_fd: RawFd,
    fds: &'a [RawFd; MSG_MAX_FDS],
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    path_var: *const libc::c_char,
    /// Write end of the exec pipe: the errno goes there if exec fails.
    err_fd: RawFd,
}

/// Entry of the command's child (`clone` with `CLONE_VM | CLONE_VFORK`).
extern "C" fn command_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the init's `LastSteps`, alive while the init waits
    // for this child to exec or exit; the child only makes syscalls on it.
    unsafe {
        let steps = &*(arg as *const LastSteps<'_>);
        let err = command_exec(
            steps.setup,
            steps.landlock_fd,
            steps.fds,
            steps.argv,
            steps.envp,
            steps.path_var,
        );
        let raw = err.to_ne_bytes();
        libc::write(steps.err_fd, raw.as_ptr().cast(), raw.len());
        libc::_exit(127)
    }
}

/// The command's last steps before `execve`; returns the errno of the
/// failure (never returns on success).
///
/// # Safety
///
/// The init's `CLONE_VM` child only (see [`command_main`]).
unsafe fn command_exec(
    setup: &CommandSetup,
    landlock_fd: RawFd,
    fds: &[RawFd; MSG_MAX_FDS],
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    path_var: *const libc::c_char,
) -> i32 {
    // SAFETY: plain syscalls on prepared data in a single-threaded child.
    unsafe {
        let errno = || *libc::__errno_location();
        // Its stdio only: never the payload or the socket its init reports
        // its end on (a command holding that could report its own exit).
        for (target, fd) in fds[RUN_STDIO].iter().enumerate() {
            if libc::dup2(*fd, target as libc::c_int) < 0 {
                return errno();
            }
        }
        let ignored = IGNORED_SIGNALS.load(std::sync::atomic::Ordering::Relaxed);
        for sig in 1..65 {
            if ignored & (1 << (sig - 1)) != 0 {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        for &(resource, value) in &setup.rlimits {
            let limit = libc::rlimit {
                rlim_cur: value,
                rlim_max: value,
            };
            if libc::setrlimit(resource, &limit) != 0 {
                return errno();
            }
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            || landlock_fd < 0
            || libc::syscall(libc::SYS_landlock_restrict_self, landlock_fd, 0u32) != 0
        {
            return if landlock_fd < 0 {
                libc::EPERM
            } else {
                errno()
            };
        }
        if SYSTEM_SCOPE.load(std::sync::atomic::Ordering::Relaxed) {
            let e = restrict_reads();
            if e != 0 {
                return e;
            }
        }
        if drop_capabilities().is_err() {
            return errno();
        }
        if install_filter(&setup.filter) != 0 {
            return errno();
        }
        let program = *argv;
        if libc::strchr(program, b'/' as libc::c_int).is_null() && !path_var.is_null() {
            // Search PATH as execvp would, with the command's own PATH.
            let mut buf = [0u8; 4096];
            let mut last = libc::ENOENT;
            let mut dir = path_var;
            loop {
                let mut end = dir;
                while *end != 0 && *end != b':' as libc::c_char {
                    end = end.add(1);
                }
                let dlen = end.offset_from(dir) as usize;
                let plen = libc::strlen(program);
                if dlen + plen + 2 <= buf.len() {
                    let at = if dlen == 0 {
                        buf[0] = b'.';
                        1
                    } else {
                        std::ptr::copy_nonoverlapping(dir.cast::<u8>(), buf.as_mut_ptr(), dlen);
                        dlen
                    };
                    buf[at] = b'/';
                    std::ptr::copy_nonoverlapping(
                        program.cast::<u8>(),
                        buf.as_mut_ptr().add(at + 1),
                        plen,
                    );
                    buf[at + 1 + plen] = 0;
                    libc::execve(buf.as_ptr().cast(), argv, envp);
                    let e = errno();
                    if e != libc::ENOENT && e != libc::ENOTDIR {
                        last = e;
                    }
                }
                if *end == 0 {
                    return last;
                }
                dir = end.add(1);
            }
        }
        libc::execve(program, argv, envp);
        errno()
    }
}

/// Hides each `deny_read` path and credential store behind an empty
/// mode-000 object on a private tmpfs, bound read-only; the tmpfs stays
/// (mode 000, read-only) for the inits, and [`MASK_DEV`] names it.
///
/// # Safety
///
/// Async-signal-safe; holder only.
unsafe fn mask_paths(plan: &HolderPlan) -> io::Result<()> {
    let report = plan.report_fd;
    // SAFETY: plain syscalls on NUL-terminated paths.
    unsafe {
        libc::mkdir(MASK_STORE.as_ptr(), 0o700);
        let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        if libc::mount(
            c"tmpfs".as_ptr(),
            MASK_STORE.as_ptr(),
            c"tmpfs".as_ptr(),
            flags,
            c"mode=700,size=4k".as_ptr().cast(),
        ) != 0
        {
            return Err(holder_fail(report, HolderStep::Mask));
        }
        let fd = libc::open(
            MASK_FILE.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
            0,
        );
        if fd < 0 || libc::mkdir(MASK_DIR.as_ptr(), 0) != 0 {
            return Err(holder_fail(report, HolderStep::Mask));
        }
        libc::close(fd);
        let mut st: libc::stat = std::mem::zeroed();
        if libc::chmod(MASK_STORE.as_ptr(), 0) != 0
            || libc::mount(
                std::ptr::null(),
                MASK_STORE.as_ptr(),
                std::ptr::null(),
                libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags,
                std::ptr::null(),
            ) != 0
            || libc::stat(MASK_FILE.as_ptr(), &mut st) != 0
        {
            return Err(holder_fail(report, HolderStep::Mask));
        }
        MASK_DEV.store(st.st_dev, std::sync::atomic::Ordering::Relaxed);
        for mask in &plan.masks {
            let errno = mask_one(mask.path.as_ptr());
            if errno != 0 {
                *libc::__errno_location() = errno;
                return Err(holder_fail(report, HolderStep::Mask));
            }
        }
    }
    Ok(())
}

/// Binds the mask object of `path`'s kind over it, read-only; 0, or the
/// errno. What is missing (or unreachable: inside a mask) is skipped: there
/// is nothing to hide.
///
/// # Safety
///
/// Async-signal-safe; holder or init, after [`mask_paths`].
unsafe fn mask_one(path: *const libc::c_char) -> i32 {
    // SAFETY: plain syscalls on NUL-terminated paths and a stack buffer.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::stat(path, &mut st) != 0 {
            let errno = *libc::__errno_location();
            return if errno == libc::ENOENT || errno == libc::ENOTDIR {
                0
            } else {
                errno
            };
        }
        let source = if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            MASK_DIR
        } else {
            MASK_FILE
        };
        // A bind takes its source mount's flags: the mask tmpfs is
        // read-only, nosuid, nodev and noexec already (`mask_paths`), and
        // so is every mask bound from it, without a remount of its own.
        if libc::mount(
            source.as_ptr(),
            path,
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        ) != 0
        {
            // Gone since the `stat` (the host removed it): nothing to
            // hide; each command's init looks again before it starts.
            let errno = *libc::__errno_location();
            return if errno == libc::ENOENT || errno == libc::ENOTDIR {
                0
            } else {
                errno
            };
        }
        0
    }
}

/// An init's mask of a `deny_read` path (relative to the root, `pin`: the
/// directories above it are bound onto themselves first, so that no
/// command carries it off by renaming one) or a credential store that the
/// holder has not masked: new since the sandbox started, or replaced on the
/// host (a mask leaves with the name it was on). One whose object lives on
/// `mask_dev` is masked already. 0, or the errno.
///
/// # Safety
///
/// Async-signal-safe; an init only.
unsafe fn mask_late(path: *const libc::c_char, pin: bool, mask_dev: u64) -> i32 {
    // SAFETY: plain syscalls on NUL-terminated paths and a stack buffer.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::stat(path, &mut st) != 0 || st.st_dev == mask_dev {
            return 0;
        }
        if pin {
            let len = libc::strlen(path);
            let mut buf = [0u8; 4096];
            if len >= buf.len() {
                return libc::ENAMETOOLONG;
            }
            std::ptr::copy_nonoverlapping(path.cast::<u8>(), buf.as_mut_ptr(), len);
            for i in 1..len {
                if buf[i] != b'/' {
                    continue;
                }
                buf[i] = 0;
                if libc::mount(
                    buf.as_ptr().cast(),
                    buf.as_ptr().cast(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ) != 0
                {
                    return *libc::__errno_location();
                }
                buf[i] = b'/';
            }
        }
        mask_one(path)
    }
}

/// The second Landlock layer of `read_scope = "system"`: reads (and
/// executes) beneath the holder's read rules and the command's own `/proc`
/// only; 0, or the errno.
///
/// # Safety
///
/// Async-signal-safe; the command's last steps only, after
/// `PR_SET_NO_NEW_PRIVS`.
unsafe fn restrict_reads() -> i32 {
    use std::sync::atomic::Ordering::Relaxed;
    let handled = LL_EXECUTE | LL_READ_FILE | LL_READ_DIR;
    // SAFETY: the Landlock syscalls on stack structs of the kernel's
    // layout; every fd opened here is closed before returning.
    unsafe {
        let errno = || *libc::__errno_location();
        let attr = LandlockRulesetAttr {
            handled_access_fs: handled,
        };
        let ruleset = libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const LandlockRulesetAttr,
            std::mem::size_of::<LandlockRulesetAttr>(),
            0u32,
        ) as RawFd;
        if ruleset < 0 {
            return errno();
        }
        let proc_fd = libc::open(
            c"/proc".as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if proc_fd < 0 {
            let e = errno();
            libc::close(ruleset);
            return e;
        }
        let files = READ_RULE_FILES.load(Relaxed);
        let count = READ_RULE_COUNT.load(Relaxed);
        let mut result = 0;
        let held = READ_RULES.iter().take(count).enumerate().map(|(i, fd)| {
            let access = if files & (1 << i) != 0 {
                LL_EXECUTE | LL_READ_FILE
            } else {
                handled
            };
            (fd.load(Relaxed), access)
        });
        for (fd, access) in held.chain([(proc_fd, handled)]) {
            let rule = LandlockPathBeneath {
                allowed_access: access,
                parent_fd: fd,
            };
            if libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset,
                LL_RULE_PATH_BENEATH,
                &rule as *const LandlockPathBeneath,
                0u32,
            ) != 0
            {
                result = errno();
                break;
            }
        }
        if result == 0 && libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) != 0 {
            result = errno();
        }
        libc::close(proc_fd);
        libc::close(ruleset);
        result
    }
}

/// Sets `IFF_UP` on `lo` in the new network namespace.
///
/// # Safety
///
/// Async-signal-safe.
unsafe fn loopback_up() -> bool {
    // SAFETY: `ifreq` is plain data, zeroed, with a NUL-terminated name.
    unsafe {
        let sock = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if sock < 0 {
            return false;
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
            *dst = *src as libc::c_char;
        }
        let mut ok = libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut req) == 0;
        if ok {
            req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            ok = libc::ioctl(sock, libc::SIOCSIFFLAGS, &req) == 0;
        }
        libc::close(sock);
        ok
    }
}

/// Backlog of the egress proxy's listener.
const LISTENER_BACKLOG: libc::c_int = 256;

/// A TCP socket listening on `127.0.0.1` at a free port, in this network
/// namespace; -1 on failure (errno set).
///
/// # Safety
///
/// Async-signal-safe.
unsafe fn loopback_listener() -> RawFd {
    // SAFETY: `sockaddr_in` is plain data, zeroed, passed with its size.
    unsafe {
        let sock = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if sock < 0 {
            return -1;
        }
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
        let bound = libc::bind(
            sock,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        ) == 0;
        if !bound || libc::listen(sock, LISTENER_BACKLOG) != 0 {
            let errno = *libc::__errno_location();
            libc::close(sock);
            *libc::__errno_location() = errno;
            return -1;
        }
        sock
    }
}

/// The mount flags that must be kept when remounting `path` read-only in a
/// user namespace (the kernel locks them on mounts from a parent namespace).
///
/// # Safety
///
/// Async-signal-safe.
unsafe fn locked_flags(path: &CStr) -> libc::c_ulong {
    // SAFETY: `st` is plain data filled by statvfs.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(path.as_ptr(), &mut st) != 0 {
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
}

/// Installs a seccomp filter on the calling thread; `prctl`'s result.
///
/// # Safety
///
/// Async-signal-safe.
unsafe fn install_filter(filter: &[libc::sock_filter]) -> libc::c_int {
    let prog = libc::sock_fprog {
        len: filter.len() as libc::c_ushort,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: the kernel copies the program from `prog` during the call.
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

/// Empties the capability bounding set (the holder does, once).
///
/// # Safety
///
/// Async-signal-safe.
unsafe fn drop_bounding_set() -> io::Result<()> {
    /// Higher than any capability number the kernel knows.
    const CAP_SCAN_LIMIT: libc::c_ulong = 64;
    // SAFETY: prctl with integer arguments.
    unsafe {
        for cap in 0..CAP_SCAN_LIMIT {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                // Capabilities are numbered without gaps: EINVAL means past
                // the last one the kernel knows.
                if *libc::__errno_location() == libc::EINVAL && cap > 0 {
                    break;
                }
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// Empties the ambient, effective, permitted and inheritable capability
/// sets; with the bounding set empty (the holder's), nothing the command
/// execs can regain any.
///
/// # Safety
///
/// Async-signal-safe.
unsafe fn drop_capabilities() -> io::Result<()> {
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
    // SAFETY: prctl/capset on stack structs of the kernel's layout.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        );
        let header = Header {
            version: CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        if libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The kernel's Landlock ABI version, if Landlock is enabled.
pub(crate) fn landlock_abi() -> Option<i32> {
    /// `LANDLOCK_CREATE_RULESET_VERSION`.
    const CREATE_RULESET_VERSION: u32 = 1;
    // SAFETY: with this flag the kernel reads no attribute and returns the ABI.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    (abi > 0).then_some(abi as i32)
}

/// The hard limit of `resource` for this process.
pub(crate) fn hard_limit(resource: libc::__rlimit_resource_t) -> libc::rlim_t {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid out-pointer.
    if unsafe { libc::getrlimit(resource, &mut limit) } != 0 {
        return libc::RLIM_INFINITY;
    }
    limit.rlim_max
}

/// Exit codes of the probe child.
const PROBE_NO_NAMESPACES: i32 = 10;
const PROBE_NO_SECCOMP: i32 = 11;

/// Forks a child that creates the namespaces a sandbox uses and installs an
/// allow-all seccomp filter; reports what failed.
pub(crate) fn probe_isolation() -> (Result<(), String>, Result<(), String>) {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new("/");
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: the closure runs in the forked child and only makes syscalls
    // on stack data, then `_exit`s (it never returns to exec).
    unsafe {
        cmd.pre_exec(|| {
            let flags = libc::CLONE_NEWUSER
                | libc::CLONE_NEWNS
                | libc::CLONE_NEWNET
                | libc::CLONE_NEWIPC
                | libc::CLONE_NEWUTS;
            if libc::unshare(flags) != 0 {
                libc::_exit(PROBE_NO_NAMESPACES);
            }
            // One instruction: SECCOMP_RET_ALLOW.
            let mut allow = [libc::sock_filter {
                code: (libc::BPF_RET | libc::BPF_K) as u16,
                jt: 0,
                jf: 0,
                k: libc::SECCOMP_RET_ALLOW,
            }];
            let prog = libc::sock_fprog {
                len: 1,
                filter: allow.as_mut_ptr(),
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                    &prog as *const libc::sock_fprog,
                    0,
                    0,
                ) != 0
            {
                libc::_exit(PROBE_NO_SECCOMP);
            }
            libc::_exit(0)
        });
    }
    let status = match cmd.spawn().and_then(|mut c| c.wait()) {
        Ok(s) => s.code(),
        Err(e) => {
            let msg = format!("cannot fork a probe: {e}");
            return (Err(msg.clone()), Err(msg));
        }
    };
    match status {
        Some(0) => (Ok(()), Ok(())),
        Some(PROBE_NO_NAMESPACES) => (
            Err("unshare(CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWNET) was refused".to_string()),
            Ok(()),
        ),
        Some(PROBE_NO_SECCOMP) => (Ok(()), Err("prctl(PR_SET_SECCOMP) was refused".to_string())),
        other => {
            let msg = format!("the probe ended with {other:?}");
            (Err(msg.clone()), Err(msg))
        }
    }
}

/// True when this kernel has seccomp (`PR_GET_SECCOMP` answers).
pub(crate) fn seccomp_available() -> bool {
    // SAFETY: PR_GET_SECCOMP takes no pointer.
    unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 }
}
