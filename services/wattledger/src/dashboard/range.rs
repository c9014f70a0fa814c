//! The date range a page covers: `?from=YYYY-MM-DD&to=YYYY-MM-DD` (UTC days, both included),
//! this month so far when absent.

use super::PageError;
use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Utc};
use wattledger_domain::input::{self, InputError, SpanError};

pub struct Range {
    pub from: DateTime<Utc>,
    /// Exclusive.
    pub to: DateTime<Utc>,
    /// As the form shows them.
    pub from_day: String,
    pub to_day: String,
    /// "November 2026 so far", or "Nov 3 – Nov 9, 2026".
    pub label: String,
}

impl Range {
    pub fn parse(
        from: Option<&str>,
        to: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<Range, PageError> {
        let today = now.date_naive();
        let first = NaiveDate::from_ymd_opt(today.year(), today.month(), 1).unwrap_or(today);
        Range::parse_or(
            from,
            to,
            now,
            first,
            &format!("{} so far", now.format("%B %Y")),
        )
    }

    /// As [`Range::parse`], with another default start (and how to call that range).
    pub fn parse_or(
        from: Option<&str>,
        to: Option<&str>,
        now: DateTime<Utc>,
        default_from: NaiveDate,
        default_label: &str,
    ) -> Result<Range, PageError> {
        let day = |s: Option<&str>, what: &str| -> Result<Option<NaiveDate>, PageError> {
            match s.map(str::trim).filter(|s| !s.is_empty()) {
                None => Ok(None),
                Some(s) => input::parse_date(s).map(Some).map_err(|e| {
                    let shown: String = s.chars().filter(|c| !c.is_control()).take(20).collect();
                    PageError::BadRequest(match e {
                        InputError::TimeRange => {
                            format!("The {what} date '{shown}' is outside 2000 to 2099.")
                        }
                        _ => format!("'{shown}' is not a {what} date: use YYYY-MM-DD."),
                    })
                }),
            }
        };
        let today = now.date_naive();
        let (f, t) = (day(from, "start")?, day(to, "end")?);
        let defaulted = f.is_none() && t.is_none();
        let f = f.unwrap_or(default_from);
        let t = t.unwrap_or(today);
        let start = Utc.from_utc_datetime(&f.and_hms_opt(0, 0, 0).unwrap_or_default());
        let last_day_ends =
            Utc.from_utc_datetime(&t.and_hms_opt(0, 0, 0).unwrap_or_default()) + Duration::days(1);
        input::span(Some(start), Some(last_day_ends), now, Duration::zero()).map_err(|e| {
            PageError::BadRequest(match e {
                SpanError::Backwards => "The range starts after it ends.".into(),
                SpanError::TooLong => {
                    format!("Pick a range of at most {} days.", input::MAX_SPAN_DAYS)
                }
            })
        })?;
        let end = last_day_ends.min(now.max(start));
        let label = if defaulted {
            default_label.to_owned()
        } else {
            format!("{} – {}", f.format("%b %-d"), t.format("%b %-d, %Y"))
        };
        Ok(Range {
            from: start,
            to: if end > start {
                end
            } else {
                start + Duration::days(1)
            },
            from_day: f.to_string(),
            to_day: t.to_string(),
            label,
        })
    }

    /// The range as query parameters, for links that keep it.
    pub fn query(&self) -> String {
        format!("from={}&to={}", self.from_day, self.to_day)
    }

    /// Whole days covered (the last one possibly partial).
    pub fn days(&self) -> i64 {
        ((self.to - self.from).num_seconds() + 86_399) / 86_400
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_to_this_month_and_refuses_backwards_or_malformed_ranges() {
        let now = Utc.with_ymd_and_hms(2026, 11, 22, 15, 0, 0).unwrap();
        let r = Range::parse(None, None, now).unwrap();
        assert_eq!(
            (r.from_day.as_str(), r.to_day.as_str(), r.to),
            ("2026-11-01", "2026-11-22", now)
        );
        assert_eq!(r.days(), 22);
        let r = Range::parse(Some("2026-10-01"), Some("2026-10-31"), now).unwrap();
        assert_eq!(r.to, Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0).unwrap());
        assert_eq!(r.days(), 31);
        assert!(Range::parse(Some("2026-10-05"), Some("2026-10-01"), now).is_err());
        assert!(Range::parse(Some("yesterday"), None, now).is_err());
        assert!(Range::parse(Some("2024-01-01"), Some("2026-01-01"), now).is_err());
        // The largest dates a calendar (or chrono) knows are refused, not overflowed.
        assert!(Range::parse(Some("262143-12-31"), None, now).is_err());
        assert!(Range::parse(Some("2026-11-01"), Some("+262143-12-31"), now).is_err());
        assert!(Range::parse(Some("1900-01-01"), Some("1900-01-02"), now).is_err());
    }
}
