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
    // Its breakdown (DESIGN.md rules 1–3): GPU 1.44e9, node overhead 16 % of it, facility
    // 25 % of IT; platform idle policy, so no idle share; every reading measured.
    let breakdown = |row: &serde_json::Value| {
        [
            "total_mj",
            "gpu_mj",
            "node_overhead_mj",
            "idle_mj",
            "facility_overhead_mj",
            "estimated_mj",
        ]
        .map(|f| row[f].as_i64().unwrap_or_else(|| panic!("{f} in {row}")))
    };
    let expected = [2_088_000_000, 1_440_000_000, 230_400_000, 0, 417_600_000, 0];
    assert_eq!(breakdown(endpoint), expected);
    // The job's own figures say the same under the same names.
    let (status, job) = app
        .get(Some(&app.token(Role::Operator)), "/v1/jobs/job-endpoint")
        .await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(breakdown(&job), expected);
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
        sqlx::query_as("SELECT gpu_mj, estimated_mj, flags FROM ledger l JOIN jobs j ON j.site_id = l.site_id AND j.id = l.job_id WHERE j.key = 'job-train' AND hour = $1")
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
    // One span rule for the API and the dashboard: at most 400 days in one question.
    let (status, body) = app
        .get(
            Some(&finance),
            "/v1/usage?from=2025-01-01T00:00:00Z&to=2026-02-05T00:00:01Z",
        )
        .await;
    assert_eq!(
        (status, body["error"]["message"].as_str()),
        (422, Some("to: must be at most 400 days after from"))
    );
    let (status, _) = app.get(Some(&finance), "/v1/usage?from=yesterday").await;
    assert_eq!(status, 422);
    let (status, _) = app.get(Some(&finance), "/v1/usage?site=nowhere").await;
    assert_eq!(status, 404);
}

/// A rollup's rows, and the same sums computed straight from the ledger: `job` is the rollup's
/// job column (the tenant-day rollup has none).
fn rollup_vs_ledger(table: &str, job: &str) -> [String; 2] {
    [
        format!(
            "SELECT day, site_id, tenant_id, model_id, {job} AS job_id, ledger_rows AS n,
                    total_mj, gpu_mj, idle_mj, estimated_mj, priced_mj, carbon_mj,
                    prompt_tokens + generated_tokens AS tokens, gpu_ms, cost, carbon_g,
                    embodied_carbon_g, badput_mj, badput_cost, carbon_free_mj, cfe_mj, flags
             FROM {table} ORDER BY 1, 2, 3, 4 NULLS FIRST, 5 NULLS FIRST"
        ),
        format!(
            "SELECT date_bin('1 day', hour, timestamptz 'epoch') AS day, site_id, tenant_id,
                    model_id, {job} AS job_id, count(*) AS n, sum(total_mj)::bigint AS total_mj,
                    sum(gpu_mj)::bigint AS gpu_mj, sum(idle_mj)::bigint AS idle_mj,
                    sum(estimated_mj)::bigint AS estimated_mj,
                    sum(priced_mj)::bigint AS priced_mj, sum(carbon_mj)::bigint AS carbon_mj,
                    sum(prompt_tokens + generated_tokens)::bigint AS tokens,
                    sum(gpu_ms)::bigint AS gpu_ms, sum(cost) AS cost, sum(carbon_g) AS carbon_g,
                    sum(embodied_carbon_g) AS embodied_carbon_g,
                    sum(badput_mj)::bigint AS badput_mj, sum(badput_cost) AS badput_cost,
                    sum(carbon_free_mj)::bigint AS carbon_free_mj, sum(cfe_mj)::bigint AS cfe_mj,
                    flags_union_agg(flags) AS flags
             FROM ledger_rows GROUP BY 1, 2, 3, 4, 5
             ORDER BY 1, 2, 3, 4 NULLS FIRST, 5 NULLS FIRST"
        ),
    ]
}

#[derive(Debug, PartialEq, sqlx::FromRow)]
struct RollupRow {
    day: DateTime<Utc>,
    site_id: i64,
    tenant_id: i64,
    model_id: Option<i64>,
    job_id: Option<i64>,
    n: i64,
    total_mj: i64,
    gpu_mj: i64,
    idle_mj: i64,
    estimated_mj: i64,
    priced_mj: i64,
    carbon_mj: i64,
    tokens: i64,
    gpu_ms: i64,
    cost: Option<rust_decimal::Decimal>,
    carbon_g: Option<rust_decimal::Decimal>,
    embodied_carbon_g: Option<rust_decimal::Decimal>,
    badput_mj: i64,
    badput_cost: Option<rust_decimal::Decimal>,
    carbon_free_mj: Option<i64>,
    cfe_mj: i64,
    flags: Vec<String>,
}

/// Each rollup's rows, checked equal to the same sums from the ledger: the tenant-day
/// rollup's, then the job-day rollup's.
async fn rollups_equal_the_ledger(app: &TestApp, round: &str) -> [Vec<RollupRow>; 2] {
    let mut found = Vec::new();
    for (table, job) in [("usage_days", "NULL::bigint"), ("usage_job_days", "job_id")] {
        let [rollup, ledger] = rollup_vs_ledger(table, job);
        let rollup: Vec<RollupRow> = sqlx::query_as(&rollup).fetch_all(&app.pool).await.unwrap();
        let ledger: Vec<RollupRow> = sqlx::query_as(&ledger).fetch_all(&app.pool).await.unwrap();
        assert_eq!(rollup, ledger, "{table}, {round}");
        found.push(rollup);
    }
    found.try_into().unwrap()
}

/// The scenario's hour at `hour`, its jobs renamed for that hour, its tokens held back.
fn scenario_hour(hour: &str, tag: usize) -> (scenario::Batches, serde_json::Value) {
    let mut b = scenario::batches_at(hour);
    let rename = |v: &mut serde_json::Value, field: &str| {
        for r in v.as_array_mut().unwrap() {
            let key = format!("{}-{tag}", r[field].as_str().unwrap());
            r[field] = key.into();
        }
    };
    rename(&mut b.jobs, "key");
    rename(&mut b.tokens, "job");
    let tokens = std::mem::replace(&mut b.tokens, serde_json::json!([]));
    (b, tokens)
}

#[tokio::test]
async fn the_rollups_equal_the_ledger_after_random_recomputations() {
    let app = TestApp::start().await;
    // Hours on three UTC days, one at each edge of a day: the rollup's days and the ledger's
    // edge hours both take part.
    let hours = [
        "2026-11-01T23:00:00Z",
        "2026-11-02T10:00:00Z",
        "2026-11-02T22:00:00Z",
        "2026-11-03T00:00:00Z",
        "2026-11-03T05:00:00Z",
    ];
    let mut held = Vec::new();
    for (i, h) in hours.iter().enumerate() {
        let (b, tokens) = scenario_hour(h, i);
        scenario::push(&app, &b).await;
        held.push(Some(tokens));
    }
    app.attribute().await;
    let [days, job_days] = rollups_equal_the_ledger(&app, "first").await;
    assert!(days.len() >= 6, "{days:?}");
    // The job-day rollup has a row per job, and one of no job (idle energy).
    assert!(job_days.len() > days.len(), "{job_days:?}");
    assert!(job_days.iter().any(|r| r.job_id.is_none()));

    // Random late data and recomputations (a fixed xorshift, so a failure replays).
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let collector = app.token(Role::Collector);
    for round in 0..8 {
        let i = next(hours.len());
        if let Some(tokens) = held[i].take() {
            let (status, body) = app.ingest(&collector, "tokens", tokens).await;
            assert_eq!(status, 200, "{body}");
        }
        let from = DateTime::parse_from_rfc3339(hours[next(hours.len())])
            .unwrap()
            .to_utc();
        let mut tx = app.pool.begin().await.unwrap();
        wattledger_store::dirty::mark_range(
            &mut tx,
            from - chrono::Duration::hours(next(30) as i64),
            from + chrono::Duration::hours(1 + next(3) as i64),
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        app.attribute().await;
        rollups_equal_the_ledger(&app, &format!("round {round}")).await;
    }

    // The API over a range with whole days and edge hours sums what the ledger holds.
    let (from, to) = ("2026-11-01T23:00:00Z", "2026-11-03T01:00:00Z");
    let (status, body) = app
        .get(
            Some(&app.token(Role::Finance)),
            &format!("/v1/usage?group_by=tenant&from={from}&to={to}"),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let api: Vec<(String, i64, i64)> = body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["tenant"].as_str().unwrap().to_owned(),
                r["total_mj"].as_i64().unwrap(),
                r["tokens"].as_i64().unwrap(),
            )
        })
        .collect();
    let direct: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT t.key, sum(l.total_mj)::bigint, sum(l.prompt_tokens + l.generated_tokens)::bigint
         FROM ledger l JOIN tenants t ON t.id = l.tenant_id
         WHERE l.hour >= $1 AND l.hour < $2 GROUP BY t.key ORDER BY t.key",
    )
    .bind(DateTime::parse_from_rfc3339(from).unwrap().to_utc())
    .bind(DateTime::parse_from_rfc3339(to).unwrap().to_utc())
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(api, direct);
    assert!(direct.iter().all(|(_, mj, _)| *mj > 0), "{direct:?}");

    // By job, by how jobs ended and by serving phase (the job-day rollup for the whole days,
    // the ledger for the edge hours), and the top jobs: the ledger's sums.
    let keyed = [
        ("job", "j.key"),
        (
            "end_state",
            "CASE WHEN l.job_id IS NULL THEN 'idle' ELSE coalesce(j.end_state, 'unknown') END",
        ),
        (
            "phase",
            "CASE WHEN l.job_id IS NULL THEN 'idle' ELSE coalesce(j.phase, 'none') END",
        ),
    ];
    for (group, key) in keyed {
        let (status, body) = app
            .get(
                Some(&app.token(Role::Finance)),
                &format!("/v1/usage?group_by=tenant,{group}&from={from}&to={to}"),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        let mut api: Vec<(String, Option<String>, i64, i64, i64)> = body["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["tenant"].as_str().unwrap().to_owned(),
                    r[group].as_str().map(str::to_owned),
                    r["total_mj"].as_i64().unwrap(),
                    r["tokens"].as_i64().unwrap(),
                    r["gpu_ms"].as_i64().unwrap(),
                )
            })
            .collect();
        api.sort();
        let mut direct: Vec<(String, Option<String>, i64, i64, i64)> = sqlx::query_as(&format!(
            "SELECT t.key, {key}, sum(l.total_mj)::bigint,
                    sum(l.prompt_tokens + l.generated_tokens)::bigint, sum(l.gpu_ms)::bigint
             FROM ledger l JOIN tenants t ON t.id = l.tenant_id
             LEFT JOIN jobs j ON j.site_id = l.site_id AND j.id = l.job_id
             WHERE l.hour >= $1 AND l.hour < $2 GROUP BY 1, 2"
        ))
        .bind(DateTime::parse_from_rfc3339(from).unwrap().to_utc())
        .bind(DateTime::parse_from_rfc3339(to).unwrap().to_utc())
        .fetch_all(&app.pool)
        .await
        .unwrap();
        direct.sort();
        assert_eq!(api, direct, "by {group}");
        assert!(direct.len() > 2, "by {group}: {direct:?}");
    }
}

/// The scenario hour's IT peak as stored.
async fn it_peak(app: &TestApp) -> Option<i64> {
    sqlx::query_scalar("SELECT it_peak_mw FROM site_hours WHERE hour = $1")
        .bind(DateTime::parse_from_rfc3339(HOUR).unwrap().to_utc())
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_site_hour_keeps_its_it_peak_from_the_step_peaks() {
    let app = TestApp::start().await;
    let mut b = scenario::batches();
    // The node meter's step records say their mean (1600 W, as its counter does) and a
    // peak that rises through the hour: 1660 W in the step ending at 11:00.
    for r in b.samples.as_array_mut().unwrap() {
        if r["meter"] == "n1" {
            let minute = (0..=60).find(|m| r["ts"] == scenario::at(*m)).unwrap();
            r["power_w"] = 1600.into();
            r["peak_w"] = (1600 + minute).into();
            r["step_s"] = 60.into();
        }
    }
    scenario::push(&app, &b).await;
    app.attribute().await;
    let peak = it_peak(&app).await;
    assert_eq!(peak, Some(1_660_000));
    let day = DateTime::parse_from_rfc3339("2026-11-02T00:00:00Z")
        .unwrap()
        .to_utc();
    let days =
        wattledger_store::operations::site_days(&app.pool, day, day + chrono::Duration::days(1))
            .await
            .unwrap();
    assert_eq!(days[0].it_peak_mw, Some(1_660_000));
    // The operator page shows the day's peak minute beside its peak hour.
    wattledger::dashboard::login::add_user(
        &app.pool,
        "ada",
        Role::Admin,
        None,
        "correct horse battery",
    )
    .await
    .unwrap();
    let mut ada = crate::dashboard::Browser::new(&app);
    ada.sign_in("ada", "correct horse battery").await;
    let page = ada.get("/operator?from=2026-11-02&to=2026-11-02").await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("Peak minute IT draw, ") && page.body.contains(">1.7 kW<"),
        "{}",
        page.body
    );
    // The ledger is what it was without the power readings.
    assert_eq!(
        scenario::tenant_totals(&app, &app.token(Role::Finance)).await,
        scenario::expected_totals()
    );
}

#[tokio::test]
async fn a_usage_query_for_the_top_jobs_sums_exactly_those_jobs_with_the_most_energy() {
    let app = TestApp::start().await;
    for (i, h) in [
        "2026-11-02T10:00:00Z",
        "2026-11-02T11:00:00Z",
        "2026-11-02T12:00:00Z",
    ]
    .iter()
    .enumerate()
    {
        let (b, tokens) = scenario_hour(h, i);
        scenario::push(&app, &b).await;
        let (status, body) = app
            .ingest(&app.token(Role::Collector), "tokens", tokens)
            .await;
        assert_eq!(status, 200, "{body}");
    }
    app.attribute().await;
    use wattledger_store::usage::{usage, GroupBy, UsageFilter};
    let all = UsageFilter::default();
    let every = usage(
        &app.pool,
        &wattledger_store::Scope::All,
        &[GroupBy::Job],
        &all,
    )
    .await
    .unwrap();
    let jobs: Vec<_> = every.iter().filter(|r| r.job.is_some()).collect();
    assert!(jobs.len() > 4, "{every:?}");
    let top = UsageFilter {
        top_jobs: Some(3),
        ..all
    };
    let picked = usage(
        &app.pool,
        &wattledger_store::Scope::All,
        &[GroupBy::Job],
        &top,
    )
    .await
    .unwrap();
    assert_eq!(picked.len(), 3, "{picked:?}");
    // Largest first, each summed in full, and none left out larger than one picked.
    assert!(picked
        .windows(2)
        .all(|w| w[0].energy.total_mj() >= w[1].energy.total_mj()));
    let smallest = picked.last().unwrap().energy.total_mj();
    for p in &picked {
        let full = jobs.iter().find(|r| r.job == p.job).unwrap();
        assert_eq!(
            (
                p.energy.total_mj(),
                p.energy.idle_mj,
                &p.carbon_g,
                &p.cost_amounts,
                p.generated_tokens
            ),
            (
                full.energy.total_mj(),
                full.energy.idle_mj,
                &full.carbon_g,
                &full.cost_amounts,
                full.generated_tokens
            )
        );
    }
    assert!(jobs
        .iter()
        .filter(|r| !picked.iter().any(|p| p.job == r.job))
        .all(|r| r.energy.total_mj() <= smallest));
}

/// A sample batch marks, per meter, the hours from its second stored sample before to its
/// second after: the intervals next to the batch change their ends, the ones beyond may
/// change a counter reset's estimate. Late and appended batches, and one two months early
/// (the span is clamped at 45 days: past them no interval is estimated from it).
#[tokio::test]
async fn a_sample_batch_marks_the_hours_between_its_second_neighbours() {
    let app = TestApp::start().await;
    scenario::push_inventory(&app, &scenario::batches()).await;
    let collector = app.token(Role::Collector);
    let send = |times: &[&str]| {
        let records: Vec<_> = times
            .iter()
            .map(|t| serde_json::json!({"meter": "g0", "ts": format!("2026-{t}:00Z"), "counter_mj": 1}))
            .collect();
        let (app, collector) = (&app, &collector);
        async move {
            let (status, body) = app
                .ingest(collector, "samples", serde_json::Value::Array(records))
                .await;
            assert_eq!(status, 200, "{body}");
        }
    };
    let dirty = || async {
        let hours: Vec<chrono::DateTime<chrono::Utc>> =
            sqlx::query_scalar("DELETE FROM dirty_hours RETURNING hour")
                .fetch_all(&app.pool)
                .await
                .unwrap();
        let mut hours: Vec<String> = hours
            .iter()
            .map(|h| h.format("%m-%d %H").to_string())
            .collect();
        hours.sort();
        hours
    };
    send(&[
        "11-02T01:30",
        "11-02T03:30",
        "11-02T05:30",
        "11-02T07:30",
        "11-02T09:30",
    ])
    .await;
    dirty().await;

    send(&["11-02T05:00"]).await;
    let late: Vec<String> = (1..=7).map(|h| format!("11-02 {h:02}")).collect();
    assert_eq!(
        dirty().await,
        late,
        "01:30 and 03:30 before, 05:30 and 07:30 after"
    );

    send(&["11-02T10:00"]).await;
    assert_eq!(
        dirty().await,
        ["11-02 07", "11-02 08", "11-02 09", "11-02 10"],
        "appended: 07:30 and 09:30 before, nothing after"
    );

    send(&["09-01T00:00"]).await;
    let early = dirty().await;
    assert_eq!(
        (early.len(), early.first(), early.last()),
        (
            45 * 24 + 1,
            Some(&"09-01 00".to_owned()),
            Some(&"10-16 00".to_owned())
        ),
        "nothing before; the two after are 62 days on: clamped to 45 days"
    );
}

/// Node meters that send a counter alone (a PDU's energy register) still give the site-hour
/// an IT peak: the busiest minute's mean power, which is all such a meter can tell. (Before,
/// such a site had no IT peak at all: half the demo's site-hours.)
#[tokio::test]
async fn a_site_hour_of_counter_only_node_meters_keeps_their_mean_as_its_peak() {
    let app = TestApp::start().await;
    scenario::push(&app, &scenario::batches()).await;
    app.attribute().await;
    let peak = it_peak(&app).await;
    assert_eq!(peak, Some(1_600_000), "n1's counter rises 96 kJ a minute");
}

/// The scenario's node, jobs and meters run for `hours` hours from `start` (RFC 3339, on the
/// hour): one counter series per meter, so no hour starts a new one.
fn scenario_for_hours(start: &str, hours: i64) -> scenario::Batches {
    let end = scenario::at_from(start, 60 * hours);
    let mut b = scenario::batches_at(start);
    for job in b.jobs.as_array_mut().unwrap() {
        job["end_at"] = end.clone().into();
        for a in job["allocations"].as_array_mut().unwrap() {
            a["end_at"] = end.clone().into();
        }
    }
    let mut samples = Vec::new();
    for i in 0..=60 * hours {
        for (meter, per_min) in [
            ("n1", 96_000_000i64),
            ("g0", 42_000_000),
            ("g1", 18_000_000),
            ("g2", 24_000_000),
        ] {
            let ts = scenario::at_from(start, i);
            samples.push(serde_json::json!({"meter": meter, "ts": ts, "counter_mj": 5_000_000 + i * per_min}));
        }
    }
    b.samples = samples.into();
    b
}

/// Figures of a usage row that every grouping must sum the same.
fn row_sums(row: &serde_json::Value) -> [i64; 5] {
    ["total_mj", "gpu_mj", "idle_mj", "tokens", "gpu_ms"]
        .map(|f| row[f].as_i64().unwrap_or_else(|| panic!("{f} in {row}")))
}

#[tokio::test]
async fn usage_by_hour_over_whole_days_reads_each_hour() {
    let app = TestApp::start().await;
    let (day0, day1, day2) = (
        "2026-11-02T00:00:00Z",
        "2026-11-03T00:00:00Z",
        "2026-11-04T00:00:00Z",
    );
    scenario::push(&app, &scenario_for_hours(day0, 48)).await;
    app.attribute().await;
    let finance = app.token(Role::Finance);

    // Two whole days: the range the tenant-day rollup serves for any grouping without hours.
    let range = format!("from={day0}&to={day2}");
    let (status, by_hour) = app
        .get(Some(&finance), &format!("/v1/usage?group_by=hour&{range}"))
        .await;
    assert_eq!(status, 200, "{by_hour}");
    let hours = by_hour["rows"].as_array().unwrap();
    assert_eq!(hours.len(), 48, "24 rows a day");
    let ledger: Vec<(DateTime<Utc>, i64, i64)> = sqlx::query_as(
        "SELECT hour, sum(total_mj)::bigint, sum(gpu_ms)::bigint FROM ledger
         WHERE hour >= $1 AND hour < $2 GROUP BY hour ORDER BY hour",
    )
    .bind(DateTime::parse_from_rfc3339(day0).unwrap().to_utc())
    .bind(DateTime::parse_from_rfc3339(day2).unwrap().to_utc())
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(ledger.len(), 48);
    for (row, (hour, total_mj, gpu_ms)) in hours.iter().zip(&ledger) {
        let period: DateTime<Utc> = row["period"].as_str().unwrap().parse().unwrap();
        assert_eq!(
            (period, row["total_mj"].as_i64(), row["gpu_ms"].as_i64()),
            (*hour, Some(*total_mj), Some(*gpu_ms))
        );
        // Every hour is the scenario's known hour: 2 kWh at the meter × PUE 1.25, and
        // 1 + ½ + 1 GPU-hours held.
        assert_eq!((*total_mj, *gpu_ms), (7_200_000_000, 9_000_000));
    }

    // The day grouping (from the rollup) sums the same as its 24 hours.
    let (_, by_day) = app
        .get(Some(&finance), &format!("/v1/usage?group_by=day&{range}"))
        .await;
    let days = by_day["rows"].as_array().unwrap();
    assert_eq!(days.len(), 2, "{by_day}");
    for (k, (day, label)) in days.iter().zip([day0, day1]).enumerate() {
        assert_eq!(day["period"], label);
        let mut sum = [0i64; 5];
        for hour in &hours[24 * k..24 * (k + 1)] {
            for (s, v) in sum.iter_mut().zip(row_sums(hour)) {
                *s += v;
            }
        }
        assert_eq!(row_sums(day), sum, "{label}");
    }

    // With another key too, hours stay hours: a tenant's 48 hours add up to its total.
    let (_, by_tenant_hour) = app
        .get(
            Some(&finance),
            &format!("/v1/usage?group_by=tenant,hour&{range}"),
        )
        .await;
    let (_, by_tenant) = app
        .get(
            Some(&finance),
            &format!("/v1/usage?group_by=tenant&{range}"),
        )
        .await;
    for tenant in by_tenant["rows"].as_array().unwrap() {
        let rows: Vec<&serde_json::Value> = by_tenant_hour["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["tenant"] == tenant["tenant"])
            .collect();
        assert_eq!(rows.len(), 48, "{}", tenant["tenant"]);
        let total: i64 = rows.iter().map(|r| r["total_mj"].as_i64().unwrap()).sum();
        assert_eq!(Some(total), tenant["total_mj"].as_i64());
    }
}

/// A known answer for GPU time. One hour at a node of four GPUs: `a` trains on g0 all hour;
/// g1 is cut into MIG slices of 3/7 (`b`) and 4/7 (`c`), sent as 0.428571 and 0.571429; `a`'s
/// endpoint holds g2 for the first 50 minutes, serving `a`, `b` and `c` tokens weighing 5:3:2;
/// `b`'s batch job holds g3 for the last 50. Allocated: 1 + 1 + 5/6 + 5/6 of 4 GPUs = 11/12.
/// The endpoint's 3 000 000 ms go 1 500 000, 900 000 and 600 000 to its tenants.
fn gpu_time_hour() -> scenario::Batches {
    use serde_json::json;
    let (hour, at) = (HOUR, scenario::at);
    let (minute_50, minute_10) = (at(50), at(10));
    let mut samples = Vec::new();
    for i in 0..=60i64 {
        for (meter, per_min) in [
            ("n1", 130_000_000i64),
            ("g0", 42_000_000),
            ("g1", 18_000_000),
            ("g2", 24_000_000),
            ("g3", 30_000_000),
        ] {
            samples
                .push(json!({"meter": meter, "ts": at(i), "counter_mj": 5_000_000 + i * per_min}));
        }
    }
    let alloc = |meter: &str, share: &str, from: &str, to: &str| json!({"meter": meter, "share": share, "start_at": from, "end_at": to});
    let job = |key: &str, tenant: &str, kind: &str, from: &str, to: &str, a| json!({"key": key, "tenant": tenant, "kind": kind, "start_at": from, "end_at": to, "allocations": [a]});
    let mut endpoint = job(
        "job-endpoint",
        "a",
        "inference",
        hour,
        &minute_50,
        alloc("g2", "1", hour, &minute_50),
    );
    endpoint["model"] = "m-endpoint".into();
    let tokens = |tenant: &str, prompt: i64, generated: i64| {
        json!({"job": "job-endpoint", "tenant": tenant, "start_at": hour, "end_at": minute_50,
               "prompt_tokens": prompt, "generated_tokens": generated})
    };
    let base = scenario::batches();
    scenario::Batches {
        tenants: json!([{"key": "platform", "name": "Platform"}, {"key": "a", "name": "Tenant A"},
                        {"key": "b", "name": "Tenant B"}, {"key": "c", "name": "Tenant C"}]),
        sites: base.sites,
        models: base.models,
        meters: json!([
            {"key": "n1", "site": "s1", "kind": "node"},
            {"key": "g0", "site": "s1", "kind": "gpu", "parent": "n1", "gpu_uuid": "GPU-0"},
            {"key": "g1", "site": "s1", "kind": "gpu", "parent": "n1", "gpu_uuid": "GPU-1"},
            {"key": "g1-mig0", "site": "s1", "kind": "mig", "parent": "g1", "mig_profile": "3g.40gb"},
            {"key": "g1-mig1", "site": "s1", "kind": "mig", "parent": "g1", "mig_profile": "4g.40gb"},
            {"key": "g2", "site": "s1", "kind": "gpu", "parent": "n1", "gpu_uuid": "GPU-2"},
            {"key": "g3", "site": "s1", "kind": "gpu", "parent": "n1", "gpu_uuid": "GPU-3"}
        ]),
        jobs: json!([
            job(
                "job-train",
                "a",
                "training",
                hour,
                NEXT_HOUR,
                alloc("g0", "1", hour, NEXT_HOUR)
            ),
            job(
                "job-mig3",
                "b",
                "interactive",
                hour,
                NEXT_HOUR,
                alloc("g1-mig0", "0.428571", hour, NEXT_HOUR)
            ),
            job(
                "job-mig4",
                "c",
                "interactive",
                hour,
                NEXT_HOUR,
                alloc("g1-mig1", "0.571429", hour, NEXT_HOUR)
            ),
            endpoint,
            job(
                "job-batch",
                "b",
                "batch",
                &minute_10,
                NEXT_HOUR,
                alloc("g3", "1", &minute_10, NEXT_HOUR)
            )
        ]),
        samples: samples.into(),
        tokens: json!([
            tokens("a", 1000, 250),
            tokens("b", 600, 150),
            tokens("c", 400, 100)
        ]),
    }
}

#[tokio::test]
async fn gpu_time_is_held_exactly_and_shown_so_that_it_adds_up() {
    let app = TestApp::start().await;
    scenario::push(&app, &gpu_time_hour()).await;
    app.attribute().await;
    let operator = app.token(Role::Operator);
    let range = format!("from={HOUR}&to={NEXT_HOUR}");
    let usage = |group_by: &str| {
        let path = format!("/v1/usage?group_by={group_by}&{range}");
        let (app, operator) = (&app, &operator);
        async move {
            let (status, body) = app.get(Some(operator), &path).await;
            assert_eq!(status, 200, "{body}");
            body
        }
    };

    let by_job = usage("job").await;
    // 13 200 000 of 14 400 000 GPU-ms: the MIG sevenths hold all of g1 (cut to whole ms each
    // they held 59 999 ms a minute, and the site 0.916663).
    assert_eq!(by_job["sites"][0]["allocated_gpu_fraction"], "0.916667");
    let (allocated, capacity): (i64, i64) =
        sqlx::query_as("SELECT allocated_gpu_ms, capacity_gpu_ms FROM site_hours")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!((allocated, capacity), (13_200_000, 14_400_000));
    let job = |body: &serde_json::Value, key: &str| -> Vec<(String, i64, String)> {
        body["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["job"] == key)
            .map(|r| {
                (
                    r["tenant"].as_str().unwrap_or("").to_owned(),
                    r["gpu_ms"].as_i64().unwrap(),
                    r["gpu_hours"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    // Each slice's exact time for the hour (3,600,000 ms × 0.428571 = 1,542,855.6), rounded
    // once: split at every minute, the 3/7 slice held 60 × 25,714 = 1,542,840.
    assert_eq!(job(&by_job, "job-mig3")[0].1, 1_542_856);
    assert_eq!(job(&by_job, "job-mig4")[0].1, 2_057_144);
    // 3.6667 GPU-hours in all, split by largest remainder: the two 50-minute jobs tie at
    // 0.83333…, and the earlier key (job-batch) gets the unit the total still needs.
    let shown: Vec<(String, String)> = by_job["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["job"].as_str().unwrap_or("").to_owned(),
                r["gpu_hours"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected = [
        ("job-batch", "0.8334"),
        ("job-endpoint", "0.8333"),
        ("job-mig3", "0.4286"),
        ("job-mig4", "0.5714"),
        ("job-train", "1"),
    ];
    for (key, hours) in expected {
        assert!(
            shown.contains(&(key.to_owned(), hours.to_owned())),
            "{key}: {shown:?}"
        );
    }
    let (_, total) = app
        .get(Some(&operator), &format!("/v1/usage?{range}"))
        .await;
    assert_eq!(total["rows"][0]["gpu_hours"], "3.6667");
    assert_eq!(total["rows"][0]["gpu_ms"], 13_200_000);

    // The endpoint's tenants: exact ms 5:3:2, and shown GPU-hours that add up to the job's
    // 0.8333 (rounded each on its own: 0.4167 + 0.25 + 0.1667 = 0.8334).
    let by_job_tenant = usage("job,tenant").await;
    let endpoint = job(&by_job_tenant, "job-endpoint");
    assert_eq!(
        endpoint,
        [
            ("a".to_owned(), 1_500_000, "0.4166".to_owned()),
            ("b".to_owned(), 900_000, "0.25".to_owned()),
            ("c".to_owned(), 600_000, "0.1667".to_owned()),
        ]
    );
}
