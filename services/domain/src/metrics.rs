//! Efficiency metrics of DESIGN.md "Metrics": PUE, ITUE, TUE, tokens per kWh, J per token,
//! idle fraction. Ratios are exact `Decimal`s rounded for display; a ratio with a zero
//! denominator is `None` (undefined), never infinity or zero.

use crate::units::{kwh, ratio, MJ_PER_J};
use rust_decimal::Decimal;
use serde::Serialize;

/// Energy totals of any grouping of ledger rows or site-hours.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EnergyTotals {
    pub total_mj: i64,
    pub it_mj: i64,
    pub gpu_mj: i64,
    pub idle_mj: i64,
    pub tokens: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Efficiency {
    pub kwh: Decimal,
    pub tokens_per_kwh: Option<Decimal>,
    pub tokens_per_kwh_it: Option<Decimal>,
    pub joules_per_token: Option<Decimal>,
    pub idle_fraction: Option<Decimal>,
}

pub fn efficiency(t: EnergyTotals) -> Efficiency {
    let per_kwh = |mj: i64| {
        if mj == 0 || t.tokens == 0 {
            None
        } else {
            Some((Decimal::from(t.tokens) / kwh(mj)).round_dp(3).normalize())
        }
    };
    Efficiency {
        kwh: kwh(t.total_mj).round_dp(6).normalize(),
        tokens_per_kwh: per_kwh(t.total_mj),
        tokens_per_kwh_it: per_kwh(t.it_mj),
        joules_per_token: ratio(t.total_mj, t.tokens * MJ_PER_J),
        idle_fraction: ratio(t.idle_mj, t.total_mj),
    }
}

/// Power usage effectiveness of a site: PUE = facility / IT, ITUE = IT / accelerator,
/// TUE = ITUE × PUE = facility / accelerator.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Effectiveness {
    pub pue: Option<Decimal>,
    pub itue: Option<Decimal>,
    pub tue: Option<Decimal>,
}

pub fn effectiveness(site_mj: i64, it_mj: i64, gpu_mj: i64) -> Effectiveness {
    Effectiveness {
        pue: ratio(site_mj, it_mj),
        itue: ratio(it_mj, gpu_mj),
        tue: ratio(site_mj, gpu_mj),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::MJ_PER_KWH;

    #[test]
    fn tue_is_pue_times_itue() {
        let e = effectiveness(150, 120, 100);
        assert_eq!(e.pue, Some(Decimal::new(125, 2)));
        assert_eq!(e.itue, Some(Decimal::new(12, 1)));
        assert_eq!(e.tue, Some(Decimal::new(15, 1)));
        assert_eq!(e.tue, Some(e.pue.unwrap() * e.itue.unwrap()));
        assert_eq!(effectiveness(0, 0, 0).pue, None);
    }

    #[test]
    fn tokens_per_kwh_and_joules_per_token() {
        let e = efficiency(EnergyTotals {
            total_mj: 2 * MJ_PER_KWH,
            it_mj: MJ_PER_KWH,
            gpu_mj: MJ_PER_KWH,
            idle_mj: MJ_PER_KWH / 2,
            tokens: 1_000_000,
        });
        assert_eq!(e.tokens_per_kwh, Some(Decimal::from(500_000)));
        assert_eq!(e.tokens_per_kwh_it, Some(Decimal::from(1_000_000)));
        // 7.2e6 J / 1e6 tokens = 7.2 J per token.
        assert_eq!(e.joules_per_token, Some(Decimal::new(72, 1)));
        assert_eq!(e.idle_fraction, Some(Decimal::new(25, 2)));
    }
}
