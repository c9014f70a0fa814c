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
            request: serde_json::to_value(&self.ask).unwrap_or_default(),
            answer: serde_json::to_value(&self.answer).unwrap_or_default(),
            ..self.record
        }
    }
}

pub async fn run(pool: PgPool, mut rx: mpsc::UnboundedReceiver<Decided>) {
    let mut batch: Vec<NewDecision> = Vec::new();
    let mut backoff = Duration::from_millis(100);
    loop {
        if batch.is_empty() {
            match rx.recv().await {
                Some(d) => batch.push(d.into_record()),
                // Every sender is gone: the server is stopping and all is written.
                None => return,
            }
        }
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(d) => batch.push(d.into_record()),
                Err(_) => break,
            }
        }
        match insert_decisions(&pool, &batch).await {
            Ok(_) => {
                batch.clear();
                backoff = Duration::from_millis(100);
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
