//! Seeding the demo through the real API: the simulated cluster's samples and tokens, and
//! its budgets, sent as an agent, a scheduler and an administrator would.

use super::DemoArgs;
use anyhow::{bail, Context};
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::{mpsc, Mutex};
use wattledger::progress::Progress;
use wattledger_sim::{SampleState, Simulation};

/// The demo's budgets: monthly, per tenant, sized against the simulated cluster so that
/// last month and this one cross thresholds (key, tenant, limit field, limit, hard).
const BUDGETS: [(&str, &str, &str, &str, bool); 5] = [
    (
        "acme-research-energy",
        "acme-research",
        "limit_kwh",
        "40000",
        true,
    ),
    ("nimbus-ai-cost", "nimbus-ai", "limit_cost", "600", false),
    (
        "helix-bio-carbon",
        "helix-bio",
        "limit_carbon_kg",
        "4000",
        true,
    ),
    (
        "orbit-labs-energy",
        "orbit-labs",
        "limit_kwh",
        "40000",
        false,
    ),
    (
        "lumen-search-energy",
        "lumen-search",
        "limit_kwh",
        "3000",
        false,
    ),
];

#[derive(Clone)]
pub(super) struct Client {
    pub(super) http: reqwest::Client,
    pub(super) base: String,
    pub(super) admin: String,
    pub(super) collector: String,
    pub(super) scheduler: String,
}

impl Client {
    pub(super) async fn post(&self, token: &str, path: &str, body: Value) -> anyhow::Result<Value> {
        self.send(reqwest::Method::POST, token, path, body).await
    }

    pub(super) async fn put(&self, token: &str, path: &str, body: Value) -> anyhow::Result<Value> {
        self.send(reqwest::Method::PUT, token, path, body).await
    }

    async fn send(
        &self,
        method: reqwest::Method,
        token: &str,
        path: &str,
        body: Value,
    ) -> anyhow::Result<Value> {
        let bytes = serde_json::to_vec(&body)?;
        let resp = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(bytes)
            .send()
            .await
            .with_context(|| format!("{method} {path}"))?;
        let status = resp.status();
        let text = resp.text().await?;
        if !status.is_success() {
            bail!("{method} {path} answered {status}: {text}");
        }
        Ok(serde_json::from_str(&text)?)
    }
}

/// Streams sample batches (about 10k records each) from a generator thread to two uploaders.
pub(super) async fn push_samples(client: &Client, sim: Arc<Simulation>) -> anyhow::Result<u64> {
    let per_interval = 181i64;
    let chunk = (10_000 / per_interval).max(1);
    let intervals = sim.intervals();
    let (tx, rx) = mpsc::channel::<Vec<Value>>(4);
    let generator = {
        let sim = sim.clone();
        tokio::task::spawn_blocking(move || {
            let mut state = SampleState::default();
            let mut k = 0;
            while k < intervals {
                let batch = sim.sample_records(k, (k + chunk).min(intervals), &mut state);
                if tx.blocking_send(batch).is_err() {
                    return;
                }
                k += chunk;
            }
        })
    };
    let rx = Arc::new(Mutex::new(rx));
    let progress = Arc::new(Mutex::new(Progress::new(
        "samples",
        (intervals * per_interval) as u64,
    )));
    let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut uploaders = Vec::new();
    for _ in 0..2 {
        let rx = rx.clone();
        let progress = progress.clone();
        let sent = sent.clone();
        let http = client.http.clone();
        let url = format!("{}/v1/ingest/samples", client.base);
        let token = client.collector.clone();
        uploaders.push(tokio::spawn(async move {
            loop {
                let Some(batch) = rx.lock().await.recv().await else {
                    return Ok::<_, anyhow::Error>(());
                };
                let n = batch.len() as u64;
                let body = serde_json::to_vec(&serde_json::json!({ "records": batch }))?;
                let resp = http
                    .post(&url)
                    .bearer_auth(&token)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await?;
                if !resp.status().is_success() {
                    bail!(
                        "samples batch refused: {} {}",
                        resp.status(),
                        resp.text().await.unwrap_or_default()
                    );
                }
                sent.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                progress.lock().await.add(n);
            }
        }));
    }
    for u in uploaders {
        u.await??;
    }
    generator.await?;
    let p = Arc::try_unwrap(progress)
        .map_err(|_| anyhow::anyhow!("progress still shared"))?
        .into_inner();
    p.finish();
    Ok(sent.load(std::sync::atomic::Ordering::Relaxed))
}

/// Token records in batches of 250 intervals (about 3,700 records), two in flight: the server
/// checks each record's job and tenant keys one by one (a second or so a batch), and one
/// request at a time left a core idle for most of a minute.
pub(super) async fn push_tokens(client: &Client, sim: &Simulation) -> anyhow::Result<u64> {
    const CHUNK: i64 = 250;
    const IN_FLIGHT: usize = 2;
    let intervals = sim.intervals();
    let mut p = Progress::new("tokens", intervals as u64);
    let mut total = 0;
    let mut requests = tokio::task::JoinSet::new();
    for k in (0..intervals).step_by(CHUNK as usize) {
        if requests.len() == IN_FLIGHT {
            if let Some(done) = requests.join_next().await {
                p.add(done??);
            }
        }
        let end = (k + CHUNK).min(intervals);
        let records = sim.token_records(k, end);
        total += records.len() as u64;
        let c = client.clone();
        requests.spawn(async move {
            if !records.is_empty() {
                let body = serde_json::json!({ "records": records });
                c.post(&c.collector, "/v1/ingest/tokens", body).await?;
            }
            Ok::<_, anyhow::Error>((end - k) as u64)
        });
    }
    while let Some(done) = requests.join_next().await {
        p.add(done??);
    }
    p.finish();
    Ok(total)
}

pub(super) async fn seed_budgets(client: &Client, args: &DemoArgs) -> anyhow::Result<()> {
    for (key, tenant, field, limit, hard) in BUDGETS {
        let mut body = serde_json::json!({ "tenant": tenant, "hard": hard });
        body[field] = Value::String(limit.into());
        if field == "limit_cost" {
            body["currency"] = Value::String("EUR".into());
        }
        let r = client
            .http
            .put(format!("{}/v1/budgets/{key}", client.base))
            .bearer_auth(&client.admin)
            .json(&body)
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("budget {key}: {}", r.text().await?);
        }
    }
    let Some(url) = &args.webhook_url else {
        return Ok(());
    };
    for (_, tenant, _, _, _) in BUDGETS {
        let mut body = serde_json::json!({ "tenant": tenant, "url": url,
            "description": "wattledger demo: budget alerts" });
        if let Some(secret) = &args.webhook_secret {
            body["secret"] = Value::String(secret.clone());
        }
        let created = client
            .post(&client.admin, "/v1/webhooks/endpoints", body)
            .await?;
        if args.webhook_secret.is_none() {
            eprintln!(
                "Webhook endpoint for {tenant}: {url}, secret {}",
                created["secret"].as_str().unwrap_or_default()
            );
        }
    }
    eprintln!("Budget alerts of {} tenants go to {url}", BUDGETS.len());
    Ok(())
}
