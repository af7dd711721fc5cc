//! `web_fetch`: off unless allowed, addresses and DNS, domain lists,
//! redirects, time and cancellation, contents, bad input.

use crate::*;

#[test]
fn web_tools_are_off_unless_allowed() {
    let t = Toolset::builder(cubby::virtual_sandbox(MemoryFs::new()))
        .policy(
            Policy::builder()
                .network(NetworkConfig::default())
                .build()
                .unwrap(),
        )
        .track_changes(false)
        .build()
        .unwrap();
    assert!(!t.tool_names().contains(&"web_fetch"));
    assert!(!t.tool_names().contains(&"web_search"));
    let out = fetch(&t, "http://allowed.test/");
    expect_kind(&out, "denied");
    assert!(out.text.contains("allow"), "{}", out.text);
    expect_kind(&t.call("web_search", json!({"query": "x"})), "denied");

    let t = fetcher(net(&[], &[], LOOPBACK));
    let names = t.tool_names();
    assert!(names.contains(&"web_fetch") && names.contains(&"web_search"));
    let spec = t
        .tools()
        .into_iter()
        .find(|s| s.name == "web_fetch")
        .unwrap();
    assert!(spec.annotations.open_world);
    assert_eq!(spec.input_schema["required"], json!(["url"]));
}

#[test]
fn without_network_rules_the_web_tools_are_unsupported() {
    let server = site();
    let t = builder().resolver(pinned()).build().unwrap();
    let out = fetch(&t, &server.url("allowed.test", "/"));
    expect_kind(&out, "unsupported");
    assert!(out.text.contains("network"), "{}", out.text);
    assert!(server.requests().is_empty());
}

// ------------------------------------------------------- addresses, DNS

#[test]
fn loopback_is_refused_unless_allowed_cidrs_lists_it() {
    let server = site();
    let closed = fetcher(NetworkConfig::default());
    for url in [
        server.url("127.0.0.1", "/"),
        server.url("allowed.test", "/"),
        server.url("[::1]", "/"),
        server.url("mapped.test", "/"),
    ] {
        let out = fetch(&closed, &url);
        expect_kind(&out, "network");
        assert!(out.text.contains("loopback"), "{}", out.text);
        assert!(out.text.contains("allowed_cidrs"), "{}", out.text);
    }
    assert!(server.requests().is_empty(), "{:?}", server.hosts());

    let open = fetcher(net(&[], &[], LOOPBACK));
    let out = fetch(&open, &server.url("allowed.test", "/"));
    expect_kind(&out, "ok");
    assert!(out.text.contains("# Landing"), "{}", out.text);
    let out = fetch(&open, &server.url("127.0.0.1", "/"));
    expect_kind(&out, "ok");
    // An IPv4-mapped answer is judged, and reached, as the IPv4 address.
    expect_kind(&fetch(&open, &server.url("mapped.test", "/")), "ok");
    assert_eq!(server.requests().len(), 3);
}

#[test]
fn an_answer_with_any_refused_address_is_refused_whole() {
    let server = site();
    let t = fetcher(net(&[], &[], &["127.0.0.1/32"]));
    expect_kind(&fetch(&t, &server.url("allowed.test", "/")), "ok");
    for name in ["mixed.test", "loop2.test"] {
        let out = fetch(&t, &server.url(name, "/"));
        expect_kind(&out, "network");
        assert!(out.text.contains("127.0.0.2"), "{}", out.text);
    }
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn each_hop_is_resolved_once_and_unknown_names_fail_cleanly() {
    let server = site();
    let resolver = pinned();
    let t = net_builder(net(&[], &[], LOOPBACK))
        .resolver(resolver.clone())
        .build()
        .unwrap();
    expect_kind(&fetch(&t, &server.url("allowed.test", "/to-sub")), "ok");
    assert_eq!(
        *resolver.lookups.lock().unwrap(),
        vec!["allowed.test".to_string(), "sub.allowed.test".to_string()]
    );
    let out = fetch(&t, &server.url("nowhere.test", "/"));
    expect_kind(&out, "network");
    assert!(out.text.contains("cannot be resolved"), "{}", out.text);
}

#[test]
fn a_closed_port_is_a_network_error() {
    // A socket bound and never listening: connections to its port are
    // refused, and no other process can take the port while it is held (a
    // port found free and released could be taken, and then answer).
    let held = rustix::net::socket(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::STREAM,
        None,
    )
    .unwrap();
    let any = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0);
    rustix::net::bind(&held, &any).unwrap();
    let bound = rustix::net::getsockname(&held).unwrap();
    let port = std::net::SocketAddr::try_from(bound).unwrap().port();
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "port {port} answers"
    );
    let t = fetcher(net(&[], &[], LOOPBACK));
    let out = fetch(&t, &format!("http://allowed.test:{port}/"));
    expect_kind(&out, "network");
    assert!(out.text.contains("connection"), "{}", out.text);
}

// ---------------------------------------------------------- domain lists

#[test]
fn allow_and_deny_lists_cover_subdomains_and_denial_wins() {
    let server = site();
    // (allowed_domains, denied_domains, host, expected)
    let cases: &[(&[&str], &[&str], &str, &str)] = &[
        (&[], &[], "allowed.test", "ok"),
        (&[], &[], "evil.test", "ok"),
        (&["allowed.test"], &[], "allowed.test", "ok"),
        (&["allowed.test"], &[], "sub.allowed.test", "ok"),
        (&["allowed.test"], &[], "deep.sub.allowed.test", "ok"),
        (&["allowed.test"], &[], "ALLOWED.test", "ok"),
        (&["allowed.test"], &[], "allowed.test.", "ok"),
        (&["allowed.test"], &[], "notallowed.test", "denied"),
        (&["allowed.test"], &[], "evil.test", "denied"),
        (&["allowed.test"], &[], "127.0.0.1", "denied"),
        (&["sub.allowed.test"], &[], "allowed.test", "denied"),
        (&["sub.allowed.test"], &[], "deep.sub.allowed.test", "ok"),
        (&["*.allowed.test"], &[], "sub.allowed.test", "ok"),
        (&["Allowed.Test."], &[], "sub.allowed.test", "ok"),
        (&[], &["evil.test"], "evil.test", "denied"),
        (&[], &["evil.test"], "sub.evil.test", "denied"),
        (&[], &["evil.test"], "allowed.test", "ok"),
        (&[], &["EVIL.TEST"], "evil.test.", "denied"),
        (
            &["allowed.test"],
            &["sub.allowed.test"],
            "sub.allowed.test",
            "denied",
        ),
        (
            &["allowed.test"],
            &["sub.allowed.test"],
            "deep.sub.allowed.test",
            "denied",
        ),
        (
            &["allowed.test"],
            &["sub.allowed.test"],
            "allowed.test",
            "ok",
        ),
        (
            &["allowed.test"],
            &["allowed.test"],
            "allowed.test",
            "denied",
        ),
        (&["127.0.0.1"], &[], "127.0.0.1", "ok"),
        (&[], &["127.0.0.1"], "127.0.0.1", "denied"),
    ];
    for (allowed, denied, host, want) in cases {
        let before = server.requests().len();
        let t = fetcher(net(allowed, denied, LOOPBACK));
        let out = fetch(&t, &server.url(host, "/"));
        assert_eq!(
            kind(&out),
            *want,
            "allowed={allowed:?} denied={denied:?} host={host}: {}",
            out.text
        );
        let after = server.requests().len();
        if *want == "ok" {
            assert_eq!(after, before + 1);
            let seen = server.requests().pop().unwrap();
            assert_eq!(
                seen.host(),
                format!("{}:{}", host.to_ascii_lowercase(), server.port),
                "the request names the host asked for"
            );
        } else {
            assert_eq!(after, before, "a denied host is never contacted ({host})");
            assert!(out.text.contains("network."), "{}", out.text);
        }
    }
}

#[test]
fn bad_list_entries_fail_the_build() {
    let err = net_builder(net(&["ok.test", "bad..entry"], &[], &[]))
        .build()
        .unwrap_err();
    assert!(err.message().contains("bad..entry"), "{err}");
    let err = net_builder(net(&[], &[], &["127.0.0.0/99"]))
        .build()
        .unwrap_err();
    assert!(err.message().contains("allowed_cidrs"), "{err}");
}

// -------------------------------------------------------------- redirects

#[test]
fn redirects_are_followed_and_checked_at_every_hop() {
    let server = site();
    let t = fetcher(net(&["allowed.test"], &["evil.test"], LOOPBACK));

    let out = fetch(&t, &server.url("allowed.test", "/relative"));
    expect_kind(&out, "ok");
    assert_eq!(
        out.structured["final_url"],
        server.url("allowed.test", "/landing")
    );
    assert_eq!(
        out.structured["redirects"],
        json!([server.url("allowed.test", "/relative")])
    );
    assert!(out.text.contains("redirected 1 time from"), "{}", out.text);

    let out = fetch(&t, &server.url("allowed.test", "/to-sub"));
    expect_kind(&out, "ok");
    assert!(
        server
            .hosts()
            .iter()
            .any(|h| h.starts_with("sub.allowed.test:"))
    );

    let out = fetch(&t, &server.url("allowed.test", "/to-evil"));
    expect_kind(&out, "denied");
    assert!(out.text.contains("evil.test"), "{}", out.text);
    assert!(
        !server.hosts().iter().any(|h| h.starts_with("evil.test")),
        "the denied hop was never requested: {:?}",
        server.hosts()
    );

    // Without the deny entry, evil.test is still outside the allow list.
    let t2 = fetcher(net(&["allowed.test"], &[], LOOPBACK));
    expect_kind(
        &fetch(&t2, &server.url("allowed.test", "/to-evil")),
        "denied",
    );

    for path in ["/to-file", "/to-userinfo", "/to-ftp"] {
        let out = fetch(&t, &server.url("allowed.test", path));
        expect_kind(&out, "network");
        assert!(out.text.contains("will not follow"), "{path}: {}", out.text);
    }
    assert!(!server.hosts().iter().any(|h| h.starts_with("evil.test")));
}

#[test]
fn redirects_to_refused_addresses_are_refused() {
    let server = site();
    // Only the server's own address is open.
    let t = fetcher(net(&[], &[], &["127.0.0.1/32"]));
    for path in ["/to-loop2", "/to-loop2-name"] {
        let before = server.requests().len();
        let out = fetch(&t, &server.url("allowed.test", path));
        expect_kind(&out, "network");
        assert!(out.text.contains("127.0.0.2"), "{}", out.text);
        assert!(out.text.contains("loopback"), "{}", out.text);
        assert_eq!(
            server.requests().len(),
            before + 1,
            "only the first hop went out"
        );
    }
    // The mapped form of a refused address is refused too.
    let t = fetcher(net(&[], &[], &["127.0.0.1/32"]));
    let out = fetch(&t, &server.url("allowed.test", "/to-mapped"));
    expect_kind(&out, "ok"); // ::ffff:127.0.0.1 is 127.0.0.1, which is open
    let t = fetcher(net(&[], &[], &["127.0.0.2/32"]));
    let out = fetch(&t, &server.url("mapped.test", "/"));
    expect_kind(&out, "network");
}

#[test]
fn at_most_five_redirects_are_followed() {
    let server = site();
    let t = fetcher(net(&[], &[], LOOPBACK));
    let out = fetch(&t, &server.url("allowed.test", "/chain/5"));
    expect_kind(&out, "ok");
    assert!(out.text.contains("end of chain"));
    assert_eq!(out.structured["redirects"].as_array().unwrap().len(), 5);
    let before = server.requests().len();
    let out = fetch(&t, &server.url("allowed.test", "/chain/6"));
    expect_kind(&out, "limit");
    assert!(out.text.contains("more than 5"), "{}", out.text);
    assert_eq!(server.requests().len(), before + 6, "no seventh request");
}

// ------------------------------------------------------- time and cancel

#[test]
fn a_slow_server_hits_the_time_limit() {
    let server = site();
    let mut limits = Limits::default();
    limits.web_fetch.timeout_ms = 500;
    let t = fetcher_with(net(&[], &[], LOOPBACK), limits);
    let started = Instant::now();
    let out = fetch(&t, &server.url("allowed.test", "/slow"));
    let took = started.elapsed();
    expect_kind(&out, "timeout");
    assert!(out.text.contains("0.5 s"), "{}", out.text);
    assert!(took >= Duration::from_millis(450), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    // The abandoned request's connection is closed.
    wait_for(|| server.aborted.load(Ordering::SeqCst) >= 1);
}

#[test]
fn cancellation_aborts_the_request() {
    let server = site();
    let t = fetcher(net(&[], &[], LOOPBACK));
    let token = CancelToken::new();
    let canceller = {
        let token = token.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            token.cancel();
        })
    };
    let started = Instant::now();
    let out = t.call_with(
        "web_fetch",
        json!({"url": server.url("allowed.test", "/slow")}),
        &CallOptions {
            cancel: Some(token),
            ..CallOptions::default()
        },
    );
    canceller.join().unwrap();
    assert!(out.is_error);
    assert!(out.text.contains("cancelled"), "{}", out.text);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // The server sees the connection go away: the request was aborted.
    wait_for(|| server.aborted.load(Ordering::SeqCst) >= 1);
}

fn wait_for(cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "condition not met within 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ------------------------------------------------------------- contents

#[test]
fn html_becomes_markdown() {
    let server = site();
    let t = fetcher(net(&[], &[], LOOPBACK));
    let out = fetch(&t, &server.url("allowed.test", "/html"));
    expect_kind(&out, "ok");
    let first = out.text.lines().next().unwrap();
    assert_eq!(
        first,
        format!(
            "200 OK {} (text/html, {} bytes)",
            server.url("allowed.test", "/html"),
            HTML_PAGE.len()
        )
    );
    let content = out.structured["content"].as_str().unwrap();
    assert!(content.contains("# Title"), "{content}");
    assert!(content.contains("**bold**"), "{content}");
    assert!(
        content.contains("[link](https://example.org/x)"),
        "{content}"
    );
    assert!(
        content.contains("one") && content.contains("two"),
        "{content}"
    );
    assert!(
        !content.contains("secret") && !content.contains("body{}"),
        "{content}"
    );
    assert_eq!(out.structured["binary"], false);
    assert_eq!(out.structured["truncated"], false);
    assert_eq!(out.structured["media_type"], "text/html");

    let out = fetch(&t, &server.url("allowed.test", "/notype"));
    expect_kind(&out, "ok");
    assert!(out.text.contains("## Sniffed"), "{}", out.text);
}

#[test]
fn other_text_passes_through() {
    let server = site();
    let t = fetcher(net(&[], &[], LOOPBACK));
    let out = fetch(&t, &server.url("allowed.test", "/json"));
    expect_kind(&out, "ok");
    assert_eq!(out.structured["content"], "{\"a\": [1, 2, 3]}\n");
    assert_eq!(out.structured["media_type"], "application/json");
    assert!(out.text.ends_with("{\"a\": [1, 2, 3]}\n"), "{}", out.text);

    let out = fetch(&t, &server.url("allowed.test", "/latin1"));
    expect_kind(&out, "ok");
    assert_eq!(out.structured["content"], "café\n");
}

#[test]
fn binary_content_is_metadata() {
    let server = site();
    let t = fetcher(net(&[], &[], LOOPBACK));
    let out = fetch(&t, &server.url("allowed.test", "/png"));
    expect_kind(&out, "ok");
    assert_eq!(out.structured["binary"], true);
    assert_eq!(out.structured["media_type"], "image/png");
    assert!(out.structured.get("content").is_none());
    assert_eq!(out.structured["bytes"], 80);
    assert!(
        out.text.contains("binary content (image/png), not shown"),
        "{}",
        out.text
    );
    assert!(!out.text.contains("IHDR"));

    // A declared text type with NUL bytes is binary all the same.
    let out = fetch(&t, &server.url("allowed.test", "/disguised"));
    assert_eq!(out.structured["binary"], true, "{}", out.text);
    assert_eq!(out.structured["media_type"], "image/gif");
}

#[test]
fn an_error_status_is_a_result_not_an_error() {
    let server = site();
    let t = fetcher(net(&[], &[], LOOPBACK));
    let out = fetch(&t, &server.url("allowed.test", "/missing"));
    expect_kind(&out, "ok");
    assert!(out.text.starts_with("404 Not Found "), "{}", out.text);
    assert_eq!(out.structured["status"], 404);
    assert!(out.text.contains("# Not here"));
}

#[test]
fn a_huge_body_is_cut_and_the_output_stays_bounded() {
    let server = site();
    let t = fetcher(net(&[], &[], LOOPBACK));
    let started = Instant::now();
    let out = fetch(&t, &server.url("allowed.test", "/huge"));
    expect_kind(&out, "ok");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(out.structured["body_complete"], false);
    assert_eq!(
        out.structured["bytes"],
        cubby::config::WEB_FETCH_MAX_BODY_BYTES as u64
    );
    assert_eq!(out.structured["truncated"], true);
    let chars = out.text.chars().count();
    assert!(
        chars <= cubby::config::WEB_FETCH_MAX_OUTPUT_CHARS,
        "{chars}"
    );
    assert!(chars > 9_000, "{chars}");
    assert!(
        out.text.contains("first 5,242,880 bytes of a longer body"),
        "{}",
        &out.text[..300]
    );
    assert!(
        out.text.contains("[content cut at "),
        "{}",
        &out.text[out.text.len() - 200..]
    );
    assert!(out.text.contains("lorem ipsum"));
    // cubby stopped reading: the server could not send the rest.
    wait_for(|| server.aborted.load(Ordering::SeqCst) >= 1);
}

#[test]
fn the_output_limit_is_configurable() {
    let server = site();
    let mut limits = Limits::default();
    limits.web_fetch.max_output_chars = 1_000;
    let t = fetcher_with(net(&[], &[], LOOPBACK), limits);
    let out = fetch(&t, &server.url("allowed.test", "/long"));
    expect_kind(&out, "ok");
    assert!(out.text.chars().count() <= 1_000, "{}", out.text.len());
    assert!(out.text.contains("of 30,000 chars"), "{}", out.text);
    assert_eq!(out.structured["total_chars"], 30_000);
    let shown = out.structured["content"].as_str().unwrap();
    assert!(shown.len() > 700 && "0123456789".repeat(3_000).starts_with(shown));

    // The default shows the 30,000 chars cut to 10,000.
    let t = fetcher(net(&[], &[], LOOPBACK));
    let out = fetch(&t, &server.url("allowed.test", "/long"));
    let n = out.text.chars().count();
    assert!((9_800..=10_000).contains(&n), "{n}");
}

// ------------------------------------------------------------ bad input

#[test]
fn malformed_urls_are_invalid_input_and_reach_nothing() {
    let server = site();
    let t = fetcher(net(&[], &[], LOOPBACK));
    let p = server.port;
    let long = format!("http://allowed.test:{p}/{}", "a".repeat(2_048));
    let bad = [
        String::new(),
        "allowed.test".into(),
        format!("allowed.test:{p}/"),
        format!("ftp://allowed.test:{p}/"),
        "file:///etc/passwd".into(),
        "javascript:alert(1)".into(),
        "data:text/html,<h1>x</h1>".into(),
        format!("http:/allowed.test:{p}/"),
        "http://".into(),
        format!("http://allowed test:{p}/"),
        format!("http://allowed.test:{p}/\u{0}"),
        format!("http://allowed.test\u{0}.evil.test:{p}/"),
        format!("http://user:pw@allowed.test:{p}/"),
        format!("http://allowed.test@evil.test:{p}/"),
        format!("http://evil.test\\@allowed.test:{p}/"),
        format!("http://allowed%2etest:{p}/"),
        format!("http://ａｌｌｏｗｅｄ.test:{p}/"),
        format!("http://allowed。test:{p}/"),
        format!("http://0x7f.0.0.1:{p}/"),
        format!("http://2130706433:{p}/"),
        format!("http://127.1:{p}/"),
        format!("http://[::1%25lo]:{p}/"),
        format!("http://allowed..test:{p}/"),
        "http://allowed.test:99999/".into(),
        "http://allowed.test:0/".into(),
        long,
    ];
    for url in &bad {
        let out = fetch(&t, url);
        expect_kind(&out, "invalid_input");
        assert!(out.text.len() < 1_000, "{}", out.text);
    }
    // Wrong shapes of the argument are invalid_input too.
    for args in [
        json!({}),
        json!({"url": 7}),
        json!({"url": "http://x.test/", "extra": 1}),
    ] {
        expect_kind(&t.call("web_fetch", args), "invalid_input");
    }
    assert!(server.requests().is_empty(), "{:?}", server.hosts());
}
