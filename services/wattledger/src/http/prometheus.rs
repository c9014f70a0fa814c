//! `GET /metrics`: the service's health and what it did (requests, ingested records,
//! admission decisions, the webhook outbox, budgets' use), and the efficiency figures of
//! every site's latest complete attributed hour, by site, tenant and model, in the
//! Prometheus text exposition format (`exposition.rs` writes it).
//!
//! Site-wide figures reveal the cluster's use together, so the endpoint wants an operator
//! (or admin) bearer token, which Prometheus sends with `authorization: {credentials}` in
//! its scrape config. Labels are bounded by the inventory and the router: sites, tenants ×
//! sites, models × sites, budgets, routes, record kinds, verdicts; never jobs or meters,
//! whose number grows without bound.
//!
//! The tenant and model figures are gauges of the latest complete hour, as the site ones
//! are, not counters over the ledger: late data recomputes past hours, so a sum over every
//! hour could fall, which a counter must not; and the hour is what a panel compares.

use super::error::ApiResult;
use super::exposition::{num, write_family, Family, Labels};
use super::extract::Caller;
use crate::admission::WriterHealth;
use crate::auth::Role;
use crate::state::AppState;
use crate::telemetry::Telemetry;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use std::collections::BTreeMap;
use wattledger_domain::budget::BudgetMetric;
use wattledger_domain::load_shape::LoadShape;
use wattledger_domain::metrics::{self, effectiveness, efficiency, EnergyTotals};
use wattledger_domain::units::{ratio, watts};
use wattledger_store::budgets::{self, BudgetState};
use wattledger_store::jobs::{self, UnknownModelCount};
use wattledger_store::metrics::{self as reads, Envelope, ModelHour, Outbox, TenantHour};
use wattledger_store::usage::{self, Backlog, LatestHour};
use wattledger_store::Scope;

#[utoipa::path(get, path = "/metrics", tag = "service",
    responses((status = 200, description = "Prometheus text exposition format 0.0.4", content_type = "text/plain", body = String),
              (status = 401, body = super::error::ErrorBody), (status = 403, body = super::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_metrics(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<impl IntoResponse> {
    caller.require(&[Role::Operator])?;
    let now = Utc::now();
    let pool = &state.pool;
    let (sites, backlog, outbox, envelopes, tenants, models, budgets, unknown_models) = tokio::try_join!(
        usage::latest_hours(pool),
        usage::backlog(pool),
        reads::outbox(pool),
        reads::envelopes(pool),
        reads::latest_hour_tenants(pool),
        reads::latest_hour_models(pool),
        budgets::list(pool, &Scope::All, None, now),
        jobs::unknown_model_count(pool),
    )?;
    let shapes = crate::views::power::latest_hour_shapes(pool, &sites).await?;
    let snapshot = Snapshot {
        now,
        sites,
        shapes,
        tenants,
        models,
        envelopes,
        budgets,
        backlog,
        outbox,
        unknown_models,
        writer: state.admission.writer_health(),
        telemetry: &state.telemetry,
    };
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        render(&snapshot),
    ))
}

/// Everything one scrape reports, read at `now`.
pub struct Snapshot<'a> {
    pub now: DateTime<Utc>,
    /// Each site's latest complete attributed hour, with its load shape.
    pub sites: Vec<LatestHour>,
    pub shapes: BTreeMap<String, LoadShape>,
    /// The same hours' ledger by tenant and by model.
    pub tenants: Vec<TenantHour>,
    pub models: Vec<ModelHour>,
    pub envelopes: Vec<Envelope>,
    /// Every budget over its current period.
    pub budgets: Vec<BudgetState>,
    pub backlog: Backlog,
    pub outbox: Outbox,
    pub unknown_models: UnknownModelCount,
    pub writer: WriterHealth,
    pub telemetry: &'a Telemetry,
}

/// The exposition text of a snapshot.
pub fn render(s: &Snapshot<'_>) -> String {
    let families = [
        service(&s.backlog, &s.writer),
        unknown_models(s.unknown_models),
        traffic(s.telemetry),
        webhooks(&s.outbox),
        budget_use(&s.budgets, s.now),
        site_figures(&s.sites, &s.envelopes),
        site_shapes(&s.shapes),
        tenant_figures(&s.tenants),
        model_figures(&s.models),
    ];
    let mut out = String::new();
    for f in families.iter().flatten() {
        write_family(&mut out, f);
    }
    out
}

fn one(value: String) -> Vec<(Labels, String)> {
    vec![(vec![], value)]
}

/// The build, the attribution backlog and the admission decision writer.
fn service(backlog: &Backlog, writer: &WriterHealth) -> Vec<Family> {
    vec![
        Family::new(
            "wattledger_build_info",
            "gauge",
            "The running wattledger's version.",
            [(
                vec![("version", env!("CARGO_PKG_VERSION").to_owned())],
                "1".into(),
            )],
        ),
        Family::new(
            "wattledger_attribution_backlog",
            "gauge",
            "Site-hours waiting for attribution.",
            one(backlog.dirty_hours.to_string()),
        ),
        Family::new(
            "wattledger_attribution_oldest_dirty_age_seconds",
            "gauge",
            "How long the oldest waiting site-hour has waited (0 when none waits).",
            one(format!("{:.3}", backlog.oldest_mark_age_s.unwrap_or(0.0))),
        ),
        Family::new(
            "wattledger_attribution_last_run_timestamp_seconds",
            "gauge",
            "When an attribution run last finished (Unix time).",
            (backlog.last_run_finished).map(|t| (vec![], t.timestamp().to_string())),
        ),
        Family::new(
            "wattledger_admission_decisions_stored_total",
            "counter",
            "Admission decisions this process stored.",
            one(writer.stored.to_string()),
        ),
        Family::new(
            "wattledger_admission_decisions_dead_lettered_total",
            "counter",
            "Admission decisions the database refused, kept in admission_dead_letters.",
            one(writer.dead_lettered.to_string()),
        ),
        Family::new(
            "wattledger_admission_decisions_queued",
            "gauge",
            "Admission decisions answered and waiting to be stored.",
            one(writer.queued.to_string()),
        ),
    ]
}

/// Jobs kept without the model they name, until someone registers it.
fn unknown_models(count: UnknownModelCount) -> Vec<Family> {
    vec![
        Family::new(
            "wattledger_jobs_unknown_model",
            "gauge",
            "Jobs naming a model nobody registered: metered and attributed without their model until POST /v1/ingest/models registers the name (the operator page lists the names).",
            one(count.jobs.to_string()),
        ),
        Family::new(
            "wattledger_unknown_model_names",
            "gauge",
            "Distinct model names those jobs give.",
            one(count.names.to_string()),
        ),
    ]
}

/// What this process served: requests, ingested records, admission decisions.
fn traffic(t: &Telemetry) -> Vec<Family> {
    let requests = t.requests();
    let (decisions, decision_latency) = t.decisions();
    vec![
        Family::new(
            "wattledger_http_requests_total",
            "counter",
            "HTTP requests this process answered, by route template (unmatched: no route) and status code.",
            requests.iter().flat_map(|(route, (statuses, _))| {
                statuses.iter().map(move |(status, n)| {
                    (
                        vec![("route", route.clone()), ("status", status.to_string())],
                        n.to_string(),
                    )
                })
            }),
        ),
        Family::histogram(
            "wattledger_http_request_duration_seconds",
            "Time from a request's arrival to its response's head, by route template.",
            requests
                .into_iter()
                .map(|(route, (_, latency))| (vec![("route", route)], latency)),
        ),
        Family::new(
            "wattledger_ingest_records_total",
            "counter",
            "Ingested records by kind and outcome: written, duplicate (stored already, same values), conflict (stored already, other values; the stored stand), refused (in a batch refused whole, 4xx).",
            t.record_counts().into_iter().map(|(kind, outcome, n)| {
                (
                    vec![("kind", kind.as_str().to_owned()), ("outcome", outcome.as_str().to_owned())],
                    n.to_string(),
                )
            }),
        ),
        Family::new(
            "wattledger_admission_decisions_total",
            "counter",
            "Admission decisions this process made (API and Kubernetes webhook, dry runs included), by decision.",
            decisions
                .into_iter()
                .map(|(v, n)| (vec![("decision", v.as_str().to_owned())], n.to_string())),
        ),
        Family::histogram(
            "wattledger_admission_decision_duration_seconds",
            "Time the decide call took (validation, policy, reservation), without the HTTP exchange.",
            [(vec![], decision_latency)],
        ),
    ]
}

/// The webhook outbox, as the database holds it (every replica reports the same).
fn webhooks(o: &Outbox) -> Vec<Family> {
    vec![
        Family::new(
            "wattledger_webhook_outbox_pending",
            "gauge",
            "Webhook messages neither delivered nor dead-lettered yet.",
            one(o.pending.to_string()),
        ),
        Family::new(
            "wattledger_webhook_outbox_oldest_pending_age_seconds",
            "gauge",
            "How long the oldest pending webhook message has waited (0 when none waits).",
            one(format!("{:.3}", o.oldest_pending_age_s.unwrap_or(0.0))),
        ),
        Family::new(
            "wattledger_webhook_dead_lettered_messages",
            "gauge",
            "Webhook messages dead-lettered after their last attempt, kept in the database.",
            one(o.dead.to_string()),
        ),
    ]
}

/// The metric label of a budget limit: `carbon_kg` is `co2e`.
fn budget_metric(metric: BudgetMetric) -> &'static str {
    match metric {
        BudgetMetric::CarbonKg => "co2e",
        other => other.as_str(),
    }
}

/// Each budget's use of its current period, per limit (the use the budget API and the
/// alerts report: `BudgetState::usages`).
fn budget_use(budgets: &[BudgetState], now: DateTime<Utc>) -> Vec<Family> {
    let per_limit = |value: fn(&wattledger_domain::budget_alerts::Usage) -> Option<Decimal>| {
        budgets
            .iter()
            .flat_map(move |b| {
                b.usages(now).into_iter().filter_map(move |(metric, u)| {
                    let labels = vec![
                        ("tenant", b.tenant.clone()),
                        ("budget", b.key.clone()),
                        ("metric", budget_metric(metric).to_owned()),
                    ];
                    Some((labels, num(value(&u)?)))
                })
            })
            .collect::<Vec<_>>()
    };
    vec![
        Family::new(
            "wattledger_budget_used_ratio",
            "gauge",
            "A budget's use of its current period over its limit, per limit (kwh, cost, co2e).",
            per_limit(|u| u.used.checked_div(u.limit).map(|r| r.round_dp(6))),
        ),
        Family::new(
            "wattledger_budget_limit",
            "gauge",
            "A budget's limit per period: kWh (kwh), the budget's currency (cost), kg CO2e (co2e).",
            per_limit(|u| Some(u.limit)),
        ),
    ]
}

/// Per site: all-time energy, the envelope, and the figures of its latest complete hour.
fn site_figures(sites: &[LatestHour], envelopes: &[Envelope]) -> Vec<Family> {
    let family = |name, kind, help, value: &dyn Fn(&LatestHour) -> Option<String>| {
        Family::new(
            name,
            kind,
            help,
            sites
                .iter()
                .filter_map(|s| Some((vec![("site", s.site.clone())], value(s)?))),
        )
    };
    let eff = |s: &LatestHour| {
        efficiency(EnergyTotals {
            total_mj: s.site_mj,
            it_mj: s.it_mj,
            gpu_mj: s.gpu_mj,
            idle_mj: s.idle_mj,
            tokens: s.tokens,
            ..Default::default()
        })
    };
    let pues = |s: &LatestHour| effectiveness(s.site_mj, s.it_mj, s.gpu_mj);
    vec![
        family(
            "wattledger_site_energy_joules_total",
            "counter",
            "Site energy over every attributed hour (facility meter or IT x static PUE).",
            &|s| Some(num(Decimal::from(s.energy_mj_total) / Decimal::from(1000))),
        ),
        Family::new(
            "wattledger_site_envelope_watts",
            "gauge",
            "The site's power envelope (what its supply allows).",
            envelopes
                .iter()
                .map(|e| (vec![("site", e.site.clone())], e.envelope_w.to_string())),
        ),
        family(
            "wattledger_site_latest_hour_timestamp_seconds",
            "gauge",
            "Start of the site's latest attributed hour, which the figures below describe.",
            &|s| Some(s.hour.timestamp().to_string()),
        ),
        family(
            "wattledger_site_power_watts",
            "gauge",
            "Mean site power over the latest attributed hour.",
            &|s| {
                Some(num(
                    (Decimal::from(s.site_mj) / Decimal::from(3_600_000)).round_dp(3)
                ))
            },
        ),
        family(
            "wattledger_site_pue_ratio",
            "gauge",
            "Power usage effectiveness: facility energy / IT energy.",
            &|s| pues(s).pue.map(num),
        ),
        family(
            "wattledger_site_itue_ratio",
            "gauge",
            "IT usage effectiveness: IT energy / accelerator energy.",
            &|s| pues(s).itue.map(num),
        ),
        family(
            "wattledger_site_tue_ratio",
            "gauge",
            "Total usage effectiveness: facility energy / accelerator energy.",
            &|s| pues(s).tue.map(num),
        ),
        family(
            "wattledger_site_idle_ratio",
            "gauge",
            "Share of the site's energy no job used.",
            &|s| ratio(s.idle_mj, s.site_mj).map(num),
        ),
        family(
            "wattledger_site_allocated_gpu_ratio",
            "gauge",
            "Share of GPU time held by jobs.",
            &|s| ratio(s.allocated_gpu_ms, s.capacity_gpu_ms).map(num),
        ),
        family(
            "wattledger_site_tokens_per_kwh",
            "gauge",
            "Tokens served per kWh of site energy.",
            &|s| eff(s).tokens_per_kwh.map(num),
        ),
        family(
            "wattledger_site_tokens_per_it_kwh",
            "gauge",
            "Tokens served per kWh of IT energy.",
            &|s| eff(s).tokens_per_kwh_it.map(num),
        ),
        family(
            "wattledger_site_peak_watts",
            "gauge",
            "Highest one-minute site draw in the latest attributed hour (facility meters, else IT meters x static PUE).",
            &|s| s.site_peak_mw.map(|mw| num(watts(mw))),
        ),
        family(
            "wattledger_site_tokens_per_second_per_megawatt_peak",
            "gauge",
            "Tokens per second per MW of the site's peak draw over the latest attributed hour.",
            &|s| s.site_peak_mw.and_then(|mw| metrics::tokens_per_s_per_mw(s.tokens, 1, mw)).map(num),
        ),
        family(
            "wattledger_site_tokens_per_second_per_megawatt_envelope",
            "gauge",
            "Tokens per second per MW of the site's power envelope over the latest attributed hour.",
            &|s| metrics::tokens_per_s_per_mw(s.tokens, 1, s.envelope_w.saturating_mul(1000)).map(num),
        ),
        family(
            "wattledger_site_carbon_intensity_grams_per_kwh",
            "gauge",
            "Operational carbon per kWh the site ran at (location-based, average intensity).",
            &|s| metrics::g_co2e_per_kwh(s.carbon_g, s.carbon_mj).map(num),
        ),
        family(
            "wattledger_site_carbon_free_ratio",
            "gauge",
            "Hourly carbon-free energy score of the latest attributed hour: the share of the site's energy matched by its contracted clean energy, then by the grid's carbon-free share (absent where neither is known).",
            &|s| ratio(s.carbon_free_mj?, s.site_mj).map(num),
        ),
    ]
}

/// A swing's samples by window, leaving out a window no two measured minutes fit in.
fn windows(one: Option<i64>, fifteen: Option<i64>) -> Vec<(&'static str, String)> {
    [("1m", one), ("15m", fifteen)]
        .into_iter()
        .filter_map(|(w, mw)| Some((w, num(watts(mw?)))))
        .collect()
}

/// Per site, the load shape of its latest attributed hour.
fn site_shapes(shapes: &BTreeMap<String, LoadShape>) -> Vec<Family> {
    let family = |name, help, value: &dyn Fn(&LoadShape) -> Vec<(&'static str, String)>| {
        Family::new(
            name,
            "gauge",
            help,
            shapes.iter().flat_map(|(site, l)| {
                value(l).into_iter().map(move |(window, v)| {
                    let mut labels = vec![("site", site.clone())];
                    if !window.is_empty() {
                        labels.push(("window", window.to_owned()));
                    }
                    (labels, v)
                })
            }),
        )
    };
    vec![
        family(
            "wattledger_site_ramp_up_watts",
            "Largest rise of site power within the window (1m, 15m) in the latest attributed hour.",
            &|l| windows(l.rise_1m_mw, l.rise_15m_mw),
        ),
        family(
            "wattledger_site_ramp_down_watts",
            "Largest fall of site power within the window (1m, 15m) in the latest attributed hour.",
            &|l| windows(l.fall_1m_mw, l.fall_15m_mw),
        ),
        family(
            "wattledger_site_peak_to_average_ratio",
            "Peak minute over mean site power in the latest attributed hour.",
            &|l| {
                l.peak_to_average
                    .map(|r| ("", num(r)))
                    .into_iter()
                    .collect()
            },
        ),
        family(
            "wattledger_site_over_envelope_seconds",
            "Time the site's power spent above its envelope in the latest attributed hour.",
            &|l| vec![("", (l.over_envelope * 60).to_string())],
        ),
    ]
}

fn joules(mj: i64) -> String {
    num(Decimal::from(mj) / Decimal::from(1000))
}

/// Per tenant and site, the ledger of the site's latest complete attributed hour.
fn tenant_figures(rows: &[TenantHour]) -> Vec<Family> {
    let labels = |r: &TenantHour| vec![("tenant", r.tenant.clone()), ("site", r.site.clone())];
    vec![
        Family::new(
            "wattledger_tenant_energy_joules",
            "gauge",
            "A tenant's energy at a site (its share of idle and facility overhead included) in the site's latest attributed hour.",
            rows.iter().map(|r| (labels(r), joules(r.total_mj))),
        ),
        Family::new(
            "wattledger_tenant_cost",
            "gauge",
            "A tenant's energy cost at a site, in the site's currency, in the site's latest attributed hour.",
            rows.iter().filter_map(|r| {
                let mut l = labels(r);
                l.push(("currency", r.currency.clone()));
                Some((l, num(r.cost?)))
            }),
        ),
        Family::new(
            "wattledger_tenant_carbon_grams",
            "gauge",
            "A tenant's operational carbon at a site (g CO2e, location-based) in the site's latest attributed hour.",
            rows.iter().filter_map(|r| Some((labels(r), num(r.carbon_g?)))),
        ),
        Family::new(
            "wattledger_tenant_badput_energy_joules",
            "gauge",
            "The part of a tenant's energy at a site spent on work thrown away (by a training or batch job that did not complete, after its last checkpoint) in the site's latest attributed hour.",
            rows.iter().map(|r| (labels(r), joules(r.badput_mj))),
        ),
    ]
}

/// Per model and site, the ledger of the site's latest complete attributed hour.
fn model_figures(rows: &[ModelHour]) -> Vec<Family> {
    let labels = |r: &ModelHour| vec![("model", r.model.clone()), ("site", r.site.clone())];
    vec![
        Family::new(
            "wattledger_model_energy_joules",
            "gauge",
            "Energy of a model's jobs at a site in the site's latest attributed hour.",
            rows.iter().map(|r| (labels(r), joules(r.total_mj))),
        ),
        Family::new(
            "wattledger_model_tokens",
            "gauge",
            "Tokens (prompt and generated) a model served at a site in the site's latest attributed hour.",
            rows.iter().map(|r| (labels(r), r.tokens.to_string())),
        ),
        Family::new(
            "wattledger_model_joules_per_token",
            "gauge",
            "Joules of a model's energy per token it served at a site in the site's latest attributed hour.",
            rows.iter().filter_map(|r| {
                let e = efficiency(EnergyTotals {
                    total_mj: r.total_mj,
                    tokens: r.tokens,
                    ..Default::default()
                });
                Some((labels(r), num(e.joules_per_token?)))
            }),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn budget() -> BudgetState {
        let at = |d| Utc.with_ymd_and_hms(2026, 11, d, 0, 0, 0).unwrap();
        BudgetState {
            id: 1,
            key: "acme-month".into(),
            tenant_id: 1,
            tenant: "acme".into(),
            model: None,
            period: wattledger_domain::budget::BudgetPeriod::Month,
            period_start: at(1),
            period_end: at(30),
            limit_kwh: Some(Decimal::from(120)),
            limit_cost: Some(Decimal::from(100)),
            currency: Some("EUR".into()),
            limit_carbon_kg: None,
            hard: false,
            thresholds_pct: vec![50, 80, 100],
            used_kwh: Decimal::from(30),
            used_cost: Decimal::from(25),
            used_carbon_kg: Decimal::ZERO,
            recent_kwh: Decimal::from(30),
            recent_cost: Decimal::from(25),
            recent_carbon_kg: Decimal::ZERO,
        }
    }

    #[test]
    fn families_are_written_once_with_escaped_labels_and_no_empty_families() {
        let site = |key: &str| LatestHour {
            site: key.into(),
            hour: Utc.with_ymd_and_hms(2026, 11, 2, 10, 0, 0).unwrap(),
            site_mj: 7_200_000_000,
            it_mj: 5_760_000_000,
            gpu_mj: 5_040_000_000,
            idle_mj: 675_000_000,
            allocated_gpu_ms: 9_000_000,
            capacity_gpu_ms: 10_800_000,
            tokens: 3750,
            carbon_g: None,
            carbon_mj: 0,
            carbon_free_mj: None,
            energy_mj_total: 7_200_000_000,
            site_peak_mw: Some(2_000_000),
            envelope_w: 100_000,
            static_pue: Decimal::new(125, 2),
        };
        let shape = wattledger_domain::load_shape::load_shape(
            &[Some(2_000_000), Some(1_500_000), Some(2_100_000)],
            Some(2_000_000),
            2_050_000,
        )
        .unwrap();
        let telemetry = Telemetry::default();
        telemetry.request(
            "/v1/ingest/samples",
            200,
            std::time::Duration::from_millis(3),
        );
        let text = render(&Snapshot {
            now: Utc.with_ymd_and_hms(2026, 11, 2, 12, 0, 0).unwrap(),
            sites: vec![site("fra1"), site("odd\"site")],
            shapes: BTreeMap::from([("fra1".to_owned(), shape)]),
            tenants: vec![TenantHour {
                tenant: "acme".into(),
                site: "fra1".into(),
                currency: "EUR".into(),
                total_mj: 3_600_000_000,
                cost: Some(Decimal::new(2500, 4)),
                carbon_g: None,
                badput_mj: 0,
            }],
            models: vec![
                ModelHour {
                    model: "llama".into(),
                    site: "fra1".into(),
                    total_mj: 3_600_000_000,
                    tokens: 1_200_000,
                },
                ModelHour {
                    model: "train".into(),
                    site: "fra1".into(),
                    total_mj: 1_000,
                    tokens: 0,
                },
            ],
            envelopes: vec![Envelope {
                site: "fra1".into(),
                envelope_w: 100_000,
            }],
            budgets: vec![budget()],
            backlog: Backlog {
                dirty_hours: 0,
                oldest_mark_age_s: None,
                last_run_finished: None,
            },
            outbox: Outbox {
                pending: 2,
                oldest_pending_age_s: Some(61.25),
                dead: 1,
            },
            unknown_models: UnknownModelCount { jobs: 3, names: 2 },
            writer: WriterHealth {
                queued: 0,
                stored: 12,
                dead_lettered: 1,
                retrying: false,
            },
            telemetry: &telemetry,
        });
        for line in [
            "wattledger_http_requests_total{route=\"/v1/ingest/samples\",status=\"200\"} 1\n",
            "wattledger_http_request_duration_seconds_bucket{route=\"/v1/ingest/samples\",le=\"0.0025\"} 0\n",
            "wattledger_http_request_duration_seconds_bucket{route=\"/v1/ingest/samples\",le=\"0.005\"} 1\n",
            "wattledger_ingest_records_total{kind=\"samples\",outcome=\"refused\"} 0\n",
            "wattledger_admission_decisions_total{decision=\"defer\"} 0\n",
            "wattledger_webhook_outbox_pending 2\n",
            "wattledger_webhook_outbox_oldest_pending_age_seconds 61.250\n",
            "wattledger_webhook_dead_lettered_messages 1\n",
            "wattledger_jobs_unknown_model 3\n",
            "wattledger_unknown_model_names 2\n",
            // 30 of 120 kWh; 25 of 100 EUR; no carbon limit, no series.
            "wattledger_budget_used_ratio{tenant=\"acme\",budget=\"acme-month\",metric=\"kwh\"} 0.25\n",
            "wattledger_budget_limit{tenant=\"acme\",budget=\"acme-month\",metric=\"cost\"} 100\n",
            "wattledger_site_envelope_watts{site=\"fra1\"} 100000\n",
            "wattledger_tenant_energy_joules{tenant=\"acme\",site=\"fra1\"} 3600000\n",
            "wattledger_tenant_cost{tenant=\"acme\",site=\"fra1\",currency=\"EUR\"} 0.25\n",
            "wattledger_model_tokens{model=\"llama\",site=\"fra1\"} 1200000\n",
            // 3.6 MJ over 1.2 M tokens.
            "wattledger_model_joules_per_token{model=\"llama\",site=\"fra1\"} 3\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(!text.contains("metric=\"co2e\""), "no carbon limit: {text}");
        assert!(
            !text.contains("wattledger_tenant_carbon_grams"),
            "no carbon: no family"
        );
        assert!(
            !text.contains("wattledger_model_joules_per_token{model=\"train\""),
            "no tokens: no J per token"
        );
        assert!(text.contains("wattledger_admission_decisions_dead_lettered_total 1\n"));
        assert_eq!(
            text.matches("# TYPE wattledger_site_pue_ratio gauge")
                .count(),
            1
        );
        assert!(
            text.contains("wattledger_site_pue_ratio{site=\"fra1\"} 1.25\n"),
            "{text}"
        );
        assert!(text.contains("site=\"odd\\\"site\""));
        assert!(text.contains("wattledger_site_power_watts{site=\"fra1\"} 2000\n"));
        assert!(text.contains("wattledger_site_peak_watts{site=\"fra1\"} 2000\n"));
        // 2.0 → 1.5 → 2.1 kW: a 600 W rise and 500 W fall, each within a minute.
        for line in [
            "wattledger_site_ramp_up_watts{site=\"fra1\",window=\"1m\"} 600\n",
            "wattledger_site_ramp_up_watts{site=\"fra1\",window=\"15m\"} 600\n",
            "wattledger_site_ramp_down_watts{site=\"fra1\",window=\"1m\"} 500\n",
            "wattledger_site_peak_to_average_ratio{site=\"fra1\"} 1.05\n",
            "wattledger_site_over_envelope_seconds{site=\"fra1\"} 60\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(text.contains(
            "wattledger_site_tokens_per_second_per_megawatt_peak{site=\"fra1\"} 520.833\n"
        ));
        assert!(text.contains(
            "wattledger_site_tokens_per_second_per_megawatt_envelope{site=\"fra1\"} 10.417\n"
        ));
        assert!(text.contains("wattledger_site_energy_joules_total{site=\"fra1\"} 7200000\n"));
        assert!(!text.contains("carbon_intensity"), "no carbon: no family");
        assert!(!text.contains("last_run"), "no run yet: no sample");
    }
}
