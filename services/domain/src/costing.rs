//! Energy to money and carbon for one site-hour, exactly.
//!
//! The site's amount is Σ over steps of kWh(step) × rate(step), where the rate is the
//! signal point covering the step (prices change every 15 minutes, MOER every 5): a
//! Decimal, never a float. It is rounded once, to the ledger's smallest unit (a millionth of
//! the currency; a milligram of CO2e), and split over the hour's rows by their energy with
//! the largest-remainder method, so the rows add up to the site's amount to that unit.
//! Statements round to cents later, again by largest remainder.
//!
//! A step no signal covers takes the site's fallback rate and says so; with no fallback the
//! hour has no amount (NULL in the ledger, flagged), never a silent zero, and neither has an
//! hour no rate covers at all, even if it drew nothing (a zero there would add up with real
//! amounts into a figure that looks measured). Each row also carries how much of its energy
//! was priced at the fallback rather than a signal, so a reader can tell the two apart.

use crate::attribution::DeviceTime;
use crate::badput;
use crate::cfe;
use crate::energy::StepGrid;
use crate::split::split;
use crate::units::MJ_PER_KWH;
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;

pub use crate::rate::Rate;

/// How one site-hour was priced (or carbon-counted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Priced {
    /// The site's amount in units of 10^-scale (micro-currency, milligrams); `None` when some
    /// step had neither a signal nor a fallback.
    pub units: Option<i64>,
    /// Steps that used the fallback rate.
    pub fallback_steps: usize,
    /// Steps whose rate was an estimate or a forecast.
    pub estimated_steps: usize,
    /// Steps with energy and no rate at all.
    pub missing_steps: usize,
    /// Steps a signal or the fallback covered.
    pub covered_steps: usize,
    /// Site energy of the steps priced at the fallback.
    pub fallback_mj: i64,
}

/// Prices a site-hour. `rates` are in order of precedence (actuals before forecasts, newest
/// first): the first covering a step's start wins. `scale` is the decimal places of the
/// result's unit (6 for micro-currency, 3 for milligrams of a rate in grams).
pub fn price_hour(
    grid: StepGrid,
    site_mj_by_step: &[i64],
    rates: &[Rate],
    fallback: Option<Decimal>,
    scale: u32,
) -> Priced {
    let mut amount = Decimal::ZERO;
    let mut out = Priced {
        units: None,
        fallback_steps: 0,
        estimated_steps: 0,
        missing_steps: 0,
        covered_steps: 0,
        fallback_mj: 0,
    };
    for (i, &mj) in site_mj_by_step.iter().enumerate() {
        let t = grid.step_start(i);
        let rate = rates.iter().find(|r| r.from_ms <= t && t < r.to_ms);
        let value = match (rate, fallback) {
            (Some(r), _) => {
                out.estimated_steps += usize::from(r.estimated);
                r.value
            }
            (None, Some(f)) => {
                out.fallback_steps += 1;
                out.fallback_mj += mj;
                f
            }
            (None, None) => {
                // A step without energy needs no rate.
                if mj != 0 {
                    out.missing_steps += 1;
                }
                continue;
            }
        };
        out.covered_steps += 1;
        amount += Decimal::from(mj) * value;
    }
    if out.missing_steps == 0 && out.covered_steps > 0 {
        // mJ × rate/kWh ÷ 3.6e9 mJ/kWh, in units of 10^-scale, rounded half away from zero.
        let units = (amount * Decimal::from(10i64.pow(scale)) / Decimal::from(MJ_PER_KWH))
            .round_dp_with_strategy(0, rust_decimal::RoundingStrategy::MidpointAwayFromZero);
        out.units = units.to_i64();
    }
    out
}

/// Splits a site's amount (in units) over rows by their energy, exactly. Rows without energy
/// get zero; an amount with no energy to weigh it (a price for a dark hour) goes to no row.
pub fn split_by_energy(units: i64, row_mj: &[i64]) -> Vec<i64> {
    let weights: Vec<u128> = row_mj.iter().map(|&e| e.max(0) as u128).collect();
    split(units, &weights)
}

/// Units of 10^-scale as a Decimal (`1234567` at scale 6 = 1.234567).
pub fn to_decimal(units: i64, scale: u32) -> Decimal {
    Decimal::new(units, scale)
}

/// A row's GPU-time cost (at the ledger's scale) over its device models by their price, by
/// largest remainder, so the parts add up to the row's cost exactly; `None` for every part
/// where the row has no cost.
pub fn gpu_time_by_device(cost: Option<Decimal>, parts: &[DeviceTime]) -> Vec<Option<Decimal>> {
    let Some(units) = cost.and_then(|c| (c * Decimal::from(10i64.pow(COST_SCALE))).to_i64()) else {
        return vec![None; parts.len()];
    };
    let weights: Vec<u128> = parts.iter().map(|p| p.price_pico.max(0) as u128).collect();
    split(units, &weights)
        .into_iter()
        .map(|u| Some(to_decimal(u, COST_SCALE)))
        .collect()
}

/// A site's rates for pricing its hours, each list in order of precedence.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SiteRates {
    /// Currency per kWh, in the site's currency.
    pub price: Vec<Rate>,
    pub price_fallback: Option<Decimal>,
    /// Average (location-based) g CO2e per kWh: what SCI and reports count.
    pub carbon: Vec<Rate>,
    pub carbon_fallback: Option<Decimal>,
    /// Marginal (MOER) g CO2e per kWh, for decisions; no fallback.
    pub marginal: Vec<Rate>,
    /// The grid's carbon-free share (0 to 1), and the clean energy contracted for the site:
    /// the hour's carbon-free energy ([`crate::cfe`]).
    pub carbon_free: Vec<Rate>,
    pub clean_energy: Vec<cfe::Delivery>,
}

/// Decimal places of the ledger's cost (a millionth of the currency) and carbon (a
/// milligram, as grams with three places).
pub const COST_SCALE: u32 = 6;
pub const CARBON_SCALE: u32 = 3;

/// One row's money and carbon; `None` where the hour has no amount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowAmounts {
    pub cost: Option<Decimal>,
    pub carbon_g: Option<Decimal>,
    pub carbon_marginal_g: Option<Decimal>,
    /// Embodied carbon (SCI's M) of the GPU time the row held (or its idle share), in g;
    /// `None` when no GPU of the site has a known device model (unknown is not zero).
    pub embodied_g: Option<Decimal>,
    /// GPU time at the devices' GPU-hour rates (the rest of a fully loaded cost); `None`
    /// when no device at the site has a rate in its currency.
    pub gpu_time_cost: Option<Decimal>,
    /// The row's share of the energy priced at the site's fallback price, and counted at its
    /// fallback carbon intensity, rather than by a signal (in proportion to its energy, as its
    /// amounts are); 0 where a signal covered the hour or no amount was given.
    pub price_fallback_mj: i64,
    pub carbon_fallback_mj: i64,
    /// The part of `cost` and `carbon_g` the row's badput energy carries (split by energy,
    /// as the rows' amounts are); `None` where the amount is.
    pub badput_cost: Option<Decimal>,
    pub badput_carbon_g: Option<Decimal>,
    /// The row's share of the hour's carbon-free energy, by its energy; `None` where the
    /// hour's is not known.
    pub carbon_free_mj: Option<i64>,
}

/// What attribution gives per row: energy, embodied carbon (ng), GPU-time price (1e-12).
#[derive(Debug, Clone, Copy)]
pub struct RowInputs<'a> {
    pub mj: &'a [i64],
    pub embodied_ng: &'a [i64],
    pub time_price_pico: &'a [i64],
    /// The part of each row's energy that is badput ([`crate::badput`]).
    pub badput_mj: &'a [i64],
}

/// Rounds a site's total of `parts` (in units of 10^-(scale + 6)) once to 10^-scale and
/// splits it over the rows by their parts; `None` when the total is zero.
fn rescale(parts: &[i64], scale: u32) -> Option<Vec<Decimal>> {
    let total: i64 = parts.iter().sum();
    if total <= 0 {
        return None;
    }
    let units = split(
        (total + 500_000) / 1_000_000,
        &parts.iter().map(|&e| e.max(0) as u128).collect::<Vec<_>>(),
    );
    Some(units.into_iter().map(|u| to_decimal(u, scale)).collect())
}

/// One row's share of one of the hour's amounts.
struct Amount {
    value: Option<Decimal>,
    badput: Option<Decimal>,
    fallback_mj: i64,
}

/// A site-hour's amounts per row, and the data-quality flags the rows carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HourAmounts {
    pub rows: Vec<RowAmounts>,
    pub flags: Vec<&'static str>,
    /// The site's hour matched by carbon-free supply.
    pub cfe: cfe::Matched,
}

/// Prices and carbon-counts one site-hour and splits both over its rows by energy; the
/// rows' embodied carbon (nanograms from attribution) is rounded to milligrams the same
/// exact way, the site's total once and the rows by largest remainder.
pub fn hour_amounts(
    grid: StepGrid,
    site_mj_by_step: &[i64],
    rows: &RowInputs,
    rates: &SiteRates,
) -> HourAmounts {
    let row_mj = rows.mj;
    let mut flags = Vec::new();
    let mut amount =
        |rates: &[Rate], fallback, scale, [fell_back, missing, estimated]: [&'static str; 3]| {
            let p = price_hour(grid, site_mj_by_step, rates, fallback, scale);
            if p.fallback_steps > 0 {
                flags.push(fell_back);
            }
            if p.units.is_none() {
                flags.push(missing);
            }
            if p.estimated_steps > 0 {
                flags.push(estimated);
            }
            let parts = p.units.map(|u| split_by_energy(u, row_mj));
            let fallback_parts = match p.units {
                Some(_) if p.fallback_mj != 0 => split_by_energy(p.fallback_mj, row_mj),
                _ => vec![0; row_mj.len()],
            };
            move |i: usize| Amount {
                value: parts.as_ref().map(|v| to_decimal(v[i], scale)),
                badput: parts
                    .as_ref()
                    .map(|v| to_decimal(badput::share(v[i], row_mj[i], rows.badput_mj[i]), scale)),
                fallback_mj: fallback_parts[i],
            }
        };
    let cost = amount(
        &rates.price,
        rates.price_fallback,
        COST_SCALE,
        ["price_fallback", "price_missing", "price_estimated"],
    );
    let carbon = amount(
        &rates.carbon,
        rates.carbon_fallback,
        CARBON_SCALE,
        ["carbon_fallback", "carbon_missing", "carbon_estimated"],
    );
    // Marginal intensity has no fallback: without a signal it is missing, and says so.
    let marginal = amount(
        &rates.marginal,
        None,
        CARBON_SCALE,
        [
            "carbon_marginal_fallback",
            "carbon_marginal_missing",
            "carbon_marginal_estimated",
        ],
    );
    // ng → mg and 1e-12 → 1e-6 currency: ÷ 1e6 once per site-hour, rows by largest remainder.
    let embodied = rescale(rows.embodied_ng, CARBON_SCALE);
    let gpu_time = rescale(rows.time_price_pico, COST_SCALE);
    let hour_end = grid.step_start(grid.steps);
    let matched = cfe::hour(&cfe::Hour {
        load_mj: site_mj_by_step.iter().sum(),
        grid_share: cfe::grid_share(grid, site_mj_by_step, &rates.carbon_free),
        contract_mj: cfe::delivered(&rates.clean_energy, grid.start_ms, hour_end),
    });
    // Unknown is NULL, and the score's coverage says how much: no flag, since a site with no
    // carbon-free feed is not a fault in the figures a row states.
    let carbon_free = matched
        .known()
        .then(|| split_by_energy(matched.carbon_free_mj(), row_mj));
    HourAmounts {
        cfe: matched,
        rows: (0..row_mj.len())
            .map(|i| {
                let (cost, carbon) = (cost(i), carbon(i));
                RowAmounts {
                    cost: cost.value,
                    carbon_g: carbon.value,
                    carbon_marginal_g: marginal(i).value,
                    embodied_g: embodied.as_ref().map(|v| v[i]),
                    gpu_time_cost: gpu_time.as_ref().map(|v| v[i]),
                    price_fallback_mj: cost.fallback_mj,
                    carbon_fallback_mj: carbon.fallback_mj,
                    badput_cost: cost.badput,
                    badput_carbon_g: carbon.badput,
                    carbon_free_mj: carbon_free.as_ref().map(|v| v[i]),
                }
            })
            .collect(),
        flags,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::str::FromStr;

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }

    #[test]
    fn a_rows_gpu_time_cost_goes_to_its_device_models_by_their_price() {
        let part = |device, price_pico| DeviceTime {
            device,
            gpu_ms: 1,
            price_pico,
        };
        // 0.000010 over prices 1 : 2 : 0 (a model with no rate): 3 + 1 remainder to the
        // largest remainder (6.67 → 7), none to the model without a rate.
        let parts = [part(Some(0), 1), part(Some(1), 2), part(None, 0)];
        assert_eq!(
            gpu_time_by_device(Some(d("0.000010")), &parts),
            [Some(d("0.000003")), Some(d("0.000007")), Some(d("0"))]
        );
        assert_eq!(gpu_time_by_device(None, &parts), [None, None, None]);
    }

    const MIN: i64 = 60_000;

    fn grid() -> StepGrid {
        StepGrid {
            start_ms: 0,
            step_ms: MIN,
            steps: 60,
        }
    }

    fn rate(from_min: i64, to_min: i64, v: &str) -> Rate {
        Rate {
            from_ms: from_min * MIN,
            to_ms: to_min * MIN,
            value: d(v),
            estimated: false,
        }
    }

    #[test]
    fn quarter_hour_prices_weigh_the_energy_of_their_steps() {
        // 1 kWh in each step of the first half hour, nothing after: only the first two
        // quarter-hour prices count. 15 kWh × 0.10 + 15 kWh × 0.30 = 6.00.
        let mut steps = vec![MJ_PER_KWH; 30];
        steps.extend(vec![0; 30]);
        let rates = [
            rate(0, 15, "0.10"),
            rate(15, 30, "0.30"),
            rate(30, 45, "9"),
            rate(45, 60, "9"),
        ];
        let p = price_hour(grid(), &steps, &rates, None, 6);
        assert_eq!(p.units, Some(6_000_000));
        assert_eq!((p.fallback_steps, p.missing_steps), (0, 0));
    }

    #[test]
    fn negative_prices_and_grams_to_milligrams() {
        let steps = vec![MJ_PER_KWH / 60; 60]; // 1 kWh over the hour
        let p = price_hour(grid(), &steps, &[rate(0, 60, "-0.00305")], None, 6);
        assert_eq!(p.units, Some(-3_050));
        // 394.6253619 g/kWh × 1 kWh = 394 625.3619 mg → 394 625 mg.
        let c = price_hour(grid(), &steps, &[rate(0, 60, "394.6253619")], None, 3);
        assert_eq!(c.units, Some(394_625));
    }

    #[test]
    fn gaps_take_the_fallback_and_say_so_or_leave_no_amount() {
        let steps = vec![1_000_000; 60];
        let rates = [rate(0, 30, "400")];
        let with = price_hour(grid(), &steps, &rates, Some(d("300")), 3);
        assert_eq!(with.fallback_steps, 30);
        // (30 × 400 + 30 × 300) g/kWh × 1e6 mJ / 3.6e9 × 1000 = 5833.33 → 5833 mg.
        assert_eq!(with.units, Some(5_833));
        let without = price_hour(grid(), &steps, &rates, None, 3);
        assert_eq!((without.units, without.missing_steps), (None, 30));
        // Dark steps need no rate.
        let mut dark = vec![1_000_000; 30];
        dark.extend(vec![0; 30]);
        assert!(price_hour(grid(), &dark, &rates, None, 3).units.is_some());
    }

    #[test]
    fn an_hour_splits_cost_and_carbon_over_its_rows_and_flags_what_it_assumed() {
        // 3 kWh over the hour, rows of 2 and 1 kWh; price 0.30/kWh for the first half and a
        // fallback of 0.20 after; carbon 400 g/kWh all hour; no marginal signal.
        let steps = vec![MJ_PER_KWH / 20; 60];
        let rates = SiteRates {
            price: vec![rate(0, 30, "0.30")],
            price_fallback: Some(d("0.20")),
            carbon: vec![rate(0, 60, "400")],
            carbon_fallback: None,
            marginal: vec![],
            // The grid 40 % carbon-free for the first half hour (then unknown), and half a
            // kWh of PPA: 0.5 + (3 − 0.5) × (1.5 × 0.4 / 3) = 1 kWh carbon-free, split 2:1.
            carbon_free: vec![rate(0, 30, "0.4")],
            clean_energy: vec![cfe::Delivery {
                from_ms: 0,
                to_ms: 3_600_000,
                mj: MJ_PER_KWH / 2,
            }],
        };
        let h = hour_amounts(
            grid(),
            &steps,
            &RowInputs {
                mj: &[2 * MJ_PER_KWH, MJ_PER_KWH],
                embodied_ng: &[2_400_000_000, 1_200_000_000],
                time_price_pico: &[0, 0],
                badput_mj: &[0, 0],
            },
            &rates,
        );
        assert_eq!(h.flags, ["price_fallback", "carbon_marginal_missing"]);
        assert_eq!(h.cfe.carbon_free_mj(), MJ_PER_KWH);
        assert_eq!(
            (h.rows[0].carbon_free_mj, h.rows[1].carbon_free_mj),
            (Some(2 * MJ_PER_KWH / 3), Some(MJ_PER_KWH / 3))
        );
        // Site: 1.5 kWh × 0.30 + 1.5 kWh × 0.20 = 0.75, split 2:1.
        assert_eq!(h.rows[0].cost, Some(d("0.500000")));
        assert_eq!(h.rows[1].cost, Some(d("0.250000")));
        assert_eq!(h.rows[0].carbon_g, Some(d("800.000")));
        assert_eq!(h.rows[1].carbon_g, Some(d("400.000")));
        assert_eq!(
            h.rows[0].carbon_marginal_g, None,
            "no MOER signal: no marginal carbon"
        );
        // Half the site's energy was priced at the fallback: each row's half, by energy.
        assert_eq!(
            (h.rows[0].price_fallback_mj, h.rows[1].price_fallback_mj),
            (MJ_PER_KWH, MJ_PER_KWH / 2)
        );
        assert_eq!(
            (h.rows[0].carbon_fallback_mj, h.rows[1].carbon_fallback_mj),
            (0, 0)
        );
        let none = hour_amounts(
            grid(),
            &steps,
            &RowInputs {
                mj: &[MJ_PER_KWH],
                embodied_ng: &[0],
                time_price_pico: &[0],
                badput_mj: &[0],
            },
            &SiteRates::default(),
        );
        assert_eq!(
            (none.rows[0].embodied_g, none.rows[0].gpu_time_cost),
            (None, None)
        );
        assert_eq!(
            none.flags,
            ["price_missing", "carbon_missing", "carbon_marginal_missing"]
        );
        assert_eq!(none.rows[0].carbon_free_mj, None);
        assert_eq!(none.rows[0].cost, None);
    }

    #[test]
    fn an_hour_no_signal_covers_has_no_amount_even_when_it_drew_nothing() {
        // A dark hour before the marginal signal began: its marginal carbon is unknown, not
        // zero (zeros added to real amounts made a 2-day demo report 0 g of marginal carbon).
        let dark = vec![0; 60];
        let p = price_hour(grid(), &dark, &[], None, 3);
        assert_eq!((p.units, p.missing_steps, p.covered_steps), (None, 0, 0));
        // A signal covering the dark hour prices it at zero: that zero is measured.
        let p = price_hour(grid(), &dark, &[rate(0, 60, "400")], None, 3);
        assert_eq!(p.units, Some(0));
        let h = hour_amounts(
            grid(),
            &dark,
            &RowInputs {
                mj: &[0],
                embodied_ng: &[0],
                time_price_pico: &[0],
                badput_mj: &[0],
            },
            &SiteRates {
                carbon: vec![rate(0, 60, "400")],
                ..SiteRates::default()
            },
        );
        assert_eq!(h.rows[0].carbon_g, Some(d("0.000")));
        assert_eq!(h.rows[0].carbon_marginal_g, None);
        assert!(h.flags.contains(&"carbon_marginal_missing"));
    }

    #[test]
    fn the_first_rate_in_precedence_wins() {
        let steps = vec![MJ_PER_KWH; 60];
        let actual = Rate {
            estimated: true,
            ..rate(0, 60, "0.2")
        };
        let p = price_hour(grid(), &steps, &[actual, rate(0, 60, "0.5")], None, 2);
        assert_eq!(p.units, Some(1200));
        assert_eq!(p.estimated_steps, 60);
    }

    proptest! {
        /// However energy and rates fall, the rows' parts add up to the site's amount, and
        /// the site's amount is the exact Σ kWh × rate rounded once.
        #[test]
        fn rows_add_up_to_the_site_amount(
            steps in proptest::collection::vec(0i64..5_000_000_000, 60),
            cents in proptest::collection::vec(-50i64..500, 4),
            rows in proptest::collection::vec(0i64..1_000_000_000_000, 1..12),
        ) {
            let rates: Vec<Rate> = cents
                .iter()
                .enumerate()
                .map(|(q, c)| Rate {
                    from_ms: q as i64 * 15 * MIN,
                    to_ms: (q as i64 + 1) * 15 * MIN,
                    value: Decimal::new(*c, 2),
                    estimated: false,
                })
                .collect();
            let p = price_hour(grid(), &steps, &rates, None, 6);
            let units = p.units.unwrap();
            let exact: Decimal = steps
                .iter()
                .enumerate()
                .map(|(i, e)| Decimal::from(*e) * Decimal::new(cents[i / 15], 2))
                .sum::<Decimal>()
                * Decimal::from(1_000_000)
                / Decimal::from(MJ_PER_KWH);
            prop_assert!((Decimal::from(units) - exact).abs() <= d("0.5"));
            let parts = split_by_energy(units, &rows);
            if rows.iter().any(|&r| r > 0) {
                prop_assert_eq!(parts.iter().sum::<i64>(), units);
            }
        }
    }
}
