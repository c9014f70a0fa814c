//! Writing a batch of meters: every level of the tree in one transaction, parents first, so
//! a batch may name a parent it defines itself and no reader sees half a tree.

use sqlx::PgPool;
use wattledger_store::inventory::{self, MeterRecord};
use wattledger_store::StoreResult;

/// The meters written (inserted or changed).
#[tracing::instrument(skip_all, fields(n = records.len()))]
pub async fn write(pool: &PgPool, records: &[MeterRecord]) -> StoreResult<u64> {
    let mut tx = pool.begin().await?;
    let written = inventory::upsert_meters(&mut tx, records).await?;
    tx.commit().await?;
    Ok(written)
}
