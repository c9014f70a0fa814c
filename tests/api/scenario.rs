//! The known-answer scenario of the domain tests, pushed through the ingest API.
//!
//! One hour (2026-11-02 10:00 UTC) at a site with static PUE 1.25 and no facility meter.
//! Node n1 reads 1600 W; on it, tenant `a` trains on g0 (700 W), tenant `b` runs a notebook
//! on a MIG half of g1 (300 W), and `a`'s shared endpoint on g2 (400 W) serves `a`
//! (1000 prompt + 250 generated tokens) and `b` (2000 + 500). Worked out by hand in
//! `services/domain/src/attribution/tests.rs`: a = 4.35e9 mJ, b = 2.175e9, platform = 6.75e8.

use serde_json::{json, Value};
use wattledger::auth::Role;
use wattledger_tests::TestApp;

pub const HOUR: &str = "2026-11-02T10:00:00Z";
pub const NEXT_HOUR: &str = "2026-11-02T11:00:00Z";
pub const EXPECTED_A: i64 = 4_350_000_000;
pub const EXPECTED_B: i64 = 2_175_000_000;
pub const EXPECTED_PLATFORM: i64 = 675_000_000;

pub fn at(minute: i64) -> String {
    at_from(HOUR, minute)
}

/// `minute` minutes after `hour` (RFC 3339).
pub fn at_from(hour: &str, minute: i64) -> String {
    let t = chrono::DateTime::parse_from_rfc3339(hour).unwrap() + chrono::Duration::minutes(minute);
    t.to_utc()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

pub struct Batches {
    pub tenants: Value,
    pub sites: Value,
    pub models: Value,
    pub meters: Value,
    pub jobs: Value,
    pub samples: Value,
    pub tokens: Value,
}

pub fn batches() -> Batches {
    batches_at(HOUR)
}

/// The scenario in the hour starting at `hour` (RFC 3339, on the hour).
pub fn batches_at(hour: &str) -> Batches {
    let at = |minute| at_from(hour, minute);
    let next = at(60);
    let (hour, next_hour) = (hour, next.as_str());
    let mut samples = Vec::new();
    for i in 0..=60i64 {
        for (meter, per_min) in [
            ("n1", 96_000_000i64),
            ("g0", 42_000_000),
            ("g1", 18_000_000),
            ("g2", 24_000_000),
        ] {
            samples
                .push(json!({"meter": meter, "ts": at(i), "counter_mj": 5_000_000 + i * per_min}));
        }
    }
    let alloc = |meter: &str, share: &str| json!({"meter": meter, "share": share, "start_at": hour, "end_at": next_hour});
    Batches {
        tenants: json!([{"key": "platform", "name": "Platform"}, {"key": "a", "name": "Tenant A"}, {"key": "b", "name": "Tenant B"}]),
        sites: json!([{"key": "s1", "name": "Site 1", "grid_region": "DE", "currency": "EUR", "power_envelope_w": 100000,
                       "static_pue": "1.25", "idle_policy": "platform", "platform_tenant": "platform"}]),
        models: json!([{"key": "m-endpoint", "prefill_weight": 1, "decode_weight": 4}]),
        meters: json!([
            {"key": "g0", "site": "s1", "kind": "gpu", "parent": "n1", "gpu_uuid": "GPU-0"},
            {"key": "n1", "site": "s1", "kind": "node"},
            {"key": "g1", "site": "s1", "kind": "gpu", "parent": "n1", "gpu_uuid": "GPU-1"},
            {"key": "g1-mig0", "site": "s1", "kind": "mig", "parent": "g1", "mig_profile": "3g.40gb"},
            {"key": "g2", "site": "s1", "kind": "gpu", "parent": "n1", "gpu_uuid": "GPU-2"}
        ]),
        jobs: json!([
            {"key": "job-train", "tenant": "a", "kind": "training", "start_at": hour, "end_at": next_hour, "allocations": [alloc("g0", "1")]},
            {"key": "job-mig", "tenant": "b", "kind": "interactive", "start_at": hour, "end_at": next_hour, "allocations": [alloc("g1-mig0", "0.5")]},
            {"key": "job-endpoint", "tenant": "a", "model": "m-endpoint", "kind": "inference", "start_at": hour, "end_at": next_hour, "allocations": [alloc("g2", "1")]}
        ]),
        samples: Value::Array(samples),
        tokens: json!([
            {"job": "job-endpoint", "tenant": "a", "start_at": hour, "end_at": next_hour, "prompt_tokens": 1000, "generated_tokens": 250},
            {"job": "job-endpoint", "tenant": "b", "start_at": hour, "end_at": next_hour, "prompt_tokens": 2000, "generated_tokens": 500}
        ]),
    }
}

/// Pushes the inventory only.
pub async fn push_inventory(app: &TestApp, b: &Batches) {
    let admin = app.token(Role::Admin);
    for (what, records) in [
        ("tenants", &b.tenants),
        ("sites", &b.sites),
        ("models", &b.models),
        ("meters", &b.meters),
    ] {
        let (status, body) = app.ingest(&admin, what, records.clone()).await;
        assert_eq!(status, 200, "{what}: {body}");
    }
}

/// Pushes everything with the roles that would send it, asserting success.
pub async fn push(app: &TestApp, b: &Batches) -> Vec<Value> {
    push_inventory(app, b).await;
    let mut outcomes = Vec::new();
    for (role, what, records) in [
        (Role::Scheduler, "jobs", &b.jobs),
        (Role::Collector, "samples", &b.samples),
        (Role::Collector, "tokens", &b.tokens),
    ] {
        let (status, body) = app.ingest(&app.token(role), what, records.clone()).await;
        assert_eq!(status, 200, "{what}: {body}");
        outcomes.push(body);
    }
    outcomes
}

/// Total mJ per tenant for the scenario hour, via the query API.
/// The scenario's known answer per tenant, in the order [`tenant_totals`] gives.
pub fn expected_totals() -> Vec<(String, i64)> {
    vec![
        ("a".into(), EXPECTED_A),
        ("b".into(), EXPECTED_B),
        ("platform".into(), EXPECTED_PLATFORM),
    ]
}

pub async fn tenant_totals(app: &TestApp, token: &str) -> Vec<(String, i64)> {
    let (status, body) = app
        .get(
            Some(token),
            &format!("/v1/usage?group_by=tenant&from={HOUR}&to={NEXT_HOUR}"),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["tenant"].as_str().unwrap().to_owned(),
                r["total_mj"].as_i64().unwrap(),
            )
        })
        .collect()
}
