//! Measured headroom through the API and the operator page, on a site-hour whose answer is
//! worked out by hand. A training job holds g0 and g1, whose step peaks rise and fall
//! together (300 W on even minutes, 100 W on odd ones); two inference jobs hold g2 (the same
//! wave) and g3 (the opposite one). Node n1 carries g0–g2 and n2 carries g3, each peaking at
//! its GPUs' sum plus 100 W: n1 1,000 W even, 400 W odd; n2 200 W even, 400 W odd.
//!
//! - training: minutes of 600 and 200 W, own peaks 600 W: coincidence 1, headroom 0;
//! - inference: every minute 300 + 100 = 400 W, own peaks 600 W: 600/400 − 1 = 50 %,
//!   coincidence 400/600;
//! - IT (the node meters): minutes of 1,200 W (even) and 800 W (odd), own peaks
//!   1,000 + 400 W: 1,400/1,200 − 1 = 16.67 %, coincidence 1,200/1,400; at P50 the minutes'
//!   median is 800 W, so 1,400/800 − 1 = 75 %.

use crate::admission::{ask, ask_until};
use crate::scenario::{at_from, HOUR, NEXT_HOUR};
use base64::Engine;
use chrono::{DateTime, Duration, DurationRound, Utc};
use serde_json::{json, Value};
use wattledger::auth::Role;
use wattledger_tests::TestApp;

async fn push_site(app: &TestApp) {
    push_site_at(app, HOUR).await;
}

/// The site, its jobs and an hour of readings from `hour`.
async fn push_site_at(app: &TestApp, hour: &str) {
    let next = at_from(hour, 60);
    let at = |minute: i64| at_from(hour, minute);
    let admin = app.token(Role::Admin);
    for (what, records) in [
        (
            "tenants",
            json!([{"key": "platform", "name": "Platform"}, {"key": "a", "name": "A"}]),
        ),
        (
            "sites",
            json!([{"key": "s1", "name": "Site 1", "grid_region": "DE", "currency": "EUR",
            "power_envelope_w": 1400, "static_pue": "1.2", "idle_policy": "platform",
            "platform_tenant": "platform"}]),
        ),
        (
            "meters",
            json!([
                {"key": "n1", "site": "s1", "kind": "node"},
                {"key": "n2", "site": "s1", "kind": "node"},
                {"key": "g0", "site": "s1", "kind": "gpu", "parent": "n1", "gpu_uuid": "GPU-0"},
                {"key": "g1", "site": "s1", "kind": "gpu", "parent": "n1", "gpu_uuid": "GPU-1"},
                {"key": "g2", "site": "s1", "kind": "gpu", "parent": "n1", "gpu_uuid": "GPU-2"},
                {"key": "g3", "site": "s1", "kind": "gpu", "parent": "n2", "gpu_uuid": "GPU-3"}
            ]),
        ),
    ] {
        let (status, body) = app.ingest(&admin, what, records).await;
        assert_eq!(status, 200, "{what}: {body}");
    }
    let job = |key: &str, kind: &str, gpus: &[&str]| {
        json!({"key": key, "tenant": "a", "kind": kind, "start_at": hour, "end_at": next,
               "allocations": gpus.iter().map(|g| json!({"meter": g, "share": "1",
                   "start_at": hour, "end_at": next})).collect::<Vec<_>>()})
    };
    let jobs = json!([
        job("train", "training", &["g0", "g1"]),
        job("serve-1", "inference", &["g2"]),
        job("serve-2", "inference", &["g3"]),
    ]);
    let (status, body) = app.ingest(&app.token(Role::Scheduler), "jobs", jobs).await;
    assert_eq!(status, 200, "{body}");
    let mut samples = Vec::new();
    for minute in 0..=60i64 {
        let even = minute % 2 == 0;
        let (high, low) = if even { (300, 100) } else { (100, 300) };
        // (meter, mean W over the hour, this step's peak W)
        for (meter, mean, peak) in [
            ("g0", 200, high),
            ("g1", 200, high),
            ("g2", 200, high),
            ("g3", 200, low),
            ("n1", 700, 3 * high + 100),
            ("n2", 300, low + 100),
        ] {
            samples.push(json!({"meter": meter, "ts": at(minute), "step_s": 60,
                "counter_mj": 1_000_000 + minute * mean * 60_000, "peak_w": peak}));
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

/// The figures of `class` in a list of them.
fn class<'a>(list: &'a Value, class: &str) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|c| c["class"] == class)
        .unwrap_or_else(|| panic!("no {class} in {list}"))
}

#[tokio::test]
async fn headroom_is_what_the_hand_worked_coincidence_leaves_per_class() {
    let app = TestApp::start().await;
    push_site(&app).await;
    let operator = app.token(Role::Operator);
    let (status, body) = app
        .get(
            Some(&operator),
            &format!("/v1/power/headroom?site=s1&from={HOUR}&to={NEXT_HOUR}"),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["percentile"], "99.9");
    let site = &body["sites"][0];
    assert_eq!(site["site"], "s1");
    let span = &site["span"];
    for (name, coincident, percentile, parts, factor, headroom) in [
        ("training", "600", "600", "600", "1", "0"),
        ("inference", "400", "400", "600", "0.6667", "0.5"),
        ("it", "1200", "1200", "1400", "0.8571", "0.1667"),
    ] {
        let c = class(span, name);
        assert_eq!(c["minutes"], 60, "{name}: {c}");
        assert_eq!(
            [
                &c["coincident_peak_w"],
                &c["percentile_peak_w"],
                &c["parts_peak_w"]
            ],
            [coincident, percentile, parts],
            "{name}: {c}"
        );
        assert_eq!(c["coincidence_factor"], factor, "{name}: {c}");
        assert_eq!(c["headroom"], headroom, "{name}: {c}");
    }
    // The one day holds the same hour, so the same figures.
    assert_eq!(site["days"].as_array().unwrap().len(), 1);
    assert_eq!(
        class(&site["days"][0]["classes"], "inference")["headroom"],
        "0.5"
    );

    // The site's load (no facility meter: the IT minutes × PUE 1.2): 1,440 W on even
    // minutes and 960 W on odd ones, a 480 W swing every minute; 1,000 W of node counters
    // × 1.2 = 1,200 W mean, so a peak-to-average of 1.2; the 30 even minutes are above the
    // 1,400 W envelope.
    let (status, grid) = app
        .get(
            Some(&operator),
            &format!("/v1/power/grid?site=s1&from={HOUR}&to={NEXT_HOUR}"),
        )
        .await;
    assert_eq!(status, 200, "{grid}");
    assert_eq!(grid["sites"][0]["envelope_w"], 1400);
    let day = &grid["sites"][0]["days"][0];
    assert_eq!(day["minutes"], 60, "{day}");
    assert_eq!(
        [&day["peak_w"], &day["mean_w"], &day["peak_to_average"]],
        ["1440", "1200", "1.2"],
        "{day}"
    );
    assert_eq!(
        [
            &day["rise_1m_w"],
            &day["fall_1m_w"],
            &day["rise_15m_w"],
            &day["fall_15m_w"]
        ],
        ["480", "480", "480", "480"],
        "{day}"
    );
    assert_eq!(day["minutes_over_envelope"], 30, "{day}");
    // /metrics says the same of the site's latest hour.
    let text = app
        .http
        .get(format!("{}/metrics", app.base))
        .bearer_auth(&operator)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "wattledger_site_ramp_up_watts{site=\"s1\",window=\"1m\"} 480\n",
        "wattledger_site_ramp_down_watts{site=\"s1\",window=\"15m\"} 480\n",
        "wattledger_site_peak_to_average_ratio{site=\"s1\"} 1.2\n",
        "wattledger_site_over_envelope_seconds{site=\"s1\"} 1800\n",
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }

    // At P50 the IT minutes' median is the odd minutes' 800 W: 1400/800 − 1 = 75 %.
    let (_, p50) = app
        .get(
            Some(&operator),
            &format!("/v1/power/headroom?from={HOUR}&to={NEXT_HOUR}&percentile=50"),
        )
        .await;
    assert_eq!(class(&p50["sites"][0]["span"], "it")["headroom"], "0.75");

    // Site-wide draw is the operators': a tenant is refused, a bad percentile is a 422, an
    // unknown site a 404.
    let (status, _) = app
        .get(Some(&app.tenant_token("a")), "/v1/power/headroom")
        .await;
    assert_eq!(status, 403);
    for bad in ["0", "100.1", "-5", "x"] {
        let (status, body) = app
            .get(
                Some(&operator),
                &format!("/v1/power/headroom?percentile={bad}"),
            )
            .await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (422, Some("invalid_query")),
            "{bad}"
        );
    }
    let (status, _) = app
        .get(Some(&operator), "/v1/power/headroom?site=nowhere")
        .await;
    assert_eq!(status, 404);

    // The operator page shows the same over its range.
    wattledger::dashboard::login::add_user(
        &app.pool,
        "ada",
        Role::Operator,
        None,
        "correct horse battery",
    )
    .await
    .unwrap();
    let mut ada = crate::dashboard::Browser::new(&app);
    ada.sign_in("ada", "correct horse battery").await;
    let page = ada.get("/operator?from=2026-11-02&to=2026-11-02").await;
    assert_eq!(page.status, 200);
    // The day's power per minute against the envelope: the line breaks nowhere (every
    // minute measured) and the envelope is drawn at 1.4 kW.
    assert!(page.body.contains(r#"<title id="power-s1-title">Site 1: site power per minute, Nov 2, against the envelope</title>"#), "{}", page.body);
    assert!(
        page.body.contains("<title>Envelope: 1.4 kW</title>"),
        "{}",
        page.body
    );
    // The day's load shape beside it: peak over mean, the 15-minute swings, minutes over.
    let shape =
        "<td class=\"num\">1.20</td><td class=\"num\">0.5 / 0.5</td><td class=\"num\">30</td></tr>";
    assert!(page.body.contains(shape), "{shape} in {}", page.body);
    assert!(
        page.body.contains("<th scope=\"row\">GPUs serving inference</th><td class=\"num\">0.4</td><td class=\"num\">0.4</td><td class=\"num\">0.6</td><td class=\"num\">0.67</td><td class=\"num\">50.0%</td>"),
        "{}",
        page.body
    );
}

/// Tokens per second per MW on the scenario hour (`scenario`): 3,750 tokens at a site with no
/// facility meter whose node draws 1.6 kW (its counter's mean: all a counter tells), so a
/// site peak of 1.6 × 1.25 (static PUE) = 2 kW; 3750 / 3600 s / 0.002 MW = 520.833, and per
/// MW of the 100 kW envelope 10.417. The operator page's day shows the API's day figure.
#[tokio::test]
async fn tokens_per_megawatt_divide_the_hours_tokens_by_its_peak_and_its_envelope() {
    let app = TestApp::start().await;
    crate::scenario::push(&app, &crate::scenario::batches()).await;
    app.attribute().await;
    let operator = app.token(Role::Operator);
    let (status, body) = app
        .get(
            Some(&operator),
            &format!("/v1/metrics/efficiency?site=s1&from={HOUR}&to={NEXT_HOUR}"),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let row = &body["rows"][0];
    assert_eq!(row["site_peak_w"], "2000", "{row}");
    assert_eq!(row["tokens_per_s_per_mw_peak"], "520.833", "{row}");
    assert_eq!(row["tokens_per_s_per_mw_envelope"], "10.417", "{row}");

    let (_, days) = app
        .get(
            Some(&operator),
            "/v1/metrics/efficiency?site=s1&from=2026-11-02T00:00:00Z&to=2026-11-03T00:00:00Z&per=day",
        )
        .await;
    let day: rust_decimal::Decimal = days["rows"][0]["tokens_per_s_per_mw_peak"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    wattledger::dashboard::login::add_user(
        &app.pool,
        "ada",
        Role::Operator,
        None,
        "correct horse battery",
    )
    .await
    .unwrap();
    let mut ada = crate::dashboard::Browser::new(&app);
    ada.sign_in("ada", "correct horse battery").await;
    let page = ada.get("/operator?from=2026-11-02&to=2026-11-02").await;
    // The tokens column, then the load shape: the node's counter reads a flat 1.6 kW, so the
    // peak is the mean, nothing swings, and 2 kW stays under the 100 kW envelope.
    let shown = format!(
        "<td class=\"num\">{}</td><td class=\"num\">1.00</td><td class=\"num\">0.0 / 0.0</td><td class=\"num\">0</td></tr>",
        day.round_dp(1)
    );
    assert!(page.body.contains(&shown), "{shown} in {}", page.body);
}

/// Part 2 of power-bound operation on the hand-worked hour above, measured two hours ago:
/// inference's 50 % headroom lets s1's 1,400 W envelope take inference jobs beyond their
/// nameplate, training's 0 % does not, and a job that fits only capped is admitted at the
/// site's power cap.
#[tokio::test]
async fn inference_is_admitted_beyond_nameplate_up_to_its_measured_headroom_and_training_is_not() {
    let app = TestApp::start().await;
    let hour = Utc::now().duration_trunc(Duration::hours(1)).unwrap() - Duration::hours(2);
    push_site_at(&app, &hour.to_rfc3339()).await;
    let operator = app.token(Role::Operator);
    let (status, policy) = app
        .put(
            &operator,
            "/v1/power/policies/s1",
            json!({"oversubscription": {"training": "measured", "inference": "measured"},
                   "measured_cap": "2"}),
        )
        .await;
    assert_eq!(status, 200, "{policy}");
    let o = &policy["oversubscription"];
    assert_eq!(
        [
            &o["inference"]["factor"],
            &o["training"]["factor"],
            &o["batch"]["factor"]
        ],
        ["1.5", "1", "1"],
        "{policy}"
    );
    assert_eq!(o["inference"]["setting"], "measured");
    assert_eq!(
        o["inference"]["why"],
        "measured: 50 % headroom at P99.9 over 7 days"
    );

    // One GPU at 500 W × PUE 1.2 = 600 W of nameplate; inference counts 600 / 1.5 = 400 W.
    // Three fit the 1,400 W envelope (1,800 W of nameplate); the fourth waits.
    let q = |kind: &str, start: DateTime<Utc>| {
        json!({"tenant": "a", "gpus": 1, "duration_s": 3600, "power_per_gpu_w": 500,
               "kind": kind, "earliest_start": start, "sites": ["s1"]})
    };
    let now = Utc::now() + Duration::minutes(1);
    let first = ask_until(&app, q("inference", now), |a| {
        a["decision"] == "admit"
            && a["reasons"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r.as_str().unwrap().contains("at 1/1.5 of its draw"))
    })
    .await;
    assert_eq!(first["power_cap_w"], Value::Null, "{first}");
    for _ in 0..2 {
        let (_, a) = ask(&app, q("inference", now)).await;
        assert_eq!(a["decision"], "admit", "{a}");
    }
    let (_, fourth) = ask(&app, q("inference", now)).await;
    assert_eq!(fourth["decision"], "defer", "{fourth}");

    // Training, three hours on (clear of those): counted in full, two fit, the third waits.
    let later = now + Duration::hours(3);
    for _ in 0..2 {
        let (_, a) = ask(&app, q("training", later)).await;
        assert_eq!(a["decision"], "admit", "{a}");
    }
    let (_, third) = ask(&app, q("training", later)).await;
    assert_eq!(third["decision"], "defer", "{third}");

    // With a 250 W cap allowed, the fourth inference job fits now: 250 W × 1.2 / 1.5 = 200 W
    // in the 200 W left, running 500/250 × 1 h = 2 h for the same 0.6 kWh.
    let (status, policy) = app
        .put(
            &operator,
            "/v1/power/policies/s1",
            json!({"oversubscription": {"inference": "measured"}, "measured_cap": "2",
                   "power_cap_w": 250}),
        )
        .await;
    assert_eq!(status, 200, "{policy}");
    assert_eq!(policy["power_cap_w"], 250);
    // The Kubernetes webhook passes the cap on as a pod annotation: a what-if pod of the
    // platform tenant (no history: the server's 700 W default, 840 W at PUE 1.2, 560 W
    // counted) fits only at 250 W (200 W counted).
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/kubernetes/admissionreview-v1-pod-create-request.json");
    let mut review: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    review["request"]["dryRun"] = json!(true);
    review["request"]["object"]["spec"]["containers"][0]["resources"] =
        json!({"limits": {"nvidia.com/gpu": "1"}});
    review["request"]["object"]["metadata"]["annotations"] = json!({
        "wattledger.io/tenant": "platform", "wattledger.io/kind": "inference",
        "wattledger.io/duration": "1h", "wattledger.io/sites": "s1"});
    let mut response = Value::Null;
    for _ in 0..100 {
        let (status, r) = app
            .post_raw(
                &app.token(Role::Scheduler),
                "/v1/admission/kubernetes",
                review.to_string(),
            )
            .await;
        assert_eq!(status, 200, "{r}");
        response = r["response"].clone();
        if response["patch"].is_string() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(response["allowed"], true, "{response}");
    assert_eq!(response["patchType"], "JSONPatch", "{response}");
    assert_eq!(
        response["auditAnnotations"]["wattledger.io/power-cap-w"],
        "250"
    );
    let patch = base64::engine::general_purpose::STANDARD
        .decode(response["patch"].as_str().unwrap())
        .unwrap();
    let patch: Value = serde_json::from_slice(&patch).unwrap();
    assert_eq!(
        patch.as_array().unwrap().last().unwrap(),
        &json!({"op": "add", "path": "/metadata/annotations/wattledger.io~1power-cap-w",
                "value": "250"})
    );
    let capped = ask_until(&app, q("inference", now), |a| a["decision"] == "admit").await;
    assert_eq!(capped["power_cap_w"], 250, "{capped}");
    let est = &capped["estimate_at_start"];
    assert_eq!(
        (&est["run_s"], &est["kwh"]),
        (&json!(7200), &json!("0.600000")),
        "{capped}"
    );

    // A policy a site cannot have is refused by field; another role may not set one.
    let (status, bad) = app
        .put(
            &operator,
            "/v1/power/policies/s1",
            json!({"oversubscription": {"inference": "0.5", "gpu": "1"}, "power_cap_w": 10}),
        )
        .await;
    assert_eq!(status, 422, "{bad}");
    let fields: Vec<&str> = bad["error"]["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        [
            "oversubscription.gpu",
            "oversubscription.inference",
            "power_cap_w"
        ],
        "{bad}"
    );
    let (status, _) = app
        .put(
            &app.token(Role::Scheduler),
            "/v1/power/policies/s1",
            json!({}),
        )
        .await;
    assert_eq!(status, 403);
    let (status, _) = app
        .put(&operator, "/v1/power/policies/nope", json!({}))
        .await;
    assert_eq!(status, 404);
}
