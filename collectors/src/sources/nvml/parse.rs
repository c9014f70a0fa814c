//! NVML's reads as records, without NVML: GPUs and their MIG instances become meters (once),
//! each board's energy counter and power a sample. NVML has no wire format; this is the pure
//! half of the source, the calls into the driver stay in `mod.rs`.

use super::NvmlConfig;
use crate::records::{Batch, Meter, Sample};
use crate::sources::gpu_meter::meter_key;
use crate::sources::Collected;
use chrono::{DateTime, Utc};
use std::collections::BTreeSet;
use wattledger_domain::meter_kind::MeterKind;

/// What NVML said about one GPU in one read.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuRead {
    pub index: u32,
    pub uuid: String,
    pub name: Option<String>,
    /// `None` where the GPU has no energy counter (before Volta) or NVML refused.
    pub energy_mj: Option<u64>,
    pub power_mw: Option<u32>,
    pub pids: Vec<u32>,
    /// MIG instances, when MIG mode is on.
    pub migs: Vec<MigRead>,
}

/// One MIG instance of a GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct MigRead {
    /// Its position among the GPU's MIG devices.
    pub index: u32,
    pub uuid: String,
    /// The MIG device's name, e.g. `NVIDIA A100-SXM4-40GB MIG 1g.5gb`.
    pub name: Option<String>,
}

/// The profile in a MIG device's name: `… MIG 1g.5gb` → `1g.5gb`.
pub fn mig_profile(name: &str) -> Option<&str> {
    let (_, profile) = name.rsplit_once(" MIG ")?;
    let profile = profile.trim();
    (!profile.is_empty()).then_some(profile)
}

/// One read of all GPUs to records: meters for GPUs not yet registered, one sample each.
/// MIG instances become meters under their GPU; energy stays on the board (NVML has no
/// per-instance energy), and the server splits it among the instances.
pub fn records(
    reads: &[GpuRead],
    site: &str,
    node: &str,
    config: &NvmlConfig,
    registered: &mut BTreeSet<String>,
    now: DateTime<Utc>,
) -> Collected {
    let mut meters = Vec::new();
    let mut samples = Vec::new();
    for g in reads {
        let key = meter_key(&config.gpu_meter, node, g.index, &g.uuid, None);
        if registered.insert(key.clone()) {
            meters.push(Meter::gpu(&key, site, node, &g.uuid, g.name.as_deref()));
        }
        for m in &g.migs {
            let mig_key = meter_key(&config.mig_meter, node, g.index, &m.uuid, Some(m.index));
            if registered.insert(mig_key.clone()) {
                meters.push(Meter {
                    gpu_uuid: Some(m.uuid.clone()),
                    device_model: g.name.clone(),
                    mig_profile: m.name.as_deref().and_then(mig_profile).map(str::to_owned),
                    ..Meter::new(&mig_key, site, MeterKind::Mig, Some(&key))
                });
            }
        }
        let counter_mj = g.energy_mj.and_then(|e| i64::try_from(e).ok());
        let power_w = g.power_mw.map(|mw| f64::from(mw) / 1000.0);
        if counter_mj.is_some() || power_w.is_some() {
            samples.push(Sample {
                meter: key,
                ts: now,
                counter_mj,
                power_w,
                peak_w: None,
                step_s: None,
                counter_estimated: false,
            });
        }
    }
    Collected::new([Batch::Meters(meters), Batch::Samples(samples)], None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_become_meters_once_and_samples_in_mj_and_w() {
        let reads = vec![
            GpuRead {
                index: 0,
                uuid: "GPU-a".into(),
                name: Some("NVIDIA H200".into()),
                energy_mj: Some(123_456_789),
                power_mw: Some(612_345),
                pids: vec![],
                migs: vec![],
            },
            // A pre-Volta board: power only.
            GpuRead {
                index: 1,
                uuid: "GPU-b".into(),
                name: None,
                energy_mj: None,
                power_mw: Some(70_000),
                pids: vec![],
                migs: vec![],
            },
        ];
        let now = DateTime::from_timestamp(1_790_000_000, 0).unwrap();
        let mut reg = BTreeSet::new();
        let b = records(&reads, "fra1", "n1", &config(), &mut reg, now).batches;
        let Batch::Meters(m) = &b[0] else { panic!() };
        assert_eq!(
            (m[0].key.as_str(), m[0].parent.as_deref()),
            ("n1-gpu0", Some("n1"))
        );
        let Batch::Samples(s) = &b[1] else { panic!() };
        assert_eq!(
            (s[0].counter_mj, s[0].power_w),
            (Some(123_456_789), Some(612.345))
        );
        assert_eq!((s[1].counter_mj, s[1].power_w), (None, Some(70.0)));
        let again = records(&reads, "fra1", "n1", &config(), &mut reg, now).batches;
        assert_eq!(again.len(), 1, "registered once");
    }

    fn config() -> NvmlConfig {
        toml::from_str("").unwrap()
    }

    #[test]
    fn mig_instances_are_meters_under_their_gpu_and_energy_stays_on_the_board() {
        // The layout `nvidia-smi -L` shows for an A100 split 3g.20gb + 2 × 1g.5gb.
        let mig = |index: u32, uuid: &str, profile: &str| MigRead {
            index,
            uuid: uuid.into(),
            name: Some(format!("NVIDIA A100-SXM4-40GB MIG {profile}")),
        };
        let reads = vec![GpuRead {
            index: 3,
            uuid: "GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f".into(),
            name: Some("NVIDIA A100-SXM4-40GB".into()),
            energy_mj: Some(9_000_000),
            power_mw: Some(88_000),
            pids: vec![],
            migs: vec![
                mig(0, "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f", "3g.20gb"),
                mig(1, "MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb", "1g.5gb"),
                mig(2, "MIG-1e099852-3624-508c-a4df-eb2d4a5a8ff1", "1g.5gb"),
            ],
        }];
        let now = DateTime::from_timestamp(1_790_000_000, 0).unwrap();
        let mut reg = BTreeSet::new();
        let b = records(&reads, "fra1", "n1", &config(), &mut reg, now).batches;
        let Batch::Meters(m) = &b[0] else { panic!() };
        let keys: Vec<(&str, &str, Option<&str>)> = m
            .iter()
            .map(|m| (m.key.as_str(), m.kind.as_str(), m.parent.as_deref()))
            .collect();
        assert_eq!(
            keys,
            [
                ("n1-gpu3", "gpu", Some("n1")),
                ("n1-gpu3-mig0", "mig", Some("n1-gpu3")),
                ("n1-gpu3-mig1", "mig", Some("n1-gpu3")),
                ("n1-gpu3-mig2", "mig", Some("n1-gpu3")),
            ]
        );
        assert_eq!(m[2].mig_profile.as_deref(), Some("1g.5gb"));
        assert_eq!(
            m[2].gpu_uuid.as_deref(),
            Some("MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb")
        );
        let Batch::Samples(s) = &b[1] else { panic!() };
        assert_eq!(s.len(), 1, "one sample, of the board");
        assert_eq!(s[0].meter, "n1-gpu3");
        assert_eq!(
            mig_profile("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me"),
            Some("1g.10gb+me")
        );
        assert_eq!(mig_profile("NVIDIA H100 80GB HBM3"), None);
    }
}
