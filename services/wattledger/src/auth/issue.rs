//! Tokens handed out and taken back, for the CLI, the API and the dashboard alike: minting
//! records the token's id before the token is shown; revoking marks it in the database,
//! announces it to every replica in the same transaction, and refuses it in this process at
//! once.

use super::{AuthError, Keys, Role};
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;
use wattledger_domain::input::{self, InputError};
use wattledger_store::api_tokens::{self as store, ApiToken, NewToken};
use wattledger_store::inventory::{ids_by_key, KeyedTable};
use wattledger_store::StoreError;

/// A token's lifetime unless one is asked for (or the maximum, if shorter): a day.
pub const DEFAULT_TTL_S: i64 = 86_400;

/// The longest note kept with a token.
pub const MAX_NOTE_LEN: usize = 1024;

/// What a token is minted for.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub sub: &'a str,
    pub role: Role,
    pub tenant: Option<&'a str>,
    pub ttl_s: i64,
    /// Who mints it (a token's subject, `cli`), for the record.
    pub minted_by: &'a str,
    /// What it is for, for whoever lists the tokens later.
    pub note: &'a str,
}

/// A minted token, shown once, and its record.
#[derive(Debug)]
pub struct Issued {
    pub token: String,
    pub record: ApiToken,
}

#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    #[error("{0}")]
    Token(#[from] AuthError),
    #[error("unknown tenant '{0}'")]
    UnknownTenant(String),
    #[error("the {field} {reason}")]
    Text {
        field: &'static str,
        reason: InputError,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Mints a token and records its id; the token is returned only once recorded.
pub async fn issue(pool: &PgPool, keys: &Keys, req: &Request<'_>) -> Result<Issued, IssueError> {
    let (token, claims) = keys.sign(req.sub, req.role, req.tenant, req.ttl_s)?;
    input::key(req.minted_by).map_err(|reason| IssueError::Text {
        field: "minter",
        reason,
    })?;
    input::text(req.note, MAX_NOTE_LEN).map_err(|reason| IssueError::Text {
        field: "note",
        reason,
    })?;
    if let Some(t) = req.tenant {
        let ids = ids_by_key(pool, KeyedTable::Tenants, &[t.to_owned()]).await?;
        if ids.is_empty() {
            return Err(IssueError::UnknownTenant(t.to_owned()));
        }
    }
    let at = |s: i64| DateTime::<Utc>::from_timestamp(s, 0).unwrap_or_default();
    let new = NewToken {
        jti: claims.jti,
        sub: req.sub,
        role: req.role,
        tenant: req.tenant,
        issued_at: at(claims.iat),
        expires_at: at(claims.exp),
        minted_by: req.minted_by,
        note: req.note,
    };
    store::record(pool, &new).await?;
    Ok(Issued {
        token,
        record: ApiToken {
            jti: new.jti,
            sub: new.sub.to_owned(),
            role: new.role,
            tenant: new.tenant.map(str::to_owned),
            issued_at: new.issued_at,
            expires_at: new.expires_at,
            minted_by: new.minted_by.to_owned(),
            note: new.note.to_owned(),
            revoked_at: None,
            revoked_by: None,
        },
    })
}

/// Revokes the token `jti` on behalf of `by`: refused here at once, and by every other
/// replica as soon as the announcement reaches it. [`StoreError::NotFound`] for an id no
/// token was minted with.
pub async fn revoke(
    pool: &PgPool,
    keys: &Keys,
    jti: Uuid,
    by: &str,
) -> Result<ApiToken, StoreError> {
    let token = store::revoke(pool, jti, by, Utc::now()).await?;
    keys.revoked().add(token.jti, token.expires_at.timestamp());
    Ok(token)
}
