//! A record of the API read from JSON field by field, so a refusal lists every problem of
//! every field (serde stops at the first). The record is declared once with [`record!`]: the
//! struct serde reads and writes and utoipa documents, its field names, and its reader.
//!
//! The reader always has the record's problems; it has the record too when every field read,
//! or when each field that did not has a *stand-in* declared for it (a kind outside its set
//! read on as a kind with no rule of its own). Such a record is never written: it is there so
//! its `check` and the server's lookups can find what else is wrong with it, and a caller
//! drops what they say about a field already refused ([`Problem::on_any`]).

use super::field::{present, Field};
pub use super::problem::{Problem, Problems};
use serde_json::{Map, Value};

#[doc(hidden)]
pub use serde_json as json;

/// A record declared with [`record!`].
pub trait Record: Sized {
    /// The fields it has, in their order.
    const FIELDS: &'static [&'static str];

    /// Reads each field of `obj`, adding their problems; `None` when a field did not read
    /// and has no stand-in.
    fn read_fields(obj: &Map<String, Value>, problems: &mut Vec<Problem>) -> Option<Self>;
}

/// Reads `v` as a `T`: its problems (a field it does not have first), and the record when
/// there is one to check (see the module's doc).
pub fn read<T: Record>(v: &Value) -> (Option<T>, Vec<Problem>) {
    let Value::Object(obj) = v else {
        return (None, vec![Problem::new("", "must be an object")]);
    };
    let mut problems: Vec<Problem> = obj
        .keys()
        .filter(|k| !T::FIELDS.contains(&k.as_str()))
        .map(|k| Problem::new(k.clone(), "unknown field"))
        .collect();
    let record = T::read_fields(obj, &mut problems);
    (record, problems)
}

/// A record as the field of another (an array's item, a nested object): whole, or refused.
pub fn nested<T: Record>(v: Option<&Value>) -> Result<T, Vec<Problem>> {
    let Some(v) = present(v) else {
        return super::field::refused("is required");
    };
    match read::<T>(v) {
        (Some(record), problems) if problems.is_empty() => Ok(record),
        (_, problems) => Err(problems),
    }
}

/// The field `name` of `obj` (`default` when it is left out), its problems added.
#[doc(hidden)]
pub fn field<T: Field>(
    obj: &Map<String, Value>,
    name: &str,
    problems: &mut Vec<Problem>,
    default: Option<T>,
) -> Option<T> {
    let v = obj.get(name);
    if let (None, Some(d)) = (present(v), default) {
        return Some(d);
    }
    match T::read(v) {
        Ok(x) => Some(x),
        Err(p) => {
            problems.extend(p.into_iter().map(|p| p.under(name)));
            None
        }
    }
}

/// Declares a record of the API: the struct as written (its derives and serde attributes are
/// the caller's), its [`Record`] reader and its [`Field`] reading as a nested record.
///
/// A field may say what it is when left out (`pub estimated: bool = false`), matching its
/// `#[serde(default)]`, and what to read on with when refused
/// (`pub kind: MeterKind => MeterKind::Node`): a value that adds no problem of its own.
#[macro_export]
macro_rules! record {
    (
        $(#[$meta:meta])*
        $vis:vis struct $ty:ident {
            $(
                $(#[$fmeta:meta])*
                $fvis:vis $field:ident : $fty:ty $(= $default:expr)? $(=> $stand_in:expr)?
            ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis struct $ty {
            $($(#[$fmeta])* $fvis $field: $fty,)+
        }

        impl $crate::input::record::Record for $ty {
            const FIELDS: &'static [&'static str] = &[$(stringify!($field)),+];

            fn read_fields(
                obj: &$crate::input::record::json::Map<String, $crate::input::record::json::Value>,
                problems: &mut Vec<$crate::input::record::Problem>,
            ) -> Option<Self> {
                $(
                    let $field = $crate::input::record::field::<$fty>(
                        obj,
                        stringify!($field),
                        problems,
                        $crate::__record_default!($fty $(, $default)?),
                    );
                    $(let $field = $field.or(Some($stand_in));)?
                )+
                Some($ty { $($field: $field?,)+ })
            }
        }

        impl $crate::input::field::Field for $ty {
            fn read(
                v: Option<&$crate::input::record::json::Value>,
            ) -> Result<Self, Vec<$crate::input::record::Problem>> {
                $crate::input::record::nested(v)
            }
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __record_default {
    ($fty:ty) => {
        None::<$fty>
    };
    ($fty:ty, $default:expr) => {
        Some::<$fty>($default)
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job_kind::JobKind;
    use serde_json::json;

    crate::record! {
        #[derive(Debug, PartialEq)]
        struct Part {
            name: String,
            share: Option<i64>,
        }
    }

    crate::record! {
        #[derive(Debug, PartialEq)]
        struct Whole {
            key: String,
            kind: JobKind => JobKind::Batch,
            urgent: bool = false,
            parts: Vec<Part>,
        }
    }

    fn fields(p: &[Problem]) -> Vec<(&str, &str)> {
        p.iter()
            .map(|p| (p.field.as_str(), p.reason.as_str()))
            .collect()
    }

    #[test]
    fn a_whole_record_reads_with_its_defaults() {
        let (w, p) = read::<Whole>(&json!({"key": "a", "kind": "training",
            "parts": [{"name": "x", "share": 2}]}));
        assert!(p.is_empty());
        let w = w.unwrap();
        assert_eq!((w.kind, w.urgent), (JobKind::Training, false));
        assert_eq!(w.parts[0].share, Some(2));
    }

    #[test]
    fn every_field_is_named_and_nested_ones_by_their_path() {
        let (w, p) = read::<Whole>(&json!({"extra": 1, "kind": 3, "urgent": "no",
            "parts": [{"name": "x"}, {"share": "y"}, 5]}));
        assert!(w.is_none());
        assert_eq!(
            fields(&p),
            [
                ("extra", "unknown field"),
                ("key", "is required"),
                ("kind", "must be a string"),
                ("urgent", "must be true or false"),
                ("parts[1].name", "is required"),
                ("parts[1].share", "must be a number"),
                ("parts[2]", "must be an object"),
            ]
        );
    }

    #[test]
    fn a_refused_field_with_a_stand_in_leaves_a_record_to_check() {
        let (w, p) = read::<Whole>(&json!({"key": "a", "kind": "mining"}));
        assert_eq!(w.map(|w| w.kind), Some(JobKind::Batch));
        assert_eq!(p.len(), 1);
        assert!(Problem::new("kind", "x").on_any(&p));
        assert!(!Problem::new("key", "x").on_any(&p));
        assert_eq!(
            Problem::new("[0].share", "x").under("parts").root(),
            "parts"
        );
    }

    #[test]
    fn a_record_that_is_not_an_object_is_refused_as_a_whole() {
        let (w, p) = read::<Whole>(&json!([1]));
        assert!(w.is_none());
        assert_eq!(fields(&p), [("", "must be an object")]);
    }
}
