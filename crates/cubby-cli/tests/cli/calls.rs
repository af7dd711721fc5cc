//! `cubby call` and `cubby tools`: model text, exit codes, `--json`, arguments
//! on stdin, the tool formats (strict, with output schemas).

use crate::*;

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
                // As `tools/list` shows them: no outputSchema by default.
                assert!(t.get("outputSchema").is_none(), "{t}");
                assert!(t["annotations"]["readOnlyHint"].is_boolean());
            }
        }
    }
}

#[test]
fn tools_show_output_schemas_with_structured_content_on() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cubby.toml"),
        "[mcp]\nstructured_content = true\n",
    )
    .unwrap();
    let out = cubby(dir.path(), &["tools", "--format", "mcp"]);
    assert_eq!(out.status.code(), Some(0));
    let tools: Vec<Value> = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(!tools.is_empty());
    for t in &tools {
        assert_eq!(t["outputSchema"]["type"], "object", "{t}");
    }
    // The other formats have no output schema to show.
    let out = cubby(dir.path(), &["tools", "--format", "anthropic"]);
    let tools: Vec<Value> = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(tools.iter().all(|t| t.get("outputSchema").is_none()));
    // An unknown key under [mcp] is an error that names it.
    std::fs::write(dir.path().join("cubby.toml"), "[mcp]\nstructured = true\n").unwrap();
    let out = cubby(dir.path(), &["tools"]);
    assert_ne!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("structured"), "{stderr}");
}
