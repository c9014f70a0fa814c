//! A site's energy over a period and how well it was used (PUE, ITUE, TUE, idle energy,
//! allocated GPU time): the figures `/v1/usage`'s site rows and `/v1/metrics/efficiency`'s
//! rows both show, from the store's site totals.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::Serialize;
use utoipa::ToSchema;
use wattledger_domain::cfe;
use wattledger_domain::metrics::effectiveness;
use wattledger_domain::units::{kwh, ratio};
use wattledger_store::usage::SiteTotals;

#[derive(Debug, Serialize, ToSchema)]
pub struct SiteEfficiency {
    pub site: String,
    pub period: Option<DateTime<Utc>>,
    /// Facility energy, kWh; omitted for tenant tokens (it reveals other tenants' use).
    #[schema(value_type = Option<String>)]
    pub kwh: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub it_kwh: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub gpu_kwh: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub pue: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub itue: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub tue: Option<Decimal>,
    /// Idle energy as a share of the site's.
    #[schema(value_type = Option<String>)]
    pub idle_fraction: Option<Decimal>,
    /// Allocated GPU time as a share of the GPUs' time.
    #[schema(value_type = Option<String>)]
    pub allocated_gpu_fraction: Option<Decimal>,
    /// Hours of the period with the site's figures.
    pub hours: i64,
    #[serde(flatten)]
    pub carbon_free: SiteCarbonFree,
}

/// The site's hourly carbon-free energy score (24/7 CFE) over the period: Σ over hours of the
/// load matched by contracted clean energy and then by the grid's carbon-free share, over
/// Σ load, each hour on its own (no surplus carried between hours).
#[derive(Debug, Serialize, ToSchema)]
pub struct SiteCarbonFree {
    /// 0 to 1, to 4 places; absent where no hour's figure is known (no carbon-free signal
    /// for the site's grid region and no contract covering its load).
    #[schema(value_type = Option<String>)]
    pub cfe_score: Option<Decimal>,
    /// Hours whose energy was not all carbon-free, and hours whose figure is unknown.
    pub hours_not_carbon_free: i64,
    pub hours_cfe_unknown: i64,
    /// The energy of the known hours that was not carbon-free, and the clean energy
    /// delivered under contract, kWh; omitted for tenant tokens.
    #[schema(value_type = Option<String>)]
    pub not_carbon_free_kwh: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub contract_kwh: Option<Decimal>,
}

impl SiteEfficiency {
    /// The site's figures; its energy only if `show_energy`.
    pub fn of(s: &SiteTotals, show_energy: bool) -> Self {
        let eff = effectiveness(s.site_mj, s.it_mj, s.gpu_mj);
        let energy = |mj: i64| show_energy.then(|| kwh(mj).round_dp(6).normalize());
        SiteEfficiency {
            site: s.site.clone(),
            period: s.period,
            kwh: energy(s.site_mj),
            it_kwh: energy(s.it_mj),
            gpu_kwh: energy(s.gpu_mj),
            pue: eff.pue,
            itue: eff.itue,
            tue: eff.tue,
            idle_fraction: ratio(s.idle_mj, s.site_mj),
            allocated_gpu_fraction: ratio(s.allocated_gpu_ms, s.capacity_gpu_ms),
            hours: s.hours,
            carbon_free: SiteCarbonFree {
                cfe_score: cfe::score(s.carbon_free_mj, s.cfe_mj),
                hours_not_carbon_free: s.hours_not_carbon_free,
                hours_cfe_unknown: s.hours_cfe_unknown,
                not_carbon_free_kwh: energy(s.cfe_mj - s.carbon_free_mj),
                contract_kwh: energy(s.contract_mj),
            },
        }
    }
}
