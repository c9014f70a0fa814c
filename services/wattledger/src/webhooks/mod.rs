//! Outgoing webhooks at the edge: the dispatcher that delivers the outbox, signed per
//! Standard Webhooks, to destinations checked after DNS resolution.

pub mod dispatcher;

use std::net::SocketAddr;
use wattledger_domain::webhooks::ssrf::{self, Destination, Reach};

/// Checks a URL as every delivery does: its form, then each address its name resolves to.
/// Gives the destination and, for a name, the checked address to connect to (so a second
/// lookup cannot swap in another).
pub async fn checked(url: &str, reach: Reach) -> Result<(Destination, Option<SocketAddr>), String> {
    let dest = ssrf::parse(url, reach).map_err(|e| e.to_string())?;
    let Some(name) = &dest.name else {
        return Ok((dest, None));
    };
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), dest.port))
        .await
        .map_err(|e| format!("could not resolve {name}: {e}"))?
        .collect();
    for a in &addrs {
        ssrf::check(a.ip(), reach).map_err(|e| format!("{name} resolves to {e}"))?;
    }
    let first = *addrs
        .first()
        .ok_or_else(|| format!("{name} resolves to no address"))?;
    Ok((dest, Some(first)))
}

/// A new signing secret: 32 random bytes as `whsec_…`.
pub fn new_secret() -> std::io::Result<String> {
    let bytes = crate::random_bytes(32)?;
    let secret = wattledger_domain::webhooks::Secret::from_bytes(bytes)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(secret.encoded())
}
