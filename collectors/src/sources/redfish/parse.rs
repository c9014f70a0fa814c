//! Redfish rack PDUs: outlets (`/redfish/v1/PowerEquipment/RackPDUs/{id}/Outlets/{id}`) and
//! sensors (`/redfish/v1/Chassis/{id}/Sensors/{id}`) to power and energy readings.
//!
//! Facts (shared/fixtures/pdu/PDU-NOTES.md, DMTF schemas): an outlet embeds sensor excerpts
//! `PowerWatts.Reading` (W) and `EnergykWh.Reading` (kWh since the metrics were last reset);
//! `LifetimeReading`, where present, is never reset and is preferred. A Sensor's unit follows
//! its `ReadingType` (`EnergykWh` kWh, `EnergyWh` Wh, `EnergyJoules` J, `Power` W). Outlets
//! without metering carry neither excerpt and are skipped.

use serde_json::Value;

pub const MJ_PER_KWH: f64 = 3.6e9;

/// One outlet's reading.
#[derive(Debug, Clone, PartialEq)]
pub struct OutletReading {
    pub id: String,
    /// The outlet's `@odata.id`, the stable name a config maps to a node meter.
    pub uri: String,
    pub power_w: Option<f64>,
    /// Energy register in mJ; `lifetime` says whether it survives `ResetMetrics`.
    pub energy_mj: Option<i64>,
    pub lifetime: bool,
    pub powered_on: Option<bool>,
}

#[derive(Debug, thiserror::Error)]
pub enum RedfishError {
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("not a {expected} resource (@odata.type {found})")]
    WrongType {
        expected: &'static str,
        found: String,
    },
}

fn reading(v: &Value, field: &str) -> Option<f64> {
    v.get(field)?
        .as_f64()
        .filter(|x| x.is_finite() && *x >= 0.0)
}

fn check_type(doc: &Value, expected: &'static str) -> Result<(), RedfishError> {
    let found = doc
        .get("@odata.type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if found.starts_with(&format!("#{expected}.")) {
        Ok(())
    } else {
        Err(RedfishError::WrongType {
            expected,
            found: found.to_owned(),
        })
    }
}

/// Reads an Outlet; `Ok(None)` for an outlet without metering.
pub fn parse_outlet(json: &str) -> Result<Option<OutletReading>, RedfishError> {
    let doc: Value = serde_json::from_str(json)?;
    check_type(&doc, "Outlet")?;
    let power_w = doc.get("PowerWatts").and_then(|p| reading(p, "Reading"));
    let energy = doc.get("EnergykWh");
    let lifetime_kwh = energy.and_then(|e| reading(e, "LifetimeReading"));
    let kwh = lifetime_kwh.or_else(|| energy.and_then(|e| reading(e, "Reading")));
    if power_w.is_none() && kwh.is_none() {
        return Ok(None);
    }
    Ok(Some(OutletReading {
        id: doc
            .get("Id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        uri: doc
            .get("@odata.id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        power_w,
        energy_mj: kwh.map(|k| (k * MJ_PER_KWH).round() as i64),
        lifetime: lifetime_kwh.is_some(),
        powered_on: doc
            .get("PowerState")
            .and_then(Value::as_str)
            .map(|s| s == "On"),
    }))
}

/// A Sensor's reading, in the unit this service uses.
#[derive(Debug, Clone, PartialEq)]
pub enum SensorReading {
    EnergyMj(i64),
    PowerW(f64),
}

/// Reads a Sensor; `Ok(None)` for sensors that are neither energy nor power, or unread.
pub fn parse_sensor(json: &str) -> Result<Option<SensorReading>, RedfishError> {
    let doc: Value = serde_json::from_str(json)?;
    check_type(&doc, "Sensor")?;
    let value = reading(&doc, "LifetimeReading").or_else(|| reading(&doc, "Reading"));
    let Some(value) = value else { return Ok(None) };
    Ok(match doc.get("ReadingType").and_then(Value::as_str) {
        Some("EnergykWh") => Some(SensorReading::EnergyMj((value * MJ_PER_KWH).round() as i64)),
        Some("EnergyWh") => Some(SensorReading::EnergyMj((value * 3.6e6).round() as i64)),
        Some("EnergyJoules") => Some(SensorReading::EnergyMj((value * 1000.0).round() as i64)),
        Some("Power") => Some(SensorReading::PowerW(value)),
        _ => None,
    })
}

/// The members of a collection (`Outlets`, `RackPDUs`): their `@odata.id`s.
pub fn members(json: &str) -> Result<Vec<String>, RedfishError> {
    let doc: Value = serde_json::from_str(json)?;
    Ok(doc
        .get("Members")
        .and_then(Value::as_array)
        .map(|m| {
            m.iter()
                .filter_map(|x| x.get("@odata.id")?.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    #[test]
    fn the_mockup_outlet() {
        let o = parse_outlet(&fixtures::read("pdu/redfish-rackpdu-1-outlet-A1.json"))
            .unwrap()
            .unwrap();
        assert_eq!(o.id, "A1");
        assert_eq!(o.uri, "/redfish/v1/PowerEquipment/RackPDUs/1/Outlets/A1");
        assert_eq!(o.power_w, Some(197.4));
        // 36166 kWh since the last reset.
        assert_eq!(o.energy_mj, Some(36_166 * 3_600_000_000));
        assert!(!o.lifetime);
        assert_eq!(o.powered_on, Some(true));
    }

    #[test]
    fn every_outlet_of_the_mockup_pdu() {
        let list = members(&fixtures::read(
            "pdu/redfish/public-pdu/PowerEquipment/RackPDUs/1/Outlets/index.json",
        ))
        .unwrap();
        assert_eq!(list.len(), 11, "{list:?}");
        let mut unmetered = Vec::new();
        for uri in list {
            let path = format!(
                "pdu/redfish/public-pdu{}/index.json",
                uri.trim_start_matches("/redfish/v1")
            );
            match parse_outlet(&fixtures::read(&path)).unwrap() {
                Some(o) => {
                    assert_eq!(o.uri, uri);
                    assert!(o.power_w.is_some() && o.energy_mj.is_some());
                }
                None => unmetered.push(uri.rsplit('/').next().unwrap().to_owned()),
            }
        }
        // The mockup's A4 and A5 have no metering: skipped, not read as zero.
        assert_eq!(unmetered, vec!["A4", "A5"]);
    }

    #[test]
    fn sensors_by_reading_type() {
        let e = parse_sensor(&fixtures::read("pdu/redfish-sensor-EnergyA1.json")).unwrap();
        assert!(matches!(e, Some(SensorReading::EnergyMj(mj)) if mj > 0));
        let p = parse_sensor(&fixtures::read("pdu/redfish-sensor-PowerA1.json")).unwrap();
        assert!(matches!(p, Some(SensorReading::PowerW(w)) if w > 0.0));
        let joules = r##"{"@odata.type":"#Sensor.v1_12_0.Sensor","ReadingType":"EnergyJoules","Reading":5.5,"LifetimeReading":12.25}"##;
        assert_eq!(
            parse_sensor(joules).unwrap(),
            Some(SensorReading::EnergyMj(12_250))
        );
    }

    #[test]
    fn unmetered_outlets_are_skipped_and_other_resources_refused() {
        let bare = r##"{"@odata.type":"#Outlet.v1_4_4.Outlet","Id":"X","PowerState":"On"}"##;
        assert_eq!(parse_outlet(bare).unwrap(), None);
        let lifetime = r##"{"@odata.type":"#Outlet.v1_4_4.Outlet","Id":"Y","EnergykWh":{"Reading":1,"LifetimeReading":2.5}}"##;
        let o = parse_outlet(lifetime).unwrap().unwrap();
        assert_eq!((o.energy_mj, o.lifetime), (Some(9_000_000_000), true));
        assert!(matches!(
            parse_outlet(&fixtures::read("pdu/redfish-rackpdu-1.json")),
            Err(RedfishError::WrongType { .. })
        ));
    }
}
