//! A grid event's page (operators and finance): what was asked of the site, the baseline by
//! its named method and the days it averaged, the metered energy hour by hour against it,
//! the reduction, whether the ask was met, the credit, and which tenants' deferred jobs
//! contributed how much.

use super::format::{energy, grouped, kwh_of_mj, money};
use super::{html, Nav, PageError, Session};
use crate::auth::Role;
use crate::grid_events::{report, Status};
use crate::state::AppState;
use askama::Template;
use axum::extract::{Path, State};
use axum::response::Response;
use chrono::Utc;
use rust_decimal::Decimal;
use wattledger_domain::demand_response::Target;
use wattledger_store::grid_events as store;

pub struct HourRow {
    pub hour: String,
    pub baseline: String,
    pub actual: String,
    pub difference: String,
}

pub struct ContributionRow {
    pub tenant: String,
    pub jobs: i64,
    pub moved: String,
    pub credited: String,
    pub credit: String,
}

#[derive(Template)]
#[template(path = "grid_event.html")]
struct EventPage {
    nav: Nav,
    key: String,
    site: String,
    window: String,
    ask: String,
    status: &'static str,
    status_note: String,
    method: String,
    baseline_days: String,
    baseline_error: Option<String>,
    figures: Vec<(String, String, String)>,
    hours: Vec<HourRow>,
    contributions: Vec<ContributionRow>,
    unattributed: Option<String>,
}

/// kWh with one place, "–" when not known.
fn kwh(mj: Option<i64>) -> String {
    mj.map_or("–".into(), |mj| grouped(kwh_of_mj(mj), 1))
}

pub async fn show(
    State(state): State<AppState>,
    session: Session,
    Path(key): Path<String>,
) -> Result<Response, PageError> {
    match session.role {
        Role::Admin | Role::Operator | Role::Finance => {}
        _ => return Err(PageError::NotFound),
    }
    let e = store::get(&state.pool, &key)
        .await?
        .ok_or(PageError::NotFound)?;
    let r = report(&state.pool, e, Utc::now()).await?;
    let e = &r.event;
    let ask = match r.target {
        Target::CapW(w) => format!(
            "keep site power at or under {} kW",
            grouped(Decimal::new(w, 3), 1)
        ),
        Target::ReductionW(w) => {
            format!(
                "draw {} kW less than the baseline",
                grouped(Decimal::new(w, 3), 1)
            )
        }
    } + &e
        .price_per_kwh
        .map(|p| format!(", paid {} per kWh shed", money(p, &e.currency)))
        .unwrap_or_default();
    let status_note = match r.status {
        Status::Upcoming => "The window has not begun; admission keeps flexible work out of it.",
        Status::Open => "The window is running or not all of its hours are attributed yet: the outcome follows once they are.",
        Status::Provisional => "Some hour of the window waits to be attributed again (late samples): the figures may still change.",
        Status::Final => "Every hour of the window is attributed: these figures are final.",
    }
    .to_owned();
    let mut figures = Vec::new();
    if let Ok(b) = &r.baseline {
        figures.push((
            "Baseline".into(),
            energy(b.total_mj),
            format!("average of {} days", b.days.len()),
        ));
    }
    if let Some(o) = &r.outcome {
        figures.push((
            "Metered".into(),
            energy(o.actual_mj),
            "site energy in the window".into(),
        ));
        figures.push((
            "Reduction".into(),
            energy(o.reduction_mj),
            format!(
                "{} of {} asked",
                if o.met { "met" } else { "not met" },
                energy(o.requested_mj)
            ),
        ));
        if let Some(c) = o.credit {
            figures.push((
                "Credit".into(),
                money(c, &e.currency),
                format!("{} credited", energy(o.credited_mj)),
            ));
        }
    }
    let hours = r
        .hours
        .iter()
        .map(|h| HourRow {
            hour: h.hour.format("%Y-%m-%d %H:00").to_string(),
            baseline: kwh(h.baseline_mj),
            actual: kwh(h.actual_mj),
            difference: kwh(h.baseline_mj.zip(h.actual_mj).map(|(b, a)| b - a)),
        })
        .collect();
    let contributions: Vec<ContributionRow> = r
        .contributions
        .iter()
        .map(|(c, jobs)| ContributionRow {
            tenant: c.tenant.clone(),
            jobs: *jobs,
            moved: energy(c.moved_mj),
            credited: energy(c.credited_mj),
            credit: c.credit.map_or("–".into(), |m| money(m, &e.currency)),
        })
        .collect();
    let unattributed = r.outcome.as_ref().and_then(|o| {
        let tenants: i64 = r.contributions.iter().map(|(c, _)| c.credited_mj).sum();
        (o.credited_mj > tenants).then(|| {
            format!(
                "{} of the reduction came from no deferred job (the site's own load): it is credited to no tenant.",
                energy(o.credited_mj - tenants)
            )
        })
    });
    let page = EventPage {
        nav: Nav::new(&session, "/operator"),
        key: e.key.clone(),
        site: e.site.clone(),
        window: format!(
            "{} to {} UTC",
            e.starts_at.format("%Y-%m-%d %H:%M"),
            e.ends_at.format("%H:%M")
        ),
        ask,
        status: r.status.as_str(),
        status_note,
        method: format!("{} ({})", r.method.describe(), r.method.label()),
        baseline_days: r
            .baseline_days()
            .iter()
            .map(|d| d.format("%a %b %-d").to_string())
            .collect::<Vec<_>>()
            .join(", "),
        baseline_error: r.baseline.as_ref().err().map(|e| e.to_string()),
        figures,
        hours,
        contributions,
        unattributed,
    };
    Ok(html(page.render()))
}
