//! What the tenant page says of the jobs admission deferred: why they were deferred (out of
//! a grid event's window, to cleaner or cheaper hours, or waiting for power headroom) and
//! what that saved in the unit that applies — the energy moved out of an event and the
//! tenant's credit for it, carbon, money. A group that saved nothing says so; no saving of
//! zero is printed as if it were one.

use super::format::{energy, grouped, money};
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use sqlx::PgPool;
use std::collections::BTreeMap;
use wattledger_store::admission::{self, Deferred, DeferredFor};
use wattledger_store::{grid_events, Scope, StoreResult};

/// The tenant's deferred jobs of a range: how many, and one sentence per reason (and event).
pub struct DeferredView {
    pub count: i64,
    pub lines: Vec<String>,
}

/// The tenant's part of a grid event its jobs were moved out of, from the event's report.
#[derive(Debug, Clone, PartialEq)]
pub struct EventShare {
    pub site: String,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    /// Whether the event is measured (its window over and attributed).
    pub measured: bool,
    pub priced: bool,
    /// The tenant's share of the credit, in `currency`.
    pub credit: Option<Decimal>,
    pub currency: String,
}

/// The deferrals of `[from, to)` and, for each event among them, the tenant's share of it.
pub async fn load(
    pool: &PgPool,
    scope: &Scope,
    tenant: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    now: DateTime<Utc>,
) -> StoreResult<(Vec<Deferred>, BTreeMap<String, EventShare>)> {
    let deferred = admission::deferrals(pool, scope, from, to).await?;
    let mut events = BTreeMap::new();
    for key in deferred.iter().filter_map(|d| d.event.as_ref()) {
        let Some(event) = grid_events::get(pool, key).await? else {
            continue;
        };
        let report = crate::grid_events::report(pool, event, now).await?;
        let share = report.contributions.iter().find(|c| c.0.tenant == tenant);
        events.insert(
            key.clone(),
            EventShare {
                site: report.event.site.clone(),
                starts_at: report.event.starts_at,
                ends_at: report.event.ends_at,
                measured: report.outcome.is_some(),
                priced: report.event.price_per_kwh.is_some(),
                credit: share.and_then(|c| c.0.credit),
                currency: report.event.currency.clone(),
            },
        );
    }
    Ok((deferred, events))
}

/// The sentences the page shows.
pub fn view(deferred: &[Deferred], events: &BTreeMap<String, EventShare>) -> DeferredView {
    DeferredView {
        count: deferred.iter().map(|d| d.jobs).sum(),
        lines: deferred.iter().map(|d| line(d, events)).collect(),
    }
}

fn line(d: &Deferred, events: &BTreeMap<String, EventShare>) -> String {
    let n = d.jobs;
    match d.reason {
        DeferredFor::GridEvent => {
            let key = d.event.as_deref().unwrap_or_default();
            let Some(e) = events.get(key) else {
                return format!(
                    "{n} moved out of grid event {key} (demand response): {} moved out of its window",
                    energy(d.moved_mj)
                );
            };
            let credit = match (e.measured, e.priced, e.credit) {
                (_, false, _) => "the event had no price, so no credit".to_owned(),
                (false, true, _) => "its credit is known once the event is measured".to_owned(),
                (true, true, Some(c)) if c > Decimal::ZERO => {
                    format!("credited {}", money(c, &e.currency))
                }
                (true, true, _) => "the event's measured reduction earned this tenant no credit".to_owned(),
            };
            format!(
                "{n} moved out of grid event {key} (demand response at {}, {}–{} UTC): {} moved out of its window; {credit}",
                e.site,
                e.starts_at.format("%a %b %-d %H:%M"),
                e.ends_at.format("%H:%M"),
                energy(d.moved_mj)
            )
        }
        DeferredFor::Cleaner => format!(
            "{n} deferred to cleaner hours, saving an estimated {}",
            carbon(d)
        ),
        DeferredFor::Cheaper => format!(
            "{n} deferred to cheaper hours, saving an estimated {}",
            costs(d)
        ),
        DeferredFor::CleanerAndCheaper => format!(
            "{n} deferred to cleaner and cheaper hours, saving an estimated {} and {}",
            carbon(d),
            costs(d)
        ),
        DeferredFor::Headroom => format!(
            "{n} waited for power headroom at their site: no carbon or money saving is estimated for {}",
            if n == 1 { "it" } else { "them" }
        ),
    }
}

/// Carbon saved in kg, marginal first (what the decision weighs by default), with the
/// average where both were estimated; small savings in grams, so none reads as 0.0.
fn carbon(d: &Deferred) -> String {
    let amount = |v: Decimal| {
        if v.abs() < Decimal::ONE {
            (grouped(v * Decimal::ONE_THOUSAND, 0), "gCO2e")
        } else {
            (grouped(v, 1), "kgCO2e")
        }
    };
    match (
        d.carbon_marginal_kg.map(amount),
        d.carbon_average_kg.map(amount),
    ) {
        (Some((m, mu)), Some((a, au))) if mu == au => format!("{m} {mu} marginal ({a} average)"),
        (Some((m, mu)), Some((a, au))) => format!("{m} {mu} marginal ({a} {au} average)"),
        (Some((m, mu)), None) => format!("{m} {mu} marginal"),
        (None, Some((a, au))) => format!("{a} {au} (average intensity)"),
        (None, None) => "an unknown amount of carbon".into(),
    }
}

fn costs(d: &Deferred) -> String {
    d.costs
        .iter()
        .map(|(c, a)| money(*a, c))
        .collect::<Vec<_>>()
        .join(" + ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deferred(reason: DeferredFor) -> Deferred {
        Deferred {
            reason,
            event: None,
            jobs: 3,
            carbon_marginal_kg: None,
            carbon_average_kg: None,
            costs: Vec::new(),
            moved_mj: 0,
        }
    }

    #[test]
    fn each_reason_says_what_it_saved_in_its_own_unit() {
        let event = Deferred {
            event: Some("fra1-dr".into()),
            moved_mj: 36_000_000_000,
            ..deferred(DeferredFor::GridEvent)
        };
        let share = EventShare {
            site: "fra1".into(),
            starts_at: "2026-11-18T17:00:00Z".parse().unwrap(),
            ends_at: "2026-11-18T19:00:00Z".parse().unwrap(),
            measured: true,
            priced: true,
            credit: Some("12.345".parse().unwrap()),
            currency: "EUR".into(),
        };
        let cleaner = Deferred {
            jobs: 2,
            carbon_marginal_kg: Some("12.34".parse().unwrap()),
            carbon_average_kg: Some("0.042".parse().unwrap()),
            costs: vec![("EUR".into(), "-1".parse().unwrap())],
            ..deferred(DeferredFor::Cleaner)
        };
        let cheaper = Deferred {
            jobs: 1,
            costs: vec![
                ("EUR".into(), "5.5".parse().unwrap()),
                ("USD".into(), Decimal::ONE),
            ],
            ..deferred(DeferredFor::Cheaper)
        };
        let all = [event, cleaner, cheaper, deferred(DeferredFor::Headroom)];
        let events = BTreeMap::from([("fra1-dr".to_owned(), share.clone())]);
        let v = view(&all, &events);
        assert_eq!(v.count, 9);
        assert_eq!(
            v.lines,
            [
                "3 moved out of grid event fra1-dr (demand response at fra1, Wed Nov 18 17:00–19:00 UTC): 10.0 kWh moved out of its window; credited 12.35 EUR",
                "2 deferred to cleaner hours, saving an estimated 12.3 kgCO2e marginal (42 gCO2e average)",
                "1 deferred to cheaper hours, saving an estimated 5.50 EUR + 1.00 USD",
                "3 waited for power headroom at their site: no carbon or money saving is estimated for them",
            ]
        );
        // Never a credit of nothing: an event without a price, or not yet measured, says so.
        let unpriced = BTreeMap::from([(
            "fra1-dr".to_owned(),
            EventShare {
                priced: false,
                credit: None,
                ..share.clone()
            },
        )]);
        assert!(
            view(&all[..1], &unpriced).lines[0].ends_with("the event had no price, so no credit")
        );
        let open = BTreeMap::from([(
            "fra1-dr".to_owned(),
            EventShare {
                measured: false,
                credit: None,
                ..share
            },
        )]);
        assert!(view(&all[..1], &open).lines[0]
            .ends_with("its credit is known once the event is measured"));
        for l in view(&all, &events).lines {
            assert!(
                !l.contains("0.0 kg") && !l.contains(" – ") && !l.ends_with('–'),
                "{l}"
            );
        }
    }
}
