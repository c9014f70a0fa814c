//! Budget alerts as the ledger changes: after an attribution run writes its hours, and in
//! its transaction, the budgets of the tenants it touched are evaluated for the periods it
//! touched; each new crossing is one `budget_events` row (the unique key keeps it to one
//! however often the hours are recomputed) and one outbox message per subscribed endpoint.

use chrono::{DateTime, Duration, Utc};
use rust_decimal::Decimal;
use serde_json::json;
use sqlx::{Postgres, Transaction};
use uuid::Uuid;
use wattledger_domain::budget_alerts::{alerts, Alert, Usage};

use crate::budgets::{with_use, BudgetState};

use crate::StoreResult;

pub const THRESHOLD_CROSSED: &str = "budget.threshold_crossed";
pub const PROJECTED_EXCEED: &str = "budget.projected_exceed";

/// Evaluates the budgets of `tenants` for the periods `hours` fall in; returns the number of
/// new events.
pub async fn evaluate(
    tx: &mut Transaction<'_, Postgres>,
    tenants: &[i64],
    hours: &[DateTime<Utc>],
    now: DateTime<Utc>,
) -> StoreResult<u64> {
    if tenants.is_empty() || hours.is_empty() {
        return Ok(0);
    }
    let periods = "periods AS (
             SELECT DISTINCT date_trunc('month', h AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS p
             FROM unnest($2::timestamptz[]) h
         ), b AS (
             SELECT DISTINCT b.id, b.key, b.tenant_id, b.model_id, b.period, b.hard,
                    b.thresholds_pct, b.limit_kwh, b.limit_cost, b.currency, b.limit_carbon_kg,
                    CASE WHEN b.period = 'month' THEN p.p ELSE b.starts_at END AS p_start,
                    CASE WHEN b.period = 'month'
                         THEN (p.p AT TIME ZONE 'UTC' + interval '1 month') AT TIME ZONE 'UTC'
                         ELSE b.ends_at END AS p_end
             FROM budgets b CROSS JOIN periods p
             WHERE b.tenant_id = ANY($1)
               AND (b.period = 'month' OR EXISTS (
                    SELECT 1 FROM unnest($2::timestamptz[]) h
                    WHERE h >= b.starts_at - interval '1 hour' AND h < b.ends_at))
         )";
    let rows: Vec<BudgetState> = sqlx::query_as(&with_use(periods, 3))
        .bind(tenants)
        .bind(hours)
        .bind(now - Duration::days(7))
        .fetch_all(&mut **tx)
        .await?;

    let mut events = 0;
    for b in &rows {
        for (metric, usage) in b.usages(now) {
            for alert in alerts(&usage, &b.thresholds_pct, now) {
                if record(tx, b, metric, &usage, &alert, now).await? {
                    events += 1;
                }
            }
        }
    }
    Ok(events)
}

/// Writes the event unless it exists, and its outbox messages; true if it was new.
async fn record(
    tx: &mut Transaction<'_, Postgres>,
    b: &BudgetState,
    metric: &str,
    u: &Usage,
    alert: &Alert,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let id = Uuid::now_v7();
    let projected_at = match alert {
        Alert::Projected(at) => Some(*at),
        Alert::Threshold(_) => None,
    };
    let inserted = sqlx::query!(
        "INSERT INTO budget_events (id, budget_id, tenant_id, period_start, period_end, metric,
                                    threshold, used, limit_value, projected_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         ON CONFLICT (budget_id, period_start, metric, threshold) DO NOTHING",
        id,
        b.id,
        b.tenant_id,
        b.period_start,
        b.period_end,
        metric,
        alert.key(),
        u.used.round_dp(6),
        u.limit,
        projected_at,
    )
    .execute(&mut **tx)
    .await?
    .rows_affected();
    if inserted == 0 {
        return Ok(false);
    }
    let (event_type, threshold) = match alert {
        Alert::Threshold(p) => (THRESHOLD_CROSSED, json!(p)),
        Alert::Projected(_) => (PROJECTED_EXCEED, json!(null)),
    };
    let data = json!({
        "event_id": id,
        "budget": b.key,
        "tenant": b.tenant,
        "model": b.model,
        "metric": metric,
        "currency": if metric == "cost" { b.currency.clone() } else { None },
        "threshold_pct": threshold,
        "used": u.used.round_dp(6),
        "limit": u.limit.normalize(),
        "used_pct": (u.used * Decimal::ONE_HUNDRED / u.limit).round_dp(2),
        "hard": b.hard,
        "period_start": b.period_start,
        "period_end": b.period_end,
        "projected_exhausted_at": projected_at,
    });
    crate::webhooks::enqueue(tx, b.tenant_id, event_type, data, now).await?;
    Ok(true)
}
