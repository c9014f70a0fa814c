//! The UK Carbon Intensity API (NESO): national `/intensity…` (`{data: [{from, to,
//! intensity: {forecast, actual, index}}]}`, half-hourly) and regional `/regional…` (per
//! period a list of regions, or per region a list of periods; forecast only).
//!
//! Average intensity in gCO2/kWh. A national period gives an actual point (where `actual` is
//! not null — it is null for the future) and a forecast point; a region is named by its
//! `regionid` (`GB-3`) so a site can be bound to it.
//!
//! `/generation…` gives each half hour's generation mix by fuel in percent: the carbon-free
//! share for hourly CFE matching ([`parse_generation`]).

use crate::{decimal, shape, time, SignalError};
use rust_decimal::Decimal;
use serde_json::Value;
use std::collections::BTreeMap;
use wattledger_domain::signals::{Basis, Point, Series, Signal, Status};

fn series(region: String, status: Status, points: Vec<Point>) -> Series {
    Series {
        signal: Signal::Carbon {
            basis: Basis::Average,
        },
        status,
        region,
        source: "ukci".into(),
        points,
    }
}

fn point(period: &Value, value: &Value, what: &str) -> Result<Point, SignalError> {
    Ok(Point {
        start: time(&period["from"], &format!("{what} from"))?,
        end: time(&period["to"], &format!("{what} to"))?,
        value: decimal(value, what)?,
        estimated: false,
    })
}

/// National intensity: the actual series and the forecast series (either may be empty).
pub fn parse_national(json: &str) -> Result<Vec<Series>, SignalError> {
    let doc: Value = serde_json::from_str(json)?;
    let data = doc
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| shape("no data array"))?;
    let (mut actual, mut forecast) = (Vec::new(), Vec::new());
    for (i, p) in data.iter().enumerate() {
        let intensity = p
            .get("intensity")
            .ok_or_else(|| shape(format!("period {i} has no intensity")))?;
        if let Some(v) = intensity.get("actual").filter(|v| !v.is_null()) {
            actual.push(point(p, v, &format!("period {i} actual"))?);
        }
        if let Some(v) = intensity.get("forecast").filter(|v| !v.is_null()) {
            forecast.push(point(p, v, &format!("period {i} forecast"))?);
        }
    }
    Ok(vec![
        series("GB".into(), Status::Actual, actual),
        series("GB".into(), Status::Forecast, forecast),
    ])
}

/// Regional forecasts, one series per region (`GB-<regionid>`), from either regional shape.
pub fn parse_regional(json: &str) -> Result<Vec<Series>, SignalError> {
    let doc: Value = serde_json::from_str(json)?;
    let data = doc
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| shape("no data array"))?;
    let mut by_region: BTreeMap<i64, Vec<Point>> = BTreeMap::new();
    let mut add = |region: &Value, period: &Value, what: String| -> Result<(), SignalError> {
        let id = region
            .get("regionid")
            .and_then(Value::as_i64)
            .ok_or_else(|| shape(format!("{what}: no regionid")))?;
        if let Some(v) = region
            .get("intensity")
            .or_else(|| period.get("intensity"))
            .and_then(|i| i.get("forecast"))
            .filter(|v| !v.is_null())
        {
            by_region
                .entry(id)
                .or_default()
                .push(point(period, v, &what)?);
        }
        Ok(())
    };
    for (i, entry) in data.iter().enumerate() {
        if let Some(regions) = entry.get("regions").and_then(Value::as_array) {
            for (k, r) in regions.iter().enumerate() {
                add(r, entry, format!("period {i} region {k}"))?;
            }
        } else if let Some(periods) = entry.get("data").and_then(Value::as_array) {
            for (k, p) in periods.iter().enumerate() {
                add(entry, p, format!("region {i} period {k}"))?;
            }
        } else {
            return Err(shape(format!("entry {i} has neither regions nor data")));
        }
    }
    Ok(by_region
        .into_iter()
        .map(|(id, mut points)| {
            points.sort_by_key(|p| p.start);
            series(format!("GB-{id}"), Status::Forecast, points)
        })
        .collect())
}

/// `/intensity/factors`: the API's gCO2/kWh per fuel type, for sites that build their own
/// intensity from a generation mix.
pub fn parse_factors(json: &str) -> Result<BTreeMap<String, rust_decimal::Decimal>, SignalError> {
    let doc: Value = serde_json::from_str(json)?;
    let first = doc
        .get("data")
        .and_then(Value::as_array)
        .and_then(|d| d.first())
        .and_then(Value::as_object)
        .ok_or_else(|| shape("no data[0] object"))?;
    first
        .iter()
        .map(|(fuel, v)| Ok((fuel.clone(), decimal(v, fuel)?)))
        .collect()
}

/// The fuels of the UK mix counted as carbon-free: as Electricity Maps' fossil-free share
/// counts them (renewables, nuclear and biomass). Imports and "other" are of unknown origin and
/// count as not carbon-free.
const CARBON_FREE_FUELS: [&str; 5] = ["biomass", "nuclear", "hydro", "wind", "solar"];

/// GB's carbon-free share per half hour from `/generation` (one period as an object) or
/// `/generation/{from}/{to}` (a list): the carbon-free fuels' percentages over all of them
/// (the published percentages are rounded and need not add up to 100).
pub fn parse_generation(json: &str) -> Result<Series, SignalError> {
    let doc: Value = serde_json::from_str(json)?;
    let periods: Vec<&Value> = match doc.get("data") {
        Some(Value::Array(list)) => list.iter().collect(),
        Some(one @ Value::Object(_)) => vec![one],
        _ => return Err(shape("no data")),
    };
    let mut points = Vec::with_capacity(periods.len());
    for (i, p) in periods.into_iter().enumerate() {
        let mix = p
            .get("generationmix")
            .and_then(Value::as_array)
            .ok_or_else(|| shape(format!("period {i} has no generationmix")))?;
        let (mut clean, mut all) = (Decimal::ZERO, Decimal::ZERO);
        for (k, f) in mix.iter().enumerate() {
            let what = format!("period {i} fuel {k}");
            let perc = decimal(&f["perc"], &what)?;
            if perc.is_sign_negative() {
                return Err(SignalError::Unit(format!("{what} perc {perc} is negative")));
            }
            all += perc;
            if CARBON_FREE_FUELS.contains(&f["fuel"].as_str().unwrap_or_default()) {
                clean += perc;
            }
        }
        if all.is_zero() {
            continue;
        }
        points.push(Point {
            start: time(&p["from"], &format!("period {i} from"))?,
            end: time(&p["to"], &format!("period {i} to"))?,
            value: (clean / all).round_dp(6).normalize(),
            estimated: false,
        });
    }
    points.sort_by_key(|p| p.start);
    Ok(Series {
        signal: Signal::CarbonFree,
        status: Status::Actual,
        region: "GB".into(),
        source: "ukci".into(),
        points,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::fixture;
    use chrono::Duration;
    use rust_decimal::Decimal;

    /// The API's published regional examples lack the comma before `"generationmix"`
    /// (GRID-NOTES.md); the fix is the only change made to them.
    fn published(path: &str) -> String {
        fixture(path)
            .replace("}\n      \"generationmix\"", "},\n      \"generationmix\"")
            .replace("}\n    \"generationmix\"", "},\n    \"generationmix\"")
    }

    #[test]
    fn national_actual_and_forecast_half_hours() {
        let s = parse_national(&fixture("grid/ukci-intensity.json")).unwrap();
        assert_eq!(
            (s[0].status, s[1].status),
            (Status::Actual, Status::Forecast)
        );
        assert_eq!(s[0].points[0].value, Decimal::from(263));
        assert_eq!(s[1].points[0].value, Decimal::from(266));
        assert_eq!(
            s[0].points[0].end - s[0].points[0].start,
            Duration::minutes(30)
        );
        let fw = parse_national(&fixture("grid/ukci-intensity-fw24h.json")).unwrap();
        assert!(!fw[1].points.is_empty());
    }

    #[test]
    fn fuel_factors() {
        let f = parse_factors(&fixture("grid/ukci-intensity-factors.json")).unwrap();
        assert_eq!(f["Coal"], Decimal::from(937));
        assert_eq!(f["Wind"], Decimal::ZERO);
        assert_eq!(f.len(), 14);
    }

    #[test]
    fn regional_forecasts_by_region_id_from_both_shapes() {
        for f in [
            "grid/ukci-regional.json.txt",
            "grid/ukci-regional-regionid.json.txt",
        ] {
            let s = parse_regional(&published(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
            let nw = s
                .iter()
                .find(|s| s.region == "GB-3")
                .expect("North West England");
            assert_eq!(nw.status, Status::Forecast);
            assert_eq!(nw.points[0].value, Decimal::from(266));
        }
    }

    #[test]
    fn the_generation_mix_gives_the_carbon_free_share_of_what_was_published() {
        let s = parse_generation(&crate::tests::fixture(
            "grid/cfe/ukci-generation-docs-example.json",
        ))
        .unwrap();
        assert_eq!(
            (s.signal.clone(), s.region.as_str()),
            (Signal::CarbonFree, "GB")
        );
        let p = &s.points[0];
        assert_eq!(p.start.to_rfc3339(), "2018-01-20T12:00:00+00:00");
        assert_eq!((p.end - p.start).num_minutes(), 30);
        // biomass 4.2 + nuclear 17.6 + hydro 1.1 + wind 6.8 + solar 18.1 = 47.8 of 98.9.
        assert_eq!(p.value, "0.483316".parse().unwrap());
        // The current period comes as one object.
        let one = r#"{"data":{"from":"2018-08-08T10:30Z","to":"2018-08-08T11:00Z","generationmix":[{"fuel":"wind","perc":25},{"fuel":"gas","perc":75}]}}"#;
        assert_eq!(
            parse_generation(one).unwrap().points[0].value,
            "0.25".parse().unwrap()
        );
    }
}
