//! The state every request handler and page shares: the database, the signing keys, the
//! configuration, admission, this process's telemetry and the ingest writers. Built once at
//! start-up; cloning it is cheap (every field is shared).

use crate::auth::Keys;
use crate::config::Config;
use parking_lot::RwLock;
use sqlx::PgPool;
use std::collections::HashMap;
use std::sync::Arc;
use wattledger_store::inventory::{self, KeyedTable};
use wattledger_store::StoreResult;

#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    /// Shared, not copied: the state is cloned several times per request (each extractor
    /// and middleware takes its own), and a copy of the keys is a dozen allocations.
    pub keys: Arc<Keys>,
    pub config: Arc<Config>,
    pub admission: Arc<crate::admission::Admission>,
    /// This process's request, ingest and admission counters, for `/metrics`.
    pub telemetry: Arc<crate::telemetry::Telemetry>,
    /// Tenant key → id, for tenant tokens: tenants are few and rarely change.
    tenants: Arc<RwLock<HashMap<String, i64>>>,
    /// Sample batches are written in groups (`ingest::group_commit`).
    pub samples: crate::app::ingest::group_commit::SampleWriter,
    /// The meters sample batches name (`ingest::meter_cache`).
    pub meters: Arc<crate::app::ingest::meter_cache::MeterCache>,
    /// One permit per ingest request in flight (`http::ingest::in_flight`).
    pub ingest_slots: Arc<tokio::sync::Semaphore>,
}

impl AppState {
    pub fn new(
        pool: PgPool,
        keys: Keys,
        config: Config,
        admission: Arc<crate::admission::Admission>,
    ) -> Self {
        AppState {
            samples: crate::app::ingest::group_commit::SampleWriter::start(
                pool.clone(),
                config.max_batch_records,
            ),
            meters: Arc::default(),
            ingest_slots: Arc::new(tokio::sync::Semaphore::new(
                config.max_ingest_in_flight.max(1),
            )),
            pool,
            keys: Arc::new(keys),
            config: Arc::new(config),
            admission,
            telemetry: Arc::default(),
            tenants: Arc::default(),
        }
    }

    /// A tenant's id by key, from memory once it has been looked up.
    pub async fn tenant_id(&self, key: &str) -> StoreResult<Option<i64>> {
        if let Some(id) = self.tenants.read().get(key).copied() {
            return Ok(Some(id));
        }
        let ids = inventory::ids_by_key(&self.pool, KeyedTable::Tenants, &[key.to_owned()]).await?;
        let id = ids.get(key).copied();
        if let Some(id) = id {
            self.tenants.write().insert(key.to_owned(), id);
        }
        Ok(id)
    }

    pub fn forget_tenants(&self) {
        self.tenants.write().clear();
    }
}
