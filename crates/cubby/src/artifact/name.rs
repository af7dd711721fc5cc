//! Artifact names (SPEC §5.1): one path component a person can read, the
//! same for every client, that cannot forge a path, a line or a direction.
//!
//! A name is normalized to NFC first (so `café` typed as `e` + U+0301 and as
//! `é` is one name), then checked. The checks are on the normalized form,
//! because that is what is stored, listed and put in URIs.

use unicode_normalization::UnicodeNormalization;

use crate::error::{Error, ErrorKind, Result};

/// The longest name, in bytes of UTF-8 (as a file name on Linux).
pub const MAX_NAME_BYTES: usize = 255;

/// Bidirectional-text controls (the embeddings, overrides and isolates),
/// the marks that reorder text around them, and the Unicode line and
/// paragraph separators: a name holding one can show `evil\u{202E}gnp.exe`
/// as `evilexe.png`, or break a listing's line.
const BIDI_CONTROLS: &[char] = &[
    '\u{061C}', '\u{200E}', '\u{200F}', '\u{2028}', '\u{2029}', '\u{202A}', '\u{202B}', '\u{202C}',
    '\u{202D}', '\u{202E}', '\u{2066}', '\u{2067}', '\u{2068}', '\u{2069}',
];

/// Checks `name` and returns its NFC form.
///
/// # Errors
///
/// `invalid_input` naming the rule that `name` breaks.
pub fn check_name(name: &str) -> Result<String> {
    let nfc: String = name.nfc().collect();
    let refuse = |why: &str| {
        Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "artifact name {}: {why}; give one file name such as `report.pdf`",
                crate::path::escape_name(nfc.as_bytes())
            ),
        ))
    };
    if nfc.is_empty() {
        return refuse("is empty");
    }
    if nfc.len() > MAX_NAME_BYTES {
        return refuse(&format!(
            "is {} bytes, over the {MAX_NAME_BYTES}-byte limit",
            nfc.len()
        ));
    }
    if nfc == "." || nfc == ".." {
        return refuse("names a directory");
    }
    if nfc.contains(['/', '\\']) {
        return refuse("holds a path separator");
    }
    if nfc.contains('\0') {
        return refuse("holds a NUL byte");
    }
    if nfc.chars().any(char::is_control) {
        return refuse("holds a control character");
    }
    if nfc.contains(BIDI_CONTROLS) {
        return refuse("holds a bidirectional-text control or a line separator");
    }
    if nfc.starts_with('-') {
        return refuse("starts with `-`");
    }
    if nfc.ends_with(['.', ' ']) {
        return refuse("ends with a dot or a space");
    }
    Ok(nfc)
}

/// The `n`th name for `name` in a run that already holds one called `name`
/// (`n` ≥ 2): `report (2).pdf`, `Makefile (2)`, `.env (2)`. The stem is cut
/// (at a character boundary) so that the result fits [`MAX_NAME_BYTES`].
pub fn numbered(name: &str, n: usize) -> String {
    let (stem, ext) = match name.rfind('.') {
        Some(i) if i > 0 => name.split_at(i),
        _ => (name, ""),
    };
    let suffix = format!(" ({n})");
    let room = MAX_NAME_BYTES.saturating_sub(suffix.len() + ext.len());
    let mut cut = stem.len().min(room);
    while !stem.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{suffix}{ext}", &stem[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_pass_and_are_nfc() {
        assert_eq!(check_name("report.pdf").unwrap(), "report.pdf");
        assert_eq!(check_name(".env").unwrap(), ".env");
        // NFD (e + combining acute) and NFC are the same name.
        let nfd = "cafe\u{301}.txt";
        assert_eq!(check_name(nfd).unwrap(), "caf\u{e9}.txt");
        assert_eq!(check_name("caf\u{e9}.txt").unwrap(), "caf\u{e9}.txt");
        assert_eq!(check_name(&"a".repeat(255)).unwrap().len(), 255);
    }

    #[test]
    fn names_that_forge_paths_lines_or_directions_are_refused() {
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            "a\\b",
            "nul\0byte",
            "line\nfeed",
            "esc\u{1b}[31m",
            "del\u{7f}",
            "c1\u{85}",
            "evil\u{202E}gnp.exe",
            "iso\u{2066}late",
            "-rf",
            "trailing.",
            "trailing ",
        ] {
            let e = check_name(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad:?}");
            // The message never carries the raw control character.
            assert!(
                !e.message().contains(['\n', '\u{1b}', '\0', '\u{202E}']),
                "{e:?}"
            );
        }
        assert!(check_name(&"a".repeat(256)).is_err());
        // 128 two-byte letters: 256 bytes.
        assert!(check_name(&"é".repeat(128)).is_err());
    }

    #[test]
    fn numbered_names_keep_the_extension_and_fit() {
        assert_eq!(numbered("report.pdf", 2), "report (2).pdf");
        assert_eq!(numbered("Makefile", 3), "Makefile (3)");
        assert_eq!(numbered(".env", 2), ".env (2)");
        assert_eq!(numbered("a.tar.gz", 2), "a.tar (2).gz");
        let long = format!("{}.txt", "é".repeat(125));
        let n = numbered(&long, 12);
        assert!(n.len() <= MAX_NAME_BYTES, "{}", n.len());
        assert!(n.ends_with(" (12).txt"));
        assert!(check_name(&n).is_ok());
    }
}
