//! Disaggregated serving and efficiency by GPU generation through the API: the domain's
//! known answer (`disaggregated` in `services/domain/src/attribution/tests.rs`) sent as a
//! scheduler and collectors would, read back per phase from `/v1/usage` and per device model
//! from `/v1/metrics/efficiency`, and shown on the tenant's and the operator's pages.
//!
//! One hour (2026-11-02 10:00 UTC), static PUE 1.25, the node drawing exactly its GPUs. The
//! platform team runs model `m7` for tenants `a` and `b`: a prefill pool on an H100 (600 W)
//! and a decode pool on an H200 (500 W) and an H100 (300 W). By hand: prefill 2.7 GJ over
//! 135,000 prompt tokens, 20 J each; decode 3.6 GJ over 120,000 generated tokens, 30 J each.

use crate::dashboard::Browser;
use crate::scenario::{at, HOUR, NEXT_HOUR};
use serde_json::{json, Value};
use wattledger::auth::Role;
use wattledger::dashboard::login::add_user;
use wattledger_tests::TestApp;

const H100: &str = "NVIDIA H100 80GB HBM3";
const H200: &str = "NVIDIA H200";

fn pool(key: &str, phase: &str, gpus: &[&str]) -> Value {
    json!({"key": key, "tenant": "platform", "model": "m7", "phase": phase, "kind": "inference",
           "start_at": HOUR, "end_at": NEXT_HOUR,
           "allocations": gpus.iter().map(|g| json!({"meter": g})).collect::<Vec<_>>()})
}

async fn push(app: &TestApp) {
    let admin = app.token(Role::Admin);
    for (what, records) in [
        (
            "tenants",
            json!([{"key": "platform", "name": "Platform"}, {"key": "a", "name": "Tenant A"},
                   {"key": "b", "name": "Tenant B"}]),
        ),
        (
            "sites",
            json!([{"key": "s1", "name": "Site 1", "grid_region": "DE", "currency": "EUR",
                    "power_envelope_w": 100000, "static_pue": "1.25", "idle_policy": "platform",
                    "platform_tenant": "platform"}]),
        ),
        (
            "models",
            json!([{"key": "m7", "prefill_weight": 1, "decode_weight": 4}]),
        ),
        (
            "meters",
            json!([
                {"key": "n1", "site": "s1", "kind": "node"},
                {"key": "g0", "site": "s1", "kind": "gpu", "parent": "n1", "gpu_uuid": "GPU-0", "device_model": H100},
                {"key": "g1", "site": "s1", "kind": "gpu", "parent": "n1", "gpu_uuid": "GPU-1", "device_model": H200},
                {"key": "g2", "site": "s1", "kind": "gpu", "parent": "n1", "gpu_uuid": "GPU-2", "device_model": H100}
            ]),
        ),
    ] {
        let (status, body) = app.ingest(&admin, what, records).await;
        assert_eq!(status, 200, "{what}: {body}");
    }
    let mut samples = Vec::new();
    for i in 0..=60i64 {
        // W × 60 s = mJ a minute / 1000.
        for (meter, w) in [("n1", 1400i64), ("g0", 600), ("g1", 500), ("g2", 300)] {
            samples.push(
                json!({"meter": meter, "ts": at(i), "counter_mj": 1_000_000 + i * w * 60_000}),
            );
        }
    }
    // Each server counts every request it saw: the prefill pool one generated token a
    // request, the decode pool the prompts it was handed.
    let tokens = |job: &str, tenant: &str, prompt: i64, generated: i64| {
        json!({"job": job, "tenant": tenant, "start_at": HOUR, "end_at": NEXT_HOUR,
               "prompt_tokens": prompt, "generated_tokens": generated})
    };
    for (role, what, records) in [
        (
            Role::Scheduler,
            "jobs",
            json!([
                pool("pool-prefill", "prefill", &["g0"]),
                pool("pool-decode", "decode", &["g1", "g2"])
            ]),
        ),
        (Role::Collector, "samples", Value::Array(samples)),
        (
            Role::Collector,
            "tokens",
            json!([
                tokens("pool-prefill", "a", 90_000, 100),
                tokens("pool-prefill", "b", 45_000, 50),
                tokens("pool-decode", "a", 90_000, 30_000),
                tokens("pool-decode", "b", 45_000, 90_000)
            ]),
        ),
    ] {
        let (status, body) = app.ingest(&app.token(role), what, records).await;
        assert_eq!(status, 200, "{what}: {body}");
    }
    app.attribute().await;
}

async fn get(app: &TestApp, role: Role, path: &str) -> Value {
    let (status, body) = app.get(Some(&app.token(role)), path).await;
    assert_eq!(status, 200, "{path}: {body}");
    body
}

#[tokio::test]
async fn each_phase_has_its_joules_per_token_and_each_gpu_generation_its_efficiency() {
    let app = TestApp::start().await;
    push(&app).await;
    let span = format!("from={HOUR}&to={NEXT_HOUR}");

    // Per tenant and phase: each pool counted only its phase's tokens.
    let body = get(
        &app,
        Role::Admin,
        &format!("/v1/usage?group_by=tenant,phase&{span}"),
    )
    .await;
    let rows: Vec<(&str, &str, i64, i64, i64, Value, Value)> = body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["tenant"].as_str().unwrap(),
                r["phase"].as_str().unwrap(),
                r["total_mj"].as_i64().unwrap(),
                r["prompt_tokens"].as_i64().unwrap(),
                r["generated_tokens"].as_i64().unwrap(),
                r["joules_per_prompt_token"].clone(),
                r["joules_per_generated_token"].clone(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (
                "a",
                "decode",
                900_000_000,
                0,
                30_000,
                json!(null),
                json!("30")
            ),
            (
                "a",
                "prefill",
                1_800_000_000,
                90_000,
                0,
                json!("20"),
                json!(null)
            ),
            (
                "b",
                "decode",
                2_700_000_000,
                0,
                90_000,
                json!(null),
                json!("30")
            ),
            (
                "b",
                "prefill",
                900_000_000,
                45_000,
                0,
                json!("20"),
                json!(null)
            ),
        ]
    );

    // The whole deployment: 6.3 GJ over 255,000 tokens.
    let body = get(
        &app,
        Role::Admin,
        &format!("/v1/usage?group_by=model&{span}"),
    )
    .await;
    let m7 = &body["rows"][0];
    assert_eq!(
        (
            m7["model"].as_str(),
            m7["total_mj"].as_i64(),
            m7["tokens"].as_i64()
        ),
        (Some("m7"), Some(6_300_000_000), Some(255_000))
    );
    assert_eq!(m7["joules_per_token"], "24.705882");

    // A tenant sees its own share of each pool.
    let (status, body) = app
        .get(
            Some(&app.tenant_token("a")),
            &format!("/v1/usage?group_by=phase&{span}"),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let phases: Vec<(&str, &Value)> = body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["phase"].as_str().unwrap(), &r["total_mj"]))
        .collect();
    assert_eq!(
        phases,
        [
            ("decode", &json!(900_000_000)),
            ("prefill", &json!(1_800_000_000))
        ]
    );

    // Per model and device model: the decode pool's rows run 5 : 3 on the H200 and the H100.
    let body = get(
        &app,
        Role::Operator,
        &format!("/v1/metrics/efficiency?group_by=model,device&{span}"),
    )
    .await;
    assert_eq!(body["rows"], json!([]));
    let groups: Vec<(&str, &str, &str, i64, &str, &str)> = body["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["model"].as_str().unwrap(),
                g["device"].as_str().unwrap(),
                g["kwh"].as_str().unwrap(),
                g["tokens"].as_i64().unwrap(),
                g["joules_per_token"].as_str().unwrap(),
                g["tokens_per_kwh"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        groups,
        [
            ("m7", H100, "1.125", 180_000, "22.5", "160000"),
            ("m7", H200, "0.625", 75_000, "30", "120000"),
        ]
    );
    let generations: Vec<&Value> = body["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| &g["generation"])
        .collect();
    assert_eq!(generations, [&json!("H100"), &json!("H200")]);

    // Grouped by device alone, and refused for what it cannot group by.
    let body = get(
        &app,
        Role::Finance,
        &format!("/v1/metrics/efficiency?group_by=device&{span}"),
    )
    .await;
    assert_eq!(body["groups"].as_array().unwrap().len(), 2);
    assert_eq!(body["groups"][0]["model"], json!(null));
    for bad in ["tenant", ",", "model,gpu"] {
        let (status, body) = app
            .get(
                Some(&app.token(Role::Operator)),
                &format!("/v1/metrics/efficiency?group_by={bad}&{span}"),
            )
            .await;
        assert_eq!(status, 422, "{bad}: {body}");
    }

    // The pages: the tenant's phases, the operator's generations and the fleet's phases.
    for (user, role, tenant, path, section, shown) in [
        (
            "alice",
            Role::Tenant,
            Some("a"),
            "/tenants/a",
            "Prefill and decode",
            &["m7", "20.00 J", "30.00 J", "0.5 kWh", "0.3 kWh"][..],
        ),
        (
            "olga",
            Role::Operator,
            None,
            "/operator",
            "Efficiency by GPU generation",
            &[
                "m7", "H100", "H200", "22.50 J", "30.00 J", "160,000", "24.71 J",
            ][..],
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
        let part = page.body.split(section).nth(1).unwrap_or("");
        for s in shown {
            assert!(part.contains(s), "{path}: {s} missing from {section}");
        }
    }
}

#[tokio::test]
async fn a_phase_needs_the_model_its_pool_serves() {
    let app = TestApp::start().await;
    push(&app).await;
    let scheduler = app.token(Role::Scheduler);
    let mut no_model = pool("pool-x", "prefill", &["g0"]);
    no_model.as_object_mut().unwrap().remove("model");
    let unknown = pool("pool-y", "prefil", &["g0"]);
    for (job, field) in [(no_model, "phase"), (unknown, "phase")] {
        let (status, body) = app.ingest(&scheduler, "jobs", json!([job])).await;
        assert_eq!(status, 422, "{body}");
        let fields: Vec<&str> = body["error"]["errors"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["field"].as_str())
            .collect();
        assert_eq!(fields, [field], "{body}");
    }

    // A pool sent again without its phase counts every token its server saw: the decode
    // pool's split moves to 90,000 + 4 × 30,000 : 45,000 + 4 × 90,000.
    let (status, body) = app
        .ingest(
            &scheduler,
            "jobs",
            json!([{"key": "pool-decode", "tenant": "platform", "model": "m7", "kind": "inference",
                    "start_at": HOUR, "end_at": NEXT_HOUR,
                    "allocations": [{"meter": "g1"}, {"meter": "g2"}]}]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    app.attribute().await;
    let body = get(
        &app,
        Role::Admin,
        &format!("/v1/usage?group_by=job,tenant&from={HOUR}&to={NEXT_HOUR}"),
    )
    .await;
    let decode_a = body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["job"] == "pool-decode" && r["tenant"] == "a")
        .unwrap()
        .clone();
    assert_eq!(decode_a["total_mj"], 1_229_268_293i64);
    assert_eq!(decode_a["prompt_tokens"], 90_000);
}
