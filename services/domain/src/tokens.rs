//! Token records to hourly token totals.
//!
//! Inference servers report counters per scrape interval; a record that straddles hour
//! boundaries is split over the hours it touches by time, with one largest-remainder split
//! over the whole hour grid, so whichever hour asks, the hours add up to the record.

use crate::split::split;

pub const HOUR_MS: i64 = 3_600_000;

/// Tokens of a record `[start_ms, end_ms)` that fall in the hour starting at
/// `hour_start_ms` (a multiple of an hour).
pub fn tokens_in_hour(tokens: i64, start_ms: i64, end_ms: i64, hour_start_ms: i64) -> i64 {
    let hour = hour_start_ms.div_euclid(HOUR_MS);
    if end_ms <= start_ms {
        // An instant record belongs to the hour that contains it.
        return if start_ms.div_euclid(HOUR_MS) == hour {
            tokens
        } else {
            0
        };
    }
    let h0 = start_ms.div_euclid(HOUR_MS);
    let h1 = (end_ms - 1).div_euclid(HOUR_MS);
    if hour < h0 || hour > h1 {
        return 0;
    }
    if h0 == h1 {
        return tokens;
    }
    let weights: Vec<u128> = (h0..=h1)
        .map(|h| (end_ms.min((h + 1) * HOUR_MS) - start_ms.max(h * HOUR_MS)) as u128)
        .collect();
    split(tokens, &weights)[(hour - h0) as usize]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const H: i64 = HOUR_MS;

    #[test]
    fn inside_and_outside() {
        assert_eq!(tokens_in_hour(100, 10, 20, 0), 100);
        assert_eq!(tokens_in_hour(100, H + 10, H + 20, 0), 0);
        assert_eq!(tokens_in_hour(100, 5, 5, 0), 100);
        // Half in each hour.
        assert_eq!(tokens_in_hour(101, H / 2, H + H / 2, 0), 51);
        assert_eq!(tokens_in_hour(101, H / 2, H + H / 2, H), 50);
    }

    proptest! {
        #[test]
        fn hours_add_up(tokens in 0i64..10_000_000, start in 0i64..(3 * H), len in 0i64..(3 * H)) {
            let end = start + len;
            let sum: i64 = (0..8).map(|h| tokens_in_hour(tokens, start, end, h * H)).sum();
            prop_assert_eq!(sum, tokens);
        }
    }
}
