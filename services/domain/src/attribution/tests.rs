//! Known answers worked out by hand, and properties that hold for any site-hour.

use super::*;
use crate::energy::MeterSteps;
use proptest::prelude::*;

const STEP: i64 = 60_000;
const HOUR: i64 = 3_600_000;
const A: TenantId = 1;
const B: TenantId = 2;
const PLATFORM: TenantId = 9;

fn constant(mj: i64, steps: usize) -> MeterSteps {
    MeterSteps {
        mj: vec![mj; steps],
        quality: vec![Quality::EMPTY; steps],
    }
}

fn hour_grid() -> StepGrid {
    StepGrid {
        start_ms: 0,
        step_ms: STEP,
        steps: 60,
    }
}

fn whole(job: usize) -> Allocation {
    Allocation {
        job,
        start_ms: 0,
        end_ms: HOUR,
        share_ppm: PPM,
    }
}

fn job(tenant: TenantId) -> Job {
    Job {
        tenant,
        model: None,
        prefill_weight_ppm: 1_000_000,
        decode_weight_ppm: 4_000_000,
        lost_from_ms: i64::MAX,
        phase: Phase::Both,
    }
}

fn policy(idle_policy: IdlePolicy) -> SitePolicy {
    SitePolicy {
        static_pue: Decimal::new(125, 2),
        idle_policy,
        platform_tenant: PLATFORM,
        node_static_overhead_mw: 0,
    }
}

/// Two tenants share a node: A trains on a whole GPU (700 W), B runs on a MIG half of a
/// second GPU (300 W, the other half idle), and A's inference endpoint on a third GPU
/// (400 W) serves A (1000 prompt + 250 generated tokens) and B (2000 + 500). The node meter
/// reads 1600 W; the site has no facility meter and a static PUE of 1.25.
///
/// Per minute: GPUs 42 + 9 (+9 idle) + 24 MJ; node overhead 12 MJ split 42:9:24 →
/// 6.72, 1.44, 3.84 MJ; IT 48.72, 10.44, 27.84 and 9 idle = 96 MJ; facility 24 MJ split by
/// IT → 12.18, 2.61, 6.96, 2.25. The endpoint's tokens weigh A 1000 + 4×250 = 2000 and
/// B 2000 + 4×500 = 4000, so A gets a third of it.
fn shared_node_scenario(idle_policy: IdlePolicy) -> SiteHour {
    let steps = 60;
    SiteHour {
        policy: policy(idle_policy),
        grid: hour_grid(),
        facility: None,
        nodes: vec![Node {
            energy: Some(constant(96_000_000, steps)),
            gpus: vec![
                Gpu {
                    embodied_ng_per_ms: 0,
                    time_price_pico_per_ms: 0,
                    device: None,
                    energy: constant(42_000_000, steps),
                    allocations: vec![whole(0)],
                },
                Gpu {
                    embodied_ng_per_ms: 0,
                    time_price_pico_per_ms: 0,
                    device: None,
                    energy: constant(18_000_000, steps),
                    allocations: vec![Allocation {
                        share_ppm: PPM / 2,
                        ..whole(1)
                    }],
                },
                Gpu {
                    embodied_ng_per_ms: 0,
                    time_price_pico_per_ms: 0,
                    device: None,
                    energy: constant(24_000_000, steps),
                    allocations: vec![whole(2)],
                },
            ],
        }],
        jobs: vec![job(A), job(B), job(A)],
        tokens: vec![
            Tokens {
                job: 2,
                tenant: A,
                prompt: 1000,
                generated: 250,
            },
            Tokens {
                job: 2,
                tenant: B,
                prompt: 2000,
                generated: 500,
            },
        ],
    }
}

fn tenant_total(rows: &[Row], tenant: TenantId) -> i64 {
    rows.iter()
        .filter(|r| r.tenant == tenant)
        .map(|r| r.energy.total_mj())
        .sum()
}

#[test]
fn known_answer_platform_idle() {
    let out = attribute(&shared_node_scenario(IdlePolicy::Platform));
    assert_eq!(
        out.totals.site_mj, 7_200_000_000,
        "2 kWh at the meter × PUE"
    );
    assert_eq!(out.totals.it_mj, 5_760_000_000);
    assert_eq!(out.totals.gpu_mj, 5_040_000_000);
    assert_eq!(tenant_total(&out.rows, A), 4_350_000_000);
    assert_eq!(tenant_total(&out.rows, B), 2_175_000_000);
    assert_eq!(tenant_total(&out.rows, PLATFORM), 675_000_000);

    let train = out.rows.iter().find(|r| r.job == Some(0)).unwrap();
    assert_eq!(
        (
            train.energy.gpu_mj,
            train.energy.node_overhead_mj,
            train.energy.facility_overhead_mj
        ),
        (2_520_000_000, 403_200_000, 730_800_000)
    );
    let endpoint_b = out
        .rows
        .iter()
        .find(|r| r.job == Some(2) && r.tenant == B)
        .unwrap();
    assert_eq!(endpoint_b.energy.gpu_mj, 960_000_000);
    assert_eq!(endpoint_b.energy.node_overhead_mj, 153_600_000);
    assert_eq!(endpoint_b.energy.facility_overhead_mj, 278_400_000);
    assert_eq!(
        (endpoint_b.prompt_tokens, endpoint_b.generated_tokens),
        (2000, 500)
    );
    let idle = out.rows.iter().find(|r| r.job.is_none()).unwrap();
    assert_eq!(
        (idle.energy.idle_mj, idle.energy.facility_overhead_mj),
        (540_000_000, 135_000_000)
    );
    // The MIG half held half a GPU for the hour.
    let mig = out.rows.iter().find(|r| r.job == Some(1)).unwrap();
    assert_eq!(mig.gpu_ms, HOUR / 2);
}

/// A's training job (GPU 0) fails; it last saved its state at 40:30. Its own energy is
/// 48.72 MJ IT + 12.18 MJ facility = 60.9 MJ a minute: the 19 minutes from 41:00 and half of
/// the minute from 40:00 are lost, 19 × 60.9 + 30.45 = 1187.55 MJ. Nothing else changes, and
/// the endpoint (no loss) and B's job lose nothing.
#[test]
fn known_answer_badput_after_the_last_checkpoint() {
    let mut hour = shared_node_scenario(IdlePolicy::Platform);
    hour.jobs[0].lost_from_ms = 40 * STEP + STEP / 2;
    let out = attribute(&hour);
    let before = attribute(&shared_node_scenario(IdlePolicy::Platform));
    let job0 = out.rows.iter().find(|r| r.job == Some(0)).unwrap();
    assert_eq!(job0.energy.total_mj(), 3_654_000_000);
    assert_eq!(job0.badput_mj, 1_187_550_000);
    for (r, b) in out.rows.iter().zip(&before.rows) {
        assert_eq!(r.energy, b.energy);
        if r.job != Some(0) {
            assert_eq!(r.badput_mj, 0);
        }
    }
    // Lost from before the hour: all of its own energy; under the proportional policy, not
    // the idle share spread onto it.
    let mut hour = shared_node_scenario(IdlePolicy::Proportional);
    hour.jobs[0].lost_from_ms = -1;
    let out = attribute(&hour);
    let job0 = out.rows.iter().find(|r| r.job == Some(0)).unwrap();
    assert_eq!(job0.badput_mj, job0.energy.total_mj() - job0.energy.idle_mj);
    assert!(job0.energy.idle_mj > 0);
}

#[test]
fn known_answer_proportional_idle() {
    let out = attribute(&shared_node_scenario(IdlePolicy::Proportional));
    assert_eq!(tenant_total(&out.rows, A), 4_800_000_000);
    assert_eq!(tenant_total(&out.rows, B), 2_400_000_000);
    assert_eq!(tenant_total(&out.rows, PLATFORM), 0);
    let train = out.rows.iter().find(|r| r.job == Some(0)).unwrap();
    // 56 % of the IT energy: 302.4 MJ of the idle IT energy and 75.6 MJ of its facility share.
    assert_eq!(train.energy.idle_mj, 378_000_000);
}

/// Embodied carbon in the shared-node scenario, every GPU at 1000 ng/ms (3.6 g an hour):
/// A holds GPU 0 all hour (3.6 g) and the endpoint GPU 2 (3.6 g, split by tokens 1:2 →
/// 1.2 g A, 2.4 g B); B holds half of GPU 1 (1.8 g); the idle half (1.8 g) goes to the
/// platform under the platform policy, or by IT energy to the jobs under the proportional one.
#[test]
fn known_answer_embodied_carbon() {
    let with_rates = |policy| {
        let mut input = shared_node_scenario(policy);
        for g in &mut input.nodes[0].gpus {
            g.embodied_ng_per_ms = 1000;
        }
        attribute(&input)
    };
    let embodied = |rows: &[Row], tenant| -> i64 {
        rows.iter()
            .filter(|r| r.tenant == tenant)
            .map(|r| r.embodied_ng)
            .sum()
    };
    let out = with_rates(IdlePolicy::Platform);
    assert_eq!(embodied(&out.rows, A), 4_800_000_000);
    assert_eq!(embodied(&out.rows, B), 4_200_000_000);
    assert_eq!(embodied(&out.rows, PLATFORM), 1_800_000_000);
    assert_eq!(out.totals.embodied_ng, 10_800_000_000);
    let spread = with_rates(IdlePolicy::Proportional);
    assert_eq!(embodied(&spread.rows, PLATFORM), 0);
    assert_eq!(
        spread.rows.iter().map(|r| r.embodied_ng).sum::<i64>(),
        10_800_000_000,
        "the idle half is spread, not lost"
    );
}

#[test]
fn a_facility_meter_sets_the_site_total() {
    let mut hour = shared_node_scenario(IdlePolicy::Platform);
    hour.facility = Some(constant(110_000_000, 60));
    let out = attribute(&hour);
    assert_eq!(out.totals.site_mj, 6_600_000_000);
    assert_eq!(
        out.rows.iter().map(|r| r.energy.total_mj()).sum::<i64>(),
        6_600_000_000
    );
}

#[test]
fn facility_meter_gap_falls_back_to_static_pue_and_is_flagged() {
    let mut hour = shared_node_scenario(IdlePolicy::Platform);
    let mut facility = constant(110_000_000, 60);
    facility.mj[5] = 0;
    facility.quality[5] = Quality::MISSING;
    hour.facility = Some(facility);
    let out = attribute(&hour);
    assert_eq!(out.totals.site_mj, 59 * 110_000_000 + 120_000_000);
    assert!(out.totals.quality.contains(Quality::FACILITY_FALLBACK));
    assert!(out.totals.estimated_mj > 0);
}

#[test]
fn negative_node_overhead_is_clamped_and_flagged() {
    let mut hour = shared_node_scenario(IdlePolicy::Platform);
    hour.nodes[0].energy = Some(constant(80_000_000, 60));
    let out = attribute(&hour);
    assert!(out.totals.quality.contains(Quality::NEGATIVE_OVERHEAD));
    assert!(out.rows.iter().all(|r| r.energy.node_overhead_mj == 0));
    assert_eq!(out.totals.it_mj, 84_000_000 * 60);
}

#[test]
fn a_job_is_charged_only_for_the_time_it_held_the_gpu() {
    let mut hour = shared_node_scenario(IdlePolicy::Platform);
    // The training job held its GPU for the first 30 minutes only.
    hour.nodes[0].gpus[0].allocations[0].end_ms = HOUR / 2;
    let out = attribute(&hour);
    let train = out.rows.iter().find(|r| r.job == Some(0)).unwrap();
    assert_eq!(train.energy.gpu_mj, 42_000_000 * 30);
}

/// One GPU for an hour, cut into MIG slices of 3/7 and 4/7 sent as 0.428571 and 0.571429
/// (which add up to exactly 1). Over the hour their exact times are 1,542,855.6 and
/// 2,057,144.4 ms: rounded once, 1,542,856 and 2,057,144, the whole hour. Split at every
/// minute (25,714.26 and 34,285.74 ms, the 0.74 taking the odd ms) the 3/7 slice held
/// 1,542,840; cut to whole ms each on its own, both held 59,999 ms a minute.
#[test]
fn known_answer_mig_sevenths_hold_the_whole_gpu() {
    let slice = |job, share_ppm| Allocation {
        share_ppm,
        ..whole(job)
    };
    let hour = SiteHour {
        policy: policy(IdlePolicy::Platform),
        grid: hour_grid(),
        facility: None,
        nodes: vec![Node {
            energy: Some(constant(60_000_000, 60)),
            gpus: vec![Gpu {
                embodied_ng_per_ms: 1000,
                time_price_pico_per_ms: 700,
                device: None,
                energy: constant(42_000_000, 60),
                allocations: vec![slice(0, 428_571), slice(1, 571_429)],
            }],
        }],
        jobs: vec![job(A), job(B)],
        tokens: vec![],
    };
    let out = attribute(&hour);
    assert_eq!(out.totals.capacity_gpu_ms, HOUR);
    assert_eq!(out.totals.allocated_gpu_ms, HOUR, "100 % of the GPU held");
    let row = |j| out.rows.iter().find(|r| r.job == Some(j)).unwrap();
    assert_eq!(row(0).gpu_ms, 1_542_856);
    assert_eq!(row(1).gpu_ms, 2_057_144);
    // Embodied carbon and the GPU-time price follow the held ms; nothing is left idle.
    assert_eq!(row(0).embodied_ng, 1_542_856 * 1000);
    assert_eq!(row(1).time_price_pico, 2_057_144 * 700);
    assert!(out.rows.iter().all(|r| r.job.is_some()), "{:?}", out.rows);
    assert_eq!(out.totals.embodied_ng, HOUR * 1000);
}

/// Allocations that overbook a GPU (time-slices whose shares add up to more than 1) hold
/// what they claim: two whole-GPU claims for the hour are two GPU-hours on one GPU.
#[test]
fn overbooked_allocations_hold_what_they_claim() {
    let mut hour = shared_node_scenario(IdlePolicy::Platform);
    hour.nodes[0].gpus[2].allocations.push(whole(0));
    let out = attribute(&hour);
    let train = out.rows.iter().find(|r| r.job == Some(0)).unwrap();
    assert_eq!(train.gpu_ms, 2 * HOUR);
    assert_eq!(out.totals.allocated_gpu_ms, 2 * HOUR + HOUR / 2 + HOUR);
}

/// `hour` with its nodes, each GPU's allocations and the token records in another order
/// (a permutation drawn from `seed`). GPUs keep their place within a node: they are meters in
/// meter order, which breaks ties when estimates are held to the node's meter.
fn shuffled(hour: &SiteHour, seed: u64) -> SiteHour {
    let mut state = seed | 1;
    let mut shuffle = |n: usize| -> Vec<usize> {
        let mut order: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            // xorshift64: enough to reach every permutation of a handful of items.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            order.swap(i, (state % (i as u64 + 1)) as usize);
        }
        order
    };
    let mut out = hour.clone();
    out.nodes = shuffle(hour.nodes.len())
        .into_iter()
        .map(|i| hour.nodes[i].clone())
        .collect();
    for gpu in out.nodes.iter_mut().flat_map(|n| &mut n.gpus) {
        let allocations = gpu.allocations.clone();
        gpu.allocations = shuffle(allocations.len())
            .into_iter()
            .map(|i| allocations[i])
            .collect();
    }
    out.tokens = shuffle(hour.tokens.len())
        .into_iter()
        .map(|i| hour.tokens[i])
        .collect();
    out
}

/// One minute of a GPU's energy over two parts whose exact quotas tie on the remainder,
/// with the site's other meters set so that nothing else is split: `gpu_mj` on one GPU held
/// by `allocations`, the node and facility meters reading exactly that.
fn one_gpu(gpu_mj: i64, allocations: Vec<Allocation>) -> SiteHour {
    SiteHour {
        policy: policy(IdlePolicy::Platform),
        grid: hour_grid(),
        facility: Some(constant(gpu_mj, 60)),
        nodes: vec![Node {
            energy: Some(constant(gpu_mj, 60)),
            gpus: vec![Gpu {
                energy: constant(gpu_mj, 60),
                allocations,
                embodied_ng_per_ms: 0,
                time_price_pico_per_ms: 0,
                device: None,
            }],
        }],
        jobs: vec![job(A), job(B)],
        tokens: vec![],
    }
}

/// [`one_gpu`]'s node at 100 mJ a minute holding job 1, then a copy holding job 0.
fn two_nodes_job_1_first() -> SiteHour {
    let mut hour = one_gpu(100, vec![whole(1)]);
    let mut second = hour.nodes[0].clone();
    second.gpus[0].allocations = vec![whole(0)];
    hour.nodes.push(second);
    hour
}

fn job_mj(out: &Attributed, j: usize) -> EnergyBreakdown {
    out.rows.iter().find(|r| r.job == Some(j)).unwrap().energy
}

/// Rule 1's tie. MIG slices 3/7 and 4/7, sent as 0.428571 and 0.571429: of 500,000 mJ a
/// minute their quotas are 214,285.5 and 285,714.5, an exact tie. The mJ goes to job 0 (the
/// earlier job key) every minute, though job 1's allocation came first.
#[test]
fn known_answer_a_gpu_energy_tie_goes_to_the_earlier_job_key() {
    let slice = |job, share_ppm| Allocation {
        share_ppm,
        ..whole(job)
    };
    let out = attribute(&one_gpu(
        500_000,
        vec![slice(1, 571_429), slice(0, 428_571)],
    ));
    assert_eq!(job_mj(&out, 0).gpu_mj, 60 * 214_286);
    assert_eq!(job_mj(&out, 1).gpu_mj, 60 * 285_714);
}

/// Rule 2's tie: two jobs on a node, 100 mJ of GPU energy each, 3 mJ of node overhead a
/// minute: 1.5 each, and the odd mJ to job 0, though the node's first GPU is job 1's.
#[test]
fn known_answer_a_node_overhead_tie_goes_to_the_earlier_job_key() {
    let mut hour = one_gpu(100, vec![whole(1)]);
    let mut second = hour.nodes[0].gpus[0].clone();
    second.allocations = vec![whole(0)];
    hour.nodes[0].gpus.push(second);
    hour.nodes[0].energy = Some(constant(203, 60));
    hour.facility = Some(constant(203, 60));
    let out = attribute(&hour);
    assert_eq!(job_mj(&out, 0).node_overhead_mj, 60 * 2);
    assert_eq!(job_mj(&out, 1).node_overhead_mj, 60);
}

/// Rule 3's tie: two nodes of 100 mJ a minute each, job 1's listed first, and a facility
/// meter 1 mJ above their sum: the mJ goes to job 0, the earlier key, not to idle or job 1.
#[test]
fn known_answer_a_facility_overhead_tie_goes_to_the_earlier_job_key() {
    let mut hour = two_nodes_job_1_first();
    hour.facility = Some(constant(201, 60));
    let out = attribute(&hour);
    assert_eq!(job_mj(&out, 0).facility_overhead_mj, 60);
    assert_eq!(job_mj(&out, 1).facility_overhead_mj, 0);
}

/// Rule 4's tie (the proportional policy): 61 mJ of idle GPU energy over two jobs of equal
/// IT energy, job 1's node first: 30.5 each, and the odd mJ to job 0.
#[test]
fn known_answer_an_idle_tie_goes_to_the_earlier_job_key() {
    let mut hour = two_nodes_job_1_first();
    let mut idle = hour.nodes[0].gpus[0].clone();
    idle.allocations = vec![];
    idle.energy = constant(1, 60);
    idle.energy.mj[0] = 2;
    hour.nodes[0].gpus.push(idle);
    let mut node = constant(101, 60);
    node.mj[0] = 102;
    hour.nodes[0].energy = Some(node);
    hour.facility = None;
    hour.policy = SitePolicy {
        static_pue: Decimal::ONE,
        ..policy(IdlePolicy::Proportional)
    };
    let out = attribute(&hour);
    assert_eq!(
        out.rows.len(),
        2,
        "idle is spread: no platform row: {:?}",
        out.rows
    );
    assert_eq!(job_mj(&out, 0).idle_mj, 31);
    assert_eq!(job_mj(&out, 1).idle_mj, 30);
}

/// Rule 5's tie: one job serving tenants B and A equal weighted tokens, with an odd 61 mJ of
/// GPU energy in the hour: 30.5 each, and the odd mJ to A, the lower tenant id, though B's
/// record came first.
#[test]
fn known_answer_a_token_tie_goes_to_the_lower_tenant() {
    let mut minute = constant(1, 60);
    minute.mj[0] = 2;
    let mut hour = one_gpu(1, vec![whole(0)]);
    hour.nodes[0].gpus[0].energy = minute.clone();
    hour.nodes[0].energy = Some(minute.clone());
    hour.facility = Some(minute);
    hour.tokens = vec![
        Tokens {
            job: 0,
            tenant: B,
            prompt: 100,
            generated: 25,
        },
        Tokens {
            job: 0,
            tenant: A,
            prompt: 100,
            generated: 25,
        },
    ];
    let out = attribute(&hour);
    let gpu = |t| {
        out.rows
            .iter()
            .find(|r| r.tenant == t)
            .unwrap()
            .energy
            .gpu_mj
    };
    assert_eq!((gpu(A), gpu(B)), (31, 30));
}

// ---- properties over random site-hours ----

#[derive(Debug, Clone)]
struct Scenario {
    hour: SiteHour,
    /// Jobs whose allocations all lie outside the hour.
    absent_jobs: Vec<usize>,
    expected_site_mj: i64,
}

fn steps_strategy(steps: usize, lo: i64, hi: i64) -> impl Strategy<Value = Vec<i64>> {
    proptest::collection::vec(lo..hi, steps)
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let steps = 12usize;
    let grid = StepGrid {
        start_ms: 0,
        step_ms: STEP,
        steps,
    };
    let end = grid.end_ms();
    (
        1usize..6,
        1usize..4,
        1usize..4,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_flat_map(move |(jobs, nodes, gpus, facility, proportional)| {
            let gpu_energy =
                proptest::collection::vec(steps_strategy(steps, 0, 50_000_000), nodes * gpus);
            // Some GPU steps have no data at all (an agent outage).
            let gpu_missing = proptest::collection::vec(
                proptest::collection::vec(proptest::bool::weighted(0.1), steps),
                nodes * gpus,
            );
            // Some measured steps came across a gap: their energy is placed, but estimated.
            let gpu_gap = proptest::collection::vec(
                proptest::collection::vec(proptest::bool::weighted(0.1), steps),
                nodes * gpus,
            );
            let node_extra = proptest::collection::vec(steps_strategy(steps, 0, 9_000_000), nodes);
            let fac_extra = steps_strategy(steps, 0, 40_000_000);
            // Per GPU up to 3 allocations: (job, start, len, share).
            let allocs = proptest::collection::vec(
                proptest::collection::vec((0..jobs, -end..end, 1i64..(2 * end), 1u32..=PPM), 0..3),
                nodes * gpus,
            );
            let tokens =
                proptest::collection::vec((0..jobs, 1i64..4, 0i64..10_000, 0i64..10_000), 0..6);
            let tenants = proptest::collection::vec(1i64..4, jobs);
            (
                Just((jobs, nodes, gpus, facility, proportional)),
                (gpu_energy, gpu_missing, gpu_gap),
                node_extra,
                fac_extra,
                allocs,
                tokens,
                tenants,
            )
        })
        .prop_map(
            move |(
                (jobs, nodes, gpus, facility, proportional),
                (gpu_e, gpu_miss, gpu_gap),
                node_x,
                fac_x,
                allocs,
                tokens,
                tenants,
            )| {
                let mut node_list = Vec::new();
                let mut it = vec![0i64; steps];
                let mut holds_time = vec![false; jobs];
                for n in 0..nodes {
                    let mut gpu_list = Vec::new();
                    let mut node_mj = node_x[n].clone();
                    for g in 0..gpus {
                        let e = &gpu_e[n * gpus + g];
                        for (k, v) in e.iter().enumerate() {
                            node_mj[k] += v;
                        }
                        let allocations: Vec<Allocation> = allocs[n * gpus + g]
                            .iter()
                            .map(|&(job, start, len, share)| {
                                if start < end && start + len > 0 {
                                    holds_time[job] = true;
                                }
                                Allocation {
                                    job,
                                    start_ms: start,
                                    end_ms: start + len,
                                    share_ppm: share,
                                }
                            })
                            .collect();
                        // The node meter measured what the GPU drew even where the GPU's own
                        // data is missing; that energy shows up as node overhead.
                        let miss = &gpu_miss[n * gpus + g];
                        let gap = &gpu_gap[n * gpus + g];
                        gpu_list.push(Gpu {
                            // Some devices with an embodied rate, so the debug assertion
                            // (Σ rows = site total) is exercised on random hours.
                            embodied_ng_per_ms: ((n * gpus + g) % 3) as i64 * 950,
                            time_price_pico_per_ms: 0,
                            device: None,
                            energy: MeterSteps {
                                mj: e
                                    .iter()
                                    .zip(miss)
                                    .map(|(v, m)| if *m { 0 } else { *v })
                                    .collect(),
                                quality: miss
                                    .iter()
                                    .zip(gap)
                                    .map(|(m, g)| match (m, g) {
                                        (true, _) => Quality::MISSING,
                                        (false, true) => Quality::GAP,
                                        (false, false) => Quality::EMPTY,
                                    })
                                    .collect(),
                            },
                            allocations,
                        });
                    }
                    for (k, v) in node_mj.iter().enumerate() {
                        it[k] += v;
                    }
                    node_list.push(Node {
                        energy: Some(MeterSteps {
                            mj: node_mj,
                            quality: vec![Quality::EMPTY; steps],
                        }),
                        gpus: gpu_list,
                    });
                }
                let (facility_steps, expected) = if facility {
                    let f: Vec<i64> = it.iter().zip(&fac_x).map(|(a, b)| a + b).collect();
                    let total = f.iter().sum();
                    (
                        Some(MeterSteps {
                            mj: f,
                            quality: vec![Quality::EMPTY; steps],
                        }),
                        total,
                    )
                } else {
                    let total = it
                        .iter()
                        .map(|&v| v + static_overhead(v, Decimal::new(25, 2)))
                        .sum();
                    (None, total)
                };
                // Some jobs lost their work: all of it, or from within the hour.
                let job_list: Vec<Job> = tenants
                    .iter()
                    .enumerate()
                    .map(|(k, &t)| Job {
                        lost_from_ms: [i64::MAX, grid.start_ms, grid.start_ms + 1_234_567][k % 3],
                        ..job(t)
                    })
                    .collect();
                let token_list = tokens
                    .iter()
                    .map(|&(job, tenant, prompt, generated)| Tokens {
                        job,
                        tenant,
                        prompt,
                        generated,
                    })
                    .collect();
                Scenario {
                    hour: SiteHour {
                        policy: policy(if proportional {
                            IdlePolicy::Proportional
                        } else {
                            IdlePolicy::Platform
                        }),
                        grid,
                        facility: facility_steps,
                        nodes: node_list,
                        jobs: job_list,
                        tokens: token_list,
                    },
                    absent_jobs: (0..jobs).filter(|j| !holds_time[*j]).collect(),
                    expected_site_mj: expected,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn ledger_adds_up_to_the_meters_exactly(s in scenario()) {
        let out = attribute(&s.hour);
        prop_assert_eq!(out.totals.site_mj, s.expected_site_mj);
        prop_assert_eq!(out.rows.iter().map(|r| r.energy.total_mj()).sum::<i64>(), s.expected_site_mj);
        for r in &out.rows {
            prop_assert!(r.energy.gpu_mj >= 0 && r.energy.node_overhead_mj >= 0 && r.energy.idle_mj >= 0 && r.energy.facility_overhead_mj >= 0);
            prop_assert!(r.energy.estimated_mj <= r.energy.total_mj());
        }
    }

    /// Estimated energy is never shown without saying why: every row with some carries a
    /// flag that means "estimated".
    #[test]
    fn every_row_with_estimated_energy_says_so(s in scenario()) {
        let out = attribute(&s.hour);
        for r in &out.rows {
            prop_assert!(r.energy.estimated_mj == 0 || r.quality.is_estimated(), "{:?}", r);
        }
    }

    /// Badput is part of what a job row carries, and only of jobs that lost work.
    #[test]
    fn badput_is_within_each_row_and_only_where_work_was_lost(s in scenario()) {
        let out = attribute(&s.hour);
        for r in &out.rows {
            prop_assert!(r.badput_mj >= 0 && r.badput_mj <= r.energy.total_mj(), "{:?}", r);
            let lost = r.job.map(|j| s.hour.jobs[j].lost_from_ms);
            if lost.is_none_or(|l| l == i64::MAX) {
                prop_assert_eq!(r.badput_mj, 0);
            }
            if lost == Some(s.hour.grid.start_ms) && s.hour.policy.idle_policy == IdlePolicy::Platform {
                // Lost from the hour's start: the whole of its own energy.
                prop_assert_eq!(r.badput_mj, r.energy.total_mj());
            }
        }
    }

    #[test]
    fn attribution_is_deterministic(s in scenario()) {
        prop_assert_eq!(attribute(&s.hour), attribute(&s.hour.clone()));
    }

    /// The order allocations, nodes and token records come in decides nothing: ties go by
    /// job key (the jobs' order) and tenant, so a shuffled site-hour has the same ledger to
    /// the mJ. Energies cut to a few mJ make remainder ties common.
    #[test]
    fn the_input_order_decides_no_tie(s in scenario(), seed in any::<u64>(), tiny in any::<bool>()) {
        let mut hour = s.hour;
        if tiny {
            let cut = |m: &mut MeterSteps| m.mj.iter_mut().for_each(|e| *e %= 7);
            for node in &mut hour.nodes {
                node.energy.as_mut().map(cut);
                node.gpus.iter_mut().for_each(|g| cut(&mut g.energy));
            }
            hour.facility.as_mut().map(cut);
        }
        let shuffled = shuffled(&hour, seed);
        prop_assert_eq!(attribute(&hour), attribute(&shuffled));
    }

    #[test]
    fn no_job_is_charged_for_time_it_did_not_hold_a_gpu(s in scenario()) {
        let out = attribute(&s.hour);
        for j in &s.absent_jobs {
            for r in out.rows.iter().filter(|r| r.job == Some(*j)) {
                prop_assert_eq!(r.energy.gpu_mj + r.energy.node_overhead_mj + r.energy.facility_overhead_mj, 0);
                prop_assert_eq!(r.gpu_ms, 0);
            }
        }
    }

    #[test]
    fn tokens_are_kept(s in scenario()) {
        let out = attribute(&s.hour);
        let sent: i64 = s.hour.tokens.iter().map(|t| t.prompt + t.generated).sum();
        let kept: i64 = out.rows.iter().map(|r| r.prompt_tokens + r.generated_tokens).sum();
        prop_assert_eq!(sent, kept);
    }

    /// Every step's GPU time lands whole: the holders' ms and the unheld rest add up to the
    /// GPU's hour, and each holder gets its overlap × share to within a ms for the hour.
    #[test]
    fn a_gpus_time_is_split_exactly_among_its_holders(
        allocs in proptest::collection::vec((-STEP..12 * STEP, 1i64..13 * STEP, 1u32..=PPM / 4), 1..5),
    ) {
        let steps = 12usize;
        let grid = StepGrid { start_ms: 0, step_ms: STEP, steps };
        let allocations: Vec<Allocation> = allocs
            .iter()
            .enumerate()
            .map(|(job, &(start, len, share))| Allocation {
                job,
                start_ms: start,
                end_ms: start + len,
                share_ppm: share,
            })
            .collect();
        let hour = SiteHour {
            policy: policy(IdlePolicy::Platform),
            grid,
            facility: None,
            nodes: vec![Node {
                energy: Some(constant(10_000_000, steps)),
                gpus: vec![Gpu {
                    // One nanogram a ms: the idle row's embodied carbon is the unheld ms.
                    embodied_ng_per_ms: 1,
                    time_price_pico_per_ms: 0, device: None,
                    energy: constant(7_000_000, steps),
                    allocations: allocations.clone(),
                }],
            }],
            jobs: vec![job(A); allocs.len()],
            tokens: vec![],
        };
        let out = attribute(&hour);
        let held: i64 = out.rows.iter().map(|r| r.gpu_ms).sum();
        let unheld: i64 = out.rows.iter().filter(|r| r.job.is_none()).map(|r| r.embodied_ng).sum();
        prop_assert_eq!(held, out.totals.allocated_gpu_ms);
        prop_assert_eq!(held + unheld, steps as i64 * STEP);
        for a in &allocations {
            let mut exact = 0i128;
            for k in 0..steps as i64 {
                let overlap = ((k + 1) * STEP).min(a.end_ms) - (k * STEP).max(a.start_ms);
                if overlap > 0 {
                    exact += i128::from(overlap) * i128::from(a.share_ppm);
                }
            }
            // Split once for the hour: under a ms off, however many steps it spans.
            let got = out.rows.iter().find(|r| r.job == Some(a.job)).map_or(0, |r| r.gpu_ms);
            let off = i128::from(got) * i128::from(PPM) - exact;
            prop_assert!(off.abs() < i128::from(PPM), "{} ms for {:?}", got, a);
        }
    }

    /// Slices whose shares add up to exactly 1 hold the whole GPU, whatever the shares.
    #[test]
    fn slices_that_add_up_to_one_hold_every_ms(
        cuts in proptest::collection::btree_set(1u32..PPM, 1..5),
    ) {
        let bounds: Vec<u32> = std::iter::once(0).chain(cuts).chain([PPM]).collect();
        let allocations: Vec<Allocation> = bounds
            .windows(2)
            .enumerate()
            .map(|(job, w)| Allocation { share_ppm: w[1] - w[0], ..whole(job) })
            .collect();
        let hour = SiteHour {
            policy: policy(IdlePolicy::Platform),
            grid: hour_grid(),
            facility: None,
            nodes: vec![Node {
                energy: Some(constant(10_000_000, 60)),
                gpus: vec![Gpu {
                    embodied_ng_per_ms: 1,
                    time_price_pico_per_ms: 0, device: None,
                    energy: constant(7_000_000, 60),
                    allocations: allocations.clone(),
                }],
            }],
            jobs: vec![job(A); allocations.len()],
            tokens: vec![],
        };
        let out = attribute(&hour);
        prop_assert_eq!(out.totals.allocated_gpu_ms, HOUR);
        prop_assert_eq!(out.rows.iter().map(|r| r.gpu_ms).sum::<i64>(), HOUR);
        prop_assert!(out.rows.iter().all(|r| r.job.is_some()), "{:?}", out.rows);
    }

    #[test]
    fn a_whole_gpu_job_alone_on_a_node_gets_all_its_overhead(
        gpu in steps_strategy(60, 1, 50_000_000),
        idle_gpu in steps_strategy(60, 0, 5_000_000),
        extra in steps_strategy(60, 0, 9_000_000),
    ) {
        let node: Vec<i64> = (0..60).map(|k| gpu[k] + idle_gpu[k] + extra[k]).collect();
        let hour = SiteHour {
            policy: policy(IdlePolicy::Platform),
            grid: hour_grid(),
            facility: None,
            nodes: vec![Node {
                energy: Some(MeterSteps { mj: node, quality: vec![Quality::EMPTY; 60] }),
                gpus: vec![
                    Gpu { embodied_ng_per_ms: 0,
 time_price_pico_per_ms: 0, device: None, energy: MeterSteps { mj: gpu.clone(), quality: vec![Quality::EMPTY; 60] }, allocations: vec![whole(0)] },
                    Gpu { embodied_ng_per_ms: 0,
 time_price_pico_per_ms: 0, device: None, energy: MeterSteps { mj: idle_gpu, quality: vec![Quality::EMPTY; 60] }, allocations: vec![] },
                ],
            }],
            jobs: vec![job(A)],
            tokens: vec![],
        };
        let out = attribute(&hour);
        let row = out.rows.iter().find(|r| r.job == Some(0)).unwrap();
        prop_assert_eq!(row.energy.gpu_mj, gpu.iter().sum::<i64>());
        prop_assert_eq!(row.energy.node_overhead_mj, extra.iter().sum::<i64>());
    }
}

#[test]
fn a_node_with_no_data_gets_no_invented_energy() {
    let mut hour = shared_node_scenario(IdlePolicy::Platform);
    hour.policy.node_static_overhead_mw = 1_500_000;
    for gpu in &mut hour.nodes[0].gpus {
        gpu.energy = MeterSteps::missing(60);
    }
    hour.nodes[0].energy = Some(MeterSteps::missing(60));
    let out = attribute(&hour);
    assert_eq!(out.totals.site_mj, 0);
    assert!(out.rows.iter().all(|r| r.energy.total_mj() == 0));
    assert!(out.totals.quality.contains(Quality::MISSING));

    // With the GPUs measured but the node meter silent, the static model fills the overhead.
    let mut hour = shared_node_scenario(IdlePolicy::Platform);
    hour.policy.node_static_overhead_mw = 1_500_000;
    hour.nodes[0].energy = Some(MeterSteps::missing(60));
    let out = attribute(&hour);
    assert_eq!(out.totals.it_mj, 60 * (84_000_000 + 90_000_000));
    assert!(out.totals.quality.contains(Quality::NODE_MODEL));
    // Estimated per minute: the modelled 90 MJ of node overhead, plus the jobs' facility share
    // in those steps (43.5 MJ × 165/174 = 41.25 MJ); the measured GPU energy is not.
    assert_eq!(out.totals.estimated_mj, 60 * 131_250_000);
}

#[test]
fn a_share_of_overhead_measured_against_another_gpus_estimate_is_flagged() {
    // The MIG GPU (B's) crossed a gap in minute 10: its energy there is an estimate, so the
    // node overhead everybody on the node shares in that minute is too. A's training GPU
    // read fine; A's row still says its overhead share was estimated.
    let mut hour = shared_node_scenario(IdlePolicy::Platform);
    hour.nodes[0].gpus[1].energy.quality[10] = Quality::GAP;
    let out = attribute(&hour);
    let a_train = out.rows.iter().find(|r| r.job == Some(0)).unwrap();
    assert!(a_train.energy.estimated_mj > 0);
    assert!(
        a_train.quality.contains(Quality::OVERHEAD_ESTIMATED),
        "{a_train:?}"
    );
    assert!(!a_train.quality.contains(Quality::GAP));
    let b_mig = out.rows.iter().find(|r| r.job == Some(1)).unwrap();
    assert!(b_mig.quality.contains(Quality::GAP));
}

#[test]
fn a_reset_estimate_cannot_claim_more_than_its_node_measured() {
    // A's GPU reads an estimate of 95 MJ in minute 5 (a reset); the node measured 96 MJ with
    // 42 MJ on its other GPUs: the estimate is held to 54 MJ (GPUs 96 MJ that minute, 84 the
    // others), and the site keeps its meters' energy (96 MJ × 1.25 a minute).
    let mut hour = shared_node_scenario(IdlePolicy::Platform);
    let gpu = &mut hour.nodes[0].gpus[0].energy;
    gpu.mj[5] = 95_000_000;
    gpu.quality[5] = Quality::RESET | Quality::RESET_ESTIMATED;
    let out = attribute(&hour);
    assert_eq!(out.totals.site_mj, 60 * 120_000_000);
    assert_eq!(out.totals.gpu_mj, 59 * 84_000_000 + 96_000_000);
    assert!(out.totals.quality.contains(Quality::RESET_ESTIMATED));
    assert!(!out.totals.quality.contains(Quality::NEGATIVE_OVERHEAD));
    // A measured GPU over its node is the meters' own disagreement: flagged, not corrected.
    let mut hour = shared_node_scenario(IdlePolicy::Platform);
    hour.nodes[0].gpus[0].energy.mj[5] = 95_000_000;
    let out = attribute(&hour);
    assert!(out.totals.quality.contains(Quality::NEGATIVE_OVERHEAD));
}

/// A disaggregated deployment of model 7, run by the platform team for tenants A and B. Its
/// prefill pool is one H100 (device 0) at 600 W; its decode pool an H200 (device 1) at 500 W
/// and an H100 at 300 W. No node meter or overhead; static PUE 1.25.
///
/// Each server counts every request it sees: the prefill pool generated one token a request
/// (A 100, B 50) and the decode pool was handed the prompts again (A 90,000, B 45,000).
///
/// Prefill: 36 MJ/min × 60 × 1.25 = 2.7 GJ, split by prompt tokens 90,000 : 45,000 → A 1.8,
/// B 0.9 GJ; 20 J per prompt token either way. Decode: 48 MJ/min → 3.6 GJ, split by
/// generated tokens 30,000 : 90,000 → A 0.9, B 2.7 GJ; 30 J per generated token. The decode
/// rows run 30 : 18 = 5 : 3 on the H200 and the H100.
fn disaggregated(phases: [Phase; 2]) -> SiteHour {
    let gpu = |w: i64, device: DeviceId, job: usize| Gpu {
        embodied_ng_per_ms: 0,
        time_price_pico_per_ms: 0,
        device: Some(device),
        energy: constant(w * 60_000, 60),
        allocations: vec![whole(job)],
    };
    let pool = |phase| Job {
        model: Some(7),
        phase,
        ..job(PLATFORM)
    };
    let tokens = |job, tenant, prompt, generated| Tokens {
        job,
        tenant,
        prompt,
        generated,
    };
    SiteHour {
        policy: policy(IdlePolicy::Platform),
        grid: hour_grid(),
        facility: None,
        nodes: vec![Node {
            energy: None,
            gpus: vec![gpu(600, 0, 0), gpu(500, 1, 1), gpu(300, 0, 1)],
        }],
        jobs: vec![pool(phases[0]), pool(phases[1])],
        tokens: vec![
            tokens(0, A, 90_000, 100),
            tokens(0, B, 45_000, 50),
            tokens(1, A, 90_000, 30_000),
            tokens(1, B, 45_000, 90_000),
        ],
    }
}

#[test]
fn known_answer_prefill_and_decode_pools() {
    let out = attribute(&disaggregated([Phase::Prefill, Phase::Decode]));
    let row = |job: usize, tenant: TenantId| {
        let r = out
            .rows
            .iter()
            .find(|r| r.job == Some(job) && r.tenant == tenant)
            .unwrap();
        (r.energy.total_mj(), r.prompt_tokens, r.generated_tokens)
    };
    assert_eq!(row(0, A), (1_800_000_000, 90_000, 0));
    assert_eq!(row(0, B), (900_000_000, 45_000, 0));
    assert_eq!(row(1, A), (900_000_000, 0, 30_000));
    assert_eq!(row(1, B), (2_700_000_000, 0, 90_000));
    assert_eq!(out.totals.site_mj, 6_300_000_000);

    // J per token of each phase, per tenant and over the deployment.
    let jpt = |job, tenant| {
        let (mj, p, g) = row(job, tenant);
        [Phase::Prefill, Phase::Decode][job].joules_per_token(mj, p, g)
    };
    let j = |n: i64| Some(Decimal::from(n));
    assert_eq!(jpt(0, A), (j(20), None));
    assert_eq!(jpt(0, B), (j(20), None));
    assert_eq!(jpt(1, A), (None, j(30)));
    assert_eq!(jpt(1, B), (None, j(30)));
    assert_eq!(
        crate::metrics::joules_per_token(6_300_000_000, 255_000),
        Some(Decimal::new(24_705_882, 6))
    );

    // Efficiency by device: the decode rows split 5 : 3 by GPU energy.
    let part = |job: usize, tenant: TenantId, device: DeviceId| {
        let d = out
            .devices
            .iter()
            .find(|d| {
                out.rows[d.row].job == Some(job)
                    && out.rows[d.row].tenant == tenant
                    && d.device == device
            })
            .unwrap();
        (d.total_mj, d.prompt_tokens, d.generated_tokens)
    };
    assert_eq!(part(0, A, 0), (1_800_000_000, 90_000, 0));
    assert_eq!(part(1, A, 1), (562_500_000, 0, 18_750));
    assert_eq!(part(1, A, 0), (337_500_000, 0, 11_250));
    assert_eq!(part(1, B, 1), (1_687_500_000, 0, 56_250));
    assert_eq!(part(1, B, 0), (1_012_500_000, 0, 33_750));
    assert_eq!(out.devices.len(), 6);
    let on = |device: DeviceId| -> (i64, i64) {
        out.devices
            .iter()
            .filter(|d| d.device == device)
            .fold((0, 0), |(mj, t), d| {
                (mj + d.total_mj, t + d.prompt_tokens + d.generated_tokens)
            })
    };
    // The generation table: 22.5 J a token on the H100s, 30 on the H200.
    assert_eq!(on(0), (4_050_000_000, 180_000));
    assert_eq!(on(1), (2_250_000_000, 75_000));
}

#[test]
fn a_pool_without_its_phase_counts_every_token_its_server_saw() {
    let out = attribute(&disaggregated([Phase::Both, Phase::Both]));
    let decode_a = out
        .rows
        .iter()
        .find(|r| r.job == Some(1) && r.tenant == A)
        .unwrap();
    // A weighs 90,000 + 4 × 30,000 against B's 45,000 + 4 × 90,000: 210 : 405.
    assert_eq!(decode_a.energy.total_mj(), 1_229_268_293);
    assert_eq!(
        (decode_a.prompt_tokens, decode_a.generated_tokens),
        (90_000, 30_000)
    );
}

proptest! {
    /// Whatever the devices, a row's parts add up to the row, energy and tokens alike.
    #[test]
    fn device_parts_add_up_to_their_rows(
        w in proptest::collection::vec(0i64..800, 1..6),
        devices in proptest::collection::vec(0u32..3, 6),
        prompt in 0i64..1_000_000,
        generated in 0i64..1_000_000,
    ) {
        let gpus = w
            .iter()
            .zip(&devices)
            .map(|(&w, &d)| Gpu {
                embodied_ng_per_ms: 0,
                time_price_pico_per_ms: 0,
                device: Some(d),
                energy: constant(w * 60_000 + 7, 60),
                allocations: vec![whole(0)],
            })
            .collect();
        let input = SiteHour {
            policy: policy(IdlePolicy::Proportional),
            grid: hour_grid(),
            facility: None,
            nodes: vec![Node { energy: None, gpus }],
            jobs: vec![Job { model: Some(1), ..job(A) }],
            tokens: vec![
                Tokens { job: 0, tenant: A, prompt, generated },
                Tokens { job: 0, tenant: B, prompt: generated, generated: prompt },
            ],
        };
        let out = attribute(&input);
        for (i, r) in out.rows.iter().enumerate() {
            let parts: Vec<&DeviceRow> = out.devices.iter().filter(|d| d.row == i).collect();
            prop_assert!(!parts.is_empty());
            prop_assert_eq!(parts.iter().map(|d| d.total_mj).sum::<i64>(), r.energy.total_mj());
            prop_assert_eq!(parts.iter().map(|d| d.gpu_mj).sum::<i64>(), r.energy.gpu_mj);
            prop_assert_eq!(parts.iter().map(|d| d.prompt_tokens).sum::<i64>(), r.prompt_tokens);
            prop_assert_eq!(parts.iter().map(|d| d.generated_tokens).sum::<i64>(), r.generated_tokens);
        }
    }
}

/// The shared node with a GPU-hour rate on two device models: A's training GPU is model 0
/// at 1,000 pico per ms, B's MIG half is on a GPU of model 1 at 2,000 (its other half idle),
/// and the endpoint's GPU reports no model. Each row's GPU time comes per device model, and
/// the idle half's price (1.8e6 ms × 2,000) goes where the idle policy sends idle energy:
/// to the platform tenant, or over the job rows by IT energy, 48.72 : 10.44 : 9.28 : 18.56
/// (the endpoint's 27.84 split 1 : 2 by tokens) = 2.016e9, 0.432e9, 0.384e9, 0.768e9.
#[test]
fn gpu_time_comes_per_device_model_with_idle_time_where_the_policy_sends_it() {
    let t = |device, gpu_ms, price_pico| DeviceTime {
        device,
        gpu_ms,
        price_pico,
    };
    for policy in [IdlePolicy::Platform, IdlePolicy::Proportional] {
        let mut input = shared_node_scenario(policy);
        let gpus = &mut input.nodes[0].gpus;
        (gpus[0].device, gpus[0].time_price_pico_per_ms) = (Some(0), 1_000);
        (gpus[1].device, gpus[1].time_price_pico_per_ms) = (Some(1), 2_000);
        let out = attribute(&input);
        let row = |job: Option<usize>, tenant| {
            out.rows
                .iter()
                .find(|r| r.job == job && r.tenant == tenant)
                .unwrap()
                .gpu_time
                .clone()
        };
        let idle = |part: i64| -> Vec<DeviceTime> {
            match policy {
                IdlePolicy::Proportional => vec![t(Some(1), 0, part)],
                IdlePolicy::Platform => vec![],
            }
        };
        let with = |mut held: Vec<DeviceTime>, idle: Vec<DeviceTime>| {
            for i in idle {
                gpu_time::add(&mut held, i.device, i.gpu_ms, i.price_pico);
            }
            held
        };
        assert_eq!(
            row(Some(0), A),
            with(vec![t(Some(0), HOUR, 3_600_000_000)], idle(2_016_000_000))
        );
        assert_eq!(
            row(Some(1), B),
            with(vec![t(Some(1), HOUR / 2, 3_600_000_000)], idle(432_000_000))
        );
        assert_eq!(
            row(Some(2), A),
            with(vec![t(None, HOUR / 3, 0)], idle(384_000_000))
        );
        assert_eq!(
            row(Some(2), B),
            with(vec![t(None, 2 * HOUR / 3, 0)], idle(768_000_000))
        );
        if policy == IdlePolicy::Platform {
            assert_eq!(row(None, PLATFORM), [t(Some(1), 0, 3_600_000_000)]);
        }
        for r in &out.rows {
            assert_eq!(gpu_time::totals(&r.gpu_time), (r.gpu_ms, r.time_price_pico));
        }
        let price: i64 = out.rows.iter().map(|r| r.time_price_pico).sum();
        assert_eq!(price, 3 * 3_600_000_000);
    }
}
