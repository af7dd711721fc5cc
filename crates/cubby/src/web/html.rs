//! Bytes of a response to text: charset decoding, and HTML to Markdown with
//! `htmd` (a turndown.js port on html5ever).
//!
//! Two hostile shapes of HTML are defused here:
//!
//! - **Deep nesting.** `htmd` walks the tree recursively, so a page of
//!   100,000 nested `<div>`s would overflow any thread's stack and abort the
//!   process. The tree is pruned to [`MAX_HTML_DEPTH`] levels without
//!   recursion before it is converted, on a thread whose stack is sized for
//!   that depth ([`CONVERT_STACK_BYTES`]).
//! - **Quadratic parsing.** html5ever's tree builder scans its stack of open
//!   elements at each block start tag, so nested `<div>`s cost O(n²): 80,000
//!   of them (400 KB) take 40 s. The document is fed to the parser in
//!   [`PARSE_CHUNK_BYTES`] chunks and parsing stops at the deadline; what was
//!   parsed by then is converted and the result says the rest was not.

use std::rc::Rc;
use std::time::Instant;

use encoding_rs::Encoding;

use crate::error::{Error, Result};

/// Depth of the HTML tree kept; deeper elements are dropped. Real pages nest
/// a few dozen levels; browsers' parsers cap the tree at 512.
pub(crate) const MAX_HTML_DEPTH: usize = 512;
/// Stack of the conversion thread: `htmd` takes about 1 KiB a level.
const CONVERT_STACK_BYTES: usize = 16 * 1024 * 1024;
/// Bytes of an HTML document searched for a `<meta charset>`.
const META_SNIFF_BYTES: usize = 1024;
/// Bytes fed to the HTML parser between two looks at the deadline.
const PARSE_CHUNK_BYTES: usize = 4 * 1024;

/// Tags whose content is not text a reader sees.
const SKIPPED_TAGS: [&str; 8] = [
    "script", "style", "noscript", "template", "svg", "iframe", "object", "canvas",
];

/// Decodes `bytes` with the charset of the `Content-Type` header, else a
/// byte-order mark, else (HTML) a `<meta charset>`, else UTF-8; invalid
/// sequences become U+FFFD.
pub(crate) fn decode(bytes: &[u8], charset: Option<&str>, html: bool) -> String {
    let declared = charset
        .and_then(|c| Encoding::for_label(c.trim().as_bytes()))
        .or_else(|| Encoding::for_bom(bytes).map(|(e, _)| e))
        .or_else(|| if html { meta_charset(bytes) } else { None })
        .unwrap_or(encoding_rs::UTF_8);
    declared.decode(bytes).0.into_owned()
}

/// The encoding a `<meta charset=…>` (or `content="…; charset=…"`) in the
/// first KiB names.
fn meta_charset(bytes: &[u8]) -> Option<&'static Encoding> {
    let head = &bytes[..bytes.len().min(META_SNIFF_BYTES)];
    let lower: Vec<u8> = head.to_ascii_lowercase();
    let at = memchr::memmem::find(&lower, b"charset=")? + b"charset=".len();
    let rest = &lower[at..];
    let rest = rest
        .strip_prefix(b"\"")
        .or_else(|| rest.strip_prefix(b"'"))
        .unwrap_or(rest);
    let end = rest
        .iter()
        .position(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b':' | b'.')))
        .unwrap_or(rest.len());
    Encoding::for_label(&rest[..end])
}

/// True when bytes without a usable `Content-Type` look like an HTML
/// document (`<!doctype html` or `<html` first, after whitespace and a BOM).
pub(crate) fn sniff_html(bytes: &[u8]) -> bool {
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let head: Vec<u8> = bytes[start..bytes.len().min(start + 14)].to_ascii_lowercase();
    head.starts_with(b"<!doctype html") || head.starts_with(b"<html")
}

/// Markdown made from an HTML document.
#[derive(Debug)]
pub(crate) struct Converted {
    /// The Markdown-like text.
    pub text: String,
    /// Bytes of the document parsed (less than its length when the deadline
    /// or `stop` cut parsing short).
    pub parsed_bytes: usize,
}

/// Converts an HTML document to Markdown-like text, parsing until
/// `deadline` or until `stop` says so.
///
/// # Errors
///
/// `internal` when the conversion thread cannot start or fails.
pub(crate) fn to_markdown(
    html: String,
    deadline: Instant,
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<Converted> {
    std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .name("cubby-html".into())
            .stack_size(CONVERT_STACK_BYTES)
            .spawn_scoped(scope, || convert(&html, deadline, stop))
            .map_err(|e| Error::internal(format!("cannot start the HTML conversion: {e}")))?;
        worker
            .join()
            .map_err(|_| Error::internal("the HTML conversion failed; the page cannot be shown"))
    })
}

fn convert(html: &str, deadline: Instant, stop: &dyn Fn() -> bool) -> Converted {
    use html5ever::tendril::{StrTendril, TendrilSink};

    let mut parser = html5ever::parse_document(
        markup5ever_rcdom::RcDom::default(),
        html5ever::ParseOpts::default(),
    );
    let mut parsed_bytes = 0;
    while parsed_bytes < html.len() {
        if Instant::now() >= deadline || stop() {
            break;
        }
        let mut end = (parsed_bytes + PARSE_CHUNK_BYTES).min(html.len());
        while !html.is_char_boundary(end) {
            end += 1;
        }
        parser.process(StrTendril::from_slice(&html[parsed_bytes..end]));
        parsed_bytes = end;
    }
    let dom = parser.finish();
    prune(&dom.document, MAX_HTML_DEPTH);
    let converter = htmd::HtmlToMarkdown::builder()
        .skip_tags(SKIPPED_TAGS.to_vec())
        .build();
    let text = converter.tree_to_markdown(&dom.document);
    Converted { text, parsed_bytes }
}

/// Drops every element deeper than `max_depth`, without recursion. Returns
/// true when something was dropped.
fn prune(root: &Rc<htmd::Node>, max_depth: usize) -> bool {
    let mut pruned = false;
    let mut stack = vec![(root.clone(), 0usize)];
    while let Some((node, depth)) = stack.pop() {
        if depth >= max_depth {
            let mut children = node.children.borrow_mut();
            pruned |= !children.is_empty();
            children.clear();
            continue;
        }
        for child in node.children.borrow().iter() {
            stack.push((child.clone(), depth + 1));
        }
    }
    pruned
}

/// Plain text of a small HTML fragment (a search snippet), on one line.
/// Fragments are short (the caller cuts them first), so no deadline.
pub(crate) fn fragment_text(fragment: &str) -> String {
    if !fragment.contains(['<', '&']) {
        return one_line(fragment);
    }
    let converter = htmd::HtmlToMarkdown::builder()
        .skip_tags(SKIPPED_TAGS.to_vec())
        .build();
    match converter.html_to_tree(fragment) {
        Ok(tree) => {
            prune(&tree, MAX_HTML_DEPTH);
            one_line(&converter.tree_to_markdown(&tree))
        }
        Err(_) => one_line(fragment),
    }
}

/// Collapses runs of whitespace (newlines included) into one space.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn far() -> Instant {
        Instant::now() + std::time::Duration::from_secs(60)
    }

    fn md(html: &str) -> String {
        to_markdown(html.to_string(), far(), &|| false)
            .unwrap()
            .text
    }

    #[test]
    fn html_becomes_markdown_without_scripts() {
        let md = md(
            "<html><head><title>T</title><style>p{}</style></head><body>\
             <h1>Hello</h1><p>a <b>bold</b> <a href=\"/x\">link</a></p>\
             <script>alert(1)</script><ul><li>one</li></ul></body></html>",
        );
        assert!(md.contains("# Hello"), "{md}");
        assert!(md.contains("**bold**"), "{md}");
        assert!(md.contains("[link](/x)"), "{md}");
        assert!(md.contains("one"), "{md}");
        assert!(!md.contains("alert"), "{md}");
        assert!(!md.contains("p{}"), "{md}");
    }

    #[test]
    fn deep_nesting_is_pruned_not_a_crash() {
        // Deep enough to overflow the conversion thread's stack unpruned
        // (about 1 KiB a level), shallow enough to parse quickly.
        let n = 30_000;
        let deep = format!("{}deep text{}", "<b>".repeat(n), "</b>".repeat(n));
        let md = md(&format!("<p>top</p>{deep}"));
        assert!(md.contains("top"), "{md}");
        assert!(!md.contains("deep text"));
        let shallow = format!("{}kept{}", "<div>".repeat(100), "</div>".repeat(100));
        assert!(self::md(&shallow).contains("kept"));
    }

    #[test]
    fn quadratic_parsing_stops_at_the_deadline() {
        // 200,000 nested divs would take tens of minutes to parse.
        let html = format!("<p>first</p>{}", "<div>x".repeat(200_000));
        let started = Instant::now();
        let deadline = started + std::time::Duration::from_millis(500);
        let out = to_markdown(html.clone(), deadline, &|| false).unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        assert!(out.parsed_bytes < html.len());
        assert!(out.text.contains("first"), "{}", &out.text[..100]);
        let stopped = to_markdown(html.clone(), far(), &|| true).unwrap();
        assert_eq!(stopped.parsed_bytes, 0);
    }

    #[test]
    fn charsets_are_honoured() {
        assert_eq!(decode(b"caf\xe9", Some("iso-8859-1"), false), "café");
        assert_eq!(decode(b"caf\xc3\xa9", None, false), "café");
        assert_eq!(
            decode(b"<meta charset=\"latin1\">caf\xe9", None, true),
            "<meta charset=\"latin1\">café"
        );
        assert_eq!(decode(b"\xff\xfeh\0i\0", None, false), "hi");
        assert_eq!(decode(b"a\xffb", None, false), "a\u{fffd}b");
    }

    #[test]
    fn html_is_sniffed() {
        assert!(sniff_html(b"  \n<!DOCTYPE html><html>"));
        assert!(sniff_html(b"\xef\xbb\xbf<html lang=en>"));
        assert!(!sniff_html(b"{\"a\": 1}"));
        assert!(!sniff_html(b"plain <html> later"));
    }

    #[test]
    fn snippets_are_plain_lines() {
        assert_eq!(
            fragment_text("The <strong>Rust</strong>\n language &amp; more"),
            "The **Rust** language & more"
        );
        assert_eq!(fragment_text("no  markup\there"), "no markup here");
    }
}
