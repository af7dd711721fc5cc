//! Roots reached under another name through a bind mount (red-team pass
//! 17, 9): cubby runs in a mount namespace of its own (`unshare -rm`),
//! where the test binds a directory elsewhere before starting it.

use std::path::Path;
use std::process::{Command, Output};

/// The exit status the wrapper gives when the bind does not reach what
/// the test expects through it (the control: the namespace and its bind
/// are real).
const NOT_REACHED: i32 = 97;

/// Where the command runs: the workspace, the config and `HOME` (when
/// given).
struct Place<'a> {
    ws: &'a Path,
    config: &'a Path,
    home: Option<&'a Path>,
}

/// `cubby exec` of `command` in `place`, started in a mount namespace of
/// its own where `source` is bound on `target`, once `probe` (a path under
/// `target`) exists there.
fn exec_with_bind(
    source: &Path,
    target: &Path,
    probe: &Path,
    place: &Place<'_>,
    command: &[&str],
) -> Output {
    let mut cmd = Command::new("unshare");
    if let Some(home) = place.home {
        cmd.env("HOME", home);
    }
    let out = cmd
        .args(["-rm", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "mount --bind \"$1\" \"$2\" || exit 96; test -e \"$3\" || exit {NOT_REACHED}; \
             shift 3; exec \"$@\""
        ))
        .arg("sh")
        .arg(source)
        .arg(target)
        .arg(probe)
        .arg(env!("CARGO_BIN_EXE_cubby"))
        .arg("exec")
        .arg("--root")
        .arg(place.ws)
        .arg("--config")
        .arg(place.config)
        .arg("--")
        .args(command)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert_ne!(
        out.status.code(),
        Some(NOT_REACHED),
        "the bind did not reach {}",
        probe.display()
    );
    assert_ne!(out.status.code(), Some(96), "mount --bind failed: {out:?}");
    out
}

/// A writable root that is a bind of the workspace's parent: the
/// workspace's `.git/hooks` are bound read-only under their own name only,
/// so commands wrote a hook through the bind that the host's next commit
/// ran (seen with the code before this check: `rc=0` and the hook on
/// disk). Refused at the open; nothing is written.
#[test]
fn a_writable_root_bound_from_the_workspaces_parent_is_refused() {
    let base = tempfile::tempdir().unwrap();
    let b = base.path().canonicalize().unwrap();
    let ws = b.join("parent/ws");
    let alias = b.join("alias");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir(&alias).unwrap();
    let init = Command::new("git")
        .args(["init", "-q"])
        .arg(&ws)
        .status()
        .unwrap();
    assert!(init.success());
    let config = b.join("cubby.toml");
    std::fs::write(
        &config,
        format!("writable_roots = [\"{}\"]\n", alias.display()),
    )
    .unwrap();
    let hook = alias.join("ws/.git/hooks/pre-commit");
    let place = Place {
        ws: &ws,
        config: &config,
        home: None,
    };
    let out = exec_with_bind(
        &b.join("parent"),
        &alias,
        &alias.join("ws/.git/HEAD"),
        &place,
        &["sh", "-c", &format!("echo evil > {}", hook.display())],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the sandbox opened: {err}");
    assert!(
        err.contains("under another name") && err.contains(&alias.display().to_string()),
        "{err}"
    );
    assert!(!ws.join(".git/hooks/pre-commit").exists());
}

/// A readable root (`read_scope = "system"`) that is a bind of a
/// credential store: its keys were the commands' to read under the bind's
/// name, since the store is masked under its own. Refused at the open.
#[test]
fn a_readable_root_bound_from_a_credential_store_is_refused() {
    // Outside `/tmp`: commands have a private one, where neither the home
    // nor the root would be.
    let base = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let b = base.path().canonicalize().unwrap();
    let home = b.join("home");
    let ws = b.join("ws");
    let alias = b.join("keys");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "PRIVATE KEY\n").unwrap();
    std::fs::create_dir(&ws).unwrap();
    std::fs::create_dir(&alias).unwrap();
    let config = b.join("cubby.toml");
    std::fs::write(
        &config,
        format!(
            "read_scope = \"system\"\nreadable_roots = [\"{}\"]\n",
            alias.display()
        ),
    )
    .unwrap();
    let probe = alias.join("id_ed25519");
    let place = Place {
        ws: &ws,
        config: &config,
        home: Some(&home),
    };
    let out = exec_with_bind(
        &home.join(".ssh"),
        &alias,
        &probe,
        &place,
        &["cat", probe.to_str().unwrap()],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the sandbox opened: {err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("PRIVATE KEY"));
    assert!(err.contains("credential store"), "{err}");
}
