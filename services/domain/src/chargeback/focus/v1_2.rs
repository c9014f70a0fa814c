//! The FOCUS 1.2 export, byte for byte as it was before FOCUS 1.4 was added beside it.
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

use super::{description, service, time};
use crate::chargeback::csv::{fixed, row, text};
use crate::chargeback::statement::minor_units;
use crate::chargeback::{Close, LineClass};
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
            let what = description(l);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chargeback::focus::tests::sample;

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
    }

    /// FOCUS 1.2 stays byte for byte what it was when 1.4 was added beside it: the SHA-256
    /// of the sample close's export as rendered before the change (finance tools that read
    /// 1.2 keep reading the same file).
    #[test]
    fn the_sample_export_is_byte_for_byte_as_before_1_4() {
        let out = render(&sample());
        assert_eq!(
            crate::chargeback::sha256_hex(out.as_bytes()),
            "afaf259e97b4833d47a5551229503ad7f1a7088ee5f65b61ed4a33e7c6a5eb64"
        );
    }
}
