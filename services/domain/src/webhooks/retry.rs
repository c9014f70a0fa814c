//! When a delivery is tried again. The schedule is the Standard Webhooks spec's example
//! (immediately, then 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 14 h, 20 h, 24 h): ten attempts
//! spanning 75 h 35 min, so a receiver down for three days still gets the event. A
//! `Retry-After` the receiver sends pushes the next attempt later, never earlier.

use chrono::{DateTime, Duration, Utc};

/// Delay before attempt n+2 after attempt n+1 failed (the first attempt is immediate).
pub const RETRY_SCHEDULE: [i64; 9] = [
    5,
    5 * 60,
    30 * 60,
    2 * 3600,
    5 * 3600,
    10 * 3600,
    14 * 3600,
    20 * 3600,
    24 * 3600,
];
/// A `Retry-After` longer than this is taken as this: the receiver does not get to stop
/// deliveries for longer than the schedule's longest step.
pub const MAX_RETRY_AFTER_S: i64 = 24 * 3600;

/// What one attempt's response means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx.
    Delivered,
    /// 410 Gone: the receiver asks for no more deliveries; the endpoint is disabled.
    Gone,
    /// Anything else: another status (3xx included: redirects are not followed), a timeout,
    /// a refused connection.
    Failed,
}

impl Outcome {
    pub fn of(status: Option<u16>) -> Outcome {
        match status {
            Some(200..=299) => Outcome::Delivered,
            Some(410) => Outcome::Gone,
            _ => Outcome::Failed,
        }
    }
}

/// After failed attempt number `attempts` (1-based) at `at`: when to try again, or `None`
/// when that was the last (the message is dead-lettered).
pub fn next_attempt(
    attempts: u32,
    at: DateTime<Utc>,
    retry_after: Option<Duration>,
) -> Option<DateTime<Utc>> {
    let step = *RETRY_SCHEDULE.get(usize::try_from(attempts).ok()?.checked_sub(1)?)?;
    let asked = retry_after
        .map(|d| d.num_seconds().clamp(0, MAX_RETRY_AFTER_S))
        .unwrap_or(0);
    Some(at + Duration::seconds(step.max(asked)))
}

/// A `Retry-After` header: delay-seconds or an HTTP date.
pub fn parse_retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let v = value.trim();
    if let Ok(s) = v.parse::<i64>() {
        return (s >= 0).then(|| Duration::seconds(s));
    }
    let at = DateTime::parse_from_rfc2822(v).ok()?.with_timezone(&Utc);
    Some((at - now).max(Duration::zero()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0).unwrap()
    }

    #[test]
    fn ten_attempts_span_more_than_three_days() {
        let mut at = t0();
        let mut attempts = 1;
        while let Some(next) = next_attempt(attempts, at, None) {
            at = next;
            attempts += 1;
        }
        assert_eq!(attempts, 10);
        assert!(at - t0() >= Duration::hours(72), "{}", at - t0());
        assert_eq!(at - t0(), Duration::seconds(272_105));
    }

    #[test]
    fn retry_after_delays_but_never_hastens() {
        assert_eq!(
            next_attempt(1, t0(), Some(Duration::seconds(120))),
            Some(t0() + Duration::seconds(120))
        );
        assert_eq!(
            next_attempt(3, t0(), Some(Duration::seconds(1))),
            Some(t0() + Duration::minutes(30))
        );
        assert_eq!(
            next_attempt(1, t0(), Some(Duration::days(30))),
            Some(t0() + Duration::hours(24))
        );
        assert_eq!(next_attempt(10, t0(), None), None);
    }

    #[test]
    fn statuses_and_retry_after_forms() {
        assert_eq!(Outcome::of(Some(204)), Outcome::Delivered);
        assert_eq!(Outcome::of(Some(301)), Outcome::Failed);
        assert_eq!(Outcome::of(Some(410)), Outcome::Gone);
        assert_eq!(Outcome::of(Some(503)), Outcome::Failed);
        assert_eq!(Outcome::of(None), Outcome::Failed);
        assert_eq!(parse_retry_after("120", t0()), Some(Duration::seconds(120)));
        assert_eq!(
            parse_retry_after("Sun, 01 Nov 2026 00:10:00 GMT", t0()),
            Some(Duration::minutes(10))
        );
        assert_eq!(parse_retry_after("soon", t0()), None);
        assert_eq!(parse_retry_after("-5", t0()), None);
    }
}
