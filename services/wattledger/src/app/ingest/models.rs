//! Writing a batch of models: upsert them, and give the jobs that named one before it was
//! registered (kept with the name alone, `jobs.unknown_model`) their model, marking every hour
//! those jobs held dirty so their ledger rows carry it, in one transaction.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use wattledger_store::inventory::{self, ModelRecord};
use wattledger_store::{dirty, jobs, StoreResult};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    /// Models inserted or changed.
    pub models: u64,
    /// Jobs that named one of them and now have it.
    pub adopted: u64,
}

#[tracing::instrument(skip_all, fields(n = records.len()))]
pub async fn write(
    pool: &PgPool,
    records: &[ModelRecord],
    now: DateTime<Utc>,
) -> StoreResult<Written> {
    let mut tx = pool.begin().await?;
    let models = inventory::upsert_models(&mut *tx, records).await?;
    let keys: Vec<String> = records.iter().map(|r| r.key.clone()).collect();
    let adopted = jobs::adopt_models(&mut tx, &keys).await?;
    if !adopted.is_empty() {
        let spans = jobs::allocation_spans(&mut tx, &adopted).await?;
        let (meters, from, to) = super::jobs::dirty_spans(&[], &spans, now);
        dirty::mark_for_intervals(&mut tx, &meters, &from, &to).await?;
        tracing::info!(
            jobs = adopted.len(),
            "jobs that named these models before they were registered now have them"
        );
    }
    tx.commit().await?;
    Ok(Written {
        models,
        adopted: adopted.len() as u64,
    })
}
