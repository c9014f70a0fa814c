//! Units and their exact conversions. Energy is integer millijoules everywhere it is stored
//! or split; kWh exist only as `Decimal` for display and for price and carbon multiplication.

use rust_decimal::Decimal;

/// 1 kWh = 3.6 MJ = 3.6e9 mJ.
pub const MJ_PER_KWH: i64 = 3_600_000_000;
/// Milliseconds in one hour: GPU time is held in ms.
pub const MS_PER_HOUR: i64 = 3_600_000;
/// Millijoules in one joule.
pub const MJ_PER_J: i64 = 1_000;
/// Parts per million: shares (MIG slices, time slices) and weights are integers in ppm.
pub const PPM: u32 = 1_000_000;

/// Exact kWh of an energy in mJ (Decimal division by 3.6e9 is exact to 28 digits).
pub fn kwh(mj: i64) -> Decimal {
    Decimal::from(mj) / Decimal::from(MJ_PER_KWH)
}

/// Milliwatts as watts, exactly.
pub fn watts(mw: i64) -> Decimal {
    Decimal::new(mw, 3).normalize()
}

/// The most power a meter may plausibly report, in W (10 MW: a building's whole feed).
pub const MAX_POWER_W: f64 = 10_000_000.0;

/// A power reading in W (where the float world ends) as integer mW; `None` for what no meter
/// reports: negative, not finite, or above [`MAX_POWER_W`].
pub fn milliwatts(w: f64) -> Option<i64> {
    (w.is_finite() && (0.0..=MAX_POWER_W).contains(&w)).then(|| (w * 1000.0).round() as i64)
}

/// Energy of a trapezoid between two power readings (mW) over `dt_ms`, rounded to the mJ.
///
/// mW × ms = µJ; the average of the two readings halves it; 1000 µJ = 1 mJ. Rounded half away
/// from zero on integers so the result does not depend on float behaviour.
pub fn energy_from_power_mj(p0_mw: i64, p1_mw: i64, dt_ms: i64) -> i64 {
    let micro_j_x2 = (i128::from(p0_mw) + i128::from(p1_mw)) * i128::from(dt_ms);
    let denom = 2_000i128;
    ((micro_j_x2 + denom / 2).div_euclid(denom)) as i64
}

/// Energy of a constant power (mW) over `dt_ms`, rounded to the mJ.
pub fn energy_at_power_mj(p_mw: i64, dt_ms: i64) -> i64 {
    energy_from_power_mj(p_mw, p_mw, dt_ms)
}

/// Converts a share as a decimal fraction (0 < s ≤ 1, e.g. a MIG 3g slice = 0.428571) to ppm.
pub fn share_ppm(share: Decimal) -> Option<u32> {
    if share <= Decimal::ZERO || share > Decimal::ONE {
        return None;
    }
    let ppm = (share * Decimal::from(PPM)).round();
    u32::try_from(ppm.mantissa() / 10i128.pow(ppm.scale()))
        .ok()
        .filter(|p| *p > 0)
}

/// An exact ratio of two energies as a Decimal rounded to 6 places, or `None` when the
/// denominator is zero (PUE of a site with no IT energy is undefined, not infinite).
pub fn ratio(num: i64, den: i64) -> Option<Decimal> {
    if den == 0 {
        return None;
    }
    Some(
        (Decimal::from(num) / Decimal::from(den))
            .round_dp(6)
            .normalize(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal_macros_free::dec;

    mod rust_decimal_macros_free {
        macro_rules! dec {
            ($s:literal) => {
                <rust_decimal::Decimal as std::str::FromStr>::from_str($s).unwrap()
            };
        }
        pub(crate) use dec;
    }

    #[test]
    fn kwh_is_exact() {
        assert_eq!(kwh(MJ_PER_KWH), Decimal::ONE);
        assert_eq!(kwh(900_000_000), dec!("0.25"));
        assert_eq!(kwh(1), dec!("1") / dec!("3600000000"));
    }

    #[test]
    fn power_to_energy() {
        // 700 W for one minute = 42 kJ.
        assert_eq!(energy_at_power_mj(700_000, 60_000), 42_000_000);
        // 1 mW for 1 ms = 1 µJ → rounds to 0 mJ; 1 mW for 500 ms = 0.5 mJ → 1.
        assert_eq!(energy_at_power_mj(1, 1), 0);
        assert_eq!(energy_at_power_mj(1, 500), 1);
    }

    #[test]
    fn shares() {
        assert_eq!(share_ppm(dec!("0.5")), Some(500_000));
        assert_eq!(share_ppm(Decimal::ONE), Some(PPM));
        assert_eq!(share_ppm(dec!("0")), None);
        assert_eq!(share_ppm(dec!("1.5")), None);
        assert_eq!(share_ppm(dec!("0.0000001")), None);
    }

    #[test]
    fn ratios() {
        assert_eq!(ratio(125, 100), Some(dec!("1.25")));
        assert_eq!(ratio(1, 0), None);
    }
}
