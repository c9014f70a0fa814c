//! Dirty-hour bookkeeping: which (site, hour) pairs must be attributed again.
//!
//! A mark is an upsert that bumps `marked_at`, so an hour re-marked while the worker is
//! computing it stays dirty: the worker only clears marks it has seen.

use crate::signals::Changed;
use crate::StoreResult;
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, Postgres, Transaction};
use std::collections::{BTreeMap, HashMap};

// A single change dirties at most 45 days around it: a counter gap longer than that still
// has its energy spread, but recomputing the far end needs `wattledger attribute --from`.

/// Marks the hours a sample batch changes: for each meter, from the hour of the second sample
/// before the batch to the hour of the second sample after it. The intervals next to the
/// batch's own change their ends; the ones beyond those may change their estimate (a counter
/// reset is estimated from its neighbouring intervals). Then moves the meters' heads.
///
/// A batch that starts after its meter's newest stored sample (an agent's next step) takes
/// its neighbours from `meter_heads` (nothing after it, the two newest before it); a batch
/// of late data looks them up in the samples index.
pub async fn mark_for_samples(
    tx: &mut Transaction<'_, Postgres>,
    site_ids: &[i64],
    meter_ids: &[i64],
    ts: &[DateTime<Utc>],
) -> StoreResult<()> {
    // A batch is one agent's, so almost always one site.
    for (site, rows) in by_site(site_ids, meter_ids.iter().copied().zip(ts.iter().copied())) {
        let (meters, times): (Vec<i64>, Vec<DateTime<Utc>>) = rows.into_iter().unzip();
        mark_site_samples(tx, site, &meters, &times).await?;
    }
    Ok(())
}

/// `rows` (one per entry of `site_ids`) grouped by site, in site order: every marker writes
/// one site at a time, in this order, each statement naming its site. Every writer of marks
/// takes a site's rows in hour order, so two writers of one site queue. Across sites that
/// order must be global too, and one statement over several sites does not keep it on a
/// distributed PostgreSQL: it writes each node's shards at once, in parallel, so a batch
/// holding one site's hours on one node while it waits for another's on the other, beside a
/// batch doing the reverse, is a deadlock that no ORDER BY prevents.
fn by_site<T>(site_ids: &[i64], rows: impl Iterator<Item = T>) -> BTreeMap<i64, Vec<T>> {
    let mut sites: BTreeMap<i64, Vec<T>> = BTreeMap::new();
    for (site, row) in site_ids.iter().zip(rows) {
        sites.entry(*site).or_default().push(row);
    }
    sites
}

async fn mark_site_samples(
    tx: &mut Transaction<'_, Postgres>,
    site_id: i64,
    meter_ids: &[i64],
    ts: &[DateTime<Utc>],
) -> StoreResult<()> {
    sqlx::query!(
        "WITH batch AS (
             SELECT $1::bigint AS site_id, meter_id, min(ts) AS lo, max(ts) AS hi
             FROM UNNEST($2::bigint[], $3::timestamptz[]) AS t(meter_id, ts)
             GROUP BY meter_id
         ), appending AS (
             SELECT b.site_id,
                    CASE WHEN h.last_ts IS NULL THEN b.lo
                         ELSE greatest(coalesce(h.prev_ts, h.last_ts), b.lo - interval '45 days')
                    END AS lo,
                    b.hi
             FROM batch b
             LEFT JOIN meter_heads h ON h.site_id = $1 AND h.meter_id = b.meter_id
             WHERE h.last_ts IS NULL OR h.last_ts < b.lo
         ), late AS (
             -- The samples before are looked for within the 45 days that bound the span, so
             -- a lookup reads those days' partitions, not the whole history (past them, only
             -- whether any sample exists matters: the span is clamped there).
             SELECT b.site_id,
                    least(CASE WHEN p.n = 2 THEN p.ts
                         WHEN EXISTS (SELECT FROM samples s WHERE s.site_id = $1
                                        AND s.meter_id = b.meter_id
                                        AND s.ts < b.lo - interval '45 days')
                           OR EXISTS (SELECT FROM step_packs s WHERE s.site_id = $1
                                        AND s.meter_id = b.meter_id
                                        AND s.first_ts < b.lo - interval '45 days')
                         THEN b.lo - interval '45 days'
                         ELSE coalesce(p.ts, b.lo) END, kb.ts) AS lo,
                    least(greatest(coalesce(n.ts, b.hi), ka.ts), b.hi + interval '45 days') AS hi
             FROM batch b
             JOIN meter_heads h ON h.site_id = $1 AND h.meter_id = b.meter_id
                                AND h.last_ts >= b.lo
             CROSS JOIN LATERAL (SELECT count(*) AS n, min(ts) AS ts FROM (
                                    SELECT ts FROM samples s WHERE s.site_id = $1
                                      AND s.meter_id = b.meter_id AND s.ts < b.lo
                                      AND s.ts >= b.lo - interval '45 days'
                                    ORDER BY ts DESC LIMIT 2) x) p
             CROSS JOIN LATERAL (SELECT max(ts) AS ts FROM (
                                    SELECT ts FROM samples s WHERE s.site_id = $1
                                      AND s.meter_id = b.meter_id AND s.ts > b.hi
                                    ORDER BY ts LIMIT 2) x) n
             -- Neighbours in packed days (crate::step_packs) bound by their packs' ends: the
             -- first instant of the two packs before, the last of the two after. Wider than
             -- the neighbours themselves, never narrower.
             CROSS JOIN LATERAL (SELECT min(first_ts) AS ts FROM (
                                    SELECT first_ts FROM step_packs s WHERE s.site_id = $1
                                      AND s.meter_id = b.meter_id AND s.first_ts < b.lo
                                      AND s.day >= ((b.lo - interval '45 days') AT TIME ZONE 'UTC')::date
                                    ORDER BY day DESC LIMIT 2) x) kb
             CROSS JOIN LATERAL (SELECT max(last_ts) AS ts FROM (
                                    SELECT last_ts FROM step_packs s WHERE s.site_id = $1
                                      AND s.meter_id = b.meter_id AND s.last_ts > b.hi
                                      AND s.day >= (b.hi AT TIME ZONE 'UTC')::date
                                    ORDER BY day LIMIT 2) x) ka
         ), hours AS (
             SELECT DISTINCT site_id, h AS hour
             FROM (SELECT * FROM appending UNION ALL SELECT * FROM late) spans,
                 generate_series(date_trunc('hour', lo), date_trunc('hour', hi), interval '1 hour') h
         )
         INSERT INTO dirty_hours (site_id, hour) SELECT site_id, hour FROM hours ORDER BY 1, 2
         ON CONFLICT (site_id, hour) DO UPDATE SET marked_at = excluded.marked_at",
        site_id,
        meter_ids,
        ts,
    )
    .execute(&mut **tx)
    .await?;
    // The heads become the two newest distinct times of what they were and the batch's. In
    // meter order, so concurrent batches of the same meters queue rather than deadlock; the
    // newest two of a union do not depend on which batch comes first.
    sqlx::query!(
        "INSERT INTO meter_heads AS h (site_id, meter_id, last_ts, prev_ts)
         SELECT $1::bigint, meter_id, top[1], top[2] FROM (
             SELECT meter_id, (array_agg(DISTINCT ts ORDER BY ts DESC))[1:2] AS top
             FROM UNNEST($2::bigint[], $3::timestamptz[]) AS t(meter_id, ts)
             GROUP BY meter_id
         ) b ORDER BY meter_id
         ON CONFLICT (site_id, meter_id) DO UPDATE SET (last_ts, prev_ts) = (
             SELECT t[1], t[2] FROM (
                 SELECT array_agg(DISTINCT x ORDER BY x DESC) AS t
                 FROM unnest(ARRAY[h.last_ts, h.prev_ts, EXCLUDED.last_ts, EXCLUDED.prev_ts]) x
                 WHERE x IS NOT NULL) newest)",
        site_id,
        meter_ids,
        ts,
    )
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Marks every hour of each site's `[from, to]` (the hour `to` falls in included).
pub async fn mark_site_spans(
    conn: &mut PgConnection,
    site_ids: &[i64],
    from: &[DateTime<Utc>],
    to: &[DateTime<Utc>],
) -> StoreResult<u64> {
    let mut marked = 0;
    for (site, spans) in by_site(site_ids, from.iter().copied().zip(to.iter().copied())) {
        let (lo, hi): (Vec<DateTime<Utc>>, Vec<DateTime<Utc>>) = spans.into_iter().unzip();
        marked += sqlx::query!(
            "INSERT INTO dirty_hours (site_id, hour)
             SELECT DISTINCT $1::bigint, h
             FROM UNNEST($2::timestamptz[], $3::timestamptz[]) AS t(lo, hi),
             generate_series(date_trunc('hour', t.lo), date_trunc('hour', t.hi), interval '1 hour') h
             ORDER BY 2
             ON CONFLICT (site_id, hour) DO UPDATE SET marked_at = excluded.marked_at",
            site,
            &lo,
            &hi,
        )
        .execute(&mut *conn)
        .await?
        .rows_affected();
    }
    Ok(marked)
}

/// Marks every hour of `[from, to)` at the sites of these GPU (or MIG) meters.
pub async fn mark_for_intervals(
    conn: &mut PgConnection,
    meter_ids: &[i64],
    from: &[DateTime<Utc>],
    to: &[DateTime<Utc>],
) -> StoreResult<()> {
    let sites: HashMap<i64, i64> = sqlx::query!(
        "SELECT id, site_id FROM meters WHERE id = ANY($1)",
        meter_ids
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|m| (m.id, m.site_id))
    .collect();
    let mut spans = (Vec::new(), Vec::new(), Vec::new());
    for ((meter, lo), hi) in meter_ids.iter().zip(from).zip(to) {
        if let Some(site) = sites.get(meter) {
            spans.0.push(*site);
            spans.1.push(*lo);
            spans.2.push((*hi).min(*lo + chrono::Duration::days(45)));
        }
    }
    mark_site_spans(conn, &spans.0, &spans.1, &spans.2).await?;
    Ok(())
}

/// Marks every hour of every site in `[from, to)`: an explicit recompute.
pub async fn mark_range(
    tx: &mut Transaction<'_, Postgres>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> StoreResult<u64> {
    let sites = sqlx::query_scalar!("SELECT id FROM sites ORDER BY id")
        .fetch_all(&mut **tx)
        .await?;
    let last = to - chrono::Duration::microseconds(1);
    if last < from {
        return Ok(0);
    }
    let n = sites.len();
    mark_site_spans(tx, &sites, &vec![from; n], &vec![last; n]).await
}

/// Dirty hours up to and including the hour of `until`, claimed by a worker or not.
pub async fn count_until(pool: &sqlx::PgPool, until: DateTime<Utc>) -> StoreResult<i64> {
    Ok(sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM dirty_hours WHERE hour <= $1"#,
        until
    )
    .fetch_one(pool)
    .await?)
}

pub async fn count(pool: &sqlx::PgPool) -> StoreResult<i64> {
    Ok(
        sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM dirty_hours"#)
            .fetch_one(pool)
            .await?,
    )
}

/// Marks the attributed hours that changed signal points overlap, at the sites of their
/// region (a carbon point's grid region, a price point's price region), so the ledger is
/// recomputed exactly where a signal changed. The hours marked.
pub async fn mark_regions(conn: &mut PgConnection, changed: &[Changed]) -> StoreResult<u64> {
    if changed.is_empty() {
        return Ok(0);
    }
    // The hours are found first, then marked site by site (`by_site`).
    let hours = sqlx::query!(
        r#"SELECT DISTINCT sh.site_id, sh.hour
           FROM UNNEST($1::text[], $2::text[], $3::timestamptz[], $4::timestamptz[]) AS c(region, signal, lo, hi)
           JOIN sites s ON (c.signal IN ('carbon', 'carbon_free') AND s.grid_region = c.region)
                        OR (c.signal = 'price' AND coalesce(s.price_region, s.grid_region) = c.region)
           JOIN site_hours sh ON sh.site_id = s.id
                AND sh.hour >= date_trunc('hour', c.lo) AND sh.hour < c.hi"#,
        &changed.iter().map(|c| c.region.clone()).collect::<Vec<_>>(),
        &changed.iter().map(|c| c.signal.as_str()).collect::<Vec<_>>() as &[&str],
        &changed.iter().map(|c| c.start_at).collect::<Vec<_>>(),
        &changed.iter().map(|c| c.end_at).collect::<Vec<_>>(),
    )
    .fetch_all(&mut *conn)
    .await?;
    let sites: Vec<i64> = hours.iter().map(|h| h.site_id).collect();
    let at: Vec<DateTime<Utc>> = hours.iter().map(|h| h.hour).collect();
    mark_site_spans(conn, &sites, &at, &at).await
}
