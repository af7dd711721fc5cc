//! `write_file` and `edit_file`: parents, read-before-write, staleness, modes,
//! matching, CRLF, diffs.

use crate::*;

pub fn write_creates_with_parents(f: &dyn Fixture) {
    let t = tools(f);
    let out = ok(
        &t,
        "write_file",
        json!({"path": "new/deep/file.txt", "content": "hi\n"}),
    );
    assert_eq!(out.structured["created"], true);
    assert_eq!(out.structured["size"], 3);
    assert_eq!(f.get("new/deep/file.txt").unwrap(), b"hi\n");
}

pub fn write_needs_a_read_and_detects_staleness(f: &dyn Fixture) {
    f.put("a.txt", b"old\n");
    let t = tools(f);
    let msg = err(
        &t,
        "write_file",
        json!({"path": "a.txt", "content": "new"}),
        "not_read",
    );
    assert!(msg.contains("read_file"));
    assert_eq!(f.get("a.txt").unwrap(), b"old\n");
    ok(&t, "read_file", json!({"path": "a.txt"}));
    f.put("a.txt", b"changed behind our back\n");
    err(
        &t,
        "write_file",
        json!({"path": "a.txt", "content": "new"}),
        "stale",
    );
    assert_eq!(f.get("a.txt").unwrap(), b"changed behind our back\n");
    ok(&t, "read_file", json!({"path": "a.txt"}));
    let out = ok(&t, "write_file", json!({"path": "a.txt", "content": "new"}));
    assert_eq!(out.structured["created"], false);
    assert_eq!(f.get("a.txt").unwrap(), b"new");
    // Our own write counts as seen: writing again needs no new read.
    ok(
        &t,
        "write_file",
        json!({"path": "a.txt", "content": "newer"}),
    );
    // A second run has not read it.
    let t2 = tools(f);
    err(
        &t2,
        "write_file",
        json!({"path": "a.txt", "content": "x"}),
        "not_read",
    );
}

pub fn write_keeps_mode_bits(f: &dyn Fixture) {
    f.put_mode("run.sh", b"#!/bin/sh\n", 0o750);
    let t = tools(f);
    ok(&t, "read_file", json!({"path": "run.sh"}));
    ok(
        &t,
        "write_file",
        json!({"path": "run.sh", "content": "#!/bin/sh\necho hi\n"}),
    );
    assert_eq!(f.mode("run.sh"), 0o750);
}

pub fn write_refuses_directories(f: &dyn Fixture) {
    f.mkdir("d");
    f.put("file", b"x");
    let t = tools(f);
    err(
        &t,
        "write_file",
        json!({"path": "d", "content": "x"}),
        "is_directory",
    );
    err(
        &t,
        "write_file",
        json!({"path": ".", "content": "x"}),
        "is_directory",
    );
    let out = t.call("write_file", json!({"path": "file/child", "content": "x"}));
    assert!(out.is_error, "{}", out.text);
}

// ---- edit_file ----

pub fn edit_replaces_once_and_returns_a_diff(f: &dyn Fixture) {
    f.put("m.rs", b"fn main() {\n    let x = 1;\n}\n");
    let t = tools(f);
    err(
        &t,
        "edit_file",
        json!({"path": "m.rs", "find": "1", "replace": "2"}),
        "not_read",
    );
    ok(&t, "read_file", json!({"path": "m.rs"}));
    let out = ok(
        &t,
        "edit_file",
        json!({"path": "m.rs", "find": "let x = 1;", "replace": "let x = 2;"}),
    );
    assert!(out.text.contains("-    let x = 1;"), "{}", out.text);
    assert!(out.text.contains("+    let x = 2;"), "{}", out.text);
    assert!(out.text.contains("--- a/m.rs"));
    assert_eq!(out.structured["replacements"], 1);
    assert_eq!(out.structured["sha256"].as_str().unwrap().len(), 64);
    assert_eq!(f.get("m.rs").unwrap(), b"fn main() {\n    let x = 2;\n}\n");
    // Consecutive edits need no new read.
    ok(
        &t,
        "edit_file",
        json!({"path": "m.rs", "find": "x = 2", "replace": "y = 2"}),
    );
}

pub fn edit_ambiguous_and_replace_all(f: &dyn Fixture) {
    f.put("r.txt", b"a\nb\na\n");
    let t = tools(f);
    ok(&t, "read_file", json!({"path": "r.txt"}));
    let msg = err(
        &t,
        "edit_file",
        json!({"path": "r.txt", "find": "a", "replace": "c"}),
        "ambiguous_match",
    );
    assert!(msg.contains("2 times") && msg.contains("1, 3"), "{msg}");
    let out = ok(
        &t,
        "edit_file",
        json!({"path": "r.txt", "find": "a", "replace": "c", "replace_all": true}),
    );
    assert_eq!(out.structured["replacements"], 2);
    assert_eq!(f.get("r.txt").unwrap(), b"c\nb\nc\n");
}

pub fn edit_no_match_diagnoses_whitespace(f: &dyn Fixture) {
    f.put("t.py", b"def f():\n\treturn 1\n");
    let t = tools(f);
    ok(&t, "read_file", json!({"path": "t.py"}));
    let msg = err(
        &t,
        "edit_file",
        json!({"path": "t.py", "find": "    return 1", "replace": "x"}),
        "no_match",
    );
    assert!(msg.contains("line 2") && msg.contains("tab"), "{msg}");
    assert_eq!(f.get("t.py").unwrap(), b"def f():\n\treturn 1\n");
}

pub fn edit_keeps_crlf(f: &dyn Fixture) {
    f.put("w.txt", b"one\r\ntwo\r\nthree\r\n");
    let t = tools(f);
    ok(&t, "read_file", json!({"path": "w.txt"}));
    ok(
        &t,
        "edit_file",
        json!({"path": "w.txt", "find": "one\ntwo", "replace": "1\n2\n2.5"}),
    );
    assert_eq!(f.get("w.txt").unwrap(), b"1\r\n2\r\n2.5\r\nthree\r\n");
}

pub fn edit_stale_and_missing(f: &dyn Fixture) {
    f.put("s.txt", b"abc");
    let t = tools(f);
    ok(&t, "read_file", json!({"path": "s.txt"}));
    f.put("s.txt", b"abcd");
    err(
        &t,
        "edit_file",
        json!({"path": "s.txt", "find": "abc", "replace": "x"}),
        "stale",
    );
    err(
        &t,
        "edit_file",
        json!({"path": "nope.txt", "find": "a", "replace": "b"}),
        "not_found",
    );
    err(
        &t,
        "edit_file",
        json!({"path": "s.txt", "find": "", "replace": "b"}),
        "invalid_input",
    );
}

pub fn edit_binary_is_refused(f: &dyn Fixture) {
    f.put("b.bin", b"\0\x01\x02abc");
    let t = tools(f);
    ok(&t, "read_file", json!({"path": "b.bin"}));
    err(
        &t,
        "edit_file",
        json!({"path": "b.bin", "find": "abc", "replace": "x"}),
        "binary",
    );
}
