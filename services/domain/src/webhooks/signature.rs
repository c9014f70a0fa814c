//! Standard Webhooks signatures (standardwebhooks.com, symmetric `v1`): HMAC-SHA256 over
//! `msg_id.timestamp.payload` with the secret's bytes, base64, in a `webhook-signature` header
//! that lists one signature per secret in force (two while a secret is being rotated).

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The spec's prefix for a serialised symmetric secret.
const PREFIX: &str = "whsec_";
/// Secrets shorter than this are refused (the spec asks for 24 to 64 bytes).
pub const MIN_SECRET_BYTES: usize = 24;
pub const MAX_SECRET_BYTES: usize = 64;
/// Timestamps further than this from the verifier's clock are refused, as the reference
/// libraries do.
pub const TOLERANCE_S: i64 = 5 * 60;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("a secret is 'whsec_' followed by base64")]
    NotASecret,
    #[error("a secret must decode to {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes, not {0}")]
    SecretLength(usize),
    #[error("message ids must not contain '.'")]
    DottedId,
    #[error("the timestamp is more than {TOLERANCE_S} s from now")]
    Timestamp,
    #[error("no signature matches")]
    NoMatch,
}

/// A symmetric signing secret: the raw key bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

impl Secret {
    /// `whsec_` + base64 of 24 to 64 bytes.
    pub fn parse(s: &str) -> Result<Secret, SignatureError> {
        let b64 = s.strip_prefix(PREFIX).ok_or(SignatureError::NotASecret)?;
        let bytes = B64.decode(b64).map_err(|_| SignatureError::NotASecret)?;
        Secret::from_bytes(bytes)
    }

    pub fn from_bytes(bytes: Vec<u8>) -> Result<Secret, SignatureError> {
        if !(MIN_SECRET_BYTES..=MAX_SECRET_BYTES).contains(&bytes.len()) {
            return Err(SignatureError::SecretLength(bytes.len()));
        }
        Ok(Secret(bytes))
    }

    /// The form a receiver configures: `whsec_` + base64.
    pub fn encoded(&self) -> String {
        format!("{PREFIX}{}", B64.encode(&self.0))
    }

    fn mac(&self, msg_id: &str, timestamp: i64, payload: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(msg_id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(payload);
        mac
    }

    /// `v1,<base64 HMAC-SHA256>` over `msg_id.timestamp.payload`.
    pub fn sign(
        &self,
        msg_id: &str,
        timestamp: i64,
        payload: &[u8],
    ) -> Result<String, SignatureError> {
        if msg_id.contains('.') {
            return Err(SignatureError::DottedId);
        }
        let tag = self.mac(msg_id, timestamp, payload).finalize().into_bytes();
        Ok(format!("v1,{}", B64.encode(tag)))
    }
}

/// The `webhook-signature` header: one signature per secret in force, space-separated.
pub fn header(
    secrets: &[&Secret],
    msg_id: &str,
    timestamp: i64,
    payload: &[u8],
) -> Result<String, SignatureError> {
    let sigs: Result<Vec<String>, _> = secrets
        .iter()
        .map(|s| s.sign(msg_id, timestamp, payload))
        .collect();
    Ok(sigs?.join(" "))
}

/// What a receiver does: the timestamp within tolerance and any `v1` signature in the header
/// matching (in constant time).
pub fn verify(
    secret: &Secret,
    msg_id: &str,
    timestamp: i64,
    payload: &[u8],
    header: &str,
    now: i64,
) -> Result<(), SignatureError> {
    if (now - timestamp).abs() > TOLERANCE_S {
        return Err(SignatureError::Timestamp);
    }
    if msg_id.contains('.') {
        return Err(SignatureError::DottedId);
    }
    for sig in header.split(' ') {
        let Some(b64) = sig.strip_prefix("v1,") else {
            continue;
        };
        let Ok(tag) = B64.decode(b64) else {
            continue;
        };
        if secret
            .mac(msg_id, timestamp, payload)
            .verify_slice(&tag)
            .is_ok()
        {
            return Ok(());
        }
    }
    Err(SignatureError::NoMatch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;

    fn vectors() -> Vec<Value> {
        let text = crate::fixtures::read("webhooks/standard-webhooks-test-vectors.json");
        serde_json::from_str(&text).unwrap()
    }

    /// The spec repository's own vectors (Python and Rust library tests).
    #[test]
    fn signs_as_the_reference_libraries_do() {
        let vs = vectors();
        let mut positive = 0;
        for v in &vs {
            let secret = Secret::parse(v["secret"].as_str().unwrap()).unwrap();
            let id = v["msg_id"].as_str().unwrap();
            let payload = v["payload"].as_str().unwrap().as_bytes();
            if let Some(expected) = v["expected_signature"].as_str() {
                let ts = v["timestamp"].as_i64().unwrap();
                assert_eq!(secret.sign(id, ts, payload).unwrap(), expected);
                verify(&secret, id, ts, payload, expected, ts + 10).unwrap();
                positive += 1;
            }
            if let Some(bad) = v["bad_signature"].as_str() {
                let ts = vs[1]["timestamp"].as_i64().unwrap();
                assert_eq!(
                    verify(&secret, id, ts, payload, bad, ts),
                    Err(SignatureError::NoMatch)
                );
            }
        }
        assert_eq!(positive, 2);
    }

    #[test]
    fn rotation_signs_with_both_and_either_verifies() {
        let old = Secret::from_bytes(vec![1; 32]).unwrap();
        let new = Secret::from_bytes(vec![2; 32]).unwrap();
        let h = header(&[&new, &old], "msg_1", 1_700_000_000, b"{}").unwrap();
        assert_eq!(h.split(' ').count(), 2);
        verify(&old, "msg_1", 1_700_000_000, b"{}", &h, 1_700_000_000).unwrap();
        verify(&new, "msg_1", 1_700_000_000, b"{}", &h, 1_700_000_000).unwrap();
        let other = Secret::from_bytes(vec![3; 32]).unwrap();
        assert!(verify(&other, "msg_1", 1_700_000_000, b"{}", &h, 1_700_000_000).is_err());
    }

    #[test]
    fn short_secrets_stale_timestamps_and_dotted_ids_are_refused() {
        assert_eq!(
            Secret::parse("whsec_AAAA").unwrap_err(),
            SignatureError::SecretLength(3)
        );
        assert_eq!(
            Secret::parse("AAAA").unwrap_err(),
            SignatureError::NotASecret
        );
        let s = Secret::from_bytes(vec![7; 24]).unwrap();
        let sig = s.sign("m", 1000, b"x").unwrap();
        assert_eq!(
            verify(&s, "m", 1000, b"x", &sig, 1000 + TOLERANCE_S + 1),
            Err(SignatureError::Timestamp)
        );
        assert_eq!(s.sign("m.1", 1000, b"x"), Err(SignatureError::DottedId));
    }

    proptest! {
        /// Any change to the id, the timestamp or the payload breaks the signature.
        #[test]
        fn a_signature_binds_id_timestamp_and_payload(
            key in proptest::collection::vec(any::<u8>(), 24..=64),
            payload in proptest::collection::vec(any::<u8>(), 0..200),
            ts in 1_000_000_000i64..2_000_000_000, flip in 0usize..200,
        ) {
            let s = Secret::from_bytes(key).unwrap();
            prop_assert_eq!(Secret::parse(&s.encoded()).unwrap(), s.clone());
            let sig = s.sign("msg_x", ts, &payload).unwrap();
            prop_assert!(verify(&s, "msg_x", ts, &payload, &sig, ts).is_ok());
            prop_assert!(verify(&s, "msg_y", ts, &payload, &sig, ts).is_err());
            prop_assert!(verify(&s, "msg_x", ts + 1, &payload, &sig, ts).is_err());
            if !payload.is_empty() {
                let mut changed = payload.clone();
                let i = flip % changed.len();
                changed[i] ^= 1;
                prop_assert!(verify(&s, "msg_x", ts, &changed, &sig, ts).is_err());
            }
        }
    }
}
