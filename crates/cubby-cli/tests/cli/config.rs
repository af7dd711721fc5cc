//! Config files and flags: modes, protection of the config, unknown keys, the
//! `virtual` provider, secrets.

use crate::*;

#[test]
fn read_only_mode_from_flag_hides_write_tools() {
    let dir = tempfile::tempdir().unwrap();
    let out = cubby(dir.path(), &["tools", "--mode", "read-only"]);
    let tools: Vec<Value> = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(
        tools
            .iter()
            .all(|t| t["name"] != "write_file" && t["name"] != "edit_file")
    );
    let out = cubby(
        dir.path(),
        &[
            "call",
            "write_file",
            r#"{"path":"x","content":"y"}"#,
            "--mode",
            "read-only",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).starts_with("ERROR denied: "));
    assert!(!dir.path().join("x").exists());
}

#[test]
fn config_file_is_read_protected_and_flags_win() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cubby.toml"),
        "mode = \"read-only\"\ndeny = [\"search\"]\n",
    )
    .unwrap();
    let out = cubby(dir.path(), &["tools"]);
    let tools: Vec<Value> = serde_json::from_str(&stdout(&out)).unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(
        !names.contains(&"search") && !names.contains(&"write_file"),
        "{names:?}"
    );
    // The flag wins over the file's mode.
    let out = cubby(
        dir.path(),
        &[
            "call",
            "write_file",
            r#"{"path":"w.txt","content":"y"}"#,
            "--mode",
            "workspace-write",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    // The config file itself is protected.
    let out = cubby(
        dir.path(),
        &[
            "call",
            "write_file",
            r#"{"path":"cubby.toml","content":"mode = \"full-access\""}"#,
            "--mode",
            "workspace-write",
        ],
    );
    assert!(
        stdout(&out).starts_with("ERROR denied: "),
        "{}",
        stdout(&out)
    );
    // A config file elsewhere that lies inside the root is protected too.
    std::fs::create_dir(dir.path().join("conf")).unwrap();
    std::fs::write(dir.path().join("conf/other.toml"), "").unwrap();
    let cfg = dir.path().join("conf/other.toml");
    let out = cubby(
        dir.path(),
        &[
            "call",
            "write_file",
            r#"{"path":"conf/other.toml","content":"x"}"#,
            "--config",
            cfg.to_str().unwrap(),
        ],
    );
    assert!(
        stdout(&out).starts_with("ERROR denied: "),
        "{}",
        stdout(&out)
    );
}

#[test]
fn unknown_config_keys_are_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cubby.toml"),
        "mode = \"read-only\"\nalow = [\"web_fetch\"]\n",
    )
    .unwrap();
    let out = cubby(dir.path(), &["tools"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("alow"), "{err}");
}

#[test]
fn virtual_provider_keeps_writes_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("seed.txt"), "seeded\n").unwrap();
    let out = cubby(
        dir.path(),
        &[
            "call",
            "read_file",
            r#"{"path":"seed.txt"}"#,
            "--provider",
            "virtual",
        ],
    );
    assert_eq!(stdout(&out), "     1\tseeded\n");
    let out = cubby(
        dir.path(),
        &[
            "call",
            "write_file",
            r#"{"path":"mem.txt","content":"x"}"#,
            "--provider",
            "virtual",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(!dir.path().join("mem.txt").exists());
}

#[test]
fn secrets_from_config_are_redacted() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cubby.toml"),
        "secrets = [\"CUBBY_TEST_TOKEN\"]\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("leak.txt"), "token=tok-123456789\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args(["call", "read_file", r#"{"path":"leak.txt"}"#, "--root"])
        .arg(dir.path())
        .env("CUBBY_TEST_TOKEN", "tok-123456789")
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(text.contains("token=[REDACTED:CUBBY_TEST_TOKEN]"), "{text}");
    assert!(!text.contains("tok-123456789"));
}
