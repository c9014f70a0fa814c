//! Rack PDUs over SNMP (v2c, or v1 for old firmware): walks the columns of a vendor profile
//! (`parse`) and turns the mapped outlets into samples of the node meters they
//! feed (`crate::feeds`).
//!
//! The `snmp2` client is synchronous UDP, so each cycle's walk runs on the blocking pool;
//! a lost datagram is retried `retries` times before the cycle fails.

pub mod parse;

use super::{
    saved, BoxFuture, BuildError, Collected, Source, SourceConfig, SourceContext, SourceError,
    StateError,
};
use crate::feeds::Feeds;
use crate::records::Batch;
use crate::units::{self, Unit};
use chrono::{DateTime, Utc};
use parse::{Column, Oid, Profile, Value, Walk};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnmpConfig {
    pub name: Option<String>,
    /// `host` or `host:port` (161 when left out).
    pub target: String,
    pub community: Option<String>,
    pub community_file: Option<PathBuf>,
    /// `2c` (default) or `1`.
    #[serde(default = "default_version")]
    pub version: String,
    /// A built-in vendor profile: `apc-rpdu2`, `apc-rpdu2-device`, `raritan-pdu2`,
    /// `sentry4`, `sentry4-cords`.
    pub profile: Option<String>,
    /// Or the columns of another vendor's table.
    pub columns: Option<CustomColumns>,
    /// Row index (`"3"`, Raritan `"1.3"`, Sentry `"1.1.3"`) → meter key. Several outlets
    /// may feed one meter (a node's A and B feeds): their energy is summed.
    pub outlets: BTreeMap<String, String>,
    #[serde(default = "default_interval")]
    pub interval_s: f64,
    /// Send every reading as read instead of one record per meter per step (`agent.step_s`).
    #[serde(default)]
    pub raw: bool,
    #[serde(default = "default_timeout")]
    pub timeout_s: f64,
    #[serde(default = "default_retries")]
    pub retries: u32,
}

/// A vendor table as data: column OID prefixes with their units.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CustomColumns {
    /// The outlet-name column (DisplayString), for logs.
    pub name: Option<String>,
    pub power: Option<CustomColumn>,
    pub energy: Option<CustomColumn>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CustomColumn {
    pub oid: String,
    pub unit: String,
    /// Sub-identifiers after the row index, e.g. a sensor type (`"5"`).
    pub suffix: Option<String>,
    /// A column with each row's decimal digits, indexed like this one.
    pub digits_oid: Option<String>,
}

fn default_version() -> String {
    "2c".into()
}

fn default_interval() -> f64 {
    30.0
}

fn default_timeout() -> f64 {
    2.0
}

fn default_retries() -> u32 {
    2
}

impl CustomColumn {
    /// The column `[snmp.columns] <kind>` (`power` or `energy`) describes, of the source
    /// `name`.
    fn column(&self, name: &str, kind: &str) -> Result<Column, BuildError> {
        let energy = kind == "energy";
        let invalid = |why: String| BuildError::Invalid {
            name: name.to_owned(),
            setting: format!("columns.{kind}.unit"),
            value: self.unit.clone(),
            why,
        };
        let unit = Unit::parse(&self.unit)
            .ok_or_else(|| invalid(format!("is none of {}", units::NAMES)))?;
        if unit.is_energy() != energy {
            let want = if energy { "an energy" } else { "a power" };
            return Err(invalid(format!("is not {want} unit")));
        }
        let oid = |setting: &str, text: &str| {
            Oid::parse(text).map_err(|error| BuildError::Oid {
                name: name.to_owned(),
                setting: format!("columns.{kind}.{setting}"),
                error,
            })
        };
        let suffix = match &self.suffix {
            Some(s) => oid("suffix", s)?.0,
            None => Vec::new(),
        };
        Ok(Column {
            oid: oid("oid", &self.oid)?,
            suffix,
            unit,
            digits: self
                .digits_oid
                .as_deref()
                .map(|d| oid("digits_oid", d))
                .transpose()?,
        })
    }
}

impl SnmpConfig {
    /// The vendor profile this source reads, or why the config names none.
    pub fn profile(&self) -> Result<Profile, BuildError> {
        let name = self.name();
        match (&self.profile, &self.columns) {
            (Some(p), None) => Profile::built_in(p).ok_or_else(|| BuildError::Invalid {
                name,
                setting: "profile".into(),
                value: p.clone(),
                why: format!("is none of {}", parse::BUILT_IN.join(" ")),
            }),
            (None, Some(c)) => {
                let col = |c: &Option<CustomColumn>, kind| {
                    c.as_ref().map(|c| c.column(&name, kind)).transpose()
                };
                let p = Profile {
                    name: c
                        .name
                        .as_deref()
                        .map(Oid::parse)
                        .transpose()
                        .map_err(|error| BuildError::Oid {
                            name: name.clone(),
                            setting: "columns.name".into(),
                            error,
                        })?,
                    power: col(&c.power, "power")?,
                    energy: col(&c.energy, "energy")?,
                };
                if p.power.is_none() && p.energy.is_none() {
                    return Err(BuildError::Missing {
                        name,
                        setting: "power or energy column",
                        why: Some("[snmp.columns] names neither"),
                    });
                }
                Ok(p)
            }
            _ => Err(BuildError::OneOf {
                name,
                one: "profile = \"…\"",
                other: "[snmp.columns]",
            }),
        }
    }

    pub fn check(&self) -> Result<(), BuildError> {
        self.profile()?;
        if self.outlets.is_empty() {
            return Err(BuildError::Missing {
                name: self.name(),
                setting: "outlets mapped to meters",
                why: None,
            });
        }
        if !matches!(self.version.as_str(), "1" | "2c") {
            return Err(BuildError::Invalid {
                name: self.name(),
                setting: "version".into(),
                value: self.version.clone(),
                why: "is not supported: only \"1\" and \"2c\" (SNMPv3 is not supported yet)".into(),
            });
        }
        if self.community.is_none() && self.community_file.is_none() {
            return Err(BuildError::Missing {
                name: self.name(),
                setting: "community or community_file",
                why: None,
            });
        }
        Ok(())
    }

    fn community(&self) -> Result<String, SourceError> {
        match (&self.community, &self.community_file) {
            (Some(c), _) => Ok(c.clone()),
            (None, Some(f)) => std::fs::read_to_string(f)
                .map(|c| c.trim().to_owned())
                .map_err(|e| SourceError::Unavailable(format!("{}: {e}", f.display()))),
            (None, None) => Err(SourceError::Unavailable("no community".into())),
        }
    }

    fn address(&self) -> String {
        let t = &self.target;
        let has_port = t.rsplit_once(':').is_some_and(|(h, p)| {
            p.parse::<u16>().is_ok() && (!h.contains(':') || h.ends_with(']'))
        });
        if has_port {
            t.clone()
        } else if t.contains(':') && !t.starts_with('[') {
            format!("[{t}]:161")
        } else {
            format!("{t}:161")
        }
    }
}

impl SourceConfig for SnmpConfig {
    fn name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("snmp {}", self.target))
    }

    fn interval(&self) -> std::time::Duration {
        super::interval(self.interval_s)
    }

    fn stepped(&self) -> bool {
        !self.raw
    }

    fn check(&self, _context: &SourceContext) -> Result<(), BuildError> {
        SnmpConfig::check(self)
    }

    fn build(&self, _context: &SourceContext) -> Result<Box<dyn Source>, BuildError> {
        Ok(Box::new(SnmpSource::new(self.clone())?))
    }
}

pub struct SnmpSource {
    config: SnmpConfig,
    profile: Profile,
    feeds: Feeds,
}

impl SnmpSource {
    pub fn new(config: SnmpConfig) -> Result<Self, BuildError> {
        let profile = config.profile()?;
        Ok(SnmpSource {
            config,
            profile,
            feeds: Feeds::default(),
        })
    }
}

/// Bounds a walk of one column, against an agent that never says the column ended.
const MAX_ROWS: usize = 4096;

/// Walks `columns` of the agent at `address`: GETBULK for v2c, GETNEXT for v1.
fn walk(
    address: &str,
    community: &[u8],
    v1: bool,
    timeout: Duration,
    retries: u32,
    columns: &[Oid],
) -> Result<Walk, String> {
    let mut session = if v1 {
        snmp2::SyncSession::new_v1(address, community, Some(timeout), 0)
    } else {
        snmp2::SyncSession::new_v2c(address, community, Some(timeout), 0)
    }
    .map_err(|e| format!("{address}: {e}"))?;
    let mut out = Walk::new();
    for column in columns {
        let mut cursor = column.clone();
        'column: for _ in 0..MAX_ROWS {
            let wire: Vec<u64> = cursor.0.iter().map(|&n| u64::from(n)).collect();
            let start = snmp2::Oid::from(&wire).map_err(|e| format!("{cursor}: {e:?}"))?;
            let mut attempt = 0;
            let pdu = loop {
                let answer = if v1 {
                    session.getnext(&start)
                } else {
                    session.getbulk(&[&start], 0, 32)
                };
                match answer {
                    Ok(pdu) => break pdu,
                    Err(e) if attempt < retries => {
                        tracing::debug!(%address, error = %e, "SNMP request failed; retrying");
                        attempt += 1;
                    }
                    Err(e) => return Err(format!("{address}: walking {column}: {e}")),
                }
            };
            if pdu.error_status != 0 {
                // v1 answers noSuchName (2) past the end of the MIB.
                if v1 && pdu.error_status == 2 {
                    break 'column;
                }
                return Err(format!(
                    "{address}: walking {column}: error-status {}",
                    pdu.error_status
                ));
            }
            let mut advanced = false;
            for (name, value) in pdu.varbinds {
                let Some(ids) = name.iter() else {
                    break 'column;
                };
                let Ok(ids) = ids.map(u32::try_from).collect::<Result<Vec<u32>, _>>() else {
                    break 'column;
                };
                let o = Oid(ids);
                if !o.starts_with(column) || o <= cursor {
                    break 'column;
                }
                let v = match value {
                    snmp2::Value::Integer(n) => Some(Value::Int(n)),
                    snmp2::Value::Counter32(n)
                    | snmp2::Value::Unsigned32(n)
                    | snmp2::Value::Timeticks(n) => Some(Value::Int(i64::from(n))),
                    snmp2::Value::Counter64(n) => i64::try_from(n).ok().map(Value::Int),
                    snmp2::Value::OctetString(b) => {
                        Some(Value::Text(String::from_utf8_lossy(b).into_owned()))
                    }
                    snmp2::Value::EndOfMibView => break 'column,
                    _ => None,
                };
                if let Some(v) = v {
                    out.insert(o.clone(), v);
                }
                cursor = o;
                advanced = true;
            }
            if !advanced {
                break;
            }
        }
    }
    Ok(out)
}

impl Source for SnmpSource {
    fn restore(&mut self, state: serde_json::Value) -> Result<(), StateError> {
        self.feeds = saved(state)?;
        Ok(())
    }

    fn collect(&mut self, now: DateTime<Utc>) -> BoxFuture<'_, Result<Collected, SourceError>> {
        Box::pin(async move {
            let address = self.config.address();
            let community = self.config.community()?;
            let v1 = self.config.version == "1";
            let timeout = Duration::from_secs_f64(self.config.timeout_s.max(0.05));
            let retries = self.config.retries;
            let columns = self.profile.columns();
            let what = address.clone();
            let walked = tokio::task::spawn_blocking(move || {
                walk(
                    &address,
                    community.as_bytes(),
                    v1,
                    timeout,
                    retries,
                    &columns,
                )
            })
            .await
            .map_err(|e| SourceError::Fetch {
                what: what.clone(),
                reason: e.to_string(),
            })?
            .map_err(|reason| SourceError::Fetch {
                what: what.clone(),
                reason,
            })?;
            let named = self.profile.readings(&walked);
            for n in &named {
                if self.config.outlets.contains_key(&n.reading.outlet) {
                    tracing::trace!(outlet = %n.reading.outlet, name = ?n.name, "outlet read");
                }
            }
            let readings: Vec<_> = named.into_iter().map(|n| n.reading).collect();
            let samples = self.feeds.samples(&readings, &self.config.outlets, now);
            let state = serde_json::to_value(&self.feeds).expect("feeds serialize");
            Ok(Collected::new([Batch::Samples(samples)], Some(state)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> SnmpConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn a_config_names_one_profile_with_units_of_the_right_kind() {
        let ok = config(
            "target = \"pdu1\"\ncommunity = \"public\"\nprofile = \"apc-rpdu2\"\noutlets = { \"1\" = \"n1\" }\n",
        );
        ok.check().unwrap();
        assert_eq!(ok.address(), "pdu1:161");
        let custom = config(
            "target = \"10.0.0.9:1161\"\ncommunity = \"c\"\noutlets = { \"1\" = \"n1\" }\n\
             [columns]\npower = { oid = \"1.3.6.1.4.1.99.1.2\", unit = \"0.1kW\" }\n\
             energy = { oid = \"1.3.6.1.4.1.99.1.3\", unit = \"Wh\", suffix = \"8\" }\n",
        );
        let p = custom.profile().unwrap();
        assert_eq!(p.energy.unwrap().suffix, vec![8]);
        assert_eq!(custom.address(), "10.0.0.9:1161");
        let wrong_kind = config(
            "target = \"p\"\ncommunity = \"c\"\noutlets = { \"1\" = \"n1\" }\n\
             [columns]\nenergy = { oid = \"1.3.6\", unit = \"W\" }\n",
        );
        assert!(wrong_kind
            .check()
            .unwrap_err()
            .to_string()
            .contains("not an energy unit"));
        let both = config(
            "target = \"p\"\ncommunity = \"c\"\nprofile = \"sentry4\"\noutlets = { \"1\" = \"n\" }\n\
             [columns]\npower = { oid = \"1.3.6\", unit = \"W\" }\n",
        );
        assert!(both.check().unwrap_err().to_string().contains("not both"));
        let unknown = config(
            "target = \"p\"\ncommunity = \"c\"\nprofile = \"eaton\"\noutlets = { \"1\" = \"n\" }\n",
        );
        assert!(unknown
            .check()
            .unwrap_err()
            .to_string()
            .contains("raritan-pdu2"));
        let v3 = config(
            "target = \"p\"\ncommunity = \"c\"\nversion = \"3\"\nprofile = \"sentry4\"\noutlets = { \"1\" = \"n\" }\n",
        );
        assert!(v3.check().unwrap_err().to_string().contains("SNMPv3"));
        assert_eq!(
            config(
                "target = \"fd00::5\"\ncommunity = \"c\"\nprofile = \"sentry4\"\noutlets = {}\n"
            )
            .address(),
            "[fd00::5]:161"
        );
    }
}
