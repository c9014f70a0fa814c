//! AMD device metrics exporter scrapes, beside dcgm-exporter: each board's energy counter
//! and power as samples, the boards and their compute partitions as meters (`amd_board`),
//! and Kubernetes pods seen on a GPU as jobs holding it.
//!
//! A pod on a partition holds that partition's share of the board (1/N of its N
//! partitions): the board is metered once, so without the share a pod alone on one CPX
//! partition would be charged the whole board.

pub mod parse;

use super::accumulator::{Accumulator, Counter, Event, Reading};
use super::amd_board::{boards, Board, Keys, Logical};
use super::amdsmi::check_amd;
use super::gpu_meter::{default_gpu_meter, default_socket_meter};
use super::http::{get_text, Auth};
use super::{
    client_for, saved, BoxFuture, BuildError, Collected, Source, SourceConfig, SourceContext,
    SourceError, StateError,
};
use crate::pods::{PodUse, Pods};
use crate::records::{Batch, Job, Sample};
use chrono::{DateTime, Utc};
use parse::GpuReading;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use wattledger_domain::job_kind::JobKind;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmdExporterConfig {
    pub name: Option<String>,
    /// The exporter's metrics URL, e.g. `http://127.0.0.1:5000/metrics`.
    pub url: String,
    #[serde(default = "default_interval")]
    pub interval_s: f64,
    /// Send every reading as read instead of one record per meter per step (`agent.step_s`).
    #[serde(default)]
    pub raw: bool,
    #[serde(default = "default_gpu_meter")]
    pub gpu_meter: String,
    #[serde(default = "default_socket_meter")]
    pub socket_meter: String,
    #[serde(default = "default_gpu_meter")]
    pub partition_meter: String,
    /// Bits of the GPUs' energy accumulator (see `[[amdsmi]]`).
    #[serde(default = "default_bits")]
    pub counter_bits: u32,
    /// The boards' model; by default the exporter's `card_model` (a part number).
    pub device_model: Option<String>,
    /// Turn pods on GPUs (the exporter's pod labels) into jobs.
    #[serde(default)]
    pub pods: bool,
    /// Namespace → tenant; an unmapped namespace is its own tenant key.
    #[serde(default)]
    pub namespace_tenants: BTreeMap<String, String>,
    #[serde(default = "default_pod_kind")]
    pub pod_kind: JobKind,
}

fn default_interval() -> f64 {
    10.0
}
fn default_bits() -> u32 {
    64
}
fn default_pod_kind() -> JobKind {
    JobKind::Inference
}

impl SourceConfig for AmdExporterConfig {
    fn name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("amd_exporter {}", self.url))
    }

    fn interval(&self) -> std::time::Duration {
        super::interval(self.interval_s)
    }

    fn stepped(&self) -> bool {
        !self.raw
    }

    fn check(&self, context: &SourceContext) -> Result<(), BuildError> {
        context.need_node("amd_exporter")?;
        check_amd(
            &self.name(),
            self.counter_bits,
            &self.socket_meter,
            &self.partition_meter,
        )
    }

    fn build(&self, context: &SourceContext) -> Result<Box<dyn Source>, BuildError> {
        self.check(context)?;
        let client = client_for(None, self.interval_s)?;
        Ok(Box::new(AmdExporterSource::new(
            self.clone(),
            &context.site,
            context.need_node("amd_exporter")?,
            client,
        )))
    }
}

/// What the source carries across restarts: each board's counter and the open pods.
#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    counters: BTreeMap<String, Counter>,
    pods: Pods,
}

pub struct AmdExporterSource {
    config: AmdExporterConfig,
    site: String,
    node: String,
    client: reqwest::Client,
    registered: BTreeSet<String>,
    state: State,
}

impl AmdExporterSource {
    pub fn new(config: AmdExporterConfig, site: &str, node: &str, client: reqwest::Client) -> Self {
        AmdExporterSource {
            config,
            site: site.to_owned(),
            node: node.to_owned(),
            client,
            registered: BTreeSet::new(),
            state: State::default(),
        }
    }

    /// One scrape to records: new meters, one sample per board (from its partition 0), pod
    /// jobs.
    fn records(&mut self, readings: &[GpuReading], now: DateTime<Utc>) -> Collected {
        let logical: Vec<Logical> = readings
            .iter()
            .map(|r| Logical {
                index: r.gpu_id,
                board: r.serial_number.clone(),
                partition: r.partition_id,
                mode: r.partition_type.clone(),
                uuid: None,
                model: self.config.device_model.clone().or(r.card_model.clone()),
            })
            .collect();
        let by_id: BTreeMap<u32, &GpuReading> = readings.iter().map(|r| (r.gpu_id, r)).collect();
        let keys = Keys {
            node: &self.node,
            gpu: &self.config.gpu_meter,
            socket: &self.config.socket_meter,
            partition: &self.config.partition_meter,
        };
        let acc = Accumulator {
            bits: self.config.counter_bits,
        };
        let source = self.config.name();
        let (mut meters, mut samples) = (Vec::new(), Vec::new());
        let mut pods: BTreeMap<String, PodUse> = BTreeMap::new();
        for board in boards(&logical) {
            let key = board.key(keys);
            for m in board.meters(&self.site, keys) {
                if self.registered.insert(m.key.clone()) {
                    meters.push(m);
                }
            }
            if self.config.pods {
                self.pods_on(&board, keys, &by_id, &mut pods);
            }
            let Some(r) = by_id.get(&board.primary.index) else {
                continue;
            };
            let counter_mj = r.energy_mj.map(|energy_mj| {
                let reading = Reading {
                    ts_ms: now.timestamp_millis(),
                    energy_mj,
                    power_mw: r.power_mw,
                };
                let (sent, event) = self
                    .state
                    .counters
                    .entry(key.clone())
                    .or_default()
                    .read(acc, reading);
                if let Some(e) = event {
                    e.log(&source, &key);
                }
                (sent, event.is_some_and(Event::estimated))
            });
            let power_w = r.power_mw.map(|mw| mw as f64 / 1000.0);
            if counter_mj.is_some() || power_w.is_some() {
                samples.push(Sample {
                    meter: key,
                    ts: now,
                    counter_mj: counter_mj.map(|(sent, _)| sent),
                    power_w,
                    peak_w: None,
                    step_s: None,
                    counter_estimated: counter_mj.is_some_and(|(_, estimated)| estimated),
                });
            }
        }
        let jobs: Vec<Job> = if self.config.pods {
            self.state
                .pods
                .observe(pods, None, self.config.pod_kind, now)
        } else {
            Vec::new()
        };
        let state = serde_json::to_value(&self.state).expect("state serializes");
        Collected::new(
            [
                Batch::Meters(meters),
                Batch::Jobs(jobs),
                Batch::Samples(samples),
            ],
            Some(state),
        )
    }

    /// The pods on a board's GPUs: on an unpartitioned board the whole GPU, on a partition
    /// that partition with its share of the board.
    fn pods_on(
        &self,
        board: &Board,
        keys: Keys,
        by_id: &BTreeMap<u32, &GpuReading>,
        seen: &mut BTreeMap<String, PodUse>,
    ) {
        let share = board.partition_share();
        let devices: Vec<(String, u32)> = if board.partitions.is_empty() {
            vec![(board.key(keys), board.primary.index)]
        } else {
            board
                .partitions
                .iter()
                .map(|p| (Board::partition_key(p, keys), p.index))
                .collect()
        };
        for (meter, index) in devices {
            let Some(r) = by_id.get(&index) else {
                continue;
            };
            for p in &r.pods {
                let tenant = self
                    .config
                    .namespace_tenants
                    .get(&p.namespace)
                    .cloned()
                    .unwrap_or_else(|| p.namespace.clone());
                seen.entry(format!("k8s:{}/{}", p.namespace, p.pod))
                    .or_insert_with(|| PodUse {
                        tenant,
                        devices: BTreeMap::new(),
                    })
                    .devices
                    .insert(meter.clone(), share);
            }
        }
    }
}

impl Source for AmdExporterSource {
    fn restore(&mut self, state: serde_json::Value) -> Result<(), StateError> {
        self.state = saved(state)?;
        Ok(())
    }

    fn collect(&mut self, now: DateTime<Utc>) -> BoxFuture<'_, Result<Collected, SourceError>> {
        Box::pin(async move {
            let text = get_text(&self.client, &self.config.url, Auth::None).await?;
            let readings = parse::parse(&text).map_err(|e| SourceError::Parse {
                what: self.config.url.clone(),
                reason: e.to_string(),
            })?;
            Ok(self.records(&readings, now))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal::Decimal;

    fn source() -> AmdExporterSource {
        let config: AmdExporterConfig = toml::from_str(
            "url = \"http://x/metrics\"\npods = true\nnamespace_tenants = { serving = \"acme\" }",
        )
        .unwrap();
        AmdExporterSource::new(config, "fra1", "n1", reqwest::Client::new())
    }

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_790_000_000 + s, 0).unwrap()
    }

    /// Hand-made with the real label set (ROCm/device-metrics-exporter#316): one CPX board
    /// of which the exporter lists four partitions (logical GPUs 8–11), partition 0 the only
    /// one reporting, a pod on partition 2; and an SPX board (GPU 0) with a pod.
    fn scrape(energy_uj: &str) -> String {
        let mut t = String::new();
        let series = |name: &str,
                      id: u32,
                      part: u32,
                      mode: &str,
                      serial: &str,
                      pod: &str,
                      v: &str| {
            let ns = if pod.is_empty() { "" } else { "serving" };
            format!(
                "{name}{{card_model=\"102-G30213-0C\",container=\"\",gpu_compute_partition_type=\"{mode}\",\
                 gpu_id=\"{id}\",gpu_memory_partition_type=\"nps1\",gpu_partition_id=\"{part}\",\
                 hostname=\"h\",job_id=\"\",job_partition=\"\",job_user=\"\",namespace=\"{ns}\",\
                 pod=\"{pod}\",serial_number=\"{serial}\"}} {v}\n"
            )
        };
        t += &series(
            "gpu_energy_consumed",
            0,
            0,
            "spx",
            "692407001111",
            "trainer-0",
            "5e+12",
        );
        t += &series(
            "gpu_package_power",
            0,
            0,
            "spx",
            "692407001111",
            "trainer-0",
            "650",
        );
        t += &series(
            "gpu_energy_consumed",
            8,
            0,
            "cpx",
            "692407005126",
            "",
            energy_uj,
        );
        t += &series("gpu_package_power", 8, 0, "cpx", "692407005126", "", "402");
        for (id, part) in [(9, 1), (10, 2), (11, 3)] {
            let pod = if id == 10 { "llm-0" } else { "" };
            t += &series(
                "gpu_package_power",
                id,
                part,
                "cpx",
                "692407005126",
                pod,
                "0",
            );
        }
        t
    }

    #[test]
    fn a_cpx_board_is_metered_once_and_its_pods_hold_their_share() {
        let mut s = source();
        let c = s.records(&parse::parse(&scrape("1.4292727274e+13")).unwrap(), at(0));
        let Batch::Meters(m) = &c.batches[0] else {
            panic!("{:?}", c.batches)
        };
        let keys: Vec<_> = m
            .iter()
            .map(|m| (m.key.as_str(), m.parent.as_deref()))
            .collect();
        assert_eq!(
            keys,
            [
                ("n1-gpu0", Some("n1")),
                ("n1-socket8", Some("n1")),
                ("n1-gpu8", Some("n1-socket8")),
                ("n1-gpu9", Some("n1-socket8")),
                ("n1-gpu10", Some("n1-socket8")),
                ("n1-gpu11", Some("n1-socket8")),
            ]
        );
        assert_eq!(m[0].device_model.as_deref(), Some("102-G30213-0C"));
        let Batch::Jobs(j) = &c.batches[1] else {
            panic!()
        };
        let llm = j.iter().find(|j| j.key == "k8s:serving/llm-0").unwrap();
        assert_eq!(llm.tenant, "acme");
        assert_eq!(llm.allocations[0].meter, "n1-gpu10");
        assert_eq!(llm.allocations[0].share, Some(Decimal::new(25, 2)));
        let trainer = j.iter().find(|j| j.key == "k8s:serving/trainer-0").unwrap();
        assert_eq!(
            (
                trainer.allocations[0].meter.as_str(),
                trainer.allocations[0].share
            ),
            ("n1-gpu0", None)
        );
        let Batch::Samples(x) = &c.batches[2] else {
            panic!()
        };
        let got: Vec<_> = x
            .iter()
            .map(|s| (s.meter.as_str(), s.counter_mj, s.power_w))
            .collect();
        assert_eq!(
            got,
            [
                ("n1-gpu0", Some(5_000_000_000), Some(650.0)),
                ("n1-socket8", Some(14_292_727_274), Some(402.0)),
            ],
            "the partitions' 0 W and missing energy are not read"
        );
        // Ten seconds on, after an agent restart: the counter carries on from the state.
        let mut again = source();
        again.restore(c.state.unwrap()).unwrap();
        let c = again.records(&parse::parse(&scrape("1.4292731294e+13")).unwrap(), at(10));
        let Batch::Samples(x) = c.batches.last().unwrap() else {
            panic!()
        };
        assert_eq!(x[1].counter_mj, Some(14_292_731_294));
    }

    #[test]
    fn settings_are_checked() {
        let context = SourceContext {
            site: "fra1".into(),
            node: Some("n1".into()),
            node_ip: None,
        };
        let c: AmdExporterConfig =
            toml::from_str("url = \"http://x\"\ncounter_bits = 65\n").unwrap();
        assert!(c
            .check(&context)
            .unwrap_err()
            .to_string()
            .contains("counter_bits"));
        let c: AmdExporterConfig = toml::from_str("url = \"http://x\"\n").unwrap();
        assert!(c.check(&context).is_ok());
    }
}
