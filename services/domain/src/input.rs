//! The rules every value from outside passes before it is used: text, times, dates and
//! decimals.
//!
//! One rule per kind of input, applied alike by the API's extractors, the ingest validator,
//! the admission question, the Kubernetes webhook and the dashboard's forms, so no door
//! accepts what another refuses, and nothing reaches PostgreSQL that it cannot store (a NUL
//! byte, a year past its calendar, a decimal finer than its column) or that chrono cannot
//! add a duration to without overflowing.

pub mod field;
pub mod problem;
pub mod record;

use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use rust_decimal::Decimal;

/// The earliest time accepted anywhere: no meter of this product read before it.
pub const EARLIEST_YEAR: i32 = 2000;
/// Times are before the start of this year: far enough for forecasts, budgets and
/// deadlines, near enough that any duration of the domain can be added without overflow.
pub const LATEST_YEAR: i32 = 2100;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    #[error("must not contain a NUL byte")]
    Nul,
    #[error("must not contain control characters")]
    Control,
    #[error("must be at most {0} bytes")]
    TooLong(usize),
    #[error("must not be empty")]
    Empty,
    #[error("must be an RFC 3339 time (e.g. 2026-11-02T10:00:00Z)")]
    NotTime,
    #[error("must be a date as YYYY-MM-DD")]
    NotDate,
    #[error("must be between 2000-01-01 and 2100-01-01")]
    TimeRange,
    #[error("is in the future beyond the allowed clock skew")]
    Future,
    #[error("must have at most {0} decimal places")]
    Precision(u32),
    #[error("must be between {min} and {max}")]
    Range { min: Decimal, max: Decimal },
}

/// The longest span one query of the ledger covers: a year and a month (a month a year ago
/// stays comparable), within the 400 days step records are kept.
pub const MAX_SPAN_DAYS: i64 = 400;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpanError {
    #[error("must not be after to")]
    Backwards,
    #[error("must be at most {MAX_SPAN_DAYS} days after from")]
    TooLong,
}

/// The span a query covers, the API's and the dashboard's alike: `to` defaults to `now`,
/// `from` to `default` before `to`; it does not run backwards and covers at most
/// [`MAX_SPAN_DAYS`] (what one question may make the database read is bounded).
pub fn span(
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    default: chrono::Duration,
) -> Result<(DateTime<Utc>, DateTime<Utc>), SpanError> {
    let to = to.unwrap_or(now);
    let from = from.unwrap_or(to - default);
    if from > to {
        return Err(SpanError::Backwards);
    }
    if to - from > chrono::Duration::days(MAX_SPAN_DAYS) {
        return Err(SpanError::TooLong);
    }
    Ok((from, to))
}

/// Text: at most `max_bytes` bytes of UTF-8 without control characters (C0, DEL, C1: a
/// NUL cannot be stored, and tabs, line breaks and escapes have no place in a key, a name
/// or a one-line description, where they would forge log lines or spreadsheet cells).
pub fn text(s: &str, max_bytes: usize) -> Result<&str, InputError> {
    if s.contains('\0') {
        return Err(InputError::Nul);
    }
    if s.chars().any(char::is_control) {
        return Err(InputError::Control);
    }
    if s.len() > max_bytes {
        return Err(InputError::TooLong(max_bytes));
    }
    Ok(s)
}

/// Longest key accepted (tenant, site, meter, job and model keys).
pub const MAX_KEY_LEN: usize = 256;

/// A key: text of at most [`MAX_KEY_LEN`] bytes that is not blank.
pub fn key(s: &str) -> Result<&str, InputError> {
    let s = text(s, MAX_KEY_LEN)?;
    if s.trim().is_empty() {
        return Err(InputError::Empty);
    }
    Ok(s)
}

/// The first instant accepted.
pub fn earliest() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(EARLIEST_YEAR, 1, 1, 0, 0, 0)
        .single()
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// The first instant no longer accepted.
pub fn latest() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(LATEST_YEAR, 1, 1, 0, 0, 0)
        .single()
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// A time in `[2000-01-01, 2100-01-01)`.
pub fn time(t: DateTime<Utc>) -> Result<DateTime<Utc>, InputError> {
    if t < earliest() || t >= latest() {
        return Err(InputError::TimeRange);
    }
    Ok(t)
}

/// A time within the bounds of [`time`] and not after `latest` (the server's clock plus the
/// skew it allows, or a door's own horizon).
pub fn time_until(t: DateTime<Utc>, latest: DateTime<Utc>) -> Result<DateTime<Utc>, InputError> {
    let t = time(t)?;
    if t > latest {
        return Err(InputError::Future);
    }
    Ok(t)
}

/// An RFC 3339 time (a space for the `T` is taken, as RFC 3339 allows) within the bounds
/// of [`time`]. Years chrono can read but the bounds refuse (`-5000-…`, `+262142-…`) are
/// answered as out of range, which is what they are.
pub fn parse_time(s: &str) -> Result<DateTime<Utc>, InputError> {
    let t: DateTime<Utc> = s.trim().parse().map_err(|_| InputError::NotTime)?;
    time(t)
}

/// A calendar day (`YYYY-MM-DD`, the dashboard's ranges) within the bounds of [`time`].
pub fn parse_date(s: &str) -> Result<NaiveDate, InputError> {
    let d = NaiveDate::parse_from_str(s.trim(), "%Y-%m-%d").map_err(|_| InputError::NotDate)?;
    let first = NaiveDate::from_ymd_opt(EARLIEST_YEAR, 1, 1).unwrap_or(NaiveDate::MIN);
    let end = NaiveDate::from_ymd_opt(LATEST_YEAR, 1, 1).unwrap_or(NaiveDate::MAX);
    if d < first || d >= end {
        return Err(InputError::TimeRange);
    }
    Ok(d)
}

/// A decimal that fits a `numeric(p, scale)` column: at most `scale` places (after dropping
/// trailing zeros) and within `[min, max]`. A finer value would be rounded by the database,
/// so what was stored would not be what was sent.
pub fn decimal(d: Decimal, scale: u32, min: Decimal, max: Decimal) -> Result<Decimal, InputError> {
    let d = d.normalize();
    if d.scale() > scale {
        return Err(InputError::Precision(scale));
    }
    if d < min || d > max {
        return Err(InputError::Range { min, max });
    }
    Ok(d)
}

/// serde helpers that apply these rules while deserialising (query strings, typed bodies).
pub mod de {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer};

    /// An optional RFC 3339 time within bounds.
    pub fn opt_time<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(s) => super::parse_time(&s)
                .map(Some)
                .map_err(|e| serde::de::Error::custom(format!("'{}' {e}", clip(&s)))),
        }
    }

    /// Quoted input in an error message, shortened and without control characters.
    fn clip(s: &str) -> String {
        s.chars()
            .filter(|c| !c.is_control())
            .take(40)
            .collect::<String>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    #[test]
    fn text_refuses_nul_control_and_length() {
        assert_eq!(text("llama-3.1-70b", 64), Ok("llama-3.1-70b"));
        assert_eq!(text("a\0b", 64), Err(InputError::Nul));
        assert_eq!(text("a\tb", 64), Err(InputError::Control));
        assert_eq!(text("a\u{9b}b", 64), Err(InputError::Control));
        assert_eq!(text("a\u{7f}", 64), Err(InputError::Control));
        assert_eq!(text("é", 1), Err(InputError::TooLong(1)));
        assert_eq!(text("Zürich – 東京", 64), Ok("Zürich – 東京"));
    }

    #[test]
    fn times_outside_the_bounds_are_refused_whatever_chrono_accepts() {
        assert!(parse_time("2026-11-02T10:00:00Z").is_ok());
        assert!(parse_time("2026-11-02T11:00:00+01:00").is_ok());
        assert_eq!(
            parse_time("1999-12-31T23:59:59Z"),
            Err(InputError::TimeRange)
        );
        assert_eq!(
            parse_time("2100-01-01T00:00:00Z"),
            Err(InputError::TimeRange)
        );
        assert!(parse_time("2099-12-31T23:59:59Z").is_ok());
        // chrono reads these; the rule refuses them as out of range.
        assert!("+262142-12-31T23:59:59Z".parse::<DateTime<Utc>>().is_ok());
        assert_eq!(
            parse_time("+262142-12-31T23:59:59Z"),
            Err(InputError::TimeRange)
        );
        assert_eq!(
            parse_time("-5000-01-01T00:00:00Z"),
            Err(InputError::TimeRange)
        );
        assert!(parse_time("2026-11-02 10:00:00Z").is_ok());
        assert_eq!(parse_time("yesterday"), Err(InputError::NotTime));
    }

    #[test]
    fn dates_are_refused_past_the_bounds() {
        assert!(parse_date("2026-11-02").is_ok());
        // Past chrono's calendar or past the bounds: refused either way, never overflowed.
        assert!(parse_date("262143-12-31").is_err());
        assert_eq!(parse_date("2100-01-01"), Err(InputError::TimeRange));
        assert!(parse_date("+262143-12-31").is_err());
        assert_eq!(parse_date("1970-01-01"), Err(InputError::TimeRange));
        assert_eq!(parse_date("2026-13-01"), Err(InputError::NotDate));
    }

    #[test]
    fn decimals_finer_than_the_column_or_out_of_range_are_refused() {
        let d = |s: &str| Decimal::from_str(s).unwrap();
        let (min, max) = (d("0.000001"), d("99999999999999.999999"));
        assert_eq!(decimal(d("12.500000"), 6, min, max), Ok(d("12.5")));
        assert_eq!(
            decimal(Decimal::from_scientific("1e-28").unwrap(), 6, min, max),
            Err(InputError::Precision(6))
        );
        assert_eq!(
            decimal(d("0.0000001"), 6, min, max),
            Err(InputError::Precision(6))
        );
        assert!(matches!(
            decimal(d("0"), 6, min, max),
            Err(InputError::Range { .. })
        ));
    }

    #[test]
    fn a_span_defaults_from_now_and_is_bounded() {
        let now = parse_time("2026-11-25T12:00:00Z").unwrap();
        let day = chrono::Duration::days(1);
        assert_eq!(span(None, None, now, day), Ok((now - day, now)));
        let from = parse_time("2026-11-01T00:00:00Z").unwrap();
        assert_eq!(span(Some(from), None, now, day), Ok((from, now)));
        assert_eq!(
            span(Some(now), Some(from), now, day),
            Err(SpanError::Backwards)
        );
        let longest = now - chrono::Duration::days(MAX_SPAN_DAYS);
        assert!(span(Some(longest), Some(now), now, day).is_ok());
        assert_eq!(
            span(
                Some(longest - chrono::Duration::seconds(1)),
                Some(now),
                now,
                day
            ),
            Err(SpanError::TooLong)
        );
    }
}
