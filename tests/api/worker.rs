//! The attribution worker under failure and concurrency: a worker that dies holding a claim
//! loses nothing, and two workers racing produce the ledger one would.

use crate::scenario::{self, EXPECTED_B};
use wattledger::auth::Role;
use wattledger_store::attribution;
use wattledger_tests::TestApp;

#[tokio::test]
async fn a_worker_that_dies_mid_claim_leaves_its_hours_to_the_next() {
    let app = TestApp::start().await;
    scenario::push(&app, &scenario::batches()).await;
    let dirty_before: i64 = sqlx::query_scalar("SELECT count(*) FROM dirty_hours")
        .fetch_one(&app.pool)
        .await
        .unwrap();

    // A worker claims the hours and dies before writing (the claim is all it did).
    let claim = attribution::claim(&app.pool, 24)
        .await
        .unwrap()
        .expect("dirty hours to claim");
    assert!(!claim.hours.is_empty());
    drop(claim);
    // While its lease runs, other workers leave those hours alone...
    let stats = app.attribute().await;
    assert_eq!(stats.hours, 0, "leased hours must not be taken twice");
    // ...and once it has expired, the next worker recomputes them.
    sqlx::query("UPDATE dirty_hours SET claimed_until = now() - interval '1 second'")
        .execute(&app.pool)
        .await
        .unwrap();
    let stats = app.attribute().await;
    assert_eq!(stats.hours as i64, dirty_before);
    let totals = scenario::tenant_totals(&app, &app.token(Role::Finance)).await;
    assert_eq!(totals, scenario::expected_totals());
}

#[tokio::test]
async fn new_data_during_a_claim_keeps_the_hour_dirty() {
    let app = TestApp::start().await;
    let mut b = scenario::batches();
    let tokens = std::mem::replace(&mut b.tokens, serde_json::json!([]));
    scenario::push(&app, &b).await;
    let claim = attribution::claim(&app.pool, 24).await.unwrap().unwrap();
    // Tokens arrive while the claimed hours are being computed.
    let (status, _) = app
        .ingest(&app.token(Role::Collector), "tokens", tokens)
        .await;
    assert_eq!(status, 200);
    wattledger::app::attribution::run_claim(&app.pool, &claim)
        .await
        .unwrap();
    let still_dirty: i64 = sqlx::query_scalar("SELECT count(*) FROM dirty_hours")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert!(still_dirty >= 1, "the re-marked hour must stay dirty");
    app.attribute().await;
    let totals = scenario::tenant_totals(&app, &app.token(Role::Finance)).await;
    assert_eq!(totals[1], ("b".into(), EXPECTED_B));
}

#[tokio::test]
async fn two_workers_racing_write_the_ledger_one_would() {
    let app = TestApp::start().await;
    scenario::push(&app, &scenario::batches()).await;
    let (x, y) = tokio::join!(
        wattledger::worker::drain(&app.pool, |_| {}),
        wattledger::worker::drain(&app.pool, |_| {})
    );
    let (x, y) = (x.unwrap(), y.unwrap());
    let dirty: i64 = sqlx::query_scalar("SELECT count(*) FROM dirty_hours")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(dirty, 0);
    assert!(x.hours + y.hours >= 1);
    let totals = scenario::tenant_totals(&app, &app.token(Role::Finance)).await;
    assert_eq!(totals, scenario::expected_totals());
}

/// Two claims of one site-day rebuild its rollup one after the other, even when the hour a
/// claim locks the day by has no site-hour (no data in it): the second waits for the first
/// to commit, then sums both, where it used to insert the day's rows beside the first's and
/// fail on the rollup's unique key.
#[tokio::test]
async fn two_claims_of_one_day_rebuild_its_rollup_in_turn_even_from_an_empty_hour() {
    let app = TestApp::start().await;
    scenario::push(&app, &scenario::batches()).await;
    app.attribute().await;
    let (site_id, hour): (i64, chrono::DateTime<chrono::Utc>) =
        sqlx::query_as("SELECT site_id, min(hour) FROM site_hours GROUP BY site_id LIMIT 1")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    let day = attribution::day_of(hour);
    // Hours of that day the scenario has no data in: no site-hour row.
    let empty: Vec<chrono::DateTime<chrono::Utc>> = sqlx::query_scalar(
        "SELECT h FROM generate_series($2::timestamptz, $2 + interval '23 hours', interval '1 hour') h
         WHERE NOT EXISTS (SELECT 1 FROM site_hours WHERE site_id = $1 AND hour = h)
         ORDER BY h LIMIT 2",
    )
    .bind(site_id)
    .bind(day)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(empty.len(), 2, "the scenario leaves hours of its day empty");
    let mut first = app.pool.begin().await.unwrap();
    attribution::rebuild_days(&mut first, site_id, &empty[..1])
        .await
        .unwrap();
    let mut second = app.pool.acquire().await.unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *second)
        .await
        .unwrap();
    let rebuilding = tokio::spawn(async move {
        let mut tx = sqlx::Connection::begin(&mut *second).await?;
        attribution::rebuild_days(&mut tx, site_id, &empty[1..]).await?;
        tx.commit().await?;
        Ok::<_, anyhow::Error>(())
    });
    // The second is waiting on a lock of the first (which one is what the fix changed). On
    // Citus the lock is a worker's, and the coordinator's backend waits for that worker's
    // answer: `citus_lock_waits` names it (its global pid ends in its pid).
    let waiting_sql = if wattledger_tests::citus().is_some() {
        "SELECT EXISTS (SELECT 1 FROM citus_lock_waits
                        WHERE waiting_gpid % 10000000000 = $1)"
    } else {
        "SELECT coalesce(bool_or(wait_event_type = 'Lock'), false) FROM pg_stat_activity
         WHERE pid = $1"
    };
    let mut waited = false;
    for _ in 0..200 {
        let waiting: bool = sqlx::query_scalar(waiting_sql)
            .bind(pid)
            .fetch_one(&app.pool)
            .await
            .unwrap();
        if waiting {
            waited = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(waited, "the second rebuild did not wait for the first");
    first.commit().await.unwrap();
    rebuilding
        .await
        .unwrap()
        .expect("the second rebuild, in turn");
    let totals = scenario::tenant_totals(&app, &app.token(Role::Finance)).await;
    assert_eq!(totals, scenario::expected_totals());
}

/// Ingest batches: the path under `/v1/ingest/` and the records.
type Batches = Vec<(&'static str, serde_json::Value)>;

/// The demo's simulated cluster over six hours as ingest batches, in the order one would
/// send them: inventory, signals, jobs, then samples and tokens by time.
fn simulated_batches() -> (Batches, Batches) {
    use wattledger_sim::{SampleState, Simulation};
    let from = chrono::DateTime::parse_from_rfc3339("2026-10-05T00:00:00Z")
        .unwrap()
        .timestamp_millis();
    let sim = Simulation::new(5, from, from + 6 * 3_600_000, 60_000);
    let inventory = vec![
        ("tenants", sim.tenant_records()["records"].clone()),
        ("sites", sim.site_records()["records"].clone()),
        ("models", sim.model_records()["records"].clone()),
        (
            "device_models",
            sim.device_model_records()["records"].clone(),
        ),
        ("meters", sim.meter_records()["records"].clone()),
    ];
    let mut data: Batches = Vec::new();
    for chunk in sim.signal_records().unwrap().chunks(500) {
        data.push(("signals", serde_json::json!(chunk)));
    }
    for b in sim.job_batches(50) {
        data.push(("jobs", b["records"].clone()));
    }
    let mut state = SampleState::default();
    let mut k = 0;
    while k < sim.intervals() {
        let k1 = (k + 20).min(sim.intervals());
        data.push((
            "samples",
            serde_json::json!(sim.sample_records(k, k1, &mut state)),
        ));
        data.push(("tokens", serde_json::json!(sim.token_records(k, k1))));
        k = k1;
    }
    (inventory, data)
}

/// Every ledger row, site-hour and rollup row by natural keys, for comparing databases.
async fn ledger_of(app: &TestApp) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT concat_ws(' ', s.key, l.hour, t.key, j.key, l.gpu_mj, l.node_overhead_mj, l.idle_mj,
                          l.facility_overhead_mj, l.total_mj, l.estimated_mj, l.cost, l.carbon_g,
                          l.embodied_carbon_g)
         FROM ledger l JOIN sites s ON s.id = l.site_id JOIN tenants t ON t.id = l.tenant_id
         LEFT JOIN jobs j ON j.site_id = l.site_id AND j.id = l.job_id
         UNION ALL
         SELECT concat_ws(' ', 'hour', s.key, h.hour, h.site_mj, h.it_peak_mw)
         FROM site_hours h JOIN sites s ON s.id = h.site_id
         UNION ALL
         SELECT concat_ws(' ', 'day', s.key, d.day, t.key, d.total_mj, d.cost, d.carbon_g)
         FROM usage_days d JOIN sites s ON s.id = d.site_id JOIN tenants t ON t.id = d.tenant_id
         ORDER BY 1",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn two_replicas_ingesting_and_attributing_at_once_write_the_ledger_one_would() {
    let (inventory, data) = simulated_batches();
    let send = |app: &TestApp, what: &'static str, records: &serde_json::Value| {
        let token = app.token(if what == "signals" {
            Role::Admin
        } else {
            Role::Collector
        });
        let (app_base, http, records) = (app.base.clone(), app.http.clone(), records.clone());
        async move {
            let r = http
                .post(format!("{app_base}/v1/ingest/{what}"))
                .bearer_auth(token)
                .json(&serde_json::json!({ "records": records }))
                .send()
                .await
                .unwrap();
            let status = r.status();
            assert!(status.is_success(), "{what}: {}", r.text().await.unwrap());
        }
    };
    let admin_push = |app: &TestApp| {
        let admin = app.token(Role::Admin);
        let inventory = inventory.clone();
        let (base, http) = (app.base.clone(), app.http.clone());
        async move {
            for (what, records) in inventory {
                let r = http
                    .post(format!("{base}/v1/ingest/{what}"))
                    .bearer_auth(&admin)
                    .json(&serde_json::json!({ "records": records }))
                    .send()
                    .await
                    .unwrap();
                assert!(r.status().is_success(), "{what}");
            }
        }
    };

    // One replica: everything in order, then attributed.
    let one = TestApp::start().await;
    admin_push(&one).await;
    for (what, records) in &data {
        send(&one, what, records).await;
    }
    one.attribute().await;
    let expected = ledger_of(&one).await;
    assert!(expected.len() > 100, "{}", expected.len());

    // Two replicas on one database, each with its own pool: the batches alternate between
    // them, and each attributes whatever is dirty after every batch it sends, while the
    // other is still sending.
    let a = TestApp::start().await;
    let b = a.replica().await;
    let b_pool = wattledger_store::connect(&a.db_url, 4).await.unwrap();
    admin_push(&a).await;
    // Signals and jobs first, in order, alternating between the replicas: a token record
    // names a job, and one for a job not yet sent is refused (its agent would resend it).
    // The samples and tokens then race.
    let (refs, flow): (Vec<_>, Vec<_>) = data
        .iter()
        .partition(|(what, _)| matches!(*what, "signals" | "jobs"));
    for (i, (what, records)) in refs.iter().enumerate() {
        send(if i % 2 == 0 { &a } else { &b }, what, records).await;
    }
    let lane = |app: &TestApp, pool: sqlx::PgPool, parity: usize| {
        let batches: Vec<_> = flow
            .iter()
            .enumerate()
            // A chunk's samples and tokens to one replica, the next chunk's to the other.
            .filter(|(i, _)| (i / 2) % 2 == parity)
            .map(|(_, b)| send(app, b.0, &b.1))
            .collect();
        async move {
            for batch in batches {
                batch.await;
                wattledger::worker::drain(&pool, |_| {}).await.unwrap();
            }
        }
    };
    tokio::join!(lane(&a, a.pool.clone(), 0), lane(&b, b_pool.clone(), 1));
    let until = chrono::Utc::now();
    let (x, y) = tokio::join!(
        wattledger::worker::drain_until(&a.pool, until, |_| {}),
        wattledger::worker::drain_until(&b_pool, until, |_| {})
    );
    x.unwrap();
    y.unwrap();
    assert_eq!(ledger_of(&a).await, expected);
}
