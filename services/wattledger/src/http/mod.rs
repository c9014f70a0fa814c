//! The HTTP API: one router per resource, merged here. The server (`crate::server`) mounts it
//! beside the dashboard and puts the layers every request passes through around both.

pub mod admission;
pub mod admission_policy;
pub mod budgets;
pub mod chargeback;
pub mod efficiency;
pub mod error;
pub mod exposition;
pub mod extract;
pub mod grid_events;
pub mod ingest;
pub mod json;
pub mod openapi;
pub mod power;
pub mod power_policy;
pub mod prometheus;
pub mod tokens;
pub mod usage;
mod validate;
pub mod webhooks;

use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use utoipa::ToSchema;

/// Every route of the API, without state or layers.
pub fn router() -> Router<AppState> {
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
        .route(
            "/v1/admission/policies/{tenant}",
            get(admission_policy::get_policy).put(admission_policy::put_policy),
        )
}

/// How long `/health` waits for the database before saying it is away.
const HEALTH_DB_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// How the server is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum HealthStatus {
    Ok,
    /// The server serves but something needs a look (admission decisions refused by the
    /// database, or waiting for it).
    Degraded,
    /// The database does not answer (503).
    Unavailable,
}

#[derive(Serialize, ToSchema)]
pub struct Health {
    pub status: HealthStatus,
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
        (false, _) => (StatusCode::SERVICE_UNAVAILABLE, HealthStatus::Unavailable),
        (true, false) => (StatusCode::OK, HealthStatus::Degraded),
        (true, true) => (StatusCode::OK, HealthStatus::Ok),
    };
    let body = Health {
        status,
        database,
        reasons,
        dirty_hours: dirty,
        admission: writer,
        version: env!("CARGO_PKG_VERSION").into(),
    };
    (code, Json(body))
}
