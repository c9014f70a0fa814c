//! A site's power as operators and the grid see it. `GET /v1/power/headroom`: per site, day
//! and class of meters (the site's IT meters, the GPUs per kind of job holding them), how
//! far the parts' peaks coincide and how much more provisioned peak would fit in what they
//! draw at a percentile of the minutes (`domain::headroom`). `GET /v1/power/grid`: per site
//! and day, its peak, peak-to-average ratio, largest rises and falls within 1 and 15
//! minutes, and minutes above its envelope (`domain::load_shape`). For operators: both
//! show every tenant's draw together.

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
use wattledger_domain::load_shape::{self, DayLoad, LoadShape, SiteHour};
use wattledger_domain::units::watts;
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
    /// The parts' peak, W: the highest, over the hours' minutes, of the sum of the own peaks
    /// (over their hour) of the meters reporting in that minute.
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
    let rows = power::hours(&state.pool, site_id, from, to, None).await?;
    Ok(Json(HeadroomResponse {
        from,
        to,
        percentile,
        sites: by_site(&rows, percentile),
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
pub(crate) fn by_site(rows: &[power::PowerHour], percentile: Decimal) -> Vec<SiteHeadroom> {
    let mut sites: BTreeMap<&str, Vec<(i64, PowerClass, HourProfile)>> = BTreeMap::new();
    for r in rows {
        sites.entry(&r.site).or_default().push((
            r.hour.timestamp_micros(),
            r.class,
            r.profile.clone(),
        ));
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
                site: site.to_owned(),
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

/// One site-day's load shape. The site's power per minute is its facility meters' draw
/// where it has them, else its IT meters' × static PUE.
#[derive(Debug, Serialize, ToSchema)]
pub struct GridDay {
    pub day: DateTime<Utc>,
    /// Minutes with a reading.
    pub minutes: usize,
    #[schema(value_type = String)]
    pub peak_w: Decimal,
    /// Mean power from metered site energy over the hours measured.
    #[schema(value_type = Option<String>)]
    pub mean_w: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub peak_to_average: Option<Decimal>,
    /// The largest rise and fall between minutes at most 1 and 15 minutes apart, W; null
    /// when no two minutes that close were measured (e.g. readings 5 minutes apart).
    #[schema(value_type = Option<String>)]
    pub rise_1m_w: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub fall_1m_w: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub rise_15m_w: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub fall_15m_w: Option<Decimal>,
    /// Minutes above the envelope.
    pub minutes_over_envelope: usize,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SiteGrid {
    pub site: String,
    pub envelope_w: i64,
    pub days: Vec<GridDay>,
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
        sites: load_shapes(&rows, &inventory::list_sites(&state.pool).await?)
            .into_iter()
            .map(|(site, envelope_w, days)| SiteGrid {
                site,
                envelope_w,
                days: days
                    .into_iter()
                    .filter_map(|(day, s)| {
                        Some(grid_day(DateTime::from_timestamp_micros(day)?, &s.shape))
                    })
                    .collect(),
            })
            .collect(),
    }))
}

/// Each site's (key, envelope W) load per day, from the facility and IT profiles among
/// `rows` and their metered energy (other classes' rows are passed over).
pub(crate) fn load_shapes(
    rows: &[power::PowerHour],
    sites: &[inventory::SiteRow],
) -> Vec<(String, i64, BTreeMap<i64, DayLoad>)> {
    // Per site, per hour: its facility and IT profiles and its metered energy.
    type Hour<'a> = (
        Option<&'a HourProfile>,
        Option<&'a HourProfile>,
        Option<i64>,
    );
    let mut by_site: BTreeMap<&str, BTreeMap<i64, Hour>> = BTreeMap::new();
    for r in rows {
        let hour = by_site
            .entry(&r.site)
            .or_default()
            .entry(r.hour.timestamp_micros())
            .or_default();
        match r.class {
            PowerClass::Facility => hour.0 = Some(&r.profile),
            PowerClass::It => hour.1 = Some(&r.profile),
            PowerClass::Job(_) => continue,
        }
        hour.2 = r.site_mj;
    }
    by_site
        .into_iter()
        .filter_map(|(key, hours)| {
            let site = sites.iter().find(|s| s.key == key)?;
            let hours: Vec<SiteHour> = hours
                .into_iter()
                .filter_map(|(hour_us, (f, it, site_mj))| {
                    Some(SiteHour {
                        hour_us,
                        minutes_mw: load_shape::site_minutes(f, it, site.static_pue)?,
                        site_mj,
                    })
                })
                .collect();
            let envelope_mw = site.power_envelope_w.saturating_mul(1000);
            Some((
                key.to_owned(),
                site.power_envelope_w,
                load_shape::daily(&hours, envelope_mw),
            ))
        })
        .collect()
}

fn grid_day(day: DateTime<Utc>, s: &LoadShape) -> GridDay {
    GridDay {
        day,
        minutes: s.minutes,
        peak_w: watts(s.peak_mw),
        mean_w: s.mean_mw.map(watts),
        peak_to_average: s.peak_to_average,
        rise_1m_w: s.rise_1m_mw.map(watts),
        fall_1m_w: s.fall_1m_mw.map(watts),
        rise_15m_w: s.rise_15m_mw.map(watts),
        fall_15m_w: s.fall_15m_mw.map(watts),
        minutes_over_envelope: s.over_envelope,
    }
}

/// Each site's load shape over its latest attributed hour (what `/metrics` reports of it).
pub(crate) async fn latest_hour_shapes(
    pool: &sqlx::PgPool,
    latest: &[wattledger_store::usage::LatestHour],
) -> wattledger_store::StoreResult<BTreeMap<String, LoadShape>> {
    let classes = [PowerClass::Facility.as_str(), PowerClass::It.as_str()];
    let hours: Vec<(String, DateTime<Utc>)> =
        latest.iter().map(|l| (l.site.clone(), l.hour)).collect();
    let rows = power::at(pool, &hours, &classes).await?;
    Ok(latest
        .iter()
        .filter_map(|l| {
            let of = |class: PowerClass| {
                rows.iter()
                    .find(|r| r.site == l.site && r.hour == l.hour && r.class == class)
                    .map(|r| &r.profile)
            };
            let minutes = load_shape::site_minutes(
                of(PowerClass::Facility),
                of(PowerClass::It),
                l.static_pue,
            )?;
            // mJ over an hour as mW.
            let mean = Some(l.site_mj / 3_600);
            let shape = load_shape::load_shape(&minutes, mean, l.envelope_w.saturating_mul(1000))?;
            Some((l.site.clone(), shape))
        })
        .collect())
}
