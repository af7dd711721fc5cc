//! Black-box tests of the `cubby` binary: `call`, `tools`, config and flags.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn cubby(root: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args(args)
        .arg("--root")
        .arg(root)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn call_prints_model_text_and_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "hello\n").unwrap();
    let out = cubby(dir.path(), &["call", "read_file", r#"{"path":"a.txt"}"#]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "     1\thello\n");
    let out = cubby(dir.path(), &["call", "read_file", r#"{"path":"../a.txt"}"#]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).starts_with("ERROR path_escape: "));
    let out = cubby(dir.path(), &["call", "read_file", "{not json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).starts_with("ERROR invalid_input: "));
}

#[test]
fn call_json_prints_one_object() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "x\n").unwrap();
    let out = cubby(
        dir.path(),
        &["call", "read_file", r#"{"path":"a.txt"}"#, "--json"],
    );
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["is_error"], false);
    assert_eq!(v["text"], "     1\tx\n");
    assert_eq!(v["structured"]["total_lines"], 1);
    let out = cubby(
        dir.path(),
        &["call", "glob", r#"{"pattern":"["}"#, "--json"],
    );
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["is_error"], true);
    assert_eq!(v["structured"]["error"]["kind"], "invalid_input");
}

#[test]
fn call_reads_arguments_from_stdin() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args(["call", "write_file", "-", "--root"])
        .arg(dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"path":"n/new.txt","content":"made"}"#)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("n/new.txt")).unwrap(),
        "made"
    );
}

#[test]
fn tools_formats_are_valid_and_strict() {
    let dir = tempfile::tempdir().unwrap();
    for format in ["mcp", "openai", "anthropic"] {
        let out = cubby(dir.path(), &["tools", "--format", format]);
        assert_eq!(out.status.code(), Some(0));
        let tools: Vec<Value> = serde_json::from_str(&stdout(&out)).unwrap();
        let names: Vec<&str> = tools
            .iter()
            .map(|t| {
                t["name"]
                    .as_str()
                    .or(t["function"]["name"].as_str())
                    .unwrap()
            })
            .collect();
        assert_eq!(
            names,
            [
                "read_file",
                "write_file",
                "edit_file",
                "glob",
                "list_files",
                "search",
                "changes",
                "view_file",
                "run",
                "start_process",
                "process_logs",
                "stop_process",
                "list_processes",
                "write_stdin",
                "preview"
            ],
            "{format}"
        );
        for t in &tools {
            let schema = match format {
                "mcp" => &t["inputSchema"],
                "anthropic" => &t["input_schema"],
                _ => &t["function"]["parameters"],
            };
            assert_eq!(schema["type"], "object");
            assert_eq!(schema["additionalProperties"], false);
            if format == "openai" {
                assert_eq!(t["type"], "function");
                assert_eq!(t["function"]["strict"], true);
                let props = schema["properties"].as_object().unwrap();
                let required: Vec<&str> = schema["required"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap())
                    .collect();
                assert_eq!(required.len(), props.len(), "{t}");
                for (name, prop) in props {
                    assert!(required.contains(&name.as_str()));
                    assert!(prop.get("format").is_none(), "{t}");
                }
            }
            if format == "mcp" {
                assert_eq!(t["outputSchema"]["type"], "object");
                assert!(t["annotations"]["readOnlyHint"].is_boolean());
            }
        }
    }
}

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

#[test]
fn host_side_keys_never_reach_commands() {
    let dir = tempfile::tempdir().unwrap();
    for provider in ["linux", "local"] {
        // The subcommand, the common flags, then the rest (after `--` for exec).
        let run = |args: &[&str]| {
            Command::new(env!("CARGO_BIN_EXE_cubby"))
                .arg(args[0])
                .arg("--root")
                .arg(dir.path())
                .args(["--provider", provider])
                .args(&args[1..])
                .env_remove("RUST_LOG")
                .env("CUBBY_TOKEN", "token-value-4711")
                .env("BRAVE_API_KEY", "brave-value-4711")
                .env("CUBBY_VISIBLE", "visible-value-4711")
                .output()
                .unwrap()
        };
        let out = run(&["call", "run", r#"{"command": "env"}"#]);
        let text = stdout(&out);
        assert!(text.contains("visible-value-4711"), "{provider}: {text}");
        assert!(!text.contains("token-value-4711"), "{provider}: {text}");
        assert!(!text.contains("brave-value-4711"), "{provider}: {text}");
        if provider == "linux" {
            let out = run(&["exec", "--", "env"]);
            let text = stdout(&out);
            assert!(text.contains("visible-value-4711"), "exec: {text}");
            assert!(!text.contains("token-value-4711"), "exec: {text}");
            assert!(!text.contains("brave-value-4711"), "exec: {text}");
        }
    }
}
