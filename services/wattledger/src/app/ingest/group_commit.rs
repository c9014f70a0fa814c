//! Group commit of sample batches: the batches that arrive while a transaction is in flight
//! are written together in the next one (`samples::insert_group`).
//!
//! A fleet's agents each push a minute of their node's meters every few seconds: thousands
//! of small batches a second, each of which marks its site's current hour dirty. One
//! transaction per batch queues them all behind that row's lock, a commit's flush each (the
//! live-push bench measured 26 ms a batch in that wait at 2,000 agents). Writers take what is
//! queued when they are free, so a batch waits for at most the transaction before it: no
//! timer, no added latency when the server is idle. A batch is answered only after the
//! transaction that holds it commits.

use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, Mutex};
use wattledger_store::samples::{self, InsertOutcome, SampleRow};
use wattledger_store::StoreResult;

/// Writers taking groups from the queue: two, so one group is built and sent while the
/// other's commit is flushed; more would only contend on the same dirty-hour rows.
const WRITERS: usize = 2;
/// Batches waiting for a writer before a sender waits for room.
const QUEUE: usize = 4096;

struct Job {
    rows: Vec<SampleRow>,
    done: oneshot::Sender<StoreResult<InsertOutcome>>,
}

/// The handle the ingest handlers send their checked rows to.
#[derive(Clone)]
pub struct SampleWriter {
    queue: mpsc::Sender<Job>,
}

impl SampleWriter {
    /// Starts the writers; a group holds at most `max_rows` rows (a batch larger than that
    /// goes alone).
    pub fn start(pool: sqlx::PgPool, max_rows: usize) -> Self {
        let (queue, rx) = mpsc::channel(QUEUE);
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..WRITERS {
            tokio::spawn(write_groups(pool.clone(), rx.clone(), max_rows));
        }
        SampleWriter { queue }
    }

    /// Writes the rows in the next group and answers once it has committed.
    pub async fn insert(&self, rows: Vec<SampleRow>) -> StoreResult<InsertOutcome> {
        let (done, answer) = oneshot::channel();
        if self.queue.send(Job { rows, done }).await.is_err() {
            return Err(stopped());
        }
        answer.await.unwrap_or_else(|_| Err(stopped()))
    }
}

/// The writers end only with the runtime; a batch caught then is answered as a database
/// that went away, which the agent retries.
fn stopped() -> wattledger_store::StoreError {
    wattledger_store::StoreError::Database(sqlx::Error::PoolClosed)
}

async fn write_groups(pool: sqlx::PgPool, rx: Arc<Mutex<mpsc::Receiver<Job>>>, max_rows: usize) {
    loop {
        let group = {
            let mut rx = rx.lock().await;
            let Some(first) = rx.recv().await else {
                return;
            };
            let mut rows = first.rows.len();
            let mut group = vec![first];
            while rows < max_rows {
                match rx.try_recv() {
                    Ok(job) => {
                        rows += job.rows.len();
                        group.push(job);
                    }
                    Err(_) => break,
                }
            }
            group
        };
        let (batches, answers): (Vec<_>, Vec<_>) =
            group.into_iter().map(|j| (j.rows, j.done)).unzip();
        let outcomes = samples::insert_group(&pool, &batches).await;
        for (answer, outcome) in answers.into_iter().zip(outcomes) {
            // A client that went away is not waiting: its rows are stored all the same, and
            // a resend finds them as duplicates.
            let _ = answer.send(outcome);
        }
    }
}
