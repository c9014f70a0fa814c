//! Request extractors that fail in the API's error format: the caller (bearer token), a JSON
//! batch, and query strings (with the span rule every ranged query uses).

use super::error::{ApiError, ApiResult, FieldError};
use crate::auth::{Claims, Keys, Role};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{FromRef, FromRequest, FromRequestParts, Request};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use chrono::{DateTime, Duration, Utc};
use serde::de::DeserializeOwned;
use serde_json::Value;
use wattledger_domain::input::{self, SpanError};
use wattledger_store::Scope;

/// Who is calling: a verified token's role and the rows it may read.
#[derive(Debug, Clone)]
pub struct Caller {
    pub subject: String,
    pub role: Role,
    pub scope: Scope,
}

impl Caller {
    /// Refuses callers whose role is not in `roles`.
    pub fn require(&self, roles: &[Role]) -> Result<(), ApiError> {
        if self.role == Role::Admin || roles.contains(&self.role) {
            Ok(())
        } else {
            Err(ApiError::Forbidden)
        }
    }
}

/// The claims of the request's bearer token, verified (signature, times, claims' text,
/// revocation: `Keys::verify`); any failure is the API's 401. No database is asked.
pub(crate) fn bearer_claims(keys: &Keys, headers: &HeaderMap) -> Result<Claims, ApiError> {
    let header = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| ApiError::Unauthorized("missing bearer token".into()))?;
    let token = header
        .strip_prefix("Bearer ")
        .ok_or_else(|| ApiError::Unauthorized("expected 'Authorization: Bearer <token>'".into()))?;
    keys.verify(token.trim())
        .map_err(|e| ApiError::Unauthorized(e.to_string()))
}

impl<S> FromRequestParts<S> for Caller
where
    AppState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let state = AppState::from_ref(state);
        let claims = bearer_claims(&state.keys, &parts.headers)?;
        let scope = match (&claims.role, &claims.tenant) {
            (Role::Tenant, Some(key)) => {
                Scope::Tenant(state.tenant_id(key).await?.ok_or_else(|| {
                    ApiError::Unauthorized("the token's tenant does not exist".into())
                })?)
            }
            _ => Scope::All,
        };
        Ok(Caller {
            subject: claims.sub,
            role: claims.role,
            scope,
        })
    }
}

/// The admission webhook's caller (`POST /v1/admission/kubernetes`): a scheduler token; or,
/// with `WATTLEDGER_WEBHOOK_AUTH=open`, no token at all on a request that came over the TLS
/// listener (the API servers of EKS, GKE and AKS present none). A token that is sent is
/// verified either way.
#[derive(Debug, Clone, Copy)]
pub struct WebhookCaller;

impl<S> FromRequestParts<S> for WebhookCaller
where
    AppState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let app = AppState::from_ref(state);
        let open = app.config.webhook_auth == crate::config::WebhookAuth::Open
            && parts
                .extensions
                .get::<crate::server::serve::ViaTls>()
                .is_some();
        if open && !parts.headers.contains_key(AUTHORIZATION) {
            return Ok(WebhookCaller);
        }
        Caller::from_request_parts(parts, state)
            .await?
            .require(&[Role::Scheduler])?;
        Ok(WebhookCaller)
    }
}

/// A JSON body of the form `{"records": [...]}`, kept as raw values so each record can be
/// validated field by field and reported by index.
#[derive(Debug)]
pub struct Batch(pub Vec<Value>);

/// The raw bytes of a JSON body (content type and size checked, and no NUL in any string),
/// for endpoints with a typed fast path that falls back to [`Batch::parse`].
#[derive(Debug)]
pub struct RawBatch(pub Bytes);

/// The raw bytes of a JSON body, content type and size checked only: for a document that is
/// someone else's (a Kubernetes AdmissionReview carries a whole pod), whose fields the handler
/// reads and checks one by one.
#[derive(Debug)]
pub struct RawJson(pub Bytes);

impl Batch {
    /// Parses `{"records": [...]}`, enforcing the record limit.
    pub fn parse(bytes: &[u8], max_records: usize) -> Result<Batch, ApiError> {
        let value = super::json::parse(bytes)?;
        let Value::Object(mut body) = value else {
            return Err(ApiError::BadRequest(
                "the body must be an object: {\"records\": [...]}".into(),
            ));
        };
        let records = match body.remove("records") {
            Some(Value::Array(records)) => records,
            Some(_) => {
                return Err(ApiError::Validation(vec![FieldError {
                    index: 0,
                    field: "records".into(),
                    reason: "must be an array".into(),
                }]))
            }
            None => {
                return Err(ApiError::BadRequest(
                    "the body must have a \"records\" array".into(),
                ))
            }
        };
        if records.len() > max_records {
            return Err(ApiError::TooManyRecords {
                limit: max_records,
                got: records.len(),
            });
        }
        Ok(Batch(records))
    }
}

impl<S> FromRequest<S> for RawBatch
where
    AppState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let RawJson(bytes) = RawJson::from_request(req, state).await?;
        // Every body, typed fast paths included, meets the NUL rule here; the strict parse
        // runs only when the cheap scan finds the escape, to say where it is.
        if super::json::may_hold_nul(&bytes) {
            super::json::parse(&bytes)?;
        }
        Ok(RawBatch(bytes))
    }
}

impl<S> FromRequest<S> for RawJson
where
    AppState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let state = AppState::from_ref(state);
        let is_json = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| {
                let v = v.trim();
                v.eq_ignore_ascii_case("application/json") || v.ends_with("+json")
            });
        if !is_json {
            return Err(ApiError::UnsupportedMediaType);
        }
        let bytes = Bytes::from_request(req, &())
            .await
            .map_err(|e| match e.status() {
                StatusCode::PAYLOAD_TOO_LARGE => {
                    ApiError::PayloadTooLarge(state.config.max_body_bytes)
                }
                _ => ApiError::BadRequest(e.body_text()),
            })?;
        Ok(RawJson(bytes))
    }
}

impl<S> FromRequest<S> for Batch
where
    AppState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let max = AppState::from_ref(state).config.max_batch_records;
        let RawBatch(bytes) = RawBatch::from_request(req, state).await?;
        Batch::parse(&bytes, max)
    }
}

/// `Query<T>` whose rejection is an API error (422 with the reason).
pub struct Query<T>(pub T);

impl<T, S> FromRequestParts<S> for Query<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| Query(q.0))
            .map_err(|e| ApiError::InvalidQuery(e.body_text()))
    }
}

/// A query's span by the one rule (`domain::input::span`), its refusal a 422 naming the
/// parameter at fault.
pub(crate) fn span_of(
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
    default: Duration,
) -> ApiResult<(DateTime<Utc>, DateTime<Utc>)> {
    input::span(from, to, Utc::now(), default).map_err(|e| {
        ApiError::InvalidQuery(match e {
            SpanError::Backwards => format!("from: {e}"),
            SpanError::TooLong => format!("to: {e}"),
        })
    })
}

/// The id of the site a query names (`None` for every site); an unknown key is a 404.
pub(crate) async fn site_filter(
    pool: &sqlx::PgPool,
    key: Option<&String>,
) -> ApiResult<Option<i64>> {
    let Some(key) = key else {
        return Ok(None);
    };
    let ids = wattledger_store::inventory::ids_by_key(
        pool,
        wattledger_store::inventory::KeyedTable::Sites,
        std::slice::from_ref(key),
    )
    .await?;
    Ok(Some(*ids.get(key).ok_or(ApiError::NotFound)?))
}
