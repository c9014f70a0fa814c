//! Writing a batch of device models: each model with its aliases in one transaction, so an
//! alias moved from one model to another is never held by both or by neither.

use sqlx::PgPool;
use wattledger_store::inventory::{self, DeviceModelRecord};
use wattledger_store::StoreResult;

/// The device models and aliases written (inserted, changed or dropped).
#[tracing::instrument(skip_all, fields(n = records.len()))]
pub async fn write(pool: &PgPool, records: &[DeviceModelRecord]) -> StoreResult<u64> {
    let mut tx = pool.begin().await?;
    let written = inventory::upsert_device_models(&mut tx, records).await?;
    tx.commit().await?;
    Ok(written)
}
