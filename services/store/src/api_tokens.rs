//! The server-side record of minted API tokens (`api_tokens`): what each token id (`jti`)
//! grants, until when, and whether it was revoked. Revoking notifies every replica on
//! [`REVOKED_CHANNEL`] in the same transaction, so none learns of it before it is committed.

use crate::{StoreError, StoreResult};
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;
use wattledger_domain::role::{Role, TokenState};

/// The LISTEN/NOTIFY channel a revocation is announced on; the payload is
/// `<jti> <expires_at as Unix seconds>`.
pub const REVOKED_CHANNEL: &str = "wattledger_token_revoked";

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ApiToken {
    pub jti: Uuid,
    pub sub: String,
    pub role: Role,
    pub tenant: Option<String>,
    pub issued_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub minted_by: String,
    pub note: String,
    pub revoked_at: Option<DateTime<Utc>>,
    pub revoked_by: Option<String>,
}

impl ApiToken {
    /// Revoked, expired or live at `now`: what the API, the CLI and the dashboard say of it.
    pub fn state(&self, now: DateTime<Utc>) -> TokenState {
        if self.revoked_at.is_some() {
            TokenState::Revoked
        } else if self.expires_at <= now {
            TokenState::Expired
        } else {
            TokenState::Live
        }
    }
}

/// A token about to be handed out, recorded before it is.
#[derive(Debug, Clone)]
pub struct NewToken<'a> {
    pub jti: Uuid,
    pub sub: &'a str,
    pub role: Role,
    pub tenant: Option<&'a str>,
    pub issued_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub minted_by: &'a str,
    pub note: &'a str,
}

const COLUMNS: &str = "jti, sub, role, tenant, issued_at, expires_at, minted_by, note, \
                       revoked_at, revoked_by";

pub async fn record(pool: &PgPool, t: &NewToken<'_>) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO api_tokens (jti, sub, role, tenant, issued_at, expires_at, minted_by, note)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(t.jti)
    .bind(t.sub)
    .bind(t.role)
    .bind(t.tenant)
    .bind(t.issued_at)
    .bind(t.expires_at)
    .bind(t.minted_by)
    .bind(t.note)
    .execute(pool)
    .await?;
    Ok(())
}

/// Tokens newest first: only the live ones (not expired at `now`, not revoked) unless `all`.
pub async fn list(pool: &PgPool, all: bool, now: DateTime<Utc>) -> StoreResult<Vec<ApiToken>> {
    Ok(sqlx::query_as::<_, ApiToken>(&format!(
        "SELECT {COLUMNS} FROM api_tokens
         WHERE $1 OR (revoked_at IS NULL AND expires_at > $2)
         ORDER BY issued_at DESC, jti"
    ))
    .bind(all)
    .bind(now)
    .fetch_all(pool)
    .await?)
}

pub async fn find(pool: &PgPool, jti: Uuid) -> StoreResult<Option<ApiToken>> {
    Ok(
        sqlx::query_as::<_, ApiToken>(&format!("SELECT {COLUMNS} FROM api_tokens WHERE jti = $1"))
            .bind(jti)
            .fetch_optional(pool)
            .await?,
    )
}

/// Revokes the token `jti` (a token revoked already keeps its first revocation) and
/// announces it to every replica when the transaction commits. [`StoreError::NotFound`] if no
/// such token was minted.
pub async fn revoke(
    pool: &PgPool,
    jti: Uuid,
    by: &str,
    now: DateTime<Utc>,
) -> StoreResult<ApiToken> {
    let mut tx = pool.begin().await?;
    let token = sqlx::query_as::<_, ApiToken>(&format!(
        "UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, $2),
             revoked_by = COALESCE(revoked_by, $3)
         WHERE jti = $1 RETURNING {COLUMNS}"
    ))
    .bind(jti)
    .bind(now)
    .bind(by)
    .fetch_optional(&mut *tx)
    .await?
    .ok_or(StoreError::NotFound)?;
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(REVOKED_CHANNEL)
        .bind(format!("{} {}", token.jti, token.expires_at.timestamp()))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(token)
}

/// The revoked tokens that have not expired by `since`, with their expiry: what a replica
/// must refuse (an expired token is refused anyway).
pub async fn revoked(
    pool: &PgPool,
    since: DateTime<Utc>,
) -> StoreResult<Vec<(Uuid, DateTime<Utc>)>> {
    Ok(sqlx::query_as::<_, (Uuid, DateTime<Utc>)>(
        "SELECT jti, expires_at FROM api_tokens WHERE revoked_at IS NOT NULL AND expires_at > $1",
    )
    .bind(since)
    .fetch_all(pool)
    .await?)
}
