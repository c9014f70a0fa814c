//! Exact splitting of an integer whole into parts by weight (largest-remainder method).
//!
//! Every split in the ledger goes through here, so parts always add up to the whole. Ties in
//! the remainder go to the earlier part: callers order parts by a stable key (jobs by job
//! key, a job's tenants by tenant id, an unweighted rest such as idle last) so the result
//! does not depend on the order their input came in (`attribution::tests` permutes it).

/// Splits `total` over `weights` so that the parts sum to `total` exactly.
///
/// Each part gets `floor(total × w / Σw)`; the units left over go one each to the parts with
/// the largest remainders, earlier parts first on a tie. Returns all zeros when `Σw = 0`
/// (the caller decides where an unweighted whole goes). `total` may be negative: the split is
/// done on its magnitude and the sign applied to every part.
pub fn split(total: i64, weights: &[u128]) -> Vec<i64> {
    let mut out = vec![0; weights.len()];
    split_into(total, weights, &mut out);
    out
}

/// [`split`] into a caller-owned buffer, for the attribution hot loop.
pub fn split_into(total: i64, weights: &[u128], out: &mut [i64]) {
    debug_assert_eq!(weights.len(), out.len());
    out.fill(0);
    let sum: u128 = weights.iter().sum();
    if sum == 0 || total == 0 {
        return;
    }
    let sign = total.signum();
    let magnitude = u128::from(total.unsigned_abs());
    // Fast path: one weighted part takes everything (the common case of one job per GPU).
    if let Some(only) = single_nonzero(weights) {
        out[only] = total;
        return;
    }
    let mut assigned: u128 = 0;
    // Remainders are compared as fractions r/sum; r < sum, so comparing r is enough.
    let mut remainders: [(u128, usize); 16] = [(0, 0); 16];
    let mut heap_remainders: Vec<(u128, usize)> = Vec::new();
    let small = weights.len() <= remainders.len();
    for (i, &w) in weights.iter().enumerate() {
        let product = mul_wide(magnitude, w);
        let (q, r) = div_wide(product, sum);
        out[i] = q as i64;
        assigned += q;
        if small {
            remainders[i] = (r, i);
        } else {
            heap_remainders.push((r, i));
        }
    }
    let mut left = (magnitude - assigned) as usize;
    let rems: &mut [(u128, usize)] = if small {
        &mut remainders[..weights.len()]
    } else {
        &mut heap_remainders
    };
    if left > 0 {
        // Largest remainder first; on equal remainders the lower index wins.
        rems.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for &(_, i) in rems.iter() {
            if left == 0 {
                break;
            }
            if weights[i] > 0 {
                out[i] += 1;
                left -= 1;
            }
        }
    }
    if sign < 0 {
        out.iter_mut().for_each(|p| *p = -*p);
    }
}

/// Rounds `amounts` to whole `unit`s for showing, so that the shown parts add up to the
/// shown whole at every level of a nested grouping. `paths[i]` is row `i`'s keys, outermost
/// first (every path the same length). The whole is `Σ amounts / unit` rounded half up; it
/// is [`split`] over the first key's groups by their amounts, each group's part over its
/// next key's groups, and so on down to the rows. A grouping by a prefix of the keys shows
/// the very figures the rows add up to. A part is within half a unit of its exact figure
/// plus one unit per level of keys (each split rounds once). `amounts` must not be negative.
pub fn round_nested<K: Ord>(paths: &[Vec<K>], amounts: &[i64], unit: i64) -> Vec<i64> {
    debug_assert_eq!(paths.len(), amounts.len());
    debug_assert!(unit > 0 && amounts.iter().all(|&a| a >= 0));
    let total: i64 = amounts.iter().sum();
    let whole = (total + unit / 2) / unit;
    let mut out = vec![0; amounts.len()];
    let rows: Vec<usize> = (0..amounts.len()).collect();
    place_nested(paths, amounts, &rows, 0, whole, &mut out);
    out
}

/// Splits `whole` over the groups of `rows` by their key at `depth`, in key order, then each
/// group's part further down.
fn place_nested<K: Ord>(
    paths: &[Vec<K>],
    amounts: &[i64],
    rows: &[usize],
    depth: usize,
    whole: i64,
    out: &mut [i64],
) {
    let mut rows = rows.to_vec();
    if rows.iter().all(|&r| paths[r].len() <= depth) {
        // Rows with the same keys: one part each, by amount.
        let weights: Vec<u128> = rows.iter().map(|&r| amounts[r].max(0) as u128).collect();
        for (&r, part) in rows.iter().zip(split(whole, &weights)) {
            out[r] = part;
        }
        return;
    }
    rows.sort_by(|&a, &b| paths[a][depth].cmp(&paths[b][depth]).then(a.cmp(&b)));
    let groups: Vec<&[usize]> = rows
        .chunk_by(|&a, &b| paths[a][depth] == paths[b][depth])
        .collect();
    let weights: Vec<u128> = groups
        .iter()
        .map(|g| g.iter().map(|&r| amounts[r].max(0) as u128).sum())
        .collect();
    for (group, part) in groups.iter().zip(split(whole, &weights)) {
        place_nested(paths, amounts, group, depth + 1, part, out);
    }
}

fn single_nonzero(weights: &[u128]) -> Option<usize> {
    let mut found = None;
    for (i, &w) in weights.iter().enumerate() {
        if w > 0 {
            if found.is_some() {
                return None;
            }
            found = Some(i);
        }
    }
    found
}

/// 256-bit product of two u128 as (high, low).
fn mul_wide(a: u128, b: u128) -> (u128, u128) {
    if let Some(p) = a.checked_mul(b) {
        return (0, p);
    }
    let (a_hi, a_lo) = (a >> 64, a & u128::from(u64::MAX));
    let (b_hi, b_lo) = (b >> 64, b & u128::from(u64::MAX));
    let lo_lo = a_lo * b_lo;
    let hi_lo = a_hi * b_lo;
    let lo_hi = a_lo * b_hi;
    let hi_hi = a_hi * b_hi;
    let cross = (lo_lo >> 64) + (hi_lo & u128::from(u64::MAX)) + (lo_hi & u128::from(u64::MAX));
    let low = (cross << 64) | (lo_lo & u128::from(u64::MAX));
    let high = hi_hi + (hi_lo >> 64) + (lo_hi >> 64) + (cross >> 64);
    (high, low)
}

/// Divides a 256-bit (high, low) by `d`, where the quotient is known to fit in u128
/// (it is at most `total`, an i64 magnitude). Returns (quotient, remainder).
fn div_wide((high, low): (u128, u128), d: u128) -> (u128, u128) {
    if high == 0 {
        return (low / d, low % d);
    }
    // Bitwise long division; only reached for enormous weights.
    let mut rem: u128 = high % d;
    let mut quot: u128 = 0;
    for bit in (0..128).rev() {
        let carry = rem >> 127;
        rem = (rem << 1) | ((low >> bit) & 1);
        quot <<= 1;
        if carry == 1 || rem >= d {
            rem = rem.wrapping_sub(d);
            quot |= 1;
        }
    }
    (quot, rem)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn splits_evenly_with_ties_to_earlier_parts() {
        assert_eq!(split(10, &[1, 1, 1]), vec![4, 3, 3]);
        assert_eq!(split(2, &[1, 1, 1]), vec![1, 1, 0]);
        assert_eq!(split(-10, &[1, 1, 1]), vec![-4, -3, -3]);
    }

    #[test]
    fn largest_remainder_wins_over_order() {
        // 7 × (1/6, 2/6, 3/6) = 1.17, 2.33, 3.5 → floors 1, 2, 3 (6), one left → part 2 (0.5).
        assert_eq!(split(7, &[1, 2, 3]), vec![1, 2, 4]);
    }

    #[test]
    fn zero_weights_get_nothing() {
        assert_eq!(split(5, &[0, 0]), vec![0, 0]);
        assert_eq!(split(5, &[0, 3, 0]), vec![0, 5, 0]);
        assert_eq!(split(1, &[0, 1, 1]), vec![0, 1, 0]);
    }

    #[test]
    fn huge_weights_do_not_overflow() {
        let w = [u128::MAX / 3, u128::MAX / 3, u128::MAX / 3];
        let parts = split(i64::MAX, &w);
        assert_eq!(
            parts.iter().map(|&p| i128::from(p)).sum::<i128>(),
            i128::from(i64::MAX)
        );
    }

    #[test]
    fn wide_division_matches_narrow() {
        for (a, b, d) in [
            (u128::MAX, 3u128, 7u128),
            (1 << 100, 1 << 90, (1 << 100) + 1),
        ] {
            let (q, r) = div_wide(mul_wide(a, b), d);
            // Check q*d + r == a*b in 256 bits.
            let (qh, ql) = mul_wide(q, d);
            let (low, c) = ql.overflowing_add(r);
            assert_eq!((qh + u128::from(c), low), mul_wide(a, b));
        }
    }

    #[test]
    fn nested_rounding_adds_up_at_every_level() {
        // A job held 50 min (3 000 000 ms), its tenants 25, 15 and 10 min, to 0.0001 h
        // (360 ms): alone they round to 0.4167 + 0.2500 + 0.1667 = 0.8334 of a job shown as
        // 0.8333.
        let unit = 360;
        let (a, b, c) = (1_500_000, 900_000, 600_000);
        let alone: i64 = [a, b, c].iter().map(|&ms| (ms + unit / 2) / unit).sum();
        assert_eq!(alone, 8334);
        let job = round_nested(&[vec!["endpoint"]], &[a + b + c], unit);
        assert_eq!(job, vec![8333]);
        let parts = round_nested(
            &[
                vec!["endpoint", "a"],
                vec!["endpoint", "b"],
                vec!["endpoint", "c"],
            ],
            &[a, b, c],
            unit,
        );
        assert_eq!(parts.iter().sum::<i64>(), 8333);
        assert_eq!(parts, vec![4166, 2500, 1667]);
    }

    #[test]
    fn nested_rounding_keeps_the_outer_grouping_figures() {
        // Two jobs with two tenants each, and the jobs alone: the outer figures are the same.
        let unit = 360;
        let ms = [1_000_100, 200_200, 50_050, 7_000];
        let inner = round_nested(&[vec![1, 1], vec![1, 2], vec![2, 1], vec![2, 2]], &ms, unit);
        let outer = round_nested(&[vec![1], vec![2]], &[ms[0] + ms[1], ms[2] + ms[3]], unit);
        assert_eq!(vec![inner[0] + inner[1], inner[2] + inner[3]], outer);
        assert_eq!(
            round_nested::<u8>(&[vec![]], &[ms.iter().sum()], unit),
            vec![outer[0] + outer[1]]
        );
    }

    proptest! {
        #[test]
        fn nested_parts_add_up_and_stay_near_their_share(
            rows in proptest::collection::vec((0u8..3, 0u8..3, 0i64..50_000_000), 1..30),
        ) {
            let unit = 360;
            let paths: Vec<Vec<u8>> = rows.iter().map(|&(a, b, _)| vec![a, b]).collect();
            let ms: Vec<i64> = rows.iter().map(|r| r.2).collect();
            let shown = round_nested(&paths, &ms, unit);
            let total: i64 = ms.iter().sum();
            prop_assert_eq!(shown.iter().sum::<i64>(), (total + unit / 2) / unit);
            for (s, m) in shown.iter().zip(&ms) {
                // Within two units of the exact figure: one for each level's split, with the
                // whole within half a unit.
                prop_assert!((s * unit - m).abs() <= 3 * unit, "{} units for {} ms", s, m);
            }
            let outer_paths: Vec<Vec<u8>> = rows.iter().map(|&(a, _, _)| vec![a]).collect();
            let outer = round_nested(&outer_paths, &ms, unit);
            for key in 0u8..3 {
                let of = |v: &[i64]| -> i64 {
                    v.iter().zip(&rows).filter(|(_, r)| r.0 == key).map(|(s, _)| s).sum()
                };
                prop_assert_eq!(of(&shown), of(&outer));
            }
        }

        #[test]
        fn parts_sum_to_whole(total in -1_000_000_000_000i64..1_000_000_000_000, weights in proptest::collection::vec(0u128..1_000_000_000_000, 1..40)) {
            let parts = split(total, &weights);
            let sum: u128 = weights.iter().sum();
            if sum == 0 {
                prop_assert!(parts.iter().all(|&p| p == 0));
            } else {
                prop_assert_eq!(parts.iter().sum::<i64>(), total);
                for (p, w) in parts.iter().zip(&weights) {
                    // Each part is within one unit of its exact share, and zero weight gets zero.
                    let exact = total as f64 * (*w as f64) / (sum as f64);
                    prop_assert!((*p as f64 - exact).abs() <= 1.0 + exact.abs() * 1e-9);
                    if *w == 0 { prop_assert_eq!(*p, 0); }
                }
            }
        }

        #[test]
        fn deterministic(total in 0i64..1_000_000, weights in proptest::collection::vec(0u128..1000, 1..20)) {
            prop_assert_eq!(split(total, &weights), split(total, &weights));
        }
    }
}
