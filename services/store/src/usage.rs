//! Usage queries over the ledger, grouped by any of tenant, job, model, site, day or hour.

use crate::{Scope, StoreResult};
use chrono::{DateTime, Utc};
use sqlx::PgPool;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupBy {
    Tenant,
    Job,
    Model,
    Site,
    Day,
    Hour,
}

impl GroupBy {
    pub fn parse(s: &str) -> Option<GroupBy> {
        Some(match s {
            "tenant" => GroupBy::Tenant,
            "job" => GroupBy::Job,
            "model" => GroupBy::Model,
            "site" => GroupBy::Site,
            "day" => GroupBy::Day,
            "hour" => GroupBy::Hour,
            _ => return None,
        })
    }

    /// The SQL expression of the key; a closed set, never user text.
    fn expr(self) -> &'static str {
        match self {
            GroupBy::Tenant => "t.key",
            GroupBy::Job => "j.key",
            GroupBy::Model => "m.key",
            GroupBy::Site => "s.key",
            GroupBy::Day => "date_trunc('day', l.hour)",
            GroupBy::Hour => "l.hour",
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct UsageFilter {
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    pub site_id: Option<i64>,
    pub job_id: Option<i64>,
    pub model_id: Option<i64>,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct UsageRow {
    pub tenant: Option<String>,
    pub job: Option<String>,
    pub model: Option<String>,
    pub site: Option<String>,
    pub period: Option<DateTime<Utc>>,
    pub total_mj: i64,
    pub gpu_mj: i64,
    pub node_overhead_mj: i64,
    pub idle_mj: i64,
    pub facility_overhead_mj: i64,
    pub estimated_mj: i64,
    pub prompt_tokens: i64,
    pub generated_tokens: i64,
    pub gpu_ms: i64,
}

/// Ledger totals visible to `scope`, grouped by `group_by` (in that order).
#[tracing::instrument(skip_all)]
pub async fn usage(
    pool: &PgPool,
    scope: &Scope,
    group_by: &[GroupBy],
    filter: &UsageFilter,
) -> StoreResult<Vec<UsageRow>> {
    let key = |g: GroupBy, alias: &str, cast: &str| {
        if group_by.contains(&g) {
            format!("{}{cast} AS {alias}", g.expr())
        } else {
            format!("NULL{cast} AS {alias}")
        }
    };
    let keys: Vec<&str> = group_by.iter().map(|g| g.expr()).collect();
    let period = if group_by.contains(&GroupBy::Hour) {
        key(GroupBy::Hour, "period", "::timestamptz")
    } else {
        key(GroupBy::Day, "period", "::timestamptz")
    };
    let group = if keys.is_empty() {
        String::new()
    } else {
        format!("GROUP BY {}", keys.join(", "))
    };
    let order = if keys.is_empty() {
        String::new()
    } else {
        format!(
            "ORDER BY {}",
            (1..=5)
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let sql = format!(
        "SELECT {}, {}, {}, {}, {period},
                coalesce(sum(l.total_mj), 0)::bigint AS total_mj,
                coalesce(sum(l.gpu_mj), 0)::bigint AS gpu_mj,
                coalesce(sum(l.node_overhead_mj), 0)::bigint AS node_overhead_mj,
                coalesce(sum(l.idle_mj), 0)::bigint AS idle_mj,
                coalesce(sum(l.facility_overhead_mj), 0)::bigint AS facility_overhead_mj,
                coalesce(sum(l.estimated_mj), 0)::bigint AS estimated_mj,
                coalesce(sum(l.prompt_tokens), 0)::bigint AS prompt_tokens,
                coalesce(sum(l.generated_tokens), 0)::bigint AS generated_tokens,
                coalesce(sum(l.gpu_ms), 0)::bigint AS gpu_ms
         FROM ledger l
         JOIN tenants t ON t.id = l.tenant_id
         JOIN sites s ON s.id = l.site_id
         LEFT JOIN jobs j ON j.id = l.job_id
         LEFT JOIN models m ON m.id = l.model_id
         WHERE ($1::bigint IS NULL OR l.tenant_id = $1)
           AND ($2::timestamptz IS NULL OR l.hour >= $2)
           AND ($3::timestamptz IS NULL OR l.hour < $3)
           AND ($4::bigint IS NULL OR l.site_id = $4)
           AND ($5::bigint IS NULL OR l.job_id = $5)
           AND ($6::bigint IS NULL OR l.model_id = $6)
         {group} {order}",
        key(GroupBy::Tenant, "tenant", "::text"),
        key(GroupBy::Job, "job", "::text"),
        key(GroupBy::Model, "model", "::text"),
        key(GroupBy::Site, "site", "::text"),
    );
    Ok(sqlx::query_as(&sql)
        .bind(scope.tenant())
        .bind(filter.from)
        .bind(filter.to)
        .bind(filter.site_id)
        .bind(filter.job_id)
        .bind(filter.model_id)
        .fetch_all(pool)
        .await?)
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SiteTotals {
    pub site: String,
    pub period: Option<DateTime<Utc>>,
    pub site_mj: i64,
    pub it_mj: i64,
    pub gpu_mj: i64,
    pub idle_mj: i64,
    pub estimated_mj: i64,
    pub allocated_gpu_ms: i64,
    pub capacity_gpu_ms: i64,
    pub hours: i64,
}

/// Per-site meter totals from `site_hours` (the PUE/ITUE/TUE inputs), per hour or per day
/// if `per` is given.
pub async fn site_totals(
    pool: &PgPool,
    filter: &UsageFilter,
    per: Option<GroupBy>,
) -> StoreResult<Vec<SiteTotals>> {
    let period = match per {
        Some(GroupBy::Hour) => "h.hour",
        Some(GroupBy::Day) => "date_trunc('day', h.hour)",
        _ => "NULL::timestamptz",
    };
    let sql = format!(
        "SELECT s.key AS site, {period} AS period,
                sum(h.site_mj)::bigint AS site_mj, sum(h.it_mj)::bigint AS it_mj,
                sum(h.gpu_mj)::bigint AS gpu_mj, sum(h.idle_mj)::bigint AS idle_mj,
                sum(h.estimated_mj)::bigint AS estimated_mj,
                sum(h.allocated_gpu_ms)::bigint AS allocated_gpu_ms,
                sum(h.capacity_gpu_ms)::bigint AS capacity_gpu_ms, count(*) AS hours
         FROM site_hours h JOIN sites s ON s.id = h.site_id
         WHERE ($1::timestamptz IS NULL OR h.hour >= $1)
           AND ($2::timestamptz IS NULL OR h.hour < $2)
           AND ($3::bigint IS NULL OR h.site_id = $3)
         GROUP BY 1, 2 ORDER BY 1, 2"
    );
    Ok(sqlx::query_as(&sql)
        .bind(filter.from)
        .bind(filter.to)
        .bind(filter.site_id)
        .fetch_all(pool)
        .await?)
}
