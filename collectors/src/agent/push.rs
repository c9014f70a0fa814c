//! Sends the spool to the server, oldest first, and acknowledges what the server took.
//!
//! Consecutive sample and token entries are coalesced into one request of up to
//! `push_max_records`. A refused batch (422) has its bad records written to the dead-letter
//! file with the server's reasons and is sent again without them; a server that is away,
//! overloaded or refusing the token is retried with capped exponential backoff (or after its
//! `Retry-After`), jittered, and nothing
//! is acknowledged until it answers 2xx. Every answer's time sets the agent's clock
//! ([`super::clock`]).

use super::clock::{self, Clock};
use super::dead_letter::DeadLetter;
use super::metrics::Metrics;
use super::spool::{Pos, SourceState, Spool};
use crate::records::Batch;
use crate::sources::http::error_chain;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

pub struct Pusher {
    pub client: reqwest::Client,
    pub server: String,
    pub token: super::token::Token,
    pub spool: Arc<Mutex<Spool>>,
    pub wake: Arc<Notify>,
    pub metrics: Arc<Metrics>,
    pub dead_letter: DeadLetter,
    pub max_records: usize,
    pub clock: Arc<Clock>,
}

/// Why a push did not go through this time.
#[derive(Debug)]
struct Retry {
    reason: String,
    after: Option<Duration>,
}

const MAX_BACKOFF: Duration = Duration::from_secs(60);

impl Pusher {
    /// Runs until the task is dropped.
    pub async fn run(self) {
        let mut backoff = Duration::from_millis(500);
        loop {
            let next = {
                let spool = self.spool.lock().expect("spool lock");
                let from = spool.cursor();
                spool.read(from, 512).map(|entries| (from, entries))
            };
            let entries = match next {
                Ok((_, e)) if e.is_empty() => {
                    self.update_gauge();
                    let _ =
                        tokio::time::timeout(Duration::from_secs(5), self.wake.notified()).await;
                    continue;
                }
                Ok((_, e)) => e,
                Err(e) => {
                    tracing::error!(error = %e, "spool unreadable; retrying");
                    tokio::time::sleep(MAX_BACKOFF).await;
                    continue;
                }
            };
            let (batch, upto, states) = self.coalesce(entries);
            match self.send(batch).await {
                Ok(()) => {
                    backoff = Duration::from_millis(500);
                    let acked = {
                        let mut spool = self.spool.lock().expect("spool lock");
                        spool.ack(upto, &states)
                    };
                    if let Err(e) = acked {
                        tracing::error!(error = %e, "could not record the acknowledgement; the batch will be resent (harmless: ingest is idempotent)");
                    }
                    self.update_gauge();
                }
                Err(r) => {
                    self.metrics
                        .add("wattledger_agent_push_failures_total", "", 1);
                    let wait = jittered(r.after.unwrap_or(backoff)).min(MAX_BACKOFF);
                    tracing::warn!(reason = %r.reason, retry_in_s = wait.as_secs_f64(), "push failed; the batch stays spooled");
                    tokio::time::sleep(wait).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    fn update_gauge(&self) {
        let pending = self.spool.lock().expect("spool lock").pending_bytes();
        self.metrics
            .set("wattledger_agent_spool_pending_bytes", "", pending as f64);
    }

    /// The first entry, with the following entries of the same endpoint while they fit (for
    /// samples and tokens; meters and jobs go one entry at a time, since the server refuses a
    /// key twice in one batch).
    fn coalesce(&self, entries: Vec<(Pos, super::spool::Entry)>) -> (Batch, Pos, Vec<SourceState>) {
        let mut it = entries.into_iter();
        let (mut upto, first) = it.next().expect("not empty");
        let mut states: Vec<SourceState> = first.state.into_iter().collect();
        let mut batch = first.batch;
        let mergeable = matches!(batch, Batch::Samples(_) | Batch::Tokens(_));
        for (pos, e) in it {
            if !mergeable
                || e.batch.endpoint() != batch.endpoint()
                || batch.len() + e.batch.len() > self.max_records
            {
                break;
            }
            batch.absorb(e.batch).expect("same endpoint");
            states.extend(e.state);
            upto = pos;
        }
        (batch, upto, states)
    }

    /// Sends a batch until the server has taken all of it that it will ever take.
    async fn send(&self, mut batch: Batch) -> Result<(), Retry> {
        loop {
            if batch.is_empty() {
                return Ok(());
            }
            let endpoint = batch.endpoint();
            let count = batch.len();
            let url = format!("{}/v1/ingest/{endpoint}", self.server.trim_end_matches('/'));
            let resp = self
                .client
                .post(&url)
                .bearer_auth(self.token.current())
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(batch.body())
                .send()
                .await
                .map_err(|e| Retry {
                    reason: format!("{url}: {}", error_chain(&e)),
                    after: None,
                })?;
            set_clock(&self.clock, &self.metrics, resp.headers());
            let status = resp.status().as_u16();
            let retry_after = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let answer: Value = resp.json().await.unwrap_or(Value::Null);
            match status {
                200..=299 => {
                    self.metrics.add(
                        "wattledger_agent_records_pushed_total",
                        endpoint,
                        count as u64,
                    );
                    let conflicts = answer
                        .get("conflicts")
                        .and_then(Value::as_array)
                        .map_or(0, Vec::len);
                    if conflicts > 0 {
                        tracing::warn!(endpoint, conflicts,
                            "the server already held other values for some samples; its values stand");
                        self.metrics.add(
                            "wattledger_agent_sample_conflicts_total",
                            endpoint,
                            conflicts as u64,
                        );
                    }
                    return Ok(());
                }
                422 => {
                    let records = batch.records_json();
                    let bad = field_errors(&answer);
                    if bad.is_empty() {
                        self.dead_letter_all(endpoint, status, &records, &answer)?;
                        return Ok(());
                    }
                    let refused: Vec<(Value, String)> = bad
                        .iter()
                        .filter_map(|(i, why)| Some((records.get(*i)?.clone(), why.clone())))
                        .collect();
                    tracing::warn!(endpoint, refused = refused.len(), of = records.len(),
                        first = %refused.first().map(|r| r.1.as_str()).unwrap_or(""),
                        dead_letter = %self.dead_letter.path().display(),
                        "the server refused records; they go to the dead-letter file and the rest is resent");
                    self.write_dead(endpoint, status, &refused)?;
                    batch.retain_indices(|i| !bad.contains_key(&i));
                }
                413 if batch.len() > 1 => {
                    // Too large for the server's limits: send it in halves.
                    let tail = batch.split_off(batch.len() / 2);
                    Box::pin(self.send(batch)).await?;
                    batch = tail;
                }
                401 | 403 | 408 | 429 | 500..=599 => {
                    return Err(Retry {
                        reason: format!("{url}: HTTP {status}: {}", message(&answer)),
                        after: retry_after,
                    });
                }
                _ => {
                    // Malformed for the server as a whole (400, 404, 415, a lone record over
                    // the size limit): retrying cannot help.
                    self.dead_letter_all(endpoint, status, &batch.records_json(), &answer)?;
                    return Ok(());
                }
            }
        }
    }

    fn dead_letter_all(
        &self,
        endpoint: &str,
        status: u16,
        records: &[Value],
        answer: &Value,
    ) -> Result<(), Retry> {
        let why = format!("HTTP {status}: {}", message(answer));
        tracing::error!(endpoint, records = records.len(), reason = %why,
            dead_letter = %self.dead_letter.path().display(), "the server refused a whole batch");
        let refused: Vec<(Value, String)> =
            records.iter().map(|r| (r.clone(), why.clone())).collect();
        self.write_dead(endpoint, status, &refused)
    }

    fn write_dead(
        &self,
        endpoint: &str,
        status: u16,
        refused: &[(Value, String)],
    ) -> Result<(), Retry> {
        self.dead_letter
            .write(endpoint, status, refused)
            .map_err(|e| Retry {
                reason: format!(
                    "writing the dead-letter file {}: {e}",
                    self.dead_letter.path().display()
                ),
                after: None,
            })?;
        self.metrics.add(
            "wattledger_agent_records_dead_lettered_total",
            endpoint,
            refused.len() as u64,
        );
        Ok(())
    }
}

/// Sets the agent's clock from an answer's time, if it carries one, and says how far this
/// machine's clock is off: on the metric always, in the log when that changed by a second or
/// more and is more than two.
pub(super) fn set_clock(clock: &Clock, metrics: &Metrics, headers: &reqwest::header::HeaderMap) {
    let Some(server) = clock::from_headers(headers) else {
        return;
    };
    let received = std::time::Instant::now();
    let first = !clock.synced();
    let before = metrics.get("wattledger_agent_clock_offset_seconds", "");
    let behind = clock.observe(server, received, chrono::Utc::now());
    let behind_s = behind.num_milliseconds() as f64 / 1000.0;
    metrics.set("wattledger_agent_clock_offset_seconds", "", behind_s);
    metrics.set("wattledger_agent_clock_synced", "", 1.0);
    if behind_s.abs() > 2.0 && (first || (behind_s - before).abs() >= 1.0) {
        tracing::warn!(
            behind_s,
            "this machine's clock is off from the server's; readings carry the server's time"
        );
    }
}

/// `wait` and up to as much again, at random: a fleet's agents told to come back after the
/// same seconds (a server's `Retry-After`, the same step of backoff after one outage) do not
/// all come back at once.
fn jittered(wait: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    // Each RandomState has new keys: the hash of nothing under them is a random number.
    let r = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    wait + wait.mul_f64((r >> 11) as f64 / (1u64 << 53) as f64)
}

fn message(answer: &Value) -> String {
    answer
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or("no error body")
        .to_owned()
}

/// `{"error": {"errors": [{"index", "field", "reason"}]}}` → index → "field: reason; ...".
fn field_errors(answer: &Value) -> BTreeMap<usize, String> {
    let mut out: BTreeMap<usize, String> = BTreeMap::new();
    let errors = answer
        .pointer("/error/errors")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for e in errors {
        let (Some(i), field, reason) = (
            e.get("index").and_then(Value::as_u64),
            e.get("field").and_then(Value::as_str).unwrap_or(""),
            e.get("reason").and_then(Value::as_str).unwrap_or(""),
        ) else {
            continue;
        };
        let entry = out.entry(i as usize).or_default();
        if !entry.is_empty() {
            entry.push_str("; ");
        }
        entry.push_str(&format!("{field}: {reason}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_are_spread_over_up_to_as_much_again() {
        let waits: std::collections::BTreeSet<Duration> =
            (0..20).map(|_| jittered(Duration::from_secs(2))).collect();
        assert!(waits
            .iter()
            .all(|w| *w >= Duration::from_secs(2) && *w < Duration::from_secs(4)));
        assert!(waits.len() > 10, "{waits:?}");
    }

    #[test]
    fn field_errors_are_grouped_by_record() {
        let a = serde_json::json!({"error": {"code": "validation_failed", "message": "m", "errors": [
            {"index": 2, "field": "meter", "reason": "unknown meter"},
            {"index": 2, "field": "ts", "reason": "is in the future"},
            {"index": 0, "field": "tenant", "reason": "unknown tenant"}]}});
        let e = field_errors(&a);
        assert_eq!(e.len(), 2);
        assert_eq!(e[&2], "meter: unknown meter; ts: is in the future");
        assert_eq!(message(&a), "m");
    }
}
