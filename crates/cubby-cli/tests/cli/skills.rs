//! Skills through the binary: `cubby mcp` over stdio carries the catalog in
//! its `instructions` and lists `skill` with the skills as an enum;
//! `cubby doctor` lists the skills found and those skipped, with reasons.

use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use super::{cubby, stdout};

/// A workspace with one good skill and one that breaks a rule.
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let skill = |name: &str, text: &str| {
        let d = dir.path().join("skills").join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("SKILL.md"), text).unwrap();
    };
    skill(
        "pdf",
        "---\nname: pdf\ndescription: Fill PDF forms.\nallowed-tools: Bash\n---\nUse qpdf.\n",
    );
    skill("Bad", "---\nname: Bad\ndescription: Upper case.\n---\n");
    dir
}

/// The answers of `cubby mcp` to `requests` (after the handshake), by id.
fn mcp(root: &Path, requests: &[Value]) -> Vec<Value> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args(["mcp", "--provider", "local", "--root"])
        .arg(root)
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    writeln!(stdin, "{init}").unwrap();
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .unwrap();
    for (n, r) in requests.iter().enumerate() {
        let mut r = r.clone();
        r["jsonrpc"] = json!("2.0");
        r["id"] = json!(n + 1);
        writeln!(stdin, "{r}").unwrap();
    }
    let mut answers = Vec::new();
    let lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    for line in lines {
        let v: Value = serde_json::from_str(&line.unwrap()).unwrap();
        if v.get("id").is_some() {
            answers.push(v);
        }
        if answers.len() == requests.len() + 1 {
            break;
        }
    }
    drop(stdin);
    assert!(child.wait().unwrap().success());
    answers.sort_by_key(|a| a["id"].as_u64());
    answers
}

#[test]
fn mcp_instructions_carry_the_catalog_and_the_tool_lists_the_enum() {
    let dir = workspace();
    let answers = mcp(
        dir.path(),
        &[
            json!({"method": "tools/list", "params": {}}),
            json!({"method": "tools/call", "params": {"name": "skill", "arguments": {"name": "pdf"}}}),
        ],
    );
    let instructions = answers[0]["result"]["instructions"].as_str().unwrap();
    assert!(instructions.chars().count() <= 2_000);
    assert!(
        instructions.contains("<skills shown=\"1\" total=\"1\">"),
        "{instructions}"
    );
    assert!(
        instructions.contains("- pdf: Fill PDF forms."),
        "{instructions}"
    );
    assert!(instructions.contains("1 skipped"), "{instructions}");
    let tools = answers[1]["result"]["tools"].as_array().unwrap();
    let skill = tools.iter().find(|t| t["name"] == "skill").unwrap();
    assert_eq!(
        skill["inputSchema"]["properties"]["name"]["enum"],
        json!(["pdf", null]),
        "{skill}"
    );
    assert_eq!(skill["annotations"]["readOnlyHint"], true, "{skill}");
    let text = answers[2]["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("Use qpdf."), "{text}");
    assert!(
        text.contains("allowed-tools: Bash (shown, not obeyed"),
        "{text}"
    );
}

#[test]
fn doctor_lists_the_skills_found_and_skipped_with_reasons() {
    let dir = workspace();
    let out = cubby(dir.path(), &["doctor", "--provider", "local"]);
    let text = stdout(&out);
    assert!(
        text.contains("skills:           1 found in skills/ (pdf)"),
        "{text}"
    );
    assert!(
        text.contains("skipped:        skills/Bad/: `name` `Bad` is not lower-case"),
        "{text}"
    );
}

/// The MCP skills extension (SEP-2640) over stdio, served from cubby's own
/// catalog: declared in the capabilities; `skills/list` gives the valid
/// skill (not the one that breaks a rule) with its frontmatter and the
/// digest and size of each file; `skills/get` by its `SKILL.md` URI;
/// `resources/read` of a `skill://` URI gives a file's bytes through the
/// confined reader; a URI out of the skill, or of a skill not served, is
/// an error that gives nothing away.
#[test]
fn the_skills_extension_serves_the_catalog_through_the_confined_reader() {
    use sha2::Digest as _;
    let dir = workspace();
    let forms = "Form fields.\n";
    std::fs::create_dir_all(dir.path().join("skills/pdf/reference")).unwrap();
    std::fs::write(dir.path().join("skills/pdf/reference/forms.md"), forms).unwrap();
    std::fs::write(dir.path().join("outside.txt"), "kept out\n").unwrap();
    let answers = mcp(
        dir.path(),
        &[
            json!({"method": "skills/list", "params": {}}),
            json!({"method": "skills/get", "params": {"uri": "skill://pdf/SKILL.md"}}),
            json!({"method": "resources/read", "params": {"uri": "skill://pdf/reference/forms.md"}}),
            json!({"method": "resources/read", "params": {"uri": "skill://pdf/../../outside.txt"}}),
            json!({"method": "resources/read", "params": {"uri": "skill://pdf/..%2F..%2Foutside.txt"}}),
            json!({"method": "skills/get", "params": {"uri": "skill://Bad/SKILL.md"}}),
        ],
    );
    let init = &answers[0];
    assert!(
        init["result"]["capabilities"]["extensions"]["io.modelcontextprotocol/skills"].is_object(),
        "{init}"
    );
    let skills = answers[1]["result"]["skills"].as_array().unwrap();
    assert_eq!(skills.len(), 1, "{}", answers[1]);
    let pdf = &skills[0];
    assert_eq!(pdf["uri"], "skill://pdf/SKILL.md");
    assert_eq!(pdf["frontmatter"]["name"], "pdf");
    assert_eq!(pdf["frontmatter"]["description"], "Fill PDF forms.");
    assert_eq!(pdf["frontmatter"]["allowed-tools"], "Bash");
    let skill_md = std::fs::read(dir.path().join("skills/pdf/SKILL.md")).unwrap();
    let digest = |bytes: &[u8]| {
        let hex: String = sha2::Sha256::digest(bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("sha256:{hex}")
    };
    let files: Vec<(String, String, u64)> = pdf["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["uri"].as_str().unwrap().to_string(),
                f["digest"].as_str().unwrap().to_string(),
                f["size"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        files,
        [
            (
                "skill://pdf/SKILL.md".to_string(),
                digest(&skill_md),
                skill_md.len() as u64
            ),
            (
                "skill://pdf/reference/forms.md".to_string(),
                digest(forms.as_bytes()),
                forms.len() as u64
            ),
        ]
    );
    assert_eq!(answers[2]["result"]["skill"], *pdf, "{}", answers[2]);
    assert_eq!(
        answers[3]["result"]["contents"][0]["text"], forms,
        "{}",
        answers[3]
    );
    for refused in &answers[4..] {
        assert!(refused.get("error").is_some(), "{refused}");
        assert!(!refused.to_string().contains("kept out"), "{refused}");
    }
}
