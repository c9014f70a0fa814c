//! The parts a ledger row's energy is made of: the one type the attribution core, the
//! store's sums, the API's rows and the job page share (DESIGN.md "Attribution rules").
//!
//! A row's total is the sum of its four parts and is never stored beside them in this type,
//! so no two figures of one row can disagree; [`EnergyBreakdown::estimated_mj`] is not a part
//! but how much of the total was estimated.

use crate::split::split;
use serde::{Deserialize, Serialize};
use std::ops::{Add, AddAssign};

/// Energy of a ledger row (or a sum of rows) by where it was drawn, in mJ.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EnergyBreakdown {
    /// The GPUs' own meters (or their estimates), by each job's share of each GPU.
    pub gpu_mj: i64,
    /// The node's draw beyond its GPUs (CPUs, memory, fans, NICs), by the jobs' GPU energy
    /// on the node.
    pub node_overhead_mj: i64,
    /// On a job's row, its share of the site's idle energy (facility overhead included)
    /// under the proportional policy; on the idle row, the idle IT energy.
    pub idle_mj: i64,
    /// The facility's draw beyond IT (cooling, conversion losses) on the row's own IT
    /// energy; on the idle row, that of the idle IT energy.
    pub facility_overhead_mj: i64,
    /// How much of the total came from estimated steps (gaps, fallbacks, models): a part
    /// of the total, not added to it.
    pub estimated_mj: i64,
}

impl EnergyBreakdown {
    /// Everything the row is billed for: the four parts.
    pub fn total_mj(&self) -> i64 {
        self.gpu_mj + self.node_overhead_mj + self.idle_mj + self.facility_overhead_mj
    }

    /// IT energy: the GPUs' and the node's, before idle and the facility's share.
    pub fn it_mj(&self) -> i64 {
        self.gpu_mj + self.node_overhead_mj
    }

    /// Splits every part over `weights` by largest remainder (each part sums back exactly),
    /// and the estimated energy by the totals the parts came out as, so rounding never gives
    /// a share more estimated energy than energy.
    pub fn split(&self, weights: &[u128]) -> Vec<EnergyBreakdown> {
        let gpu = split(self.gpu_mj, weights);
        let node = split(self.node_overhead_mj, weights);
        let idle = split(self.idle_mj, weights);
        let facility = split(self.facility_overhead_mj, weights);
        let totals: Vec<u128> = (0..weights.len())
            .map(|k| (gpu[k] + node[k] + idle[k] + facility[k]).max(0) as u128)
            .collect();
        let estimated = split(self.estimated_mj, &totals);
        (0..weights.len())
            .map(|k| EnergyBreakdown {
                gpu_mj: gpu[k],
                node_overhead_mj: node[k],
                idle_mj: idle[k],
                facility_overhead_mj: facility[k],
                estimated_mj: estimated[k],
            })
            .collect()
    }
}

impl AddAssign for EnergyBreakdown {
    fn add_assign(&mut self, o: EnergyBreakdown) {
        self.gpu_mj += o.gpu_mj;
        self.node_overhead_mj += o.node_overhead_mj;
        self.idle_mj += o.idle_mj;
        self.facility_overhead_mj += o.facility_overhead_mj;
        self.estimated_mj += o.estimated_mj;
    }
}

impl Add for EnergyBreakdown {
    type Output = EnergyBreakdown;
    fn add(mut self, o: EnergyBreakdown) -> EnergyBreakdown {
        self += o;
        self
    }
}

impl std::iter::Sum for EnergyBreakdown {
    fn sum<I: Iterator<Item = EnergyBreakdown>>(iter: I) -> EnergyBreakdown {
        iter.fold(EnergyBreakdown::default(), Add::add)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parts(gpu: i64, node: i64, idle: i64, facility: i64, estimated: i64) -> EnergyBreakdown {
        EnergyBreakdown {
            gpu_mj: gpu,
            node_overhead_mj: node,
            idle_mj: idle,
            facility_overhead_mj: facility,
            estimated_mj: estimated,
        }
    }

    #[test]
    fn the_total_is_the_four_parts_and_it_energy_the_first_two() {
        let e = parts(700, 200, 50, 150, 300);
        assert_eq!(e.total_mj(), 1_100);
        assert_eq!(e.it_mj(), 900);
    }

    #[test]
    fn a_split_rounds_each_part_by_largest_remainder() {
        // 10 mJ of GPU over 1:2 → 3.33 and 6.67: the larger remainder takes the spare mJ.
        let shares = parts(10, 0, 0, 0, 10).split(&[1, 2]);
        assert_eq!(shares[0], parts(3, 0, 0, 0, 3));
        assert_eq!(shares[1], parts(7, 0, 0, 0, 7));
    }

    #[test]
    fn estimated_energy_follows_what_each_share_received() {
        // All of the estimate is the one share with energy: split by the weights again it
        // would have put 2 of 3 mJ on a share with 1 mJ of energy.
        let shares = parts(1, 0, 0, 0, 1).split(&[1, 1]);
        assert_eq!(shares.iter().map(|s| s.estimated_mj).sum::<i64>(), 1);
        assert!(shares.iter().all(|s| s.estimated_mj <= s.total_mj()));
    }

    proptest! {
        #[test]
        fn a_split_sums_back_to_the_whole_and_never_estimates_more_than_it_holds(
            gpu in 0i64..1_000_000_000,
            node in 0i64..1_000_000,
            idle in 0i64..1_000_000,
            facility in 0i64..1_000_000,
            estimated_pct in 0i64..=100,
            weights in proptest::collection::vec(0u128..1_000, 1..8),
        ) {
            prop_assume!(weights.iter().any(|&w| w > 0));
            let whole = parts(gpu, node, idle, facility, 0);
            let whole = EnergyBreakdown {
                estimated_mj: whole.total_mj() * estimated_pct / 100,
                ..whole
            };
            let shares = whole.split(&weights);
            prop_assert_eq!(shares.iter().copied().sum::<EnergyBreakdown>(), whole);
            for s in &shares {
                prop_assert!(s.estimated_mj <= s.total_mj());
            }
        }
    }
}
