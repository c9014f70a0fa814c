//! What is wrong with the records of a request: each record read field by field
//! ([`wattledger_domain::input::record`]), then checked, then looked up, every problem kept
//! with its record's index and field so a refusal lists all that is wrong.

use super::error::FieldError;
use serde_json::Value;
use std::collections::HashMap;
use wattledger_domain::input::record::{self as record, Problem, Record as Declared};

/// What is wrong with record `index` of a request: what its reading found, then what its
/// check and lookups find about the fields that did read (about a field already refused,
/// a stand-in would only make them guess).
#[derive(Debug)]
pub struct Findings {
    index: usize,
    refused: Vec<Problem>,
    /// The fields the record's check found wrong: a lookup of one would only add noise.
    checked: Vec<String>,
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
            checked: Vec::new(),
            errors,
        }
    }

    /// The record's index in its batch.
    pub fn index(&self) -> usize {
        self.index
    }

    pub fn error(&mut self, field: &str, reason: impl Into<String>) {
        if !self.refused(field) {
            self.outside(field, reason);
        }
    }

    /// An error about a part of the request outside the body (a path's key), which nothing
    /// the body's reading refused can stand for.
    pub fn outside(&mut self, field: &str, reason: impl Into<String>) {
        self.errors.push(FieldError::new(self.index, field, reason));
    }

    /// A check's problems, as this record's; the fields they are about are refused from then
    /// on (every problem of one check is kept, so a field may have several).
    pub fn problems(&mut self, problems: Vec<Problem>) {
        let mut checked = Vec::with_capacity(problems.len());
        for p in problems {
            self.error(&p.field, p.reason);
            checked.push(p.field);
        }
        self.checked.extend(checked);
    }

    /// Whether `field` was refused already: by the reading (the field, or the top-level field
    /// holding it), or by the record's check (the field, or one holding it).
    pub fn refused(&self, field: &str) -> bool {
        Problem::new(field, "").on_any(&self.refused)
            || self.checked.iter().any(|c| {
                field
                    .strip_prefix(c.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
            })
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

/// A request's one record (a policy, a token request) read as a `T` and checked: `check`
/// is told which fields the reading refused, so it judges only those that read.
pub fn checked<T: Declared>(
    v: &Value,
    check: impl FnOnce(&T, &dyn Fn(&str) -> bool) -> Vec<Problem>,
) -> Result<T, Vec<FieldError>> {
    let (record, mut findings) = read::<T>(0, v);
    if let Some(r) = &record {
        let problems = check(r, &|field| findings.refused(field));
        findings.problems(problems);
    }
    findings.finish(record, T::FIELDS)
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

/// Collects records' errors and yields the values only if the whole batch is valid.
fn all_or_errors<T>(parsed: Vec<Result<T, Vec<FieldError>>>) -> Result<Vec<T>, Vec<FieldError>> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_refused_by_the_reading_or_the_check_takes_no_later_error() {
        let mut f = Findings::new(0, vec![Problem::new("kind", "must be one of: …")]);
        f.problems(vec![
            Problem::new("tenant", "must be at most 128 bytes"),
            Problem::new("tenant", "must not contain control characters"),
            Problem::new("allocations[0].share", "must be at most 1"),
        ]);
        f.error("kind", "a lookup's guess");
        f.error("tenant", "unknown tenant");
        f.error("allocations[0].share", "again");
        f.error("allocations[1].meter", "unknown meter");
        f.error("allocations", "the GPUs are at several sites");
        assert!(f.refused("allocations[0].share") && !f.refused("allocations[0].meter"));
        let fields: Vec<(String, String)> = f
            .finish::<()>(None, &["tenant", "kind", "allocations"])
            .unwrap_err()
            .into_iter()
            .map(|e| (e.field, e.reason))
            .collect();
        assert_eq!(
            fields,
            [
                ("tenant", "must be at most 128 bytes"),
                ("tenant", "must not contain control characters"),
                ("kind", "must be one of: …"),
                ("allocations", "the GPUs are at several sites"),
                ("allocations[0].share", "must be at most 1"),
                ("allocations[1].meter", "unknown meter"),
            ]
            .map(|(f, r)| (f.to_owned(), r.to_owned()))
        );
    }
}
