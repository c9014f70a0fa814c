//! A calendar month in UTC: the unit a chargeback closes.

use chrono::{DateTime, Datelike, NaiveDate, TimeZone, Utc};
use serde::{Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Month {
    year: i32,
    /// 1–12.
    month: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a month: expected YYYY-MM, e.g. 2026-10")]
pub struct MonthError(pub String);

impl Month {
    pub fn new(year: i32, month: u32) -> Option<Month> {
        ((1..=12).contains(&month) && (1970..=9999).contains(&year))
            .then_some(Month { year, month })
    }

    /// The month a date or time falls in.
    pub fn of(date: impl Datelike) -> Month {
        Month {
            year: date.year(),
            month: date.month(),
        }
    }

    pub fn first_day(self) -> NaiveDate {
        NaiveDate::from_ymd_opt(self.year, self.month, 1).expect("a valid month")
    }

    pub fn start(self) -> DateTime<Utc> {
        Utc.from_utc_datetime(&self.first_day().and_hms_opt(0, 0, 0).expect("midnight"))
    }

    /// The first instant after the month.
    pub fn end(self) -> DateTime<Utc> {
        self.next().start()
    }

    pub fn next(self) -> Month {
        if self.month == 12 {
            Month {
                year: self.year + 1,
                month: 1,
            }
        } else {
            Month {
                year: self.year,
                month: self.month + 1,
            }
        }
    }

    pub fn prev(self) -> Month {
        if self.month == 1 {
            Month {
                year: self.year - 1,
                month: 12,
            }
        } else {
            Month {
                year: self.year,
                month: self.month - 1,
            }
        }
    }
}

impl fmt::Display for Month {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}", self.year, self.month)
    }
}

impl FromStr for Month {
    type Err = MonthError;
    fn from_str(s: &str) -> Result<Month, MonthError> {
        let bad = || MonthError(s.chars().take(40).collect());
        let (y, m) = s.split_once('-').ok_or_else(bad)?;
        if y.len() != 4 || m.len() != 2 || !(y.bytes().chain(m.bytes())).all(|b| b.is_ascii_digit())
        {
            return Err(bad());
        }
        Month::new(y.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?).ok_or_else(bad)
    }
}

impl Serialize for Month {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_prints_and_steps() {
        let m: Month = "2026-12".parse().unwrap();
        assert_eq!(m.to_string(), "2026-12");
        assert_eq!(m.next().to_string(), "2027-01");
        assert_eq!(m.next().prev(), m);
        assert_eq!(m.end().to_rfc3339(), "2027-01-01T00:00:00+00:00");
        for bad in [
            "2026-13",
            "2026-00",
            "26-10",
            "2026-1",
            "2026/10",
            "",
            "２０２６-10",
        ] {
            assert!(bad.parse::<Month>().is_err(), "{bad}");
        }
    }
}
