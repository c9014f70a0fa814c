//! Outlets feeding meters: a PDU reports per outlet, the ledger wants one counter per node,
//! and GPU servers draw from two or more outlets (A and B feeds, one per PSU).
//!
//! Every mapped meter gets one counter: the sum, since the agent first saw them, of its
//! outlets' register increases. A register that goes down was reset (a PDU's "reset energy"
//! button, a firmware update) and counts from zero, as the server counts a meter reset, so
//! a reset on one feed never turns into a drop (or a jump) of the node's counter. The state
//! (each outlet's last register, each meter's total) is spooled with the samples, so a
//! restarted agent continues the same counter.

use crate::records::Sample;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One outlet's reading in one cycle.
#[derive(Debug, Clone, PartialEq)]
pub struct OutletReading {
    /// The outlet's key in the source's config (`"3"`, `"1.3"`, `"A1"`).
    pub outlet: String,
    pub power_w: Option<f64>,
    /// The outlet's energy register in mJ; `None` when unsupported or unreadable.
    pub energy_mj: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Feeds {
    meters: BTreeMap<String, Fed>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Fed {
    total_mj: i64,
    /// Last register per outlet.
    last: BTreeMap<String, i64>,
}

impl Feeds {
    /// Folds one cycle's readings into one sample per meter of `map` (outlet → meter).
    ///
    /// A meter's power is the sum over its outlets, given only when every one of them
    /// reported power (a partial sum would read as a drop). Its counter is given once any of
    /// its outlets has reported energy; an outlet that skips a cycle adds its increase when
    /// it reports again. Outlets missing from `map` are ignored.
    pub fn samples(
        &mut self,
        readings: &[OutletReading],
        map: &BTreeMap<String, String>,
        now: DateTime<Utc>,
    ) -> Vec<Sample> {
        let by_outlet: BTreeMap<&str, &OutletReading> =
            readings.iter().map(|r| (r.outlet.as_str(), r)).collect();
        let mut outlets_of: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (outlet, meter) in map {
            outlets_of.entry(meter).or_default().push(outlet);
        }
        let mut out = Vec::new();
        for (meter, outlets) in outlets_of {
            let fed = self.meters.entry(meter.to_owned()).or_default();
            let mut power = Some(0.0);
            for outlet in &outlets {
                let reading = by_outlet.get(outlet);
                power = match (power, reading.and_then(|r| r.power_w)) {
                    (Some(sum), Some(w)) => Some(sum + w),
                    _ => None,
                };
                if let Some(e) = reading.and_then(|r| r.energy_mj) {
                    if let Some(prev) = fed.last.insert((*outlet).to_owned(), e) {
                        fed.total_mj += if e >= prev { e - prev } else { e };
                    }
                }
            }
            let counter_mj = (!fed.last.is_empty()).then_some(fed.total_mj);
            if counter_mj.is_some() || power.is_some() {
                out.push(Sample {
                    meter: meter.to_owned(),
                    ts: now,
                    counter_mj,
                    power_w: power,
                    peak_w: None,
                    step_s: None,
                    counter_estimated: false,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn reading(outlet: &str, w: Option<f64>, e: Option<i64>) -> OutletReading {
        OutletReading {
            outlet: outlet.into(),
            power_w: w,
            energy_mj: e,
        }
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(o, m)| (o.to_string(), m.to_string()))
            .collect()
    }

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_790_000_000 + s, 0).unwrap()
    }

    #[test]
    fn a_dual_fed_node_sums_its_feeds_and_survives_a_reset_on_one() {
        let m = map(&[("1", "n1"), ("13", "n1"), ("2", "n2")]);
        let mut f = Feeds::default();
        let s0 = f.samples(
            &[
                reading("1", Some(100.0), Some(5_000)),
                reading("13", Some(120.0), Some(9_000)),
                reading("2", Some(50.0), Some(1_000)),
                reading("7", Some(9.0), Some(7)),
            ],
            &m,
            t(0),
        );
        assert_eq!(s0.len(), 2, "outlet 7 is not mapped");
        assert_eq!((s0[0].power_w, s0[0].counter_mj), (Some(220.0), Some(0)));
        // Feed 13 is reset to zero and counts 400 since; feed 1 rises 300.
        let s1 = f.samples(
            &[
                reading("1", Some(100.0), Some(5_300)),
                reading("13", Some(120.0), Some(400)),
                reading("2", None, Some(1_100)),
            ],
            &m,
            t(10),
        );
        assert_eq!(s1[0].counter_mj, Some(700));
        assert_eq!((s1[1].power_w, s1[1].counter_mj), (None, Some(100)));
    }

    #[test]
    fn an_outlet_that_skips_a_cycle_adds_its_increase_later_and_power_needs_every_feed() {
        let m = map(&[("a", "n"), ("b", "n")]);
        let mut f = Feeds::default();
        f.samples(
            &[
                reading("a", Some(1.0), Some(0)),
                reading("b", Some(1.0), Some(0)),
            ],
            &m,
            t(0),
        );
        let s = f.samples(&[reading("a", Some(1.0), Some(10))], &m, t(1));
        assert_eq!((s[0].power_w, s[0].counter_mj), (None, Some(10)));
        let s = f.samples(
            &[
                reading("a", Some(1.0), Some(20)),
                reading("b", Some(2.0), Some(30)),
            ],
            &m,
            t(2),
        );
        assert_eq!((s[0].power_w, s[0].counter_mj), (Some(3.0), Some(50)));
    }

    #[test]
    fn unsupported_energy_gives_power_only_and_nothing_read_gives_nothing() {
        let m = map(&[("1", "n")]);
        let mut f = Feeds::default();
        let s = f.samples(&[reading("1", Some(5.0), None)], &m, t(0));
        assert_eq!((s[0].power_w, s[0].counter_mj), (Some(5.0), None));
        assert!(f.samples(&[reading("1", None, None)], &m, t(1)).is_empty());
    }

    proptest! {
        /// However the registers move (rises, resets, skipped cycles) and wherever the agent
        /// restarts from its spooled state, the counter never goes down and grows by exactly
        /// the registers' increases, a reset counting from zero.
        #[test]
        fn the_counter_is_monotonic_and_exact(
            steps in proptest::collection::vec((0i64..1_000, any::<bool>(), any::<bool>(), any::<bool>()), 1..60)
        ) {
            let m = map(&[("a", "n")]);
            let mut f = Feeds::default();
            let mut register = 0i64;
            let mut last_seen: Option<i64> = None;
            let mut expected = 0i64;
            let mut prev_counter = 0i64;
            for (i, (delta, reset, skip, restart)) in steps.into_iter().enumerate() {
                register = if reset { delta } else { register + delta };
                if restart {
                    let state = serde_json::to_value(&f).unwrap();
                    f = serde_json::from_value(state).unwrap();
                }
                let r = if skip { None } else { Some(register) };
                let s = f.samples(&[reading("a", None, r)], &m, t(i as i64));
                if let Some(now) = r {
                    if let Some(prev) = last_seen {
                        expected += if now >= prev { now - prev } else { now };
                    }
                    last_seen = Some(now);
                }
                if let Some(c) = s.first().and_then(|s| s.counter_mj) {
                    prop_assert!(c >= prev_counter);
                    prop_assert_eq!(c, expected);
                    prev_counter = c;
                }
            }
        }
    }
}
