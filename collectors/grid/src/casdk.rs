//! The Green Software Foundation's Carbon Aware SDK WebAPI, for sites that already run it:
//! `/emissions/bylocation(s)[/best]` (`[{location, time, rating, duration}]`),
//! `/emissions/forecasts/current` (`[{location, forecastData: [{timestamp, duration,
//! value}]}]`, duration in minutes) and `/emissions/average-carbon-intensity` (`{location,
//! startTime, endTime, carbonIntensity}`).
//!
//! Values are g/kWh. Whether they are average or marginal depends on the SDK's data source
//! (Electricity Maps: average; WattTime: marginal), which the site states in config, so the
//! caller passes the basis.

use crate::{decimal, shape, time, SignalError};
use chrono::Duration;
use serde_json::Value;
use std::collections::BTreeMap;
use wattledger_domain::signals::{Basis, Point, Series, Signal, Status};

fn series(region: String, basis: Basis, status: Status, points: Vec<Point>) -> Series {
    Series {
        signal: Signal::Carbon { basis },
        status,
        region,
        source: "casdk".into(),
        points,
    }
}

/// `duration` as the SDK writes it: a .NET TimeSpan (`"00:05:00"`, `"1.00:00:00"`) or minutes.
fn duration(v: Option<&Value>, default: Duration) -> Duration {
    match v {
        Some(Value::Number(n)) => n.as_i64().map(Duration::minutes).unwrap_or(default),
        Some(Value::String(s)) => {
            let (days, rest) = s
                .split_once('.')
                .filter(|(d, _)| !d.contains(':'))
                .unwrap_or(("0", s));
            let parts: Vec<i64> = rest
                .split(':')
                .filter_map(|p| p.split('.').next()?.parse().ok())
                .collect();
            match (days.parse::<i64>(), parts.as_slice()) {
                (Ok(d), [h, m, s]) => {
                    Duration::days(d)
                        + Duration::hours(*h)
                        + Duration::minutes(*m)
                        + Duration::seconds(*s)
                }
                _ => default,
            }
        }
        _ => default,
    }
}

/// Measured emissions by location: one actual series per location. Points without a
/// duration last `default_duration`.
pub fn parse_emissions(
    json: &str,
    basis: Basis,
    default_duration: Duration,
) -> Result<Vec<Series>, SignalError> {
    let doc: Value = serde_json::from_str(json)?;
    let mut by_location: BTreeMap<String, Vec<Point>> = BTreeMap::new();
    if let Some(avg) = doc.get("carbonIntensity") {
        let location = doc
            .get("location")
            .and_then(Value::as_str)
            .ok_or_else(|| shape("no location"))?;
        by_location
            .entry(location.to_owned())
            .or_default()
            .push(Point {
                start: time(&doc["startTime"], "startTime")?,
                end: time(&doc["endTime"], "endTime")?,
                value: decimal(avg, "carbonIntensity")?,
                estimated: false,
            });
    } else {
        let items = doc
            .as_array()
            .ok_or_else(|| shape("not an array of emissions data"))?;
        for (i, e) in items.iter().enumerate() {
            let location = e
                .get("location")
                .and_then(Value::as_str)
                .ok_or_else(|| shape(format!("item {i}: no location")))?;
            let start = time(&e["time"], &format!("item {i} time"))?;
            by_location
                .entry(location.to_owned())
                .or_default()
                .push(Point {
                    start,
                    end: start + duration(e.get("duration"), default_duration),
                    value: decimal(&e["rating"], &format!("item {i} rating"))?,
                    estimated: false,
                });
        }
    }
    Ok(by_location
        .into_iter()
        .map(|(l, mut p)| {
            p.sort_by_key(|p| p.start);
            series(l, basis, Status::Actual, p)
        })
        .collect())
}

/// Current forecasts: one forecast series per requested location.
pub fn parse_forecasts(json: &str, basis: Basis) -> Result<Vec<Series>, SignalError> {
    let doc: Value = serde_json::from_str(json)?;
    let items = doc
        .as_array()
        .ok_or_else(|| shape("not an array of forecasts"))?;
    let mut out = Vec::new();
    for (i, f) in items.iter().enumerate() {
        let location = f
            .get("location")
            .and_then(Value::as_str)
            .ok_or_else(|| shape(format!("forecast {i}: no location")))?;
        let data = f
            .get("forecastData")
            .and_then(Value::as_array)
            .ok_or_else(|| shape(format!("forecast {i}: no forecastData")))?;
        let mut points = Vec::with_capacity(data.len());
        for (k, p) in data.iter().enumerate() {
            let start = time(
                &p["timestamp"],
                &format!("forecast {i} point {k} timestamp"),
            )?;
            points.push(Point {
                start,
                end: start + duration(p.get("duration"), Duration::minutes(5)),
                value: decimal(&p["value"], &format!("forecast {i} point {k} value"))?,
                estimated: false,
            });
        }
        points.sort_by_key(|p| p.start);
        out.push(series(location.to_owned(), basis, Status::Forecast, points));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::fixture;
    use rust_decimal::Decimal;
    use std::str::FromStr;

    /// The SDK's published examples miss the comma after `"location"` and elide points with
    /// a literal `...` line (SCI-NOTES.md); those are the only changes made to them.
    fn published(path: &str) -> String {
        fixture(path)
            .lines()
            .filter(|l| l.trim() != "...")
            .map(|l| {
                if l.trim_start().starts_with("\"location\"") && !l.trim_end().ends_with(',') {
                    format!("{l},")
                } else {
                    l.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
            .replace("},\n    ]", "}\n    ]")
    }

    #[test]
    fn emissions_by_location_and_the_average() {
        let s = parse_emissions(
            &published("sci/casdk-emissions-bylocations.json.txt"),
            Basis::Marginal,
            Duration::minutes(5),
        )
        .unwrap();
        let regions: Vec<&str> = s.iter().map(|s| s.region.as_str()).collect();
        assert_eq!(regions, ["eastus", "westus"]);
        assert_eq!(s[0].points[0].value, Decimal::from(70));
        assert_eq!(
            s[0].signal,
            Signal::Carbon {
                basis: Basis::Marginal
            }
        );
        let best = parse_emissions(
            &published("sci/casdk-emissions-bylocations-best.json.txt"),
            Basis::Marginal,
            Duration::minutes(5),
        )
        .unwrap();
        assert_eq!(best.len(), 1);
        let avg = parse_emissions(
            &fixture("sci/casdk-emissions-average-carbon-intensity.json"),
            Basis::Average,
            Duration::minutes(5),
        )
        .unwrap();
        assert_eq!(
            avg[0].points[0].value,
            Decimal::from_str("345.434").unwrap()
        );
        assert_eq!(
            avg[0].points[0].end - avg[0].points[0].start,
            Duration::hours(4)
        );
    }

    #[test]
    fn current_forecasts_with_minutes_and_timespans() {
        let f = parse_forecasts(
            &published("sci/casdk-emissions-forecasts-current.json.txt"),
            Basis::Marginal,
        )
        .unwrap();
        assert_eq!(f[0].region, "northeurope");
        assert_eq!(f[0].status, Status::Forecast);
        let p = &f[0].points[0];
        assert_eq!(p.value, Decimal::from_str("532.02293146").unwrap());
        assert_eq!(p.end - p.start, Duration::minutes(10));
        assert_eq!(
            duration(Some(&Value::from("1.02:03:04")), Duration::zero()),
            Duration::seconds(93_784)
        );
        assert_eq!(
            duration(Some(&Value::from("00:05:00")), Duration::zero()),
            Duration::minutes(5)
        );
    }
}
