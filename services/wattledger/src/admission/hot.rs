//! The admission state held in memory and the decision made on it. A decision reads this
//! state under a shared lock and takes it alone only to reserve (no database round trip);
//! the refresh loop adds other replicas' decisions as they appear in Postgres and, now and
//! then, rebuilds the state from it, carrying over the reservations this replica made that
//! the database does not show yet.

use super::writer;
use chrono::{DateTime, Duration, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, watch, Notify};
// parking_lot's lock does not poison: a bug that panics in one decision must not turn every
// later question into a 500.
use parking_lot::RwLock;
use utoipa::ToSchema;
use uuid::Uuid;
use wattledger_domain::admission::budget::{Budget, JobAmounts, Metric, Remaining};
use wattledger_domain::admission::envelope::{Reservation, Reserved};
use wattledger_domain::admission::forecast::{Forecast, Point};
use wattledger_domain::admission::{decide, Estimate, Job, Policy, Site, Verdict};
use wattledger_domain::input;
use wattledger_store::admission as store;
use wattledger_store::{Scope, StoreResult};

/// Forecasts are loaded this far ahead (and the envelope searched as far).
const HORIZON_DAYS: i64 = 7;
/// History the learned draw is taken from.
const LEARN_DAYS: i64 = 30;
/// Decisions answered but not yet stored, at most: past this (the database is away or
/// slower than the questions), admission answers 503 rather than decide what it cannot keep.
const WRITER_QUEUE: usize = 65_536;
/// Slow state reloads every this many refreshes.
const SLOW_EVERY: u32 = 15;
/// Decisions counted: those whose reservation ends after now minus this (a job overrunning
/// its estimate a little still holds its budget share until it is joined).
const RESERVATIONS_KEPT: Duration = Duration::hours(2);
/// How far each incremental reload reaches back before the last one.
const LOOK_OVERLAP: Duration = Duration::seconds(60);
/// A decision this replica made and the database still does not show after this long is
/// dropped from the carried-over reservations (its write failed for good).
const PENDING_MAX_S: u64 = 120;

pub const KINDS: [&str; 4] = ["training", "inference", "batch", "interactive"];

/// A scheduler's question.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Ask {
    /// Tenant key (a Slurm account, a Kubernetes namespace's tenant).
    pub tenant: String,
    #[serde(default)]
    pub job_name: String,
    /// The scheduler's job key where it is known before the job starts (Kubernetes:
    /// `k8s:<namespace>/<pod>`), to join the decision to the job.
    #[serde(default)]
    pub job_key: Option<String>,
    pub gpus: i64,
    /// GPU device model (e.g. `NVIDIA H100 80GB HBM3`), for its typical draw.
    #[serde(default)]
    pub gpu_model: Option<String>,
    /// The AI model key the job trains or serves, for learning its draw.
    #[serde(default)]
    pub model: Option<String>,
    /// `training`, `inference`, `batch` (default) or `interactive`.
    #[serde(default = "default_kind")]
    pub kind: String,
    /// Expected run time, seconds.
    pub duration_s: i64,
    /// Expected draw per GPU (W, node share included). Without it, learned from the tenant's
    /// history for this model and kind, else the device's typical draw.
    #[serde(default)]
    pub power_per_gpu_w: Option<i64>,
    /// Default: now.
    #[serde(default, deserialize_with = "input::de::opt_time")]
    pub earliest_start: Option<DateTime<Utc>>,
    /// Must have finished by then. Without a deadline the job is not flexible.
    #[serde(default, deserialize_with = "input::de::opt_time")]
    pub deadline: Option<DateTime<Utc>>,
    #[serde(default = "default_priority")]
    pub priority: String,
    /// Candidate site keys, in order of preference. Default: every site.
    #[serde(default)]
    pub sites: Vec<String>,
    /// Answer without reserving or storing anything ("what if").
    #[serde(default)]
    pub dry_run: bool,
    /// Who asks, as the stored decision names it: `slurm`, a scheduler's own name, or `api`
    /// (default). Lowercase letters, digits, `-` and `_`, at most 32.
    #[serde(default)]
    pub source: Option<String>,
}

fn default_kind() -> String {
    "batch".into()
}
fn default_priority() -> String {
    "normal".into()
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PowerSource {
    pub gpu_draw_w: u32,
    /// `request`, `learned`, `device_typical` or `default`, with what it was learned from.
    pub source: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Savings {
    #[schema(value_type = Option<String>)]
    pub carbon_marginal_kg: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub carbon_average_kg: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub cost: Option<Decimal>,
}

/// The answer: what to do, and the numbers behind it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Answer {
    pub decision_id: Uuid,
    pub decided_at: DateTime<Utc>,
    /// `admit`, `defer` or `reject`.
    #[schema(value_type = String)]
    pub decision: Verdict,
    /// When the job should start (for `defer`, the time to hold it until).
    pub start_at: Option<DateTime<Utc>>,
    /// `start_at` in seconds since the epoch (Slurm's `begin_time`).
    pub start_at_unix: Option<i64>,
    pub site: Option<String>,
    pub reasons: Vec<String>,
    /// Started as early as it may (kWh, cost in the site's currency, kg CO2e average and
    /// marginal).
    #[schema(value_type = Option<Object>)]
    pub estimate_now: Option<Estimate>,
    #[schema(value_type = Option<Object>)]
    pub estimate_at_start: Option<Estimate>,
    /// What starting at `start_at` saves against now.
    pub savings: Option<Savings>,
    /// Each budget's limit and what would remain after this job.
    #[schema(value_type = Vec<Object>)]
    pub budgets: Vec<Remaining>,
    pub power: PowerSource,
}

#[derive(Debug, thiserror::Error)]
enum RefreshError {
    #[error(transparent)]
    Store(#[from] wattledger_store::StoreError),
    #[error("building the admission state failed: {0}")]
    Build(#[from] tokio::task::JoinError),
}

#[derive(Debug, thiserror::Error)]
pub enum AskError {
    #[error("invalid request")]
    Fields(Vec<(&'static str, String)>),
    #[error("admission is still loading its state")]
    NotReady,
    #[error("decisions are not being stored as fast as they are asked")]
    Backlog,
}

struct SiteHot {
    id: i64,
    site: Site,
}

struct BudgetHot {
    model: Option<String>,
    starts_at: DateTime<Utc>,
    ends_at: DateTime<Utc>,
    budget: Budget,
}

struct TenantHot {
    id: i64,
    policy: Policy,
    budgets: Vec<BudgetHot>,
}

/// A decision of this replica the database may not show yet.
struct Pending {
    id: Uuid,
    made: Instant,
    site: usize,
    tenant: String,
    model: Option<String>,
    reservation: Reservation,
    amounts: JobAmounts,
    start_at: DateTime<Utc>,
}

#[derive(Default)]
struct Hot {
    ready: bool,
    /// Changes with every reservation and refresh: a decision taken on an older state is
    /// taken again before it reserves.
    generation: u64,
    sites: Vec<SiteHot>,
    site_by_key: HashMap<String, usize>,
    tenants: HashMap<String, TenantHot>,
    learned: HashMap<(i64, Option<String>, String), i64>,
    typical: HashMap<String, i64>,
    pending: Vec<Pending>,
    /// Decisions counted in this state (from the database or taken here).
    known: HashSet<Uuid>,
    /// When the database was last read for decisions.
    looked_at: DateTime<Utc>,
    site_by_id: HashMap<i64, usize>,
    tenant_by_id: HashMap<i64, String>,
    model_by_id: Arc<HashMap<i64, String>>,
}

/// What reloads every `SLOW_EVERY` refreshes.
struct Slow {
    sites: Vec<store::SiteRow>,
    draw: HashMap<i64, i64>,
    points: Vec<store::SignalPoint>,
    budgets: Vec<wattledger_store::budgets::BudgetState>,
    models: Arc<HashMap<i64, String>>,
    policies: HashMap<i64, store::PolicyRow>,
    learned: Vec<store::LearnedDraw>,
    typical: HashMap<String, i64>,
}

pub struct Admission {
    hot: RwLock<Hot>,
    tx: mpsc::Sender<writer::Decided>,
    writer: Arc<writer::WriterStats>,
    poke: Notify,
    default_gpu_w: u32,
}

/// How the decision writer is doing.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct WriterHealth {
    /// Decisions answered and waiting to be stored.
    pub queued: u64,
    /// Decisions stored since this process started.
    pub stored: u64,
    /// Decisions the database refused, kept as dead letters, since this process started.
    pub dead_lettered: u64,
    /// The database is away; the writer is retrying.
    pub retrying: bool,
}

impl Admission {
    /// Loads the state, then starts the refresh loop and the decision writer; both stop when
    /// `stop` turns true. The server serves only once admission can answer.
    pub async fn start(
        pool: PgPool,
        refresh: std::time::Duration,
        default_gpu_w: u32,
        stop: watch::Receiver<bool>,
    ) -> (Arc<Admission>, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(WRITER_QUEUE);
        let stats = Arc::new(writer::WriterStats::default());
        let admission = Arc::new(Admission {
            hot: RwLock::new(Hot::default()),
            tx,
            writer: Arc::clone(&stats),
            poke: Notify::new(),
            default_gpu_w,
        });
        let writer = tokio::spawn(writer::run(pool.clone(), rx, stats));
        let first = match load_slow(&pool, Utc::now()).await {
            Ok(s) => {
                let s = Arc::new(s);
                if let Err(e) = admission.refresh_full(&pool, &s, Utc::now()).await {
                    tracing::warn!(error = %e, "admission: could not load reservations");
                }
                Some(s)
            }
            Err(e) => {
                tracing::warn!(error = %e, "admission: could not load its state; it answers 503 until it can");
                None
            }
        };
        let a = Arc::clone(&admission);
        let task = tokio::spawn(async move {
            a.refresh_loop(pool, refresh, stop, first).await;
            drop(a);
            // The writer ends once the last sender (the state, dropped with the router) is gone.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(10), writer).await;
        });
        (admission, task)
    }

    /// The decision writer's counts.
    pub fn writer_health(&self) -> WriterHealth {
        WriterHealth {
            queued: (WRITER_QUEUE - self.tx.capacity()) as u64,
            stored: self.writer.stored.load(Ordering::Relaxed),
            dead_lettered: self.writer.dead_lettered.load(Ordering::Relaxed),
            retrying: self.writer.retrying.load(Ordering::Relaxed),
        }
    }

    /// Whether the state has loaded: until it has, questions are answered 503.
    pub fn ready(&self) -> bool {
        self.hot.read().ready
    }

    /// Reload sites, budgets, policies and forecasts now (this replica changed one).
    pub fn poke(&self) {
        self.poke.notify_one();
    }

    async fn refresh_loop(
        &self,
        pool: PgPool,
        every: std::time::Duration,
        mut stop: watch::Receiver<bool>,
        mut slow: Option<Arc<Slow>>,
    ) {
        let mut tick: u32 = 1;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = self.poke.notified() => { tick = 0; }
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
            let now = Utc::now();
            let full = slow.is_none() || tick.is_multiple_of(SLOW_EVERY);
            if full {
                match load_slow(&pool, now).await {
                    Ok(s) => slow = Some(Arc::new(s)),
                    Err(e) => {
                        tracing::warn!(error = %e, "admission: could not reload sites, forecasts and budgets")
                    }
                }
            }
            let done = match &slow {
                Some(s) if full => self.refresh_full(&pool, s, now).await,
                Some(_) => self.refresh_increment(&pool, now).await,
                None => Ok(()),
            };
            if let Err(e) = done {
                tracing::warn!(error = %e, "admission: could not reload reservations");
            }
            tick = tick.wrapping_add(1);
        }
    }

    /// Rebuilds the state from the database, carrying over this replica's decisions the
    /// database does not show yet.
    async fn refresh_full(
        &self,
        pool: &PgPool,
        slow: &Arc<Slow>,
        now: DateTime<Utc>,
    ) -> Result<(), RefreshError> {
        // Joined decisions stop counting against budgets at their estimate: the ledger
        // (reloaded with the budgets just now) has their energy.
        if let Err(e) = store::join_decisions(pool).await {
            tracing::warn!(error = %e, "admission: could not join decisions to jobs");
        }
        let tenants = store::tenants(pool, &Scope::All).await?;
        let reservations =
            store::reservations(pool, &Scope::All, now - RESERVATIONS_KEPT, None).await?;
        // Building from hundreds of thousands of reservations takes a while: off the
        // runtime, so requests keep being answered on the state as it was.
        let slow = Arc::clone(slow);
        let mut fresh =
            tokio::task::spawn_blocking(move || build(&slow, &tenants, &reservations, now)).await?;
        let mut hot = self.hot.write();
        let pending = std::mem::take(&mut hot.pending);
        for p in pending {
            if fresh.known.contains(&p.id) || p.made.elapsed().as_secs() > PENDING_MAX_S {
                continue;
            }
            // Site indices may have moved: find the site by key.
            let key = hot.sites.get(p.site).map(|s| s.site.key.clone());
            if let Some(i) = key.and_then(|k| fresh.site_by_key.get(&k).copied()) {
                fresh.apply(Pending { site: i, ..p });
            }
        }
        fresh.generation = hot.generation.wrapping_add(1);
        fresh.looked_at = now;
        *hot = fresh;
        Ok(())
    }

    /// Adds the decisions other replicas took since the last look. Decisions are stamped
    /// when taken and written a moment later, so each look reaches back `LOOK_OVERLAP`;
    /// one written later still is counted at the next full rebuild.
    async fn refresh_increment(
        &self,
        pool: &PgPool,
        now: DateTime<Utc>,
    ) -> Result<(), RefreshError> {
        let since = self.hot.read().looked_at - LOOK_OVERLAP;
        let rows =
            store::reservations(pool, &Scope::All, now - RESERVATIONS_KEPT, Some(since)).await?;
        let mut hot = self.hot.write();
        let stored: HashSet<Uuid> = rows.iter().map(|r| r.id).collect();
        // This replica's own decisions, now stored, need no carrying over.
        hot.pending.retain(|p| !stored.contains(&p.id));
        for r in &rows {
            hot.count(r, now);
        }
        hot.looked_at = now;
        Ok(())
    }

    /// Decides on one job: validated here, decided on the hot state, reserved at once, and
    /// handed to the writer.
    pub fn ask(&self, ask: &Ask, source: &str, now: DateTime<Utc>) -> Result<Answer, AskError> {
        self.ask_maybe_dry(ask, source, now, false)
    }

    /// As `ask`; a dry run (Kubernetes `dryRun`) answers the same but reserves and stores
    /// nothing.
    pub fn ask_maybe_dry(
        &self,
        ask: &Ask,
        source: &str,
        now: DateTime<Utc>,
        dry_run: bool,
    ) -> Result<Answer, AskError> {
        let dry_run = dry_run || ask.dry_run;
        let bad = validate(ask, now);
        // Decided under a shared lock, so decisions run side by side; only a decision that
        // reserves takes the state for itself, and decides again if another reservation or a
        // refresh changed the state meanwhile.
        let (mut p, seen) = {
            let hot = self.hot.read();
            (
                hot.prepare(ask, bad.clone(), now, self.default_gpu_w)?,
                hot.generation,
            )
        };
        // A place in the writer's queue first: a decision is stored, or not taken.
        let permit = if dry_run {
            None
        } else {
            Some(self.tx.try_reserve().map_err(|_| AskError::Backlog)?)
        };
        let id = Uuid::now_v7();
        let mut site_id = None;
        if !dry_run && p.reserves().is_some() {
            let mut hot = self.hot.write();
            if hot.generation != seen {
                p = hot.prepare(ask, bad, now, self.default_gpu_w)?;
            }
            if let Some((i, r)) = p.reserves() {
                let amounts =
                    p.d.at_start
                        .as_ref()
                        .map(Estimate::amounts)
                        .unwrap_or_default();
                hot.apply(Pending {
                    id,
                    made: Instant::now(),
                    site: i,
                    tenant: ask.tenant.clone(),
                    model: ask.model.clone(),
                    reservation: r,
                    amounts,
                    start_at: p.d.start_at.unwrap_or(now),
                });
                site_id = Some(hot.sites[i].id);
            }
        }
        let reservation = site_id.and(p.d.reservation);
        let Prepared {
            d,
            power,
            tenant_id,
            ..
        } = p;
        let savings = match (&d.now, &d.at_start) {
            (Some(a), Some(b)) if d.verdict == Verdict::Defer || a.site != b.site => {
                let diff = |x: Option<Decimal>, y: Option<Decimal>| Some(x? - y?);
                Some(Savings {
                    carbon_marginal_kg: diff(a.carbon_marginal_kg, b.carbon_marginal_kg),
                    carbon_average_kg: diff(a.carbon_average_kg, b.carbon_average_kg),
                    cost: (a.currency == b.currency)
                        .then(|| diff(a.cost, b.cost))
                        .flatten(),
                })
            }
            _ => None,
        };
        let answer = Answer {
            decision_id: id,
            decided_at: now,
            decision: d.verdict,
            start_at: d.start_at,
            start_at_unix: d.start_at.map(|t| t.timestamp()),
            site: d.site,
            reasons: d.reasons,
            estimate_now: d.now,
            estimate_at_start: d.at_start,
            savings,
            budgets: d.budgets,
            power,
        };
        let record = store::NewDecision {
            id,
            decided_at: now,
            tenant_id,
            source: source.into(),
            job_name: ask.job_name.clone(),
            job_key: ask.job_key.clone(),
            kind: ask.kind.clone(),
            priority: ask.priority.clone(),
            gpus: i32::try_from(ask.gpus).unwrap_or(i32::MAX),
            decision: answer.decision.as_str().into(),
            site_id,
            start_at: reservation.map(|r| r.start),
            end_at: reservation.map(|r| r.end),
            reserved_w: reservation.map(|r| r.draw_w),
            model: ask.model.clone(),
            est_kwh: answer.estimate_at_start.as_ref().map(|e| e.kwh),
            est_cost: answer.estimate_at_start.as_ref().and_then(|e| e.cost),
            est_currency: answer
                .estimate_at_start
                .as_ref()
                .map(|e| e.currency.clone()),
            est_carbon_kg: answer
                .estimate_at_start
                .as_ref()
                .and_then(|e| e.carbon_average_kg),
            // Filled by the writer: serialising is not the request's work.
            request: String::new(),
            answer: String::new(),
        };
        if let Some(permit) = permit {
            permit.send(writer::Decided {
                record,
                ask: ask.clone(),
                answer: answer.clone(),
            });
        }
        Ok(answer)
    }
}

/// A decision taken on the state, not yet applied to it.
struct Prepared {
    d: wattledger_domain::admission::Decision,
    power: PowerSource,
    tenant_id: i64,
    /// The chosen site's index in the state.
    site: Option<usize>,
}

impl Prepared {
    /// The site and reservation this decision takes, if it takes one.
    fn reserves(&self) -> Option<(usize, Reservation)> {
        match (self.site, self.d.reservation) {
            (Some(i), Some(r)) if self.d.verdict != Verdict::Reject => Some((i, r)),
            _ => None,
        }
    }
}

/// Longest text of each field of a question, in bytes.
const TEXT_LIMITS: [(&str, usize); 7] = [
    ("tenant", 256),
    ("job_name", 512),
    ("job_key", 256),
    ("gpu_model", 128),
    ("model", 256),
    ("priority", 64),
    ("sites", 256),
];

/// What can be checked on the question alone. Every text passes the one input rule: a NUL
/// would be answered but could never be stored, and the decision must be stored.
fn validate(ask: &Ask, now: DateTime<Utc>) -> Vec<(&'static str, String)> {
    let mut bad: Vec<(&'static str, String)> = Vec::new();
    let texts = [
        ("tenant", Some(&ask.tenant)),
        ("job_name", Some(&ask.job_name)),
        ("job_key", ask.job_key.as_ref()),
        ("gpu_model", ask.gpu_model.as_ref()),
        ("model", ask.model.as_ref()),
        ("priority", Some(&ask.priority)),
    ];
    for (field, value) in texts
        .into_iter()
        .chain(ask.sites.iter().map(|s| ("sites", Some(s))))
    {
        let max = TEXT_LIMITS
            .iter()
            .find(|(f, _)| *f == field)
            .map_or(256, |(_, n)| *n);
        if let Some(Err(e)) = value.map(|v| input::text(v, max)) {
            if !bad.iter().any(|(f, _)| *f == field) {
                bad.push((field, e.to_string()));
            }
        }
    }
    if ask.sites.len() > 64 {
        bad.push(("sites", "at most 64 sites".into()));
    }
    if ask.gpus < 1 || ask.gpus > 100_000 {
        bad.push(("gpus", "must be between 1 and 100000".into()));
    }
    if ask.duration_s < 1 || ask.duration_s > 90 * 86_400 {
        bad.push(("duration_s", "must be between 1 s and 90 days".into()));
    }
    if let Some(w) = ask.power_per_gpu_w {
        if !(1..=10_000).contains(&w) {
            bad.push(("power_per_gpu_w", "must be between 1 and 10000 W".into()));
        }
    }
    if !KINDS.contains(&ask.kind.as_str()) {
        bad.push(("kind", format!("must be one of {}", KINDS.join(", "))));
    }
    if ask.tenant.trim().is_empty() {
        bad.push(("tenant", "must not be empty".into()));
    }
    if let Some(src) = &ask.source {
        let ok = (1..=32).contains(&src.len())
            && src
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !ok {
            bad.push((
                "source",
                "lowercase letters, digits, - and _, at most 32".into(),
            ));
        }
    }
    let earliest = ask.earliest_start.unwrap_or(now);
    if let Some(deadline) = ask.deadline {
        if deadline <= earliest {
            bad.push(("deadline", "must be after earliest_start".into()));
        }
    }
    bad
}

impl Hot {
    /// Checks what needs the state (tenant, sites) and decides, without changing anything.
    fn prepare(
        &self,
        ask: &Ask,
        mut bad: Vec<(&'static str, String)>,
        now: DateTime<Utc>,
        default_gpu_w: u32,
    ) -> Result<Prepared, AskError> {
        if !self.ready {
            return Err(AskError::NotReady);
        }
        let tenant = self.tenants.get(&ask.tenant);
        if tenant.is_none() && !ask.tenant.trim().is_empty() {
            bad.push(("tenant", format!("unknown tenant '{}'", ask.tenant)));
        }
        let mut candidates: Vec<usize> = Vec::new();
        if ask.sites.is_empty() {
            candidates.extend(0..self.sites.len());
        } else {
            for key in &ask.sites {
                match self.site_by_key.get(key) {
                    Some(i) => candidates.push(*i),
                    None => bad.push(("sites", format!("unknown site '{key}'"))),
                }
            }
        }
        let Some(tenant) = tenant.filter(|_| bad.is_empty()) else {
            return Err(AskError::Fields(bad));
        };
        let earliest = ask.earliest_start.unwrap_or(now);
        let power = self.power(ask, tenant.id, default_gpu_w);
        let mut budgets: Vec<Budget> = tenant
            .budgets
            .iter()
            .filter(|b| b.model.is_none() || b.model == ask.model)
            .filter(|b| b.starts_at <= earliest.max(now) && earliest.max(now) < b.ends_at)
            .map(|b| b.budget.clone())
            .collect();
        budgets.sort_by_key(|b| std::cmp::Reverse(b.hard));
        let job = Job {
            gpus: u32::try_from(ask.gpus).unwrap_or(u32::MAX),
            gpu_draw_w: power.gpu_draw_w,
            duration: Duration::seconds(ask.duration_s),
            inference: ask.kind == "inference",
            earliest_start: earliest,
            deadline: ask.deadline,
            priority: ask.priority.clone(),
        };
        let sites: Vec<&Site> = candidates.iter().map(|i| &self.sites[*i].site).collect();
        let d = decide(&job, &sites, &budgets, &tenant.policy, now);
        let site = d
            .site
            .as_ref()
            .and_then(|k| self.site_by_key.get(k).copied());
        Ok(Prepared {
            d,
            power,
            tenant_id: tenant.id,
            site,
        })
    }

    /// The draw per GPU: asked, learned from the tenant's history (same model and kind, then
    /// any model of that kind), the device's typical draw, or the server default.
    fn power(&self, ask: &Ask, tenant: i64, default_w: u32) -> PowerSource {
        if let Some(w) = ask.power_per_gpu_w {
            return PowerSource {
                gpu_draw_w: w as u32,
                source: "request".into(),
            };
        }
        let learned = |model: Option<String>| {
            self.learned
                .get(&(tenant, model, ask.kind.clone()))
                .copied()
        };
        if let Some(m) = &ask.model {
            if let Some(w) = learned(Some(m.clone())) {
                return PowerSource {
                    gpu_draw_w: w.clamp(1, 10_000) as u32,
                    source: format!(
                        "learned: {}'s {} jobs of {m} over {LEARN_DAYS} days",
                        ask.tenant, ask.kind
                    ),
                };
            }
        }
        if let Some(w) = learned(None) {
            return PowerSource {
                gpu_draw_w: w.clamp(1, 10_000) as u32,
                source: format!(
                    "learned: {}'s {} jobs over {LEARN_DAYS} days",
                    ask.tenant, ask.kind
                ),
            };
        }
        if let Some(w) = ask.gpu_model.as_ref().and_then(|m| self.typical.get(m)) {
            return PowerSource {
                gpu_draw_w: (*w).clamp(1, 10_000) as u32,
                source: format!("device_typical: {}", ask.gpu_model.as_deref().unwrap_or("")),
            };
        }
        PowerSource {
            gpu_draw_w: default_w,
            source: "default: no history and no typical draw for this device".into(),
        }
    }

    /// Counts a decision against its site's envelope and its tenant's budgets.
    fn apply(&mut self, p: Pending) {
        if let Some(s) = self.sites.get_mut(p.site) {
            s.site.reserved.add(p.reservation);
        }
        if let Some(t) = self.tenants.get_mut(&p.tenant) {
            add_to_budgets(&mut t.budgets, p.model.as_deref(), p.start_at, &p.amounts);
        }
        self.known.insert(p.id);
        self.pending.push(p);
        self.generation = self.generation.wrapping_add(1);
    }

    /// Counts a stored decision, once: its reservation against its site's envelope while it
    /// lasts, its estimate against its tenant's budgets until it is joined to its job.
    fn count(&mut self, r: &store::ReservationRow, now: DateTime<Utc>) {
        if !self.known.insert(r.id) {
            return;
        }
        if r.end_at > now {
            if let Some(&i) = self.site_by_id.get(&r.site_id) {
                self.sites[i].site.reserved.add(Reservation {
                    start: r.start_at,
                    end: r.end_at,
                    draw_w: r.reserved_w,
                });
            }
        }
        if !r.joined {
            let model = r.model_id.and_then(|m| self.model_by_id.get(&m)).cloned();
            let tenant = self.tenant_by_id.get(&r.tenant_id).cloned();
            if let Some(t) = tenant.and_then(|k| self.tenants.get_mut(&k)) {
                let amounts = JobAmounts {
                    kwh: r.kwh.unwrap_or_default(),
                    cost: r.cost.zip(r.currency.clone()),
                    carbon_kg: r.carbon_kg,
                };
                add_to_budgets(&mut t.budgets, model.as_deref(), r.start_at, &amounts);
            }
        }
        self.generation = self.generation.wrapping_add(1);
    }
}

fn add_to_budgets(
    budgets: &mut [BudgetHot],
    model: Option<&str>,
    at: DateTime<Utc>,
    a: &JobAmounts,
) {
    for b in budgets {
        if b.starts_at > at || at >= b.ends_at || (b.model.is_some() && b.model.as_deref() != model)
        {
            continue;
        }
        b.budget.used += a.of(&b.budget.metric).unwrap_or_default();
    }
}

async fn load_slow(pool: &PgPool, now: DateTime<Utc>) -> StoreResult<Slow> {
    let models: Vec<(i64, String)> = sqlx::query_as("SELECT id, key FROM models")
        .fetch_all(pool)
        .await?;
    Ok(Slow {
        sites: store::sites(pool).await?,
        draw: store::site_draw(pool, now).await?,
        points: store::signal_points(
            pool,
            now - Duration::hours(1),
            now + Duration::days(HORIZON_DAYS),
        )
        .await?,
        // Every budget over its period containing now (a custom one: its own range); a
        // question counts against those its job's start falls in.
        budgets: wattledger_store::budgets::list(pool, &Scope::All, None, now).await?,
        models: Arc::new(models.into_iter().collect()),
        policies: store::policies(pool, &Scope::All)
            .await?
            .into_iter()
            .map(|p| (p.tenant_id, p))
            .collect(),
        learned: store::learned_draw(pool, &Scope::All, now - Duration::days(LEARN_DAYS)).await?,
        typical: store::typical_draw(pool).await?,
    })
}

fn build(
    slow: &Slow,
    tenants: &HashMap<String, i64>,
    reservations: &[store::ReservationRow],
    now: DateTime<Utc>,
) -> Hot {
    // One forecast per (region, signal, basis), shared by the sites on it.
    let mut series: HashMap<(&str, &str, &str), Vec<Point>> = HashMap::new();
    for p in &slow.points {
        series
            .entry((&p.region, &p.signal, &p.basis))
            .or_default()
            .push(Point {
                start: p.start_at,
                end: p.end_at,
                value: p.value,
            });
    }
    let forecasts: HashMap<(&str, &str, &str), Arc<Forecast>> = series
        .into_iter()
        .map(|(k, v)| (k, Arc::new(Forecast::new(v))))
        .collect();
    let forecast = |r: &str, s: &str, b: &str| -> Arc<Forecast> {
        forecasts.get(&(r, s, b)).cloned().unwrap_or_default()
    };
    let mut hot = Hot {
        ready: true,
        ..Hot::default()
    };
    for s in &slow.sites {
        hot.site_by_key.insert(s.key.clone(), hot.sites.len());
        hot.site_by_id.insert(s.id, hot.sites.len());
        hot.sites.push(SiteHot {
            id: s.id,
            site: Site {
                inference_factor: s.inference_power_factor,
                key: s.key.clone(),
                envelope_w: s.envelope_w,
                draw_w: slow.draw.get(&s.id).copied(),
                pue: s.pue,
                currency: s.currency.clone(),
                reserved: Reserved::default(),
                carbon_average: forecast(&s.grid_region, "carbon", "average"),
                carbon_marginal: forecast(&s.grid_region, "carbon", "marginal"),
                price: forecast(&s.price_region, "price", &s.currency),
            },
        });
    }
    for (key, id) in tenants {
        let policy = slow
            .policies
            .get(id)
            .map(|p| Policy {
                threshold_pct: p.threshold_pct,
                carbon_weight: p.carbon_weight,
                marginal: p.basis == "marginal",
                bypass: p.bypass_priorities.clone(),
                bypass_budget: p.budget_bypass_priorities.clone(),
                horizon: Duration::days(HORIZON_DAYS),
            })
            .unwrap_or_default();
        hot.tenants.insert(
            key.clone(),
            TenantHot {
                id: *id,
                policy,
                budgets: Vec::new(),
            },
        );
    }
    for b in &slow.budgets {
        let Some(t) = hot.tenants.get_mut(&b.tenant) else {
            continue;
        };
        let mut push = |metric: Metric, limit: Option<Decimal>, used: Decimal| {
            if let Some(limit) = limit {
                t.budgets.push(BudgetHot {
                    model: b.model.clone(),
                    starts_at: b.period_start,
                    ends_at: b.period_end,
                    budget: Budget {
                        name: b.key.clone(),
                        metric,
                        limit,
                        used,
                        hard: b.hard,
                    },
                });
            }
        };
        push(Metric::EnergyKwh, b.limit_kwh, b.used_kwh);
        if let Some(c) = &b.currency {
            push(
                Metric::Cost {
                    currency: c.clone(),
                },
                b.limit_cost,
                b.used_cost,
            );
        }
        push(Metric::CarbonKg, b.limit_carbon_kg, b.used_carbon_kg);
    }
    hot.tenant_by_id = tenants.iter().map(|(k, id)| (*id, k.clone())).collect();
    hot.model_by_id = Arc::clone(&slow.models);
    for r in reservations {
        hot.count(r, now);
    }
    for s in &mut hot.sites {
        s.site.reserved.prune(now);
    }
    for l in &slow.learned {
        hot.learned
            .insert((l.tenant_id, l.model.clone(), l.kind.clone()), l.gpu_draw_w);
    }
    hot.typical = slow.typical.clone();
    hot
}
