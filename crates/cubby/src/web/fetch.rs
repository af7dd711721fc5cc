//! One `web_fetch` request: hop by hop, every host checked before anything
//! connects to it.
//!
//! For each hop, in order:
//!
//! 1. the domain lists on the hop's host (`denied`);
//! 2. the host resolved (an IP literal is its own answer) and every address
//!    checked against the refused ranges and `allowed_cidrs` (`network`);
//! 3. a client pinned to exactly those addresses (its own DNS refuses every
//!    name, so nothing is resolved twice) sends one GET;
//! 4. a redirect (301, 302, 303, 307, 308 with a `Location`) becomes the next
//!    hop, held to the URL rules again; the sixth is a `limit` error;
//! 5. otherwise the body is read up to the cap and returned.

use std::net::SocketAddr;
use std::sync::Arc;

use super::{check_https, client_builder, describe, read_body};
use crate::config::WEB_FETCH_MAX_REDIRECTS;
use crate::error::{Error, ErrorKind, Result};
use crate::net::{Host, NetRules, Resolver, WebUrl, address_refusal, resolve};
use crate::output::truncate_for_message;

/// What one `web_fetch` brought back.
#[derive(Debug)]
pub(crate) struct Fetched {
    /// The URL the body came from.
    pub final_url: WebUrl,
    /// The URLs redirected from, in order.
    pub redirects: Vec<String>,
    /// The HTTP status.
    pub status: u16,
    /// Its reason phrase (`OK`, `Not Found`).
    pub reason: String,
    /// The `Content-Type` header.
    pub content_type: Option<String>,
    /// The body, up to the cap.
    pub body: Vec<u8>,
    /// False when the body was longer than the cap.
    pub complete: bool,
}

/// Fetches `url` under `rules`, following at most
/// [`WEB_FETCH_MAX_REDIRECTS`] redirects. Runs inside
/// [`super::block_on_bounded`], which owns the time limit.
pub(crate) async fn fetch(
    url: WebUrl,
    rules: &NetRules,
    resolver: Arc<dyn Resolver>,
    max_body_bytes: usize,
) -> Result<Fetched> {
    let mut url = url;
    let mut redirects: Vec<String> = Vec::new();
    loop {
        rules.check_host(url.host())?;
        let addrs = checked_addresses(url.host(), url.port(), rules, &resolver).await?;
        check_https(url.as_str())?;
        let mut builder = client_builder()?.dns_resolver(Arc::new(NoDns));
        if let Host::Domain(name) = url.host() {
            builder = builder.resolve_to_addrs(name, &addrs);
        }
        let client = builder
            .build()
            .map_err(|e| Error::internal(format!("the HTTP client cannot be built: {e}")))?;
        let mut response = client
            .get(url.as_str())
            .header(reqwest::header::ACCEPT, ACCEPT)
            .send()
            .await
            .map_err(|e| network(&url, &e))?;
        let status = response.status();
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        if let (true, Some(location)) = (is_redirect(status.as_u16()), location) {
            if redirects.len() == WEB_FETCH_MAX_REDIRECTS {
                return Err(Error::new(
                    ErrorKind::Limit,
                    format!(
                        "{} redirected more than {WEB_FETCH_MAX_REDIRECTS} times (next: {}); \
                         fetch the final address directly",
                        truncate_for_message(
                            redirects.first().map_or(url.as_str(), String::as_str)
                        ),
                        truncate_for_message(&location)
                    ),
                ));
            }
            let next = url.join(&location).map_err(|why| {
                Error::new(
                    ErrorKind::Network,
                    format!("{url} redirected to a URL cubby will not follow: {why}"),
                )
            })?;
            redirects.push(url.to_string());
            url = next;
            continue;
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let (body, complete) = read_body(&mut response, max_body_bytes)
            .await
            .map_err(|e| network(&url, &e))?;
        return Ok(Fetched {
            final_url: url,
            redirects,
            status: status.as_u16(),
            reason: status.canonical_reason().unwrap_or("").to_string(),
            content_type,
            body,
            complete,
        });
    }
}

/// What `web_fetch` asks for: pages first, then Markdown and text.
const ACCEPT: &str = "text/html,application/xhtml+xml,text/markdown;q=0.9,text/plain;q=0.8,\
                      application/json;q=0.8,*/*;q=0.5";

fn is_redirect(status: u16) -> bool {
    matches!(status, 301 | 302 | 303 | 307 | 308)
}

/// The addresses of `host` (resolved unless an IP literal), every one
/// allowed by the address rules, with `port`.
///
/// # Errors
///
/// `network` when the name does not resolve or an address is refused.
pub(crate) async fn checked_addresses(
    host: &Host,
    port: u16,
    rules: &NetRules,
    resolver: &Arc<dyn Resolver>,
) -> Result<Vec<SocketAddr>> {
    let ips = resolve(host, resolver).await?;
    for ip in &ips {
        if let Some(why) = address_refusal(host, *ip, rules) {
            return Err(Error::new(ErrorKind::Network, why));
        }
    }
    // Connect over IPv4 to an IPv4-mapped address.
    Ok(ips
        .into_iter()
        .map(|ip| SocketAddr::new(ip.to_canonical(), port))
        .collect())
}

/// The error for a failed request to `url`.
fn network(url: &WebUrl, err: &reqwest::Error) -> Error {
    Error::new(
        ErrorKind::Network,
        format!(
            "{}: {}; the site may be down or refusing connections",
            truncate_for_message(url.as_str()),
            describe(err)
        ),
    )
}

/// The client's own resolver: refuses every name, so that only the checked
/// addresses pinned with `resolve_to_addrs` are ever used.
struct NoDns;

impl reqwest::dns::Resolve for NoDns {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let name = name.as_str().to_string();
        Box::pin(async move {
            Err(format!("`{name}` was not checked by cubby and is not resolved").into())
        })
    }
}
