//! Admission decisions per second and their latency over HTTP on loopback, measured by `wrk`
//! (a load generator outside the server), against a trivial axum handler served by the same
//! process on the same runtime as the baseline. Interleaved rounds:
//!
//! - baseline: `POST` a body, answer a constant JSON;
//! - what-if: the real `POST /v1/admission` with `dry_run` (auth, parse, validate, decide on
//!   the hot state, answer);
//! - recorded: the same questions for real (each admit or deferral reserves power, each
//!   decision is written to Postgres by the background writer).
//!
//! cargo bench -p wattledger --bench admission [-- CONNECTIONS...] [--no-recorded]
//! (default 16 connections)
//!
//! Needs `wrk` and the PostgreSQL server binaries (apt-get install wrk postgresql).

use anyhow::{bail, Context};
use axum::routing::post;
use chrono::{Duration, DurationRound, Utc};
use serde_json::{json, Value};
use std::process::Command;
use support::{fresh, Served};
use tokio::net::TcpListener;
use wattledger::auth::Role;
use wattledger::embedded_pg::EmbeddedPostgres;
use wattledger_sim::Simulation;

mod support;

const SECONDS: u32 = 10;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if !std::env::args().any(|a| a == "--bench") {
        println!("admission benchmark: run it with cargo bench -p wattledger --bench admission");
        return Ok(());
    }
    let connections: Vec<u32> = std::env::args().filter_map(|a| a.parse().ok()).collect();
    let connections = if connections.is_empty() {
        vec![16]
    } else {
        connections
    };
    let recorded = !std::env::args().any(|a| a == "--no-recorded");
    Command::new("wrk")
        .arg("--version")
        .output()
        .context("wrk is needed: apt-get install wrk")?;

    let dir = std::env::temp_dir().join("wattledger-bench-pg");
    let pg = tokio::task::spawn_blocking(move || {
        EmbeddedPostgres::start(&dir, &["synchronous_commit=off"])
    })
    .await??;
    let _stop = support::StopPostgres { keep: false };
    // Forecasts from an hour ago to two days ahead: every flexible question searches them.
    let hour = Utc::now().duration_trunc(Duration::hours(1))?;
    let sim = Simulation::new(
        7,
        (hour - Duration::hours(1)).timestamp_millis(),
        (hour + Duration::days(2)).timestamp_millis(),
        300_000,
    );
    let served = fresh(
        &pg.url("postgres"),
        "bench_admission",
        &support::inventory(&sim),
        (sim.from_ms, sim.to_ms),
        |c| {
            // As in production: reservations reload every 2 s, sites and forecasts every 30 s.
            c.admission_refresh_ms = 2000;
        },
    )
    .await?;
    seed(&served, &sim).await?;
    let questions = questions();
    let token = served.keys.mint("bench", Role::Scheduler, None, 3600)?;
    wait_ready(&served, &token, &questions[0]).await?;
    for q in &questions {
        println!("{}", summary(&served, &token, q).await?);
    }

    let baseline = baseline_server().await?;
    let dir = std::env::temp_dir();
    let write_script = |name: &str, dry_run: bool| -> anyhow::Result<String> {
        let path = dir.join(name);
        std::fs::write(&path, lua(&token, &questions, dry_run))?;
        Ok(path.display().to_string())
    };
    let dry = write_script("wattledger-bench-whatif.lua", true)?;
    let real = write_script("wattledger-bench-recorded.lua", false)?;
    let admission_url = format!("{}/v1/admission", served.base);

    let mut recorded_requests = 0u64;
    for &c in &connections {
        // Warm both servers' connections and caches before measuring anything.
        wrk(&baseline, &dry, c, 2)?;
        wrk(&admission_url, &dry, c, 2)?;
        for round in 1..=2 {
            let base = wrk(&baseline, &dry, c, SECONDS)?;
            let whatif = wrk(&admission_url, &dry, c, SECONDS)?;
            let mut runs = vec![
                ("baseline (trivial axum)", base),
                ("admission what-if", whatif),
            ];
            if recorded {
                let rec = wrk(&admission_url, &real, c, SECONDS)?;
                recorded_requests += rec.requests;
                runs.push(("admission recorded", rec));
            }
            let base = &runs[0].1;
            println!("connections {c}, round {round}:");
            for (name, r) in &runs {
                println!(
                    "  {name:<24} {:>8.0} req/s  p50 {:>6.3} ms  p99 {:>6.3} ms  {:>5.1} % of baseline  \
                     server CPU {:>5.1} µs/req ({:>5.1} % of baseline's)",
                    r.rate,
                    r.p50_ms,
                    r.p99_ms,
                    100.0 * r.rate / base.rate,
                    r.cpu_us,
                    100.0 * base.cpu_us / r.cpu_us
                );
            }
        }
    }

    // Nothing answered is lost: once the writer drains, every recorded answer is a row.
    let mut stored = 0i64;
    for _ in 0..300 {
        stored = sqlx::query_scalar("SELECT count(*) FROM admission_decisions")
            .fetch_one(&served.pool)
            .await?;
        if stored as u64 >= recorded_requests {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    println!(
        "recorded decisions answered {recorded_requests}, stored {stored} (+{} from the setup)",
        stored - recorded_requests as i64
    );
    if (stored as u64) < recorded_requests {
        bail!("decisions answered but not stored");
    }
    Ok(())
}

/// Grid signals (Electricity Maps history and time-of-use tariffs, as the demo writes them,
/// plus a marginal forecast) and budgets for three tenants.
async fn seed(served: &Served, sim: &Simulation) -> anyhow::Result<()> {
    let collector = served.keys.mint("bench", Role::Collector, None, 3600)?;
    let client = reqwest::Client::new();
    let mut records = sim.signal_records()?;
    // Marginal intensity runs above the average on fossil-marginal grids.
    let marginal: Vec<Value> = records
        .iter()
        .filter(|r| r["signal"] == "carbon")
        .map(|r| {
            let mut m = r.clone();
            let avg: f64 = r["value"].as_str().unwrap_or("0").parse().unwrap_or(0.0);
            m["basis"] = json!("marginal");
            m["status"] = json!("forecast");
            m["source"] = json!("bench");
            m["value"] = json!(format!("{:.0}", avg * 1.6 + 40.0));
            m
        })
        .collect();
    records.extend(marginal);
    for chunk in records.chunks(10_000) {
        let r = client
            .post(format!("{}/v1/ingest/signals", served.base))
            .bearer_auth(&collector)
            .json(&json!({ "records": chunk }))
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("signals: {}", r.text().await?);
        }
    }
    // Budgets have no API yet (issue 6); they are rows the admission state loads.
    for budget in [
        "INSERT INTO budgets (key, tenant_id, limit_kwh, hard)
         SELECT 'acme-energy', id, 500000, true FROM tenants WHERE key = 'acme-research'",
        "INSERT INTO budgets (key, tenant_id, limit_cost, currency)
         SELECT 'nimbus-eur', id, 90000, 'EUR' FROM tenants WHERE key = 'nimbus-ai'",
        "INSERT INTO budgets (key, tenant_id, limit_carbon_kg, hard)
         SELECT 'helix-carbon', id, 40000, true FROM tenants WHERE key = 'helix-bio'",
    ] {
        sqlx::query(budget).execute(&served.pool).await?;
    }
    Ok(())
}

/// What schedulers ask: flexible training with a day's slack, rigid inference, short batch
/// pinned to a site, a flexible job under a carbon budget.
fn questions() -> Vec<Value> {
    let now = Utc::now();
    vec![
        json!({"tenant": "acme-research", "job_name": "pretrain-34b", "gpus": 8,
               "gpu_model": "NVIDIA H100 80GB HBM3", "model": "acme-llm-34b", "kind": "training",
               "duration_s": 4 * 3600, "deadline": now + Duration::hours(24)}),
        json!({"tenant": "nimbus-ai", "job_name": "serve-mistral", "gpus": 2,
               "model": "mistral-7b", "kind": "inference", "duration_s": 3600}),
        json!({"tenant": "lumen-search", "job_name": "reindex", "gpus": 1,
               "power_per_gpu_w": 400, "duration_s": 600, "sites": ["ore1"]}),
        json!({"tenant": "helix-bio", "job_name": "fold-batch", "gpus": 4, "kind": "batch",
               "duration_s": 2 * 3600, "deadline": now + Duration::hours(8)}),
    ]
}

/// The refresh loop loads before serving, but budgets inserted by SQL arrive on the next
/// slow reload: wait until the budgets show.
async fn wait_ready(served: &Served, token: &str, q: &Value) -> anyhow::Result<()> {
    for _ in 0..400 {
        let a = ask(served, token, q, true).await?;
        if a["budgets"].as_array().is_some_and(|b| !b.is_empty()) {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    bail!("admission never showed the seeded budgets")
}

async fn ask(served: &Served, token: &str, q: &Value, dry_run: bool) -> anyhow::Result<Value> {
    let mut q = q.clone();
    q["dry_run"] = json!(dry_run);
    let r = reqwest::Client::new()
        .post(format!("{}/v1/admission", served.base))
        .bearer_auth(token)
        .json(&q)
        .send()
        .await?;
    if !r.status().is_success() {
        bail!("admission refused {q}: {}", r.text().await?);
    }
    Ok(r.json().await?)
}

async fn summary(served: &Served, token: &str, q: &Value) -> anyhow::Result<String> {
    let a = ask(served, token, q, true).await?;
    Ok(format!(
        "  {:<14} → {} at {} on {}: {}",
        q["job_name"].as_str().unwrap_or_default(),
        a["decision"],
        a["start_at"],
        a["site"],
        a["reasons"]
    ))
}

/// A trivial axum handler on the same runtime: reads the body, answers a constant JSON.
async fn baseline_server() -> anyhow::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/v1/admission", listener.local_addr()?);
    let app = axum::Router::new().route(
        "/v1/admission",
        post(|_body: axum::body::Bytes| async { axum::Json(json!({"decision": "admit"})) }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

/// A wrk script cycling through the questions, as a scheduler with its bearer token.
fn lua(token: &str, questions: &[Value], dry_run: bool) -> String {
    let bodies: Vec<String> = questions
        .iter()
        .map(|q| {
            let mut q = q.clone();
            q["dry_run"] = json!(dry_run);
            format!("  [==[{q}]==],")
        })
        .collect();
    format!(
        r#"wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer {token}"
local bodies = {{
{}
}}
local i = 0
request = function()
  i = i % #bodies + 1
  return wrk.format(nil, nil, nil, bodies[i])
end
"#,
        bodies.join("\n")
    )
}

struct Run {
    requests: u64,
    rate: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// This process's CPU time (both servers, the admission state's refresh and writer)
    /// per answered request. On a machine others are using, the rate follows the share of
    /// the cores the bench gets; the CPU a request costs does not.
    cpu_us: f64,
}

/// User and system CPU seconds of this process, all threads (`/proc/self/stat`, Linux).
fn cpu_seconds() -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // Fields after the command name (which may hold spaces) start at the state, field 3;
    // utime and stime are fields 14 and 15, in USER_HZ ticks (100 a second on Linux).
    let rest = stat.rsplit_once(") ").context("/proc/self/stat")?.1;
    let ticks = |i: usize| -> anyhow::Result<f64> {
        Ok(rest
            .split_whitespace()
            .nth(i)
            .context("/proc/self/stat is short")?
            .parse::<f64>()?)
    };
    Ok((ticks(11)? + ticks(12)?) / 100.0)
}

/// One wrk run (one thread: the machine has two cores and the server needs them).
fn wrk(url: &str, script: &str, connections: u32, seconds: u32) -> anyhow::Result<Run> {
    let cpu_before = cpu_seconds()?;
    let out = Command::new("wrk")
        .args(["-t1", "--latency", "-s", script])
        .arg(format!("-c{connections}"))
        .arg(format!("-d{seconds}s"))
        .arg(url)
        .output()
        .context("running wrk")?;
    let cpu = cpu_seconds()? - cpu_before;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || text.contains("Non-2xx") || text.contains("Socket errors") {
        bail!("wrk against {url} saw errors:\n{text}");
    }
    let field = |prefix: &str| -> Option<&str> {
        text.lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(prefix))
            .map(str::trim)
    };
    let ms = |s: &str| -> Option<f64> {
        let (n, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic())?);
        let n: f64 = n.parse().ok()?;
        Some(match unit {
            "us" => n / 1000.0,
            "ms" => n,
            "s" => n * 1000.0,
            _ => return None,
        })
    };
    let parsed = (|| {
        let requests = text
            .lines()
            .find_map(|l| l.trim().split_once(" requests in "))?
            .0
            .parse()
            .ok()?;
        Some(Run {
            requests,
            rate: field("Requests/sec:")?.parse().ok()?,
            p50_ms: ms(field("50%")?)?,
            p99_ms: ms(field("99%")?)?,
            cpu_us: 0.0,
        })
    })();
    let mut run = parsed.with_context(|| format!("could not read wrk's output:\n{text}"))?;
    run.cpu_us = cpu * 1e6 / run.requests.max(1) as f64;
    Ok(run)
}
