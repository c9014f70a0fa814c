//! The carbon-free share of a job's run at a site, as admission's third signal: the site's
//! contracted clean energy per hour ([`CleanSupply`]) and the expected carbon-free energy of
//! a run ([`run`]), both by the hourly-matching rule of [`crate::cfe`], which this module
//! applies and does not restate.
//!
//! A run is cut at the UTC hours it spans. In each, its load is its draw × its seconds in
//! the hour; the grid's carbon-free share is the signal's mean over those seconds (the draw
//! is constant, so that is the energy-weighted share [`crate::cfe::grid_share`] would give);
//! the contract is what the site's deliveries put into the whole hour. The job is credited
//! with the contract up to its own load: admission sees the job alone, not the site's other
//! load in hours still to come, so this is the share the job can reach at best, and a slot
//! rich in contracted supply ranks above a slot without it.

use super::forecast::Forecast;
use crate::cfe::{self, Delivery, Hour, Matched, Score};
use chrono::{DateTime, Duration, DurationRound, Utc};
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::{Decimal, RoundingStrategy};
use std::collections::BTreeMap;

const HOUR_MS: i64 = 3_600_000;

/// A site's contracted clean energy per UTC hour, mJ: each hour's figure is
/// [`cfe::delivered`] over the hour, computed once when the state is built so that pricing a
/// slot is a lookup per hour.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanSupply {
    /// Hour start, ms since the epoch → mJ delivered in it (hours with none are absent).
    by_hour: BTreeMap<i64, i64>,
}

impl CleanSupply {
    pub fn new(deliveries: &[Delivery]) -> Self {
        let mut by_hour = BTreeMap::new();
        for d in deliveries.iter().filter(|d| d.to_ms > d.from_ms) {
            let mut h = d.from_ms.div_euclid(HOUR_MS) * HOUR_MS;
            while h < d.to_ms {
                by_hour
                    .entry(h)
                    .or_insert_with(|| cfe::delivered(deliveries, h, h + HOUR_MS));
                h += HOUR_MS;
            }
        }
        by_hour.retain(|_, mj| *mj > 0);
        CleanSupply { by_hour }
    }

    pub fn is_empty(&self) -> bool {
        self.by_hour.is_empty()
    }

    /// Delivered in the hour starting at `hour_ms`, mJ.
    fn in_hour(&self, hour_ms: i64) -> i64 {
        self.by_hour.get(&hour_ms).copied().unwrap_or(0)
    }

    /// The hour boundaries in `[from, to]` where the supply changes: a candidate start of a
    /// flexible job, as a forecast's changes are.
    pub fn changes(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
        let mut out: Vec<DateTime<Utc>> = Vec::new();
        let (a, b) = (from.timestamp_millis() - HOUR_MS, to.timestamp_millis());
        for &h in self.by_hour.range(a..=b).map(|(h, _)| h) {
            for ms in [h, h + HOUR_MS] {
                if let Some(t) = DateTime::from_timestamp_millis(ms) {
                    if t >= from && t <= to && out.last() != Some(&t) {
                        out.push(t);
                    }
                }
            }
        }
        out
    }
}

/// The expected carbon-free energy of a run drawing `w` (W, at the facility) over
/// `[start, start + run)`: the hours' totals by [`cfe::hour`], or `None` when an hour's
/// figure is not known (the grid's share is not forecast for all of the job's time in it,
/// and the contract does not cover all of its load there): a slot that is not fully
/// forecast is not a slot to compare on this signal.
pub fn run(
    w: Decimal,
    grid_share: &Forecast,
    supply: &CleanSupply,
    start: DateTime<Utc>,
    run: Duration,
) -> Option<Score> {
    let end = start + run;
    let mut hours: Vec<Matched> = Vec::new();
    let mut h = start.duration_trunc(Duration::hours(1)).ok()?;
    while h < end {
        let next = h + Duration::hours(1);
        let (a, b) = (start.max(h), end.min(next));
        // In whole seconds, as the forecast integrates (a sub-second start would otherwise
        // divide a second more of signal by a second less of run).
        let secs = b.timestamp() - a.timestamp();
        if secs > 0 {
            let load_mj = (w * Decimal::from(secs) * Decimal::ONE_THOUSAND)
                .round_dp_with_strategy(0, RoundingStrategy::MidpointNearestEven)
                .to_i64()?;
            let share = grid_share.integral(a, b).map(|v| v / Decimal::from(secs));
            let m = cfe::hour(&Hour {
                load_mj,
                grid_share: share,
                contract_mj: supply.in_hour(h.timestamp_millis()),
            });
            if !m.known() {
                return None;
            }
            hours.push(m);
        }
        h = next;
    }
    Some(Score::of(&hours))
}

/// Percent of the fossil (not carbon-free) energy that run `b` avoids against run `a`, as
/// carbon and price savings are percents of `a`'s carbon and cost; `None` where `a` has no
/// fossil energy to avoid.
pub fn saving_pct(a: &Score, b: &Score) -> Option<Decimal> {
    let fossil = |s: &Score| Decimal::from(s.load_mj - s.carbon_free_mj);
    let (x, y) = (fossil(a), fossil(b));
    (x > Decimal::ZERO).then(|| (x - y) / x * Decimal::ONE_HUNDRED)
}

#[cfg(test)]
mod tests {
    use super::super::forecast::Point;
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn t(min: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 6, 21, 0, 0, 0).unwrap() + Duration::minutes(min)
    }
    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }
    fn shares(values: &[&str]) -> Forecast {
        Forecast::new(
            values
                .iter()
                .enumerate()
                .map(|(i, v)| Point {
                    start: t(60 * i as i64),
                    end: t(60 * (i as i64 + 1)),
                    value: d(v),
                })
                .collect(),
        )
    }
    const KWH: i64 = 3_600_000_000;

    #[test]
    fn a_run_is_matched_hour_by_hour_with_the_contract_capped_at_its_load() {
        // 5 kW for 2 h from 00:30: 2.5 kWh in hour 0, 5 kWh in hour 1, 2.5 kWh in hour 2.
        let grid = shares(&["0.2", "0.4", "0.6"]);
        // 4 kWh contracted in hour 1 (more than half its 5 kWh, less than all), 10 in hour 2.
        let supply = CleanSupply::new(&[
            Delivery {
                from_ms: t(60).timestamp_millis(),
                to_ms: t(120).timestamp_millis(),
                mj: 4 * KWH,
            },
            Delivery {
                from_ms: t(120).timestamp_millis(),
                to_ms: t(180).timestamp_millis(),
                mj: 10 * KWH,
            },
        ]);
        let s = run(
            Decimal::from(5000),
            &grid,
            &supply,
            t(30),
            Duration::hours(2),
        )
        .unwrap();
        // Hour 0: 2.5 × 0.2 = 0.5; hour 1: 4 + 1 × 0.4 = 4.4; hour 2: all 2.5 by contract:
        // 7.4 of 10 kWh.
        assert_eq!(s.load_mj, 10 * KWH);
        assert_eq!(s.carbon_free_mj, 74 * KWH / 10);
        assert_eq!(s.fraction(), Some(d("0.74")));
    }

    #[test]
    fn an_hour_without_a_share_is_unknown_unless_the_contract_covers_it() {
        let grid = shares(&["0.5"]);
        let none = CleanSupply::default();
        assert!(run(Decimal::from(1000), &grid, &none, t(0), Duration::hours(1)).is_some());
        assert!(run(Decimal::from(1000), &grid, &none, t(30), Duration::hours(1)).is_none());
        // Hour 1 has no share, but 1 kWh under contract covers its 0.5 kWh.
        let supply = CleanSupply::new(&[Delivery {
            from_ms: t(60).timestamp_millis(),
            to_ms: t(120).timestamp_millis(),
            mj: KWH,
        }]);
        let s = run(
            Decimal::from(1000),
            &grid,
            &supply,
            t(30),
            Duration::hours(1),
        )
        .unwrap();
        assert_eq!(s.fraction(), Some(d("0.75")));
    }

    #[test]
    fn a_day_long_delivery_is_spread_over_its_hours_and_changes_are_hour_bounds() {
        let supply = CleanSupply::new(&[Delivery {
            from_ms: t(60).timestamp_millis(),
            to_ms: t(60 * 5).timestamp_millis(),
            mj: 4 * KWH + 3,
        }]);
        assert_eq!(supply.in_hour(t(60).timestamp_millis()), KWH);
        assert_eq!(supply.in_hour(t(0).timestamp_millis()), 0);
        assert_eq!(
            supply.changes(t(0), t(600)),
            [t(60), t(120), t(180), t(240), t(300)]
        );
        assert_eq!(supply.changes(t(130), t(200)), [t(180)]);
    }

    #[test]
    fn the_saving_is_the_fossil_energy_avoided() {
        let s = |load_mj, carbon_free_mj| Score {
            load_mj,
            carbon_free_mj,
            ..Score::default()
        };
        // 70 % fossil against 20 %: 5/7 of it avoided.
        assert_eq!(
            saving_pct(&s(100, 30), &s(100, 80)).map(|p| p.round_dp(2)),
            Some(d("71.43"))
        );
        assert_eq!(saving_pct(&s(100, 100), &s(100, 80)), None);
        assert_eq!(saving_pct(&s(100, 80), &s(100, 30)), Some(d("-250")));
    }

    proptest! {
        /// Whatever the shares and contracts, a run's carbon-free energy is within its load,
        /// and its load is its draw × its seconds.
        #[test]
        fn a_run_is_within_its_load(
            values in proptest::collection::vec(0u32..=100, 1..8),
            contract in proptest::collection::vec(0i64..20 * KWH, 0..8),
            from in 0i64..120,
            len in 1i64..240,
            w in 1i64..100_000,
        ) {
            let grid = Forecast::new(values.iter().enumerate().map(|(i, v)| Point {
                start: t(60 * i as i64),
                end: t(60 * (i as i64 + 1)),
                value: Decimal::new(i64::from(*v), 2),
            }).collect());
            let supply = CleanSupply::new(&contract.iter().enumerate().map(|(i, mj)| Delivery {
                from_ms: t(60 * i as i64).timestamp_millis(),
                to_ms: t(60 * (i as i64 + 1)).timestamp_millis(),
                mj: *mj,
            }).collect::<Vec<_>>());
            if let Some(s) = run(Decimal::from(w), &grid, &supply, t(from), Duration::minutes(len)) {
                prop_assert_eq!(s.load_mj, w * len * 60 * 1000);
                prop_assert!(s.carbon_free_mj >= 0 && s.carbon_free_mj <= s.load_mj);
            }
        }
    }
}
