//! Attacks on git surface. git's executable surface (issue 13): the host's real
//! `git status` / `git commit` as judge.
//!
//! [`ATTACKS`] is this section's table of the escape suite: commands on the
//! `linux` provider, a row per attack (what it tries, what the host must show
//! afterwards, the control it makes, if any), run by `escape_suite_as_*` in
//! `main.rs`.

use crate::Attack;
use crate::lab::*;
use cubby::{HostEnv, Limits, Policy, ToolOutput};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The escape suite's attacks on git surface.
pub const ATTACKS: &[Attack] = &[
    Attack {
        name: "the tools make a .git gitfile to a repository of theirs",
        expect: "denied; the host's git runs nothing",
        control: Some("the same writes on the host make git run the marker"),
        run: gitfile_made_by_the_tools,
    },
    Attack {
        name: "a new or existing .git with a commondir of theirs",
        expect: "denied; the host's git runs nothing",
        control: Some("the same writes on the host make git run the marker"),
        run: new_git_dir_with_commondir,
    },
    Attack {
        name: "a worktree's gitfile rewritten",
        expect: "the gitfile unchanged; the host's git runs nothing",
        control: Some("the same writes on the host make git run the marker"),
        run: worktree_gitfile_rewritten,
    },
    Attack {
        name: "make the workspace root a bare repository",
        expect: "denied; the host's git runs nothing",
        control: Some("the same writes on the host make git run the marker"),
        run: workspace_root_made_a_bare_repository,
    },
    Attack {
        name: "hooks in a core.hooksPath inside the tree",
        expect: "the hooks unchanged; the host's git runs nothing",
        control: Some("the same writes on the host make git run the marker"),
        run: hooks_path_in_the_tree,
    },
    Attack {
        name: "replace the config by renaming its parent",
        expect: "the config in place, unchanged",
        control: Some("the same command on the host replaces the file"),
        run: protected_config_parent_renamed,
    },
    Attack {
        name: "write through a reservation into the stash",
        expect: "nothing left in the reservations; another workspace sees nothing",
        control: None,
        run: placeholder_contamination,
    },
    Attack {
        name: "configs and hooks of submodules and worktrees",
        expect: "their configs and hooks unchanged; the host's git runs nothing",
        control: None,
        run: git_dirs_of_submodules_and_worktrees,
    },
    Attack {
        name: "move a submodule's HEAD away, then write its config in the next command",
        expect: "its config unchanged; the host's git status runs nothing",
        control: Some("the same config written on the host makes its git status run the marker"),
        run: submodule_unmarked_by_moving_its_head,
    },
    Attack {
        name: "plant git's sequencer state: a rebase todo with exec lines",
        expect: "denied and not created; the host's `git rebase --continue` runs nothing",
        control: Some(
            "the same files written on the host make `git rebase --continue` run the marker",
        ),
        run: sequencer_state_planted,
    },
    Attack {
        name: "append exec lines to a rebase the user stopped",
        expect: "the todo unchanged; the host's `git rebase --continue` runs nothing",
        control: Some("the same append on the host makes `git rebase --continue` run the marker"),
        run: stopped_rebase_todo_appended,
    },
    Attack {
        name: "rewrite the branch and hide the change from git (changes must say)",
        expect: "`changes` names the moved branch and the skip-worktree file",
        control: Some("the host's git shows one commit of the same message and a clean status"),
        run: branch_rewritten_and_hidden_from_git,
    },
    Attack {
        name: "git add, commit, checkout -b, stash still work (control)",
        expect: "works: the commits seen from the host",
        control: None,
        run: git_still_works_inside,
    },
    Attack {
        name: "read a CI token that git's config holds (extraheader, a remote's URL)",
        expect: "neither token, nor the header's encoded value, in read_file or a command's output",
        control: Some("the host's git config shows both; the command reads the file"),
        run: config_credentials_shown,
    },
];

/// A lab whose workspace `prepare` sets up on the host first (a repository,
/// its config), with a policy that reads that workspace's git config (as
/// the CLI's does) and protects `protect` on top.
fn git_lab(protect: &[&str], prepare: impl FnOnce(&Path)) -> Lab {
    let (base, ws, outside) = lab_dirs();
    prepare(&ws);
    let policy = git_policy(&ws, protect);
    open_lab(base, ws, outside, policy)
}

/// The policy of [`git_lab`], read from the workspace as it is now.
fn git_policy(ws: &Path, protect: &[&str]) -> Policy {
    let mut policy = Policy::builder();
    policy.git_of(ws, &HostEnv::capture());
    for p in protect {
        policy.protect(*p);
    }
    let mut limits = Limits::default();
    limits.sandbox.processes = TEST_PROCESSES;
    policy.limits(limits).build().unwrap()
}

/// A new session on the lab's workspace (a new policy, sandbox and
/// toolset, as a new `cubby exec` or MCP session makes them).
fn next_session(l: &Lab) -> cubby::Toolset {
    let host = HostEnv::capture();
    let policy = git_policy(&l.ws, &[]);
    let sandbox = cubby::LinuxSandbox::open(&l.ws, &policy, &host).unwrap();
    cubby::Toolset::builder(std::sync::Arc::new(sandbox))
        .policy(policy)
        .host_env(host)
        .track_changes(false)
        .build()
        .unwrap()
}

fn config_credentials_shown(l: &Lab) -> Verdict {
    let _ = l;
    let (header_token, url_token) = (marker("ghsheader"), marker("ghsurl"));
    let encoded = host_py(&format!(
        "import base64; print(base64.b64encode(b\"x-access-token:ghs_{header_token}\").decode())"
    ))
    .trim()
    .to_string();
    let l = git_lab(&[], |ws| {
        assert!(host_git(ws, &["init", "-q"]).status.success());
        let header = format!("AUTHORIZATION: basic {encoded}");
        let url = format!("https://x-access-token:ghs_{url_token}@github.com/o/r.git");
        assert!(
            host_git(
                ws,
                &["config", "http.https://github.com/.extraheader", &header]
            )
            .status
            .success()
        );
        assert!(
            host_git(ws, &["remote", "add", "origin", &url])
                .status
                .success()
        );
    });
    // Control: the host's git shows both.
    let shown =
        String::from_utf8_lossy(&host_git(&l.ws, &["config", "--list"]).stdout).into_owned();
    if !shown.contains(&encoded) || !shown.contains(&url_token) {
        return Err(format!(
            "control: the host's config lacks the tokens: {shown}"
        ));
    }
    let read = l.tools.call("read_file", json!({"path": ".git/config"}));
    let cmd = l.sh("cat .git/config; git config --get remote.origin.url; \
         git config --get http.https://github.com/.extraheader | cut -d' ' -f3 | base64 -d");
    if !cmd.text.contains("extraheader") {
        return Err(format!(
            "control: the command did not read .git/config: {}",
            cmd.text
        ));
    }
    for out in [&read, &cmd] {
        for secret in [&encoded, &header_token, &url_token] {
            not_in(out, secret)?;
        }
    }
    Ok(())
}

/// The host's git in `dir` (an identity given, so that `commit` runs).
fn host_git(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=cubby",
            "-c",
            "user.email=cubby@example.invalid",
        ])
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// A git config whose fsmonitor creates `marker` when the host's git runs.
fn fsmonitor_config(marker: &Path) -> String {
    format!(
        "[core]\n\trepositoryformatversion = 0\n\tfsmonitor = \"touch {}; false\"\n",
        marker.display()
    )
}

/// Runs the host's `git status` (and `git commit`, when `commit`) in the
/// workspace; `Err` when `marker` appeared: the host ran the attacker's code.
fn host_git_runs_nothing(dir: &Path, marker: &Path, commit: bool) -> Verdict {
    host_git(dir, &["status", "--short"]);
    if commit {
        host_git(
            dir,
            &["commit", "-q", "--allow-empty", "-m", "after the agent"],
        );
    }
    match marker.exists() {
        true => Err(format!(
            "the host's git ran the attacker's code ({} exists)",
            marker.display()
        )),
        false => Ok(()),
    }
}

/// The control of an attack: `attack` done on the host itself (no
/// sandbox, no tools) in a twin of the workspace that `prepare` set up
/// alike; the host's git must then run the marker, else the oracle proves
/// nothing.
fn control_runs(
    l: &Lab,
    prepare: impl FnOnce(&Path),
    attack: impl FnOnce(&Path, &Path),
    commit: bool,
) -> Verdict {
    let twin = l.base.path().join("twin");
    std::fs::create_dir(&twin).unwrap();
    prepare(&twin);
    let marker = l.out("control-ran");
    attack(&twin, &marker);
    host_git(&twin, &["status", "--short"]);
    if commit {
        host_git(&twin, &["commit", "-q", "--allow-empty", "-m", "control"]);
    }
    if marker.exists() {
        Ok(())
    } else {
        Err("control: the same writes outside the sandbox did not make git run the marker".into())
    }
}

fn write(l: &Lab, path: &str, content: &str) -> ToolOutput {
    l.tools
        .call("write_file", json!({"path": path, "content": content}))
}

/// An empty repository (HEAD, objects, refs) under `dir`, configured by `config`.
fn bare_repo(dir: &Path, config: &str) {
    std::fs::create_dir_all(dir.join("objects")).unwrap();
    std::fs::create_dir_all(dir.join("refs/heads")).unwrap();
    std::fs::write(dir.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(dir.join("config"), config).unwrap();
}

fn init(dir: &Path) {
    let out = host_git(dir, &["init", "-q", "-b", "main", "."]);
    assert!(out.status.success(), "git init: {out:?}");
}

fn gitfile_made_by_the_tools(_: &Lab) -> Verdict {
    let l = git_lab(&[], |_| {});
    control_runs(
        &l,
        |_| {},
        |twin, marker| {
            std::fs::write(twin.join(".git"), "gitdir: evil\n").unwrap();
            bare_repo(&twin.join("evil"), &fsmonitor_config(marker));
        },
        false,
    )?;
    let marker = l.out("ran");
    let config = fsmonitor_config(&marker);
    let out = write(&l, ".git", "gitdir: evil\n");
    for (path, content) in [
        ("evil/HEAD", "ref: refs/heads/main\n"),
        ("evil/objects/.keep", ""),
        ("evil/refs/heads/.keep", ""),
        ("evil/config", config.as_str()),
    ] {
        write(&l, path, content);
    }
    // And by a command.
    l.sh("printf 'gitdir: evil\\n' > .git");
    if !out.text.starts_with("ERROR denied") {
        return Err(format!("write_file .git: {}", out.text));
    }
    absent(&l.ws.join(".git"))?;
    host_git_runs_nothing(&l.ws, &marker, false)
}

fn new_git_dir_with_commondir(_: &Lab) -> Verdict {
    // No repository: the tools make one whose common dir is theirs.
    let l = git_lab(&[], |_| {});
    let attack = |ws: &Path, marker: &Path| {
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        std::fs::write(ws.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(ws.join(".git/commondir"), "../common\n").unwrap();
        bare_repo(&ws.join("common"), &fsmonitor_config(marker));
    };
    control_runs(&l, |_| {}, attack, false)?;
    let marker = l.out("ran");
    let config = fsmonitor_config(&marker);
    let head = write(&l, ".git/HEAD", "ref: refs/heads/main\n");
    let common = write(&l, ".git/commondir", "../common\n");
    for (path, content) in [
        ("common/HEAD", "ref: refs/heads/main\n"),
        ("common/objects/.keep", ""),
        ("common/refs/heads/.keep", ""),
        ("common/config", config.as_str()),
    ] {
        write(&l, path, content);
    }
    if !head.text.starts_with("ERROR denied") || !common.text.starts_with("ERROR denied") {
        return Err(format!("{} / {}", head.text, common.text));
    }
    absent(&l.ws.join(".git"))?;
    host_git_runs_nothing(&l.ws, &marker, false)?;
    // A repository the user made: a command and the tools write its
    // `commondir` (and `config.worktree`, `gitdir`).
    let l = git_lab(&[], init);
    let marker = l.out("ran2");
    let config = fsmonitor_config(&marker);
    let by_tool = write(&l, ".git/commondir", "../common\n");
    let by_tool2 = write(&l, ".git/config.worktree", &config);
    std::fs::create_dir(l.ws.join("common")).unwrap();
    bare_repo(&l.ws.join("common"), &config);
    let out = l.sh(
        "echo ../common > .git/commondir; rm -f .git/commondir; mv .git/commondir .git/c2; \
         echo x > .git/gitdir; git config --file .git/config.worktree core.fsmonitor 'touch x'; \
         git status --short >/dev/null; echo done",
    );
    if !by_tool.text.starts_with("ERROR denied") || !by_tool2.text.starts_with("ERROR denied") {
        return Err(format!("{} / {}", by_tool.text, by_tool2.text));
    }
    for p in [
        ".git/commondir",
        ".git/config.worktree",
        ".git/gitdir",
        ".git/c2",
    ] {
        absent(&l.ws.join(p)).map_err(|e| format!("{e}: {}", out.text))?;
    }
    if !out.text.contains("done") {
        return Err(format!("git inside failed: {}", out.text));
    }
    host_git_runs_nothing(&l.ws, &marker, false)
}

/// A config that makes a directory holding `HEAD`, `objects/` and `refs/`
/// a repository with `worktree` as its work tree, whose fsmonitor creates
/// `marker` when the host's git runs there.
fn bare_with_worktree(worktree: &Path, marker: &Path) -> String {
    format!(
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = {}\n\tfsmonitor = \"touch {}; false\"\n",
        worktree.display(),
        marker.display()
    )
}

/// The red-team pass of issue 13: when `.git` is missing or not a valid
/// repository, git takes the directory itself for a bare repository if it
/// holds `HEAD`, `objects/` and `refs/`; a `config` there with a
/// `core.worktree` then runs its fsmonitor (and its `hooks/`) on the host.
/// So the root's `HEAD` is protected, present or missing: by a command in a
/// repository the user made (whose `.git/HEAD` stays writable), by the
/// tools alone, and by a command in a workspace that is no repository.
fn workspace_root_made_a_bare_repository(_: &Lab) -> Verdict {
    let bare_root = |ws: &Path, marker: &Path| {
        let _ = std::fs::remove_file(ws.join(".git/HEAD"));
        std::fs::create_dir_all(ws.join("objects")).unwrap();
        std::fs::create_dir_all(ws.join("refs")).unwrap();
        std::fs::write(ws.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(ws.join("config"), bare_with_worktree(ws, marker)).unwrap();
    };
    let repo = |ws: &Path| {
        init(ws);
        std::fs::write(ws.join("f"), "hi\n").unwrap();
        host_git(ws, &["add", "f"]);
        host_git(ws, &["commit", "-q", "-m", "first"]);
    };
    // 1. A command, in a repository the user made.
    let l = git_lab(&[], repo);
    control_runs(&l, repo, bare_root, false)?;
    let marker = l.out("ran-cmd");
    std::fs::write(l.out("config"), bare_with_worktree(&l.ws, &marker)).unwrap();
    l.sh(&format!(
        "rm -f .git/HEAD; mkdir -p objects refs; echo 'ref: refs/heads/main' > HEAD; cp {} config",
        l.out("config").display()
    ));
    host_git_runs_nothing(&l.ws, &marker, false)?;
    // 2. The tools alone (read before write of `.git/HEAD`, as the guard asks).
    let l = git_lab(&[], repo);
    let marker = l.out("ran-tools");
    let config = bare_with_worktree(&l.ws, &marker);
    l.tools.call("read_file", json!({"path": ".git/HEAD"}));
    write(&l, ".git/HEAD", "garbage\n");
    let head = write(&l, "HEAD", "ref: refs/heads/main\n");
    for (path, content) in [
        ("objects/.keep", ""),
        ("refs/.keep", ""),
        ("config", config.as_str()),
    ] {
        write(&l, path, content);
    }
    if !head.text.starts_with("ERROR denied") {
        return Err(format!("write_file HEAD: {}", head.text));
    }
    host_git_runs_nothing(&l.ws, &marker, false)?;
    // 3. A command, in a workspace that is no repository: fsmonitor and a
    // pre-commit hook, judged by the host's `git status` and `git commit`.
    let l = git_lab(&[], |_| {});
    let marker = l.out("ran-plain");
    std::fs::write(l.out("config"), bare_with_worktree(&l.ws, &marker)).unwrap();
    l.sh(&format!(
        "mkdir -p objects refs hooks; echo 'ref: refs/heads/main' > HEAD; cp {} config; \
         printf '#!/bin/sh\\ntouch {}\\n' > hooks/pre-commit; chmod +x hooks/pre-commit",
        l.out("config").display(),
        marker.display()
    ));
    host_git_runs_nothing(&l.ws, &marker, true)
}

fn worktree_gitfile_rewritten(_: &Lab) -> Verdict {
    // The workspace is a linked worktree: `.git` is a gitfile naming the
    // main repository's git dir outside.
    let prepare = |ws: &Path| {
        let main = ws.parent().unwrap().join(format!(
            "main-{}",
            ws.file_name().unwrap().to_string_lossy()
        ));
        std::fs::create_dir(&main).unwrap();
        init(&main);
        host_git(&main, &["commit", "-q", "--allow-empty", "-m", "init"]);
        std::fs::remove_dir(ws).unwrap();
        let out = host_git(&main, &["worktree", "add", "-q", ws.to_str().unwrap()]);
        assert!(out.status.success(), "worktree add: {out:?}");
    };
    let l = git_lab(&[], prepare);
    control_runs(
        &l,
        prepare,
        |twin, marker| {
            std::fs::write(twin.join(".git"), "gitdir: evil\n").unwrap();
            bare_repo(&twin.join("evil"), &fsmonitor_config(marker));
        },
        false,
    )?;
    let before = std::fs::read_to_string(l.ws.join(".git")).unwrap();
    let marker = l.out("ran");
    let config = fsmonitor_config(&marker);
    l.tools.call("read_file", json!({"path": ".git"}));
    let out = write(&l, ".git", "gitdir: evil\n");
    for (path, content) in [
        ("evil/HEAD", "ref: refs/heads/main\n"),
        ("evil/objects/.keep", ""),
        ("evil/refs/heads/.keep", ""),
        ("evil/config", config.as_str()),
    ] {
        write(&l, path, content);
    }
    l.sh(
        "printf 'gitdir: evil\\n' > .git; rm -f .git; mv .git .git-old; echo 'gitdir: evil' > .git",
    );
    if !out.text.starts_with("ERROR denied") {
        return Err(format!("write_file .git: {}", out.text));
    }
    unchanged(&l.ws.join(".git"), &before)?;
    host_git_runs_nothing(&l.ws, &marker, false)
}

fn hooks_path_in_the_tree(_: &Lab) -> Verdict {
    // husky's layout: `core.hooksPath = .husky`, a pre-commit hook there.
    let prepare = |ws: &Path| {
        init(ws);
        host_git(ws, &["config", "core.hooksPath", ".husky"]);
        std::fs::create_dir(ws.join(".husky")).unwrap();
        std::fs::write(ws.join(".husky/pre-commit"), "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(
            ws.join(".husky/pre-commit"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
    };
    let hook = |marker: &Path| format!("#!/bin/sh\ntouch {}\n", marker.display());
    let l = git_lab(&[], prepare);
    control_runs(
        &l,
        prepare,
        |twin, marker| std::fs::write(twin.join(".husky/pre-commit"), hook(marker)).unwrap(),
        true,
    )?;
    let marker = l.out("ran");
    l.tools
        .call("read_file", json!({"path": ".husky/pre-commit"}));
    let by_tool = write(&l, ".husky/pre-commit", &hook(&marker));
    let new_hook = hook(&marker).replace('\n', "\\n");
    l.sh(&format!(
        "printf '{new_hook}' > .husky/post-commit; chmod +x .husky/post-commit; \
         printf '{new_hook}' > .husky/pre-commit; mv .husky .husky-old; mkdir .husky; \
         printf '{new_hook}' > .husky/pre-commit; chmod +x .husky/pre-commit"
    ));
    if !by_tool.text.starts_with("ERROR denied") {
        return Err(format!("write_file .husky/pre-commit: {}", by_tool.text));
    }
    unchanged(&l.ws.join(".husky/pre-commit"), "#!/bin/sh\nexit 0\n")?;
    host_git_runs_nothing(&l.ws, &marker, true)?;
    // A hooks path that does not exist yet is not created either.
    let l = git_lab(&[], |ws| {
        init(ws);
        host_git(ws, &["config", "core.hooksPath", ".githooks"]);
    });
    let marker = l.out("ran2");
    let h = hook(&marker).replace('\n', "\\n");
    l.sh(&format!(
        "mkdir -p .githooks && printf '{h}' > .githooks/pre-commit && chmod +x .githooks/pre-commit"
    ));
    absent(&l.ws.join(".githooks"))?;
    host_git_runs_nothing(&l.ws, &marker, true)
}

fn protected_config_parent_renamed(_: &Lab) -> Verdict {
    let attack =
        "mv conf conf.old && mkdir conf && echo 'mode = \"full-access\"' > conf/cubby.toml";
    let prepare = |ws: &Path| {
        std::fs::create_dir(ws.join("conf")).unwrap();
        std::fs::write(ws.join("conf/cubby.toml"), "mode = \"workspace-write\"\n").unwrap();
    };
    let l = git_lab(&["conf/cubby.toml"], prepare);
    // Control: the same command on the host replaces the file.
    let twin = l.base.path().join("twin");
    std::fs::create_dir(&twin).unwrap();
    prepare(&twin);
    std::process::Command::new("sh")
        .args(["-c", attack])
        .current_dir(&twin)
        .status()
        .unwrap();
    if unchanged(
        &twin.join("conf/cubby.toml"),
        "mode = \"workspace-write\"\n",
    )
    .is_ok()
    {
        return Err("control: the command did not replace the file on the host".into());
    }
    let out = l.sh(&format!("{attack}; rm -rf conf; echo tried"));
    unchanged(
        &l.ws.join("conf/cubby.toml"),
        "mode = \"workspace-write\"\n",
    )
    .map_err(|e| format!("{e}: {}", out.text))?;
    absent(&l.ws.join("conf.old"))
}

fn placeholder_contamination(_: &Lab) -> Verdict {
    // While a command holds the reservation of a missing `.git`, the tools
    // write beneath it (root could, permissions notwithstanding).
    let l = git_lab(&[], |_| {});
    let held = l.tools.call(
        "start_process",
        json!({"name": "holds", "command": "sleep 1"}),
    );
    if held.is_error {
        return Err(held.text);
    }
    let out = write(&l, ".git/settings.json", "{\"evil\": true}");
    let mcp = write(&l, ".mcp.json/settings.json", "{\"evil\": true}");
    l.sh("sleep 1.5");
    if !out.text.starts_with("ERROR denied") || !mcp.text.starts_with("ERROR") {
        return Err(format!("{} / {}", out.text, mcp.text));
    }
    absent(&l.ws.join(".git"))?;
    absent(&l.ws.join(".mcp.json"))?;
    // Nothing of it in any stash, and another workspace's command sees its
    // protected paths empty.
    let other = git_lab(&[], |_| {});
    let seen = other.sh("ls -A .git .mcp.json .claude .codex 2>&1; echo listed");
    if seen.text.contains("settings.json") {
        return Err(format!("another workspace sees it: {}", seen.text));
    }
    let base = std::env::temp_dir().join(format!(
        "cubby-reserve-{}",
        rustix::process::getuid().as_raw()
    ));
    // This process's stashes (older processes' leftovers are not ours to judge).
    let ours = format!("{}-", std::process::id());
    for entry in std::fs::read_dir(&base).into_iter().flatten().flatten() {
        if !entry.file_name().to_string_lossy().starts_with(&ours) {
            continue;
        }
        let found = std::process::Command::new("find")
            .arg(entry.path())
            .args(["-name", "settings.json"])
            .output()
            .unwrap();
        if !found.stdout.is_empty() {
            return Err(format!(
                "in the stash: {}",
                String::from_utf8_lossy(&found.stdout)
            ));
        }
    }
    Ok(())
}

fn git_dirs_of_submodules_and_worktrees(_: &Lab) -> Verdict {
    let prepare = |ws: &Path| {
        init(ws);
        bare_repo(&ws.join(".git/modules/sub"), "[core]\n");
        std::fs::create_dir_all(ws.join(".git/modules/sub/hooks")).unwrap();
        std::fs::create_dir_all(ws.join(".git/worktrees/w")).unwrap();
        std::fs::write(ws.join(".git/worktrees/w/commondir"), "../..\n").unwrap();
        std::fs::write(ws.join(".git/worktrees/w/gitdir"), "/nowhere/.git\n").unwrap();
    };
    let l = git_lab(&[], prepare);
    let out = l.sh("echo '[core] fsmonitor = x' >> .git/modules/sub/config; \
         echo x > .git/modules/sub/hooks/post-checkout; echo x > .git/modules/sub/commondir; \
         echo /tmp > .git/worktrees/w/commondir; echo x > .git/worktrees/w/config.worktree; \
         mv .git/modules .git/m2; mv .git/worktrees/w .git/worktrees/w2; echo tried");
    let tool = write(&l, ".git/modules/sub/config", "[core]\n\tfsmonitor = x\n");
    if !tool.text.starts_with("ERROR denied") {
        return Err(format!("write_file .git/modules/sub/config: {}", tool.text));
    }
    unchanged(&l.ws.join(".git/modules/sub/config"), "[core]\n")
        .map_err(|e| format!("{e}: {}", out.text))?;
    unchanged(&l.ws.join(".git/worktrees/w/commondir"), "../..\n")?;
    for p in [
        ".git/modules/sub/hooks/post-checkout",
        ".git/modules/sub/commondir",
        ".git/worktrees/w/config.worktree",
        ".git/m2",
        ".git/worktrees/w2",
    ] {
        absent(&l.ws.join(p)).map_err(|e| format!("{e}: {}", out.text))?;
    }
    Ok(())
}

/// A repository with a real submodule `sub` (its git directory in
/// `.git/modules/sub`), made from a repository beside `ws`.
fn with_submodule(ws: &Path) {
    let source = ws.with_file_name(format!(
        "{}-subsource",
        ws.file_name().unwrap().to_string_lossy()
    ));
    std::fs::create_dir_all(&source).unwrap();
    init(&source);
    host_git(&source, &["commit", "-q", "--allow-empty", "-m", "sub"]);
    init(ws);
    let out = host_git(
        ws,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            source.to_str().unwrap(),
            "sub",
        ],
    );
    assert!(out.status.success(), "git submodule add: {out:?}");
    host_git(ws, &["commit", "-q", "-m", "add sub"]);
}

/// The submodule's config with an fsmonitor that makes `marker`.
fn submodule_fsmonitor(marker: &Path) -> String {
    format!(
        "[core]\n\trepositoryformatversion = 0\n\tworktree = ../../../sub\n\tfsmonitor = \"touch {}; false\"\n",
        marker.display()
    )
}

/// Red-team pass 3, R3-2: which directories of `.git/modules` are git
/// directories was told by their `HEAD`, which a command may move; the
/// next session then found none there and left its config writable.
fn submodule_unmarked_by_moving_its_head(_: &Lab) -> Verdict {
    let l = git_lab(&[], with_submodule);
    control_runs(
        &l,
        with_submodule,
        |twin, marker| {
            std::fs::write(
                twin.join(".git/modules/sub/config"),
                submodule_fsmonitor(marker),
            )
            .unwrap();
        },
        false,
    )?;
    let config = std::fs::read_to_string(l.ws.join(".git/modules/sub/config")).unwrap();
    let marker = l.out("submodule-ran");
    let first = l.sh("mv .git/modules/sub/HEAD .git/modules/sub/HEAD.moved; echo moved");
    // The next session reads the workspace again.
    let next = next_session(&l);
    let second = next.call(
        "run",
        json!({"timeout_ms": 20_000, "command": format!(
            "printf '{}' > .git/modules/sub/config && echo wrote; \
             mv .git/modules/sub/HEAD.moved .git/modules/sub/HEAD",
            submodule_fsmonitor(&marker)
                .replace('\n', "\\n")
                .replace('\t', "\\t")
        )}),
    );
    drop(next);
    // Whatever the commands did, HEAD goes back for the host's git.
    let moved = l.ws.join(".git/modules/sub/HEAD.moved");
    if moved.exists() {
        std::fs::rename(&moved, l.ws.join(".git/modules/sub/HEAD")).unwrap();
    }
    unchanged(&l.ws.join(".git/modules/sub/config"), &config)
        .map_err(|e| format!("{e}: {} / {}", first.text, second.text))?;
    host_git_runs_nothing(&l.ws, &marker, false)
}

fn git_still_works_inside(_: &Lab) -> Verdict {
    // Not an attack: the protection leaves git usable in a repository the
    // user made (add, commit, checkout -b, stash, log).
    let l = git_lab(&[], |ws| {
        init(ws);
        std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    });
    let out = l.sh(
        "set -e; export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a \
         GIT_COMMITTER_EMAIL=a@b; git add a.txt; git commit -q -m one; git checkout -q -b topic; \
         echo two >> a.txt; git stash -q; git stash pop -q; git commit -q -am two; \
         git log --oneline | wc -l; git status --short; echo git-ok; \
         git checkout -q -b side; echo three > b.txt; git add b.txt; git commit -q -m three; \
         git checkout -q -b extra topic; git cherry-pick side >/dev/null 2>&1 || true; \
         echo picked=$(git log -1 --format=%s); git status --short; \
         git commit -q --amend -m picked && echo amend-ok; \
         git merge -q --no-edit side >/dev/null 2>&1; echo merged=$?; \
         if git rebase -q side >/dev/null 2>&1; then echo rebase-ran; else echo rebase-refused; fi; \
         git checkout -q topic",
    );
    if !out.text.contains("git-ok") || !out.text.contains("\n2\n") {
        return Err(format!("git inside the sandbox failed: {}", out.text));
    }
    // What the sequencer's protection leaves (docs/SECURITY.md): one pick
    // makes its commit (and then fails to write its state), an amend and a
    // merge work, a rebase refuses to start; `git status` stays quiet.
    for want in ["picked=three", "amend-ok", "merged=0", "rebase-refused"] {
        if !out.text.contains(want) {
            return Err(format!("{want} missing: {}", out.text));
        }
    }
    if out.text.contains("unable to open") {
        return Err(format!("git status complains: {}", out.text));
    }
    for p in [".git/rebase-merge", ".git/rebase-apply", ".git/sequencer"] {
        absent(&l.ws.join(p))?;
    }
    let log = host_git(&l.ws, &["log", "--oneline", "topic"]);
    if String::from_utf8_lossy(&log.stdout).lines().count() != 2 {
        return Err(format!("the host does not see the commits: {log:?}"));
    }
    // Nothing of the reservations is left in the repository.
    for p in [
        ".git/commondir",
        ".git/config.worktree",
        ".git/gitdir",
        ".git/rebase-merge",
        ".git/rebase-apply",
        ".git/sequencer",
    ] {
        absent(&l.ws.join(p))?;
    }
    Ok(())
}

/// The host's git in `dir` with an editor that changes nothing (so that
/// `rebase --continue` never waits for one).
fn host_git_no_editor(dir: &Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["-c", "core.editor=true", "-c", "sequence.editor=true"];
    all.extend_from_slice(args);
    host_git(dir, &all)
}

/// A repository with two commits on `main`.
fn two_commits(ws: &Path) {
    init(ws);
    std::fs::write(ws.join("f"), "one\n").unwrap();
    host_git(ws, &["add", "f"]);
    host_git(ws, &["commit", "-q", "-m", "one"]);
    std::fs::write(ws.join("f"), "two\n").unwrap();
    host_git(ws, &["commit", "-q", "-am", "two"]);
}

fn rev(ws: &Path, what: &str) -> String {
    let out = host_git(ws, &["rev-parse", what]);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The state of an interactive rebase stopped after its first pick, whose
/// todo runs `touch marker` next (the red team's reproduction).
fn planted_rebase(ws: &Path, marker: &Path) -> Vec<(String, String)> {
    let head = rev(ws, "HEAD");
    let onto = rev(ws, "HEAD~1");
    [
        ("head-name", "refs/heads/main\n".to_string()),
        ("onto", format!("{onto}\n")),
        ("orig-head", format!("{head}\n")),
        ("interactive", String::new()),
        ("done", format!("pick {head} two\n")),
        (
            "git-rebase-todo",
            format!("exec touch {}\n", marker.display()),
        ),
    ]
    .into_iter()
    .map(|(name, body)| (format!(".git/rebase-merge/{name}"), body))
    .collect()
}

/// Red-team finding N2: a planted `git-rebase-todo` runs its `exec` lines
/// when the user types `git rebase --continue` on the host. The tools are
/// refused, and a command can create none of `rebase-merge/`,
/// `rebase-apply/`, `sequencer/` (in `.git` and in a submodule's git
/// directory): they are reserved while missing.
fn sequencer_state_planted(_: &Lab) -> Verdict {
    let prepare = |ws: &Path| {
        two_commits(ws);
        bare_repo(&ws.join(".git/modules/sub"), "[core]\n");
    };
    let l = git_lab(&[], prepare);
    // Control: the same files written on the host.
    let twin = l.base.path().join("twin");
    std::fs::create_dir(&twin).unwrap();
    prepare(&twin);
    let control = l.out("control-ran");
    for (path, body) in planted_rebase(&twin, &control) {
        let p = twin.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
    host_git_no_editor(&twin, &["rebase", "--continue"]);
    if !control.exists() {
        return Err("control: the planted todo did not run on the host".into());
    }
    // The tools.
    let marker = l.out("ran-tools");
    for (path, body) in planted_rebase(&l.ws, &marker) {
        let out = write(&l, &path, &body);
        if !out.text.starts_with("ERROR denied") {
            return Err(format!("write_file {path}: {}", out.text));
        }
    }
    absent(&l.ws.join(".git/rebase-merge"))?;
    host_git_no_editor(&l.ws, &["rebase", "--continue"]);
    absent(&marker)?;
    // A command.
    let marker = l.out("ran-cmd");
    let mut script = String::from(
        "mkdir -p .git/rebase-merge .git/rebase-apply .git/sequencer \
         .git/modules/sub/rebase-merge; ",
    );
    for (path, body) in planted_rebase(&l.ws, &marker) {
        script.push_str(&format!("printf '%s' '{body}' > {path}; "));
    }
    script.push_str(
        "echo 1 > .git/rebase-apply/next; echo 'pick x' > .git/sequencer/todo; \
         echo x > .git/modules/sub/rebase-merge/git-rebase-todo; echo tried",
    );
    let out = l.sh(&script);
    for p in [
        ".git/rebase-merge",
        ".git/rebase-apply",
        ".git/sequencer",
        ".git/modules/sub/rebase-merge",
    ] {
        absent(&l.ws.join(p)).map_err(|e| format!("{e}: {}", out.text))?;
    }
    host_git_no_editor(&l.ws, &["rebase", "--continue"]);
    absent(&marker)
}

/// Red-team finding N2, a rebase in progress: the user stopped an
/// interactive rebase (`edit`); a command appends an `exec` line to its todo
/// (or replaces the directory). The existing state is read-only.
fn stopped_rebase_todo_appended(_: &Lab) -> Verdict {
    let prepare = |ws: &Path| {
        two_commits(ws);
        let out = host_git(
            ws,
            &[
                "-c",
                "sequence.editor=sed -i s/^pick/edit/",
                "rebase",
                "-q",
                "-i",
                "HEAD~1",
            ],
        );
        assert!(
            ws.join(".git/rebase-merge/git-rebase-todo").exists(),
            "the rebase did not stop: {out:?}"
        );
    };
    let append = |marker: &Path| format!("exec touch {}\n", marker.display());
    let l = git_lab(&[], prepare);
    let twin = l.base.path().join("twin");
    std::fs::create_dir(&twin).unwrap();
    prepare(&twin);
    let control = l.out("control-ran");
    let todo = twin.join(".git/rebase-merge/git-rebase-todo");
    let mut text = std::fs::read_to_string(&todo).unwrap();
    text.push_str(&append(&control));
    std::fs::write(&todo, text).unwrap();
    host_git_no_editor(&twin, &["rebase", "--continue"]);
    if !control.exists() {
        return Err("control: the appended exec line did not run on the host".into());
    }
    let todo = l.ws.join(".git/rebase-merge/git-rebase-todo");
    let before = std::fs::read_to_string(&todo).unwrap();
    let marker = l.out("ran");
    let line = append(&marker);
    let out = l.sh(&format!(
        "printf '%s' '{line}' >> .git/rebase-merge/git-rebase-todo; \
         mv .git/rebase-merge .git/rm2; rm -rf .git/rebase-merge; \
         mkdir -p .git/rebase-merge; printf '%s' '{line}' > .git/rebase-merge/git-rebase-todo; \
         echo tried"
    ));
    unchanged(&todo, &before).map_err(|e| format!("{e}: {}", out.text))?;
    absent(&l.ws.join(".git/rm2"))?;
    host_git_no_editor(&l.ws, &["rebase", "--continue"]);
    absent(&marker)
}

/// Red-team finding N12(a): a command amends the branch's commit with an
/// evil change under the same message, marks the file `skip-worktree` and
/// puts the old content back in the worktree: the host's `git status` is
/// clean and `git log` looks as before, and the worktree equals the
/// baseline. `changes` must say that `refs/heads/main` moved and that
/// `README` is hidden by git's index.
fn branch_rewritten_and_hidden_from_git(_: &Lab) -> Verdict {
    let (base, ws, outside) = lab_dirs();
    init(&ws);
    std::fs::write(ws.join("README"), "hello\n").unwrap();
    host_git(&ws, &["add", "README"]);
    host_git(&ws, &["commit", "-q", "-m", "first"]);
    let mut policy = Policy::builder();
    policy.git_of(&ws, &HostEnv::capture());
    let mut limits = Limits::default();
    limits.sandbox.processes = TEST_PROCESSES;
    let policy = policy.limits(limits).build().unwrap();
    let host = HostEnv::capture();
    let sandbox = cubby::LinuxSandbox::open(&ws, &policy, &host).unwrap();
    let tools = cubby::Toolset::builder(std::sync::Arc::new(sandbox))
        .policy(policy)
        .host_env(host)
        .build()
        .unwrap();
    let l = Lab {
        base,
        ws,
        outside,
        tools,
    };
    let before = l.tools.call("changes", json!({}));
    if !before.text.contains("No changes") {
        return Err(format!("changes before the attack: {}", before.text));
    }
    let out = l.sh(
        "export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a \
         GIT_COMMITTER_EMAIL=a@b; echo evil >> README && git commit -q -a --amend -m first \
         && git update-index --skip-worktree README && printf 'hello\\n' > README && echo hidden",
    );
    // Control: the host's git is misled.
    let log = host_git(&l.ws, &["log", "--format=%s"]);
    let status = host_git(&l.ws, &["status", "--short"]);
    let shown = host_git(&l.ws, &["show", "HEAD:README"]);
    if String::from_utf8_lossy(&log.stdout) != "first\n"
        || !status.stdout.is_empty()
        || !String::from_utf8_lossy(&shown.stdout).contains("evil")
    {
        return Err(format!(
            "control: the attack did not hide the change from git: {} {log:?} {status:?}",
            out.text
        ));
    }
    let changes = l.tools.call("changes", json!({}));
    if changes.text.contains("No changes")
        || !changes.text.contains("refs/heads/main")
        || !changes.text.contains("skip-worktree README")
    {
        return Err(format!("changes was misled: {}", changes.text));
    }
    Ok(())
}
