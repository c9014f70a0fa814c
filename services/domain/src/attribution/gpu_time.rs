//! GPU time per device model: what each ledger row held on each device model and what that
//! time costs at the models' GPU-hour rates, so that a month's GPU time can be priced per
//! device model (`crate::chargeback::prices`).
//!
//! A row's parts add up to its `gpu_ms` and `time_price_pico` exactly: they are how those
//! totals are made. Where a job's time is split over tenants (by weighted tokens) or idle
//! GPU time's price over jobs (the proportional policy), each device model's part is split on
//! its own by the same weights, with the largest-remainder method, and the row's totals are
//! the sums of its parts. On one device model that is the split of the total, as before.

use super::DeviceId;
use crate::split::split;

/// One device model's part of a row's GPU time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceTime {
    /// `None` for GPUs whose model is not reported (no rate can apply to them).
    pub device: Option<DeviceId>,
    /// GPU time held on this device model, in ms (0 on idle GPU time's parts).
    pub gpu_ms: i64,
    /// Its price at the model's GPU-hour rate, idle GPU time's share included, in 1e-12 of
    /// the site's currency.
    pub price_pico: i64,
}

/// A row's (or a job's, or idle's) parts, one per device model, in device order.
pub type DeviceTimes = Vec<DeviceTime>;

/// Adds `ms` and `pico` on `device` to `list`, keeping it in device order; nothing to add
/// adds no part.
pub(super) fn add(list: &mut DeviceTimes, device: Option<DeviceId>, ms: i64, pico: i64) {
    if ms == 0 && pico == 0 {
        return;
    }
    match list.binary_search_by_key(&device, |t| t.device) {
        Ok(k) => {
            list[k].gpu_ms += ms;
            list[k].price_pico += pico;
        }
        Err(k) => list.insert(
            k,
            DeviceTime {
                device,
                gpu_ms: ms,
                price_pico: pico,
            },
        ),
    }
}

/// `times` split over parts by `weights`, each device model's ms and price on its own:
/// element k is part k's list.
pub(super) fn split_over(times: &[DeviceTime], weights: &[u128]) -> Vec<DeviceTimes> {
    let mut out = vec![DeviceTimes::new(); weights.len()];
    for t in times {
        let ms = split(t.gpu_ms, weights);
        let pico = split(t.price_pico, weights);
        for (k, part) in out.iter_mut().enumerate() {
            add(part, t.device, ms[k], pico[k]);
        }
    }
    out
}

/// Σ ms and Σ price of a list.
pub(super) fn totals(times: &[DeviceTime]) -> (i64, i64) {
    times
        .iter()
        .fold((0, 0), |(ms, p), t| (ms + t.gpu_ms, p + t.price_pico))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(device: Option<DeviceId>, gpu_ms: i64, price_pico: i64) -> DeviceTime {
        DeviceTime {
            device,
            gpu_ms,
            price_pico,
        }
    }

    #[test]
    fn parts_stay_in_device_order_and_merge() {
        let mut list = DeviceTimes::new();
        add(&mut list, Some(2), 10, 100);
        add(&mut list, None, 5, 0);
        add(&mut list, Some(1), 1, 1);
        add(&mut list, Some(2), 10, 100);
        add(&mut list, Some(3), 0, 0);
        assert_eq!(list, [t(None, 5, 0), t(Some(1), 1, 1), t(Some(2), 20, 200)]);
        assert_eq!(totals(&list), (26, 201));
    }

    #[test]
    fn each_device_model_is_split_on_its_own_and_the_parts_add_up() {
        // 1,001 ms on model 0 and 2 ms on model 1 over two equal holders: model 0's odd ms
        // (and its odd pico) goes to the earlier part.
        let parts = split_over(&[t(Some(0), 1_001, 7), t(Some(1), 2, 0)], &[1, 1]);
        assert_eq!(parts[0], [t(Some(0), 501, 4), t(Some(1), 1, 0)]);
        assert_eq!(parts[1], [t(Some(0), 500, 3), t(Some(1), 1, 0)]);
        let sum = |k: usize| totals(&parts[k]);
        assert_eq!(sum(0).0 + sum(1).0, 1_003);
        assert_eq!(sum(0).1 + sum(1).1, 7);
        // A part with no weight gets nothing, and no empty entry.
        assert_eq!(split_over(&[t(None, 9, 0)], &[0, 1])[0], []);
    }
}
