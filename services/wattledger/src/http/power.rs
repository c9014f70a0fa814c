//! `GET /v1/power/headroom`: per site, day and class of meters (the site's IT meters, the
//! GPUs per kind of job holding them), how far the parts' peaks coincide and how much more
//! provisioned peak would fit in what they draw at a percentile of the minutes
//! (`domain::headroom` defines each figure). For operators: it shows every tenant's draw.

use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{Caller, Query};
use super::AppState;
use crate::auth::Role;
use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Duration, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::{IntoParams, ToSchema};
use wattledger_domain::headroom::{self, Headroom, HourProfile, PowerClass};
use wattledger_domain::input;
use wattledger_domain::units::watts;
use wattledger_store::power;

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

/// One class's figures over a day or the whole span.
#[derive(Debug, Serialize, ToSchema)]
pub struct HeadroomOut {
    /// `it` (the site's IT meters) or a job kind (the GPUs its jobs held).
    pub class: String,
    /// Minutes with a reading.
    pub minutes: usize,
    /// The highest minute's draw, W.
    #[schema(value_type = String)]
    pub coincident_peak_w: Decimal,
    /// The draw at the percentile of the minutes, W.
    #[schema(value_type = String)]
    pub percentile_peak_w: Decimal,
    /// The highest hour's sum of each meter's own peak, W.
    #[schema(value_type = String)]
    pub parts_peak_w: Decimal,
    /// Coincident peak / parts' peak.
    #[schema(value_type = String)]
    pub coincidence_factor: Decimal,
    /// Parts' peak / percentile peak − 1: the share of over-subscription the measured draw
    /// leaves room for.
    #[schema(value_type = String)]
    pub headroom: Decimal,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct HeadroomDay {
    pub day: DateTime<Utc>,
    pub classes: Vec<HeadroomOut>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SiteHeadroom {
    pub site: String,
    /// Over the whole span.
    pub span: Vec<HeadroomOut>,
    pub days: Vec<HeadroomDay>,
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
    let rows = power::hours(&state.pool, site_id, from, to).await?;
    Ok(Json(HeadroomResponse {
        from,
        to,
        percentile,
        sites: by_site(rows, percentile),
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

/// Each site's headroom per day and over the span, from its stored hour profiles.
pub(crate) fn by_site(rows: Vec<power::PowerHour>, percentile: Decimal) -> Vec<SiteHeadroom> {
    let mut sites: BTreeMap<String, Vec<(i64, PowerClass, HourProfile)>> = BTreeMap::new();
    for r in rows {
        let Some(class) = PowerClass::parse(&r.class) else {
            continue;
        };
        let profile = HourProfile {
            minutes_mw: r.minutes_mw,
            parts_peak_mw: r.parts_peak_mw,
        };
        sites
            .entry(r.site)
            .or_default()
            .push((r.hour.timestamp_micros(), class, profile));
    }
    sites
        .into_iter()
        .map(|(site, hours)| {
            let mut span = Vec::new();
            let mut days: BTreeMap<i64, Vec<HeadroomOut>> = BTreeMap::new();
            for ((day, class), h) in headroom::daily(&hours, percentile) {
                let out = out(class, &h);
                match day {
                    Some(d) => days.entry(d).or_default().push(out),
                    None => span.push(out),
                }
            }
            SiteHeadroom {
                site,
                span,
                days: days
                    .into_iter()
                    .filter_map(|(d, classes)| {
                        Some(HeadroomDay {
                            day: DateTime::from_timestamp_micros(d)?,
                            classes,
                        })
                    })
                    .collect(),
            }
        })
        .collect()
}

fn out(class: PowerClass, h: &Headroom) -> HeadroomOut {
    HeadroomOut {
        class: class.as_str().into(),
        minutes: h.minutes,
        coincident_peak_w: watts(h.coincident_peak_mw),
        percentile_peak_w: watts(h.percentile_peak_mw),
        parts_peak_w: watts(h.parts_peak_mw),
        coincidence_factor: h.coincidence_factor.normalize(),
        headroom: h.headroom.normalize(),
    }
}
