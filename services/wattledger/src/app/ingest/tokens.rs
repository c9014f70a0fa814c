//! Writing a batch of token records: insert those not yet stored, tell a resend (the same
//! counts) from a conflict (other counts: the stored record stands), and mark dirty the
//! hours whose split the new tokens change, at their jobs' sites, in one transaction.

use sqlx::PgPool;
use wattledger_store::tokens::{self, TokenRow};
use wattledger_store::{dirty, StoreResult};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    pub inserted: u64,
    pub duplicates: u64,
    /// Indexes of records whose key was stored with other counts.
    pub conflicts: Vec<usize>,
}

#[tracing::instrument(skip_all, fields(n = rows.len()))]
pub async fn write(pool: &PgPool, rows: &[TokenRow]) -> StoreResult<Written> {
    let mut tx = pool.begin().await?;
    let stored = tokens::insert(&mut tx, rows).await?;
    let mut out = Written::default();
    for s in stored {
        if s.same {
            out.duplicates += 1;
        } else {
            out.conflicts.push(s.index);
        }
    }
    out.inserted = rows.len() as u64 - out.duplicates - out.conflicts.len() as u64;
    // Only new records change a split: a resend or a refused conflict leaves the hours be.
    if out.inserted > 0 {
        let sites: Vec<i64> = rows.iter().map(|r| r.site_id).collect();
        let from: Vec<_> = rows.iter().map(|r| r.start_at).collect();
        let to: Vec<_> = rows.iter().map(|r| r.end_at).collect();
        dirty::mark_site_spans(&mut tx, &sites, &from, &to).await?;
    }
    tx.commit().await?;
    Ok(out)
}
