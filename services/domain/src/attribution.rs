//! Attribution of one site-hour of metered energy to jobs, tenants and idle
//! (DESIGN.md "Attribution", rules 1–6).
//!
//! Input is the hour's energy per step of every meter (see [`crate::energy`]), the GPU
//! allocations active in it, and the hour's token totals per job and tenant. Output is ledger
//! rows whose total mJ add up to the site's energy for the hour exactly: every split goes
//! through [`crate::split`], and every unit of energy lands in exactly one row.

use crate::badput::lost_in_step;
use crate::breakdown::EnergyBreakdown;
use crate::energy::{MeterSteps, StepGrid};
use crate::phase::Phase;
use crate::quality::Quality;
use crate::split::{split, split_into};
use crate::units::{energy_at_power_mj, PPM};
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;

pub type TenantId = i64;
pub type ModelId = i64;
/// A device model, as an index into the caller's list of them.
pub type DeviceId = u32;

crate::names::names! {
    /// What the site's policy does with energy no job used. The names are the API's and the
    /// database's (migration 0001's CHECK).
    pub enum IdlePolicy {
        /// Idle energy is a row of the site's platform tenant.
        Platform = "platform",
        /// Idle energy is spread over the hour's jobs by their IT energy.
        Proportional = "proportional",
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SitePolicy {
    /// PUE applied when the site has no facility meter, or the meter has no data for a step.
    pub static_pue: Decimal,
    pub idle_policy: IdlePolicy,
    pub platform_tenant: TenantId,
    /// Node overhead (CPU, memory, NICs, fans) in mW assumed for a node without a reading.
    pub node_static_overhead_mw: i64,
}

/// A job's share of one GPU over an interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// Index into [`SiteHour::jobs`].
    pub job: usize,
    pub start_ms: i64,
    /// Exclusive; `i64::MAX` for a job still running.
    pub end_ms: i64,
    /// 1_000_000 for a whole GPU; a MIG slice or time-slice fraction otherwise.
    pub share_ppm: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    pub energy: MeterSteps,
    pub allocations: Vec<Allocation>,
    /// Embodied carbon the device accrues per ms of its life, in nanograms CO2e (its
    /// model's manufacturing footprint over its expected lifetime); 0 when unknown.
    pub embodied_ng_per_ms: i64,
    /// The device's fully loaded GPU-time price per ms, in 1e-12 of the site's currency (a
    /// GPU-hour rate / 3.6e6); 0 when none is set.
    pub time_price_pico_per_ms: i64,
    /// The device's model, for efficiency by GPU generation; `None` when not reported.
    pub device: Option<DeviceId>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The node's own meter (PDU outlet, BMC); `None` if it has none.
    pub energy: Option<MeterSteps>,
    pub gpus: Vec<Gpu>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Job {
    pub tenant: TenantId,
    pub model: Option<ModelId>,
    /// Token weights of the job's model, in ppm (prefill default 1.0, decode 4.0).
    pub prefill_weight_ppm: u64,
    pub decode_weight_ppm: u64,
    /// The instant (ms since the epoch, as allocations' times) from which the job's energy is
    /// badput ([`crate::badput::lost_from`]); `i64::MAX` when none of it is.
    pub lost_from_ms: i64,
    /// The serving phase the job's GPUs run: which of its tokens count
    /// ([`Phase::processed`]). `Both` for any job not in a disaggregated deployment.
    pub phase: Phase,
}

/// Tokens a job served to one tenant in the hour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tokens {
    pub job: usize,
    pub tenant: TenantId,
    pub prompt: i64,
    pub generated: i64,
}

/// Everything attribution needs for one site and one hour.
///
/// `jobs` must be ordered by job key: the order breaks ties in every split.
#[derive(Debug, Clone, PartialEq)]
pub struct SiteHour {
    pub policy: SitePolicy,
    pub grid: StepGrid,
    /// The site's facility meter; `None` if it has none (static PUE applies).
    pub facility: Option<MeterSteps>,
    pub nodes: Vec<Node>,
    pub jobs: Vec<Job>,
    pub tokens: Vec<Tokens>,
}

/// One ledger row: a tenant's energy for a job (or idle, `job: None`) in the hour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub tenant: TenantId,
    pub job: Option<usize>,
    pub model: Option<ModelId>,
    pub energy: EnergyBreakdown,
    pub prompt_tokens: i64,
    pub generated_tokens: i64,
    /// GPU time held, in ms: each GPU's hour split over its holders by overlap × share
    /// summed over the hour (and the unheld rest), once, so the parts add up to the GPU's
    /// hour and each is within half a ms of its exact time. The basis of embodied carbon.
    pub gpu_ms: i64,
    /// Embodied carbon (SCI's M) of the GPU time held, in nanograms CO2e; idle GPU time's
    /// share follows the idle policy like idle energy.
    pub embodied_ng: i64,
    /// GPU time at the devices' GPU-hour rates, in 1e-12 currency; idle GPU time's share
    /// follows the idle policy.
    pub time_price_pico: i64,
    /// `gpu_ms` and `time_price_pico` per device model (they are the sums of these).
    pub gpu_time: DeviceTimes,
    /// The part of the row's own energy (GPU, node and facility overhead; not an idle share
    /// the policy spread onto it) spent after the job's work was last saved, when the job
    /// then lost it ([`crate::badput`]).
    pub badput_mj: i64,
    pub quality: Quality,
}

/// Site-level figures of the hour: the denominators of PUE, ITUE and TUE.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HourTotals {
    /// Site energy: facility meter (or IT × static PUE), reconciled. Σ rows = this.
    pub site_mj: i64,
    /// IT energy: Σ node energy (node meters, or GPUs + static overhead).
    pub it_mj: i64,
    /// Accelerator energy: Σ GPU meters.
    pub gpu_mj: i64,
    /// Energy no job used (idle GPUs, node overhead without jobs, and its facility share),
    /// before the idle policy moves it.
    pub idle_mj: i64,
    pub estimated_mj: i64,
    /// Σ GPU time allocated (ms × share) and Σ GPU time available (ms), for the allocated
    /// GPU fraction.
    pub allocated_gpu_ms: i64,
    pub capacity_gpu_ms: i64,
    pub gpu_steps: i64,
    pub quality: Quality,
    /// Embodied carbon of every GPU's hour, held or idle, in nanograms (Σ rows = this).
    pub embodied_ng: i64,
    /// Site energy of each step (Σ = `site_mj`): what prices and intensities that change
    /// within the hour multiply.
    pub site_mj_by_step: Vec<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributed {
    pub rows: Vec<Row>,
    pub totals: HourTotals,
    /// The model-serving rows' energy and tokens split over the device models they ran on
    /// ([`devices::by_device`]), for efficiency by GPU generation.
    pub devices: Vec<DeviceRow>,
}

/// Per-job running sums of one hour, before tenant splitting and idle policy.
#[derive(Debug, Clone, Copy, Default)]
struct Acc {
    /// On the idle accumulator, `idle_mj` is the idle IT energy and `facility_overhead_mj`
    /// its facility share.
    energy: EnergyBreakdown,
    gpu_ms: i64,
    embodied: i64,
    badput_mj: i64,
    quality: Quality,
}

/// Buffers reused across steps so the hot loop does not allocate.
#[derive(Default)]
struct Scratch {
    weights: Vec<u128>,
    parts: Vec<i64>,
    /// A GPU's holders in the step (job, overlap × share), in job order: the parts of
    /// `weights` but its last (the unheld rest).
    holders: Vec<(usize, u128)>,
    /// Per job: GPU energy and IT energy in the current step, with the jobs touched.
    step_gpu: Vec<i64>,
    step_it: Vec<i64>,
    step_est: Vec<bool>,
    in_step: Vec<bool>,
    touched: Vec<usize>,
    node_jobs: Vec<usize>,
    /// The node's GPUs' energy in the step, after estimates are held to the node's meter.
    gpu_e: Vec<i64>,
}

/// Attributes one site-hour. Pure and deterministic: the same input gives the same rows.
/// Each step goes through rules 1–3 ([`Hour::gpus`], [`Hour::node_overhead`],
/// [`Hour::facility_overhead`]); rules 4 and 5 make the rows ([`Hour::rows`]).
pub fn attribute(input: &SiteHour) -> Attributed {
    let mut hour = Hour::new(input);
    for index in 0..input.grid.steps {
        let mut step = hour.begin_step(index);
        let mut first_gpu = 0;
        for node in &input.nodes {
            let gpus = hour.gpus(node, first_gpu, &mut step);
            hour.node_overhead(node, gpus, &mut step);
            first_gpu += node.gpus.len();
        }
        hour.facility_overhead(&mut step);
        hour.end_step(&step);
    }
    hour.rows()
}

/// The hour being attributed: what every rule adds to.
struct Hour<'a> {
    input: &'a SiteHour,
    /// Per job, and for energy no job used.
    acc: Vec<Acc>,
    /// Per job: its GPU energy per device model (a short list: a job spans one or two).
    device_mj: Vec<Vec<(DeviceId, i64)>>,
    /// Per job, and for GPU time no job held: its time and price per device model.
    device_time: Vec<DeviceTimes>,
    idle_time: DeviceTimes,
    idle: Acc,
    /// Per GPU, in the nodes' order: its time held in the hour, split once at its end.
    gpu_time: Vec<GpuTime>,
    totals: HourTotals,
    s: Scratch,
    pue_overhead: Decimal,
}

/// One GPU's time in the hour: each holder's overlap × share summed over the steps (ms ×
/// ppm, exact), and the unheld rest, split into whole ms once, at the end of the hour. Split
/// at every step, a 3/7 MIG slice lost 0.29 ms a minute to the 4/7 beside it (25,714 ms of
/// each 60,000, 1,542,840 of its 1,542,857 an hour); split once, each holder is within half
/// a ms of its exact time, and the parts still add up to the hour.
#[derive(Debug, Clone, Default)]
struct GpuTime {
    /// (job, Σ overlap × share), in job order.
    holders: Vec<(usize, u128)>,
    unheld: u128,
    /// The ms the steps held: the hour, or more where allocations overbooked the GPU.
    ms: i64,
}

impl GpuTime {
    fn hold(&mut self, job: usize, weight: u128) {
        match self.holders.binary_search_by_key(&job, |h| h.0) {
            Ok(k) => self.holders[k].1 += weight,
            Err(k) => self.holders.insert(k, (job, weight)),
        }
    }
}

/// What one step has gathered so far, across its nodes.
struct Step {
    index: usize,
    t0: i64,
    t1: i64,
    /// IT energy of the site, and the part of it no job used.
    site_it: i64,
    idle_it: i64,
    idle_est: bool,
    /// The facility's overhead in the step, once rule 3 has run.
    overhead: i64,
    quality: Quality,
}

/// A node's GPUs in one step, as rule 2 needs them.
#[derive(Clone, Copy)]
struct NodeGpus {
    sum: i64,
    estimated: bool,
    /// Some GPU reported: the node was alive, so a missing node reading is modelled.
    measured: bool,
}

impl<'a> Hour<'a> {
    fn new(input: &'a SiteHour) -> Self {
        let jobs = input.jobs.len();
        Hour {
            input,
            acc: vec![Acc::default(); jobs],
            device_mj: vec![Vec::new(); jobs],
            device_time: vec![DeviceTimes::new(); jobs],
            idle_time: DeviceTimes::new(),
            idle: Acc::default(),
            gpu_time: vec![GpuTime::default(); input.nodes.iter().map(|n| n.gpus.len()).sum()],
            totals: HourTotals {
                site_mj_by_step: Vec::with_capacity(input.grid.steps),
                ..HourTotals::default()
            },
            s: Scratch {
                step_gpu: vec![0; jobs],
                step_it: vec![0; jobs],
                step_est: vec![false; jobs],
                in_step: vec![false; jobs],
                ..Scratch::default()
            },
            pue_overhead: input.policy.static_pue - Decimal::ONE,
        }
    }

    fn begin_step(&mut self, index: usize) -> Step {
        let s = &mut self.s;
        for &j in &s.touched {
            s.step_gpu[j] = 0;
            s.step_it[j] = 0;
            s.step_est[j] = false;
            s.in_step[j] = false;
        }
        s.touched.clear();
        let t0 = self.input.grid.step_start(index);
        Step {
            index,
            t0,
            t1: t0 + self.input.grid.step_ms,
            site_it: 0,
            idle_it: 0,
            idle_est: false,
            overhead: 0,
            quality: Quality::EMPTY,
        }
    }

    /// Rule 1: each GPU's energy split over its allocations by overlap × share; the rest
    /// is idle. GPU time held (and its embodied carbon and GPU-hour price) follows too.
    fn gpus(&mut self, node: &Node, first_gpu: usize, step: &mut Step) -> NodeGpus {
        let grid = self.input.grid;
        let (acc, idle, totals, s) = (&mut self.acc, &mut self.idle, &mut self.totals, &mut self.s);
        let gpu_time = &mut self.gpu_time[first_gpu..first_gpu + node.gpus.len()];
        let device_mj = &mut self.device_mj;
        s.node_jobs.clear();
        hold_estimates_to_node(node, step.index, &mut s.gpu_e);
        let mut out = NodeGpus {
            sum: 0,
            estimated: false,
            measured: false,
        };
        for (g, gpu) in node.gpus.iter().enumerate() {
            let e = s.gpu_e[g];
            let q = gpu.energy.quality[step.index];
            step.quality |= q;
            out.estimated |= q.is_estimated();
            out.measured |= !q.contains(Quality::MISSING) || e != 0;
            out.sum += e;
            totals.gpu_steps += 1;
            totals.capacity_gpu_ms += grid.step_ms;
            s.holders.clear();
            for a in &gpu.allocations {
                let overlap = step.t1.min(a.end_ms) - step.t0.max(a.start_ms);
                if overlap > 0 {
                    s.holders
                        .push((a.job, overlap as u128 * u128::from(a.share_ppm)));
                }
            }
            // In job-key order, whatever order the allocations came in: a tie in the split
            // goes to the earlier part, and the earlier part must be the earlier job.
            s.holders.sort_unstable();
            s.weights.clear();
            s.weights.extend(s.holders.iter().map(|h| h.1));
            let held: u128 = s.weights.iter().sum();
            let capacity = grid.step_ms as u128 * u128::from(PPM);
            s.weights.push(capacity.saturating_sub(held));
            // The step's GPU time is kept exact for the hour ([`GpuTime`]). Allocations that
            // overbook the GPU hold more than the step, to the nearest ms.
            let step_ms = if held > capacity {
                ((held + u128::from(PPM / 2)) / u128::from(PPM)) as i64
            } else {
                grid.step_ms
            };
            let time = &mut gpu_time[g];
            for &(j, w) in &s.holders {
                time.hold(j, w);
            }
            time.unheld += capacity.saturating_sub(held);
            time.ms += step_ms;
            // The device ages whether or not anyone holds it.
            totals.embodied_ng += step_ms * gpu.embodied_ng_per_ms;
            s.parts.resize(s.weights.len(), 0);
            split_into(e, &s.weights, &mut s.parts);
            let last = s.parts.len() - 1;
            for (k, &(j, _)) in s.holders.iter().enumerate() {
                let part = s.parts[k];
                acc[j].quality |= q;
                if !s.in_step[j] {
                    s.in_step[j] = true;
                    s.touched.push(j);
                }
                if !s.node_jobs.contains(&j) {
                    s.node_jobs.push(j);
                }
                s.step_gpu[j] += part;
                s.step_it[j] += part;
                acc[j].energy.gpu_mj += part;
                if let Some(d) = gpu.device.filter(|_| part != 0) {
                    devices::add(&mut device_mj[j], d, part);
                }
                if q.is_estimated() {
                    acc[j].energy.estimated_mj += part;
                    s.step_est[j] = true;
                }
            }
            step.idle_it += s.parts[last];
            if q.is_estimated() {
                idle.energy.estimated_mj += s.parts[last];
                step.idle_est |= s.parts[last] != 0;
            }
            idle.quality |= q;
        }
        totals.gpu_mj += out.sum;
        out
    }

    /// Rule 2: node overhead = node meter − Σ GPUs, split by the jobs' GPU energy on the
    /// node. The static node model only where the node was alive (some GPU measured) but
    /// its own reading is absent; a node with no data at all gets no invented energy.
    fn node_overhead(&mut self, node: &Node, gpus: NodeGpus, step: &mut Step) {
        let (acc, idle, s) = (&mut self.acc, &mut self.idle, &mut self.s);
        let policy = &self.input.policy;
        let (model_e, model_q) = if gpus.measured {
            let modelled =
                energy_at_power_mj(policy.node_static_overhead_mw, self.input.grid.step_ms);
            (gpus.sum + modelled, Quality::NODE_MODEL)
        } else {
            (gpus.sum, Quality::MISSING)
        };
        let (node_e, mut node_q) = match &node.energy {
            Some(m) if !m.quality[step.index].contains(Quality::MISSING) => {
                (m.mj[step.index], m.quality[step.index])
            }
            // A partial step still carries measured energy.
            Some(m) if m.mj[step.index] > 0 => (m.mj[step.index], m.quality[step.index]),
            Some(m) => (model_e, m.quality[step.index] | model_q),
            None => (model_e, model_q),
        };
        let mut overhead = node_e - gpus.sum;
        if overhead < 0 {
            node_q |= Quality::NEGATIVE_OVERHEAD;
            overhead = 0;
        }
        // Measured node energy minus an estimated GPU's is an estimated overhead: whoever
        // shares it is told so, though their own readings were fine.
        if gpus.estimated && overhead != 0 {
            node_q |= Quality::OVERHEAD_ESTIMATED;
        }
        step.quality |= node_q;
        let overhead_est = node_q.is_estimated();
        step.site_it += gpus.sum + overhead;
        // Job-key order for the tie-break, not the order the node's GPUs met the jobs.
        s.node_jobs.sort_unstable();
        s.weights.clear();
        for &j in &s.node_jobs {
            s.weights.push(s.step_gpu[j].max(0) as u128);
        }
        let job_gpu: u128 = s.weights.iter().sum();
        if job_gpu == 0 {
            step.idle_it += overhead;
            idle.quality |= node_q;
            if overhead_est {
                idle.energy.estimated_mj += overhead;
                step.idle_est |= overhead != 0;
            }
        } else {
            s.parts.resize(s.weights.len(), 0);
            split_into(overhead, &s.weights, &mut s.parts);
            for (k, &j) in s.node_jobs.iter().enumerate() {
                let part = s.parts[k];
                acc[j].energy.node_overhead_mj += part;
                acc[j].quality |= node_q;
                s.step_it[j] += part;
                if overhead_est {
                    acc[j].energy.estimated_mj += part;
                    s.step_est[j] = true;
                }
            }
        }
        // Per-step GPU sums are per node; reset them so the next node's overhead split
        // only weighs its own GPUs.
        for &j in &s.node_jobs {
            s.step_gpu[j] = 0;
        }
    }

    /// Rule 3: facility overhead = facility meter − IT, or IT × (PUE − 1), split by each
    /// job's IT energy in the step; what no IT energy weighs is idle.
    fn facility_overhead(&mut self, step: &mut Step) {
        let (acc, idle, s) = (&mut self.acc, &mut self.idle, &mut self.s);
        let (mut overhead, mut fac_q) = match &self.input.facility {
            Some(m) if !m.quality[step.index].contains(Quality::MISSING) => {
                (m.mj[step.index] - step.site_it, m.quality[step.index])
            }
            Some(m) => (
                static_overhead(step.site_it, self.pue_overhead),
                m.quality[step.index] | Quality::FACILITY_FALLBACK,
            ),
            None => (
                static_overhead(step.site_it, self.pue_overhead),
                Quality::EMPTY,
            ),
        };
        if overhead < 0 {
            fac_q |= Quality::NEGATIVE_OVERHEAD;
            overhead = 0;
        }
        step.quality |= fac_q;
        let fac_est = fac_q.is_estimated();
        // Job-key order for the tie-break, not the order the nodes met the jobs.
        s.touched.sort_unstable();
        s.weights.clear();
        for &j in &s.touched {
            s.weights.push(s.step_it[j].max(0) as u128);
        }
        s.weights.push(step.idle_it.max(0) as u128);
        s.parts.resize(s.weights.len(), 0);
        split_into(overhead, &s.weights, &mut s.parts);
        let mut unplaced = overhead;
        for (k, &j) in s.touched.iter().enumerate() {
            let part = s.parts[k];
            unplaced -= part;
            let lost_from = self.input.jobs[j].lost_from_ms;
            if lost_from < step.t1 {
                acc[j].badput_mj += lost_in_step(s.step_it[j] + part, step.t0, step.t1, lost_from);
            }
            acc[j].energy.facility_overhead_mj += part;
            acc[j].quality |= fac_q;
            if fac_est || s.step_est[j] {
                acc[j].energy.estimated_mj += part;
            }
        }
        // What no IT energy weighs (a facility drawing power with every node dark) is idle.
        idle.energy.idle_mj += step.idle_it;
        idle.energy.facility_overhead_mj += unplaced;
        idle.quality |= fac_q;
        if fac_est || step.idle_est {
            idle.energy.estimated_mj += unplaced;
        }
        step.overhead = overhead;
    }

    fn end_step(&mut self, step: &Step) {
        let site = step.site_it + step.overhead;
        self.totals.it_mj += step.site_it;
        self.totals.site_mj += site;
        self.totals.site_mj_by_step.push(site);
        self.totals.quality |= step.quality;
    }

    /// Each GPU's hour of time to its holders and the unheld rest, in whole ms by largest
    /// remainder; embodied carbon and the GPU-hour price follow the ms, the unheld rest's to
    /// idle (the device ages whether or not anyone holds it).
    fn settle_gpu_time(&mut self) {
        let gpus = self.input.nodes.iter().flat_map(|n| &n.gpus);
        let (acc, idle, totals, s) = (&mut self.acc, &mut self.idle, &mut self.totals, &mut self.s);
        let (device_time, idle_time) = (&mut self.device_time, &mut self.idle_time);
        for (gpu, time) in gpus.zip(&self.gpu_time) {
            s.weights.clear();
            s.weights.extend(time.holders.iter().map(|h| h.1));
            s.weights.push(time.unheld);
            s.parts.resize(s.weights.len(), 0);
            split_into(time.ms, &s.weights, &mut s.parts);
            for (&(j, _), &ms) in time.holders.iter().zip(&s.parts) {
                acc[j].gpu_ms += ms;
                acc[j].embodied += ms * gpu.embodied_ng_per_ms;
                let price = ms * gpu.time_price_pico_per_ms;
                gpu_time::add(&mut device_time[j], gpu.device, ms, price);
                totals.allocated_gpu_ms += ms;
            }
            let unheld = s.parts[time.holders.len()];
            idle.embodied += unheld * gpu.embodied_ng_per_ms;
            let price = unheld * gpu.time_price_pico_per_ms;
            gpu_time::add(idle_time, gpu.device, 0, price);
        }
    }

    /// The hour's rows: rule 5's job rows, then rule 4's idle.
    fn rows(mut self) -> Attributed {
        self.settle_gpu_time();
        let Hour {
            input,
            acc,
            device_mj,
            device_time,
            idle_time,
            idle,
            mut totals,
            ..
        } = self;
        totals.idle_mj = idle.energy.idle_mj + idle.energy.facility_overhead_mj;

        let mut rows = job_rows(input, &acc, &device_time);
        place_idle(&mut rows, &idle, &idle_time, &input.policy);
        totals.estimated_mj = rows.iter().map(|r| r.energy.estimated_mj).sum();
        debug_assert_eq!(
            rows.iter().map(|r| r.energy.total_mj()).sum::<i64>(),
            totals.site_mj
        );
        debug_assert!(
            rows.is_empty()
                || rows.iter().map(|r| r.embodied_ng).sum::<i64>() == totals.embodied_ng
        );
        debug_assert!(rows
            .iter()
            .all(|r| gpu_time::totals(&r.gpu_time) == (r.gpu_ms, r.time_price_pico)));
        let devices = devices::by_device(&rows, &device_mj);
        Attributed {
            rows,
            totals,
            devices,
        }
    }
}

/// Rule 5: one row per job, or per tenant its tokens name (split by weighted tokens).
fn job_rows(input: &SiteHour, acc: &[Acc], device_time: &[DeviceTimes]) -> Vec<Row> {
    let mut rows = Vec::with_capacity(acc.len() + 1);
    // Each job's token records, in input order, gathered in one pass: a window holds
    // thousands of jobs and an hour thousands of records, too many to scan per job.
    let mut tokens_of: Vec<Vec<&Tokens>> = vec![Vec::new(); acc.len()];
    for t in &input.tokens {
        if let Some(of_job) = tokens_of.get_mut(t.job) {
            of_job.push(t);
        }
    }
    for ((j, job_acc), tokens) in acc.iter().enumerate().zip(&tokens_of) {
        let has_energy = job_acc.gpu_ms != 0
            || job_acc.energy.it_mj() != 0
            || job_acc.energy.facility_overhead_mj != 0;
        if !has_energy && tokens.is_empty() {
            continue;
        }
        push_job_rows(
            &mut rows,
            j,
            &input.jobs[j],
            job_acc,
            &device_time[j],
            tokens,
        );
    }
    rows
}

/// Rule 4: the energy no job used, to the platform tenant, or over the hour's job rows by
/// their IT energy (the proportional policy).
fn place_idle(rows: &mut Vec<Row>, idle: &Acc, idle_time: &[DeviceTime], policy: &SitePolicy) {
    let idle_total = idle.energy.idle_mj + idle.energy.facility_overhead_mj;
    let job_it: Vec<u128> = rows
        .iter()
        .map(|r| r.energy.it_mj().max(0) as u128)
        .collect();
    let spread_idle =
        policy.idle_policy == IdlePolicy::Proportional && job_it.iter().any(|&w| w > 0);
    if spread_idle {
        let idle_parts = split(idle.energy.idle_mj, &job_it);
        let fac_parts = split(idle.energy.facility_overhead_mj, &job_it);
        // By what each row received, not by the same weights split again: two independent
        // roundings could give a row more estimated energy than energy.
        let received: Vec<u128> = idle_parts
            .iter()
            .zip(&fac_parts)
            .map(|(i, f)| (i + f).max(0) as u128)
            .collect();
        let est_parts = split(idle.energy.estimated_mj, &received);
        let emb_parts = split(idle.embodied, &job_it);
        let time_parts = gpu_time::split_over(idle_time, &job_it);
        for (k, row) in rows.iter_mut().enumerate() {
            // The whole idle share, its facility overhead included, is the row's idle: a
            // statement shows it as one line, and the row's facility overhead stays its own.
            row.energy.idle_mj += idle_parts[k] + fac_parts[k];
            row.energy.estimated_mj += est_parts[k];
            row.embodied_ng += emb_parts[k];
            for t in &time_parts[k] {
                row.time_price_pico += t.price_pico;
                gpu_time::add(&mut row.gpu_time, t.device, 0, t.price_pico);
            }
            if idle_parts[k] != 0 || fac_parts[k] != 0 || est_parts[k] != 0 {
                row.quality |= idle.quality;
            }
        }
    } else if idle_total != 0 || idle.embodied != 0 || !idle_time.is_empty() {
        rows.push(Row {
            tenant: policy.platform_tenant,
            job: None,
            model: None,
            energy: idle.energy,
            prompt_tokens: 0,
            generated_tokens: 0,
            gpu_ms: 0,
            embodied_ng: idle.embodied,
            time_price_pico: gpu_time::totals(idle_time).1,
            gpu_time: idle_time.to_vec(),
            badput_mj: 0,
            quality: idle.quality,
        });
    }
}

/// The node's GPUs' energy in `step` into `out`. A counter reset's estimate (the only GPU
/// energy that is not a reading) may not claim more than the node's own meter measured in
/// the step: the excess over the node comes off the estimated GPUs, so the node's energy,
/// and with it the site's, stays what the meters said.
fn hold_estimates_to_node(node: &Node, step: usize, out: &mut Vec<i64>) {
    out.clear();
    out.extend(node.gpus.iter().map(|g| g.energy.mj[step]));
    let Some(meter) = node.energy.as_ref() else {
        return;
    };
    if meter.quality[step].contains(Quality::MISSING) {
        return;
    }
    let excess = out.iter().sum::<i64>() - meter.mj[step];
    if excess <= 0 {
        return;
    }
    let weights: Vec<u128> = node
        .gpus
        .iter()
        .zip(out.iter())
        .map(|(g, &e)| {
            if g.energy.quality[step].contains(Quality::RESET_ESTIMATED) {
                e.max(0) as u128
            } else {
                0
            }
        })
        .collect();
    let estimated: i64 = weights.iter().map(|&w| w as i64).sum();
    if estimated == 0 {
        return;
    }
    let cut = split(excess.min(estimated), &weights);
    for (e, c) in out.iter_mut().zip(cut) {
        *e -= c;
    }
}

fn static_overhead(it_mj: i64, pue_overhead: Decimal) -> i64 {
    (Decimal::from(it_mj) * pue_overhead)
        .round()
        .to_i64()
        .unwrap_or(0)
        .max(0)
}

fn push_job_rows(
    rows: &mut Vec<Row>,
    j: usize,
    job: &Job,
    acc: &Acc,
    time: &[DeviceTime],
    tokens: &[&Tokens],
) {
    let base = Row {
        tenant: job.tenant,
        job: Some(j),
        model: job.model,
        energy: acc.energy,
        prompt_tokens: 0,
        generated_tokens: 0,
        gpu_ms: acc.gpu_ms,
        embodied_ng: acc.embodied,
        time_price_pico: gpu_time::totals(time).1,
        gpu_time: time.to_vec(),
        badput_mj: acc.badput_mj,
        quality: acc.quality,
    };
    // Merge token records per tenant, ordered by tenant id for a stable tie-break.
    let mut by_tenant: Vec<(TenantId, i64, i64)> = Vec::new();
    for t in tokens {
        let (prompt, generated) = job.phase.processed(t.prompt, t.generated);
        match by_tenant.iter_mut().find(|(id, _, _)| *id == t.tenant) {
            Some(e) => {
                e.1 += prompt;
                e.2 += generated;
            }
            None => by_tenant.push((t.tenant, prompt, generated)),
        }
    }
    by_tenant.sort_by_key(|e| e.0);
    let weights: Vec<u128> = by_tenant
        .iter()
        .map(|&(_, p, g)| {
            p.max(0) as u128 * u128::from(job.prefill_weight_ppm)
                + g.max(0) as u128 * u128::from(job.decode_weight_ppm)
        })
        .collect();
    if weights.iter().all(|&w| w == 0) {
        let mut row = base;
        for &(_, p, g) in &by_tenant {
            row.prompt_tokens += p;
            row.generated_tokens += g;
        }
        rows.push(row);
        return;
    }
    let energy = acc.energy.split(&weights);
    let embodied = split(acc.embodied, &weights);
    let gpu_time = gpu_time::split_over(time, &weights);
    // By what each row received, as estimated energy is: a row never loses more than it has.
    let received: Vec<u128> = energy.iter().map(|e| e.total_mj().max(0) as u128).collect();
    let badput = split(acc.badput_mj, &received);
    for (k, (&(tenant, prompt, generated), gpu_time)) in by_tenant.iter().zip(gpu_time).enumerate()
    {
        let (gpu_ms, time_price_pico) = gpu_time::totals(&gpu_time);
        rows.push(Row {
            tenant,
            energy: energy[k],
            prompt_tokens: prompt,
            generated_tokens: generated,
            gpu_ms,
            embodied_ng: embodied[k],
            time_price_pico,
            gpu_time,
            badput_mj: badput[k],
            ..base.clone()
        });
    }
}

mod devices;
pub mod gpu_time;
pub use devices::DeviceRow;
pub use gpu_time::{DeviceTime, DeviceTimes};

#[cfg(test)]
mod tests;
