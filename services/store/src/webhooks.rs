//! Webhook endpoints, the outbox of messages to deliver, and every attempt. The dispatcher
//! claims due messages with `FOR UPDATE SKIP LOCKED`, so several replicas deliver side by
//! side without sending a message twice at once.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use uuid::Uuid;
use wattledger_domain::webhooks::MessageState;

use crate::{Scope, StoreResult};

/// A webhook endpoint, as the API shows it (never its secret).
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = EndpointView))]
pub struct Endpoint {
    pub id: Uuid,
    pub tenant: String,
    pub url: String,
    pub description: String,
    /// Empty: every event type.
    pub event_types: Vec<String>,
    pub enabled: bool,
    pub disabled_reason: Option<String>,
    /// While a rotation overlaps: until when the previous secret also signs.
    #[serde(rename = "previous_secret_until")]
    pub previous_until: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

pub struct NewEndpoint<'a> {
    pub tenant_id: i64,
    pub url: &'a str,
    pub description: &'a str,
    pub event_types: &'a [String],
    pub secret: &'a str,
}

pub async fn create(pool: &PgPool, e: NewEndpoint<'_>) -> StoreResult<Endpoint> {
    let id = Uuid::now_v7();
    sqlx::query!(
        "INSERT INTO webhook_endpoints (id, tenant_id, url, description, event_types, secret)
         VALUES ($1, $2, $3, $4, $5, $6)",
        id,
        e.tenant_id,
        e.url,
        e.description,
        e.event_types,
        e.secret,
    )
    .execute(pool)
    .await?;
    get(pool, id, &Scope::All)
        .await?
        .ok_or(crate::StoreError::NotFound)
}

pub async fn list(pool: &PgPool, scope: &Scope) -> StoreResult<Vec<Endpoint>> {
    endpoints(pool, None, scope).await
}

/// One endpoint the caller may see; another tenant's is `None`, as a missing one is.
pub async fn get(pool: &PgPool, id: Uuid, scope: &Scope) -> StoreResult<Option<Endpoint>> {
    Ok(endpoints(pool, Some(id), scope).await?.pop())
}

/// The endpoints in `scope`, or the one of them with `id` (at most one row: ids are keys).
async fn endpoints(pool: &PgPool, id: Option<Uuid>, scope: &Scope) -> StoreResult<Vec<Endpoint>> {
    Ok(sqlx::query_as!(
        Endpoint,
        "SELECT e.id, t.key AS tenant, e.url, e.description, e.event_types,
                e.enabled, e.disabled_reason, e.previous_until, e.created_at
         FROM webhook_endpoints e JOIN tenants t ON t.id = e.tenant_id
         WHERE ($1::uuid IS NULL OR e.id = $1) AND ($2::bigint IS NULL OR e.tenant_id = $2)
         ORDER BY e.created_at",
        id,
        scope.tenant(),
    )
    .fetch_all(pool)
    .await?)
}

/// `NotFound` unless exactly one row in scope was changed.
fn one_row(affected: u64) -> StoreResult<()> {
    if affected == 1 {
        Ok(())
    } else {
        Err(crate::StoreError::NotFound)
    }
}

/// Enables or disables an endpoint `scope` may see; enabling clears the reason it was
/// disabled. Another tenant's endpoint is not found, as a missing one is.
pub async fn set_enabled(
    pool: &PgPool,
    id: Uuid,
    scope: &Scope,
    enabled: bool,
    reason: Option<&str>,
) -> StoreResult<()> {
    one_row(
        sqlx::query!(
            "UPDATE webhook_endpoints SET enabled = $2, disabled_reason = $3, updated_at = now()
             WHERE id = $1 AND ($4::bigint IS NULL OR tenant_id = $4)",
            id,
            enabled,
            reason,
            scope.tenant(),
        )
        .execute(pool)
        .await?
        .rows_affected(),
    )
}

pub async fn delete(pool: &PgPool, id: Uuid, scope: &Scope) -> StoreResult<()> {
    one_row(
        sqlx::query!(
            "DELETE FROM webhook_endpoints WHERE id = $1 AND ($2::bigint IS NULL OR tenant_id = $2)",
            id,
            scope.tenant(),
        )
        .execute(pool)
        .await?
        .rows_affected(),
    )
}

/// A new secret signs from now; the old one signs beside it until `overlap_until`.
pub async fn rotate(
    pool: &PgPool,
    id: Uuid,
    scope: &Scope,
    secret: &str,
    overlap_until: DateTime<Utc>,
) -> StoreResult<()> {
    one_row(
        sqlx::query!(
            "UPDATE webhook_endpoints SET previous_secret = secret, previous_until = $3, secret = $2,
                    updated_at = now()
             WHERE id = $1 AND ($4::bigint IS NULL OR tenant_id = $4)",
            id,
            secret,
            overlap_until,
            scope.tenant(),
        )
        .execute(pool)
        .await?
        .rows_affected(),
    )
}

/// A message due for delivery, with what signing and sending it needs.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Due {
    pub id: String,
    pub endpoint_id: Uuid,
    pub url: String,
    pub secret: String,
    pub previous_secret: Option<String>,
    pub previous_until: Option<DateTime<Utc>>,
    pub payload: String,
    pub attempts: i32,
}

/// Claims up to `limit` due messages: locked in `tx` until their attempts are recorded.
pub async fn claim_due(tx: &mut Transaction<'_, Postgres>, limit: i64) -> StoreResult<Vec<Due>> {
    Ok(sqlx::query_as!(
        Due,
        "SELECT m.id, m.endpoint_id, e.url, e.secret, e.previous_secret, e.previous_until,
                m.payload, m.attempts
         FROM webhook_messages m JOIN webhook_endpoints e ON e.id = m.endpoint_id
         WHERE m.state = 'pending' AND m.next_attempt_at <= now() AND e.enabled
         ORDER BY m.next_attempt_at
         LIMIT $1
         FOR UPDATE OF m SKIP LOCKED",
        limit,
    )
    .fetch_all(&mut **tx)
    .await?)
}

pub struct Attempt<'a> {
    pub message_id: &'a str,
    pub attempt: i32,
    pub started_at: DateTime<Utc>,
    pub status: Option<i32>,
    pub latency_ms: i32,
    pub error: Option<&'a str>,
}

/// What happens to the message after an attempt.
pub enum After {
    Delivered,
    RetryAt(DateTime<Utc>),
    Dead,
}

pub async fn record_attempt(
    tx: &mut Transaction<'_, Postgres>,
    a: &Attempt<'_>,
    after: After,
) -> StoreResult<()> {
    sqlx::query!(
        "INSERT INTO webhook_attempts (message_id, attempt, started_at, status, latency_ms, error)
         VALUES ($1, $2, $3, $4, $5, $6)",
        a.message_id,
        a.attempt,
        a.started_at,
        a.status,
        a.latency_ms,
        a.error,
    )
    .execute(&mut **tx)
    .await?;
    let (state, next, delivered) = match after {
        After::Delivered => (MessageState::Delivered, None, true),
        After::RetryAt(t) => (MessageState::Pending, Some(t), false),
        After::Dead => (MessageState::Dead, None, false),
    };
    sqlx::query!(
        "UPDATE webhook_messages SET attempts = $2, state = $3,
                next_attempt_at = coalesce($4, next_attempt_at)
         WHERE id = $1",
        a.message_id,
        a.attempt,
        state.as_str(),
        next,
    )
    .execute(&mut **tx)
    .await?;
    // Its own statement: a distributed PostgreSQL refuses now() inside CASE in an UPDATE of
    // its tables, even of one on the coordinator.
    if delivered {
        sqlx::query!(
            "UPDATE webhook_messages SET delivered_at = now() WHERE id = $1",
            a.message_id
        )
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// The receiver answered 410 Gone: no more deliveries to it.
pub async fn disable_gone(tx: &mut Transaction<'_, Postgres>, endpoint: Uuid) -> StoreResult<()> {
    sqlx::query!(
        "UPDATE webhook_endpoints SET enabled = false,
                disabled_reason = 'the receiver answered 410 Gone', updated_at = now()
         WHERE id = $1",
        endpoint,
    )
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// A message of an endpoint's outbox with its attempts, as the API lists it.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MessageView {
    /// The `webhook-id`: the same on every attempt.
    pub id: String,
    #[serde(skip)]
    pub endpoint_id: Uuid,
    pub event_type: String,
    pub state: MessageState,
    pub attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
    /// Every attempt: number, start, HTTP status, latency in ms, error.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub history: serde_json::Value,
}

/// An endpoint's messages, newest first, each with its attempts (none for an endpoint out of
/// `scope`).
pub async fn messages(
    pool: &PgPool,
    endpoint: Uuid,
    scope: &Scope,
    limit: i64,
) -> StoreResult<Vec<MessageView>> {
    Ok(sqlx::query_as!(
        MessageView,
        r#"SELECT m.id, m.endpoint_id, m.event_type, m.state AS "state: MessageState", m.attempts,
                m.next_attempt_at,
                m.created_at, m.delivered_at,
                coalesce((SELECT jsonb_agg(jsonb_build_object('attempt', a.attempt,
                              'started_at', a.started_at, 'status', a.status,
                              'latency_ms', a.latency_ms, 'error', a.error) ORDER BY a.attempt)
                          FROM webhook_attempts a WHERE a.message_id = m.id), '[]') AS "history!"
         FROM webhook_messages m JOIN webhook_endpoints e ON e.id = m.endpoint_id
         WHERE m.endpoint_id = $1 AND ($3::bigint IS NULL OR e.tenant_id = $3)
         ORDER BY m.created_at DESC, m.id LIMIT $2"#,
        endpoint,
        limit,
        scope.tenant(),
    )
    .fetch_all(pool)
    .await?)
}

/// Sends a dead (or delivered) message again, as the same message: same id, same body.
pub async fn redeliver(
    pool: &PgPool,
    endpoint: Uuid,
    scope: &Scope,
    message: &str,
) -> StoreResult<bool> {
    Ok(sqlx::query!(
        "UPDATE webhook_messages m SET state = 'pending', next_attempt_at = now()
         FROM webhook_endpoints e
         WHERE m.id = $1 AND m.endpoint_id = $2 AND e.id = m.endpoint_id
           AND ($3::bigint IS NULL OR e.tenant_id = $3)",
        message,
        endpoint,
        scope.tenant(),
    )
    .execute(pool)
    .await?
    .rows_affected()
        == 1)
}

/// A message body as Standard Webhooks has it: type, timestamp and data. Fixed when the
/// message is queued: the signature covers these exact bytes on every attempt.
fn body(event_type: &str, data: Value, now: DateTime<Utc>) -> String {
    serde_json::json!({
        "type": event_type,
        "timestamp": now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "data": data,
    })
    .to_string()
}

/// Queues an event: one message per enabled endpoint of the tenant that takes its type, in
/// the caller's transaction (the outbox).
pub async fn enqueue(
    conn: &mut PgConnection,
    tenant_id: i64,
    event_type: &str,
    data: Value,
    now: DateTime<Utc>,
) -> StoreResult<u64> {
    Ok(sqlx::query!(
        "INSERT INTO webhook_messages (id, endpoint_id, event_type, payload)
         SELECT 'msg_' || replace(gen_random_uuid()::text, '-', ''), e.id, $2, $3
         FROM webhook_endpoints e
         WHERE e.tenant_id = $1 AND e.enabled
           AND (cardinality(e.event_types) = 0 OR $2 = ANY(e.event_types))",
        tenant_id,
        event_type,
        body(event_type, data, now),
    )
    .execute(conn)
    .await?
    .rows_affected())
}

/// An event to one endpoint whatever types it takes (a `webhook.test`), due now; its id.
pub async fn enqueue_to(
    pool: &PgPool,
    endpoint: Uuid,
    event_type: &str,
    data: Value,
    now: DateTime<Utc>,
) -> StoreResult<String> {
    let id = format!("msg_{}", Uuid::now_v7().simple());
    sqlx::query!(
        "INSERT INTO webhook_messages (id, endpoint_id, event_type, payload)
         VALUES ($1, $2, $3, $4)",
        &id,
        endpoint,
        event_type,
        body(event_type, data, now),
    )
    .execute(pool)
    .await?;
    Ok(id)
}
