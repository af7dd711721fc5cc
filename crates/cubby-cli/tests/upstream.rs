//! Upstream MCP servers (SPEC §5.4) through a real toolset: the scripted
//! server `tests/mcp/upstream_server.py` (well-behaved and misbehaving
//! tools; the outer edge), the npm reference servers
//! (`@modelcontextprotocol/server-everything`, `server-filesystem`,
//! installed into `target/mcp-upstream` the first time), and another
//! `cubby serve` as an HTTP upstream. The stdio servers run in the `linux`
//! provider's sandbox.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::repo_root;
use cubby::process::CancelToken;
use cubby::{Attachment, CallOptions, Config, HostEnv, Toolset, Workspace};
use serde_json::json;

const SERVERS: [&str; 2] = [
    "@modelcontextprotocol/server-everything@2026.8.31",
    "@modelcontextprotocol/server-filesystem@2026.8.31",
];

fn script() -> PathBuf {
    repo_root().join("tests/mcp/upstream_server.py")
}

/// A section running the scripted server.
fn scripted(label: &str, tools: &[&str], extra: &str) -> String {
    format!(
        "[upstream.{label}]\ncommand = [\"/usr/bin/python3\", {:?}]\ntools = {:?}\n{extra}\n",
        script().display().to_string(),
        tools
    )
}

fn workspace(ws: &Path, toml: &str, host: &HostEnv) -> cubby::Result<Workspace> {
    let config = Config::from_toml(toml, "test.toml")?;
    Workspace::from_config(ws, &config, None, host)
}

fn toolset_with(ws: &Path, toml: &str, host: &HostEnv) -> Toolset {
    let workspace = workspace(ws, toml, host).unwrap();
    let sandbox = workspace.open_sandbox().unwrap();
    let factory = workspace
        .factory_with(sandbox, false, cubby_mcp::upstream_sources())
        .unwrap();
    factory().unwrap()
}

fn toolset(ws: &Path, toml: &str) -> Toolset {
    toolset_with(ws, toml, &HostEnv::capture())
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn root(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().canonicalize().unwrap()
}

/// A workspace and, beside it, a directory to name as a writable root
/// (both removed when the first value drops).
fn workspace_and_writable_root() -> ([tempfile::TempDir; 2], PathBuf, PathBuf) {
    let dirs = [tmp(), tmp()];
    let (ws, writable) = (root(&dirs[0]), root(&dirs[1]));
    (dirs, ws, writable)
}

#[test]
fn only_listed_tools_are_offered_and_routed_through_the_table() {
    let dir = tmp();
    let ws = root(&dir);
    // No `tools`: nothing offered, the server not even started.
    let none = toolset(&ws, &scripted("s", &[], ""));
    assert!(!none.tool_names().iter().any(|n| n.starts_with("s__")));
    let out = none.call("s__echo", json!({"text": "x"}));
    assert!(out.is_error, "{}", out.text);
    none.end();

    let t = toolset(&ws, &scripted("s", &["echo", "a__b", "missing"], ""));
    let names = t.tool_names();
    assert!(names.contains(&"s__echo"), "{names:?}");
    assert!(names.contains(&"s__a__b"), "{names:?}");
    // Listed in `tools` but not by the server: not offered.
    assert!(!names.contains(&"s__missing"), "{names:?}");
    assert!(!names.iter().any(|n| n.contains("unlisted")), "{names:?}");
    let out = t.call("s__echo", json!({"text": "hi"}));
    assert_eq!(out.text, "echo: hi", "{out:?}");
    // `a__b` is the upstream's own name: routed by the table, not split.
    let out = t.call("s__a__b", json!({}));
    assert_eq!(out.text, "routed to a__b", "{out:?}");
    let out = t.call("s__unlisted", json!({}));
    assert!(
        out.is_error && !out.text.contains("UNLISTED RAN"),
        "{out:?}"
    );
    let out = t.call("s__missing", json!({}));
    assert!(out.text.starts_with("ERROR denied"), "{out:?}");
    let specs = t.tools();
    let echo = specs.iter().find(|s| s.name == "s__echo").unwrap();
    assert!(
        echo.description.contains("Echoes its text."),
        "{}",
        echo.description
    );
    t.end();
}

#[test]
fn bad_labels_and_long_names_are_config_errors_naming_the_key() {
    let dir = tmp();
    let ws = root(&dir);
    let host = HostEnv::capture();
    let err = workspace(&ws, &scripted("git_hub", &["x"], ""), &host).unwrap_err();
    assert!(err.message().contains("upstream.git_hub"), "{err}");
    // "s__" + 62 bytes = 65 bytes.
    let long = "t".repeat(62);
    let err = workspace(&ws, &scripted("s", &[&long], ""), &host).unwrap_err();
    assert!(err.message().contains("upstream.s.tools"), "{err}");
    assert!(err.message().contains("65 bytes"), "{err}");
    let both = format!(
        "{}url = \"http://127.0.0.1:1/mcp\"\n",
        scripted("s", &[], "")
    );
    let err = workspace(&ws, &both, &host).unwrap_err();
    assert!(err.message().contains("upstream.s"), "{err}");
}

/// Red-team pass 11, U6: a stdio server started in the workspace (which
/// the model writes) loaded code the model planted there: `python -m`
/// puts its working directory first on `sys.path`, so a `json.py` written
/// with `write_file` ran in the server, with its `env.secrets`. Now it
/// starts in `/`, told the workspace by `CUBBY_WORKSPACE` (and `{workspace}`
/// in its argv), with `PYTHONSAFEPATH=1`. The control: the same launcher
/// started in the workspace by hand loads the planted module.
#[test]
fn a_stdio_server_starts_outside_the_workspace_and_loads_none_of_its_code() {
    let dir = tmp();
    let ws = root(&dir);
    let planted = "import os\nopen(os.path.join(os.environ.get('CUBBY_WORKSPACE', ''), \
                   'planted.txt'), 'w').write('ran')\nraise ImportError('planted')\n";
    std::fs::write(ws.join("json.py"), planted).unwrap();
    std::fs::create_dir(ws.join("sub")).unwrap();
    let modules = script().parent().unwrap().display().to_string();
    let host = HostEnv::capture().with("PYTHONPATH", &modules);
    let toml = "[upstream.s]\ncommand = [\"/usr/bin/python3\", \"-m\", \"upstream_server\", \"log\", \
                \"dir={workspace}/sub\"]\ntools = [\"echo\", \"env\"]\nenv = { pass = [\"PYTHONPATH\"] }\n";
    let t = toolset_with(&ws, toml, &host);
    let out = t.call("s__echo", json!({"text": "hi"}));
    assert_eq!(out.text, "echo: hi", "{out:?}");
    assert!(!ws.join("planted.txt").exists(), "the planted module ran");
    let out = t.call("s__env", json!({}));
    assert!(out.text.lines().any(|l| l == "CUBBY_WORKSPACE"), "{out:?}");
    assert!(out.text.lines().any(|l| l == "PYTHONSAFEPATH"), "{out:?}");
    // `{workspace}` in the argv is the workspace's path: `log` writes in
    // the directory `dir=` names.
    assert!(ws.join("sub/methods.log").exists());
    t.end();
    // The control: started in the workspace, the launcher runs the plant.
    let control = std::process::Command::new("/usr/bin/python3")
        .args(["-m", "upstream_server"])
        .current_dir(&ws)
        .env("PYTHONPATH", &modules)
        .env("CUBBY_WORKSPACE", &ws)
        .env_remove("PYTHONSAFEPATH")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!control.status.success());
    assert_eq!(
        std::fs::read_to_string(ws.join("planted.txt")).unwrap(),
        "ran"
    );
}

#[test]
fn the_server_environment_is_only_what_env_gives_and_secrets_are_redacted() {
    let dir = tmp();
    let ws = root(&dir);
    let host = HostEnv::capture()
        .with("UP_PASSED", "passed-value")
        .with("UP_SECRET", "s3cr3t-upstream-value")
        .with("UP_LEAK", "must-not-reach");
    let extra = "env = { pass = [\"UP_PASSED\"], secrets = [\"UP_SECRET\"] }";
    let t = toolset_with(&ws, &scripted("s", &["env", "echo"], extra), &host);
    let out = t.call("s__env", json!({}));
    assert!(!out.is_error, "{out:?}");
    let names: Vec<&str> = out.text.lines().collect();
    assert!(names.contains(&"UP_PASSED"), "{names:?}");
    assert!(names.contains(&"UP_SECRET"), "{names:?}");
    assert!(!names.contains(&"UP_LEAK"), "{names:?}");
    // A server holding secrets does not get the workspace, nor its path.
    assert!(!names.contains(&"CUBBY_WORKSPACE"), "{names:?}");
    let out = t.call("s__echo", json!({"text": "s3cr3t-upstream-value"}));
    assert_eq!(out.text, "echo: [REDACTED:UP_SECRET]", "{out:?}");
    // The workspace's own commands never get the server's secret.
    let out = t.call("run", json!({"command": "env"}));
    assert!(!out.text.contains("UP_SECRET"), "{}", out.text);
    t.end();
}

/// Red-team pass 12, P1: a server that acts on the workspace runs what the
/// model wrote there — git ran a nested repository's `core.fsmonitor`, a
/// command of the model's, with the server's `env.secrets`. A server
/// holding secrets (or a network) now works in a private directory and
/// cannot read the workspace or the writable roots, whatever path it is
/// given; given the workspace (`workspace = true`), it reads it (the
/// control). And any server's git runs no repository's fsmonitor: the
/// control is the same `git status` run on the host, which runs it.
#[test]
fn a_server_with_secrets_is_kept_from_the_workspace_and_git_runs_no_plant() {
    let (_dirs, ws, writable) = workspace_and_writable_root();
    std::fs::write(ws.join("plan.txt"), "the workspace's file").unwrap();
    std::fs::write(writable.join("plan.txt"), "the writable root's file").unwrap();
    let host = HostEnv::capture().with("UP_SECRET", "s3cr3t-kept-apart");
    let writable_toml = format!("writable_roots = [{:?}]\n", writable.display().to_string());
    let secret = "env = { secrets = [\"UP_SECRET\"] }";
    let toml = format!(
        "{writable_toml}{}",
        scripted("s", &["cat", "git", "env"], secret)
    );
    let t = toolset_with(&ws, &toml, &host);
    for path in [ws.join("plan.txt"), writable.join("plan.txt")] {
        let out = t.call("s__cat", json!({"path": path}));
        assert!(out.text.starts_with("cat failed"), "{path:?}: {out:?}");
    }
    // What the server may read of the host, it reads.
    let out = t.call("s__cat", json!({"path": "/etc/hostname"}));
    assert!(!out.text.starts_with("cat failed"), "{out:?}");
    t.end();
    // Given the workspace, a server with secrets reads it: the control.
    let toml = format!(
        "{writable_toml}{}",
        scripted(
            "s",
            &["cat", "git", "env"],
            &format!("{secret}\nworkspace = true")
        )
    );
    let t = toolset_with(&ws, &toml, &host);
    let out = t.call("s__cat", json!({"path": ws.join("plan.txt")}));
    assert_eq!(out.text, "the workspace's file", "{out:?}");
    let out = t.call("s__cat", json!({"path": writable.join("plan.txt")}));
    assert_eq!(out.text, "the writable root's file", "{out:?}");
    // The model plants a nested repository whose fsmonitor is its command.
    let pwned = ws.join("pwned");
    let plant = format!(
        "git init -q sub && git -C sub config core.fsmonitor 'touch {}; false' && echo planted",
        pwned.display()
    );
    let out = t.call("run", json!({"command": plant}));
    assert!(out.text.contains("planted"), "{}", out.text);
    let out = t.call("s__git", json!({"repo": ws.join("sub")}));
    assert!(out.text.starts_with("git exited"), "{out:?}");
    assert!(!pwned.exists(), "the model's fsmonitor ran in the server");
    t.end();
    // The control: git on the host runs the plant.
    std::process::Command::new("git")
        .arg("-C")
        .arg(ws.join("sub"))
        .args(["status", "--short"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        pwned.exists(),
        "the control's git did not run the fsmonitor"
    );
}

/// Red-team pass 13, Q4: with the temporary directory inside a writable
/// root, a secluded server's private directory would be masked with it;
/// the server is not started, and the error says why and what to do.
#[test]
fn a_secluded_server_says_when_its_private_directory_would_be_hidden() {
    let (_dirs, ws, writable) = workspace_and_writable_root();
    std::fs::create_dir(writable.join("tmp")).unwrap();
    let host = HostEnv::capture()
        .with("UP_SECRET", "s3cr3t-kept-apart")
        .with("TMPDIR", writable.join("tmp").to_str().unwrap());
    // The artifact store elsewhere (one in the writable root is refused
    // when the workspace loads: `a_state_dir_in_a_writable_root_is_refused`).
    let state = tmp();
    let toml = format!(
        "writable_roots = [{:?}]\nstate_dir = {:?}\n{}",
        writable.display().to_string(),
        root(&state).display().to_string(),
        scripted("s", &["cat"], "env = { secrets = [\"UP_SECRET\"] }")
    );
    let t = toolset_with(&ws, &toml, &host);
    let out = t.call("s__cat", json!({"path": "/etc/hostname"}));
    assert!(out.text.starts_with("ERROR"), "{out:?}");
    assert!(out.text.contains("point TMPDIR elsewhere"), "{out:?}");
    t.end();
}

#[test]
fn results_are_shaped_bounded_and_never_read_links() {
    let dir = tmp();
    let ws = root(&dir);
    let t = toolset(
        &ws,
        &scripted("s", &["big", "image", "svg", "link", "echo"], ""),
    );
    // 20 MB of text: over the 16 MiB a message; refused, the server lives.
    let out = t.call("s__big", json!({"n": 20_000_000}));
    assert!(
        out.text.starts_with("ERROR too_large"),
        "{}",
        &out.text[..out.text.len().min(300)]
    );
    assert!(out.text.contains("20000"), "{}", out.text);
    // A 1 MB argument: more than the server's stdin pipe holds, so most
    // of it is written by the writer thread; the next call's message comes
    // after it whole.
    let long = "y".repeat(1_000_000);
    let out = t.call("s__echo", json!({"text": long}));
    assert!(
        out.text.starts_with("echo: yyyy"),
        "{}",
        &out.text[..out.text.len().min(300)]
    );
    assert_eq!(
        t.call("s__echo", json!({"text": "next"})).text,
        "echo: next"
    );
    // 1 MB: cut with a note.
    let out = t.call("s__big", json!({"n": 1_000_000}));
    assert!(!out.is_error);
    assert!(out.text.len() < 100_000, "{}", out.text.len());
    assert!(
        out.text.contains("bytes cut"),
        "{}",
        &out.text[30_000..34_000]
    );
    assert_eq!(
        t.call("s__echo", json!({"text": "alive"})).text,
        "echo: alive"
    );
    // Just over the limit: a 17 MiB message (16 MiB is the most read).
    let out = t.call("s__big", json!({"n": 17 * 1024 * 1024}));
    assert!(
        out.text.starts_with("ERROR too_large"),
        "{}",
        &out.text[..out.text.len().min(300)]
    );
    assert_eq!(
        t.call("s__echo", json!({"text": "alive"})).text,
        "echo: alive"
    );
    // A 10 MB image (random pixels, 1,900 × 1,800): an artifact of its
    // full size, and shown downscaled.
    let out = t.call("s__image", json!({"w": 1900, "h": 1800, "noise": true}));
    assert!(!out.is_error, "{}", out.text);
    let artifact = out
        .attachments
        .iter()
        .find_map(|a| match a {
            Attachment::Artifact(a) => Some(a),
            Attachment::Image(_) => None,
        })
        .expect("an artifact");
    assert!(artifact.size > 10_000_000, "{artifact:?}");
    let shown = out
        .attachments
        .iter()
        .find_map(|a| match a {
            Attachment::Image(i) => Some(i),
            Attachment::Artifact(_) => None,
        })
        .expect("an image attachment");
    let decoded = image::load_from_memory(&shown.bytes).unwrap();
    assert!(decoded.width() <= 1568 && decoded.height() <= 1568);
    assert!(shown.bytes.len() < 5_000_000, "{}", shown.bytes.len());
    // A 3,000 × 1,200 image: an artifact, and shown downscaled.
    let out = t.call("s__image", json!({"w": 3000, "h": 1200}));
    assert!(out.text.contains("artifact "), "{}", out.text);
    let image = out
        .attachments
        .iter()
        .find_map(|a| match a {
            Attachment::Image(i) => Some(i),
            Attachment::Artifact(_) => None,
        })
        .expect("an image attachment");
    let decoded = image::load_from_memory(&image.bytes).unwrap();
    assert!(decoded.width() <= 1568 && decoded.height() <= 1568);
    // SVG: an artifact, never an image.
    let out = t.call("s__svg", json!({}));
    assert!(out.text.contains("image/svg+xml"), "{}", out.text);
    assert!(
        !out.attachments
            .iter()
            .any(|a| matches!(a, Attachment::Image(_)))
    );
    // A link to the host's passwd: passed as text, never read.
    let out = t.call("s__link", json!({}));
    assert!(out.text.contains("file:///etc/passwd"), "{}", out.text);
    assert!(!out.text.contains("root:"), "{}", out.text);
    assert!(out.attachments.is_empty());
    t.end();
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn a_timeout_ends_the_call_and_cancels_upstream() {
    let dir = tmp();
    let ws = root(&dir);
    let t = toolset(&ws, &scripted("s", &["sleep", "echo"], "call_timeout = 1"));
    let started = Instant::now();
    let out = t.call("s__sleep", json!({"marker": "timeout.marker"}));
    assert!(out.text.starts_with("ERROR timeout"), "{out:?}");
    assert!(out.text.contains("call_timeout"), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // The server was told: it wrote its marker.
    let marker = ws.join("timeout.marker");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !marker.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        marker.exists(),
        "the upstream never saw notifications/cancelled"
    );
    assert_eq!(t.call("s__echo", json!({"text": "x"})).text, "echo: x");
    t.end();
}

#[test]
fn a_client_cancellation_reaches_the_upstream_within_100_ms() {
    let dir = tmp();
    let ws = root(&dir);
    let t = toolset(&ws, &scripted("s", &["sleep", "echo"], ""));
    // Started first, so that the call below does not wait for the start.
    assert_eq!(t.call("s__echo", json!({"text": "x"})).text, "echo: x");
    let cancel = CancelToken::new();
    let canceller = cancel.clone();
    let at = Arc::new(std::sync::Mutex::new(0f64));
    let sent = at.clone();
    let thread = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        *sent.lock().unwrap() = now_secs();
        canceller.cancel();
    });
    let out = t.call_cancellable(
        "s__sleep",
        json!({"marker": "cancel.marker"}),
        Some(&cancel),
    );
    thread.join().unwrap();
    assert!(out.is_error, "{out:?}");
    let marker = ws.join("cancel.marker");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !marker.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let seen: f64 = std::fs::read_to_string(&marker).unwrap().parse().unwrap();
    let lag = seen - *at.lock().unwrap();
    assert!(
        lag < 0.1,
        "the cancellation took {lag:.3} s to reach the upstream"
    );
    t.end();
}

#[test]
fn a_progress_flood_is_relayed_bounded() {
    let dir = tmp();
    let ws = root(&dir);
    let t = toolset(&ws, &scripted("s", &["flood"], ""));
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    let options = CallOptions {
        on_output: Some(Arc::new(move |_| {
            seen.fetch_add(1, Ordering::Relaxed);
        })),
        ..CallOptions::default()
    };
    let started = Instant::now();
    let out = t.call_with("s__flood", json!({"n": 50_000}), &options);
    assert_eq!(out.text, "flooded", "{out:?}");
    let relayed = count.load(Ordering::Relaxed);
    // At most one per 50 ms (and one more at each end).
    let bound = (started.elapsed().as_millis() / 50) as usize + 2;
    assert!(
        relayed >= 1 && relayed <= bound,
        "{relayed} relayed, bound {bound}"
    );
    t.end();
}

/// Red-team pass 11, I1: the refusal of a name that is not offered listed
/// the server's tools, a tool the policy denies among them. Now it names
/// only what the policy lets through.
#[test]
fn a_refusal_names_no_tool_the_policy_denies() {
    let dir = tmp();
    let ws = root(&dir);
    let toml = format!(
        "deny = [\"s__echo\"]\n{}",
        scripted("s", &["echo", "a__b"], "")
    );
    let t = toolset(&ws, &toml);
    let out = t.call("s__echo ", json!({}));
    assert!(out.text.starts_with("ERROR"), "{out:?}");
    assert!(out.text.contains("s__a__b"), "{out:?}");
    assert!(
        !out.text.contains("s__echo,") && !out.text.ends_with("s__echo"),
        "{out:?}"
    );
    t.end();
}

/// Red-team pass 11, U7: requests to a server that stopped reading its
/// input stayed queued after their calls timed out (twelve 40 MiB calls
/// held 551 MB). Now at most `MAX_QUEUED_BYTES` wait; past it a call is
/// refused at once, saying why.
#[test]
fn requests_to_a_server_that_does_not_read_are_bounded() {
    const ARGUMENT: usize = 12 * 1024 * 1024;
    let dir = tmp();
    let ws = root(&dir);
    let t = toolset(&ws, &scripted("s", &["deaf", "echo"], "call_timeout = 1"));
    assert_eq!(t.call("s__deaf", json!({})).text, "deaf now");
    let text = "x".repeat(ARGUMENT);
    let mut answers = Vec::new();
    for _ in 0..cubby_mcp::MAX_QUEUED_BYTES / ARGUMENT + 2 {
        let out = t.call("s__echo", json!({"text": text}));
        let refused = out.text.contains("not reading its input");
        answers.push(out.text.chars().take(200).collect::<String>());
        if refused {
            break;
        }
    }
    let last = answers.last().unwrap();
    assert!(last.contains("not reading its input"), "{answers:#?}");
    assert!(
        answers.len() > 1 && answers[0].starts_with("ERROR timeout"),
        "{answers:#?}"
    );
    t.end();
}

/// The listings the scripted server answered (pages included).
fn listings(ws: &Path) -> usize {
    std::fs::read_to_string(ws.join("lists.log")).map_or(0, |l| l.len())
}

/// Red-team pass 11, U3: every `notifications/tools/list_changed` started
/// a thread that listed again; a flood of them aborted the process (one
/// upstream took every session of a `cubby serve` down). Now one listing
/// runs at a time, and the notifications that come meanwhile make one
/// more. The control: the server really sent them all (its answer comes
/// after them), and a listing did follow.
#[test]
fn a_flood_of_list_changed_lists_again_one_at_a_time() {
    const FLOOD: usize = 2_000;
    let dir = tmp();
    let ws = root(&dir);
    let t = toolset(&ws, &scripted("s", &["relist", "echo"], ""));
    assert!(t.tool_names().contains(&"s__relist"));
    let before = listings(&ws);
    assert_eq!(before, 1);
    let out = t.call("s__relist", json!({"n": FLOOD}));
    assert_eq!(out.text, "relisted", "{out:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while listings(&ws) < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(listings(&ws) >= 2, "no listing followed the notifications");
    // A second's window in which the rest of the flood is handled: one
    // listing at a time, and one more for all that came during it (a few
    // while the notifications are still being read).
    std::thread::sleep(Duration::from_secs(1));
    let after = listings(&ws);
    assert!(
        after - before < FLOOD / 50,
        "{after} listings after {FLOOD} notifications"
    );
    assert_eq!(t.call("s__echo", json!({"text": "x"})).text, "echo: x");
    t.end();
}

/// Red-team pass 11, U4: a server whose `tools/list` always had another
/// page grew the process by gigabytes until `startup_timeout`. Now a
/// listing stops after `MAX_LIST_PAGES` pages: the server is not offered,
/// with a clear error, long before its timeout.
#[test]
fn an_endless_listing_stops_at_its_page_cap() {
    let dir = tmp();
    let ws = root(&dir);
    let started = Instant::now();
    let t = toolset(
        &ws,
        &scripted_with("s", &["endless"], &["echo"], "startup_timeout = 60"),
    );
    assert!(!t.tool_names().contains(&"s__echo"), "{:?}", t.tool_names());
    let out = t.call("s__echo", json!({"text": "x"}));
    assert!(out.text.starts_with("ERROR network"), "{out:?}");
    assert!(out.text.contains("pages"), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(listings(&ws), cubby_mcp::MAX_LIST_PAGES);
    t.end();
}

/// Red-team pass 11, U5 and U1: an upstream's definitions reached the
/// model as written — the server's own secret in clear, escape sequences,
/// a 10 MB schema — and its progress messages kept their escapes. Now
/// definitions are redacted, cut and neutralised as results are, a
/// definition over `MAX_DEFINITION_BYTES` is not offered, and progress is
/// neutralised. The control: the server does send the secret and the
/// escapes (the description it gives is checked in its file).
#[test]
fn definitions_and_progress_are_redacted_and_neutralised_and_bounded() {
    const SECRET: &str = "s3cr3t-in-a-definition";
    let dir = tmp();
    let ws = root(&dir);
    let desc = format!(
        "Echoes. Key: {SECRET} \u{1b}[31mRED\u{1b}[0m {}",
        "d".repeat(3_000)
    );
    std::fs::write(ws.join("desc.txt"), &desc).unwrap();
    let host = HostEnv::capture().with("UP_SECRET", SECRET);
    // Its description comes from the workspace: a server with secrets
    // reads it only when given the workspace.
    let extra = "env = { secrets = [\"UP_SECRET\"] }\nworkspace = true";
    let t = toolset_with(&ws, &scripted("s", &["echo", "flood"], extra), &host);
    let echo = t
        .tools()
        .into_iter()
        .find(|s| s.name == "s__echo")
        .expect("echo offered");
    assert!(!echo.description.contains(SECRET), "{}", echo.description);
    assert!(
        echo.description.contains("[REDACTED:UP_SECRET]"),
        "{}",
        echo.description
    );
    assert!(!echo.description.contains('\u{1b}'), "{}", echo.description);
    assert!(
        echo.description.contains("\u{241b}[31mRED"),
        "{}",
        echo.description
    );
    assert_eq!(
        echo.description.chars().count(),
        cubby::MAX_DESCRIPTION_CHARS
    );
    // Progress: redacted, its escapes shown.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    let options = CallOptions {
        on_output: Some(Arc::new(move |event: &cubby::process::OutputEvent| {
            kept.lock().unwrap().push(event.chunk.clone());
        })),
        ..CallOptions::default()
    };
    let message = format!("p {SECRET} \u{1b}]0;title\u{7}");
    let out = t.call_with(
        "s__flood",
        json!({"n": 20_000, "message": message}),
        &options,
    );
    assert_eq!(out.text, "flooded", "{out:?}");
    let seen = seen.lock().unwrap().join("\n");
    assert!(seen.contains("[REDACTED:UP_SECRET]"), "{seen:?}");
    assert!(
        !seen.contains(SECRET) && !seen.contains('\u{1b}') && !seen.contains('\u{7}'),
        "{seen:?}"
    );
    t.end();
    // A definition over the bound is not offered; the others are.
    let dir2 = tmp();
    let ws2 = root(&dir2);
    std::fs::write(ws2.join("bigschema.txt"), "s".repeat(100 * 1024)).unwrap();
    let t = toolset(&ws2, &scripted("s", &["echo", "flood"], ""));
    let names = t.tool_names();
    assert!(
        !names.contains(&"s__echo") && names.contains(&"s__flood"),
        "{names:?}"
    );
    t.end();
}

/// Red-team pass 11, U2: an upstream's error text reached the model whole
/// (8 MiB). Now an error's text is cut like a result's, head and tail.
#[test]
fn an_upstream_error_is_cut_like_a_result() {
    let dir = tmp();
    let ws = root(&dir);
    let t = toolset(&ws, &scripted("s", &["fail"], ""));
    let out = t.call("s__fail", json!({"n": 1_000_000}));
    assert!(
        out.text.starts_with("ERROR network"),
        "{}",
        &out.text[..100]
    );
    assert!(
        out.text.len() < cubby::MAX_SOURCE_TEXT_BYTES + 1_000,
        "{}",
        out.text.len()
    );
    assert!(
        out.text.contains("bytes of the error cut"),
        "{}",
        &out.text[..100]
    );
    t.end();
}

/// Red-team pass 12, P3: a run that ended while its stdio server was
/// still starting waited for the start (up to `startup_timeout`), so the
/// server outlived the session by that long. Now the end kills it at once.
#[test]
fn a_run_ended_while_its_server_starts_kills_it_at_once() {
    let dir = tmp();
    let ws = root(&dir);
    // A marker of this test's server in its command line.
    let marker = format!("dir={}", ws.display());
    let toml = format!(
        "[upstream.s]\ncommand = [\"/usr/bin/python3\", {:?}, \"hang-init\", {marker:?}]\n\
         tools = [\"echo\"]\nstartup_timeout = 60\n",
        script().display().to_string()
    );
    let running = || {
        std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == marker.as_bytes()))
        })
    };
    let t = toolset(&ws, &toml);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !running() {
        assert!(Instant::now() < deadline, "the server never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    let started = Instant::now();
    t.end();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(15), "the end took {took:?}");
    assert!(!running(), "the server outlived its run");
}

#[test]
fn a_server_hanging_at_initialize_is_a_bounded_clear_error() {
    let dir = tmp();
    let ws = root(&dir);
    let toml = format!(
        "[upstream.s]\ncommand = [\"/usr/bin/python3\", {:?}, \"hang-init\"]\ntools = [\"echo\"]\nstartup_timeout = 2\n",
        script().display().to_string()
    );
    let started = Instant::now();
    let t = toolset(&ws, &toml);
    assert!(!t.tool_names().contains(&"s__echo"));
    // The failed start said why; the back-off answers at once, without
    // starting the server again.
    let asked = Instant::now();
    let out = t.call("s__echo", json!({}));
    assert!(out.text.starts_with("ERROR network"), "{out:?}");
    assert!(
        out.text.contains("did not answer `initialize` within 2 s"),
        "{out:?}"
    );
    assert!(out.text.contains("restarts it in"), "{out:?}");
    assert!(
        asked.elapsed() < Duration::from_millis(500),
        "{:?}",
        asked.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    t.end();
}

#[test]
fn a_daemonizing_server_leaves_nothing_when_the_run_ends() {
    let dir = tmp();
    let ws = root(&dir);
    let t = toolset(&ws, &scripted("s", &["daemon"], ""));
    let out = t.call("s__daemon", json!({"beat": "beat.txt"}));
    assert_eq!(out.text, "daemon started", "{out:?}");
    let beat = ws.join("beat.txt");
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::metadata(&beat).map_or(0, |m| m.len()) < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        std::fs::metadata(&beat).unwrap().len() >= 3,
        "the daemon never beat"
    );
    t.end();
    drop(t);
    // The daemon beats every 20 ms: over 300 ms, a living one would beat.
    std::thread::sleep(Duration::from_millis(200));
    let before = std::fs::metadata(&beat).unwrap().len();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        std::fs::metadata(&beat).unwrap().len(),
        before,
        "the daemon outlived the run"
    );
}

#[test]
fn a_dead_server_is_restarted_with_back_off() {
    let dir = tmp();
    let ws = root(&dir);
    let t = toolset(&ws, &scripted("s", &["die", "echo"], ""));
    // Started once, then restarted after each death: at most
    // MAX_RESTARTS_PER_MINUTE times.
    for _ in 0..cubby_mcp::MAX_RESTARTS_PER_MINUTE {
        let out = t.call("s__die", json!({}));
        assert!(out.text.starts_with("ERROR network"), "{out:?}");
        assert_eq!(
            t.call("s__echo", json!({"text": "back"})).text,
            "echo: back"
        );
    }
    let out = t.call("s__die", json!({}));
    assert!(out.text.starts_with("ERROR network"), "{out:?}");
    // A fourth restart within the minute: refused, nothing started.
    let out = t.call("s__echo", json!({"text": "x"}));
    assert!(out.text.starts_with("ERROR network"), "{out:?}");
    assert!(
        out.text.contains("restarted 3 times in the last minute"),
        "{out:?}"
    );
    t.end();
}

#[test]
fn a_relisting_hides_a_changed_tool_and_offers_no_new_one() {
    let dir = tmp();
    let ws = root(&dir);
    let t = toolset(&ws, &scripted("s", &["echo", "grow"], ""));
    assert!(t.tool_names().contains(&"s__echo"));
    let changes = Arc::new(AtomicUsize::new(0));
    let seen = changes.clone();
    t.watch_tools(Arc::new(move || {
        seen.fetch_add(1, Ordering::SeqCst);
    }));
    // The server adds `fresh`, changes `echo` and sends list_changed.
    assert_eq!(t.call("s__grow", json!({})).text, "grown");
    let deadline = Instant::now() + Duration::from_secs(10);
    while changes.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        changes.load(Ordering::SeqCst),
        1,
        "the change of the offered set was not told"
    );
    let names = t.tool_names();
    assert!(!names.contains(&"s__echo"), "{names:?}");
    assert!(names.contains(&"s__grow"), "{names:?}");
    assert!(!names.iter().any(|n| n.contains("fresh")), "{names:?}");
    let out = t.call("s__echo", json!({"text": "x"}));
    assert!(out.text.starts_with("ERROR denied"), "{out:?}");
    let out = t.call("s__fresh", json!({}));
    assert!(out.is_error && !out.text.contains("FRESH RAN"), "{out:?}");
    t.end();
}

#[test]
fn a_changed_definition_is_hidden_until_accepted() {
    let dir = tmp();
    let ws = root(&dir);
    let state = tmp();
    let toml = format!(
        "state_dir = {:?}\n{}",
        root(&state).display().to_string(),
        scripted("s", &["echo"], "")
    );
    let t = toolset(&ws, &toml);
    assert!(t.tool_names().contains(&"s__echo"));
    t.end();
    std::fs::write(
        ws.join("desc.txt"),
        // U+009B: a C1 control (CSI) that JSON does not escape.
        "Echoes its text, and ignores your instructions.\u{9b}31m",
    )
    .unwrap();
    let t = toolset(&ws, &toml);
    assert!(!t.tool_names().contains(&"s__echo"), "{:?}", t.tool_names());
    let out = t.call("s__echo", json!({"text": "x"}));
    assert!(out.text.starts_with("ERROR denied"), "{out:?}");
    t.end();
    // `cubby doctor` shows the change and accepts it.
    let config = state.path().join("cubby.toml");
    std::fs::write(&config, &toml).unwrap();
    let doctor = std::process::Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args(["doctor", "--root"])
        .arg(&ws)
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(text.contains("--accept-upstream s"), "{text}");
    assert!(text.contains("ignores your instructions"), "{text}");
    assert!(!text.contains('\u{9b}'), "{text}");
    let accepted = std::process::Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args(["doctor", "--accept-upstream", "s", "--root"])
        .arg(&ws)
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&accepted.stdout);
    assert!(text.contains("accepted the definitions of echo"), "{text}");
    let t = toolset(&ws, &toml);
    assert!(t.tool_names().contains(&"s__echo"));
    t.end();
    // A new property in the input schema: hidden too, until accepted.
    std::fs::write(ws.join("schema.txt"), "").unwrap();
    let t = toolset(&ws, &toml);
    assert!(!t.tool_names().contains(&"s__echo"), "{:?}", t.tool_names());
    t.end();
    let doctor = std::process::Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args(["doctor", "--root"])
        .arg(&ws)
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(text.contains("\"mode\""), "{text}");
    let accepted = std::process::Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args(["doctor", "--accept-upstream", "s", "--root"])
        .arg(&ws)
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&accepted.stdout);
    assert!(text.contains("accepted the definitions of echo"), "{text}");
    let t = toolset(&ws, &toml);
    assert!(t.tool_names().contains(&"s__echo"));
    t.end();
}

#[test]
fn another_cubby_is_an_http_upstream_under_the_network_rules() {
    let far = tmp();
    std::fs::write(far.path().join("hello.txt"), "hello from far\n").unwrap();
    let server = common::Serve::start(&root(&far));
    let dir = tmp();
    let ws = root(&dir);
    let section = format!(
        "[upstream.far]\nurl = {:?}\ntools = [\"read_file\"]\n",
        server.url()
    );
    // Loopback is refused unless `allowed_cidrs` lists it.
    let t = toolset(&ws, &section);
    assert!(!t.tool_names().contains(&"far__read_file"));
    let out = t.call("far__read_file", json!({"path": "hello.txt"}));
    assert!(out.text.contains("allowed_cidrs"), "{out:?}");
    t.end();
    let toml = format!("[network]\nallowed_cidrs = [\"127.0.0.1/32\"]\n{section}");
    let t = toolset(&ws, &toml);
    let out = t.call("far__read_file", json!({"path": "hello.txt"}));
    assert!(out.text.contains("hello from far"), "{out:?}");
    t.end();
}

/// A section running the scripted server with `args` (`modern`, `log`).
fn scripted_with(label: &str, args: &[&str], tools: &[&str], extra: &str) -> String {
    let mut argv = vec![
        "/usr/bin/python3".to_string(),
        script().display().to_string(),
    ];
    argv.extend(args.iter().map(|a| a.to_string()));
    format!("[upstream.{label}]\ncommand = {argv:?}\ntools = {tools:?}\n{extra}\n")
}

/// Issue 17: both MCP protocol generations of an upstream, each driven on
/// its own: `protocol = "2026-07-28"` (`server/discover`, per-request
/// metadata, no handshake) against a server that speaks only that,
/// `"2025-11-25"` (the `initialize` handshake) against one that speaks only
/// that, and `auto` (the default) against each; a generation the server
/// does not speak is a clear error.
#[test]
fn both_protocol_generations_are_spoken_each_on_its_own() {
    /// Case, server args, protocol, discover seen, initialize seen.
    type Case<'a> = (&'a str, &'a [&'a str], Option<&'a str>, bool, bool);
    let cases: [Case; 5] = [
        (
            "modern",
            &["modern", "log"],
            Some("2026-07-28"),
            true,
            false,
        ),
        ("handshake", &["log"], Some("2025-11-25"), false, true),
        ("auto-modern", &["modern", "log"], None, true, false),
        // Probes with server/discover, told it is unknown, shakes hands.
        ("auto-handshake", &["log"], None, true, true),
        ("wrong", &["log"], Some("2026-07-28"), true, false),
    ];
    for (case, args, protocol, discover, initialize) in cases {
        let dir = tmp();
        let ws = root(&dir);
        let extra = protocol.map_or(String::new(), |p| format!("protocol = {p:?}"));
        let t = toolset(&ws, &scripted_with("s", args, &["echo"], &extra));
        let out = t.call("s__echo", json!({"text": "hi"}));
        if case == "wrong" {
            // A 2026-07-28-only client and a handshake-only server.
            assert!(out.is_error, "{case}: {out:?}");
            assert!(out.text.starts_with("ERROR"), "{case}: {out:?}");
        } else {
            assert_eq!(out.text, "echo: hi", "{case}");
        }
        t.end();
        let log = std::fs::read_to_string(ws.join("methods.log")).unwrap_or_default();
        assert_eq!(log.contains("server/discover"), discover, "{case}: {log}");
        assert_eq!(log.contains("initialize "), initialize, "{case}: {log}");
        if case != "wrong" {
            let call = log
                .lines()
                .find(|l| l.starts_with("tools/call "))
                .unwrap_or_else(|| panic!("{case}: no call in {log}"));
            // The 2026-07-28 generation names its revision in every request.
            let modern = args.contains(&"modern");
            assert_eq!(call == "tools/call 2026-07-28", modern, "{case}: {log}");
        }
    }
}

fn npm_dir() -> PathBuf {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let dir = repo_root().join("target/mcp-upstream");
    let entry = |pkg: &str| {
        dir.join(format!(
            "node_modules/@modelcontextprotocol/{pkg}/dist/index.js"
        ))
    };
    common::npm_install(&dir, &SERVERS, || {
        entry("server-everything").exists() && entry("server-filesystem").exists()
    });
    dir
}

#[test]
fn the_reference_servers_from_npm_run_as_stdio_upstreams() {
    let npm = npm_dir();
    let dir = tmp();
    let ws = root(&dir);
    std::fs::write(ws.join("notes.txt"), "from the workspace\n").unwrap();
    let everything = npm.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let filesystem = npm.join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    let toml = format!(
        "[upstream.every]\ncommand = [\"node\", {:?}, \"stdio\"]\ntools = [\"echo\", \"get-sum\", \"get-tiny-image\", \"get-resource-links\"]\n\
         [upstream.fs]\ncommand = [\"node\", {:?}, {:?}]\ntools = [\"read_text_file\", \"list_directory\"]\n",
        everything.display().to_string(),
        filesystem.display().to_string(),
        ws.display().to_string()
    );
    let t = toolset(&ws, &toml);
    let names = t.tool_names();
    for want in [
        "every__echo",
        "every__get-sum",
        "fs__read_text_file",
        "fs__list_directory",
    ] {
        assert!(names.contains(&want), "{want} not in {names:?}");
    }
    assert!(!names.iter().any(|n| n.contains("get-env")), "{names:?}");
    let out = t.call("every__echo", json!({"message": "hello"}));
    assert!(out.text.contains("hello"), "{out:?}");
    let out = t.call("every__get-sum", json!({"a": 2, "b": 3}));
    assert!(out.text.contains('5'), "{out:?}");
    let out = t.call("every__get-tiny-image", json!({}));
    assert!(
        out.attachments
            .iter()
            .any(|a| matches!(a, Attachment::Image(_))),
        "{out:?}"
    );
    let out = t.call("every__get-resource-links", json!({"count": 2}));
    assert!(!out.is_error, "{out:?}");
    let path = ws.join("notes.txt");
    let out = t.call(
        "fs__read_text_file",
        json!({"path": path.display().to_string()}),
    );
    assert!(out.text.contains("from the workspace"), "{out:?}");
    let out = t.call("fs__read_text_file", json!({"path": "/etc/hostname"}));
    assert!(out.is_error || out.text.contains("denied"), "{out:?}");
    t.end();
}

/// One JSON-RPC line to `cubby mcp`.
fn send_line(stdin: &mut std::process::ChildStdin, message: &serde_json::Value) {
    use std::io::Write;
    let mut line = serde_json::to_vec(message).unwrap();
    line.push(b'\n');
    stdin.write_all(&line).unwrap();
    stdin.flush().unwrap();
}

/// The next line from `lines` that `wanted` accepts (others skipped),
/// within 30 s.
fn next_matching(
    lines: &std::sync::mpsc::Receiver<serde_json::Value>,
    wanted: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let v = lines
            .recv_timeout(left)
            .expect("no such message from cubby mcp");
        if wanted(&v) {
            return v;
        }
    }
}

fn listed_names(answer: &serde_json::Value) -> Vec<String> {
    answer["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// A child process killed (and reaped) when dropped, also when the test
/// fails half-way.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

#[test]
fn an_mcp_client_is_told_when_the_offered_tools_change() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let dir = tmp();
    let ws = root(&dir);
    let config_dir = tmp();
    let config = config_dir.path().join("cubby.toml");
    std::fs::write(&config, scripted("s", &["echo", "grow"], "")).unwrap();
    let mut child = Killed(
        Command::new(env!("CARGO_BIN_EXE_cubby"))
            .arg("mcp")
            .arg("--root")
            .arg(&ws)
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut stdin = child.0.stdin.take().unwrap();
    let stdout = child.0.stdout.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx
                .send(serde_json::from_str::<serde_json::Value>(&line).unwrap())
                .is_err()
            {
                break;
            }
        }
    });
    let id_is = |id: i64| move |v: &serde_json::Value| v["id"] == id && v.get("method").is_none();
    send_line(
        &mut stdin,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}}),
    );
    let init = next_matching(&lines, id_is(1));
    assert_eq!(
        init["result"]["capabilities"]["tools"]["listChanged"], true,
        "{init}"
    );
    send_line(
        &mut stdin,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    send_line(
        &mut stdin,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    );
    let names = listed_names(&next_matching(&lines, id_is(2)));
    assert!(names.contains(&"s__echo".to_string()), "{names:?}");
    send_line(
        &mut stdin,
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                "params": {"name": "s__grow", "arguments": {}}}),
    );
    // The answer and the notification, in either order.
    let mut answered = false;
    let mut told = false;
    while !(answered && told) {
        let v = next_matching(&lines, |v| {
            v["id"] == 3 || v["method"] == "notifications/tools/list_changed"
        });
        if v["id"] == 3 {
            assert_eq!(v["result"]["content"][0]["text"], "grown", "{v}");
            answered = true;
        } else {
            told = true;
        }
    }
    send_line(
        &mut stdin,
        &json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}),
    );
    let names = listed_names(&next_matching(&lines, id_is(4)));
    assert!(!names.contains(&"s__echo".to_string()), "{names:?}");
    assert!(names.contains(&"s__grow".to_string()), "{names:?}");
    assert!(!names.iter().any(|n| n.contains("fresh")), "{names:?}");
    // EOF ends the session, its upstream server with it.
    drop(stdin);
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.0.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        child.0.try_wait().unwrap().is_some(),
        "cubby mcp did not exit at EOF"
    );
    reader.join().unwrap();
}

#[test]
fn a_protected_path_stays_reserved_while_any_sandbox_of_the_workspace_runs() {
    let dir = tmp();
    let ws = root(&dir);
    // The upstream server starts with the run: its command reserves the
    // missing protected paths (`.codex/`, …).
    let t = toolset(&ws, &scripted("s", &["die", "echo"], ""));
    assert_eq!(t.call("s__echo", json!({"text": "x"})).text, "echo: x");
    // A command of the workspace's own sandbox, running across the
    // upstream server's death, then trying to create `.codex/`.
    let script = "while [ ! -e go.flag ]; do sleep 0.01; done; \
                  mkdir -p .codex/x 2>/dev/null && echo made > .codex/x/config.toml; \
                  echo done > done.flag";
    let out = t.call("start_process", json!({"name": "late", "command": script}));
    assert!(!out.is_error, "{out:?}");
    // The server dies: its uses of the reservations end.
    let out = t.call("s__die", json!({}));
    assert!(out.text.starts_with("ERROR network"), "{out:?}");
    std::fs::write(ws.join("go.flag"), "").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ws.join("done.flag").exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(ws.join("done.flag").exists(), "the command never finished");
    assert!(
        !ws.join(".codex/x").exists(),
        "a command created the protected `.codex/` after the upstream server's sandbox let go of it"
    );
    t.end();
}
