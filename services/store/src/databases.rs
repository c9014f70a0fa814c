//! Databases on a PostgreSQL server or a Citus cluster, for the embedded server, the demo,
//! the test harness and the benches: create one if it is missing, drop one. Identifiers
//! cannot be bound, so a name is checked first.
//!
//! On a Citus coordinator (the admin database has the `citus` extension and workers) a
//! database is one per node: Citus does not propagate `CREATE DATABASE` by default, and a new
//! database joins the cluster only once the extension is created in it on every node and the
//! coordinator is told its own address and its workers'.

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

/// `url` with its database replaced by `name`.
pub fn url_of(url: &str, name: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, ""), |(b, q)| (b, q));
    let (scheme, rest) = base.split_once("://").unwrap_or(("postgres", base));
    let authority = rest.split('/').next().unwrap_or(rest);
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    format!("{scheme}://{authority}/{name}{query}")
}

/// `url` with its host and port replaced (user, database and options kept).
fn on_host(url: &str, host: &str, port: i32) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    let user = authority.rsplit_once('@').map(|(u, _)| u);
    match user {
        Some(user) => format!("{scheme}://{user}@{host}:{port}{path}"),
        None => format!("{scheme}://{host}:{port}{path}"),
    }
}

/// The admin URLs of the servers a database made from `admin_url` lives on: the one server,
/// or a Citus cluster's active primary workers and then its coordinator (`admin_url`).
pub async fn nodes(admin_url: &str) -> StoreResult<Vec<String>> {
    let mut conn = sqlx::PgConnection::connect(admin_url).await?;
    if !crate::distribution::is_citus(&mut conn).await? {
        return Ok(vec![admin_url.to_owned()]);
    }
    let workers: Vec<(String, i32)> = sqlx::query_as(
        "SELECT nodename::text, nodeport FROM pg_dist_node
         WHERE groupid <> 0 AND noderole = 'primary' AND isactive ORDER BY nodeid",
    )
    .fetch_all(&mut conn)
    .await?;
    let mut out: Vec<String> = workers
        .iter()
        .map(|(host, port)| on_host(admin_url, host, *port))
        .collect();
    out.push(admin_url.to_owned());
    Ok(out)
}

/// Creates `name` on the server at `admin_url` (a database that exists) if it is missing; on
/// a Citus coordinator, on every node, joined to the cluster.
pub async fn ensure(admin_url: &str, name: &str) -> StoreResult<()> {
    let nodes = nodes(admin_url).await?;
    let mut created = false;
    for node in &nodes {
        let mut conn = sqlx::PgConnection::connect(node).await?;
        let exists = sqlx::query_scalar!("SELECT 1 FROM pg_database WHERE datname = $1", name)
            .fetch_optional(&mut conn)
            .await?;
        if exists.is_none() {
            sqlx::query(&format!("CREATE DATABASE {}", checked(name)?))
                .execute(&mut conn)
                .await?;
            created = true;
        }
    }
    if created && nodes.len() > 1 {
        join(&nodes, name).await?;
    }
    Ok(())
}

/// Makes the database `name`, on every node of `nodes` (workers, then the coordinator), one
/// Citus database.
pub async fn join(nodes: &[String], name: &str) -> StoreResult<()> {
    for node in nodes {
        let mut conn = sqlx::PgConnection::connect(&url_of(node, name)).await?;
        sqlx::query("CREATE EXTENSION IF NOT EXISTS citus")
            .execute(&mut conn)
            .await?;
    }
    let Some((coordinator, workers)) = nodes.split_last() else {
        return Ok(());
    };
    let host_port = |url: &str| -> (String, i32) {
        let rest = url.split_once("://").map_or(url, |(_, r)| r);
        let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
        let hp = rest.split(['/', '?']).next().unwrap_or(rest);
        let (h, p) = hp.rsplit_once(':').unwrap_or((hp, "5432"));
        (h.to_owned(), p.parse().unwrap_or(5432))
    };
    let mut conn = sqlx::PgConnection::connect(&url_of(coordinator, name)).await?;
    let (host, port) = host_port(coordinator);
    sqlx::query("SELECT citus_set_coordinator_host($1, $2)")
        .bind(&host)
        .bind(port)
        .execute(&mut conn)
        .await?;
    for worker in workers {
        let (host, port) = host_port(worker);
        sqlx::query("SELECT citus_add_node($1, $2)")
            .bind(&host)
            .bind(port)
            .execute(&mut conn)
            .await?;
    }
    Ok(())
}

/// Drops `name` on the server at `admin_url`, closing its connections, if it exists; on a
/// Citus coordinator, on every node (the coordinator first, so no session of its holds a
/// worker's copy open).
pub async fn drop(admin_url: &str, name: &str) -> StoreResult<()> {
    let name = checked(name)?;
    for node in nodes(admin_url).await?.iter().rev() {
        let mut conn = sqlx::PgConnection::connect(node).await?;
        sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&mut conn)
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_user_and_options() {
        let u = "postgres://postgres@127.0.0.1:9700/postgres?sslmode=disable";
        assert_eq!(
            url_of(u, "wl"),
            "postgres://postgres@127.0.0.1:9700/wl?sslmode=disable"
        );
        assert_eq!(
            on_host(u, "10.0.0.2", 5432),
            "postgres://postgres@10.0.0.2:5432/postgres?sslmode=disable"
        );
        assert_eq!(on_host("postgres://h:1/db", "w", 2), "postgres://w:2/db");
        assert_eq!(url_of("postgres://u:p@h/db", "x"), "postgres://u:p@h/x");
    }
}
