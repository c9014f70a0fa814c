//! Sample ingest: the hot path, typed fast parse and COPY, with the field-by-field path for
//! batches that need explaining.

use super::{accept_all, latest, IngestOutcome, Records};
use super::{distinct, ConflictOut, IngestResponses};
use crate::auth::Role;
use crate::http::error::{ApiError, ApiResult, FieldError};
use crate::http::extract::RawBatch;
use crate::http::extract::{Batch, Caller};
use crate::http::validate::ReadBatch;
use crate::state::AppState;
use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use wattledger_domain::meter_kind::MeterKind;
use wattledger_store::inventory::MeterRef;
use wattledger_store::samples::SampleRow;
use wattledger_wire::Sample;

#[utoipa::path(post, path = "/v1/ingest/samples", tag = "ingest",
    request_body = Records<Sample>,
    responses(IngestResponses),
    security(("bearer" = [])))]
pub async fn samples_batch(
    State(state): State<AppState>,
    caller: Caller,
    RawBatch(bytes): RawBatch,
) -> ApiResult<Json<IngestOutcome>> {
    caller.require(&[Role::Collector])?;
    let latest = latest(&state);
    // The common case, a well-formed batch, is read straight into typed records; anything
    // else takes the field-by-field path, which is the one that explains what is wrong. Both
    // hold each record to the same `Sample::check`.
    if let Ok(strict) = serde_json::from_slice::<Records<Sample>>(&bytes) {
        if strict.records.len() <= state.config.max_batch_records {
            let keys = distinct(strict.records.iter().map(|r| r.meter.as_str()));
            let meters = state.meters.by_key(&state.pool, &keys).await?;
            let rows: Option<Vec<SampleRow>> = strict
                .records
                .iter()
                .map(|s| {
                    let meter = meters.get(&s.meter).filter(|m| m.kind != MeterKind::Mig)?;
                    s.check(latest).is_empty().then(|| row(s, meter))
                })
                .collect();
            if let Some(rows) = rows {
                return store_samples(&state, rows.len(), rows).await;
            }
        }
    }
    let Batch(batch) = Batch::parse(&bytes, state.config.max_batch_records)?;
    let read = ReadBatch::<Sample>::of(&batch);
    let keys = distinct(read.records().map(|s| s.meter.as_str()));
    let meters = state.meters.by_key(&state.pool, &keys).await?;
    let rows = accept_all(read, |sample, r| {
        r.problems(sample.check(latest));
        let meter = match meters.get(&sample.meter) {
            None => {
                r.error("meter", "unknown meter");
                return None;
            }
            Some(m) if m.kind == MeterKind::Mig => {
                r.error(
                    "meter",
                    "a MIG instance has no energy counter; send its GPU's samples",
                );
                return None;
            }
            Some(m) => m,
        };
        Some(row(&sample, meter))
    })?;
    store_samples(&state, batch.len(), rows).await
}

/// A checked sample of a known meter, as stored.
fn row(s: &Sample, meter: &MeterRef) -> SampleRow {
    SampleRow {
        site_id: meter.site_id,
        meter_id: meter.id,
        ts: s.ts,
        counter_mj: s.counter_mj,
        power_mw: s.power_mw(),
        peak_mw: s.peak_mw(),
        raw: s.is_raw(),
        counter_estimated: s.counter_estimated,
    }
}

/// Writes valid rows: identical copies in the batch collapse, different ones are refused,
/// conflicts with stored samples are reported.
async fn store_samples(
    state: &AppState,
    received: usize,
    rows: Vec<SampleRow>,
) -> ApiResult<Json<IngestOutcome>> {
    let mut seen: HashMap<(i64, DateTime<Utc>, bool), usize> = HashMap::with_capacity(rows.len());
    let mut errors = Vec::new();
    let mut unique = Vec::with_capacity(rows.len());
    let mut positions = Vec::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        match seen.get(&(row.meter_id, row.ts, row.raw)) {
            Some(&j) if rows[j] == *row => {}
            Some(_) => errors.push(FieldError::new(
                i,
                "ts",
                "another record in this batch has this meter and time with other values",
            )),
            None => {
                seen.insert((row.meter_id, row.ts, row.raw), i);
                unique.push(*row);
                positions.push(i);
            }
        }
    }
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let collapsed = (rows.len() - unique.len()) as u64;
    let outcome = state.samples.insert(unique).await?;
    if !outcome.conflicts.is_empty() {
        tracing::warn!(
            conflicts = outcome.conflicts.len(),
            "conflicting duplicate samples kept as stored"
        );
    }
    Ok(Json(IngestOutcome {
        received,
        written: outcome.inserted,
        duplicates: outcome.duplicates + collapsed,
        conflicts: outcome
            .conflicts
            .iter()
            .map(|c| ConflictOut {
                index: positions[c.index],
                reason: format!(
                    "already stored with counter_mj={:?} power_mw={:?} peak_mw={:?}; the stored sample stands",
                    c.stored_counter_mj, c.stored_power_mw, c.stored_peak_mw
                ),
            })
            .collect(),
        allocations: None,
        warnings: Vec::new(),
    }))
}
