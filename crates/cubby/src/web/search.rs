//! Search backends: the [`SearchBackend`] trait and two HTTP
//! implementations, [`BraveSearch`] and [`SearxngSearch`].
//!
//! Backends run host-side. A key lives in the backend object (read from
//! cubby's environment when the toolset is built, and registered as a secret
//! so that it is redacted from every output); it is never put in a command's
//! environment by the web tools.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{check_https, client_builder, describe, read_body};
use crate::config::{SearchBackendKind, WebSearchConfig};
use crate::error::{Error, ErrorKind, Result};
use crate::output::Secret;
use crate::output::truncate_for_message;

/// The Brave Search API's web search endpoint.
pub const BRAVE_ENDPOINT: &str = "https://api.search.brave.com/res/v1/web/search";
pub use crate::config::BRAVE_API_KEY_ENV;
/// Most results asked of Brave in one call (the API's maximum).
const BRAVE_MAX_COUNT: usize = 20;
/// Largest backend answer read, in bytes.
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;
/// Chars of a backend's error body quoted to the model.
const MAX_ERROR_BODY_CHARS: usize = 200;

/// One result of a search, as the backend gave it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SearchHit {
    /// The page title (may hold HTML markup; `web_search` strips it).
    pub title: String,
    /// The page URL.
    pub url: String,
    /// A short extract (may hold HTML markup).
    pub snippet: String,
}

/// The future a [`SearchBackend`] returns.
pub type SearchFuture<'a> = Pin<Box<dyn Future<Output = Result<Vec<SearchHit>>> + Send + 'a>>;

/// A web search service `web_search` asks.
///
/// The future runs on a current-thread Tokio runtime (I/O and timers
/// enabled) under `web_search`'s time limit and cancellation: when either
/// ends the call the future is dropped, and dropping it must abort the
/// request. `web_search` filters the hits through the domain lists and cuts
/// them to its limits; a backend returns what the service gave, in order.
pub trait SearchBackend: Send + Sync {
    /// A short name shown with the results (`brave`, `searxng`).
    fn name(&self) -> &str;

    /// Searches for `query`, asking for about `count` hits.
    ///
    /// # Errors
    ///
    /// `network` for a transport failure or an answer that cannot be read,
    /// `limit` when the service's rate limit is reached, `denied` when it
    /// refuses the key.
    fn search<'a>(&'a self, query: &'a str, count: usize) -> SearchFuture<'a>;
}

/// The Brave Search API: `GET {endpoint}?q=…&count=…` with the key in
/// `X-Subscription-Token`; hits from `web.results[].{title,url,description}`.
#[derive(Clone)]
pub struct BraveSearch {
    endpoint: url::Url,
    api_key: String,
}

impl fmt::Debug for BraveSearch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BraveSearch")
            .field("endpoint", &self.endpoint.as_str())
            .field("api_key", &"…")
            .finish()
    }
}

impl BraveSearch {
    /// A backend asking `endpoint` (normally [`BRAVE_ENDPOINT`]) with
    /// `api_key`.
    ///
    /// # Errors
    ///
    /// `invalid_input` when `endpoint` is not an http(s) URL or the key is
    /// empty.
    pub fn new(endpoint: &str, api_key: impl Into<String>) -> Result<BraveSearch> {
        let api_key = api_key.into();
        if api_key.trim().is_empty() {
            return Err(Error::invalid_input("the Brave API key is empty"));
        }
        Ok(BraveSearch {
            endpoint: endpoint_url(endpoint, "web_search.url")?,
            api_key,
        })
    }
}

#[derive(Deserialize)]
struct BraveAnswer {
    #[serde(default)]
    web: Option<BraveWeb>,
}

#[derive(Deserialize)]
struct BraveWeb {
    #[serde(default)]
    results: Vec<BraveResult>,
}

#[derive(Deserialize)]
struct BraveResult {
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    description: Option<String>,
}

impl SearchBackend for BraveSearch {
    fn name(&self) -> &str {
        "brave"
    }

    fn search<'a>(&'a self, query: &'a str, count: usize) -> SearchFuture<'a> {
        Box::pin(async move {
            let mut url = self.endpoint.clone();
            url.query_pairs_mut()
                .append_pair("q", query)
                .append_pair("count", &count.clamp(1, BRAVE_MAX_COUNT).to_string());
            let headers = [
                ("Accept", "application/json"),
                ("X-Subscription-Token", self.api_key.as_str()),
            ];
            let answer: BraveAnswer = get_json(self.name(), url, &headers).await?;
            Ok(answer
                .web
                .map(|w| w.results)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|r| {
                    Some(SearchHit {
                        url: r.url?,
                        title: r.title.unwrap_or_default(),
                        snippet: r.description.unwrap_or_default(),
                    })
                })
                .collect())
        })
    }
}

/// A SearXNG instance: `GET {base}/search?q=…&format=json` (the instance
/// must list `json` in `search.formats`); hits from
/// `results[].{title,url,content}`.
#[derive(Clone, Debug)]
pub struct SearxngSearch {
    search_url: url::Url,
}

impl SearxngSearch {
    /// A backend asking the instance at `base_url`, e.g.
    /// `http://127.0.0.1:8888` or `https://search.example.org/searx/`.
    ///
    /// # Errors
    ///
    /// `invalid_input` when `base_url` is not an http(s) URL.
    pub fn new(base_url: &str) -> Result<SearxngSearch> {
        let mut base = endpoint_url(base_url, "web_search.url")?;
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let search_url = base.join("search").map_err(|e| {
            Error::invalid_input(format!(
                "`web_search.url` `{base_url}` cannot hold /search: {e}"
            ))
        })?;
        Ok(SearxngSearch { search_url })
    }
}

#[derive(Deserialize)]
struct SearxngAnswer {
    #[serde(default)]
    results: Vec<SearxngResult>,
}

#[derive(Deserialize)]
struct SearxngResult {
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    content: Option<String>,
}

impl SearchBackend for SearxngSearch {
    fn name(&self) -> &str {
        "searxng"
    }

    fn search<'a>(&'a self, query: &'a str, _count: usize) -> SearchFuture<'a> {
        Box::pin(async move {
            let mut url = self.search_url.clone();
            url.query_pairs_mut()
                .append_pair("q", query)
                .append_pair("format", "json");
            let headers = [("Accept", "application/json")];
            let answer: SearxngAnswer = get_json(self.name(), url, &headers).await?;
            Ok(answer
                .results
                .into_iter()
                .filter_map(|r| {
                    Some(SearchHit {
                        url: r.url?,
                        title: r.title.unwrap_or_default(),
                        snippet: r.content.unwrap_or_default(),
                    })
                })
                .collect())
        })
    }
}

/// Parses a configured endpoint: an absolute http(s) URL.
fn endpoint_url(text: &str, key: &str) -> Result<url::Url> {
    let url = url::Url::parse(text.trim()).map_err(|e| {
        Error::invalid_input(format!(
            "`{key}` `{}` is not a URL: {e}",
            truncate_for_message(text)
        ))
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(Error::invalid_input(format!(
            "`{key}` `{}` must be an http or https URL",
            truncate_for_message(text)
        )));
    }
    Ok(url)
}

/// One GET to a backend, its JSON answer decoded.
async fn get_json<T: for<'de> Deserialize<'de>>(
    backend: &str,
    url: url::Url,
    headers: &[(&str, &str)],
) -> Result<T> {
    check_https(url.as_str())?;
    let client = client_builder()?
        .build()
        .map_err(|e| Error::internal(format!("the HTTP client cannot be built: {e}")))?;
    let mut request = client.get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let network = |what: String| {
        Error::new(
            ErrorKind::Network,
            format!("the {backend} search backend failed: {what}; try again later"),
        )
    };
    let mut response = request.send().await.map_err(|e| network(describe(&e)))?;
    let status = response.status();
    let (body, complete) = read_body(&mut response, MAX_ANSWER_BYTES)
        .await
        .map_err(|e| network(describe(&e)))?;
    if !status.is_success() {
        let quoted = truncate_for_message(
            &String::from_utf8_lossy(&body)
                .chars()
                .take(MAX_ERROR_BODY_CHARS)
                .collect::<String>(),
        );
        let kind = match status.as_u16() {
            429 => ErrorKind::Limit,
            401 | 403 => ErrorKind::Denied,
            _ => ErrorKind::Network,
        };
        return Err(Error::new(
            kind,
            format!(
                "the {backend} search backend answered {status}: {quoted}; {}",
                match kind {
                    ErrorKind::Limit => "its rate limit is reached, try again later",
                    ErrorKind::Denied =>
                        "it refused cubby's credentials or format (check the key, or that a \
                         SearXNG instance enables the json format)",
                    _ => "try again later",
                }
            ),
        ));
    }
    if !complete {
        return Err(network(format!(
            "its answer is larger than {MAX_ANSWER_BYTES} bytes"
        )));
    }
    serde_json::from_slice(&body)
        .map_err(|e| network(format!("its answer is not the expected JSON ({e})")))
}

/// What a `[web_search]` section gives.
pub(crate) enum Configured {
    /// No usable backend, and why (shown when `web_search` is called).
    None(String),
    /// A backend, and the key to redact.
    Ready(Arc<dyn SearchBackend>, Option<Secret>),
}

/// Builds the backend a `[web_search]` section names, reading its key with
/// `env`.
///
/// # Errors
///
/// `invalid_input` for a section that cannot work (a SearXNG without a URL,
/// a URL that does not parse). A missing key is not an error here: the
/// toolset still serves the other tools and `web_search` says what is
/// missing.
pub(crate) fn backend_from_config(
    config: &WebSearchConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Configured> {
    match config.backend {
        None => {
            if config.url.is_some() || config.api_key_env.is_some() {
                return Err(Error::invalid_input(
                    "`web_search` has a `url` or `api_key_env` but no `backend`; set \
                     backend = \"brave\" or \"searxng\"",
                ));
            }
            Ok(Configured::None(
                "no search backend is configured; set `[web_search] backend = \"brave\"` \
                 (key in BRAVE_API_KEY) or `backend = \"searxng\"` with `url`"
                    .into(),
            ))
        }
        Some(SearchBackendKind::Brave) => {
            let endpoint = config.url.as_deref().unwrap_or(BRAVE_ENDPOINT);
            endpoint_url(endpoint, "web_search.url")?;
            let var = config.api_key_env.as_deref().unwrap_or(BRAVE_API_KEY_ENV);
            if var.is_empty() {
                return Err(Error::invalid_input("`web_search.api_key_env` is empty"));
            }
            match env(var).filter(|k| !k.trim().is_empty()) {
                None => Ok(Configured::None(format!(
                    "the brave search backend needs an API key in the environment variable \
                     {var} of the cubby process, and it is not set"
                ))),
                Some(key) => {
                    let backend = BraveSearch::new(endpoint, key.clone())?;
                    let secret = Secret {
                        name: var.to_string(),
                        value: key,
                    };
                    Ok(Configured::Ready(Arc::new(backend), Some(secret)))
                }
            }
        }
        Some(SearchBackendKind::Searxng) => {
            if config.api_key_env.is_some() {
                return Err(Error::invalid_input(
                    "`web_search.api_key_env` applies to the brave backend only",
                ));
            }
            let Some(base) = config.url.as_deref() else {
                return Err(Error::invalid_input(
                    "`web_search` backend \"searxng\" needs `url`, the instance's base URL",
                ));
            };
            Ok(Configured::Ready(Arc::new(SearxngSearch::new(base)?), None))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(
        backend: Option<SearchBackendKind>,
        url: Option<&str>,
        env: Option<&str>,
    ) -> WebSearchConfig {
        WebSearchConfig {
            backend,
            url: url.map(str::to_string),
            api_key_env: env.map(str::to_string),
        }
    }

    #[test]
    fn brave_reads_its_key_from_the_environment_as_a_secret() {
        let env = |name: &str| (name == "MY_KEY").then(|| "k-123".to_string());
        let c = config(Some(SearchBackendKind::Brave), None, Some("MY_KEY"));
        match backend_from_config(&c, &env).unwrap() {
            Configured::Ready(b, Some(secret)) => {
                assert_eq!(b.name(), "brave");
                assert_eq!(secret.name, "MY_KEY");
                assert_eq!(secret.value, "k-123");
            }
            _ => panic!("expected a backend and a secret"),
        }
        let c = config(Some(SearchBackendKind::Brave), None, None);
        match backend_from_config(&c, &env).unwrap() {
            Configured::None(why) => assert!(why.contains("BRAVE_API_KEY"), "{why}"),
            _ => panic!("no key, no backend"),
        }
    }

    #[test]
    fn bad_sections_are_refused() {
        let env = |_: &str| None;
        for c in [
            config(Some(SearchBackendKind::Searxng), None, None),
            config(Some(SearchBackendKind::Searxng), Some("ftp://x"), None),
            config(
                Some(SearchBackendKind::Searxng),
                Some("http://x"),
                Some("K"),
            ),
            config(Some(SearchBackendKind::Brave), Some("not a url"), None),
            config(None, Some("http://x"), None),
        ] {
            assert!(backend_from_config(&c, &env).is_err(), "{c:?}");
        }
        assert!(matches!(
            backend_from_config(&WebSearchConfig::default(), &env),
            Ok(Configured::None(_))
        ));
    }

    #[test]
    fn searxng_keeps_the_base_path() {
        let s = SearxngSearch::new("http://127.0.0.1:8888").unwrap();
        assert_eq!(s.search_url.as_str(), "http://127.0.0.1:8888/search");
        let s = SearxngSearch::new("https://x.test/searx").unwrap();
        assert_eq!(s.search_url.as_str(), "https://x.test/searx/search");
    }

    #[test]
    fn the_key_stays_out_of_debug_output() {
        let b = BraveSearch::new(BRAVE_ENDPOINT, "sekrit").unwrap();
        assert!(!format!("{b:?}").contains("sekrit"));
    }
}
