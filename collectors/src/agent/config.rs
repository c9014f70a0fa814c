//! The agent's TOML configuration (`deploy/agent/agent.toml` is the documented example),
//! with environment overrides for what differs per node.

use crate::sources::{self, SourceConfig, SourceContext};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use wattledger_domain::meter_kind::MeterKind;

/// Declares `Config` with one table array per kind of source the registry lists
/// (`crate::sources::registry`), and `Config::sources`.
macro_rules! config_with_sources {
    ($($(#[$doc:meta])* $table:ident: $config:ty,)*) => {
        /// The agent's TOML: `[agent]`, the `[[meters]]` it declares, and a `[[<table>]]` per
        /// configured source.
        #[derive(Debug, Clone, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct Config {
            pub agent: AgentConfig,
            /// Meters this agent declares (its node, a facility meter): registered at start.
            #[serde(default)]
            pub meters: Vec<MeterConfig>,
            $($(#[$doc])* #[serde(default)] pub $table: Vec<$config>,)*
        }

        impl Config {
            /// Every configured source, in the registry's order.
            pub fn sources(&self) -> Vec<&dyn SourceConfig> {
                let mut all: Vec<&dyn SourceConfig> = Vec::new();
                $(all.extend(self.$table.iter().map(|c| c as &dyn SourceConfig));)*
                all
            }
        }
    };
}

// The table of each kind of source and its config type come from the registry beside the
// sources (`crate::sources::registry`); this file makes them fields of the agent's TOML.
sources::registry::with_sources!(config_with_sources);

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// Base URL of the wattledger server, e.g. `https://wattledger.example:8080`.
    pub server: String,
    /// The collector token, inline (prefer `token_file` or `WATTLEDGER_AGENT_TOKEN`).
    pub token: Option<String>,
    pub token_file: Option<PathBuf>,
    /// The site this agent's meters belong to.
    pub site: String,
    /// This node's meter key: the parent of the GPU meters the GPU sources register.
    pub node: Option<String>,
    /// This node's address, for a source URL that names `{node_ip}` (the kubelet's); on
    /// Kubernetes `WATTLEDGER_AGENT_NODE_IP` from the downward API's `status.hostIP`.
    pub node_ip: Option<std::net::IpAddr>,
    #[serde(default = "default_spool_dir")]
    pub spool_dir: PathBuf,
    /// Bound of the spool; the default holds over 72 h of an 8-GPU node read at 1 Hz.
    #[serde(default = "default_spool_max_mib")]
    pub spool_max_mib: u64,
    /// Where refused records go, one JSON line each; default `<spool_dir>/dead-letter.jsonl`.
    pub dead_letter: Option<PathBuf>,
    /// Address of the agent's own `/metrics`; none to serve none.
    pub metrics_listen: Option<String>,
    #[serde(default = "default_push_max_records")]
    pub push_max_records: usize,
    #[serde(default = "default_request_timeout_s")]
    pub request_timeout_s: f64,
    /// PEM CA bundle for the server's TLS certificate, beside the system roots.
    pub ca_file: Option<PathBuf>,
    /// Meter readings are sent as one record per meter per step of this many seconds,
    /// aligned to UTC (a divisor of 3600): the energy counter at each step boundary with the
    /// step's mean and peak power. A source with `raw = true` sends every reading instead.
    #[serde(default = "default_step_s")]
    pub step_s: u32,
}

impl AgentConfig {
    /// What the sources are told of this agent: its site and node.
    pub fn source_context(&self) -> SourceContext {
        SourceContext {
            site: self.site.clone(),
            node: self.node.clone(),
            node_ip: self.node_ip,
        }
    }
}

/// A meter the agent declares. `key` and `parent` may name `{node}` and `{site}`, so one
/// config serves every node of a DaemonSet (`key = "{node}"`, `parent = "{site}-facility"`),
/// with the node and site from the environment.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeterConfig {
    pub key: String,
    pub kind: MeterKind,
    pub parent: Option<String>,
}

fn default_spool_dir() -> PathBuf {
    PathBuf::from("/var/lib/wattledger-agent/spool")
}
fn default_spool_max_mib() -> u64 {
    512
}
fn default_push_max_records() -> usize {
    5000
}
fn default_step_s() -> u32 {
    60
}
fn default_request_timeout_s() -> f64 {
    30.0
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Toml {
        path: PathBuf,
        source: Box<toml::de::Error>,
    },
    #[error("{0}")]
    Invalid(String),
    /// What a source's own check finds wrong with its table.
    #[error(transparent)]
    Source(#[from] sources::BuildError),
}

/// The environment variables that override `[agent]` settings, and what they set.
pub const ENV_OVERRIDES: &[(&str, &str)] = &[
    ("WATTLEDGER_AGENT_SERVER", "agent.server"),
    ("WATTLEDGER_AGENT_TOKEN", "agent.token"),
    ("WATTLEDGER_AGENT_TOKEN_FILE", "agent.token_file"),
    ("WATTLEDGER_AGENT_SITE", "agent.site"),
    ("WATTLEDGER_AGENT_NODE", "agent.node"),
    ("WATTLEDGER_AGENT_NODE_IP", "agent.node_ip"),
    ("WATTLEDGER_AGENT_SPOOL_DIR", "agent.spool_dir"),
    ("WATTLEDGER_AGENT_METRICS_LISTEN", "agent.metrics_listen"),
];

impl Config {
    /// Reads, applies the environment overrides and checks the file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let env: BTreeMap<String, String> = ENV_OVERRIDES
            .iter()
            .filter_map(|(k, _)| Some((k.to_string(), std::env::var(k).ok()?)))
            .collect();
        Self::parse(&text, &env).map_err(|e| match e {
            ConfigError::Toml { source, .. } => ConfigError::Toml {
                path: path.to_owned(),
                source,
            },
            other => other,
        })
    }

    pub fn parse(text: &str, env: &BTreeMap<String, String>) -> Result<Config, ConfigError> {
        let mut c: Config = toml::from_str(text).map_err(|e| ConfigError::Toml {
            path: PathBuf::new(),
            source: Box::new(e),
        })?;
        let a = &mut c.agent;
        for (var, value) in env {
            match var.as_str() {
                "WATTLEDGER_AGENT_SERVER" => a.server = value.clone(),
                "WATTLEDGER_AGENT_TOKEN" => a.token = Some(value.clone()),
                "WATTLEDGER_AGENT_TOKEN_FILE" => a.token_file = Some(value.into()),
                "WATTLEDGER_AGENT_SITE" => a.site = value.clone(),
                "WATTLEDGER_AGENT_NODE" => a.node = Some(value.clone()),
                "WATTLEDGER_AGENT_NODE_IP" => {
                    let ip = value.trim().parse().map_err(|_| {
                        ConfigError::Invalid(format!(
                            "WATTLEDGER_AGENT_NODE_IP {value:?} is not an IP address"
                        ))
                    })?;
                    a.node_ip = Some(ip);
                }
                "WATTLEDGER_AGENT_SPOOL_DIR" => a.spool_dir = value.into(),
                "WATTLEDGER_AGENT_METRICS_LISTEN" => a.metrics_listen = Some(value.clone()),
                _ => {}
            }
        }
        c.expand_meter_templates()?;
        c.check()?;
        Ok(c)
    }

    /// Fills `{site}`, `{node}` (and `{node_ip}`) in the declared meters' keys and parents,
    /// once the environment has said what they are: the sources' templates' rule.
    fn expand_meter_templates(&mut self) -> Result<(), ConfigError> {
        let context = self.agent.source_context();
        let expand = |text: &str| {
            context
                .fill(text)
                .map_err(|e| ConfigError::Invalid(format!("meter {text:?} {e}")))
        };
        for m in &mut self.meters {
            m.key = expand(&m.key)?;
            m.parent = m.parent.as_deref().map(expand).transpose()?;
        }
        Ok(())
    }

    fn check(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        let a = &self.agent;
        if !(a.server.starts_with("http://") || a.server.starts_with("https://")) {
            return bad(format!("agent.server {:?} is not an http(s) URL", a.server));
        }
        if a.token.is_none() && a.token_file.is_none() {
            return bad(
                "no collector token: set agent.token_file, agent.token or WATTLEDGER_AGENT_TOKEN"
                    .into(),
            );
        }
        if a.spool_max_mib == 0 || a.push_max_records == 0 || a.request_timeout_s <= 0.0 {
            return bad(
                "agent.spool_max_mib, push_max_records and request_timeout_s must be positive"
                    .into(),
            );
        }
        if let Err(e) = wattledger_domain::steps::length(a.step_s) {
            return bad(format!("agent.step_s = {}: {e}", a.step_s));
        }
        for m in &self.meters {
            if !["facility", "node"].contains(&m.kind.as_str()) {
                return bad(format!(
                    "meter {}: kind {:?} (declare facility and node meters; GPU sources register their GPUs)",
                    m.key, m.kind
                ));
            }
        }
        let context = a.source_context();
        let mut names = std::collections::HashSet::new();
        for source in self.sources() {
            let name = source.name();
            if !names.insert(name.clone()) {
                return bad(format!(
                    "two sources are named {name:?}: give them distinct `name`s"
                ));
            }
            source.check(&context)?;
        }
        Ok(())
    }

    /// The token, read from the file when one is named.
    pub fn token(&self) -> Result<String, ConfigError> {
        if let Some(t) = &self.agent.token {
            return Ok(t.trim().to_owned());
        }
        let path = self.agent.token_file.as_ref().expect("checked");
        std::fs::read_to_string(path)
            .map(|t| t.trim().to_owned())
            .map_err(|source| ConfigError::Read {
                path: path.clone(),
                source,
            })
    }

    /// The token as the pusher sends it: inline, or from the file, read again as it rotates.
    pub fn token_source(&self) -> Result<super::token::Token, ConfigError> {
        if let Some(t) = &self.agent.token {
            return Ok(super::token::Token::inline(t));
        }
        let path = self.agent.token_file.clone().expect("checked");
        super::token::Token::from_file(path.clone())
            .map_err(|source| ConfigError::Read { path, source })
    }

    pub fn dead_letter_path(&self) -> PathBuf {
        self.agent
            .dead_letter
            .clone()
            .unwrap_or_else(|| self.agent.spool_dir.join("dead-letter.jsonl"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../../../deploy/agent/agent.toml");

    #[test]
    fn the_documented_example_parses() {
        let c = Config::parse(EXAMPLE, &BTreeMap::new()).unwrap();
        assert_eq!(c.agent.site, "fra1");
        assert!(!c.dcgm.is_empty() && !c.tokens.is_empty() && !c.slurm.is_empty());
        assert!(!c.redfish.is_empty() && !c.exporter.is_empty() && !c.nvml.is_empty());
        assert!(c.snmp.len() == 2 && !c.podresources.is_empty() && c.grid.len() == 4);
        assert!(c.snmp[1].profile().unwrap().energy.is_some());
        assert!(c.amdsmi.len() == 1 && c.amd_exporter.len() == 1);
    }

    #[test]
    fn environment_overrides_the_file() {
        let env = BTreeMap::from([
            ("WATTLEDGER_AGENT_NODE".to_string(), "fra1-n07".to_string()),
            ("WATTLEDGER_AGENT_TOKEN".to_string(), "t0k".to_string()),
        ]);
        let c = Config::parse(EXAMPLE, &env).unwrap();
        assert_eq!(c.agent.node.as_deref(), Some("fra1-n07"));
        assert_eq!(c.token().unwrap(), "t0k");
    }

    #[test]
    fn mistakes_are_named() {
        let base = "[agent]\nserver = \"http://x\"\ntoken = \"t\"\nsite = \"s\"\n";
        let err = |extra: &str| {
            Config::parse(&format!("{base}{extra}"), &BTreeMap::new())
                .unwrap_err()
                .to_string()
        };
        assert!(err("[[dcgm]]\nurl = \"http://h:9400/metrics\"\n").contains("agent.node"));
        assert!(err("colour = 1\n").contains("unknown field"));
        assert!(err("[[meters]]\nkey = \"g\"\nkind = \"gpu\"\n").contains("GPU sources register"));
        assert!(Config::parse(base, &BTreeMap::new()).is_ok());
        let no_token = "[agent]\nserver = \"http://x\"\nsite = \"s\"\n";
        assert!(Config::parse(no_token, &BTreeMap::new())
            .unwrap_err()
            .to_string()
            .contains("token"));
    }

    #[test]
    fn declared_meters_take_the_node_and_site_from_the_environment() {
        let text = "[agent]\nserver = \"http://x\"\ntoken = \"t\"\nsite = \"s\"\n\
                    [[meters]]\nkey = \"{node}\"\nkind = \"node\"\nparent = \"{site}-facility\"\n";
        let env = BTreeMap::from([
            (
                "WATTLEDGER_AGENT_NODE".to_string(),
                "gpu-node-7".to_string(),
            ),
            ("WATTLEDGER_AGENT_SITE".to_string(), "fra1".to_string()),
        ]);
        let c = Config::parse(text, &env).unwrap();
        assert_eq!(c.meters[0].key, "gpu-node-7");
        assert_eq!(c.meters[0].parent.as_deref(), Some("fra1-facility"));
        let err = Config::parse(text, &BTreeMap::new())
            .unwrap_err()
            .to_string();
        assert!(err.contains("WATTLEDGER_AGENT_NODE"), "{err}");
    }

    /// The kubelet's URL names the node's address, which the DaemonSet gives from the
    /// downward API: one ConfigMap for every node, IPv6 nodes included.
    #[test]
    fn the_kubelet_url_takes_the_nodes_address_from_the_environment() {
        let text = "[agent]\nserver = \"http://x\"\ntoken = \"t\"\nsite = \"s\"\nnode = \"n\"\n\
                    [[podresources]]\n[podresources.kubelet]\nurl = \"https://{node_ip}:10250/pods\"\n";
        let url = |ip: &str| {
            let env = BTreeMap::from([("WATTLEDGER_AGENT_NODE_IP".to_string(), ip.to_string())]);
            let c = Config::parse(text, &env).map_err(|e| e.to_string())?;
            let context = c.agent.source_context();
            let k = c.podresources[0].kubelet.as_ref().unwrap();
            context
                .url("podresources", "kubelet.url", &k.url)
                .map_err(|e| e.to_string())
        };
        assert_eq!(url("10.0.3.17").unwrap(), "https://10.0.3.17:10250/pods");
        assert_eq!(
            url("fd00:10::7").unwrap(),
            "https://[fd00:10::7]:10250/pods"
        );
        assert!(url("10.0.3.17/../evil")
            .unwrap_err()
            .contains("not an IP address"));
        let err = Config::parse(text, &BTreeMap::new())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("names {node_ip}") && err.contains("WATTLEDGER_AGENT_NODE_IP"),
            "{err}"
        );
    }
}
