//! The HTTP API: one router per resource, merged here, with the shared state.

pub mod admission;
pub mod budgets;
pub mod chargeback;
pub mod client_addr;
pub mod efficiency;
pub mod error;
pub mod exposition;
pub mod extract;
pub mod grid_events;
pub mod guard;
pub mod ingest;
pub mod json;
pub mod openapi;
pub mod power;
pub mod power_policy;
pub mod prometheus;
pub mod serve;
pub mod telemetry;
pub mod tls;
pub mod tokens;
pub mod usage;
mod validate;
pub mod webhooks;

use crate::auth::Keys;
use crate::config::Config;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use error::{ApiError, ApiResult};
use parking_lot::RwLock;
use serde::Serialize;
use sqlx::PgPool;
use std::collections::HashMap;
use std::sync::Arc;
use tower_http::trace::TraceLayer;
use utoipa::ToSchema;
use wattledger_store::inventory::{self, KeyedTable};

#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    /// Shared, not copied: the state is cloned several times per request (each extractor
    /// and middleware takes its own), and a copy of the keys is a dozen allocations.
    pub keys: Arc<Keys>,
    pub config: Arc<Config>,
    pub admission: Arc<crate::admission::Admission>,
    /// This process's request, ingest and admission counters, for `/metrics`.
    pub telemetry: Arc<telemetry::Telemetry>,
    /// Tenant key → id, for tenant tokens: tenants are few and rarely change.
    tenants: Arc<RwLock<HashMap<String, i64>>>,
    /// Sample batches are written in groups (`ingest::group_commit`).
    pub samples: ingest::group_commit::SampleWriter,
    /// The meters sample batches name (`ingest::meter_cache`).
    pub meters: Arc<ingest::meter_cache::MeterCache>,
}

impl AppState {
    pub fn new(
        pool: PgPool,
        keys: Keys,
        config: Config,
        admission: Arc<crate::admission::Admission>,
    ) -> Self {
        AppState {
            samples: ingest::group_commit::SampleWriter::start(
                pool.clone(),
                config.max_batch_records,
            ),
            meters: Arc::default(),
            pool,
            keys: Arc::new(keys),
            config: Arc::new(config),
            admission,
            telemetry: Arc::default(),
            tenants: Arc::default(),
        }
    }

    pub async fn tenant_id(&self, key: &str) -> ApiResult<Option<i64>> {
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

/// How long a request's body may take to arrive once its headers have.
const BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The whole application router.
pub fn app(state: AppState) -> Router {
    let limit = state.config.max_body_bytes;
    Router::new()
        .route("/health", get(health))
        .route("/v1/openapi.json", get(openapi::serve))
        .route("/metrics", get(prometheus::get_metrics))
        .merge(ingest::router())
        .merge(usage::router())
        .merge(admission::router())
        .merge(webhooks::router())
        .merge(budgets::router())
        .merge(chargeback::router())
        .merge(grid_events::router())
        .merge(tokens::router())
        .route("/v1/metrics/efficiency", get(efficiency::get_efficiency))
        .route("/v1/power/headroom", get(power::get_headroom))
        .route("/v1/power/grid", get(power::get_grid))
        .route("/v1/power/policies", get(power_policy::list_policies))
        .route(
            "/v1/power/policies/{site}",
            axum::routing::put(power_policy::put_policy),
        )
        .merge(crate::dashboard::router())
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(limit))
        // A client that declares a body and sends it slowly (or never) is not waited for.
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
            BODY_READ_TIMEOUT,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::requests,
        ))
        .layer(TraceLayer::new_for_http())
        // A bug in one handler answers 500 instead of dropping the connection.
        .layer(tower_http::catch_panic::CatchPanicLayer::new())
        .layer(axum::middleware::from_fn(guard::responses))
        // Outermost, so a request refused by the layers above is counted too; per route,
        // as every layer here, so it sees the matched path's template.
        .layer(axum::middleware::from_fn_with_state(
            state.telemetry.clone(),
            telemetry::track,
        ))
        .with_state(state)
}

/// An unknown path: the API's JSON error, or for a browser the dashboard's page.
async fn not_found(uri: axum::http::Uri) -> axum::response::Response {
    if guard::is_api(uri.path()) {
        ApiError::NotFound.into_response()
    } else {
        crate::dashboard::PageError::NotFound.into_response()
    }
}

/// How long `/health` waits for the database before saying it is away.
const HEALTH_DB_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(Serialize, ToSchema)]
pub struct Health {
    /// `ok`; `degraded` when the server serves but something needs a look (admission
    /// decisions refused by the database, or waiting for it); `unavailable` when the
    /// database does not answer (503).
    pub status: String,
    pub database: bool,
    /// Why the status is not `ok`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    /// Hours waiting for attribution.
    pub dirty_hours: Option<i64>,
    /// The admission decision writer.
    pub admission: crate::admission::WriterHealth,
    pub version: String,
}

/// Liveness and readiness, within a second whatever the database does.
#[utoipa::path(get, path = "/health", tag = "service",
    responses((status = 200, body = Health), (status = 503, body = Health)))]
pub async fn health(State(state): State<AppState>) -> impl IntoResponse {
    let dirty = tokio::time::timeout(
        HEALTH_DB_TIMEOUT,
        wattledger_store::dirty::count(&state.pool),
    )
    .await;
    let mut reasons = Vec::new();
    let dirty = match dirty {
        Ok(Ok(n)) => Some(n),
        Ok(Err(e)) => {
            reasons.push(format!("the database refused a query: {e}"));
            None
        }
        Err(_) => {
            reasons.push(format!(
                "the database did not answer within {} ms",
                HEALTH_DB_TIMEOUT.as_millis()
            ));
            None
        }
    };
    let writer = state.admission.writer_health();
    if writer.dead_lettered > 0 {
        reasons.push(format!(
            "{} admission decision(s) could not be stored and were kept as dead letters (admission_dead_letters)",
            writer.dead_lettered
        ));
    }
    if writer.retrying {
        reasons.push(format!(
            "{} admission decision(s) wait for the database",
            writer.queued
        ));
    }
    let database = dirty.is_some();
    let (code, status) = match (database, reasons.is_empty()) {
        (false, _) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        (true, false) => (StatusCode::OK, "degraded"),
        (true, true) => (StatusCode::OK, "ok"),
    };
    let body = Health {
        status: status.into(),
        database,
        reasons,
        dirty_hours: dirty,
        admission: writer,
        version: env!("CARGO_PKG_VERSION").into(),
    };
    (code, Json(body))
}
