//! Faults a datacenter has, driven against the real binaries and a real PostgreSQL: the
//! server and the agent as child processes, a fake DCGM exporter whose counter rises on
//! every scrape, and the fault itself made by a real tool. After each fault every reading the
//! source served must be in PostgreSQL once, at the time it was read, or in the dead-letter
//! file with its reason.
//!
//! Skewed clocks: the agent runs under libfaketime (`apt-get install faketime`), its wall
//! clock ten minutes fast, ten minutes slow, or stepping ten minutes mid-run; its monotonic
//! clock is left true, as a machine's is.

use crate::agent::{binary, free_port, server_with, wait_healthy, Killed};
use axum::extract::State;
use axum::routing::get;
use chrono::{DateTime, Duration as Span, Utc};
use serde_json::json;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wattledger::auth::Role;
use wattledger_tests::{fresh_db, TestApp};

/// libfaketime's preload library, where Debian's `faketime` package puts it.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The fake exporter: the counter it served at each scrape, and when (by the true clock).
#[derive(Default)]
struct Served {
    counter_mj: i64,
    frozen: bool,
    at: Vec<(DateTime<Utc>, i64)>,
}

type Shared = Arc<Mutex<Served>>;

async fn dcgm(State(s): State<Shared>) -> String {
    let mut s = s.lock().unwrap();
    if !s.frozen {
        s.counter_mj += 50_000;
    }
    let e = s.counter_mj;
    s.at.push((Utc::now(), e));
    let labels = r#"gpu="0",UUID="GPU-skew-0",Hostname="n1",modelName="NVIDIA H100 80GB HBM3""#;
    format!("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{labels}}} {e}\n")
}

/// How the agent's wall clock is wrong.
#[derive(Debug, Clone, Copy)]
enum Skew {
    Fast,
    Slow,
    /// True at first, then ten minutes fast from `JUMP_AFTER` on.
    Jumps,
    /// Ten minutes fast, the agent restarted while the server is away, so that its first
    /// readings carry the offset its last run kept.
    FastRestartedAlone,
}

const JUMP_AFTER: Duration = Duration::from_secs(2);

#[tokio::test]
async fn an_agent_ten_minutes_fast_stamps_its_readings_with_the_servers_time() {
    skewed(Skew::Fast).await;
}

#[tokio::test]
async fn an_agent_ten_minutes_slow_stamps_its_readings_with_the_servers_time() {
    skewed(Skew::Slow).await;
}

#[tokio::test]
async fn an_agent_whose_clock_steps_mid_run_keeps_the_servers_time() {
    skewed(Skew::Jumps).await;
}

#[tokio::test]
async fn an_agent_restarted_while_the_server_is_away_corrects_its_clock_by_the_last_offset() {
    skewed(Skew::FastRestartedAlone).await;
}

async fn skewed(skew: Skew) {
    assert!(
        Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: apt-get install faketime (tests/run does)"
    );
    let (pool, db_url) = fresh_db().await;
    let dir = std::env::temp_dir().join(format!("wl-skew-{}-{skew:?}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    let served: Shared = Arc::default();
    let app = axum::Router::new()
        .route("/dcgm", get(dcgm))
        .with_state(served.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let fake = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let server = |n: u32| {
        server_with(
            &db_url,
            port,
            &dir.join(format!("server-{n}.log")),
            &[("WATTLEDGER_WORKER", "false")],
        )
    };
    let mut srv = server(1);
    wait_healthy(&base).await;
    let api = TestApp::attach(&base, pool.clone(), &db_url);
    for (what, records) in [
        ("tenants", json!([{"key": "platform", "name": "Platform"}])),
        (
            "sites",
            json!([{"key": "s1", "name": "Site 1", "grid_region": "DE", "currency": "EUR",
            "power_envelope_w": 100000, "static_pue": "1", "idle_policy": "platform",
            "platform_tenant": "platform"}]),
        ),
        (
            "meters",
            json!([{"key": "n1", "site": "s1", "kind": "node"},
            {"key": "n1-gpu0", "site": "s1", "kind": "gpu", "parent": "n1",
             "gpu_uuid": "GPU-skew-0"}]),
        ),
    ] {
        let (status, body) = api.ingest(&api.token(Role::Operator), what, records).await;
        assert_eq!(status, 200, "{what}: {body}");
    }

    let token = api.token(Role::Collector);
    let metrics_port = free_port();
    let config = dir.join("agent.toml");
    std::fs::write(
        &config,
        format!(
            r#"[agent]
server = "{base}"
token = "{token}"
site = "s1"
node = "n1"
spool_dir = "{spool}"
metrics_listen = "127.0.0.1:{metrics_port}"

[[dcgm]]
url = "{fake}/dcgm"
interval_s = 0.2
raw = true
"#,
            spool = dir.join("spool").display()
        ),
    )
    .unwrap();
    // libfaketime reads the offset from this file on every call, so the test can step it.
    let offset_file = dir.join("faketime");
    let offset = |o: &str| std::fs::write(&offset_file, o).unwrap();
    offset(match skew {
        Skew::Fast | Skew::FastRestartedAlone => "+10m",
        Skew::Slow => "-10m",
        Skew::Jumps => "+0",
    });
    let agent_log = dir.join("agent.log");
    let started = Utc::now();
    let mut agent = faked_agent(&config, &agent_log, &offset_file);
    match skew {
        Skew::Jumps => {
            tokio::time::sleep(JUMP_AFTER).await;
            offset("+10m");
        }
        Skew::FastRestartedAlone => {
            tokio::time::sleep(Duration::from_secs(2)).await;
            drop(agent);
            drop(srv);
            agent = faked_agent(&config, &agent_log, &offset_file);
            tokio::time::sleep(Duration::from_secs(4)).await;
            srv = server(2);
            wait_healthy(&base).await;
        }
        _ => {}
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The agent's clock as it says it, once an answer has set it: after the server's outage
    // the agent's next push waits out its backoff (jittered), so this may take some seconds.
    let mut metrics = String::new();
    for _ in 0..300 {
        metrics = reqwest::get(format!("http://127.0.0.1:{metrics_port}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if metrics.contains("wattledger_agent_clock_offset_seconds ") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Freeze the counter and wait for the server to hold its last value.
    let last = {
        let mut s = served.lock().unwrap();
        s.frozen = true;
        s.counter_mj
    };
    let mut held = None;
    for _ in 0..100 {
        held = sqlx::query_scalar("SELECT max(counter_mj) FROM samples")
            .fetch_one(&pool)
            .await
            .unwrap();
        if held == Some(last) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(agent);
    drop(srv);
    let ended = Utc::now();
    let log = std::fs::read_to_string(&agent_log).unwrap_or_default();
    assert_eq!(
        held,
        Some(last),
        "the server never held the last reading:\n{log}"
    );

    // Every reading is stored once, at its time by the true clock: within the scrape's own
    // instant and a moment after (the agent reads, then stamps); none an hour's worth off.
    let rows: Vec<(DateTime<Utc>, i64)> =
        sqlx::query_as("SELECT ts, counter_mj FROM samples ORDER BY ts")
            .fetch_all(&pool)
            .await
            .unwrap();
    let served = served.lock().unwrap().at.clone();
    assert!(rows.len() > 8, "{} readings stored:\n{log}", rows.len());
    // One row per reading, in the order read (only scrapes after the freeze repeat a value).
    assert!(
        rows.windows(2)
            .all(|w| w[0].1 < w[1].1 || (w[0].1 == last && w[1].1 == last)),
        "{skew:?}: {rows:?}"
    );
    // Each stamped when it was read by the true clock: no earlier than the scrape that served
    // it (less the clocks' few ms of disagreement) and within a second after.
    for (ts, counter) in &rows {
        let read = served.iter().any(|(at, e)| {
            let late = *ts - *at;
            e == counter && late >= Span::milliseconds(-50) && late <= Span::seconds(1)
        });
        assert!(
            read,
            "{skew:?}: the reading of {counter} mJ is stamped {ts}, not when it was read\n{log}"
        );
        assert!(*ts >= started - Span::seconds(1) && *ts <= ended);
    }
    // Nothing refused, and every value served is stored.
    let dead =
        std::fs::read_to_string(dir.join("spool").join("dead-letter.jsonl")).unwrap_or_default();
    assert!(dead.is_empty(), "{skew:?}: dead-lettered:\n{dead}");
    let stored: std::collections::BTreeSet<i64> = rows.iter().map(|r| r.1).collect();
    let values: std::collections::BTreeSet<i64> = served.iter().map(|r| r.1).collect();
    assert_eq!(stored, values, "{skew:?}: a reading is missing");

    // What the agent says of its clock: ten minutes ahead of the server's (or behind), and
    // in step with it.
    let gauge = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} not in\n{metrics}"))
            .parse()
            .unwrap()
    };
    let behind = gauge("wattledger_agent_clock_offset_seconds");
    let expected = match skew {
        Skew::Fast | Skew::Jumps | Skew::FastRestartedAlone => -600.0,
        Skew::Slow => 600.0,
    };
    assert!(
        (behind - expected).abs() < 2.0,
        "{skew:?}: {behind} s\n{metrics}"
    );
    assert_eq!(gauge("wattledger_agent_clock_synced"), 1.0);
    assert!(log.contains("clock is off"), "{log}");
    eprintln!(
        "clock skew {skew:?}: {} readings served, {} stored, 0 dead-lettered; the agent's clock {behind} s behind the server's",
        served.len(),
        rows.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The agent with libfaketime preloaded: its wall clock offset by what `offset_file` says
/// (read again on every call), its monotonic clock true.
fn faked_agent(config: &Path, log: &Path, offset_file: &Path) -> Killed {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    Killed::spawn(
        Command::new(binary("wattledger-agent"))
            .arg("--config")
            .arg(config)
            .env("LD_PRELOAD", LIBFAKETIME)
            .env("FAKETIME_TIMESTAMP_FILE", offset_file)
            .env("FAKETIME_NO_CACHE", "1")
            .env("DONT_FAKE_MONOTONIC", "1")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log),
    )
}

/// Overload: a server that takes two ingest batches at once, sent twenty at once. Those over
/// the bound are answered 429 with `Retry-After` at once (their bodies unread, nothing
/// written); sent again, every batch lands, each record once.
#[tokio::test]
async fn ingest_over_its_bound_is_answered_429_with_retry_after_and_lands_when_sent_again() {
    let app = TestApp::start_with(|c| c.max_ingest_in_flight = 2).await;
    let token = app.token(Role::Admin);
    let batch = |b: usize| -> String {
        let records: Vec<_> = (0..1_000)
            .map(|i| json!({"key": format!("t-{b}-{i}"), "name": format!("Tenant {b}/{i}")}))
            .collect();
        json!({ "records": records }).to_string()
    };
    let send = |b: usize| {
        let api = &app;
        let (token, body) = (token.clone(), batch(b));
        async move {
            let (status, headers, body) = api
                .answer(reqwest::Method::POST, &token, "/v1/ingest/tenants", body)
                .await;
            let retry_after = headers
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_owned());
            (b, status, retry_after, body)
        }
    };
    let mut pending: Vec<usize> = (0..20).collect();
    let (mut refused, mut rounds) = (0, 0);
    while !pending.is_empty() {
        rounds += 1;
        assert!(rounds <= 50, "{} batches never landed", pending.len());
        let answers = futures::future::join_all(pending.iter().map(|&b| send(b))).await;
        pending.clear();
        for (b, status, retry_after, body) in answers {
            match status {
                200 => assert_eq!(body["received"], 1_000, "{body}"),
                429 => {
                    assert_eq!(retry_after.as_deref(), Some("2"));
                    assert_eq!(body["error"]["code"], "overloaded", "{body}");
                    refused += 1;
                    pending.push(b);
                }
                other => panic!("batch {b}: {other} {body}"),
            }
        }
        if !pending.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    assert!(
        refused > 0,
        "twenty batches at once and none over a bound of two"
    );
    let tenants: i64 = sqlx::query_scalar("SELECT count(*) FROM tenants WHERE key LIKE 't-%'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(tenants, 20 * 1_000);
    eprintln!("overload: 20 batches at a bound of 2: {refused} answers 429, all landed in {rounds} rounds");
}
