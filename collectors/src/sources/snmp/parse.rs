//! Rack PDUs over SNMP: vendor tables of outlet (or input cord) power and energy, read from a
//! walk of the table's columns.
//!
//! A vendor is data, not code: a [`Profile`] names the columns (OID prefixes), the unit of
//! each, and where the row index ends (Raritan appends the sensor type after it) or where a
//! per-row decimal-digits column lives. Built-in profiles (facts from
//! shared/fixtures/pdu/PDU-NOTES.md and the vendors' MIBs):
//!
//! - `apc-rpdu2` — PowerNet-MIB `rPDU2OutletMeteredStatusTable`: power W, energy 0.1 kWh,
//!   row = outlet number;
//! - `apc-rpdu2-device` — `rPDU2DeviceStatusTable`: power 0.01 kW, energy 0.1 kWh, row = PDU;
//! - `raritan-pdu2` — PDU2-MIB `measurementsOutletSensorValue.{pdu}.{outlet}.{type}`, type 5
//!   active power (W) and 8 active energy (Wh), each scaled by
//!   `outletSensorDecimalDigits` at the same index; row = `pdu.outlet`;
//! - `sentry4` — Sentry4-MIB `st4OutletMonitorTable`: power W, energy Wh,
//!   row = `unit.cord.outlet`;
//! - `sentry4-cords` — `st4InputCordMonitorTable`: power W, energy 0.1 kWh, row = `unit.cord`.
//!
//! Negative values are the vendors' "not supported" (-1) and read as absent.

use crate::feeds::OutletReading;
use crate::units::Unit;
use std::collections::BTreeMap;
use std::fmt;

/// An object identifier as its sub-identifiers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Oid(pub Vec<u32>);

/// Text that is not an OID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OidError {
    #[error("an empty OID")]
    Empty,
    #[error("{0:?} is not a dotted OID")]
    NotDotted(String),
}

impl Oid {
    /// Dotted sub-identifiers, a leading dot allowed (`.1.3.6.1`).
    pub fn parse(text: &str) -> Result<Oid, OidError> {
        let t = text.trim().trim_start_matches('.');
        if t.is_empty() {
            return Err(OidError::Empty);
        }
        t.split('.')
            .map(|p| {
                p.parse::<u32>()
                    .map_err(|_| OidError::NotDotted(text.to_owned()))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Oid)
    }

    pub fn starts_with(&self, prefix: &Oid) -> bool {
        self.0.starts_with(&prefix.0)
    }
}

impl fmt::Display for Oid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(u32::to_string).collect();
        write!(f, "{}", parts.join("."))
    }
}

/// A value a walk returned.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(i64),
    Text(String),
}

/// Everything a walk of the profile's columns returned.
pub type Walk = BTreeMap<Oid, Value>;

/// One column of a vendor table.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub oid: Oid,
    /// Sub-identifiers after the row index (Raritan's sensor type); usually empty.
    pub suffix: Vec<u32>,
    pub unit: Unit,
    /// A column holding each row's decimal digits, indexed like this one.
    pub digits: Option<Oid>,
}

/// A vendor table: the columns a walk reads, and how to make readings of them.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub name: Option<Oid>,
    pub power: Option<Column>,
    pub energy: Option<Column>,
}

fn oid(s: &str) -> Oid {
    Oid::parse(s).expect("a built-in profile's OID")
}

fn unit(s: &str) -> Unit {
    Unit::parse(s).expect("a built-in profile's unit")
}

fn column(prefix: &str, suffix: &[u32], u: &str, digits: Option<&str>) -> Option<Column> {
    Some(Column {
        oid: oid(prefix),
        suffix: suffix.to_vec(),
        unit: unit(u),
        digits: digits.map(oid),
    })
}

/// The names of the built-in profiles.
pub const BUILT_IN: &[&str] = &[
    "apc-rpdu2",
    "apc-rpdu2-device",
    "raritan-pdu2",
    "sentry4",
    "sentry4-cords",
];

impl Profile {
    pub fn built_in(name: &str) -> Option<Profile> {
        const APC: &str = "1.3.6.1.4.1.318.1.1.26";
        const RARITAN: &str = "1.3.6.1.4.1.13742.6";
        const SENTRY: &str = "1.3.6.1.4.1.1718.4.1";
        Some(match name {
            "apc-rpdu2" => Profile {
                name: Some(oid(&format!("{APC}.9.4.3.1.3"))),
                power: column(&format!("{APC}.9.4.3.1.7"), &[], "W", None),
                energy: column(&format!("{APC}.9.4.3.1.11"), &[], "0.1kWh", None),
            },
            "apc-rpdu2-device" => Profile {
                name: None,
                power: column(&format!("{APC}.4.3.1.5"), &[], "0.01kW", None),
                energy: column(&format!("{APC}.4.3.1.9"), &[], "0.1kWh", None),
            },
            "raritan-pdu2" => {
                let value = format!("{RARITAN}.5.4.3.1.4");
                let digits = format!("{RARITAN}.3.5.4.1.7");
                Profile {
                    name: Some(oid(&format!("{RARITAN}.3.5.3.1.3"))),
                    power: column(&value, &[5], "W", Some(&digits)),
                    energy: column(&value, &[8], "Wh", Some(&digits)),
                }
            }
            "sentry4" => Profile {
                name: Some(oid(&format!("{SENTRY}.8.2.1.3"))),
                power: column(&format!("{SENTRY}.8.3.1.7"), &[], "W", None),
                energy: column(&format!("{SENTRY}.8.3.1.14"), &[], "Wh", None),
            },
            "sentry4-cords" => Profile {
                name: None,
                power: column(&format!("{SENTRY}.3.3.1.3"), &[], "W", None),
                energy: column(&format!("{SENTRY}.3.3.1.10"), &[], "0.1kWh", None),
            },
            _ => return None,
        })
    }

    /// The OID prefixes to walk: each column once.
    pub fn columns(&self) -> Vec<Oid> {
        let mut v: Vec<Oid> = Vec::new();
        let cols = [&self.power, &self.energy];
        let all = self.name.iter().cloned().chain(
            cols.into_iter()
                .flatten()
                .flat_map(|c| std::iter::once(c.oid.clone()).chain(c.digits.clone())),
        );
        for o in all {
            if !v.contains(&o) {
                v.push(o);
            }
        }
        v
    }

    /// Row index → outlet reading. Rows come from the power and energy columns; a row with
    /// neither value supported is left out.
    pub fn readings(&self, walk: &Walk) -> Vec<Named> {
        let mut rows: BTreeMap<Vec<u32>, Named> = BTreeMap::new();
        for (col, is_energy) in [(&self.power, false), (&self.energy, true)] {
            let Some(col) = col else { continue };
            for (o, v) in walk.range(col.oid.clone()..) {
                if !o.starts_with(&col.oid) {
                    break;
                }
                let rest = &o.0[col.oid.0.len()..];
                let Some(index) = rest.strip_suffix(col.suffix.as_slice()) else {
                    continue;
                };
                if index.is_empty() {
                    continue;
                }
                let Value::Int(raw) = v else { continue };
                let row = rows.entry(index.to_vec()).or_insert_with(|| Named {
                    reading: OutletReading {
                        outlet: dotted(index),
                        power_w: None,
                        energy_mj: None,
                    },
                    name: self.name_of(walk, index),
                });
                if *raw < 0 {
                    continue;
                }
                let digits = col
                    .digits
                    .as_ref()
                    .and_then(|d| {
                        match walk.get(&Oid([d.0.as_slice(), index, &col.suffix].concat())) {
                            Some(Value::Int(n)) if (0..=9).contains(n) => Some(*n as u32),
                            _ => None,
                        }
                    })
                    .unwrap_or(0);
                if is_energy {
                    row.reading.energy_mj = col.unit.millijoules_scaled(*raw, digits);
                } else {
                    row.reading.power_w = col.unit.watts_scaled(*raw, digits);
                }
            }
        }
        rows.into_values()
            .filter(|r| r.reading.power_w.is_some() || r.reading.energy_mj.is_some())
            .collect()
    }

    fn name_of(&self, walk: &Walk, index: &[u32]) -> Option<String> {
        let name = self.name.as_ref()?;
        match walk.get(&Oid([name.0.as_slice(), index].concat()))? {
            Value::Text(t) if !t.is_empty() => Some(t.clone()),
            _ => None,
        }
    }
}

/// An outlet's reading with the name the PDU gives it (for logs and `--check-config`).
#[derive(Debug, Clone, PartialEq)]
pub struct Named {
    pub reading: OutletReading,
    pub name: Option<String>,
}

fn dotted(index: &[u32]) -> String {
    Oid(index.to_vec()).to_string()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::fixtures;

    /// An snmpsim recording (`OID|tag|value`) as a walk. Tags: 2 INTEGER, 4 OCTET STRING
    /// (`4x` hex), 65 Counter32, 66 Gauge32, 67 TimeTicks, 70 Counter64; a tag with a
    /// variation (`2:numeric`) carries its parameters instead of a value and is skipped.
    pub fn snmprec(text: &str) -> Walk {
        let mut w = Walk::new();
        for line in text.lines() {
            let mut parts = line.splitn(3, '|');
            let (Some(o), Some(tag), Some(v)) = (parts.next(), parts.next(), parts.next()) else {
                continue;
            };
            let Ok(o) = Oid::parse(o) else { continue };
            let value = match tag {
                "2" | "65" | "66" | "67" | "70" => v.parse().ok().map(Value::Int),
                "4" => Some(Value::Text(v.to_owned())),
                "4x" => (0..v.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(v.get(i..i + 2)?, 16).ok())
                    .collect::<Option<Vec<u8>>>()
                    .map(|b| Value::Text(String::from_utf8_lossy(&b).into_owned())),
                _ => None,
            };
            if let Some(value) = value {
                w.insert(o, value);
            }
        }
        w
    }

    fn recording(name: &str) -> Walk {
        snmprec(&fixtures::read(&format!("pdu/snmprec/{name}.snmprec")))
    }

    #[test]
    fn apc_ap8641_outlets_in_watts_and_tenths_of_a_kwh() {
        let p = Profile::built_in("apc-rpdu2").unwrap();
        let r = p.readings(&recording("apc-ap8641"));
        assert_eq!(r.len(), 24);
        // PDU-NOTES: 24 outlets summing to 1117 W and 2187.5 kWh.
        let watts: f64 = r.iter().filter_map(|n| n.reading.power_w).sum();
        let mj: i64 = r.iter().filter_map(|n| n.reading.energy_mj).sum();
        assert_eq!(watts, 1117.0);
        assert_eq!(mj, 21_875 * 360_000_000);
        assert_eq!(r[0].reading.outlet, "1");
        assert_eq!(
            r[0].name.as_deref(),
            Some("CP-CM-SAN-01"),
            "hex names decoded"
        );
        assert_eq!(r[2].name.as_deref(), Some("CPDXDCVHOST02"));
    }

    #[test]
    fn apc_device_level_and_the_unsupported_minus_one() {
        let p = Profile::built_in("apc-rpdu2-device").unwrap();
        let r = p.readings(&recording("apc-ap8641"));
        assert_eq!(r.len(), 1);
        // 121 hundredths of a kW, 19516 tenths of a kWh.
        assert_eq!(r[0].reading.power_w, Some(1210.0));
        assert_eq!(r[0].reading.energy_mj, Some(19_516 * 360_000_000));
        // AP7902B answers -1 for both: no reading at all, and no outlet table.
        assert!(p.readings(&recording("apc-ap7902b")).is_empty());
        let outlets = Profile::built_in("apc-rpdu2").unwrap();
        assert!(outlets.readings(&recording("apc-ap7902b")).is_empty());
    }

    #[test]
    fn raritan_values_scale_by_their_decimal_digits() {
        let p = Profile::built_in("raritan-pdu2").unwrap();
        let w = recording("raritan-px2");
        let r = p.readings(&w);
        assert_eq!(r.len(), 12, "{r:?}");
        assert_eq!(r[1].reading.outlet, "1.2");
        assert_eq!(r[1].name.as_deref(), Some("OUTLET2"));
        // The recording holds no active energy (LibreNMS does not poll it).
        assert!(r.iter().all(|n| n.reading.energy_mj.is_none()));
        let recorded: Vec<i64> = (1..=12)
            .map(|o| {
                match w.get(&Oid::parse(&format!("1.3.6.1.4.1.13742.6.5.4.3.1.4.1.{o}.5")).unwrap())
                {
                    Some(Value::Int(n)) => *n,
                    _ => panic!("outlet {o} has active power"),
                }
            })
            .collect();
        let read: Vec<i64> = r
            .iter()
            .map(|n| n.reading.power_w.unwrap() as i64)
            .collect();
        assert_eq!(read, recorded, "0 decimal digits: W as recorded");

        // Hand-made: current-style digits apply to power too when the PDU says so.
        let mut w = Walk::new();
        let v = |s: &str| Oid::parse(s).unwrap();
        w.insert(v("1.3.6.1.4.1.13742.6.5.4.3.1.4.1.3.5"), Value::Int(12_345));
        w.insert(v("1.3.6.1.4.1.13742.6.3.5.4.1.7.1.3.5"), Value::Int(1));
        w.insert(
            v("1.3.6.1.4.1.13742.6.5.4.3.1.4.1.3.8"),
            Value::Int(7_000_500),
        );
        w.insert(v("1.3.6.1.4.1.13742.6.3.5.4.1.7.1.3.8"), Value::Int(0));
        let r = p.readings(&w);
        assert_eq!(r[0].reading.power_w, Some(1234.5));
        assert_eq!(r[0].reading.energy_mj, Some(7_000_500 * 3_600_000));
    }

    #[test]
    fn sentry4_input_cord_in_tenths_of_a_kwh() {
        let w = recording("sentry4");
        let r = Profile::built_in("sentry4-cords").unwrap().readings(&w);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].reading.outlet, "1.1");
        assert_eq!(r[0].reading.power_w, Some(1701.0));
        assert_eq!(r[0].reading.energy_mj, Some(8_937 * 360_000_000));
        assert!(Profile::built_in("sentry4")
            .unwrap()
            .readings(&w)
            .is_empty());
    }

    #[test]
    fn every_built_in_profile_exists_and_walks_distinct_columns() {
        for name in BUILT_IN {
            let p = Profile::built_in(name).unwrap();
            let cols = p.columns();
            let mut dedup = cols.clone();
            dedup.dedup();
            assert_eq!(cols, dedup);
            assert!(p.power.is_some() || p.energy.is_some());
        }
        assert!(Profile::built_in("eaton").is_none());
        assert!(Oid::parse(".1.3.x").is_err());
        assert_eq!(Oid::parse(".1.3.6").unwrap().to_string(), "1.3.6");
    }
}
