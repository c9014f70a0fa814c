//! A site's coincident IT peak from its meters' step peaks: what the operator page shows
//! beside the envelope (a minute's mean hides a training job's synchronous swings).

use std::collections::BTreeMap;

const MINUTE_US: i64 = 60_000_000;
const HOUR_US: i64 = 3_600_000_000;

/// Per hour (its start, µs since the epoch), the most, over the hour's minutes, of the sum
/// across meters of each meter's highest power (mW) in that minute.
///
/// `readings` are `(meter, ts_us, mw)`: a reading at `ts` describes the minute that ends at
/// or after it (a step record at a boundary is its step's peak), so it counts toward the
/// minute `ts - 1 µs` falls in. Only readings in `(from_us, to_us]` count.
pub fn hourly_coincident_peaks(
    readings: impl IntoIterator<Item = (i64, i64, i64)>,
    from_us: i64,
    to_us: i64,
) -> Vec<(i64, i64)> {
    let mut per_meter: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    for (meter, ts, mw) in readings {
        if ts <= from_us || ts > to_us {
            continue;
        }
        let minute = (ts - 1).div_euclid(MINUTE_US) * MINUTE_US;
        let peak = per_meter.entry((minute, meter)).or_insert(mw);
        *peak = (*peak).max(mw);
    }
    let mut per_minute: BTreeMap<i64, i64> = BTreeMap::new();
    for ((minute, _), mw) in per_meter {
        *per_minute.entry(minute).or_default() += mw;
    }
    let mut per_hour: BTreeMap<i64, i64> = BTreeMap::new();
    for (minute, mw) in per_minute {
        let hour = minute.div_euclid(HOUR_US) * HOUR_US;
        let peak = per_hour.entry(hour).or_insert(mw);
        *peak = (*peak).max(mw);
    }
    per_hour.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: i64 = MINUTE_US;

    /// Two nodes whose peaks fall in different minutes, then in the same one: the hour's
    /// peak is the coincident minute's sum, not the sum of the two meters' own peaks.
    #[test]
    fn the_peak_is_the_busiest_minutes_sum_across_meters() {
        let readings = [
            // Minute ending at 1: node 1 peaks alone (the reading at the boundary).
            (1, M, 900),
            (2, M, 100),
            // Minute ending at 2: both high, node 1 twice (its highest counts).
            (1, M + M / 2, 700),
            (1, 2 * M, 800),
            (2, 2 * M, 600),
            // Next hour, one reading.
            (1, HOUR_US + M, 50),
            // Outside (from, to]: ignored.
            (1, 0, 10_000),
        ];
        assert_eq!(
            hourly_coincident_peaks(readings, 0, HOUR_US + M),
            vec![(0, 1_400), (HOUR_US, 50)]
        );
    }

    #[test]
    fn a_reading_on_the_hour_belongs_to_the_hour_it_ends() {
        assert_eq!(
            hourly_coincident_peaks([(1, HOUR_US, 5)], 0, 2 * HOUR_US),
            vec![(0, 5)]
        );
    }
}
