//! The operator page: each site's draw against its power envelope, PUE, ITUE and TUE over
//! the last two weeks, idle energy, and the collectors' health meter by meter in the meter
//! tree (last sample, gaps and counter resets in the last 24 hours), and the over-subscription
//! headroom its meters' coincidence leaves (`domain::headroom`).

use super::badput::BadputView;
use super::chart::{self, Stacked};
use super::format::{self, energy, f64_of, grouped, kwh_of_mj, pct};
use super::range::Range;
use super::serving::{generation_rows, phase_rows, GenerationRow, PhaseRow};
use super::table::{Column, Header, Key, Sort};
use super::{html, Nav, PageError, Session};
use crate::auth::Role;
use crate::state::AppState;
use askama::Template;
use axum::extract::{Query, State};
use axum::response::Response;
use chrono::{DateTime, Duration, Utc};
use rust_decimal::Decimal;
use std::collections::{BTreeMap, HashMap};
use wattledger_domain::cfe;
use wattledger_domain::demand_response::Target;
use wattledger_domain::headroom::{self, PowerClass};
use wattledger_domain::job_kind::JobKind;
use wattledger_domain::load_shape::{DayLoad, LoadShape};
use wattledger_domain::meter_kind::MeterKind;
use wattledger_domain::metrics;
use wattledger_store::devices::{self, DeviceGrouping};
use wattledger_store::inventory;
use wattledger_store::operations::{self, MeterHealth, SiteDay};
use wattledger_store::usage::{self, GroupBy, UsageFilter};
use wattledger_store::Scope;
use wattledger_store::{badput, grid_events, power, power_policy};

/// The default range: the last two weeks.
const DAYS: i64 = 14;
/// A meter silent for longer than this is shown as stale.
const STALE_MIN: i64 = 15;

pub struct DayRow {
    pub day: String,
    pub energy: String,
    pub pue: String,
    pub itue: String,
    pub tue: String,
    pub idle: String,
    pub allocated: String,
    pub peak_kw: String,
    pub step_peak_kw: String,
    pub tokens_per_mw: String,
    pub peak_to_average: String,
    /// The largest rise and fall within 15 minutes, kW.
    pub swing_15m: String,
    pub over_envelope: String,
}

pub struct MeterRow {
    pub depth: usize,
    pub key: String,
    pub kind: MeterKind,
    pub device: String,
    pub last: String,
    /// Silent for longer than `STALE_MIN`, and a meter that reports (a MIG slice has no
    /// samples of its own).
    pub late: bool,
    pub samples: i64,
    pub gaps: i64,
    pub resets: i64,
}

/// One class's measured headroom over the page's range.
pub struct HeadroomRow {
    pub class: &'static str,
    pub coincident_kw: String,
    pub percentile_kw: String,
    pub parts_kw: String,
    pub coincidence: String,
    pub headroom: String,
}

/// How the page names a class of meters.
fn class_label(class: PowerClass) -> &'static str {
    match class {
        PowerClass::Facility => "Facility meters",
        PowerClass::It => "All IT meters",
        PowerClass::Job(JobKind::Training) => "GPUs in training jobs",
        PowerClass::Job(JobKind::Inference) => "GPUs serving inference",
        PowerClass::Job(JobKind::Batch) => "GPUs in batch jobs",
        PowerClass::Job(JobKind::Interactive) => "GPUs in interactive jobs",
    }
}

/// The rows of a site's headroom over the whole range.
pub fn headroom_rows(span: &[crate::views::power::HeadroomOut]) -> Vec<HeadroomRow> {
    let kw = |w: Decimal| grouped(w / Decimal::ONE_THOUSAND, 1);
    span.iter()
        .map(|h| HeadroomRow {
            class: class_label(h.class),
            coincident_kw: kw(h.coincident_peak_w),
            percentile_kw: kw(h.percentile_peak_w),
            parts_kw: kw(h.parts_peak_w),
            coincidence: grouped(h.coincidence_factor, 2),
            headroom: format!("{}%", grouped(h.headroom * Decimal::ONE_HUNDRED, 1)),
        })
        .collect()
}

/// A workload class's over-subscription at a site, as admission counts it now.
pub struct PolicyRow {
    pub class: &'static str,
    pub setting: String,
    pub factor: String,
    pub why: String,
}

/// A grid event at a site, in or after the page's range.
pub struct EventRow {
    pub key: String,
    pub window: String,
    pub ask: String,
    pub status: &'static str,
    pub reduction: String,
    pub credit: String,
}

pub struct SiteView {
    pub key: String,
    pub name: String,
    pub peak: Peak,
    pub chart_svg: String,
    /// The last day's site power per minute against the envelope, if measured.
    pub power_svg: Option<String>,
    pub headroom: Vec<HeadroomRow>,
    pub policy: Vec<PolicyRow>,
    /// The per-GPU power cap admission may set, W, if any.
    pub power_cap_w: Option<u32>,
    pub events: Vec<EventRow>,
    /// Goodput and badput at the site over the range.
    pub badput: Option<BadputView>,
    pub carbon_free: Option<CarbonFree>,
    pub days: Vec<DayRow>,
    pub meters: Vec<MeterRow>,
    pub stale: usize,
    pub gaps: i64,
    pub resets: i64,
}

const DAY_COLUMNS: [Column; 13] = [
    Column::num("day", "Day"),
    Column::num("energy", "Energy"),
    Column::num("pue", "PUE"),
    Column::num("itue", "ITUE"),
    Column::num("tue", "TUE"),
    Column::num("idle", "Idle"),
    Column::num("allocated", "GPUs allocated"),
    Column::num("peak", "Peak hour kW"),
    Column::num("step_peak", "Peak minute IT kW"),
    Column::num("tokens_mw", "Tokens/s per MW of peak"),
    Column::num("par", "Peak / mean"),
    Column::num("swing", "15-min rise / fall kW"),
    Column::num("over", "Minutes over envelope"),
];

/// The meter column sorts in tree order (facility, nodes, GPUs, MIG slices).
const METER_COLUMNS: [Column; 7] = [
    Column::text("meter", "Meter"),
    Column::text("kind", "Kind"),
    Column::text("device", "Device"),
    Column::num("last", "Last sample"),
    Column::num("samples", "Samples"),
    Column::num("gaps", "Gaps"),
    Column::num("resets", "Resets"),
];

#[derive(Template)]
#[template(path = "operator.html")]
struct OperatorPage {
    nav: Nav,
    range: Range,
    day_headers: Vec<Header>,
    meter_headers: Vec<Header>,
    /// Which tables were just sorted, to show them open.
    days_open: bool,
    meters_open: bool,
    sites: Vec<SiteView>,
    /// Fleet-wide: models served by prefill and decode pools, and each model's efficiency
    /// per GPU device model.
    phases: Vec<PhaseRow>,
    generations: Vec<GenerationRow>,
    /// Model keys jobs name that nobody registered: those jobs have no model until one is.
    unknown_models: Vec<UnknownModelRow>,
}

/// A model key jobs name that is not registered, as the page shows it.
pub struct UnknownModelRow {
    pub key: String,
    pub jobs: String,
    pub first_start: String,
    pub last_start: String,
}

#[derive(serde::Deserialize)]
pub struct View {
    from: Option<String>,
    to: Option<String>,
    dsort: Option<String>,
    msort: Option<String>,
}

/// A site's power per minute over one day against its envelope, drawn at its meters' own
/// resolution: minutes measured within the site's gap limit of each other are joined.
fn power_chart(site: &inventory::SiteRow, gap_limit_s: i32, day_us: i64, load: &DayLoad) -> String {
    let day = chrono::DateTime::from_timestamp_micros(day_us)
        .map(|d| d.format("%b %-d").to_string())
        .unwrap_or_default();
    let kw = |mw: i64| mw as f64 / 1_000_000.0;
    chart::line(&chart::Line {
        id: &format!("power-{}", site.key),
        title: &format!("{}: site power per minute, {day}, against the envelope", site.name),
        description: &format!(
            "Line: the site's draw each minute it was measured (its facility meters, else its IT meters × PUE {}), kW, joined across up to {} minutes; a longer gap breaks it. Dashed: the {} kW power envelope. Peak, swings and minutes over the envelope are in the day table below.",
            site.static_pue.normalize(),
            gap_limit_s / 60,
            site.power_envelope_w / 1000
        ),
        values: load.minutes_mw.iter().map(|m| m.map(kw)).collect(),
        join_within: usize::try_from(gap_limit_s / 60).unwrap_or(1),
        labels: (0..=4).map(|k| (k * 360, format!("{:02}:00", k * 6))).collect(),
        limit: Some(("Envelope".into(), site.power_envelope_w as f64 / 1000.0)),
        unit: "kW",
    })
}

/// A day's tokens per second per MW of its peak site draw.
fn tokens_per_mw(d: &SiteDay) -> Option<Decimal> {
    metrics::tokens_per_s_per_mw(d.tokens, d.hours, d.site_peak_mw?)
}

fn ratio_key(a: i64, b: i64) -> Key {
    Key::Num(if b == 0 {
        Decimal::ZERO
    } else {
        Decimal::from(a) / Decimal::from(b)
    })
}

fn ratio(a: i64, b: i64) -> String {
    if b == 0 {
        "–".into()
    } else {
        grouped(Decimal::from(a) / Decimal::from(b), 3)
    }
}

/// Meters in tree order (facility, its nodes, their GPUs, their MIG slices), with depth.
fn tree(meters: Vec<MeterHealth>) -> Vec<(usize, MeterHealth)> {
    let mut children: BTreeMap<Option<String>, Vec<MeterHealth>> = BTreeMap::new();
    for m in meters {
        children.entry(m.parent.clone()).or_default().push(m);
    }
    let mut out = Vec::new();
    fn walk(
        parent: Option<String>,
        depth: usize,
        children: &mut BTreeMap<Option<String>, Vec<MeterHealth>>,
        out: &mut Vec<(usize, MeterHealth)>,
    ) {
        let Some(mut list) = children.remove(&parent) else {
            return;
        };
        list.sort_by(|a, b| (a.kind, &a.key).cmp(&(b.kind, &b.key)));
        for m in list {
            let key = m.key.clone();
            out.push((depth, m));
            walk(Some(key), depth + 1, children, out);
        }
    }
    walk(None, 0, &mut children, &mut out);
    // Anything whose parent is at another site or missing still shows, at the end.
    for (_, rest) in children {
        out.extend(rest.into_iter().map(|m| (0, m)));
    }
    out
}

pub async fn page(
    State(state): State<AppState>,
    session: Session,
    Query(view): Query<View>,
) -> Result<Response, PageError> {
    match session.role {
        Role::Admin | Role::Operator | Role::Finance => {}
        _ => return Err(PageError::NotFound),
    }
    let now = Utc::now();
    let range = Range::parse_or(
        view.from.as_deref(),
        view.to.as_deref(),
        now,
        now.date_naive() - Duration::days(DAYS - 1),
        &format!("the last {DAYS} days"),
    )?;
    let (sites, mut loaded) = load(&state, &range, now).await?;
    let (phases, generations) = serving(&state, &range).await?;
    let unknown_models = wattledger_store::jobs::unknown_models(&state.pool)
        .await?
        .into_iter()
        .map(|u| UnknownModelRow {
            key: u.key,
            jobs: format::count(u.jobs),
            first_start: u.first_start.format("%Y-%m-%d %H:%M UTC").to_string(),
            last_start: u.last_start.format("%Y-%m-%d %H:%M UTC").to_string(),
        })
        .collect();
    let day_sort = Sort::parse("dsort", view.dsort.as_deref(), &DAY_COLUMNS, 0);
    let meter_sort = meter_sort(view.msort.as_deref());
    let sites = sites
        .iter()
        .map(|s| site_view(s, &mut loaded, &day_sort, &meter_sort, now))
        .collect();
    Ok(html(
        OperatorPage {
            nav: Nav::new(&session, "/operator"),
            day_headers: day_sort.headers(&DAY_COLUMNS, &keep(&range, &view, "dsort")),
            meter_headers: meter_sort.headers(&METER_COLUMNS, &keep(&range, &view, "msort")),
            days_open: view.dsort.is_some(),
            meters_open: view.msort.is_some(),
            range,
            sites,
            phases,
            generations,
            unknown_models,
        }
        .render(),
    ))
}

/// How the meter table is sorted: as asked, else in tree order, top down.
fn meter_sort(asked: Option<&str>) -> Sort {
    let sort = Sort::parse("msort", asked, &METER_COLUMNS, 0);
    if asked.is_none() {
        Sort {
            descending: false,
            ..sort
        }
    } else {
        sort
    }
}

/// The page's query but for the sort `skip`, for the links of that table's headers.
fn keep(range: &Range, view: &View, skip: &str) -> String {
    let mut q = range.query();
    for (name, value) in [("dsort", &view.dsort), ("msort", &view.msort)] {
        if let (true, Some(v)) = (name != skip, value) {
            q.push_str(&format!("&{name}={}", super::segment(v)));
        }
    }
    q
}

/// What the page shows of each site, read from the store for the range, by site key: taken
/// out site by site as the page is made.
struct Loaded {
    gap_limits: HashMap<String, i32>,
    days: BTreeMap<String, Vec<SiteDay>>,
    /// The meters' health over the last 24 hours.
    meters: BTreeMap<String, Vec<MeterHealth>>,
    shapes: BTreeMap<String, BTreeMap<i64, DayLoad>>,
    headroom: BTreeMap<String, Vec<HeadroomRow>>,
    /// Each site's policy rows and per-GPU power cap.
    policies: BTreeMap<String, (Vec<PolicyRow>, Option<u32>)>,
    events: BTreeMap<String, Vec<EventRow>>,
    badput: BTreeMap<String, BadputView>,
    carbon_free: BTreeMap<String, CarbonFree>,
}

/// A site's hourly carbon-free score over the range, as the page shows it.
pub struct CarbonFree {
    pub score: String,
    pub note: String,
}

/// The sites, and what the page shows of them.
async fn load(
    state: &AppState,
    range: &Range,
    now: DateTime<Utc>,
) -> Result<(Vec<inventory::SiteRow>, Loaded), PageError> {
    let days = operations::site_days(&state.pool, range.from, range.to).await?;
    let health = operations::meter_health(&state.pool, now - Duration::hours(24)).await?;
    let sites = inventory::list_sites(&state.pool).await?;
    let gap_limits = inventory::gap_limits(&state.pool).await?;
    // One read of the range's power profiles for both the headroom and the load shapes.
    let power = power::hours(&state.pool, None, range.from, range.to, None).await?;
    let shapes = crate::views::power::load_shapes(&power, &sites)
        .into_iter()
        .map(|(site, _, days)| (site, days))
        .collect();
    let headroom = crate::views::power::by_site(&power, headroom::DEFAULT_PERCENTILE)
        .into_iter()
        .map(|s| (s.site, headroom_rows(&s.span)))
        .collect();
    let policies = policies(state, now).await?;
    let events = events(state, range.from, range.to, now).await?;
    let mut badput = BTreeMap::new();
    let mut carbon_free = BTreeMap::new();
    for s in &sites {
        badput.insert(s.key.clone(), site_badput(state, s.id, range).await?);
        let filter = UsageFilter {
            from: Some(range.from),
            to: Some(range.to),
            site_id: Some(s.id),
            ..Default::default()
        };
        if let Some(t) = usage::site_totals(&state.pool, &filter, None)
            .await?
            .first()
        {
            carbon_free.insert(s.key.clone(), carbon_free_of(t));
        }
    }
    let loaded = Loaded {
        gap_limits,
        days: by_site(days, |d| &d.site),
        meters: by_site(health, |m| &m.site),
        shapes,
        headroom,
        policies,
        events,
        badput,
        carbon_free,
    };
    Ok((sites, loaded))
}

/// The site's hourly CFE score: its hours matched by contracted clean energy first, then
/// by the grid's carbon-free share (`domain::cfe`).
fn carbon_free_of(t: &usage::SiteTotals) -> CarbonFree {
    CarbonFree {
        score: cfe::score(t.carbon_free_mj, t.cfe_mj)
            .map_or_else(|| "–".into(), |f| pct(f, Decimal::ONE)),
        note: format!(
            "{} of {} hours not wholly carbon-free ({} short){}{}",
            t.hours_not_carbon_free,
            t.hours,
            energy(t.cfe_mj - t.carbon_free_mj),
            match t.contract_mj {
                0 => String::new(),
                mj => format!("; {} delivered under contract", energy(mj)),
            },
            match t.hours_cfe_unknown {
                0 => String::new(),
                n => format!("; {n} hours without a carbon-free share"),
            }
        ),
    }
}

/// Every tenant's serving over the range: by model and phase, and by model and device model.
async fn serving(
    state: &AppState,
    range: &Range,
) -> Result<(Vec<PhaseRow>, Vec<GenerationRow>), PageError> {
    let filter = UsageFilter {
        from: Some(range.from),
        to: Some(range.to),
        ..Default::default()
    };
    let phases = usage::usage(
        &state.pool,
        &Scope::All,
        &[GroupBy::Model, GroupBy::Phase],
        &filter,
    )
    .await?;
    let by = DeviceGrouping {
        model: true,
        device: true,
        site: false,
    };
    let devices = devices::usage(&state.pool, by, range.from, range.to, None).await?;
    Ok((phase_rows(&phases), generation_rows(&devices)))
}

/// A site's goodput and badput over the range, every tenant's.
async fn site_badput(
    state: &AppState,
    site_id: i64,
    range: &Range,
) -> Result<BadputView, PageError> {
    let filter = UsageFilter {
        from: Some(range.from),
        to: Some(range.to),
        site_id: Some(site_id),
        ..Default::default()
    };
    let pool = &state.pool;
    let total = usage::usage(pool, &Scope::All, &[], &filter).await?;
    let by_state = usage::usage(pool, &Scope::All, &[GroupBy::EndState], &filter).await?;
    let losses = badput::losses(pool, &Scope::All, Some(site_id), range.from, range.to, 10).await?;
    Ok(BadputView::of(total.first(), &by_state, &losses))
}

/// Rows grouped by their site's key, each site's in the order read.
fn by_site<T>(rows: Vec<T>, site: impl Fn(&T) -> &String) -> BTreeMap<String, Vec<T>> {
    let mut out: BTreeMap<String, Vec<T>> = BTreeMap::new();
    for r in rows {
        out.entry(site(&r).clone()).or_default().push(r);
    }
    out
}

/// One site's panel, taking its share of what was loaded.
fn site_view(
    s: &inventory::SiteRow,
    loaded: &mut Loaded,
    day_sort: &Sort,
    meter_sort: &Sort,
    now: DateTime<Utc>,
) -> SiteView {
    let days = loaded.days.remove(&s.key).unwrap_or_default();
    let shapes = loaded.shapes.get(&s.key);
    let meters = meter_rows(
        loaded.meters.remove(&s.key).unwrap_or_default(),
        meter_sort,
        now,
    );
    let (policy, power_cap_w) = loaded.policies.remove(&s.key).unwrap_or_default();
    SiteView {
        key: s.key.clone(),
        name: s.name.clone(),
        peak: peak(s, &days),
        chart_svg: energy_chart(s, &days),
        power_svg: shapes
            .and_then(|d| d.iter().next_back())
            .map(|(day, load)| {
                // The schema's default, should the site be gone since it was listed.
                let gap_limit_s = loaded.gap_limits.get(&s.key).copied().unwrap_or(600);
                power_chart(s, gap_limit_s, *day, load)
            }),
        headroom: loaded.headroom.remove(&s.key).unwrap_or_default(),
        power_cap_w,
        policy,
        events: loaded.events.remove(&s.key).unwrap_or_default(),
        badput: loaded.badput.remove(&s.key),
        carbon_free: loaded.carbon_free.remove(&s.key),
        days: day_rows(&days, shapes, day_sort),
        stale: meters.iter().filter(|m| m.late).count(),
        gaps: meters.iter().map(|m| m.gaps).sum(),
        resets: meters.iter().map(|m| m.resets).sum(),
        meters,
    }
}

/// The last day's peak draw against the site's envelope, as [`SiteView`] shows it.
pub struct Peak {
    pub envelope_kw: String,
    pub peak_kw: String,
    /// 0–100, the peak hourly draw of the last day against the envelope, for `<meter>`.
    pub peak_pct: String,
    pub peak_label: String,
    /// The last day of the range, whose peak is shown.
    pub peak_day: String,
    /// That day's highest one-minute IT draw from the meters' step peaks, if any reported
    /// power, and its share of the envelope.
    pub step_peak_kw: Option<String>,
    pub step_peak_label: String,
}

fn peak(s: &inventory::SiteRow, days: &[SiteDay]) -> Peak {
    let envelope_kw = Decimal::from(s.power_envelope_w) / Decimal::ONE_THOUSAND;
    let last_peak = days.last().map_or(0, |d| d.peak_hour_mj);
    let peak = kw_of_hour(last_peak);
    let step_peak = days.last().and_then(|d| d.it_peak_mw).map(kw_of_mw);
    let peak_share = if envelope_kw.is_zero() {
        Decimal::ZERO
    } else {
        peak * Decimal::ONE_HUNDRED / envelope_kw
    };
    Peak {
        envelope_kw: grouped(envelope_kw, 0),
        peak_kw: grouped(peak, 1),
        peak_pct: grouped(peak_share.min(Decimal::ONE_HUNDRED), 1).replace(',', ""),
        peak_label: format!("{}%", grouped(peak_share, 1)),
        peak_day: days
            .last()
            .map(|d| d.day.format("%b %-d").to_string())
            .unwrap_or_default(),
        step_peak_kw: step_peak.map(|kw| grouped(kw, 1)),
        step_peak_label: step_peak
            .filter(|_| !envelope_kw.is_zero())
            .map(|kw| format!("{}%", grouped(kw * Decimal::ONE_HUNDRED / envelope_kw, 1)))
            .unwrap_or_default(),
    }
}

/// An hour's energy, mJ, as its average power, kW.
fn kw_of_hour(mj: i64) -> Decimal {
    Decimal::from(mj) / Decimal::from(3_600_000_000i64)
}

/// A power in mW, as kW.
fn kw_of_mw(mw: i64) -> Decimal {
    Decimal::from(mw) / Decimal::from(1_000_000i64)
}

/// The site's IT energy and facility overhead per day, with PUE on the line.
fn energy_chart(s: &inventory::SiteRow, days: &[SiteDay]) -> String {
    chart::stacked(&Stacked {
        title: &format!("{}: IT energy and facility overhead per day, with PUE", s.name),
        description: "Stacked bars: kWh per day of IT equipment and of facility overhead (cooling, power conversion). Dashed line: PUE, facility energy over IT energy (right axis). The table below has the same figures.",
        labels: days.iter().map(|d| d.day.format("%b %-d").to_string()).collect(),
        series: vec![
            ("IT".into(), days.iter().map(|d| f64_of(kwh_of_mj(d.it_mj))).collect()),
            ("Facility overhead".into(), days.iter().map(|d| f64_of(kwh_of_mj(d.site_mj - d.it_mj))).collect()),
        ],
        line: Some((
            "PUE".into(),
            days.iter()
                .map(|d| (d.it_mj != 0).then(|| d.site_mj as f64 / d.it_mj as f64))
                .collect(),
        )),
        unit: "kWh",
    })
}

/// The day table's rows, sorted.
fn day_rows(days: &[SiteDay], shapes: Option<&BTreeMap<i64, DayLoad>>, sort: &Sort) -> Vec<DayRow> {
    let mut rows: Vec<(Vec<Key>, DayRow)> = days
        .iter()
        .map(|d| {
            let shape = shapes
                .and_then(|s| s.get(&d.day.timestamp_micros()))
                .map(|d| &d.shape);
            day_row(d, shape)
        })
        .collect();
    sort.apply(&mut rows);
    rows.into_iter().map(|r| r.1).collect()
}

/// A row of the day table: its sort keys and what it shows, the load shape's figures where
/// the day has one.
fn day_row(d: &SiteDay, shape: Option<&LoadShape>) -> (Vec<Key>, DayRow) {
    let none = || "–".to_owned();
    (
        vec![
            Key::Num(Decimal::from(d.day.timestamp())),
            Key::Num(Decimal::from(d.site_mj)),
            ratio_key(d.site_mj, d.it_mj),
            ratio_key(d.it_mj, d.gpu_mj),
            ratio_key(d.site_mj, d.gpu_mj),
            ratio_key(d.idle_mj, d.site_mj),
            ratio_key(d.allocated_gpu_ms, d.capacity_gpu_ms),
            Key::Num(Decimal::from(d.peak_hour_mj)),
            Key::Num(Decimal::from(d.it_peak_mw.unwrap_or(-1))),
            Key::Num(tokens_per_mw(d).unwrap_or(Decimal::NEGATIVE_ONE)),
            Key::Num(
                shape
                    .and_then(|l| l.peak_to_average)
                    .unwrap_or(Decimal::NEGATIVE_ONE),
            ),
            Key::Num(Decimal::from(
                shape
                    .and_then(|l| l.rise_15m_mw.max(l.fall_15m_mw))
                    .unwrap_or(-1),
            )),
            Key::Num(Decimal::from(shape.map_or(-1, |l| l.over_envelope as i64))),
        ],
        DayRow {
            day: d.day.format("%a %b %-d").to_string(),
            energy: energy(d.site_mj),
            pue: ratio(d.site_mj, d.it_mj),
            itue: ratio(d.it_mj, d.gpu_mj),
            tue: ratio(d.site_mj, d.gpu_mj),
            idle: pct(Decimal::from(d.idle_mj), Decimal::from(d.site_mj)),
            allocated: pct(
                Decimal::from(d.allocated_gpu_ms),
                Decimal::from(d.capacity_gpu_ms),
            ),
            peak_kw: grouped(kw_of_hour(d.peak_hour_mj), 1),
            step_peak_kw: d
                .it_peak_mw
                .map_or_else(none, |mw| grouped(kw_of_mw(mw), 1)),
            tokens_per_mw: tokens_per_mw(d).map_or_else(none, |t| grouped(t, 1)),
            peak_to_average: shape
                .and_then(|l| l.peak_to_average)
                .map_or_else(none, |r| grouped(r, 2)),
            swing_15m: match shape.map(|l| (l.rise_15m_mw, l.fall_15m_mw)) {
                Some((Some(rise), Some(fall))) => format!(
                    "{} / {}",
                    grouped(kw_of_mw(rise), 1),
                    grouped(kw_of_mw(fall), 1)
                ),
                _ => none(),
            },
            over_envelope: shape.map_or_else(none, |l| l.over_envelope.to_string()),
        },
    )
}

/// The meter table's rows: the site's meters in tree order, then sorted as asked.
fn meter_rows(meters: Vec<MeterHealth>, sort: &Sort, now: DateTime<Utc>) -> Vec<MeterRow> {
    let mut rows: Vec<(Vec<Key>, MeterRow)> = tree(meters)
        .into_iter()
        .enumerate()
        .map(|(position, (depth, m))| meter_row(position, depth, m, now))
        .collect();
    sort.apply(&mut rows);
    rows.into_iter().map(|r| r.1).collect()
}

/// A row of the meter table: its sort keys (the first its place in the tree) and what it
/// shows.
fn meter_row(
    position: usize,
    depth: usize,
    m: MeterHealth,
    now: DateTime<Utc>,
) -> (Vec<Key>, MeterRow) {
    let age = m.last_sample.map(|t| now - t);
    let keys = vec![
        Key::Num(Decimal::from(position as i64)),
        Key::Text(m.kind.to_string()),
        Key::Text(m.device_model.clone().unwrap_or_default()),
        Key::Num(Decimal::from(m.last_sample.map_or(0, |t| t.timestamp()))),
        Key::Num(Decimal::from(m.samples)),
        Key::Num(Decimal::from(m.gaps)),
        Key::Num(Decimal::from(m.resets)),
    ];
    let stale = age.is_none_or(|a| a > Duration::minutes(STALE_MIN));
    let row = MeterRow {
        depth: depth.min(3),
        late: stale && m.kind != MeterKind::Mig,
        last: last_sample(age),
        key: m.key,
        kind: m.kind,
        device: m.device_model.unwrap_or_default(),
        samples: m.samples,
        gaps: m.gaps,
        resets: m.resets,
    };
    (keys, row)
}

/// How long ago a meter's last sample came, in the largest unit that says it.
fn last_sample(age: Option<Duration>) -> String {
    match age {
        None => "never".into(),
        Some(a) if a < Duration::minutes(2) => format!("{} s ago", a.num_seconds().max(0)),
        Some(a) if a < Duration::hours(2) => format!("{} min ago", a.num_minutes()),
        Some(a) if a < Duration::days(2) => format!("{} h ago", a.num_hours()),
        Some(a) => format!("{} days ago", a.num_days()),
    }
}

/// Each site's power policy rows and per-GPU power cap, by site key.
async fn policies(
    state: &AppState,
    now: DateTime<Utc>,
) -> Result<BTreeMap<String, (Vec<PolicyRow>, Option<u32>)>, PageError> {
    let policies = power_policy::list(&state.pool, None).await?;
    let factors = power_policy::factors(&state.pool, &policies, now).await?;
    Ok(policies
        .iter()
        .map(|p| {
            let f = factors.get(&p.site_id).cloned().unwrap_or_default();
            let rows = JobKind::ALL
                .into_iter()
                .map(|k| PolicyRow {
                    class: class_label(PowerClass::Job(k)),
                    setting: p.policy.setting(k).label(),
                    factor: grouped(f.of(k).factor, 3),
                    why: f.of(k).why.clone(),
                })
                .collect();
            (p.site.clone(), (rows, p.policy.power_cap_w))
        })
        .collect())
}

/// Each site's grid events from the range's start to a week after its end (upcoming ones
/// included), by site key.
async fn events(
    state: &AppState,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<BTreeMap<String, Vec<EventRow>>, PageError> {
    let mut events: BTreeMap<String, Vec<EventRow>> = BTreeMap::new();
    for e in grid_events::overlapping(&state.pool, None, from, to + Duration::days(7)).await? {
        let r = crate::grid_events::report(&state.pool, e, now).await?;
        events
            .entry(r.event.site.clone())
            .or_default()
            .push(event_row(&r));
    }
    Ok(events)
}

/// A row of a site's grid events: its window, what it asked, and how it went.
fn event_row(r: &crate::grid_events::Report) -> EventRow {
    let e = &r.event;
    let ask = match r.target {
        Target::CapW(w) => format!("cap {} kW", grouped(Decimal::new(w, 3), 1)),
        Target::ReductionW(w) => format!("−{} kW", grouped(Decimal::new(w, 3), 1)),
    };
    EventRow {
        key: e.key.clone(),
        window: format!(
            "{} to {}",
            e.starts_at.format("%a %b %-d %H:%M"),
            e.ends_at.format("%H:%M")
        ),
        ask,
        status: r.status.as_str(),
        reduction: r.outcome.as_ref().map_or("–".into(), |o| {
            format!(
                "{}{}",
                energy(o.reduction_mj),
                if o.met { "" } else { " (not met)" }
            )
        }),
        credit: r
            .outcome
            .as_ref()
            .and_then(|o| o.credit)
            .map_or("–".into(), |c| super::format::money(c, &e.currency)),
    }
}
