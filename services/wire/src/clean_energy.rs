//! Clean energy delivered to a site: a power purchase agreement's or on-site generation's
//! energy per interval (hourly, as such contracts settle), what hourly carbon-free matching
//! counts first (`domain::cfe`).

use crate::{Problem, Problems};
use chrono::{DateTime, Duration, Utc};
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use wattledger_domain::units::MJ_PER_KWH;

/// mJ in one MWh.
const MJ_PER_MWH: i64 = 1000 * MJ_PER_KWH;

/// Decimal places of MWh that are whole mJ (1e-6 MWh = 3.6e6 mJ).
const MWH_SCALE: u32 = 6;

/// The most one delivery may carry: 1 TWh.
const MAX_MWH: i64 = 1_000_000;

/// The longest interval one delivery may cover.
const MAX_SPAN_DAYS: i64 = 31;

wattledger_domain::record! {
    /// Clean energy delivered to a site over `[start_at, end_at)`. A delivery over several
    /// hours counts in each by its time in it; contracts settle hourly, so send hours.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
    #[serde(deny_unknown_fields)]
    pub struct CleanEnergy {
        /// The site's key.
        pub site: String,
        /// The contract or generator, e.g. `ppa-wind-2026`, `rooftop-solar`: a revision of
        /// the same source and start replaces the delivery.
        pub source: String,
        pub start_at: DateTime<Utc>,
        pub end_at: DateTime<Utc>,
        /// Energy delivered, MWh, at most 6 decimal places (whole millijoules). Decimal text
        /// on the wire (a JSON number is read exactly too).
        #[cfg_attr(feature = "openapi", schema(value_type = String, example = "1.25"))]
        pub mwh: Decimal,
    }
}

impl CleanEnergy {
    /// Everything wrong with the delivery on its own; `latest` bounds the times.
    pub fn check(&self, latest: DateTime<Utc>) -> Vec<Problem> {
        let mut p = Problems::default();
        p.key("site", &self.site);
        p.text("source", &self.source, 64);
        let start = p.time("start_at", self.start_at, latest);
        let end = p.time("end_at", self.end_at, latest);
        if start && end {
            if self.end_at <= self.start_at {
                p.add("end_at", "must be after start_at");
            } else if self.end_at - self.start_at > Duration::days(MAX_SPAN_DAYS) {
                p.add("end_at", "a delivery spans at most 31 days");
            }
        }
        p.decimal(
            "mwh",
            self.mwh,
            MWH_SCALE,
            Decimal::ZERO,
            Decimal::from(MAX_MWH),
        );
        p.done()
    }

    /// The energy in mJ, exactly (a checked delivery has whole mJ).
    pub fn mj(&self) -> i64 {
        (self.mwh * Decimal::from(MJ_PER_MWH)).to_i64().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(h: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 10, 5, h, 0, 0).unwrap()
    }

    fn delivery(mwh: &str) -> CleanEnergy {
        CleanEnergy {
            site: "fra1".into(),
            source: "ppa-wind".into(),
            start_at: t(10),
            end_at: t(11),
            mwh: mwh.parse().unwrap(),
        }
    }

    #[test]
    fn megawatt_hours_are_whole_millijoules() {
        assert_eq!(delivery("1.25").mj(), 4_500_000_000_000);
        assert_eq!(delivery("0.000001").mj(), 3_600_000);
        assert!(delivery("0.000001").check(t(12)).is_empty());
        let fields = |d: &CleanEnergy| -> Vec<String> {
            d.check(t(12)).into_iter().map(|p| p.field).collect()
        };
        assert_eq!(fields(&delivery("0.0000001")), ["mwh"]);
        assert_eq!(fields(&delivery("-1")), ["mwh"]);
        let backwards = CleanEnergy {
            end_at: t(9),
            ..delivery("1")
        };
        assert_eq!(fields(&backwards), ["end_at"]);
    }
}
