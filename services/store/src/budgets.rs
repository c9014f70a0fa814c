//! Budgets: written by admin and finance, read by their tenant, each with what the ledger
//! says its tenant (and model) used in the current period and over the last seven days.

use chrono::{DateTime, Duration, Utc};
use rust_decimal::Decimal;
use sqlx::PgPool;

use crate::{Scope, StoreResult};
use wattledger_domain::budget::{BudgetMetric, BudgetPeriod};
use wattledger_domain::budget_alerts::Usage;

/// A budget as written.
#[derive(Debug, Clone)]
pub struct BudgetSpec {
    pub key: String,
    pub tenant_id: i64,
    pub model_id: Option<i64>,
    pub period: BudgetPeriod,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    pub limit_kwh: Option<Decimal>,
    pub limit_cost: Option<Decimal>,
    pub currency: Option<String>,
    pub limit_carbon_kg: Option<Decimal>,
    pub hard: bool,
    pub thresholds_pct: Vec<i32>,
}

/// Creates the budget, or replaces the one with this key; true if it was new.
pub async fn upsert(pool: &PgPool, b: &BudgetSpec) -> StoreResult<bool> {
    let new: bool = sqlx::query_scalar!(
        r#"INSERT INTO budgets (key, tenant_id, model_id, period, starts_at, ends_at, limit_kwh,
                              limit_cost, currency, limit_carbon_kg, hard, thresholds_pct)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
         ON CONFLICT (key) DO UPDATE SET tenant_id = EXCLUDED.tenant_id,
             model_id = EXCLUDED.model_id, period = EXCLUDED.period,
             starts_at = EXCLUDED.starts_at, ends_at = EXCLUDED.ends_at,
             limit_kwh = EXCLUDED.limit_kwh, limit_cost = EXCLUDED.limit_cost,
             currency = EXCLUDED.currency, limit_carbon_kg = EXCLUDED.limit_carbon_kg,
             hard = EXCLUDED.hard, thresholds_pct = EXCLUDED.thresholds_pct, updated_at = excluded.updated_at
         RETURNING (xmax = 0) AS "new!""#,
        &b.key,
        b.tenant_id,
        b.model_id,
        b.period.as_str(),
        b.starts_at,
        b.ends_at,
        b.limit_kwh,
        b.limit_cost,
        b.currency.as_deref(),
        b.limit_carbon_kg,
        b.hard,
        &b.thresholds_pct,
    )
    .fetch_one(pool)
    .await?;
    Ok(new)
}

/// The tenant a budget belongs to, for checking who may change it.
pub async fn tenant_of(pool: &PgPool, key: &str) -> StoreResult<Option<i64>> {
    Ok(
        sqlx::query_scalar!("SELECT tenant_id FROM budgets WHERE key = $1", key)
            .fetch_optional(pool)
            .await?,
    )
}

pub async fn delete(pool: &PgPool, key: &str) -> StoreResult<bool> {
    Ok(sqlx::query!("DELETE FROM budgets WHERE key = $1", key)
        .execute(pool)
        .await?
        .rows_affected()
        == 1)
}

/// A budget with its use over one period.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct BudgetState {
    pub id: i64,
    pub key: String,
    pub tenant_id: i64,
    pub tenant: String,
    pub model: Option<String>,
    pub period: BudgetPeriod,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
    pub limit_kwh: Option<Decimal>,
    pub limit_cost: Option<Decimal>,
    pub currency: Option<String>,
    pub limit_carbon_kg: Option<Decimal>,
    pub hard: bool,
    pub thresholds_pct: Vec<i32>,
    pub used_kwh: Decimal,
    pub used_cost: Decimal,
    pub used_carbon_kg: Decimal,
    pub recent_kwh: Decimal,
    pub recent_cost: Decimal,
    pub recent_carbon_kg: Decimal,
}

impl BudgetState {
    /// Each limit set (`kwh`, `cost`, `carbon_kg`) with its use, for alerts and projections;
    /// the burn rate's window is the last seven days, or as much of the period as passed.
    pub fn usages(&self, now: DateTime<Utc>) -> Vec<(BudgetMetric, Usage)> {
        let recent_s = (now - (now - Duration::days(7)).max(self.period_start)).num_seconds();
        [
            (
                BudgetMetric::Kwh,
                self.limit_kwh,
                self.used_kwh,
                self.recent_kwh,
            ),
            (
                BudgetMetric::Cost,
                self.limit_cost,
                self.used_cost,
                self.recent_cost,
            ),
            (
                BudgetMetric::CarbonKg,
                self.limit_carbon_kg,
                self.used_carbon_kg,
                self.recent_carbon_kg,
            ),
        ]
        .into_iter()
        .filter_map(|(metric, limit, used, recent)| {
            Some((
                metric,
                Usage {
                    limit: limit?,
                    used,
                    recent,
                    recent_s,
                    period_start: self.period_start,
                    period_end: self.period_end,
                },
            ))
        })
        .collect()
    }
}

/// Budgets with their use: `periods` is a CTE `b` of budget rows with `p_start` and
/// `p_end`; parameter `$recent` is where the burn rate's window starts. Both sums read the
/// tenant-day rollup for whole days and the ledger for the hours at either end (as
/// [`crate::usage::span_rows`] does), so a month's budget costs its days' rollup rows, not
/// its job-hours.
///
/// The ledger's edge hours are read per budget through the (tenant, hour) index on one
/// PostgreSQL (`citus` false: a lateral subquery), and as a join of the budgets' spans with
/// the ledger on Citus, which runs a correlated subquery only when it names the shard key.
/// The join alone made PostgreSQL hash the whole ledger twice per call (BENCHMARKS.md,
/// "Plain PostgreSQL before and after issue 45"), in every attribution transaction.
pub(crate) fn with_use(periods: &str, recent: usize, citus: bool) -> String {
    let (d0, d1) = crate::usage::whole_days("sp.p_from", "sp.p_to");
    let of = "l.tenant_id = sp.tenant_id AND (sp.model_id IS NULL OR l.model_id = sp.model_id)";
    let edge = |hours: &str| {
        if citus {
            format!("spans sp JOIN ledger l ON {of} AND {hours}")
        } else {
            // Summed per site inside, so that PostgreSQL keeps it a per-budget index scan
            // rather than pulling it up into the same hash join.
            format!(
                "spans sp CROSS JOIN LATERAL (
                     SELECT l.site_id, sum(l.total_mj) AS total_mj, sum(l.cost) AS cost,
                            sum(l.carbon_g) AS carbon_g
                     FROM ledger l WHERE {of} AND {hours} GROUP BY l.site_id) l"
            )
        }
    };
    format!(
        "WITH {periods}, bn AS (
             SELECT row_number() OVER () AS n, b.* FROM b
         ), sp AS (
             SELECT bn.n, w.which, bn.tenant_id, bn.model_id, bn.currency, w.p_from,
                    bn.p_end AS p_to
             FROM bn CROSS JOIN LATERAL (VALUES ('used', bn.p_start),
                                               ('recent', greatest(${recent}, bn.p_start))) w(which, p_from)
         ), spans AS (
             SELECT sp.*, {d0} AS d0, {d1} AS d1 FROM sp
         ), span_rows AS (
             SELECT sp.n, sp.which, sp.currency, l.site_id, l.total_mj, l.cost, l.carbon_g
             FROM spans sp JOIN usage_days l ON {of} AND l.day >= sp.d0 AND l.day < sp.d1
             UNION ALL
             SELECT sp.n, sp.which, sp.currency, l.site_id, l.total_mj, l.cost, l.carbon_g
             FROM {first}
             UNION ALL
             SELECT sp.n, sp.which, sp.currency, l.site_id, l.total_mj, l.cost, l.carbon_g
             FROM {last}
         ), totals AS (
             SELECT r.n, r.which, sum(r.total_mj) AS mj,
                    sum(r.cost) FILTER (WHERE s.currency = r.currency) AS cost,
                    sum(r.carbon_g) AS carbon_g
             FROM span_rows r JOIN sites s ON s.id = r.site_id
             GROUP BY r.n, r.which
         )
         SELECT b.id, b.key, b.tenant_id, t.key AS tenant, m.key AS model, b.period,
                b.p_start AS period_start, b.p_end AS period_end, b.limit_kwh, b.limit_cost,
                b.currency::text AS currency, b.limit_carbon_kg, b.hard, b.thresholds_pct,
                coalesce(u.mj, 0)::numeric / 3600000000 AS used_kwh,
                coalesce(u.cost, 0) AS used_cost,
                coalesce(u.carbon_g, 0) / 1000 AS used_carbon_kg,
                coalesce(r.mj, 0)::numeric / 3600000000 AS recent_kwh,
                coalesce(r.cost, 0) AS recent_cost,
                coalesce(r.carbon_g, 0) / 1000 AS recent_carbon_kg
         FROM bn b
         JOIN tenants t ON t.id = b.tenant_id
         LEFT JOIN models m ON m.id = b.model_id
         LEFT JOIN totals u ON u.n = b.n AND u.which = 'used'
         LEFT JOIN totals r ON r.n = b.n AND r.which = 'recent'
         ORDER BY t.key, b.key, b.p_start",
        first = edge("l.hour >= sp.p_from AND l.hour < least(sp.d0, sp.p_to)"),
        last = edge("l.hour >= greatest(sp.d0, sp.d1) AND l.hour < sp.p_to"),
    )
}

/// Budgets in `scope` (one by key, or all), each over the period containing `now` (a custom
/// budget: its own range).
pub async fn list(
    pool: &PgPool,
    scope: &Scope,
    key: Option<&str>,
    now: DateTime<Utc>,
) -> StoreResult<Vec<BudgetState>> {
    let periods = "b AS (
             SELECT b.*,
                    CASE WHEN period = 'month'
                         THEN date_trunc('month', $1 AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
                         ELSE b.starts_at END AS p_start,
                    CASE WHEN period = 'month'
                         THEN (date_trunc('month', $1 AT TIME ZONE 'UTC') + interval '1 month') AT TIME ZONE 'UTC'
                         ELSE b.ends_at END AS p_end
             FROM budgets b
             WHERE ($2::bigint IS NULL OR b.tenant_id = $2) AND ($3::text IS NULL OR b.key = $3)
         )";
    let citus = crate::distribution::is_citus(pool).await?;
    Ok(sqlx::query_as(&with_use(periods, 4, citus))
        .bind(now)
        .bind(scope.tenant())
        .bind(key)
        .bind(now - Duration::days(7))
        .fetch_all(pool)
        .await?)
}

/// An alert raised for a budget.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct EventRow {
    pub id: uuid::Uuid,
    /// The budget period it was raised in.
    pub period_start: DateTime<Utc>,
    pub metric: BudgetMetric,
    pub threshold: String,
    pub used: Decimal,
    pub limit_value: Decimal,
    pub projected_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// Alerts raised for a budget `scope` may see, in the period starting at `period_start` (or
/// in every period), oldest first.
pub async fn events(
    pool: &PgPool,
    scope: &Scope,
    budget_id: i64,
    period_start: Option<DateTime<Utc>>,
) -> StoreResult<Vec<EventRow>> {
    Ok(sqlx::query_as!(
        EventRow,
        r#"SELECT e.id, e.period_start, e.metric AS "metric: BudgetMetric", e.threshold, e.used, e.limit_value,
                e.projected_at, e.created_at
         FROM budget_events e JOIN budgets b ON b.id = e.budget_id
         WHERE e.budget_id = $1 AND ($2::timestamptz IS NULL OR e.period_start = $2)
           AND ($3::bigint IS NULL OR b.tenant_id = $3)
         ORDER BY e.period_start, e.created_at, e.id"#,
        budget_id,
        period_start,
        scope.tenant(),
    )
    .fetch_all(pool)
    .await?)
}
