//! A closed month's price list: what each site's energy, and its GPU time on each device
//! model, cost per unit that month, published with the close as SKU prices (FOCUS 1.4's
//! `SkuId`, `SkuPriceId`, `ListUnitPrice`, `ContractedUnitPrice`, `PricingUnit`,
//! `PricingCategory`).
//!
//! No single unit price made any line's cost: energy is priced step by step at the price
//! covering each step (a tariff, time of use, a day-ahead market), and GPU time at each
//! device model's rate, idle GPU time's share following the site's idle policy. What a
//! site's usage did cost per unit over the month is exact, though: its cost over its
//! quantity, over every line of the month at that site (every tenant's, the idle share and
//! the platform's). That average, to the ledger's millionth of the currency, is the month's
//! price: one SKU price per site and currency for energy, and one per site, device model and
//! currency for GPU time (the device model's rate where every GPU-hour of it was held; more
//! where its idle hours' price was spread over the held ones), the same for every billing
//! account. A line's list cost is its quantity at that price; what it bills is its own
//! cost, so the two differ by what the line's timing saved or cost against the site's
//! average, and a site's list costs add up to its billed costs to within rounding.
//!
//! A correction (energy of an earlier, already closed month) and a credit have no price
//! here: the month a correction's energy belongs to published its own.

use super::csv::{fixed, row, text};
use super::{sha256_hex, Close, Export, Month, MJ_PER_KWH, MS_PER_HOUR};
use crate::chargeback::LineClass;
use rust_decimal::{Decimal, RoundingStrategy};
use std::collections::BTreeMap;

crate::names::names! {
    /// What a SKU price is the price of: FOCUS's `SkuMeter`.
    pub enum Meter {
        /// Energy, per kWh.
        Energy = "Energy",
        /// GPU time, per GPU-hour.
        GpuTime = "GPU Time",
    }
}

impl Meter {
    /// The unit a quantity of this meter is priced in (FOCUS UnitFormat).
    pub fn unit(self) -> &'static str {
        match self {
            Meter::Energy => "kWh",
            Meter::GpuTime => "GPU-Hours",
        }
    }

    /// FOCUS's `PricingCategory`: energy follows a price that may change at any step
    /// (`Dynamic`); GPU time is billed at the agreed rate of its device model (`Standard`).
    pub fn category(self) -> &'static str {
        match self {
            Meter::Energy => "Dynamic",
            Meter::GpuTime => "Standard",
        }
    }

    /// The meter's quantity in integers per unit: mJ per kWh, ms per GPU-hour.
    fn per_unit(self) -> i64 {
        match self {
            Meter::Energy => MJ_PER_KWH,
            Meter::GpuTime => MS_PER_HOUR,
        }
    }

    /// The SKU's id prefix.
    fn key(self) -> &'static str {
        match self {
            Meter::Energy => "energy",
            Meter::GpuTime => "gpu-time",
        }
    }
}

/// Decimal places of a unit price: the ledger's millionth of the currency.
pub const UNIT_PRICE_DP: u32 = 6;

/// One site's price of one meter (on one device model, for GPU time) for a month, in one
/// currency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkuPrice {
    pub meter: Meter,
    pub site: String,
    /// GPU time's device model; `None` for energy, and for GPU time of no reported model or
    /// whose model the ledger did not keep (hours attributed before migration 0043: in a
    /// close frozen before it, all of a site's GPU time).
    pub device_model: Option<String>,
    pub currency: String,
    pub month: Month,
    /// Currency per unit, to [`UNIT_PRICE_DP`] places (half away from zero); zero for a
    /// site whose quantity was zero or not priced at all (GPU time without a rate), and for
    /// a month whose market prices averaged below zero (FOCUS holds a unit price to be
    /// non-negative; the lines still bill what they cost).
    pub unit_price: Decimal,
    /// The month's exact quantity (kWh or GPU-hours) and cost the price is the ratio of.
    pub quantity: Decimal,
    pub cost: Decimal,
}

impl SkuPrice {
    /// The product: a meter at a site (on a device model), whatever the month
    /// (`energy/fra-1`, `gpu-time/fra-1/NVIDIA H100 80GB HBM3`).
    pub fn sku_id(&self) -> String {
        match &self.device_model {
            Some(device) => format!("{}/{}/{device}", self.meter.key(), self.site),
            None => format!("{}/{}", self.meter.key(), self.site),
        }
    }

    /// This price of the product: `energy/fra-1/2026-10/EUR`.
    pub fn sku_price_id(&self) -> String {
        format!("{}/{}/{}", self.sku_id(), self.month, self.currency)
    }
}

/// What a price is keyed by: meter, site, device model and currency.
type Key = (Meter, String, Option<String>, String);

/// The month's prices, by meter, site, device model and currency.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PriceList(BTreeMap<Key, SkuPrice>);

impl PriceList {
    /// The prices of a close: every site's month of usage (its lines for the month itself,
    /// not corrections of earlier months or grid credits), cost over quantity.
    pub fn of(close: &Close) -> PriceList {
        // Exact sums: mJ and ms as integers (as a statement's totals are), cost at the
        // ledger's 1e-6.
        let mut sums: BTreeMap<Key, (i64, Decimal)> = BTreeMap::new();
        for s in &close.statements {
            for l in s.usage(close.month) {
                if l.key.class == LineClass::GridCredit {
                    continue;
                }
                let key = |meter, device: &Option<String>| {
                    let (site, currency) = (l.key.site.clone(), l.key.currency.clone());
                    (meter, site, device.clone(), currency)
                };
                let e = sums.entry(key(Meter::Energy, &None)).or_default();
                e.0 += l.amounts.energy_mj;
                e.1 += l.amounts.energy_cost;
                for part in l.gpu_time_parts().iter() {
                    let g = sums
                        .entry(key(Meter::GpuTime, &part.device_model))
                        .or_default();
                    g.0 += part.gpu_ms;
                    g.1 += part.gpu_time_cost;
                }
            }
        }
        let prices = sums
            .into_iter()
            .map(|((meter, site, device_model, currency), (units, cost))| {
                let (units, per) = (Decimal::from(units), Decimal::from(meter.per_unit()));
                let quantity = units / per;
                let unit_price = if units > Decimal::ZERO {
                    (cost * per / units)
                        .round_dp_with_strategy(
                            UNIT_PRICE_DP,
                            RoundingStrategy::MidpointAwayFromZero,
                        )
                        .max(Decimal::ZERO)
                } else {
                    Decimal::ZERO
                };
                let price = SkuPrice {
                    meter,
                    site: site.clone(),
                    device_model: device_model.clone(),
                    currency: currency.clone(),
                    month: close.month,
                    unit_price,
                    quantity,
                    cost,
                };
                ((meter, site, device_model, currency), price)
            })
            .collect();
        PriceList(prices)
    }

    pub fn get(
        &self,
        meter: Meter,
        site: &str,
        device_model: Option<&str>,
        currency: &str,
    ) -> Option<&SkuPrice> {
        let key = (
            meter,
            site.to_owned(),
            device_model.map(str::to_owned),
            currency.to_owned(),
        );
        self.0.get(&key)
    }

    pub fn iter(&self) -> impl Iterator<Item = &SkuPrice> {
        self.0.values()
    }
}

/// The price list's columns: FOCUS's names where FOCUS has the concept, then `x_` columns
/// with GPU time's device model and the month's quantity and cost each price is the ratio
/// of (both to the millionth: an hour of GPU time is not a whole number of them).
pub const COLUMNS: [&str; 15] = [
    "SkuId",
    "SkuPriceId",
    "SkuMeter",
    "PricingCategory",
    "PricingUnit",
    "PricingCurrency",
    "ListUnitPrice",
    "ContractedUnitPrice",
    "RegionId",
    "RegionName",
    "PriceListPeriodStart",
    "PriceListPeriodEnd",
    "x_DeviceModel",
    "x_MonthQuantity",
    "x_MonthCost",
];

/// The close's price list as CSV, one row per SKU price, in (meter, site, device model,
/// currency) order.
pub fn render(close: &Close) -> String {
    let mut out = String::new();
    row(&mut out, COLUMNS.iter().map(|c| (*c).to_owned()));
    for p in PriceList::of(close).iter() {
        let price = fixed(p.unit_price, UNIT_PRICE_DP);
        row(
            &mut out,
            [
                text(&p.sku_id()),
                text(&p.sku_price_id()),
                p.meter.as_str().to_owned(),
                p.meter.category().to_owned(),
                p.meter.unit().to_owned(),
                p.currency.clone(),
                price.clone(),
                price,
                text(&p.site),
                text(&close.directory.site(&p.site).0),
                super::focus::time(close.month.start()),
                super::focus::time(close.month.end()),
                text(p.device_model.as_deref().unwrap_or_default()),
                fixed(p.quantity, UNIT_PRICE_DP),
                fixed(p.cost, UNIT_PRICE_DP),
            ],
        );
    }
    out
}

/// The price list as a file: `wattledger-2026-10-v1-prices.csv`, rendered from the frozen
/// close (so the same close always gives the same bytes).
pub fn export(close: &Close) -> Export {
    let content = render(close).into_bytes();
    Export {
        format: FORMAT,
        file_name: format!("wattledger-{}-v{}-prices.csv", close.month, close.version),
        sha256: sha256_hex(&content),
        content,
    }
}

/// The export format's name in the API and the dashboard.
pub const FORMAT: &str = "prices";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chargeback::focus::tests::{sample, sample_with_devices};

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    #[test]
    fn a_sites_price_is_its_months_cost_over_its_quantity() {
        let prices = PriceList::of(&sample());
        let fra = prices.get(Meter::Energy, "fra", None, "EUR").unwrap();
        // Frankfurt's October: 2,000 kWh of training at 441.123456 and 100 kWh of idle
        // share at 22.000001; September's correction has no part in October's price.
        assert_eq!(fra.quantity, d("2100"));
        assert_eq!(fra.cost, d("463.123457"));
        // 0.22053497952…
        assert_eq!(fra.unit_price, d("0.220535"));
        assert_eq!(fra.sku_id(), "energy/fra");
        assert_eq!(fra.sku_price_id(), "energy/fra/2026-10/EUR");
        // GPU time: 1,200.50 for 10,799,999,999 ms (the idle share's hours at no rate).
        let gpu = prices.get(Meter::GpuTime, "fra", None, "EUR").unwrap();
        assert_eq!(gpu.unit_price, d("0.400167"));
        assert_eq!(
            (gpu.meter.unit(), gpu.meter.category()),
            ("GPU-Hours", "Standard")
        );
        let iad = prices.get(Meter::Energy, "iad", None, "USD").unwrap();
        assert_eq!((iad.quantity, iad.unit_price), (d("250"), d("0.082")));
        assert_eq!(prices.iter().count(), 4);
    }

    #[test]
    fn gpu_time_is_priced_per_device_model() {
        let prices = PriceList::of(&sample_with_devices());
        let gpu = |device: Option<&str>| prices.get(Meter::GpuTime, "fra", device, "EUR");
        // 2,000 H100 hours for 800.00: the model's rate, every hour of it held.
        let h100 = gpu(Some("NVIDIA H100 80GB HBM3")).unwrap();
        assert_eq!((h100.quantity, h100.unit_price), (d("2000"), d("0.4")));
        assert_eq!(h100.sku_id(), "gpu-time/fra/NVIDIA H100 80GB HBM3");
        assert_eq!(
            h100.sku_price_id(),
            "gpu-time/fra/NVIDIA H100 80GB HBM3/2026-10/EUR"
        );
        // 3,085,714,285 ms on H200s for 400.50: 0.46725000019… per hour.
        let h200 = gpu(Some("NVIDIA H200")).unwrap();
        assert_eq!(h200.unit_price, d("0.467250"));
        // The idle share's hours, which the ledger kept no device model of, are the
        // unreported model's, at no rate.
        let unreported = gpu(None).unwrap();
        assert_eq!(unreported.unit_price, d("0"));
        assert_eq!(unreported.sku_id(), "gpu-time/fra");
        assert_eq!(prices.iter().count(), 6);
        let out = render(&sample_with_devices());
        let h100_row = out.split("\r\n").find(|r| r.contains("H100")).unwrap();
        assert!(
            h100_row.contains(",NVIDIA H100 80GB HBM3,2000.000000,800.000000"),
            "{h100_row}"
        );
    }

    #[test]
    fn the_price_list_is_one_row_per_price_with_what_it_was_taken_from() {
        let out = render(&sample());
        let rows: Vec<&str> = out.split("\r\n").filter(|r| !r.is_empty()).collect();
        assert_eq!(rows[0], COLUMNS.join(","));
        assert_eq!(rows.len(), 1 + 4);
        assert_eq!(
            rows[1],
            "energy/fra,energy/fra/2026-10/EUR,Energy,Dynamic,kWh,EUR,0.220535,0.220535,fra,\
             Frankfurt,2026-10-01T00:00:00Z,2026-11-01T00:00:00Z,,2100.000000,463.123457"
        );
        assert!(rows[4].starts_with(
            "gpu-time/iad,gpu-time/iad/2026-10/USD,GPU Time,Standard,GPU-Hours,USD,0.000000,"
        ));
        // 10,799,999,999 ms of GPU time: 2,999.99999972… hours, to the millionth.
        assert!(rows[3].ends_with(",3000.000000,1200.500000"), "{}", rows[3]);
    }
}
