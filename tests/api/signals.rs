//! Grid signals through the ingest API: validation, idempotence, and revisions that dirty
//! exactly the attributed hours they touch.

use crate::scenario;
use serde_json::json;
use wattledger::auth::Role;
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
                 "start_at": "2099-01-01T00:00:00Z", "end_at": "2099-01-01T01:00:00Z", "value": "1e30"}
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
        ]
    );
    let (status, _) = app
        .ingest(&app.token(Role::Scheduler), "signals", json!([]))
        .await;
    assert_eq!(status, 403, "schedulers do not send signals");
}
