//! Stores decisions off the request path: the handler answers, then hands the record here;
//! records are written in batches (one INSERT for whatever queued meanwhile) and retried
//! while the database is away.

use super::{Answer, Ask};
use sqlx::PgPool;
use std::time::Duration;
use tokio::sync::mpsc;
use wattledger_store::admission::{insert_decisions, NewDecision};

const MAX_BATCH: usize = 1000;

/// A decision as answered; its question and answer become the record's JSON here.
pub struct Decided {
    pub record: NewDecision,
    pub ask: Ask,
    pub answer: Answer,
}

impl Decided {
    fn into_record(self) -> NewDecision {
        NewDecision {
            request: serde_json::to_string(&self.ask).unwrap_or_default(),
            answer: serde_json::to_string(&self.answer).unwrap_or_default(),
            ..self.record
        }
    }
}

pub async fn run(pool: PgPool, mut rx: mpsc::Receiver<Decided>) {
    let mut backoff = Duration::from_millis(100);
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
        loop {
            match insert_decisions(&pool, &batch).await {
                Ok(_) => {
                    backoff = Duration::from_millis(100);
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, pending = batch.len(), retry_in_ms = backoff.as_millis() as u64,
                        "could not store admission decisions; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                }
            }
        }
    }
}
