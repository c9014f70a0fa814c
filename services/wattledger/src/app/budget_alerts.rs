//! Budget alerts as the ledger changes: after an attribution run writes its hours, and in
//! its transaction, the budgets of the tenants it touched are evaluated for the periods it
//! touched (`domain::budget_alerts`); each new crossing is one event and one outbox message
//! per subscribed endpoint, so an alert is sent if and only if the ledger rows that cross it
//! are committed.

use chrono::{DateTime, Duration, Utc};
use rust_decimal::Decimal;
use serde_json::{json, Value};
use sqlx::PgConnection;
use uuid::Uuid;
use wattledger_domain::budget::BudgetMetric;
use wattledger_domain::budget_alerts::{alerts, Alert, Usage};
use wattledger_store::budget_alerts::{self as store, NewEvent};
use wattledger_store::budget_alerts::{PROJECTED_EXCEED, THRESHOLD_CROSSED};
use wattledger_store::budgets::BudgetState;
use wattledger_store::{webhooks, StoreResult};

/// Evaluates the budgets of `tenants` for the periods `hours` fall in; the number of new
/// events.
pub async fn evaluate(
    conn: &mut PgConnection,
    tenants: &[i64],
    hours: &[DateTime<Utc>],
    now: DateTime<Utc>,
) -> StoreResult<u64> {
    if tenants.is_empty() || hours.is_empty() {
        return Ok(0);
    }
    // The burn rate is the last seven days' (`BudgetState::usages`).
    let budgets = store::touched(conn, tenants, hours, now - Duration::days(7)).await?;
    let mut events = 0;
    for b in &budgets {
        for (metric, usage) in b.usages(now) {
            for alert in alerts(&usage, &b.thresholds_pct, now) {
                let event = new_event(b, metric, &usage, &alert);
                if store::insert_event(conn, &event).await? {
                    let (event_type, data) = message(b, &event, &alert);
                    webhooks::enqueue(conn, b.tenant_id, event_type, data, now).await?;
                    events += 1;
                }
            }
        }
    }
    Ok(events)
}

fn new_event(b: &BudgetState, metric: BudgetMetric, u: &Usage, alert: &Alert) -> NewEvent {
    NewEvent {
        id: Uuid::now_v7(),
        budget_id: b.id,
        tenant_id: b.tenant_id,
        period_start: b.period_start,
        period_end: b.period_end,
        metric,
        threshold: alert.key(),
        used: u.used.round_dp(6),
        limit: u.limit,
        projected_at: match alert {
            Alert::Projected(at) => Some(*at),
            Alert::Threshold(_) => None,
        },
    }
}

/// The webhook's event type and data for a new event.
fn message(b: &BudgetState, e: &NewEvent, alert: &Alert) -> (&'static str, Value) {
    let (event_type, threshold) = match alert {
        Alert::Threshold(p) => (THRESHOLD_CROSSED, json!(p)),
        Alert::Projected(_) => (PROJECTED_EXCEED, json!(null)),
    };
    let data = json!({
        "event_id": e.id,
        "budget": b.key,
        "tenant": b.tenant,
        "model": b.model,
        "metric": e.metric,
        "currency": if e.metric == BudgetMetric::Cost { b.currency.clone() } else { None },
        "threshold_pct": threshold,
        "used": e.used,
        "limit": e.limit.normalize(),
        "used_pct": (e.used * Decimal::ONE_HUNDRED / e.limit).round_dp(2),
        "hard": b.hard,
        "period_start": b.period_start,
        "period_end": b.period_end,
        "projected_exhausted_at": e.projected_at,
    });
    (event_type, data)
}
