//! The HTTP API: one router per resource, merged here, with the shared state.

pub mod admission;
pub mod budgets;
pub mod chargeback;
pub mod efficiency;
pub mod error;
pub mod extract;
pub mod ingest;
pub mod openapi;
pub mod prometheus;
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
use serde::Serialize;
use sqlx::PgPool;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use tower_http::trace::TraceLayer;
use utoipa::ToSchema;
use wattledger_store::inventory::{self, KeyedTable};

#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub keys: Keys,
    pub config: Arc<Config>,
    pub admission: Arc<crate::admission::Admission>,
    /// Tenant key → id, for tenant tokens: tenants are few and rarely change.
    tenants: Arc<RwLock<HashMap<String, i64>>>,
}

impl AppState {
    pub fn new(
        pool: PgPool,
        keys: Keys,
        config: Config,
        admission: Arc<crate::admission::Admission>,
    ) -> Self {
        AppState {
            pool,
            keys,
            config: Arc::new(config),
            admission,
            tenants: Arc::default(),
        }
    }

    pub async fn tenant_id(&self, key: &str) -> ApiResult<Option<i64>> {
        if let Some(id) = self.tenants.read().ok().and_then(|m| m.get(key).copied()) {
            return Ok(Some(id));
        }
        let ids = inventory::ids_by_key(&self.pool, KeyedTable::Tenants, &[key.to_owned()]).await?;
        let id = ids.get(key).copied();
        if let (Some(id), Ok(mut m)) = (id, self.tenants.write()) {
            m.insert(key.to_owned(), id);
        }
        Ok(id)
    }

    pub fn forget_tenants(&self) {
        if let Ok(mut m) = self.tenants.write() {
            m.clear();
        }
    }
}

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
        .route("/v1/metrics/efficiency", get(efficiency::get_efficiency))
        .merge(crate::dashboard::router())
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(limit))
        .layer(TraceLayer::new_for_http())
        // A bug in one handler answers 500 instead of dropping the connection.
        .layer(tower_http::catch_panic::CatchPanicLayer::new())
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::NotFound
}

#[derive(Serialize, ToSchema)]
pub struct Health {
    /// `ok`, or `degraded` when the database does not answer.
    pub status: String,
    pub database: bool,
    /// Hours waiting for attribution.
    pub dirty_hours: Option<i64>,
    pub version: String,
}

/// Liveness and readiness.
#[utoipa::path(get, path = "/health", tag = "service",
    responses((status = 200, body = Health), (status = 503, body = Health)))]
pub async fn health(State(state): State<AppState>) -> impl IntoResponse {
    let dirty = wattledger_store::dirty::count(&state.pool).await.ok();
    let ok = dirty.is_some();
    let body = Health {
        status: if ok { "ok" } else { "degraded" }.into(),
        database: ok,
        dirty_hours: dirty,
        version: env!("CARGO_PKG_VERSION").into(),
    };
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body))
}
