//! Each meter sample's power for the site's peaks: its step peak, its reading, or the mean of
//! the interval its counter closes (`domain::headroom` sums them per minute into the site's
//! coincident IT peak, what the operator page shows beside the envelope: a minute's mean
//! hides a training job's synchronous swings). A meter that reports only an energy counter
//! (a PDU's or BMC's energy register) gives the mean power of each interval its counter
//! closes: less than the peak, and all it can tell.

/// A sample for [`power_readings`]: `(meter, ts_us, counter_mj, power_mw, peak_mw)`.
pub type PeakSample = (i64, i64, Option<i64>, Option<i64>, Option<i64>);

/// Each sample's power for the peak, `(meter, ts_us, mw)`: its step peak, else its power
/// reading, else the mean power over the interval its counter closes, if that interval is no
/// longer than `gap_limit_us` and the counter did not go back (a reset or a replaced meter
/// says nothing about the interval). `samples` are in (meter, ts) order.
pub fn power_readings(
    samples: impl IntoIterator<Item = PeakSample>,
    gap_limit_us: i64,
) -> Vec<(i64, i64, i64)> {
    let mut out = Vec::new();
    // The meter's previous counter reading: (meter, ts_us, counter_mj).
    let mut prev: Option<(i64, i64, i64)> = None;
    for (meter, ts, counter, power, peak) in samples {
        if prev.is_some_and(|p| p.0 != meter) {
            prev = None;
        }
        let mean = match (prev, counter) {
            (Some((_, t0, c0)), Some(c1)) if ts > t0 && ts - t0 <= gap_limit_us && c1 >= c0 => {
                // mJ per µs is 10^6 mW; rounded half up, both terms non-negative.
                let (de, dt) = (i128::from(c1 - c0) * 1_000_000, i128::from(ts - t0));
                i64::try_from((de + dt / 2) / dt).ok()
            }
            _ => None,
        };
        if let Some(mw) = peak.or(power).or(mean) {
            out.push((meter, ts, mw));
        }
        if let Some(c) = counter {
            prev = Some((meter, ts, c));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A counter-only meter gives each interval's mean power; a power reading or a step peak
    /// is taken as sent; nothing is made of a reset or of an interval past the gap limit.
    #[test]
    fn counter_only_meters_give_their_intervals_mean_power() {
        const S: i64 = 1_000_000;
        let samples = [
            (1, 0, Some(5_000_000), None, None),
            // 60 kJ in 60 s: 1 kW.
            (1, 60 * S, Some(65_000_000), None, None),
            // 30 kJ in 20 s: 1.5 kW.
            (1, 80 * S, Some(95_000_000), None, None),
            // A reset: no mean for the interval it closes.
            (1, 140 * S, Some(1_000), None, None),
            // Past the gap limit (300 s).
            (1, 500 * S, Some(90_001_000), None, None),
            // A step record with its peak and mean: the peak.
            (
                1,
                560 * S,
                Some(150_001_000),
                Some(1_000_000),
                Some(1_700_000),
            ),
            // Another meter starts afresh: its first counter closes no interval.
            (2, 600 * S, Some(0), None, None),
            (2, 660 * S, Some(1), Some(250), None),
            // 1 mJ in 7 s rounds to 0.143 mW, so 0.
            (2, 667 * S, Some(2), None, None),
        ];
        assert_eq!(
            power_readings(samples, 300 * S),
            [
                (1, 60 * S, 1_000_000),
                (1, 80 * S, 1_500_000),
                (1, 560 * S, 1_700_000),
                (2, 660 * S, 250),
                (2, 667 * S, 0),
            ]
        );
    }
}
