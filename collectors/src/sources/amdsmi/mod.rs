//! AMD GPUs on this node through the `amd-smi` CLI: each board's energy counter and socket
//! power as samples, the boards (and their compute partitions) as meters, and which job owns
//! each GPU process (from `/proc/<pid>/cgroup`) in the log, as for NVML.
//!
//! The CLI rather than `libamd_smi.so`: it is what every ROCm node has, its JSON is
//! documented and versioned, and a new process per read sidesteps the library reading a
//! counter that stands still within one process (ROCm/rocm_smi_lib#180). It runs behind
//! [`Runner`], so the source is tested on captured output without an AMD GPU.

pub mod parse;
pub mod process;

use super::accumulator::{Accumulator, Counter, Event, Reading};
use super::amd_board::{boards, Keys, Logical};
use super::gpu_meter::{default_gpu_meter, default_socket_meter};
use super::nvml::cgroup;
use super::{
    saved, BoxFuture, BuildError, Collected, Source, SourceConfig, SourceContext, SourceError,
    StateError,
};
use crate::records::{Batch, Sample};
use chrono::{DateTime, Utc};
use parse::{Device, MetricRead};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmdSmiConfig {
    pub name: Option<String>,
    /// The `amd-smi` program (a path, or a name on `PATH`).
    #[serde(default = "default_program")]
    pub amd_smi: String,
    /// Each read runs `amd-smi` (a Python program: about a second), so not every second.
    #[serde(default = "default_interval")]
    pub interval_s: f64,
    /// Send every reading as read instead of one record per meter per step (`agent.step_s`).
    #[serde(default)]
    pub raw: bool,
    /// An unpartitioned GPU's meter.
    #[serde(default = "default_gpu_meter")]
    pub gpu_meter: String,
    /// A partitioned board's meter; `{index}` is its partition 0's index.
    #[serde(default = "default_socket_meter")]
    pub socket_meter: String,
    /// A compute partition's meter; `{index}` is its own index, `{gi}` its partition id.
    #[serde(default = "default_gpu_meter")]
    pub partition_meter: String,
    /// Bits of the GPUs' energy accumulator: 64 (the library's) never wraps; 32 for boards
    /// whose firmware counts in 32 bits (gpu_metrics v1.0).
    #[serde(default = "default_bits")]
    pub counter_bits: u32,
    /// The boards' model, e.g. `AMD Instinct MI300X` (`amd-smi list` does not say).
    pub device_model: Option<String>,
    /// Run `amd-smi process --json` and log the job owning each GPU process.
    #[serde(default = "yes")]
    pub processes: bool,
}

fn default_program() -> String {
    "amd-smi".into()
}
fn default_interval() -> f64 {
    5.0
}
fn default_bits() -> u32 {
    64
}
fn yes() -> bool {
    true
}

impl AmdSmiConfig {
    fn accumulator(&self) -> Accumulator {
        Accumulator {
            bits: self.counter_bits,
        }
    }
}

impl SourceConfig for AmdSmiConfig {
    fn name(&self) -> String {
        self.name.clone().unwrap_or_else(|| "amdsmi".into())
    }

    fn interval(&self) -> Duration {
        super::interval(self.interval_s)
    }

    fn stepped(&self) -> bool {
        !self.raw
    }

    fn check(&self, context: &SourceContext) -> Result<(), BuildError> {
        context.need_node("amdsmi")?;
        check_amd(
            &self.name(),
            self.counter_bits,
            &self.socket_meter,
            &self.partition_meter,
        )
    }

    fn build(&self, context: &SourceContext) -> Result<Box<dyn Source>, BuildError> {
        self.check(context)?;
        let runner = AmdSmi {
            program: self.amd_smi.clone(),
            timeout: Duration::from_secs_f64(self.interval_s.clamp(10.0, 60.0)),
        };
        Ok(Box::new(AmdSmiSource::new(
            self.clone(),
            &context.site,
            context.need_node("amdsmi")?,
            Box::new(runner),
        )))
    }
}

/// What the AMD sources' configuration alone shows to be wrong.
pub(crate) fn check_amd(
    name: &str,
    counter_bits: u32,
    socket_meter: &str,
    partition_meter: &str,
) -> Result<(), BuildError> {
    if !(16..=64).contains(&counter_bits) {
        return Err(BuildError::Invalid {
            name: name.to_owned(),
            setting: "counter_bits".into(),
            value: counter_bits.to_string(),
            why: "is not a counter width (16 to 64 bits)".into(),
        });
    }
    if socket_meter == partition_meter {
        return Err(BuildError::Invalid {
            name: name.to_owned(),
            setting: "socket_meter".into(),
            value: socket_meter.to_owned(),
            why: "is partition_meter too: a board and its partition 0 would share a key".into(),
        });
    }
    Ok(())
}

/// Runs `amd-smi` with arguments and returns what it printed. The source's one I/O edge, so
/// tests give it captured output instead.
pub trait Runner: Send + Sync {
    fn run<'a>(&'a self, args: &'a [&'a str]) -> BoxFuture<'a, Result<String, SourceError>>;
}

/// Output beyond this is not amd-smi's (a node of 64 partitions prints some 100 KiB).
const MAX_OUTPUT: usize = 16 << 20;

/// The real `amd-smi`.
struct AmdSmi {
    program: String,
    timeout: Duration,
}

impl Runner for AmdSmi {
    fn run<'a>(&'a self, args: &'a [&'a str]) -> BoxFuture<'a, Result<String, SourceError>> {
        Box::pin(async move {
            let what = || format!("{} {}", self.program, args.join(" "));
            let out = tokio::process::Command::new(&self.program)
                .args(args)
                .kill_on_drop(true)
                .output();
            let out = tokio::time::timeout(self.timeout, out)
                .await
                .map_err(|_| SourceError::Fetch {
                    what: what(),
                    reason: format!("no answer within {:?}", self.timeout),
                })?
                .map_err(|e| {
                    if e.kind() == std::io::ErrorKind::NotFound {
                        SourceError::Unavailable(format!(
                            "{} is not installed or not on PATH: no ROCm on this node?",
                            self.program
                        ))
                    } else {
                        SourceError::Fetch {
                            what: what(),
                            reason: e.to_string(),
                        }
                    }
                })?;
            if !out.status.success() {
                return Err(SourceError::Fetch {
                    what: what(),
                    reason: format!(
                        "{}: {}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr).trim()
                    ),
                });
            }
            if out.stdout.len() > MAX_OUTPUT {
                return Err(SourceError::Parse {
                    what: what(),
                    reason: format!("{} bytes of output: not amd-smi's", out.stdout.len()),
                });
            }
            String::from_utf8(out.stdout).map_err(|e| SourceError::Parse {
                what: what(),
                reason: e.to_string(),
            })
        })
    }
}

const METRIC: &[&str] = &["metric", "--power", "--energy", "--json"];
const LIST: &[&str] = &["list", "--json"];
const PROCESS: &[&str] = &["process", "--json"];

/// How long a failed `amd-smi list` is not retried (the boards are metered meanwhile, each
/// GPU as a board of its own).
const LIST_RETRY: chrono::TimeDelta = chrono::TimeDelta::minutes(10);

pub struct AmdSmiSource {
    config: AmdSmiConfig,
    site: String,
    node: String,
    runner: Box<dyn Runner>,
    /// What `amd-smi list` said, by index, and when it was last asked.
    devices: BTreeMap<u32, Device>,
    listed_at: Option<DateTime<Utc>>,
    registered: BTreeSet<String>,
    /// Each board's counter, by meter key (the source's spooled state).
    counters: BTreeMap<String, Counter>,
}

impl AmdSmiSource {
    pub fn new(config: AmdSmiConfig, site: &str, node: &str, runner: Box<dyn Runner>) -> Self {
        AmdSmiSource {
            config,
            site: site.to_owned(),
            node: node.to_owned(),
            runner,
            devices: BTreeMap::new(),
            listed_at: None,
            registered: BTreeSet::new(),
            counters: BTreeMap::new(),
        }
    }

    fn keys(&self) -> Keys<'_> {
        Keys {
            node: &self.node,
            gpu: &self.config.gpu_meter,
            socket: &self.config.socket_meter,
            partition: &self.config.partition_meter,
        }
    }

    /// Asks `amd-smi list` again when a GPU it did not list appears (first of all, at the
    /// first read); a failure is logged and the GPUs are metered as boards of their own.
    async fn learn_devices(&mut self, reads: &[MetricRead], now: DateTime<Utc>) {
        let unknown = reads.iter().any(|r| !self.devices.contains_key(&r.gpu));
        if !unknown || self.listed_at.is_some_and(|t| now - t < LIST_RETRY) {
            return;
        }
        self.listed_at = Some(now);
        let listed = match self.runner.run(LIST).await {
            Ok(text) => parse::devices(&text).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match listed {
            Ok(devices) => self.devices = devices.into_iter().map(|d| (d.gpu, d)).collect(),
            Err(e) => tracing::warn!(
                source = %self.config.name(),
                error = %e,
                "amd-smi list failed: partitions are not known, each GPU is metered as a board"
            ),
        }
    }

    /// Logs the job owning each GPU process, as the NVML source does.
    async fn log_processes(&self) {
        let listed = match self.runner.run(PROCESS).await {
            Ok(text) => process::processes(&text).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match listed {
            Ok(procs) => {
                for p in procs {
                    let owner = std::fs::read_to_string(format!("/proc/{}/cgroup", p.pid))
                        .ok()
                        .and_then(|c| cgroup::owner(&c));
                    tracing::debug!(gpu = p.gpu, pid = p.pid, ?owner, "GPU process");
                }
            }
            Err(e) => tracing::debug!(error = %e, "amd-smi process failed"),
        }
    }

    /// One read to records: meters not yet registered, one sample per board (its partition
    /// 0's reading, the board's), the counters carried on in the state.
    fn records(&mut self, reads: &[MetricRead], now: DateTime<Utc>) -> Collected {
        let logical: Vec<Logical> = reads
            .iter()
            .map(|r| {
                let d = self.devices.get(&r.gpu);
                Logical {
                    index: r.gpu,
                    board: d.and_then(Device::board).map(str::to_owned),
                    partition: d.and_then(|d| d.partition_id),
                    mode: None,
                    uuid: d.and_then(|d| d.uuid.clone()),
                    model: self.config.device_model.clone(),
                }
            })
            .collect();
        let by_index: BTreeMap<u32, &MetricRead> = reads.iter().map(|r| (r.gpu, r)).collect();
        let (mut meters, mut samples) = (Vec::new(), Vec::new());
        let source = self.config.name();
        for board in boards(&logical) {
            let keys = self.keys();
            let key = board.key(keys);
            for m in board.meters(&self.site, keys) {
                if self.registered.insert(m.key.clone()) {
                    meters.push(m);
                }
            }
            let Some(read) = by_index.get(&board.primary.index) else {
                continue;
            };
            let counter_mj = read.energy_mj.map(|energy_mj| {
                let reading = Reading {
                    ts_ms: now.timestamp_millis(),
                    energy_mj,
                    power_mw: read.power_mw,
                };
                let (sent, event) = self
                    .counters
                    .entry(key.clone())
                    .or_default()
                    .read(self.config.accumulator(), reading);
                if let Some(e) = event {
                    e.log(&source, &key);
                }
                (sent, event.is_some_and(Event::estimated))
            });
            let power_w = read.power_mw.map(|mw| mw as f64 / 1000.0);
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
        let state = serde_json::to_value(&self.counters).expect("counters serialize");
        Collected::new(
            [Batch::Meters(meters), Batch::Samples(samples)],
            Some(state),
        )
    }
}

impl Source for AmdSmiSource {
    fn restore(&mut self, state: serde_json::Value) -> Result<(), StateError> {
        self.counters = saved(state)?;
        Ok(())
    }

    fn collect(&mut self, now: DateTime<Utc>) -> BoxFuture<'_, Result<Collected, SourceError>> {
        Box::pin(async move {
            let text = self.runner.run(METRIC).await?;
            let reads = parse::metrics(&text).map_err(|e| SourceError::Parse {
                what: format!("{} {}", self.config.amd_smi, METRIC.join(" ")),
                reason: e.to_string(),
            })?;
            self.learn_devices(&reads, now).await;
            if self.config.processes {
                self.log_processes().await;
            }
            Ok(self.records(&reads, now))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Captured outputs in place of `amd-smi`: each command's next answer, in turn.
    struct Captured(Mutex<BTreeMap<String, Vec<Result<String, String>>>>);

    impl Captured {
        fn new(answers: &[(&[&str], Result<&str, &str>)]) -> Box<Self> {
            let mut m: BTreeMap<String, Vec<Result<String, String>>> = BTreeMap::new();
            for (args, a) in answers {
                m.entry(args.join(" "))
                    .or_default()
                    .push(a.map(str::to_owned).map_err(str::to_owned));
            }
            Box::new(Captured(Mutex::new(m)))
        }
    }

    impl Runner for Captured {
        fn run<'a>(&'a self, args: &'a [&'a str]) -> BoxFuture<'a, Result<String, SourceError>> {
            let next = self
                .0
                .lock()
                .unwrap()
                .get_mut(&args.join(" "))
                .filter(|a| !a.is_empty())
                .map(|a| a.remove(0));
            Box::pin(async move {
                match next {
                    Some(Ok(text)) => Ok(text),
                    Some(Err(reason)) => Err(SourceError::Fetch {
                        what: args.join(" "),
                        reason,
                    }),
                    None => Err(SourceError::Fetch {
                        what: args.join(" "),
                        reason: "nothing captured".into(),
                    }),
                }
            })
        }
    }

    fn source(extra: &str, runner: Box<dyn Runner>) -> AmdSmiSource {
        let config: AmdSmiConfig = toml::from_str(&format!("processes = false\n{extra}")).unwrap();
        AmdSmiSource::new(config, "fra1", "n1", runner)
    }

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_790_000_000 + s, 0).unwrap()
    }

    /// Hand-made outputs of a node with one SPX MI300X and one in DPX, in the shapes the
    /// parsers' tests read from real outputs.
    const LIST_TEXT: &str = r#"{"gpu_data": [
        {"gpu": 0, "bdf": "0000:0c:00.0", "uuid": "a0ff74a1-0000-1000-80c5-6b2fa1a8f4a1", "partition_id": 0},
        {"gpu": 1, "bdf": "0000:22:00.0", "uuid": "b1ff74a1-0000-1000-8041-e4e1d5b33db6", "partition_id": 0},
        {"gpu": 2, "bdf": "0000:22:00.1", "uuid": "b2ff74a1-0000-1000-8041-e4e1d5b33db6", "partition_id": 1}]}"#;

    fn metric(e0: &str, e1: &str) -> String {
        format!(
            r#"{{"gpu_data": [
            {{"gpu": 0, "power": {{"socket_power": {{"value": 140, "unit": "W"}}}},
             "energy": {{"total_energy_consumption": {{"value": {e0}, "unit": "J"}}}}}},
            {{"gpu": 1, "power": {{"socket_power": {{"value": 600, "unit": "W"}}}},
             "energy": {{"total_energy_consumption": {{"value": {e1}, "unit": "J"}}}}}},
            {{"gpu": 2, "power": {{"socket_power": "N/A"}}, "energy": "N/A"}}]}}"#
        )
    }

    #[tokio::test]
    async fn a_partitioned_board_is_sampled_once_under_its_socket() {
        let m0 = metric("14292727.274", "9000000.5");
        let m1 = metric("14292728.674", "9000006.5");
        let runner = Captured::new(&[(METRIC, Ok(&m0)), (METRIC, Ok(&m1)), (LIST, Ok(LIST_TEXT))]);
        let mut s = source("device_model = \"AMD Instinct MI300X\"", runner);
        let c = s.collect(at(0)).await.unwrap();
        let Batch::Meters(m) = &c.batches[0] else {
            panic!("{:?}", c.batches)
        };
        let keys: Vec<_> = m
            .iter()
            .map(|m| (m.key.as_str(), m.kind.as_str(), m.parent.as_deref()))
            .collect();
        assert_eq!(
            keys,
            [
                ("n1-gpu0", "gpu", Some("n1")),
                ("n1-socket1", "gpu", Some("n1")),
                ("n1-gpu1", "mig", Some("n1-socket1")),
                ("n1-gpu2", "mig", Some("n1-socket1")),
            ]
        );
        assert_eq!(m[0].device_model.as_deref(), Some("AMD Instinct MI300X"));
        let Batch::Samples(x) = &c.batches[1] else {
            panic!()
        };
        let got: Vec<_> = x
            .iter()
            .map(|s| (s.meter.as_str(), s.counter_mj, s.power_w))
            .collect();
        assert_eq!(
            got,
            [
                ("n1-gpu0", Some(14_292_727_274), Some(140.0)),
                ("n1-socket1", Some(9_000_000_500), Some(600.0)),
            ],
            "partition 1's N/A is not a zero, and no sample goes to a partition"
        );
        // The agent restarts: the counters come back from the state and carry on.
        let mut again = source(
            "",
            Captured::new(&[(METRIC, Ok(&m1)), (LIST, Ok(LIST_TEXT))]),
        );
        again.restore(c.state.unwrap()).unwrap();
        let c = again.collect(at(10)).await.unwrap();
        let Batch::Samples(x) = c.batches.last().unwrap() else {
            panic!()
        };
        assert_eq!(x[1].counter_mj, Some(9_000_006_500));
    }

    #[tokio::test]
    async fn without_a_list_each_gpu_is_a_board_and_metering_goes_on() {
        let m0 = metric("1.000", "2.000");
        let runner = Captured::new(&[(METRIC, Ok(&m0)), (LIST, Err("amd-smi: exit 1"))]);
        let mut s = source("", runner);
        let c = s.collect(at(0)).await.unwrap();
        let Batch::Samples(x) = c.batches.last().unwrap() else {
            panic!()
        };
        let meters: Vec<_> = x.iter().map(|s| s.meter.as_str()).collect();
        assert_eq!(meters, ["n1-gpu0", "n1-gpu1"]);
    }

    #[tokio::test]
    async fn a_failed_read_is_an_error_and_bad_output_a_parse_error() {
        let mut s = source("", Captured::new(&[(METRIC, Err("exit status: 1"))]));
        assert!(matches!(
            s.collect(at(0)).await,
            Err(SourceError::Fetch { .. })
        ));
        let mut s = source("", Captured::new(&[(METRIC, Ok("N/A"))]));
        let e = s.collect(at(0)).await.unwrap_err().to_string();
        assert!(
            e.starts_with("reading amd-smi metric --power --energy --json: not JSON"),
            "{e}"
        );
    }

    #[test]
    fn settings_are_checked() {
        let context = SourceContext {
            site: "fra1".into(),
            node: Some("n1".into()),
            node_ip: None,
        };
        let bad = |t: &str| {
            toml::from_str::<AmdSmiConfig>(t)
                .unwrap()
                .check(&context)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            bad("counter_bits = 8"),
            "amdsmi: counter_bits \"8\" is not a counter width (16 to 64 bits)"
        );
        assert!(bad("socket_meter = \"{node}-gpu{index}\"").contains("share a key"));
        let no_node = SourceContext {
            site: "fra1".into(),
            node: None,
            node_ip: None,
        };
        let ok: AmdSmiConfig = toml::from_str("").unwrap();
        assert!(ok.check(&no_node).is_err() && ok.check(&context).is_ok());
    }

    /// The real `amd-smi` is run by the agent; where there is none, the source says so.
    #[tokio::test]
    async fn a_node_without_amd_smi_is_unavailable() {
        let runner = AmdSmi {
            program: "/nonexistent/amd-smi".into(),
            timeout: Duration::from_secs(5),
        };
        assert!(matches!(
            runner.run(METRIC).await,
            Err(SourceError::Unavailable(_))
        ));
    }
}
