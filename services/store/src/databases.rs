//! Databases on a PostgreSQL server, for the embedded server and the demo: create one if
//! it is missing, drop one. Identifiers cannot be bound, so a name is checked first.

use crate::{StoreError, StoreResult};
use sqlx::Connection;

/// A database name these functions accept: letters, digits and `_` (the callers' names are
/// fixed or generated, never a user's).
fn checked(name: &str) -> StoreResult<&str> {
    if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        Ok(name)
    } else {
        Err(StoreError::DatabaseName(name.to_owned()))
    }
}

/// Creates `name` on the server at `admin_url` (a database that exists) if it is missing.
pub async fn ensure(admin_url: &str, name: &str) -> StoreResult<()> {
    let mut conn = sqlx::PgConnection::connect(admin_url).await?;
    let exists = sqlx::query_scalar!("SELECT 1 FROM pg_database WHERE datname = $1", name)
        .fetch_optional(&mut conn)
        .await?;
    if exists.is_none() {
        sqlx::query(&format!("CREATE DATABASE {}", checked(name)?))
            .execute(&mut conn)
            .await?;
    }
    Ok(())
}

/// Drops `name` on the server at `admin_url`, closing its connections, if it exists.
pub async fn drop(admin_url: &str, name: &str) -> StoreResult<()> {
    let mut conn = sqlx::PgConnection::connect(admin_url).await?;
    sqlx::query(&format!(
        "DROP DATABASE IF EXISTS {} WITH (FORCE)",
        checked(name)?
    ))
    .execute(&mut conn)
    .await?;
    Ok(())
}
