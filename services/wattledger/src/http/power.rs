//! A site's power as operators and the grid see it. `GET /v1/power/headroom`: per site, day
//! and class of meters (the site's IT meters, the GPUs per kind of job holding them), how
//! far the parts' peaks coincide and how much more provisioned peak would fit in what they
//! draw at a percentile of the minutes (`domain::headroom`). `GET /v1/power/grid`: per site
//! and day, its peak, peak-to-average ratio, largest rises and falls within 1 and 15
//! minutes, and minutes above its envelope (`domain::load_shape`). For operators: both
//! show every tenant's draw together.

use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{Caller, Query};
use crate::auth::Role;
use crate::state::AppState;
use crate::views::power::{self as power_view, SiteGrid, SiteHeadroom};
use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Duration, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use wattledger_domain::headroom::{self, PowerClass};
use wattledger_domain::input;
use wattledger_store::{inventory, power};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HeadroomParams {
    /// Site key; default every site.
    pub site: Option<String>,
    /// Start (RFC 3339, inclusive); default 7 days before `to`.
    #[serde(default, deserialize_with = "input::de::opt_time")]
    pub from: Option<DateTime<Utc>>,
    /// End (RFC 3339, exclusive); default now.
    #[serde(default, deserialize_with = "input::de::opt_time")]
    pub to: Option<DateTime<Utc>>,
    /// The percentile of the minutes the headroom is stated at, in (0, 100]; default 99.9.
    pub percentile: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct HeadroomResponse {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    #[schema(value_type = String)]
    pub percentile: Decimal,
    pub sites: Vec<SiteHeadroom>,
}

#[utoipa::path(get, path = "/v1/power/headroom", tag = "power", params(HeadroomParams),
    responses((status = 200, body = HeadroomResponse), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_headroom(
    State(state): State<AppState>,
    caller: Caller,
    Query(p): Query<HeadroomParams>,
) -> ApiResult<Json<HeadroomResponse>> {
    caller.require(&[Role::Operator])?;
    let percentile = percentile(p.percentile.as_deref())?;
    let (from, to) = super::extract::span_of(p.from, p.to, Duration::days(7))?;
    let site_id = super::extract::site_filter(&state.pool, p.site.as_ref()).await?;
    let rows = power::hours(&state.pool, site_id, from, to, None).await?;
    Ok(Json(HeadroomResponse {
        from,
        to,
        percentile,
        sites: power_view::by_site(&rows, percentile),
    }))
}

/// The `percentile` parameter: a decimal in (0, 100], 99.9 when absent.
pub(crate) fn percentile(p: Option<&str>) -> ApiResult<Decimal> {
    let Some(text) = p else {
        return Ok(headroom::DEFAULT_PERCENTILE);
    };
    text.parse::<Decimal>()
        .ok()
        .filter(|p| *p > Decimal::ZERO && *p <= Decimal::ONE_HUNDRED)
        .map(|p| p.normalize())
        .ok_or_else(|| {
            ApiError::InvalidQuery("percentile: a number above 0 and at most 100".into())
        })
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct GridParams {
    /// Site key; default every site.
    pub site: Option<String>,
    /// Start (RFC 3339, inclusive); default 7 days before `to`.
    #[serde(default, deserialize_with = "input::de::opt_time")]
    pub from: Option<DateTime<Utc>>,
    /// End (RFC 3339, exclusive); default now.
    #[serde(default, deserialize_with = "input::de::opt_time")]
    pub to: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct GridResponse {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub sites: Vec<SiteGrid>,
}

#[utoipa::path(get, path = "/v1/power/grid", tag = "power", params(GridParams),
    responses((status = 200, body = GridResponse), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_grid(
    State(state): State<AppState>,
    caller: Caller,
    Query(p): Query<GridParams>,
) -> ApiResult<Json<GridResponse>> {
    caller.require(&[Role::Operator])?;
    let (from, to) = super::extract::span_of(p.from, p.to, Duration::days(7))?;
    let site_id = super::extract::site_filter(&state.pool, p.site.as_ref()).await?;
    let classes = [PowerClass::Facility.as_str(), PowerClass::It.as_str()];
    let rows = power::hours(&state.pool, site_id, from, to, Some(&classes)).await?;
    Ok(Json(GridResponse {
        from,
        to,
        sites: power_view::grid_sites(&rows, &inventory::list_sites(&state.pool).await?),
    }))
}
