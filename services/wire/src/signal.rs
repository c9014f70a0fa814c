//! One value of a grid signal: carbon intensity or electricity price.

use crate::{Problem, Problems};
use chrono::{DateTime, Duration, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use wattledger_domain::input;
use wattledger_domain::signals::{Basis, Series, Signal, SignalKind, Status};

/// Forecasts reach days ahead; nothing further is a signal yet.
pub const MAX_AHEAD_DAYS: i64 = 15;

/// The longest interval one point may cover.
const MAX_SPAN_DAYS: i64 = 31;

/// What a `numeric(20, 9)` column holds.
const MAX_VALUE: i64 = 99_999_999_999;
const VALUE_SCALE: u32 = 9;

wattledger_domain::record! {
    /// One value of a signal over `[start_at, end_at)`.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
    #[serde(deny_unknown_fields)]
    pub struct SignalPoint {
        /// The provider's zone or region: a site's `grid_region` (carbon) or `price_region`.
        pub region: String,
        /// `carbon` (g CO2e per kWh), `price` (currency per kWh) or `carbon_free` (the
        /// grid's fossil-free share of generation, a fraction from 0 to 1).
        pub signal: SignalKind => SignalKind::Carbon,
        /// Carbon: `average` (location-based, what reports count) or `marginal` (MOER).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub basis: Option<Basis> => None,
        /// Price: ISO 4217 currency.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Z]{3}$"))]
        pub currency: Option<String>,
        /// `actual` or `forecast`.
        pub status: Status => Status::Actual,
        /// Who published it: `electricitymaps`, `watttime`, `ukci`, `casdk`, `entsoe`, `tariff`, …
        pub source: String,
        pub start_at: DateTime<Utc>,
        pub end_at: DateTime<Utc>,
        /// Decimal text, so values stay exact on the wire (a JSON number is read exactly too).
        #[cfg_attr(feature = "openapi", schema(value_type = String, example = "412.5",
            pattern = "^-?[0-9]{1,11}(\\.[0-9]{1,9})?$"))]
        pub value: Decimal,
        /// The provider marks the value as an estimate (it may be revised).
        #[serde(default)]
        pub estimated: bool = false,
    }
}

impl SignalPoint {
    /// A parsed series as records, in its order.
    pub fn from_series(series: &Series) -> Vec<SignalPoint> {
        let (basis, currency) = match &series.signal {
            Signal::Carbon { basis } => (Some(*basis), None),
            Signal::Price { currency } => (None, Some(currency.clone())),
            Signal::CarbonFree => (None, None),
        };
        series
            .points
            .iter()
            .map(|p| SignalPoint {
                region: series.region.clone(),
                signal: series.signal.kind(),
                basis,
                currency: currency.clone(),
                status: series.status,
                source: series.source.clone(),
                start_at: p.start,
                end_at: p.end,
                value: p.value.normalize(),
                estimated: p.estimated,
            })
            .collect()
    }

    /// Everything wrong with the point on its own; `latest` is the server's clock plus
    /// [`MAX_AHEAD_DAYS`].
    pub fn check(&self, latest: DateTime<Utc>) -> Vec<Problem> {
        let mut p = Problems::default();
        match self.signal {
            SignalKind::Carbon => {
                if self.currency.is_some() {
                    p.add("currency", "is for price signals");
                }
                if self.basis.is_none() {
                    p.add("basis", "is required");
                }
            }
            SignalKind::Price => {
                if self.basis.is_some() {
                    p.add("basis", "is for carbon signals");
                }
                match &self.currency {
                    Some(c) if c.len() == 3 && c.chars().all(|x| x.is_ascii_uppercase()) => {}
                    Some(_) => p.add("currency", "must be an ISO 4217 code such as EUR"),
                    None => p.add("currency", "is required"),
                }
            }
            SignalKind::CarbonFree => {
                if self.basis.is_some() {
                    p.add("basis", "is for carbon signals");
                }
                if self.currency.is_some() {
                    p.add("currency", "is for price signals");
                }
            }
        }
        let mut problems = p.done();
        problems.extend(SignalPoint::check_unnamed(
            &self.region,
            &self.source,
            self.start_at,
            self.end_at,
            self.value,
            latest,
        ));
        let value_read = !problems.iter().any(|p| p.field == "value");
        if value_read && self.signal == SignalKind::Carbon && self.value.is_sign_negative() {
            problems.push(Problem {
                field: "value".into(),
                reason: "carbon intensity must not be negative".into(),
            });
        }
        if value_read
            && self.signal == SignalKind::CarbonFree
            && (self.value.is_sign_negative() || self.value > Decimal::ONE)
        {
            problems.push(Problem {
                field: "value".into(),
                reason: "a carbon-free share is a fraction from 0 to 1".into(),
            });
        }
        problems
    }

    /// The rules of a point that need none of its names (signal, basis, status): a reader that
    /// found a name outside its set checks these still, so the record's every problem is listed.
    pub fn check_unnamed(
        region: &str,
        source: &str,
        start_at: DateTime<Utc>,
        end_at: DateTime<Utc>,
        value: Decimal,
        latest: DateTime<Utc>,
    ) -> Vec<Problem> {
        let mut p = Problems::default();
        p.text("region", region, 64);
        p.text("source", source, 64);
        p.time("start_at", start_at, latest);
        p.time("end_at", end_at, latest);
        if end_at <= start_at {
            p.add("end_at", "must be after start_at");
        } else if end_at - start_at > Duration::days(MAX_SPAN_DAYS) {
            p.add("end_at", "a point spans at most 31 days");
        }
        let limit = Decimal::from(MAX_VALUE);
        if let Err(e) = input::decimal(value, VALUE_SCALE, -limit, limit) {
            p.add("value", e);
        }
        p.done()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use wattledger_domain::signals::Point;

    fn t(h: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 2, h, 0, 0).unwrap()
    }

    #[test]
    fn a_series_becomes_checked_records_with_exact_values() {
        let series = Series {
            signal: Signal::Price {
                currency: "EUR".into(),
            },
            status: Status::Forecast,
            region: "DE-LU".into(),
            source: "entsoe".into(),
            points: vec![Point {
                start: t(10),
                end: t(11),
                value: Decimal::new(123_4500, 7),
                estimated: false,
            }],
        };
        let points = SignalPoint::from_series(&series);
        assert!(points[0].check(t(12)).is_empty());
        let json = serde_json::to_value(&points[0]).unwrap();
        assert_eq!(json["value"], "0.12345");
        assert_eq!(json["currency"], "EUR");
        assert!(json.get("basis").is_none());
    }

    #[test]
    fn carbon_needs_a_basis_and_no_currency_and_is_not_negative() {
        let p = SignalPoint {
            region: "DE".into(),
            signal: SignalKind::Carbon,
            basis: None,
            currency: Some("EUR".into()),
            status: Status::Actual,
            source: "electricitymaps".into(),
            start_at: t(10),
            end_at: t(10),
            value: Decimal::new(-1, 0),
            estimated: false,
        };
        let fields: Vec<_> = p.check(t(12)).into_iter().map(|p| p.field).collect();
        assert_eq!(fields, ["currency", "basis", "end_at", "value"]);
    }
}
