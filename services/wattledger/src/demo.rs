//! `wattledger demo`: a simulated cluster pushed through the real ingest API, attributed,
//! summarised, and served until Ctrl-C.

use crate::auth::Role;
use crate::config::Config;
use crate::progress::Progress;
use crate::sim::{live, SampleState, Simulation};
use crate::{embedded_pg, startup, worker};
use anyhow::{bail, Context};
use chrono::{DateTime, Datelike, Duration, TimeZone, Utc};
use serde_json::Value;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Mutex};
use wattledger_domain::chargeback::{Close, Month};
use wattledger_domain::metrics::{effectiveness, efficiency};
use wattledger_domain::units::kwh;
use wattledger_store::usage::{self, GroupBy, UsageFilter};
use wattledger_store::{budgets, inventory, Scope};

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

/// The demo's budgets: monthly, per tenant, sized against the simulated cluster so that
/// last month and this one cross thresholds (key, tenant, limit field, limit, hard).
const BUDGETS: [(&str, &str, &str, &str, bool); 5] = [
    (
        "acme-research-energy",
        "acme-research",
        "limit_kwh",
        "40000",
        true,
    ),
    ("nimbus-ai-cost", "nimbus-ai", "limit_cost", "600", false),
    (
        "helix-bio-carbon",
        "helix-bio",
        "limit_carbon_kg",
        "4000",
        true,
    ),
    (
        "orbit-labs-energy",
        "orbit-labs",
        "limit_kwh",
        "40000",
        false,
    ),
    (
        "lumen-search-energy",
        "lumen-search",
        "limit_kwh",
        "3000",
        false,
    ),
];

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
    let pool = crate::database(&config, &[]).await?;
    let keys = crate::signing_key(&config)?;
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

    let (from, to) = demo_range(Utc::now(), args.days);
    let sim = Arc::new(Simulation::new(
        args.seed,
        from.timestamp_millis(),
        to.timestamp_millis(),
        args.sample_interval_s * 1000,
    ));
    eprintln!(
        "Simulating {} to {}: 2 sites, 20 nodes, 160 GPUs, 7 tenants, {} jobs",
        from.format("%Y-%m-%d %H:%M"),
        to.format("%Y-%m-%d %H:%M UTC"),
        sim.job_count()
    );
    let client = Client {
        http: reqwest::Client::new(),
        base: base.clone(),
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
    // Budgets (and the endpoint their alerts go to) before the data: alerts are raised as
    // the ledger is written.
    seed_budgets(&client, &args).await?;
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

    let pending = wattledger_store::dirty::count(&pool).await? as u64;
    let mut p = Progress::new("attribution", pending);
    let t0 = std::time::Instant::now();
    // Every hour up to the simulated end is final before anything is printed or served.
    let stats = worker::drain_until(&pool, to, |s| p.set(s.hours)).await?;
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
    summary(&pool, from, to).await?;
    budget_summary(&pool).await?;
    if !args.no_close {
        if config.export_dir.is_none() {
            config.export_dir = Some(config.data_dir.join("exports"));
        }
        let target = args.close.unwrap_or_else(|| Month::of(Utc::now()).prev());
        close_months(&pool, &config, target).await?;
    }

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
    let _agent = match live_node(&client, &keys, &config.data_dir, &pool).await {
        Ok(agent) => agent,
        Err(e) => {
            eprintln!("The live node did not start ({e:#}); the seeded data is served without it.");
            None
        }
    };
    let admin = keys.mint("demo-admin", Role::Admin, None, 7 * 24 * 3600)?;
    println!(
        "\nServing the API on {base} (GET {base}/health, {base}/v1/openapi.json). Ctrl-C stops."
    );
    println!("\nDashboard: {base}/  (passwords are new each run)");
    for (user, role, tenant) in DEMO_USERS {
        let password = crate::dashboard::login::new_password()?;
        crate::dashboard::login::add_user(&pool, user, role, tenant, &password).await?;
        let what = tenant.map_or(role.as_str().to_owned(), |t| format!("tenant {t}"));
        println!("  {user:<8} {password}   ({what})");
    }
    println!("Admin token (7 days):\n{admin}\n");
    println!("Try:\n  curl -H \"Authorization: Bearer $TOKEN\" '{base}/v1/usage?group_by=tenant'");
    startup::shutdown_signal().await;
    let _ = stop_tx.send(());
    let _ = worker_stop.send(true);
    server.await??;
    if let Some(w) = worker {
        let _ = w.await;
    }
    Ok(())
}

async fn reset_database(admin_url: &str, name: &str) -> anyhow::Result<()> {
    wattledger_store::databases::drop(admin_url, name).await?;
    Ok(wattledger_store::databases::ensure(admin_url, name).await?)
}

/// Starts the live node: simulated exporters on loopback and the real `wattledger-agent`
/// (built beside this binary) scraping them into this server. `None` when the agent binary
/// is not there. The child is killed when the handle drops.
async fn live_node(
    client: &Client,
    keys: &crate::auth::Keys,
    data_dir: &std::path::Path,
    pool: &sqlx::PgPool,
) -> anyhow::Result<Option<tokio::process::Child>> {
    let agent = std::env::current_exe()?.with_file_name("wattledger-agent");
    if !agent.exists() {
        eprintln!(
            "No live node: {} is not built (`cargo build --release -p wattledger-agent`; deploy/demo.sh does).",
            agent.display()
        );
        return Ok(None);
    }
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let exporters = format!("http://{}", listener.local_addr()?);
    let up = std::time::Instant::now();
    let app = axum::Router::new()
        .route(
            "/dcgm/metrics",
            axum::routing::get(
                move || async move { live::dcgm_metrics(up.elapsed().as_secs_f64()) },
            ),
        )
        .route(
            "/vllm/metrics",
            axum::routing::get(
                move || async move { live::vllm_metrics(up.elapsed().as_secs_f64()) },
            ),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });

    // The database was reset: a spool left by an earlier run would replay into it.
    let spool = data_dir.join("demo-agent-spool");
    let _ = std::fs::remove_dir_all(&spool);
    std::fs::create_dir_all(&spool)?;
    let token = keys.mint("demo-live-agent", Role::Collector, None, 7 * 24 * 3600)?;
    let config_path = data_dir.join("demo-agent.toml");
    std::fs::write(
        &config_path,
        live::agent_config(&client.base, &token, &exporters, &spool),
    )?;
    let log_path = data_dir.join("demo-agent.log");
    let log = std::fs::File::create(&log_path)?;
    let child = tokio::process::Command::new(&agent)
        .arg("--config")
        .arg(&config_path)
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", agent.display()))?;

    // The agent registers the GPUs on its first scrape; the job holding them (named by UUID,
    // as the kubelet names them) can be sent once they exist.
    let uuids: Vec<String> = (0..8).map(live::gpu_uuid).collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if inventory::gpus_registered(pool, &uuids).await? == uuids.len() {
            break;
        }
        if std::time::Instant::now() > deadline {
            bail!(
                "the agent registered no GPUs within 30 s (see {})",
                log_path.display()
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    let start = chrono::DateTime::<Utc>::from(std::time::SystemTime::now() - up.elapsed());
    client
        .post(
            &client.scheduler,
            "/v1/ingest/jobs",
            live::job_record(&start.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        )
        .await?;
    eprintln!(
        "Live node {}: wattledger-agent (pid {}) scrapes a simulated dcgm-exporter and vLLM at {exporters} \
         (GPUs every second, sent as one step record per GPU per minute; tokens every 10 s) and \
         pushes through the spool; its log: {}",
        live::NODE,
        child.id().unwrap_or_default(),
        log_path.display()
    );
    Ok(Some(child))
}

struct Client {
    http: reqwest::Client,
    base: String,
    admin: String,
    collector: String,
    scheduler: String,
}

impl Client {
    async fn post(&self, token: &str, path: &str, body: Value) -> anyhow::Result<Value> {
        let bytes = serde_json::to_vec(&body)?;
        let resp = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(bytes)
            .send()
            .await
            .with_context(|| format!("POST {path}"))?;
        let status = resp.status();
        let text = resp.text().await?;
        if !status.is_success() {
            bail!("POST {path} answered {status}: {text}");
        }
        Ok(serde_json::from_str(&text)?)
    }
}

/// Streams sample batches (about 10k records each) from a generator thread to two uploaders.
async fn push_samples(client: &Client, sim: Arc<Simulation>) -> anyhow::Result<u64> {
    let per_interval = 181i64;
    let chunk = (10_000 / per_interval).max(1);
    let intervals = sim.intervals();
    let (tx, rx) = mpsc::channel::<Vec<Value>>(4);
    let generator = {
        let sim = sim.clone();
        tokio::task::spawn_blocking(move || {
            let mut state = SampleState::default();
            let mut k = 0;
            while k < intervals {
                let batch = sim.sample_records(k, (k + chunk).min(intervals), &mut state);
                if tx.blocking_send(batch).is_err() {
                    return;
                }
                k += chunk;
            }
        })
    };
    let rx = Arc::new(Mutex::new(rx));
    let progress = Arc::new(Mutex::new(Progress::new(
        "samples",
        (intervals * per_interval) as u64,
    )));
    let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut uploaders = Vec::new();
    for _ in 0..2 {
        let rx = rx.clone();
        let progress = progress.clone();
        let sent = sent.clone();
        let http = client.http.clone();
        let url = format!("{}/v1/ingest/samples", client.base);
        let token = client.collector.clone();
        uploaders.push(tokio::spawn(async move {
            loop {
                let Some(batch) = rx.lock().await.recv().await else {
                    return Ok::<_, anyhow::Error>(());
                };
                let n = batch.len() as u64;
                let body = serde_json::to_vec(&serde_json::json!({ "records": batch }))?;
                let resp = http
                    .post(&url)
                    .bearer_auth(&token)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await?;
                if !resp.status().is_success() {
                    bail!(
                        "samples batch refused: {} {}",
                        resp.status(),
                        resp.text().await.unwrap_or_default()
                    );
                }
                sent.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                progress.lock().await.add(n);
            }
        }));
    }
    for u in uploaders {
        u.await??;
    }
    generator.await?;
    let p = Arc::try_unwrap(progress)
        .map_err(|_| anyhow::anyhow!("progress still shared"))?
        .into_inner();
    p.finish();
    Ok(sent.load(std::sync::atomic::Ordering::Relaxed))
}

async fn push_tokens(client: &Client, sim: &Simulation) -> anyhow::Result<u64> {
    let intervals = sim.intervals();
    let mut p = Progress::new("tokens", intervals as u64);
    let mut total = 0;
    let chunk = 1000;
    let mut k = 0;
    while k < intervals {
        let records = sim.token_records(k, (k + chunk).min(intervals));
        total += records.len() as u64;
        if !records.is_empty() {
            client
                .post(
                    &client.collector,
                    "/v1/ingest/tokens",
                    serde_json::json!({ "records": records }),
                )
                .await?;
        }
        k += chunk;
        p.set(k as u64);
    }
    p.finish();
    Ok(total)
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
        let closed = crate::chargeback::close(pool, config, month, "demo-finance", |_| {}).await?;
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
                "  exports (statement CSV, FOCUS 1.2, JSON, SHA256SUMS): {}",
                dir.join(month.to_string())
                    .join(format!("v{}", closed.close.version))
                    .display()
            );
        }
    }
    Ok(())
}

/// A closed month in a few lines: each statement's total, and each site's reconciliation.
pub fn close_summary(close: &Close) -> String {
    use std::fmt::Write;
    let kwh = |mj: i64| mj as f64 / 3.6e9;
    let mut out = format!(
        "Chargeback {} closed (v{}): {} statements\n",
        close.month,
        close.version,
        close.statements.len()
    );
    let _ = writeln!(
        out,
        "  {:<16} {:>4} {:>6} {:>12} {:>12} {:>10}",
        "tenant", "cur", "lines", "kWh", "billed", "kgCO2e"
    );
    for s in &close.statements {
        let adjustments = s.adjustments(close.month).count();
        let _ = writeln!(
            out,
            "  {:<16} {:>4} {:>6} {:>12.1} {:>12} {:>10}{}",
            s.tenant,
            s.currency,
            s.lines.len(),
            kwh(s.total.energy_mj),
            s.billed_cost.to_string(),
            wattledger_domain::chargeback::csv::fixed(
                s.total.carbon_g / rust_decimal::Decimal::ONE_THOUSAND,
                1
            ),
            if adjustments > 0 {
                format!("  ({adjustments} adjustment lines)")
            } else {
                String::new()
            }
        );
    }
    for r in &close.reconciliation {
        let _ = writeln!(
            out,
            "  site {:<10} metered {:>10.1} kWh = attributed {:>10.1} + unallocated {:>8.1}{}; adjustments {:.1}",
            r.site,
            kwh(r.metered_mj),
            kwh(r.attributed_mj),
            kwh(r.unallocated_mj),
            if r.balances() { " (to the mJ)" } else { " (UNBALANCED)" },
            kwh(r.adjustments_mj)
        );
    }
    out
}

/// This month's budgets and every alert they raised (last month's included).
async fn budget_summary(pool: &sqlx::PgPool) -> anyhow::Result<()> {
    let now = Utc::now();
    let budgets = wattledger_store::budgets::list(pool, &Scope::All, None, now).await?;
    println!("\nBudgets this month (alerts raised since the start of last month)");
    for b in &budgets {
        let (limit, used, unit) = match (b.limit_kwh, b.limit_cost, b.limit_carbon_kg) {
            (Some(l), _, _) => (l, b.used_kwh, "kWh".to_owned()),
            (_, Some(l), _) => (l, b.used_cost, b.currency.clone().unwrap_or_default()),
            (_, _, Some(l)) => (l, b.used_carbon_kg, "kgCO2e".to_owned()),
            _ => continue,
        };
        let alerts: Vec<String> = budgets::events(pool, &Scope::All, b.id, None)
            .await?
            .iter()
            .map(|e| {
                let t = if e.threshold == "projected" {
                    e.threshold.clone()
                } else {
                    format!("{}%", e.threshold)
                };
                format!("{} {t}", e.period_start.format("%b"))
            })
            .collect();
        println!(
            "  {:<22} {:>9} of {:>7} {:<6} {:>6.1}% {:<4}  alerts: {}",
            b.key,
            used.round_dp(1),
            limit.normalize(),
            unit,
            (used * rust_decimal::Decimal::ONE_HUNDRED / limit).round_dp(1),
            if b.hard { "hard" } else { "soft" },
            if alerts.is_empty() {
                "-".into()
            } else {
                alerts.join(", ")
            }
        );
    }
    Ok(())
}

async fn seed_budgets(client: &Client, args: &DemoArgs) -> anyhow::Result<()> {
    for (key, tenant, field, limit, hard) in BUDGETS {
        let mut body = serde_json::json!({ "tenant": tenant, "hard": hard });
        body[field] = Value::String(limit.into());
        if field == "limit_cost" {
            body["currency"] = Value::String("EUR".into());
        }
        let r = client
            .http
            .put(format!("{}/v1/budgets/{key}", client.base))
            .bearer_auth(&client.admin)
            .json(&body)
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("budget {key}: {}", r.text().await?);
        }
    }
    let Some(url) = &args.webhook_url else {
        return Ok(());
    };
    for (_, tenant, _, _, _) in BUDGETS {
        let mut body = serde_json::json!({ "tenant": tenant, "url": url,
            "description": "wattledger demo: budget alerts" });
        if let Some(secret) = &args.webhook_secret {
            body["secret"] = Value::String(secret.clone());
        }
        let created = client
            .post(&client.admin, "/v1/webhooks/endpoints", body)
            .await?;
        if args.webhook_secret.is_none() {
            eprintln!(
                "Webhook endpoint for {tenant}: {url}, secret {}",
                created["secret"].as_str().unwrap_or_default()
            );
        }
    }
    eprintln!("Budget alerts of {} tenants go to {url}", BUDGETS.len());
    Ok(())
}

/// The simulated range's complete hours: the summary's range, which later data (the live
/// node's, in the hour under way) does not change.
pub fn summary_range(from: DateTime<Utc>, to: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
    (
        wattledger_store::attribution::hour_of(from),
        wattledger_store::attribution::hour_of(to),
    )
}

pub async fn summary(
    pool: &sqlx::PgPool,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> anyhow::Result<()> {
    let (from, to) = summary_range(from, to);
    let filter = UsageFilter {
        from: Some(from),
        to: Some(to),
        ..Default::default()
    };
    let tenants = usage::usage(pool, &Scope::All, &[GroupBy::Tenant], &filter).await?;
    let total: i64 = tenants.iter().map(|r| r.energy.total_mj()).sum();
    let iso = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    println!(
        "Energy per tenant, {} to {} UTC (complete hours; the API gives the same figures:\n  GET /v1/usage?group_by=tenant&from={}&to={} )",
        from.format("%Y-%m-%d %H:%M"),
        to.format("%Y-%m-%d %H:%M"),
        iso(from),
        iso(to)
    );
    println!(
        "  {:<16} {:>12} {:>7} {:>10} {:>10}  energy cost",
        "tenant", "kWh", "share", "idle kWh", "kgCO2e"
    );
    for r in &tenants {
        let cost: Vec<String> = r
            .cost_currencies
            .iter()
            .flatten()
            .zip(r.cost_amounts.iter().flatten())
            .map(|(c, a)| format!("{c} {}", a.round_dp(2)))
            .collect();
        println!(
            "  {:<16} {:>12} {:>6.1}% {:>10} {:>10}  {}",
            r.tenant.as_deref().unwrap_or("-"),
            kwh(r.energy.total_mj()).round_dp(1),
            r.energy.total_mj() as f64 * 100.0 / total.max(1) as f64,
            kwh(r.energy.idle_mj).round_dp(1),
            r.carbon_g
                .map(|g| (g / rust_decimal::Decimal::from(1000))
                    .round_dp(1)
                    .to_string())
                .unwrap_or_else(|| "-".into()),
            if cost.is_empty() {
                "-".into()
            } else {
                cost.join(" + ")
            }
        );
    }
    println!("  {:<16} {:>12}", "total", kwh(total).round_dp(1));

    let models = usage::usage(pool, &Scope::All, &[GroupBy::Model], &filter).await?;
    println!("\nTokens per kWh per model (SCI: operational + embodied gCO2e per 1k tokens)");
    println!(
        "  {:<16} {:>14} {:>12} {:>14} {:>10} {:>12}",
        "model", "tokens", "kWh", "tokens/kWh", "J/token", "SCI g/1k tok"
    );
    for r in models.iter().filter(|r| r.tokens() > 0) {
        let e = efficiency(r.totals());
        let tokens = r.tokens();
        let sci = e
            .sci_g_per_1k_tokens
            .map_or_else(|| "-".into(), |g| g.to_string());
        println!(
            "  {:<16} {:>14} {:>12} {:>14} {:>10} {:>12}",
            r.model.as_deref().unwrap_or("-"),
            tokens,
            kwh(r.energy.total_mj()).round_dp(1),
            e.tokens_per_kwh
                .map_or_else(|| "-".into(), |d| d.round().to_string()),
            e.joules_per_token
                .map_or_else(|| "-".into(), |d| d.round_dp(3).to_string()),
            sci
        );
    }

    let sites = usage::site_totals(pool, &filter, None).await?;
    println!("\nSites");
    println!(
        "  {:<8} {:>12} {:>8} {:>8} {:>8} {:>8} {:>10}",
        "site", "kWh", "PUE", "ITUE", "TUE", "idle", "GPU alloc"
    );
    for s in &sites {
        let e = effectiveness(s.site_mj, s.it_mj, s.gpu_mj);
        let show = |d: Option<rust_decimal::Decimal>| {
            d.map(|d| d.round_dp(3).to_string())
                .unwrap_or_else(|| "-".into())
        };
        println!(
            "  {:<8} {:>12} {:>8} {:>8} {:>8} {:>7.1}% {:>9.1}%",
            s.site,
            kwh(s.site_mj).round_dp(1),
            show(e.pue),
            show(e.itue),
            show(e.tue),
            s.idle_mj as f64 * 100.0 / s.site_mj.max(1) as f64,
            s.allocated_gpu_ms as f64 * 100.0 / s.capacity_gpu_ms.max(1) as f64
        );
    }
    Ok(())
}
