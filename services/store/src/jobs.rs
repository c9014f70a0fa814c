//! Jobs and their GPU allocations, upserted by stable scheduler key.

use crate::{dirty, Scope, StoreError, StoreResult};
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use sqlx::PgPool;

#[derive(Debug, Clone)]
pub struct JobRecord {
    pub key: String,
    pub name: String,
    pub tenant_id: i64,
    pub model_id: Option<i64>,
    pub kind: String,
    pub priority: String,
    pub submit_at: Option<DateTime<Utc>>,
    pub start_at: DateTime<Utc>,
    pub end_at: Option<DateTime<Utc>>,
    pub allocations: Vec<AllocationRecord>,
}

#[derive(Debug, Clone)]
pub struct AllocationRecord {
    pub meter_id: i64,
    pub share: Decimal,
    pub start_at: DateTime<Utc>,
    pub end_at: Option<DateTime<Utc>>,
}

/// Upserts jobs and their allocations in one transaction, and marks dirty every hour that
/// an allocation covers now or covered before the change.
#[tracing::instrument(skip_all, fields(n = records.len()))]
pub async fn upsert(pool: &PgPool, records: &[JobRecord], now: DateTime<Utc>) -> StoreResult<u64> {
    let mut tx = pool.begin().await?;
    let ids: Vec<(i64, bool)> = sqlx::query_as(
        "INSERT INTO jobs (key, name, tenant_id, model_id, kind, priority, submit_at, start_at, end_at)
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::text[],
                              $6::text[], $7::timestamptz[], $8::timestamptz[], $9::timestamptz[])
         ON CONFLICT (key) DO UPDATE SET name = excluded.name, tenant_id = excluded.tenant_id,
            model_id = excluded.model_id, kind = excluded.kind, priority = excluded.priority,
            submit_at = excluded.submit_at, start_at = excluded.start_at, end_at = excluded.end_at,
            updated_at = now()
         WHERE (jobs.name, jobs.tenant_id, jobs.model_id, jobs.kind, jobs.priority,
                jobs.submit_at, jobs.start_at, jobs.end_at)
               IS DISTINCT FROM (excluded.name, excluded.tenant_id, excluded.model_id, excluded.kind,
                excluded.priority, excluded.submit_at, excluded.start_at, excluded.end_at)
         RETURNING id, (xmax = 0) AS inserted",
    )
    .bind(records.iter().map(|r| r.key.clone()).collect::<Vec<_>>())
    .bind(records.iter().map(|r| r.name.clone()).collect::<Vec<_>>())
    .bind(records.iter().map(|r| r.tenant_id).collect::<Vec<_>>())
    .bind(records.iter().map(|r| r.model_id).collect::<Vec<_>>())
    .bind(records.iter().map(|r| r.kind.clone()).collect::<Vec<_>>())
    .bind(records.iter().map(|r| r.priority.clone()).collect::<Vec<_>>())
    .bind(records.iter().map(|r| r.submit_at).collect::<Vec<_>>())
    .bind(records.iter().map(|r| r.start_at).collect::<Vec<_>>())
    .bind(records.iter().map(|r| r.end_at).collect::<Vec<_>>())
    .fetch_all(&mut *tx)
    .await?;
    let changed_jobs = ids.len() as u64;

    let keys: Vec<String> = records.iter().map(|r| r.key.clone()).collect();
    let job_ids: std::collections::HashMap<String, i64> =
        sqlx::query_as::<_, (String, i64)>("SELECT key, id FROM jobs WHERE key = ANY($1)")
            .bind(&keys)
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .collect();

    let mut a_job = Vec::new();
    let mut a_meter = Vec::new();
    let mut a_share = Vec::new();
    let mut a_start = Vec::new();
    let mut a_end = Vec::new();
    for r in records {
        for a in &r.allocations {
            a_job.push(job_ids[&r.key]);
            a_meter.push(a.meter_id);
            a_share.push(a.share);
            a_start.push(a.start_at);
            a_end.push(a.end_at.or(r.end_at));
        }
    }
    // Allocations that change report their old and new spans, so both get recomputed.
    type Changed = (
        i64,
        DateTime<Utc>,
        Option<DateTime<Utc>>,
        bool,
        Option<DateTime<Utc>>,
    );
    let changed: Vec<Changed> =
        sqlx::query_as(
            "WITH input AS (
                 SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::numeric[], $4::timestamptz[], $5::timestamptz[])
                     AS t(job_id, meter_id, share, start_at, end_at)
             ), old AS (
                 SELECT a.job_id, a.meter_id, a.start_at, a.end_at FROM allocations a
                 JOIN input i USING (job_id, meter_id, start_at)
             ), up AS (
                 INSERT INTO allocations (job_id, meter_id, share, start_at, end_at)
                 SELECT * FROM input
                 ON CONFLICT (job_id, meter_id, start_at) DO UPDATE SET share = excluded.share,
                    end_at = excluded.end_at, updated_at = now()
                 WHERE (allocations.share, allocations.end_at) IS DISTINCT FROM (excluded.share, excluded.end_at)
                 RETURNING job_id, meter_id, start_at, end_at
             )
             SELECT up.meter_id, up.start_at, up.end_at, old.job_id IS NOT NULL, old.end_at FROM up
             LEFT JOIN old USING (job_id, meter_id, start_at)",
        )
        .bind(&a_job)
        .bind(&a_meter)
        .bind(&a_share)
        .bind(&a_start)
        .bind(&a_end)
        .fetch_all(&mut *tx)
        .await?;

    // Jobs whose own fields changed (tenant, model) re-dirty all their allocations.
    let changed_job_ids: Vec<i64> = ids.iter().map(|(id, _)| *id).collect();
    let job_spans: Vec<(i64, DateTime<Utc>, Option<DateTime<Utc>>)> =
        sqlx::query_as("SELECT meter_id, start_at, end_at FROM allocations WHERE job_id = ANY($1)")
            .bind(&changed_job_ids)
            .fetch_all(&mut *tx)
            .await?;

    let mut m = Vec::new();
    let mut from = Vec::new();
    let mut to = Vec::new();
    for (meter, start, end, existed, old_end) in changed {
        // Recompute the allocation's span before and after the change; an open end runs to now.
        let mut end = end.unwrap_or(now);
        if existed {
            end = end.max(old_end.unwrap_or(now));
        }
        m.push(meter);
        from.push(start);
        to.push(end.max(start));
    }
    for (meter, start, end) in job_spans {
        m.push(meter);
        from.push(start);
        to.push(end.unwrap_or(now).max(start));
    }
    if !m.is_empty() {
        dirty::mark_for_intervals(&mut tx, &m, &from, &to).await?;
    }
    tx.commit().await?;
    Ok(changed_jobs + m.len() as u64)
}

#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct JobRow {
    pub id: i64,
    pub key: String,
    pub name: String,
    pub tenant: String,
    pub model: Option<String>,
    pub kind: String,
    pub priority: String,
    pub submit_at: Option<DateTime<Utc>>,
    pub start_at: DateTime<Utc>,
    pub end_at: Option<DateTime<Utc>>,
    pub total_mj: i64,
    pub prompt_tokens: i64,
    pub generated_tokens: i64,
}

const JOB_SELECT: &str = "
    SELECT j.id, j.key, j.name, t.key AS tenant, m.key AS model, j.kind, j.priority,
           j.submit_at, j.start_at, j.end_at,
           coalesce(sum(l.total_mj) FILTER (WHERE $1::bigint IS NULL OR l.tenant_id = $1), 0)::bigint AS total_mj,
           coalesce(sum(l.prompt_tokens) FILTER (WHERE $1::bigint IS NULL OR l.tenant_id = $1), 0)::bigint AS prompt_tokens,
           coalesce(sum(l.generated_tokens) FILTER (WHERE $1::bigint IS NULL OR l.tenant_id = $1), 0)::bigint AS generated_tokens
    FROM jobs j
    JOIN tenants t ON t.id = j.tenant_id
    LEFT JOIN models m ON m.id = j.model_id
    LEFT JOIN ledger l ON l.job_id = j.id";

/// One job by key, if `scope` may see it: its own tenant's, or one that served the tenant
/// tokens (a shared endpoint shows a tenant only its own share).
pub async fn get(pool: &PgPool, scope: &Scope, key: &str) -> StoreResult<JobRow> {
    if key.contains('\0') {
        return Err(StoreError::NotFound);
    }
    let sql = format!(
        "{JOB_SELECT} WHERE j.key = $2 AND ($1::bigint IS NULL OR j.tenant_id = $1
            OR EXISTS (SELECT 1 FROM ledger x WHERE x.job_id = j.id AND x.tenant_id = $1))
         GROUP BY j.id, t.key, m.key"
    );
    sqlx::query_as(&sql)
        .bind(scope.tenant())
        .bind(key)
        .fetch_optional(pool)
        .await?
        .ok_or(StoreError::NotFound)
}

/// Jobs visible to `scope` that ran in `[from, to)`, biggest energy first.
pub async fn list(
    pool: &PgPool,
    scope: &Scope,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    limit: i64,
) -> StoreResult<Vec<JobRow>> {
    let sql = format!(
        "{JOB_SELECT} WHERE j.start_at < $3 AND (j.end_at IS NULL OR j.end_at >= $2)
            AND ($1::bigint IS NULL OR j.tenant_id = $1
                 OR EXISTS (SELECT 1 FROM ledger x WHERE x.job_id = j.id AND x.tenant_id = $1))
         GROUP BY j.id, t.key, m.key ORDER BY total_mj DESC, j.key LIMIT $4"
    );
    Ok(sqlx::query_as(&sql)
        .bind(scope.tenant())
        .bind(from)
        .bind(to)
        .bind(limit)
        .fetch_all(pool)
        .await?)
}
