//! The FOCUS 1.4 export.
//!
//! The rows are 1.2's (one per charge: a statement line's energy, and its GPU time where a
//! GPU-hour rate applied; list, contracted, effective and billed cost are what the statement
//! bills), with what 1.4 changed (model-1.4.json of FOCUS_Spec v1.4, kept as a test fixture):
//!
//! - `ProviderName` and `PublisherName` are gone (deprecated in 1.3, removed in 1.4). The
//!   organisation running the cluster sells the service, hosts it and invoices it, so it is
//!   `ServiceProviderName`, `HostProviderName` and `InvoiceIssuerName` alike.
//! - `InvoiceDetailId` names the row within its statement (`InvoiceId`): `L` and the line
//!   number, and `-gpu-time` for a line's GPU-time row (`-gpu-time-2` for its second device
//!   model's, where it ran on several).
//! - Quantities belong to a SKU price: `ConsumedQuantity`, `PricingQuantity` and
//!   `PricingCategory` MUST be null when `SkuPriceId` is, and not null on usage. The SKU
//!   prices are the close's price list ([`crate::chargeback::prices`]): per site and month,
//!   energy per kWh (`Dynamic`: it follows the price of every step) and GPU time per
//!   GPU-hour of each device model (`Standard`). A usage row's quantity is its line's kWh, or
//!   its GPU-hours on the row's device model (`x_DeviceModel`); its list and contracted cost
//!   are that quantity at the row's price, exactly (`ListCost` = `ListUnitPrice` ×
//!   `PricingQuantity`, as FOCUS requires); its effective and billed cost are what the
//!   statement bills, the line's own cost. Every line with GPU time has a GPU-time row per
//!   device model it ran on (and, under the proportional idle policy, per model whose idle
//!   time's price it carries, with no hours), at a price of 0 where no rate applied, so summing
//!   `ConsumedQuantity` by unit gives the month's kWh and GPU-hours. A correction or a
//!   credit has no SKU price (its month, or no usage), so no quantities: their kWh are in
//!   `x_EnergyKWh`.
//! - The allocation columns carry how a line's energy reached its tenant: wattledger is a
//!   data generator that splits shared energy itself (GPU steps by share, node and facility
//!   overhead by IT energy, idle by the site's policy, a shared endpoint's energy by weighted
//!   tokens, a grid event's credit by energy moved). The origin charge is a site's metered
//!   energy for the month; each energy row is an allocated part of it, its
//!   `AllocatedRatio` its share of that energy (the quantity wattledger splits; its cost
//!   follows step by step), the ratios of a site adding up to exactly 1. The idle energy the
//!   site gives its platform tenant is the origin's unallocated part: allocated by method, to
//!   no resource. GPU time at a rate is the job's own allocation, split from nothing: its
//!   row has no allocation columns.
//!
//! Energy, carbon and tokens are not FOCUS columns in 1.4, so they are `x_` columns. Carbon
//! is location-based (the grid's average intensity): the ledger holds no market-based
//! figure, so none is exported. Tokens stay beside the energy they were counted against:
//! FOCUS's AI work after 1.4 puts tokens in `ConsumedQuantity` only for charges priced per
//! token, and wattledger prices energy, so the tokens are `x_InputTokens`/`x_OutputTokens`
//! (the names of the token meters in that work) and the model `x_Model`. Badput and the
//! hourly carbon-free energy (`crate::badput`, `crate::cfe`) are `x_` columns too.

use super::{description, service, time};
use crate::cfe;
use crate::chargeback::csv::{fixed, row, text};
use crate::chargeback::prices::{Meter, PriceList, SkuPrice, UNIT_PRICE_DP};
use crate::chargeback::statement::{minor_units, GpuTimePart};
use crate::chargeback::{Close, Line, LineClass, Statement};
use crate::units::kwh;
use rust_decimal::Decimal;
use std::collections::BTreeMap;

/// One row of the export: a statement line's energy (or credit), or its GPU time on one
/// device model.
pub struct Charge<'a> {
    close: &'a Close,
    statement: &'a Statement,
    line: &'a Line,
    /// The GPU time the row is for; `None` on the energy (or credit) row.
    part: Option<&'a GpuTimePart>,
    /// The part's number among the line's, where it has several (1-based).
    part_no: Option<usize>,
    /// The row's SKU price, looked up once ([`Charge::sku_price`]).
    price: Option<&'a SkuPrice>,
    /// The energy row's share of its site's metered energy in the month; `None` for an
    /// adjustment or a credit, which are no part of this month's metered energy.
    ratio: Option<Decimal>,
}

/// How a column's cell is written for a charge.
type Cell = fn(&Charge) -> String;

/// The columns in order, each with its cell: FOCUS columns first (alphabetical), then the
/// custom `x_` columns, as FOCUS requires. A new `x_` column is one more line at the end.
pub const COLUMNS: [(&str, Cell); 57] = [
    ("AllocatedMethodDetails", |c| c.method_details()),
    ("AllocatedMethodId", |c| {
        c.allocated(|l| l.key.class.allocation_method().as_str().to_owned())
    }),
    ("AllocatedResourceId", |c| {
        c.allocated_resource(|_, l| text(&resource_id(l)))
    }),
    ("AllocatedResourceName", |c| {
        c.allocated_resource(|c, l| text(&c.resource_name(l)))
    }),
    ("AllocatedTags", |c| c.allocated_resource(|_, l| tags(l))),
    ("BilledCost", |c| c.cost()),
    ("BillingAccountId", |c| text(&c.statement.tenant)),
    ("BillingAccountName", |c| {
        text(&c.close.directory.tenant_name(&c.statement.tenant))
    }),
    ("BillingCurrency", |c| c.statement.currency.clone()),
    ("BillingPeriodEnd", |c| time(c.close.month.end())),
    ("BillingPeriodStart", |c| time(c.close.month.start())),
    ("ChargeCategory", |c| {
        if c.credit() { "Credit" } else { "Usage" }.to_owned()
    }),
    ("ChargeClass", |c| {
        if c.correction() { "Correction" } else { "" }.to_owned()
    }),
    ("ChargeDescription", |c| c.description()),
    ("ChargeFrequency", |c| {
        if c.credit() {
            "One-Time"
        } else {
            "Usage-Based"
        }
        .to_owned()
    }),
    ("ChargePeriodEnd", |c| time(c.line.key.period.end())),
    ("ChargePeriodStart", |c| time(c.line.key.period.start())),
    ("ConsumedQuantity", |c| c.quantity()),
    ("ConsumedUnit", |c| c.priced(|p| p.meter.unit().to_owned())),
    ("ContractedCost", |c| c.list_cost()),
    ("ContractedUnitPrice", |c| c.unit_price()),
    ("EffectiveCost", |c| c.cost()),
    ("HostProviderName", |c| text(&c.close.issuer.name)),
    ("InvoiceDetailId", |c| {
        // `L` keeps it text: a bare number is read as one, and FOCUS wants a String.
        let suffix = match (c.part, c.part_no) {
            (None, _) => String::new(),
            (Some(_), None) => "-gpu-time".to_owned(),
            (Some(_), Some(k)) => format!("-gpu-time-{k}"),
        };
        format!("L{}{suffix}", c.line.no)
    }),
    ("InvoiceId", |c| c.statement.number.clone()),
    ("InvoiceIssuerName", |c| text(&c.close.issuer.name)),
    ("ListCost", |c| c.list_cost()),
    ("ListUnitPrice", |c| c.unit_price()),
    ("PricingCategory", |c| {
        c.priced(|p| p.meter.category().to_owned())
    }),
    ("PricingQuantity", |c| c.quantity()),
    ("PricingUnit", |c| c.priced(|p| p.meter.unit().to_owned())),
    ("RegionId", |c| text(&c.line.key.site)),
    ("RegionName", |c| {
        text(&c.close.directory.site(&c.line.key.site).0)
    }),
    ("ServiceCategory", |_| "AI and Machine Learning".to_owned()),
    ("ServiceName", |c| service(c.line.key.class).0.to_owned()),
    ("ServiceProviderName", |c| text(&c.close.issuer.name)),
    ("ServiceSubcategory", |c| {
        service(c.line.key.class).1.to_owned()
    }),
    ("SkuId", |c| c.priced(|p| text(&p.sku_id()))),
    ("SkuMeter", |c| c.priced(|p| p.meter.as_str().to_owned())),
    // Optional; the price's basis (the site's month) is in its id.
    ("SkuPriceDetails", |_| String::new()),
    ("SkuPriceId", |c| c.priced(|p| text(&p.sku_price_id()))),
    ("x_StatementLine", |c| c.line.no.to_string()),
    ("x_GridRegion", |c| {
        text(&c.close.directory.site(&c.line.key.site).1)
    }),
    ("x_Model", |c| {
        text(c.line.key.model.as_deref().unwrap_or_default())
    }),
    ("x_JobClass", |c| c.line.key.class.as_str().to_owned()),
    ("x_EnergyMillijoules", |c| {
        c.energy(|l| l.amounts.energy_mj.to_string())
    }),
    ("x_EnergyKWh", |c| c.energy(|l| fixed(l.energy_kwh, 6))),
    ("x_CarbonLocationBasedKgCO2e", |c| {
        c.energy(|l| kg(l.amounts.carbon_g))
    }),
    ("x_EmbodiedCarbonKgCO2e", |c| {
        c.energy(|l| kg(l.amounts.embodied_g))
    }),
    ("x_InputTokens", |c| {
        c.energy(|l| l.amounts.prompt_tokens.to_string())
    }),
    ("x_OutputTokens", |c| {
        c.energy(|l| l.amounts.generated_tokens.to_string())
    }),
    ("x_GpuHours", |c| c.energy(|l| fixed(l.gpu_hours, 4))),
    // What the energy was worth: its badput (spent after a job's last checkpoint before it
    // failed) and its hourly carbon-free part with the score over the hours that have one.
    ("x_BadputMillijoules", |c| {
        c.energy(|l| l.amounts.badput_mj.to_string())
    }),
    ("x_BadputKWh", |c| {
        c.energy(|l| fixed(kwh(l.amounts.badput_mj), 6))
    }),
    ("x_CarbonFreeKWh", |c| {
        c.energy(|l| fixed(kwh(l.amounts.carbon_free_mj), 6))
    }),
    ("x_CarbonFreeEnergyScore", |c| {
        c.energy(|l| {
            cfe::score(l.amounts.carbon_free_mj, l.amounts.cfe_mj)
                .map_or_else(String::new, |f| fixed(f, 4))
        })
    }),
    // The device model a GPU-time row's hours ran on; empty where it was not reported.
    ("x_DeviceModel", |c| {
        c.part
            .map(|p| text(p.device_model.as_deref().unwrap_or_default()))
            .unwrap_or_default()
    }),
];

pub fn render(close: &Close) -> String {
    let mut out = String::new();
    row(&mut out, COLUMNS.iter().map(|(name, _)| (*name).to_owned()));
    let ratios = ratios(close);
    let prices = PriceList::of(close);
    for (si, s) in close.statements.iter().enumerate() {
        for (li, l) in s.lines.iter().enumerate() {
            let mut charge = Charge {
                close,
                statement: s,
                line: l,
                part: None,
                part_no: None,
                price: None,
                ratio: ratios.get(&(si, li)).copied(),
            };
            charge.price = charge.sku_price(&prices, Meter::Energy);
            row(&mut out, COLUMNS.iter().map(|(_, cell)| cell(&charge)));
            let parts = l.gpu_time_parts();
            for (k, part) in parts.iter().enumerate() {
                let mut charge = Charge {
                    part: Some(part),
                    part_no: (parts.len() > 1).then_some(k + 1),
                    ..charge
                };
                charge.price = charge.sku_price(&prices, Meter::GpuTime);
                let billed = !part.billed_gpu_time_cost.is_zero() || !part.gpu_time_cost.is_zero();
                if billed || (part.gpu_ms != 0 && charge.price.is_some()) {
                    row(&mut out, COLUMNS.iter().map(|(_, cell)| cell(&charge)));
                }
            }
        }
    }
    out
}

/// A line's place in a close: (statement, line), as indexes.
type LineAt = (usize, usize);

/// Each of this month's energy lines' share of its site's metered energy (the lines of a
/// site are that energy, to the mJ: the close reconciled them), split by largest remainder
/// in billionths so that a site's ratios add up to exactly 1. Keyed by (statement, line).
fn ratios(close: &Close) -> BTreeMap<LineAt, Decimal> {
    const PARTS: i64 = 1_000_000_000;
    let mut by_site: BTreeMap<&str, Vec<(LineAt, i64)>> = BTreeMap::new();
    for (si, s) in close.statements.iter().enumerate() {
        for (li, l) in s.lines.iter().enumerate() {
            if !l.is_adjustment(close.month) && l.key.class != LineClass::GridCredit {
                by_site
                    .entry(&l.key.site)
                    .or_default()
                    .push(((si, li), l.amounts.energy_mj));
            }
        }
    }
    let mut ratios = BTreeMap::new();
    for lines in by_site.values() {
        // A month's usage is never negative; were it, there would be no share to state.
        let Ok(weights) = lines
            .iter()
            .map(|(_, mj)| u128::try_from(*mj))
            .collect::<Result<Vec<u128>, _>>()
        else {
            continue;
        };
        if weights.iter().sum::<u128>() == 0 {
            continue;
        }
        let parts = crate::split::split(PARTS, &weights);
        for ((key, _), part) in lines.iter().zip(parts) {
            ratios.insert(*key, Decimal::new(part, 9));
        }
    }
    ratios
}

impl Charge<'_> {
    fn credit(&self) -> bool {
        self.line.key.class == LineClass::GridCredit
    }

    fn correction(&self) -> bool {
        self.line.is_adjustment(self.close.month)
    }

    /// The line's SKU price of `meter`: its site's for the month; none for a correction (its
    /// month published its own) or a credit.
    fn sku_price<'p>(&self, prices: &'p PriceList, meter: Meter) -> Option<&'p SkuPrice> {
        if self.credit() || self.correction() {
            return None;
        }
        let device = self.part.and_then(|p| p.device_model.as_deref());
        prices.get(meter, &self.line.key.site, device, &self.line.key.currency)
    }

    fn gpu_time(&self) -> bool {
        self.part.is_some()
    }

    /// A column of the row's SKU price: null where the row has none.
    fn priced(&self, cell: impl FnOnce(&SkuPrice) -> String) -> String {
        self.price.map(cell).unwrap_or_default()
    }

    /// The row's quantity as written (kWh to 6 places, GPU-hours to 4: the statement's),
    /// with a price.
    fn priced_quantity(&self) -> Option<(&SkuPrice, Decimal, u32)> {
        let (quantity, dp) = if let Some(part) = self.part {
            (part.gpu_hours, 4)
        } else {
            (self.line.energy_kwh, 6)
        };
        self.price.map(|p| (p, quantity.round_dp(dp), dp))
    }

    fn quantity(&self) -> String {
        self.priced_quantity()
            .map(|(_, q, dp)| fixed(q, dp))
            .unwrap_or_default()
    }

    fn unit_price(&self) -> String {
        self.priced(|p| fixed(p.unit_price, UNIT_PRICE_DP))
    }

    /// List (and contracted) cost: the quantity at the site's price, exactly as the two
    /// columns written multiply; without a price, what the row bills.
    fn list_cost(&self) -> String {
        match self.priced_quantity() {
            Some((p, q, dp)) => fixed(p.unit_price * q, UNIT_PRICE_DP + dp),
            None => self.cost(),
        }
    }

    /// What the row bills, in the currency's minor unit.
    fn cost(&self) -> String {
        let cost = if let Some(part) = self.part {
            part.billed_gpu_time_cost
        } else {
            self.line.billed_energy_cost
        };
        fixed(cost, minor_units(&self.statement.currency))
    }

    fn description(&self) -> String {
        let kind = match (self.credit(), self.part) {
            (true, _) => "Credit".to_owned(),
            (false, Some(p)) => match &p.device_model {
                Some(device) => format!("GPU time on {device}"),
                None => "GPU time".to_owned(),
            },
            (false, None) => "Energy".to_owned(),
        };
        let site_name = text(&self.close.directory.site(&self.line.key.site).0);
        let late = if self.correction() {
            " (late data, billed as a correction)"
        } else {
            ""
        };
        format!(
            "{kind} for {} at {site_name}, {}{late}",
            description(self.line),
            self.line.key.period
        )
    }

    /// A figure of the line's energy: on its energy (or credit) row, not on its GPU-time row,
    /// so that summing a column counts each line once.
    fn energy(&self, figure: impl FnOnce(&Line) -> String) -> String {
        if self.gpu_time() {
            String::new()
        } else {
            figure(self.line)
        }
    }

    /// An allocation column: on the rows wattledger split from a shared whole (every energy
    /// and credit row), null on GPU time, which no split made.
    fn allocated(&self, cell: impl FnOnce(&Line) -> String) -> String {
        self.energy(cell)
    }

    /// An allocated resource's column: null, too, on the origin's unallocated part (idle
    /// energy no job used, which the site gives its platform tenant).
    fn allocated_resource(&self, cell: impl FnOnce(&Self, &Line) -> String) -> String {
        if self.line.key.class.is_unallocated() {
            String::new()
        } else {
            self.allocated(|l| cell(self, l))
        }
    }

    /// FOCUS's allocation-details object: the row's share of its origin charge and the
    /// quantity that share was measured in.
    fn method_details(&self) -> String {
        match self.ratio {
            Some(ratio) if !self.gpu_time() => format!(
                r#"{{"Elements":[{{"AllocatedRatio":{},"UsageQuantity":{},"UsageUnit":"kWh"}}]}}"#,
                fixed(ratio, 9),
                fixed(self.line.energy_kwh, 6)
            ),
            _ => String::new(),
        }
    }

    fn resource_name(&self, l: &Line) -> String {
        let tenant = self.close.directory.tenant_name(&self.statement.tenant);
        format!("{tenant}: {}", description(l))
    }
}

/// The allocated resource: the tenant's work of the line's class (and model), as
/// `tenant/class[/model]`.
fn resource_id(l: &Line) -> String {
    let mut id = format!("{}/{}", l.key.tenant, l.key.class.as_str());
    if let Some(m) = &l.key.model {
        id.push('/');
        id.push_str(m);
    }
    id
}

/// The allocated resource's tags, under wattledger's own `wattledger/` key prefix (FOCUS
/// wants a data generator's tags prefixed).
fn tags(l: &Line) -> String {
    let mut tags = BTreeMap::from([
        ("wattledger/job-class", l.key.class.as_str()),
        ("wattledger/tenant", l.key.tenant.as_str()),
    ]);
    if let Some(m) = &l.key.model {
        tags.insert("wattledger/model", m);
    }
    serde_json::to_string(&tags).expect("string tags serialise")
}

fn kg(g: Decimal) -> String {
    fixed(g / Decimal::ONE_THOUSAND, 6)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chargeback::focus::tests::{sample, sample_with_devices};

    /// The sample's rows, split into cells, by column name.
    fn rows(close: &Close) -> Vec<BTreeMap<&'static str, String>> {
        let out = render(close);
        let mut lines = out.split("\r\n").filter(|r| !r.is_empty());
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let names: Vec<&str> = COLUMNS.iter().map(|(n, _)| *n).collect();
        assert_eq!(header, names);
        lines
            .map(|l| {
                let cells = split_csv(l);
                assert_eq!(cells.len(), COLUMNS.len(), "{l}");
                names.iter().copied().zip(cells).collect()
            })
            .collect()
    }

    fn split_csv(line: &str) -> Vec<String> {
        let mut fields = vec![String::new()];
        let mut quoted = false;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, quoted) {
                ('"', true) if chars.peek() == Some(&'"') => {
                    chars.next();
                    fields.last_mut().unwrap().push('"');
                }
                ('"', _) => quoted = !quoted,
                (',', false) => fields.push(String::new()),
                (c, _) => fields.last_mut().unwrap().push(c),
            }
        }
        fields
    }

    #[test]
    fn the_columns_are_1_4s_and_custom_ones_come_last() {
        let names: Vec<&str> = COLUMNS.iter().map(|(n, _)| *n).collect();
        for gone in ["ProviderName", "PublisherName"] {
            assert!(!names.contains(&gone), "{gone} was removed in 1.4");
        }
        for new in ["ServiceProviderName", "HostProviderName", "InvoiceDetailId"] {
            assert!(names.contains(&new), "{new}");
        }
        let first_custom = names.iter().position(|n| n.starts_with("x_")).unwrap();
        assert!(names[first_custom..].iter().all(|n| n.starts_with("x_")));
        let mut focus = names[..first_custom].to_vec();
        focus.sort();
        assert_eq!(focus, names[..first_custom], "FOCUS columns alphabetical");
    }

    #[test]
    fn allocation_follows_the_lines_and_a_sites_ratios_make_one() {
        let rows = rows(&sample());
        // acme training energy + GPU time, idle share + its GPU time, September's
        // correction; platform + its GPU time.
        assert_eq!(rows.len(), 7);
        let (train, gpu, idle, late, platform) = (&rows[0], &rows[1], &rows[2], &rows[4], &rows[5]);
        assert_eq!(train["AllocatedMethodId"], "metered-gpu-share");
        assert_eq!(train["AllocatedResourceId"], "acme/training/llama-70b");
        assert_eq!(
            train["AllocatedResourceName"],
            "Acme Research: training jobs, model llama-70b"
        );
        assert_eq!(
            train["AllocatedTags"],
            r#"{"wattledger/job-class":"training","wattledger/model":"llama-70b","wattledger/tenant":"acme"}"#
        );
        // Frankfurt's month: 7.2e12 mJ of training and 3.6e11 mJ of idle share, 20 : 1.
        assert_eq!(
            train["AllocatedMethodDetails"],
            r#"{"Elements":[{"AllocatedRatio":0.952380952,"UsageQuantity":2000.000000,"UsageUnit":"kWh"}]}"#
        );
        assert!(idle["AllocatedMethodDetails"].contains(r#""AllocatedRatio":0.047619048,"#));
        assert_eq!(idle["AllocatedMethodId"], "idle-proportional-to-it-energy");
        // GPU time is the job's own: no split, no allocation columns, no energy figures.
        assert_eq!(
            (gpu["InvoiceDetailId"].as_str(), gpu["BilledCost"].as_str()),
            ("L1-gpu-time", "1200.50")
        );
        for c in [
            "AllocatedMethodId",
            "AllocatedMethodDetails",
            "AllocatedResourceId",
            "AllocatedTags",
            "x_EnergyKWh",
            "x_InputTokens",
        ] {
            assert_eq!(gpu[c], "", "{c}");
        }
        // A correction is allocated as its line was, with no share of this month's energy.
        assert_eq!(late["ChargeClass"], "Correction");
        assert_eq!(late["AllocatedMethodId"], "metered-gpu-share");
        assert_eq!(late["AllocatedMethodDetails"], "");
        // The platform's idle energy is Ashburn's unallocated part: a method, no resource,
        // and all of Ashburn's energy.
        assert_eq!(platform["AllocatedMethodId"], "idle-to-platform-tenant");
        assert_eq!(platform["AllocatedResourceId"], "");
        assert_eq!(platform["AllocatedResourceName"], "");
        assert_eq!(platform["AllocatedTags"], "");
        assert!(platform["AllocatedMethodDetails"].contains(r#""AllocatedRatio":1.000000000,"#));
        // The organisation running the cluster provides, hosts and invoices.
        for c in [
            "ServiceProviderName",
            "HostProviderName",
            "InvoiceIssuerName",
        ] {
            assert_eq!(train[c], "Example GPU Platform");
        }
        assert_eq!(train["InvoiceDetailId"], "L1");
        assert_eq!(train["x_CarbonLocationBasedKgCO2e"], "720.000000");
        assert_eq!(
            (
                train["x_InputTokens"].as_str(),
                train["x_OutputTokens"].as_str()
            ),
            ("7200000", "1800000")
        );
    }

    #[test]
    fn usage_rows_carry_their_quantity_at_the_sites_price() {
        let rows = rows(&sample());
        let (train, gpu, idle_gpu, late, platform_gpu) =
            (&rows[0], &rows[1], &rows[3], &rows[4], &rows[6]);
        let cells = |r: &BTreeMap<&str, String>, names: &[&str]| -> Vec<String> {
            names.iter().map(|n| r[n].clone()).collect()
        };
        let sku = [
            "SkuId",
            "SkuPriceId",
            "SkuMeter",
            "PricingCategory",
            "PricingUnit",
            "ConsumedUnit",
        ];
        assert_eq!(
            cells(train, &sku),
            [
                "energy/fra",
                "energy/fra/2026-10/EUR",
                "Energy",
                "Dynamic",
                "kWh",
                "kWh"
            ]
        );
        // 2,000 kWh at Frankfurt's October price (463.123457 EUR for 2,100 kWh): the list
        // cost is the product, exactly; the line bills its own step-by-step cost.
        let costs = [
            "PricingQuantity",
            "ConsumedQuantity",
            "ListUnitPrice",
            "ContractedUnitPrice",
            "ListCost",
            "ContractedCost",
            "EffectiveCost",
            "BilledCost",
        ];
        assert_eq!(
            cells(train, &costs),
            [
                "2000.000000",
                "2000.000000",
                "0.220535",
                "0.220535",
                "441.070000000000",
                "441.070000000000",
                "441.12",
                "441.12"
            ]
        );
        assert_eq!(
            cells(gpu, &sku)[..4],
            [
                "gpu-time/fra",
                "gpu-time/fra/2026-10/EUR",
                "GPU Time",
                "Standard"
            ]
        );
        assert_eq!(gpu["PricingUnit"], "GPU-Hours");
        assert_eq!(
            cells(gpu, &costs[..5]),
            [
                "2857.1429",
                "2857.1429",
                "0.400167",
                "0.400167",
                "1143.3343028643"
            ]
        );
        // The idle share's GPU time had no rate: a quantity at the site's price, billing
        // nothing of its own.
        assert_eq!(idle_gpu["PricingQuantity"], "142.8571");
        assert_eq!(idle_gpu["BilledCost"], "0.00");
        // Ashburn's platform GPU time: no rate anywhere at the site, a price of 0.
        assert_eq!(
            cells(platform_gpu, &["ListUnitPrice", "ListCost"]),
            ["0.000000", "0.0000000000"]
        );
        // A correction belongs to September's prices: no SKU, no quantity.
        for c in sku.iter().chain(&costs[..4]) {
            assert_eq!(late[*c], "", "{c}");
        }
        assert_eq!(late["ListCost"], late["BilledCost"]);
    }

    #[test]
    fn a_line_on_two_device_models_has_a_gpu_time_row_for_each() {
        let close = sample_with_devices();
        let rows = rows(&close);
        let gpu: Vec<&BTreeMap<&str, String>> = rows
            .iter()
            .filter(|r| {
                r["BillingAccountId"] == "acme" && r["InvoiceDetailId"].starts_with("L1-gpu-time")
            })
            .collect();
        let cells = |r: &BTreeMap<&str, String>, names: &[&str]| -> Vec<String> {
            names.iter().map(|n| r[n].clone()).collect()
        };
        let names = [
            "InvoiceDetailId",
            "x_DeviceModel",
            "SkuPriceId",
            "PricingQuantity",
            "ListUnitPrice",
            "ListCost",
            "BilledCost",
        ];
        assert_eq!(
            cells(gpu[0], &names),
            [
                "L1-gpu-time-1",
                "NVIDIA H100 80GB HBM3",
                "gpu-time/fra/NVIDIA H100 80GB HBM3/2026-10/EUR",
                "2000.0000",
                "0.400000",
                "800.0000000000",
                "800.00"
            ]
        );
        // 857.142856944… hours: floored to 857.1428 and given the line's last 0.0001 (the
        // line states 2,857.1429), so the rows add up to the line.
        assert_eq!(
            cells(gpu[1], &names),
            [
                "L1-gpu-time-2",
                "NVIDIA H200",
                "gpu-time/fra/NVIDIA H200/2026-10/EUR",
                "857.1429",
                "0.467250",
                "400.5000200250",
                "400.50"
            ]
        );
        assert_eq!(gpu.len(), 2);
        assert!(gpu[1]["ChargeDescription"].starts_with("GPU time on NVIDIA H200 for "));
        // The energy row names no device model; the idle share's hours (no model kept) are
        // the unreported model's row, as before device models were kept.
        assert_eq!(rows[0]["x_DeviceModel"], "");
        let idle_gpu = rows
            .iter()
            .find(|r| r["InvoiceDetailId"] == "L2-gpu-time")
            .unwrap();
        assert_eq!(
            cells(idle_gpu, &["x_DeviceModel", "SkuId", "PricingQuantity"]),
            ["", "gpu-time/fra", "142.8571"]
        );
        // Summing by unit still gives the statements' GPU-hours.
        let sum: Decimal = rows
            .iter()
            .filter(|r| r["ConsumedUnit"] == "GPU-Hours")
            .map(|r| r["ConsumedQuantity"].parse::<Decimal>().unwrap())
            .sum();
        let usage = close.statements.iter().flat_map(|s| s.usage(close.month));
        assert_eq!(sum, usage.map(|l| l.gpu_hours).sum::<Decimal>());
    }

    /// The quantity rules focus-validator 2.2.1 cannot check on this file (see the API
    /// test's set-aside list), by their text, on a close with a correction.
    #[test]
    fn consumed_quantity_is_null_exactly_where_focus_1_4_says() {
        let rows = rows(&sample());
        assert!(rows.iter().any(|r| r["ChargeClass"] == "Correction"));
        for r in &rows {
            let usage = r["ChargeCategory"] == "Usage";
            let correction = r["ChargeClass"] == "Correction";
            let priced = !r["SkuPriceId"].is_empty();
            // C-004 (null unless Usage), C-006 (not null on Usage but a correction), C-009
            // (null without a SKU price); and so for PricingQuantity.
            assert_eq!(
                !r["ConsumedQuantity"].is_empty(),
                usage && !correction,
                "{r:?}"
            );
            assert_eq!(priced, usage && !correction, "{r:?}");
            assert_eq!(r["PricingQuantity"], r["ConsumedQuantity"]);
        }
    }

    #[test]
    fn summing_consumed_quantity_by_unit_gives_the_months_kwh_and_gpu_hours() {
        let close = sample();
        let rows = rows(&close);
        let sum = |unit: &str| -> Decimal {
            rows.iter()
                .filter(|r| r["ConsumedUnit"] == unit)
                .map(|r| r["ConsumedQuantity"].parse::<Decimal>().unwrap())
                .sum()
        };
        let usage = || close.statements.iter().flat_map(|s| s.usage(close.month));
        assert_eq!(sum("kWh"), usage().map(|l| l.energy_kwh).sum::<Decimal>());
        assert_eq!(
            sum("GPU-Hours"),
            usage().map(|l| l.gpu_hours).sum::<Decimal>()
        );
        assert_eq!(sum("kWh"), "2350".parse::<Decimal>().unwrap());
    }

    #[test]
    fn a_sites_ratios_add_up_to_exactly_one_however_they_round() {
        let mut close = sample();
        // Three equal lines at one site: thirds, by largest remainder.
        let line = close.statements[0].lines[0].clone();
        let mut lines = Vec::new();
        for (no, model) in [(1, "a"), (2, "b"), (3, "c")] {
            let mut l = line.clone();
            l.no = no;
            l.key.model = Some(model.into());
            lines.push(l);
        }
        close.statements[0].lines = lines;
        let ratios: Vec<Decimal> = ratios(&close)
            .into_iter()
            .filter(|((statement, _), _)| *statement == 0)
            .map(|(_, ratio)| ratio)
            .collect();
        assert_eq!(
            ratios,
            ["0.333333334", "0.333333333", "0.333333333"].map(|r| r.parse::<Decimal>().unwrap())
        );
        assert_eq!(ratios.iter().sum::<Decimal>(), Decimal::ONE);
    }
}
