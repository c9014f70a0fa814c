//! The PDU sources against the real peers of `shared/pdu-lab` (snmpsim with recorded PDUs,
//! net-snmp snmpd with a programmable outlet table, sushy-static serving the DMTF Redfish
//! mockup, snmp_exporter and ipmi_exporter against them): rising counters, a reset, an
//! unsupported value.
//!
//! `tests/run` starts the lab (`bash ../shared/pdu-lab/start.sh`); these tests read its
//! `endpoints.env`, and without it skip (fail under `tests/run`), saying how to start it. Each test edits a
//! lab file of its own (outlets.json, one Redfish outlet, the BMC's watts), so they run in
//! parallel; run one test binary against one lab at a time.

use chrono::Utc;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use wattledger_agent::records::{Batch, Sample};
use wattledger_agent::sources::exporter::{ExporterConfig, ExporterSource};
use wattledger_agent::sources::redfish::{RedfishConfig, RedfishSource};
use wattledger_agent::sources::snmp::{SnmpConfig, SnmpSource};
use wattledger_agent::sources::Source;

mod peers;

/// The lab's endpoints, or `None` (the test skips) when it is not running.
fn lab() -> Option<BTreeMap<String, String>> {
    let run = std::env::var("PDU_LAB_RUN").unwrap_or_else(|_| "/tmp/pdu-lab".into());
    let path = PathBuf::from(run).join("endpoints.env");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) => {
            return peers::missing(
                &format!("the PDU lab is not running ({}: {e})", path.display()),
                "start it with `bash ../shared/pdu-lab/start.sh`",
            )
        }
    };
    let env: BTreeMap<String, String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
        .collect();
    // A stopped lab leaves its endpoints file: ask its Redfish server whether it is up.
    let redfish = env
        .get("PDU_LAB_REDFISH")
        .map_or("", |u| u.trim_start_matches("http://"));
    let up = redfish.parse().is_ok_and(|addr| {
        std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
    });
    if !up {
        return peers::missing(
            &format!("the PDU lab is not running (nothing answers at {redfish})"),
            "start it with `bash ../shared/pdu-lab/start.sh`",
        );
    }
    Some(env)
}

async fn collect(source: &mut dyn Source) -> Vec<Sample> {
    let c = source.collect(Utc::now()).await.expect("the lab answers");
    c.batches
        .into_iter()
        .flat_map(|b| match b {
            Batch::Samples(s) => s,
            other => panic!("a PDU source sent {other:?}"),
        })
        .collect()
}

fn by_meter(s: &[Sample]) -> BTreeMap<String, Sample> {
    s.iter().map(|s| (s.meter.clone(), s.clone())).collect()
}

fn snmp(text: &str) -> SnmpSource {
    let c: SnmpConfig = toml::from_str(text).unwrap();
    c.check().unwrap();
    SnmpSource::new(c).unwrap()
}

const DKWH_MJ: i64 = 360_000_000;

#[tokio::test]
async fn snmp_recorded_apc_counter_rises_in_tenths_of_a_kwh() {
    let Some(env) = lab() else { return };
    let mut s = snmp(&format!(
        "target = \"{}\"\ncommunity = \"apc-ap8641-fast\"\nprofile = \"apc-rpdu2\"\n\
         outlets = {{ \"1\" = \"node-1\", \"2\" = \"node-2\", \"3\" = \"node-2\" }}\n",
        env["PDU_LAB_SNMPSIM"]
    ));
    let first = by_meter(&collect(&mut s).await);
    assert_eq!(first.len(), 2);
    assert_eq!(
        first["node-1"].counter_mj,
        Some(0),
        "the first reading is the baseline"
    );
    let w1 = first["node-1"].power_w.unwrap();
    assert!(w1 > 0.0, "outlet 1 draws power in the recording");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let second = by_meter(&collect(&mut s).await);
    let grown = second["node-1"].counter_mj.unwrap();
    // The fast recording adds P·Δt·3600 J: 2.5 s at ~163 W is about 4 tenths of a kWh, in
    // whole tenths.
    assert!(grown >= DKWH_MJ, "the counter rose: {grown} mJ");
    assert_eq!(grown % DKWH_MJ, 0, "whole tenths of a kWh");
    assert!(second["node-2"].counter_mj.unwrap() >= 0);
}

#[tokio::test]
async fn snmp_unsupported_minus_one_gives_no_sample_and_device_level_reads() {
    let Some(env) = lab() else { return };
    let target = &env["PDU_LAB_SNMPSIM"];
    let mut unsupported = snmp(&format!(
        "target = \"{target}\"\ncommunity = \"apc-ap7902b\"\nprofile = \"apc-rpdu2-device\"\n\
         outlets = {{ \"1\" = \"pdu\" }}\n"
    ));
    assert!(collect(&mut unsupported).await.is_empty());
    let mut device = snmp(&format!(
        "target = \"{target}\"\ncommunity = \"apc-ap8932\"\nprofile = \"apc-rpdu2-device\"\n\
         outlets = {{ \"1\" = \"pdu\" }}\n"
    ));
    let s = collect(&mut device).await;
    assert_eq!(s.len(), 1);
    assert!(s[0].power_w.is_some() && s[0].counter_mj == Some(0));
    let mut cords = snmp(&format!(
        "target = \"{target}\"\ncommunity = \"sentry4\"\nprofile = \"sentry4-cords\"\n\
         outlets = {{ \"1.1\" = \"rack\" }}\n"
    ));
    assert_eq!(collect(&mut cords).await[0].power_w, Some(1701.0));
}

#[tokio::test]
async fn snmp_dual_fed_node_survives_a_reset_of_one_feed() {
    let Some(env) = lab() else { return };
    let outlets = PathBuf::from(&env["PDU_LAB_SNMPD_OUTLETS_JSON"]);
    let write = |json: serde_json::Value| {
        std::fs::write(&outlets, json.to_string()).unwrap();
    };
    // Power and energy readings of -1 on outlet 3 are the vendor's "not supported".
    write(serde_json::json!({
        "1": {"name": "gpu-node-01 PSU1", "watts": 1000, "energy_dkwh": 10000},
        "2": {"name": "gpu-node-01 PSU2", "watts": 1000, "energy_dkwh": 20000},
        "3": {"name": "unmetered", "watts": -1, "energy_dkwh": -1},
    }));
    // snmpd's pass_persist rereads the file when its mtime changes; give it a tick.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut s = snmp(&format!(
        "target = \"{}\"\ncommunity = \"fakepdu\"\nprofile = \"apc-rpdu2\"\ntimeout_s = 3\n\
         outlets = {{ \"1\" = \"gpu-node-01\", \"2\" = \"gpu-node-01\", \"3\" = \"switch-01\" }}\n",
        env["PDU_LAB_SNMPD"]
    ));
    let first = by_meter(&collect(&mut s).await);
    assert!(
        !first.contains_key("switch-01"),
        "-1 is not a reading: {first:?}"
    );
    assert_eq!(
        first["gpu-node-01"].power_w,
        Some(2000.0),
        "both feeds summed"
    );
    assert_eq!(first["gpu-node-01"].counter_mj, Some(0));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = collect(&mut s).await[0].counter_mj.unwrap();
    assert!(
        before > 0,
        "2 kW at 3600× speed adds tenths of a kWh every second"
    );

    // PSU2's register is reset to 0 (the PDU's "reset energy"): the node's counter must not
    // go down, and must not jump by the old register either.
    write(serde_json::json!({
        "1": {"name": "gpu-node-01 PSU1", "watts": 1000, "energy_dkwh": 10000},
        "2": {"name": "gpu-node-01 PSU2", "watts": 1000, "energy_dkwh": 0},
        "3": {"name": "unmetered", "watts": -1, "energy_dkwh": -1},
    }));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let after = collect(&mut s).await[0].counter_mj.unwrap();
    assert!(
        after >= before,
        "monotonic across a feed reset: {before} → {after}"
    );
    let step = after - before;
    assert!(
        step < 20_000 * DKWH_MJ,
        "the old register (20000 tenths) was not counted again: step {step} mJ"
    );
}

#[tokio::test]
async fn redfish_outlet_reads_and_a_reset_register_keeps_the_counter_monotonic() {
    let Some(env) = lab() else { return };
    let file = PathBuf::from(&env["PDU_LAB_REDFISH_ROOT"])
        .join("PowerEquipment/RackPDUs/1/Outlets/A1/index.json");
    let original = std::fs::read_to_string(&file).unwrap();
    let set_kwh = |kwh: f64| {
        let mut doc: serde_json::Value = serde_json::from_str(&original).unwrap();
        doc["EnergykWh"]["Reading"] = serde_json::json!(kwh);
        std::fs::write(&file, doc.to_string()).unwrap();
    };
    let config: RedfishConfig = toml::from_str(&format!(
        "url = \"{}/redfish/v1/PowerEquipment/RackPDUs/1\"\noutlets = {{ A1 = \"node-a1\", A4 = \"node-a4\" }}\n",
        env["PDU_LAB_REDFISH"]
    ))
    .unwrap();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let mut s = RedfishSource::new(config, http);
    // Whatever happens, the lab's mockup is left as it was.
    let _restore = Restore(file.clone(), original.clone());
    set_kwh(100.0);
    let first = collect(&mut s).await;
    assert_eq!(first.len(), 1, "A4 has no metering: {first:?}");
    assert_eq!(first[0].counter_mj, Some(0));
    assert!(first[0].power_w.unwrap() > 0.0);
    set_kwh(100.5);
    assert_eq!(collect(&mut s).await[0].counter_mj, Some(1_800_000_000));
    // ResetMetrics: the register starts again from zero and counts 0.25 kWh since.
    set_kwh(0.25);
    assert_eq!(collect(&mut s).await[0].counter_mj, Some(2_700_000_000));
}

struct Restore(PathBuf, String);

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, &self.1);
    }
}

#[tokio::test]
async fn exporters_in_front_of_the_lab_snmp_exporter_and_ipmi_exporter() {
    let Some(env) = lab() else { return };
    let http = reqwest::Client::new();
    let apc: ExporterConfig = toml::from_str(&format!(
        "url = \"{}/snmp?module=apc_rpdu2_fast&target={}\"\n\
         [[map]]\nmetric = \"rPDU2OutletMeteredStatusEnergy\"\nlabels = {{ rPDU2OutletMeteredStatusIndex = \"1\" }}\nmeter = \"n1\"\nunit = \"0.1kWh\"\n\
         [[map]]\nmetric = \"rPDU2OutletMeteredStatusPower\"\nlabels = {{ rPDU2OutletMeteredStatusIndex = \"1\" }}\nmeter = \"n1\"\nunit = \"W\"\n",
        env["PDU_LAB_SNMP_EXPORTER"], env["PDU_LAB_SNMPSIM"]
    ))
    .unwrap();
    apc.check().unwrap();
    let mut apc = ExporterSource::new(apc, http.clone());
    let a = collect(&mut apc).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let b = collect(&mut apc).await;
    assert!(b[0].counter_mj.unwrap() > a[0].counter_mj.unwrap());

    let power_file = PathBuf::from(&env["PDU_LAB_IPMI_POWER_FILE"]);
    std::fs::write(&power_file, "1230\n").unwrap();
    let ipmi: ExporterConfig = toml::from_str(&format!(
        "url = \"{}/ipmi?module=default&target={}\"\n\
         [[map]]\nmetric = \"ipmi_power_watts\"\nlabels = {{ name = \"Pwr Consumption\" }}\nmeter = \"bmc\"\nunit = \"W\"\n",
        env["PDU_LAB_IPMI_EXPORTER"], env["PDU_LAB_IPMI"]
    ))
    .unwrap();
    let mut ipmi = ExporterSource::new(ipmi, http);
    // ipmi_sim polls the file once a second.
    let mut watts = None;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        watts = collect(&mut ipmi).await.first().and_then(|s| s.power_w);
        if watts == Some(1230.0) {
            break;
        }
    }
    assert_eq!(
        watts,
        Some(1230.0),
        "the BMC's sensor, read through ipmi_exporter"
    );
}
