//! The admission API end to end: auth, validation, deferral to a cleaner hour with the
//! numbers, reservations against the envelope, a hard budget, decisions stored, scoped and
//! joined to the job they became, and the Kubernetes webhook on the stored AdmissionReview.

use crate::scenario;
use chrono::{DateTime, Duration, DurationRound, Utc};
use serde_json::{json, Value};
use wattledger::auth::Role;
use wattledger_tests::TestApp;

pub(crate) async fn setup() -> TestApp {
    let app = TestApp::start().await;
    scenario::push_inventory(&app, &scenario::batches()).await;
    // Admission reloads on the inventory change; wait until it knows the tenant and site.
    let probe =
        json!({"tenant": "a", "gpus": 1, "duration_s": 60, "sites": ["s1"], "dry_run": true});
    for _ in 0..100 {
        if ask(&app, probe.clone()).await.0 == 200 {
            return app;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("admission never learned the inventory");
}

pub(crate) async fn ask(app: &TestApp, body: Value) -> (u16, Value) {
    app.post_raw(
        &app.token(Role::Scheduler),
        "/v1/admission",
        body.to_string(),
    )
    .await
}

/// Asks until the hot state has loaded what the test just wrote (it refreshes every 200 ms
/// in tests; sites and budgets every 15 refreshes or when poked): dry runs, which reserve nothing, until the answer is as expected; then the real question.
pub(crate) async fn ask_until(app: &TestApp, body: Value, done: impl Fn(&Value) -> bool) -> Value {
    let mut dry = body.clone();
    dry["dry_run"] = json!(true);
    for _ in 0..60 {
        let (status, answer) = ask(app, dry.clone()).await;
        if status == 200 && done(&answer) {
            let (status, answer) = ask(app, body.clone()).await;
            assert_eq!(status, 200, "{answer}");
            assert!(done(&answer), "{answer}");
            return answer;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("admission never answered as expected for {body}");
}

fn hour_now() -> DateTime<Utc> {
    Utc::now().duration_trunc(Duration::hours(1)).unwrap()
}

fn marginal(start: DateTime<Utc>, hours: i64, value: &str) -> Value {
    json!({"region": "DE", "signal": "carbon", "basis": "marginal", "status": "forecast",
           "source": "watttime", "start_at": start, "end_at": start + Duration::hours(hours),
           "value": value})
}

#[tokio::test]
async fn only_schedulers_ask_and_bad_questions_name_their_fields() {
    let app = setup().await;
    let body = json!({"tenant": "a", "gpus": 1, "duration_s": 60});
    let no_token = app
        .http
        .post(format!("{}/v1/admission", app.base))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(no_token.status().as_u16(), 401);
    for role in [Role::Collector, Role::Operator, Role::Finance] {
        let (status, _) = app
            .post_raw(&app.token(role), "/v1/admission", body.to_string())
            .await;
        assert_eq!(status, 403, "{role:?}");
    }
    let (status, _) = app
        .post_raw(&app.tenant_token("a"), "/v1/admission", body.to_string())
        .await;
    assert_eq!(status, 403);

    let fields = |v: &Value| -> Vec<String> {
        v["error"]["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["field"].as_str().unwrap().to_owned())
            .collect()
    };
    let (status, v) = ask(
        &app,
        json!({"tenant": "nobody", "gpus": -2, "duration_s": 60,
        "earliest_start": "2026-11-23T10:00:00Z", "deadline": "2026-11-23T09:00:00Z",
        "sites": ["s1", "mars"]}),
    )
    .await;
    assert_eq!(status, 422, "{v}");
    assert_eq!(v["error"]["code"], "validation_failed");
    let mut f = fields(&v);
    f.sort();
    assert_eq!(f, ["deadline", "gpus", "sites", "tenant"], "{v}");

    let (status, v) = ask(
        &app,
        json!({"tenant": "a", "gpus": "eight", "duration_s": 60, "colour": "red"}),
    )
    .await;
    assert_eq!(status, 422);
    let mut f = fields(&v);
    f.sort();
    assert_eq!(f, ["colour", "gpus"], "{v}");
    let (status, v) = ask(&app, json!({"tenant": "a"})).await;
    assert_eq!(status, 422);
    assert_eq!(fields(&v), ["gpus", "duration_s"], "{v}");
}

#[tokio::test]
async fn a_flexible_job_is_deferred_to_the_clean_hour_stored_scoped_and_joined() {
    let app = setup().await;
    let h = hour_now();
    let (status, body) = app
        .ingest(
            &app.token(Role::Collector),
            "signals",
            json!([
                marginal(h, 2, "600"),
                marginal(h + Duration::hours(2), 2, "150")
            ]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // 4 GPUs × 500 W × PUE 1.25 = 2.5 kW for an hour: 2.5 kWh.
    let q = json!({"tenant": "a", "job_name": "finetune", "job_key": "slurm:lab:9001",
        "gpus": 4, "duration_s": 3600, "power_per_gpu_w": 500, "kind": "training",
        "deadline": h + Duration::hours(4)});
    let answer = ask_until(&app, q, |a| a["decision"] == "defer").await;
    assert_eq!(answer["site"], "s1");
    let start: DateTime<Utc> = answer["start_at"].as_str().unwrap().parse().unwrap();
    assert_eq!(start, h + Duration::hours(2), "{answer}");
    assert_eq!(answer["estimate_now"]["kwh"], "2.500000");
    assert_eq!(
        answer["estimate_at_start"]["carbon_marginal_kg"],
        "0.375000"
    );
    // Now: the rest of this hour and part of the next, all at 600 g → 1.5 kg.
    assert_eq!(answer["estimate_now"]["carbon_marginal_kg"], "1.500000");
    assert_eq!(answer["savings"]["carbon_marginal_kg"], "1.125000");
    assert_eq!(answer["power"]["source"], "request");
    assert!(
        answer["reasons"][0].as_str().unwrap().contains("saves 75%"),
        "{answer}"
    );
    let id = answer["decision_id"].as_str().unwrap().to_owned();

    // Stored (asynchronously), visible to its tenant and not to another.
    let mut stored = Value::Null;
    for _ in 0..50 {
        let (_, page) = app
            .get(Some(&app.tenant_token("a")), "/v1/admission/decisions")
            .await;
        if page["decisions"].as_array().is_some_and(|d| !d.is_empty()) {
            stored = page;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(stored["decisions"][0]["id"], id.as_str(), "{stored}");
    assert_eq!(stored["decisions"][0]["decision"], "defer");
    let (_, other) = app
        .get(Some(&app.tenant_token("b")), "/v1/admission/decisions")
        .await;
    assert_eq!(other["decisions"], json!([]));
    let (status, _) = app
        .get(
            Some(&app.tenant_token("b")),
            "/v1/admission/decisions?tenant=a",
        )
        .await;
    assert_eq!(status, 404);

    // The job runs at its start: the decision is joined to it.
    let (status, body) = app
        .ingest(
            &app.token(Role::Scheduler),
            "jobs",
            json!([{"key": "slurm:lab:9001", "name": "finetune",
            "tenant": "a", "site": "s1", "kind": "training", "start_at": Utc::now()}]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let mut joined = Value::Null;
    for _ in 0..50 {
        let (_, page) = app
            .get(
                Some(&app.token(Role::Operator)),
                "/v1/admission/decisions?decision=defer",
            )
            .await;
        if page["decisions"][0]["job"].is_string() {
            joined = page;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(joined["decisions"][0]["job"], "slurm:lab:9001", "{joined}");
}

#[tokio::test]
async fn admitted_jobs_fill_the_envelope_and_the_next_one_waits() {
    let app = setup().await;
    // s1's envelope is 100 kW; each job is 8 × 1000 W × 1.25 = 10 kW for two hours.
    let q = json!({"tenant": "b", "gpus": 8, "duration_s": 7200, "power_per_gpu_w": 1000});
    let first = ask_until(&app, q.clone(), |a| a["decision"] == "admit").await;
    let start: DateTime<Utc> = first["start_at"].as_str().unwrap().parse().unwrap();
    for _ in 0..9 {
        let (_, a) = ask(&app, q.clone()).await;
        assert_eq!(a["decision"], "admit", "{a}");
    }
    let (_, eleventh) = ask(&app, q.clone()).await;
    assert_eq!(eleventh["decision"], "defer", "{eleventh}");
    let at: DateTime<Utc> = eleventh["start_at"].as_str().unwrap().parse().unwrap();
    assert!(
        at >= start + Duration::hours(2) && at <= start + Duration::hours(2) + Duration::minutes(2),
        "waits for the first admitted job to end: {eleventh}"
    );
    assert!(eleventh["reasons"][0]
        .as_str()
        .unwrap()
        .contains("100 kW envelope"));
    // Without a deadline after that: rejected, and nothing reserved for it.
    let mut tight = q.clone();
    tight["deadline"] = json!(Utc::now() + Duration::hours(3));
    let (_, r) = ask(&app, tight).await;
    assert_eq!(r["decision"], "reject", "{r}");
}

/// Two replicas on one database: what one reserves, the other counts within a few
/// refreshes, in both directions, and neither counts a reservation twice.
#[tokio::test]
async fn replicas_share_reservations() {
    let a = setup().await;
    let b = a.replica().await;
    // Each job is 8 × 1000 W × 1.25 = 10 kW of s1's 100 kW for two hours.
    let q = json!({"tenant": "b", "gpus": 8, "duration_s": 7200, "power_per_gpu_w": 1000,
                   "sites": ["s1"]});
    ask_until(&a, q.clone(), |x| x["decision"] == "admit").await;
    for _ in 0..5 {
        assert_eq!(ask(&a, q.clone()).await.1["decision"], "admit");
    }
    // Replica b sees a's six (60 kW) once they are stored: four more fit, the fifth waits.
    let mut dry = q.clone();
    dry["dry_run"] = json!(true);
    dry["gpus"] = json!(40); // 50 kW: fits 100 kW only while fewer than six jobs are seen.
    let seen = ask_until(&b, dry.clone(), |x| x["decision"] == "defer").await;
    assert!(
        seen["reasons"][0].as_str().unwrap().contains("60 kW"),
        "{seen}"
    );
    for _ in 0..4 {
        assert_eq!(ask(&b, q.clone()).await.1["decision"], "admit");
    }
    assert_eq!(ask(&b, dry.clone()).await.1["decision"], "defer");
    // And a, in turn, counts b's four: the next job waits there too, at 100 kW.
    let full = ask_until(&a, q.clone(), |x| x["decision"] == "defer").await;
    assert!(
        full["reasons"][0]
            .as_str()
            .unwrap()
            .contains("100 kW + this job's 10 kW"),
        "{full}"
    );
    // Past a full rebuild (every 15 refreshes), nothing is counted twice: still exactly full.
    tokio::time::sleep(std::time::Duration::from_millis(3500)).await;
    let (_, r) = ask(&b, dry).await;
    assert!(
        r["reasons"][0]
            .as_str()
            .unwrap()
            .contains("100 kW + this job's 50 kW"),
        "{r}"
    );
}

#[tokio::test]
async fn a_hard_budget_rejects_naming_it_and_a_soft_one_warns() {
    let app = setup().await;
    sqlx::query(
        "INSERT INTO budgets (key, tenant_id, limit_kwh, hard)
         SELECT 'a-monthly-energy', id, 10, true FROM tenants WHERE key = 'a'",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    // 8 × 700 W (the default draw) × 1.25 × 2 h = 14 kWh > 10.
    let q = json!({"tenant": "a", "gpus": 8, "duration_s": 7200});
    let answer = ask_until(&app, q.clone(), |a| a["decision"] == "reject").await;
    let why = answer["reasons"][0].as_str().unwrap();
    assert!(
        why.contains("'a-monthly-energy' would be exceeded") && why.contains("hard cap"),
        "{why}"
    );
    assert_eq!(answer["budgets"][0]["remaining"], "-4.000000");
    assert!(answer["power"]["source"]
        .as_str()
        .unwrap()
        .starts_with("default"));

    sqlx::query("UPDATE budgets SET hard = false")
        .execute(&app.pool)
        .await
        .unwrap();
    let (_, _) = app
        .ingest(
            &app.token(Role::Admin),
            "tenants",
            scenario::batches().tenants,
        )
        .await;
    let answer = ask_until(&app, q, |a| a["decision"] == "admit").await;
    assert!(
        answer["reasons"][0].as_str().unwrap().contains("soft cap"),
        "{answer}"
    );
}

#[tokio::test]
async fn the_webhook_answers_the_stored_admission_review() {
    let app = setup().await;
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/kubernetes/admissionreview-v1-pod-create-request.json");
    let stored: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let uid = stored["request"]["uid"].as_str().unwrap().to_owned();
    let scheduler = app.token(Role::Scheduler);

    // The stored pod asks for no GPU: allowed without a question.
    let (status, r) = app
        .post_raw(&scheduler, "/v1/admission/kubernetes", stored.to_string())
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(r["kind"], "AdmissionReview");
    assert_eq!(r["response"]["uid"], uid.as_str());
    assert_eq!(r["response"]["allowed"], true);

    // The same pod with 2 GPUs for tenant a, flexible until a deadline too close: denied.
    let mut gpu = stored.clone();
    gpu["request"]["object"]["spec"]["containers"][0]["resources"] =
        json!({"limits": {"nvidia.com/gpu": "2"}});
    gpu["request"]["object"]["metadata"]["annotations"] = json!({
        "wattledger.io/tenant": "a", "wattledger.io/duration": "2h",
        "wattledger.io/deadline": (Utc::now() + Duration::hours(1)).to_rfc3339()});
    let r = loop {
        let (status, r) = app
            .post_raw(&scheduler, "/v1/admission/kubernetes", gpu.to_string())
            .await;
        if status != 503 {
            assert_eq!(status, 200, "{r}");
            break r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(r["response"]["uid"], uid.as_str());
    assert_eq!(r["response"]["allowed"], false, "{r}");
    assert_eq!(r["response"]["status"]["code"], 403);
    assert!(
        r["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .contains("too close"),
        "{r}"
    );

    // Without the deadline (another review: another uid): admitted, and the decision names
    // the pod's job key.
    gpu["request"]["object"]["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("wattledger.io/deadline");
    gpu["request"]["uid"] = json!("7d0d5a5e-0d29-4b6e-9a57-2b1c2e8f0001");
    let (_, r) = app
        .post_raw(&scheduler, "/v1/admission/kubernetes", gpu.to_string())
        .await;
    assert_eq!(r["response"]["allowed"], true, "{r}");
    let decision_of = |r: &Value| {
        r["response"]["auditAnnotations"]["wattledger.io/decision"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let id = decision_of(&r);
    // The API server sending the same review again (its retry of a call whose answer it
    // lost) gets the same decision, not a second reservation.
    let (_, again) = app
        .post_raw(&scheduler, "/v1/admission/kubernetes", gpu.to_string())
        .await;
    assert_eq!(again["response"]["allowed"], true, "{again}");
    assert_eq!(decision_of(&again), id, "{again}");
    let mut source = Value::Null;
    for _ in 0..50 {
        let (_, page) = app
            .get(Some(&scheduler), "/v1/admission/decisions?decision=admit")
            .await;
        if page["decisions"][0]["id"] == id.as_str() {
            source = page["decisions"][0]["source"].clone();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(source, "kubernetes");
    let key: Option<String> =
        sqlx::query_scalar("SELECT job_key FROM admission_decisions WHERE id = $1::uuid")
            .bind(&id)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(key.as_deref(), Some("k8s:colin-coder/echo-pod"));
    let admitted: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM admission_decisions WHERE decision = 'admit' AND source = 'kubernetes'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(admitted, 1, "the resent review is not a second decision");

    // A tenant token may not call the webhook.
    let (status, _) = app
        .post_raw(
            &app.tenant_token("a"),
            "/v1/admission/kubernetes",
            gpu.to_string(),
        )
        .await;
    assert_eq!(status, 403);
}

#[tokio::test]
async fn without_history_the_device_models_typical_draw_is_used() {
    let app = setup().await;
    let (status, body) = app
        .ingest(
            &app.token(Role::Operator),
            "device_models",
            json!([{"key": "Test GPU 80GB", "embodied_kg": "36", "typical_power_w": 400}]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // 2 GPUs × 400 W × PUE 1.25 × 1 h = 1 kWh.
    let q = json!({"tenant": "a", "gpus": 2, "duration_s": 3600, "gpu_model": "Test GPU 80GB", "dry_run": true});
    let answer = ask_until(&app, q, |a| a["power"]["gpu_draw_w"] == 400).await;
    assert_eq!(answer["power"]["source"], "device_typical: Test GPU 80GB");
    assert_eq!(answer["estimate_now"]["kwh"], "1.000000");
}

#[tokio::test]
async fn the_measured_draw_is_the_step_peaks_not_the_means() {
    let app = TestApp::start().await;
    crate::scenario::push_inventory(&app, &crate::scenario::batches()).await;
    let now = chrono::Utc::now();
    let boundary = now.duration_trunc(Duration::minutes(1)).unwrap();
    // The node's last three step records: a steady 1,600 W mean with swings to 2,100 W.
    let records: Vec<_> = [(3, 1_900), (2, 2_100), (1, 1_800)]
        .iter()
        .map(|(ago, peak)| {
            let ts = boundary - Duration::minutes(*ago);
            json!({"meter": "n1", "ts": ts.to_rfc3339(), "counter_mj": 1_000_000 - ago * 96_000,
                   "power_w": 1_600, "peak_w": peak, "step_s": 60})
        })
        .collect();
    let (status, body) = app
        .ingest(&app.token(Role::Collector), "samples", json!(records))
        .await;
    assert_eq!(status, 200, "{body}");
    let draw = wattledger_store::admission::site_draw(&app.pool, now)
        .await
        .unwrap();
    // 2,100 W × the site's PUE of 1.25; from the means it would be 2,000 W.
    assert_eq!(draw.values().copied().collect::<Vec<_>>(), [2_625]);
}

/// The carbon-free share as a third signal: a tenant policy that weighs it alone defers a job
/// from a grid 20 % carbon-free to the hours forecast 90 % carbon-free, and the answer shows
/// both shares; carbon, flat, would not have moved it, and with the weight back at 0 it does
/// not move. The policy is checked like the others' numbers (422, each field named).
#[tokio::test]
async fn a_policy_weighing_the_carbon_free_share_defers_to_the_clean_hours() {
    let app = setup().await;
    let h = hour_now();
    let share = |from: i64, to: i64, value: &str| {
        json!({"region": "DE", "signal": "carbon_free", "status": "forecast",
               "source": "electricitymaps", "start_at": h + Duration::hours(from),
               "end_at": h + Duration::hours(to), "value": value})
    };
    let (status, body) = app
        .ingest(
            &app.token(Role::Collector),
            "signals",
            json!([
                marginal(h, 5, "400"),
                share(0, 2, "0.2"),
                share(2, 5, "0.9")
            ]),
        )
        .await;
    assert_eq!(status, 200, "{body}");

    let admin = app.token(Role::Admin);
    let path = "/v1/admission/policies/a";
    for (bad, field) in [
        ("1.5", "cfe_weight"),
        ("0.1234", "cfe_weight"),
        ("-1", "cfe_weight"),
    ] {
        let (status, v) = app.put(&admin, path, json!({"cfe_weight": bad})).await;
        assert_eq!(status, 422, "{bad}: {v}");
        assert_eq!(v["error"]["code"], "validation_failed");
        assert_eq!(v["error"]["errors"][0]["field"], field, "{v}");
    }
    let (status, _) = app
        .put(
            &app.token(Role::Scheduler),
            path,
            json!({"cfe_weight": "1"}),
        )
        .await;
    assert_eq!(status, 403);
    let (status, v) = app.put(&admin, path, json!({"cfe_weight": "1"})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["cfe_weight"].as_str(), v["carbon_weight"].as_str()),
        (Some("1"), Some("1"))
    );
    let (status, v) = app.get(Some(&app.token(Role::Scheduler)), path).await;
    assert_eq!(
        (status, v["configured"].as_bool()),
        (200, Some(true)),
        "{v}"
    );

    // 4 GPUs × 500 W × PUE 1.25 for an hour, by h + 4 h.
    let q = json!({"tenant": "a", "gpus": 4, "duration_s": 3600, "power_per_gpu_w": 500,
        "deadline": h + Duration::hours(4)});
    let answer = ask_until(&app, q.clone(), |a| a["decision"] == "defer").await;
    let start: DateTime<Utc> = answer["start_at"].as_str().unwrap().parse().unwrap();
    assert_eq!(start, h + Duration::hours(2), "{answer}");
    assert_eq!(answer["estimate_now"]["cfe_share"], "0.2", "{answer}");
    assert_eq!(answer["estimate_at_start"]["cfe_share"], "0.9", "{answer}");
    // 80 % of its energy fossil now, 10 % then: 87.5 % of it avoided.
    assert!(
        answer["reasons"][0]
            .as_str()
            .unwrap()
            .contains("saves 87.5% (carbon-free share)"),
        "{answer}"
    );

    let (status, _) = app.put(&admin, path, json!({"cfe_weight": 0})).await;
    assert_eq!(status, 200);
    let mut dry = q;
    dry["dry_run"] = json!(true);
    let answer = ask_until(&app, dry, |a| a["decision"] == "admit").await;
    assert_eq!(answer["estimate_now"]["cfe_share"], "0.2", "{answer}");
}

/// `POST /v1/admission` with the key `key`: status, answer, and whether it was a replay.
async fn ask_keyed(app: &TestApp, key: &str, body: &Value) -> (u16, Value, bool) {
    let r = app
        .http
        .post(format!("{}/v1/admission", app.base))
        .bearer_auth(app.token(Role::Scheduler))
        .header("Idempotency-Key", key)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let replayed = r.headers().get("idempotent-replayed").is_some();
    (status, r.json().await.unwrap(), replayed)
}

/// A scheduler that crashed between an answer and its own record of it asks again under the
/// same Idempotency-Key: it gets the first decision, from this replica or another, and
/// nothing is reserved or stored twice. The key with another question is refused.
#[tokio::test]
async fn a_question_asked_again_under_its_key_gets_the_first_decision() {
    let a = setup().await;
    // Each job is 8 × 1000 W × 1.25 = 10 kW of s1's 100 kW for two hours.
    let q = json!({"tenant": "b", "gpus": 8, "duration_s": 7200, "power_per_gpu_w": 1000,
                   "sites": ["s1"]});
    let key = "wl-6f1c/wattledger/first";
    let (status, first, replayed) = ask_keyed(&a, key, &q).await;
    assert_eq!((status, replayed), (200, false), "{first}");
    assert_eq!(first["decision"], "admit", "{first}");
    let (status, again, replayed) = ask_keyed(&a, key, &q).await;
    assert_eq!((status, replayed), (200, true), "{again}");
    assert_eq!(again["decision_id"], first["decision_id"]);
    assert_eq!(again["start_at"], first["start_at"]);

    // The key with another question: refused, naming the header.
    let mut other = q.clone();
    other["gpus"] = json!(4);
    let (status, refused, _) = ask_keyed(&a, key, &other).await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["errors"][0]["field"], "Idempotency-Key");
    // Another tenant's same key is another key.
    let mut theirs = q.clone();
    theirs["tenant"] = json!("a");
    let (status, answer, replayed) = ask_keyed(&a, key, &theirs).await;
    assert_eq!((status, replayed), (200, false), "{answer}");
    assert_ne!(answer["decision_id"], first["decision_id"]);

    // Reserved once: with the other tenant's job, 20 kW are taken; eight more fit, the
    // ninth waits (a second reservation for the replay would make the eighth wait).
    for i in 0..8 {
        let (_, r) = ask(&a, q.clone()).await;
        assert_eq!(r["decision"], "admit", "job {i}: {r}");
    }
    let (_, full) = ask(&a, q.clone()).await;
    assert_eq!(full["decision"], "defer", "{full}");

    // Stored once; and another replica, which never saw the key, answers from the store.
    let mut stored = 0_i64;
    for _ in 0..100 {
        stored = sqlx::query_scalar(
            "SELECT count(*) FROM admission_decisions WHERE idempotency_key = $1",
        )
        .bind(key)
        .fetch_one(&a.pool)
        .await
        .unwrap();
        if stored == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(stored, 2, "one decision per tenant and key");
    let b = a.replica().await;
    let (status, there, replayed) = ask_keyed(&b, key, &q).await;
    assert_eq!((status, replayed), (200, true), "{there}");
    assert_eq!(there["decision_id"], first["decision_id"]);
    let (status, _, _) = ask_keyed(&b, key, &other).await;
    assert_eq!(status, 422);

    // Keys are 1 to 255 visible ASCII characters.
    for bad in ["a key", &"k".repeat(256)] {
        let (status, body, _) = ask_keyed(&a, bad, &q).await;
        assert_eq!(status, 422, "{bad:?}: {body}");
        assert_eq!(body["error"]["errors"][0]["field"], "Idempotency-Key");
    }
}
