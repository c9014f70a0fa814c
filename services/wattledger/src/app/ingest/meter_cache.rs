//! Meter key → id and kind, for sample ingest: every push of every agent names its node's
//! meters, and the inventory changes rarely, so a push need not ask the database each time.
//!
//! Only meters found are kept (a meter registered on another replica is found at its first
//! sample). An entry is trusted for `TTL`: a meter re-registered elsewhere (another kind,
//! another parent) is seen by this replica within that time; on this replica, a meters
//! ingest empties the cache at once. Only the id, the site (fixed once a meter is
//! registered) and whether the meter is a MIG instance (which has no counter of its own)
//! come from the cache.

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::{Duration, Instant};
use wattledger_store::inventory::{self, MeterRef};
use wattledger_store::StoreResult;

const TTL: Duration = Duration::from_secs(30);

#[derive(Default)]
pub struct MeterCache {
    entries: RwLock<HashMap<String, (MeterRef, Instant)>>,
}

impl MeterCache {
    /// The meters of these keys that exist, from the cache where fresh, else the database.
    pub async fn by_key(
        &self,
        pool: &sqlx::PgPool,
        keys: &[String],
    ) -> StoreResult<HashMap<String, MeterRef>> {
        let now = Instant::now();
        let mut found = HashMap::with_capacity(keys.len());
        let mut missing = Vec::new();
        {
            let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
            for key in keys {
                match entries.get(key) {
                    Some((meter, at)) if now.duration_since(*at) < TTL => {
                        found.insert(key.clone(), meter.clone());
                    }
                    _ => missing.push(key.clone()),
                }
            }
        }
        if !missing.is_empty() {
            let fresh = inventory::meters_by_key(pool, &missing).await?;
            let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
            for (key, meter) in &fresh {
                entries.insert(key.clone(), (meter.clone(), now));
            }
            found.extend(fresh);
        }
        Ok(found)
    }

    /// Forgets every meter: the inventory has just changed.
    pub fn clear(&self) {
        self.entries
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}
