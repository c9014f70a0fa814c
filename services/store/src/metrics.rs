//! The reads behind `/metrics` that no API resource owns: the webhook outbox's state, the
//! sites' power envelopes, and the ledger of each site's latest complete attributed hour by
//! tenant and by model. Labels are keys of tenants, sites and models (bounded by the
//! inventory), never jobs or meters.

use crate::StoreResult;
use rust_decimal::Decimal;
use sqlx::PgPool;

/// The webhook outbox: messages waiting (neither delivered, dead nor cancelled), how long
/// the oldest has waited, and the dead-lettered messages kept.
#[derive(Debug, Clone, PartialEq)]
pub struct Outbox {
    pub pending: i64,
    pub oldest_pending_age_s: Option<f64>,
    pub dead: i64,
}

#[tracing::instrument(skip_all)]
pub async fn outbox(pool: &PgPool) -> StoreResult<Outbox> {
    Ok(sqlx::query_as!(
        Outbox,
        r#"SELECT count(*) FILTER (WHERE state = 'pending') AS "pending!",
                  extract(epoch FROM now() - min(created_at) FILTER (WHERE state = 'pending'))::float8
                      AS oldest_pending_age_s,
                  count(*) FILTER (WHERE state = 'dead') AS "dead!"
           FROM webhook_messages"#,
    )
    .fetch_one(pool)
    .await?)
}

/// A site and its power envelope, W.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    pub site: String,
    pub envelope_w: i64,
}

#[tracing::instrument(skip_all)]
pub async fn envelopes(pool: &PgPool) -> StoreResult<Vec<Envelope>> {
    Ok(sqlx::query_as!(
        Envelope,
        "SELECT key AS site, power_envelope_w AS envelope_w FROM sites ORDER BY key"
    )
    .fetch_all(pool)
    .await?)
}

/// A tenant's ledger at one site over the site's latest complete attributed hour. The cost
/// is in the site's currency; cost and carbon are `None` where no row of it has them.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantHour {
    pub tenant: String,
    pub site: String,
    pub currency: String,
    pub total_mj: i64,
    pub cost: Option<Decimal>,
    pub carbon_g: Option<Decimal>,
    /// The energy of work thrown away (`domain::badput`).
    pub badput_mj: i64,
}

/// Per site, its latest complete attributed hour (the hour `usage::latest_hours` reports),
/// summed by tenant.
#[tracing::instrument(skip_all)]
pub async fn latest_hour_tenants(pool: &PgPool) -> StoreResult<Vec<TenantHour>> {
    Ok(sqlx::query_as!(
        TenantHour,
        r#"WITH latest AS (
               SELECT site_id, max(hour) AS hour FROM site_hours
               -- The hour in progress is partial, as in `usage::latest_hours`.
               WHERE hour < date_trunc('hour', now())
               GROUP BY site_id
           )
           SELECT t.key AS tenant, s.key AS site, s.currency::text AS "currency!",
                  sum(g.total_mj)::bigint AS "total_mj!", sum(g.cost) AS cost,
                  sum(g.carbon_g) AS carbon_g, sum(g.badput_mj)::bigint AS "badput_mj!"
           FROM latest l
           JOIN ledger g ON g.site_id = l.site_id AND g.hour = l.hour
           JOIN tenants t ON t.id = g.tenant_id
           JOIN sites s ON s.id = g.site_id
           GROUP BY t.key, s.key, s.currency
           ORDER BY t.key, s.key"#,
    )
    .fetch_all(pool)
    .await?)
}

/// A model's ledger at one site over the site's latest complete attributed hour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelHour {
    pub model: String,
    pub site: String,
    pub total_mj: i64,
    /// Prompt and generated tokens.
    pub tokens: i64,
}

/// As [`latest_hour_tenants`], by model (rows of no model, idle energy among them, are not
/// any model's).
#[tracing::instrument(skip_all)]
pub async fn latest_hour_models(pool: &PgPool) -> StoreResult<Vec<ModelHour>> {
    Ok(sqlx::query_as!(
        ModelHour,
        r#"WITH latest AS (
               SELECT site_id, max(hour) AS hour FROM site_hours
               WHERE hour < date_trunc('hour', now())
               GROUP BY site_id
           )
           SELECT m.key AS model, s.key AS site, sum(g.total_mj)::bigint AS "total_mj!",
                  sum(g.prompt_tokens + g.generated_tokens)::bigint AS "tokens!"
           FROM latest l
           JOIN ledger g ON g.site_id = l.site_id AND g.hour = l.hour
           JOIN models m ON m.id = g.model_id
           JOIN sites s ON s.id = g.site_id
           GROUP BY m.key, s.key
           ORDER BY m.key, s.key"#,
    )
    .fetch_all(pool)
    .await?)
}
