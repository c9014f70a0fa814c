//! Demand response end to end: a grid event's baseline, reduction and credit against a
//! hand-computed history, the month close's credit lines, and admission moving flexible work
//! out of an event's window.
//!
//! Site s1 has one facility meter. On each of the 16 days before Wednesday 2026-10-28, day
//! `k` back draws (100 + k) kWh in each of the hours 14:00 and 15:00 UTC. The event `dr-28`
//! asks a 15 kW reduction over 14:00–16:00 on the 28th, at 0.30 EUR per kWh shed; another
//! event (`dr-21`) was on the 21st. Baseline `weekdays-10`: the weekdays back from the 28th
//! are k = 1, 2, 5, 6, (7 = the 21st: an event day, left out), 8, 9, 12, 13, 14, 15, so
//! Σk = 85 and each hour's baseline is 100 + 8.5 = 108.5 kWh: 217 kWh for the window. The
//! site drew 90 + 95 = 185 kWh: a reduction of 32 kWh against the 30 asked (met), credited
//! 32 × 0.30 = 9.60 EUR. Admission had moved tenant a's jobs (24 kWh in the window) and
//! b's (16 kWh): 40 ≥ 32, so the 32 kWh split 3:2 — a 19.2 kWh and 5.76 EUR, b 12.8 kWh and
//! 3.84 EUR, which October's close bills as credit lines.

use crate::admission::{ask, ask_until};
use crate::dashboard::Browser;
use chrono::{DateTime, Duration, DurationRound, TimeZone, Utc};
use serde_json::{json, Value};
use wattledger::auth::Role;
use wattledger::dashboard::login::add_user;
use wattledger_tests::TestApp;

const KWH_MJ: i64 = 3_600_000_000;

fn event_day() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 10, 28, 14, 0, 0).unwrap()
}

async fn push_site(app: &TestApp) {
    let admin = app.token(Role::Admin);
    for (what, records) in [
        (
            "tenants",
            json!([{"key": "platform", "name": "Platform"}, {"key": "a", "name": "A"},
                   {"key": "b", "name": "B"}]),
        ),
        (
            "sites",
            json!([{"key": "s1", "name": "Site 1", "grid_region": "DE", "currency": "EUR",
            "power_envelope_w": 1_000_000, "static_pue": "1.0", "idle_policy": "platform",
            "platform_tenant": "platform", "fallback_price": "0.20",
            "fallback_intensity_g": "300"}]),
        ),
        (
            "meters",
            json!([{"key": "f1", "site": "s1", "kind": "facility"}]),
        ),
    ] {
        let (status, body) = app.ingest(&admin, what, records).await;
        assert_eq!(status, 200, "{what}: {body}");
    }
}

/// The facility meter's counter at the hour boundaries: day k back (100 + k) kWh an hour,
/// the event day 90 then 95 kWh; flat between.
async fn push_history(app: &TestApp) {
    let mut samples = Vec::new();
    let mut counter = 1_000 * KWH_MJ;
    for k in (0..=16i64).rev() {
        let from = event_day() - Duration::days(k);
        let hours = if k == 0 { [90, 95] } else { [100 + k, 100 + k] };
        samples.push(json!({"meter": "f1", "ts": from, "step_s": 3600, "counter_mj": counter}));
        for (h, kwh) in hours.iter().enumerate() {
            counter += kwh * KWH_MJ;
            samples.push(
                json!({"meter": "f1", "ts": from + Duration::hours(h as i64 + 1),
                "step_s": 3600, "counter_mj": counter}),
            );
        }
    }
    let (status, body) = app
        .ingest(
            &app.token(Role::Collector),
            "samples",
            Value::Array(samples),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    app.attribute().await;
}

async fn post_event(app: &TestApp, body: Value) -> (u16, Value) {
    app.send(
        reqwest::Method::POST,
        &app.token(Role::Operator),
        "/v1/grid-events",
        body.to_string(),
    )
    .await
}

/// The decisions admission stored for two tenants' moved jobs (what
/// `flexible_work_is_moved_out_of_an_upcoming_event` shows it storing).
async fn moved(app: &TestApp, event: &str, tenant: &str, kwh: i64) {
    sqlx::query(
        "INSERT INTO admission_decisions (id, decided_at, tenant_id, source, kind, priority,
             gpus, decision, site_id, start_at, end_at, reserved_w, request, answer,
             grid_event_id, moved_mj)
         SELECT gen_random_uuid(), $1, t.id, 'api', 'batch', 'normal', 8, 'defer', s.id,
                $2, $3, 1000, '{}', '{}', g.id, $4
         FROM tenants t, sites s, grid_events g WHERE t.key = $5 AND s.key = 's1' AND g.key = $6",
    )
    .bind(event_day() - Duration::hours(3))
    .bind(event_day() + Duration::hours(2))
    .bind(event_day() + Duration::hours(4))
    .bind(kwh * KWH_MJ)
    .bind(tenant)
    .bind(event)
    .execute(&app.pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn an_events_reduction_and_credit_are_what_the_baseline_method_gives_by_hand() {
    let app = TestApp::start().await;
    push_site(&app).await;
    let (status, body) = post_event(
        &app,
        json!({"key": "dr-21", "site": "s1", "starts_at": event_day() - Duration::days(7),
               "ends_at": event_day() - Duration::days(7) + Duration::hours(1),
               "target_cap_kw": "50"}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let event = json!({"key": "dr-28", "site": "s1", "starts_at": event_day(),
        "ends_at": event_day() + Duration::hours(2), "reduction_kw": "15",
        "price_per_kwh": "0.30"});
    let (status, body) = post_event(&app, event.clone()).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["baseline_method"], "weekdays-10");
    // The same event again is no new event; the same key with other values is a conflict.
    let (status, _) = post_event(&app, event.clone()).await;
    assert_eq!(status, 200);
    let mut other = event.clone();
    other["reduction_kw"] = json!("20");
    let (status, body) = post_event(&app, other).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "grid_event_exists");

    push_history(&app).await;
    moved(&app, "dr-28", "a", 24).await;
    moved(&app, "dr-28", "b", 16).await;

    let (status, r) = app
        .get(Some(&app.token(Role::Finance)), "/v1/grid-events/dr-28")
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["status"], "final", "{r}");
    let days: Vec<&str> = r["baseline_days"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    assert_eq!(
        days,
        [
            "2026-10-27",
            "2026-10-26",
            "2026-10-23",
            "2026-10-22",
            "2026-10-20",
            "2026-10-19",
            "2026-10-16",
            "2026-10-15",
            "2026-10-14",
            "2026-10-13"
        ]
    );
    assert_eq!(r["hours"][0]["baseline_kwh"], "108.5");
    assert_eq!(r["hours"][1]["actual_kwh"], "95");
    for (field, want) in [
        ("baseline_kwh", json!("217")),
        ("actual_kwh", json!("185")),
        ("reduction_kwh", json!("32")),
        ("requested_kwh", json!("30")),
        ("met", json!(true)),
        ("credited_kwh", json!("32")),
        ("credit", json!("9.6")),
    ] {
        assert_eq!(r[field], want, "{field}: {r}");
    }
    let c = &r["contributions"];
    assert_eq!(
        [&c[0]["tenant"], &c[0]["credited_kwh"], &c[0]["credit"]],
        ["a", "19.2", "5.76"],
        "{r}"
    );
    assert_eq!(
        [&c[1]["tenant"], &c[1]["credited_kwh"], &c[1]["credit"]],
        ["b", "12.8", "3.84"],
        "{r}"
    );

    // days-3 on the same history (weekends count): the 27th, 26th, 25th → 101.. 103 kWh.
    let (status, r3) = post_event(
        &app,
        json!({"key": "dr-28-days", "site": "s1", "starts_at": event_day(),
               "ends_at": event_day() + Duration::hours(1), "reduction_kw": "1",
               "baseline_method": "days-3"}),
    )
    .await;
    assert_eq!(status, 201, "{r3}");
    assert_eq!(
        (&r3["baseline_kwh"], &r3["credit"]),
        (&json!("102"), &Value::Null)
    );

    // Bad events are refused by field.
    let (status, bad) = post_event(
        &app,
        json!({"key": "x", "site": "nope", "starts_at": "2026-11-18T14:30:00Z",
               "ends_at": "2026-11-20T14:00:00Z", "baseline_method": "weekdays-99"}),
    )
    .await;
    assert_eq!(status, 422, "{bad}");
    let mut fields: Vec<&str> = bad["error"]["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap())
        .collect();
    fields.sort();
    assert_eq!(
        fields,
        [
            "baseline_method",
            "ends_at",
            "site",
            "starts_at",
            "target_cap_kw"
        ],
        "{bad}"
    );
    let (status, _) = app
        .get(Some(&app.tenant_token("a")), "/v1/grid-events")
        .await;
    assert_eq!(status, 403);

    // The event's page shows the same figures; the operator page lists the event.
    for (user, role, tenant) in [
        ("fin", Role::Finance, None),
        ("alice", Role::Tenant, Some("a")),
    ] {
        add_user(&app.pool, user, role, tenant, "correct horse battery")
            .await
            .unwrap();
    }
    let mut finance = Browser::new(&app);
    finance.sign_in("fin", "correct horse battery").await;
    let page = finance.get("/grid-events/dr-28").await;
    assert_eq!(page.status, 200, "{}", page.body);
    for want in [
        "217.0 kWh",
        "185.0 kWh",
        "32.0 kWh",
        "met of 30.0 kWh asked",
        "9.60 EUR",
        "5.76 EUR",
        "3.84 EUR",
        "previous 10 weekdays without an event (weekdays-10)",
        "Tue Oct 27",
        "final",
    ] {
        assert!(page.body.contains(want), "{want} not on the page");
    }
    let operator = finance.get("/operator?from=2026-10-21&to=2026-10-31").await;
    assert!(operator.body.contains("href=\"/grid-events/dr-28\""));
    assert!(operator.body.contains("1 + its measured headroom"));
    let mut alice = Browser::new(&app);
    alice.sign_in("alice", "correct horse battery").await;
    assert_eq!(alice.get("/grid-events/dr-28").await.status, 404);

    // October's close bills each tenant's share as a credit line: no energy, the credit
    // negated; the FOCUS export calls it a Credit and passes the validator.
    let finance_token = app.token(Role::Finance);
    let (status, body) = app
        .post_raw(
            &finance_token,
            "/v1/chargeback/months/2026-10/close",
            String::new(),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    for (tenant, credit) in [("a", "-5.76"), ("b", "-3.84")] {
        let (status, st) = app
            .get(
                Some(&app.tenant_token(tenant)),
                &format!("/v1/chargeback/months/2026-10/statements/{tenant}"),
            )
            .await;
        assert_eq!(status, 200, "{st}");
        let lines = st[0]["lines"].as_array().unwrap();
        let credit_lines: Vec<&Value> = lines
            .iter()
            .filter(|l| l["job_class"] == "demand_response_credit")
            .collect();
        assert_eq!(credit_lines.len(), 1, "{st}");
        let l = credit_lines[0];
        assert_eq!(
            (&l["billed_cost"], &l["energy_mj"]),
            (&json!(credit), &json!(0)),
            "{l}"
        );
    }
    let (status, focus, _) = crate::chargeback::bytes(
        &app,
        &finance_token,
        "/v1/chargeback/months/2026-10/exports/focus",
    )
    .await;
    assert_eq!(status, 200);
    let focus = String::from_utf8(focus).unwrap();
    let credit_rows: Vec<&str> = focus.lines().filter(|l| l.contains(",Credit,")).collect();
    assert_eq!(credit_rows.len(), 2, "{focus}");
    assert!(credit_rows[0].starts_with("-5.76,a,"), "{}", credit_rows[0]);
    let file = std::env::temp_dir().join(format!("wattledger-dr-{}.csv", std::process::id()));
    std::fs::write(&file, &focus).unwrap();
    let (passed, failed) = crate::chargeback::validate(&file);
    let _ = std::fs::remove_file(&file);
    assert!(
        passed || failed == [crate::chargeback::VALIDATOR_DEFECT],
        "FOCUS validator failures: {failed:?}"
    );
}

#[tokio::test]
async fn flexible_work_is_moved_out_of_an_upcoming_event() {
    let app = TestApp::start().await;
    push_site(&app).await;
    let start = Utc::now().duration_trunc(Duration::hours(1)).unwrap() + Duration::hours(2);
    let (status, body) = post_event(
        &app,
        json!({"key": "dr-next", "site": "s1", "starts_at": start,
               "ends_at": start + Duration::hours(2), "target_cap_kw": "100"}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["status"], "upcoming");
    // From now for 4 hours at 8 × 500 W (PUE 1) = 4 kW would run through the whole
    // window: it waits for its end, having moved 4 kW × 2 h = 8 kWh.
    let deadline = start + Duration::hours(12);
    let q = json!({"tenant": "a", "gpus": 8, "duration_s": 4 * 3600, "power_per_gpu_w": 500,
                   "deadline": deadline, "sites": ["s1"]});
    let a = ask_until(&app, q, |a| a["decision"] == "defer").await;
    assert_eq!(a["start_at"], json!(start + Duration::hours(2)), "{a}");
    assert!(
        a["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r.as_str().unwrap().contains("grid event dr-next")),
        "{a}"
    );
    // Work that is not flexible is not held back.
    let (_, now) = ask(
        &app,
        json!({"tenant": "b", "gpus": 8, "duration_s": 4 * 3600, "power_per_gpu_w": 500,
               "sites": ["s1"]}),
    )
    .await;
    assert_eq!(now["decision"], "admit", "{now}");

    // The event's report names a's moved energy once the decision is stored.
    let operator = app.token(Role::Operator);
    for _ in 0..100 {
        let (_, r) = app.get(Some(&operator), "/v1/grid-events/dr-next").await;
        if r["contributions"].as_array().is_some_and(|c| !c.is_empty()) {
            assert_eq!(r["contributions"].as_array().unwrap().len(), 1, "{r}");
            let c = &r["contributions"][0];
            assert_eq!(
                [&c["tenant"], &c["jobs"], &c["moved_kwh"]],
                [&json!("a"), &json!(1), &json!("8")],
                "{r}"
            );
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the moved decision was never stored");
}
