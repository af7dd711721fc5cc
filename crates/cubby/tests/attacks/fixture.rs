//! The layout every file-tool attack builds (the `local` provider, driven
//! only through `local_sandbox` + `Toolset::call`):
//!
//! ```text
//! <tmp>/root/                 the workspace (inside.txt, a/b/c.txt)
//! <tmp>/root-evil/            a sibling whose name extends the root's (x, sub/y)
//! <tmp>/outside/secret.txt    holds MARKER (also outside/sub/deeper.txt)
//! ```
//!
//! and the checks made on every call: the result (text and structured JSON)
//! never contains MARKER, and at the end of every test nothing outside
//! `root/` was created or modified: `outside/` and `root-evil/` are compared
//! recursively (kind, mode, mtime, content, link targets) and the parent's
//! entries by name and kind, before and after.
//!
//! SPEC §1: absolute paths (even inside the root), `..` that climbs out and
//! any path that passes through a symbolic link (even one pointing inside
//! the root) are `path_escape`; walks never follow links. SPEC §3: FIFOs,
//! devices and sockets are refused without being opened; writes are atomic
//! (temp file + rename) and need a `read_file` of an existing file first.

use cubby::{ToolOutput, Toolset};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// What must never come back from a tool.
pub const MARKER: &str = "OUTSIDE-MARKER-7f3a";

/// Content of `outside/secret.txt` (and `outside/sub/deeper.txt`).
pub const SECRET: &str = "secret line OUTSIDE-MARKER-7f3a\n";

/// How long a call on a FIFO or device may take before it counts as blocked.
pub const PROMPT: Duration = Duration::from_secs(5);

/// A description of every object of the guarded trees, by path.
pub type Snap = BTreeMap<String, String>;

pub struct Fx {
    pub _tmp: tempfile::TempDir,
    pub base: PathBuf,
    pub root: PathBuf,
    pub outside: PathBuf,
    pub evil: PathBuf,
    pub before: Option<Snap>,
}

impl Fx {
    pub fn new() -> Fx {
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
    pub fn r(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// A path inside `outside/`.
    pub fn o(&self, rel: &str) -> PathBuf {
        self.outside.join(rel)
    }

    /// Takes the "before" snapshot and builds a default toolset on the root.
    /// Call it once the test's own setup is done.
    pub fn tools(&mut self) -> Toolset {
        self.before = Some(self.snap());
        let sandbox = cubby::local_sandbox(&self.root).unwrap();
        Toolset::builder(sandbox).build().unwrap()
    }

    pub fn snap(&self) -> Snap {
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
    pub fn assert_untouched(&self) {
        let before = self.before.as_ref().expect("tools() takes the snapshot");
        let after = self.snap();
        assert_eq!(
            before, &after,
            "something outside root/ was created or modified"
        );
        assert_eq!(fs::read_to_string(self.o("secret.txt")).unwrap(), SECRET);
    }
}

pub fn describe(p: &Path) -> String {
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

pub fn snap_tree(base: &Path, dir: &Path, snap: &mut Snap) {
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

pub fn abs(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

pub fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 160 {
        format!("{}…", s.chars().take(160).collect::<String>())
    } else {
        s
    }
}

/// The marker never leaves the toolset.
#[track_caller]
pub fn assert_clean(out: &ToolOutput, what: &str) {
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
pub fn call(ts: &Toolset, tool: &str, args: Value) -> ToolOutput {
    let what = format!("{tool} {}", short(&args));
    let out = ts.call(tool, args);
    assert_clean(&out, &what);
    out
}

/// `ok` for a success, the error kind otherwise.
pub fn kind_of(out: &ToolOutput) -> String {
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
pub fn expect_kind(out: &ToolOutput, want: &str, what: &str) {
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
pub fn check(ts: &Toolset, tool: &str, args: Value, want: &str) -> ToolOutput {
    let what = format!("{tool} {}", short(&args));
    let out = call(ts, tool, args);
    expect_kind(&out, want, &what);
    out
}

/// read_file, write_file and edit_file on `path`, each expecting `want`.
#[track_caller]
pub fn file_tools(ts: &Toolset, path: &str, want: &str) {
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
pub fn walk_tools(ts: &Toolset, path: &str, want: &str) {
    check(ts, "glob", json!({ "pattern": "**", "path": path }), want);
    check(ts, "list_files", json!({ "path": path }), want);
    check(ts, "search", json!({ "query": "line", "path": path }), want);
}

/// The entries of a successful glob / list_files result.
pub fn entries(out: &ToolOutput) -> Vec<String> {
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
pub fn call_promptly(ts: &Toolset, tool: &'static str, args: Value) -> ToolOutput {
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
pub fn refused_promptly(ts: &Toolset, tool: &'static str, args: Value) -> ToolOutput {
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

pub fn mkfifo(p: &Path) {
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
pub fn mknod_null(p: &Path) {
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

pub fn is_fifo(p: &Path) -> bool {
    fs::symlink_metadata(p).unwrap().file_type().is_fifo()
}

/// A thread blocked in a *blocking* open of `fifo` for writing. That open
/// only completes once somebody opens the FIFO for reading, so the flag
/// tells whether anyone (cubby) opened it.
pub fn fifo_watch(fifo: &Path) -> (Arc<AtomicBool>, JoinHandle<()>) {
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
pub fn fifo_release(fifo: &Path, handle: JoinHandle<()>) {
    let _r = rustix::fs::open(
        fifo,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::NONBLOCK,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    handle.join().unwrap();
}

/// Links of every flavour, all planted in the root.
pub fn plant_links(fx: &Fx) {
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
