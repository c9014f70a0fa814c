//! Writing a batch of grid signal points: new points inserted, revised ones replaced, and the
//! attributed hours a changed point overlaps marked dirty at its region's sites, in one
//! transaction, so a revision is never stored without the recomputation it calls for.

use sqlx::PgPool;
use wattledger_store::signals::{self, SignalRow};
use wattledger_store::{dirty, StoreResult};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    /// Points inserted or revised.
    pub written: u64,
    /// Points already stored with the same value.
    pub duplicates: u64,
    /// Site-hours marked for recomputation.
    pub dirtied: u64,
}

#[tracing::instrument(skip_all, fields(n = rows.len()))]
pub async fn write(pool: &PgPool, rows: &[SignalRow]) -> StoreResult<Written> {
    let mut tx = pool.begin().await?;
    let changed = signals::upsert(&mut tx, rows).await?;
    let dirtied = dirty::mark_regions(&mut tx, &changed).await?;
    tx.commit().await?;
    Ok(Written {
        written: changed.len() as u64,
        duplicates: (rows.len() - changed.len()) as u64,
        dirtied,
    })
}
