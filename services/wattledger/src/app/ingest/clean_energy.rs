//! Writing a batch of clean-energy deliveries: stored, and every hour a changed delivery
//! covers (now or before the change) marked dirty at its site, in one transaction.

use chrono::Duration;
use sqlx::PgPool;
use wattledger_store::clean_energy::{self, CleanEnergyRow};
use wattledger_store::{dirty, StoreResult};

/// Deliveries inserted or revised.
#[tracing::instrument(skip_all, fields(n = rows.len()))]
pub async fn write(pool: &PgPool, rows: &[CleanEnergyRow]) -> StoreResult<u64> {
    let mut tx = pool.begin().await?;
    let changed = clean_energy::upsert(&mut tx, rows).await?;
    if !changed.is_empty() {
        // The span's last hour is the one its last millisecond falls in.
        dirty::mark_site_spans(
            &mut tx,
            &changed.iter().map(|c| c.site_id).collect::<Vec<_>>(),
            &changed.iter().map(|c| c.start_at).collect::<Vec<_>>(),
            &(changed.iter())
                .map(|c| c.end_at - Duration::milliseconds(1))
                .collect::<Vec<_>>(),
        )
        .await?;
    }
    tx.commit().await?;
    Ok(changed.len() as u64)
}
