//! Outgoing webhooks at the edge: the dispatcher that delivers the outbox, signed per
//! Standard Webhooks, to destinations checked after DNS resolution.

pub mod dispatcher;

/// A new signing secret: 32 random bytes as `whsec_…`.
pub fn new_secret() -> std::io::Result<String> {
    let bytes = crate::random_bytes(32)?;
    let secret = wattledger_domain::webhooks::Secret::from_bytes(bytes)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(secret.encoded())
}
