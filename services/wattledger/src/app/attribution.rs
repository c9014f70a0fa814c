//! Attributing a claim of dirty hours: load the window's inputs, run the pure core and the
//! costing per hour, and write the hours' ledger rows, site-hours, power profiles and rollups,
//! clear their marks and raise the budget alerts they cross, all in one transaction. A mark
//! bumped while computing (new data for the hour) stays dirty for the next pass.

use chrono::{DateTime, Duration, Utc};
use sqlx::PgPool;
use std::time::Instant;
use wattledger_domain::attribution;
use wattledger_domain::costing::{self, SiteRates};
use wattledger_store::attribution::{self as store, Claim, HourResult, Window};
use wattledger_store::StoreResult;

/// What attribution runs did.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunStats {
    pub hours: u64,
    pub rows: u64,
    pub gpu_steps: u64,
    /// Budget alerts this run raised.
    pub alerts: u64,
}

impl std::ops::AddAssign for RunStats {
    fn add_assign(&mut self, s: RunStats) {
        self.hours += s.hours;
        self.rows += s.rows;
        self.gpu_steps += s.gpu_steps;
        self.alerts += s.alerts;
    }
}

/// Attributes a claimed set of hours and writes the result in one transaction.
#[tracing::instrument(skip_all, fields(site = claim.site_id, hours = claim.hours.len()))]
pub async fn run_claim(pool: &PgPool, claim: &Claim) -> StoreResult<RunStats> {
    let hours: Vec<DateTime<Utc>> = claim.hours.iter().map(|h| h.0).collect();
    let (Some(first), Some(last)) = (hours.first(), hours.last()) else {
        return Ok(RunStats::default());
    };
    let (from, to) = (*first, *last + Duration::hours(1));
    let started = Instant::now();
    let window = store::load(pool, claim.site_id, from, to).await?;
    let rates = wattledger_store::signals::site_rates(pool, claim.site_id, from, to).await?;
    // The pure core is seconds of CPU for a day of a large site: off the async threads, so
    // the worker's other lane and the API go on meanwhile.
    let loaded = started.elapsed();
    let (window, results) = {
        let hours = hours.clone();
        tokio::task::spawn_blocking(move || {
            let results = attribute(&window, &rates, &hours);
            (window, results)
        })
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    };

    let computed = started.elapsed();
    let mut tx = pool.begin().await?;
    let run_id = store::begin_run(&mut tx).await?;
    let (rows, tenants) =
        store::replace_ledger(&mut tx, claim.site_id, &hours, &window, &results).await?;
    store::replace_site_hours(&mut tx, claim.site_id, &hours, &window, &results, run_id).await?;
    store::rebuild_days(&mut tx, claim.site_id, &hours).await?;
    store::replace_power(&mut tx, claim.site_id, &hours, &window).await?;
    store::clear_marks(&mut tx, claim).await?;
    // Budget alerts in the same transaction as the ledger rows that cross them.
    let alerts = super::budget_alerts::evaluate(&mut tx, &tenants, &hours, Utc::now()).await?;
    store::finish_run(&mut tx, run_id, hours.len() as u64, rows).await?;
    tx.commit().await?;
    // Where a claim's time goes, for whoever sizes a fleet's worker (a day of a large site
    // is tens of seconds): its read, its pure core and its writes.
    tracing::debug!(
        load_ms = loaded.as_millis() as u64,
        compute_ms = (computed - loaded).as_millis() as u64,
        write_ms = (started.elapsed() - computed).as_millis() as u64,
        rows,
        "claim attributed"
    );
    Ok(RunStats {
        hours: hours.len() as u64,
        rows,
        gpu_steps: results
            .iter()
            .map(|r| r.attributed.totals.gpu_steps as u64)
            .sum(),
        alerts,
    })
}

/// Each hour through the pure core, then priced and weighed in carbon.
fn attribute(window: &Window, rates: &SiteRates, hours: &[DateTime<Utc>]) -> Vec<HourResult> {
    hours
        .iter()
        .map(|&hour| {
            let input = window.site_hour(hour);
            let attributed = attribution::attribute(&input);
            let of = |f: fn(&attribution::Row) -> i64| -> Vec<i64> {
                attributed.rows.iter().map(f).collect()
            };
            let (mj, ng, pico, badput) = (
                of(|r| r.energy.total_mj()),
                of(|r| r.embodied_ng),
                of(|r| r.time_price_pico),
                of(|r| r.badput_mj),
            );
            let amounts = costing::hour_amounts(
                input.grid,
                &attributed.totals.site_mj_by_step,
                &costing::RowInputs {
                    mj: &mj,
                    embodied_ng: &ng,
                    time_price_pico: &pico,
                    badput_mj: &badput,
                },
                rates,
            );
            HourResult {
                hour,
                attributed,
                amounts,
            }
        })
        .collect()
}
