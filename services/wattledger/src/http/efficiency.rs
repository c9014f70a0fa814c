//! `GET /v1/metrics/efficiency`: per site and hour (or day), the figures operators report —
//! tokens per kWh on total and IT energy, PUE, ITUE, TUE, the idle and allocated-GPU
//! fractions, the carbon and cost intensity the site actually ran at, and tokens per second
//! per MW of its peak draw and of its envelope.
//!
//! With `group_by` (any of `model`, `device`, `site`), the figures are per served model and
//! GPU device model instead, from the ledger of production serving, not a lab benchmark:
//! which GPU generation serves a model most efficiently.
//!
//! Site-wide figures reveal every tenant's use together, so this is for operators and
//! finance; tenants see their own efficiency in `/v1/usage`.

use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{Caller, Query};
use crate::auth::Role;
use crate::state::AppState;
use crate::views::site_efficiency::SiteEfficiency;
use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Duration, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use utoipa::{IntoParams, ToSchema};
use wattledger_domain::device_model;
use wattledger_domain::input;
use wattledger_domain::metrics::{self, efficiency, EnergyTotals};
use wattledger_domain::units::{kwh, watts};
use wattledger_store::devices::{self, DeviceGrouping, DeviceUsage};
use wattledger_store::usage::{self, GroupBy, UsageFilter};
use wattledger_store::Scope;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EfficiencyParams {
    /// Start (RFC 3339, inclusive); default 24 hours before `to`.
    #[serde(default, deserialize_with = "input::de::opt_time")]
    pub from: Option<DateTime<Utc>>,
    /// End (RFC 3339, exclusive); default now.
    #[serde(default, deserialize_with = "input::de::opt_time")]
    pub to: Option<DateTime<Utc>>,
    /// Site key; default every site.
    pub site: Option<String>,
    /// `hour` (default) or `day`.
    pub per: Option<String>,
    /// Comma-separated: any of `model`, `device`, `site`. Given, the answer is `groups`
    /// (energy and tokens per served model and GPU device model) instead of site `rows`.
    pub group_by: Option<String>,
}

/// A site's period: its energy and effectiveness, and what the energy yielded.
#[derive(Debug, Serialize, ToSchema)]
pub struct EfficiencyRow {
    #[serde(flatten)]
    pub site: SiteEfficiency,
    pub tokens: i64,
    #[schema(value_type = Option<String>)]
    pub tokens_per_kwh: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub tokens_per_kwh_it: Option<Decimal>,
    /// Operational carbon of the period, g CO2e (average intensity).
    #[schema(value_type = Option<String>)]
    pub carbon_g: Option<Decimal>,
    /// The intensity the site ran at: carbon / kWh (of the energy carbon covers).
    #[schema(value_type = Option<String>)]
    pub g_co2e_per_kwh: Option<Decimal>,
    /// Energy cost per currency.
    #[schema(value_type = BTreeMap<String, String>)]
    pub cost: BTreeMap<String, Decimal>,
    /// The period's highest one-minute site draw, W: the facility meters' where the site has
    /// them, else the IT meters' × static PUE.
    #[schema(value_type = Option<String>)]
    pub site_peak_w: Option<Decimal>,
    /// Tokens per second per MW of that peak: the headline of a power-bound site.
    #[schema(value_type = Option<String>)]
    pub tokens_per_s_per_mw_peak: Option<Decimal>,
    /// Tokens per second per MW of the site's power envelope.
    #[schema(value_type = Option<String>)]
    pub tokens_per_s_per_mw_envelope: Option<Decimal>,
}

/// A served model on one GPU device model (and site): the energy of the rows that served
/// it there and the tokens they processed, a job spanning device models split by GPU energy.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeviceEfficiency {
    pub model: Option<String>,
    /// The device model as the GPU meters report it.
    pub device: Option<String>,
    /// Its generation, short (`H100`, `MI300X`).
    pub generation: Option<String>,
    pub site: Option<String>,
    /// Energy with its facility and idle shares, as the ledger bills it.
    #[schema(value_type = String)]
    pub kwh: Decimal,
    #[schema(value_type = String)]
    pub gpu_kwh: Decimal,
    pub prompt_tokens: i64,
    pub generated_tokens: i64,
    pub tokens: i64,
    #[schema(value_type = Option<String>)]
    pub tokens_per_kwh: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub joules_per_token: Option<Decimal>,
    /// Tokens per kWh of GPU energy alone: the device's own efficiency, before the site's.
    #[schema(value_type = Option<String>)]
    pub tokens_per_gpu_kwh: Option<Decimal>,
    pub jobs: i64,
    pub tenants: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EfficiencyResponse {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub per: String,
    /// Per site and period; empty when grouped.
    pub rows: Vec<EfficiencyRow>,
    /// Per model and device model, when `group_by` is given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<DeviceEfficiency>>,
}

#[utoipa::path(get, path = "/v1/metrics/efficiency", tag = "query", params(EfficiencyParams),
    responses((status = 200, body = EfficiencyResponse), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_efficiency(
    State(state): State<AppState>,
    caller: Caller,
    Query(p): Query<EfficiencyParams>,
) -> ApiResult<Json<EfficiencyResponse>> {
    caller.require(&[Role::Operator, Role::Finance])?;
    let (per, group) = match p.per.as_deref().unwrap_or("hour") {
        "hour" => ("hour", GroupBy::Hour),
        "day" => ("day", GroupBy::Day),
        other => {
            return Err(ApiError::InvalidQuery(format!(
                "per: '{other}' is neither hour nor day"
            )))
        }
    };
    let (from, to) = super::extract::span_of(p.from, p.to, Duration::hours(24))?;
    let site_id = super::extract::site_filter(&state.pool, p.site.as_ref()).await?;
    if let Some(by) = p.group_by.as_deref() {
        let by = parse_group_by(by)?;
        let groups = devices::usage(&state.pool, by, from, to, site_id).await?;
        return Ok(Json(EfficiencyResponse {
            from,
            to,
            per: per.into(),
            rows: Vec::new(),
            groups: Some(groups.into_iter().map(device_efficiency).collect()),
        }));
    }
    let filter = UsageFilter {
        from: Some(from),
        to: Some(to),
        site_id,
        ..Default::default()
    };
    let sites = usage::site_totals(&state.pool, &filter, Some(group)).await?;
    let ledger = usage::usage(&state.pool, &Scope::All, &[GroupBy::Site, group], &filter).await?;
    let by_key: HashMap<(String, Option<DateTime<Utc>>), &usage::UsageRow> = ledger
        .iter()
        .filter_map(|r| Some(((r.site.clone()?, r.period), r)))
        .collect();
    let rows = sites
        .into_iter()
        .map(|s| {
            let l = by_key.get(&(s.site.clone(), s.period));
            let tokens = l.map_or(0, |l| l.tokens());
            let e = efficiency(EnergyTotals {
                total_mj: s.site_mj,
                it_mj: s.it_mj,
                gpu_mj: s.gpu_mj,
                idle_mj: s.idle_mj,
                tokens,
                ..Default::default()
            });
            let carbon_g = l.and_then(|l| l.carbon_g);
            let carbon_mj = l.map_or(0, |l| l.coverage.carbon_mj);
            EfficiencyRow {
                site: SiteEfficiency::of(&s, true),
                tokens,
                tokens_per_kwh: e.tokens_per_kwh,
                tokens_per_kwh_it: e.tokens_per_kwh_it,
                carbon_g: carbon_g.map(|g| g.round_dp(3).normalize()),
                g_co2e_per_kwh: metrics::g_co2e_per_kwh(carbon_g, carbon_mj),
                cost: l
                    .map(|l| {
                        l.cost_currencies
                            .iter()
                            .flatten()
                            .cloned()
                            .zip(
                                l.cost_amounts
                                    .iter()
                                    .flatten()
                                    .map(|a| a.round_dp(6).normalize()),
                            )
                            .collect()
                    })
                    .unwrap_or_default(),
                site_peak_w: s.site_peak_mw.map(watts),
                tokens_per_s_per_mw_peak: s
                    .site_peak_mw
                    .and_then(|mw| metrics::tokens_per_s_per_mw(tokens, s.hours, mw)),
                tokens_per_s_per_mw_envelope: metrics::tokens_per_s_per_mw(
                    tokens,
                    s.hours,
                    s.envelope_w.saturating_mul(1000),
                ),
            }
        })
        .collect();
    Ok(Json(EfficiencyResponse {
        from,
        to,
        per: per.into(),
        rows,
        groups: None,
    }))
}

fn parse_group_by(s: &str) -> ApiResult<DeviceGrouping> {
    let mut by = DeviceGrouping::default();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part {
            "model" => by.model = true,
            "device" => by.device = true,
            "site" => by.site = true,
            other => {
                return Err(ApiError::InvalidQuery(format!(
                    "group_by: unknown '{other}'; use any of model, device, site"
                )))
            }
        }
    }
    if by == DeviceGrouping::default() {
        return Err(ApiError::InvalidQuery(
            "group_by: name at least one of model, device, site".into(),
        ));
    }
    Ok(by)
}

fn device_efficiency(d: DeviceUsage) -> DeviceEfficiency {
    let tokens = d.prompt_tokens + d.generated_tokens;
    DeviceEfficiency {
        generation: d.device_model.as_deref().map(device_model::generation),
        model: d.model,
        device: d.device_model,
        site: d.site,
        kwh: kwh(d.total_mj).round_dp(6).normalize(),
        gpu_kwh: kwh(d.gpu_mj).round_dp(6).normalize(),
        prompt_tokens: d.prompt_tokens,
        generated_tokens: d.generated_tokens,
        tokens,
        tokens_per_kwh: metrics::tokens_per_kwh(tokens, d.total_mj),
        joules_per_token: metrics::joules_per_token(d.total_mj, tokens),
        tokens_per_gpu_kwh: metrics::tokens_per_kwh(tokens, d.gpu_mj),
        jobs: d.jobs,
        tenants: d.tenants,
    }
}
