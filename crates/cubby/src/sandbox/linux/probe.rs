//! What this machine offers the `linux` provider, read without changing
//! anything: the capability probe of `cubby doctor` ([`Capabilities`]), the
//! quick check of [`LinuxSandbox::open`](super::LinuxSandbox::open), and
//! the facts a sandbox's plan depends on ([`machine_facts`]: ids, kernel
//! limits, memory, devices, hard rlimits).

#![allow(unsafe_code)]

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use super::cgroup::pids_cgroup_parent;
use super::plan::{
    Device, Facts, HOST_PID_MAX, RLIMIT_RESOURCES, RUN_DIRS, RUN_KEEPS, TERMINAL_DEVICE,
    USER_LIMITS, WRITABLE_DEVICES,
};

/// The smallest Landlock ABI the provider works with.
const MIN_LANDLOCK_ABI: i32 = 1;
/// What [`read_proc`] reads of a file: its first line is enough for the
/// numbers, the kernel's release and `/proc/meminfo`'s `MemTotal`.
const PROC_READ_BYTES: usize = 128;
/// The first kernel whose `pid_max` is per pid namespace.
const NAMESPACED_PID_MAX_SINCE: (u32, u32) = (6, 14);

/// What this machine offers the `linux` provider (`cubby doctor`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// The Landlock ABI version, when Landlock is enabled.
    pub landlock_abi: Option<i32>,
    /// Whether a user namespace (with mount, network, IPC and UTS
    /// namespaces inside) can be created; the error otherwise.
    pub user_namespaces: std::result::Result<(), String>,
    /// Whether a seccomp filter can be installed; the error otherwise.
    pub seccomp: std::result::Result<(), String>,
    /// A pids cgroup directory cubby can make sandboxes in, if any.
    pub pids_cgroup: Option<PathBuf>,
    /// Whether cubby runs as root (then `RLIMIT_NPROC` does not apply).
    pub root: bool,
    /// Whether `kernel.pid_max` is per pid namespace (Linux 6.14+): then
    /// the sandbox's pid namespace holds its process budget.
    pub namespaced_pid_max: bool,
}

impl Capabilities {
    /// Probes the running kernel (forks one short-lived child).
    pub fn probe() -> Capabilities {
        let (user_namespaces, seccomp) = probe_isolation();
        Capabilities {
            landlock_abi: landlock_abi().filter(|&v| v >= MIN_LANDLOCK_ABI),
            user_namespaces,
            seccomp,
            pids_cgroup: pids_cgroup_parent(),
            root: rustix::process::geteuid().is_root(),
            namespaced_pid_max: namespaced_pid_max(),
        }
    }

    /// What is missing for the `linux` provider, if anything.
    pub fn missing(&self) -> Vec<String> {
        let mut missing = Vec::new();
        if self.landlock_abi.is_none() {
            missing.push(
                "Landlock (kernel 5.13+ with `landlock` in the `lsm=` boot list)".to_string(),
            );
        }
        if let Err(e) = &self.user_namespaces {
            missing.push(format!(
                "user namespaces ({e}; see sysctl user.max_user_namespaces, \
                 kernel.unprivileged_userns_clone, kernel.apparmor_restrict_unprivileged_userns)"
            ));
        }
        if let Err(e) = &self.seccomp {
            missing.push(format!("seccomp filters ({e})"));
        }
        missing
    }
}

/// What is missing, by checks that fork nothing (the fork-based probe is
/// [`Capabilities::probe`]; a namespace refused at the sandbox's start is
/// reported then, naming the step).
pub(super) fn quick_check() -> Vec<String> {
    let mut missing = Vec::new();
    if landlock_abi().is_none_or(|v| v < MIN_LANDLOCK_ABI) {
        missing.push("Landlock (kernel 5.13+ with `landlock` in the `lsm=` boot list)".to_string());
    }
    let max_userns = read_number("/proc/sys/user/max_user_namespaces");
    if max_userns == Some(0) || !Path::new("/proc/self/ns/user").exists() {
        missing.push("user namespaces (sysctl user.max_user_namespaces is 0)".to_string());
    }
    if !seccomp_available() {
        missing.push("seccomp (a kernel built with CONFIG_SECCOMP_FILTER)".to_string());
    }
    missing
}

/// True when `kernel.pid_max` is per pid namespace (Linux 6.14+).
pub(super) fn namespaced_pid_max() -> bool {
    let release = read_proc("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse::<u32>().ok());
    match (parts.next(), parts.next()) {
        (Some(major), Some(minor)) => (major, minor) >= NAMESPACED_PID_MAX_SINCE,
        _ => false,
    }
}

/// A number read from a file under `/proc`.
fn read_number(path: &str) -> Option<u64> {
    read_proc(path)?.trim().parse().ok()
}

/// The start of a file under `/proc` (at most [`PROC_READ_BYTES`]): one
/// `open` and one `read`, where `read_to_string` also `stat`s and reads
/// until the end.
fn read_proc(path: &str) -> Option<String> {
    let fd = rustix::fs::open(
        path,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()?;
    let mut buf = [0u8; PROC_READ_BYTES];
    let n = rustix::io::read(&fd, &mut buf).ok()?;
    String::from_utf8(buf[..n].to_vec()).ok()
}

/// The facts of [`Facts`] that are the machine's, for a sandbox whose
/// workspace and writable roots are `dirs` (the sandbox adds its
/// `deny_read` paths and credential stores).
pub(super) fn machine_facts(dirs: &[&Path]) -> Facts {
    const KIB_PER_MIB: u64 = 1024;
    let user_limits = USER_LIMITS.map(|(in_namespace, host)| {
        (
            read_number(&format!("/proc/sys/user/{in_namespace}")),
            read_number(&format!("/proc/sys/fs/{host}")),
        )
    });
    // `MemTotal` is its first line.
    let memory_mb = read_proc("/proc/meminfo")
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map(|kib| kib / KIB_PER_MIB);
    let readonly_mounts = dirs
        .iter()
        .filter(|dir| {
            rustix::fs::statvfs(**dir)
                .is_ok_and(|st| st.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY))
        })
        .map(|dir| dir.to_path_buf())
        .collect();
    let devices = WRITABLE_DEVICES
        .into_iter()
        .chain([TERMINAL_DEVICE])
        .map(|path| Device {
            path,
            exists: Path::new(path).exists(),
            char_device: std::fs::symlink_metadata(path)
                .is_ok_and(|m| m.file_type().is_char_device()),
        })
        .collect();
    Facts {
        uid: rustix::process::getuid().as_raw(),
        gid: rustix::process::getgid().as_raw(),
        namespaced_pid_max: namespaced_pid_max(),
        host_pid_max: read_number(HOST_PID_MAX),
        user_limits,
        memory_mb,
        page_bytes: crate::sandbox::local::shim::page_size(),
        readonly_mounts,
        deny_read_present: Vec::new(),
        stores: Vec::new(),
        devices,
        hard_limits: RLIMIT_RESOURCES.map(hard_limit),
        run_dirs: run_dirs(),
        run_keeps: run_keeps(),
    }
}

/// Of [`RUN_DIRS`], those that are directories of their own (not links).
fn run_dirs() -> Vec<PathBuf> {
    RUN_DIRS
        .iter()
        .filter(|dir| std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()))
        .map(PathBuf::from)
        .collect()
}

/// [`RUN_KEEPS`] that are directories, canonical, and the directory of
/// `/etc/resolv.conf`'s target (canonical; the plan keeps those beneath a
/// run directory).
fn run_keeps() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = RUN_KEEPS
        .iter()
        .filter_map(|dir| std::fs::canonicalize(dir).ok())
        .filter(|dir| dir.is_dir())
        .collect();
    if let Some(dir) = std::fs::canonicalize("/etc/resolv.conf")
        .ok()
        .and_then(|target| target.parent().map(Path::to_path_buf))
        && !out.contains(&dir)
    {
        out.push(dir);
    }
    out
}

/// The kernel's Landlock ABI version, if Landlock is enabled.
pub(super) fn landlock_abi() -> Option<i32> {
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
fn hard_limit(resource: libc::__rlimit_resource_t) -> libc::rlim_t {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid out-pointer.
    if unsafe { libc::getrlimit(resource, &mut limit) } != 0 {
        return libc::RLIM_INFINITY;
    }
    // A share is of what the host's own processes get, their soft limit
    // (the kernel checks them against it), not of what they could raise it to.
    if resource == libc::RLIMIT_SIGPENDING || resource == libc::RLIMIT_MSGQUEUE {
        return limit.rlim_cur.min(limit.rlim_max);
    }
    limit.rlim_max
}

/// Exit codes of the probe child.
const PROBE_NO_NAMESPACES: i32 = 10;
const PROBE_NO_SECCOMP: i32 = 11;

/// Forks a child that creates the namespaces a sandbox uses and installs an
/// allow-all seccomp filter; reports what failed.
fn probe_isolation() -> (Result<(), String>, Result<(), String>) {
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
fn seccomp_available() -> bool {
    // SAFETY: PR_GET_SECCOMP takes no pointer.
    unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 }
}
