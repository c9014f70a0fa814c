//! `wattledger demo`: a simulated cluster pushed through the real ingest API, attributed,
//! summarised, and served until Ctrl-C or SIGTERM, which at any point stop what it started
//! (the server, the live node's agent; the caller stops an embedded PostgreSQL it started).
//! This module runs it in order; `seed` sends the
//! cluster through the API, `power` runs Frankfurt power-bound (policy, admission beyond
//! nameplate, last week's grid event), `live` starts the live node and its agent, `report`
//! prints what the ledger says.

mod live;
mod power;
mod report;
mod seed;

pub use report::{close_summary, summary};

use live::live_node;
use report::budget_summary;
use seed::{push_samples, push_tokens, seed_budgets, Client};

use anyhow::{bail, Context};
use chrono::{DateTime, Datelike, Duration, TimeZone, Utc};
use std::sync::Arc;
use tokio::net::TcpListener;
use wattledger::auth::Role;
use wattledger::config::Config;
use wattledger::progress::Progress;
use wattledger::{embedded_pg, startup, worker};
use wattledger_domain::chargeback::Month;
use wattledger_sim::Simulation;

#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Simulate only the last N days (default: the previous full month and this month to date).
    #[arg(long)]
    pub days: Option<u32>,
    /// Seed of the simulated cluster.
    #[arg(long, default_value_t = 2026)]
    pub seed: u64,
    /// Seconds between samples of every meter.
    #[arg(long, default_value_t = 300)]
    pub sample_interval_s: i64,
    /// Seed and summarise, then exit instead of serving.
    #[arg(long)]
    pub no_serve: bool,
    /// Register a webhook endpoint for every tenant's budget alerts at this URL (for
    /// example `../shared/tools/webhook-receiver`); loopback and http are allowed for it.
    #[arg(long)]
    pub webhook_url: Option<String>,
    /// The endpoint's `whsec_…` secret, as the receiver was started with; generated and
    /// printed if absent.
    #[arg(long, requires = "webhook_url")]
    pub webhook_secret: Option<String>,
    /// Close chargeback up to this month (YYYY-MM), every earlier month with data first;
    /// default: the last full month. Exports go to WATTLEDGER_EXPORT_DIR, or
    /// `<data dir>/exports`.
    #[arg(long)]
    pub close: Option<Month>,
    /// Leave every month open.
    #[arg(long, conflicts_with = "close")]
    pub no_close: bool,
}

/// Dashboard sign-ins the demo creates: an administrator, finance, and one tenant's user.
const DEMO_USERS: [(&str, Role, Option<&str>); 3] = [
    ("admin", Role::Admin, None),
    ("finance", Role::Finance, None),
    ("acme", Role::Tenant, Some("acme-research")),
];

/// Start of the simulated range: the first of last month, or N days ago.
pub fn demo_range(now: DateTime<Utc>, days: Option<u32>) -> (DateTime<Utc>, DateTime<Utc>) {
    let from = match days {
        Some(d) => now - Duration::days(i64::from(d)),
        None => {
            let (y, m) = if now.month() == 1 {
                (now.year() - 1, 12)
            } else {
                (now.year(), now.month() - 1)
            };
            Utc.with_ymd_and_hms(y, m, 1, 0, 0, 0)
                .single()
                .unwrap_or(now)
        }
    };
    (from, now)
}

pub async fn run(mut config: Config, args: DemoArgs) -> anyhow::Result<()> {
    if args.sample_interval_s < 10 || args.sample_interval_s > 600 {
        bail!("--sample-interval-s must be between 10 and 600");
    }
    let mut stop = stop_requested()?;
    let started = std::time::Instant::now();
    // Without a configured database, the demo gets a fresh database of its own on the
    // embedded server, so every run shows the same cluster.
    if config.database_url.is_none() {
        let dir = config.data_dir.clone();
        let pg = tokio::task::spawn_blocking(move || {
            embedded_pg::EmbeddedPostgres::start(&dir, &["synchronous_commit=off"])
        })
        .await??;
        eprintln!(
            "PostgreSQL: embedded, data in {} (port {}); the CLI reaches the demo's data with\n  DATABASE_URL={}",
            pg.dir.display(),
            pg.port,
            pg.url("wattledger_demo")
        );
        reset_database(&pg.url("postgres"), "wattledger_demo").await?;
        config.database_url = Some(pg.url("wattledger_demo"));
    }
    if args.webhook_url.is_some() {
        // The demo's receiver runs on this machine.
        config.webhook_allow.loopback = true;
        config.webhook_allow.http = true;
    }
    let pool = wattledger::database(&config, &[]).await?;
    let keys = wattledger::signing_key(&config)?;
    let listener = TcpListener::bind(config.listen).await.with_context(|| {
        format!(
            "binding {} (is another wattledger running? use --listen)",
            config.listen
        )
    })?;
    let addr = listener.local_addr()?;
    let base = format!("http://{addr}");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    // The demo attributes what it seeds itself, with a progress bar, and starts the worker
    // that keeps up with the live node once that is done: a second worker racing it would
    // hold hours the summary then missed.
    let server = tokio::spawn(startup::serve(
        pool.clone(),
        keys.clone(),
        Config {
            worker: false,
            ..config.clone()
        },
        listener,
        async {
            let _ = stop_rx.await;
        },
    ));

    // Seeding takes minutes: a stop asked meanwhile ends it here, the server with it.
    let seeding = seed_and_summarise(&pool, &keys, &base, &mut config, &args, started);
    let client = tokio::select! {
        seeded = seeding => seeded?,
        _ = stop.changed() => {
            eprintln!("\nStopped while seeding.");
            let _ = stop_tx.send(());
            let served = server.await?;
            // Its sessions end before its PostgreSQL is stopped, not under it.
            pool.close().await;
            return served;
        }
    };

    if args.no_serve {
        let _ = stop_tx.send(());
        server.await??;
        return Ok(());
    }
    let (worker_stop, worker_stopped) = tokio::sync::watch::channel(false);
    let worker = config.worker.then(|| {
        tokio::spawn(worker::run(
            pool.clone(),
            config.retention(),
            worker_stopped,
        ))
    });
    let agent = tokio::select! {
        started = live_node(&client, &keys, &config.data_dir, &pool) => match started {
            Ok(agent) => agent,
            Err(e) => {
                eprintln!("The live node did not start ({e:#}); the seeded data is served without it.");
                None
            }
        },
        _ = stop.changed() => None,
    };
    if !*stop.borrow() {
        greet(&pool, &keys, &base).await?;
        let _ = stop.changed().await;
    }
    // The agent first: it pushes into the server stopping next.
    if let Some(mut agent) = agent {
        let _ = agent.kill().await;
    }
    let _ = stop_tx.send(());
    let _ = worker_stop.send(true);
    server.await??;
    if let Some(w) = worker {
        let _ = w.await;
    }
    pool.close().await;
    Ok(())
}

/// Ctrl-C or SIGTERM, listened for from this call on (the receiver sees `true` once asked):
/// without a handler, the default action would end this process alone and leave its agent
/// running.
fn stop_requested() -> anyhow::Result<tokio::sync::watch::Receiver<bool>> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut terminate = signal(SignalKind::terminate())?;
        tokio::spawn(async move {
            tokio::select! { _ = interrupt.recv() => {}, _ = terminate.recv() => {} }
            let _ = tx.send(true);
        });
    }
    #[cfg(not(unix))]
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        let _ = tx.send(true);
    });
    Ok(rx)
}

/// Everything before serving: the simulated cluster through the API, attributed, summarised,
/// the power-bound site, and the months closed. The client it seeded with serves the live
/// node next.
async fn seed_and_summarise(
    pool: &sqlx::PgPool,
    keys: &wattledger::auth::Keys,
    base: &str,
    config: &mut Config,
    args: &DemoArgs,
    started: std::time::Instant,
) -> anyhow::Result<Client> {
    let (from, to) = demo_range(Utc::now(), args.days);
    let sim = Arc::new(Simulation::new(
        args.seed,
        from.timestamp_millis(),
        to.timestamp_millis(),
        args.sample_interval_s * 1000,
    ));
    eprintln!(
        "Simulating {} to {}: 2 sites, 24 nodes, 192 GPUs (160 H100, 32 MI300X), 7 tenants, {} jobs",
        from.format("%Y-%m-%d %H:%M"),
        to.format("%Y-%m-%d %H:%M UTC"),
        sim.job_count()
    );
    let client = Client {
        http: reqwest::Client::new(),
        base: base.to_owned(),
        admin: keys.mint("demo", Role::Admin, None, 3600)?,
        collector: keys.mint("demo-agent", Role::Collector, None, 3600)?,
        scheduler: keys.mint("demo-scheduler", Role::Scheduler, None, 3600)?,
    };
    client
        .post(&client.admin, "/v1/ingest/tenants", sim.tenant_records())
        .await?;
    client
        .post(&client.admin, "/v1/ingest/sites", sim.site_records())
        .await?;
    client
        .post(&client.admin, "/v1/ingest/models", sim.model_records())
        .await?;
    client
        .post(
            &client.admin,
            "/v1/ingest/device_models",
            sim.device_model_records(),
        )
        .await?;
    client
        .post(&client.collector, "/v1/ingest/meters", sim.meter_records())
        .await?;
    let signals = sim.signal_records()?;
    let mut p = Progress::new("grid signals", signals.len() as u64);
    for chunk in signals.chunks(10_000) {
        client
            .post(
                &client.collector,
                "/v1/ingest/signals",
                serde_json::json!({ "records": chunk }),
            )
            .await?;
        p.add(chunk.len() as u64);
    }
    p.finish();
    // Frankfurt's rooftop solar, matched hour by hour for its carbon-free score.
    for chunk in sim.clean_energy_records().chunks(10_000) {
        client
            .post(
                &client.collector,
                "/v1/ingest/clean-energy",
                serde_json::json!({ "records": chunk }),
            )
            .await?;
    }
    // Budgets (and the endpoint their alerts go to) before the data: alerts are raised as
    // the ledger is written.
    seed_budgets(&client, args).await?;
    let job_batches = sim.job_batches(2000);
    let mut p = Progress::new("jobs", sim.job_count() as u64);
    for b in job_batches {
        let n = b["records"].as_array().map_or(0, Vec::len);
        client.post(&client.scheduler, "/v1/ingest/jobs", b).await?;
        p.add(n as u64);
    }
    p.finish();

    let samples = push_samples(&client, sim.clone()).await?;
    let tokens = push_tokens(&client, &sim).await?;

    let pending = wattledger_store::dirty::count(pool).await? as u64;
    let mut p = Progress::new("attribution", pending);
    let t0 = std::time::Instant::now();
    // Every hour up to the simulated end is final before anything is printed or served.
    let stats = worker::drain_until(pool, to, |s| p.set(s.hours)).await?;
    p.finish();
    let attribution_s = t0.elapsed().as_secs_f64();

    eprintln!(
        "\nSeeded {samples} samples and {tokens} token records; attributed {} site-hours ({} GPU-steps, {} ledger rows) in {:.1} s; ready in {:.0} s.\n",
        stats.hours,
        stats.gpu_steps,
        stats.rows,
        attribution_s,
        started.elapsed().as_secs_f64()
    );
    summary(pool, from, to).await?;
    budget_summary(pool).await?;
    power::power_bound(&client, pool, &sim).await?;
    if !args.no_close {
        if config.export_dir.is_none() {
            config.export_dir = Some(config.data_dir.join("exports"));
        }
        let target = args.close.unwrap_or_else(|| Month::of(Utc::now()).prev());
        close_months(pool, config, target).await?;
    }
    Ok(client)
}

/// Says where the demo is served and creates its dashboard users, with their passwords.
async fn greet(
    pool: &sqlx::PgPool,
    keys: &wattledger::auth::Keys,
    base: &str,
) -> anyhow::Result<()> {
    let admin = keys.mint("demo-admin", Role::Admin, None, 7 * 24 * 3600)?;
    println!(
        "\nServing the API on {base} (GET {base}/health, {base}/v1/openapi.json). Ctrl-C stops."
    );
    println!("\nDashboard: {base}/  (passwords are new each run)");
    for (user, role, tenant) in DEMO_USERS {
        let password = wattledger::dashboard::login::new_password()?;
        wattledger::dashboard::login::add_user(pool, user, role, tenant, &password).await?;
        let what = tenant.map_or(role.as_str().to_owned(), |t| format!("tenant {t}"));
        println!("  {user:<8} {password}   ({what})");
    }
    println!("Admin token (7 days):\n{admin}\n");
    println!("Try:\n  curl -H \"Authorization: Bearer $TOKEN\" '{base}/v1/usage?group_by=tenant'");
    Ok(())
}

async fn reset_database(admin_url: &str, name: &str) -> anyhow::Result<()> {
    wattledger_store::databases::drop(admin_url, name).await?;
    Ok(wattledger_store::databases::ensure(admin_url, name).await?)
}

/// Closes every open month with data up to `target`, in order, printing each close.
async fn close_months(pool: &sqlx::PgPool, config: &Config, target: Month) -> anyhow::Result<()> {
    let mut months: Vec<Month> = wattledger_store::chargeback::months(pool)
        .await?
        .into_iter()
        // Months close in order: any earlier month with data (a --days range reaching back
        // further than last month) closes first.
        .filter(|m| m.version.is_none())
        .map(|m| Month::of(m.month))
        .filter(|m| *m <= target)
        .collect();
    months.sort();
    for month in months {
        let closed =
            wattledger::app::month_close::close(pool, config, month, "demo-finance", |_| {})
                .await?;
        if month < target {
            let mj: i64 = closed
                .close
                .reconciliation
                .iter()
                .map(|r| r.metered_mj)
                .sum();
            println!(
                "\nChargeback {month} closed first (v{}): {} statements, {:.1} kWh metered",
                closed.close.version,
                closed.close.statements.len(),
                mj as f64 / 3.6e9
            );
            continue;
        }
        println!();
        print!("{}", close_summary(&closed.close));
        if let Some(dir) = &config.export_dir {
            println!(
                "  exports (statement CSV, FOCUS 1.2 and 1.4, JSON, SHA256SUMS): {}",
                dir.join(month.to_string())
                    .join(format!("v{}", closed.close.version))
                    .display()
            );
        }
    }
    Ok(())
}
