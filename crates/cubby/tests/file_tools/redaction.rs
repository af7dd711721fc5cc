//! Redaction before every cut (SPEC §2), and digests that confirm no guess
//! of a secret.

use crate::*;

/// 32 characters, registered as a secret in the tests below.
pub const SECRET: &str = "sk-live-0123456789abcdefghijklmn";

pub fn with_secret(f: &dyn Fixture) -> Toolset {
    assert_eq!(SECRET.len(), 32);
    Toolset::builder(f.sandbox())
        .secret("API_KEY", SECRET)
        .build()
        .unwrap()
}

/// Asserts that no 6-character piece of the secret appears in the result.
pub fn no_part_of_secret(what: &str, out: &cubby::ToolOutput) {
    let both = format!("{}\n{}", out.text, out.structured);
    for i in 0..=SECRET.len() - 6 {
        let piece = &SECRET[i..i + 6];
        assert!(!both.contains(piece), "{what} shows `{piece}`: {both}");
    }
}

/// A line whose secret starts at `at` chars: a cut at `at + 31` would show
/// 31 of its 32 characters.
pub fn line_with_secret_at(at: usize) -> String {
    format!("NEEDLE {}{SECRET}{}", "a".repeat(at - 7), "b".repeat(100))
}

pub fn read_redacts_before_the_long_line_cut(f: &dyn Fixture) {
    let line = line_with_secret_at(2000 - 31);
    f.put("long.txt", format!("{line}\nend\n").as_bytes());
    // Control: without the secret registered, the cut shows its prefix.
    let out = ok(&tools(f), "read_file", json!({"path": "long.txt"}));
    assert!(out.text.contains(&SECRET[..31]), "{}", out.text);
    assert!(!out.text.contains(SECRET));
    let out = ok(&with_secret(f), "read_file", json!({"path": "long.txt"}));
    no_part_of_secret("read_file", &out);
    assert!(
        out.text.contains("[line cut at 2000 chars]"),
        "{}",
        out.text
    );
    assert!(out.text.contains("     2\tend"));
}

pub fn view_file_redacts_before_the_long_line_cut(f: &dyn Fixture) {
    let line = line_with_secret_at(2000 - 31);
    f.put("long.txt", format!("{line}\n").as_bytes());
    let out = ok(&tools(f), "view_file", json!({"path": "long.txt"}));
    assert!(out.text.contains(&SECRET[..31]), "{}", out.text);
    let out = ok(&with_secret(f), "view_file", json!({"path": "long.txt"}));
    no_part_of_secret("view_file", &out);
}

pub fn read_window_never_shows_part_of_a_multiline_secret(f: &dyn Fixture) {
    let pem = "-----BEGIN KEY-----\nMIIEsecretline1\nMIIEsecretline2\n-----END KEY-----";
    f.put("key.pem", format!("head\n{pem}\ntail\n").as_bytes());
    let t = Toolset::builder(f.sandbox())
        .secret("PEM", pem)
        .build()
        .unwrap();
    // A window starting inside the secret, and one ending inside it.
    for (offset, limit) in [(3, 10), (1, 3)] {
        let args = json!({"path": "key.pem", "offset": offset, "limit": limit});
        let bare = ok(&tools(f), "read_file", args.clone());
        assert!(bare.text.contains("MIIEsecretline"), "{}", bare.text);
        let out = ok(&t, "read_file", args);
        assert!(!out.text.contains("MIIE"), "{}", out.text);
        assert!(!out.structured.to_string().contains("MIIE"));
    }
    // Line numbers stay those of the file.
    let out = ok(&t, "read_file", json!({"path": "key.pem"}));
    assert!(
        out.text.contains("     2\t[REDACTED:PEM]\n"),
        "{}",
        out.text
    );
    assert!(out.text.contains("     6\ttail\n"), "{}", out.text);
    assert_eq!(out.structured["total_lines"], 6);
    // search sees the same redacted lines.
    let out = ok(&t, "search", json!({"query": "MIIE"}));
    assert_eq!(out.structured["total"], 0, "{}", out.text);
    let out = ok(&t, "search", json!({"query": "tail"}));
    assert!(out.text.starts_with("key.pem:6: tail"), "{}", out.text);
}

pub fn search_redacts_before_the_line_cut(f: &dyn Fixture) {
    let line = line_with_secret_at(500 - 31);
    f.put("long.txt", format!("{line}\n").as_bytes());
    let out = ok(&tools(f), "search", json!({"query": "NEEDLE"}));
    assert!(out.text.contains(&SECRET[..31]), "{}", out.text);
    let out = ok(&with_secret(f), "search", json!({"query": "NEEDLE"}));
    no_part_of_secret("search", &out);
    assert!(out.text.contains("[line cut at 500 chars]"), "{}", out.text);
}

pub fn echoed_input_is_redacted_before_its_cut(f: &dyn Fixture) {
    // `search` echoes its query, cut at 200 chars, when nothing matches.
    let query = format!("{}{SECRET}zz", "q".repeat(200 - 20));
    let out = ok(&tools(f), "search", json!({"query": query}));
    assert!(out.text.contains(&SECRET[..20]), "{}", out.text);
    let out = ok(&with_secret(f), "search", json!({"query": query}));
    no_part_of_secret("search's echo", &out);
    // A path echoed in an error, cut at 200 chars.
    let path = format!("../{}{SECRET}", "p".repeat(200 - 3 - 20));
    let msg = err(&tools(f), "read_file", json!({"path": path}), "path_escape");
    assert!(msg.contains(&SECRET[..20]), "{msg}");
    let out = with_secret(f).call("read_file", json!({"path": path}));
    assert!(out.text.starts_with("ERROR path_escape:"), "{}", out.text);
    no_part_of_secret("path_escape", &out);
}

/// Lower-case hex sha256.
pub fn sha_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The guesses an attacker hashes to confirm a secret offline: the file as
/// it was shown, each `[REDACTED:API_KEY]` put back as one candidate. The
/// last is the true secret.
pub fn guessed_files(shown: &str) -> Vec<String> {
    let mut guesses: Vec<String> = ["sk-live-guess", "hunter2"]
        .iter()
        .map(|g| g.to_string())
        .collect();
    guesses.push(SECRET.to_string());
    guesses
        .iter()
        .map(|g| shown.replace("[REDACTED:API_KEY]", g))
        .collect()
}

/// True when `out`'s `sha256` (or `size`) tells which guess is the file.
pub fn digest_confirms_a_guess(out: &Value, shown: &str) -> bool {
    let guesses = guessed_files(shown);
    guesses.iter().any(|g| out["sha256"] == sha_hex(g.as_bytes()))
        // The size of the file on disk tells the secret's length.
        || out["size"] == guesses.last().unwrap().len()
}

pub fn digests_of_redacted_files_confirm_no_guess(f: &dyn Fixture) {
    let raw = format!("# deploy\nAPI_KEY={SECRET}\n");
    f.put("key.env", raw.as_bytes());
    let mut binary = b"\x00\x01bin ".to_vec();
    binary.extend_from_slice(SECRET.as_bytes());
    f.put("blob.bin", &binary);
    let shown = "# deploy\nAPI_KEY=[REDACTED:API_KEY]\n";
    // Control: with no secret registered the contents are shown as they
    // are, and the same guessing confirms the file's bytes by their digest.
    let plain = ok(&tools(f), "read_file", json!({"path": "key.env"}));
    assert_eq!(plain.structured["content"], raw.as_str());
    assert!(digest_confirms_a_guess(&plain.structured, shown));
    assert_eq!(plain.structured["sha256"], sha_hex(raw.as_bytes()));

    let t = with_secret(f);
    let out = ok(&t, "read_file", json!({"path": "key.env"}));
    assert_eq!(out.structured["content"], shown, "{}", out.text);
    assert!(
        !digest_confirms_a_guess(&out.structured, shown),
        "{}",
        out.structured
    );
    // What is given is the digest of what was shown.
    assert_eq!(out.structured["sha256"], sha_hex(shown.as_bytes()));
    assert_eq!(out.structured["size"], shown.len());
    assert_eq!(out.structured["redacted"], true);
    let view = ok(&t, "view_file", json!({"path": "key.env"}));
    assert_eq!(view.structured["sha256"], sha_hex(shown.as_bytes()));
    assert_eq!(view.structured["redacted"], true);
    // A binary file too (its metadata only is shown).
    for tool in ["read_file", "view_file"] {
        let out = ok(&t, tool, json!({"path": "blob.bin"}));
        assert_ne!(out.structured["sha256"], sha_hex(&binary), "{tool}");
        assert_ne!(out.structured["size"], binary.len(), "{tool}");
        assert!(
            !out.text.contains(&sha_hex(&binary)),
            "{tool}: {}",
            out.text
        );
    }
    // The stale guard still works on the bytes on disk: an edit after the
    // read goes through, and its new digest tells no more.
    let out = ok(
        &t,
        "edit_file",
        json!({"path": "key.env", "find": "# deploy", "replace": "# deploy v2"}),
    );
    let shown2 = "# deploy v2\nAPI_KEY=[REDACTED:API_KEY]\n";
    assert!(
        !digest_confirms_a_guess(&out.structured, shown2),
        "{}",
        out.structured
    );
    assert_eq!(out.structured["sha256"], sha_hex(shown2.as_bytes()));
    assert_eq!(
        f.get("key.env").unwrap(),
        format!("# deploy v2\nAPI_KEY={SECRET}\n").as_bytes()
    );
    // Overwriting says how big the file was as it was shown, not on disk
    // (which would tell the secret's length).
    let raw2 = format!("# deploy v2\nAPI_KEY={SECRET}\n");
    let out = ok(
        &t,
        "write_file",
        json!({"path": "key.env", "content": raw2}),
    );
    assert!(
        out.text.contains(&format!("was {} bytes", shown2.len())),
        "{}",
        out.text
    );
    assert!(!out.text.contains(&format!("was {} bytes", raw2.len())));
    ok(&t, "read_file", json!({"path": "key.env"}));
    // Changed on disk after the read: stale.
    f.put("key.env", b"# deploy v2\nAPI_KEY=rotated\n");
    err(
        &t,
        "write_file",
        json!({"path": "key.env", "content": "x"}),
        "stale",
    );
}
