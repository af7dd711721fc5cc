//! The one place a URL or host name from outside becomes something cubby
//! connects to: [`WebUrl::parse`] and [`parse_domain`].
//!
//! The rules are strict on purpose: the host that the domain lists and the
//! address checks see must be, byte for byte, the host the model wrote
//! (lower-cased). So the parser refuses, rather than normalises:
//!
//! 1. control characters, spaces and `\` anywhere (WHATWG parsers drop tabs
//!    and newlines and read `\` as `/`, so `http://a.test\@b.test` would
//!    reach another host than it seems to name);
//! 2. schemes other than `http://` and `https://`;
//! 3. user info (`user@host`, `a.test@b.test`);
//! 4. `%` in the host (percent-encoded host names);
//! 5. non-ASCII hosts (IDNA mapping folds full-width letters and `。` into
//!    ASCII; the model must write the punycode `xn--` form);
//! 6. IPv4 written any way but four decimal numbers (`0x7f.1`, `2130706433`);
//! 7. empty, over-long or malformed labels and ports.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::error::{Error, Result};
use crate::output::truncate_for_message;

/// Longest URL `web_fetch` accepts, in chars (SPEC §3).
pub const MAX_URL_CHARS: usize = 2_048;
/// Longest domain name (without a trailing dot), in bytes.
const MAX_DOMAIN_BYTES: usize = 253;
/// Longest label of a domain name, in bytes.
const MAX_LABEL_BYTES: usize = 63;

/// The host of a [`WebUrl`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Host {
    /// A domain name: lower-case ASCII, as written (a trailing dot kept).
    Domain(String),
    /// An IP address literal.
    Ip(IpAddr),
}

impl Host {
    /// The name domain lists compare: lower case, no trailing dot.
    pub(crate) fn match_name(&self) -> String {
        match self {
            Host::Domain(d) => d.strip_suffix('.').unwrap_or(d).to_string(),
            Host::Ip(ip) => ip.to_string(),
        }
    }
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Domain(d) => f.write_str(d),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// An absolute http(s) URL that passed every rule of this module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct WebUrl {
    url: url::Url,
    host: Host,
}

impl WebUrl {
    /// Parses a URL the model (or a search result) gave.
    ///
    /// # Errors
    ///
    /// `invalid_input` saying which rule the URL breaks and how to fix it.
    pub(crate) fn parse(input: &str) -> Result<WebUrl> {
        parse(input).map_err(|why| {
            Error::invalid_input(format!(
                "`{}` cannot be fetched: {why}",
                truncate_for_message(input)
            ))
        })
    }

    /// The URL a redirect's `Location` names, held to the same rules: an
    /// absolute or scheme-relative target is parsed as written (so the
    /// URL library cannot normalise a trick into a plain host first); a
    /// relative one keeps this URL's host.
    ///
    /// # Errors
    ///
    /// The reason, in words, when the target breaks a rule.
    pub(crate) fn join(&self, location: &str) -> std::result::Result<WebUrl, String> {
        let location = location.trim_matches(' ');
        if let Some(c) = location.chars().find(|c| c.is_control() || *c == '\\') {
            return Err(format!("the target contains {c:?}"));
        }
        if location.starts_with("//") {
            return parse(&format!("{}:{location}", self.url.scheme()));
        }
        let has_scheme = location.split_once(':').is_some_and(|(scheme, _)| {
            scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        });
        if has_scheme {
            return parse(location);
        }
        let joined = self
            .url
            .join(location)
            .map_err(|e| format!("`{}` is not a URL ({e})", truncate_for_message(location)))?;
        parse(joined.as_str())
    }

    /// The URL as sent (no fragment).
    pub(crate) fn as_str(&self) -> &str {
        self.url.as_str()
    }

    /// The host.
    pub(crate) fn host(&self) -> &Host {
        &self.host
    }

    /// The port, explicit or the scheme's default.
    pub(crate) fn port(&self) -> u16 {
        self.url.port_or_known_default().unwrap_or(80)
    }
}

impl std::fmt::Display for WebUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.url.as_str())
    }
}

fn parse(input: &str) -> std::result::Result<WebUrl, String> {
    let chars = input.chars().count();
    if chars == 0 {
        return Err("the URL is empty; pass an absolute URL such as https://example.com/".into());
    }
    if chars > MAX_URL_CHARS {
        return Err(format!(
            "the URL is {chars} chars long, the limit is {MAX_URL_CHARS}; pass a shorter URL"
        ));
    }
    if let Some(c) = input
        .chars()
        .find(|c| c.is_control() || c.is_whitespace() || *c == '\\')
    {
        return Err(format!(
            "it contains {c:?}; percent-encode spaces, backslashes and control characters"
        ));
    }
    let Some((scheme, rest)) = input.split_once("://") else {
        return Err("it is not an absolute http:// or https:// URL".into());
    };
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(format!(
            "the scheme `{}` is not supported; only http and https URLs can be fetched",
            truncate_for_message(scheme)
        ));
    }
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    if authority.contains('@') {
        return Err("user names and passwords in URLs (`user@host`) are refused".into());
    }
    if authority.contains('%') {
        return Err("percent-encoded host names are refused; write the host plainly".into());
    }
    if !authority.is_ascii() {
        return Err(
            "the host is not ASCII; write an internationalized domain in its punycode \
             form (`xn--…`)"
                .into(),
        );
    }
    let (raw_host, raw_port) = split_host_port(authority)?;
    if let Some(port) = raw_port {
        let valid = !port.is_empty()
            && port.bytes().all(|b| b.is_ascii_digit())
            && port.parse::<u16>().is_ok_and(|p| p != 0);
        if !valid {
            return Err(format!(
                "the port `{}` is not a number from 1 to 65535",
                truncate_for_message(port)
            ));
        }
    }
    let url = url::Url::parse(input).map_err(|e| format!("it is not a valid URL ({e})"))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err("user names and passwords in URLs (`user@host`) are refused".into());
    }
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err("only http and https URLs can be fetched".into());
    }
    let host = match url.host() {
        Some(url::Host::Domain(d)) => {
            if d != raw_host.to_ascii_lowercase() {
                return Err(format!(
                    "the host `{}` is not in plain form (it reads as `{}`); write it as \
                     lower-case letters, digits, `-` and `.`",
                    truncate_for_message(raw_host),
                    truncate_for_message(d)
                ));
            }
            check_domain(d)?;
            Host::Domain(d.to_string())
        }
        Some(url::Host::Ipv4(addr)) => {
            if raw_host.parse::<Ipv4Addr>() != Ok(addr) {
                return Err(format!(
                    "the host `{}` is an IPv4 address in an unusual form; write it as four \
                     decimal numbers, e.g. {addr}",
                    truncate_for_message(raw_host)
                ));
            }
            Host::Ip(IpAddr::V4(addr))
        }
        Some(url::Host::Ipv6(addr)) => {
            let inner = raw_host
                .strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .unwrap_or(raw_host);
            if inner.parse::<Ipv6Addr>() != Ok(addr) {
                return Err(format!(
                    "the host `{}` is not a plain IPv6 address",
                    truncate_for_message(raw_host)
                ));
            }
            Host::Ip(IpAddr::V6(addr))
        }
        None => return Err("it has no host".into()),
    };
    let mut url = url;
    url.set_fragment(None);
    Ok(WebUrl { url, host })
}

/// Splits `host[:port]` or `[v6][:port]`.
fn split_host_port(authority: &str) -> std::result::Result<(&str, Option<&str>), String> {
    if authority.is_empty() {
        return Err("it has no host".into());
    }
    if authority.starts_with('[') {
        let Some(end) = authority.find(']') else {
            return Err("an IPv6 host lacks its closing `]`".into());
        };
        let (host, rest) = authority.split_at(end + 1);
        return match rest {
            "" => Ok((host, None)),
            _ => match rest.strip_prefix(':') {
                Some(port) => Ok((host, Some(port))),
                None => Err("unexpected text after the IPv6 host".into()),
            },
        };
    }
    match authority.rsplit_once(':') {
        Some(("", _)) => Err("it has no host".into()),
        Some((host, port)) => Ok((host, Some(port))),
        None => Ok((authority, None)),
    }
}

/// Checks a lower-case ASCII domain name: labels of 1–63 letters, digits,
/// `-` and `_` (not starting or ending with `-`), 253 bytes in all; one
/// trailing dot allowed.
fn check_domain(name: &str) -> std::result::Result<(), String> {
    let bare = name.strip_suffix('.').unwrap_or(name);
    if bare.is_empty() || bare.len() > MAX_DOMAIN_BYTES {
        return Err(format!(
            "the host name is empty or longer than {MAX_DOMAIN_BYTES} bytes"
        ));
    }
    for label in bare.split('.') {
        let valid = !label.is_empty()
            && label.len() <= MAX_LABEL_BYTES
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !valid {
            return Err(format!(
                "the host name `{}` has an empty or malformed label `{}`",
                truncate_for_message(name),
                truncate_for_message(label)
            ));
        }
    }
    Ok(())
}

/// Parses a domain-list entry (`example.com`, `*.example.com`, `.example.com`,
/// `Example.COM.`, or an IP address) into the host it covers.
///
/// # Errors
///
/// The reason, in words.
pub(crate) fn parse_domain(entry: &str) -> std::result::Result<Host, String> {
    let trimmed = entry.trim();
    let bare = trimmed
        .strip_prefix("*.")
        .or_else(|| trimmed.strip_prefix('.'))
        .unwrap_or(trimmed);
    let unbracketed = bare
        .strip_prefix('[')
        .and_then(|b| b.strip_suffix(']'))
        .unwrap_or(bare);
    if let Ok(ip) = unbracketed.parse::<IpAddr>() {
        return Ok(Host::Ip(ip));
    }
    if !bare.is_ascii() {
        return Err("write an internationalized domain in its punycode form (`xn--…`)".into());
    }
    let lower = bare.to_ascii_lowercase();
    check_domain(&lower)?;
    Ok(Host::Domain(
        lower.strip_suffix('.').unwrap_or(&lower).to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(url: &str) -> Host {
        WebUrl::parse(url).unwrap().host().clone()
    }

    #[test]
    fn plain_urls_parse() {
        assert_eq!(
            host("https://Docs.RS/serde?x=1#frag"),
            Host::Domain("docs.rs".into())
        );
        assert_eq!(host("http://a.test.:8080/"), Host::Domain("a.test.".into()));
        assert_eq!(
            host("http://93.184.216.34/"),
            Host::Ip("93.184.216.34".parse().unwrap())
        );
        assert_eq!(host("http://[::1]:80/"), Host::Ip("::1".parse().unwrap()));
        assert_eq!(host("http://[0:0::1]/"), Host::Ip("::1".parse().unwrap()));
        let u = WebUrl::parse("https://example.com/a b".replace(' ', "%20").as_str()).unwrap();
        assert_eq!(u.port(), 443);
        assert!(
            !WebUrl::parse("https://x.test/#f")
                .unwrap()
                .as_str()
                .contains('#')
        );
        // Non-ASCII is fine outside the host.
        assert!(WebUrl::parse("https://de.wikipedia.org/wiki/München").is_ok());
    }

    #[test]
    fn tricks_are_refused() {
        let long = format!("https://a.test/{}", "x".repeat(MAX_URL_CHARS));
        for bad in [
            "",
            "example.com",
            "//example.com/",
            "ftp://example.com/",
            "file:///etc/passwd",
            "javascript:alert(1)",
            "http:/example.com",
            "http://",
            "http:///path",
            "http://a b.test/",
            "http://a.test/\u{0}",
            "http://a\t.test/",
            "http://user@a.test/",
            "http://a.test:pw@b.test/",
            "http://a.test@b.test/",
            "http://a.test\\@b.test/",
            "http://a%2etest/",
            "http://%61.test/",
            "http://ａ.test/",
            "http://a。test/",
            "http://0x7f.1/",
            "http://2130706433/",
            "http://127.1/",
            "http://0177.0.0.1/",
            "http://[::1%25eth0]/",
            "http://[::1/",
            "http://a..test/",
            "http://-a.test/",
            "http://a-.test/",
            "http://a.test:0/",
            "http://a.test:99999/",
            "http://a.test:/",
            "http://a.test:8o/",
            "http://:80/",
            long.as_str(),
        ] {
            let err = WebUrl::parse(bad).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::InvalidInput, "{bad:?}");
        }
    }

    #[test]
    fn redirect_targets_are_held_to_the_same_rules() {
        let base = WebUrl::parse("http://a.test/dir/page").unwrap();
        assert_eq!(
            base.join("next").unwrap().as_str(),
            "http://a.test/dir/next"
        );
        assert_eq!(
            base.join("//b.test/x").unwrap().host(),
            &Host::Domain("b.test".into())
        );
        assert_eq!(
            base.join("/a b?q=ü").unwrap().as_str(),
            "http://a.test/a%20b?q=%C3%BC"
        );
        assert!(base.join("file:///etc/passwd").is_err());
        assert!(base.join("//0x7f.1/").is_err());
        assert!(base.join("/\t/b.test/").is_err());
        assert!(base.join("\\\\b.test/").is_err());
        assert!(base.join("http://u@b.test/").is_err());
        assert!(base.join("http://0x7f.1/").is_err());
    }

    #[test]
    fn domain_entries_normalise() {
        assert_eq!(
            parse_domain("Example.COM."),
            Ok(Host::Domain("example.com".into()))
        );
        assert_eq!(
            parse_domain("*.example.com"),
            Ok(Host::Domain("example.com".into()))
        );
        assert_eq!(
            parse_domain(".example.com"),
            Ok(Host::Domain("example.com".into()))
        );
        assert_eq!(
            parse_domain("10.0.0.1"),
            Ok(Host::Ip("10.0.0.1".parse().unwrap()))
        );
        assert_eq!(parse_domain("[::1]"), Ok(Host::Ip("::1".parse().unwrap())));
        for bad in [
            "",
            "a..b",
            "bücher.de",
            "a b",
            "http://x.test",
            "x.test/path",
        ] {
            assert!(parse_domain(bad).is_err(), "{bad:?}");
        }
    }
}
