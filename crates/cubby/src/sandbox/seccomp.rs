//! The seccomp filters of the `linux` provider, compiled with
//! `seccompiler` once per sandbox and installed by each command.
//!
//! Two filters, because one filter has one action for its matches:
//!
//! 1. `clone3` returns `ENOSYS`, so that libc falls back to `clone`, whose
//!    flags (unlike `clone3`'s, which sit in memory) a filter can read.
//! 2. Everything in [`DENIED`], `clone`/`unshare` asking for a new user
//!    namespace, and (network off) `socket` for any family but `AF_UNIX`,
//!    return `EPERM`.

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

/// The filters, in installation order.
///
/// # Errors
///
/// `unsupported` on an architecture `seccompiler` does not know.
pub(crate) fn filters(network_off: bool) -> Result<Vec<Vec<libc::sock_filter>>> {
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
    if network_off {
        let not_unix = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            libc::AF_UNIX as u64,
        )
        .map_err(seccomp_error)?;
        rules.insert(
            libc::SYS_socket,
            vec![SeccompRule::new(vec![not_unix]).map_err(seccomp_error)?],
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
        let with = filters(true).unwrap();
        let without = filters(false).unwrap();
        assert_eq!(with.len(), 2);
        assert!(with[1].len() > without[1].len());
    }
}
