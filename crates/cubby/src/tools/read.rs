//! `read_file`: numbered lines in windows, sha256 of the whole file, binary
//! files as metadata.
//!
//! The file is streamed once: every byte is hashed, lines are counted, and
//! only the requested window is kept, so memory stays bounded by the window
//! whatever the file's size.
//!
//! Secrets are redacted from the stream before it is split into lines (a
//! secret that spans lines keeps its line feeds, so numbers stay true), and
//! so before any window or long-line cut: no cut shows a part of a secret.
//! Control characters a terminal could act on (ESC, the other C0 controls
//! but tab, a carriage return inside a line, DEL, C1) are shown as their
//! control pictures (`␛`, `␍`), before the 50 KiB budget is counted.

use std::io::Read;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::edit::EditFile;
use super::view::ViewFile;
use super::write::WriteFile;
use super::{Ctx, READ_ONLY, Tool, cut_line, hex, thousands};
use crate::error::{Error, ErrorKind, Result};
use crate::output::{Redactor, ToolOutput, neutralize_line};
use crate::path::WorkspacePath;

/// Bytes inspected to decide whether a file is binary.
pub(crate) const BINARY_SNIFF_BYTES: usize = 8 * 1024;
/// Read buffer size.
const CHUNK_BYTES: usize = 64 * 1024;

/// Arguments of `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// File path relative to the workspace root, e.g. `src/main.rs`.
    pub path: String,
    /// 1-based line number to start at (default 1).
    #[serde(default)]
    pub offset: Option<u64>,
    /// Number of lines to return (default and most: the line limit in the tool description).
    #[serde(default)]
    pub limit: Option<u64>,
}

/// Result of `read_file`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Output {
    /// The path read, relative to the root.
    pub path: String,
    /// The lines of the window, without numbers (absent for binary files).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// First line shown (1-based; 0 when nothing is shown).
    pub start_line: u64,
    /// Last line shown (0 when nothing is shown).
    pub end_line: u64,
    /// Lines in the whole file.
    pub total_lines: u64,
    /// True when the window stops before the end or a line was cut.
    pub truncated: bool,
    /// The `offset` for the next call, when there is more.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<u64>,
    /// sha256 of the whole file, hex; of its redacted contents (as shown)
    /// when `redacted`.
    pub sha256: String,
    /// Size in bytes; of the redacted contents when `redacted`.
    pub size: u64,
    /// True when secrets were redacted from the file: `sha256` and `size`
    /// are those of the contents as shown, not of the bytes on disk.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub redacted: bool,
    /// True for a binary file (no content shown).
    pub binary: bool,
    /// Media type sniffed from the bytes (binary files).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
}

/// The `read_file` tool.
pub struct ReadFile;

/// The read-before-write guard in words, for the offered tools that need
/// it (` Read a file before write_file overwrites it or edit_file changes
/// it.`), or nothing; `name_self` says `with read_file` too (for a front's
/// instructions).
pub(crate) fn guard(d: &super::Describe<'_>, name_self: bool) -> String {
    let write = d.offers(WriteFile::NAME);
    let edit = d.offers(EditFile::NAME);
    let what = match (write, edit) {
        (true, true) => format!(
            "{} overwrites it or {} changes it",
            WriteFile::NAME,
            EditFile::NAME
        ),
        (true, false) => format!("{} overwrites it", WriteFile::NAME),
        (false, true) => format!("{} changes it", EditFile::NAME),
        (false, false) => return String::new(),
    };
    let with = if name_self {
        format!(" with {}", ReadFile::NAME)
    } else {
        String::new()
    };
    format!(" Read a file{with} before {what}.")
}

impl Tool for ReadFile {
    const NAME: &'static str = "read_file";
    const FACTS: super::ToolFacts = super::reads_files(super::Cost::Bounded);
    fn description(d: &super::Describe<'_>) -> String {
        let l = &d.limits.read_file;
        format!(
            "Read a file of the sandboxed workspace as numbered lines (`cat -n` style); {} \
             file-reading tool. At most {} lines or {} a call, lines over {} chars cut; read on \
             with `offset` = the returned `next_offset`. Returns the file's sha256 and size (of \
             the contents as shown when secrets were redacted: `redacted`); binary files give \
             metadata only{}.{}",
            super::PREFER,
            super::thousands(l.max_lines as u64),
            super::size(l.max_bytes as u64),
            super::thousands(crate::config::READ_MAX_LINE_CHARS as u64),
            d.mention(ViewFile::NAME, |view| format!(" (view images with {view})")),
            guard(d, false),
        )
    }
    const ANNOTATIONS: super::Annotations = READ_ONLY;
    type Params = Params;
    type Output = Output;

    fn call(ctx: &Ctx<'_>, params: Params) -> Result<ToolOutput<Output>> {
        let path = WorkspacePath::parse(&params.path)?;
        ctx.policy.check_read(&path)?;
        let limits = &ctx.limits.read_file;
        let offset = params.offset.unwrap_or(1).max(1);
        let limit = params
            .limit
            .unwrap_or(limits.max_lines as u64)
            .clamp(1, limits.max_lines as u64);
        let file = ctx.fs.open(&path)?;
        if file.metadata.size > limits.max_file_bytes {
            return Err(Error::new(
                ErrorKind::TooLarge,
                format!(
                    "`{path}` is {} bytes, above the read limit of {} bytes; \
                     use {} to find the lines you need",
                    thousands(file.metadata.size),
                    thousands(limits.max_file_bytes),
                    super::search::Search::NAME,
                ),
            ));
        }
        let window = Window {
            offset,
            limit,
            max_bytes: limits.max_bytes,
            max_line_chars: crate::config::READ_MAX_LINE_CHARS,
        };
        let scan = scan(file.reader, &window, ctx.redactor)
            .map_err(|e| Error::from_io(&e, &path.display()))?;
        ctx.run.record_read(&path, scan.sha, scan.shown.size);
        render(&path, scan, &window)
    }
}

/// What to keep of a file.
struct Window {
    offset: u64,
    limit: u64,
    max_bytes: usize,
    max_line_chars: usize,
}

/// What one pass over a file found.
struct Scan {
    /// sha256 of the bytes on disk (the stale guard's).
    sha: super::Sha,
    /// The digest and size shown (of the redacted contents).
    shown: super::Shown,
    binary: Option<String>,
    /// The kept lines, one after another (no separators).
    text: String,
    /// (line number, its range in `text`) of each kept line.
    lines: Vec<(u64, std::ops::Range<usize>)>,
    total_lines: u64,
    any_line_cut: bool,
    /// The first line not shown because the byte budget ran out.
    stopped_at: Option<u64>,
}

/// Sniffs a media type from the first bytes.
pub(crate) fn media_type(head: &[u8]) -> String {
    infer::get(head)
        .map(|t| t.mime_type().to_string())
        .unwrap_or_else(|| "application/octet-stream".to_string())
}

/// True when the first bytes hold a NUL or invalid UTF-8 (an incomplete
/// sequence cut by the sniff window does not count).
pub(crate) fn looks_binary(head: &[u8]) -> bool {
    if memchr_nul(head) {
        return true;
    }
    match std::str::from_utf8(head) {
        Ok(_) => false,
        Err(e) => e.error_len().is_some(),
    }
}

fn memchr_nul(bytes: &[u8]) -> bool {
    bytes.contains(&0)
}

/// Width line numbers are right-aligned to (as `cat -n` does).
const LINE_NUMBER_WIDTH: usize = 6;

/// Appends `n`, right-aligned to [`LINE_NUMBER_WIDTH`], and a tab
/// (`format!("{n:>6}\t")` without the formatting machinery: this runs for
/// every line shown).
fn push_line_number(text: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let len = digits.len() - at;
    for _ in len..LINE_NUMBER_WIDTH {
        text.push(' ');
    }
    for &d in &digits[at..] {
        text.push(d as char);
    }
    text.push('\t');
}

/// Appended to a line that was cut while it was read (longer than what is
/// kept of a line in memory).
const LINE_CUT_MARK: &str = "… [line cut]";

fn scan(
    mut reader: Box<dyn Read + Send>,
    window: &Window,
    redactor: &Redactor,
) -> std::io::Result<Scan> {
    let mut hasher = Sha256::new();
    // Fill the sniff buffer first.
    let mut head = vec![0u8; BINARY_SNIFF_BYTES];
    let mut filled = 0;
    while filled < head.len() {
        let n = reader.read(&mut head[filled..])?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    head.truncate(filled);
    // A file that fit in the sniff window needs no second buffer (most
    // files an agent reads): reads then allocate 8 KiB, not 72 KiB.
    let more = filled == BINARY_SNIFF_BYTES;
    let mut buf = vec![0u8; if more { CHUNK_BYTES } else { 0 }];
    // The digest shown is of the redacted contents: hashed from what the
    // redacting stream gives, when there are secrets.
    let mut shown = ShownHasher::new(redactor);
    if looks_binary(&head) {
        hasher.update(&head);
        shown.push(&head);
        loop {
            let n = reader.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            shown.push(&buf[..n]);
        }
        shown.flush();
        let sha = hasher.finalize().into();
        return Ok(Scan {
            sha,
            shown: shown.finish(sha),
            binary: Some(media_type(&head)),
            text: String::new(),
            lines: Vec::new(),
            total_lines: 0,
            any_line_cut: false,
            stopped_at: None,
        });
    }
    let mut lines = LineCollector::new(window);
    // The lines are cut from redacted bytes, and the digest shown is theirs.
    let mut feed = |lines: &mut LineCollector<'_>, bytes: &[u8]| match shown.push(bytes) {
        Some(redacted) => lines.feed(&redacted),
        None => lines.feed(bytes),
    };
    hasher.update(&head);
    feed(&mut lines, &head);
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        feed(&mut lines, &buf[..n]);
    }
    if let Some(rest) = shown.flush() {
        lines.feed(&rest);
    }
    lines.finish();
    let sha = hasher.finalize().into();
    Ok(Scan {
        sha,
        shown: shown.finish(sha),
        binary: None,
        text: lines.text,
        lines: lines.kept,
        total_lines: lines.line_no - 1,
        any_line_cut: lines.any_cut,
        stopped_at: lines.stopped_at,
    })
}

/// Hashes a file's contents as shown: through a line-keeping redacting
/// stream when there are secrets, counting the bytes either way.
struct ShownHasher {
    /// The stream and a hasher of its output, when there are secrets.
    redacting: Option<(crate::output::StreamRedactor, Sha256)>,
    /// Bytes that came in.
    raw_size: u64,
    /// Bytes that came out (redacted).
    size: u64,
}

impl ShownHasher {
    fn new(redactor: &Redactor) -> ShownHasher {
        ShownHasher {
            redacting: (!redactor.is_empty()).then(|| (redactor.stream_lines(), Sha256::new())),
            raw_size: 0,
            size: 0,
        }
    }

    /// Takes `bytes`; returns what the redacting stream lets out of them
    /// (`None` without secrets: the bytes are shown as they are).
    fn push(&mut self, bytes: &[u8]) -> Option<Vec<u8>> {
        self.raw_size += bytes.len() as u64;
        let (stream, hasher) = self.redacting.as_mut()?;
        let out = stream.push(bytes);
        hasher.update(&out);
        self.size += out.len() as u64;
        Some(out)
    }

    /// What the redacting stream still holds back, at the end (call once).
    fn flush(&mut self) -> Option<Vec<u8>> {
        let (stream, hasher) = self.redacting.as_mut()?;
        let out = stream.finish();
        hasher.update(&out);
        self.size += out.len() as u64;
        Some(out)
    }

    /// The digest shown, `raw` being the sha256 of what came in (after
    /// [`flush`](Self::flush)).
    fn finish(self, raw: super::Sha) -> super::Shown {
        let unchanged = super::Shown {
            sha: raw,
            size: self.raw_size,
            redacted: false,
        };
        match self.redacting {
            Some((_, hasher)) => {
                let sha: super::Sha = hasher.finalize().into();
                if sha == raw {
                    unchanged
                } else {
                    super::Shown {
                        sha,
                        size: self.size,
                        redacted: true,
                    }
                }
            }
            None => unchanged,
        }
    }
}

/// Splits a byte stream into lines, keeping those in the window.
struct LineCollector<'w> {
    window: &'w Window,
    /// Number of the line being read (1-based).
    line_no: u64,
    /// Bytes of the current line kept so far (only in the window).
    current: Vec<u8>,
    /// Whether the current line has any bytes (for a last line without `\n`).
    current_started: bool,
    current_cut: bool,
    /// The kept lines' text, and (line number, range) of each: one buffer
    /// for the whole window rather than a string per line.
    text: String,
    kept: Vec<(u64, std::ops::Range<usize>)>,
    kept_bytes: usize,
    any_cut: bool,
    stopped_at: Option<u64>,
}

impl<'w> LineCollector<'w> {
    fn new(window: &'w Window) -> LineCollector<'w> {
        LineCollector {
            window,
            line_no: 1,
            current: Vec::new(),
            current_started: false,
            current_cut: false,
            text: String::new(),
            kept: Vec::new(),
            kept_bytes: 0,
            any_cut: false,
            stopped_at: None,
        }
    }

    fn in_window(&self) -> bool {
        self.stopped_at.is_none()
            && self.line_no >= self.window.offset
            && self.line_no < self.window.offset.saturating_add(self.window.limit)
    }

    /// Longest prefix of a line kept in memory: enough for the char cut.
    fn keep_cap(&self) -> usize {
        self.window.max_line_chars * 4 + 4
    }

    fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let (segment, ends_line) = match bytes.iter().position(|b| *b == b'\n') {
                Some(i) => (&bytes[..i], true),
                None => (bytes, false),
            };
            self.current_started = true;
            if self.in_window() {
                let room = self.keep_cap().saturating_sub(self.current.len());
                if segment.len() > room {
                    self.current_cut = true;
                }
                self.current
                    .extend_from_slice(&segment[..segment.len().min(room)]);
            }
            if ends_line {
                self.end_line();
                bytes = &bytes[segment.len() + 1..];
            } else {
                bytes = &[];
            }
        }
    }

    fn end_line(&mut self) {
        if self.in_window() {
            let mut raw = self.current.as_slice();
            if let [rest @ .., b'\r'] = raw {
                raw = rest;
            }
            let line = String::from_utf8_lossy(raw);
            // One character for one: the cut below counts the same chars.
            let line = neutralize_line(&line);
            let cut_here = line
                .char_indices()
                .nth(self.window.max_line_chars)
                .is_some();
            let shown = cut_line(&line, self.window.max_line_chars);
            let cut = self.current_cut || cut_here;
            let mark = if self.current_cut && !cut_here {
                LINE_CUT_MARK
            } else {
                ""
            };
            let len = shown.len() + mark.len();
            if self.kept_bytes + len + 1 > self.window.max_bytes && !self.kept.is_empty() {
                self.stopped_at = Some(self.line_no);
            } else {
                self.kept_bytes += len + 1;
                self.any_cut |= cut;
                let start = self.text.len();
                self.text.push_str(&shown);
                self.text.push_str(mark);
                self.kept.push((self.line_no, start..self.text.len()));
            }
        }
        self.current.clear();
        self.current_cut = false;
        self.current_started = false;
        self.line_no += 1;
    }

    fn finish(&mut self) {
        if self.current_started {
            self.end_line();
        }
    }
}

fn render(path: &WorkspacePath, scan: Scan, window: &Window) -> Result<ToolOutput<Output>> {
    if let Some(media_type) = scan.binary {
        let text = format!(
            "`{path}` is a binary file ({media_type}, {} bytes, sha256 {}{}); its content is not \
             shown. Use view_file for images.",
            thousands(scan.shown.size),
            hex(&scan.shown.sha),
            if scan.shown.redacted {
                ", both of its contents with secrets redacted"
            } else {
                ""
            }
        );
        return Ok(ToolOutput::ok(
            text,
            Output {
                path: path.display(),
                content: None,
                start_line: 0,
                end_line: 0,
                total_lines: 0,
                truncated: false,
                next_offset: None,
                sha256: hex(&scan.shown.sha),
                size: scan.shown.size,
                redacted: scan.shown.redacted,
                binary: true,
                media_type: Some(media_type),
            },
        ));
    }
    if scan.total_lines > 0 && window.offset > scan.total_lines {
        return Err(Error::invalid_input(format!(
            "offset {} is past the end of `{path}`, which has {} lines; pass an offset from 1 to {}",
            window.offset, scan.total_lines, scan.total_lines
        )));
    }
    let start_line = scan.lines.first().map_or(0, |l| l.0);
    let end_line = scan.lines.last().map_or(0, |l| l.0);
    let more = end_line < scan.total_lines;
    let next_offset = more.then_some(end_line + 1);
    let truncated = more || scan.any_line_cut;
    let mut text = String::with_capacity(scan.text.len() + scan.lines.len() * 8 + 128);
    let mut content = String::with_capacity(scan.text.len() + scan.lines.len());
    for (n, range) in &scan.lines {
        let line = &scan.text[range.clone()];
        push_line_number(&mut text, *n);
        text.push_str(line);
        text.push('\n');
        content.push_str(line);
        content.push('\n');
    }
    if scan.total_lines == 0 {
        text.push_str(&format!("(`{path}` is empty)\n"));
    } else if let Some(next) = next_offset {
        let why = if scan.stopped_at.is_some() {
            " (the 50 KiB window is full)"
        } else {
            ""
        };
        text.push_str(&format!(
            "[showing lines {start_line}-{end_line} of {}{why}; call read_file with offset={next} to read on]\n",
            scan.total_lines
        ));
    } else if scan.any_line_cut {
        text.push_str(&format!(
            "[some long lines were cut; use {} to see specific text]\n",
            super::search::Search::NAME
        ));
    }
    Ok(ToolOutput::ok(
        text,
        Output {
            path: path.display(),
            content: Some(content),
            start_line,
            end_line,
            total_lines: scan.total_lines,
            truncated,
            next_offset,
            sha256: hex(&scan.shown.sha),
            size: scan.shown.size,
            redacted: scan.shown.redacted,
            binary: false,
            media_type: None,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(offset: u64, limit: u64) -> Window {
        Window {
            offset,
            limit,
            max_bytes: 50 * 1024,
            max_line_chars: 2000,
        }
    }

    fn kept(s: &Scan) -> Vec<(u64, &str)> {
        s.lines
            .iter()
            .map(|(n, r)| (*n, &s.text[r.clone()]))
            .collect()
    }

    fn lines_of(bytes: &[u8], w: &Window) -> Scan {
        // Feed in awkward chunk sizes to exercise the splitter.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = self.0.len().min(buf.len()).min(7);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let owned: &'static [u8] = Box::leak(bytes.to_vec().into_boxed_slice());
        scan(Box::new(Trickle(owned)), w, &Redactor::default()).unwrap()
    }

    #[test]
    fn counts_lines_with_and_without_trailing_newline() {
        assert_eq!(lines_of(b"a\nb\n", &window(1, 10)).total_lines, 2);
        assert_eq!(lines_of(b"a\nb", &window(1, 10)).total_lines, 2);
        assert_eq!(lines_of(b"", &window(1, 10)).total_lines, 0);
        assert_eq!(lines_of(b"\n", &window(1, 10)).total_lines, 1);
    }

    #[test]
    fn keeps_the_window_and_strips_cr() {
        let s = lines_of(b"one\r\ntwo\r\nthree\r\nfour", &window(2, 2));
        assert_eq!(kept(&s), vec![(2, "two"), (3, "three")]);
        assert_eq!(s.total_lines, 4);
    }

    #[test]
    fn cuts_long_lines_and_stops_at_the_byte_budget() {
        let long = "x".repeat(5000);
        let s = lines_of(format!("{long}\nshort\n").as_bytes(), &window(1, 10));
        assert!(s.any_line_cut);
        assert!(kept(&s)[0].1.ends_with("[line cut at 2000 chars]"));
        let many = "y".repeat(1000) + "\n";
        let s = lines_of(many.repeat(100).as_bytes(), &window(1, 2000));
        assert_eq!(s.stopped_at, Some(52));
        assert_eq!(s.lines.len(), 51);
    }

    #[test]
    fn line_numbers_are_right_aligned_like_format() {
        for n in [0, 1, 9, 10, 99_999, 999_999, 1_000_000, u64::MAX] {
            let mut s = String::new();
            push_line_number(&mut s, n);
            assert_eq!(s, format!("{n:>6}\t"));
        }
    }

    #[test]
    fn binary_detection() {
        assert!(looks_binary(b"ab\0cd"));
        assert!(looks_binary(b"\xff\xfe text"));
        assert!(!looks_binary("héllo".as_bytes()));
        // A multi-byte character cut by the sniff window is still text.
        assert!(!looks_binary(&"é".as_bytes()[..1]));
        assert_eq!(media_type(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"), "image/png");
    }
}
