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
