//! Attacks on protected paths. Protected paths (read-only, reserved when
//! missing) and `deny_read`.
//!
//! [`ATTACKS`] is this section's table of the escape suite: commands on the
//! `linux` provider, a row per attack (what it tries, what the host must show
//! afterwards, the control it makes, if any), run by `escape_suite_as_*` in
//! `main.rs`.

use crate::Attack;
use crate::lab::*;
use serde_json::json;
use std::path::Path;

/// The escape suite's attacks on protected paths.
pub const ATTACKS: &[Attack] = &[
    Attack {
        name: "write, truncate, delete existing protected paths",
        expect: "every protected file unchanged, nothing added",
        control: None,
        run: protected_existing,
    },
    Attack {
        name: "rename protected directories away",
        expect: "the protected directories in place, unchanged",
        control: None,
        run: protected_renamed_away,
    },
    Attack {
        name: "create missing protected paths (git init)",
        expect: "no protected path (nor placeholder) left",
        control: None,
        run: protected_missing_created,
    },
    Attack {
        name: "create missing protected paths after a command sharing them ends",
        expect: "no protected path left",
        control: None,
        run: protected_missing_after_a_sharing_command_ends,
    },
    Attack {
        name: "create missing protected paths after another sandbox opens on the workspace",
        expect: "no protected path left; the other sandbox's open swept no live placeholder",
        control: None,
        run: protected_missing_after_another_sandbox_opens,
    },
    Attack {
        name: "write other agents' and editors' project configs",
        expect: "none created, the existing ones unchanged; the file tools denied",
        control: Some("the same command on the host creates every one"),
        run: other_agents_configs_written,
    },
    Attack {
        name: "write through a protected path that is a symlink",
        expect: "the command refused (unsupported), nothing written outside",
        control: None,
        run: protected_path_made_a_symlink,
    },
    Attack {
        name: "read a deny_read file",
        expect: "the secret unseen and unchanged",
        control: None,
        run: deny_read_file,
    },
    Attack {
        name: "read a nested deny_read file after renaming a directory above it",
        expect: "the secret unseen and in place",
        control: None,
        run: deny_read_parent_renamed,
    },
    Attack {
        name: "read a deny_read file through a symlinked parent",
        expect: "the secret unseen",
        control: None,
        run: deny_read_through_a_symlinked_parent,
    },
];

fn protected_existing(l: &Lab) -> Verdict {
    let files = [
        (".git/hooks/pre-commit", "#!/bin/sh\nexit 0\n"),
        (".git/config", "[core]\n"),
        (".mcp.json", "{}\n"),
        (".codex/config.toml", "x = 1\n"),
        (".claude/settings.json", "{}\n"),
        ("cubby.toml", "mode = \"workspace-write\"\n"),
    ];
    for (path, body) in files {
        let p = l.ws.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, body).unwrap();
    }
    l.sh(
        "for f in .git/hooks/pre-commit .git/config .mcp.json .codex/config.toml \
         .claude/settings.json cubby.toml; do echo pwned >> $f; : > $f; rm -f $f; done; \
         echo pwned > .git/hooks/post-checkout; echo pwned > .codex/new; echo pwned > .claude/new",
    );
    for (path, body) in files {
        unchanged(&l.ws.join(path), body)?;
    }
    absent(&l.ws.join(".git/hooks/post-checkout"))?;
    absent(&l.ws.join(".codex/new"))?;
    absent(&l.ws.join(".claude/new"))
}

fn protected_renamed_away(l: &Lab) -> Verdict {
    std::fs::create_dir_all(l.ws.join(".git/hooks")).unwrap();
    std::fs::write(l.ws.join(".git/config"), "[core]\n").unwrap();
    std::fs::create_dir_all(l.ws.join(".claude")).unwrap();
    l.sh(
        "mv .git .git-old; mkdir -p .git/hooks && echo pwned > .git/hooks/pre-commit; \
         mv .claude .claude-old; mkdir .claude && echo pwned > .claude/settings.json; \
         mv .git/hooks .git/hooks-old; rm -rf .git/hooks",
    );
    absent(&l.ws.join(".git/hooks/pre-commit"))?;
    absent(&l.ws.join(".claude/settings.json"))?;
    unchanged(&l.ws.join(".git/config"), "[core]\n")?;
    absent(&l.ws.join(".git-old")).and(absent(&l.ws.join(".claude-old")))
}

fn protected_missing_created(l: &Lab) -> Verdict {
    let out = l.sh(
        "git init -q . ; mkdir -p .git/hooks; echo pwned > .git/hooks/pre-commit; \
         echo pwned > .git/config; echo '{}' > .mcp.json; mkdir .codex; \
         mkdir -p .claude && echo pwned > .claude/settings.json; echo pwned > cubby.toml; \
         ln -s /tmp .codex",
    );
    for p in [".git", ".mcp.json", ".codex", ".claude", "cubby.toml"] {
        absent(&l.ws.join(p))
            .map_err(|e| format!("{e} (no placeholder may stay): {}", out.text))?;
    }
    Ok(())
}

fn protected_missing_after_a_sharing_command_ends(l: &Lab) -> Verdict {
    // A command started while another holds the reservations of the missing
    // protected paths shares them: when the first ends, the second still
    // cannot create them.
    let first = l.tools.call(
        "start_process",
        json!({"name": "holds", "command": "sleep 0.5"}),
    );
    if first.is_error {
        return Err(first.text);
    }
    let out = l.sh("sleep 1.5; mkdir -p .codex/x; echo pwned > .mcp.json; \
         mkdir -p .claude && echo pwned > .claude/settings.json; echo pwned > cubby.toml");
    for p in [".codex", ".mcp.json", ".claude", "cubby.toml"] {
        absent(&l.ws.join(p)).map_err(|e| format!("{e}: {}", out.text))?;
    }
    Ok(())
}

fn protected_missing_after_another_sandbox_opens(l: &Lab) -> Verdict {
    // A second sandbox of the process opened on the workspace (another MCP
    // session, an upstream server's) sweeps the placeholders a killed cubby
    // left at open: it must not take the ones a running command holds (a
    // mount point in another mount namespace can be removed, which detaches
    // the command's read-only mount).
    let started = l.tools.call(
        "start_process",
        json!({"name": "waits", "command": "while [ ! -e go ]; do sleep 0.02; done; \
             mkdir -p .codex/x; echo pwned > .mcp.json; echo pwned > cubby.toml; \
             mkdir -p .claude && echo pwned > .claude/settings.json; echo > finished"}),
    );
    if started.is_error {
        return Err(started.text);
    }
    let policy = cubby::Policy::builder()
        .build()
        .map_err(|e| e.to_string())?;
    let second = cubby::LinuxSandbox::open(&l.ws, &policy, &cubby::HostEnv::capture())
        .map_err(|e| e.to_string())?;
    std::fs::write(l.ws.join("go"), "").map_err(|e| e.to_string())?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !l.ws.join("finished").exists() {
        if std::time::Instant::now() > deadline {
            return Err("the command never finished".into());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    drop(second);
    for p in [".codex", ".mcp.json", ".claude", "cubby.toml"] {
        absent(&l.ws.join(p))?;
    }
    Ok(())
}

fn protected_path_made_a_symlink(l: &Lab) -> Verdict {
    // A symlink at a protected name cannot be bound read-only: commands
    // must not start at all rather than write through it.
    std::os::unix::fs::symlink(&l.outside, l.ws.join(".claude")).unwrap();
    let out = l.tools.call(
        "run",
        json!({"command": "echo pwned > .claude/settings.json"}),
    );
    if !out.text.starts_with("ERROR unsupported") {
        return Err(format!("a command ran: {}", out.text));
    }
    absent(&l.out("settings.json"))
}

fn deny_read_file(l: &Lab) -> Verdict {
    std::fs::create_dir_all(l.ws.join("secrets")).unwrap();
    let m = marker("denyread");
    std::fs::write(l.ws.join("secrets/key.txt"), &m).unwrap();
    // The sandbox starts (and masks) at its first command.
    let out =
        l.sh("cat secrets/key.txt; ls -la secrets; grep -r . secrets; cp -r secrets s2; cat s2/*");
    not_in(&out, &m)?;
    unchanged(&l.ws.join("secrets/key.txt"), &m)
}

fn deny_read_parent_renamed(l: &Lab) -> Verdict {
    // A directory above a nested deny_read path is carried off to a name
    // nothing hides, then read there (in the same command, and in a later
    // one after the sandbox is made again).
    let secrets = l.ws.join(NESTED_SECRET_DIR);
    std::fs::create_dir_all(&secrets).unwrap();
    let m = marker("denyparent");
    std::fs::write(secrets.join("key.txt"), &m).unwrap();
    let out = l.sh(
        "mv nested moved; mv nested/deep nested/d2; cat moved/deep/secrets/key.txt \
         nested/d2/secrets/key.txt; cp -r nested copy; cat copy/deep/secrets/key.txt",
    );
    not_in(&out, &m)?;
    unchanged(&secrets.join("key.txt"), &m)?;
    let again = lab_with(|_, _, _| {});
    let moved = again.ws.join("nested");
    std::fs::create_dir_all(moved.join("deep/secrets")).unwrap();
    std::fs::write(moved.join("deep/secrets/key.txt"), &m).unwrap();
    let out = again.sh("mv nested/deep/secrets nested/s2; mv nested n2; cat n2/deep/secrets/key.txt nested/s2/key.txt");
    not_in(&out, &m)
}

fn deny_read_through_a_symlinked_parent(l: &Lab) -> Verdict {
    // `nested` is a symbolic link to the real directory: nothing can be
    // mounted on the name, so the sandbox must refuse to run rather than
    // leave the file readable.
    let real = l.ws.join("real/deep/secrets");
    std::fs::create_dir_all(&real).unwrap();
    let m = marker("denysymlink");
    std::fs::write(real.join("key.txt"), &m).unwrap();
    std::os::unix::fs::symlink("real", l.ws.join("nested")).unwrap();
    let out = l.tools.call(
        "run",
        json!({"command": "cat nested/deep/secrets/key.txt real/deep/secrets/key.txt"}),
    );
    not_in(&out, &m)
}

fn other_agents_configs_written(l: &Lab) -> Verdict {
    // Two exist already (a settings file of the editor, a rule beside a
    // protected one).
    let existing = [
        (".vscode/settings.json", "{}\n"),
        (".roo/rules/a.md", "rule\n"),
    ];
    let mut script = String::new();
    for path in crate::common::AGENT_CONFIGS {
        let parent = Path::new(path).parent().unwrap().to_str().unwrap();
        if !parent.is_empty() {
            script.push_str(&format!("mkdir -p {parent}; "));
        }
        script.push_str(&format!("echo '{{\"mcpServers\": {{}}}}' > {path}; "));
    }
    script.push_str("echo pwned > .vscode/settings.json; echo done");
    // Control: on the host, the same command creates them all.
    let twin = l.base.path().join("twin");
    std::fs::create_dir(&twin).unwrap();
    let status = std::process::Command::new("sh")
        .args(["-c", &script])
        .current_dir(&twin)
        .status()
        .unwrap();
    if !status.success()
        || crate::common::AGENT_CONFIGS
            .iter()
            .any(|p| !twin.join(p).is_file())
    {
        return Err("control: the command did not create them on the host".into());
    }
    for (path, body) in existing {
        let p = l.ws.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, body).unwrap();
    }
    let out = l.sh(&script);
    for path in crate::common::AGENT_CONFIGS {
        absent(&l.ws.join(path)).map_err(|e| format!("{e}: {}", out.text))?;
    }
    for (path, body) in existing {
        if path == ".vscode/settings.json" {
            unchanged(&l.ws.join(path), body)?;
        }
    }
    for p in [
        ".gemini",
        ".cursor",
        ".opencode",
        ".kiro",
        ".amazonq",
        ".continue",
        ".windsurf",
        ".zed",
    ] {
        absent(&l.ws.join(p)).map_err(|e| format!("{e} (no placeholder may stay)"))?;
    }
    // The file tools.
    for path in crate::common::AGENT_CONFIGS {
        let out = l
            .tools
            .call("write_file", json!({"path": path, "content": "{}"}));
        if !out.text.starts_with("ERROR denied") {
            return Err(format!("write_file {path}: {}", out.text));
        }
    }
    absent(&l.ws.join(".gemini"))
}
