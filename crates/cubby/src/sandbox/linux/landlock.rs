//! Landlock for the `linux` provider, in three layers.
//!
//! 1. **The sandbox's ruleset**, compiled once per sandbox by the server
//!    from the plan's [`LandlockRules`] with the `landlock` crate: the base
//!    ([`base`]: the whole file system readable and executable, the root
//!    and writable roots writable, a few devices) while the holder sets up,
//!    then [`finish`]ed with the holder's private `/tmp`, `/dev/shm` and
//!    `/dev/pts`, reached through `/proc/<holder>/root`. Its fd goes to the
//!    holder (`MSG_LANDLOCK`) and every command restricts itself with it.
//! 2. **The store layer** (see `read_view.rs`), in every scope: built by
//!    the server on the host's tree ([`StoreLayerBuilder`]: the directories
//!    on the way to a credential store listable only, their other entries
//!    readable), with the holder's `/dev` and private `/tmp`; each command's
//!    last steps add their own `/proc` to it and restrict themselves with it
//!    ([`restrict_store_layer`], raw syscalls).
//! 3. **The read layer** of `read_scope = "system"`, fork-side: the holder
//!    opens what commands may read in its own view ([`ReadRules::open`]),
//!    and each command's last steps add a second ruleset granting reads
//!    beneath those and the command's own `/proc` only
//!    ([`ReadRules::restrict`], raw syscalls: nothing may allocate there).

#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering::Relaxed};

use ::landlock::{
    ABI, Access, AccessFs, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreated,
    RulesetCreatedAttr, Scope,
};

use super::holder::MAX_READ_RULES;
use super::plan::LandlockRules;
use super::start_error;
use super::syscalls::{self, errno};
use crate::error::{Error, Result};

/// The Landlock ABI the sandbox's ruleset is written for (best effort
/// below it, as the `landlock` crate does).
const LANDLOCK_ABI: ABI = ABI::V6;

/// An `O_PATH` fd for a Landlock rule.
fn landlock_path(path: &Path) -> Result<PathFd> {
    PathFd::new(path).map_err(|e| start_error(format!("Landlock: {}: {e}", path.display())))
}

/// A Landlock error, as a start error.
fn ll(e: &dyn std::fmt::Display) -> Error {
    start_error(format!("Landlock: {e}"))
}

/// The rules that do not depend on the holder: everything readable
/// (`rules.read`), `rules.writable` writable, `rules.devices` usable as
/// files.
///
/// # Errors
///
/// `unsupported` when a rule's path cannot be opened or the kernel refuses.
pub(super) fn base(rules: &LandlockRules) -> Result<RulesetCreated> {
    let abi = LANDLOCK_ABI;
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .map_err(|e| ll(&e))?
        .scope(Scope::Signal | Scope::AbstractUnixSocket)
        .map_err(|e| ll(&e))?
        .create()
        .map_err(|e| ll(&e))?;
    for dir in &rules.read {
        ruleset = ruleset
            .add_rule(PathBeneath::new(
                landlock_path(dir)?,
                AccessFs::from_read(abi),
            ))
            .map_err(|e| ll(&e))?;
    }
    for dir in &rules.writable {
        ruleset = ruleset
            .add_rule(PathBeneath::new(
                landlock_path(dir)?,
                AccessFs::from_all(abi),
            ))
            .map_err(|e| ll(&e))?;
    }
    for dev in &rules.devices {
        ruleset = ruleset
            .add_rule(PathBeneath::new(
                landlock_path(dev)?,
                AccessFs::from_file(abi),
            ))
            .map_err(|e| ll(&e))?;
    }
    Ok(ruleset)
}

/// The whole ruleset (as an fd each command restricts itself with): the
/// base and the holder's own directories of `rules` (relative to its root),
/// reached through `holder_root` (`/proc/<holder>/root`) once the holder is
/// ready.
///
/// # Errors
///
/// `unsupported` when a path cannot be opened or Landlock is not enabled.
pub(super) fn finish(
    mut ruleset: RulesetCreated,
    rules: &LandlockRules,
    holder_root: &Path,
) -> Result<OwnedFd> {
    for dir in &rules.holder_writable {
        ruleset = ruleset
            .add_rule(PathBeneath::new(
                landlock_path(&holder_root.join(dir))?,
                AccessFs::from_all(LANDLOCK_ABI),
            ))
            .map_err(|e| ll(&e))?;
    }
    // The sandbox's own pseudo-terminals: opened, read, written and set up
    // (`ioctl`) in every mode, as `/dev/null` is.
    for dir in &rules.holder_devices {
        ruleset = ruleset
            .add_rule(PathBeneath::new(
                landlock_path(&holder_root.join(dir))?,
                AccessFs::from_file(LANDLOCK_ABI),
            ))
            .map_err(|e| ll(&e))?;
    }
    let fd: Option<OwnedFd> = ruleset.into();
    fd.ok_or_else(|| start_error("Landlock is not enabled in this kernel"))
}

/// Where the server reaches the holder's root (for [`finish`]).
pub(super) fn holder_root(pid: u32) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/root"))
}

/// What the store layer grants one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StoreGrant {
    /// A directory on the way to a store: listed only (beneath it too).
    List,
    /// A directory: read and executed beneath it.
    ReadDir,
    /// A file that is not a directory: read and executed.
    ReadFile,
}

/// The store layer as it is built (see the module doc): a rule per grant,
/// then [`StoreLayerBuilder::finish`]ed with the holder's directories. Raw
/// syscalls, as the fork side's: a build adds a few hundred rules, and the
/// `landlock` crate `fstat`s the fd of each (about a third of the build's
/// time, measured).
pub(super) struct StoreLayerBuilder {
    ruleset: OwnedFd,
    /// Whether it handles `REFER` (ABI 2 on).
    refer: bool,
}

impl StoreLayerBuilder {
    /// An empty store layer. It handles reading and executing, and `REFER`
    /// where the kernel has it (below, every layer refuses renames and
    /// links across directories anyway), since a layer refuses those
    /// unless it handles and grants `REFER`.
    ///
    /// # Errors
    ///
    /// `unsupported` when Landlock is not enabled or the kernel refuses.
    pub(super) fn new() -> Result<StoreLayerBuilder> {
        let abi = landlock_abi();
        if abi < 1 {
            return Err(start_error("Landlock is not enabled in this kernel"));
        }
        let refer = abi >= LL_REFER_ABI;
        let attr = LandlockRulesetAttr {
            handled_access_fs: LL_READ | if refer { LL_REFER } else { 0 },
        };
        // SAFETY: `attr` has the kernel's layout for the size given.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const LandlockRulesetAttr,
                std::mem::size_of::<LandlockRulesetAttr>(),
                0u32,
            )
        };
        if fd < 0 {
            return Err(ll(&std::io::Error::last_os_error()));
        }
        // SAFETY: the kernel made this fd just now; nothing else owns it.
        let ruleset = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as RawFd) };
        Ok(StoreLayerBuilder { ruleset, refer })
    }

    /// Adds `grant` on `fd` (an `O_PATH` fd).
    ///
    /// # Errors
    ///
    /// `unsupported` when the kernel refuses.
    pub(super) fn grant(&mut self, fd: BorrowedFd<'_>, grant: StoreGrant) -> Result<()> {
        let allowed_access = match grant {
            StoreGrant::List => LL_READ_DIR,
            StoreGrant::ReadDir => LL_READ | if self.refer { LL_REFER } else { 0 },
            StoreGrant::ReadFile => LL_EXECUTE | LL_READ_FILE,
        };
        let rule = LandlockPathBeneath {
            allowed_access,
            parent_fd: fd.as_raw_fd(),
        };
        // SAFETY: `rule` has the kernel's (packed) layout; both fds are
        // open for the call.
        let added = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                self.ruleset.as_raw_fd(),
                LL_RULE_PATH_BENEATH,
                &rule as *const LandlockPathBeneath,
                0u32,
            )
        };
        if added != 0 {
            return Err(ll(&std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// The finished layer, as the fd each command restricts itself with:
    /// `holder_dirs` (the holder's own directories, opened through
    /// `/proc/<holder>/root` when it started; Landlock does not look at the
    /// directories a mount hides, so the sandbox's own mounts need rules of
    /// their own) readable too.
    ///
    /// # Errors
    ///
    /// `unsupported` when the kernel refuses.
    pub(super) fn finish(mut self, holder_dirs: &[OwnedFd]) -> Result<OwnedFd> {
        for dir in holder_dirs {
            self.grant(dir.as_fd(), StoreGrant::ReadDir)?;
        }
        Ok(self.ruleset)
    }
}

/// The kernel's Landlock ABI (0 or less: none).
fn landlock_abi() -> libc::c_long {
    // SAFETY: with a null attribute, a size of 0 and the version flag,
    // landlock_create_ruleset only answers the ABI.
    unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<LandlockRulesetAttr>(),
            0usize,
            LL_CREATE_RULESET_VERSION,
        )
    }
}

/// `O_PATH` fds of the holder's `dirs` (relative to its root), reached
/// through `holder_root` while it can still be (see [`finish`]): what the
/// store layer grants of the sandbox's own mounts, kept for each time it is
/// built.
///
/// # Errors
///
/// `unsupported` when one cannot be opened.
pub(super) fn holder_dirs(dirs: &[PathBuf], holder_root: &Path) -> Result<Vec<OwnedFd>> {
    dirs.iter()
        .map(|dir| {
            let path = holder_root.join(dir);
            rustix::fs::open(
                &path,
                rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(|e| start_error(format!("Landlock: {}: {e}", path.display())))
        })
        .collect()
}

/// The store layer, fork-side: the command's own `/proc` added to `layer`
/// (a mount of its own, which no rule the server made can name), then the
/// command restricted by it; 0, or the errno. The command's last steps
/// only, after `PR_SET_NO_NEW_PRIVS`. Each command adds one rule to the
/// shared ruleset; the server builds it anew after
/// `read_view::MAX_LAYER_USES` commands, so that they do not pile up.
pub(super) fn restrict_store_layer(layer: RawFd) -> i32 {
    let proc_fd = syscalls::open(c"/proc", libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC);
    if proc_fd < 0 {
        return errno();
    }
    let rule = LandlockPathBeneath {
        allowed_access: LL_EXECUTE | LL_READ_FILE | LL_READ_DIR,
        parent_fd: proc_fd,
    };
    // SAFETY: `rule` has the kernel's (packed) layout; `layer` is the
    // ruleset fd the request carried.
    let added = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            layer,
            LL_RULE_PATH_BENEATH,
            &rule as *const LandlockPathBeneath,
            0u32,
        )
    };
    let mut result = if added != 0 { errno() } else { 0 };
    // SAFETY: opened above, closed once.
    unsafe { libc::close(proc_fd) };
    if result == 0 {
        // SAFETY: landlock_restrict_self takes an fd and flags.
        if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, layer, 0u32) } != 0 {
            result = errno();
        }
    }
    result
}

/// Landlock's file access rights (`linux/landlock.h`) the read layer
/// handles.
const LL_EXECUTE: u64 = 1 << 0;
const LL_READ_FILE: u64 = 1 << 2;
const LL_READ_DIR: u64 = 1 << 3;
/// Reading and executing: what the read and store layers handle.
const LL_READ: u64 = LL_EXECUTE | LL_READ_FILE | LL_READ_DIR;
/// `LANDLOCK_ACCESS_FS_REFER` (ABI 2): renames and links across
/// directories, which a layer that does not handle it refuses (`EXDEV`).
const LL_REFER: u64 = 1 << 13;
/// The first ABI with [`LL_REFER`].
const LL_REFER_ABI: libc::c_long = 2;
/// `LANDLOCK_CREATE_RULESET_VERSION`: `landlock_create_ruleset` answers
/// the ABI.
const LL_CREATE_RULESET_VERSION: u32 = 1;
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

/// With `read_scope = "system"`: the holder's `O_PATH` fds of what commands
/// read, how many, and which are not directories (bit `i` for fd `i`). Set
/// by the holder before it serves; its inits and commands (copies of its
/// memory) read them.
pub(super) struct ReadRules {
    fds: [AtomicI32; MAX_READ_RULES],
    count: AtomicUsize,
    files: AtomicU64,
    /// Whether commands get the read layer at all.
    system_scope: AtomicBool,
    /// Whether the kernel has `REFER` (the layer then handles and grants
    /// it, so that renames across the directories it grants work).
    refer: AtomicBool,
}

/// The holder's read rules (see [`ReadRules`]).
pub(super) static READ_RULES: ReadRules = ReadRules {
    fds: [const { AtomicI32::new(-1) }; MAX_READ_RULES],
    count: AtomicUsize::new(0),
    files: AtomicU64::new(0),
    system_scope: AtomicBool::new(false),
    refer: AtomicBool::new(false),
};

impl ReadRules {
    /// Opens each of `rules` (at most [`MAX_READ_RULES`]; a missing one is
    /// skipped), writes its fd into `keep` too (the holder keeps them open)
    /// and returns how many; `Err` (errno set) when one cannot be opened.
    /// The holder only, in its own view.
    #[inline]
    pub(super) fn open(&self, rules: &[CString], keep: &mut [RawFd]) -> Result<usize, ()> {
        let mut kept = 0;
        let mut files = 0u64;
        for rule in rules.iter().take(MAX_READ_RULES) {
            let fd = syscalls::open(rule, libc::O_PATH | libc::O_CLOEXEC);
            if fd < 0 {
                if errno() == libc::ENOENT {
                    continue;
                }
                return Err(());
            }
            // SAFETY: `stat` is plain data; all-zero is valid.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: `fd` was opened just now; `st` is a valid out-pointer.
            if unsafe { libc::fstat(fd, &mut st) } != 0 {
                return Err(());
            }
            if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                files |= 1 << kept;
            }
            self.fds[kept].store(fd, Relaxed);
            keep[kept] = fd;
            kept += 1;
        }
        self.files.store(files, Relaxed);
        self.count.store(kept, Relaxed);
        self.system_scope.store(!rules.is_empty(), Relaxed);
        self.refer.store(landlock_abi() >= LL_REFER_ABI, Relaxed);
        Ok(kept)
    }

    /// Whether commands get the read layer (`read_scope = "system"`).
    #[inline]
    pub(super) fn system_scope(&self) -> bool {
        self.system_scope.load(Relaxed)
    }

    /// The read layer: reads (and executes) beneath the holder's read rules
    /// and the command's own `/proc` only; 0, or the errno. The command's
    /// last steps only, after `PR_SET_NO_NEW_PRIVS`.
    #[inline]
    pub(super) fn restrict(&self) -> i32 {
        let read = LL_READ;
        let handled = if self.refer.load(Relaxed) {
            read | LL_REFER
        } else {
            read
        };
        let attr = LandlockRulesetAttr {
            handled_access_fs: handled,
        };
        // SAFETY: `attr` has the kernel's layout for the size given.
        let ruleset = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const LandlockRulesetAttr,
                std::mem::size_of::<LandlockRulesetAttr>(),
                0u32,
            )
        } as RawFd;
        if ruleset < 0 {
            return errno();
        }
        let proc_fd = syscalls::open(c"/proc", libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC);
        if proc_fd < 0 {
            let e = errno();
            // SAFETY: opened above, closed once.
            unsafe { libc::close(ruleset) };
            return e;
        }
        let files = self.files.load(Relaxed);
        let count = self.count.load(Relaxed);
        let mut result = 0;
        let held = self.fds.iter().take(count).enumerate().map(|(i, fd)| {
            let access = if files & (1 << i) != 0 {
                LL_EXECUTE | LL_READ_FILE
            } else {
                handled
            };
            (fd.load(Relaxed), access)
        });
        for (fd, access) in held.chain([(proc_fd, read)]) {
            let rule = LandlockPathBeneath {
                allowed_access: access,
                parent_fd: fd,
            };
            // SAFETY: `rule` has the kernel's (packed) layout; `ruleset` is
            // the fd made above.
            let added = unsafe {
                libc::syscall(
                    libc::SYS_landlock_add_rule,
                    ruleset,
                    LL_RULE_PATH_BENEATH,
                    &rule as *const LandlockPathBeneath,
                    0u32,
                )
            };
            if added != 0 {
                result = errno();
                break;
            }
        }
        if result == 0 {
            // SAFETY: `ruleset` is the fd made above.
            let restricted =
                unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) };
            if restricted != 0 {
                result = errno();
            }
        }
        // SAFETY: both opened above, closed once.
        unsafe {
            libc::close(proc_fd);
            libc::close(ruleset);
        }
        result
    }
}
