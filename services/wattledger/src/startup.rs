//! Starting and stopping the server: bind, serve, run the worker, shut down gracefully.

use crate::auth::Keys;
use crate::config::Config;
use crate::server::app;
use crate::state::AppState;
use crate::worker;
use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

/// The sockets the API is served on: plain HTTP, and HTTPS when configured.
pub struct Listeners {
    pub http: TcpListener,
    /// The HTTPS listener with the acceptor holding its key pair (reloaded as it rotates).
    pub https: Option<(TcpListener, TlsAcceptor)>,
}

impl Listeners {
    /// Binds --listen and, when configured, --tls-listen with its key pair loaded: settings
    /// that do not go together and a pair that does not load stop the server here, before
    /// anything starts.
    pub async fn bind(config: &Config) -> anyhow::Result<Self> {
        let https = match config.tls()? {
            Some(tls) => {
                let acceptor = crate::server::tls::acceptor(tls.files, tls.reload_every)
                    .context("loading the TLS key pair")?;
                let listener = TcpListener::bind(tls.listen)
                    .await
                    .with_context(|| format!("binding {} (--tls-listen)", tls.listen))?;
                Some((listener, acceptor))
            }
            None => None,
        };
        let http = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("binding {}", config.listen))?;
        Ok(Listeners { http, https })
    }
}

/// Plain HTTP only.
impl From<TcpListener> for Listeners {
    fn from(http: TcpListener) -> Self {
        Listeners { http, https: None }
    }
}

/// Serves on `listeners` until `shutdown` resolves; tests bind port 0 and pass the listener
/// (or bind `Listeners` from a config with port 0 addresses).
pub async fn serve(
    pool: sqlx::PgPool,
    keys: Keys,
    config: Config,
    listeners: impl Into<Listeners>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let Listeners { http, https } = listeners.into();
    // Revoked tokens are refused from the first request on, and learnt as they are revoked.
    let keys = keys.with_max_ttl(config.token_max_ttl);
    crate::auth::follow::load(&pool, keys.revoked())
        .await
        .context("reading the revoked API tokens")?;
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
    let revocations = tokio::spawn(crate::auth::follow::run(
        pool.clone(),
        keys.revoked().clone(),
        std::time::Duration::from_millis(config.token_reload_ms.max(1)),
        stop_tx.subscribe(),
    ));
    // The decoy a sign-in with an unknown name checks against, made before the first one
    // (else that one alone would also pay for making it).
    tokio::task::spawn_blocking(crate::dashboard::login::prepare_decoy);
    let router = app(AppState::new(pool, keys, config, admission));
    crate::server::serve::serve(http, https, router, shutdown).await?;
    let _ = stop_tx.send(true);
    let _ = admission_task.await;
    let _ = revocations.await;
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
