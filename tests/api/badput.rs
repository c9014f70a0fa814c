//! Badput through the API: how a job ended and its last checkpoint, sent with the job, turn
//! the energy it spent after that checkpoint (and its cost and carbon) into badput, a
//! known answer worked out by hand; re-sending a later checkpoint recomputes it; the link
//! between a requeued attempt and its original; what the job record refuses.

use crate::dashboard::Browser;
use crate::scenario;
use serde_json::{json, Value};
use wattledger::auth::Role;
use wattledger::dashboard::login::add_user;
use wattledger_tests::TestApp;

/// The scenario hour's flat carbon (400 g/kWh) and time-of-use price (0.30 EUR/kWh, then
/// 0.20 from 10:30): the site's 2 kWh cost 0.50 EUR and weigh 800 g.
async fn signals(app: &TestApp) {
    let point = |signal: &str, extra: Value, from: i64, to: i64, value: &str| {
        let mut p = json!({"region": "DE", "signal": signal, "status": "actual", "source": "test",
                           "start_at": scenario::at(from), "end_at": scenario::at(to), "value": value});
        p.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        p
    };
    let (status, body) = app
        .ingest(
            &app.token(Role::Collector),
            "signals",
            json!([
                point("carbon", json!({"basis": "average"}), 0, 60, "400"),
                point("price", json!({"currency": "EUR"}), 0, 30, "0.30"),
                point("price", json!({"currency": "EUR"}), 30, 60, "0.20"),
            ]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
}

/// The scenario's training job, ended as `state` with its last checkpoint at `checkpoint`.
fn train_job(state: &str, checkpoint: Option<&str>) -> Value {
    let mut jobs = scenario::batches().jobs;
    let job = &mut jobs[0];
    assert_eq!(job["key"], "job-train");
    job["end_state"] = json!(state);
    if let Some(c) = checkpoint {
        job["last_checkpoint_at"] = json!(c);
    }
    json!([job.clone()])
}

async fn usage(app: &TestApp, group_by: &str) -> Vec<Value> {
    let (status, body) = app
        .get(
            Some(&app.token(Role::Admin)),
            &format!(
                "/v1/usage?group_by={group_by}&from={}&to={}",
                scenario::HOUR,
                scenario::NEXT_HOUR
            ),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body["rows"].as_array().unwrap().clone()
}

/// By hand (the domain's known answer): the training job draws 48.72 MJ IT + 12.18 MJ of
/// facility overhead a minute, 3654 MJ in the hour. It fails with its last checkpoint at
/// 10:40:30: the 19 minutes from 10:41 and half of the minute from 10:40 are lost,
/// 19 × 60.9 + 30.45 = 1187.55 MJ, 0.325 of its energy. Its carbon is 800 g × 3654/7200 =
/// 406 g, of which 0.325 is 131.95 g; its cost 0.50 EUR × 3654/7200 = 0.25375 EUR, of which
/// 0.325 is 0.08246875, to the millionth by largest remainder 0.082469.
#[tokio::test]
async fn a_failed_job_loses_what_it_spent_after_its_last_checkpoint() {
    let app = TestApp::start().await;
    scenario::push(&app, &scenario::batches()).await;
    signals(&app).await;
    let scheduler = app.token(Role::Scheduler);
    let (status, body) = app
        .ingest(
            &scheduler,
            "jobs",
            train_job("failed", Some("2026-11-02T10:40:30Z")),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    app.attribute().await;

    let rows = usage(&app, "job").await;
    let train = rows.iter().find(|r| r["job"] == "job-train").unwrap();
    assert_eq!(train["total_mj"], 3_654_000_000i64);
    assert_eq!(train["badput_mj"], 1_187_550_000i64);
    assert_eq!(train["badput_kwh"], "0.329875");
    assert_eq!(train["goodput_kwh"], "0.685125");
    assert_eq!(train["badput_fraction"], "0.325");
    assert_eq!(train["carbon_g"], "406");
    assert_eq!(train["badput_carbon_g"], "131.95");
    assert_eq!(train["goodput_carbon_g"], "274.05");
    assert_eq!(train["cost"], json!({"EUR": "0.25375"}));
    assert_eq!(train["badput_cost"], json!({"EUR": "0.082469"}));
    assert_eq!(train["goodput_cost"], json!({"EUR": "0.171281"}));
    // Serving and interactive work is never badput.
    for other in rows.iter().filter(|r| r["job"] != "job-train") {
        assert_eq!(other["badput_mj"], 0, "{other}");
    }

    // By how jobs ended: the failed job's whole energy, the jobs that did not say, and idle.
    let by_state: Vec<(String, i64, i64)> = usage(&app, "end_state")
        .await
        .iter()
        .map(|r| {
            (
                r["end_state"].as_str().unwrap().to_owned(),
                r["total_mj"].as_i64().unwrap(),
                r["badput_mj"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        by_state,
        [
            ("failed".to_owned(), 3_654_000_000, 1_187_550_000),
            ("idle".to_owned(), scenario::EXPECTED_PLATFORM, 0),
            (
                "unknown".to_owned(),
                7_200_000_000 - 3_654_000_000 - scenario::EXPECTED_PLATFORM,
                0
            ),
        ]
    );
    // The tenant's view sums the same badput over its rows, from the day rollup.
    let (status, body) = app
        .get(
            Some(&app.token(Role::Admin)),
            "/v1/usage?group_by=tenant&from=2026-11-02T00:00:00Z&to=2026-11-03T00:00:00Z",
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let a = &body["rows"][0];
    assert_eq!(
        (a["tenant"].as_str(), a["badput_mj"].as_i64()),
        (Some("a"), Some(1_187_550_000))
    );
    assert_eq!(a["badput_carbon_g"], "131.95");
    // Prometheus sees the same loss in the site's latest hour, in joules.
    let text = crate::prometheus::scrape(&app).await;
    let badput = |tenant: &str| {
        crate::prometheus::value(
            &text,
            &format!("wattledger_tenant_badput_energy_joules{{tenant=\"{tenant}\",site=\"s1\"}}"),
        )
    };
    assert_eq!(badput("a").as_deref(), Some("1187550"), "{text}");
    assert_eq!(badput("b").as_deref(), Some("0"));

    // The tenant's page and the operator's show the share kept and the loss.
    for (user, role, tenant, path) in [
        ("alice", Role::Tenant, Some("a"), "/tenants/a"),
        ("olga", Role::Operator, None, "/operator"),
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
        let section = page.body.split("Goodput and badput").nth(1).unwrap_or("");
        // a: 3.16245 of 4.35 kWh kept; the site: 6.01245 of 7.2.
        let kept = if tenant.is_some() { "72.7%" } else { "83.5%" };
        for shown in [kept, "job-train", "failed", "Nov 2, 10:40 UTC", "32.5%"] {
            assert!(section.contains(shown), "{path}: {shown} missing");
        }
    }

    // A later checkpoint, sent again, recomputes the hour: lost from 10:50, 10 minutes.
    let (status, body) = app
        .ingest(
            &scheduler,
            "jobs",
            train_job("failed", Some("2026-11-02T10:50:00Z")),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["written"], 1, "{body}");
    app.attribute().await;
    let rows = usage(&app, "job").await;
    let train = rows.iter().find(|r| r["job"] == "job-train").unwrap();
    assert_eq!(train["badput_mj"], 609_000_000i64);

    // Completed after all: no badput.
    let (status, body) = app
        .ingest(&scheduler, "jobs", train_job("completed", None))
        .await;
    assert_eq!(status, 200, "{body}");
    app.attribute().await;
    let rows = usage(&app, "job").await;
    let train = rows.iter().find(|r| r["job"] == "job-train").unwrap();
    assert_eq!(train["badput_mj"], 0);
    assert_eq!(train["badput_cost"], json!({"EUR": "0"}));
    assert_eq!(train["goodput_cost"], json!({"EUR": "0.25375"}));
}

/// A timed-out job without a checkpoint loses all of it; its requeued attempt is its own job,
/// linked to it, and the job API shows both.
#[tokio::test]
async fn a_requeued_attempt_is_its_own_job_linked_to_its_original() {
    let app = TestApp::start().await;
    let mut b = scenario::batches();
    let first = {
        let mut j = b.jobs[0].clone();
        j["end_at"] = json!(scenario::at(20));
        j["allocations"][0]["end_at"] = json!(scenario::at(20));
        j["end_state"] = json!("requeued");
        j
    };
    let second = {
        let mut j = b.jobs[0].clone();
        j["key"] = json!("job-train+1");
        j["start_at"] = json!(scenario::at(20));
        j["allocations"][0]["start_at"] = json!(scenario::at(20));
        j["end_state"] = json!("timeout");
        j["requeue_of"] = json!("job-train");
        j
    };
    // The original and its attempt in one batch, the original first.
    b.jobs = json!([first, second, b.jobs[1].clone(), b.jobs[2].clone()]);
    scenario::push(&app, &b).await;
    app.attribute().await;
    let rows = usage(&app, "job").await;
    let mj = |key: &str| -> (i64, i64) {
        let r = rows.iter().find(|r| r["job"] == key).unwrap();
        (
            r["total_mj"].as_i64().unwrap(),
            r["badput_mj"].as_i64().unwrap(),
        )
    };
    // 20 and 40 minutes of 60.9 MJ, all of it lost (neither saved anything).
    assert_eq!(mj("job-train"), (1_218_000_000, 1_218_000_000));
    assert_eq!(mj("job-train+1"), (2_436_000_000, 2_436_000_000));
    let (status, job) = app
        .get(Some(&app.token(Role::Admin)), "/v1/jobs/job-train+1")
        .await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["requeue_of"], "job-train");
    assert_eq!(job["end_state"], "timeout");
    assert_eq!(job["badput_mj"], 2_436_000_000i64);
    add_user(&app.pool, "ada", Role::Admin, None, "correct horse battery")
        .await
        .unwrap();
    let mut browser = Browser::new(&app);
    browser.sign_in("ada", "correct horse battery").await;
    let page = browser.get("/jobs/job-train%2B1").await;
    assert_eq!(page.status, 200, "{}", page.body);
    for shown in [
        "ended timeout · no checkpoint · badput 0.7 kWh (100.0% of its energy)",
        "requeued attempt of <a href=\"/jobs/job-train\"><code>job-train</code></a>",
    ] {
        assert!(page.body.contains(shown), "{shown} missing");
    }
}

#[tokio::test]
async fn how_a_job_ended_is_checked_like_every_field() {
    let app = TestApp::start().await;
    let b = scenario::batches();
    scenario::push(&app, &b).await;
    let mut open = b.jobs[0].clone();
    open.as_object_mut().unwrap().remove("end_at");
    open["allocations"][0]
        .as_object_mut()
        .unwrap()
        .remove("end_at");
    open["end_state"] = json!("exploded");
    let mut late = b.jobs[1].clone();
    late["last_checkpoint_at"] = json!("2026-11-02T11:00:01Z");
    late["requeue_of"] = json!("job-nowhere");
    late["restarts"] = json!(-2);
    let (status, body) = app
        .ingest(&app.token(Role::Scheduler), "jobs", json!([open, late]))
        .await;
    assert_eq!(status, 422, "{body}");
    // In each record's field order.
    let errors: Vec<(i64, String)> = body["error"]["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["index"].as_i64().unwrap(),
                e["field"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        errors,
        [
            (0, "end_state".to_owned()),
            (1, "last_checkpoint_at".to_owned()),
            (1, "requeue_of".to_owned()),
            (1, "restarts".to_owned()),
        ],
        "{body}"
    );
}

/// A closed month's statement carries the training line's badput and carbon-free energy, and
/// FOCUS 1.4 has them in its `x_` columns: the known answer above (1187.55 MJ lost) in
/// September, with the grid half carbon-free all hour (3654 MJ × 0.5 = 1827 MJ).
#[tokio::test]
async fn a_closed_months_statement_carries_badput_and_carbon_free_energy() {
    let app = TestApp::start().await;
    let hour = "2026-09-15T10:00:00Z";
    let mut b = scenario::batches_at(hour);
    b.sites[0]["fallback_price"] = json!("0.20");
    b.sites[0]["fallback_intensity_g"] = json!("300");
    b.jobs[0]["end_state"] = json!("failed");
    b.jobs[0]["last_checkpoint_at"] = json!("2026-09-15T10:40:30Z");
    scenario::push(&app, &b).await;
    let (status, body) = app
        .ingest(
            &app.token(Role::Collector),
            "signals",
            json!([{"region": "DE", "signal": "carbon_free", "status": "actual",
                    "source": "test", "start_at": hour, "end_at": "2026-09-15T11:00:00Z",
                    "value": "0.5"}]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    app.attribute().await;
    let finance = app.token(Role::Finance);
    let (status, close) = app
        .post_raw(
            &finance,
            "/v1/chargeback/months/2026-09/close",
            String::new(),
        )
        .await;
    assert_eq!(status, 201, "{close}");
    let a = close["statements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["tenant"] == "a")
        .unwrap();
    let train = a["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["job_class"] == "training")
        .unwrap();
    assert_eq!(train["badput_mj"], 1_187_550_000i64, "{train}");
    assert_eq!(train["carbon_free_mj"], 1_827_000_000i64, "{train}");
    assert_eq!(train["cfe_score"], "0.5");
    // a's statement: the endpoint's third has no badput; all of it is half carbon-free.
    assert_eq!(a["badput_mj"], 1_187_550_000i64);
    assert_eq!(a["carbon_free_mj"], 2_175_000_000i64);

    let (status, csv, _) = crate::chargeback::bytes(
        &app,
        &finance,
        "/v1/chargeback/months/2026-09/exports/focus?version=1.4",
    )
    .await;
    assert_eq!(status, 200);
    let csv = String::from_utf8(csv).unwrap();
    // The x_ columns come last and hold no commas (FOCUS's own columns before them may, in
    // quotes): read each row's from its end.
    let mut lines = csv.lines().filter(|l| !l.starts_with('#'));
    let header: Vec<&str> = lines.next().unwrap().rsplit(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let row = lines
        .map(|l| l.rsplit(',').collect::<Vec<_>>())
        .find(|r| r[col("x_JobClass")] == "training" && !r[col("x_EnergyMillijoules")].is_empty())
        .expect("the training line's energy row");
    assert_eq!(row[col("x_BadputMillijoules")], "1187550000");
    assert_eq!(row[col("x_BadputKWh")], "0.329875");
    assert_eq!(row[col("x_CarbonFreeKWh")], "0.507500");
    assert_eq!(row[col("x_CarbonFreeEnergyScore")], "0.5000");
}
