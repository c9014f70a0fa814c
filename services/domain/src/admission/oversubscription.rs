//! A site's power policy: how far each workload class may be over-subscribed against the
//! envelope, and the per-GPU power cap the site may apply.
//!
//! A class with factor `f` counts a job's draw at `draw / f` against the envelope: `f = 1`
//! counts it in full (synchronous training, whose GPUs peak together), `f = 1.2` lets the
//! class's jobs add up to 120 % of the envelope. A factor is fixed, or **measured**: 1 + the
//! class's headroom ([`crate::headroom`]: its parts' peak over the percentile of its
//! coincident draw, over the site's recent days), never above the policy's cap, and 1 while
//! nothing is measured. So a site admits as far beyond nameplate as its own meters have
//! shown the class's peaks stay apart, and no further.

use crate::headroom::{Headroom, DEFAULT_PERCENTILE};
use crate::job_kind::JobKind;
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;

/// How one class's factor is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    Fixed(Decimal),
    Measured,
}

impl Setting {
    /// `"measured"` or the factor as text (the API's and the database's spelling).
    pub fn label(&self) -> String {
        match self {
            Setting::Fixed(f) => f.normalize().to_string(),
            Setting::Measured => "measured".into(),
        }
    }
}

/// The policy as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PowerPolicy {
    /// Per class, in [`JobKind::ALL`]'s order.
    pub classes: [Setting; 4],
    /// The most a measured factor may be.
    pub measured_cap: Decimal,
    pub measured_percentile: Decimal,
    pub measured_days: u32,
    /// The power limit per GPU (W) the site may set on a job that fits only capped.
    pub power_cap_w: Option<u32>,
}

impl Default for PowerPolicy {
    /// Training, batch and interactive in full; inference measured, capped at 1.25 (the
    /// published uncorrelated-inference headroom, about 21 %, fits under it).
    fn default() -> Self {
        let one = Setting::Fixed(Decimal::ONE);
        PowerPolicy {
            classes: [one, Setting::Measured, one, one],
            measured_cap: Decimal::new(125, 2),
            measured_percentile: DEFAULT_PERCENTILE,
            measured_days: 7,
            power_cap_w: None,
        }
    }
}

/// A class's factor as admission uses it, and why it is that.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Factor {
    pub factor: Decimal,
    pub why: String,
}

/// The factors of every class, resolved against what was measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Factors([Factor; 4]);

impl Default for Factors {
    /// Every class in full: a site with no policy applied yet.
    fn default() -> Self {
        Factors(JobKind::ALL.map(|_| Factor {
            factor: Decimal::ONE,
            why: "fixed".into(),
        }))
    }
}

impl Factors {
    pub fn of(&self, kind: JobKind) -> &Factor {
        &self.0[kind as usize]
    }
}

impl PowerPolicy {
    pub fn setting(&self, kind: JobKind) -> Setting {
        self.classes[kind as usize]
    }

    /// Each class's factor, from the headroom `measured` gives for a class (over the
    /// policy's days and percentile; `None` where nothing was measured).
    pub fn resolve(&self, measured: impl Fn(JobKind) -> Option<Headroom>) -> Factors {
        Factors(JobKind::ALL.map(|kind| match self.setting(kind) {
            Setting::Fixed(f) => Factor {
                factor: f.max(Decimal::ONE),
                why: "fixed".into(),
            },
            Setting::Measured => self.measured(measured(kind)),
        }))
    }

    fn measured(&self, h: Option<Headroom>) -> Factor {
        let span = format!(
            "P{} over {} days",
            self.measured_percentile.normalize(),
            self.measured_days
        );
        let Some(h) = h else {
            return Factor {
                factor: Decimal::ONE,
                why: format!("measured: no {span} yet, so counted in full"),
            };
        };
        let found = (Decimal::ONE + h.headroom).round_dp(3);
        let cap = self.measured_cap.max(Decimal::ONE);
        let pct = (h.headroom * Decimal::ONE_HUNDRED).round_dp(1).normalize();
        if found > cap {
            Factor {
                factor: cap,
                why: format!(
                    "measured: {pct} % headroom at {span}, capped at {}",
                    cap.normalize()
                ),
            }
        } else {
            Factor {
                factor: found,
                why: format!("measured: {pct} % headroom at {span}"),
            }
        }
    }
}

/// A job's draw at `factor`, W, rounded up (never under-counted).
pub fn counted_w(draw_w: Decimal, factor: Decimal) -> i64 {
    (draw_w / factor.max(Decimal::ONE))
        .ceil()
        .to_i64()
        .unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    fn headroom(h: &str) -> Headroom {
        Headroom {
            minutes: 60,
            coincident_peak_mw: 400_000,
            percentile_peak_mw: 400_000,
            parts_peak_mw: 600_000,
            coincidence_factor: d("0.6667"),
            headroom: d(h),
        }
    }

    #[test]
    fn a_measured_class_takes_its_headroom_up_to_the_cap() {
        let mut p = PowerPolicy {
            measured_cap: d("2"),
            ..Default::default()
        };
        let f = p.resolve(|k| (k == JobKind::Inference).then(|| headroom("0.5")));
        assert_eq!(f.of(JobKind::Inference).factor, d("1.5"));
        assert_eq!(
            f.of(JobKind::Inference).why,
            "measured: 50 % headroom at P99.9 over 7 days"
        );
        assert_eq!(f.of(JobKind::Training).factor, Decimal::ONE);

        p.measured_cap = d("1.2");
        let f = p.resolve(|_| Some(headroom("0.5")));
        assert_eq!(f.of(JobKind::Inference).factor, d("1.2"));
        assert!(f.of(JobKind::Inference).why.ends_with("capped at 1.2"));
        // Training is fixed at 1 by default, whatever was measured.
        assert_eq!(f.of(JobKind::Training).factor, Decimal::ONE);
    }

    #[test]
    fn nothing_measured_counts_in_full() {
        let f = PowerPolicy::default().resolve(|_| None);
        assert_eq!(f.of(JobKind::Inference).factor, Decimal::ONE);
        assert!(f
            .of(JobKind::Inference)
            .why
            .contains("no P99.9 over 7 days"));
    }

    #[test]
    fn a_fixed_factor_stands_and_never_counts_less_than_in_full() {
        let mut p = PowerPolicy::default();
        p.classes[JobKind::Batch as usize] = Setting::Fixed(d("1.1"));
        p.classes[JobKind::Training as usize] = Setting::Fixed(d("0.5"));
        let f = p.resolve(|_| Some(headroom("0.9")));
        assert_eq!(f.of(JobKind::Batch).factor, d("1.1"));
        assert_eq!(f.of(JobKind::Training).factor, Decimal::ONE);
    }

    #[test]
    fn a_draw_is_counted_at_its_factor_rounded_up() {
        assert_eq!(counted_w(d("3000"), d("1.5")), 2000);
        assert_eq!(counted_w(d("1000"), d("3")), 334);
        assert_eq!(counted_w(d("1000"), d("0.5")), 1000);
    }
}
