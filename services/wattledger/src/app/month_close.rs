//! Closing a month and reopening it.
//!
//! The API, the CLI and the demo all close through [`close`]. It drains the attribution
//! worker's backlog up to the end of the month first (a close must not bill a half-attributed
//! month), then freezes the month in one transaction ([`freeze`]): the rules (months close in
//! order, once, when ended, attributed and priced), this month's statements with the
//! adjustments of closed months, the reconciliation to the meters, the exports, and a
//! `chargeback.closed` webhook per statement. Late data arriving in between only leaves the
//! close to try again. The exports go to `WATTLEDGER_EXPORT_DIR` when one is configured,
//! with FOCUS 1.4 rendered from the same close beside them ([`folder_exports`]) and a
//! `SHA256SUMS` file.

use crate::app::attribution::RunStats;
use crate::config::Config;
use crate::worker;
use chrono::{DateTime, NaiveDate, Utc};
use rust_decimal::Decimal;
use sqlx::PgPool;
use std::path::{Path, PathBuf};
use wattledger_domain::chargeback::{
    self, reconcile, statement, Close, Entry, Export, Issuer, Month,
};
use wattledger_store::chargeback as store;
use wattledger_store::StoreError;

/// Why a month cannot be closed or reopened now.
#[derive(Debug, thiserror::Error)]
pub enum CloseError {
    #[error("{0} has not ended yet")]
    NotEnded(Month),
    #[error("{0} is already closed")]
    AlreadyClosed(Month),
    #[error("{0} is still open: months close in order")]
    EarlierOpen(Month),
    #[error("{hours} site-hours up to the end of {month} are waiting to be attributed")]
    Pending { month: Month, hours: i64 },
    #[error("{rows} ledger rows of {month} ({kwh} kWh) have no price or no carbon intensity yet")]
    Unpriced {
        month: Month,
        rows: i64,
        kwh: Decimal,
    },
    #[error("statements do not reconcile to the meters: {0}")]
    Unbalanced(#[from] reconcile::Unbalanced),
    #[error("{0} is not closed")]
    NotClosed(Month),
    #[error("{later} is closed after {month}: reopen it first")]
    LaterClosed { month: Month, later: Month },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for CloseError {
    fn from(e: sqlx::Error) -> Self {
        CloseError::Store(e.into())
    }
}

/// What a close wrote.
#[derive(Debug, Clone)]
pub struct Closed {
    pub close: Close,
    pub exports: Vec<Export>,
    /// `chargeback.closed` webhook messages queued.
    pub messages: u64,
}

/// The webhook event a close sends each tenant with a statement.
pub const CLOSED_EVENT: &str = "chargeback.closed";

/// Attempts before giving up when late data keeps dirtying the month during a close.
const ATTEMPTS: usize = 5;

/// Closes `month` as `actor`; `progress` hears about attribution done on the way.
pub async fn close(
    pool: &PgPool,
    config: &Config,
    month: Month,
    actor: &str,
    mut progress: impl FnMut(&RunStats),
) -> Result<Closed, CloseError> {
    let issuer = Issuer {
        name: config.issuer.clone(),
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        worker::drain(pool, &mut progress).await?;
        let now = Utc::now();
        let credits = crate::grid_events::credit_lines(pool, month.end(), now).await?;
        match freeze(pool, month, actor, &issuer, &credits, now).await {
            // Another worker holds a lease on some of the hours, or new data just arrived.
            Err(CloseError::Pending { hours, .. }) if attempt < ATTEMPTS => {
                tracing::info!(%month, hours, attempt, "waiting for attribution before closing");
                tokio::time::sleep(std::time::Duration::from_secs(attempt as u64)).await;
            }
            Ok(closed) => {
                tracing::info!(
                    %month,
                    version = closed.close.version,
                    statements = closed.close.statements.len(),
                    webhooks = closed.messages,
                    "month closed"
                );
                if let Some(dir) = &config.export_dir {
                    let files = folder_exports(&closed.close, &closed.exports);
                    let written = write_exports(dir, month, closed.close.version, &files)
                        .map_err(|e| {
                            // The close stands (the files are in the database); say so.
                            tracing::error!(error = %e, dir = %dir.display(), "writing the exports failed; `wattledger chargeback export` writes them again");
                        })
                        .ok();
                    if let Some(folder) = written {
                        tracing::info!(folder = %folder.display(), "exports written");
                    }
                }
                return Ok(closed);
            }
            Err(e) => return Err(e),
        }
    }
}

/// The files of a close's export folder: the exports frozen with it (statement CSV, FOCUS 1.2,
/// JSON), FOCUS 1.4 after the 1.2 file and the price list its rows name after that. Those two
/// are not frozen with the close but rendered from it, and the close is immutable, so they
/// are the same whenever they are written; a reader of the folder gets both FOCUS versions
/// (their names carry it) and `SHA256SUMS` covers every file.
pub fn folder_exports(close: &Close, frozen: &[Export]) -> Vec<Export> {
    let mut files = frozen.to_vec();
    let after_focus = files
        .iter()
        .position(|e| e.format == "focus")
        .map_or(files.len(), |i| i + 1);
    files.splice(
        after_focus..after_focus,
        [
            chargeback::focus::export(close, chargeback::focus::Version::V1_4),
            chargeback::prices::export(close),
        ],
    );
    files
}

/// Writes exports into `dir/<month>/v<version>/` with a `SHA256SUMS` file (`sha256sum -c`
/// checks it); returns the folder. Files are written whole, then renamed into place.
pub fn write_exports(
    dir: &Path,
    month: Month,
    version: u32,
    exports: &[Export],
) -> std::io::Result<PathBuf> {
    let folder = dir.join(month.to_string()).join(format!("v{version}"));
    std::fs::create_dir_all(&folder)?;
    let mut files: Vec<(String, Vec<u8>)> = exports
        .iter()
        .map(|e| (e.file_name.clone(), e.content.clone()))
        .collect();
    files.push((
        "SHA256SUMS".to_owned(),
        chargeback::checksums(exports).into_bytes(),
    ));
    for (name, content) in files {
        let tmp = folder.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, &content)?;
        std::fs::rename(&tmp, folder.join(&name))?;
    }
    Ok(folder)
}

/// Closes `month`: statements for every tenant with usage, adjustments or credits, the site
/// reconciliation, the exports, the audit row and the webhook messages, in one transaction.
/// `credits` are the demand-response credit lines of every period up to `month` (as they
/// stand now: a credit of a closed month that changed becomes an adjustment, as late energy
/// does).
pub async fn freeze(
    pool: &PgPool,
    month: Month,
    actor: &str,
    issuer: &Issuer,
    credits: &[Entry],
    now: DateTime<Utc>,
) -> Result<Closed, CloseError> {
    let mut tx = pool.begin().await?;
    // One snapshot for every read below: the ledger's sums, its GPU time per device model
    // and the meters must be of the same attribution runs, or a run committing between two
    // reads would leave a line's parts not adding up to it. (On a distributed PostgreSQL each
    // worker's snapshot is its own; a site's tables are co-located, and a run writes one site.)
    store::repeatable_read(&mut tx).await?;
    store::lock(&mut tx).await?;
    let in_force = may_close(&mut tx, month, now).await?;
    let version = store::next_version(&mut tx, month).await?;

    // This month's usage, and what changed in closed months since they were billed.
    // Every earlier month with ledger rows is closed (checked above), so one pass over the
    // ledger from the first closed month reads this month's usage and what the closed months
    // hold now.
    let first = month.first_day();
    let closed: Vec<NaiveDate> = in_force.into_iter().filter(|m| *m < first).collect();
    let from = closed
        .first()
        .map_or(month.start(), |m| Month::of(*m).start());
    let (mut entries, mut current): (Vec<Entry>, Vec<Entry>) =
        store::ledger_entries(&mut tx, from, month.end())
            .await?
            .into_iter()
            .partition(|(k, _)| k.period == month);
    let first_period = Month::of(from.date_naive());
    for (k, a) in credits {
        if k.period == month {
            entries.push((k.clone(), *a));
        } else if k.period >= first_period && k.period < month {
            current.push((k.clone(), *a));
        }
    }
    let billed = store::billed_entries(&mut tx, &closed).await?;
    entries.extend(statement::adjustments(&current, &billed));
    let gpu_time = store::ledger_gpu_time(&mut tx, month).await?;
    let statements = statement::statements(month, version as u32, entries, gpu_time);

    let directory = store::directory(&mut tx).await?;
    let metered = store::metered_by_site(&mut tx, month).await?;
    let reconciliation = reconcile::reconcile(month, &metered, &statements)?;
    let close = Close {
        month,
        version: version as u32,
        closed_at: now,
        issuer: issuer.clone(),
        statements,
        reconciliation,
        directory,
    };
    let exports = chargeback::exports(&close);
    let tenants = store::write_close(&mut tx, &close, actor, &exports).await?;
    let mut messages = 0;
    for (s, tenant_id) in close.statements.iter().zip(tenants) {
        let data = serde_json::json!({
            "month": close.month,
            "version": close.version,
            "statement": s.number,
            "tenant": s.tenant,
            "currency": s.currency,
            "billed_cost": s.billed_cost,
            "energy_kwh": s.energy_kwh,
            "carbon_kg": (s.total.carbon_g / Decimal::ONE_THOUSAND).normalize(),
            "lines": s.lines.len(),
            "adjustment_lines": s.adjustments(close.month).count(),
        });
        messages += wattledger_store::webhooks::enqueue(
            &mut tx,
            tenant_id,
            CLOSED_EVENT,
            data,
            close.closed_at,
        )
        .await?;
    }
    tx.commit().await?;
    Ok(Closed {
        close,
        exports,
        messages,
    })
}

/// Whether `month` may close now: it has ended, is not closed, every earlier month with
/// usage is, and all its energy is attributed and priced. Returns the months closed.
async fn may_close(
    conn: &mut sqlx::PgConnection,
    month: Month,
    now: DateTime<Utc>,
) -> Result<Vec<NaiveDate>, CloseError> {
    if month.end() > now {
        return Err(CloseError::NotEnded(month));
    }
    let in_force = store::closes_in_force(conn).await?;
    if in_force.contains(&month.first_day()) {
        return Err(CloseError::AlreadyClosed(month));
    }
    if let Some(open) = store::earliest_open(conn, month.start(), &in_force).await? {
        return Err(CloseError::EarlierOpen(Month::of(open)));
    }
    let hours = store::dirty_before(conn, month.end()).await?;
    if hours > 0 {
        return Err(CloseError::Pending { month, hours });
    }
    let (rows, mj) = store::unpriced(conn, month).await?;
    if rows > 0 {
        let kwh = (mj / Decimal::from(chargeback::MJ_PER_KWH)).round_dp(3);
        return Err(CloseError::Unpriced { month, rows, kwh });
    }
    Ok(in_force)
}

/// Reopens the close in force of `month` (the latest closed month only: a later close may have
/// billed adjustments against it). Its statements stay, marked reopened; closing again makes
/// the next version.
pub async fn reopen(
    pool: &PgPool,
    month: Month,
    actor: &str,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<u32, CloseError> {
    let mut tx = pool.begin().await?;
    store::lock(&mut tx).await?;
    if let Some(later) = store::later_close(&mut tx, month).await? {
        return Err(CloseError::LaterClosed {
            month,
            later: Month::of(later),
        });
    }
    let version = store::mark_reopened(&mut tx, month, actor, reason, now)
        .await?
        .ok_or(CloseError::NotClosed(month))?;
    tx.commit().await?;
    Ok(version as u32)
}
