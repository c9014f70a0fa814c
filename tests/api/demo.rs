//! The demo's data, made once per test run by the real `wattledger demo --no-serve` (this
//! month to date and the last days of the previous, attributed, chargeback closed up to the
//! last full month) and shared by the tests that need a realistic cluster: the FOCUS
//! validator's and the browser's.

use crate::agent::{binary, free_port};
use std::path::PathBuf;
use std::process::Command;
use tokio::sync::OnceCell;
use wattledger_tests::fresh_db;

pub(crate) struct Demo {
    pub(crate) db_url: String,
    /// Its data directory: exports under `exports/`.
    pub(crate) dir: PathBuf,
    pub(crate) stdout: String,
}

static DEMO: OnceCell<Demo> = OnceCell::const_new();

pub(crate) async fn demo() -> &'static Demo {
    DEMO.get_or_init(|| async {
        let (_pool, db_url) = fresh_db().await;
        let dir = std::env::temp_dir().join(format!("wl-demo-{}", std::process::id()));
        // Not the whole of last month, as the README's demo simulates: its last five days
        // make a month to close, and the rest took the suite a minute and a half late in a
        // month. At least 25 days: the grid event's baseline looks back two weeks from a
        // day last week.
        let days = (chrono::Datelike::day(&chrono::Utc::now()) + 5).max(25);
        let _ = std::fs::remove_dir_all(&dir);
        let out = tokio::task::spawn_blocking({
            let (db_url, dir) = (db_url.clone(), dir.clone());
            move || {
                Command::new(binary("wattledger"))
                    .args(["--database-url", &db_url])
                    .args(["--listen", &format!("127.0.0.1:{}", free_port())])
                    .arg("--data-dir")
                    .arg(&dir)
                    .args(["demo", "--days", &days.to_string(), "--no-serve"])
                    .env("RUST_LOG", "warn")
                    .output()
                    .unwrap()
            }
        })
        .await
        .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "demo failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Demo {
            db_url,
            dir,
            stdout,
        }
    })
    .await
}

/// The summary's per-tenant table as printed: (tenant, kWh to one decimal).
fn printed_tenants(lines: &[String]) -> Vec<(String, String)> {
    let header = lines
        .iter()
        .position(|l| l.trim_start().starts_with("tenant ") && l.contains("kWh"))
        .expect("the summary's tenant table");
    lines[header + 1..]
        .iter()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .take_while(|f| f.first() != Some(&"total"))
        .map(|f| (f[0].to_owned(), f[1].to_owned()))
        .collect()
}

/// The shared demo (weeks of it, not the two days of the served demo's test below): its
/// printed tenants equal the ledger over the range it names. With the server's worker racing
/// its own, it printed before the hours that worker held were written.
#[tokio::test]
async fn the_full_demos_printed_figures_are_the_ledgers() {
    let Demo { db_url, stdout, .. } = demo().await;
    let lines: Vec<String> = stdout.lines().map(str::to_owned).collect();
    let query = lines
        .iter()
        .find_map(|l| l.trim().strip_prefix("GET /v1/usage?group_by=tenant&"))
        .unwrap_or_else(|| panic!("{stdout}"));
    let range: Vec<chrono::DateTime<chrono::Utc>> = query
        .split_whitespace()
        .next()
        .unwrap()
        .split('&')
        .map(|kv| kv.split_once('=').unwrap().1.parse().unwrap())
        .collect();
    let pool = wattledger_store::connect(db_url, 2).await.unwrap();
    let ledger_by = |group: wattledger_store::usage::GroupBy| {
        let pool = pool.clone();
        let filter = wattledger_store::usage::UsageFilter {
            from: Some(range[0]),
            to: Some(range[1]),
            ..Default::default()
        };
        async move {
            wattledger_store::usage::usage(&pool, &wattledger_store::Scope::All, &[group], &filter)
                .await
                .unwrap()
        }
    };
    let rows = ledger_by(wattledger_store::usage::GroupBy::Tenant).await;
    let ledger: Vec<(String, String)> = rows
        .iter()
        .map(|r| {
            let kwh = wattledger_domain::units::kwh(r.energy.total_mj()).round_dp(1);
            (r.tenant.clone().unwrap(), kwh.to_string())
        })
        .collect();
    assert_eq!(printed_tenants(&lines), ledger, "{stdout}");

    // Its per-model table shows the figures of domain::metrics that the API and the
    // dashboard show: tokens per kWh, J per token and SCI per 1k tokens, rounded for print.
    let models = ledger_by(wattledger_store::usage::GroupBy::Model).await;
    let show = |d: Option<rust_decimal::Decimal>, places: u32| {
        d.map_or_else(|| "-".to_owned(), |d| d.round_dp(places).to_string())
    };
    let expected: Vec<Vec<String>> = models
        .iter()
        .filter(|r| r.tokens() > 0)
        .map(|r| {
            let e = wattledger_domain::metrics::efficiency(r.totals());
            vec![
                r.model.clone().unwrap_or_else(|| "-".into()),
                show(e.tokens_per_kwh, 0),
                show(e.joules_per_token, 3),
                show(e.sci_g_per_1k_tokens, 3),
            ]
        })
        .collect();
    let header = lines
        .iter()
        .position(|l| l.contains("tokens/kWh") && l.contains("SCI"))
        .expect("the summary's model table");
    let printed: Vec<Vec<String>> = lines[header + 1..]
        .iter()
        .take_while(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            [f[0], f[3], f[4], f[5]].map(str::to_owned).to_vec()
        })
        .collect();
    assert!(!expected.is_empty());
    assert_eq!(printed, expected, "{stdout}");
}

/// What the demo prints per tenant is what the API answers for the same range the moment
/// the demo says it is ready (it used to print, and serve, while hours were still being
/// attributed: 126,292 kWh printed, 191,348 kWh in the ledger). A 2-day demo, served on its
/// embedded PostgreSQL, with its live node pushing into the hour under way, which the printed
/// range leaves out. Stopped as Ctrl-C or a service manager stops it (SIGTERM), it leaves
/// nothing running: not its PostgreSQL (its data kept), not its agent.
#[tokio::test]
async fn the_demos_printed_figures_are_the_apis_once_it_says_ready() {
    use std::io::BufRead;
    let dir = std::env::temp_dir().join(format!("wl-demo-served-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    let mut demo = wattledger_tests::Killed::spawn(
        Command::new(binary("wattledger"))
            .env_remove("DATABASE_URL")
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(&dir)
            .args(["demo", "--days", "2", "--no-close"])
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(dir.join("demo.err")).unwrap()),
    );
    let stdout = demo.0.stdout.take().unwrap();
    let (ready, lines) = tokio::sync::oneshot::channel();
    // Read to the end, not only to "Try:": a pipe closed under it would fail the demo's
    // next write.
    std::thread::spawn(move || {
        let mut lines = Vec::new();
        let mut ready = Some(ready);
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let done = line.starts_with("Try:");
            lines.push(line);
            if done {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(std::mem::take(&mut lines));
                }
            }
        }
    });
    let err = || std::fs::read_to_string(dir.join("demo.err")).unwrap_or_default();
    let lines = tokio::time::timeout(std::time::Duration::from_secs(240), lines)
        .await
        .expect("the demo did not say it was ready within 4 minutes")
        .unwrap_or_else(|_| panic!("the demo ended before it was ready:\n{}", err()));
    let text = lines.join("\n");
    let find = |prefix: &str| {
        lines
            .iter()
            .find_map(|l| l.trim().strip_prefix(prefix).map(str::to_owned))
            .unwrap_or_else(|| panic!("no '{prefix}' in:\n{text}\n{}", err()))
    };
    let query = find("GET /v1/usage?")
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let base = find("Serving the API on ")
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let token_at = lines
        .iter()
        .position(|l| l.starts_with("Admin token"))
        .unwrap();
    let token = lines[token_at + 1].trim().to_owned();
    let printed = printed_tenants(&lines);
    assert!(printed.len() >= 7, "{text}");
    let answer: serde_json::Value = reqwest::Client::new()
        .get(format!("{base}/v1/usage?{query}"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let served: Vec<(String, String)> = answer["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"))
        .iter()
        .map(|r| {
            let kwh = wattledger_domain::units::kwh(r["total_mj"].as_i64().unwrap()).round_dp(1);
            (r["tenant"].as_str().unwrap().to_owned(), kwh.to_string())
        })
        .collect();
    assert_eq!(printed, served, "printed:\n{text}");
    // No marginal signal in the demo: no marginal carbon, never "0", and said so.
    for r in answer["rows"].as_array().unwrap() {
        assert!(r["carbon_marginal_g"].is_null(), "{r}");
        assert_eq!(r["carbon_marginal_fraction"], "0", "{r}");
        assert!(r["flags"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("carbon_marginal_missing")));
    }

    // Its live agent runs, and its PostgreSQL, both named by the data directory.
    let (data, agent_config) = (dir.join("postgres"), dir.join("demo-agent.toml"));
    let running = |p: &std::path::Path| wattledger_tests::process::mentioning(&p.to_string_lossy());
    assert_eq!(running(&agent_config).len(), 1, "{text}\n{}", err());
    assert!(!running(&data).is_empty(), "{text}\n{}", err());
    let status = tokio::task::spawn_blocking(move || {
        let status = demo.terminate(std::time::Duration::from_secs(60));
        (status, demo)
    })
    .await
    .unwrap();
    let (status, _demo) = status;
    assert!(
        status.is_some_and(|s| s.success()),
        "the demo did not stop cleanly on SIGTERM ({status:?}):\n{}",
        err()
    );
    assert_eq!(running(&agent_config), Vec::<String>::new(), "{}", err());
    assert_eq!(running(&data), Vec::<String>::new(), "{}", err());
    assert!(
        !data.join("postmaster.pid").exists() && data.join("PG_VERSION").exists(),
        "PostgreSQL stopped, its data kept"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The demo's jobs start with its meters: no month bills GPU time of no energy (it closed
/// a 0 kWh September before October).
#[tokio::test]
async fn the_demo_closes_no_month_without_energy() {
    let Demo { db_url, stdout, .. } = demo().await;
    let pool = wattledger_store::connect(db_url, 2).await.unwrap();
    let months = wattledger_store::chargeback::months(&pool).await.unwrap();
    assert!(!months.is_empty());
    for m in months {
        assert!(
            m.metered_mj > 0,
            "{} closed with no energy:\n{stdout}",
            m.month
        );
    }
    assert!(!stdout.contains("closed first"), "{stdout}");
}

/// The demo's power-bound site: what it prints of last week's grid event is the event's
/// report, and what it prints of admission is what admission stored — inference replicas
/// counted at less than their nameplate draw, the training run at its power cap.
#[tokio::test]
async fn the_demos_power_bound_site_prints_what_the_event_and_admission_hold() {
    let Demo { db_url, stdout, .. } = demo().await;
    let pool = wattledger_store::connect(db_url, 2).await.unwrap();
    let line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("grid event "))
        .unwrap_or_else(|| panic!("no grid event in {stdout}"));
    let key = line
        .split_whitespace()
        .nth(2)
        .unwrap()
        .trim_end_matches(':');
    let event = wattledger_store::grid_events::get(&pool, key)
        .await
        .unwrap()
        .unwrap();
    let r = wattledger::grid_events::report(&pool, event, chrono::Utc::now())
        .await
        .unwrap();
    let o = r.outcome.as_ref().expect("the event is measured");
    let kwh = |mj: i64| wattledger_domain::units::kwh(mj).round_dp(1);
    for want in [
        format!("reduction {} kWh", kwh(o.reduction_mj)),
        format!("credit {} EUR", o.credit.unwrap().round_dp(2)),
        format!("{} days)", r.baseline_days().len()),
    ] {
        assert!(stdout.contains(&want), "{want} not in {stdout}");
    }
    assert!(!r.contributions.is_empty());

    let replicas: Vec<(i64, Option<serde_json::Value>)> = sqlx::query_as(
        "SELECT reserved_w, answer->'power_cap_w' FROM admission_decisions
         WHERE source = 'demo' AND kind = 'inference' AND decision = 'admit'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let printed: usize = stdout
        .lines()
        .find_map(|l| l.trim().split_once(" admitted as asked"))
        .map(|(n, _)| n.parse().unwrap())
        .unwrap_or_else(|| panic!("{stdout}"));
    let plain = replicas
        .iter()
        .filter(|r| r.1 == Some(serde_json::Value::Null))
        .count();
    assert_eq!(plain, printed, "{replicas:?}");
    // 4 GPUs × 600 W × PUE 1.35 = 3,240 W of nameplate, counted at the measured factor.
    assert!(replicas.iter().all(|r| r.0 < 3240), "{replicas:?}");
    // The training run is sized to fit only capped, whatever the hour: said and stored.
    assert!(
        stdout.contains("capped at 450 W, running"),
        "no capped training run in {stdout}"
    );
    let caps: Vec<(Option<serde_json::Value>,)> = sqlx::query_as(
        "SELECT answer->'power_cap_w' FROM admission_decisions
         WHERE source = 'demo' AND kind = 'training'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(caps, [(Some(serde_json::json!(450)),)]);
}
