//! Ingest throughput: samples per second through the HTTP API into PostgreSQL, against
//! `psql \copy` of the same rows into the same server as the baseline, interleaved rounds.
//!
//! cargo bench -p wattledger --bench ingest [-- DAYS]   (default 20 days ≈ 1M samples)
//!
//! Needs the PostgreSQL server binaries and psql (apt-get install postgresql).

use anyhow::{bail, Context};
use serde_json::{json, Value};
use std::io::Write;
use std::time::Instant;
use support::fresh;
use wattledger::auth::Role;
use wattledger::embedded_pg::EmbeddedPostgres;
use wattledger_sim::{SampleState, Simulation};

mod support;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // `cargo test --all-targets` runs bench binaries without --bench: nothing to measure then.
    if !std::env::args().any(|a| a == "--bench") {
        println!("ingest benchmark: run it with cargo bench -p wattledger --bench ingest");
        return Ok(());
    }
    let days: i64 = std::env::args()
        .filter_map(|a| a.parse().ok())
        .next()
        .unwrap_or(20);
    let dir = std::env::temp_dir().join("wattledger-bench-pg");
    let pg = tokio::task::spawn_blocking(move || {
        EmbeddedPostgres::start(&dir, &["synchronous_commit=off"])
    })
    .await??;
    let _stop = support::StopPostgres { keep: false };
    let from = chrono::DateTime::parse_from_rfc3339("2026-09-01T00:00:00Z")?.timestamp_millis();
    let sim = Simulation::new(7, from, from + days * 86_400_000, 300_000);
    let mut batches: Vec<Vec<Value>> = Vec::new();
    let mut state = SampleState::default();
    let mut k = 0;
    while k < sim.intervals() {
        batches.push(sim.sample_records(k, (k + 55).min(sim.intervals()), &mut state));
        k += 55;
    }
    let rows: usize = batches.iter().map(Vec::len).sum();
    println!(
        "{rows} samples from {days} simulated days, {} batches of ~10k",
        batches.len()
    );
    let bodies: Vec<Vec<u8>> = batches
        .iter()
        .map(|b| serde_json::to_vec(&json!({ "records": b })).unwrap())
        .collect();

    let mut ratios = Vec::new();
    for round in 1..=2 {
        let copy_db = format!("bench_copy_{round}");
        let http_db = format!("bench_http_{round}");
        let copy_server = fresh(
            &pg.url("postgres"),
            &copy_db,
            &support::inventory(&sim),
            (sim.from_ms, sim.to_ms),
            |_| {},
        )
        .await?;
        let copy_url = copy_server.db_url.clone();
        let http_server = fresh(
            &pg.url("postgres"),
            &http_db,
            &support::inventory(&sim),
            (sim.from_ms, sim.to_ms),
            |_| {},
        )
        .await?;

        // Baseline: the same rows as CSV, meter keys resolved to ids, through psql \copy.
        let pool = wattledger_store::connect(&copy_url, 2).await?;
        // A sample row carries its meter's site (it is keyed and sharded by it).
        let ids: std::collections::HashMap<String, (i64, i64)> =
            sqlx::query_as::<_, (String, i64, i64)>("SELECT key, site_id, id FROM meters")
                .fetch_all(&pool)
                .await?
                .into_iter()
                .map(|(key, site, id)| (key, (site, id)))
                .collect();
        let csv = std::env::temp_dir().join("wattledger-bench-samples.csv");
        let mut f = std::io::BufWriter::new(std::fs::File::create(&csv)?);
        for r in batches.iter().flatten() {
            let power = r
                .get("power_w")
                .and_then(Value::as_f64)
                .map(|w| ((w * 1000.0).round() as i64).to_string());
            let counter = r
                .get("counter_mj")
                .and_then(Value::as_i64)
                .map(|c| c.to_string());
            let (site, meter) = ids[r["meter"].as_str().unwrap()];
            writeln!(
                f,
                "{site},{meter},{},{},{},{}",
                r["ts"].as_str().unwrap(),
                counter.unwrap_or_default(),
                power.unwrap_or_default(),
                r.get("step_s").is_none_or(Value::is_null)
            )?;
        }
        f.flush()?;
        drop(f);
        let t = Instant::now();
        let out = std::process::Command::new("psql")
            .arg(&copy_url)
            .arg("-c")
            .arg(format!(
                "\\copy samples (site_id, meter_id, ts, counter_mj, power_mw, raw) FROM '{}' WITH (FORMAT csv)",
                csv.display()
            ))
            .output()
            .context("running psql")?;
        if !out.status.success() {
            bail!(
                "psql \\copy failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let copy_s = t.elapsed().as_secs_f64();

        // The API: 10k-record batches, two requests in flight, as the demo and agents send.
        let collector = http_server
            .keys
            .mint("bench", Role::Collector, None, 3600)?;
        let (http_s, done) = support::send_two(
            &reqwest::Client::new(),
            &http_server,
            &collector,
            "samples",
            bodies.clone(),
        )
        .await?;
        // A fresh database each round: every record is new.
        if done.written != rows as u64 {
            bail!("the API wrote {} of {rows} records: {done:?}", done.written);
        }
        let (copy_rate, http_rate) = (rows as f64 / copy_s, rows as f64 / http_s);
        ratios.push(http_rate / copy_rate);
        println!(
            "round {round}: psql \\copy {:>9.0} rows/s ({copy_s:.2} s)   HTTP API {:>9.0} rows/s ({http_s:.2} s)   API/COPY = {:.2}",
            copy_rate, http_rate, http_rate / copy_rate
        );
        drop(copy_server);
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "API/COPY ratio: {:.2} (min of {} rounds), target ≥ 0.50",
        ratios[0],
        ratios.len()
    );
    Ok(())
}
