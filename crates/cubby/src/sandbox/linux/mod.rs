//! The `linux` provider: the confined [`LocalFs`] for the file tools, and
//! commands that run in namespaces under Landlock, seccomp and rlimits.
//!
//! A sandbox starts lazily, with the first command: a *holder* process
//! (forked once; see `holder.rs`) creates the user, mount, IPC, UTS and
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
//!
//! # Files
//!
//! One job each; the plan is pure, the rest applies it.
//!
//! | file | job |
//! |---|---|
//! | `mod.rs` | [`LinuxSandbox`]: open, start (facts → plan → holder), commands, the `Sandbox` impl |
//! | `options.rs` | [`LinuxOptions`], from a policy |
//! | `probe.rs` | [`Capabilities`] (`cubby doctor`), the quick check at open, the machine's facts for the plan |
//! | `plan.rs` | the pure plan: (inputs, facts) → namespaces, limits, mounts, masks, devices, Landlock rules, socket families; golden-tested |
//! | `cgroup.rs` | the pids cgroup where `pid_max` is not per namespace |
//! | `client.rs` | the server's side of a live sandbox: the holder, commands, their start and status |
//! | `protect.rs` | per command: protected paths bound, pinned or reserved |
//! | `reserve.rs`, `placeholder.rs` | reservations of missing protected paths and their placeholders |
//! | `read_view.rs` | credential stores and `read_scope = "system"` |
//! | `landlock.rs` | the Landlock ruleset (compiled once) and the read layer (fork-side) |
//! | `seccomp.rs` | the seccomp filters, classic BPF |
//! | `wire.rs` | the protocol between the server and the fork-side programs |
//! | `holder.rs`, `init.rs`, `command.rs` | the three fork-side programs, one each |
//! | `mask.rs`, `loopback.rs` | fork-side masks of hidden paths; the loopback and the egress proxy's listener |
//! | `syscalls.rs` | async-signal-safe syscall wrappers the three share |

mod cgroup;
mod client;
mod command;
mod holder;
mod init;
mod landlock;
mod loopback;
mod mask;
mod options;
mod placeholder;
mod plan;
mod probe;
mod protect;
mod read_view;
mod reserve;
mod seccomp;
mod syscalls;
mod wire;

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustix::pipe::{PipeFlags, pipe_with};

use client::InheritedChild;
pub use options::LinuxOptions;
pub use probe::Capabilities;

use super::{EntryKind, ExecSpec, FileSystem, LocalFs, LocalSandbox, ProviderKind, Sandbox};
use super::{ProcessHandle, Spawned};
use crate::config::{NetworkMode, ReadScope};
use crate::error::{Error, ErrorKind, Result};
use crate::host_env::HostEnv;
use crate::net::{Egress, EgressProxy, GatewayRun, GatewayServers, Gateways, Resolver};
use crate::path::WorkspacePath;
use crate::policy::{Mode, Policy, PolicyDigest};
use crate::sync::lock;
use client::{Lease, Live};
use holder::HolderPlan;
use plan::{Facts, ProcessBound, SANDBOX_TMP};
use read_view::HostStores;
use reserve::{Reservations, WithoutReservations};
use wire::{ENTRY_DENY_READ, ENTRY_STORE, MSG_LANDLOCK, MSG_RUN, Msg};

/// Capacity asked for a command's output pipe.
const OUTPUT_PIPE_BYTES: usize = 1024 * 1024;

/// A holder ready for requests, as [`LinuxSandbox::spawn_holder`] hands it
/// back.
struct HolderReady {
    holder: std::process::Child,
    /// The server's end of its socket.
    sock: OwnedFd,
    proxy: Option<EgressProxy>,
    gateways: Option<GatewayServers>,
    extra_env: Vec<(String, String)>,
    /// The finished Landlock ruleset (sent to it once).
    landlock: OwnedFd,
    /// Its directories the store layer grants.
    store_dirs: Vec<OwnedFd>,
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
    /// The gateways (`[gateway.<name>]`) and their runs' tokens.
    gateways: Option<Arc<Gateways>>,
    /// Git's surface as read when the sandbox opened, for its first
    /// command if it comes within [`crate::git::SHARE_WINDOW`] (later ones
    /// read it again).
    git_at_open: Mutex<Option<crate::git::SurfaceRead>>,
    /// The host's credential stores, masked for every command.
    stores: HostStores,
    /// With `read_scope = "system"`: what commands read (canonical).
    read_roots: Vec<PathBuf>,
    /// The workspace and the writable and readable roots (canonical):
    /// readable in the store layer whatever holds them.
    layer_roots: Vec<PathBuf>,
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

/// A path as a C string.
fn cstring(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::invalid_input(format!("`{}` contains a NUL byte", path.display())))
}

/// An error of the sandbox's start.
/// The binds that make the run's output directory `dir` its command's own
/// (R4-7): `.cubby` pinned (it cannot be renamed away and made again),
/// `dir` bound writable, then `.cubby/output` read-only — bound after, with
/// `MS_REC`, so that it carries `dir`'s writable bind within it and every
/// other run's directory stays read-only to this command. Nothing is added
/// where a read-only protected path already covers `dir` (its whole tree
/// is read-only then); a protected path beside it (a skills directory in
/// `.cubby`) keeps its own bind, which these recursive binds carry along.
fn output_binds(protect: &mut Vec<(String, bool)>, dir: &WorkspacePath) {
    let Some(first) = dir
        .components()
        .next()
        .map(|c| c.to_string_lossy().into_owned())
    else {
        return;
    };
    let shown = |p: &WorkspacePath| p.as_path().to_string_lossy().into_owned();
    let at = shown(dir);
    if protect
        .iter()
        .any(|(p, writable)| !writable && (*p == at || at.starts_with(&format!("{p}/"))))
    {
        return;
    }
    let parent = dir.parent();
    if parent.is_root() {
        return;
    }
    if parent.parent() != WorkspacePath::root() && !protect.iter().any(|(p, _)| *p == first) {
        protect.push((first, true));
    }
    protect.push((shown(dir), true));
    protect.push((shown(&parent), false));
}

/// What a `host_private_dirs` entry may not hold: the sandbox's own
/// directories and the system's, which commands need.
const NOT_PRIVATE: [&str; 10] = [
    "/tmp", "/dev", "/proc", "/sys", "/run", "/var/run", "/usr", "/etc", "/bin", "/lib",
];

/// Refuses a writable or readable root that lies in the workspace or in
/// a writable root (another one, for a writable root): the model's
/// commands can rename or swap the entries on its path there, between the
/// checks of the open and the holder's bind — a race a pass won (red-team
/// pass 14, R1: a directory exchanged with a link in a loop while another
/// session opened). Such a root adds nothing: commands already write (and
/// read) the place around it. A workspace inside a writable root is
/// guarded by its identity instead (`Rebind::identity`). Each root is
/// checked under every name its mounts give it ([`NamedRoot`]), and one
/// that reaches the workspace, or a directory above it, under another name
/// is refused: the workspace's protected paths are bound over under their
/// own names only.
fn roots_out_of_reach(root: &Path, writable: &[NamedRoot], readable: &[NamedRoot]) -> Result<()> {
    let kinds = writable
        .iter()
        .map(|r| ("writable", r))
        .chain(readable.iter().map(|r| ("readable", r)));
    for (what, dir) in kinds {
        // Under another name, the workspace itself or a directory above it
        // is no better: its protected paths are bound over under their own
        // names only.
        let aliased = dir.name != dir.root && root.starts_with(&dir.name);
        if aliased {
            return Err(Error::invalid_input(format!(
                "{what} root {} reaches the workspace `{}` under another name, where the \
                 workspace's protected paths are not covered; leave `{}` out",
                dir.shown(),
                root.display(),
                dir.root.display()
            )));
        }
        let workspace = (dir.name.starts_with(root) && dir.name != root)
            .then(|| ("the workspace".to_string(), format!("`{}`", root.display())));
        let around = workspace.or_else(|| {
            writable
                .iter()
                .find(|w| w.root != dir.root && dir.name.starts_with(&w.name) && dir.name != w.name)
                .map(|w| ("the writable root".to_string(), w.shown()))
        });
        if let Some((name, place)) = around {
            return Err(Error::invalid_input(format!(
                "{what} root {} lies in {name} {place}, whose entries commands can move and \
                 swap for links: cubby cannot hold it to one directory. Commands already \
                 write and read there; leave `{}` out",
                dir.shown(),
                dir.root.display()
            )));
        }
    }
    Ok(())
}

/// A writable or readable root under one of its names: its own, or one a
/// bind mount gives it or something beneath it ([`crate::mounts`]).
#[derive(Debug)]
struct NamedRoot {
    /// The root as configured (canonical).
    root: PathBuf,
    /// The name checked.
    name: PathBuf,
}

impl NamedRoot {
    /// The root for a message, with the name checked when it is another.
    fn shown(&self) -> String {
        if self.name == self.root {
            format!("`{}`", self.root.display())
        } else {
            format!(
                "`{}` (reached as `{}` too, through a mount)",
                self.root.display(),
                self.name.display()
            )
        }
    }
}

/// Every root under each of its names, its own first.
fn named_roots(table: &crate::mounts::MountTable, roots: &[PathBuf]) -> Vec<NamedRoot> {
    roots
        .iter()
        .flat_map(|root| {
            table.aliases(root).into_iter().map(|name| NamedRoot {
                root: root.clone(),
                name,
            })
        })
        .collect()
}

/// Refuses a writable root that holds (or lies in) a piece of git's
/// surface outside the workspace ([`crate::git::Surface::reached_by`]): a
/// linked worktree's git directory or common directory, a `.git` git
/// would find above the workspace, a config file git reads, a
/// `core.hooksPath` directory, a program config names; and one that holds
/// a directory on `PATH` or a git's own system config
/// ([`crate::git::host_program_places`]). Git directories inside the
/// workspace are protected path by path; these are not, and the host
/// would run what a command wrote there. While config names a place cubby
/// cannot resolve, every writable root is refused.
fn git_out_of_reach(
    surface: &crate::git::Surface,
    host: &HostEnv,
    writable: &[NamedRoot],
) -> Result<()> {
    if writable.is_empty() {
        return Ok(());
    }
    if let Some(value) = surface.unresolved.first() {
        return Err(Error::invalid_input(format!(
            "git's config names `{value}`, a place cubby cannot resolve (`~user/` of an \
             unknown user, `%(prefix)/`), so it cannot tell whether a writable root holds it; \
             spell it as an absolute path, or leave writable_roots out"
        )));
    }
    let programs = crate::git::host_program_places(host);
    for dir in writable {
        if let Some(piece) = surface.reached_by(&dir.name) {
            return Err(Error::invalid_input(format!(
                "writable root {} would let commands change `{}`, which the host's git reads \
                 or runs for this workspace (a git directory, a `.git` it would find, a config \
                 file, a hooks directory, a program its config names); leave it out. To commit \
                 from a linked worktree, run git on the host",
                dir.shown(),
                piece.display()
            )));
        }
        if let Some(place) = programs.iter().find(|p| p.starts_with(&dir.name)) {
            return Err(Error::invalid_input(format!(
                "writable root {} holds `{}`, where the host finds the programs it runs \
                 (a directory on PATH, or a git's own system config): a command could plant \
                 one there; leave it out",
                dir.shown(),
                place.display()
            )));
        }
    }
    Ok(())
}

/// Refuses a writable or readable root whose path passes through a
/// symbolic link (`abs` is the configured path made absolute, `canonical`
/// where it leads). A link in the workspace or in another writable root is
/// the model's to make: `writable_roots = ["a/b"]` with `a` replaced by a
/// link to `/` made the next sandbox's commands write anywhere (red-team
/// pass 13, Q1). The operator gives the real path.
fn plain_root(what: &str, configured: &Path, abs: &Path, canonical: &Path) -> Result<()> {
    if crate::git::lexical(abs) == canonical {
        return Ok(());
    }
    Err(Error::invalid_input(format!(
        "{what} root `{}` passes through a symbolic link (it leads to `{}`); a link there could \
         be swapped for another, so cubby does not follow it: give the real path, `{}`, if that \
         is the directory meant, and look at who made the link",
        configured.display(),
        canonical.display(),
        canonical.display()
    )))
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
            let missing = probe::quick_check();
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
        let gateways = if options.mode == Mode::FullAccess {
            None
        } else {
            Gateways::new(&options.gateways)?.map(Arc::new)
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
            plain_root("writable", w, &abs, &canonical)?;
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
            plain_root("readable", &r, &abs, &canonical)?;
            readable_roots.push(canonical);
        }
        // Each root checked under every name the mounts give it, its own
        // and those of what is mounted beneath it: a bind mount is another
        // name for the same directory (red-team pass 17, 9).
        let (writable_named, readable_named) =
            if writable_roots.is_empty() && readable_roots.is_empty() {
                (Vec::new(), Vec::new())
            } else {
                let table = crate::mounts::MountTable::read().map_err(|e| {
                    start_error(format!(
                        "cannot read the mount table to check the roots: {e}"
                    ))
                })?;
                (
                    named_roots(&table, &writable_roots),
                    named_roots(&table, &readable_roots),
                )
            };
        roots_out_of_reach(fs.root_path(), &writable_named, &readable_named)?;
        // A masked path in a writable root: a command renames a directory
        // above it, and the next session masks the old name only (red-team
        // pass 15, S3).
        // By name and by where the name leads.
        if let Some((hidden, w)) = host_deny_read.iter().find_map(|h| {
            let real = crate::git::canonical(h);
            writable_named
                .iter()
                .find(|w| h.starts_with(&w.name) || real.starts_with(&w.name))
                .map(|w| (h, w))
        }) {
            return Err(Error::invalid_input(format!(
                "host_deny_read entry `{}` lies in the writable root {}, where commands can \
                 rename the directories above it and so move it out from under its mask; \
                 keep the two apart",
                hidden.display(),
                w.shown()
            )));
        }
        if options.mode != Mode::FullAccess {
            let workspace = NamedRoot {
                root: fs.root_path().to_path_buf(),
                name: fs.root_path().to_path_buf(),
            };
            let roots = std::iter::once(("the workspace", &workspace))
                .chain(writable_named.iter().map(|w| ("writable root", w)))
                .chain(readable_named.iter().map(|r| ("readable root", r)));
            for w in &writable_named {
                if let Some(watched) = stores.watched_within(&w.name) {
                    return Err(Error::new(
                        ErrorKind::InvalidInput,
                        format!(
                            "writable root {} holds (or is) `{}`, a directory where cubby looks for \
                             credential stores by name: commands could rename it or make it \
                             anew and so move the stores out from under their masks. Name the \
                             directory the tool needs instead (`~/.cache/pip`, \
                             `~/.cargo/registry`), not a home or one holding a store's directory",
                            w.shown(),
                            watched.display()
                        ),
                    ));
                }
            }
            for (what, dir) in roots {
                if let Some(store) = stores.covering(&dir.name) {
                    return Err(Error::new(
                        ErrorKind::Unsupported,
                        format!(
                            "{what} {} lies in `{}`, a credential store that commands may not \
                             read (SPEC §4); choose a directory outside it",
                            dir.shown(),
                            store.display()
                        ),
                    ));
                }
            }
        }
        // Git's surface outside the workspace (a linked worktree's git
        // directories, the user's config files, a hooks directory) within a
        // writable root: the host's git would run what commands write there
        // (red-team pass 15, S2).
        let git_read = git_read
            .filter(|r| r.fresh_for(fs.root_path()).is_some())
            .unwrap_or_else(|| crate::git::SurfaceRead::now(fs.root_path(), &options.host));
        if options.mode != Mode::FullAccess {
            git_out_of_reach(git_read.surface(), &options.host, &writable_named)?;
        }
        let read_roots = match options.read_scope {
            ReadScope::Host => Vec::new(),
            ReadScope::System => {
                let mut roots = stores.system_scope(&options.host);
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
        let layer_roots = std::iter::once(fs.root_path().to_path_buf())
            .chain(writable_roots.iter().cloned())
            .chain(readable_roots.iter().cloned())
            .collect();
        let reservations = Reservations::shared(fs.clone());
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
            gateways,
            git_at_open: Mutex::new(None),
            stores,
            read_roots,
            layer_roots,
            enforced,
        };
        if sandbox.options.mode != Mode::FullAccess {
            // Refused at the open rather than at the first command.
            sandbox.private_dirs()?;
        }
        sandbox.sweep_placeholders(Some(git_read));
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
        reserve::empty_stashes();
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

    /// Starts a command in the sandbox with stdio inherited from this
    /// process (for `cubby exec`): its init is made the terminal's
    /// foreground job; its exit status is the command's.
    ///
    /// # Errors
    ///
    /// As for [`Sandbox::exec`].
    fn spawn_inherited(&self, spec: &ExecSpec) -> Result<InheritedChild> {
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
        let (child, lease) = self.start_command(spec, stdio, true)?;
        Ok(InheritedChild {
            child,
            _lease: lease,
        })
    }

    fn live(&self) -> Result<Arc<Live>> {
        self.live_with(|_| ()).map(|(live, (), _)| live)
    }

    /// The live sandbox, started if need be, the result of `overlap`,
    /// which runs while a new holder sets its namespaces up (told whether
    /// one does), and whether the holder was started just now (then it
    /// masked the credential stores there are: the command that started it
    /// need not look again).
    fn live_with<T>(&self, overlap: impl FnOnce(bool) -> T) -> Result<(Arc<Live>, T, bool)> {
        let mut guard = lock(&self.live);
        if let Some(live) = guard.as_ref() {
            let live = live.clone();
            drop(guard);
            return Ok((live, overlap(false), false));
        }
        let (live, out) = self.start_holder(overlap)?;
        let live = Arc::new(live);
        *guard = Some(live.clone());
        Ok((live, out, true))
    }

    /// Starts the holder: the facts read from the machine, the plan made
    /// from them (pure: `plan.rs`), then the holder spawned with it. While
    /// the holder sets up, the Landlock base is compiled and `overlap`
    /// runs; then the holder's own directories finish the ruleset, which
    /// goes to the holder, and are opened for the store layer.
    fn start_holder<T>(&self, overlap: impl FnOnce(bool) -> T) -> Result<(Live, T)> {
        let root = self.fs.root_path();
        let fork_ahead = self.fork_ahead.load(Ordering::Relaxed);
        let inputs = plan::Inputs {
            root,
            root_identity: self.fs.root_id(),
            writable_roots: &self.writable_roots,
            read_roots: &self.read_roots,
            options: &self.options,
            fork_ahead,
            proxy_listener: self.egress.is_some(),
            gateway_listeners: self.gateways.as_ref().map_or(0, |g| g.len()),
        };
        let mut plan = plan::plan(&inputs, &self.holder_facts()?)?;
        let landlock_rules = std::mem::take(&mut plan.landlock);
        let private_tmp = plan.private_tmp;
        let cgroup = match plan.processes {
            ProcessBound::Cgroup => cgroup::make_cgroup(self.options.limits.processes),
            ProcessBound::PidMax | ProcessBound::None => None,
        };
        let spawned = self.spawn_holder(plan, cgroup.as_deref(), &landlock_rules, overlap);
        let (ready, out) = match spawned {
            Ok(ready) => ready,
            Err(e) => {
                if let Some(dir) = &cgroup {
                    let _ = std::fs::remove_dir(dir);
                }
                return Err(e);
            }
        };
        let live = Live {
            holder: Mutex::new(ready.holder),
            sock: ready.sock,
            send: Mutex::new(()),
            next_id: AtomicU64::new(1),
            cgroup,
            private_tmp,
            _proxy: ready.proxy,
            _gateways: ready.gateways,
            extra_env: ready.extra_env,
            store_dirs: ready.store_dirs,
        };
        let setup = Msg {
            kind: MSG_LANDLOCK,
            arg: 0,
            id: 0,
            len: 0,
        };
        wire::send(&live.sock, &live.send, setup, &[ready.landlock.as_fd()])?;
        Ok((live, out))
    }

    /// Spawns the holder of `plan` and waits until it is ready; returns it
    /// (with the server's end of its socket, the egress proxy and its
    /// variables, the finished Landlock ruleset and the store layer's
    /// holder directories) and the result of `overlap`.
    fn spawn_holder<T>(
        &self,
        plan: plan::Plan,
        cgroup: Option<&Path>,
        landlock_rules: &plan::LandlockRules,
        overlap: impl FnOnce(bool) -> T,
    ) -> Result<(HolderReady, T)> {
        let (sock, holder_sock) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .map_err(start_error)?;
        let (report_r, report_w) = pipe_with(PipeFlags::CLOEXEC).map_err(start_error)?;
        let holder_plan = Arc::new(HolderPlan::new(
            plan,
            cgroup,
            holder_sock.as_raw_fd(),
            report_w.as_raw_fd(),
        )?);
        let mut cmd = Command::new("/");
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        holder::run_as_holder(&mut cmd, holder_plan);
        // Returns as soon as the holder has forked (it closes std's pipe
        // first); its readiness comes on the report pipe.
        let spawned = cmd.spawn();
        drop(cmd);
        drop(holder_sock);
        drop(report_w);
        let base = landlock::base(landlock_rules);
        let out = overlap(true);
        let mut report = [0u8; wire::REPORT_BYTES];
        let n = rustix::io::read(&report_r, &mut report).unwrap_or(0);
        let ready = (|| {
            let holder = match spawned {
                Ok(child) if n == 0 => child,
                Ok(mut child) => {
                    let _ = child.wait();
                    return Err(wire::holder_error(&report, n));
                }
                Err(e) if n > 0 => {
                    let _ = e;
                    return Err(wire::holder_error(&report, n));
                }
                Err(e) => return Err(start_error(e)),
            };
            let (proxy, mut extra_env) = match &self.egress {
                Some(egress) => {
                    let listener = wire::recv_listener(&sock)?;
                    let proxy = EgressProxy::start(listener, egress.clone())?;
                    let env = egress.command_env(proxy.port());
                    (Some(proxy), env)
                }
                None => (None, Vec::new()),
            };
            let gateways = match &self.gateways {
                Some(gateways) => {
                    let listeners = (0..gateways.len())
                        .map(|_| wire::recv_listener(&sock))
                        .collect::<Result<Vec<_>>>()?;
                    let servers = gateways.serve(listeners)?;
                    extra_env.extend(servers.env().iter().cloned());
                    Some(servers)
                }
                None => None,
            };
            let holder_root = landlock::holder_root(holder.id());
            let landlock = landlock::finish(base?, landlock_rules, &holder_root)?;
            let store_dirs =
                landlock::holder_dirs(&landlock_rules.store_holder_read, &holder_root)?;
            Ok((holder, proxy, gateways, extra_env, landlock, store_dirs))
        })();
        match ready {
            Ok((holder, proxy, gateways, extra_env, landlock, store_dirs)) => Ok((
                HolderReady {
                    holder,
                    sock,
                    proxy,
                    gateways,
                    extra_env,
                    landlock,
                    store_dirs,
                },
                out,
            )),
            Err(e) => {
                // Ends the holder.
                let _ = rustix::net::shutdown(&sock, rustix::net::Shutdown::Both);
                Err(e)
            }
        }
    }

    /// What the plan depends on, read now: the machine's facts, the
    /// `deny_read` paths there are and the credential stores there are.
    fn holder_facts(&self) -> Result<Facts> {
        let dirs: Vec<&Path> = std::iter::once(self.fs.root_path())
            .chain(self.writable_roots.iter().map(PathBuf::as_path))
            .collect();
        let mut facts = probe::machine_facts(&dirs);
        // Covered as the run directories are, the roots beneath bound back.
        facts.run_dirs.extend(self.private_dirs()?);
        for path in &self.options.deny_read {
            if self.deny_read_exists(path)? {
                facts.deny_read_present.push(path.clone());
            }
        }
        // The credential stores there are now; each command's init masks
        // those that appear later (`mask_plan`).
        facts.stores = self.stores.current();
        Ok(facts)
    }

    /// The `host_private_dirs` to cover now: canonical, existing
    /// directories, outermost first, without those hidden already (in the
    /// private `/tmp`, in a run directory or another private directory) and
    /// those of the sandbox's own (the workspace, a writable root, or one
    /// beneath them).
    ///
    /// # Errors
    ///
    /// `unsupported` for one that holds a directory commands need
    /// ([`NOT_PRIVATE`]), or a path that is not absolute.
    fn private_dirs(&self) -> Result<Vec<PathBuf>> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        for entry in &self.options.host_private_dirs {
            let path = read_view::expand_home(entry, &self.options.host);
            if !path.is_absolute() {
                return Err(start_error(format!(
                    "host_private_dirs entry `{}` must be an absolute path or start with `~/`",
                    entry.display()
                )));
            }
            let Ok(dir) = std::fs::canonicalize(&path) else {
                continue;
            };
            if !dir.is_dir() {
                continue;
            }
            let own = std::iter::once(self.fs.root_path())
                .chain(self.writable_roots.iter().map(PathBuf::as_path))
                .any(|r| dir.starts_with(r));
            // In (or being) the private `/tmp` or a run directory: covered
            // by the sandbox's own already.
            let hidden = (dir.starts_with(plan::SANDBOX_TMP)
                && self.fs.root_path() != Path::new(plan::SANDBOX_TMP))
                || plan::RUN_DIRS.iter().any(|r| dir.starts_with(r));
            if own || hidden {
                continue;
            }
            if let Some(held) = NOT_PRIVATE.iter().find(|p| Path::new(p).starts_with(&dir)) {
                return Err(start_error(format!(
                    "host_private_dirs entry `{}` holds {held}, which commands need; name the \
                     directory the sandboxes' workspaces are made in",
                    entry.display()
                )));
            }
            dirs.push(dir);
        }
        dirs.sort_by_key(|d| d.components().count());
        let mut out: Vec<PathBuf> = Vec::with_capacity(dirs.len());
        for dir in dirs {
            if !out.iter().any(|o| dir.starts_with(o)) {
                out.push(dir);
            }
        }
        Ok(out)
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
    /// Also returns the look at the stores (`None` with `fresh_holder`),
    /// whose `stat`s the store layer's check uses again.
    fn mask_plan(&self, fresh_holder: bool) -> Result<(Vec<Vec<u8>>, Option<read_view::Looked>)> {
        let mut plan = Vec::new();
        for path in &self.options.deny_read {
            if self.deny_read_exists(path)? {
                plan.push(wire::mask_entry(ENTRY_DENY_READ, path.as_path()));
            }
        }
        let (stores, looked) = if fresh_holder {
            (Vec::new(), None)
        } else {
            let (stores, looked) = self.stores.current_looked();
            (stores, Some(looked))
        };
        for store in stores {
            plan.push(wire::mask_entry(ENTRY_STORE, &store));
        }
        Ok((plan, looked))
    }

    /// Asks the holder to start `spec` with `stdio` (stdin, stdout,
    /// stderr); returns the command and the lease on what it holds.
    /// `attached`: the command of `cubby exec`.
    fn start_command(
        &self,
        spec: &ExecSpec,
        stdio: [OwnedFd; 3],
        attached: bool,
    ) -> Result<(client::SandboxChild, Lease)> {
        let Some(program) = spec.argv.first() else {
            return Err(Error::invalid_input("empty command"));
        };
        // Confined check of the working directory, for a clear error.
        drop(self.fs.open_dir(&spec.cwd)?);
        // A new holder sets up while the protected paths are planned; the
        // store layer is listed meanwhile on a thread of its own, from
        // before the holder's facts are read (`cubby exec` and a
        // sandbox's first command: its longest step after the
        // placeholders, which it overlaps on a second core).
        let starting = lock(&self.live).is_none();
        let (live, plan, fresh_holder, draft) = std::thread::scope(|scope| {
            let early = starting
                .then(|| {
                    std::thread::Builder::new()
                        .name("cubby-store-layer".into())
                        .spawn_scoped(scope, || self.stores.draft_layer(&self.layer_roots))
                        .ok()
                })
                .flatten();
            let started = self.live_with(|_| self.protect_plan());
            let draft =
                match early {
                    Some(thread) => Some(thread.join().unwrap_or_else(|_| {
                        Err(Error::internal("the store layer's thread panicked"))
                    })),
                    // No thread to be had: listed here, as the holder is new.
                    None => started
                        .as_ref()
                        .is_ok_and(|(_, _, fresh)| *fresh && starting)
                        .then(|| self.stores.draft_layer(&self.layer_roots)),
                };
            started.map(|(live, plan, fresh)| (live, plan, fresh, draft))
        })?;
        let (mut protect, lease) = plan?;
        if let Some(dir) = &spec.output_dir {
            output_binds(&mut protect, dir);
        }
        let draft = draft.transpose()?;
        let (masks, looked) = self.mask_plan(fresh_holder)?;
        let store_layer =
            self.stores
                .layer(draft, &self.layer_roots, &live.store_dirs, looked.as_ref())?;
        let cwd: &[u8] = if spec.cwd.is_root() {
            b""
        } else {
            spec.cwd.as_path().as_os_str().as_bytes()
        };
        let env = Self::command_env(spec, &live);
        // Placeholder directories are covered by the holder's read-only
        // placeholder object: one bind each.
        let placeholders: Vec<String> = lease
            .reserved
            .iter()
            .filter(|(p, _)| reserve::Kind::for_path(p) == reserve::Kind::Dir)
            .map(|(p, _)| p.as_path().to_string_lossy().into_owned())
            .collect();
        let payload = wire::encode_run(cwd, &protect, &placeholders, &masks, &spec.argv, &env)?;
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
        let request = Msg {
            kind: MSG_RUN,
            arg: 0,
            id,
            len: payload.len() as u64,
        };
        let fds = [
            memfd.as_fd(),
            stdio[0].as_fd(),
            stdio[1].as_fd(),
            stdio[2].as_fd(),
            store_layer.as_fd(),
            theirs.as_fd(),
        ];
        wire::send(&live.sock, &live.send, request, &fds)?;
        drop(stdio);
        drop(theirs);
        client::await_start(live, chan, program, lease, attached)
    }

    /// The command's environment: the spec's, then `TMPDIR` and the
    /// proxy's variables; nothing of this process's environment (SPEC §4).
    fn command_env(spec: &ExecSpec, live: &Live) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
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
        env
    }
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
        let (child, lease) = self.start_command(spec, [stdin_r, out_w, err_w], false)?;
        Ok(Spawned::from_pipes(
            Box::new(child),
            out_r,
            stdin_w,
            Some(Box::new(move || drop(lease))),
        ))
    }

    fn exec_attached(&self, spec: &ExecSpec) -> Result<Box<dyn ProcessHandle>> {
        if self.options.mode == Mode::FullAccess {
            // Unconfined: as the `local` provider runs it (its handle).
            return self.host.exec_attached(spec);
        }
        Ok(Box::new(self.spawn_inherited(spec)?))
    }

    fn command_path(&self, path: &WorkspacePath) -> Option<std::path::PathBuf> {
        // The root is bound at its own path in the sandbox.
        self.host.command_path(path)
    }

    fn show_cwd(&self, cwd: &WorkspacePath) -> String {
        self.host.show_cwd(cwd)
    }

    fn gateway_run(&self) -> Result<Option<GatewayRun>> {
        self.gateways.as_ref().map(|g| g.open_run()).transpose()
    }

    fn gateway_events(&self) -> Vec<crate::net::GatewayEvent> {
        self.gateways.as_ref().map_or_else(Vec::new, |g| g.events())
    }
}
