//! The FOCUS 1.2 export (FinOps Open Cost and Usage Specification, CostAndUsage dataset).
//!
//! One row per charge: a statement line's energy, and its GPU time where a GPU-hour rate
//! applied. Costs are what the statement bills (no discounts, no commitments: list, contracted,
//! effective and billed cost are the same); energy is the consumed and priced quantity in kWh.
//! A line billing an earlier month is a `Correction` charged over that month (FOCUS
//! `ChargeClass`). FOCUS 1.2 has no energy, carbon or allocation-method column, so those are
//! `x_` custom columns. `InvoiceId` is the statement number: the document that bills the
//! tenant (the billing account) for the billing period.
//!
//! The FinOps Foundation validator (focus-validator 2.2.1, model 1.2.0.1) enforces the two
//! halves of InvoiceId's conditional nullability (C-004 "null when not invoiced", C-005 "not
//! null when invoiced") unconditionally, so every dataset fails one of them; the test that
//! runs it accepts exactly that one and proves the other half fails on the same rows nulled.

use super::csv::{fixed, row, text};
use super::statement::minor_units;
use super::{Close, LineClass};
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;

pub const COLUMNS: [&str; 42] = [
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ContractedCost",
    "EffectiveCost",
    "InvoiceId",
    "InvoiceIssuerName",
    "ListCost",
    "PricingCategory",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "RegionId",
    "RegionName",
    "ServiceCategory",
    "ServiceName",
    "ServiceSubcategory",
    "x_StatementLine",
    "x_GridRegion",
    "x_Site",
    "x_Model",
    "x_JobClass",
    "x_AllocationMethod",
    "x_EnergyMillijoules",
    "x_EnergyKWh",
    "x_OperationalCarbonKgCO2e",
    "x_EmbodiedCarbonKgCO2e",
    "x_PromptTokens",
    "x_GeneratedTokens",
    "x_GpuHours",
];

pub fn render(close: &Close) -> String {
    let mut out = String::new();
    row(&mut out, COLUMNS.iter().map(|c| (*c).to_owned()));
    let billing = (close.month.start(), close.month.end());
    let issuer = close.issuer.name.clone();
    for s in &close.statements {
        let dp = minor_units(&s.currency);
        let account = close.directory.tenant_name(&s.tenant);
        for l in &s.lines {
            let (site_name, region) = close.directory.site(&l.key.site);
            let correction = l.is_adjustment(close.month);
            let charge = (l.key.period.start(), l.key.period.end());
            let model = text(l.key.model.as_deref().unwrap_or_default());
            let (tenant, account, issuer) = (text(&s.tenant), text(&account), text(&issuer));
            let (site, site_name, region) = (text(&l.key.site), text(&site_name), text(&region));
            let what = match (l.key.class, &l.key.model) {
                (LineClass::IdleShare, _) => "idle capacity share".to_owned(),
                (LineClass::Platform, _) => "unallocated idle capacity".to_owned(),
                (LineClass::GridCredit, _) => "demand response".to_owned(),
                (c, Some(m)) => format!("{} jobs, model {m}", c.as_str()),
                (c, None) => format!("{} jobs", c.as_str()),
            };
            // A demand-response credit is a FOCUS `Credit`: one-time, no quantity consumed or
            // priced, no pricing category.
            let credit = l.key.class == LineClass::GridCredit;
            let common =
                |cost: Decimal, quantity: String, unit: &str, kind: &str, x: [String; 7]| {
                    let cost = fixed(cost, dp);
                    let (quantity, unit) = if credit {
                        (String::new(), "")
                    } else {
                        (quantity, unit)
                    };
                    let mut f = vec![
                        cost.clone(),
                        tenant.clone(),
                        account.clone(),
                        s.currency.clone(),
                        time(billing.1),
                        time(billing.0),
                        if credit { "Credit" } else { "Usage" }.to_owned(),
                        if correction { "Correction" } else { "" }.to_owned(),
                        format!(
                            "{kind} for {what} at {site_name}, {}{}",
                            l.key.period,
                            if correction {
                                " (late data, billed as a correction)"
                            } else {
                                ""
                            }
                        ),
                        if credit { "One-Time" } else { "Usage-Based" }.to_owned(),
                        time(charge.1),
                        time(charge.0),
                        quantity.clone(),
                        unit.to_owned(),
                        cost.clone(),
                        cost.clone(),
                        s.number.clone(),
                        issuer.clone(),
                        cost,
                        if credit { "" } else { "Standard" }.to_owned(),
                        quantity,
                        unit.to_owned(),
                        issuer.clone(),
                        issuer.clone(),
                        site.clone(),
                        site_name.clone(),
                        "AI and Machine Learning".to_owned(),
                        service(l.key.class).0.to_owned(),
                        service(l.key.class).1.to_owned(),
                        l.no.to_string(),
                        region.clone(),
                        site.clone(),
                        model.clone(),
                        l.key.class.as_str().to_owned(),
                        l.key.class.allocation_method().as_str().to_owned(),
                    ];
                    f.extend(x);
                    f
                };
            row(
                &mut out,
                common(
                    l.billed_energy_cost,
                    fixed(l.energy_kwh, 6),
                    "kWh",
                    if credit { "Credit" } else { "Energy" },
                    [
                        l.amounts.energy_mj.to_string(),
                        fixed(l.energy_kwh, 6),
                        fixed(l.amounts.carbon_g / Decimal::ONE_THOUSAND, 6),
                        fixed(l.amounts.embodied_g / Decimal::ONE_THOUSAND, 6),
                        l.amounts.prompt_tokens.to_string(),
                        l.amounts.generated_tokens.to_string(),
                        fixed(l.gpu_hours, 4),
                    ],
                ),
            );
            if !l.billed_gpu_time_cost.is_zero() || !l.amounts.gpu_time_cost.is_zero() {
                row(
                    &mut out,
                    common(
                        l.billed_gpu_time_cost,
                        fixed(l.gpu_hours, 4),
                        "Hours",
                        "GPU time",
                        Default::default(),
                    ),
                );
            }
        }
    }
    out
}

/// FOCUS ServiceName and its one ServiceSubcategory (the validator holds a service to one).
fn service(class: LineClass) -> (&'static str, &'static str) {
    match class {
        LineClass::Training => ("GPU Training", "Machine Learning"),
        LineClass::Inference => ("GPU Inference", "Generative AI"),
        _ => ("GPU Compute", "Other (AI and Machine Learning)"),
    }
}

/// FOCUS date/time: `YYYY-MM-DDTHH:mm:ssZ`.
fn time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::chargeback::statement::statements;
    use crate::chargeback::{Amounts, Directory, Issuer, LineKey, Month};

    /// A small close: two tenants at two sites in two currencies, a correction for the
    /// month before, GPU time at a rate, and an idle share.
    pub(crate) fn sample() -> Close {
        let month: Month = "2026-10".parse().unwrap();
        let key = |tenant: &str, site: &str, currency: &str, class, model: Option<&str>, period| {
            LineKey {
                tenant: tenant.into(),
                currency: currency.into(),
                site: site.into(),
                class,
                model: model.map(Into::into),
                period,
            }
        };
        let a = |mj: i64, cost: &str, gpu: &str| Amounts {
            energy_mj: mj,
            energy_cost: cost.parse().unwrap(),
            gpu_time_cost: gpu.parse().unwrap(),
            carbon_g: Decimal::new(mj / 10_000, 3),
            embodied_g: Decimal::new(mj / 50_000, 3),
            prompt_tokens: mj / 1_000_000,
            generated_tokens: mj / 4_000_000,
            gpu_ms: mj / 700,
        };
        let entries = vec![
            (
                key(
                    "acme",
                    "fra",
                    "EUR",
                    LineClass::Training,
                    Some("llama-70b"),
                    month,
                ),
                a(7_200_000_000_000, "441.123456", "1200.5"),
            ),
            (
                key("acme", "fra", "EUR", LineClass::IdleShare, None, month),
                a(360_000_000_000, "22.000001", "0"),
            ),
            (
                key(
                    "acme",
                    "fra",
                    "EUR",
                    LineClass::Inference,
                    Some("mistral, 7b \"instruct\""),
                    month.prev(),
                ),
                a(-3_600_000_000, "-0.21", "0"),
            ),
            (
                key("platform", "iad", "USD", LineClass::Platform, None, month),
                a(900_000_000_000, "20.5", "0"),
            ),
        ];
        let mut directory = Directory::default();
        directory
            .tenants
            .insert("acme".into(), "Acme Research".into());
        directory
            .tenants
            .insert("platform".into(), "Platform Engineering".into());
        directory
            .sites
            .insert("fra".into(), ("Frankfurt".into(), "DE".into()));
        directory
            .sites
            .insert("iad".into(), ("Ashburn".into(), "US-MIDA-PJM".into()));
        Close {
            month,
            version: 1,
            closed_at: month.end(),
            issuer: Issuer {
                name: "Example GPU Platform".into(),
            },
            statements: statements(month, 1, entries),
            reconciliation: Vec::new(),
            directory,
        }
    }

    #[test]
    fn one_row_per_charge_every_row_full() {
        let out = render(&sample());
        let rows: Vec<&str> = out.split("\r\n").filter(|r| !r.is_empty()).collect();
        // Header, acme: training energy + GPU time, idle share, correction; platform: one.
        assert_eq!(rows.len(), 1 + 5);
        // Every row has every column (descriptions are quoted, and hold no quote here).
        for r in &rows {
            let unquoted: String = r.split('"').step_by(2).collect();
            assert_eq!(unquoted.matches(',').count() + 1, COLUMNS.len(), "{r}");
        }
        assert!(rows[1].contains(",WL-2026-10-acme-EUR-v1,Example GPU Platform,"));
        assert!(rows[1].starts_with(
            "441.12,acme,Acme Research,EUR,2026-11-01T00:00:00Z,2026-10-01T00:00:00Z,Usage,,"
        ));
        assert!(rows[2].starts_with("1200.50,"));
        assert!(rows[4].contains(",Usage,Correction,"), "{}", rows[4]);
        assert!(
            rows[4].contains(",2026-10-01T00:00:00Z,2026-09-01T00:00:00Z,"),
            "{}",
            rows[4]
        );
        if let Ok(path) = std::env::var("WATTLEDGER_FOCUS_SAMPLE") {
            std::fs::write(path, &out).unwrap();
        }
    }
}
