//! Stateless, seeded noise: a value depends only on (seed, a, b, c), never on the order in
//! which the simulator asks, so the simulated cluster is the same on every run.

/// SplitMix64 finaliser.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

pub fn hash(seed: u64, a: u64, b: u64, c: u64) -> u64 {
    mix(mix(mix(seed ^ a).wrapping_add(b)).wrapping_add(c))
}

/// Uniform in [0, 1).
pub fn unit(seed: u64, a: u64, b: u64, c: u64) -> f64 {
    (hash(seed, a, b, c) >> 11) as f64 / (1u64 << 53) as f64
}

/// Uniform in [lo, hi).
pub fn range(seed: u64, a: u64, b: u64, c: u64, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * unit(seed, a, b, c)
}

/// Integer uniform in [lo, hi).
pub fn int(seed: u64, a: u64, b: u64, c: u64, lo: i64, hi: i64) -> i64 {
    lo + (hash(seed, a, b, c) % (hi - lo).max(1) as u64) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_in_range() {
        assert_eq!(hash(1, 2, 3, 4), hash(1, 2, 3, 4));
        assert_ne!(hash(1, 2, 3, 4), hash(1, 2, 3, 5));
        for i in 0..1000 {
            let u = unit(7, i, 0, 0);
            assert!((0.0..1.0).contains(&u));
            let n = int(7, i, 1, 0, 3, 9);
            assert!((3..9).contains(&n));
        }
    }
}
