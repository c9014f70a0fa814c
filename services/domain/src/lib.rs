//! wattledger's domain: the pure logic of metering and attribution.
//!
//! No I/O and no async here: everything takes values and returns values, so it is tested by
//! plain unit tests and property tests. Energy is integer millijoules, splits are exact.

pub mod admission;
pub mod attribution;
pub mod badput;
pub mod breakdown;
pub mod budget;
pub mod budget_alerts;
pub mod cfe;
pub mod chargeback;
pub mod costing;
pub mod demand_response;
pub mod device_model;
pub mod energy;
pub mod headroom;
pub mod input;
pub mod job_kind;
pub mod load_shape;
pub mod meter_kind;
pub mod metrics;
pub mod names;
pub mod peaks;
pub mod phase;
pub mod priority;
pub mod quality;
pub mod rate;
pub mod role;
pub mod signals;
pub mod split;
pub mod step_pack;
pub mod steps;
pub mod tokens;
pub mod units;
pub mod webhooks;

pub use quality::Quality;

#[cfg(test)]
pub(crate) mod fixtures {
    //! Real payloads live in `../shared/fixtures` beside the checkout (see its SOURCES.md);
    //! tests read them from there rather than copying them into the repository.

    use std::path::PathBuf;

    pub fn read(path: &str) -> String {
        let full = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/fixtures")
            .join(path);
        std::fs::read_to_string(&full).unwrap_or_else(|e| {
            panic!(
                "fixture {} (shared/ must sit beside the checkout): {e}",
                full.display()
            )
        })
    }
}
