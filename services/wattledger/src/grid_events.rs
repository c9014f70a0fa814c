//! A grid event's report: its baseline by its named method, the metered energy of its
//! window, the reduction and credit, and the tenants whose deferred jobs contributed — read
//! from the store and computed by `domain::demand_response`. The API, the event's page and
//! the month close all take it from here.

use chrono::{DateTime, Duration, NaiveDate, Utc};
use rust_decimal::Decimal;
use sqlx::PgPool;
use wattledger_domain::chargeback::{Amounts, Entry, LineClass, LineKey, Month};
use wattledger_domain::demand_response::{
    self, Baseline, BaselineMethod, Contribution, Outcome, Target, TooFewDays, LOOKBACK_DAYS,
};
use wattledger_store::grid_events::{self as store, GridEvent};
use wattledger_store::StoreResult;

/// Where an event stands (the API's `status`, by these names in lowercase).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = GridEventStatus)]
pub enum Status {
    /// Its window has not begun.
    Upcoming,
    /// Its window is running, or some of its hours are not attributed yet.
    Open,
    /// Every hour is attributed, but some wait to be attributed again (late data): the
    /// figures may still change.
    Provisional,
    /// Measured and final.
    Final,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Upcoming => "upcoming",
            Status::Open => "open",
            Status::Provisional => "provisional",
            Status::Final => "final",
        }
    }
}

pub struct HourRow {
    pub hour: DateTime<Utc>,
    pub baseline_mj: Option<i64>,
    pub actual_mj: Option<i64>,
}

pub struct Report {
    pub event: GridEvent,
    pub method: BaselineMethod,
    pub target: Target,
    pub status: Status,
    pub baseline: Result<Baseline, TooFewDays>,
    pub hours: Vec<HourRow>,
    /// The window's site peak, mW, where known for every hour.
    pub peak_mw: Option<i64>,
    pub outcome: Option<Outcome>,
    /// Per tenant: its share, and how many of its jobs were moved.
    pub contributions: Vec<(Contribution, i64)>,
}

impl Report {
    pub fn baseline_days(&self) -> &[NaiveDate] {
        self.baseline
            .as_ref()
            .map(|b| b.days.as_slice())
            .unwrap_or(&[])
    }
}

/// The event's target as the domain reads it (the table's CHECK keeps exactly one).
pub fn target(e: &GridEvent) -> Target {
    match (e.target_cap_w, e.reduction_w) {
        (Some(w), _) => Target::CapW(w),
        (None, Some(w)) => Target::ReductionW(w),
        (None, None) => Target::ReductionW(0),
    }
}

pub async fn report(pool: &PgPool, event: GridEvent, now: DateTime<Utc>) -> StoreResult<Report> {
    let method = event.baseline_method;
    let (from, to) = (event.starts_at, event.ends_at);
    let lookback = from - Duration::days(LOOKBACK_DAYS);
    let energy = store::site_energy(pool, event.site_id, lookback, to).await?;
    let event_days = store::event_days(pool, event.site_id, lookback, from).await?;
    let hours = ((to - from).num_hours()).clamp(0, 24) as u32;
    let baseline = demand_response::baseline(method, from, hours, &energy, &event_days);
    let rows: Vec<HourRow> = (0..hours)
        .map(|h| {
            let hour = from + Duration::hours(i64::from(h));
            HourRow {
                hour,
                baseline_mj: baseline.as_ref().ok().map(|b| b.hours_mj[h as usize]),
                actual_mj: if hour + Duration::hours(1) <= now {
                    energy.get(&hour).copied()
                } else {
                    None
                },
            }
        })
        .collect();
    let (peak_mw, pending) = store::window_state(pool, event.site_id, from, to).await?;
    let actual: Vec<Option<i64>> = rows.iter().map(|r| r.actual_mj).collect();
    let target = target(&event);
    let outcome = baseline
        .as_ref()
        .ok()
        .and_then(|b| demand_response::outcome(target, b, &actual, peak_mw, event.price_per_kwh));
    let status = if now < from {
        Status::Upcoming
    } else if actual.iter().any(Option::is_none) {
        Status::Open
    } else if pending {
        Status::Provisional
    } else {
        Status::Final
    };
    let moved = store::moved(pool, event.id).await?;
    let contributions = match &outcome {
        Some(o) => {
            let shares: Vec<(String, i64)> = moved.iter().map(|m| (m.0.clone(), m.1)).collect();
            demand_response::contributions(o, &shares)
                .into_iter()
                .zip(moved.iter().map(|m| m.2))
                .collect()
        }
        None => moved
            .iter()
            .map(|(tenant, mj, jobs)| {
                (
                    Contribution {
                        tenant: tenant.clone(),
                        moved_mj: *mj,
                        credited_mj: 0,
                        credit: None,
                    },
                    *jobs,
                )
            })
            .collect(),
    };
    Ok(Report {
        event,
        method,
        target,
        status,
        baseline,
        hours: rows,
        peak_mw,
        outcome,
        contributions,
    })
}

/// The demand-response credit lines of every final event with a price whose window began
/// before `until`: per tenant with a share, a line at the event's site in the month its
/// window began, its cost the credit negated and no energy. What the month close bills.
pub async fn credit_lines(
    pool: &PgPool,
    until: DateTime<Utc>,
    now: DateTime<Utc>,
) -> StoreResult<Vec<Entry>> {
    let epoch = DateTime::<Utc>::UNIX_EPOCH;
    let mut out = Vec::new();
    for e in store::overlapping(pool, None, epoch, until).await? {
        if e.price_per_kwh.is_none() || e.starts_at >= until {
            continue;
        }
        let r = report(pool, e, now).await?;
        if r.status != Status::Final {
            continue;
        }
        for (c, _) in &r.contributions {
            let Some(credit) = c.credit.filter(|c| *c > Decimal::ZERO) else {
                continue;
            };
            out.push((
                LineKey {
                    tenant: c.tenant.clone(),
                    currency: r.event.currency.clone(),
                    site: r.event.site.clone(),
                    class: LineClass::GridCredit,
                    model: None,
                    period: Month::of(r.event.starts_at.date_naive()),
                },
                Amounts {
                    energy_cost: -credit,
                    ..Amounts::default()
                },
            ));
        }
    }
    Ok(out)
}
