//! Writing a batch of jobs: under a lock on each key, refuse a job whose key another site
//! holds (a key names one job fleet-wide, and a job's site cannot change), write the jobs
//! and their allocations, and mark dirty every hour that an allocation covers now or covered
//! before the change, all in one transaction.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use wattledger_store::dirty;
use wattledger_store::jobs::{self, ChangedAllocation, JobRecord};
use wattledger_store::StoreError;

/// What a write changed: jobs inserted or changed, allocations inserted or changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    pub jobs: u64,
    pub allocations: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Jobs sent for one site whose keys are held by jobs at another: the keys.
    #[error("jobs {} are at another site; a job's site cannot change", .0.join(", "))]
    AtAnotherSite(Vec<String>),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for WriteError {
    fn from(e: sqlx::Error) -> Self {
        WriteError::Store(e.into())
    }
}

#[tracing::instrument(skip_all, fields(n = records.len()))]
pub async fn write(
    pool: &PgPool,
    records: &[JobRecord],
    now: DateTime<Utc>,
) -> Result<Written, WriteError> {
    let mut tx = pool.begin().await?;
    let keys: Vec<String> = records.iter().map(|r| r.key.clone()).collect();
    jobs::lock_keys(&mut tx, &keys).await?;
    let stored = jobs::by_key(&mut *tx, &keys).await?;
    let moved: Vec<String> = records
        .iter()
        .filter(|r| stored.get(&r.key).is_some_and(|j| j.site_id != r.site_id))
        .map(|r| r.key.clone())
        .collect();
    if !moved.is_empty() {
        return Err(WriteError::AtAnotherSite(moved));
    }
    let changed_jobs = jobs::write_jobs(&mut tx, records).await?;
    let job_ids = jobs::ids_by_key(&mut tx, &keys).await?;
    let changed = jobs::write_allocations(&mut tx, records, &job_ids).await?;
    // A job whose own fields changed (tenant, model) re-dirties all its allocations.
    let spans = jobs::allocation_spans(&mut tx, &changed_jobs).await?;
    let (meters, from, to) = dirty_spans(&changed, &spans, now);
    if !meters.is_empty() {
        dirty::mark_for_intervals(&mut tx, &meters, &from, &to).await?;
    }
    tx.commit().await?;
    Ok(Written {
        jobs: changed_jobs.len() as u64,
        allocations: changed.len() as u64,
    })
}

/// The spans to recompute, as (meter, from, to) columns: each changed allocation's span
/// before and after the change, and every span of a changed job. An open end runs to `now`.
pub(super) fn dirty_spans(
    changed: &[ChangedAllocation],
    spans: &[jobs::AllocationSpan],
    now: DateTime<Utc>,
) -> (Vec<i64>, Vec<DateTime<Utc>>, Vec<DateTime<Utc>>) {
    let changed = changed.iter().map(|c| {
        let mut end = c.end_at.unwrap_or(now);
        if let Some(old_end) = c.old_end_at {
            end = end.max(old_end.unwrap_or(now));
        }
        (c.meter_id, c.start_at, end)
    });
    let held = spans
        .iter()
        .map(|s| (s.meter_id, s.start_at, s.end_at.unwrap_or(now)));
    let mut columns = (Vec::new(), Vec::new(), Vec::new());
    for (meter, start, end) in changed.chain(held) {
        columns.0.push(meter);
        columns.1.push(start);
        columns.2.push(end.max(start));
    }
    columns
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(h: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 2, h, 0, 0).unwrap()
    }

    #[test]
    fn a_shortened_allocation_recomputes_its_old_span_and_an_open_one_runs_to_now() {
        let changed = [
            // Was open, now ends at 12: recompute to now (its old end).
            ChangedAllocation {
                meter_id: 1,
                start_at: t(10),
                end_at: Some(t(12)),
                old_end_at: Some(None),
            },
            // New and open.
            ChangedAllocation {
                meter_id: 2,
                start_at: t(11),
                end_at: None,
                old_end_at: None,
            },
            // Was to 15, now to 13: the old, longer span.
            ChangedAllocation {
                meter_id: 3,
                start_at: t(9),
                end_at: Some(t(13)),
                old_end_at: Some(Some(t(15))),
            },
        ];
        let held = [jobs::AllocationSpan {
            meter_id: 4,
            start_at: t(8),
            end_at: Some(t(9)),
        }];
        let (m, from, to) = dirty_spans(&changed, &held, t(20));
        assert_eq!(m, [1, 2, 3, 4]);
        assert_eq!(from, [t(10), t(11), t(9), t(8)]);
        assert_eq!(to, [t(20), t(20), t(15), t(9)]);
    }
}
