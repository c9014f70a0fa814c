//! A scrape's mapped series as samples: one per meter, each series' value in its configured
//! unit turned into mW or mJ.

use super::Mapping;
use crate::records::Sample;
use crate::sources::prom;
use crate::units::Unit;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

/// Several series of a scrape match one mapping: summing or choosing would both be guesses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{count} series of {metric} match the labels {labels:?} for meter {meter}: name more labels"
)]
pub struct Ambiguous {
    pub count: usize,
    pub metric: String,
    pub labels: BTreeMap<String, String>,
    pub meter: String,
}

/// Picks the mapped series out of a scrape, one sample per meter. Negative values are the
/// vendors' "not supported" (-1) and are skipped; two series matching one mapping are an
/// error, since summing or choosing would both be guesses.
pub fn samples(
    scrape: &prom::Scrape,
    map: &[Mapping],
    now: DateTime<Utc>,
) -> Result<Vec<Sample>, Ambiguous> {
    let mut by_meter: BTreeMap<&str, Sample> = BTreeMap::new();
    for m in map {
        let Some(u) = Unit::parse(&m.unit) else {
            continue;
        };
        let matching: Vec<&prom::Sample> = scrape
            .samples
            .iter()
            .filter(|s| s.name == m.metric && m.labels.iter().all(|(k, v)| s.label(k) == Some(v)))
            .collect();
        if matching.len() > 1 {
            return Err(Ambiguous {
                count: matching.len(),
                metric: m.metric.clone(),
                labels: m.labels.clone(),
                meter: m.meter.clone(),
            });
        }
        let Some(s) = matching.first() else { continue };
        if !s.value.is_finite() || s.value < 0.0 {
            continue;
        }
        let sample = by_meter.entry(&m.meter).or_insert_with(|| Sample {
            meter: m.meter.clone(),
            ts: now,
            counter_mj: None,
            power_w: None,
            peak_w: None,
            step_s: None,
            counter_estimated: false,
        });
        if u.is_energy() {
            sample.counter_mj = u.millijoules(s.value);
        } else {
            sample.power_w = u.watts(s.value);
        }
    }
    Ok(by_meter.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use crate::sources::exporter::ExporterConfig;

    fn config(text: &str) -> ExporterConfig {
        toml::from_str(text).unwrap()
    }

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_790_000_000, 0).unwrap()
    }

    #[test]
    fn ipmi_exporter_power_of_a_bmc() {
        let c = config(
            "url = \"http://x\"\n[[map]]\nmetric = \"ipmi_power_watts\"\nlabels = { id = \"1\" }\nmeter = \"n1\"\nunit = \"W\"\n",
        );
        let scrape = prom::parse(&fixtures::read(
            "pdu/prometheus/ipmi_exporter-ipmi_sim-default.prom",
        ))
        .unwrap();
        let s = samples(&scrape, &c.map, now()).unwrap();
        assert_eq!(
            (s[0].meter.as_str(), s[0].power_w, s[0].counter_mj),
            ("n1", Some(1840.0), None)
        );
    }

    #[test]
    fn snmp_exporter_apc_outlet_in_tenths_of_kwh_rises() {
        let c = config(
            "url = \"http://x\"\n\
             [[map]]\nmetric = \"rPDU2OutletMeteredStatusEnergy\"\nlabels = { rPDU2OutletMeteredStatusIndex = \"1\" }\nmeter = \"n1\"\nunit = \"0.1kWh\"\n\
             [[map]]\nmetric = \"rPDU2OutletMeteredStatusPower\"\nlabels = { rPDU2OutletMeteredStatusIndex = \"1\" }\nmeter = \"n1\"\nunit = \"W\"\n",
        );
        c.check().unwrap();
        let read = |f: &str| {
            let scrape = prom::parse(&fixtures::read(&format!("pdu/prometheus/{f}"))).unwrap();
            samples(&scrape, &c.map, now()).unwrap().remove(0)
        };
        let t0 = read("snmp_exporter-apc_rpdu2_fast-t0.prom");
        let t10 = read("snmp_exporter-apc_rpdu2_fast-t10s.prom");
        let (e0, e10) = (t0.counter_mj.unwrap(), t10.counter_mj.unwrap());
        assert_eq!(e0 % 360_000_000, 0, "whole tenths of a kWh");
        assert!(e10 > e0, "the fast recording's counter rises: {e0} → {e10}");
        assert!(t0.power_w.unwrap() > 0.0);
    }

    #[test]
    fn unsupported_and_ambiguous_series() {
        let scrape = prom::parse("pwr{o=\"1\"} -1\npwr{o=\"2\"} 5\n").unwrap();
        let map = |labels: &str| {
            config(&format!(
                "url = \"http://x\"\n[[map]]\nmetric = \"pwr\"\nlabels = {labels}\nmeter = \"n\"\nunit = \"W\"\n"
            ))
            .map
        };
        assert!(samples(&scrape, &map("{ o = \"1\" }"), now())
            .unwrap()
            .is_empty());
        let e = samples(&scrape, &map("{}"), now()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "2 series of pwr match the labels {} for meter n: name more labels"
        );
        let bad =
            config("url = \"http://x\"\n[[map]]\nmetric = \"p\"\nmeter = \"n\"\nunit = \"kVA\"\n");
        assert!(bad.check().unwrap_err().to_string().contains("kVA"));
        let twice = config(
            "url = \"http://x\"\n[[map]]\nmetric = \"a\"\nmeter = \"n\"\nunit = \"Wh\"\n[[map]]\nmetric = \"b\"\nmeter = \"n\"\nunit = \"kWh\"\n",
        );
        assert!(twice
            .check()
            .unwrap_err()
            .to_string()
            .contains("two mappings"));
    }
}
