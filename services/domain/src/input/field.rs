//! One field of a JSON record read on its own into its type, with the API's reasons ("is
//! required", "must be a string", …): the reading [`super::record`] builds a record from, so
//! that a refusal lists every field's problem instead of serde's first. The rules on a value
//! that reads (a key's length, a time against the clock) are its record's `check`.

use super::problem::Problem;
use super::{parse_time, InputError};
use crate::priority::Priority;
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde_json::Value;
use std::str::FromStr;

/// A field's type read from its JSON value; `None` is a field left out, and a JSON `null`
/// reads as left out, as the API has always read it. A refusal is one or more problems, their
/// fields relative to this one (`""` for the field itself, `[2].share` inside an array).
pub trait Field: Sized {
    fn read(v: Option<&Value>) -> Result<Self, Vec<Problem>>;
}

/// The refusal of a field as a whole.
pub fn refused<T>(reason: impl Into<String>) -> Result<T, Vec<Problem>> {
    Err(vec![Problem::new("", reason)])
}

/// The value of a field that is present and not `null`.
pub fn present(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

fn required(v: Option<&Value>) -> Result<&Value, Vec<Problem>> {
    present(v).map_or_else(|| refused("is required"), Ok)
}

impl<T: Field> Field for Option<T> {
    fn read(v: Option<&Value>) -> Result<Self, Vec<Problem>> {
        match present(v) {
            None => Ok(None),
            v => T::read(v).map(Some),
        }
    }
}

/// An array, each item read on its own; left out, it is empty.
impl<T: Field> Field for Vec<T> {
    fn read(v: Option<&Value>) -> Result<Self, Vec<Problem>> {
        let Some(v) = present(v) else {
            return Ok(Vec::new());
        };
        let Value::Array(items) = v else {
            return refused("must be an array");
        };
        let mut out = Vec::with_capacity(items.len());
        let mut problems = Vec::new();
        for (k, item) in items.iter().enumerate() {
            match T::read(Some(item)) {
                Ok(x) => out.push(x),
                Err(p) => problems.extend(p.into_iter().map(|p| p.under(&format!("[{k}]")))),
            }
        }
        if problems.is_empty() {
            Ok(out)
        } else {
            Err(problems)
        }
    }
}

impl Field for String {
    fn read(v: Option<&Value>) -> Result<Self, Vec<Problem>> {
        match required(v)? {
            Value::String(s) => Ok(s.clone()),
            _ => refused("must be a string"),
        }
    }
}

impl Field for i64 {
    fn read(v: Option<&Value>) -> Result<Self, Vec<Problem>> {
        let v = required(v)?;
        match v.as_i64() {
            Some(n) => Ok(n),
            None if v.is_number() => refused("must be an integer"),
            None => refused("must be a number"),
        }
    }
}

/// Integers narrower than `i64`, refused with their range when they do not fit.
macro_rules! narrow_integer {
    ($($ty:ty),+) => {$(
        impl Field for $ty {
            fn read(v: Option<&Value>) -> Result<Self, Vec<Problem>> {
                <$ty>::try_from(i64::read(v)?).map_or_else(
                    |_| refused(format!("must be between {} and {}", <$ty>::MIN, <$ty>::MAX)),
                    Ok,
                )
            }
        }
    )+};
}
narrow_integer!(i32, u32);

impl Field for f64 {
    fn read(v: Option<&Value>) -> Result<Self, Vec<Problem>> {
        match required(v)?.as_f64() {
            Some(n) if n.is_finite() => Ok(n),
            _ => refused("must be a number"),
        }
    }
}

impl Field for bool {
    fn read(v: Option<&Value>) -> Result<Self, Vec<Problem>> {
        required(v)?
            .as_bool()
            .map_or_else(|| refused("must be true or false"), Ok)
    }
}

/// A JSON number or a string, read exactly from its text (never through a float).
impl Field for Decimal {
    fn read(v: Option<&Value>) -> Result<Self, Vec<Problem>> {
        let text = match required(v)? {
            Value::Number(n) => n.to_string(),
            Value::String(s) => s.clone(),
            _ => return refused("must be a number"),
        };
        Decimal::from_str(&text)
            .or_else(|_| Decimal::from_scientific(&text))
            .map_or_else(|_| refused("must be a decimal number"), Ok)
    }
}

/// An RFC 3339 time within [`super::time`]'s bounds.
impl Field for DateTime<Utc> {
    fn read(v: Option<&Value>) -> Result<Self, Vec<Problem>> {
        match required(v)? {
            Value::String(s) => parse_time(s).or_else(|e: InputError| refused(e.to_string())),
            _ => refused("must be an RFC 3339 time string"),
        }
    }
}

impl Field for Priority {
    fn read(v: Option<&Value>) -> Result<Self, Vec<Problem>> {
        Priority::parse(&String::read(v)?).or_else(|e| refused(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job_kind::JobKind;
    use serde_json::json;

    /// The reason a value is refused for, or the value.
    fn read<T: Field>(v: Value) -> Result<T, String> {
        T::read(Some(&v)).map_err(|p| {
            assert_eq!(p.len(), 1);
            assert_eq!(p[0].field, "");
            p[0].reason.clone()
        })
    }

    #[test]
    fn each_type_reads_its_values_and_names_what_it_wanted() {
        assert_eq!(read::<String>(json!("a")), Ok("a".into()));
        assert_eq!(read::<String>(json!(5)), Err("must be a string".into()));
        assert_eq!(read::<String>(Value::Null), Err("is required".into()));
        assert!(String::read(None).is_err());
        assert_eq!(read::<Option<String>>(Value::Null), Ok(None));
        assert_eq!(Option::<String>::read(None), Ok(None));
        assert_eq!(read::<i64>(json!(1.5)), Err("must be an integer".into()));
        assert_eq!(read::<i64>(json!("1")), Err("must be a number".into()));
        assert_eq!(
            read::<u32>(json!(-1)),
            Err("must be between 0 and 4294967295".into())
        );
        assert_eq!(read::<i32>(json!(7)), Ok(7));
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

    #[test]
    fn an_array_names_each_bad_item_and_is_empty_when_left_out() {
        assert_eq!(Vec::<i64>::read(None), Ok(vec![]));
        assert_eq!(read::<Vec<i64>>(json!([1, 2])), Ok(vec![1, 2]));
        assert_eq!(read::<Vec<i64>>(json!({})), Err("must be an array".into()));
        let p = Vec::<i64>::read(Some(&json!([1, "x", 2.5]))).unwrap_err();
        assert_eq!(
            p,
            vec![
                Problem::new("[1]", "must be a number"),
                Problem::new("[2]", "must be an integer")
            ]
        );
    }
}
