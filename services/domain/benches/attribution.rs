//! Attribution core throughput in GPU-steps per second, against a baseline that only reads
//! the same step energies (the least work any attribution must do), in the same process.
//!
//! cargo bench -p wattledger-domain --bench attribution

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use rust_decimal::Decimal;
use wattledger_domain::attribution::{
    attribute, Allocation, Gpu, IdlePolicy, Job, Node, SiteHour, SitePolicy, Tokens,
};
use wattledger_domain::energy::{MeterSteps, StepGrid};
use wattledger_domain::phase::Phase;
use wattledger_domain::quality::Quality;
use wattledger_domain::units::PPM;

const STEPS: usize = 60;
const STEP_MS: i64 = 60_000;

fn steps(seed: u64, base: i64) -> MeterSteps {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mj = (0..STEPS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            base + (x % 5_000_000) as i64
        })
        .collect();
    MeterSteps {
        mj,
        quality: vec![Quality::EMPTY; STEPS],
    }
}

/// 16 nodes × 8 GPUs: 8 nodes of whole-GPU training, 4 of shared inference (two pods per GPU
/// for half the hour each), 2 with MIG halves, 2 mostly idle; 40 jobs; a facility meter.
fn site_hour() -> SiteHour {
    let hour = STEP_MS * STEPS as i64;
    let mut nodes = Vec::new();
    let mut jobs = Vec::new();
    for n in 0..16u64 {
        let mut gpus = Vec::new();
        for g in 0..8u64 {
            let id = n * 8 + g;
            let allocations = match n {
                0..=7 => vec![Allocation {
                    job: (n / 2) as usize,
                    start_ms: 0,
                    end_ms: hour,
                    share_ppm: PPM,
                }],
                8..=11 => vec![
                    Allocation {
                        job: 4 + (id % 8) as usize,
                        start_ms: 0,
                        end_ms: hour / 2,
                        share_ppm: PPM,
                    },
                    Allocation {
                        job: 12 + (id % 8) as usize,
                        start_ms: hour / 2 - 90_000,
                        end_ms: hour,
                        share_ppm: PPM,
                    },
                ],
                12..=13 => vec![
                    Allocation {
                        job: 20 + (id % 10) as usize,
                        start_ms: 0,
                        end_ms: hour,
                        share_ppm: PPM / 2,
                    },
                    Allocation {
                        job: 30 + (id % 10) as usize,
                        start_ms: 600_000,
                        end_ms: hour,
                        share_ppm: PPM / 2,
                    },
                ],
                _ if g == 0 => vec![Allocation {
                    job: 39,
                    start_ms: 1_200_000,
                    end_ms: 2_400_000,
                    share_ppm: PPM,
                }],
                _ => vec![],
            };
            gpus.push(Gpu {
                embodied_ng_per_ms: 0,
                time_price_pico_per_ms: 0,
                device: None,
                energy: steps(id, 30_000_000),
                allocations,
            });
        }
        nodes.push(Node {
            energy: Some(steps(1000 + n, 400_000_000)),
            gpus,
        });
    }
    for j in 0..40 {
        jobs.push(Job {
            tenant: 1 + j % 6,
            model: Some(j % 3),
            prefill_weight_ppm: 1_000_000,
            decode_weight_ppm: 4_000_000,
            lost_from_ms: i64::MAX,
            phase: Phase::Both,
        });
    }
    let tokens = (4..20)
        .flat_map(|job| {
            (1..4).map(move |tenant| Tokens {
                job,
                tenant,
                prompt: 10_000 * tenant,
                generated: 3_000,
            })
        })
        .collect();
    SiteHour {
        policy: SitePolicy {
            static_pue: Decimal::new(135, 2),
            idle_policy: IdlePolicy::Platform,
            platform_tenant: 0,
            node_static_overhead_mw: 1_500_000,
        },
        grid: StepGrid {
            start_ms: 0,
            step_ms: STEP_MS,
            steps: STEPS,
        },
        facility: Some(steps(9, 9_000_000_000)),
        nodes,
        jobs,
        tokens,
    }
}

fn bench(c: &mut Criterion) {
    let hour = site_hour();
    let gpu_steps = (16 * 8 * STEPS) as u64;
    let mut group = c.benchmark_group("site_hour_128_gpus");
    group.throughput(Throughput::Elements(gpu_steps));
    group.bench_function("baseline_sum_steps", |b| {
        b.iter(|| {
            let h = black_box(&hour);
            let mut total = 0i64;
            for n in &h.nodes {
                for g in &n.gpus {
                    total += g.energy.mj.iter().sum::<i64>();
                }
            }
            total
        })
    });
    group.bench_function("attribute", |b| b.iter(|| attribute(black_box(&hour))));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
