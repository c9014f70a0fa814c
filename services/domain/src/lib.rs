//! wattledger's domain: the pure logic of metering and attribution.
//!
//! No I/O and no async here: everything takes values and returns values, so it is tested by
//! plain unit tests and property tests. Energy is integer millijoules, splits are exact.

pub mod admission;
pub mod attribution;
pub mod breakdown;
pub mod budget_alerts;
pub mod chargeback;
pub mod costing;
pub mod demand_response;
pub mod energy;
pub mod headroom;
pub mod input;
pub mod job_kind;
pub mod load_shape;
pub mod meter_kind;
pub mod metrics;
pub mod peaks;
pub mod quality;
pub mod signals;
pub mod split;
pub mod steps;
mod text_column;
pub mod tokens;
pub mod units;
pub mod webhooks;

pub use quality::Quality;
