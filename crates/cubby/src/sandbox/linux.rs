//! The `linux` provider: the confined [`LocalFs`] for the file tools, and
//! commands that run in namespaces under Landlock, seccomp and rlimits.
//!
//! A sandbox starts lazily, with the first command: a *holder* process
//! (forked once; see `linux_sys.rs`) creates the user, mount, IPC, UTS and
//! network namespaces and keeps them alive, with the sandbox's seccomp
//! filter installed and the capability bounding set empty. Each command
//! then runs in them, in its own mount and pid namespaces (an init forked
//! ahead), and execs under a Landlock ruleset compiled here once per
//! sandbox. Killing the command's pid-namespace init kills every
//! descendant.
//!
//! What is compiled to the kernel, per [`LinuxOptions`]:
//!
//! - **Landlock**: the whole file system readable and executable (with
//!   `read_scope = "system"`, a second layer per command narrows reads to
//!   what `read_view.rs` lists and the command's `/proc`); writable
//!   only beneath the workspace root, the private `/tmp` and `/dev/shm`,
//!   the configured writable roots (none of them in `read-only` mode), and
//!   a few devices (`/dev/null`, `/dev/zero`, …). Signals and abstract unix
//!   sockets are scoped to the command.
//! - **Mounts**: every mount read-only, the root and the writable roots
//!   bound back writable (Landlock does not cover modes, owners, times or
//!   extended attributes); protected paths bound read-only over themselves
//!   in each command's mount namespace (a missing one is reserved by an
//!   empty directory that is in the workspace only while a command runs;
//!   see `reserve.rs`); `deny_read` paths and the host's credential stores
//!   (`read_view.rs`) hidden behind empty unreadable objects, by the holder
//!   and, for what appeared later, by each command's init, the directories
//!   above a `deny_read` path pinned; a private `/tmp`; a
//!   `/dev` of the sandbox's own with only a few of the host's devices.
//! - **seccomp**: `ptrace`, `process_vm_*`, `mount` and the new mount API,
//!   `bpf`, `io_uring_*`, `kexec_*`, module loading, `perf_event_open`, key
//!   management, `setns`, new user namespaces and more return `EPERM`;
//!   with network off, so does every socket that is not `AF_UNIX` (with
//!   `allow`, every socket but `AF_UNIX`, `AF_INET`, `AF_INET6`); so do
//!   terminal-injecting `ioctl`s and set-ID bits in a file mode.
//! - **Network** `allow`: the namespace has loopback only; the holder opens
//!   a listener there for the host-side egress proxy (`net/proxy.rs`), and
//!   commands get `HTTP_PROXY`/`HTTPS_PROXY` and placeholders for injected
//!   secrets.
//! - **Bounds per sandbox** from [`SandboxLimits`]: the processes of the
//!   whole sandbox by the `pid_max` of its pid namespace (Linux 6.14+;
//!   every command's pid namespace nests there) or a pids cgroup when
//!   cubby can make one, and by `RLIMIT_NPROC`, which the kernel counts
//!   per user namespace for a user other than root; `/tmp` and `/dev/shm`
//!   of `tmp_mb` each (freed with the sandbox); a quarter of the user's
//!   inotify and fanotify limits. Other rlimits are per process.
//!
//! `full-access` runs commands unconfined (as the `local` provider does).

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::pipe::{PipeFlags, pipe_with};

use super::linux_sys::{self, HolderPlan, Mask, Rebind};
use super::local::{PLACEHOLDER_FILE_MODE, is_placeholder_mode};
use super::read_view::{self, HostStores};
use super::reserve::{Kind, Reservations, WithoutReservations};
use super::seccomp::Sockets;
use super::{EntryKind, ExecSpec, FileSystem, LocalFs, LocalSandbox, ProviderKind, Sandbox};
use crate::config::{NetworkMode, ReadScope, SandboxLimits};
use crate::error::{Error, ErrorKind, Result};
use crate::host_env::HostEnv;
use crate::net::{Egress, EgressOptions, EgressProxy, Injection, Resolver};
use crate::path::WorkspacePath;
use crate::policy::{Mode, Policy, PolicyDigest};
use crate::process::{Spawned, lock};

/// Capacity asked for a command's output pipe.
const OUTPUT_PIPE_BYTES: usize = 1024 * 1024;
/// The smallest Landlock ABI the provider works with.
const MIN_LANDLOCK_ABI: i32 = 1;
/// The private temp dir inside every sandbox.
const SANDBOX_TMP: &str = "/tmp";
/// Devices every command may read and write.
const WRITABLE_DEVICES: [&str; 5] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];
/// The host's devices: commands see a directory of their own there, with
/// only [`WRITABLE_DEVICES`] and [`TERMINAL_DEVICE`] of the host's.
const DEVICES_DIR: &str = "/dev";
/// The controlling terminal (only a command of `cubby exec` has one: the
/// others start sessions of their own); read-only, as the rest of the host.
const TERMINAL_DEVICE: &str = "/dev/tty";
// The holder has room for every device kept (the terminal included).
const _: () = assert!(WRITABLE_DEVICES.len() < linux_sys::MAX_DEVICES);
/// Where a pids cgroup (v1) can be made.
const PIDS_CGROUP_V1: &str = "/sys/fs/cgroup/pids";

static SANDBOX_COUNTER: AtomicU64 = AtomicU64::new(0);

/// How a `linux` sandbox confines its commands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinuxOptions {
    /// `read-only` makes everything read-only; `full-access` runs commands
    /// unconfined.
    pub mode: Mode,
    /// `off`: a network namespace with loopback only and no non-unix
    /// sockets; `allow`: the same namespace, where the egress proxy listens
    /// (its only route out); `on`: the host's network.
    pub network: NetworkMode,
    /// What the egress proxy enforces with network `allow`.
    pub egress: EgressOptions,
    /// Extra writable directories (absolute or relative to the root).
    pub writable_roots: Vec<PathBuf>,
    /// Paths (relative to the root) that commands may not change.
    pub protected: Vec<WorkspacePath>,
    /// Paths (relative to the root) that commands may not read, whenever
    /// they are created.
    pub deny_read: Vec<WorkspacePath>,
    /// Host paths (absolute, or `~/` for `$HOME`) that commands may not
    /// read, on top of the built-in credential stores (SPEC §4; see
    /// `read_view.rs`). Default: none.
    pub host_deny_read: Vec<PathBuf>,
    /// `Host` (default): commands read the whole host but the credential
    /// stores; `System`: only the system directories, `PATH`'s toolchains,
    /// the workspace, the writable roots and [`readable_roots`].
    ///
    /// [`readable_roots`]: LinuxOptions::readable_roots
    pub read_scope: ReadScope,
    /// With [`ReadScope::System`]: more directories commands read
    /// (absolute, `~/`, or relative to the root; they must exist).
    /// Default: none.
    pub readable_roots: Vec<PathBuf>,
    /// rlimits.
    pub limits: SandboxLimits,
    /// Git's executable surface as the caller read it a moment ago (the
    /// policy's, [`Policy::git_surface`]): the sandbox's open and its first
    /// command use it instead of reading the files again while it is
    /// fresh ([`crate::git::SHARE_WINDOW`]). Taken by
    /// [`LinuxSandbox::open`]. Default: none (read at the open).
    pub git_surface: Option<crate::git::SurfaceRead>,
    /// cubby's environment: `HOME` (`~/`, the credential stores, git's
    /// config), `PATH` and the toolchain homes (`read_scope = "system"`).
    pub host: HostEnv,
}

impl LinuxOptions {
    /// The options that enforce `policy` on commands: its mode, protected
    /// and `deny_read` paths, writable roots, what commands read of the
    /// host, their network ([`Policy::command_network`]) and its rules,
    /// the sandbox's limits; the `[[network.inject]]` secrets' values from
    /// `host` (an unset one gets no placeholder, with a warning).
    pub fn from_policy(policy: &Policy, host: &HostEnv) -> LinuxOptions {
        let rules = policy.network().cloned().unwrap_or_default();
        let mut inject = Vec::new();
        for entry in &rules.inject {
            match host.non_empty(&entry.secret) {
                Some(value) => inject.push(Injection {
                    name: entry.secret.clone(),
                    value,
                    hosts: entry.hosts.clone(),
                    headers: entry.headers.clone(),
                }),
                None => tracing::warn!(
                    "network.inject: `{}` is not set in the environment; commands get no \
                     placeholder",
                    entry.secret
                ),
            }
        }
        LinuxOptions {
            mode: policy.mode(),
            network: policy.command_network(),
            egress: EgressOptions { rules, inject },
            writable_roots: policy.writable_roots().to_vec(),
            protected: policy.protected_paths().cloned().collect(),
            deny_read: policy.deny_read_paths().cloned().collect(),
            host_deny_read: policy.host_deny_read().to_vec(),
            read_scope: policy.read_scope(),
            readable_roots: policy.readable_roots().to_vec(),
            limits: policy.limits().sandbox.clone(),
            git_surface: policy.git_surface().cloned(),
            host: host.clone(),
        }
    }
}

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
        let (user_namespaces, seccomp) = linux_sys::probe_isolation();
        Capabilities {
            landlock_abi: linux_sys::landlock_abi().filter(|&v| v >= MIN_LANDLOCK_ABI),
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
fn quick_check() -> Vec<String> {
    let mut missing = Vec::new();
    if linux_sys::landlock_abi().is_none_or(|v| v < MIN_LANDLOCK_ABI) {
        missing.push("Landlock (kernel 5.13+ with `landlock` in the `lsm=` boot list)".to_string());
    }
    let max_userns = read_number("/proc/sys/user/max_user_namespaces");
    if max_userns == Some(0) || !Path::new("/proc/self/ns/user").exists() {
        missing.push("user namespaces (sysctl user.max_user_namespaces is 0)".to_string());
    }
    if !linux_sys::seccomp_available() {
        missing.push("seccomp (a kernel built with CONFIG_SECCOMP_FILTER)".to_string());
    }
    missing
}

/// The kernel's `RESERVED_PIDS`: once a pid namespace's pids have wrapped,
/// the lowest it hands out again.
const RESERVED_PIDS: u64 = 300;
/// The smallest `pid_max` the kernel accepts.
const MIN_PID_MAX: u64 = RESERVED_PIDS + 1;
/// The host's `pid_max` (a namespace's may not be larger).
const HOST_PID_MAX: &str = "/proc/sys/kernel/pid_max";
/// A sandbox gets at most this fraction (1/n) of each per-user limit in
/// [`USER_LIMITS`] (the kernel charges what it uses to the user as well).
const USER_LIMIT_SHARE: u64 = 4;
/// Per-user kernel limits a sandbox gets a share of: each as the name
/// under `/proc/sys/user` (the limit of one user namespace) and under
/// `/proc/sys/fs` (the host's, which applies to every namespace).
const USER_LIMITS: [(&str, &str); 4] = [
    ("max_inotify_instances", "inotify/max_user_instances"),
    ("max_inotify_watches", "inotify/max_user_watches"),
    ("max_fanotify_groups", "fanotify/max_user_groups"),
    ("max_fanotify_marks", "fanotify/max_user_marks"),
];
/// Commands make no user namespaces (seccomp refuses them too).
const SANDBOX_USER_NAMESPACES: &str = "max_user_namespaces";
/// Inodes of the private `/tmp` and `/dev/shm` per MiB of their size: one
/// a page, tmpfs's own default ratio (an inode costs memory that the size
/// does not count).
const TMP_INODES_PER_MB: u64 = 256;
/// Neither `/tmp` nor `/dev/shm` may be larger than this fraction (1/n) of
/// the host's memory, whatever `tmp_mb` says.
const TMP_MAX_SHARE_OF_MEMORY: u64 = 4;
/// What [`read_proc`] reads of a file: its first line is enough for the
/// numbers, the kernel's release and `/proc/meminfo`'s `MemTotal`.
const PROC_READ_BYTES: usize = 128;
/// The first kernel whose `pid_max` is per pid namespace.
const NAMESPACED_PID_MAX_SINCE: (u32, u32) = (6, 14);

/// True when `kernel.pid_max` is per pid namespace (Linux 6.14+).
pub(crate) fn namespaced_pid_max() -> bool {
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

/// What the holder writes under `/proc/sys` for `limits` (see
/// [`linux_sys::HolderPlan::sysctls`]): with `namespaced_pid_max`, the
/// sandbox's `pid_max` and its last pid (so that its pids wrap at once,
/// from then on counting only [`RESERVED_PIDS`] up: exactly `processes`
/// processes, the holder among them); a share of each of the user's
/// inotify and fanotify limits; no user namespaces.
fn sandbox_sysctls(
    limits: &SandboxLimits,
    namespaced_pid_max: bool,
) -> Result<Vec<(CString, CString)>> {
    let entry = |path: String, value: u64| -> Result<(CString, CString)> {
        Ok((
            CString::new(path).map_err(start_error)?,
            CString::new(value.to_string()).map_err(start_error)?,
        ))
    };
    let mut out = Vec::new();
    if limits.processes > 0 && namespaced_pid_max {
        let wanted = limits
            .processes
            .saturating_add(RESERVED_PIDS - 1)
            .max(MIN_PID_MAX);
        let host = read_number(HOST_PID_MAX).unwrap_or(wanted);
        out.push(entry(
            HOST_PID_MAX.to_string(),
            wanted.min(host).max(MIN_PID_MAX),
        )?);
        out.push(entry(
            "/proc/sys/kernel/ns_last_pid".to_string(),
            RESERVED_PIDS,
        )?);
    }
    for (in_namespace, host) in USER_LIMITS {
        let own = read_number(&format!("/proc/sys/user/{in_namespace}"));
        let host = read_number(&format!("/proc/sys/fs/{host}"));
        // A kernel without this limit has nothing to share.
        let Some(limit) = own.into_iter().chain(host).min() else {
            continue;
        };
        let share = (limit / USER_LIMIT_SHARE).max(1);
        out.push(entry(format!("/proc/sys/user/{in_namespace}"), share)?);
    }
    out.push(entry(
        format!("/proc/sys/user/{SANDBOX_USER_NAMESPACES}"),
        0,
    )?);
    Ok(out)
}

/// The mount options of the private `/tmp` and `/dev/shm`: `tmp_mb` MiB
/// each (at most a [`TMP_MAX_SHARE_OF_MEMORY`]th of the host's memory),
/// with [`TMP_INODES_PER_MB`] inodes a MiB.
fn tmp_options(tmp_mb: u64) -> Result<CString> {
    let size_mb = tmp_size_mb(tmp_mb);
    let inodes = size_mb.saturating_mul(TMP_INODES_PER_MB);
    CString::new(format!("mode=1777,size={size_mb}m,nr_inodes={inodes}")).map_err(start_error)
}

/// `tmp_mb`, at most a [`TMP_MAX_SHARE_OF_MEMORY`]th of the host's memory:
/// the size of `/tmp`, of `/dev/shm` and of the sandbox's System V shared
/// memory, each.
fn tmp_size_mb(tmp_mb: u64) -> u64 {
    const KIB_PER_MIB: u64 = 1024;
    // `MemTotal` is its first line.
    let memory_mb = read_proc("/proc/meminfo")
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map(|kib| kib / KIB_PER_MIB);
    let cap = memory_mb.map_or(u64::MAX, |m| (m / TMP_MAX_SHARE_OF_MEMORY).max(1));
    tmp_mb.clamp(1, cap)
}

/// The page size assumed if the system cannot tell its own.
const FALLBACK_PAGE_BYTES: u64 = 4096;

/// System V message queues a sandbox may hold (`kernel.msgmni` of its IPC
/// namespace), of at most [`SANDBOX_MSG_QUEUE_BYTES`] each: 4 MiB in all.
const SANDBOX_MSG_QUEUES: u64 = 256;
/// Bytes a System V message queue may hold (`kernel.msgmnb`, the kernel's
/// default).
const SANDBOX_MSG_QUEUE_BYTES: u64 = 16 * 1024;

/// What the holder writes under `/proc/sys/kernel` for the sandbox's IPC
/// namespace (see [`linux_sys::HolderPlan::ipc_sysctls`]): System V shared
/// memory of at most `tmp_mb` MiB in all (`shmall`, in pages) and in one
/// segment (`shmmax`), every segment removed when no process has it
/// attached and, for one never attached, when the process that made it
/// exits (`shm_rmid_forced`: a segment does not outlive its command's
/// processes); message queues bounded by [`SANDBOX_MSG_QUEUES`] and
/// [`SANDBOX_MSG_QUEUE_BYTES`].
fn ipc_sysctls(limits: &SandboxLimits) -> Result<Vec<(CString, CString)>> {
    const BYTES_PER_MIB: u64 = 1024 * 1024;
    let bytes = tmp_size_mb(limits.tmp_mb).saturating_mul(BYTES_PER_MIB);
    let page = super::sys::page_size().unwrap_or(FALLBACK_PAGE_BYTES);
    [
        ("shm_rmid_forced", 1),
        ("shmmax", bytes),
        ("shmall", bytes.div_ceil(page)),
        ("msgmni", SANDBOX_MSG_QUEUES),
        ("msgmnb", SANDBOX_MSG_QUEUE_BYTES),
    ]
    .into_iter()
    .map(|(name, value)| {
        Ok((
            CString::new(format!("/proc/sys/kernel/{name}")).map_err(start_error)?,
            CString::new(value.to_string()).map_err(start_error)?,
        ))
    })
    .collect()
}

/// Removes the pids cgroups of cubby processes that no longer exist (a
/// cgroup is removed only once empty, so a live sandbox's never is).
fn sweep_cgroups() {
    let Ok(entries) = std::fs::read_dir(PIDS_CGROUP_V1) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("cubby-"))
            .and_then(|n| n.split('-').next())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

/// A pids cgroup (v1) this process may create children in.
fn pids_cgroup_parent() -> Option<PathBuf> {
    let dir = Path::new(PIDS_CGROUP_V1);
    let probe = dir.join(format!("cubby-probe-{}", std::process::id()));
    match std::fs::create_dir(&probe) {
        Ok(()) => {
            let usable = probe.join("pids.max").exists();
            let _ = std::fs::remove_dir(&probe);
            usable.then(|| dir.to_path_buf())
        }
        Err(_) => None,
    }
}

/// The `linux` provider.
pub struct LinuxSandbox {
    fs: Arc<LocalFs>,
    host: LocalSandbox,
    options: LinuxOptions,
    writable_roots: Vec<PathBuf>,
    live: Mutex<Option<Arc<Live>>>,
    /// Whether the holder keeps an init forked ahead (see
    /// [`LinuxSandbox::spawn_inherited`]).
    fork_ahead: std::sync::atomic::AtomicBool,
    /// Missing protected paths reserved for running commands.
    reservations: Arc<Reservations>,
    /// What the file tools see: the workspace without those reservations.
    view: WithoutReservations,
    /// The egress proxy's rules (network `allow`).
    egress: Option<Arc<Egress>>,
    /// Git's surface as read when the sandbox opened, for its first
    /// command if it comes within [`crate::git::SHARE_WINDOW`] (later ones
    /// read it again).
    git_at_open: Mutex<Option<crate::git::SurfaceRead>>,
    /// The host's credential stores, masked for every command.
    stores: HostStores,
    /// With `read_scope = "system"`: what commands read (canonical).
    read_roots: Vec<PathBuf>,
    /// The digest of the policy the options were made from.
    enforced: PolicyDigest,
}

impl std::fmt::Debug for LinuxSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinuxSandbox")
            .field("root", &self.fs.root_path())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// A started sandbox: the holder, its socket, and what answers arrive.
struct Live {
    holder: Mutex<Child>,
    /// The server's end of the holder's socket.
    sock: OwnedFd,
    /// One request at a time on the socket.
    send: Mutex<()>,
    next_id: AtomicU64,
    cgroup: Option<PathBuf>,
    private_tmp: bool,
    /// The egress proxy (network `allow`); dropped after the holder ends.
    _proxy: Option<EgressProxy>,
    /// What every command's environment gets on top (proxy variables,
    /// placeholders).
    extra_env: Vec<(String, String)>,
}

impl Drop for Live {
    fn drop(&mut self) {
        // The holder (and an init waiting for a request) see the end of
        // the stream.
        let _ = rustix::net::shutdown(&self.sock, rustix::net::Shutdown::Both);
        let _ = lock(&self.holder).wait();
        if let Some(dir) = &self.cgroup {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// One message from the holder or an init and the fds beside it; `None`
/// once the socket has closed (or failed).
fn recv_from_holder(sock: &OwnedFd) -> Option<(Option<linux_sys::Msg>, Vec<OwnedFd>)> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    loop {
        let mut bytes = [0u8; 24];
        let mut space = [std::mem::MaybeUninit::uninit();
            rustix::cmsg_space!(ScmRights(linux_sys::MSG_MAX_FDS))];
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
        return Some((linux_sys::Msg::from_bytes(&bytes[..n]), fds));
    }
}

/// The egress proxy's listener, which a holder asked for it sends first.
fn recv_listener(sock: &OwnedFd) -> Result<OwnedFd> {
    match recv_from_holder(sock) {
        Some((Some(msg), fds)) if msg.kind == linux_sys::MSG_LISTENER => fds
            .into_iter()
            .next()
            .ok_or_else(|| start_error("the holder sent no egress proxy socket")),
        _ => Err(start_error(
            "the holder did not send the egress proxy socket",
        )),
    }
}

/// Longest wait for the holder to start a command.
const START_WAIT: Duration = Duration::from_secs(30);
/// `SIGKILL` as a raw wait status.
const KILLED_STATUS: i32 = libc::SIGKILL;

/// A command in the sandbox: its init's pidfd, and the init's end of the
/// command's own socket, on which its exit status comes.
struct SandboxChild {
    pid: u32,
    /// Dropped once the command has been waited for.
    pidfd: Mutex<Option<OwnedFd>>,
    /// The server's end of the command's socket (the init holds the other);
    /// closed once the status is known (a finished command's handle may be
    /// kept a while, for listings).
    chan: Mutex<Option<OwnedFd>>,
    /// The status, once known.
    status: Mutex<Option<i32>>,
    /// The sandbox outlives its commands.
    _live: Arc<Live>,
}

impl SandboxChild {
    fn signal(&self, sig: rustix::process::Signal) {
        if let Some(fd) = lock(&self.pidfd).as_ref() {
            let _ = rustix::process::pidfd_send_signal(fd, sig);
        }
    }
}

impl crate::process::ProcessHandle for SandboxChild {
    fn id(&self) -> u32 {
        self.pid
    }
    fn stop(&self) {
        // The init forwards it to the command's process group.
        self.signal(rustix::process::Signal::TERM);
    }
    fn kill_tree(&self) {
        // Killing a pid namespace's init kills everything in it.
        self.signal(rustix::process::Signal::KILL);
    }
    fn wait(&self) -> std::io::Result<std::process::ExitStatus> {
        use std::os::unix::process::ExitStatusExt;
        let mut status = lock(&self.status);
        if status.is_none() {
            // The init reports before it exits; killed, it reports nothing
            // and its end closes.
            let chan = lock(&self.chan).take();
            let reported = loop {
                match chan.as_ref().and_then(recv_from_holder) {
                    Some((Some(msg), _)) if msg.kind == linux_sys::MSG_EXITED => {
                        break msg.arg;
                    }
                    Some(_) => continue,
                    None => break KILLED_STATUS,
                }
            };
            *status = Some(reported);
            lock(&self.pidfd).take();
        }
        Ok(std::process::ExitStatus::from_raw(
            status.unwrap_or(KILLED_STATUS),
        ))
    }
}

const LANDLOCK_ABI: landlock::ABI = landlock::ABI::V6;

/// An `O_PATH` fd for a Landlock rule.
fn landlock_path(path: &Path) -> Result<landlock::PathFd> {
    landlock::PathFd::new(path)
        .map_err(|e| start_error(format!("Landlock: {}: {e}", path.display())))
}

fn cstring(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::invalid_input(format!("`{}` contains a NUL byte", path.display())))
}

fn start_error(what: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("the linux sandbox cannot start: {what}"),
    )
}

impl LinuxSandbox {
    /// Opens `root` as a `linux` sandbox that holds commands to `policy`
    /// ([`LinuxOptions::from_policy`]; `host` is cubby's environment), after
    /// checking that this machine can enforce it. Nothing is started until
    /// the first command. The sandbox reports the policy's
    /// [`Policy::sandbox_digest`] as what it enforces.
    ///
    /// # Errors
    ///
    /// `unsupported` naming what is missing (Landlock, user namespaces,
    /// seccomp) or what cannot be enforced; `not_found` for a missing root
    /// or writable root.
    pub fn open(root: &Path, policy: &Policy, host: &HostEnv) -> Result<LinuxSandbox> {
        LinuxSandbox::open_with(
            root,
            LinuxOptions::from_policy(policy, host),
            policy.sandbox_digest(),
        )
    }

    fn open_with(
        root: &Path,
        mut options: LinuxOptions,
        enforced: PolicyDigest,
    ) -> Result<LinuxSandbox> {
        let fs = Arc::new(LocalFs::open(root)?);
        let git_read = options.git_surface.take();
        if options.mode != Mode::FullAccess {
            let missing = quick_check();
            if !missing.is_empty() {
                return Err(start_error(format!(
                    "this machine lacks {}. Run `cubby doctor` for details; \
                     `--provider local` runs commands without OS isolation",
                    missing.join(", ")
                )));
            }
        }
        let egress = if options.network == NetworkMode::Allow && options.mode != Mode::FullAccess {
            Some(Arc::new(Egress::new(&options.egress)?))
        } else {
            None
        };
        let mut writable_roots = Vec::new();
        for w in &options.writable_roots {
            let abs = if w.is_absolute() {
                w.clone()
            } else {
                fs.root_path().join(w)
            };
            let canonical = std::fs::canonicalize(&abs).map_err(|e| {
                Error::new(
                    ErrorKind::NotFound,
                    format!("writable root `{}` cannot be opened: {e}", w.display()),
                )
            })?;
            writable_roots.push(canonical);
        }
        let host_deny_read = options
            .host_deny_read
            .iter()
            .map(|p| read_view::expand_home(p, &options.host))
            .collect::<Vec<_>>();
        if let Some(p) = host_deny_read.iter().find(|p| !p.is_absolute()) {
            return Err(Error::invalid_input(format!(
                "host_deny_read entry `{}` must be an absolute path or start with `~/`",
                p.display()
            )));
        }
        let stores = HostStores::new(
            &host_deny_read,
            fs.root_path() == Path::new(SANDBOX_TMP),
            &options.host,
        );
        let mut readable_roots = Vec::new();
        for r in &options.readable_roots {
            let r = read_view::expand_home(r, &options.host);
            let abs = if r.is_absolute() {
                r.clone()
            } else {
                fs.root_path().join(&r)
            };
            let canonical = std::fs::canonicalize(&abs).map_err(|e| {
                Error::new(
                    ErrorKind::NotFound,
                    format!("readable root `{}` cannot be opened: {e}", r.display()),
                )
            })?;
            readable_roots.push(canonical);
        }
        if options.mode != Mode::FullAccess {
            let roots = std::iter::once(("the workspace", fs.root_path()))
                .chain(
                    writable_roots
                        .iter()
                        .map(|w| ("writable root", w.as_path())),
                )
                .chain(
                    readable_roots
                        .iter()
                        .map(|r| ("readable root", r.as_path())),
                );
            for (what, dir) in roots {
                if let Some(store) = stores.covering(dir) {
                    return Err(Error::new(
                        ErrorKind::Unsupported,
                        format!(
                            "{what} `{}` lies in `{}`, a credential store that commands may not \
                             read (SPEC §4); choose a directory outside it",
                            dir.display(),
                            store.display()
                        ),
                    ));
                }
            }
        }
        let read_roots = match options.read_scope {
            ReadScope::Host => Vec::new(),
            ReadScope::System => {
                let mut roots = read_view::system_scope(&options.host);
                for dir in std::iter::once(fs.root_path())
                    .chain(writable_roots.iter().map(PathBuf::as_path))
                    .chain(readable_roots.iter().map(PathBuf::as_path))
                {
                    if !roots.iter().any(|r| r == dir) {
                        roots.push(dir.to_path_buf());
                    }
                }
                roots
            }
        };
        let reservations = Reservations::new(fs.clone());
        let sandbox = LinuxSandbox {
            host: LocalSandbox::open(fs.root_path())?,
            view: WithoutReservations(reservations.clone()),
            reservations,
            fs,
            options,
            writable_roots,
            live: Mutex::new(None),
            fork_ahead: std::sync::atomic::AtomicBool::new(true),
            egress,
            git_at_open: Mutex::new(None),
            stores,
            read_roots,
            enforced,
        };
        sandbox.sweep_placeholders(git_read);
        Ok(sandbox)
    }

    /// Resolves the names commands reach through the egress proxy with
    /// `resolver` instead of the system's (tests, embedders that pin names).
    /// Call before the first command; the addresses it returns are held to
    /// the address rules like any other.
    #[must_use]
    pub fn with_resolver(mut self, resolver: Arc<dyn Resolver>) -> LinuxSandbox {
        if let Some(egress) = self.egress.as_mut().and_then(Arc::get_mut) {
            egress.set_resolver(resolver);
        }
        self
    }

    /// Empties and removes the placeholder stash of every `linux` sandbox
    /// of this process (see `reserve.rs`). Call it before the process
    /// exits: a sandbox that is never dropped (held by a thread still
    /// running a tool call, or leaked) would leave its stash in the temp
    /// dir until the next start reclaims it. The sandboxes keep working,
    /// without a stash.
    pub fn empty_stashes() {
        super::reserve::empty_stashes();
    }

    /// The options this sandbox enforces.
    pub fn options(&self) -> &LinuxOptions {
        &self.options
    }

    /// Starts the sandbox now rather than at the first command (for
    /// measuring, or to fail early).
    ///
    /// # Errors
    ///
    /// `unsupported` when the namespaces cannot be set up.
    pub fn start(&self) -> Result<()> {
        if self.options.mode != Mode::FullAccess {
            self.live()?;
        }
        Ok(())
    }

    /// Starts a command with stdio inherited from this process (for
    /// `cubby exec`). The returned child is the reaper shim; its exit
    /// status is the command's.
    ///
    /// # Errors
    ///
    /// As for [`Sandbox::exec`].
    pub fn spawn_inherited(&self, spec: &ExecSpec) -> Result<InheritedChild> {
        if self.options.mode == Mode::FullAccess {
            let Some((program, args)) = spec.argv.split_first() else {
                return Err(Error::invalid_input("empty command"));
            };
            let mut cmd = Command::new(program);
            // The spec's environment and nothing of cubby's (SPEC §4).
            cmd.args(args)
                .env_clear()
                .envs(spec.env.iter().map(|(k, v)| (k, v)))
                .current_dir(self.fs.root_path().join(spec.cwd.as_path()));
            return Ok(InheritedChild {
                child: InheritedInner::Host(spawn(&mut cmd, program)?),
                _lease: None,
            });
        }
        // The one command of `cubby exec`: an init forked ahead for a next
        // one would only compete with it for the CPU.
        self.fork_ahead.store(false, Ordering::Relaxed);
        let dup = |fd: std::os::fd::BorrowedFd<'_>| {
            rustix::io::fcntl_dupfd_cloexec(fd, 0)
                .map_err(|e| Error::internal(format!("cannot pass stdio: {e}")))
        };
        let stdio = [
            dup(std::io::stdin().as_fd())?,
            dup(std::io::stdout().as_fd())?,
            dup(std::io::stderr().as_fd())?,
        ];
        // `cubby exec` exits without dropping the sandbox: no stash, whose
        // placeholders would outlive it; its command's placeholders are made
        // for it and removed when it ends.
        self.reservations.without_stash();
        let (child, lease) = self.start_command(spec, stdio)?;
        Ok(InheritedChild {
            child: InheritedInner::Sandboxed(Box::new(child)),
            _lease: Some(lease),
        })
    }

    /// Removes empty placeholder directories (no mode bit but the owner's
    /// read and write ones) at protected paths: reservations left by a
    /// cubby that was killed while a command ran. `read`: git's surface as
    /// the caller read it, used when it is fresh.
    fn sweep_placeholders(&self, read: Option<crate::git::SurfaceRead>) {
        let root = self.fs.root_path();
        let read = read
            .filter(|r| r.fresh_for(root).is_some())
            .unwrap_or_else(|| crate::git::SurfaceRead::now(root, &self.options.host));
        let mut paths = self.options.protected.clone();
        for path in read.surface().paths() {
            if !paths.contains(&path) {
                paths.push(path);
            }
        }
        *lock(&self.git_at_open) = Some(read);
        // Directories already looked at (and kept) on the way to an
        // earlier path.
        let mut kept: Vec<WorkspacePath> = Vec::new();
        for path in &paths {
            let mut prefix = WorkspacePath::root();
            for name in path.components() {
                prefix = prefix.join_name(name);
                if kept.contains(&prefix) {
                    continue;
                }
                let Ok(meta) = self.fs.metadata(&prefix) else {
                    break;
                };
                let leftover = match (meta.kind, Kind::for_path(&prefix)) {
                    (EntryKind::Dir, _) => {
                        is_placeholder_mode(meta.mode)
                            && self.fs.read_dir(&prefix).is_ok_and(|e| e.is_empty())
                    }
                    // A file placeholder: read-only, its content.
                    (EntryKind::File, Kind::File(content)) => {
                        meta.mode & !PLACEHOLDER_FILE_MODE == 0 && meta.size == content.len() as u64
                    }
                    _ => false,
                };
                if leftover {
                    self.fs.remove_placeholder(&prefix, meta.ino);
                } else if meta.kind == EntryKind::Dir {
                    kept.push(prefix.clone());
                }
            }
        }
    }

    fn live(&self) -> Result<Arc<Live>> {
        self.live_with(|| ()).map(|(live, (), _)| live)
    }

    /// The live sandbox, started if need be, the result of `overlap`,
    /// which runs while a new holder sets its namespaces up, and whether
    /// the holder was started just now (then it masked the credential
    /// stores there are: the command that started it need not look again).
    fn live_with<T>(&self, overlap: impl FnOnce() -> T) -> Result<(Arc<Live>, T, bool)> {
        let mut guard = lock(&self.live);
        if let Some(live) = guard.as_ref() {
            let live = live.clone();
            drop(guard);
            return Ok((live, overlap(), false));
        }
        let (live, out) = self.start_holder(overlap)?;
        let live = Arc::new(live);
        *guard = Some(live.clone());
        Ok((live, out, true))
    }

    fn start_holder<T>(&self, overlap: impl FnOnce() -> T) -> Result<(Live, T)> {
        let root = self.fs.root_path().to_path_buf();
        let own_network = self.options.network != NetworkMode::On;
        // The IPC namespace is not among these: the holder makes it first,
        // in a user namespace of its own (see `HolderPlan::ipc_sysctls`).
        let mut flags =
            libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWUTS | libc::CLONE_NEWPID;
        if own_network {
            flags |= libc::CLONE_NEWNET;
        }
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        let tmp = Path::new(SANDBOX_TMP);
        let private_tmp = root != tmp;
        let mut rebinds = Vec::new();
        for dir in std::iter::once(&root).chain(self.writable_roots.iter()) {
            let mut mkdirs = Vec::new();
            if let Ok(rest) = dir.strip_prefix(tmp)
                && private_tmp
            {
                let mut at = tmp.to_path_buf();
                for part in rest.components() {
                    at.push(part);
                    mkdirs.push(cstring(&at)?);
                }
            }
            // A directory on a read-only mount stays read-only (the kernel
            // would refuse to make its bind writable).
            let on_readonly_mount = rustix::fs::statvfs(dir.as_path())
                .is_ok_and(|st| st.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY));
            rebinds.push(Rebind {
                path: cstring(dir)?,
                mkdirs,
                readonly: self.options.mode == Mode::ReadOnly || on_readonly_mount,
            });
        }
        let mut masks = Vec::new();
        let mut pins: Vec<CString> = Vec::new();
        for path in &self.options.deny_read {
            if self.deny_read_exists(path)? {
                let mut above = WorkspacePath::root();
                let names: Vec<_> = path.components().collect();
                for name in &names[..names.len().saturating_sub(1)] {
                    above = above.join_name(name);
                    let pin = cstring(&root.join(above.as_path()))?;
                    if !pins.contains(&pin) {
                        pins.push(pin);
                    }
                }
                masks.push(Mask {
                    path: cstring(&root.join(path.as_path()))?,
                });
            }
        }
        // The credential stores there are now; each command's init masks
        // those that appear later (`mask_plan`).
        for store in self.stores.current() {
            masks.push(Mask {
                path: cstring(&store)?,
            });
        }
        if rebinds.len() + pins.len() + masks.len() > linux_sys::MAX_HOLDER_MOUNTS {
            return Err(start_error(format!(
                "too many writable roots, deny_read paths and credential stores (at most {})",
                linux_sys::MAX_HOLDER_MOUNTS
            )));
        }
        // With `read_scope = "system"`: what every command may read, opened
        // by the holder in its own view (its `/dev` and private `/tmp`
        // included); each command's init adds its own `/proc`.
        let mut read_rules = Vec::new();
        if self.options.read_scope == ReadScope::System {
            for dir in &self.read_roots {
                read_rules.push(cstring(dir)?);
            }
            read_rules.push(cstring(Path::new(DEVICES_DIR))?);
            if private_tmp {
                read_rules.push(cstring(tmp)?);
            }
            if read_rules.len() > linux_sys::MAX_READ_RULES {
                return Err(start_error(format!(
                    "read_scope = \"system\" gives {} directories to read (PATH entries, \
                     readable and writable roots); at most {}",
                    read_rules.len(),
                    linux_sys::MAX_READ_RULES
                )));
            }
        }
        let (sock, holder_sock) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .map_err(start_error)?;
        let (report_r, report_w) = pipe_with(PipeFlags::CLOEXEC).map_err(start_error)?;
        let sockets = match self.options.network {
            NetworkMode::Off => Sockets::UnixOnly,
            NetworkMode::Allow => Sockets::Inet,
            NetworkMode::On => Sockets::Any,
        };
        let holder_filter = super::seccomp::filter(sockets)?;
        let filter = Arc::new(super::seccomp::command_filter()?);
        // The sandbox's pid namespace, where every command's nests, holds
        // the process budget where the kernel has a pid_max per namespace;
        // otherwise a pids cgroup bounds the sandbox (as root, where
        // RLIMIT_NPROC does not apply), at the price of a slow join.
        let namespaced = namespaced_pid_max();
        let sysctls = sandbox_sysctls(&self.options.limits, namespaced)?;
        let cgroup = if namespaced { None } else { self.make_cgroup() };
        // The devices commands get; the rest of the host's `/dev` is not
        // there for them (nor what lives beneath it).
        if let Some(dir) = std::iter::once(&root)
            .chain(&self.writable_roots)
            .find(|dir| dir.starts_with(DEVICES_DIR))
        {
            return Err(start_error(format!(
                "`{}` is beneath {DEVICES_DIR}, which commands see as a directory of their own",
                dir.display()
            )));
        }
        let devices = WRITABLE_DEVICES
            .into_iter()
            .chain([TERMINAL_DEVICE])
            .filter(|dev| {
                std::fs::symlink_metadata(dev).is_ok_and(|m| m.file_type().is_char_device())
            })
            .map(|dev| CString::new(dev).map_err(start_error))
            .collect::<Result<Vec<_>>>()?;
        let commands = linux_sys::CommandSetup {
            root: cstring(&root)?,
            cgroup_procs: match &cgroup {
                Some(dir) => Some(cstring(&dir.join("cgroup.procs"))?),
                None => None,
            },
            rlimits: rlimits(&self.options.limits),
            filter,
            // Only `cubby exec` (`spawn_inherited`) turns forking ahead off.
            foreground: !self.fork_ahead.load(Ordering::Relaxed),
        };

        let plan = Arc::new(HolderPlan {
            unshare_flags: flags,
            outer_uid_map: format!("0 {uid} 1\n").into_bytes(),
            outer_gid_map: format!("0 {gid} 1\n").into_bytes(),
            uid_map: format!("{uid} 0 1\n").into_bytes(),
            gid_map: format!("{gid} 0 1\n").into_bytes(),
            ipc_sysctls: ipc_sysctls(&self.options.limits)?,
            private_tmp,
            tmp_options: tmp_options(self.options.limits.tmp_mb)?,
            sysctls,
            rebinds,
            pins,
            masks,
            read_rules,
            devices,
            loopback: own_network,
            fork_ahead: self.fork_ahead.load(Ordering::Relaxed),
            proxy_listener: self.egress.is_some(),
            sock_fd: holder_sock.as_raw_fd(),
            report_fd: report_w.as_raw_fd(),
            filter: holder_filter,
            commands,
        });
        let mut cmd = Command::new("/");
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        linux_sys::run_as_holder(&mut cmd, plan);
        // Returns as soon as the holder has forked (it closes std's pipe
        // first); its readiness comes on the report pipe.
        let spawned = cmd.spawn();
        drop(cmd);
        drop(holder_sock);
        drop(report_w);
        let landlock = self.landlock_base(&root);
        let out = overlap();
        let mut report = [0u8; 5];
        let n = rustix::io::read(&report_r, &mut report).unwrap_or(0);
        let ready = (|| {
            let holder = match spawned {
                Ok(child) if n == 0 => child,
                Ok(mut child) => {
                    let _ = child.wait();
                    return Err(holder_error(&report, n));
                }
                Err(e) if n > 0 => {
                    let _ = e;
                    return Err(holder_error(&report, n));
                }
                Err(e) => return Err(start_error(e)),
            };
            let (proxy, extra_env) = match &self.egress {
                Some(egress) => {
                    let listener = recv_listener(&sock)?;
                    let proxy = EgressProxy::start(listener, egress.clone())?;
                    let env = egress.command_env(proxy.port());
                    (Some(proxy), env)
                }
                None => (None, Vec::new()),
            };
            let holder_root = PathBuf::from(format!("/proc/{}/root", holder.id()));
            let landlock = self.landlock_finish(landlock?, &holder_root, private_tmp)?;
            Ok((holder, proxy, extra_env, landlock))
        })();
        let (holder, proxy, extra_env, landlock) = match ready {
            Ok(ready) => ready,
            Err(e) => {
                // Ends the holder.
                let _ = rustix::net::shutdown(&sock, rustix::net::Shutdown::Both);
                return Err(e);
            }
        };
        let live = Live {
            holder: Mutex::new(holder),
            sock,
            send: Mutex::new(()),
            next_id: AtomicU64::new(1),
            cgroup,
            private_tmp,
            _proxy: proxy,
            extra_env,
        };
        let setup = linux_sys::Msg {
            kind: linux_sys::MSG_LANDLOCK,
            arg: 0,
            id: 0,
            len: 0,
        };
        send_request(&live, setup, &[landlock.as_fd()])?;
        Ok((live, out))
    }

    /// The Landlock rules that do not depend on the holder: the whole file
    /// system readable, the root and writable roots writable, a few devices.
    fn landlock_base(&self, root: &Path) -> Result<landlock::RulesetCreated> {
        use landlock::{
            Access, AccessFs, PathBeneath, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
        };
        let abi = LANDLOCK_ABI;
        let ll = |e: &dyn std::fmt::Display| start_error(format!("Landlock: {e}"));
        let mut ruleset = Ruleset::default()
            .handle_access(AccessFs::from_all(abi))
            .map_err(|e| ll(&e))?
            .scope(Scope::Signal | Scope::AbstractUnixSocket)
            .map_err(|e| ll(&e))?
            .create()
            .map_err(|e| ll(&e))?
            .add_rule(PathBeneath::new(
                landlock_path(Path::new("/"))?,
                AccessFs::from_read(abi),
            ))
            .map_err(|e| ll(&e))?;
        if self.options.mode != Mode::ReadOnly {
            for dir in std::iter::once(root).chain(self.writable_roots.iter().map(PathBuf::as_path))
            {
                ruleset = ruleset
                    .add_rule(PathBeneath::new(
                        landlock_path(dir)?,
                        AccessFs::from_all(abi),
                    ))
                    .map_err(|e| ll(&e))?;
            }
        }
        for dev in WRITABLE_DEVICES {
            let dev = Path::new(dev);
            if dev.exists() {
                ruleset = ruleset
                    .add_rule(PathBeneath::new(
                        landlock_path(dev)?,
                        AccessFs::from_file(abi),
                    ))
                    .map_err(|e| ll(&e))?;
            }
        }
        Ok(ruleset)
    }

    /// The whole ruleset (as an fd each command restricts itself with):
    /// the base and the holder's private `/tmp`, `/dev/shm` and `/dev/pts`, reached
    /// through `/proc/<holder>/root` once the holder is ready.
    fn landlock_finish(
        &self,
        mut ruleset: landlock::RulesetCreated,
        holder_root: &Path,
        private_tmp: bool,
    ) -> Result<OwnedFd> {
        use landlock::{Access, AccessFs, PathBeneath, RulesetCreatedAttr};
        let ll = |e: &dyn std::fmt::Display| start_error(format!("Landlock: {e}"));
        let mut writable: Vec<PathBuf> = Vec::new();
        if private_tmp {
            writable.push(holder_root.join("tmp"));
        }
        writable.push(holder_root.join("dev/shm"));
        for dir in &writable {
            ruleset = ruleset
                .add_rule(PathBeneath::new(
                    landlock_path(dir)?,
                    AccessFs::from_all(LANDLOCK_ABI),
                ))
                .map_err(|e| ll(&e))?;
        }
        // The sandbox's own pseudo-terminals: opened, read, written and
        // set up (`ioctl`) in every mode, as `/dev/null` is.
        ruleset = ruleset
            .add_rule(PathBeneath::new(
                landlock_path(&holder_root.join("dev/pts"))?,
                AccessFs::from_file(LANDLOCK_ABI),
            ))
            .map_err(|e| ll(&e))?;
        let fd: Option<OwnedFd> = ruleset.into();
        fd.ok_or_else(|| start_error("Landlock is not enabled in this kernel"))
    }

    /// Whether a `deny_read` path is there to hide now.
    ///
    /// # Errors
    ///
    /// `unsupported` for one that cannot be hidden: a symbolic link or a
    /// special file, or one reached through a link (commands never start
    /// with it readable for want of a name to mount on).
    fn deny_read_exists(&self, path: &WorkspacePath) -> Result<bool> {
        match self.fs.metadata(path) {
            Ok(meta) if matches!(meta.kind, EntryKind::Dir | EntryKind::File) => Ok(true),
            Ok(_) => Err(start_error(format!(
                "deny_read path `{path}` is a symbolic link or special file; \
                 cubby can hide only files and directories"
            ))),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(start_error(format!(
                "deny_read path `{path}` cannot be hidden: {e}"
            ))),
        }
    }

    /// What a command's init masks on top of the holder's masks, if not
    /// masked already (it tells a mask by its device): every `deny_read`
    /// path that exists (`d`, relative to the root; the init pins the
    /// directories above it too) and every credential store (`m`,
    /// absolute) — so that what appeared since the sandbox started, or was
    /// replaced (a mask leaves with the name it was on), is hidden as well.
    /// With `fresh_holder` (this command's start started the holder, which
    /// masked the stores it found a moment ago) the stores are not looked
    /// for again.
    fn mask_plan(&self, fresh_holder: bool) -> Result<Vec<Vec<u8>>> {
        let mut plan = Vec::new();
        for path in &self.options.deny_read {
            if self.deny_read_exists(path)? {
                let mut entry = vec![linux_sys::ENTRY_DENY_READ];
                entry.extend_from_slice(path.as_path().as_os_str().as_bytes());
                plan.push(entry);
            }
        }
        let stores = if fresh_holder {
            Vec::new()
        } else {
            self.stores.current()
        };
        for store in stores {
            let mut entry = vec![linux_sys::ENTRY_STORE];
            entry.extend_from_slice(store.as_os_str().as_bytes());
            plan.push(entry);
        }
        Ok(plan)
    }

    /// A pids cgroup for this sandbox, when the machine lets cubby make one.
    fn make_cgroup(&self) -> Option<PathBuf> {
        if self.options.limits.processes == 0 {
            return None;
        }
        sweep_cgroups();
        let dir = Path::new(PIDS_CGROUP_V1).join(format!(
            "cubby-{}-{}",
            std::process::id(),
            SANDBOX_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir).ok()?;
        if std::fs::write(
            dir.join("pids.max"),
            self.options.limits.processes.to_string(),
        )
        .is_err()
        {
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        Some(dir)
    }

    /// Asks the holder to start `spec` with `stdio` (stdin, stdout,
    /// stderr); returns the command and the lease on what it holds.
    fn start_command(&self, spec: &ExecSpec, stdio: [OwnedFd; 3]) -> Result<(SandboxChild, Lease)> {
        let Some(program) = spec.argv.first() else {
            return Err(Error::invalid_input("empty command"));
        };
        // Confined check of the working directory, for a clear error.
        drop(self.fs.open_dir(&spec.cwd)?);
        let (live, plan, fresh_holder) = self.live_with(|| self.protect_plan())?;
        let (protect, mut lease) = plan?;
        let masks = self.mask_plan(fresh_holder)?;
        let payload = self.payload(spec, &protect, &masks, &live)?;
        let memfd = rustix::fs::memfd_create("cubby-command", rustix::fs::MemfdFlags::CLOEXEC)
            .map_err(|e| Error::internal(format!("memfd_create: {e}")))?;
        let mut written = 0;
        while written < payload.len() {
            match rustix::io::write(&memfd, &payload[written..]) {
                Ok(n) => written += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(Error::internal(format!("cannot write the request: {e}"))),
            }
        }
        let id = live.next_id.fetch_add(1, Ordering::Relaxed);
        // The command's own socket: its init answers on it.
        let (chan, theirs) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| Error::internal(format!("socketpair: {e}")))?;
        let request = linux_sys::Msg {
            kind: linux_sys::MSG_RUN,
            arg: 0,
            id,
            len: payload.len() as u64,
        };
        let fds = [
            memfd.as_fd(),
            stdio[0].as_fd(),
            stdio[1].as_fd(),
            stdio[2].as_fd(),
            theirs.as_fd(),
        ];
        send_request(&live, request, &fds)?;
        drop(stdio);
        drop(theirs);
        // Until the init answers, or its end closes (the holder or the init
        // died; a request still queued is dropped with the holder's socket).
        let mut polls = [rustix::event::PollFd::new(
            &chan,
            rustix::event::PollFlags::IN,
        )];
        let wait = rustix::event::Timespec {
            tv_sec: START_WAIT.as_secs() as i64,
            tv_nsec: 0,
        };
        loop {
            match rustix::event::poll(&mut polls, Some(&wait)) {
                Ok(0) => return Err(start_error("no answer from the sandbox in time")),
                Ok(_) => break,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(start_error(e)),
            }
        }
        match recv_from_holder(&chan) {
            Some((Some(msg), fds)) if msg.kind == linux_sys::MSG_STARTED => {
                lease.live = Some(live.clone());
                let pidfd = fds.into_iter().next();
                Ok((
                    SandboxChild {
                        // The init tells its pid in the sandbox's namespace;
                        // the host's is in the pidfd.
                        pid: pidfd.as_ref().and_then(host_pid).unwrap_or(msg.len as u32),
                        pidfd: Mutex::new(pidfd),
                        chan: Mutex::new(Some(chan)),
                        status: Mutex::new(None),
                        _live: live,
                    },
                    lease,
                ))
            }
            Some((Some(msg), _))
                if msg.kind == linux_sys::MSG_EXEC_FAILED
                    || msg.kind == linux_sys::MSG_FORK_FAILED =>
            {
                Err(exec_error(program, msg.arg))
            }
            _ => Err(start_error("the sandbox's holder has gone")),
        }
    }

    /// The request payload: counts, working directory, protected paths and
    /// masks, argv, env (the spec's, then `TMPDIR` and the proxy's
    /// variables; nothing of this process's environment, SPEC §4).
    fn payload(
        &self,
        spec: &ExecSpec,
        protect: &[(String, bool)],
        masks: &[Vec<u8>],
        live: &Live,
    ) -> Result<Vec<u8>> {
        let mut env: Vec<(std::ffi::OsString, std::ffi::OsString)> = spec.env.clone();
        let mut set = |k: &str, v: &str| {
            env.retain(|(name, _)| name != k);
            env.push((k.into(), v.into()));
        };
        if live.private_tmp {
            set("TMPDIR", SANDBOX_TMP);
        }
        for (k, v) in &live.extra_env {
            set(k, v);
        }
        let mut out = Vec::new();
        for n in [protect.len() + masks.len(), spec.argv.len(), env.len()] {
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
        let cwd: &[u8] = if spec.cwd.is_root() {
            b""
        } else {
            spec.cwd.as_path().as_os_str().as_bytes()
        };
        push(cwd)?;
        for (path, writable) in protect {
            let mut entry = vec![if *writable { b'w' } else { b'r' }];
            entry.extend_from_slice(path.as_bytes());
            push(&entry)?;
        }
        for entry in masks {
            push(entry)?;
        }
        for arg in &spec.argv {
            push(arg.as_bytes())?;
        }
        for (k, v) in &env {
            let mut entry = k.as_bytes().to_vec();
            entry.push(b'=');
            entry.extend_from_slice(v.as_bytes());
            push(&entry)?;
        }
        Ok(out)
    }

    /// What each command's init binds, in order (a directory before what
    /// lies beneath it): every protected path read-only — the configured
    /// ones and git's executable surface as the host's files show it now
    /// ([`crate::git::surface`], read again at every command, so that a
    /// `core.hooksPath` the user set meanwhile is covered) — a missing one
    /// reserved by a placeholder; and every directory of the workspace
    /// above one bound onto itself, writable, so that no command can
    /// rename or remove it to put another tree in its place (a mount point
    /// is `EBUSY`). A `.git` gitfile is bound read-only.
    fn protect_plan(&self) -> Result<(Vec<(String, bool)>, Lease)> {
        let mut lease = Lease {
            reservations: self.reservations.clone(),
            reserved: Vec::new(),
            live: None,
        };
        // The first command uses what the sandbox read when it opened, if
        // it comes right after (`cubby exec`); later ones read it again.
        let root = self.fs.root_path();
        let surface = match lock(&self.git_at_open).take() {
            Some(read) if read.fresh_for(root).is_some() => read.into_surface(),
            _ => crate::git::surface(root, &self.options.host),
        };
        if surface.overflow {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "the workspace holds more than {} git directories (submodules, worktrees); \
                     cubby cannot keep all their configs and hooks read-only for commands",
                    crate::git::MAX_GIT_DIRS
                ),
            ));
        }
        let mut paths: Vec<WorkspacePath> = self.options.protected.clone();
        for path in surface.paths() {
            if !paths.iter().any(|p| path.starts_with(p)) {
                paths.push(path);
            }
        }
        let mut binds: Vec<(WorkspacePath, bool)> = Vec::new();
        // Read-only wins over a pin of the same directory.
        let add = |path: &WorkspacePath, writable: bool, binds: &mut Vec<(WorkspacePath, bool)>| {
            match binds.iter_mut().find(|(p, _)| p == path) {
                Some((_, w)) => *w &= writable,
                None => binds.push((path.clone(), writable)),
            }
        };
        // Directories already looked at on the way to an earlier path.
        let mut dirs: Vec<WorkspacePath> = Vec::new();
        'paths: for path in &paths {
            if lease.reserved.iter().any(|(r, _)| path.starts_with(r)) {
                continue;
            }
            let mut prefix = WorkspacePath::root();
            for name in path.components() {
                prefix = prefix.join_name(name);
                if prefix != *path && dirs.contains(&prefix) {
                    continue;
                }
                // Reserved already (by a running command, or lingering).
                if let Some(ino) = self.reservations.claim(&prefix) {
                    lease.reserved.push((prefix.clone(), ino));
                    add(&prefix, false, &mut binds);
                    continue 'paths;
                }
                match self.fs.metadata(&prefix) {
                    Ok(m) if m.kind == EntryKind::Symlink => {
                        return Err(Error::new(
                            ErrorKind::Unsupported,
                            format!(
                                "protected path `{prefix}` is a symbolic link; cubby cannot keep \
                                 it read-only for commands. Replace it with the directory or \
                                 file itself"
                            ),
                        ));
                    }
                    Ok(_) if prefix == *path => {
                        add(&prefix, false, &mut binds);
                        break;
                    }
                    // A directory above a protected path: pinned.
                    Ok(m) if m.kind == EntryKind::Dir => {
                        add(&prefix, true, &mut binds);
                        dirs.push(prefix.clone());
                    }
                    // A file on the way (a `.git` gitfile): nothing can be
                    // created beneath it, and it must not change.
                    Ok(_) => {
                        add(&prefix, false, &mut binds);
                        break;
                    }
                    Err(e) if e.kind() == ErrorKind::NotFound => {
                        let ino = self
                            .reservations
                            .reserve(&prefix, Kind::for_path(&prefix))?;
                        lease.reserved.push((prefix.clone(), ino));
                        add(&prefix, false, &mut binds);
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        // Parents first: a bind of a directory would otherwise cover (with
        // `MS_REC`, copy) what was bound beneath it in a different order.
        binds.sort_by_key(|(p, _)| p.components().count());
        let protect = binds
            .into_iter()
            .map(|(p, w)| (p.as_path().to_string_lossy().into_owned(), w))
            .collect();
        Ok((protect, lease))
    }
}

/// A command started by [`LinuxSandbox::spawn_inherited`]; what it holds
/// in the sandbox is released when this is dropped (after [`wait`]).
///
/// [`wait`]: InheritedChild::wait
pub struct InheritedChild {
    child: InheritedInner,
    _lease: Option<Lease>,
}

enum InheritedInner {
    Host(Child),
    Sandboxed(Box<SandboxChild>),
}

impl InheritedChild {
    /// Waits for the command to exit; its status is the command's.
    ///
    /// # Errors
    ///
    /// As [`Child::wait`].
    pub fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        use crate::process::ProcessHandle;
        match &mut self.child {
            InheritedInner::Host(c) => c.wait(),
            InheritedInner::Sandboxed(c) => c.wait(),
        }
    }

    /// The pid shown for it.
    pub fn id(&self) -> u32 {
        use crate::process::ProcessHandle;
        match &self.child {
            InheritedInner::Host(c) => c.id(),
            InheritedInner::Sandboxed(c) => c.id(),
        }
    }
}

/// Holds a command's reservations (and the live sandbox) until it ends.
struct Lease {
    reservations: Arc<Reservations>,
    /// Each reserved path and its placeholder's inode.
    reserved: Vec<(WorkspacePath, u64)>,
    live: Option<Arc<Live>>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.reservations.release(&self.reserved);
    }
}

/// Sends one message with fds to the holder.
fn send_request(
    live: &Live,
    msg: linux_sys::Msg,
    fds: &[std::os::fd::BorrowedFd<'_>],
) -> Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let bytes = msg.to_bytes();
    let mut space =
        [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(linux_sys::MSG_MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(Error::internal("too many fds for one request"));
    }
    let _one = lock(&live.send);
    loop {
        match rustix::net::sendmsg(
            &live.sock,
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

/// The pid of a pidfd's process in this process's pid namespace.
fn host_pid(pidfd: &OwnedFd) -> Option<u32> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd())).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|p| p.trim().parse().ok())
}

/// The error for a command that could not be exec'd (or set up).
fn exec_error(program: &str, errno: i32) -> Error {
    let err = std::io::Error::from_raw_os_error(errno);
    match errno {
        libc::EAGAIN => Error::new(
            ErrorKind::Limit,
            format!(
                "cannot start `{program}`: the sandbox's processes reach \
                 `limits.sandbox.processes`; stop some (`list_processes`, \
                 `stop_process`) or raise the limit"
            ),
        ),
        libc::ENOENT => Error::new(
            ErrorKind::Unsupported,
            format!("`{program}` is not installed in the sandbox; cubby needs it to run commands"),
        ),
        libc::EACCES | libc::EPERM => Error::new(
            ErrorKind::Denied,
            format!("`{program}` cannot be executed in the sandbox: {err}"),
        ),
        _ => Error::new(
            ErrorKind::Internal,
            format!("cannot start `{program}` in the sandbox: {err}"),
        ),
    }
}

fn holder_error(report: &[u8; 5], n: usize) -> Error {
    let step = linux_sys::HolderStep::describe(report[0]);
    let errno = if n == 5 {
        i32::from_le_bytes([report[1], report[2], report[3], report[4]])
    } else {
        0
    };
    start_error(format!(
        "{step} failed: {}",
        std::io::Error::from_raw_os_error(errno)
    ))
}

/// The rlimits to set, each capped at the hard limit cubby itself has.
fn rlimits(limits: &SandboxLimits) -> Vec<(libc::__rlimit_resource_t, libc::rlim_t)> {
    const MIB: u64 = 1024 * 1024;
    let wanted = [
        (libc::RLIMIT_NOFILE, limits.open_files),
        (libc::RLIMIT_NPROC, limits.processes),
        (libc::RLIMIT_FSIZE, limits.file_size_mb.saturating_mul(MIB)),
        (libc::RLIMIT_AS, limits.address_space_mb.saturating_mul(MIB)),
        (libc::RLIMIT_CPU, limits.cpu_seconds),
        (libc::RLIMIT_CORE, 0),
    ];
    let mut out = Vec::new();
    for (resource, value) in wanted {
        if value == 0 && resource != libc::RLIMIT_CORE {
            continue;
        }
        let hard = linux_sys::hard_limit(resource);
        out.push((resource, value.min(hard)));
    }
    out
}

fn spawn(cmd: &mut Command, program: &str) -> Result<Child> {
    cmd.spawn().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::new(
            ErrorKind::Unsupported,
            format!("`{program}` is not installed in the sandbox; cubby needs it to run commands"),
        ),
        _ => Error::new(
            ErrorKind::Internal,
            format!("cannot start `{program}` in the sandbox: {e}"),
        ),
    })
}

impl Sandbox for LinuxSandbox {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Linux
    }

    fn fs(&self) -> &dyn FileSystem {
        &self.view
    }

    fn supports_commands(&self) -> bool {
        true
    }

    fn enforced(&self) -> Option<&PolicyDigest> {
        Some(&self.enforced)
    }

    fn exec(&self, spec: &ExecSpec) -> Result<Spawned> {
        if self.options.mode == Mode::FullAccess {
            return self.host.exec(spec);
        }
        let io = |e: rustix::io::Errno| Error::internal(format!("cannot make a pipe: {e}"));
        let (out_r, out_w) = pipe_with(PipeFlags::CLOEXEC).map_err(io)?;
        let err_w = rustix::io::fcntl_dupfd_cloexec(&out_w, 0).map_err(io)?;
        let _ = rustix::pipe::fcntl_setpipe_size(&out_r, OUTPUT_PIPE_BYTES);
        let (stdin_r, stdin_w) = if spec.stdin {
            let (r, w) = pipe_with(PipeFlags::CLOEXEC).map_err(io)?;
            (r, Some(w))
        } else {
            // An empty pipe (end of input at once), not the host's
            // /dev/null: a command may change the mode, owner and times of
            // what its descriptors lead to, and /dev/null is root's.
            let (r, w) = pipe_with(PipeFlags::CLOEXEC).map_err(io)?;
            drop(w);
            (r, None)
        };
        let (child, lease) = self.start_command(spec, [stdin_r, out_w, err_w])?;
        Ok(Spawned {
            child: Box::new(child),
            output: out_r,
            stdin: stdin_w,
            on_exit: Some(Box::new(move || drop(lease))),
        })
    }

    fn show_cwd(&self, cwd: &WorkspacePath) -> String {
        self.host.show_cwd(cwd)
    }
}
