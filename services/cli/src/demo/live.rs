//! The demo's live node: simulated exporters on loopback (dcgm-exporter, the node's BMC
//! through ipmi_exporter, vLLM) and the real agent scraping them.

use super::seed::Client;
use anyhow::{bail, Context};
use chrono::Utc;
use tokio::net::TcpListener;
use wattledger::auth::Role;
use wattledger_sim::live;
use wattledger_store::inventory;

/// Starts the live node: simulated exporters on loopback and the real `wattledger-agent`
/// (built beside this binary) scraping them into this server. `None` when the agent binary
/// is not there. The child is killed when the handle drops.
pub(super) async fn live_node(
    client: &Client,
    keys: &wattledger::auth::Keys,
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
            "/ipmi/metrics",
            axum::routing::get(
                move || async move { live::ipmi_metrics(up.elapsed().as_secs_f64()) },
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
         (GPUs every second and the node's BMC every 5 s, sent as one step record per meter per minute; tokens every 10 s) and \
         pushes through the spool; its log: {}",
        live::NODE,
        child.id().unwrap_or_default(),
        log_path.display()
    );
    Ok(Some(child))
}
