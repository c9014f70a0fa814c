//! When a budget alert fires: a threshold (percent of the limit) crossed by what the ledger
//! says was used in the period, or the 7-day burn rate projecting the limit to run out
//! before the period ends. Pure: the store says what was used and keeps each alert once.

use chrono::{DateTime, Duration, Utc};
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;

/// One metric of one budget over one period.
#[derive(Debug, Clone, PartialEq)]
pub struct Usage {
    pub limit: Decimal,
    pub used: Decimal,
    /// Used over the `recent_s` seconds before now: the burn rate's window, the last seven
    /// days or as much of the period as has passed.
    pub recent: Decimal,
    pub recent_s: i64,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Alert {
    /// `used` reached this percent of the limit.
    Threshold(i32),
    /// At the 7-day rate the limit is reached at this instant, before the period ends.
    Projected(DateTime<Utc>),
}

impl Alert {
    /// The key that makes an alert happen once per budget, period and metric.
    pub fn key(&self) -> String {
        match self {
            Alert::Threshold(p) => p.to_string(),
            Alert::Projected(_) => "projected".into(),
        }
    }
}

/// Every alert `u` calls for at `now`, lowest threshold first. The caller keeps those it
/// already sent; a crossing stays a crossing however often it is evaluated.
pub fn alerts(u: &Usage, thresholds_pct: &[i32], now: DateTime<Utc>) -> Vec<Alert> {
    let mut out: Vec<Alert> = Vec::new();
    if u.limit <= Decimal::ZERO {
        return out;
    }
    let mut ts: Vec<i32> = thresholds_pct.iter().copied().filter(|p| *p > 0).collect();
    ts.sort_unstable();
    ts.dedup();
    for p in ts {
        if u.used * Decimal::ONE_HUNDRED >= u.limit * Decimal::from(p) {
            out.push(Alert::Threshold(p));
        }
    }
    if let Outlook::OnTrackToGoOver { at } = outlook(u, now) {
        out.push(Alert::Projected(at));
    }
    out
}

/// Where one metric of a budget stands for the rest of its period: what a budget card says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outlook {
    /// Used is at or past the limit, by this much (0 when exactly at it).
    Over { by: Decimal },
    /// Under the limit, and at the 7-day rate it is reached at this instant, before the
    /// period ends.
    OnTrackToGoOver { at: DateTime<Utc> },
    /// Under the limit, and the 7-day rate does not reach it in the period.
    Within,
}

/// The outlook of `u` at `now`. A limit of zero or less is over as soon as anything is used.
pub fn outlook(u: &Usage, now: DateTime<Utc>) -> Outlook {
    if u.used >= u.limit {
        return Outlook::Over {
            by: u.used - u.limit,
        };
    }
    match runs_out_at(u, now) {
        Some(at) if at < u.period_end => Outlook::OnTrackToGoOver { at },
        _ => Outlook::Within,
    }
}

/// When the limit runs out at the 7-day rate, for a period in progress with some left.
pub fn runs_out_at(u: &Usage, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if now < u.period_start || now >= u.period_end || u.used >= u.limit {
        return None;
    }
    if u.recent <= Decimal::ZERO || u.recent_s <= 0 {
        return None;
    }
    // Multiplied before dividing: the window's seconds over its use stays exact where a
    // per-second rate would not.
    let left_s = (u.limit - u.used).checked_mul(Decimal::from(u.recent_s))? / u.recent;
    // Beyond ten years is never, as far as a budget period goes.
    let s = left_s.ceil().to_i64().filter(|s| *s < 10 * 365 * 86_400)?;
    Some(now + Duration::seconds(s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    /// The three things a card can say, each where it is true: past the limit is over
    /// (however fast it burns), under it with the rate reaching it in the period is on track
    /// to go over, and otherwise within.
    #[test]
    fn the_outlook_is_over_on_track_or_within() {
        let now = Utc.with_ymd_and_hms(2026, 11, 15, 0, 0, 0).unwrap();
        let card = |limit: &str, used: &str, last7: &str| {
            outlook(
                &Usage {
                    limit: d(limit),
                    ..november(used, last7)
                },
                now,
            )
        };
        // 41,482.7 of 40,000 kWh with no recent use, and 262 % burning fast: both over.
        assert_eq!(
            card("40000", "41482.7", "0"),
            Outlook::Over { by: d("1482.7") }
        );
        assert_eq!(card("1000", "2622", "900"), Outlook::Over { by: d("1622") });
        assert_eq!(card("1000", "1000", "0"), Outlook::Over { by: d("0") });
        // 600 of 1,000, 350 in 7 days: 400 left at 50 a day, reached Nov 23.
        assert_eq!(
            card("1000", "600", "350"),
            Outlook::OnTrackToGoOver {
                at: Utc.with_ymd_and_hms(2026, 11, 23, 0, 0, 0).unwrap()
            }
        );
        // 100 of 1,000 at 10 a day: not reached before Dec 1.
        assert_eq!(card("1000", "100", "70"), Outlook::Within);
    }

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    fn november(used: &str, last7: &str) -> Usage {
        Usage {
            limit: d("1000"),
            used: d(used),
            recent: d(last7),
            recent_s: 7 * 86_400,
            period_start: Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0).unwrap(),
            period_end: Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap(),
        }
    }

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 15, 0, 0, 0).unwrap()
    }

    #[test]
    fn thresholds_fire_at_exactly_their_percent() {
        let t = [50, 80, 100];
        assert_eq!(alerts(&november("499.999999", "0"), &t, now()), vec![]);
        assert_eq!(
            alerts(&november("500", "0"), &t, now()),
            vec![Alert::Threshold(50)]
        );
        assert_eq!(
            alerts(&november("1000", "0"), &[100, 50, 80, 80], now()),
            vec![
                Alert::Threshold(50),
                Alert::Threshold(80),
                Alert::Threshold(100)
            ]
        );
    }

    #[test]
    fn the_burn_rate_projects_running_out_before_the_period_ends() {
        // 700 used, 350 over the last week: 50 a day, 300 left → 6 days → 21 November.
        let a = alerts(&november("700", "350"), &[], now());
        assert_eq!(
            a,
            vec![Alert::Projected(
                Utc.with_ymd_and_hms(2026, 11, 21, 0, 0, 0).unwrap()
            )]
        );
        assert_eq!(a[0].key(), "projected");
        // 70 a week: 300 left lasts past the month's end.
        assert_eq!(alerts(&november("700", "70"), &[], now()), vec![]);
        // No use lately, already over, or a period not in progress: no projection.
        assert_eq!(runs_out_at(&november("700", "0"), now()), None);
        assert_eq!(runs_out_at(&november("1000", "350"), now()), None);
        let december = Utc.with_ymd_and_hms(2026, 12, 2, 0, 0, 0).unwrap();
        assert_eq!(runs_out_at(&november("700", "350"), december), None);
    }

    proptest! {
        /// Using more never takes an alert back: the set only grows with use.
        #[test]
        fn more_use_never_takes_an_alert_back(a in 0u32..2000, b in 0u32..2000,
                                              ts in proptest::collection::vec(1i32..150, 0..5)) {
            let (lo, hi) = (a.min(b), a.max(b));
            let key = |u: u32| alerts(&november(&u.to_string(), "0"), &ts, now())
                .iter().map(Alert::key).collect::<Vec<_>>();
            let (l, h) = (key(lo), key(hi));
            prop_assert!(l.iter().all(|k| h.contains(k)), "{:?} ⊄ {:?}", l, h);
        }
    }
}
