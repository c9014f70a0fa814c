//! Bad input: refused whole with every error listed, never a 500, never a silent drop.

use crate::scenario;
use serde_json::{json, Value};
use wattledger::auth::Role;
use wattledger_tests::TestApp;

fn errors(body: &Value) -> Vec<(u64, String)> {
    body["error"]["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["index"].as_u64().unwrap(),
                e["field"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

async fn count(app: &TestApp, table: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_bad_sample_batch_is_refused_whole_with_each_error() {
    let app = TestApp::start().await;
    scenario::push_inventory(&app, &scenario::batches()).await;
    let collector = app.token(Role::Collector);
    let batch = json!([
        {"meter": "g0", "ts": scenario::at(0), "counter_mj": 1},
        {"meter": "nope", "ts": scenario::at(1), "counter_mj": 2},
        {"meter": "g0", "ts": "2999-01-01T00:00:00Z", "counter_mj": 3},
        {"meter": "g0", "ts": scenario::at(3), "counter_mj": "abc"},
        {"meter": "g0", "ts": scenario::at(4), "power_w": -5},
        {"meter": "g0", "ts": scenario::at(5)},
        {"meter": "g1-mig0", "ts": scenario::at(6), "counter_mj": 7},
        {"meter": "g0", "ts": "yesterday", "counter_mj": 8},
        {"meter": "g0", "ts": scenario::at(9), "counter_mj": 1.5, "volts": 230},
        {"meter": "g0", "ts": scenario::at(10), "counter_mj": 10}
    ]);
    let (status, body) = app.ingest(&collector, "samples", batch).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "validation_failed");
    assert_eq!(
        errors(&body),
        vec![
            (1, "meter".into()),
            (2, "ts".into()),
            (3, "counter_mj".into()),
            (4, "power_w".into()),
            (5, "counter_mj".into()),
            (6, "meter".into()),
            (7, "ts".into()),
            (8, "volts".into()),
            (8, "counter_mj".into()),
        ]
    );
    assert_eq!(
        count(&app, "samples").await,
        0,
        "nothing of a refused batch is written"
    );
    assert_eq!(count(&app, "dirty_hours").await, 0);
}

#[tokio::test]
async fn bad_jobs_and_tokens_are_refused_with_their_fields() {
    let app = TestApp::start().await;
    let b = scenario::batches();
    scenario::push_inventory(&app, &b).await;
    let scheduler = app.token(Role::Scheduler);
    let (status, body) = app
        .ingest(
            &scheduler,
            "jobs",
            json!([
                {"key": "j1", "tenant": "a", "kind": "training", "start_at": scenario::at(10), "end_at": scenario::at(5)},
                {"key": "j2", "tenant": "zzz", "kind": "dancing", "start_at": scenario::at(0),
                 "allocations": [{"meter": "n1"}, {"meter": "g0", "share": 1.5}]},
                {"key": "j1", "tenant": "a", "site": "s1", "kind": "batch", "start_at": scenario::at(0)}
            ]),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        errors(&body),
        vec![
            (0, "end_at".into()),
            (1, "tenant".into()),
            (1, "kind".into()),
            (1, "allocations[0].meter".into()),
            (1, "allocations[1].share".into()),
        ]
    );
    assert_eq!(count(&app, "jobs").await, 0);

    // A repeated key is refused too, once the records themselves are valid.
    let (status, body) = app
        .ingest(
            &scheduler,
            "jobs",
            json!([
                {"key": "j1", "tenant": "a", "site": "s1", "kind": "batch", "start_at": scenario::at(0)},
                {"key": "j1", "tenant": "a", "site": "s1", "kind": "batch", "start_at": scenario::at(1)}
            ]),
        )
        .await;
    assert_eq!((status, errors(&body)), (422, vec![(1, "key".into())]));

    let (status, _) = app.ingest(&scheduler, "jobs", b.jobs.clone()).await;
    assert_eq!(status, 200);
    let (status, body) = app
        .ingest(
            &app.token(Role::Collector),
            "tokens",
            json!([
                {"job": "job-endpoint", "start_at": scenario::at(10), "end_at": scenario::at(5), "prompt_tokens": 1, "generated_tokens": 1},
                {"job": "job-endpoint", "tenant": "nobody", "start_at": scenario::at(0), "end_at": scenario::at(1), "prompt_tokens": -1, "generated_tokens": 1}
            ]),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        errors(&body),
        vec![
            (0, "end_at".into()),
            (1, "tenant".into()),
            (1, "prompt_tokens".into())
        ]
    );
    assert_eq!(count(&app, "token_records").await, 0);
}

#[tokio::test]
async fn a_bad_meter_tree_is_refused() {
    let app = TestApp::start().await;
    let b = scenario::batches();
    let admin = app.token(Role::Admin);
    for (what, records) in [("tenants", &b.tenants), ("sites", &b.sites)] {
        assert_eq!(app.ingest(&admin, what, records.clone()).await.0, 200);
    }
    let (status, body) = app
        .ingest(
            &admin,
            "meters",
            json!([
                {"key": "f", "site": "s1", "kind": "facility", "parent": "x"},
                {"key": "g", "site": "s1", "kind": "gpu"},
                {"key": "n", "site": "s1", "kind": "node"},
                {"key": "m", "site": "s1", "kind": "mig", "parent": "n"},
                {"key": "q", "site": "nowhere", "kind": "node"}
            ]),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        errors(&body),
        vec![
            (0, "parent".into()),
            (1, "parent".into()),
            (3, "parent".into()),
            (4, "site".into())
        ]
    );
}

#[tokio::test]
async fn a_conflicting_duplicate_is_reported_and_the_stored_sample_stands() {
    let app = TestApp::start().await;
    scenario::push_inventory(&app, &scenario::batches()).await;
    let collector = app.token(Role::Collector);
    let first = json!([{"meter": "g0", "ts": scenario::at(0), "counter_mj": 100}]);
    assert_eq!(app.ingest(&collector, "samples", first).await.0, 200);
    let (status, body) = app
        .ingest(
            &collector,
            "samples",
            json!([
                {"meter": "g0", "ts": scenario::at(1), "counter_mj": 200},
                {"meter": "g0", "ts": scenario::at(0), "counter_mj": 999}
            ]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["written"], 1);
    assert_eq!(body["conflicts"][0]["index"], 1);
    let stored: i64 = sqlx::query_scalar("SELECT counter_mj FROM samples WHERE ts = $1")
        .bind(
            chrono::DateTime::parse_from_rfc3339(&scenario::at(0))
                .unwrap()
                .to_utc(),
        )
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(stored, 100);
    assert_eq!(count(&app, "sample_conflicts").await, 1);

    // Within one batch: identical copies collapse, different ones are refused.
    let (status, body) = app
        .ingest(
            &collector,
            "samples",
            json!([
                {"meter": "g0", "ts": scenario::at(5), "counter_mj": 500},
                {"meter": "g0", "ts": scenario::at(5), "counter_mj": 500},
                {"meter": "g0", "ts": scenario::at(5), "counter_mj": 501}
            ]),
        )
        .await;
    assert_eq!((status, errors(&body)), (422, vec![(2, "ts".into())]));
}

#[tokio::test]
async fn size_limits_and_malformed_bodies_get_clear_4xx() {
    let app = TestApp::start_with(|c| {
        c.max_batch_records = 3;
        c.max_body_bytes = 2_000;
    })
    .await;
    let collector = app.token(Role::Collector);
    let four = json!([{}, {}, {}, {}]);
    let (status, body) = app.ingest(&collector, "samples", four).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (413, Some("too_many_records"))
    );

    let big = json!([{"meter": "x".repeat(3_000), "ts": scenario::at(0), "counter_mj": 1}]);
    let (status, body) = app.ingest(&collector, "samples", big).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (413, Some("payload_too_large"))
    );

    let (status, body) = app
        .post_raw(&collector, "/v1/ingest/samples", "{not json".into())
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("bad_request"))
    );
    let (status, _) = app
        .post_raw(&collector, "/v1/ingest/samples", "[]".into())
        .await;
    assert_eq!(status, 400);

    let r = app
        .http
        .post(format!("{}/v1/ingest/samples", app.base))
        .bearer_auth(&collector)
        .header("content-type", "text/plain")
        .body("{\"records\": []}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 415);
}

#[tokio::test]
async fn keys_with_nul_bytes_are_refused_not_500() {
    // Found by schemathesis: PostgreSQL text cannot hold NUL, so lookups must not send it.
    let app = TestApp::start().await;
    let (status, body) = app
        .ingest(
            &app.token(Role::Collector),
            "samples",
            json!([{"meter": "g\u{0}0", "ts": scenario::at(0), "counter_mj": 1}]),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(errors(&body), vec![(0, "meter".into())]);
    // In a URL, the one text rule answers before any handler: 400, never a 500.
    for path in ["/v1/usage?tenant=a%00b", "/v1/jobs/a%00b"] {
        let (status, body) = app.get(Some(&app.token(Role::Admin)), path).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some("bad_request")),
            "{path}"
        );
    }
}

#[tokio::test]
async fn an_allocation_may_name_its_gpu_by_uuid() {
    // The kubelet's PodResources API knows GPUs (and MIG instances) by UUID only, whatever
    // key template the node's collectors registered them under.
    let app = TestApp::start().await;
    scenario::push_inventory(&app, &scenario::batches()).await;
    let scheduler = app.token(Role::Scheduler);
    let (status, body) = app
        .ingest(
            &scheduler,
            "jobs",
            json!([
                {"key": "k8s:serving/p1", "tenant": "a", "kind": "inference", "start_at": scenario::at(0),
                 "allocations": [{"meter": "GPU-1", "share": "0.25"}, {"meter": "g2"}]},
                {"key": "k8s:serving/p2", "tenant": "a", "kind": "inference", "start_at": scenario::at(0),
                 "allocations": [{"meter": "GPU-unknown"}]}
            ]),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(errors(&body), vec![(1, "allocations[0].meter".into())]);
    let (status, body) = app
        .ingest(
            &scheduler,
            "jobs",
            json!([{"key": "k8s:serving/p1", "tenant": "a", "kind": "inference", "start_at": scenario::at(0),
                    "allocations": [{"meter": "GPU-1", "share": "0.25"}, {"meter": "g2"}]}]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let held: Vec<(String, String)> = sqlx::query_as(
        "SELECT m.key, a.share::text FROM allocations a JOIN meters m ON m.id = a.meter_id ORDER BY m.key",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        held,
        vec![
            ("g1".into(), "0.250000".into()),
            ("g2".into(), "1.000000".into())
        ]
    );
}

#[tokio::test]
async fn job_ingest_counts_jobs_and_allocations_apart() {
    // Two jobs with one GPU each: two jobs and two allocations written (it said 6).
    let app = TestApp::start().await;
    scenario::push_inventory(&app, &scenario::batches()).await;
    let jobs = json!([
        {"key": "j1", "tenant": "a", "kind": "batch", "start_at": scenario::at(0),
         "allocations": [{"meter": "g0"}]},
        {"key": "j2", "tenant": "b", "kind": "batch", "start_at": scenario::at(0),
         "allocations": [{"meter": "g2"}]}
    ]);
    let scheduler = app.token(Role::Scheduler);
    let (status, body) = app.ingest(&scheduler, "jobs", jobs.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (&body["received"], &body["written"], &body["duplicates"]),
        (&json!(2), &json!(2), &json!(0))
    );
    assert_eq!(
        body["allocations"],
        json!({"received": 2, "written": 2, "duplicates": 0})
    );
    let (_, body) = app.ingest(&scheduler, "jobs", jobs).await;
    assert_eq!(
        (&body["written"], &body["duplicates"]),
        (&json!(0), &json!(2))
    );
    assert_eq!(
        body["allocations"],
        json!({"received": 2, "written": 0, "duplicates": 2})
    );
}

/// Step records: the step's peak beside its mean, checked like any power reading and never
/// below the mean; a resend with another peak is a conflict, not a silent overwrite.
#[tokio::test]
async fn step_records_keep_their_peak_and_a_peak_below_the_mean_is_refused() {
    let app = TestApp::start().await;
    scenario::push_inventory(&app, &scenario::batches()).await;
    let collector = app.token(Role::Collector);
    let (status, body) = app
        .ingest(
            &collector,
            "samples",
            json!([
                {"meter": "g0", "ts": scenario::at(1), "counter_mj": 1, "power_w": 300, "peak_w": 250},
                {"meter": "g0", "ts": scenario::at(2), "counter_mj": 2, "peak_w": 2e7},
                {"meter": "g0", "ts": scenario::at(3), "counter_mj": 3, "power_w": 300, "peak_w": -1}
            ]),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        errors(&body),
        vec![
            (0, "peak_w".into()),
            (1, "peak_w".into()),
            (2, "peak_w".into())
        ]
    );
    let step = json!([
        {"meter": "g0", "ts": scenario::at(1), "counter_mj": 60000, "power_w": 310.5, "peak_w": 702.25}
    ]);
    let (status, body) = app.ingest(&collector, "samples", step.clone()).await;
    assert_eq!(status, 200, "{body}");
    let stored: (Option<i64>, Option<i64>) =
        sqlx::query_as("SELECT power_mw, peak_mw FROM samples")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(stored, (Some(310_500), Some(702_250)));
    let (_, body) = app.ingest(&collector, "samples", step).await;
    assert_eq!(body["duplicates"], 1, "{body}");
    let (_, body) = app
        .ingest(
            &collector,
            "samples",
            json!([{"meter": "g0", "ts": scenario::at(1), "counter_mj": 60000, "power_w": 310.5, "peak_w": 800}]),
        )
        .await;
    assert_eq!(body["conflicts"][0]["index"], 0, "{body}");
    assert_eq!(count(&app, "sample_conflicts").await, 1);
}

/// Group commit (`samples::insert_group`): batches written together keep each its own
/// outcome, whether the group takes one COPY or falls back batch by batch, and mark what
/// one batch at a time would.
#[tokio::test]
async fn batches_committed_together_keep_their_own_outcomes() {
    use wattledger_store::samples::{insert_group, SampleRow};
    let app = TestApp::start().await;
    scenario::push_inventory(&app, &scenario::batches()).await;
    let ids: std::collections::HashMap<String, (i64, i64)> =
        sqlx::query_as::<_, (String, i64, i64)>("SELECT key, site_id, id FROM meters")
            .fetch_all(&app.pool)
            .await
            .unwrap()
            .into_iter()
            .map(|(key, site, id)| (key, (site, id)))
            .collect();
    let row = |meter: &str, minute: i64, counter_mj: i64| SampleRow {
        site_id: ids[meter].0,
        meter_id: ids[meter].1,
        ts: chrono::DateTime::parse_from_rfc3339(&scenario::at(minute))
            .unwrap()
            .to_utc(),
        counter_mj: Some(counter_mj),
        power_mw: None,
        peak_mw: None,
        raw: false,
        counter_estimated: false,
    };
    let written = |o: &wattledger_store::StoreResult<wattledger_store::samples::InsertOutcome>| {
        let o = o.as_ref().unwrap();
        (o.inserted, o.duplicates, o.conflicts.len())
    };

    // All new: one transaction for the group.
    let a = vec![row("g0", 0, 100), row("g1", 0, 100)];
    let b = vec![row("g2", 0, 100), row("n1", 0, 1_000)];
    let out = insert_group(&app.pool, &[a.clone(), b.clone()]).await;
    assert_eq!(
        out.iter().map(written).collect::<Vec<_>>(),
        [(2, 0, 0), (2, 0, 0)]
    );
    assert_eq!(count(&app, "samples").await, 4);

    // A resend, a conflict and a new batch in one group: the COPY fails on the stored rows
    // and each batch is written on its own, with its own outcome.
    let c = vec![row("g0", 1, 200)];
    let conflicting = vec![row("g2", 0, 999), row("g2", 1, 200)];
    let out = insert_group(&app.pool, &[c, a.clone(), conflicting]).await;
    assert_eq!(
        out.iter().map(written).collect::<Vec<_>>(),
        [(1, 0, 0), (0, 2, 0), (1, 0, 1)]
    );
    assert_eq!(count(&app, "samples").await, 6);
    assert_eq!(count(&app, "sample_conflicts").await, 1);

    // The same sample in two batches of a group (an agent's retry racing its first try):
    // written once, the other copy a duplicate.
    let d = vec![row("g1", 1, 200)];
    let out = insert_group(&app.pool, &[d.clone(), d]).await;
    assert_eq!(
        out.iter().map(written).collect::<Vec<_>>(),
        [(1, 0, 0), (0, 1, 0)]
    );
    assert_eq!(count(&app, "samples").await, 7);

    // Every meter's head follows its newest samples, and the hour is dirty, as batch by
    // batch would leave them.
    let heads: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM meter_heads h JOIN meters m ON m.id = h.meter_id
         WHERE h.last_ts = (SELECT max(ts) FROM samples s
                            WHERE s.site_id = h.site_id AND s.meter_id = h.meter_id)",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(heads, 4);
    assert_eq!(count(&app, "dirty_hours").await, 1);
}

/// Many agents pushing at once through the API: every push is answered with its own
/// counts and every sample is stored once.
#[tokio::test]
async fn concurrent_pushes_are_each_answered_for_their_own_records() {
    let app = TestApp::start().await;
    scenario::push_inventory(&app, &scenario::batches()).await;
    let collector = app.token(Role::Collector);
    let pushes = (0..40i64).map(|minute| {
        let (app, collector) = (&app, &collector);
        async move {
            let records = json!([
                {"meter": "g0", "ts": scenario::at(minute), "counter_mj": 1_000 + minute},
                {"meter": "g1", "ts": scenario::at(minute), "counter_mj": 2_000 + minute}
            ]);
            // Every fourth push is sent twice at once, as a retry racing its first try.
            let twice = minute % 4 == 0;
            let first = app.ingest(collector, "samples", records.clone());
            let second = async {
                if twice {
                    Some(app.ingest(collector, "samples", records).await)
                } else {
                    None
                }
            };
            let (first, second) = tokio::join!(first, second);
            (first, second)
        }
    });
    let answers = futures::future::join_all(pushes).await;
    let mut written = 0;
    for ((status, body), again) in answers {
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["received"], 2, "{body}");
        let mut w = body["written"].as_u64().unwrap();
        let mut d = body["duplicates"].as_u64().unwrap();
        if let Some((status, body)) = again {
            assert_eq!(status, 200, "{body}");
            w += body["written"].as_u64().unwrap();
            d += body["duplicates"].as_u64().unwrap();
            assert_eq!((w, d), (2, 2), "two tries of one push: {body}");
        } else {
            assert_eq!((w, d), (2, 0), "{body}");
        }
        written += w;
    }
    assert_eq!(written, 80);
    assert_eq!(count(&app, "samples").await, 80);
    assert_eq!(count(&app, "sample_conflicts").await, 0);
}

/// Sample ingest keeps the meters it has looked up (`ingest::meter_cache`); a meters ingest
/// on the same server is seen by the next batch.
#[tokio::test]
async fn a_meter_re_registered_is_seen_by_the_next_sample_batch() {
    let app = TestApp::start().await;
    scenario::push_inventory(&app, &scenario::batches()).await;
    let collector = app.token(Role::Collector);
    let sample =
        |minute| json!([{"meter": "g2", "ts": scenario::at(minute), "counter_mj": 100 + minute}]);
    let (status, body) = app.ingest(&collector, "samples", sample(0)).await;
    assert_eq!((status, &body["written"]), (200, &json!(1)), "{body}");
    // g2 becomes a MIG instance of g1: it has no counter of its own any more.
    let (status, body) = app
        .ingest(
            &app.token(Role::Admin),
            "meters",
            json!([{"key": "g2", "site": "s1", "kind": "mig", "parent": "g1", "mig_profile": "3g.40gb"}]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = app.ingest(&collector, "samples", sample(1)).await;
    assert_eq!(
        (status, errors(&body)),
        (422, vec![(0, "meter".into())]),
        "{body}"
    );
}

/// The scenario's inventory and a second site, `s2`, like its `s1`.
async fn with_second_site() -> TestApp {
    let app = TestApp::start().await;
    let b = scenario::batches();
    scenario::push_inventory(&app, &b).await;
    let mut other = b.sites[0].clone();
    other["key"] = json!("s2");
    let (status, body) = app
        .ingest(&app.token(Role::Admin), "sites", json!([other]))
        .await;
    assert_eq!(status, 200, "{body}");
    app
}

/// A meter's samples are keyed by its site (and sharded by it on Citus): a meter cannot move
/// to another site, it is registered under a new key there.
#[tokio::test]
async fn a_meter_cannot_move_to_another_site() {
    let app = with_second_site().await;
    let admin = app.token(Role::Admin);
    let (status, body) = app
        .ingest(
            &admin,
            "meters",
            json!([{"key": "g9", "site": "s2", "kind": "node"},
                   {"key": "g0", "site": "s2", "kind": "gpu", "parent": "g9"}]),
        )
        .await;
    assert_eq!(
        (status, errors(&body)),
        (422, vec![(1, "site".into())]),
        "{body}"
    );
    let site: String = sqlx::query_scalar(
        "SELECT s.key FROM meters m JOIN sites s ON s.id = m.site_id WHERE m.key = 'g0'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(site, "s1");
}

/// A job belongs to one site, its GPUs' (its rows are keyed and sharded by it): a job on two
/// sites' GPUs is refused, one sent before its GPUs are known names its site, and a job's
/// site cannot change, also by a record for another site under the same key.
#[tokio::test]
async fn a_job_belongs_to_one_site() {
    let app = with_second_site().await;
    let admin = app.token(Role::Admin);
    let meters = json!([{"key": "s2-n", "site": "s2", "kind": "node"},
                        {"key": "s2-g", "site": "s2", "kind": "gpu", "parent": "s2-n"}]);
    assert_eq!(app.ingest(&admin, "meters", meters).await.0, 200);
    let scheduler = app.token(Role::Scheduler);
    let job = |key: &str, site: Option<&str>, gpus: &[&str]| {
        let mut j = json!({"key": key, "tenant": "a", "kind": "batch",
                           "start_at": scenario::at(0),
                           "allocations": gpus.iter().map(|g| json!({"meter": g})).collect::<Vec<_>>()});
        if let Some(s) = site {
            j["site"] = json!(s);
        }
        j
    };
    let (status, body) = app
        .ingest(
            &scheduler,
            "jobs",
            json!([
                job("two-sites", None, &["g0", "s2-g"]),
                job("no-site", None, &[]),
                job("named-elsewhere", Some("s2"), &["g0"]),
                job("unknown-site", Some("nowhere"), &[]),
            ]),
        )
        .await;
    assert_eq!(
        (status, errors(&body)),
        (
            422,
            vec![
                (0, "allocations".into()),
                (1, "site".into()),
                (2, "site".into()),
                (3, "site".into())
            ]
        ),
        "{body}"
    );
    // Named before its GPUs are known, then reported with them.
    let (status, body) = app
        .ingest(&scheduler, "jobs", json!([job("later", Some("s2"), &[])]))
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = app
        .ingest(&scheduler, "jobs", json!([job("later", None, &["s2-g"])]))
        .await;
    assert_eq!(status, 200, "{body}");
    // The same key at another site: refused, the stored job stands.
    let (status, body) = app
        .ingest(&scheduler, "jobs", json!([job("later", None, &["g0"])]))
        .await;
    assert_eq!(
        (status, errors(&body)),
        (422, vec![(0, "site".into())]),
        "{body}"
    );
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT s.key, m.key FROM jobs j JOIN sites s ON s.id = j.site_id
         JOIN allocations a ON a.site_id = j.site_id AND a.job_id = j.id
         JOIN meters m ON m.id = a.meter_id WHERE j.key = 'later'",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(rows, vec![("s2".to_owned(), "s2-g".to_owned())]);
    // Its token records take its site.
    let collector = app.token(Role::Collector);
    let tokens = json!([{"job": "later", "start_at": scenario::at(0), "end_at": scenario::at(1),
                         "prompt_tokens": 3, "generated_tokens": 1}]);
    assert_eq!(app.ingest(&collector, "tokens", tokens).await.0, 200);
    let site: String =
        sqlx::query_scalar("SELECT s.key FROM token_records t JOIN sites s ON s.id = t.site_id")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(site, "s2");
}

/// A job naming a model nobody registered (a pod labelled with a model not yet known) is kept
/// with a warning, attributed in full and listed for the operator; registering the model gives
/// the job its model and recomputes its hours, so the ledger carries it.
#[tokio::test]
async fn a_job_naming_an_unknown_model_is_kept_and_takes_the_model_once_registered() {
    use crate::dashboard::Browser;
    use wattledger::dashboard::login::add_user;
    let app = TestApp::start().await;
    let mut b = crate::scenario::batches();
    crate::scenario::push_inventory(&app, &b).await;
    b.jobs[2]["model"] = json!("m-new");
    b.jobs[2]["phase"] = json!("decode");
    let (status, body) = app
        .ingest(&app.token(Role::Scheduler), "jobs", b.jobs.clone())
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["written"], 3, "{body}");
    assert_eq!(body["warnings"][0]["index"], 2, "{body}");
    assert_eq!(body["warnings"][0]["field"], "model", "{body}");
    assert!(
        body["warnings"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("unknown model 'm-new'"),
        "{body}"
    );
    for (role, what, records) in [
        (Role::Collector, "samples", &b.samples),
        (Role::Collector, "tokens", &b.tokens),
    ] {
        let (status, body) = app.ingest(&app.token(role), what, records.clone()).await;
        assert_eq!(status, 200, "{what}: {body}");
    }
    app.attribute().await;
    let endpoint_rows = |model: &'static str| {
        let pool = app.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM ledger l JOIN jobs j ON j.site_id = l.site_id AND j.id = l.job_id
                 LEFT JOIN models m ON m.id = l.model_id
                 WHERE j.key = 'job-endpoint' AND m.key IS NOT DISTINCT FROM nullif($1, '')",
            )
            .bind(model)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    // Attributed in full without a model: every tenant's energy as the scenario's answer.
    assert!(endpoint_rows("").await > 0);
    assert_eq!(
        crate::scenario::tenant_totals(&app, &app.token(Role::Admin)).await,
        crate::scenario::expected_totals()
    );

    // The operator sees it named.
    add_user(
        &app.pool,
        "olga",
        Role::Operator,
        None,
        "correct horse battery",
    )
    .await
    .unwrap();
    let mut browser = Browser::new(&app);
    browser.sign_in("olga", "correct horse battery").await;
    let page = browser.get("/operator").await;
    assert_eq!(page.status, 200, "{}", page.body);
    let section = page
        .body
        .split("Jobs naming a model nobody registered")
        .nth(1)
        .unwrap_or("");
    assert!(
        section.contains("<code>m-new</code>"),
        "{}",
        &section[..section.len().min(600)]
    );
    // And counted for Prometheus, unlabelled (the names are whatever pods carry).
    let metrics = crate::prometheus::scrape(&app).await;
    assert!(
        metrics.contains("\nwattledger_jobs_unknown_model 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("\nwattledger_unknown_model_names 1\n"),
        "{metrics}"
    );

    // Registered: the job takes the model, its hour is attributed again, and the ledger
    // carries it; the page no longer lists it.
    let (status, body) = app
        .ingest(
            &app.token(Role::Admin),
            "models",
            json!([{"key": "m-new", "prefill_weight": 1, "decode_weight": 4}]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    app.attribute().await;
    assert_eq!(endpoint_rows("").await, 0);
    assert!(endpoint_rows("m-new").await > 0);
    let phase: Option<String> =
        sqlx::query_scalar("SELECT phase FROM jobs WHERE key = 'job-endpoint'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(phase.as_deref(), Some("decode"));
    assert_eq!(
        crate::scenario::tenant_totals(&app, &app.token(Role::Admin)).await,
        crate::scenario::expected_totals()
    );
    let page = browser.get("/operator").await;
    assert!(!page.body.contains("Jobs naming a model nobody registered"));
    let metrics = crate::prometheus::scrape(&app).await;
    assert!(
        metrics.contains("\nwattledger_jobs_unknown_model 0\n"),
        "{metrics}"
    );
}
