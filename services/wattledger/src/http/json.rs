//! Reading a JSON body strictly: an object with a key twice is refused (serde_json keeps the
//! last silently, so a budget sent with two limits would apply one nobody can see), and so is
//! a NUL byte in any string or key (PostgreSQL cannot store it). Both are reported with the
//! place they were found, as a batch's record index and the field within it.

use super::error::{ApiError, FieldError};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::cell::RefCell;
use std::fmt;

/// One step of a path into a document.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index(usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Problem {
    Duplicate,
    Nul,
}

/// What went wrong and where; the parser stops at the first.
#[derive(Default)]
struct Found {
    path: Vec<Seg>,
    problem: Option<(Vec<Seg>, Problem)>,
}

/// Parses `bytes` as JSON, refusing duplicate keys and NUL bytes (422, with the record index
/// and field) and malformed JSON (400).
pub fn parse(bytes: &[u8]) -> Result<Value, ApiError> {
    let found = RefCell::new(Found::default());
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = Node { found: &found }
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v));
    match (parsed, found.into_inner().problem) {
        (Ok(v), _) => Ok(v),
        (Err(_), Some((path, problem))) => {
            Err(ApiError::Validation(vec![field_error(&path, problem)]))
        }
        (Err(e), None) => Err(ApiError::BadRequest(format!(
            "the body is not valid JSON: {e}"
        ))),
    }
}

/// Whether the raw body may hold a NUL: JSON can only carry one as the escape `\u0000`. A
/// cheap scan that lets the typed fast paths skip the strict parse.
pub fn may_hold_nul(bytes: &[u8]) -> bool {
    memchr::memmem::find(bytes, b"\\u0000").is_some()
}

/// A body's problem as a field error: `records[i].x.y` is record `i`'s field `x.y`.
fn field_error(path: &[Seg], problem: Problem) -> FieldError {
    let (index, rest) = match path {
        [Seg::Key(k), Seg::Index(i), rest @ ..] if k == "records" => (*i, rest),
        _ => (0, path),
    };
    let mut field = String::new();
    for seg in rest {
        match seg {
            Seg::Key(k) => {
                if !field.is_empty() {
                    field.push('.');
                }
                field.extend(k.chars().filter(|c| !c.is_control()).take(64));
            }
            Seg::Index(i) => field.push_str(&format!("[{i}]")),
        }
    }
    if field.is_empty() {
        field.push_str("body");
    }
    let reason = match problem {
        Problem::Duplicate => "appears twice in one object: send each field once",
        Problem::Nul => "must not contain a NUL byte",
    };
    FieldError::new(index, &field, reason)
}

struct Node<'a> {
    found: &'a RefCell<Found>,
}

impl Node<'_> {
    fn fail<E: serde::de::Error>(&self, last: Option<Seg>, problem: Problem) -> E {
        let mut f = self.found.borrow_mut();
        let mut path = f.path.clone();
        path.extend(last);
        f.problem = Some((path, problem));
        E::custom("refused")
    }
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        if v.contains('\0') {
            return Err(self.fail(None, Problem::Nul));
        }
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        if v.contains('\0') {
            return Err(self.fail(None, Problem::Nul));
        }
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        loop {
            self.found.borrow_mut().path.push(Seg::Index(out.len()));
            let next = seq.next_element_seed(Node { found: self.found })?;
            self.found.borrow_mut().path.pop();
            match next {
                Some(v) => out.push(v),
                None => return Ok(Value::Array(out)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if key.contains('\0') {
                return Err(self.fail(Some(Seg::Key(key)), Problem::Nul));
            }
            if out.contains_key(&key) {
                return Err(self.fail(Some(Seg::Key(key)), Problem::Duplicate));
            }
            self.found.borrow_mut().path.push(Seg::Key(key.clone()));
            let v = map.next_value_seed(Node { found: self.found })?;
            self.found.borrow_mut().path.pop();
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

/// A serde error of a typed body, as the caller should read it.
pub fn typed_error(e: &serde_json::Error) -> ApiError {
    if e.is_syntax() || e.is_eof() {
        ApiError::BadRequest(format!("the body is not valid JSON: {e}"))
    } else {
        ApiError::Validation(vec![FieldError::new(0, "body", e.to_string())])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(e: ApiError) -> Vec<(usize, String, String)> {
        match e {
            ApiError::Validation(v) => v
                .into_iter()
                .map(|f| (f.index, f.field, f.reason))
                .collect(),
            other => panic!("not a validation error: {other:?}"),
        }
    }

    #[test]
    fn well_formed_json_parses_as_serde_json_would() {
        let text = r#"{"records":[{"meter":"g0","ts":"2026-11-02T10:00:00Z","counter_mj":5,"power_w":1.5}],"x":[null,true,-3,18446744073709551615]}"#;
        assert_eq!(
            parse(text.as_bytes()).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
    }

    #[test]
    fn a_key_twice_is_refused_with_its_place() {
        let e = parse(br#"{"records":[{"a":1},{"meter":"g0","meter":"g1"}]}"#).unwrap_err();
        let f = fields(e);
        assert_eq!((f[0].0, f[0].1.as_str()), (1, "meter"));
        let e = parse(br#"{"records":[],"records":[{"a":1}]}"#).unwrap_err();
        assert_eq!(fields(e)[0].1, "records");
        let e = parse(br#"{"tenant":"a","limit":{"kwh":1,"kwh":2}}"#).unwrap_err();
        assert_eq!(fields(e)[0].1, "limit.kwh");
    }

    #[test]
    fn a_nul_anywhere_is_refused_with_its_place() {
        let e = parse(br#"{"records":[{"meter":"g0"},{"meter":"g\u0000"}]}"#).unwrap_err();
        let f = fields(e);
        assert_eq!((f[0].0, f[0].1.as_str()), (1, "meter"));
        assert!(f[0].2.contains("NUL"));
        let e = parse(br#"{"sites":["a","b\u0000"]}"#).unwrap_err();
        assert_eq!(fields(e)[0].1, "sites[1]");
        let e = parse(br#"{"a\u0000":1}"#).unwrap_err();
        assert_eq!(fields(e)[0].1, "a");
        assert!(may_hold_nul(br#"{"a":"\u0000"}"#));
        // A backslash written out, then u0000: text, not a NUL; the scan may say maybe.
        assert!(parse(br#"{"a":"\\u0000"}"#).is_ok());
    }

    #[test]
    fn malformed_json_is_a_bad_request() {
        assert!(matches!(parse(b"{\"a\":"), Err(ApiError::BadRequest(_))));
        assert!(matches!(parse(b"{} {}"), Err(ApiError::BadRequest(_))));
    }
}
