//! Fast readings reduced to one record per meter per step, at the edge (DESIGN.md "From
//! samples to energy").
//!
//! An energy counter makes the reduction lossless: the counter's value at each step boundary
//! gives the step's energy exactly, whatever the reading rate. For every UTC-aligned boundary
//! `B` (a multiple of the step), the reducer sends one record at `B`: the counter there,
//! interpolated linearly between the two readings around it, with the mean and the peak of
//! the power readings of the step that ends at `B` (the peak is what a minute's mean hides:
//! a training job's synchronous swings).
//!
//! Counter resets (a driver reload, a GPU reset) are resolved here, where the fast readings
//! are: the reducer sends a counter that never goes backwards, adding across a reset the
//! larger of what the new counter counted and the power readings' trapezoid over the
//! interval, so nothing counted before the reset is lost and the server sees a clean series.
//!
//! A boundary between two readings further apart than the gap limit is not interpolated:
//! no record is sent for it, so the server sees the real gap between the nearest records and
//! treats it as it treats any gap (the delta is placed by time and flagged once it exceeds the
//! site's limit).
//!
//! A power-only meter (a PDU outlet, a BMC, a pre-Volta GPU) has no counter, so the reducer
//! keeps one for it: the running trapezoid of its readings (the server's own rule for power
//! readings, rounded per interval the same way), nothing added across a gap. Its records are
//! then counter records like any other: a step's energy is the trapezoid over the step's
//! readings (split at the boundary by time), and the peak rides along. Across a gap the
//! server sees a delta placed over the gap and flagged, where raw readings would have left
//! the gap's steps missing; the energy is the same. A reading with neither counter nor power,
//! or one that switches a meter between kinds, passes through unreduced.

use crate::records::Sample;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use wattledger_domain::units::{energy_from_power_mj, milliwatts};

/// The reducer of one source: its step, its gap limit and each meter's running state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reducer {
    step_ms: i64,
    gap_limit_ms: i64,
    meters: BTreeMap<String, MeterState>,
}

/// What a meter's next record needs from the readings so far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct MeterState {
    /// The last reading with a counter.
    last: Reading,
    /// The step `last` falls in (its start, ms) and the power readings in it so far.
    step_start_ms: i64,
    power: PowerStats,
    /// A power-only meter: `last.raw_mj` is the reducer's running trapezoid of its readings.
    #[serde(default)]
    integrated: bool,
    /// The counter's rise since the last boundary counts an estimate from power (the source
    /// flagged a reading, or a reset was made up from the trapezoid): the next record says so.
    #[serde(default)]
    estimated: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Reading {
    ts_ms: i64,
    /// The counter as the meter reported it.
    raw_mj: i64,
    /// The counter as sent: `raw_mj` plus what resets took away.
    sent_mj: i64,
    power_mw: Option<i64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
struct PowerStats {
    readings: i64,
    sum_mw: i64,
    peak_mw: i64,
}

impl PowerStats {
    fn add(&mut self, mw: Option<i64>) {
        if let Some(mw) = mw {
            self.readings += 1;
            self.sum_mw = self.sum_mw.saturating_add(mw);
            self.peak_mw = self.peak_mw.max(mw);
        }
    }

    /// (mean, peak) in W, when the step had power readings.
    fn watts(&self) -> (Option<f64>, Option<f64>) {
        if self.readings == 0 {
            return (None, None);
        }
        let mean_mw = (self.sum_mw + self.readings / 2) / self.readings;
        (
            Some(mean_mw as f64 / 1000.0),
            Some(self.peak_mw as f64 / 1000.0),
        )
    }
}

impl Reducer {
    /// Steps of `step_ms` (a divisor of an hour, so every hour has whole steps); boundaries
    /// between readings more than `gap_limit_ms` apart are not interpolated.
    pub fn new(step_ms: i64, gap_limit_ms: i64) -> Self {
        assert!(
            step_ms > 0 && 3_600_000 % step_ms == 0,
            "step divides an hour"
        );
        Reducer {
            step_ms,
            gap_limit_ms: gap_limit_ms.max(step_ms),
            meters: BTreeMap::new(),
        }
    }

    /// Takes the meters' state from a saved reducer; the step and gap limit stay the
    /// configuration's. A changed step starts afresh: its boundaries are elsewhere.
    pub fn restore(&mut self, saved: Reducer) {
        if saved.step_ms == self.step_ms {
            self.meters = saved.meters;
        }
    }

    /// Feeds readings (any meters, each meter's in time order) and returns the records to
    /// send: step records for every boundary the readings passed (counters' and power-only
    /// meters' alike), and readings that cannot be reduced as they came. A reading not newer
    /// than its meter's last is dropped (a repeated scrape).
    pub fn push(&mut self, readings: impl IntoIterator<Item = Sample>) -> Vec<Sample> {
        let mut out = Vec::new();
        let step_s = u32::try_from(self.step_ms / 1000).ok();
        for s in readings {
            let ts_ms = s.ts.timestamp_millis();
            let power_mw = s.power_w.and_then(milliwatts);
            let integrated = s.counter_mj.is_none();
            let known = self.meters.get(&s.meter);
            if known.is_some_and(|m| m.integrated != integrated) {
                out.push(s);
                continue;
            }
            let raw_mj = match (s.counter_mj, power_mw, known) {
                (Some(counter), _, _) => counter,
                (None, None, _) => {
                    out.push(s);
                    continue;
                }
                (None, Some(_), None) => 0,
                (None, Some(mw), Some(m)) => {
                    let dt = ts_ms - m.last.ts_ms;
                    let added = match m.last.power_mw {
                        Some(prev) if dt > 0 && dt <= self.gap_limit_ms => {
                            energy_from_power_mj(prev, mw, dt)
                        }
                        _ => 0,
                    };
                    m.last.raw_mj.saturating_add(added)
                }
            };
            let step_start_ms = ts_ms.div_euclid(self.step_ms) * self.step_ms;
            let Some(m) = self.meters.get_mut(&s.meter) else {
                // The first reading of a meter: a record only if it sits on a boundary.
                let first = Reading {
                    ts_ms,
                    raw_mj,
                    sent_mj: raw_mj,
                    power_mw,
                };
                if ts_ms == step_start_ms {
                    out.push(record(
                        &s.meter,
                        ts_ms,
                        raw_mj,
                        PowerStats::default(),
                        step_s,
                        s.counter_estimated,
                    ));
                }
                let mut power = PowerStats::default();
                power.add(power_mw);
                self.meters.insert(
                    s.meter,
                    MeterState {
                        last: first,
                        step_start_ms,
                        power,
                        integrated,
                        estimated: false,
                    },
                );
                continue;
            };
            let l = m.last;
            if ts_ms <= l.ts_ms {
                continue;
            }
            let dt = ts_ms - l.ts_ms;
            let within = dt <= self.gap_limit_ms;
            let mut estimated = s.counter_estimated;
            let counted = if raw_mj >= l.raw_mj {
                raw_mj - l.raw_mj
            } else {
                // Reset: the new value counts from zero; across a short interval the power
                // readings say what it missed.
                let trapezoid = match (l.power_mw, power_mw) {
                    (Some(a), Some(b)) if within => energy_from_power_mj(a, b, dt),
                    _ => 0,
                };
                estimated |= trapezoid > raw_mj;
                raw_mj.max(trapezoid)
            };
            let r = Reading {
                ts_ms,
                raw_mj,
                sent_mj: l.sent_mj.saturating_add(counted),
                power_mw,
            };
            // Every boundary in (l, r]: the step ending there is the one `l` fell in, or a
            // step with no readings at all. An estimated interval (l, r] reaches every step it
            // spans: the first with what came before it in its step, the rest on its own.
            let mut b = m.step_start_ms + self.step_ms;
            let mut pending = m.estimated || estimated;
            while b <= ts_ms {
                if within {
                    let at = interpolate(l.ts_ms, l.sent_mj, ts_ms, r.sent_mj, b);
                    let power = if b - self.step_ms == m.step_start_ms {
                        m.power
                    } else {
                        PowerStats::default()
                    };
                    out.push(record(&s.meter, b, at, power, step_s, pending));
                }
                // Past a boundary at r itself, nothing of the interval is left for the next.
                pending = estimated && b < ts_ms;
                b += self.step_ms;
            }
            m.estimated = pending;
            if step_start_ms != m.step_start_ms {
                m.step_start_ms = step_start_ms;
                m.power = PowerStats::default();
            }
            m.power.add(power_mw);
            m.last = r;
        }
        out
    }
}

fn record(
    meter: &str,
    ts_ms: i64,
    counter_mj: i64,
    power: PowerStats,
    step_s: Option<u32>,
    counter_estimated: bool,
) -> Sample {
    let (mean, peak) = power.watts();
    Sample {
        meter: meter.to_owned(),
        ts: chrono::DateTime::from_timestamp_millis(ts_ms).unwrap_or_default(),
        counter_mj: Some(counter_mj),
        power_w: mean,
        peak_w: peak,
        step_s,
        counter_estimated,
    }
}

/// The counter at `t` on the line from `(t0, c0)` to `(t1, c1)`, `t0 < t <= t1`, rounded
/// down: never above `c1`, and non-decreasing in `t`, so records never go backwards.
fn interpolate(t0: i64, c0: i64, t1: i64, c1: i64, t: i64) -> i64 {
    let part = i128::from(c1 - c0) * i128::from(t - t0) / i128::from(t1 - t0);
    c0 + part as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};
    use proptest::prelude::*;

    const T0: i64 = 1_800_000_000_000; // a minute boundary

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(T0 + ms).unwrap()
    }

    fn reading(ms: i64, counter: i64, power_w: f64) -> Sample {
        Sample {
            meter: "g0".into(),
            ts: at(ms),
            counter_mj: Some(counter),
            power_w: Some(power_w),
            peak_w: None,
            step_s: None,
            counter_estimated: false,
        }
    }

    /// 1 Hz readings of a GPU drawing 300 W, then 700 W for one second of each minute.
    #[test]
    fn one_record_per_minute_with_the_boundary_counter_and_the_peak() {
        let mut r = Reducer::new(60_000, 60_000);
        let mut counter = 5_000_000;
        let mut readings = Vec::new();
        for s in 0..=180 {
            let w = if s % 60 == 30 { 700.0 } else { 300.0 };
            readings.push(reading(s * 1000 + 400, counter, w));
            counter += 300_000;
        }
        let out = r.push(readings);
        let ts: Vec<_> = out.iter().map(|s| s.ts).collect();
        assert_eq!(ts, vec![at(60_000), at(120_000), at(180_000)]);
        // 60.4 s after 5,000,000 mJ at 300 W: 0.4 s before the reading at 60.4 s.
        assert_eq!(out[0].counter_mj, Some(5_000_000 + 59_600 * 300));
        assert_eq!(out[1].counter_mj, Some(5_000_000 + 119_600 * 300));
        // The first step's readings from 0.4 s to 59.4 s: 60 readings, one of them 700 W.
        assert_eq!(out[1].peak_w, Some(700.0));
        assert_eq!(
            out[1].power_w,
            Some(round_mw((59.0 * 300.0 + 700.0) / 60.0))
        );
        // The first step had readings from 0.4 s on, so it has a peak too.
        assert_eq!(out[0].peak_w, Some(700.0));
    }

    /// A reading with a counter and no power (the property tests' meters).
    fn counted(ms: i64, counter: i64) -> Sample {
        Sample {
            power_w: None,
            ..reading(ms, counter, 0.0)
        }
    }

    #[test]
    fn a_reading_the_source_estimated_flags_the_steps_its_interval_reaches() {
        let mut r = Reducer::new(60_000, 600_000);
        let estimated = |ms, counter| Sample {
            counter_estimated: true,
            ..reading(ms, counter, 100.0)
        };
        let out = r.push([
            reading(0, 0, 100.0),
            reading(50_000, 5_000_000, 100.0),
            // (50 s, 70 s] was estimated: it reaches the first and the second step.
            estimated(70_000, 7_000_000),
            reading(120_000, 12_000_000, 100.0),
            reading(150_000, 15_000_000, 100.0),
            // (150 s, 180 s] was estimated and ends on a boundary: the fourth step is clean.
            estimated(180_000, 18_000_000),
            reading(240_000, 24_000_000, 100.0),
        ]);
        let flags: Vec<(i64, bool)> = out
            .iter()
            .map(|s| {
                (
                    s.ts.timestamp_millis() - at(0).timestamp_millis(),
                    s.counter_estimated,
                )
            })
            .collect();
        assert_eq!(
            flags,
            [
                (0, false),
                (60_000, true),
                (120_000, true),
                (180_000, true),
                (240_000, false)
            ]
        );
    }

    fn round_mw(w: f64) -> f64 {
        (w * 1000.0).round() / 1000.0
    }

    #[test]
    fn a_reset_keeps_what_was_counted_and_the_records_never_go_back() {
        let mut r = Reducer::new(60_000, 60_000);
        let out = r.push([
            reading(0, 1_000_000, 100.0),
            reading(30_000, 4_000_000, 100.0),
            // Reset 10 s on: the new counter says 1,000 mJ, the power readings 1,000,000.
            reading(40_000, 1_000, 100.0),
            reading(60_000, 2_001_000, 100.0),
        ]);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].ts, at(0));
        assert_eq!(out[0].counter_mj, Some(1_000_000));
        assert_eq!(out[1].ts, at(60_000));
        // 3,000,000 before the reset + 1,000,000 across it + 2,000,000 after.
        assert_eq!(out[1].counter_mj, Some(7_000_000));
        // The 1,000,000 across the reset came from the power readings: the step says so.
        assert_eq!(
            (out[0].counter_estimated, out[1].counter_estimated),
            (false, true)
        );
    }

    #[test]
    fn a_long_gap_sends_no_interpolated_boundary_and_loses_no_energy() {
        let mut r = Reducer::new(60_000, 60_000);
        let out = r.push([
            reading(59_000, 0, 100.0),
            reading(61_000, 200_000, 100.0),
            // The exporter was down for five minutes.
            reading(400_000, 9_000_000, 100.0),
            reading(421_000, 11_100_000, 100.0),
        ]);
        let ts: Vec<_> = out.iter().map(|s| s.ts).collect();
        assert_eq!(ts, vec![at(60_000), at(420_000)]);
        assert_eq!(out[0].counter_mj, Some(100_000));
        assert_eq!(out[1].counter_mj, Some(11_000_000));
    }

    fn powered(meter: &str, ms: i64, w: f64) -> Sample {
        Sample {
            meter: meter.into(),
            ts: at(ms),
            counter_mj: None,
            power_w: Some(w),
            peak_w: None,
            step_s: None,
            counter_estimated: false,
        }
    }

    #[test]
    fn unreducible_readings_pass_through_and_repeats_are_dropped() {
        let mut r = Reducer::new(60_000, 60_000);
        let blank = Sample {
            power_w: None,
            ..powered("pdu", 5_000, 0.0)
        };
        // g0 counts; a reading of it without its counter is not folded into its series.
        let uncounted = powered("g0", 30_000, 300.0);
        let out = r.push([
            reading(0, 10, 1.0),
            reading(0, 10, 1.0),
            blank.clone(),
            uncounted.clone(),
        ]);
        assert_eq!(
            out,
            vec![
                record("g0", T0, 10, PowerStats::default(), Some(60), false),
                blank,
                uncounted
            ]
        );
    }

    /// A PDU outlet read once a second: 900 W, 1,500 W for the reading at 30 s.
    #[test]
    fn a_power_only_meter_sends_its_trapezoid_as_a_counter_with_the_peak() {
        let mut r = Reducer::new(60_000, 60_000);
        let readings =
            (0..=120).map(|s| powered("pdu", s * 1000, if s == 30 { 1500.0 } else { 900.0 }));
        let out = r.push(readings);
        let got: Vec<_> = out
            .iter()
            .map(|s| (s.ts, s.counter_mj, s.power_w, s.peak_w))
            .collect();
        assert_eq!(
            got,
            vec![
                (at(0), Some(0), None, None),
                // 60 s at 900 W is 54,000 J; the spike adds 300 J on each side of 30 s. The
                // step's 60 readings (0–59 s) average 910 W.
                (at(60_000), Some(54_600_000), Some(910.0), Some(1500.0)),
                (at(120_000), Some(108_600_000), Some(900.0), Some(900.0)),
            ]
        );
        assert!(out.iter().all(|s| s.meter == "pdu" && s.step_s == Some(60)));
    }

    #[test]
    fn state_survives_a_restart_and_a_changed_step_starts_afresh() {
        let mut r = Reducer::new(60_000, 60_000);
        r.push([reading(50_000, 0, 1.0)]);
        let saved: Reducer = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
        let mut again = Reducer::new(60_000, 60_000);
        again.restore(saved.clone());
        assert_eq!(again.push([reading(70_000, 20_000, 1.0)]).len(), 1);
        let mut other = Reducer::new(30_000, 60_000);
        other.restore(saved);
        assert!(other.push([reading(70_000, 20_000, 1.0)]).is_empty());
    }

    proptest! {
        /// Readings that start and end on a boundary, with resets and jitter between: the
        /// last record's counter less the first's is the energy the meter counted between
        /// them, exactly (resets added back), whichever boundaries in between were skipped.
        #[test]
        fn the_records_rise_by_exactly_what_was_counted(
            steps in prop::collection::vec((1i64..50_000, 0i64..5_000_000, 0u8..10), 1..150),
        ) {
            let mut r = Reducer::new(60_000, 60_000);
            let (mut t, mut raw, mut total) = (0i64, 0i64, 0i64);
            let mut readings = vec![reading(0, 0, 1.0)];
            for (dt, de, reset) in steps {
                t += dt;
                total += de;
                raw = if reset == 0 && de < raw { de } else { raw + de };
                readings.push(counted(t, raw));
            }
            // One more reading on the next boundary, within the gap limit.
            let end = (t / 60_000 + 1) * 60_000;
            total += 7;
            raw += 7;
            readings.push(counted(end, raw));
            let out = r.push(readings);
            prop_assert_eq!(out.first().map(|s| s.ts), Some(at(0)));
            prop_assert_eq!(out.last().map(|s| s.ts), Some(at(end)));
            prop_assert_eq!(out.last().unwrap().counter_mj, Some(total));
        }
    }

    proptest! {
        /// Whatever the reading times, resets and gaps, the records' counter never goes
        /// back, lands on boundaries only, and the energy between the first and the last
        /// record is what the meter counted between them (resets added back).
        #[test]
        fn records_are_monotone_on_boundaries_and_lose_nothing(
            steps in prop::collection::vec((1i64..200_000, 0i64..5_000_000, 0u8..20), 2..200),
        ) {
            let mut r = Reducer::new(60_000, 120_000);
            let (mut t, mut raw, mut true_total) = (0i64, 0i64, 0i64);
            let mut readings = Vec::new();
            let mut totals = Vec::new();
            for (dt, de, reset) in steps {
                t += dt;
                true_total += de;
                // A reset is only visible when the new value is below the old one.
                raw = if reset == 0 && de < raw { de } else { raw + de };
                readings.push(counted(t, raw));
                totals.push((T0 + t, true_total));
            }
            let out = r.push(readings);
            for w in out.windows(2) {
                prop_assert!(w[0].ts < w[1].ts);
                prop_assert!(w[0].counter_mj <= w[1].counter_mj);
            }
            for rec in &out {
                prop_assert_eq!(rec.ts.timestamp_millis() % 60_000, 0);
            }
            // Between two records the delta equals the true energy between them, within
            // interpolation: bounded by the true totals of the readings around each.
            if let (Some(a), Some(b)) = (out.first(), out.last()) {
                let sent = b.counter_mj.unwrap() - a.counter_mj.unwrap();
                let around = |ts: i64| {
                    let after = totals.iter().find(|(t, _)| *t >= ts).unwrap().1;
                    let before = totals.iter().rev().find(|(t, _)| *t <= ts).map_or(0, |x| x.1);
                    (before, after)
                };
                let (a_lo, a_hi) = around(a.ts.timestamp_millis());
                let (b_lo, b_hi) = around(b.ts.timestamp_millis());
                prop_assert!(sent >= b_lo - a_hi && sent <= b_hi - a_lo,
                    "sent {} outside [{}, {}]", sent, b_lo - a_hi, b_hi - a_lo);
            }
        }
    }

    proptest! {
        /// A power-only series with jitter and gaps, from a boundary to a boundary: the last
        /// record less the first is the trapezoid integral over every pair of readings within
        /// the gap limit, exactly (the server's rule for raw power readings), and the records
        /// never go back.
        #[test]
        fn a_power_only_series_steps_sum_to_its_trapezoid_integral(
            steps in prop::collection::vec((1i64..90_000, 0u32..2_000), 1..150),
        ) {
            let mut r = Reducer::new(60_000, 60_000);
            let mut readings = vec![powered("pdu", 0, 500.0)];
            let (mut t, mut last_mw, mut integral) = (0i64, 500_000i64, 0i64);
            for (dt, w) in steps {
                t += dt;
                if dt <= 60_000 {
                    integral += energy_from_power_mj(last_mw, i64::from(w) * 1000, dt);
                }
                last_mw = i64::from(w) * 1000;
                readings.push(powered("pdu", t, f64::from(w)));
            }
            let end = (t / 60_000 + 1) * 60_000;
            if end - t <= 60_000 {
                integral += energy_from_power_mj(last_mw, 250_000, end - t);
            }
            readings.push(powered("pdu", end, 250.0));
            let out = r.push(readings);
            prop_assert_eq!(out.first().map(|s| (s.ts, s.counter_mj)), Some((at(0), Some(0))));
            prop_assert_eq!(out.last().map(|s| (s.ts, s.counter_mj)), Some((at(end), Some(integral))));
            for w in out.windows(2) {
                prop_assert!(w[0].ts < w[1].ts && w[0].counter_mj <= w[1].counter_mj);
            }
        }
    }
}
