//! Runs the configured sources, each on its own interval under one runtime, spools what they
//! read, and pushes the spool. A slow or failing source never holds up the others: each runs
//! in its own task with a time limit per cycle.

use super::clock::Clock;
use super::config::Config;
use super::dead_letter::DeadLetter;
use super::metrics::Metrics;
use super::push::Pusher;
use super::spool::{Entry, SourceState, Spool, SpoolError};
use super::stepped::Stepped;
use crate::records::{Batch, Meter};
use crate::sources::{http, BuildError, Source, SourceError};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Config(#[from] super::config::ConfigError),
    #[error(transparent)]
    Spool(#[from] SpoolError),
    #[error("HTTP client: {0}")]
    Http(http::ClientError),
    #[error("source {name}: {error}")]
    Source { name: String, error: BuildError },
    #[error("metrics listener on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
}

/// A built source and what its loop needs: the name it is logged and counted under, and how
/// often it reads.
pub struct Built {
    pub name: String,
    pub every: Duration,
    pub source: Box<dyn Source>,
}

/// Builds every configured source; meter sources send step records unless configured raw.
pub fn sources(config: &Config) -> Result<Vec<Built>, AgentError> {
    let context = config.agent.source_context();
    config
        .sources()
        .into_iter()
        .map(|c| {
            let (name, every) = (c.name(), c.interval());
            let source = c.build(&context).map_err(|error| AgentError::Source {
                name: name.clone(),
                error,
            })?;
            let source: Box<dyn Source> = if c.stepped() {
                Box::new(Stepped::new(source, config.agent.step_s, every))
            } else {
                source
            };
            Ok(Built {
                name,
                every,
                source,
            })
        })
        .collect()
}

/// Hands a source the state its last run spooled. A state it cannot read is said and
/// counted, not dropped silently: the source starts afresh (a counter's next reading is a new
/// baseline, a job window is read again).
fn restore(built: &mut Built, state: serde_json::Value, metrics: &Metrics) {
    if let Err(e) = built.source.restore(state) {
        metrics.add(
            "wattledger_agent_source_state_unreadable_total",
            &built.name,
            1,
        );
        tracing::warn!(source = %built.name, error = %e,
            "the state this source spooled before the restart is unreadable (an upgrade changed it?); the source starts afresh");
    }
}

/// Runs the agent until `shutdown` completes. What was read and not yet acknowledged stays in
/// the spool for the next start.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), AgentError> {
    let names: Vec<String> = config.sources().iter().map(|c| c.name()).collect();
    let metrics = Arc::new(Metrics::starting(&names, &Batch::ENDPOINTS));
    let spool = Spool::open(&config.agent.spool_dir, config.agent.spool_max_mib << 20)?;
    let states = spool.states()?;
    let pending = spool.pending_bytes();
    metrics.set("wattledger_agent_spool_pending_bytes", "", pending as f64);
    let spool = Arc::new(Mutex::new(spool));
    let wake = Arc::new(Notify::new());
    tracing::info!(spool = %config.agent.spool_dir.display(), pending_bytes = pending,
        server = %config.agent.server, "agent starting");

    let mut tasks = tokio::task::JoinSet::new();
    if let Some(addr) = &config.agent.metrics_listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| AgentError::Listen {
                addr: addr.clone(),
                source,
            })?;
        tracing::info!(addr = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), "serving /metrics");
        let m = metrics.clone();
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let m = m.clone();
                async move {
                    (
                        [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
                        m.render(),
                    )
                }
            }),
        );
        tasks.spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "metrics server stopped");
            }
        });
    }

    let client = http::http_client(
        config.agent.ca_file.as_deref(),
        Duration::from_secs_f64(config.agent.request_timeout_s),
    )
    .map_err(AgentError::Http)?;
    let clock = Arc::new(Clock::in_spool(&config.agent.spool_dir));
    learn_time(&client, &config.agent.server, &clock, &metrics).await;
    let pusher = Pusher {
        client,
        server: config.agent.server.clone(),
        token: config.token_source()?,
        spool: spool.clone(),
        wake: wake.clone(),
        metrics: metrics.clone(),
        dead_letter: DeadLetter::new(config.dead_letter_path()),
        max_records: config.agent.push_max_records,
        clock: clock.clone(),
    };
    tasks.spawn(pusher.run());

    let shared = Shared {
        spool: spool.clone(),
        wake: wake.clone(),
        metrics: metrics.clone(),
        clock,
    };
    // The meters this agent declares go first, so the GPU meters and samples that name them
    // are accepted.
    if !config.meters.is_empty() {
        let meters = config
            .meters
            .iter()
            .map(|m| Meter::new(&m.key, &config.agent.site, m.kind, m.parent.as_deref()))
            .collect();
        shared
            .spool_batches("inventory", vec![Batch::Meters(meters)], None)
            .await;
    }

    for mut built in sources(&config)? {
        if let Some(state) = states.get(&built.name) {
            restore(&mut built, state.clone(), &metrics);
        }
        let shared = shared.clone();
        tasks.spawn(async move { shared.drive(built).await });
    }

    shutdown.await;
    tracing::info!("agent stopping; unsent data stays in the spool");
    tasks.shutdown().await;
    Ok(())
}

/// Asks the server its time before the first reading, so that even the first carries it: a
/// few quick tries, then the sources start anyway (on this machine's clock until the server
/// answers: a server out of reach must not stop the readings).
async fn learn_time(client: &reqwest::Client, server: &str, clock: &Clock, metrics: &Metrics) {
    let url = format!("{}/health", server.trim_end_matches('/'));
    for attempt in 0..3 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let answer = client
            .get(&url)
            .timeout(Duration::from_secs(2))
            .send()
            .await;
        if let Ok(r) = answer {
            super::push::set_clock(clock, metrics, r.headers());
            if clock.synced() {
                return;
            }
        }
    }
    tracing::warn!(%url, "the server did not tell its time; readings carry this machine's clock until it answers");
}

#[derive(Clone)]
struct Shared {
    spool: Arc<Mutex<Spool>>,
    wake: Arc<Notify>,
    metrics: Arc<Metrics>,
    /// What readings are stamped with.
    clock: Arc<Clock>,
}

impl Shared {
    /// One source's loop.
    async fn drive(self, built: Built) {
        let Built {
            name,
            every,
            mut source,
        } = built;
        let limit = every.max(Duration::from_secs(10));
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut said_unavailable = false;
        loop {
            ticker.tick().await;
            let now = self.clock.now();
            let outcome = tokio::time::timeout(limit, source.collect(now)).await;
            match outcome {
                Ok(Ok(c)) => {
                    said_unavailable = false;
                    self.metrics
                        .add("wattledger_agent_source_reads_total", &name, 1);
                    self.metrics.set(
                        "wattledger_agent_source_last_success_timestamp_seconds",
                        &name,
                        now.timestamp_millis() as f64 / 1000.0,
                    );
                    let state = c.state.map(|value| SourceState {
                        source: name.clone(),
                        value,
                    });
                    self.spool_batches(&name, c.batches, state).await;
                }
                Ok(Err(SourceError::Unavailable(why))) => {
                    self.metrics
                        .add("wattledger_agent_source_errors_total", &name, 1);
                    if !said_unavailable {
                        tracing::error!(source = %name, reason = %why,
                            "source unavailable on this machine; the other sources go on, and this one is retried every 5 minutes");
                        said_unavailable = true;
                    }
                    tokio::time::sleep(Duration::from_secs(300)).await;
                }
                Ok(Err(e)) => {
                    self.metrics
                        .add("wattledger_agent_source_errors_total", &name, 1);
                    tracing::warn!(source = %name, error = %e, "source cycle failed");
                }
                Err(_) => {
                    self.metrics
                        .add("wattledger_agent_source_errors_total", &name, 1);
                    tracing::warn!(source = %name, limit_s = limit.as_secs_f64(), "source cycle timed out");
                }
            }
        }
    }

    /// Spools a cycle's batches, the source's state with the last of them.
    async fn spool_batches(&self, name: &str, batches: Vec<Batch>, state: Option<SourceState>) {
        if batches.is_empty() {
            return;
        }
        let records: u64 = batches.iter().map(|b| b.len() as u64).sum();
        let n = batches.len();
        let entries: Vec<Entry> = batches
            .into_iter()
            .enumerate()
            .map(|(i, batch)| Entry {
                batch,
                state: if i + 1 == n { state.clone() } else { None },
            })
            .collect();
        let spool = self.spool.clone();
        let written = tokio::task::spawn_blocking(move || {
            let mut s = spool.lock().expect("spool lock");
            let mut done = 0u64;
            for e in &entries {
                s.append(e)?;
                done += e.batch.len() as u64;
            }
            Ok::<u64, SpoolError>(done)
        })
        .await
        .expect("spool task");
        match written {
            Ok(done) => {
                self.metrics
                    .add("wattledger_agent_records_read_total", name, done);
                self.wake.notify_one();
            }
            Err(SpoolError::Full { pending, max, .. }) => {
                self.metrics
                    .add("wattledger_agent_records_dropped_total", name, records);
                tracing::error!(source = %name, records, pending_bytes = pending, max_bytes = max,
                    "SPOOL FULL: the server has not taken data for a long time; keeping the oldest data and dropping these new records");
            }
            Err(e) => {
                self.metrics
                    .add("wattledger_agent_records_dropped_total", name, records);
                tracing::error!(source = %name, records, error = %e, "could not spool records");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const CONFIG: &str = r#"
[agent]
server = "http://127.0.0.1:1"
token = "t"
site = "s"
node = "n1"

[[nvml]]
[[dcgm]]
url = "http://127.0.0.1:9400/metrics"
[[tokens]]
url = "http://127.0.0.1:8000/metrics"
job = "k8s:serving/llama"
[[redfish]]
url = "http://127.0.0.1:8001/redfish/v1/PowerEquipment/RackPDUs/1"
outlets = { A1 = "n1" }
[[slurm]]
[[podresources]]
[[grid]]
provider = "ukci"
url = "https://api.carbonintensity.org.uk/intensity"
"#;

    #[test]
    fn each_configured_source_is_built_under_its_name_and_meter_sources_step() {
        let config = Config::parse(CONFIG, &BTreeMap::new()).unwrap();
        let built = sources(&config).unwrap();
        let names: Vec<&str> = built.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "nvml",
                "dcgm http://127.0.0.1:9400/metrics",
                "tokens http://127.0.0.1:8000/metrics",
                "redfish http://127.0.0.1:8001/redfish/v1/PowerEquipment/RackPDUs/1",
                "slurm",
                "podresources /var/lib/kubelet/pod-resources/kubelet.sock",
                "grid Ukci https://api.carbonintensity.org.uk/intensity",
            ]
        );
        assert_eq!(built[0].every, Duration::from_secs(1));
    }

    #[test]
    fn a_spooled_state_a_source_cannot_read_is_counted_and_said_not_dropped() {
        let config = Config::parse(CONFIG, &BTreeMap::new()).unwrap();
        let metrics = Metrics::default();
        let unreadable = serde_json::json!(["a state from another version"]);
        let mut built = sources(&config).unwrap();
        for b in &mut built {
            restore(b, unreadable.clone(), &metrics);
        }
        let counted = |name: &str| {
            let b = built.iter().find(|b| b.name.starts_with(name)).unwrap();
            metrics.get("wattledger_agent_source_state_unreadable_total", &b.name)
        };
        // The sources that keep state (job windows, pods, outlet feeds, token baselines)…
        for name in ["dcgm", "tokens", "redfish", "slurm", "podresources"] {
            assert_eq!(counted(name), 1.0, "{name}");
        }
        // …and those that keep none, which have nothing to lose.
        for name in ["nvml", "grid"] {
            assert_eq!(counted(name), 0.0, "{name}");
        }
        // A step reducer's own state that does not read is counted too.
        let mut dcgm = sources(&config).unwrap().remove(1);
        restore(
            &mut dcgm,
            serde_json::json!({ "stepped_v1": "not a reducer" }),
            &metrics,
        );
        assert_eq!(counted("dcgm"), 2.0);
        assert!(metrics
            .render()
            .contains("# TYPE wattledger_agent_source_state_unreadable_total counter"));
    }
}
