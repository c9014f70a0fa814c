//! What is wrong with a record of the API: each problem with the path of its field, and the
//! collector a record's `check` applies the input rules of [`super`] with.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;

/// One thing wrong with a record: the field (a path such as `allocations[2].share` inside a
/// nested record; `""` for the record itself) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub field: String,
    pub reason: String,
}

impl Problem {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Problem {
        Problem {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// The problem as one of the field `prefix` (`[2]` for an item of an array).
    pub fn under(self, prefix: &str) -> Problem {
        let field = match self.field.as_str() {
            "" => prefix.to_owned(),
            f if f.starts_with('[') => format!("{prefix}{f}"),
            f => format!("{prefix}.{f}"),
        };
        Problem { field, ..self }
    }

    /// The top-level field the problem is about (`allocations` for `allocations[2].share`).
    pub fn root(&self) -> &str {
        self.field.split(['[', '.']).next().unwrap_or_default()
    }

    /// Whether the problem is about one of `fields` (by their top-level names).
    pub fn on_any(&self, fields: &[Problem]) -> bool {
        fields.iter().any(|f| f.root() == self.root())
    }
}

/// Collects a record's problems in its `check`: the input rules of [`super`] applied to
/// typed fields.
#[derive(Debug, Default)]
pub struct Problems(Vec<Problem>);

impl Problems {
    pub fn add(&mut self, field: impl Into<String>, reason: impl ToString) {
        self.0.push(Problem::new(field, reason.to_string()));
    }

    // Each rule below adds its problem and says whether the value passed, for the rules
    // between fields that only hold of values that did.

    /// `result`'s error as `field`'s problem; whether there was none.
    pub fn rule<T, E: ToString>(&mut self, field: &str, result: Result<T, E>) -> bool {
        match result {
            Ok(_) => true,
            Err(e) => {
                self.add(field, e);
                false
            }
        }
    }

    /// A key by [`super::key`].
    pub fn key(&mut self, field: &str, s: &str) -> bool {
        self.rule(field, super::key(s))
    }

    /// Text by [`super::text`].
    pub fn text(&mut self, field: &str, s: &str, max_bytes: usize) -> bool {
        self.rule(field, super::text(s, max_bytes))
    }

    /// A time by [`super::time_until`].
    pub fn time(&mut self, field: &str, t: DateTime<Utc>, latest: DateTime<Utc>) -> bool {
        self.rule(field, super::time_until(t, latest))
    }

    /// A decimal that fits a `numeric(_, scale)` column within `[min, max]`
    /// ([`super::decimal`]): a finer value would be rounded by the database, and could round
    /// to a value its checks refuse.
    pub fn decimal(
        &mut self,
        field: &str,
        d: Decimal,
        scale: u32,
        min: Decimal,
        max: Decimal,
    ) -> bool {
        self.rule(field, super::decimal(d, scale, min, max))
    }

    /// An ISO 4217 currency code.
    pub fn currency(&mut self, field: &str, s: &str) -> bool {
        let ok = s.len() == 3 && s.chars().all(|c| c.is_ascii_uppercase());
        if !ok {
            self.add(field, "must be an ISO 4217 code such as EUR");
        }
        ok
    }

    /// An integer within `range`, refused with it.
    pub fn within(&mut self, field: &str, n: i64, range: std::ops::RangeInclusive<i64>) -> bool {
        let ok = range.contains(&n);
        if !ok {
            self.add(
                field,
                format!("must be between {} and {}", range.start(), range.end()),
            );
        }
        ok
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Problems of a nested record, their fields under `prefix`.
    pub fn nested(&mut self, prefix: &str, inner: Vec<Problem>) {
        self.0.extend(inner.into_iter().map(|p| p.under(prefix)));
    }

    pub fn done(self) -> Vec<Problem> {
        self.0
    }
}
