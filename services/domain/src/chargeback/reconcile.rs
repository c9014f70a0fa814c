//! A site's month, meters against statements: metered = attributed + unallocated, to the mJ.
//!
//! Metered energy is what the site's meters recorded in the month (the ledger's other side);
//! attributed is every usage line of the month at the site that a job used (idle shares
//! included), unallocated the idle energy its platform tenant carries. Adjustments are the
//! lines billed this month for energy used in earlier months; they are shown, not part of the
//! balance, because their meters belong to those months.

use super::{Month, Statement};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SiteReconciliation {
    pub site: String,
    pub metered_mj: i64,
    pub attributed_mj: i64,
    pub unallocated_mj: i64,
    pub adjustments_mj: i64,
}

impl SiteReconciliation {
    pub fn balances(&self) -> bool {
        self.metered_mj == self.attributed_mj + self.unallocated_mj
    }

    /// Energy this month's statements bill at the site.
    pub fn billed_mj(&self) -> i64 {
        self.attributed_mj + self.unallocated_mj + self.adjustments_mj
    }
}

/// The site a month's lines do not balance against its meters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("site {site}: metered {metered_mj} mJ, statements {billed_mj} mJ")]
pub struct Unbalanced {
    pub site: String,
    pub metered_mj: i64,
    pub billed_mj: i64,
}

/// One row per site that has meters or lines, in site order; an error names the first site
/// whose statements do not add up to its meters.
pub fn reconcile(
    month: Month,
    metered: &BTreeMap<String, i64>,
    statements: &[Statement],
) -> Result<Vec<SiteReconciliation>, Unbalanced> {
    let mut sites: BTreeMap<String, SiteReconciliation> = metered
        .iter()
        .map(|(site, mj)| (site.clone(), row(site, *mj)))
        .collect();
    for line in statements.iter().flat_map(|s| &s.lines) {
        let r = sites
            .entry(line.key.site.clone())
            .or_insert_with(|| row(&line.key.site, 0));
        let mj = line.amounts.energy_mj;
        if line.is_adjustment(month) {
            r.adjustments_mj += mj;
        } else if line.key.class.is_unallocated() {
            r.unallocated_mj += mj;
        } else {
            r.attributed_mj += mj;
        }
    }
    let rows: Vec<SiteReconciliation> = sites.into_values().collect();
    match rows.iter().find(|r| !r.balances()) {
        Some(r) => Err(Unbalanced {
            site: r.site.clone(),
            metered_mj: r.metered_mj,
            billed_mj: r.attributed_mj + r.unallocated_mj,
        }),
        None => Ok(rows),
    }
}

fn row(site: &str, metered_mj: i64) -> SiteReconciliation {
    SiteReconciliation {
        site: site.to_owned(),
        metered_mj,
        attributed_mj: 0,
        unallocated_mj: 0,
        adjustments_mj: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chargeback::statement::statements;
    use crate::chargeback::{Amounts, Entry, LineClass, LineKey};
    use crate::split::split;
    use proptest::prelude::*;

    proptest! {
        /// Σ tenants + unallocated = site meters: a site's metered energy split over tenants,
        /// classes and the platform (as attribution does, exactly) reconciles to the mJ, with
        /// late lines for the month before shown apart; a line moved off by one mJ is caught.
        #[test]
        fn tenants_and_unallocated_add_up_to_the_meters(
            meters in proptest::collection::vec(0i64..1_000_000_000_000, 1..4),
            weights in proptest::collection::vec((0usize..4, 0usize..6, 1u128..1000), 1..30),
            late in proptest::collection::vec(-5_000_000i64..5_000_000, 0..4),
        ) {
            let month: Month = "2026-10".parse().unwrap();
            let tenants = ["platform", "acme", "beta", "gamma"];
            let mut entries: Vec<Entry> = Vec::new();
            let mut metered = BTreeMap::new();
            for (s, mj) in meters.iter().enumerate() {
                let site = format!("site-{s}");
                metered.insert(site.clone(), *mj);
                let w: Vec<u128> = weights.iter().map(|x| x.2).collect();
                for (part, (t, c, _)) in split(*mj, &w).into_iter().zip(&weights) {
                    entries.push((LineKey {
                        tenant: tenants[*t].into(), currency: "EUR".into(), site: site.clone(),
                        class: LineClass::ALL[*c], model: None, period: month,
                    }, Amounts { energy_mj: part, ..Default::default() }));
                }
            }
            for (i, mj) in late.iter().enumerate() {
                entries.push((LineKey {
                    tenant: tenants[i % 4].into(), currency: "EUR".into(), site: "site-0".into(),
                    class: LineClass::Training, model: None, period: month.prev(),
                }, Amounts { energy_mj: *mj, ..Default::default() }));
            }
            let st = statements(month, 1, entries.clone(), Vec::new());
            let rows = reconcile(month, &metered, &st).unwrap();
            prop_assert_eq!(rows.len(), meters.len());
            prop_assert_eq!(rows[0].adjustments_mj, late.iter().sum::<i64>());
            for r in &rows {
                prop_assert_eq!(r.attributed_mj + r.unallocated_mj, metered[&r.site]);
            }
            // One mJ moved to nowhere is a failure, not a rounding.
            let mut off = entries;
            off[0].1.energy_mj += 1;
            prop_assert!(reconcile(month, &metered, &statements(month, 1, off, Vec::new())).is_err());
        }
    }
}
