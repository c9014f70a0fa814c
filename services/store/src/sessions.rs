//! Dashboard sessions (server-side, by the SHA-256 of the cookie's token) and the record of
//! failed sign-ins that the dashboard's growing delays read.

use crate::StoreResult;
use chrono::{DateTime, Duration, Utc};
use sqlx::{PgExecutor, PgPool};
use wattledger_domain::role::Role;

/// The user a live session belongs to, as the users table says now.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SessionUser {
    pub user_id: i64,
    pub username: String,
    pub role: Role,
    /// The tenant key of a tenant user.
    pub tenant: Option<String>,
    pub tenant_id: Option<i64>,
}

/// Starts a session of `user_id` lasting `ttl`; sessions that have expired go at the same
/// time, so the table holds only live ones.
pub async fn start(
    pool: &PgPool,
    user_id: i64,
    token_sha256: &str,
    ttl: Duration,
) -> StoreResult<()> {
    let mut tx = pool.begin().await?;
    sqlx::query!("DELETE FROM dashboard_sessions WHERE expires_at < now()")
        .execute(&mut *tx)
        .await?;
    sqlx::query!(
        "INSERT INTO dashboard_sessions (token_sha256, user_id, expires_at)
         VALUES ($1, $2, now() + $3::bigint * interval '1 millisecond')",
        token_sha256,
        user_id,
        ttl.num_milliseconds(),
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "UPDATE users SET last_login_at = now() WHERE id = $1",
        user_id
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// The live session with this token: not expired, its user not disabled.
pub async fn find(pool: &PgPool, token_sha256: &str) -> StoreResult<Option<SessionUser>> {
    Ok(sqlx::query_as!(
        SessionUser,
        r#"SELECT u.id AS user_id, u.username, u.role AS "role: Role", t.key AS "tenant?", u.tenant_id
           FROM dashboard_sessions s JOIN users u ON u.id = s.user_id
           LEFT JOIN tenants t ON t.id = u.tenant_id
           WHERE s.token_sha256 = $1 AND s.expires_at > now() AND NOT u.disabled"#,
        token_sha256,
    )
    .fetch_optional(pool)
    .await?)
}

/// Ends one session (signing out).
pub async fn end(pool: &PgPool, token_sha256: &str) -> StoreResult<()> {
    sqlx::query!(
        "DELETE FROM dashboard_sessions WHERE token_sha256 = $1",
        token_sha256
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Ends every session of a user (a new password, role or tenant, or disabling).
pub async fn end_all(db: impl PgExecutor<'_>, user_id: i64) -> StoreResult<u64> {
    Ok(
        sqlx::query!("DELETE FROM dashboard_sessions WHERE user_id = $1", user_id)
            .execute(db)
            .await?
            .rows_affected(),
    )
}

/// What failed sign-ins are counted by: the name typed, and the client's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKey<'a> {
    User(&'a str),
    Address(&'a str),
}

impl FailureKey<'_> {
    fn parts(&self) -> (&'static str, &str) {
        match self {
            FailureKey::User(k) => ("user", k),
            FailureKey::Address(k) => ("address", k),
        }
    }
}

/// Until when sign-in is refused for any of `keys`, if it is now.
pub async fn blocked_until(
    pool: &PgPool,
    keys: &[FailureKey<'_>],
) -> StoreResult<Option<DateTime<Utc>>> {
    let (kinds, names): (Vec<&str>, Vec<&str>) = keys.iter().map(FailureKey::parts).unzip();
    Ok(sqlx::query_scalar!(
        "SELECT max(f.blocked_until) FROM login_failures f
         JOIN UNNEST($1::text[], $2::text[]) AS k(kind, key) USING (kind, key)
         WHERE f.blocked_until > now()",
        &kinds as &[&str],
        &names as &[&str],
    )
    .fetch_one(pool)
    .await?)
}

/// Counts a failed sign-in against `key` and returns the failures in a row, counting from
/// the first after a quiet `window`; `block` says how long that many failures block.
pub async fn record_failure(
    pool: &PgPool,
    key: FailureKey<'_>,
    window: Duration,
    block: impl FnOnce(i32) -> Option<Duration>,
) -> StoreResult<i32> {
    let (kind, name) = key.parts();
    let mut tx = pool.begin().await?;
    // One failure of a key at a time: the count is read and written in two steps, because a
    // distributed PostgreSQL refuses time arithmetic (a STABLE operator) in `DO UPDATE SET`.
    sqlx::query!(
        "SELECT pg_advisory_xact_lock(7301004, hashtext($1 || '/' || $2))",
        kind,
        name
    )
    .execute(&mut *tx)
    .await?;
    let failures: i32 = sqlx::query_scalar!(
        r#"INSERT INTO login_failures (kind, key, failures, last_failure_at)
         SELECT $1, $2, 1 + coalesce((SELECT f.failures FROM login_failures f
                                      WHERE f.kind = $1 AND f.key = $2
                                        AND f.last_failure_at >= now() - $3::bigint * interval '1 millisecond'), 0),
                now()
         ON CONFLICT (kind, key) DO UPDATE SET
             failures = excluded.failures, last_failure_at = excluded.last_failure_at
         RETURNING failures AS "failures!""#,
        kind,
        name,
        window.num_milliseconds(),
    )
    .fetch_one(&mut *tx)
    .await?;
    if let Some(d) = block(failures) {
        sqlx::query!(
            "UPDATE login_failures SET blocked_until = now() + $3::bigint * interval '1 millisecond' WHERE kind = $1 AND key = $2",
            kind,
            name,
            d.num_milliseconds(),
        )
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(failures)
}

/// Forgets the failures of `key` (a successful sign-in of that user).
pub async fn clear_failures(pool: &PgPool, key: FailureKey<'_>) -> StoreResult<()> {
    let (kind, name) = key.parts();
    sqlx::query!(
        "DELETE FROM login_failures WHERE kind = $1 AND key = $2",
        kind,
        name
    )
    .execute(pool)
    .await?;
    Ok(())
}
