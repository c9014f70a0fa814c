//! The jobs that lost the most work: their badput in a range, for the tenant and operator
//! pages (`domain::badput` says what badput is; the ledger carries it per row).

use crate::{Scope, StoreResult};
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use sqlx::PgPool;
use wattledger_domain::badput::EndState;

/// One job's loss over a range: its badput, the energy it is part of, and its cost (in the
/// job's site's currency) and carbon.
#[derive(Debug, Clone, PartialEq)]
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
/// rows), optionally at one site; most badput first.
pub async fn losses(
    pool: &PgPool,
    scope: &Scope,
    site_id: Option<i64>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    limit: i64,
) -> StoreResult<Vec<Loss>> {
    Ok(sqlx::query_as!(
        Loss,
        r#"SELECT j.key AS job, t.key AS tenant, j.end_state AS "end_state: EndState",
                  j.last_checkpoint_at,
                  sum(l.badput_mj)::bigint AS "badput_mj!", sum(l.total_mj)::bigint AS "total_mj!",
                  sum(l.badput_cost) AS badput_cost, s.currency::text AS "currency!",
                  sum(l.badput_carbon_g) AS badput_carbon_g
           FROM ledger l
           JOIN jobs j ON j.site_id = l.site_id AND j.id = l.job_id
           JOIN tenants t ON t.id = l.tenant_id
           JOIN sites s ON s.id = l.site_id
           WHERE ($1::bigint IS NULL OR l.tenant_id = $1) AND l.hour >= $2 AND l.hour < $3
             AND ($4::bigint IS NULL OR l.site_id = $4)
           GROUP BY j.site_id, j.id, t.key, s.currency
           HAVING sum(l.badput_mj) > 0
           ORDER BY sum(l.badput_mj) DESC, j.key
           LIMIT $5"#,
        scope.tenant(),
        from,
        to,
        site_id,
        limit,
    )
    .fetch_all(pool)
    .await?)
}
