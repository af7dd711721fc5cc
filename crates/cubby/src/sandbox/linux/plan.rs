//! The `linux` provider's plan: what a sandbox's holder sets up, computed
//! by one pure function ([`plan`]) from what the sandbox enforces
//! ([`Inputs`]: its options and canonical roots) and what was read from the
//! machine ([`Facts`]: ids, kernel limits, which paths and devices exist).
//! No syscall happens here: `probe.rs` and `LinuxSandbox` gather the facts,
//! `holder.rs` and `landlock.rs` apply the plan. Its [`Display`] is a
//! readable rendering that the tests below compare with checked-in text
//! (`testdata/*.plan`).
//!
//! What it decides, in the order the holder applies it:
//!
//! 1. **Namespaces**: user, mount, UTS, pid, and network unless network is
//!    `on`; the IPC namespace apart, first, with its System V limits
//!    ([`Plan::ipc_sysctls`]); the invoking user mapped to itself.
//! 2. **Limits**: the sandbox's `pid_max` (a kernel with one per pid
//!    namespace) or else a pids cgroup; a share of the user's inotify and
//!    fanotify limits; no user namespaces; rlimits per command.
//! 3. **Mounts**: a private `/tmp` of `tmp_mb` (unless the workspace is
//!    `/tmp` itself), the workspace and writable roots bound back writable
//!    (read-only in `read-only` mode or on a read-only mount), the
//!    directories above an existing `deny_read` path pinned, the existing
//!    `deny_read` paths and credential stores masked, a `/dev` of the
//!    sandbox's own with only the devices that exist and at most
//!    [`SANDBOX_PTYS`] pseudo-terminals.
//! 4. **Landlock**: everything readable, the workspace and writable roots
//!    writable (not in `read-only` mode), the devices; then the holder's
//!    `/tmp`, `/dev/shm` and `/dev/pts`. With `read_scope = "system"`, the
//!    directories commands may read at all.
//! 5. **seccomp**: which socket families commands may create.

use std::ffi::CString;
use std::fmt;
use std::path::{Path, PathBuf};

use super::holder::{MAX_DEVICES, MAX_HOLDER_MOUNTS, MAX_READ_RULES, MAX_RUN_KEEPS};
use super::seccomp::Sockets;
use super::{LinuxOptions, cstring, start_error};
use crate::config::{NetworkMode, ReadScope, SandboxLimits};
use crate::error::Result;
use crate::path::WorkspacePath;
use crate::policy::Mode;

/// The private temp dir inside every sandbox.
pub(super) const SANDBOX_TMP: &str = "/tmp";
/// Devices every command may read and write.
pub(super) const WRITABLE_DEVICES: [&str; 5] = [
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
pub(super) const TERMINAL_DEVICE: &str = "/dev/tty";
// The holder has room for every device kept (the terminal included).
const _: () = assert!(WRITABLE_DEVICES.len() < MAX_DEVICES);

/// The kernel's `RESERVED_PIDS`: once a pid namespace's pids have wrapped,
/// the lowest it hands out again.
const RESERVED_PIDS: u64 = 300;
/// The smallest `pid_max` the kernel accepts.
const MIN_PID_MAX: u64 = RESERVED_PIDS + 1;
/// The host's `pid_max` (a namespace's may not be larger).
pub(super) const HOST_PID_MAX: &str = "/proc/sys/kernel/pid_max";
/// A sandbox gets at most this fraction (1/n) of each per-user limit in
/// [`USER_LIMITS`] (the kernel charges what it uses to the user as well).
const USER_LIMIT_SHARE: u64 = 4;
/// Per-user kernel limits a sandbox gets a share of: each as the name
/// under `/proc/sys/user` (the limit of one user namespace) and under
/// `/proc/sys/fs` (the host's, which applies to every namespace).
pub(super) const USER_LIMITS: [(&str, &str); 4] = [
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
/// The page size assumed if the system cannot tell its own.
const FALLBACK_PAGE_BYTES: u64 = 4096;
/// System V message queues a sandbox may hold (`kernel.msgmni` of its IPC
/// namespace), of at most [`SANDBOX_MSG_QUEUE_BYTES`] each: 4 MiB in all.
const SANDBOX_MSG_QUEUES: u64 = 256;
/// Bytes a System V message queue may hold (`kernel.msgmnb`, the kernel's
/// default).
const SANDBOX_MSG_QUEUE_BYTES: u64 = 16 * 1024;
/// Pseudo-terminals the sandbox's own `devpts` hands out at once (its
/// `max=`). Every instance draws on one host-wide count (`kernel.pty.max`,
/// of which `kernel.pty.reserve` is kept for the host's own instance
/// alone), so without a bound one sandbox could take the ptys of every
/// other container and sandbox; 64 is more than `script`, `expect` and a
/// few terminal multiplexers need together.
pub(super) const SANDBOX_PTYS: u64 = 64;
/// Mount options of the sandbox's `devpts` but its `max=`: an instance of
/// its own, `/dev/pts/ptmx` usable by everyone there, terminals the
/// owner's and the group's to write.
const PTS_OPTIONS: &str = "newinstance,ptmxmode=0666,mode=0620";
/// The rlimits a command gets, by resource (`0` in the limits: none, but
/// for core dumps, which are always off, and the last two, always a share).
pub(super) const RLIMIT_RESOURCES: [libc::__rlimit_resource_t; 8] = [
    libc::RLIMIT_NOFILE,
    libc::RLIMIT_NPROC,
    libc::RLIMIT_FSIZE,
    libc::RLIMIT_AS,
    libc::RLIMIT_CPU,
    libc::RLIMIT_CORE,
    libc::RLIMIT_SIGPENDING,
    libc::RLIMIT_MSGQUEUE,
];
/// Of [`RLIMIT_RESOURCES`], the limits a command gets as a share
/// ([`USER_LIMIT_SHARE`]) of cubby's own soft limit (the probe records
/// it in the hard limit's place for these two): the kernel counts
/// queued signals and POSIX message-queue bytes per user *and user
/// namespace* and compares each namespace's count with the limit of the
/// process charged, so every process of the sandbox holding a share keeps
/// the sandbox as a whole to it, and the host user keeps the rest.
const SHARED_RLIMITS: [libc::__rlimit_resource_t; 2] =
    [libc::RLIMIT_SIGPENDING, libc::RLIMIT_MSGQUEUE];

/// What a sandbox enforces, as the plan needs it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Inputs<'a> {
    /// The workspace root (canonical).
    pub root: &'a Path,
    /// The device and inode of the root the sandbox opened: the holder
    /// binds what the path names then only if it is that directory.
    pub root_identity: Option<(u64, u64)>,
    /// The writable roots (canonical).
    pub writable_roots: &'a [PathBuf],
    /// With `read_scope = "system"`: what commands read (canonical).
    pub read_roots: &'a [PathBuf],
    /// Mode, network, `deny_read`, limits, read scope.
    pub options: &'a LinuxOptions,
    /// Keep an init forked ahead (off for `cubby exec`'s one command, whose
    /// init also takes the terminal's foreground).
    pub fork_ahead: bool,
    /// Network `allow`: the holder opens the egress proxy's listener.
    pub proxy_listener: bool,
    /// Listeners the holder opens for the gateways (`[gateway.<name>]`),
    /// one each, after the proxy's.
    pub gateway_listeners: usize,
}

/// A device as the machine has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Device {
    /// Its path (one of [`WRITABLE_DEVICES`] or [`TERMINAL_DEVICE`]).
    pub path: &'static str,
    /// The path exists (following links).
    pub exists: bool,
    /// The path itself is a character device.
    pub char_device: bool,
}

/// What the plan depends on that is read from the machine.
#[derive(Clone, Debug)]
pub(super) struct Facts {
    /// The invoking user and group.
    pub uid: u32,
    pub gid: u32,
    /// `kernel.pid_max` is per pid namespace (Linux 6.14+).
    pub namespaced_pid_max: bool,
    /// The host's `kernel.pid_max`.
    pub host_pid_max: Option<u64>,
    /// For each of [`USER_LIMITS`]: this user namespace's limit and the
    /// host's.
    pub user_limits: [(Option<u64>, Option<u64>); USER_LIMITS.len()],
    /// The host's memory (`MemTotal`), in MiB.
    pub memory_mb: Option<u64>,
    /// The page size.
    pub page_bytes: Option<u64>,
    /// Which of the workspace and writable roots lie on a read-only mount.
    pub readonly_mounts: Vec<PathBuf>,
    /// The `deny_read` paths there are now (files or directories).
    pub deny_read_present: Vec<WorkspacePath>,
    /// The credential stores there are now (absolute).
    pub stores: Vec<PathBuf>,
    /// [`WRITABLE_DEVICES`] and [`TERMINAL_DEVICE`], as the machine has
    /// them.
    pub devices: Vec<Device>,
    /// The hard limit of each of [`RLIMIT_RESOURCES`] for this process.
    pub hard_limits: [libc::rlim_t; RLIMIT_RESOURCES.len()],
    /// Of [`RUN_DIRS`], those that are directories (not links); then the
    /// sandbox's `host_private_dirs` to cover the same way.
    pub run_dirs: Vec<PathBuf>,
    /// What commands need from the run directories and the machine has
    /// (canonical directories): [`RUN_KEEPS`] and the directory of
    /// `/etc/resolv.conf`'s target when it lies there.
    pub run_keeps: Vec<PathBuf>,
}

/// The host's runtime directories, covered by an empty tmpfs of the
/// sandbox's own: the daemons' pathname sockets live there (systemd's and
/// D-Bus's, docker's, containerd's, podman's, libvirt's, the users'
/// agents under `/run/user`), and with them runtime secrets
/// (`/run/secrets`, podman's `auth.json`). `/var/run` is covered too when
/// it is a directory of its own rather than a link to `/run`.
pub(super) const RUN_DIRS: [&str; 2] = ["/run", "/var/run"];
/// What commands need from the run directories, bound back read-only when
/// it exists: the resolver's configuration that `/etc/resolv.conf` leads
/// to on systemd, resolvconf and NetworkManager hosts.
pub(super) const RUN_KEEPS: [&str; 3] = [
    "/run/systemd/resolve",
    "/run/resolvconf",
    "/run/NetworkManager",
];

/// The workspace root or a writable root: bound again, writable (unless
/// `readonly`), once every mount is read-only; one that lives under `/tmp`
/// on the host also stays visible (the same inode) beneath the private
/// `/tmp`.
#[derive(Debug)]
pub(super) struct Rebind {
    /// Its absolute path.
    pub path: CString,
    /// Directories to create in the private `/tmp`, outermost first (the
    /// last is `path` itself); none for a path outside `/tmp`.
    pub mkdirs: Vec<CString>,
    /// Bound read-only (`read-only` mode, or a path on a read-only mount).
    pub readonly: bool,
    /// The device and inode the directory must have, opened and once bound
    /// (the workspace root: the directory the sandbox opened).
    pub identity: Option<(u64, u64)>,
}

/// A directory bound back (read-only, or writable by its [`Rebind`]) into
/// the sandbox's own run directory.
#[derive(Debug)]
pub(super) struct RunKeep {
    /// Its absolute path.
    pub path: CString,
    /// Directories to create in the run directory's tmpfs, outermost
    /// first (the last is `path` itself).
    pub mkdirs: Vec<CString>,
}

/// A `deny_read` path or credential store to hide behind an empty,
/// unreadable object (a directory for a directory, a file otherwise; what
/// is missing when the holder gets to it is skipped).
#[derive(Debug)]
pub(super) struct Mask {
    /// Its absolute path.
    pub path: CString,
}

/// The sandbox's Landlock ruleset (see `landlock.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct LandlockRules {
    /// Readable and executable beneath.
    pub read: Vec<PathBuf>,
    /// Every access beneath.
    pub writable: Vec<PathBuf>,
    /// Usable as files (read, write, `ioctl`).
    pub devices: Vec<PathBuf>,
    /// Every access beneath, relative to the holder's root.
    pub holder_writable: Vec<PathBuf>,
    /// Usable as files, relative to the holder's root.
    pub holder_devices: Vec<PathBuf>,
    /// Readable in the store layer (`read_view.rs`), relative to the
    /// holder's root: the sandbox's own mounts, which the host's tree it is
    /// built on does not hold.
    pub store_holder_read: Vec<PathBuf>,
}

/// How the sandbox's processes are bounded as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ProcessBound {
    /// By the `pid_max` of the sandbox's pid namespace.
    PidMax,
    /// By a pids cgroup, when cubby can make one.
    Cgroup,
    /// Not as a whole (`processes = 0`): `RLIMIT_NPROC` alone, if set.
    None,
}

/// What the holder sets up, and what every command gets.
#[derive(Debug)]
pub(super) struct Plan {
    /// The sandbox's namespaces (the IPC namespace apart).
    pub unshare_flags: libc::c_int,
    pub outer_uid_map: Vec<u8>,
    pub outer_gid_map: Vec<u8>,
    pub uid_map: Vec<u8>,
    pub gid_map: Vec<u8>,
    /// The System V limits of the sandbox's IPC namespace (`/proc/sys`
    /// file, value).
    pub ipc_sysctls: Vec<(CString, CString)>,
    /// A private `/tmp` (not when the workspace is `/tmp`).
    pub private_tmp: bool,
    /// Mount options of the private `/tmp` and `/dev/shm`.
    pub tmp_options: CString,
    /// Mount options of the sandbox's `devpts` (at most [`SANDBOX_PTYS`]).
    pub pts_options: CString,
    /// The sandbox's process, inotify, fanotify and user-namespace limits.
    pub sysctls: Vec<(CString, CString)>,
    pub rebinds: Vec<Rebind>,
    /// The run directories covered by an empty tmpfs ([`RUN_DIRS`]).
    pub run_dirs: Vec<CString>,
    /// What is bound back into them, outermost first.
    pub run_keeps: Vec<RunKeep>,
    pub pins: Vec<CString>,
    pub masks: Vec<Mask>,
    /// With `read_scope = "system"`: what commands read.
    pub read_rules: Vec<CString>,
    /// The host devices in the sandbox's `/dev`.
    pub devices: Vec<CString>,
    /// Bring the loopback up (the sandbox has a network namespace).
    pub loopback: bool,
    pub fork_ahead: bool,
    pub proxy_listener: bool,
    pub gateway_listeners: usize,
    /// The socket families of the sandbox's seccomp filter.
    pub sockets: Sockets,
    pub processes: ProcessBound,
    /// The workspace root, where every init changes to.
    pub root: CString,
    pub rlimits: Vec<(libc::__rlimit_resource_t, libc::rlim_t)>,
    /// The init takes the terminal's foreground (`cubby exec`).
    pub foreground: bool,
    pub landlock: LandlockRules,
}

/// A `/proc/sys` entry: its file and value.
fn entry(path: String, value: u64) -> Result<(CString, CString)> {
    Ok((
        CString::new(path).map_err(start_error)?,
        CString::new(value.to_string()).map_err(start_error)?,
    ))
}

/// What the holder writes under `/proc/sys` for `limits`: with
/// `namespaced_pid_max`, the sandbox's `pid_max` and its last pid (so that
/// its pids wrap at once, from then on counting only [`RESERVED_PIDS`] up:
/// exactly `processes` processes, the holder among them); a share of each
/// of the user's inotify and fanotify limits; no user namespaces.
fn sandbox_sysctls(limits: &SandboxLimits, facts: &Facts) -> Result<Vec<(CString, CString)>> {
    let mut out = Vec::new();
    if limits.processes > 0 && facts.namespaced_pid_max {
        let wanted = limits
            .processes
            .saturating_add(RESERVED_PIDS - 1)
            .max(MIN_PID_MAX);
        let host = facts.host_pid_max.unwrap_or(wanted);
        out.push(entry(
            HOST_PID_MAX.to_string(),
            wanted.min(host).max(MIN_PID_MAX),
        )?);
        out.push(entry(
            "/proc/sys/kernel/ns_last_pid".to_string(),
            RESERVED_PIDS,
        )?);
    }
    for ((in_namespace, _), (own, host)) in USER_LIMITS.iter().zip(facts.user_limits) {
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

/// `tmp_mb`, at most a [`TMP_MAX_SHARE_OF_MEMORY`]th of the host's memory:
/// the size of `/tmp`, of `/dev/shm` and of the sandbox's System V shared
/// memory, each.
fn tmp_size_mb(tmp_mb: u64, facts: &Facts) -> u64 {
    let cap = facts
        .memory_mb
        .map_or(u64::MAX, |m| (m / TMP_MAX_SHARE_OF_MEMORY).max(1));
    tmp_mb.clamp(1, cap)
}

/// The mount options of the private `/tmp` and `/dev/shm`: `tmp_mb` MiB
/// each (at most a [`TMP_MAX_SHARE_OF_MEMORY`]th of the host's memory),
/// with [`TMP_INODES_PER_MB`] inodes a MiB.
fn tmp_options(tmp_mb: u64, facts: &Facts) -> Result<CString> {
    let size_mb = tmp_size_mb(tmp_mb, facts);
    let inodes = size_mb.saturating_mul(TMP_INODES_PER_MB);
    CString::new(format!("mode=1777,size={size_mb}m,nr_inodes={inodes}")).map_err(start_error)
}

/// What the holder writes under `/proc/sys/kernel` for the sandbox's IPC
/// namespace (see `HolderPlan::ipc_sysctls`): System V shared memory of at
/// most `tmp_mb` MiB in all (`shmall`, in pages) and in one segment
/// (`shmmax`), every segment removed when no process has it attached and,
/// for one never attached, when the process that made it exits
/// (`shm_rmid_forced`: a segment does not outlive its command's
/// processes); message queues bounded by [`SANDBOX_MSG_QUEUES`] and
/// [`SANDBOX_MSG_QUEUE_BYTES`].
fn ipc_sysctls(limits: &SandboxLimits, facts: &Facts) -> Result<Vec<(CString, CString)>> {
    const BYTES_PER_MIB: u64 = 1024 * 1024;
    let bytes = tmp_size_mb(limits.tmp_mb, facts).saturating_mul(BYTES_PER_MIB);
    let page = facts.page_bytes.unwrap_or(FALLBACK_PAGE_BYTES);
    [
        ("shm_rmid_forced", 1),
        ("shmmax", bytes),
        ("shmall", bytes.div_ceil(page)),
        ("msgmni", SANDBOX_MSG_QUEUES),
        ("msgmnb", SANDBOX_MSG_QUEUE_BYTES),
    ]
    .into_iter()
    .map(|(name, value)| entry(format!("/proc/sys/kernel/{name}"), value))
    .collect()
}

/// The rlimits to set, each capped at the hard limit cubby itself has.
fn rlimits(
    limits: &SandboxLimits,
    facts: &Facts,
) -> Vec<(libc::__rlimit_resource_t, libc::rlim_t)> {
    const MIB: u64 = 1024 * 1024;
    let wanted = [
        limits.open_files,
        limits.processes,
        limits.file_size_mb.saturating_mul(MIB),
        limits.address_space_mb.saturating_mul(MIB),
        limits.cpu_seconds,
        0,
        0,
        0,
    ];
    let mut out = Vec::new();
    for ((resource, value), hard) in RLIMIT_RESOURCES
        .into_iter()
        .zip(wanted)
        .zip(facts.hard_limits)
    {
        if SHARED_RLIMITS.contains(&resource) {
            // An unlimited one stays so (the sandbox then is bounded by
            // nothing, as before); else at least one signal or byte.
            if hard != libc::RLIM_INFINITY {
                out.push((resource, (hard / USER_LIMIT_SHARE).max(1)));
            }
            continue;
        }
        if value == 0 && resource != libc::RLIMIT_CORE {
            continue;
        }
        out.push((resource, value.min(hard)));
    }
    out
}

/// The plan for a sandbox of `inputs` on a machine of `facts`.
///
/// # Errors
///
/// `unsupported` for what the holder cannot take: more writable roots,
/// `deny_read` paths and credential stores than [`MAX_HOLDER_MOUNTS`], more
/// directories to read than [`MAX_READ_RULES`], a root beneath `/dev`;
/// `invalid_input` for a path with a NUL byte.
pub(super) fn plan(inputs: &Inputs<'_>, facts: &Facts) -> Result<Plan> {
    let options = inputs.options;
    let root = inputs.root;
    let own_network = options.network != NetworkMode::On;
    // The IPC namespace is not among these: the holder makes it first, in a
    // user namespace of its own (see `HolderPlan::ipc_sysctls`).
    let mut unshare_flags =
        libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWUTS | libc::CLONE_NEWPID;
    if own_network {
        unshare_flags |= libc::CLONE_NEWNET;
    }
    let tmp = Path::new(SANDBOX_TMP);
    let private_tmp = root != tmp;
    let mut rebinds = Vec::new();
    let dirs = std::iter::once((root, inputs.root_identity)).chain(
        inputs
            .writable_roots
            .iter()
            .map(|w| (w.as_path(), None::<(u64, u64)>)),
    );
    for (dir, identity) in dirs {
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
        let on_readonly_mount = facts.readonly_mounts.iter().any(|r| r == dir);
        rebinds.push(Rebind {
            path: cstring(dir)?,
            mkdirs,
            readonly: options.mode == Mode::ReadOnly || on_readonly_mount,
            identity,
        });
    }
    // The host's run directories: covered, with what commands need there
    // and the sandbox's own roots bound back.
    let mut keeps: Vec<&Path> = facts.run_keeps.iter().map(PathBuf::as_path).collect();
    keeps.extend(std::iter::once(root));
    keeps.extend(inputs.writable_roots.iter().map(PathBuf::as_path));
    keeps.extend(inputs.read_roots.iter().map(PathBuf::as_path));
    keeps.sort();
    keeps.dedup();
    // Outermost first (a stable sort: by name within a depth).
    keeps.sort_by_key(|p| p.components().count());
    let mut run_keeps = Vec::new();
    for keep in keeps {
        let Some(run) = facts.run_dirs.iter().find(|run| keep.starts_with(run)) else {
            continue;
        };
        let mut at = run.clone();
        let mut mkdirs = Vec::new();
        for part in keep.strip_prefix(run).unwrap_or(Path::new("")).components() {
            at.push(part);
            mkdirs.push(cstring(&at)?);
        }
        if mkdirs.is_empty() {
            // A root that is a run directory itself: nothing covers it.
            continue;
        }
        run_keeps.push(RunKeep {
            path: cstring(keep)?,
            mkdirs,
        });
    }
    if run_keeps.len() > MAX_RUN_KEEPS {
        return Err(start_error(format!(
            "too many roots beneath /run (at most {MAX_RUN_KEEPS} with what commands need there)"
        )));
    }
    let run_dirs = facts
        .run_dirs
        .iter()
        .filter(|run| {
            std::iter::once(root)
                .chain(inputs.writable_roots.iter().map(PathBuf::as_path))
                .chain(inputs.read_roots.iter().map(PathBuf::as_path))
                .all(|dir| dir != run.as_path())
        })
        .map(|run| cstring(run.as_path()))
        .collect::<Result<Vec<_>>>()?;
    let mut masks = Vec::new();
    let mut pins: Vec<CString> = Vec::new();
    for path in &facts.deny_read_present {
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
    // The credential stores there are now; each command's init masks those
    // that appear later.
    for store in &facts.stores {
        masks.push(Mask {
            path: cstring(store)?,
        });
    }
    if rebinds.len() + pins.len() + masks.len() > MAX_HOLDER_MOUNTS {
        return Err(start_error(format!(
            "too many writable roots, deny_read paths and credential stores (at most {MAX_HOLDER_MOUNTS})"
        )));
    }
    // With `read_scope = "system"`: what every command may read, opened by
    // the holder in its own view (its `/dev` and private `/tmp` included);
    // each command's init adds its own `/proc`.
    let mut read_rules = Vec::new();
    if options.read_scope == ReadScope::System {
        for dir in inputs.read_roots {
            read_rules.push(cstring(dir)?);
        }
        read_rules.push(cstring(Path::new(DEVICES_DIR))?);
        if private_tmp {
            read_rules.push(cstring(tmp)?);
        }
        if read_rules.len() > MAX_READ_RULES {
            return Err(start_error(format!(
                "read_scope = \"system\" gives {} directories to read (PATH entries, \
                 readable and writable roots); at most {MAX_READ_RULES}",
                read_rules.len(),
            )));
        }
    }
    let sockets = match options.network {
        // A gateway listens on the namespace's loopback, which is all the
        // namespace has: commands may open inet sockets to reach it, and
        // there is nowhere else they lead (SECURITY.md, "Gateway").
        NetworkMode::Off if inputs.gateway_listeners > 0 => Sockets::Inet,
        NetworkMode::Off => Sockets::UnixOnly,
        NetworkMode::Allow => Sockets::Inet,
        NetworkMode::On => Sockets::Any,
    };
    // The sandbox's pid namespace, where every command's nests, holds the
    // process budget where the kernel has a pid_max per namespace;
    // otherwise a pids cgroup bounds the sandbox (as root, where
    // RLIMIT_NPROC does not apply), at the price of a slow join.
    let processes = if options.limits.processes == 0 {
        ProcessBound::None
    } else if facts.namespaced_pid_max {
        ProcessBound::PidMax
    } else {
        ProcessBound::Cgroup
    };
    // The devices commands get; the rest of the host's `/dev` is not there
    // for them (nor what lives beneath it).
    if let Some(dir) = std::iter::once(root)
        .chain(inputs.writable_roots.iter().map(PathBuf::as_path))
        .find(|dir| dir.starts_with(DEVICES_DIR))
    {
        return Err(start_error(format!(
            "`{}` is beneath {DEVICES_DIR}, which commands see as a directory of their own",
            dir.display()
        )));
    }
    let devices = facts
        .devices
        .iter()
        .filter(|dev| dev.char_device)
        .map(|dev| CString::new(dev.path).map_err(start_error))
        .collect::<Result<Vec<_>>>()?;
    let mut landlock = LandlockRules {
        read: vec![PathBuf::from("/")],
        ..LandlockRules::default()
    };
    if options.mode != Mode::ReadOnly {
        landlock.writable = std::iter::once(root.to_path_buf())
            .chain(inputs.writable_roots.iter().cloned())
            .collect();
    }
    landlock.devices = facts
        .devices
        .iter()
        .filter(|dev| dev.exists && WRITABLE_DEVICES.contains(&dev.path))
        .map(|dev| PathBuf::from(dev.path))
        .collect();
    if private_tmp {
        landlock.holder_writable.push(PathBuf::from("tmp"));
    }
    landlock.holder_writable.push(PathBuf::from("dev/shm"));
    landlock.holder_devices.push(PathBuf::from("dev/pts"));
    // The store layer's grants of the sandbox's own mounts: its `/dev`
    // (with `/dev/shm` and `/dev/pts` beneath) and its private `/tmp`.
    landlock
        .store_holder_read
        .push(PathBuf::from(DEVICES_DIR.trim_start_matches('/')));
    if private_tmp {
        landlock.store_holder_read.push(PathBuf::from("tmp"));
    }
    for run in &facts.run_dirs {
        if let Ok(rel) = run.strip_prefix("/") {
            landlock.store_holder_read.push(rel.to_path_buf());
        }
    }
    let (uid, gid) = (facts.uid, facts.gid);
    Ok(Plan {
        unshare_flags,
        outer_uid_map: format!("0 {uid} 1\n").into_bytes(),
        outer_gid_map: format!("0 {gid} 1\n").into_bytes(),
        uid_map: format!("{uid} 0 1\n").into_bytes(),
        gid_map: format!("{gid} 0 1\n").into_bytes(),
        ipc_sysctls: ipc_sysctls(&options.limits, facts)?,
        private_tmp,
        tmp_options: tmp_options(options.limits.tmp_mb, facts)?,
        pts_options: CString::new(format!("{PTS_OPTIONS},max={SANDBOX_PTYS}"))
            .map_err(start_error)?,
        sysctls: sandbox_sysctls(&options.limits, facts)?,
        rebinds,
        run_dirs,
        run_keeps,
        pins,
        masks,
        read_rules,
        devices,
        loopback: own_network,
        fork_ahead: inputs.fork_ahead,
        proxy_listener: inputs.proxy_listener,
        gateway_listeners: inputs.gateway_listeners,
        sockets,
        processes,
        root: cstring(root)?,
        rlimits: rlimits(&options.limits, facts),
        // Only `cubby exec` (`spawn_inherited`) turns forking ahead off.
        foreground: !inputs.fork_ahead,
        landlock,
    })
}

/// A path for the rendering.
fn show(path: &CString) -> std::borrow::Cow<'_, str> {
    path.to_string_lossy()
}

/// The name of an rlimit resource.
fn rlimit_name(resource: libc::__rlimit_resource_t) -> &'static str {
    match resource {
        libc::RLIMIT_NOFILE => "nofile",
        libc::RLIMIT_NPROC => "nproc",
        libc::RLIMIT_FSIZE => "fsize",
        libc::RLIMIT_AS => "as",
        libc::RLIMIT_CPU => "cpu",
        libc::RLIMIT_CORE => "core",
        libc::RLIMIT_SIGPENDING => "sigpending",
        libc::RLIMIT_MSGQUEUE => "msgqueue",
        _ => "other",
    }
}

/// The names of the namespaces in `flags`.
fn namespaces(flags: libc::c_int) -> String {
    let names = [
        (libc::CLONE_NEWUSER, "user"),
        (libc::CLONE_NEWNS, "mount"),
        (libc::CLONE_NEWUTS, "uts"),
        (libc::CLONE_NEWPID, "pid"),
        (libc::CLONE_NEWNET, "net"),
        (libc::CLONE_NEWIPC, "ipc"),
    ];
    let shown: Vec<&str> = names
        .iter()
        .filter(|(flag, _)| flags & flag != 0)
        .map(|(_, name)| *name)
        .collect();
    shown.join(" ")
}

/// One line per decision, in the order the holder applies them.
impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = |b: &[u8]| String::from_utf8_lossy(b).trim_end().to_string();
        writeln!(
            f,
            "namespaces: {} (ipc first, apart)",
            namespaces(self.unshare_flags)
        )?;
        writeln!(
            f,
            "outer maps: uid {} gid {}",
            text(&self.outer_uid_map),
            text(&self.outer_gid_map)
        )?;
        writeln!(
            f,
            "maps: uid {} gid {}",
            text(&self.uid_map),
            text(&self.gid_map)
        )?;
        for (path, value) in &self.ipc_sysctls {
            writeln!(f, "ipc sysctl {} = {}", show(path), show(value))?;
        }
        writeln!(f, "processes: {:?}", self.processes)?;
        for (path, value) in &self.sysctls {
            writeln!(f, "sysctl {} = {}", show(path), show(value))?;
        }
        match self.private_tmp {
            true => writeln!(f, "tmp: private ({})", show(&self.tmp_options))?,
            false => writeln!(f, "tmp: the workspace's own")?,
        }
        for rebind in &self.rebinds {
            let how = if rebind.readonly {
                "read-only"
            } else {
                "writable"
            };
            write!(f, "rebind {} {how}", show(&rebind.path))?;
            for dir in &rebind.mkdirs {
                write!(f, " mkdir {}", show(dir))?;
            }
            writeln!(f)?;
        }
        for run in &self.run_dirs {
            writeln!(f, "run dir: own {}", show(run))?;
        }
        for keep in &self.run_keeps {
            write!(f, "run keep {}", show(&keep.path))?;
            for dir in &keep.mkdirs {
                write!(f, " mkdir {}", show(dir))?;
            }
            writeln!(f)?;
        }
        for pin in &self.pins {
            writeln!(f, "pin {}", show(pin))?;
        }
        writeln!(
            f,
            "dev: own, /dev/shm ({}), /dev/pts ({})",
            show(&self.tmp_options),
            show(&self.pts_options)
        )?;
        for dev in &self.devices {
            writeln!(f, "device {}", show(dev))?;
        }
        for mask in &self.masks {
            writeln!(f, "mask {}", show(&mask.path))?;
        }
        writeln!(f, "loopback: {}", self.loopback)?;
        writeln!(f, "proxy listener: {}", self.proxy_listener)?;
        if self.gateway_listeners > 0 {
            writeln!(f, "gateway listeners: {}", self.gateway_listeners)?;
        }
        writeln!(f, "seccomp sockets: {:?}", self.sockets)?;
        for rule in &self.read_rules {
            writeln!(f, "read rule {}", show(rule))?;
        }
        writeln!(f, "fork ahead: {}", self.fork_ahead)?;
        writeln!(f, "command root: {}", show(&self.root))?;
        for (resource, value) in &self.rlimits {
            writeln!(f, "rlimit {} = {value}", rlimit_name(*resource))?;
        }
        writeln!(f, "foreground: {}", self.foreground)?;
        let rules = &self.landlock;
        for (what, paths) in [
            ("read", &rules.read),
            ("all", &rules.writable),
            ("device", &rules.devices),
            ("holder all", &rules.holder_writable),
            ("holder device", &rules.holder_devices),
            ("store layer holder read", &rules.store_holder_read),
        ] {
            for path in paths {
                writeln!(f, "landlock {what} {}", path.display())?;
            }
        }
        Ok(())
    }
}

/// Compares `rendered` with the golden file `testdata/<name>.plan`;
/// `CUBBY_BLESS=1` rewrites the file instead (then review the diff).
#[cfg(test)]
pub(super) fn golden(name: &str, rendered: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/sandbox/linux/testdata")
        .join(format!("{name}.plan"));
    if std::env::var_os("CUBBY_BLESS").is_some() {
        std::fs::write(&path, rendered).expect("write the golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (CUBBY_BLESS=1 writes it)", path.display()));
    assert!(
        rendered == expected,
        "`{name}` differs from {}:\n--- expected\n{expected}\n--- got\n{rendered}",
        path.display()
    );
}

#[cfg(test)]
mod tests {
    //! Golden tests: the plan for fixed inputs on a fixed machine, rendered
    //! and compared with `testdata/<name>.plan`. `CUBBY_BLESS=1` rewrites
    //! the files (then review the diff).

    use super::*;
    use crate::policy::Policy;

    const ROOT: &str = "/work/ws";

    /// A machine: user 1000, Linux 6.14+, 16 GiB, every device.
    fn facts() -> Facts {
        Facts {
            uid: 1000,
            gid: 1000,
            namespaced_pid_max: true,
            host_pid_max: Some(4_194_304),
            user_limits: [
                (Some(128), Some(128)),
                (Some(65_536), Some(1_048_576)),
                (Some(128), None),
                (None, None),
            ],
            memory_mb: Some(16_384),
            page_bytes: Some(4096),
            readonly_mounts: Vec::new(),
            deny_read_present: Vec::new(),
            stores: vec![PathBuf::from("/home/u/.ssh")],
            devices: WRITABLE_DEVICES
                .into_iter()
                .chain([TERMINAL_DEVICE])
                .map(|path| Device {
                    path,
                    exists: true,
                    char_device: true,
                })
                .collect(),
            hard_limits: [
                1_048_576,
                libc::RLIM_INFINITY,
                libc::RLIM_INFINITY,
                libc::RLIM_INFINITY,
                libc::RLIM_INFINITY,
                libc::RLIM_INFINITY,
                63_432,
                819_200,
            ],
            run_dirs: Vec::new(),
            run_keeps: Vec::new(),
        }
    }

    /// The options of the default policy, changed by `change`.
    fn options(change: impl FnOnce(&mut LinuxOptions)) -> LinuxOptions {
        let mut options =
            LinuxOptions::from_policy(&Policy::default(), &crate::host_env::HostEnv::default());
        change(&mut options);
        options
    }

    /// The rendered plan for `options` on `facts`, with the sandbox's own
    /// roots.
    fn render(options: &LinuxOptions, writable: &[&str], read: &[&str], facts: &Facts) -> String {
        let writable: Vec<PathBuf> = writable.iter().map(PathBuf::from).collect();
        let read: Vec<PathBuf> = read.iter().map(PathBuf::from).collect();
        let inputs = Inputs {
            root: Path::new(ROOT),
            root_identity: None,
            writable_roots: &writable,
            read_roots: &read,
            options,
            fork_ahead: true,
            proxy_listener: options.network == NetworkMode::Allow,
            gateway_listeners: 0,
        };
        plan(&inputs, facts).expect("a plan").to_string()
    }

    #[test]
    fn default_policy() {
        golden("default", &render(&options(|_| {}), &[], &[], &facts()));
    }

    #[test]
    fn protected_paths_leave_the_holder_alone() {
        // Protected paths are bound by each command's init (`protect.rs`),
        // not by the holder: its plan is the default one.
        let mut policy = Policy::builder();
        policy.protect(".codex").protect("ci/**");
        let options = LinuxOptions::from_policy(
            &policy.build().unwrap(),
            &crate::host_env::HostEnv::default(),
        );
        assert!(!options.protected.is_empty());
        golden("default", &render(&options, &[], &[], &facts()));
    }

    #[test]
    fn read_scope_system_with_readable_roots() {
        let options = options(|o| {
            o.read_scope = ReadScope::System;
            o.readable_roots = vec![PathBuf::from("/opt/tools")];
        });
        let read = ["/usr", "/etc", "/work/ws", "/opt/tools"];
        golden("read_scope_system", &render(&options, &[], &read, &facts()));
    }

    #[test]
    fn host_run_dirs_are_covered_with_what_commands_need_bound_back() {
        let mut facts = facts();
        facts.run_dirs = vec![PathBuf::from("/run")];
        facts.run_keeps = ["/run/systemd/resolve", "/run/resolvconf", "/etc/resolv.d"]
            .into_iter()
            .map(PathBuf::from)
            .collect();
        let options = options(|o| o.read_scope = ReadScope::System);
        let read = ["/usr", "/run/systemd/resolve"];
        golden(
            "run_dirs",
            &render(&options, &["/run/user/1000/build"], &read, &facts),
        );
    }

    #[test]
    fn network_allow_and_on() {
        let allow = options(|o| o.network = NetworkMode::Allow);
        golden("network_allow", &render(&allow, &[], &[], &facts()));
        let on = options(|o| o.network = NetworkMode::On);
        golden("network_on", &render(&on, &[], &[], &facts()));
    }

    #[test]
    fn deny_read_paths_are_masked_and_pinned() {
        let mut facts = facts();
        facts.deny_read_present = ["secrets/deploy/key", "secrets/token", ".env"]
            .into_iter()
            .map(|p| WorkspacePath::parse(p).unwrap())
            .collect();
        golden("deny_read", &render(&options(|_| {}), &[], &[], &facts));
    }

    #[test]
    fn read_only_writable_roots_and_an_old_kernel() {
        let options = options(|o| {
            o.mode = Mode::ReadOnly;
            o.limits.tmp_mb = 1_000_000;
        });
        let mut facts = facts();
        facts.namespaced_pid_max = false;
        facts.readonly_mounts = vec![PathBuf::from("/mnt/ro")];
        facts
            .devices
            .retain(|d| d.path != TERMINAL_DEVICE && d.path != "/dev/full");
        let writable = ["/tmp/build/out", "/mnt/ro"];
        golden("read_only", &render(&options, &writable, &[], &facts));
    }

    #[test]
    fn what_the_holder_cannot_take_is_refused() {
        let writable = vec![PathBuf::from("/dev/shm/x")];
        let options = options(|_| {});
        let inputs = Inputs {
            root: Path::new(ROOT),
            root_identity: None,
            writable_roots: &writable,
            read_roots: &[],
            options: &options,
            fork_ahead: true,
            proxy_listener: false,
            gateway_listeners: 0,
        };
        let err = plan(&inputs, &facts()).unwrap_err();
        assert!(err.to_string().contains("beneath /dev"), "{err}");
        let mut many = facts();
        many.stores = (0..MAX_HOLDER_MOUNTS)
            .map(|i| PathBuf::from(format!("/home/u{i}/.ssh")))
            .collect();
        let inputs = Inputs {
            writable_roots: &[],
            ..inputs
        };
        let err = plan(&inputs, &many).unwrap_err();
        assert!(err.to_string().contains("too many"), "{err}");
    }
}
