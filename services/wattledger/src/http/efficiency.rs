//! `GET /v1/metrics/efficiency`: per site and hour (or day), the figures operators report —
//! tokens per kWh on total and IT energy, PUE, ITUE, TUE, the idle and allocated-GPU
//! fractions, the carbon and cost intensity the site actually ran at, and tokens per second
//! per MW of its peak draw and of its envelope.
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
use wattledger_domain::input;
use wattledger_domain::metrics::{self, efficiency, EnergyTotals};
use wattledger_domain::units::watts;
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

#[derive(Debug, Serialize, ToSchema)]
pub struct EfficiencyResponse {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub per: String,
    pub rows: Vec<EfficiencyRow>,
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
    }))
}
