//! Ingest → attribute → query, with the exact answers, idempotency and recomputation.

use crate::scenario::{self, EXPECTED_A, EXPECTED_B, HOUR, NEXT_HOUR};
use chrono::{DateTime, Utc};
use wattledger::auth::Role;
use wattledger_tests::TestApp;

type LedgerSnapshot = Vec<(
    DateTime<Utc>,
    i64,
    Option<i64>,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    Vec<String>,
)>;

async fn snapshot(app: &TestApp) -> LedgerSnapshot {
    sqlx::query_as(
        "SELECT hour, tenant_id, job_id, gpu_mj, node_overhead_mj, idle_mj, facility_overhead_mj, total_mj,
                prompt_tokens, generated_tokens, flags
         FROM ledger ORDER BY hour, tenant_id, job_id NULLS LAST",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn the_known_answer_comes_back_through_the_api() {
    let app = TestApp::start().await;
    scenario::push(&app, &scenario::batches()).await;
    let stats = app.attribute().await;
    assert!(stats.hours >= 1);

    let totals = scenario::tenant_totals(&app, &app.token(Role::Finance)).await;
    assert_eq!(totals, scenario::expected_totals());
    // The site's ledger adds up to its energy exactly, and PUE is the static 1.25.
    let (site_mj, ledger_mj): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT site_mj FROM site_hours WHERE hour = $1), (SELECT sum(total_mj)::bigint FROM ledger WHERE hour = $1)",
    )
    .bind(DateTime::parse_from_rfc3339(HOUR).unwrap().to_utc())
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!((site_mj, ledger_mj), (7_200_000_000, 7_200_000_000));

    let (_, usage) = app
        .get(
            Some(&app.token(Role::Operator)),
            &format!("/v1/usage?group_by=model&from={HOUR}&to={NEXT_HOUR}"),
        )
        .await;
    let site = &usage["sites"][0];
    assert_eq!(site["pue"], "1.25");
    assert_eq!(site["tue"], "1.428571"); // 7.2e9 / 5.04e9
    let endpoint = usage["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["model"] == "m-endpoint")
        .unwrap();
    assert_eq!(endpoint["tokens"], 3750);
    // 2.088e9 mJ = 0.58 kWh for 3750 tokens.
    assert_eq!(endpoint["kwh"], "0.58");
    assert_eq!(endpoint["joules_per_token"], "556.8");
}

#[tokio::test]
async fn resending_batches_changes_nothing_and_recomputing_is_idempotent() {
    let app = TestApp::start().await;
    let b = scenario::batches();
    scenario::push(&app, &b).await;
    app.attribute().await;
    let first = snapshot(&app).await;
    assert!(!first.is_empty());

    for _ in 0..3 {
        let outcomes = scenario::push(&app, &b).await;
        let samples = &outcomes[1];
        assert_eq!(samples["written"], 0);
        assert_eq!(samples["duplicates"], b.samples.as_array().unwrap().len());
        assert_eq!(outcomes[2]["written"], 0);
        app.attribute().await;
        assert_eq!(snapshot(&app).await, first);
    }
    let dirty: i64 = sqlx::query_scalar("SELECT count(*) FROM dirty_hours")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(dirty, 0, "resending must not dirty any hour");

    // An explicit recompute of the range gives the same rows.
    let mut tx = app.pool.begin().await.unwrap();
    let from = DateTime::parse_from_rfc3339(HOUR).unwrap().to_utc();
    wattledger_store::dirty::mark_range(
        &mut tx,
        from - chrono::Duration::hours(2),
        from + chrono::Duration::hours(3),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    app.attribute().await;
    assert_eq!(snapshot(&app).await, first);
}

#[tokio::test]
async fn late_data_marks_the_hour_dirty_and_changes_the_answer() {
    let app = TestApp::start().await;
    let mut b = scenario::batches();
    // Hold back the tokens: the endpoint's energy goes to its owner alone.
    let tokens = std::mem::replace(&mut b.tokens, serde_json::json!([]));
    scenario::push(&app, &b).await;
    app.attribute().await;
    let before = scenario::tenant_totals(&app, &app.token(Role::Admin)).await;
    assert_eq!(before[0], ("a".into(), EXPECTED_A + 2_088_000_000 * 2 / 3));

    let (status, body) = app
        .ingest(&app.token(Role::Collector), "tokens", tokens)
        .await;
    assert_eq!(status, 200, "{body}");
    let stats = app.attribute().await;
    assert!(stats.hours >= 1, "the token hour must be recomputed");
    let after = scenario::tenant_totals(&app, &app.token(Role::Admin)).await;
    assert_eq!(after[0], ("a".into(), EXPECTED_A));
    assert_eq!(after[1], ("b".into(), EXPECTED_B));
}

#[tokio::test]
async fn a_counter_reset_is_estimated_from_its_neighbours_and_flagged() {
    let app = TestApp::start().await;
    let mut b = scenario::batches();
    // g0's driver reloads at minute 30: its counter restarts from 0 and counts 42 MJ/min.
    for s in b.samples.as_array_mut().unwrap() {
        if s["meter"] == "g0" {
            let minute = (0..=60).find(|m| s["ts"] == scenario::at(*m)).unwrap();
            if minute >= 30 {
                s["counter_mj"] = serde_json::json!((minute - 30) * 42_000_000);
            }
        }
    }
    scenario::push(&app, &b).await;
    app.attribute().await;
    // Minute 29→30 reads 0 after the reset: what the counter had counted in that minute is
    // lost. The minutes on either side drew 42 MJ, so the minute is estimated at 42 MJ: the
    // job keeps the minute it held the GPU (52,500 J with its facility share went to the
    // platform before), the site its meters' energy, and the row says why.
    let (gpu_mj, estimated_mj, flags): (i64, i64, Vec<String>) =
        sqlx::query_as("SELECT gpu_mj, estimated_mj, flags FROM ledger l JOIN jobs j ON j.id = l.job_id WHERE j.key = 'job-train' AND hour = $1")
            .bind(DateTime::parse_from_rfc3339(HOUR).unwrap().to_utc())
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(gpu_mj, 60 * 42_000_000);
    assert!(flags.contains(&"counter_reset".to_owned()), "{flags:?}");
    assert!(flags.contains(&"reset_estimated".to_owned()), "{flags:?}");
    // Estimated: the minute's GPU energy, the node overhead measured against it (A's share
    // 6.72 MJ) and their facility share: 48.72 MJ × 1.25.
    assert_eq!(estimated_mj, 60_900_000);
    let totals = scenario::tenant_totals(&app, &app.token(Role::Finance)).await;
    assert_eq!(totals, scenario::expected_totals());
}

#[tokio::test]
async fn usage_groups_by_any_key_and_refuses_unknown_ones() {
    let app = TestApp::start().await;
    scenario::push(&app, &scenario::batches()).await;
    app.attribute().await;
    let finance = app.token(Role::Finance);
    let range = format!("from={HOUR}&to={NEXT_HOUR}");

    let (_, body) = app
        .get(
            Some(&finance),
            &format!("/v1/usage?group_by=site,day&{range}"),
        )
        .await;
    let rows = body["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["site"], "s1");
    assert_eq!(rows[0]["period"], "2026-11-02T00:00:00Z");
    assert_eq!(rows[0]["total_mj"], 7_200_000_000i64);
    assert_eq!(rows[0]["kwh"], "2");

    let (_, body) = app
        .get(
            Some(&finance),
            &format!("/v1/usage?group_by=job,tenant,hour&{range}"),
        )
        .await;
    let rows = body["rows"].as_array().unwrap();
    // Three jobs, the shared endpoint split over two tenants, and the idle row.
    assert_eq!(rows.len(), 5);
    let endpoint_b = rows
        .iter()
        .find(|r| r["job"] == "job-endpoint" && r["tenant"] == "b")
        .unwrap();
    assert_eq!(endpoint_b["total_mj"], 1_392_000_000i64);
    assert_eq!(endpoint_b["period"], HOUR);
    let idle = rows.iter().find(|r| r["job"].is_null()).unwrap();
    assert_eq!(
        (idle["tenant"].as_str(), idle["idle_mj"].as_i64()),
        (Some("platform"), Some(540_000_000))
    );

    // No grouping: one total row.
    let (_, body) = app.get(Some(&finance), &format!("/v1/usage?{range}")).await;
    assert_eq!(body["rows"][0]["total_mj"], 7_200_000_000i64);

    let (status, body) = app.get(Some(&finance), "/v1/usage?group_by=planet").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (422, Some("invalid_query"))
    );
    let (status, _) = app
        .get(
            Some(&finance),
            &format!("/v1/usage?from={NEXT_HOUR}&to={HOUR}"),
        )
        .await;
    assert_eq!(status, 422);
    let (status, _) = app.get(Some(&finance), "/v1/usage?from=yesterday").await;
    assert_eq!(status, 422);
    let (status, _) = app.get(Some(&finance), "/v1/usage?site=nowhere").await;
    assert_eq!(status, 404);
}
