//! Packed step records (migration 0040): once a UTC day has been over for [`AFTER`], each
//! meter's step records of that day move out of `samples` into one row of `step_packs`,
//! packed by `domain::step_pack`. Raw readings stay where they are (retention drops them
//! within weeks).
//!
//! Packing a site-day ([`pack_day`]) is one transaction per group of meters that deletes
//! their rows of the day from `samples`, returning them, and writes the packs they make
//! (merged with the day's packs already there: late data), so a row is in exactly one of
//! the two at every instant, whatever stops the process. Readers ([`read`]) take both and
//! prefer the pack where an instant is in both (a late resend that raced its day's packing).
//!
//! Ingest finds out whether a batch writes into a packed day ([`check_old_rows`]): rows older
//! than [`OLD`] are looked up in the packs (a resend there is a duplicate, other values a
//! conflict, as in `samples`), and the days they land in are marked `pending`, so the next
//! pass merges them. A shared advisory lock held by such ingest transactions, and taken
//! exclusively by a pass once it has recorded its day, makes sure no ingest that looked
//! before the day was recorded is still writing when the pass reads the day's rows.

use crate::partitions::Span;
use crate::{StoreError, StoreResult};
use chrono::{DateTime, Datelike, Duration, NaiveDate, Utc};
use sqlx::{PgPool, Postgres, Transaction};
use std::collections::{BTreeMap, HashMap};
use wattledger_domain::step_pack::{self, PackedStep};

/// How long after a day ends before it is packed: an agent's spool draining after an outage
/// lands first.
pub const AFTER: Duration = Duration::days(2);

/// Rows older than this (by the server's clock) are checked against the packs on ingest. A
/// day is packed [`AFTER`] its end, by the worker's clock: the day between the two is the
/// clock skew between servers this tolerates.
pub const OLD: Duration = Duration::days(1);

/// Meters packed per transaction: a site-day of a 10,240-GPU fleet's half is ~5,800 meters
/// and 8 million rows, a group some 700,000 rows held in memory at once.
const GROUP: usize = 512;

/// Advisory lock between ingest of old rows (shared) and a pass recording its day
/// (exclusive, momentarily).
const INGEST_LOCK: i64 = 7_301_004;

/// The partition of `step_packs` holding `day`: the month of `samples_steps_yYYYYmMM`.
pub fn partition_name(day: NaiveDate) -> String {
    format!("step_packs_y{:04}m{:02}", day.year(), day.month())
}

/// What packing one site-day did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackedDay {
    pub site_id: i64,
    pub day: NaiveDate,
    /// Step records moved out of `samples`.
    pub rows: u64,
    /// Meters whose pack was written (new or merged).
    pub packs: u64,
    /// Rows at an instant already packed: the same values (dropped), or others (the packed
    /// ones stand; recorded in `sample_conflicts`).
    pub duplicates: u64,
    pub conflicts: u64,
}

/// The site-days due at `now`, oldest first: every day of an existing step partition that
/// ended [`AFTER`] before `now`, not packed yet or marked pending since.
pub async fn due(pool: &PgPool, now: DateTime<Utc>) -> StoreResult<Vec<(i64, NaiveDate)>> {
    let horizon = (now - AFTER).date_naive();
    let spans = crate::partitions::existing(pool).await?;
    let sites: Vec<i64> = sqlx::query_scalar!("SELECT id FROM sites ORDER BY id")
        .fetch_all(pool)
        .await?;
    let packed: std::collections::HashSet<(i64, NaiveDate)> = sqlx::query!(
        "SELECT site_id, day FROM step_pack_days WHERE NOT pending AND day < $1",
        horizon
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|r| (r.site_id, r.day))
    .collect();
    Ok(days_due(&spans, &sites, &packed, horizon))
}

/// The rule of [`due`]: days before `horizon` (a day ending on it is due) of step spans.
fn days_due(
    spans: &[Span],
    sites: &[i64],
    packed: &std::collections::HashSet<(i64, NaiveDate)>,
    horizon: NaiveDate,
) -> Vec<(i64, NaiveDate)> {
    let mut out = Vec::new();
    for span in spans
        .iter()
        .filter(|s| s.kind == crate::partitions::Kind::Steps)
    {
        let mut day = span.start;
        while day < span.end && day < horizon {
            for &site in sites {
                if !packed.contains(&(site, day)) {
                    out.push((site, day));
                }
            }
            day += Duration::days(1);
        }
    }
    out.sort_by_key(|&(site, day)| (day, site));
    out
}

/// Session-level advisory lock: one replica packs at a time (two would only wait on each
/// other's rows).
const PACK_LOCK: i64 = 7_301_005;

/// Packs the site-days due at `now`, oldest first, until `budget` has been spent, unless
/// another replica is packing.
pub async fn pack_due(
    pool: &PgPool,
    now: DateTime<Utc>,
    budget: std::time::Duration,
) -> StoreResult<Vec<PackedDay>> {
    let mut lock = pool.acquire().await?;
    let locked: bool =
        sqlx::query_scalar!(r#"SELECT pg_try_advisory_lock($1) AS "locked!""#, PACK_LOCK)
            .fetch_one(&mut *lock)
            .await?;
    if !locked {
        return Ok(Vec::new());
    }
    let started = std::time::Instant::now();
    let mut out = Vec::new();
    let result = async {
        for (site, day) in due(pool, now).await? {
            if started.elapsed() >= budget {
                break;
            }
            out.push(pack_day(pool, site, day).await?);
        }
        StoreResult::Ok(())
    }
    .await;
    sqlx::query_scalar!("SELECT pg_advisory_unlock($1)", PACK_LOCK)
        .fetch_one(&mut *lock)
        .await?;
    result.map(|()| out)
}

/// Packs a site's step records of `day` (and merges any written since it was last packed).
#[tracing::instrument(skip(pool))]
pub async fn pack_day(pool: &PgPool, site_id: i64, day: NaiveDate) -> StoreResult<PackedDay> {
    ensure_partition(pool, day).await?;
    sqlx::query!(
        "INSERT INTO step_pack_days (site_id, day, pending) VALUES ($1, $2, false)
         ON CONFLICT (site_id, day) DO UPDATE SET pending = false, packed_at = excluded.packed_at",
        site_id,
        day
    )
    .execute(pool)
    .await?;
    // Ingest transactions that looked for this day before it was recorded (and so write
    // into `samples` without marking it) hold the lock shared: once they are done, their
    // rows are committed and the deletes below see them.
    {
        let mut conn = pool.acquire().await?;
        sqlx::query!("SELECT pg_advisory_lock($1)", INGEST_LOCK)
            .execute(&mut *conn)
            .await?;
        sqlx::query_scalar!("SELECT pg_advisory_unlock($1)", INGEST_LOCK)
            .fetch_one(&mut *conn)
            .await?;
    }
    let meters: Vec<i64> = sqlx::query_scalar!(
        "SELECT id FROM meters WHERE site_id = $1 ORDER BY id",
        site_id
    )
    .fetch_all(pool)
    .await?;
    let from = day.and_hms_opt(0, 0, 0).expect("midnight").and_utc();
    let mut done = PackedDay {
        site_id,
        day,
        ..PackedDay::default()
    };
    for group in meters.chunks(GROUP) {
        let mut tx = pool.begin().await?;
        pack_group(&mut tx, site_id, day, from, group, &mut done).await?;
        tx.commit().await?;
    }
    tracing::debug!(?done, "packed a site-day");
    Ok(done)
}

async fn pack_group(
    tx: &mut Transaction<'_, Postgres>,
    site_id: i64,
    day: NaiveDate,
    from: DateTime<Utc>,
    meters: &[i64],
    done: &mut PackedDay,
) -> StoreResult<()> {
    let rows = sqlx::query!(
        r#"DELETE FROM samples
           WHERE site_id = $1 AND meter_id = ANY($2) AND NOT raw AND ts >= $3 AND ts < $4
           RETURNING meter_id, ts, counter_mj, power_mw, peak_mw, counter_estimated"#,
        site_id,
        meters,
        from,
        from + Duration::days(1),
    )
    .fetch_all(&mut **tx)
    .await?;
    if rows.is_empty() {
        return Ok(());
    }
    done.rows += rows.len() as u64;
    let mut fresh: BTreeMap<i64, Vec<PackedStep>> = BTreeMap::new();
    for r in rows {
        fresh.entry(r.meter_id).or_default().push(PackedStep {
            ts_us: r.ts.timestamp_micros(),
            counter_mj: r.counter_mj,
            power_mw: r.power_mw,
            peak_mw: r.peak_mw,
            counter_estimated: r.counter_estimated,
        });
    }
    let touched: Vec<i64> = fresh.keys().copied().collect();
    let old = sqlx::query!(
        "DELETE FROM step_packs WHERE site_id = $1 AND meter_id = ANY($2) AND day = $3
         RETURNING meter_id, packed",
        site_id,
        &touched,
        day
    )
    .fetch_all(&mut **tx)
    .await?;
    let mut stored: HashMap<i64, Vec<PackedStep>> = HashMap::new();
    for o in old {
        stored.insert(o.meter_id, unpacked(o.meter_id, day, &o.packed)?);
    }

    let mut packs = Packs::default();
    let mut conflicts = Vec::new();
    for (meter, rows) in fresh {
        let merged = merge(stored.remove(&meter).unwrap_or_default(), rows);
        done.duplicates += merged.duplicates;
        conflicts.extend(
            merged
                .conflicts
                .into_iter()
                .map(|(stored, sent)| (meter, stored, sent)),
        );
        packs.push(meter, &merged.steps);
    }
    done.packs += packs.meter_ids.len() as u64;
    done.conflicts += conflicts.len() as u64;
    sqlx::query!(
        "INSERT INTO step_packs (site_id, meter_id, day, first_ts, last_ts, steps, packed)
         SELECT $1, m, $2, f, l, n, p
         FROM UNNEST($3::bigint[], $4::timestamptz[], $5::timestamptz[], $6::int[], $7::bytea[])
             AS t(m, f, l, n, p)",
        site_id,
        day,
        &packs.meter_ids,
        &packs.first,
        &packs.last,
        &packs.steps,
        &packs.packed,
    )
    .execute(&mut **tx)
    .await?;
    if !conflicts.is_empty() {
        record_conflicts(tx, site_id, &conflicts).await?;
    }
    Ok(())
}

/// Packs to write, as the columns of one UNNEST.
#[derive(Default)]
struct Packs {
    meter_ids: Vec<i64>,
    first: Vec<DateTime<Utc>>,
    last: Vec<DateTime<Utc>>,
    steps: Vec<i32>,
    packed: Vec<Vec<u8>>,
}

impl Packs {
    fn push(&mut self, meter: i64, steps: &[PackedStep]) {
        let (Some(first), Some(last)) = (steps.first(), steps.last()) else {
            return;
        };
        self.meter_ids.push(meter);
        self.first.push(at(first.ts_us));
        self.last.push(at(last.ts_us));
        self.steps
            .push(i32::try_from(steps.len()).expect("a day holds at most 86,400 steps"));
        self.packed
            .push(step_pack::pack(steps).expect("merge keeps steps in strict time order"));
    }
}

fn at(us: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(us).expect("a stored instant")
}

/// A meter-day's packed steps and new rows, merged.
#[derive(Debug, Default, PartialEq, Eq)]
struct Merged {
    steps: Vec<PackedStep>,
    duplicates: u64,
    /// (stored, sent) at the same instant with other values: the stored one stands.
    conflicts: Vec<(PackedStep, PackedStep)>,
}

/// Merges rows (unique instants, any order) into packed steps (strict time order).
fn merge(stored: Vec<PackedStep>, mut rows: Vec<PackedStep>) -> Merged {
    rows.sort_unstable_by_key(|s| s.ts_us);
    let mut out = Merged {
        steps: Vec::with_capacity(stored.len() + rows.len()),
        ..Merged::default()
    };
    let mut stored = stored.into_iter().peekable();
    for row in rows {
        while let Some(s) = stored.next_if(|s| s.ts_us < row.ts_us) {
            out.steps.push(s);
        }
        match stored.peek() {
            Some(s) if s.ts_us == row.ts_us => {
                if same_values(s, &row) {
                    out.duplicates += 1;
                } else {
                    out.conflicts.push((*s, row));
                }
            }
            _ => out.steps.push(row),
        }
    }
    out.steps.extend(stored);
    out
}

/// The values ingest compares to tell a duplicate from a conflict.
fn same_values(a: &PackedStep, b: &PackedStep) -> bool {
    (a.counter_mj, a.power_mw, a.peak_mw) == (b.counter_mj, b.power_mw, b.peak_mw)
}

fn unpacked(meter_id: i64, day: NaiveDate, packed: &[u8]) -> StoreResult<Vec<PackedStep>> {
    step_pack::unpack(packed).map_err(|error| StoreError::Pack {
        meter_id,
        day,
        error,
    })
}

async fn record_conflicts(
    tx: &mut Transaction<'_, Postgres>,
    site_id: i64,
    conflicts: &[(i64, PackedStep, PackedStep)],
) -> StoreResult<()> {
    let col = |f: fn(&(i64, PackedStep, PackedStep)) -> Option<i64>| {
        conflicts.iter().map(f).collect::<Vec<Option<i64>>>()
    };
    sqlx::query!(
        "INSERT INTO sample_conflicts (site_id, meter_id, ts, stored_counter_mj,
                                       stored_power_mw, sent_counter_mj, sent_power_mw,
                                       stored_peak_mw, sent_peak_mw, raw)
         SELECT $1, m, t, sc, sp, nc, np, spk, npk, false
         FROM UNNEST($2::bigint[], $3::timestamptz[], $4::bigint[], $5::bigint[], $6::bigint[],
                     $7::bigint[], $8::bigint[], $9::bigint[]) AS x(m, t, sc, sp, nc, np, spk, npk)",
        site_id,
        &conflicts.iter().map(|c| c.0).collect::<Vec<_>>(),
        &conflicts.iter().map(|c| at(c.1.ts_us)).collect::<Vec<_>>(),
        &col(|c| c.1.counter_mj) as &[Option<i64>],
        &col(|c| c.1.power_mw) as &[Option<i64>],
        &col(|c| c.2.counter_mj) as &[Option<i64>],
        &col(|c| c.2.power_mw) as &[Option<i64>],
        &col(|c| c.1.peak_mw) as &[Option<i64>],
        &col(|c| c.2.peak_mw) as &[Option<i64>],
    )
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Creates the month's partition of `step_packs` if it is missing.
async fn ensure_partition(pool: &PgPool, day: NaiveDate) -> StoreResult<()> {
    let span = Span::containing(crate::partitions::Kind::Steps, day);
    let name = partition_name(day);
    let exists: bool = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT FROM pg_class WHERE relname = $1) AS "exists!""#,
        &name
    )
    .fetch_one(pool)
    .await?;
    if exists {
        return Ok(());
    }
    let mut tx = pool.begin().await?;
    sqlx::query!("SELECT pg_advisory_xact_lock(7301001)")
        .execute(&mut *tx)
        .await?;
    // Identifiers cannot be bound; the name and bounds are built from integers only.
    sqlx::query(&format!(
        "CREATE TABLE IF NOT EXISTS {name} PARTITION OF step_packs FOR VALUES FROM ('{}') TO ('{}')",
        span.start.format("%Y-%m-%d"),
        span.end.format("%Y-%m-%d")
    ))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// The days of a site that have been packed or are marked to be, first and last: `None`
/// where none has (every read of the site then skips the packs).
pub async fn packed_days(
    pool: &PgPool,
    site_id: i64,
) -> StoreResult<Option<(NaiveDate, NaiveDate)>> {
    let r = sqlx::query!(
        "SELECT min(day) AS first, max(day) AS last FROM step_pack_days WHERE site_id = $1",
        site_id
    )
    .fetch_one(pool)
    .await?;
    Ok(r.first.zip(r.last))
}

/// Which packs of the meters a read takes.
#[derive(Debug, Clone, Copy)]
pub enum Days {
    /// Every pack of these days, inclusive.
    Between(NaiveDate, NaiveDate),
    /// Each meter's two latest packs before this day.
    LatestBefore(NaiveDate),
    /// Each meter's two earliest packs after this day.
    EarliestAfter(NaiveDate),
}

/// The packed steps of `meters` on `days`, with their meter, in no particular order.
pub async fn read(
    pool: &PgPool,
    site_id: i64,
    meters: &[i64],
    days: Days,
) -> StoreResult<Vec<(i64, PackedStep)>> {
    let rows =
        match days {
            Days::Between(first, last) => {
                sqlx::query_as!(
                    PackRow,
                    "SELECT meter_id, day, packed FROM step_packs
             WHERE site_id = $1 AND meter_id = ANY($2) AND day >= $3 AND day <= $4",
                    site_id,
                    meters,
                    first,
                    last
                )
                .fetch_all(pool)
                .await?
            }
            Days::LatestBefore(day) => sqlx::query_as!(
                PackRow,
                r#"SELECT m.id AS "meter_id!", p.day, p.packed FROM unnest($2::bigint[]) AS m(id)
               CROSS JOIN LATERAL (SELECT day, packed FROM step_packs s
                                   WHERE s.site_id = $1 AND s.meter_id = m.id AND s.day < $3
                                   ORDER BY day DESC LIMIT 2) p"#,
                site_id,
                meters,
                day
            )
            .fetch_all(pool)
            .await?,
            Days::EarliestAfter(day) => sqlx::query_as!(
                PackRow,
                r#"SELECT m.id AS "meter_id!", p.day, p.packed FROM unnest($2::bigint[]) AS m(id)
               CROSS JOIN LATERAL (SELECT day, packed FROM step_packs s
                                   WHERE s.site_id = $1 AND s.meter_id = m.id AND s.day > $3
                                   ORDER BY day LIMIT 2) p"#,
                site_id,
                meters,
                day
            )
            .fetch_all(pool)
            .await?,
        };
    let mut out = Vec::new();
    for r in rows {
        let steps = unpacked(r.meter_id, r.day, &r.packed)?;
        out.extend(steps.into_iter().map(|s| (r.meter_id, s)));
    }
    Ok(out)
}

/// A stored pack as read back.
struct PackRow {
    meter_id: i64,
    day: NaiveDate,
    packed: Vec<u8>,
}

/// A step record of a batch about to be written: where it would go.
#[derive(Debug, Clone, Copy, Default)]
pub struct StepKey {
    pub site_id: i64,
    pub meter_id: i64,
    pub ts: DateTime<Utc>,
}

/// For a batch about to be written (its step records; `None` for a raw reading, which
/// stays in `samples`): where it holds rows older than [`OLD`] (at `now`), takes
/// the ingest lock shared, marks the packed days they land in pending, and returns each row
/// (by index) whose instant is already packed, with the packed step. Rows at other instants
/// are written to `samples` as usual. Nothing is read for a batch of recent rows.
pub async fn check_old_rows(
    tx: &mut Transaction<'_, Postgres>,
    rows: &[Option<StepKey>],
    now: DateTime<Utc>,
) -> StoreResult<Vec<(usize, PackedStep)>> {
    let old: Vec<usize> = (0..rows.len())
        .filter(|&i| rows[i].is_some_and(|r| r.ts < now - OLD))
        .collect();
    let rows: Vec<StepKey> = rows.iter().map(|r| r.unwrap_or_default()).collect();
    if old.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query!("SELECT pg_advisory_xact_lock_shared($1)", INGEST_LOCK)
        .execute(&mut **tx)
        .await?;
    // By site (a batch is one agent's, so almost always one), each statement naming its
    // site so that a distributed PostgreSQL routes it to the site's shard.
    let mut by_site: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for &i in &old {
        by_site.entry(rows[i].site_id).or_default().push(i);
    }
    let mut out = Vec::new();
    for (site, old) in by_site {
        let mut days: Vec<NaiveDate> = old.iter().map(|&i| rows[i].ts.date_naive()).collect();
        days.sort_unstable();
        days.dedup();
        // Only days a pass has recorded can hold packs; marking them pending gets the new
        // rows merged at the next pass.
        let packed: Vec<NaiveDate> = sqlx::query_scalar!(
            "UPDATE step_pack_days SET pending = true
             WHERE site_id = $1 AND day = ANY($2) RETURNING day",
            site,
            &days
        )
        .fetch_all(&mut **tx)
        .await?;
        if packed.is_empty() {
            continue;
        }
        let mut wanted: HashMap<(i64, NaiveDate), Vec<usize>> = HashMap::new();
        for &i in &old {
            let day = rows[i].ts.date_naive();
            if packed.contains(&day) {
                wanted.entry((rows[i].meter_id, day)).or_default().push(i);
            }
        }
        let meters: Vec<i64> = wanted.keys().map(|k| k.0).collect();
        let stored = sqlx::query!(
            "SELECT meter_id, day, packed FROM step_packs
             WHERE site_id = $1 AND meter_id = ANY($2) AND day = ANY($3)",
            site,
            &meters,
            &packed
        )
        .fetch_all(&mut **tx)
        .await?;
        for p in stored {
            let Some(indexes) = wanted.get(&(p.meter_id, p.day)) else {
                continue;
            };
            let steps = unpacked(p.meter_id, p.day, &p.packed)?;
            for &i in indexes {
                let us = rows[i].ts.timestamp_micros();
                if let Ok(k) = steps.binary_search_by_key(&us, |s| s.ts_us) {
                    out.push((i, steps[k]));
                }
            }
        }
    }
    out.sort_unstable_by_key(|&(i, _)| i);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(ts_us: i64, counter: i64) -> PackedStep {
        PackedStep {
            ts_us,
            counter_mj: Some(counter),
            power_mw: None,
            peak_mw: None,
            counter_estimated: false,
        }
    }

    #[test]
    fn late_rows_merge_into_a_pack_in_time_order_and_the_packed_values_stand() {
        let stored = vec![step(0, 10), step(120, 30), step(240, 50)];
        let rows = vec![step(360, 60), step(120, 30), step(60, 20), step(240, 99)];
        let m = merge(stored, rows);
        assert_eq!(
            m.steps,
            [
                step(0, 10),
                step(60, 20),
                step(120, 30),
                step(240, 50),
                step(360, 60)
            ]
        );
        assert_eq!(m.duplicates, 1);
        assert_eq!(m.conflicts, [(step(240, 50), step(240, 99))]);
    }

    #[test]
    fn a_day_is_due_two_days_after_it_ends_once_per_site_until_marked_again() {
        let d = |day| NaiveDate::from_ymd_opt(2026, 9, day).unwrap();
        let spans = [
            Span::containing(crate::partitions::Kind::Steps, d(1)),
            Span::containing(crate::partitions::Kind::Raw, d(1)),
        ];
        let packed = [(1, d(1))].into_iter().collect();
        let due_at = |now: &str| {
            let now = DateTime::parse_from_rfc3339(now).unwrap().to_utc();
            days_due(&spans, &[1, 2], &packed, (now - AFTER).date_naive())
        };
        // Sep 2 ends at midnight on the 3rd: due two days later, on the 5th.
        assert_eq!(due_at("2026-09-04T23:59:59Z"), [(2, d(1))]);
        assert_eq!(
            due_at("2026-09-05T00:00:00Z"),
            [(2, d(1)), (1, d(2)), (2, d(2))]
        );
        assert_eq!(partition_name(d(30)), "step_packs_y2026m09");
    }
}
