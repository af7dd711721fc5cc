//! The `[network]` rules as the web tools apply them: domain lists on every
//! host (requested, each redirect hop, each search result) and the address
//! ranges refused after DNS resolution.
//!
//! Precedence for a host, in the order the code applies it:
//!
//! 1. an entry of `denied_domains` covers it: `denied` (denial wins);
//! 2. `allowed_domains` is not empty and no entry covers it: `denied`;
//! 3. otherwise allowed.
//!
//! An entry covers itself and its subdomains: `example.com` covers
//! `example.com` and `docs.example.com`, not `badexample.com`. IP literals
//! are covered only by the same address written as an entry.
//!
//! An address is refused when it lies in a range of [`refused_range`] and no
//! `allowed_cidrs` entry contains it (IPv4-mapped IPv6 addresses are compared
//! as the IPv4 address they carry).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use super::address::{Host, parse_domain};
use crate::config::NetworkConfig;
use crate::error::{Error, ErrorKind, Result};
use crate::output::truncate_for_message;

/// The `[network]` rules, parsed once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct NetRules {
    allowed: Vec<Host>,
    denied: Vec<Host>,
    cidrs: Vec<IpNet>,
}

impl NetRules {
    /// Parses the domain lists and CIDRs.
    ///
    /// # Errors
    ///
    /// `invalid_input` naming the key and the entry that does not parse.
    pub(crate) fn from_config(config: &NetworkConfig) -> Result<NetRules> {
        let list = |key: &str, entries: &[String]| -> Result<Vec<Host>> {
            entries
                .iter()
                .map(|e| {
                    parse_domain(e).map_err(|why| {
                        Error::invalid_input(format!(
                            "`network.{key}` entry `{}` is not a domain: {why}",
                            truncate_for_message(e)
                        ))
                    })
                })
                .collect()
        };
        let cidrs = config
            .allowed_cidrs
            .iter()
            .map(|c| parse_cidr(c))
            .collect::<Result<Vec<_>>>()?;
        Ok(NetRules {
            allowed: list("allowed_domains", &config.allowed_domains)?,
            denied: list("denied_domains", &config.denied_domains)?,
            cidrs,
        })
    }

    /// Whether the domain lists let the web tools reach `host`.
    ///
    /// # Errors
    ///
    /// `denied`, naming the entry (or the missing one) that decided.
    pub(crate) fn check_host(&self, host: &Host) -> Result<()> {
        if let Some(entry) = self.denied.iter().find(|e| covers(e, host)) {
            return Err(Error::denied(format!(
                "`{host}` is denied by the `network.denied_domains` entry `{}`; \
                 use another source",
                entry.match_name()
            )));
        }
        if !self.allowed.is_empty() && !self.allowed.iter().any(|e| covers(e, host)) {
            let names: Vec<String> = self.allowed.iter().map(Host::match_name).collect();
            return Err(Error::denied(format!(
                "`{host}` is not covered by `network.allowed_domains` ({}); only those \
                 domains and their subdomains can be reached",
                truncate_for_message(&names.join(", "))
            )));
        }
        Ok(())
    }

    /// True when the domain lists let the web tools reach `host`.
    pub(crate) fn host_allowed(&self, host: &Host) -> bool {
        self.check_host(host).is_ok()
    }

    /// Why `ip` may not be reached (a range name), or `None` when it may.
    pub(crate) fn address_refusal(&self, ip: IpAddr) -> Option<&'static str> {
        let reason = refused_range(ip)?;
        let canonical = ip.to_canonical();
        let listed = self
            .cidrs
            .iter()
            .any(|net| net.contains(&ip) || net.contains(&canonical));
        (!listed).then_some(reason)
    }
}

/// Parses an `allowed_cidrs` entry: `10.0.0.0/8`, `fd00::/8`, or one address.
fn parse_cidr(entry: &str) -> Result<IpNet> {
    let trimmed = entry.trim();
    trimmed
        .parse::<IpNet>()
        .or_else(|_| trimmed.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| {
            Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "`network.allowed_cidrs` entry `{}` is not a CIDR range such as \
                     `10.0.0.0/8` or `fd00::/8`",
                    truncate_for_message(entry)
                ),
            )
        })
}

/// True when `entry` covers `host` (itself or a subdomain).
pub(crate) fn covers(entry: &Host, host: &Host) -> bool {
    match (entry, host) {
        (Host::Domain(e), Host::Domain(_)) => {
            let name = host.match_name();
            name == *e
                || (name.len() > e.len()
                    && name.ends_with(e.as_str())
                    && name.as_bytes()[name.len() - e.len() - 1] == b'.')
        }
        (Host::Ip(e), Host::Ip(h)) => e.to_canonical() == h.to_canonical(),
        _ => false,
    }
}

/// The non-public range `ip` lies in, or `None` for a public address.
///
/// IPv4: this network (0/8), private (10/8, 172.16/12, 192.168/16), shared
/// CGNAT (100.64/10), loopback (127/8), link-local (169.254/16), IETF
/// protocol assignments (192.0.0/24), documentation, benchmarking
/// (198.18/15), multicast (224/4), reserved and broadcast (240/4).
/// IPv6: unspecified, loopback, IPv4-mapped / IPv4-compatible / NAT64 / 6to4
/// addresses judged by the IPv4 address they carry, unique local (fc00::/7),
/// link-local (fe80::/10), site-local (fec0::/10), multicast (ff00::/8),
/// discard (100::/64), documentation (2001:db8::/32) and Teredo (2001::/32).
pub(crate) fn refused_range(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => refused_v4(v4),
        IpAddr::V6(v6) => refused_v6(v6),
    }
}

fn refused_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    if ip.is_unspecified() || a == 0 {
        Some("unspecified (0.0.0.0/8)")
    } else if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_private() {
        Some("private")
    } else if ip.is_link_local() {
        Some("link-local")
    } else if a == 100 && (b & 0xc0) == 64 {
        Some("shared (carrier-grade NAT)")
    } else if a == 192 && b == 0 && c == 0 {
        Some("IETF protocol assignment")
    } else if (a == 192 && b == 0 && c == 2)
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
    {
        Some("documentation")
    } else if a == 198 && (b & 0xfe) == 18 {
        Some("benchmarking")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if a >= 240 {
        Some("reserved or broadcast")
    } else {
        None
    }
}

fn refused_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    let embedded =
        |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    if let Some(v4) = ip.to_ipv4_mapped() {
        return refused_v4(v4);
    }
    if ip.is_unspecified() {
        Some("unspecified")
    } else if ip.is_loopback() {
        Some("loopback")
    } else if s[..6] == [0, 0, 0, 0, 0, 0] {
        // IPv4-compatible (deprecated): judged by the address it carries,
        // and refused outright when that one is public (nothing routes it).
        Some(refused_v4(embedded(s[6], s[7])).unwrap_or("IPv4-compatible"))
    } else if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        refused_v4(embedded(s[6], s[7]))
    } else if s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1 {
        Some("local-use NAT64")
    } else if s[0] == 0x2002 {
        refused_v4(embedded(s[1], s[2]))
    } else if (s[0] & 0xfe00) == 0xfc00 {
        Some("private (unique local)")
    } else if (s[0] & 0xffc0) == 0xfe80 {
        Some("link-local")
    } else if (s[0] & 0xffc0) == 0xfec0 {
        Some("site-local")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if s[..4] == [0x100, 0, 0, 0] {
        Some("discard-only")
    } else if s[0] == 0x2001 && s[1] == 0xdb8 {
        Some("documentation")
    } else if s[0] == 0x2001 && s[1] == 0 {
        Some("Teredo tunnel")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(allowed: &[&str], denied: &[&str], cidrs: &[&str]) -> NetRules {
        NetRules::from_config(&NetworkConfig {
            allowed_domains: allowed.iter().map(|s| s.to_string()).collect(),
            denied_domains: denied.iter().map(|s| s.to_string()).collect(),
            allowed_cidrs: cidrs.iter().map(|s| s.to_string()).collect(),
            ..NetworkConfig::default()
        })
        .unwrap()
    }

    fn d(name: &str) -> Host {
        Host::Domain(name.to_string())
    }

    #[test]
    fn entries_cover_subdomains_and_denial_wins() {
        let r = rules(&["example.com"], &["bad.example.com"], &[]);
        assert!(r.host_allowed(&d("example.com")));
        assert!(r.host_allowed(&d("docs.example.com")));
        assert!(r.host_allowed(&d("example.com.")));
        assert!(!r.host_allowed(&d("badexample.com")));
        assert!(!r.host_allowed(&d("example.com.evil.test")));
        assert!(!r.host_allowed(&d("bad.example.com")));
        assert!(!r.host_allowed(&d("x.bad.example.com")));
        let err = r.check_host(&d("x.bad.example.com")).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Denied);
        assert!(err.message().contains("bad.example.com"), "{err}");

        let r = rules(&["example.com"], &["example.com"], &[]);
        assert!(!r.host_allowed(&d("example.com")));

        let open = rules(&[], &["evil.test"], &[]);
        assert!(open.host_allowed(&d("anything.test")));
        assert!(!open.host_allowed(&d("sub.evil.test")));
        assert!(open.host_allowed(&Host::Ip("93.184.216.34".parse().unwrap())));

        let ips = rules(&["93.184.216.34"], &[], &[]);
        assert!(ips.host_allowed(&Host::Ip("93.184.216.34".parse().unwrap())));
        assert!(!ips.host_allowed(&Host::Ip("93.184.216.35".parse().unwrap())));
        assert!(!ips.host_allowed(&d("example.com")));
    }

    #[test]
    fn bad_entries_are_named() {
        let err = NetRules::from_config(&NetworkConfig {
            denied_domains: vec!["a..b".into()],
            ..NetworkConfig::default()
        })
        .unwrap_err();
        assert!(err.message().contains("denied_domains"), "{err}");
        let err = NetRules::from_config(&NetworkConfig {
            allowed_cidrs: vec!["10.0.0.0/33".into()],
            ..NetworkConfig::default()
        })
        .unwrap_err();
        assert!(err.message().contains("10.0.0.0/33"), "{err}");
    }

    #[test]
    fn non_public_ranges_are_refused() {
        for (ip, refused) in [
            ("0.0.0.0", true),
            ("0.1.2.3", true),
            ("10.1.2.3", true),
            ("100.64.0.1", true),
            ("100.128.0.1", false),
            ("127.0.0.1", true),
            ("127.255.255.254", true),
            ("169.254.169.254", true),
            ("172.16.0.1", true),
            ("172.32.0.1", false),
            ("192.0.0.8", true),
            ("192.168.1.1", true),
            ("198.18.0.1", true),
            ("224.0.0.1", true),
            ("255.255.255.255", true),
            ("8.8.8.8", false),
            ("93.184.216.34", false),
            ("::", true),
            ("::1", true),
            ("::ffff:127.0.0.1", true),
            ("::ffff:10.0.0.1", true),
            ("::ffff:8.8.8.8", false),
            ("::127.0.0.1", true),
            ("::8.8.8.8", true),
            ("64:ff9b::10.0.0.1", true),
            ("64:ff9b::8.8.8.8", false),
            ("2002:7f00:1::", true),
            ("2002:808:808::", false),
            ("fc00::1", true),
            ("fd12:3456::1", true),
            ("fe80::1", true),
            ("fec0::1", true),
            ("ff02::1", true),
            ("2001:db8::1", true),
            ("2001::1", true),
            ("2606:4700:4700::1111", false),
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(refused_range(ip).is_some(), refused, "{ip}");
        }
    }

    #[test]
    fn allowed_cidrs_open_a_range_and_only_that_range() {
        let r = rules(&[], &[], &["127.0.0.0/8", "fd00::/8", "10.1.2.3"]);
        for ip in ["127.0.0.1", "::ffff:127.0.0.1", "fd00::5", "10.1.2.3"] {
            assert_eq!(r.address_refusal(ip.parse().unwrap()), None, "{ip}");
        }
        for ip in ["10.1.2.4", "::1", "169.254.169.254", "fc00::1"] {
            assert!(r.address_refusal(ip.parse().unwrap()).is_some(), "{ip}");
        }
        let none = rules(&[], &[], &[]);
        assert_eq!(
            none.address_refusal("127.0.0.1".parse().unwrap()),
            Some("loopback")
        );
        assert_eq!(none.address_refusal("8.8.8.8".parse().unwrap()), None);
    }
}
