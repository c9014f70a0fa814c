//! Site power profiles (migration 0024): each site-hour's per-minute draw and parts' peak per
//! class of meters, written by attribution and read for measured headroom.

use crate::StoreResult;
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use wattledger_domain::headroom::{HourProfile, PowerClass};

/// One site-hour's profile of one class.
#[derive(Debug, Clone)]
pub struct PowerHour {
    pub site: String,
    pub hour: DateTime<Utc>,
    pub class: PowerClass,
    pub profile: HourProfile,
    /// The site-hour's metered site energy (`site_hours.site_mj`).
    pub site_mj: Option<i64>,
}

/// A row as stored.
struct Row {
    site: String,
    hour: DateTime<Utc>,
    class: PowerClass,
    minutes_mw: Vec<Option<i64>>,
    parts_peak_mw: i64,
    site_mj: Option<i64>,
}

impl Row {
    fn parse(self) -> Option<PowerHour> {
        Some(PowerHour {
            site: self.site,
            hour: self.hour,
            class: self.class,
            profile: HourProfile {
                minutes_mw: self.minutes_mw,
                parts_peak_mw: self.parts_peak_mw,
            },
            site_mj: self.site_mj,
        })
    }
}

/// The profiles of the hours in `[from, to)`, of one site or every site, of the given
/// classes or all, in site and hour order.
pub async fn hours(
    pool: &PgPool,
    site_id: Option<i64>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    classes: Option<&[&str]>,
) -> StoreResult<Vec<PowerHour>> {
    Ok(sqlx::query_as!(
        Row,
        r#"SELECT s.key AS site, p.hour, p.class AS "class: PowerClass",
                  p.minutes_mw AS "minutes_mw: Vec<Option<i64>>", p.parts_peak_mw,
                  h.site_mj AS "site_mj?"
           FROM site_hour_power p JOIN sites s ON s.id = p.site_id
           LEFT JOIN site_hours h ON h.site_id = p.site_id AND h.hour = p.hour
           WHERE p.hour >= $1 AND p.hour < $2 AND ($3::bigint IS NULL OR p.site_id = $3)
             AND ($4::text[] IS NULL OR p.class = ANY($4))
           ORDER BY s.key, p.hour, p.class"#,
        from,
        to,
        site_id,
        classes as Option<&[&str]>,
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .filter_map(Row::parse)
    .collect())
}

/// The profiles of given site-hours (by site key), of the given classes: one site's latest
/// hour each for `/metrics`, however far apart their hours are.
pub async fn at(
    pool: &PgPool,
    hours: &[(String, DateTime<Utc>)],
    classes: &[&str],
) -> StoreResult<Vec<PowerHour>> {
    Ok(sqlx::query_as!(
        Row,
        r#"SELECT s.key AS site, p.hour, p.class AS "class: PowerClass",
                  p.minutes_mw AS "minutes_mw: Vec<Option<i64>>", p.parts_peak_mw,
                  h.site_mj AS "site_mj?"
           FROM UNNEST($1::text[], $2::timestamptz[]) AS l(site, hour)
           JOIN sites s ON s.key = l.site
           JOIN site_hour_power p ON p.site_id = s.id AND p.hour = l.hour
           LEFT JOIN site_hours h ON h.site_id = p.site_id AND h.hour = p.hour
           WHERE p.class = ANY($3)
           ORDER BY s.key, p.hour, p.class"#,
        &hours.iter().map(|h| h.0.clone()).collect::<Vec<_>>(),
        &hours.iter().map(|h| h.1).collect::<Vec<_>>(),
        classes as &[&str],
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .filter_map(Row::parse)
    .collect())
}
