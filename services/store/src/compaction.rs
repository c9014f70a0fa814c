//! Compaction of step records: closed days packed (`crate::step_packs`), then ended step
//! partitions' primary-key index rebuilt once, packed too.
//!
//! Agents send every meter's record for a step together, so each new key lands at the end
//! of its meter's run in the middle of the (meter_id, ts, raw) index: pages split in half
//! and stay about half full while the month is written (measured by the fleet benchmark:
//! 70 index bytes per record, against 36 for a packed entry). Once a month has ended and
//! its late data has had time to arrive, one `REINDEX CONCURRENTLY` packs it; writes and
//! reads go on meanwhile. Late records after that split pages again, a little.

use crate::partitions::{self, Kind, Span};
use crate::StoreResult;
use chrono::{DateTime, Duration, Utc};
use sqlx::PgPool;

/// How long after a partition's span ends before it is compacted: an agent's spool
/// draining after an outage lands first.
pub const AFTER: Duration = Duration::days(2);

/// Session-level advisory lock: one replica compacts at a time.
const LOCK: i64 = 7_301_003;

/// How long one pass may spend packing days before it lets the worker attribute again; the
/// rest waits for the next pass.
pub const PACKING_BUDGET: std::time::Duration = std::time::Duration::from_secs(60);

/// What a pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pass {
    pub packed: Vec<crate::step_packs::PackedDay>,
    pub reindexed: Vec<Compaction>,
}

impl Pass {
    pub fn is_empty(&self) -> bool {
        self.packed.is_empty() && self.reindexed.is_empty()
    }
}

/// Packs the days due (within `budget`), then compacts the partitions due.
pub async fn run(
    pool: &PgPool,
    now: DateTime<Utc>,
    budget: std::time::Duration,
) -> StoreResult<Pass> {
    let packed = crate::step_packs::pack_due(pool, now, budget).await?;
    // A month's index is rebuilt once its days are packed: it then holds late data only.
    let reindexed = if crate::step_packs::due(pool, now).await?.is_empty() {
        reindex(pool, now).await?
    } else {
        Vec::new()
    };
    Ok(Pass { packed, reindexed })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compaction {
    pub name: String,
    pub index_bytes_before: i64,
    pub index_bytes_after: i64,
}

/// The step partitions due: ended `AFTER` before `now` and not compacted yet. Raw
/// partitions are left alone: they are dropped within weeks.
pub fn due<'a>(spans: &'a [Span], done: &[String], now: DateTime<Utc>) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|s| s.kind == Kind::Steps)
        .filter(|s| {
            s.end
                .and_hms_opt(0, 0, 0)
                .is_some_and(|end| end.and_utc() + AFTER <= now)
        })
        .filter(|s| !done.contains(&s.name))
        .collect()
}

/// Rebuilds the indexes of the partitions due, unless another replica is at it; returns
/// what it did.
async fn reindex(pool: &PgPool, now: DateTime<Utc>) -> StoreResult<Vec<Compaction>> {
    let spans = partitions::existing(pool).await?;
    let done: Vec<String> = sqlx::query_scalar!("SELECT name FROM partition_compactions")
        .fetch_all(pool)
        .await?;
    reindex_spans(pool, due(&spans, &done, now), true).await
}

/// Rebuilds the indexes of every step partition now, whatever its month and whether its
/// days are packed, without recording it (a later pass still compacts them when due): the
/// fleet benchmark's figure of the row layout at its most compact.
pub async fn reindex_all(pool: &PgPool) -> StoreResult<Vec<Compaction>> {
    let spans = partitions::existing(pool).await?;
    let steps = spans.iter().filter(|s| s.kind == Kind::Steps).collect();
    reindex_spans(pool, steps, false).await
}

async fn reindex_spans(
    pool: &PgPool,
    due: Vec<&Span>,
    record: bool,
) -> StoreResult<Vec<Compaction>> {
    if due.is_empty() {
        return Ok(Vec::new());
    }
    // REINDEX CONCURRENTLY runs outside a transaction, so the lock is the session's, on one
    // connection held throughout.
    let mut conn = pool.acquire().await?;
    let locked: bool = sqlx::query_scalar!(r#"SELECT pg_try_advisory_lock($1) AS "locked!""#, LOCK)
        .fetch_one(&mut *conn)
        .await?;
    if !locked {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    let result = async {
        for span in due {
            let before = index_bytes(&mut conn, &span.name).await?;
            // The name is one of ours (parse_name rebuilt it from integers), safe to splice.
            sqlx::query(&format!("REINDEX TABLE CONCURRENTLY {}", span.name))
                .execute(&mut *conn)
                .await?;
            let after = index_bytes(&mut conn, &span.name).await?;
            if record {
                sqlx::query!(
                "INSERT INTO partition_compactions (name, index_bytes_before, index_bytes_after)
                 VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING",
                &span.name,
                before,
                after,
            )
                .execute(&mut *conn)
                .await?;
            }
            out.push(Compaction {
                name: span.name.clone(),
                index_bytes_before: before,
                index_bytes_after: after,
            });
        }
        StoreResult::Ok(())
    }
    .await;
    sqlx::query_scalar!("SELECT pg_advisory_unlock($1)", LOCK)
        .fetch_one(&mut *conn)
        .await?;
    result.map(|()| out)
}

/// The size of a partition's indexes, bytes.
async fn index_bytes(conn: &mut sqlx::PgConnection, partition: &str) -> StoreResult<i64> {
    // On a Citus coordinator the partition is a shell and its indexes live in the shards:
    // their bytes are the shards' total less their tables'.
    let sql = if crate::distribution::is_citus(&mut *conn).await? {
        "SELECT (citus_total_relation_size($1::regclass) - citus_table_size($1::regclass))::bigint"
    } else {
        "SELECT pg_indexes_size($1::regclass)"
    };
    Ok(sqlx::query_scalar(sql)
        .bind(partition)
        .fetch_one(conn)
        .await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    #[test]
    fn a_step_month_is_due_two_days_after_it_ends_and_only_once() {
        let day = |m| NaiveDate::from_ymd_opt(2026, m, 1).unwrap();
        let spans = vec![
            Span::containing(Kind::Steps, day(9)),
            Span::containing(Kind::Steps, day(10)),
            Span::containing(Kind::Raw, day(9)),
        ];
        let names = |d: Vec<&Span>| d.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
        assert!(due(&spans, &[], at("2026-10-02T23:59:59Z")).is_empty());
        assert_eq!(
            names(due(&spans, &[], at("2026-10-03T00:00:00Z"))),
            ["samples_steps_y2026m09"]
        );
        assert_eq!(
            names(due(&spans, &[], at("2026-11-25T00:00:00Z"))),
            ["samples_steps_y2026m09", "samples_steps_y2026m10"]
        );
        let done = ["samples_steps_y2026m09".to_owned()];
        assert_eq!(
            names(due(&spans, &done, at("2026-11-25T00:00:00Z"))),
            ["samples_steps_y2026m10"]
        );
    }
}
