//! `web_fetch` and `web_search` (SPEC §3 "Web"): host-side, off unless the
//! policy's `allow` names them, held to the `[network]` rules.
//!
//! Guards, in order: the toolset has network rules (`unsupported`), the
//! argument (`invalid_input`), the domain lists (`denied`), then the work:
//! resolution and address checks (`network`), the request under the time
//! limit (`timeout`) and cancellation. The machinery lives in `crate::web`.

use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::read::{looks_binary, media_type};
use super::{Annotations, Ctx, Tool, thousands};
use crate::error::{Error, ErrorKind, Result};
use crate::output::ToolOutput;
use crate::output::truncate_for_message;
use crate::process::CancelToken;
use crate::web::{self, Fetched, SearchHit, WebUrl};

/// Longest `web_search` query, in chars (SPEC §3).
pub(crate) const MAX_QUERY_CHARS: usize = 2_000;
/// Bytes of a body inspected to tell text from binary.
const SNIFF_BYTES: usize = 8 * 1024;
/// Least time HTML conversion gets, even when the request used up the limit.
const MIN_CONVERT_TIME: Duration = Duration::from_secs(1);
/// Chars of a search result's title.
const MAX_TITLE_CHARS: usize = 200;
/// Hits asked of a backend: more than shown, so that filtering leaves enough.
const BACKEND_HITS: usize = 20;

/// Annotations of the web tools: they change nothing, and reach the world.
const WEB: Annotations = Annotations {
    read_only: true,
    destructive: false,
    idempotent: false,
    open_world: true,
};

/// Arguments of `web_fetch`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FetchParams {
    /// The page to fetch: an absolute http:// or https:// URL of at most
    /// 2,048 characters, e.g. `https://docs.rs/serde/latest/serde/`.
    pub url: String,
}

/// Result of `web_fetch`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FetchOutput {
    /// The URL asked for.
    pub url: String,
    /// The URL the content came from, after redirects.
    pub final_url: String,
    /// The URLs redirected from, in order.
    pub redirects: Vec<String>,
    /// The HTTP status code.
    pub status: u16,
    /// The `Content-Type` header, when there was one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// The media type the content was handled as (declared or sniffed).
    pub media_type: String,
    /// Bytes of body read.
    pub bytes: u64,
    /// False when the body was longer than the download cap and cut.
    pub body_complete: bool,
    /// True for binary content (not shown).
    pub binary: bool,
    /// The content as text (Markdown for HTML), cut to the output limit;
    /// absent for binary content.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Chars of the whole text before the cut.
    pub total_chars: u64,
    /// True when the text was cut (or the HTML only partly converted).
    pub truncated: bool,
}

/// The `web_fetch` tool.
pub struct WebFetch;

impl Tool for WebFetch {
    const NAME: &'static str = "web_fetch";
    const FACTS: super::ToolFacts = super::WEB;
    fn description(d: &super::Describe<'_>) -> String {
        let l = &d.limits.web_fetch;
        format!(
            "Fetch one web page (http or https) and return it as text, HTML converted to \
             Markdown; use it to read documentation or a page a search found. One request, \
             redirects followed (at most {}), {} limit, at most {} chars of text and {} of body \
             read; binary files give metadata only. The configured domain lists decide which \
             hosts are reachable; private and loopback addresses are refused unless the \
             configuration allows them.",
            crate::config::WEB_FETCH_MAX_REDIRECTS,
            super::millis(l.timeout_ms),
            super::thousands(l.max_output_chars as u64),
            super::size(l.max_body_bytes as u64),
        )
    }
    const ANNOTATIONS: Annotations = WEB;
    type Params = FetchParams;
    type Output = FetchOutput;

    fn call(ctx: &Ctx<'_>, params: FetchParams) -> Result<ToolOutput<FetchOutput>> {
        let rules = ctx.web.rules(Self::NAME)?;
        let url = WebUrl::parse(&params.url)?;
        rules.check_host(url.host())?;
        let limits = &ctx.limits.web_fetch;
        let started = Instant::now();
        let timeout = Duration::from_millis(limits.timeout_ms);
        let resolver = ctx.web.resolver.clone();
        let target = url.clone();
        let fetched = web::block_on_bounded(
            timeout,
            ctx.cancel,
            || {
                Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "{} did not answer within {:.1} s; try again later or use another source",
                        truncate_for_message(url.as_str()),
                        timeout.as_secs_f64()
                    ),
                )
            },
            move || web::fetch(target, rules, resolver, limits.max_body_bytes),
        )?;
        let deadline = (started + timeout).max(Instant::now() + MIN_CONVERT_TIME);
        let mut page = to_text(&fetched, deadline, ctx.cancel)?;
        // Redaction before any cut: the text is redacted whole, and what a
        // download cap or a stopped conversion cut mid-secret is dropped.
        if let Some(text) = page.text.as_mut() {
            let redacted = ctx.redactor.redact_str(text);
            let cut_short = !fetched.complete || page.partial_html.is_some();
            *text = if cut_short {
                ctx.redactor.trim_partial(&redacted).to_string()
            } else {
                redacted
            };
        }
        if is_cancelled(ctx.cancel) {
            return Err(Error::new(
                ErrorKind::Network,
                "the call was cancelled; the request was aborted",
            ));
        }
        let (text, out) = render_fetch(&params.url, fetched, page, limits.max_output_chars);
        Ok(ToolOutput::ok(text, out))
    }
}

fn is_cancelled(cancel: Option<&CancelToken>) -> bool {
    cancel.is_some_and(CancelToken::is_cancelled)
}

/// A response body as the model will see it.
struct Page {
    media_type: String,
    /// `None` for binary content.
    text: Option<String>,
    /// Bytes of HTML converted, of how many, when conversion stopped early.
    partial_html: Option<(usize, usize)>,
}

/// The essence of a `Content-Type` (`text/html`) and its `charset`.
fn split_content_type(content_type: Option<&str>) -> (String, Option<String>) {
    let Some(ct) = content_type else {
        return (String::new(), None);
    };
    let mut parts = ct.split(';');
    let essence = parts.next().unwrap_or("").trim().to_ascii_lowercase();
    let charset = parts.find_map(|p| {
        let (key, value) = p.split_once('=')?;
        key.trim()
            .eq_ignore_ascii_case("charset")
            .then(|| value.trim().trim_matches('"').to_string())
    });
    (essence, charset)
}

fn is_html_type(essence: &str) -> bool {
    matches!(essence, "text/html" | "application/xhtml+xml")
}

fn is_text_type(essence: &str) -> bool {
    essence.starts_with("text/")
        || essence.ends_with("+json")
        || essence.ends_with("+xml")
        || matches!(
            essence,
            "application/json"
                | "application/xml"
                | "application/javascript"
                | "application/ecmascript"
                | "application/x-javascript"
                | "application/toml"
                | "application/yaml"
                | "application/x-yaml"
                | "application/x-sh"
                | "application/sql"
                | "application/graphql"
                | "application/x-ndjson"
        )
}

/// Decides text, HTML or binary, and converts.
///
/// A declared text type is trusted unless the body holds a NUL byte; any
/// other type (or none) is judged from the bytes, as `read_file` does.
fn to_text(fetched: &Fetched, deadline: Instant, cancel: Option<&CancelToken>) -> Result<Page> {
    let (essence, charset) = split_content_type(fetched.content_type.as_deref());
    let body = &fetched.body;
    let head = &body[..body.len().min(SNIFF_BYTES)];
    let declared_text = is_html_type(&essence) || is_text_type(&essence);
    let binary = if declared_text {
        memchr::memchr(0, head).is_some()
    } else {
        looks_binary(head)
    };
    if binary {
        let sniffed = media_type(head);
        let media_type = if sniffed == "application/octet-stream" && !essence.is_empty() {
            essence
        } else {
            sniffed
        };
        return Ok(Page {
            media_type,
            text: None,
            partial_html: None,
        });
    }
    let html = is_html_type(&essence) || (!declared_text && web::sniff_html(body));
    let decoded = web::decode(body, charset.as_deref(), html);
    let media_type = match (html, essence.is_empty() || !declared_text) {
        (true, true) => "text/html".to_string(),
        (false, true) => "text/plain".to_string(),
        (_, false) => essence,
    };
    if !html {
        return Ok(Page {
            media_type,
            text: Some(decoded),
            partial_html: None,
        });
    }
    let total = decoded.len();
    let stop = move || is_cancelled(cancel);
    let converted = web::to_markdown(decoded, deadline, &stop)?;
    Ok(Page {
        media_type,
        text: Some(converted.text.trim().to_string()),
        partial_html: (converted.parsed_bytes < total).then_some((converted.parsed_bytes, total)),
    })
}

/// The first `max` chars of `s`.
fn take_chars(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

fn render_fetch(
    asked: &str,
    fetched: Fetched,
    page: Page,
    max_chars: usize,
) -> (String, FetchOutput) {
    let bytes = fetched.body.len() as u64;
    let size = if fetched.complete {
        format!("{} bytes", thousands(bytes))
    } else {
        format!("first {} bytes of a longer body", thousands(bytes))
    };
    let mut header = format!(
        "{} {} {} ({}, {size})",
        fetched.status,
        fetched.reason,
        truncate_for_message(fetched.final_url.as_str()),
        truncate_for_message(&page.media_type),
    );
    if let Some(first) = fetched.redirects.first() {
        let n = fetched.redirects.len();
        header.push_str(&format!(
            "\nredirected {n} time{} from {}",
            if n == 1 { "" } else { "s" },
            truncate_for_message(first)
        ));
    }
    if let Some((done, total)) = page.partial_html {
        header.push_str(&format!(
            "\n[the HTML was too slow to convert whole: {} of {} bytes converted]",
            thousands(done as u64),
            thousands(total as u64)
        ));
    }
    let (text, content, total_chars, cut) = match &page.text {
        None => (
            format!(
                "{header}\n\nbinary content ({}), not shown",
                page.media_type
            ),
            None,
            0,
            false,
        ),
        Some(t) if t.trim().is_empty() => (
            format!("{header}\n\n(no text content)"),
            Some(String::new()),
            0,
            false,
        ),
        Some(t) => {
            let total = t.chars().count();
            let header_chars = header.chars().count() + 2;
            if header_chars + total <= max_chars {
                (format!("{header}\n\n{t}"), Some(t.clone()), total, false)
            } else {
                let note = |shown: usize| {
                    format!(
                        "\n\n[content cut at {} of {} chars: web_fetch shows at most {} chars \
                         of a page]",
                        thousands(shown as u64),
                        thousands(total as u64),
                        thousands(max_chars as u64)
                    )
                };
                let reserve = note(total).chars().count();
                let room = max_chars.saturating_sub(header_chars + reserve);
                let shown = take_chars(t, room);
                let shown_chars = shown.chars().count();
                (
                    format!("{header}\n\n{shown}{}", note(shown_chars)),
                    Some(shown.to_string()),
                    total,
                    true,
                )
            }
        }
    };
    let output = FetchOutput {
        url: asked.to_string(),
        final_url: fetched.final_url.to_string(),
        redirects: fetched.redirects,
        status: fetched.status,
        content_type: fetched.content_type,
        media_type: page.media_type,
        bytes,
        body_complete: fetched.complete,
        binary: page.text.is_none(),
        content,
        total_chars: total_chars as u64,
        truncated: cut || page.partial_html.is_some(),
    };
    (text, output)
}

/// Arguments of `web_search`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchParams {
    /// What to search the web for, in words (at most 2,000 characters).
    pub query: String,
}

/// One result shown by `web_search`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SearchResult {
    /// The page title, as plain text.
    pub title: String,
    /// The page URL (pass it to web_fetch to read the page).
    pub url: String,
    /// A short extract, as plain text, cut to the per-result limit.
    pub snippet: String,
}

/// Result of `web_search`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SearchOutput {
    /// The query searched.
    pub query: String,
    /// The backend that answered (`brave`, `searxng`).
    pub backend: String,
    /// The results shown, best first.
    pub results: Vec<SearchResult>,
    /// Results removed because the domain lists do not allow their host.
    pub filtered: u64,
    /// Results removed because their URL is not a usable http(s) URL (or
    /// repeats an earlier one).
    pub dropped: u64,
    /// True when results or text were cut to the limits.
    pub truncated: bool,
}

/// The `web_search` tool.
pub struct WebSearch;

impl Tool for WebSearch {
    const NAME: &'static str = "web_search";
    const FACTS: super::ToolFacts = super::WEB;
    fn description(d: &super::Describe<'_>) -> String {
        let l = &d.limits.web_search;
        format!(
            "Search the web through the configured search backend; use it to find pages{}. \
             Returns up to {} results (title, URL, snippet), at most {} chars each and {} in \
             all, {} limit; results on hosts the domain lists do not allow are removed.",
            d.mention(WebFetch::NAME, |fetch| format!(
                ", then read one with {fetch}"
            )),
            l.max_results,
            super::thousands(l.max_result_chars as u64),
            super::thousands(l.max_output_chars as u64),
            super::millis(l.timeout_ms),
        )
    }
    const ANNOTATIONS: Annotations = WEB;
    type Params = SearchParams;
    type Output = SearchOutput;

    fn call(ctx: &Ctx<'_>, params: SearchParams) -> Result<ToolOutput<SearchOutput>> {
        let rules = ctx.web.rules(Self::NAME)?;
        let backend = ctx.web.search.as_ref().map_err(|why| {
            Error::new(
                ErrorKind::Unsupported,
                format!("web_search is not available: {why}"),
            )
        })?;
        let query = params.query.trim();
        if query.is_empty() {
            return Err(Error::invalid_input(
                "the query is empty; pass the words to search for",
            ));
        }
        let chars = query.chars().count();
        if chars > MAX_QUERY_CHARS {
            return Err(Error::invalid_input(format!(
                "the query is {} chars, the limit is {}; shorten it",
                thousands(chars as u64),
                thousands(MAX_QUERY_CHARS as u64)
            )));
        }
        let limits = &ctx.limits.web_search;
        let timeout = Duration::from_millis(limits.timeout_ms);
        let name = backend.name().to_string();
        let hits = web::block_on_bounded(
            timeout,
            ctx.cancel,
            || {
                Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "the {name} search backend did not answer within {:.1} s; try again later",
                        timeout.as_secs_f64()
                    ),
                )
            },
            || backend.search(query, BACKEND_HITS.max(limits.max_results)),
        )?;
        // Redaction before the title and snippet cuts.
        let hits = hits
            .into_iter()
            .map(|h| SearchHit {
                title: ctx.redactor.redact_str(&h.title),
                url: h.url,
                snippet: ctx.redactor.redact_str(&h.snippet),
            })
            .collect();
        let (text, out) = render_search(query, backend.name(), hits, rules, limits);
        Ok(ToolOutput::ok(text, out))
    }
}

/// Filters hits through the domain lists and renders them within the limits.
fn render_search(
    query: &str,
    backend: &str,
    hits: Vec<SearchHit>,
    rules: &web::NetRules,
    limits: &crate::config::WebSearchLimits,
) -> (String, SearchOutput) {
    let mut filtered = 0u64;
    let mut dropped = 0u64;
    let mut seen = std::collections::HashSet::new();
    let mut kept = Vec::new();
    for hit in hits {
        let Ok(url) = WebUrl::parse(&hit.url) else {
            dropped += 1;
            continue;
        };
        if !rules.host_allowed(url.host()) {
            filtered += 1;
            continue;
        }
        if !seen.insert(url.as_str().to_string()) {
            dropped += 1;
            continue;
        }
        kept.push(hit);
    }
    let mut truncated = kept.len() > limits.max_results;
    kept.truncate(limits.max_results);

    let mut removed = String::new();
    if filtered > 0 {
        removed = format!(" ({filtered} removed by the domain lists)");
    }
    let shown_query = truncate_for_message(query);
    let mut results = Vec::new();
    let mut blocks = Vec::new();
    let header_for = |n: usize| {
        if n == 0 {
            format!("no results from {backend} for \"{shown_query}\"{removed}")
        } else {
            format!(
                "{n} result{} from {backend} for \"{shown_query}\"{removed}",
                if n == 1 { "" } else { "s" }
            )
        }
    };
    // Reserve room for the longest header this call can have.
    let mut room = limits
        .max_output_chars
        .saturating_sub(header_for(kept.len()).chars().count());
    for (i, hit) in kept.into_iter().enumerate() {
        let title_raw = take_chars(&hit.title, limits.max_result_chars);
        let title = web::fragment_text(title_raw);
        let title = take_chars(&title, MAX_TITLE_CHARS).to_string();
        let head = format!("{}. {title}\n   {}", i + 1, hit.url);
        let budget = limits.max_result_chars.min(room.saturating_sub(2));
        let head_chars = head.chars().count();
        if head_chars + 4 > budget {
            // No room for this result (a very long URL, or the total is spent).
            truncated = true;
            if budget == limits.max_result_chars {
                dropped += 1;
                continue;
            }
            break;
        }
        let snippet_raw = take_chars(&hit.snippet, 2 * limits.max_result_chars);
        let snippet_full = web::fragment_text(snippet_raw);
        let snippet_room = budget - head_chars - 4;
        let mut snippet = take_chars(&snippet_full, snippet_room).to_string();
        if snippet.len() < snippet_full.len() {
            snippet = take_chars(&snippet, snippet_room.saturating_sub(1)).to_string();
            snippet.push('…');
        }
        let block = if snippet.is_empty() {
            head
        } else {
            format!("{head}\n   {snippet}")
        };
        room = room.saturating_sub(block.chars().count() + 2);
        blocks.push(block);
        results.push(SearchResult {
            title,
            url: hit.url,
            snippet,
        });
    }
    let mut text = header_for(results.len());
    for block in &blocks {
        text.push_str("\n\n");
        text.push_str(block);
    }
    let output = SearchOutput {
        query: query.to_string(),
        backend: backend.to_string(),
        results,
        filtered,
        dropped,
        truncated,
    };
    (text, output)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{NetworkConfig, WebSearchLimits};

    fn hit(title: &str, url: &str, snippet: &str) -> SearchHit {
        SearchHit {
            title: title.into(),
            url: url.into(),
            snippet: snippet.into(),
        }
    }

    fn rules(denied: &[&str]) -> web::NetRules {
        web::NetRules::from_config(&NetworkConfig {
            denied_domains: denied.iter().map(|s| s.to_string()).collect(),
            ..NetworkConfig::default()
        })
        .unwrap()
    }

    #[test]
    fn content_types_are_classified() {
        assert_eq!(
            split_content_type(Some("Text/HTML; Charset=\"ISO-8859-1\"")),
            ("text/html".to_string(), Some("ISO-8859-1".to_string()))
        );
        assert!(is_text_type("application/ld+json"));
        assert!(is_text_type("image/svg+xml"));
        assert!(!is_text_type("application/pdf"));
        assert!(is_html_type("application/xhtml+xml"));
    }

    #[test]
    fn search_results_respect_every_limit() {
        let long = "word ".repeat(5_000);
        let hits: Vec<SearchHit> = (0..12)
            .map(|i| {
                hit(
                    &format!("T{i} {long}"),
                    &format!("https://site{i}.test/p"),
                    &long,
                )
            })
            .collect();
        let limits = WebSearchLimits::default();
        let (text, out) = render_search("q", "fake", hits, &rules(&[]), &limits);
        assert_eq!(out.results.len(), 5);
        assert!(out.truncated);
        assert!(
            text.chars().count() <= limits.max_output_chars,
            "{}",
            text.len()
        );
        for r in &out.results {
            let block = r.title.chars().count() + r.url.chars().count() + r.snippet.chars().count();
            assert!(block <= limits.max_result_chars, "{block}");
        }
    }

    #[test]
    fn search_results_are_filtered_and_deduplicated() {
        let hits = vec![
            hit("a", "https://ok.test/1", "x"),
            hit("b", "https://sub.evil.test/", "x"),
            hit("c", "ftp://ok.test/", "x"),
            hit("d", "https://ok.test/1", "x"),
            hit("e", "https://user@ok.test/", "x"),
        ];
        let (text, out) = render_search(
            "q",
            "fake",
            hits,
            &rules(&["evil.test"]),
            &WebSearchLimits::default(),
        );
        assert_eq!(out.results.len(), 1);
        assert_eq!(out.filtered, 1);
        assert_eq!(out.dropped, 3);
        assert!(
            text.starts_with("1 result from fake for \"q\" (1 removed by the domain lists)"),
            "{text}"
        );
    }
}
