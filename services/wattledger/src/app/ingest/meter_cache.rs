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
/// The most meters kept: five times a 100,000-GPU fleet's meters (GPUs, nodes, MIG
/// instances), so a fleet's pushes always hit it; what it holds is bounded all the same,
/// whatever is registered and retired over the years.
const MAX_ENTRIES: usize = 1 << 19;

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
            keep(&mut entries, &fresh, now, MAX_ENTRIES);
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

/// Adds `fresh` to `entries`, at most `max` of them: when full, the expired go, and if most
/// are still fresh the cache starts again (as the token store does) rather than scan itself
/// at every push; a meter dropped is read again at its next sample.
fn keep(
    entries: &mut HashMap<String, (MeterRef, Instant)>,
    fresh: &HashMap<String, MeterRef>,
    now: Instant,
    max: usize,
) {
    if entries.len() + fresh.len() > max {
        entries.retain(|_, (_, at)| now.duration_since(*at) < TTL);
        if entries.len() + fresh.len() > max / 2 {
            entries.clear();
        }
    }
    for (key, meter) in fresh.iter().take(max) {
        entries.insert(key.clone(), (meter.clone(), now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattledger_domain::meter_kind::MeterKind;

    fn meters(from: i64, n: i64) -> HashMap<String, MeterRef> {
        (from..from + n)
            .map(|id| {
                let meter = MeterRef {
                    id,
                    site_id: 1,
                    kind: MeterKind::Gpu,
                    parent_id: None,
                };
                (format!("n{id}-gpu0"), meter)
            })
            .collect()
    }

    #[test]
    fn the_cache_holds_at_most_its_bound() {
        let (start, mut entries) = (Instant::now(), HashMap::new());
        keep(&mut entries, &meters(0, 6), start, 8);
        assert_eq!(entries.len(), 6);
        // Full of fresh entries: it starts again with the new ones.
        keep(&mut entries, &meters(6, 4), start, 8);
        assert_eq!(entries.len(), 4);
        keep(&mut entries, &meters(10, 3), start, 8);
        assert_eq!(entries.len(), 7);
        // Later, with every entry expired: they go, the new ones stay.
        let later = start + TTL + Duration::from_secs(1);
        keep(&mut entries, &meters(20, 2), later, 8);
        let mut keys: Vec<&String> = entries.keys().collect();
        keys.sort();
        assert_eq!(keys, ["n20-gpu0", "n21-gpu0"]);
        // A single batch larger than the bound is cut to it.
        keep(&mut entries, &meters(100, 20), later, 8);
        assert_eq!(entries.len(), 8);
    }
}
