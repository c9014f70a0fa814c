//! Month close end to end: a known-answer month for two tenants worked out by hand, late data
//! after the close billed as adjustment lines in the next month while the closed statement's
//! bytes stay the same, reopening (admin, audited), tenant scoping, and the FOCUS exports of
//! the demo's month (1.2 and 1.4) through the FinOps Foundation's validator.

use crate::scenario;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use wattledger::auth::Role;
use wattledger_domain::chargeback::focus;
use wattledger_tests::TestApp;

/// The scenario's hour in September 2026, so that September and October have ended.
const HOUR: &str = "2026-09-15T10:00:00Z";

/// The scenario at a flat 0.20 EUR/kWh and 300 gCO2e/kWh (the site's fallbacks).
async fn september(app: &TestApp) {
    let mut b = scenario::batches_at(HOUR);
    b.sites[0]["fallback_price"] = json!("0.20");
    b.sites[0]["fallback_intensity_g"] = json!("300");
    scenario::push(app, &b).await;
    app.attribute().await;
}

pub(crate) async fn bytes(
    app: &TestApp,
    token: &str,
    path: &str,
) -> (u16, Vec<u8>, Option<String>) {
    let r = app
        .http
        .get(format!("{}{path}", app.base))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let sum = r
        .headers()
        .get("x-checksum-sha256")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, r.bytes().await.unwrap().to_vec(), sum)
}

fn line<'a>(statement: &'a Value, class: &str) -> &'a Value {
    statement["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["job_class"] == class)
        .unwrap_or_else(|| panic!("no {class} line in {statement}"))
}

fn statement<'a>(close: &'a Value, tenant: &str) -> &'a Value {
    close["statements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["tenant"] == tenant)
        .unwrap_or_else(|| panic!("no statement for {tenant}"))
}

/// By hand (the scenario's rows, `scenario.rs`): a's training job 3.654e9 mJ = 1.015 kWh →
/// 0.203 EUR, a's third of the endpoint 0.696e9 mJ → 0.038667; b's notebook 0.783e9 mJ →
/// 0.0435, b's two thirds of the endpoint 1.392e9 mJ → 0.077333; the idle MIG half and its
/// overhead 0.675e9 mJ → 0.0375 to the platform. Cents by largest remainder: a 0.20 + 0.04 =
/// 0.24 (0.241667 rounded; rounding each line alone would also give 0.24, but b shows the
/// difference: 0.04 + 0.08 = 0.12 where 0.0435 → 0.04 and 0.077333 → 0.08 by remainder).
#[tokio::test]
async fn a_closed_month_bills_by_hand_and_late_data_becomes_next_months_adjustment() {
    let app = TestApp::start().await;
    september(&app).await;
    let finance = app.token(Role::Finance);
    let admin = app.token(Role::Admin);

    // Not before the month ends, not out of order, not twice.
    let (status, body) = app
        .post_raw(
            &finance,
            "/v1/chargeback/months/2099-01/close",
            String::new(),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("month_not_ended"))
    );
    let (status, body) = app
        .post_raw(
            &finance,
            "/v1/chargeback/months/2026-10/close",
            String::new(),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("earlier_month_open")),
        "{body}"
    );
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("2026-09"));
    let (status, _) = app
        .post_raw(
            &app.tenant_token("a"),
            "/v1/chargeback/months/2026-09/close",
            String::new(),
        )
        .await;
    assert_eq!(status, 403, "tenants do not close months");

    let (status, sep) = app
        .post_raw(
            &finance,
            "/v1/chargeback/months/2026-09/close",
            String::new(),
        )
        .await;
    assert_eq!(status, 201, "{sep}");
    assert_eq!(sep["version"], 1);
    let a = statement(&sep, "a");
    assert_eq!(a["number"], "WL-2026-09-a-EUR-v1");
    assert_eq!(a["billed_cost"], "0.24");
    assert_eq!(a["energy_mj"], 4_350_000_000i64);
    assert_eq!(a["energy_kwh"], "1.208333");
    let train = line(a, "training");
    assert_eq!(
        (train["energy_mj"].as_i64(), train["energy_cost"].as_str()),
        (Some(3_654_000_000), Some("0.203000"))
    );
    assert_eq!(
        (train["billed_cost"].as_str(), train["carbon_kg"].as_str()),
        (Some("0.20"), Some("0.3045"))
    );
    let endpoint = line(a, "inference");
    assert_eq!(
        (endpoint["model"].as_str(), endpoint["billed_cost"].as_str()),
        (Some("m-endpoint"), Some("0.04"))
    );
    assert_eq!(
        (
            endpoint["prompt_tokens"].as_i64(),
            endpoint["generated_tokens"].as_i64()
        ),
        (Some(1000), Some(250))
    );
    let b = statement(&sep, "b");
    assert_eq!(b["billed_cost"], "0.12");
    assert_eq!(line(b, "interactive")["billed_cost"], "0.04");
    assert_eq!(line(b, "inference")["billed_cost"], "0.08");
    let platform = statement(&sep, "platform");
    assert_eq!(
        (
            platform["billed_cost"].as_str(),
            platform["energy_mj"].as_i64()
        ),
        (Some("0.04"), Some(675_000_000))
    );
    // The site balances to the mJ: 7.2e9 metered = 6.525e9 to jobs + 0.675e9 idle.
    let site = &sep["reconciliation"][0];
    assert_eq!(
        (
            site["metered_mj"].as_i64(),
            site["attributed_mj"].as_i64(),
            site["unallocated_mj"].as_i64(),
            site["balanced"].as_bool()
        ),
        (
            Some(7_200_000_000),
            Some(6_525_000_000),
            Some(675_000_000),
            Some(true)
        )
    );
    let (status, again) = app
        .post_raw(
            &finance,
            "/v1/chargeback/months/2026-09/close",
            String::new(),
        )
        .await;
    assert_eq!(
        (status, again["error"]["code"].as_str()),
        (409, Some("month_closed"))
    );

    // The exports as frozen, with their checksums.
    let (status, focus_before, sum) = bytes(
        &app,
        &finance,
        "/v1/chargeback/months/2026-09/exports/focus",
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        sum.as_deref(),
        Some(wattledger_domain::chargeback::sha256_hex(&focus_before).as_str())
    );
    let (_, csv_before, _) =
        bytes(&app, &finance, "/v1/chargeback/months/2026-09/exports/csv").await;
    let focus14 = "/v1/chargeback/months/2026-09/exports/focus?version=1.4";
    let (status, focus14_before, sum14) = bytes(&app, &finance, focus14).await;
    assert_eq!(status, 200);
    assert_eq!(
        sum14.as_deref(),
        Some(wattledger_domain::chargeback::sha256_hex(&focus14_before).as_str())
    );
    // 1.4 is rendered from the frozen close: the close as loaded gives the stored 1.2 bytes
    // back (so it is the close that was frozen), and the 1.4 bytes served.
    let loaded = wattledger_store::chargeback::load(
        &app.pool,
        "2026-09".parse().unwrap(),
        &wattledger_store::Scope::All,
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        focus::render(&loaded, focus::Version::V1_2).as_bytes(),
        focus_before
    );
    assert_eq!(
        focus::render(&loaded, focus::Version::V1_4).as_bytes(),
        focus14_before
    );
    let focus14_text = String::from_utf8(focus14_before.clone()).unwrap();
    let header: Vec<&str> = focus14_text.lines().next().unwrap().split(',').collect();
    assert_eq!(header, focus::Version::V1_4.columns());
    // The same charges, one row each, and a GPU-time row (at a price of 0) for every line
    // whose GPU time no rate billed, so that 1.4's quantities hold all the GPU-hours.
    let rows14: Vec<BTreeMap<&str, String>> = focus14_text
        .lines()
        .skip(1)
        .map(|l| header.iter().copied().zip(split_csv(l)).collect())
        .collect();
    let unbilled_gpu_time = rows14
        .iter()
        .filter(|r| r["InvoiceDetailId"].contains("-gpu-time") && r["ListUnitPrice"] == "0.000000")
        .count();
    assert_eq!(
        rows14.len() - unbilled_gpu_time,
        String::from_utf8_lossy(&focus_before).lines().count() - 1,
    );
    // Every SKU price a row names is in the month's price list, at the price the row
    // carries; each price is its site's cost over its quantity, to the millionth.
    let (status, prices, prices_sum) = bytes(
        &app,
        &finance,
        "/v1/chargeback/months/2026-09/exports/prices",
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        prices_sum.as_deref(),
        Some(wattledger_domain::chargeback::sha256_hex(&prices).as_str())
    );
    let prices = String::from_utf8(prices).unwrap();
    let price_header: Vec<&str> = prices.lines().next().unwrap().split(',').collect();
    let price_list: BTreeMap<String, BTreeMap<&str, String>> = prices
        .lines()
        .skip(1)
        .map(|l| {
            let r: BTreeMap<&str, String> =
                price_header.iter().copied().zip(split_csv(l)).collect();
            (r["SkuPriceId"].clone(), r)
        })
        .collect();
    assert!(!price_list.is_empty());
    let dec = |s: &str| s.parse::<rust_decimal::Decimal>().unwrap();
    for p in price_list.values() {
        // The price is rounded to the millionth, and so is the quantity written beside it.
        let (price, quantity) = (dec(&p["ListUnitPrice"]), dec(&p["x_MonthQuantity"]));
        let off = price * quantity - dec(&p["x_MonthCost"]);
        assert!(off.abs() <= dec("0.0000005") * (quantity + price), "{p:?}");
    }
    for r in rows14.iter().filter(|r| !r["SkuPriceId"].is_empty()) {
        let p = &price_list[&r["SkuPriceId"]];
        assert_eq!(r["ListUnitPrice"], p["ListUnitPrice"]);
        assert_eq!(
            dec(&r["ListCost"]),
            dec(&r["ListUnitPrice"]) * dec(&r["PricingQuantity"])
        );
    }
    // Like every export, for finance only.
    assert_eq!(
        bytes(
            &app,
            &app.tenant_token("a"),
            "/v1/chargeback/months/2026-09/exports/prices"
        )
        .await
        .0,
        403
    );
    assert_eq!(
        bytes(
            &app,
            &finance,
            "/v1/chargeback/months/2026-09/exports/focus?version=1.2"
        )
        .await
        .1,
        focus_before,
        "1.2 by name is the default"
    );
    for bad in ["focus?version=1.3", "csv?version=1.4", "json?version=1.2"] {
        let path = format!("/v1/chargeback/months/2026-09/exports/{bad}");
        assert_eq!(bytes(&app, &finance, &path).await.0, 422, "{bad}");
    }
    let listed: Vec<(&str, Option<&str>, &str)> = sep["exports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["format"].as_str().unwrap(),
                e["focus_version"].as_str(),
                e["url"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("csv", None, "/v1/chargeback/months/2026-09/exports/csv"),
            (
                "focus",
                Some("1.2"),
                "/v1/chargeback/months/2026-09/exports/focus"
            ),
            ("json", None, "/v1/chargeback/months/2026-09/exports/json"),
            ("focus", Some("1.4"), focus14),
            (
                "prices",
                None,
                "/v1/chargeback/months/2026-09/exports/prices"
            ),
        ]
    );
    assert_eq!(
        sep["exports"][3]["file_name"],
        "wattledger-2026-09-v1-focus-1.4.csv"
    );
    let (_, a_before) = app
        .get(
            Some(&app.tenant_token("a")),
            "/v1/chargeback/months/2026-09/statements/a",
        )
        .await;

    // Late data for September after the close: the meters report 11:00–11:30 too (every job
    // had ended, so it is idle: 30 min × 1600 W × 1.25 = 3.6e9 mJ = 1 kWh = 0.20 EUR to the
    // platform), and a late scheduler record puts tenant b on the other half of g1 for the
    // scenario hour, moving that half's energy from the platform to b.
    let mut late = Vec::new();
    for i in 61..=90i64 {
        for (meter, per_min) in [
            ("n1", 96_000_000i64),
            ("g0", 42_000_000),
            ("g1", 18_000_000),
            ("g2", 24_000_000),
        ] {
            late.push(json!({"meter": meter, "ts": scenario::at_from(HOUR, i), "counter_mj": 5_000_000 + i * per_min}));
        }
    }
    let (status, body) = app
        .ingest(&app.token(Role::Collector), "samples", Value::Array(late))
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = app
        .ingest(
            &app.token(Role::Scheduler),
            "jobs",
            json!([{"key": "job-late", "tenant": "b", "kind": "batch", "start_at": HOUR,
                    "end_at": scenario::at_from(HOUR, 60),
                    "allocations": [{"meter": "g1", "share": "0.5", "start_at": HOUR, "end_at": scenario::at_from(HOUR, 60)}]}]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    app.attribute().await;

    // September's statement and exports are byte for byte what was closed.
    let (_, focus_after, sum_after) = bytes(
        &app,
        &finance,
        "/v1/chargeback/months/2026-09/exports/focus",
    )
    .await;
    assert_eq!(focus_after, focus_before);
    assert_eq!(sum_after, sum);
    let (_, csv_after, _) =
        bytes(&app, &finance, "/v1/chargeback/months/2026-09/exports/csv").await;
    assert_eq!(csv_after, csv_before);
    let (_, focus14_after, sum14_after) = bytes(&app, &finance, focus14).await;
    assert_eq!((focus14_after, sum14_after), (focus14_before, sum14));
    let (_, a_after) = app
        .get(
            Some(&app.tenant_token("a")),
            "/v1/chargeback/months/2026-09/statements/a",
        )
        .await;
    assert_eq!(a_after, a_before);

    // October bills the difference as adjustment lines for September.
    let (status, oct) = app
        .post_raw(
            &finance,
            "/v1/chargeback/months/2026-10/close",
            String::new(),
        )
        .await;
    assert_eq!(status, 201, "{oct}");
    let b_adj = statement(&oct, "b");
    let moved = line(b_adj, "batch");
    assert_eq!(
        (moved["kind"].as_str(), moved["usage_period"].as_str()),
        (Some("adjustment"), Some("2026-09"))
    );
    assert!(moved["energy_mj"].as_i64().unwrap() > 0);
    let idle = line(statement(&oct, "platform"), "platform");
    assert_eq!(idle["kind"], "adjustment");
    // Every line is an adjustment for September, and together they are exactly the late
    // half hour: energy moved between tenants nets to zero.
    let lines: Vec<&Value> = oct["statements"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["lines"].as_array().unwrap())
        .collect();
    assert!(lines
        .iter()
        .all(|l| l["kind"] == "adjustment" && l["usage_period"] == "2026-09"));
    assert_eq!(
        lines
            .iter()
            .map(|l| l["energy_mj"].as_i64().unwrap())
            .sum::<i64>(),
        3_600_000_000
    );
    let exact: rust_decimal::Decimal = lines
        .iter()
        .map(|l| {
            l["energy_cost"]
                .as_str()
                .unwrap()
                .parse::<rust_decimal::Decimal>()
                .unwrap()
        })
        .sum();
    assert_eq!(exact, rust_decimal::Decimal::new(20, 2));
    // October metered nothing; the adjustments are shown beside the balance.
    let site = &oct["reconciliation"][0];
    assert_eq!(
        (site["metered_mj"].as_i64(), site["adjustments_mj"].as_i64()),
        (Some(0), Some(3_600_000_000))
    );

    // Reopening: admin only, the latest month only, with a reason; closing again is v2 with
    // the same lines, and the audit trail has all three.
    let reopen = |month: &str, reason: &str| {
        (
            format!("/v1/chargeback/months/{month}/reopen"),
            json!({"reason": reason}).to_string(),
        )
    };
    let (path, body) = reopen("2026-10", "price correction");
    assert_eq!(app.post_raw(&finance, &path, body.clone()).await.0, 403);
    let (path9, body9) = reopen("2026-09", "x");
    let (status, err) = app.post_raw(&admin, &path9, body9).await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (409, Some("later_month_closed"))
    );
    let (status, err) = app
        .post_raw(&admin, &path, json!({"reason": " "}).to_string())
        .await;
    assert_eq!(
        (status, err["error"]["errors"][0]["field"].as_str()),
        (422, Some("reason"))
    );
    let (status, reopened) = app.post_raw(&admin, &path, body).await;
    assert_eq!(
        (status, reopened["reopened_version"].as_i64()),
        (200, Some(1)),
        "{reopened}"
    );
    let (status, _) = app
        .get(Some(&finance), "/v1/chargeback/months/2026-10")
        .await;
    assert_eq!(status, 404, "an open month has no statements");
    let (status, oct2) = app
        .post_raw(
            &finance,
            "/v1/chargeback/months/2026-10/close",
            String::new(),
        )
        .await;
    assert_eq!(status, 201, "{oct2}");
    assert_eq!(oct2["version"], 2);
    assert_eq!(statement(&oct2, "b")["number"], "WL-2026-10-b-EUR-v2");
    assert_eq!(statement(&oct2, "b")["lines"], b_adj["lines"]);
    let actions: Vec<(&str, i64)> = oct2["audit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["action"].as_str().unwrap(),
                a["version"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(actions, [("closed", 1), ("reopened", 1), ("closed", 2)]);
    assert_eq!(oct2["audit"][1]["reason"], "price correction");

    let (status, months) = app.get(Some(&finance), "/v1/chargeback/months").await;
    assert_eq!(status, 200);
    let states: Vec<(&str, &str)> = months
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["month"].as_str().unwrap(), m["state"].as_str().unwrap()))
        .collect();
    assert_eq!(states, [("2026-10", "closed"), ("2026-09", "closed")]);
}

#[tokio::test]
async fn tenants_read_only_their_own_statements_finance_reads_all() {
    let app = TestApp::start().await;
    september(&app).await;
    let finance = app.token(Role::Finance);
    // A tenant's endpoint hears about its statement (the outbox, in the close's transaction).
    let (status, body) = app
        .post_raw(
            &app.tenant_token("a"),
            "/v1/webhooks/endpoints",
            json!({"url": "http://127.0.0.1:9/hooks", "event_types": ["chargeback.closed"]})
                .to_string(),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, _) = app
        .post_raw(
            &finance,
            "/v1/chargeback/months/2026-09/close",
            String::new(),
        )
        .await;
    assert_eq!(status, 201);
    let queued: Vec<(String, String)> =
        sqlx::query_as("SELECT event_type, payload FROM webhook_messages")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(queued.len(), 1, "only a subscribed");
    let payload: Value = serde_json::from_str(&queued[0].1).unwrap();
    assert_eq!(
        (queued[0].0.as_str(), payload["data"]["statement"].as_str()),
        ("chargeback.closed", Some("WL-2026-09-a-EUR-v1"))
    );
    assert_eq!(payload["data"]["billed_cost"], "0.24");

    let a = app.tenant_token("a");
    let (status, mine) = app.get(Some(&a), "/v1/chargeback/months/2026-09").await;
    assert_eq!(status, 200);
    let tenants: Vec<&str> = mine["statements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["tenant"].as_str().unwrap())
        .collect();
    assert_eq!(tenants, ["a"]);
    assert_eq!(
        mine["reconciliation"],
        json!([]),
        "the site's meters are finance's"
    );
    assert_eq!(mine["exports"], json!([]));
    // Another tenant's statement is not found, as a tenant that does not exist.
    assert_eq!(
        app.get(Some(&a), "/v1/chargeback/months/2026-09/statements/b")
            .await
            .0,
        404
    );
    assert_eq!(
        app.get(Some(&a), "/v1/chargeback/months/2026-09/statements/nobody")
            .await
            .0,
        404
    );
    for export in ["focus", "focus?version=1.4"] {
        let path = format!("/v1/chargeback/months/2026-09/exports/{export}");
        assert_eq!(bytes(&app, &a, &path).await.0, 403, "{export}");
    }
    // Its own as CSV: its rows only.
    let (status, csv, _) = bytes(
        &app,
        &a,
        "/v1/chargeback/months/2026-09/statements/a?format=csv",
    )
    .await;
    assert_eq!(status, 200);
    let csv = String::from_utf8(csv).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
    assert!(csv
        .lines()
        .skip(1)
        .all(|l| l.starts_with("WL-2026-09-a-EUR-v1,")));

    let (status, all) = app
        .get(Some(&finance), "/v1/chargeback/months/2026-09")
        .await;
    assert_eq!(status, 200);
    assert_eq!(all["statements"].as_array().unwrap().len(), 3);
    assert_eq!(all["exports"].as_array().unwrap().len(), 5);
    assert_eq!(
        app.get(Some(&finance), "/v1/chargeback/months/2026-09/statements/b")
            .await
            .0,
        200
    );
    for bad in [
        "/v1/chargeback/months/2026-9",
        "/v1/chargeback/months/september",
    ] {
        assert_eq!(app.get(Some(&finance), bad).await.0, 400, "{bad}");
    }
    assert_eq!(
        app.get(Some(&finance), "/v1/chargeback/months/2026-09/exports/xlsx")
            .await
            .0,
        404
    );
    assert_eq!(
        app.get(Some(&app.token(Role::Collector)), "/v1/chargeback/months")
            .await
            .0,
        403
    );
}

/// Rules of focus-validator 2.2.1 (model 1.2.0.1) that no dataset can pass: the two halves of
/// InvoiceId's conditional nullability are both enforced without their condition, so every
/// dataset fails one (FOCUS_Spec#2394 is the umbrella for this class of validator defect).
pub(crate) const VALIDATOR_DEFECT: &str = "InvoiceId-C-004-C";

/// FOCUS 1.2 through the validator's own model: whether it passed, and the failed rules.
pub(crate) fn validate(file: &Path) -> (bool, Vec<String>) {
    let (passed, text) = run_validator(file, &[]);
    (passed, failed_rules(&text))
}

/// `../shared/tools/focus-validate FILE ARGS…` (extra arguments go to focus-validator after
/// its own, so a later `--validate-version` wins): whether it passed, and all it printed.
fn run_validator(file: &Path, args: &[&str]) -> (bool, String) {
    // The tool builds its venv on first use: two tests doing so at once on a fresh machine
    // collide ("File exists"). The first run holds the others back until it is built.
    static BUILT: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let first = if *built { None } else { Some(built) };
    let tool = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/tools/focus-validate");
    let out = Command::new(tool)
        .arg(file)
        .args(args)
        .output()
        .expect("run ../shared/tools/focus-validate");
    if let Some(mut built) = first {
        *built = true;
    }
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

fn failed_rules(text: &str) -> Vec<String> {
    assert!(
        text.contains("Total:"),
        "the validator did not run:\n{text}"
    );
    text.lines()
        .filter_map(|l| l.strip_prefix("- "))
        .filter_map(|l| l.split(':').next())
        .map(str::to_owned)
        .collect()
}

/// The demo's own month, closed by `wattledger demo` and written to its export folder,
/// through the FinOps Foundation's validator: no failure but the validator's own defect,
/// which the same file with InvoiceId emptied shows by failing the other half instead.
#[tokio::test]
async fn the_demo_months_focus_export_passes_the_focus_validator() {
    let crate::demo::Demo { dir, stdout, .. } = crate::demo::demo().await;
    let month = wattledger_domain::chargeback::Month::of(chrono::Utc::now()).prev();
    assert!(
        stdout.contains(&format!("Chargeback {month} closed (v1)")),
        "{stdout}"
    );
    assert!(!stdout.contains("UNBALANCED"), "{stdout}");
    let folder = dir.join("exports").join(month.to_string()).join("v1");
    let focus = folder.join(format!("wattledger-{month}-v1-focus-1.2.csv"));
    let content = std::fs::read_to_string(&focus).unwrap();
    assert!(content.lines().count() > 20, "{content}");
    // SHA256SUMS matches the files.
    let sums = std::fs::read_to_string(folder.join("SHA256SUMS")).unwrap();
    for l in sums.lines() {
        let (sum, name) = l.split_once("  ").unwrap();
        assert_eq!(
            wattledger_domain::chargeback::sha256_hex(&std::fs::read(folder.join(name)).unwrap()),
            sum
        );
    }

    let (passed, failed) = validate(&focus);
    assert!(
        passed || failed == [VALIDATOR_DEFECT],
        "FOCUS validator failures: {failed:?}"
    );
    if !passed {
        // The same rows with InvoiceId null fail the other half, and only it.
        let header: Vec<&str> = content.lines().next().unwrap().split(',').collect();
        let col = header.iter().position(|c| *c == "InvoiceId").unwrap();
        let nulled: String = content
            .lines()
            .enumerate()
            .map(|(i, l)| {
                if i == 0 {
                    return format!("{l}\r\n");
                }
                let mut f = split_csv(l);
                f[col] = String::new();
                let mut out = String::new();
                wattledger_domain::chargeback::csv::row(&mut out, f);
                out
            })
            .collect();
        let nulled_path = dir.join("focus-invoiceid-null.csv");
        std::fs::write(&nulled_path, nulled).unwrap();
        let (_, failed) = validate(&nulled_path);
        assert_eq!(failed, ["InvoiceId-C-005-C"]);
    }
}

/// The FOCUS 1.4 file beside 1.2: in the folder the demo's close writes (and its
/// `SHA256SUMS`), and from `wattledger chargeback export`, whose `--format focus-1.4` writes it
/// alone and whose default (`all`) writes it with the others. Each is the 1.4 rendering of the
/// stored close: a 1.4 header (`ServiceProviderName`, no `ProviderName`), the same bytes
/// whoever writes it.
#[tokio::test]
async fn the_demo_folder_and_the_cli_export_write_focus_1_4_beside_1_2() {
    let demo = crate::demo::demo().await;
    let month = wattledger_domain::chargeback::Month::of(chrono::Utc::now()).prev();
    let folder = demo.dir.join("exports").join(month.to_string()).join("v1");
    let name_12 = format!("wattledger-{month}-v1-focus-1.2.csv");
    let name_14 = format!("wattledger-{month}-v1-focus-1.4.csv");
    let demo_14 = std::fs::read(folder.join(&name_14)).unwrap_or_else(|e| {
        panic!(
            "no FOCUS 1.4 in the demo's folder {}: {e}",
            folder.display()
        )
    });
    let text = String::from_utf8(demo_14.clone()).unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    assert_eq!(header, focus::Version::V1_4.columns());
    assert!(header.contains(&"ServiceProviderName"), "{header:?}");
    assert!(!header.contains(&"ProviderName"), "{header:?}");
    // The 1.2 file is still there, with its own header, and both are checksummed.
    let text_12 = std::fs::read_to_string(folder.join(&name_12)).unwrap();
    assert!(text_12
        .lines()
        .next()
        .unwrap()
        .split(',')
        .any(|c| c == "ProviderName"));
    // 1.4 adds a GPU-time row (at a price of 0) to each line whose GPU time no rate billed.
    assert!(text.lines().count() >= text_12.lines().count());
    let name_prices = format!("wattledger-{month}-v1-prices.csv");
    let sums = std::fs::read_to_string(folder.join("SHA256SUMS")).unwrap();
    let listed: Vec<&str> = sums
        .lines()
        .filter_map(|l| l.split_once("  "))
        .map(|x| x.1)
        .collect();
    assert_eq!(
        listed,
        [
            format!("wattledger-{month}-v1-statements.csv"),
            name_12.clone(),
            name_14.clone(),
            name_prices.clone(),
            format!("wattledger-{month}-v1.json"),
        ]
    );
    let pool = wattledger_store::connect(&demo.db_url, 2).await.unwrap();
    let close = wattledger_store::chargeback::load(&pool, month, &wattledger_store::Scope::All)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        demo_14,
        focus::render(&close, focus::Version::V1_4).into_bytes()
    );

    let export = |format: Option<&str>, out: &Path| {
        let mut cmd = Command::new(crate::agent::binary("wattledger"));
        cmd.args(["--database-url", &demo.db_url])
            .args(["chargeback", "export", &month.to_string(), "--out"])
            .arg(out)
            .env("RUST_LOG", "warn");
        if let Some(f) = format {
            cmd.args(["--format", f]);
        }
        let o = cmd.output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let base = demo.dir.join("cli-exports");
    let only = base.join("only-1.4");
    let printed = export(Some("focus-1.4"), &only);
    let got = only.join(month.to_string()).join("v1");
    assert!(printed.contains(&name_14), "{printed}");
    assert_eq!(std::fs::read(got.join(&name_14)).unwrap(), demo_14);
    assert!(!got.join(&name_12).exists());
    // `--format focus` stays 1.2.
    let v12 = base.join("focus");
    export(Some("focus"), &v12);
    let got = v12.join(month.to_string()).join("v1");
    assert_eq!(
        std::fs::read_to_string(got.join(&name_12)).unwrap(),
        text_12
    );
    assert!(!got.join(&name_14).exists());
    // `--format prices`: the price list alone, as in the demo's folder.
    let only_prices = base.join("prices");
    export(Some("prices"), &only_prices);
    let got = only_prices.join(month.to_string()).join("v1");
    assert_eq!(
        std::fs::read(got.join(&name_prices)).unwrap(),
        std::fs::read(folder.join(&name_prices)).unwrap()
    );
    // All: the demo's folder again, file for file, SHA256SUMS included.
    let all = base.join("all");
    export(None, &all);
    let got = all.join(month.to_string()).join("v1");
    for name in listed.iter().copied().chain(["SHA256SUMS"]) {
        assert_eq!(
            std::fs::read(got.join(name)).unwrap(),
            std::fs::read(folder.join(name)).unwrap(),
            "{name}"
        );
    }
}

/// FOCUS 1.4's rule model: `model-1.4.json`, the release asset of FOCUS_Spec v1.4 that the
/// validator downloads from the releases (which this machine cannot reach), read from
/// `../shared/fixtures/focus/1.4/` beside the checkout (its source in `SOURCES.md` there;
/// `WATTLEDGER_FOCUS_1_4_MODEL` overrides the path). Pinned by its SHA-256.
const MODEL_1_4_SHA256: &str = "3dd2c0c6fcc2c3d1792060fcbebba4ae074cd4dade8cde72958bd37a9a8b183f";

/// The 1.4 features whose columns the export carries (split cost allocation, payable
/// invoices, region, usage measurement, unit prices in a published price list with two
/// pricing categories), so the validator holds those columns to their rules too rather
/// than skipping them. Not negotiated pricing: the contracted price is the list price.
const CRITERIA_1_4: &str = "DATA_GENERATOR_SPLIT_COST_ALLOCATION_SUPPORTED,\
INVOICE_ISSUER_PAYABLE_INVOICES_SUPPORTED,REGION_SUPPORTED,USAGE_MEASUREMENT_SUPPORTED,\
PUBLIC_PRICE_LIST_SUPPORTED,UNIT_PRICING_SUPPORTED,MULTIPLE_PRICING_CATEGORIES_SUPPORTED";

/// Rules on columns the export carries that focus-validator 2.2.1 fails with FOCUS 1.4's
/// model whatever the data, each with why; the test checks each of them by its text on the
/// file instead ([`holds_by_its_text`]). (The rules of columns the export does not carry fail
/// too: the validator skips a non-applicable column's rules by the rule id's first segment,
/// which in 1.4's `CAU-Column-…` ids is `CAU`, so none are skipped.)
const VALIDATOR_DEFECTS_1_4: [&str; 7] = [
    // "Null when ChargeCategory is not Usage, or when it is Usage and CommitmentDiscountStatus
    // is Unused": the condition names CommitmentDiscountStatus, a column the file does not
    // carry (no commitment discounts), and a condition on an absent column fails instead of
    // not holding.
    "CAU-ConsumedQuantity-C-004-C",
    // "Not null when ChargeClass is not Correction": encoded with its condition inverted
    // (`CheckValue ChargeClass = Correction`), so it demands a quantity on the corrections,
    // which C-007 lets be null and C-009 must null (a correction has no SKU price of this
    // month).
    "CAU-ConsumedQuantity-C-006-C",
    // Composites failing with the two above: C-005 (C-006, under a condition on the absent
    // CommitmentDiscountStatus), C-003 (C-004, C-005, C-009), C-000 (C-003).
    "CAU-ConsumedQuantity-C-005-C",
    "CAU-ConsumedQuantity-C-003-C",
    "CAU-ConsumedQuantity-C-000-C",
    // Passes when run alone (`--filter-rules CAU-ChargeCategory-C-002-M`): a whole run
    // carries another rule's upstream failure into it.
    "CAU-ChargeCategory-C-002-M",
    "CAU-ChargeCategory-C-000-M",
];

/// The set-aside rules by their text, on the export's rows (by column name): each must hold.
/// (The demo's month has neither a credit nor a correction; the unit tests of `focus::v1_4`
/// try the null sides on a close that has one.)
fn holds_by_its_text(rows: &[BTreeMap<String, String>]) {
    for (i, r) in rows.iter().enumerate() {
        let usage = r["ChargeCategory"] == "Usage";
        let correction = r["ChargeClass"] == "Correction";
        let quantity = &r["ConsumedQuantity"];
        // C-004: null when not Usage (no commitment discounts, so never "Unused").
        assert!(usage || quantity.is_empty(), "C-004, row {i}: {r:?}");
        // C-005/C-006: on Usage, not null unless a correction.
        assert!(
            !usage || correction || !quantity.is_empty(),
            "C-006, row {i}: {r:?}"
        );
        // C-009: null when SkuPriceId is.
        assert!(
            !r["SkuPriceId"].is_empty() || quantity.is_empty(),
            "C-009, row {i}"
        );
    }
}

fn model_1_4() -> Value {
    let path = std::env::var_os("WATTLEDGER_FOCUS_1_4_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../shared/fixtures/focus/1.4/model-1.4.json")
        });
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "FOCUS 1.4's rule model {} (shared/ beside the checkout, or \
             WATTLEDGER_FOCUS_1_4_MODEL): {e}",
            path.display()
        )
    });
    assert_eq!(
        wattledger_domain::chargeback::sha256_hex(&bytes),
        MODEL_1_4_SHA256,
        "{} is not FOCUS 1.4's published model",
        path.display()
    );
    serde_json::from_slice(&bytes).unwrap()
}

/// The published model with FOCUS_Spec's erratum for its one dependency cycle (FOCUS_Spec
/// #2536, fixed by PR #2609; reported as focus_validator #149): CommitmentDiscountUnit's
/// rules C-005 and C-006 depend on CommitmentDiscountQuantity's nullability rule (C-003), not
/// on its root (C-000), which depends on them in turn.
fn with_erratum(model: &Value) -> Value {
    let mut model = model.clone();
    for rule in [
        "CAU-CommitmentDiscountUnit-C-005-C",
        "CAU-CommitmentDiscountUnit-C-006-C",
    ] {
        let deps = &mut model["ModelRules"][rule]["ValidationCriteria"]["Dependencies"];
        assert_eq!(
            deps,
            &json!(["CAU-CommitmentDiscountQuantity-C-000-C"]),
            "{rule}"
        );
        *deps = json!(["CAU-CommitmentDiscountQuantity-C-003-C"]);
    }
    model
}

/// A rule-set folder holding `model` as the validator looks for it.
fn rule_set(dir: &Path, name: &str, model: &Value) -> String {
    let folder = dir.join(name);
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("model-1.4.json"), model.to_string()).unwrap();
    folder.to_str().unwrap().to_owned()
}

/// The demo's own month as FOCUS 1.4 through the FinOps Foundation's validator with FOCUS
/// 1.4's own rules. Control runs: the model as published does not load in the validator at
/// all (a cycle in its rules, whatever the data), so the run that counts uses it with the
/// erratum FOCUS_Spec published for that cycle and nothing else changed; and that run does
/// check the data: the same file with `ServiceProviderName` emptied fails its rule.
#[tokio::test]
async fn the_demo_months_focus_1_4_export_passes_focus_1_4s_rules() {
    let model = model_1_4();
    let demo = crate::demo::demo().await;
    let month = wattledger_domain::chargeback::Month::of(chrono::Utc::now()).prev();
    let pool = sqlx::PgPool::connect(&demo.db_url).await.unwrap();
    let close = wattledger_store::chargeback::load(&pool, month, &wattledger_store::Scope::All)
        .await
        .unwrap()
        .expect("the demo closed its month");
    let export = focus::export(&close, focus::Version::V1_4);
    let dir = demo.dir.join("focus-1.4");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(&export.file_name);
    std::fs::write(&file, &export.content).unwrap();
    let content = String::from_utf8(export.content).unwrap();
    assert!(content.lines().count() > 20, "{content}");
    // Every rule's result as JUnit XML (the console lists only the first failures).
    let report = dir.join("report.xml");
    let args = |rules: &str, only: Option<&str>| {
        let mut a = vec![
            "--validate-version",
            "1.4",
            "--rule-set-path",
            rules,
            "--applicability-criteria",
            CRITERIA_1_4,
            "--output-type",
            "unittest",
            "--output-destination",
            report.to_str().unwrap(),
        ]
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
        if let Some(rule) = only {
            a.extend(["--filter-rules".to_owned(), rule.to_owned()]);
        }
        a
    };
    let run = |rules: &str, file: &Path, only: Option<&str>| {
        let _ = std::fs::remove_file(&report);
        let args = args(rules, only);
        let (_, text) = run_validator(file, &args.iter().map(String::as_str).collect::<Vec<_>>());
        (std::fs::read_to_string(&report).unwrap_or_default(), text)
    };

    let (report, text) = run(&rule_set(&dir, "published", &model), &file, None);
    assert!(
        report.is_empty() && text.contains("Active-edge cycle detected"),
        "the published model loads now: drop the erratum\n{text}"
    );

    let fixed = rule_set(&dir, "erratum", &with_erratum(&model));
    let (report, text) = run(&fixed, &file, None);
    let header: Vec<&str> = content.lines().next().unwrap().split(',').collect();
    let carried = |rule: &str| {
        let column = model["ModelRules"][rule]["Reference"]
            .as_str()
            .unwrap_or_default();
        header.contains(&column) || column == "CostAndUsage"
    };
    let failed = junit_failures(&report);
    assert!(
        report.contains("<testsuites"),
        "the validator did not run:\n{text}"
    );
    let ours: Vec<&String> = failed
        .iter()
        .filter(|r| carried(r) && !VALIDATOR_DEFECTS_1_4.contains(&r.as_str()))
        .collect();
    assert!(
        ours.is_empty(),
        "FOCUS 1.4 validator failures: {ours:?}\n{text}"
    );
    let names: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    let rows: Vec<BTreeMap<String, String>> = content
        .lines()
        .skip(1)
        .map(|l| names.iter().cloned().zip(split_csv(l)).collect())
        .collect();
    holds_by_its_text(&rows);
    // A FOCUS reader summing ConsumedQuantity by unit gets the month's kWh and GPU-hours.
    let sum = |unit: &str| -> rust_decimal::Decimal {
        rows.iter()
            .filter(|r| r["ConsumedUnit"] == unit)
            .map(|r| {
                r["ConsumedQuantity"]
                    .parse::<rust_decimal::Decimal>()
                    .unwrap()
            })
            .sum()
    };
    let usage = || close.statements.iter().flat_map(|s| s.usage(close.month));
    assert_eq!(sum("kWh"), usage().map(|l| l.energy_kwh).sum());
    assert_eq!(sum("GPU-Hours"), usage().map(|l| l.gpu_hours).sum());
    assert!(sum("GPU-Hours") > rust_decimal::Decimal::ZERO);
    // GPU time is priced per device model: each GPU-time row names the model its hours ran
    // on, and its SKU is that model's at its site. The demo's MI300Xs carry a rate of 1.85
    // USD per GPU-hour, so their price is at least that (more where idle hours' price went
    // to the held ones); its H100s carry none.
    let gpu_rows = || rows.iter().filter(|r| r["ConsumedUnit"] == "GPU-Hours");
    let mut models = std::collections::BTreeSet::new();
    for r in gpu_rows() {
        let model = &r["x_DeviceModel"];
        assert!(r["SkuId"].ends_with(&format!("/{model}")), "{r:?}");
        models.insert(model.clone());
        let price: rust_decimal::Decimal = r["ListUnitPrice"].parse().unwrap();
        match model.as_str() {
            "AMD Instinct MI300X" => assert!(price >= "1.85".parse().unwrap(), "{r:?}"),
            "NVIDIA H100 80GB HBM3" => assert!(price.is_zero(), "{r:?}"),
            other => panic!("a device model the demo has not: {other:?}"),
        }
    }
    assert_eq!(models.len(), 2, "{models:?}");
    // The rows of a line add up to what its statement line bills for GPU time.
    for s in &close.statements {
        for l in s.usage(close.month) {
            let billed: rust_decimal::Decimal = gpu_rows()
                .filter(|r| {
                    r["InvoiceId"] == s.number
                        && r["InvoiceDetailId"].starts_with(&format!("L{}-gpu-time", l.no))
                })
                .map(|r| r["BilledCost"].parse::<rust_decimal::Decimal>().unwrap())
                .sum();
            assert_eq!(billed, l.billed_gpu_time_cost, "{l:?}");
        }
    }
    let total = report.lines().find(|l| l.contains("<testsuites")).unwrap();
    eprintln!(
        "FOCUS 1.4 validator, {} rows: {total}; failed on columns carried: {:?}",
        content.lines().count() - 1,
        failed.iter().filter(|r| carried(r)).collect::<Vec<_>>()
    );
    // The whole-run carry-over, shown: the rule alone passes on the same file.
    let (alone, text) = run(&fixed, &file, Some("CAU-ChargeCategory-C-002-M"));
    assert!(
        alone.contains("tests=\"1\"") && junit_failures(&alone).is_empty(),
        "{text}\n{alone}"
    );

    let col = header
        .iter()
        .position(|c| *c == "ServiceProviderName")
        .unwrap();
    let broken: String = content
        .lines()
        .enumerate()
        .map(|(i, l)| {
            let mut f = split_csv(l);
            if i > 0 {
                f[col] = String::new();
            }
            let mut out = String::new();
            wattledger_domain::chargeback::csv::row(&mut out, f);
            out
        })
        .collect();
    let broken_path = dir.join("focus-1.4-no-service-provider.csv");
    std::fs::write(&broken_path, broken).unwrap();
    let (report, text) = run(&fixed, &broken_path, None);
    assert!(
        junit_failures(&report).contains(&"CAU-ServiceProviderName-C-003-M".to_owned()),
        "{text}"
    );
}

/// The rules a validator JUnit report failed or errored on (`<testcase name="RULE :: Kind">`
/// holding a `<failure>` or an `<error>`).
fn junit_failures(xml: &str) -> Vec<String> {
    xml.split("<testcase ")
        .skip(1)
        .filter_map(|case| {
            let body = case.split("</testcase>").next().unwrap_or_default();
            let name = body.strip_prefix("name=\"")?.split([' ', '"']).next()?;
            (body.contains("<failure") || body.contains("<error")).then(|| name.to_owned())
        })
        .collect()
}

/// Splits one RFC 4180 row (no line breaks inside fields).
pub(crate) fn split_csv(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                fields.last_mut().unwrap().push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(String::new()),
            (c, _) => fields.last_mut().unwrap().push(c),
        }
    }
    fields
}
