//! Webhook endpoints over the API: a tenant (or admin and finance for any tenant) registers
//! a URL and the event types it wants, gets the signing secret once, rotates it, sends a
//! test event, and reads every message and attempt; an admin redelivers a message.

use super::error::{ApiError, ApiResult, ErrorBody, FieldError};
use super::extract::{Caller, RawBatch};
use crate::auth::Role;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{Duration, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;
use uuid::Uuid;
use wattledger_domain::input;
use wattledger_domain::webhooks::Secret;
use wattledger_store::budget_alerts::{PROJECTED_EXCEED, THRESHOLD_CROSSED};
use wattledger_store::webhooks::{self as store, Endpoint, NewEndpoint};
use wattledger_store::Scope;

pub const TEST_EVENT: &str = "webhook.test";
pub const EVENT_TYPES: [&str; 4] = [
    THRESHOLD_CROSSED,
    PROJECTED_EXCEED,
    crate::app::month_close::CLOSED_EVENT,
    TEST_EVENT,
];
/// How long the previous secret keeps signing after a rotation, unless asked otherwise.
const DEFAULT_OVERLAP_S: i64 = 24 * 3600;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/webhooks/endpoints", post(create).get(list))
        .route(
            "/v1/webhooks/endpoints/{id}",
            get(show).patch(update).delete(remove),
        )
        .route("/v1/webhooks/endpoints/{id}/rotate", post(rotate))
        .route("/v1/webhooks/endpoints/{id}/test", post(test))
        .route("/v1/webhooks/endpoints/{id}/messages", get(messages))
        .route(
            "/v1/webhooks/endpoints/{id}/messages/{message}/redeliver",
            post(redeliver),
        )
}

const ROLES: [Role; 3] = [Role::Admin, Role::Finance, Role::Tenant];

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewEndpointBody {
    /// The tenant whose events go there (a tenant token: its own, may be left out).
    pub tenant: Option<String>,
    /// `https://…`; names are resolved and refused if any address is loopback, private,
    /// link-local or a metadata service (unless the operator allows it).
    pub url: String,
    #[serde(default)]
    pub description: String,
    /// `budget.threshold_crossed`, `budget.projected_exceed`, `chargeback.closed`, `webhook.test`; empty or
    /// absent: all.
    #[serde(default)]
    pub event_types: Vec<String>,
    /// A `whsec_…` secret of 24 to 64 bytes the receiver already holds; generated if absent.
    pub secret: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointWithSecret {
    pub endpoint: Endpoint,
    /// `whsec_…`: shown once, here. Receivers verify `webhook-signature` with it.
    pub secret: String,
}

fn parse_body<T: DeserializeOwned>(bytes: &[u8]) -> ApiResult<T> {
    serde_json::from_slice(bytes).map_err(|e| super::json::typed_error(&e))
}

fn parse_id(id: &str) -> ApiResult<Uuid> {
    id.parse().map_err(|_| ApiError::NotFound)
}

/// The endpoint if the caller may see it; another tenant's is not found, as a missing one.
async fn visible(state: &AppState, caller: &Caller, id: &str) -> ApiResult<Endpoint> {
    caller.require(&ROLES)?;
    store::get(&state.pool, parse_id(id)?, &caller.scope)
        .await?
        .ok_or(ApiError::NotFound)
}

fn check_event_types(types: &[String]) -> Vec<FieldError> {
    types
        .iter()
        .filter(|t| !EVENT_TYPES.contains(&t.as_str()))
        .map(|t| {
            FieldError::new(
                0,
                "event_types",
                format!("'{t}' is not one of {}", EVENT_TYPES.join(", ")),
            )
        })
        .collect()
}

/// Registers an endpoint; the answer holds its signing secret, which is not shown again.
#[utoipa::path(post, path = "/v1/webhooks/endpoints", tag = "webhooks", request_body = NewEndpointBody,
    security(("bearer" = [])),
    responses((status = 201, body = EndpointWithSecret), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 413, body = ErrorBody),
              (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    RawBatch(body): RawBatch,
) -> ApiResult<(StatusCode, Json<EndpointWithSecret>)> {
    caller.require(&ROLES)?;
    let b: NewEndpointBody = parse_body(&body)?;
    let tenant_id = match (&caller.scope, &b.tenant) {
        (Scope::Tenant(own), None) => *own,
        (scope, Some(key)) => {
            let id = state.tenant_id(key).await?.ok_or(ApiError::NotFound)?;
            scope.clone().narrow(id).ok_or(ApiError::NotFound)?;
            id
        }
        (Scope::All, None) => {
            return Err(ApiError::Validation(vec![FieldError::new(
                0,
                "tenant",
                "is required",
            )]))
        }
    };
    let mut bad = check_event_types(&b.event_types);
    for (field, value, max) in [
        ("description", Some(&b.description), 500),
        ("url", Some(&b.url), 2048),
        ("tenant", b.tenant.as_ref(), 256),
    ] {
        if let Some(Err(e)) = value.map(|v| input::text(v, max)) {
            bad.push(FieldError::new(0, field, e.to_string()));
        }
    }
    if bad.iter().all(|e| e.field != "url") {
        if let Err(why) = crate::webhooks::checked(&b.url, state.config.webhook_allow).await {
            bad.push(FieldError::new(0, "url", why));
        }
    }
    if let Some(given) = &b.secret {
        if let Err(e) = Secret::parse(given) {
            bad.push(FieldError::new(0, "secret", e.to_string()));
        }
    }
    if !bad.is_empty() {
        return Err(ApiError::Validation(bad));
    }
    let secret = match b.secret {
        Some(s) => s,
        None => crate::webhooks::new_secret()
            .map_err(|e| ApiError::Unavailable(format!("no random source: {e}")))?,
    };
    let endpoint = store::create(
        &state.pool,
        NewEndpoint {
            tenant_id,
            url: b.url.trim(),
            description: &b.description,
            event_types: &b.event_types,
            secret: &secret,
        },
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(EndpointWithSecret { endpoint, secret }),
    ))
}

/// The endpoints the caller may see.
#[utoipa::path(get, path = "/v1/webhooks/endpoints", tag = "webhooks", security(("bearer" = [])),
    responses((status = 200, body = Vec<Endpoint>), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody)))]
pub async fn list(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<Vec<Endpoint>>> {
    caller.require(&ROLES)?;
    let all = store::list(&state.pool, &caller.scope).await?;
    Ok(Json(all))
}

#[utoipa::path(get, path = "/v1/webhooks/endpoints/{id}", tag = "webhooks",
    params(("id" = String, Path, description = "Endpoint id")), security(("bearer" = [])),
    responses((status = 200, body = Endpoint), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Endpoint>> {
    Ok(Json(visible(&state, &caller, &id).await?))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateEndpointBody {
    pub enabled: bool,
}

/// Enables or disables an endpoint (enabling one disabled by a 410 resumes deliveries).
#[utoipa::path(patch, path = "/v1/webhooks/endpoints/{id}", tag = "webhooks",
    params(("id" = String, Path, description = "Endpoint id")), request_body = UpdateEndpointBody,
    security(("bearer" = [])),
    responses((status = 200, body = Endpoint), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 413, body = ErrorBody),
              (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    RawBatch(body): RawBatch,
) -> ApiResult<Json<Endpoint>> {
    let e = visible(&state, &caller, &id).await?;
    let b: UpdateEndpointBody = parse_body(&body)?;
    let reason = (!b.enabled).then_some("disabled through the API");
    store::set_enabled(&state.pool, e.id, &caller.scope, b.enabled, reason).await?;
    Ok(Json(
        store::get(&state.pool, e.id, &caller.scope)
            .await?
            .ok_or(ApiError::NotFound)?,
    ))
}

/// Deletes an endpoint with its messages and attempts.
#[utoipa::path(delete, path = "/v1/webhooks/endpoints/{id}", tag = "webhooks",
    params(("id" = String, Path, description = "Endpoint id")), security(("bearer" = [])),
    responses((status = 204), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody)))]
pub async fn remove(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let e = visible(&state, &caller, &id).await?;
    store::delete(&state.pool, e.id, &caller.scope).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateBody {
    /// How long the previous secret keeps signing beside the new one (default 86400 s).
    pub overlap_s: Option<i64>,
}

/// A new secret, shown once; the previous one keeps signing for the overlap, so receivers
/// can switch without missing a delivery.
#[utoipa::path(post, path = "/v1/webhooks/endpoints/{id}/rotate", tag = "webhooks",
    params(("id" = String, Path, description = "Endpoint id")), request_body = RotateBody,
    security(("bearer" = [])),
    responses((status = 200, body = EndpointWithSecret), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 413, body = ErrorBody),
              (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn rotate(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    RawBatch(body): RawBatch,
) -> ApiResult<Json<EndpointWithSecret>> {
    let e = visible(&state, &caller, &id).await?;
    let b: RotateBody = if body.is_empty() {
        RotateBody::default()
    } else {
        parse_body(&body)?
    };
    let overlap = b.overlap_s.unwrap_or(DEFAULT_OVERLAP_S);
    if !(0..=30 * 86_400).contains(&overlap) {
        return Err(ApiError::Validation(vec![FieldError::new(
            0,
            "overlap_s",
            "must be between 0 and 2592000 (30 days)",
        )]));
    }
    let secret = crate::webhooks::new_secret()
        .map_err(|e| ApiError::Unavailable(format!("no random source: {e}")))?;
    store::rotate(
        &state.pool,
        e.id,
        &caller.scope,
        &secret,
        Utc::now() + Duration::seconds(overlap),
    )
    .await?;
    let endpoint = store::get(&state.pool, e.id, &caller.scope)
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(Json(EndpointWithSecret { endpoint, secret }))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Queued {
    /// The `webhook-id` it is sent with.
    pub message_id: String,
}

/// Queues a `webhook.test` event to this endpoint, due at once.
#[utoipa::path(post, path = "/v1/webhooks/endpoints/{id}/test", tag = "webhooks",
    params(("id" = String, Path, description = "Endpoint id")), security(("bearer" = [])),
    responses((status = 202, body = Queued), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn test(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<(StatusCode, Json<Queued>)> {
    let e = visible(&state, &caller, &id).await?;
    let data = json!({"endpoint_id": e.id, "tenant": e.tenant,
                      "message": "a test event from wattledger"});
    let message_id = store::enqueue_to(&state.pool, e.id, TEST_EVENT, data, Utc::now()).await?;
    Ok((StatusCode::ACCEPTED, Json(Queued { message_id })))
}

/// The endpoint's latest 200 messages, each with every attempt.
#[utoipa::path(get, path = "/v1/webhooks/endpoints/{id}/messages", tag = "webhooks",
    params(("id" = String, Path, description = "Endpoint id")), security(("bearer" = [])),
    responses((status = 200, body = Vec<store::MessageView>), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn messages(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Vec<store::MessageView>>> {
    let e = visible(&state, &caller, &id).await?;
    Ok(Json(
        store::messages(&state.pool, e.id, &caller.scope, 200).await?,
    ))
}

/// Sends a message again (a dead-lettered one, usually), with the same id and body (admin).
#[utoipa::path(post, path = "/v1/webhooks/endpoints/{id}/messages/{message}/redeliver",
    tag = "webhooks",
    params(("id" = String, Path, description = "Endpoint id"),
           ("message" = String, Path, description = "Message id (webhook-id)")),
    security(("bearer" = [])),
    responses((status = 202, body = Queued), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn redeliver(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, message)): Path<(String, String)>,
) -> ApiResult<(StatusCode, Json<Queued>)> {
    caller.require(&[Role::Admin])?;
    let e = visible(&state, &caller, &id).await?;
    if !store::redeliver(&state.pool, e.id, &caller.scope, &message).await? {
        return Err(ApiError::NotFound);
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(Queued {
            message_id: message,
        }),
    ))
}
