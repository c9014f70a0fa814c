//! The records of the ingest API, as agent and server both see them.
//!
//! Each record is one type here: the agent builds and spools it, the server reads it, the
//! OpenAPI document describes it (feature `openapi`), and one `check` per record holds every
//! rule about it that needs no database: ranges, lengths, times, step boundaries. The
//! server's fast path (a typed parse of the whole batch) and its slow path (field by field,
//! to explain a refusal) both call that `check`, so the two cannot drift apart, and neither
//! can the agent's idea of a record from the server's. What needs the database (does the
//! meter exist, is the tenant known) stays with the server.
//!
//! Optional fields are left out of the JSON rather than sent as null; unknown fields are
//! refused. Schedulers' annotations share one grammar for a run time (`parse_duration`),
//! read by the server's pod webhook and the Kueue controller alike.

pub mod annotations;
mod job;
mod meter;
mod sample;
mod signal;
mod time;
mod tokens;

pub use job::{Allocation, Job};
pub use meter::Meter;
pub use sample::Sample;
pub use signal::{SignalPoint, MAX_AHEAD_DAYS};
pub use time::parse_duration;
pub use tokens::Tokens;

use chrono::{DateTime, Utc};
use wattledger_domain::input;

pub use wattledger_domain::input::record::{self, Problem, Record};

/// Collects a record's problems; the checks below are the input rules of
/// [`wattledger_domain::input`] applied to typed fields.
#[derive(Debug, Default)]
struct Problems(Vec<Problem>);

impl Problems {
    fn add(&mut self, field: impl Into<String>, reason: impl ToString) {
        self.0.push(Problem::new(field, reason.to_string()));
    }

    fn key(&mut self, field: &str, s: &str) {
        if let Err(e) = input::key(s) {
            self.add(field, e);
        }
    }

    fn text(&mut self, field: &str, s: &str, max_bytes: usize) {
        if let Err(e) = input::text(s, max_bytes) {
            self.add(field, e);
        }
    }

    /// A time by [`input::time_until`].
    fn time(&mut self, field: &str, t: DateTime<Utc>, latest: DateTime<Utc>) {
        if let Err(e) = input::time_until(t, latest) {
            self.add(field, e);
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Problems of a nested record, their fields under `prefix`.
    fn nested(&mut self, prefix: &str, inner: Vec<Problem>) {
        for p in inner {
            self.add(format!("{prefix}.{}", p.field), p.reason);
        }
    }

    fn done(self) -> Vec<Problem> {
        self.0
    }
}
