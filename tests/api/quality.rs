//! Data quality through the API (issue 16, section 2): what a figure rests on is in every
//! usage and job row — flags, the estimated share, and energy priced and carbon-counted by a
//! signal or at the site's fallback — on the scenario with one thing wrong at a time.

use crate::scenario::{self, HOUR, NEXT_HOUR};
use serde_json::{json, Value};
use wattledger::auth::Role;
use wattledger_tests::TestApp;

/// The scenario with `change` applied to its batches, pushed and attributed.
async fn scenario_with(change: impl FnOnce(&mut scenario::Batches)) -> TestApp {
    let app = TestApp::start().await;
    let mut b = scenario::batches();
    change(&mut b);
    scenario::push(&app, &b).await;
    app.attribute().await;
    app
}

fn drop_samples(b: &mut scenario::Batches, meter: &str, minutes: std::ops::RangeInclusive<i64>) {
    let gone: Vec<String> = minutes.map(scenario::at).collect();
    b.samples
        .as_array_mut()
        .unwrap()
        .retain(|s| !(s["meter"] == meter && gone.iter().any(|t| s["ts"] == t.as_str())));
}

async fn usage(app: &TestApp, group_by: &str) -> Vec<Value> {
    let (status, body) = app
        .get(
            Some(&app.token(Role::Finance)),
            &format!("/v1/usage?group_by={group_by}&from={HOUR}&to={NEXT_HOUR}"),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body["rows"].as_array().unwrap().clone()
}

fn row<'a>(rows: &'a [Value], key: &str, value: &str) -> &'a Value {
    rows.iter()
        .find(|r| r[key] == value)
        .unwrap_or_else(|| panic!("no {key}={value} in {rows:?}"))
}

fn flags(v: &Value) -> Vec<&str> {
    v["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn a_missing_last_reading_shows_as_missing_not_as_a_silent_shortfall() {
    // g0's reading at the end of the hour never came: its last minute has no closing
    // reading, so that minute's GPU energy reaches the ledger only through the node meter,
    // as overhead split by the other GPUs' energy. A is short of what it drew (B's jobs and
    // A's endpoint carry it), and now says why; the site still adds up to its meters.
    let app = scenario_with(|b| drop_samples(b, "g0", 60..=60)).await;
    let rows = usage(&app, "tenant").await;
    let a = row(&rows, "tenant", "a");
    assert!(
        a["total_mj"].as_i64().unwrap() < scenario::EXPECTED_A,
        "{a}"
    );
    assert!(flags(a).contains(&"missing"), "{a}");
    let total: i64 = rows.iter().map(|r| r["total_mj"].as_i64().unwrap()).sum();
    assert_eq!(total, 7_200_000_000);
    let (status, job) = app
        .get(Some(&app.token(Role::Finance)), "/v1/jobs/job-train")
        .await;
    assert_eq!(status, 200);
    assert!(flags(&job).contains(&"missing"), "{job}");
}

#[tokio::test]
async fn an_overhead_share_measured_against_another_gpus_gap_is_flagged() {
    // g1 (B's MIG GPU) sent nothing for 16 minutes, longer than the site's gap limit: its
    // energy there is an estimate, so is the node overhead everyone on n1 shares. A's
    // training job read fine and says its estimated share came from the overhead.
    let app = scenario_with(|b| drop_samples(b, "g1", 10..=25)).await;
    let (status, job) = app
        .get(Some(&app.token(Role::Finance)), "/v1/jobs/job-train")
        .await;
    assert_eq!(status, 200, "{job}");
    assert!(flags(&job).contains(&"overhead_estimated"), "{job}");
    assert!(!flags(&job).contains(&"gap"), "{job}");
    let estimated: f64 = job["estimated_fraction"].as_str().unwrap().parse().unwrap();
    assert!(estimated > 0.0, "{job}");
    let (_, mig) = app
        .get(Some(&app.token(Role::Finance)), "/v1/jobs/job-mig")
        .await;
    assert!(flags(&mig).contains(&"gap"), "{mig}");
}

#[tokio::test]
async fn fallback_prices_and_intensities_are_told_apart_from_signals() {
    // No signal at all: the site's fallback price and intensity priced everything.
    let app = scenario_with(|b| {
        b.sites[0]["fallback_price"] = json!("0.20");
        b.sites[0]["fallback_intensity_g"] = json!("300");
    })
    .await;
    let rows = usage(&app, "tenant").await;
    let a = row(&rows, "tenant", "a");
    assert_eq!(a["priced_fraction"], "1", "{a}");
    assert_eq!(a["price_fallback_fraction"], "1", "{a}");
    assert_eq!(a["price_signal_fraction"], "0", "{a}");
    assert_eq!(a["carbon_fallback_fraction"], "1", "{a}");
    for f in [
        "price_fallback",
        "carbon_fallback",
        "carbon_marginal_missing",
    ] {
        assert!(flags(a).contains(&f), "{f}: {a}");
    }
    // No marginal signal: no marginal carbon, and a share of 0, never "0 g".
    assert!(a["carbon_marginal_g"].is_null(), "{a}");
    assert_eq!(a["carbon_marginal_fraction"], "0");

    // A price signal for the first half hour: half the energy signal-priced, half fallback.
    let (status, body) = app
        .ingest(
            &app.token(Role::Collector),
            "signals",
            json!([{"region": "DE", "signal": "price", "currency": "EUR", "status": "actual",
                    "source": "entsoe", "start_at": HOUR, "end_at": scenario::at(30),
                    "value": "0.30"}]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    app.attribute().await;
    let rows = usage(&app, "tenant").await;
    let a = row(&rows, "tenant", "a");
    assert_eq!(
        (
            a["price_signal_fraction"].as_str(),
            a["price_fallback_fraction"].as_str()
        ),
        (Some("0.5"), Some("0.5")),
        "{a}"
    );
    // The job rows say the same, for the caller's share.
    let (_, job) = app
        .get(Some(&app.tenant_token("b")), "/v1/jobs/job-endpoint")
        .await;
    assert_eq!(job["price_fallback_fraction"], "0.5", "{job}");
    assert!(flags(&job).contains(&"price_fallback"), "{job}");
}

#[tokio::test]
async fn the_openapi_document_describes_the_quality_fields() {
    let app = TestApp::start().await;
    let (_, doc) = app.get(None, "/v1/openapi.json").await;
    let schemas = &doc["components"]["schemas"];
    let quality = &schemas["DataQuality"]["properties"];
    for f in [
        "flags",
        "estimated_fraction",
        "price_signal_fraction",
        "price_fallback_fraction",
        "carbon_signal_fraction",
        "carbon_fallback_fraction",
        "carbon_marginal_fraction",
    ] {
        assert!(
            quality.get(f).is_some(),
            "DataQuality.{f} missing: {quality}"
        );
    }
    for used in ["UsageRowOut", "JobOut"] {
        assert!(
            schemas[used]
                .to_string()
                .contains("#/components/schemas/DataQuality"),
            "{used} does not carry DataQuality: {}",
            schemas[used]
        );
    }
}
