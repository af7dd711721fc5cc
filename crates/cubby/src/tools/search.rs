//! `search`: ripgrep's searcher over the confined walk, in parallel.
//!
//! The walk lists candidate files (same rules as `glob`); worker threads then
//! open each through the provider (so the kernel confines every open) and run
//! `grep-searcher` on it. Binary files (a NUL byte) are skipped. Every match
//! is counted, but only the first `max_matches` in path order are kept in
//! memory, so a query that matches everywhere stays bounded.
//!
//! Files are searched redacted (a secret that spans lines keeps its line
//! feeds, so line numbers stay true): a secret is never matched, shown in
//! part by the 500-char line cut, or shown a line at a time. Lines are shown
//! with control characters as their control pictures (`␛`), like `read_file`.

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, mpsc};

use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::find::{NameFilter, start_dir};
use super::walk::{Flow, Unseen, Walk};
use super::{Ctx, READ_ONLY, Tool, cut_line, pattern_error, thousands};
use crate::config::SEARCH_MAX_CONTEXT;
use crate::error::{Error, Result};
use crate::output::ToolOutput;
use crate::output::{CallScope, RedactingReader, Redactor, neutralize_line};
use crate::path::WorkspacePath;
use crate::sandbox::{EntryKind, FileSystem};

/// Longest query accepted, in bytes.
pub const MAX_QUERY_BYTES: usize = 10_000;
/// Characters of a matching line shown.
pub const SEARCH_MAX_LINE_CHARS: usize = 500;
/// Most worker threads.
const MAX_THREADS: usize = 8;

/// Arguments of `search`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// Text to find (a literal string unless `regex` is true).
    pub query: String,
    /// File or directory to search, relative to the workspace root (default: the root).
    #[serde(default)]
    pub path: Option<String>,
    /// Only files matching this glob; without `/` it matches file names at any depth (e.g. `*.rs`).
    #[serde(default)]
    pub glob: Option<String>,
    /// Treat `query` as a regular expression (Rust regex syntax; default false).
    #[serde(default)]
    pub regex: Option<bool>,
    /// Ignore case (default false).
    #[serde(default)]
    pub case_insensitive: Option<bool>,
    /// Lines of context before and after each match (default 0, at most 10).
    #[serde(default)]
    pub context: Option<u64>,
}

/// One line of a search result.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Hit {
    /// File path relative to the workspace root.
    pub path: String,
    /// 1-based line number.
    pub line: u64,
    /// The line's text.
    pub text: String,
    /// False for a context line.
    pub is_match: bool,
}

/// Result of `search`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Output {
    /// Matching (and context) lines, in path and line order.
    pub matches: Vec<Hit>,
    /// Matching lines in all.
    pub total: u64,
    /// True when `matches` was capped.
    pub truncated: bool,
    /// Files searched.
    pub files_searched: u64,
    /// What the walk did not enter, and why (absent when it saw everything).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unseen: Option<Unseen>,
}

/// The `search` tool.
pub struct Search;

impl Tool for Search {
    const NAME: &'static str = "search";
    const FACTS: super::ToolFacts = super::reads_files(super::Cost::Short);
    fn description(d: &super::Describe<'_>) -> String {
        format!(
            "Search the contents of the sandboxed workspace's files (literal text by default, \
             or a regex); {} search tool and to grep. Returns `path:line: text` per matching \
             line (`path-line- text` for context lines), in path order, at most {} lines, with \
             the total count; `context` adds up to {} lines around each match. A path holding \
             `:` (with context, `-<digits>-`), a control character, `\"` or `\\` is shown in \
             double quotes, escaped as git quotes paths. Narrow with `path` and `glob`. \
             .gitignore is respected; binary files are skipped.",
            super::PREFER,
            super::thousands(d.limits.search.max_matches as u64),
            crate::config::SEARCH_MAX_CONTEXT,
        )
    }
    const ANNOTATIONS: super::Annotations = READ_ONLY;
    type Params = Params;
    type Output = Output;

    fn call(ctx: &Ctx<'_>, params: Params) -> Result<ToolOutput<Output>> {
        if params.query.is_empty() {
            return Err(Error::invalid_input(
                "`query` is empty; pass the text to find",
            ));
        }
        if params.query.len() > MAX_QUERY_BYTES {
            return Err(Error::invalid_input(format!(
                "`query` is {} bytes, the limit is {MAX_QUERY_BYTES}; search for a shorter, distinctive part",
                params.query.len()
            )));
        }
        let regex = params.regex.unwrap_or(false);
        let matcher = RegexMatcherBuilder::new()
            .case_insensitive(params.case_insensitive.unwrap_or(false))
            .fixed_strings(!regex)
            .line_terminator(Some(b'\n'))
            .build(&params.query)
            .map_err(|e| pattern_error(if regex { "regex" } else { "query" }, &params.query, e))?;
        let filter = params.glob.as_deref().map(NameFilter::new).transpose()?;
        let context = params.context.unwrap_or(0).min(SEARCH_MAX_CONTEXT as u64) as usize;
        let cap = ctx.limits.search.max_matches;

        let target = super::parse_dir_arg(params.path.as_deref())?;
        ctx.policy.check_read(&target)?;
        let found = match ctx.fs.metadata(&target)?.kind {
            EntryKind::File => {
                search_files(ctx.fs, ctx.redactor, 1, &matcher, context, cap, |add| {
                    add(target);
                    Ok(Unseen::default())
                })?
            }
            _ => {
                let start = start_dir(ctx, params.path.as_deref())?;
                let threads = std::thread::available_parallelism()
                    .map_or(1, |n| n.get())
                    .min(MAX_THREADS);
                // The walk feeds the workers as it goes: searching starts
                // with the first file, not after the last directory is read.
                search_files(
                    ctx.fs,
                    ctx.redactor,
                    threads,
                    &matcher,
                    context,
                    cap,
                    |add| {
                        Walk::new(ctx.fs, ctx.policy).run(&start, &mut |v| {
                            if v.kind == EntryKind::File
                                && filter.as_ref().is_none_or(|f| f.matches(v.path))
                            {
                                add(v.path.clone());
                            }
                            Flow::Continue
                        })
                    },
                )?
            }
        };
        let files_searched = found.files;
        let (text, out) = render(&params.query, found, cap, files_searched);
        Ok(ToolOutput::ok(text, out))
    }
}

struct Found {
    /// Kept hits per file index, pruned to about `cap` matches.
    kept: BTreeMap<usize, Vec<Hit>>,
    total: u64,
    /// Files searched.
    files: u64,
    /// What the walk did not see.
    unseen: Unseen,
}

/// Searches the files `feed` hands to `add`, in path order, on `threads`
/// workers that start while `feed` is still running. A file's index is its
/// place in that order, so the result does not depend on timing.
fn search_files(
    fs: &dyn FileSystem,
    redactor: &Redactor,
    threads: usize,
    matcher: &RegexMatcher,
    context: usize,
    cap: usize,
    feed: impl FnOnce(&mut dyn FnMut(WorkspacePath)) -> Result<Unseen>,
) -> Result<Found> {
    let (tx, rx) = mpsc::channel::<(usize, WorkspacePath)>();
    let rx = Mutex::new(rx);
    let total = AtomicU64::new(0);
    let kept: Mutex<BTreeMap<usize, Vec<Hit>>> = Mutex::new(BTreeMap::new());
    let keep = Keep {
        cap,
        context: context > 0,
    };
    let worker = || {
        let _scope = CallScope::enter(redactor);
        let mut searcher = SearcherBuilder::new()
            .binary_detection(BinaryDetection::quit(b'\x00'))
            .line_number(true)
            .before_context(context)
            .after_context(context)
            .build();
        let mut buf = Vec::new();
        loop {
            let Ok(next) = rx.lock().map(|rx| rx.recv()) else {
                break;
            };
            let Ok((i, path)) = next else { break };
            let Some((hits, matched)) =
                search_one(fs, redactor, &path, matcher, &mut searcher, &mut buf, keep)
            else {
                continue;
            };
            if matched == 0 {
                continue;
            }
            total.fetch_add(matched, Ordering::Relaxed);
            if let Ok(mut kept) = kept.lock() {
                kept.insert(i, hits);
                prune(&mut kept, cap);
            }
        }
    };
    let mut files = 0usize;
    let feed_all = move |files: &mut usize| {
        let fed = feed(&mut |path| {
            // The receiver outlives the workers: a send cannot fail.
            let _ = tx.send((*files, path));
            *files += 1;
        });
        // Closing the channel lets the workers finish.
        drop(tx);
        fed
    };
    let fed = if threads <= 1 {
        let fed = feed_all(&mut files);
        worker();
        fed
    } else {
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(worker);
            }
            feed_all(&mut files)
        })
    };
    let unseen = fed?;
    Ok(Found {
        kept: kept.into_inner().unwrap_or_default(),
        total: total.into_inner(),
        files: files as u64,
        unseen,
    })
}

/// Drops the last files while the ones before them already hold `cap`
/// matches: those files could never be shown.
fn prune(kept: &mut BTreeMap<usize, Vec<Hit>>, cap: usize) {
    loop {
        let Some((&last, _)) = kept.last_key_value() else {
            return;
        };
        let before: usize = kept
            .range(..last)
            .map(|(_, hits)| hits.iter().filter(|h| h.is_match).count())
            .sum();
        if before >= cap {
            kept.remove(&last);
        } else {
            return;
        }
    }
}

/// Files up to this size are read whole into the worker's buffer and
/// searched as one slice: no line counting past the last match, no BOM peek
/// read. It is the searcher's own buffer size, and a slice's binary check
/// covers its first 64 KiB, so every byte is checked for NUL, exactly as when
/// streaming: both ways give the same result.
const SLICE_MAX: usize = 64 * 1024;

/// What [`search_one`] keeps of a file's hits.
#[derive(Clone, Copy)]
struct Keep {
    /// Most matches kept.
    cap: usize,
    /// Whether context lines are shown.
    context: bool,
}

/// Searches one file; `None` when it cannot be opened or read, or is binary.
fn search_one(
    fs: &dyn FileSystem,
    redactor: &Redactor,
    path: &WorkspacePath,
    matcher: &RegexMatcher,
    searcher: &mut Searcher,
    buf: &mut Vec<u8>,
    keep: Keep,
) -> Option<(Vec<Hit>, u64)> {
    let Keep { cap, context } = keep;
    let mut file = fs.open(path).ok()?;
    let mut sink = Collect {
        path,
        context,
        shown: None,
        hits: Vec::new(),
        matched: 0,
        kept_matches: 0,
        cap,
        binary: false,
    };
    // The file is searched redacted: what a match shows is cut from
    // redacted text, and a secret is never matched.
    let redacting = !redactor.is_empty();
    if file.metadata.size <= SLICE_MAX as u64 {
        match read_small(&mut file.reader, buf)? {
            Some(len) if redacting => searcher
                .search_slice(matcher, &redactor.redact_lines(&buf[..len]), &mut sink)
                .ok()?,
            Some(len) => searcher
                .search_slice(matcher, &buf[..len], &mut sink)
                .ok()?,
            // It grew while being read: stream what was read, then the rest.
            None => {
                let rest = io::Read::chain(&buf[..], file.reader);
                if redacting {
                    let rest = RedactingReader::new(rest, redactor);
                    searcher.search_reader(matcher, rest, &mut sink).ok()?
                } else {
                    searcher.search_reader(matcher, rest, &mut sink).ok()?
                }
            }
        }
    } else if redacting {
        let reader = RedactingReader::new(file.reader, redactor);
        searcher.search_reader(matcher, reader, &mut sink).ok()?;
    } else {
        searcher
            .search_reader(matcher, file.reader, &mut sink)
            .ok()?;
    }
    if sink.binary {
        return None;
    }
    Some((sink.hits, sink.matched))
}

/// Reads to the end into `buf` (kept at `SLICE_MAX + 1` bytes between files):
/// `Some(len)`, or `Some(None)` when there are more than `SLICE_MAX` bytes
/// (`buf` then holds the first `SLICE_MAX + 1`); `None` on a read error.
fn read_small(reader: &mut dyn io::Read, buf: &mut Vec<u8>) -> Option<Option<usize>> {
    if buf.len() != SLICE_MAX + 1 {
        buf.resize(SLICE_MAX + 1, 0);
    }
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => return Some(Some(filled)),
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(None)
}

struct Collect<'p> {
    path: &'p WorkspacePath,
    /// Whether context lines are shown (`path` is then quoted when it
    /// holds `-<digits>-` too).
    context: bool,
    /// `path` as shown, made at the first hit.
    shown: Option<String>,
    hits: Vec<Hit>,
    matched: u64,
    kept_matches: usize,
    cap: usize,
    binary: bool,
}

fn line_text(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = neutralize_line(text.trim_end_matches(['\n', '\r']));
    cut_line(&text, SEARCH_MAX_LINE_CHARS).into_owned()
}

impl Collect<'_> {
    fn shown(&mut self) -> String {
        self.shown
            .get_or_insert_with(|| self.path.display_for_hits(self.context))
            .clone()
    }
}

impl Sink for Collect<'_> {
    type Error = io::Error;

    fn matched(&mut self, _: &Searcher, m: &SinkMatch<'_>) -> Result<bool, io::Error> {
        self.matched += 1;
        if self.kept_matches < self.cap {
            self.kept_matches += 1;
            let path = self.shown();
            self.hits.push(Hit {
                path,
                line: m.line_number().unwrap_or(0),
                text: line_text(m.bytes()),
                is_match: true,
            });
        }
        Ok(true)
    }

    fn context(&mut self, _: &Searcher, c: &SinkContext<'_>) -> Result<bool, io::Error> {
        if self.kept_matches < self.cap || matches!(c.kind(), grep_searcher::SinkContextKind::After)
        {
            let path = self.shown();
            self.hits.push(Hit {
                path,
                line: c.line_number().unwrap_or(0),
                text: line_text(c.bytes()),
                is_match: false,
            });
        }
        Ok(true)
    }

    fn binary_data(&mut self, _: &Searcher, _offset: u64) -> Result<bool, io::Error> {
        self.binary = true;
        Ok(false)
    }
}

fn render(query: &str, found: Found, cap: usize, files_searched: u64) -> (String, Output) {
    let mut matches: Vec<Hit> = Vec::new();
    let mut shown = 0usize;
    'files: for hits in found.kept.into_values() {
        for hit in hits {
            if shown == cap {
                // Past the cap only the after-context of the last match stays.
                let follows = matches
                    .last()
                    .is_some_and(|l| l.path == hit.path && hit.line == l.line + 1);
                if hit.is_match || !follows {
                    break 'files;
                }
            } else if hit.is_match {
                shown += 1;
            }
            matches.push(hit);
        }
    }
    let truncated = found.total > shown as u64;
    let unseen = found.unseen;
    let mut text = String::new();
    let mut prev: Option<(&str, u64)> = None;
    let with_context = matches.iter().any(|x| !x.is_match);
    for h in &matches {
        if let Some((p, l)) = prev
            && with_context
            && (p != h.path || h.line != l + 1)
        {
            text.push_str("--\n");
        }
        let sep = if h.is_match { ':' } else { '-' };
        text.push_str(&format!("{}{sep}{}{sep} {}\n", h.path, h.line, h.text));
        prev = Some((&h.path, h.line));
    }
    if found.total == 0 {
        text = format!(
            "No matches for `{}` in {} files.",
            crate::output::truncate_for_message(query),
            thousands(files_searched)
        );
    } else if truncated {
        text.push_str(&format!(
            "[showing {} of {} matching lines; narrow with `path` or `glob`, or a more specific query]",
            thousands(shown as u64),
            thousands(found.total)
        ));
    } else {
        text.push_str(&format!(
            "[{} matching line{}]",
            thousands(found.total),
            if found.total == 1 { "" } else { "s" }
        ));
    }
    if let Some(note) = unseen.note() {
        text.push('\n');
        text.push_str(&note);
    }
    (
        text,
        Output {
            matches,
            total: found.total,
            truncated,
            files_searched,
            unseen: unseen.into_option(),
        },
    )
}
