//! `/metrics` against the real tools: `promtool check metrics` lints the exposition, and a
//! real Prometheus (Debian `prometheus`; `tests/run` installs it) scrapes the server with a
//! bearer token and answers a query for a series through its HTTP API.

use crate::scenario;
use serde_json::json;
use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use wattledger::auth::Role;
use wattledger_tests::peers;
use wattledger_tests::TestApp;

fn prometheus_installed() -> bool {
    peers::ready(
        peers::installed("prometheus") && peers::installed("promtool"),
        "Prometheus and promtool are not installed",
        "apt-get install prometheus",
    )
}

fn tool(name: &str) -> String {
    for dir in ["/usr/bin", "/usr/local/bin", "/bin"] {
        let p = format!("{dir}/{name}");
        if std::path::Path::new(&p).exists() {
            return p;
        }
    }
    panic!("{name} is not installed: `apt-get install prometheus` (tests/run does)")
}

async fn scenario_with_signals(app: &TestApp) {
    scenario::push(app, &scenario::batches()).await;
    let carbon = json!({"region": "DE", "signal": "carbon", "basis": "average", "status": "actual",
                        "source": "test", "start_at": scenario::HOUR, "end_at": scenario::NEXT_HOUR,
                        "value": "400"});
    let (status, body) = app
        .ingest(&app.token(Role::Collector), "signals", json!([carbon]))
        .await;
    assert_eq!(status, 200, "{body}");
    app.attribute().await;
}

#[tokio::test]
async fn metrics_pass_promtool_and_need_an_operator() {
    if !prometheus_installed() {
        return;
    }
    let app = TestApp::start().await;
    scenario_with_signals(&app).await;
    let get = |token: Option<String>| {
        let mut req = app.http.get(format!("{}/metrics", app.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
    };
    assert_eq!(get(None).await.unwrap().status(), 401);
    assert_eq!(
        get(Some(app.tenant_token("a"))).await.unwrap().status(),
        403
    );
    let resp = get(Some(app.token(Role::Operator))).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = resp.text().await.unwrap();
    assert!(
        text.contains("wattledger_site_pue_ratio{site=\"s1\"} 1.25\n"),
        "{text}"
    );
    assert!(text.contains("wattledger_site_carbon_intensity_grams_per_kwh{site=\"s1\"} 400\n"));
    assert!(text.contains("wattledger_site_tokens_per_kwh{site=\"s1\"} 1875\n"));
    // Power-bound figures of the hour: its node reads a flat 1.6 kW (× PUE 1.25 = 2 kW), so
    // its peak is its mean and it never swings (tests/api/power.rs has a load that does).
    for line in [
        "wattledger_site_peak_watts{site=\"s1\"} 2000\n",
        "wattledger_site_tokens_per_second_per_megawatt_peak{site=\"s1\"} 520.833\n",
        "wattledger_site_ramp_up_watts{site=\"s1\",window=\"15m\"} 0\n",
        "wattledger_site_peak_to_average_ratio{site=\"s1\"} 1\n",
        "wattledger_site_over_envelope_seconds{site=\"s1\"} 0\n",
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }

    promtool_check(&text).await;
}

/// `promtool check metrics` on an exposition, which must pass.
async fn promtool_check(text: &str) {
    let mut check = tokio::process::Command::new(tool("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .await
        .unwrap();
    let out = check.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

pub(crate) async fn scrape(app: &TestApp) -> String {
    let resp = app
        .http
        .get(format!("{}/metrics", app.base))
        .bearer_auth(app.token(Role::Operator))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.text().await.unwrap()
}

/// The value of the sample `series` (name and labels exactly as written) in `text`.
pub(crate) fn value(text: &str, series: &str) -> Option<String> {
    text.lines()
        .find_map(|l| Some(l.strip_prefix(series)?.strip_prefix(' ')?.to_owned()))
}

#[tokio::test]
async fn what_the_server_did_and_the_ledger_by_tenant_model_and_budget_have_known_answers() {
    if !prometheus_installed() {
        return;
    }
    let app = TestApp::start().await;
    scenario_with_signals(&app).await;
    // A tenant budget over a period holding the scenario's hour: a's 4.35e9 mJ is
    // 1.208333… kWh of its 2.5.
    let (status, body) = app
        .put(
            &app.token(Role::Finance),
            "/v1/budgets/a-november",
            json!({"tenant": "a", "period": "custom", "starts_at": "2026-11-01T00:00:00Z",
                   "ends_at": "2026-12-01T00:00:00Z", "limit_kwh": "2.5"}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    // Two samples of an unknown meter: a refused batch of 2. The tokens again: 2 duplicates.
    let bad = json!([{"meter": "nope", "ts": scenario::at(1), "counter_mj": 1},
                     {"meter": "nope", "ts": scenario::at(2), "counter_mj": 2}]);
    let (status, _) = app
        .ingest(&app.token(Role::Collector), "samples", bad)
        .await;
    assert_eq!(status, 422);
    let (status, _) = app
        .ingest(
            &app.token(Role::Collector),
            "tokens",
            scenario::batches().tokens,
        )
        .await;
    assert_eq!(status, 200);
    let (status, _) = app.get(None, "/v1/no-such-thing").await;
    assert_eq!(status, 404);
    // Decisions answered (the hot state may not have loaded the scenario yet: a 422 then).
    let mut decided: BTreeMap<String, u64> = BTreeMap::new();
    for _ in 0..3 {
        let (status, answer) = crate::admission::ask(
            &app,
            json!({"tenant": "a", "gpus": 1, "duration_s": 60, "dry_run": true}),
        )
        .await;
        if status == 200 {
            *decided
                .entry(answer["decision"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
    }

    let text = scrape(&app).await;
    let known = [
        // The scenario's ledger of its hour (tests/api/scenario.rs): tenants a, b and the
        // platform's idle; the shared endpoint (m-endpoint on g2, 400 W, with its node and
        // facility shares 580 W) served 3,750 tokens: 2.088e9 mJ / 3,750 = 556.8 J a token.
        ("wattledger_tenant_energy_joules{tenant=\"a\",site=\"s1\"}", "4350000"),
        ("wattledger_tenant_energy_joules{tenant=\"b\",site=\"s1\"}", "2175000"),
        ("wattledger_tenant_energy_joules{tenant=\"platform\",site=\"s1\"}", "675000"),
        // 0.1875 kWh at 400 g/kWh.
        ("wattledger_tenant_carbon_grams{tenant=\"platform\",site=\"s1\"}", "75"),
        ("wattledger_model_energy_joules{model=\"m-endpoint\",site=\"s1\"}", "2088000"),
        ("wattledger_model_tokens{model=\"m-endpoint\",site=\"s1\"}", "3750"),
        ("wattledger_model_joules_per_token{model=\"m-endpoint\",site=\"s1\"}", "556.8"),
        ("wattledger_site_envelope_watts{site=\"s1\"}", "100000"),
        ("wattledger_budget_used_ratio{tenant=\"a\",budget=\"a-november\",metric=\"kwh\"}", "0.483333"),
        ("wattledger_budget_limit{tenant=\"a\",budget=\"a-november\",metric=\"kwh\"}", "2.5"),
        ("wattledger_webhook_outbox_pending", "0"),
        ("wattledger_webhook_outbox_oldest_pending_age_seconds", "0.000"),
        ("wattledger_webhook_dead_lettered_messages", "0"),
        // What was sent: 244 samples (61 minutes x 4 meters), 3 jobs with 3 allocations, 2
        // token records then the same 2 again, 1 signal; 2 samples refused.
        ("wattledger_ingest_records_total{kind=\"samples\",outcome=\"written\"}", "244"),
        ("wattledger_ingest_records_total{kind=\"samples\",outcome=\"refused\"}", "2"),
        ("wattledger_ingest_records_total{kind=\"jobs\",outcome=\"written\"}", "3"),
        ("wattledger_ingest_records_total{kind=\"allocations\",outcome=\"written\"}", "3"),
        ("wattledger_ingest_records_total{kind=\"tokens\",outcome=\"written\"}", "2"),
        ("wattledger_ingest_records_total{kind=\"tokens\",outcome=\"duplicate\"}", "2"),
        ("wattledger_ingest_records_total{kind=\"signals\",outcome=\"written\"}", "1"),
        ("wattledger_ingest_records_total{kind=\"meters\",outcome=\"written\"}", "5"),
        ("wattledger_http_requests_total{route=\"/v1/ingest/samples\",status=\"200\"}", "1"),
        ("wattledger_http_requests_total{route=\"/v1/ingest/samples\",status=\"422\"}", "1"),
        ("wattledger_http_requests_total{route=\"/v1/ingest/tokens\",status=\"200\"}", "2"),
        ("wattledger_http_requests_total{route=\"unmatched\",status=\"404\"}", "1"),
        ("wattledger_http_request_duration_seconds_count{route=\"/v1/ingest/samples\"}", "2"),
        ("wattledger_http_request_duration_seconds_bucket{route=\"/v1/ingest/samples\",le=\"+Inf\"}", "2"),
    ];
    for (series, want) in known {
        assert_eq!(
            value(&text, series).as_deref(),
            Some(want),
            "{series} in {text}"
        );
    }
    assert!(
        !text.contains("no-such-thing"),
        "an unknown path is never a label"
    );
    let n = |series: &str| value(&text, series).map_or(0, |v| v.parse::<u64>().unwrap());
    for verdict in ["admit", "defer", "reject"] {
        assert_eq!(
            n(&format!(
                "wattledger_admission_decisions_total{{decision=\"{verdict}\"}}"
            )),
            decided.get(verdict).copied().unwrap_or(0),
            "{verdict} in {text}"
        );
    }
    assert_eq!(
        n("wattledger_admission_decision_duration_seconds_count"),
        decided.values().sum::<u64>()
    );
    promtool_check(&text).await;
}

#[tokio::test]
async fn a_real_prometheus_scrapes_the_server_and_answers_a_query() {
    if !prometheus_installed() {
        return;
    }
    let app = TestApp::start().await;
    scenario_with_signals(&app).await;
    let dir = std::env::temp_dir().join(format!("wl-prometheus-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let target = app.base.trim_start_matches("http://");
    let token = app
        .keys
        .mint("prometheus", Role::Operator, None, 3600)
        .unwrap();
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: wattledger\n    metrics_path: /metrics\n\
             \x20   authorization:\n      type: Bearer\n      credentials: {token}\n\
             \x20   static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut prometheus = tokio::process::Command::new(tool("prometheus"))
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let query = format!("http://127.0.0.1:{port}/api/v1/query?query=wattledger_site_pue_ratio");
    let deadline = Instant::now() + Duration::from_secs(60);
    let value = loop {
        if let Ok(r) = app.http.get(&query).send().await {
            if let Ok(body) = r.json::<serde_json::Value>().await {
                if let Some(v) = body["data"]["result"][0]["value"][1].as_str() {
                    assert_eq!(body["data"]["result"][0]["metric"]["site"], "s1");
                    break v.to_owned();
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus scraped nothing in 60 s: {}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(value, "1.25");
    let targets: serde_json::Value = app
        .http
        .get(format!("http://127.0.0.1:{port}/api/v1/targets"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(targets["data"]["activeTargets"][0]["health"], "up");
    prometheus.kill().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
