//! A meter's reading, raw or at a step boundary.

use crate::{time::rfc3339_ms, Problem, Problems};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use wattledger_domain::steps::{self, StepError};
use wattledger_domain::units::{milliwatts, MAX_POWER_W};

wattledger_domain::record! {
    /// One reading: an energy counter (mJ since some origin) and/or a power reading (W).
    ///
    /// A step record (what the agent sends by default, with `step_s`) is a reading at a step
    /// boundary: the counter there, `power_w` the mean and `peak_w` the peak of the power
    /// readings of the step that ends at `ts`. A record without `step_s` is a raw reading, kept
    /// for the raw retention (14 days by default) rather than the steps' (400 days).
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
    #[serde(deny_unknown_fields)]
    pub struct Sample {
        pub meter: String,
        /// RFC 3339; sent to the millisecond.
        #[serde(with = "rfc3339_ms")]
        pub ts: DateTime<Utc>,
        /// Not negative.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub counter_mj: Option<i64>,
        /// 0 to 10,000,000 W.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub power_w: Option<f64>,
        /// 0 to 10,000,000 W, not below `power_w`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub peak_w: Option<f64>,
        /// A step record's step length in seconds, a divisor of 3600; `ts` on its boundary.
        /// Absent for a raw reading: the server keeps the two apart, raw readings expire sooner.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub step_s: Option<u32>,
        /// The agent estimated part of the counter's rise since the meter's previous reading
        /// from its power readings: the GPU's energy counter stuck (an AMD accumulator that
        /// stops moving under load) or was reset. Counted as estimated energy
        /// (`counter_estimated` in the data quality). Only with `counter_mj`; false when absent.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub counter_estimated: bool = false,
    }
}

impl Sample {
    /// Everything wrong with the reading on its own; `latest` is the server's clock plus the
    /// skew it allows.
    pub fn check(&self, latest: DateTime<Utc>) -> Vec<Problem> {
        let mut p = Problems::default();
        p.key("meter", &self.meter);
        p.time("ts", self.ts, latest);
        if self.counter_mj.is_some_and(|c| c < 0) {
            p.add("counter_mj", "must not be negative");
        }
        let power_mw = watts(&mut p, "power_w", self.power_w);
        let peak_mw = watts(&mut p, "peak_w", self.peak_w);
        if peak_mw.is_some() && peak_mw < power_mw {
            p.add("peak_w", "is below power_w, the step's mean");
        }
        if self.counter_estimated && self.counter_mj.is_none() {
            p.add("counter_estimated", "is only for a sample with counter_mj");
        }
        if self.counter_mj.is_none() && self.power_w.is_none() && p.is_empty() {
            p.add("counter_mj", "a sample needs counter_mj or power_w");
        }
        if let Some(step_s) = self.step_s {
            if let Err(e) = steps::boundary(step_s, self.ts) {
                p.add(
                    if e == StepError::Length {
                        "step_s"
                    } else {
                        "ts"
                    },
                    e,
                );
            }
        }
        p.done()
    }

    /// The mean power in integer mW (the ledger's unit), for a checked sample.
    pub fn power_mw(&self) -> Option<i64> {
        self.power_w.and_then(milliwatts)
    }

    /// The step's peak power in integer mW, for a checked sample.
    pub fn peak_mw(&self) -> Option<i64> {
        self.peak_w.and_then(milliwatts)
    }

    /// A raw reading, not a step record.
    pub fn is_raw(&self) -> bool {
        self.step_s.is_none()
    }
}

/// A power reading in mW, or the problem with it.
fn watts(p: &mut Problems, field: &str, w: Option<f64>) -> Option<i64> {
    let w = w?;
    if !w.is_finite() {
        p.add(field, "must be a number");
    } else if w < 0.0 {
        p.add(field, "must not be negative");
    } else if w > MAX_POWER_W {
        p.add(field, "is above 10 MW: not a plausible meter reading");
    }
    milliwatts(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_792_999_980 + s, 0).unwrap()
    }

    fn sample() -> Sample {
        Sample {
            meter: "n1-gpu0".into(),
            ts: at(0),
            counter_mj: Some(5),
            power_w: Some(300.0),
            peak_w: Some(410.5),
            step_s: None,
            counter_estimated: false,
        }
    }

    fn fields(s: &Sample) -> Vec<String> {
        s.check(at(60)).into_iter().map(|p| p.field).collect()
    }

    #[test]
    fn a_sample_serializes_as_the_ingest_schema_and_reads_back() {
        let s = Sample {
            ts: Utc.timestamp_opt(1_792_999_980, 250_000_000).unwrap(),
            power_w: None,
            peak_w: None,
            ..sample()
        };
        let text = serde_json::to_string(&s).unwrap();
        assert_eq!(
            text,
            r#"{"meter":"n1-gpu0","ts":"2026-10-26T07:33:00.250Z","counter_mj":5}"#
        );
        assert_eq!(serde_json::from_str::<Sample>(&text).unwrap(), s);
        assert!(serde_json::from_str::<Sample>(
            r#"{"meter":"m","ts":"2026-10-26T07:33:00Z","counter_mj":5,"volts":3}"#
        )
        .is_err());
    }

    #[test]
    fn a_valid_sample_has_no_problems() {
        assert!(sample().check(at(60)).is_empty());
        let step = Sample {
            ts: at(60),
            step_s: Some(60),
            counter_estimated: false,
            ..sample()
        };
        assert!(step.check(at(60)).is_empty());
    }

    #[test]
    fn each_rule_names_its_field() {
        let s = |f: fn(&mut Sample)| {
            let mut s = sample();
            f(&mut s);
            fields(&s)
        };
        assert_eq!(s(|s| s.meter = " ".into()), ["meter"]);
        assert_eq!(s(|s| s.meter = "a\0b".into()), ["meter"]);
        assert_eq!(s(|s| s.ts = at(61)), ["ts"]);
        assert_eq!(s(|s| s.counter_mj = Some(-1)), ["counter_mj"]);
        assert_eq!(s(|s| s.power_w = Some(-0.5)), ["power_w"]);
        assert_eq!(s(|s| s.power_w = Some(2e7)), ["power_w"]);
        assert_eq!(s(|s| s.peak_w = Some(f64::NAN)), ["peak_w"]);
        assert_eq!(s(|s| s.peak_w = Some(299.0)), ["peak_w"]);
        assert_eq!(
            s(|s| {
                s.counter_mj = None;
                s.power_w = None;
                s.peak_w = None;
            }),
            ["counter_mj"]
        );
        assert_eq!(s(|s| s.step_s = Some(7)), ["step_s"]);
        assert_eq!(s(|s| s.step_s = Some(3600)), ["ts"]);
    }

    #[test]
    fn peak_and_mean_compare_in_the_stored_unit() {
        // Both round to 300,000 mW: equal as stored, so not "below".
        let s = Sample {
            power_w: Some(300.0004),
            peak_w: Some(300.0001),
            ..sample()
        };
        assert!(s.check(at(60)).is_empty());
        assert_eq!((s.power_mw(), s.peak_mw()), (Some(300_000), Some(300_000)));
    }
}
