//! NVML on the GPU node: each GPU's energy counter (mJ since driver load, Volta and later)
//! and power as samples, the GPUs as meters, and which job owns each compute process
//! (from `/proc/<pid>/cgroup`) in the log and on `/metrics` for cross-checking allocations.
//!
//! NVML is loaded at run time (`libnvidia-ml.so`): on a machine without the NVIDIA driver the
//! source says so once and the agent's other sources go on.

pub mod cgroup;
pub mod parse;

use super::{BoxFuture, BuildError, Collected, Source, SourceConfig, SourceContext, SourceError};
use chrono::{DateTime, Utc};
use parse::{records, GpuRead, MigRead};
use serde::Deserialize;
use std::collections::BTreeSet;
use std::sync::Arc;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvmlConfig {
    pub name: Option<String>,
    #[serde(default = "default_interval")]
    pub interval_s: f64,
    /// Send every reading as read instead of one record per meter per step (`agent.step_s`).
    #[serde(default)]
    pub raw: bool,
    #[serde(default = "super::gpu_meter::default_gpu_meter")]
    pub gpu_meter: String,
    /// MIG instance meters. NVML's safe API gives no GPU-instance id, so `{gi}` here is the
    /// instance's position on its GPU (DCGM's `GPU_I_ID` may differ); `{uuid}` is the MIG
    /// UUID, which the meter also carries, so allocations by UUID always match.
    #[serde(default = "super::gpu_meter::default_mig_meter")]
    pub mig_meter: String,
    /// Read `/proc/<pid>/cgroup` of GPU processes to name the job that owns each.
    #[serde(default = "yes")]
    pub processes: bool,
}

fn default_interval() -> f64 {
    1.0
}
fn yes() -> bool {
    true
}

impl SourceConfig for NvmlConfig {
    fn name(&self) -> String {
        self.name.clone().unwrap_or_else(|| "nvml".into())
    }

    fn interval(&self) -> std::time::Duration {
        super::interval(self.interval_s)
    }

    fn stepped(&self) -> bool {
        !self.raw
    }

    fn check(&self, context: &SourceContext) -> Result<(), BuildError> {
        context.need_node("nvml").map(drop)
    }

    fn build(&self, context: &SourceContext) -> Result<Box<dyn Source>, BuildError> {
        let node = context.need_node("nvml")?;
        Ok(Box::new(NvmlSource::new(self.clone(), &context.site, node)))
    }
}

pub struct NvmlSource {
    config: NvmlConfig,
    site: String,
    node: String,
    nvml: Option<Arc<nvml_wrapper::Nvml>>,
    registered: BTreeSet<String>,
}

impl NvmlSource {
    pub fn new(config: NvmlConfig, site: &str, node: &str) -> Self {
        NvmlSource {
            config,
            site: site.to_owned(),
            node: node.to_owned(),
            nvml: None,
            registered: BTreeSet::new(),
        }
    }
}

fn read_all(nvml: &nvml_wrapper::Nvml) -> Result<Vec<GpuRead>, nvml_wrapper::error::NvmlError> {
    let mut reads = Vec::new();
    for i in 0..nvml.device_count()? {
        let d = nvml.device_by_index(i)?;
        let mut migs = Vec::new();
        // Not supported (pre-Ampere) and disabled both mean: no MIG instances.
        if d.mig_mode().is_ok_and(|m| m.current == 1) {
            for m in 0..d.mig_device_count().unwrap_or(0) {
                // Slots without an instance answer NotFound.
                let Ok(mig) = d.mig_device_by_index(m) else {
                    continue;
                };
                migs.push(MigRead {
                    index: m,
                    uuid: mig.uuid()?,
                    name: mig.name().ok(),
                });
            }
        }
        reads.push(GpuRead {
            migs,
            index: d.index().unwrap_or(i),
            uuid: d.uuid()?,
            name: d.name().ok(),
            energy_mj: d.total_energy_consumption().ok(),
            power_mw: d.power_usage().ok(),
            pids: d
                .running_compute_processes()
                .map(|ps| ps.iter().map(|p| p.pid).collect())
                .unwrap_or_default(),
        });
    }
    Ok(reads)
}

impl Source for NvmlSource {
    fn collect(&mut self, now: DateTime<Utc>) -> BoxFuture<'_, Result<Collected, SourceError>> {
        Box::pin(async move {
            let nvml = match &self.nvml {
                Some(n) => n.clone(),
                None => {
                    let n = tokio::task::spawn_blocking(nvml_wrapper::Nvml::init)
                        .await
                        .map_err(|e| SourceError::Unavailable(e.to_string()))?
                        .map_err(|e| {
                            SourceError::Unavailable(format!(
                                "NVML could not start ({e}): no NVIDIA driver on this node?"
                            ))
                        })?;
                    let n = Arc::new(n);
                    self.nvml = Some(n.clone());
                    n
                }
            };
            let reads = tokio::task::spawn_blocking(move || read_all(&nvml))
                .await
                .map_err(|e| SourceError::Fetch {
                    what: "NVML".into(),
                    reason: e.to_string(),
                })?
                .map_err(|e| SourceError::Fetch {
                    what: "NVML".into(),
                    reason: e.to_string(),
                })?;
            if self.config.processes {
                for g in &reads {
                    for pid in &g.pids {
                        let owner = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                            .ok()
                            .and_then(|c| cgroup::owner(&c));
                        tracing::debug!(gpu = g.index, uuid = %g.uuid, pid, ?owner, "GPU process");
                    }
                }
            }
            Ok(records(
                &reads,
                &self.site,
                &self.node,
                &self.config,
                &mut self.registered,
                now,
            ))
        })
    }
}
