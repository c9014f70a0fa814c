//! The sample write path (step records and raw readings): COPY, or one UNNEST statement per
//! batch, idempotent on (meter, ts, raw); a meter's site is first in every key (a meter never
//! changes site), so a distributed PostgreSQL keeps a site's samples on one shard.
//!
//! A sample already stored with the same values is a duplicate (ignored); with different
//! values it is a conflict: the stored one stands and the conflict is recorded and reported.

use crate::{dirty, partitions, step_packs, StoreResult};
use chrono::{DateTime, Utc};
use sqlx::{PgPool, Postgres, Transaction};

/// A validated sample, meter resolved to its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleRow {
    /// The meter's site.
    pub site_id: i64,
    pub meter_id: i64,
    pub ts: DateTime<Utc>,
    pub counter_mj: Option<i64>,
    /// Instantaneous power; a step record's mean over its step.
    pub power_mw: Option<i64>,
    /// A step record's peak power over its step.
    pub peak_mw: Option<i64>,
    /// A raw reading (kept for the raw retention), not a step record.
    pub raw: bool,
    /// The agent estimated part of the counter's rise up to this sample from power readings
    /// (the counter stuck or was reset): counted as estimated energy.
    pub counter_estimated: bool,
}

/// A sent sample whose (meter, ts) was already stored with other values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// Index of the record in the batch.
    pub index: usize,
    pub stored_counter_mj: Option<i64>,
    pub stored_power_mw: Option<i64>,
    pub stored_peak_mw: Option<i64>,
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
///
/// Fast path: COPY straight into `samples` under a savepoint, the common case of new data.
/// If any row is already stored (a resend, or a conflict), the COPY fails whole on the
/// primary key and the batch takes the UNNEST path, which tells duplicates from conflicts
/// (and reports any other refusal with its own error). Rows at instants already packed
/// (`step_packs`: days closed for two days) are told apart the same way, from the packs.
#[tracing::instrument(skip_all, fields(n = rows.len()))]
pub async fn insert(pool: &PgPool, rows: &[SampleRow]) -> StoreResult<InsertOutcome> {
    if rows.is_empty() {
        return Ok(InsertOutcome::default());
    }
    let mut tx = pool.begin().await?;
    partitions::ensure(&mut tx, &spans_of(rows)).await?;
    let site_ids: Vec<i64> = rows.iter().map(|r| r.site_id).collect();
    let meter_ids: Vec<i64> = rows.iter().map(|r| r.meter_id).collect();
    let ts: Vec<DateTime<Utc>> = rows.iter().map(|r| r.ts).collect();
    let packed = step_packs::check_old_rows(&mut tx, &step_keys(rows), Utc::now()).await?;

    // A batch with rows at packed instants is not all new: straight to the UNNEST path.
    if packed.is_empty() {
        sqlx::query!("SAVEPOINT copy_fast_path")
            .execute(&mut *tx)
            .await?;
        match copy(&mut tx, rows).await {
            Ok(()) => {
                sqlx::query!("RELEASE SAVEPOINT copy_fast_path")
                    .execute(&mut *tx)
                    .await?;
                dirty::mark_for_samples(&mut tx, &site_ids, &meter_ids, &ts).await?;
                tx.commit().await?;
                return Ok(InsertOutcome {
                    inserted: rows.len() as u64,
                    ..InsertOutcome::default()
                });
            }
            // Whatever the COPY failed on, the UNNEST path below tells it exactly: a row
            // already stored there is a duplicate or a conflict, and data the database
            // refuses fails there with its own error. (The failure is not always 23505: a
            // distributed PostgreSQL reports a shard's duplicate key in a COPY as XX000.)
            Err(e) => {
                tracing::debug!(error = %e, "COPY fast path falls back to UNNEST");
                sqlx::query!("ROLLBACK TO SAVEPOINT copy_fast_path")
                    .execute(&mut *tx)
                    .await?;
            }
        }
    }
    let counters: Vec<Option<i64>> = rows.iter().map(|r| r.counter_mj).collect();
    let powers: Vec<Option<i64>> = rows.iter().map(|r| r.power_mw).collect();
    let peaks: Vec<Option<i64>> = rows.iter().map(|r| r.peak_mw).collect();
    let raws: Vec<bool> = rows.iter().map(|r| r.raw).collect();
    let estimated: Vec<bool> = rows.iter().map(|r| r.counter_estimated).collect();

    // The rows already stored (duplicates and conflicts) are read first, then the rest are
    // inserted: two statements, not one with a writing CTE, whose snapshot a distributed
    // PostgreSQL does not keep (it runs the CTE's insert before the join that reads).
    let mut existing: Vec<Stored> = sqlx::query_as!(
        Stored,
        r#"WITH input AS (
             SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::timestamptz[], $4::bigint[],
                                  $5::bigint[], $6::bigint[], $7::boolean[])
                 WITH ORDINALITY AS t(site_id, meter_id, ts, counter_mj, power_mw, peak_mw, raw, idx)
         )
         SELECT (i.idx - 1)::int AS "idx!", s.counter_mj, s.power_mw, s.peak_mw,
                (s.counter_mj IS NOT DISTINCT FROM i.counter_mj
                 AND s.power_mw IS NOT DISTINCT FROM i.power_mw
                 AND s.peak_mw IS NOT DISTINCT FROM i.peak_mw) AS "same!"
         FROM input i JOIN samples s ON s.site_id = i.site_id AND s.meter_id = i.meter_id
                                   AND s.ts = i.ts AND s.raw = i.raw"#,
        &site_ids,
        &meter_ids,
        &ts,
        &counters as &[Option<i64>],
        &powers as &[Option<i64>],
        &peaks as &[Option<i64>],
        &raws,
    )
    .fetch_all(&mut *tx)
    .await?;
    // The packed values first: where an instant is in both (a resend that raced its day's
    // packing), the pack's stand, as readers take them.
    let mut both: Vec<Stored> = packed
        .into_iter()
        .map(|(idx, p)| Stored {
            idx: idx as i32,
            counter_mj: p.counter_mj,
            power_mw: p.power_mw,
            peak_mw: p.peak_mw,
            same: (p.counter_mj, p.power_mw, p.peak_mw)
                == (rows[idx].counter_mj, rows[idx].power_mw, rows[idx].peak_mw),
        })
        .collect();
    both.append(&mut existing);
    both.sort_by_key(|e| e.idx);
    both.dedup_by_key(|e| e.idx);
    let existing = both;
    let stored: std::collections::HashSet<usize> =
        existing.iter().map(|e| e.idx as usize).collect();
    let new: Vec<usize> = (0..rows.len()).filter(|i| !stored.contains(i)).collect();
    if !new.is_empty() {
        sqlx::query!(
            "INSERT INTO samples (site_id, meter_id, ts, counter_mj, power_mw, peak_mw, raw,
                              counter_estimated)
         SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::timestamptz[], $4::bigint[],
                              $5::bigint[], $6::bigint[], $7::boolean[], $8::boolean[])
         ON CONFLICT (site_id, meter_id, ts, raw) DO NOTHING",
            &new.iter().map(|&i| site_ids[i]).collect::<Vec<_>>(),
            &new.iter().map(|&i| meter_ids[i]).collect::<Vec<_>>(),
            &new.iter().map(|&i| ts[i]).collect::<Vec<_>>(),
            &new.iter().map(|&i| counters[i]).collect::<Vec<_>>() as &[Option<i64>],
            &new.iter().map(|&i| powers[i]).collect::<Vec<_>>() as &[Option<i64>],
            &new.iter().map(|&i| peaks[i]).collect::<Vec<_>>() as &[Option<i64>],
            &new.iter().map(|&i| raws[i]).collect::<Vec<_>>(),
            &new.iter().map(|&i| estimated[i]).collect::<Vec<_>>(),
        )
        .execute(&mut *tx)
        .await?;
    }

    let mut outcome = InsertOutcome::default();
    for e in existing {
        if e.same {
            outcome.duplicates += 1;
        } else {
            outcome.conflicts.push(Conflict {
                index: e.idx as usize,
                stored_counter_mj: e.counter_mj,
                stored_power_mw: e.power_mw,
                stored_peak_mw: e.peak_mw,
            });
        }
    }
    outcome.inserted = rows.len() as u64 - outcome.duplicates - outcome.conflicts.len() as u64;
    if !outcome.conflicts.is_empty() {
        let c = &outcome.conflicts;
        sqlx::query!(
            "INSERT INTO sample_conflicts (site_id, meter_id, ts, stored_counter_mj,
                                           stored_power_mw, sent_counter_mj, sent_power_mw,
                                           stored_peak_mw, sent_peak_mw, raw)
             SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::timestamptz[], $4::bigint[],
                                  $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[],
                                  $9::bigint[], $10::boolean[])",
            &c.iter().map(|c| rows[c.index].site_id).collect::<Vec<_>>(),
            &c.iter().map(|c| rows[c.index].meter_id).collect::<Vec<_>>(),
            &c.iter().map(|c| rows[c.index].ts).collect::<Vec<_>>(),
            &c.iter().map(|c| c.stored_counter_mj).collect::<Vec<_>>() as &[Option<i64>],
            &c.iter().map(|c| c.stored_power_mw).collect::<Vec<_>>() as &[Option<i64>],
            &c.iter()
                .map(|c| rows[c.index].counter_mj)
                .collect::<Vec<_>>() as &[Option<i64>],
            &c.iter().map(|c| rows[c.index].power_mw).collect::<Vec<_>>() as &[Option<i64>],
            &c.iter().map(|c| c.stored_peak_mw).collect::<Vec<_>>() as &[Option<i64>],
            &c.iter().map(|c| rows[c.index].peak_mw).collect::<Vec<_>>() as &[Option<i64>],
            &c.iter().map(|c| rows[c.index].raw).collect::<Vec<_>>(),
        )
        .execute(&mut *tx)
        .await?;
    }
    if outcome.inserted > 0 {
        dirty::mark_for_samples(&mut tx, &site_ids, &meter_ids, &ts).await?;
    }
    tx.commit().await?;
    Ok(outcome)
}

/// Where each row would be packed: step records only.
fn step_keys(rows: &[SampleRow]) -> Vec<Option<step_packs::StepKey>> {
    rows.iter()
        .map(|r| {
            (!r.raw).then_some(step_packs::StepKey {
                site_id: r.site_id,
                meter_id: r.meter_id,
                ts: r.ts,
            })
        })
        .collect()
}

/// A row of the batch already stored, in `samples` or packed, with the stored values.
struct Stored {
    idx: i32,
    counter_mj: Option<i64>,
    power_mw: Option<i64>,
    peak_mw: Option<i64>,
    /// The same values as sent: a duplicate, not a conflict.
    same: bool,
}

/// Inserts several batches, each as `insert` takes it, in one transaction when it can: group
/// commit, for many small batches arriving at once (a fleet's agents each pushing a minute
/// of their node's meters). Each such batch marks the same few (site, hour)s dirty, and the
/// row lock each transaction holds on them until its commit would queue the batches one
/// behind the other, a commit's flush each; a group marks them once and flushes once.
///
/// The group's fast path is one COPY of every batch's rows, all new. If two batches hold the
/// same (meter, ts), or the group's transaction fails for any reason (a row already stored,
/// a deadlock with another group), every batch takes `insert` on its own, so each gets its
/// own outcome, duplicates and conflicts told apart, and its own error.
#[tracing::instrument(skip_all, fields(batches = batches.len()))]
pub async fn insert_group(
    pool: &PgPool,
    batches: &[Vec<SampleRow>],
) -> Vec<StoreResult<InsertOutcome>> {
    if batches.len() > 1 && disjoint(batches) {
        let rows = batches.concat();
        match insert_new(pool, &rows).await {
            Ok(true) => {
                return batches
                    .iter()
                    .map(|b| {
                        Ok(InsertOutcome {
                            inserted: b.len() as u64,
                            ..InsertOutcome::default()
                        })
                    })
                    .collect();
            }
            Ok(false) => {}
            Err(e) => tracing::debug!(error = %e, "group commit falls back to batch by batch"),
        }
    }
    let mut out = Vec::with_capacity(batches.len());
    for b in batches {
        out.push(insert(pool, b).await);
    }
    out
}

/// Whether no (meter, ts, raw) is in two batches (each batch has none twice).
fn disjoint(batches: &[Vec<SampleRow>]) -> bool {
    let mut seen = std::collections::HashSet::with_capacity(batches.iter().map(Vec::len).sum());
    batches
        .iter()
        .flatten()
        .all(|r| seen.insert((r.meter_id, r.ts, r.raw)))
}

/// Rows all new, in one transaction with their dirty marks; fails whole if any is stored,
/// and writes nothing (false) if any is at an instant already packed.
async fn insert_new(pool: &PgPool, rows: &[SampleRow]) -> StoreResult<bool> {
    let mut tx = pool.begin().await?;
    partitions::ensure(&mut tx, &spans_of(rows)).await?;
    if !step_packs::check_old_rows(&mut tx, &step_keys(rows), Utc::now())
        .await?
        .is_empty()
    {
        return Ok(false);
    }
    copy(&mut tx, rows).await?;
    let site_ids: Vec<i64> = rows.iter().map(|r| r.site_id).collect();
    let meter_ids: Vec<i64> = rows.iter().map(|r| r.meter_id).collect();
    let ts: Vec<DateTime<Utc>> = rows.iter().map(|r| r.ts).collect();
    dirty::mark_for_samples(&mut tx, &site_ids, &meter_ids, &ts).await?;
    tx.commit().await?;
    Ok(true)
}

/// The partitions of the days (months) the rows fall in, not of the range between them: a
/// spool drained after a week sends a week, not every day since its oldest row.
fn spans_of(rows: &[SampleRow]) -> Vec<partitions::Span> {
    let mut days: Vec<(bool, chrono::NaiveDate)> =
        rows.iter().map(|r| (r.raw, r.ts.date_naive())).collect();
    days.sort_unstable();
    days.dedup();
    let mut spans: Vec<partitions::Span> = days
        .into_iter()
        .map(|(raw, day)| partitions::Span::containing(partitions::Kind::of(raw), day))
        .collect();
    spans.dedup();
    spans
}

/// COPY of validated rows in PostgreSQL's binary format: no text to format or parse.
async fn copy(tx: &mut Transaction<'_, Postgres>, rows: &[SampleRow]) -> Result<(), sqlx::Error> {
    let mut copy = tx
        .copy_in_raw(
            "COPY samples (site_id, meter_id, ts, counter_mj, power_mw, peak_mw, raw, counter_estimated)
             FROM STDIN (FORMAT binary)",
        )
        .await?;
    copy.send(binary_copy(rows)).await?;
    copy.finish().await?;
    Ok(())
}

/// The rows as a binary COPY stream (`crate::pg_copy`), in the table's column order.
fn binary_copy(rows: &[SampleRow]) -> Vec<u8> {
    let mut w = crate::pg_copy::Writer::new(rows.len() * 80);
    for r in rows {
        w.tuple(8);
        w.i64(Some(r.site_id));
        w.i64(Some(r.meter_id));
        w.timestamp_us(r.ts.timestamp_micros());
        w.i64(r.counter_mj);
        w.i64(r.power_mw);
        w.i64(r.peak_mw);
        w.bool(r.raw);
        w.bool(r.counter_estimated);
    }
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn binary_copy_layout() {
        let ts = Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 1).unwrap();
        let buf = binary_copy(&[SampleRow {
            site_id: 3,
            meter_id: 7,
            ts,
            counter_mj: None,
            power_mw: Some(5),
            peak_mw: None,
            raw: true,
            counter_estimated: true,
        }]);
        assert_eq!(&buf[..11], b"PGCOPY\n\xff\r\n\0");
        let row = &buf[19..];
        assert_eq!(&row[..2], &8i16.to_be_bytes());
        assert_eq!(&row[6..14], &3i64.to_be_bytes());
        assert_eq!(&row[18..26], &7i64.to_be_bytes());
        // One second after PostgreSQL's epoch.
        assert_eq!(&row[30..38], &1_000_000i64.to_be_bytes());
        assert_eq!(&row[38..42], &(-1i32).to_be_bytes());
        // After the power (12 bytes) and a NULL peak, raw: a one-byte boolean.
        assert_eq!(&row[58..63], &[0, 0, 0, 1, 1]);
        // Then whether the agent estimated the counter: another one-byte boolean.
        assert_eq!(&row[63..68], &[0, 0, 0, 1, 1]);
        assert_eq!(&buf[buf.len() - 2..], &(-1i16).to_be_bytes());
    }
}
