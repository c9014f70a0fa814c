//! The API's one error type. Every error leaves as JSON with a stable `code`, a `message`,
//! and for a refused batch the index, field and reason of each bad record.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;
use wattledger_store::StoreError;

/// One bad field of one record in a batch.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
pub struct FieldError {
    /// Position of the record in the batch, from 0.
    pub index: usize,
    pub field: String,
    pub reason: String,
}

impl FieldError {
    pub fn new(index: usize, field: &str, reason: impl Into<String>) -> Self {
        FieldError {
            index,
            field: field.to_owned(),
            reason: reason.into(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable machine-readable code: `unauthorized`, `forbidden`, `not_found`, `bad_request`,
    /// `unsupported_media_type`, `payload_too_large`, `too_many_records`, `validation_failed`,
    /// `unavailable`, `internal`.
    pub code: String,
    pub message: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    Unauthorized(String),
    #[error("this token's role may not do this")]
    Forbidden,
    #[error("not found")]
    NotFound,
    #[error("{0}")]
    BadRequest(String),
    #[error("the body must be JSON (Content-Type: application/json)")]
    UnsupportedMediaType,
    #[error("the request body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    #[error("a batch may hold at most {limit} records; this one has {got}")]
    TooManyRecords { limit: usize, got: usize },
    #[error("{} record(s) are invalid; nothing was written", .0.len())]
    Validation(Vec<FieldError>),
    #[error("{0}")]
    InvalidQuery(String),
    #[error("{0}")]
    Unavailable(String),
    /// As many requests of this kind are in flight as the server takes; nothing was read.
    #[error("the server is taking as many ingest batches as it can: send this one again after Retry-After seconds (nothing was written)")]
    Overloaded,
    /// The request is valid but the state does not allow it now; `code` says why.
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    #[error("internal error")]
    Store(#[from] StoreError),
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// Whether the caller is at fault (4xx): what it sent was refused, not lost.
    pub fn is_client_error(&self) -> bool {
        self.status_and_code().0.is_client_error()
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::Forbidden => (StatusCode::FORBIDDEN, "forbidden"),
            ApiError::NotFound | ApiError::Store(StoreError::NotFound) => {
                (StatusCode::NOT_FOUND, "not_found")
            }
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            ApiError::UnsupportedMediaType => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
            }
            ApiError::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            ApiError::TooManyRecords { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "too_many_records"),
            ApiError::Validation(_) => (StatusCode::UNPROCESSABLE_ENTITY, "validation_failed"),
            ApiError::InvalidQuery(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_query"),
            ApiError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ApiError::Overloaded => (StatusCode::TOO_MANY_REQUESTS, "overloaded"),
            ApiError::Conflict { code, .. } => (StatusCode::CONFLICT, code),
            // Two transactions met and this one gave way, or the database was out of reach:
            // nothing was written, and the same request can succeed later.
            ApiError::Store(e) if e.is_transient() => {
                (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
            }
            ApiError::Store(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }

    /// Seconds a client should wait before sending the same again, for a 503 or a 429.
    fn retry_after_s(&self) -> Option<u32> {
        match self {
            // Agents add their own jitter (up to as much again), so they do not come back
            // together.
            ApiError::Overloaded => Some(2),
            ApiError::Store(StoreError::Database(sqlx::Error::Database(_))) => Some(1),
            ApiError::Store(_) | ApiError::Unavailable(_) => Some(5),
            _ => None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        if status.is_server_error() {
            // Logged once here; the client gets an opaque message.
            tracing::error!(error = %self, detail = ?self, "request failed");
        }
        let errors = match &self {
            ApiError::Validation(e) => e.clone(),
            _ => Vec::new(),
        };
        let message = match &self {
            ApiError::Store(StoreError::NotFound) => "not found".to_owned(),
            ApiError::Store(e) if e.is_transient() => {
                "the database could not take this now (nothing was changed): send it again"
                    .to_owned()
            }
            other => other.to_string(),
        };
        let body = ErrorBody {
            error: ErrorDetail {
                code: code.to_owned(),
                message,
                errors,
            },
        };
        let mut response = (status, Json(body)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::TOO_MANY_REQUESTS {
            if let Some(s) = self.retry_after_s() {
                response
                    .headers_mut()
                    .insert(axum::http::header::RETRY_AFTER, s.into());
            }
        }
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}
