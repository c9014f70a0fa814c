//! Hourly carbon-free energy through the API: the grid's carbon-free share as a signal and a
//! site's contracted clean energy, matched hour by hour against the scenario's known load, per
//! site (`/v1/metrics/efficiency`) and per tenant (`/v1/usage`); what the records refuse.

use crate::dashboard::Browser;
use crate::scenario;
use serde_json::{json, Value};
use wattledger::auth::Role;
use wattledger::dashboard::login::add_user;
use wattledger_tests::TestApp;

async fn ingest(app: &TestApp, what: &str, records: Value) -> (u16, Value) {
    app.ingest(&app.token(Role::Collector), what, records).await
}

/// The grid half carbon-free in the first half hour and a fifth in the second, and half a
/// kWh of PPA in the hour.
fn supply() -> (Value, Value) {
    let share = |from: i64, to: i64, value: &str| {
        json!({"region": "DE", "signal": "carbon_free", "status": "actual",
               "source": "electricitymaps", "start_at": scenario::at(from),
               "end_at": scenario::at(to), "value": value})
    };
    (
        json!([share(0, 30, "0.5"), share(30, 60, "0.2")]),
        json!([{"site": "s1", "source": "ppa-wind", "start_at": scenario::HOUR,
                "end_at": scenario::NEXT_HOUR, "mwh": "0.0005"}]),
    )
}

/// By hand: the site draws 2 kWh evenly over the hour, so the grid's share is
/// (0.5 + 0.2) / 2 = 0.35 by energy. The PPA's 0.5 kWh covers load first; the other 1.5 kWh
/// is 35 % carbon-free: 0.5 + 0.525 = 1.025 kWh, a score of 0.5125. Each tenant's energy
/// times the hour's share: a 4.35e9 × 0.5125 = 2.229375e9 mJ, b 1.1146875e9, platform
/// 3.459375e8.
#[tokio::test]
async fn an_hour_is_matched_by_the_contract_first_then_the_grids_carbon_free_share() {
    let app = TestApp::start().await;
    scenario::push(&app, &scenario::batches()).await;
    let (shares, ppa) = supply();
    let (status, body) = ingest(&app, "signals", shares).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = ingest(&app, "clean-energy", ppa.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["written"], 1, "{body}");
    // Sent again: already stored.
    let (_, again) = ingest(&app, "clean-energy", ppa).await;
    assert_eq!(
        (again["written"].as_u64(), again["duplicates"].as_u64()),
        (Some(0), Some(1))
    );
    app.attribute().await;

    let operator = app.token(Role::Operator);
    let (status, body) = app
        .get(
            Some(&operator),
            &format!(
                "/v1/metrics/efficiency?site=s1&from={}&to={}",
                scenario::HOUR,
                scenario::NEXT_HOUR
            ),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let site = &body["rows"][0];
    assert_eq!(site["cfe_score"], "0.5125", "{site}");
    // The hour is the site's latest: Prometheus gets the same score.
    let text = crate::prometheus::scrape(&app).await;
    assert_eq!(
        crate::prometheus::value(&text, "wattledger_site_carbon_free_ratio{site=\"s1\"}")
            .as_deref(),
        Some("0.5125"),
        "{text}"
    );
    assert_eq!(site["hours_not_carbon_free"], 1);
    assert_eq!(site["hours_cfe_unknown"], 0);
    assert_eq!(site["not_carbon_free_kwh"], "0.975");
    assert_eq!(site["contract_kwh"], "0.5");

    let (status, body) = app
        .get(
            Some(&operator),
            &format!(
                "/v1/usage?group_by=tenant&from={}&to={}",
                scenario::HOUR,
                scenario::NEXT_HOUR
            ),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let tenants: Vec<(String, String, String)> = body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["tenant"].as_str().unwrap().to_owned(),
                r["carbon_free_kwh"].as_str().unwrap().to_owned(),
                r["cfe_score"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        tenants,
        [
            ("a".into(), "0.619271".into(), "0.5125".into()),
            ("b".into(), "0.309635".into(), "0.5125".into()),
            ("platform".into(), "0.096094".into(), "0.5125".into()),
        ]
    );
    let mj: i64 = sqlx::query_scalar(
        "SELECT sum(carbon_free_mj)::bigint FROM ledger l JOIN tenants t ON t.id = l.tenant_id WHERE t.key = 'a'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(mj, 2_229_375_000);

    // The operator's page and the tenant's say the same.
    for (user, role, tenant, path, shown) in [
        (
            "olga",
            Role::Operator,
            None,
            "/operator",
            "1 of 1 hours not wholly carbon-free (1.0 kWh short); 0.5 kWh delivered under contract",
        ),
        (
            "alice",
            Role::Tenant,
            Some("a"),
            "/tenants/a",
            "0.6 kWh not carbon-free",
        ),
    ] {
        add_user(&app.pool, user, role, tenant, "correct horse battery")
            .await
            .unwrap();
        let mut browser = Browser::new(&app);
        browser.sign_in(user, "correct horse battery").await;
        let page = browser
            .get(&format!("{path}?from=2026-11-02&to=2026-11-02"))
            .await;
        assert_eq!(page.status, 200, "{}", page.body);
        let figure = page
            .body
            .split("Carbon-free, hour by hour")
            .nth(1)
            .unwrap_or("");
        assert!(
            figure.contains("51.3%"),
            "{path}: {}",
            &figure[..figure.len().min(400)]
        );
        assert!(
            figure.contains(shown),
            "{path}: {shown} missing: {}",
            &figure[..figure.len().min(400)]
        );
    }

    // Without the PPA the hour is 35 % carbon-free: the revision re-dirties it.
    let (status, body) = ingest(
        &app,
        "clean-energy",
        json!([{"site": "s1", "source": "ppa-wind", "start_at": scenario::HOUR,
                "end_at": scenario::NEXT_HOUR, "mwh": "0"}]),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    app.attribute().await;
    let (_, body) = app
        .get(
            Some(&operator),
            &format!(
                "/v1/metrics/efficiency?site=s1&from={}&to={}",
                scenario::HOUR,
                scenario::NEXT_HOUR
            ),
        )
        .await;
    assert_eq!(body["rows"][0]["cfe_score"], "0.35");
}

#[tokio::test]
async fn without_a_share_the_hour_is_unknown_not_fossil() {
    let app = TestApp::start().await;
    scenario::push(&app, &scenario::batches()).await;
    app.attribute().await;
    let (status, body) = app
        .get(
            Some(&app.token(Role::Operator)),
            &format!(
                "/v1/metrics/efficiency?site=s1&from={}&to={}",
                scenario::HOUR,
                scenario::NEXT_HOUR
            ),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let site = &body["rows"][0];
    assert_eq!(site["cfe_score"], Value::Null, "{site}");
    assert_eq!(site["hours_cfe_unknown"], 1);
    assert_eq!(site["hours_not_carbon_free"], 0);
    // Not known is no sample, not a zero.
    let text = crate::prometheus::scrape(&app).await;
    assert!(
        text.contains("wattledger_site_pue_ratio{site=\"s1\"}"),
        "{text}"
    );
    assert!(
        !text.contains("wattledger_site_carbon_free_ratio"),
        "{text}"
    );
}

#[tokio::test]
async fn shares_and_deliveries_are_checked_like_every_record() {
    let app = TestApp::start().await;
    scenario::push(&app, &scenario::batches()).await;
    let (status, body) = ingest(
        &app,
        "signals",
        json!([{"region": "DE", "signal": "carbon_free", "basis": "average", "status": "actual",
                "source": "x", "start_at": scenario::HOUR, "end_at": scenario::NEXT_HOUR,
                "value": "1.5"}]),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    let fields = |body: &Value| -> Vec<String> {
        body["error"]["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["field"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(fields(&body), ["basis", "value"], "{body}");
    let (status, body) = ingest(
        &app,
        "clean-energy",
        json!([
            {"site": "nowhere", "source": "ppa", "start_at": scenario::HOUR,
             "end_at": scenario::NEXT_HOUR, "mwh": "1"},
            {"site": "s1", "source": "ppa", "start_at": "2099-01-01T00:00:00Z",
             "end_at": "2099-01-01T01:00:00Z", "mwh": "0.0000001"}
        ]),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        fields(&body),
        ["site", "start_at", "end_at", "mwh"],
        "{body}"
    );
}
