//! The `kubernetes` provider: a cubby pod claimed from an agent-sandbox
//! warm pool (`deploy/kubernetes/`), then used as `remote`.
//!
//! What [`open`] does, in order:
//!
//! 1. Creates a `SandboxClaim` (`extensions.agents.x-k8s.io/v1beta1`) named
//!    `cubby-<random>` with `warmPoolRef` and `lifecycle.shutdownTime` (now
//!    plus `shutdown_after`, policy `Delete`): a claim a crashed cubby never
//!    deletes ends by itself.
//! 2. Watches the claim (`?watch=true`, by name) until its `Ready`
//!    condition is `True`, for at most `ready_timeout`; a timeout is a
//!    `timeout` error naming the claim and the condition's last reason.
//! 3. Takes the pod's address from the claim's `status.sandbox.podIPs`, else
//!    from the `Sandbox` it names (`podIPs`, else `serviceFQDN`).
//! 4. Binds the pod (`POST /v1/bind` with the pool key): the pod's server
//!    from then on accepts only the fresh token it answered.
//! 5. Opens a [`RemoteSandbox`] there with that token. Dropping it destroys
//!    the far sandbox, then deletes the claim ([`Claim`]'s drop).
//!
//! Any failure after step 1 deletes the claim before the error returns.
//!
//! The API server is reached with a bearer token and a CA bundle given in
//! [`ClaimOptions`] (in a cluster: the service account's); a kubeconfig's
//! other credentials (client certificates, exec plugins) are for `kubectl
//! proxy` to bring: point `api_server` at it.

use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant, SystemTime};

use crate::config::ProviderKind;
use crate::error::{Error, ErrorKind, Result};
use crate::remote::{RemoteOptions, RemoteSandbox};

/// The API group and version of claims.
pub const CLAIM_API: &str = "extensions.agents.x-k8s.io/v1beta1";
/// The API group and version of sandboxes.
pub const SANDBOX_API: &str = "agents.x-k8s.io/v1beta1";
/// Longest wait for a connection to the API server or a pod.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest time of one ordinary request to the API server.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest time a claim's delete may take when the sandbox ends.
pub const DELETE_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest answer read from the API server.
pub const MAX_API_BODY_BYTES: usize = 4 * 1024 * 1024;
/// Longest line of a watch stream.
pub const MAX_WATCH_LINE_BYTES: usize = 4 * 1024 * 1024;
/// Random bytes in a claim's name.
const CLAIM_NAME_RANDOM_BYTES: usize = 6;
/// The label every claim of cubby's carries.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

static RUNTIME: crate::net::RuntimeSlot = std::sync::OnceLock::new();

fn runtime() -> Result<&'static tokio::runtime::Runtime> {
    crate::net::service_runtime(&RUNTIME, 1, "cubby-kube", "the kubernetes provider")
}

/// Runs `fut` on the provider's runtime and waits for it on this thread.
fn block<T: Send + 'static>(
    fut: impl std::future::Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    let (tx, rx) = std_mpsc::channel();
    runtime()?.spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv()
        .unwrap_or_else(|_| Err(Error::internal("the kubernetes provider's runtime stopped")))
}

/// Where the warm pool is and how to reach it.
#[derive(Clone)]
pub struct ClaimOptions {
    /// The API server's base URL (`https://…`, or `http://127.0.0.1:8001`
    /// for `kubectl proxy`).
    pub api_server: String,
    /// A bearer token for the API server.
    pub api_token: Option<String>,
    /// The API server's CA bundle (a PEM file); `None`: the platform's
    /// roots.
    pub ca_file: Option<String>,
    /// The namespace of the pool and the claim.
    pub namespace: String,
    /// The SandboxWarmPool's name.
    pub warm_pool: String,
    /// The pool key: the pods' starting token.
    pub pool_key: String,
    /// The port the pods' `cubby serve` listens on.
    pub port: u16,
    /// Longest wait for the claim to be Ready.
    pub ready_timeout: Duration,
    /// The claim's `shutdownTime`, this far ahead.
    pub shutdown_after: Duration,
    /// A directory on this side whose tree the pod's new workspace starts
    /// with ([`RemoteOptions::upload`]).
    pub upload: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for ClaimOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimOptions")
            .field("api_server", &self.api_server)
            .field("api_token", &self.api_token.as_ref().map(|_| "[REDACTED]"))
            .field("ca_file", &self.ca_file)
            .field("namespace", &self.namespace)
            .field("warm_pool", &self.warm_pool)
            .field("pool_key", &"[REDACTED]")
            .field("port", &self.port)
            .field("ready_timeout", &self.ready_timeout)
            .field("shutdown_after", &self.shutdown_after)
            .field("upload", &self.upload)
            .finish()
    }
}

/// The API server connection.
#[derive(Clone)]
struct Api {
    http: reqwest::Client,
    base: String,
    auth: Option<reqwest::header::HeaderValue>,
    namespace: String,
}

impl Api {
    fn new(options: &ClaimOptions) -> Result<Api> {
        let tls = crate::net::gateway::tls_config(options.ca_file.as_deref())
            .map_err(|e| Error::invalid_input(format!("[kubernetes] ca_file: {e}")))?;
        let http = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never())
            .pool_max_idle_per_host(0)
            .connect_timeout(CONNECT_TIMEOUT)
            .tls_backend_preconfigured(tls)
            .build()
            .map_err(|e| {
                Error::internal(format!(
                    "cannot build the kubernetes provider's HTTP client: {e}"
                ))
            })?;
        let auth = match &options.api_token {
            Some(token) => {
                let mut v = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(|_| {
                        Error::invalid_input(
                            "the Kubernetes API token holds characters a header cannot carry",
                        )
                    })?;
                v.set_sensitive(true);
                Some(v)
            }
            None => None,
        };
        Ok(Api {
            http,
            base: options.api_server.trim_end_matches('/').to_string(),
            auth,
            namespace: options.namespace.clone(),
        })
    }

    fn claims(&self) -> String {
        format!(
            "{}/apis/{CLAIM_API}/namespaces/{}/sandboxclaims",
            self.base, self.namespace
        )
    }

    fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let req = self.http.request(method, url);
        match &self.auth {
            Some(auth) => req.header(reqwest::header::AUTHORIZATION, auth.clone()),
            None => req,
        }
    }

    /// Sends `req`; a JSON answer, or the API server's refusal as an error.
    async fn json(&self, what: &str, req: reqwest::RequestBuilder) -> Result<serde_json::Value> {
        let mut resp = req
            .timeout(REQUEST_TIMEOUT)
            .send()
            .await
            .map_err(|e| self.network(what, &e))?;
        let status = resp.status();
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.network(what, &e))? {
            if body.len() + chunk.len() > MAX_API_BODY_BYTES {
                return Err(Error::new(
                    ErrorKind::Network,
                    format!(
                        "the Kubernetes API at {} sent more than {MAX_API_BODY_BYTES} bytes \
                         ({what})",
                        self.base
                    ),
                ));
            }
            body.extend_from_slice(&chunk);
        }
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        if status.is_success() {
            return Ok(value);
        }
        let message = value
            .get("message")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("");
        let kind = match status.as_u16() {
            401 | 403 => ErrorKind::Denied,
            404 => ErrorKind::NotFound,
            _ => ErrorKind::Network,
        };
        Err(Error::new(
            kind,
            format!(
                "the Kubernetes API at {} answered {status} to {what}: {message}",
                self.base
            ),
        ))
    }

    fn network(&self, what: &str, e: &reqwest::Error) -> Error {
        Error::new(
            ErrorKind::Network,
            format!(
                "the Kubernetes API at {} did not answer ({what}: {}); check `api_server` \
                 (or that `kubectl proxy` runs)",
                self.base,
                crate::web::describe(e)
            ),
        )
    }
}

/// A claim, deleted when dropped.
pub struct Claim {
    api: Api,
    name: String,
}

impl Claim {
    /// The claim's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let api = self.api.clone();
        let name = self.name.clone();
        let url = format!("{}/{name}", api.claims());
        let deleted = block(async move {
            let req = api
                .request(reqwest::Method::DELETE, &url)
                .timeout(DELETE_TIMEOUT);
            match api.json("deleting the claim", req).await {
                Ok(_) => Ok(()),
                Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
            }
        });
        if let Err(e) = deleted {
            tracing::warn!(
                "the SandboxClaim {name} was not deleted ({}); its shutdownTime ends it",
                e.message()
            );
        }
    }
}

/// `n` random bytes as hex.
fn random_hex(n: usize) -> Result<String> {
    crate::artifact::store::random_hex(n)
        .map_err(|e| Error::internal(format!("cannot read /dev/urandom: {e}")))
}

/// `t` as RFC 3339 in UTC, whole seconds (`2026-12-02T17:15:00Z`).
pub fn rfc3339(t: SystemTime) -> String {
    const SECS_PER_DAY: u64 = 86_400;
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = i64::try_from(secs / SECS_PER_DAY).unwrap_or(0);
    let rem = secs % SECS_PER_DAY;
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

/// The claim's body.
fn claim_body(options: &ClaimOptions, name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": CLAIM_API,
        "kind": "SandboxClaim",
        "metadata": {
            "name": name,
            "namespace": options.namespace,
            "labels": { MANAGED_BY_LABEL: "cubby" },
        },
        "spec": {
            "warmPoolRef": { "name": options.warm_pool },
            "lifecycle": {
                "shutdownTime": rfc3339(SystemTime::now() + options.shutdown_after),
                "shutdownPolicy": "Delete",
            },
        },
    })
}

/// The `Ready` condition of `object`: whether it is `True`, and what it
/// says otherwise (reason and message).
fn ready(object: &serde_json::Value) -> (bool, String) {
    let conditions = object
        .pointer("/status/conditions")
        .and_then(serde_json::Value::as_array);
    let Some(cond) = conditions.and_then(|c| {
        c.iter()
            .find(|c| c.get("type").and_then(serde_json::Value::as_str) == Some("Ready"))
    }) else {
        return (false, "no Ready condition yet".to_string());
    };
    let field = |k: &str| {
        cond.get(k)
            .and_then(serde_json::Value::as_str)
            .unwrap_or("")
    };
    if field("status") == "True" {
        return (true, String::new());
    }
    (
        false,
        format!(
            "Ready is {} ({}: {})",
            if field("status").is_empty() {
                "unknown"
            } else {
                field("status")
            },
            field("reason"),
            field("message")
        ),
    )
}

/// The first pod IP in `object`'s `pointer`.
fn first_ip(object: &serde_json::Value, pointer: &str) -> Option<String> {
    object
        .pointer(pointer)
        .and_then(serde_json::Value::as_array)
        .and_then(|ips| ips.first())
        .and_then(serde_json::Value::as_str)
        .filter(|ip| ip.parse::<std::net::IpAddr>().is_ok())
        .map(str::to_string)
}

/// `host` as the host part of a URL (IPv6 in brackets).
fn url_host(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

/// Watches the claim until Ready or `deadline`: the claim's last state.
async fn wait_ready(
    api: &Api,
    name: &str,
    deadline: Instant,
    waited: Duration,
) -> Result<serde_json::Value> {
    let url = format!("{}/{name}", api.claims());
    let mut last: String;
    loop {
        let claim = api
            .json("reading the claim", api.request(reqwest::Method::GET, &url))
            .await?;
        let (is_ready, why) = ready(&claim);
        if is_ready {
            return Ok(claim);
        }
        last = why;
        let version = claim
            .pointer("/metadata/resourceVersion")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("")
            .to_string();
        let watch = format!(
            "{}?watch=true&fieldSelector=metadata.name%3D{name}&resourceVersion={version}",
            api.claims()
        );
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let stream = async {
            let mut resp = api
                .request(reqwest::Method::GET, &watch)
                .send()
                .await
                .map_err(|e| api.network("watching the claim", &e))?;
            // The version read is too old for a watch (410 Gone, after a
            // compaction): read the claim again and watch from there.
            if resp.status() == reqwest::StatusCode::GONE {
                return Ok(None);
            }
            if !resp.status().is_success() {
                return Err(Error::new(
                    ErrorKind::Network,
                    format!(
                        "the Kubernetes API at {} answered {} to watching the claim",
                        api.base,
                        resp.status()
                    ),
                ));
            }
            let mut line = Vec::new();
            while let Some(chunk) = resp
                .chunk()
                .await
                .map_err(|e| api.network("watching the claim", &e))?
            {
                for &b in chunk.iter() {
                    if b != b'\n' {
                        if line.len() < MAX_WATCH_LINE_BYTES {
                            line.push(b);
                        }
                        continue;
                    }
                    let event: serde_json::Value =
                        serde_json::from_slice(&line).unwrap_or_default();
                    line.clear();
                    match event.get("type").and_then(serde_json::Value::as_str) {
                        Some("DELETED") => {
                            return Err(Error::new(
                                ErrorKind::NotFound,
                                format!(
                                    "the SandboxClaim {name} was deleted while cubby waited for it"
                                ),
                            ));
                        }
                        Some("ADDED" | "MODIFIED") => {
                            if let Some(object) = event.get("object") {
                                let (is_ready, why) = ready(object);
                                if is_ready {
                                    return Ok(Some(object.clone()));
                                }
                                last = why;
                            }
                        }
                        // The watch expired (a Status of code 410 Gone):
                        // read the claim again and watch anew.
                        Some("ERROR")
                            if event
                                .pointer("/object/code")
                                .and_then(serde_json::Value::as_u64)
                                == Some(410) =>
                        {
                            return Ok(None);
                        }
                        Some("ERROR") => {
                            let message = event
                                .pointer("/object/message")
                                .and_then(serde_json::Value::as_str)
                                .unwrap_or("no message");
                            return Err(Error::new(
                                ErrorKind::Network,
                                format!(
                                    "the Kubernetes API at {} ended the watch of claim {name} \
                                     with an error: {}",
                                    api.base,
                                    crate::path::escape_name(message.as_bytes())
                                ),
                            ));
                        }
                        _ => {}
                    }
                }
            }
            // The server closed the watch (as it does now and then): read
            // the claim again and watch anew.
            Ok(None)
        };
        match tokio::time::timeout(left, stream).await {
            Ok(Ok(Some(claim))) => return Ok(claim),
            Ok(Ok(None)) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => break,
        }
    }
    Err(Error::new(
        ErrorKind::Timeout,
        format!(
            "the SandboxClaim {name} was not Ready after {}s (waited for its Ready condition: \
             {last}); check the warm pool `kubectl get sandboxwarmpool,sandboxclaim -n {}`, or \
             raise [kubernetes] ready_timeout",
            waited.as_secs(),
            api.namespace
        ),
    ))
}

/// The pod's host: the claim's `podIPs`, else its Sandbox's `podIPs` or
/// `serviceFQDN`.
async fn pod_host(api: &Api, name: &str, claim: &serde_json::Value) -> Result<String> {
    if let Some(ip) = first_ip(claim, "/status/sandbox/podIPs") {
        return Ok(ip);
    }
    let sandbox = claim
        .pointer("/status/sandbox/name")
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Network,
                format!("the SandboxClaim {name} is Ready but names no sandbox nor pod IP"),
            )
        })?;
    let url = format!(
        "{}/apis/{SANDBOX_API}/namespaces/{}/sandboxes/{sandbox}",
        api.base, api.namespace
    );
    let object = api
        .json(
            "reading the sandbox",
            api.request(reqwest::Method::GET, &url),
        )
        .await?;
    if let Some(ip) = first_ip(&object, "/status/podIPs") {
        return Ok(ip);
    }
    object
        .pointer("/status/serviceFQDN")
        .and_then(serde_json::Value::as_str)
        .filter(|h| !h.is_empty())
        .map(str::to_string)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Network,
                format!("the Sandbox {sandbox} of claim {name} has no pod IP nor service name"),
            )
        })
}

/// Exchanges the pool key for the claim's token at `url`.
async fn bind(url: &str, pool_key: &str, claim: &str) -> Result<String> {
    let http = crate::web::client_builder()?
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(REQUEST_TIMEOUT)
        .build()
        .map_err(|e| Error::internal(format!("cannot build an HTTP client: {e}")))?;
    let mut auth = reqwest::header::HeaderValue::from_str(&format!("Bearer {pool_key}"))
        .map_err(|_| Error::invalid_input("the pool key holds characters a header cannot carry"))?;
    auth.set_sensitive(true);
    let resp = http
        .post(format!(
            "{url}{}{}",
            crate::remote::wire::PREFIX,
            crate::remote::wire::BIND_PATH
        ))
        .header(reqwest::header::AUTHORIZATION, auth)
        .send()
        .await
        .map_err(|e| {
            Error::new(
                ErrorKind::Network,
                format!(
                    "the pod of claim {claim} at {url} did not answer the bind ({})",
                    crate::web::describe(&e)
                ),
            )
        })?;
    let status = resp.status();
    if !status.is_success() {
        let why = match status.as_u16() {
            401 => {
                "it refused the pool key (a pod bound before, or a pool_key_file that is not the pool's Secret)"
            }
            409 => "it is bound to another claim already",
            404 => "it was not started with `serve --host --host-bind`",
            _ => "it failed",
        };
        return Err(Error::new(
            ErrorKind::Denied,
            format!("the pod of claim {claim} at {url} answered {status} to the bind: {why}"),
        ));
    }
    let body = resp.bytes().await.map_err(|e| {
        Error::new(
            ErrorKind::Network,
            format!("the pod of claim {claim} broke off the bind ({e})"),
        )
    })?;
    let bound: crate::remote::wire::Bound = serde_json::from_slice(&body).map_err(|e| {
        Error::new(
            ErrorKind::Network,
            format!("the pod of claim {claim} sent a malformed bind answer ({e})"),
        )
    })?;
    Ok(bound.token)
}

/// Checks that the pod just bound at `url` holds no sandbox: one made
/// before the bind (by whoever else holds the pool's key; a cubby pod
/// refuses that, red-team pass 6 F2) would outlive it beside the claim's.
async fn holds_nothing(url: &str, token: &str, claim: &str) -> Result<()> {
    let http = crate::web::client_builder()?
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(REQUEST_TIMEOUT)
        .build()
        .map_err(|e| Error::internal(format!("cannot build an HTTP client: {e}")))?;
    let mut auth =
        reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
            Error::new(
                ErrorKind::Network,
                "the pod answered a token a header cannot carry",
            )
        })?;
    auth.set_sensitive(true);
    let listed = async {
        let resp = http
            .get(format!("{url}{}/sandboxes", crate::remote::wire::PREFIX))
            .header(reqwest::header::AUTHORIZATION, auth)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| crate::web::describe(&e))?;
        let body = resp.bytes().await.map_err(|e| e.to_string())?;
        serde_json::from_slice::<Vec<String>>(&body).map_err(|e| e.to_string())
    };
    match listed.await {
        Ok(ids) if ids.is_empty() => Ok(()),
        Ok(ids) => Err(Error::new(
            ErrorKind::Denied,
            format!(
                "the pod of claim {claim} at {url} held {} sandbox(es) made before the bind; \
                 it is not used (check who holds the pool's key)",
                ids.len()
            ),
        )),
        Err(why) => Err(Error::new(
            ErrorKind::Network,
            format!("the pod of claim {claim} at {url} did not list its sandboxes ({why})"),
        )),
    }
}

/// Claims a pod from the warm pool and opens a sandbox on it (see the
/// module's docs); the claim is deleted when the sandbox is dropped.
///
/// # Errors
///
/// `network` or `denied` from the API server or the pod; `timeout` naming
/// the claim when it is not Ready in time (the claim deleted then, as on
/// every failure after it was made).
pub fn open(options: &ClaimOptions) -> Result<RemoteSandbox> {
    let api = Api::new(options)?;
    let name = format!("cubby-{}", random_hex(CLAIM_NAME_RANDOM_BYTES)?);
    let body = claim_body(options, &name);
    {
        let api = api.clone();
        block(async move {
            let req = api
                .request(reqwest::Method::POST, &api.claims())
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(serde_json::to_vec(&body).unwrap_or_default());
            api.json("creating a SandboxClaim", req).await
        })?;
    }
    let claim = Claim {
        api: api.clone(),
        name: name.clone(),
    };
    tracing::info!("claimed {name} from warm pool {}", options.warm_pool);
    let deadline = Instant::now() + options.ready_timeout;
    let (waited, port, pool_key) = (
        options.ready_timeout,
        options.port,
        options.pool_key.clone(),
    );
    let (url, token) = block(async move {
        let ready = wait_ready(&api, &name, deadline, waited).await?;
        let host = pod_host(&api, &name, &ready).await?;
        let url = format!("http://{}:{port}", url_host(&host));
        let token = bind(&url, &pool_key, &name).await?;
        holds_nothing(&url, &token, &name).await?;
        Ok((url, token))
    })?;
    let sandbox = RemoteSandbox::open(&RemoteOptions {
        url,
        token,
        root: None,
        upload: options.upload.clone(),
    })?;
    Ok(sandbox.leased(ProviderKind::Kubernetes, Box::new(claim)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_in_utc() {
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_695_700);
        assert_eq!(rfc3339(t), "2025-12-02T17:15:00Z");
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn ready_reads_the_condition() {
        let not = serde_json::json!({"status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "Pending", "message": "no pod"}]}});
        let (r, why) = ready(&not);
        assert!(!r);
        assert!(why.contains("Pending") && why.contains("no pod"), "{why}");
        let yes =
            serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        assert!(ready(&yes).0);
        assert!(!ready(&serde_json::json!({})).0);
    }
}
