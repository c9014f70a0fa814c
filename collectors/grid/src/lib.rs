//! The grid providers' payloads as signal series: one module per wire format, each a pure
//! parser from what the provider answers to `wattledger_domain::signals::Series`. Carbon
//! intensity from `electricitymaps`, `watttime`, `ukci` (UK Carbon Intensity) and `casdk`
//! (Carbon Aware SDK); prices from `entsoe` (day-ahead XML) and `tariff` (time-of-use tariffs
//! a site states, and CSV). Values are `Decimal`, converted exactly (WattTime's lbs/MWh →
//! g/kWh, €/MWh → €/kWh).
//!
//! The series they produce and what each measures (basis, status, signal) are the domain's
//! (`wattledger_domain::signals`), which the server reasons with; the formats are here, in a
//! crate of their own, because two programs read them: the agent's grid source, which
//! fetches them where the site runs, and the server's simulator, which writes its demo
//! signals in the providers' formats and parses them as a site's would be. Neither has to
//! take the other to get them.

pub mod casdk;
pub mod electricitymaps;
pub mod entsoe;
pub mod tariff;
pub mod ukci;
pub mod watttime;

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use std::str::FromStr;

/// Why a provider's payload is not a series.
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
