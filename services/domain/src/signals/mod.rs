//! Grid signals: carbon intensity (gCO2e/kWh) and electricity price (currency/kWh) over
//! time, each series labelled with what it measures — average or marginal, actual or
//! forecast, and where it came from — because SCI counts location-based *average*
//! intensity while admission decisions want the *marginal* one, and a forecast must never
//! be billed as an actual.
//!
//! One module per wire format, each a pure parser from the provider's payload to
//! [`Series`]: carbon from `electricitymaps`, `watttime`, `ukci` (UK Carbon Intensity),
//! `casdk` (Carbon Aware SDK); prices from `entsoe` (day-ahead XML) and `tariff`
//! (time-of-use tariffs and CSV). Values are `Decimal`, converted exactly (WattTime's
//! lbs/MWh → g/kWh, €/MWh → €/kWh).

pub mod casdk;
pub mod electricitymaps;
pub mod entsoe;
pub mod tariff;
pub mod ukci;
pub mod watttime;

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use std::str::FromStr;

/// What a carbon intensity averages over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Basis {
    /// The grid mix's average emissions (location-based, what SCI and reports count).
    Average,
    /// The emissions of the marginal generator (MOER): what one more kWh causes.
    Marginal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Measured (possibly estimated and later revised).
    Actual,
    Forecast,
}

/// The quantity a series carries.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "signal", rename_all = "lowercase")]
pub enum Signal {
    /// Grams CO2e per kWh.
    Carbon { basis: Basis },
    /// Currency units per kWh.
    Price { currency: String },
}

/// One value over `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Point {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub value: Decimal,
    /// The provider says this value is an estimate (it may be revised later).
    #[serde(default)]
    pub estimated: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Series {
    pub signal: Signal,
    pub status: Status,
    /// The provider's zone or region (`DE`, `CAISO_NORTH`, `GB`, `eastus`).
    pub region: String,
    /// Who published it (`electricitymaps`, `watttime`, `ukci`, `casdk`, `tariff`, …).
    pub source: String,
    pub points: Vec<Point>,
}

#[derive(Debug, thiserror::Error)]
pub enum SignalError {
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The payload parsed but is not the shape this format has.
    #[error("{0}")]
    Shape(String),
    /// A value in a unit that is not an emission rate or price.
    #[error("{0}")]
    Unit(String),
}

pub(crate) fn shape(msg: impl Into<String>) -> SignalError {
    SignalError::Shape(msg.into())
}

/// A JSON number as an exact `Decimal` (its shortest decimal text, not its binary value).
pub(crate) fn decimal(v: &serde_json::Value, what: &str) -> Result<Decimal, SignalError> {
    let n = v
        .as_number()
        .ok_or_else(|| shape(format!("{what} is not a number")))?;
    Decimal::from_str(&n.to_string())
        .or_else(|_| Decimal::from_scientific(&n.to_string()))
        .map_err(|_| shape(format!("{what} {n} is out of range")))
}

pub(crate) fn time(v: &serde_json::Value, what: &str) -> Result<DateTime<Utc>, SignalError> {
    let s = v
        .as_str()
        .ok_or_else(|| shape(format!("{what} is not a time string")))?;
    parse_time(s).ok_or_else(|| shape(format!("{what} {s:?} is not an ISO-8601 time")))
}

/// ISO-8601 with or without seconds (the UK API writes `2018-01-20T12:00Z`).
pub fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .or_else(|_| DateTime::parse_from_str(s, "%Y-%m-%dT%H:%M%#z"))
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// 1 lb = 453.59237 g (exact, by definition) and 1 MWh = 1000 kWh, so lbs/MWh × 0.45359237
/// = g/kWh, exactly.
pub fn lbs_per_mwh_to_g_per_kwh(lbs_per_mwh: Decimal) -> Decimal {
    lbs_per_mwh * Decimal::new(45_359_237, 8)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::path::PathBuf;

    /// Real payloads live in `../shared/fixtures` beside the checkout (SOURCES.md says
    /// where each came from); tests read them from there.
    pub fn fixture(path: &str) -> String {
        let full = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/fixtures")
            .join(path);
        std::fs::read_to_string(&full).unwrap_or_else(|e| {
            panic!(
                "fixture {} (shared/ beside the checkout): {e}",
                full.display()
            )
        })
    }

    #[test]
    fn pounds_per_mwh_to_grams_per_kwh_exactly() {
        assert_eq!(
            lbs_per_mwh_to_g_per_kwh(Decimal::from(1000)),
            Decimal::from_str("453.59237").unwrap()
        );
        assert_eq!(
            lbs_per_mwh_to_g_per_kwh(Decimal::from(870)),
            Decimal::from_str("394.6253619").unwrap()
        );
        assert_eq!(
            parse_time("2018-01-20T12:00Z").unwrap(),
            parse_time("2018-01-20T12:00:00+00:00").unwrap()
        );
    }
}
