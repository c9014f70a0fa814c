//! A job's page: its power hour by hour split into GPU, node overhead, idle share and
//! facility overhead, what it cost and emitted, its tokens, the GPUs it held and the
//! data-quality flags of its hours. A tenant sees its own jobs (and its share of a shared
//! endpoint); any other is not found.

use super::chart::{self, Stacked};
use super::format::{carbon_kg, count, energy, f64_of, grouped, kwh_of_mj, pct};
use super::table::{Column, Header, Key, Sort};
use super::{html, Nav, PageError, Session};
use crate::state::AppState;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use rust_decimal::Decimal;
use wattledger_domain::breakdown::EnergyBreakdown;
use wattledger_domain::job_kind::JobKind;
use wattledger_domain::metrics;
use wattledger_store::{jobs, StoreError};

pub struct HourRow {
    pub hour: String,
    pub power_kw: String,
    pub gpu: String,
    pub node: String,
    pub idle: String,
    pub facility: String,
    pub cost: String,
    pub carbon: String,
    pub tokens: String,
    pub flags: String,
}

pub struct GpuRow {
    pub meter: String,
    pub uuid: String,
    pub model: String,
    pub share: String,
    pub from: String,
    pub to: String,
}

const HOUR_COLUMNS: [Column; 10] = [
    Column::text("hour", "Hour (UTC)"),
    Column::num("kw", "kW"),
    Column::num("gpu", "GPU"),
    Column::num("node", "Node"),
    Column::num("idle", "Idle share"),
    Column::num("facility", "Facility"),
    Column::num("cost", "Cost"),
    Column::num("carbon", "gCO2e"),
    Column::num("tokens", "Tokens"),
    Column::text("flags", "Flags"),
];

#[derive(serde::Deserialize)]
pub struct View {
    sort: Option<String>,
}

#[derive(Template)]
#[template(path = "job.html")]
struct JobPage {
    nav: Nav,
    headers: Vec<Header>,
    /// The table was sorted: show it open.
    sorted: bool,
    key: String,
    name: String,
    tenant: String,
    kind: JobKind,
    model: String,
    ran: String,
    /// How the job ended and what it lost, when its scheduler said.
    outcome: Option<String>,
    /// The attempt this job repeats: its key and its page.
    requeue_of: Option<(String, String)>,
    figures: Vec<(String, String, String)>,
    components: Vec<(String, String, String)>,
    chart_svg: String,
    hours: Vec<HourRow>,
    gpus: Vec<GpuRow>,
    flags: Vec<String>,
}

const KW_PER_MJ_HOUR: i64 = 3_600_000_000;

/// The parts of a job's energy as the page names them, in the order [`parts`] gives them.
const PARTS: [&str; 4] = ["GPU", "Node overhead", "Idle share", "Facility overhead"];

fn parts(e: &EnergyBreakdown) -> [i64; 4] {
    [
        e.gpu_mj,
        e.node_overhead_mj,
        e.idle_mj,
        e.facility_overhead_mj,
    ]
}

pub async fn show(
    State(state): State<AppState>,
    session: Session,
    Path(key): Path<String>,
    Query(view): Query<View>,
) -> Result<Response, PageError> {
    let job = match jobs::get(&state.pool, &session.scope, &key).await {
        Ok(j) => j,
        Err(StoreError::NotFound) => return Err(PageError::NotFound),
        Err(e) => return Err(e.into()),
    };
    let hours = jobs::hours(&state.pool, &session.scope, job.id).await?;
    let gpus = jobs::allocations(&state.pool, &session.scope, job.id).await?;
    let whole: EnergyBreakdown = hours.iter().map(|h| h.energy).sum();
    let sort = hour_sort(view.sort.as_deref());
    let page = JobPage {
        nav: Nav::new(&session, "/jobs"),
        headers: sort.headers(&HOUR_COLUMNS, ""),
        sorted: view.sort.is_some(),
        ran: ran(&job),
        outcome: outcome(&job),
        requeue_of: (job.requeue_of.clone()).map(|k| (format!("/jobs/{}", super::segment(&k)), k)),
        figures: figures(&hours, &whole),
        components: components(&whole),
        chart_svg: power_chart(&job.key, &hours),
        hours: hour_rows(&hours, &sort),
        gpus: gpus.iter().map(gpu_row).collect(),
        flags: flags(&hours),
        key: job.key,
        name: job.name,
        tenant: job.tenant,
        kind: job.kind,
        model: job.model.unwrap_or_else(|| "–".into()),
    };
    Ok(html(page.render()))
}

/// When the job ran: its start, and its end or that it is still running.
fn ran(job: &jobs::JobRow) -> String {
    format!(
        "{} → {}",
        job.start_at.format("%b %-d, %Y %H:%M UTC"),
        job.end_at
            .map(|t| t.format("%b %-d %H:%M").to_string())
            .unwrap_or_else(|| "running".into())
    )
}

/// How the job ended, its last checkpoint and the energy it lost, as one line.
fn outcome(job: &jobs::JobRow) -> Option<String> {
    let state = job.end_state?;
    let checkpoint = job.last_checkpoint_at.map_or_else(
        || "no checkpoint".to_owned(),
        |c| format!("last checkpoint {}", c.format("%b %-d %H:%M UTC")),
    );
    let lost = if job.badput_mj > 0 {
        format!(
            " · badput {} ({} of its energy)",
            energy(job.badput_mj),
            pct(
                Decimal::from(job.badput_mj),
                Decimal::from(job.energy.total_mj())
            )
        )
    } else {
        String::new()
    };
    let restarts = match job.restarts {
        0 => String::new(),
        n => format!(" · {n} restarts"),
    };
    Some(format!(
        "ended {} · {checkpoint}{lost}{restarts}",
        state.as_str().replace('_', " ")
    ))
}

/// The headline figures over the job's hours: energy, cost, carbon, tokens.
fn figures(hours: &[jobs::JobHour], whole: &EnergyBreakdown) -> Vec<(String, String, String)> {
    let sum = |f: fn(&jobs::JobHour) -> i64| hours.iter().map(f).sum::<i64>();
    let dsum =
        |f: fn(&jobs::JobHour) -> Option<Decimal>| hours.iter().filter_map(f).sum::<Decimal>();
    let total = whole.total_mj();
    let tokens = sum(|h| h.prompt_tokens + h.generated_tokens);
    let currency = hours
        .first()
        .map(|h| h.currency.clone())
        .unwrap_or_default();
    vec![
        (
            "Energy".into(),
            energy(total),
            format!(
                "{} estimated",
                pct(Decimal::from(whole.estimated_mj), Decimal::from(total))
            ),
        ),
        (
            "Cost".into(),
            format!("{} {}", grouped(dsum(|h| h.cost), 2), currency),
            "energy at the site's prices".into(),
        ),
        (
            "Carbon".into(),
            carbon_kg(dsum(|h| h.carbon_g)),
            format!("+ {} embodied", carbon_kg(dsum(|h| h.embodied_carbon_g))),
        ),
        (
            "Tokens".into(),
            count(tokens),
            format!(
                "{} GPU-hours",
                grouped(metrics::gpu_hours(sum(|h| h.gpu_ms)), 1)
            ),
        ),
    ]
}

/// Each part of the job's energy with its share of the whole.
fn components(whole: &EnergyBreakdown) -> Vec<(String, String, String)> {
    let total = whole.total_mj();
    PARTS
        .iter()
        .zip(parts(whole))
        .map(|(name, mj)| {
            (
                (*name).to_owned(),
                energy(mj),
                pct(Decimal::from(mj), Decimal::from(total)),
            )
        })
        .collect()
}

/// The job's average power per hour, stacked by part.
fn power_chart(key: &str, hours: &[jobs::JobHour]) -> String {
    let kw = |mj: i64| f64_of(Decimal::from(mj) / Decimal::from(KW_PER_MJ_HOUR));
    chart::stacked(&Stacked {
        title: &format!("{key}: average power per hour by component"),
        description: "Stacked bars: the job's average power in each hour (kW), split into GPU, node overhead, idle share and facility overhead. The table below has the same figures.",
        labels: hours.iter().map(|h| h.hour.format("%d %H:00").to_string()).collect(),
        series: PARTS
            .iter()
            .enumerate()
            .map(|(k, name)| {
                let kws = hours.iter().map(|h| kw(parts(&h.energy)[k])).collect();
                ((*name).to_owned(), kws)
            })
            .collect(),
        line: None,
        unit: "kW",
    })
}

/// Every data-quality flag of the job's hours, once each, sorted.
fn flags(hours: &[jobs::JobHour]) -> Vec<String> {
    let mut all: Vec<String> = hours.iter().flat_map(|h| h.flags.clone()).collect();
    all.sort();
    all.dedup();
    all
}

/// How the hour table is sorted: as asked, else in time order.
fn hour_sort(asked: Option<&str>) -> Sort {
    let sort = Sort::parse("sort", asked, &HOUR_COLUMNS, 0);
    if asked.is_none() {
        Sort {
            descending: false,
            ..sort
        }
    } else {
        sort
    }
}

/// The hour table's rows, sorted.
fn hour_rows(hours: &[jobs::JobHour], sort: &Sort) -> Vec<HourRow> {
    let mut rows: Vec<(Vec<Key>, HourRow)> = hours.iter().map(hour_row).collect();
    sort.apply(&mut rows);
    rows.into_iter().map(|r| r.1).collect()
}

/// A row of the hour table: its sort keys and what it shows.
fn hour_row(h: &jobs::JobHour) -> (Vec<Key>, HourRow) {
    let n = |v: i64| Key::Num(Decimal::from(v));
    (
        vec![
            Key::Text(h.hour.to_rfc3339()),
            n(h.energy.total_mj()),
            n(h.energy.gpu_mj),
            n(h.energy.node_overhead_mj),
            n(h.energy.idle_mj),
            n(h.energy.facility_overhead_mj),
            Key::Num(h.cost.unwrap_or_default()),
            Key::Num(h.carbon_g.unwrap_or_default()),
            n(h.prompt_tokens + h.generated_tokens),
            Key::Text(h.flags.join(",")),
        ],
        HourRow {
            hour: h.hour.format("%b %-d %H:00").to_string(),
            power_kw: grouped(
                Decimal::from(h.energy.total_mj()) / Decimal::from(KW_PER_MJ_HOUR),
                2,
            ),
            gpu: grouped(kwh_of_mj(h.energy.gpu_mj), 3),
            node: grouped(kwh_of_mj(h.energy.node_overhead_mj), 3),
            idle: grouped(kwh_of_mj(h.energy.idle_mj), 3),
            facility: grouped(kwh_of_mj(h.energy.facility_overhead_mj), 3),
            cost: h.cost.map(|c| grouped(c, 4)).unwrap_or_else(|| "–".into()),
            carbon: h
                .carbon_g
                .map(|g| grouped(g, 1))
                .unwrap_or_else(|| "–".into()),
            tokens: count(h.prompt_tokens + h.generated_tokens),
            flags: h.flags.join(", "),
        },
    )
}

/// A row of the GPU table: the meter held, its device and share, and when.
fn gpu_row(g: &jobs::HeldGpu) -> GpuRow {
    GpuRow {
        meter: g.meter.clone(),
        uuid: g.gpu_uuid.clone().unwrap_or_default(),
        model: match (&g.device_model, &g.mig_profile) {
            (Some(d), Some(p)) => format!("{d} · MIG {p}"),
            (Some(d), None) => d.clone(),
            (None, Some(p)) => format!("MIG {p}"),
            (None, None) => "–".into(),
        },
        share: grouped(g.share * Decimal::ONE_HUNDRED, 0) + "%",
        from: g.start_at.format("%b %-d %H:%M").to_string(),
        to: g
            .end_at
            .map(|t| t.format("%b %-d %H:%M").to_string())
            .unwrap_or_else(|| "running".into()),
    }
}
