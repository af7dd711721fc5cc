//! The policy through the tools: protected paths, modes, deny lists,
//! `deny_read`, secrets, unknown tools and bad arguments.

use crate::*;

pub fn protected_paths_are_read_only(f: &dyn Fixture) {
    f.put(".git/hooks/pre-commit", b"#!/bin/sh\n");
    f.put(".git/config", b"[core]\n");
    let t = tools(f);
    for path in [
        ".git/hooks/pre-commit",
        ".git/hooks/post-checkout",
        ".git/config",
        ".mcp.json",
        ".codex/config.toml",
        ".claude/settings.json",
        "cubby.toml",
    ] {
        ok(&t, "read_file", json!({"path": ".git/config"}));
        let msg = err(
            &t,
            "write_file",
            json!({"path": path, "content": "evil"}),
            "denied",
        );
        assert!(msg.contains("protected"), "{msg}");
        err(
            &t,
            "edit_file",
            json!({"path": path, "find": "a", "replace": "b"}),
            "denied",
        );
    }
    assert!(f.get(".mcp.json").is_none());
    assert!(f.get(".claude/settings.json").is_none());
    assert_eq!(f.get(".git/config").unwrap(), b"[core]\n");
}

pub fn read_only_mode_offers_no_writes(f: &dyn Fixture) {
    f.put("a.txt", b"x");
    let policy = Policy::builder().mode(Mode::ReadOnly).build().unwrap();
    let t = Toolset::builder(f.sandbox_for(&policy))
        .policy(policy)
        .build()
        .unwrap();
    let names = t.tool_names();
    assert!(!names.contains(&"write_file") && !names.contains(&"edit_file"));
    assert!(names.contains(&"read_file") && names.contains(&"search"));
    let msg = err(
        &t,
        "write_file",
        json!({"path": "b.txt", "content": "x"}),
        "denied",
    );
    assert!(msg.contains("read-only"), "{msg}");
    assert!(f.get("b.txt").is_none());
}

pub fn deny_lists_remove_tools(f: &dyn Fixture) {
    let policy = Policy::builder().deny(["search"]).build().unwrap();
    let t = Toolset::builder(f.sandbox())
        .policy(policy)
        .build()
        .unwrap();
    assert!(!t.tool_names().contains(&"search"));
    assert!(t.tools().iter().all(|s| s.name != "search"));
    err(&t, "search", json!({"query": "x"}), "denied");
    // Web tools are off unless `allow` names them.
    let msg = err(
        &t,
        "web_fetch",
        json!({"url": "http://example.com"}),
        "denied",
    );
    assert!(msg.contains("allow"), "{msg}");
}

pub fn deny_read_hides_paths(f: &dyn Fixture) {
    f.put("secrets/key.pem", b"PRIVATE KEY");
    f.put("public.txt", b"PRIVATE KEY mentioned\n");
    let policy = Policy::builder().deny_read(["secrets/"]).build().unwrap();
    let t = Toolset::builder(f.sandbox_for(&policy))
        .policy(policy)
        .build()
        .unwrap();
    err(
        &t,
        "read_file",
        json!({"path": "secrets/key.pem"}),
        "denied",
    );
    err(
        &t,
        "write_file",
        json!({"path": "secrets/new", "content": "x"}),
        "denied",
    );
    let out = ok(&t, "search", json!({"query": "PRIVATE"}));
    assert_eq!(out.structured["total"], 1, "{}", out.text);
    let out = ok(&t, "list_files", json!({}));
    assert!(!out.text.contains("secrets"), "{}", out.text);
    err(&t, "list_files", json!({"path": "secrets"}), "denied");
}

pub fn secrets_never_leave(f: &dyn Fixture) {
    f.put("cfg/tok-hunter2.txt", b"password=hunter2\nhunter2hunter2\n");
    let t = Toolset::builder(f.sandbox())
        .secret("PASSWORD", "hunter2")
        .build()
        .unwrap();
    for (tool, args) in [
        ("read_file", json!({"path": "cfg/tok-hunter2.txt"})),
        ("list_files", json!({})),
        ("glob", json!({"pattern": "**/*"})),
        // Files are searched redacted: a query for the secret's prefix
        // matches nothing (no oracle on its characters).
        ("search", json!({"query": "password"})),
        ("read_file", json!({"path": "cfg/hunter2-missing"})),
        ("changes", json!({})),
    ] {
        let out = t.call(tool, args);
        assert!(!out.text.contains("hunter2"), "{tool}: {}", out.text);
        assert!(
            !out.structured.to_string().contains("hunter2"),
            "{tool}: {}",
            out.structured
        );
        if tool != "changes" {
            assert!(
                out.text.contains("[REDACTED:PASSWORD]"),
                "{tool}: {}",
                out.text
            );
        }
    }
}

pub fn unknown_tools_and_bad_arguments(f: &dyn Fixture) {
    f.put("a.txt", b"x");
    let t = tools(f);
    let msg = err(&t, "raed_file", json!({}), "invalid_input");
    assert!(msg.contains("read_file"), "{msg}");
    err(&t, "read_file", json!({}), "invalid_input");
    err(&t, "read_file", json!({"path": 7}), "invalid_input");
    err(
        &t,
        "read_file",
        json!({"path": "a.txt", "offset": "ten"}),
        "invalid_input",
    );
    err(
        &t,
        "read_file",
        json!({"path": "a.txt", "offset": -1}),
        "invalid_input",
    );
    err(
        &t,
        "read_file",
        json!({"path": "a.txt", "extra": 1}),
        "invalid_input",
    );
    err(&t, "read_file", json!(["a.txt"]), "invalid_input");
    err(&t, "write_file", json!({"path": "b.txt"}), "invalid_input");
    err(
        &t,
        "edit_file",
        json!({"path": "a.txt", "find": null, "replace": "x"}),
        "invalid_input",
    );
    let out = t.call_json("read_file", b"{\"path\": ");
    assert!(out.text.starts_with("ERROR invalid_input:"), "{}", out.text);
    let out = t.call_json("read_file", b"\xff\xfe");
    assert!(out.text.starts_with("ERROR invalid_input:"), "{}", out.text);
    let huge = json!({"path": "x".repeat(100_000)});
    err(&t, "read_file", huge, "invalid_input");
    let huge_content = json!({"path": "h.txt", "content": "y".repeat(40 * 1024 * 1024)});
    err(&t, "write_file", huge_content, "too_large");
    // And the toolset still serves.
    ok(&t, "read_file", json!({"path": "a.txt"}));
}

/// Red-team finding N13 (file tools): other agents' and editors' project
/// configs that start programs are protected like `.mcp.json`, present or
/// missing. The control: a name beside them is written.
pub fn other_agents_configs_are_read_only(f: &dyn Fixture) {
    f.put(".vscode/settings.json", b"{}\n");
    f.put(".kiro/specs/plan.md", b"plan\n");
    let t = tools(f);
    let editor_settings = [".vscode/settings.json"];
    for &path in crate::common::AGENT_CONFIGS.iter().chain(&editor_settings) {
        if f.get(path).is_some() {
            ok(&t, "read_file", json!({"path": path}));
        }
        let msg = err(
            &t,
            "write_file",
            json!({"path": path, "content": "{\"mcpServers\": {}}"}),
            "denied",
        );
        assert!(msg.contains("protected"), "{path}: {msg}");
        assert!(
            path == ".vscode/settings.json" || f.get(path).is_none(),
            "{path} written"
        );
    }
    assert_eq!(f.get(".vscode/settings.json").unwrap(), b"{}\n");
    // Control: what lies beside them is not protected.
    ok(&t, "read_file", json!({"path": ".kiro/specs/plan.md"}));
    ok(
        &t,
        "write_file",
        json!({"path": ".kiro/specs/plan.md", "content": "plan 2\n"}),
    );
    ok(
        &t,
        "write_file",
        json!({"path": "opencode.md", "content": "notes\n"}),
    );
}

/// Red-team pass 4, R4-3 (file tools): rustup's toolchain file, cargo's
/// config, yarn's, Maven's, sbt's, bazelisk's and `dotnet`'s are obeyed in
/// every directory below the root too (`cd crates/foo && cargo --version`
/// ran a planted toolchain): the file tools refuse them at any depth. The
/// control: the same names as parts of other names, and files beside
/// them, are written.
pub fn tool_configs_below_the_root_are_read_only(f: &dyn Fixture) {
    let t = tools(f);
    for &path in crate::common::NESTED_TOOL_CONFIGS {
        let msg = err(
            &t,
            "write_file",
            json!({"path": path, "content": "[toolchain]\npath = \"/x\"\n"}),
            "denied",
        );
        assert!(msg.contains("protected"), "{path}: {msg}");
        assert!(f.get(path).is_none(), "{path} written");
    }
    for path in [
        "crates/foo/rust-toolchain.toml.md",
        "crates/foo/cargo/config.toml",
        "crates/foo/.cargo/registry.toml",
        "svc/mvn/jvm.config",
        "src/App/global.jsonc",
    ] {
        ok(&t, "write_file", json!({"path": path, "content": "x\n"}));
        assert_eq!(f.get(path).unwrap(), b"x\n", "{path}");
    }
}
