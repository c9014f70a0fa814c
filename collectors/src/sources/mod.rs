//! What the agent reads, one folder per source: `<name>/mod.rs` holds its configuration and
//! its I/O edge (fetch on an interval, turn readings into ingest records), `<name>/parse.rs`
//! its pure parser of the peer's wire format, tested on real payloads.
//!
//! This module owns what every source shares: the [`SourceConfig`] and [`Source`] traits,
//! the [`SourceContext`] a source is built in (all it knows of the agent that runs it), and
//! the errors of building and collecting. Beside them: `registry` lists the kinds of source
//! the agent's TOML can name, `gpu_meter` the GPU meter keys the GPU and scheduler sources
//! share, `http` and `prom` the HTTP edge and the Prometheus text format several sources use.
//! Nothing here imports the agent: the agent (`crate::agent`) uses the sources, not the
//! other way round.

pub mod dcgm;
pub mod exporter;
pub mod gpu_meter;
pub mod grid;
pub mod http;
pub mod nvml;
pub mod podresources;
pub mod prom;
pub mod redfish;
pub mod registry;
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

/// A configured source: one `[[<table>]]` entry of the agent's TOML. The table names and
/// their config types are listed once, in [`registry`]; adding a source is a folder here and
/// a line there.
pub trait SourceConfig: std::fmt::Debug + Send + Sync {
    /// How logs and metric labels name it; unique among an agent's sources.
    fn name(&self) -> String;
    /// How often it reads.
    fn interval(&self) -> Duration;
    /// Whether its samples go out as step records (`agent.step_s`): meter sources unless
    /// configured `raw`.
    fn stepped(&self) -> bool {
        false
    }
    /// What the configuration alone shows to be wrong, in the context it runs in; said at
    /// start, before anything is read.
    fn check(&self, _context: &SourceContext) -> Result<(), String> {
        Ok(())
    }
    fn build(&self, context: &SourceContext) -> Result<Box<dyn Source>, String>;
}

/// What a source is told of the agent that runs it: the site its meters and jobs belong to
/// and this node's meter key. The agent fills it from its `[agent]` section; a source sees
/// this and nothing else of the agent, so sources build (and are tested) without one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceContext {
    /// The site this agent's meters belong to (`agent.site`).
    pub site: String,
    /// This node's meter key (`agent.node`): the parent of the GPU meters the GPU sources
    /// register. An agent that reads no GPUs (a PDU or scheduler poller) may have none.
    pub node: Option<String>,
}

impl SourceContext {
    /// This node's meter key, for a source (`kind`) that registers its GPUs under it.
    pub fn need_node(&self, kind: &str) -> Result<&str, String> {
        self.node.as_deref().ok_or_else(|| {
            format!("agent.node (this node's meter key) is needed by the {kind} source")
        })
    }
}

pub trait Source: Send {
    /// Takes back the state spooled by an earlier run. State it cannot read (an upgrade
    /// changed its shape) is an error: the source goes on afresh and the agent says so.
    fn restore(&mut self, _state: serde_json::Value) -> Result<(), StateError> {
        Ok(())
    }
    fn collect(&mut self, now: DateTime<Utc>) -> BoxFuture<'_, Result<Collected, SourceError>>;
}

/// A source's spooled state that does not read as the state it keeps now.
#[derive(Debug, thiserror::Error)]
#[error("its saved state is unreadable: {0}")]
pub struct StateError(#[from] serde_json::Error);

/// Reads a spooled state back as the type a source keeps: every source restores through
/// this, so none drops an unreadable state silently.
pub fn saved<T: serde::de::DeserializeOwned>(state: serde_json::Value) -> Result<T, StateError> {
    Ok(serde_json::from_value(state)?)
}

/// Seconds from the config to a `Duration`, at least 100 ms.
pub(crate) fn interval(seconds: f64) -> Duration {
    Duration::from_secs_f64(seconds.max(0.1))
}

/// The HTTP client of a source reading every `interval_s`: its requests time out within
/// the interval (1 to 30 s).
pub(crate) fn client_for(
    ca_file: Option<&std::path::Path>,
    interval_s: f64,
) -> Result<reqwest::Client, String> {
    http::http_client(
        ca_file,
        Duration::from_secs_f64(interval_s.clamp(1.0, 30.0)),
    )
}
