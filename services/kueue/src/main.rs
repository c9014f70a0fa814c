//! `wattledger-kueue`: the Kueue AdmissionCheck controller as a process. It reconciles every
//! `--resync-seconds` until SIGTERM or Ctrl-C, and serves `/healthz` and `/metrics` on
//! `--listen`. In a cluster it uses the pod's service account (in-cluster config); outside
//! one, the current kubeconfig context.

use anyhow::Context;
use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use wattledger_kueue::{Controller, Metrics, Wattledger};

#[derive(Debug, Parser)]
#[command(name = "wattledger-kueue", version, about)]
struct Args {
    /// The wattledger server's URL.
    #[arg(long, env = "WATTLEDGER_SERVER")]
    server: String,
    /// A file holding a scheduler-role API token; read on every question, so a rotated
    /// Secret takes effect without a restart.
    #[arg(long, env = "WATTLEDGER_KUEUE_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// Seconds between two full passes over AdmissionChecks and Workloads.
    #[arg(long, env = "WATTLEDGER_KUEUE_RESYNC_SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    resync_seconds: u64,
    /// Seconds to wait for wattledger's answer before the failure policy applies.
    #[arg(long, env = "WATTLEDGER_KUEUE_TIMEOUT_SECONDS", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..=60))]
    timeout_seconds: u64,
    /// Where `/healthz` and `/metrics` are served.
    #[arg(long, env = "WATTLEDGER_KUEUE_LISTEN", default_value = "0.0.0.0:9466")]
    listen: SocketAddr,
}

async fn shutdown() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let server = Wattledger::new(
        &args.server,
        args.token_file.clone(),
        Duration::from_secs(args.timeout_seconds),
    )
    .context("building the wattledger client")?;
    let client = kube::Client::try_default()
        .await
        .context("no Kubernetes configuration (in-cluster or kubeconfig)")?;
    let metrics = Arc::new(Metrics::default());
    let resync = Duration::from_secs(args.resync_seconds);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    // Healthy while passes keep finishing: a pass may take a few timeouts when wattledger
    // is slow, so the limit is generous.
    let stale_after = (resync * 6).max(Duration::from_secs(120));
    let served = Arc::clone(&metrics);
    let http = tokio::spawn(async move {
        axum::serve(
            listener,
            wattledger_kueue::metrics::router(served, stale_after),
        )
        .with_graceful_shutdown(shutdown())
        .await
    });
    tracing::info!(server = %args.server, resync_s = args.resync_seconds, listen = %args.listen,
        "wattledger-kueue started");
    let controller = Controller::new(client, server, metrics);
    let stop = shutdown();
    tokio::pin!(stop);
    loop {
        match controller.reconcile().await {
            Ok(r) => tracing::debug!(?r, "pass done"),
            Err(e) => tracing::warn!(error = %e, "pass failed; retrying at the next resync"),
        }
        tokio::select! {
            _ = &mut stop => break,
            _ = tokio::time::sleep(resync) => {}
        }
    }
    tracing::info!("stopping");
    http.abort();
    Ok(())
}
