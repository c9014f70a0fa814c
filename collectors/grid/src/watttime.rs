//! WattTime API v3: `/v3/historical` and `/v3/forecast` (`{data: [{point_time, value}],
//! meta}`) and `/v3/forecast/historical` (`{data: [{generated_at, forecast: [...]}]}`).
//!
//! `co2_moer` is the marginal operating emissions rate in lbs CO2/MWh at 5-minute points
//! (`meta.data_point_period_seconds`), converted exactly to g/kWh. `/v3/signal-index` answers
//! a *percentile* (units `percentile`), which is not an emission rate: refused, so it can
//! never be multiplied by kWh.

use crate::{decimal, lbs_per_mwh_to_g_per_kwh, shape, time, SignalError};
use chrono::Duration;
use serde_json::Value;
use wattledger_domain::signals::{Basis, Point, Series, Signal, Status};

pub fn parse(json: &str) -> Result<Series, SignalError> {
    let doc: Value = serde_json::from_str(json)?;
    let data = doc
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| shape("no data array"))?;
    let meta = doc.get("meta").unwrap_or(&Value::Null);
    let units = meta
        .get("units")
        .and_then(Value::as_str)
        .unwrap_or("lbs_co2_per_mwh");
    let signal_type = meta
        .get("signal_type")
        .and_then(Value::as_str)
        .unwrap_or("co2_moer");
    if units != "lbs_co2_per_mwh" || signal_type != "co2_moer" {
        return Err(SignalError::Unit(format!(
            "WattTime {signal_type} in {units} is not an emission rate (the signal index is a \
             percentile); ask for signal_type=co2_moer"
        )));
    }
    let period = meta
        .get("data_point_period_seconds")
        .and_then(Value::as_i64)
        .unwrap_or(300);
    let region = meta
        .get("region")
        .and_then(Value::as_str)
        .ok_or_else(|| shape("no meta.region"))?
        .to_owned();
    // forecast/historical nests one forecast per generation time: the newest is the one to use.
    let (points_json, status) = match data.first() {
        Some(first) if first.get("forecast").is_some() => {
            let newest = data
                .iter()
                .max_by_key(|d| d.get("generated_at").and_then(Value::as_str).unwrap_or(""))
                .expect("non-empty");
            let f = newest["forecast"]
                .as_array()
                .ok_or_else(|| shape("forecast is not an array"))?;
            (f.iter().collect::<Vec<_>>(), Status::Forecast)
        }
        _ => {
            // The live /v3/forecast carries meta.generated_at; /v3/historical does not.
            let status = if meta.get("generated_at").is_some() {
                Status::Forecast
            } else {
                Status::Actual
            };
            (data.iter().collect(), status)
        }
    };
    let mut points = Vec::with_capacity(points_json.len());
    for (i, p) in points_json.into_iter().enumerate() {
        let start = time(&p["point_time"], &format!("point {i} point_time"))?;
        let lbs = decimal(&p["value"], &format!("point {i} value"))?;
        points.push(Point {
            start,
            end: start + Duration::seconds(period),
            value: lbs_per_mwh_to_g_per_kwh(lbs),
            estimated: p
                .get("imputed_data_used")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        });
    }
    points.sort_by_key(|p| p.start);
    Ok(Series {
        signal: Signal::Carbon {
            basis: Basis::Marginal,
        },
        status,
        region,
        source: "watttime".into(),
        points,
    })
}

/// `GET /v3/region-from-loc`: the WattTime region (balancing authority) of a site's
/// coordinates, which a `[[grid]]` URL then names.
pub fn region_from_loc(json: &str) -> Result<String, SignalError> {
    let doc: Value = serde_json::from_str(json)?;
    doc.get("region")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| shape("no region"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::fixture;
    use rust_decimal::Decimal;
    use std::str::FromStr;

    #[test]
    fn historical_moer_in_grams_per_kwh() {
        let s = parse(&fixture("grid/watttime-v3-historical.json")).unwrap();
        assert_eq!(s.region, "CAISO_NORTH");
        assert_eq!((s.status, s.points.len()), (Status::Actual, 2));
        // 870 lbs/MWh × 0.45359237 = 394.6253619 g/kWh.
        assert_eq!(s.points[0].value, Decimal::from_str("394.6253619").unwrap());
        assert_eq!(s.points[0].end - s.points[0].start, Duration::minutes(5));
        assert!(s.points[0].estimated, "imputed_data_used");
        assert_eq!(
            s.signal,
            Signal::Carbon {
                basis: Basis::Marginal
            }
        );
    }

    #[test]
    fn forecast_history_takes_the_newest_forecast() {
        let s = parse(&fixture("grid/watttime-v3-forecast-historical.json")).unwrap();
        assert_eq!(s.status, Status::Forecast);
        assert!(!s.points.is_empty());
    }

    #[test]
    fn a_location_resolves_to_its_region() {
        let r = region_from_loc(&fixture("grid/watttime-v3-region-from-loc.json")).unwrap();
        assert_eq!(r, "PSCO");
    }

    #[test]
    fn the_signal_index_is_a_percentile_and_refused() {
        let e = parse(&fixture("grid/watttime-v3-signal-index.json")).unwrap_err();
        assert!(e.to_string().contains("percentile"), "{e}");
    }
}
