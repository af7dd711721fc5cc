#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Attack suite against path confinement, driven only through the public
//! tool API of the `local` provider (`local_sandbox` + `Toolset::call`).
//!
//! Every test builds the same layout in a fresh temp dir:
//!
//! ```text
//! <tmp>/root/                 the workspace (inside.txt, a/b/c.txt)
//! <tmp>/root-evil/            a sibling whose name extends the root's (x, sub/y)
//! <tmp>/outside/secret.txt    holds MARKER (also outside/sub/deeper.txt)
//! ```
//!
//! and checks, for every call, that the result (text and structured JSON)
//! never contains MARKER, and at the end of every test that nothing outside
//! `root/` was created or modified: `outside/` and `root-evil/` are compared
//! recursively (kind, mode, mtime, content, link targets) and the parent's
//! entries by name and kind, before and after.
//!
//! SPEC §1: absolute paths (even inside the root), `..` that climbs out and
//! any path that passes through a symbolic link (even one pointing inside
//! the root) are `path_escape`; walks never follow links. SPEC §3: FIFOs,
//! devices and sockets are refused without being opened; writes are atomic
//! (temp file + rename) and need a `read_file` of an existing file first.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, symlink};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use cubby::{ToolOutput, Toolset};
use serde_json::{Value, json};

/// What must never come back from a tool.
const MARKER: &str = "OUTSIDE-MARKER-7f3a";
/// Content of `outside/secret.txt` (and `outside/sub/deeper.txt`).
const SECRET: &str = "secret line OUTSIDE-MARKER-7f3a\n";
/// How long a call on a FIFO or device may take before it counts as blocked.
const PROMPT: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------
// Fixture
// ---------------------------------------------------------------------------

/// A description of every object of the guarded trees, by path.
type Snap = BTreeMap<String, String>;

struct Fx {
    _tmp: tempfile::TempDir,
    base: PathBuf,
    root: PathBuf,
    outside: PathBuf,
    evil: PathBuf,
    before: Option<Snap>,
}

impl Fx {
    fn new() -> Fx {
        assert!(SECRET.contains(MARKER));
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let root = base.join("root");
        let outside = base.join("outside");
        let evil = base.join("root-evil");
        fs::create_dir_all(root.join("a/b")).unwrap();
        fs::write(root.join("inside.txt"), "inside line\n").unwrap();
        fs::write(root.join("a/b/c.txt"), "c line\n").unwrap();
        fs::create_dir_all(outside.join("sub")).unwrap();
        fs::write(outside.join("secret.txt"), SECRET).unwrap();
        fs::write(outside.join("sub/deeper.txt"), SECRET).unwrap();
        fs::create_dir_all(evil.join("sub")).unwrap();
        fs::write(evil.join("x"), "evil original\n").unwrap();
        fs::write(evil.join("sub/y"), "evil original y\n").unwrap();
        Fx {
            _tmp: tmp,
            base,
            root,
            outside,
            evil,
            before: None,
        }
    }

    /// A path inside the root.
    fn r(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// A path inside `outside/`.
    fn o(&self, rel: &str) -> PathBuf {
        self.outside.join(rel)
    }

    /// Takes the "before" snapshot and builds a default toolset on the root.
    /// Call it once the test's own setup is done.
    fn tools(&mut self) -> Toolset {
        self.before = Some(self.snap());
        let sandbox = cubby::local_sandbox(&self.root).unwrap();
        Toolset::builder(sandbox).build().unwrap()
    }

    fn snap(&self) -> Snap {
        let mut snap = Snap::new();
        let base_meta = fs::symlink_metadata(&self.base).unwrap();
        snap.insert(
            "<base>".into(),
            format!("dir mtime={}.{}", base_meta.mtime(), base_meta.mtime_nsec()),
        );
        let mut names: Vec<_> = fs::read_dir(&self.base)
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        names.sort_by_key(|e| e.file_name());
        for e in names {
            let ft = e.file_type().unwrap();
            snap.insert(
                format!("<base>/{}", e.file_name().to_string_lossy()),
                format!("{ft:?}"),
            );
        }
        snap_tree(&self.base, &self.outside, &mut snap);
        snap_tree(&self.base, &self.evil, &mut snap);
        snap
    }

    /// Nothing outside the root was created, removed or modified.
    #[track_caller]
    fn assert_untouched(&self) {
        let before = self.before.as_ref().expect("tools() takes the snapshot");
        let after = self.snap();
        assert_eq!(
            before, &after,
            "something outside root/ was created or modified"
        );
        assert_eq!(fs::read_to_string(self.o("secret.txt")).unwrap(), SECRET);
    }
}

fn describe(p: &Path) -> String {
    let m = fs::symlink_metadata(p).unwrap();
    let ft = m.file_type();
    let mode = m.mode() & 0o7777;
    let mtime = format!("{}.{}", m.mtime(), m.mtime_nsec());
    if ft.is_symlink() {
        format!("symlink -> {}", fs::read_link(p).unwrap().display())
    } else if ft.is_dir() {
        format!("dir mode={mode:o} mtime={mtime}")
    } else if ft.is_file() {
        let content = fs::read(p).unwrap();
        format!(
            "file mode={mode:o} mtime={mtime} content={:?}",
            String::from_utf8_lossy(&content)
        )
    } else {
        format!("special {ft:?} mode={mode:o} rdev={}", m.rdev())
    }
}

fn snap_tree(base: &Path, dir: &Path, snap: &mut Snap) {
    let rel = dir.strip_prefix(base).unwrap().display().to_string();
    snap.insert(rel, describe(dir));
    let mut entries: Vec<_> = fs::read_dir(dir).unwrap().map(|e| e.unwrap()).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let p = e.path();
        if e.file_type().unwrap().is_dir() {
            snap_tree(base, &p, snap);
        } else {
            let rel = p.strip_prefix(base).unwrap().display().to_string();
            snap.insert(rel, describe(&p));
        }
    }
}

fn abs(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

// ---------------------------------------------------------------------------
// Calling tools
// ---------------------------------------------------------------------------

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 160 {
        format!("{}…", s.chars().take(160).collect::<String>())
    } else {
        s
    }
}

/// The marker never leaves the toolset.
#[track_caller]
fn assert_clean(out: &ToolOutput, what: &str) {
    assert!(
        !out.text.contains(MARKER),
        "{what}: outside content leaked into the text: {}",
        out.text
    );
    let structured = out.structured.to_string();
    assert!(
        !structured.contains(MARKER),
        "{what}: outside content leaked into structured output: {structured}"
    );
}

/// Calls a tool and checks that the result carries no outside content.
#[track_caller]
fn call(ts: &Toolset, tool: &str, args: Value) -> ToolOutput {
    let what = format!("{tool} {}", short(&args));
    let out = ts.call(tool, args);
    assert_clean(&out, &what);
    out
}

/// `ok` for a success, the error kind otherwise.
fn kind_of(out: &ToolOutput) -> String {
    if !out.is_error {
        return "ok".into();
    }
    out.structured
        .pointer("/error/kind")
        .and_then(Value::as_str)
        .unwrap_or("<no kind>")
        .to_string()
}

#[track_caller]
fn expect_kind(out: &ToolOutput, want: &str, what: &str) {
    let got = kind_of(out);
    assert_eq!(got, want, "{what}: expected {want}, got: {}", out.text);
    if want != "ok" {
        assert!(
            out.text.starts_with(&format!("ERROR {want}: ")),
            "{what}: error text must start with `ERROR {want}: `, got: {}",
            out.text
        );
    }
    if want == "path_escape" {
        assert!(
            out.text.contains("relative to the workspace root"),
            "{what}: a path_escape message must say to pass a path relative to the root: {}",
            out.text
        );
    }
}

/// Calls `tool` and expects `want` (`ok` or an error kind).
#[track_caller]
fn check(ts: &Toolset, tool: &str, args: Value, want: &str) -> ToolOutput {
    let what = format!("{tool} {}", short(&args));
    let out = call(ts, tool, args);
    expect_kind(&out, want, &what);
    out
}

/// read_file, write_file and edit_file on `path`, each expecting `want`.
#[track_caller]
fn file_tools(ts: &Toolset, path: &str, want: &str) {
    check(ts, "read_file", json!({ "path": path }), want);
    check(
        ts,
        "write_file",
        json!({ "path": path, "content": "pwned\n" }),
        want,
    );
    check(
        ts,
        "edit_file",
        json!({ "path": path, "find": "secret", "replace": "pwned" }),
        want,
    );
}

/// glob, list_files and search with `path` as their start, each expecting `want`.
#[track_caller]
fn walk_tools(ts: &Toolset, path: &str, want: &str) {
    check(ts, "glob", json!({ "pattern": "**", "path": path }), want);
    check(ts, "list_files", json!({ "path": path }), want);
    check(ts, "search", json!({ "query": "line", "path": path }), want);
}

/// The entries of a successful glob / list_files result.
fn entries(out: &ToolOutput) -> Vec<String> {
    out.structured["entries"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Runs a call on its own thread and fails if it does not return within 5 s.
#[track_caller]
fn call_promptly(ts: &Toolset, tool: &'static str, args: Value) -> ToolOutput {
    let what = format!("{tool} {}", short(&args));
    let (tx, rx) = mpsc::channel();
    let ts = ts.clone();
    thread::spawn(move || {
        let _ = tx.send(ts.call(tool, args));
    });
    let started = Instant::now();
    match rx.recv_timeout(PROMPT) {
        Ok(out) => {
            assert_clean(&out, &what);
            out
        }
        Err(_) => panic!("{what} blocked: no result after {:?}", started.elapsed()),
    }
}

/// Like `check_refused`, on a thread, within 5 s.
#[track_caller]
fn refused_promptly(ts: &Toolset, tool: &'static str, args: Value) -> ToolOutput {
    let what = format!("{tool} {}", short(&args));
    let out = call_promptly(ts, tool, args);
    let kind = kind_of(&out);
    assert!(
        out.is_error,
        "{what}: expected a refusal, got: {}",
        out.text
    );
    assert!(
        kind != "internal" && kind != "timeout",
        "{what}: refused with the wrong kind: {}",
        out.text
    );
    out
}

fn mkfifo(p: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        p,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
}

/// `mknod PATH c 1 3` (a null device). Tests run as root; a failure fails.
fn mknod_null(p: &Path) {
    let status = Command::new("mknod")
        .arg(p)
        .args(["c", "1", "3"])
        .status()
        .expect("cannot run mknod");
    assert!(
        status.success(),
        "mknod {} c 1 3 failed ({status}); this suite runs as root and needs a device node",
        p.display()
    );
}

fn is_fifo(p: &Path) -> bool {
    fs::symlink_metadata(p).unwrap().file_type().is_fifo()
}

/// A thread blocked in a *blocking* open of `fifo` for writing. That open
/// only completes once somebody opens the FIFO for reading, so the flag
/// tells whether anyone (cubby) opened it.
fn fifo_watch(fifo: &Path) -> (Arc<AtomicBool>, JoinHandle<()>) {
    let opened = Arc::new(AtomicBool::new(false));
    let flag = opened.clone();
    let fifo = fifo.to_path_buf();
    let handle = thread::spawn(move || {
        let _w = fs::OpenOptions::new().write(true).open(&fifo);
        flag.store(true, Ordering::SeqCst);
    });
    // Let the watcher reach its blocking open.
    thread::sleep(Duration::from_millis(200));
    (opened, handle)
}

/// Releases a `fifo_watch` thread by opening the FIFO for reading.
fn fifo_release(fifo: &Path, handle: JoinHandle<()>) {
    let _r = rustix::fs::open(
        fifo,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::NONBLOCK,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    handle.join().unwrap();
}

/// Links of every flavour, all planted in the root.
fn plant_links(fx: &Fx) {
    // Files outside, by relative and absolute target.
    symlink("../outside/secret.txt", fx.r("ln")).unwrap();
    symlink(fx.o("secret.txt"), fx.r("ln_abs")).unwrap();
    // A directory outside.
    symlink("../outside", fx.r("ld")).unwrap();
    symlink(&fx.outside, fx.r("ld_abs")).unwrap();
    // Chains.
    symlink("l2", fx.r("l1")).unwrap();
    symlink("l3", fx.r("l2")).unwrap();
    symlink("../outside/secret.txt", fx.r("l3")).unwrap();
    symlink("c2", fx.r("c1")).unwrap();
    symlink("../outside", fx.r("c2")).unwrap();
    // The host's root through procfs.
    symlink("/proc/self/root", fx.r("proc")).unwrap();
    // The parent and the root itself.
    symlink("..", fx.r("up")).unwrap();
    symlink(".", fx.r("self")).unwrap();
    // Inside targets.
    symlink("inside.txt", fx.r("alias")).unwrap();
    symlink("a", fx.r("aliasdir")).unwrap();
    // Dangling.
    symlink("../outside/created.txt", fx.r("dang")).unwrap();
    // A nested link to outside.
    symlink("../../outside", fx.r("a/b/deep_ld")).unwrap();
}

// ---------------------------------------------------------------------------
// Absolute paths
// ---------------------------------------------------------------------------

#[test]
fn absolute_path_outside_is_path_escape_for_every_file_tool() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    for p in [
        abs(&fx.o("secret.txt")),
        abs(&fx.o("new.txt")),
        abs(&fx.o("sub/deeper.txt")),
        abs(&fx.o("newdir/new.txt")),
        "/etc/passwd".to_string(),
        "/".to_string(),
        "//".to_string(),
    ] {
        file_tools(&ts, &p, "path_escape");
    }
    assert!(!fx.o("new.txt").exists());
    assert!(!fx.o("newdir").exists());
    fx.assert_untouched();
}

#[test]
fn absolute_path_inside_the_root_is_path_escape() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    let inside = abs(&fx.r("inside.txt"));
    file_tools(&ts, &inside, "path_escape");
    file_tools(&ts, &abs(&fx.r("a/b/c.txt")), "path_escape");
    file_tools(&ts, &abs(&fx.r("new.txt")), "path_escape");
    // Even after a legitimate read of the same file, the absolute spelling
    // stays refused.
    check(&ts, "read_file", json!({"path": "inside.txt"}), "ok");
    check(
        &ts,
        "write_file",
        json!({"path": inside, "content": "x"}),
        "path_escape",
    );
    assert_eq!(
        fs::read_to_string(fx.r("inside.txt")).unwrap(),
        "inside line\n"
    );
    assert!(!fx.r("new.txt").exists());
    fx.assert_untouched();
}

#[test]
fn absolute_path_as_walk_start_is_path_escape() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    for p in [
        abs(&fx.outside),
        abs(&fx.root),
        abs(&fx.r("a")),
        abs(&fx.evil),
        "/".to_string(),
    ] {
        walk_tools(&ts, &p, "path_escape");
    }
    fx.assert_untouched();
}

#[test]
fn absolute_glob_patterns_match_nothing_outside() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    let o = abs(&fx.outside);
    for pattern in [
        format!("{o}/*"),
        format!("{o}/**"),
        "/**".to_string(),
        "/**/secret.txt".to_string(),
    ] {
        let out = check(&ts, "glob", json!({"pattern": pattern}), "ok");
        assert!(
            entries(&out).is_empty(),
            "glob {pattern}: matched {:?}",
            entries(&out)
        );
        let out = check(&ts, "list_files", json!({"glob": pattern}), "ok");
        assert!(
            !entries(&out).iter().any(|e| e.contains("secret")),
            "list_files glob {pattern}: {:?}",
            entries(&out)
        );
        let out = check(
            &ts,
            "search",
            json!({"query": "line", "glob": pattern}),
            "ok",
        );
        assert_eq!(out.structured["total"], 0, "search glob {pattern}");
    }
    fx.assert_untouched();
}

#[test]
fn absolute_procfs_and_device_paths_are_path_escape() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    for p in [
        format!("/proc/self/root{}", abs(&fx.o("secret.txt"))),
        "/proc/self/cwd/Cargo.toml".to_string(),
        "/proc/self/environ".to_string(),
        "/dev/null".to_string(),
        "/dev/zero".to_string(),
    ] {
        file_tools(&ts, &p, "path_escape");
    }
    fx.assert_untouched();
}

// ---------------------------------------------------------------------------
// `..` in every position
// ---------------------------------------------------------------------------

#[test]
fn dotdot_leading_is_path_escape() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    file_tools(&ts, "../outside/secret.txt", "path_escape");
    file_tools(&ts, "../outside/sub/deeper.txt", "path_escape");
    file_tools(&ts, "../outside/new.txt", "path_escape");
    file_tools(&ts, "../x", "path_escape");
    assert!(!fx.o("new.txt").exists());
    assert!(!fx.base.join("x").exists());
    fx.assert_untouched();
}

#[test]
fn dotdot_after_a_real_directory_is_path_escape() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    file_tools(&ts, "a/../../outside/secret.txt", "path_escape");
    file_tools(&ts, "a/b/../../../outside/secret.txt", "path_escape");
    file_tools(&ts, "nonexistent/../../outside/secret.txt", "path_escape");
    fx.assert_untouched();
}

#[test]
fn dotdot_deep_write_creates_nothing() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    for p in [
        "a/b/../../../x",
        "a/b/../../../outside/x",
        "a/b/../../../outside/newdir/x",
        "new1/new2/../../../x",
    ] {
        check(
            &ts,
            "write_file",
            json!({"path": p, "content": "pwned\n"}),
            "path_escape",
        );
    }
    assert!(!fx.base.join("x").exists());
    assert!(!fx.o("x").exists());
    assert!(!fx.o("newdir").exists());
    assert!(
        !fx.r("new1").exists(),
        "a refused path must create no parents"
    );
    fx.assert_untouched();
}

#[test]
fn dotdot_alone_is_path_escape() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    for p in ["..", "../", "./..", "../.", "..//", "../.."] {
        file_tools(&ts, p, "path_escape");
    }
    fx.assert_untouched();
}

#[test]
fn trailing_dotdot() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    // Climbing back to the root is fine (and the root is a directory) …
    check(&ts, "read_file", json!({"path": "a/.."}), "is_directory");
    check(
        &ts,
        "read_file",
        json!({"path": "a/b/../.."}),
        "is_directory",
    );
    check(
        &ts,
        "write_file",
        json!({"path": "a/..", "content": "x"}),
        "is_directory",
    );
    check(&ts, "list_files", json!({"path": "a/.."}), "ok");
    // … one more `..` is not.
    for p in [
        "a/../..",
        "a/b/../../..",
        "../outside/..",
        "a/b/c.txt/../../../..",
    ] {
        file_tools(&ts, p, "path_escape");
        walk_tools(&ts, p, "path_escape");
    }
    fx.assert_untouched();
}

#[test]
fn dotdot_as_walk_start_is_path_escape() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    for p in [
        "..",
        "../",
        "../outside",
        "../outside/sub",
        "a/../..",
        "./../outside",
        "../root",
        "../root-evil",
    ] {
        walk_tools(&ts, p, "path_escape");
    }
    fx.assert_untouched();
}

#[test]
fn dotdot_in_glob_patterns_matches_nothing_outside() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    for pattern in [
        "../outside/*",
        "../**",
        "../*/secret.txt",
        "**/../../outside/*",
        "a/../../outside/secret.txt",
        "../root-evil/*",
    ] {
        let out = call(&ts, "glob", json!({"pattern": pattern}));
        assert!(
            entries(&out).is_empty(),
            "glob {pattern}: matched {:?}",
            entries(&out)
        );
        let out = call(&ts, "list_files", json!({"glob": pattern}));
        assert!(
            !entries(&out)
                .iter()
                .any(|e| e.contains("secret") || e.starts_with("..")),
            "list_files glob {pattern}: {:?}",
            entries(&out)
        );
        let out = call(&ts, "search", json!({"query": "line", "glob": pattern}));
        assert!(
            out.is_error || out.structured["total"] == 0,
            "search glob {pattern}: {}",
            out.text
        );
    }
    fx.assert_untouched();
}

#[test]
fn odd_spellings_of_dotdot() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    for p in [
        ".//..//outside/secret.txt",
        "./../outside/secret.txt",
        "a/./../.././outside/secret.txt",
        "a//..//..//outside//secret.txt",
        "a/b/./../../../outside/./secret.txt",
    ] {
        file_tools(&ts, p, "path_escape");
    }
    // Encoded or look-alike forms are plain names inside the root.
    for p in [
        "%2e%2e/outside/secret.txt",
        "..%2foutside%2fsecret.txt",
        "..\\outside\\secret.txt",
        "\u{2025}/outside/secret.txt",
        "\u{ff0e}\u{ff0e}/outside/secret.txt",
    ] {
        check(&ts, "read_file", json!({"path": p}), "not_found");
    }
    check(
        &ts,
        "write_file",
        json!({"path": "..\\outside\\x", "content": "inside\n"}),
        "ok",
    );
    assert!(fx.r("..\\outside\\x").is_file());
    fx.assert_untouched();
}

#[test]
fn many_dotdots_are_path_escape() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    let many = "../".repeat(64) + "etc/passwd";
    for p in [
        many.as_str(),
        "../../../../../../../../etc/passwd",
        "a/b/c/../../../../../../etc/passwd",
        "a/b/../../a/b/../../../outside/secret.txt",
    ] {
        file_tools(&ts, p, "path_escape");
        walk_tools(&ts, p, "path_escape");
    }
    fx.assert_untouched();
}

// ---------------------------------------------------------------------------
// Symbolic links
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Sibling-prefix directory
// ---------------------------------------------------------------------------

#[test]
fn sibling_prefix_relative_is_path_escape() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    for p in [
        "../root-evil/x",
        "../root-evil/sub/y",
        "../root-evil/new.txt",
        "../root-evil/newdir/new.txt",
        "a/../../root-evil/x",
    ] {
        file_tools(&ts, p, "path_escape");
    }
    walk_tools(&ts, "../root-evil", "path_escape");
    assert!(!fx.evil.join("new.txt").exists());
    fx.assert_untouched();
}

#[test]
fn sibling_prefix_absolute_is_path_escape() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    // A naive `starts_with(root)` string check would accept these.
    let r = abs(&fx.root);
    for p in [
        format!("{r}-evil/x"),
        format!("{r}-evil/new.txt"),
        format!("{r}/../root-evil/x"),
    ] {
        file_tools(&ts, &p, "path_escape");
    }
    walk_tools(&ts, &format!("{r}-evil"), "path_escape");
    fx.assert_untouched();
}

#[test]
fn sibling_prefix_symlink_is_path_escape() {
    let mut fx = Fx::new();
    symlink("../root-evil", fx.r("ev")).unwrap();
    symlink(&fx.evil, fx.r("ev_abs")).unwrap();
    symlink("../root-evil/x", fx.r("evx")).unwrap();
    let ts = fx.tools();
    for p in ["ev/x", "ev_abs/x", "ev/new.txt", "ev/sub/y", "evx"] {
        file_tools(&ts, p, "path_escape");
    }
    walk_tools(&ts, "ev", "path_escape");
    walk_tools(&ts, "ev_abs", "path_escape");
    assert!(!fx.evil.join("new.txt").exists());
    fx.assert_untouched();
}

// ---------------------------------------------------------------------------
// NUL bytes, over-long names and paths
// ---------------------------------------------------------------------------

#[test]
fn nul_bytes_in_paths_are_invalid_input() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    for p in [
        "a\0b",
        "\0",
        "inside.txt\0",
        "inside.txt\0../../outside/secret.txt",
        "../outside/secret.txt\0",
        "\0/etc/passwd",
        "a/\0/b",
    ] {
        file_tools(&ts, p, "invalid_input");
        walk_tools(&ts, p, "invalid_input");
    }
    assert_eq!(
        fs::read_to_string(fx.r("inside.txt")).unwrap(),
        "inside line\n"
    );
    fx.assert_untouched();
}

#[test]
fn overlong_names_are_invalid_input() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    let long = "n".repeat(256);
    let long_utf8 = "\u{e9}".repeat(128); // 256 bytes, 128 chars
    for p in [
        long.clone(),
        format!("a/{long}"),
        format!("{long}/x.txt"),
        long_utf8.clone(),
    ] {
        file_tools(&ts, &p, "invalid_input");
        walk_tools(&ts, &p, "invalid_input");
    }
    // 255 bytes is the limit and works, inside the root.
    let max = "m".repeat(255);
    check(
        &ts,
        "write_file",
        json!({"path": max, "content": "ok\n"}),
        "ok",
    );
    assert!(fx.r(&max).is_file());
    let max_utf8 = "\u{e9}".repeat(127); // 254 bytes
    check(
        &ts,
        "write_file",
        json!({"path": max_utf8, "content": "ok\n"}),
        "ok",
    );
    assert!(fx.r(&max_utf8).is_file());
    fx.assert_untouched();
}

/// SPEC §2: guards run in order, input shape (`invalid_input`) before path
/// (`path_escape`); a NUL byte or an over-long path already wins over a
/// climb, and so must an over-long name.
#[test]
fn overlong_name_wins_over_a_climb() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    let long = "n".repeat(256);
    // Control: the shape checks on the whole string already come first.
    file_tools(&ts, "../outside/secret.txt\0", "invalid_input");
    file_tools(&ts, &format!("../{}", "a/".repeat(2100)), "invalid_input");
    for p in [format!("../{long}"), format!("a/../../{long}/x")] {
        file_tools(&ts, &p, "invalid_input");
        walk_tools(&ts, &p, "invalid_input");
    }
    fx.assert_untouched();
}

#[test]
fn overlong_paths_are_invalid_input() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    for p in [
        "a/".repeat(2049),                 // 4098 bytes
        "../".repeat(2000),                // climbs, but too long first
        "x/../".repeat(900),               // normalises to the root
        format!("{}x", "a/".repeat(2048)), // 4097 bytes
        "n".repeat(10_000),
    ] {
        assert!(p.len() > 4096);
        file_tools(&ts, &p, "invalid_input");
        walk_tools(&ts, &p, "invalid_input");
    }
    fx.assert_untouched();
}

#[test]
fn paths_at_the_length_limit_do_not_crash() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    // 15 names of 255 bytes + names of 200 and 55 bytes + 16 slashes = 4096.
    let mut names: Vec<String> = (0..15)
        .map(|i| format!("{i:x}").repeat(255)[..255].to_string())
        .collect();
    names.push("p".repeat(200));
    names.push("q".repeat(55));
    let p = names.join("/");
    assert_eq!(p.len(), 4096);
    for (tool, args) in [
        ("read_file", json!({"path": p})),
        ("write_file", json!({"path": p, "content": "x"})),
        ("edit_file", json!({"path": p, "find": "x", "replace": "y"})),
        ("glob", json!({"pattern": "**", "path": p})),
        ("list_files", json!({"path": p})),
        ("search", json!({"query": "x", "path": p})),
    ] {
        let out = call(&ts, tool, args);
        let kind = kind_of(&out);
        assert!(
            ["ok", "invalid_input", "not_found"].contains(&kind.as_str()),
            "{tool} on a 4096-byte path: {}",
            out.text
        );
    }
    fx.assert_untouched();
}

#[test]
fn overlong_glob_patterns_are_invalid_input() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    let pattern = "*/".repeat(3000);
    check(&ts, "glob", json!({"pattern": pattern}), "invalid_input");
    check(&ts, "list_files", json!({"glob": pattern}), "invalid_input");
    check(
        &ts,
        "search",
        json!({"query": "x", "glob": pattern}),
        "invalid_input",
    );
    fx.assert_untouched();
}

// ---------------------------------------------------------------------------
// Trailing dots and spaces
// ---------------------------------------------------------------------------

#[test]
fn trailing_dots_and_spaces_stay_inside_the_root() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    for p in [
        "a.",
        "a ",
        "...",
        ".. ",
        " ..",
        ". ",
        "....",
        "b./c ",
        "... /x",
        "c ./.. /z",
    ] {
        let content = format!("content of {p:?}\n");
        check(
            &ts,
            "write_file",
            json!({"path": p, "content": content}),
            "ok",
        );
        assert_eq!(
            fs::read_to_string(fx.r(p)).unwrap(),
            content,
            "{p:?} must be created inside the root under that exact name"
        );
        let out = check(&ts, "read_file", json!({"path": p}), "ok");
        assert!(out.text.contains("content of"), "{}", out.text);
    }
    // `.. ` and `...` are names, not parents: nothing appears next to the root.
    check(
        &ts,
        "read_file",
        json!({"path": "... /outside/secret.txt"}),
        "not_found",
    );
    check(
        &ts,
        "read_file",
        json!({"path": ".. /outside/secret.txt"}),
        "not_found",
    );
    check(
        &ts,
        "read_file",
        json!({"path": "../outside/secret.txt."}),
        "path_escape",
    );
    check(
        &ts,
        "read_file",
        json!({"path": "../outside/secret.txt "}),
        "path_escape",
    );
    fx.assert_untouched();
}

// ---------------------------------------------------------------------------
// FIFOs, devices, sockets
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Hard links
//
// A hard link is the same inode under another name, so reading `root/hl`
// reads the outside file's bytes: that is allowed by design (the kernel
// cannot tell the two names apart, and SPEC refuses symbolic links only).
// The outside file used here therefore does not hold the marker. Writing
// must not reach the outside name: writes are a temp file plus a rename,
// which replaces the directory entry and breaks the link.
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Read-before-write under attack
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Race: a directory swapped for a symlink in a tight loop
// ---------------------------------------------------------------------------

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
