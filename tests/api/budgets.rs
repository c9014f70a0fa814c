//! Budgets over the API: finance writes, a tenant reads its own (another's is not found),
//! bad budgets name their fields, a read shows the period's use and alerts, and a hard cap
//! written here makes admission reject naming it.

use crate::scenario;
use serde_json::json;
use wattledger::auth::Role;
use wattledger_tests::TestApp;

#[tokio::test]
async fn finance_writes_budgets_tenants_read_theirs_and_admission_enforces_them() {
    let app = TestApp::start().await;
    scenario::push(&app, &scenario::batches()).await;
    let finance = app.token(Role::Finance);
    let body = json!({"tenant": "a", "limit_kwh": "1.5", "limit_carbon_kg": 10, "hard": true});
    let (status, created) = app
        .put(&finance, "/v1/budgets/a-monthly", body.clone())
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["thresholds_pct"], json!([50, 80, 100]));
    let (status, _) = app
        .put(&finance, "/v1/budgets/a-monthly", body.clone())
        .await;
    assert_eq!(status, 200, "the same key replaces");
    let (status, _) = app
        .put(
            &app.tenant_token("a"),
            "/v1/budgets/a-monthly",
            body.clone(),
        )
        .await;
    assert_eq!(status, 403, "tenants read budgets, they do not set them");

    // Every problem at once, each with its field (a refused limit is not also reported as
    // "no limit given").
    let (status, bad) = app
        .put(
            &finance,
            "/v1/budgets/bad",
            json!({"tenant": "nobody", "period": "custom", "limit_cost": "-3",
                   "thresholds_pct": [0], "colour": "red"}),
        )
        .await;
    assert_eq!(status, 422, "{bad}");
    let mut fields: Vec<&str> = bad["error"]["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap())
        .collect();
    fields.sort();
    fields.dedup();
    assert_eq!(
        fields,
        [
            "colour",
            "ends_at",
            "limit_cost",
            "tenant",
            "thresholds_pct"
        ],
        "{bad}"
    );

    // After attribution: 1.208333 kWh of 1.5 used; the 50 and 80 % alerts raised.
    assert_eq!(app.attribute().await.alerts, 2);
    let (status, mine) = app.get(Some(&app.tenant_token("a")), "/v1/budgets").await;
    assert_eq!(status, 200);
    assert_eq!(mine.as_array().unwrap().len(), 1);
    let kwh = &mine[0]["metrics"][0];
    assert_eq!(kwh["metric"], "kwh");
    assert_eq!(kwh["used"], "1.208333");
    assert_eq!(kwh["remaining"], "0.291667");
    assert_eq!(kwh["used_pct"], "80.56");
    let raised: Vec<&str> = mine[0]["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["threshold"].as_str().unwrap())
        .collect();
    assert_eq!(raised, ["50", "80"]);
    let (status, _) = app
        .get(Some(&app.tenant_token("b")), "/v1/budgets/a-monthly")
        .await;
    assert_eq!(
        status, 404,
        "another tenant's budget is not found, not forbidden"
    );
    let (status, theirs) = app.get(Some(&app.tenant_token("b")), "/v1/budgets").await;
    assert_eq!((status, theirs), (200, json!([])));

    // The hard cap, as written through the API, rejects a job that would exceed it.
    let q = json!({"tenant": "a", "gpus": 8, "duration_s": 3600, "dry_run": true});
    let mut answer = json!(null);
    for _ in 0..60 {
        let (_, a) = app
            .post_raw(&app.token(Role::Scheduler), "/v1/admission", q.to_string())
            .await;
        if a["decision"] == "reject" {
            answer = a;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(answer["decision"], "reject", "{answer}");
    assert!(
        answer["reasons"][0].as_str().unwrap().contains("a-monthly"),
        "{answer}"
    );

    let (status, _) = app
        .send(
            reqwest::Method::DELETE,
            &finance,
            "/v1/budgets/a-monthly",
            String::new(),
        )
        .await;
    assert_eq!(status, 204);
    let (status, _) = app.get(Some(&finance), "/v1/budgets/a-monthly").await;
    assert_eq!(status, 404);
}
