//! Masks of `deny_read` paths and credential stores, fork-side: what the
//! holder hides when it sets the sandbox up ([`mask_paths`]) and what each
//! command's init hides on top ([`mask_late`]: made or replaced since).
//!
//! A masked path has an empty, mode-000 object of its kind bound over it,
//! read-only, from a tiny tmpfs the holder makes in its `/dev/shm` and keeps
//! mounted (mode 000, read-only) for the inits; an init tells a path masked
//! already by the device of that tmpfs ([`MASK_DEV`]). Like the rest of the
//! fork side, nothing here allocates.

#![allow(unsafe_code)]

use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering};

use super::plan::Mask;
use super::syscalls::{self, errno};

/// Where the holder keeps the objects it masks `deny_read` paths and
/// credential stores with: a tiny tmpfs, mode 000 and read-only once made,
/// that stays mounted for the inits to mask what appears later.
const MASK_STORE: &CStr = c"/dev/shm/.cubby-mask";
const MASK_FILE: &CStr = c"/dev/shm/.cubby-mask/f";
const MASK_DIR: &CStr = c"/dev/shm/.cubby-mask/d";
/// What an init binds over a reservation's placeholder directory: an empty
/// directory of the placeholder's mode on the same read-only tmpfs, so
/// that one bind (read-only from its source) does what a bind of the
/// placeholder onto itself and a read-only remount did.
const MASK_PLACEHOLDER: &CStr = c"/dev/shm/.cubby-mask/p";
/// Its mode: a placeholder's ([`PLACEHOLDER_MODE`](crate::sandbox::local::PLACEHOLDER_MODE)).
const MASK_PLACEHOLDER_MODE: libc::mode_t = 0o600;
const MASK_STORE_OPTIONS: &CStr = c"mode=700,size=4k";
/// Longest path an init pins the directories of (`PATH_MAX`).
const MAX_PIN_PATH_BYTES: usize = 4096;

/// The device of the holder's mask objects, set once they are made: an
/// init tells a path masked already by it.
pub(super) static MASK_DEV: AtomicU64 = AtomicU64::new(u64::MAX);

/// Makes the mask objects, then hides each of `masks` behind its object
/// (see [`mask_one`]). `Err` with `errno` set when a step failed. The
/// holder only, in its own mount namespace, once its `/dev/shm` is mounted.
#[inline]
pub(super) fn mask_paths(masks: &[Mask]) -> Result<(), ()> {
    syscalls::mkdir(MASK_STORE, 0o700);
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    if !syscalls::mount(
        Some(c"tmpfs"),
        MASK_STORE,
        Some(c"tmpfs"),
        flags,
        Some(MASK_STORE_OPTIONS),
    ) {
        return Err(());
    }
    let fd = syscalls::create(
        MASK_FILE,
        libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
        0,
    );
    if fd < 0
        || !syscalls::mkdir(MASK_DIR, 0)
        || !syscalls::mkdir(MASK_PLACEHOLDER, MASK_PLACEHOLDER_MODE)
    {
        return Err(());
    }
    // SAFETY: `fd` was opened just now, closed once.
    unsafe { libc::close(fd) };
    // SAFETY: `MASK_STORE` is a NUL-terminated constant.
    if unsafe { libc::chmod(MASK_STORE.as_ptr(), 0) } != 0
        || !syscalls::mount(
            None,
            MASK_STORE,
            None,
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags,
            None,
        )
    {
        return Err(());
    }
    let Some(st) = syscalls::stat(MASK_FILE) else {
        return Err(());
    };
    MASK_DEV.store(st.st_dev, Ordering::Relaxed);
    for mask in masks {
        let e = mask_one(&mask.path);
        if e != 0 {
            syscalls::set_errno(e);
            return Err(());
        }
    }
    Ok(())
}

/// Binds the empty read-only placeholder object over `path`, a
/// reservation's placeholder directory (a mount point: the command can
/// neither remove nor rename it, and nothing can be made in it); true when
/// it succeeded. An init, after the holder's [`mask_paths`].
#[inline]
pub(super) fn cover_placeholder(path: &CStr) -> bool {
    syscalls::mount(Some(MASK_PLACEHOLDER), path, None, libc::MS_BIND, None)
}

/// 0 for an errno that says the path is gone (nothing to hide), the
/// errno otherwise.
#[inline]
fn unless_missing(e: i32) -> i32 {
    if e == libc::ENOENT || e == libc::ENOTDIR {
        0
    } else {
        e
    }
}

/// Binds the mask object of `path`'s kind over it, read-only; 0, or the
/// errno. What is missing (or unreachable: inside a mask) is skipped: there
/// is nothing to hide. Holder or init, after [`mask_paths`].
#[inline]
pub(super) fn mask_one(path: &CStr) -> i32 {
    let Some(st) = syscalls::stat(path) else {
        return unless_missing(errno());
    };
    let source = if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
        MASK_DIR
    } else {
        MASK_FILE
    };
    // A bind takes its source mount's flags: the mask tmpfs is read-only,
    // nosuid, nodev and noexec already (`mask_paths`), and so is every mask
    // bound from it, without a remount of its own.
    if !syscalls::mount(Some(source), path, None, libc::MS_BIND, None) {
        // Gone since the `stat` (the host removed it): nothing to hide;
        // each command's init looks again before it starts.
        return unless_missing(errno());
    }
    0
}

/// An init's mask of a `deny_read` path (relative to the root, `pin`: the
/// directories above it are bound onto themselves first, so that no
/// command carries it off by renaming one) or a credential store that the
/// holder has not masked: new since the sandbox started, or replaced on the
/// host (a mask leaves with the name it was on). One whose object lives on
/// `mask_dev` is masked already. 0, or the errno.
#[inline]
pub(super) fn mask_late(path: &CStr, pin: bool, mask_dev: u64) -> i32 {
    match syscalls::stat(path) {
        Some(st) if st.st_dev != mask_dev => {}
        _ => return 0,
    }
    if pin {
        let bytes = path.to_bytes();
        let len = bytes.len();
        let mut buf = [0u8; MAX_PIN_PATH_BYTES];
        if len >= buf.len() {
            return libc::ENAMETOOLONG;
        }
        buf[..len].copy_from_slice(bytes);
        for i in 1..len {
            if buf[i] != b'/' {
                continue;
            }
            buf[i] = 0;
            let dir = syscalls::until_nul(&buf[..]);
            if !syscalls::bind_onto_itself(dir) {
                return errno();
            }
            buf[i] = b'/';
        }
    }
    mask_one(path)
}
