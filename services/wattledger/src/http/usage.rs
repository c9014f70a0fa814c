//! The query API: usage grouped any way with efficiency figures, jobs, sites and tenants.

use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{Caller, Query};
use crate::auth::Role;
use crate::state::AppState;
use crate::views::site_efficiency::SiteEfficiency;
use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, Duration, NaiveTime, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::{IntoParams, ToSchema};
use wattledger_domain::breakdown::EnergyBreakdown;
use wattledger_domain::cfe;
use wattledger_domain::input;
use wattledger_domain::metrics::{self, efficiency};
use wattledger_domain::phase::Phase;
use wattledger_domain::split::round_nested;
use wattledger_domain::units::{kwh, ratio};
use wattledger_store::inventory::{self, KeyedTable};
use wattledger_store::usage::{self, GroupBy, UsageFilter};
use wattledger_store::{jobs, Scope};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/usage", get(get_usage))
        .route("/v1/jobs", get(list_jobs))
        .route("/v1/jobs/{key}", get(get_job))
        .route("/v1/sites", get(list_sites))
        .route("/v1/tenants", get(list_tenants))
}

const READERS: &[Role] = &[Role::Finance, Role::Operator, Role::Tenant];

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UsageParams {
    /// Start of the range (RFC 3339, inclusive); default 30 days before `to`.
    #[serde(default, deserialize_with = "input::de::opt_time")]
    pub from: Option<DateTime<Utc>>,
    /// End of the range (RFC 3339, exclusive); default now. At most 400 days after `from`.
    #[serde(default, deserialize_with = "input::de::opt_time")]
    pub to: Option<DateTime<Utc>>,
    /// Comma-separated: any of `tenant`, `job`, `model`, `site`, `day`, `hour`, `end_state`
    /// (how the job ended: the names of `EndState`, `unknown` for a job that has not said,
    /// `idle` for energy of no job), `phase` (the serving phase of a disaggregated
    /// deployment's pool: `prefill`, `decode`, `both`; `none` for any other job, `idle`).
    pub group_by: Option<String>,
    /// Site key.
    pub site: Option<String>,
    /// Tenant key (a tenant token may only name its own).
    pub tenant: Option<String>,
    /// Job key.
    pub job: Option<String>,
    /// Model key.
    pub model: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UsageResponse {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub group_by: Vec<String>,
    pub rows: Vec<UsageRowOut>,
    /// Per site: PUE, ITUE, TUE and utilisation over the range (per hour or day when grouped so).
    pub sites: Vec<SiteEfficiency>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UsageRowOut {
    pub tenant: Option<String>,
    pub job: Option<String>,
    pub model: Option<String>,
    pub site: Option<String>,
    pub period: Option<DateTime<Utc>>,
    /// How the row's jobs ended, when grouped by `end_state`.
    pub end_state: Option<String>,
    /// The serving phase of the row's jobs, when grouped by `phase`.
    pub phase: Option<String>,
    #[schema(value_type = String)]
    pub kwh: Decimal,
    /// The four parts of `energy`, summed.
    pub total_mj: i64,
    #[serde(flatten)]
    pub energy: EnergyBreakdown,
    /// What these figures rest on: flags and the shares of measured, estimated,
    /// signal-priced and fallback-priced energy.
    #[serde(flatten)]
    pub quality: DataQuality,
    pub prompt_tokens: i64,
    pub generated_tokens: i64,
    pub tokens: i64,
    #[schema(value_type = Option<String>)]
    pub tokens_per_kwh: Option<Decimal>,
    /// Tokens per kWh of IT energy (without facility overhead).
    #[schema(value_type = Option<String>)]
    pub tokens_per_kwh_it: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub joules_per_token: Option<Decimal>,
    /// J per prompt token of a `prefill` row (grouped by `phase`): its energy over the prompt
    /// tokens its pools processed.
    #[schema(value_type = Option<String>)]
    pub joules_per_prompt_token: Option<Decimal>,
    /// J per generated token of a `decode` row (grouped by `phase`).
    #[schema(value_type = Option<String>)]
    pub joules_per_generated_token: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub idle_fraction: Option<Decimal>,
    /// GPU-hours held (share-weighted), to 4 places, rounded together with the other rows
    /// so that they add up to what the same question grouped by the leading keys of
    /// `group_by` (or by none) shows.
    #[schema(value_type = String)]
    pub gpu_hours: Decimal,
    /// GPU time held in ms, exact: the figure to add up or compute with.
    pub gpu_ms: i64,
    /// Energy cost per currency (currency per kWh × kWh, summed per step).
    #[schema(value_type = BTreeMap<String, String>)]
    pub cost: BTreeMap<String, Decimal>,
    /// Operational carbon, location-based (average grid intensity), g CO2e.
    #[schema(value_type = Option<String>)]
    pub carbon_g: Option<Decimal>,
    /// Carbon at the marginal (MOER) intensity, g CO2e, of the energy a marginal signal
    /// covered (`carbon_marginal_fraction`): for decisions and what-ifs. Absent where no
    /// signal covered any of it (flagged `carbon_marginal_missing`), never 0 for unknown.
    #[schema(value_type = Option<String>)]
    pub carbon_marginal_g: Option<Decimal>,
    /// Embodied carbon (SCI's M) of the GPU time held, g CO2e (known device models only).
    #[schema(value_type = Option<String>)]
    pub embodied_carbon_g: Option<Decimal>,
    /// Operational carbon per 1000 tokens, g CO2e (embodied not included: see
    /// `sci_g_per_1k_tokens`).
    #[schema(value_type = Option<String>)]
    pub g_co2e_per_1k_tokens: Option<Decimal>,
    /// SCI per token: (operational + embodied) g CO2e / tokens; absent while either is
    /// unknown.
    #[schema(value_type = Option<String>)]
    pub sci_g_per_token: Option<Decimal>,
    /// SCI per 1000 tokens: (operational + embodied) g CO2e × 1000 / tokens; absent while
    /// either is unknown. The dashboard's and the demo's "SCI g per 1k tokens".
    #[schema(value_type = Option<String>)]
    pub sci_g_per_1k_tokens: Option<Decimal>,
    #[schema(value_type = BTreeMap<String, String>)]
    pub cost_per_1m_tokens: BTreeMap<String, Decimal>,
    /// Energy cost plus GPU time at the device models' GPU-hour rates, per currency.
    #[schema(value_type = BTreeMap<String, String>)]
    pub fully_loaded_cost: BTreeMap<String, Decimal>,
    #[serde(flatten)]
    pub goodput: Goodput,
    #[serde(flatten)]
    pub carbon_free: CarbonFree,
}

/// The row's hourly carbon-free energy: each of its hours' energy times that hour's
/// carbon-free share (`domain::cfe`), summed.
#[derive(Debug, Serialize, ToSchema)]
pub struct CarbonFree {
    /// kWh to 6 places, as `kwh`.
    #[schema(value_type = String)]
    pub carbon_free_kwh: Decimal,
    /// Carbon-free over the energy of the hours whose figure is known, 0 to 1 to 4 places;
    /// absent where none is.
    #[schema(value_type = Option<String>)]
    pub cfe_score: Option<Decimal>,
    /// The energy of the known hours that was not carbon-free.
    #[schema(value_type = String)]
    pub not_carbon_free_kwh: Decimal,
    /// Share of the row's energy whose hours' carbon-free figure is known.
    #[schema(value_type = Option<String>)]
    pub cfe_fraction: Option<Decimal>,
}

impl CarbonFree {
    fn of(r: &usage::UsageRow) -> CarbonFree {
        CarbonFree {
            carbon_free_kwh: kwh(r.carbon_free_mj).round_dp(6).normalize(),
            cfe_score: cfe::score(r.carbon_free_mj, r.cfe_mj),
            not_carbon_free_kwh: kwh(r.cfe_mj - r.carbon_free_mj).round_dp(6).normalize(),
            cfe_fraction: ratio(r.cfe_mj, r.energy.total_mj()),
        }
    }
}

/// The row's energy, cost and carbon split into goodput and badput: badput is what training
/// and batch jobs spent after their last checkpoint before they failed, timed out, were
/// preempted, cancelled or requeued (all of it without a checkpoint). The two add up to the
/// row's figures exactly.
#[derive(Debug, Serialize, ToSchema)]
pub struct Goodput {
    #[schema(value_type = String)]
    pub goodput_kwh: Decimal,
    #[schema(value_type = String)]
    pub badput_kwh: Decimal,
    /// Badput in mJ, exact.
    pub badput_mj: i64,
    /// Badput's share of the row's energy; absent for a row without energy.
    #[schema(value_type = Option<String>)]
    pub badput_fraction: Option<Decimal>,
    /// Energy cost per currency, as `cost`, of goodput and of badput.
    #[schema(value_type = BTreeMap<String, String>)]
    pub goodput_cost: BTreeMap<String, Decimal>,
    #[schema(value_type = BTreeMap<String, String>)]
    pub badput_cost: BTreeMap<String, Decimal>,
    /// Operational carbon (location-based), as `carbon_g`, of goodput and of badput.
    #[schema(value_type = Option<String>)]
    pub goodput_carbon_g: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub badput_carbon_g: Option<Decimal>,
}

impl Goodput {
    fn of(r: &usage::UsageRow, cost: &BTreeMap<String, Decimal>) -> Goodput {
        let total = r.energy.total_mj();
        let badput_cost: BTreeMap<String, Decimal> = (r.cost_currencies.iter().flatten())
            .zip(r.badput_cost_amounts.iter().flatten())
            .map(|(c, a)| (c.clone(), a.round_dp(6).normalize()))
            .collect();
        let badput_carbon = r.badput_carbon_g.map(|g| g.round_dp(3).normalize());
        Goodput {
            goodput_kwh: kwh(total - r.badput_mj).round_dp(6).normalize(),
            badput_kwh: kwh(r.badput_mj).round_dp(6).normalize(),
            badput_mj: r.badput_mj,
            badput_fraction: ratio(r.badput_mj, total),
            goodput_cost: cost
                .iter()
                .map(|(c, a)| {
                    let bad = badput_cost.get(c).copied().unwrap_or_default();
                    (c.clone(), (a - bad).normalize())
                })
                .collect(),
            badput_cost,
            goodput_carbon_g: r
                .carbon_g
                .map(|g| (g.round_dp(3) - badput_carbon.unwrap_or_default()).normalize()),
            badput_carbon_g: badput_carbon,
        }
    }
}

/// What a row's figures rest on. Every fraction is a share of the row's total energy (absent
/// when it has none); a cost or carbon figure covers only the `priced_fraction` or
/// `carbon_fraction` of it.
#[derive(Debug, Serialize, ToSchema)]
pub struct DataQuality {
    /// Data-quality flags of any ledger row summed here, sorted: meters (`counter_reset`,
    /// `reset_estimated`, `gap`, `missing`, `negative_overhead`, `node_model`,
    /// `facility_fallback`, `overhead_estimated`, `counter_estimated`) and signals (`price_fallback`,
    /// `price_missing`, `price_estimated`, `carbon_fallback`, `carbon_missing`,
    /// `carbon_estimated`, `carbon_marginal_missing`, `carbon_marginal_estimated`).
    pub flags: Vec<String>,
    /// Share of the energy that was estimated rather than read (gaps, counter resets, the
    /// static node model, the facility fallback, an overhead split on an estimate, a stuck
    /// counter the agent counted from power).
    #[schema(value_type = Option<String>)]
    pub estimated_fraction: Option<Decimal>,
    /// Share of the energy the cost covers (the rest had no price at all, `price_missing`),
    /// and how it splits into priced by a price signal and at the site's fallback price.
    #[schema(value_type = Option<String>)]
    pub priced_fraction: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub price_signal_fraction: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub price_fallback_fraction: Option<Decimal>,
    /// The same for operational carbon: covered, by an intensity signal, at the fallback.
    #[schema(value_type = Option<String>)]
    pub carbon_fraction: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub carbon_signal_fraction: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub carbon_fallback_fraction: Option<Decimal>,
    /// Share of the energy a marginal (MOER) signal covered.
    #[schema(value_type = Option<String>)]
    pub carbon_marginal_fraction: Option<Decimal>,
}

impl DataQuality {
    pub fn of(energy: &EnergyBreakdown, c: &usage::Coverage) -> DataQuality {
        let share = |mj: i64| ratio(mj, energy.total_mj());
        DataQuality {
            flags: c.flags.clone(),
            estimated_fraction: share(energy.estimated_mj),
            priced_fraction: share(c.priced_mj),
            price_signal_fraction: share(c.priced_mj - c.price_fallback_mj),
            price_fallback_fraction: share(c.price_fallback_mj),
            carbon_fraction: share(c.carbon_mj),
            carbon_signal_fraction: share(c.carbon_mj - c.carbon_fallback_mj),
            carbon_fallback_fraction: share(c.carbon_fallback_mj),
            carbon_marginal_fraction: share(c.marginal_mj),
        }
    }
}

fn parse_group_by(s: Option<&str>) -> ApiResult<Vec<GroupBy>> {
    let mut out = Vec::new();
    for part in s
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let g = GroupBy::parse(part).ok_or_else(|| {
            ApiError::InvalidQuery(format!(
                "group_by: unknown '{part}'; use any of tenant, job, model, site, day, hour, end_state, phase"
            ))
        })?;
        if !out.contains(&g) {
            out.push(g);
        }
    }
    Ok(out)
}

/// Resolves a key to an id, or 404: an unknown key and a hidden one look the same.
async fn id_of(
    state: &AppState,
    table: KeyedTable,
    key: &Option<String>,
) -> ApiResult<Option<i64>> {
    let Some(key) = key else { return Ok(None) };
    let ids = inventory::ids_by_key(&state.pool, table, std::slice::from_ref(key)).await?;
    ids.get(key).copied().map(Some).ok_or(ApiError::NotFound)
}

fn range(
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
) -> ApiResult<(DateTime<Utc>, DateTime<Utc>)> {
    super::extract::span_of(from, to, Duration::days(30))
}

#[utoipa::path(get, path = "/v1/usage", tag = "query", params(UsageParams),
    responses((status = 200, body = UsageResponse), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_usage(
    State(state): State<AppState>,
    caller: Caller,
    Query(p): Query<UsageParams>,
) -> ApiResult<Json<UsageResponse>> {
    caller.require(READERS)?;
    let group_by = parse_group_by(p.group_by.as_deref())?;
    let (from, to) = range(p.from, p.to)?;
    let scope = match id_of(&state, KeyedTable::Tenants, &p.tenant).await? {
        Some(t) => caller.scope.narrow(t).ok_or(ApiError::NotFound)?,
        None => caller.scope,
    };
    let filter = usage_filter(&state, &scope, &p, from, to).await?;
    let rows = usage::usage(&state.pool, &scope, &group_by, &filter).await?;
    let gpu_hours = shown_gpu_hours(&rows, &group_by);
    let per = group_by
        .iter()
        .copied()
        .find(|g| matches!(g, GroupBy::Hour | GroupBy::Day));
    let site_rows = usage::site_totals(&state.pool, &filter, per).await?;
    let show_energy = caller.scope == Scope::All;
    Ok(Json(UsageResponse {
        from,
        to,
        group_by: group_by_names(p.group_by.as_deref()),
        rows: rows
            .into_iter()
            .zip(gpu_hours)
            .map(|(r, gpu_hours)| row_out(r, gpu_hours))
            .collect(),
        sites: site_rows
            .into_iter()
            .map(|s| SiteEfficiency::of(&s, show_energy))
            .collect(),
    }))
}

/// The filter the parameters name, within the caller's scope: each key resolved to its id.
async fn usage_filter(
    state: &AppState,
    scope: &Scope,
    p: &UsageParams,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> ApiResult<UsageFilter> {
    Ok(UsageFilter {
        from: Some(from),
        to: Some(to),
        site_id: id_of(state, KeyedTable::Sites, &p.site).await?,
        // A job the caller may not see answers as one that does not exist.
        job_id: match &p.job {
            None => None,
            Some(key) => Some(
                jobs::visible_id(&state.pool, scope, key)
                    .await?
                    .ok_or(ApiError::NotFound)?,
            ),
        },
        model_id: id_of(state, KeyedTable::Models, &p.model).await?,
        top_jobs: None,
    })
}

/// `group_by` as asked, each name trimmed, the empty ones left out.
fn group_by_names(asked: Option<&str>) -> Vec<String> {
    asked
        .map(|g| {
            g.split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// A row of the answer: the ledger's figures with their efficiency, cost and carbon.
fn row_out(r: usage::UsageRow, gpu_hours: Decimal) -> UsageRowOut {
    let tokens = r.tokens();
    let cost = costs(&r);
    let e = efficiency(r.totals());
    let (joules_per_prompt_token, joules_per_generated_token) = r
        .phase
        .as_deref()
        .and_then(Phase::parse)
        .map_or((None, None), |p| {
            p.joules_per_token(r.energy.total_mj(), r.prompt_tokens, r.generated_tokens)
        });
    UsageRowOut {
        kwh: e.kwh,
        total_mj: r.energy.total_mj(),
        energy: r.energy,
        quality: DataQuality::of(&r.energy, &r.coverage),
        prompt_tokens: r.prompt_tokens,
        generated_tokens: r.generated_tokens,
        tokens,
        tokens_per_kwh: e.tokens_per_kwh,
        tokens_per_kwh_it: e.tokens_per_kwh_it,
        joules_per_token: e.joules_per_token,
        joules_per_prompt_token,
        joules_per_generated_token,
        idle_fraction: e.idle_fraction,
        gpu_hours,
        gpu_ms: r.gpu_ms,
        fully_loaded_cost: fully_loaded_cost(&cost, &r),
        goodput: Goodput::of(&r, &cost),
        carbon_free: CarbonFree::of(&r),
        carbon_g: r.carbon_g.map(|g| g.round_dp(3).normalize()),
        carbon_marginal_g: r.carbon_marginal_g.map(|g| g.round_dp(3).normalize()),
        embodied_carbon_g: r.embodied_carbon_g.map(|g| g.round_dp(3).normalize()),
        g_co2e_per_1k_tokens: e.g_co2e_per_1k_tokens,
        sci_g_per_token: e.sci_g_per_token,
        sci_g_per_1k_tokens: e.sci_g_per_1k_tokens,
        cost_per_1m_tokens: cost
            .iter()
            .filter_map(|(c, a)| Some((c.clone(), metrics::per_1m_tokens(*a, tokens)?)))
            .collect(),
        cost,
        tenant: r.tenant,
        job: r.job,
        model: r.model,
        site: r.site,
        period: r.period,
        end_state: r.end_state,
        phase: r.phase,
    }
}

/// A row's energy cost per currency, to 6 places.
fn costs(r: &usage::UsageRow) -> BTreeMap<String, Decimal> {
    r.cost_currencies
        .clone()
        .unwrap_or_default()
        .into_iter()
        .zip(r.cost_amounts.clone().unwrap_or_default())
        .map(|(c, a)| (c, a.round_dp(6).normalize()))
        .collect()
}

/// The energy cost plus the GPU time's, per currency.
fn fully_loaded_cost(
    cost: &BTreeMap<String, Decimal>,
    r: &usage::UsageRow,
) -> BTreeMap<String, Decimal> {
    let mut total = cost.clone();
    let gpu_time = r
        .gpu_time_currencies
        .clone()
        .unwrap_or_default()
        .into_iter()
        .zip(r.gpu_time_amounts.clone().unwrap_or_default());
    for (c, a) in gpu_time {
        *total.entry(c).or_default() += a;
    }
    total.into_iter().map(|(c, a)| (c, a.normalize())).collect()
}

/// A site's efficiency over the range (or an hour or day of it); its energy only where the
/// caller may see every tenant's.
/// The unit GPU-hours are shown in: 0.0001 h, 360 ms.
const GPU_HOURS_DP: u32 = 4;
const GPU_HOUR_UNIT_MS: i64 = 360;

/// Each row's GPU-hours as shown. Rounded each on its own, a shared endpoint's tenants
/// showed 0.4167 + 0.2500 + 0.1667 = 0.8334 GPU-hours of a job shown as 0.8333; exact
/// GPU-hours have no finite decimal (a ms is 1/3 600 000 h). So the rows are rounded
/// together, level by level of `group_by` (`split::round_nested`): they add up to the
/// figure the same question grouped by the leading keys shows, and to its total. A
/// consumer that computes with GPU time reads the exact `gpu_ms` beside it.
fn shown_gpu_hours(rows: &[usage::UsageRow], group_by: &[GroupBy]) -> Vec<Decimal> {
    type Key<'a> = (Option<&'a str>, Option<DateTime<Utc>>);
    let paths: Vec<Vec<Key>> = rows
        .iter()
        .map(|r| {
            group_by
                .iter()
                .map(|g| match g {
                    GroupBy::Tenant => (r.tenant.as_deref(), None),
                    GroupBy::Job => (r.job.as_deref(), None),
                    GroupBy::Model => (r.model.as_deref(), None),
                    GroupBy::Site => (r.site.as_deref(), None),
                    GroupBy::EndState => (r.end_state.as_deref(), None),
                    GroupBy::Phase => (r.phase.as_deref(), None),
                    GroupBy::Hour => (None, r.period),
                    // A row's period is its hour where the query groups by hour too.
                    GroupBy::Day => (
                        None,
                        r.period
                            .map(|p| p.date_naive().and_time(NaiveTime::MIN).and_utc()),
                    ),
                })
                .collect()
        })
        .collect();
    let ms: Vec<i64> = rows.iter().map(|r| r.gpu_ms.max(0)).collect();
    round_nested(&paths, &ms, GPU_HOUR_UNIT_MS)
        .into_iter()
        .map(|units| Decimal::new(units, GPU_HOURS_DP).normalize())
        .collect()
}

/// A job: its row, with the figures derived from it.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobOut {
    #[serde(flatten)]
    pub job: jobs::JobRow,
    /// Energy attributed to the caller's view of the job (a tenant sees its own share).
    #[schema(value_type = String)]
    pub kwh: Decimal,
    /// The four parts of `energy`, summed.
    pub total_mj: i64,
    /// What the job's figures rest on (the caller's share of it).
    #[serde(flatten)]
    pub quality: DataQuality,
}

impl From<jobs::JobRow> for JobOut {
    fn from(job: jobs::JobRow) -> Self {
        JobOut {
            quality: DataQuality::of(&job.energy, &job.coverage),
            kwh: kwh(job.energy.total_mj()).round_dp(6),
            total_mj: job.energy.total_mj(),
            job,
        }
    }
}

#[utoipa::path(get, path = "/v1/jobs/{key}", tag = "query",
    params(("key" = String, Path, description = "Job key")),
    responses((status = 200, body = JobOut), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_job(
    State(state): State<AppState>,
    caller: Caller,
    Path(key): Path<String>,
) -> ApiResult<Json<JobOut>> {
    caller.require(READERS)?;
    Ok(Json(
        jobs::get(&state.pool, &caller.scope, &key).await?.into(),
    ))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct JobListParams {
    #[serde(default, deserialize_with = "input::de::opt_time")]
    pub from: Option<DateTime<Utc>>,
    #[serde(default, deserialize_with = "input::de::opt_time")]
    pub to: Option<DateTime<Utc>>,
    /// At most this many jobs (1 to 1000, default 100), biggest energy first.
    pub limit: Option<u16>,
}

#[utoipa::path(get, path = "/v1/jobs", tag = "query", params(JobListParams),
    responses((status = 200, body = [JobOut]), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn list_jobs(
    State(state): State<AppState>,
    caller: Caller,
    Query(p): Query<JobListParams>,
) -> ApiResult<Json<Vec<JobOut>>> {
    caller.require(READERS)?;
    let (from, to) = range(p.from, p.to)?;
    let limit = i64::from(p.limit.unwrap_or(100).clamp(1, 1000));
    let rows = jobs::list(&state.pool, &caller.scope, from, to, limit).await?;
    Ok(Json(rows.into_iter().map(JobOut::from).collect()))
}

#[utoipa::path(get, path = "/v1/sites", tag = "query",
    responses((status = 200, body = [inventory::SiteRow]), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn list_sites(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<Vec<inventory::SiteRow>>> {
    caller.require(&[
        Role::Finance,
        Role::Operator,
        Role::Tenant,
        Role::Scheduler,
        Role::Collector,
    ])?;
    Ok(Json(inventory::list_sites(&state.pool).await?))
}

#[utoipa::path(get, path = "/v1/tenants", tag = "query",
    responses((status = 200, body = [inventory::TenantRow]), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn list_tenants(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<Vec<inventory::TenantRow>>> {
    caller.require(READERS)?;
    Ok(Json(
        inventory::list_tenants(&state.pool, &caller.scope).await?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(period: &str, gpu_ms: i64) -> usage::UsageRow {
        usage::UsageRow {
            period: Some(period.parse().unwrap()),
            gpu_ms,
            ..usage::UsageRow::default()
        }
    }

    #[test]
    fn hours_add_up_to_the_days_shown_by_a_day_grouping() {
        // Thirds of an hour of GPU time: 0.3333 each on its own, three of them 1.0.
        let third = 1_200_000;
        let hours = [
            row("2026-11-02T10:00:00Z", third),
            row("2026-11-02T11:00:00Z", third),
            row("2026-11-03T10:00:00Z", third),
            row("2026-11-03T11:00:00Z", third),
            row("2026-11-03T12:00:00Z", third),
        ];
        let by_hour = shown_gpu_hours(&hours, &[GroupBy::Day, GroupBy::Hour]);
        let days = [
            row("2026-11-02T00:00:00Z", 2 * third),
            row("2026-11-03T00:00:00Z", 3 * third),
        ];
        let by_day = shown_gpu_hours(&days, &[GroupBy::Day]);
        assert_eq!(by_day, [Decimal::new(6667, 4), Decimal::ONE]);
        assert_eq!(by_hour[0] + by_hour[1], by_day[0]);
        assert_eq!(by_hour[2..].iter().copied().sum::<Decimal>(), by_day[1]);
    }
}
