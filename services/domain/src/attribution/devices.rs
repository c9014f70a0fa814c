//! Efficiency by GPU generation: a model-serving row's energy and tokens split over the
//! device models its job ran on, by the GPU energy the job drew on each.
//!
//! A job on one device model gives one part, the row itself. A job spanning two (a pool of
//! H100s and H200s) gives its tokens to each by GPU energy: the servers count tokens per
//! pool, not per device, and the GPU that drew more did more of the work. Every split is a
//! largest-remainder split, so the parts of a row add up to it exactly.

use super::{DeviceId, Row};
use crate::split::split;

/// The part of ledger row `row` that ran on device model `device`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceRow {
    /// Index into [`super::Attributed::rows`].
    pub row: usize,
    pub device: DeviceId,
    pub gpu_mj: i64,
    /// The row's total energy (GPU, node and facility overhead, any idle share) on this
    /// device model's part.
    pub total_mj: i64,
    pub prompt_tokens: i64,
    pub generated_tokens: i64,
}

/// Adds `mj` of a job's GPU energy on `device` to its list.
pub(super) fn add(list: &mut Vec<(DeviceId, i64)>, device: DeviceId, mj: i64) {
    match list.iter_mut().find(|(d, _)| *d == device) {
        Some(e) => e.1 += mj,
        None => list.push((device, mj)),
    }
}

/// The parts of every row that has a job serving a model whose GPUs report a device model:
/// `job_devices[j]` is job `j`'s GPU energy per device model.
pub fn by_device(rows: &[Row], job_devices: &[Vec<(DeviceId, i64)>]) -> Vec<DeviceRow> {
    let mut out = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let (Some(j), Some(_)) = (row.job, row.model) else {
            continue;
        };
        let mut devices = job_devices[j].clone();
        devices.sort_unstable_by_key(|d| d.0);
        let weights: Vec<u128> = devices.iter().map(|d| d.1.max(0) as u128).collect();
        if weights.iter().all(|&w| w == 0) {
            continue;
        }
        let gpu = split(row.energy.gpu_mj, &weights);
        let total = split(row.energy.total_mj(), &weights);
        let prompt = split(row.prompt_tokens, &weights);
        let generated = split(row.generated_tokens, &weights);
        for (k, (device, _)) in devices.iter().enumerate() {
            out.push(DeviceRow {
                row: i,
                device: *device,
                gpu_mj: gpu[k],
                total_mj: total[k],
                prompt_tokens: prompt[k],
                generated_tokens: generated[k],
            });
        }
    }
    out
}
