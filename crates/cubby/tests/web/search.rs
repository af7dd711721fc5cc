//! `web_search` on the Brave and SearXNG backends: formats, limits,
//! filtering, errors, the key from the environment and its redaction.

use crate::*;

const EIGHT: [(&str, &str, &str); 8] = [
    (
        "Rust <b>Book</b>",
        "https://doc.rust-lang.org/book/",
        "The <strong>Rust</strong> Programming Language &amp; more",
    ),
    ("Evil", "https://evil.test/rust", "bad"),
    ("Docs", "https://docs.rs/serde", "Serde docs"),
    ("Sub evil", "https://sub.evil.test/x", "bad"),
    ("Blog", "https://blog.rust-lang.org/", "Rust blog"),
    (
        "Crates",
        "https://crates.io/crates/serde",
        "serde on crates.io",
    ),
    ("Users", "https://users.rust-lang.org/", "forum"),
    ("Reddit", "https://www.reddit.com/r/rust/", "subreddit"),
];

fn searcher(network: NetworkConfig, backend: Arc<dyn SearchBackend>) -> Toolset {
    net_builder(network)
        .search_backend(backend)
        .build()
        .unwrap()
}

fn search(t: &Toolset, query: &str) -> ToolOutput {
    t.call("web_search", json!({ "query": query }))
}

#[test]
fn brave_backend_reads_the_documented_format() {
    let server = Server::start(|req, _| {
        assert_eq!(req.path(), "/res/v1/web/search");
        if req.header("x-subscription-token") != Some("test-key") {
            return page(401, "application/json", "{\"type\":\"ErrorResponse\"}");
        }
        assert!(req.header("accept").unwrap().contains("application/json"));
        let q = req.query();
        assert_eq!(q["count"], "20");
        assert_eq!(q["q"], "rust serde & co");
        page(200, "application/json", brave_answer(&EIGHT))
    });
    let brave =
        BraveSearch::new(&server.url("127.0.0.1", "/res/v1/web/search"), "test-key").unwrap();
    // The backend's own endpoint is trusted config: no allowed_cidrs needed.
    let t = searcher(net(&[], &["evil.test"], &[]), Arc::new(brave));
    let out = search(&t, "rust serde & co");
    expect_kind(&out, "ok");
    let results = out.structured["results"].as_array().unwrap();
    assert_eq!(results.len(), 5, "{}", out.text);
    assert_eq!(out.structured["filtered"], 2);
    assert_eq!(out.structured["truncated"], true);
    assert_eq!(out.structured["backend"], "brave");
    let urls: Vec<&str> = results.iter().map(|r| r["url"].as_str().unwrap()).collect();
    assert_eq!(
        urls,
        [
            "https://doc.rust-lang.org/book/",
            "https://docs.rs/serde",
            "https://blog.rust-lang.org/",
            "https://crates.io/crates/serde",
            "https://users.rust-lang.org/",
        ]
    );
    assert_eq!(results[0]["title"], "Rust **Book**");
    assert_eq!(
        results[0]["snippet"],
        "The **Rust** Programming Language & more"
    );
    assert!(
        out.text.starts_with(
            "5 results from brave for \"rust serde & co\" (2 removed by the domain lists)\n\n\
             1. Rust **Book**\n   https://doc.rust-lang.org/book/\n   The **Rust**"
        ),
        "{}",
        out.text
    );
    assert!(!out.text.contains("evil.test"));

    // A wrong key: the backend's refusal, not a crash.
    let wrong = BraveSearch::new(&server.url("127.0.0.1", "/res/v1/web/search"), "nope").unwrap();
    let t = searcher(net(&[], &[], &[]), Arc::new(wrong));
    let out = search(&t, "rust");
    expect_kind(&out, "denied");
    assert!(out.text.contains("401"), "{}", out.text);
}

#[test]
fn searxng_backend_reads_the_documented_format() {
    let server = Server::start(|req, _| {
        assert_eq!(req.path(), "/searx/search");
        let q = req.query();
        assert_eq!(q["format"], "json");
        assert_eq!(q["q"], "tokio runtime");
        page(200, "application/json", searxng_answer(&EIGHT))
    });
    let searx = SearxngSearch::new(&server.url("127.0.0.1", "/searx")).unwrap();
    // Only rust-lang.org and its subdomains are allowed.
    let t = searcher(net(&["rust-lang.org"], &[], &[]), Arc::new(searx));
    let out = search(&t, "tokio runtime");
    expect_kind(&out, "ok");
    let results = out.structured["results"].as_array().unwrap();
    let urls: Vec<&str> = results.iter().map(|r| r["url"].as_str().unwrap()).collect();
    assert_eq!(
        urls,
        [
            "https://doc.rust-lang.org/book/",
            "https://blog.rust-lang.org/",
            "https://users.rust-lang.org/",
        ]
    );
    assert_eq!(out.structured["filtered"], 5);
    assert_eq!(out.structured["truncated"], false);
    assert_eq!(out.structured["backend"], "searxng");
    assert!(
        out.text.starts_with("3 results from searxng"),
        "{}",
        out.text
    );
}

#[test]
fn search_results_are_cut_to_the_limits() {
    let big = "lorem ipsum ".repeat(2_000);
    let server = Server::start(move |_, _| {
        let many: Vec<(String, String, String)> = (0..15)
            .map(|i| {
                (
                    format!("Title {i} {big}"),
                    format!("https://site{i}.test/page"),
                    big.clone(),
                )
            })
            .collect();
        let refs: Vec<(&str, &str, &str)> = many
            .iter()
            .map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str()))
            .collect();
        page(200, "application/json", searxng_answer(&refs))
    });
    let searx = SearxngSearch::new(&server.url("127.0.0.1", "")).unwrap();
    let t = searcher(NetworkConfig::default(), Arc::new(searx));
    let out = search(&t, "anything");
    expect_kind(&out, "ok");
    let results = out.structured["results"].as_array().unwrap();
    assert_eq!(results.len(), 5);
    assert!(
        out.text.chars().count() <= 10_000,
        "{}",
        out.text.chars().count()
    );
    for r in results {
        let chars: usize = ["title", "url", "snippet"]
            .iter()
            .map(|k| r[k].as_str().unwrap().chars().count())
            .sum();
        assert!(chars <= 2_000, "{chars}");
        assert!(r["snippet"].as_str().unwrap().ends_with('…'));
    }
    assert!(out.text.matches("\n\n").count() >= 5);

    // A smaller configured limit holds as well.
    let mut limits = Limits::default();
    limits.web_search.max_results = 2;
    limits.web_search.max_output_chars = 1_500;
    let searx = SearxngSearch::new(&server.url("127.0.0.1", "")).unwrap();
    let t = net_builder_with(NetworkConfig::default(), limits)
        .search_backend(Arc::new(searx))
        .build()
        .unwrap();
    let out = search(&t, "anything");
    expect_kind(&out, "ok");
    assert!(out.text.chars().count() <= 1_500);
    assert!(out.structured["results"].as_array().unwrap().len() <= 2);
}

#[test]
fn search_backend_failures_are_clear_errors() {
    let server = Server::start(|req, _| match req.query()["q"].as_str() {
        "limited" => page(429, "application/json", "{\"error\":\"rate\"}"),
        "broken" => page(500, "text/plain", "boom"),
        "garbage" => page(200, "application/json", "{not json"),
        "slow" => Reply::Hang,
        _ => page(200, "application/json", searxng_answer(&[])),
    });
    let mut limits = Limits::default();
    limits.web_search.timeout_ms = 500;
    let searx = SearxngSearch::new(&server.url("127.0.0.1", "")).unwrap();
    let t = net_builder_with(NetworkConfig::default(), limits)
        .search_backend(Arc::new(searx))
        .build()
        .unwrap();
    expect_kind(&search(&t, "limited"), "limit");
    let out = search(&t, "broken");
    expect_kind(&out, "network");
    assert!(out.text.contains("500"), "{}", out.text);
    expect_kind(&search(&t, "garbage"), "network");
    let started = Instant::now();
    expect_kind(&search(&t, "slow"), "timeout");
    assert!(started.elapsed() < Duration::from_secs(5));
    let out = search(&t, "nothing");
    expect_kind(&out, "ok");
    assert!(
        out.text.starts_with("no results from searxng"),
        "{}",
        out.text
    );
}

#[test]
fn search_input_and_configuration_are_checked() {
    let t = net_builder(NetworkConfig::default()).build().unwrap();
    let out = search(&t, "x");
    expect_kind(&out, "unsupported");
    assert!(out.text.contains("backend"), "{}", out.text);

    let searx = SearxngSearch::new("http://127.0.0.1:9").unwrap();
    let t = searcher(NetworkConfig::default(), Arc::new(searx));
    expect_kind(&search(&t, "   "), "invalid_input");
    let out = search(&t, &"q".repeat(2_001));
    expect_kind(&out, "invalid_input");
    assert!(out.text.contains("2,000"), "{}", out.text);
    expect_kind(
        &t.call("web_search", json!({"query": "x", "count": 3})),
        "invalid_input",
    );
}

#[test]
fn a_configured_brave_key_comes_from_the_environment_and_is_redacted() {
    // Cargo sets CARGO_MANIFEST_DIR for test processes: a real environment
    // variable this test can name without changing the environment.
    let key = env!("CARGO_MANIFEST_DIR");
    let server = Server::start(move |req, _| {
        let token = req.header("x-subscription-token").unwrap_or("").to_string();
        assert_eq!(token, key);
        // A backend that echoes the key: it must not reach the model.
        let title = format!("token was {token}");
        page(
            200,
            "application/json",
            brave_answer(&[(title.as_str(), "https://ok.test/", "fine")]),
        )
    });
    let t = net_builder(NetworkConfig::default())
        .host_env(cubby::HostEnv::capture())
        .web_search(WebSearchConfig {
            backend: Some(SearchBackendKind::Brave),
            url: Some(server.url("127.0.0.1", "/res/v1/web/search")),
            api_key_env: Some("CARGO_MANIFEST_DIR".into()),
        })
        .build()
        .unwrap();
    let out = search(&t, "whatever");
    expect_kind(&out, "ok");
    assert!(
        out.text.contains("token was [REDACTED:CARGO_MANIFEST_DIR]"),
        "{}",
        out.text
    );
    assert!(!out.text.contains(key));
    assert!(!out.structured.to_string().contains(key));
    assert_eq!(server.requests().len(), 1);

    // Named but unset: web_search says which variable is missing.
    let t = net_builder(NetworkConfig::default())
        .web_search(WebSearchConfig {
            backend: Some(SearchBackendKind::Brave),
            url: None,
            api_key_env: Some("CUBBY_TEST_SURELY_UNSET_KEY".into()),
        })
        .build()
        .unwrap();
    let out = search(&t, "x");
    expect_kind(&out, "unsupported");
    assert!(
        out.text.contains("CUBBY_TEST_SURELY_UNSET_KEY"),
        "{}",
        out.text
    );
}

#[test]
fn web_config_sections_parse_and_are_validated() {
    let config = cubby::Config::from_toml(
        r#"
allow = ["web_fetch", "web_search"]

[network]
allowed_domains = ["docs.rs", "*.rust-lang.org"]
denied_domains = ["evil.test"]
allowed_cidrs = ["10.0.0.0/8", "fd00::/8"]

[limits.web_fetch]
timeout_ms = 5000
max_output_chars = 4000
max_body_bytes = 1048576

[limits.web_search]
max_results = 3

[web_search]
backend = "searxng"
url = "http://127.0.0.1:8888"
"#,
        "cubby.toml",
    )
    .unwrap();
    assert_eq!(config.limits.web_fetch.timeout_ms, 5_000);
    assert_eq!(config.limits.web_search.max_results, 3);
    assert_eq!(config.limits.web_search.max_result_chars, 2_000);
    assert_eq!(config.web_search.backend, Some(SearchBackendKind::Searxng));

    for (text, needle) in [
        ("[network]\ndenied_domains = [\"a..b\"]", "a..b"),
        ("[network]\nallowed_cidrs = [\"nope\"]", "nope"),
        ("[web_search]\nbackend = \"searxng\"", "url"),
        ("[web_search]\nbackend = \"bing\"", "bing"),
        ("[limits.web_fetch]\nmax_output_chars = 10", "1000"),
        ("[limits.web_fetch]\ntimeout = 5", "timeout"),
    ] {
        let err = cubby::Config::from_toml(text, "cubby.toml").unwrap_err();
        assert!(err.message().contains(needle), "{text}: {err}");
    }
}

/// Redaction comes before the 10,000-char cut (SPEC §2): a page made of a
/// secret repeated, shifted by half a secret between two pages, so that one
/// of the two cuts falls at least 16 characters into a value.
#[test]
fn the_output_cut_never_shows_part_of_a_secret() {
    const SECRET: &str = "sk-live-0123456789abcdefghijklmn";
    let server = Server::start(|req, _| {
        let shift = if req.path() == "/shifted" { 16 } else { 0 };
        let body = format!("{}{}", "x".repeat(shift), SECRET.repeat(1_000));
        page(200, "text/plain", body)
    });
    let redacting = net_builder(net(&[], &[], LOOPBACK))
        .resolver(pinned())
        .secret("API_KEY", SECRET)
        .build()
        .unwrap();
    let plain = fetcher(net(&[], &[], LOOPBACK));
    let mut longest_part_shown = 0;
    for path in ["/aligned", "/shifted"] {
        let url = server.url("allowed.test", path);
        // Control: without the secret registered, the cut ends in part of one.
        let out = fetch(&plain, &url);
        expect_kind(&out, "ok");
        let content = out.structured["content"].as_str().unwrap();
        let part = (1..SECRET.len())
            .rev()
            .find(|n| content.ends_with(&SECRET[..*n]))
            .unwrap_or(0);
        longest_part_shown = longest_part_shown.max(part);
        let out = fetch(&redacting, &url);
        expect_kind(&out, "ok");
        assert_eq!(out.structured["truncated"], true);
        let both = format!("{}\n{}", out.text, out.structured);
        for i in 0..=SECRET.len() - 6 {
            assert!(!both.contains(&SECRET[i..i + 6]), "{path}: {both}");
        }
        assert!(out.text.contains("[REDACTED:API_KEY]"));
    }
    assert!(longest_part_shown >= 16, "{longest_part_shown}");
}
