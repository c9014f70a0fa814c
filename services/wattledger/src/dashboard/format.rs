//! Numbers as a page shows them: grouped thousands, units, a fixed number of places.

use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;

/// `1234567.891` with `dp` places → `1,234,567.89`.
pub fn grouped(d: Decimal, dp: u32) -> String {
    let mut d = d.round_dp_with_strategy(dp, rust_decimal::RoundingStrategy::MidpointAwayFromZero);
    d.rescale(dp);
    let s = d.abs().to_string();
    let (int, frac) = s.split_once('.').unwrap_or((&s, ""));
    let mut out = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if !frac.is_empty() {
        out.push('.');
        out.push_str(frac);
    }
    if d.is_sign_negative() && !d.is_zero() {
        out.insert(0, '−');
    }
    out
}

pub fn kwh_of_mj(mj: i64) -> Decimal {
    Decimal::from(mj) / Decimal::from(3_600_000_000i64)
}

/// Energy with a unit that reads well: kWh below 10 MWh, MWh above.
pub fn energy(mj: i64) -> String {
    let kwh = kwh_of_mj(mj);
    if kwh.abs() >= Decimal::from(10_000) {
        format!("{} MWh", grouped(kwh / Decimal::ONE_THOUSAND, 2))
    } else {
        format!("{} kWh", grouped(kwh, 1))
    }
}

pub fn carbon_kg(g: Decimal) -> String {
    format!("{} kgCO2e", grouped(g / Decimal::ONE_THOUSAND, 1))
}

pub fn money(amount: Decimal, currency: &str) -> String {
    format!("{} {currency}", grouped(amount, 2))
}

pub fn count(n: i64) -> String {
    grouped(Decimal::from(n), 0)
}

pub fn pct(part: Decimal, whole: Decimal) -> String {
    if whole.is_zero() {
        return "–".into();
    }
    format!("{}%", grouped(part * Decimal::ONE_HUNDRED / whole, 1))
}

pub fn f64_of(d: Decimal) -> f64 {
    d.to_f64().unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_thousands_and_keeps_places() {
        assert_eq!(grouped("1234567.891".parse().unwrap(), 2), "1,234,567.89");
        assert_eq!(grouped("-999.5".parse().unwrap(), 0), "−1,000");
        assert_eq!(grouped(Decimal::ZERO, 1), "0.0");
        assert_eq!(energy(36_000_000_000_000), "10.00 MWh");
        assert_eq!(energy(3_600_000_000), "1.0 kWh");
    }
}
