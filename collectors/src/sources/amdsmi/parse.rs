//! `amd-smi … --json` to readings, without running it: `metric --power --energy` (each GPU's
//! energy counter and socket power) and `list` (which logical GPUs are partitions of one
//! board). `process --json` is read by `process.rs`.
//!
//! What this relies on (shared/fixtures/amd/SOURCES.md):
//! - the output is a list of GPU objects keyed by `gpu` (the logical index), or, in newer
//!   versions, that list under `{"gpu_data": [...]}` beside `cpu_data` (amd_smi_logger.py's
//!   `combine_arrays_to_json`; seen on ROCm 7.0.2, ROCm/amdsmi#134);
//! - a reading is `{"value": …, "unit": …}` (since the CHANGELOG's "Added units of measure
//!   to JSON output"), a bare number before that, or `"N/A"` where the library refused:
//!   a missing reading, never a zero;
//! - `energy.total_energy_consumption` is J rounded to 3 decimals (amdsmi_commands.py:
//!   `round(energy_accumulator * counter_resolution, 3) / 1000000`, rounded to 3 again), so
//!   it is converted to whole mJ exactly, through decimal text, never a float product;
//! - `power.socket_power` is W (the current socket power, or the average where the board has
//!   no current one);
//! - `list` gives each logical GPU's `bdf` and `partition_id`: the partitions of one board
//!   share its PCI domain:bus:device and differ in function (device-metrics-exporter's
//!   `GetPCIeBaseAddress` groups them the same way).

use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;
use serde_json::{Map, Number, Value};
use std::collections::BTreeSet;
use wattledger_domain::units::MAX_POWER_W;

/// What `amd-smi metric` said about one logical GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricRead {
    pub gpu: u32,
    /// The accumulator as energy, mJ; `None` where amd-smi printed `N/A` (a CPX partition
    /// other than 0, a VM guest).
    pub energy_mj: Option<i64>,
    pub power_mw: Option<i64>,
}

/// What `amd-smi list` said about one logical GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    pub gpu: u32,
    /// PCI address, e.g. `0000:0c:00.0`.
    pub bdf: Option<String>,
    pub uuid: Option<String>,
    pub partition_id: Option<u32>,
}

impl Device {
    /// The board this GPU is (a partition of): its PCI address without the function.
    pub fn board(&self) -> Option<&str> {
        let bdf = self.bdf.as_deref()?;
        Some(bdf.rsplit_once('.').map_or(bdf, |(base, _)| base))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AmdSmiError {
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("expected a list of GPUs or {{\"gpu_data\": [...]}}")]
    Shape,
    #[error("entry {at} is not a GPU: no \"gpu\" index")]
    NoIndex { at: usize },
    #[error("gpu {gpu} is listed twice")]
    Twice { gpu: u32 },
    #[error("gpu {gpu}: {field}: {reason}")]
    Field {
        gpu: u32,
        field: &'static str,
        reason: QuantityError,
    },
}

/// Why a reading is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("{0:?} is not a number")]
    NotANumber(String),
    #[error("unit {found:?}, expected {expected}")]
    Unit {
        found: String,
        expected: &'static str,
    },
    #[error("{0} is negative")]
    Negative(Decimal),
    #[error("{0} is out of range")]
    Range(Decimal),
}

/// The GPU objects of an output, bare or under `gpu_data`.
fn gpu_list(text: &str) -> Result<Vec<Value>, AmdSmiError> {
    match serde_json::from_str(text)? {
        Value::Array(list) => Ok(list),
        Value::Object(mut o) => match o.remove("gpu_data") {
            Some(Value::Array(list)) => Ok(list),
            _ => Err(AmdSmiError::Shape),
        },
        _ => Err(AmdSmiError::Shape),
    }
}

/// A GPU object of an output, with its `gpu` index.
type Entry = (u32, Map<String, Value>);

/// Each GPU object with its index, every index once.
fn indexed(list: Vec<Value>) -> Result<Vec<Entry>, AmdSmiError> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(list.len());
    for (at, v) in list.into_iter().enumerate() {
        let Value::Object(o) = v else {
            return Err(AmdSmiError::NoIndex { at });
        };
        let gpu = o
            .get("gpu")
            .and_then(Value::as_u64)
            .and_then(|g| u32::try_from(g).ok())
            .ok_or(AmdSmiError::NoIndex { at })?;
        if !seen.insert(gpu) {
            return Err(AmdSmiError::Twice { gpu });
        }
        out.push((gpu, o));
    }
    Ok(out)
}

/// Reads `amd-smi metric --power --energy --json` (other metric groups in it are ignored).
pub fn metrics(text: &str) -> Result<Vec<MetricRead>, AmdSmiError> {
    indexed(gpu_list(text)?)?
        .into_iter()
        .map(|(gpu, o)| {
            let field = |field, reason| AmdSmiError::Field { gpu, field, reason };
            let energy = quantity(group(&o, "energy", "total_energy_consumption"), "J")
                .map_err(|e| field("energy.total_energy_consumption", e))?;
            let power = quantity(group(&o, "power", "socket_power"), "W")
                .map_err(|e| field("power.socket_power", e))?;
            Ok(MetricRead {
                gpu,
                energy_mj: energy
                    .map(thousandths)
                    .transpose()
                    .map_err(|e| field("energy.total_energy_consumption", e))?,
                power_mw: power
                    .map(milliwatts)
                    .transpose()
                    .map_err(|e| field("power.socket_power", e))?,
            })
        })
        .collect()
}

/// Reads `amd-smi list --json`.
pub fn devices(text: &str) -> Result<Vec<Device>, AmdSmiError> {
    indexed(gpu_list(text)?)?
        .into_iter()
        .map(|(gpu, o)| {
            let text = |k: &str| {
                o.get(k)
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty() && !s.starts_with("N/A"))
                    .map(str::to_owned)
            };
            Ok(Device {
                gpu,
                bdf: text("bdf"),
                uuid: text("uuid"),
                partition_id: o
                    .get("partition_id")
                    .and_then(Value::as_u64)
                    .and_then(|p| u32::try_from(p).ok()),
            })
        })
        .collect()
}

/// `o[group][key]`; a whole group amd-smi could not read is `"N/A"`, which reads as absent.
fn group<'a>(o: &'a Map<String, Value>, group: &str, key: &str) -> Option<&'a Value> {
    o.get(group)?.as_object()?.get(key)
}

/// A reading in `unit`: a number, `{"value": …, "unit": unit}`, or absent (`"N/A"`, null).
fn quantity(v: Option<&Value>, unit: &'static str) -> Result<Option<Decimal>, QuantityError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.starts_with("N/A") => Ok(None),
        Some(Value::Number(n)) => decimal(n).map(Some),
        Some(Value::Object(o)) => {
            match o.get("unit").and_then(Value::as_str) {
                Some(u) if u == unit => {}
                found => {
                    return Err(QuantityError::Unit {
                        found: found.unwrap_or_default().to_owned(),
                        expected: unit,
                    })
                }
            }
            match o.get("value") {
                Some(Value::Object(_)) => Err(QuantityError::NotANumber("{…}".into())),
                value => quantity(value, unit),
            }
        }
        Some(other) => Err(QuantityError::NotANumber(other.to_string())),
    }
}

/// A JSON number as decimal text. serde_json holds a fraction as an f64 (within an ulp of
/// what was written) and writes it back as the shortest text that reads as that f64; to the
/// mJ that is what amd-smi printed, exactly, for any energy under 2⁴² J (the ulp there is
/// half a mJ; 4.4e12 J is 185 years at 750 W), since amd-smi prints whole mJ.
fn decimal(n: &Number) -> Result<Decimal, QuantityError> {
    let text = n.to_string();
    let d = if text.contains(['e', 'E']) {
        Decimal::from_scientific(&text)
    } else {
        Decimal::from_str_exact(&text)
    }
    .map_err(|_| QuantityError::NotANumber(text))?;
    if d.is_sign_negative() && !d.is_zero() {
        return Err(QuantityError::Negative(d));
    }
    Ok(d)
}

/// A decimal in units to thousandths of it (J → mJ, W → mW), rounded half to even.
fn thousandths(d: Decimal) -> Result<i64, QuantityError> {
    d.checked_mul(Decimal::ONE_THOUSAND)
        .map(|m| m.round())
        .and_then(|m| m.to_i64())
        .ok_or(QuantityError::Range(d))
}

fn milliwatts(w: Decimal) -> Result<i64, QuantityError> {
    let mw = thousandths(w)?;
    if mw as f64 > MAX_POWER_W * 1000.0 {
        return Err(QuantityError::Range(w));
    }
    Ok(mw)
}

/// Joules written as decimal text (amd-smi's CSV and text outputs) to mJ, exactly.
pub fn joules_to_mj(text: &str) -> Result<i64, QuantityError> {
    let d = Decimal::from_str_exact(text.trim())
        .map_err(|_| QuantityError::NotANumber(text.to_owned()))?;
    if d.is_sign_negative() {
        return Err(QuantityError::Negative(d));
    }
    thousandths(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use proptest::prelude::*;

    /// The CHANGELOG's `amd-smi metric -p --json` example (a bare list, `{value, unit}`
    /// leaves, no energy group).
    #[test]
    fn the_documented_power_output() {
        let reads = metrics(&fixtures::amd("amdsmi-changelog-metric-power-units.json")).unwrap();
        assert_eq!(
            reads,
            [MetricRead {
                gpu: 0,
                energy_mj: None,
                power_mw: Some(10_000)
            }]
        );
    }

    /// The MI300X's `TOTAL_ENERGY_CONSUMPTION: 14292727.274 J` of the CHANGELOG's text
    /// output, and MI210 readings of ROCm/amdsmi#38's CSV: joules to whole mJ, exactly.
    #[test]
    fn real_energy_values_convert_exactly() {
        let text = fixtures::amd("amdsmi-changelog-mi300x-metric-excerpt.txt");
        let value = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("TOTAL_ENERGY_CONSUMPTION: "))
            .and_then(|v| v.strip_suffix(" J"))
            .unwrap();
        assert_eq!(joules_to_mj(value), Ok(14_292_727_274));
        assert_eq!(joules_to_mj("21111595.33"), Ok(21_111_595_330));
        // As JSON, through serde_json's f64 and back: the same mJ.
        let json = format!(
            r#"[{{"gpu": 0, "energy": {{"total_energy_consumption": {{"value": {value}, "unit": "J"}}}}}}]"#
        );
        assert_eq!(metrics(&json).unwrap()[0].energy_mj, Some(14_292_727_274));
    }

    /// Hand-made, in the shape amd-smi 26.x writes on a CPX MI300X (ROCm/amdsmi#134: the
    /// `gpu_data` envelope; the CHANGELOG's CPX monitor: partitions past 0 read N/A).
    #[test]
    fn the_gpu_data_envelope_bare_numbers_and_missing_readings() {
        let text = r#"{"cpu_data": [], "gpu_data": [
            {"gpu": 0, "power": {"socket_power": {"value": 202, "unit": "W"}},
             "energy": {"total_energy_consumption": {"value": 14292727.274, "unit": "J"}}},
            {"gpu": 1, "power": {"socket_power": "N/A"}, "energy": "N/A"},
            {"gpu": 2, "power": {"socket_power": 140.5},
             "energy": {"total_energy_consumption": 1.5e3}}
        ]}"#;
        let r = metrics(text).unwrap();
        assert_eq!(
            (r[0].energy_mj, r[0].power_mw),
            (Some(14_292_727_274), Some(202_000))
        );
        assert_eq!(
            (r[1].energy_mj, r[1].power_mw),
            (None, None),
            "N/A is absent, not 0"
        );
        assert_eq!(
            (r[2].energy_mj, r[2].power_mw),
            (Some(1_500_000), Some(140_500))
        );
    }

    #[test]
    fn hostile_output_is_refused_by_name() {
        let err = |t: &str| metrics(t).unwrap_err().to_string();
        assert_eq!(
            err("{}"),
            "expected a list of GPUs or {\"gpu_data\": [...]}"
        );
        assert!(err("[{\"gpu\": 0},").starts_with("not JSON"));
        assert_eq!(
            err("[{\"power\": {}}]"),
            "entry 0 is not a GPU: no \"gpu\" index"
        );
        assert_eq!(err("[{\"gpu\": 1}, {\"gpu\": 1}]"), "gpu 1 is listed twice");
        assert_eq!(
            err(
                r#"[{"gpu": 0, "energy": {"total_energy_consumption": {"value": 5, "unit": "kWh"}}}]"#
            ),
            "gpu 0: energy.total_energy_consumption: unit \"kWh\", expected J"
        );
        assert_eq!(
            err(r#"[{"gpu": 0, "energy": {"total_energy_consumption": -1}}]"#),
            "gpu 0: energy.total_energy_consumption: -1 is negative"
        );
        assert_eq!(
            err(r#"[{"gpu": 0, "power": {"socket_power": "lots"}}]"#),
            "gpu 0: power.socket_power: \"\\\"lots\\\"\" is not a number"
        );
        assert!(err(r#"[{"gpu": 0, "power": {"socket_power": 1e12}}]"#).contains("out of range"));
        assert!(
            err(r#"[{"gpu": 0, "energy": {"total_energy_consumption": 1e300}}]"#)
                .contains("energy.total_energy_consumption")
        );
    }

    /// Hand-made `amd-smi list --json` rows in the keys amdsmi_commands.py writes (`bdf`,
    /// `uuid`, `kfd_id`, `node_id`, `partition_id`): two DPX partitions of one board.
    #[test]
    fn list_rows_name_their_board() {
        let d = devices(
            r#"[{"gpu": 0, "bdf": "0000:0c:00.0", "uuid": "5cff74a1-0000-1000-80b7-2b8bdd5de3ac", "kfd_id": 1, "node_id": 2, "partition_id": 0},
                {"gpu": 1, "bdf": "0000:0c:00.1", "uuid": "N/A", "kfd_id": 3, "node_id": 3, "partition_id": 1},
                {"gpu": 2, "bdf": "N/A", "uuid": "", "partition_id": "N/A"}]"#,
        )
        .unwrap();
        assert_eq!(d[0].board(), Some("0000:0c:00"));
        assert_eq!(d[1].board(), d[0].board());
        assert_eq!((d[1].uuid.as_deref(), d[1].partition_id), (None, Some(1)));
        assert_eq!((d[2].board(), d[2].partition_id), (None, None));
    }

    proptest! {
        /// Any J amd-smi can print (3 decimals), through JSON and serde_json's f64, is the
        /// same whole mJ as its text.
        #[test]
        fn three_decimal_joules_survive_json(mj in 0i64..1_000_000_000_000_000) {
            let text = format!("{}.{:03}", mj / 1000, mj % 1000);
            let json = format!(r#"[{{"gpu": 0, "energy": {{"total_energy_consumption": {text}}}}}]"#);
            prop_assert_eq!(joules_to_mj(&text), Ok(mj));
            prop_assert_eq!(metrics(&json).unwrap()[0].energy_mj, Some(mj));
        }
    }
}
