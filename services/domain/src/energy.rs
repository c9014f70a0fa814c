//! From raw meter samples to energy per step (DESIGN.md "From samples to energy").
//!
//! Steps are aligned to the Unix epoch, so every hour sees the same step grid and a delta
//! that crosses an hour boundary is split the same way whichever hour is being computed:
//! the hours of a meter add up to its counter exactly.

use crate::quality::Quality;
use crate::split::split;
use crate::units::energy_from_power_mj;

/// One reading of a meter. At least one of `counter_mj` and `power_mw` is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Milliseconds since the Unix epoch.
    pub ts_ms: i64,
    /// Monotonic energy counter in mJ (NVML, DCGM, PDU kWh registers), if the meter has one.
    pub counter_mj: Option<i64>,
    /// Instantaneous power in mW, if the meter reports it.
    pub power_mw: Option<i64>,
    /// The agent estimated part of the counter's rise up to this sample from power readings
    /// (the counter stuck or was reset): the interval ending here is flagged
    /// `COUNTER_ESTIMATED`.
    pub counter_estimated: bool,
}

/// A window of equal steps, aligned so that `start_ms` is a multiple of `step_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepGrid {
    pub start_ms: i64,
    pub step_ms: i64,
    pub steps: usize,
}

impl StepGrid {
    pub fn end_ms(&self) -> i64 {
        self.start_ms + self.step_ms * self.steps as i64
    }

    pub fn step_start(&self, i: usize) -> i64 {
        self.start_ms + self.step_ms * i as i64
    }
}

/// Energy of one meter in each step of a grid, with its data-quality flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeterSteps {
    pub mj: Vec<i64>,
    pub quality: Vec<Quality>,
}

impl MeterSteps {
    /// A meter with no data at all in the window.
    pub fn missing(steps: usize) -> Self {
        Self {
            mj: vec![0; steps],
            quality: vec![Quality::MISSING; steps],
        }
    }

    pub fn total_mj(&self) -> i64 {
        self.mj.iter().sum()
    }
}

/// Turns samples into energy per step of `grid`.
///
/// `samples` must be sorted by time, distinct in time, and should include the last two
/// samples before the window and the first two after it, so the deltas that cross the
/// window's edges are counted, and estimated, exactly as the neighbouring window sees them.
/// Between two samples:
/// - both have counters: the delta; if the counter went backwards, the meter was reset and
///   counts from zero: the new value is a lower bound of the interval's energy (what it
///   counted before the reset is lost), so the interval takes the larger of that and an
///   estimate, from the two samples' power readings or else from the neighbouring intervals'
///   rates (flagged `RESET`, and `RESET_ESTIMATED` when the estimate is used);
/// - otherwise both have power: the trapezoid of the two readings;
/// - the energy is spread over the steps it spans by time. An interval longer than
///   `gap_limit_ms` is a gap: a counter's delta is still placed (it was measured, only its
///   timing is unknown) but flagged `GAP` and counted as estimated; a power-only interval is
///   not interpolated and its steps are `MISSING`.
///
/// A step that no interval covers completely is flagged `MISSING`.
pub fn meter_steps(samples: &[Sample], grid: StepGrid, gap_limit_ms: i64) -> MeterSteps {
    let mut out = MeterSteps {
        mj: vec![0; grid.steps],
        quality: vec![Quality::EMPTY; grid.steps],
    };
    let mut covered_ms = vec![0i64; grid.steps];
    for (i, pair) in samples.windows(2).enumerate() {
        let (a, b) = (pair[0], pair[1]);
        if b.ts_ms <= a.ts_ms || b.ts_ms <= grid.start_ms || a.ts_ms >= grid.end_ms() {
            continue;
        }
        let Some((mut energy, mut quality)) = interval_energy(a, b, gap_limit_ms) else {
            continue;
        };
        if quality.contains(Quality::RESET) && !quality.contains(Quality::GAP) {
            if let Some(estimate) = reset_estimate(samples, i, gap_limit_ms) {
                if estimate > energy {
                    energy = estimate;
                    quality |= Quality::RESET_ESTIMATED;
                }
            }
        }
        spread(
            energy,
            quality,
            a.ts_ms,
            b.ts_ms,
            grid,
            &mut out,
            &mut covered_ms,
        );
    }
    for (i, covered) in covered_ms.iter().enumerate() {
        if *covered < grid.step_ms {
            out.quality[i] |= Quality::MISSING;
        }
    }
    out
}

/// Energy between two consecutive samples, or `None` where it cannot be known.
fn interval_energy(a: Sample, b: Sample, gap_limit_ms: i64) -> Option<(i64, Quality)> {
    let dt = b.ts_ms - a.ts_ms;
    let gap = dt > gap_limit_ms;
    if let (Some(ca), Some(cb)) = (a.counter_mj, b.counter_mj) {
        let (delta, mut quality) = if cb >= ca {
            (cb - ca, Quality::EMPTY)
        } else {
            (cb, Quality::RESET)
        };
        if b.counter_estimated {
            quality |= Quality::COUNTER_ESTIMATED;
        }
        if gap {
            quality |= Quality::GAP;
        }
        return Some((delta, quality));
    }
    if let (Some(pa), Some(pb)) = (a.power_mw, b.power_mw) {
        if gap {
            return None;
        }
        return Some((energy_from_power_mj(pa, pb, dt), Quality::EMPTY));
    }
    None
}

/// The energy of the interval from `samples[i]` to `samples[i + 1]`, across which the
/// counter was reset: from the two samples' power readings (trapezoid) when both have one,
/// else at the rate of the neighbouring intervals that counted cleanly (no reset, no gap),
/// weighted by their length. `None` when there is nothing to estimate from.
fn reset_estimate(samples: &[Sample], i: usize, gap_limit_ms: i64) -> Option<i64> {
    let (a, b) = (samples[i], samples[i + 1]);
    let dt = b.ts_ms - a.ts_ms;
    if let (Some(pa), Some(pb)) = (a.power_mw, b.power_mw) {
        return Some(energy_from_power_mj(pa, pb, dt));
    }
    let clean = |j: usize| -> Option<(i128, i128)> {
        let (x, y) = (samples.get(j)?, samples.get(j + 1)?);
        let (cx, cy) = (x.counter_mj?, y.counter_mj?);
        let span = y.ts_ms - x.ts_ms;
        (cy >= cx && span > 0 && span <= gap_limit_ms)
            .then_some((i128::from(cy - cx), i128::from(span)))
    };
    let neighbours = [i.checked_sub(1).and_then(clean), clean(i + 1)];
    let (energy, span) = neighbours
        .iter()
        .flatten()
        .fold((0i128, 0i128), |(e, t), (de, dt)| (e + de, t + dt));
    if span == 0 {
        return None;
    }
    // Rounded half up: the same input always gives the same estimate.
    i64::try_from((energy * i128::from(dt) * 2 + span) / (span * 2)).ok()
}

/// Spreads `energy` over the global steps that `[t0, t1)` overlaps, by overlap time, and adds
/// the parts that fall inside `grid`.
fn spread(
    energy: i64,
    quality: Quality,
    t0: i64,
    t1: i64,
    grid: StepGrid,
    out: &mut MeterSteps,
    covered_ms: &mut [i64],
) {
    let step = grid.step_ms;
    let k0 = t0.div_euclid(step);
    let k1 = (t1 - 1).div_euclid(step);
    let grid_k0 = grid.start_ms.div_euclid(step);
    let grid_k1 = grid_k0 + grid.steps as i64 - 1;
    let overlap = |k: i64| (t1.min((k + 1) * step) - t0.max(k * step)) as u128;
    let place = |k: i64, part: i64, out: &mut MeterSteps, covered_ms: &mut [i64]| {
        if (grid_k0..=grid_k1).contains(&k) {
            let i = (k - grid_k0) as usize;
            out.mj[i] += part;
            out.quality[i] |= quality;
            covered_ms[i] += overlap(k) as i64;
        }
    };
    if k0 == k1 {
        place(k0, energy, out, covered_ms);
        return;
    }
    let weights: Vec<u128> = (k0..=k1).map(overlap).collect();
    let parts = split(energy, &weights);
    for (k, part) in (k0..=k1).zip(parts) {
        place(k, part, out, covered_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;

    fn counter(ts_ms: i64, mj: i64) -> Sample {
        Sample {
            ts_ms,
            counter_mj: Some(mj),
            power_mw: None,
            counter_estimated: false,
        }
    }

    fn power(ts_ms: i64, mw: i64) -> Sample {
        Sample {
            ts_ms,
            counter_mj: None,
            power_mw: Some(mw),
            counter_estimated: false,
        }
    }

    fn grid(steps: usize) -> StepGrid {
        StepGrid {
            start_ms: 0,
            step_ms: MIN,
            steps,
        }
    }

    #[test]
    fn counter_deltas_per_step() {
        let s = [counter(0, 100), counter(MIN, 400), counter(2 * MIN, 1000)];
        let m = meter_steps(&s, grid(2), 5 * MIN);
        assert_eq!(m.mj, vec![300, 600]);
        assert_eq!(m.quality, vec![Quality::EMPTY, Quality::EMPTY]);
    }

    #[test]
    fn a_delta_over_several_steps_is_spread_by_time() {
        // 5-minute samples, 1-minute steps: 1000 mJ → 200 per step.
        let s = [counter(0, 0), counter(5 * MIN, 1000)];
        assert_eq!(meter_steps(&s, grid(5), 10 * MIN).mj, vec![200; 5]);
        // Unaligned: 30 s into step 0 to 30 s into step 2: weights 30, 60, 30.
        let s = [counter(MIN / 2, 0), counter(2 * MIN + MIN / 2, 1001)];
        let m = meter_steps(&s, grid(3), 10 * MIN);
        assert_eq!(m.mj, vec![250, 501, 250]);
        assert!(m.quality[0].contains(Quality::MISSING));
        assert!(!m.quality[1].contains(Quality::MISSING));
    }

    #[test]
    fn counter_going_backwards_is_a_reset_counting_from_zero() {
        // What it counted since the reset (300) is less than the minute before drew (2000):
        // the estimate stands, flagged.
        let s = [counter(0, 5000), counter(MIN, 7000), counter(2 * MIN, 300)];
        let m = meter_steps(&s, grid(2), 5 * MIN);
        assert_eq!(m.mj, vec![2000, 2000]);
        assert!(m.quality[1].contains(Quality::RESET | Quality::RESET_ESTIMATED));
        assert!(!m.quality[0].contains(Quality::RESET));
    }

    #[test]
    fn a_reset_inside_a_step_is_estimated_from_its_neighbours() {
        // 42 MJ a minute; the driver reloads just before minute 3, which reads 0: the minute
        // counted nothing, and its neighbours say it drew 42 MJ (the known answer of the
        // ledger's reset test: without this the job lost 52,500 J with its overhead).
        let s = [
            counter(0, 1_000),
            counter(MIN, 42_001_000),
            counter(2 * MIN, 84_001_000),
            counter(3 * MIN, 0),
            counter(4 * MIN, 42_000_000),
            counter(5 * MIN, 84_000_000),
        ];
        let m = meter_steps(&s, grid(5), 5 * MIN);
        assert_eq!(m.mj, vec![42_000_000; 5]);
        assert!(m.quality[2].contains(Quality::RESET | Quality::RESET_ESTIMATED));
        assert!(m.quality[2].is_estimated());
        assert!(!m.quality[3].is_estimated());
    }

    #[test]
    fn a_reset_is_estimated_from_power_readings_when_it_has_them() {
        let both = |ts, c, w| Sample {
            ts_ms: ts,
            counter_mj: Some(c),
            power_mw: Some(w),
            counter_estimated: false,
        };
        // 500 W → 700 W over a minute: 36 kJ, though the counter after the reset says 10 kJ.
        let s = [both(0, 90_000_000, 500_000), both(MIN, 10_000_000, 700_000)];
        let m = meter_steps(&s, grid(1), 5 * MIN);
        assert_eq!(m.mj, vec![36_000_000]);
        assert!(m.quality[0].contains(Quality::RESET_ESTIMATED));
        // A reset that counted more than the estimate keeps what it counted.
        let s = [
            counter(0, 5_000),
            counter(MIN, 6_000),
            counter(2 * MIN, 1_500),
        ];
        let m = meter_steps(&s, grid(2), 5 * MIN);
        assert_eq!(m.mj, vec![1_000, 1_500]);
        assert!(!m.quality[1].contains(Quality::RESET_ESTIMATED));
        // Nothing to estimate from: the lower bound, flagged as a reset only.
        let s = [counter(0, 5_000), counter(MIN, 300)];
        let m = meter_steps(&s, grid(1), 5 * MIN);
        assert_eq!((m.mj[0], m.quality[0].is_estimated()), (300, false));
    }

    #[test]
    fn a_counter_the_agent_estimated_flags_the_steps_it_reaches() {
        let estimated = |ts_ms, mj| Sample {
            counter_estimated: true,
            ..counter(ts_ms, mj)
        };
        // The counter stuck in the second minute; the agent counted the power readings.
        let s = [
            counter(0, 0),
            counter(MIN, 1_000),
            estimated(2 * MIN, 2_000),
            counter(3 * MIN, 3_000),
        ];
        let m = meter_steps(&s, grid(3), 5 * MIN);
        assert_eq!(m.mj, vec![1_000; 3]);
        assert_eq!(
            m.quality,
            vec![Quality::EMPTY, Quality::COUNTER_ESTIMATED, Quality::EMPTY]
        );
        assert!(m.quality[1].is_estimated());
    }

    #[test]
    fn counter_gap_is_placed_but_flagged() {
        let s = [counter(0, 0), counter(20 * MIN, 2000)];
        let m = meter_steps(&s, grid(20), 5 * MIN);
        assert_eq!(m.total_mj(), 2000);
        assert!(m.quality.iter().all(|q| q.contains(Quality::GAP)));
        assert!(m.quality.iter().all(|q| q.is_estimated()));
    }

    #[test]
    fn power_gap_is_missing_not_zero_filled_silently() {
        let s = [
            power(0, 100_000),
            power(MIN, 100_000),
            power(30 * MIN, 100_000),
        ];
        let m = meter_steps(&s, grid(3), 5 * MIN);
        // 100 W for 60 s = 6000 J = 6_000_000 mJ.
        assert_eq!(m.mj, vec![6_000_000, 0, 0]);
        assert_eq!(m.quality[0], Quality::EMPTY);
        assert!(m.quality[1].contains(Quality::MISSING));
    }

    #[test]
    fn trapezoid_between_power_readings() {
        // 100 W → 200 W over 60 s = 150 W average = 9000 J.
        let s = [power(0, 100_000), power(MIN, 200_000)];
        assert_eq!(meter_steps(&s, grid(1), 5 * MIN).mj, vec![9_000_000]);
    }

    #[test]
    fn hours_of_one_interval_add_up() {
        let s = [counter(-7 * MIN + 13, 0), counter(3 * MIN + 7, 999_999)];
        let before = meter_steps(
            &s,
            StepGrid {
                start_ms: -10 * MIN,
                step_ms: MIN,
                steps: 10,
            },
            60 * MIN,
        );
        let after = meter_steps(&s, grid(10), 60 * MIN);
        assert_eq!(before.total_mj() + after.total_mj(), 999_999);
    }

    proptest::proptest! {
        /// Random counters with resets and gaps: the energy placed in consecutive windows adds
        /// up exactly to the energy of one window over the whole span, however the windows
        /// fall (a reset's estimate is the same whichever window asks), and, where no reset
        /// had to be estimated, to the counter's deltas (a reset counting its new value).
        #[test]
        fn windows_add_up_to_the_counter(
            steps in proptest::collection::vec((1i64..(20 * MIN), 0i64..5_000_000, proptest::bool::weighted(0.05)), 2..60),
            window_steps in 1usize..90,
        ) {
            let mut samples = Vec::new();
            let (mut t, mut c) = (7_i64, 1_000_000_i64);
            let mut expected = 0;
            samples.push(counter(t, c));
            for (dt, delta, reset) in steps {
                t += dt;
                // A reset is only visible when the new value is below the old one; a counter
                // that restarted and already passed its old value reads as normal counting.
                if reset && delta < c {
                    c = delta;
                } else {
                    c += delta;
                }
                expected += delta;
                samples.push(counter(t, c));
            }
            let step = MIN;
            let start = samples[0].ts_ms.div_euclid(step) * step;
            let mut total = 0;
            let mut estimated = false;
            let mut w = start;
            while w < t {
                let grid = StepGrid { start_ms: w, step_ms: step, steps: window_steps };
                let m = meter_steps(&samples, grid, 5 * MIN);
                total += m.total_mj();
                estimated |= m.quality.iter().any(|q| q.contains(Quality::RESET_ESTIMATED));
                w = grid.end_ms();
            }
            let whole_steps = ((w - start) / step) as usize;
            let whole = meter_steps(&samples, StepGrid { start_ms: start, step_ms: step, steps: whole_steps }, 5 * MIN);
            proptest::prop_assert_eq!(total, whole.total_mj());
            if !estimated {
                proptest::prop_assert_eq!(total, expected);
            } else {
                proptest::prop_assert!(total > expected);
            }
        }
    }

    #[test]
    fn no_samples_is_missing() {
        let m = meter_steps(&[], grid(3), MIN);
        assert_eq!(m, MeterSteps::missing(3));
    }
}
