//! Attacks on resources and floods. Bombs, fillers and hoards: the bounds of
//! one command and of the sandbox.
//!
//! [`ATTACKS`] is this section's table of the escape suite: commands on the
//! `linux` provider, a row per attack (what it tries, what the host must show
//! afterwards, the control it makes, if any), run by `escape_suite_as_*` in
//! `main.rs`.

use crate::lab::*;
use crate::{
    Attack,
    common::{appeared, processes_with},
};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// The escape suite's attacks on resources and floods.
pub const ATTACKS: &[Attack] = &[
    Attack {
        name: "fork bomb",
        expect: "no process left, within 30 s; the host still forks",
        control: None,
        run: fork_bomb,
    },
    Attack {
        name: "memory bomb",
        expect: "the allocation refused",
        control: None,
        run: memory_bomb,
    },
    Attack {
        name: "fill the disk past the file-size limit",
        expect: "the file within the file-size limit",
        control: None,
        run: disk_filler,
    },
    Attack {
        name: "hold more processes than the sandbox's budget across commands",
        expect: "the commands together stop at the sandbox's budget; none left",
        control: Some("the first command gets all it asks for"),
        run: processes_across_commands,
    },
    Attack {
        name: "fill /tmp and /dev/shm past tmp_mb, and keep the memory",
        expect: "each stops at tmp_mb, the memory returned at the end",
        control: Some("the workspace takes it all; the host's Shmem rises while the sandbox lives"),
        run: fill_tmp_and_dev_shm,
    },
    Attack {
        name: "hold every inotify and fanotify instance of the user",
        expect: "the host's user still gets new instances",
        control: Some("outside any sandbox, this user can be left with none"),
        run: hoard_inotify_and_fanotify,
    },
    Attack {
        name: "take every queued signal and POSIX message-queue byte of the user",
        expect: "the host's user still queues a signal and opens a queue",
        control: Some("outside any sandbox, this user can be left with neither"),
        run: hoard_signals_and_message_queues,
    },
    Attack {
        name: "take a lease on a host file",
        expect: "no lease; the host's writer opens the file",
        control: Some("a read lease taken outside fails the next writer's open"),
        run: lease_on_a_host_file,
    },
    Attack {
        name: "leave System V shared memory behind a command, past tmp_mb",
        expect: "no segment outlives its command; segments bounded by tmp_mb",
        control: Some(
            "on the host a segment outlives its process, and one over tmp_mb can be made",
        ),
        run: system_v_shared_memory_left_behind,
    },
    Attack {
        name: "take the host's legacy AIO contexts (fs.aio-max-nr)",
        expect: "no context made; the host's aio-nr does not rise",
        control: Some("on the host the same io_setup gets a context, counted in aio-nr"),
        run: hoard_aio_contexts,
    },
    Attack {
        name: "grow pipes past their default size (the user's pipe pages)",
        expect: "no pipe grows; a pipe still holds 64 KiB and shrinks",
        control: Some("on the host F_SETPIPE_SZ grows a pipe to 1 MiB"),
        run: grow_pipes,
    },
];

fn fork_bomb(l: &Lab) -> Verdict {
    let m = marker("bomb");
    let started = Instant::now();
    let out = l.tools.call(
        "run",
        json!({"command": format!("bomb() {{ bash -c 'exec -a {m} sleep 60' & bomb & bomb; }}; bomb"), "timeout_ms": 4000}),
    );
    if started.elapsed() > Duration::from_secs(30) {
        return Err(format!("took {:?}: {}", started.elapsed(), out.text));
    }
    none_left(&m)?;
    // The host still forks.
    std::process::Command::new("true")
        .status()
        .map_err(|e| format!("host cannot fork: {e}"))?;
    Ok(())
}

fn memory_bomb(l: &Lab) -> Verdict {
    let out = l.sh(&py(
        "x = bytearray(3 * 1024 ** 3); print(\"ALLOCATED\", len(x))",
    ));
    not_in(&out, "ALLOCATED")
}

fn disk_filler(l: &Lab) -> Verdict {
    l.sh("head -c 64M /dev/zero > big.bin; ls -l big.bin");
    let len = std::fs::metadata(l.ws.join("big.bin"))
        .map(|m| m.len())
        .unwrap_or(0);
    if len <= TEST_FILE_SIZE_MB * 1024 * 1024 {
        Ok(())
    } else {
        Err(format!("wrote {len} bytes"))
    }
}

const MIB: u64 = 1024 * 1024;

/// Waits (bounded) until the command has written `path`; its content.
fn written(path: &Path) -> Result<String, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && !text.is_empty()
        {
            return Ok(text);
        }
        if Instant::now() > deadline {
            return Err(format!("{} was never written", path.display()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops the lab's processes named `names` (their verdicts stand apart).
fn stop_all(l: &Lab, names: &[String]) {
    for name in names {
        l.tools.call("stop_process", json!({ "name": name }));
    }
}

/// Starts `command` in the background as `name`.
fn background(l: &Lab, name: &str, command: &str) -> Verdict {
    let out = l
        .tools
        .call("start_process", json!({"name": name, "command": command}));
    if out.is_error {
        return Err(out.text);
    }
    Ok(())
}

fn processes_across_commands(l: &Lab) -> Verdict {
    // Each command alone stays well within the budget; together they ask
    // for half as much again.
    const EACH: u64 = 160;
    const COMMANDS: u64 = 4;
    const _: () = assert!(EACH < TEST_PROCESSES && 2 * EACH * COMMANDS > 3 * TEST_PROCESSES);
    let m = marker("procs");
    let names: Vec<String> = (0..COMMANDS).map(|i| format!("forker{i}")).collect();
    let mut verdict = Ok(());
    let mut got = Vec::new();
    for (i, name) in names.iter().enumerate() {
        // A start refused once the budget is spent is contained too.
        let code = format!(
            "import os, time\nn = 0\nfor _ in range({EACH}):\n  try:\n    pid = os.fork()\n  except OSError:\n    break\n  if pid == 0:\n    os.execv(\"/bin/sleep\", [\"{m}\", \"60\"])\n  n += 1\nopen(\"forked{i}\", \"w\").write(str(n))\ntime.sleep(60)"
        );
        match background(l, name, &py(&code)) {
            Ok(()) => match written(&l.ws.join(format!("forked{i}"))) {
                Ok(n) => got.push(n.trim().parse::<u64>().unwrap_or(0)),
                Err(e) => verdict = verdict.and(Err(e)),
            },
            Err(e) if i > 0 && e.contains("limits.sandbox.processes") => break,
            Err(e) => verdict = verdict.and(Err(e)),
        }
    }
    let held = processes_with(&m).len() as u64;
    stop_all(l, &names);
    verdict?;
    // Control: the first command had all it asked for (the budget is not
    // simply smaller per command).
    if got.first() != Some(&EACH) {
        return Err(format!("the first command forked {got:?} of {EACH}"));
    }
    none_left(&m)?;
    if held > TEST_PROCESSES {
        return Err(format!(
            "{held} processes held at once against processes = {TEST_PROCESSES} (per command: {got:?})"
        ));
    }
    Ok(())
}

/// Held while a test measures the host's `Shmem`: an exclusive lock on a
/// file every user running the suite can open.
fn shmem_lock() -> std::fs::File {
    let path = Path::new(LAB_BASE).join("cubby-escape-shmem.lock");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .unwrap();
    let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666));
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive).unwrap();
    file
}

/// The host's `Shmem` (tmpfs and shared memory), in bytes.
fn host_shmem() -> u64 {
    let info = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("Shmem:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}

fn fill_tmp_and_dev_shm(l: &Lab) -> Verdict {
    let _ = l;
    let tight = lab_with(|_, l, _| l.sandbox.tmp_mb = TEST_TMP_MB);
    let m = marker("filler");
    // Files smaller than RLIMIT_FSIZE, together half as much again as
    // tmp_mb in each; the same into the workspace as the control.
    const FILES: u64 = 4;
    const FILE_MB: u64 = TEST_TMP_MB * 3 / 2 / FILES;
    const _: () = assert!(FILE_MB < TEST_FILE_SIZE_MB);
    let script = format!(
        "for d in /tmp /dev/shm .; do for i in $(seq {FILES}); do head -c {FILE_MB}M /dev/zero > $d/fill$i 2>> errors; done; done; \
         echo > filled; exec -a {m} sleep 60"
    );
    background(&tight, "filler", &script)?;
    let filled = written(&tight.ws.join("filled"));
    // `filled` is written just before the `exec`: wait for the marker.
    let pid = appeared(&m).and_then(|p| p.split(':').next().map(str::to_string));
    let mut used = Vec::new();
    for dir in ["tmp", "dev/shm"] {
        if let Some(pid) = &pid
            && let Ok(st) = rustix::fs::statvfs(format!("/proc/{pid}/root/{dir}").as_str())
        {
            used.push((
                dir,
                (st.f_blocks - st.f_bfree) * st.f_frsize,
                st.f_blocks * st.f_frsize,
            ));
        }
    }
    stop_all(&tight, &["filler".to_string()]);
    filled?;
    let errors = std::fs::read_to_string(tight.ws.join("errors")).unwrap_or_default();
    // Control: the workspace took it all.
    let in_workspace: u64 = (1..=FILES)
        .map(|i| std::fs::metadata(tight.ws.join(format!("fill{i}"))).map_or(0, |m| m.len()))
        .sum();
    if in_workspace != FILES * FILE_MB * MIB {
        return Err(format!(
            "control: the workspace took {in_workspace} bytes; {errors}"
        ));
    }
    if used.len() != 2 {
        return Err(format!(
            "the sandbox's /tmp and /dev/shm not seen from the host ({pid:?})"
        ));
    }
    for (dir, used, size) in used {
        if used > TEST_TMP_MB * MIB || size > TEST_TMP_MB * MIB {
            return Err(format!(
                "/{dir} holds {used} of {size} bytes against tmp_mb = {TEST_TMP_MB}"
            ));
        }
    }
    if !errors.contains("No space left on device") {
        return Err(format!("no ENOSPC: {errors}"));
    }
    drop(tight);
    // What a sandbox's tmpfs held is the host's again once it ends. The
    // host's Shmem is the measure: one suite at a time takes it (the
    // suites of both users run at once, in the same order).
    let _alone = shmem_lock();
    const ROOMY_MB: u64 = 128;
    const FILL_MB: u64 = 112;
    let baseline = host_shmem();
    let roomy = lab_with(|_, l, _| l.sandbox.tmp_mb = ROOMY_MB);
    let chunks = FILL_MB / (TEST_FILE_SIZE_MB / 2);
    let out = roomy.sh(&format!(
        "for d in /tmp /dev/shm; do for i in $(seq {chunks}); do head -c {}M /dev/zero > $d/f$i || exit 1; done; done; echo FILLED",
        TEST_FILE_SIZE_MB / 2
    ));
    let held = host_shmem().saturating_sub(baseline);
    // Control: the memory is the host's while the sandbox lives.
    if !out.text.contains("FILLED") || held < FILL_MB * MIB {
        return Err(format!(
            "control: the host's Shmem rose {held} bytes: {}",
            out.text
        ));
    }
    let full = host_shmem();
    drop(roomy);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = host_shmem();
        if full.saturating_sub(now) >= FILL_MB * MIB {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the sandbox ended, the host's Shmem is still {now} (full: {full}, before: {baseline})"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Python: `hoard(open)` opens until the kernel refuses and returns how
/// many it got (kept open until the program ends).
const HOARD_PY: &str = "import ctypes, fcntl, os, sys, time\nlibc = ctypes.CDLL(None, use_errno=True)\ndef hoard(open):\n  fds = []\n  while True:\n    fd = open()\n    if fd < 0:\n      return len(fds)\n    fds.append(fd)\ninotify = lambda: libc.inotify_init1(0)\nfanotify = lambda: libc.fanotify_init(0x200, 0)\n";

fn hoard_inotify_and_fanotify(l: &Lab) -> Verdict {
    held_while_the_host_gets_more(
        l,
        HOARD_PY,
        "a = hoard(inotify)\nb = hoard(fanotify)",
        "a = hoard(inotify)\nb = hoard(fanotify)",
        ["inotify()", "fanotify()"],
        "inotify, fanotify",
    )
}

/// A per-user budget attack with its control: on the host, `take` (Python
/// after `prelude`, setting `a` and `b`, how many it got of each) leaves
/// the user with none of either (`probes` fail); in the sandbox, while a
/// background command holds what `sandbox_take` got, the host's user still
/// gets one of each.
fn held_while_the_host_gets_more(
    l: &Lab,
    prelude: &str,
    take: &str,
    sandbox_take: &str,
    probes: [&str; 2],
    what: &str,
) -> Verdict {
    let [p1, p2] = probes;
    // Control: outside any sandbox, this user can be left with none (for
    // a moment: the program ends at once).
    let host = host_py(&format!("{prelude}{take}\nprint(a, b, {p1}, {p2})"));
    let host: Vec<i64> = host
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    if host.len() != 4 || host[0] < 2 || host[1] < 2 || host[2] >= 0 || host[3] >= 0 {
        return Err(format!("control: on the host {host:?}"));
    }
    let code = format!(
        "{prelude}{sandbox_take}\nopen(\"hoarded\", \"w\").write(\"%d %d\" % (a, b))\ntime.sleep(60)"
    );
    background(l, "hoarder", &py(&code))?;
    let hoarded = written(&l.ws.join("hoarded"));
    // While it holds all it could get, the host's user gets more.
    let after = host_py(&format!("{prelude}print({p1} >= 0, {p2} >= 0)"));
    stop_all(l, &["hoarder".to_string()]);
    let hoarded = hoarded?;
    if after.trim() != "True True" {
        return Err(format!(
            "the host's user got no more ({after:?}) while the sandbox held {hoarded} \
             ({what}; the host alone: {host:?})"
        ));
    }
    Ok(())
}

/// Python: `queue()` opens a POSIX message queue of the default size
/// (unlinked at once: its bytes stay charged while the descriptor lives;
/// the descriptor, or the errno negated), `signal_self()` queues a blocked
/// real-time signal to this process with `sigqueue` (`kill` is exempt from
/// the limit; 1, or the errno negated), `timer()` makes a POSIX timer (each
/// holds a queued signal's slot from the start: red-team pass 3, R3-7), `hoard(f)`
/// calls `f` until it fails (how many succeeded).
const QUEUES_PY: &str = "import ctypes, os, signal, time\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]\nlibc.mq_unlink.argtypes = [ctypes.c_char_p]\nn = [0]\ndef queue():\n  n[0] += 1\n  name = (\"/cubby-attack-%d-%d\" % (os.getpid(), n[0])).encode()\n  fd = libc.mq_open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600, None)\n  if fd < 0:\n    return -ctypes.get_errno()\n  libc.mq_unlink(name)\n  return fd\nSIG = signal.SIGRTMIN\nsignal.pthread_sigmask(signal.SIG_BLOCK, [SIG])\nlibc.sigqueue.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]\ndef signal_self():\n  if libc.sigqueue(os.getpid(), SIG, None) != 0:\n    return -ctypes.get_errno()\n  return 1\nlibc.timer_create.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]\ntimers = []\ndef timer():\n  t = ctypes.c_void_p()\n  if libc.timer_create(1, None, ctypes.byref(t)) != 0:\n    return -ctypes.get_errno()\n  timers.append(t)\n  return 1\ndef hoard(f):\n  got = 0\n  while got < 1000000 and f() >= 0:\n    got += 1\n  return got\n";

fn hoard_signals_and_message_queues(l: &Lab) -> Verdict {
    held_while_the_host_gets_more(
        l,
        QUEUES_PY,
        "a = hoard(queue)\nb = hoard(timer)",
        "a = hoard(queue)\nb = hoard(timer) + hoard(signal_self)",
        ["queue()", "signal_self()"],
        "queues, signals",
    )
}

/// Python: System V shared memory through libc. `make(mb)` creates a
/// private segment (its id, or -1), `fill(i, mb)` attaches it and writes
/// every page (the address, or None), `ids()` lists the segments the IPC
/// namespace holds.
const SHM_PY: &str = "import ctypes, sys\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]\nlibc.shmat.restype = ctypes.c_void_p\nlibc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]\nlibc.shmdt.argtypes = [ctypes.c_void_p]\nlibc.shmctl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]\nMIB = 1 << 20\ndef make(mb):\n  return libc.shmget(0, mb * MIB, 0o1600)\ndef fill(i, mb):\n  a = libc.shmat(i, None, 0)\n  if a is None or a == ctypes.c_void_p(-1).value:\n    return None\n  ctypes.memset(a, 1, mb * MIB)\n  return a\ndef ids():\n  return [l.split()[1] for l in open(\"/proc/sysvipc/shm\").readlines()[1:]]\n";

/// Size of each System V segment the attack makes, in MiB.
const SHM_SEGMENT_MB: u64 = 4;

fn system_v_shared_memory_left_behind(l: &Lab) -> Verdict {
    let _ = l;
    // Control: on the host a segment outlives the process that made it
    // (one written and detached, one never attached), and one larger than
    // tmp_mb can be made; the control removes what it made.
    let host = host_py(&format!(
        "{SHM_PY}a = make({SHM_SEGMENT_MB})\nlibc.shmdt(fill(a, {SHM_SEGMENT_MB}))\nb = make({SHM_SEGMENT_MB})\nbig = make({})\nprint(a, b, big)",
        2 * TEST_TMP_MB
    ));
    let made: Vec<i64> = host
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    let kept = host_py(&format!(
        "{SHM_PY}seen = ids()\nmade = {made:?}\nprint(sum(str(i) in seen for i in made))\nfor i in made:\n  libc.shmctl(i, 0, None)"
    ));
    if made.len() != 3 || made.iter().any(|&i| i < 0) || kept.trim() != "3" {
        return Err(format!("control: on the host made {host:?}, kept {kept:?}"));
    }
    let tight = lab_with(|_, l, _| l.sandbox.tmp_mb = TEST_TMP_MB);
    // One command leaves segments behind...
    let out = tight.sh(&py(&format!(
        "{SHM_PY}a = make({SHM_SEGMENT_MB})\nlibc.shmdt(fill(a, {SHM_SEGMENT_MB}))\nb = make({SHM_SEGMENT_MB})\nprint(\"LEFT\", a, b, ids())"
    )));
    if !out.text.contains("LEFT") || out.text.contains("LEFT -1") {
        return Err(format!("the first command made no segment: {}", out.text));
    }
    // ...which the next must not find.
    let next = tight.sh(&py(&format!("{SHM_PY}print(\"SEEN\", ids())")));
    if !next.text.contains("SEEN []") {
        return Err(format!(
            "segments survived their command ({}): {}",
            out.text.trim(),
            next.text
        ));
    }
    // Held at once, segments stop at tmp_mb, and none is larger.
    let bound = tight.sh(&py(&format!(
        "{SHM_PY}big = make({})\nheld = []\nwhile len(held) < 64:\n  i = make({SHM_SEGMENT_MB})\n  if i < 0 or fill(i, {SHM_SEGMENT_MB}) is None:\n    break\n  held.append(i)\nprint(\"BOUND\", big, len(held) * {SHM_SEGMENT_MB})",
        2 * TEST_TMP_MB
    )));
    let got: Vec<i64> = bound
        .text
        .split("BOUND")
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    if got.len() != 2 || got[0] >= 0 || got[1] as u64 > TEST_TMP_MB || got[1] == 0 {
        return Err(format!(
            "System V shared memory against tmp_mb = {TEST_TMP_MB} (a {} MiB segment, MiB held): {}",
            2 * TEST_TMP_MB,
            bound.text
        ));
    }
    // And a command cannot lift the bounds.
    let lift = tight.sh(
        "echo 0 > /proc/sys/kernel/shm_rmid_forced; echo 999999999 > /proc/sys/kernel/shmall; \
         cat /proc/sys/kernel/shm_rmid_forced /proc/sys/kernel/shmall",
    );
    let values: Vec<u64> = lift
        .text
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    if values.len() != 2 || values[0] != 1 || values[1] == 999_999_999 {
        return Err(format!("the IPC limits were lifted: {}", lift.text));
    }
    Ok(())
}

fn lease_on_a_host_file(l: &Lab) -> Verdict {
    let target = l.out("target.txt");
    let take_lease = format!(
        "import fcntl, os, signal, time\nsignal.signal(signal.SIGIO, signal.SIG_IGN)\nf = open(\"{}\")\ntry:\n  fcntl.fcntl(f, fcntl.F_SETLEASE, fcntl.F_RDLCK)\n  r = \"LEASED\"\nexcept OSError as e:\n  r = \"refused %d\" % e.errno\n",
        target.display()
    );
    let writer = format!(
        "import os\ntry:\n  os.close(os.open(\"{}\", os.O_WRONLY | os.O_NONBLOCK))\n  print(\"opened\")\nexcept OSError as e:\n  print(\"failed\", e.errno)\n",
        target.display()
    );
    // Control: a read lease taken outside fails the next writer's open
    // (this one's own, here).
    let control = host_py(&format!("{take_lease}print(r)\n{writer}"));
    if control.split_whitespace().collect::<Vec<_>>() != ["LEASED", "failed", "11"] {
        return Err(format!("control: {control}"));
    }
    let code = format!("{take_lease}open(\"leased\", \"w\").write(r)\ntime.sleep(60)");
    background(l, "leaser", &py(&code))?;
    let leased = written(&l.ws.join("leased"));
    let host_writer = host_py(&writer);
    stop_all(l, &["leaser".to_string()]);
    let leased = leased?;
    if leased.contains("LEASED") || host_writer.trim() != "opened" {
        return Err(format!("{leased}; the host's writer: {host_writer}"));
    }
    Ok(())
}

/// Python: `setup(events)` makes a legacy AIO context of `events`
/// (`io_setup`; the context, or the errno negated), `destroy(ctx)` ends
/// it, `aio_nr()` reads the host-wide count.
fn aio_py() -> String {
    format!(
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\ndef setup(events):\n  ctx = ctypes.c_ulong(0)\n  if libc.syscall({}, events, ctypes.byref(ctx)) != 0:\n    return -ctypes.get_errno()\n  return ctx.value\ndef destroy(ctx):\n  libc.syscall({}, ctypes.c_ulong(ctx))\ndef aio_nr():\n  return int(open(\"/proc/sys/fs/aio-nr\").read())\n",
        libc::SYS_io_setup,
        libc::SYS_io_destroy
    )
}

/// Contexts the attack asks for (of [`AIO_EVENTS`] each): enough to see
/// that they are given, not so many that a failing run drains the host.
const AIO_CONTEXTS: u32 = 8;
/// Events of each context.
const AIO_EVENTS: u32 = 1024;

fn hoard_aio_contexts(l: &Lab) -> Verdict {
    // Control: on the host io_setup gives a context, which aio-nr counts
    // while it lives.
    let host = host_py(&format!(
        "{}before = aio_nr()\nctx = setup({AIO_EVENTS})\nheld = aio_nr()\nif ctx > 0:\n  destroy(ctx)\nprint(ctx > 0, held - before >= {AIO_EVENTS})",
        aio_py()
    ));
    if host.trim() != "True True" {
        return Err(format!("control: on the host {host:?}"));
    }
    // In the sandbox, the same in a loop (the whole host's budget is
    // `fs.aio-max-nr`, 65,536 by default: 32 such contexts).
    let out = l.sh(&py(&format!(
        "{}got = []\nerr = 0\nwhile len(got) < {AIO_CONTEXTS}:\n  ctx = setup({AIO_EVENTS})\n  if ctx <= 0:\n    err = -ctx\n    break\n  got.append(ctx)\nprint(\"AIO\", len(got), err)",
        aio_py()
    )));
    let got: Vec<i64> = out
        .text
        .split("AIO")
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    if got.first() != Some(&0) {
        return Err(format!(
            "the sandbox made AIO contexts (made, errno): {}",
            out.text
        ));
    }
    if got.get(1) != Some(&i64::from(libc::EPERM)) {
        return Err(format!("io_setup not refused with EPERM: {}", out.text));
    }
    Ok(())
}

/// Python: `grow(size)` sets a new pipe's size (`F_SETPIPE_SZ`; the size
/// got, or the errno negated).
const PIPE_PY: &str = "import fcntl, os\nF_SETPIPE_SZ = 1031\nF_GETPIPE_SZ = 1032\ndef grow(size):\n  r, w = os.pipe()\n  try:\n    return fcntl.fcntl(w, F_SETPIPE_SZ, size)\n  except OSError as e:\n    return -e.errno\n  finally:\n    os.close(r)\n    os.close(w)\n";

fn grow_pipes(l: &Lab) -> Verdict {
    const GROWN: u64 = 1 << 20;
    // Control: on the host a pipe grows to 1 MiB.
    let host = host_py(&format!("{PIPE_PY}print(grow({GROWN}))"));
    if host.trim() != GROWN.to_string() {
        return Err(format!("control: on the host F_SETPIPE_SZ gave {host:?}"));
    }
    // In the sandbox: no growth, but a pipe shrinks, and one of the
    // default size takes 64 KiB without a reader.
    let out = l.sh(&py(&format!(
        "{PIPE_PY}grown = grow({GROWN})\nshrunk = grow(4096)\nr, w = os.pipe()\nos.set_blocking(w, False)\nwrote = os.write(w, bytes(65536))\nprint(\"PIPES\", grown, shrunk, wrote, fcntl.fcntl(w, F_GETPIPE_SZ))"
    )));
    let got: Vec<i64> = out
        .text
        .split("PIPES")
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    if got.len() != 4 {
        return Err(format!("the program did not run: {}", out.text));
    }
    if got[0] >= 0 {
        return Err(format!("a pipe grew to {} bytes: {}", got[0], out.text));
    }
    if got[0] != -i64::from(libc::EPERM) || got[1] != 4096 || got[2] != 65536 || got[3] < 65536 {
        return Err(format!(
            "pipes (grown, shrunk, written, default size): {}",
            out.text
        ));
    }
    Ok(())
}
