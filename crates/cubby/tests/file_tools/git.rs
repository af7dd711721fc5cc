//! git's executable surface (issue 13) through the file tools.

use crate::*;

/// Findings 1-3 of issue 13: the tools make no `.git` (a gitfile, or a
/// directory with a `commondir`), rewrite no gitfile, and write none of a
/// git directory's configs, pointers or hooks; the rest of `.git` stays
/// writable (the control: the same writes elsewhere succeed).
pub fn git_surface_is_read_only_for_the_tools(f: &dyn Fixture) {
    let t = tools(f);
    // No repository: neither a gitfile nor a new git directory.
    let msg = err(
        &t,
        "write_file",
        json!({"path": ".git", "content": "gitdir: evil\n"}),
        "denied",
    );
    assert!(msg.contains("protected"), "{msg}");
    err(
        &t,
        "write_file",
        json!({"path": ".git/HEAD", "content": "ref: refs/heads/main\n"}),
        "denied",
    );
    err(
        &t,
        "write_file",
        json!({"path": ".git/commondir", "content": "../common\n"}),
        "denied",
    );
    assert!(f.get(".git").is_none() && f.get(".git/HEAD").is_none());
    // Control: the same names elsewhere are ordinary files.
    ok(
        &t,
        "write_file",
        json!({"path": "common/commondir", "content": "x"}),
    );
    ok(
        &t,
        "write_file",
        json!({"path": "sub/.gitx", "content": "gitdir: evil\n"}),
    );
    // A worktree's gitfile: read, but not rewritten, nor written through.
    f.put(".git", b"gitdir: /elsewhere/.git/worktrees/w\n");
    let wt = tools(f);
    ok(&wt, "read_file", json!({"path": ".git"}));
    err(
        &wt,
        "write_file",
        json!({"path": ".git", "content": "gitdir: evil\n"}),
        "denied",
    );
    err(
        &wt,
        "edit_file",
        json!({"path": ".git", "find": "/elsewhere", "replace": "evil"}),
        "denied",
    );
    err(
        &wt,
        "write_file",
        json!({"path": ".git/HEAD", "content": "x"}),
        "denied",
    );
    assert_eq!(
        f.get(".git").unwrap(),
        b"gitdir: /elsewhere/.git/worktrees/w\n"
    );
    // A repository: its surface is refused, the rest written.
    f.remove(".git");
    f.put(".git/HEAD", b"ref: refs/heads/main\n");
    let t = tools(f);
    for path in [
        ".git/commondir",
        ".git/config.worktree",
        ".git/gitdir",
        ".git/hooks/pre-commit",
        ".git/modules/sub/config",
        ".git/modules/a/modules/b/hooks/post-checkout",
        ".git/worktrees/w/commondir",
    ] {
        let msg = err(
            &t,
            "write_file",
            json!({"path": path, "content": "x"}),
            "denied",
        );
        assert!(msg.contains("git"), "{path}: {msg}");
    }
    ok(&t, "read_file", json!({"path": ".git/HEAD"}));
    ok(
        &t,
        "write_file",
        json!({"path": ".git/HEAD", "content": "ref: refs/heads/topic\n"}),
    );
    ok(
        &t,
        "write_file",
        json!({"path": ".git/info/exclude", "content": "*.log\n"}),
    );
}

/// Finding 4 of issue 13 (file tools): with `core.hooksPath = .husky`
/// (husky's layout), the hooks there are protected once the policy reads
/// the workspace's git config; without it (the control) they are not.
pub fn hooks_path_is_protected_for_the_tools(
    make: impl Fn() -> (tempfile::TempDir, Arc<dyn cubby::Sandbox>),
) {
    let (dir, sandbox) = make();
    std::fs::create_dir_all(dir.path().join(".git")).unwrap();
    std::fs::write(
        dir.path().join(".git/config"),
        "[core]\n\thooksPath = .husky\n",
    )
    .unwrap();
    std::fs::create_dir(dir.path().join(".husky")).unwrap();
    std::fs::write(dir.path().join(".husky/pre-commit"), "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(
        dir.path().join(".husky/pre-commit"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let control = Toolset::builder(sandbox.clone()).build().unwrap();
    ok(&control, "read_file", json!({"path": ".husky/pre-commit"}));
    ok(
        &control,
        "write_file",
        json!({"path": ".husky/pre-commit", "content": "#!/bin/sh\nexit 0\n"}),
    );
    let policy = Policy::builder()
        .git_of(dir.path(), &cubby::HostEnv::capture())
        .build()
        .unwrap();
    let t = Toolset::builder(sandbox).policy(policy).build().unwrap();
    ok(&t, "read_file", json!({"path": ".husky/pre-commit"}));
    for path in [".husky/pre-commit", ".husky/post-commit"] {
        err(
            &t,
            "write_file",
            json!({"path": path, "content": "#!/bin/sh\ntouch pwned\n"}),
            "denied",
        );
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join(".husky/pre-commit")).unwrap(),
        "#!/bin/sh\nexit 0\n"
    );
    assert!(!dir.path().join(".husky/post-commit").exists());
}

#[test]
pub fn hooks_path_is_protected_for_the_tools_local() {
    hooks_path_is_protected_for_the_tools(|| {
        let dir = tempfile::tempdir().unwrap();
        let sandbox = cubby::local_sandbox(dir.path()).unwrap();
        (dir, sandbox)
    });
}

#[test]
pub fn hooks_path_is_protected_for_the_tools_linux() {
    hooks_path_is_protected_for_the_tools(|| {
        let dir = tempfile::tempdir().unwrap();
        let policy = Policy::builder().build().unwrap();
        let sandbox: Arc<dyn cubby::Sandbox> = Arc::new(
            cubby::LinuxSandbox::open(dir.path(), &policy, &cubby::HostEnv::capture()).unwrap(),
        );
        (dir, sandbox)
    });
}

/// Red-team finding N2 (file tools): git's sequencer state — `rebase-merge/`,
/// `rebase-apply/`, `sequencer/` of every git directory — is refused,
/// present or missing: a `git-rebase-todo` with `exec` lines would run when
/// the user types `git rebase --continue`. The control: the same names
/// outside `.git` are ordinary files.
pub fn git_sequencer_state_is_read_only_for_the_tools(f: &dyn Fixture) {
    f.put(".git/HEAD", b"ref: refs/heads/main\n");
    f.put(".git/rebase-apply/next", b"1\n");
    let t = tools(f);
    for path in [
        ".git/rebase-merge/git-rebase-todo",
        ".git/rebase-merge/done",
        ".git/rebase-apply/next",
        ".git/rebase-apply/0001",
        ".git/sequencer/todo",
        ".git/worktrees/w/rebase-merge/git-rebase-todo",
        ".git/modules/sub/sequencer/todo",
    ] {
        ok(&t, "read_file", json!({"path": ".git/HEAD"}));
        if f.get(path).is_some() {
            ok(&t, "read_file", json!({"path": path}));
        }
        let msg = err(
            &t,
            "write_file",
            json!({"path": path, "content": "exec touch pwned\n"}),
            "denied",
        );
        assert!(msg.contains("git"), "{path}: {msg}");
    }
    assert!(f.get(".git/rebase-merge/git-rebase-todo").is_none());
    assert_eq!(f.get(".git/rebase-apply/next").unwrap(), b"1\n");
    // Control: the names elsewhere are ordinary.
    ok(
        &t,
        "write_file",
        json!({"path": "notes/rebase-merge/git-rebase-todo", "content": "x"}),
    );
}

/// Red-team pass 5, F6: the tools make no git repository below the root
/// either: `sub/.git/config` with a `core.fsmonitor` is what the host's git
/// runs when anything (an editor's git extension, a shell prompt) works in
/// `sub/`. Neither a git directory nor a gitfile is made at any depth, and
/// the surface of one that exists there is read-only as the root's is. The
/// control: the same names under a directory not named `.git` are written.
pub fn nested_git_dirs_are_not_made_by_the_tools(f: &dyn Fixture) {
    let t = tools(f);
    for path in [
        "sub/.git/config",
        "sub/.git/HEAD",
        "sub/.git/objects/info/keep",
        "sub/.git/hooks/post-checkout",
        "a/b/.git/config",
        "sub2/.git",
    ] {
        let msg = err(
            &t,
            "write_file",
            json!({"path": path, "content": "[core]\n\tfsmonitor = \"touch /tmp/x\"\n"}),
            "denied",
        );
        assert!(msg.contains(".git"), "{path}: {msg}");
    }
    assert!(f.get("sub/.git/config").is_none() && f.get("sub2/.git").is_none());
    // An existing nested repository: its surface is read-only, the rest of
    // its `.git` (as the root's) is not.
    f.put("vendored/.git/config", b"[core]\n");
    f.put("vendored/.git/HEAD", b"ref: refs/heads/main\n");
    let t = tools(f);
    err(
        &t,
        "write_file",
        json!({"path": "vendored/.git/config", "content": "[core]\n\tfsmonitor = x\n"}),
        "denied",
    );
    err(
        &t,
        "write_file",
        json!({"path": "vendored/.git/hooks/pre-commit", "content": "#!/bin/sh\n"}),
        "denied",
    );
    err(
        &t,
        "write_file",
        json!({"path": "vendored/.git", "content": "gitdir: evil\n"}),
        "denied",
    );
    assert_eq!(f.get("vendored/.git/config").unwrap(), b"[core]\n");
    ok(
        &t,
        "write_file",
        json!({"path": "vendored/.git/info/exclude", "content": "*.tmp\n"}),
    );
    // Control: the same names elsewhere are ordinary files.
    ok(
        &t,
        "write_file",
        json!({"path": "sub/git/config", "content": "x"}),
    );
    ok(
        &t,
        "write_file",
        json!({"path": "sub/.gitx/hooks/post-checkout", "content": "x"}),
    );
}
