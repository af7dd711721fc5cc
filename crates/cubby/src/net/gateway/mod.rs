//! The scoped gateway (SPEC §5.5): an HTTP API a command reaches inside its
//! sandbox, that forwards what the routes allow to one upstream, over
//! HTTPS, with a credential the command never sees.
//!
//! ```text
//! command ─► http://127.0.0.1:<port> in the sandbox's network namespace
//!   │ (the holder opens the listener there and hands it to cubby, as for
//!   │  the egress proxy; it exists with network `off` too)
//!   ▼ cubby, host side (`http.rs`): one HTTP/1.1 request at a time
//!   1. the head read raw (10 s at most), HTTP/1.1 origin form only:
//!      CONNECT, absolute form, `Upgrade`, Content-Length with
//!      Transfer-Encoding or twice → 400
//!   2. the raw target checked before any decoding (`path.rs`) → 400
//!   3. the run's token (`Authorization: Bearer …`) → 401
//!   4. method + segments against the routes (`route.rs`) → 403
//!   5. the body read whole, capped (`max_body`) → 413
//!   6. forwarded: the checked raw path under `base_url`, request headers
//!      stripped (hop-by-hop, Authorization, Cookie, Forwarded,
//!      X-Forwarded-*, method overrides), the credential header added
//!   7. the answer: redirects returned (never followed), Set-Cookie and
//!      hop-by-hop dropped, the credential's value redacted (headers and
//!      body, streamed), the body capped (`max_response`)
//!   8. an event: method, route, status, bytes, ms
//! ```
//!
//! **Tokens.** Each run (a [`crate::Toolset`]) opens a [`GatewayRun`]: a
//! random token its commands get as `CUBBY_GATEWAY_TOKEN`, registered as a
//! secret (redacted). Dropping the run revokes it; a token is known only to
//! the sandbox that issued it, so another sandbox's gateway answers 401.
//!
//! - `path.rs`: the raw target's checks.
//! - `route.rs`: routes, parsed and matched.
//! - `http.rs`: the connection loop, the checks on the head and body, the
//!   forwarding and the answer's filtering.

mod http;
mod path;
mod route;

use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use hyper::header::{HeaderName, HeaderValue};
use tokio::sync::watch;

use super::until_closed;
use crate::config::{
    GATEWAY_MAX_BODY_BYTES, GATEWAY_MAX_RESPONSE_BYTES, GatewayConfig, GatewayRoute,
};
use crate::error::{Error, Result};
use crate::output::{Redactor, Secret};
use crate::sync::lock;
use route::Route;

/// The variable commands find a lone gateway's URL in.
pub const GATEWAY_URL_ENV: &str = "CUBBY_GATEWAY_URL";
/// The variable commands find their run's token in.
pub const GATEWAY_TOKEN_ENV: &str = "CUBBY_GATEWAY_TOKEN";
/// Open connections one gateway listener holds; more are answered 503.
pub const MAX_GATEWAY_CONNECTIONS: usize = 1024;
/// Requests one gateway listener forwards at once (each holds its body,
/// at most `max_body`); the others wait for a turn.
pub const MAX_GATEWAY_IN_FLIGHT: usize = 64;
/// Events a sandbox's gateways keep (the oldest go first).
pub const MAX_GATEWAY_EVENTS: usize = 1024;
/// The longest gateway name.
const MAX_NAME_CHARS: usize = 24;
/// Random bytes in a run's token.
const TOKEN_RANDOM_BYTES: usize = 24;
/// How long the gateway tries to connect to its upstream.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the upstream may take between two reads.
const UPSTREAM_READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Idle connections to an upstream kept for reuse.
const POOL_IDLE: usize = 32;
/// Worker threads of the gateways' runtime.
const WORKER_THREADS: usize = 2;

/// One `[gateway.<name>]` as a sandbox serves it: the config and the
/// credential's value, read from cubby's environment.
#[derive(Clone, PartialEq, Eq)]
pub struct GatewayOptions {
    /// The gateway's name (`[gateway.<name>]`).
    pub name: String,
    /// Its config.
    pub config: GatewayConfig,
    /// The value of `credential.secret` (`None`: the credential's variable
    /// is unset, and the gateway adds no header; or no credential).
    pub credential: Option<String>,
}

impl std::fmt::Debug for GatewayOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayOptions")
            .field("name", &self.name)
            .field("config", &self.config)
            .field("credential", &self.credential.as_ref().map(|_| "…"))
            .finish()
    }
}

/// One request the gateway answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayEvent {
    /// The gateway's name.
    pub gateway: String,
    /// The request's method (as sent; at most 16 chars).
    pub method: String,
    /// The route that matched (`None`: refused before or at routing).
    pub route: Option<String>,
    /// The status the command got.
    pub status: u16,
    /// Request body bytes forwarded.
    pub bytes_in: u64,
    /// Response body bytes relayed.
    pub bytes_out: u64,
    /// From the end of the request's head to the end of the answer.
    pub ms: u64,
}

/// A checked `[gateway.<name>]`, ready to forward.
pub(crate) struct Gateway {
    name: String,
    /// `base_url` without a trailing `/`.
    base: String,
    /// The base URL's path prefix (`""` or `/api/v3`).
    base_path: String,
    routes: Vec<Route>,
    credential: Option<(HeaderName, HeaderValue)>,
    /// The credential's value → `[REDACTED:…]`.
    redactor: Redactor,
    /// The credential's value in lower case (header names are).
    lower_value: Option<String>,
    max_response: u64,
    client: OnceLock<std::result::Result<reqwest::Client, String>>,
    tls: rustls::ClientConfig,
}

/// The checks of `[gateway.<name>]` at config load (the credential's value
/// is not read).
///
/// # Errors
///
/// `invalid_input` naming `gateway.<name>` and the key.
pub(crate) fn check_gateway(name: &str, config: &GatewayConfig) -> Result<()> {
    Gateway::new(&GatewayOptions {
        name: name.to_string(),
        config: config.clone(),
        credential: None,
    })
    .map(drop)
}

impl Gateway {
    fn new(options: &GatewayOptions) -> Result<Gateway> {
        let name = &options.name;
        let config = &options.config;
        let bad =
            |key: &str, why: String| Error::invalid_input(format!("`gateway.{name}.{key}`: {why}"));
        let name_ok = name.len() <= MAX_NAME_CHARS
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !name_ok {
            return Err(Error::invalid_input(format!(
                "`gateway.{name}`: a gateway's name is a lower-case letter, then up to {} \
                 lower-case letters, digits or `-`",
                MAX_NAME_CHARS - 1
            )));
        }
        let url = url::Url::parse(&config.base_url).map_err(|e| {
            bad(
                "base_url",
                format!("`{}` is not a URL: {e}", config.base_url),
            )
        })?;
        if url.scheme() != "https" {
            return Err(bad(
                "base_url",
                format!(
                    "`{}` must be https: the gateway sends a credential to it",
                    config.base_url
                ),
            ));
        }
        if url.host_str().is_none()
            || url.query().is_some()
            || url.fragment().is_some()
            || !url.username().is_empty()
            || url.password().is_some()
        {
            return Err(bad(
                "base_url",
                format!(
                    "`{}` must be `https://host[:port][/prefix]`, without user, query or fragment",
                    config.base_url
                ),
            ));
        }
        let base = url.as_str().trim_end_matches('/').to_string();
        let base_path = url.path().trim_end_matches('/').to_string();
        if config.routes.is_empty() {
            return Err(bad(
                "routes",
                "is empty; list what commands may call, e.g. [\"GET /repos/:owner/:repo\"]".into(),
            ));
        }
        let default_body = config.max_body.map_or(GATEWAY_MAX_BODY_BYTES, |b| b.0);
        let mut routes = Vec::new();
        for entry in &config.routes {
            let max_body = match entry {
                GatewayRoute::Plain(_) => default_body,
                GatewayRoute::Limited { max_body, .. } => max_body.0,
            };
            let route = Route::parse(entry.text(), max_body).map_err(|why| bad("routes", why))?;
            if routes.iter().any(|r: &Route| r.text == route.text) {
                return Err(bad("routes", format!("`{}` is listed twice", route.text)));
            }
            routes.push(route);
        }
        let credential = match &config.credential {
            None => None,
            Some(c) => {
                if c.secret.is_empty() || c.secret.contains(['=', '\0']) {
                    return Err(bad(
                        "credential.secret",
                        "must name an environment variable".into(),
                    ));
                }
                let header = HeaderName::from_bytes(c.header.trim().as_bytes()).map_err(|_| {
                    bad(
                        "credential.header",
                        format!("`{}` is not a header name", c.header),
                    )
                })?;
                if c.format.matches("{}").count() != 1 {
                    return Err(bad(
                        "credential.format",
                        format!(
                            "`{}` must hold `{{}}` once, where the secret goes",
                            c.format
                        ),
                    ));
                }
                match &options.credential {
                    None => None,
                    Some(value) => {
                        let text = c.format.replacen("{}", value, 1);
                        let mut value = HeaderValue::from_str(&text).map_err(|_| {
                            bad(
                                "credential",
                                format!(
                                    "the value of `{}` cannot be sent in a header (control \
                                     characters)",
                                    c.secret
                                ),
                            )
                        })?;
                        value.set_sensitive(true);
                        Some((header, value))
                    }
                }
            }
        };
        let secret = options.credential.clone().filter(|v| !v.is_empty());
        let secret_name = config
            .credential
            .as_ref()
            .map_or_else(String::new, |c| c.secret.clone());
        let redactor = Redactor::new(
            &secret
                .iter()
                .flat_map(|v| credential_forms(v))
                .map(|value| Secret {
                    name: secret_name.clone(),
                    value,
                })
                .collect::<Vec<_>>(),
        )?;
        let tls = tls_config(config.ca_file.as_deref()).map_err(|why| bad("ca_file", why))?;
        Ok(Gateway {
            name: name.clone(),
            base,
            base_path,
            routes,
            credential,
            redactor,
            lower_value: secret.map(|v| v.to_ascii_lowercase()),
            max_response: config
                .max_response
                .map_or(GATEWAY_MAX_RESPONSE_BYTES, |b| b.0),
            client: OnceLock::new(),
            tls,
        })
    }

    /// The HTTPS client (made on the gateways' runtime, at first use).
    fn client(&self) -> std::result::Result<&reqwest::Client, String> {
        self.client
            .get_or_init(|| {
                reqwest::Client::builder()
                    .no_proxy()
                    .redirect(reqwest::redirect::Policy::none())
                    .retry(reqwest::retry::never())
                    .referer(false)
                    .no_gzip()
                    .no_brotli()
                    .connect_timeout(CONNECT_TIMEOUT)
                    .read_timeout(UPSTREAM_READ_TIMEOUT)
                    .pool_max_idle_per_host(POOL_IDLE)
                    .tls_backend_preconfigured(self.tls.clone())
                    .build()
                    .map_err(|e| format!("the gateway's HTTPS client cannot be built: {e}"))
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The variable its URL is in: `CUBBY_GATEWAY_<NAME>_URL`.
    fn url_env(&self) -> String {
        format!(
            "CUBBY_GATEWAY_{}_URL",
            self.name.to_ascii_uppercase().replace('-', "_")
        )
    }
}

/// rustls with the ring provider: the roots of `ca_file` only, or the
/// platform's.
pub(crate) fn tls_config(
    ca_file: Option<&str>,
) -> std::result::Result<rustls::ClientConfig, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let mut config = match ca_file {
        Some(file) => {
            let mut roots = rustls::RootCertStore::empty();
            let certs = CertificateDer::pem_file_iter(file)
                .map_err(|e| format!("`{file}` cannot be read as PEM: {e}"))?;
            for cert in certs {
                let cert = cert.map_err(|e| format!("`{file}`: {e}"))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("`{file}`: a certificate is not usable: {e}"))?;
            }
            if roots.is_empty() {
                return Err(format!("`{file}` holds no certificate"));
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        None => {
            let verifier = rustls_platform_verifier::Verifier::new(provider).map_err(|e| {
                format!("the system's CA certificates cannot be used ({e}); give a `ca_file`")
            })?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verifier))
                .with_no_client_auth()
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The tokens of a sandbox's live runs, and its recent events.
#[derive(Default)]
struct Shared {
    /// Token → the run's event log.
    live: Mutex<HashMap<String, Arc<RunLog>>>,
    events: Mutex<VecDeque<GatewayEvent>>,
}

impl Shared {
    fn run_of(&self, token: &str) -> Option<Arc<RunLog>> {
        lock(&self.live).get(token).cloned()
    }

    fn record(&self, event: GatewayEvent, run: Option<&RunLog>) {
        tracing::info!(
            gateway = %event.gateway,
            method = %event.method,
            route = event.route.as_deref().unwrap_or("-"),
            status = event.status,
            bytes_in = event.bytes_in,
            bytes_out = event.bytes_out,
            ms = event.ms,
            "gateway request"
        );
        if let Some(run) = run {
            push_capped(&mut lock(&run.events), event.clone());
        }
        push_capped(&mut lock(&self.events), event);
    }
}

fn push_capped(events: &mut VecDeque<GatewayEvent>, event: GatewayEvent) {
    if events.len() == MAX_GATEWAY_EVENTS {
        events.pop_front();
    }
    events.push_back(event);
}

/// One run's requests.
#[derive(Default)]
struct RunLog {
    events: Mutex<VecDeque<GatewayEvent>>,
}

/// Shortest encoded form of a credential that is redacted besides the
/// value itself (shorter ones would hide unrelated bytes).
const MIN_CREDENTIAL_FORM_BYTES: usize = 8;

/// The credential's value and the forms an origin commonly reflects it in
/// (red-team pass 11, G1): lower and upper case, JSON with `\/`,
/// percent-encoded, and base64 (standard and URL-safe, of the value alone:
/// found where the value started a run of 3-byte groups). Other encodings
/// an origin may apply are not caught.
fn credential_forms(value: &str) -> Vec<String> {
    use base64::Engine;
    let mut forms = vec![value.to_string()];
    let whole_groups = value.len() / 3 * 3;
    let candidates = [
        value.to_ascii_lowercase(),
        value.to_ascii_uppercase(),
        value.replace('/', "\\/"),
        percent_encoding::utf8_percent_encode(value, percent_encoding::NON_ALPHANUMERIC)
            .to_string(),
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(&value.as_bytes()[..whole_groups]),
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&value.as_bytes()[..whole_groups]),
    ];
    for form in candidates {
        if form.len() >= MIN_CREDENTIAL_FORM_BYTES && !forms.contains(&form) {
            forms.push(form);
        }
    }
    forms
}

/// The gateways of one sandbox: checked, with their tokens.
pub struct Gateways {
    list: Vec<Arc<Gateway>>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Gateways {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateways")
            .field(
                "names",
                &self.list.iter().map(|g| &g.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Gateways {
    /// Checks `options`; `None` when there are none.
    ///
    /// # Errors
    ///
    /// `invalid_input` naming the gateway and key that cannot work.
    pub(crate) fn new(options: &[GatewayOptions]) -> Result<Option<Gateways>> {
        if options.is_empty() {
            return Ok(None);
        }
        let list = options
            .iter()
            .map(|o| Gateway::new(o).map(Arc::new))
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(Gateways {
            list,
            shared: Arc::default(),
        }))
    }

    /// How many listeners the sandbox opens: one a gateway.
    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// Serves `listeners` (listening TCP sockets, one a gateway in order,
    /// whatever their network namespace) until the handle drops.
    ///
    /// # Errors
    ///
    /// `internal` when a socket or the runtime cannot be used.
    pub(crate) fn serve(&self, listeners: Vec<OwnedFd>) -> Result<GatewayServers> {
        let internal =
            |e: &dyn std::fmt::Display| Error::internal(format!("the gateway cannot start: {e}"));
        let runtime = runtime()?;
        let (alive, watch) = watch::channel(());
        let mut env = Vec::new();
        for (gateway, fd) in self.list.iter().zip(listeners) {
            let listener = std::net::TcpListener::from(fd);
            let port = listener.local_addr().map_err(|e| internal(&e))?.port();
            listener.set_nonblocking(true).map_err(|e| internal(&e))?;
            let listener = {
                let _entered = runtime.enter();
                tokio::net::TcpListener::from_std(listener).map_err(|e| internal(&e))?
            };
            let url = format!("http://127.0.0.1:{port}");
            if self.list.len() == 1 {
                env.push((GATEWAY_URL_ENV.to_string(), url.clone()));
            }
            env.push((gateway.url_env(), url));
            let ctx = Arc::new(http::Listener::new(
                gateway.clone(),
                self.shared.clone(),
                watch.clone(),
            ));
            runtime.spawn(until_closed(watch.clone(), http::accept(listener, ctx)));
        }
        Ok(GatewayServers { env, _alive: alive })
    }

    /// A new run's token, live until the [`GatewayRun`] drops.
    ///
    /// # Errors
    ///
    /// `internal` when no random bytes can be read.
    pub fn open_run(&self) -> Result<GatewayRun> {
        let token = random_token()?;
        let log = Arc::new(RunLog::default());
        lock(&self.shared.live).insert(token.clone(), log.clone());
        Ok(GatewayRun {
            token,
            shared: self.shared.clone(),
            log,
        })
    }

    /// The latest requests of every run, oldest first (at most
    /// [`MAX_GATEWAY_EVENTS`]).
    pub fn events(&self) -> Vec<GatewayEvent> {
        lock(&self.shared.events).iter().cloned().collect()
    }
}

/// Running listeners; dropping the handle closes them and ends every
/// connection.
pub(crate) struct GatewayServers {
    env: Vec<(String, String)>,
    _alive: watch::Sender<()>,
}

impl std::fmt::Debug for GatewayServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayServers")
            .field("env", &self.env)
            .finish()
    }
}

impl GatewayServers {
    /// The variables every command gets: each gateway's URL.
    pub(crate) fn env(&self) -> &[(String, String)] {
        &self.env
    }
}

/// One run's hold on a sandbox's gateways: its token, revoked when this
/// drops.
pub struct GatewayRun {
    token: String,
    shared: Arc<Shared>,
    log: Arc<RunLog>,
}

impl std::fmt::Debug for GatewayRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayRun").finish_non_exhaustive()
    }
}

impl GatewayRun {
    /// The token commands present (`Authorization: Bearer <token>`); a
    /// secret: redact it.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// This run's requests, oldest first (at most [`MAX_GATEWAY_EVENTS`]).
    pub fn events(&self) -> Vec<GatewayEvent> {
        lock(&self.log.events).iter().cloned().collect()
    }
}

impl GatewayRun {
    /// Refuses the run's token from now on (401), as when it is dropped:
    /// the run has ended (SPEC §5.5), whoever still holds a clone of its
    /// toolset. Calling it again does nothing.
    pub(crate) fn revoke(&self) {
        lock(&self.shared.live).remove(&self.token);
    }
}

impl Drop for GatewayRun {
    fn drop(&mut self) {
        self.revoke();
    }
}

/// `cubby-gw-<48 hex digits>`.
fn random_token() -> Result<String> {
    use std::io::Read;
    let mut random = [0u8; TOKEN_RANDOM_BYTES];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut random))
        .map_err(|e| Error::internal(format!("cannot read /dev/urandom: {e}")))?;
    let mut out = String::from("cubby-gw-");
    for b in random {
        out.push_str(&format!("{b:02x}"));
    }
    Ok(out)
}

/// The runtime every sandbox's gateways run on.
fn runtime() -> Result<&'static tokio::runtime::Runtime> {
    static RUNTIME: super::RuntimeSlot = std::sync::OnceLock::new();
    super::service_runtime(&RUNTIME, WORKER_THREADS, "cubby-gateway", "the gateway")
}
