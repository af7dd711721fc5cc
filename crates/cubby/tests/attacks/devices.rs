//! Attacks on devices and terminals. The host's terminals and devices.
//!
//! [`ATTACKS`] is this section's table of the escape suite: commands on the
//! `linux` provider, a row per attack (what it tries, what the host must show
//! afterwards, the control it makes, if any), run by `escape_suite_as_*` in
//! `main.rs`.
//!
//! The `#[test]`s below are the same section's attacks through the file tools
//! of the `local` provider, on the layout of [`crate::fixture::Fx`].

use crate::Attack;
use crate::fixture::*;
use crate::lab::*;
use serde_json::json;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::net::UnixListener;
use std::sync::atomic::Ordering;
use std::thread::{self};
use std::time::{Duration, Instant};

/// The escape suite's attacks on devices and terminals.
pub const ATTACKS: &[Attack] = &[
    Attack {
        name: "read what is typed into a host terminal",
        expect: "what is typed unseen",
        control: Some("outside the sandbox, the test's user reads what is typed"),
        run: read_host_terminal,
    },
    Attack {
        name: "open the host's devices",
        expect: "no host device opened",
        control: None,
        run: open_host_devices,
    },
    Attack {
        name: "take the host's pseudo-terminals (kernel.pty.max)",
        expect: "the sandbox's ptys stop at its devpts max; ptys still work there",
        control: Some("on the host the same program opens every pty it asks for"),
        run: hoard_ptys,
    },
];

/// The `max=` of the sandbox's `devpts` (`SANDBOX_PTYS` in
/// `sandbox/linux/plan.rs`).
const SANDBOX_PTYS: i64 = 64;
/// Pseudo-terminals the attack asks for: well past the sandbox's bound,
/// well within the host's (`kernel.pty.max`, 4,096 by default).
const PTYS_ASKED: i64 = 3 * SANDBOX_PTYS;

/// Python: opens up to `PTYS_ASKED` ptys, keeps them, prints how many and
/// whether one works (a line written to the terminal is read on the other
/// side).
fn ptys_py() -> String {
    format!(
        "import os\nheld = []\nwhile len(held) < {PTYS_ASKED}:\n  try:\n    held.append(os.openpty())\n  except OSError:\n    break\nworks = False\nif held:\n  m, s = held[0]\n  os.write(m, b\"ping\\n\")\n  works = os.read(s, 64).startswith(b\"ping\")\nprint(\"PTYS\", len(held), works)"
    )
}

fn hoard_ptys(l: &Lab) -> Verdict {
    // Control: on the host the same program gets every pty it asks for.
    let host = host_py(&ptys_py());
    if host.trim() != format!("PTYS {PTYS_ASKED} True") {
        return Err(format!("control: on the host {host:?}"));
    }
    let out = l.sh(&py(&ptys_py()));
    let got: Vec<&str> = out
        .text
        .split("PTYS")
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let held: i64 = got.first().and_then(|n| n.parse().ok()).unwrap_or(-1);
    if held > SANDBOX_PTYS {
        return Err(format!(
            "the sandbox held {held} ptys against a bound of {SANDBOX_PTYS}: {}",
            out.text
        ));
    }
    if held < SANDBOX_PTYS - 1 || got.get(1) != Some(&"True") {
        return Err(format!("ptys do not work in the sandbox: {}", out.text));
    }
    Ok(())
}

/// A terminal of the host's: the test's user owns it (as a user owns the
/// terminal they run an agent in), so only the sandbox stands between a
/// command and what is typed into it.
fn read_host_terminal(l: &Lab) -> Verdict {
    use rustix::pty::OpenptFlags;
    use std::io::Write;
    let master = rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).unwrap();
    rustix::pty::grantpt(&master).unwrap();
    rustix::pty::unlockpt(&master).unwrap();
    let name = rustix::pty::ptsname(&master, Vec::new())
        .unwrap()
        .into_string()
        .unwrap();
    let mut master = std::fs::File::from(master);
    // Control: outside the sandbox, the test's user reads typed input.
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(
            rustix::fs::OFlags::NONBLOCK.bits() as i32 | rustix::fs::OFlags::NOCTTY.bits() as i32,
        )
        .open(&name)
        .unwrap();
    master.write_all(b"typed-control\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut seen = String::new();
    while !seen.contains("typed-control") && Instant::now() < deadline {
        let mut buf = [0u8; 64];
        if let Ok(n) = (&slave).read(&mut buf) {
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(seen.contains("typed-control"), "control: read {seen:?}");
    let secret = marker("typed");
    master.write_all(format!("{secret}\n").as_bytes()).unwrap();
    let out = l.sh(&format!(
        "timeout 2 head -n 1 {name}; timeout 2 cat {name}; ls -l /dev/pts"
    ));
    drop(slave);
    not_in(&out, &secret)
}

/// Consoles, disks, `/dev/kvm`, the host's pseudo-terminals: none may be
/// opened, not even for reading. (The sandbox's own pseudo-terminals, on a
/// `devpts` other than the host's, may.)
fn open_host_devices(l: &Lab) -> Verdict {
    use std::os::unix::fs::MetadataExt;
    let host_pts = std::fs::metadata("/dev/pts/ptmx").map_or(0, |m| m.dev());
    let out = l.sh(&py(&format!(
        "import os, stat\nallowed = {{\"/dev/null\", \"/dev/zero\", \"/dev/full\", \"/dev/random\", \"/dev/urandom\", \"/dev/tty\"}}\nfor d, dirs, files in os.walk(\"/dev\"):\n  for n in files:\n    p = os.path.join(d, n)\n    try:\n      st = os.lstat(p)\n      own_pts = p.startswith(\"/dev/pts/\") and st.st_dev != {host_pts}\n      if (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)) and p not in allowed and not own_pts:\n        os.close(os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)); print(\"OPENED\", p)\n    except OSError: pass\nprint(\"walked\")",
    )));
    if !out.text.contains("walked") {
        return Err(format!("the walk did not run: {}", out.text));
    }
    not_in(&out, "OPENED")
}

// ---------------------------------------------------- through the file tools

#[test]
fn fifo_read_file_returns_promptly_without_opening_it() {
    let mut fx = Fx::new();
    mkfifo(&fx.r("fifo"));
    let ts = fx.tools();
    refused_promptly(&ts, "read_file", json!({"path": "fifo"}));
    refused_promptly(
        &ts,
        "read_file",
        json!({"path": "fifo", "offset": 2, "limit": 1}),
    );
    // A blocked writer would be released by any open for reading.
    let (opened, watcher) = fifo_watch(&fx.r("fifo"));
    refused_promptly(&ts, "read_file", json!({"path": "fifo"}));
    thread::sleep(Duration::from_millis(100));
    let was_opened = opened.load(Ordering::SeqCst);
    fifo_release(&fx.r("fifo"), watcher);
    assert!(!was_opened, "read_file opened the FIFO for reading");
    assert!(is_fifo(&fx.r("fifo")));
    fx.assert_untouched();
}

#[test]
fn fifo_search_returns_promptly() {
    let mut fx = Fx::new();
    mkfifo(&fx.r("fifo"));
    mkfifo(&fx.r("a/fifo.txt"));
    let ts = fx.tools();
    let out = call_promptly(&ts, "search", json!({"query": "line"}));
    expect_kind(&out, "ok", "search over a root holding FIFOs");
    assert_eq!(out.structured["total"], 2, "{}", out.text);
    call_promptly(&ts, "search", json!({"query": "line", "glob": "*.txt"}));
    call_promptly(&ts, "search", json!({"query": "line", "path": "a"}));
    refused_promptly(&ts, "search", json!({"query": "line", "path": "fifo"}));
    refused_promptly(
        &ts,
        "search",
        json!({"query": "line", "path": "a/fifo.txt"}),
    );
    let (opened, watcher) = fifo_watch(&fx.r("a/fifo.txt"));
    call_promptly(&ts, "search", json!({"query": "line"}));
    call_promptly(
        &ts,
        "search",
        json!({"query": "line", "path": "a/fifo.txt"}),
    );
    thread::sleep(Duration::from_millis(100));
    let was_opened = opened.load(Ordering::SeqCst);
    fifo_release(&fx.r("a/fifo.txt"), watcher);
    assert!(!was_opened, "search opened the FIFO");
    fx.assert_untouched();
}

#[test]
fn fifo_edit_file_returns_promptly() {
    let mut fx = Fx::new();
    mkfifo(&fx.r("fifo"));
    let ts = fx.tools();
    refused_promptly(
        &ts,
        "edit_file",
        json!({"path": "fifo", "find": "a", "replace": "b"}),
    );
    refused_promptly(&ts, "read_file", json!({"path": "fifo"}));
    refused_promptly(
        &ts,
        "edit_file",
        json!({"path": "fifo", "find": "a", "replace": "b", "replace_all": true}),
    );
    assert!(is_fifo(&fx.r("fifo")));
    fx.assert_untouched();
}

#[test]
fn fifo_write_file_does_not_write_into_it() {
    let mut fx = Fx::new();
    mkfifo(&fx.r("fifo"));
    let ts = fx.tools();
    // Hold a reader open so that any open for writing would succeed and any
    // byte written would be readable here.
    let reader = rustix::fs::open(
        fx.r("fifo"),
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::NONBLOCK,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    refused_promptly(
        &ts,
        "write_file",
        json!({"path": "fifo", "content": "pwned\n"}),
    );
    refused_promptly(&ts, "read_file", json!({"path": "fifo"}));
    refused_promptly(
        &ts,
        "write_file",
        json!({"path": "fifo", "content": "pwned\n"}),
    );
    let mut buf = [0u8; 64];
    match rustix::io::read(&reader, &mut buf) {
        Ok(n) => assert_eq!(n, 0, "write_file wrote {n} bytes into the FIFO"),
        Err(e) => assert_eq!(e, rustix::io::Errno::AGAIN),
    }
    assert!(
        is_fifo(&fx.r("fifo")),
        "write_file replaced the FIFO with something else"
    );
    fx.assert_untouched();
}

#[test]
fn fifo_named_gitignore_does_not_block_walks() {
    let mut fx = Fx::new();
    // Walks read `.gitignore` files: make them FIFOs.
    mkfifo(&fx.r(".gitignore"));
    mkfifo(&fx.r("a/.gitignore"));
    let ts = fx.tools();
    let out = call_promptly(&ts, "glob", json!({"pattern": "**"}));
    expect_kind(&out, "ok", "glob with FIFO .gitignore files");
    let out = call_promptly(&ts, "list_files", json!({"path": "a"}));
    expect_kind(&out, "ok", "list_files with FIFO .gitignore files");
    let out = call_promptly(&ts, "search", json!({"query": "line"}));
    expect_kind(&out, "ok", "search with FIFO .gitignore files");
    let out = call_promptly(&ts, "changes", json!({}));
    expect_kind(&out, "ok", "changes with FIFO .gitignore files");
    fx.assert_untouched();
}

#[test]
fn device_read_file_is_refused() {
    let mut fx = Fx::new();
    mknod_null(&fx.r("null"));
    mknod_null(&fx.r("a/dev.txt"));
    let ts = fx.tools();
    refused_promptly(&ts, "read_file", json!({"path": "null"}));
    refused_promptly(&ts, "read_file", json!({"path": "a/dev.txt"}));
    fx.assert_untouched();
}

#[test]
fn device_write_and_edit_are_refused() {
    let mut fx = Fx::new();
    mknod_null(&fx.r("null"));
    let ts = fx.tools();
    refused_promptly(
        &ts,
        "write_file",
        json!({"path": "null", "content": "pwned\n"}),
    );
    refused_promptly(&ts, "read_file", json!({"path": "null"}));
    refused_promptly(
        &ts,
        "edit_file",
        json!({"path": "null", "find": "a", "replace": "b"}),
    );
    refused_promptly(
        &ts,
        "write_file",
        json!({"path": "null", "content": "pwned\n"}),
    );
    let meta = fs::symlink_metadata(fx.r("null")).unwrap();
    assert!(
        meta.file_type().is_char_device(),
        "the device node was replaced"
    );
    assert_eq!(meta.rdev(), fs::metadata("/dev/null").unwrap().rdev());
    fx.assert_untouched();
}

#[test]
fn device_search_and_walks_skip_it() {
    let mut fx = Fx::new();
    mknod_null(&fx.r("null"));
    mknod_null(&fx.r("a/dev.txt"));
    let ts = fx.tools();
    let out = call_promptly(&ts, "search", json!({"query": "line"}));
    expect_kind(&out, "ok", "search over a root holding devices");
    assert_eq!(out.structured["total"], 2, "{}", out.text);
    refused_promptly(&ts, "search", json!({"query": "line", "path": "null"}));
    refused_promptly(&ts, "search", json!({"query": "line", "path": "a/dev.txt"}));
    let out = call_promptly(&ts, "glob", json!({"pattern": "**/*.txt"}));
    assert!(
        !entries(&out).contains(&"a/dev.txt".to_string()),
        "glob listed a device as a file: {:?}",
        entries(&out)
    );
    call_promptly(&ts, "list_files", json!({}));
    fx.assert_untouched();
}

#[test]
fn unix_socket_is_refused() {
    let mut fx = Fx::new();
    let _listener = UnixListener::bind(fx.r("sock")).unwrap();
    let ts = fx.tools();
    refused_promptly(&ts, "read_file", json!({"path": "sock"}));
    refused_promptly(
        &ts,
        "write_file",
        json!({"path": "sock", "content": "pwned\n"}),
    );
    refused_promptly(
        &ts,
        "edit_file",
        json!({"path": "sock", "find": "a", "replace": "b"}),
    );
    refused_promptly(&ts, "search", json!({"query": "line", "path": "sock"}));
    let out = call_promptly(&ts, "search", json!({"query": "line"}));
    expect_kind(&out, "ok", "search over a root holding a socket");
    assert!(
        fs::symlink_metadata(fx.r("sock"))
            .unwrap()
            .file_type()
            .is_socket(),
        "the socket was replaced"
    );
    fx.assert_untouched();
}
