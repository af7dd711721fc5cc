//! The raw request target, checked before anything decodes it (SPEC §5.5).
//!
//! A command's request line is checked byte by byte as it arrived; nothing
//! here decodes and then re-checks, so there is no second reading for an
//! upstream to disagree with. Refused (400): anything but origin form
//! (`/…`); bytes outside printable ASCII (controls, CR, LF, NUL, spaces,
//! anything non-ASCII: a fullwidth letter); in the path, a `\`, a `;`, a
//! `%` not followed by two hex digits, an encoded `/`, `\` or `%`
//! (`%2F`, `%5C`, `%25`: a second decoding would make them structure), an
//! encoded control or non-ASCII byte, characters outside RFC 3986's path
//! set; empty segments (`//repos`, a trailing `/`) and dot segments, raw or
//! encoded (`.`, `..`, `%2e`, `.%2E`). The query is held to printable ASCII
//! and well-formed escapes, and forwarded as it came.

/// The longest request target the gateway reads.
pub(crate) const MAX_TARGET_BYTES: usize = 8 * 1024;

/// A target that passed: the raw path and query, and the path's segments.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Target<'a> {
    /// The raw path, as forwarded (`/repos/a/b/issues`).
    pub path: &'a str,
    /// The raw query without its `?`, as forwarded.
    pub query: Option<&'a str>,
    /// The path's segments, raw (`["repos", "a", "b", "issues"]`; none for
    /// `/`).
    pub segments: Vec<&'a str>,
}

/// Checks a raw request target; the message says what is wrong.
pub(crate) fn check_target(raw: &[u8]) -> Result<Target<'_>, String> {
    if raw.len() > MAX_TARGET_BYTES {
        return Err(format!(
            "the request target is {} bytes; at most {MAX_TARGET_BYTES}",
            raw.len()
        ));
    }
    if let Some(&b) = raw.iter().find(|b| !(0x21..=0x7e).contains(*b)) {
        return Err(format!(
            "the request target holds the byte 0x{b:02x}; only printable ASCII is accepted \
             (percent-encode anything else)"
        ));
    }
    // Printable ASCII: valid UTF-8.
    let text = std::str::from_utf8(raw).map_err(|_| "the request target is not ASCII")?;
    if !text.starts_with('/') {
        return Err(if text.contains("://") {
            "the request target is in absolute form; send only the path (origin form, `/…`) \
             to the gateway's URL"
                .to_string()
        } else {
            "the request target must be a path starting with `/` (origin form)".to_string()
        });
    }
    if text.contains('#') {
        return Err("the request target holds a fragment (`#`); leave it out".to_string());
    }
    let (path, query) = match text.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (text, None),
    };
    let segments = if path == "/" {
        Vec::new()
    } else {
        path[1..].split('/').collect::<Vec<_>>()
    };
    for segment in &segments {
        check_segment(segment)?;
    }
    if let Some(q) = query {
        check_escapes(q, false)?;
    }
    Ok(Target {
        path,
        query,
        segments,
    })
}

/// One path segment, raw.
fn check_segment(segment: &str) -> Result<(), String> {
    if segment.is_empty() {
        return Err(
            "the path has an empty segment (`//` or a trailing `/`); remove it".to_string(),
        );
    }
    for c in segment.bytes() {
        let fine = c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b'='
                    | b':'
                    | b'@'
                    | b'%'
            );
        if !fine {
            let what = match c {
                b'\\' => "a backslash".to_string(),
                b';' => "a `;` (path parameters are refused)".to_string(),
                _ => format!("`{}`", c as char),
            };
            return Err(format!(
                "the path holds {what}; percent-encode data in a path segment"
            ));
        }
    }
    check_escapes(segment, true)?;
    // Dots decoded: `%2e` is a dot to most servers.
    let dots = segment.replace("%2e", ".").replace("%2E", ".");
    if dots == "." || dots == ".." {
        return Err(format!(
            "the path holds the dot segment `{segment}`; name the resource itself"
        ));
    }
    Ok(())
}

/// Every `%` is followed by two hex digits; in a path (`in_path`), no
/// escape encodes `/`, `\`, `%`, `;`, a control or a non-ASCII byte.
fn check_escapes(text: &str, in_path: bool) -> Result<(), String> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            i += 1;
            continue;
        }
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        let Some(decoded) = hex else {
            return Err(
                "the request target holds a `%` not followed by two hex digits".to_string(),
            );
        };
        if in_path {
            let why = match decoded {
                b'/' => Some("an encoded `/` (`%2F`)"),
                b'\\' => Some("an encoded `\\` (`%5C`)"),
                b'%' => Some("an encoded `%` (`%25`: a second decoding would make it an escape)"),
                b';' => Some("an encoded `;` (`%3B`)"),
                0..=0x1f | 0x7f => Some("an encoded control character"),
                0x80..=0xff => Some("an encoded non-ASCII byte"),
                _ => None,
            };
            if let Some(why) = why {
                return Err(format!(
                    "the path holds {why}, which the gateway refuses: servers disagree on \
                     what it means"
                ));
            }
        }
        i += 3;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(raw: &[u8]) -> String {
        match check_target(raw) {
            Ok(t) => panic!("{:?} passed as {t:?}", String::from_utf8_lossy(raw)),
            Err(why) => why,
        }
    }

    #[test]
    fn plain_paths_pass_with_their_segments_and_query() {
        let t = check_target(b"/repos/a-b/c.d/issues?state=open&x=%2F").unwrap();
        assert_eq!(t.path, "/repos/a-b/c.d/issues");
        assert_eq!(t.query, Some("state=open&x=%2F"));
        assert_eq!(t.segments, ["repos", "a-b", "c.d", "issues"]);
        assert!(check_target(b"/").unwrap().segments.is_empty());
        assert!(check_target(b"/a/%41b/..c/...").is_ok());
    }

    #[test]
    fn traversal_encodings_and_odd_bytes_are_refused() {
        for raw in [
            &b"/repos/o/r/issues/../../user"[..],
            b"/repos/%2e%2e/user",
            b"/repos/.%2E/user",
            b"/repos/./x",
            b"/a%2Fb",
            b"/a%2fb",
            b"/a%252Fb",
            b"/a%5Cb",
            b"/a\\b",
            b"/repos;x=y",
            b"/repos/..;x/user",
            b"//repos",
            b"/repos//x",
            b"/repos/",
            b"/a%zz",
            b"/a%4",
            b"/a%00",
            b"/a%0d%0a",
            b"/a%c3%a9",
            "/\u{ff52}epos".as_bytes(),
            b"/a\r\nb",
            b"/a\0b",
            b"/a b",
            b"/a\"b",
            b"/a{b}",
            b"http://evil.test/repos",
            b"*",
            b"repos",
            b"/a#frag",
        ] {
            refused(raw);
        }
        assert!(refused(b"/a%2Fb").contains("%2F"));
        assert!(refused(b"http://x/y").contains("absolute form"));
        assert!(refused(&vec![b'a'; MAX_TARGET_BYTES + 1]).contains("at most"));
    }
}
