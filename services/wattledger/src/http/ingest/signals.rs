//! Grid signal ingest: carbon intensity and electricity price points from the agent's grid
//! fetchers, a site's own tariff or CSV, or any system that already has them.

use super::{read_all, IngestOutcome, IngestResponses, Records};
use crate::auth::Role;
use crate::http::error::{ApiError, ApiResult, FieldError};
use crate::http::extract::{Batch, Caller};
use crate::http::AppState;
use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Duration, Utc};
use rust_decimal::Decimal;
use std::collections::HashSet;
use utoipa::ToSchema;
use wattledger_store::signals::{self, SignalRow};

/// One value of a signal over `[start_at, end_at)`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct SignalIn {
    /// The provider's zone or region: a site's `grid_region` (carbon) or `price_region`.
    region: String,
    /// `carbon` (g CO2e per kWh) or `price` (currency per kWh).
    #[schema(pattern = "^(carbon|price)$")]
    signal: String,
    /// Carbon: `average` (location-based, what reports count) or `marginal` (MOER).
    #[schema(pattern = "^(average|marginal)$")]
    basis: Option<String>,
    /// Price: ISO 4217 currency.
    #[schema(pattern = "^[A-Z]{3}$")]
    currency: Option<String>,
    /// `actual` or `forecast`.
    #[schema(pattern = "^(actual|forecast)$")]
    status: String,
    /// Who published it: `electricitymaps`, `watttime`, `ukci`, `casdk`, `entsoe`, `tariff`, …
    source: String,
    start_at: DateTime<Utc>,
    end_at: DateTime<Utc>,
    #[schema(value_type = String, example = "412.5", pattern = "^-?[0-9]{1,10}(\\.[0-9]{1,9})?$")]
    value: Decimal,
    /// The provider marks the value as an estimate (it may be revised).
    estimated: Option<bool>,
}

/// Forecasts reach days ahead; nothing further is a signal yet.
const MAX_AHEAD_DAYS: i64 = 15;

#[utoipa::path(post, path = "/v1/ingest/signals", tag = "ingest",
    request_body = Records<SignalIn>,
    responses(IngestResponses),
    security(("bearer" = [])))]
pub async fn signals_batch(
    State(state): State<AppState>,
    caller: Caller,
    Batch(batch): Batch,
) -> ApiResult<Json<IngestOutcome>> {
    caller.require(&[Role::Collector, Role::Admin])?;
    let latest = Utc::now() + Duration::days(MAX_AHEAD_DAYS);
    let limit = Decimal::from(99_999_999_999i64);
    let rows = read_all(
        &batch,
        &[
            "region",
            "signal",
            "basis",
            "currency",
            "status",
            "source",
            "start_at",
            "end_at",
            "value",
            "estimated",
        ],
        |r| {
            let region = r.str("region", 64);
            let signal = r.one_of("signal", &["carbon", "price"]);
            let basis = match signal.as_deref() {
                Some("carbon") => {
                    if r.opt_str("currency", 8).is_some() {
                        r.error("currency", "is for price signals");
                    }
                    r.one_of("basis", &["average", "marginal"])
                }
                Some(_) => {
                    if r.opt_str("basis", 16).is_some() {
                        r.error("basis", "is for carbon signals");
                    }
                    let c = r.str("currency", 8);
                    match c {
                        Some(c) if c.len() == 3 && c.chars().all(|x| x.is_ascii_uppercase()) => {
                            Some(c)
                        }
                        Some(_) => {
                            r.error("currency", "must be an ISO 4217 code such as EUR");
                            None
                        }
                        None => None,
                    }
                }
                None => None,
            };
            let status = r.one_of("status", &["actual", "forecast"]);
            let source = r.str("source", 64);
            let start = r.time("start_at", latest);
            let end = r.time("end_at", latest);
            if let (Some(s), Some(e)) = (start, end) {
                if e <= s {
                    r.error("end_at", "must be after start_at");
                } else if e - s > Duration::days(31) {
                    r.error("end_at", "a point spans at most 31 days");
                }
            }
            let value = r.decimal_in("value", 9, -limit, limit);
            if value.is_some_and(|v| v.is_sign_negative()) && signal.as_deref() == Some("carbon") {
                r.error("value", "carbon intensity must not be negative");
            }
            let estimated = r.opt_bool("estimated").unwrap_or(false);
            Some(SignalRow {
                region: region?,
                signal: signal?,
                basis: basis?,
                status: status?,
                source: source?,
                start_at: start?,
                end_at: end?,
                value: value?,
                estimated,
            })
        },
    )?;
    let mut seen = HashSet::new();
    let repeats: Vec<FieldError> = rows
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            !seen.insert((
                p.region.clone(),
                p.signal.clone(),
                p.basis.clone(),
                p.status.clone(),
                p.source.clone(),
                p.start_at,
            ))
        })
        .map(|(i, _)| {
            FieldError::new(
                i,
                "start_at",
                "the same signal point appears twice in this batch",
            )
        })
        .collect();
    if !repeats.is_empty() {
        return Err(ApiError::Validation(repeats));
    }
    let outcome = signals::upsert(&state.pool, &rows).await?;
    // New forecasts change admission's choices at once on this replica.
    state.admission.poke();
    tracing::debug!(
        written = outcome.written,
        dirtied = outcome.dirtied,
        "signals stored"
    );
    Ok(Json(IngestOutcome {
        received: rows.len(),
        written: outcome.written,
        duplicates: outcome.duplicates,
        conflicts: Vec::new(),
        allocations: None,
    }))
}
