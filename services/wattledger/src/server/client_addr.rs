//! Where a request comes from, for the sign-in throttle: the connection's peer, or, when the
//! peer is a reverse proxy the operator named (`WATTLEDGER_TRUSTED_PROXIES`), the address
//! that proxy says it forwarded for. Behind a proxy, every client would otherwise share the
//! proxy's address, and one person's mistyping would slow everyone's sign-in.

use crate::config::TrustedProxies;
use crate::state::AppState;
use axum::extract::{ConnectInfo, FromRef, FromRequestParts};
use axum::http::request::Parts;
use std::net::{IpAddr, SocketAddr};

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
