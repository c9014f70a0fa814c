//! Stores decisions off the request path: the handler answers, then hands the record here;
//! records are written in batches (one INSERT for whatever queued meanwhile).
//!
//! Two kinds of failure, two answers. The database away: the batch waits and is retried
//! (the queue in front is bounded, so admission answers 503 rather than decide what it cannot
//! keep). The database refusing a row (a value it cannot hold, a broken constraint): retrying
//! would block every later decision behind it forever, so the batch is written row by row and
//! each refused row is kept as a dead letter (`admission_dead_letters`, with the reason),
//! logged, and counted in `/metrics` and `/health`.

use super::Ask;
use sqlx::PgPool;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use wattledger_store::admission::{dead_letter_decision, insert_decisions, NewDecision};
use wattledger_store::StoreError;

const MAX_BATCH: usize = 1000;
const LONGEST_BACKOFF: Duration = Duration::from_secs(10);

/// A decision as answered (the record holds the answer's JSON as sent); its question
/// becomes the record's JSON here.
pub struct Decided {
    pub record: NewDecision,
    pub ask: Ask,
}

impl Decided {
    fn into_record(self) -> NewDecision {
        NewDecision {
            request: serde_json::to_string(&self.ask).unwrap_or_default(),
            ..self.record
        }
    }
}

/// What the writer has done, for `/metrics` and `/health`.
#[derive(Debug, Default)]
pub struct WriterStats {
    pub stored: AtomicU64,
    /// Decisions the database refused, kept as dead letters (this process's count).
    pub dead_lettered: AtomicU64,
    /// The database is away and a batch waits to be retried.
    pub retrying: AtomicBool,
}

pub async fn run(pool: PgPool, mut rx: mpsc::Receiver<Decided>, stats: Arc<WriterStats>) {
    loop {
        let mut decided = Vec::new();
        // Every sender gone: the server is stopping and all is written.
        if rx.recv_many(&mut decided, MAX_BATCH).await == 0 {
            return;
        }
        // Serialising a batch takes milliseconds: on a blocking thread it cannot hold up
        // the requests queued behind it on a runtime worker.
        let batch = match tokio::task::spawn_blocking(move || {
            decided
                .into_iter()
                .map(Decided::into_record)
                .collect::<Vec<_>>()
        })
        .await
        {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(error = %e, "admission decisions could not be serialised; they are not stored");
                continue;
            }
        };
        write_batch(&pool, &batch, &stats).await;
    }
}

/// Writes a batch whole, or, when the database refuses some of it, row by row, keeping each
/// refused row as a dead letter. Returns once every row is stored or dead-lettered (while
/// the database is away, it waits).
pub async fn write_batch(pool: &PgPool, batch: &[NewDecision], stats: &WriterStats) {
    let backoff = &mut Backoff::default();
    match insert_until_answered(pool, batch, stats, backoff).await {
        Ok(()) => {
            stats
                .stored
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
        }
        Err(_) if batch.len() > 1 => {
            for row in batch {
                match insert_until_answered(pool, std::slice::from_ref(row), stats, backoff).await {
                    Ok(()) => {
                        stats.stored.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => dead_letter(pool, row, &e, stats, backoff).await,
                }
            }
        }
        Err(e) => {
            if let Some(row) = batch.first() {
                dead_letter(pool, row, &e, stats, backoff).await;
            }
        }
    }
}

/// Inserts until the database answers: `Ok`, or the error with which it refused the data.
/// While it is away, waits and tries again.
async fn insert_until_answered(
    pool: &PgPool,
    rows: &[NewDecision],
    stats: &WriterStats,
    backoff: &mut Backoff,
) -> Result<(), StoreError> {
    loop {
        match insert_decisions(pool, rows).await {
            Ok(_) => {
                backoff.reset(stats);
                return Ok(());
            }
            Err(e) if e.is_refused_data() => return Err(e),
            Err(e) => backoff.wait(&e, rows.len(), stats).await,
        }
    }
}

async fn dead_letter(
    pool: &PgPool,
    row: &NewDecision,
    why: &StoreError,
    stats: &WriterStats,
    backoff: &mut Backoff,
) {
    let why = why.to_string();
    tracing::error!(decision = %row.id, tenant = row.tenant_id, error = %why,
        "the database refused an admission decision; it is kept as a dead letter");
    loop {
        match dead_letter_decision(pool, row, &why).await {
            Ok(()) => break,
            Err(e) if e.is_refused_data() => {
                tracing::error!(decision = %row.id, error = %e, "the dead letter was refused too; the decision is only in this log");
                break;
            }
            Err(e) => backoff.wait(&e, 1, stats).await,
        }
    }
    backoff.reset(stats);
    stats.dead_lettered.fetch_add(1, Ordering::Relaxed);
}

/// Exponential waiting while the database is away.
struct Backoff(Duration);

impl Default for Backoff {
    fn default() -> Self {
        Backoff(Duration::from_millis(100))
    }
}

impl Backoff {
    async fn wait(&mut self, e: &StoreError, pending: usize, stats: &WriterStats) {
        stats.retrying.store(true, Ordering::Relaxed);
        tracing::warn!(error = %e, pending, retry_in_ms = self.0.as_millis() as u64,
            "could not store admission decisions; retrying");
        tokio::time::sleep(self.0).await;
        self.0 = (self.0 * 2).min(LONGEST_BACKOFF);
    }

    fn reset(&mut self, stats: &WriterStats) {
        stats.retrying.store(false, Ordering::Relaxed);
        *self = Backoff::default();
    }
}
