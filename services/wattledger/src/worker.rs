//! The attribution worker: drains dirty hours through the pure core, beside the API, and
//! keeps the meter data's partitions (created ahead, dropped after retention).

use crate::app::attribution::{run_claim, RunStats};
use std::time::Duration;
use tokio::sync::watch;
use wattledger_store::attribution;
use wattledger_store::retention::{self, Policy};
use wattledger_store::{compaction, partitions, StoreResult};

/// How often the partitions are looked after: ahead of need by days, so hourly is plenty.
const HOUSEKEEPING_EVERY: Duration = Duration::from_secs(3600);

/// Hours claimed per transaction: a day of one site.
const CLAIM_HOURS: i64 = 24;

/// Attributes dirty hours until none are left; returns what was done.
/// `progress` is called after each claim with the running totals.
///
/// Two claims at once: while one reads its window or writes its ledger, the other's pure
/// core runs (off the async threads), so a backlog keeps two cores busy. Each claim is its
/// own transaction on its own hours, as another replica's would be.
pub async fn drain(pool: &sqlx::PgPool, progress: impl FnMut(&RunStats)) -> StoreResult<RunStats> {
    let total = std::sync::Mutex::new((RunStats::default(), progress));
    let lane = || async {
        loop {
            let Some(claim) = attribution::claim(pool, CLAIM_HOURS).await? else {
                // Another lane (or replica) may have taken the hour this one looked at:
                // done only when nothing is left to claim.
                if attribution::claimable(pool).await? {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                return StoreResult::Ok(());
            };
            let stats = run_claim(pool, &claim).await?;
            let mut t = total.lock().expect("a progress callback does not panic");
            t.0 += stats;
            let so_far = t.0;
            (t.1)(&so_far);
        }
    };
    let (a, b) = tokio::join!(lane(), lane());
    a.and(b)?;
    Ok(total.into_inner().expect("not poisoned").0)
}

/// Attributes until no hour up to `until` is dirty, including hours another worker holds
/// (another replica, or this server's own worker): what is summed after this returns is
/// final up to `until`.
pub async fn drain_until(
    pool: &sqlx::PgPool,
    until: chrono::DateTime<chrono::Utc>,
    mut progress: impl FnMut(&RunStats),
) -> StoreResult<RunStats> {
    let mut total = RunStats::default();
    loop {
        let before = total;
        total += drain(pool, |s| {
            let mut t = before;
            t += *s;
            progress(&t);
        })
        .await?;
        if wattledger_store::dirty::count_until(pool, until).await? == 0 {
            return Ok(total);
        }
        // Someone else holds the rest under a lease: wait for them (or for the lease to
        // lapse, when this process takes them over).
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What one round of housekeeping did.
#[derive(Debug, Default)]
pub struct Kept {
    pub created: usize,
    pub dropped: Vec<String>,
    pub compacted: compaction::Pass,
}

/// Creates the partitions ahead of need, drops those past retention, packs closed days'
/// step records and compacts the indexes of step partitions whose month has ended.
pub async fn housekeeping(
    pool: &sqlx::PgPool,
    policy: &Policy,
    now: chrono::DateTime<chrono::Utc>,
) -> StoreResult<Kept> {
    let created = partitions::ensure_ahead(pool, now).await?;
    let plan = retention::plan(pool, policy, now).await?;
    let dropped = retention::apply(pool, policy, now, &plan).await?;
    let compacted = compaction::run(pool, now, compaction::PACKING_BUDGET).await?;
    Ok(Kept {
        created,
        dropped: dropped.into_iter().map(|s| s.name).collect(),
        compacted,
    })
}

/// Runs until `shutdown` turns true, polling for dirty hours, with the partitions'
/// housekeeping after the first pass and hourly.
pub async fn run(pool: sqlx::PgPool, policy: Policy, mut shutdown: watch::Receiver<bool>) {
    let mut kept_at: Option<std::time::Instant> = None;
    loop {
        match drain(&pool, |_| {}).await {
            // Live collectors dirty the current hour every few seconds: routine, so quiet.
            // Several hours at once (late data, a backfill) is worth a line.
            Ok(s) if s.hours > 1 => tracing::info!(hours = s.hours, rows = s.rows, "attributed"),
            Ok(s) if s.hours == 1 => tracing::debug!(rows = s.rows, "attributed the current hour"),
            Ok(_) => {}
            Err(error) => tracing::error!(%error, "attribution pass failed; retrying"),
        }
        // After the pass, not before: a start with days to pack (an upgrade, a demo's seeded
        // month) attributes what is waiting first.
        if kept_at.is_none_or(|t| t.elapsed() >= HOUSEKEEPING_EVERY) {
            match housekeeping(&pool, &policy, chrono::Utc::now()).await {
                Ok(k) if k.created > 0 || !k.dropped.is_empty() || !k.compacted.is_empty() => {
                    let c = &k.compacted;
                    tracing::info!(created = k.created, dropped = ?k.dropped,
                        packed_days = c.packed.len(),
                        packed_rows = c.packed.iter().map(|d| d.rows).sum::<u64>(),
                        reindexed = ?c.reindexed,
                        "sample partitions looked after")
                }
                Ok(_) => {}
                Err(error) => tracing::error!(%error, "partition housekeeping failed; retrying"),
            }
            kept_at = Some(std::time::Instant::now());
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            _ = shutdown.changed() => {}
        }
        if *shutdown.borrow() {
            return;
        }
    }
}
