//! Where webhooks may be sent. A URL a tenant registers is a request the server will make on
//! its behalf, so it must not reach the server's own network: loopback, private ranges,
//! link-local and cloud metadata addresses are refused, however they are written (decimal
//! or hex IPv4, IPv4 inside IPv6), checked on the literal here and on every address a name
//! resolves to at the edge, at registration and on every delivery. An operator may let
//! webhooks reach loopback and private addresses (tests, on-premises receivers) and plain
//! http; metadata and link-local addresses stay refused.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use url::{Host, Url};

/// What an operator lets webhooks reach beyond public https addresses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reach {
    pub loopback: bool,
    pub private: bool,
    pub http: bool,
}

impl Reach {
    /// `loopback`, `private`, `http`, comma-separated (WATTLEDGER_WEBHOOK_ALLOW).
    pub fn parse(list: &str) -> Result<Reach, String> {
        let mut r = Reach::default();
        for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word {
                "loopback" => r.loopback = true,
                "private" => r.private = true,
                "http" => r.http = true,
                other => return Err(format!("'{other}' is not one of loopback, private, http")),
            }
        }
        Ok(r)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DestinationError {
    #[error("not a URL: {0}")]
    Unparsable(String),
    #[error("only https URLs are allowed, not '{0}'")]
    Scheme(String),
    #[error("credentials in the URL are not allowed")]
    Credentials,
    #[error("the URL has no host")]
    NoHost,
    #[error("{host} is not a public address ({why}): webhooks may not be sent there")]
    Forbidden { host: String, why: &'static str },
}

/// A URL that passed the checks that need no DNS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub url: Url,
    /// The host name to resolve, or `None` for an IP literal (already checked).
    pub name: Option<String>,
    pub port: u16,
}

pub fn parse(raw: &str, reach: Reach) -> Result<Destination, DestinationError> {
    let url = Url::parse(raw.trim()).map_err(|e| DestinationError::Unparsable(e.to_string()))?;
    match url.scheme() {
        "https" => {}
        "http" if reach.http => {}
        other => return Err(DestinationError::Scheme(other.into())),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(DestinationError::Credentials);
    }
    let port = url
        .port_or_known_default()
        .ok_or(DestinationError::NoHost)?;
    // The URL parser already turned 2130706433, 0x7f.1 and 017700000001 into 127.0.0.1.
    let name = match url.host() {
        None => return Err(DestinationError::NoHost),
        Some(Host::Ipv4(ip)) => {
            check(IpAddr::V4(ip), reach)?;
            None
        }
        Some(Host::Ipv6(ip)) => {
            check(IpAddr::V6(ip), reach)?;
            None
        }
        Some(Host::Domain(d)) => {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            if (d == "localhost" || d.ends_with(".localhost")) && !reach.loopback {
                return Err(DestinationError::Forbidden {
                    host: d,
                    why: "loopback",
                });
            }
            Some(d)
        }
    };
    Ok(Destination { url, name, port })
}

/// Refuses an address the operator has not let webhooks reach.
pub fn check(ip: IpAddr, reach: Reach) -> Result<(), DestinationError> {
    let allowed = match class(ip) {
        None => true,
        Some(Class::Loopback) => reach.loopback,
        Some(Class::Private) => reach.private,
        Some(_) => false,
    };
    if allowed {
        Ok(())
    } else {
        Err(DestinationError::Forbidden {
            host: ip.to_string(),
            why: class(ip).map_or("", Class::name),
        })
    }
}

/// What kind of non-public address this is, `None` for a public one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Loopback,
    Private,
    LinkLocal,
    Metadata,
    Unspecified,
    Multicast,
    Reserved,
}

impl Class {
    pub fn name(self) -> &'static str {
        match self {
            Class::Loopback => "loopback",
            Class::Private => "private",
            Class::LinkLocal => "link-local",
            Class::Metadata => "cloud metadata",
            Class::Unspecified => "unspecified",
            Class::Multicast => "multicast",
            Class::Reserved => "reserved",
        }
    }
}

pub fn class(ip: IpAddr) -> Option<Class> {
    match ip {
        IpAddr::V4(v4) => class_v4(v4),
        IpAddr::V6(v6) => class_v6(v6),
    }
}

fn class_v4(ip: Ipv4Addr) -> Option<Class> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        _ if ip == Ipv4Addr::new(169, 254, 169, 254) => Class::Metadata,
        // Alibaba Cloud's metadata service sits in the shared (CGNAT) range.
        _ if ip == Ipv4Addr::new(100, 100, 100, 200) => Class::Metadata,
        // Azure's wire server (platform agent, DNS, health): public-looking, inside Azure.
        _ if ip == Ipv4Addr::new(168, 63, 129, 16) => Class::Metadata,
        (0, _, _) => Class::Unspecified,
        (127, _, _) => Class::Loopback,
        (10, _, _) | (192, 168, _) => Class::Private,
        (172, 16..=31, _) => Class::Private,
        // Shared address space (RFC 6598): carrier-grade NAT, inside someone's network.
        (100, 64..=127, _) => Class::Private,
        (169, 254, _) => Class::LinkLocal,
        (192, 0, 0) | (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => Class::Reserved,
        // The 6to4 relay anycast prefix: a tunnel into someone's network.
        (192, 88, 99) => Class::Reserved,
        (198, 18..=19, _) => Class::Reserved,
        (224..=239, _, _) => Class::Multicast,
        (240..=255, _, _) => Class::Reserved,
        _ => return None,
    })
}

fn class_v6(ip: Ipv6Addr) -> Option<Class> {
    let s = ip.segments();
    // IPv4 written inside IPv6 is judged as that IPv4 address: mapped (::ffff:a.b.c.d),
    // translated (::ffff:0:a.b.c.d, RFC 2765), compatible (::a.b.c.d), NAT64 (64:ff9b::/96)
    // and 6to4 (2002:AABB:CCDD::/48).
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    if let Some(v4) = ip.to_ipv4_mapped() {
        return class_v4(v4);
    }
    if s[..6] == [0, 0, 0, 0, 0xffff, 0] {
        return class_v4(embedded(s[6], s[7]));
    }
    if s[..6] == [0; 6] && ip != Ipv6Addr::UNSPECIFIED && ip != Ipv6Addr::LOCALHOST {
        return class_v4(embedded(s[6], s[7]));
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return class_v4(embedded(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        return class_v4(embedded(s[1], s[2]));
    }
    // NAT64 for local use (RFC 8215): the operator's own translator, into its own network.
    if s[..3] == [0x64, 0xff9b, 1] {
        return Some(Class::Private);
    }
    Some(match s[0] {
        _ if ip == Ipv6Addr::LOCALHOST => Class::Loopback,
        _ if ip == Ipv6Addr::UNSPECIFIED => Class::Unspecified,
        // AWS's IPv6 metadata service (inside the unique-local range).
        _ if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) => Class::Metadata,
        0xfc00..=0xfdff => Class::Private,
        0xfe80..=0xfebf => Class::LinkLocal,
        // Site-local (fec0::/10): deprecated, still routed inside some networks.
        0xfec0..=0xfeff => Class::Private,
        0xff00..=0xffff => Class::Multicast,
        // Teredo (2001::/32): a tunnel whose far end hides an IPv4 address of any kind.
        0x2001 if s[1] == 0 => Class::Reserved,
        // Documentation (2001:db8::/32, 3fff::/20), benchmarking (2001:2::/48), ORCHID
        // (2001:10::/28, 2001:20::/28), discard-only (100::/64).
        0x2001 if s[1] == 0x0db8 => Class::Reserved,
        0x2001 if s[1] == 2 && s[2] == 0 => Class::Reserved,
        0x2001 if (0x10..=0x2f).contains(&s[1]) => Class::Reserved,
        0x3fff if s[1] < 0x1000 => Class::Reserved,
        0x0100 if s[1..4] == [0, 0, 0] => Class::Reserved,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STRICT: Reach = Reach {
        loopback: false,
        private: false,
        http: false,
    };

    #[test]
    fn hostile_urls_are_refused() {
        let hostile = [
            "https://127.0.0.1/hook",
            "https://127.1.2.3:8443/",
            "https://[::1]/",
            "https://10.0.0.5/",
            "https://172.16.0.1/",
            "https://172.31.255.254/",
            "https://192.168.1.10/",
            "https://169.254.169.254/latest/meta-data/",
            "https://169.254.10.1/",
            "https://localhost/",
            "https://LOCALHOST./",
            "https://api.localhost/",
            "https://2130706433/",
            "https://0x7f000001/",
            "https://0177.0.0.1/",
            "https://0x7f.1/",
            "https://[::ffff:127.0.0.1]/",
            "https://[::ffff:a9fe:a9fe]/",
            "https://[::ffff:10.0.0.1]/",
            "https://[64:ff9b::a9fe:a9fe]/",
            "https://[2002:7f00:1::]/",
            "https://[fd00:ec2::254]/",
            "https://[fe80::1]/",
            "https://[fc00::1]/",
            "https://0.0.0.0/",
            "https://[::]/",
            "https://100.64.0.1/",
            "https://100.100.100.200/",
            "https://224.0.0.1/",
            // Azure's wire server, Teredo, NAT64 local use, IPv4-translated, site-local.
            "https://168.63.129.16/",
            "https://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",
            "https://[64:ff9b:1::7f00:1]/",
            "https://[::ffff:0:127.0.0.1]/",
            "https://[::ffff:0:a9fe:a9fe]/",
            "https://[fec0::1]/",
            "https://[2001:db8::1]/",
            "https://[2001:10::1]/",
            "https://[100::1]/",
            "https://192.88.99.1/",
            "http://hooks.example.com/",
            "ftp://hooks.example.com/",
            "https://user:pass@hooks.example.com/",
            "file:///etc/passwd",
            "not a url",
        ];
        for url in hostile {
            let e = parse(url, STRICT).expect_err(url);
            // Every address form is refused as an address, not by accident of parsing.
            let as_address = url.starts_with("https://") && !url.contains('@');
            assert_eq!(
                matches!(e, DestinationError::Forbidden { .. }),
                as_address,
                "{url}: {e}"
            );
        }
    }

    #[test]
    fn public_https_passes_and_names_are_left_to_resolve() {
        let d = parse("https://hooks.example.com/wattledger", STRICT).unwrap();
        assert_eq!(d.name.as_deref(), Some("hooks.example.com"));
        assert_eq!(d.port, 443);
        let d = parse("https://93.184.215.14:8443/x", STRICT).unwrap();
        assert_eq!((d.name, d.port), (None, 8443));
        assert!(parse("https://[2606:4700::1111]/", STRICT).is_ok());
    }

    #[test]
    fn the_operator_may_open_loopback_private_and_http_but_never_metadata() {
        let lab = Reach::parse("loopback, http").unwrap();
        assert!(parse("http://127.0.0.1:18080/", lab).is_ok());
        assert!(parse("http://localhost:18080/", lab).is_ok());
        assert!(parse("https://10.1.2.3/", lab).is_err());
        let onprem = Reach::parse("private").unwrap();
        assert!(parse("https://10.1.2.3/", onprem).is_ok());
        let all = Reach::parse("loopback,private,http").unwrap();
        for url in [
            "http://169.254.169.254/",
            "http://[fd00:ec2::254]/",
            "http://[fe80::1]/",
            "http://0.0.0.0/",
        ] {
            assert!(parse(url, all).is_err(), "{url}");
        }
        assert!(Reach::parse("everything").is_err());
    }
}
