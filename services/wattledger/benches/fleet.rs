//! The fleet benchmark: a simulated fleet (`wattledger_sim::fleet`) pushed through the ingest
//! API as its agents and schedulers would, attributed, and then asked what its users ask, each
//! figure against a baseline in the same process: `psql \copy` of the same step records for
//! ingest, a plain SQL aggregate over the same ledger rows for the queries.
//!
//! cargo bench -p wattledger --bench fleet -- [--days D] [--copy-days C] [--reps R] [--keep]
//!     [--citus URL] GPUS...
//!
//! e.g. `-- --days 1 1280 10240` (fleet-days at two sizes), `-- --days 30 320 1280` (fleet
//! months). Sizes run one after another on fresh databases; the summary at the end is the
//! table BENCHMARKS.md keeps. Needs the PostgreSQL server binaries and psql.
//!
//! With `--citus URL` (a Citus coordinator's admin database, as `citus-cluster up` prints
//! it) each size runs on the private PostgreSQL and then on the cluster, the same fleet, and
//! the two ledgers are compared row for row (by natural keys: ids are each engine's own);
//! the summary has a row per engine, and the bytes each node holds.

use anyhow::{bail, Context};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};
use support::{fresh, Ingested, Served};
use wattledger::auth::Role;
use wattledger::embedded_pg::EmbeddedPostgres;
use wattledger_sim::fleet::{Counters, Fleet, Step};
use wattledger_store::databases;

mod support;

/// 2026-09-01T00:00:00Z: a past month, so it can be closed.
const FROM_MS: i64 = 1_788_220_800_000;
const BATCH: usize = 10_000;
const PASSWORD: &str = "correct horse battery";

struct Args {
    days: i64,
    copy_days: i64,
    reps: usize,
    /// Leave the last size's database (`fleet_api`) and its PostgreSQL running, to look
    /// into a query with EXPLAIN.
    keep: bool,
    /// A Citus coordinator to run every size on as well, side by side.
    citus: Option<String>,
    sizes: Vec<usize>,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        days: 1,
        copy_days: 1,
        reps: 30,
        keep: false,
        citus: None,
        sizes: Vec::new(),
    };
    let mut it = std::env::args().skip(1).filter(|a| a != "--bench");
    while let Some(arg) = it.next() {
        let mut value = |name: &str| -> anyhow::Result<i64> {
            it.next()
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("{name} takes a number"))
        };
        match arg.as_str() {
            "--days" => a.days = value("--days")?,
            "--copy-days" => a.copy_days = value("--copy-days")?,
            "--reps" => a.reps = value("--reps")? as usize,
            "--keep" => a.keep = true,
            "--citus" => a.citus = Some(it.next().context("--citus takes a URL")?),
            n => a
                .sizes
                .push(n.parse().with_context(|| format!("not a GPU count: {n}"))?),
        }
    }
    if a.sizes.is_empty() {
        a.sizes = vec![1_280, 10_240];
    }
    a.copy_days = a.copy_days.clamp(1, a.days);
    Ok(a)
}

/// What one size measured.
#[derive(Debug, Default)]
struct Figures {
    engine: &'static str,
    gpus: usize,
    days: i64,
    jobs: usize,
    samples: usize,
    copy_rows: usize,
    copy_s: f64,
    api_copy_span_s: f64,
    api_s: f64,
    jobs_s: f64,
    tokens: usize,
    tokens_s: f64,
    attribute_s: f64,
    hours: i64,
    ledger_rows: i64,
    steps_bytes: i64,
    steps_index_bytes: i64,
    /// After the ended month's index is compacted (`store::compaction`).
    steps_index_packed: i64,
    /// Step records once every closed day is packed (`store::step_packs`): the packs' heap,
    /// TOAST and index, and what is left of the row partitions (heap and index), vacuumed.
    packed_bytes: i64,
    /// Packing every day, s.
    pack_s: f64,
    /// Attributing the whole range again from the packs, s; the ledger found equal.
    reattribute_s: f64,
    ledger_bytes: i64,
    rollup_bytes: i64,
    job_rollup_bytes: i64,
    /// (name, p50, p95, baseline p50) in ms.
    queries: Vec<(&'static str, f64, f64, f64)>,
    close_s: f64,
    close_baseline_s: f64,
    /// Site-hours in which Σ ledger was checked equal to the metered site energy.
    site_hours_checked: usize,
    /// Every node's bytes of the database (heap, indexes and TOAST of every table and shard
    /// it holds), by `host:port`: the one server, or each worker and the coordinator.
    node_bytes: Vec<(String, i64)>,
    /// Ledger, site-hour and rollup rows found equal on the other engine; None when only
    /// one engine ran.
    same_rows: Option<usize>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // `cargo test --all-targets` runs bench binaries without --bench: nothing to measure then.
    if !std::env::args().any(|a| a == "--bench") {
        println!("fleet benchmark: run it with cargo bench -p wattledger --bench fleet");
        return Ok(());
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let args = args()?;
    let dir = std::env::temp_dir().join("wattledger-bench-pg");
    // As the ingest bench: no fsync wait on commit for either side, so both measure the
    // work, not this machine's disk flush.
    let pg = tokio::task::spawn_blocking(move || {
        EmbeddedPostgres::start(
            &dir,
            &[
                "synchronous_commit=off",
                "shared_buffers=2GB",
                "max_wal_size=8GB",
                "work_mem=64MB",
            ],
        )
    })
    .await??;
    let _stop = support::StopPostgres { keep: args.keep };
    let mut engines = vec![("PostgreSQL", pg.url("postgres"))];
    if let Some(url) = &args.citus {
        engines.push(("Citus", url.clone()));
    }
    let mut all = Vec::new();
    for (i, &gpus) in args.sizes.iter().enumerate() {
        let mut figures = Vec::new();
        for (engine, admin) in &engines {
            let f = run(admin, engine, gpus, &args).await?;
            report(&f);
            figures.push(f);
        }
        if let [plain, citus] = &mut figures[..] {
            let rows = same_ledger(&engines[0].1, &engines[1].1).await?;
            println!("   the same ledger on both engines: {rows} rows, row for row");
            (plain.same_rows, citus.same_rows) = (Some(rows), Some(rows));
        }
        let last = i + 1 == args.sizes.len();
        for (_, admin) in &engines {
            if args.keep && last {
                println!("   kept: psql {}", databases::url_of(admin, "fleet_api"));
            } else {
                databases::drop(admin, "fleet_api").await?;
            }
        }
        all.extend(figures);
    }
    summary(&all);
    Ok(())
}

/// Runs the fleet on the server (or cluster) whose admin database is `server`, leaving its
/// database `fleet_api` for the caller to compare and drop.
async fn run(
    server: &str,
    engine: &'static str,
    gpus: usize,
    args: &Args,
) -> anyhow::Result<Figures> {
    let fleet = Fleet::new(7, gpus, FROM_MS, args.days);
    let range = (FROM_MS, FROM_MS + args.days * 86_400_000);
    let inventory = fleet.inventory();
    let mut fig = Figures {
        engine,
        gpus: fleet.gpus(),
        days: args.days,
        jobs: fleet.job_count(),
        ..Figures::default()
    };
    println!(
        "== {engine}: {} GPUs ({} nodes, {} tenants), {} days from 2026-09-01: {} jobs",
        fig.gpus, fleet.nodes, fleet.tenants, args.days, fig.jobs
    );
    let api = fresh(server, "fleet_api", &inventory, range, |_| {}).await?;
    let copy = fresh(server, "fleet_copy", &inventory, range, |_| {}).await?;
    let http = reqwest::Client::new();
    let admin = api.keys.mint("bench", Role::Admin, None, 86_400)?;
    let finance = api.keys.mint("bench", Role::Finance, None, 86_400)?;
    let collector = api.keys.mint("bench", Role::Collector, None, 86_400)?;

    // Grid signals and a budget per tenant over the range: budgets are evaluated in every
    // attribution transaction, as in production.
    post_all(
        &http,
        &api,
        &admin,
        "signals",
        fleet.signal_records(),
        10_000,
    )
    .await?;
    for t in 0..fleet.tenants {
        let key = Fleet::tenant_key(t);
        let body = json!({"tenant": key, "period": "custom", "starts_at": iso(range.0),
            "ends_at": iso(range.1), "limit_kwh": "1000000"});
        let r = http
            .put(format!("{}/v1/budgets/{key}-energy", api.base))
            .bearer_auth(&finance)
            .json(&body)
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("budget: {}", r.text().await?);
        }
    }

    let t = Instant::now();
    post_all(&http, &api, &admin, "jobs", fleet.job_records(), 1_000).await?;
    fig.jobs_s = t.elapsed().as_secs_f64();

    // Step records in chunks of about two million, each chunk copied into the baseline
    // database (over the first `copy_days`) and then sent through the API.
    let keys = fleet.meter_keys();
    let copy_ids = meter_ids(&copy.pool).await?;
    let ids: Vec<(i64, i64)> = keys.iter().map(|k| copy_ids[k]).collect();
    let ts: Vec<String> = (0..=fleet.steps).map(|k| fleet.ts(k)).collect();
    let per_chunk = (2_000_000 / keys.len()).max(1) as i64;
    let copy_until = args.copy_days * 1440;
    let mut counters = Counters::default();
    // The facility meters' counters on every hour boundary, as generated: the metered site
    // energy the ledger must add up to, hour by hour (`conservation`).
    let mut site_counters: Vec<Vec<i64>> = vec![Vec::new(); Fleet::SITES];
    let mut ingested = Ingested::default();
    let progress = Instant::now();
    let mut k0 = 0;
    while k0 <= fleet.steps {
        let k1 = (k0 + per_chunk).min(fleet.steps + 1);
        let steps = fleet.steps(k0, k1, &mut counters);
        fig.samples += steps.len();
        for r in &steps {
            if (r.meter as usize) < Fleet::SITES && r.k % 60 == 0 {
                site_counters[r.meter as usize].push(r.counter_mj);
            }
        }
        if k0 < copy_until {
            let (n, s) = copy_steps(&copy, &ids, &steps, &ts).await?;
            fig.copy_rows += n;
            fig.copy_s += s;
        }
        let bodies: Vec<Vec<u8>> = steps
            .chunks(BATCH)
            .map(|c| fleet.samples_body(&keys, c, &ts))
            .collect();
        drop(steps);
        let (s, done) = support::send_two(&http, &api, &collector, "samples", bodies).await?;
        ingested.merge(done);
        fig.api_s += s;
        if k0 < copy_until {
            fig.api_copy_span_s += s;
        }
        k0 = k1;
        eprintln!(
            "   samples: {:>5.1} % ({} rows, {:.0} s)",
            100.0 * k0 as f64 / (fleet.steps + 1) as f64,
            fig.samples,
            progress.elapsed().as_secs_f64()
        );
    }
    drop(copy);
    databases::drop(server, "fleet_copy").await?;
    // Each record was sent once into a fresh database: every one must have been written.
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM samples")
        .fetch_one(&api.pool)
        .await?;
    if ingested.written != fig.samples as u64 || stored != fig.samples as i64 {
        bail!(
            "{} step records generated, the API answered {ingested:?}, {stored} stored",
            fig.samples
        );
    }

    let tokens = fleet.token_records();
    fig.tokens = tokens.len();
    let t = Instant::now();
    post_all(&http, &api, &collector, "tokens", tokens, 10_000).await?;
    fig.tokens_s = t.elapsed().as_secs_f64();

    // A line to start a profiler on: attribution, and nothing else, runs from here.
    eprintln!("   attributing the dirty hours");
    let t = Instant::now();
    let mut last = Instant::now();
    let stats = wattledger::worker::drain(&api.pool, |s| {
        if last.elapsed() > Duration::from_secs(10) {
            eprintln!("   attributing: {s:?} ({:.0} s)", t.elapsed().as_secs_f64());
            last = Instant::now();
        }
    })
    .await?;
    fig.attribute_s = t.elapsed().as_secs_f64();
    println!("   attributed: {stats:?}");
    fig.site_hours_checked = conservation(&api.pool, &fleet, &site_counters).await?;
    println!(
        "   conservation: Σ ledger = metered site energy in all {} site-hours, to the mJ",
        fig.site_hours_checked
    );
    fig.hours = sqlx::query_scalar("SELECT count(*) FROM site_hours")
        .fetch_one(&api.pool)
        .await?;
    fig.ledger_rows = sqlx::query_scalar("SELECT count(*) FROM ledger")
        .fetch_one(&api.pool)
        .await?;
    on_every_node(server, "VACUUM ANALYZE").await?;
    (fig.steps_bytes, fig.steps_index_bytes) = sizes(&api.pool, "samples_steps_").await?;
    // The month's index rebuilt with its rows in place: the figure of the layout before
    // days were packed (the packing below would leave the index nearly empty).
    let t = Instant::now();
    let reindexed = wattledger_store::compaction::reindex_all(&api.pool).await?;
    println!(
        "   compacted {} partitions in {:.1} s",
        reindexed.len(),
        t.elapsed().as_secs_f64()
    );
    fig.steps_index_packed = sizes(&api.pool, "samples_steps_").await?.1;
    (fig.pack_s, fig.packed_bytes) = pack(server, &api.pool, fig.samples).await?;
    (fig.reattribute_s, _) = reattribute(&api.pool, range, &fleet, &site_counters).await?;
    // Attributing again rewrote every ledger row: vacuumed before the ledger is sized and
    // queried, as autovacuum would have by then.
    on_every_node(server, "VACUUM ANALYZE").await?;
    // The writes above leave gigabytes of dirty buffers behind: flushed now, not spread
    // over the queries' timings by the checkpointer.
    on_every_node(server, "CHECKPOINT").await?;
    let (ledger, ledger_index) = sizes(&api.pool, "ledger").await?;
    fig.ledger_bytes = ledger + ledger_index;
    let (rollup, rollup_index) = sizes(&api.pool, "usage_days").await?;
    fig.rollup_bytes = rollup + rollup_index;
    let (rollup, rollup_index) = sizes(&api.pool, "usage_job_days").await?;
    fig.job_rollup_bytes = rollup + rollup_index;
    fig.node_bytes = node_bytes(server).await?;

    queries(&api, range, args.reps, &mut fig).await?;
    Ok(fig)
}

/// Packs every closed day of the run (`store::step_packs`, as the worker does two days after
/// each), checks that every step record is in a pack exactly once, and returns the time it
/// took and the bytes of step records after it, vacuumed.
async fn pack(server: &str, pool: &sqlx::PgPool, generated: usize) -> anyhow::Result<(f64, i64)> {
    let t = Instant::now();
    let mut rows = 0;
    loop {
        let pass =
            wattledger_store::compaction::run(pool, chrono::Utc::now(), Duration::from_secs(3600))
                .await?;
        if pass.packed.is_empty() {
            break;
        }
        rows += pass.packed.iter().map(|d| d.rows).sum::<u64>();
    }
    let pack_s = t.elapsed().as_secs_f64();
    let (packed_steps, left): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT coalesce(sum(steps), 0)::bigint FROM step_packs),
                (SELECT count(*) FROM samples WHERE NOT raw)",
    )
    .fetch_one(pool)
    .await?;
    if rows != generated as u64 || packed_steps != generated as i64 || left != 0 {
        bail!("{generated} step records: {rows} moved, {packed_steps} in packs, {left} left");
    }
    on_every_node(server, "VACUUM ANALYZE").await?;
    let (heap, index) = sizes(pool, "samples_steps_").await?;
    let (pack_heap, pack_index) = sizes(pool, "step_packs").await?;
    println!(
        "   packed {rows} step records in {pack_s:.1} s: packs {:.1} MB (heap and TOAST {:.1}, index {:.1}), row partitions left {:.1} MB",
        (pack_heap + pack_index) as f64 / 1e6,
        pack_heap as f64 / 1e6,
        pack_index as f64 / 1e6,
        (heap + index) as f64 / 1e6
    );
    Ok((pack_s, heap + index + pack_heap + pack_index))
}

/// Marks every hour of the run dirty and attributes it again, now from the packs; checks
/// the ledger is what it was, row for row, and still adds up to the metered energy.
async fn reattribute(
    pool: &sqlx::PgPool,
    (from, to): (i64, i64),
    fleet: &Fleet,
    site_counters: &[Vec<i64>],
) -> anyhow::Result<(f64, usize)> {
    let before = ledger_digest(pool).await?;
    let sites: Vec<i64> = sqlx::query_scalar("SELECT id FROM sites ORDER BY id")
        .fetch_all(pool)
        .await?;
    let at = |ms| chrono::DateTime::from_timestamp_millis(ms).unwrap();
    let mut conn = pool.acquire().await?;
    wattledger_store::dirty::mark_site_spans(
        &mut conn,
        &sites,
        &vec![at(from); sites.len()],
        &vec![at(to - 1); sites.len()],
    )
    .await?;
    drop(conn);
    let t = Instant::now();
    wattledger::worker::drain(pool, |_| {}).await?;
    let s = t.elapsed().as_secs_f64();
    if ledger_digest(pool).await? != before {
        bail!("the ledger attributed again from the packs differs from the first");
    }
    let hours = conservation(pool, fleet, site_counters).await?;
    println!("   attributed again from the packs in {s:.1} s: the same ledger, all {hours} site-hours add up");
    Ok((s, hours))
}

/// A digest of every ledger row's values, less the ids and times of the run that wrote it.
async fn ledger_digest(pool: &sqlx::PgPool) -> anyhow::Result<String> {
    Ok(sqlx::query_scalar(
        "SELECT md5(string_agg(x, '|' ORDER BY x)) FROM (
             SELECT (to_jsonb(l) - ARRAY['id', 'run_id', 'computed_at', 'updated_at', 'created_at'])::text AS x
             FROM ledger l) t",
    )
    .fetch_one(pool)
    .await?)
}

/// Runs `sql` in `fleet_api` on every node (VACUUM and CHECKPOINT act on one server only).
async fn on_every_node(admin: &str, sql: &str) -> anyhow::Result<()> {
    use sqlx::Connection;
    for node in databases::nodes(admin).await? {
        let mut conn = sqlx::PgConnection::connect(&databases::url_of(&node, "fleet_api")).await?;
        sqlx::query(sql).execute(&mut conn).await?;
    }
    Ok(())
}

/// What each node holds of `fleet_api`: every table's heap, indexes and TOAST, read on the
/// node itself, so that a Citus worker counts its shards and the coordinator its reference
/// copies and local tables (the coordinator's shells of distributed tables are empty).
async fn node_bytes(admin: &str) -> anyhow::Result<Vec<(String, i64)>> {
    use sqlx::Connection;
    let mut out = Vec::new();
    for node in databases::nodes(admin).await? {
        let mut conn = sqlx::PgConnection::connect(&databases::url_of(&node, "fleet_api")).await?;
        // Citus hides shards from pg_class for clients other than its own.
        sqlx::query(
            "SELECT set_config('citus.override_table_visibility', 'off', false)
             FROM pg_extension WHERE extname = 'citus'",
        )
        .execute(&mut conn)
        .await?;
        let (at, bytes): (String, i64) = sqlx::query_as(
            "SELECT coalesce(inet_server_addr()::text, 'local') || ':' || current_setting('port'),
                    coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
             FROM pg_class c
             WHERE c.relkind IN ('r', 'm') AND c.relnamespace = 'public'::regnamespace",
        )
        .fetch_one(&mut conn)
        .await?;
        out.push((at.replace("/32", ""), bytes));
    }
    Ok(out)
}

/// Compares `fleet_api`'s ledger, site-hours and daily rollup on the two servers row for
/// row, each row named by its natural keys (ids are each database's own) with the times it
/// was computed left out; returns the rows compared, or fails with the first that differs.
async fn same_ledger(a: &str, b: &str) -> anyhow::Result<usize> {
    const NOT_COMPARED: &str =
        "ARRAY['site_id', 'tenant_id', 'job_id', 'model_id', 'run_id', 'computed_at', 'updated_at', 'created_at']";
    let queries = [
        format!(
            "SELECT concat_ws('|', s.key, t.key, j.key, m.key, to_jsonb(l) - {NOT_COMPARED})
             FROM ledger l JOIN sites s ON s.id = l.site_id JOIN tenants t ON t.id = l.tenant_id
             LEFT JOIN jobs j ON j.site_id = l.site_id AND j.id = l.job_id
             LEFT JOIN models m ON m.id = l.model_id"
        ),
        format!(
            "SELECT concat_ws('|', s.key, to_jsonb(h) - {NOT_COMPARED})
             FROM site_hours h JOIN sites s ON s.id = h.site_id"
        ),
        format!(
            "SELECT concat_ws('|', s.key, t.key, m.key, to_jsonb(u) - {NOT_COMPARED})
             FROM usage_days u JOIN sites s ON s.id = u.site_id
             JOIN tenants t ON t.id = u.tenant_id LEFT JOIN models m ON m.id = u.model_id"
        ),
    ];
    let pa = sqlx::PgPool::connect(&databases::url_of(a, "fleet_api")).await?;
    let pb = sqlx::PgPool::connect(&databases::url_of(b, "fleet_api")).await?;
    let mut compared = 0;
    for q in &queries {
        // Sorted here, not by the servers: the two may collate text differently.
        let mut ra: Vec<String> = sqlx::query_scalar(q).fetch_all(&pa).await?;
        let mut rb: Vec<String> = sqlx::query_scalar(q).fetch_all(&pb).await?;
        ra.sort_unstable();
        rb.sort_unstable();
        if let Some(i) = (0..ra.len().max(rb.len())).find(|&i| ra.get(i) != rb.get(i)) {
            bail!(
                "the ledgers differ ({} rows against {}); first difference:\n  {:?}\n  {:?}",
                ra.len(),
                rb.len(),
                ra.get(i),
                rb.get(i)
            );
        }
        compared += ra.len();
    }
    Ok(compared)
}

/// POSTs `records` to `/v1/ingest/{path}` in batches, one at a time; each is new to the
/// database, so every answer must say all its records were written.
async fn post_all(
    http: &reqwest::Client,
    s: &Served,
    token: &str,
    path: &str,
    records: Vec<Value>,
    batch: usize,
) -> anyhow::Result<()> {
    for chunk in records.chunks(batch) {
        let r = http
            .post(format!("{}/v1/ingest/{path}", s.base))
            .bearer_auth(token)
            .json(&json!({ "records": chunk }))
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("{path}: {}", r.text().await?);
        }
        let mut done = Ingested::default();
        done.add(&r.bytes().await?)?;
        if done.written != chunk.len() as u64 {
            bail!("{path}: {} records sent, {done:?}", chunk.len());
        }
    }
    Ok(())
}

/// Σ ledger energy = the metered site energy (the facility meter's counter rise, as the
/// bench generated it) in every site-hour of the run, checked in one query over the whole
/// run, which also compares the attribution's own `site_hours.site_mj`; fails with the first
/// site-hours that differ. Returns the number of site-hours checked.
async fn conservation(
    pool: &sqlx::PgPool,
    fleet: &Fleet,
    site_counters: &[Vec<i64>],
) -> anyhow::Result<usize> {
    let (mut sites, mut hours, mut metered) = (Vec::new(), Vec::new(), Vec::new());
    for (site, counters) in site_counters.iter().enumerate() {
        for (h, pair) in counters.windows(2).enumerate() {
            sites.push(Fleet::site_key(site).to_owned());
            hours.push(
                chrono::DateTime::from_timestamp_millis(fleet.from_ms + h as i64 * 3_600_000)
                    .unwrap(),
            );
            metered.push(pair[1] - pair[0]);
        }
    }
    let differing: Vec<DifferingHour> = sqlx::query_as(
        "WITH metered AS (
             SELECT s.id AS site_id, m.hour, m.mj
             FROM unnest($1::text[], $2::timestamptz[], $3::bigint[]) AS m (site, hour, mj)
             JOIN sites s ON s.key = m.site),
         -- Materialized: on Citus, an outer join of rows made here to a distributed table
         -- is planned only with both sides read out first.
         ledger_hours AS MATERIALIZED (
             SELECT site_id, hour, sum(total_mj)::bigint AS mj
             FROM ledger GROUP BY site_id, hour),
         hours AS MATERIALIZED (SELECT site_id, hour, site_mj FROM site_hours)
         SELECT s.key AS site, hour, m.mj AS metered, l.mj AS ledger, h.site_mj AS site_hours
         FROM metered m
         FULL JOIN ledger_hours l USING (site_id, hour)
         LEFT JOIN hours h USING (site_id, hour)
         JOIN sites s ON s.id = site_id
         WHERE coalesce(m.mj, 0) <> coalesce(l.mj, 0)
            OR coalesce(m.mj, 0) <> coalesce(h.site_mj, 0)
         ORDER BY hour, s.key",
    )
    .bind(&sites)
    .bind(&hours)
    .bind(&metered)
    .fetch_all(pool)
    .await?;
    if !differing.is_empty() {
        for d in differing.iter().take(10) {
            eprintln!(
                "   {} {}: metered {:?} mJ, Σ ledger {:?} mJ, site_hours {:?} mJ",
                d.site, d.hour, d.metered, d.ledger, d.site_hours
            );
        }
        bail!(
            "Σ ledger ≠ metered site energy in {} of {} site-hours",
            differing.len(),
            sites.len()
        );
    }
    Ok(sites.len())
}

/// A site-hour whose Σ ledger or `site_hours` differs from its metered energy.
#[derive(sqlx::FromRow)]
struct DifferingHour {
    site: String,
    hour: chrono::DateTime<chrono::Utc>,
    metered: Option<i64>,
    ledger: Option<i64>,
    site_hours: Option<i64>,
}

/// Each meter's (site id, id) by key.
async fn meter_ids(pool: &sqlx::PgPool) -> anyhow::Result<HashMap<String, (i64, i64)>> {
    Ok(
        sqlx::query_as::<_, (String, i64, i64)>("SELECT key, site_id, id FROM meters")
            .fetch_all(pool)
            .await?
            .into_iter()
            .map(|(key, site, id)| (key, (site, id)))
            .collect(),
    )
}

/// The baseline: the same rows as CSV (meter ids resolved, mW as stored) through psql
/// `\copy`; returns the rows and the seconds the copy took.
async fn copy_steps(
    s: &Served,
    ids: &[(i64, i64)],
    steps: &[Step],
    ts: &[String],
) -> anyhow::Result<(usize, f64)> {
    let csv = std::env::temp_dir().join("wattledger-fleet-steps.csv");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&csv)?);
    let mw = |w: Option<i64>| w.map(|w| (w * 1000).to_string()).unwrap_or_default();
    for r in steps {
        writeln!(
            f,
            "{},{},{},{},{},{},false",
            ids[r.meter as usize].0,
            ids[r.meter as usize].1,
            ts[r.k as usize],
            r.counter_mj,
            mw(r.power_w),
            mw(r.peak_w)
        )?;
    }
    f.into_inner()?.sync_all()?;
    let t = Instant::now();
    let out = tokio::process::Command::new("psql")
        .arg(&s.db_url)
        .arg("-c")
        .arg(format!(
            "\\copy samples (site_id, meter_id, ts, counter_mj, power_mw, peak_mw, raw) FROM '{}' WITH (FORMAT csv)",
            csv.display()
        ))
        .output()
        .await
        .context("running psql")?;
    if !out.status.success() {
        bail!("psql \\copy: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok((steps.len(), t.elapsed().as_secs_f64()))
}

/// A table's (heap, indexes) bytes, over all its partitions if it has any; for a name ending
/// in `_` (`samples_steps_`), over the partitions of `samples` named so (migration 0036).
async fn sizes(pool: &sqlx::PgPool, table: &str) -> anyhow::Result<(i64, i64)> {
    let leaves = if table.ends_with('_') {
        "SELECT relid FROM pg_partition_tree('samples') WHERE isleaf AND starts_with(relid::text, $1)"
    } else {
        "SELECT relid FROM pg_partition_tree($1::regclass) WHERE isleaf
         UNION SELECT $1::regclass WHERE NOT EXISTS (SELECT FROM pg_partition_tree($1::regclass))"
    };
    // On Citus the coordinator's tables are empty shells: their shards' sizes are asked
    // of the workers by Citus's own functions.
    let (heap, total) = if wattledger_store::distribution::is_citus(pool).await? {
        ("citus_table_size", "citus_total_relation_size")
    } else {
        ("pg_table_size", "pg_total_relation_size")
    };
    Ok(sqlx::query_as(&format!(
        "WITH leaves AS ({leaves})
         SELECT coalesce(sum({heap}(relid)), 0)::bigint,
                coalesce(sum({total}(relid) - {heap}(relid)), 0)::bigint
         FROM leaves"
    ))
    .bind(table)
    .fetch_one(pool)
    .await?)
}

/// What a tenant, finance and the budget view ask of the month, each `reps` times, against
/// a plain SQL aggregate over the same ledger rows; then the month close.
async fn queries(
    api: &Served,
    (from, to): (i64, i64),
    reps: usize,
    fig: &mut Figures,
) -> anyhow::Result<()> {
    let tenant = Fleet::tenant_key(0);
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let tenant_token = api
        .keys
        .mint("bench", Role::Tenant, Some(&tenant), 86_400)?;
    let finance = api.keys.mint("bench", Role::Finance, None, 86_400)?;
    wattledger::dashboard::login::add_user(&api.pool, "tia", Role::Tenant, Some(&tenant), PASSWORD)
        .await?;
    let session = sign_in(&http, &api.base, "tia").await?;
    let (f, t) = (iso(from), iso(to));
    let last_day = &iso(to - 86_400_000)[..10];
    let one_sql = "SELECT sum(total_mj)::bigint, sum(cost), sum(carbon_g) FROM ledger
                   WHERE tenant_id = (SELECT id FROM tenants WHERE key = $1)
                     AND hour >= $2 AND hour < $3";
    let all_sql = "SELECT tenant_id, sum(total_mj)::bigint, sum(cost), sum(carbon_g) FROM ledger
                   WHERE hour >= $2 AND hour < $3 AND $1::text IS NOT NULL GROUP BY tenant_id";
    let (from_t, to_t) = (
        chrono::DateTime::from_timestamp_millis(from).unwrap(),
        chrono::DateTime::from_timestamp_millis(to).unwrap(),
    );
    let sql = |q: &'static str| {
        let (pool, tenant) = (api.pool.clone(), tenant.clone());
        move || {
            let (pool, tenant) = (pool.clone(), tenant.clone());
            async move {
                sqlx::query(q)
                    .bind(tenant)
                    .bind(from_t)
                    .bind(to_t)
                    .fetch_all(&pool)
                    .await
                    .map(|_| ())
                    .map_err(anyhow::Error::from)
            }
        }
    };
    let get = |path: String, auth: (Option<String>, Option<String>)| {
        let (http, base) = (http.clone(), api.base.clone());
        move || {
            let (http, url, auth) = (http.clone(), format!("{base}{path}"), auth.clone());
            async move {
                let mut r = http.get(url);
                if let Some(token) = auth.0 {
                    r = r.bearer_auth(token);
                }
                if let Some(cookie) = auth.1 {
                    r = r.header("cookie", format!("wl_session={cookie}"));
                }
                let r = r.send().await?;
                if r.status() != 200 {
                    bail!("{}: {}", r.status(), r.text().await?);
                }
                r.bytes().await?;
                Ok(())
            }
        }
    };
    let one = timed(reps, sql(one_sql)).await?;
    let all = timed(reps, sql(all_sql)).await?;
    for (name, run, baseline) in [
        (
            "usage, one tenant",
            timed(
                reps,
                get(
                    format!("/v1/usage?from={f}&to={t}"),
                    (Some(tenant_token.clone()), None),
                ),
            )
            .await?,
            one.0,
        ),
        (
            "usage, all tenants by tenant",
            timed(
                reps,
                get(
                    format!("/v1/usage?group_by=tenant&from={f}&to={t}"),
                    (Some(finance.clone()), None),
                ),
            )
            .await?,
            all.0,
        ),
        (
            "usage, one tenant by job",
            timed(
                reps,
                get(
                    format!("/v1/usage?group_by=job&from={f}&to={t}"),
                    (Some(tenant_token.clone()), None),
                ),
            )
            .await?,
            one.0,
        ),
        (
            "tenant dashboard page",
            timed(
                reps,
                get(
                    format!("/tenants/{tenant}?from={}&to={last_day}", &f[..10]),
                    (None, Some(session.clone())),
                ),
            )
            .await?,
            one.0,
        ),
        (
            "budgets, all with use",
            timed(
                reps,
                get("/v1/budgets".into(), (Some(finance.clone()), None)),
            )
            .await?,
            all.0,
        ),
    ] {
        fig.queries.push((name, run.0, run.1, baseline));
    }
    fig.queries
        .push(("baseline: SQL one tenant", one.0, one.1, one.0));
    fig.queries
        .push(("baseline: SQL all tenants", all.0, all.1, all.0));

    // Month close: statements for every tenant, with the exports. Baseline: the same
    // month's ledger rows summed per tenant and job in plain SQL.
    let t0 = Instant::now();
    sqlx::query(
        "SELECT tenant_id, job_id, sum(total_mj), sum(cost), sum(carbon_g) FROM ledger
         WHERE hour >= $1 AND hour < $2 GROUP BY tenant_id, job_id",
    )
    .bind(from_t)
    .bind(chrono::DateTime::parse_from_rfc3339("2026-10-01T00:00:00Z")?.to_utc())
    .fetch_all(&api.pool)
    .await?;
    fig.close_baseline_s = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    let r = http
        .post(format!("{}/v1/chargeback/months/2026-09/close", api.base))
        .bearer_auth(&finance)
        .send()
        .await?;
    if !r.status().is_success() {
        bail!("close: {}", r.text().await?);
    }
    r.bytes().await?;
    fig.close_s = t0.elapsed().as_secs_f64();
    Ok(())
}

/// Runs `f` twice to warm up, then `reps` times; (p50, p95) in ms.
async fn timed<F, Fut>(reps: usize, f: F) -> anyhow::Result<(f64, f64)>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    for _ in 0..2 {
        f().await?;
    }
    let mut ms = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        f().await?;
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    Ok((at(0.5), at(0.95)))
}

/// Signs in through the dashboard's form, as a browser would; returns the session cookie.
async fn sign_in(http: &reqwest::Client, base: &str, user: &str) -> anyhow::Result<String> {
    let form = http.get(format!("{base}/login")).send().await?;
    let cookie = form
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with("wl_login="))
        .and_then(|c| c.split(';').next())
        .context("no login cookie")?
        .to_owned();
    let html = form.text().await?;
    let at = html
        .find("name=\"csrf\" value=\"")
        .context("no csrf field")?
        + 19;
    let csrf = &html[at..at + html[at..].find('"').context("csrf")?];
    let r = http
        .post(format!("{base}/login"))
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "username={user}&password={}&csrf={csrf}",
            PASSWORD.replace(' ', "+")
        ))
        .send()
        .await?;
    r.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|c| c.strip_prefix("wl_session="))
        .and_then(|c| c.split(';').next())
        .map(str::to_owned)
        .context("signing in gave no session")
}

fn iso(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn report(f: &Figures) {
    let gpu_days = (f.gpus as i64 * f.days) as f64;
    println!(
        "   ingest: {} step records; over the first {} rows: psql \\copy {:.0} rows/s, API {:.0} rows/s, API/COPY {:.2}; all: API {:.0} rows/s ({:.1} s)",
        f.samples,
        f.copy_rows,
        f.copy_rows as f64 / f.copy_s,
        f.copy_rows as f64 / f.api_copy_span_s,
        f.copy_s / f.api_copy_span_s,
        f.samples as f64 / f.api_s,
        f.api_s
    );
    println!(
        "   jobs: {} in {:.1} s; tokens: {} records in {:.1} s",
        f.jobs, f.jobs_s, f.tokens, f.tokens_s
    );
    println!(
        "   attribution: {:.1} s ({:.1} s per fleet-day), {} site-hours, {} ledger rows",
        f.attribute_s,
        f.attribute_s / f.days as f64,
        f.hours,
        f.ledger_rows
    );
    println!(
        "   on disk per GPU-day: step records {:.0} KB (heap {:.0} + index {:.0}; {:.0} KB with the index compacted), ledger {:.1} KB, rollups {:.2} KB by tenant-day and {:.2} KB by job-day",
        (f.steps_bytes + f.steps_index_bytes) as f64 / gpu_days / 1000.0,
        f.steps_bytes as f64 / gpu_days / 1000.0,
        f.steps_index_bytes as f64 / gpu_days / 1000.0,
        (f.steps_bytes + f.steps_index_packed) as f64 / gpu_days / 1000.0,
        f.ledger_bytes as f64 / gpu_days / 1000.0,
        f.rollup_bytes as f64 / gpu_days / 1000.0,
        f.job_rollup_bytes as f64 / gpu_days / 1000.0
    );
    println!(
        "   packed: {:.1} KB per GPU-day in {:.1} s; attributed again from the packs in {:.1} s ({:.1} s per fleet-day)",
        f.packed_bytes as f64 / gpu_days / 1000.0,
        f.pack_s,
        f.reattribute_s,
        f.reattribute_s / f.days as f64
    );
    for (name, p50, p95, baseline) in &f.queries {
        println!(
            "   {name:<30} p50 {p50:>8.2} ms  p95 {p95:>8.2} ms  p50 / SQL {:.1}",
            p50 / baseline
        );
    }
    println!(
        "   month close {:.2} s (SQL GROUP BY tenant, job over the month: {:.2} s)",
        f.close_s, f.close_baseline_s
    );
    for (node, bytes) in &f.node_bytes {
        println!(
            "   node {node}: {:.1} MB, {:.0} KB per GPU-day",
            *bytes as f64 / 1e6,
            *bytes as f64 / gpu_days / 1000.0
        );
    }
}

fn summary(all: &[Figures]) {
    println!("\n| engine | GPUs | days | step records | API/COPY | API rows/s | attribution s/fleet-day | ledger rows | KB/GPU-day steps+index (compacted) | KB/GPU-day packed | again from packs s/fleet-day | usage one p95 ms (×SQL) | usage all p95 ms (×SQL) | dashboard p95 ms | budgets p95 ms | close s | site-hours Σ ledger = metered | KB/GPU-day per node | rows equal on the other engine |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for f in all {
        let q = |i: usize| &f.queries[i];
        let gpu_days = (f.gpus as i64 * f.days) as f64;
        let per_node: Vec<String> = f
            .node_bytes
            .iter()
            .map(|(n, b)| format!("{n} {:.0}", *b as f64 / gpu_days / 1000.0))
            .collect();
        println!(
            "| {} | {} | {} | {} | {:.2} | {:.0} | {:.1} | {} | {:.0} ({:.0}) | {:.1} | {:.1} | {:.1} ({:.1}) | {:.1} ({:.1}) | {:.1} | {:.1} | {:.2} | all {} | {} | {} |",
            f.engine,
            f.gpus,
            f.days,
            f.samples,
            f.copy_s / f.api_copy_span_s,
            f.samples as f64 / f.api_s,
            f.attribute_s / f.days as f64,
            f.ledger_rows,
            (f.steps_bytes + f.steps_index_bytes) as f64 / (f.gpus as i64 * f.days) as f64 / 1000.0,
            (f.steps_bytes + f.steps_index_packed) as f64 / (f.gpus as i64 * f.days) as f64 / 1000.0,
            f.packed_bytes as f64 / gpu_days / 1000.0,
            f.reattribute_s / f.days as f64,
            q(0).2,
            q(0).1 / q(0).3,
            q(1).2,
            q(1).1 / q(1).3,
            q(3).2,
            q(4).2,
            f.close_s,
            f.site_hours_checked,
            per_node.join(", "),
            f.same_rows.map_or("-".into(), |n| n.to_string())
        );
    }
}
