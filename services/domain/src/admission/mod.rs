//! Admission policy: admit a job now, defer it to a named time, or reject it, with the
//! numbers behind the answer (DESIGN.md "Admission"). Pure: the caller hands in the request,
//! each candidate site's envelope, reservations and forecasts, the tenant's budgets and
//! policy, and the time.
//!
//! Rules, in order:
//! 1. budget: a hard cap exceeded (or that this job would exceed) rejects, naming the
//!    budget; a soft one admits with a warning;
//! 2. power envelope: the job must fit under the site's envelope for its whole run, else it
//!    waits for the first window with headroom (rejected if none before its deadline);
//! 3. carbon, price and carbon-free share: a flexible job (one with a deadline) may start at
//!    any instant up to deadline − duration; the best slot on forecast intensity (marginal by
//!    default), price and, where the tenant weighs it, the carbon-free share of the run's
//!    energy ([`carbon_free`]) wins if it saves more than the tenant's threshold;
//! 4. priority classes named in the policy skip 2–3 (and 1 only if named for that too).

pub mod budget;
pub mod carbon_free;
mod decide;
pub use decide::decide;
pub mod envelope;
pub mod forecast;
pub mod oversubscription;

use crate::cfe;
use crate::demand_response;
use crate::job_kind::JobKind;
use crate::priority::Priority;
use budget::{Budget, JobAmounts, Remaining};
use carbon_free::CleanSupply;
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use envelope::{Reservation, Reserved};
use forecast::Forecast;
use oversubscription::Factors;
use rust_decimal::Decimal;
use serde::Serialize;
use std::sync::Arc;

/// Seconds × watts in a kWh.
const WS_PER_KWH: i64 = 3_600_000;

crate::names::names! {
    /// What admission answers.
    pub enum Verdict {
        Admit = "admit",
        Defer = "defer",
        Reject = "reject",
    }
}

/// What the job needs, with its power already resolved by the caller (given, or learned).
#[derive(Debug, Clone)]
pub struct Job {
    pub gpus: u32,
    /// Expected IT draw per GPU (its share of the node included), W.
    pub gpu_draw_w: u32,
    pub duration: Duration,
    /// Counted against the envelope at its class's over-subscription factor at the site.
    pub kind: JobKind,
    pub earliest_start: DateTime<Utc>,
    /// None: not flexible, start as soon as the envelope allows.
    pub deadline: Option<DateTime<Utc>>,
    pub priority: Priority,
}

/// One candidate site as the hot state holds it.
#[derive(Debug, Clone)]
pub struct Site {
    pub key: String,
    pub envelope_w: i64,
    /// Latest measured site draw (facility level), if fresh.
    pub draw_w: Option<i64>,
    pub pue: Decimal,
    /// Each workload class's over-subscription factor (the site's power policy, resolved).
    pub oversubscription: Factors,
    /// The per-GPU power limit the site may set on a job that fits now only capped, W.
    pub power_cap_w: Option<u32>,
    /// Demand-response windows flexible work keeps out of.
    pub grid_events: Vec<GridWindow>,
    pub currency: String,
    pub reserved: Reserved,
    /// g CO2e per kWh.
    pub carbon_average: Arc<Forecast>,
    pub carbon_marginal: Arc<Forecast>,
    /// Currency per kWh.
    pub price: Arc<Forecast>,
    /// The grid's carbon-free share, 0 to 1 (signal `carbon_free`, on the grid region).
    pub carbon_free: Arc<Forecast>,
    /// The site's contracted clean energy per hour.
    pub clean_supply: Arc<CleanSupply>,
}

/// A grid event's window at a site (demand response).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GridWindow {
    pub id: i64,
    pub key: String,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
}

/// A flexible job moved out of a grid event's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moved {
    pub event_id: i64,
    /// What it would have drawn in the window had it started when it asked, mJ.
    pub mj: i64,
}

#[derive(Debug, Clone)]
pub struct Policy {
    /// Defer only if the best slot saves more than this, percent.
    pub threshold_pct: Decimal,
    /// Weight of carbon against price in the saving, 0..=1.
    pub carbon_weight: Decimal,
    /// Weight of the run's carbon-free share against carbon and price together, 0..=1
    /// (0: carbon and price alone, as [`saving_pct`] combines them).
    pub cfe_weight: Decimal,
    /// Decide on marginal intensity (the default), else average.
    pub marginal: bool,
    /// Priority classes that skip the envelope and the carbon/price window.
    pub bypass: Vec<Priority>,
    /// Priority classes that also skip budgets.
    pub bypass_budget: Vec<Priority>,
    /// How far a job without a deadline may be pushed to find envelope headroom.
    pub horizon: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            threshold_pct: Decimal::from(10),
            carbon_weight: Decimal::ONE,
            cfe_weight: Decimal::ZERO,
            marginal: true,
            bypass: Vec::new(),
            bypass_budget: Vec::new(),
            horizon: Duration::days(7),
        }
    }
}

/// The job started at one site at one instant.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    pub site: String,
    pub start_at: DateTime<Utc>,
    pub kwh: Decimal,
    pub currency: String,
    pub cost: Option<Decimal>,
    pub carbon_average_kg: Option<Decimal>,
    pub carbon_marginal_kg: Option<Decimal>,
    /// The expected carbon-free fraction of its energy, 0 to 1 (the grid's carbon-free share
    /// and the site's contracted clean energy, hour by hour: [`carbon_free::run`]); `None`
    /// where an hour of the run is not known.
    pub cfe_share: Option<Decimal>,
    /// Expected run time, s: as asked, or longer at a power cap.
    pub run_s: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub verdict: Verdict,
    pub site: Option<String>,
    pub start_at: Option<DateTime<Utc>>,
    pub reasons: Vec<String>,
    /// Started as early as it may at the chosen (or first) site.
    pub now: Option<Estimate>,
    /// Started at `start_at`.
    pub at_start: Option<Estimate>,
    pub budgets: Vec<Remaining>,
    /// The draw reserved against the chosen site's envelope.
    pub reservation: Option<Reservation>,
    /// The per-GPU power limit the job must run under, W: set when it fits now only capped.
    pub power_cap_w: Option<u32>,
    /// Set when the job was moved out of a grid event's window.
    pub moved: Option<Moved>,
}

impl Job {
    /// Facility-level draw at a site, W.
    fn site_draw_w(&self, site: &Site) -> Decimal {
        Decimal::from(self.gpus) * Decimal::from(self.gpu_draw_w) * site.pue
    }

    fn envelope_draw_w(&self, site: &Site) -> i64 {
        let factor = site.oversubscription.of(self.kind).factor;
        oversubscription::counted_w(self.site_draw_w(site), factor)
    }

    /// The job with its GPUs limited to `cap_w`, if that lowers its draw. Its run stretches
    /// by draw / cap (the same work at the same energy: conservative, since a capped GPU
    /// usually does more work per joule), rounded up to the second.
    fn capped(&self, cap_w: u32) -> Option<Job> {
        if cap_w == 0 || cap_w >= self.gpu_draw_w {
            return None;
        }
        let ms = self.duration.num_milliseconds();
        let (work, per_s) = (
            i128::from(ms) * i128::from(self.gpu_draw_w),
            i128::from(cap_w) * 1000,
        );
        let stretched = -(-work).div_euclid(per_s) * 1000;
        Some(Job {
            gpu_draw_w: cap_w,
            duration: Duration::milliseconds(i64::try_from(stretched).ok()?),
            ..self.clone()
        })
    }

    fn estimate(&self, site: &Site, start: DateTime<Utc>) -> Estimate {
        let w = self.site_draw_w(site);
        let secs = Decimal::from(self.duration.num_seconds());
        let kg = Some(Decimal::ONE_THOUSAND);
        let weighed =
            |signal: &Forecast, per| weighed(w, signal, start, start + self.duration, per);
        Estimate {
            site: site.key.clone(),
            start_at: start,
            kwh: micro(w * secs / Decimal::from(WS_PER_KWH)),
            currency: site.currency.clone(),
            cost: weighed(&site.price, None),
            carbon_average_kg: weighed(&site.carbon_average, kg),
            carbon_marginal_kg: weighed(&site.carbon_marginal, kg),
            cfe_share: self.carbon_free(site, w, start).and_then(|s| s.fraction()),
            run_s: self.duration.num_seconds(),
        }
    }

    /// What a start is compared on, as its [`Estimate`] would say it, and nothing else: a
    /// flexible question prices every candidate start, and shows only two. `w` is the job's
    /// draw at the site.
    fn priced<'s>(
        &self,
        site: &'s Site,
        w: Decimal,
        start: DateTime<Utc>,
        policy: &Policy,
    ) -> Priced<'s> {
        let end = start + self.duration;
        let kg = Some(Decimal::ONE_THOUSAND);
        let average = || weighed(w, &site.carbon_average, start, end, kg);
        Priced {
            carbon: if policy.marginal {
                weighed(w, &site.carbon_marginal, start, end, kg).or_else(average)
            } else {
                average()
            },
            cost: weighed(w, &site.price, start, end, None),
            // Only a policy that weighs it pays for it: a question prices every start.
            cfe: if policy.cfe_weight > Decimal::ZERO {
                self.carbon_free(site, w, start)
            } else {
                None
            },
            currency: &site.currency,
        }
    }

    /// The run from `start` drawing `w` at the site, matched hour by hour against the grid's
    /// carbon-free share and the site's contracted supply.
    fn carbon_free(&self, site: &Site, w: Decimal, start: DateTime<Utc>) -> Option<cfe::Score> {
        carbon_free::run(
            w,
            &site.carbon_free,
            &site.clean_supply,
            start,
            self.duration,
        )
    }
}

/// A run drawing `w` over `[start, end)` weighed by a signal, value × kWh (currency, or g
/// CO2e divided by `per` into kg), rounded as estimates show it; `None` where the signal does
/// not cover the run.
fn weighed(
    w: Decimal,
    signal: &Forecast,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    per: Option<Decimal>,
) -> Option<Decimal> {
    let v = w * signal.integral(start, end)? / Decimal::from(WS_PER_KWH);
    Some(micro(per.map_or(v, |per| v / per)))
}

/// A candidate start's carbon on the policy's basis, its cost and, where the policy weighs
/// it, its carbon-free energy.
#[derive(Debug, Clone, Copy)]
struct Priced<'s> {
    carbon: Option<Decimal>,
    cost: Option<Decimal>,
    cfe: Option<cfe::Score>,
    currency: &'s str,
}

impl Estimate {
    pub fn amounts(&self) -> JobAmounts {
        JobAmounts {
            kwh: self.kwh,
            cost: self.cost.map(|c| (c, self.currency.clone())),
            carbon_kg: self.carbon_average_kg,
        }
    }
}

/// Percent saved by `b` over `a`: each signal's percent saving (carbon, cost, fossil energy
/// for the carbon-free share), weighted. The weights nest: `cfe_weight` w_f is the carbon-free
/// share's against carbon and price together, and `carbon_weight` w_c splits the rest, so
/// carbon weighs (1 − w_f)·w_c, price (1 − w_f)·(1 − w_c), and the three add up to 1. A signal
/// that cannot be compared for this pair leaves the others' weights to share its weight (a
/// weighted mean of those that can). With w_f = 0 this is the two-signal saving, unchanged.
/// `None` where no signal with weight can be compared.
fn saving_pct(a: &Priced, b: &Priced, policy: &Policy) -> Option<Decimal> {
    let f = policy.cfe_weight.clamp(Decimal::ZERO, Decimal::ONE);
    let rest = carbon_price_pct(a, b, policy);
    if f.is_zero() {
        return rest;
    }
    let cfe = match (&a.cfe, &b.cfe) {
        (Some(x), Some(y)) => carbon_free::saving_pct(x, y),
        _ => None,
    };
    match (cfe, rest) {
        (Some(c), Some(r)) => Some(f * c + (Decimal::ONE - f) * r),
        (Some(c), None) => Some(c),
        (None, Some(r)) if f < Decimal::ONE => Some(r),
        _ => None,
    }
}

/// Percent saved by `b` over `a` on carbon and price, weighted by `carbon_weight`; `None`
/// where neither can be compared.
fn carbon_price_pct(a: &Priced, b: &Priced, policy: &Policy) -> Option<Decimal> {
    let pct =
        |x: Decimal, y: Decimal| (x > Decimal::ZERO).then(|| (x - y) / x * Decimal::ONE_HUNDRED);
    let carbon = match (a.carbon, b.carbon) {
        (Some(x), Some(y)) => pct(x, y),
        _ => None,
    };
    let price = match (a.cost, b.cost) {
        (Some(x), Some(y)) if a.currency == b.currency => pct(x, y),
        _ => None,
    };
    let w = policy.carbon_weight.clamp(Decimal::ZERO, Decimal::ONE);
    match (carbon, price) {
        (Some(c), Some(p)) => Some(w * c + (Decimal::ONE - w) * p),
        (Some(c), None) if w > Decimal::ZERO => Some(c),
        (None, Some(p)) if w < Decimal::ONE => Some(p),
        _ => None,
    }
}

/// An instant as reasons write it, `2026-11-26T14:00:00Z`: RFC 3339 to the second, which
/// chrono writes without parsing a format string each time.
fn iso(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn kw(w: i64) -> String {
    let kw = Decimal::from(w) / Decimal::ONE_THOUSAND;
    format!("{} kW", kw.round_dp(1).normalize())
}

/// Whether a run of `d` from `s` stays clear of the event's window.
fn clear_of(e: &GridWindow, s: DateTime<Utc>, d: Duration) -> bool {
    s + d <= e.start || s >= e.end
}

/// Rounded to a millionth and always written with six places (estimates are read by
/// machines and people; a steady shape helps both).
fn micro(v: Decimal) -> Decimal {
    let mut v = v.round_dp(6);
    v.rescale(6);
    v
}

fn reservation(start: DateTime<Utc>, duration: Duration, draw_w: i64) -> Reservation {
    let (start, end) = envelope::rounded(start, duration);
    Reservation { start, end, draw_w }
}

fn basis_label(policy: &Policy) -> String {
    let rest = carbon_price_label(policy);
    if policy.cfe_weight >= Decimal::ONE {
        "carbon-free share".into()
    } else if policy.cfe_weight <= Decimal::ZERO {
        rest
    } else {
        format!(
            "{} × carbon-free share + {rest}",
            policy.cfe_weight.normalize()
        )
    }
}

fn carbon_price_label(policy: &Policy) -> String {
    let carbon = if policy.marginal {
        "marginal carbon"
    } else {
        "average carbon"
    };
    if policy.carbon_weight >= Decimal::ONE {
        carbon.into()
    } else if policy.carbon_weight <= Decimal::ZERO {
        "price".into()
    } else {
        format!("{} × {carbon} + price", policy.carbon_weight.normalize())
    }
}

#[cfg(test)]
mod tests;
