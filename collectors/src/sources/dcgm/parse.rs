//! dcgm-exporter scrapes (`:9400/metrics`) to per-GPU energy readings.
//!
//! Facts this relies on (shared/fixtures/dcgm/DCGM-NOTES.md): energy is a counter since
//! driver load, in mJ for `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` and in J under the newer
//! DCGM 4.7 names (the unit is read from `# HELP`); power is W. With HPC job mapping, every
//! series of a GPU is repeated once per `hpc_job` with the same value: summing over them
//! would double-count, so a GPU is read once and its jobs listed. MIG instances repeat the
//! parent GPU's device-level energy: they are readings of the same board, kept apart by
//! instance so the caller can apportion, never sum. Values at or above 9.22e18 are DCGM's
//! "blank" sentinel (not supported).

use crate::sources::prom::{self, Scrape};
use std::collections::BTreeMap;

/// A MIG instance of a GPU.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct MigInstance {
    pub gpu_instance_id: u32,
    pub profile: String,
}

/// A Kubernetes container using the GPU, from the exporter's pod attributes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodRef {
    pub namespace: String,
    pub pod: String,
    pub container: Option<String>,
}

/// What one scrape says about one GPU (or one MIG instance of it).
#[derive(Debug, Clone, PartialEq)]
pub struct GpuReading {
    pub uuid: String,
    pub gpu_index: Option<u32>,
    pub hostname: Option<String>,
    pub model_name: Option<String>,
    pub mig: Option<MigInstance>,
    /// Energy counter of the physical GPU since driver load, in mJ.
    pub energy_mj: Option<i64>,
    pub power_w: Option<f64>,
    /// Slurm (or other HPC) jobs mapped to this GPU.
    pub hpc_jobs: Vec<String>,
    pub pods: Vec<PodRef>,
}

#[derive(Debug, thiserror::Error)]
pub enum DcgmError {
    #[error("the scrape is not Prometheus text: {0}")]
    Format(#[from] prom::ParseError),
    #[error("series {metric} has no UUID label")]
    NoUuid { metric: String },
}

const BLANK: f64 = 9.22e18;

/// How a metric is read, by name; `None` for metrics this source ignores.
fn energy_scale_to_mj(name: &str, scrape: &Scrape) -> Option<f64> {
    let is_energy = name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
        || (name.starts_with("DCGM_FI_DEV_") && name.contains("ENERGY"));
    if !is_energy {
        return None;
    }
    let help = scrape
        .help
        .get(name)
        .map(|h| h.to_ascii_lowercase())
        .unwrap_or_default();
    let joules = help.contains("(in j)") || help.contains("joule") || name.ends_with("_JOULES");
    let millijoules = help.contains("(in mj)") || help.contains("millijoule");
    Some(if joules && !millijoules { 1000.0 } else { 1.0 })
}

fn is_power(name: &str) -> bool {
    name == "DCGM_FI_DEV_POWER_USAGE" || name == "DCGM_FI_DEV_BOARD_POWER_WATTS"
}

/// Reads a dcgm-exporter scrape. Readings are ordered by GPU UUID and MIG instance.
pub fn parse(text: &str) -> Result<Vec<GpuReading>, DcgmError> {
    let scrape = prom::parse(text)?;
    let mut by_device: BTreeMap<(String, Option<MigInstance>), GpuReading> = BTreeMap::new();
    for s in &scrape.samples {
        let energy_scale = energy_scale_to_mj(&s.name, &scrape);
        let power = is_power(&s.name);
        if energy_scale.is_none() && !power {
            continue;
        }
        let uuid = s
            .label("UUID")
            .or_else(|| s.label("uuid"))
            .ok_or_else(|| DcgmError::NoUuid {
                metric: s.name.clone(),
            })?
            .to_owned();
        let mig = match (s.label("GPU_I_ID"), s.label("GPU_I_PROFILE")) {
            (Some(id), profile) => id.parse().ok().map(|gpu_instance_id| MigInstance {
                gpu_instance_id,
                profile: profile.unwrap_or_default().to_owned(),
            }),
            _ => None,
        };
        let reading = by_device
            .entry((uuid.clone(), mig.clone()))
            .or_insert_with(|| GpuReading {
                uuid,
                gpu_index: s.label("gpu").and_then(|g| g.parse().ok()),
                hostname: s
                    .label("hostname")
                    .or_else(|| s.label("Hostname"))
                    .map(str::to_owned),
                model_name: s.label("modelName").map(str::to_owned),
                mig,
                energy_mj: None,
                power_w: None,
                hpc_jobs: Vec::new(),
                pods: Vec::new(),
            });
        if let Some(job) = s.label("hpc_job").filter(|j| !j.is_empty()) {
            if !reading.hpc_jobs.iter().any(|j| j == job) {
                reading.hpc_jobs.push(job.to_owned());
            }
        }
        let namespace = s.label("namespace").or_else(|| s.label("pod_namespace"));
        let pod = s.label("pod").or_else(|| s.label("pod_name"));
        if let (Some(namespace), Some(pod)) = (namespace, pod) {
            if !pod.is_empty() {
                let p = PodRef {
                    namespace: namespace.to_owned(),
                    pod: pod.to_owned(),
                    container: s
                        .label("container")
                        .or_else(|| s.label("container_name"))
                        .map(str::to_owned),
                };
                if !reading.pods.contains(&p) {
                    reading.pods.push(p);
                }
            }
        }
        if !s.value.is_finite() || s.value < 0.0 || s.value >= BLANK {
            continue;
        }
        // Repeats per hpc_job carry the same value; the first one read stands.
        if let Some(scale) = energy_scale {
            reading
                .energy_mj
                .get_or_insert((s.value * scale).round() as i64);
        } else {
            reading.power_w.get_or_insert(s.value);
        }
    }
    Ok(by_device.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    #[test]
    fn the_real_exporter_scrape() {
        let readings = parse(&fixtures::read("dcgm/dcgm-exporter-metrics.prom")).unwrap();
        assert_eq!(readings.len(), 1);
        let r = &readings[0];
        assert_eq!(r.uuid, "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e");
        assert_eq!(r.gpu_index, Some(0));
        assert_eq!(r.hostname.as_deref(), Some("424773df46e0"));
        assert_eq!(r.model_name.as_deref(), Some("Tesla T4"));
        assert_eq!(r.energy_mj, Some(128_996_013));
        assert_eq!(r.power_w, Some(8.969));
        assert!(r.mig.is_none() && r.hpc_jobs.is_empty());
    }

    #[test]
    fn hpc_job_repeats_are_one_gpu_with_its_jobs() {
        let text = "\
# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"0\",UUID=\"GPU-a\",hostname=\"n1\",hpc_job=\"101\"} 5000
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"0\",UUID=\"GPU-a\",hostname=\"n1\",hpc_job=\"102\"} 5000
DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",UUID=\"GPU-a\",hostname=\"n1\",hpc_job=\"101\"} 250.5
DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",UUID=\"GPU-a\",hostname=\"n1\",hpc_job=\"102\"} 250.5
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"1\",UUID=\"GPU-b\",hostname=\"n1\",namespace=\"serving\",pod=\"llm-0\",container=\"vllm\"} 7000
";
        let r = parse(text).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].energy_mj, r[0].power_w), (Some(5000), Some(250.5)));
        assert_eq!(r[0].hpc_jobs, vec!["101", "102"]);
        assert_eq!(r[1].pods[0].pod, "llm-0");
        // Energy of the node's GPUs: each board once.
        assert_eq!(r.iter().filter_map(|g| g.energy_mj).sum::<i64>(), 12_000);
    }

    #[test]
    fn mig_instances_joules_and_blank_values() {
        let text = "\
# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in J).
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"0\",UUID=\"GPU-a\",GPU_I_PROFILE=\"3g.40gb\",GPU_I_ID=\"1\",Hostname=\"n1\"} 1234.5
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"0\",UUID=\"GPU-a\",GPU_I_PROFILE=\"3g.40gb\",GPU_I_ID=\"2\",Hostname=\"n1\"} 1234.5
DCGM_FI_DEV_BOARD_POWER_WATTS{gpu=\"0\",UUID=\"GPU-a\",GPU_I_PROFILE=\"3g.40gb\",GPU_I_ID=\"1\"} 9223372036854775794
";
        let r = parse(text).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(
            r[0].mig,
            Some(MigInstance {
                gpu_instance_id: 1,
                profile: "3g.40gb".into()
            })
        );
        assert_eq!(r[0].energy_mj, Some(1_234_500));
        assert_eq!(r[0].hostname.as_deref(), Some("n1"));
        assert_eq!(r[0].power_w, None, "the blank sentinel is not a reading");
    }

    #[test]
    fn a_series_without_uuid_is_an_error() {
        assert!(matches!(
            parse("DCGM_FI_DEV_POWER_USAGE{gpu=\"0\"} 1"),
            Err(DcgmError::NoUuid { .. })
        ));
    }
}
