//! Each run has its own artifacts over the workspace's one store, in the
//! state directory.

use cubby::artifact::Publish;
use cubby::config::ProviderKind;
use cubby::{Config, ErrorKind, HostEnv, Workspace};
use serde_json::json;

fn workspace(state_dir: Option<String>) -> (tempfile::TempDir, Workspace) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("root")).unwrap();
    let root = dir.path().join("root").canonicalize().unwrap();
    let config = Config {
        provider: Some(ProviderKind::Virtual),
        state_dir,
        ..Config::default()
    };
    let ws = Workspace::from_config(&root, &config, None, &HostEnv::default()).unwrap();
    (dir, ws)
}

#[test]
fn runs_publish_into_the_state_dir_and_see_only_their_own_artifacts() {
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().join("state");
    let (_dir, ws) = workspace(Some(state_dir.to_str().unwrap().to_string()));
    assert_eq!(ws.state_dir(), Some(state_dir.as_path()));
    let factory = ws.factory(false).unwrap();
    let first = factory().unwrap();
    let second = factory().unwrap();
    // Nothing on disk until a run publishes.
    assert!(!state_dir.exists());
    let published = first
        .artifacts()
        .publish_bytes(
            &Publish {
                name: "notes.txt".into(),
                ..Publish::default()
            },
            b"hello\n",
        )
        .unwrap();
    let sha = &published.file.sha256;
    let blob = state_dir.join("artifacts/sha256").join(&sha[..2]).join(sha);
    assert_eq!(std::fs::read(&blob).unwrap(), b"hello\n");
    assert_eq!(
        first.artifacts().list(),
        std::slice::from_ref(&published.file)
    );
    assert_eq!(
        first.artifacts().resolve(&published.file.uri).unwrap(),
        published.file
    );
    // Another run (another session) shares the store, not the artifacts.
    assert!(second.artifacts().list().is_empty());
    assert_eq!(
        second
            .artifacts()
            .resolve(&published.file.uri)
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
}

#[test]
fn a_state_dir_inside_the_workspace_or_relative_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let config = Config {
        state_dir: Some(root.join(".cubby").to_str().unwrap().to_string()),
        ..Config::default()
    };
    let e = Workspace::from_config(&root, &config, None, &HostEnv::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.message().contains("inside the workspace"), "{e}");
    let e = Config::from_toml("state_dir = \"state\"\n", "cubby.toml").unwrap_err();
    assert!(e.message().contains("state_dir"), "{e}");
}

/// Without a `state_dir`, the runs of a workspace share a store of the
/// workspace's own in the temporary directory (`$TMPDIR`), made at the
/// first publication and removed when the workspace and its runs are
/// dropped: nothing is left behind in the temporary directory.
#[test]
fn without_a_state_dir_the_store_is_the_workspaces_own_and_goes_with_it() {
    let tmp = tempfile::tempdir().unwrap();
    let host = HostEnv::capture().with("TMPDIR", tmp.path());
    assert_eq!(cubby::artifact::temp_dir(&host), tmp.path());
    assert_eq!(
        cubby::artifact::temp_dir(&HostEnv::default()),
        std::path::PathBuf::from("/tmp")
    );
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let config = Config {
        provider: Some(ProviderKind::Local),
        ..Config::default()
    };
    let ws = Workspace::from_config(&root, &config, None, &host).unwrap();
    assert_eq!(ws.state_dir(), None);
    let factory = ws.factory(false).unwrap();
    let first = factory().unwrap();
    let out = first.call(
        "run",
        json!({"command": "echo hi > \"$CUBBY_OUTPUT_DIR/hi.txt\""}),
    );
    assert!(!out.is_error, "{}", out.text);
    let file = out.artifacts()[0].clone();
    let made: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(made.len(), 1, "{made:?}");
    assert!(made[0].starts_with("cubby-run-"), "{made:?}");
    // The run is gone; a later run of the workspace still finds the bytes.
    drop(first);
    let second = factory().unwrap();
    assert_eq!(second.seed(&[file]).unwrap().len(), 1);
    drop((second, factory, ws));
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

/// On `linux` commands write `$CUBBY_OUTPUT_DIR` (in the workspace) and
/// never see the store, whether `state_dir` is under `/tmp` (the sandbox's
/// private `/tmp` covers it) or elsewhere (`host_deny_read`).
#[test]
fn on_linux_commands_write_the_output_dir_and_never_read_the_store() {
    let home = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .unwrap();
    let outside_tmp = tempfile::tempdir_in(&home).unwrap();
    let in_tmp = tempfile::tempdir_in("/tmp").unwrap();
    for base in [in_tmp.path(), outside_tmp.path()] {
        let state_dir = base.join("state");
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let config = Config {
            provider: Some(ProviderKind::Linux),
            state_dir: Some(state_dir.to_str().unwrap().to_string()),
            ..Config::default()
        };
        let ws = Workspace::from_config(&root, &config, None, &HostEnv::capture()).unwrap();
        let t = ws.factory(false).unwrap()().unwrap();
        let out = t.call(
            "run",
            json!({"command": "echo hi > \"$CUBBY_OUTPUT_DIR/hi.txt\""}),
        );
        assert!(!out.is_error, "{}", out.text);
        let files = out.artifacts();
        assert_eq!(files.len(), 1, "{}", out.text);
        let blob = state_dir
            .join("artifacts/sha256")
            .join(&files[0].sha256[..2])
            .join(&files[0].sha256);
        assert!(blob.is_file());
        let out = t.call("run", json!({"command": format!("cat {}", blob.display())}));
        assert!(out.is_error || !out.text.contains("hi\n"), "{}", out.text);
        assert!(out.text.starts_with("FAILED"), "{}", out.text);
        t.stop_processes();
    }
}

/// Red-team 4, R4-8: `state_dir` is checked as the kernel resolves it. A
/// `..` is refused (`/tmp/../<root>/.st` passed the inside-the-workspace
/// check, `/tmp/../elsewhere` the `/tmp` one, so commands read the store),
/// and a link on the way is resolved before the checks.
#[test]
fn a_state_dir_is_checked_as_it_resolves_not_as_it_is_written() {
    let dir = tempfile::tempdir_in("/tmp").unwrap();
    let base = dir.path().canonicalize().unwrap();
    let root = base.join("root");
    std::fs::create_dir(&root).unwrap();
    // Outside /tmp (a store there is hidden from commands by
    // `host_deny_read`; under /tmp by the sandbox's private /tmp).
    let home = std::path::PathBuf::from(std::env::var_os("HOME").unwrap());
    let away = tempfile::tempdir_in(&home).unwrap();
    let outside = away.path().canonicalize().unwrap();
    let open = |state_dir: String| {
        let config = Config {
            provider: Some(ProviderKind::Virtual),
            state_dir: Some(state_dir),
            ..Config::default()
        };
        Workspace::from_config(&root, &config, None, &HostEnv::default())
    };
    let up = |p: &std::path::Path| format!("/tmp/..{}", p.display());
    // The oracle: the same directories written plainly are told apart.
    let e = open(root.join(".st").display().to_string()).unwrap_err();
    assert!(e.message().contains("inside the workspace"), "{e}");
    let ws = open(outside.join("state").display().to_string()).unwrap();
    assert!(
        ws.policy()
            .host_deny_read()
            .contains(&outside.join("state")),
        "a store outside /tmp is hidden from commands"
    );
    // With `..`: refused, whichever check it would pass lexically.
    for sneaky in [up(&root.join(".st")), up(&outside.join("state"))] {
        let e = open(sneaky.clone()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{sneaky}");
        assert!(e.message().contains("without `..`"), "{sneaky}: {e}");
    }
    // A link under /tmp to the workspace, or to a directory outside /tmp.
    let into_root = base.join("to-root");
    std::os::unix::fs::symlink(&root, &into_root).unwrap();
    let e = open(into_root.join("st").display().to_string()).unwrap_err();
    assert!(e.message().contains("inside the workspace"), "{e}");
    let away_path = outside.clone();
    let linked = base.join("to-home");
    std::os::unix::fs::symlink(&away_path, &linked).unwrap();
    let ws = open(linked.join("state").display().to_string()).unwrap();
    assert_eq!(ws.state_dir(), Some(away_path.join("state").as_path()));
    assert!(
        ws.policy()
            .host_deny_read()
            .contains(&away_path.join("state")),
        "{:?}",
        ws.policy().host_deny_read()
    );
}

/// Red-team 4, R4-7: one session's commands (or file tools) plant a file
/// in another session's output directory, which the other then publishes
/// as its own. On `linux` each command gets only its own run's directory
/// writable; the names are random; the file tools do not write there.
#[test]
fn another_session_cannot_plant_an_artifact_in_this_runs_output_dir() {
    plant_in_another_runs_output_dir(None);
}

/// The same with a protected path beneath `.cubby` (a skills directory
/// there): the output directories' binds were left out whenever any
/// protected path shared `.cubby` (found in review), and A planted.
#[test]
fn a_protected_path_beside_the_output_dirs_keeps_them_apart() {
    plant_in_another_runs_output_dir(Some(vec![".cubby/skills".into()]));
}

fn plant_in_another_runs_output_dir(skills_dirs: Option<Vec<String>>) {
    let state = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let mut config = Config {
        provider: Some(ProviderKind::Linux),
        state_dir: Some(state.path().join("state").to_str().unwrap().to_string()),
        ..Config::default()
    };
    if let Some(dirs) = skills_dirs {
        config.skills.dirs = dirs;
    }
    let ws = Workspace::from_config(&root, &config, None, &HostEnv::capture()).unwrap();
    let factory = ws.factory(false).unwrap();
    let (a, b) = (factory().unwrap(), factory().unwrap());
    let run = |t: &cubby::Toolset, command: &str| {
        let out = t.call("run", json!({ "command": command }));
        assert!(!out.is_error, "{}", out.text);
        out
    };
    // B leaves a file: its directory stays.
    let out = run(&b, "echo b > \"$CUBBY_OUTPUT_DIR/b.txt\"");
    let path = out.artifacts()[0].path.clone().unwrap();
    let b_dir = std::path::Path::new(&path).parent().unwrap().to_path_buf();
    let name = b_dir.file_name().unwrap().to_str().unwrap().to_string();
    // A writes into every other output directory, and its own.
    let out = run(
        &a,
        "mine=$(basename \"$CUBBY_OUTPUT_DIR\"); for d in .cubby/output/*/; do \
         [ \"$(basename \"$d\")\" = \"$mine\" ] && continue; \
         echo 'wire the money to 666' > \"$d/report.txt\" && echo \"planted in $d\"; done; \
         echo a > \"$CUBBY_OUTPUT_DIR/a.txt\"; \
         mv .cubby .cubby-x && echo RENAMED-AWAY; true",
    );
    assert!(!out.text.contains("planted in"), "{}", out.text);
    assert!(!out.text.contains("RENAMED-AWAY"), "{}", out.text);
    let names: Vec<_> = out.artifacts().iter().map(|f| f.name.clone()).collect();
    assert_eq!(
        names,
        ["a.txt"],
        "A's own directory is writable: {}",
        out.text
    );
    let a_file = out.artifacts()[0].clone();
    let e = a.call(
        "write_file",
        json!({"path": format!("{path}.planted"), "content": "x"}),
    );
    assert!(e.is_error && e.text.contains("denied"), "{}", e.text);
    let e = a.call(
        "write_file",
        json!({"path": b_dir.join("report.txt"), "content": "wire the money"}),
    );
    assert!(e.is_error && e.text.contains("denied"), "{}", e.text);
    // Nor by seeding A's run with a FileRef whose path is in B's
    // directory (found in review: seeding wrote there): it lands in
    // `.cubby/input`, as a FileRef with no path does.
    let mut forged = a_file;
    forged.path = Some(b_dir.join("report.txt").display().to_string());
    let seeded = a.seed(&[forged]).unwrap();
    // (A's run published these bytes under this name already: the FileRef
    // that comes back is that artifact's.)
    assert_eq!(seeded[0].sha256, out.artifacts()[0].sha256);
    assert_eq!(
        std::fs::read(root.join(".cubby/input/a.txt")).unwrap(),
        b"a\n"
    );
    // B's next run publishes nothing of A's.
    let out = run(&b, "true");
    assert!(out.artifacts().is_empty(), "{}", out.text);
    assert!(!root.join(&b_dir).join("report.txt").exists());
    // The oracle: the same file put there from outside the sandbox is
    // published by B's next run, as any file in its directory is.
    std::fs::write(root.join(&b_dir).join("report.txt"), "wire the money").unwrap();
    let out = run(&b, "true");
    let names: Vec<_> = out.artifacts().iter().map(|f| f.name.clone()).collect();
    assert_eq!(names, ["report.txt"], "{}", out.text);
    assert!(
        name.len() == 32 && name.bytes().all(|c| c.is_ascii_hexdigit()),
        "a guessable run id: {name}"
    );
    a.stop_processes();
    b.stop_processes();
}

/// The user the store tests run as (the escape suite's, made the same way).
const OTHER_USER: &str = "cubby-escape";

/// Where [`stores_as_an_unprivileged_user`] is told its temporary directory.
const SHARED_TMP_ENV: &str = "CUBBY_TEST_SHARED_TMP";

/// Set: that run leaves its stores behind (as a process that exits without
/// dropping them does).
const FORGET_ENV: &str = "CUBBY_TEST_FORGET_STORES";

fn other_user() -> (u32, u32) {
    let lookup = || {
        std::fs::read_to_string("/etc/passwd")
            .unwrap()
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.first() == Some(&OTHER_USER))
                    .then(|| (f[2].parse().unwrap(), f[3].parse().unwrap()))
            })
    };
    if let Some(ids) = lookup() {
        return ids;
    }
    let status = std::process::Command::new("useradd")
        .args([
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
        ])
        .arg(OTHER_USER)
        .status()
        .unwrap();
    assert!(status.success() || lookup().is_some(), "useradd failed");
    lookup().unwrap()
}

/// Red-team 4, R4-9 (b) and (c), as an unprivileged user in a shared,
/// sticky temporary directory: another user squats the names of the
/// user's stores there (the default name then failed every artifact with
/// `internal`, and cubby made `artifacts/` inside the squatter's
/// directory); the library's and the workspace's default store (a private
/// one) failed for every user but root (`<tmp> is not a directory of this
/// user`) and stayed behind when the process exited without dropping it.
#[test]
fn the_stores_of_an_unprivileged_user_survive_a_squat_and_leave_nothing() {
    use std::os::unix::fs::PermissionsExt as _;
    use std::os::unix::process::CommandExt as _;
    assert!(
        rustix::process::geteuid().is_root(),
        "this test makes a user and a squatter: run it as root (CI does)"
    );
    let (uid, gid) = other_user();
    let bin_dir = tempfile::Builder::new()
        .prefix("cubby-store-bin-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(bin_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = bin_dir.path().join("artifacts");
    std::fs::copy(std::env::current_exe().unwrap(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A shared temporary directory as /tmp is: root's, sticky, writable by all.
    let tmp = tempfile::Builder::new()
        .prefix("cubby-shared-tmp-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    // The squats, by another user (nobody), writable by all: a chosen
    // `state_dir`, and the names the next processes' private stores would
    // have had were they `cubby-run-<pid>-<n>`.
    let squat = |name: &str| {
        let path = tmp.path().join(name);
        std::fs::create_dir(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
        name.to_string()
    };
    let mut squats = vec![squat("chosen-state")];
    let last: u32 = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    for pid in last + 1..last + 2000 {
        for n in 0..2 {
            squats.push(squat(&format!("cubby-run-{pid}-{n}")));
        }
    }
    let run_as_other = |forget: bool| {
        let mut child = std::process::Command::new(&bin);
        child
            .args([
                "--exact",
                "store::stores_as_an_unprivileged_user",
                "--ignored",
                "--test-threads=1",
                "--nocapture",
            ])
            .env_clear()
            .env(SHARED_TMP_ENV, tmp.path())
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("TMPDIR", tmp.path())
            .current_dir(tmp.path())
            .uid(uid)
            .gid(gid);
        if forget {
            child.env(FORGET_ENV, "1");
        }
        let out = child.output().unwrap();
        let text = format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && text.contains("1 passed"),
            "as {OTHER_USER} (uid {uid}):\n{text}"
        );
    };
    let left = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !squats.contains(n))
            .collect();
        names.sort();
        names
    };
    // A process that exits without dropping its stores leaves them; the
    // next one removes what processes gone left.
    run_as_other(true);
    assert_eq!(left().len(), 2, "{:?}", left());
    run_as_other(false);
    assert_eq!(
        left(),
        Vec::<String>::new(),
        "left behind in the shared tmp"
    );
    // Nothing was made inside a squatter's directory.
    for name in &squats {
        assert_eq!(
            std::fs::read_dir(tmp.path().join(name)).unwrap().count(),
            0,
            "{name}"
        );
    }
}

/// Run by [`the_stores_of_an_unprivileged_user_survive_a_squat_and_leave_nothing`]
/// as that user (ignored otherwise: it needs the squats that test makes).
#[test]
#[ignore = "run as another user by the_stores_of_an_unprivileged_user_survive_a_squat_and_leave_nothing"]
fn stores_as_an_unprivileged_user() {
    let tmp = std::path::PathBuf::from(std::env::var_os(SHARED_TMP_ENV).unwrap());
    let host = HostEnv::default().with("TMPDIR", tmp.to_str().unwrap());
    let publish = |t: &cubby::Toolset, name: &str| {
        t.artifacts().publish_bytes(
            &Publish {
                name: name.into(),
                ..Publish::default()
            },
            b"rows\n",
        )
    };
    let dir = tempfile::tempdir_in(&tmp).unwrap();
    let root = dir.path().canonicalize().unwrap();
    // A chosen state_dir another user holds: a clear error naming it.
    let config = Config {
        provider: Some(ProviderKind::Virtual),
        state_dir: Some(tmp.join("chosen-state").to_str().unwrap().to_string()),
        ..Config::default()
    };
    let ws = Workspace::from_config(&root, &config, None, &host).unwrap();
    let session = ws.factory(false).unwrap()().unwrap();
    let e = publish(&session, "report.csv").unwrap_err();
    assert!(
        e.message().contains("chosen-state belongs to uid 65534")
            && e.message().contains("choose another `state_dir`"),
        "{e}"
    );
    drop(session);
    drop(ws);
    // (b) The workspace's default store, a private one (its names are not
    // the squatted ones).
    let config = Config {
        provider: Some(ProviderKind::Virtual),
        ..Config::default()
    };
    let ws = Workspace::from_config(&root, &config, None, &host).unwrap();
    let session = ws.factory(false).unwrap()().unwrap();
    let published = publish(&session, "report.csv").unwrap();
    let (_, bytes) = session.read_artifact(&published.file.uri, 1000).unwrap();
    assert_eq!(bytes, b"rows\n");
    // (c) A library toolset's default store (no store given).
    let library = cubby::Toolset::builder(cubby::virtual_sandbox(cubby::MemoryFs::new()))
        .host_env(host.clone())
        .track_changes(false)
        .build()
        .unwrap();
    let published = publish(&library, "made.csv").unwrap();
    let (_, bytes) = library.read_artifact(&published.file.uri, 1000).unwrap();
    assert_eq!(bytes, b"rows\n");
    drop(dir);
    if std::env::var_os(FORGET_ENV).is_some() {
        std::mem::forget(session);
        std::mem::forget(ws);
        std::mem::forget(library);
    }
}

/// Where [`a_private_store_held_by_this_process`] makes its store.
const HOLD_IN_ENV: &str = "CUBBY_TEST_HOLD_STORE_IN";

/// What the second process prints before the path of the store it made.
const STORE_MADE: &str = "cubby-test-store-made: ";

/// A private store is judged live by its lock (`flock`, held by its
/// process for the store's lifetime), not by its pid: a second process's
/// store, live, is never reclaimed; once that process is SIGKILLed, the next
/// store made reclaims it; and a store whose lock no one holds is
/// reclaimed although its name's pid runs a process (this one: a pid
/// reused). Seen failing without the lock: the last store was kept.
#[test]
fn a_private_store_is_live_while_its_process_holds_the_lock() {
    use std::io::BufRead as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let tmp = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "store::a_private_store_held_by_this_process",
            "--ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(HOLD_IN_ENV, tmp.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Its readiness: the line naming its store (after libtest's
    // `test … ... `, which ends with no newline).
    let theirs = std::io::BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map(Result::unwrap)
        .find_map(|l| {
            l.split_once(STORE_MADE)
                .map(|(_, dir)| std::path::PathBuf::from(dir))
        })
        .expect("the second process made no store");
    assert!(theirs.starts_with(tmp.path()) && theirs.join("sha256").is_dir());
    // A store no process holds, named with a live pid (this process's).
    let reused = tmp
        .path()
        .join(format!("cubby-run-{}-00feedface00", std::process::id()));
    std::fs::create_dir_all(reused.join("sha256")).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(reused.join("live.lock"))
        .unwrap();
    let mine = cubby::artifact::Store::private(tmp.path());
    mine.put(&mut &b"mine"[..], 10).unwrap();
    assert!(theirs.is_dir(), "a live process's store was reclaimed");
    assert!(!reused.exists(), "a store no one holds was kept");
    // Killed: no drop ran, the kernel let go of the lock.
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        theirs.is_dir(),
        "nothing is reclaimed until a store is made"
    );
    let next = cubby::artifact::Store::private(tmp.path());
    next.put(&mut &b"next"[..], 10).unwrap();
    assert!(!theirs.exists(), "the killed process's store was kept");
    assert!(mine.dir().is_dir(), "this process's own store is live");
}

/// The second process of [`a_private_store_is_live_while_its_process_holds_the_lock`]:
/// makes a private store, names it, and holds it until its stdin ends.
#[test]
#[ignore = "run by a_private_store_is_live_while_its_process_holds_the_lock"]
fn a_private_store_held_by_this_process() {
    let Some(tmp) = std::env::var_os(HOLD_IN_ENV) else {
        return;
    };
    let store = cubby::artifact::Store::private(std::path::Path::new(&tmp));
    store.put(&mut &b"theirs"[..], 10).unwrap();
    println!("{STORE_MADE}{}", store.dir().display());
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut std::io::stdin(), &mut rest);
    drop(store);
}

/// `TMPDIR` outside `/tmp` holding the workspace (as a CI runner's or a
/// container's may): the workspace's private store is hidden from
/// commands, and only it. It hid all of `TMPDIR` (a `host_deny_read` entry
/// naming the directory the store would be made in), which refused every
/// workspace there as "in a credential store" and hid its neighbours (found
/// in review; seen failing: the workspace did not open).
#[test]
fn a_workspace_in_tmpdir_opens_and_commands_lose_only_the_store() {
    let shared = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let shared = shared.path().canonicalize().unwrap();
    assert!(!shared.starts_with("/tmp"), "{shared:?}");
    let root = shared.join("ws");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(shared.join("beside.txt"), "beside\n").unwrap();
    let config = Config {
        provider: Some(ProviderKind::Linux),
        ..Config::default()
    };
    let host = HostEnv::capture().with("TMPDIR", shared.to_str().unwrap());
    let ws = Workspace::from_config(&root, &config, None, &host).unwrap();
    let t = ws.factory(false).unwrap()().unwrap();
    let out = t.call(
        "run",
        json!({"command": "echo hi > \"$CUBBY_OUTPUT_DIR/a.txt\""}),
    );
    assert_eq!(out.artifacts().len(), 1, "{}", out.text);
    let store = std::fs::read_dir(&shared)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("cubby-run-")
        })
        .expect("the private store is in TMPDIR");
    assert!(store.join("sha256").is_dir());
    let out = t.call(
        "run",
        json!({"command": format!(
            "cat {0}/beside.txt; ls {1}/sha256 && echo STORE-LISTED; cat {1}/live.lock && echo STORE-READ",
            shared.display(),
            store.display()
        )}),
    );
    assert!(out.text.contains("beside"), "{}", out.text);
    assert!(!out.text.contains("STORE-LISTED"), "{}", out.text);
    assert!(!out.text.contains("STORE-READ"), "{}", out.text);
    // The oracle: the same listing outside the sandbox works.
    assert!(std::fs::read_dir(store.join("sha256")).unwrap().count() > 0);
    drop(t);
    drop(ws);
}

/// Red-team pass 15, S3: an artifact store in a writable root, whose
/// parents commands can rename so that the next session masks the old
/// name only, is refused; outside it, the same `state_dir` is accepted
/// (the control).
#[test]
fn a_state_dir_in_a_writable_root_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    let outside = dir.path().join("shared");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(outside.join("state")).unwrap();
    let config = |writable: Vec<String>| Config {
        state_dir: Some(outside.join("state").to_str().unwrap().to_string()),
        writable_roots: writable,
        ..Config::default()
    };
    let refused = Workspace::from_config(
        &root,
        &config(vec![outside.to_str().unwrap().to_string()]),
        None,
        &HostEnv::capture(),
    );
    let Err(err) = refused else {
        panic!("a state_dir in a writable root was accepted");
    };
    assert!(err.message().contains("writable root"), "{err}");
    assert!(Workspace::from_config(&root, &config(vec![]), None, &HostEnv::capture()).is_ok());
}
