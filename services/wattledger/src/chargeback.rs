//! Month close as a job: finish the month's attribution, freeze it, write the exports.
//!
//! The API, the CLI and the demo all close through [`close`]. It drains the attribution
//! worker's backlog up to the end of the month first (a close must not bill a half-attributed
//! month), then lets the store freeze the month in one transaction; late data arriving in
//! between only leaves the close to try again. The exports go to `WATTLEDGER_EXPORT_DIR` when
//! one is configured, beside a `SHA256SUMS` file.

use crate::app::attribution::RunStats;
use crate::config::Config;
use crate::worker;
use chrono::Utc;
use sqlx::PgPool;
use std::path::{Path, PathBuf};
use wattledger_domain::chargeback::{self, Export, Issuer, Month};
use wattledger_store::chargeback::{self as store, CloseError, Closed};

/// Attempts before giving up when late data keeps dirtying the month during a close.
const ATTEMPTS: usize = 5;

/// Closes `month` as `actor`; `progress` hears about attribution done on the way.
pub async fn close(
    pool: &PgPool,
    config: &Config,
    month: Month,
    actor: &str,
    mut progress: impl FnMut(&RunStats),
) -> Result<Closed, CloseError> {
    let issuer = Issuer {
        name: config.issuer.clone(),
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        worker::drain(pool, &mut progress).await?;
        let now = Utc::now();
        let credits = crate::grid_events::credit_lines(pool, month.end(), now).await?;
        match store::close(pool, month, actor, &issuer, &credits, now).await {
            // Another worker holds a lease on some of the hours, or new data just arrived.
            Err(CloseError::Pending { hours, .. }) if attempt < ATTEMPTS => {
                tracing::info!(%month, hours, attempt, "waiting for attribution before closing");
                tokio::time::sleep(std::time::Duration::from_secs(attempt as u64)).await;
            }
            Ok(closed) => {
                tracing::info!(
                    %month,
                    version = closed.close.version,
                    statements = closed.close.statements.len(),
                    webhooks = closed.messages,
                    "month closed"
                );
                if let Some(dir) = &config.export_dir {
                    let written = write_exports(dir, month, closed.close.version, &closed.exports)
                        .map_err(|e| {
                            // The close stands (the files are in the database); say so.
                            tracing::error!(error = %e, dir = %dir.display(), "writing the exports failed; `wattledger chargeback export` writes them again");
                        })
                        .ok();
                    if let Some(folder) = written {
                        tracing::info!(folder = %folder.display(), "exports written");
                    }
                }
                return Ok(closed);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Writes exports into `dir/<month>/v<version>/` with a `SHA256SUMS` file (`sha256sum -c`
/// checks it); returns the folder. Files are written whole, then renamed into place.
pub fn write_exports(
    dir: &Path,
    month: Month,
    version: u32,
    exports: &[Export],
) -> std::io::Result<PathBuf> {
    let folder = dir.join(month.to_string()).join(format!("v{version}"));
    std::fs::create_dir_all(&folder)?;
    let mut files: Vec<(String, Vec<u8>)> = exports
        .iter()
        .map(|e| (e.file_name.clone(), e.content.clone()))
        .collect();
    files.push((
        "SHA256SUMS".to_owned(),
        chargeback::checksums(exports).into_bytes(),
    ));
    for (name, content) in files {
        let tmp = folder.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, &content)?;
        std::fs::rename(&tmp, folder.join(&name))?;
    }
    Ok(folder)
}
