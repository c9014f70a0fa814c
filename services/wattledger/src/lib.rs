//! The wattledger server: HTTP API and dashboard, attribution worker.
//!
//! A library only, so tests can start the real app on port 0. The `wattledger` command is a
//! thin CLI over it in its own package, `wattledger-cli` (services/cli), with the demo; the
//! demo's simulated cluster is `wattledger-sim` (services/sim).

pub mod admission;
pub mod app;
pub mod auth;
pub mod config;
pub mod dashboard;
pub mod embedded_pg;
pub mod grid_events;
pub mod http;
pub mod progress;
pub mod server;
pub mod startup;
pub mod state;
pub mod telemetry;
pub mod views;
pub mod webhooks;
pub mod worker;

use anyhow::Context;
use config::Config;

/// Opens the configured database, or starts the embedded one, and migrates it.
pub async fn database(config: &Config, embedded_settings: &[&str]) -> anyhow::Result<sqlx::PgPool> {
    let url = match &config.database_url {
        Some(url) => url.clone(),
        None => {
            let dir = config.data_dir.clone();
            let settings: Vec<String> = embedded_settings.iter().map(|s| s.to_string()).collect();
            let pg = tokio::task::spawn_blocking(move || {
                let refs: Vec<&str> = settings.iter().map(String::as_str).collect();
                embedded_pg::EmbeddedPostgres::start(&dir, &refs)
            })
            .await??;
            embedded_pg::ensure_database(&pg.url("postgres"), "wattledger").await?;
            tracing::info!(data = %pg.dir.display(), port = pg.port, "using the embedded PostgreSQL");
            pg.url("wattledger")
        }
    };
    let pool = wattledger_store::connect(&url, 8)
        .await
        .context("connecting to PostgreSQL")?;
    wattledger_store::migrate(&pool)
        .await
        .context("migrating the database")?;
    Ok(pool)
}

/// The signing key: configured, or generated once and kept in the data directory.
pub fn signing_key(config: &Config) -> anyhow::Result<auth::Keys> {
    let secret = match &config.jwt_secret {
        Some(s) => s.clone(),
        None => {
            let path = config.data_dir.join("jwt.key");
            match std::fs::read_to_string(&path) {
                Ok(s) => s.trim().to_owned(),
                Err(_) => {
                    std::fs::create_dir_all(&config.data_dir)?;
                    let key = random_hex(32)?;
                    std::fs::write(&path, &key)?;
                    #[cfg(unix)]
                    {
                        use std::os::unix::fs::PermissionsExt;
                        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
                    }
                    key
                }
            }
        }
    };
    Ok(auth::Keys::new(secret.as_bytes())?)
}

/// `bytes` random bytes as lowercase hex.
pub fn random_hex(bytes: usize) -> anyhow::Result<String> {
    Ok(random_bytes(bytes)?
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Bytes from the kernel's random source, for keys and secrets.
pub fn random_bytes(n: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = vec![0u8; n];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf)
}
