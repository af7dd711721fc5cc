//! Output shaping: the one choke point every byte passes before it leaves.
//!
//! The order is fixed: strip ANSI escapes, then redact secrets, then cap.
//! Stripping first means an escape sequence placed inside a secret cannot
//! hide it from the redactor; redacting before any cut means a line, window
//! or output cut at a limit never shows a part of a secret (SPEC §2).
//! [`Toolset::call`](crate::Toolset::call) applies
//! [`Redactor::redact_output`] and then [`neutralize_output`] to every result
//! (text and structured value); streaming producers (commands) use
//! [`StreamRedactor`] and [`AnsiStripper`], which keep just enough state to
//! be correct across chunk boundaries, and [`HeadTail`], which keeps memory
//! bounded however much is written.
//!
//! Cuts made while a tool builds its result (a long line, an echoed
//! argument, a capped diff) happen before the final redaction, so every
//! cutting helper ([`cap_head_tail`], `cut_line`, `truncate_for_message`)
//! first redacts with the redactor of the call in progress: the toolset
//! enters a [`CallScope`] on the thread that runs the call, and code that
//! hands work to other threads carries it over with [`CallScope::current`].

use std::collections::VecDeque;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use serde_json::Value;

use crate::error::Error;

/// An image a tool returns (MCP image content).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageData {
    /// `image/png`, `image/jpeg`, …
    pub media_type: String,
    /// The encoded image.
    pub bytes: Vec<u8>,
}

/// A published file (an artifact, SPEC §5.1; made by `crate::artifact`).
#[derive(
    Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct FileRef {
    /// Lower-case hex sha256 of the bytes.
    pub sha256: String,
    /// The artifact's name in its run (NFC, one component).
    pub name: String,
    /// The normalized media type.
    pub media_type: String,
    /// Size in bytes.
    pub size: u64,
    /// `cubby://artifacts/<sha256>/<percent-encoded name>`.
    pub uri: String,
    /// Where the same bytes sit in the sandbox, when they do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// Something a result carries beside its text: an image (`view_file`, an
/// image artifact) or an artifact (a link to it). A front turns each into its own content block (not
/// `#[non_exhaustive]`: a new kind is a compile error in every front until
/// it says how to send it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attachment {
    /// An image the model sees (MCP image content).
    Image(ImageData),
    /// An artifact the result published (MCP `resource_link`).
    Artifact(FileRef),
}

/// What a tool returns: the text the model reads, the same facts as JSON
/// (typed as `T` inside a tool, a JSON value once it leaves one) and the
/// attachments. Built-in tools, every [`ToolSource`](crate::ToolSource)
/// and the [`Toolset`](crate::Toolset) return this one type.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolOutput<T = Value> {
    /// Model-facing text.
    pub text: String,
    /// The same facts as a JSON object (MCP `structuredContent`).
    pub structured: T,
    /// True for an `ERROR <kind>: …` result.
    pub is_error: bool,
    /// What the result carries beside its text, in order (`view_file`'s
    /// image).
    pub attachments: Vec<Attachment>,
}

impl<T> ToolOutput<T> {
    /// A successful result.
    pub fn ok(text: impl Into<String>, structured: T) -> ToolOutput<T> {
        ToolOutput {
            text: text.into(),
            structured,
            is_error: false,
            attachments: Vec::new(),
        }
    }

    /// The result with `attachment` added after the ones it has.
    #[must_use]
    pub fn with_attachment(mut self, attachment: Attachment) -> ToolOutput<T> {
        self.attachments.push(attachment);
        self
    }

    /// The images among the attachments, in order.
    pub fn images(&self) -> Vec<&ImageData> {
        self.attachments
            .iter()
            .filter_map(|a| match a {
                Attachment::Image(image) => Some(image),
                Attachment::Artifact(_) => None,
            })
            .collect()
    }

    /// The artifacts among the attachments, in order.
    pub fn artifacts(&self) -> Vec<&FileRef> {
        self.attachments
            .iter()
            .filter_map(|a| match a {
                Attachment::Artifact(file) => Some(file),
                Attachment::Image(_) => None,
            })
            .collect()
    }

    /// The result with its structured part changed by `f` (text, error flag
    /// and attachments kept).
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> ToolOutput<U> {
        ToolOutput {
            text: self.text,
            structured: f(self.structured),
            is_error: self.is_error,
            attachments: self.attachments,
        }
    }
}

impl ToolOutput {
    /// An error result: text `ERROR <kind>: <message>` and a structured
    /// `{"error": {"kind", "message"}}`.
    pub fn error(err: &Error) -> ToolOutput {
        ToolOutput {
            text: err.to_string(),
            structured: serde_json::json!({
                "error": { "kind": err.kind().as_str(), "message": err.message() }
            }),
            is_error: true,
            attachments: Vec::new(),
        }
    }
}

/// A secret: a name for the marker and the value to hide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Secret {
    /// Shown in the marker `[REDACTED:<name>]`.
    pub name: String,
    /// The value that must never leave.
    pub value: String,
}

/// Replaces secret values by `[REDACTED:<name>]`.
///
/// Matching is leftmost-longest over all values at once (Aho-Corasick), so
/// repeated and overlapping secrets are all covered: after redaction no
/// registered value occurs whole in the output.
#[derive(Clone, Default)]
pub struct Redactor {
    inner: Option<Arc<RedactorInner>>,
}

struct RedactorInner {
    automaton: AhoCorasick,
    markers: Vec<Vec<u8>>,
    values: Vec<Vec<u8>>,
    max_len: usize,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.inner.as_ref().map_or(0, |i| i.markers.len());
        write!(f, "Redactor({n} secrets)")
    }
}

impl Redactor {
    /// A redactor for `secrets`; empty values are ignored.
    ///
    /// # Errors
    ///
    /// `limit` when the secrets are too many or too large to compile into one
    /// automaton; cubby then refuses to start rather than leak.
    pub fn new(secrets: &[Secret]) -> Result<Redactor, Error> {
        let pairs: Vec<(&[u8], Vec<u8>)> = secrets
            .iter()
            .map(|s| {
                (
                    s.value.as_bytes(),
                    format!("[REDACTED:{}]", s.name).into_bytes(),
                )
            })
            .collect();
        Redactor::build(pairs)
    }

    /// A redactor that puts each pair's replacement in place of its value,
    /// with the same matching and streaming as [`Redactor::new`] (the
    /// egress proxy swaps an injected secret's value back to its
    /// placeholder with one). Empty values are ignored.
    ///
    /// # Errors
    ///
    /// As [`Redactor::new`].
    pub(crate) fn replacing(pairs: &[(&str, &str)]) -> Result<Redactor, Error> {
        Redactor::build(
            pairs
                .iter()
                .map(|(value, with)| (value.as_bytes(), with.as_bytes().to_vec()))
                .collect(),
        )
    }

    fn build(pairs: Vec<(&[u8], Vec<u8>)>) -> Result<Redactor, Error> {
        let pairs: Vec<(&[u8], Vec<u8>)> =
            pairs.into_iter().filter(|(v, _)| !v.is_empty()).collect();
        if pairs.is_empty() {
            return Ok(Redactor { inner: None });
        }
        let automaton = AhoCorasickBuilder::new()
            .match_kind(MatchKind::LeftmostLongest)
            .build(pairs.iter().map(|(v, _)| v))
            .map_err(|e| {
                Error::new(
                    crate::ErrorKind::Limit,
                    format!("the secrets cannot be compiled for redaction: {e}"),
                )
            })?;
        let max_len = pairs.iter().map(|(v, _)| v.len()).max().unwrap_or(0);
        let values = pairs.iter().map(|(v, _)| v.to_vec()).collect();
        let markers = pairs.into_iter().map(|(_, m)| m).collect();
        Ok(Redactor {
            inner: Some(Arc::new(RedactorInner {
                automaton,
                markers,
                values,
                max_len,
            })),
        })
    }

    /// True when there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.inner.is_none()
    }

    /// True when `b` holds a secret's value.
    pub fn finds(&self, b: &[u8]) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|inner| inner.automaton.is_match(b))
    }

    /// The length of the longest secret value, in bytes (0 when none): a
    /// window this long less one, kept across chunks, lets a scan of a
    /// stream find a value cut between two chunks.
    pub fn longest(&self) -> usize {
        self.inner.as_ref().map_or(0, |inner| inner.max_len)
    }

    /// Redacts a whole string.
    pub fn redact_str(&self, s: &str) -> String {
        match &self.inner {
            None => s.to_string(),
            Some(inner) => {
                let bytes = redact_all(inner, s.as_bytes(), false);
                String::from_utf8(bytes)
                    .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
            }
        }
    }

    /// Redacts bytes.
    pub fn redact_bytes(&self, b: &[u8]) -> Vec<u8> {
        match &self.inner {
            None => b.to_vec(),
            Some(inner) => redact_all(inner, b, false),
        }
    }

    /// Redacts bytes keeping their line structure: a secret that spans
    /// lines becomes its marker followed by the line feeds it held, so the
    /// lines after it keep their numbers (file contents shown by line).
    pub fn redact_lines<'b>(&self, b: &'b [u8]) -> std::borrow::Cow<'b, [u8]> {
        match &self.inner {
            Some(inner) if inner.automaton.is_match(b) => {
                std::borrow::Cow::Owned(redact_all(inner, b, true))
            }
            _ => std::borrow::Cow::Borrowed(b),
        }
    }

    /// Redacts every string (keys and values) of a JSON value in place.
    pub fn redact_value(&self, value: &mut Value) {
        if self.is_empty() {
            return;
        }
        match value {
            Value::String(s) => *s = self.redact_str(s),
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_value(v)),
            Value::Object(map) => {
                let old = std::mem::take(map);
                for (k, mut v) in old {
                    self.redact_value(&mut v);
                    map.insert(self.redact_str(&k), v);
                }
            }
            _ => {}
        }
    }

    /// Redacts a tool result: text and structured value.
    pub fn redact_output(&self, out: &mut ToolOutput) {
        if self.is_empty() {
            return;
        }
        out.text = self.redact_str(&out.text);
        self.redact_value(&mut out.structured);
        for attachment in &mut out.attachments {
            match attachment {
                Attachment::Image(image) => image.media_type = self.redact_str(&image.media_type),
                // Its name and type were checked for secrets when it was
                // published (a redacted URI would name nothing).
                Attachment::Artifact(_) => {}
            }
        }
    }

    /// `text` without a tail that is the beginning of a secret: what is
    /// left of a text cut at a limit (a download cap) before redaction could
    /// see the whole value. Redact first, then trim.
    pub fn trim_partial<'t>(&self, text: &'t str) -> &'t str {
        let Some(inner) = &self.inner else {
            return text;
        };
        let bytes = text.as_bytes();
        let from = bytes.len().saturating_sub(inner.max_len.saturating_sub(1));
        for start in from..bytes.len() {
            let tail = &bytes[start..];
            if text.is_char_boundary(start)
                && inner
                    .values
                    .iter()
                    .any(|v| v.len() > tail.len() && v.starts_with(tail))
            {
                return &text[..start];
            }
        }
        text
    }

    /// A streaming redactor sharing these secrets.
    pub fn stream(&self) -> StreamRedactor {
        StreamRedactor {
            redactor: self.clone(),
            pending: Vec::new(),
            keep_lines: false,
        }
    }

    /// A streaming redactor that keeps line structure (see
    /// [`Redactor::redact_lines`]).
    pub fn stream_lines(&self) -> StreamRedactor {
        StreamRedactor {
            keep_lines: true,
            ..self.stream()
        }
    }
}

fn redact_all(inner: &RedactorInner, b: &[u8], keep_lines: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len());
    let mut last = 0;
    for m in inner.automaton.find_iter(b) {
        out.extend_from_slice(&b[last..m.start()]);
        push_marker(
            inner,
            &mut out,
            m.pattern().as_usize(),
            &b[m.range()],
            keep_lines,
        );
        last = m.end();
    }
    out.extend_from_slice(&b[last..]);
    out
}

/// Appends the marker of secret `pattern` in place of `value`; with
/// `keep_lines`, also the line feeds the value held, so that line numbers
/// after it stay those of the original text.
fn push_marker(
    inner: &RedactorInner,
    out: &mut Vec<u8>,
    pattern: usize,
    value: &[u8],
    keep_lines: bool,
) {
    out.extend_from_slice(&inner.markers[pattern]);
    if keep_lines {
        let feeds = memchr::memchr_iter(b'\n', value).count();
        out.extend(std::iter::repeat_n(b'\n', feeds));
    }
}

/// Redacts a byte stream that arrives in chunks.
///
/// It holds back at most `longest secret - 1` bytes, so a value split across
/// two chunks (two reads of a pipe) is still caught. A match is committed only
/// when every secret that could start at its position fits in what has been
/// seen, so leftmost-longest decisions are never revised.
#[derive(Debug)]
pub struct StreamRedactor {
    redactor: Redactor,
    pending: Vec<u8>,
    keep_lines: bool,
}

/// Where the tail of `pending` that must wait for more bytes starts: the
/// first position whose rest is the beginning of a secret, not all of it
/// (at most the longest secret's length less one from the end); the length
/// of `pending` when no secret can begin in its tail. Everything before it
/// is decided now: a command's last line ("listening on :8000") is not
/// held back while the command waits (a fixed hold of the longest secret's
/// length kept it from `process_logs` and events until more output came).
fn held_from(inner: &RedactorInner, pending: &[u8]) -> usize {
    let from = pending
        .len()
        .saturating_sub(inner.max_len.saturating_sub(1));
    (from..pending.len())
        .find(|&at| {
            let tail = &pending[at..];
            inner
                .values
                .iter()
                .any(|v| v.len() > tail.len() && v.starts_with(tail))
        })
        .unwrap_or(pending.len())
}

impl StreamRedactor {
    /// Feeds a chunk; returns the bytes that are safe to emit now.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let Some(inner) = self.redactor.inner.clone() else {
            return chunk.to_vec();
        };
        self.pending.extend_from_slice(chunk);
        let limit = held_from(&inner, &self.pending);
        let mut out = Vec::with_capacity(self.pending.len());
        let mut last = 0;
        for m in inner.automaton.find_iter(&self.pending) {
            // A match starting at or after `limit` might still grow into a
            // longer secret with the next chunk: decide it later.
            if m.start() >= limit {
                break;
            }
            out.extend_from_slice(&self.pending[last..m.start()]);
            push_marker(
                &inner,
                &mut out,
                m.pattern().as_usize(),
                &self.pending[m.range()],
                self.keep_lines,
            );
            last = m.end();
        }
        let emit_to = limit.max(last);
        out.extend_from_slice(&self.pending[last..emit_to]);
        self.pending.drain(..emit_to);
        out
    }

    /// Ends the stream; returns whatever was held back, redacted.
    pub fn finish(&mut self) -> Vec<u8> {
        let rest = std::mem::take(&mut self.pending);
        match &self.redactor.inner {
            None => rest,
            Some(inner) => redact_all(inner, &rest, self.keep_lines),
        }
    }
}

/// A reader whose bytes come out redacted, keeping line structure (see
/// [`Redactor::redact_lines`]): file contents searched or shown by line.
pub struct RedactingReader<R> {
    inner: R,
    redactor: StreamRedactor,
    ready: Vec<u8>,
    at: usize,
    done: bool,
}

impl<R: std::io::Read> RedactingReader<R> {
    /// Wraps `inner`.
    pub fn new(inner: R, redactor: &Redactor) -> RedactingReader<R> {
        RedactingReader {
            inner,
            redactor: redactor.stream_lines(),
            ready: Vec::new(),
            at: 0,
            done: false,
        }
    }
}

impl<R: std::io::Read> std::io::Read for RedactingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut chunk = [0u8; 16 * 1024];
        while self.at == self.ready.len() {
            if self.done {
                return Ok(0);
            }
            let n = self.inner.read(&mut chunk)?;
            self.ready = if n == 0 {
                self.done = true;
                self.redactor.finish()
            } else {
                self.redactor.push(&chunk[..n])
            };
            self.at = 0;
        }
        let n = buf.len().min(self.ready.len() - self.at);
        buf[..n].copy_from_slice(&self.ready[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

thread_local! {
    static CALL_REDACTOR: std::cell::RefCell<Option<Redactor>> =
        const { std::cell::RefCell::new(None) };
}

/// The redactor of the tool call running on this thread, while it runs.
///
/// [`Toolset`](crate::Toolset) enters one around every call, so that the
/// helpers that cut text while a result is built ([`cap_head_tail`],
/// `cut_line`, `truncate_for_message`) redact first: a cut never leaves a
/// prefix of a secret that the final redaction could no longer recognise.
/// Work handed to another thread carries the scope with
/// [`CallScope::current`] and [`CallScope::enter`].
#[derive(Debug)]
pub struct CallScope {
    previous: Option<Redactor>,
}

impl CallScope {
    /// Makes `redactor` the current call's on this thread until the scope
    /// is dropped (scopes nest).
    pub fn enter(redactor: &Redactor) -> CallScope {
        let previous = CALL_REDACTOR.with(|r| r.replace(Some(redactor.clone())));
        CallScope { previous }
    }

    /// The current call's redactor on this thread (empty outside a call).
    pub fn current() -> Redactor {
        CALL_REDACTOR.with(|r| r.borrow().clone().unwrap_or_default())
    }
}

impl Drop for CallScope {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CALL_REDACTOR.with(|r| *r.borrow_mut() = previous);
    }
}

/// `text` redacted with the current call's redactor (see [`CallScope`]):
/// what every cut is made on.
pub(crate) fn redact_for_cut(text: &str) -> std::borrow::Cow<'_, str> {
    CALL_REDACTOR.with(|r| match &*r.borrow() {
        Some(redactor) if !redactor.is_empty() => {
            std::borrow::Cow::Owned(redactor.redact_str(text))
        }
        _ => std::borrow::Cow::Borrowed(text),
    })
}

/// `bytes` redacted with the current call's redactor (see [`CallScope`]).
pub(crate) fn redact_bytes_for_cut(bytes: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    CALL_REDACTOR.with(|r| match &*r.borrow() {
        Some(redactor) if !redactor.is_empty() => {
            std::borrow::Cow::Owned(redactor.redact_bytes(bytes))
        }
        _ => std::borrow::Cow::Borrowed(bytes),
    })
}

/// The character shown in place of a control character that could act on a
/// terminal: the Unicode control picture of a C0 control (`␛` for ESC) or of
/// DEL, U+FFFD for a C1 control. `None` for tab, line feed, carriage return
/// and every other character.
fn control_picture(c: char) -> Option<char> {
    match c {
        '\t' | '\n' | '\r' => None,
        '\u{0}'..='\u{1f}' => char::from_u32(0x2400 + c as u32),
        '\u{7f}' => Some('\u{2421}'),
        '\u{80}'..='\u{9f}' => Some('\u{fffd}'),
        _ => None,
    }
}

/// `text` with every control character that a terminal could act on (ESC
/// and the other C0 controls but tab, line feed and carriage return; DEL;
/// the C1 controls, U+0080–U+009F) replaced by a visible stand-in: the
/// Unicode control picture (`␛`, `␇`, `␡`) or U+FFFD for C1. No escape
/// sequence survives it. Borrowed when there is nothing to replace.
pub fn neutralize_controls(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(|c| control_picture(c).is_some()) {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(
        text.chars()
            .map(|c| control_picture(c).unwrap_or(c))
            .collect(),
    )
}

/// [`neutralize_controls`] for one line of a file's contents: a carriage
/// return inside a line is shown too (`␍`), since on a terminal it would
/// move back over what the line began with (`path:line:` in a search).
pub fn neutralize_line(line: &str) -> std::borrow::Cow<'_, str> {
    if !line.contains('\r') {
        return neutralize_controls(line);
    }
    std::borrow::Cow::Owned(
        line.chars()
            .map(|c| match c {
                '\r' => '\u{240d}',
                c => control_picture(c).unwrap_or(c),
            })
            .collect(),
    )
}

/// Applies [`neutralize_controls`] to a tool result: its text and every
/// string (keys and values) of its structured value. The last step of
/// every call: no escape sequence from a file, a name or a command reaches
/// a client or a terminal.
pub fn neutralize_output(out: &mut ToolOutput) {
    if let std::borrow::Cow::Owned(text) = neutralize_controls(&out.text) {
        out.text = text;
    }
    neutralize_value(&mut out.structured);
    for attachment in &mut out.attachments {
        match attachment {
            Attachment::Image(image) => {
                if let std::borrow::Cow::Owned(t) = neutralize_controls(&image.media_type) {
                    image.media_type = t;
                }
            }
            // Names hold no control characters (`artifact::name`), types
            // are normalized tokens.
            Attachment::Artifact(_) => {}
        }
    }
}

/// [`neutralize_controls`] for every string (keys and values) of `value`.
pub(crate) fn neutralize_value(value: &mut Value) {
    match value {
        Value::String(s) => {
            if let std::borrow::Cow::Owned(n) = neutralize_controls(s) {
                *s = n;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(neutralize_value),
        Value::Object(map) => {
            if map
                .keys()
                .any(|k| matches!(neutralize_controls(k), std::borrow::Cow::Owned(_)))
            {
                let old = std::mem::take(map);
                for (k, mut v) in old {
                    neutralize_value(&mut v);
                    map.insert(neutralize_controls(&k).into_owned(), v);
                }
            } else {
                map.values_mut().for_each(neutralize_value);
            }
        }
        _ => {}
    }
}

/// Removes ANSI escape sequences (CSI, OSC, DCS and two-byte escapes) from a
/// byte stream, keeping state across chunks.
#[derive(Debug, Default)]
pub struct AnsiStripper {
    state: AnsiState,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum AnsiState {
    #[default]
    Ground,
    Escape,
    Csi,
    /// OSC, DCS, SOS, PM, APC: ended by BEL or ESC `\`.
    String,
    StringEscape,
}

impl AnsiStripper {
    /// Strips one chunk.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(chunk.len());
        let mut rest = chunk;
        while !rest.is_empty() {
            if self.state == AnsiState::Ground {
                // Fast path: copy everything up to the next ESC at once.
                match memchr::memchr(0x1b, rest) {
                    None => {
                        out.extend_from_slice(rest);
                        break;
                    }
                    Some(i) => {
                        out.extend_from_slice(&rest[..i]);
                        rest = &rest[i..];
                    }
                }
            }
            let (&b, tail) = match rest.split_first() {
                Some(x) => x,
                None => break,
            };
            rest = tail;
            self.state = match self.state {
                AnsiState::Ground => {
                    if b == 0x1b {
                        AnsiState::Escape
                    } else if b == 0x9b {
                        // C1 CSI is only meaningful outside UTF-8 text;
                        // keep it as data since 0x9b is a UTF-8 continuation byte.
                        out.push(b);
                        AnsiState::Ground
                    } else {
                        out.push(b);
                        AnsiState::Ground
                    }
                }
                AnsiState::Escape => match b {
                    b'[' => AnsiState::Csi,
                    b']' | b'P' | b'X' | b'^' | b'_' => AnsiState::String,
                    // An intermediate byte: keep consuming the escape.
                    0x20..=0x2f => AnsiState::Escape,
                    _ => AnsiState::Ground,
                },
                AnsiState::Csi => match b {
                    0x40..=0x7e => AnsiState::Ground,
                    _ => AnsiState::Csi,
                },
                AnsiState::String => match b {
                    0x07 => AnsiState::Ground,
                    0x1b => AnsiState::StringEscape,
                    _ => AnsiState::String,
                },
                AnsiState::StringEscape => match b {
                    b'\\' => AnsiState::Ground,
                    0x1b => AnsiState::StringEscape,
                    _ => AnsiState::String,
                },
            };
        }
        out
    }
}

/// Strips ANSI escapes from a whole string.
pub fn strip_ansi(s: &str) -> String {
    let bytes = AnsiStripper::default().push(s.as_bytes());
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Keeps the first `head` and the last `tail` bytes of a stream, counting
/// what falls between: memory stays bounded however much is pushed.
#[derive(Debug)]
pub struct HeadTail {
    head_cap: usize,
    tail_cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl HeadTail {
    /// A capture of at most `max_bytes`, split evenly between head and tail.
    pub fn new(max_bytes: usize) -> HeadTail {
        let head_cap = max_bytes / 2;
        HeadTail::with_split(head_cap, max_bytes - head_cap)
    }

    /// A capture keeping `head` bytes from the start and `tail` from the end.
    pub fn with_split(head: usize, tail: usize) -> HeadTail {
        HeadTail {
            head_cap: head,
            tail_cap: tail,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
        }
    }

    /// Appends bytes.
    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        if self.head.len() < self.head_cap {
            let take = (self.head_cap - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        if self.tail_cap == 0 || bytes.is_empty() {
            return;
        }
        if bytes.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_cap..]);
            return;
        }
        let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.tail_cap);
        self.tail.drain(..overflow);
        self.tail.extend(bytes);
    }

    /// Bytes pushed so far.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Bytes dropped between head and tail.
    pub fn cut(&self) -> u64 {
        self.total - self.head.len() as u64 - self.tail.len() as u64
    }

    /// Renders head, marker (when something was cut) and tail as text; the
    /// marker is produced by `marker(cut_bytes)`.
    pub fn render(&self, marker: impl FnOnce(u64) -> String) -> String {
        let mut out = String::from_utf8_lossy(&self.head).into_owned();
        let cut = self.cut();
        if cut > 0 {
            if !out.ends_with('\n') && !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&marker(cut));
            out.push('\n');
        }
        let (a, b) = self.tail.as_slices();
        let mut tail = a.to_vec();
        tail.extend_from_slice(b);
        out.push_str(&String::from_utf8_lossy(&tail));
        out
    }
}

/// Caps `text` at `max_bytes` as head plus tail with one marker between.
///
/// The text is redacted first with the current call's redactor (see
/// [`CallScope`]), so the cut never leaves a part of a secret.
pub fn cap_head_tail(text: &str, max_bytes: usize, marker: impl FnOnce(u64) -> String) -> String {
    let text = redact_for_cut(text);
    if text.len() <= max_bytes {
        return text.into_owned();
    }
    let mut capture = HeadTail::new(max_bytes);
    capture.push(text.as_bytes());
    capture.render(marker)
}

/// Formats a count with thousands separators (`12,345`).
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Most characters of an input echoed in a message.
pub(crate) const MAX_ECHO_CHARS: usize = 200;

/// Keeps messages short when the input was huge.
///
/// The input is redacted first with the current call's redactor
/// ([`crate::output::CallScope`]): the cut never shows a prefix of a secret
/// that the redaction of the whole message could no longer recognise.
pub(crate) fn truncate_for_message(s: &str) -> String {
    let s = redact_for_cut(s);
    match s.char_indices().nth(MAX_ECHO_CHARS) {
        None => s.into_owned(),
        Some((at, _)) => format!("{}…", &s[..at]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separates() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
    }

    fn secrets(pairs: &[(&str, &str)]) -> Redactor {
        Redactor::new(
            &pairs
                .iter()
                .map(|(n, v)| Secret {
                    name: n.to_string(),
                    value: v.to_string(),
                })
                .collect::<Vec<_>>(),
        )
        .unwrap()
    }

    #[test]
    fn redacts_repeated_and_adjacent_values() {
        let r = secrets(&[("TOKEN", "s3cr3t")]);
        assert_eq!(
            r.redact_str("a s3cr3ts3cr3t b s3cr3t"),
            "a [REDACTED:TOKEN][REDACTED:TOKEN] b [REDACTED:TOKEN]"
        );
    }

    #[test]
    fn overlapping_secrets_never_survive_whole() {
        let r = secrets(&[("A", "abcd"), ("B", "cdef"), ("C", "bc")]);
        for text in ["abcdef", "xxcdefabcd", "bcdef", "abcabcdcdefef"] {
            let out = r.redact_str(text);
            for v in ["abcd", "cdef", "bc"] {
                assert!(!out.contains(v), "{text} -> {out}");
            }
        }
    }

    #[test]
    fn stream_catches_values_split_at_every_position() {
        let r = secrets(&[("K", "0123456789"), ("S", "345")]);
        let text = b"before 0123456789 mid 345 0123456789after 01234 end";
        let whole = r.redact_bytes(text);
        for split in 0..=text.len() {
            for split2 in split..=text.len() {
                let mut s = r.stream();
                let mut out = s.push(&text[..split]);
                out.extend(s.push(&text[split..split2]));
                out.extend(s.push(&text[split2..]));
                out.extend(s.finish());
                assert_eq!(out, whole, "split at {split}/{split2}");
            }
        }
    }

    /// Only a tail that may begin a secret waits for more bytes: a line
    /// that cannot is out at once (it waited for the longest secret's
    /// length of further output, which a command waiting after its last
    /// line never gave: seen failing, nothing came out).
    #[test]
    fn stream_holds_back_only_what_may_begin_a_secret() {
        let r = secrets(&[("K", "tok-5150-zyxw")]);
        let mut s = r.stream();
        assert_eq!(s.push(b"listening on :8000\n"), b"listening on :8000\n");
        assert_eq!(s.push(b"half tok-51"), b"half ");
        assert_eq!(s.push(b"50"), b"");
        assert_eq!(s.push(b"-zyxw, then t"), b"[REDACTED:K], then ");
        assert_eq!(s.push(b"ail"), b"tail");
        assert_eq!(s.finish(), b"");
    }

    #[test]
    fn stream_byte_by_byte_matches_whole() {
        let r = secrets(&[("K", "hunter2"), ("L", "hunter22long")]);
        let text = b"hunter2 hunter22long hunter22 xhunter2hunter22longz";
        let mut s = r.stream();
        let mut out = Vec::new();
        for b in text {
            out.extend(s.push(std::slice::from_ref(b)));
        }
        out.extend(s.finish());
        assert_eq!(out, r.redact_bytes(text));
        assert!(!String::from_utf8_lossy(&out).contains("hunter2"));
    }

    #[test]
    fn redacts_json_keys_and_values() {
        let r = secrets(&[("T", "tok")]);
        let mut v = serde_json::json!({"tok.txt": ["a tok b", {"x": "tok"}], "n": 1});
        r.redact_value(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"[REDACTED:T].txt": ["a [REDACTED:T] b", {"x": "[REDACTED:T]"}], "n": 1})
        );
    }

    #[test]
    fn strips_ansi_across_chunks() {
        let input = b"\x1b[31mred\x1b[0m \x1b]0;title\x07ok \x1b]8;;http://x\x1b\\link\x1b(B!";
        let mut whole = AnsiStripper::default();
        assert_eq!(whole.push(input), b"red ok link!");
        for split in 0..input.len() {
            let mut s = AnsiStripper::default();
            let mut out = s.push(&input[..split]);
            out.extend(s.push(&input[split..]));
            assert_eq!(out, b"red ok link!", "split {split}");
        }
    }

    #[test]
    fn ansi_inside_a_secret_does_not_hide_it() {
        let r = secrets(&[("T", "topsecret")]);
        let shown = r.redact_str(&strip_ansi("top\x1b[1msecret"));
        assert_eq!(shown, "[REDACTED:T]");
    }

    #[test]
    fn head_tail_keeps_bounded_memory_and_counts() {
        let mut c = HeadTail::new(10);
        for _ in 0..1000 {
            c.push(b"0123456789");
        }
        assert_eq!(c.total(), 10_000);
        assert_eq!(c.cut(), 9_990);
        assert!(c.tail.len() <= 5 && c.head.len() <= 5);
        let text = c.render(|n| format!("[{n} bytes cut]"));
        assert_eq!(text, "01234\n[9990 bytes cut]\n56789");
    }

    #[test]
    fn line_keeping_redaction_keeps_line_numbers_across_chunks() {
        let r = secrets(&[(
            "PEM",
            "-----BEGIN KEY-----\nMIIEab\ncd==\n-----END KEY-----",
        )]);
        let text = b"one\n-----BEGIN KEY-----\nMIIEab\ncd==\n-----END KEY-----\nafter\n";
        let whole = r.redact_lines(text).into_owned();
        assert_eq!(whole, b"one\n[REDACTED:PEM]\n\n\n\nafter\n");
        for split in 0..=text.len() {
            let mut s = r.stream_lines();
            let mut out = s.push(&text[..split]);
            out.extend(s.push(&text[split..]));
            out.extend(s.finish());
            assert_eq!(out, whole, "split at {split}");
        }
        let mut read = Vec::new();
        std::io::Read::read_to_end(&mut RedactingReader::new(&text[..], &r), &mut read).unwrap();
        assert_eq!(read, whole);
    }

    #[test]
    fn cuts_redact_with_the_scope_of_the_call() {
        let text = format!("{}abcdefgh{}", "x".repeat(46), "y".repeat(100));
        // Without the scope (no secrets known), the cut shows the prefix.
        let bare = cap_head_tail(&text, 100, |n| format!("[{n} cut]"));
        assert!(bare.contains("abcd"), "{bare}");
        let r = secrets(&[("K", "abcdefgh")]);
        let _scope = CallScope::enter(&r);
        let capped = cap_head_tail(&text, 100, |n| format!("[{n} cut]"));
        assert!(!capped.contains("abcd"), "{capped}");
        assert!(
            capped.contains("[REDACTED:K]") || capped.contains("[RED"),
            "{capped}"
        );
        drop(_scope);
        assert!(CallScope::current().is_empty());
    }

    #[test]
    fn trims_a_tail_that_begins_a_secret() {
        let r = secrets(&[("K", "abcdefgh")]);
        assert_eq!(r.trim_partial("text abcd"), "text ");
        assert_eq!(r.trim_partial("text a"), "text ");
        assert_eq!(r.trim_partial("text [REDACTED:K]"), "text [REDACTED:K]");
        assert_eq!(r.trim_partial("text abcx"), "text abcx");
        assert_eq!(Redactor::default().trim_partial("abcd"), "abcd");
    }

    #[test]
    fn neutralizes_controls_but_tab_newline_and_cr() {
        let out = neutralize_controls("a\x1b]0;x\x07b\tc\r\nd\u{9b}e\x7f\x08");
        assert_eq!(
            out,
            "a\u{241b}]0;x\u{2407}b\tc\r\nd\u{fffd}e\u{2421}\u{2408}"
        );
        assert!(matches!(
            neutralize_controls("plain é\t\n"),
            std::borrow::Cow::Borrowed(_)
        ));
        let mut o = ToolOutput::ok(
            "x\x1b[31m",
            serde_json::json!({"k\x1b": ["\x1b[0m"], "n": 1}),
        );
        neutralize_output(&mut o);
        assert_eq!(o.text, "x\u{241b}[31m");
        assert_eq!(
            o.structured,
            serde_json::json!({"k\u{241b}": ["\u{241b}[0m"], "n": 1})
        );
    }

    #[test]
    fn cap_leaves_short_text_alone() {
        assert_eq!(cap_head_tail("abc", 10, |_| unreachable!()), "abc");
        let capped = cap_head_tail(&"x".repeat(100), 20, |n| format!("[{n} cut]"));
        assert!(capped.contains("[80 cut]"));
    }
}
