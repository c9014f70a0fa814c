//! Grid signal ingest: carbon intensity and electricity price points from the agent's grid
//! fetchers, a site's own tariff or CSV, or any system that already has them.

use super::{accept_all, IngestOutcome, IngestResponses, Records};
use crate::app;
use crate::auth::Role;
use crate::http::error::{ApiError, ApiResult, FieldError};
use crate::http::extract::{Batch, Caller};
use crate::http::validate::ReadBatch;
use crate::state::AppState;
use axum::extract::State;
use axum::Json;
use chrono::{Duration, Utc};
use std::collections::HashSet;
use wattledger_domain::signals::{Signal, SignalKind};
use wattledger_store::signals::SignalRow;
use wattledger_wire::{SignalPoint, MAX_AHEAD_DAYS};

#[utoipa::path(post, path = "/v1/ingest/signals", tag = "ingest",
    request_body = Records<SignalPoint>,
    responses(IngestResponses),
    security(("bearer" = [])))]
pub async fn signals_batch(
    State(state): State<AppState>,
    caller: Caller,
    Batch(batch): Batch,
) -> ApiResult<Json<IngestOutcome>> {
    caller.require(&[Role::Collector, Role::Admin])?;
    let latest = Utc::now() + Duration::days(MAX_AHEAD_DAYS);
    let rows = accept_all(ReadBatch::of(&batch), |p: SignalPoint, r| {
        if ["signal", "basis", "status"].iter().any(|f| r.refused(f)) {
            // A name outside its set is this record's error already; the rules that need no
            // name are checked still, so the record's every problem is listed.
            r.problems(SignalPoint::check_unnamed(
                &p.region, &p.source, p.start_at, p.end_at, p.value, latest,
            ));
            return None;
        }
        r.problems(p.check(latest));
        let signal = match (p.signal, p.basis) {
            (SignalKind::Carbon, Some(basis)) => Signal::Carbon { basis },
            (SignalKind::Price, _) => Signal::Price {
                currency: p.currency.unwrap_or_default(),
            },
            (SignalKind::CarbonFree, _) => Signal::CarbonFree,
            // No basis: the check refused the point.
            (SignalKind::Carbon, None) => return None,
        };
        Some(SignalRow {
            region: p.region,
            signal,
            status: p.status,
            source: p.source,
            start_at: p.start_at,
            end_at: p.end_at,
            value: p.value,
            estimated: p.estimated,
        })
    })?;
    let mut seen = HashSet::new();
    let repeats: Vec<FieldError> = rows
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            !seen.insert((
                p.region.clone(),
                p.signal.clone(),
                p.status,
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
    let outcome = app::ingest::signals::write(&state.pool, &rows).await?;
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
        warnings: Vec::new(),
    }))
}
