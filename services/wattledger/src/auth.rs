//! API tokens: HS256 JWTs with `exp`, `aud` and `iss` required, `nbf` and `iat` honoured,
//! and the algorithm pinned.
//!
//! HS256 rather than an asymmetric algorithm because the verifier is the issuer, and an
//! asymmetric verify per request would dominate the API's cost (DESIGN.md, performance).

use chrono::Utc;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

pub const ISSUER: &str = "wattledger";
pub const AUDIENCE: &str = "wattledger-api";
/// Clock leeway when checking `exp`, `nbf` and `iat`, in seconds.
const LEEWAY_S: u64 = 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Admin,
    Finance,
    Operator,
    Tenant,
    Scheduler,
    Collector,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Finance => "finance",
            Role::Operator => "operator",
            Role::Tenant => "tenant",
            Role::Scheduler => "scheduler",
            Role::Collector => "collector",
        }
    }

    /// A role a dashboard user may hold, from its name; service roles are not among them.
    pub fn of_user(name: &str) -> Option<Role> {
        match name {
            "admin" => Some(Role::Admin),
            "finance" => Some(Role::Finance),
            "operator" => Some(Role::Operator),
            "tenant" => Some(Role::Tenant),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Claims {
    pub sub: String,
    pub role: Role,
    /// The tenant key a `tenant` token is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    pub iss: String,
    pub aud: String,
    pub iat: i64,
    pub exp: i64,
    /// Not before: a token may be minted to start later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<i64>,
}

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("the signing key must be at least 32 bytes")]
    WeakKey,
    #[error("a tenant token needs a tenant, and only a tenant token may have one")]
    TenantClaim,
    #[error("invalid token: issued in the future")]
    IssuedInFuture,
    #[error("invalid token: {0}")]
    Invalid(#[from] jsonwebtoken::errors::Error),
}

#[derive(Clone)]
pub struct Keys {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
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
        })
    }

    /// Mints a token valid for `ttl_s` seconds.
    pub fn mint(
        &self,
        sub: &str,
        role: Role,
        tenant: Option<&str>,
        ttl_s: i64,
    ) -> Result<String, AuthError> {
        if (role == Role::Tenant) != tenant.is_some() {
            return Err(AuthError::TenantClaim);
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
        };
        Ok(jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &self.encoding,
        )?)
    }

    /// Verifies signature, algorithm (HS256 only: `none` and others are refused), `exp`,
    /// `nbf`, `aud` and `iss`, and that it was not issued in the future (`iat`): a token that
    /// says it was minted an hour from now was not minted by a clock this server trusts.
    pub fn verify(&self, token: &str) -> Result<Claims, AuthError> {
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)?;
        let c = data.claims;
        if c.iat > Utc::now().timestamp() + LEEWAY_S as i64 {
            return Err(AuthError::IssuedInFuture);
        }
        if (c.role == Role::Tenant) != c.tenant.is_some() {
            return Err(AuthError::TenantClaim);
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn round_trip() {
        let k = Keys::new(KEY).unwrap();
        let t = k.mint("ops", Role::Operator, None, 60).unwrap();
        assert_eq!(k.verify(&t).unwrap().role, Role::Operator);
        assert!(k.mint("x", Role::Tenant, None, 60).is_err());
        assert!(Keys::new(b"short").is_err());
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

    #[test]
    fn not_yet_valid_and_future_issued_tokens_are_refused() {
        let k = Keys::new(KEY).unwrap();
        let now = Utc::now().timestamp();
        let claims = |iat: i64, nbf: Option<i64>| {
            let mut c = serde_json::json!({"sub": "ops", "role": "admin", "iss": ISSUER,
                "aud": AUDIENCE, "iat": iat, "exp": now + 7200});
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
        let expired = k.mint("ops", Role::Admin, None, -3600).unwrap();
        assert!(k.verify(&expired).is_err());
        let other = Keys::new(b"another-key-another-key-another-key").unwrap();
        assert!(k
            .verify(&other.mint("ops", Role::Admin, None, 60).unwrap())
            .is_err());
    }
}
