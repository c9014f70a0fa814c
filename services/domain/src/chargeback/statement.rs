//! Statements: a tenant's lines for a month in one currency, rounded so that they add up.
//!
//! Ledger amounts are exact to 1e-6 of a currency unit; a statement bills whole cents. Each
//! charge (a line's energy, and its GPU time where a rate applies) is rounded down to the
//! cent, and the cents the statement total still needs go one each to the charges with the
//! largest remainders, earlier lines first on a tie: the largest-remainder method, so the
//! lines add up to the rounded total exactly. kWh and GPU-hours shown beside the exact mJ and
//! ms are rounded the same way.

use super::{Amounts, Entry, LineKey, Month, MJ_PER_KWH, MS_PER_HOUR};
use rust_decimal::{Decimal, RoundingStrategy};
use serde::Serialize;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// One line of a statement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Line {
    /// 1-based, in statement order.
    pub no: u32,
    pub key: LineKey,
    pub amounts: Amounts,
    /// What the line bills, in the currency's minor unit: energy and GPU time.
    pub billed_energy_cost: Decimal,
    pub billed_gpu_time_cost: Decimal,
    /// For reading: kWh to 6 places and GPU-hours to 4, rounded to add up to the total.
    pub energy_kwh: Decimal,
    pub gpu_hours: Decimal,
    /// A usage line's GPU time by device model, in device-model order (the unreported model
    /// first): the models its hours ran on, and under the proportional idle policy those
    /// whose idle time's price it carries (with no hours); empty on an adjustment and on a
    /// line without GPU time.
    pub gpu_time: Vec<GpuTimePart>,
}

/// A line's GPU time on one device model: what its GPU-hour price is the price of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuTimePart {
    /// `None` for GPUs whose model was not reported, and for GPU time the ledger kept no
    /// device model of (hours attributed before migration 0043 and not since; every part of
    /// a close frozen before it).
    pub device_model: Option<String>,
    /// Exact, from the ledger.
    pub gpu_ms: i64,
    pub gpu_time_cost: Decimal,
    /// Rounded so that a line's parts add up to what the line bills and states.
    pub billed_gpu_time_cost: Decimal,
    pub gpu_hours: Decimal,
}

/// The ledger's GPU time of a line's key on one device model (`store::chargeback`'s sums).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceGpuTime {
    pub key: LineKey,
    pub device_model: Option<String>,
    pub gpu_ms: i64,
    pub gpu_time_cost: Decimal,
}

impl Line {
    pub fn billed_cost(&self) -> Decimal {
        self.billed_energy_cost + self.billed_gpu_time_cost
    }

    /// The line's GPU time by device model: its parts, or, for a line with GPU time and no
    /// parts (an adjustment, a close frozen before parts were kept), one part of no device
    /// model that is the whole line's.
    pub fn gpu_time_parts(&self) -> Cow<'_, [GpuTimePart]> {
        let has_time = self.amounts.gpu_ms != 0
            || !self.amounts.gpu_time_cost.is_zero()
            || !self.billed_gpu_time_cost.is_zero();
        if !self.gpu_time.is_empty() || !has_time {
            return Cow::Borrowed(&self.gpu_time);
        }
        Cow::Owned(vec![GpuTimePart {
            device_model: None,
            gpu_ms: self.amounts.gpu_ms,
            gpu_time_cost: self.amounts.gpu_time_cost,
            billed_gpu_time_cost: self.billed_gpu_time_cost,
            gpu_hours: self.gpu_hours,
        }])
    }

    /// Sets a usage line's parts from the ledger's GPU time of its key per device model.
    /// What the parts do not explain of the line's exact GPU time (hours attributed before
    /// parts were kept) is a part of no device model; the billed cost and GPU-hours are
    /// apportioned to add up to the line's.
    fn set_gpu_time(&mut self, mut exact: BTreeMap<Option<String>, (i64, Decimal)>, dp: u32) {
        let (ms, cost) = exact
            .values()
            .fold((0, Decimal::ZERO), |(m, c), (pm, pc)| (m + pm, c + pc));
        let rest = (self.amounts.gpu_ms - ms, self.amounts.gpu_time_cost - cost);
        if rest != (0, Decimal::ZERO) {
            let e = exact.entry(None).or_default();
            e.0 += rest.0;
            e.1 += rest.1;
        }
        exact.retain(|_, (ms, cost)| *ms != 0 || !cost.is_zero());
        let costs: Vec<Decimal> = exact.values().map(|p| p.1).collect();
        let hours: Vec<Decimal> = exact
            .values()
            .map(|p| Decimal::from(p.0) / Decimal::from(MS_PER_HOUR))
            .collect();
        let billed = to_target(&costs, self.billed_gpu_time_cost, dp);
        let hours = to_target(&hours, self.gpu_hours, 4);
        self.gpu_time = exact
            .into_iter()
            .zip(billed.into_iter().zip(hours))
            .map(
                |((device_model, (gpu_ms, gpu_time_cost)), (billed, hours))| GpuTimePart {
                    device_model,
                    gpu_ms,
                    gpu_time_cost,
                    billed_gpu_time_cost: billed,
                    gpu_hours: hours,
                },
            )
            .collect();
    }

    /// A line for energy used in an earlier, already closed month.
    pub fn is_adjustment(&self, month: Month) -> bool {
        self.key.period != month
    }
}

/// A tenant's statement for a month in one currency.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Statement {
    /// Invoice-style id, stable for the close: `WL-2026-10-acme-EUR-v1`.
    pub number: String,
    pub tenant: String,
    pub currency: String,
    pub lines: Vec<Line>,
    /// Exact sums of the lines.
    pub total: Amounts,
    /// The total rounded to the minor unit; equals the sum of the lines' billed cost.
    pub billed_cost: Decimal,
    pub energy_kwh: Decimal,
    pub gpu_hours: Decimal,
}

impl Statement {
    pub fn usage(&self, month: Month) -> impl Iterator<Item = &Line> {
        self.lines.iter().filter(move |l| !l.is_adjustment(month))
    }

    pub fn adjustments(&self, month: Month) -> impl Iterator<Item = &Line> {
        self.lines.iter().filter(move |l| l.is_adjustment(month))
    }
}

/// Decimal places of a currency's minor unit (ISO 4217); 2 unless listed.
pub fn minor_units(currency: &str) -> u32 {
    match currency {
        "BIF" | "CLP" | "DJF" | "GNF" | "ISK" | "JPY" | "KMF" | "KRW" | "PYG" | "RWF" | "UGX"
        | "VND" | "VUV" | "XAF" | "XOF" | "XPF" => 0,
        "BHD" | "IQD" | "JOD" | "KWD" | "LYD" | "OMR" | "TND" => 3,
        _ => 2,
    }
}

/// Rounds `exact` parts to `dp` places so that they add up to their sum rounded to `dp`
/// (half away from zero): floor each, then one unit each to the largest remainders, the
/// earlier part first on a tie. Works for negative parts (an adjustment that credits).
pub fn apportion(exact: &[Decimal], dp: u32) -> (Vec<Decimal>, Decimal) {
    let total: Decimal = exact.iter().copied().sum();
    let mut rounded_total =
        total.round_dp_with_strategy(dp, RoundingStrategy::MidpointAwayFromZero);
    let parts = to_target(exact, rounded_total, dp);
    rounded_total.rescale(dp);
    (parts, rounded_total)
}

/// Rounds `exact` parts to `dp` places so that they add up to `target`, a figure at `dp`
/// places that their sum was rounded to (by [`apportion`], or as one part of a larger
/// apportioning, as a line's figure is): floor each, then one unit each to the largest
/// remainders, the earlier part first on a tie.
fn to_target(exact: &[Decimal], target: Decimal, dp: u32) -> Vec<Decimal> {
    let unit = Decimal::new(1, dp);
    let mut parts: Vec<Decimal> = exact
        .iter()
        .map(|x| x.round_dp_with_strategy(dp, RoundingStrategy::ToNegativeInfinity))
        .collect();
    let floors: Decimal = parts.iter().copied().sum();
    // 0 ≤ left ≤ n: each floor is less than one unit under its part, and the target is the
    // sum rounded (to within a unit of it, and no less than the sum of the floors).
    let left = ((target - floors) / unit).trunc();
    debug_assert!(
        left >= Decimal::ZERO && left <= Decimal::from(exact.len()),
        "{target} is not a rounding of the sum of {exact:?}"
    );
    let mut order: Vec<usize> = (0..exact.len()).collect();
    order.sort_by(|&a, &b| {
        (exact[b] - parts[b])
            .cmp(&(exact[a] - parts[a]))
            .then(a.cmp(&b))
    });
    let mut given = Decimal::ZERO;
    for &i in &order {
        if given >= left {
            break;
        }
        parts[i] += unit;
        given += Decimal::ONE;
    }
    // Every figure at the same scale, zero included, so that they print alike.
    for p in &mut parts {
        p.rescale(dp);
    }
    parts
}

/// What late data changed since a period was billed: `current − billed` per key, for every
/// key either side has, zero differences left out. Both sides are keyed by period of use.
pub fn adjustments(current: &[Entry], billed: &[Entry]) -> Vec<Entry> {
    let mut diff: BTreeMap<LineKey, Amounts> = BTreeMap::new();
    for (k, a) in current {
        let e = diff.entry(k.clone()).or_default();
        *e = *e + *a;
    }
    for (k, a) in billed {
        let e = diff.entry(k.clone()).or_default();
        *e = *e - *a;
    }
    diff.into_iter().filter(|(_, a)| !a.is_zero()).collect()
}

/// Assembles a month's statements from this month's usage and the adjustments for earlier
/// months: one per tenant and currency, lines in a stable order (usage first, then
/// adjustments oldest first; by site, class and model within each).
///
/// `gpu_time` is the ledger's GPU time of this month's usage per line key and device model:
/// each usage line's parts ([`GpuTimePart`]).
pub fn statements(
    month: Month,
    version: u32,
    entries: Vec<Entry>,
    gpu_time: Vec<DeviceGpuTime>,
) -> Vec<Statement> {
    let mut by_key: BTreeMap<LineKey, BTreeMap<Option<String>, (i64, Decimal)>> = BTreeMap::new();
    for t in gpu_time.into_iter().filter(|t| t.key.period == month) {
        let e = by_key
            .entry(t.key)
            .or_default()
            .entry(t.device_model)
            .or_default();
        e.0 += t.gpu_ms;
        e.1 += t.gpu_time_cost;
    }
    // Keys that came in twice (two ledger pieces of one line) become one line.
    let mut merged: BTreeMap<LineKey, Amounts> = BTreeMap::new();
    for (k, a) in entries {
        let e = merged.entry(k).or_default();
        *e = *e + a;
    }
    let mut by_statement: BTreeMap<(String, String), Vec<Entry>> = BTreeMap::new();
    for (k, a) in merged.into_iter().filter(|(_, a)| !a.is_zero()) {
        by_statement
            .entry((k.tenant.clone(), k.currency.clone()))
            .or_default()
            .push((k, a));
    }
    by_statement
        .into_iter()
        .map(|((tenant, currency), mut entries)| {
            entries.sort_by(|(a, _), (b, _)| {
                (a.period != month, a.period, &a.site, a.class, &a.model).cmp(&(
                    b.period != month,
                    b.period,
                    &b.site,
                    b.class,
                    &b.model,
                ))
            });
            let mut statement = build(month, version, tenant, currency, entries);
            let dp = minor_units(&statement.currency);
            for line in statement
                .lines
                .iter_mut()
                .filter(|l| !l.is_adjustment(month))
            {
                let exact = by_key.remove(&line.key).unwrap_or_default();
                line.set_gpu_time(exact, dp);
            }
            statement
        })
        .collect()
}

fn build(
    month: Month,
    version: u32,
    tenant: String,
    currency: String,
    entries: Vec<Entry>,
) -> Statement {
    let dp = minor_units(&currency);
    // Charges in line order: each line's energy cost, then its GPU time.
    let charges: Vec<Decimal> = entries
        .iter()
        .flat_map(|(_, a)| [a.energy_cost, a.gpu_time_cost])
        .collect();
    let (billed, billed_cost) = apportion(&charges, dp);
    let kwh: Vec<Decimal> = entries
        .iter()
        .map(|(_, a)| Decimal::from(a.energy_mj) / Decimal::from(MJ_PER_KWH))
        .collect();
    let (kwh, energy_kwh) = apportion(&kwh, 6);
    let hours: Vec<Decimal> = entries
        .iter()
        .map(|(_, a)| Decimal::from(a.gpu_ms) / Decimal::from(MS_PER_HOUR))
        .collect();
    let (hours, gpu_hours) = apportion(&hours, 4);
    let total = entries.iter().fold(Amounts::default(), |t, (_, a)| t + *a);
    let lines = entries
        .into_iter()
        .enumerate()
        .map(|(i, (key, amounts))| Line {
            no: i as u32 + 1,
            key,
            amounts,
            billed_energy_cost: billed[2 * i],
            billed_gpu_time_cost: billed[2 * i + 1],
            energy_kwh: kwh[i],
            gpu_hours: hours[i],
            gpu_time: Vec::new(),
        })
        .collect();
    Statement {
        number: format!("WL-{month}-{tenant}-{currency}-v{version}"),
        tenant,
        currency,
        lines,
        total,
        billed_cost,
        energy_kwh,
        gpu_hours,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chargeback::LineClass;
    use proptest::prelude::*;

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    #[test]
    fn apportion_adds_up_and_favours_the_largest_remainder() {
        // 0.334 + 0.333 + 0.333 = 1.000: floors 0.33 × 3 = 0.99, one cent to the first.
        let (parts, total) = apportion(&[d("0.334"), d("0.333"), d("0.333")], 2);
        assert_eq!(parts, vec![d("0.34"), d("0.33"), d("0.33")]);
        assert_eq!(total, d("1.00"));
        // Credits round too: −0.005 − 0.005 = −0.01.
        let (parts, total) = apportion(&[d("-0.005"), d("-0.005")], 2);
        assert_eq!(total, d("-0.01"));
        assert_eq!(parts.iter().copied().sum::<Decimal>(), total);
        // Rounding each part on its own would give 0.01 + 0.01 + 0.01 = 0.03 for 0.015.
        let (parts, total) = apportion(&[d("0.005"), d("0.005"), d("0.005")], 2);
        assert_eq!(
            (parts, total),
            (vec![d("0.01"), d("0.01"), d("0.00")], d("0.02"))
        );
    }

    fn key(tenant: &str, site: &str, class: LineClass, period: Month) -> LineKey {
        LineKey {
            tenant: tenant.into(),
            currency: "EUR".into(),
            site: site.into(),
            class,
            model: None,
            period,
        }
    }

    #[test]
    fn adjustments_are_what_changed_per_key() {
        let oct: Month = "2026-10".parse().unwrap();
        let k = key("acme", "fra", LineClass::Training, oct);
        let billed = Amounts {
            energy_mj: 1000,
            energy_cost: d("0.20"),
            ..Default::default()
        };
        let now = Amounts {
            energy_mj: 1600,
            energy_cost: d("0.32"),
            ..Default::default()
        };
        let gone = key("beta", "fra", LineClass::Batch, oct);
        let adj = adjustments(
            &[(k.clone(), now)],
            &[(k.clone(), billed), (gone.clone(), billed)],
        );
        assert_eq!(adj.len(), 2);
        assert_eq!(
            adj[0],
            (
                k,
                Amounts {
                    energy_mj: 600,
                    energy_cost: d("0.12"),
                    ..Default::default()
                }
            )
        );
        assert_eq!(adj[1].1.energy_mj, -1000);
        // Nothing changed: nothing to adjust.
        assert!(adjustments(&[(gone.clone(), billed)], &[(gone, billed)]).is_empty());
    }

    #[test]
    fn a_usage_lines_gpu_time_parts_add_up_to_what_it_bills_and_states() {
        let oct: Month = "2026-10".parse().unwrap();
        let k = key("acme", "fra", LineClass::Training, oct);
        let line = Amounts {
            gpu_ms: 10_000_000,
            gpu_time_cost: d("3.333333"),
            ..Default::default()
        };
        let part = |device: &str, gpu_ms, cost: &str| DeviceGpuTime {
            key: k.clone(),
            device_model: Some(device.into()),
            gpu_ms,
            gpu_time_cost: d(cost),
        };
        // Two models explain 9,000,000 ms and 3.333333 of it; the ledger kept no model of
        // the last 1,000,000 ms (hours attributed before it kept them).
        let parts = vec![
            part("h100", 4_500_000, "1.666667"),
            part("h200", 4_500_000, "1.666666"),
        ];
        let s = statements(oct, 1, vec![(k.clone(), line)], parts);
        let l = &s[0].lines[0];
        let got: Vec<_> = l
            .gpu_time
            .iter()
            .map(|p| {
                (
                    p.device_model.as_deref(),
                    p.gpu_ms,
                    p.billed_gpu_time_cost,
                    p.gpu_hours,
                )
            })
            .collect();
        // 1.25 h + 1.25 h + 0.2777… h = 2.7778 h; 1.67 + 1.66 = 3.33 billed, the larger
        // remainder's cent to the first.
        assert_eq!(
            got,
            [
                (None, 1_000_000, d("0.00"), d("0.2778")),
                (Some("h100"), 4_500_000, d("1.67"), d("1.2500")),
                (Some("h200"), 4_500_000, d("1.66"), d("1.2500")),
            ]
        );
        assert_eq!(
            (l.billed_gpu_time_cost, l.gpu_hours),
            (d("3.33"), d("2.7778"))
        );
        // An adjustment has no parts: its GPU time is one of no device model.
        let nov = oct.next();
        let s = statements(nov, 1, vec![(k.clone(), line)], Vec::new());
        assert!(s[0].lines[0].gpu_time.is_empty());
        assert_eq!(s[0].lines[0].gpu_time_parts().len(), 1);
    }

    #[test]
    fn lines_order_usage_first_and_number_statements() {
        let nov: Month = "2026-11".parse().unwrap();
        let a = |mj| Amounts {
            energy_mj: mj,
            energy_cost: Decimal::new(mj, 3),
            ..Default::default()
        };
        let s = statements(
            nov,
            2,
            vec![
                (key("acme", "fra", LineClass::Training, nov.prev()), a(5)),
                (key("acme", "iad", LineClass::Batch, nov), a(7)),
                (key("acme", "fra", LineClass::Inference, nov), a(11)),
            ],
            Vec::new(),
        );
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].number, "WL-2026-11-acme-EUR-v2");
        let order: Vec<_> = s[0]
            .lines
            .iter()
            .map(|l| (l.no, l.key.site.as_str(), l.is_adjustment(nov)))
            .collect();
        assert_eq!(
            order,
            vec![(1, "fra", false), (2, "iad", false), (3, "fra", true)]
        );
        assert_eq!(s[0].billed_cost, d("0.02"));
    }

    fn arb_amounts() -> impl Strategy<Value = Amounts> {
        (
            -5_000_000_000i64..50_000_000_000,
            -9_000_000i64..90_000_000,
            0i64..5_000_000,
            0i64..10_000_000_000,
        )
            .prop_map(|(mj, micro, gpu_micro, ms)| Amounts {
                energy_mj: mj,
                energy_cost: Decimal::new(micro, 6),
                gpu_time_cost: Decimal::new(gpu_micro, 6),
                carbon_g: Decimal::new(mj / 7, 3),
                embodied_g: Decimal::new(ms / 11, 3),
                prompt_tokens: ms / 3,
                generated_tokens: ms / 5,
                gpu_ms: ms,
                badput_mj: mj / 9,
                carbon_free_mj: mj / 2,
                cfe_mj: mj,
            })
    }

    proptest! {
        /// Σ statement lines = statement total: billed cents, kWh and GPU-hours exactly, and
        /// the exact amounts too; every entry lands on exactly one line.
        #[test]
        fn lines_add_up_to_the_total(
            entries in proptest::collection::vec(
                (0usize..3, 0usize..2, 0usize..6, any::<bool>(), arb_amounts()), 1..40),
            jpy in any::<bool>(),
        ) {
            let month: Month = "2026-10".parse().unwrap();
            let entries: Vec<Entry> = entries.into_iter().map(|(t, s, c, late, a)| {
                let mut k = key(["acme", "beta", "gamma"][t], ["fra", "iad"][s], LineClass::ALL[c],
                                if late { month.prev() } else { month });
                if jpy && s == 1 { k.currency = "JPY".into(); }
                (k, a)
            }).collect();
            let expected_total = entries.iter().fold(Amounts::default(), |t, (_, a)| t + *a);
            let statements = statements(month, 1, entries, Vec::new());
            let mut seen = Amounts::default();
            for s in &statements {
                let sum = |f: fn(&Line) -> Decimal| s.lines.iter().map(f).sum::<Decimal>();
                prop_assert_eq!(sum(Line::billed_cost), s.billed_cost);
                prop_assert_eq!(sum(|l| l.energy_kwh), s.energy_kwh);
                prop_assert_eq!(sum(|l| l.gpu_hours), s.gpu_hours);
                prop_assert_eq!(s.lines.iter().fold(Amounts::default(), |t, l| t + l.amounts), s.total);
                let dp = minor_units(&s.currency);
                prop_assert_eq!(s.billed_cost, s.total.cost().round_dp_with_strategy(dp, RoundingStrategy::MidpointAwayFromZero));
                for l in &s.lines {
                    prop_assert!(l.billed_cost().scale() <= dp);
                    // No line is off its exact cost by a whole unit or more.
                    prop_assert!((l.billed_energy_cost - l.amounts.energy_cost).abs() < Decimal::new(1, dp));
                }
                seen = seen + s.total;
            }
            prop_assert_eq!(seen, expected_total);
        }
    }
}
