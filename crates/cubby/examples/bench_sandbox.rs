//! The `linux` provider measured against bare spawns, in one process.
//!
//! ```text
//! cargo run --release -p cubby --example bench_sandbox -- [ITERATIONS] [IDLE_SANDBOXES]
//! ```
//!
//! 1. A command (`/bin/true`, and `bash -c true` as `run` invokes it)
//!    spawned bare with `std::process::Command` against the same command
//!    started through a live sandbox (`Sandbox::exec`, waited for), and the
//!    `run` tool of `true` on the `linux` provider against the `local` one;
//!    in rounds, each case a block of runs in turn.
//! 2. Time to create a sandbox ready for its first command (open + start).
//! 3. Memory per idle sandbox: IDLE_SANDBOXES started at once; the
//!    proportional set size (PSS) of their processes plus this process's
//!    own growth, divided by their number. A process that shares its
//!    parent's memory (`CLONE_VM`: the holder as pid 1 of the sandbox's pid
//!    namespace and the process waiting for it) is one address space and
//!    counted once (`kcmp`); the kernel's own growth (task stacks, page
//!    tables: `/proc/meminfo`, machine-wide, so noisy) is shown beside it.
//!
//! Prints medians in milliseconds and the ratios.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/mod.rs"]
mod support;

use std::process::Command;
use std::sync::Arc;
use support::{kib_field, time, time_rounds};

use cubby::sandbox::{ExecSpec, Sandbox};
use cubby::{HostEnv, LinuxSandbox, Policy, WorkspacePath};
use serde_json::json;

/// Rounds of the one-command measurements (each runs every case in turn).
const ROUNDS: usize = 5;

fn exec_wait(sandbox: &dyn Sandbox, argv: &[&str]) {
    let spec = ExecSpec {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        cwd: WorkspacePath::root(),
        env: cubby::sandbox::CommandEnv::default().build(std::env::vars_os(), false),
        stdin: false,
        output_dir: None,
    };
    let spawned = sandbox.exec(&spec).unwrap();
    drop(spawned.output);
    let status = spawned.handle.wait();
    assert!(status.success(), "{status:?}");
    if let Some(release) = spawned.on_exit {
        release();
    }
}

/// A sandbox on `dir` under a default policy. `host` is captured once, as
/// a front does (`cubby mcp` hands one snapshot to every sandbox it opens):
/// a snapshot per sandbox would be the benchmark's own memory, not cubby's.
fn open(dir: &std::path::Path, host: &HostEnv) -> LinuxSandbox {
    let policy = Policy::builder().build().unwrap();
    LinuxSandbox::open(dir, &policy, host).unwrap()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(300);
    let idle: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(200);
    let dir = std::env::temp_dir().join(format!("cubby-bench-sandbox-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let host = HostEnv::capture();

    let sandbox = open(&dir, &host);
    sandbox.start().unwrap();
    for _ in 0..20 {
        exec_wait(&sandbox, &["/bin/true"]);
        Command::new("/bin/true").status().unwrap();
    }
    let linux_tools = cubby::Toolset::builder(Arc::new(open(&dir, &host)))
        .host_env(host.clone())
        .track_changes(false)
        .build()
        .unwrap();
    let local_tools = cubby::Toolset::builder(cubby::local_sandbox(&dir).unwrap())
        .host_env(host.clone())
        .track_changes(false)
        .build()
        .unwrap();
    for _ in 0..20 {
        linux_tools.call("run", json!({"command": "true"}));
        local_tools.call("run", json!({"command": "true"}));
    }
    let medians = time_rounds(
        ROUNDS,
        n,
        &mut [
            &mut || {
                Command::new("/bin/true").status().unwrap();
            },
            &mut || exec_wait(&sandbox, &["/bin/true"]),
            &mut || {
                Command::new("bash").args(["-c", "true"]).status().unwrap();
            },
            &mut || exec_wait(&sandbox, &["bash", "-c", "true"]),
            &mut || {
                let out = linux_tools.call("run", json!({"command": "true"}));
                assert!(out.text.starts_with("OK exit=0"), "{}", out.text);
            },
            &mut || {
                let out = local_tools.call("run", json!({"command": "true"}));
                assert!(out.text.starts_with("OK exit=0"), "{}", out.text);
            },
        ],
    );
    let [
        bare_true,
        sandboxed_true,
        bare_bash,
        sandboxed_bash,
        run_linux,
        run_local,
    ] = medians[..]
    else {
        unreachable!()
    };

    println!("one command ({n} iterations in {ROUNDS} rounds, median ms)");
    println!("  bare spawn /bin/true            {bare_true:8.3}");
    println!(
        "  live sandbox /bin/true          {sandboxed_true:8.3}   {:.2}x bare",
        sandboxed_true / bare_true
    );
    println!("  bare spawn bash -c true         {bare_bash:8.3}");
    println!(
        "  live sandbox bash -c true       {sandboxed_bash:8.3}   {:.2}x bare",
        sandboxed_bash / bare_bash
    );
    println!(
        "  run `true`, linux provider      {run_linux:8.3}   {:.2}x bare bash -c true",
        run_linux / bare_bash
    );
    println!(
        "  run `true`, local provider      {run_local:8.3}   {:.2}x bare bash -c true",
        run_local / bare_bash
    );

    let create = time(n.min(100), || {
        let s = open(&dir, &host);
        s.start().unwrap();
    });
    let create_and_first = time(n.min(100), || {
        let s = open(&dir, &host);
        exec_wait(&s, &["/bin/true"]);
    });
    println!("sandbox start ({} iterations, median ms)", n.min(100));
    println!("  open + start (ready)            {create:8.3}");
    println!("  open + first /bin/true          {create_and_first:8.3}");

    let kernel =
        || kib_field("/proc/meminfo", "KernelStack:") + kib_field("/proc/meminfo", "PageTables:");
    let kernel_before = kernel();
    let before = kib_field("/proc/self/status", "VmRSS:");
    let mut alive = Vec::new();
    for _ in 0..idle {
        let s = open(&dir, &host);
        s.start().unwrap();
        alive.push(s);
    }
    // Let each holder fork its init ahead.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let after = kib_field("/proc/self/status", "VmRSS:");
    let kernel_after = kernel();
    // The holders are this process's children; each keeps an init forked
    // ahead (a grandchild): count every descendant.
    let mut parent_of = std::collections::HashMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parent_of.insert(pid, ppid);
        }
    }
    let me = std::process::id();
    let descends = |mut pid: u32| {
        while let Some(&ppid) = parent_of.get(&pid) {
            if ppid == me {
                return true;
            }
            pid = ppid;
        }
        false
    };
    // Whether `pid` shares its address space with `ppid` (`kcmp`: 0 when
    // both have the same `mm`).
    #[allow(unsafe_code)]
    let same_memory = |pid: u32, ppid: u32| {
        const KCMP_VM: libc::c_long = 1;
        // SAFETY: kcmp only compares two processes' kernel objects.
        unsafe {
            libc::syscall(
                libc::SYS_kcmp,
                pid as libc::c_long,
                ppid as libc::c_long,
                KCMP_VM,
                0,
                0,
            ) == 0
        }
    };
    let mut holders_pss = 0.0;
    let mut holders_anon = 0.0;
    let mut holders_file = 0.0;
    let mut processes = 0;
    let mut spaces = 0;
    for (&pid, &ppid) in &parent_of {
        if descends(pid) {
            processes += 1;
            if ppid != me && same_memory(pid, ppid) {
                continue;
            }
            spaces += 1;
            let rollup = format!("/proc/{pid}/smaps_rollup");
            holders_pss += kib_field(&rollup, "Pss:");
            holders_anon += kib_field(&rollup, "Pss_Anon:");
            holders_file += kib_field(&rollup, "Pss_File:");
        }
    }
    println!("{idle} idle sandboxes");
    println!(
        "  PSS of their {processes} processes ({spaces} address spaces) {:.1} MiB + server growth {:.1} MiB = {:.1} KiB per sandbox",
        holders_pss / 1024.0,
        (after - before) / 1024.0,
        (holders_pss + after - before) / idle as f64
    );
    // File-backed PSS is the binary's and the libraries' pages the holders
    // map: physically shared with the server (and the page cache), so its
    // share per sandbox falls as sandboxes are added.
    println!(
        "  of which per sandbox: anonymous {:.1} KiB, file-backed {:.1} KiB, server {:.1} KiB",
        holders_anon / idle as f64,
        holders_file / idle as f64,
        (after - before) / idle as f64
    );
    println!(
        "  kernel stacks and page tables (machine-wide) +{:.1} MiB = {:.1} KiB per sandbox",
        (kernel_after - kernel_before) / 1024.0,
        (kernel_after - kernel_before) / idle as f64
    );
    drop(alive);
    drop(sandbox);
    let _ = std::fs::remove_dir_all(&dir);
}
