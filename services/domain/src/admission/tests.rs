//! Policy tests on hand-made sites and forecasts.

use super::budget::{Budget, Metric};
use super::envelope::{Reservation, Reserved};
use super::forecast::{Forecast, Point};
use super::*;
use chrono::TimeZone;
use proptest::prelude::*;

fn t(min: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 23, 0, 0, 0).unwrap() + Duration::minutes(min)
}
fn d(s: &str) -> Decimal {
    s.parse().unwrap()
}
/// Hourly points from t(0), one value per hour.
fn hourly(values: &[i64]) -> Forecast {
    Forecast::new(
        values
            .iter()
            .enumerate()
            .map(|(i, v)| Point {
                start: t(60 * i as i64),
                end: t(60 * (i as i64 + 1)),
                value: Decimal::from(*v),
            })
            .collect(),
    )
}
fn site(key: &str, marginal: &[i64]) -> Site {
    Site {
        key: key.into(),
        envelope_w: 100_000,
        draw_w: Some(20_000),
        pue: d("1.25"),
        // Inference counts at 1/2.5 of its draw; the rest in full.
        oversubscription: oversubscription::PowerPolicy {
            classes: [
                oversubscription::Setting::Fixed(Decimal::ONE),
                oversubscription::Setting::Fixed(d("2.5")),
                oversubscription::Setting::Fixed(Decimal::ONE),
                oversubscription::Setting::Fixed(Decimal::ONE),
            ],
            ..Default::default()
        }
        .resolve(|_| None),
        power_cap_w: None,
        grid_events: Vec::new(),
        currency: "EUR".into(),
        reserved: Reserved::default(),
        carbon_average: Arc::new(hourly(&marginal.iter().map(|v| v / 2).collect::<Vec<_>>())),
        carbon_marginal: Arc::new(hourly(marginal)),
        price: Arc::default(),
        carbon_free: Arc::default(),
        clean_supply: Arc::default(),
    }
}
/// 8 GPUs × 500 W × PUE 1.25 = 5 kW at the facility.
fn job(duration_min: i64, deadline_min: Option<i64>) -> Job {
    Job {
        gpus: 8,
        gpu_draw_w: 500,
        duration: Duration::minutes(duration_min),
        kind: JobKind::Batch,
        earliest_start: t(0),
        deadline: deadline_min.map(t),
        priority: Priority::normal(),
    }
}

#[test]
fn a_flexible_job_is_deferred_to_the_cleanest_slot_with_the_numbers() {
    let s = site("fra1", &[500, 500, 100, 400, 400]);
    let d0 = decide(&job(60, Some(240)), &[&s], &[], &Policy::default(), t(0));
    assert_eq!(d0.verdict, Verdict::Defer);
    assert_eq!(d0.start_at, Some(t(120)));
    // 5 kW × 1 h = 5 kWh; marginal 500 g/kWh now → 2.5 kg, 100 at 02:00 → 0.5 kg.
    let now = d0.now.unwrap();
    let at = d0.at_start.unwrap();
    assert_eq!(now.kwh, d("5"));
    assert_eq!(now.carbon_marginal_kg, Some(d("2.5")));
    assert_eq!(at.carbon_marginal_kg, Some(d("0.5")));
    assert_eq!(at.carbon_average_kg, Some(d("0.25")));
    assert!(d0.reasons[0].contains("saves 80%"), "{:?}", d0.reasons);
    assert_eq!(
        d0.reservation,
        Some(Reservation {
            start: t(120),
            end: t(180),
            draw_w: 5000
        })
    );
}

#[test]
fn slots_between_hour_boundaries_are_found() {
    // 90 min job: the best window straddles two clean half-hours of a step forecast.
    let s = site("fra1", &[400, 100, 100, 400]);
    let d0 = decide(&job(90, Some(240)), &[&s], &[], &Policy::default(), t(10));
    assert_eq!(d0.start_at, Some(t(60)));
    // 60 min at 100 + 30 min at 100 → 7.5 kWh × 100 g.
    assert_eq!(d0.at_start.unwrap().carbon_marginal_kg, Some(d("0.75")));
}

#[test]
fn ties_go_to_the_earliest_slot() {
    let s = site("fra1", &[500, 100, 100, 100]);
    let d0 = decide(&job(60, Some(240)), &[&s], &[], &Policy::default(), t(0));
    assert_eq!(d0.start_at, Some(t(60)));
}

#[test]
fn a_saving_under_the_threshold_admits_now() {
    let s = site("fra1", &[500, 460]);
    let d0 = decide(&job(60, Some(120)), &[&s], &[], &Policy::default(), t(0));
    assert_eq!(d0.verdict, Verdict::Admit);
    assert_eq!(d0.start_at, Some(t(0)));
    assert!(d0.reasons[0].contains("saves 8%"), "{:?}", d0.reasons);
}

#[test]
fn no_forecast_admits_now_and_says_so() {
    let mut s = site("fra1", &[]);
    s.carbon_average = Arc::default();
    let d0 = decide(&job(60, Some(600)), &[&s], &[], &Policy::default(), t(0));
    assert_eq!(d0.verdict, Verdict::Admit);
    assert_eq!(d0.start_at, Some(t(0)));
    assert!(
        d0.reasons
            .iter()
            .any(|r| r.contains("no carbon or price forecast")),
        "{:?}",
        d0.reasons
    );
    assert_eq!(d0.now.unwrap().carbon_marginal_kg, None);
}

#[test]
fn a_forecast_that_ends_inside_the_job_is_not_a_slot() {
    // Clean at 03:00 but the forecast stops at 04:00: a 2 h job there is not fully forecast.
    let s = site("fra1", &[500, 500, 500, 10]);
    let d0 = decide(&job(120, Some(600)), &[&s], &[], &Policy::default(), t(0));
    assert_eq!(
        d0.start_at,
        Some(t(120)),
        "the last fully forecast 2 h slot"
    );
}

#[test]
fn a_job_without_deadline_starts_now_even_if_later_is_cleaner() {
    let s = site("fra1", &[500, 10]);
    let d0 = decide(&job(60, None), &[&s], &[], &Policy::default(), t(0));
    assert_eq!(d0.verdict, Verdict::Admit);
    assert_eq!(d0.start_at, Some(t(0)));
}

#[test]
fn deadline_too_close_rejects() {
    let s = site("fra1", &[500]);
    let d0 = decide(&job(120, Some(60)), &[&s], &[], &Policy::default(), t(0));
    assert_eq!(d0.verdict, Verdict::Reject);
    assert!(d0.reasons[0].contains("too close"));
}

#[test]
fn a_full_envelope_defers_to_when_an_admitted_job_ends() {
    let mut s = site("fra1", &[]);
    s.envelope_w = 30_000;
    s.draw_w = Some(28_000);
    s.reserved = [Reservation {
        start: t(-60),
        end: t(45),
        draw_w: 10_000,
    }]
    .into_iter()
    .collect();
    let d0 = decide(&job(60, None), &[&s], &[], &Policy::default(), t(0));
    assert_eq!(d0.verdict, Verdict::Defer);
    assert_eq!(d0.start_at, Some(t(45)));
    assert!(
        d0.reasons[0].contains("exceed its 30 kW envelope"),
        "{:?}",
        d0.reasons
    );

    // With a deadline before that: no window.
    let d1 = decide(&job(60, Some(90)), &[&s], &[], &Policy::default(), t(0));
    assert_eq!(d1.verdict, Verdict::Reject);
    assert!(d1.reasons.last().unwrap().contains("before the deadline"));

    // Inference counts at its over-subscription factor: 5 kW / 2.5 = 2 kW fits now.
    let mut inf = job(60, None);
    inf.kind = JobKind::Inference;
    let d2 = decide(&inf, &[&s], &[], &Policy::default(), t(0));
    assert_eq!(d2.verdict, Verdict::Admit);
    assert_eq!(d2.reservation.unwrap().draw_w, 2000);
    assert!(
        d2.reasons
            .iter()
            .any(|r| r.contains("at 1/2.5 of its draw")),
        "{:?}",
        d2.reasons
    );
}

#[test]
fn a_job_that_fits_only_capped_is_admitted_now_at_the_cap() {
    // 2 kW free until t(45), as above; the site may cap GPUs at 200 W.
    let mut s = site("fra1", &[]);
    s.envelope_w = 30_000;
    s.draw_w = Some(28_000);
    s.reserved = [Reservation {
        start: t(-60),
        end: t(45),
        draw_w: 10_000,
    }]
    .into_iter()
    .collect();
    s.power_cap_w = Some(200);
    // 8 × 200 W × 1.25 = 2 kW fits now; the run stretches by 500/200 to 150 min, the energy
    // stays 5 kWh.
    let d0 = decide(&job(60, None), &[&s], &[], &Policy::default(), t(0));
    assert_eq!(d0.verdict, Verdict::Admit, "{:?}", d0.reasons);
    assert_eq!(d0.start_at, Some(t(0)));
    assert_eq!(d0.power_cap_w, Some(200));
    let r = d0.reservation.unwrap();
    assert_eq!((r.start, r.end, r.draw_w), (t(0), t(150), 2000));
    let at = d0.at_start.unwrap();
    assert_eq!((at.kwh, at.run_s), (d("5"), 150 * 60));
    assert!(
        d0.reasons.iter().any(|r| r.contains("capped at 200 W")),
        "{:?}",
        d0.reasons
    );

    // A cap that does not bring the draw low enough changes nothing: it waits.
    s.power_cap_w = Some(300);
    let d1 = decide(&job(60, None), &[&s], &[], &Policy::default(), t(0));
    assert_eq!((d1.verdict, d1.power_cap_w), (Verdict::Defer, None));

    // Nor does one whose longer run would miss the deadline: rejected as before.
    s.power_cap_w = Some(200);
    let d2 = decide(&job(60, Some(90)), &[&s], &[], &Policy::default(), t(0));
    assert_eq!(d2.verdict, Verdict::Reject);

    // A job that fits as asked is never capped.
    s.reserved = Reserved::default();
    s.draw_w = Some(10_000);
    let d3 = decide(&job(60, None), &[&s], &[], &Policy::default(), t(0));
    assert_eq!((d3.verdict, d3.power_cap_w), (Verdict::Admit, None));
}

#[test]
fn budget_rules_come_first_and_name_the_budget() {
    let s = site("fra1", &[500, 10]);
    let hard = Budget {
        name: "acme-november".into(),
        metric: Metric::EnergyKwh,
        limit: d("100"),
        used: d("97"),
        hard: true,
    };
    let d0 = decide(
        &job(60, Some(240)),
        &[&s],
        std::slice::from_ref(&hard),
        &Policy::default(),
        t(0),
    );
    assert_eq!(d0.verdict, Verdict::Reject);
    assert!(
        d0.reasons[0].contains("'acme-november'"),
        "{:?}",
        d0.reasons
    );
    assert_eq!(d0.budgets[0].remaining, d("-2"));

    let soft = Budget {
        hard: false,
        ..hard.clone()
    };
    let d1 = decide(
        &job(60, Some(240)),
        &[&s],
        &[soft],
        &Policy::default(),
        t(0),
    );
    assert_eq!(d1.verdict, Verdict::Defer);
    assert!(d1.reasons[0].contains("soft cap"), "{:?}", d1.reasons);

    // Bypass of 2–3 does not bypass budgets unless the policy says so.
    let mut urgent = job(60, Some(240));
    urgent.priority = Priority::parse("urgent").unwrap();
    let mut policy = Policy {
        bypass: vec![Priority::parse("urgent").unwrap()],
        ..Policy::default()
    };
    let d2 = decide(&urgent, &[&s], std::slice::from_ref(&hard), &policy, t(0));
    assert_eq!(d2.verdict, Verdict::Reject);
    policy.bypass_budget = vec![Priority::parse("urgent").unwrap()];
    let d3 = decide(&urgent, &[&s], &[hard], &policy, t(0));
    assert_eq!(d3.verdict, Verdict::Admit);
    assert_eq!(d3.start_at, Some(t(0)));
}

#[test]
fn priority_bypass_skips_a_full_envelope_and_a_cleaner_slot() {
    let mut s = site("fra1", &[500, 10]);
    s.draw_w = Some(99_000);
    let mut urgent = job(60, Some(240));
    urgent.priority = Priority::parse("urgent").unwrap();
    let policy = Policy {
        bypass: vec![Priority::parse("urgent").unwrap()],
        ..Policy::default()
    };
    let d0 = decide(&urgent, &[&s], &[], &policy, t(0));
    assert_eq!(d0.verdict, Verdict::Admit);
    assert_eq!(d0.start_at, Some(t(0)));
    assert!(d0.reasons[0].contains("bypasses"));
}

#[test]
fn the_cleaner_site_wins_when_both_can_start_now() {
    let a = site("fra1", &[500, 500]);
    let b = site("osl1", &[50, 50]);
    let d0 = decide(&job(60, None), &[&a, &b], &[], &Policy::default(), t(0));
    assert_eq!(d0.verdict, Verdict::Admit);
    assert_eq!(d0.site.as_deref(), Some("osl1"));
}

#[test]
fn price_decides_when_carbon_has_no_weight() {
    let mut s = site("fra1", &[100, 500]);
    s.price = Arc::new(hourly(&[30, 10])); // EUR/kWh, an expensive hour then a cheap one
    let policy = Policy {
        carbon_weight: Decimal::ZERO,
        ..Policy::default()
    };
    let d0 = decide(&job(60, Some(120)), &[&s], &[], &policy, t(0));
    assert_eq!(d0.start_at, Some(t(60)));
    assert_eq!(d0.now.unwrap().cost, Some(d("150")));
    assert!(d0.reasons[0].contains("(price)"), "{:?}", d0.reasons);
    // Half and half: carbon +400 % worse, price 66.7 % better → stay.
    let policy = Policy {
        carbon_weight: d("0.5"),
        ..Policy::default()
    };
    let d1 = decide(&job(60, Some(120)), &[&s], &[], &policy, t(0));
    assert_eq!(d1.start_at, Some(t(0)));
}

proptest! {
    /// Whatever the forecasts and envelope, an admitted or deferred job starts inside its
    /// window, fits the envelope for its whole run, and a deferral saves more than the
    /// threshold.
    #[test]
    fn decisions_respect_window_envelope_and_threshold(
        values in proptest::collection::vec(0i64..1000, 1..24),
        duration in 15i64..240,
        slack in 0i64..600,
        draw in 0i64..120_000,
        reserved in proptest::collection::vec((0i64..600, 10i64..300, 0i64..40_000), 0..5),
        now_min in 0i64..60,
    ) {
        let mut s = site("fra1", &values);
        s.draw_w = Some(draw);
        s.reserved = reserved.iter().map(|(a, l, w)| Reservation {
            start: t(*a - 120), end: t(*a - 120 + *l), draw_w: *w,
        }).collect();
        let j = job(duration, Some(now_min + duration + slack));
        let policy = Policy::default();
        let dec = decide(&j, &[&s], &[], &policy, t(now_min));
        if dec.verdict != Verdict::Reject {
            let start = dec.start_at.unwrap();
            prop_assert!(start >= t(now_min) && start + j.duration <= j.deadline.unwrap());
            let env = envelope::Envelope::new(s.envelope_w, s.draw_w, &s.reserved, t(now_min));
            prop_assert!(env.fits(5000, start, start + j.duration));
        }
        if dec.verdict == Verdict::Defer {
            let now = dec.now.unwrap();
            let at = dec.at_start.unwrap();
            // Deferred either for headroom or for a saving above the threshold.
            let env = envelope::Envelope::new(s.envelope_w, s.draw_w, &s.reserved, t(now_min));
            let blocked_now = !env.fits(5000, t(now_min), t(now_min) + j.duration);
            if !blocked_now {
                let (a, b) = (now.carbon_marginal_kg.unwrap(), at.carbon_marginal_kg.unwrap());
                prop_assert!(a > b && (a - b) / a * Decimal::ONE_HUNDRED > policy.threshold_pct);
            }
        }
    }
}

#[test]
fn flexible_work_keeps_out_of_a_grid_event_and_says_what_it_moved() {
    let mut s = site("fra1", &[]);
    s.grid_events = vec![GridWindow {
        id: 7,
        key: "dr-1".into(),
        start: t(60),
        end: t(180),
    }];
    // Two hours from t(0) would run an hour into the event: it waits for its end. Its 5 kW
    // over that hour is what it moved: 5 kWh = 18,000,000,000 mJ.
    let d0 = decide(&job(120, Some(600)), &[&s], &[], &Policy::default(), t(0));
    assert_eq!(d0.verdict, Verdict::Defer, "{:?}", d0.reasons);
    assert_eq!(d0.start_at, Some(t(180)));
    assert_eq!(
        d0.moved,
        Some(Moved {
            event_id: 7,
            mj: 18_000_000_000
        })
    );
    assert!(
        d0.reasons.iter().any(|r| r.contains("grid event dr-1")),
        "{:?}",
        d0.reasons
    );
    // One hour ends as the event starts: nothing to move.
    let d1 = decide(&job(60, Some(600)), &[&s], &[], &Policy::default(), t(0));
    assert_eq!((d1.verdict, d1.moved), (Verdict::Admit, None));
    // A deadline that leaves no start clear of it: it runs through, and says so.
    let d2 = decide(&job(120, Some(240)), &[&s], &[], &Policy::default(), t(0));
    assert_eq!((d2.verdict, d2.moved), (Verdict::Admit, None));
    assert!(d2.reasons.iter().any(|r| r.contains("may run through")));
    // Work that is not flexible is not moved.
    let d3 = decide(&job(120, None), &[&s], &[], &Policy::default(), t(0));
    assert_eq!((d3.verdict, d3.moved), (Verdict::Admit, None));
}

/// A site whose grid is 30 % carbon-free all day, with carbon flat at 400 g/kWh, and a solar
/// PPA delivering 10 kWh an hour from 10:00 to 14:00 (more than the job's 5 kW).
fn sunny(key: &str) -> Site {
    let mut s = site(key, &[400; 24]);
    s.carbon_free = Arc::new(Forecast::new(
        (0..24)
            .map(|h| Point {
                start: t(60 * h),
                end: t(60 * (h + 1)),
                value: d("0.3"),
            })
            .collect(),
    ));
    let kwh = 3_600_000_000;
    s.clean_supply = Arc::new(carbon_free::CleanSupply::new(
        &(10..14)
            .map(|h| crate::cfe::Delivery {
                from_ms: t(60 * h).timestamp_millis(),
                to_ms: t(60 * (h + 1)).timestamp_millis(),
                mj: 10 * kwh,
            })
            .collect::<Vec<_>>(),
    ));
    s
}

#[test]
fn with_the_carbon_free_share_weighed_a_job_waits_for_the_sunny_window() {
    let s = sunny("fra1");
    // Asked at 06:00 for two hours, done by 18:00.
    let j = Job {
        earliest_start: t(6 * 60),
        ..job(120, Some(18 * 60))
    };
    let cfe = Policy {
        cfe_weight: Decimal::ONE,
        ..Policy::default()
    };
    let d1 = decide(&j, &[&s], &[], &cfe, t(6 * 60));
    assert_eq!(d1.verdict, Verdict::Defer, "{:?}", d1.reasons);
    // The first start whose whole run the PPA covers; later ones only tie.
    assert_eq!(d1.start_at, Some(t(10 * 60)));
    assert_eq!(d1.now.as_ref().unwrap().cfe_share, Some(d("0.3")));
    assert_eq!(d1.at_start.as_ref().unwrap().cfe_share, Some(d("1")));
    // All of the 70 % fossil energy avoided.
    assert!(
        d1.reasons[0].contains("saves 100% (carbon-free share)"),
        "{:?}",
        d1.reasons
    );
    // Unweighed, the flat carbon has nothing to gain by waiting: it starts now, and still
    // shows its share.
    let d0 = decide(&j, &[&s], &[], &Policy::default(), t(6 * 60));
    assert_eq!(d0.verdict, Verdict::Admit, "{:?}", d0.reasons);
    assert_eq!(d0.start_at, Some(t(6 * 60)));
    assert_eq!(d0.now.unwrap().cfe_share, Some(d("0.3")));
}

#[test]
fn the_three_weights_nest_and_a_worse_carbon_can_outweigh_the_share() {
    let mut s = sunny("fra1");
    // Carbon is 60 % higher in the window (a marginal gas plant follows the solar ramp).
    let mut values = [400; 24];
    values[10..14].fill(640);
    s.carbon_marginal = Arc::new(hourly(&values));
    let j = Job {
        earliest_start: t(6 * 60),
        ..job(120, Some(18 * 60))
    };
    let policy = |w: &str| Policy {
        cfe_weight: d(w),
        ..Policy::default()
    };
    // Half and half: 0.5 × 100 % + 0.5 × (−60 %) = 20 % > 10 %: it waits.
    let half = decide(&j, &[&s], &[], &policy("0.5"), t(6 * 60));
    assert_eq!(half.start_at, Some(t(10 * 60)));
    assert!(
        half.reasons[0].contains("saves 20% (0.5 × carbon-free share + marginal carbon)"),
        "{:?}",
        half.reasons
    );
    // 0.3 on the share: 0.3 × 100 % + 0.7 × (−60 %) = −12 %: it starts now.
    let third = decide(&j, &[&s], &[], &policy("0.3"), t(6 * 60));
    assert_eq!(third.verdict, Verdict::Admit, "{:?}", third.reasons);
}

#[test]
fn without_a_carbon_free_forecast_the_other_signals_decide() {
    // The share is weighed but not known after 12:00: slots reaching past it cannot be
    // compared on it, and carbon alone (flat) finds nothing.
    let mut s = site("fra1", &[400; 24]);
    s.carbon_free = Arc::new(Forecast::new(vec![Point {
        start: t(0),
        end: t(12 * 60),
        value: d("0.3"),
    }]));
    let policy = Policy {
        cfe_weight: d("0.5"),
        ..Policy::default()
    };
    let j = Job {
        earliest_start: t(6 * 60),
        ..job(120, Some(18 * 60))
    };
    let d0 = decide(&j, &[&s], &[], &policy, t(6 * 60));
    assert_eq!(d0.verdict, Verdict::Admit, "{:?}", d0.reasons);
    assert_eq!(d0.at_start.unwrap().cfe_share, Some(d("0.3")));
    let late = decide(
        &Job {
            earliest_start: t(13 * 60),
            ..j
        },
        &[&s],
        &[],
        &policy,
        t(13 * 60),
    );
    assert_eq!(late.now.unwrap().cfe_share, None);
}

proptest! {
    /// With no weight on it, the carbon-free share changes no decision: the same verdict,
    /// start, site and reasons as at a site without the signal or a contract.
    #[test]
    fn an_unweighed_carbon_free_share_changes_nothing(
        values in proptest::collection::vec(0i64..1000, 1..24),
        shares in proptest::collection::vec(0u32..=100, 1..24),
        contract in proptest::collection::vec(0i64..40_000_000_000, 0..24),
        duration in 15i64..240,
        slack in 0i64..600,
        carbon_weight in 0u32..=1000,
    ) {
        let bare = site("fra1", &values);
        let mut with = bare.clone();
        with.carbon_free = Arc::new(Forecast::new(shares.iter().enumerate().map(|(i, v)| Point {
            start: t(60 * i as i64),
            end: t(60 * (i as i64 + 1)),
            value: Decimal::new(i64::from(*v), 2),
        }).collect()));
        with.clean_supply = Arc::new(carbon_free::CleanSupply::new(
            &contract.iter().enumerate().map(|(i, mj)| crate::cfe::Delivery {
                from_ms: t(60 * i as i64).timestamp_millis(),
                to_ms: t(60 * (i as i64 + 1)).timestamp_millis(),
                mj: *mj,
            }).collect::<Vec<_>>(),
        ));
        let policy = Policy { carbon_weight: Decimal::new(carbon_weight.into(), 3), ..Policy::default() };
        let j = job(duration, Some(duration + slack));
        let (a, b) = (decide(&j, &[&bare], &[], &policy, t(0)), decide(&j, &[&with], &[], &policy, t(0)));
        prop_assert_eq!((a.verdict, a.start_at, a.site, a.reasons), (b.verdict, b.start_at, b.site, b.reasons));
    }
}
