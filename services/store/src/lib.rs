//! wattledger's Postgres storage: migrations, ingest writes, attribution I/O and the
//! tenant-scoped queries of the API.
//!
//! Every function takes a pool or a transaction; none holds state. Tenant-visible reads take
//! a [`Scope`], so a tenant's token cannot reach another tenant's rows by construction.

pub mod admission;
pub mod api_tokens;
pub mod attribution;
pub mod badput;
pub mod budget_alerts;
pub mod budgets;
pub mod chargeback;
pub mod clean_energy;
pub mod compaction;
pub mod databases;
pub mod devices;
pub mod dirty;
pub mod distribution;
pub mod error;
pub mod grid_events;
pub mod inventory;
pub mod jobs;
pub mod metrics;
pub mod operations;
pub mod partitions;
pub mod pg_copy;
pub mod power;
pub mod power_policy;
pub mod retention;
pub mod samples;
pub mod scope;
pub mod sessions;
pub mod signals;
pub mod step_packs;
pub mod tokens;
pub mod usage;
pub mod users;
pub mod webhooks;

pub use error::{StoreError, StoreResult};
pub use scope::Scope;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use std::str::FromStr;
use std::time::Duration;

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// Opens a pool to `url`.
pub async fn connect(url: &str, max_connections: u32) -> StoreResult<PgPool> {
    // Every statement is planned for its own parameters: a cached statement's generic plan
    // guesses a time range's selectivity blind and picked the hour index over the tenant's,
    // so one tenant's month read every tenant's rows (BENCHMARKS.md, fleet scale). Planning
    // costs well under a millisecond a statement. No JIT: its compile time (~0.5 s for the
    // budget list at 320 tenants, whose laterals the planner overprices) dwarfs what it saves
    // on queries that read a few thousand rows.
    let options = PgConnectOptions::from_str(url)?
        .application_name("wattledger")
        .options([("plan_cache_mode", "force_custom_plan"), ("jit", "off")]);
    let pool = PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .after_connect(|conn, _| Box::pin(distribution::on_connect(conn)))
        .connect_with(options)
        .await?;
    Ok(pool)
}

/// Applies pending migrations (forward only), then, on a Citus coordinator, places every
/// table they added on the cluster (`distribution`).
pub async fn migrate(pool: &PgPool) -> StoreResult<()> {
    MIGRATOR.run(pool).await?;
    if distribution::is_citus(pool).await? {
        let placed = distribution::place(pool).await?;
        if !placed.tables.is_empty() {
            tracing::info!(
                tables = placed.tables.len(),
                foreign_keys = placed.foreign_keys,
                "placed the new tables on the Citus cluster"
            );
        }
    }
    Ok(())
}
