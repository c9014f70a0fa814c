//! `/metrics` against the real tools: `promtool check metrics` lints the exposition, and a
//! real Prometheus (Debian `prometheus`; `tests/run` installs it) scrapes the server with a
//! bearer token and answers a query for a series through its HTTP API.

use crate::scenario;
use serde_json::json;
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
