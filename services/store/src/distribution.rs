//! Where each table lives on a distributed PostgreSQL (Citus), and placing them there.
//!
//! [`TABLES`] is the classification: the one list that `wattledger migrate` places the schema
//! by, that the schema-rules test (`tests/api/citus.rs`) holds the migrations to, and that
//! SCALING.md's table is checked against. A migration that adds a table adds it here.
//!
//! On plain PostgreSQL nothing here runs. On a Citus coordinator (the `citus` extension
//! present) [`place`] runs after every migration: it places each table that is not placed yet
//! (all of them on the first run, a new migration's tables later), dropping the foreign keys
//! that Citus would refuse while only some tables are placed and adding them back once all
//! are. Time partitions that `crate::partitions` creates later are placed by Citus itself (a
//! partition of a distributed table is distributed with it).

use crate::StoreResult;
use sqlx::{PgPool, Row};

/// How a table is placed on a Citus cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Copied to every node: small, read in joins everywhere, written rarely.
    Reference,
    /// Sharded by `site_id`, every such table co-located with the others: a site's samples,
    /// jobs, ledger and site-hours live on one shard, so an agent's push, its dirty marking
    /// and an attribution run of a site touch one node.
    BySite,
    /// On the coordinator only (in Citus's metadata, so that it may refer to reference
    /// tables): written once per decision, message, session or close, never per sample.
    Coordinator,
}

/// The distribution column of every [`Placement::BySite`] table.
pub const SITE_COLUMN: &str = "site_id";

/// Every table of the schema with its placement, in the order they are placed: reference
/// tables parents first, then the site-sharded ones (the first is the co-location group's
/// anchor), then the coordinator's.
pub const TABLES: &[(&str, Placement)] = &[
    ("tenants", Placement::Reference),
    ("sites", Placement::Reference),
    ("models", Placement::Reference),
    ("device_models", Placement::Reference),
    ("device_model_aliases", Placement::Reference),
    ("meters", Placement::Reference),
    ("admission_policies", Placement::Reference),
    ("budgets", Placement::Reference),
    ("signal_points", Placement::Reference),
    ("users", Placement::Reference),
    ("webhook_endpoints", Placement::Reference),
    ("site_power_policies", Placement::Reference),
    ("grid_events", Placement::Reference),
    ("jobs", Placement::BySite),
    ("ledger", Placement::BySite),
    ("samples", Placement::BySite),
    ("step_packs", Placement::BySite),
    ("step_pack_days", Placement::BySite),
    ("sample_conflicts", Placement::BySite),
    ("meter_heads", Placement::BySite),
    ("dirty_hours", Placement::BySite),
    ("site_hours", Placement::BySite),
    ("site_hour_power", Placement::BySite),
    ("usage_days", Placement::BySite),
    ("usage_job_days", Placement::BySite),
    ("allocations", Placement::BySite),
    ("token_records", Placement::BySite),
    ("site_clean_energy", Placement::BySite),
    ("ledger_devices", Placement::BySite),
    ("ledger_gpu_time", Placement::BySite),
    ("admission_decisions", Placement::Coordinator),
    ("admission_dead_letters", Placement::Coordinator),
    ("api_tokens", Placement::Coordinator),
    ("attribution_runs", Placement::Coordinator),
    ("budget_events", Placement::Coordinator),
    ("chargeback_audit", Placement::Coordinator),
    ("month_closes", Placement::Coordinator),
    ("chargeback_exports", Placement::Coordinator),
    ("statements", Placement::Coordinator),
    ("statement_lines", Placement::Coordinator),
    ("statement_line_gpu_time", Placement::Coordinator),
    ("site_reconciliations", Placement::Coordinator),
    ("dashboard_sessions", Placement::Coordinator),
    ("login_failures", Placement::Coordinator),
    ("partition_compactions", Placement::Coordinator),
    ("retention_drops", Placement::Coordinator),
    ("webhook_messages", Placement::Coordinator),
    ("webhook_attempts", Placement::Coordinator),
];

/// The placement of `table`, if it is classified.
pub fn placement_of(table: &str) -> Option<Placement> {
    TABLES.iter().find(|(t, _)| *t == table).map(|(_, p)| *p)
}

/// The site-sharded table the others are co-located with.
fn anchor() -> &'static str {
    TABLES
        .iter()
        .find(|(_, p)| *p == Placement::BySite)
        .map(|(t, _)| *t)
        .expect("at least one table is sharded by site")
}

/// Whether the database is a Citus coordinator's (the extension is installed in it).
pub async fn is_citus(db: impl sqlx::PgExecutor<'_>) -> StoreResult<bool> {
    Ok(
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')")
            .fetch_one(db)
            .await?,
    )
}

/// Sets a new connection up for a Citus coordinator; nothing on plain PostgreSQL (one
/// statement either way).
///
/// Multi-shard statements in a transaction run over one connection per node: a transaction
/// that reads several shards and then writes a coordinator table with a foreign key to a
/// reference table (a budget alert's outbox message, a month close's statements) is refused
/// otherwise ("cannot modify table … because there was a parallel operation on a distributed
/// table"). The server's multi-shard work in transactions is the month close and budget
/// checks, not a hot path.
pub async fn on_connect(conn: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query(
        "SELECT set_config('citus.multi_shard_modify_mode', 'sequential', false)
         FROM pg_extension WHERE extname = 'citus'",
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// What [`place`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Placed {
    /// The tables it placed, in order.
    pub tables: Vec<String>,
    /// The foreign keys it took off and put back around them.
    pub foreign_keys: usize,
}

/// Places every table that is not placed yet, by [`TABLES`]. One transaction, so a failure
/// leaves the schema as it was (no foreign key lost); serialised by an advisory lock so two
/// servers migrating at once place each table once.
///
/// Errors if a table of the schema is not classified: placing it wrongly by default would be
/// found only under load.
pub async fn place(pool: &PgPool) -> StoreResult<Placed> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(7301003)")
        .execute(&mut *tx)
        .await?;
    // Citus runs DDL over a shard's placements on several connections by default; a
    // transaction that also creates and fills shards must stay on one connection per node.
    sqlx::query("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
        .execute(&mut *tx)
        .await?;

    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c
         WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')
           AND NOT c.relispartition AND c.relname <> '_sqlx_migrations'
           AND NOT EXISTS (SELECT 1 FROM pg_dist_partition d WHERE d.logicalrelid = c.oid)
         ORDER BY 1",
    )
    .fetch_all(&mut *tx)
    .await?;
    if tables.is_empty() {
        tx.commit().await?;
        return Ok(Placed::default());
    }
    if let Some(t) = tables.iter().find(|t| placement_of(t).is_none()) {
        return Err(crate::StoreError::Unclassified(t.clone()));
    }

    // Every foreign key with an end on a table about to be placed: Citus refuses a key from
    // a table not yet placed (or from a reference or coordinator table) to a sharded one, so
    // while only some are placed no such key may exist. Keys on partitions are the parent's.
    let keys: Vec<(String, String, String)> = sqlx::query(
        "SELECT c.conrelid::regclass::text, c.conname::text, pg_get_constraintdef(c.oid)
         FROM pg_constraint c
         WHERE c.contype = 'f' AND c.connamespace = 'public'::regnamespace
           AND c.conparentid = 0
           AND (c.conrelid::regclass::text = ANY($1) OR c.confrelid::regclass::text = ANY($1))
         ORDER BY 1, 2",
    )
    .bind(&tables)
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect();
    for (table, name, _) in &keys {
        sqlx::query(&format!(
            "ALTER TABLE {} DROP CONSTRAINT {}",
            ident(table),
            ident(name)
        ))
        .execute(&mut *tx)
        .await?;
    }

    let mut placed = Vec::new();
    for (table, placement) in TABLES {
        if !tables.iter().any(|t| t == table) {
            continue;
        }
        let call = match placement {
            Placement::Reference => "SELECT create_reference_table($1)".to_owned(),
            Placement::BySite if *table == anchor() => {
                format!("SELECT create_distributed_table($1, '{SITE_COLUMN}')")
            }
            Placement::BySite => format!(
                "SELECT create_distributed_table($1, '{SITE_COLUMN}', colocate_with => '{}')",
                anchor()
            ),
            Placement::Coordinator => "SELECT citus_add_local_table_to_metadata($1)".to_owned(),
        };
        sqlx::query(&call).bind(table).execute(&mut *tx).await?;
        tracing::info!(table, ?placement, "placed on the Citus cluster");
        placed.push((*table).to_owned());
    }

    for (table, name, definition) in &keys {
        sqlx::query(&format!(
            "ALTER TABLE {} ADD CONSTRAINT {} {definition}",
            ident(table),
            ident(name)
        ))
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(Placed {
        tables: placed,
        foreign_keys: keys.len(),
    })
}

/// A name read back from the catalog, quoted for DDL (it cannot be bound).
fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_is_classified_once() {
        let mut names: Vec<&str> = TABLES.iter().map(|(t, _)| *t).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "a table classified twice");
    }

    #[test]
    fn the_anchor_is_the_first_site_sharded_table() {
        assert_eq!(anchor(), "jobs");
        assert_eq!(placement_of("samples"), Some(Placement::BySite));
        assert_eq!(placement_of("nope"), None);
    }

    #[test]
    fn names_are_quoted_for_ddl() {
        assert_eq!(ident("ledger"), "\"ledger\"");
        assert_eq!(ident("a\"b"), "\"a\"\"b\"");
    }
}
