//! The tenant overview: this month's energy, cost, carbon and tokens against budget, energy
//! by model per day with the carbon intensity it ran at, efficiency per model, the top jobs,
//! the idle share and the alerts raised. Admin, finance and operators pick any tenant from
//! the index; a tenant user sees only its own.

use super::badput::BadputView;
use super::chart::{self, Stacked};
use super::deferred::{self, DeferredView, EventShare};
use super::format::{carbon_kg, count, energy, f64_of, grouped, kwh_of_mj, money, pct};
use super::range::Range;
use super::serving::{phase_rows, PhaseRow};
use super::table::{Column, Header, Key, Sort};
use super::{html, Nav, PageError, Session};
use crate::state::AppState;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use chrono::{DateTime, Duration, Utc};
use rust_decimal::Decimal;
use serde::Deserialize;
use std::collections::BTreeMap;
use wattledger_domain::budget::BudgetMetric;
use wattledger_domain::budget_alerts::{outlook, Outlook};
use wattledger_domain::cfe;
use wattledger_domain::metrics;
use wattledger_store::admission::Deferred;
use wattledger_store::usage::{self, GroupBy, Serving, UsageFilter, UsageRow};
use wattledger_store::{badput, budgets, Scope};

fn costs(r: &UsageRow) -> String {
    let list: Vec<String> = r
        .cost_currencies
        .iter()
        .flatten()
        .zip(r.cost_amounts.iter().flatten())
        .map(|(c, a)| money(*a, c))
        .collect();
    if list.is_empty() {
        "–".into()
    } else {
        list.join(" + ")
    }
}

pub struct TenantRow {
    pub key: String,
    pub energy: String,
    pub cost: String,
    pub carbon: String,
    pub tokens: String,
}

/// The page's query: a date range and how each table is sorted.
#[derive(Debug, Default, Deserialize)]
pub struct View {
    pub from: Option<String>,
    pub to: Option<String>,
    pub sort: Option<String>,
    pub msort: Option<String>,
    pub dsort: Option<String>,
}

const TENANT_COLUMNS: [Column; 5] = [
    Column::text("tenant", "Tenant"),
    Column::num("energy", "Energy"),
    Column::num("cost", "Cost"),
    Column::num("carbon", "Carbon"),
    Column::num("tokens", "Tokens"),
];

#[derive(Template)]
#[template(path = "tenants.html")]
struct IndexPage {
    nav: Nav,
    range: Range,
    headers: Vec<Header>,
    tenants: Vec<TenantRow>,
}

/// The first currency's amount, for sorting by cost.
fn cost_key(r: &UsageRow) -> Decimal {
    r.cost_amounts.iter().flatten().copied().sum()
}

/// Every tenant's energy, cost, carbon and tokens over a range (admin, finance, operators).
pub async fn index(
    state: &AppState,
    session: &Session,
    view: &View,
) -> Result<Response, PageError> {
    let range = Range::parse(view.from.as_deref(), view.to.as_deref(), Utc::now())?;
    let filter = UsageFilter {
        from: Some(range.from),
        to: Some(range.to),
        ..Default::default()
    };
    let rows = usage::usage(&state.pool, &Scope::All, &[GroupBy::Tenant], &filter).await?;
    let sort = Sort::parse("sort", view.sort.as_deref(), &TENANT_COLUMNS, 1);
    let mut keyed: Vec<(Vec<Key>, TenantRow)> = rows
        .iter()
        .map(|r| {
            let tokens = r.tokens();
            (
                vec![
                    Key::Text(r.tenant.clone().unwrap_or_default()),
                    Key::Num(Decimal::from(r.energy.total_mj())),
                    Key::Num(cost_key(r)),
                    Key::Num(r.carbon_g.unwrap_or_default()),
                    Key::Num(Decimal::from(tokens)),
                ],
                TenantRow {
                    key: r.tenant.clone().unwrap_or_default(),
                    energy: energy(r.energy.total_mj()),
                    cost: costs(r),
                    carbon: carbon_kg(r.carbon_g.unwrap_or_default()),
                    tokens: count(tokens),
                },
            )
        })
        .collect();
    sort.apply(&mut keyed);
    Ok(html(
        IndexPage {
            nav: Nav::new(session, "/"),
            headers: sort.headers(&TENANT_COLUMNS, &range.query()),
            range,
            tenants: keyed.into_iter().map(|k| k.1).collect(),
        }
        .render(),
    ))
}

const MODEL_COLUMNS: [Column; 5] = [
    Column::text("model", "Model"),
    Column::num("energy", "Energy"),
    Column::num("tokens", "Tokens"),
    Column::num("tokens_per_kwh", "Tokens per kWh"),
    Column::num("sci_per_1k", "SCI gCO2e per 1k tokens"),
];

/// Sort keys of the day table's model columns, by position.
const MODEL_KEYS: [&str; 12] = [
    "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9", "m10", "m11", "m12",
];

const JOB_COLUMNS: [Column; 6] = [
    Column::text("job", "Job"),
    Column::text("model", "Model"),
    Column::num("energy", "Energy"),
    Column::num("cost", "Cost"),
    Column::num("carbon", "Carbon"),
    Column::num("idle", "Idle share"),
];

pub struct Figure {
    pub label: String,
    pub value: String,
    pub note: String,
}

pub struct BudgetBar {
    pub key: String,
    pub metric: String,
    pub used: String,
    pub limit: String,
    /// 0–100 for `<meter>`.
    pub pct: String,
    pub pct_label: String,
    pub projected: String,
    pub over: bool,
    pub hard: bool,
}

pub struct ModelRow {
    pub model: String,
    pub energy: String,
    pub tokens: String,
    pub tokens_per_kwh: String,
    /// Operational and embodied carbon per 1k tokens (the API's `sci_g_per_1k_tokens`).
    pub sci_per_1k: String,
}

pub struct JobRow {
    pub key: String,
    pub href: String,
    pub model: String,
    pub energy: String,
    pub cost: String,
    pub carbon: String,
    pub idle: String,
}

pub struct AlertRow {
    pub budget: String,
    pub what: String,
    pub when: String,
}

pub struct DayRow {
    pub day: String,
    pub cells: Vec<String>,
    pub total: String,
    pub intensity: String,
}

#[derive(Template)]
#[template(path = "tenant.html")]
struct OverviewPage {
    nav: Nav,
    tenant: String,
    range: Range,
    model_headers: Vec<Header>,
    job_headers: Vec<Header>,
    day_headers: Vec<Header>,
    /// The day table was just sorted: show it open.
    days_open: bool,
    figures: Vec<Figure>,
    budgets: Vec<BudgetBar>,
    chart_svg: String,
    legend: Vec<(String, &'static str)>,
    days: Vec<DayRow>,
    models: Vec<ModelRow>,
    jobs: Vec<JobRow>,
    alerts: Vec<AlertRow>,
    badput: BadputView,
    /// The tenant's models served by prefill and decode pools.
    phases: Vec<PhaseRow>,
    deferred: DeferredView,
    empty: bool,
}

/// Everything the overview shows, read from the store for one tenant and range.
struct Loaded {
    total: Option<UsageRow>,
    by_model: Vec<UsageRow>,
    by_day_model: Vec<UsageRow>,
    by_day: Vec<UsageRow>,
    /// The ten jobs with the most energy.
    by_job: Vec<UsageRow>,
    /// The range's figures by model, how jobs ended and serving phase (energy of no job:
    /// `idle`): the badput by end state and the serving phases are folded from these.
    by_model_state_phase: Vec<UsageRow>,
    /// What the jobs that served tokens drew: the energy tokens per kWh is over.
    serving: Serving,
    /// The jobs that lost the most.
    losses: Vec<badput::Loss>,
    /// The jobs admission deferred, by reason, and the tenant's share of each grid event
    /// among them.
    deferred: (Vec<Deferred>, BTreeMap<String, EventShare>),
    /// The budgets over their current period, each with the alerts raised in it.
    budgets: Vec<(budgets::BudgetState, Vec<budgets::EventRow>)>,
}

/// The page's reads at once, each on a connection of its own: they are independent, and
/// one after the other they added up to the page's time (1.7× faster at once over a
/// 1,280-GPU month, BENCHMARKS.md).
async fn load(
    pool: &sqlx::PgPool,
    scope: &Scope,
    tenant: &str,
    range: &Range,
    now: DateTime<Utc>,
) -> Result<Loaded, PageError> {
    let filter = UsageFilter {
        from: Some(range.from),
        to: Some(range.to),
        ..Default::default()
    };
    let top = UsageFilter {
        top_jobs: Some(10),
        ..filter.clone()
    };
    let usage = |group_by: &'static [GroupBy], filter: &UsageFilter| {
        let filter = filter.clone();
        async move { Ok::<_, PageError>(usage::usage(pool, scope, group_by, &filter).await?) }
    };
    let with_alerts = async {
        let mut with_alerts = Vec::new();
        for b in budgets::list(pool, scope, None, now).await? {
            let events = budgets::events(pool, scope, b.id, Some(b.period_start)).await?;
            with_alerts.push((b, events));
        }
        Ok::<_, PageError>(with_alerts)
    };
    let (
        total,
        by_model,
        by_day_model,
        by_day,
        by_job,
        by_model_state_phase,
        serving,
        losses,
        deferred,
        budgets,
    ) = tokio::try_join!(
        usage(&[], &filter),
        usage(&[GroupBy::Model], &filter),
        usage(&[GroupBy::Day, GroupBy::Model], &filter),
        usage(&[GroupBy::Day], &filter),
        usage(&[GroupBy::Job, GroupBy::Model], &top),
        // One read for the two groupings by a job's attributes: each read the same rows of
        // the job-day rollup and joined them to their jobs (~23 ms each at 1,280 GPUs × 30
        // days). Not with the top jobs as well: grouped by job, the thousands of groups each
        // cost their ~30 sums twice over (~55 ms, more than the three apart).
        usage(
            &[GroupBy::Model, GroupBy::EndState, GroupBy::Phase],
            &filter
        ),
        // Tokens per kWh over the energy of the jobs that served the tokens: over the rest of
        // a tenant's energy (training, batch) it would say nothing of its serving.
        async { Ok::<_, PageError>(usage::serving(pool, scope, &filter).await?) },
        async {
            Ok::<_, PageError>(badput::losses(pool, scope, None, range.from, range.to, 10).await?)
        },
        async {
            Ok::<_, PageError>(
                deferred::load(pool, scope, tenant, range.from, range.to, now).await?,
            )
        },
        with_alerts,
    )?;
    Ok(Loaded {
        total: total.into_iter().next(),
        by_model,
        by_day_model,
        by_day,
        by_job,
        by_model_state_phase,
        serving,
        losses,
        deferred,
        budgets,
    })
}

pub async fn overview(
    State(state): State<AppState>,
    session: Session,
    Path(key): Path<String>,
    Query(view): Query<View>,
) -> Result<Response, PageError> {
    // Another tenant's page is not found, exactly like a tenant that does not exist.
    let id = state.tenant_id(&key).await?.ok_or(PageError::NotFound)?;
    let scope = session.scope.narrow(id).ok_or(PageError::NotFound)?;
    let now = Utc::now();
    let range = Range::parse(view.from.as_deref(), view.to.as_deref(), now)?;
    let loaded = load(&state.pool, &scope, &key, &range, now).await?;
    let nav = Nav::new(&session, &format!("/tenants/{key}"));
    Ok(html(page(key, nav, range, &view, &loaded, now).render()))
}

/// The page from what was loaded: no I/O from here on.
fn page(
    key: String,
    nav: Nav,
    range: Range,
    view: &View,
    loaded: &Loaded,
    now: DateTime<Utc>,
) -> OverviewPage {
    let Loaded {
        total,
        by_model,
        by_day_model,
        by_day,
        by_job,
        by_model_state_phase,
        serving,
        losses,
        deferred: (deferrals, event_shares),
        budgets: budgets_now,
    } = loaded;
    let grid = DayGrid::new(&range, by_model, by_day_model, by_day);
    let (day_headers, days) = day_table(&grid, view, &keep(&range, view, "dsort"));
    let model_sort = Sort::parse("msort", view.msort.as_deref(), &MODEL_COLUMNS, 1);
    let job_sort = Sort::parse("sort", view.sort.as_deref(), &JOB_COLUMNS, 2);
    OverviewPage {
        nav,
        model_headers: model_sort.headers(&MODEL_COLUMNS, &keep(&range, view, "msort")),
        job_headers: job_sort.headers(&JOB_COLUMNS, &keep(&range, view, "sort")),
        day_headers,
        days_open: view.dsort.is_some(),
        figures: total
            .as_ref()
            .map(|t| headline(t, serving))
            .unwrap_or_default(),
        budgets: budgets_now
            .iter()
            .flat_map(|(b, _)| budget_bars(b, now))
            .collect(),
        chart_svg: day_chart(&key, &range, &grid),
        legend: grid
            .models
            .iter()
            .enumerate()
            .map(|(i, m)| (m.clone(), chart::colour(i)))
            .collect(),
        days,
        models: sorted(by_model.iter().map(model_row).collect(), &model_sort),
        jobs: sorted(by_job.iter().map(job_row).collect(), &job_sort),
        alerts: alert_rows(budgets_now),
        badput: BadputView::of(
            total.as_ref(),
            &badput_by_state(by_model_state_phase),
            losses,
        ),
        phases: phase_rows(by_model_state_phase),
        deferred: deferred::view(deferrals, event_shares),
        empty: total.as_ref().is_none_or(|t| t.energy.total_mj() == 0),
        tenant: key,
        range,
    }
}

/// A table's rows sorted, without their sort keys.
fn sorted<T>(mut rows: Vec<(Vec<Key>, T)>, sort: &Sort) -> Vec<T> {
    sort.apply(&mut rows);
    rows.into_iter().map(|r| r.1).collect()
}

/// The page's query but for the sort `skip`, for the links of that table's headers.
fn keep(range: &Range, view: &View, skip: &str) -> String {
    let mut q = range.query();
    for (name, value) in [
        ("sort", &view.sort),
        ("msort", &view.msort),
        ("dsort", &view.dsort),
    ] {
        if let (true, Some(v)) = (name != skip, value) {
            q.push_str(&format!("&{name}={}", super::segment(v)));
        }
    }
    q
}

/// Badput by how jobs ended (`idle` for energy of no job), in end-state order, from rows
/// grouped by end state among other keys.
fn badput_by_state(rows: &[UsageRow]) -> Vec<UsageRow> {
    let mut badput: BTreeMap<&str, i64> = BTreeMap::new();
    for r in rows {
        if let Some(state) = r.end_state.as_deref() {
            *badput.entry(state).or_default() += r.badput_mj;
        }
    }
    badput
        .into_iter()
        .map(|(state, badput_mj)| UsageRow {
            end_state: Some(state.to_owned()),
            badput_mj,
            ..UsageRow::default()
        })
        .collect()
}

/// The range's days × models, in mJ, and each day's energy and the carbon intensity it ran
/// at: what the chart and the day table show.
struct DayGrid {
    /// Each day's start, by its number from the range's start.
    starts: Vec<DateTime<Utc>>,
    /// The models of the range, sorted.
    models: Vec<String>,
    cells: BTreeMap<(String, i64), i64>,
    /// The days with energy: their total, mJ, and gCO2e per kWh where known.
    totals: BTreeMap<i64, (i64, Option<Decimal>)>,
}

impl DayGrid {
    fn new(
        range: &Range,
        by_model: &[UsageRow],
        by_day_model: &[UsageRow],
        by_day: &[UsageRow],
    ) -> DayGrid {
        let from = range.from;
        let day_of = |r: &UsageRow| r.period.map(|p| (p - from).num_days()).unwrap_or(0);
        let model_of = |r: &UsageRow| r.model.clone().unwrap_or_else(|| "no model".into());
        let mut models: Vec<String> = by_model.iter().map(model_of).collect();
        models.sort();
        models.dedup();
        let mut cells: BTreeMap<(String, i64), i64> = BTreeMap::new();
        for r in by_day_model {
            *cells.entry((model_of(r), day_of(r))).or_default() += r.energy.total_mj();
        }
        let totals = by_day
            .iter()
            .map(|r| {
                let g_per_kwh = metrics::g_co2e_per_kwh(r.carbon_g, r.coverage.carbon_mj);
                (day_of(r), (r.energy.total_mj(), g_per_kwh))
            })
            .collect();
        DayGrid {
            starts: (0..range.days())
                .map(|d| from + Duration::days(d))
                .collect(),
            models,
            cells,
            totals,
        }
    }

    fn days(&self) -> std::ops::Range<i64> {
        0..self.starts.len() as i64
    }

    fn cell(&self, model: &str, day: i64) -> i64 {
        self.cells
            .get(&(model.to_owned(), day))
            .copied()
            .unwrap_or(0)
    }

    fn g_per_kwh(&self, day: i64) -> Option<Decimal> {
        self.totals.get(&day).and_then(|(_, g)| *g)
    }
}

/// Energy per day by model, with the day's carbon intensity on the line.
fn day_chart(key: &str, range: &Range, grid: &DayGrid) -> String {
    let series = grid
        .models
        .iter()
        .map(|m| {
            let kwh = grid.days().map(|d| f64_of(kwh_of_mj(grid.cell(m, d))));
            (m.clone(), kwh.collect())
        })
        .collect();
    chart::stacked(&Stacked {
        title: &format!("{key}: energy per day by model, {}", range.label),
        description: "Stacked bars: kWh per day for each model. Dashed line: the average carbon intensity the tenant's energy ran at that day (gCO2e/kWh, right axis). The table below has the same figures.",
        labels: grid.starts.iter().map(|d| d.format("%-d").to_string()).collect(),
        series,
        line: Some((
            "gCO2e per kWh".into(),
            grid.days().map(|d| grid.g_per_kwh(d).map(f64_of)).collect(),
        )),
        unit: "kWh",
    })
}

/// The day table, its headers and its rows (the days with energy), sorted. Its columns are
/// the page's models, so its sort keys are by position.
fn day_table(grid: &DayGrid, view: &View, others: &str) -> (Vec<Header>, Vec<DayRow>) {
    let columns: Vec<Column> = std::iter::once(Column::text("day", "Day"))
        // Labelled with the model names once the headers are made.
        .chain(
            (0..grid.models.len())
                .map(|i| Column::num(MODEL_KEYS.get(i).copied().unwrap_or("m"), "")),
        )
        .chain([
            Column::num("total", "Total kWh"),
            Column::num("intensity", "gCO2e/kWh"),
        ])
        .collect();
    let sort = Sort::parse("dsort", view.dsort.as_deref(), &columns, 0);
    let rows = grid
        .days()
        .filter(|d| grid.totals.contains_key(d))
        .map(|d| day_row(grid, d))
        .collect();
    let mut headers = sort.headers(&columns, others);
    for (h, m) in headers.iter_mut().skip(1).zip(&grid.models) {
        h.label = m.clone();
    }
    (headers, sorted(rows, &sort))
}

/// A row of the day table: its sort keys and what it shows.
fn day_row(grid: &DayGrid, d: i64) -> (Vec<Key>, DayRow) {
    let start = grid.starts[d as usize];
    let total = grid.totals[&d].0;
    let keys = std::iter::once(Key::Text(start.to_rfc3339()))
        .chain(
            grid.models
                .iter()
                .map(|m| Key::Num(Decimal::from(grid.cell(m, d)))),
        )
        .chain([
            Key::Num(Decimal::from(total)),
            Key::Num(grid.g_per_kwh(d).unwrap_or_default()),
        ])
        .collect();
    let row = DayRow {
        day: start.format("%a %b %-d").to_string(),
        cells: grid
            .models
            .iter()
            .map(|m| grouped(kwh_of_mj(grid.cell(m, d)), 1))
            .collect(),
        total: grouped(kwh_of_mj(total), 1),
        intensity: grid
            .g_per_kwh(d)
            .map(|g| grouped(g, 0))
            .unwrap_or_else(|| "–".into()),
    };
    (keys, row)
}

/// The headline figures of the range: energy, cost, carbon, tokens.
fn headline(t: &UsageRow, serving: &Serving) -> Vec<Figure> {
    vec![
        Figure {
            label: "Energy".into(),
            value: energy(t.energy.total_mj()),
            note: format!(
                "idle share {}",
                pct(
                    Decimal::from(t.energy.idle_mj),
                    Decimal::from(t.energy.total_mj())
                )
            ),
        },
        Figure {
            label: "Cost".into(),
            value: costs(t),
            note: "energy at the sites' prices".into(),
        },
        Figure {
            label: "Carbon".into(),
            value: carbon_kg(t.carbon_g.unwrap_or_default()),
            note: format!(
                "+ {} embodied",
                carbon_kg(t.embodied_carbon_g.unwrap_or_default())
            ),
        },
        tokens_figure(t, serving),
        carbon_free_figure(t),
    ]
}

/// The hourly carbon-free share of the tenant's energy: each hour's energy times that hour's
/// carbon-free share (contracted clean energy first, then the grid's), as `cfe_score`.
fn carbon_free_figure(t: &UsageRow) -> Figure {
    Figure {
        label: "Carbon-free, hour by hour".into(),
        value: cfe::score(t.carbon_free_mj, t.cfe_mj)
            .map_or_else(|| "–".into(), |f| pct(f, Decimal::ONE)),
        note: if t.cfe_mj == 0 {
            "no carbon-free share known for these hours".into()
        } else {
            format!(
                "{} not carbon-free{}",
                energy(t.cfe_mj - t.carbon_free_mj),
                if t.cfe_mj < t.energy.total_mj() {
                    format!(
                        "; {} of the energy in hours without a share",
                        share(t.energy.total_mj() - t.cfe_mj, t.energy.total_mj())
                    )
                } else {
                    String::new()
                }
            )
        },
    }
}

/// One bar per limit of a budget: used against the limit, and when it runs out at the
/// recent rate.
fn budget_bars(b: &budgets::BudgetState, now: DateTime<Utc>) -> Vec<BudgetBar> {
    b.usages(now)
        .into_iter()
        .map(|(metric, u)| {
            let unit = match metric {
                BudgetMetric::Kwh => "kWh".to_owned(),
                BudgetMetric::Cost => b.currency.clone().unwrap_or_default(),
                BudgetMetric::CarbonKg => "kgCO2e".to_owned(),
            };
            let p = if u.limit.is_zero() {
                Decimal::ZERO
            } else {
                u.used * Decimal::ONE_HUNDRED / u.limit
            };
            let outlook = outlook(&u, now);
            BudgetBar {
                key: b.key.clone(),
                metric: match metric {
                    BudgetMetric::Kwh => "Energy",
                    BudgetMetric::Cost => "Cost",
                    BudgetMetric::CarbonKg => "Carbon",
                }
                .into(),
                used: format!("{} {unit}", grouped(u.used, 1)),
                limit: format!("{} {unit}", grouped(u.limit, 0)),
                pct: grouped(p.min(Decimal::ONE_HUNDRED), 1).replace(',', ""),
                pct_label: format!("{}%", grouped(p, 1)),
                projected: match &outlook {
                    Outlook::Over { by } if by.is_zero() => "at the limit".into(),
                    Outlook::Over { by } => format!("over by {} {unit}", grouped(*by, 1)),
                    Outlook::OnTrackToGoOver { at } => {
                        format!("on track to go over on {}", at.format("%b %-d"))
                    }
                    Outlook::Within => "within budget at this rate".into(),
                },
                over: matches!(outlook, Outlook::Over { .. }),
                hard: b.hard,
            }
        })
        .collect()
}

/// The ten latest alerts of the budgets, newest first.
fn alert_rows(budgets: &[(budgets::BudgetState, Vec<budgets::EventRow>)]) -> Vec<AlertRow> {
    let mut alerts: Vec<(DateTime<Utc>, AlertRow)> = budgets
        .iter()
        .flat_map(|(b, events)| {
            events.iter().map(|e| {
                (
                    e.created_at,
                    AlertRow {
                        budget: b.key.clone(),
                        what: if e.threshold == "projected" {
                            format!("{} projected to run out", e.metric)
                        } else {
                            format!("{} crossed {}%", e.metric, e.threshold)
                        },
                        when: e.created_at.format("%b %-d, %H:%M UTC").to_string(),
                    },
                )
            })
        })
        .collect();
    alerts.sort_by_key(|a| std::cmp::Reverse(a.0));
    alerts.into_iter().map(|a| a.1).take(10).collect()
}

/// A row of the largest-jobs table: its sort keys and what it shows.
fn job_row(r: &UsageRow) -> (Vec<Key>, JobRow) {
    let job = r.job.clone().unwrap_or_default();
    let idle = metrics::efficiency(r.totals())
        .idle_fraction
        .unwrap_or_default();
    (
        vec![
            Key::Text(job.clone()),
            Key::Text(r.model.clone().unwrap_or_default()),
            Key::Num(Decimal::from(r.energy.total_mj())),
            Key::Num(cost_key(r)),
            Key::Num(r.carbon_g.unwrap_or_default()),
            Key::Num(idle),
        ],
        JobRow {
            href: format!("/jobs/{}", super::segment(&job)),
            key: job,
            model: r.model.clone().unwrap_or_else(|| "–".into()),
            energy: energy(r.energy.total_mj()),
            cost: costs(r),
            carbon: carbon_kg(r.carbon_g.unwrap_or_default()),
            idle: pct(
                Decimal::from(r.energy.idle_mj),
                Decimal::from(r.energy.total_mj()),
            ),
        },
    )
}

/// The headline figure of tokens served, with their tokens per kWh of the jobs that served
/// them and the share of the tenant's energy those jobs drew.
fn tokens_figure(t: &UsageRow, serving: &Serving) -> Figure {
    Figure {
        label: "Tokens".into(),
        value: count(t.tokens()),
        note: match metrics::tokens_per_kwh(serving.tokens, serving.mj) {
            Some(per_kwh) => format!(
                "{} per kWh of the inference jobs that served them ({} of all energy)",
                grouped(per_kwh, 0),
                share(serving.mj, t.energy.total_mj())
            ),
            None if t.tokens() > 0 => {
                "the energy of the jobs that served them is not attributed yet".into()
            }
            None => "no inference tokens".into(),
        },
    }
}

/// `part` as a share of `whole`; a part too small to show at one place is said to be so,
/// not rounded to nothing.
fn share(part: i64, whole: i64) -> String {
    let thousandths = i128::from(part) * 1000 / i128::from(whole.max(1));
    if part > 0 && thousandths == 0 {
        "under 0.1%".into()
    } else {
        pct(Decimal::from(part), Decimal::from(whole))
    }
}

/// A row of the per-model table: its sort keys and what it shows, every figure the API's.
fn model_row(r: &UsageRow) -> (Vec<Key>, ModelRow) {
    let tokens = r.tokens();
    let e = metrics::efficiency(r.totals());
    let model = r.model.clone().unwrap_or_else(|| "no model".into());
    let shown =
        |v: Option<Decimal>, places: u32| v.map_or_else(|| "–".into(), |v| grouped(v, places));
    (
        vec![
            Key::Text(model.clone()),
            Key::Num(Decimal::from(r.energy.total_mj())),
            Key::Num(Decimal::from(tokens)),
            Key::Num(e.tokens_per_kwh.unwrap_or_default()),
            Key::Num(e.sci_g_per_1k_tokens.unwrap_or_default()),
        ],
        ModelRow {
            model,
            energy: energy(r.energy.total_mj()),
            tokens: count(tokens),
            tokens_per_kwh: shown(e.tokens_per_kwh, 0),
            sci_per_1k: shown(e.sci_g_per_1k_tokens, 3),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattledger_domain::breakdown::EnergyBreakdown;

    fn row(tokens: i64, carbon: Option<&str>, embodied: Option<&str>) -> UsageRow {
        UsageRow {
            model: Some("m".into()),
            energy: EnergyBreakdown {
                gpu_mj: 3_600_000_000,
                facility_overhead_mj: 3_600_000_000,
                ..Default::default()
            },
            prompt_tokens: tokens,
            carbon_g: carbon.map(|c| c.parse().unwrap()),
            embodied_carbon_g: embodied.map(|c| c.parse().unwrap()),
            ..Default::default()
        }
    }

    #[test]
    fn badput_by_end_state_adds_up_each_states_rows_over_models_and_phases() {
        let row = |model: &str, state: &str, phase: &str, badput_mj: i64| UsageRow {
            model: Some(model.into()),
            end_state: Some(state.into()),
            phase: Some(phase.into()),
            badput_mj,
            ..Default::default()
        };
        let rows = [
            row("a", "failed", "none", 3),
            row("b", "failed", "decode", 1),
            row("a", "completed", "none", 0),
            row("a", "idle", "idle", 0),
        ];
        let states: Vec<(String, i64)> = badput_by_state(&rows)
            .into_iter()
            .map(|r| (r.end_state.unwrap(), r.badput_mj))
            .collect();
        let want = [("completed", 0), ("failed", 4), ("idle", 0)];
        assert_eq!(states, want.map(|(s, mj)| (s.to_owned(), mj)));
    }

    #[test]
    fn the_model_table_shows_the_domains_figures_rounded_for_display() {
        // 2 kWh, 3,000 tokens, 600 g operational + 150 g embodied: 1,500 tokens per kWh and
        // an SCI of 250 g per 1k tokens.
        let (keys, shown) = model_row(&row(3_000, Some("600"), Some("150")));
        assert_eq!(
            (shown.energy.as_str(), shown.tokens.as_str()),
            ("2.0 kWh", "3,000")
        );
        assert_eq!(shown.tokens_per_kwh, "1,500");
        assert_eq!(shown.sci_per_1k, "250.000");
        assert_eq!(keys[4], Key::Num(Decimal::from(250)));
        // Embodied carbon unknown: no SCI is shown rather than the operational part alone.
        let (_, partial) = model_row(&row(3_000, Some("600"), None));
        assert_eq!(partial.sci_per_1k, "–");
        let (_, none) = model_row(&row(0, Some("600"), Some("150")));
        assert_eq!(
            (none.tokens_per_kwh.as_str(), none.sci_per_1k.as_str()),
            ("–", "–")
        );
    }

    #[test]
    fn the_tokens_figure_says_tokens_per_kwh_or_that_there_are_none() {
        // 2 kWh of the tenant's, 0.5 kWh of it drawn by the job that served 3,000 tokens:
        // 6,000 per kWh of that job, not 1,500 per kWh of everything.
        let serving = Serving {
            tokens: 3_000,
            mj: 1_800_000_000,
        };
        assert_eq!(
            tokens_figure(&row(3_000, None, None), &serving).note,
            "6,000 per kWh of the inference jobs that served them (25.0% of all energy)"
        );
        // The endpoint's hour not attributed yet: its tokens are known, its energy is not.
        assert_eq!(
            tokens_figure(&row(3_000, None, None), &Serving::default()).note,
            "the energy of the jobs that served them is not attributed yet"
        );
        assert_eq!(share(1, 100_000), "under 0.1%");
        assert_eq!(share(0, 100_000), "0.0%");
        let none = tokens_figure(&row(0, None, None), &Serving::default());
        assert_eq!(
            (none.value.as_str(), none.note.as_str()),
            ("0", "no inference tokens")
        );
    }

    fn budget(limit_kwh: &str, used_kwh: &str, recent_kwh: &str) -> budgets::BudgetState {
        let start = "2026-11-01T00:00:00Z".parse().unwrap();
        budgets::BudgetState {
            id: 1,
            key: "gpu-energy".into(),
            tenant_id: 1,
            tenant: "acme".into(),
            model: None,
            period: wattledger_domain::budget::BudgetPeriod::Month,
            period_start: start,
            period_end: "2026-12-01T00:00:00Z".parse().unwrap(),
            limit_kwh: Some(limit_kwh.parse().unwrap()),
            limit_cost: None,
            currency: None,
            limit_carbon_kg: None,
            hard: true,
            thresholds_pct: vec![80, 100],
            used_kwh: used_kwh.parse().unwrap(),
            used_cost: Decimal::ZERO,
            used_carbon_kg: Decimal::ZERO,
            recent_kwh: recent_kwh.parse().unwrap(),
            recent_cost: Decimal::ZERO,
            recent_carbon_kg: Decimal::ZERO,
        }
    }

    #[test]
    fn a_budget_bar_says_how_far_it_is_used_and_when_it_runs_out() {
        // Nov 15: 600 of 1,000 kWh used, 350 kWh in the last 7 days (50 a day): the 400 left
        // last 8 more days, to Nov 23.
        let now = "2026-11-15T00:00:00Z".parse().unwrap();
        let bars = budget_bars(&budget("1000", "600", "350"), now);
        assert_eq!(bars.len(), 1, "one bar per limit set");
        let b = &bars[0];
        assert_eq!(
            (b.metric.as_str(), b.used.as_str(), b.limit.as_str()),
            ("Energy", "600.0 kWh", "1,000 kWh")
        );
        assert_eq!((b.pct.as_str(), b.pct_label.as_str()), ("60.0", "60.0%"));
        assert_eq!(b.projected, "on track to go over on Nov 23");
        assert!(!b.over && b.hard);
        // Over the limit: the meter stops at 100, the label does not.
        let over = &budget_bars(&budget("1000", "1250", "0"), now)[0];
        assert_eq!(
            (over.pct.as_str(), over.pct_label.as_str()),
            ("100.0", "125.0%")
        );
        assert!(over.over);
        assert_eq!(over.projected, "over by 250.0 kWh");
        // Far under the limit and burning slowly.
        let within = &budget_bars(&budget("1000", "100", "70"), now)[0];
        assert_eq!(within.projected, "within budget at this rate");
    }

    #[test]
    fn the_alerts_are_the_ten_latest_of_every_budget_newest_first() {
        let event = |hour: u32, threshold: &str| budgets::EventRow {
            id: uuid::Uuid::nil(),
            period_start: "2026-11-01T00:00:00Z".parse().unwrap(),
            metric: BudgetMetric::Kwh,
            threshold: threshold.into(),
            used: Decimal::ZERO,
            limit_value: Decimal::ZERO,
            projected_at: None,
            created_at: format!("2026-11-{:02}T{hour:02}:00:00Z", 2 + hour / 24)
                .parse()
                .unwrap(),
        };
        let a = budget("1000", "0", "0");
        let b = budgets::BudgetState {
            key: "other".into(),
            ..a.clone()
        };
        let many: Vec<_> = (0..12).map(|h| event(h, "80")).collect();
        let rows = alert_rows(&[(a, many), (b, vec![event(20, "projected")])]);
        assert_eq!(rows.len(), 10);
        assert_eq!(
            (rows[0].budget.as_str(), rows[0].what.as_str()),
            ("other", "kwh projected to run out")
        );
        assert_eq!(rows[1].what, "kwh crossed 80%");
        assert_eq!(rows[1].when, "Nov 2, 11:00 UTC");
        assert_eq!(
            rows[9].when, "Nov 2, 03:00 UTC",
            "the two oldest are left out"
        );
    }

    #[test]
    fn a_job_row_shows_its_idle_share_of_its_own_energy() {
        let r = UsageRow {
            job: Some("slurm:c/42".into()),
            energy: EnergyBreakdown {
                gpu_mj: 3_000_000_000,
                idle_mj: 600_000_000,
                ..Default::default()
            },
            ..Default::default()
        };
        let (keys, shown) = job_row(&r);
        assert_eq!(shown.href, "/jobs/slurm%3Ac%2F42");
        assert_eq!(
            (shown.energy.as_str(), shown.model.as_str()),
            ("1.0 kWh", "–")
        );
        assert_eq!(shown.idle, pct(Decimal::from(600), Decimal::from(3_600)));
        assert_eq!(keys[5], Key::Num("0.166667".parse().unwrap()));
    }
}
