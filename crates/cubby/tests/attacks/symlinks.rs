//! Attacks on symlinks and swaps. Symbolic and hard links, `/proc` magic links,
//! renames and swaps.
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
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::{MetadataExt, symlink};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// The escape suite's attacks on symlinks and swaps.
pub const ATTACKS: &[Attack] = &[
    Attack {
        name: "write through a symlink made inside",
        expect: "no file outside the root",
        control: None,
        run: write_through_symlink_made_inside,
    },
    Attack {
        name: "write through /proc/self/root",
        expect: "no file outside the root",
        control: None,
        run: write_through_proc_self_root,
    },
    Attack {
        name: "write through /proc/<pid>/cwd",
        expect: "no file outside the root",
        control: None,
        run: write_through_proc_pid_cwd,
    },
    Attack {
        name: "write through a hard link to an outside file",
        expect: "the outside file unchanged",
        control: None,
        run: write_through_hard_link,
    },
    Attack {
        name: "rename an outside file into the root",
        expect: "the outside file unchanged",
        control: None,
        run: rename_outside_file_in,
    },
];

fn write_through_symlink_made_inside(l: &Lab) -> Verdict {
    l.sh(&format!(
        "ln -s {} link && echo pwned > link/sym.txt",
        l.outside.display()
    ));
    absent(&l.out("sym.txt"))
}

fn write_through_proc_self_root(l: &Lab) -> Verdict {
    let t = l.out("procroot.txt");
    l.sh(&format!("echo pwned > /proc/self/root{}", t.display()));
    absent(&t)
}

fn write_through_proc_pid_cwd(l: &Lab) -> Verdict {
    // A host process sitting in the outside directory.
    let mut host = std::process::Command::new("sleep")
        .arg("30")
        .current_dir(&l.outside)
        .spawn()
        .unwrap();
    let pid = host.id();
    l.sh(&format!(
        "echo pwned > /proc/{pid}/cwd/pidcwd.txt; (cd {} && sleep 5) & sleep 0.2; \
         echo pwned > /proc/$!/cwd/pidcwd2.txt",
        l.outside.display()
    ));
    let _ = host.kill();
    let _ = host.wait();
    absent(&l.out("pidcwd.txt")).and(absent(&l.out("pidcwd2.txt")))
}

fn write_through_hard_link(l: &Lab) -> Verdict {
    l.sh(&format!(
        "ln {} hl; echo pwned >> hl",
        l.out("target.txt").display()
    ));
    unchanged(&l.out("target.txt"), "original\n")
}

fn rename_outside_file_in(l: &Lab) -> Verdict {
    l.sh(&format!("mv {} stolen", l.out("target.txt").display()));
    unchanged(&l.out("target.txt"), "original\n")
}

// ---------------------------------------------------- through the file tools

#[test]
fn symlink_to_an_outside_file_cannot_be_read() {
    let mut fx = Fx::new();
    plant_links(&fx);
    let ts = fx.tools();
    for p in ["ln", "ln_abs", "./ln", "a/../ln"] {
        check(&ts, "read_file", json!({"path": p}), "path_escape");
        check(
            &ts,
            "search",
            json!({"query": "line", "path": p}),
            "path_escape",
        );
    }
    fx.assert_untouched();
}

#[test]
fn symlink_to_an_outside_file_cannot_be_written_or_edited() {
    let mut fx = Fx::new();
    plant_links(&fx);
    let ts = fx.tools();
    for p in ["ln", "ln_abs"] {
        // The path guard comes before read-before-write: path_escape, not not_read.
        check(
            &ts,
            "write_file",
            json!({"path": p, "content": "pwned\n"}),
            "path_escape",
        );
        check(
            &ts,
            "edit_file",
            json!({"path": p, "find": "secret", "replace": "pwned"}),
            "path_escape",
        );
        // A read attempt first changes nothing.
        check(&ts, "read_file", json!({"path": p}), "path_escape");
        check(
            &ts,
            "write_file",
            json!({"path": p, "content": "pwned\n"}),
            "path_escape",
        );
        assert!(
            fs::symlink_metadata(fx.r(p))
                .unwrap()
                .file_type()
                .is_symlink(),
            "{p} must still be the link (not replaced)"
        );
    }
    fx.assert_untouched();
}

#[test]
fn symlinked_directory_mid_path_cannot_be_read() {
    let mut fx = Fx::new();
    plant_links(&fx);
    let ts = fx.tools();
    for p in [
        "ld/secret.txt",
        "ld_abs/secret.txt",
        "ld/sub/deeper.txt",
        "a/b/deep_ld/secret.txt",
        "ld/nonexistent.txt",
    ] {
        check(&ts, "read_file", json!({"path": p}), "path_escape");
        check(
            &ts,
            "search",
            json!({"query": "line", "path": p}),
            "path_escape",
        );
    }
    fx.assert_untouched();
}

#[test]
fn symlinked_directory_mid_path_cannot_be_written() {
    let mut fx = Fx::new();
    plant_links(&fx);
    let ts = fx.tools();
    for p in [
        "ld/new.txt",
        "ld_abs/new.txt",
        "ld/sub/new.txt",
        "ld/newdir/new.txt",
        "ld/secret.txt",
        "a/b/deep_ld/new.txt",
        "a/b/deep_ld/newdir/deeper/new.txt",
    ] {
        check(
            &ts,
            "write_file",
            json!({"path": p, "content": "pwned\n"}),
            "path_escape",
        );
        check(
            &ts,
            "edit_file",
            json!({"path": p, "find": "secret", "replace": "pwned"}),
            "path_escape",
        );
    }
    assert!(!fx.o("new.txt").exists());
    assert!(!fx.o("newdir").exists());
    fx.assert_untouched();
}

#[test]
fn symlinked_directory_as_walk_start_is_path_escape() {
    let mut fx = Fx::new();
    plant_links(&fx);
    let ts = fx.tools();
    for p in [
        "ld",
        "ld/",
        "ld_abs",
        "ld/sub",
        "c1",
        "a/b/deep_ld",
        "proc",
        "up",
        "self",
        "aliasdir",
    ] {
        walk_tools(&ts, p, "path_escape");
    }
    // Patterns naming a link's contents match nothing: the walk never enters it.
    for pattern in ["ld/**", "ld/*", "ld_abs/secret.txt", "up/**", "self/**"] {
        let out = check(&ts, "glob", json!({"pattern": pattern}), "ok");
        assert!(
            entries(&out).is_empty(),
            "glob {pattern}: {:?}",
            entries(&out)
        );
    }
    fx.assert_untouched();
}

#[test]
fn symlink_chains_and_loops_are_path_escape() {
    let mut fx = Fx::new();
    plant_links(&fx);
    symlink("loop2", fx.r("loop1")).unwrap();
    symlink("loop1", fx.r("loop2")).unwrap();
    let ts = fx.tools();
    for p in ["l1", "l2", "l3", "loop1", "loop2"] {
        file_tools(&ts, p, "path_escape");
    }
    for p in ["c1/secret.txt", "c2/secret.txt", "c1/new.txt", "loop1/x"] {
        file_tools(&ts, p, "path_escape");
    }
    for p in ["c1", "c2", "loop1"] {
        walk_tools(&ts, p, "path_escape");
    }
    assert!(!fx.o("new.txt").exists());
    fx.assert_untouched();
}

#[test]
fn symlink_to_proc_self_root_is_path_escape() {
    let mut fx = Fx::new();
    plant_links(&fx);
    let ts = fx.tools();
    // `proc` -> /proc/self/root, then the outside path below it.
    let via = format!("proc{}", abs(&fx.o("secret.txt")));
    let via_new = format!("proc{}", abs(&fx.o("new.txt")));
    let via_dir = format!("proc{}", abs(&fx.outside));
    file_tools(&ts, &via, "path_escape");
    file_tools(&ts, &via_new, "path_escape");
    file_tools(&ts, "proc/etc/passwd", "path_escape");
    walk_tools(&ts, &via_dir, "path_escape");
    walk_tools(&ts, "proc", "path_escape");
    assert!(!fx.o("new.txt").exists());
    fx.assert_untouched();
}

#[test]
fn magic_links_to_open_descriptors_are_path_escape() {
    let mut fx = Fx::new();
    // Keep the secret and the outside directory open, and point links at
    // their /proc/self/fd entries.
    let file = fs::File::open(fx.o("secret.txt")).unwrap();
    let dir = fs::File::open(&fx.outside).unwrap();
    use std::os::fd::AsRawFd;
    symlink(
        format!("/proc/self/fd/{}", file.as_raw_fd()),
        fx.r("fdfile"),
    )
    .unwrap();
    symlink(format!("/proc/self/fd/{}", dir.as_raw_fd()), fx.r("fddir")).unwrap();
    symlink("/proc/self/cwd", fx.r("cwd")).unwrap();
    let ts = fx.tools();
    file_tools(&ts, "fdfile", "path_escape");
    file_tools(&ts, "fddir/secret.txt", "path_escape");
    file_tools(&ts, "fddir/new.txt", "path_escape");
    file_tools(&ts, "cwd/Cargo.toml", "path_escape");
    walk_tools(&ts, "fddir", "path_escape");
    assert!(!fx.o("new.txt").exists());
    drop((file, dir));
    fx.assert_untouched();
}

#[test]
fn dangling_symlink_write_does_not_create_the_target() {
    let mut fx = Fx::new();
    plant_links(&fx);
    symlink(fx.o("created_abs.txt"), fx.r("dang_abs")).unwrap();
    let ts = fx.tools();
    for p in ["dang", "dang_abs"] {
        check(
            &ts,
            "write_file",
            json!({"path": p, "content": "pwned\n"}),
            "path_escape",
        );
        check(&ts, "read_file", json!({"path": p}), "path_escape");
        check(
            &ts,
            "edit_file",
            json!({"path": p, "find": "x", "replace": "y"}),
            "path_escape",
        );
        check(
            &ts,
            "write_file",
            json!({"path": p, "content": "pwned again\n"}),
            "path_escape",
        );
        assert!(
            fs::symlink_metadata(fx.r(p))
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }
    assert!(!fx.o("created.txt").exists());
    assert!(!fx.o("created_abs.txt").exists());
    fx.assert_untouched();
}

#[test]
fn dangling_directory_symlink_write_does_not_create_outside() {
    let mut fx = Fx::new();
    symlink("../outside/newdir", fx.r("dangdir")).unwrap();
    symlink("../outside/newdir2/deeper", fx.r("dangdir2")).unwrap();
    let ts = fx.tools();
    for p in ["dangdir/x.txt", "dangdir/sub/x.txt", "dangdir2/x.txt"] {
        check(
            &ts,
            "write_file",
            json!({"path": p, "content": "pwned\n"}),
            "path_escape",
        );
    }
    walk_tools(&ts, "dangdir", "path_escape");
    assert!(!fx.o("newdir").exists());
    assert!(!fx.o("newdir2").exists());
    fx.assert_untouched();
}

#[test]
fn symlinks_pointing_inside_the_root_are_path_escape() {
    let mut fx = Fx::new();
    plant_links(&fx);
    let ts = fx.tools();
    check(&ts, "read_file", json!({"path": "alias"}), "path_escape");
    check(
        &ts,
        "read_file",
        json!({"path": "aliasdir/b/c.txt"}),
        "path_escape",
    );
    // The target was read legitimately; writing through the alias still fails.
    check(&ts, "read_file", json!({"path": "inside.txt"}), "ok");
    check(
        &ts,
        "write_file",
        json!({"path": "alias", "content": "pwned\n"}),
        "path_escape",
    );
    check(
        &ts,
        "edit_file",
        json!({"path": "alias", "find": "inside", "replace": "pwned"}),
        "path_escape",
    );
    check(&ts, "read_file", json!({"path": "a/b/c.txt"}), "ok");
    check(
        &ts,
        "write_file",
        json!({"path": "aliasdir/b/c.txt", "content": "pwned\n"}),
        "path_escape",
    );
    check(
        &ts,
        "write_file",
        json!({"path": "aliasdir/new.txt", "content": "pwned\n"}),
        "path_escape",
    );
    assert_eq!(
        fs::read_to_string(fx.r("inside.txt")).unwrap(),
        "inside line\n"
    );
    assert_eq!(fs::read_to_string(fx.r("a/b/c.txt")).unwrap(), "c line\n");
    assert!(!fx.r("a/new.txt").exists());
    assert!(
        fs::symlink_metadata(fx.r("alias"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    fx.assert_untouched();
}

#[test]
fn symlinks_to_the_root_and_its_parent_are_path_escape() {
    let mut fx = Fx::new();
    plant_links(&fx);
    symlink(&fx.root, fx.r("self_abs")).unwrap();
    let ts = fx.tools();
    for p in [
        "self/inside.txt",
        "self_abs/inside.txt",
        "self/self/inside.txt",
        "up/outside/secret.txt",
        "up/root-evil/x",
        "up/outside/new.txt",
        "self/new.txt",
    ] {
        file_tools(&ts, p, "path_escape");
    }
    walk_tools(&ts, "self_abs", "path_escape");
    assert!(!fx.r("new.txt").exists());
    assert!(!fx.o("new.txt").exists());
    fx.assert_untouched();
}

#[test]
fn glob_never_follows_symlinks() {
    let mut fx = Fx::new();
    plant_links(&fx);
    let ts = fx.tools();
    for pattern in [
        "**",
        "**/*",
        "**/secret.txt",
        "**/deeper.txt",
        "*/*",
        "**/x",
    ] {
        let out = check(&ts, "glob", json!({"pattern": pattern}), "ok");
        let got = entries(&out);
        let real: BTreeSet<&str> = ["inside.txt", "a/b/c.txt"].into_iter().collect();
        for e in &got {
            assert!(
                real.contains(e.as_str()),
                "glob {pattern}: `{e}` is not a regular file of the root (all: {got:?})"
            );
        }
    }
    let out = check(&ts, "glob", json!({"pattern": "**"}), "ok");
    assert_eq!(entries(&out), vec!["a/b/c.txt", "inside.txt"]);
    fx.assert_untouched();
}

#[test]
fn list_files_never_follows_symlinks() {
    let mut fx = Fx::new();
    plant_links(&fx);
    let ts = fx.tools();
    for args in [
        json!({}),
        json!({"path": "a"}),
        json!({"glob": "*.txt"}),
        json!({"depth": 10}),
    ] {
        let out = check(&ts, "list_files", args.clone(), "ok");
        for e in entries(&out) {
            for link in [
                "ld",
                "ld_abs",
                "c1",
                "c2",
                "proc",
                "up",
                "self",
                "aliasdir",
                "a/b/deep_ld",
            ] {
                assert!(
                    !e.starts_with(&format!("{link}/")),
                    "list_files {args}: entered link `{link}`: `{e}`"
                );
            }
            assert!(
                !e.contains("secret.txt") && !e.contains("deeper.txt"),
                "list_files {args}: listed an outside file: `{e}`"
            );
        }
    }
    let out = check(&ts, "list_files", json!({}), "ok");
    let got = entries(&out);
    assert!(
        got.iter()
            .any(|e| e.starts_with("ld") && e.contains("symlink")),
        "links are reported as links: {got:?}"
    );
    fx.assert_untouched();
}

#[test]
fn search_never_follows_symlinks() {
    let mut fx = Fx::new();
    plant_links(&fx);
    let ts = fx.tools();
    for args in [
        json!({"query": "secret line"}),
        json!({"query": "secret"}),
        json!({"query": "SECRET", "case_insensitive": true}),
        json!({"query": "MARK.R", "regex": true}),
        json!({"query": "secret", "glob": "*.txt"}),
        json!({"query": "secret", "glob": "**/secret.txt"}),
        json!({"query": "secret", "path": "a"}),
        json!({"query": "line", "context": 5}),
    ] {
        let out = check(&ts, "search", args.clone(), "ok");
        for hit in out.structured["matches"].as_array().unwrap() {
            let path = hit["path"].as_str().unwrap();
            assert!(
                path == "inside.txt" || path == "a/b/c.txt",
                "search {args}: searched `{path}`, which is not a regular file of the root"
            );
        }
    }
    let out = check(&ts, "search", json!({"query": "line"}), "ok");
    assert_eq!(
        out.structured["total"], 2,
        "only inside.txt and a/b/c.txt: {}",
        out.text
    );
    fx.assert_untouched();
}

#[test]
fn changes_never_follows_symlinks() {
    let mut fx = Fx::new();
    plant_links(&fx);
    let ts = fx.tools();
    check(&ts, "read_file", json!({"path": "inside.txt"}), "ok");
    check(
        &ts,
        "write_file",
        json!({"path": "inside.txt", "content": "changed\n"}),
        "ok",
    );
    let out = check(&ts, "changes", json!({}), "ok");
    assert!(
        !out.text.contains("secret.txt") && !out.text.contains("ld/"),
        "changes looked through a link: {}",
        out.text
    );
    assert!(out.text.contains("inside.txt"), "{}", out.text);
    fx.assert_untouched();
}

// Hard links
//
// A hard link is the same inode under another name, so reading `root/hl`
// reads the outside file's bytes: that is allowed by design (the kernel
// cannot tell the two names apart, and SPEC refuses symbolic links only).
// The outside file used here therefore does not hold the marker. Writing
// must not reach the outside name: writes are a temp file plus a rename,
// which replaces the directory entry and breaks the link.

const LINKED: &str = "hard linked line\n";

fn hard_link_fixture() -> Fx {
    let fx = Fx::new();
    fs::write(fx.o("linked.txt"), LINKED).unwrap();
    fs::hard_link(fx.o("linked.txt"), fx.r("hl")).unwrap();
    fx
}

#[test]
fn hard_link_write_file_breaks_the_link() {
    let mut fx = hard_link_fixture();
    let ts = fx.tools();
    let out = check(&ts, "read_file", json!({"path": "hl"}), "ok");
    assert!(out.text.contains("hard linked line"), "{}", out.text);
    check(
        &ts,
        "write_file",
        json!({"path": "hl", "content": "rewritten\n"}),
        "ok",
    );
    assert_eq!(fs::read_to_string(fx.r("hl")).unwrap(), "rewritten\n");
    assert_eq!(fs::read_to_string(fx.o("linked.txt")).unwrap(), LINKED);
    assert_ne!(
        fs::metadata(fx.r("hl")).unwrap().ino(),
        fs::metadata(fx.o("linked.txt")).unwrap().ino(),
        "the write must replace the entry, not the shared inode"
    );
    fx.assert_untouched();
}

#[test]
fn hard_link_edit_file_breaks_the_link() {
    let mut fx = hard_link_fixture();
    let ts = fx.tools();
    check(&ts, "read_file", json!({"path": "hl"}), "ok");
    let out = check(
        &ts,
        "edit_file",
        json!({"path": "hl", "find": "hard", "replace": "soft"}),
        "ok",
    );
    assert!(out.text.contains("soft"), "{}", out.text);
    assert_eq!(
        fs::read_to_string(fx.r("hl")).unwrap(),
        "soft linked line\n"
    );
    assert_eq!(fs::read_to_string(fx.o("linked.txt")).unwrap(), LINKED);
    fx.assert_untouched();
}

#[test]
fn hard_link_write_without_read_is_not_read() {
    let mut fx = hard_link_fixture();
    let ts = fx.tools();
    check(
        &ts,
        "write_file",
        json!({"path": "hl", "content": "pwned\n"}),
        "not_read",
    );
    check(
        &ts,
        "edit_file",
        json!({"path": "hl", "find": "hard", "replace": "pwned"}),
        "not_read",
    );
    assert_eq!(fs::read_to_string(fx.r("hl")).unwrap(), LINKED);
    assert_eq!(fs::read_to_string(fx.o("linked.txt")).unwrap(), LINKED);
    fx.assert_untouched();
}

#[test]
fn read_before_write_still_holds() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    check(
        &ts,
        "write_file",
        json!({"path": "inside.txt", "content": "x\n"}),
        "not_read",
    );
    check(
        &ts,
        "edit_file",
        json!({"path": "inside.txt", "find": "inside", "replace": "x"}),
        "not_read",
    );
    // A read under another spelling of the same path counts.
    check(&ts, "read_file", json!({"path": "a/../inside.txt"}), "ok");
    check(
        &ts,
        "write_file",
        json!({"path": "./inside.txt", "content": "rewritten\n"}),
        "ok",
    );
    // A refused read records nothing.
    check(
        &ts,
        "read_file",
        json!({"path": "../root/a/b/c.txt"}),
        "path_escape",
    );
    check(
        &ts,
        "write_file",
        json!({"path": "a/b/c.txt", "content": "x\n"}),
        "not_read",
    );
    // The path guard comes first: an escape is path_escape, never not_read.
    check(
        &ts,
        "write_file",
        json!({"path": "../outside/secret.txt", "content": "x\n"}),
        "path_escape",
    );
    assert_eq!(fs::read_to_string(fx.r("a/b/c.txt")).unwrap(), "c line\n");
    fx.assert_untouched();
}

#[test]
fn file_swapped_for_a_symlink_after_read_is_not_written() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    check(&ts, "read_file", json!({"path": "inside.txt"}), "ok");
    fs::remove_file(fx.r("inside.txt")).unwrap();
    symlink("../outside/secret.txt", fx.r("inside.txt")).unwrap();
    check(
        &ts,
        "write_file",
        json!({"path": "inside.txt", "content": "pwned\n"}),
        "path_escape",
    );
    check(
        &ts,
        "edit_file",
        json!({"path": "inside.txt", "find": "secret", "replace": "pwned"}),
        "path_escape",
    );
    check(
        &ts,
        "read_file",
        json!({"path": "inside.txt"}),
        "path_escape",
    );
    fx.assert_untouched();
}

#[test]
fn directory_swapped_for_a_symlink_after_read_is_not_written() {
    let mut fx = Fx::new();
    // The outside twin has the very bytes read inside, so a stale check
    // alone would not notice the swap.
    fs::create_dir_all(fx.o("b")).unwrap();
    fs::write(fx.o("b/c.txt"), "c line\n").unwrap();
    let ts = fx.tools();
    check(&ts, "read_file", json!({"path": "a/b/c.txt"}), "ok");
    fs::rename(fx.r("a"), fx.r("a.real")).unwrap();
    symlink("../outside", fx.r("a")).unwrap();
    check(
        &ts,
        "write_file",
        json!({"path": "a/b/c.txt", "content": "pwned\n"}),
        "path_escape",
    );
    check(
        &ts,
        "edit_file",
        json!({"path": "a/b/c.txt", "find": "c line", "replace": "pwned"}),
        "path_escape",
    );
    check(
        &ts,
        "write_file",
        json!({"path": "a/b/new.txt", "content": "pwned\n"}),
        "path_escape",
    );
    assert_eq!(fs::read_to_string(fx.o("b/c.txt")).unwrap(), "c line\n");
    assert!(!fx.o("b/new.txt").exists());
    fx.assert_untouched();
}

/// Tool calls made against the swapping directory.
const RACE_ITERATIONS: u64 = 10_000;

/// A thread that swaps `root/d` (a real directory) and `root/.d-swap` (a
/// link to outside/) with renameat2 RENAME_EXCHANGE in a tight loop, so `d`
/// is always either the real directory or the link, never missing.
struct Swapper {
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
    handle: JoinHandle<()>,
}

impl Swapper {
    /// Sets up `d` and `.d-swap` (call before `Fx::tools`).
    fn prepare(fx: &Fx) {
        fs::create_dir(fx.r("d")).unwrap();
        fs::write(fx.r("d/inner.txt"), "inner line\n").unwrap();
        symlink(&fx.outside, fx.r(".d-swap")).unwrap();
    }

    fn start(fx: &Fx) -> Swapper {
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicU64::new(0));
        let d = fx.r("d");
        let alt = fx.r(".d-swap");
        let handle = {
            let stop = stop.clone();
            let swaps = swaps.clone();
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    rustix::fs::renameat_with(
                        rustix::fs::CWD,
                        &d,
                        rustix::fs::CWD,
                        &alt,
                        rustix::fs::RenameFlags::EXCHANGE,
                    )
                    .expect("RENAME_EXCHANGE");
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        Swapper {
            stop,
            swaps,
            handle,
        }
    }

    /// Swaps made so far.
    fn swaps(&self) -> u64 {
        self.swaps.load(Ordering::Relaxed)
    }

    /// Stops the swapping; returns how many swaps were made.
    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap();
        self.swaps.load(Ordering::Relaxed)
    }
}

#[test]
fn race_directory_swapped_for_symlink_never_escapes() {
    let mut fx = Fx::new();
    Swapper::prepare(&fx);
    let ts = fx.tools();

    let swapper = Swapper::start(&fx);

    let expected_outside: BTreeSet<String> = ["secret.txt", "sub"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let outside_names = |fx: &Fx| -> BTreeSet<String> {
        fs::read_dir(&fx.outside)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    let mut calls = 0u64;
    let started = Instant::now();
    for i in 0..RACE_ITERATIONS {
        let (tool, out) = match i % 5 {
            0 => (
                "read_file",
                call(&ts, "read_file", json!({"path": "d/secret.txt"})),
            ),
            1 => {
                // Read first, so that the write reaches the atomic replace
                // (an existing file needs a read in this run).
                let _ = call(&ts, "read_file", json!({"path": "d/new.txt"}));
                calls += 1;
                (
                    "write_file",
                    call(
                        &ts,
                        "write_file",
                        json!({"path": "d/new.txt", "content": format!("write {i}\n")}),
                    ),
                )
            }
            2 => (
                "search",
                call(&ts, "search", json!({"query": "line", "path": "d"})),
            ),
            3 => ("list_files", call(&ts, "list_files", json!({"path": "d"}))),
            _ => ("glob", call(&ts, "glob", json!({"pattern": "d/**"}))),
        };
        calls += 1;
        let kind = kind_of(&out);
        if tool == "read_file" {
            assert!(
                out.is_error,
                "read_file d/secret.txt succeeded: {}",
                out.text
            );
        }
        if !out.is_error {
            let listed: Vec<String> = match tool {
                "search" => out.structured["matches"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|h| h["path"].as_str().unwrap().to_string())
                    .collect(),
                "list_files" | "glob" => entries(&out),
                _ => Vec::new(),
            };
            for e in listed {
                assert!(
                    e.starts_with("d/") && !e.contains("secret") && !e.contains("sub"),
                    "{tool} at iteration {i} saw outside/ through the link: `{e}`"
                );
            }
        }
        *outcomes.entry(format!("{tool} {kind}")).or_default() += 1;
        if i % 250 == 0 {
            assert_eq!(
                outside_names(&fx),
                expected_outside,
                "outside/ gained an entry by iteration {i}"
            );
        }
    }
    let elapsed = started.elapsed();
    let swaps = swapper.stop();
    eprintln!(
        "race: {RACE_ITERATIONS} iterations, {calls} tool calls, {swaps} swaps in {elapsed:.2?}; \
         outcomes: {outcomes:?}"
    );
    assert!(calls >= 10_000);
    assert!(swaps >= 100, "the swapper barely ran ({swaps} swaps)");
    // Both states were hit: the race was real.
    assert!(
        outcomes.keys().any(|k| k.ends_with("path_escape")),
        "never caught `d` as a link: {outcomes:?}"
    );
    assert!(
        outcomes.get("list_files ok").copied().unwrap_or(0) > 0,
        "never caught `d` as a directory: {outcomes:?}"
    );
    assert_eq!(outside_names(&fx), expected_outside);
    fx.assert_untouched();
}

/// SPEC §1: a path whose resolution passes through a symbolic link is
/// `path_escape`. When `d` is the link at the moment of the open, the answer
/// must say so, not that `d` is missing or is a file (which would send the
/// model the wrong way). Only `ok` (d was the directory) and `path_escape`
/// are right answers for these calls.
#[test]
fn race_directory_swapped_for_symlink_reports_path_escape() {
    let mut fx = Fx::new();
    Swapper::prepare(&fx);
    fs::write(fx.r("d/new.txt"), "new\n").unwrap();
    let ts = fx.tools();
    let swapper = Swapper::start(&fx);
    let mut wrong: BTreeMap<String, (u64, String)> = BTreeMap::new();
    // At least 3,000 calls, and on until the swapper has really raced them
    // (on a loaded machine it may hardly be scheduled at first).
    let started = Instant::now();
    let mut i = 0u64;
    while i < 3_000 || (swapper.swaps() < 200_000 && started.elapsed() < Duration::from_secs(20)) {
        i += 1;
        let (tool, out) = match i % 3 {
            0 => ("list_files", call(&ts, "list_files", json!({"path": "d"}))),
            1 => (
                "search",
                call(&ts, "search", json!({"query": "line", "path": "d"})),
            ),
            _ => {
                let _ = call(&ts, "read_file", json!({"path": "d/new.txt"}));
                (
                    "write_file",
                    call(
                        &ts,
                        "write_file",
                        json!({"path": "d/new.txt", "content": format!("write {i}\n")}),
                    ),
                )
            }
        };
        let kind = kind_of(&out);
        // write_file may also find the file changed by its own earlier
        // write or not yet read in this run when the read hit the link.
        let fine = match tool {
            "write_file" => ["ok", "path_escape", "not_read", "stale"].contains(&kind.as_str()),
            _ => ["ok", "path_escape"].contains(&kind.as_str()),
        };
        if !fine {
            let e = wrong
                .entry(format!("{tool} {kind}"))
                .or_insert((0, out.text.clone()));
            e.0 += 1;
        }
    }
    let swaps = swapper.stop();
    assert!(swaps >= 1_000, "the swapper barely ran ({swaps} swaps)");
    assert!(
        wrong.is_empty(),
        "calls that met `d` as a symbolic link answered with the wrong kind \
         (count, first message): {wrong:#?}"
    );
    fx.assert_untouched();
}
