//! Media types of artifacts (SPEC §5.1): a declared type is normalized, the
//! types a client would render (PNG, JPEG, GIF, WebP) or open (PDF) must
//! match the bytes, and only the four raster formats, whole and nothing
//! after them, are ever shown to the model as an image. SVG, HTML and XML
//! are never images: they are documents that can carry scripts.

use crate::error::{Error, ErrorKind, Result};

/// How many leading bytes the decision reads (signatures and a text check).
pub const HEAD_BYTES: usize = 8 * 1024;
/// How many trailing bytes the decision reads (where an image ends).
pub const TAIL_BYTES: usize = 16;

/// The longest type or subtype name (RFC 6838).
const MAX_TOKEN: usize = 127;

/// Names some programs use for a registered type.
const ALIASES: &[(&str, &str)] = &[
    ("image/jpg", "image/jpeg"),
    ("image/pjpeg", "image/jpeg"),
    ("image/x-png", "image/png"),
    ("application/x-pdf", "application/pdf"),
    ("text/x-markdown", "text/markdown"),
    ("application/x-json", "application/json"),
    ("text/json", "application/json"),
];

/// Types by file extension, for bytes with no signature.
const BY_EXTENSION: &[(&str, &str)] = &[
    ("txt", "text/plain"),
    ("log", "text/plain"),
    ("md", "text/markdown"),
    ("csv", "text/csv"),
    ("tsv", "text/tab-separated-values"),
    ("json", "application/json"),
    ("jsonl", "application/jsonl"),
    ("yaml", "application/yaml"),
    ("yml", "application/yaml"),
    ("toml", "application/toml"),
    ("html", "text/html"),
    ("htm", "text/html"),
    ("xml", "application/xml"),
    ("svg", "image/svg+xml"),
    ("css", "text/css"),
    ("js", "text/javascript"),
    ("py", "text/x-python"),
    ("rs", "text/x-rust"),
    ("sh", "text/x-shellscript"),
    ("diff", "text/x-diff"),
    ("patch", "text/x-diff"),
];

/// The formats whose bytes are checked against a declared type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Signed {
    Png,
    Jpeg,
    Gif,
    Webp,
    Pdf,
}

impl Signed {
    const ALL: [Signed; 5] = [
        Signed::Png,
        Signed::Jpeg,
        Signed::Gif,
        Signed::Webp,
        Signed::Pdf,
    ];

    fn media_type(self) -> &'static str {
        match self {
            Signed::Png => "image/png",
            Signed::Jpeg => "image/jpeg",
            Signed::Gif => "image/gif",
            Signed::Webp => "image/webp",
            Signed::Pdf => "application/pdf",
        }
    }

    fn of_type(media_type: &str) -> Option<Signed> {
        Signed::ALL
            .into_iter()
            .find(|s| s.media_type() == media_type)
    }

    /// The format whose signature `head` starts with.
    fn sniff(head: &[u8]) -> Option<Signed> {
        if head.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(Signed::Png)
        } else if head.starts_with(b"\xff\xd8\xff") {
            Some(Signed::Jpeg)
        } else if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
            Some(Signed::Gif)
        } else if head.len() >= 12 && head.starts_with(b"RIFF") && &head[8..12] == b"WEBP" {
            Some(Signed::Webp)
        } else if head.starts_with(b"%PDF-") {
            Some(Signed::Pdf)
        } else {
            None
        }
    }

    /// True when the file ends where the format says it ends: nothing is
    /// appended (a PNG followed by a ZIP is both, and is not shown).
    fn ends_cleanly(self, head: &[u8], tail: &[u8], size: u64) -> bool {
        match self {
            Signed::Png => tail.ends_with(b"\0\0\0\0IEND\xaeB`\x82"),
            Signed::Jpeg => tail.ends_with(b"\xff\xd9"),
            Signed::Gif => tail.ends_with(b";"),
            Signed::Webp => {
                let riff = head
                    .get(4..8)
                    .and_then(|b| b.try_into().ok())
                    .map(u32::from_le_bytes);
                riff.is_some_and(|n| {
                    let body = u64::from(n) + 8;
                    body == size || body + 1 == size && n % 2 == 1
                })
            }
            Signed::Pdf => true,
        }
    }
}

/// What the bytes of an artifact are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decided {
    /// The normalized media type.
    pub media_type: String,
    /// True when the bytes are a whole PNG, JPEG, GIF or WebP image with
    /// nothing after it: the only artifacts shown as image content.
    pub image: bool,
}

/// Normalizes a declared media type: lower case, parameters dropped,
/// aliases replaced (`IMAGE/JPG; q=1` → `image/jpeg`).
///
/// # Errors
///
/// `invalid_input` when `declared` is not `type/subtype`.
pub fn normalize(declared: &str) -> Result<String> {
    let essence = declared.split(';').next().unwrap_or("").trim();
    let lower = essence.to_ascii_lowercase();
    let valid_token = |t: &str| {
        !t.is_empty()
            && t.len() <= MAX_TOKEN
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    match lower.split_once('/') {
        Some((ty, sub)) if valid_token(ty) && valid_token(sub) => {}
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "media type {} is not `type/subtype`; give one such as `application/pdf`, or none to have it detected",
                    crate::path::escape_name(declared.as_bytes())
                ),
            ));
        }
    }
    Ok(ALIASES
        .iter()
        .find(|(alias, _)| *alias == lower)
        .map_or(lower, |(_, real)| (*real).to_string()))
}

/// Decides an artifact's media type from the declared type (if any), its
/// name, its first [`HEAD_BYTES`] and last [`TAIL_BYTES`] bytes, and its
/// size.
///
/// A declared PNG, JPEG, GIF, WebP or PDF must carry that format's
/// signature, and a declared image must end where the format ends. An
/// undeclared type is the signature's, else the extension's, else
/// `text/plain` for UTF-8 and `application/octet-stream` for the rest; an
/// undeclared image with bytes after its end is stored as
/// `application/octet-stream` (kept, never shown).
///
/// # Errors
///
/// `invalid_input` naming the declared type and what the bytes are.
pub fn decide(
    declared: Option<&str>,
    name: &str,
    head: &[u8],
    tail: &[u8],
    size: u64,
) -> Result<Decided> {
    let sniffed = Signed::sniff(head);
    if let Some(declared) = declared {
        let media_type = normalize(declared)?;
        if let Some(want) = Signed::of_type(&media_type) {
            if sniffed != Some(want) {
                let are = match sniffed {
                    Some(s) => s.media_type().to_string(),
                    None => match infer::get(head) {
                        Some(t) => format!(
                            "not a {} (they look like {})",
                            want.media_type(),
                            t.mime_type()
                        ),
                        None => format!("not a {}", want.media_type()),
                    },
                };
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!(
                        "declared {media_type} but the bytes are {are}; declare the type the bytes have, or none"
                    ),
                ));
            }
            let image = want != Signed::Pdf;
            if image && !want.ends_cleanly(head, tail, size) {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!(
                        "declared {media_type} but there are bytes after the image's end (the file is also another format); publish it as application/octet-stream"
                    ),
                ));
            }
            return Ok(Decided { media_type, image });
        }
        return Ok(Decided {
            media_type,
            image: false,
        });
    }
    if let Some(s) = sniffed {
        if s == Signed::Pdf {
            return Ok(Decided {
                media_type: s.media_type().into(),
                image: false,
            });
        }
        if s.ends_cleanly(head, tail, size) {
            return Ok(Decided {
                media_type: s.media_type().into(),
                image: true,
            });
        }
        return Ok(Decided {
            media_type: "application/octet-stream".into(),
            image: false,
        });
    }
    if let Some(t) = infer::get(head) {
        if !t.mime_type().starts_with("image/") {
            return Ok(Decided {
                media_type: t.mime_type().into(),
                image: false,
            });
        }
    }
    let by_ext = name
        .rsplit_once('.')
        .map(|(_, ext)| ext.to_ascii_lowercase())
        .and_then(|ext| BY_EXTENSION.iter().find(|(e, _)| *e == ext))
        .map(|(_, t)| *t);
    let utf8 = match std::str::from_utf8(head) {
        Ok(_) => true,
        // A character cut at the end of the head is still text.
        Err(e) => e.error_len().is_none() && head.len() == HEAD_BYTES,
    };
    let media_type = match by_ext {
        Some(t) if utf8 => t,
        _ if utf8 && !head.contains(&0) => "text/plain",
        _ => "application/octet-stream",
    };
    Ok(Decided {
        media_type: media_type.into(),
        image: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real 1×1 PNG, made by the `image` crate.
    fn png() -> Vec<u8> {
        let mut out = std::io::Cursor::new(Vec::new());
        image::RgbaImage::new(1, 1)
            .write_to(&mut out, image::ImageFormat::Png)
            .unwrap();
        out.into_inner()
    }

    fn decide_all(declared: Option<&str>, name: &str, bytes: &[u8]) -> Result<Decided> {
        let head = &bytes[..bytes.len().min(HEAD_BYTES)];
        let tail = &bytes[bytes.len().saturating_sub(TAIL_BYTES)..];
        decide(declared, name, head, tail, bytes.len() as u64)
    }

    #[test]
    fn declared_types_are_normalized() {
        assert_eq!(normalize("IMAGE/JPG; q=1").unwrap(), "image/jpeg");
        assert_eq!(
            normalize(" text/plain; charset=utf-8").unwrap(),
            "text/plain"
        );
        assert_eq!(
            normalize("application/vnd.api+json").unwrap(),
            "application/vnd.api+json"
        );
        for bad in [
            "",
            "png",
            "image/",
            "/png",
            "a/b/c",
            "text/pl ain",
            "te\nxt/plain",
        ] {
            assert_eq!(
                normalize(bad).unwrap_err().kind(),
                ErrorKind::InvalidInput,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_png_is_an_image_and_declared_otherwise_is_refused_naming_both() {
        let png = png();
        let d = decide_all(None, "x.bin", &png).unwrap();
        assert_eq!(
            d,
            Decided {
                media_type: "image/png".into(),
                image: true
            }
        );
        assert!(decide_all(Some("image/png"), "x.png", &png).unwrap().image);
        let e = decide_all(Some("image/jpeg"), "x.jpg", &png).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(
            e.message().contains("image/jpeg") && e.message().contains("image/png"),
            "{e:?}"
        );
    }

    #[test]
    fn a_zip_declared_pdf_is_refused() {
        let mut zip = b"PK\x03\x04".to_vec();
        zip.extend_from_slice(&[0; 60]);
        let e = decide_all(Some("application/pdf"), "x.pdf", &zip).unwrap_err();
        assert!(
            e.message().contains("application/pdf") && e.message().contains("application/zip"),
            "{e:?}"
        );
        let d = decide_all(None, "x.pdf", b"%PDF-1.7\n...").unwrap();
        assert_eq!(
            d,
            Decided {
                media_type: "application/pdf".into(),
                image: false
            }
        );
    }

    #[test]
    fn a_png_zip_polyglot_is_never_an_image() {
        let mut poly = png();
        poly.extend_from_slice(
            b"PK\x03\x04 then a zip archive PK\x05\x06\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
        );
        let e = decide_all(Some("image/png"), "x.png", &poly).unwrap_err();
        assert!(e.message().contains("after the image's end"), "{e:?}");
        let d = decide_all(None, "x.png", &poly).unwrap();
        assert_eq!(
            d,
            Decided {
                media_type: "application/octet-stream".into(),
                image: false
            }
        );
    }

    #[test]
    fn svg_html_and_xml_are_never_images() {
        let svg = br#"<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>"#;
        for (declared, name) in [
            (None, "x.svg"),
            (Some("image/svg+xml"), "x.svg"),
            (None, "x.html"),
            (Some("text/html"), "x.png"),
            (None, "x.xml"),
        ] {
            let d = decide_all(declared, name, svg).unwrap();
            assert!(!d.image, "{declared:?} {name}: {d:?}");
        }
        assert_eq!(
            decide_all(None, "x.svg", svg).unwrap().media_type,
            "image/svg+xml"
        );
    }

    #[test]
    fn text_and_binaries_without_a_signature() {
        assert_eq!(
            decide_all(None, "notes", b"hello\n").unwrap().media_type,
            "text/plain"
        );
        assert_eq!(
            decide_all(None, "a.md", b"# hi\n").unwrap().media_type,
            "text/markdown"
        );
        assert_eq!(
            decide_all(None, "a.md", b"\xff\xfe\0bin")
                .unwrap()
                .media_type,
            "application/octet-stream"
        );
        assert_eq!(
            decide_all(None, "a", b"\x00\x01\x02").unwrap().media_type,
            "application/octet-stream"
        );
    }
}
