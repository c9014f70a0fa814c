//! Keeps this process's [`Revoked`] ids current without a database round trip per request:
//! LISTEN on the revocation channel learns each revocation as it commits; a full reload
//! after every (re)connection of the listener catches what was announced while it was away
//! (PostgreSQL does not replay notifications), and one every `every` heals a notification
//! lost any other way.

use super::{Revoked, LEEWAY_S};
use chrono::Utc;
use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::PgPool;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use uuid::Uuid;
use wattledger_store::api_tokens::{self as store, REVOKED_CHANNEL};
use wattledger_store::StoreResult;

/// The longest wait between two attempts to listen again.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Reads every revoked, unexpired token id into `revoked`.
pub async fn load(pool: &PgPool, revoked: &Revoked) -> StoreResult<()> {
    let now = Utc::now();
    let rows = store::revoked(pool, now - chrono::Duration::seconds(LEEWAY_S as i64)).await?;
    revoked.merge(
        rows.into_iter().map(|(jti, exp)| (jti, exp.timestamp())),
        now.timestamp(),
    );
    Ok(())
}

/// Follows revocations until `stop` turns true.
pub async fn run(
    pool: PgPool,
    revoked: Arc<Revoked>,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    tokio::select! {
        _ = stop.wait_for(|s| *s) => {}
        _ = listen(&pool, &revoked) => {}
        _ = reload_every(&pool, &revoked, every) => {}
    }
}

async fn reload(pool: &PgPool, revoked: &Revoked) {
    if let Err(e) = load(pool, revoked).await {
        tracing::warn!(error = %e, "reloading revoked API tokens failed; retrying later");
    }
}

async fn reload_every(pool: &PgPool, revoked: &Revoked, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        reload(pool, revoked).await;
    }
}

/// A listener on a connection of its own, not one of the pool's: it is held for good.
async fn subscribe(pool: &PgPool) -> Result<PgListener, sqlx::Error> {
    let own = PgPoolOptions::new()
        .max_connections(1)
        .max_lifetime(None)
        .idle_timeout(None)
        .connect_lazy_with((*pool.connect_options()).clone());
    let mut listener = PgListener::connect_with(&own).await?;
    listener.ignore_pool_close_event(true);
    listener.listen(REVOKED_CHANNEL).await?;
    Ok(listener)
}

async fn listen(pool: &PgPool, revoked: &Revoked) {
    let mut backoff = Duration::from_millis(100);
    loop {
        match subscribe(pool).await {
            Ok(mut listener) => {
                backoff = Duration::from_millis(100);
                // Listening from here on: what was revoked before is in the tables.
                reload(pool, revoked).await;
                loop {
                    match listener.try_recv().await {
                        Ok(Some(n)) => match parse(n.payload()) {
                            Some((jti, exp)) => revoked.add(jti, exp),
                            None => reload(pool, revoked).await,
                        },
                        // The connection was lost and made again (listening again): what
                        // was announced in between is only in the tables.
                        Ok(None) => reload(pool, revoked).await,
                        Err(e) => {
                            tracing::warn!(error = %e, "lost the revoked API tokens' channel");
                            break;
                        }
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for revoked API tokens; retrying");
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// `<jti> <expiry, Unix seconds>`, as `store::api_tokens::revoke` announces it.
fn parse(payload: &str) -> Option<(Uuid, i64)> {
    let (jti, exp) = payload.split_once(' ')?;
    Some((Uuid::try_parse(jti).ok()?, exp.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_are_read_or_refused_whole() {
        let id = Uuid::now_v7();
        assert_eq!(
            parse(&format!("{id} 1800000000")),
            Some((id, 1_800_000_000))
        );
        assert_eq!(parse(&id.to_string()), None);
        assert_eq!(parse("not-an-id 1800000000"), None);
        assert_eq!(parse(&format!("{id} soon")), None);
    }
}
