//! What is wrong with the records of a request: each record read field by field
//! ([`wattledger_domain::input::record`]), then checked, then looked up, every problem kept
//! with its record's index and field so a refusal lists all that is wrong.

use super::error::FieldError;
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::str::FromStr;
use wattledger_domain::input;
use wattledger_domain::input::record::{self as record, Problem, Record as Declared};
use wattledger_domain::names::Named;

/// What is wrong with record `index` of a request: what its reading found, then what its
/// check and lookups find about the fields that did read (about a field already refused,
/// a stand-in would only make them guess).
#[derive(Debug)]
pub struct Findings {
    index: usize,
    refused: Vec<Problem>,
    errors: Vec<FieldError>,
}

impl Findings {
    fn new(index: usize, refused: Vec<Problem>) -> Findings {
        let errors = refused
            .iter()
            .map(|p| FieldError::new(index, &p.field, p.reason.clone()))
            .collect();
        Findings {
            index,
            refused,
            errors,
        }
    }

    pub fn error(&mut self, field: &str, reason: impl Into<String>) {
        if !self.refused(field) {
            self.errors.push(FieldError::new(self.index, field, reason));
        }
    }

    /// A check's problems, as this record's.
    pub fn problems(&mut self, problems: Vec<Problem>) {
        for p in problems {
            self.error(&p.field, p.reason);
        }
    }

    /// Whether the reading refused `field` (or a field inside it).
    pub fn refused(&self, field: &str) -> bool {
        Problem::new(field, "").on_any(&self.refused)
    }

    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    /// The id of the row `key` names, or an "unknown {what}" error.
    pub fn resolve<V: Copy>(
        &mut self,
        field: &str,
        key: &str,
        ids: &HashMap<String, V>,
        what: &str,
    ) -> Option<V> {
        let id = ids.get(key).copied();
        if id.is_none() {
            self.error(field, format!("unknown {what}"));
        }
        id
    }

    /// `v` if nothing is wrong with the record, else what is, in the order of `fields`
    /// (a field the record does not have first), whichever rule found it.
    pub fn finish<T>(mut self, v: Option<T>, fields: &[&str]) -> Result<T, Vec<FieldError>> {
        self.errors.sort_by_key(|e| {
            let mut parts = e.field.split(['[', ']', '.']);
            let root = parts.next().unwrap_or_default();
            let item: Option<usize> = parts.next().and_then(|n| n.parse().ok());
            (
                fields.iter().position(|f| *f == root).map_or(0, |p| p + 1),
                item,
            )
        });
        match v {
            Some(v) if self.errors.is_empty() => Ok(v),
            _ => Err(self.errors),
        }
    }
}

/// Reads record `index` of a request as a `T`: the record when there is one to check (every
/// field read, or the refused ones have stand-ins), and what its reading found.
pub fn read<T: Declared>(index: usize, v: &Value) -> (Option<T>, Findings) {
    let (record, problems) = record::read::<T>(v);
    (record, Findings::new(index, problems))
}

/// A batch, each record read as a `T`: first, so the lookups a batch needs (its tenants, its
/// meters) are gathered from typed records, then each record is accepted or refused.
pub struct ReadBatch<T> {
    records: Vec<(Option<T>, Findings)>,
}

impl<T: Declared> ReadBatch<T> {
    pub fn of(batch: &[Value]) -> ReadBatch<T> {
        ReadBatch {
            records: batch.iter().enumerate().map(|(i, v)| read(i, v)).collect(),
        }
    }

    /// The records that read (some perhaps with stand-ins, to be refused).
    pub fn records(&self) -> impl Iterator<Item = &T> {
        self.records.iter().filter_map(|(r, _)| r.as_ref())
    }

    /// Hands each record that reads to `accept`, which checks it and looks it up; the
    /// records `accept` made, or every record's errors if any record is wrong.
    pub fn accept<O>(
        self,
        mut accept: impl FnMut(T, &mut Findings) -> Option<O>,
    ) -> Result<Vec<O>, Vec<FieldError>> {
        all_or_errors(
            self.records
                .into_iter()
                .map(|(record, mut findings)| {
                    let out = record.and_then(|r| accept(r, &mut findings));
                    findings.finish(out, T::FIELDS)
                })
                .collect(),
        )
    }
}

pub struct Record<'a> {
    index: usize,
    obj: Option<&'a Map<String, Value>>,
    pub errors: Vec<FieldError>,
}

// The readers left on it (budgets, grid events, power policy, API tokens) move to declared
// records next; then it goes.
#[allow(dead_code)]
impl<'a> Record<'a> {
    /// Starts reading record `index`; `allowed` lists its fields (others are errors).
    pub fn new(index: usize, value: &'a Value, allowed: &[&str]) -> Self {
        let mut r = Record {
            index,
            obj: value.as_object(),
            errors: Vec::new(),
        };
        match r.obj {
            None => r.error("", "must be an object"),
            Some(obj) => {
                for k in obj.keys() {
                    if !allowed.contains(&k.as_str()) {
                        r.errors.push(FieldError::new(index, k, "unknown field"));
                    }
                }
            }
        }
        r
    }

    pub fn error(&mut self, field: &str, reason: impl Into<String>) {
        self.errors.push(FieldError::new(self.index, field, reason));
    }

    fn get(&self, field: &str) -> Option<&'a Value> {
        self.obj?.get(field).filter(|v| !v.is_null())
    }

    fn required<T>(&mut self, field: &str, v: Option<T>) -> Option<T> {
        if v.is_none() && self.obj.is_some() && self.get(field).is_none() {
            self.error(field, "is required");
        }
        v
    }

    /// A string passing the text rule ([`input::text`]): no NUL or control characters, at
    /// most `max_len` bytes.
    pub fn opt_str(&mut self, field: &str, max_len: usize) -> Option<String> {
        let s = self.opt_string(field)?;
        self.ruled(field, s, |s| input::text(s, max_len).map(drop))
    }

    pub fn str(&mut self, field: &str, max_len: usize) -> Option<String> {
        let v = self.opt_str(field, max_len);
        self.required(field, v)
    }

    /// A string as sent: the text rules are the caller's (a wire record's `check`, or
    /// [`Record::opt_str`] and [`Record::opt_key`] below).
    pub fn opt_string(&mut self, field: &str) -> Option<String> {
        match self.get(field)? {
            Value::String(s) => Some(s.clone()),
            _ => {
                self.error(field, "must be a string");
                None
            }
        }
    }

    pub fn string(&mut self, field: &str) -> Option<String> {
        let v = self.opt_string(field);
        self.required(field, v)
    }

    /// A wire record's problems, as this record's errors.
    pub fn problems(&mut self, problems: Vec<wattledger_wire::Problem>) {
        for p in problems {
            self.error(&p.field, p.reason);
        }
    }

    /// A key ([`input::key`]).
    pub fn key(&mut self, field: &str) -> Option<String> {
        let v = self.opt_key(field);
        self.required(field, v)
    }

    pub fn opt_key(&mut self, field: &str) -> Option<String> {
        let s = self.opt_string(field)?;
        self.ruled(field, s, |s| input::key(s).map(drop))
    }

    /// `s` if it passes `rule`; otherwise the rule's error on `field`.
    fn ruled(
        &mut self,
        field: &str,
        s: String,
        rule: impl FnOnce(&str) -> Result<(), input::InputError>,
    ) -> Option<String> {
        match rule(&s) {
            Ok(()) => Some(s),
            Err(e) => {
                self.error(field, e.to_string());
                None
            }
        }
    }

    pub fn opt_i64(&mut self, field: &str) -> Option<i64> {
        let v = self.get(field)?;
        match v.as_i64() {
            Some(n) => Some(n),
            None if v.is_number() => {
                self.error(field, "must be an integer");
                None
            }
            None => {
                self.error(field, "must be a number");
                None
            }
        }
    }

    pub fn i64(&mut self, field: &str) -> Option<i64> {
        let v = self.opt_i64(field);
        self.required(field, v)
    }

    pub fn opt_f64(&mut self, field: &str) -> Option<f64> {
        let v = self.get(field)?;
        match v.as_f64() {
            Some(n) if n.is_finite() => Some(n),
            _ => {
                self.error(field, "must be a number");
                None
            }
        }
    }

    /// A decimal given as a JSON number or a string (exact either way: the number's text is
    /// parsed, never a float).
    pub fn opt_decimal(&mut self, field: &str) -> Option<Decimal> {
        let v = self.get(field)?;
        let text = match v {
            Value::Number(n) => n.to_string(),
            Value::String(s) => s.clone(),
            _ => {
                self.error(field, "must be a number");
                return None;
            }
        };
        match Decimal::from_str(&text).or_else(|_| Decimal::from_scientific(&text)) {
            Ok(d) => Some(d),
            Err(_) => {
                self.error(field, "must be a decimal number");
                None
            }
        }
    }

    pub fn decimal(&mut self, field: &str) -> Option<Decimal> {
        let v = self.opt_decimal(field);
        self.required(field, v)
    }

    /// A decimal that fits a `numeric(_, scale)` column within `[min, max]` ([`input::decimal`]):
    /// a finer value would be rounded by the database, and could round to a value its checks
    /// refuse.
    pub fn opt_decimal_in(
        &mut self,
        field: &str,
        scale: u32,
        min: Decimal,
        max: Decimal,
    ) -> Option<Decimal> {
        let d = self.opt_decimal(field)?;
        match input::decimal(d, scale, min, max) {
            Ok(d) => Some(d),
            Err(e) => {
                self.error(field, e.to_string());
                None
            }
        }
    }

    pub fn decimal_in(
        &mut self,
        field: &str,
        scale: u32,
        min: Decimal,
        max: Decimal,
    ) -> Option<Decimal> {
        let v = self.opt_decimal_in(field, scale, min, max);
        self.required(field, v)
    }

    /// An RFC 3339 time within the bounds of [`input::time`] and no later than `latest`.
    pub fn opt_time(&mut self, field: &str, latest: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let s = match self.get(field)? {
            Value::String(s) => s.clone(),
            _ => {
                self.error(field, "must be an RFC 3339 time string");
                return None;
            }
        };
        match input::parse_time(&s).and_then(|t| input::time_until(t, latest)) {
            Ok(t) => Some(t),
            Err(e) => {
                self.error(field, e.to_string());
                None
            }
        }
    }

    pub fn time(&mut self, field: &str, latest: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let v = self.opt_time(field, latest);
        self.required(field, v)
    }

    /// A required key naming a row that exists: its id, or an "unknown {what}" error.
    pub fn known(&mut self, field: &str, ids: &HashMap<String, i64>, what: &str) -> Option<i64> {
        let key = self.key(field)?;
        self.resolve(field, &key, ids, what)
    }

    /// The id of the row `key` names, or an "unknown {what}" error.
    pub fn resolve<V: Copy>(
        &mut self,
        field: &str,
        key: &str,
        ids: &HashMap<String, V>,
        what: &str,
    ) -> Option<V> {
        let id = ids.get(key).copied();
        if id.is_none() {
            self.error(field, format!("unknown {what}"));
        }
        id
    }

    pub fn opt_bool(&mut self, field: &str) -> Option<bool> {
        match self.get(field)? {
            Value::Bool(b) => Some(*b),
            _ => {
                self.error(field, "must be true or false");
                None
            }
        }
    }

    /// One of a closed set of names, refused with the list of them.
    pub fn opt_named<T: Named>(&mut self, field: &str) -> Option<T> {
        let s = self.opt_string(field)?;
        self.name_of(field, &s)
    }

    pub fn named<T: Named>(&mut self, field: &str) -> Option<T> {
        let v = self.opt_named(field);
        self.required(field, v)
    }

    /// A string read by its type's own rule (`parse`), refused with that rule's reason.
    pub fn opt_parsed<T, E: ToString>(
        &mut self,
        field: &str,
        parse: impl FnOnce(&str) -> Result<T, E>,
    ) -> Option<T> {
        let s = self.opt_string(field)?;
        match parse(&s) {
            Ok(v) => Some(v),
            Err(e) => {
                self.error(field, e.to_string());
                None
            }
        }
    }

    /// `s`, read from `field` already, as one of a closed set of names.
    pub fn name_of<T: Named>(&mut self, field: &str, s: &str) -> Option<T> {
        let v = T::parse(s);
        if v.is_none() {
            self.error(field, T::expected());
        }
        v
    }

    pub fn array(&mut self, field: &str) -> Option<&'a Vec<Value>> {
        match self.get(field)? {
            Value::Array(a) => Some(a),
            _ => {
                self.error(field, "must be an array");
                None
            }
        }
    }

    pub fn index(&self) -> usize {
        self.index
    }
}

/// Collects records' errors and yields the values only if the whole batch is valid.
pub fn all_or_errors<T>(
    parsed: Vec<Result<T, Vec<FieldError>>>,
) -> Result<Vec<T>, Vec<FieldError>> {
    let mut ok = Vec::with_capacity(parsed.len());
    let mut errors = Vec::new();
    for p in parsed {
        match p {
            Ok(v) => ok.push(v),
            Err(e) => errors.extend(e),
        }
    }
    if errors.is_empty() {
        Ok(ok)
    } else {
        Err(errors)
    }
}
