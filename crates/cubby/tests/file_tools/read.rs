//! `read_file`: numbered lines, windows, caps, binary and odd encodings.

use crate::*;

pub fn read_numbered_lines(f: &dyn Fixture) {
    f.put("src/a.txt", b"alpha\nbeta\ngamma\n");
    let t = tools(f);
    let out = ok(&t, "read_file", json!({"path": "src/a.txt"}));
    assert_eq!(out.text, "     1\talpha\n     2\tbeta\n     3\tgamma\n");
    let s = &out.structured;
    assert_eq!(s["start_line"], 1);
    assert_eq!(s["end_line"], 3);
    assert_eq!(s["total_lines"], 3);
    assert_eq!(s["truncated"], false);
    assert!(s.get("next_offset").is_none());
    assert_eq!(s["size"], 17);
    assert_eq!(
        s["sha256"],
        "4fdbc441ea7b546100e086ac1e4fc5ae6749b7314311c99db05be450eca12996"
    );
    assert_eq!(s["content"], "alpha\nbeta\ngamma\n");
}

pub fn read_windows_with_next_offset(f: &dyn Fixture) {
    let body: String = (1..=5000).map(|i| format!("line {i}\n")).collect();
    f.put("big.txt", body.as_bytes());
    let t = tools(f);
    let out = ok(&t, "read_file", json!({"path": "big.txt"}));
    let s = &out.structured;
    assert_eq!(
        (s["start_line"].as_u64(), s["end_line"].as_u64()),
        (Some(1), Some(2000))
    );
    assert_eq!(s["total_lines"], 5000);
    assert_eq!(s["truncated"], true);
    assert_eq!(s["next_offset"], 2001);
    assert!(out.text.contains("offset=2001"));
    let out = ok(
        &t,
        "read_file",
        json!({"path": "big.txt", "offset": 4990, "limit": 50}),
    );
    assert_eq!(out.structured["start_line"], 4990);
    assert_eq!(out.structured["end_line"], 5000);
    assert_eq!(out.structured["truncated"], false);
    assert!(out.text.starts_with("  4990\tline 4990\n"));
    // A limit above the maximum is clamped.
    let out = ok(&t, "read_file", json!({"path": "big.txt", "limit": 100000}));
    assert_eq!(out.structured["end_line"], 2000);
    err(
        &t,
        "read_file",
        json!({"path": "big.txt", "offset": 5001}),
        "invalid_input",
    );
}

pub fn read_stops_at_50_kib(f: &dyn Fixture) {
    let line = "z".repeat(99) + "\n";
    f.put("wide.txt", line.repeat(1000).as_bytes());
    let t = tools(f);
    let out = ok(&t, "read_file", json!({"path": "wide.txt"}));
    let end = out.structured["end_line"].as_u64().unwrap();
    assert!(end > 400 && end < 520, "end {end}");
    assert_eq!(out.structured["next_offset"], end + 1);
    assert!(out.structured["content"].as_str().unwrap().len() <= 50 * 1024);
}

pub fn read_cuts_long_lines(f: &dyn Fixture) {
    let long = "q".repeat(10_000);
    f.put("long.txt", format!("short\n{long}\nend\n").as_bytes());
    let t = tools(f);
    let out = ok(&t, "read_file", json!({"path": "long.txt"}));
    assert!(out.text.contains("[line cut at 2000 chars]"));
    assert_eq!(out.structured["truncated"], true);
    assert!(out.text.contains("     3\tend"));
}

pub fn read_errors(f: &dyn Fixture) {
    f.mkdir("dir");
    let t = tools(f);
    err(&t, "read_file", json!({"path": "dir"}), "is_directory");
    let msg = err(&t, "read_file", json!({"path": "missing.txt"}), "not_found");
    assert!(msg.contains("list_files") || msg.contains("glob"), "{msg}");
    err(&t, "read_file", json!({"path": "../x"}), "path_escape");
    err(
        &t,
        "read_file",
        json!({"path": "/etc/passwd"}),
        "path_escape",
    );
}

pub fn read_binary_as_metadata(f: &dyn Fixture) {
    let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    png.extend_from_slice(&[0u8; 100]);
    f.put("img.png", &png);
    f.put("bad-utf8.txt", b"ok\n\xff\xfe\xfd\n");
    let t = tools(f);
    let out = ok(&t, "read_file", json!({"path": "img.png"}));
    assert_eq!(out.structured["binary"], true);
    assert_eq!(out.structured["media_type"], "image/png");
    assert_eq!(out.structured["size"], png.len());
    assert!(out.structured.get("content").is_none());
    assert!(out.text.contains("binary"));
    let out = ok(&t, "read_file", json!({"path": "bad-utf8.txt"}));
    assert_eq!(out.structured["binary"], true);
    assert_eq!(out.structured["media_type"], "application/octet-stream");
}

pub fn read_invalid_utf8_late_is_text(f: &dyn Fixture) {
    let mut body = "a\n".repeat(5000).into_bytes();
    body.extend_from_slice(b"\xff tail\n");
    f.put("late.txt", &body);
    let t = tools(f);
    let out = ok(&t, "read_file", json!({"path": "late.txt", "offset": 5001}));
    assert_eq!(out.structured["binary"], false);
    assert!(out.text.contains("\u{fffd} tail"));
}

pub fn read_empty_file(f: &dyn Fixture) {
    f.put("empty.txt", b"");
    let t = tools(f);
    let out = ok(&t, "read_file", json!({"path": "empty.txt"}));
    assert_eq!(out.structured["total_lines"], 0);
    assert!(out.text.contains("empty"));
}
