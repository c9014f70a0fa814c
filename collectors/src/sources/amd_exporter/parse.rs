//! AMD device metrics exporter scrapes (`:5000/metrics`) to per-GPU readings.
//!
//! Facts this relies on (shared/fixtures/amd/SOURCES.md, ROCm/device-metrics-exporter):
//! - `gpu_energy_consumed` is the accumulator in µJ ("Accumulated energy consumed by the GPU
//!   in uJ"), exported as a gauge though it is a running total; `gpu_package_power` is the
//!   current socket power in W (MI3xx), `gpu_power_usage` and `gpu_average_package_power`
//!   what other boards have instead;
//! - every GPU series carries `gpu_id` (the logical GPU's index), `gpu_partition_id` (`NA`
//!   when the driver has none), `gpu_compute_partition_type` (`spx`, `dpx`, `qpx`, `cpx`),
//!   `serial_number` (the board's, the same on each of its partitions), `card_model`,
//!   `hostname`, and `pod`, `namespace`, `container` (empty when no pod holds the GPU);
//! - in a partitioned mode only partition 0 reports power and energy: the others report
//!   0 W and no energy at all, and a zero marks a field unsupported (the exporter's
//!   `markUnsupportedFields`; a Strix Halo reads 0 W, ROCm/device-metrics-exporter#353). So
//!   a zero is no reading here, and the partitions are grouped into their board by the
//!   caller (`amd_board`), never read as GPUs drawing nothing.
//!
//! The exporter holds energy as an f64 and prints its shortest decimal; it is taken as that
//! decimal, exactly, and rounded once to the mJ.

use crate::sources::prom::{self, Sample};
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;
use std::collections::BTreeMap;
use wattledger_domain::units::milliwatts;

/// A Kubernetes container holding the GPU, from the exporter's pod labels.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodRef {
    pub namespace: String,
    pub pod: String,
}

/// What one scrape says about one logical GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuReading {
    pub gpu_id: u32,
    pub partition_id: Option<u32>,
    /// `spx`, `dpx`, `qpx`, `cpx`, lower case; `None` where the exporter says none.
    pub partition_type: Option<String>,
    pub serial_number: Option<String>,
    pub card_model: Option<String>,
    pub energy_mj: Option<i64>,
    pub power_mw: Option<i64>,
    pub pods: Vec<PodRef>,
}

#[derive(Debug, thiserror::Error)]
pub enum AmdExporterError {
    #[error("the scrape is not Prometheus text: {0}")]
    Format(#[from] prom::ParseError),
    #[error("series {metric} has no gpu_id label")]
    NoGpuId { metric: String },
    #[error("series {metric}: gpu_id {value:?} is not an index")]
    BadGpuId { metric: String, value: String },
}

const ENERGY: &str = "gpu_energy_consumed";
/// Power, in the order preferred: the current socket power, then what boards without it have.
const POWER: [&str; 3] = [
    "gpu_package_power",
    "gpu_power_usage",
    "gpu_average_package_power",
];

/// A label's value, where it is set: the exporter writes empty strings and `NA` for unset.
fn label<'a>(s: &'a Sample, name: &str) -> Option<&'a str> {
    s.label(name)
        .filter(|v| !v.is_empty() && !v.eq_ignore_ascii_case("na"))
}

/// The logical GPU a series is about, without its readings.
pub fn gpu_of(s: &Sample) -> Result<GpuReading, AmdExporterError> {
    let id = s.label("gpu_id").ok_or_else(|| AmdExporterError::NoGpuId {
        metric: s.name.clone(),
    })?;
    let gpu_id = id.parse().map_err(|_| AmdExporterError::BadGpuId {
        metric: s.name.clone(),
        value: id.to_owned(),
    })?;
    Ok(GpuReading {
        gpu_id,
        partition_id: label(s, "gpu_partition_id").and_then(|p| p.parse().ok()),
        partition_type: label(s, "gpu_compute_partition_type")
            .filter(|t| !t.eq_ignore_ascii_case("none"))
            .map(str::to_ascii_lowercase),
        serial_number: label(s, "serial_number").map(str::to_owned),
        card_model: label(s, "card_model").map(str::to_owned),
        energy_mj: None,
        power_mw: None,
        pods: Vec::new(),
    })
}

/// µJ as the exporter printed them to whole mJ, rounded half to even; `None` for what is no
/// reading (not finite, negative, zero).
fn microjoules_to_mj(v: f64) -> Option<i64> {
    if !(v.is_finite() && v > 0.0) {
        return None;
    }
    // Rust writes an f64 as its shortest round-trip decimal, as Go wrote it.
    let uj = Decimal::from_str_exact(&v.to_string()).ok()?;
    (uj / Decimal::ONE_THOUSAND).round().to_i64()
}

/// Reads a scrape: one reading per logical GPU, ordered by `gpu_id`. Series repeated for
/// several pods on one GPU are one GPU (the first value read stands) with its pods listed.
pub fn parse(text: &str) -> Result<Vec<GpuReading>, AmdExporterError> {
    let scrape = prom::parse(text)?;
    let mut gpus: BTreeMap<u32, GpuReading> = BTreeMap::new();
    // The power metric each GPU was read from, to prefer the first of `POWER`.
    let mut power_rank: BTreeMap<u32, usize> = BTreeMap::new();
    for s in &scrape.samples {
        let rank = POWER.iter().position(|p| *p == s.name);
        if s.name != ENERGY && rank.is_none() {
            continue;
        }
        let g = gpu_of(s)?;
        let r = gpus.entry(g.gpu_id).or_insert(g);
        if let (Some(namespace), Some(pod)) = (label(s, "namespace"), label(s, "pod")) {
            let p = PodRef {
                namespace: namespace.to_owned(),
                pod: pod.to_owned(),
            };
            if !r.pods.contains(&p) {
                r.pods.push(p);
            }
        }
        match rank {
            None => {
                if r.energy_mj.is_none() {
                    r.energy_mj = microjoules_to_mj(s.value);
                }
            }
            Some(rank) => {
                let mw = milliwatts(s.value).filter(|&mw| mw > 0);
                if mw.is_some() && power_rank.get(&r.gpu_id).is_none_or(|&have| rank < have) {
                    r.power_mw = mw;
                    power_rank.insert(r.gpu_id, rank);
                }
            }
        }
    }
    Ok(gpus.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    /// The label set of a real scrape of a CPX MI300X (ROCm/device-metrics-exporter#316):
    /// logical GPU 14 is partition 6 of the board with serial number 692407005126.
    #[test]
    fn the_real_cpx_label_set() {
        let scrape = prom::parse(&fixtures::amd("dme-pr316-mi300x-cpx-pcie_tx.prom")).unwrap();
        let g = gpu_of(&scrape.samples[0]).unwrap();
        assert_eq!((g.gpu_id, g.partition_id), (14, Some(6)));
        assert_eq!(g.partition_type.as_deref(), Some("cpx"));
        assert_eq!(g.serial_number.as_deref(), Some("692407005126"));
        assert_eq!(g.card_model.as_deref(), Some("102-G30213-0C"));
        assert!(parse(&fixtures::amd("dme-pr316-mi300x-cpx-pcie_tx.prom"))
            .unwrap()
            .is_empty());
    }

    /// A real Strix Halo scrape (ROCm/device-metrics-exporter#353): 0 W is the exporter's
    /// "unsupported", no reading; empty labels are unset.
    #[test]
    fn a_zero_is_no_reading() {
        let r = parse(&fixtures::amd(
            "dme-issue353-strix-halo-average-package-power.prom",
        ))
        .unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(
            (r[0].gpu_id, r[0].power_mw, r[0].energy_mj),
            (0, None, None)
        );
        assert_eq!(
            (
                r[0].serial_number.as_deref(),
                r[0].partition_type.as_deref()
            ),
            (None, None)
        );
    }

    /// The exporter's own small sample (tools/metricutil), in an older label style (upper
    /// case `GPU_UUID`, `SERIAL_NUMBER`, no `gpu_id`): refused by name rather than guessed at.
    #[test]
    fn series_without_gpu_id_are_refused() {
        let e = parse(&fixtures::amd("dme-metricutil-metrics-mini.prom")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "series gpu_average_package_power has no gpu_id label"
        );
    }

    /// Hand-made, with the real label set: a DPX board's two partitions (only partition 0
    /// reports), a pod on partition 1, and an energy value printed in Go's exponent form.
    #[test]
    fn energy_power_and_pods_per_logical_gpu() {
        let l = |id: u32, p: u32, pod: &str| {
            format!(
                "card_model=\"102-G30213-0C\",container=\"\",gpu_compute_partition_type=\"dpx\",\
                 gpu_id=\"{id}\",gpu_memory_partition_type=\"nps1\",gpu_partition_id=\"{p}\",\
                 hostname=\"h\",job_id=\"\",job_partition=\"\",job_user=\"\",namespace=\"{ns}\",\
                 pod=\"{pod}\",serial_number=\"692407005126\"",
                ns = if pod.is_empty() { "" } else { "serving" }
            )
        };
        let text = format!(
            "# HELP gpu_energy_consumed Accumulated energy consumed by the GPU in uJ\n\
             # TYPE gpu_energy_consumed gauge\n\
             gpu_energy_consumed{{{}}} 1.4292727274123e+13\n\
             gpu_package_power{{{}}} 731\n\
             gpu_power_usage{{{}}} 729\n\
             gpu_package_power{{{}}} 0\n",
            l(0, 0, ""),
            l(0, 0, ""),
            l(0, 0, ""),
            l(1, 1, "llm-0"),
        );
        let r = parse(&text).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].energy_mj, Some(14_292_727_274));
        assert_eq!(
            r[0].power_mw,
            Some(731_000),
            "package power before power usage"
        );
        assert_eq!((r[1].energy_mj, r[1].power_mw), (None, None));
        assert_eq!(
            r[1].pods,
            [PodRef {
                namespace: "serving".into(),
                pod: "llm-0".into()
            }]
        );
        assert_eq!(
            microjoules_to_mj(1500.0),
            Some(2),
            "1.5 mJ rounds half to even"
        );
        assert_eq!(microjoules_to_mj(f64::NAN), None);
        assert!(matches!(
            parse("gpu_package_power{gpu_id=\"x\"} 3"),
            Err(AmdExporterError::BadGpuId { .. })
        ));
    }
}
