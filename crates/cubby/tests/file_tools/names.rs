//! Names cannot forge lines (SPEC §2): listings, changes and hits parsed by
//! their grammar; names escaped in messages; controls shown as pictures.

use crate::*;

/// Names that would forge lines or reach a terminal, and how each is shown.
pub const FORGING_NAMES: [(&[u8], &str); 4] = [
    (b"x\nD forged.rs", r#""x\nD forged.rs""#),
    (b"cr\rA forged.txt", r#""cr\rA forged.txt""#),
    (b"t\x1b]0;owned\x07.txt", r#""t\x1b]0;owned\x07.txt""#),
    (b"bad\xff.txt", r#""bad\xff.txt""#),
];

pub fn put_forging_names(f: &dyn Fixture) {
    for (name, _) in FORGING_NAMES {
        f.put_named(name, b"NEEDLE\n");
    }
}

/// Every line of `text` is one of `expected` (in order), and no control
/// character but the line feeds is in it.
pub fn lines_are(tool: &str, text: &str, expected: &[String]) {
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines, expected, "{tool}: {text:?}");
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "{tool}: {text:?}"
    );
}

pub fn shown_sorted() -> Vec<&'static str> {
    let mut shown: Vec<(&[u8], &str)> = FORGING_NAMES.to_vec();
    shown.sort_by(|a, b| a.0.cmp(b.0));
    shown.into_iter().map(|(_, s)| s).collect()
}

pub fn names_cannot_forge_lines_in_listings(f: &dyn Fixture) {
    put_forging_names(f);
    let t = tools(f);
    let expected: Vec<String> = shown_sorted().iter().map(|s| s.to_string()).collect();
    let out = ok(&t, "list_files", json!({}));
    lines_are("list_files", &out.text, &expected);
    assert_eq!(out.structured["total"], 4);
    let out = ok(&t, "glob", json!({"pattern": "*"}));
    lines_are("glob", &out.text, &expected);
    let out = ok(&t, "search", json!({"query": "NEEDLE"}));
    let mut hits: Vec<String> = expected.iter().map(|s| format!("{s}:1: NEEDLE")).collect();
    hits.push("[4 matching lines]".into());
    lines_are("search", &out.text, &hits);
    // A directory's name too, with its `/` inside the quotes.
    f.mkdir("d\ne");
    f.put("d\ne/in.txt", b"x");
    let out = ok(&t, "list_files", json!({"path": "d\ne"}));
    lines_are("list_files", &out.text, &[r#""d\ne/in.txt""#.to_string()]);
    let out = ok(&t, "list_files", json!({"glob": "nothing"}));
    assert!(!out.text.contains('\n'), "{}", out.text);
    let out = ok(&t, "list_files", json!({"depth": 1}));
    assert!(out.text.lines().any(|l| l == r#""d\ne/""#), "{}", out.text);
}

pub fn names_cannot_forge_lines_in_changes(f: &dyn Fixture) {
    f.put("before.txt", b"x");
    let t = tools(f);
    // Wait for the baseline.
    ok(&t, "changes", json!({}));
    put_forging_names(f);
    let out = ok(&t, "changes", json!({}));
    let expected: Vec<String> = shown_sorted().iter().map(|s| format!("A {s}")).collect();
    lines_are("changes", &out.text, &expected);
    assert!(
        !out.text.lines().any(|l| l.starts_with("D ")),
        "{}",
        out.text
    );
}

/// One `search` line read as the tool's description says: a path (quoted
/// and escaped, or plain up to the first `:` of a match line, the first
/// `-<digits>-` of a context line, when there is context), its line
/// number, its text.
pub fn parse_hit(line: &str, context: bool) -> Result<(Vec<u8>, u64, String), String> {
    let bad = |why: &str| format!("{line:?}: {why}");
    let (path, rest): (Vec<u8>, &str) = if let Some(quoted) = line.strip_prefix('"') {
        let mut path = Vec::new();
        let mut chars = quoted.char_indices();
        let end = loop {
            let (i, c) = chars.next().ok_or_else(|| bad("no closing quote"))?;
            match c {
                '"' => break i + 1,
                '\\' => match chars.next().ok_or_else(|| bad("a lone `\\`"))?.1 {
                    'n' => path.push(b'\n'),
                    'r' => path.push(b'\r'),
                    't' => path.push(b'\t'),
                    'x' => {
                        let hex: String = chars.by_ref().take(2).map(|(_, c)| c).collect();
                        path.push(u8::from_str_radix(&hex, 16).map_err(|e| bad(&e.to_string()))?);
                    }
                    other => path.extend(other.to_string().as_bytes()),
                },
                c => path.extend(c.to_string().as_bytes()),
            }
        };
        (path, &quoted[end..])
    } else {
        let colon = line.find(':').unwrap_or(line.len());
        let dash = (0..line.len())
            .filter(|&i| line[i..].starts_with('-'))
            .find(|&i| {
                let digits = line[i + 1..].bytes().take_while(u8::is_ascii_digit).count();
                digits > 0 && line[i + 1 + digits..].starts_with('-')
            })
            .filter(|_| context)
            .unwrap_or(line.len());
        let end = colon.min(dash);
        (line.as_bytes()[..end].to_vec(), &line[end..])
    };
    let sep = rest.chars().next().ok_or_else(|| bad("no separator"))?;
    let (number, text) = rest[1..]
        .split_once(sep)
        .ok_or_else(|| bad("no line number"))?;
    let text = text
        .strip_prefix(' ')
        .ok_or_else(|| bad("no space before the text"))?;
    let number = number.parse().map_err(|_| bad("no line number"))?;
    Ok((path, number, text.to_string()))
}

/// Every hit line of a `search` result names a file, a line of it and that
/// line's text, as `parse_hit` reads it.
pub fn hits_are_true(f: &dyn Fixture, text: &str, context: bool) -> Result<(), String> {
    for line in text.lines() {
        if line == "--" || line.starts_with('[') {
            continue;
        }
        let (path, number, shown) = parse_hit(line, context)?;
        let path = String::from_utf8(path).map_err(|e| e.to_string())?;
        let Some(bytes) = f.get(&path) else {
            return Err(format!("{line:?} names {path:?}, which is no file"));
        };
        let content = String::from_utf8_lossy(&bytes).into_owned();
        let real = (number as usize)
            .checked_sub(1)
            .and_then(|i| content.lines().nth(i));
        if real != Some(shown.as_str()) {
            return Err(format!("{line:?}: line {number} of {path:?} is {real:?}"));
        }
    }
    Ok(())
}

pub fn names_with_colons_cannot_forge_hits(f: &dyn Fixture) {
    // A real file, and names made to read as hits in it (or in a file
    // that does not exist), for match lines and context lines.
    f.put("src/main.rs", b"fn main() {}\n");
    let forging: [(&str, &[u8]); 4] = [
        ("src/main.rs:1: fn main() { evil() }", b"NEEDLE\n"),
        ("src/main.rs:9:", b"NEEDLE\n"),
        ("src/lib.rs-1- use evil;", b"before\nNEEDLE\n"),
        ("src/2024-01-15-post.md", b"before\nNEEDLE\n"),
    ];
    for (name, content) in forging {
        f.put(name, content);
    }
    // Control: the lines a grep prints for these files (`path:line: text`,
    // `path-line- text`) read as hits that are not true.
    for (name, _) in &forging[..3] {
        let naive = [format!("{name}:1: NEEDLE"), format!("{name}-1- before")];
        let (match_line, context_line) = (&naive[0], &naive[1]);
        let line = if name.contains("lib") {
            context_line
        } else {
            match_line
        };
        assert!(hits_are_true(f, line, true).is_err(), "control {line:?}");
    }
    let t = tools(f);
    for context in [0, 1] {
        let args = json!({"query": "NEEDLE", "context": context});
        let out = ok(&t, "search", args.clone());
        assert_eq!(out.structured["total"], 4, "{}", out.text);
        hits_are_true(f, &out.text, context > 0)
            .unwrap_or_else(|e| panic!("{args}: {e}\n{}", out.text));
    }
    let out = ok(&t, "search", json!({"query": "NEEDLE"}));
    assert!(
        out.text
            .contains("\"src/main.rs:1: fn main() { evil() }\":1: NEEDLE\n"),
        "{}",
        out.text
    );
    // Without context a `-<digits>-` is no separator: the name is plain.
    assert!(
        out.text
            .lines()
            .any(|l| l == "src/2024-01-15-post.md:2: NEEDLE"),
        "{}",
        out.text
    );
    // Listings hold one path a line: `:` there forges nothing and stays plain.
    let out = ok(&t, "glob", json!({"pattern": "src/main.rs:9:"}));
    assert_eq!(out.text, "src/main.rs:9:");
}

pub fn error_messages_escape_names(f: &dyn Fixture) {
    f.mkdir("d\x1b]0;owned\x07");
    f.mkdir("n\nl");
    let t = tools(f);
    let msg = err(
        &t,
        "read_file",
        json!({"path": "d\u{1b}]0;owned\u{7}"}),
        "is_directory",
    );
    assert!(msg.contains(r#""d\x1b]0;owned\x07""#), "{msg:?}");
    assert!(!msg.chars().any(char::is_control), "{msg:?}");
    let msg = err(&t, "read_file", json!({"path": "n\nl"}), "is_directory");
    assert!(msg.contains(r#""n\nl""#) && !msg.contains('\n'), "{msg:?}");
    let msg = err(
        &t,
        "read_file",
        json!({"path": "/abs\n\u{1b}[2J"}),
        "path_escape",
    );
    assert!(!msg.chars().any(char::is_control), "{msg:?}");
    let msg = err(&t, "read_file", json!({"path": "gone\nD x"}), "not_found");
    assert!(!msg.contains('\n'), "{msg:?}");
}

pub fn contents_show_controls_as_pictures(f: &dyn Fixture) {
    f.put(
        "esc.txt",
        b"red \x1b[31mRED\x1b[0m\x07 \x1b]0;title\x07\tend\r\n",
    );
    // A carriage return inside a line would move a terminal back over the
    // `path:line:` a search line starts with.
    f.put("cr.txt", b"real\rfake.rs:9: forged\n");
    let t = tools(f);
    let out = ok(&t, "search", json!({"query": "forged"}));
    assert_eq!(
        out.text,
        "cr.txt:1: real\u{240d}fake.rs:9: forged\n[1 matching line]"
    );
    let out = ok(&t, "read_file", json!({"path": "cr.txt"}));
    assert_eq!(out.text, "     1\treal\u{240d}fake.rs:9: forged\n");
    for (tool, args) in [
        ("read_file", json!({"path": "esc.txt"})),
        ("view_file", json!({"path": "esc.txt"})),
        ("search", json!({"query": "RED"})),
    ] {
        let out = ok(&t, tool, args);
        let both = format!("{}{}", out.text, out.structured);
        assert!(
            !both.contains('\u{1b}') && !both.contains('\u{7}'),
            "{tool}: {both:?}"
        );
        assert!(
            out.text
                .contains("red \u{241b}[31mRED\u{241b}[0m\u{2407} \u{241b}]0;title\u{2407}\tend"),
            "{tool}: {:?}",
            out.text
        );
    }
}
