//! The OpenAPI document is generated from the handlers; this keeps it and the router in step.

use wattledger_tests::TestApp;

#[tokio::test]
async fn every_documented_operation_is_routed_and_every_route_is_documented() {
    let app = TestApp::start().await;
    let (status, doc) = app.get(None, "/v1/openapi.json").await;
    assert_eq!(status, 200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths = doc["paths"].as_object().unwrap();
    let mut documented: Vec<String> = Vec::new();
    for (path, ops) in paths {
        for method in ops.as_object().unwrap().keys() {
            documented.push(format!("{} {path}", method.to_uppercase()));
            // Unauthenticated: a routed, secured operation answers 401; the fallback is 404.
            let url = format!(
                "{}{}",
                app.base,
                path.replace("{key}", "some-key")
                    .replace("{id}", "0190a0c4-0000-7000-8000-000000000000")
                    .replace("{message}", "msg_x")
            );
            let req = match method.as_str() {
                "get" => app.http.get(&url),
                "post" => app
                    .http
                    .post(&url)
                    .header("content-type", "application/json")
                    .body("{\"records\": []}"),
                "patch" => app
                    .http
                    .patch(&url)
                    .header("content-type", "application/json")
                    .body("{}"),
                "put" => app
                    .http
                    .put(&url)
                    .header("content-type", "application/json")
                    .body("{}"),
                "delete" => app.http.delete(&url),
                other => panic!("unexpected method {other}"),
            };
            let status = req.send().await.unwrap().status().as_u16();
            let secured = ops[method].get("security").is_some();
            let expected = if secured { 401 } else { 200 };
            assert_eq!(status, expected, "{method} {path}");
        }
    }
    documented.sort();
    // The router's operations, listed once here: adding a route without documenting it
    // (or the reverse) fails this test.
    let mut routed = vec![
        "GET /health",
        "GET /metrics",
        "POST /v1/ingest/tenants",
        "POST /v1/ingest/sites",
        "POST /v1/ingest/models",
        "POST /v1/ingest/device_models",
        "POST /v1/ingest/meters",
        "POST /v1/ingest/samples",
        "POST /v1/ingest/jobs",
        "POST /v1/ingest/tokens",
        "POST /v1/ingest/signals",
        "POST /v1/ingest/clean-energy",
        "GET /v1/usage",
        "GET /v1/metrics/efficiency",
        "GET /v1/power/headroom",
        "GET /v1/power/grid",
        "GET /v1/power/policies",
        "PUT /v1/power/policies/{site}",
        "POST /v1/grid-events",
        "GET /v1/grid-events",
        "GET /v1/grid-events/{key}",
        "POST /v1/admission",
        "GET /v1/admission/decisions",
        "POST /v1/admission/kubernetes",
        "GET /v1/admission/policies/{tenant}",
        "PUT /v1/admission/policies/{tenant}",
        "GET /v1/jobs",
        "GET /v1/jobs/{key}",
        "GET /v1/sites",
        "GET /v1/tenants",
        "GET /v1/budgets",
        "GET /v1/budgets/{key}",
        "PUT /v1/budgets/{key}",
        "DELETE /v1/budgets/{key}",
        "GET /v1/chargeback/months",
        "GET /v1/chargeback/months/{month}",
        "POST /v1/chargeback/months/{month}/close",
        "POST /v1/chargeback/months/{month}/reopen",
        "GET /v1/chargeback/months/{month}/statements/{tenant}",
        "GET /v1/chargeback/months/{month}/exports/{format}",
        "POST /v1/webhooks/endpoints",
        "GET /v1/webhooks/endpoints",
        "GET /v1/webhooks/endpoints/{id}",
        "PATCH /v1/webhooks/endpoints/{id}",
        "DELETE /v1/webhooks/endpoints/{id}",
        "POST /v1/webhooks/endpoints/{id}/rotate",
        "POST /v1/webhooks/endpoints/{id}/test",
        "GET /v1/webhooks/endpoints/{id}/messages",
        "POST /v1/webhooks/endpoints/{id}/messages/{message}/redeliver",
        "GET /v1/tokens",
        "POST /v1/tokens",
        "DELETE /v1/tokens/{jti}",
    ];
    routed.sort();
    assert_eq!(documented, routed);
}

/// Every `$ref` in the document names a schema it defines (the ingest outcome's did not).
#[tokio::test]
async fn every_reference_in_the_document_resolves() {
    fn refs(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        ("$ref", serde_json::Value::String(r)) => out.push(r.clone()),
                        _ => refs(v, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }
    let app = TestApp::start().await;
    let (_, doc) = app.get(None, "/v1/openapi.json").await;
    let mut all = Vec::new();
    refs(&doc, &mut all);
    assert!(all.len() > 50, "{}", all.len());
    for r in all {
        let name = r
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("{r} is not a schema reference"));
        assert!(
            doc["components"]["schemas"].get(name).is_some(),
            "{r} is referenced but not defined"
        );
    }
}

/// Operation ids are unique (OpenAPI requires it; openapi-spec-validator in tests/run checks
/// the whole document).
#[tokio::test]
async fn operation_ids_are_unique() {
    let app = TestApp::start().await;
    let (_, doc) = app.get(None, "/v1/openapi.json").await;
    let mut ids: Vec<String> = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|ops| ops.as_object().unwrap().values())
        .filter_map(|op| op["operationId"].as_str().map(str::to_owned))
        .collect();
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "{ids:?}");
}

/// A closed set of names is documented by the names the API reads and writes, not by the
/// Rust variants' (a schema listing `Training` would have every client send what the server
/// refuses).
#[tokio::test]
async fn each_set_of_names_is_documented_by_its_names() {
    use wattledger_domain::{admission, attribution, budget, job_kind, meter_kind, role};
    use wattledger_domain::{signals, webhooks};
    let app = TestApp::start().await;
    let (_, doc) = app.get(None, "/v1/openapi.json").await;
    use wattledger_domain::chargeback::{AllocationMethod, LineClass};
    let sets: [(&str, &[&str]); 14] = [
        ("JobKind", &job_kind::JobKind::NAMES),
        ("MeterKind", &meter_kind::MeterKind::NAMES),
        ("Verdict", &admission::Verdict::NAMES),
        ("Role", &role::Role::NAMES),
        ("TokenState", &role::TokenState::NAMES),
        ("Basis", &signals::Basis::NAMES),
        ("SignalKind", &signals::SignalKind::NAMES),
        ("SignalStatus", &signals::Status::NAMES),
        ("BudgetMetric", &budget::BudgetMetric::NAMES),
        ("BudgetPeriod", &budget::BudgetPeriod::NAMES),
        ("MessageState", &webhooks::MessageState::NAMES),
        ("IdlePolicy", &attribution::IdlePolicy::NAMES),
        ("LineClass", &LineClass::NAMES),
        ("AllocationMethod", &AllocationMethod::NAMES),
    ];
    for (schema, names) in sets {
        let documented = &doc["components"]["schemas"][schema]["enum"];
        assert_eq!(documented, &serde_json::json!(names), "{schema}");
    }
}

/// The ingest records the document describes are the wire types the agent sends: every field
/// of a fully filled record is a documented property, the required ones are those a record
/// cannot leave out, and no other property is allowed (the server refuses unknown fields).
#[tokio::test]
async fn the_documented_ingest_records_are_the_agents_own() {
    use chrono::{DateTime, Utc};
    use wattledger_domain::signals::{Basis, SignalKind, Status};
    use wattledger_wire::{Allocation, Job, Meter, Sample, SignalPoint, Tokens};
    let app = TestApp::start().await;
    let (_, doc) = app.get(None, "/v1/openapi.json").await;
    let t = DateTime::<Utc>::UNIX_EPOCH;
    let full: Vec<(&str, serde_json::Value, &[&str])> = vec![
        (
            "Sample",
            serde_json::to_value(Sample {
                meter: "g".into(),
                ts: t,
                counter_mj: Some(1),
                power_w: Some(1.0),
                peak_w: Some(1.0),
                step_s: Some(60),
                counter_estimated: true,
            })
            .unwrap(),
            &["meter", "ts"],
        ),
        (
            "Meter",
            serde_json::to_value(Meter {
                mig_profile: Some("1g.10gb".into()),
                ..Meter::gpu("g", "s", "n", "GPU-1", Some("H100"))
            })
            .unwrap(),
            &["key", "site", "kind"],
        ),
        (
            "Job",
            serde_json::to_value(Job {
                key: "j".into(),
                name: Some("n".into()),
                tenant: "a".into(),
                site: Some("s".into()),
                model: Some("m".into()),
                phase: Some(wattledger_domain::phase::Phase::Prefill),
                kind: wattledger_domain::job_kind::JobKind::Batch,
                priority: Some(wattledger_domain::priority::Priority::parse("high").unwrap()),
                submit_at: Some(t),
                start_at: t,
                end_at: Some(t),
                end_state: Some(wattledger_domain::badput::EndState::Timeout),
                last_checkpoint_at: Some(t),
                requeue_of: Some("i".into()),
                restarts: Some(1),
                allocations: vec![Allocation {
                    meter: "g".into(),
                    share: Some(rust_decimal::Decimal::ONE),
                    start_at: Some(t),
                    end_at: Some(t),
                }],
            })
            .unwrap(),
            &["key", "tenant", "kind", "start_at"],
        ),
        (
            "Tokens",
            serde_json::to_value(Tokens {
                job: "j".into(),
                tenant: Some("a".into()),
                start_at: t,
                end_at: t,
                prompt_tokens: 1,
                generated_tokens: 1,
            })
            .unwrap(),
            &[
                "job",
                "start_at",
                "end_at",
                "prompt_tokens",
                "generated_tokens",
            ],
        ),
        (
            "SignalPoint",
            serde_json::to_value(SignalPoint {
                region: "DE".into(),
                signal: SignalKind::Carbon,
                basis: Some(Basis::Average),
                currency: Some("EUR".into()),
                status: Status::Actual,
                source: "x".into(),
                start_at: t,
                end_at: t,
                value: rust_decimal::Decimal::ONE,
                estimated: true,
            })
            .unwrap(),
            &[
                "region", "signal", "status", "source", "start_at", "end_at", "value",
            ],
        ),
        (
            "CleanEnergy",
            serde_json::to_value(wattledger_wire::CleanEnergy {
                site: "s".into(),
                source: "ppa".into(),
                start_at: t,
                end_at: t,
                mwh: rust_decimal::Decimal::ONE,
            })
            .unwrap(),
            &["site", "source", "start_at", "end_at", "mwh"],
        ),
    ];
    for (name, record, required) in full {
        let schema = &doc["components"]["schemas"][name];
        let mut documented: Vec<&str> = schema["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("{name} is not documented"))
            .keys()
            .map(String::as_str)
            .collect();
        let mut sent: Vec<&str> = record
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        documented.sort_unstable();
        sent.sort_unstable();
        assert_eq!(documented, sent, "{name}");
        let mut req: Vec<&str> = schema["required"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        req.sort_unstable();
        let mut want = required.to_vec();
        want.sort_unstable();
        assert_eq!(req, want, "{name}");
        assert_eq!(schema["additionalProperties"], false, "{name}");
    }
}

/// The JSON bodies the server reads field by field are documented by the records it reads:
/// each operation's body is its record's schema, whose properties are the record's fields (no
/// more, no fewer), whose required ones are those it cannot do without, and which allows no
/// other property (the server refuses unknown fields).
#[tokio::test]
async fn the_documented_bodies_are_the_records_the_server_reads() {
    use wattledger::admission::Ask;
    use wattledger::http::{budgets::BudgetIn, grid_events::GridEventIn};
    use wattledger::http::{power_policy::PolicyIn, tokens::MintRequest};
    use wattledger_domain::input::record::Record;
    let app = TestApp::start().await;
    let (_, doc) = app.get(None, "/v1/openapi.json").await;
    type Body<'a> = (&'a str, &'a str, &'a str, &'a [&'a str], &'a [&'a str]);
    let bodies: [Body; 5] = [
        (
            "put",
            "/v1/budgets/{key}",
            "BudgetIn",
            BudgetIn::FIELDS,
            &["tenant"],
        ),
        (
            "post",
            "/v1/grid-events",
            "GridEventIn",
            GridEventIn::FIELDS,
            &["key", "site", "starts_at", "ends_at"],
        ),
        (
            "put",
            "/v1/power/policies/{site}",
            "PolicyIn",
            PolicyIn::FIELDS,
            &[],
        ),
        (
            "post",
            "/v1/tokens",
            "MintRequest",
            MintRequest::FIELDS,
            &["role", "sub"],
        ),
        (
            "post",
            "/v1/admission",
            "Ask",
            Ask::FIELDS,
            &["tenant", "gpus", "duration_s"],
        ),
    ];
    for (method, path, schema, fields, required) in bodies {
        let body = &doc["paths"][path][method]["requestBody"]["content"]["application/json"];
        assert_eq!(
            body["schema"]["$ref"],
            format!("#/components/schemas/{schema}"),
            "{method} {path}: {body}"
        );
        let s = &doc["components"]["schemas"][schema];
        let mut documented: Vec<&str> = s["properties"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        documented.sort();
        let mut fields = fields.to_vec();
        fields.sort();
        assert_eq!(documented, fields, "{schema}");
        let wanted: Vec<&str> = s["required"]
            .as_array()
            .map(|a| a.iter().map(|v| v.as_str().unwrap()).collect())
            .unwrap_or_default();
        assert_eq!(wanted, required, "{schema}");
        assert_eq!(s["additionalProperties"], false, "{schema}");
    }
}
