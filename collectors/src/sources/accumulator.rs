//! An AMD GPU's energy accumulator read as a counter: the AMD sources (`amdsmi`,
//! `amd_exporter`) send for each GPU the counter built here from the value the GPU reports,
//! so what leaves the agent rises by what the GPU drew, whatever its accumulator did.
//!
//! The accumulator (`amdsmi_get_energy_count`, the driver's gpu_metrics `energy_accumulator`)
//! counts ~15.3 µJ a step since the driver loaded. Read through `amd-smi` or the device
//! metrics exporter it goes wrong in three ways, each handled apart:
//!
//! - **It wraps.** The library's accumulator is 64 bits (amdsmi.h: `uint64_t
//!   energy_accumulator; // v1 mod. (32->64)`): gpu_metrics v1.0 declared it 32 bits, and
//!   2³² counts × 15.3 µJ is 65.7 kJ, under 90 s at 750 W. Where a source is told its GPUs
//!   count in fewer bits ([`Accumulator::bits`]), a step backwards that the power readings
//!   can account for is a wrap, and the counter's range is added back exactly.
//! - **It resets** (a driver reload, a GPU reset): the value starts again near zero. That is
//!   not resolved here but passed on as a counter that goes backwards, which the step reducer
//!   (`crate::steps`) and the server resolve and flag as they do for NVML and DCGM counters:
//!   the new value counts from zero.
//! - **It sticks.** Public reports show the value not moving under load: an MI100 until a
//!   reboot (ROCm/amdsmi#38, AMDResearch/hpcfund#21), an MI210 within one process
//!   (ROCm/rocm_smi_lib#180). Sent as read, the ledger would charge nothing for those
//!   minutes. A value that does not move while the power readings say at least
//!   [`STUCK_MIN_MJ`] was drawn is stuck: the interval counts the power readings' trapezoid
//!   (the server's own rule for power), and when the value moves again, the part of its jump
//!   the estimate already counted is not counted twice.
//!
//! Each of these is returned as an [`Event`] for the source to log. A reading whose counter
//! counts an estimate from power ([`Event::estimated`]) is sent with `counter_estimated`, so
//! the server counts that energy as estimated; a reset and a gap the server flags itself.

use serde::{Deserialize, Serialize};
use wattledger_domain::units::energy_from_power_mj;

/// µJ per count, as `amdsmi_get_energy_count` reports it (rocm_smi.cc hard-codes 15.3F for
/// every ASIC; the driver's gpu_metrics comment says 15.259 µJ, i.e. 2⁻¹⁶ J). Values read as
/// joules from `amd-smi` were already multiplied by this float.
pub const COUNTER_RESOLUTION_UJ: f32 = 15.3;

/// The least energy (mJ) the power readings must show over an interval before an unmoved
/// value is called stuck: a joule is some 65,000 counts of the accumulator and 1,000 of
/// `amd-smi`'s millijoule rounding, so a live counter cannot miss it.
pub const STUCK_MIN_MJ: i64 = 1_000;

/// How a source's GPUs count: the width of their accumulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accumulator {
    /// Bits of the accumulator; 64 (the library's type) never wraps in practice.
    pub bits: u32,
}

impl Accumulator {
    /// The energy (mJ) at which a value read as energy wraps: 2^bits counts of
    /// [`COUNTER_RESOLUTION_UJ`], rounded to the mJ (the rounding is under 1 mJ a wrap).
    /// `None` for 64 bits: 2⁶⁴ counts are 2.8e14 J, 12,000 years at 750 W.
    pub fn wrap_mj(self) -> Option<i64> {
        if self.bits >= 64 {
            return None;
        }
        let counts = 1i128 << self.bits;
        // 15.3F is exactly 15.30000019073486328125: scaled by 2^23 it is an integer.
        let res_x2_23 = i128::from((f64::from(COUNTER_RESOLUTION_UJ) * 8_388_608.0) as i64);
        let uj = counts.checked_mul(res_x2_23)? >> 23;
        i64::try_from((uj + 500) / 1000).ok()
    }
}

/// One reading of a GPU's accumulator, as energy, with the power read beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    pub ts_ms: i64,
    /// The accumulator as read, in mJ.
    pub energy_mj: i64,
    pub power_mw: Option<i64>,
}

/// What an interval showed, for the source to log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The value wrapped; `added_mj`, the range, was added back.
    Wrapped { added_mj: i64 },
    /// The value went backwards and no wrap explains it: a reset, passed on as read.
    Reset { from_mj: i64, to_mj: i64 },
    /// The value did not move while the power readings show `estimated_mj` drawn; `began`
    /// on the first interval of an episode.
    Stuck { began: bool, estimated_mj: i64 },
    /// The value moves again after being stuck for `stuck_ms`; `estimated_mj` was counted
    /// from power meanwhile, `repaid_mj` of the jump it made was that estimate counted again
    /// and was left out.
    Resumed {
        stuck_ms: i64,
        estimated_mj: i64,
        repaid_mj: i64,
    },
}

impl Event {
    /// Whether the counter sent for the interval counts energy estimated from the power
    /// readings rather than the accumulator's own movement: a stuck interval, or the one it
    /// resumed in where its jump was neither all new (it resumed where it stuck) nor the
    /// stuck minutes caught up (then the estimate was left out in full). The sample carries
    /// the flag, and the server counts the step as estimated energy.
    pub fn estimated(self) -> bool {
        match self {
            Event::Stuck { .. } => true,
            Event::Resumed {
                estimated_mj,
                repaid_mj,
                ..
            } => 0 < repaid_mj && repaid_mj < estimated_mj,
            Event::Wrapped { .. } | Event::Reset { .. } => false,
        }
    }

    /// Says what happened to `meter`'s counter in the log: a wrap at debug, a reset and the
    /// start of a stuck episode as warnings, the end of one with what was estimated.
    pub fn log(self, source: &str, meter: &str) {
        match self {
            Event::Wrapped { added_mj } => {
                tracing::debug!(source, meter, added_mj, "energy accumulator wrapped");
            }
            Event::Reset { from_mj, to_mj } => tracing::warn!(
                source,
                meter,
                from_mj,
                to_mj,
                "energy counter went backwards (driver reload or GPU reset): counted from zero"
            ),
            Event::Stuck {
                began: true,
                estimated_mj,
            } => tracing::warn!(
                source,
                meter,
                estimated_mj,
                "energy counter stuck while the GPU draws power: counting its power readings"
            ),
            Event::Stuck { .. } => {}
            Event::Resumed {
                stuck_ms,
                estimated_mj,
                repaid_mj,
            } => tracing::warn!(
                source,
                meter,
                stuck_ms,
                estimated_mj,
                repaid_mj,
                "energy counter moves again; the stuck interval was estimated from power"
            ),
        }
    }
}

/// One GPU's counter: what was read last and what has been added to it. Spooled with the
/// source's records, so a restarted agent carries the same counter on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counter {
    last: Option<Last>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Last {
    ts_ms: i64,
    energy_mj: i64,
    power_mw: Option<i64>,
    /// Added to the value read: wraps, and power estimates over stuck intervals.
    offset_mj: i64,
    /// Estimated over the current stuck episode (0 when not stuck), and since when.
    owed_mj: i64,
    stuck_since_ms: Option<i64>,
}

impl Counter {
    /// Takes a reading (in time order) and returns the counter to send with it, and what the
    /// interval since the last reading showed. A reading not newer than the last changes
    /// nothing and gets the last counter back.
    pub fn read(&mut self, acc: Accumulator, r: Reading) -> (i64, Option<Event>) {
        let Some(l) = self.last else {
            self.last = Some(Last {
                ts_ms: r.ts_ms,
                energy_mj: r.energy_mj,
                power_mw: r.power_mw,
                offset_mj: 0,
                owed_mj: 0,
                stuck_since_ms: None,
            });
            return (r.energy_mj, None);
        };
        if r.ts_ms <= l.ts_ms {
            return (l.energy_mj.saturating_add(l.offset_mj), None);
        }
        let dt = r.ts_ms - l.ts_ms;
        let trapezoid = match (l.power_mw, r.power_mw) {
            (Some(a), Some(b)) => Some(energy_from_power_mj(a, b, dt)),
            _ => None,
        };
        let mut next = Last {
            ts_ms: r.ts_ms,
            energy_mj: r.energy_mj,
            power_mw: r.power_mw,
            ..l
        };
        let mut event = None;
        let delta = if r.energy_mj >= l.energy_mj {
            r.energy_mj - l.energy_mj
        } else {
            match acc.wrap_mj().filter(|&range| {
                plausible_wrap(r.energy_mj + range - l.energy_mj, range, trapezoid)
            }) {
                Some(range) => {
                    next.offset_mj = next.offset_mj.saturating_add(range);
                    event = Some(Event::Wrapped { added_mj: range });
                    r.energy_mj + range - l.energy_mj
                }
                None => {
                    // A reset: the value counts from zero again. Passed on as read, with
                    // nothing added, so whoever sums the counter sees it go backwards.
                    self.last = Some(Last {
                        offset_mj: 0,
                        owed_mj: 0,
                        stuck_since_ms: None,
                        ..next
                    });
                    let reset = Event::Reset {
                        from_mj: l.energy_mj,
                        to_mj: r.energy_mj,
                    };
                    return (r.energy_mj, Some(reset));
                }
            }
        };
        match trapezoid {
            Some(drawn) if delta == 0 && drawn >= STUCK_MIN_MJ => {
                next.offset_mj = next.offset_mj.saturating_add(drawn);
                next.owed_mj = next.owed_mj.saturating_add(drawn);
                next.stuck_since_ms = Some(l.stuck_since_ms.unwrap_or(l.ts_ms));
                event = Some(Event::Stuck {
                    began: l.stuck_since_ms.is_none(),
                    estimated_mj: drawn,
                });
            }
            _ if delta > 0 && l.owed_mj > 0 => {
                // Moving again. If it caught up, its jump holds the stuck minutes the
                // estimate already counted: count the jump less the estimate, but at least
                // what this interval's own power readings show (it may have resumed from
                // where it stuck, the stuck minutes lost).
                let own = delta.min(trapezoid.unwrap_or(0));
                let counted = (delta - l.owed_mj).max(own);
                let repaid = delta - counted;
                next.offset_mj -= repaid;
                event = Some(Event::Resumed {
                    stuck_ms: l.ts_ms - l.stuck_since_ms.unwrap_or(l.ts_ms),
                    estimated_mj: l.owed_mj,
                    repaid_mj: repaid,
                });
                next.owed_mj = 0;
                next.stuck_since_ms = None;
            }
            _ => {}
        }
        self.last = Some(next);
        (r.energy_mj.saturating_add(next.offset_mj), event)
    }
}

/// Whether a step backwards is a wrap: the energy it implies (`wrapped_mj`) is no more than
/// the power readings say could have been drawn (twice their trapezoid, plus a joule for
/// readings that lag); without power readings, no more than half the counter's range.
fn plausible_wrap(wrapped_mj: i64, range_mj: i64, trapezoid: Option<i64>) -> bool {
    match trapezoid {
        Some(t) => wrapped_mj <= t.saturating_mul(2).saturating_add(1_000),
        None => wrapped_mj <= range_mj / 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const WIDE: Accumulator = Accumulator { bits: 64 };
    const NARROW: Accumulator = Accumulator { bits: 32 };

    fn at(ts_s: i64, energy_mj: i64, power_w: i64) -> Reading {
        Reading {
            ts_ms: ts_s * 1000,
            energy_mj,
            power_mw: Some(power_w * 1000),
        }
    }

    #[test]
    fn the_wrap_is_the_counters_range_in_millijoules() {
        // 2^32 × 15.30000019073486328125 µJ = 65,713,000,447.9 µJ.
        assert_eq!(NARROW.wrap_mj(), Some(65_713_000));
        assert_eq!(Accumulator { bits: 48 }.wrap_mj(), Some(4_306_567_197_360));
        assert_eq!(WIDE.wrap_mj(), None, "64 bits never wrap");
    }

    /// Real `amd-smi metric -E -w 1 --csv` readings of an MI210 a second apart
    /// (shared/fixtures/amd/amdsmi-issue38-mi210-energy-watch.csv): a counter that moves
    /// ~43 J a second passes through unchanged.
    #[test]
    fn a_live_counter_passes_through() {
        let text = crate::fixtures::amd("amdsmi-issue38-mi210-energy-watch.csv");
        let mut c = Counter::default();
        let mut sent = Vec::new();
        for line in text
            .lines()
            .filter(|l| l.ends_with(|c: char| c.is_ascii_digit()))
        {
            let f: Vec<&str> = line.split(',').collect();
            if f.len() != 3 || f[1] != "0" {
                continue;
            }
            let ts: i64 = f[0].parse().unwrap();
            let mj = crate::sources::amdsmi::parse::joules_to_mj(f[2]).unwrap();
            // The CSV has no power column: the counter's own rate, 43 W, stands in for it.
            sent.push(c.read(WIDE, at(ts, mj, 43)));
        }
        let counters: Vec<i64> = sent.iter().map(|s| s.0).collect();
        assert_eq!(
            counters,
            [
                20_909_145_914,
                20_909_188_578,
                20_909_231_286,
                20_909_273_989
            ]
        );
        assert!(sent.iter().all(|s| s.1.is_none()));
    }

    /// Real `amdsmi_get_energy_count` reads of one MI-series GPU a second apart
    /// (ROCm/amdsmi#115): the value went back 209 J. With a 64-bit accumulator no wrap
    /// explains that: it is passed on as read, for the reducer and server to count from zero.
    #[test]
    fn a_real_step_backwards_is_passed_on_as_a_reset() {
        let text = crate::fixtures::amd("amdsmi-issue115-energy-count-backwards.txt");
        let reads: Vec<Reading> = text
            .lines()
            .filter(|l| l.contains("(0x56254b5cf110)"))
            .map(|l| {
                let field = |name: &str| -> i64 {
                    let at = l.find(name).unwrap() + name.len();
                    let digits: String = l[at..].chars().take_while(char::is_ascii_digit).collect();
                    digits.parse().unwrap()
                };
                Reading {
                    ts_ms: field("t=") / 1_000_000,
                    energy_mj: field("energy*res=") / 1000,
                    power_mw: None,
                }
            })
            .collect();
        assert_eq!(reads.len(), 2);
        let mut c = Counter::default();
        assert_eq!(c.read(WIDE, reads[0]), (71_263_443, None));
        assert_eq!(
            c.read(WIDE, reads[1]),
            (
                71_054_156,
                Some(Event::Reset {
                    from_mj: 71_263_443,
                    to_mj: 71_054_156
                })
            )
        );
    }

    #[test]
    fn a_wrap_is_added_back_and_a_reset_passed_on() {
        let range = NARROW.wrap_mj().unwrap();
        let mut c = Counter::default();
        c.read(NARROW, at(0, range - 300_000, 600));
        // One second at 600 W across the wrap.
        let (sent, event) = c.read(NARROW, at(1, 300_000, 600));
        assert_eq!(sent, range + 300_000);
        assert_eq!(event, Some(Event::Wrapped { added_mj: range }));
        // A driver reload: the value starts again near zero, far less than a wrap implies.
        let (sent, event) = c.read(NARROW, at(2, 5_000, 600));
        assert_eq!(
            sent, 5_000,
            "passed on: the reducer and server count it from zero"
        );
        assert!(matches!(event, Some(Event::Reset { to_mj: 5_000, .. })));
        // A 64-bit counter never wraps: the same step is a reset.
        let mut w = Counter::default();
        w.read(WIDE, at(0, range - 300_000, 600));
        assert!(matches!(
            w.read(WIDE, at(1, 300_000, 600)).1,
            Some(Event::Reset { .. })
        ));
    }

    /// The MI100 of AMDResearch/hpcfund#21: `amdsmi_get_energy_count` returned 8152136
    /// counts twice under full load (shared/fixtures/amd/SOURCES.md). The power beside it is
    /// hand-made: 290 W.
    #[test]
    fn a_stuck_value_counts_the_power_and_a_catch_up_is_not_counted_twice() {
        let stuck = (8_152_136.0 * f64::from(COUNTER_RESOLUTION_UJ) / 1000.0).round() as i64;
        let mut c = Counter::default();
        c.read(WIDE, at(0, stuck, 290));
        let (sent, event) = c.read(WIDE, at(10, stuck, 290));
        assert_eq!(sent, stuck + 2_900_000);
        assert_eq!(
            event,
            Some(Event::Stuck {
                began: true,
                estimated_mj: 2_900_000
            })
        );
        assert!(
            event.is_some_and(Event::estimated),
            "a stuck interval is an estimate"
        );
        let (sent, event) = c.read(WIDE, at(20, stuck, 290));
        assert_eq!(sent, stuck + 5_800_000);
        assert!(matches!(event, Some(Event::Stuck { began: false, .. })));
        // It catches up: 30 s at 290 W since it stuck. Only the last 10 s are new.
        let (sent, event) = c.read(WIDE, at(30, stuck + 8_700_000, 290));
        assert_eq!(sent, stuck + 8_700_000);
        assert_eq!(
            event,
            Some(Event::Resumed {
                stuck_ms: 20_000,
                estimated_mj: 5_800_000,
                repaid_mj: 5_800_000
            })
        );
        assert!(!event.is_some_and(Event::estimated), "caught up: measured");
        // Then counts on as read, the estimate paid back in full.
        assert_eq!(
            c.read(WIDE, at(31, stuck + 8_990_000, 290)).0,
            stuck + 8_990_000
        );
    }

    #[test]
    fn a_value_that_resumes_where_it_stuck_keeps_the_estimate() {
        let mut c = Counter::default();
        c.read(WIDE, at(0, 1_000_000, 300));
        c.read(WIDE, at(10, 1_000_000, 300));
        // The minutes it missed are lost to it; it counts on from where it stuck.
        let (sent, event) = c.read(WIDE, at(20, 4_000_000, 300));
        assert_eq!(sent, 1_000_000 + 3_000_000 + 3_000_000);
        assert!(matches!(event, Some(Event::Resumed { repaid_mj: 0, .. })));
        assert!(
            !event.is_some_and(Event::estimated),
            "its own movement: measured"
        );
    }

    /// What the AMD sources send: the counter and whether it was estimated, as readings the
    /// step reducer turns into the step records the server counts.
    #[test]
    fn a_stuck_counter_reaches_the_server_as_estimated_steps() {
        use crate::records::Sample;
        use crate::steps::Reducer;
        let mut c = Counter::default();
        let mut reducer = Reducer::new(60_000, 600_000);
        let mut records = Vec::new();
        // 300 W throughout; the accumulator stops moving from 60 s to 120 s.
        for t in (0..=180).step_by(10) {
            let energy = 1_000_000 + 300_000 * t.min(60);
            let energy = if t > 120 {
                energy + 300_000 * (t - 120)
            } else {
                energy
            };
            let (sent, event) = c.read(WIDE, at(t, energy, 300));
            records.extend(reducer.push([Sample {
                meter: "n1-socket0".into(),
                ts: chrono::DateTime::from_timestamp(t, 0).unwrap(),
                counter_mj: Some(sent),
                power_w: Some(300.0),
                peak_w: None,
                step_s: None,
                counter_estimated: event.is_some_and(Event::estimated),
            }]));
        }
        let steps: Vec<(i64, Option<i64>, bool)> = records
            .iter()
            .map(|s| (s.ts.timestamp(), s.counter_mj, s.counter_estimated))
            .collect();
        // Every step counts its 18 kJ; the stuck one's come from power and say so.
        assert_eq!(
            steps,
            [
                (0, Some(1_000_000), false),
                (60, Some(19_000_000), false),
                (120, Some(37_000_000), true),
                (180, Some(55_000_000), false),
            ]
        );
    }

    #[test]
    fn a_partial_catch_up_counts_the_power_and_is_estimated() {
        let mut c = Counter::default();
        c.read(WIDE, at(0, 1_000_000, 300));
        c.read(WIDE, at(10, 1_000_000, 300));
        // It jumps 4.5 kJ: more than the 3 kJ of its own 10 s, less than the 6 kJ since it
        // stuck. The interval counts its power readings, 3 kJ: an estimate.
        let (sent, event) = c.read(WIDE, at(20, 5_500_000, 300));
        assert_eq!(sent, 1_000_000 + 3_000_000 + 3_000_000);
        assert!(matches!(
            event,
            Some(Event::Resumed {
                repaid_mj: 1_500_000,
                ..
            })
        ));
        assert!(event.is_some_and(Event::estimated));
    }

    #[test]
    fn an_idle_value_is_not_stuck() {
        let mut c = Counter::default();
        c.read(WIDE, at(0, 7_000, 0));
        // CPX partitions other than 0 read 0 W beside an unmoving value: nothing drawn.
        assert_eq!(c.read(WIDE, at(10, 7_000, 0)), (7_000, None));
        let mut no_power = Counter::default();
        no_power.read(
            WIDE,
            Reading {
                power_mw: None,
                ..at(0, 7_000, 0)
            },
        );
        assert_eq!(
            no_power.read(
                WIDE,
                Reading {
                    power_mw: None,
                    ..at(10, 7_000, 0)
                }
            ),
            (7_000, None)
        );
    }

    #[test]
    fn the_state_survives_a_restart() {
        let range = NARROW.wrap_mj().unwrap();
        let mut c = Counter::default();
        c.read(NARROW, at(0, range - 100_000, 500));
        c.read(NARROW, at(1, 400_000, 500));
        let saved = serde_json::to_value(&c).unwrap();
        let mut again: Counter = serde_json::from_value(saved).unwrap();
        assert_eq!(again.read(NARROW, at(2, 900_000, 500)).0, range + 900_000);
    }

    proptest! {
        /// A 32-bit accumulator read at jittered intervals under changing power, wrapping
        /// as often as it does (its readings are the true energy modulo the range, the power
        /// readings the true rate): the counter sent rises by exactly the energy drawn.
        #[test]
        fn wraps_lose_and_add_nothing(
            steps in prop::collection::vec((1i64..10_000, 0i64..1_000_000), 1..300),
        ) {
            let range = NARROW.wrap_mj().unwrap();
            let mut c = Counter::default();
            let (mut t, mut p, mut total) = (0i64, 500_000i64, 0i64);
            let (first, _) = c.read(NARROW, Reading { ts_ms: 0, energy_mj: 0, power_mw: Some(p) });
            let mut last = first;
            for (dt, next_p) in steps {
                t += dt;
                total += energy_from_power_mj(p, next_p, dt);
                p = next_p;
                let (sent, event) = c.read(
                    NARROW,
                    Reading { ts_ms: t, energy_mj: total % range, power_mw: Some(p) },
                );
                let surprise = matches!(event, Some(Event::Reset { .. } | Event::Stuck { .. }));
                prop_assert!(!surprise, "{:?}", event);
                prop_assert!(sent >= last);
                last = sent;
            }
            prop_assert_eq!(last - first, total);
        }
    }

    proptest! {
        /// Whatever the values do (stick, jump, go backwards), the counter sent goes
        /// backwards only where a reset was reported, and then to the value read.
        #[test]
        fn the_counter_goes_back_only_at_a_reset(
            steps in prop::collection::vec((1i64..20_000, 0i64..2_000_000, 0u8..6, 0i64..800), 1..300),
        ) {
            let mut c = Counter::default();
            let (mut t, mut value) = (0i64, 0i64);
            let mut last = c.read(NARROW, at(0, 0, 0)).0;
            for (dt, de, what, w) in steps {
                t += dt;
                value = match what {
                    0 => value,               // stuck
                    1 => de,                  // anywhere: a reset or a wrap
                    _ => value + de,
                };
                let r = Reading { ts_ms: t, energy_mj: value, power_mw: Some(w * 1000) };
                let (sent, event) = c.read(NARROW, r);
                if matches!(event, Some(Event::Reset { .. })) {
                    prop_assert_eq!(sent, value);
                } else {
                    prop_assert!(sent >= last, "{} then {}", last, sent);
                }
                last = sent;
            }
        }
    }
}
