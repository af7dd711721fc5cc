//! The seccomp filters of the `linux` provider: classic-BPF programs built
//! once per sandbox.
//!
//! Installing a filter costs the kernel a translation, a JIT compilation
//! and a run for every syscall number (to cache the always-allowed ones),
//! so the sandbox's filter ([`filter`]) is installed once, by the holder,
//! and every command inherits it; it lets `mount` through, because each
//! command's init binds the protected paths in the command's own mount
//! namespace. The command then installs [`command_filter`], four
//! instructions that refuse `mount`, before it execs. Together they refuse
//! what is listed below; the tests run both through a BPF interpreter and
//! combine their answers as the kernel does.
//!
//! What the sandbox's filter does, in order:
//!
//! 1. A system call of another ABI (i386 through `int 0x80`, x32) kills
//!    the process: every rule below is written for the native numbers.
//! 2. `clone3` returns `ENOSYS`, so that libc falls back to `clone`, whose
//!    flags (unlike `clone3`'s, which sit in memory) a filter can read.
//! 3. Everything in [`DENIED`], `clone`/`unshare` asking for a new user
//!    namespace, `socket` for a family the network mode does not allow
//!    (off: all but `AF_UNIX`; `allow`: all but `AF_UNIX`, `AF_INET`,
//!    `AF_INET6`), `ioctl` pushing input into a terminal ([`TTY_INJECTION`]:
//!    a command run by `cubby exec` shares the caller's terminal, and what
//!    it pushed would run in the caller's shell after it), `fcntl` taking a
//!    file lease ([`LEASE_COMMANDS`]: a lease on a host file the command
//!    can read makes the host's writers wait or fail) or growing a pipe
//!    past the default size ([`max_pipe_bytes`]: the pages of pipes are
//!    charged to the user, whose budget the host shares), and the calls in
//!    [`MODE_ARGS`] with a set-user-ID or set-group-ID bit in their mode (a
//!    command of a cubby run as root could otherwise leave a set-user-ID
//!    root program in the workspace) return `EPERM`; everything else is
//!    allowed.
//!
//! The program is assembled here rather than with `seccompiler`: that
//! crate emits one action per filter (two filters were needed) and tests
//! the syscall number against each rule in turn. The kernel runs a new
//! filter once for every syscall number when it is installed (to cache the
//! always-allowed ones), so a linear chain of ~45 tests cost every command
//! ~0.2 ms; a binary search over the sorted numbers costs a tenth of that.
//! The tests below run the program through a small BPF interpreter for
//! every number and argument case; `tests/attacks/` attacks it for real.

use crate::error::{Error, ErrorKind, Result};

/// System calls no sandboxed command may make: debugging other processes,
/// changing mounts, loading kernel code, key management (the kernel's key
/// quota is per user, shared with the host), joining other namespaces,
/// kernel interfaces with a history of exploits, and what takes from a
/// host-wide pool no namespace bounds (`io_setup`: legacy AIO contexts
/// count against `fs.aio-max-nr`, one number for the whole host; their
/// other calls act on a context only, so fail without one).
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
    libc::SYS_io_setup,
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

/// `ioctl` requests that push input into a terminal (`TIOCSTI`) or act on
/// the console (`TIOCLINUX`, which can also paste into it).
const TTY_INJECTION: &[u32] = &[libc::TIOCSTI as u32, libc::TIOCLINUX as u32];

/// `fcntl` commands that take (or drop) a file lease. A command can read
/// most of the host's files, and a lease on one stalls the host's next
/// writer of it (`lease-break-time`, 45 s by default) or fails a
/// non-blocking one with `EAGAIN`. Nothing a command runs needs one
/// (file servers take them).
const LEASE_COMMANDS: &[u32] = &[libc::F_SETLEASE as u32];

/// Pages of a pipe as the kernel makes it (`PIPE_DEF_BUFFERS`).
const DEFAULT_PIPE_PAGES: u64 = 16;

/// The page size assumed when the system cannot tell its own.
const FALLBACK_PAGE_BYTES: u64 = 4096;

/// The largest size `fcntl(F_SETPIPE_SZ)` may ask for: a pipe's default
/// (64 KiB with 4 KiB pages). Every pipe's pages are charged to its user
/// (`fs.pipe-user-pages-soft`, then new pipes of that user get two pages
/// and cannot grow), and a command runs as the user running cubby, so
/// growth is refused; shrinking is not.
pub(crate) fn max_pipe_bytes() -> u32 {
    let page = crate::sandbox::local::shim::page_size().unwrap_or(FALLBACK_PAGE_BYTES);
    u32::try_from(DEFAULT_PIPE_PAGES.saturating_mul(page)).unwrap_or(u32::MAX)
}

/// `fchmodat2` (Linux 6.6), numbered alike on x86_64 and aarch64.
const SYS_FCHMODAT2: libc::c_long = 452;

/// Calls that take a file mode, and the index of that argument: none may
/// ask for a set-user-ID or set-group-ID bit ([`SETID_BITS`]).
const MODE_ARGS: &[(libc::c_long, u32)] = &[
    (libc::SYS_fchmod, 1),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_chmod, 1),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_creat, 1),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_open, 2),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_mknod, 1),
    (libc::SYS_fchmodat, 2),
    (SYS_FCHMODAT2, 2),
    (libc::SYS_openat, 3),
    (libc::SYS_mknodat, 2),
];

/// `S_ISUID | S_ISGID`.
const SETID_BITS: u32 = libc::S_ISUID | libc::S_ISGID;

/// `AUDIT_ARCH_*` of this build's architecture (`linux/audit.h`).
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// On x86_64, an x32 system call is a native number with this bit set.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Offset of the syscall number in `struct seccomp_data`.
const OFFSET_NR: u32 = 0;
/// Offset of the `AUDIT_ARCH_*` value.
const OFFSET_ARCH: u32 = 4;
/// Offset of the low 32 bits of the first argument (little-endian).
const OFFSET_ARG0_LOW: u32 = 16;
/// Size of one argument in `struct seccomp_data`.
const ARG_BYTES: u32 = 8;

/// Longest jump a conditional classic-BPF instruction can make.
const MAX_JUMP: usize = u8::MAX as usize;

/// Of [`DENIED`], what the holder's filter lets through for the inits, and
/// each command's own filter refuses.
const COMMAND_ONLY: &[libc::c_long] = &[libc::SYS_mount];

/// What each command's own filter answers `ENOSYS` (libc and runtimes fall
/// back as on kernels without it): `openat2`, whose mode sits in memory
/// where no filter can read it ([`MODE_ARGS`] covers the other ways to
/// create a file). The inits use it, so the sandbox's filter cannot.
const COMMAND_ENOSYS: &[libc::c_long] = &[libc::SYS_openat2];

/// Ranges of fewer numbers than this are tested in turn, not split.
const LINEAR_BELOW: usize = 4;

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

impl Sockets {
    fn allowed(self) -> &'static [libc::c_int] {
        match self {
            Sockets::Any => &[],
            Sockets::Inet => &[libc::AF_UNIX, libc::AF_INET, libc::AF_INET6],
            Sockets::UnixOnly => &[libc::AF_UNIX],
        }
    }
}

/// What a filtered syscall number leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rule {
    /// `EPERM`.
    Deny,
    /// `EPERM` when the first argument asks for `CLONE_NEWUSER`.
    NoNewUser,
    /// `EPERM` unless the first argument is an allowed socket family.
    Families,
    /// `EPERM` for a request in [`TTY_INJECTION`] (the second argument).
    Ioctl,
    /// `EPERM` for a command in [`LEASE_COMMANDS`] (the second argument),
    /// and for `F_SETPIPE_SZ` past [`max_pipe_bytes`] (the third).
    Fcntl,
    /// `EPERM` when the argument of this index has a bit of [`SETID_BITS`].
    SetId(u32),
}

/// Where a jump goes.
#[derive(Clone, Copy)]
enum Target {
    Next,
    Label(usize),
}

struct Insn {
    code: u32,
    k: u32,
    jt: Target,
    jf: Target,
}

/// The labels of the four ways a program ends.
#[derive(Clone, Copy)]
struct Verdicts {
    allow: usize,
    eperm: usize,
    enosys: usize,
    kill: usize,
}

impl Verdicts {
    fn new(asm: &mut Asm) -> Verdicts {
        Verdicts {
            allow: asm.label(),
            eperm: asm.label(),
            enosys: asm.label(),
            kill: asm.label(),
        }
    }
}

/// A classic-BPF assembler with forward labels.
#[derive(Default)]
struct Asm {
    insns: Vec<Insn>,
    labels: Vec<Option<usize>>,
}

impl Asm {
    fn label(&mut self) -> usize {
        self.labels.push(None);
        self.labels.len() - 1
    }

    fn bind(&mut self, label: usize) {
        self.labels[label] = Some(self.insns.len());
    }

    fn load(&mut self, offset: u32) {
        self.insns.push(Insn {
            code: libc::BPF_LD | libc::BPF_W | libc::BPF_ABS,
            k: offset,
            jt: Target::Next,
            jf: Target::Next,
        });
    }

    fn ret(&mut self, value: u32) {
        self.insns.push(Insn {
            code: libc::BPF_RET | libc::BPF_K,
            k: value,
            jt: Target::Next,
            jf: Target::Next,
        });
    }

    fn jump(&mut self, op: u32, k: u32, jt: Target, jf: Target) {
        self.insns.push(Insn {
            code: libc::BPF_JMP | op | libc::BPF_K,
            k,
            jt,
            jf,
        });
    }

    /// Jumps to the label of the first case equal to the accumulator, or
    /// to `otherwise` when none is.
    fn match_any(&mut self, cases: &[(u32, usize)], otherwise: usize) {
        for (i, &(k, label)) in cases.iter().enumerate() {
            let miss = if i + 1 == cases.len() {
                Target::Label(otherwise)
            } else {
                Target::Next
            };
            self.jump(libc::BPF_JEQ, k, Target::Label(label), miss);
        }
    }

    /// Binds each verdict's label to its return.
    fn verdicts(&mut self, v: Verdicts) {
        self.bind(v.allow);
        self.ret(libc::SECCOMP_RET_ALLOW);
        self.bind(v.eperm);
        self.ret(libc::SECCOMP_RET_ERRNO | libc::EPERM as u32);
        self.bind(v.enosys);
        self.ret(libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
        self.bind(v.kill);
        self.ret(libc::SECCOMP_RET_KILL_PROCESS);
    }

    fn finish(self) -> Result<Vec<libc::sock_filter>> {
        let offset = |at: usize, target: Target| -> Result<u8> {
            let Target::Label(label) = target else {
                return Ok(0);
            };
            let to = self.labels[label].ok_or_else(|| seccomp_error("unbound label"))?;
            match to.checked_sub(at + 1) {
                Some(d) if d <= MAX_JUMP => Ok(d as u8),
                _ => Err(seccomp_error("jump out of range")),
            }
        };
        self.insns
            .iter()
            .enumerate()
            .map(|(at, insn)| {
                Ok(libc::sock_filter {
                    code: insn.code as u16,
                    jt: offset(at, insn.jt)?,
                    jf: offset(at, insn.jf)?,
                    k: insn.k,
                })
            })
            .collect()
    }
}

fn seccomp_error(e: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("the linux sandbox cannot build its seccomp filter: {e}"),
    )
}

/// Emits a search of `rules` (sorted by number) for the accumulator;
/// a number not among them goes to `allow`.
fn search(asm: &mut Asm, rules: &[(u32, usize)], allow: usize) {
    if rules.len() < LINEAR_BELOW {
        asm.match_any(rules, allow);
        return;
    }
    let mid = rules.len() / 2;
    let upper = asm.label();
    asm.jump(
        libc::BPF_JGE,
        rules[mid].0,
        Target::Label(upper),
        Target::Next,
    );
    search(asm, &rules[..mid], allow);
    asm.bind(upper);
    search(asm, &rules[mid..], allow);
}

/// The sandbox's filter for a network mode (installed by the holder).
///
/// # Errors
///
/// `unsupported` if the program cannot be assembled (it always can for
/// the lists above; checked rather than assumed).
pub(crate) fn filter(sockets: Sockets) -> Result<Vec<libc::sock_filter>> {
    let mut rules: Vec<(libc::c_long, Rule)> = DENIED
        .iter()
        .filter(|nr| !COMMAND_ONLY.contains(nr))
        .map(|&nr| (nr, Rule::Deny))
        .collect();
    rules.push((libc::SYS_clone, Rule::NoNewUser));
    rules.push((libc::SYS_unshare, Rule::NoNewUser));
    if sockets != Sockets::Any {
        rules.push((libc::SYS_socket, Rule::Families));
    }
    rules.push((libc::SYS_ioctl, Rule::Ioctl));
    rules.push((libc::SYS_fcntl, Rule::Fcntl));
    rules.extend(MODE_ARGS.iter().map(|&(nr, arg)| (nr, Rule::SetId(arg))));
    rules.sort_unstable_by_key(|&(nr, _)| nr);
    rules.dedup_by_key(|&mut (nr, _)| nr);

    let mut asm = Asm::default();
    let verdicts = Verdicts::new(&mut asm);
    let Verdicts {
        allow,
        eperm,
        enosys,
        kill,
    } = verdicts;
    let [new_user, families, ioctl, fcntl] = std::array::from_fn(|_| asm.label());
    // One check of the mode per argument index that has one.
    let mut mode_args: Vec<u32> = MODE_ARGS.iter().map(|&(_, arg)| arg).collect();
    mode_args.sort_unstable();
    mode_args.dedup();
    let set_id: Vec<(u32, usize)> = mode_args.iter().map(|&arg| (arg, asm.label())).collect();
    asm.load(OFFSET_ARCH);
    asm.jump(libc::BPF_JEQ, AUDIT_ARCH, Target::Next, Target::Label(kill));
    asm.load(OFFSET_NR);
    #[cfg(target_arch = "x86_64")]
    asm.jump(
        libc::BPF_JGE,
        X32_SYSCALL_BIT,
        Target::Label(kill),
        Target::Next,
    );
    asm.jump(
        libc::BPF_JEQ,
        libc::SYS_clone3 as u32,
        Target::Label(enosys),
        Target::Next,
    );
    let targets: Vec<(u32, usize)> = rules
        .iter()
        .map(|&(nr, rule)| {
            let label = match rule {
                Rule::Deny => eperm,
                Rule::NoNewUser => new_user,
                Rule::Families => families,
                Rule::Ioctl => ioctl,
                Rule::Fcntl => fcntl,
                Rule::SetId(arg) => set_id
                    .iter()
                    .find(|&&(a, _)| a == arg)
                    .map_or(eperm, |&(_, label)| label),
            };
            (nr as u32, label)
        })
        .collect();
    search(&mut asm, &targets, allow);

    // x86_64 and aarch64 both take clone's flags as its first argument;
    // CLONE_NEWUSER lies in the low word.
    asm.bind(new_user);
    asm.load(OFFSET_ARG0_LOW);
    asm.jump(
        libc::BPF_JSET,
        libc::CLONE_NEWUSER as u32,
        Target::Label(eperm),
        Target::Label(allow),
    );
    asm.bind(families);
    if sockets != Sockets::Any {
        asm.load(OFFSET_ARG0_LOW);
        let allowed: Vec<(u32, usize)> = sockets
            .allowed()
            .iter()
            .map(|&family| (family as u32, allow))
            .collect();
        asm.match_any(&allowed, eperm);
    }
    // ioctl's request is an unsigned int: the low word is all of it.
    asm.bind(ioctl);
    asm.load(OFFSET_ARG0_LOW + ARG_BYTES);
    let injecting: Vec<(u32, usize)> = TTY_INJECTION.iter().map(|&r| (r, eperm)).collect();
    asm.match_any(&injecting, allow);
    // So is fcntl's command.
    asm.bind(fcntl);
    asm.load(OFFSET_ARG0_LOW + ARG_BYTES);
    let pipe_size = asm.label();
    let fcntl_cases: Vec<(u32, usize)> = LEASE_COMMANDS
        .iter()
        .map(|&c| (c, eperm))
        .chain([(libc::F_SETPIPE_SZ as u32, pipe_size)])
        .collect();
    asm.match_any(&fcntl_cases, allow);
    // F_SETPIPE_SZ's size: kernels since 5.x read the low word of the
    // argument, older ones all of it; either way nothing above the low
    // word, nor a low word past the default, gets through.
    asm.bind(pipe_size);
    asm.load(OFFSET_ARG0_LOW + 2 * ARG_BYTES + 4);
    asm.jump(libc::BPF_JEQ, 0, Target::Next, Target::Label(eperm));
    asm.load(OFFSET_ARG0_LOW + 2 * ARG_BYTES);
    asm.jump(
        libc::BPF_JGT,
        max_pipe_bytes(),
        Target::Label(eperm),
        Target::Label(allow),
    );
    // Modes are unsigned ints too.
    for &(arg, label) in &set_id {
        asm.bind(label);
        asm.load(OFFSET_ARG0_LOW + arg * ARG_BYTES);
        asm.jump(
            libc::BPF_JSET,
            SETID_BITS,
            Target::Label(eperm),
            Target::Label(allow),
        );
    }
    asm.verdicts(verdicts);
    asm.finish()
}

/// What each command adds before it execs: [`COMMAND_ONLY`] refused, and
/// [`COMMAND_ENOSYS`] answered `ENOSYS`.
///
/// # Errors
///
/// As [`filter`].
pub(crate) fn command_filter() -> Result<Vec<libc::sock_filter>> {
    let mut asm = Asm::default();
    let verdicts = Verdicts::new(&mut asm);
    asm.load(OFFSET_ARCH);
    asm.jump(
        libc::BPF_JEQ,
        AUDIT_ARCH,
        Target::Next,
        Target::Label(verdicts.kill),
    );
    asm.load(OFFSET_NR);
    let rules: Vec<(u32, usize)> = COMMAND_ONLY
        .iter()
        .map(|&nr| (nr as u32, verdicts.eperm))
        .chain(
            COMMAND_ENOSYS
                .iter()
                .map(|&nr| (nr as u32, verdicts.enosys)),
        )
        .collect();
    asm.match_any(&rules, verdicts.allow);
    asm.verdicts(verdicts);
    asm.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `prog` as the kernel would for one call.
    fn run(prog: &[libc::sock_filter], arch: u32, nr: u32, arg0: u64) -> u32 {
        run_args(prog, arch, nr, &[arg0])
    }

    /// [`run`] with the first `args.len()` arguments given.
    fn run_args(prog: &[libc::sock_filter], arch: u32, nr: u32, args: &[u64]) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&nr.to_le_bytes());
        data[4..8].copy_from_slice(&arch.to_le_bytes());
        for (i, arg) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&arg.to_le_bytes());
        }
        let mut acc = 0u32;
        let mut pc = 0usize;
        loop {
            let insn = prog[pc];
            let code = insn.code as u32;
            pc += 1;
            match code {
                c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => {
                    let at = insn.k as usize;
                    acc = u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
                }
                c if c == libc::BPF_RET | libc::BPF_K => return insn.k,
                c if c & 0x07 == libc::BPF_JMP => {
                    let taken = match c & 0xf0 {
                        op if op == libc::BPF_JEQ => acc == insn.k,
                        op if op == libc::BPF_JGE => acc >= insn.k,
                        op if op == libc::BPF_JGT => acc > insn.k,
                        op if op == libc::BPF_JSET => acc & insn.k != 0,
                        op => panic!("unexpected jump {op:#x}"),
                    };
                    pc += if taken { insn.jt } else { insn.jf } as usize;
                }
                other => panic!("unexpected instruction {other:#x}"),
            }
        }
    }

    const EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;

    /// What a command gets: the sandbox's filter and its own, combined as
    /// the kernel does (the action of highest precedence wins; actions
    /// compare as signed numbers, lowest first).
    fn command_gets(sockets: Sockets, arch: u32, nr: u32, arg0: u64) -> u32 {
        command_gets_args(sockets, arch, nr, &[arg0])
    }

    /// [`command_gets`] with the first `args.len()` arguments given.
    fn command_gets_args(sockets: Sockets, arch: u32, nr: u32, args: &[u64]) -> u32 {
        let holder = filter(sockets).unwrap();
        let own = command_filter().unwrap();
        let answers = [
            run_args(&own, arch, nr, args),
            run_args(&holder, arch, nr, args),
        ];
        let action = |ret: u32| (ret & libc::SECCOMP_RET_ACTION_FULL) as i32;
        *answers.iter().min_by_key(|r| action(**r)).unwrap()
    }

    #[test]
    fn the_holders_filter_lets_its_inits_mount() {
        for sockets in [Sockets::Any, Sockets::Inet, Sockets::UnixOnly] {
            let prog = filter(sockets).unwrap();
            let mount = libc::SYS_mount as u32;
            assert_eq!(run(&prog, AUDIT_ARCH, mount, 0), libc::SECCOMP_RET_ALLOW);
            assert_eq!(command_gets(sockets, AUDIT_ARCH, mount, 0), EPERM);
        }
        assert!(command_filter().unwrap().len() <= 12);
    }

    #[test]
    fn every_number_gets_what_the_policy_says() {
        for sockets in [Sockets::Any, Sockets::Inet, Sockets::UnixOnly] {
            let prog = filter(sockets).unwrap();
            assert!(prog.len() < 200, "{} instructions", prog.len());
            for nr in 0..1024u32 {
                let got = command_gets(sockets, AUDIT_ARCH, nr, 0);
                let nr_long = nr as libc::c_long;
                let want = if nr_long == libc::SYS_clone3 || COMMAND_ENOSYS.contains(&nr_long) {
                    libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32
                } else if DENIED.contains(&nr_long) {
                    EPERM
                } else if nr_long == libc::SYS_socket && sockets != Sockets::Any {
                    // Family 0 (AF_UNSPEC) is never allowed.
                    EPERM
                } else {
                    libc::SECCOMP_RET_ALLOW
                };
                assert_eq!(got, want, "syscall {nr} with {sockets:?}");
            }
        }
    }

    #[test]
    // `libc::Ioctl` is a `c_ulong` here and a `c_int` on musl.
    #[allow(clippy::unnecessary_cast)]
    fn terminal_input_injection_is_refused() {
        let ioctl = libc::SYS_ioctl as u32;
        for sockets in [Sockets::Any, Sockets::Inet, Sockets::UnixOnly] {
            let gets = |request: u64| command_gets_args(sockets, AUDIT_ARCH, ioctl, &[0, request]);
            for request in [libc::TIOCSTI, libc::TIOCLINUX] {
                assert_eq!(gets(request as u64), EPERM);
                // The kernel reads an unsigned int: high bits change nothing.
                assert_eq!(gets(request as u64 | 1 << 32), EPERM);
            }
            for request in [
                libc::TIOCGWINSZ,
                libc::TCGETS,
                libc::FIONREAD,
                libc::TIOCSWINSZ,
            ] {
                assert_eq!(gets(request as u64), libc::SECCOMP_RET_ALLOW);
            }
        }
    }

    #[test]
    fn file_leases_are_refused_and_locks_are_not() {
        let fcntl = libc::SYS_fcntl as u32;
        for sockets in [Sockets::Any, Sockets::Inet, Sockets::UnixOnly] {
            let gets =
                |cmd: u64, arg: u64| command_gets_args(sockets, AUDIT_ARCH, fcntl, &[3, cmd, arg]);
            for lease in [libc::F_RDLCK, libc::F_WRLCK, libc::F_UNLCK] {
                assert_eq!(gets(libc::F_SETLEASE as u64, lease as u64), EPERM);
                // The kernel reads an unsigned int: high bits change nothing.
                assert_eq!(gets(libc::F_SETLEASE as u64 | 1 << 32, lease as u64), EPERM);
            }
            // Record locks (sqlite in the workspace), the rest of fcntl.
            for cmd in [
                libc::F_GETLEASE,
                libc::F_SETLK,
                libc::F_SETLKW,
                libc::F_OFD_SETLK,
                libc::F_GETFL,
                libc::F_SETFD,
                libc::F_DUPFD_CLOEXEC,
                libc::F_NOTIFY,
            ] {
                assert_eq!(gets(cmd as u64, 0), libc::SECCOMP_RET_ALLOW, "fcntl {cmd}");
            }
        }
    }

    #[test]
    fn pipes_may_shrink_but_not_grow_past_the_default() {
        let fcntl = libc::SYS_fcntl as u32;
        let max = u64::from(max_pipe_bytes());
        assert!(max >= 64 * 1024, "{max}");
        for sockets in [Sockets::Any, Sockets::Inet, Sockets::UnixOnly] {
            let gets =
                |cmd: u64, arg: u64| command_gets_args(sockets, AUDIT_ARCH, fcntl, &[3, cmd, arg]);
            let set = libc::F_SETPIPE_SZ as u64;
            for size in [max + 1, 2 * max, 1 << 20, u64::from(u32::MAX)] {
                assert_eq!(gets(set, size), EPERM, "F_SETPIPE_SZ {size}");
            }
            // Bits above the low word: new kernels drop them, old ones
            // refuse the size; the filter refuses either way.
            assert_eq!(gets(set, 1 << 32), EPERM);
            assert_eq!(gets(set, (1 << 32) | 4096), EPERM);
            assert_eq!(gets(set | 1 << 32, 1 << 20), EPERM);
            for size in [0, 1, 4096, max - 1, max] {
                assert_eq!(
                    gets(set, size),
                    libc::SECCOMP_RET_ALLOW,
                    "F_SETPIPE_SZ {size}"
                );
            }
            assert_eq!(gets(libc::F_GETPIPE_SZ as u64, 0), libc::SECCOMP_RET_ALLOW);
        }
    }

    #[test]
    fn legacy_aio_contexts_are_refused() {
        for sockets in [Sockets::Any, Sockets::UnixOnly] {
            let gets = |nr: libc::c_long| command_gets(sockets, AUDIT_ARCH, nr as u32, 0);
            assert_eq!(gets(libc::SYS_io_setup), EPERM);
            // Without a context the rest can only fail; left to the kernel.
            for nr in [
                libc::SYS_io_submit,
                libc::SYS_io_getevents,
                libc::SYS_io_destroy,
                libc::SYS_io_cancel,
            ] {
                assert_eq!(gets(nr), libc::SECCOMP_RET_ALLOW, "syscall {nr}");
            }
        }
    }

    #[test]
    fn set_id_modes_are_refused_in_every_call_that_takes_a_mode() {
        for sockets in [Sockets::Any, Sockets::UnixOnly] {
            for &(nr, arg) in MODE_ARGS {
                let gets = |mode: u32| {
                    let mut args = [0u64; 6];
                    // Other arguments hold anything; only the mode counts.
                    args.iter_mut().for_each(|a| *a = 0o7777_0000);
                    args[arg as usize] = mode as u64;
                    command_gets_args(sockets, AUDIT_ARCH, nr as u32, &args)
                };
                for mode in [0o4755, 0o2755, 0o6755, 0o4000, 0o104755] {
                    assert_eq!(gets(mode), EPERM, "syscall {nr} mode {mode:o}");
                }
                for mode in [0o755, 0o644, 0o1777, 0o100644, 0] {
                    assert_eq!(
                        gets(mode),
                        libc::SECCOMP_RET_ALLOW,
                        "syscall {nr} mode {mode:o}"
                    );
                }
            }
        }
    }

    #[test]
    fn openat2_falls_back_for_commands_only() {
        let nr = libc::SYS_openat2 as u32;
        assert_eq!(
            run(&filter(Sockets::UnixOnly).unwrap(), AUDIT_ARCH, nr, 0),
            libc::SECCOMP_RET_ALLOW
        );
        assert_eq!(
            command_gets(Sockets::UnixOnly, AUDIT_ARCH, nr, 0),
            libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32
        );
    }

    #[test]
    fn new_user_namespaces_are_refused_whatever_else_is_asked() {
        let prog = |arch, nr, arg0| command_gets(Sockets::UnixOnly, arch, nr, arg0);
        let new_user = libc::CLONE_NEWUSER as u64;
        for nr in [libc::SYS_clone, libc::SYS_unshare] {
            let nr = nr as u32;
            assert_eq!(prog(AUDIT_ARCH, nr, new_user), EPERM);
            assert_eq!(
                prog(
                    AUDIT_ARCH,
                    nr,
                    new_user | libc::CLONE_NEWNS as u64 | 1 << 40
                ),
                EPERM
            );
            let fork_flags = (libc::CLONE_NEWNS | libc::SIGCHLD) as u64;
            assert_eq!(prog(AUDIT_ARCH, nr, fork_flags), libc::SECCOMP_RET_ALLOW);
        }
    }

    #[test]
    fn socket_families_follow_the_network_mode() {
        let socket = libc::SYS_socket as u32;
        let families = [
            libc::AF_UNIX,
            libc::AF_INET,
            libc::AF_INET6,
            libc::AF_NETLINK,
            libc::AF_PACKET,
        ];
        for (sockets, allowed) in [
            (Sockets::UnixOnly, 1),
            (Sockets::Inet, 3),
            (Sockets::Any, families.len()),
        ] {
            for (i, family) in families.iter().enumerate() {
                let want = if i < allowed {
                    libc::SECCOMP_RET_ALLOW
                } else {
                    EPERM
                };
                assert_eq!(
                    command_gets(sockets, AUDIT_ARCH, socket, *family as u64),
                    want,
                    "{sockets:?} {family}"
                );
            }
        }
    }

    #[test]
    fn other_abis_are_killed() {
        const AUDIT_ARCH_I386: u32 = 0x4000_0003;
        for prog in [filter(Sockets::Any).unwrap(), command_filter().unwrap()] {
            assert_eq!(
                run(&prog, AUDIT_ARCH_I386, 1, 0),
                libc::SECCOMP_RET_KILL_PROCESS
            );
        }
        let prog = filter(Sockets::Any).unwrap();
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            run(
                &prog,
                AUDIT_ARCH,
                X32_SYSCALL_BIT | libc::SYS_mount as u32,
                0
            ),
            libc::SECCOMP_RET_KILL_PROCESS
        );
    }
}
