//! The seccomp filters of the `linux` provider, compiled with
//! `seccompiler` once per sandbox and installed by each command.
//!
//! Two filters, because one filter has one action for its matches:
//!
//! 1. `clone3` returns `ENOSYS`, so that libc falls back to `clone`, whose
//!    flags (unlike `clone3`'s, which sit in memory) a filter can read.
//! 2. Everything in [`DENIED`], `clone`/`unshare` asking for a new user
//!    namespace, and `socket` for a family the network mode does not allow
//!    (off: all but `AF_UNIX`; `allow`: all but `AF_UNIX`, `AF_INET`,
//!    `AF_INET6`), return `EPERM`.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::error::{Error, ErrorKind, Result};

/// System calls no sandboxed command may make: debugging other processes,
/// changing mounts, loading kernel code, key management, joining other
/// namespaces, and kernel interfaces with a history of exploits.
const DENIED: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_mount_setattr,
    libc::SYS_bpf,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_perf_event_open,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_setns,
    libc::SYS_userfaultfd,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_syslog,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_vhangup,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
];

fn seccomp_error(e: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("the linux sandbox cannot build its seccomp filter: {e}"),
    )
}

fn arch() -> Result<TargetArch> {
    TargetArch::try_from(std::env::consts::ARCH).map_err(seccomp_error)
}

fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> Result<Vec<libc::sock_filter>> {
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        arch()?,
    )
    .map_err(seccomp_error)?;
    let program: BpfProgram = filter.try_into().map_err(seccomp_error)?;
    Ok(program
        .iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect())
}

/// A rule matching when argument `index` has every bit of `mask` set.
fn has_flags(index: u8, mask: u64) -> Result<SeccompRule> {
    let cond = SeccompCondition::new(
        index,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(mask),
        mask,
    )
    .map_err(seccomp_error)?;
    SeccompRule::new(vec![cond]).map_err(seccomp_error)
}

/// Which socket families commands may create.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sockets {
    /// Every family (network `on`).
    Any,
    /// `AF_UNIX`, `AF_INET` and `AF_INET6` (network `allow`: the network
    /// namespace has only loopback, where the egress proxy listens).
    Inet,
    /// `AF_UNIX` only (network `off`).
    UnixOnly,
}

/// The filters, in installation order.
///
/// # Errors
///
/// `unsupported` on an architecture `seccompiler` does not know.
pub(crate) fn filters(sockets: Sockets) -> Result<Vec<Vec<libc::sock_filter>>> {
    let mut clone3 = BTreeMap::new();
    clone3.insert(libc::SYS_clone3, Vec::new());
    let first = compile(clone3, libc::ENOSYS)?;

    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for &nr in DENIED {
        rules.insert(nr, Vec::new());
    }
    let new_user = libc::CLONE_NEWUSER as u64;
    // x86_64 and aarch64 both take the flags as clone's first argument.
    rules.insert(libc::SYS_clone, vec![has_flags(0, new_user)?]);
    rules.insert(libc::SYS_unshare, vec![has_flags(0, new_user)?]);
    let allowed: &[libc::c_int] = match sockets {
        Sockets::Any => &[],
        Sockets::Inet => &[libc::AF_UNIX, libc::AF_INET, libc::AF_INET6],
        Sockets::UnixOnly => &[libc::AF_UNIX],
    };
    if !allowed.is_empty() {
        // One rule: the family is none of the allowed ones.
        let conditions = allowed
            .iter()
            .map(|&family| {
                SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, family as u64)
                    .map_err(seccomp_error)
            })
            .collect::<Result<Vec<_>>>()?;
        rules.insert(
            libc::SYS_socket,
            vec![SeccompRule::new(conditions).map_err(seccomp_error)?],
        );
    }
    let second = compile(rules, libc::EPERM)?;
    Ok(vec![first, second])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_compile_for_this_machine() {
        let unix = filters(Sockets::UnixOnly).unwrap();
        let inet = filters(Sockets::Inet).unwrap();
        let any = filters(Sockets::Any).unwrap();
        assert_eq!(unix.len(), 2);
        assert!(unix[1].len() > any[1].len());
        assert!(inet[1].len() > unix[1].len());
    }
}
