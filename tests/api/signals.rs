//! Grid signals through the ingest API: validation, idempotence, and revisions that dirty
//! exactly the attributed hours they touch.

use crate::dashboard::Browser;
use crate::scenario;
use serde_json::json;
use wattledger::auth::Role;
use wattledger::dashboard::format::{energy, grouped};
use wattledger::dashboard::login::add_user;
use wattledger_tests::TestApp;

async fn dirty(app: &TestApp) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT to_char(hour AT TIME ZONE 'UTC', 'HH24:MI') FROM dirty_hours ORDER BY hour",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn signals_are_stored_once_and_a_revision_dirties_its_attributed_hours() {
    let app = TestApp::start().await;
    scenario::push(&app, &scenario::batches()).await;
    app.attribute().await;
    assert!(dirty(&app).await.is_empty());
    let collector = app.token(Role::Collector);
    let point = |start: &str, end: &str, value: &str, status: &str| {
        json!({"region": "DE", "signal": "carbon", "basis": "average", "status": status,
               "source": "electricitymaps", "start_at": start, "end_at": end, "value": value,
               "estimated": true})
    };
    let batch = json!([
        point("2026-11-02T09:00:00Z", "2026-11-02T10:00:00Z", "380", "actual"),
        point("2026-11-02T10:00:00Z", "2026-11-02T11:00:00Z", "402", "actual"),
        point("2026-11-02T10:00:00Z", "2026-11-02T11:00:00Z", "390", "forecast"),
        {"region": "DE-LU", "signal": "price", "currency": "EUR", "status": "actual", "source": "entsoe",
         "start_at": "2026-11-02T10:00:00Z", "end_at": "2026-11-02T10:15:00Z", "value": "-0.00305"}
    ]);
    let (status, body) = app.ingest(&collector, "signals", batch.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["written"].as_u64(), body["duplicates"].as_u64()),
        (Some(4), Some(0))
    );
    // Only the attributed hour 10:00 at the site in region DE is dirtied (09:00 has no
    // ledger; the price is for another region than the site's).
    assert_eq!(dirty(&app).await, ["10:00"]);
    app.attribute().await;

    // Resending changes nothing and dirties nothing.
    let (_, body) = app.ingest(&collector, "signals", batch).await;
    assert_eq!(
        (body["written"].as_u64(), body["duplicates"].as_u64()),
        (Some(0), Some(4))
    );
    assert!(dirty(&app).await.is_empty());

    // Electricity Maps revises its estimate for 10:00: the stored value is replaced.
    let (_, body) = app
        .ingest(
            &collector,
            "signals",
            json!([point(
                "2026-11-02T10:00:00Z",
                "2026-11-02T11:00:00Z",
                "398.5",
                "actual"
            )]),
        )
        .await;
    assert_eq!(body["written"].as_u64(), Some(1));
    assert_eq!(dirty(&app).await, ["10:00"]);
    let stored: String = sqlx::query_scalar(
        "SELECT value::text FROM signal_points WHERE signal = 'carbon' AND status = 'actual' AND start_at = '2026-11-02T10:00:00Z'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(stored, "398.500000000");
}

#[tokio::test]
async fn bad_signals_are_refused_with_their_fields() {
    let app = TestApp::start().await;
    let collector = app.token(Role::Collector);
    let (status, body) = app
        .ingest(
            &collector,
            "signals",
            json!([
                {"region": "DE", "signal": "carbon", "basis": "percentile", "status": "actual", "source": "watttime",
                 "start_at": "2026-11-02T10:00:00Z", "end_at": "2026-11-02T10:05:00Z", "value": 55},
                {"region": "DE", "signal": "price", "currency": "euro", "status": "actual", "source": "csv",
                 "start_at": "2026-11-02T10:00:00Z", "end_at": "2026-11-02T09:00:00Z", "value": 0.2},
                {"region": "DE", "signal": "carbon", "basis": "average", "status": "actual", "source": "x",
                 "start_at": "2026-11-02T10:00:00Z", "end_at": "2026-11-02T11:00:00Z", "value": -1},
                {"region": "DE", "signal": "carbon", "basis": "average", "status": "guess", "source": "x",
                 "start_at": "2099-01-01T00:00:00Z", "end_at": "2099-01-01T01:00:00Z", "value": "123456789012"},
                // A value that is no decimal at all is a type error, named beside the status
                // outside its set (each field is read on its own); the record's rules are
                // checked once it reads.
                {"region": "DE", "signal": "carbon", "basis": "average", "status": "guess", "source": "x",
                 "start_at": "2026-11-02T10:00:00Z", "end_at": "2026-11-02T11:00:00Z", "value": "1e30"}
            ]),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    let fields: Vec<(u64, String)> = body["error"]["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["index"].as_u64().unwrap(),
                e["field"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        fields,
        vec![
            (0, "basis".into()),
            (1, "currency".into()),
            (1, "end_at".into()),
            (2, "value".into()),
            (3, "status".into()),
            (3, "start_at".into()),
            (3, "end_at".into()),
            (3, "value".into()),
            (4, "status".into()),
            (4, "value".into()),
        ]
    );
    let (status, _) = app
        .ingest(&app.token(Role::Scheduler), "signals", json!([]))
        .await;
    assert_eq!(status, 403, "schedulers do not send signals");
}

/// The scenario hour (2 kWh at the site: a 4.35e9 mJ, b 2.175e9, platform 6.75e8) under a
/// time-of-use price of 0.30 EUR/kWh for the first half hour and 0.20 after, an average
/// intensity of 400 g/kWh and a MOER of 500. By hand:
/// site cost 1 kWh × 0.30 + 1 kWh × 0.20 = 0.500000 EUR, split by energy in millionths:
/// a 302083.33, b 151041.67, platform 46875 → largest remainder gives b the last unit;
/// carbon 800 g = 800000 mg: a 483333.33, b 241666.67, platform 75000.
#[tokio::test]
async fn the_ledger_carries_exact_cost_and_carbon_per_tenant() {
    let app = TestApp::start().await;
    let b = scenario::batches();
    scenario::push(&app, &b).await;
    let collector = app.token(Role::Collector);
    let carbon = |basis: &str, value: &str| {
        json!({"region": "DE", "signal": "carbon", "basis": basis, "status": "actual",
               "source": "test", "start_at": scenario::HOUR, "end_at": scenario::NEXT_HOUR,
               "value": value})
    };
    let price = |from: i64, to: i64, value: &str| {
        json!({"region": "DE", "signal": "price", "currency": "EUR", "status": "actual",
               "source": "tariff", "start_at": scenario::at(from), "end_at": scenario::at(to),
               "value": value})
    };
    let (status, body) = app
        .ingest(
            &collector,
            "signals",
            json!([
                carbon("average", "400"),
                carbon("marginal", "500"),
                price(0, 30, "0.30"),
                price(30, 60, "0.20")
            ]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    app.attribute().await;
    let rows: Vec<(String, String, String, String, Vec<String>)> = sqlx::query_as(
        "SELECT t.key, sum(l.cost)::text, sum(l.carbon_g)::text, sum(l.carbon_marginal_g)::text,
                array_agg(DISTINCT f) FILTER (WHERE f IS NOT NULL)
         FROM ledger l JOIN tenants t ON t.id = l.tenant_id LEFT JOIN LATERAL unnest(l.flags) f ON true
         GROUP BY t.key ORDER BY t.key",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap()
    .into_iter()
    .map(|(k, c, g, m, f): (String, String, String, String, Option<Vec<String>>)| (k, c, g, m, f.unwrap_or_default()))
    .collect();
    assert_eq!(
        rows,
        vec![
            (
                "a".into(),
                "0.302083".into(),
                "483.333".into(),
                "604.167".into(),
                vec![]
            ),
            (
                "b".into(),
                "0.151042".into(),
                "241.667".into(),
                "302.083".into(),
                vec![]
            ),
            (
                "platform".into(),
                "0.046875".into(),
                "75.000".into(),
                "93.750".into(),
                vec![]
            ),
        ]
    );
    // The same through the usage API, with the per-token figures: a served 1250 tokens.
    let (status, body) = app
        .get(
            Some(&app.token(Role::Admin)),
            &format!(
                "/v1/usage?group_by=tenant&from={}&to={}",
                scenario::HOUR,
                scenario::NEXT_HOUR
            ),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let a = &body["rows"][0];
    assert_eq!(a["tenant"], "a");
    assert_eq!(a["cost"], json!({"EUR": "0.302083"}));
    assert_eq!(
        (a["carbon_g"].as_str(), a["carbon_marginal_g"].as_str()),
        (Some("483.333"), Some("604.167"))
    );
    assert_eq!(
        (a["priced_fraction"].as_str(), a["carbon_fraction"].as_str()),
        (Some("1"), Some("1"))
    );
    assert_eq!(
        a["g_co2e_per_1k_tokens"].as_str(),
        Some("386.666"),
        "483.333 g / 1250 tokens"
    );
    assert_eq!(a["cost_per_1m_tokens"], json!({"EUR": "241.6664"}));

    // The site's efficiency for the hour: 2 kWh at the meter, 1.6 IT, 1.4 GPU; 3750 tokens.
    let (status, body) = app
        .get(
            Some(&app.token(Role::Operator)),
            &format!(
                "/v1/metrics/efficiency?from={}&to={}",
                scenario::HOUR,
                scenario::NEXT_HOUR
            ),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let e = &body["rows"][0];
    assert_eq!(body["rows"].as_array().unwrap().len(), 1);
    let field = |k: &str| e[k].as_str().map(str::to_owned);
    assert_eq!(
        [
            field("kwh"),
            field("it_kwh"),
            field("gpu_kwh"),
            field("pue"),
            field("tokens_per_kwh"),
            field("tokens_per_kwh_it"),
            field("g_co2e_per_kwh")
        ],
        [
            Some("2".into()),
            Some("1.6".into()),
            Some("1.4".into()),
            Some("1.25".into()),
            Some("1875".into()),
            Some("2343.75".into()),
            Some("400".into())
        ]
    );
    assert_eq!(
        (e["tokens"].as_i64(), &e["cost"]),
        (Some(3750), &json!({"EUR": "0.5"}))
    );
    let (status, _) = app
        .get(Some(&app.tenant_token("a")), "/v1/metrics/efficiency")
        .await;
    assert_eq!(status, 403, "site-wide figures are not a tenant's");
}

#[tokio::test]
async fn an_hour_without_a_signal_takes_the_fallback_and_is_flagged_never_zero() {
    let app = TestApp::start().await;
    let mut b = scenario::batches();
    scenario::push(&app, &b).await;
    app.attribute().await;
    let costs: Vec<Option<String>> = sqlx::query_scalar("SELECT cost::text FROM ledger")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert!(
        costs.iter().all(Option::is_none),
        "no signal, no fallback: no amount, not zero"
    );
    let flagged: i64 = sqlx::query_scalar("SELECT count(*) FROM ledger WHERE 'price_missing' = ANY(flags) AND 'carbon_missing' = ANY(flags)")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(flagged, costs.len() as i64);

    // The operator sets fallbacks; recomputing the hour uses them and says so.
    b.sites[0]["fallback_price"] = json!("0.25");
    b.sites[0]["fallback_intensity_g"] = json!("350");
    let (status, body) = app
        .ingest(&app.token(Role::Admin), "sites", b.sites.clone())
        .await;
    assert_eq!(status, 200, "{body}");
    // Site settings apply to hours attributed from now on (they do not rewrite history on
    // their own): recompute the hour, as `wattledger attribute --from --to` does.
    sqlx::query("INSERT INTO dirty_hours (site_id, hour) SELECT id, $1::timestamptz FROM sites")
        .bind(chrono::DateTime::parse_from_rfc3339(scenario::HOUR).unwrap())
        .execute(&app.pool)
        .await
        .unwrap();
    app.attribute().await;
    let (cost, carbon, fallbacks): (String, String, i64) = sqlx::query_as(
        "SELECT sum(cost)::text, sum(carbon_g)::text,
                count(*) FILTER (WHERE 'price_fallback' = ANY(flags) AND 'carbon_fallback' = ANY(flags))
         FROM ledger",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    // 2 kWh × 0.25 and × 350 g.
    assert_eq!((cost.as_str(), carbon.as_str()), ("0.500000", "700.000"));
    assert_eq!(fallbacks, costs.len() as i64);
}

/// Embodied carbon from device models: 36 kg over 10 000 h is 1000 ng per ms, 3.6 g per GPU
/// hour. In the scenario hour a holds g0 and a third of g2 by tokens (3.6 + 1.2 g), b half
/// of g1 and two thirds of g2 (1.8 + 2.4 g), and g1's idle half goes to the platform (1.8 g).
#[tokio::test]
async fn embodied_carbon_and_sci_per_token() {
    let app = TestApp::start().await;
    let mut b = scenario::batches();
    for m in b.meters.as_array_mut().unwrap() {
        if m["kind"] == "gpu" {
            m["device_model"] = json!("Test GPU 80GB");
        }
    }
    let (status, body) = app
        .ingest(
            &app.token(Role::Admin),
            "device_models",
            json!([{"key": "Test GPU 80GB", "embodied_kg": "36", "lifetime_hours": 10000, "source": "test",
                    "gpu_hour_rate": "3.6", "currency": "EUR"}]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    scenario::push(&app, &b).await;
    let carbon = json!({"region": "DE", "signal": "carbon", "basis": "average", "status": "actual",
                        "source": "test", "start_at": scenario::HOUR, "end_at": scenario::NEXT_HOUR, "value": "400"});
    app.ingest(&app.token(Role::Collector), "signals", json!([carbon]))
        .await;
    app.attribute().await;
    let (status, body) = app
        .get(
            Some(&app.token(Role::Admin)),
            &format!(
                "/v1/usage?group_by=tenant&from={}&to={}",
                scenario::HOUR,
                scenario::NEXT_HOUR
            ),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let by_tenant: Vec<(String, String)> = body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["tenant"].as_str().unwrap().to_owned(),
                r["embodied_carbon_g"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        by_tenant,
        vec![
            ("a".into(), "4.8".into()),
            ("b".into(), "4.2".into()),
            ("platform".into(), "1.8".into())
        ]
    );
    // SCI per token for a: (483.333 + 4.8) g / 1250 tokens.
    assert_eq!(
        body["rows"][0]["sci_g_per_token"].as_str(),
        Some("0.390506")
    );
    // The API and the tenant's dashboard say the same figures under the same names: the
    // model table's "SCI gCO2e per 1k tokens" is the API's sci_g_per_1k_tokens (operational
    // and embodied), its tokens per kWh the API's, rounded only for display.
    let (status, by_model) = app
        .get(
            Some(&app.tenant_token("a")),
            &format!(
                "/v1/usage?group_by=model&from={}&to={}",
                scenario::HOUR,
                scenario::NEXT_HOUR
            ),
        )
        .await;
    assert_eq!(status, 200, "{by_model}");
    let row = &by_model["rows"][0];
    assert_eq!(row["model"], "m-endpoint");
    // The endpoint's share of a: 0.193333 kWh at 400 g/kWh = 77.333 g (the ledger keeps
    // milligrams) and 1/3 GPU-hour at 3.6 g = 1.2 g embodied, for 1,250 tokens:
    // (77.333 + 1.2) × 1000 / 1250 = 62.8264; the operational figure alone beside it.
    assert_eq!(row["carbon_g"].as_str(), Some("77.333"));
    assert_eq!(row["sci_g_per_1k_tokens"].as_str(), Some("62.826"));
    assert_eq!(row["g_co2e_per_1k_tokens"].as_str(), Some("61.866"));
    let tokens_per_kwh: rust_decimal::Decimal =
        row["tokens_per_kwh"].as_str().unwrap().parse().unwrap();
    add_user(
        &app.pool,
        "alice",
        Role::Tenant,
        Some("a"),
        "correct horse battery",
    )
    .await
    .unwrap();
    let mut alice = Browser::new(&app);
    alice.sign_in("alice", "correct horse battery").await;
    let page = alice.get("/tenants/a?from=2026-11-02&to=2026-11-02").await;
    assert_eq!(page.status, 200);
    let shown = format!(
        "<th scope=\"row\">m-endpoint</th><td class=\"num\">{}</td><td class=\"num\">1,250</td><td class=\"num\">{}</td><td class=\"num\">62.826</td>",
        energy(row["total_mj"].as_i64().unwrap()),
        grouped(tokens_per_kwh, 0),
    );
    assert!(page.body.contains(&shown), "{shown} not in the page");
    assert!(page.body.contains("SCI gCO2e per 1k tokens"));

    // GPU time at 3.6 EUR per GPU-hour splits like the embodied carbon; no price signal, so
    // the fully loaded cost is the GPU time alone.
    let loaded: Vec<serde_json::Value> = body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["fully_loaded_cost"].clone())
        .collect();
    assert_eq!(
        loaded,
        vec![
            json!({"EUR": "4.8"}),
            json!({"EUR": "4.2"}),
            json!({"EUR": "1.8"})
        ]
    );
    // Each ledger row's GPU time per device model adds up to the row (migration 0043), and
    // in the scenario hour g1's idle half is the platform's, on its device model, with no
    // hours held.
    let parts: Vec<(String, Option<String>, i64, rust_decimal::Decimal)> = sqlx::query_as(
        "SELECT t.key, g.device_model, sum(g.gpu_ms)::bigint, sum(g.gpu_time_cost)
         FROM ledger_gpu_time g JOIN tenants t ON t.id = g.tenant_id
         WHERE g.hour = $1::text::timestamptz
         GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .bind(scenario::HOUR)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let model = || Some("Test GPU 80GB".to_owned());
    let eur = |s: &str| s.parse::<rust_decimal::Decimal>().unwrap();
    assert_eq!(
        parts,
        [
            ("a".into(), model(), 4_800_000, eur("4.8")),
            ("b".into(), model(), 4_200_000, eur("4.2")),
            ("platform".into(), model(), 0, eur("1.8")),
        ]
    );
    let unexplained: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM ledger l
         CROSS JOIN LATERAL (
             SELECT coalesce(sum(g.gpu_ms), 0) AS ms, coalesce(sum(g.gpu_time_cost), 0) AS cost
             FROM ledger_gpu_time g
             WHERE g.site_id = l.site_id AND g.hour = l.hour AND g.tenant_id = l.tenant_id
               AND g.job_id IS NOT DISTINCT FROM l.job_id) p
         WHERE l.gpu_ms <> p.ms OR coalesce(l.gpu_time_cost, 0) <> p.cost",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(unexplained, 0);
    let (status, _) = app
        .ingest(
            &app.token(Role::Admin),
            "device_models",
            json!([{"key": "x", "embodied_kg": -1}, {"key": "y", "embodied_kg": 1, "gpu_hour_rate": 2}]),
        )
        .await;
    assert_eq!(status, 422);
}

/// A provider revises the hour's intensity (400 → 500 g/kWh): the next attribution
/// recomputes that hour and no other, and the ledger carries the revised carbon exactly.
#[tokio::test]
async fn a_revised_signal_recomputes_exactly_its_hours() {
    let app = TestApp::start().await;
    scenario::push(&app, &scenario::batches()).await;
    let carbon = |value: &str| {
        json!([{"region": "DE", "signal": "carbon", "basis": "average", "status": "actual",
                "source": "electricitymaps", "start_at": scenario::HOUR, "end_at": scenario::NEXT_HOUR,
                "value": value, "estimated": true}])
    };
    let collector = app.token(Role::Collector);
    app.ingest(&collector, "signals", carbon("400")).await;
    app.attribute().await;
    let total = |app: &TestApp| {
        let pool = app.pool.clone();
        async move {
            sqlx::query_scalar::<_, String>("SELECT sum(carbon_g)::text FROM ledger")
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    assert_eq!(total(&app).await, "800.000");
    let (_, body) = app.ingest(&collector, "signals", carbon("500")).await;
    assert_eq!(body["written"].as_u64(), Some(1));
    let stats = app.attribute().await;
    assert_eq!(stats.hours, 1, "only the revised hour is recomputed");
    assert_eq!(total(&app).await, "1000.000");
    let flagged: i64 =
        sqlx::query_scalar("SELECT count(*) FROM ledger WHERE 'carbon_estimated' = ANY(flags)")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert!(
        flagged > 0,
        "an estimated intensity is flagged on the rows it priced"
    );
}

/// Two regions with different intensities and prices. Site s1 (DE) is the scenario hour
/// (400 g/kWh) under a time-of-use tariff at CET: Monday 11:00 CET is in the weekday peak
/// band, 0.25 EUR/kWh. Site s2 (FR, static PUE 1.0)
/// runs one node at 600 W whose GPU (500 W) b holds all hour: 0.6 kWh at 60 g/kWh and a flat
/// 0.15 EUR/kWh = 36 g and 0.09 EUR, all b's. By hand, per tenant:
/// a 0.302083 EUR, 483.333 g; b 0.151042 + 0.090000 = 0.241042 EUR, 241.667 + 36 = 277.667 g;
/// platform 0.046875 EUR, 75 g. The sites' totals are 0.5 + 0.09 EUR and 800 + 36 g.
#[tokio::test]
async fn two_regions_known_answer_to_the_millionth_and_the_milligram() {
    let app = TestApp::start().await;
    scenario::push(&app, &scenario::batches()).await;
    let admin = app.token(Role::Admin);
    let ok = |(status, body): (u16, serde_json::Value)| assert_eq!(status, 200, "{body}");
    ok(app
        .ingest(&admin, "sites", json!([{"key": "s2", "name": "Site 2", "grid_region": "FR", "currency": "EUR",
            "power_envelope_w": 50000, "static_pue": "1.0", "idle_policy": "platform", "platform_tenant": "platform"}]))
        .await);
    ok(app
        .ingest(
            &admin,
            "meters",
            json!([
            {"key": "n2", "site": "s2", "kind": "node"},
            {"key": "h0", "site": "s2", "kind": "gpu", "parent": "n2", "gpu_uuid": "GPU-FR-0"}]),
        )
        .await);
    ok(app
        .ingest(&app.token(Role::Scheduler), "jobs", json!([{"key": "job-fr", "tenant": "b", "kind": "training",
            "start_at": scenario::HOUR, "end_at": scenario::NEXT_HOUR, "allocations": [{"meter": "GPU-FR-0"}]}]))
        .await);
    let samples: Vec<serde_json::Value> = (0..=60i64)
        .flat_map(|i| {
            [
                json!({"meter": "n2", "ts": scenario::at(i), "counter_mj": 1_000 + i * 36_000_000}),
                json!({"meter": "h0", "ts": scenario::at(i), "counter_mj": 2_000 + i * 30_000_000}),
            ]
        })
        .collect();
    let collector = app.token(Role::Collector);
    ok(app.ingest(&collector, "samples", json!(samples)).await);
    let point = |region: &str, signal: &str, from: i64, to: i64, value: &str| {
        let mut p = json!({"region": region, "signal": signal, "status": "actual", "source": "test",
                           "start_at": scenario::at(from), "end_at": scenario::at(to), "value": value});
        if signal == "carbon" {
            p["basis"] = json!("average");
        } else {
            p["currency"] = json!("EUR");
        }
        p
    };
    ok(app
        .ingest(
            &collector,
            "signals",
            json!([
                point("DE", "carbon", 0, 60, "400"),
                point("FR", "carbon", 0, 60, "60"),
                point("FR", "price", 0, 60, "0.15")
            ]),
        )
        .await);
    let tariff: wattledger_grid::tariff::Tariff = serde_json::from_value(json!({
        "currency": "EUR", "utc_offset_minutes": 60,
        "seasons": [{"months": [1,2,3,4,5,6,7,8,9,10,11,12], "price": "0.18", "bands": [
            {"days": ["weekdays"], "hours": [8, 20], "price": "0.25"},
            {"days": ["all"], "hours": [22, 6], "price": "0.12"}]}]
    }))
    .unwrap();
    let hour = chrono::DateTime::parse_from_rfc3339(scenario::HOUR)
        .unwrap()
        .to_utc();
    let prices = tariff.series(
        "DE",
        hour - chrono::Duration::hours(12),
        hour + chrono::Duration::hours(12),
    );
    ok(app
        .ingest(
            &collector,
            "signals",
            json!(wattledger_wire::SignalPoint::from_series(&prices)),
        )
        .await);
    app.attribute().await;
    let per = |sql: &str| {
        let pool = app.pool.clone();
        let sql = sql.to_owned();
        async move {
            sqlx::query_as::<_, (String, String, String)>(&sql)
                .fetch_all(&pool)
                .await
                .unwrap()
        }
    };
    assert_eq!(
        per("SELECT t.key, sum(cost)::text, sum(carbon_g)::text FROM ledger l JOIN tenants t ON t.id = l.tenant_id GROUP BY 1 ORDER BY 1").await,
        vec![
            ("a".into(), "0.302083".into(), "483.333".into()),
            ("b".into(), "0.241042".into(), "277.667".into()),
            ("platform".into(), "0.046875".into(), "75.000".into()),
        ]
    );
    assert_eq!(
        per("SELECT s.key, sum(cost)::text, sum(carbon_g)::text FROM ledger l JOIN sites s ON s.id = l.site_id GROUP BY 1 ORDER BY 1").await,
        vec![("s1".into(), "0.500000".into(), "800.000".into()), ("s2".into(), "0.090000".into(), "36.000".into())]
    );
}
