//! Prometheus exporters a site already runs (snmp_exporter for PDUs, ipmi_exporter for BMCs):
//! series picked by name and labels, mapped to meters, with their unit said in the config.

pub mod parse;

use super::http::{get_text, Auth};
use super::prom;
use super::{
    client_for, BoxFuture, BuildError, Collected, Source, SourceConfig, SourceContext, SourceError,
};
use crate::records::Batch;
use crate::units::{self, Unit};
use chrono::{DateTime, Utc};
use parse::samples;
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExporterConfig {
    pub name: Option<String>,
    /// The scrape URL with its query, e.g.
    /// `http://127.0.0.1:9116/snmp?module=apc_rpdu2&target=pdu1`.
    pub url: String,
    #[serde(default = "default_interval")]
    pub interval_s: f64,
    /// Send every reading as read instead of one record per meter per step (`agent.step_s`).
    #[serde(default)]
    pub raw: bool,
    pub map: Vec<Mapping>,
}

/// One series → one meter.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mapping {
    pub metric: String,
    /// Labels the series must carry with these values.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    pub meter: String,
    /// The series' unit. Power (a gauge): `mW`, `W`, `0.01kW`, `0.1kW`, `kW`. Energy (a counter,
    /// even where the exporter calls it a gauge): `mJ`, `J`, `Wh`, `0.01kWh`, `0.1kWh`, `kWh`.
    pub unit: String,
}

fn default_interval() -> f64 {
    30.0
}

impl ExporterConfig {
    pub fn check(&self) -> Result<(), BuildError> {
        // Named by kind and URL whatever its `name`: the URL is what tells two apart.
        let name = || format!("exporter {}", self.url);
        if self.map.is_empty() {
            return Err(BuildError::Missing {
                name: name(),
                setting: "[[exporter.map]] entries",
                why: None,
            });
        }
        let mut seen = std::collections::BTreeSet::new();
        for m in &self.map {
            if let Some(u) = Unit::parse(&m.unit) {
                // Two registers of one kind on one meter would overwrite each other.
                if !seen.insert((m.meter.as_str(), u.is_energy())) {
                    return Err(BuildError::SharedMeter {
                        name: name(),
                        meter: m.meter.clone(),
                        kind: if u.is_energy() { "energy" } else { "power" },
                    });
                }
            }
            if Unit::parse(&m.unit).is_none() {
                return Err(BuildError::Invalid {
                    name: name(),
                    setting: format!("metric {}: unit", m.metric),
                    value: m.unit.clone(),
                    why: format!("is none of {}", units::NAMES),
                });
            }
        }
        Ok(())
    }
}

impl SourceConfig for ExporterConfig {
    fn name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("exporter {}", self.url))
    }

    fn interval(&self) -> std::time::Duration {
        super::interval(self.interval_s)
    }

    fn stepped(&self) -> bool {
        !self.raw
    }

    fn check(&self, _context: &SourceContext) -> Result<(), BuildError> {
        ExporterConfig::check(self)
    }

    fn build(&self, _context: &SourceContext) -> Result<Box<dyn Source>, BuildError> {
        let client = client_for(None, self.interval_s)?;
        Ok(Box::new(ExporterSource::new(self.clone(), client)))
    }
}

pub struct ExporterSource {
    config: ExporterConfig,
    client: reqwest::Client,
}

impl ExporterSource {
    pub fn new(config: ExporterConfig, client: reqwest::Client) -> Self {
        ExporterSource { config, client }
    }
}

impl Source for ExporterSource {
    fn collect(&mut self, now: DateTime<Utc>) -> BoxFuture<'_, Result<Collected, SourceError>> {
        Box::pin(async move {
            let text = get_text(&self.client, &self.config.url, Auth::None).await?;
            let parse = |reason: String| SourceError::Parse {
                what: self.config.url.clone(),
                reason,
            };
            let scrape = prom::parse(&text).map_err(|e| parse(e.to_string()))?;
            let s = samples(&scrape, &self.config.map, now).map_err(|e| parse(e.to_string()))?;
            Ok(Collected::new([Batch::Samples(s)], None))
        })
    }
}
