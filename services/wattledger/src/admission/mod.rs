//! Admission in the server: the hot state every decision reads (held in memory, refreshed from
//! Postgres in the background), the decision itself, and the writer that stores decisions
//! off the request path. `api` is what is asked and answered, `state` the state, `decide`
//! one decision on it, `refresh` keeping it current, `writer` storing the decisions.
//!
//! Several replicas: each counts its own reservations the moment it decides and writes them
//! asynchronously; every `refresh` (2 s by default) each adds the reservations the others
//! decided since its last look (reaching back a minute, for decisions still being written),
//! so two replicas can over-admit against one envelope only within that window (plus the
//! writer's delay). Every 15 refreshes, or at once when this replica changes one of them,
//! sites, forecasts, budgets, policies and learned draw reload and the state is rebuilt from
//! every stored reservation, which also catches any decision written later than a minute.

mod api;
mod decide;
pub mod idempotency;
mod refresh;
mod state;
pub mod writer;

pub(crate) use api::validate;
pub use api::{Answer, Answered, Ask, AskError, PowerSource};

use chrono::Utc;
use parking_lot::RwLock;
use serde::Serialize;
use sqlx::PgPool;
use state::{load_slow, Hot};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::{mpsc, watch, Notify};
use utoipa::ToSchema;

/// Decisions answered but not yet stored, at most: past this (the database is away or
/// slower than the questions), admission answers 503 rather than decide what it cannot keep.
const WRITER_QUEUE: usize = 65_536;

/// Admission as the server holds it: the state, the writer's queue and its counts.
pub struct Admission {
    hot: RwLock<Hot>,
    tx: mpsc::Sender<writer::Decided>,
    writer: Arc<writer::WriterStats>,
    poke: Notify,
    default_gpu_w: u32,
    /// The answers given lately under an idempotency key.
    recent: idempotency::Recent,
}

/// How the decision writer is doing.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct WriterHealth {
    /// Decisions answered and waiting to be stored.
    pub queued: u64,
    /// Decisions stored since this process started.
    pub stored: u64,
    /// Decisions the database refused, kept as dead letters, since this process started.
    pub dead_lettered: u64,
    /// The database is away; the writer is retrying.
    pub retrying: bool,
}

impl Admission {
    /// Loads the state, then starts the refresh loop and the decision writer; both stop when
    /// `stop` turns true. The server serves only once admission can answer.
    pub async fn start(
        pool: PgPool,
        refresh: std::time::Duration,
        default_gpu_w: u32,
        stop: watch::Receiver<bool>,
    ) -> (Arc<Admission>, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(WRITER_QUEUE);
        let stats = Arc::new(writer::WriterStats::default());
        let admission = Arc::new(Admission {
            hot: RwLock::new(Hot::default()),
            tx,
            writer: Arc::clone(&stats),
            poke: Notify::new(),
            default_gpu_w,
            recent: idempotency::Recent::default(),
        });
        let writer = tokio::spawn(writer::run(pool.clone(), rx, stats));
        let first = match load_slow(&pool, Utc::now()).await {
            Ok(s) => {
                let s = Arc::new(s);
                if let Err(e) = admission.refresh_full(&pool, &s, Utc::now()).await {
                    tracing::warn!(error = %e, "admission: could not load reservations");
                }
                Some(s)
            }
            Err(e) => {
                tracing::warn!(error = %e, "admission: could not load its state; it answers 503 until it can");
                None
            }
        };
        let a = Arc::clone(&admission);
        let task = tokio::spawn(async move {
            a.refresh_loop(pool, refresh, stop, first).await;
            drop(a);
            // The writer ends once the last sender (the state, dropped with the router) is gone.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(10), writer).await;
        });
        (admission, task)
    }

    /// The decision writer's counts.
    pub fn writer_health(&self) -> WriterHealth {
        WriterHealth {
            queued: (WRITER_QUEUE - self.tx.capacity()) as u64,
            stored: self.writer.stored.load(Ordering::Relaxed),
            dead_lettered: self.writer.dead_lettered.load(Ordering::Relaxed),
            retrying: self.writer.retrying.load(Ordering::Relaxed),
        }
    }

    /// Whether the state has loaded: until it has, questions are answered 503.
    pub fn ready(&self) -> bool {
        self.hot.read().ready
    }

    /// Reload sites, budgets, policies and forecasts now (this replica changed one).
    pub fn poke(&self) {
        self.poke.notify_one();
    }
}
