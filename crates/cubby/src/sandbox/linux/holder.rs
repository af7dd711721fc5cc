//! The holder: the first of the `linux` provider's three fork-side programs
//! (holder, [`init`](super::init), [`command`](super::command)), forked once
//! per sandbox by `Command::spawn` and never exec'd. Like the reaper shim it
//! runs between `fork` and `exec` of a multi-threaded process, so nothing
//! here may allocate or take a lock: every path and buffer was prepared by
//! the server ([`HolderPlan`], from the pure [`Plan`]) and every call is a
//! plain syscall.
//!
//! Its stages, in order ([`holder_main`], then [`holder_setup`]):
//!
//! 1. Closes every fd but its socket and report pipe (so that `spawn`
//!    returns at once), joins the pids cgroup when there is one.
//! 2. Makes an outer user namespace whose root is the invoking user, an IPC
//!    namespace owned by it and writes its System V limits there
//!    ([`HolderPlan::ipc_sysctls`]); then the sandbox's user, mount, UTS,
//!    pid and (network off or `allow`) network namespaces, the invoking
//!    user mapped to itself.
//! 3. Goes on as the first process of the sandbox's pid namespace (a
//!    `CLONE_VM` child; the process the server started waits for it), where
//!    it writes the sandbox's `pid_max` and inotify and fanotify limits.
//! 4. Mounts: the tree private and read-only, a private tmpfs of `tmp_mb` on
//!    `/tmp` (binding back the workspace and writable roots that lived
//!    there), the root and writable roots bound back writable, the
//!    directories above `deny_read` paths pinned, its own `/dev` (a few of
//!    the host's devices, a private `/dev/shm` and `devpts`), and the
//!    `deny_read` paths and credential stores masked ([`super::mask`]).
//! 5. The loopback up (with network `allow`, the egress proxy's listening
//!    socket opened there and handed to the server), the bounding set
//!    emptied, the sandbox's seccomp filter installed, the read rules of
//!    `read_scope = "system"` opened; then it closes the report pipe
//!    (ready) and serves ([`serve`]): each command request is forked with
//!    `CLONE_NEWPID` — from this small process, not from the server — into
//!    an init, and one init is kept forked ahead for the next request.
//!
//! # Where its code lies
//!
//! A fork does not copy the page-table entries of the binary's code: a
//! holder and each init fault in every page of code they run, and the
//! kernel maps the 64 KiB around it at once (fault-around), so each of them
//! maps — and is charged a share of, in PSS — whatever code lies beside
//! what it runs.
//! Every function the fork-side programs call in the other files (`init`,
//! `command`, `mask`, `loopback`, `syscalls`, `wire`, the read layer of
//! `landlock`, the shim's helpers) is therefore `#[inline]`: compiled into
//! this file's codegen unit, the holder's whole path lies in one or two
//! such windows instead of one per file, and none calls out to `core` or
//! `std` (`errno` is read directly, no `io::Error` is made and dropped) on
//! the way to being ready. The bench's idle figure counts what is left
//! (docs/PERFORMANCE.md, issue 15's idle sandboxes).

#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::landlock::READ_RULES;
use super::plan::{Mask, Plan, Rebind, RunKeep};
use super::syscalls::{self, errno, read_bytes, write_file};
use super::wire::{self, HolderStep, MSG_FORK_FAILED, MSG_LANDLOCK, MSG_MAX_FDS, MSG_RUN, Msg};
use super::{init, loopback};
use crate::error::Result;
use crate::sandbox::local::shim;

/// Rebinds, pins and masks the holder can take (they live in stack arrays).
pub(super) const MAX_HOLDER_MOUNTS: usize = 128;
/// Directories a command may read with `read_scope = "system"` (their
/// `O_PATH` fds stay open in the holder).
pub(super) const MAX_READ_RULES: usize = 64;
/// Directories the holder can bind back into the sandbox's own run
/// directories (what commands need there, and roots beneath them).
pub(super) const MAX_RUN_KEEPS: usize = 16;
/// The sandbox's run directories: empty, read-only once the kept
/// directories are bound back (their mount points are all it holds).
const RUN_OPTIONS: &CStr = c"mode=0755,size=64k,nr_inodes=256";
/// Host devices the holder can bind into the sandbox's own `/dev`.
pub(super) const MAX_DEVICES: usize = 8;
/// The sandbox's `/dev`: a small tmpfs, read-only once made.
const DEV_DIR: &CStr = c"/dev";
const DEV_OPTIONS: &CStr = c"mode=0755,size=64k";
/// Made in the sandbox's `/dev`: where the private `/dev/shm` goes, a
/// `devpts` instance of the sandbox's own (pseudo-terminals for `script`,
/// `expect` and the like; none of the host's), and the usual links.
pub(super) const DEV_SHM: &CStr = c"/dev/shm";
const DEV_PTS: &CStr = c"/dev/pts";
const DEV_LINKS: [(&CStr, &CStr); 5] = [
    (c"pts/ptmx", c"/dev/ptmx"),
    (c"/proc/self/fd", c"/dev/fd"),
    (c"/proc/self/fd/0", c"/dev/stdin"),
    (c"/proc/self/fd/1", c"/dev/stdout"),
    (c"/proc/self/fd/2", c"/dev/stderr"),
];
/// The sandbox's host name.
const HOST_NAME: &[u8] = b"cubby";
/// What the holder and every init show as their command line
/// (`/proc/<pid>/cmdline`; the command's init is its pid 1) instead of the
/// server's, whose memory they copy: the rest of the argument area is
/// zeroed.
const NEUTRAL_ARGV: &[u8] = b"cubby-sandbox\0";
/// Their name (`/proc/<pid>/comm`, at most 15 bytes).
const NEUTRAL_NAME: &CStr = c"cubby-sandbox";
/// Bytes of zeros written at a time over the argument area.
const ZEROS_BYTES: usize = 256;
/// Fields of `/proc/<pid>/stat` after the command name that precede the
/// argument area's start (`arg_start` is field 48; the name is field 2).
const STAT_FIELDS_BEFORE_ARGS: usize = 45;

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

/// Exit status of a holder that could not set the sandbox up.
pub(super) const HOLDER_FAILED: libc::c_int = 127;
/// Stack of the holder as the first process of the sandbox's pid
/// namespace (it uses a few KiB; inits forked from it copy it).
const HOLDER_STACK_BYTES: usize = 1024 * 1024;
/// Room for `/proc/self/fd/<fd>` and its NUL.
const PROC_FD_PATH_BYTES: usize = 32;
/// Bytes of a `signalfd_siginfo`, read and dropped.
const SIGINFO_BYTES: usize = 128;
/// The highest signal number the holder looks at (the bits of a `u64`).
const MAX_SIGNAL: libc::c_int = 64;

/// The signals the holder ignores (bit `n - 1` for signal `n`), read once:
/// an ignored disposition survives `execve` (a handler does not), so the
/// command resets these alone.
pub(super) static IGNORED_SIGNALS: AtomicU64 = AtomicU64::new(0);

/// Everything the holder needs, prepared by the server: the [`Plan`]'s
/// fields, the compiled seccomp filters and the fds of the holder's socket
/// and report pipe.
#[derive(Debug)]
pub(super) struct HolderPlan {
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
    /// Mount options of the sandbox's `devpts` (a new instance, and how
    /// many terminals it holds: the plan's `SANDBOX_PTYS`).
    pub pts_options: CString,
    /// Files under `/proc/sys` and what to write there, in order, by the
    /// holder as the first process of the sandbox's pid namespace and with
    /// every capability in its user namespace: that namespace's `pid_max`
    /// and its inotify and fanotify limits (the kernel charges each
    /// namespace's count to every namespace above it, so these bound the
    /// whole sandbox within the user's own limits). Each must succeed.
    pub sysctls: Vec<(CString, CString)>,
    pub rebinds: Vec<Rebind>,
    /// The host's run directories, each covered by an empty tmpfs
    /// ([`RUN_OPTIONS`]), read-only once `run_keeps` are bound back.
    pub run_dirs: Vec<CString>,
    /// What is bound back into them (at most [`MAX_RUN_KEEPS`]; what is
    /// missing when the holder opens it is skipped).
    pub run_keeps: Vec<RunKeep>,
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
    /// Listeners to open the same way for the gateways, one each, sent
    /// after the proxy's.
    pub gateway_listeners: usize,
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
    /// Where this process's arguments lie (`arg_start`, `arg_end` of
    /// `/proc/self/stat`), which the holder overwrites in its copy
    /// ([`blank_argv`]); `None` if they could not be read.
    pub argv_area: Option<(u64, u64)>,
}

/// What the holder applies to every command, prepared before its fork.
#[derive(Debug)]
pub(super) struct CommandSetup {
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

impl HolderPlan {
    /// Compiles `plan` for the holder: its seccomp filters, the sandbox's
    /// pids cgroup (`cgroup`, made by the server when the plan asks for
    /// one), and the holder's ends of its socket and report pipe.
    pub(super) fn new(
        plan: Plan,
        cgroup: Option<&Path>,
        sock_fd: RawFd,
        report_fd: RawFd,
    ) -> Result<HolderPlan> {
        let cgroup_procs = match cgroup {
            Some(dir) => Some(super::cstring(&dir.join("cgroup.procs"))?),
            None => None,
        };
        Ok(HolderPlan {
            unshare_flags: plan.unshare_flags,
            outer_uid_map: plan.outer_uid_map,
            outer_gid_map: plan.outer_gid_map,
            uid_map: plan.uid_map,
            gid_map: plan.gid_map,
            ipc_sysctls: plan.ipc_sysctls,
            private_tmp: plan.private_tmp,
            tmp_options: plan.tmp_options,
            pts_options: plan.pts_options,
            sysctls: plan.sysctls,
            rebinds: plan.rebinds,
            run_dirs: plan.run_dirs,
            run_keeps: plan.run_keeps,
            pins: plan.pins,
            masks: plan.masks,
            read_rules: plan.read_rules,
            devices: plan.devices,
            loopback: plan.loopback,
            fork_ahead: plan.fork_ahead,
            proxy_listener: plan.proxy_listener,
            gateway_listeners: plan.gateway_listeners,
            sock_fd,
            filter: super::seccomp::filter(plan.sockets)?,
            commands: CommandSetup {
                root: plan.root,
                cgroup_procs,
                rlimits: plan.rlimits,
                filter: Arc::new(super::seccomp::command_filter()?),
                foreground: plan.foreground,
            },
            report_fd,
            argv_area: argv_area(),
        })
    }
}

/// `arg_start` and `arg_end` of this process (fields 48 and 49 of
/// `/proc/self/stat`, after the parenthesised name, which may hold spaces).
fn argv_area() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest
        .split_whitespace()
        .skip(STAT_FIELDS_BEFORE_ARGS)
        .map(|f| f.parse::<u64>().ok());
    let (start, end) = (fields.next()??, fields.next()??);
    (start < end).then_some((start, end))
}

/// Makes this process's command line [`NEUTRAL_ARGV`] and its name
/// [`NEUTRAL_NAME`]: the inits forked from it inherit both, so a command
/// reading `/proc/1/cmdline` (readable whatever the dumpable flag) learns
/// nothing of how cubby was started (its config path, its flags). Written
/// through `/proc/self/mem`, which fails (and leaves the area as it was)
/// rather than faults where the area is not mapped; best effort.
///
/// # Safety
///
/// The holder only, before anything reads its arguments again (nothing in
/// the fork-side programs does): the area is overwritten under std's
/// `env::args`.
unsafe fn blank_argv(area: Option<(u64, u64)>) {
    // SAFETY: prctl reads the NUL-terminated name.
    unsafe { libc::prctl(libc::PR_SET_NAME, NEUTRAL_NAME.as_ptr(), 0, 0, 0) };
    let Some((start, end)) = area else {
        return;
    };
    let fd = syscalls::open(c"/proc/self/mem", libc::O_WRONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return;
    }
    let zeros = [0u8; ZEROS_BYTES];
    let mut at = start;
    let mut first: &[u8] = if end - start >= NEUTRAL_ARGV.len() as u64 {
        NEUTRAL_ARGV
    } else {
        &[]
    };
    while at < end {
        let chunk = if first.is_empty() {
            &zeros[..(end - at).min(ZEROS_BYTES as u64) as usize]
        } else {
            std::mem::take(&mut first)
        };
        let Ok(offset) = libc::off_t::try_from(at) else {
            break;
        };
        // SAFETY: `chunk` is valid for its length; the kernel writes this
        // process's own memory, checking the range is mapped.
        let n = unsafe { libc::pwrite(fd, chunk.as_ptr().cast(), chunk.len(), offset) };
        if n <= 0 {
            break;
        }
        at += n as u64;
    }
    // SAFETY: `fd` was opened above.
    unsafe { libc::close(fd) };
}

/// Arranges for `cmd` to become a sandbox's holder.
pub(super) fn run_as_holder(cmd: &mut std::process::Command, plan: Arc<HolderPlan>) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec, which is
    // `holder_main`'s contract; `plan` was prepared before the fork and
    // lives in the child's copy of the parent's memory.
    unsafe {
        cmd.pre_exec(move || {
            // Ready or failed (reported on the report pipe), the holder
            // never returns to std: it closed std's error pipe at once.
            let _ = holder_main(&plan);
            libc::_exit(HOLDER_FAILED)
        });
    }
}

/// Fails the holder: reports `step` and the errno, returns the error.
fn holder_fail(report_fd: RawFd, step: HolderStep) -> io::Error {
    let err = io::Error::last_os_error();
    let errno = err.raw_os_error().unwrap_or(0);
    let mut msg = [0u8; wire::REPORT_BYTES];
    msg[0] = step as u8;
    msg[1..].copy_from_slice(&errno.to_le_bytes());
    // A failed write only loses the detail.
    syscalls::write_bytes(report_fd, &msg);
    err
}

/// `/proc/self/fd/<fd>` into a stack buffer.
fn proc_fd_path(fd: RawFd, buf: &mut [u8; PROC_FD_PATH_BYTES]) -> &CStr {
    let (digits, n) = shim::decimal(fd);
    let prefix = b"/proc/self/fd/";
    buf[..prefix.len()].copy_from_slice(prefix);
    buf[prefix.len()..prefix.len() + n].copy_from_slice(&digits[..n]);
    buf[prefix.len() + n] = 0;
    syscalls::until_nul(&buf[..])
}

/// Closes every fd from 3 up except `keep`.
///
/// # Safety
///
/// Forked child only: fds of other owners are closed under them, so no
/// other code of this process may use an fd it holds but `keep`.
unsafe fn close_all_but(keep: &mut [RawFd]) {
    keep.sort_unstable();
    let mut from: libc::c_uint = 3;
    for &fd in keep.iter() {
        let Ok(fd) = libc::c_uint::try_from(fd) else {
            continue;
        };
        if fd > from {
            // SAFETY: the caller's promise: nothing uses these fds.
            unsafe { libc::close_range(from, fd - 1, 0) };
        }
        from = from.max(fd + 1);
    }
    // SAFETY: as above.
    unsafe { libc::close_range(from, libc::c_uint::MAX, 0) };
}

/// The holder: sets the namespaces up, then serves. Returns only on error
/// (reported on the report pipe).
///
/// # Safety
///
/// Call only in the child that `Command::spawn` forked for the holder
/// ([`run_as_holder`]'s `pre_exec`), before anything else runs there: the
/// child is single-threaded, holds copies of fds it does not own (this
/// closes them), and may not allocate or take a lock (the parent's other
/// threads may have held the allocator's when it forked). `plan` was
/// prepared before the fork.
unsafe fn holder_main(plan: &HolderPlan) -> io::Result<()> {
    let report = plan.report_fd;
    // Closing std's exec-error pipe lets `spawn` return now: the server
    // prepares the rest while the holder sets up, and learns the outcome
    // from the report pipe (closed when ready).
    // SAFETY: this fn's contract: a forked child nothing else runs in.
    unsafe { close_all_but(&mut [plan.sock_fd, report]) };
    // SAFETY: the holder, before anything reads its arguments.
    unsafe { blank_argv(plan.argv_area) };
    // Joining a cgroup is slow (the kernel waits for an RCU grace period):
    // the holder joins once and every command inherits it.
    if let Some(procs) = &plan.commands.cgroup_procs
        && !write_file(procs, b"0")
    {
        return Err(holder_fail(report, HolderStep::Cgroup));
    }
    // The outer user namespace and, owned by it, the sandbox's IPC
    // namespace with its limits (see `HolderPlan::ipc_sysctls`).
    // SAFETY: unshare takes an integer; this child is single-threaded, as
    // a new user namespace requires.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER) } != 0 {
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
    // SAFETY: unshare takes an integer.
    if unsafe { libc::unshare(libc::CLONE_NEWIPC) } != 0 {
        return Err(holder_fail(report, HolderStep::Unshare));
    }
    for (path, value) in &plan.ipc_sysctls {
        if !write_file(path, value.as_bytes()) {
            return Err(holder_fail(report, HolderStep::IpcLimits));
        }
    }
    // SAFETY: unshare takes an integer; still single-threaded.
    if unsafe { libc::unshare(plan.unshare_flags) } != 0 {
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
    // The sandbox's pid namespace (`unshare_flags` asks for one) takes the
    // holder's children, not the holder itself: the holder goes on as its
    // first process, from which every command's own pid namespace nests (a
    // process there holds a pid in the sandbox's too, so the sandbox's
    // `pid_max` bounds them all). The process the server started stays
    // behind and ends with it.
    if plan.unshare_flags & libc::CLONE_NEWPID != 0 {
        // SAFETY: this fn's contract, after `unshare(CLONE_NEWPID)`.
        unsafe { become_pid_one(plan) }
    }
    // SAFETY: this fn's contract; the user namespace is mapped.
    unsafe { holder_setup(plan) }
}

/// The holder's setup in its namespaces, then its service. Returns only on
/// error.
///
/// # Safety
///
/// As [`holder_main`], once its user namespace is mapped: the holder only.
unsafe fn holder_setup(plan: &HolderPlan) -> io::Result<()> {
    let report = plan.report_fd;
    for (path, value) in &plan.sysctls {
        if !write_file(path, value.as_bytes()) {
            return Err(holder_fail(report, HolderStep::Limits));
        }
    }
    // SAFETY: `HOST_NAME` is a valid buffer of its length.
    unsafe { libc::sethostname(HOST_NAME.as_ptr().cast(), HOST_NAME.len()) };
    if !syscalls::mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None) {
        return Err(holder_fail(report, HolderStep::MountPrivate));
    }
    // Opened before anything covers them (the private /tmp).
    let mut fds = [-1 as RawFd; MAX_HOLDER_MOUNTS];
    for (slot, rebind) in fds.iter_mut().zip(&plan.rebinds) {
        *slot = syscalls::open(
            &rebind.path,
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if *slot < 0 {
            return Err(holder_fail(report, HolderStep::OpenRebind));
        }
        if !fd_is(*slot, rebind.identity) {
            set_errno(libc::ESTALE);
            return Err(holder_fail(report, HolderStep::RootChanged));
        }
    }
    // The devices kept, opened before the sandbox's /dev covers them.
    let mut dev_fds = [-1 as RawFd; MAX_DEVICES];
    for (slot, dev) in dev_fds.iter_mut().zip(&plan.devices) {
        *slot = syscalls::open(dev, libc::O_PATH | libc::O_CLOEXEC);
        if *slot < 0 {
            return Err(holder_fail(report, HolderStep::Devices));
        }
    }
    // What is kept of the run directories, opened before they are
    // covered; a keep that is missing now is skipped.
    let mut run_fds = [-1 as RawFd; MAX_RUN_KEEPS];
    for (slot, keep) in run_fds.iter_mut().zip(&plan.run_keeps) {
        *slot = syscalls::open(
            &keep.path,
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
    }
    if !all_read_only() {
        return Err(holder_fail(report, HolderStep::ReadOnly));
    }
    if plan.private_tmp
        && !syscalls::mount(
            Some(c"tmpfs"),
            c"/tmp",
            Some(c"tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some(&plan.tmp_options),
        )
    {
        return Err(holder_fail(report, HolderStep::MountTmp));
    }
    // SAFETY: `run_fds` were opened above from `plan.run_keeps`, one
    // each, and are the holder's own.
    if !unsafe { own_run(&run_fds, plan) } {
        return Err(holder_fail(report, HolderStep::Run));
    }
    for (&fd, rebind) in fds.iter().zip(&plan.rebinds) {
        // SAFETY: `fd` was opened above for this rebind, and is the
        // holder's own.
        if !unsafe { rebind_writable(fd, rebind) } {
            return Err(holder_fail(report, HolderStep::Rebind));
        }
        // The path names what was bound (a link swapped in at it meanwhile
        // would have taken the mount elsewhere).
        if rebind.identity.is_some()
            && syscalls::stat(&rebind.path).map(|st| (st.st_dev, st.st_ino)) != rebind.identity
        {
            set_errno(libc::ESTALE);
            return Err(holder_fail(report, HolderStep::RootChanged));
        }
    }
    for pin in &plan.pins {
        if !syscalls::bind_onto_itself(pin) {
            return Err(holder_fail(report, HolderStep::Pin));
        }
    }
    // SAFETY: `dev_fds` were opened above from `plan.devices`, one each,
    // and are the holder's own.
    if !unsafe { own_dev(&dev_fds, &plan.devices, &plan.pts_options) } {
        return Err(holder_fail(report, HolderStep::Devices));
    }
    if !syscalls::mount(
        Some(c"tmpfs"),
        DEV_SHM,
        Some(c"tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&plan.tmp_options),
    ) {
        return Err(holder_fail(report, HolderStep::MountShm));
    }
    // Always: an init masks what appears later with the same objects.
    if super::mask::mask_paths(&plan.masks).is_err() {
        return Err(holder_fail(report, HolderStep::Mask));
    }
    if plan.loopback && !loopback::loopback_up() {
        return Err(holder_fail(report, HolderStep::Loopback));
    }
    let listeners = usize::from(plan.proxy_listener) + plan.gateway_listeners;
    for _ in 0..listeners {
        let listener = loopback::loopback_listener();
        if listener < 0 {
            return Err(holder_fail(report, HolderStep::Listener));
        }
        let msg = Msg {
            kind: wire::MSG_LISTENER,
            ..Msg::default()
        };
        // SAFETY: `listener` was opened just now. Closed with the rest
        // below: only the server holds it then.
        unsafe { wire::send_msg(plan.sock_fd, msg, listener) };
    }
    // Once for every command: nothing they exec can gain a capability. The
    // holder and its inits keep their effective sets for mounts.
    if !syscalls::drop_bounding_set() {
        return Err(holder_fail(report, HolderStep::Bounding));
    }
    // Installed once (the kernel compiles and caches it), inherited by
    // every init and command; it lets `mount` through for the inits.
    if syscalls::install_filter(&plan.filter) != 0 {
        return Err(holder_fail(report, HolderStep::Seccomp));
    }
    // What commands read with `read_scope = "system"`, in this view.
    let mut keep = [-1 as RawFd; MAX_READ_RULES + 1];
    keep[0] = plan.sock_fd;
    let kept = match READ_RULES.open(&plan.read_rules, &mut keep[1..]) {
        Ok(n) => n + 1,
        Err(()) => return Err(holder_fail(report, HolderStep::ReadRules)),
    };
    // Ready: closing the report pipe with the rest tells the server.
    // SAFETY: holder only (this fn's contract); the fds kept are the
    // socket and the read rules.
    unsafe { close_all_but(&mut keep[..kept]) };
    for fd in 0..3 {
        // SAFETY: the holder's stdio, which nothing uses.
        unsafe { libc::close(fd) };
    }
    // Hold 0, 1 and 2 so that received fds never take those numbers (a
    // command's stdio is dup2'd onto them).
    for _ in 0..3 {
        syscalls::open(c"/dev/null", libc::O_RDWR);
    }
    // SAFETY: holder only, set up.
    unsafe { serve(plan) }
}

/// Makes every mount read-only: Landlock leaves a file's mode, owner,
/// times and extended attributes to the mount (a read-only one refuses
/// them); the workspace and the writable roots are bound again, writable.
fn all_read_only() -> bool {
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `attr` has the kernel's layout and the size given; the path
    // is NUL-terminated.
    unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            c"/".as_ptr(),
            libc::AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        ) == 0
    }
}

/// Sets this thread's `errno` (what [`holder_fail`] reports).
#[inline]
fn set_errno(value: libc::c_int) {
    // SAFETY: `__errno_location` is this thread's own `errno`, always valid.
    unsafe { *libc::__errno_location() = value };
}

/// Whether `fd` is the directory of `identity` (device, inode); true
/// without one.
#[inline]
fn fd_is(fd: RawFd, identity: Option<(u64, u64)>) -> bool {
    let Some(identity) = identity else {
        return true;
    };
    // SAFETY: `stat` is plain data; all-zero is valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open and `st` a valid out-pointer.
    (unsafe { libc::fstat(fd, &mut st) } == 0) && (st.st_dev, st.st_ino) == identity
}

/// Binds the directory of `fd` (an `O_PATH` fd opened before the private
/// `/tmp` covered it) back at `rebind.path`, writable unless
/// `rebind.readonly`, making the directories of `rebind.mkdirs` first.
/// Closes `fd`.
///
/// # Safety
///
/// `fd` is the caller's own and not used after.
unsafe fn rebind_writable(fd: RawFd, rebind: &Rebind) -> bool {
    for dir in &rebind.mkdirs {
        syscalls::mkdir(dir, 0o755);
    }
    let mut source = [0u8; PROC_FD_PATH_BYTES];
    let source = proc_fd_path(fd, &mut source);
    let bound = syscalls::mount(
        Some(source),
        &rebind.path,
        None,
        libc::MS_BIND | libc::MS_REC,
        None,
    )
    // A bind takes its source's flags: read-only, until remounted with
    // the flags the kernel keeps locked and without it.
        && syscalls::remount_bind(
            &rebind.path,
            if rebind.readonly { libc::MS_RDONLY } else { 0 },
        );
    if bound {
        // SAFETY: the caller's fd, not used after (its promise).
        unsafe { libc::close(fd) };
    }
    bound
}

/// Covers each of the host's run directories (`plan.run_dirs`) with an
/// empty tmpfs, binds back the directories of `fds` (opened from
/// `plan.run_keeps`; -1: missing, skipped) at the same paths, read-only as
/// every mount is by then, and makes the tmpfs read-only. Commands then
/// cannot reach the sockets the host's daemons listen on there, whatever
/// their modes. Closes `fds`.
///
/// # Safety
///
/// The holder only, in its own mount namespace; `fds` are its own and not
/// used after.
unsafe fn own_run(fds: &[RawFd], plan: &HolderPlan) -> bool {
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    for run in &plan.run_dirs {
        if !syscalls::mount(
            Some(c"tmpfs"),
            run,
            Some(c"tmpfs"),
            flags,
            Some(RUN_OPTIONS),
        ) {
            return false;
        }
    }
    for (&fd, keep) in fds.iter().zip(&plan.run_keeps) {
        if fd < 0 {
            continue;
        }
        for dir in &keep.mkdirs {
            syscalls::mkdir(dir, 0o755);
        }
        let mut source = [0u8; PROC_FD_PATH_BYTES];
        let source = proc_fd_path(fd, &mut source);
        let bound = syscalls::mount(
            Some(source),
            &keep.path,
            None,
            libc::MS_BIND | libc::MS_REC,
            None,
        );
        // SAFETY: the caller's fd, not used after (its promise).
        unsafe { libc::close(fd) };
        if !bound {
            return false;
        }
    }
    for run in &plan.run_dirs {
        let remounted = syscalls::mount(
            None,
            run,
            None,
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags,
            None,
        );
        if !remounted {
            return false;
        }
    }
    true
}

/// Covers the host's `/dev` with the sandbox's own: a tmpfs holding the
/// devices of `fds` (opened from `devices`, bound at the same paths), the
/// directory for `/dev/shm`, a private `devpts` of `pts_options` (a new
/// instance, with a `max=`) on `/dev/pts` and the links; read-only once
/// made. Commands then cannot open the host's
/// terminals, consoles, disks or any other device, whatever their
/// permissions. Closes `fds`.
///
/// # Safety
///
/// The holder only, in its own mount namespace; `fds` are its own and not
/// used after.
unsafe fn own_dev(fds: &[RawFd], devices: &[CString], pts_options: &CStr) -> bool {
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    if !syscalls::mount(
        Some(c"tmpfs"),
        DEV_DIR,
        Some(c"tmpfs"),
        flags,
        Some(DEV_OPTIONS),
    ) {
        return false;
    }
    for (&fd, dev) in fds.iter().zip(devices) {
        let spot = syscalls::create(dev, libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC, 0o666);
        if spot < 0 {
            return false;
        }
        // SAFETY: `spot` was opened just now.
        unsafe { libc::close(spot) };
        let mut source = [0u8; PROC_FD_PATH_BYTES];
        let source = proc_fd_path(fd, &mut source);
        let bound = syscalls::mount(Some(source), dev, None, libc::MS_BIND, None);
        // SAFETY: the caller's fd, not used after (its promise).
        unsafe { libc::close(fd) };
        if !bound {
            return false;
        }
    }
    if !syscalls::mkdir(DEV_SHM, 0o755) || !syscalls::mkdir(DEV_PTS, 0o755) {
        return false;
    }
    if !syscalls::mount(
        Some(c"devpts"),
        DEV_PTS,
        Some(c"devpts"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some(pts_options),
    ) {
        return false;
    }
    for (target, link) in DEV_LINKS {
        // SAFETY: both are NUL-terminated constants.
        if unsafe { libc::symlink(target.as_ptr(), link.as_ptr()) } != 0 {
            return false;
        }
    }
    syscalls::mount(
        None,
        DEV_DIR,
        None,
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags,
        None,
    )
}

/// Entry of the holder as the first process of the sandbox's pid namespace.
extern "C" fn pid_one_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the plan `become_pid_one` passed, which lives as
    // long as the memory both processes share (the parent only waits).
    let plan = unsafe { &*(arg as *const HolderPlan) };
    // Its end is the sandbox's: killed with the process waiting for it
    // (then the kernel kills every process in the namespace).
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
    // SAFETY: the holder, single-threaded, its user namespace mapped (the
    // contract of `holder_main`, which `become_pid_one` was called under).
    let _ = unsafe { holder_setup(plan) };
    // SAFETY: `_exit` ends this process without running anything else.
    unsafe { libc::_exit(HOLDER_FAILED) }
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
/// As [`holder_main`], after `unshare(CLONE_NEWPID)`.
unsafe fn become_pid_one(plan: &HolderPlan) -> ! {
    let Some(stack) = syscalls::map_stack(HOLDER_STACK_BYTES) else {
        holder_fail(plan.report_fd, HolderStep::Fork);
        // SAFETY: `_exit` ends this process without running anything else.
        unsafe { libc::_exit(HOLDER_FAILED) }
    };
    // SAFETY: the child runs `pid_one_main` on the stack just mapped (its
    // top passed; nothing else uses it) with `plan`, which outlives it:
    // this process never returns from here, it only waits and exits.
    let pid = unsafe {
        libc::clone(
            pid_one_main,
            syscalls::stack_top(stack, HOLDER_STACK_BYTES),
            libc::CLONE_VM | libc::SIGCHLD,
            (plan as *const HolderPlan).cast_mut().cast(),
        )
    };
    if pid < 0 {
        holder_fail(plan.report_fd, HolderStep::Fork);
        // SAFETY: `_exit` ends this process without running anything else.
        unsafe { libc::_exit(HOLDER_FAILED) }
    }
    // SAFETY: this process only waits from here on and uses no fd.
    unsafe { libc::close_range(0, libc::c_uint::MAX, 0) };
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer.
        let reaped = unsafe { libc::waitpid(pid, &mut status, 0) };
        if reaped == pid || (reaped < 0 && errno() != libc::EINTR) {
            break;
        }
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        HOLDER_FAILED
    };
    // SAFETY: `_exit` ends this process without running anything else.
    unsafe { libc::_exit(code) }
}

/// The signals this process ignores (bit `n - 1` for signal `n`).
fn ignored_signals() -> u64 {
    let mut ignored = 0u64;
    for sig in 1..libc::SIGRTMAX().min(MAX_SIGNAL) + 1 {
        // SAFETY: `sigaction` is plain data; all-zero is valid.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: a null new action only reads the disposition into `old`.
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } == 0
            && old.sa_sigaction == libc::SIG_IGN
        {
            ignored |= 1 << (sig - 1);
        }
    }
    ignored
}

/// The holder's loop: keeps one init forked ahead (into a fresh pid
/// namespace, its mount namespace and `/proc` already made) that takes the
/// next request itself; forks one on demand when requests come faster;
/// reaps what ends; exits when the server's end closes.
///
/// # Safety
///
/// The holder only (single-threaded, never execs), set up.
unsafe fn serve(plan: &HolderPlan) -> ! {
    let sock = plan.sock_fd;
    let chld = shim::signal_set(&[libc::SIGCHLD]);
    // SAFETY: `chld` is a valid signal set; the old mask is not wanted.
    unsafe { libc::sigprocmask(libc::SIG_BLOCK, &chld, std::ptr::null_mut()) };
    // SAFETY: `chld` is a valid signal set.
    let sigfd = unsafe { libc::signalfd(-1, &chld, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
    IGNORED_SIGNALS.store(ignored_signals(), Ordering::Relaxed);
    // The init forked ahead writes the id of the request it took here.
    let mut taken = [-1 as RawFd; 2];
    // SAFETY: `taken` has room for the two fds.
    if unsafe { libc::pipe2(taken.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        // SAFETY: `_exit` ends this process without running anything else.
        unsafe { libc::_exit(HOLDER_FAILED) }
    }
    let holder = Holder { plan, sigfd, taken };
    let mut landlock_fd: RawFd = -1;
    // The init forked ahead, waiting for a request (0: none).
    let mut ready: libc::pid_t = 0;
    loop {
        if ready == 0 && landlock_fd >= 0 && plan.fork_ahead {
            // SAFETY: the holder, set up; `landlock_fd` is the ruleset.
            ready = unsafe { holder.fork_init(landlock_fd, None) }.unwrap_or(0);
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
            // While an init waits on it, the holder only watches for the
            // server's end closing.
            libc::pollfd {
                fd: sock,
                events: if ready == 0 { libc::POLLIN } else { 0 },
                revents: 0,
            },
        ];
        // SAFETY: `polls` is a valid array of the length given.
        if unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, -1) } < 0 {
            continue;
        }
        // Before reaping: an init that took a request and then died has
        // said so first.
        if polls[0].revents != 0 {
            let mut byte = [0u8; 1];
            if read_bytes(taken[0], &mut byte) == 1 {
                ready = 0;
            }
        }
        if polls[1].revents != 0 {
            let mut info = [0u8; SIGINFO_BYTES];
            while read_bytes(sigfd, &mut info) > 0 {}
            let mut status = 0;
            loop {
                // SAFETY: `status` is a valid out-pointer.
                let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
                if pid <= 0 {
                    break;
                }
                if pid == ready {
                    ready = 0;
                }
            }
        }
        if polls[2].revents & (libc::POLLHUP | libc::POLLERR) != 0 && ready != 0 {
            // SAFETY: `_exit` ends this process without running anything else.
            unsafe { libc::_exit(0) }
        }
        if polls[2].revents == 0 || ready != 0 {
            continue;
        }
        let mut msg = Msg::default();
        let mut fds = [-1 as RawFd; MSG_MAX_FDS];
        // SAFETY: the holder owns its socket and what arrives on it.
        let Some(count) = (unsafe { wire::recv_msg(sock, &mut msg, &mut fds) }) else {
            // SAFETY: `_exit` ends this process without running anything else.
            unsafe { libc::_exit(0) }
        };
        match msg.kind {
            MSG_LANDLOCK if count == 1 => {
                landlock_fd = fds[0];
                // The server has read what it needed through
                // /proc/<holder>. From now on the holder and every init
                // (copies of the server's memory) are not dumpable, so no
                // command can read them through /proc.
                // SAFETY: prctl with integer arguments only.
                unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
            }
            MSG_RUN if count == MSG_MAX_FDS => {
                // SAFETY: the holder, set up; `fds` are the request's.
                if let Err(errno) = unsafe { holder.fork_init(landlock_fd, Some((msg, &fds))) } {
                    let failed = Msg {
                        kind: MSG_FORK_FAILED,
                        arg: errno,
                        id: msg.id,
                        len: 0,
                    };
                    // SAFETY: the command's socket, received just now.
                    unsafe { wire::send_msg(fds[MSG_MAX_FDS - 1], failed, -1) };
                }
                // SAFETY: received just now; the init has its own copies.
                unsafe { close_each(&fds[..count]) };
            }
            // SAFETY: received just now, of no use.
            _ => unsafe { close_each(&fds[..count]) },
        }
    }
}

/// Closes each of `fds`.
///
/// # Safety
///
/// They are the caller's own and not used after.
pub(super) unsafe fn close_each(fds: &[RawFd]) {
    for &fd in fds {
        // SAFETY: the caller's promise.
        unsafe { libc::close(fd) };
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
    /// The holder only (single-threaded, set up); `request`'s fds are the
    /// holder's own.
    unsafe fn fork_init(
        &self,
        landlock_fd: RawFd,
        request: Option<(Msg, &[RawFd; MSG_MAX_FDS])>,
    ) -> std::result::Result<libc::pid_t, i32> {
        // The init's pid in the sandbox's pid namespace, which only the
        // holder learns (the init is pid 1 in its own); the server finds
        // its own view of it through the pidfd.
        let mut pid_pipe = [-1 as RawFd; 2];
        // SAFETY: `pid_pipe` has room for the two fds.
        if unsafe { libc::pipe2(pid_pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(errno());
        }
        // SAFETY: a plain fork (no new stack, no shared memory) of a
        // single-threaded process: the child has its own copy of it all.
        let pid = unsafe {
            libc::syscall(
                libc::SYS_clone,
                (libc::CLONE_NEWPID | libc::SIGCHLD) as libc::c_ulong,
                0usize,
                0usize,
                0usize,
                0usize,
            )
        } as libc::pid_t;
        if pid != 0 {
            let fork_errno = errno();
            if pid > 0 {
                syscalls::write_bytes(pid_pipe[1], &pid.to_ne_bytes());
            }
            // SAFETY: the pipe made above; the child has its own copies.
            unsafe { close_each(&pid_pipe) };
            return if pid > 0 { Ok(pid) } else { Err(fork_errno) };
        }
        // The init, pid 1 of its namespace, from here on.
        // SAFETY: the holder's fds, the init's copies, of no use to it.
        unsafe { close_each(&[self.sigfd, self.taken[0], pid_pipe[1]]) };
        let mut raw = [0u8; 4];
        let host_pid = if read_bytes(pid_pipe[0], &mut raw) == 4 {
            libc::pid_t::from_ne_bytes(raw)
        } else {
            0
        };
        // SAFETY: as above.
        unsafe { libc::close(pid_pipe[0]) };
        let sock = self.plan.sock_fd;
        let setup = &self.plan.commands;
        // SAFETY: a forked child of the holder.
        let prepared = unsafe { init::init_prepare(setup) };
        let (msg, fds, taken_fd) = match request {
            Some((msg, fds)) => {
                // SAFETY: the init's copies, of no use to it.
                unsafe { close_each(&[self.taken[1], sock]) };
                (msg, *fds, -1)
            }
            None => {
                let mut msg = Msg::default();
                let mut fds = [-1 as RawFd; MSG_MAX_FDS];
                loop {
                    // SAFETY: the init owns its copy of the socket and what
                    // arrives on it.
                    let Some(count) = (unsafe { wire::recv_msg(sock, &mut msg, &mut fds) }) else {
                        // SAFETY: `_exit` ends this process.
                        unsafe { libc::_exit(0) }
                    };
                    if msg.kind == MSG_RUN && count == MSG_MAX_FDS {
                        break;
                    }
                    // SAFETY: received just now, of no use.
                    unsafe { close_each(&fds[..count]) };
                }
                // SAFETY: the init's copy; requests come to the holder now.
                unsafe { libc::close(sock) };
                (msg, fds, self.taken[1])
            }
        };
        let request = init::Request {
            msg,
            fds,
            host_pid,
            taken_fd,
        };
        // SAFETY: a forked child of the holder, after `init_prepare`.
        unsafe { init::namespace_init(setup, landlock_fd, &request, &prepared) }
    }
}
