//! A fleet-size simulated cluster for the fleet benchmark (`benches/fleet.rs`): any number of
//! 8-GPU nodes over two sites, a tenant per 32 GPUs, training gangs of five nodes, shared
//! inference endpoints (one per node, four tenants each, with per-tenant token counters)
//! and per-GPU batch lanes, as 60 s step records like the agent sends.
//!
//! The demo's `Simulation` is the cluster a user looks at; this one is the same kind of load
//! at a size no demo would generate, so it is built for volume: every record is a function
//! of (seed, meter, step), a month is produced a chunk at a time, and the records are plain
//! structs the bench writes straight to JSON or CSV.

use super::{iso, rng};
use serde_json::{json, Value};
use std::fmt::Write as _;
use wattledger_domain::job_kind::JobKind;

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;
pub const STEP_S: i64 = 60;
pub const GPUS_PER_NODE: usize = 8;
const SITES: [(&str, &str, &str, &str); 2] = [
    ("fa", "Fleet A (Frankfurt)", "DE", "EUR"),
    ("fb", "Fleet B (Oregon)", "US-NW-PACW", "USD"),
];
const MODELS: [&str; 3] = ["llama-3.1-70b", "mistral-7b", "acme-llm-34b"];
const DEVICE: &str = "NVIDIA H100 80GB HBM3";

#[derive(Debug, Clone)]
struct Job {
    tenant: usize,
    kind: JobKind,
    start: i64,
    end: i64,
    /// Global GPU indices.
    gpus: Vec<u32>,
    /// For an endpoint: the tenants it serves.
    served: [usize; 4],
}

/// One step record: the meter's counter at step boundary `k` (ms `from + k·60 s`), and for
/// GPU meters the mean and peak power of the step that ends there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub meter: u32,
    pub k: i64,
    pub counter_mj: i64,
    pub power_w: Option<i64>,
    pub peak_w: Option<i64>,
}

/// Counters carried from one chunk of steps to the next, per meter.
#[derive(Debug, Default)]
pub struct Counters(Vec<i64>);

pub struct Fleet {
    seed: u64,
    pub nodes: usize,
    pub from_ms: i64,
    pub steps: i64,
    pub tenants: usize,
    jobs: Vec<Job>,
    /// Per GPU: (start, end, job), sorted by start.
    timeline: Vec<Vec<(i64, i64, u32)>>,
}

impl Fleet {
    /// `gpus` is rounded up to whole nodes; `from_ms` down to a step boundary.
    pub fn new(seed: u64, gpus: usize, from_ms: i64, days: i64) -> Self {
        let nodes = gpus.div_ceil(GPUS_PER_NODE).max(2);
        let from_ms = from_ms - from_ms.rem_euclid(STEP_S * 1000);
        let mut fleet = Fleet {
            seed,
            nodes,
            from_ms,
            steps: days * 24 * 60,
            tenants: (nodes * GPUS_PER_NODE / 32).max(4),
            jobs: Vec::new(),
            timeline: vec![Vec::new(); nodes * GPUS_PER_NODE],
        };
        fleet.schedule();
        fleet
    }

    fn to_ms(&self) -> i64 {
        self.from_ms + self.steps * MINUTE
    }

    pub fn gpus(&self) -> usize {
        self.nodes * GPUS_PER_NODE
    }

    fn site_of(&self, node: usize) -> usize {
        node * 2 / self.nodes
    }

    /// Nodes in blocks of ten: five train together, three serve an endpoint each, two run
    /// batch lanes, one per GPU.
    fn schedule(&mut self) {
        let (seed, from, to) = (self.seed, self.from_ms, self.to_ms());
        let mut jobs = Vec::new();
        let tenants = self.tenants as i64;
        let gpus_of = |n: usize| (0..GPUS_PER_NODE).map(move |g| (n * GPUS_PER_NODE + g) as u32);
        for n in 0..self.nodes {
            let role = n % 10;
            let block = n / 10;
            if role == 0 {
                let gang: Vec<usize> = (n..(n + 5).min(self.nodes))
                    .take_while(|m| m / 10 == block && self.site_of(*m) == self.site_of(n))
                    .collect();
                let mut t = from - rng::int(seed, 1, n as u64, 0, 0, 6 * HOUR);
                let mut i = 0u64;
                while t < to {
                    let end = t + rng::int(seed, 2, n as u64, i, 6 * HOUR, 30 * HOUR);
                    jobs.push(Job {
                        tenant: rng::int(seed, 3, n as u64, i, 0, tenants) as usize,
                        kind: JobKind::Training,
                        start: t.max(from),
                        end: end.min(to),
                        gpus: gang.iter().flat_map(|&m| gpus_of(m)).collect(),
                        served: [0; 4],
                    });
                    t = end + rng::int(seed, 4, n as u64, i, 10, 60) * MINUTE;
                    i += 1;
                }
            } else if (5..8).contains(&role) {
                // Four different tenants (there are at least four).
                let first = rng::int(seed, 5, n as u64, 0, 0, tenants);
                let served = std::array::from_fn(|s| ((first + s as i64) % tenants) as usize);
                jobs.push(Job {
                    tenant: served[0],
                    kind: JobKind::Inference,
                    start: from,
                    end: to,
                    gpus: gpus_of(n).collect(),
                    served,
                });
            } else if role >= 8 {
                for g in gpus_of(n) {
                    let mut t = from - rng::int(seed, 6, g as u64, 0, 0, 2 * HOUR);
                    let mut i = 0u64;
                    while t < to {
                        let end = t + rng::int(seed, 7, g as u64, i, 30, 240) * MINUTE;
                        if end > from {
                            jobs.push(Job {
                                tenant: rng::int(seed, 8, g as u64, i, 0, tenants) as usize,
                                kind: JobKind::Batch,
                                start: t.max(from),
                                end: end.min(to),
                                gpus: vec![g],
                                served: [0; 4],
                            });
                        }
                        t = end + rng::int(seed, 9, g as u64, i, 0, 60) * MINUTE;
                        i += 1;
                    }
                }
            }
            // Roles 1–4 belong to the gang their block's role-0 node started.
        }
        for (j, job) in jobs.iter().enumerate() {
            for &g in &job.gpus {
                self.timeline[g as usize].push((job.start, job.end, j as u32));
            }
        }
        for t in &mut self.timeline {
            t.sort_unstable();
        }
        self.jobs = jobs;
    }

    pub fn job_count(&self) -> usize {
        self.jobs.len()
    }

    /// The number of sites; meter `i < SITES` is site `i`'s facility meter.
    pub const SITES: usize = SITES.len();

    pub fn site_key(site: usize) -> &'static str {
        SITES[site].0
    }

    pub fn tenant_key(t: usize) -> String {
        format!("t{t:04}")
    }

    /// Meter keys by meter index: two facility meters, then nodes, then GPUs.
    pub fn meter_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = SITES.iter().map(|s| format!("{}-facility", s.0)).collect();
        keys.extend((0..self.nodes).map(|n| self.node_key(n)));
        keys.extend((0..self.gpus()).map(|g| self.gpu_key(g)));
        keys
    }

    fn node_key(&self, n: usize) -> String {
        format!("{}-n{n:05}", SITES[self.site_of(n)].0)
    }

    fn gpu_key(&self, g: usize) -> String {
        format!(
            "{}-g{}",
            self.node_key(g / GPUS_PER_NODE),
            g % GPUS_PER_NODE
        )
    }

    pub fn inventory(&self) -> Vec<(&'static str, Value)> {
        let mut tenants = vec![json!({"key": "platform", "name": "Platform Engineering"})];
        tenants.extend(
            (0..self.tenants)
                .map(|t| json!({"key": Self::tenant_key(t), "name": format!("Tenant {t}")})),
        );
        let sites: Vec<Value> = SITES
            .iter()
            .enumerate()
            .map(|(i, (key, name, region, currency))| {
                let gpus = (0..self.nodes).filter(|&n| self.site_of(n) == i).count() * GPUS_PER_NODE;
                json!({
                    "key": key, "name": name, "grid_region": region, "currency": currency,
                    // Nameplate: 700 W per GPU plus node overhead, ×1.3 for the facility.
                    "power_envelope_w": gpus as i64 * 1_100, "static_pue": "1.3",
                    "idle_policy": if i == 0 { "platform" } else { "proportional" },
                    "platform_tenant": "platform", "node_static_overhead_w": 900, "gap_limit_s": 600,
                    "fallback_price": if i == 0 { "0.21" } else { "0.082" },
                    "fallback_intensity_g": if i == 0 { "380" } else { "110" }
                })
            })
            .collect();
        let models: Vec<Value> = MODELS.iter().map(|m| json!({"key": m})).collect();
        let mut meters: Vec<Value> = SITES
            .iter()
            .map(|s| json!({"key": format!("{}-facility", s.0), "site": s.0, "kind": "facility"}))
            .collect();
        for n in 0..self.nodes {
            let site = SITES[self.site_of(n)].0;
            meters.push(
                json!({"key": self.node_key(n), "site": site, "kind": "node",
                "parent": format!("{site}-facility")}),
            );
            for g in n * GPUS_PER_NODE..(n + 1) * GPUS_PER_NODE {
                meters.push(json!({"key": self.gpu_key(g), "site": site, "kind": "gpu",
                    "parent": self.node_key(n), "device_model": DEVICE,
                    "gpu_uuid": format!("GPU-{:032x}", rng::hash(self.seed, 10, g as u64, 0) as u128)}));
            }
        }
        vec![
            ("tenants", json!({ "records": tenants })),
            ("sites", json!({ "records": sites })),
            ("models", json!({ "records": models })),
            (
                "device_models",
                json!({"records": [{"key": DEVICE, "embodied_kg": "164", "typical_power_w": 650}]}),
            ),
            ("meters", json!({ "records": meters })),
        ]
    }

    /// Hourly average carbon intensity per site's region over the whole range.
    pub fn signal_records(&self) -> Vec<Value> {
        let mut out = Vec::new();
        for (i, (_, _, region, _)) in SITES.iter().enumerate() {
            let mut t = self.from_ms;
            while t < self.to_ms() {
                let base = if i == 0 { 380 } else { 110 };
                let g = base + rng::int(self.seed, 11, i as u64, t as u64, -60, 60);
                out.push(
                    json!({"region": region, "signal": "carbon", "basis": "average",
                    "status": "actual", "source": "fleet-sim", "start_at": iso(t),
                    "end_at": iso(t + HOUR), "value": g.to_string()}),
                );
                t += HOUR;
            }
        }
        out
    }

    /// Every job, with its allocations, as ingest records.
    pub fn job_records(&self) -> Vec<Value> {
        let keys = self.meter_keys();
        let gpu_key = |g: u32| &keys[2 + self.nodes + g as usize];
        self.jobs
            .iter()
            .enumerate()
            .map(|(j, job)| {
                let (model, priority) = match job.kind {
                    JobKind::Training => (Some(MODELS[2]), "normal"),
                    JobKind::Inference => (Some(MODELS[j % 2]), "high"),
                    JobKind::Batch | JobKind::Interactive => (None, "low"),
                };
                let kind = job.kind.as_str();
                json!({
                    "key": format!("fleet:{j}"), "tenant": Self::tenant_key(job.tenant),
                    "kind": kind, "model": model, "priority": priority,
                    "start_at": iso(job.start), "end_at": iso(job.end),
                    "allocations": job.gpus.iter().map(|&g| json!({"meter": gpu_key(g)})).collect::<Vec<_>>(),
                })
            })
            .collect()
    }

    /// The endpoints' token records, per served tenant per 5 minutes.
    pub fn token_records(&self) -> Vec<Value> {
        let mut out = Vec::new();
        for (j, job) in self
            .jobs
            .iter()
            .enumerate()
            .filter(|(_, j)| j.kind == JobKind::Inference)
        {
            let mut t = job.start;
            while t + 5 * MINUTE <= job.end {
                let load = self.load(j, t);
                for (s, &tenant) in job.served.iter().enumerate() {
                    // 8 GPUs × ~150 generated tokens/s at full load, split unevenly.
                    let share = [40, 30, 20, 10][s];
                    let generated = 8 * 150 * 300 * load * share / 100 / 100;
                    out.push(
                        json!({"job": format!("fleet:{j}"), "tenant": Self::tenant_key(tenant),
                        "start_at": iso(t), "end_at": iso(t + 5 * MINUTE),
                        "prompt_tokens": generated * 3, "generated_tokens": generated}),
                    );
                }
                t += 5 * MINUTE;
            }
        }
        out
    }

    /// An endpoint's load in percent: diurnal around 15:00 UTC, with noise.
    fn load(&self, job: usize, t: i64) -> i64 {
        let hour = t.rem_euclid(24 * HOUR) / HOUR;
        let from_peak = (hour - 15).abs().min(24 - (hour - 15).abs());
        95 - from_peak * 6 + rng::int(self.seed, 12, job as u64, (t / MINUTE) as u64, -5, 5)
    }

    /// A GPU's mean and peak power (W) in step `s` (the minute starting `from + s·60 s`).
    fn gpu_power(&self, g: usize, s: i64) -> (i64, i64) {
        let t = self.from_ms + s * MINUTE;
        let line = &self.timeline[g];
        let i = line.partition_point(|&(start, _, _)| start <= t);
        let job = i
            .checked_sub(1)
            .map(|i| line[i])
            .filter(|&(_, end, _)| t < end)
            .map(|(start, _, j)| (start, j as usize));
        let noise = |a, lo, hi| rng::int(self.seed, a, g as u64, s as u64, lo, hi);
        match job {
            None => (70 + noise(13, 0, 10), 80 + noise(14, 0, 15)),
            Some((start, j)) => match self.jobs[j].kind {
                JobKind::Training => {
                    // The gang moves together: one phase per job and step, checkpoints every 45 min.
                    let minute = (t - start) / MINUTE;
                    let phase = rng::int(self.seed, 15, j as u64, s as u64, 0, 120);
                    let mean = if minute % 45 < 2 { 260 } else { 540 + phase } + noise(16, -10, 10);
                    (mean, mean + 40 + phase / 2)
                }
                JobKind::Inference => {
                    let mean = 110 + self.load(j, t) * 5 + noise(17, -20, 20);
                    (mean, (mean + 120).min(700))
                }
                // The fleet makes no interactive jobs; one would draw like batch.
                JobKind::Batch | JobKind::Interactive => {
                    let mean = 380 + noise(18, 0, 80);
                    (mean, mean + 30)
                }
            },
        }
    }

    /// Step records for boundaries `k0..k1` (0 ≤ k ≤ `steps`), meter by meter within each
    /// boundary, as a site's agents would send them together.
    pub fn steps(&self, k0: i64, k1: i64, counters: &mut Counters) -> Vec<Step> {
        let (facilities, gpus) = (SITES.len(), self.gpus());
        if counters.0.is_empty() {
            counters.0 = (0..facilities + self.nodes + gpus)
                .map(|m| 1_000_000_000_000 + rng::int(self.seed, 19, m as u64, 0, 0, 1 << 40))
                .collect();
        }
        let c = &mut counters.0;
        let mut out = Vec::with_capacity(((k1 - k0).max(0) as usize) * c.len());
        let mut gpu_step = vec![(0i64, 0i64); gpus];
        for k in k0..k1.min(self.steps + 1) {
            let mut site_it = [0i64; 2];
            if k > 0 {
                for (g, p) in gpu_step.iter_mut().enumerate() {
                    *p = self.gpu_power(g, k - 1);
                }
            }
            for n in 0..self.nodes {
                let m = facilities + n;
                let gpu_w: i64 = gpu_step[n * GPUS_PER_NODE..(n + 1) * GPUS_PER_NODE]
                    .iter()
                    .map(|p| p.0)
                    .sum();
                if k > 0 {
                    let node_mj = (900 + gpu_w / 20 + gpu_w) * STEP_S * 1000;
                    c[m] += node_mj;
                    site_it[self.site_of(n)] += node_mj;
                }
                out.push(Step {
                    meter: m as u32,
                    k,
                    counter_mj: c[m],
                    power_w: None,
                    peak_w: None,
                });
                let first = n * GPUS_PER_NODE;
                for (g, &(mean, peak)) in gpu_step[first..first + GPUS_PER_NODE].iter().enumerate()
                {
                    let m = facilities + self.nodes + first + g;
                    if k > 0 {
                        c[m] += mean * STEP_S * 1000;
                    }
                    out.push(Step {
                        meter: m as u32,
                        k,
                        counter_mj: c[m],
                        power_w: (k > 0).then_some(mean),
                        peak_w: (k > 0).then_some(peak),
                    });
                }
            }
            for (f, it) in site_it.iter().enumerate() {
                c[f] += it * 13 / 10;
                out.push(Step {
                    meter: f as u32,
                    k,
                    counter_mj: c[f],
                    power_w: None,
                    peak_w: None,
                });
            }
        }
        out
    }

    /// A step boundary's timestamp, as sent.
    pub fn ts(&self, k: i64) -> String {
        iso(self.from_ms + k * MINUTE)
    }

    /// `records` as the JSON body of `POST /v1/ingest/samples`.
    pub fn samples_body(&self, keys: &[String], records: &[Step], ts: &[String]) -> Vec<u8> {
        let mut s = String::with_capacity(records.len() * 110);
        s.push_str("{\"records\":[");
        for (i, r) in records.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = write!(
                s,
                "{{\"meter\":\"{}\",\"ts\":\"{}\",\"counter_mj\":{},\"step_s\":{STEP_S}",
                keys[r.meter as usize], ts[r.k as usize], r.counter_mj
            );
            if let (Some(p), Some(peak)) = (r.power_w, r.peak_w) {
                let _ = write!(s, ",\"power_w\":{p},\"peak_w\":{peak}");
            }
            s.push('}');
        }
        s.push_str("]}");
        s.into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FROM: i64 = 1_788_220_800_000; // 2026-09-01T00:00:00Z

    #[test]
    fn every_gpu_step_is_metered_and_every_counter_rises_by_its_steps() {
        let f = Fleet::new(3, 160, FROM, 1);
        assert_eq!((f.nodes, f.gpus(), f.tenants), (20, 160, 5));
        let mut counters = Counters::default();
        let a = f.steps(0, 700, &mut counters);
        let b = f.steps(700, f.steps + 1, &mut counters);
        let meters = 2 + 20 + 160;
        assert_eq!(a.len() + b.len(), meters * (f.steps as usize + 1));
        // Chunking changes nothing: the same boundaries in one go give the same records.
        let whole = f.steps(0, f.steps + 1, &mut Counters::default());
        assert_eq!(whole, [a, b].concat());
        // A node's counter rises by its GPUs' energy plus its overhead, step by step.
        let by = |m: u32, k: i64| {
            whole
                .iter()
                .find(|r| r.meter == m && r.k == k)
                .copied()
                .unwrap()
        };
        for k in [1, 59, 1440] {
            let node = by(2, k).counter_mj - by(2, k - 1).counter_mj;
            let gpus: i64 = (0..8).map(|g| by(22 + g, k).power_w.unwrap()).sum();
            assert_eq!(node, (900 + gpus / 20 + gpus) * 60_000);
            for g in 0..8 {
                let r = by(22 + g, k);
                assert!((60..=700).contains(&r.power_w.unwrap()), "{r:?}");
                assert!(r.peak_w.unwrap() >= r.power_w.unwrap());
            }
        }
    }

    #[test]
    fn a_fleet_day_has_thousands_of_jobs_at_ten_thousand_gpus() {
        let f = Fleet::new(3, 10_240, FROM, 1);
        assert_eq!((f.nodes, f.tenants), (1_280, 320));
        assert!(f.job_count() > 5_000, "{}", f.job_count());
        let keys = f.meter_keys();
        let mut unique = keys.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), keys.len());
        assert_eq!(keys.len(), 2 + 1_280 + 10_240);
    }
}
