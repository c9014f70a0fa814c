//! Attribution's statements: claim dirty hours, load their inputs, write their results.
//!
//! A worker claims up to a day of one site's dirty hours with a lease (so replicas do not
//! collide) and loads samples, allocations, jobs and tokens for that window in a handful of
//! queries; the use case (`wattledger::app::attribution`) runs the pure core per hour and
//! writes the results with the functions here, in one transaction it holds.

use crate::{pg_copy, StoreResult};
use chrono::{DateTime, Duration, NaiveDate, TimeZone, Utc};
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;
use sqlx::{PgConnection, PgPool};
use std::collections::{BTreeMap, HashMap, HashSet};
use wattledger_domain::attribution::{
    Allocation, Attributed, DeviceId, Gpu, IdlePolicy, Job, Node, SiteHour, SitePolicy, Tokens,
};
use wattledger_domain::badput::{self, EndState};
use wattledger_domain::costing::{self, HourAmounts};
use wattledger_domain::energy::{meter_steps, MeterSteps, Sample, StepGrid};
use wattledger_domain::headroom::{hour_profiles, HourProfile, PowerClass};
use wattledger_domain::job_kind::JobKind;
use wattledger_domain::load_shape;
use wattledger_domain::meter_kind::MeterKind;
use wattledger_domain::peaks;
use wattledger_domain::phase::Phase;
use wattledger_domain::step_pack::PackedStep;
use wattledger_domain::tokens::{tokens_in_hour, HOUR_MS};
use wattledger_domain::units::{share_ppm, PPM};

/// The step of attribution (DESIGN.md: 60 s by default).
pub const STEP_MS: i64 = 60_000;

#[derive(Debug, Clone)]
pub struct Claim {
    pub site_id: i64,
    pub hours: Vec<(DateTime<Utc>, DateTime<Utc>)>,
}

/// Claims up to `max_hours` dirty hours of one site within one day, oldest first, for ten
/// minutes: a worker that dies holding them lets them go to another after that.
///
/// Two statements: the oldest claimable hour is found across all sites without a lock, then
/// that site's hours are locked and claimed by a statement that names the site, so that on a
/// distributed PostgreSQL the lock is taken on one shard (Citus refuses row locks across
/// shards). Another worker may claim the same hours in between: then nothing is claimed this
/// time, as when two workers raced for them in one statement.
pub async fn claim(pool: &PgPool, max_hours: i64) -> StoreResult<Option<Claim>> {
    let Some(first) = sqlx::query!(
        r#"SELECT site_id, hour FROM dirty_hours
         WHERE claimed_until IS NULL OR claimed_until < now()
         ORDER BY hour, site_id LIMIT 1"#
    )
    .fetch_optional(pool)
    .await?
    else {
        return Ok(None);
    };
    let rows = sqlx::query!(
        "WITH pick AS (
             SELECT d.site_id, d.hour FROM dirty_hours d
             WHERE d.site_id = $2 AND d.hour >= $3 AND d.hour < $3 + interval '1 day'
               AND (d.claimed_until IS NULL OR d.claimed_until < now())
             ORDER BY d.hour LIMIT $1
             FOR UPDATE OF d SKIP LOCKED
         )
         UPDATE dirty_hours d SET claimed_until = now() + interval '10 minutes'
         FROM pick WHERE d.site_id = $2 AND d.hour = pick.hour
         RETURNING d.site_id, d.hour, d.marked_at",
        max_hours,
        first.site_id,
        first.hour,
    )
    .fetch_all(pool)
    .await?;
    let Some(site_id) = rows.first().map(|r| r.site_id) else {
        return Ok(None);
    };
    let mut hours: Vec<_> = rows.into_iter().map(|r| (r.hour, r.marked_at)).collect();
    hours.sort();
    Ok(Some(Claim { site_id, hours }))
}

/// Whether any dirty hour is unclaimed (or its lease has lapsed). The subquery selects a
/// column: a distributed PostgreSQL plans it across shards as an intermediate result, and
/// one of no columns fails there ("a column definition list is required").
pub async fn claimable(pool: &PgPool) -> StoreResult<bool> {
    Ok(sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM dirty_hours
                          WHERE claimed_until IS NULL OR claimed_until < now()) AS "any!""#
    )
    .fetch_one(pool)
    .await?)
}

/// Everything the window needs, loaded once.
pub struct Window {
    policy: SitePolicy,
    gap_limit_ms: i64,
    facility: Vec<i64>,
    /// Node meter id → its GPU meter ids (ordered by id).
    nodes: Vec<(i64, Vec<i64>)>,
    samples: HashMap<i64, Vec<Sample>>,
    /// Each hour's coincident IT peak (the `it` profile's highest minute, over the IT
    /// meters' step peaks, else their power readings, else their counters' interval means)
    /// and site peak.
    peaks: Vec<HourPeaks>,
    /// Each hour's power profile per class (migration 0024).
    power: Vec<(DateTime<Utc>, PowerClass, HourProfile)>,
    /// GPU meter id → allocations (job index into `jobs`).
    allocations: HashMap<i64, Vec<Allocation>>,
    jobs: Vec<Job>,
    job_ids: Vec<i64>,
    tokens: Vec<TokenSpan>,
    /// GPU meter id → (embodied carbon in ng per ms of its life, GPU-time price in 1e-12
    /// currency per ms), for known device models only (named by key or alias).
    embodied: HashMap<i64, (i64, i64)>,
    devices: Devices,
}

/// The device models a site's GPU meters report, for efficiency by GPU generation.
#[derive(Default)]
struct Devices {
    /// A [`DeviceId`] is an index into this.
    models: Vec<String>,
    of_meter: HashMap<i64, DeviceId>,
}

/// A token record of a job in the window, job as an index into `Window::jobs`.
struct TokenSpan {
    job: usize,
    tenant: i64,
    start_ms: i64,
    end_ms: i64,
    prompt: i64,
    generated: i64,
}

#[derive(Clone, Copy)]
struct RawSample {
    meter_id: i64,
    /// µs since the Unix epoch.
    ts_us: i64,
    counter_mj: Option<i64>,
    power_mw: Option<i64>,
    peak_mw: Option<i64>,
    raw: bool,
    counter_estimated: bool,
}

struct AllocationRow {
    meter_id: i64,
    job_id: i64,
    job_key: String,
    share: Decimal,
    start_at: DateTime<Utc>,
    end_at: Option<DateTime<Utc>>,
}

struct JobWeightsRow {
    id: i64,
    tenant_id: i64,
    model_id: Option<i64>,
    kind: JobKind,
    prefill_weight: Option<Decimal>,
    decode_weight: Option<Decimal>,
    start_at: DateTime<Utc>,
    end_state: Option<EndState>,
    last_checkpoint_at: Option<DateTime<Utc>>,
    phase: Option<Phase>,
}

struct TokenRecordRow {
    job_id: i64,
    tenant_id: Option<i64>,
    start_at: DateTime<Utc>,
    end_at: DateTime<Utc>,
    prompt_tokens: i64,
    generated_tokens: i64,
}

/// The inputs of `[from, to)` at one site: its policy, meter tree, samples (with the two
/// readings either side), allocations, jobs and tokens, and the hours' power profiles.
pub async fn load(
    pool: &PgPool,
    site_id: i64,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> StoreResult<Window> {
    let (policy, gap_s) = site_policy(pool, site_id).await?;
    let tree = meter_tree(pool, site_id).await?;
    let embodied = embodied(pool, site_id).await?;
    crate::partitions::analyze_unmeasured(pool, from, to).await?;
    // The step records are most of the window's read and wait on the database's sending
    // them; the jobs and their token records are read meanwhile, on another connection.
    let jobs_and_tokens = async {
        let jobs = jobs(
            pool,
            site_id,
            from,
            to,
            policy.platform_tenant,
            &tree.mig_parent,
        )
        .await?;
        let tokens = tokens(pool, site_id, &jobs, from, to).await?;
        Ok((jobs, tokens))
    };
    let (rows, (jobs, tokens)) = futures_util::future::try_join(
        samples(pool, site_id, &tree.metered, from, to),
        jobs_and_tokens,
    )
    .await?;
    // The power readings of the facility, IT and GPU meters, from the rows just read (IT: the
    // site's node meters, a GPU always has one, or its GPUs where it has none). Every reading
    // counts, before the dedup below; a meter with a counter alone counts its intervals' mean
    // power.
    let sets = tree.power_meters();
    // Rows come a meter's run at a time: the sets are asked once per meter, not per row.
    let mut last: Option<(i64, bool)> = None;
    let mut counts = |m: i64| match last {
        Some((meter, counts)) if meter == m => counts,
        _ => {
            let counts =
                sets.facility.contains(&m) || sets.it.contains(&m) || sets.gpus.contains(&m);
            last = Some((m, counts));
            counts
        }
    };
    let readings = peaks::power_readings(
        rows.iter()
            .filter(|r| counts(r.meter_id))
            .map(|r| (r.meter_id, r.ts_us, r.counter_mj, r.power_mw, r.peak_mw)),
        i64::from(gap_s) * 1_000_000,
    );
    let samples = by_meter(rows);
    let (from_us, to_us) = (from.timestamp_micros(), to.timestamp_micros());
    let power = power_profiles(
        &readings,
        (from_us, to_us),
        &sets,
        &jobs.allocations,
        &jobs.kinds,
    );
    let peaks = hour_peaks(&power, policy.static_pue);
    Ok(Window {
        policy,
        gap_limit_ms: i64::from(gap_s) * 1000,
        facility: tree.facility,
        nodes: tree.nodes,
        samples,
        peaks,
        power,
        allocations: jobs.allocations,
        jobs: jobs.jobs,
        job_ids: jobs.ids,
        tokens,
        embodied,
        devices: tree.devices,
    })
}

/// The site's attribution policy and its gap limit, s.
async fn site_policy(pool: &PgPool, site_id: i64) -> StoreResult<(SitePolicy, i32)> {
    let site = sqlx::query!(
        r#"SELECT static_pue, idle_policy AS "idle_policy: IdlePolicy", platform_tenant_id,
                node_static_overhead_w, gap_limit_s
         FROM sites WHERE id = $1"#,
        site_id,
    )
    .fetch_one(pool)
    .await?;
    let node_w = site.node_static_overhead_w;
    let policy = SitePolicy {
        static_pue: site.static_pue,
        idle_policy: site.idle_policy,
        platform_tenant: site.platform_tenant_id,
        node_static_overhead_mw: (node_w * Decimal::from(1000)).round().to_i64().unwrap_or(0),
    };
    Ok((policy, site.gap_limit_s))
}

/// A site's meters as attribution walks them.
struct MeterTree {
    facility: Vec<i64>,
    /// Node meter id → its GPU meter ids (ordered by id).
    nodes: Vec<(i64, Vec<i64>)>,
    /// MIG instance → its GPU: allocations of a slice count on its GPU.
    mig_parent: HashMap<i64, i64>,
    /// The meters that report samples (every kind but MIG instances).
    metered: Vec<i64>,
    gpus: Vec<i64>,
    devices: Devices,
}

impl MeterTree {
    /// Which meters the fixed classes of power profiles sum: IT is the node meters, or the
    /// GPUs where the site has none.
    fn power_meters(&self) -> PowerMeters {
        let node_ids = || self.nodes.iter().map(|n| n.0);
        PowerMeters {
            facility: self.facility.iter().copied().collect(),
            it: if self.nodes.is_empty() {
                self.gpus.iter().copied().collect()
            } else {
                node_ids().collect()
            },
            gpus: self.gpus.iter().copied().collect(),
        }
    }
}

async fn meter_tree(pool: &PgPool, site_id: i64) -> StoreResult<MeterTree> {
    let meters = sqlx::query!(
        // A model reported under an alias (an exporter's part number) is its device model's.
        r#"SELECT m.id, m.kind AS "kind: MeterKind", m.parent_id,
                  coalesce(n.device_model, m.device_model) AS device_model
           FROM meters m LEFT JOIN device_model_names n ON n.name = m.device_model
           WHERE m.site_id = $1 ORDER BY m.id"#,
        site_id,
    )
    .fetch_all(pool)
    .await?;
    let of_kind = |kind: MeterKind| -> Vec<i64> {
        meters
            .iter()
            .filter(|m| m.kind == kind)
            .map(|m| m.id)
            .collect()
    };
    let mut nodes: Vec<(i64, Vec<i64>)> = of_kind(MeterKind::Node)
        .into_iter()
        .map(|id| (id, Vec::new()))
        .collect();
    let node_index: HashMap<i64, usize> = nodes.iter().enumerate().map(|(i, n)| (n.0, i)).collect();
    let mut mig_parent: HashMap<i64, i64> = HashMap::new();
    let mut devices = Devices::default();
    for m in &meters {
        if let (MeterKind::Gpu, Some(model)) = (m.kind, &m.device_model) {
            let id = match devices.models.iter().position(|d| d == model) {
                Some(i) => i,
                None => {
                    devices.models.push(model.clone());
                    devices.models.len() - 1
                }
            };
            devices.of_meter.insert(m.id, id as DeviceId);
        }
        match (m.kind, m.parent_id) {
            (MeterKind::Gpu, Some(p)) => {
                if let Some(&i) = node_index.get(&p) {
                    nodes[i].1.push(m.id);
                }
            }
            (MeterKind::Mig, Some(p)) => {
                mig_parent.insert(m.id, p);
            }
            _ => {}
        }
    }
    Ok(MeterTree {
        facility: of_kind(MeterKind::Facility),
        nodes,
        mig_parent,
        metered: meters
            .iter()
            .filter(|m| m.kind != MeterKind::Mig)
            .map(|m| m.id)
            .collect(),
        gpus: of_kind(MeterKind::Gpu),
        devices,
    })
}

/// Per GPU: embodied kg over the lifetime as ng per ms of life (kg × 1e12 ng / (h × 3.6e6
/// ms)), and the GPU-hour rate as 1e-12 currency per ms where it is in the site's currency;
/// known device models only.
async fn embodied(pool: &PgPool, site_id: i64) -> StoreResult<HashMap<i64, (i64, i64)>> {
    Ok(sqlx::query!(
        "SELECT m.id, d.embodied_kg, d.lifetime_hours,
                CASE WHEN d.rate_currency = s.currency THEN d.gpu_hour_rate END AS rate
         FROM meters m JOIN device_model_names n ON n.name = m.device_model
         JOIN device_models d ON d.key = n.device_model
         JOIN sites s ON s.id = m.site_id
         WHERE m.site_id = $1 AND m.kind = 'gpu'",
        site_id,
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|r| {
        let (id, kg, hours, rate) = (r.id, r.embodied_kg, r.lifetime_hours, r.rate);
        let per_ms = |amount: Decimal, over_ms: Decimal| {
            (amount * Decimal::from(1_000_000_000_000i64) / over_ms)
                .round()
                .to_i64()
                .unwrap_or(0)
        };
        let ng = per_ms(kg, Decimal::from(hours) * Decimal::from(HOUR_MS));
        let pico = rate.map_or(0, |r| per_ms(r, Decimal::from(HOUR_MS)));
        (id, (ng, pico))
    })
    .collect())
}

/// The metered meters' samples in `[from, to)` and the two on either side of it, in (meter,
/// time) order; where a meter has a step record and a raw reading at the same instant (it
/// switched from one to the other), the step record first (raw = false sorts first). Step
/// records and raw readings are read apart: `samples` is partitioned by (raw, ts), and only a
/// condition on `raw` lets the time range pick the partitions.
async fn samples(
    pool: &PgPool,
    site_id: i64,
    metered: &[i64],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> StoreResult<Vec<RawSample>> {
    let mut conn = pool.acquire().await?;
    let mut others: Vec<RawSample> = sqlx::query!(
        r#"SELECT meter_id AS "meter_id!", ts AS "ts!", counter_mj, power_mw, peak_mw,
                    raw AS "raw!", counter_estimated AS "counter_estimated!" FROM samples
             WHERE site_id = $4 AND meter_id = ANY($1) AND raw AND ts >= $2 AND ts < $3
             UNION ALL
             SELECT m.id, p.ts, p.counter_mj, p.power_mw, p.peak_mw, p.raw, p.counter_estimated FROM unnest($1::bigint[]) AS m(id)
             CROSS JOIN LATERAL (SELECT ts, counter_mj, power_mw, peak_mw, raw, counter_estimated FROM samples s
                                 WHERE s.site_id = $4 AND s.meter_id = m.id AND s.ts < $2
                                 ORDER BY ts DESC LIMIT 2) p
             UNION ALL
             SELECT m.id, n.ts, n.counter_mj, n.power_mw, n.peak_mw, n.raw, n.counter_estimated FROM unnest($1::bigint[]) AS m(id)
             CROSS JOIN LATERAL (SELECT ts, counter_mj, power_mw, peak_mw, raw, counter_estimated FROM samples s
                                 WHERE s.site_id = $4 AND s.meter_id = m.id AND s.ts >= $3
                                 ORDER BY ts LIMIT 2) n"#,
        metered,
        from,
        to,
        site_id,
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|r| RawSample {
        meter_id: r.meter_id,
        ts_us: r.ts.timestamp_micros(),
        counter_mj: r.counter_mj,
        power_mw: r.power_mw,
        peak_mw: r.peak_mw,
        raw: r.raw,
        counter_estimated: r.counter_estimated,
    })
    .collect();
    // Each meter's run is gathered in time order: the two readings before the window, its
    // step records (already in time order), then its raw readings and the two after; a run
    // is sorted again only where a raw reading falls inside the window.
    let from_us = from.timestamp_micros();
    others.sort_unstable_by_key(|r| (r.meter_id, r.ts_us, r.raw));
    let (before, after): (Vec<RawSample>, Vec<RawSample>) =
        others.into_iter().partition(|r| r.ts_us < from_us);
    let minutes = usize::try_from((to - from).num_minutes()).unwrap_or(0);
    let mut runs = MeterRuns::new(metered, minutes.min(24 * 60) + 4);
    before.into_iter().for_each(|r| runs.push(r));
    step_records(&mut conn, site_id, metered, from, to, &mut runs).await?;
    after.into_iter().for_each(|r| runs.push(r));
    drop(conn);
    let rows = runs.into_rows();
    match crate::step_packs::packed_days(pool, site_id).await? {
        // The packed days around the window merged in, in the same order.
        Some(days) => with_packed(pool, site_id, metered, (from, to), days, rows).await,
        None => Ok(rows),
    }
}

/// A window's rows gathered per metered meter as they are read, so they come out in (meter,
/// time, raw) order without a sort of millions of rows: the step records come a minute of
/// every meter at a time, each meter's already in time order. `metered` is in id order
/// (as `meter_tree` reads it); a row of another meter cannot come from the window's reads,
/// and if one did, every row would be sorted with it rather than lost.
struct MeterRuns<'a> {
    metered: &'a [i64],
    runs: Vec<Vec<RawSample>>,
    /// The run the last row went to: the next row is mostly its meter's or the next one's.
    last: usize,
    stray: Vec<RawSample>,
}

impl<'a> MeterRuns<'a> {
    fn new(metered: &'a [i64], per_meter: usize) -> Self {
        debug_assert!(metered.is_sorted());
        MeterRuns {
            metered,
            runs: (0..metered.len())
                .map(|_| Vec::with_capacity(per_meter))
                .collect(),
            last: 0,
            stray: Vec::new(),
        }
    }

    fn push(&mut self, row: RawSample) {
        let is = |i: usize| self.metered.get(i) == Some(&row.meter_id);
        let run = if is(self.last) {
            self.last
        } else if is(self.last + 1) {
            self.last + 1
        } else if let Ok(i) = self.metered.binary_search(&row.meter_id) {
            i
        } else {
            self.stray.push(row);
            return;
        };
        self.last = run;
        self.runs[run].push(row);
    }

    /// Every row, in (meter, time, raw) order, stable; a run out of time order (a raw
    /// reading inside the window, data that came late) is sorted alone.
    fn into_rows(self) -> Vec<RawSample> {
        let key = |r: &RawSample| (r.meter_id, r.ts_us, r.raw);
        let len = self.runs.iter().map(Vec::len).sum::<usize>() + self.stray.len();
        let mut out = Vec::with_capacity(len);
        for mut run in self.runs {
            if !run.is_sorted_by_key(key) {
                run.sort_by_key(key);
            }
            out.extend_from_slice(&run);
        }
        if !self.stray.is_empty() {
            out.extend(self.stray);
            out.sort_by_key(key);
        }
        out
    }
}

/// The step records of the metered meters in `[from, to)`, as a binary COPY: a day of a
/// large site is millions of rows, and decoding each as a query's result row took longer than
/// the database took to send it (BENCHMARKS.md, the 10,240-GPU fleet-day profiled). Each goes
/// to its meter's run as it comes.
///
/// A COPY takes no parameters: the values are written into its text, each from a typed value
/// here (integers and instants printed by this function), never from a caller's string.
///
/// An estimated counter comes as `-1 - counter` (counters are never negative, and the flag
/// means nothing without one): PostgreSQL's cost of a COPY is mostly per field sent, and a
/// sixth field for a flag that is almost always false cost a tenth of it.
async fn step_records(
    conn: &mut PgConnection,
    site_id: i64,
    metered: &[i64],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    rows: &mut MeterRuns<'_>,
) -> StoreResult<()> {
    use futures_util::StreamExt;
    use std::fmt::Write;
    let mut ids = String::with_capacity(metered.len() * 8);
    for (i, id) in metered.iter().enumerate() {
        let sep = if i == 0 { "" } else { "," };
        write!(ids, "{sep}{id}").expect("writing to a String");
    }
    let at = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let statement = format!(
        "COPY (SELECT meter_id, ts,
                      CASE WHEN counter_estimated THEN -1 - counter_mj ELSE counter_mj END,
                      power_mw, peak_mw FROM samples
               WHERE site_id = {site_id} AND meter_id = ANY('{{{ids}}}'::bigint[]) AND NOT raw
                 AND ts >= '{from}'::timestamptz AND ts < '{to}'::timestamptz)
         TO STDOUT (FORMAT binary)",
        from = at(from),
        to = at(to),
    );
    let mut reader = crate::pg_copy::Reader::new(5);
    let mut chunks = conn.copy_out_raw(&statement).await?;
    while let Some(chunk) = chunks.next().await {
        reader.feed(&chunk?, |f| {
            let (meter_id, ts_us) = (
                f.required(pg_copy::Fields::i64)?,
                f.required(pg_copy::Fields::timestamp_us)?,
            );
            let counter = f.i64()?;
            rows.push(RawSample {
                meter_id,
                ts_us,
                counter_mj: counter.map(|c| if c < 0 { -1 - c } else { c }),
                power_mw: f.i64()?,
                peak_mw: f.i64()?,
                raw: false,
                counter_estimated: counter.is_some_and(|c| c < 0),
            });
            Ok::<_, crate::StoreError>(())
        })?;
    }
    reader.finish()?;
    Ok(())
}

/// The rows read from `samples` with the packed steps of the days around `[from, to)`
/// (`crate::step_packs`), then, for a meter with fewer than two readings on a side, its
/// packs further out; an instant in both taken from its pack; in (meter, ts, raw) order and
/// trimmed to what the window reads: its own readings and each meter's two on either side, as
/// if all were in `samples`.
async fn with_packed(
    pool: &PgPool,
    site_id: i64,
    metered: &[i64],
    (from, to): (DateTime<Utc>, DateTime<Utc>),
    (first_packed, last_packed): (NaiveDate, NaiveDate),
    rows: Vec<RawSample>,
) -> StoreResult<Vec<RawSample>> {
    use crate::step_packs::{read, Days};
    let lo = from.date_naive() - chrono::Days::new(1);
    let hi = (to - Duration::microseconds(1)).date_naive() + chrono::Days::new(1);
    let mut packed = Vec::new();
    if first_packed <= hi && last_packed >= lo {
        let days = Days::Between(lo.max(first_packed), hi.min(last_packed));
        packed = read(pool, site_id, metered, days).await?;
    }
    let mut all = merged(metered, packed, rows);
    let (short_before, short_after) = short_sides(&all, metered, from, to);
    let mut further = Vec::new();
    if first_packed < lo && !short_before.is_empty() {
        further.extend(read(pool, site_id, &short_before, Days::LatestBefore(lo)).await?);
    }
    if last_packed > hi && !short_after.is_empty() {
        further.extend(read(pool, site_id, &short_after, Days::EarliestAfter(hi)).await?);
    }
    if !further.is_empty() {
        all = merged(metered, further, all);
    }
    Ok(trim(all, from, to))
}

/// Packed steps and rows in (meter, ts, raw) order, one of each: the packed ones go first and
/// the order is stable, so where an instant is in both the pack's is the one kept. `rows` come
/// in that order already, one of each (`samples`' key), and are returned as they are when no
/// pack is read.
fn merged(metered: &[i64], packed: Vec<(i64, PackedStep)>, rows: Vec<RawSample>) -> Vec<RawSample> {
    if packed.is_empty() {
        return rows;
    }
    let per_meter = (packed.len() + rows.len()) / metered.len().max(1) + 4;
    let mut runs = MeterRuns::new(metered, per_meter);
    for (meter_id, s) in packed {
        runs.push(RawSample {
            meter_id,
            ts_us: s.ts_us,
            counter_mj: s.counter_mj,
            power_mw: s.power_mw,
            peak_mw: s.peak_mw,
            raw: false,
            counter_estimated: s.counter_estimated,
        });
    }
    rows.into_iter().for_each(|r| runs.push(r));
    let mut all = runs.into_rows();
    all.dedup_by_key(|r| (r.meter_id, r.ts_us, r.raw));
    all
}

/// The metered meters with fewer than two readings before `from`, and those with fewer than
/// two at or after `to`, each in id order; `rows` in meter order.
fn short_sides(
    rows: &[RawSample],
    metered: &[i64],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> (Vec<i64>, Vec<i64>) {
    let (from_us, to_us) = (from.timestamp_micros(), to.timestamp_micros());
    let sides: HashMap<i64, (usize, usize)> = rows
        .chunk_by(|a, b| a.meter_id == b.meter_id)
        .map(|run| {
            let before = run.partition_point(|r| r.ts_us < from_us);
            let after = run.len() - run.partition_point(|r| r.ts_us < to_us);
            (run[0].meter_id, (before, after))
        })
        .collect();
    let short = |side: fn(&(usize, usize)) -> usize| -> Vec<i64> {
        let mut m: Vec<i64> = metered
            .iter()
            .copied()
            .filter(|m| side(sides.get(m).unwrap_or(&(0, 0))) < 2)
            .collect();
        m.sort_unstable();
        m
    };
    (short(|c| c.0), short(|c| c.1))
}

/// Rows in (meter, ts, raw) order, each meter's kept where they are in `[from, to)`, and its
/// last two before and first two after.
fn trim(rows: Vec<RawSample>, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<RawSample> {
    let mut out = Vec::with_capacity(rows.len());
    let mut start = 0;
    while start < rows.len() {
        let meter = rows[start].meter_id;
        let end = start + rows[start..].partition_point(|r| r.meter_id == meter);
        let run = &rows[start..end];
        let first_in = run.partition_point(|r| r.ts_us < from.timestamp_micros());
        let first_after = run.partition_point(|r| r.ts_us < to.timestamp_micros());
        let keep = first_in.saturating_sub(2)..(first_after + 2).min(run.len());
        out.extend_from_slice(&run[keep]);
        start = end;
    }
    out
}

/// Each meter's samples, one per instant (the step record where a raw reading shares it).
fn by_meter(mut rows: Vec<RawSample>) -> HashMap<i64, Vec<Sample>> {
    rows.dedup_by_key(|r| (r.meter_id, r.ts_us));
    let mut samples: HashMap<i64, Vec<Sample>> = HashMap::new();
    // A meter's rows are one run (meter order): one map entry per run.
    for run in rows.chunk_by(|a, b| a.meter_id == b.meter_id) {
        samples
            .entry(run[0].meter_id)
            .or_default()
            .extend(run.iter().map(|r| Sample {
                ts_ms: r.ts_us.div_euclid(1000),
                counter_mj: r.counter_mj,
                power_mw: r.power_mw,
                counter_estimated: r.counter_estimated,
            }));
    }
    samples
}

/// The jobs holding the site's GPUs in the window, in job-key order: their ids, the core's
/// jobs (tenant, model, token weights), their kinds, and each GPU's allocations (a MIG
/// slice's on its GPU).
struct WindowJobs {
    ids: Vec<i64>,
    jobs: Vec<Job>,
    kinds: Vec<Option<JobKind>>,
    allocations: HashMap<i64, Vec<Allocation>>,
    index: HashMap<i64, usize>,
}

async fn jobs(
    pool: &PgPool,
    site_id: i64,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    platform: i64,
    mig_parent: &HashMap<i64, i64>,
) -> StoreResult<WindowJobs> {
    let allocs = sqlx::query_as!(
        AllocationRow,
        "SELECT a.meter_id, a.job_id, j.key AS job_key, a.share, a.start_at, a.end_at
         FROM allocations a JOIN meters m ON m.id = a.meter_id
         JOIN jobs j ON j.site_id = a.site_id AND j.id = a.job_id
         WHERE m.site_id = $1 AND a.site_id = $1 AND a.start_at < $3 AND (a.end_at IS NULL OR a.end_at > $2)",
        site_id,
        from,
        to,
    )
    .fetch_all(pool)
    .await?;
    let mut job_keys: Vec<(String, i64)> = allocs
        .iter()
        .map(|a| (a.job_key.clone(), a.job_id))
        .collect();
    job_keys.sort();
    job_keys.dedup();
    let job_ids: Vec<i64> = job_keys.iter().map(|k| k.1).collect();
    let job_index: HashMap<i64, usize> =
        job_ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    let job_rows = sqlx::query_as!(
        JobWeightsRow,
        r#"SELECT j.id, j.tenant_id, j.model_id, j.kind AS "kind: JobKind", m.prefill_weight AS "prefill_weight?",
                  m.decode_weight AS "decode_weight?", j.start_at,
                  j.end_state AS "end_state: EndState", j.last_checkpoint_at,
                  j.phase AS "phase: Phase"
           FROM jobs j LEFT JOIN models m ON m.id = j.model_id WHERE j.id = ANY($1)"#,
        &job_ids,
    )
    .fetch_all(pool)
    .await?;
    let ppm = |d: Option<Decimal>, default: u64| {
        d.map(|w| (w * Decimal::from(PPM)).round().to_u64().unwrap_or(0))
            .unwrap_or(default)
    };
    let mut jobs = vec![
        Job {
            tenant: platform,
            model: None,
            prefill_weight_ppm: u64::from(PPM),
            decode_weight_ppm: 4 * u64::from(PPM),
            lost_from_ms: i64::MAX,
            phase: Phase::Both,
        };
        job_ids.len()
    ];
    let mut kinds: Vec<Option<JobKind>> = vec![None; job_ids.len()];
    for r in job_rows {
        kinds[job_index[&r.id]] = Some(r.kind);
        jobs[job_index[&r.id]] = Job {
            tenant: r.tenant_id,
            model: r.model_id,
            prefill_weight_ppm: ppm(r.prefill_weight, u64::from(PPM)),
            decode_weight_ppm: ppm(r.decode_weight, 4 * u64::from(PPM)),
            lost_from_ms: badput::lost_from(r.kind, r.end_state, r.last_checkpoint_at, r.start_at)
                .map_or(i64::MAX, |t| t.timestamp_millis()),
            phase: r.phase.unwrap_or(Phase::Both),
        };
    }
    let mut allocations: HashMap<i64, Vec<Allocation>> = HashMap::new();
    for a in &allocs {
        let gpu = mig_parent.get(&a.meter_id).copied().unwrap_or(a.meter_id);
        allocations.entry(gpu).or_default().push(Allocation {
            job: job_index[&a.job_id],
            start_ms: a.start_at.timestamp_millis(),
            end_ms: a.end_at.map_or(i64::MAX, |e| e.timestamp_millis()),
            share_ppm: share_ppm(a.share).unwrap_or(PPM),
        });
    }
    Ok(WindowJobs {
        ids: job_ids,
        jobs,
        kinds,
        allocations,
        index: job_index,
    })
}

/// The window's token records, each prorated later to the hours it spans.
async fn tokens(
    pool: &PgPool,
    site_id: i64,
    jobs: &WindowJobs,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> StoreResult<Vec<TokenSpan>> {
    let token_rows = sqlx::query_as!(
        TokenRecordRow,
        "SELECT job_id, tenant_id, start_at, end_at, prompt_tokens, generated_tokens
         FROM token_records
         WHERE site_id = $4 AND job_id = ANY($1) AND start_at < $3 AND end_at >= $2",
        &jobs.ids,
        from,
        to,
        site_id,
    )
    .fetch_all(pool)
    .await?;
    Ok(token_rows
        .into_iter()
        .map(|r| {
            let job = jobs.index[&r.job_id];
            TokenSpan {
                job,
                tenant: r.tenant_id.unwrap_or(jobs.jobs[job].tenant),
                start_ms: r.start_at.timestamp_millis(),
                end_ms: r.end_at.timestamp_millis(),
                prompt: r.prompt_tokens,
                generated: r.generated_tokens,
            }
        })
        .collect())
}

/// Which of a site's meters the fixed classes of power profiles sum.
struct PowerMeters {
    facility: HashSet<i64>,
    it: HashSet<i64>,
    gpus: HashSet<i64>,
}

/// Each hour's IT peak and site peak (`load_shape::site_peak_mw`), mW, from its profiles.
fn hour_peaks(
    power: &[(DateTime<Utc>, PowerClass, HourProfile)],
    static_pue: Decimal,
) -> Vec<HourPeaks> {
    let mut by_hour: BTreeMap<DateTime<Utc>, (Option<&HourProfile>, Option<&HourProfile>)> =
        BTreeMap::new();
    for (hour, class, p) in power {
        let e = by_hour.entry(*hour).or_default();
        match class {
            PowerClass::Facility => e.0 = Some(p),
            PowerClass::It => e.1 = Some(p),
            PowerClass::Job(_) => {}
        }
    }
    by_hour
        .into_iter()
        .filter(|(_, (f, it))| f.is_some() || it.is_some())
        .map(|(hour, (facility, it))| HourPeaks {
            hour,
            it_mw: it.and_then(HourProfile::peak_mw),
            site_mw: load_shape::site_peak_mw(facility, it, static_pue),
        })
        .collect()
}

/// An hour's peaks as `site_hours` keeps them (migrations 0020 and 0024).
struct HourPeaks {
    hour: DateTime<Utc>,
    it_mw: Option<i64>,
    site_mw: Option<i64>,
}

/// Each hour's profile of the facility and IT meters and of the GPUs per kind of the job holding them
/// (`domain::headroom`). A GPU's minute counts toward the kind of the allocation covering the
/// minute's last millisecond, the largest share where several do (then the first job).
fn power_profiles(
    readings: &[(i64, i64, i64)],
    (from_us, to_us): (i64, i64),
    sets: &PowerMeters,
    allocations: &HashMap<i64, Vec<Allocation>>,
    kinds: &[Option<JobKind>],
) -> Vec<(DateTime<Utc>, PowerClass, HourProfile)> {
    // Resolved once per meter: its fixed classes and, for a GPU, the allocations whose job
    // gives each minute its class.
    let classes = |m: i64| {
        let facility = sets.facility.contains(&m).then_some(PowerClass::Facility);
        let it = sets.it.contains(&m).then_some(PowerClass::It);
        let held: &[Allocation] = match sets.gpus.contains(&m) {
            true => allocations.get(&m).map_or(&[], Vec::as_slice),
            false => &[],
        };
        move |minute_us: i64| {
            let t_ms = minute_us / 1000 + STEP_MS - 1;
            let job = held
                .iter()
                .filter(|a| a.start_ms <= t_ms && t_ms < a.end_ms)
                .max_by_key(|a| (a.share_ppm, std::cmp::Reverse(a.job)))
                .and_then(|a| kinds[a.job])
                .map(PowerClass::Job);
            // A meter may count twice: a site without node meters has its GPUs as its IT
            // meters.
            [facility, it, job].into_iter().flatten()
        }
    };
    hour_profiles(readings, (from_us, to_us), classes)
        .into_iter()
        .filter_map(|((hour_us, class), p)| {
            Some((DateTime::from_timestamp_micros(hour_us)?, class, p))
        })
        .collect()
}

impl Window {
    fn steps(&self, meter: i64, grid: StepGrid) -> MeterSteps {
        let Some(all) = self.samples.get(&meter) else {
            return MeterSteps::missing(grid.steps);
        };
        // The hour's samples plus two on each side: one for the interval across each edge,
        // and one more for its neighbour, which a counter reset's estimate reads.
        let lo = all
            .partition_point(|s| s.ts_ms < grid.start_ms)
            .saturating_sub(2);
        let hi = (all.partition_point(|s| s.ts_ms < grid.end_ms()) + 2).min(all.len());
        meter_steps(&all[lo..hi], grid, self.gap_limit_ms)
    }

    /// The pure core's input for one hour of the window.
    pub fn site_hour(&self, hour: DateTime<Utc>) -> SiteHour {
        let start = hour.timestamp_millis();
        let grid = StepGrid {
            start_ms: start,
            step_ms: STEP_MS,
            steps: (HOUR_MS / STEP_MS) as usize,
        };
        let facility = if self.facility.is_empty() {
            None
        } else {
            let mut sum = MeterSteps {
                mj: vec![0; grid.steps],
                quality: vec![Default::default(); grid.steps],
            };
            for m in &self.facility {
                let s = self.steps(*m, grid);
                for i in 0..grid.steps {
                    sum.mj[i] += s.mj[i];
                    sum.quality[i] |= s.quality[i];
                }
            }
            Some(sum)
        };
        let nodes = self
            .nodes
            .iter()
            .map(|(node, gpus)| Node {
                energy: self
                    .samples
                    .contains_key(node)
                    .then(|| self.steps(*node, grid)),
                gpus: gpus
                    .iter()
                    .map(|g| Gpu {
                        energy: self.steps(*g, grid),
                        allocations: self.allocations.get(g).cloned().unwrap_or_default(),
                        embodied_ng_per_ms: self.embodied.get(g).map_or(0, |r| r.0),
                        time_price_pico_per_ms: self.embodied.get(g).map_or(0, |r| r.1),
                        device: self.devices.of_meter.get(g).copied(),
                    })
                    .collect(),
            })
            .collect();
        let tokens = self
            .tokens
            .iter()
            .filter_map(|t| {
                let prompt = tokens_in_hour(t.prompt, t.start_ms, t.end_ms, start);
                let generated = tokens_in_hour(t.generated, t.start_ms, t.end_ms, start);
                (prompt != 0 || generated != 0).then_some(Tokens {
                    job: t.job,
                    tenant: t.tenant,
                    prompt,
                    generated,
                })
            })
            .collect();
        SiteHour {
            policy: self.policy.clone(),
            grid,
            facility,
            nodes,
            jobs: self.jobs.clone(),
            tokens,
        }
    }
}

/// One hour's result as the pure core and costing gave it.
pub struct HourResult {
    pub hour: DateTime<Utc>,
    pub attributed: Attributed,
    pub amounts: HourAmounts,
}

/// Opens an attribution run's record; [`finish_run`] stamps it.
pub async fn begin_run(conn: &mut PgConnection) -> StoreResult<i64> {
    Ok(
        sqlx::query_scalar!("INSERT INTO attribution_runs DEFAULT VALUES RETURNING id")
            .fetch_one(conn)
            .await?,
    )
}

/// Replaces the ledger rows of `hours` at the site with `results`' rows (jobs as the
/// window's job ids); returns the tenants of the rows written, once each.
pub async fn replace_ledger(
    conn: &mut PgConnection,
    site_id: i64,
    hours: &[DateTime<Utc>],
    window: &Window,
    results: &[HourResult],
) -> StoreResult<(u64, Vec<i64>)> {
    sqlx::query!(
        "DELETE FROM ledger WHERE site_id = $1 AND hour = ANY($2)",
        site_id,
        hours,
    )
    .execute(&mut *conn)
    .await?;
    let c = LedgerColumns::of(window, results);
    sqlx::query!(
        "INSERT INTO ledger (hour, site_id, tenant_id, job_id, model_id, gpu_mj, node_overhead_mj,
                             idle_mj, facility_overhead_mj, total_mj, estimated_mj, prompt_tokens,
                             generated_tokens, gpu_ms, flags, cost, carbon_g, carbon_marginal_g,
                             embodied_carbon_g, gpu_time_cost, price_fallback_mj,
                             carbon_fallback_mj, badput_mj, badput_cost, badput_carbon_g,
                             carbon_free_mj)
         SELECT hour, $1, tenant, job, model, gpu, node, idle, fac, total, est, prompt, gen, gpu_ms,
                coalesce(string_to_array(nullif(flags, ''), ','), '{}'), cost, carbon, marginal,
                embodied, gpu_time, price_fb, carbon_fb, badput, badput_cost, badput_carbon,
                carbon_free
         FROM UNNEST($2::timestamptz[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[],
                     $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[],
                     $12::bigint[], $13::bigint[], $14::bigint[], $15::text[], $16::numeric[],
                     $17::numeric[], $18::numeric[], $19::numeric[], $20::numeric[],
                     $21::bigint[], $22::bigint[], $23::bigint[], $24::numeric[], $25::numeric[],
                     $26::bigint[])
              AS t(hour, tenant, job, model, gpu, node, idle, fac, total, est, prompt, gen, gpu_ms,
                   flags, cost, carbon, marginal, embodied, gpu_time, price_fb, carbon_fb,
                   badput, badput_cost, badput_carbon, carbon_free)",
        site_id,
        &c.hour,
        &c.tenant,
        &c.job as &[Option<i64>],
        &c.model as &[Option<i64>],
        &c.gpu,
        &c.node,
        &c.idle,
        &c.facility,
        &c.total,
        &c.estimated,
        &c.prompt,
        &c.generated,
        &c.gpu_ms,
        &c.flags,
        &c.cost as &[Option<Decimal>],
        &c.carbon as &[Option<Decimal>],
        &c.marginal as &[Option<Decimal>],
        &c.embodied as &[Option<Decimal>],
        &c.gpu_time_cost as &[Option<Decimal>],
        &c.price_fallback,
        &c.carbon_fallback,
        &c.badput,
        &c.badput_cost as &[Option<Decimal>],
        &c.badput_carbon as &[Option<Decimal>],
        &c.carbon_free as &[Option<i64>],
    )
    .execute(&mut *conn)
    .await?;
    replace_devices(conn, site_id, hours, window, results).await?;
    replace_gpu_time(conn, site_id, hours, window, results).await?;
    let mut tenants = c.tenant.clone();
    tenants.sort_unstable();
    tenants.dedup();
    Ok((c.hour.len() as u64, tenants))
}

/// Replaces the device parts of the ledger rows of `hours` (migration 0035) with `results`'.
async fn replace_devices(
    conn: &mut PgConnection,
    site_id: i64,
    hours: &[DateTime<Utc>],
    window: &Window,
    results: &[HourResult],
) -> StoreResult<()> {
    sqlx::query!(
        "DELETE FROM ledger_devices WHERE site_id = $1 AND hour = ANY($2)",
        site_id,
        hours,
    )
    .execute(&mut *conn)
    .await?;
    let mut c = DeviceColumns::default();
    for r in results {
        for d in &r.attributed.devices {
            let row = &r.attributed.rows[d.row];
            let (Some(job), Some(model)) = (row.job, row.model) else {
                continue;
            };
            c.hour.push(r.hour);
            c.tenant.push(row.tenant);
            c.job.push(window.job_ids[job]);
            c.model.push(model);
            c.device
                .push(window.devices.models[d.device as usize].clone());
            c.gpu.push(d.gpu_mj);
            c.total.push(d.total_mj);
            c.prompt.push(d.prompt_tokens);
            c.generated.push(d.generated_tokens);
        }
    }
    if c.hour.is_empty() {
        return Ok(());
    }
    sqlx::query!(
        "INSERT INTO ledger_devices (site_id, hour, tenant_id, job_id, model_id, device_model,
                                     gpu_mj, total_mj, prompt_tokens, generated_tokens)
         SELECT $1, * FROM UNNEST($2::timestamptz[], $3::bigint[], $4::bigint[], $5::bigint[],
                                  $6::text[], $7::bigint[], $8::bigint[], $9::bigint[],
                                  $10::bigint[])",
        site_id,
        &c.hour,
        &c.tenant,
        &c.job,
        &c.model,
        &c.device,
        &c.gpu,
        &c.total,
        &c.prompt,
        &c.generated,
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Replaces the GPU time per device model of the ledger rows of `hours` (migration 0043)
/// with `results`': each row's parts, its GPU-time cost split over them by their price.
async fn replace_gpu_time(
    conn: &mut PgConnection,
    site_id: i64,
    hours: &[DateTime<Utc>],
    window: &Window,
    results: &[HourResult],
) -> StoreResult<()> {
    sqlx::query!(
        "DELETE FROM ledger_gpu_time WHERE site_id = $1 AND hour = ANY($2)",
        site_id,
        hours,
    )
    .execute(&mut *conn)
    .await?;
    let mut c = GpuTimeColumns::default();
    for r in results {
        for (row, amounts) in r.attributed.rows.iter().zip(&r.amounts.rows) {
            let costs = costing::gpu_time_by_device(amounts.gpu_time_cost, &row.gpu_time);
            for (part, cost) in row.gpu_time.iter().zip(costs) {
                c.hour.push(r.hour);
                c.tenant.push(row.tenant);
                c.job.push(row.job.map(|j| window.job_ids[j]));
                c.model.push(row.model);
                c.device.push(
                    part.device
                        .map(|d| window.devices.models[d as usize].clone()),
                );
                c.gpu_ms.push(part.gpu_ms);
                c.cost.push(cost);
            }
        }
    }
    if c.hour.is_empty() {
        return Ok(());
    }
    sqlx::query!(
        "INSERT INTO ledger_gpu_time (site_id, hour, tenant_id, job_id, model_id, device_model,
                                      gpu_ms, gpu_time_cost)
         SELECT $1, * FROM UNNEST($2::timestamptz[], $3::bigint[], $4::bigint[], $5::bigint[],
                                  $6::text[], $7::bigint[], $8::numeric[])",
        site_id,
        &c.hour,
        &c.tenant,
        &c.job as &[Option<i64>],
        &c.model as &[Option<i64>],
        &c.device as &[Option<String>],
        &c.gpu_ms,
        &c.cost as &[Option<Decimal>],
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The GPU-time parts of an attribution run, as columns for one UNNEST insert.
#[derive(Default)]
struct GpuTimeColumns {
    hour: Vec<DateTime<Utc>>,
    tenant: Vec<i64>,
    job: Vec<Option<i64>>,
    model: Vec<Option<i64>>,
    device: Vec<Option<String>>,
    gpu_ms: Vec<i64>,
    cost: Vec<Option<Decimal>>,
}

/// The device parts of an attribution run, as columns for one UNNEST insert.
#[derive(Default)]
struct DeviceColumns {
    hour: Vec<DateTime<Utc>>,
    tenant: Vec<i64>,
    job: Vec<i64>,
    model: Vec<i64>,
    device: Vec<String>,
    gpu: Vec<i64>,
    total: Vec<i64>,
    prompt: Vec<i64>,
    generated: Vec<i64>,
}

/// Rebuilds the job-day and tenant-day rollups of the days `hours` fall in from the ledger rows
/// written, so a reader of any of the three sees the same sums (migrations 0018, 0041). Called after
/// [`replace_site_hours`] has written those hours' rows in the same transaction.
pub async fn rebuild_days(
    conn: &mut PgConnection,
    site_id: i64,
    hours: &[DateTime<Utc>],
) -> StoreResult<()> {
    let mut days: Vec<(DateTime<Utc>, DateTime<Utc>)> =
        hours.iter().map(|h| (day_of(*h), *h)).collect();
    days.sort_unstable();
    days.dedup_by_key(|(day, _)| *day);
    // Two workers may hold different hours of one site-day (another replica's claim): one
    // rebuilds the day at a time, so the second, once the first has committed, sums both
    // claims' ledger rows (each statement reads what is committed by then). Taken in day
    // order, so two claims spanning midnight cannot deadlock. The lock is taken by a
    // statement on one of this claim's site-hours: on a distributed PostgreSQL it is held on
    // the node of the site's shard, and released only once this transaction's rows there are
    // committed (a lock on the coordinator would be released first, and the second claim
    // could read the shard before the first's rows are visible on it). Over a count, which
    // is one row whether or not the site-hour is there: an hour of no data leaves none
    // (`replace_site_hours`), and a lock taken once per row of it was then not taken at all,
    // so two claims of one day both rebuilt it and one failed on the rollup's unique key.
    for (day, hour) in &days {
        sqlx::query!(
            "SELECT pg_advisory_xact_lock($1::int4, $2::int4)::text
             FROM (SELECT count(*) FROM site_hours WHERE site_id = $3 AND hour = $4) AS h",
            site_id as i32,
            (day.timestamp() / 86_400) as i32,
            site_id,
            hour,
        )
        .fetch_all(&mut *conn)
        .await?;
    }
    let days: Vec<DateTime<Utc>> = days.into_iter().map(|(day, _)| day).collect();
    // Plain statements naming the site rather than a SQL function: a distributed PostgreSQL
    // plans neither a SQL function over its tables with parameters nor its statements as
    // one shard's, and these run on the site's shard.
    sqlx::query!(
        "DELETE FROM usage_job_days WHERE site_id = $1 AND day = ANY($2)",
        site_id,
        &days
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query!(
        "INSERT INTO usage_job_days (
             day, site_id, tenant_id, model_id, job_id, ledger_rows, gpu_mj, node_overhead_mj,
             idle_mj, facility_overhead_mj, total_mj, estimated_mj, prompt_tokens,
             generated_tokens, gpu_ms, priced_mj, price_fallback_mj, carbon_mj,
             carbon_fallback_mj, marginal_mj, cost, gpu_time_cost, carbon_g, carbon_marginal_g,
             embodied_carbon_g, flags, badput_mj, badput_cost, badput_carbon_g, carbon_free_mj,
             cfe_mj)
         SELECT d.day, l.site_id, l.tenant_id, l.model_id, l.job_id, count(*),
                sum(l.gpu_mj), sum(l.node_overhead_mj), sum(l.idle_mj), sum(l.facility_overhead_mj),
                sum(l.total_mj), sum(l.estimated_mj), sum(l.prompt_tokens), sum(l.generated_tokens),
                sum(l.gpu_ms), sum(l.priced_mj), sum(l.price_fallback_mj), sum(l.carbon_mj),
                sum(l.carbon_fallback_mj), sum(l.marginal_mj), sum(l.cost), sum(l.gpu_time_cost),
                sum(l.carbon_g), sum(l.carbon_marginal_g), sum(l.embodied_carbon_g),
                flags_union_agg(DISTINCT l.flags), sum(l.badput_mj), sum(l.badput_cost),
                sum(l.badput_carbon_g), sum(l.carbon_free_mj), sum(l.cfe_mj)
         FROM unnest($2::timestamptz[]) AS d(day)
         JOIN ledger_rows l ON l.site_id = $1 AND l.hour >= d.day
                           AND l.hour < d.day + interval '1 day'
         WHERE l.site_id = $1
         GROUP BY d.day, l.site_id, l.tenant_id, l.model_id, l.job_id",
        site_id,
        &days
    )
    .execute(&mut *conn)
    .await?;
    // The tenant-day rollup as a sum of the job-day rows just written: the same sums as over
    // the ledger rows (each figure is a plain sum, the flags a union), from fewer rows. Both
    // statements take the flags' union over their distinct sets, as `usage::COVERAGE_SUMS`.
    sqlx::query!(
        "DELETE FROM usage_days WHERE site_id = $1 AND day = ANY($2)",
        site_id,
        &days
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query!(
        "INSERT INTO usage_days (
             day, site_id, tenant_id, model_id, ledger_rows, gpu_mj, node_overhead_mj, idle_mj,
             facility_overhead_mj, total_mj, estimated_mj, prompt_tokens, generated_tokens,
             gpu_ms, priced_mj, price_fallback_mj, carbon_mj, carbon_fallback_mj, marginal_mj,
             cost, gpu_time_cost, carbon_g, carbon_marginal_g, embodied_carbon_g, flags,
             badput_mj, badput_cost, badput_carbon_g, carbon_free_mj, cfe_mj)
         SELECT u.day, u.site_id, u.tenant_id, u.model_id, sum(u.ledger_rows),
                sum(u.gpu_mj), sum(u.node_overhead_mj), sum(u.idle_mj), sum(u.facility_overhead_mj),
                sum(u.total_mj), sum(u.estimated_mj), sum(u.prompt_tokens), sum(u.generated_tokens),
                sum(u.gpu_ms), sum(u.priced_mj), sum(u.price_fallback_mj), sum(u.carbon_mj),
                sum(u.carbon_fallback_mj), sum(u.marginal_mj), sum(u.cost), sum(u.gpu_time_cost),
                sum(u.carbon_g), sum(u.carbon_marginal_g), sum(u.embodied_carbon_g),
                flags_union_agg(DISTINCT u.flags), sum(u.badput_mj), sum(u.badput_cost),
                sum(u.badput_carbon_g), sum(u.carbon_free_mj), sum(u.cfe_mj)
         FROM usage_job_days u
         WHERE u.site_id = $1 AND u.day = ANY($2)
         GROUP BY u.day, u.site_id, u.tenant_id, u.model_id",
        site_id,
        &days
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Replaces the site-hours of `hours` with `results`' totals, and sets their IT and site
/// peaks (migrations 0020, 0024) from the window's samples.
pub async fn replace_site_hours(
    conn: &mut PgConnection,
    site_id: i64,
    hours: &[DateTime<Utc>],
    window: &Window,
    results: &[HourResult],
    run_id: i64,
) -> StoreResult<()> {
    sqlx::query!(
        "DELETE FROM site_hours WHERE site_id = $1 AND hour = ANY($2)",
        site_id,
        hours,
    )
    .execute(&mut *conn)
    .await?;
    // An hour with no energy and no rows had no data at all (say, before monitoring began):
    // it leaves no site-hour, so it does not count as available GPU time.
    let measured: Vec<&HourResult> = results
        .iter()
        .filter(|r| r.attributed.totals.site_mj != 0 || !r.attributed.rows.is_empty())
        .collect();
    let t = |f: fn(&Attributed) -> i64| {
        measured
            .iter()
            .map(|r| f(&r.attributed))
            .collect::<Vec<i64>>()
    };
    sqlx::query!(
        "INSERT INTO site_hours (site_id, hour, site_mj, it_mj, gpu_mj, idle_mj, estimated_mj,
                                 allocated_gpu_ms, capacity_gpu_ms, flags, run_id, computed_at,
                                 carbon_free_mj, contract_mj)
         SELECT $1, hour, site, it, gpu, idle, est, alloc, cap, coalesce(string_to_array(nullif(flags, ''), ','), '{}'), $11, now(),
                carbon_free, contract
         FROM UNNEST($2::timestamptz[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[],
                     $7::bigint[], $8::bigint[], $9::bigint[], $10::text[], $12::bigint[], $13::bigint[])
              AS t(hour, site, it, gpu, idle, est, alloc, cap, flags, carbon_free, contract)",
        site_id,
        &measured.iter().map(|r| r.hour).collect::<Vec<_>>(),
        &t(|a| a.totals.site_mj),
        &t(|a| a.totals.it_mj),
        &t(|a| a.totals.gpu_mj),
        &t(|a| a.totals.idle_mj),
        &t(|a| a.totals.estimated_mj),
        &t(|a| a.totals.allocated_gpu_ms),
        &t(|a| a.totals.capacity_gpu_ms),
        &measured
            .iter()
            .map(|r| r.attributed.totals.quality.names().join(","))
            .collect::<Vec<_>>(),
        run_id,
        &measured
            .iter()
            .map(|r| (r.amounts.cfe.known()).then_some(r.amounts.cfe.carbon_free_mj()))
            .collect::<Vec<_>>() as &[Option<i64>],
        &measured
            .iter()
            .map(|r| r.amounts.cfe.contract_mj)
            .collect::<Vec<_>>(),
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query!(
        "UPDATE site_hours h SET it_peak_mw = p.it, site_peak_mw = p.site
         FROM UNNEST($2::timestamptz[], $3::bigint[], $4::bigint[]) AS p(hour, it, site)
         WHERE h.site_id = $1 AND h.hour = p.hour AND h.hour = ANY($5)",
        site_id,
        &window.peaks.iter().map(|p| p.hour).collect::<Vec<_>>(),
        &window.peaks.iter().map(|p| p.it_mw).collect::<Vec<_>>() as &[Option<i64>],
        &window.peaks.iter().map(|p| p.site_mw).collect::<Vec<_>>() as &[Option<i64>],
        hours,
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Replaces the power profiles of `hours` (migration 0024) with the window's.
pub async fn replace_power(
    conn: &mut PgConnection,
    site_id: i64,
    hours: &[DateTime<Utc>],
    window: &Window,
) -> StoreResult<()> {
    sqlx::query!(
        "DELETE FROM site_hour_power WHERE site_id = $1 AND hour = ANY($2)",
        site_id,
        hours,
    )
    .execute(&mut *conn)
    .await?;
    let power: Vec<_> = window
        .power
        .iter()
        .filter(|p| hours.contains(&p.0))
        .collect();
    // One flat array of every profile's 60 minutes, sliced back per row.
    let minutes: Vec<Option<i64>> = power
        .iter()
        .flat_map(|p| p.2.minutes_mw.iter().copied())
        .collect();
    sqlx::query!(
        "INSERT INTO site_hour_power (site_id, hour, class, minutes_mw, parts_peak_mw)
         SELECT $1, t.hour, t.class, ($5::bigint[])[(t.i - 1) * 60 + 1 : t.i * 60], t.parts
         FROM UNNEST($2::timestamptz[], $3::text[], $4::bigint[])
              WITH ORDINALITY AS t(hour, class, parts, i)",
        site_id,
        &power.iter().map(|p| p.0).collect::<Vec<_>>(),
        &power.iter().map(|p| p.1.as_str()).collect::<Vec<_>>() as &[&str],
        &power.iter().map(|p| p.2.parts_peak_mw).collect::<Vec<_>>(),
        &minutes as &[Option<i64>],
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Clears the claim's marks that were computed and releases its lease: a mark bumped
/// meanwhile (new data for an hour being computed) stays, for the next pass.
pub async fn clear_marks(conn: &mut PgConnection, claim: &Claim) -> StoreResult<()> {
    let hours: Vec<DateTime<Utc>> = claim.hours.iter().map(|h| h.0).collect();
    let marked: Vec<DateTime<Utc>> = claim.hours.iter().map(|h| h.1).collect();
    // The rows are locked first, in hour order, as every marker takes them (its upsert is
    // ordered by site and hour): a delete's own order follows its join, and a marker that had
    // bumped a later hour while this held an earlier one would wait on this while this waited
    // on it. One site, so on a distributed PostgreSQL one shard's rows.
    sqlx::query!(
        "SELECT hour FROM dirty_hours WHERE site_id = $1 AND hour = ANY($2) ORDER BY hour FOR UPDATE",
        claim.site_id,
        &hours,
    )
    .fetch_all(&mut *conn)
    .await?;
    sqlx::query!(
        "DELETE FROM dirty_hours d USING UNNEST($2::timestamptz[], $3::timestamptz[]) AS t(hour, marked_at)
         WHERE d.site_id = $1 AND d.hour = t.hour AND d.marked_at = t.marked_at",
        claim.site_id,
        &hours,
        &marked,
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query!(
        "UPDATE dirty_hours SET claimed_until = NULL WHERE site_id = $1 AND hour = ANY($2)",
        claim.site_id,
        &hours,
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Stamps the run's end with what it wrote.
pub async fn finish_run(
    conn: &mut PgConnection,
    run_id: i64,
    hours: u64,
    rows: u64,
) -> StoreResult<()> {
    sqlx::query!(
        // statement_timestamp(), not clock_timestamp(): the same instant here, and a
        // distributed PostgreSQL refuses a VOLATILE function in an UPDATE of its tables.
        "UPDATE attribution_runs SET finished_at = statement_timestamp(), hours = $2, rows = $3 WHERE id = $1",
        run_id,
        hours as i32,
        rows as i32,
    )
    .execute(conn)
    .await?;
    Ok(())
}

#[derive(Default)]
struct LedgerColumns {
    hour: Vec<DateTime<Utc>>,
    tenant: Vec<i64>,
    job: Vec<Option<i64>>,
    model: Vec<Option<i64>>,
    gpu: Vec<i64>,
    node: Vec<i64>,
    idle: Vec<i64>,
    facility: Vec<i64>,
    total: Vec<i64>,
    estimated: Vec<i64>,
    prompt: Vec<i64>,
    generated: Vec<i64>,
    gpu_ms: Vec<i64>,
    flags: Vec<String>,
    cost: Vec<Option<Decimal>>,
    carbon: Vec<Option<Decimal>>,
    marginal: Vec<Option<Decimal>>,
    embodied: Vec<Option<Decimal>>,
    gpu_time_cost: Vec<Option<Decimal>>,
    price_fallback: Vec<i64>,
    carbon_fallback: Vec<i64>,
    badput: Vec<i64>,
    badput_cost: Vec<Option<Decimal>>,
    badput_carbon: Vec<Option<Decimal>>,
    carbon_free: Vec<Option<i64>>,
}

impl LedgerColumns {
    /// The rows of every hour as columns, for one UNNEST insert.
    fn of(window: &Window, results: &[HourResult]) -> LedgerColumns {
        let mut c = LedgerColumns::default();
        for HourResult {
            hour,
            attributed: out,
            amounts,
        } in results
        {
            for (r, a) in out.rows.iter().zip(&amounts.rows) {
                c.cost.push(a.cost);
                c.carbon.push(a.carbon_g);
                c.marginal.push(a.carbon_marginal_g);
                c.embodied.push(a.embodied_g);
                c.gpu_time_cost.push(a.gpu_time_cost);
                c.price_fallback.push(a.price_fallback_mj);
                c.carbon_fallback.push(a.carbon_fallback_mj);
                c.badput.push(r.badput_mj);
                c.badput_cost.push(a.badput_cost);
                c.badput_carbon.push(a.badput_carbon_g);
                c.carbon_free.push(a.carbon_free_mj);
                c.hour.push(*hour);
                c.tenant.push(r.tenant);
                c.job.push(r.job.map(|j| window.job_ids[j]));
                c.model.push(r.model);
                c.gpu.push(r.energy.gpu_mj);
                c.node.push(r.energy.node_overhead_mj);
                c.idle.push(r.energy.idle_mj);
                c.facility.push(r.energy.facility_overhead_mj);
                c.total.push(r.energy.total_mj());
                c.estimated.push(r.energy.estimated_mj);
                c.prompt.push(r.prompt_tokens);
                c.generated.push(r.generated_tokens);
                c.gpu_ms.push(r.gpu_ms);
                let mut flags = r.quality.names();
                flags.extend(&amounts.flags);
                c.flags.push(flags.join(","));
            }
        }
        c
    }
}

/// Truncates a time to its UTC day.
pub fn day_of(ts: DateTime<Utc>) -> DateTime<Utc> {
    let secs = ts.timestamp().div_euclid(86_400) * 86_400;
    Utc.timestamp_opt(secs, 0).single().unwrap_or(ts)
}

/// Truncates a time to its UTC hour.
pub fn hour_of(ts: DateTime<Utc>) -> DateTime<Utc> {
    let secs = ts.timestamp().div_euclid(3600) * 3600;
    Utc.timestamp_opt(secs, 0).single().unwrap_or(ts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(meter_id: i64, ts_us: i64, raw: bool) -> RawSample {
        RawSample {
            meter_id,
            ts_us,
            counter_mj: Some(ts_us),
            power_mw: None,
            peak_mw: None,
            raw,
            counter_estimated: false,
        }
    }

    fn keys(rows: &[RawSample]) -> Vec<(i64, i64, bool)> {
        rows.iter().map(|r| (r.meter_id, r.ts_us, r.raw)).collect()
    }

    /// Rows gathered per meter as they are read come out as a plain sort by (meter, time,
    /// raw) puts them: for rows in write order (minute-major), late rows out of place, raw
    /// readings at a step's instant, and rows of meters not in the window's list (sorted in
    /// with the rest, not lost).
    #[test]
    fn rows_come_out_in_meter_time_raw_order_however_they_came_in() {
        let sparse = vec![
            sample(9_000_000, 5, false),
            sample(1, 7, true),
            sample(1, 7, false),
            sample(-4, 0, false),
        ];
        let mut mixed = minute_major();
        mixed.extend([sample(30, 0, false), sample(5, 60, false)]);
        let metered: Vec<i64> = (10..20).collect();
        for rows in [minute_major(), sparse, mixed, Vec::new()] {
            let mut expected = keys(&rows);
            expected.sort_unstable();
            let mut runs = MeterRuns::new(&metered, 2);
            rows.iter().for_each(|r| runs.push(*r));
            assert_eq!(keys(&runs.into_rows()), expected);
        }
    }

    /// Meters 10..20 written a minute of every meter at a time, with a late minute of meter
    /// 12, a raw reading at a step's instant, and an edge reading before the window appended
    /// after the step records.
    fn minute_major() -> Vec<RawSample> {
        let mut rows: Vec<RawSample> = (0..5)
            .flat_map(|k| (10..20).map(move |m| sample(m, k * 60_000_000, false)))
            .collect();
        rows.insert(3, sample(12, 9 * 60_000_000, false));
        rows.push(sample(15, 2 * 60_000_000, true));
        rows.push(sample(11, -60_000_000, false));
        rows
    }

    /// Where a step is both in a pack and still in `samples` (packed, then written again by
    /// late data before the rows were removed), the pack's is the one kept, whichever order
    /// the meter's readings came in; raw readings at the same instant stay beside it.
    #[test]
    fn an_instant_in_a_pack_and_in_the_rows_is_taken_from_the_pack() {
        let step = |ts_us: i64, counter_mj: i64| PackedStep {
            ts_us,
            counter_mj: Some(counter_mj),
            power_mw: None,
            peak_mw: None,
            counter_estimated: false,
        };
        let packed = vec![(3, step(0, 100)), (3, step(60, 200)), (1, step(60, 7))];
        let mut from_rows = sample(3, 60, false);
        from_rows.counter_mj = Some(999);
        let rows = vec![sample(3, 120, false), from_rows, sample(3, 60, true)];
        let all = merged(&[1, 3], packed, rows);
        assert_eq!(
            keys(&all),
            [
                (1, 60, false),
                (3, 0, false),
                (3, 60, false),
                (3, 60, true),
                (3, 120, false)
            ]
        );
        assert_eq!(
            all[2].counter_mj,
            Some(200),
            "the pack's reading, not the row's"
        );
    }
}
