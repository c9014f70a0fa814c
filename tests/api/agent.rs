//! The agent end to end: `wattledger-agent` reads fake DCGM and vLLM endpoints and pushes to
//! the real `wattledger` server, both as child processes; the server is SIGKILLed and
//! restarted mid-stream, then the agent is. The ledger must hold every joule and every token
//! the sources reported, once.
//!
//! Both binaries must be built (`tests/run` builds them first): the test finds them beside
//! its own executable.

use axum::extract::State;
use axum::routing::get;
use serde_json::json;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wattledger::auth::Role;
use wattledger_tests::{fresh_db, SECRET};

#[derive(Default)]
struct Fake {
    energy_mj: i64,
    prompt: i64,
    generated: i64,
    frozen: bool,
    served_energy: Vec<i64>,
    served_prompt: Vec<i64>,
}

type Shared = Arc<Mutex<Fake>>;

async fn dcgm(State(f): State<Shared>) -> String {
    let mut f = f.lock().unwrap();
    if !f.frozen {
        f.energy_mj += 50_000;
    }
    let e = f.energy_mj;
    f.served_energy.push(e);
    let labels = r#"gpu="0",UUID="GPU-e2e-0",Hostname="n1",modelName="NVIDIA H100 80GB HBM3",namespace="serving",pod="llm-0",container="vllm""#;
    format!(
        "# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).\n\
         # TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n\
         DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{labels}}} {e}\n\
         DCGM_FI_DEV_POWER_USAGE{{{labels}}} 250.0\n"
    )
}

async fn vllm(State(f): State<Shared>) -> String {
    let mut f = f.lock().unwrap();
    if !f.frozen {
        f.prompt += 10;
        f.generated += 40;
    }
    let (p, g) = (f.prompt, f.generated);
    f.served_prompt.push(p);
    format!(
        "# TYPE vllm:prompt_tokens_total counter\n\
         vllm:prompt_tokens_total{{model_name=\"llama\"}} {p:e}\n\
         vllm:generation_tokens_total{{model_name=\"llama\"}} {g}.0\n"
    )
}

pub(crate) fn binary(name: &str) -> PathBuf {
    // target/debug/deps/api-<hash> → target/debug/<name>
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().unwrap().parent().unwrap().join(name);
    assert!(
        path.exists(),
        "{} is not built: run `cargo build -p wattledger-cli -p wattledger-agent` first (tests/run does)",
        path.display()
    );
    path
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(crate) use wattledger_tests::Killed;

fn server(db_url: &str, port: u16, log: &std::path::Path) -> Killed {
    server_with(db_url, port, log, &[("WATTLEDGER_WORKER", "false")])
}

/// The server binary on `db_url` at a loopback port, with settings from `env`.
pub(crate) fn server_with(
    db_url: &str,
    port: u16,
    log: &std::path::Path,
    env: &[(&str, &str)],
) -> Killed {
    let log = std::fs::File::create(log).unwrap();
    Killed::spawn(
        Command::new(binary("wattledger"))
            .args([
                "--database-url",
                db_url,
                "--listen",
                &format!("127.0.0.1:{port}"),
            ])
            .args(["--jwt-secret", SECRET, "serve"])
            .envs(env.iter().copied())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log),
    )
}

fn agent(config: &std::path::Path, log: &std::path::Path) -> Killed {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    Killed::spawn(
        Command::new(binary("wattledger-agent"))
            .arg("--config")
            .arg(config)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log),
    )
}

pub(crate) async fn wait_healthy(base: &str) {
    for _ in 0..200 {
        if let Ok(r) = reqwest::get(format!("{base}/health")).await {
            if r.status().is_success() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the server at {base} did not come up");
}

#[tokio::test]
async fn the_agent_loses_and_duplicates_nothing_across_server_and_agent_kills() {
    end_to_end(Send::Raw).await;
}

/// The default: one record per GPU per step (1 s here, against readings every 200 ms), the
/// counter interpolated at each boundary, the step's mean and peak power beside it.
#[tokio::test]
async fn step_records_carry_every_joule_across_server_and_agent_kills() {
    end_to_end(Send::Steps).await;
}

#[derive(Clone, Copy, PartialEq)]
enum Send {
    Raw,
    Steps,
}

async fn end_to_end(send: Send) {
    let (pool, db_url) = fresh_db().await;
    let dir = std::env::temp_dir().join(format!(
        "wl-agent-e2e-{}-{}",
        std::process::id(),
        send as u8
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // The fake node: a DCGM exporter and a vLLM server whose counters rise on every scrape.
    let fake: Shared = Arc::default();
    let app = axum::Router::new()
        .route("/dcgm", get(dcgm))
        .route("/vllm", get(vllm))
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let fake_base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let keys = wattledger::auth::Keys::new(SECRET.as_bytes()).unwrap();
    let mut srv = server(&db_url, port, &dir.join("server-1.log"));
    wait_healthy(&base).await;
    let operator = keys.mint("e2e", Role::Operator, None, 600).unwrap();
    let http = reqwest::Client::new();
    for (what, records) in [
        (
            "tenants",
            json!([{"key": "platform", "name": "Platform"}, {"key": "acme", "name": "Acme"}]),
        ),
        (
            "sites",
            json!([{"key": "s1", "name": "Site 1", "grid_region": "DE", "currency": "EUR",
            "power_envelope_w": 100000, "static_pue": "1", "idle_policy": "platform",
            "platform_tenant": "platform"}]),
        ),
        (
            "meters",
            json!([{"key": "n1", "site": "s1", "kind": "node"},
            {"key": "n1-gpu0", "site": "s1", "kind": "gpu", "parent": "n1", "gpu_uuid": "GPU-e2e-0",
             "device_model": "NVIDIA H100 80GB HBM3"}]),
        ),
    ] {
        let r = http
            .post(format!("{base}/v1/ingest/{what}"))
            .bearer_auth(&operator)
            .json(&json!({ "records": records }))
            .send()
            .await
            .unwrap();
        assert!(
            r.status().is_success(),
            "{what}: {}",
            r.text().await.unwrap()
        );
    }
    // The deployment the vLLM endpoint serves, holding the GPU since an hour ago.
    let scheduler = keys.mint("e2e", Role::Scheduler, None, 600).unwrap();
    let since = (chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    let r = http
        .post(format!("{base}/v1/ingest/jobs"))
        .bearer_auth(&scheduler)
        .json(
            &json!({"records": [{"key": "k8s:serving/llm-0", "tenant": "acme", "kind": "inference",
            "start_at": since, "allocations": [{"meter": "n1-gpu0"}]}]}),
        )
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "job: {}", r.text().await.unwrap());

    let token = keys.mint("agent", Role::Collector, None, 600).unwrap();
    let config = dir.join("agent.toml");
    let (step, raw) = match send {
        Send::Raw => (60, true),
        Send::Steps => (1, false),
    };
    let started = std::time::Instant::now();
    std::fs::write(
        &config,
        format!(
            r#"[agent]
server = "{base}"
token = "{token}"
site = "s1"
node = "n1"
spool_dir = "{spool}"
step_s = {step}

[[meters]]
key = "n1"
kind = "node"

[[dcgm]]
url = "{fake_base}/dcgm"
interval_s = 0.2
raw = {raw}

[[tokens]]
url = "{fake_base}/vllm"
job = "k8s:serving/llm-0"
interval_s = 0.2
"#,
            spool = dir.join("spool").display()
        ),
    )
    .unwrap();
    let agent_log = dir.join("agent.log");
    let mut agt = agent(&config, &agent_log);
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The server dies mid-stream; the agent spools; the server comes back.
    srv.0.kill().unwrap();
    srv.0.wait().unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    srv = server(&db_url, port, &dir.join("server-2.log"));
    wait_healthy(&base).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // The agent dies mid-stream (SIGKILL) and starts again on the same spool.
    agt.0.kill().unwrap();
    agt.0.wait().unwrap();
    agt = agent(&config, &agent_log);
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Stop the counters and wait until the server holds the last values.
    let (last_energy, first_prompt, last_prompt) = {
        let mut f = fake.lock().unwrap();
        f.frozen = true;
        (f.energy_mj, f.served_prompt[0], f.prompt)
    };
    let mut settled = false;
    for _ in 0..300 {
        let held: Option<i64> = sqlx::query_scalar(
            "SELECT max(counter_mj) FROM samples s JOIN meters m ON m.id = s.meter_id WHERE m.key = 'n1-gpu0'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        let tokens: Option<i64> =
            sqlx::query_scalar("SELECT sum(prompt_tokens)::bigint FROM token_records")
                .fetch_one(&pool)
                .await
                .unwrap();
        if held == Some(last_energy) && tokens == Some(last_prompt - first_prompt) {
            settled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(agt);
    drop(srv);
    let log = std::fs::read_to_string(&agent_log).unwrap_or_default();
    assert!(
        settled,
        "the server never caught up with the sources; agent log:\n{log}"
    );
    assert!(
        log.contains("push failed"),
        "the server outage was seen by the agent:\n{log}"
    );

    type Row = (chrono::DateTime<chrono::Utc>, i64, Option<i64>, Option<i64>);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT ts, counter_mj, power_mw, peak_mw FROM samples s JOIN meters m ON m.id = s.meter_id
          WHERE m.key = 'n1-gpu0' ORDER BY ts",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let held: Vec<i64> = rows.iter().map(|r| r.1).collect();
    let served: std::collections::BTreeSet<i64> =
        fake.lock().unwrap().served_energy.iter().copied().collect();
    if send == Send::Raw {
        // Samples: every value read and spooled arrived once. The one read the SIGKILL may
        // have caught between the scrape and the fsync is the only one allowed missing; its
        // energy is still counted, since the next counter reading covers it.
        // One row per reading, in order; only scrapes after the freeze repeat a value.
        assert!(held
            .windows(2)
            .all(|w| w[0] < w[1] || (w[0] == last_energy && w[1] == last_energy)));
        assert!(held.iter().all(|v| served.contains(v)));
        let missing = served.iter().filter(|v| !held.contains(v)).count();
        assert!(missing <= 1, "{missing} readings lost of {}", served.len());
        assert!(held.len() > 20, "only {} readings arrived", held.len());
        eprintln!(
            "agent e2e: {} readings served, {} held, {missing} lost to the SIGKILL; {} prompt tokens",
            served.len(),
            held.len(),
            last_prompt - first_prompt
        );
    } else {
        // Step records: on whole seconds, at most one a second (five readings each), the
        // counter never going back, ending on the frozen counter; the mean and the peak of a
        // step's readings (250 W) beside every record after the first of a run.
        let seconds = started.elapsed().as_secs() as usize;
        assert!(rows.iter().all(|r| r.0.timestamp_subsec_millis() == 0));
        assert!(rows.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
        assert!(
            rows.len() > 5 && rows.len() <= seconds + 1,
            "{} records in {seconds} s from {} readings",
            rows.len(),
            served.len()
        );
        assert_eq!(held.last(), Some(&last_energy));
        let with_peak = rows.iter().filter(|r| r.3 == Some(250_000)).count();
        assert!(rows.iter().all(|r| r.3.is_none() || r.3 == Some(250_000)));
        assert!(rows.iter().all(|r| r.2 == r.3));
        assert!(with_peak + 3 >= rows.len(), "{with_peak} of {}", rows.len());
        eprintln!(
            "agent e2e (steps): {} readings served, {} step records held; {} prompt tokens",
            served.len(),
            held.len(),
            last_prompt - first_prompt
        );
    }

    // Tokens: no interval lost or counted twice across the agent's restart.
    let token_rows: Vec<(chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>)> =
        sqlx::query_as("SELECT start_at, end_at FROM token_records ORDER BY start_at")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert!(
        token_rows.windows(2).all(|w| w[0].1 == w[1].0),
        "token intervals tile the run"
    );

    // The ledger: every joule the GPU counted, all of it the deployment's tenant's, with all
    // the tokens.
    wattledger::worker::drain(&pool, |_| {}).await.unwrap();
    let (total, acme_gpu, acme_prompt): (i64, i64, i64) = sqlx::query_as(
        "SELECT sum(l.total_mj)::bigint,
                (sum(l.gpu_mj) FILTER (WHERE t.key = 'acme'))::bigint,
                (sum(l.prompt_tokens) FILTER (WHERE t.key = 'acme'))::bigint
           FROM ledger l JOIN tenants t ON t.id = l.tenant_id",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        total,
        held.last().unwrap() - held[0],
        "Σ ledger = the GPU's counted energy"
    );
    assert_eq!(
        acme_gpu, total,
        "static PUE 1, no node reading: all of it is acme's GPU energy"
    );
    assert_eq!(acme_prompt, last_prompt - first_prompt);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The agent's `[[grid]]` source against a local stand-in for Electricity Maps serving the
/// stored v3 history payload (and refusing requests without the `auth-token` header): the
/// 24 hourly points reach the server's signal store, once however often they are fetched.
#[tokio::test]
async fn the_agent_fetches_grid_signals_into_the_signal_store() {
    let (pool, db_url) = fresh_db().await;
    let dir = std::env::temp_dir().join(format!("wl-grid-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let history = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/fixtures/grid/electricitymaps-v3-carbon-intensity-history.json"),
    )
    .expect("shared/fixtures beside the checkout");
    let fetches = Arc::new(Mutex::new(0u32));
    let counter = fetches.clone();
    let app = axum::Router::new().route(
        "/v3/carbon-intensity/history",
        get(move |headers: axum::http::HeaderMap| {
            let history = history.clone();
            let counter = counter.clone();
            async move {
                if headers.get("auth-token").and_then(|v| v.to_str().ok()) != Some("em-key") {
                    return (axum::http::StatusCode::UNAUTHORIZED, String::new());
                }
                *counter.lock().unwrap() += 1;
                (axum::http::StatusCode::OK, history)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let em = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let _server = server(&db_url, port, &dir.join("server.log"));
    wait_healthy(&base).await;
    let keys = wattledger::auth::Keys::new(SECRET.as_bytes()).unwrap();
    let token = keys.mint("agent", Role::Collector, None, 3600).unwrap();
    std::fs::write(dir.join("em.token"), "em-key\n").unwrap();
    let config = dir.join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "[agent]\nserver = \"{base}\"\ntoken = \"{token}\"\nsite = \"s1\"\nspool_dir = \"{}\"\n\n\
             [[grid]]\nprovider = \"electricitymaps\"\nurl = \"{em}/v3/carbon-intensity/history?zone=DE\"\n\
             token_file = \"{}\"\ninterval_s = 0.5\n",
            dir.join("spool").display(),
            dir.join("em.token").display()
        ),
    )
    .unwrap();
    let _agent = agent(&config, &dir.join("agent.log"));
    let mut stored = 0i64;
    for _ in 0..100 {
        stored = sqlx::query_scalar("SELECT count(*) FROM signal_points WHERE region = 'DE'")
            .fetch_one(&pool)
            .await
            .unwrap();
        if stored == 24 && *fetches.lock().unwrap() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(*fetches.lock().unwrap() >= 3, "fetched repeatedly");
    assert_eq!(
        stored,
        24,
        "24 hourly points, stored once: {}",
        std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
