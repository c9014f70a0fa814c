//! Starting and stopping the server: bind, serve, run the worker, shut down gracefully.

use crate::auth::Keys;
use crate::config::Config;
use crate::http::{app, AppState};
use crate::worker;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Serves on `listener` until `shutdown` resolves; tests bind port 0 and pass the listener.
pub async fn serve(
    pool: sqlx::PgPool,
    keys: Keys,
    config: Config,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let worker = config
        .worker
        .then(|| tokio::spawn(worker::run(pool.clone(), config.retention(), stop_rx)));
    let roots = match &config.webhook_ca_file {
        Some(path) => crate::webhooks::dispatcher::load_roots(path)?,
        None => Vec::new(),
    };
    let dispatcher = tokio::spawn(crate::webhooks::dispatcher::run(
        pool.clone(),
        crate::webhooks::dispatcher::Settings {
            reach: config.webhook_allow,
            roots,
        },
        std::time::Duration::from_millis(config.webhook_poll_ms),
        stop_tx.subscribe(),
    ));
    let (admission, admission_task) = crate::admission::Admission::start(
        pool.clone(),
        std::time::Duration::from_millis(config.admission_refresh_ms),
        config.admission_default_gpu_w,
        stop_tx.subscribe(),
    )
    .await;
    let router = app(AppState::new(pool, keys, config, admission));
    crate::http::serve::serve(listener, router, shutdown).await?;
    let _ = stop_tx.send(true);
    let _ = admission_task.await;
    let _ = dispatcher.await;
    if let Some(w) = worker {
        let _ = w.await;
    }
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
    tracing::info!("shutting down");
}
