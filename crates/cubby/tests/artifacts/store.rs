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
    assert_eq!(ws.state_dir(), state_dir);
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

#[test]
fn the_default_state_dir_is_the_users_in_the_temp_dir() {
    let host = HostEnv::default().with("TMPDIR", "/var/tmp/x");
    let uid = rustix::process::getuid().as_raw();
    assert_eq!(
        cubby::artifact::default_state_dir(&host),
        std::path::PathBuf::from(format!("/var/tmp/x/cubby-state-{uid}"))
    );
    let (_dir, ws) = workspace(None);
    assert_eq!(
        ws.state_dir(),
        std::path::PathBuf::from(format!("/tmp/cubby-state-{uid}"))
    );
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
    let outside = base.join("outside");
    std::fs::create_dir(&outside).unwrap();
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
    let home = std::path::PathBuf::from(std::env::var_os("HOME").unwrap());
    let away = tempfile::tempdir_in(&home).unwrap();
    let away_path = away.path().canonicalize().unwrap();
    let linked = base.join("to-home");
    std::os::unix::fs::symlink(&away_path, &linked).unwrap();
    let ws = open(linked.join("state").display().to_string()).unwrap();
    assert_eq!(ws.state_dir(), away_path.join("state"));
    assert!(
        ws.policy()
            .host_deny_read()
            .contains(&away_path.join("state")),
        "{:?}",
        ws.policy().host_deny_read()
    );
}
