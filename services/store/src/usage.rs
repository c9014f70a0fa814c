//! Usage queries over the ledger, grouped by any of tenant, job, model, site, day or hour.

use crate::{Scope, StoreResult};
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use sqlx::PgPool;
use wattledger_domain::breakdown::EnergyBreakdown;
use wattledger_domain::metrics::EnergyTotals;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupBy {
    Tenant,
    Job,
    Model,
    Site,
    Day,
    Hour,
    /// How the row's job ended (`domain::badput::EndState`): `unknown` for a job that has
    /// not said (still running, or a scheduler that does not report it), `idle` for energy
    /// of no job.
    EndState,
    /// The serving phase of the row's job (`domain::phase::Phase`): `none` for a job that is
    /// not a pool of a disaggregated deployment, `idle` for energy of no job.
    Phase,
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
            "end_state" => GroupBy::EndState,
            "phase" => GroupBy::Phase,
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
            GroupBy::EndState => {
                "CASE WHEN l.job_id IS NULL THEN 'idle' ELSE coalesce(j.end_state, 'unknown') END"
            }
            GroupBy::Phase => {
                "CASE WHEN l.job_id IS NULL THEN 'idle' ELSE coalesce(j.phase, 'none') END"
            }
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
    /// Only the rows of the `top_jobs` jobs with the most energy in the range, largest group
    /// first (else every row, groups in key order). A page showing a tenant's ten largest
    /// jobs need not sum its thousands: the jobs are picked by a bare sum of energy first.
    pub top_jobs: Option<i64>,
}

/// What a sum of ledger rows rests on beyond its estimated energy (which its
/// [`EnergyBreakdown`] carries): how much was priced by a signal, at the fallback, or not at
/// all; counted for carbon likewise; covered by a marginal signal; and the union of the rows'
/// data-quality flags.
#[derive(Debug, Clone, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct Coverage {
    /// Energy of the rows that have a cost (signal or fallback), and the part of it priced
    /// at the fallback.
    pub priced_mj: i64,
    pub price_fallback_mj: i64,
    /// The same for operational carbon.
    pub carbon_mj: i64,
    pub carbon_fallback_mj: i64,
    /// Energy of the rows that have marginal carbon (a MOER signal; there is no fallback).
    pub marginal_mj: i64,
    pub flags: Vec<String>,
}

/// The select list of [`EnergyBreakdown`] over rows `l` of the ledger, `ledger_rows` or
/// [`span_rows`], for a grouped query.
pub const ENERGY_SUMS: &str = "
    coalesce(sum(l.gpu_mj), 0)::bigint AS gpu_mj,
    coalesce(sum(l.node_overhead_mj), 0)::bigint AS node_overhead_mj,
    coalesce(sum(l.idle_mj), 0)::bigint AS idle_mj,
    coalesce(sum(l.facility_overhead_mj), 0)::bigint AS facility_overhead_mj,
    coalesce(sum(l.estimated_mj), 0)::bigint AS estimated_mj";

/// The select list of [`Coverage`] over rows `l` of `ledger_rows` or [`span_rows`]
/// (migration 0018), for a grouped query. The flags' union is taken over their distinct
/// sets: rows share a few, and the union is a SQL function of some 3 µs a call (a fifth of a
/// month's read by job when called once per row).
pub const COVERAGE_SUMS: &str = "
    coalesce(sum(l.priced_mj), 0)::bigint AS priced_mj,
    coalesce(sum(l.price_fallback_mj), 0)::bigint AS price_fallback_mj,
    coalesce(sum(l.carbon_mj), 0)::bigint AS carbon_mj,
    coalesce(sum(l.carbon_fallback_mj), 0)::bigint AS carbon_fallback_mj,
    coalesce(sum(l.marginal_mj), 0)::bigint AS marginal_mj,
    coalesce(flags_union_agg(DISTINCT l.flags), '{}') AS flags";

/// The rows a usage query over `[$from, $to)` (its parameters 2 and 3), of the tenant in
/// parameter 1 if not null and the sites in parameter 8, sums: whole days from a rollup and
/// the edges from the ledger where a rollup can serve the query, else every ledger row. Either
/// way, the same sums. With `top_jobs`, only the rows of as many jobs as parameter 7 says,
/// those with the most energy.
fn ledger_source(source: Source, top_jobs: bool) -> String {
    let rows = match source {
        Source::Ledger => "(SELECT * FROM ledger_rows
              WHERE ($1::bigint IS NULL OR tenant_id = $1) AND hour >= $2 AND hour < $3
                AND site_id = ANY($8::bigint[]))"
            .to_owned(),
        Source::Rollup(rollup) => {
            format!("({})", span_rows(rollup, "$1", "$2", "$3", "$8::bigint[]"))
        }
    };
    if top_jobs {
        of_top_jobs(&rows)
    } else {
        rows
    }
}

/// `rows` (a subquery) narrowed to the rows of the jobs with the most energy among them, as
/// many as parameter 7 says. The jobs are picked once, in a subquery of their own: as a
/// condition on the rows (`job_id IN (…)`), each branch of a span and each parallel worker
/// picked them again (19 times for one view of the tenant page).
fn of_top_jobs(rows: &str) -> String {
    format!(
        "(SELECT r.* FROM {rows} r
          JOIN (SELECT t.job_id FROM {rows} t WHERE t.job_id IS NOT NULL
                GROUP BY t.job_id ORDER BY sum(t.total_mj) DESC, t.job_id LIMIT $7) top
            ON top.job_id = r.job_id)"
    )
}

/// The sites a usage query reads: the one its filter names, else every site. Named in the
/// statement as values, so that on Citus it is planned on the shards of those sites only,
/// not on every shard of the cluster (32 by default, most of them empty where sites are few:
/// one tenant's `/v1/usage` went from 92 to 30 ms p50 on two sites, BENCHMARKS.md "Citus").
pub(crate) async fn sites_read(pool: &PgPool, site_id: Option<i64>) -> StoreResult<Vec<i64>> {
    Ok(match site_id {
        Some(site) => vec![site],
        None => {
            sqlx::query_scalar!("SELECT id FROM sites ORDER BY id")
                .fetch_all(pool)
                .await?
        }
    })
}

/// The columns a span's rows carry, in the order [`span_rows`] selects them: a ledger row's
/// figures (`ledger_rows`), a rollup row's standing at its day's midnight with no job.
const SPAN_COLUMNS: [&str; 25] = [
    "gpu_mj",
    "node_overhead_mj",
    "idle_mj",
    "facility_overhead_mj",
    "total_mj",
    "estimated_mj",
    "prompt_tokens",
    "generated_tokens",
    "gpu_ms",
    "priced_mj",
    "price_fallback_mj",
    "carbon_mj",
    "carbon_fallback_mj",
    "marginal_mj",
    "cost",
    "gpu_time_cost",
    "carbon_g",
    "carbon_marginal_g",
    "embodied_carbon_g",
    "flags",
    "badput_mj",
    "badput_cost",
    "badput_carbon_g",
    "carbon_free_mj",
    "cfe_mj",
];

/// The whole days inside `[from, to)` (SQL expressions) as SQL `(d0, d1)`: from the first
/// midnight at or after `from` to the last at or before `to` (none when d0 >= d1). What the
/// tenant-day rollup can answer; the hours before d0 and after d1 come from the ledger.
pub(crate) fn whole_days(from: &str, to: &str) -> (String, String) {
    let d0 = format!(
        "(CASE WHEN date_bin('1 day', {from}, timestamptz 'epoch') = {from} THEN {from} \
         ELSE date_bin('1 day', {from}, timestamptz 'epoch') + interval '1 day' END)"
    );
    (d0, format!("date_bin('1 day', {to}, timestamptz 'epoch')"))
}

/// A rollup of the ledger by UTC day, rebuilt with the ledger's rows in each attribution
/// transaction (`crate::attribution::rebuild_days`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rollup {
    /// `usage_days` (migration 0018): one row per site, day, tenant and model, no job.
    Days,
    /// `usage_job_days` (migration 0041): one row per site, day, tenant, model and job (none
    /// for the energy of no job).
    JobDays,
}

impl Rollup {
    fn table(self) -> &'static str {
        match self {
            Rollup::Days => "usage_days",
            Rollup::JobDays => "usage_job_days",
        }
    }

    /// The job a rollup row stands for.
    fn job(self) -> &'static str {
        match self {
            Rollup::Days => "NULL::bigint",
            Rollup::JobDays => "u.job_id",
        }
    }
}

/// The rows a usage query over `[from, to)` of `tenant` at `sites` (SQL expressions; a NULL
/// tenant is every tenant; `sites` an array, in each branch so that Citus prunes its shards
/// by it) sums: `rollup`'s rows for the whole days inside the range and the ledger's rows for
/// the hours before the first and after the last (two index ranges, so a month reads at most
/// two days of ledger rows). Columns `hour, site_id, tenant_id, model_id, job_id` and
/// [`SPAN_COLUMNS`]; a rollup row stands at its day's midnight.
///
/// Built as SQL text rather than kept as a SQL function (migrations 0018–0031 had one): a
/// distributed PostgreSQL cannot plan a SQL function over its tables called with parameters.
pub(crate) fn span_rows(rollup: Rollup, tenant: &str, from: &str, to: &str, sites: &str) -> String {
    let cols = |alias: &str| {
        SPAN_COLUMNS
            .iter()
            .map(|c| format!("{alias}.{c}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (d0, d1) = whole_days(from, to);
    let of_tenant = |alias: &str| {
        format!(
            "{alias}.tenant_id BETWEEN coalesce({tenant}, (-9223372036854775808)::bigint) \
             AND coalesce({tenant}, 9223372036854775807) AND {alias}.site_id = ANY({sites})"
        )
    };
    format!(
        "SELECT u.day AS hour, u.site_id, u.tenant_id, u.model_id, {job} AS job_id, {u}
         FROM {table} u
         WHERE u.day >= {d0} AND u.day < {d1} AND {tu}
         UNION ALL
         SELECT l.hour, l.site_id, l.tenant_id, l.model_id, l.job_id, {l}
         FROM ledger_rows l
         WHERE l.hour >= {from} AND l.hour < least({d0}, {to}) AND {tl}
         UNION ALL
         SELECT l.hour, l.site_id, l.tenant_id, l.model_id, l.job_id, {l}
         FROM ledger_rows l
         WHERE l.hour >= greatest({d0}, {d1}) AND l.hour < {to} AND {tl}",
        table = rollup.table(),
        job = rollup.job(),
        u = cols("u"),
        l = cols("l"),
        tu = of_tenant("u"),
        tl = of_tenant("l"),
    )
}

/// Where a usage query's rows come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// Every ledger row of the range.
    Ledger,
    /// A rollup for the whole days of the range, the ledger for its edges.
    Rollup(Rollup),
}

impl Source {
    /// A rollup serves a query that does not see hours (a whole day's hours are one row at
    /// midnight, which an hour grouping would show as that day's only hour); the tenant-day
    /// one only a query that sees no jobs either (its rows have none). One job's rows are
    /// read from the ledger by its job index: the job-day rollup has none, and a job's rows
    /// are few.
    fn of(group_by: &[GroupBy], filter: &UsageFilter) -> Source {
        let sees_jobs = group_by.contains(&GroupBy::Job)
            || group_by.contains(&GroupBy::EndState)
            || group_by.contains(&GroupBy::Phase)
            || filter.top_jobs.is_some();
        if group_by.contains(&GroupBy::Hour) || filter.job_id.is_some() {
            Source::Ledger
        } else if sees_jobs {
            Source::Rollup(Rollup::JobDays)
        } else {
            Source::Rollup(Rollup::Days)
        }
    }
}

/// The tokens a scope's jobs served in a range and the energy of the jobs that served them
/// (those with tokens), as `usage` grouped by job adds them up; one bare sum per job over the
/// job-day rollup (and the ledger at the range's edges), where the full grouping would fold
/// every job's costs, carbon and names.
#[tracing::instrument(skip_all)]
pub async fn serving(pool: &PgPool, scope: &Scope, filter: &UsageFilter) -> StoreResult<Serving> {
    let (from, to) = bounds(filter);
    let span = span_rows(Rollup::JobDays, "$1", "$2", "$3", "$4::bigint[]");
    let sql = format!(
        "SELECT coalesce(sum(tokens), 0)::bigint AS tokens, coalesce(sum(mj), 0)::bigint AS mj
         FROM (SELECT sum(prompt_tokens + generated_tokens) AS tokens, sum(total_mj) AS mj
               FROM ({span}) l
               WHERE $5::bigint IS NULL OR model_id = $5
               GROUP BY job_id) per_job
         WHERE tokens > 0"
    );
    let (tokens, mj) = sqlx::query_as::<_, (i64, i64)>(&sql)
        .bind(scope.tenant())
        .bind(from)
        .bind(to)
        .bind(sites_read(pool, filter.site_id).await?)
        .bind(filter.model_id)
        .fetch_one(pool)
        .await?;
    Ok(Serving { tokens, mj })
}

/// Tokens served and the energy of the jobs that served them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Serving {
    pub tokens: i64,
    pub mj: i64,
}

/// The bounds of a usage range, open ends closed at the bounds of any time the ledger can
/// hold (the input rule's years), so the rollup can split it into whole days.
fn bounds(filter: &UsageFilter) -> (DateTime<Utc>, DateTime<Utc>) {
    (
        filter
            .from
            .unwrap_or_else(wattledger_domain::input::earliest),
        filter.to.unwrap_or_else(wattledger_domain::input::latest),
    )
}

#[derive(Debug, Clone, Default, sqlx::FromRow)]
pub struct UsageRow {
    pub tenant: Option<String>,
    pub job: Option<String>,
    pub model: Option<String>,
    pub site: Option<String>,
    pub period: Option<DateTime<Utc>>,
    pub end_state: Option<String>,
    pub phase: Option<String>,
    #[sqlx(flatten)]
    pub energy: EnergyBreakdown,
    pub prompt_tokens: i64,
    pub generated_tokens: i64,
    pub gpu_ms: i64,
    #[sqlx(flatten)]
    pub coverage: Coverage,
    /// Operational carbon (location-based, average intensity) of the rows that have it.
    pub carbon_g: Option<Decimal>,
    /// Carbon at the marginal (MOER) intensity, of the rows that have it.
    pub carbon_marginal_g: Option<Decimal>,
    /// Embodied carbon (SCI's M) of the GPU time held, of the rows that have it.
    pub embodied_carbon_g: Option<Decimal>,
    /// Cost per currency (a tenant using sites in two currencies has two), in step.
    pub cost_currencies: Option<Vec<String>>,
    pub cost_amounts: Option<Vec<Decimal>>,
    /// GPU time at GPU-hour rates, per currency, in step.
    pub gpu_time_currencies: Option<Vec<String>>,
    pub gpu_time_amounts: Option<Vec<Decimal>>,
    /// The part of the energy that was badput (`domain::badput`), and its cost (in step
    /// with `cost_currencies`) and carbon.
    pub badput_mj: i64,
    pub badput_cost_amounts: Option<Vec<Decimal>>,
    pub badput_carbon_g: Option<Decimal>,
    /// The rows' share of their hours' carbon-free energy (`domain::cfe`), and the energy of
    /// the rows that have one (the score's denominator).
    pub carbon_free_mj: i64,
    pub cfe_mj: i64,
}

impl UsageRow {
    pub fn tokens(&self) -> i64 {
        self.prompt_tokens + self.generated_tokens
    }

    /// The totals every derived figure of the row comes from (`domain::metrics`): IT energy
    /// is the GPU's and the node's, before the facility's share.
    pub fn totals(&self) -> EnergyTotals {
        EnergyTotals {
            total_mj: self.energy.total_mj(),
            it_mj: self.energy.it_mj(),
            gpu_mj: self.energy.gpu_mj,
            idle_mj: self.energy.idle_mj,
            tokens: self.tokens(),
            carbon_g: self.carbon_g,
            embodied_carbon_g: self.embodied_carbon_g,
        }
    }
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
    // Costs are summed per currency first (sites may bill in different ones), then the
    // groups are folded with one amount per currency.
    let inner_group = keys
        .iter()
        .copied()
        .chain(["s.currency"])
        .collect::<Vec<_>>()
        .join(", ");
    let source = ledger_source(Source::of(group_by, filter), filter.top_jobs.is_some());
    let (from, to) = bounds(filter);
    let order = match filter.top_jobs {
        // Column 8 is total_mj, selected only to order by (the row's total is its breakdown's).
        Some(_) => "ORDER BY 8 DESC, 1, 2, 3, 4, 5, 6, 7",
        None => "ORDER BY 1, 2, 3, 4, 5, 6, 7",
    };
    let sql = format!(
        "WITH g AS (
             SELECT {}, {}, {}, {}, {period}, {}, {}, s.currency::text AS currency,
                    sum(l.total_mj) AS total_mj, {ENERGY_SUMS},
                    sum(l.prompt_tokens) AS prompt_tokens,
                    sum(l.generated_tokens) AS generated_tokens, sum(l.gpu_ms) AS gpu_ms,
                    sum(l.cost) AS cost, sum(l.gpu_time_cost) AS gpu_time_cost,
                    sum(l.carbon_g) AS carbon_g,
                    sum(l.carbon_marginal_g) AS carbon_marginal_g,
                    sum(l.embodied_carbon_g) AS embodied_carbon_g,
                    sum(l.badput_mj) AS badput_mj, sum(l.badput_cost) AS badput_cost,
                    sum(l.badput_carbon_g) AS badput_carbon_g,
                    sum(l.carbon_free_mj) AS carbon_free_mj, sum(l.cfe_mj) AS cfe_mj, {COVERAGE_SUMS}
             FROM {source} l
             JOIN tenants t ON t.id = l.tenant_id
             JOIN sites s ON s.id = l.site_id
             -- On the whole key (site, id): unique, so unused it is no join at all.
             LEFT JOIN jobs j ON j.site_id = l.site_id AND j.id = l.job_id
             LEFT JOIN models m ON m.id = l.model_id
             WHERE ($4::bigint IS NULL OR l.site_id = $4)
               AND ($5::bigint IS NULL OR l.job_id = $5)
               AND ($6::bigint IS NULL OR l.model_id = $6)
             GROUP BY {inner_group}
         )
         SELECT tenant, job, model, site, period, end_state, phase,
                coalesce(sum(total_mj), 0)::bigint AS total_mj,
                coalesce(sum(gpu_mj), 0)::bigint AS gpu_mj,
                coalesce(sum(node_overhead_mj), 0)::bigint AS node_overhead_mj,
                coalesce(sum(idle_mj), 0)::bigint AS idle_mj,
                coalesce(sum(facility_overhead_mj), 0)::bigint AS facility_overhead_mj,
                coalesce(sum(estimated_mj), 0)::bigint AS estimated_mj,
                coalesce(sum(price_fallback_mj), 0)::bigint AS price_fallback_mj,
                coalesce(sum(carbon_fallback_mj), 0)::bigint AS carbon_fallback_mj,
                coalesce(sum(marginal_mj), 0)::bigint AS marginal_mj,
                coalesce(flags_union_agg(DISTINCT flags), '{{}}') AS flags,
                coalesce(sum(prompt_tokens), 0)::bigint AS prompt_tokens,
                coalesce(sum(generated_tokens), 0)::bigint AS generated_tokens,
                coalesce(sum(gpu_ms), 0)::bigint AS gpu_ms,
                sum(carbon_g) AS carbon_g, sum(carbon_marginal_g) AS carbon_marginal_g,
                sum(embodied_carbon_g) AS embodied_carbon_g,
                coalesce(sum(priced_mj), 0)::bigint AS priced_mj,
                coalesce(sum(carbon_mj), 0)::bigint AS carbon_mj,
                array_agg(currency ORDER BY currency) FILTER (WHERE cost IS NOT NULL) AS cost_currencies,
                array_agg(cost ORDER BY currency) FILTER (WHERE cost IS NOT NULL) AS cost_amounts,
                array_agg(currency ORDER BY currency) FILTER (WHERE gpu_time_cost IS NOT NULL)
                    AS gpu_time_currencies,
                array_agg(gpu_time_cost ORDER BY currency) FILTER (WHERE gpu_time_cost IS NOT NULL)
                    AS gpu_time_amounts,
                coalesce(sum(badput_mj), 0)::bigint AS badput_mj,
                array_agg(badput_cost ORDER BY currency) FILTER (WHERE cost IS NOT NULL)
                    AS badput_cost_amounts,
                sum(badput_carbon_g) AS badput_carbon_g,
                coalesce(sum(carbon_free_mj), 0)::bigint AS carbon_free_mj,
                coalesce(sum(cfe_mj), 0)::bigint AS cfe_mj
         FROM g
         GROUP BY 1, 2, 3, 4, 5, 6, 7
         {order}",
        key(GroupBy::Tenant, "tenant", "::text"),
        key(GroupBy::Job, "job", "::text"),
        key(GroupBy::Model, "model", "::text"),
        key(GroupBy::Site, "site", "::text"),
        key(GroupBy::EndState, "end_state", "::text"),
        key(GroupBy::Phase, "phase", "::text"),
    );
    Ok(sqlx::query_as(&sql)
        .bind(scope.tenant())
        .bind(from)
        .bind(to)
        .bind(filter.site_id)
        .bind(filter.job_id)
        .bind(filter.model_id)
        .bind(filter.top_jobs)
        .bind(sites_read(pool, filter.site_id).await?)
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
    /// The period's highest one-minute site draw (`site_hours.site_peak_mw`).
    pub site_peak_mw: Option<i64>,
    pub envelope_w: i64,
    /// Hourly carbon-free energy (`domain::cfe`): the carbon-free energy of the hours whose
    /// figure is known, those hours' energy, the clean energy delivered under contract, the
    /// hours not wholly carbon-free and the hours whose figure is unknown.
    pub carbon_free_mj: i64,
    pub cfe_mj: i64,
    pub contract_mj: i64,
    pub hours_not_carbon_free: i64,
    pub hours_cfe_unknown: i64,
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
                sum(h.capacity_gpu_ms)::bigint AS capacity_gpu_ms, count(*) AS hours,
                max(h.site_peak_mw)::bigint AS site_peak_mw,
                max(s.power_envelope_w)::bigint AS envelope_w,
                coalesce(sum(h.carbon_free_mj), 0)::bigint AS carbon_free_mj,
                coalesce(sum(h.site_mj) FILTER (WHERE h.carbon_free_mj IS NOT NULL), 0)::bigint AS cfe_mj,
                coalesce(sum(h.contract_mj), 0)::bigint AS contract_mj,
                count(*) FILTER (WHERE h.carbon_free_mj < h.site_mj) AS hours_not_carbon_free,
                count(*) FILTER (WHERE h.carbon_free_mj IS NULL AND h.site_mj > 0) AS hours_cfe_unknown
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

/// A site's latest attributed hour, with what the exposition format reports of it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct LatestHour {
    pub site: String,
    pub hour: DateTime<Utc>,
    pub site_mj: i64,
    pub it_mj: i64,
    pub gpu_mj: i64,
    pub idle_mj: i64,
    pub allocated_gpu_ms: i64,
    pub capacity_gpu_ms: i64,
    pub tokens: i64,
    pub carbon_g: Option<Decimal>,
    pub carbon_mj: i64,
    /// The hour's carbon-free energy (`domain::cfe`); `None` where it is not known.
    pub carbon_free_mj: Option<i64>,
    /// The hour's highest one-minute site draw, and the site's envelope and static PUE.
    pub site_peak_mw: Option<i64>,
    pub envelope_w: i64,
    pub static_pue: Decimal,
    /// Σ site energy over every attributed hour (a counter).
    pub energy_mj_total: i64,
}

/// Per site, its newest complete attributed hour and its all-time energy.
pub async fn latest_hours(pool: &PgPool) -> StoreResult<Vec<LatestHour>> {
    Ok(sqlx::query_as!(
        LatestHour,
        r#"WITH latest AS (
             SELECT DISTINCT ON (site_id) site_id, hour, site_mj, it_mj, gpu_mj, idle_mj,
                    allocated_gpu_ms, capacity_gpu_ms, site_peak_mw, carbon_free_mj
             FROM site_hours
             -- The hour in progress is partial: its mean power and ratios would mislead.
             WHERE hour < date_trunc('hour', now())
             ORDER BY site_id, hour DESC
         )
         SELECT s.key AS site, l.hour AS "hour!", l.site_mj AS "site_mj!", l.it_mj AS "it_mj!",
                l.gpu_mj AS "gpu_mj!", l.idle_mj AS "idle_mj!",
                l.allocated_gpu_ms AS "allocated_gpu_ms!", l.capacity_gpu_ms AS "capacity_gpu_ms!",
                coalesce((SELECT sum(prompt_tokens + generated_tokens) FROM ledger g
                          WHERE g.site_id = l.site_id AND g.hour = l.hour), 0)::bigint AS "tokens!",
                (SELECT sum(carbon_g) FROM ledger g
                 WHERE g.site_id = l.site_id AND g.hour = l.hour) AS carbon_g,
                coalesce((SELECT sum(total_mj) FROM ledger g WHERE g.site_id = l.site_id
                          AND g.hour = l.hour AND g.carbon_g IS NOT NULL), 0)::bigint
                    AS "carbon_mj!",
                (SELECT sum(site_mj) FROM site_hours h WHERE h.site_id = l.site_id)::bigint
                    AS "energy_mj_total!",
                l.carbon_free_mj, l.site_peak_mw, s.power_envelope_w AS envelope_w, s.static_pue
         FROM latest l JOIN sites s ON s.id = l.site_id
         ORDER BY s.key"#,
    )
    .fetch_all(pool)
    .await?)
}

/// The attribution backlog: dirty hours, the oldest mark's age, and when a run last ended.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Backlog {
    pub dirty_hours: i64,
    pub oldest_mark_age_s: Option<f64>,
    pub last_run_finished: Option<DateTime<Utc>>,
}

pub async fn backlog(pool: &PgPool) -> StoreResult<Backlog> {
    Ok(sqlx::query_as!(
        Backlog,
        r#"SELECT (SELECT count(*) FROM dirty_hours) AS "dirty_hours!",
                (SELECT extract(epoch FROM now() - min(marked_at))::float8 FROM dirty_hours)
                    AS oldest_mark_age_s,
                (SELECT max(finished_at) FROM attribution_runs) AS last_run_finished"#,
    )
    .fetch_one(pool)
    .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn questions_read_the_smallest_rollup_that_answers_them() {
        let none = UsageFilter::default();
        let of = |g: &[GroupBy]| Source::of(g, &none);
        for g in [
            &[][..],
            &[GroupBy::Day],
            &[GroupBy::Tenant, GroupBy::Day],
            &[GroupBy::Model, GroupBy::Site],
        ] {
            assert_eq!(of(g), Source::Rollup(Rollup::Days), "{g:?}");
        }
        for g in [
            &[GroupBy::Job][..],
            &[GroupBy::Day, GroupBy::Job],
            &[GroupBy::EndState],
            &[GroupBy::Model, GroupBy::Phase],
        ] {
            assert_eq!(of(g), Source::Rollup(Rollup::JobDays), "{g:?}");
        }
        for g in [
            &[GroupBy::Hour][..],
            &[GroupBy::Day, GroupBy::Hour],
            &[GroupBy::Tenant, GroupBy::Hour],
            &[GroupBy::Job, GroupBy::Hour],
        ] {
            assert_eq!(of(g), Source::Ledger, "{g:?}");
        }
        let one_job = UsageFilter {
            job_id: Some(7),
            ..UsageFilter::default()
        };
        assert_eq!(Source::of(&[GroupBy::Day], &one_job), Source::Ledger);
        let top = UsageFilter {
            top_jobs: Some(10),
            ..UsageFilter::default()
        };
        assert_eq!(Source::of(&[], &top), Source::Rollup(Rollup::JobDays));
    }
}
