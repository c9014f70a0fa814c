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

use crate::StoreResult;

pub const THRESHOLD_CROSSED: &str = "budget.threshold_crossed";
pub const PROJECTED_EXCEED: &str = "budget.projected_exceed";

#[derive(Debug, sqlx::FromRow)]
struct BudgetUse {
    id: i64,
    key: String,
    tenant_id: i64,
    tenant: String,
    model: Option<String>,
    hard: bool,
    thresholds_pct: Vec<i32>,
    p_start: DateTime<Utc>,
    p_end: DateTime<Utc>,
    limit_kwh: Option<Decimal>,
    limit_cost: Option<Decimal>,
    currency: Option<String>,
    limit_carbon_kg: Option<Decimal>,
    used_kwh: Decimal,
    used_cost: Decimal,
    used_carbon_kg: Decimal,
    recent_kwh: Decimal,
    recent_cost: Decimal,
    recent_carbon_kg: Decimal,
}

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
    let rows: Vec<BudgetUse> = sqlx::query_as(
        "WITH periods AS (
             SELECT DISTINCT date_trunc('month', h AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS p
             FROM unnest($2::timestamptz[]) h
         ), b AS (
             SELECT DISTINCT b.id, b.key, b.tenant_id, b.model_id, b.hard, b.thresholds_pct,
                    b.limit_kwh, b.limit_cost, b.currency::text AS currency, b.limit_carbon_kg,
                    CASE WHEN b.period = 'month' THEN p.p ELSE b.starts_at END AS p_start,
                    CASE WHEN b.period = 'month'
                         THEN (p.p AT TIME ZONE 'UTC' + interval '1 month') AT TIME ZONE 'UTC'
                         ELSE b.ends_at END AS p_end
             FROM budgets b CROSS JOIN periods p
             WHERE b.tenant_id = ANY($1)
               AND (b.period = 'month' OR EXISTS (
                    SELECT 1 FROM unnest($2::timestamptz[]) h
                    WHERE h >= b.starts_at - interval '1 hour' AND h < b.ends_at))
         )
         SELECT b.id, b.key, b.tenant_id, t.key AS tenant, m.key AS model, b.hard,
                b.thresholds_pct, b.p_start, b.p_end, b.limit_kwh, b.limit_cost, b.currency,
                b.limit_carbon_kg,
                coalesce(sum(l.total_mj), 0)::numeric / 3600000000 AS used_kwh,
                coalesce(sum(l.cost) FILTER (WHERE s.currency = b.currency), 0) AS used_cost,
                coalesce(sum(l.carbon_g), 0) / 1000 AS used_carbon_kg,
                coalesce(sum(l.total_mj) FILTER (WHERE l.hour >= $3), 0)::numeric / 3600000000
                    AS recent_kwh,
                coalesce(sum(l.cost) FILTER (WHERE l.hour >= $3 AND s.currency = b.currency), 0)
                    AS recent_cost,
                coalesce(sum(l.carbon_g) FILTER (WHERE l.hour >= $3), 0) / 1000 AS recent_carbon_kg
         FROM b
         JOIN tenants t ON t.id = b.tenant_id
         LEFT JOIN models m ON m.id = b.model_id
         LEFT JOIN ledger l ON l.tenant_id = b.tenant_id AND l.hour >= b.p_start
              AND l.hour < b.p_end AND (b.model_id IS NULL OR l.model_id = b.model_id)
         LEFT JOIN sites s ON s.id = l.site_id
         GROUP BY b.id, b.key, b.tenant_id, t.key, m.key, b.hard, b.thresholds_pct, b.p_start,
                  b.p_end, b.limit_kwh, b.limit_cost, b.currency, b.limit_carbon_kg",
    )
    .bind(tenants)
    .bind(hours)
    .bind(now - Duration::days(7))
    .fetch_all(&mut **tx)
    .await?;

    let mut events = 0;
    for b in &rows {
        // The burn rate's window: the last seven days, or as much of the period as passed.
        let recent_s = (now - (now - Duration::days(7)).max(b.p_start)).num_seconds();
        let metrics = [
            ("kwh", b.limit_kwh, b.used_kwh, b.recent_kwh),
            ("cost", b.limit_cost, b.used_cost, b.recent_cost),
            (
                "carbon_kg",
                b.limit_carbon_kg,
                b.used_carbon_kg,
                b.recent_carbon_kg,
            ),
        ];
        for (metric, limit, used, recent) in metrics {
            let Some(limit) = limit else { continue };
            let usage = Usage {
                limit,
                used,
                recent,
                recent_s,
                period_start: b.p_start,
                period_end: b.p_end,
            };
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
    b: &BudgetUse,
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
    let inserted = sqlx::query(
        "INSERT INTO budget_events (id, budget_id, tenant_id, period_start, period_end, metric,
                                    threshold, used, limit_value, projected_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         ON CONFLICT (budget_id, period_start, metric, threshold) DO NOTHING",
    )
    .bind(id)
    .bind(b.id)
    .bind(b.tenant_id)
    .bind(b.p_start)
    .bind(b.p_end)
    .bind(metric)
    .bind(alert.key())
    .bind(u.used.round_dp(6))
    .bind(u.limit)
    .bind(projected_at)
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
        "period_start": b.p_start,
        "period_end": b.p_end,
        "projected_exhausted_at": projected_at,
    });
    enqueue(tx, b.tenant_id, event_type, data, now).await?;
    Ok(true)
}

/// One outbox message per enabled endpoint of the tenant that takes this event type, the
/// body fixed now (the signature covers these exact bytes on every attempt).
pub async fn enqueue(
    tx: &mut Transaction<'_, Postgres>,
    tenant_id: i64,
    event_type: &str,
    data: serde_json::Value,
    now: DateTime<Utc>,
) -> StoreResult<u64> {
    let body = json!({
        "type": event_type,
        "timestamp": now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "data": data,
    })
    .to_string();
    Ok(sqlx::query(
        "INSERT INTO webhook_messages (id, endpoint_id, event_type, payload)
         SELECT 'msg_' || replace(gen_random_uuid()::text, '-', ''), e.id, $2, $3
         FROM webhook_endpoints e
         WHERE e.tenant_id = $1 AND e.enabled
           AND (cardinality(e.event_types) = 0 OR $2 = ANY(e.event_types))",
    )
    .bind(tenant_id)
    .bind(event_type)
    .bind(body)
    .execute(&mut **tx)
    .await?
    .rows_affected())
}
