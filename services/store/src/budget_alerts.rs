//! The statements of budget alerts (`app::budget_alerts` evaluates them): the budgets an
//! attribution run's hours touch, with their use, and the events raised, one `budget_events`
//! row per budget × period × metric × threshold (its unique key keeps it to one however
//! often the hours are recomputed).

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use sqlx::PgConnection;
use uuid::Uuid;
use wattledger_domain::budget::BudgetMetric;

use crate::budgets::{with_use, BudgetState};
use crate::StoreResult;

pub const THRESHOLD_CROSSED: &str = "budget.threshold_crossed";
pub const PROJECTED_EXCEED: &str = "budget.projected_exceed";

/// The budgets of `tenants` over the periods `hours` fall in (a month's, or a custom
/// period the hours touch), with their use: the period's, and since `recent_since`.
pub async fn touched(
    conn: &mut PgConnection,
    tenants: &[i64],
    hours: &[DateTime<Utc>],
    recent_since: DateTime<Utc>,
) -> StoreResult<Vec<BudgetState>> {
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
    let citus = crate::distribution::is_citus(&mut *conn).await?;
    Ok(sqlx::query_as(&with_use(periods, 3, citus))
        .bind(tenants)
        .bind(hours)
        .bind(recent_since)
        .fetch_all(conn)
        .await?)
}

/// One alert of a budget's period, as raised.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub id: Uuid,
    pub budget_id: i64,
    pub tenant_id: i64,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
    pub metric: BudgetMetric,
    /// A percent of the limit, or `projected`.
    pub threshold: String,
    pub used: Decimal,
    pub limit: Decimal,
    pub projected_at: Option<DateTime<Utc>>,
}

/// Writes the event unless this budget's period already has it; true if it was new.
pub async fn insert_event(conn: &mut PgConnection, e: &NewEvent) -> StoreResult<bool> {
    let inserted = sqlx::query!(
        "INSERT INTO budget_events (id, budget_id, tenant_id, period_start, period_end, metric,
                                    threshold, used, limit_value, projected_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         ON CONFLICT (budget_id, period_start, metric, threshold) DO NOTHING",
        e.id,
        e.budget_id,
        e.tenant_id,
        e.period_start,
        e.period_end,
        e.metric.as_str(),
        &e.threshold,
        e.used,
        e.limit,
        e.projected_at,
    )
    .execute(conn)
    .await?
    .rows_affected();
    Ok(inserted > 0)
}
