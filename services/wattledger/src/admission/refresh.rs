//! Keeping the state current: every refresh adds the decisions other replicas stored
//! since the last look; every `SLOW_EVERY` refreshes, or when poked, the state is rebuilt
//! from the database, carrying over this replica's decisions not stored yet.

use super::state::{build, load_slow, Pending, Slow};
use super::Admission;
use chrono::{DateTime, Duration, Utc};
use sqlx::PgPool;
use std::collections::HashSet;
use std::sync::Arc;
use tokio::sync::watch;
use uuid::Uuid;
use wattledger_store::admission as store;
use wattledger_store::Scope;

/// Slow state reloads every this many refreshes.
const SLOW_EVERY: u32 = 15;
/// Decisions counted: those whose reservation ends after now minus this (a job overrunning
/// its estimate a little still holds its budget share until it is joined).
const RESERVATIONS_KEPT: Duration = Duration::hours(2);
/// How far each incremental reload reaches back before the last one.
const LOOK_OVERLAP: Duration = Duration::seconds(60);
/// A decision this replica made and the database still does not show after this long is
/// dropped from the carried-over reservations (its write failed for good).
const PENDING_MAX_S: u64 = 120;

#[derive(Debug, thiserror::Error)]
pub(super) enum RefreshError {
    #[error(transparent)]
    Store(#[from] wattledger_store::StoreError),
    #[error("building the admission state failed: {0}")]
    Build(#[from] tokio::task::JoinError),
}

impl Admission {
    pub(super) async fn refresh_loop(
        &self,
        pool: PgPool,
        every: std::time::Duration,
        mut stop: watch::Receiver<bool>,
        mut slow: Option<Arc<Slow>>,
    ) {
        let mut tick: u32 = 1;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = self.poke.notified() => { tick = 0; }
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
            let now = Utc::now();
            let full = slow.is_none() || tick.is_multiple_of(SLOW_EVERY);
            if full {
                match load_slow(&pool, now).await {
                    Ok(s) => slow = Some(Arc::new(s)),
                    Err(e) => {
                        tracing::warn!(error = %e, "admission: could not reload sites, forecasts and budgets")
                    }
                }
            }
            let done = match &slow {
                Some(s) if full => self.refresh_full(&pool, s, now).await,
                Some(_) => self.refresh_increment(&pool, now).await,
                None => Ok(()),
            };
            if let Err(e) = done {
                tracing::warn!(error = %e, "admission: could not reload reservations");
            }
            tick = tick.wrapping_add(1);
        }
    }

    /// Rebuilds the state from the database, carrying over this replica's decisions the
    /// database does not show yet.
    pub(super) async fn refresh_full(
        &self,
        pool: &PgPool,
        slow: &Arc<Slow>,
        now: DateTime<Utc>,
    ) -> Result<(), RefreshError> {
        // Joined decisions stop counting against budgets at their estimate: the ledger
        // (reloaded with the budgets just now) has their energy.
        if let Err(e) = store::join_decisions(pool).await {
            tracing::warn!(error = %e, "admission: could not join decisions to jobs");
        }
        let tenants = store::tenants(pool, &Scope::All).await?;
        let reservations =
            store::reservations(pool, &Scope::All, now - RESERVATIONS_KEPT, None).await?;
        // Building from hundreds of thousands of reservations takes a while: off the
        // runtime, so requests keep being answered on the state as it was.
        let slow = Arc::clone(slow);
        let mut fresh =
            tokio::task::spawn_blocking(move || build(&slow, &tenants, &reservations, now)).await?;
        let mut hot = self.hot.write();
        let pending = std::mem::take(&mut hot.pending);
        for p in pending {
            if fresh.known.contains(&p.id) || p.made.elapsed().as_secs() > PENDING_MAX_S {
                continue;
            }
            // Site indices may have moved: find the site by key.
            let key = hot.sites.get(p.site).map(|s| s.site.key.clone());
            if let Some(i) = key.and_then(|k| fresh.site_by_key.get(&k).copied()) {
                fresh.apply(Pending { site: i, ..p });
            }
        }
        fresh.generation = hot.generation.wrapping_add(1);
        fresh.looked_at = now;
        *hot = fresh;
        Ok(())
    }

    /// Adds the decisions other replicas took since the last look. Decisions are stamped
    /// when taken and written a moment later, so each look reaches back `LOOK_OVERLAP`;
    /// one written later still is counted at the next full rebuild.
    async fn refresh_increment(
        &self,
        pool: &PgPool,
        now: DateTime<Utc>,
    ) -> Result<(), RefreshError> {
        let since = self.hot.read().looked_at - LOOK_OVERLAP;
        let rows =
            store::reservations(pool, &Scope::All, now - RESERVATIONS_KEPT, Some(since)).await?;
        let mut hot = self.hot.write();
        let stored: HashSet<Uuid> = rows.iter().map(|r| r.id).collect();
        // This replica's own decisions, now stored, need no carrying over.
        hot.pending.retain(|p| !stored.contains(&p.id));
        for r in &rows {
            hot.count(r, now);
        }
        hot.looked_at = now;
        Ok(())
    }
}
