//! What the HTTP benches share: a fresh database with the simulated inventory, served on a
//! loopback port by the real server.

use anyhow::bail;
use sqlx::PgPool;
use tokio::net::TcpListener;
use wattledger::auth::{Keys, Role};
use wattledger::config::Config;
use wattledger_store::databases;
use wattledger_store::partitions::{self, Kind};

pub const SECRET: &str = "bench-secret-bench-secret-bench-secret";

// Each bench uses the parts it needs.
#[allow(dead_code)]
pub struct Served {
    pub db_url: String,
    pub pool: PgPool,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    pub keys: Keys,
    /// Dropped with this, it stops the server.
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// A fresh database `name` on the server (or Citus cluster) whose admin database is
/// `admin`, with an inventory (ingest path and body: tenants, sites, models, meters) and the
/// sample partitions of `[from_ms, to_ms)`, served on a loopback port; `tune` adjusts the
/// server's configuration first.
pub async fn fresh(
    admin: &str,
    name: &str,
    inventory: &[(&str, serde_json::Value)],
    (from_ms, to_ms): (i64, i64),
    tune: impl FnOnce(&mut Config),
) -> anyhow::Result<Served> {
    databases::drop(admin, name).await?;
    databases::ensure(admin, name).await?;
    let db_url = databases::url_of(admin, name);
    let pool = wattledger_store::connect(&db_url, 8).await?;
    wattledger_store::migrate(&pool).await?;
    let keys = Keys::new(SECRET.as_bytes())?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let mut config = Config::for_tests(db_url.clone(), SECRET.into());
    tune(&mut config);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(wattledger::startup::serve(
        pool.clone(),
        keys.clone(),
        config,
        listener,
        async move {
            let _ = stopped.await;
        },
    ));
    let admin = keys.mint("bench", Role::Admin, None, 3600)?;
    let client = reqwest::Client::new();
    for (path, body) in inventory {
        // A fleet of 100,000 GPUs has more meters than a batch may hold.
        let Some(records) = body["records"].as_array() else {
            bail!("{path}: the inventory body has no records");
        };
        for chunk in records.chunks(10_000) {
            let r = client
                .post(format!("{base}/v1/ingest/{path}"))
                .bearer_auth(&admin)
                .json(&serde_json::json!({ "records": chunk }))
                .send()
                .await?;
            if !r.status().is_success() {
                bail!("{path}: {}", r.text().await?);
            }
        }
    }
    // Partitions exist before anything is written, so no measurement pays for creating them.
    let mut tx = pool.begin().await?;
    let (lo, hi) = (
        chrono::DateTime::from_timestamp_millis(from_ms).unwrap(),
        chrono::DateTime::from_timestamp_millis(to_ms).unwrap(),
    );
    let mut spans = Vec::new();
    for kind in [Kind::Steps, Kind::Raw] {
        spans.extend(partitions::spans(kind, lo, hi));
    }
    partitions::ensure(&mut tx, &spans).await?;
    tx.commit().await?;
    Ok(Served {
        db_url,
        pool,
        base,
        keys,
        _stop: stop,
    })
}

/// The demo simulation's inventory, as `fresh` takes it.
// Each bench uses the parts it needs.
#[allow(dead_code)]
pub fn inventory(sim: &wattledger_sim::Simulation) -> Vec<(&'static str, serde_json::Value)> {
    vec![
        ("tenants", sim.tenant_records()),
        ("sites", sim.site_records()),
        ("models", sim.model_records()),
        ("device_models", sim.device_model_records()),
        ("meters", sim.meter_records()),
    ]
}

/// What the server said it did with the batches sent, summed over their answers.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Ingested {
    pub received: u64,
    pub written: u64,
    pub duplicates: u64,
}

impl Ingested {
    /// Reads one ingest answer and adds it in, refusing one that does not account for every
    /// record it received (`written + duplicates = received`) or reports a conflict: a bench
    /// whose server quietly dropped records would otherwise look faster.
    // Each bench uses the parts it needs.
    #[allow(dead_code)]
    pub fn add(&mut self, answer: &[u8]) -> anyhow::Result<()> {
        #[derive(serde::Deserialize)]
        struct Outcome {
            received: u64,
            written: u64,
            duplicates: u64,
            conflicts: Vec<serde_json::Value>,
        }
        let o: Outcome = serde_json::from_slice(answer).map_err(|e| {
            anyhow::anyhow!("ingest answer: {e}: {}", String::from_utf8_lossy(answer))
        })?;
        if o.written + o.duplicates != o.received || !o.conflicts.is_empty() {
            bail!(
                "ingest answer does not account for its records: {}",
                String::from_utf8_lossy(answer)
            );
        }
        self.merge(Ingested {
            received: o.received,
            written: o.written,
            duplicates: o.duplicates,
        });
        Ok(())
    }

    pub fn merge(&mut self, other: Ingested) {
        self.received += other.received;
        self.written += other.written;
        self.duplicates += other.duplicates;
    }
}

/// Sends the bodies with two requests in flight (agents send concurrently); returns the
/// seconds it took and what the answers said was done (each one checked by `Ingested::add`).
// Each bench uses the parts it needs.
#[allow(dead_code)]
pub async fn send_two(
    http: &reqwest::Client,
    s: &Served,
    token: &str,
    path: &str,
    bodies: Vec<Vec<u8>>,
) -> anyhow::Result<(f64, Ingested)> {
    let url = format!("{}/v1/ingest/{path}", s.base);
    let bodies = std::sync::Arc::new(bodies);
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let t = std::time::Instant::now();
    let lanes: Vec<_> = (0..2)
        .map(|_| {
            let (http, url, token) = (http.clone(), url.clone(), token.to_owned());
            let (bodies, next) = (bodies.clone(), next.clone());
            tokio::spawn(async move {
                let mut done = Ingested::default();
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(body) = bodies.get(i) else {
                        return Ok::<_, anyhow::Error>(done);
                    };
                    let r = http
                        .post(&url)
                        .bearer_auth(&token)
                        .header("content-type", "application/json")
                        .body(body.clone())
                        .send()
                        .await?;
                    if !r.status().is_success() {
                        bail!("batch refused: {}", r.text().await?);
                    }
                    done.add(&r.bytes().await?)?;
                }
            })
        })
        .collect();
    let mut done = Ingested::default();
    for lane in lanes {
        done.merge(lane.await??);
    }
    Ok((t.elapsed().as_secs_f64(), done))
}

/// Stops the PostgreSQL the bench started when dropped (at its end, also on an error), unless
/// told to keep it (`--keep`, to look into a query afterwards).
pub struct StopPostgres {
    pub keep: bool,
}

impl Drop for StopPostgres {
    fn drop(&mut self) {
        if !self.keep {
            wattledger::embedded_pg::stop_started();
        }
    }
}
