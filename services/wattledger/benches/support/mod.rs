//! What the HTTP benches share: a fresh database with the simulated inventory, served on a
//! loopback port by the real server.

use anyhow::bail;
use sqlx::PgPool;
use tokio::net::TcpListener;
use wattledger::auth::{Keys, Role};
use wattledger::config::Config;
use wattledger::embedded_pg::{ensure_database, EmbeddedPostgres};
use wattledger::sim::Simulation;
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
}

/// A fresh database `name` with the simulated inventory (tenants, sites, models, meters) and
/// the partitions of the simulated range, served on a loopback port; `tune` adjusts the
/// server's configuration first.
pub async fn fresh(
    pg: &EmbeddedPostgres,
    name: &str,
    sim: &Simulation,
    tune: impl FnOnce(&mut Config),
) -> anyhow::Result<Served> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&pg.url("postgres")).await?;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&mut conn)
        .await?;
    ensure_database(&pg.url("postgres"), name).await?;
    let db_url = pg.url(name);
    let pool = wattledger_store::connect(&db_url, 8).await?;
    wattledger_store::migrate(&pool).await?;
    let keys = Keys::new(SECRET.as_bytes())?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let mut config = Config::for_tests(db_url.clone(), SECRET.into());
    tune(&mut config);
    tokio::spawn(wattledger::startup::serve(
        pool.clone(),
        keys.clone(),
        config,
        listener,
        std::future::pending(),
    ));
    let admin = keys.mint("bench", Role::Admin, None, 3600)?;
    let client = reqwest::Client::new();
    for (path, body) in [
        ("tenants", sim.tenant_records()),
        ("sites", sim.site_records()),
        ("models", sim.model_records()),
        ("device_models", sim.device_model_records()),
        ("meters", sim.meter_records()),
    ] {
        let r = client
            .post(format!("{base}/v1/ingest/{path}"))
            .bearer_auth(&admin)
            .json(&body)
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("{path}: {}", r.text().await?);
        }
    }
    // Partitions exist before anything is written, so no measurement pays for creating them.
    let mut tx = pool.begin().await?;
    let (lo, hi) = (
        chrono::DateTime::from_timestamp_millis(sim.from_ms).unwrap(),
        chrono::DateTime::from_timestamp_millis(sim.to_ms).unwrap(),
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
    })
}
