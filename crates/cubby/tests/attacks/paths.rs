//! Attacks on paths. Writes and reads by path: absolute paths, `..`, siblings,
//! system directories, metadata.
//!
//! [`ATTACKS`] is this section's table of the escape suite: commands on the
//! `linux` provider, a row per attack (what it tries, what the host must show
//! afterwards, the control it makes, if any), run by `escape_suite_as_*` in
//! `main.rs`.
//!
//! The `#[test]`s below are the same section's attacks through the file tools
//! of the `local` provider, on the layout of [`crate::fixture::Fx`].

use crate::Attack;
use crate::fixture::*;
use crate::lab::*;
use serde_json::json;
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::PathBuf;

/// The escape suite's attacks on paths.
pub const ATTACKS: &[Attack] = &[
    Attack {
        name: "write an absolute path outside the root",
        expect: "no file outside the root",
        control: None,
        run: write_absolute_path,
    },
    Attack {
        name: "write through ..",
        expect: "no file outside the root",
        control: None,
        run: write_dotdot,
    },
    Attack {
        name: "chmod an outside file",
        expect: "the outside file's mode unchanged",
        control: None,
        run: chmod_outside_file,
    },
    Attack {
        name: "change times, owner, mode and xattrs outside the root",
        expect: "times, modes and xattrs outside the root unchanged",
        control: None,
        run: metadata_outside,
    },
    Attack {
        name: "change the mode of what its stdin and stdout lead to",
        expect: "the host's /dev/null unchanged",
        control: None,
        run: metadata_of_its_stdio,
    },
    Attack {
        name: "write /etc and /usr",
        expect: "nothing new in /etc or /usr",
        control: None,
        run: write_system_directory,
    },
    Attack {
        name: "write the host's /tmp and /dev/shm",
        expect: "nothing new in the host's /tmp or /dev/shm",
        control: None,
        run: write_host_tmp,
    },
    Attack {
        name: "read the host's /tmp",
        expect: "the host's /tmp file unseen",
        control: None,
        run: read_host_tmp,
    },
    Attack {
        name: "write a sibling sharing the root's prefix",
        expect: "nothing written in the sibling",
        control: None,
        run: writable_root_boundary,
    },
    Attack {
        name: "write in read-only mode",
        expect: "nothing created, no mode or time changed",
        control: None,
        run: read_only_mode,
    },
];

fn write_absolute_path(l: &Lab) -> Verdict {
    let t = l.out("abs.txt");
    l.sh(&format!("echo pwned > {}", t.display()));
    absent(&t)
}

fn write_dotdot(l: &Lab) -> Verdict {
    l.sh("echo pwned > ../ws-outside/dotdot.txt");
    absent(&l.out("dotdot.txt"))
}

fn chmod_outside_file(l: &Lab) -> Verdict {
    let t = l.out("target.txt");
    let before = std::fs::metadata(&t).unwrap().permissions().mode();
    l.sh(&format!("chmod 777 {}", t.display()));
    let after = std::fs::metadata(&t).unwrap().permissions().mode();
    if before == after {
        Ok(())
    } else {
        Err(format!("mode changed {before:o} -> {after:o}"))
    }
}

fn metadata_outside(l: &Lab) -> Verdict {
    // Landlock does not cover modes, owners, times or extended attributes.
    let target = l.out("target.txt");
    let t = target.display();
    let before = std::fs::metadata(&target).unwrap();
    let dir_before = std::fs::metadata(&l.outside).unwrap();
    let out = l.sh(&format!(
        "touch -d 2001-01-01 {t}; chmod 0777 {d}; chown $(id -u):$(id -g) {t}; {}",
        py(&format!(
            "import os\nfor f in (os.utime, lambda p: os.setxattr(p, \"user.pwned\", b\"1\")):\n  try: f(\"{t}\"); print(\"CHANGED\")\n  except OSError as e: print(e)"
        )),
        d = l.outside.display(),
    ));
    let after = std::fs::metadata(&target).unwrap();
    let dir_after = std::fs::metadata(&l.outside).unwrap();
    use std::os::unix::fs::MetadataExt;
    if after.mtime() != before.mtime() || after.ctime() != before.ctime() {
        return Err(format!("times changed: {}", out.text));
    }
    if dir_after.mode() != dir_before.mode() {
        return Err(format!("directory mode changed: {}", out.text));
    }
    not_in(&out, "CHANGED")
}

fn metadata_of_its_stdio(l: &Lab) -> Verdict {
    // Descriptors are opened host-side, where mounts are writable: a `run`
    // without input must not get the host's /dev/null (root's), whose mode
    // a command of a cubby run as root could change. The probe sets the
    // mode /dev/null has; the kernel still stamps its change time.
    use std::os::unix::fs::MetadataExt;
    let before = std::fs::metadata("/dev/null").unwrap();
    let out = l.sh(&py(
        "import os\nfor fd in (0, 1, 2):\n  try: os.fchmod(fd, 0o666); print(\"FCHMOD-OK\", fd, os.readlink(f\"/proc/self/fd/{fd}\"))\n  except OSError as e: print(fd, e)",
    ));
    let after = std::fs::metadata("/dev/null").unwrap();
    if (after.mode(), after.ctime(), after.ctime_nsec())
        != (before.mode(), before.ctime(), before.ctime_nsec())
    {
        return Err(format!("the host's /dev/null changed: {}", out.text));
    }
    not_in(&out, "/dev/null")
}

fn write_system_directory(l: &Lab) -> Verdict {
    let m = marker("etc");
    l.sh(&format!("echo pwned > /etc/{m}; echo pwned > /usr/{m}"));
    absent(&PathBuf::from(format!("/etc/{m}"))).and(absent(&PathBuf::from(format!("/usr/{m}"))))
}

fn write_host_tmp(l: &Lab) -> Verdict {
    // The sandbox's /tmp is private: writes there never reach the host's.
    let m = marker("tmp");
    l.sh(&format!("echo pwned > /tmp/{m}; echo pwned > /dev/shm/{m}"));
    absent(&PathBuf::from(format!("/tmp/{m}"))).and(absent(&PathBuf::from(format!("/dev/shm/{m}"))))
}

fn read_host_tmp(l: &Lab) -> Verdict {
    let m = marker("hosttmp");
    let path = PathBuf::from(format!("/tmp/{m}"));
    std::fs::write(&path, format!("{m}-secret")).unwrap();
    let out = l.sh(&format!(
        "cat /tmp/{m}; test -e /tmp/{m} && echo VISIBLE; ls /tmp | grep -c cubbyeschosttmp"
    ));
    let _ = std::fs::remove_file(&path);
    not_in(&out, &format!("{m}-secret")).and(not_in(&out, "VISIBLE"))
}

fn writable_root_boundary(l: &Lab) -> Verdict {
    // A sibling whose name extends the root's (`ws` / `ws-outside`).
    l.sh(&format!(
        "echo pwned > {}/prefix.txt; cd ..; echo pwned > ws-outside/prefix2.txt",
        l.outside.display()
    ));
    absent(&l.out("prefix.txt")).and(absent(&l.out("prefix2.txt")))
}

fn read_only_mode(l: &Lab) -> Verdict {
    let _ = l;
    // Commands offered in `read-only` (the mode itself gives none).
    let ro = lab_with(|p, _, _| {
        p.mode(cubby::Mode::ReadOnly).allow(["run"]);
    });
    let file = ro.ws.join("kept.txt");
    std::fs::write(&file, "kept\n").unwrap();
    use std::os::unix::fs::MetadataExt;
    let before = std::fs::metadata(&file).unwrap();
    // Missing protected paths too: in read-only mode they get no
    // placeholder (nothing in the workspace is writable for commands).
    ro.sh(
        "echo pwned > inside.txt; mkdir d; chmod 000 kept.txt; touch -d 2001-01-01 kept.txt; \
         mkdir -p .codex && echo x > .codex/config.toml; echo '{}' > .mcp.json",
    );
    let after = std::fs::metadata(&file).unwrap();
    if (after.mode(), after.mtime(), after.ctime())
        != (before.mode(), before.mtime(), before.ctime())
    {
        return Err("kept.txt's mode or times changed".into());
    }
    absent(&ro.ws.join("inside.txt"))
        .and(absent(&ro.ws.join("d")))
        .and(absent(&ro.ws.join(".codex")))
        .and(absent(&ro.ws.join(".mcp.json")))
}

// ---------------------------------------------------- through the file tools

#[test]
fn absolute_path_outside_is_path_escape_for_every_file_tool() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    for p in [
        abs(&fx.o("secret.txt")),
        abs(&fx.o("new.txt")),
        abs(&fx.o("sub/deeper.txt")),
        abs(&fx.o("newdir/new.txt")),
        "/etc/passwd".to_string(),
        "/".to_string(),
        "//".to_string(),
    ] {
        file_tools(&ts, &p, "path_escape");
    }
    assert!(!fx.o("new.txt").exists());
    assert!(!fx.o("newdir").exists());
    fx.assert_untouched();
}

#[test]
fn absolute_path_inside_the_root_is_path_escape() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    let inside = abs(&fx.r("inside.txt"));
    file_tools(&ts, &inside, "path_escape");
    file_tools(&ts, &abs(&fx.r("a/b/c.txt")), "path_escape");
    file_tools(&ts, &abs(&fx.r("new.txt")), "path_escape");
    // Even after a legitimate read of the same file, the absolute spelling
    // stays refused.
    check(&ts, "read_file", json!({"path": "inside.txt"}), "ok");
    check(
        &ts,
        "write_file",
        json!({"path": inside, "content": "x"}),
        "path_escape",
    );
    assert_eq!(
        fs::read_to_string(fx.r("inside.txt")).unwrap(),
        "inside line\n"
    );
    assert!(!fx.r("new.txt").exists());
    fx.assert_untouched();
}

#[test]
fn absolute_path_as_walk_start_is_path_escape() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    for p in [
        abs(&fx.outside),
        abs(&fx.root),
        abs(&fx.r("a")),
        abs(&fx.evil),
        "/".to_string(),
    ] {
        walk_tools(&ts, &p, "path_escape");
    }
    fx.assert_untouched();
}

#[test]
fn absolute_glob_patterns_match_nothing_outside() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    let o = abs(&fx.outside);
    for pattern in [
        format!("{o}/*"),
        format!("{o}/**"),
        "/**".to_string(),
        "/**/secret.txt".to_string(),
    ] {
        let out = check(&ts, "glob", json!({"pattern": pattern}), "ok");
        assert!(
            entries(&out).is_empty(),
            "glob {pattern}: matched {:?}",
            entries(&out)
        );
        let out = check(&ts, "list_files", json!({"glob": pattern}), "ok");
        assert!(
            !entries(&out).iter().any(|e| e.contains("secret")),
            "list_files glob {pattern}: {:?}",
            entries(&out)
        );
        let out = check(
            &ts,
            "search",
            json!({"query": "line", "glob": pattern}),
            "ok",
        );
        assert_eq!(out.structured["total"], 0, "search glob {pattern}");
    }
    fx.assert_untouched();
}

#[test]
fn absolute_procfs_and_device_paths_are_path_escape() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    for p in [
        format!("/proc/self/root{}", abs(&fx.o("secret.txt"))),
        "/proc/self/cwd/Cargo.toml".to_string(),
        "/proc/self/environ".to_string(),
        "/dev/null".to_string(),
        "/dev/zero".to_string(),
    ] {
        file_tools(&ts, &p, "path_escape");
    }
    fx.assert_untouched();
}

#[test]
fn dotdot_leading_is_path_escape() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    file_tools(&ts, "../outside/secret.txt", "path_escape");
    file_tools(&ts, "../outside/sub/deeper.txt", "path_escape");
    file_tools(&ts, "../outside/new.txt", "path_escape");
    file_tools(&ts, "../x", "path_escape");
    assert!(!fx.o("new.txt").exists());
    assert!(!fx.base.join("x").exists());
    fx.assert_untouched();
}

#[test]
fn dotdot_after_a_real_directory_is_path_escape() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    file_tools(&ts, "a/../../outside/secret.txt", "path_escape");
    file_tools(&ts, "a/b/../../../outside/secret.txt", "path_escape");
    file_tools(&ts, "nonexistent/../../outside/secret.txt", "path_escape");
    fx.assert_untouched();
}

#[test]
fn dotdot_deep_write_creates_nothing() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    for p in [
        "a/b/../../../x",
        "a/b/../../../outside/x",
        "a/b/../../../outside/newdir/x",
        "new1/new2/../../../x",
    ] {
        check(
            &ts,
            "write_file",
            json!({"path": p, "content": "pwned\n"}),
            "path_escape",
        );
    }
    assert!(!fx.base.join("x").exists());
    assert!(!fx.o("x").exists());
    assert!(!fx.o("newdir").exists());
    assert!(
        !fx.r("new1").exists(),
        "a refused path must create no parents"
    );
    fx.assert_untouched();
}

#[test]
fn dotdot_alone_is_path_escape() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    for p in ["..", "../", "./..", "../.", "..//", "../.."] {
        file_tools(&ts, p, "path_escape");
    }
    fx.assert_untouched();
}

#[test]
fn trailing_dotdot() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    // Climbing back to the root is fine (and the root is a directory) …
    check(&ts, "read_file", json!({"path": "a/.."}), "is_directory");
    check(
        &ts,
        "read_file",
        json!({"path": "a/b/../.."}),
        "is_directory",
    );
    check(
        &ts,
        "write_file",
        json!({"path": "a/..", "content": "x"}),
        "is_directory",
    );
    check(&ts, "list_files", json!({"path": "a/.."}), "ok");
    // … one more `..` is not.
    for p in [
        "a/../..",
        "a/b/../../..",
        "../outside/..",
        "a/b/c.txt/../../../..",
    ] {
        file_tools(&ts, p, "path_escape");
        walk_tools(&ts, p, "path_escape");
    }
    fx.assert_untouched();
}

#[test]
fn dotdot_as_walk_start_is_path_escape() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    for p in [
        "..",
        "../",
        "../outside",
        "../outside/sub",
        "a/../..",
        "./../outside",
        "../root",
        "../root-evil",
    ] {
        walk_tools(&ts, p, "path_escape");
    }
    fx.assert_untouched();
}

#[test]
fn dotdot_in_glob_patterns_matches_nothing_outside() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    for pattern in [
        "../outside/*",
        "../**",
        "../*/secret.txt",
        "**/../../outside/*",
        "a/../../outside/secret.txt",
        "../root-evil/*",
    ] {
        let out = call(&ts, "glob", json!({"pattern": pattern}));
        assert!(
            entries(&out).is_empty(),
            "glob {pattern}: matched {:?}",
            entries(&out)
        );
        let out = call(&ts, "list_files", json!({"glob": pattern}));
        assert!(
            !entries(&out)
                .iter()
                .any(|e| e.contains("secret") || e.starts_with("..")),
            "list_files glob {pattern}: {:?}",
            entries(&out)
        );
        let out = call(&ts, "search", json!({"query": "line", "glob": pattern}));
        assert!(
            out.is_error || out.structured["total"] == 0,
            "search glob {pattern}: {}",
            out.text
        );
    }
    fx.assert_untouched();
}

#[test]
fn odd_spellings_of_dotdot() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    for p in [
        ".//..//outside/secret.txt",
        "./../outside/secret.txt",
        "a/./../.././outside/secret.txt",
        "a//..//..//outside//secret.txt",
        "a/b/./../../../outside/./secret.txt",
    ] {
        file_tools(&ts, p, "path_escape");
    }
    // Encoded or look-alike forms are plain names inside the root.
    for p in [
        "%2e%2e/outside/secret.txt",
        "..%2foutside%2fsecret.txt",
        "..\\outside\\secret.txt",
        "\u{2025}/outside/secret.txt",
        "\u{ff0e}\u{ff0e}/outside/secret.txt",
    ] {
        check(&ts, "read_file", json!({"path": p}), "not_found");
    }
    check(
        &ts,
        "write_file",
        json!({"path": "..\\outside\\x", "content": "inside\n"}),
        "ok",
    );
    assert!(fx.r("..\\outside\\x").is_file());
    fx.assert_untouched();
}

#[test]
fn many_dotdots_are_path_escape() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    let many = "../".repeat(64) + "etc/passwd";
    for p in [
        many.as_str(),
        "../../../../../../../../etc/passwd",
        "a/b/c/../../../../../../etc/passwd",
        "a/b/../../a/b/../../../outside/secret.txt",
    ] {
        file_tools(&ts, p, "path_escape");
        walk_tools(&ts, p, "path_escape");
    }
    fx.assert_untouched();
}

#[test]
fn sibling_prefix_relative_is_path_escape() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    for p in [
        "../root-evil/x",
        "../root-evil/sub/y",
        "../root-evil/new.txt",
        "../root-evil/newdir/new.txt",
        "a/../../root-evil/x",
    ] {
        file_tools(&ts, p, "path_escape");
    }
    walk_tools(&ts, "../root-evil", "path_escape");
    assert!(!fx.evil.join("new.txt").exists());
    fx.assert_untouched();
}

#[test]
fn sibling_prefix_absolute_is_path_escape() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    // A naive `starts_with(root)` string check would accept these.
    let r = abs(&fx.root);
    for p in [
        format!("{r}-evil/x"),
        format!("{r}-evil/new.txt"),
        format!("{r}/../root-evil/x"),
    ] {
        file_tools(&ts, &p, "path_escape");
    }
    walk_tools(&ts, &format!("{r}-evil"), "path_escape");
    fx.assert_untouched();
}

#[test]
fn sibling_prefix_symlink_is_path_escape() {
    let mut fx = Fx::new();
    symlink("../root-evil", fx.r("ev")).unwrap();
    symlink(&fx.evil, fx.r("ev_abs")).unwrap();
    symlink("../root-evil/x", fx.r("evx")).unwrap();
    let ts = fx.tools();
    for p in ["ev/x", "ev_abs/x", "ev/new.txt", "ev/sub/y", "evx"] {
        file_tools(&ts, p, "path_escape");
    }
    walk_tools(&ts, "ev", "path_escape");
    walk_tools(&ts, "ev_abs", "path_escape");
    assert!(!fx.evil.join("new.txt").exists());
    fx.assert_untouched();
}

#[test]
fn nul_bytes_in_paths_are_invalid_input() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    for p in [
        "a\0b",
        "\0",
        "inside.txt\0",
        "inside.txt\0../../outside/secret.txt",
        "../outside/secret.txt\0",
        "\0/etc/passwd",
        "a/\0/b",
    ] {
        file_tools(&ts, p, "invalid_input");
        walk_tools(&ts, p, "invalid_input");
    }
    assert_eq!(
        fs::read_to_string(fx.r("inside.txt")).unwrap(),
        "inside line\n"
    );
    fx.assert_untouched();
}

#[test]
fn overlong_names_are_invalid_input() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    let long = "n".repeat(256);
    let long_utf8 = "\u{e9}".repeat(128); // 256 bytes, 128 chars
    for p in [
        long.clone(),
        format!("a/{long}"),
        format!("{long}/x.txt"),
        long_utf8.clone(),
    ] {
        file_tools(&ts, &p, "invalid_input");
        walk_tools(&ts, &p, "invalid_input");
    }
    // 255 bytes is the limit and works, inside the root.
    let max = "m".repeat(255);
    check(
        &ts,
        "write_file",
        json!({"path": max, "content": "ok\n"}),
        "ok",
    );
    assert!(fx.r(&max).is_file());
    let max_utf8 = "\u{e9}".repeat(127); // 254 bytes
    check(
        &ts,
        "write_file",
        json!({"path": max_utf8, "content": "ok\n"}),
        "ok",
    );
    assert!(fx.r(&max_utf8).is_file());
    fx.assert_untouched();
}

/// SPEC §2: guards run in order, input shape (`invalid_input`) before path
/// (`path_escape`); a NUL byte or an over-long path already wins over a
/// climb, and so must an over-long name.
#[test]
fn overlong_name_wins_over_a_climb() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    let long = "n".repeat(256);
    // Control: the shape checks on the whole string already come first.
    file_tools(&ts, "../outside/secret.txt\0", "invalid_input");
    file_tools(&ts, &format!("../{}", "a/".repeat(2100)), "invalid_input");
    for p in [format!("../{long}"), format!("a/../../{long}/x")] {
        file_tools(&ts, &p, "invalid_input");
        walk_tools(&ts, &p, "invalid_input");
    }
    fx.assert_untouched();
}

#[test]
fn overlong_paths_are_invalid_input() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    for p in [
        "a/".repeat(2049),                 // 4098 bytes
        "../".repeat(2000),                // climbs, but too long first
        "x/../".repeat(900),               // normalises to the root
        format!("{}x", "a/".repeat(2048)), // 4097 bytes
        "n".repeat(10_000),
    ] {
        assert!(p.len() > 4096);
        file_tools(&ts, &p, "invalid_input");
        walk_tools(&ts, &p, "invalid_input");
    }
    fx.assert_untouched();
}

#[test]
fn paths_at_the_length_limit_do_not_crash() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    // 15 names of 255 bytes + names of 200 and 55 bytes + 16 slashes = 4096.
    let mut names: Vec<String> = (0..15)
        .map(|i| format!("{i:x}").repeat(255)[..255].to_string())
        .collect();
    names.push("p".repeat(200));
    names.push("q".repeat(55));
    let p = names.join("/");
    assert_eq!(p.len(), 4096);
    for (tool, args) in [
        ("read_file", json!({"path": p})),
        ("write_file", json!({"path": p, "content": "x"})),
        ("edit_file", json!({"path": p, "find": "x", "replace": "y"})),
        ("glob", json!({"pattern": "**", "path": p})),
        ("list_files", json!({"path": p})),
        ("search", json!({"query": "x", "path": p})),
    ] {
        let out = call(&ts, tool, args);
        let kind = kind_of(&out);
        assert!(
            ["ok", "invalid_input", "not_found"].contains(&kind.as_str()),
            "{tool} on a 4096-byte path: {}",
            out.text
        );
    }
    fx.assert_untouched();
}

#[test]
fn overlong_glob_patterns_are_invalid_input() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    let pattern = "*/".repeat(3000);
    check(&ts, "glob", json!({"pattern": pattern}), "invalid_input");
    check(&ts, "list_files", json!({"glob": pattern}), "invalid_input");
    check(
        &ts,
        "search",
        json!({"query": "x", "glob": pattern}),
        "invalid_input",
    );
    fx.assert_untouched();
}

#[test]
fn trailing_dots_and_spaces_stay_inside_the_root() {
    let mut fx = Fx::new();
    let ts = fx.tools();
    for p in [
        "a.",
        "a ",
        "...",
        ".. ",
        " ..",
        ". ",
        "....",
        "b./c ",
        "... /x",
        "c ./.. /z",
    ] {
        let content = format!("content of {p:?}\n");
        check(
            &ts,
            "write_file",
            json!({"path": p, "content": content}),
            "ok",
        );
        assert_eq!(
            fs::read_to_string(fx.r(p)).unwrap(),
            content,
            "{p:?} must be created inside the root under that exact name"
        );
        let out = check(&ts, "read_file", json!({"path": p}), "ok");
        assert!(out.text.contains("content of"), "{}", out.text);
    }
    // `.. ` and `...` are names, not parents: nothing appears next to the root.
    check(
        &ts,
        "read_file",
        json!({"path": "... /outside/secret.txt"}),
        "not_found",
    );
    check(
        &ts,
        "read_file",
        json!({"path": ".. /outside/secret.txt"}),
        "not_found",
    );
    check(
        &ts,
        "read_file",
        json!({"path": "../outside/secret.txt."}),
        "path_escape",
    );
    check(
        &ts,
        "read_file",
        json!({"path": "../outside/secret.txt "}),
        "path_escape",
    );
    fx.assert_untouched();
}

/// Red-team passes 13 (Q1) and 14 (R1): a writable root named through the
/// workspace (`writable_roots = ["a/b"]`) was resolved again by each new
/// sandbox, following links — and `a` is the model's: replaced by a link
/// to a directory holding `b -> <outside>`, the next sandbox's commands
/// wrote outside (or anywhere, with `b -> /`); refused when the path passes
/// through a link, a directory exchanged with a link in a loop still won
/// the race between that check and the holder's bind. A root in the
/// workspace (or in a writable root) is now refused whatever it holds.
/// The control: the model's command swaps the entry, and the path then
/// leads outside the workspace.
#[test]
fn a_root_the_model_can_move_is_refused() {
    let l = lab();
    let out = l.sh(&format!(
        "mkdir -p a/b evil && ln -s {} evil/b && mv a a_old && ln -s evil a && echo moved",
        l.outside.display()
    ));
    assert!(out.text.contains("moved"), "{}", out.text);
    assert_eq!(
        fs::canonicalize(l.ws.join("a/b")).unwrap(),
        fs::canonicalize(&l.outside).unwrap()
    );
    let host = cubby::HostEnv::capture();
    let open = |writable: &[&str], readable: &[PathBuf]| {
        let mut policy = cubby::Policy::builder();
        policy.writable_roots(writable.iter().copied());
        if !readable.is_empty() {
            policy
                .read_scope(cubby::config::ReadScope::System)
                .readable_roots(readable.iter().cloned());
        }
        match cubby::sandbox::LinuxSandbox::open(&l.ws, &policy.build().unwrap(), &host) {
            Ok(_) => panic!("a sandbox opened with {writable:?} / {readable:?}"),
            Err(e) => e.message().to_string(),
        }
    };
    let err = open(&["a/b"], &[]);
    assert!(
        err.contains("symbolic link") && err.contains("a/b"),
        "{err}"
    );
    // Back to a plain directory: still the model's to move.
    fs::remove_file(l.ws.join("a")).unwrap();
    fs::rename(l.ws.join("a_old"), l.ws.join("a")).unwrap();
    let err = open(&["a/b"], &[]);
    assert!(err.contains("lies in the workspace"), "{err}");
    // A readable root in a writable root, likewise.
    fs::create_dir_all(l.outside.join("r")).unwrap();
    let outside = l.outside.display().to_string();
    let err = open(&[outside.as_str()], &[l.outside.join("r")]);
    assert!(err.contains("lies in the writable root"), "{err}");
    // Red-team pass 15, S3: a masked path in a writable root, whose
    // parents commands can rename between sessions.
    let mut policy = cubby::Policy::builder();
    policy
        .writable_roots([outside.as_str()])
        .host_deny_read([l.outside.join("r/cred")]);
    let err = match cubby::sandbox::LinuxSandbox::open(&l.ws, &policy.build().unwrap(), &host) {
        Ok(_) => panic!("a sandbox opened with a masked path in a writable root"),
        Err(e) => e.message().to_string(),
    };
    assert!(err.contains("lies in the writable root"), "{err}");
}

/// A toolset on a `linux` sandbox on `ws` whose commands may also write
/// `writable`, `host` as cubby's environment; or the open's error message.
fn open_with_roots(
    ws: &std::path::Path,
    writable: &[PathBuf],
    host: &cubby::HostEnv,
) -> Result<cubby::Toolset, String> {
    let mut policy = cubby::Policy::builder();
    policy.writable_roots(writable.iter().map(|p| p.to_str().unwrap()));
    let policy = policy.build().unwrap();
    let sandbox = cubby::sandbox::LinuxSandbox::open(ws, &policy, host)
        .map_err(|e| e.message().to_string())?;
    Ok(cubby::Toolset::builder(std::sync::Arc::new(sandbox))
        .policy(policy)
        .host_env(host.clone())
        .track_changes(false)
        .build()
        .unwrap())
}

/// Red-team pass 15, S2: the workspace is a linked worktree, whose git
/// directory and common directory lie outside it, in the main repository —
/// which a user makes a writable root so that commands can commit. Then
/// commands wrote its `hooks/` and `config` (`core.fsmonitor`), and the
/// host's next `git status` or `git commit` in the worktree ran them. Such
/// a root is refused, and so is one in its `logs` or `objects` (red-team
/// pass 16: a link planted there is followed by the host's git, which
/// appends a reflog line to whatever it names). The control: a hook
/// written where the refused root lets commands write runs at the host's
/// next commit in the worktree.
#[test]
fn a_writable_root_holding_the_workspaces_git_directory_is_refused() {
    let (base, _, outside) = lab_dirs();
    let main = base.path().join("main");
    let wt = base.path().join("wt");
    let git = |dir: &std::path::Path, args: &[&str]| {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    fs::create_dir(&main).unwrap();
    git(&main, &["init", "-q"]);
    git(&main, &["commit", "-q", "--allow-empty", "-m", "init"]);
    git(&main, &["worktree", "add", "-q", wt.to_str().unwrap()]);
    let host = cubby::HostEnv::capture();
    let dot_git = main.join(".git");
    for root in [
        dot_git.clone(),
        main.clone(),
        dot_git.join("hooks"),
        dot_git.join("worktrees"),
        dot_git.join("worktrees/wt"),
        dot_git.join("objects"),
        dot_git.join("logs"),
    ] {
        match open_with_roots(&wt, std::slice::from_ref(&root), &host) {
            Ok(_) => panic!("a sandbox opened with {} writable", root.display()),
            Err(e) => assert!(e.contains("the host's git reads or runs"), "{e}"),
        }
    }
    // A directory beside the repository: opens, and commands write there.
    let tools = open_with_roots(&wt, std::slice::from_ref(&outside), &host).unwrap();
    let out = tools.call(
        "run",
        json!({"command": format!("touch {}/made && echo made", outside.display())}),
    );
    assert!(out.text.contains("made"), "{}", out.text);
    assert!(outside.join("made").exists());
    // The control.
    let hook = dot_git.join("hooks/pre-commit");
    let ran = outside.join("hook-ran");
    fs::write(&hook, format!("#!/bin/sh\necho ran > {}\n", ran.display())).unwrap();
    fs::set_permissions(&hook, fs::Permissions::from_mode(0o755)).unwrap();
    git(&wt, &["commit", "-q", "--allow-empty", "-m", "second"]);
    assert!(ran.exists(), "the control's hook did not run");
}

/// Red-team pass 16, 2 and 5: a writable root holding a workspace that has
/// no repository of its own — a command made a `.git` between them, which
/// the host's git in the workspace then found (its `core.fsmonitor` ran at
/// `git status`) — and one holding a directory on the host's `PATH`. Both
/// refused. The control: a `.git` made where the refused root lets
/// commands write is what the host's `git status` in the workspace runs.
#[test]
fn a_writable_root_above_a_workspace_without_a_repository_is_refused() {
    let (base, _, outside) = lab_dirs();
    let proj = base.path().join("proj");
    let ws = proj.join("ws");
    let bin = outside.join("bin");
    fs::create_dir_all(&ws).unwrap();
    fs::create_dir_all(&bin).unwrap();
    let host = cubby::HostEnv::capture();
    match open_with_roots(&ws, std::slice::from_ref(&proj), &host) {
        Ok(_) => panic!("a sandbox opened with the workspace's parent writable"),
        Err(e) => assert!(e.contains(".git"), "{e}"),
    }
    // With a repository of its own, likewise: a command can make it one
    // git does not take (a `HEAD` of garbage), and git goes on upward
    // (red-team pass 17).
    let init = std::process::Command::new("git")
        .args(["init", "-q"])
        .arg(&ws)
        .status()
        .unwrap();
    assert!(init.success());
    match open_with_roots(&ws, std::slice::from_ref(&proj), &host) {
        Ok(_) => panic!("a sandbox opened with the parent of a repository writable"),
        Err(e) => assert!(e.contains(".git"), "{e}"),
    }
    fs::remove_dir_all(ws.join(".git")).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    match open_with_roots(
        &ws,
        std::slice::from_ref(&outside),
        &host.with("PATH", &path),
    ) {
        Ok(_) => panic!("a sandbox opened with a PATH directory writable"),
        Err(e) => assert!(e.contains("PATH"), "{e}"),
    }
    // The control.
    let ran = outside.join("fsmonitor-ran");
    let git = |dir: &std::path::Path, args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .unwrap()
    };
    assert!(git(&proj, &["init", "-q"]).status.success());
    let fsmonitor = format!("echo ran > {}; false", ran.display());
    assert!(
        git(&proj, &["config", "core.fsmonitor", &fsmonitor])
            .status
            .success()
    );
    git(&ws, &["status"]);
    assert!(ran.exists(), "the control's fsmonitor did not run");
}

/// Red-team pass 15, S3 (its last part): a writable root holding a
/// directory where cubby looks for credential stores by name (a home,
/// `~/.cache` with `~/.cache/git`): a command renamed that directory, and
/// the next session's masks, which go by name, missed the stores under the
/// new one. Refused; a directory beside them (`~/.cache/pip`) is not. The
/// control: a store whose directory was renamed is readable by a command.
#[test]
fn a_writable_root_holding_a_credential_directory_is_refused() {
    let (_base, ws, outside) = lab_dirs();
    let home = outside.join("home");
    fs::create_dir_all(home.join(".cache/git/credential")).unwrap();
    fs::create_dir_all(home.join(".cache/pip")).unwrap();
    fs::write(home.join(".cache/git/credential/token"), "CACHED-CRED\n").unwrap();
    let host = cubby::HostEnv::capture().with("HOME", &home);
    for root in [home.clone(), home.join(".cache"), home.join(".cache/git")] {
        match open_with_roots(&ws, std::slice::from_ref(&root), &host) {
            Ok(_) => panic!("a sandbox opened with {} writable", root.display()),
            Err(e) => assert!(
                e.contains("credential stores by name") && e.contains(".cache"),
                "{e}"
            ),
        }
    }
    let tools = open_with_roots(&ws, &[home.join(".cache/pip")], &host).unwrap();
    let cat = |tools: &cubby::Toolset, dir: &str| {
        tools
            .call(
                "run",
                json!({"command": format!("cat {}/{dir}/credential/token", home.join(".cache").display())}),
            )
            .text
    };
    let text = cat(&tools, "git");
    assert!(!text.contains("CACHED-CRED"), "{text}");
    // Red-team pass 16, 4: the same directory reached through a link
    // (`~/.cache` -> `scratch/cache`), named by its real path.
    let linked_home = outside.join("home2");
    let scratch = outside.join("scratch");
    fs::create_dir_all(scratch.join("cache/huggingface")).unwrap();
    fs::create_dir_all(&linked_home).unwrap();
    symlink(scratch.join("cache"), linked_home.join(".cache")).unwrap();
    let linked = cubby::HostEnv::capture().with("HOME", &linked_home);
    match open_with_roots(&ws, std::slice::from_ref(&scratch), &linked) {
        Ok(_) => panic!("a sandbox opened with a linked ~/.cache's real place writable"),
        Err(e) => assert!(e.contains("credential stores by name"), "{e}"),
    }
    // The control: what a command in the refused root would have done,
    // and the next session.
    fs::rename(home.join(".cache/git"), home.join(".cache/g2")).unwrap();
    let next = open_with_roots(&ws, &[home.join(".cache/pip")], &host).unwrap();
    let text = cat(&next, "g2");
    assert!(text.contains("CACHED-CRED"), "{text}");
}

/// Red-team pass 16, beside 1: the workspace's own `.git/logs` and
/// `.git/objects` are writable to commands (git in the sandbox writes
/// reflogs and objects there), and a command planted links in them —
/// `logs/HEAD -> ~/.bashrc` — that the host's git later wrote through (a
/// reflog line, with a branch name the model chose, appended to the file
/// a shell sources). The links are removed when the command ends. The
/// control: the same links made on the host, and the host's commit
/// appends to the file they name.
#[test]
fn links_a_command_plants_in_the_git_directory_are_gone_when_it_ends() {
    let l = lab();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(&l.ws)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q"]);
    git(&["commit", "-q", "--allow-empty", "-m", "init"]);
    let victim = l.out("victimrc");
    let objects = l.out("objects");
    fs::write(&victim, "# rc\n").unwrap();
    fs::create_dir(&objects).unwrap();
    let plant = format!(
        "rm -f .git/logs/HEAD && ln -s {v} .git/logs/HEAD && ln -s {v} .git/FETCH_HEAD && \
         for d in 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f; do \
           [ -e .git/objects/$d ] || ln -s {o} .git/objects/$d; done && \
         test -L .git/logs/HEAD && test -L .git/FETCH_HEAD && test -L .git/objects/00 && \
         echo planted",
        v = victim.display(),
        o = objects.display()
    );
    let out = l.sh(&plant);
    assert!(
        out.text.contains("planted"),
        "the command could not plant: {}",
        out.text
    );
    let planted =
        |p: &str| fs::symlink_metadata(l.ws.join(p)).is_ok_and(|m| m.file_type().is_symlink());
    for p in [".git/logs/HEAD", ".git/FETCH_HEAD", ".git/objects/00"] {
        assert!(!planted(p), "{p} is still a link after the command");
    }
    git(&["commit", "-q", "--allow-empty", "-m", "on the host"]);
    assert_eq!(fs::read_to_string(&victim).unwrap(), "# rc\n");
    // `logs` itself made a link to a directory of links.
    let out = l.sh(&format!(
        "mkdir -p evil && ln -s {} evil/HEAD && rm -rf .git/logs && ln -s ../evil .git/logs && \
         test -L .git/logs && echo planted",
        victim.display()
    ));
    assert!(out.text.contains("planted"), "{}", out.text);
    assert!(
        !planted(".git/logs"),
        ".git/logs is still a link after the command"
    );
    git(&["commit", "-q", "--allow-empty", "-m", "again on the host"]);
    assert_eq!(fs::read_to_string(&victim).unwrap(), "# rc\n");
    // Red-team pass 17: 20,001 files in `logs` (the first sweep stopped
    // at 20,000), a link in rerere's cache, and a link deeper than a path
    // can name (that tree is renamed aside, where git does not look).
    let out = l.sh(&format!(
        "cd .git && (cd logs && seq 20001 | xargs touch) && rm -f logs/refs/heads/master \
         logs/refs/heads/main && mkdir -p logs/refs/heads && ln -s {v} logs/refs/heads/main && \
         ln -s {v} logs/refs/heads/master && mkdir -p rr-cache && ln -s {o} rr-cache/abc && \
         test -L logs/refs/heads/main && test -L rr-cache/abc && echo planted",
        v = victim.display(),
        o = objects.display()
    ));
    assert!(out.text.contains("planted"), "{}", out.text);
    for p in [
        ".git/logs/refs/heads/main",
        ".git/logs/refs/heads/master",
        ".git/rr-cache/abc",
    ] {
        assert!(!planted(p), "{p} is still a link after the command");
    }
    let deep = "d".repeat(200);
    let out = l.sh(&format!(
        "cd .git/logs && for i in $(seq 25); do mkdir {deep} && cd {deep} || exit 1; done && \
         ln -s {v} HEAD && echo planted",
        v = victim.display()
    ));
    assert!(out.text.contains("planted"), "{}", out.text);
    let aside = fs::read_dir(l.ws.join(".git")).unwrap().flatten().any(|e| {
        e.file_name()
            .to_string_lossy()
            .starts_with("logs.cubby-aside-")
    });
    assert!(aside, "the unsweepable logs were not renamed aside");
    git(&["commit", "-q", "--allow-empty", "-m", "after the flood"]);
    assert_eq!(fs::read_to_string(&victim).unwrap(), "# rc\n");
    // The control.
    fs::remove_file(l.ws.join(".git/logs/HEAD")).unwrap();
    symlink(&victim, l.ws.join(".git/logs/HEAD")).unwrap();
    git(&["commit", "-q", "--allow-empty", "-m", "control"]);
    assert!(
        fs::read_to_string(&victim).unwrap().contains("control"),
        "the control's reflog line did not land"
    );
}

/// Red-team pass 16, 11: tools keep their tokens under
/// `$XDG_CONFIG_HOME` (`gh/hosts.yml`) when it is set, and the credential
/// stores were looked for under `~/.config` only: a command read the
/// token. Now the XDG base directories of cubby's environment are watched
/// as the home's. The control: the same sandbox with `XDG_CONFIG_HOME`
/// unset in cubby's environment reads it.
#[test]
fn stores_under_the_xdg_base_directories_are_masked() {
    let (base, ws, outside) = lab_dirs();
    let xdg = outside.join("xdg");
    fs::create_dir_all(xdg.join("gh")).unwrap();
    fs::write(xdg.join("gh/hosts.yml"), "oauth_token: gho_XDGSECRET\n").unwrap();
    let cat = format!("cat {}/gh/hosts.yml", xdg.display());
    let host = cubby::HostEnv::capture().with("XDG_CONFIG_HOME", &xdg);
    let policy = cubby::Policy::builder().build().unwrap();
    let l = open_lab_in(base, ws.clone(), outside.clone(), policy, host);
    let out = l.tools.call("run", json!({"command": cat}));
    assert!(!out.text.contains("gho_XDGSECRET"), "{}", out.text);
    // The control.
    let (base2, ws2, outside2) = lab_dirs();
    let policy = cubby::Policy::builder().build().unwrap();
    let vars: Vec<(std::ffi::OsString, std::ffi::OsString)> = cubby::HostEnv::capture()
        .vars()
        .filter(|(k, _)| k != "XDG_CONFIG_HOME")
        .collect();
    let plain = open_lab_in(
        base2,
        ws2,
        outside2,
        policy,
        cubby::HostEnv::from_vars(vars),
    );
    let out = plain.tools.call("run", json!({"command": cat}));
    assert!(out.text.contains("gho_XDGSECRET"), "{}", out.text);
}
