//! The network layer below the sandbox: web addresses, the `[network]`
//! rules, name resolution and the egress proxy.
//!
//! The Linux provider's commands reach the network only through the egress
//! proxy ([`EgressProxy`]); the web tools (`crate::web`, a layer above the
//! sandbox) fetch through the same rules and resolver. Nothing here knows a
//! tool or a sandbox.
//!
//! - `address.rs`: parsing and checking URLs and host names.
//! - `rules.rs`: [`NetRules`], the compiled `[network]` section (allowed and
//!   denied domains, refused address ranges, `allowed_cidrs`).
//! - `proxy.rs`: the egress proxy and its secret injection.
//! - `gateway/`: the scoped gateway (`[gateway.<name>]`, SPEC §5.5).
//! - `server.rs`: the accept loop of cubby's own HTTP servers (`serve`'s
//!   `/mcp` and `/v1`): header timeout, connection caps, body budget.

mod address;
pub(crate) mod gateway;
mod proxy;
mod rules;
mod server;

use std::net::{IpAddr, ToSocketAddrs};
use std::sync::Arc;

use crate::error::{Error, ErrorKind, Result};

pub use address::MAX_URL_CHARS;
pub(crate) use address::{Host, WebUrl};
pub use gateway::{
    GATEWAY_TOKEN_ENV, GATEWAY_URL_ENV, GatewayEvent, GatewayOptions, GatewayRun, Gateways,
    MAX_GATEWAY_CONNECTIONS, MAX_GATEWAY_EVENTS, MAX_GATEWAY_IN_FLIGHT,
};
pub(crate) use gateway::{GatewayServers, check_gateway};
pub(crate) use proxy::{Egress, EgressProxy, check_injection};
pub use proxy::{EgressOptions, Injection, MAX_EGRESS_CONNECTIONS};
pub(crate) use rules::NetRules;
pub use server::{
    BODY_GRACE, BODY_STALL_TIMEOUT, BodyBudget, BodyPace, BodyReservation, CONNECTION_FD_SHARE,
    ConnectionLimits, HEADER_READ_TIMEOUT, MAX_BODY_BUDGET_BYTES, MAX_CONNECTIONS,
    MAX_CONNECTIONS_PER_PEER, MIN_BODY_BYTES_PER_SEC, PacedBody, serve_http1,
};

/// The slot of a service's runtime: made at its first use, kept by the
/// process (or why it could not start).
pub(crate) type RuntimeSlot =
    std::sync::OnceLock<std::result::Result<tokio::runtime::Runtime, String>>;

/// The runtime of a host-side service (the egress proxy, the gateway):
/// `threads` workers named `name`, made once in `slot`.
///
/// # Errors
///
/// `internal` naming `what` when the runtime cannot start.
pub(crate) fn service_runtime(
    slot: &'static RuntimeSlot,
    threads: usize,
    name: &str,
    what: &str,
) -> Result<&'static tokio::runtime::Runtime> {
    slot.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name(name)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| Error::internal(format!("{what}'s runtime cannot start: {e}")))
}

/// Runs `work` until it ends or the sender of `alive` (the service's
/// handle) is dropped.
pub(crate) async fn until_closed(
    mut alive: tokio::sync::watch::Receiver<()>,
    work: impl std::future::Future<Output = ()>,
) {
    tokio::select! {
        () = work => {}
        () = async { while alive.changed().await.is_ok() {} } => {}
    }
}

/// Turns a host name into addresses for `web_fetch`.
///
/// Every address a resolver returns is checked against the refused ranges
/// and `allowed_cidrs` before anything connects, and the connection goes to
/// exactly those addresses; a resolver cannot widen what is reachable. The
/// default is [`SystemResolver`]; tests and embedders may pin names.
pub trait Resolver: Send + Sync {
    /// The addresses of `host`: a lower-case ASCII domain name, possibly
    /// with a trailing dot. Called on a blocking thread.
    ///
    /// # Errors
    ///
    /// Any I/O error; the model sees it as a `network` error.
    fn resolve(&self, host: &str) -> std::io::Result<Vec<IpAddr>>;
}

/// The operating system's resolver (`getaddrinfo`).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve(&self, host: &str) -> std::io::Result<Vec<IpAddr>> {
        Ok((host, 0u16).to_socket_addrs()?.map(|a| a.ip()).collect())
    }
}

/// The addresses of `host`: an IP literal is its own answer.
///
/// # Errors
///
/// `network` when the name does not resolve or has no address.
pub(crate) async fn resolve(host: &Host, resolver: &Arc<dyn Resolver>) -> Result<Vec<IpAddr>> {
    let ips: Vec<IpAddr> = match host {
        Host::Ip(ip) => vec![*ip],
        Host::Domain(name) => {
            let resolver = resolver.clone();
            let query = name.clone();
            let answer = tokio::task::spawn_blocking(move || resolver.resolve(&query))
                .await
                .map_err(|_| Error::internal("the resolver failed unexpectedly"))?;
            answer.map_err(|e| {
                Error::new(
                    ErrorKind::Network,
                    format!("`{name}` cannot be resolved: {e}; check the host name"),
                )
            })?
        }
    };
    if ips.is_empty() {
        return Err(Error::new(
            ErrorKind::Network,
            format!("`{host}` has no addresses; check the host name"),
        ));
    }
    Ok(ips)
}

/// Why `ip` (an address of `host`) may not be reached, in words.
pub(crate) fn address_refusal(host: &Host, ip: IpAddr, rules: &NetRules) -> Option<String> {
    let range = rules.address_refusal(ip)?;
    let what = match host {
        Host::Ip(_) => format!("`{host}` is"),
        Host::Domain(_) => format!("`{host}` resolves to {ip},"),
    };
    Some(format!(
        "{what} a {range} address; cubby reaches only public addresses \
         unless `network.allowed_cidrs` lists the range"
    ))
}
