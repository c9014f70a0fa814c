//! A site's power as the API, the dashboard and `/metrics` show it: headroom per day and
//! class of meters (`domain::headroom`) and load shape per day (`domain::load_shape`),
//! computed from the stored hour profiles.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::Serialize;
use std::collections::BTreeMap;
use utoipa::ToSchema;
use wattledger_domain::headroom::{self, Headroom, HourProfile, PowerClass};
use wattledger_domain::load_shape::{self, DayLoad, LoadShape, SiteHour};
use wattledger_domain::units::watts;
use wattledger_store::{inventory, power};

/// One class's figures over a day or the whole span.
#[derive(Debug, Serialize, ToSchema)]
pub struct HeadroomOut {
    /// `it` (the site's IT meters) or a job kind (the GPUs its jobs held).
    #[schema(value_type = String)]
    pub class: PowerClass,
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

/// Each site's headroom per day and over the span, from its stored hour profiles.
pub fn by_site(rows: &[power::PowerHour], percentile: Decimal) -> Vec<SiteHeadroom> {
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
        class,
        minutes: h.minutes,
        coincident_peak_w: watts(h.coincident_peak_mw),
        percentile_peak_w: watts(h.percentile_peak_mw),
        parts_peak_w: watts(h.parts_peak_mw),
        coincidence_factor: h.coincidence_factor.normalize(),
        headroom: h.headroom.normalize(),
    }
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

/// Each site's (key, envelope W) load per day, from the facility and IT profiles among
/// `rows` and their metered energy (other classes' rows are passed over).
pub fn load_shapes(
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

/// Each site's load shape per day, as the API shows it.
pub fn grid_sites(rows: &[power::PowerHour], sites: &[inventory::SiteRow]) -> Vec<SiteGrid> {
    load_shapes(rows, sites)
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
pub async fn latest_hour_shapes(
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
