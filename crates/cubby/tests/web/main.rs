//! `web_fetch` and `web_search` against servers this file starts on
//! 127.0.0.1 and stops itself: never the internet.
//!
//! Names (`allowed.test`, `sub.allowed.test`, `evil.test`, …) reach the test
//! server through a resolver hook, and only because the toolset lists
//! `127.0.0.0/8` in `allowed_cidrs`: the first tests show that without it the
//! same servers are refused. The search backends are tested against local
//! fakes of the Brave and SearXNG JSON APIs.
//!
//! The server and the fakes are shared fixtures (`tests/common/http.rs`,
//! `tests/common/search.rs`); `fetch.rs` holds `web_fetch`'s cases (policy,
//! addresses, domain lists, redirects, time, contents, bad input) and
//! `search.rs` `web_search`'s.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;
mod fetch;
mod search;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::Pinned;
use common::http::{Reply, Server, page, redirect};
use common::search::{brave_answer, searxng_answer};
use cubby::config::{NetworkConfig, SearchBackendKind, WebSearchConfig};
use cubby::process::CancelToken;
use cubby::web::{BraveSearch, SearchBackend, SearxngSearch};
use cubby::{CallOptions, Limits, MemoryFs, Policy, ToolOutput, Toolset, ToolsetBuilder};
use serde_json::json;

fn pinned() -> Arc<Pinned> {
    let lo: IpAddr = "127.0.0.1".parse().unwrap();
    let mut names = HashMap::new();
    for name in [
        "allowed.test",
        "sub.allowed.test",
        "deep.sub.allowed.test",
        "notallowed.test",
        "evil.test",
        "sub.evil.test",
        "other.test",
    ] {
        names.insert(name, vec![lo]);
    }
    names.insert("mapped.test", vec!["::ffff:127.0.0.1".parse().unwrap()]);
    names.insert("mixed.test", vec![lo, "127.0.0.2".parse().unwrap()]);
    names.insert("loop2.test", vec!["127.0.0.2".parse().unwrap()]);
    Arc::new(Pinned::new(names))
}

fn net(allowed: &[&str], denied: &[&str], cidrs: &[&str]) -> NetworkConfig {
    NetworkConfig {
        allowed_domains: allowed.iter().map(|s| s.to_string()).collect(),
        denied_domains: denied.iter().map(|s| s.to_string()).collect(),
        allowed_cidrs: cidrs.iter().map(|s| s.to_string()).collect(),
        ..NetworkConfig::default()
    }
}

/// The loopback range the test servers live in.
const LOOPBACK: &[&str] = &["127.0.0.0/8"];

fn builder() -> ToolsetBuilder {
    builder_of(Policy::builder().allow(["web_fetch", "web_search"]))
}

fn builder_of(policy: &mut cubby::PolicyBuilder) -> ToolsetBuilder {
    Toolset::builder(cubby::virtual_sandbox(MemoryFs::new()))
        .policy(policy.build().unwrap())
        .track_changes(false)
}

/// [`builder`] with these `[network]` rules.
fn net_builder(network: NetworkConfig) -> ToolsetBuilder {
    builder_of(
        Policy::builder()
            .allow(["web_fetch", "web_search"])
            .network(network),
    )
}

/// [`net_builder`] with these limits.
fn net_builder_with(network: NetworkConfig, limits: Limits) -> ToolsetBuilder {
    builder_of(
        Policy::builder()
            .allow(["web_fetch", "web_search"])
            .network(network)
            .limits(limits),
    )
}

fn fetcher(network: NetworkConfig) -> Toolset {
    net_builder(network).resolver(pinned()).build().unwrap()
}

fn fetcher_with(network: NetworkConfig, limits: Limits) -> Toolset {
    net_builder_with(network, limits)
        .resolver(pinned())
        .build()
        .unwrap()
}

fn fetch(t: &Toolset, url: &str) -> ToolOutput {
    t.call("web_fetch", json!({ "url": url }))
}

/// The error kind of a result, or "ok".
fn kind(out: &ToolOutput) -> String {
    if out.is_error {
        out.structured["error"]["kind"]
            .as_str()
            .unwrap()
            .to_string()
    } else {
        "ok".to_string()
    }
}

fn expect_kind(out: &ToolOutput, want: &str) {
    assert_eq!(kind(out), want, "{}", out.text);
}

const HTML_PAGE: &str = "<!doctype html><html><head><title>T</title>\
    <script>var secret=1</script><style>body{}</style></head><body><h1>Title</h1>\
    <p>Some <b>bold</b> and a <a href=\"https://example.org/x\">link</a>.</p>\
    <ul><li>one</li><li>two</li></ul></body></html>";

/// A server with the routes most tests use.
fn site() -> Server {
    Server::start(|req, port| {
        let path = req.path();
        match path {
            "/" | "/landing" => page(200, "text/html", "<h1>Landing</h1><p>hello</p>"),
            "/html" => page(200, "text/html; charset=utf-8", HTML_PAGE),
            "/json" => page(200, "application/json", "{\"a\": [1, 2, 3]}\n"),
            "/latin1" => page(200, "text/plain; charset=iso-8859-1", b"caf\xe9\n".to_vec()),
            "/notype" => Reply::Full {
                status: 200,
                headers: vec![],
                body: b"<!DOCTYPE html><html><body><h2>Sniffed</h2></body></html>".to_vec(),
            },
            "/png" => page(
                200,
                "image/png",
                [&b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"[..], &[0u8; 64][..]].concat(),
            ),
            "/disguised" => page(200, "text/plain", b"GIF89a\0\0\x01\x02".to_vec()),
            "/missing" => page(404, "text/html", "<h1>Not here</h1>"),
            "/long" => page(200, "text/plain", "0123456789".repeat(3_000)),
            "/huge" => Reply::Stream {
                content_type: "text/html",
                total: 64 * 1024 * 1024,
            },
            "/slow" => Reply::Hang,
            "/to-evil" => redirect(302, format!("http://evil.test:{port}/landing")),
            "/to-sub" => redirect(301, format!("http://sub.allowed.test:{port}/landing")),
            "/to-loop2" => redirect(307, format!("http://127.0.0.2:{port}/landing")),
            "/to-loop2-name" => redirect(308, format!("http://loop2.test:{port}/landing")),
            "/to-mapped" => redirect(302, format!("http://mapped.test:{port}/landing")),
            "/to-file" => redirect(302, "file:///etc/passwd".to_string()),
            "/to-userinfo" => {
                redirect(302, format!("http://allowed.test@evil.test:{port}/landing"))
            }
            "/to-ftp" => redirect(303, format!("ftp://allowed.test:{port}/")),
            "/relative" => redirect(302, "/landing".to_string()),
            p if p.starts_with("/chain/") => {
                let n: u32 = p["/chain/".len()..].parse().unwrap();
                if n == 0 {
                    page(200, "text/plain", "end of chain")
                } else {
                    redirect(302, format!("/chain/{}", n - 1))
                }
            }
            _ => page(404, "text/plain", "no such route"),
        }
    })
}
