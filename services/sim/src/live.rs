//! The demo's live node: a simulated dcgm-exporter and vLLM server on loopback, scraped by
//! the real `wattledger-agent`, so the demo's newest data arrives the way a site's does
//! (agent → spool → ingest API → worker), beside the simulated history.
//!
//! Eight GPUs serve one shared Llama endpoint for three tenants. Power follows a slow load
//! wave per GPU; the energy counters are its exact integral, so they only ever rise, and
//! the token counters grow with the same load. The node meter the agent declares is read
//! too, as a site reads it: its BMC's power through an ipmi_exporter (the GPUs' draw and the
//! host's), so that every meter the demo registers reports.

use serde_json::{json, Value};
use std::f64::consts::TAU;
use std::fmt::Write;

pub const NODE: &str = "fra1-live-01";
pub const SITE: &str = "fra1";
pub const JOB: &str = "live:fra1-live-01/llama-70b";
pub const MODEL: &str = "llama-3.1-70b";
/// Tenants on the shared endpoint, as the endpoint labels them.
pub const TENANTS: [&str; 3] = ["acme-research", "nimbus-ai", "lumen-search"];
const GPUS: u32 = 8;
/// The host's own draw beside its GPUs (CPUs, memory, fans, NICs), W.
const HOST_W: f64 = 1100.0;
/// One load wave every ten minutes, phase-shifted per GPU.
const PERIOD_S: f64 = 600.0;

pub fn gpu_uuid(i: u32) -> String {
    format!(
        "GPU-5eedc0de-0000-4000-8000-{:012x}",
        0x00c0_ffee_0000_u64 + u64::from(i)
    )
}

fn phase(i: u32) -> f64 {
    TAU * f64::from(i) / f64::from(GPUS)
}

/// GPU `i`'s power `t` seconds after the node came up: 380 ± 220 W.
pub fn power_w(i: u32, t: f64) -> f64 {
    380.0 + 220.0 * (TAU * t / PERIOD_S + phase(i)).sin()
}

/// GPU `i`'s energy counter in mJ: the integral of `power_w` from 0 to `t`.
pub fn energy_mj(i: u32, t: f64) -> u64 {
    let w = TAU / PERIOD_S;
    let joules = 380.0 * t + 220.0 / w * (phase(i).cos() - (w * t + phase(i)).cos());
    (joules * 1000.0) as u64
}

/// Tokens served to tenant `k` by `t`: (prompt, generated), growing with the load.
pub fn tokens(k: usize, t: f64) -> (u64, u64) {
    let w = TAU / PERIOD_S;
    let rate = [1.0, 0.6, 0.3][k % 3];
    // ∫ (1 + 0.5 sin(w s)) ds
    let load = t + 0.5 / w * (1.0 - (w * t).cos());
    ((1900.0 * rate * load) as u64, (420.0 * rate * load) as u64)
}

/// A dcgm-exporter scrape of the node at `t`.
pub fn dcgm_metrics(t: f64) -> String {
    let mut out = String::new();
    let labels = |i: u32| {
        format!(
            "gpu=\"{i}\",UUID=\"{}\",device=\"nvidia{i}\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"{NODE}\",DCGM_FI_DRIVER_VERSION=\"560.35.03\"",
            gpu_uuid(i)
        )
    };
    out.push_str(
        "# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).\n# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n",
    );
    for i in 0..GPUS {
        let _ = writeln!(
            out,
            "DCGM_FI_DEV_POWER_USAGE{{{}}} {:.3}",
            labels(i),
            power_w(i, t)
        );
    }
    out.push_str("# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).\n# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n");
    for i in 0..GPUS {
        let _ = writeln!(
            out,
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{}}} {}",
            labels(i),
            energy_mj(i, t)
        );
    }
    out
}

/// The node's power `t` seconds after it came up, as its BMC reads it: its GPUs and its host.
pub fn node_power_w(t: f64) -> f64 {
    HOST_W + (0..GPUS).map(|i| power_w(i, t)).sum::<f64>()
}

/// An ipmi_exporter scrape of the node's BMC at `t` (DCMI power reading).
pub fn ipmi_metrics(t: f64) -> String {
    format!(
        "# HELP ipmi_dcmi_power_consumption_watts Current power consumption in Watts.\n\
         # TYPE ipmi_dcmi_power_consumption_watts gauge\n\
         ipmi_dcmi_power_consumption_watts {:.0}\n",
        node_power_w(t)
    )
}

/// A vLLM scrape of the shared endpoint at `t`, one series per tenant label.
pub fn vllm_metrics(t: f64) -> String {
    let mut out = String::new();
    for (name, pick) in [("prompt", 0), ("generation", 1)] {
        let _ = writeln!(out, "# HELP vllm:{name}_tokens_total Number of {name} tokens processed.\n# TYPE vllm:{name}_tokens_total counter");
        for (k, tenant) in TENANTS.iter().enumerate() {
            let (p, g) = tokens(k, t);
            let v = if pick == 0 { p } else { g };
            let _ = writeln!(
                out,
                "vllm:{name}_tokens_total{{model_name=\"meta-llama/Llama-3.1-70B-Instruct\",tenant=\"{tenant}\"}} {v}.0"
            );
        }
    }
    out
}

/// The live job: the shared endpoint holding the node's eight GPUs, named by UUID as a
/// Kubernetes scheduler would.
pub fn job_record(start_at: &str) -> Value {
    json!({ "records": [{
        "key": JOB, "name": "llama-70b (live)", "tenant": "platform", "kind": "inference",
        "model": MODEL, "start_at": start_at,
        "allocations": (0..GPUS).map(|i| json!({"meter": gpu_uuid(i)})).collect::<Vec<_>>()
    }]})
}

/// The agent's configuration for the live node.
pub fn agent_config(server: &str, token: &str, exporters: &str, spool: &std::path::Path) -> String {
    format!(
        r#"# Written by `wattledger demo`: the live node's agent.
[agent]
server = "{server}"
token = "{token}"
site = "{SITE}"
node = "{NODE}"
spool_dir = "{spool}"

[[meters]]
key = "{NODE}"
kind = "node"
parent = "fra1-facility"

[[dcgm]]
name = "dcgm (live node)"
url = "{exporters}/dcgm/metrics"
# Read at 1 Hz, sent as one step record per GPU per minute (agent.step_s).
interval_s = 1

[[exporter]]
name = "ipmi (live node)"
url = "{exporters}/ipmi/metrics"
# Read every 5 s, sent as one step record per minute like the GPUs.
interval_s = 5

[[exporter.map]]
metric = "ipmi_dcmi_power_consumption_watts"
meter = "{NODE}"
unit = "W"

[[tokens]]
name = "vllm (live node)"
url = "{exporters}/vllm/metrics"
job = "{JOB}"
tenant_label = "tenant"
interval_s = 10
"#,
        spool = spool.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_the_integral_of_power_and_only_rise() {
        for i in 0..GPUS {
            let mut prev = energy_mj(i, 0.0);
            assert_eq!(prev, 0);
            for s in 1..=1200 {
                let t = f64::from(s);
                let e = energy_mj(i, t);
                assert!(e > prev);
                // Over one second the counter grows by the power in that second (±1 J).
                let mid = power_w(i, t - 0.5) * 1000.0;
                assert!(((e - prev) as f64 - mid).abs() < 1000.0, "{i} {s}");
                prev = e;
            }
        }
        assert!(tokens(0, 60.0).0 > tokens(1, 60.0).0);
        assert!(tokens(2, 61.0).1 >= tokens(2, 60.0).1);
    }

    #[test]
    fn the_scrapes_carry_every_gpu_tenant_and_the_node() {
        let d = dcgm_metrics(30.0);
        assert_eq!(
            d.matches("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{").count(),
            8
        );
        assert!(d.contains(&gpu_uuid(7)));
        // The node meter is read: its BMC's power holds its GPUs' and its host's.
        let gpus: f64 = (0..GPUS).map(|i| power_w(i, 30.0)).sum();
        let ipmi = ipmi_metrics(30.0);
        assert!(ipmi.contains(&format!(
            "ipmi_dcmi_power_consumption_watts {:.0}\n",
            gpus + HOST_W
        )));
        let v = vllm_metrics(30.0);
        assert_eq!(v.matches("tenant=\"nimbus-ai\"").count(), 2);
        assert!(gpu_uuid(0).starts_with("GPU-"));
    }

    /// Every meter the agent's config declares is read by one of its sources.
    #[test]
    fn the_agent_reads_every_meter_it_declares() {
        let config = agent_config(
            "http://127.0.0.1:1",
            "t",
            "http://127.0.0.1:2",
            std::path::Path::new("/tmp/spool"),
        );
        let declared = config.matches("[[meters]]").count();
        assert_eq!(declared, 1);
        assert!(config.contains(&format!("key = \"{NODE}\"")));
        assert!(config.contains(&format!("meter = \"{NODE}\"")));
        assert!(config.contains("/ipmi/metrics"));
    }
}
