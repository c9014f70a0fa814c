//! Admission's reads and writes: what the in-memory admission state is loaded from (sites,
//! their draw, forecasts, contracted clean energy, reservations, budgets with what they used,
//! policies, learned job draw), the tenants' policies as they are replaced, and the decisions
//! it writes and lists.

use crate::{signals, Scope, StoreResult};
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde_json::Value;
use sqlx::PgPool;
use std::collections::HashMap;
use uuid::Uuid;
use wattledger_domain::admission::Verdict;
use wattledger_domain::cfe::Delivery;
use wattledger_domain::job_kind::JobKind;
use wattledger_domain::meter_kind::MeterKind;
use wattledger_domain::priority::Priority;
use wattledger_domain::signals::{Basis, Signal, SignalKind};

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SiteRow {
    pub id: i64,
    pub key: String,
    pub envelope_w: i64,
    pub pue: Decimal,
    pub currency: String,
    pub grid_region: String,
    pub price_region: String,
}

pub async fn sites(pool: &PgPool) -> StoreResult<Vec<SiteRow>> {
    Ok(sqlx::query_as!(
        SiteRow,
        r#"SELECT id, key, power_envelope_w AS envelope_w, static_pue AS pue,
                currency::text AS "currency!", grid_region,
                coalesce(price_region, grid_region) AS "price_region!"
         FROM sites ORDER BY id"#,
    )
    .fetch_all(pool)
    .await?)
}

/// Each site's draw at `at` from the last 10 minutes of samples (admission's
/// `envelope::MEASURED_OVER`), W: its facility meters where
/// they report, else its nodes × PUE, else its GPUs × PUE. A meter's power is the highest
/// step peak it sent in those minutes (a minute's mean hides a training job's synchronous
/// swings, and the envelope must hold the swings), else its latest reading, else the slope
/// of its last two energy counters. Summing each meter's own peak bounds the site's
/// coincident peak from above: the safe side for an envelope.
///
/// The meters are those whose newest sample (`meter_heads`) is that recent, each read through
/// the samples' key: `ts` is not a prefix of it, so a read by time alone scans the whole
/// month's partition of every site (measured: 210 ms on a 1,280-GPU fleet-day, against the
/// probes' few ms, and a month's partition is thirty times that).
pub async fn site_draw(pool: &PgPool, at: DateTime<Utc>) -> StoreResult<HashMap<i64, i64>> {
    let rows = sqlx::query!(
        r#"WITH recent AS (
             SELECT meter_id, ts, counter_mj, power_mw,
                    max(peak_mw) OVER (PARTITION BY site_id, meter_id) AS peak_mw,
                    row_number() OVER (PARTITION BY site_id, meter_id ORDER BY ts DESC) AS n
             FROM (SELECT s.* FROM meter_heads h JOIN samples s
                       ON s.site_id = h.site_id AND s.meter_id = h.meter_id AND NOT s.raw
                          AND s.ts > $1::timestamptz - interval '10 minutes' AND s.ts <= $1
                   WHERE h.last_ts > $1::timestamptz - interval '10 minutes'
                   UNION ALL
                   SELECT s.* FROM meter_heads h JOIN samples s
                       ON s.site_id = h.site_id AND s.meter_id = h.meter_id AND s.raw
                          AND s.ts > $1::timestamptz - interval '10 minutes' AND s.ts <= $1
                   WHERE h.last_ts > $1::timestamptz - interval '10 minutes') s
         ), per_meter AS (
             SELECT a.meter_id, coalesce(a.peak_mw, a.power_mw,
                 CASE WHEN b.ts IS NOT NULL AND a.counter_mj >= b.counter_mj
                      THEN (a.counter_mj - b.counter_mj) * 1000
                           / greatest(1, (extract(epoch FROM a.ts - b.ts) * 1000)::bigint) END) AS mw
             FROM recent a LEFT JOIN recent b ON b.meter_id = a.meter_id AND b.n = 2
             WHERE a.n = 1
         )
         SELECT m.site_id, m.kind AS "kind: MeterKind", (sum(p.mw) / 1000)::bigint AS "w!", s.static_pue
         FROM per_meter p JOIN meters m ON m.id = p.meter_id JOIN sites s ON s.id = m.site_id
         WHERE p.mw IS NOT NULL AND m.kind IN ('facility', 'node', 'gpu')
         GROUP BY m.site_id, m.kind, s.static_pue"#,
        at,
    )
    .fetch_all(pool)
    .await?;
    // Per site: the facility, node and GPU meters' draw (the query reads no MIG meters).
    let mut by_site: HashMap<i64, [Option<i64>; 3]> = HashMap::new();
    let mut pue: HashMap<i64, Decimal> = HashMap::new();
    for r in rows {
        let slot = (r.kind as usize).min(2);
        by_site.entry(r.site_id).or_default()[slot] = Some(r.w);
        pue.insert(r.site_id, r.static_pue);
    }
    Ok(by_site
        .into_iter()
        .filter_map(|(site, [facility, node, gpu])| {
            let scaled = |w: i64| {
                let v = (Decimal::from(w) * pue[&site]).round();
                i64::try_from(v.mantissa()).ok()
            };
            let w = facility
                .or_else(|| node.and_then(scaled))
                .or_else(|| gpu.and_then(scaled))?;
            Some((site, w))
        })
        .collect())
}

/// One signal point for a forecast: (region, signal, start, end, value), actuals preferred
/// over forecasts and the newest received first, for the caller to keep the first of each
/// start.
#[derive(Debug, Clone)]
pub struct SignalPoint {
    pub region: String,
    pub signal: Signal,
    pub start_at: DateTime<Utc>,
    pub end_at: DateTime<Utc>,
    pub value: Decimal,
}

pub async fn signal_points(
    pool: &PgPool,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> StoreResult<Vec<SignalPoint>> {
    let rows = sqlx::query!(
        r#"SELECT DISTINCT ON (region, signal, basis, start_at)
                region, signal AS "signal: SignalKind", basis, start_at, end_at, value
         FROM signal_points WHERE end_at > $1 AND start_at < $2
         ORDER BY region, signal, basis, start_at, status = 'forecast', received_at DESC"#,
        from,
        to,
    )
    .fetch_all(pool)
    .await?;
    let points = rows
        .into_iter()
        .map(|r| {
            Ok(SignalPoint {
                signal: signals::signal_of(r.signal, &r.basis)?,
                region: r.region,
                start_at: r.start_at,
                end_at: r.end_at,
                value: r.value,
            })
        })
        .collect::<Result<_, sqlx::Error>>()?;
    Ok(points)
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ReservationRow {
    pub id: Uuid,
    pub site_id: i64,
    pub tenant_id: i64,
    pub start_at: DateTime<Utc>,
    pub end_at: DateTime<Utc>,
    pub reserved_w: i64,
    /// Estimated kWh, cost (site currency) and average kg CO2e at `start_at`.
    pub kwh: Option<Decimal>,
    pub cost: Option<Decimal>,
    pub currency: Option<String>,
    pub carbon_kg: Option<Decimal>,
    pub model_id: Option<i64>,
    pub joined: bool,
}

/// Admitted and deferred jobs expected to end after `ends_after`: the envelope takes those
/// still running or due; budgets take those not yet joined to a job (their energy is not in
/// the ledger yet). With `decided_after`, only the decisions taken since (an incremental
/// reload).
pub async fn reservations(
    pool: &PgPool,
    scope: &Scope,
    ends_after: DateTime<Utc>,
    decided_after: Option<DateTime<Utc>>,
) -> StoreResult<Vec<ReservationRow>> {
    Ok(sqlx::query_as!(
        ReservationRow,
        // Rejections have no site, start or draw; the rest always do.
        r#"SELECT d.id, d.site_id AS "site_id!", d.tenant_id, d.start_at AS "start_at!",
                d.end_at AS "end_at!", d.reserved_w AS "reserved_w!",
                d.est_kwh AS kwh, d.est_cost AS cost, d.est_currency AS currency,
                d.est_carbon_kg AS carbon_kg, m.id AS "model_id?",
                d.job_id IS NOT NULL AS "joined!"
         FROM admission_decisions d
         LEFT JOIN models m ON m.key = d.model
         WHERE d.decision <> 'reject' AND d.end_at > $1
           AND ($2::timestamptz IS NULL OR d.decided_at > $2)
           AND ($3::bigint IS NULL OR d.tenant_id = $3)"#,
        ends_after,
        decided_after,
        scope.tenant(),
    )
    .fetch_all(pool)
    .await?)
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PolicyRow {
    pub tenant_id: i64,
    pub threshold_pct: Decimal,
    pub carbon_weight: Decimal,
    /// Weight of the run's carbon-free share against carbon and price (migration 0033).
    pub cfe_weight: Decimal,
    pub basis: Basis,
    pub bypass_priorities: Vec<Priority>,
    pub budget_bypass_priorities: Vec<Priority>,
}

pub async fn policies(pool: &PgPool, scope: &Scope) -> StoreResult<Vec<PolicyRow>> {
    Ok(sqlx::query_as!(
        PolicyRow,
        r#"SELECT tenant_id, threshold_pct, carbon_weight, cfe_weight, basis AS "basis: Basis",
                bypass_priorities AS "bypass_priorities: Vec<Priority>",
                budget_bypass_priorities AS "budget_bypass_priorities: Vec<Priority>"
         FROM admission_policies
         WHERE ($1::bigint IS NULL OR tenant_id = $1)"#,
        scope.tenant(),
    )
    .fetch_all(pool)
    .await?)
}

/// Replaces a tenant's policy (`tenant_id` names it); the row as stored.
pub async fn put_policy(pool: &PgPool, p: &PolicyRow) -> StoreResult<PolicyRow> {
    let names = |ps: &[Priority]| ps.iter().map(|p| p.as_str().to_owned()).collect::<Vec<_>>();
    Ok(sqlx::query_as!(
        PolicyRow,
        r#"INSERT INTO admission_policies (tenant_id, threshold_pct, carbon_weight, cfe_weight,
               basis, bypass_priorities, budget_bypass_priorities, updated_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7, now())
           ON CONFLICT (tenant_id) DO UPDATE SET threshold_pct = excluded.threshold_pct,
               carbon_weight = excluded.carbon_weight, cfe_weight = excluded.cfe_weight,
               basis = excluded.basis, bypass_priorities = excluded.bypass_priorities,
               budget_bypass_priorities = excluded.budget_bypass_priorities, updated_at = excluded.updated_at
           RETURNING tenant_id, threshold_pct, carbon_weight, cfe_weight, basis AS "basis: Basis",
               bypass_priorities AS "bypass_priorities: Vec<Priority>",
               budget_bypass_priorities AS "budget_bypass_priorities: Vec<Priority>""#,
        p.tenant_id,
        p.threshold_pct,
        p.carbon_weight,
        p.cfe_weight,
        p.basis.as_str(),
        &names(&p.bypass_priorities),
        &names(&p.budget_bypass_priorities),
    )
    .fetch_one(pool)
    .await?)
}

/// Each site's contracted clean energy delivered over `[from, to)` (deliveries that overlap
/// it, whole), by site id: what admission weighs a run's carbon-free share with.
pub async fn clean_energy(
    pool: &PgPool,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> StoreResult<HashMap<i64, Vec<Delivery>>> {
    let rows = sqlx::query!(
        "SELECT site_id, start_at, end_at, energy_mj FROM site_clean_energy
         WHERE start_at < $2 AND end_at > $1 ORDER BY site_id, start_at, source",
        from,
        to,
    )
    .fetch_all(pool)
    .await?;
    let mut by_site: HashMap<i64, Vec<Delivery>> = HashMap::new();
    for r in rows {
        by_site.entry(r.site_id).or_default().push(Delivery {
            from_ms: r.start_at.timestamp_millis(),
            to_ms: r.end_at.timestamp_millis(),
            mj: r.energy_mj,
        });
    }
    Ok(by_site)
}

/// Tenants by key.
pub async fn tenants(pool: &PgPool, scope: &Scope) -> StoreResult<HashMap<String, i64>> {
    let rows = sqlx::query!(
        "SELECT key, id FROM tenants WHERE ($1::bigint IS NULL OR id = $1)",
        scope.tenant(),
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|r| (r.key, r.id)).collect())
}

/// A tenant's learned IT draw per allocated GPU (its node share included), W, per model
/// (None: all its jobs of that kind) and job kind, over the ledger since `since`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct LearnedDraw {
    pub tenant_id: i64,
    pub model: Option<String>,
    pub kind: JobKind,
    pub gpu_draw_w: i64,
}

pub async fn learned_draw(
    pool: &PgPool,
    scope: &Scope,
    since: DateTime<Utc>,
) -> StoreResult<Vec<LearnedDraw>> {
    Ok(sqlx::query_as!(
        LearnedDraw,
        // The sums per tenant, model and kind first (each shard's own on a distributed
        // PostgreSQL, which runs no GROUPING SETS over its tables), then the sets over those.
        r#"WITH per AS MATERIALIZED (
             SELECT l.tenant_id, m.key AS model, j.kind,
                    sum(l.gpu_mj + l.node_overhead_mj) AS mj, sum(l.gpu_ms) AS ms
             FROM ledger l JOIN jobs j ON j.site_id = l.site_id AND j.id = l.job_id
             LEFT JOIN models m ON m.id = l.model_id
             WHERE l.hour >= $1 AND ($2::bigint IS NULL OR l.tenant_id = $2)
             GROUP BY l.tenant_id, m.key, j.kind
         )
         SELECT tenant_id AS "tenant_id!", model AS "model?", kind AS "kind!: JobKind",
                (sum(mj) * 1000 / sum(ms))::bigint AS "gpu_draw_w!"
         FROM per
         GROUP BY GROUPING SETS ((tenant_id, model, kind), (tenant_id, kind))
         HAVING sum(ms) > 0"#,
        since,
        scope.tenant(),
    )
    .fetch_all(pool)
    .await?)
}

/// Device models' typical draw, W, under every name of each: its key and its aliases (a
/// request may name the model as its collectors report it).
pub async fn typical_draw(pool: &PgPool) -> StoreResult<HashMap<String, i64>> {
    let rows = sqlx::query!(
        r#"SELECT n.name AS "name!", d.typical_power_w AS "w!"
           FROM device_model_names n JOIN device_models d ON d.key = n.device_model
           WHERE d.typical_power_w IS NOT NULL"#,
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|r| (r.name, i64::from(r.w))).collect())
}

#[derive(Debug, Clone)]
pub struct NewDecision {
    pub id: Uuid,
    pub decided_at: DateTime<Utc>,
    pub tenant_id: i64,
    pub source: String,
    pub job_name: String,
    pub job_key: Option<String>,
    pub kind: JobKind,
    pub priority: Priority,
    pub gpus: i32,
    pub decision: Verdict,
    pub site_id: Option<i64>,
    pub start_at: Option<DateTime<Utc>>,
    pub end_at: Option<DateTime<Utc>>,
    pub reserved_w: Option<i64>,
    /// The AI model the job runs (its key), for budgets per model.
    pub model: Option<String>,
    /// The estimate at the start taken, counted against budgets until the job is joined.
    pub est_kwh: Option<Decimal>,
    pub est_cost: Option<Decimal>,
    pub est_currency: Option<String>,
    pub est_carbon_kg: Option<Decimal>,
    /// The grid event a flexible job was moved out of, and the energy it moved (mJ).
    pub grid_event_id: Option<i64>,
    pub moved_mj: Option<i64>,
    /// The question and the answer as JSON text (sent as text and stored as jsonb: no
    /// intermediate document is built).
    pub request: String,
    pub answer: String,
    /// The asker's `Idempotency-Key`: one decision per tenant and key.
    pub idempotency_key: Option<String>,
}

/// Writes decisions in one statement; a decision already written (a retry) is left as it is.
pub async fn insert_decisions(pool: &PgPool, rows: &[NewDecision]) -> StoreResult<u64> {
    if rows.is_empty() {
        return Ok(0);
    }
    let mut q = sqlx::QueryBuilder::new(
        "INSERT INTO admission_decisions (id, decided_at, tenant_id, source, job_name, job_key,
             kind, priority, gpus, decision, site_id, start_at, end_at, reserved_w, model,
             est_kwh, est_cost, est_currency, est_carbon_kg, grid_event_id, moved_mj, request,
             answer, idempotency_key) ",
    );
    q.push_values(rows, |mut b, r| {
        b.push_bind(r.id)
            .push_bind(r.decided_at)
            .push_bind(r.tenant_id)
            .push_bind(&r.source)
            .push_bind(&r.job_name)
            .push_bind(&r.job_key)
            .push_bind(r.kind)
            .push_bind(&r.priority)
            .push_bind(r.gpus)
            .push_bind(r.decision)
            .push_bind(r.site_id)
            .push_bind(r.start_at)
            .push_bind(r.end_at)
            .push_bind(r.reserved_w)
            .push_bind(&r.model)
            .push_bind(r.est_kwh)
            .push_bind(r.est_cost)
            .push_bind(&r.est_currency)
            .push_bind(r.est_carbon_kg)
            .push_bind(r.grid_event_id)
            .push_bind(r.moved_mj)
            .push_bind(&r.request)
            .push_unseparated("::jsonb")
            .push_bind(&r.answer)
            .push_unseparated("::jsonb")
            .push_bind(&r.idempotency_key);
    });
    // A decision already stored (a retried batch), or another replica's for the same tenant
    // and key (both decided it at once): the first stored stands.
    q.push(" ON CONFLICT DO NOTHING");
    Ok(q.build().execute(pool).await?.rows_affected())
}

/// The decision stored under `tenant`'s idempotency `key`: its answer's JSON, and whether it
/// answered the question `request` (its JSON) or another.
pub async fn decision_by_key(
    pool: &PgPool,
    tenant: &str,
    key: &str,
    request: &str,
) -> StoreResult<Option<(String, bool)>> {
    Ok(sqlx::query!(
        r#"SELECT d.answer::text AS "answer!", d.request = $3::text::jsonb AS "same!"
           FROM admission_decisions d JOIN tenants t ON t.id = d.tenant_id
           WHERE t.key = $1 AND d.idempotency_key = $2"#,
        tenant,
        key,
        request,
    )
    .fetch_optional(pool)
    .await?
    .map(|r| (r.answer, r.same)))
}

/// Keeps a decision the database would not store, as escaped JSON text, with the reason.
pub async fn dead_letter_decision(
    pool: &PgPool,
    row: &NewDecision,
    error: &str,
) -> StoreResult<()> {
    // serde_json escapes every control character, NUL included: the text is storable
    // whatever the decision held.
    let record = serde_json::json!({
        "id": row.id, "decided_at": row.decided_at, "tenant_id": row.tenant_id,
        "source": row.source, "job_name": row.job_name, "job_key": row.job_key,
        "kind": row.kind, "priority": row.priority, "gpus": row.gpus,
        "decision": row.decision, "site_id": row.site_id, "model": row.model,
        "request": row.request, "answer": row.answer,
    })
    .to_string();
    let error: String = error.chars().filter(|c| *c != '\0').collect();
    sqlx::query!(
        "INSERT INTO admission_dead_letters (decision_id, decided_at, record, error)
         VALUES ($1, $2, $3, $4) ON CONFLICT (decision_id) DO NOTHING",
        row.id,
        row.decided_at,
        record,
        error,
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Decisions kept as dead letters.
pub async fn dead_letters(pool: &PgPool) -> StoreResult<i64> {
    Ok(
        sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM admission_dead_letters"#)
            .fetch_one(pool)
            .await?,
    )
}

/// Joins decisions to the jobs they became: by job key where the scheduler knew it at
/// submission (Kubernetes), else (Slurm, which numbers a job only after its submit plugin
/// ran) the tenant's job of the same name submitted within 10 s of the decision, nearest
/// first, each job joined once.
///
/// Each join is found by a read of the open decisions against the jobs, then written to the
/// decisions alone: on a distributed PostgreSQL the decisions stay on the coordinator and
/// the jobs are sharded, and a statement may read both but write only where it reads alone.
pub async fn join_decisions(pool: &PgPool) -> StoreResult<u64> {
    let by_key = sqlx::query!(
        r#"WITH d AS MATERIALIZED (
             SELECT id, job_key FROM admission_decisions
             WHERE job_id IS NULL AND decision <> 'reject' AND job_key IS NOT NULL
         )
         SELECT d.id AS "decision_id!", j.id AS "job_id!" FROM d JOIN jobs j ON j.key = d.job_key"#,
    )
    .fetch_all(pool)
    .await?;
    let by_key = sqlx::query!(
        "UPDATE admission_decisions d SET job_id = u.job_id
         FROM UNNEST($1::uuid[], $2::bigint[]) AS u(id, job_id)
         WHERE d.id = u.id AND d.job_id IS NULL",
        &by_key.iter().map(|r| r.decision_id).collect::<Vec<_>>(),
        &by_key.iter().map(|r| r.job_id).collect::<Vec<_>>(),
    )
    .execute(pool)
    .await?
    .rows_affected();
    let near = sqlx::query!(
        r#"WITH d AS MATERIALIZED (
             SELECT id, tenant_id, job_name, decided_at FROM admission_decisions
             WHERE job_id IS NULL AND decision <> 'reject' AND job_key IS NULL
               AND decided_at > now() - interval '30 days'
         )
         SELECT j.id AS "job_id!", d.id AS "decision_id!",
                abs(extract(epoch FROM j.submit_at - d.decided_at) * 1000000)::bigint AS "gap_us!"
         FROM d JOIN jobs j ON j.tenant_id = d.tenant_id AND j.name = d.job_name
              AND j.submit_at BETWEEN d.decided_at - interval '10 seconds'
                                  AND d.decided_at + interval '10 seconds'"#,
    )
    .fetch_all(pool)
    .await?;
    let by_submission = sqlx::query!(
        "WITH c AS (
             SELECT * FROM UNNEST($1::bigint[], $2::uuid[], $3::bigint[]) AS c(job_id, decision_id, gap_us)
             WHERE NOT EXISTS (SELECT 1 FROM admission_decisions o WHERE o.job_id = c.job_id)
         ), nearest AS (
             SELECT DISTINCT ON (job_id) job_id, decision_id FROM c ORDER BY job_id, gap_us
         ), one AS (
             SELECT DISTINCT ON (decision_id) decision_id, job_id FROM nearest
             ORDER BY decision_id, job_id
         )
         UPDATE admission_decisions d SET job_id = one.job_id FROM one
         WHERE d.id = one.decision_id AND d.job_id IS NULL",
        &near.iter().map(|r| r.job_id).collect::<Vec<_>>(),
        &near.iter().map(|r| r.decision_id).collect::<Vec<_>>(),
        &near.iter().map(|r| r.gap_us).collect::<Vec<_>>(),
    )
    .execute(pool)
    .await?
    .rows_affected();
    Ok(by_key + by_submission)
}

/// A stored decision, as the decisions API lists it.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = DecisionView))]
pub struct DecisionRow {
    pub id: Uuid,
    pub decided_at: DateTime<Utc>,
    pub tenant: String,
    /// `api`, `slurm`, `kubernetes`, `kueue` or a scheduler's own name.
    pub source: String,
    pub job_name: String,
    pub decision: Verdict,
    pub site: Option<String>,
    pub start_at: Option<DateTime<Utc>>,
    /// The answer as given (reasons, estimates, budgets, power).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub answer: Value,
    /// The job it became, once a scheduler reported it.
    #[serde(rename = "job")]
    pub job_key: Option<String>,
    /// What the job's ledger rows say it used, once it ran.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub actual_kwh: Option<Decimal>,
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub actual_cost: Option<Decimal>,
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub actual_carbon_kg: Option<Decimal>,
}

#[derive(Debug, Clone, Default)]
pub struct DecisionFilter {
    pub decision: Option<Verdict>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    /// Decisions strictly older than this one (keyset paging, newest first).
    pub before: Option<(DateTime<Utc>, Uuid)>,
    pub limit: i64,
}

/// Decisions the scope may read, newest first, with the joined job's actual figures.
pub async fn list_decisions(
    pool: &PgPool,
    scope: Scope,
    filter: &DecisionFilter,
) -> StoreResult<Vec<DecisionRow>> {
    let (before_at, before_id) = filter.before.unzip();
    Ok(sqlx::query_as!(
        DecisionRow,
        // The page of decisions first (they stay on the coordinator), then their jobs and
        // what those used, looked up by id among the sharded jobs and ledger.
        r#"WITH page AS MATERIALIZED (
             SELECT d.* FROM admission_decisions d
             WHERE ($1::bigint IS NULL OR d.tenant_id = $1)
               AND ($2::text IS NULL OR d.decision = $2)
               AND ($3::timestamptz IS NULL OR d.decided_at >= $3)
               AND ($4::timestamptz IS NULL OR d.decided_at < $4)
               AND ($5::timestamptz IS NULL OR (d.decided_at, d.id) < ($5, $6))
             ORDER BY d.decided_at DESC, d.id DESC
             LIMIT $7
         ), their_jobs AS MATERIALIZED (
             SELECT j.site_id, j.id, j.key FROM jobs j
             WHERE j.id IN (SELECT job_id FROM page WHERE job_id IS NOT NULL)
         ), used AS MATERIALIZED (
             SELECT l.job_id, sum(l.total_mj) AS mj, sum(l.cost) AS cost, sum(l.carbon_g) AS carbon_g
             FROM ledger l
             WHERE (l.site_id, l.job_id) IN (SELECT site_id, id FROM their_jobs)
             GROUP BY l.job_id
         )
         SELECT d.id AS "id!", d.decided_at AS "decided_at!", t.key AS tenant,
                d.source AS "source!", d.job_name AS "job_name!",
                d.decision AS "decision!: Verdict",
                s.key AS "site?", d.start_at, d.answer AS "answer!", j.key AS "job_key?",
                a.mj::numeric / 3600000000 AS actual_kwh, a.cost AS actual_cost,
                a.carbon_g / 1000 AS actual_carbon_kg
         FROM page d
         JOIN tenants t ON t.id = d.tenant_id
         LEFT JOIN sites s ON s.id = d.site_id
         LEFT JOIN their_jobs j ON j.id = d.job_id
         LEFT JOIN used a ON a.job_id = d.job_id
         ORDER BY d.decided_at DESC, d.id DESC"#,
        scope.tenant(),
        filter.decision.map(Verdict::as_str),
        filter.from,
        filter.to,
        before_at,
        before_id,
        filter.limit,
    )
    .fetch_all(pool)
    .await?)
}

/// Why admission deferred a job, as its stored decision shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DeferredFor {
    /// Moved out of a grid event's window (demand response): the decision names the event.
    GridEvent,
    /// A later hour was estimated cleaner (carbon), cheaper (price), or both.
    Cleaner,
    Cheaper,
    CleanerAndCheaper,
    /// Nothing was estimated saved: the job waited for power headroom at its site.
    Headroom,
}

impl DeferredFor {
    fn parse(s: &str) -> Option<DeferredFor> {
        Some(match s {
            "grid_event" => DeferredFor::GridEvent,
            "cleaner" => DeferredFor::Cleaner,
            "cheaper" => DeferredFor::Cheaper,
            "cleaner_cheaper" => DeferredFor::CleanerAndCheaper,
            "headroom" => DeferredFor::Headroom,
            _ => return None,
        })
    }
}

/// A tenant's jobs deferred in `[from, to)` for one reason (and, out of an event, one
/// event), with what they were estimated to save at decision time.
#[derive(Debug, Clone, PartialEq)]
pub struct Deferred {
    pub reason: DeferredFor,
    /// The grid event's key, for [`DeferredFor::GridEvent`].
    pub event: Option<String>,
    pub jobs: i64,
    pub carbon_marginal_kg: Option<Decimal>,
    pub carbon_average_kg: Option<Decimal>,
    /// Per currency: the sites' currencies of the deferred jobs.
    pub costs: Vec<(String, Decimal)>,
    /// What the jobs would have drawn in the event's window, mJ.
    pub moved_mj: i64,
}

/// The tenant's deferred jobs of `[from, to)` by reason: an event's first (its key), then
/// carbon, price, both, and waiting for headroom. A decision's reason is what it recorded:
/// the event it was moved out of, else the savings it was estimated to make (positive carbon,
/// positive cost), else none — a job that only waited for the envelope.
pub async fn deferrals(
    pool: &PgPool,
    scope: &Scope,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> StoreResult<Vec<Deferred>> {
    #[derive(sqlx::FromRow)]
    struct Row {
        reason: String,
        event: Option<String>,
        currency: Option<String>,
        jobs: i64,
        marginal: Option<Decimal>,
        average: Option<Decimal>,
        cost: Option<Decimal>,
        moved_mj: i64,
    }
    let rows: Vec<Row> = sqlx::query_as(
        r#"WITH d AS (
                 SELECT d.est_currency, g.key AS event, coalesce(d.moved_mj, 0) AS moved_mj,
                        (d.answer #>> '{savings,carbon_marginal_kg}')::numeric AS marginal,
                        (d.answer #>> '{savings,carbon_average_kg}')::numeric AS average,
                        (d.answer #>> '{savings,cost}')::numeric AS cost
                 FROM admission_decisions d LEFT JOIN grid_events g ON g.id = d.grid_event_id
                 WHERE ($1::bigint IS NULL OR d.tenant_id = $1) AND d.decided_at >= $2
                   AND d.decided_at < $3 AND d.decision = 'defer'
               ), why AS (
                 SELECT *, CASE
                     WHEN event IS NOT NULL THEN 'grid_event'
                     WHEN (marginal > 0 OR average > 0) AND cost > 0 THEN 'cleaner_cheaper'
                     WHEN marginal > 0 OR average > 0 THEN 'cleaner'
                     WHEN cost > 0 THEN 'cheaper'
                     ELSE 'headroom' END AS reason
                 FROM d
               )
               SELECT reason, event, est_currency AS currency, count(*) AS jobs,
                      sum(marginal) AS marginal, sum(average) AS average, sum(cost) AS cost,
                      sum(moved_mj)::bigint AS moved_mj
               FROM why GROUP BY reason, event, est_currency ORDER BY est_currency"#,
    )
    .bind(scope.tenant())
    .bind(from)
    .bind(to)
    .fetch_all(pool)
    .await?;
    let mut out: Vec<Deferred> = Vec::new();
    for Row {
        reason,
        event,
        currency,
        jobs,
        marginal,
        average,
        cost,
        moved_mj,
    } in rows
    {
        let Some(reason) = DeferredFor::parse(&reason) else {
            continue;
        };
        // One entry per reason and event, its currencies together.
        let i = match out
            .iter()
            .position(|d| d.reason == reason && d.event == event)
        {
            Some(i) => i,
            None => {
                out.push(Deferred {
                    reason,
                    event,
                    jobs: 0,
                    carbon_marginal_kg: None,
                    carbon_average_kg: None,
                    costs: Vec::new(),
                    moved_mj: 0,
                });
                out.len() - 1
            }
        };
        let d = &mut out[i];
        let add = |a: Option<Decimal>, b: Option<Decimal>| match (a, b) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        d.jobs += jobs;
        d.moved_mj += moved_mj;
        d.carbon_marginal_kg = add(d.carbon_marginal_kg, marginal);
        d.carbon_average_kg = add(d.carbon_average_kg, average);
        if let (Some(c), Some(a)) = (currency, cost) {
            d.costs.push((c, a));
        }
    }
    out.sort_by(|a, b| (a.reason, &a.event).cmp(&(b.reason, &b.event)));
    Ok(out)
}
