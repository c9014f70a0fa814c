//! One field of a JSON record read on its own into its type: the slow path of a record that
//! did not deserialise whole, which reads each field by itself so that a refusal lists every
//! field's problem instead of serde's first. The reasons are the ingest API's ("is required",
//! "must be a string", …); the rules on a value that reads (a key's length, a time's bounds
//! against the clock) are its record's `check`.
//!
//! Work in progress for issue 32's "one struct per input": a record type will declare its
//! fields once and get its reader from them.

use super::{parse_time, InputError};
use crate::priority::Priority;
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde_json::Value;
use std::str::FromStr;

/// A field's type read from its JSON value; `None` is a field left out. A JSON `null` is read
/// as left out, as the API has always read it.
pub trait Field: Sized {
    fn read(v: Option<&Value>) -> Result<Self, String>;
}

const REQUIRED: &str = "is required";

fn present(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

impl<T: Field> Field for Option<T> {
    fn read(v: Option<&Value>) -> Result<Self, String> {
        match present(v) {
            None => Ok(None),
            v => T::read(v).map(Some),
        }
    }
}

impl Field for String {
    fn read(v: Option<&Value>) -> Result<Self, String> {
        match present(v).ok_or(REQUIRED)? {
            Value::String(s) => Ok(s.clone()),
            _ => Err("must be a string".into()),
        }
    }
}

impl Field for i64 {
    fn read(v: Option<&Value>) -> Result<Self, String> {
        let v = present(v).ok_or(REQUIRED)?;
        match v.as_i64() {
            Some(n) => Ok(n),
            None if v.is_number() => Err("must be an integer".into()),
            None => Err("must be a number".into()),
        }
    }
}

impl Field for f64 {
    fn read(v: Option<&Value>) -> Result<Self, String> {
        match present(v).ok_or(REQUIRED)?.as_f64() {
            Some(n) if n.is_finite() => Ok(n),
            _ => Err("must be a number".into()),
        }
    }
}

impl Field for bool {
    fn read(v: Option<&Value>) -> Result<Self, String> {
        present(v)
            .ok_or(REQUIRED)?
            .as_bool()
            .ok_or_else(|| "must be true or false".into())
    }
}

/// A JSON number or a string, read exactly from its text (never through a float).
impl Field for Decimal {
    fn read(v: Option<&Value>) -> Result<Self, String> {
        let text = match present(v).ok_or(REQUIRED)? {
            Value::Number(n) => n.to_string(),
            Value::String(s) => s.clone(),
            _ => return Err("must be a number".into()),
        };
        Decimal::from_str(&text)
            .or_else(|_| Decimal::from_scientific(&text))
            .map_err(|_| "must be a decimal number".into())
    }
}

/// An RFC 3339 time within [`super::time`]'s bounds.
impl Field for DateTime<Utc> {
    fn read(v: Option<&Value>) -> Result<Self, String> {
        match present(v).ok_or(REQUIRED)? {
            Value::String(s) => parse_time(s).map_err(|e: InputError| e.to_string()),
            _ => Err("must be an RFC 3339 time string".into()),
        }
    }
}

impl Field for Priority {
    fn read(v: Option<&Value>) -> Result<Self, String> {
        Priority::parse(&String::read(v)?).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job_kind::JobKind;
    use serde_json::json;

    fn read<T: Field>(v: Value) -> Result<T, String> {
        T::read(Some(&v))
    }

    #[test]
    fn each_type_reads_its_values_and_names_what_it_wanted() {
        assert_eq!(read::<String>(json!("a")), Ok("a".into()));
        assert_eq!(read::<String>(json!(5)), Err("must be a string".into()));
        assert_eq!(String::read(None), Err("is required".into()));
        assert_eq!(read::<String>(Value::Null), Err("is required".into()));
        assert_eq!(read::<Option<String>>(Value::Null), Ok(None));
        assert_eq!(Option::<String>::read(None), Ok(None));
        assert_eq!(read::<i64>(json!(1.5)), Err("must be an integer".into()));
        assert_eq!(read::<i64>(json!("1")), Err("must be a number".into()));
        assert_eq!(read::<bool>(json!(1)), Err("must be true or false".into()));
        assert_eq!(read::<Decimal>(json!("0.1")), Ok(Decimal::new(1, 1)));
        assert_eq!(read::<Decimal>(json!(0.1)), Ok(Decimal::new(1, 1)));
        assert_eq!(
            read::<Decimal>(json!("x")),
            Err("must be a decimal number".into())
        );
        assert!(read::<DateTime<Utc>>(json!("2026-11-02T10:00:00Z")).is_ok());
        assert_eq!(
            read::<DateTime<Utc>>(json!(5)),
            Err("must be an RFC 3339 time string".into())
        );
        assert_eq!(
            read::<DateTime<Utc>>(json!("1999-12-31T23:00:00Z")),
            Err(InputError::TimeRange.to_string())
        );
        assert_eq!(
            read::<Priority>(json!("a\u{0}")),
            Err(InputError::Nul.to_string())
        );
        assert_eq!(read::<JobKind>(json!("training")), Ok(JobKind::Training));
        assert_eq!(
            read::<JobKind>(json!("mining")),
            Err("must be one of: training, inference, batch, interactive".into())
        );
    }
}
