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

pub mod accumulator;
pub mod amd_board;
pub mod amd_exporter;
pub mod amdsmi;
pub mod checkpoint;
pub mod dcgm;
pub mod exporter;
pub mod gpu_meter;
pub mod grid;
pub mod http;
pub mod kubelet;
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
use std::net::IpAddr;
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
    fn check(&self, _context: &SourceContext) -> Result<(), BuildError> {
        Ok(())
    }
    fn build(&self, context: &SourceContext) -> Result<Box<dyn Source>, BuildError>;
}

/// Why a source cannot be built from its configuration: what [`SourceConfig::check`] finds
/// wrong at start, or what stops [`SourceConfig::build`]. `name` is how the message names the
/// source (its kind and URL or target, or its configured name); settings are written as the
/// TOML writes them. A variant that holds another error (`Oid`, `Tariff`) says it in its
/// message rather than as its `source()`, so the agent's error report says it once.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A GPU source registers its GPUs under this node's meter, and the agent has no node.
    #[error("agent.node (this node's meter key) is needed by the {kind} source")]
    NoNode { kind: String },
    /// A setting the source cannot go without is not given (or lists nothing); `why` says
    /// what it is for, where the setting's name does not.
    #[error("{name}: no {setting}{}", .why.map(|w| format!(": {w}")).unwrap_or_default())]
    Missing {
        name: String,
        setting: &'static str,
        why: Option<&'static str>,
    },
    /// Two settings of which exactly one is given.
    #[error("{name}: give either {one} or {other}, not both or neither")]
    OneOf {
        name: String,
        one: &'static str,
        other: &'static str,
    },
    /// A setting's value is none the source can use.
    #[error("{name}: {setting} {value:?} {why}")]
    Invalid {
        name: String,
        setting: String,
        value: String,
        why: String,
    },
    /// An OID in the config (`[snmp.columns]`) is not one.
    #[error("{name}: {setting}: {error}")]
    Oid {
        name: String,
        setting: String,
        error: snmp::parse::OidError,
    },
    /// Two mappings feed one meter the same kind of reading: one would overwrite the other.
    #[error(
        "{name}: meter {meter} is given {kind} by two mappings: map each feed to a meter of its own"
    )]
    SharedMeter {
        name: String,
        meter: String,
        kind: &'static str,
    },
    /// The grid source's `[grid.tariff]` does not hold.
    #[error("{name}: tariff: {error}")]
    Tariff {
        name: String,
        error: wattledger_grid::tariff::TariffError,
    },
    /// The source's HTTP client could not be made (its CA file, its TLS backend).
    #[error(transparent)]
    Client(#[from] http::ClientError),
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
    /// This node's address (`agent.node_ip`; on Kubernetes the downward API's
    /// `status.hostIP`), for a URL that names `{node_ip}`.
    pub node_ip: Option<IpAddr>,
}

impl SourceContext {
    /// This node's meter key, for a source (`kind`) that registers its GPUs under it.
    pub fn need_node(&self, kind: &str) -> Result<&str, BuildError> {
        self.node
            .as_deref()
            .ok_or_else(|| BuildError::NoNode { kind: kind.into() })
    }

    /// `text` with `{site}`, `{node}` and `{node_ip}` filled in, so one config serves every
    /// node of a DaemonSet (a meter `key = "{node}"`, a kubelet at
    /// `https://{node_ip}:10250/pods`). An IPv6 address goes in brackets, as a URL's host is
    /// written. A placeholder the agent has no value for is an error saying how to give one.
    pub fn fill(&self, text: &str) -> Result<String, Unfilled> {
        let mut out = text.replace("{site}", &self.site);
        if out.contains("{node}") {
            let node = self.node.as_deref().ok_or(Unfilled("node"))?;
            out = out.replace("{node}", node);
        }
        if out.contains("{node_ip}") {
            let host = match self.node_ip.ok_or(Unfilled("node_ip"))? {
                IpAddr::V4(ip) => ip.to_string(),
                IpAddr::V6(ip) => format!("[{ip}]"),
            };
            out = out.replace("{node_ip}", &host);
        }
        Ok(out)
    }

    /// A source's URL setting, [filled](Self::fill).
    pub fn url(&self, name: &str, setting: &str, url: &str) -> Result<String, BuildError> {
        self.fill(url).map_err(|e| BuildError::Invalid {
            name: name.into(),
            setting: setting.into(),
            value: url.into(),
            why: e.to_string(),
        })
    }
}

/// A placeholder of a template (`{node}`) the agent has no value for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("names {{{0}}}: set agent.{0} or WATTLEDGER_AGENT_{upper}", upper = .0.to_uppercase())]
pub struct Unfilled(pub &'static str);

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
) -> Result<reqwest::Client, http::ClientError> {
    http::http_client(
        ca_file,
        Duration::from_secs_f64(interval_s.clamp(1.0, 30.0)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a person reads at start when a source's table is wrong: the source, the setting
    /// and what it is for.
    #[test]
    fn build_errors_name_the_source_and_the_setting() {
        let no_node = SourceContext {
            site: "fra1".into(),
            node: None,
            node_ip: None,
        };
        assert_eq!(
            no_node.need_node("dcgm").unwrap_err().to_string(),
            "agent.node (this node's meter key) is needed by the dcgm source"
        );
        let grid: grid::GridConfig =
            toml::from_str("provider = \"watttime\"\nurl = \"https://x\"\nusername = \"u\"\n")
                .unwrap();
        assert_eq!(
            grid.check().unwrap_err().to_string(),
            "grid Watttime https://x: no `token_file`: WattTime needs `username` and \
             `token_file` (the password)"
        );
        let snmp: snmp::SnmpConfig = toml::from_str(
            "target = \"p\"\ncommunity = \"c\"\noutlets = {}\n\
             [columns]\npower = { oid = \"1.3.x\", unit = \"W\" }\n",
        )
        .unwrap();
        assert_eq!(
            snmp.check().unwrap_err().to_string(),
            "snmp p: columns.power.oid: \"1.3.x\" is not a dotted OID"
        );
        let redfish: redfish::RedfishConfig =
            toml::from_str("url = \"https://pdu1/redfish/v1\"\noutlets = {}\n").unwrap();
        assert_eq!(
            redfish.check(&no_node).unwrap_err().to_string(),
            "redfish https://pdu1/redfish/v1: no outlets mapped to meters"
        );
        let e = client_for(Some(std::path::Path::new("/nonexistent/ca.pem")), 10.0).unwrap_err();
        assert!(matches!(e, http::ClientError::ReadCa { .. }), "{e:?}");
        assert!(e.to_string().starts_with("/nonexistent/ca.pem: "), "{e}");
    }
}
