//! What the agent reads, one folder per source: `<name>/mod.rs` holds its configuration and
//! its I/O edge (fetch on an interval, turn readings into ingest records), `<name>/parse.rs`
//! its pure parser of the peer's wire format, tested on real payloads. This module owns the
//! [`Source`] trait every source implements; `http` and `prom` are the HTTP edge and the
//! Prometheus text format several sources share.

pub mod dcgm;
pub mod exporter;
pub mod grid;
pub mod http;
pub mod nvml;
pub mod podresources;
pub mod prom;
pub mod redfish;
pub mod slurm;
pub mod snmp;
pub mod tokens;

use crate::records::Batch;
use chrono::{DateTime, Utc};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What one collection cycle produced: batches in send order, and the source's state after
/// them (spooled with them, so it is recovered exactly as far as they were).
#[derive(Debug, Default)]
pub struct Collected {
    pub batches: Vec<Batch>,
    pub state: Option<serde_json::Value>,
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The peer could not be reached or answered with an error: retried next interval.
    #[error("fetching {what}: {reason}")]
    Fetch { what: String, reason: String },
    /// The peer answered something this source cannot read.
    #[error("reading {what}: {reason}")]
    Parse { what: String, reason: String },
    /// The source cannot work on this machine (no NVIDIA driver, no `sacct`): said once,
    /// then retried quietly at a slower pace.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl Collected {
    /// A cycle's batches in send order, the empty ones left out.
    pub fn new(batches: impl IntoIterator<Item = Batch>, state: Option<serde_json::Value>) -> Self {
        Collected {
            batches: batches.into_iter().filter(|b| !b.is_empty()).collect(),
            state,
        }
    }
}

pub trait Source: Send {
    fn name(&self) -> String;
    fn interval(&self) -> Duration;
    /// Takes back the state spooled by an earlier run.
    fn restore(&mut self, _state: serde_json::Value) {}
    fn collect(&mut self, now: DateTime<Utc>) -> BoxFuture<'_, Result<Collected, SourceError>>;
}

/// Seconds from the config to a `Duration`, at least 100 ms.
pub(crate) fn interval(seconds: f64) -> Duration {
    Duration::from_secs_f64(seconds.max(0.1))
}
