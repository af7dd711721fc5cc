//! The web, host-side: what `web_fetch` and `web_search` stand on.
//!
//! ```text
//! web_fetch url
//!   │ WebUrl::parse: the one strict URL/host parser     net/address.rs
//!   │ NetRules::check_host: domain lists (denied)       net/rules.rs
//!   │ Resolver (system, or a hook) → every address checked  net/rules.rs
//!   │   against the refused ranges and `allowed_cidrs` (network)
//!   │ one GET to exactly the checked addresses (no proxy,   fetch.rs
//!   │   no automatic redirects, no retry); a redirect goes
//!   │   back to the top, at most 5 times
//!   │ body read up to a cap; HTML → Markdown                html.rs
//!   ▼
//! text + structured result                                  tools/web.rs
//! ```
//!
//! `web_search` asks a [`SearchBackend`] ([`BraveSearch`], [`SearxngSearch`],
//! or one of the library user's) and filters its results through the same
//! domain lists. Everything runs on a private Tokio runtime per call, under
//! the call's time limit and cancellation; dropping the request's future
//! aborts it.
//!
//! The egress proxy (`net/proxy.rs`) applies the same domain lists and address
//! rules to commands of a `linux` sandbox whose network mode is `allow`. The
//! addresses, rules, resolver and proxy live in `crate::net`, below the
//! sandbox; this module re-exports their public types at their old paths.
//!
//! # Limitations
//!
//! The search backend's own endpoint is trusted configuration: it is not held
//! to the domain lists or the refused ranges (a SearXNG instance usually runs
//! on loopback).

mod fetch;
mod html;
mod search;

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

pub use crate::net::MAX_URL_CHARS;
pub(crate) use crate::net::NetRules;
pub(crate) use crate::net::WebUrl;
pub use crate::net::{EgressOptions, Injection, MAX_EGRESS_CONNECTIONS, Resolver, SystemResolver};
pub(crate) use fetch::{Fetched, fetch};
pub(crate) use html::{decode, fragment_text, sniff_html, to_markdown};
pub use search::{
    BRAVE_API_KEY_ENV, BRAVE_ENDPOINT, BraveSearch, SearchBackend, SearchFuture, SearchHit,
    SearxngSearch,
};
pub(crate) use search::{Configured, backend_from_config};

use crate::config::{NetworkConfig, WebSearchConfig};
use crate::error::{Error, ErrorKind, Result};
use crate::process::CancelToken;

/// The `User-Agent` of every request cubby makes.
pub const USER_AGENT: &str = concat!("cubby/", env!("CARGO_PKG_VERSION"), " (web tools)");
/// How often a running request looks at its cancel token.
const CANCEL_POLL: Duration = Duration::from_millis(20);

/// What the web tools of one toolset work with.
pub(crate) struct WebSettings {
    /// The `[network]` rules; `None` when the front passed none, and then
    /// the web tools answer `unsupported` rather than guess.
    pub rules: Option<NetRules>,
    /// How `web_fetch` resolves names.
    pub resolver: Arc<dyn Resolver>,
    /// The search backend, or why there is none.
    pub search: std::result::Result<Arc<dyn SearchBackend>, String>,
}

impl WebSettings {
    /// The network rules, or the `unsupported` error explaining their absence.
    pub(crate) fn rules(&self, tool: &str) -> Result<&NetRules> {
        self.rules.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::Unsupported,
                format!(
                    "{tool} is not available: this toolset was built without the `[network]` \
                     rules the web tools enforce (ToolsetBuilder::network)"
                ),
            )
        })
    }
}

/// Checks the `[network]` and `[web_search]` sections of a config.
///
/// # Errors
///
/// `invalid_input` naming the key and entry that cannot work.
pub(crate) fn validate_config(network: &NetworkConfig, search: &WebSearchConfig) -> Result<()> {
    NetRules::from_config(network)?;
    for entry in &network.inject {
        crate::net::check_injection(&Injection {
            name: entry.secret.clone(),
            value: "checked".into(),
            hosts: entry.hosts.clone(),
            headers: entry.headers.clone(),
        })?;
    }
    backend_from_config(search, &|_| None)?;
    Ok(())
}

/// Runs `work` on a private current-thread Tokio runtime, on a thread of its
/// own (so it never nests in a caller's runtime), until it ends, `timeout`
/// passes (then `on_timeout()` is the error) or `cancel` fires.
pub(crate) fn block_on_bounded<T, F>(
    timeout: Duration,
    cancel: Option<&CancelToken>,
    on_timeout: impl FnOnce() -> Error + Send,
    work: impl FnOnce() -> F + Send,
) -> Result<T>
where
    T: Send,
    F: Future<Output = Result<T>>,
{
    // Cuts made by the work (echoed URLs) redact with the call's secrets.
    let redactor = crate::output::CallScope::current();
    std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .name("cubby-web".into())
            .spawn_scoped(scope, move || {
                let _scope = crate::output::CallScope::enter(&redactor);
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| Error::internal(format!("cannot start the web runtime: {e}")))?;
                let result = runtime.block_on(async {
                    tokio::select! {
                        biased;
                        () = cancelled(cancel) => Err(Error::new(
                            ErrorKind::Network,
                            "the call was cancelled; the request was aborted",
                        )),
                        r = tokio::time::timeout(timeout, work()) => r.unwrap_or_else(|_| Err(on_timeout())),
                    }
                });
                // Do not wait for a resolver thread stuck in getaddrinfo.
                runtime.shutdown_background();
                result
            })
            .map_err(|e| Error::internal(format!("cannot start the web worker: {e}")))?;
        worker
            .join()
            .map_err(|_| Error::internal("the web request failed unexpectedly"))?
    })
}

async fn cancelled(cancel: Option<&CancelToken>) {
    match cancel {
        None => std::future::pending().await,
        Some(token) => {
            while !token.is_cancelled() {
                tokio::time::sleep(CANCEL_POLL).await;
            }
        }
    }
}

/// The TLS settings of every client, built once: rustls with the ring
/// provider and the platform's roots, HTTP/1.1. When the platform has no
/// usable roots, an empty root store (plain http still works) and the reason
/// [`https_problem`] reports.
struct Tls {
    config: rustls::ClientConfig,
    problem: Option<String>,
}

fn tls() -> Result<&'static Tls> {
    static TLS: OnceLock<std::result::Result<Tls, String>> = OnceLock::new();
    TLS.get_or_init(|| {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let (mut config, problem) = match rustls_platform_verifier::Verifier::new(provider) {
            Ok(verifier) => (
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(verifier))
                    .with_no_client_auth(),
                None,
            ),
            Err(e) => (
                builder
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth(),
                Some(e.to_string()),
            ),
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Tls { config, problem })
    })
    .as_ref()
    .map_err(|e| Error::internal(format!("TLS cannot be set up: {e}")))
}

/// Why https cannot be verified on this host (no CA certificates), if so.
fn https_problem() -> Option<String> {
    match tls() {
        Ok(tls) => tls.problem.clone(),
        Err(e) => Some(e.message().to_string()),
    }
}

/// The `network` error for an https URL this host cannot verify.
pub(crate) fn check_https(url: &str) -> Result<()> {
    if !url.starts_with("https:") {
        return Ok(());
    }
    match https_problem() {
        None => Ok(()),
        Some(why) => Err(Error::new(
            ErrorKind::Network,
            format!(
                "https certificates cannot be verified on this host ({why}); install the                  system's CA certificates"
            ),
        )),
    }
}

/// A client builder with what every cubby request shares: no proxy (the
/// connection goes where cubby checked), no automatic redirects, no retries,
/// no connection reuse, cubby's TLS and user agent.
pub(crate) fn client_builder() -> Result<reqwest::ClientBuilder> {
    Ok(reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .retry(reqwest::retry::never())
        .referer(false)
        .pool_max_idle_per_host(0)
        .user_agent(USER_AGENT)
        .tls_backend_preconfigured(tls()?.config.clone()))
}

/// Reads a response body up to `max_bytes`; the bool says whether the whole
/// body was read.
pub(crate) async fn read_body(
    response: &mut reqwest::Response,
    max_bytes: usize,
) -> std::result::Result<(Vec<u8>, bool), reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = max_bytes - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, false));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, true))
}

/// The message of a transport error with its causes, for the model.
pub(crate) fn describe(err: &reqwest::Error) -> String {
    let mut message = if err.is_connect() {
        "the connection failed".to_string()
    } else if err.is_body() || err.is_decode() {
        "the response body could not be read".to_string()
    } else {
        "the request failed".to_string()
    };
    let mut source = std::error::Error::source(err);
    let mut depth = 0;
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
        depth += 1;
        if depth == 4 {
            break;
        }
    }
    crate::output::truncate_for_message(&message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_and_the_cancel_token_end_the_work() {
        let started = std::time::Instant::now();
        let err = block_on_bounded(
            Duration::from_millis(100),
            None,
            || Error::new(ErrorKind::Timeout, "slow"),
            || async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(())
            },
        )
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Timeout);
        assert!(started.elapsed() < Duration::from_secs(10));

        let token = CancelToken::new();
        token.cancel();
        let err = block_on_bounded(
            Duration::from_secs(60),
            Some(&token),
            || Error::new(ErrorKind::Timeout, "slow"),
            || async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(())
            },
        )
        .unwrap_err();
        assert!(err.message().contains("cancelled"), "{err}");

        let ok = block_on_bounded(
            Duration::from_secs(60),
            None,
            || Error::new(ErrorKind::Timeout, "slow"),
            || async { Ok(7) },
        );
        assert_eq!(ok, Ok(7));
    }

    #[test]
    fn tls_and_clients_build() {
        assert!(client_builder().unwrap().build().is_ok());
    }
}
