//! dcgm-exporter scrapes: GPU energy counters and power as samples, the GPUs (and MIG
//! instances) as meters, and Kubernetes pods seen on a GPU as jobs holding it.

pub mod parse;

use super::gpu_meter::meter_key;
use super::http::{get_text, Auth};
use super::{
    client_for, saved, BoxFuture, BuildError, Collected, Source, SourceConfig, SourceContext,
    SourceError, StateError,
};
use crate::pods::{PodUse, Pods};
use crate::records::{Batch, Job, Meter, Sample};
use chrono::{DateTime, Utc};
use parse::GpuReading;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use wattledger_domain::job_kind::JobKind;
use wattledger_domain::meter_kind::MeterKind;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DcgmConfig {
    pub name: Option<String>,
    /// The exporter's metrics URL, e.g. `http://127.0.0.1:9400/metrics`.
    pub url: String,
    #[serde(default = "default_interval")]
    pub interval_s: f64,
    /// Send every reading as read instead of one record per meter per step (`agent.step_s`).
    #[serde(default)]
    pub raw: bool,
    #[serde(default = "super::gpu_meter::default_gpu_meter")]
    pub gpu_meter: String,
    #[serde(default = "super::gpu_meter::default_mig_meter")]
    pub mig_meter: String,
    /// Turn pods on GPUs (the exporter's pod attributes) into jobs. Off where a scheduler
    /// source already reports the jobs.
    #[serde(default)]
    pub pods: bool,
    /// Namespace → tenant; an unmapped namespace is its own tenant key.
    #[serde(default)]
    pub namespace_tenants: BTreeMap<String, String>,
    /// The job kind of pods.
    #[serde(default = "default_pod_kind")]
    pub pod_kind: JobKind,
}

fn default_interval() -> f64 {
    10.0
}
fn default_pod_kind() -> JobKind {
    JobKind::Inference
}

impl SourceConfig for DcgmConfig {
    fn name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("dcgm {}", self.url))
    }

    fn interval(&self) -> std::time::Duration {
        super::interval(self.interval_s)
    }

    fn stepped(&self) -> bool {
        !self.raw
    }

    fn check(&self, context: &SourceContext) -> Result<(), BuildError> {
        context.need_node("dcgm").map(drop)
    }

    fn build(&self, context: &SourceContext) -> Result<Box<dyn Source>, BuildError> {
        let node = context.need_node("dcgm")?;
        let client = client_for(None, self.interval_s)?;
        Ok(Box::new(DcgmSource::new(
            self.clone(),
            &context.site,
            node,
            client,
        )))
    }
}

pub struct DcgmSource {
    config: DcgmConfig,
    site: String,
    node: String,
    client: reqwest::Client,
    registered: BTreeSet<String>,
    pods: Pods,
}

impl DcgmSource {
    pub fn new(config: DcgmConfig, site: &str, node: &str, client: reqwest::Client) -> Self {
        DcgmSource {
            config,
            site: site.to_owned(),
            node: node.to_owned(),
            client,
            registered: BTreeSet::new(),
            pods: Pods::default(),
        }
    }

    fn gpu_key(&self, r: &GpuReading) -> String {
        meter_key(
            &self.config.gpu_meter,
            &self.node,
            r.gpu_index.unwrap_or(0),
            &r.uuid,
            None,
        )
    }

    fn mig_key(&self, r: &GpuReading, gi: u32) -> String {
        meter_key(
            &self.config.mig_meter,
            &self.node,
            r.gpu_index.unwrap_or(0),
            &r.uuid,
            Some(gi),
        )
    }

    /// Turns one scrape into batches: new meters, one sample per board, pod jobs.
    fn records(&mut self, readings: &[GpuReading], now: DateTime<Utc>) -> Collected {
        let mut meters = Vec::new();
        let mut samples = Vec::new();
        let mut sampled = BTreeSet::new();
        for r in readings {
            let gpu = self.gpu_key(r);
            if self.registered.insert(gpu.clone()) {
                meters.push(Meter::gpu(
                    &gpu,
                    &self.site,
                    &self.node,
                    &r.uuid,
                    r.model_name.as_deref(),
                ));
            }
            if let Some(m) = &r.mig {
                let key = self.mig_key(r, m.gpu_instance_id);
                if self.registered.insert(key.clone()) {
                    meters.push(Meter {
                        mig_profile: Some(m.profile.clone()),
                        ..Meter::new(&key, &self.site, MeterKind::Mig, Some(&gpu))
                    });
                }
            }
            // MIG instances repeat the board's energy: one sample per board.
            if (r.energy_mj.is_some() || r.power_w.is_some()) && sampled.insert(gpu.clone()) {
                samples.push(Sample {
                    meter: gpu,
                    ts: now,
                    counter_mj: r.energy_mj,
                    power_w: r.power_w,
                    peak_w: None,
                    step_s: None,
                    counter_estimated: false,
                });
            }
        }
        let jobs = if self.config.pods {
            self.pod_jobs(readings, now)
        } else {
            Vec::new()
        };
        let state = self
            .config
            .pods
            .then(|| serde_json::to_value(&self.pods).expect("pods serialize"));
        Collected::new(
            [
                Batch::Meters(meters),
                Batch::Jobs(jobs),
                Batch::Samples(samples),
            ],
            state,
        )
    }

    /// The pods this scrape shows on each GPU or MIG instance, as jobs (`crate::pods`).
    fn pod_jobs(&mut self, readings: &[GpuReading], now: DateTime<Utc>) -> Vec<Job> {
        let mut seen: BTreeMap<String, PodUse> = BTreeMap::new();
        for r in readings {
            let meter = match &r.mig {
                Some(m) => self.mig_key(r, m.gpu_instance_id),
                None => self.gpu_key(r),
            };
            for p in &r.pods {
                let key = format!("k8s:{}/{}", p.namespace, p.pod);
                let tenant = self
                    .config
                    .namespace_tenants
                    .get(&p.namespace)
                    .cloned()
                    .unwrap_or_else(|| p.namespace.clone());
                let e = seen.entry(key).or_insert_with(|| PodUse {
                    tenant,
                    devices: BTreeMap::new(),
                });
                e.devices.insert(meter.clone(), None);
            }
        }
        self.pods.observe(seen, None, self.config.pod_kind, now)
    }
}

impl Source for DcgmSource {
    fn restore(&mut self, state: serde_json::Value) -> Result<(), StateError> {
        self.pods = saved(state)?;
        Ok(())
    }

    fn collect(&mut self, now: DateTime<Utc>) -> BoxFuture<'_, Result<Collected, SourceError>> {
        Box::pin(async move {
            let text = get_text(&self.client, &self.config.url, Auth::None).await?;
            let readings = parse::parse(&text).map_err(|e| SourceError::Parse {
                what: self.config.url.clone(),
                reason: e.to_string(),
            })?;
            Ok(self.records(&readings, now))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn source(pods: bool) -> DcgmSource {
        let config: DcgmConfig = toml::from_str(&format!(
            "url = \"http://x/metrics\"\npods = {pods}\nnamespace_tenants = {{ serving = \"acme\" }}"
        ))
        .unwrap();
        DcgmSource::new(config, "fra1", "n1", reqwest::Client::new())
    }

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_790_000_000 + s, 0).unwrap()
    }

    #[test]
    fn the_real_scrape_registers_the_gpu_once_and_samples_it() {
        let readings = parse::parse(&fixtures::read("dcgm/dcgm-exporter-metrics.prom")).unwrap();
        let mut s = source(false);
        let first = s.records(&readings, at(0));
        let Batch::Meters(m) = &first.batches[0] else {
            panic!("{:?}", first.batches)
        };
        assert_eq!(m[0].key, "n1-gpu0");
        assert_eq!(
            m[0].gpu_uuid.as_deref(),
            Some("GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e")
        );
        assert_eq!(m[0].device_model.as_deref(), Some("Tesla T4"));
        let Batch::Samples(x) = &first.batches[1] else {
            panic!()
        };
        assert_eq!(
            (x[0].counter_mj, x[0].power_w),
            (Some(128_996_013), Some(8.969))
        );
        let second = s.records(&readings, at(10));
        assert_eq!(second.batches.len(), 1, "meters are registered once");
    }

    #[test]
    fn mig_instances_are_meters_and_the_board_is_sampled_once() {
        let text = "\
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"2\",UUID=\"GPU-a\",GPU_I_PROFILE=\"3g.40gb\",GPU_I_ID=\"1\",namespace=\"serving\",pod=\"llm-0\"} 1000
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"2\",UUID=\"GPU-a\",GPU_I_PROFILE=\"3g.40gb\",GPU_I_ID=\"2\",namespace=\"team-b\",pod=\"nb-1\"} 1000
";
        let mut s = source(true);
        let c = s.records(&parse::parse(text).unwrap(), at(0));
        let Batch::Meters(m) = &c.batches[0] else {
            panic!()
        };
        let keys: Vec<_> = m.iter().map(|m| m.key.as_str()).collect();
        assert_eq!(keys, ["n1-gpu2", "n1-gpu2-mig1", "n1-gpu2-mig2"]);
        let Batch::Jobs(j) = &c.batches[1] else {
            panic!()
        };
        assert_eq!(j[0].key, "k8s:serving/llm-0");
        assert_eq!(j[0].tenant, "acme");
        assert_eq!(j[0].allocations[0].meter, "n1-gpu2-mig1");
        assert_eq!(
            j[1].tenant, "team-b",
            "an unmapped namespace is its own tenant"
        );
        let Batch::Samples(x) = &c.batches[2] else {
            panic!()
        };
        assert_eq!(x.len(), 1);
    }

    #[test]
    fn a_pod_that_leaves_is_closed_and_survives_a_restart_in_state() {
        let on = "DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",UUID=\"GPU-a\",namespace=\"serving\",pod=\"llm-0\"} 300\n";
        let off = "DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",UUID=\"GPU-a\"} 60\n";
        let mut s = source(true);
        let c = s.records(&parse::parse(on).unwrap(), at(0));
        // The agent restarts: the open pod comes back from the spooled state.
        let mut s = source(true);
        s.restore(c.state.unwrap()).unwrap();
        let c = s.records(&parse::parse(on).unwrap(), at(10));
        assert!(
            !c.batches.iter().any(|b| matches!(b, Batch::Jobs(_))),
            "still open, nothing new"
        );
        let c = s.records(&parse::parse(off).unwrap(), at(20));
        let Batch::Jobs(j) = c
            .batches
            .iter()
            .find(|b| matches!(b, Batch::Jobs(_)))
            .unwrap()
        else {
            panic!()
        };
        assert_eq!((j[0].start_at, j[0].end_at), (at(0), Some(at(20))));
        assert_eq!(j[0].allocations[0].end_at, Some(at(20)));
    }
}
