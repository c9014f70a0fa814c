//! A deterministic simulated GPU cluster that a platform team would recognise.
//!
//! Two sites in different grids (Frankfurt with a facility meter and PDU kWh counters;
//! Oregon with static PUE and BMC power readings), 20 nodes × 8 H100-class GPUs (700 W TDP,
//! ~70–95 W idle) and in Oregon a rack of 4 nodes × 8 MI300X-class GPUs (750 W TDP,
//! ~130–155 W idle) with a training run and two inference endpoints, seven tenants, training
//! jobs with synchronous swings and checkpoint dips, shared inference endpoints with bursty,
//! uncorrelated load and per-tenant token counters (one of them disaggregated: its prompts on
//! prefill GPUs, its generation on decode GPUs),
//! batch lanes with idle gaps, a notebook on a MIG half, one GPU counter reset (driver
//! reload), an agent outage (counter gap) and a BMC outage (power-only gap).
//!
//! The simulator only produces the records the agent and schedulers would send; the demo
//! pushes them through the ingest API like any collector.
//!
//! This crate owns the simulated cluster and nothing else: the demo's cluster (this module),
//! its demand-response events ([`demand_response`]) and grid signals ([`signals`]), the live
//! node's exporters ([`live`]), the benchmarks' fleet at scale ([`fleet`]) and the seeded
//! randomness they share ([`rng`]). It does no I/O and does not depend on the server: the
//! demo (`wattledger-cli`), the server's benchmarks and the end-to-end tests use it.

pub mod demand_response;
pub mod fleet;
pub mod live;
pub mod outcome;
pub mod rng;
pub mod signals;

use serde_json::{json, Value};
use wattledger_domain::badput::EndState;
use wattledger_domain::job_kind::JobKind;
use wattledger_domain::phase::Phase;
use wattledger_domain::steps;

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeMeter {
    /// A PDU outlet with a kWh register (sent as a mJ counter).
    Counter,
    /// A BMC reporting power only.
    Power,
}

#[derive(Debug, Clone)]
struct Site {
    key: &'static str,
    name: &'static str,
    region: &'static str,
    currency: &'static str,
    envelope_w: i64,
    pue: &'static str,
    idle_policy: &'static str,
    facility: bool,
    node_meter: NodeMeter,
}

#[derive(Debug, Clone)]
struct Node {
    key: String,
    site: usize,
    gpus: Vec<usize>,
}

/// The GPUs' device models, as their collectors report them.
const H100: &str = "NVIDIA H100 80GB HBM3";
const MI300X: &str = "AMD Instinct MI300X";

/// Nodes of MI300X-class GPUs appended to Oregon's H100 nodes (node indices 20–23).
const AMD_NODES: usize = 4;

#[derive(Debug, Clone)]
struct GpuDev {
    key: String,
    uuid: String,
    /// Its device model (`H100` or `MI300X`).
    model: &'static str,
    /// MIG instance meter keys, for GPUs partitioned in halves.
    mig: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Workload {
    Training,
    /// Index into the deployments' token mix.
    Inference(usize),
    Batch(f64),
    Notebook,
}

#[derive(Debug, Clone)]
struct Job {
    key: String,
    name: String,
    tenant: &'static str,
    model: Option<&'static str>,
    kind: JobKind,
    start: i64,
    end: i64,
    /// (GPU, MIG slot) pairs; a MIG slot means a half share.
    gpus: Vec<(usize, Option<usize>)>,
    workload: Workload,
    /// How the job ends and its last checkpoint (ms); completed without one by default.
    state: EndState,
    checkpoint: Option<i64>,
    /// The key of the run this one resumes after a preemption.
    requeue_of: Option<String>,
    /// The pool's phase, for a disaggregated deployment's pools.
    phase: Option<Phase>,
}

/// A shared inference endpoint: who it serves and how its load moves.
#[derive(Debug, Clone)]
struct Deployment {
    tenants: &'static [(&'static str, f64)],
    /// Generated tokens per second of the whole deployment at full load.
    tokens_per_s: f64,
    peak_hour_utc: f64,
}

pub const TENANTS: &[(&str, &str)] = &[
    ("platform", "Platform Engineering"),
    ("acme-research", "Acme Research"),
    ("nimbus-ai", "Nimbus AI"),
    ("helix-bio", "Helix Bio"),
    ("orbit-labs", "Orbit Labs"),
    ("lumen-search", "Lumen Search"),
    ("quanta-fin", "Quanta Finance"),
];

const MODELS: &[(&str, &str, &str, &str)] = &[
    ("llama-3.1-70b", "Llama 3.1 70B Instruct", "1", "4"),
    ("mistral-7b", "Mistral 7B Instruct", "1", "3"),
    ("qwen2.5-32b", "Qwen2.5 32B Instruct", "1", "4"),
    ("acme-llm-34b", "Acme LLM 34B (training)", "1", "4"),
    ("orbit-vision-8b", "Orbit Vision 8B (training)", "1", "4"),
];

const SITES: [Site; 2] = [
    Site {
        key: "fra1",
        name: "Frankfurt 1",
        region: "DE",
        currency: "EUR",
        // Power-bound: the substation's allotment, a little above the site's daily peaks
        // (106–113 kW); the demo admits more inference into it by measured headroom.
        envelope_w: 125_000,
        pue: "1.35",
        idle_policy: "platform",
        facility: true,
        node_meter: NodeMeter::Counter,
    },
    Site {
        key: "ore1",
        name: "Oregon 1",
        region: "US-NW-PACW",
        currency: "USD",
        envelope_w: 140_000,
        pue: "1.18",
        idle_policy: "proportional",
        facility: false,
        node_meter: NodeMeter::Power,
    },
];

/// The simulated cluster over `[from_ms, to_ms)`.
pub struct Simulation {
    seed: u64,
    pub from_ms: i64,
    pub to_ms: i64,
    pub interval_ms: i64,
    nodes: Vec<Node>,
    gpus: Vec<GpuDev>,
    jobs: Vec<Job>,
    deployments: Vec<Deployment>,
    /// Per GPU: (start, end, job) sorted by start.
    timeline: Vec<Vec<(i64, i64, usize)>>,
    /// GPU whose driver reloads (counter back to zero) at this time.
    reset: (usize, i64),
    /// Node whose agent is down (no GPU or node samples) over this span.
    agent_gap: (usize, i64, i64),
    /// Node whose BMC is silent (power-only node meter) over this span.
    bmc_gap: (usize, i64, i64),
    /// Last week's demand-response event, where the range has history enough for it.
    pub grid_event: Option<demand_response::Event>,
    /// The batch jobs admission moved out of its window.
    pub moved: Vec<demand_response::Moved>,
}

impl Simulation {
    pub fn new(seed: u64, from_ms: i64, to_ms: i64, interval_ms: i64) -> Self {
        let from_ms = from_ms - from_ms.rem_euclid(interval_ms);
        let to_ms = to_ms - to_ms.rem_euclid(interval_ms);
        let mut nodes = Vec::new();
        let mut gpus = Vec::new();
        // (site, its key, first node number, nodes, device model)
        let racks = [
            (0usize, "fra1", 0usize, 12usize, H100),
            (1, "ore1", 0, 8, H100),
            (1, "ore1", 8, AMD_NODES, MI300X),
        ];
        for (site_idx, site, first, count, model) in racks {
            for n in first..first + count {
                let node = nodes.len();
                let mut list = Vec::new();
                for g in 0..8 {
                    let uuid = format!(
                        "GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                        rng::hash(seed, 1, node as u64, g) as u32,
                        rng::hash(seed, 2, node as u64, g) as u16,
                        rng::hash(seed, 3, node as u64, g) as u16,
                        rng::hash(seed, 4, node as u64, g) as u16,
                        rng::hash(seed, 5, node as u64, g) & 0xFFFF_FFFF_FFFF
                    );
                    // ore1 node 0, GPU 6 is split into two MIG 3g.40gb halves.
                    let mig = if site == "ore1" && n == 0 && g == 6 {
                        vec![
                            format!("{site}-n{n:02}-gpu{g}-mig0"),
                            format!("{site}-n{n:02}-gpu{g}-mig1"),
                        ]
                    } else {
                        Vec::new()
                    };
                    list.push(gpus.len());
                    gpus.push(GpuDev {
                        key: format!("{site}-n{n:02}-gpu{g}"),
                        uuid,
                        model,
                        mig,
                    });
                }
                nodes.push(Node {
                    key: format!("{site}-n{n:02}"),
                    site: site_idx,
                    gpus: list,
                });
            }
        }
        let deployments = vec![
            Deployment {
                tenants: &[
                    ("nimbus-ai", 0.5),
                    ("lumen-search", 0.3),
                    ("quanta-fin", 0.2),
                ],
                tokens_per_s: 2600.0,
                peak_hour_utc: 14.0,
            },
            Deployment {
                tenants: &[("nimbus-ai", 0.7), ("lumen-search", 0.3)],
                tokens_per_s: 5200.0,
                peak_hour_utc: 19.0,
            },
            Deployment {
                tenants: &[
                    ("nimbus-ai", 0.4),
                    ("lumen-search", 0.35),
                    ("quanta-fin", 0.25),
                ],
                tokens_per_s: 1900.0,
                peak_hour_utc: 20.0,
            },
            // Served from Oregon's MI300X rack.
            Deployment {
                tenants: &[("lumen-search", 0.6), ("quanta-fin", 0.4)],
                tokens_per_s: 3400.0,
                peak_hour_utc: 18.0,
            },
        ];
        let span = to_ms - from_ms;
        let mut sim = Simulation {
            seed,
            from_ms,
            to_ms,
            interval_ms,
            nodes,
            gpus,
            jobs: Vec::new(),
            deployments,
            timeline: Vec::new(),
            reset: (8 * 8 + 3, from_ms + span * 23 / 100 + 5 * MINUTE),
            agent_gap: (
                9,
                from_ms + span * 41 / 100,
                from_ms + span * 41 / 100 + 2 * HOUR,
            ),
            bmc_gap: (
                12 + 6,
                from_ms + span * 63 / 100,
                from_ms + span * 63 / 100 + 90 * MINUTE,
            ),
            grid_event: None,
            moved: Vec::new(),
        };
        sim.schedule();
        sim
    }

    fn node_gpus(&self, node: usize, range: std::ops::Range<usize>) -> Vec<(usize, Option<usize>)> {
        self.nodes[node].gpus[range]
            .iter()
            .map(|&g| (g, None))
            .collect()
    }

    fn schedule(&mut self) {
        let seed = self.seed;
        let (from, to) = (self.from_ms, self.to_ms);
        let mut slurm_id = 410_000u64;
        let mut jobs = Vec::new();
        // Training: back-to-back multi-node runs with maintenance gaps.
        // (tenant, model, cluster, nodes, shortest and longest run in hours)
        type Training = (
            &'static str,
            &'static str,
            &'static str,
            std::ops::Range<usize>,
            i64,
            i64,
        );
        let training: [Training; 3] = [
            ("acme-research", "acme-llm-34b", "fra1", 0..4, 36, 96),
            ("orbit-labs", "orbit-vision-8b", "fra1", 4..6, 12, 36),
            ("orbit-labs", "orbit-vision-8b", "ore1", 13..17, 24, 72),
        ];
        for (ti, (tenant, model, cluster, nodes, min_h, max_h)) in training.iter().enumerate() {
            let mut t = from - rng::int(seed, 10, ti as u64, 0, 0, 24) * HOUR;
            let mut k = 0u64;
            let mut preempted: Option<String> = None;
            while t < to {
                let len = rng::int(seed, 11, ti as u64, k, *min_h, *max_h) * HOUR;
                let gap = rng::int(seed, 12, ti as u64, k, 20, 240) * MINUTE;
                let gpus: Vec<_> = nodes
                    .clone()
                    .flat_map(|n| self.node_gpus(n, 0..8))
                    .collect();
                slurm_id += 1;
                let key = format!("slurm:{cluster}:{slurm_id}");
                let o = outcome::training(seed, slurm_id, t, len);
                // A preempted run is requeued: the next run resumes it.
                let requeue_of = preempted.take();
                if o.state == EndState::Preempted {
                    preempted = Some(key.clone());
                }
                jobs.push(Job {
                    key,
                    name: format!("{model}-pretrain-r{k}"),
                    tenant,
                    model: Some(model),
                    kind: JobKind::Training,
                    start: t,
                    end: o.end,
                    gpus,
                    workload: Workload::Training,
                    state: o.state,
                    checkpoint: o.checkpoint,
                    requeue_of,
                    phase: None,
                });
                t = o.end + gap;
                k += 1;
            }
        }
        // Inference deployments: pods that live for days, then roll to a new pod. Llama is
        // served disaggregated (llm-d style): 3 prefill GPUs and 5 decode GPUs, rolled together.
        type Pool = (Option<Phase>, std::ops::Range<usize>);
        let llama: &[Pool] = &[(Some(Phase::Prefill), 0..3), (Some(Phase::Decode), 3..8)];
        let serving: [(&str, &str, usize, &[Pool], usize); 3] = [
            ("nimbus-ai", "llama-3.1-70b", 6, llama, 0),
            ("nimbus-ai", "mistral-7b", 12, &[(None, 0..2)], 1),
            ("nimbus-ai", "qwen2.5-32b", 12, &[(None, 2..6)], 2),
        ];
        for (si, (tenant, model, node, pools, dep)) in serving.iter().enumerate() {
            let mut t = from - DAY;
            let mut k = 0u64;
            while t < to {
                let len = rng::int(seed, 20, si as u64, k, 5, 12) * DAY;
                let uid = rng::hash(seed, 21, si as u64, k);
                for (phase, range) in pools.iter() {
                    let pool = phase.map_or(String::new(), |p| format!("{p}-"));
                    jobs.push(Job {
                        key: format!("k8s:serving/{model}-{pool}{uid:016x}"),
                        name: format!("{model}-serving"),
                        tenant,
                        model: Some(model),
                        kind: JobKind::Inference,
                        start: t,
                        end: t + len,
                        gpus: self.node_gpus(*node, range.clone()),
                        workload: Workload::Inference(*dep),
                        state: EndState::Completed,
                        checkpoint: None,
                        requeue_of: None,
                        phase: *phase,
                    });
                }
                // Rolling restart: a few minutes with no pod.
                t += len + 4 * MINUTE;
                k += 1;
            }
        }
        // A notebook on one MIG half, in Oregon business hours on weekdays.
        let mig_gpu = self.nodes[12].gpus[6];
        let mut day = from - from.rem_euclid(DAY);
        let mut k = 0u64;
        while day < to {
            let weekday = (day / DAY + 4).rem_euclid(7); // 1970-01-01 was a Thursday.
            if weekday < 5 {
                let start = day + 16 * HOUR + rng::int(seed, 30, k, 0, 0, 60) * MINUTE;
                let end = start + rng::int(seed, 31, k, 0, 3, 8) * HOUR;
                slurm_id += 1;
                jobs.push(Job {
                    key: format!("slurm:ore1:{slurm_id}"),
                    name: "quanta-risk-notebook".into(),
                    tenant: "quanta-fin",
                    model: None,
                    kind: JobKind::Interactive,
                    start,
                    end,
                    gpus: vec![(mig_gpu, Some(0))],
                    workload: Workload::Notebook,
                    state: EndState::Completed,
                    checkpoint: None,
                    requeue_of: None,
                    phase: None,
                });
            }
            day += DAY;
            k += 1;
        }
        let event = demand_response::window(from, to, &jobs);
        let mut moved = Vec::new();
        // Batch lanes: 4 lanes of 2 GPUs per node, jobs of 1 or 2 GPUs with idle gaps; at
        // the demand-response site a job that would run into the event waits for its end.
        let batch_tenants = [
            "helix-bio",
            "quanta-fin",
            "orbit-labs",
            "helix-bio",
            "acme-research",
        ];
        let batch_nodes: Vec<usize> = (7..12).chain(17..20).collect();
        for &node in &batch_nodes {
            let cluster = SITES[self.nodes[node].site].key;
            for lane in 0..4usize {
                let lane_id = (node * 4 + lane) as u64;
                let mut t = from - rng::int(seed, 40, lane_id, 0, 0, 6) * HOUR;
                let mut k = 0u64;
                while t < to {
                    let len = rng::int(seed, 41, lane_id, k, 20, 360) * MINUTE;
                    let gap = (rng::unit(seed, 42, lane_id, k).powi(3) * 180.0) as i64 * MINUTE;
                    let width = if rng::unit(seed, 43, lane_id, k) < 0.6 {
                        2
                    } else {
                        1
                    };
                    let tenant = batch_tenants[rng::int(seed, 44, lane_id, k, 0, 5) as usize];
                    slurm_id += 1;
                    let key = format!("slurm:{cluster}:{slurm_id}");
                    let gpu_w = rng::range(seed, 45, lane_id, k, 380.0, 620.0);
                    let shed = event
                        .filter(|_| self.nodes[node].site == demand_response::SITE)
                        .and_then(|e| {
                            demand_response::moved(&e, &key, tenant, width, gpu_w, t, len)
                        });
                    if let Some((m, start)) = shed {
                        t = start;
                        moved.push(m);
                    }
                    let o = outcome::batch(seed, slurm_id, t, len);
                    jobs.push(Job {
                        key,
                        name: format!("{tenant}-batch-{k}"),
                        tenant,
                        model: None,
                        kind: JobKind::Batch,
                        start: t,
                        end: o.end,
                        gpus: self.node_gpus(node, lane * 2..lane * 2 + width),
                        workload: Workload::Batch(gpu_w),
                        state: o.state,
                        checkpoint: o.checkpoint,
                        requeue_of: None,
                        phase: None,
                    });
                    t = o.end + gap;
                    k += 1;
                }
            }
        }
        self.schedule_amd_rack(&mut jobs, &mut slurm_id);
        // Keep jobs that overlap the window, clipped to it for what we report.
        jobs.retain(|j| j.end > from && j.start < to);
        // A run resumed from one that ended before the window names nothing sent.
        let kept: std::collections::HashSet<String> = jobs.iter().map(|j| j.key.clone()).collect();
        for j in &mut jobs {
            j.requeue_of = j.requeue_of.take().filter(|k| kept.contains(k));
        }
        // Jobs already running when the simulated meters begin start, for the ledger, with
        // them: GPU time before any meter read would bill a month of no energy.
        for j in &mut jobs {
            j.start = j.start.max(from);
        }
        let mut timeline = vec![Vec::new(); self.gpus.len()];
        for (i, j) in jobs.iter().enumerate() {
            for (g, _) in &j.gpus {
                timeline[*g].push((j.start, j.end, i));
            }
        }
        for t in &mut timeline {
            t.sort();
        }
        self.jobs = jobs;
        self.timeline = timeline;
        self.grid_event = event;
        self.moved = moved;
    }

    /// Oregon's MI300X rack (nodes 20–23), scheduled after everything else so the H100
    /// fleet's jobs stay as they were: a training run on nodes 20 and 21 with maintenance
    /// gaps, Llama 3.1 70B served on node 22 and Mistral 7B on half of node 23 (the other
    /// half idles), both for the rack's own shared endpoint.
    fn schedule_amd_rack(&self, jobs: &mut Vec<Job>, slurm_id: &mut u64) {
        let seed = self.seed;
        let (from, to) = (self.from_ms, self.to_ms);
        let first = self.nodes.len() - AMD_NODES;
        let mut t = from - rng::int(seed, 10, 3, 0, 0, 24) * HOUR;
        let mut k = 0u64;
        while t < to {
            let len = rng::int(seed, 11, 3, k, 12, 48) * HOUR;
            let gap = rng::int(seed, 12, 3, k, 20, 240) * MINUTE;
            *slurm_id += 1;
            let o = outcome::training(seed, *slurm_id, t, len);
            jobs.push(Job {
                key: format!("slurm:ore1:{slurm_id}"),
                name: format!("acme-llm-34b-finetune-r{k}"),
                tenant: "acme-research",
                model: Some("acme-llm-34b"),
                kind: JobKind::Training,
                start: t,
                end: o.end,
                gpus: (first..first + 2)
                    .flat_map(|n| self.node_gpus(n, 0..8))
                    .collect(),
                workload: Workload::Training,
                state: o.state,
                checkpoint: o.checkpoint,
                // A preempted run starts afresh here: its next run is a new fine-tune.
                requeue_of: None,
                phase: None,
            });
            t = o.end + gap;
            k += 1;
        }
        let serving = [
            ("llama-3.1-70b", first + 2, 0..8),
            ("mistral-7b", first + 3, 0..4),
        ];
        for (si, (model, node, range)) in serving.into_iter().enumerate() {
            let si = 3 + si as u64;
            let mut t = from - DAY;
            let mut k = 0u64;
            while t < to {
                let len = rng::int(seed, 20, si, k, 5, 12) * DAY;
                let uid = rng::hash(seed, 21, si, k);
                jobs.push(Job {
                    key: format!("k8s:serving/{model}-{:016x}", uid),
                    name: format!("{model}-serving-mi300x"),
                    tenant: "lumen-search",
                    model: Some(model),
                    kind: JobKind::Inference,
                    start: t,
                    end: t + len,
                    gpus: self.node_gpus(node, range.clone()),
                    workload: Workload::Inference(3),
                    state: EndState::Completed,
                    checkpoint: None,
                    requeue_of: None,
                    phase: None,
                });
                t += len + 4 * MINUTE;
                k += 1;
            }
        }
    }

    pub fn tenant_records(&self) -> Value {
        json!({ "records": TENANTS.iter().map(|(k, n)| json!({"key": k, "name": n})).collect::<Vec<_>>() })
    }

    pub fn model_records(&self) -> Value {
        json!({ "records": MODELS.iter().map(|(k, n, p, d)| json!({
            "key": k, "name": n, "prefill_weight": p, "decode_weight": d
        })).collect::<Vec<_>>() })
    }

    /// The simulated GPUs' embodied carbon, for SCI's M. The figures are illustrative (the
    /// order of magnitude published LCAs give for an H100 board; more for an MI300X, whose
    /// package carries eight HBM3 stacks), not a vendor's PCF. The MI300X carries a GPU-hour
    /// rate in Oregon's currency, and the names its AMD collectors report it by (the device
    /// metrics exporter's part number and PCI device id) as aliases.
    pub fn device_model_records(&self) -> Value {
        json!({ "records": [{
            "key": H100, "embodied_kg": "164", "lifetime_hours": 43800,
            "typical_power_w": 650,
            "source": "illustrative figure for the demo; use the vendor's product carbon footprint"
        }, {
            "key": MI300X, "embodied_kg": "215", "lifetime_hours": 43800,
            "typical_power_w": 700, "gpu_hour_rate": "1.85", "currency": "USD",
            "aliases": ["102-G30211-00", "0x74a1"],
            "source": "illustrative figure for the demo; use the vendor's product carbon footprint"
        }]})
    }

    pub fn site_records(&self) -> Value {
        json!({ "records": SITES.iter().map(|s| json!({
            "key": s.key, "name": s.name, "grid_region": s.region, "currency": s.currency,
            "power_envelope_w": s.envelope_w, "static_pue": s.pue, "idle_policy": s.idle_policy,
            "platform_tenant": "platform", "node_static_overhead_w": 1500, "gap_limit_s": 600,
            "fallback_price": if s.currency == "EUR" { "0.21" } else { "0.082" },
            "fallback_intensity_g": if s.region == "DE" { "380" } else { "110" }
        })).collect::<Vec<_>>() })
    }

    /// Grid signals over the simulated range: each site's zone as an Electricity Maps
    /// history and its time-of-use tariff, as ingest records (through the real parsers).
    pub fn signal_records(&self) -> Result<Vec<Value>, wattledger_grid::SignalError> {
        let mut out = Vec::new();
        let (from, to) = (
            chrono::DateTime::from_timestamp_millis(self.from_ms).unwrap_or_default(),
            chrono::DateTime::from_timestamp_millis(self.to_ms + 3_600_000).unwrap_or_default(),
        );
        for site in &SITES {
            let carbon = signals::carbon_series(
                site.region,
                self.seed,
                self.from_ms,
                self.to_ms + 3_600_000,
            )?;
            out.extend(records(&carbon));
            let carbon_free = signals::carbon_free_series(
                site.region,
                self.seed,
                self.from_ms,
                self.to_ms + 3_600_000,
            )?;
            out.extend(records(&carbon_free));
            let prices = signals::tariff(site.key).series(site.region, from, to);
            out.extend(records(&prices));
        }
        Ok(out)
    }

    /// The clean energy each site's own generation delivered per hour of the simulated range
    /// (`POST /v1/ingest/clean-energy` records).
    pub fn clean_energy_records(&self) -> Vec<Value> {
        let first = self.from_ms.div_euclid(HOUR) * HOUR;
        let mut out = Vec::new();
        for site in &SITES {
            let mut t = first;
            // Delivered energy is measured: the hours that are over.
            while t + HOUR <= self.to_ms {
                if let Some(mwh) = signals::solar_mwh(site.key, self.seed, t) {
                    out.push(json!({"site": site.key, "source": "rooftop-solar",
                                    "start_at": iso(t), "end_at": iso(t + HOUR),
                                    "mwh": mwh.to_string()}));
                }
                t += HOUR;
            }
        }
        out
    }

    pub fn meter_records(&self) -> Value {
        let mut records = Vec::new();
        for s in SITES.iter().filter(|s| s.facility) {
            records.push(
                json!({"key": format!("{}-facility", s.key), "site": s.key, "kind": "facility"}),
            );
        }
        for n in &self.nodes {
            let site = &SITES[n.site];
            let mut node = json!({"key": n.key, "site": site.key, "kind": "node"});
            if site.facility {
                node["parent"] = json!(format!("{}-facility", site.key));
            }
            records.push(node);
            for &g in &n.gpus {
                let gpu = &self.gpus[g];
                records.push(
                    json!({"key": gpu.key, "site": site.key, "kind": "gpu", "parent": n.key,
                    "gpu_uuid": gpu.uuid, "device_model": gpu.model}),
                );
                for m in &gpu.mig {
                    records.push(
                        json!({"key": m, "site": site.key, "kind": "mig", "parent": gpu.key,
                        "mig_profile": "3g.40gb"}),
                    );
                }
            }
        }
        json!({ "records": records })
    }

    /// Job records in batches of `batch` (jobs clipped to what has started by `to`).
    pub fn job_batches(&self, batch: usize) -> Vec<Value> {
        let records: Vec<Value> = self
            .jobs
            .iter()
            .map(|j| {
                let ended = j.end <= self.to_ms;
                let end = ended.then(|| iso(j.end));
                let allocations: Vec<Value> = j
                    .gpus
                    .iter()
                    .map(|(g, mig)| match mig {
                        Some(slot) => json!({"meter": self.gpus[*g].mig[*slot], "share": "0.5"}),
                        None => json!({"meter": self.gpus[*g].key}),
                    })
                    .collect();
                json!({
                    "key": j.key, "name": j.name, "tenant": j.tenant, "model": j.model, "kind": j.kind,
                    "priority": if j.kind == JobKind::Inference { "high" } else { "normal" },
                    "submit_at": iso(j.start - 7 * MINUTE), "start_at": iso(j.start), "end_at": end,
                    // How it ended is known once it has.
                    "end_state": ended.then_some(j.state),
                    "last_checkpoint_at": j.checkpoint.filter(|_| ended).map(iso),
                    "requeue_of": j.requeue_of,
                    "phase": j.phase,
                    "allocations": allocations,
                })
            })
            .collect();
        records
            .chunks(batch)
            .map(|c| json!({ "records": c }))
            .collect()
    }

    pub fn job_count(&self) -> usize {
        self.jobs.len()
    }

    fn job_at(&self, gpu: usize, t: i64) -> Option<&Job> {
        let tl = &self.timeline[gpu];
        let i = tl.partition_point(|(s, _, _)| *s <= t);
        tl[..i]
            .iter()
            .rev()
            .take(3)
            .find(|(s, e, _)| *s <= t && t < *e)
            .map(|(_, _, j)| &self.jobs[*j])
    }

    /// Diurnal load of a deployment in [0.15, 1].
    fn load(&self, dep: usize, t: i64) -> f64 {
        let d = &self.deployments[dep];
        let hour = (t.rem_euclid(DAY)) as f64 / HOUR as f64;
        let phase = ((hour - d.peak_hour_utc) / 24.0 * std::f64::consts::TAU).cos();
        (0.55 + 0.4 * phase).clamp(0.15, 1.0)
    }

    /// Average power of a GPU over the interval starting at `t`, in W: an H100's up to its
    /// 700 W TDP, idling at 72–90 W; an MI300X's up to 750 W, idling at 130–150 W (its
    /// HBM3 and Infinity Fabric hold a higher floor), its load scaled by 750/700.
    fn gpu_power(&self, gpu: usize, t: i64) -> f64 {
        let s = self.seed;
        let k = (t / self.interval_ms) as u64;
        let (idle_w, tdp, scale) = if self.gpus[gpu].model == MI300X {
            (130.0, 750.0, 750.0 / 700.0)
        } else {
            (72.0, 700.0, 1.0)
        };
        let idle = idle_w
            + 18.0 * rng::unit(s, 50, gpu as u64, 0)
            + rng::range(s, 51, gpu as u64, k, -3.0, 3.0);
        let mid = t + self.interval_ms / 2;
        let Some(job) = self.job_at(gpu, mid) else {
            return idle;
        };
        let job_seed = rng::hash(s, 52, job.start as u64, 0);
        match job.workload {
            Workload::Training => {
                let since = mid - job.start;
                // Checkpoint every 45 minutes: all GPUs of the job drop together.
                if since % (45 * MINUTE) < self.interval_ms {
                    return (240.0 + rng::range(s, 53, gpu as u64, k, -10.0, 10.0)) * scale;
                }
                // Synchronous swing (collective phases) shared by the job, small per-GPU spread.
                let swing =
                    40.0 * ((since as f64 / (17.0 * MINUTE as f64)) * std::f64::consts::TAU).sin();
                let spread = 12.0 * (rng::unit(s, 54, gpu as u64, 0) - 0.5);
                ((648.0 + swing + spread + rng::range(job_seed, 55, 0, k, -8.0, 8.0)) * scale)
                    .min(tdp)
            }
            Workload::Inference(dep) => {
                // Bursty and uncorrelated across GPUs: each GPU gets its own burst factor.
                let burst = rng::range(s, 56, gpu as u64, k, 0.55, 1.35);
                let (base, span) = match job.phase {
                    // Prefill is compute-bound: near TDP while it works, between bursts idle.
                    Some(Phase::Prefill) => (110.0, 600.0),
                    // Decode is memory-bound: steadier, well under TDP.
                    Some(Phase::Decode) => (150.0, 380.0),
                    _ => (120.0, 520.0),
                };
                ((base + span * self.load(dep, mid) * burst) * scale).min(tdp)
            }
            Workload::Batch(level) => level + rng::range(s, 57, gpu as u64, k, -30.0, 30.0),
            // A MIG half in use: the other half idles.
            Workload::Notebook => 150.0 + rng::range(s, 58, gpu as u64, k, -40.0, 60.0),
        }
    }

    /// Node overhead (CPUs, memory, NICs, fans) for a given GPU draw, in W.
    fn node_power(&self, node: usize, gpu_w: f64, k: u64) -> f64 {
        gpu_w + 1100.0 + 0.22 * gpu_w + rng::range(self.seed, 60, node as u64, k, -40.0, 40.0)
    }

    fn facility_power(&self, it_w: f64, t: i64) -> f64 {
        let hour = (t.rem_euclid(DAY)) as f64 / HOUR as f64;
        // Cooling works harder in the afternoon.
        let cooling = 0.24 + 0.07 * ((hour - 15.0) / 24.0 * std::f64::consts::TAU).cos();
        it_w * (1.0 + cooling) + 9_000.0
    }

    pub fn intervals(&self) -> i64 {
        (self.to_ms - self.from_ms) / self.interval_ms + 1
    }

    /// Sample records for intervals `[k0, k1)`, ordered by meter then time (the fast order
    /// for the database), with the counters carried in `state`.
    pub fn sample_records(&self, k0: i64, k1: i64, state: &mut SampleState) -> Vec<Value> {
        if state.gpu.is_empty() {
            state.gpu = (0..self.gpus.len())
                .map(|g| 1_000_000_000_000 + rng::int(self.seed, 70, g as u64, 0, 0, 1 << 40))
                .collect();
            state.node = (0..self.nodes.len())
                .map(|n| 5_000_000_000_000 + rng::int(self.seed, 71, n as u64, 0, 0, 1 << 40))
                .collect();
            state.facility = vec![9_000_000_000_000; SITES.len()];
        }
        let n_int = (k1 - k0).max(0) as usize;
        let mut gpu_rows: Vec<Vec<Value>> = vec![Vec::with_capacity(n_int); self.gpus.len()];
        let mut node_rows: Vec<Vec<Value>> = vec![Vec::with_capacity(n_int); self.nodes.len()];
        let mut fac_rows: Vec<Vec<Value>> = vec![Vec::with_capacity(n_int); SITES.len()];
        let dt_s = self.interval_ms as f64 / 1000.0;
        // Counters read on every boundary of an interval that divides an hour are step
        // records (kept for the steps' retention); the BMCs' power readings stay raw.
        let step_s = u32::try_from(self.interval_ms / 1000)
            .ok()
            .filter(|s| self.interval_ms % 1000 == 0 && steps::length(*s).is_ok());
        for k in k0..k1 {
            let t = self.from_ms + k * self.interval_ms;
            let ts = iso(t);
            let mut site_it = vec![0.0; SITES.len()];
            for (n, node) in self.nodes.iter().enumerate() {
                let agent_down =
                    n == self.agent_gap.0 && (self.agent_gap.1..self.agent_gap.2).contains(&t);
                let mut gpu_w = 0.0;
                for &g in &node.gpus {
                    let p = self.gpu_power(g, t);
                    gpu_w += p;
                    if g == self.reset.0 && t >= self.reset.1 && !state.reset_done {
                        state.gpu[g] = 0;
                        state.reset_done = true;
                    }
                    if !agent_down {
                        gpu_rows[g].push(json!({"meter": self.gpus[g].key, "ts": ts,
                            "counter_mj": state.gpu[g], "power_w": (p * 100.0).round() / 100.0,
                            "step_s": step_s}));
                    }
                    state.gpu[g] += (p * dt_s * 1000.0).round() as i64;
                }
                let node_w = self.node_power(n, gpu_w, k as u64);
                site_it[node.site] += node_w;
                let site = &SITES[node.site];
                match site.node_meter {
                    NodeMeter::Counter if !agent_down => {
                        node_rows[n].push(json!({"meter": node.key, "ts": ts, "counter_mj": state.node[n], "step_s": step_s}))
                    }
                    NodeMeter::Power if !(n == self.bmc_gap.0 && (self.bmc_gap.1..self.bmc_gap.2).contains(&t)) => {
                        node_rows[n].push(json!({"meter": node.key, "ts": ts, "power_w": (node_w * 10.0).round() / 10.0}))
                    }
                    _ => {}
                }
                state.node[n] += (node_w * dt_s * 1000.0).round() as i64;
            }
            for (si, site) in SITES.iter().enumerate().filter(|(_, s)| s.facility) {
                fac_rows[si].push(json!({"meter": format!("{}-facility", site.key), "ts": ts,
                    "counter_mj": state.facility[si], "step_s": step_s}));
                state.facility[si] +=
                    (self.facility_power(site_it[si], t) * dt_s * 1000.0).round() as i64;
            }
        }
        fac_rows
            .into_iter()
            .chain(node_rows)
            .chain(gpu_rows)
            .flatten()
            .collect()
    }

    /// Token records of the shared endpoints for intervals `[k0, k1)`, per tenant.
    pub fn token_records(&self, k0: i64, k1: i64) -> Vec<Value> {
        let mut out = Vec::new();
        for k in k0..k1.min(self.intervals() - 1) {
            let t = self.from_ms + k * self.interval_ms;
            let mid = t + self.interval_ms / 2;
            let live: Vec<usize> = (0..self.jobs.len())
                .filter(|&j| matches!(self.jobs[j].workload, Workload::Inference(_)))
                .filter(|&j| self.jobs[j].start <= mid && mid < self.jobs[j].end)
                .collect();
            for j in live {
                let job = &self.jobs[j];
                let Workload::Inference(dep) = job.workload else {
                    continue;
                };
                let d = &self.deployments[dep];
                let generated =
                    d.tokens_per_s * self.load(dep, mid) * (self.interval_ms / 1000) as f64;
                // A disaggregated deployment's pools see the same requests: their wobble is
                // the deployment's, not the pool's.
                let stream = match job.phase {
                    Some(_) => 1000 + dep,
                    None => j,
                };
                for (ti, (tenant, share)) in d.tenants.iter().enumerate() {
                    let key = (stream * 8 + ti) as u64;
                    let wobble = rng::range(self.seed, 80, key, k as u64, 0.7, 1.3);
                    let gen = (generated * share * wobble).round() as i64;
                    // Prompts are longer than answers; retrieval-heavy tenants more so.
                    let ratio = if *tenant == "lumen-search" { 6.0 } else { 2.5 };
                    let prompt =
                        (gen as f64 * ratio * rng::range(self.seed, 81, key, k as u64, 0.8, 1.2))
                            .round() as i64;
                    // Each server counts what it saw: the prefill pool generates one token a
                    // request (about 250 generated tokens each), the decode pool is handed
                    // the prompts with their KV cache.
                    let gen = match job.phase {
                        Some(Phase::Prefill) => (gen + 125) / 250,
                        _ => gen,
                    };
                    out.push(json!({"job": job.key, "tenant": tenant, "start_at": iso(t),
                        "end_at": iso(t + self.interval_ms), "prompt_tokens": prompt, "generated_tokens": gen}));
                }
            }
        }
        out
    }
}

/// Counters carried from one sample chunk to the next.
#[derive(Debug, Default)]
pub struct SampleState {
    gpu: Vec<i64>,
    node: Vec<i64>,
    facility: Vec<i64>,
    reset_done: bool,
}

fn iso(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A parsed series as the JSON records of `/v1/ingest/signals`.
fn records(series: &wattledger_domain::signals::Series) -> impl Iterator<Item = Value> {
    wattledger_wire::SignalPoint::from_series(series)
        .into_iter()
        .map(|p| serde_json::to_value(p).expect("signal points serialize"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Timelike;
    use rust_decimal::Decimal;

    fn sim() -> Simulation {
        // 2 days from 2026-10-01.
        Simulation::new(
            42,
            1_790_812_800_000,
            1_790_812_800_000 + 2 * DAY,
            5 * MINUTE,
        )
    }

    #[test]
    fn deterministic() {
        let a = sim();
        let b = sim();
        let mut sa = SampleState::default();
        let mut sb = SampleState::default();
        assert_eq!(
            a.sample_records(0, 3, &mut sa),
            b.sample_records(0, 3, &mut sb)
        );
        assert_eq!(a.token_records(0, 3), b.token_records(0, 3));
    }

    #[test]
    fn both_zones_have_a_carbon_free_share_and_frankfurt_its_solar_by_day() {
        let s = sim();
        let shares: Vec<Value> = (s.signal_records().unwrap().into_iter())
            .filter(|r| r["signal"] == "carbon_free")
            .collect();
        // Every hour of both zones (the range and the hour after it).
        assert_eq!(shares.len(), 2 * (2 * 24 + 1));
        for r in &shares {
            let v: Decimal = r["value"].as_str().unwrap().parse().unwrap();
            assert!(v > Decimal::ZERO && v < Decimal::ONE, "{r}");
        }
        let solar = s.clean_energy_records();
        assert!(!solar.is_empty() && solar.iter().all(|r| r["site"] == "fra1"));
        for r in &solar {
            let hour = chrono::DateTime::parse_from_rfc3339(r["start_at"].as_str().unwrap())
                .unwrap()
                .hour();
            assert!((5..19).contains(&hour), "solar at night: {r}");
        }
    }

    #[test]
    fn oregon_has_a_rack_of_mi300x_at_work() {
        let s = sim();
        let amd: Vec<usize> = (0..s.gpus.len())
            .filter(|&g| s.gpus[g].model == MI300X)
            .collect();
        assert_eq!(amd.len(), 8 * AMD_NODES);
        assert!(amd.iter().all(|&g| s.gpus[g].key.starts_with("ore1-n")));
        let on_rack = |kind| {
            s.jobs
                .iter()
                .any(|j| j.kind == kind && j.gpus.iter().all(|(g, _)| s.gpus[*g].model == MI300X))
        };
        assert!(on_rack(JobKind::Training) && on_rack(JobKind::Inference));
        // Idle at ~140 W, at work up to its 750 W TDP.
        let idle = s.gpu_power(amd[8 * 3 + 6], s.from_ms);
        assert!((120.0..160.0).contains(&idle), "{idle}");
        let meters = s.meter_records();
        let models: std::collections::BTreeSet<&str> = meters["records"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["device_model"].as_str())
            .collect();
        assert_eq!(models, [MI300X, H100].into());
        let devices = s.device_model_records();
        assert_eq!(devices["records"][1]["key"], MI300X);
    }

    #[test]
    fn a_cluster_a_user_can_believe() {
        let s = sim();
        assert_eq!(s.nodes.len(), 24);
        assert_eq!(s.gpus.len(), 192);
        assert!(s.jobs.iter().any(|j| j.kind == JobKind::Training));
        assert!(s.jobs.iter().any(|j| j.kind == JobKind::Inference));
        assert!(s.jobs.iter().any(|j| j.kind == JobKind::Batch));
        // The disaggregated deployment's pools run side by side on their own GPUs.
        for phase in [Phase::Prefill, Phase::Decode] {
            let pool = s.jobs.iter().find(|j| j.phase == Some(phase)).unwrap();
            assert_eq!(pool.model, Some("llama-3.1-70b"));
        }
        for g in 0..s.gpus.len() {
            for k in 0..50 {
                let p = s.gpu_power(g, s.from_ms + k * s.interval_ms);
                let (idle, tdp) = if s.gpus[g].model == MI300X {
                    (120.0, 750.0)
                } else {
                    (60.0, 700.0)
                };
                assert!((idle..=tdp).contains(&p), "GPU {g} at {p} W");
            }
        }
    }
}
