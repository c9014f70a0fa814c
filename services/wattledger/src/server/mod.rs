//! The server: the API and the dashboard mounted together, with the layers every request
//! passes through (body limits and timeouts, the guard, tracing, panics caught, telemetry),
//! and the listeners that serve them (HTTP and HTTPS, graceful shutdown).

pub mod client_addr;
pub mod guard;
pub mod serve;
pub mod tls;

use crate::http::error::ApiError;
use crate::state::AppState;
use axum::extract::DefaultBodyLimit;
use axum::response::IntoResponse;
use axum::Router;
use tower_http::trace::TraceLayer;

/// How long a request's body may take to arrive once its headers have.
const BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The whole application router.
pub fn app(state: AppState) -> Router {
    let limit = state.config.max_body_bytes;
    Router::new()
        .merge(crate::http::router())
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
            crate::telemetry::track,
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
