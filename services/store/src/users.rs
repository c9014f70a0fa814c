//! Dashboard users: created by an admin (or `wattledger user add`), looked up at login.

use crate::StoreResult;
use sqlx::PgPool;
use wattledger_domain::role::Role;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct User {
    pub id: i64,
    pub username: String,
    pub password_hash: String,
    pub role: Role,
    /// The tenant key of a tenant user.
    pub tenant: Option<String>,
    pub disabled: bool,
}

/// Creates or replaces (by username) a user; `tenant` is a tenant key. `None` if the tenant
/// does not exist. Replacing a user (a new password, role or tenant) ends its sessions in the
/// same transaction: whoever was signed in with the old ones must sign in again.
pub async fn upsert(
    pool: &PgPool,
    username: &str,
    password_hash: &str,
    role: Role,
    tenant: Option<&str>,
) -> StoreResult<Option<i64>> {
    let mut tx = pool.begin().await?;
    let tenant_id: Option<i64> = match tenant {
        Some(key) => match sqlx::query_scalar!("SELECT id FROM tenants WHERE key = $1", key)
            .fetch_optional(&mut *tx)
            .await?
        {
            Some(id) => Some(id),
            None => return Ok(None),
        },
        None => None,
    };
    let id: i64 = sqlx::query_scalar!(
        "INSERT INTO users (username, password_hash, role, tenant_id) VALUES ($1, $2, $3, $4)
         ON CONFLICT (username) DO UPDATE SET password_hash = EXCLUDED.password_hash,
             role = EXCLUDED.role, tenant_id = EXCLUDED.tenant_id, disabled = false
         RETURNING id",
        username,
        password_hash,
        role.as_str(),
        tenant_id
    )
    .fetch_one(&mut *tx)
    .await?;
    crate::sessions::end_all(&mut *tx, id).await?;
    tx.commit().await?;
    Ok(Some(id))
}

pub async fn find(pool: &PgPool, username: &str) -> StoreResult<Option<User>> {
    Ok(sqlx::query_as!(
        User,
        r#"SELECT u.id, u.username, u.password_hash, u.role AS "role: Role", t.key AS "tenant?", u.disabled
           FROM users u LEFT JOIN tenants t ON t.id = u.tenant_id WHERE u.username = $1"#,
        username,
    )
    .fetch_optional(pool)
    .await?)
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct UserRow {
    pub username: String,
    pub role: Role,
    pub tenant: Option<String>,
    pub disabled: bool,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub last_login_at: Option<chrono::DateTime<chrono::Utc>>,
}

pub async fn list(pool: &PgPool) -> StoreResult<Vec<UserRow>> {
    Ok(sqlx::query_as!(
        UserRow,
        r#"SELECT u.username, u.role AS "role: Role", t.key AS "tenant?", u.disabled, u.created_at,
                  u.last_login_at
           FROM users u LEFT JOIN tenants t ON t.id = u.tenant_id ORDER BY u.username"#,
    )
    .fetch_all(pool)
    .await?)
}
