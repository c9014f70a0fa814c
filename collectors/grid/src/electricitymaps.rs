//! Electricity Maps API v3: `carbon-intensity/latest` (one object), `/history`
//! (`{zone, history: [...]}`) and `/past-range` (`{zone, data: [...]}`).
//!
//! Values are hourly averages in gCO2eq/kWh keyed by the hour's start; `isEstimated` marks a
//! nowcast that a later fetch revises (GRID-NOTES.md). Average basis, actual status.
//!
//! `power-breakdown/latest` and `/history` give each hour's `fossilFreePercentage` (the share
//! of the zone's consumption from renewables and nuclear, an integer percent): the grid's
//! carbon-free share for hourly CFE matching ([`parse_power_breakdown`]).

use crate::{decimal, shape, time, SignalError};
use chrono::Duration;
use rust_decimal::Decimal;
use serde_json::Value;
use wattledger_domain::signals::{Basis, Point, Series, Signal, Status};

pub fn parse(json: &str) -> Result<Series, SignalError> {
    let doc: Value = serde_json::from_str(json)?;
    let entries: Vec<&Value> =
        match (doc.get("history"), doc.get("data")) {
            (Some(h), _) => h
                .as_array()
                .ok_or_else(|| shape("history is not an array"))?
                .iter()
                .collect(),
            (None, Some(d)) => d
                .as_array()
                .ok_or_else(|| shape("data is not an array"))?
                .iter()
                .collect(),
            (None, None) if doc.get("carbonIntensity").is_some() => vec![&doc],
            _ => return Err(shape(
                "neither a latest answer (carbonIntensity) nor history/past-range (history, data)",
            )),
        };
    let zone = doc
        .get("zone")
        .and_then(Value::as_str)
        .or_else(|| entries.first().and_then(|e| e.get("zone")?.as_str()))
        .ok_or_else(|| shape("no zone"))?
        .to_owned();
    let mut points = Vec::with_capacity(entries.len());
    for (i, e) in entries.into_iter().enumerate() {
        // An hour the service has no value for yet comes as null: no point, not zero.
        let Some(v) = e.get("carbonIntensity").filter(|v| !v.is_null()) else {
            continue;
        };
        let start = time(&e["datetime"], &format!("entry {i} datetime"))?;
        points.push(Point {
            start,
            end: start + Duration::hours(1),
            value: decimal(v, &format!("entry {i} carbonIntensity"))?,
            estimated: e
                .get("isEstimated")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        });
    }
    points.sort_by_key(|p| p.start);
    Ok(Series {
        signal: Signal::Carbon {
            basis: Basis::Average,
        },
        status: Status::Actual,
        region: zone,
        source: "electricitymaps".into(),
        points,
    })
}

/// The zone's carbon-free share per hour from a power breakdown answer (`latest`, one
/// object, or `history`, `{zone, history: [...]}`): `fossilFreePercentage` / 100, exactly.
/// An hour without a percentage (null) has no point, not zero.
pub fn parse_power_breakdown(json: &str) -> Result<Series, SignalError> {
    let doc: Value = serde_json::from_str(json)?;
    let entries: Vec<&Value> = match doc.get("history") {
        Some(h) => h
            .as_array()
            .ok_or_else(|| shape("history is not an array"))?
            .iter()
            .collect(),
        None if doc.get("fossilFreePercentage").is_some() => vec![&doc],
        None => {
            return Err(shape(
                "neither a latest power breakdown (fossilFreePercentage) nor its history",
            ))
        }
    };
    let zone = doc
        .get("zone")
        .and_then(Value::as_str)
        .ok_or_else(|| shape("no zone"))?
        .to_owned();
    let mut points = Vec::with_capacity(entries.len());
    for (i, e) in entries.into_iter().enumerate() {
        let Some(v) = e.get("fossilFreePercentage").filter(|v| !v.is_null()) else {
            continue;
        };
        let percent = decimal(v, &format!("entry {i} fossilFreePercentage"))?;
        if percent.is_sign_negative() || percent > Decimal::ONE_HUNDRED {
            return Err(SignalError::Unit(format!(
                "entry {i} fossilFreePercentage {percent} is not a percentage"
            )));
        }
        let start = time(&e["datetime"], &format!("entry {i} datetime"))?;
        points.push(Point {
            start,
            end: start + Duration::hours(1),
            value: (percent / Decimal::ONE_HUNDRED).normalize(),
            estimated: e
                .get("isEstimated")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        });
    }
    points.sort_by_key(|p| p.start);
    Ok(Series {
        signal: Signal::CarbonFree,
        status: Status::Actual,
        region: zone,
        source: "electricitymaps".into(),
        points,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::fixture;
    use rust_decimal::Decimal;

    #[test]
    fn latest_history_and_past_range() {
        let latest = parse(&fixture(
            "grid/electricitymaps-v3-carbon-intensity-latest.json",
        ))
        .unwrap();
        assert_eq!(latest.region, "US-CAR-DUK");
        assert_eq!(latest.points.len(), 1);
        let p = &latest.points[0];
        assert_eq!(p.value, Decimal::from(216));
        assert!(p.estimated);
        assert_eq!(p.start.to_rfc3339(), "2024-03-06T19:00:00+00:00");
        assert_eq!(p.end - p.start, Duration::hours(1));

        let history = parse(&fixture(
            "grid/electricitymaps-v3-carbon-intensity-history.json",
        ))
        .unwrap();
        assert_eq!(history.points.len(), 24);
        assert!(history
            .points
            .windows(2)
            .all(|w| w[1].start - w[0].start == Duration::hours(1)));

        let range = parse(&fixture(
            "grid/electricitymaps-v3-carbon-intensity-past-range.json",
        ))
        .unwrap();
        assert_eq!(range.region, "DK-DK2");
        assert_eq!(range.points[0].value, Decimal::from(161));
        assert!(!range.points[0].estimated);
        assert_eq!(
            range.signal,
            Signal::Carbon {
                basis: Basis::Average
            }
        );
    }

    #[test]
    fn a_missing_value_is_no_point_and_a_wrong_document_is_an_error() {
        let s = parse(r#"{"zone":"DE","history":[{"carbonIntensity":null,"datetime":"2024-01-01T00:00:00.000Z"}]}"#).unwrap();
        assert!(s.points.is_empty());
        assert!(parse(r#"{"zone":"DE"}"#).is_err());
        assert!(parse("[]").is_err());
    }

    #[test]
    fn power_breakdown_history_gives_each_hours_carbon_free_share() {
        let s = parse_power_breakdown(&crate::tests::fixture(
            "grid/cfe/electricitymaps-power-breakdown-history-DE.json",
        ))
        .unwrap();
        assert_eq!(
            (s.signal.clone(), s.region.as_str()),
            (Signal::CarbonFree, "DE")
        );
        assert_eq!(s.points.len(), 24);
        let first = &s.points[0];
        assert_eq!(first.start.to_rfc3339(), "2024-03-05T20:00:00+00:00");
        assert_eq!(first.value, Decimal::new(42, 2));
        assert!(!first.estimated);
        // The last two hours are nowcasts the service revises.
        assert!(s.points[22].estimated && s.points[23].estimated);
        let latest = parse_power_breakdown(&crate::tests::fixture(
            "grid/cfe/electricitymaps-power-breakdown-latest-DE.json",
        ))
        .unwrap();
        assert_eq!(latest.points.len(), 1);
        assert_eq!(latest.points[0].start, s.points[23].start);
        assert!(parse_power_breakdown(r#"{"zone":"DE","history":[{"datetime":"2024-03-05T20:00:00Z","fossilFreePercentage":140}]}"#).is_err());
    }
}
