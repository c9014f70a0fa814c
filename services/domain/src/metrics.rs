//! Every figure derived from the ledger's totals, defined once (DESIGN.md "Metrics"): tokens
//! per kWh, J per token, carbon per 1k tokens, SCI, carbon intensity, PUE, ITUE, TUE, idle
//! fraction, GPU hours, cost per 1M tokens. The API, the dashboard, `/metrics` and the demo
//! call these and only format what they return, so one name means one number everywhere.
//!
//! Figures are exact `Decimal`s rounded to a stated number of places (normalized: no
//! trailing zeros); a figure with a zero or unknown denominator is `None` (undefined), never
//! infinity or zero.

use crate::units::{kwh, ratio, MJ_PER_J, MS_PER_HOUR};
use rust_decimal::Decimal;
use serde::Serialize;

/// The totals of any grouping of ledger rows or site-hours that figures are derived from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EnergyTotals {
    pub total_mj: i64,
    pub it_mj: i64,
    pub gpu_mj: i64,
    pub idle_mj: i64,
    pub tokens: i64,
    /// Operational carbon (location-based), g CO2e; `None` where no carbon signal covered
    /// any of the energy.
    pub carbon_g: Option<Decimal>,
    /// Embodied carbon of the GPU time (SCI's M), g CO2e; `None` where no device model's
    /// embodied figure is known.
    pub embodied_carbon_g: Option<Decimal>,
}

/// The per-energy and per-token figures of a set of totals.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Efficiency {
    /// Total energy in kWh, 6 places.
    pub kwh: Decimal,
    /// Tokens per kWh of total energy (facility share included), 3 places.
    pub tokens_per_kwh: Option<Decimal>,
    /// Tokens per kWh of IT energy (GPU and node, before the facility's share), 3 places.
    pub tokens_per_kwh_it: Option<Decimal>,
    /// Joules of total energy per token, 6 places.
    pub joules_per_token: Option<Decimal>,
    /// Idle energy as a share of total energy, 6 places.
    pub idle_fraction: Option<Decimal>,
    /// Operational carbon per 1,000 tokens, g CO2e, 3 places: [`g_co2e_per_1k_tokens`].
    pub g_co2e_per_1k_tokens: Option<Decimal>,
    /// SCI per token, g CO2e, 6 places: [`sci_g_per_token`].
    pub sci_g_per_token: Option<Decimal>,
    /// SCI per 1,000 tokens, g CO2e, 3 places: [`sci_g_per_1k_tokens`].
    pub sci_g_per_1k_tokens: Option<Decimal>,
}

pub fn efficiency(t: EnergyTotals) -> Efficiency {
    Efficiency {
        kwh: kwh(t.total_mj).round_dp(6).normalize(),
        tokens_per_kwh: tokens_per_kwh(t.tokens, t.total_mj),
        tokens_per_kwh_it: tokens_per_kwh(t.tokens, t.it_mj),
        joules_per_token: joules_per_token(t.total_mj, t.tokens),
        idle_fraction: ratio(t.idle_mj, t.total_mj),
        g_co2e_per_1k_tokens: g_co2e_per_1k_tokens(t.carbon_g, t.tokens),
        sci_g_per_token: sci_g_per_token(t.carbon_g, t.embodied_carbon_g, t.tokens),
        sci_g_per_1k_tokens: sci_g_per_1k_tokens(t.carbon_g, t.embodied_carbon_g, t.tokens),
    }
}

/// Joules of `mj` per token, 6 places; `None` without tokens.
pub fn joules_per_token(mj: i64, tokens: i64) -> Option<Decimal> {
    ratio(mj, tokens.saturating_mul(MJ_PER_J))
}

/// Tokens per kWh of `mj`, 3 places; `None` when either is zero.
pub fn tokens_per_kwh(tokens: i64, mj: i64) -> Option<Decimal> {
    (tokens != 0 && mj != 0).then(|| (Decimal::from(tokens) / kwh(mj)).round_dp(3).normalize())
}

/// Operational carbon per 1,000 tokens: location-based g CO2e × 1000 / tokens, 3 places.
/// Embodied carbon is not in it; [`sci_g_per_1k_tokens`] is the figure that includes it.
pub fn g_co2e_per_1k_tokens(carbon_g: Option<Decimal>, tokens: i64) -> Option<Decimal> {
    per_tokens(carbon_g?, tokens, 1_000, 3)
}

/// The Software Carbon Intensity (Green Software Foundation, ISO/IEC 21031) per token:
/// (operational O + embodied M) g CO2e / tokens, 6 places. `None` while either part is
/// unknown: an SCI that leaves out a part it should hold would read as better than it is.
pub fn sci_g_per_token(
    carbon_g: Option<Decimal>,
    embodied_g: Option<Decimal>,
    tokens: i64,
) -> Option<Decimal> {
    per_tokens(carbon_g? + embodied_g?, tokens, 1, 6)
}

/// [`sci_g_per_token`] per 1,000 tokens, 3 places.
pub fn sci_g_per_1k_tokens(
    carbon_g: Option<Decimal>,
    embodied_g: Option<Decimal>,
    tokens: i64,
) -> Option<Decimal> {
    per_tokens(carbon_g? + embodied_g?, tokens, 1_000, 3)
}

/// An amount (a currency's cost) per 1,000,000 tokens, 6 places.
pub fn per_1m_tokens(amount: Decimal, tokens: i64) -> Option<Decimal> {
    per_tokens(amount, tokens, 1_000_000, 6)
}

fn per_tokens(amount: Decimal, tokens: i64, per: i64, places: u32) -> Option<Decimal> {
    (tokens > 0).then(|| {
        (amount * Decimal::from(per) / Decimal::from(tokens))
            .round_dp(places)
            .normalize()
    })
}

/// The carbon intensity energy ran at: operational g CO2e per kWh of the energy a carbon
/// signal covered (`carbon_mj`, not all of it: uncovered energy has no carbon, and dividing
/// by it would show a cleaner grid than there was), 3 places.
pub fn g_co2e_per_kwh(carbon_g: Option<Decimal>, carbon_mj: i64) -> Option<Decimal> {
    let g = carbon_g?;
    (carbon_mj > 0).then(|| (g / kwh(carbon_mj)).round_dp(3).normalize())
}

/// Tokens per second per megawatt: the headline of a power-bound site, whose substation and
/// not its GPUs limit it. `tokens` served over `hours` hours, per MW of `mw` (the site's peak
/// draw, or its envelope), 3 places; `None` when any is zero.
pub fn tokens_per_s_per_mw(tokens: i64, hours: i64, mw: i64) -> Option<Decimal> {
    // 1 MW is 10^9 mW.
    (tokens > 0 && hours > 0 && mw > 0).then(|| {
        (Decimal::from(tokens) * Decimal::from(1_000_000_000i64)
            / (Decimal::from(hours) * Decimal::from(3600) * Decimal::from(mw)))
        .round_dp(3)
        .normalize()
    })
}

/// GPU hours of GPU time held, 4 places.
pub fn gpu_hours(gpu_ms: i64) -> Decimal {
    (Decimal::from(gpu_ms) / Decimal::from(MS_PER_HOUR))
        .round_dp(4)
        .normalize()
}

/// Power usage effectiveness of a site: PUE = facility / IT, ITUE = IT / accelerator,
/// TUE = ITUE × PUE = facility / accelerator; 6 places each.
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

    /// The scenario hour: 3,750 tokens at a site peaking at 2 kW (1.6 kW IT × PUE 1.25)
    /// under a 100 kW envelope: 3750 / 3600 s / 0.002 MW and / 0.1 MW.
    #[test]
    fn tokens_per_second_per_megawatt_of_peak_and_of_envelope() {
        assert_eq!(tokens_per_s_per_mw(3_750, 1, 2_000_000), Some(d("520.833")));
        assert_eq!(
            tokens_per_s_per_mw(3_750, 1, 100_000_000),
            Some(d("10.417"))
        );
        assert_eq!(tokens_per_s_per_mw(3_750, 24, 2_000_000), Some(d("21.701")));
        assert_eq!(tokens_per_s_per_mw(0, 1, 2_000_000), None);
        assert_eq!(tokens_per_s_per_mw(3_750, 0, 2_000_000), None);
        assert_eq!(tokens_per_s_per_mw(3_750, 1, 0), None);
    }

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

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
            ..Default::default()
        });
        assert_eq!(e.tokens_per_kwh, Some(Decimal::from(500_000)));
        assert_eq!(e.tokens_per_kwh_it, Some(Decimal::from(1_000_000)));
        // 7.2e6 J / 1e6 tokens = 7.2 J per token.
        assert_eq!(e.joules_per_token, Some(Decimal::new(72, 1)));
        assert_eq!(e.idle_fraction, Some(Decimal::new(25, 2)));
        assert_eq!((e.g_co2e_per_1k_tokens, e.sci_g_per_token), (None, None));
    }

    #[test]
    fn carbon_per_tokens_operational_and_sci() {
        // 2 kWh at 300 g/kWh = 600 g operational; 150 g embodied; 3,000 tokens.
        let t = EnergyTotals {
            total_mj: 2 * MJ_PER_KWH,
            tokens: 3_000,
            carbon_g: Some(d("600")),
            embodied_carbon_g: Some(d("150")),
            ..Default::default()
        };
        let e = efficiency(t);
        assert_eq!(e.g_co2e_per_1k_tokens, Some(d("200")));
        assert_eq!(e.sci_g_per_token, Some(d("0.25")));
        assert_eq!(e.sci_g_per_1k_tokens, Some(d("250")));
        // Rounded to their places: 1/3 g per token.
        assert_eq!(
            sci_g_per_token(Some(d("1")), Some(Decimal::ZERO), 3),
            Some(d("0.333333"))
        );
        assert_eq!(g_co2e_per_1k_tokens(Some(d("1")), 3), Some(d("333.333")));
        // Either part unknown: no SCI, while the operational figure stands.
        let partial = efficiency(EnergyTotals {
            embodied_carbon_g: None,
            ..t
        });
        assert_eq!(partial.sci_g_per_1k_tokens, None);
        assert_eq!(partial.g_co2e_per_1k_tokens, Some(d("200")));
        assert_eq!(sci_g_per_token(Some(d("1")), Some(d("1")), 0), None);
    }

    #[test]
    fn intensity_is_over_the_covered_energy_and_hours_and_prices_round() {
        // 900 g over the 3 kWh a signal covered, of however many in all.
        assert_eq!(
            g_co2e_per_kwh(Some(d("900")), 3 * MJ_PER_KWH),
            Some(d("300"))
        );
        assert_eq!(g_co2e_per_kwh(Some(d("900")), 0), None);
        assert_eq!(g_co2e_per_kwh(None, MJ_PER_KWH), None);
        assert_eq!(gpu_hours(5_400_000), d("1.5"));
        assert_eq!(gpu_hours(1), Decimal::ZERO);
        assert_eq!(per_1m_tokens(d("0.12"), 40_000), Some(d("3")));
        assert_eq!(per_1m_tokens(d("1"), 0), None);
        assert_eq!(tokens_per_kwh(10, 0), None);
    }
}
