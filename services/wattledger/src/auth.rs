//! API tokens: HS256 JWTs with `exp`, `aud` and `iss` required, `nbf` and `iat` honoured,
//! and the algorithm pinned; each carries an id (`jti`) recorded server-side so it can be
//! revoked, and lives at most the configured maximum.
//!
//! HS256 rather than an asymmetric algorithm because the verifier is the issuer, and an
//! asymmetric verify per request would dominate the API's cost (DESIGN.md, performance).
//! For the same reason a revocation is checked against this process's memory ([`Revoked`],
//! kept current by [`follow`]), never by asking the database per request.
//!
//! A signed token is still input from outside: its string claims pass the one text rule
//! (`wattledger_domain::input`), so a NUL or a control character in a claim is a refused
//! token, never a query PostgreSQL refuses.

pub mod follow;
pub mod issue;

use chrono::Utc;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;
use uuid::Uuid;
use wattledger_domain::input::{self, InputError};

pub const ISSUER: &str = "wattledger";
pub const AUDIENCE: &str = "wattledger-api";
/// Clock leeway when checking `exp`, `nbf` and `iat`, in seconds.
const LEEWAY_S: u64 = 30;
/// The longest a token may live unless configured otherwise (`WATTLEDGER_TOKEN_MAX_TTL`):
/// a year and a month, so a yearly rotation has a month to happen.
pub const DEFAULT_MAX_TTL_S: i64 = 400 * 86_400;

/// A caller's role: declared in the domain, where the store reads it too.
pub use wattledger_domain::role::Role;

/// A verified token's claims.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Claims {
    pub sub: String,
    pub role: Role,
    /// The tenant key a `tenant` token is bound to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    pub iss: String,
    pub aud: String,
    pub iat: i64,
    pub exp: i64,
    /// Not before: a token may be minted to start later.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nbf: Option<i64>,
    /// The token's id, by which it is recorded and revoked.
    pub jti: Uuid,
}

/// The claims as they arrive, before the string rules and the id are checked.
#[derive(Deserialize)]
struct Presented {
    sub: String,
    role: Role,
    #[serde(default)]
    tenant: Option<String>,
    iss: String,
    aud: String,
    iat: i64,
    exp: i64,
    #[serde(default)]
    nbf: Option<i64>,
    #[serde(default)]
    jti: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("the signing key must be at least 32 bytes")]
    WeakKey,
    #[error("a tenant token needs a tenant, and only a tenant token may have one")]
    TenantClaim,
    #[error("invalid token: issued in the future")]
    IssuedInFuture,
    #[error("invalid token: its {claim} claim {reason}")]
    Claim {
        claim: &'static str,
        reason: InputError,
    },
    #[error("invalid token: its jti claim is not a token id this server mints")]
    BadId,
    #[error(
        "this token has no id (jti), so it could not be revoked, and is no longer accepted: \
         mint a new one (`wattledger token mint` or POST /v1/tokens)"
    )]
    NoId,
    #[error("a token lives at least 1 second")]
    NoLifetime,
    #[error("a token may live at most {max_s} seconds (WATTLEDGER_TOKEN_MAX_TTL)")]
    TooLong { max_s: i64 },
    #[error("invalid token: it lives longer than the {max_s} seconds allowed (WATTLEDGER_TOKEN_MAX_TTL)")]
    LivesTooLong { max_s: i64 },
    #[error("this token was revoked")]
    Revoked,
    #[error("invalid token: {0}")]
    Invalid(#[from] jsonwebtoken::errors::Error),
}

/// Whether a token expiring at `exp` is refused at `now` (Unix seconds): past its expiry by
/// more than the leeway, as jsonwebtoken decides it.
fn expired(exp: i64, now: i64) -> bool {
    exp + (LEEWAY_S as i64) < now
}

/// The ids of revoked tokens this process refuses, each with its expiry (Unix seconds):
/// once expired, a token is refused anyway and its id is forgotten.
#[derive(Debug, Default)]
pub struct Revoked {
    ids: RwLock<HashMap<Uuid, i64>>,
}

impl Revoked {
    pub fn contains(&self, jti: &Uuid) -> bool {
        self.ids.read().contains_key(jti)
    }

    pub fn add(&self, jti: Uuid, exp: i64) {
        self.ids.write().insert(jti, exp);
    }

    /// Adds every revocation of a full reload and forgets those expired by `now`. Only
    /// adds: a revocation announced while the reload's query ran is not lost by it.
    pub fn merge(&self, revoked: impl IntoIterator<Item = (Uuid, i64)>, now: i64) {
        let mut ids = self.ids.write();
        ids.extend(revoked);
        ids.retain(|_, exp| !expired(*exp, now));
    }

    pub fn len(&self) -> usize {
        self.ids.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Tokens this process has verified, with their claims, so that a scheduler asking many
/// times a second with one token pays for its check (HMAC, base64, JSON, the claim rules)
/// once. Only tokens that passed are kept, so a flood of bad ones cannot fill it; a hit
/// still checks what time and revocation change: the expiry and the revoked set.
#[derive(Default)]
struct Verified {
    tokens: RwLock<HashMap<Box<str>, Claims>>,
}

/// Verified tokens kept: far more than the schedulers, collectors and sessions one server
/// sees within a token's life. When full, the expired go, and if over half are still live,
/// all do.
const VERIFIED_MAX: usize = 4096;

#[derive(Clone)]
pub struct Keys {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    max_ttl_s: i64,
    revoked: Arc<Revoked>,
    verified: Arc<Verified>,
}

/// The text rule for a string claim: keys and subjects are keys, the rest plain text.
fn claim_text(claim: &'static str, value: &str) -> Result<(), AuthError> {
    let checked = match claim {
        "sub" | "tenant" => input::key(value).map(drop),
        _ => input::text(value, input::MAX_KEY_LEN).map(drop),
    };
    checked.map_err(|reason| AuthError::Claim { claim, reason })
}

impl Keys {
    pub fn new(secret: &[u8]) -> Result<Self, AuthError> {
        if secret.len() < 32 {
            return Err(AuthError::WeakKey);
        }
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_audience(&[AUDIENCE]);
        validation.set_issuer(&[ISSUER]);
        validation.set_required_spec_claims(&["exp", "aud", "iss", "sub"]);
        validation.validate_nbf = true;
        validation.leeway = LEEWAY_S;
        Ok(Keys {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
            validation,
            max_ttl_s: DEFAULT_MAX_TTL_S,
            revoked: Arc::default(),
            verified: Arc::default(),
        })
    }

    /// The same keys with another maximum lifetime, in seconds.
    pub fn with_max_ttl(mut self, max_ttl_s: i64) -> Self {
        self.max_ttl_s = max_ttl_s;
        // What was verified under the old maximum is not verified under this one.
        self.verified = Arc::default();
        self
    }

    pub fn max_ttl_s(&self) -> i64 {
        self.max_ttl_s
    }

    /// The revoked ids this process refuses, shared by every clone of these keys.
    pub fn revoked(&self) -> &Arc<Revoked> {
        &self.revoked
    }

    /// Mints a token valid for `ttl_s` seconds, with a new id that is not recorded: for
    /// tokens a process hands itself (the demo, tests). [`issue::issue`] records the id.
    pub fn mint(
        &self,
        sub: &str,
        role: Role,
        tenant: Option<&str>,
        ttl_s: i64,
    ) -> Result<String, AuthError> {
        Ok(self.sign(sub, role, tenant, ttl_s)?.0)
    }

    /// Mints a token and returns it with its claims. Refuses what [`Keys::verify`] would:
    /// a subject or tenant the text rule refuses, a lifetime over the maximum.
    pub fn sign(
        &self,
        sub: &str,
        role: Role,
        tenant: Option<&str>,
        ttl_s: i64,
    ) -> Result<(String, Claims), AuthError> {
        if (role == Role::Tenant) != tenant.is_some() {
            return Err(AuthError::TenantClaim);
        }
        claim_text("sub", sub)?;
        if let Some(t) = tenant {
            claim_text("tenant", t)?;
        }
        if ttl_s < 1 {
            return Err(AuthError::NoLifetime);
        }
        if ttl_s > self.max_ttl_s {
            return Err(AuthError::TooLong {
                max_s: self.max_ttl_s,
            });
        }
        let now = Utc::now().timestamp();
        let claims = Claims {
            sub: sub.to_owned(),
            role,
            tenant: tenant.map(str::to_owned),
            iss: ISSUER.to_owned(),
            aud: AUDIENCE.to_owned(),
            iat: now,
            exp: now + ttl_s,
            nbf: None,
            jti: Uuid::now_v7(),
        };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)?;
        Ok((token, claims))
    }

    /// Verifies signature, algorithm (HS256 only: `none` and others are refused), `exp`,
    /// `nbf`, `aud` and `iss`, and that it was not issued in the future (`iat`): a token that
    /// says it was minted an hour from now was not minted by a clock this server trusts.
    /// Then what the signature cannot vouch for: every string claim passes the text rule,
    /// the token has an id and was not revoked, and lives no longer than the maximum.
    pub fn verify(&self, token: &str) -> Result<Claims, AuthError> {
        self.verify_at(token, Utc::now().timestamp())
    }

    /// As [`Keys::verify`], a token verified before answering from what this process kept
    /// of it, checked again against `now` and the revoked set.
    fn verify_at(&self, token: &str, now: i64) -> Result<Claims, AuthError> {
        if let Some(c) = self.verified.tokens.read().get(token) {
            if expired(c.exp, now) {
                return Err(jsonwebtoken::errors::Error::from(
                    jsonwebtoken::errors::ErrorKind::ExpiredSignature,
                )
                .into());
            }
            if !self.revoked.contains(&c.jti) {
                return Ok(c.clone());
            }
        }
        let claims = self.verify_signed(token)?;
        let mut tokens = self.verified.tokens.write();
        if tokens.len() >= VERIFIED_MAX {
            tokens.retain(|_, c| !expired(c.exp, now));
            // Mostly live: start again rather than scan the full store for every new token.
            if tokens.len() >= VERIFIED_MAX / 2 {
                tokens.clear();
            }
        }
        tokens.insert(token.into(), claims.clone());
        Ok(claims)
    }

    fn verify_signed(&self, token: &str) -> Result<Claims, AuthError> {
        let data = jsonwebtoken::decode::<Presented>(token, &self.decoding, &self.validation)?;
        let c = data.claims;
        if c.iat > Utc::now().timestamp() + LEEWAY_S as i64 {
            return Err(AuthError::IssuedInFuture);
        }
        claim_text("sub", &c.sub)?;
        claim_text("iss", &c.iss)?;
        claim_text("aud", &c.aud)?;
        if let Some(t) = &c.tenant {
            claim_text("tenant", t)?;
        }
        let jti = c.jti.as_deref().ok_or(AuthError::NoId)?;
        claim_text("jti", jti)?;
        let jti = Uuid::try_parse(jti).map_err(|_| AuthError::BadId)?;
        if (c.role == Role::Tenant) != c.tenant.is_some() {
            return Err(AuthError::TenantClaim);
        }
        if c.exp.saturating_sub(c.iat) > self.max_ttl_s {
            return Err(AuthError::LivesTooLong {
                max_s: self.max_ttl_s,
            });
        }
        if self.revoked.contains(&jti) {
            return Err(AuthError::Revoked);
        }
        Ok(Claims {
            sub: c.sub,
            role: c.role,
            tenant: c.tenant,
            iss: c.iss,
            aud: c.aud,
            iat: c.iat,
            exp: c.exp,
            nbf: c.nbf,
            jti,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn round_trip() {
        let k = Keys::new(KEY).unwrap();
        let (t, minted) = k.sign("ops", Role::Operator, None, 60).unwrap();
        let verified = k.verify(&t).unwrap();
        assert_eq!(verified, minted);
        assert_eq!(verified.role, Role::Operator);
        assert!(k.mint("x", Role::Tenant, None, 60).is_err());
        assert!(Keys::new(b"short").is_err());
        // Every token gets an id of its own.
        assert_ne!(
            k.sign("ops", Role::Operator, None, 60).unwrap().1.jti,
            minted.jti
        );
    }

    /// A token signed with the right key but claims chosen by the test.
    fn forge(k: &[u8], claims: serde_json::Value) -> String {
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(k),
        )
        .unwrap()
    }

    /// Valid claims of a tenant token (the one that has every string claim).
    fn tenant_claims() -> serde_json::Value {
        let now = Utc::now().timestamp();
        serde_json::json!({"sub": "ops", "role": "tenant", "tenant": "acme", "iss": ISSUER,
            "aud": AUDIENCE, "iat": now, "exp": now + 3600, "jti": Uuid::now_v7().to_string()})
    }

    #[test]
    fn not_yet_valid_and_future_issued_tokens_are_refused() {
        let k = Keys::new(KEY).unwrap();
        let now = Utc::now().timestamp();
        let claims = |iat: i64, nbf: Option<i64>| {
            let mut c = serde_json::json!({"sub": "ops", "role": "admin", "iss": ISSUER,
                "aud": AUDIENCE, "iat": iat, "exp": now + 7200, "jti": Uuid::now_v7()});
            if let Some(n) = nbf {
                c["nbf"] = n.into();
            }
            c
        };
        assert!(k.verify(&forge(KEY, claims(now, None))).is_ok());
        assert!(k.verify(&forge(KEY, claims(now, Some(now - 60)))).is_ok());
        // Within the leeway, a clock a little ahead is forgiven.
        assert!(k
            .verify(&forge(KEY, claims(now + 10, Some(now + 10))))
            .is_ok());
        assert!(k
            .verify(&forge(KEY, claims(now, Some(now + 3600))))
            .is_err());
        assert!(matches!(
            k.verify(&forge(KEY, claims(now + 3600, None))),
            Err(AuthError::IssuedInFuture)
        ));
    }

    #[test]
    fn expired_and_foreign_tokens_are_refused() {
        let k = Keys::new(KEY).unwrap();
        let mut expired = tenant_claims();
        expired["iat"] = (Utc::now().timestamp() - 7200).into();
        expired["exp"] = (Utc::now().timestamp() - 3600).into();
        assert!(matches!(
            k.verify(&forge(KEY, expired)),
            Err(AuthError::Invalid(_))
        ));
        let other = Keys::new(b"another-key-another-key-another-key").unwrap();
        assert!(k
            .verify(&other.mint("ops", Role::Admin, None, 60).unwrap())
            .is_err());
    }

    #[test]
    fn every_string_claim_meets_the_text_rule() {
        let k = Keys::new(KEY).unwrap();
        assert!(k.verify(&forge(KEY, tenant_claims())).is_ok());
        let bad = [
            ("NUL", "ac\0me".to_owned()),
            ("a line break", "ac\nme".to_owned()),
            ("an escape", "ac\u{1b}[2Jme".to_owned()),
            ("DEL", "ac\u{7f}me".to_owned()),
            ("a C1 control", "ac\u{85}me".to_owned()),
            ("too long", "a".repeat(input::MAX_KEY_LEN + 1)),
        ];
        for claim in ["sub", "tenant", "jti", "iss", "aud"] {
            for (what, value) in &bad {
                let mut c = tenant_claims();
                c[claim] = value.clone().into();
                let refused = k.verify(&forge(KEY, c));
                assert!(refused.is_err(), "{claim} with {what} was accepted");
                // iss and aud must equal this server's, which jsonwebtoken checks first.
                if !matches!(claim, "iss" | "aud") {
                    assert!(
                        matches!(refused, Err(AuthError::Claim { claim: c, .. }) if c == claim),
                        "{claim} with {what}: {refused:?}"
                    );
                }
            }
        }
        // Keys are not blank.
        for claim in ["sub", "tenant"] {
            let mut c = tenant_claims();
            c[claim] = "  ".into();
            assert!(k.verify(&forge(KEY, c)).is_err(), "blank {claim}");
        }
        // Minting refuses what verifying would.
        assert!(k.mint("o\0ps", Role::Admin, None, 60).is_err());
        assert!(k.mint("ops", Role::Tenant, Some("ac\nme"), 60).is_err());
    }

    #[test]
    fn a_token_without_an_id_or_with_a_foreign_one_is_refused() {
        let k = Keys::new(KEY).unwrap();
        let mut c = tenant_claims();
        c.as_object_mut().unwrap().remove("jti");
        let refused = k.verify(&forge(KEY, c)).unwrap_err();
        assert!(matches!(refused, AuthError::NoId));
        assert!(refused.to_string().contains("mint a new one"));
        let mut c = tenant_claims();
        c["jti"] = "42".into();
        assert!(matches!(k.verify(&forge(KEY, c)), Err(AuthError::BadId)));
    }

    #[test]
    fn a_revoked_token_is_refused_by_every_clone_of_the_keys() {
        let k = Keys::new(KEY).unwrap();
        let replica_half = k.clone();
        let (t, c) = k.sign("ops", Role::Admin, None, 60).unwrap();
        let (other, _) = k.sign("ops", Role::Admin, None, 60).unwrap();
        // Verified, and so kept, before it is revoked.
        assert_eq!(replica_half.verify(&t).unwrap(), c);
        k.revoked().add(c.jti, c.exp);
        assert!(matches!(replica_half.verify(&t), Err(AuthError::Revoked)));
        assert!(k.verify(&other).is_ok());
        // A reload forgets the expired, keeps the rest.
        let now = Utc::now().timestamp();
        let old = Uuid::now_v7();
        k.revoked().merge([(old, now - 3600)], now);
        assert!(!k.revoked().contains(&old));
        assert!(k.revoked().contains(&c.jti));
    }

    #[test]
    fn a_kept_token_expires_as_a_fresh_one_would() {
        let k = Keys::new(KEY).unwrap();
        let (t, c) = k.sign("ops", Role::Admin, None, 60).unwrap();
        assert_eq!(k.verify_at(&t, c.iat).unwrap(), c);
        // Kept now: within the leeway it still passes, past it, it is refused as expired.
        let leeway = LEEWAY_S as i64;
        assert_eq!(k.verify_at(&t, c.exp + leeway).unwrap(), c);
        let refused = k.verify_at(&t, c.exp + leeway + 1).unwrap_err();
        assert!(
            refused.to_string().contains("ExpiredSignature"),
            "{refused}"
        );
        // A maximum lifetime set later is not bypassed by what was kept under the old one.
        let shorter = k.clone().with_max_ttl(30);
        assert!(matches!(
            shorter.verify(&t),
            Err(AuthError::LivesTooLong { max_s: 30 })
        ));
    }

    #[test]
    fn the_kept_tokens_stay_bounded() {
        let k = Keys::new(KEY).unwrap();
        let tokens: Vec<String> = (0..VERIFIED_MAX + 10)
            .map(|_| k.mint("ops", Role::Admin, None, 60).unwrap())
            .collect();
        for t in &tokens {
            k.verify(t).unwrap();
        }
        assert!(k.verified.tokens.read().len() <= VERIFIED_MAX);
        // A refused token is never kept.
        assert!(k.verify("not.a.token").is_err());
        assert!(!k.verified.tokens.read().contains_key("not.a.token"));
    }

    #[test]
    fn lifetimes_over_the_maximum_are_refused_at_mint_and_at_verify() {
        let k = Keys::new(KEY).unwrap().with_max_ttl(3600);
        assert!(k.mint("ops", Role::Admin, None, 3600).is_ok());
        assert!(matches!(
            k.mint("ops", Role::Admin, None, 3601),
            Err(AuthError::TooLong { max_s: 3600 })
        ));
        assert!(matches!(
            k.mint("ops", Role::Admin, None, 0),
            Err(AuthError::NoLifetime)
        ));
        let long = Keys::new(KEY)
            .unwrap()
            .mint("ops", Role::Admin, None, 7200)
            .unwrap();
        assert!(matches!(
            k.verify(&long),
            Err(AuthError::LivesTooLong { max_s: 3600 })
        ));
        assert_eq!(Keys::new(KEY).unwrap().max_ttl_s(), DEFAULT_MAX_TTL_S);
    }
}
