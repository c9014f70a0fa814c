//! Electricity prices a site states itself: a time-of-use tariff (seasons of months, bands
//! of weekdays and hours, a price per kWh each) and a plain CSV of prices.
//!
//! A tariff is written in local time at a fixed UTC offset; daylight-saving switches are not
//! modelled (a site on a DST tariff states the offset of the season, or sends prices as CSV).

use crate::{parse_time, SignalError};
use chrono::{DateTime, Datelike, Duration, FixedOffset, Timelike, Utc, Weekday};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use std::str::FromStr;
use wattledger_domain::signals::{Point, Series, Signal, Status};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tariff {
    pub currency: String,
    #[serde(default)]
    pub utc_offset_minutes: i32,
    /// The first season whose months hold the local date applies.
    pub seasons: Vec<Season>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Season {
    /// Months 1–12.
    pub months: Vec<u32>,
    /// Price per kWh outside every band.
    pub price: Decimal,
    #[serde(default)]
    pub bands: Vec<Band>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Band {
    /// `weekdays`, `weekends`, `all`, or day names (`mon` … `sun`).
    pub days: Vec<String>,
    /// Local hours `[from, to)`, 0–24; `from > to` wraps past midnight (`[22, 6]`).
    pub hours: [u32; 2],
    pub price: Decimal,
}

/// Why a tariff does not hold: each names the season (and band) by its position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TariffError {
    #[error("currency {0:?} is not an ISO 4217 code")]
    Currency(String),
    /// Every month must be in a season, or some hours would have no price.
    #[error("month {0} is in no season")]
    MonthWithoutSeason(u32),
    #[error("season {season}: month {month} is not 1–12")]
    Month { season: usize, month: u32 },
    #[error("season {season} band {band}: hours {hours:?} are not two different hours 0–24")]
    Hours {
        season: usize,
        band: usize,
        hours: [u32; 2],
    },
    #[error(
        "season {season} band {band}: day {day:?} is none of all, weekdays, weekends, mon … sun"
    )]
    Day {
        season: usize,
        band: usize,
        day: String,
    },
}

fn weekday(name: &str) -> Option<Weekday> {
    Weekday::from_str(name).ok()
}

impl Band {
    fn holds(&self, day: Weekday, hour: u32) -> bool {
        let day_ok = self.days.iter().any(|d| match d.as_str() {
            "all" => true,
            "weekdays" => day.num_days_from_monday() < 5,
            "weekends" => day.num_days_from_monday() >= 5,
            other => weekday(other) == Some(day),
        });
        let [from, to] = self.hours;
        let hour_ok = if from <= to {
            (from..to).contains(&hour)
        } else {
            hour >= from || hour < to
        };
        day_ok && hour_ok
    }
}

impl Tariff {
    /// Every month covered once, days and hours that exist.
    pub fn check(&self) -> Result<(), TariffError> {
        if self.currency.len() != 3 || !self.currency.chars().all(|c| c.is_ascii_uppercase()) {
            return Err(TariffError::Currency(self.currency.clone()));
        }
        for m in 1..=12 {
            if !self.seasons.iter().any(|s| s.months.contains(&m)) {
                return Err(TariffError::MonthWithoutSeason(m));
            }
        }
        for (season, s) in self.seasons.iter().enumerate() {
            if let Some(&month) = s.months.iter().find(|m| !(1..=12).contains(*m)) {
                return Err(TariffError::Month { season, month });
            }
            for (band, b) in s.bands.iter().enumerate() {
                if b.hours.iter().any(|h| *h > 24) || b.hours[0] == b.hours[1] {
                    return Err(TariffError::Hours {
                        season,
                        band,
                        hours: b.hours,
                    });
                }
                if let Some(d) = b.days.iter().find(|d| {
                    !matches!(d.as_str(), "all" | "weekdays" | "weekends") && weekday(d).is_none()
                }) {
                    return Err(TariffError::Day {
                        season,
                        band,
                        day: d.clone(),
                    });
                }
            }
        }
        Ok(())
    }

    /// The price per kWh at `t` (the first band that holds wins, else the season's price).
    pub fn price_at(&self, t: DateTime<Utc>) -> Option<Decimal> {
        let offset = FixedOffset::east_opt(self.utc_offset_minutes * 60)?;
        let local = t.with_timezone(&offset);
        let season = self
            .seasons
            .iter()
            .find(|s| s.months.contains(&local.month()))?;
        let band = season
            .bands
            .iter()
            .find(|b| b.holds(local.weekday(), local.hour()));
        Some(band.map_or(season.price, |b| b.price))
    }

    /// Hourly prices over `[from, to)` (hours aligned to UTC).
    pub fn series(&self, region: &str, from: DateTime<Utc>, to: DateTime<Utc>) -> Series {
        let mut points = Vec::new();
        let mut t = from
            .with_minute(0)
            .and_then(|t| t.with_second(0))
            .and_then(|t| t.with_nanosecond(0))
            .unwrap_or(from);
        while t < to {
            if let Some(p) = self.price_at(t) {
                points.push(Point {
                    start: t,
                    end: t + Duration::hours(1),
                    value: p,
                    estimated: false,
                });
            }
            t += Duration::hours(1);
        }
        Series {
            signal: Signal::Price {
                currency: self.currency.clone(),
            },
            status: Status::Actual,
            region: region.to_owned(),
            source: "tariff".into(),
            points,
        }
    }
}

/// Prices from CSV: a header naming `start`, optionally `end`, and `price_per_kwh` or
/// `price_per_mwh`; one row per interval, times in RFC 3339. Without `end`, a row lasts until
/// the next row's start (the last one `last_duration`).
pub fn parse_csv(
    text: &str,
    region: &str,
    currency: &str,
    last_duration: Duration,
) -> Result<Series, SignalError> {
    let bad = |line: usize, msg: String| SignalError::Shape(format!("line {line}: {msg}"));
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
    let (_, header) = lines.next().ok_or_else(|| bad(1, "no header".into()))?;
    let cols: Vec<&str> = header.split(',').map(str::trim).collect();
    let col = |name: &str| cols.iter().position(|c| *c == name);
    let start_col = col("start").ok_or_else(|| bad(1, "no start column".into()))?;
    let end_col = col("end");
    let (price_col, per) = match (col("price_per_kwh"), col("price_per_mwh")) {
        (Some(c), None) => (c, Decimal::ONE),
        (None, Some(c)) => (c, Decimal::from(1000)),
        _ => return Err(bad(1, "name one of price_per_kwh or price_per_mwh".into())),
    };
    let mut rows = Vec::new();
    for (n, line) in lines {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let get = |c: usize| {
            f.get(c)
                .copied()
                .ok_or_else(|| bad(n, format!("{} fields, want {}", f.len(), cols.len())))
        };
        let start =
            parse_time(get(start_col)?).ok_or_else(|| bad(n, "start is not RFC 3339".into()))?;
        let end = end_col
            .map(|c| {
                get(c)
                    .and_then(|e| parse_time(e).ok_or_else(|| bad(n, "end is not RFC 3339".into())))
            })
            .transpose()?;
        let price = Decimal::from_str(get(price_col)?)
            .map_err(|_| bad(n, format!("price {:?} is not a decimal", f[price_col])))?;
        if end.is_some_and(|e| e <= start) {
            return Err(bad(n, "end is not after start".into()));
        }
        rows.push((start, end, price / per));
    }
    rows.sort_by_key(|r| r.0);
    let mut points = Vec::with_capacity(rows.len());
    for (i, (start, end, value)) in rows.iter().enumerate() {
        let end = end.unwrap_or_else(|| rows.get(i + 1).map_or(*start + last_duration, |r| r.0));
        points.push(Point {
            start: *start,
            end,
            value: *value,
            estimated: false,
        });
    }
    Ok(Series {
        signal: Signal::Price {
            currency: currency.to_owned(),
        },
        status: Status::Actual,
        region: region.to_owned(),
        source: "csv".into(),
        points,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        parse_time(s).unwrap()
    }

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }

    /// A German-style commercial tariff in CET: winter peak on weekdays 08–20, a cheap night
    /// 22–06 every day, summer flat with a weekday peak.
    fn tariff() -> Tariff {
        serde_json::from_value(serde_json::json!({
            "currency": "EUR",
            "utc_offset_minutes": 60,
            "seasons": [
                {"months": [10, 11, 12, 1, 2, 3], "price": "0.21", "bands": [
                    {"days": ["weekdays"], "hours": [8, 20], "price": "0.34"},
                    {"days": ["all"], "hours": [22, 6], "price": "0.15"}
                ]},
                {"months": [4, 5, 6, 7, 8, 9], "price": "0.19", "bands": [
                    {"days": ["mon", "tue", "wed", "thu", "fri"], "hours": [9, 18], "price": "0.27"}
                ]}
            ]
        }))
        .unwrap()
    }

    #[test]
    fn bands_by_local_weekday_and_hour_wrapping_midnight() {
        let t = tariff();
        t.check().unwrap();
        // Monday 2026-11-02 07:30 UTC = 08:30 CET: weekday peak.
        assert_eq!(t.price_at(at("2026-11-02T07:30:00Z")), Some(d("0.34")));
        // 06:59 UTC = 07:59 CET: shoulder.
        assert_eq!(t.price_at(at("2026-11-02T06:59:00Z")), Some(d("0.21")));
        // Saturday 23:30 CET: night band wraps midnight.
        assert_eq!(t.price_at(at("2026-11-07T22:30:00Z")), Some(d("0.15")));
        assert_eq!(t.price_at(at("2026-11-08T04:00:00Z")), Some(d("0.15")));
        // Summer Saturday noon: flat.
        assert_eq!(t.price_at(at("2026-07-04T11:00:00Z")), Some(d("0.19")));
        let day = t.series("DE", at("2026-11-02T00:00:00Z"), at("2026-11-03T00:00:00Z"));
        assert_eq!(day.points.len(), 24);
        let sum: Decimal = day.points.iter().map(|p| p.value).sum();
        // The UTC day is CET Mon 01:00 to Tue 01:00: night 01–05, 22–23 and Tue 00 (8 h ×
        // 0.15), shoulder 06–07 and 20–21 (4 h × 0.21), peak 08–19 (12 h × 0.34).
        assert_eq!(sum, d("6.12"));
    }

    #[test]
    fn a_tariff_must_cover_every_month_with_real_days_and_hours() {
        let mut t = tariff();
        t.seasons[1].months.retain(|m| *m != 8);
        assert_eq!(t.check(), Err(TariffError::MonthWithoutSeason(8)));
        assert!(t.check().unwrap_err().to_string().contains("month 8"));
        let mut t = tariff();
        t.seasons[0].bands[0].days = vec!["funday".into()];
        assert!(t.check().unwrap_err().to_string().contains("funday"));
        let mut t = tariff();
        t.currency = "euro".into();
        assert!(t.check().is_err());
    }

    #[test]
    fn csv_prices_per_kwh_or_mwh() {
        let s = parse_csv(
            "# exported from the utility portal\nstart,price_per_mwh\n2026-11-02T01:00:00Z,80.5\n2026-11-02T00:00:00Z,91\n",
            "DE",
            "EUR",
            Duration::hours(1),
        )
        .unwrap();
        assert_eq!(s.points.len(), 2);
        assert_eq!(
            (s.points[0].value, s.points[1].value),
            (d("0.091"), d("0.0805"))
        );
        assert_eq!(
            s.points[0].end, s.points[1].start,
            "a row lasts until the next"
        );
        assert_eq!(s.points[1].end - s.points[1].start, Duration::hours(1));
        let e = parse_csv(
            "start,end,price_per_kwh\n2026-11-02T01:00:00Z,2026-11-02T00:00:00Z,0.2\n",
            "DE",
            "EUR",
            Duration::hours(1),
        )
        .unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
        assert!(parse_csv("start,price\n", "DE", "EUR", Duration::hours(1)).is_err());
    }
}
