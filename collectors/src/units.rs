//! Units of the raw registers PDUs, BMCs and exporters report, and their conversion to what
//! the ingest API takes: power in W, energy counters in whole mJ.
//!
//! Vendors count in odd steps (APC: tenths of a kWh and hundredths of a kW; Raritan: an
//! integer with per-sensor decimal digits), so a unit is named in config or in a vendor
//! profile as text (`0.1kWh`) and converted here exactly: integer registers become integer
//! millijoules without passing through a float.

use std::fmt;

/// A register's unit: power (a gauge) or energy (a counter, even where a MIB or exporter
/// calls it a gauge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Milliwatts per count.
    Power { mw: i64 },
    /// Millijoules per count.
    Energy { mj: i64 },
}

/// Every unit name, as written in config.
pub const NAMES: &str = "mW W 0.01kW 0.1kW kW mJ J Wh 0.01kWh 0.1kWh kWh";

impl Unit {
    pub fn parse(name: &str) -> Option<Unit> {
        Some(match name {
            "mW" => Unit::Power { mw: 1 },
            "W" => Unit::Power { mw: 1_000 },
            "0.01kW" => Unit::Power { mw: 10_000 },
            "0.1kW" => Unit::Power { mw: 100_000 },
            "kW" => Unit::Power { mw: 1_000_000 },
            "mJ" => Unit::Energy { mj: 1 },
            "J" => Unit::Energy { mj: 1_000 },
            "Wh" => Unit::Energy { mj: 3_600_000 },
            "0.01kWh" => Unit::Energy { mj: 36_000_000 },
            "0.1kWh" => Unit::Energy { mj: 360_000_000 },
            "kWh" => Unit::Energy { mj: 3_600_000_000 },
            _ => return None,
        })
    }

    pub fn is_energy(self) -> bool {
        matches!(self, Unit::Energy { .. })
    }

    /// Watts of a power register read as a number (Prometheus text).
    pub fn watts(self, value: f64) -> Option<f64> {
        match self {
            Unit::Power { mw } => Some(value * mw as f64 / 1e3),
            Unit::Energy { .. } => None,
        }
    }

    /// Watts of an integer power register with `digits` decimal digits.
    pub fn watts_scaled(self, raw: i64, digits: u32) -> Option<f64> {
        match self {
            Unit::Power { mw } => Some(raw as f64 * mw as f64 / 1e3 / 10f64.powi(digits as i32)),
            Unit::Energy { .. } => None,
        }
    }

    /// Millijoules of an energy register read as a number (Prometheus text), to the
    /// nearest mJ.
    pub fn millijoules(self, value: f64) -> Option<i64> {
        match self {
            Unit::Energy { mj } => Some((value * mj as f64).round() as i64),
            Unit::Power { .. } => None,
        }
    }

    /// Millijoules of an integer energy register with `digits` decimal digits: exact where
    /// the step is a whole number of mJ (it is for every unit above with up to 3 digits),
    /// otherwise rounded half away from zero. `None` on overflow.
    pub fn millijoules_scaled(self, raw: i64, digits: u32) -> Option<i64> {
        let Unit::Energy { mj } = self else {
            return None;
        };
        let num = i128::from(raw) * i128::from(mj);
        let den = 10i128.checked_pow(digits)?;
        let q = num / den;
        let r = num % den;
        let rounded = if 2 * r.abs() >= den {
            q + num.signum()
        } else {
            q
        };
        i64::try_from(rounded).ok()
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unit::Power { mw } => write!(f, "{mw} mW per count"),
            Unit::Energy { mj } => write!(f, "{mj} mJ per count"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_name_parses_and_the_steps_are_exact() {
        for n in NAMES.split(' ') {
            assert!(Unit::parse(n).is_some(), "{n}");
        }
        assert_eq!(Unit::parse("kVA"), None);
        let dkwh = Unit::parse("0.1kWh").unwrap();
        // AP8641 outlet 1 in the recording: 1094 tenths of a kWh.
        assert_eq!(dkwh.millijoules_scaled(1094, 0), Some(393_840_000_000));
        assert_eq!(dkwh.millijoules(1094.0), Some(393_840_000_000));
        let wh = Unit::parse("Wh").unwrap();
        assert_eq!(wh.millijoules_scaled(8937, 0), Some(32_173_200_000));
        assert_eq!(wh.millijoules_scaled(1, 3), Some(3_600), "1 mWh = 3.6 J");
        assert_eq!(
            Unit::parse("0.01kW").unwrap().watts_scaled(121, 0),
            Some(1210.0)
        );
        assert_eq!(Unit::parse("W").unwrap().watts_scaled(311, 3), Some(0.311));
        assert_eq!(Unit::parse("W").unwrap().millijoules(1.0), None);
    }

    proptest! {
        /// Scaling by digits is the same as dividing the exact product, rounded.
        #[test]
        fn scaled_energy_is_the_rounded_exact_quotient(raw in 0i64..1 << 40, digits in 0u32..4) {
            let mj = Unit::parse("Wh").unwrap().millijoules_scaled(raw, digits).unwrap();
            let exact = i128::from(raw) * 3_600_000;
            let den = 10i128.pow(digits);
            prop_assert!((i128::from(mj) * den - exact).abs() * 2 <= den);
        }
    }
}
