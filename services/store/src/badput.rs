//! The jobs that lost the most work: their badput in a range, for the tenant and operator
//! pages (`domain::badput` says what badput is; the ledger carries it per row).

use crate::usage::{sites_read, span_rows, Rollup};
use crate::{Scope, StoreResult};
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use sqlx::PgPool;
use wattledger_domain::badput::EndState;

/// One job's loss over a range: its badput, the energy it is part of, and its cost (in the
/// job's site's currency) and carbon.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Loss {
    pub job: String,
    pub tenant: String,
    pub end_state: Option<EndState>,
    pub last_checkpoint_at: Option<DateTime<Utc>>,
    pub badput_mj: i64,
    pub total_mj: i64,
    pub badput_cost: Option<Decimal>,
    pub currency: String,
    pub badput_carbon_g: Option<Decimal>,
}

/// The `limit` jobs with the most badput in `[from, to)` that `scope` sees (a tenant: its own
/// rows), optionally at one site; most badput first. Summed from the job-day rollup (the
/// ledger at the range's edges), each job's sums before its name and end state are joined:
/// a tenant's few thousand jobs, not a join to every job of the site.
pub async fn losses(
    pool: &PgPool,
    scope: &Scope,
    site_id: Option<i64>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    limit: i64,
) -> StoreResult<Vec<Loss>> {
    let span = span_rows(Rollup::JobDays, "$1", "$2", "$3", "$4::bigint[]");
    let sql = format!(
        "SELECT j.key AS job, t.key AS tenant, j.end_state, j.last_checkpoint_at,
                x.badput_mj, x.total_mj, x.badput_cost, s.currency::text AS currency,
                x.badput_carbon_g
         FROM (SELECT l.site_id, l.job_id, l.tenant_id,
                      sum(l.badput_mj)::bigint AS badput_mj, sum(l.total_mj)::bigint AS total_mj,
                      sum(l.badput_cost) AS badput_cost, sum(l.badput_carbon_g) AS badput_carbon_g
               FROM ({span}) l
               WHERE l.job_id IS NOT NULL
               GROUP BY l.site_id, l.job_id, l.tenant_id
               HAVING sum(l.badput_mj) > 0) x
         JOIN jobs j ON j.site_id = x.site_id AND j.id = x.job_id
         JOIN tenants t ON t.id = x.tenant_id
         JOIN sites s ON s.id = x.site_id
         ORDER BY x.badput_mj DESC, j.key, t.key
         LIMIT $5"
    );
    Ok(sqlx::query_as(&sql)
        .bind(scope.tenant())
        .bind(from)
        .bind(to)
        .bind(sites_read(pool, site_id).await?)
        .bind(limit)
        .fetch_all(pool)
        .await?)
}
