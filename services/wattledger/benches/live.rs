//! The live shape of a fleet: one client per 8-GPU node, as its agent pushes, against the
//! real server binary in its own process, on PostgreSQL with durable commits.
//!
//! cargo bench -p wattledger --bench live -- [--seconds S] [--warmup S] [--period MIN MAX]
//!     [--server LABEL=PATH]... GPUS...
//!
//! `--server` runs each size against each server binary given (e.g. one built from the commit
//! before a change), one after the other on fresh databases; without it, against the one
//! beside this bench, target/release/wattledger. That binary is the `wattledger-cli`
//! package's, which `cargo bench -p wattledger` does not build: build it from the same tree
//! first (`cargo build --release -p wattledger-cli`).
//!
//! Each node's agent sends its node's step records (the node meter and its 8 GPUs: one
//! record per meter per minute, counter with mean and peak power) with its own collector
//! token, a minute's records at a time, every `period` seconds (5–10 s by default, fixed per
//! agent, first push at a random phase). The simulated clock thus runs 6–12 times faster
//! than the wall clock: a fleet at the real 60 s cadence offers a sixth to a twelfth of the
//! load measured here. Each agent sends one request at a time, as the agent does; a push that
//! falls due while the last is in flight waits, and is counted as backlog while it does.
//!
//! Per size, after `warmup` seconds, over `seconds`: requests/s and records/s answered,
//! latency p50/p99 (send to answer), the CPU of the server process and of PostgreSQL (the
//! postmaster and its children) and of this client, and the backlog (pushes overdue by more
//! than one period) at the start and end of the window. A size is sustained when p99 ≤ 250 ms,
//! no push failed and the backlog does not grow. Every answer must account for its records
//! (`written + duplicates = received`, all written: each minute is sent once).

use anyhow::{bail, Context};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{fresh, Ingested};
use wattledger::auth::Role;
use wattledger::embedded_pg::EmbeddedPostgres;
use wattledger_sim::fleet::{Fleet, GPUS_PER_NODE};

mod support;

const SUSTAINED_P99_MS: f64 = 250.0;

struct Args {
    seconds: u64,
    warmup: u64,
    period_ms: (u64, u64),
    /// (label, path) of each server binary to run.
    servers: Vec<(String, String)>,
    sizes: Vec<usize>,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        seconds: 60,
        warmup: 15,
        period_ms: (5_000, 10_000),
        servers: Vec::new(),
        sizes: Vec::new(),
    };
    let mut it = std::env::args().skip(1).filter(|a| a != "--bench");
    while let Some(arg) = it.next() {
        let mut value = |name: &str| -> anyhow::Result<u64> {
            it.next()
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("{name} takes a number"))
        };
        match arg.as_str() {
            "--seconds" => a.seconds = value("--seconds")?,
            "--warmup" => a.warmup = value("--warmup")?,
            "--period" => {
                a.period_ms = (value("--period")? * 1000, value("--period")? * 1000);
            }
            "--server" => {
                let v = it.next().context("--server takes LABEL=PATH")?;
                let (label, path) = v.split_once('=').context("--server takes LABEL=PATH")?;
                a.servers.push((label.to_owned(), path.to_owned()));
            }
            n => a
                .sizes
                .push(n.parse().with_context(|| format!("not a GPU count: {n}"))?),
        }
    }
    if a.sizes.is_empty() {
        a.sizes = vec![10_000, 50_000, 100_000];
    }
    if a.servers.is_empty() {
        a.servers.push(("this".to_owned(), beside_this_bench()?));
    }
    if a.period_ms.0 == 0 || a.period_ms.0 > a.period_ms.1 {
        bail!("--period MIN MAX: 0 < MIN ≤ MAX seconds");
    }
    Ok(a)
}

/// The server binary in this bench's target directory: target/<profile>/deps/live-<hash> →
/// target/<profile>/wattledger. Another package's binary (`wattledger-cli`), so cargo does not
/// build it for this bench, nor tell it the path.
fn beside_this_bench() -> anyhow::Result<String> {
    let exe = std::env::current_exe()?;
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .context("the bench's own path")?
        .join("wattledger");
    if !path.is_file() {
        bail!(
            "{} is not built: `cargo build --release -p wattledger-cli` first, or name a server \
             with --server LABEL=PATH",
            path.display()
        );
    }
    Ok(path.display().to_string())
}

/// What one size measured over its window.
#[derive(Debug, Default)]
struct Figures {
    server: String,
    gpus: usize,
    agents: usize,
    offered_rps: f64,
    rps: f64,
    records_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    server_cpu: f64,
    postgres_cpu: f64,
    client_cpu: f64,
    backlog_start: u64,
    backlog_end: u64,
    failed: u64,
}

impl Figures {
    /// The size's row of the table the run ends with.
    fn row(&self) -> String {
        format!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {:.2} | {:.2} | {:.2} | {} → {} | {} | {} |",
            self.server,
            self.gpus,
            self.agents,
            self.offered_rps,
            self.rps,
            self.records_s,
            self.p50_ms,
            self.p99_ms,
            self.server_cpu,
            self.postgres_cpu,
            self.client_cpu,
            self.backlog_start,
            self.backlog_end,
            self.failed,
            if self.sustained() { "yes" } else { "no" }
        )
    }

    fn sustained(&self) -> bool {
        self.failed == 0
            && self.p99_ms <= SUSTAINED_P99_MS
            && self.backlog_end <= self.backlog_start + 1 + self.agents as u64 / 100
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // `cargo test --all-targets` runs bench binaries without --bench: nothing to measure then.
    if !std::env::args().any(|a| a == "--bench") {
        println!("live benchmark: run it with cargo bench -p wattledger --bench live");
        return Ok(());
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let args = args()?;
    let dir = std::env::temp_dir().join("wattledger-bench-live-pg");
    // Durable commits, as in production: an agent's push is acknowledged once it is on disk.
    let pg = tokio::task::spawn_blocking(move || {
        EmbeddedPostgres::start(
            &dir,
            &[
                "shared_buffers=1GB",
                "max_wal_size=4GB",
                "max_connections=200",
                // What each statement of a push costs, printed after each size.
                "shared_preload_libraries=pg_stat_statements",
                "pg_stat_statements.track_planning=on",
            ],
        )
    })
    .await??;
    // Its settings (pg_stat_statements) are this bench's: a later run starts it afresh.
    let _stop = support::StopPostgres { keep: false };
    measure(&pg, &args).await
}

async fn measure(pg: &EmbeddedPostgres, args: &Args) -> anyhow::Result<()> {
    let mut all = Vec::new();
    for &gpus in &args.sizes {
        for server in &args.servers {
            let f = run(pg, gpus, server, args).await?;
            println!("   {}", f.row());
            all.push(f);
        }
    }
    println!("\n| server | GPUs | agents | offered req/s | answered req/s | records/s | p50 ms | p99 ms | server CPU (cores) | PostgreSQL CPU | client CPU | backlog start → end | failed pushes | sustained |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for f in &all {
        println!("{}", f.row());
    }
    for (label, _) in &args.servers {
        let largest = all
            .iter()
            .filter(|f| &f.server == label && f.sustained())
            .map(|f| f.gpus)
            .max();
        match largest {
            Some(g) => println!("{label}: largest sustained fleet {g} GPUs"),
            None => println!("{label}: no size was sustained"),
        }
    }
    Ok(())
}

/// A server binary in its own process.
struct ServerProcess(std::process::Child);

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn run(
    pg: &EmbeddedPostgres,
    gpus: usize,
    (label, binary): &(String, String),
    args: &Args,
) -> anyhow::Result<Figures> {
    // The hour two hours ago: the pushes are recent, as live ones are, and the compressed
    // clock stays in the past for the run.
    let now_ms = chrono::Utc::now().timestamp_millis();
    let from_ms = now_ms - now_ms % 3_600_000 - 2 * 3_600_000;
    let fleet = Fleet::new(7, gpus, from_ms, 1);
    let agents = fleet.nodes;
    println!("== {} GPUs: {agents} agents, server {label}", fleet.gpus());
    let setup = fresh(
        &pg.url("postgres"),
        "live",
        &fleet.inventory(),
        (from_ms, from_ms + 2 * 86_400_000),
        |_| {},
    )
    .await?;
    // The server's own log, apart: an overloaded server's warnings would drown the report.
    let log = std::env::temp_dir().join(format!("wattledger-live-{label}-{gpus}.log"));
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let server = ServerProcess(
        std::process::Command::new(binary)
            .arg("serve")
            .env("DATABASE_URL", &setup.db_url)
            .env("WATTLEDGER_LISTEN", format!("127.0.0.1:{port}"))
            .env("WATTLEDGER_JWT_SECRET", support::SECRET)
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("starting the server")?,
    );
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(usize::MAX)
        .timeout(Duration::from_secs(60))
        .build()?;
    let up = Instant::now();
    while http.get(format!("{base}/health")).send().await.is_err() {
        if up.elapsed() > Duration::from_secs(60) {
            bail!("the server did not answer /health in 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let keys = fleet.meter_keys();
    // Meter order: two facility meters, then nodes, then GPUs (`Fleet::meter_keys`).
    let node_meters: Vec<Arc<Vec<String>>> = (0..agents)
        .map(|n| {
            let mut m = vec![keys[Fleet::SITES + n].clone()];
            let first = Fleet::SITES + agents + n * GPUS_PER_NODE;
            m.extend(keys[first..first + GPUS_PER_NODE].iter().cloned());
            Arc::new(m)
        })
        .collect();
    let shared = Arc::new(Shared::default());
    let start = tokio::time::Instant::now() + Duration::from_secs(2);
    let stop = start + Duration::from_secs(args.warmup + args.seconds);
    let mut offered = 0.0;
    let mut tasks = Vec::with_capacity(agents);
    for (n, meters) in node_meters.into_iter().enumerate() {
        let h = wattledger_sim::rng::hash(11, 1, n as u64, 0);
        let (lo, hi) = args.period_ms;
        let period = Duration::from_millis(lo + h % (hi - lo + 1));
        let phase = Duration::from_millis((h >> 20) % period.as_millis() as u64);
        offered += 1.0 / period.as_secs_f64();
        let token = setup
            .keys
            .mint(&format!("agent-{n}"), Role::Collector, None, 86_400)?;
        let agent = Agent {
            meters,
            token,
            url: format!("{base}/v1/ingest/samples"),
            http: http.clone(),
            from_ms,
            period,
            first: start + phase,
            shared: shared.clone(),
        };
        tasks.push(tokio::spawn(agent.run(stop)));
    }

    // The window: after the warm-up, until the stop.
    tokio::time::sleep_until(start + Duration::from_secs(args.warmup)).await;
    sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .execute(&setup.pool)
        .await?;
    sqlx::query("SELECT pg_stat_statements_reset()")
        .execute(&setup.pool)
        .await?;
    let cpu0 = Cpu::read(server.0.id(), pg)?;
    shared.measuring.store(1, Ordering::SeqCst);
    let backlog_start = shared.backlog(tokio::time::Instant::now());
    let window = Instant::now();
    // The backlog just before the stop: after it, agents stop sending.
    tokio::time::sleep_until(stop - Duration::from_millis(100)).await;
    let backlog_end = shared.backlog(tokio::time::Instant::now());
    tokio::time::sleep_until(stop).await;
    shared.measuring.store(0, Ordering::SeqCst);
    let secs = window.elapsed().as_secs_f64();
    let cpu1 = Cpu::read(server.0.id(), pg)?;
    let mut done = Ingested::default();
    for t in tasks {
        done.merge(t.await??);
    }
    println!("   server log: {}", log.display());
    if done.written != done.received {
        bail!("every minute is sent once, so every record is new: {done:?}");
    }
    drop(server);
    statements(&setup.pool, lat_count(&shared)).await?;
    drop(setup);

    let mut lat = std::mem::take(&mut *shared.latencies_us.lock().unwrap());
    if lat.is_empty() {
        bail!("no request was answered in the window");
    }
    lat.sort_unstable();
    let pct = |p: f64| lat[((lat.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0;
    let records = shared.records.load(Ordering::SeqCst);
    Ok(Figures {
        server: label.clone(),
        gpus: fleet.gpus(),
        agents,
        offered_rps: offered,
        rps: lat.len() as f64 / secs,
        records_s: records as f64 / secs,
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        server_cpu: (cpu1.server - cpu0.server) / secs,
        postgres_cpu: (cpu1.postgres - cpu0.postgres) / secs,
        client_cpu: (cpu1.client - cpu0.client) / secs,
        backlog_start,
        backlog_end,
        failed: shared.failed.load(Ordering::SeqCst),
    })
}

fn lat_count(shared: &Shared) -> usize {
    shared.latencies_us.lock().unwrap().len()
}

/// The statements PostgreSQL spent the window's time on, per push answered: where a push's
/// cost goes (time includes waiting for locks).
async fn statements(pool: &sqlx::PgPool, pushes: usize) -> anyhow::Result<()> {
    let top: Vec<(String, i64, f64, f64)> = sqlx::query_as(
        "SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 90), calls,
                total_exec_time, total_plan_time
         FROM pg_stat_statements
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
         ORDER BY total_exec_time + total_plan_time DESC LIMIT 10",
    )
    .fetch_all(pool)
    .await?;
    let pushes = pushes.max(1) as f64;
    println!("   PostgreSQL per push answered (exec + plan ms, calls):");
    for (query, calls, exec, plan) in top {
        println!(
            "   {:>7.3} + {:>6.3} ms  {:>6.2}×  {query}",
            exec / pushes,
            plan / pushes,
            calls as f64 / pushes
        );
    }
    Ok(())
}

/// What the agents share with the measurement.
#[derive(Default)]
struct Shared {
    /// 1 while the window is open: answers are counted then.
    measuring: AtomicU64,
    latencies_us: Mutex<Vec<u64>>,
    records: AtomicU64,
    /// Pushes answered with a server error (e.g. the pool timed out), over the whole run.
    failed: AtomicU64,
    /// Per agent, the due time of its next push and its period.
    due: Mutex<Vec<(tokio::time::Instant, Duration)>>,
}

impl Shared {
    /// Pushes overdue by more than one period, over all agents.
    fn backlog(&self, now: tokio::time::Instant) -> u64 {
        self.due
            .lock()
            .unwrap()
            .iter()
            .map(|&(due, period)| {
                let late = now.saturating_duration_since(due);
                (late.as_micros() / period.as_micros().max(1)) as u64
            })
            .sum()
    }
}

struct Agent {
    meters: Arc<Vec<String>>,
    token: String,
    url: String,
    http: reqwest::Client,
    from_ms: i64,
    period: Duration,
    first: tokio::time::Instant,
    shared: Arc<Shared>,
}

impl Agent {
    async fn run(self, stop: tokio::time::Instant) -> anyhow::Result<Ingested> {
        let slot = {
            let mut due = self.shared.due.lock().unwrap();
            due.push((self.first, self.period));
            due.len() - 1
        };
        let mut done = Ingested::default();
        // Each meter's energy counter, rising by its power each minute.
        let mut counters: Vec<i64> = (0..self.meters.len() as i64)
            .map(|m| 1_000_000_000 * (m + 1))
            .collect();
        let mut due = self.first;
        let mut minute: i64 = 1;
        loop {
            tokio::time::sleep_until(due).await;
            if tokio::time::Instant::now() >= stop {
                return Ok(done);
            }
            let body = self.body(minute, &mut counters);
            let sent = Instant::now();
            let r = self
                .http
                .post(&self.url)
                .bearer_auth(&self.token)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await?;
            let status = r.status();
            let answer = r.bytes().await?;
            let took = sent.elapsed();
            if status.is_client_error() {
                bail!(
                    "push refused: {status} {}",
                    String::from_utf8_lossy(&answer)
                );
            }
            if !status.is_success() {
                // An overloaded server's answer: the agent keeps the records and sends them
                // again; here the minute is counted as failed and the next one follows.
                self.shared.failed.fetch_add(1, Ordering::Relaxed);
                minute += 1;
                due += self.period;
                self.shared.due.lock().unwrap()[slot].0 = due;
                continue;
            }
            done.add(&answer)?;
            if self.shared.measuring.load(Ordering::Relaxed) == 1 {
                self.shared
                    .latencies_us
                    .lock()
                    .unwrap()
                    .push(took.as_micros() as u64);
                self.shared
                    .records
                    .fetch_add(self.meters.len() as u64, Ordering::Relaxed);
            }
            minute += 1;
            due += self.period;
            self.shared.due.lock().unwrap()[slot].0 = due;
        }
    }

    /// The step records of minute `k` for this node's meters: the node meter first (900 W
    /// plus its GPUs and 5 %), then the GPUs with their mean and peak power.
    fn body(&self, k: i64, counters: &mut [i64]) -> Vec<u8> {
        use std::fmt::Write as _;
        let ts = chrono::DateTime::from_timestamp_millis(self.from_ms + k * 60_000)
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let gpu_w: Vec<i64> = (1..self.meters.len())
            .map(|g| 300 + ((k * 37 + g as i64 * 101) % 400))
            .collect();
        let total: i64 = gpu_w.iter().sum();
        counters[0] += (900 + total + total / 20) * 60_000;
        let mut s = String::with_capacity(self.meters.len() * 130);
        let _ = write!(
            s,
            "{{\"records\":[{{\"meter\":\"{}\",\"ts\":\"{ts}\",\"counter_mj\":{},\"step_s\":60}}",
            self.meters[0], counters[0]
        );
        for (g, w) in gpu_w.iter().enumerate() {
            counters[g + 1] += w * 60_000;
            let _ = write!(
                s,
                ",{{\"meter\":\"{}\",\"ts\":\"{ts}\",\"counter_mj\":{},\"step_s\":60,\"power_w\":{w},\"peak_w\":{}}}",
                self.meters[g + 1],
                counters[g + 1],
                w + 25
            );
        }
        s.push_str("]}");
        s.into_bytes()
    }
}

/// CPU seconds so far of the server process, of PostgreSQL (the postmaster and its
/// children: the backends, the checkpointer, the WAL writer), and of this process.
struct Cpu {
    server: f64,
    postgres: f64,
    client: f64,
}

impl Cpu {
    fn read(server: u32, pg: &EmbeddedPostgres) -> anyhow::Result<Cpu> {
        let postmaster: u32 = std::fs::read_to_string(pg.dir.join("postmaster.pid"))?
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .context("postmaster.pid")?;
        let mut postgres = 0.0;
        for entry in std::fs::read_dir("/proc")? {
            let Some(pid) = entry?
                .file_name()
                .to_str()
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some(s) = stat(pid) {
                // The postmaster's own, and its ended children's (a backend that closed
                // during the window), and each live child's.
                if pid == postmaster {
                    postgres += s.cpu + s.children_cpu;
                } else if s.ppid == postmaster {
                    postgres += s.cpu;
                }
            }
        }
        Ok(Cpu {
            server: stat(server).map_or(0.0, |s| s.cpu),
            postgres,
            client: stat(std::process::id()).map_or(0.0, |s| s.cpu),
        })
    }
}

struct Stat {
    ppid: u32,
    /// User + system CPU seconds.
    cpu: f64,
    /// Of its children that ended and were waited for.
    children_cpu: f64,
}

/// A process's parent and CPU seconds, from `/proc/PID/stat`.
fn stat(pid: u32) -> Option<Stat> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields are counted after its ')'.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks = 100.0; // USER_HZ on Linux
    let field = |i: usize| f.get(i)?.parse::<f64>().ok();
    Some(Stat {
        ppid: f.get(1)?.parse().ok()?,
        cpu: (field(11)? + field(12)?) / ticks,
        children_cpu: (field(13)? + field(14)?) / ticks,
    })
}
