//! Sample ingest: the hot path, typed fast parse and COPY, with the field-by-field path for
//! batches that need explaining.

use super::{distinct, ConflictOut, IngestResponses, Records};
use super::{latest, read_all, IngestOutcome};
use crate::auth::Role;
use crate::http::error::{ApiError, ApiResult, FieldError};
use crate::http::extract::RawBatch;
use crate::http::extract::{Batch, Caller};
use crate::http::AppState;
use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use utoipa::ToSchema;
use wattledger_domain::units::{milliwatts, MAX_POWER_W};
use wattledger_domain::{input, steps};
use wattledger_store::inventory;
use wattledger_store::samples::{self, SampleRow};
/// One reading: an energy counter (mJ since some origin) and/or a power reading (W).
///
/// A step record (what the agent sends by default, with `step_s`) is a reading at a step
/// boundary: the counter there, `power_w` the mean and `peak_w` the peak of the power
/// readings of the step that ends at `ts`. A record without `step_s` is a raw reading, kept
/// for the raw retention (14 days by default) rather than the steps' (400 days).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct SampleIn {
    meter: String,
    /// RFC 3339.
    ts: DateTime<Utc>,
    counter_mj: Option<i64>,
    /// 0 to 10,000,000 W.
    power_w: Option<f64>,
    /// 0 to 10,000,000 W, not below `power_w`.
    peak_w: Option<f64>,
    /// A step record's step length in seconds, a divisor of 3600; `ts` on its boundary.
    step_s: Option<u32>,
}

#[utoipa::path(post, path = "/v1/ingest/samples", tag = "ingest",
    request_body = Records<SampleIn>,
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
    // else takes the field-by-field path, which is the one that explains what is wrong.
    if let Ok(strict) = serde_json::from_slice::<StrictSamples>(&bytes) {
        if strict.records.len() <= state.config.max_batch_records {
            let keys = distinct(strict.records.iter().map(|r| r.meter.as_ref()));
            let meters = inventory::meters_by_key(&state.pool, &keys).await?;
            if let Some(rows) = fast_samples(&strict.records, &meters, latest) {
                return store_samples(&state, rows.len(), rows).await;
            }
        }
    }
    let Batch(batch) = Batch::parse(&bytes, state.config.max_batch_records)?;
    let keys = distinct(batch.iter().filter_map(|v| v.get("meter")?.as_str()));
    let meters = inventory::meters_by_key(&state.pool, &keys).await?;
    let rows = read_all(
        &batch,
        &["meter", "ts", "counter_mj", "power_w", "peak_w", "step_s"],
        |r| {
            let meter = r.key("meter").and_then(|k| match meters.get(&k) {
                None => {
                    r.error("meter", "unknown meter");
                    None
                }
                Some(m) if m.kind == "mig" => {
                    r.error(
                        "meter",
                        "a MIG instance has no energy counter; send its GPU's samples",
                    );
                    None
                }
                Some(m) => Some(m.id),
            });
            let ts = r.time("ts", latest);
            let counter = r.opt_i64("counter_mj");
            if counter.is_some_and(|c| c < 0) {
                r.error("counter_mj", "must not be negative");
            }
            let mut watts = |field: &'static str| match r.opt_f64(field) {
                Some(p) if p < 0.0 => {
                    r.error(field, "must not be negative");
                    None
                }
                Some(p) if p > MAX_POWER_W => {
                    r.error(field, "is above 10 MW: not a plausible meter reading");
                    None
                }
                Some(p) => milliwatts(p),
                None => None,
            };
            let power_mw = watts("power_w");
            let peak_mw = watts("peak_w");
            if peak_mw < power_mw && peak_mw.is_some() {
                r.error("peak_w", "is below power_w, the step's mean");
            }
            if counter.is_none() && power_mw.is_none() && r.errors.is_empty() {
                r.error("counter_mj", "a sample needs counter_mj or power_w");
            }
            let step_s = r.opt_i64("step_s");
            if let (Some(step_s), Some(ts)) = (step_s, ts) {
                let step = u32::try_from(step_s).map_err(|_| steps::StepError::Length);
                if let Err(e) = step.and_then(|s| steps::boundary(s, ts)) {
                    let field = if e == steps::StepError::Length {
                        "step_s"
                    } else {
                        "ts"
                    };
                    r.error(field, e.to_string());
                }
            }
            meter.zip(ts).map(|(meter_id, ts)| SampleRow {
                meter_id,
                ts,
                counter_mj: counter,
                power_mw,
                peak_mw,
                raw: step_s.is_none(),
            })
        },
    )?;
    store_samples(&state, batch.len(), rows).await
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StrictSamples<'a> {
    #[serde(borrow)]
    records: Vec<StrictSample<'a>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StrictSample<'a> {
    #[serde(borrow)]
    meter: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    ts: std::borrow::Cow<'a, str>,
    counter_mj: Option<i64>,
    power_w: Option<f64>,
    peak_w: Option<f64>,
    step_s: Option<u32>,
}

/// Typed records to rows if every one is valid; `None` sends the batch to the slow path.
fn fast_samples(
    records: &[StrictSample<'_>],
    meters: &HashMap<String, inventory::MeterRef>,
    latest: DateTime<Utc>,
) -> Option<Vec<SampleRow>> {
    records
        .iter()
        .map(|r| {
            let meter = meters.get(r.meter.as_ref()).filter(|m| m.kind != "mig")?;
            let ts = DateTime::parse_from_rfc3339(&r.ts).ok()?.to_utc();
            let power_mw = r.power_w.map(milliwatts);
            let peak_mw = r.peak_w.map(milliwatts);
            let ok = input::time(ts).is_ok()
                && ts <= latest
                && r.counter_mj.is_none_or(|c| c >= 0)
                && power_mw.is_none_or(|p| p.is_some())
                && peak_mw.is_none_or(|p| p.is_some() && p >= power_mw.flatten())
                && (r.counter_mj.is_some() || r.power_w.is_some())
                && r.step_s.is_none_or(|s| steps::boundary(s, ts).is_ok());
            ok.then(|| SampleRow {
                meter_id: meter.id,
                ts,
                counter_mj: r.counter_mj,
                power_mw: power_mw.flatten(),
                peak_mw: peak_mw.flatten(),
                raw: r.step_s.is_none(),
            })
        })
        .collect()
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
    let outcome = samples::insert(&state.pool, &unique).await?;
    if !outcome.conflicts.is_empty() {
        tracing::warn!(
            conflicts = outcome.conflicts.len(),
            "conflicting duplicate samples kept as stored"
        );
    }
    Ok(Json(IngestOutcome {
        received,
        written: outcome.inserted,
        duplicates: outcome.duplicates + (rows.len() - unique.len()) as u64,
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
    }))
}
