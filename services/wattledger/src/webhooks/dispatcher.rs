//! Delivers due outbox messages. Claimed rows stay locked (`FOR UPDATE SKIP LOCKED`) until
//! their attempts are recorded, so replicas share the work and a message is in flight from
//! one of them at a time; a replica killed mid-delivery leaves its claim to roll back and the
//! message is sent again, with the same `webhook-id`, by whoever claims it next.
//!
//! Each delivery resolves the endpoint's name, refuses it if any address is not one webhooks
//! may reach, and connects to the address it checked (so a second lookup cannot swap in
//! another); redirects are not followed; 15 s is the limit.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use wattledger_domain::webhooks::retry::{next_attempt, parse_retry_after};
use wattledger_domain::webhooks::signature::header;
use wattledger_domain::webhooks::ssrf::Reach;
use wattledger_domain::webhooks::{Outcome, Secret};
use wattledger_store::webhooks::{self as store, After, Attempt, Due};
use wattledger_store::StoreResult;

const TIMEOUT: Duration = Duration::from_secs(15);
/// Messages claimed at once; their deliveries run side by side.
const BATCH: i64 = 32;

/// Where deliveries may go and which certificate authorities they trust beside the public
/// roots.
#[derive(Clone, Default)]
pub struct Settings {
    pub reach: Reach,
    pub roots: Vec<reqwest::Certificate>,
}

/// The certificates of a PEM bundle (WATTLEDGER_WEBHOOK_CA_FILE).
pub fn load_roots(path: &std::path::Path) -> anyhow::Result<Vec<reqwest::Certificate>> {
    use anyhow::Context;
    let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    reqwest::Certificate::from_pem_bundle(&pem)
        .with_context(|| format!("{} is not a PEM certificate bundle", path.display()))
}

/// Delivers until `stop` turns true, looking for due messages every `every`.
pub async fn run(
    pool: PgPool,
    settings: Settings,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        loop {
            match deliver_due(&pool, &settings).await {
                Ok(0) => break,
                Ok(n) => tracing::debug!(messages = n, "webhook deliveries attempted"),
                Err(error) => {
                    tracing::warn!(%error, "webhook dispatch failed; retrying");
                    break;
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => {}
        }
        if *stop.borrow() {
            return;
        }
    }
}

/// One claim: attempts every due message in it and records each; returns how many.
pub async fn deliver_due(pool: &PgPool, settings: &Settings) -> StoreResult<usize> {
    let mut tx = pool.begin().await?;
    let due = store::claim_due(&mut tx, BATCH).await?;
    if due.is_empty() {
        return Ok(0);
    }
    // Side by side: a slow receiver does not hold the others up.
    let mut set = tokio::task::JoinSet::new();
    for (i, d) in due.iter().cloned().enumerate() {
        let settings = settings.clone();
        set.spawn(async move { (i, attempt(&d, &settings).await) });
    }
    let mut results: Vec<Option<Result_>> = (0..due.len()).map(|_| None).collect();
    while let Some(joined) = set.join_next().await {
        if let Ok((i, r)) = joined {
            results[i] = Some(r);
        }
    }
    for (d, r) in due.iter().zip(&results) {
        // A delivery task that panicked is not recorded: the message stays due.
        let Some(r) = r else { continue };
        let n = d.attempts + 1;
        let after = match r.outcome {
            Outcome::Delivered => After::Delivered,
            Outcome::Gone => {
                store::disable_gone(&mut tx, d.endpoint_id).await?;
                tracing::warn!(endpoint = %d.endpoint_id, "a webhook receiver answered 410 Gone; endpoint disabled");
                After::Dead
            }
            Outcome::Failed => match next_attempt(n as u32, r.started_at, r.retry_after) {
                Some(at) => After::RetryAt(at),
                None => {
                    tracing::warn!(message = %d.id, attempts = n, "webhook message dead-lettered after its last attempt");
                    After::Dead
                }
            },
        };
        store::record_attempt(
            &mut tx,
            &Attempt {
                message_id: &d.id,
                attempt: n,
                started_at: r.started_at,
                status: r.status.map(i32::from),
                latency_ms: r.latency_ms,
                error: r.error.as_deref(),
            },
            after,
        )
        .await?;
    }
    tx.commit().await?;
    Ok(due.len())
}

struct Result_ {
    started_at: DateTime<Utc>,
    outcome: Outcome,
    status: Option<u16>,
    latency_ms: i32,
    error: Option<String>,
    retry_after: Option<chrono::Duration>,
}

async fn attempt(d: &Due, settings: &Settings) -> Result_ {
    let started_at = Utc::now();
    let t = Instant::now();
    let (status, error, retry_after) = match send(d, settings, started_at).await {
        Ok((status, retry_after)) => (Some(status), None, retry_after),
        Err(e) => (None, Some(e), None),
    };
    let outcome = Outcome::of(status);
    let error = match (&error, status, outcome) {
        (None, Some(s), Outcome::Failed) => Some(format!("the receiver answered {s}")),
        _ => error,
    };
    Result_ {
        started_at,
        outcome,
        status,
        latency_ms: i32::try_from(t.elapsed().as_millis()).unwrap_or(i32::MAX),
        error,
        retry_after,
    }
}

/// Sends one attempt; the status and any `Retry-After`, or why nothing was sent.
async fn send(
    d: &Due,
    settings: &Settings,
    now: DateTime<Utc>,
) -> Result<(u16, Option<chrono::Duration>), String> {
    let (dest, addr) = super::checked(&d.url, settings.reach).await?;
    let mut client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(TIMEOUT)
        .user_agent(concat!("wattledger-webhooks/", env!("CARGO_PKG_VERSION")));
    if let (Some(name), Some(addr)) = (&dest.name, addr) {
        client = client.resolve(name, addr);
    }
    for root in &settings.roots {
        client = client.add_root_certificate(root.clone());
    }
    let client = client.build().map_err(|e| e.to_string())?;
    let secret = Secret::parse(&d.secret).map_err(|e| e.to_string())?;
    let previous = match (&d.previous_secret, d.previous_until) {
        (Some(p), Some(until)) if until > now => Secret::parse(p).ok(),
        _ => None,
    };
    let mut secrets = vec![&secret];
    secrets.extend(previous.as_ref());
    let ts = now.timestamp();
    let signature = header(&secrets, &d.id, ts, d.payload.as_bytes()).map_err(|e| e.to_string())?;
    let response = client
        .post(dest.url)
        .header("content-type", "application/json")
        .header("webhook-id", &d.id)
        .header("webhook-timestamp", ts.to_string())
        .header("webhook-signature", signature)
        .body(d.payload.clone())
        .send()
        .await
        .map_err(|e| {
            if e.is_timeout() {
                format!("no answer within {} s", TIMEOUT.as_secs())
            } else {
                format!("could not deliver: {e}")
            }
        })?;
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, now));
    Ok((response.status().as_u16(), retry_after))
}
