//! The dashboard in a real browser: headless Chromium, driven over WebDriver (chromedriver),
//! signs in through the form on a server holding the demo's data and opens every page. A
//! console error or a failed request (which Chromium logs as one) fails the test; each page
//! is saved as a screenshot under `target/screenshots/` (CI's last run, not in git).

use crate::agent::{free_port, server_with, Killed};
use crate::demo::demo;
use base64::Engine;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;
use wattledger::auth::Role;
use wattledger::dashboard::login::add_user;
use wattledger_tests::peers;

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

struct Driver {
    http: reqwest::Client,
    base: String,
    session: String,
    _process: Killed,
}

impl Driver {
    async fn start(profile: &std::path::Path) -> Driver {
        let port = free_port();
        // chromedriver starts Chromium: killed with it, as its process group.
        let process = Killed::spawn(
            Command::new("chromedriver")
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        let http = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        for _ in 0..100 {
            if http.get(format!("{base}/status")).send().await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The flags the machine notes give for Chromium here: no sandbox as root, and no
        // background networking (this machine's closed network refuses it).
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            &format!("--user-data-dir={}", profile.display()),
            "--window-size=1280,1800",
        ];
        let r: Value = http
            .post(format!("{base}/session"))
            .json(&json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args},
                "goog:loggingPrefs": {"browser": "ALL"}
            }}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let session = r["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {r}"))
            .to_owned();
        Driver {
            http,
            base,
            session,
            _process: process,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let r: Value = self
            .http
            .request(method, url)
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(r["value"]["error"].is_null(), "{path}: {r}");
        r["value"].clone()
    }

    async fn open(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", json!({ "url": url }))
            .await;
    }

    async fn url(&self) -> String {
        self.call(reqwest::Method::GET, "/url", json!({}))
            .await
            .as_str()
            .unwrap()
            .to_owned()
    }

    async fn element(&self, css: &str) -> String {
        let v = self
            .call(
                reqwest::Method::POST,
                "/element",
                json!({"using": "css selector", "value": css}),
            )
            .await;
        v[ELEMENT].as_str().unwrap().to_owned()
    }

    async fn type_into(&self, css: &str, text: &str) {
        let e = self.element(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{e}/value"),
            json!({ "text": text }),
        )
        .await;
    }

    async fn click(&self, css: &str) {
        let e = self.element(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{e}/click"),
            json!({}),
        )
        .await;
    }

    async fn text(&self) -> String {
        let body = self.element("body").await;
        self.call(
            reqwest::Method::GET,
            &format!("/element/{body}/text"),
            json!({}),
        )
        .await
        .as_str()
        .unwrap()
        .to_owned()
    }

    /// What `script` (a function body) returns, run in the page.
    async fn execute(&self, script: &str) -> Value {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            json!({"script": script, "args": []}),
        )
        .await
    }

    /// Console entries at SEVERE since the last call (errors and failed loads).
    async fn errors(&self) -> Vec<String> {
        self.call(reqwest::Method::POST, "/se/log", json!({"type": "browser"}))
            .await
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    async fn screenshot(&self, path: &std::path::Path) {
        let png = self
            .call(reqwest::Method::GET, "/screenshot", json!({}))
            .await;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap())
            .unwrap();
        assert!(bytes.starts_with(b"\x89PNG"));
        std::fs::write(path, bytes).unwrap();
    }

    async fn resize(&self, width: u32, height: u32) {
        self.call(
            reqwest::Method::POST,
            "/window/rect",
            json!({"width": width, "height": height}),
        )
        .await;
    }

    async fn quit(&self) {
        let _ = self
            .http
            .delete(format!("{}/session/{}", self.base, self.session))
            .send()
            .await;
    }
}

async fn sign_in(driver: &Driver, site: &str, user: &str) {
    driver.open(&format!("{site}/login")).await;
    driver.type_into("#username", user).await;
    driver.type_into("#password", "browser-test-password").await;
    driver.click("button[type=submit]").await;
    for _ in 0..50 {
        if !driver.url().await.ends_with("/login") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "{user} did not get past the login form: {}",
        driver.text().await
    );
}

fn screenshots() -> PathBuf {
    // target/debug/deps/api-<hash> → target/screenshots
    let exe = std::env::current_exe().unwrap();
    let dir = exe.ancestors().nth(3).unwrap().join("screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Each site's "power per minute" chart shows a series as laid out: the demo's meters
/// report every 5 minutes, and a line broken at every minute without a value drew nothing.
async fn operator_power_is_drawn(driver: &Driver) {
    let charts = driver
        .execute(
            "return Array.from(document.querySelectorAll('svg.chart[aria-labelledby^=\"power-\"]')).map(svg => {
                 const lines = Array.from(svg.querySelectorAll('polyline'));
                 return {
                     chart: svg.getAttribute('aria-labelledby'),
                     width: svg.getBoundingClientRect().width,
                     points: lines.reduce((n, l) => n + l.points.numberOfItems, 0),
                     drawn: lines.reduce((w, l) => Math.max(w, l.getBoundingClientRect().width), 0),
                 };
             });",
        )
        .await;
    let charts = charts.as_array().unwrap();
    assert_eq!(charts.len(), 2, "a power chart per site: {charts:?}");
    for c in charts {
        let (points, drawn, width) = (
            c["points"].as_u64().unwrap(),
            c["drawn"].as_f64().unwrap(),
            c["width"].as_f64().unwrap(),
        );
        assert!(
            points >= 2 && drawn > 0.0 && width > 0.0,
            "nothing drawn: {c}"
        );
    }
}

#[tokio::test]
async fn every_page_loads_in_chromium_without_console_errors() {
    if !peers::ready(
        peers::installed("chromedriver") && std::path::Path::new("/usr/bin/chromium").exists(),
        "Chromium and chromedriver are not installed",
        "apt-get install chromium chromium-driver",
    ) {
        return;
    }
    let demo = demo().await;
    let pool = wattledger_store::connect(&demo.db_url, 2).await.unwrap();
    add_user(
        &pool,
        "finance",
        Role::Finance,
        None,
        "browser-test-password",
    )
    .await
    .unwrap();
    add_user(
        &pool,
        "acme",
        Role::Tenant,
        Some("acme-research"),
        "browser-test-password",
    )
    .await
    .unwrap();
    let job: String = sqlx::query_scalar(
        "SELECT j.key FROM jobs j JOIN tenants t ON t.id = j.tenant_id
         JOIN ledger l ON l.site_id = j.site_id AND l.job_id = j.id
         WHERE t.key = 'acme-research' AND l.hour >= date_trunc('month', now())
         GROUP BY j.key ORDER BY sum(l.total_mj) DESC LIMIT 1",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let cards = budgets_of_three_outlooks(&pool).await;
    let month = wattledger_domain::chargeback::Month::of(chrono::Utc::now()).prev();
    let port = free_port();
    let log = demo.dir.join("browser-server.log");
    let _server = server_with(&demo.db_url, port, &log, &[("WATTLEDGER_WORKER", "false")]);
    let site = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    for _ in 0..100 {
        if http.get(format!("{site}/health")).send().await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let shots = screenshots();
    let profile = demo.dir.join("chromium-profile");

    let driver = Driver::start(&profile).await;
    driver.open(&format!("{site}/")).await;
    assert!(
        driver.url().await.ends_with("/login"),
        "a page without a session shows the login"
    );
    driver.screenshot(&shots.join("login.png")).await;
    sign_in(&driver, &site, "finance").await;
    let job_path = format!("/jobs/{}", job.replace(':', "%3A").replace('/', "%2F"));
    let pages = [
        ("tenants", "/".to_owned(), "acme-research"),
        (
            "tenant-overview",
            "/tenants/acme-research".to_owned(),
            "Energy per day by model",
        ),
        ("job", job_path, "Power by hour"),
        ("operator", "/operator".to_owned(), "Frankfurt"),
        ("finance", "/finance".to_owned(), "Closed"),
        (
            "finance-month",
            format!("/finance/{month}"),
            "Reconciliation",
        ),
    ];
    for (name, path, expect) in &pages {
        driver.open(&format!("{site}{path}")).await;
        let text = driver.text().await;
        assert!(
            text.contains(expect),
            "{path}: '{expect}' missing in\n{text}"
        );
        if *name == "tenant-overview" {
            budget_cards_say_what_is_true(&driver, &cards).await;
        }
        driver.screenshot(&shots.join(format!("{name}.png"))).await;
        let errors = driver.errors().await;
        assert!(errors.is_empty(), "{path}: console errors {errors:?}");
        if *name == "operator" {
            operator_power_is_drawn(&driver).await;
        }
    }
    driver.quit().await;

    // A tenant, on a phone-sized window: its overview, and another tenant's page is not found.
    let driver = Driver::start(&profile.with_extension("tenant")).await;
    sign_in(&driver, &site, "acme").await;
    assert!(driver.url().await.ends_with("/tenants/acme-research"));
    driver.resize(390, 1600).await;
    driver.open(&format!("{site}/tenants/acme-research")).await;
    driver
        .screenshot(&shots.join("tenant-overview-phone.png"))
        .await;
    assert!(driver.errors().await.is_empty());
    driver.open(&format!("{site}/tenants/nimbus-ai")).await;
    assert!(driver.text().await.contains("There is no such page"));
    // The 404 itself is logged as a failed load; nothing else may be.
    let errors = driver.errors().await;
    assert!(errors.iter().all(|e| e.contains("404")), "{errors:?}");
    driver.quit().await;
    for (key, _) in &cards {
        wattledger_store::budgets::delete(&pool, key).await.unwrap();
    }
}

/// Three energy budgets of acme-research for this month, set against what the demo's tenant
/// has used: one it has gone over, one it reaches halfway to the month's end at its 7-day
/// rate, one it cannot reach. Each with the start of what its card must say.
async fn budgets_of_three_outlooks(pool: &sqlx::PgPool) -> Vec<(String, String)> {
    use rust_decimal::Decimal;
    use wattledger_store::budgets::{self, BudgetSpec};
    let tenant_id: i64 = sqlx::query_scalar("SELECT id FROM tenants WHERE key = 'acme-research'")
        .fetch_one(pool)
        .await
        .unwrap();
    let spec = |key: &str, limit: Decimal| BudgetSpec {
        key: key.into(),
        tenant_id,
        model_id: None,
        period: wattledger_domain::budget::BudgetPeriod::Month,
        starts_at: None,
        ends_at: None,
        limit_kwh: Some(limit.round_dp(3)),
        limit_cost: None,
        currency: None,
        limit_carbon_kg: None,
        // Soft: a hard cap over its limit would refuse the demo tenant's admissions.
        hard: false,
        thresholds_pct: vec![80, 100],
    };
    budgets::upsert(pool, &spec("browser-within", Decimal::from(1_000_000_000)))
        .await
        .unwrap();
    let now = chrono::Utc::now();
    let state = budgets::list(
        pool,
        &wattledger_store::Scope::All,
        Some("browser-within"),
        now,
    )
    .await
    .unwrap()
    .remove(0);
    let (_, u) = state.usages(now).remove(0);
    assert!(
        u.used > Decimal::ZERO && u.recent > Decimal::ZERO,
        "the demo's tenant used energy this week: {u:?}"
    );
    // At the 7-day rate, what is used in half the time left in the month.
    let half_left = Decimal::from((u.period_end - now).num_seconds() / 2);
    let on_track = u.used + u.recent * half_left / Decimal::from(u.recent_s);
    budgets::upsert(pool, &spec("browser-over", u.used / Decimal::TWO))
        .await
        .unwrap();
    budgets::upsert(pool, &spec("browser-on-track", on_track))
        .await
        .unwrap();
    [
        ("browser-over", "over by "),
        ("browser-on-track", "on track to go over on "),
        ("browser-within", "within budget at this rate"),
    ]
    .map(|(k, says)| (k.to_owned(), says.to_owned()))
    .into()
}

/// The tenant page's budget cards, as Chromium renders them: each of the three says its own
/// outlook, and an over card is marked over.
async fn budget_cards_say_what_is_true(driver: &Driver, cards: &[(String, String)]) {
    let shown = driver
        .execute(
            "return [...document.querySelectorAll('ul.budgets li')].map(li => \
             [li.querySelector('.budget-head span').innerText, li.querySelector('.budget-foot').innerText, \
              !!li.querySelector('.budget-head .over')])",
        )
        .await;
    for (key, says) in cards {
        let card = shown
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c[0].as_str().unwrap().starts_with(&format!("{key} ·")))
            .unwrap_or_else(|| panic!("no card for {key} in {shown}"));
        let foot = card[1].as_str().unwrap();
        assert!(
            foot.contains(says.as_str()),
            "{key}: '{says}' missing in {foot:?}"
        );
        assert_eq!(
            card[2].as_bool(),
            Some(key == "browser-over"),
            "{key}: {card}"
        );
    }
}
