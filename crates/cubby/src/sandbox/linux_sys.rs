//! The `linux` provider's code between `fork` and `exec`: the only other
//! `unsafe` module besides the reaper shim.
//!
//! Two programs run here, both in children forked by `Command::spawn`, so
//! (like the shim) nothing may allocate or take a lock: every path and
//! buffer was prepared by the parent, and every call is a plain syscall.
//!
//! - The **holder** is forked once per sandbox. It creates the user, mount,
//!   IPC, UTS and (with network off) network namespaces, maps the invoking
//!   user to itself, makes the mount tree private, mounts a private tmpfs on
//!   `/tmp` (binding back the workspace and writable roots that lived
//!   there) and on `/dev/shm`, masks the `deny_read` paths, brings the
//!   loopback up, and then sleeps until its liveness pipe closes. It never
//!   execs: it exists so that its namespaces exist.
//! - **Each command** is forked from the server: it joins the holder's
//!   namespaces (`setns`), takes a fresh mount and pid namespace, binds the
//!   protected paths read-only, changes into its working directory beneath
//!   the root, and forks. The parent becomes the reaper shim; the child is
//!   the init of the new pid namespace: it mounts its own `/proc`, sets the
//!   rlimits, applies Landlock, drops every capability, installs the
//!   seccomp filters, and returns so that `std` execs the command. When
//!   that init dies the kernel kills everything else in its namespace.

#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;

use super::sys;

/// Rebinds and masks the holder can take (they live in stack arrays).
pub(crate) const MAX_HOLDER_MOUNTS: usize = 32;

/// Where the holder keeps the objects it masks `deny_read` paths with.
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
}

impl HolderStep {
    /// Names the step for an error message.
    pub(crate) fn describe(byte: u8) -> &'static str {
        match byte {
            1 => "creating the user, mount, IPC, UTS and network namespaces",
            2 => "mapping the user id into the user namespace",
            3 => "mapping the group id into the user namespace",
            4 => "making the mount tree private",
            5 => "opening the workspace or a writable root",
            6 => "mounting the private /tmp",
            7 => "binding the workspace back beneath the private /tmp",
            8 => "mounting the private /dev/shm",
            9 => "masking a deny_read path",
            10 => "bringing up the loopback interface",
            _ => "setting up the sandbox",
        }
    }
}

/// A directory that lives under `/tmp` on the host and must stay visible
/// (and the same inode) once the private `/tmp` is mounted.
#[derive(Debug)]
pub(crate) struct Rebind {
    /// Its absolute path.
    pub path: CString,
    /// Directories to create in the private `/tmp`, outermost first (the
    /// last is `path` itself).
    pub mkdirs: Vec<CString>,
    /// Bound read-only (`read-only` mode: Landlock would otherwise grant it
    /// the private `/tmp`'s rights, since it sits beneath that mount).
    pub readonly: bool,
}

/// A `deny_read` path to hide behind an empty, unreadable object.
#[derive(Debug)]
pub(crate) struct Mask {
    /// Its absolute path.
    pub path: CString,
    /// Whether it is a directory.
    pub dir: bool,
}

/// Everything the holder needs, prepared by the parent.
#[derive(Debug)]
pub(crate) struct HolderPlan {
    pub unshare_flags: libc::c_int,
    pub uid_map: Vec<u8>,
    pub gid_map: Vec<u8>,
    pub private_tmp: bool,
    pub rebinds: Vec<Rebind>,
    pub masks: Vec<Mask>,
    pub loopback: bool,
    /// Read end of the liveness pipe: the holder lives until it closes.
    pub alive_fd: RawFd,
    /// Write end of the report pipe (step + errno on failure).
    pub report_fd: RawFd,
}

/// A path bound onto itself in each command's mount namespace.
#[derive(Debug)]
pub(crate) struct Protect {
    /// Relative to the workspace root.
    pub path: CString,
    /// Stays writable (bound only so it cannot be renamed away).
    pub writable: bool,
}

/// Everything one command needs, prepared by the parent.
#[derive(Debug)]
pub(crate) struct CommandPlan {
    /// `cgroup.procs` of the sandbox's pids cgroup, when there is one.
    pub cgroup_procs: Option<CString>,
    /// The holder's namespaces, the user namespace first.
    pub namespaces: Vec<(RawFd, libc::c_int)>,
    /// Absolute path of the workspace root.
    pub root: CString,
    /// The working directory relative to the root (`None` for the root).
    pub cwd: Option<CString>,
    pub protect: Vec<Protect>,
    pub rlimits: Vec<(libc::__rlimit_resource_t, libc::rlim_t)>,
    pub landlock_fd: RawFd,
    pub filters: Arc<Vec<Vec<libc::sock_filter>>>,
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

/// Arranges for `cmd` to become a sandbox's holder.
pub(crate) fn run_as_holder(cmd: &mut std::process::Command, plan: Arc<HolderPlan>) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec; it only
    // makes syscalls on data prepared before the fork and never allocates.
    unsafe {
        cmd.pre_exec(move || holder_main(&plan));
    }
}

/// The holder: sets the namespaces up, then waits. Returns only on error.
fn holder_main(plan: &HolderPlan) -> io::Result<()> {
    let report = plan.report_fd;
    // SAFETY: plain syscalls on NUL-terminated paths and stack buffers in a
    // single-threaded forked child.
    unsafe {
        if libc::unshare(plan.unshare_flags) != 0 {
            return Err(holder_fail(report, HolderStep::Unshare));
        }
        // Absent on kernels before 3.19; then it is not needed either.
        write_file(c"/proc/self/setgroups", b"deny");
        if !write_file(c"/proc/self/uid_map", &plan.uid_map) {
            return Err(holder_fail(report, HolderStep::UidMap));
        }
        if !write_file(c"/proc/self/gid_map", &plan.gid_map) {
            return Err(holder_fail(report, HolderStep::GidMap));
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
        if plan.private_tmp {
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
            if libc::mount(
                c"tmpfs".as_ptr(),
                c"/tmp".as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                c"mode=1777".as_ptr().cast(),
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
                if rebind.readonly
                    && libc::mount(
                        std::ptr::null(),
                        rebind.path.as_ptr(),
                        std::ptr::null(),
                        libc::MS_REMOUNT
                            | libc::MS_BIND
                            | libc::MS_RDONLY
                            | locked_flags(&rebind.path),
                        std::ptr::null(),
                    ) != 0
                {
                    return Err(holder_fail(report, HolderStep::Rebind));
                }
                libc::close(*fd);
            }
        }
        if libc::mount(
            c"tmpfs".as_ptr(),
            c"/dev/shm".as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            c"mode=1777".as_ptr().cast(),
        ) != 0
        {
            return Err(holder_fail(report, HolderStep::MountShm));
        }
        if !plan.masks.is_empty() {
            mask_paths(plan)?;
        }
        if plan.loopback && !loopback_up() {
            return Err(holder_fail(report, HolderStep::Loopback));
        }
        // Ready. Holding no other fd is what lets spawn() return.
        let alive = plan.alive_fd as libc::c_uint;
        if alive > 0 {
            libc::close_range(0, alive - 1, 0);
        }
        libc::close_range(alive + 1, libc::c_uint::MAX, 0);
        let mut byte = 0u8;
        loop {
            let n = libc::read(plan.alive_fd, (&mut byte as *mut u8).cast(), 1);
            if n == 0 || (n < 0 && *libc::__errno_location() != libc::EINTR) {
                break;
            }
        }
        libc::_exit(0)
    }
}

/// Hides each `deny_read` path behind an empty mode-000 object on a private
/// tmpfs, bound read-only.
///
/// # Safety
///
/// Async-signal-safe; holder only.
unsafe fn mask_paths(plan: &HolderPlan) -> io::Result<()> {
    let report = plan.report_fd;
    // SAFETY: plain syscalls on NUL-terminated paths.
    unsafe {
        libc::mkdir(MASK_STORE.as_ptr(), 0o700);
        if libc::mount(
            c"tmpfs".as_ptr(),
            MASK_STORE.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
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
        for mask in &plan.masks {
            let source = if mask.dir { MASK_DIR } else { MASK_FILE };
            if libc::mount(
                source.as_ptr(),
                mask.path.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            ) != 0
                || libc::mount(
                    std::ptr::null(),
                    mask.path.as_ptr(),
                    std::ptr::null(),
                    libc::MS_REMOUNT
                        | libc::MS_BIND
                        | libc::MS_RDONLY
                        | libc::MS_NOSUID
                        | libc::MS_NODEV
                        | libc::MS_NOEXEC,
                    std::ptr::null(),
                ) != 0
            {
                return Err(holder_fail(report, HolderStep::Mask));
            }
        }
        libc::umount2(MASK_STORE.as_ptr(), libc::MNT_DETACH);
        libc::rmdir(MASK_STORE.as_ptr());
    }
    Ok(())
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

/// Arranges for `cmd` to run as the init of a fresh pid namespace inside
/// the sandbox, under a reaper shim.
pub(crate) fn run_in_sandbox(cmd: &mut std::process::Command, plan: Arc<CommandPlan>) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec; it only
    // makes syscalls on data prepared before the fork and never allocates.
    unsafe {
        cmd.pre_exec(move || command_pre_exec(&plan));
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

/// The per-command setup; see the module docs.
fn command_pre_exec(plan: &CommandPlan) -> io::Result<()> {
    let last = io::Error::last_os_error;
    // SAFETY: plain syscalls on data prepared before the fork, in a
    // single-threaded forked child; stack buffers only.
    unsafe {
        if let Some(procs) = &plan.cgroup_procs
            && !write_file(procs, b"0")
        {
            return Err(last());
        }
        for &(fd, nstype) in &plan.namespaces {
            if libc::setns(fd, nstype) != 0 {
                return Err(last());
            }
        }
        if libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWPID) != 0 {
            return Err(last());
        }
        if libc::chdir(plan.root.as_ptr()) != 0 {
            return Err(last());
        }
        for p in &plan.protect {
            if libc::mount(
                p.path.as_ptr(),
                p.path.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            ) != 0
            {
                return Err(last());
            }
            if !p.writable
                && libc::mount(
                    std::ptr::null(),
                    p.path.as_ptr(),
                    std::ptr::null(),
                    libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | locked_flags(&p.path),
                    std::ptr::null(),
                ) != 0
            {
                return Err(last());
            }
        }
        if let Some(cwd) = &plan.cwd {
            let mut how: libc::open_how = std::mem::zeroed();
            how.flags = (libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64;
            how.resolve =
                libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
            let fd = libc::syscall(
                libc::SYS_openat2,
                libc::AT_FDCWD,
                cwd.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            ) as libc::c_int;
            if fd < 0 || libc::fchdir(fd) != 0 {
                return Err(last());
            }
            libc::close(fd);
        }
        let set = sys::signal_set(&[libc::SIGTERM, libc::SIGUSR1]);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        let mut status_pipe = [-1 as libc::c_int; 2];
        if libc::pipe2(status_pipe.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(last());
        }
        let [status_r, status_w] = status_pipe;
        let pid = libc::fork();
        if pid < 0 {
            return Err(last());
        }
        if pid > 0 {
            libc::close(status_w);
            sys::shim_main(pid, &set, true, status_r);
        }
        // The init of the command's pid namespace: its own process group
        // (the command stays in it, so a stop reaches the command while the
        // init, which has no handler, ignores it).
        libc::close(status_r);
        libc::setpgid(0, 0);
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
        if libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        ) != 0
        {
            return Err(last());
        }
        let command = libc::fork();
        if command < 0 {
            return Err(last());
        }
        if command > 0 {
            namespace_init(command, status_w);
        }
        libc::close(status_w);
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
        for &(resource, value) in &plan.rlimits {
            let limit = libc::rlimit {
                rlim_cur: value,
                rlim_max: value,
            };
            if libc::setrlimit(resource, &limit) != 0 {
                return Err(last());
            }
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(last());
        }
        if libc::syscall(libc::SYS_landlock_restrict_self, plan.landlock_fd, 0u32) != 0 {
            return Err(last());
        }
        drop_capabilities()?;
        for filter in plan.filters.iter() {
            let prog = libc::sock_fprog {
                len: filter.len() as libc::c_ushort,
                filter: filter.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                &prog as *const libc::sock_fprog,
                0,
                0,
            ) != 0
            {
                return Err(last());
            }
        }
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        Ok(())
    }
}

/// The pid-namespace init: reaps every process re-parented to it until
/// `command` ends, hands the command's wait status to the shim, and exits,
/// which makes the kernel kill whatever is left in the namespace.
///
/// # Safety
///
/// Forked child only; async-signal-safe.
unsafe fn namespace_init(command: libc::pid_t, status_w: libc::c_int) -> ! {
    // SAFETY: plain syscalls on stack data.
    unsafe {
        let keep = status_w as libc::c_uint;
        if keep > 0 {
            libc::close_range(0, keep - 1, 0);
        }
        libc::close_range(keep + 1, libc::c_uint::MAX, 0);
        loop {
            let mut status: libc::c_int = 0;
            let reaped = libc::waitpid(-1, &mut status, 0);
            if reaped == command {
                let raw = status.to_ne_bytes();
                libc::write(status_w, raw.as_ptr().cast(), raw.len());
                libc::_exit(0);
            }
            if reaped < 0 && *libc::__errno_location() == libc::ECHILD {
                libc::_exit(0);
            }
        }
    }
}

/// Empties the bounding, ambient, effective, permitted and inheritable
/// capability sets, so nothing the command execs can regain any.
///
/// # Safety
///
/// Async-signal-safe.
unsafe fn drop_capabilities() -> io::Result<()> {
    /// `_LINUX_CAPABILITY_VERSION_3`.
    const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    /// Higher than any capability number the kernel knows.
    const CAP_SCAN_LIMIT: libc::c_ulong = 64;
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
        for cap in 0..CAP_SCAN_LIMIT {
            // EINVAL past the last capability the kernel knows: ignored.
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
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
