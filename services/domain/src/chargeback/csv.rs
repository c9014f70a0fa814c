//! The statement CSV: one row per statement line, columns documented in the README.
//!
//! Amounts are printed at a fixed scale (exact ledger amounts to 6 places, billed amounts to
//! the currency's minor unit) so that the same close always gives the same bytes.

use super::statement::minor_units;
use super::Close;
use rust_decimal::Decimal;

pub const COLUMNS: [&str; 24] = [
    "statement",
    "billing_period",
    "tenant",
    "tenant_name",
    "currency",
    "line",
    "kind",
    "usage_period",
    "site",
    "site_name",
    "region",
    "model",
    "job_class",
    "allocation_method",
    "energy_mj",
    "energy_kwh",
    "energy_cost",
    "gpu_time_cost",
    "billed_cost",
    "carbon_kgco2e",
    "embodied_kgco2e",
    "prompt_tokens",
    "generated_tokens",
    "gpu_hours",
];

/// The close's statements (a tenant's own, when the close was read for a tenant).
pub fn render(close: &Close) -> String {
    let mut out = String::new();
    row(&mut out, COLUMNS.iter().map(|c| (*c).to_owned()));
    for s in &close.statements {
        let dp = minor_units(&s.currency);
        let tenant_name = close.directory.tenant_name(&s.tenant);
        for l in &s.lines {
            let (site_name, region) = close.directory.site(&l.key.site);
            row(
                &mut out,
                [
                    s.number.clone(),
                    close.month.to_string(),
                    text(&s.tenant),
                    text(&tenant_name),
                    s.currency.clone(),
                    l.no.to_string(),
                    if l.is_adjustment(close.month) {
                        "adjustment"
                    } else {
                        "usage"
                    }
                    .to_owned(),
                    l.key.period.to_string(),
                    text(&l.key.site),
                    text(&site_name),
                    text(&region),
                    text(l.key.model.as_deref().unwrap_or_default()),
                    l.key.class.as_str().to_owned(),
                    l.key.class.allocation_method().as_str().to_owned(),
                    l.amounts.energy_mj.to_string(),
                    fixed(l.energy_kwh, 6),
                    fixed(l.amounts.energy_cost, 6),
                    fixed(l.amounts.gpu_time_cost, 6),
                    fixed(l.billed_cost(), dp),
                    fixed(l.amounts.carbon_g / Decimal::ONE_THOUSAND, 6),
                    fixed(l.amounts.embodied_g / Decimal::ONE_THOUSAND, 6),
                    l.amounts.prompt_tokens.to_string(),
                    l.amounts.generated_tokens.to_string(),
                    fixed(l.gpu_hours, 4),
                ],
            );
        }
    }
    out
}

/// A cell of text someone outside finance chose (tenant, site, region and model names,
/// written by tenants, schedulers and collectors), neutralised as OWASP's CSV injection
/// guidance says: a cell that begins with `=`, `+`, `-`, `@`, a tab or a carriage return is
/// read by spreadsheets as a formula, so it is prefixed with `'`, which they show as text.
/// Numbers never go through here: a credit's `-12.34` stays a number.
pub fn text(s: &str) -> String {
    if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{s}")
    } else {
        s.to_owned()
    }
}

/// A decimal at exactly `dp` places (rounded half away from zero if it had more).
pub fn fixed(d: Decimal, dp: u32) -> String {
    let mut d = d.round_dp_with_strategy(dp, rust_decimal::RoundingStrategy::MidpointAwayFromZero);
    d.rescale(dp);
    // −0.00 reads as a credit that is not there.
    if d.is_zero() {
        d.set_sign_positive(true);
    }
    d.to_string()
}

/// Appends one RFC 4180 row: fields quoted when they hold a comma, quote or line break;
/// CRLF line ends.
pub fn row(out: &mut String, fields: impl IntoIterator<Item = String>) {
    for (i, f) in fields.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        if f.contains([',', '"', '\n', '\r']) {
            out.push('"');
            out.push_str(&f.replace('"', "\"\""));
            out.push('"');
        } else {
            out.push_str(&f);
        }
    }
    out.push_str("\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_only_what_needs_it_and_prints_fixed_scales() {
        let mut out = String::new();
        row(
            &mut out,
            ["a".into(), "b,c".into(), "say \"hi\"".into(), String::new()],
        );
        assert_eq!(out, "a,\"b,c\",\"say \"\"hi\"\"\",\r\n");
        assert_eq!(fixed("1.5".parse().unwrap(), 2), "1.50");
        assert_eq!(fixed("-0.004".parse().unwrap(), 2), "0.00");
        assert_eq!(fixed("2.345".parse().unwrap(), 2), "2.35");
    }

    #[test]
    fn text_that_a_spreadsheet_would_run_is_neutralised() {
        for hostile in [
            "=HYPERLINK(\"http://x\")",
            "+1+1",
            "-2+3",
            "@SUM(A1)",
            "\tx",
            "\rx",
        ] {
            assert_eq!(text(hostile), format!("'{hostile}"));
        }
        assert_eq!(text("acme-research"), "acme-research");
        assert_eq!(text("llama=3"), "llama=3");
        assert_eq!(text(""), "");
    }
}
