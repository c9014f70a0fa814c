//! Hourly carbon-free energy (24/7 CFE): how much of a site's energy was matched, hour by
//! hour, by carbon-free supply.
//!
//! Per hour, the site's contracted clean energy (a PPA's or on-site generation's MWh in that
//! hour) covers its load first, up to the load: an hour's surplus is not carried to another
//! hour, which is what separates hourly matching from annual matching. The rest of the load
//! comes from the grid, carbon-free in the grid's carbon-free share of that hour. So an
//! hour's carbon-free energy is `min(contract, load) + share × (load − min(contract, load))`,
//! and a span's CFE score is Σ carbon-free / Σ load.
//!
//! Energy is integer millijoules; the grid's share is a `Decimal` fraction; the carbon-free
//! energy of an hour is rounded to the millijoule once, and split over the hour's tenants by
//! their energy with the largest remainders, so the tenants' carbon-free energy adds up to
//! the site's exactly.

use crate::energy::StepGrid;
use crate::rate::Rate;
use crate::split::split;
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::{Decimal, RoundingStrategy};

/// Clean energy delivered to a site over `[from_ms, to_ms)`, mJ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    pub from_ms: i64,
    pub to_ms: i64,
    pub mj: i64,
}

/// The clean energy delivered within `[from_ms, to_ms)`: a delivery over a longer interval
/// counts by its time inside, rounded down to the mJ (a contract is not credited with energy
/// it did not deliver in the hour).
pub fn delivered(deliveries: &[Delivery], from_ms: i64, to_ms: i64) -> i64 {
    deliveries
        .iter()
        .map(|d| {
            let overlap = d.to_ms.min(to_ms) - d.from_ms.max(from_ms);
            let len = d.to_ms - d.from_ms;
            if overlap <= 0 || len <= 0 {
                0
            } else {
                (i128::from(d.mj.max(0)) * i128::from(overlap) / i128::from(len)) as i64
            }
        })
        .sum()
}

/// The grid's carbon-free share over an hour's steps, weighted by the site's energy in each
/// (a share that changes within the hour, as the UK's half-hours do, counts by the energy
/// drawn under it). A step with energy and no share counts as not carbon-free; `None` when
/// no step with energy has one, or the hour drew nothing.
pub fn grid_share(grid: StepGrid, site_mj_by_step: &[i64], rates: &[Rate]) -> Option<Decimal> {
    let (mut weighted, mut load, mut covered) = (Decimal::ZERO, 0i64, false);
    for (i, &mj) in site_mj_by_step.iter().enumerate() {
        let t = grid.step_start(i);
        load += mj;
        if let Some(r) = rates.iter().find(|r| r.from_ms <= t && t < r.to_ms) {
            covered |= mj != 0;
            weighted += Decimal::from(mj) * r.value.clamp(Decimal::ZERO, Decimal::ONE);
        }
    }
    (covered && load > 0).then(|| weighted / Decimal::from(load))
}

/// What one hour of a site is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hour {
    /// The site's energy in the hour, mJ.
    pub load_mj: i64,
    /// The grid's carbon-free share in the hour, 0 to 1; `None` when no signal covers it.
    pub grid_share: Option<Decimal>,
    /// Contracted clean energy delivered in the hour, mJ.
    pub contract_mj: i64,
}

/// One hour's carbon-free energy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Matched {
    pub load_mj: i64,
    /// Covered by the contract.
    pub contract_mj: i64,
    /// Covered by the grid's carbon-free share.
    pub grid_mj: i64,
    /// Whether the grid's share was unknown (the hour counts its grid energy as not
    /// carbon-free, and says so).
    pub unknown_share: bool,
}

impl Matched {
    pub fn carbon_free_mj(&self) -> i64 {
        self.contract_mj + self.grid_mj
    }

    /// Whether the hour's carbon-free energy is known: its grid share is, or the contract
    /// covered all of its load (an unknown share leaves the rest unknown, not fossil).
    pub fn known(&self) -> bool {
        !self.unknown_share || self.contract_mj == self.load_mj
    }
}

/// The hour's carbon-free energy, by the module's rule. Negative inputs count as zero, and
/// a share outside 0..=1 is held to it.
pub fn hour(h: &Hour) -> Matched {
    let load = h.load_mj.max(0);
    let contract = h.contract_mj.clamp(0, load);
    let from_grid = load - contract;
    let share = h.grid_share.map(|s| s.clamp(Decimal::ZERO, Decimal::ONE));
    let grid_mj = share.map_or(0, |s| {
        (Decimal::from(from_grid) * s)
            .round_dp_with_strategy(0, RoundingStrategy::MidpointNearestEven)
            .to_i64()
            .unwrap_or(0)
            .min(from_grid)
    });
    Matched {
        load_mj: load,
        contract_mj: contract,
        grid_mj,
        unknown_share: share.is_none(),
    }
}

/// A span's totals: the score is `carbon_free / load`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Score {
    pub load_mj: i64,
    pub carbon_free_mj: i64,
    /// Hours with load whose energy was not all carbon-free.
    pub hours_short: u32,
    /// Hours whose grid share was unknown.
    pub hours_unknown: u32,
}

impl Score {
    pub fn of(hours: &[Matched]) -> Score {
        hours.iter().fold(Score::default(), |mut s, h| {
            s.load_mj += h.load_mj;
            s.carbon_free_mj += h.carbon_free_mj();
            s.hours_short += u32::from(h.carbon_free_mj() < h.load_mj);
            s.hours_unknown += u32::from(h.unknown_share);
            s
        })
    }

    /// Σ carbon-free / Σ load: [`score`].
    pub fn fraction(&self) -> Option<Decimal> {
        score(self.carbon_free_mj, self.load_mj)
    }
}

/// A CFE score: carbon-free energy over the energy of the hours whose figure is known, to 4
/// places (basis points of a percent); `None` without such energy. Every figure that shows a
/// score (usage rows, sites, statements, pages) computes it here.
pub fn score(carbon_free_mj: i64, load_mj: i64) -> Option<Decimal> {
    (load_mj > 0).then(|| {
        (Decimal::from(carbon_free_mj) / Decimal::from(load_mj))
            .round_dp_with_strategy(4, RoundingStrategy::MidpointNearestEven)
            .normalize()
    })
}

/// The hour's carbon-free energy split over its tenants by their energy (largest
/// remainders): a tenant's share of the hour's clean supply is its share of the hour's load.
/// The parts add up to `m.carbon_free_mj()`.
pub fn split_by_tenant(m: &Matched, tenant_mj: &[i64]) -> Vec<i64> {
    let weights: Vec<u128> = tenant_mj.iter().map(|&e| e.max(0) as u128).collect();
    split(m.carbon_free_mj(), &weights)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    /// Three hours by hand, 10 kWh of load each (a kWh is 3.6e9 mJ).
    #[test]
    fn hours_match_by_hand_and_a_surplus_is_not_carried() {
        let kwh = 3_600_000_000i64;
        let hours = [
            // Night: no contract, the grid 40 % clean: 4 kWh.
            Hour {
                load_mj: 10 * kwh,
                grid_share: Some(d("0.4")),
                contract_mj: 0,
            },
            // Noon: a 15 kWh PPA covers all; 5 kWh surplus is lost to this hour.
            Hour {
                load_mj: 10 * kwh,
                grid_share: Some(d("0.4")),
                contract_mj: 15 * kwh,
            },
            // Evening: 5 kWh of PPA, the other 5 kWh at 60 %: 8 kWh.
            Hour {
                load_mj: 10 * kwh,
                grid_share: Some(d("0.6")),
                contract_mj: 5 * kwh,
            },
        ];
        let m: Vec<Matched> = hours.iter().map(hour).collect();
        assert_eq!(
            m.iter().map(Matched::carbon_free_mj).collect::<Vec<_>>(),
            [4 * kwh, 10 * kwh, 8 * kwh]
        );
        let s = Score::of(&m);
        assert_eq!((s.load_mj, s.carbon_free_mj), (30 * kwh, 22 * kwh));
        assert_eq!(s.fraction(), Some(d("0.7333")));
        assert_eq!((s.hours_short, s.hours_unknown), (2, 0));
        // Matched over the span instead, the noon's 5 kWh surplus would have been credited
        // against the night's fossil 6 kWh: 27 of 30, 0.90, not 0.73.
    }

    #[test]
    fn an_hour_without_a_signal_counts_only_its_contract_and_says_so() {
        let m = hour(&Hour {
            load_mj: 1000,
            grid_share: None,
            contract_mj: 300,
        });
        assert_eq!((m.carbon_free_mj(), m.unknown_share), (300, true));
        assert_eq!(Score::of(&[m]).hours_unknown, 1);
        assert_eq!(Score::of(&[]).fraction(), None);
    }

    #[test]
    fn a_share_that_changes_within_the_hour_counts_by_the_energy_under_it() {
        let grid = StepGrid {
            start_ms: 0,
            step_ms: 1_800_000,
            steps: 2,
        };
        let rate = |from_ms, to_ms, v: &str| Rate {
            from_ms,
            to_ms,
            value: d(v),
            estimated: false,
        };
        let halves = [rate(0, 1_800_000, "0.2"), rate(1_800_000, 3_600_000, "0.5")];
        // 1 MJ at 20 %, 3 MJ at 50 %: 1.7 of 4.
        assert_eq!(
            grid_share(grid, &[1_000_000, 3_000_000], &halves),
            Some(d("0.425"))
        );
        // The second half has no share: it counts as not carbon-free.
        assert_eq!(
            grid_share(grid, &[1_000_000, 3_000_000], &halves[..1]),
            Some(d("0.05"))
        );
        assert_eq!(grid_share(grid, &[1_000_000, 3_000_000], &[]), None);
        assert_eq!(grid_share(grid, &[0, 0], &halves), None);
    }

    #[test]
    fn a_delivery_counts_in_an_hour_by_its_time_in_it() {
        let day = Delivery {
            from_ms: 0,
            to_ms: 4 * 3_600_000,
            mj: 1_000_003,
        };
        assert_eq!(delivered(&[day], 0, 3_600_000), 250_000);
        assert_eq!(delivered(&[day], 3_600_000 * 4, 3_600_000 * 5), 0);
        let hourly = Delivery {
            from_ms: 3_600_000,
            to_ms: 7_200_000,
            mj: 7,
        };
        assert_eq!(delivered(&[day, hourly], 3_600_000, 7_200_000), 250_007);
        // An unknown share with the whole load under contract is known; otherwise not.
        let m = |contract_mj| {
            hour(&Hour {
                load_mj: 10,
                grid_share: None,
                contract_mj,
            })
        };
        assert!(m(10).known() && m(12).known() && !m(9).known());
    }

    proptest! {
        #[test]
        fn carbon_free_is_within_the_load_and_tenants_add_up(
            load in 0i64..1_000_000_000_000, contract in 0i64..2_000_000_000_000,
            share in 0u32..=10_000, tenants in prop::collection::vec(0i64..1_000_000_000, 1..6),
        ) {
            let m = hour(&Hour {
                load_mj: load,
                grid_share: Some(Decimal::new(share.into(), 4)),
                contract_mj: contract,
            });
            prop_assert!(m.carbon_free_mj() >= m.contract_mj);
            prop_assert!(m.carbon_free_mj() <= load);
            prop_assert!(m.contract_mj <= contract.min(load));
            let parts = split_by_tenant(&m, &tenants);
            if tenants.iter().any(|&t| t > 0) {
                prop_assert_eq!(parts.iter().sum::<i64>(), m.carbon_free_mj());
            }
        }
    }
}
