//! Where a request comes from, for the sign-in throttle: the connection's peer, or, when the
//! peer is a reverse proxy the operator named (`WATTLEDGER_TRUSTED_PROXIES`), the address
//! that proxy says it forwarded for. Behind a proxy, every client would otherwise share the
//! proxy's address, and one person's mistyping would slow everyone's sign-in.

use super::AppState;
use axum::extract::{ConnectInfo, FromRef, FromRequestParts};
use axum::http::request::Parts;
use std::net::{IpAddr, SocketAddr};

/// Networks whose connections are reverse proxies: `X-Forwarded-For` from them is believed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<(IpAddr, u8)>);

impl TrustedProxies {
    /// `10.0.0.5`, `10.0.0.0/8`, `fd00::/8`, comma-separated; empty trusts nobody.
    pub fn parse(list: &str) -> Result<TrustedProxies, String> {
        let mut nets = Vec::new();
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (addr, bits) = match item.split_once('/') {
                Some((a, b)) => (a, Some(b)),
                None => (item, None),
            };
            let ip: IpAddr = addr
                .parse()
                .map_err(|_| format!("'{item}' is not an IP address or network"))?;
            let max = if ip.is_ipv4() { 32 } else { 128 };
            let bits = match bits {
                None => max,
                Some(b) => b
                    .parse::<u8>()
                    .ok()
                    .filter(|b| *b <= max)
                    .ok_or_else(|| format!("'{item}': the prefix length must be 0 to {max}"))?,
            };
            nets.push((ip, bits));
        }
        Ok(TrustedProxies(nets))
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|&(net, bits)| in_network(ip, net, bits))
    }
}

fn in_network(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// The client: the peer, or, for a trusted proxy, the nearest address in `X-Forwarded-For`
/// that is not itself a trusted proxy (the ones to its left the client could have written).
pub fn client_ip(peer: IpAddr, forwarded_for: Option<&str>, trusted: &TrustedProxies) -> IpAddr {
    if !trusted.contains(peer) {
        return peer;
    }
    let Some(chain) = forwarded_for else {
        return peer;
    };
    let mut hops = chain.rsplit(',').map(str::trim).map(str::parse::<IpAddr>);
    let mut client = peer;
    for hop in hops.by_ref() {
        match hop {
            Ok(ip) if trusted.contains(ip) => client = ip,
            Ok(ip) => return ip,
            Err(_) => return client,
        }
    }
    client
}

/// The client's address as the throttle counts it: an IPv4 address, or an IPv6 /64 (one
/// machine is given a whole /64 and may pick any address in it).
pub struct ClientAddr(pub Option<String>);

impl<S> FromRequestParts<S> for ClientAddr
where
    AppState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let state = AppState::from_ref(state);
        let Some(peer) = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip())
        else {
            return Ok(ClientAddr(None));
        };
        let forwarded = parts
            .headers
            .get("x-forwarded-for")
            .and_then(|v| v.to_str().ok());
        let ip = client_ip(peer, forwarded, &state.config.trusted_proxies);
        Ok(ClientAddr(Some(match ip {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => v4.to_string(),
                None => {
                    let s = v6.segments();
                    format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
                }
            },
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn forwarded_for_is_believed_only_from_a_trusted_proxy() {
        let t = TrustedProxies::parse("10.0.0.0/8, fd00::1").unwrap();
        let chain = Some("203.0.113.9, 198.51.100.7, 10.1.2.3");
        // From the proxy: the nearest untrusted hop (the left one the client may have forged).
        assert_eq!(client_ip(ip("10.0.0.5"), chain, &t), ip("198.51.100.7"));
        // From anyone else: the peer, whatever it claims.
        assert_eq!(client_ip(ip("192.0.2.1"), chain, &t), ip("192.0.2.1"));
        assert_eq!(client_ip(ip("10.0.0.5"), None, &t), ip("10.0.0.5"));
        assert_eq!(
            client_ip(ip("fd00::1"), Some("2001:db8::7"), &t),
            ip("2001:db8::7")
        );
        // Garbage in the chain stops the walk at the last hop believed.
        assert_eq!(
            client_ip(ip("10.0.0.5"), Some("x, 10.9.9.9"), &t),
            ip("10.9.9.9")
        );
        assert_eq!(
            TrustedProxies::parse("").unwrap(),
            TrustedProxies::default()
        );
        assert!(TrustedProxies::parse("10.0.0.0/33").is_err());
        assert!(TrustedProxies::parse("proxy.local").is_err());
        assert!(TrustedProxies::parse("0.0.0.0/0")
            .unwrap()
            .contains(ip("8.8.8.8")));
    }
}
