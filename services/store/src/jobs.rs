//! Jobs and their GPU allocations, upserted by stable scheduler key.
//!
//! A job belongs to one site (its GPUs'), and its allocations and token records carry it:
//! keyed by site, they shard with the site's samples and ledger (migration 0029). A key
//! names one job fleet-wide, which the database holds per site only: the writer
//! (`app::ingest::jobs`) checks it under a lock on each key ([`lock_keys`]).

use crate::usage::{Coverage, COVERAGE_SUMS, ENERGY_SUMS};
use crate::{Scope, StoreError, StoreResult};
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use sqlx::{PgConnection, PgPool};
use std::collections::HashMap;
use wattledger_domain::badput::EndState;
use wattledger_domain::breakdown::EnergyBreakdown;
use wattledger_domain::job_kind::JobKind;
use wattledger_domain::phase::Phase;
use wattledger_domain::priority::Priority;

#[derive(Debug, Clone)]
pub struct JobRecord {
    pub key: String,
    pub site_id: i64,
    pub name: String,
    pub tenant_id: i64,
    pub model_id: Option<i64>,
    /// The model key the job named when no such model is registered (migration 0039).
    pub unknown_model: Option<String>,
    /// The serving phase of a disaggregated deployment's pool (`domain::phase`).
    pub phase: Option<Phase>,
    pub kind: JobKind,
    pub priority: Priority,
    pub submit_at: Option<DateTime<Utc>>,
    pub start_at: DateTime<Utc>,
    pub end_at: Option<DateTime<Utc>>,
    pub end_state: Option<EndState>,
    pub last_checkpoint_at: Option<DateTime<Utc>>,
    /// The key of the job this one repeats, at the same site.
    pub requeue_of: Option<String>,
    pub restarts: i32,
    pub allocations: Vec<AllocationRecord>,
}

#[derive(Debug, Clone)]
pub struct AllocationRecord {
    pub meter_id: i64,
    pub share: Decimal,
    pub start_at: DateTime<Utc>,
    pub end_at: Option<DateTime<Utc>>,
}

/// Takes each key's lock for the rest of the transaction, in key order, so that two batches
/// of the same keys queue rather than deadlock.
pub async fn lock_keys(conn: &mut PgConnection, keys: &[String]) -> StoreResult<()> {
    sqlx::query!(
        "SELECT pg_advisory_xact_lock(hashtextextended(k, 0))
         FROM (SELECT DISTINCT k FROM unnest($1::text[]) k ORDER BY k) x",
        keys,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Inserts the jobs, or updates those whose fields differ; the ids of those inserted or
/// changed. A job's end state, checkpoint and phase are among its fields: a change
/// re-attributes its hours (badput, which of its tokens count). The attempt a job repeats is named by key, and resolved at the job's site
/// once the whole batch is written, so the original may come earlier in the same batch.
pub async fn write_jobs(conn: &mut PgConnection, records: &[JobRecord]) -> StoreResult<Vec<i64>> {
    let changed = sqlx::query_scalar!(
        "INSERT INTO jobs (key, site_id, name, tenant_id, model_id, kind, priority, submit_at,
                           start_at, end_at, end_state, last_checkpoint_at, restarts, phase,
                           unknown_model)
         SELECT * FROM UNNEST($1::text[], $10::bigint[], $2::text[], $3::bigint[], $4::bigint[],
                              $5::text[], $6::text[], $7::timestamptz[], $8::timestamptz[],
                              $9::timestamptz[], $11::text[], $12::timestamptz[], $13::int[],
                              $14::text[], $15::text[])
         ON CONFLICT (site_id, key) DO UPDATE SET name = excluded.name, tenant_id = excluded.tenant_id,
            model_id = excluded.model_id, kind = excluded.kind, priority = excluded.priority,
            submit_at = excluded.submit_at, start_at = excluded.start_at, end_at = excluded.end_at,
            end_state = excluded.end_state, last_checkpoint_at = excluded.last_checkpoint_at,
            restarts = excluded.restarts, phase = excluded.phase,
            unknown_model = excluded.unknown_model, updated_at = excluded.updated_at
         WHERE (jobs.name, jobs.tenant_id, jobs.model_id, jobs.kind, jobs.priority,
                jobs.submit_at, jobs.start_at, jobs.end_at, jobs.end_state,
                jobs.last_checkpoint_at, jobs.restarts, jobs.phase, jobs.unknown_model)
               IS DISTINCT FROM (excluded.name, excluded.tenant_id, excluded.model_id, excluded.kind,
                excluded.priority, excluded.submit_at, excluded.start_at, excluded.end_at,
                excluded.end_state, excluded.last_checkpoint_at, excluded.restarts,
                excluded.phase, excluded.unknown_model)
         RETURNING id",
        &records.iter().map(|r| r.key.clone()).collect::<Vec<_>>(),
        &records.iter().map(|r| r.name.clone()).collect::<Vec<_>>(),
        &records.iter().map(|r| r.tenant_id).collect::<Vec<_>>(),
        &records.iter().map(|r| r.model_id).collect::<Vec<_>>() as &[Option<i64>],
        &records.iter().map(|r| r.kind.as_str()).collect::<Vec<_>>() as &[&str],
        &records.iter().map(|r| r.priority.as_str()).collect::<Vec<_>>() as &[&str],
        &records.iter().map(|r| r.submit_at).collect::<Vec<_>>() as &[Option<DateTime<Utc>>],
        &records.iter().map(|r| r.start_at).collect::<Vec<_>>(),
        &records.iter().map(|r| r.end_at).collect::<Vec<_>>() as &[Option<DateTime<Utc>>],
        &records.iter().map(|r| r.site_id).collect::<Vec<_>>(),
        &records.iter().map(|r| r.end_state.map(|e| e.as_str())).collect::<Vec<_>>() as &[Option<&str>],
        &records.iter().map(|r| r.last_checkpoint_at).collect::<Vec<_>>() as &[Option<DateTime<Utc>>],
        &records.iter().map(|r| r.restarts).collect::<Vec<_>>(),
        &records.iter().map(|r| r.phase.map(|p| p.as_str())).collect::<Vec<_>>() as &[Option<&str>],
        &records.iter().map(|r| r.unknown_model.clone()).collect::<Vec<_>>() as &[Option<String>],
    )
    .fetch_all(&mut *conn)
    .await?;
    // The link is bookkeeping, not a figure: setting it changes no hour.
    sqlx::query!(
        "UPDATE jobs j SET requeue_of = o.id
         FROM UNNEST($1::text[], $2::bigint[], $3::text[]) AS t(key, site_id, original)
         LEFT JOIN jobs o ON o.site_id = t.site_id AND o.key = t.original
         WHERE j.site_id = t.site_id AND j.key = t.key AND j.requeue_of IS DISTINCT FROM o.id",
        &records.iter().map(|r| r.key.clone()).collect::<Vec<_>>(),
        &records.iter().map(|r| r.site_id).collect::<Vec<_>>(),
        &records
            .iter()
            .map(|r| r.requeue_of.clone())
            .collect::<Vec<_>>() as &[Option<String>],
    )
    .execute(conn)
    .await?;
    Ok(changed)
}

/// An allocation the write inserted or changed: its span now, and before if it existed.
#[derive(Debug, Clone)]
pub struct ChangedAllocation {
    pub meter_id: i64,
    pub start_at: DateTime<Utc>,
    pub end_at: Option<DateTime<Utc>>,
    /// `None` when it is new; `Some(end)` (an open end as `Some(None)`) when it existed.
    pub old_end_at: Option<Option<DateTime<Utc>>>,
}

/// Inserts the jobs' allocations, or updates those whose share or end differ; each changed
/// one with its old span. `job_ids` maps the records' keys to their jobs' ids.
pub async fn write_allocations(
    conn: &mut PgConnection,
    records: &[JobRecord],
    job_ids: &HashMap<String, i64>,
) -> StoreResult<Vec<ChangedAllocation>> {
    let mut a_site = Vec::new();
    let mut a_job = Vec::new();
    let mut a_meter = Vec::new();
    let mut a_share = Vec::new();
    let mut a_start = Vec::new();
    let mut a_end = Vec::new();
    for r in records {
        for a in &r.allocations {
            a_site.push(r.site_id);
            a_job.push(job_ids[&r.key]);
            a_meter.push(a.meter_id);
            a_share.push(a.share);
            a_start.push(a.start_at);
            a_end.push(a.end_at.or(r.end_at));
        }
    }
    // What was stored is read before the upsert, in a statement of its own: a distributed
    // PostgreSQL runs a writing CTE before the rest of its statement.
    let old = sqlx::query!(
        r#"SELECT a.site_id, a.job_id, a.meter_id, a.start_at, a.end_at FROM allocations a
         JOIN UNNEST($4::bigint[], $1::bigint[], $2::bigint[], $3::timestamptz[])
              AS i(site_id, job_id, meter_id, start_at) USING (site_id, job_id, meter_id, start_at)"#,
        &a_job,
        &a_meter,
        &a_start,
        &a_site,
    )
    .fetch_all(&mut *conn)
    .await?;
    // (site, job, meter, start) → the stored end.
    let old: std::collections::HashMap<AllocationKey, Option<DateTime<Utc>>> = old
        .into_iter()
        .map(|o| ((o.site_id, o.job_id, o.meter_id, o.start_at), o.end_at))
        .collect();
    let up = sqlx::query!(
        "INSERT INTO allocations (site_id, job_id, meter_id, share, start_at, end_at)
         SELECT * FROM UNNEST($6::bigint[], $1::bigint[], $2::bigint[], $3::numeric[],
                              $4::timestamptz[], $5::timestamptz[])
         ON CONFLICT (site_id, job_id, meter_id, start_at) DO UPDATE SET share = excluded.share,
            end_at = excluded.end_at, updated_at = excluded.updated_at
         WHERE (allocations.share, allocations.end_at) IS DISTINCT FROM (excluded.share, excluded.end_at)
         RETURNING site_id, job_id, meter_id, start_at, end_at",
        &a_job,
        &a_meter,
        &a_share,
        &a_start,
        &a_end as &[Option<DateTime<Utc>>],
        &a_site,
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(up
        .into_iter()
        .map(|r| ChangedAllocation {
            meter_id: r.meter_id,
            start_at: r.start_at,
            end_at: r.end_at,
            old_end_at: old
                .get(&(r.site_id, r.job_id, r.meter_id, r.start_at))
                .copied(),
        })
        .collect())
}

/// An allocation's key: site, job, meter and start.
type AllocationKey = (i64, i64, i64, DateTime<Utc>);

/// A GPU's span held by a job: `[start_at, end_at)`, open while the job runs.
#[derive(Debug, Clone)]
pub struct AllocationSpan {
    pub meter_id: i64,
    pub start_at: DateTime<Utc>,
    pub end_at: Option<DateTime<Utc>>,
}

/// Every allocation of these jobs.
pub async fn allocation_spans(
    conn: &mut PgConnection,
    job_ids: &[i64],
) -> StoreResult<Vec<AllocationSpan>> {
    Ok(sqlx::query_as!(
        AllocationSpan,
        "SELECT meter_id, start_at, end_at FROM allocations WHERE job_id = ANY($1)",
        job_ids,
    )
    .fetch_all(conn)
    .await?)
}

/// The ids of the jobs of these keys.
pub async fn ids_by_key(
    conn: &mut PgConnection,
    keys: &[String],
) -> StoreResult<HashMap<String, i64>> {
    Ok(
        sqlx::query!("SELECT key, id FROM jobs WHERE key = ANY($1)", keys)
            .fetch_all(conn)
            .await?
            .into_iter()
            .map(|r| (r.key, r.id))
            .collect(),
    )
}

/// A stored job's id and site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobRef {
    pub id: i64,
    pub site_id: i64,
}

/// The stored jobs of these keys.
pub async fn by_key<'e>(
    db: impl sqlx::PgExecutor<'e>,
    keys: &[String],
) -> StoreResult<std::collections::HashMap<String, JobRef>> {
    Ok(sqlx::query!(
        "SELECT key, id, site_id FROM jobs WHERE key = ANY($1)",
        keys
    )
    .fetch_all(db)
    .await?
    .into_iter()
    .map(|r| {
        let job = JobRef {
            id: r.id,
            site_id: r.site_id,
        };
        (r.key, job)
    })
    .collect())
}

/// A job with its ledger rows summed, as the jobs API shows it (with its figures).
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobRow {
    #[serde(skip)]
    pub id: i64,
    pub key: String,
    pub name: String,
    pub tenant: String,
    pub model: Option<String>,
    /// The serving phase of a disaggregated deployment's pool; absent for any other job.
    pub phase: Option<Phase>,
    pub kind: JobKind,
    pub priority: Priority,
    pub submit_at: Option<DateTime<Utc>>,
    pub start_at: DateTime<Utc>,
    pub end_at: Option<DateTime<Utc>>,
    /// How the job ended, as its scheduler said; absent while it runs or if it did not say.
    pub end_state: Option<EndState>,
    pub last_checkpoint_at: Option<DateTime<Utc>>,
    /// The key of the attempt this job repeats.
    pub requeue_of: Option<String>,
    pub restarts: i32,
    #[sqlx(flatten)]
    #[serde(flatten)]
    pub energy: EnergyBreakdown,
    /// The part of the energy spent after the last checkpoint of a job that then lost its
    /// work (`domain::badput`).
    pub badput_mj: i64,
    pub prompt_tokens: i64,
    pub generated_tokens: i64,
    /// What the job's figures rest on (its tenant's share only, for a tenant scope); the API
    /// shows it as the figures' data quality.
    #[sqlx(flatten)]
    #[serde(skip)]
    pub coverage: Coverage,
}

/// A job with its ledger rows summed: only the scope's tenant's rows for a tenant scope.
fn job_select() -> String {
    format!(
        "SELECT j.id, j.key, j.name, t.key AS tenant, m.key AS model, j.phase, j.kind, j.priority,
                j.submit_at, j.start_at, j.end_at, j.end_state, j.last_checkpoint_at,
                o.key AS requeue_of, j.restarts,
                coalesce(sum(l.total_mj), 0)::bigint AS total_mj, {ENERGY_SUMS},
                coalesce(sum(l.badput_mj), 0)::bigint AS badput_mj,
                coalesce(sum(l.prompt_tokens), 0)::bigint AS prompt_tokens,
                coalesce(sum(l.generated_tokens), 0)::bigint AS generated_tokens, {COVERAGE_SUMS}
         FROM jobs j
         JOIN tenants t ON t.id = j.tenant_id
         LEFT JOIN models m ON m.id = j.model_id
         LEFT JOIN jobs o ON o.site_id = j.site_id AND o.id = j.requeue_of
         LEFT JOIN ledger_rows l ON l.site_id = j.site_id AND l.job_id = j.id AND ($1::bigint IS NULL OR l.tenant_id = $1)"
    )
}

/// One job by key, if `scope` may see it: its own tenant's, or one that served the tenant
/// tokens (a shared endpoint shows a tenant only its own share).
pub async fn get(pool: &PgPool, scope: &Scope, key: &str) -> StoreResult<JobRow> {
    let sql = format!(
        "{} WHERE j.key = $2 AND ($1::bigint IS NULL OR j.tenant_id = $1
            OR EXISTS (SELECT 1 FROM ledger x WHERE x.site_id = j.site_id AND x.job_id = j.id AND x.tenant_id = $1))
         GROUP BY j.site_id, j.id, t.key, m.key, o.key",
        job_select()
    );
    sqlx::query_as(&sql)
        .bind(scope.tenant())
        .bind(key)
        .fetch_optional(pool)
        .await?
        .ok_or(StoreError::NotFound)
}

/// The id of the job `key` if `scope` may see it (its tenant's, or one that served the
/// tenant): another tenant's job and a job that does not exist look the same.
pub async fn visible_id(pool: &PgPool, scope: &Scope, key: &str) -> StoreResult<Option<i64>> {
    Ok(sqlx::query_scalar!(
        "SELECT j.id FROM jobs j WHERE j.key = $2 AND ($1::bigint IS NULL OR j.tenant_id = $1
             OR EXISTS (SELECT 1 FROM ledger x WHERE x.site_id = j.site_id AND x.job_id = j.id AND x.tenant_id = $1))",
        scope.tenant(),
        key,
    )
    .fetch_optional(pool)
    .await?)
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
        "{} WHERE j.start_at < $3 AND (j.end_at IS NULL OR j.end_at >= $2)
            AND ($1::bigint IS NULL OR j.tenant_id = $1
                 OR EXISTS (SELECT 1 FROM ledger x WHERE x.site_id = j.site_id AND x.job_id = j.id AND x.tenant_id = $1))
         GROUP BY j.site_id, j.id, t.key, m.key, o.key ORDER BY total_mj DESC, j.key LIMIT $4",
        job_select()
    );
    Ok(sqlx::query_as(&sql)
        .bind(scope.tenant())
        .bind(from)
        .bind(to)
        .bind(limit)
        .fetch_all(pool)
        .await?)
}

/// One hour of a job's ledger, summed over the tenants `scope` may see.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct JobHour {
    pub hour: DateTime<Utc>,
    #[sqlx(flatten)]
    pub energy: EnergyBreakdown,
    pub gpu_ms: i64,
    pub prompt_tokens: i64,
    pub generated_tokens: i64,
    pub cost: Option<rust_decimal::Decimal>,
    pub carbon_g: Option<rust_decimal::Decimal>,
    pub embodied_carbon_g: Option<rust_decimal::Decimal>,
    /// Data-quality flags of any of the hour's rows.
    pub flags: Vec<String>,
    /// The site's billing currency (a job runs at one site).
    pub currency: String,
}

/// A job's ledger hour by hour (its tenant's share only, for a tenant scope).
pub async fn hours(pool: &PgPool, scope: &Scope, job_id: i64) -> StoreResult<Vec<JobHour>> {
    let sql = format!(
        "WITH rows AS (
             SELECT l.*, s.currency::text AS currency FROM ledger l JOIN sites s ON s.id = l.site_id
             WHERE l.job_id = $2 AND ($1::bigint IS NULL OR l.tenant_id = $1)
         ), flags AS (
             SELECT hour, array_agg(DISTINCT f ORDER BY f) AS flags
             FROM rows, unnest(rows.flags) AS f GROUP BY hour
         )
         SELECT l.hour, {ENERGY_SUMS},
                sum(gpu_ms)::bigint AS gpu_ms, sum(prompt_tokens)::bigint AS prompt_tokens,
                sum(generated_tokens)::bigint AS generated_tokens, sum(cost) AS cost,
                sum(carbon_g) AS carbon_g, sum(embodied_carbon_g) AS embodied_carbon_g,
                coalesce(f.flags, '{{}}') AS flags, min(l.currency) AS currency
         FROM rows l LEFT JOIN flags f ON f.hour = l.hour
         GROUP BY l.hour, f.flags ORDER BY l.hour"
    );
    Ok(sqlx::query_as(&sql)
        .bind(scope.tenant())
        .bind(job_id)
        .fetch_all(pool)
        .await?)
}

/// The GPUs (or MIG instances) a job held.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct HeldGpu {
    pub meter: String,
    pub gpu_uuid: Option<String>,
    pub device_model: Option<String>,
    pub mig_profile: Option<String>,
    pub share: rust_decimal::Decimal,
    pub start_at: DateTime<Utc>,
    pub end_at: Option<DateTime<Utc>>,
}

/// The GPUs a job `scope` may see held (a shared endpoint's, for a tenant it served).
pub async fn allocations(pool: &PgPool, scope: &Scope, job_id: i64) -> StoreResult<Vec<HeldGpu>> {
    Ok(sqlx::query_as!(
        HeldGpu,
        "SELECT m.key AS meter, coalesce(m.gpu_uuid, p.gpu_uuid) AS gpu_uuid,
                coalesce(m.device_model, p.device_model) AS device_model, m.mig_profile,
                a.share, a.start_at, a.end_at
         FROM allocations a JOIN meters m ON m.id = a.meter_id
         JOIN jobs j ON j.site_id = a.site_id AND j.id = a.job_id
         LEFT JOIN meters p ON p.id = m.parent_id AND m.kind = 'mig'
         WHERE a.job_id = $1 AND ($2::bigint IS NULL OR j.tenant_id = $2
             OR EXISTS (SELECT 1 FROM ledger x WHERE x.site_id = j.site_id AND x.job_id = j.id AND x.tenant_id = $2))
         ORDER BY m.key, a.start_at",
        job_id,
        scope.tenant(),
    )
    .fetch_all(pool)
    .await?)
}

/// Gives the jobs that named one of these models before it was registered their model; the
/// jobs that took one.
pub async fn adopt_models(conn: &mut PgConnection, keys: &[String]) -> StoreResult<Vec<i64>> {
    Ok(sqlx::query_scalar!(
        "UPDATE jobs j SET model_id = m.id, unknown_model = NULL, updated_at = now()
         FROM models m
         WHERE m.key = ANY($1) AND j.unknown_model = m.key
         RETURNING j.id",
        keys
    )
    .fetch_all(conn)
    .await?)
}

/// A model key jobs name that is not registered, with how many jobs name it and when the
/// first and last of them started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownModel {
    pub key: String,
    pub jobs: i64,
    pub first_start: DateTime<Utc>,
    pub last_start: DateTime<Utc>,
}

/// How many jobs name a model nobody registered, under how many names: an operator's gauge,
/// unlabelled since the names are whatever pods carry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnknownModelCount {
    pub jobs: i64,
    pub names: i64,
}

pub async fn unknown_model_count(pool: &sqlx::PgPool) -> StoreResult<UnknownModelCount> {
    // Grouped first, counted after: the partial index serves the group, and a distributed
    // PostgreSQL plans it as the operator page's list is planned.
    Ok(sqlx::query_as!(
        UnknownModelCount,
        r#"SELECT coalesce(sum(n), 0)::bigint AS "jobs!", count(*) AS "names!"
           FROM (SELECT unknown_model, count(*) AS n FROM jobs
                 WHERE unknown_model IS NOT NULL GROUP BY unknown_model) g"#
    )
    .fetch_one(pool)
    .await?)
}

/// The model keys jobs name that are not registered, most named first (at most 100).
pub async fn unknown_models(pool: &sqlx::PgPool) -> StoreResult<Vec<UnknownModel>> {
    Ok(sqlx::query_as!(
        UnknownModel,
        r#"SELECT unknown_model AS "key!", count(*) AS "jobs!", min(start_at) AS "first_start!",
                  max(start_at) AS "last_start!"
           FROM jobs WHERE unknown_model IS NOT NULL
           GROUP BY unknown_model ORDER BY 2 DESC, 1 LIMIT 100"#
    )
    .fetch_all(pool)
    .await?)
}
