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
    attribution::run_claim(&app.pool, &claim).await.unwrap();
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
