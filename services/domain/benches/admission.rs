//! The admission policy's cost per question, without HTTP: the four questions of the HTTP
//! bench (`services/wattledger/benches/admission.rs`) against two sites with hourly average
//! and marginal carbon and price over two days, as the demo's signals are. Each question is
//! timed on an idle site and on one busy with 2,000 admitted jobs, and the answers are
//! checked before anything is timed, so a faster policy that decides differently fails here.
//!
//! cargo bench -p wattledger-domain --bench admission

use chrono::{DateTime, Duration, TimeZone, Utc};
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use rust_decimal::Decimal;
use std::sync::Arc;
use wattledger_domain::admission::budget::{Budget, Metric};
use wattledger_domain::admission::envelope::{Reservation, Reserved};
use wattledger_domain::admission::forecast::{Forecast, Point};
use wattledger_domain::admission::oversubscription::{PowerPolicy, Setting};
use wattledger_domain::admission::{decide, Job, Policy, Site, Verdict};
use wattledger_domain::job_kind::JobKind;
use wattledger_domain::priority::Priority;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 26, 8, 41, 56).unwrap()
}

/// Hourly points from an hour before `now` to two days after, shaped like a day of grid.
fn hourly(base: i64, swing: i64, phase: i64) -> Arc<Forecast> {
    let hour0 = Utc.with_ymd_and_hms(2026, 11, 26, 7, 0, 0).unwrap();
    Arc::new(Forecast::new(
        (0..50)
            .map(|h| {
                let daily = [
                    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0,
                ];
                let v = base + swing * daily[((h + phase) % 24) as usize] / 11;
                Point {
                    start: hour0 + Duration::hours(h),
                    end: hour0 + Duration::hours(h + 1),
                    value: Decimal::new(v, 3),
                }
            })
            .collect(),
    ))
}

fn site(key: &str, phase: i64, busy: bool) -> Site {
    let reserved: Reserved = if busy {
        // 2,000 admitted jobs of 10 min to 8 h over the next two days.
        (0..2000i64)
            .map(|i| {
                let start = now() + Duration::minutes((i * 37) % 2880);
                Reservation {
                    start,
                    end: start + Duration::minutes(10 + (i * 53) % 470),
                    draw_w: 500 + (i * 97) % 4000,
                }
            })
            .collect()
    } else {
        Reserved::default()
    };
    Site {
        key: key.into(),
        envelope_w: if busy { 40_000_000 } else { 400_000 },
        draw_w: Some(120_000),
        pue: Decimal::new(125, 2),
        oversubscription: PowerPolicy {
            classes: [Setting::Fixed(Decimal::ONE); 4],
            ..Default::default()
        }
        .resolve(|_| None),
        power_cap_w: None,
        grid_events: Vec::new(),
        currency: "EUR".into(),
        reserved,
        carbon_average: hourly(300_000, 250_000, phase),
        carbon_marginal: hourly(520_000, 400_000, phase),
        price: hourly(90, 150, phase + 3),
        carbon_free: Default::default(),
        clean_supply: Default::default(),
    }
}

struct Question {
    name: &'static str,
    job: Job,
    sites: &'static [usize],
    budgets: Vec<Budget>,
}

fn questions() -> Vec<Question> {
    let job = |gpus, draw, kind, minutes, deadline_h: Option<i64>| Job {
        gpus,
        gpu_draw_w: draw,
        duration: Duration::minutes(minutes),
        kind,
        earliest_start: now(),
        deadline: deadline_h.map(|h| now() + Duration::hours(h)),
        priority: Priority::normal(),
    };
    let budget = |name: &str, metric, limit| Budget {
        name: name.into(),
        metric,
        limit: Decimal::from(limit),
        used: Decimal::from(limit / 3),
        hard: true,
    };
    vec![
        Question {
            name: "flexible training",
            job: job(8, 700, JobKind::Training, 240, Some(24)),
            sites: &[0, 1],
            budgets: vec![budget("acme-energy", Metric::EnergyKwh, 500_000)],
        },
        Question {
            name: "rigid inference",
            job: job(2, 600, JobKind::Inference, 60, None),
            sites: &[0, 1],
            budgets: vec![budget(
                "nimbus-eur",
                Metric::Cost {
                    currency: "EUR".into(),
                },
                90_000,
            )],
        },
        Question {
            name: "pinned batch",
            job: job(1, 400, JobKind::Batch, 10, None),
            sites: &[1],
            budgets: Vec::new(),
        },
        Question {
            name: "flexible, carbon budget",
            job: job(4, 700, JobKind::Batch, 120, Some(8)),
            sites: &[0, 1],
            budgets: vec![budget("helix-carbon", Metric::CarbonKg, 40_000)],
        },
    ]
}

fn bench(c: &mut Criterion) {
    let policy = Policy::default();
    for busy in [false, true] {
        let sites = [site("fra1", 11, busy), site("ore1", 20, busy)];
        let label = if busy { "busy" } else { "idle" };
        for q in questions() {
            let pick: Vec<&Site> = q.sites.iter().map(|i| &sites[*i]).collect();
            let d = decide(&q.job, &pick, &q.budgets, &policy, now());
            // The answers the policy must give, so that what is timed is the real decision.
            let expected = match q.name {
                "flexible training" | "flexible, carbon budget" => Verdict::Defer,
                _ => Verdict::Admit,
            };
            assert_eq!(d.verdict, expected, "{label} {}: {:?}", q.name, d.reasons);
            c.bench_function(&format!("decide {label}: {}", q.name), |b| {
                b.iter(|| decide(black_box(&q.job), &pick, &q.budgets, &policy, now()))
            });
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
