//! The raw sample write path: one UNNEST statement per batch, idempotent on (meter, ts).
//!
//! A sample already stored with the same values is a duplicate (ignored); with different
//! values it is a conflict: the stored one stands and the conflict is recorded and reported.

use crate::{dirty, partitions, StoreResult};
use chrono::{DateTime, Utc};
use sqlx::PgPool;

/// A validated sample, meter resolved to its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleRow {
    pub meter_id: i64,
    pub ts: DateTime<Utc>,
    pub counter_mj: Option<i64>,
    pub power_mw: Option<i64>,
}

/// A sent sample whose (meter, ts) was already stored with other values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// Index of the record in the batch.
    pub index: usize,
    pub stored_counter_mj: Option<i64>,
    pub stored_power_mw: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InsertOutcome {
    pub inserted: u64,
    pub duplicates: u64,
    pub conflicts: Vec<Conflict>,
}

/// Inserts a batch in one transaction and marks the hours it touches dirty.
///
/// The batch must not repeat a (meter, ts) pair (the API refuses such batches).
#[tracing::instrument(skip_all, fields(n = rows.len()))]
pub async fn insert(pool: &PgPool, rows: &[SampleRow]) -> StoreResult<InsertOutcome> {
    if rows.is_empty() {
        return Ok(InsertOutcome::default());
    }
    let (min_ts, max_ts) = rows.iter().fold((rows[0].ts, rows[0].ts), |(lo, hi), r| {
        (lo.min(r.ts), hi.max(r.ts))
    });
    let mut tx = pool.begin().await?;
    partitions::ensure(&mut tx, &partitions::months(min_ts, max_ts)).await?;

    let meter_ids: Vec<i64> = rows.iter().map(|r| r.meter_id).collect();
    let ts: Vec<DateTime<Utc>> = rows.iter().map(|r| r.ts).collect();
    let counters: Vec<Option<i64>> = rows.iter().map(|r| r.counter_mj).collect();
    let powers: Vec<Option<i64>> = rows.iter().map(|r| r.power_mw).collect();

    // The CTE's snapshot does not see its own inserts, so the join finds exactly the rows
    // that were there before: duplicates and conflicts.
    let existing: Vec<(i32, Option<i64>, Option<i64>, bool)> = sqlx::query_as(
        "WITH input AS (
             SELECT * FROM UNNEST($1::bigint[], $2::timestamptz[], $3::bigint[], $4::bigint[])
                 WITH ORDINALITY AS t(meter_id, ts, counter_mj, power_mw, idx)
         ), ins AS (
             INSERT INTO samples (meter_id, ts, counter_mj, power_mw)
             SELECT meter_id, ts, counter_mj, power_mw FROM input
             ON CONFLICT (meter_id, ts) DO NOTHING
         )
         SELECT (i.idx - 1)::int, s.counter_mj, s.power_mw,
                (s.counter_mj IS NOT DISTINCT FROM i.counter_mj
                 AND s.power_mw IS NOT DISTINCT FROM i.power_mw) AS same
         FROM input i JOIN samples s ON s.meter_id = i.meter_id AND s.ts = i.ts",
    )
    .bind(&meter_ids)
    .bind(&ts)
    .bind(&counters)
    .bind(&powers)
    .fetch_all(&mut *tx)
    .await?;

    let mut outcome = InsertOutcome::default();
    for (idx, stored_counter, stored_power, same) in existing {
        if same {
            outcome.duplicates += 1;
        } else {
            outcome.conflicts.push(Conflict {
                index: idx as usize,
                stored_counter_mj: stored_counter,
                stored_power_mw: stored_power,
            });
        }
    }
    outcome.inserted = rows.len() as u64 - outcome.duplicates - outcome.conflicts.len() as u64;
    if !outcome.conflicts.is_empty() {
        let c = &outcome.conflicts;
        sqlx::query(
            "INSERT INTO sample_conflicts (meter_id, ts, stored_counter_mj, stored_power_mw,
                                           sent_counter_mj, sent_power_mw)
             SELECT * FROM UNNEST($1::bigint[], $2::timestamptz[], $3::bigint[], $4::bigint[],
                                  $5::bigint[], $6::bigint[])",
        )
        .bind(c.iter().map(|c| rows[c.index].meter_id).collect::<Vec<_>>())
        .bind(c.iter().map(|c| rows[c.index].ts).collect::<Vec<_>>())
        .bind(c.iter().map(|c| c.stored_counter_mj).collect::<Vec<_>>())
        .bind(c.iter().map(|c| c.stored_power_mw).collect::<Vec<_>>())
        .bind(
            c.iter()
                .map(|c| rows[c.index].counter_mj)
                .collect::<Vec<_>>(),
        )
        .bind(c.iter().map(|c| rows[c.index].power_mw).collect::<Vec<_>>())
        .execute(&mut *tx)
        .await?;
    }
    if outcome.inserted > 0 {
        dirty::mark_for_samples(&mut tx, &meter_ids, &ts).await?;
    }
    tx.commit().await?;
    Ok(outcome)
}
