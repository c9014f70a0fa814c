//! The ingest API: inventory, samples, jobs with allocations, token records, grid signals.
//!
//! Every endpoint takes `{"records": [...]}`, validates every record, and either refuses the
//! whole batch with a 422 listing each bad record's index, field and reason, or writes it in
//! one statement. Resending a batch changes nothing.

pub mod clean_energy;
mod counted;
pub mod inventory;
pub mod jobs;
pub mod samples;
pub mod signals;
pub mod tokens;

use super::error::{ApiError, ApiResult, ErrorBody, FieldError};
use super::validate::{Findings, ReadBatch};
use crate::state::AppState;
use axum::Router;
use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use utoipa::ToSchema;
use wattledger_domain::input::record::Record;

pub fn router() -> Router<AppState> {
    use crate::telemetry::RecordKind as K;
    use counted::{post_batch, post_samples};
    Router::new()
        .route(
            "/v1/ingest/tenants",
            post_batch(K::Tenants, inventory::tenants),
        )
        .route("/v1/ingest/sites", post_batch(K::Sites, inventory::sites))
        .route(
            "/v1/ingest/models",
            post_batch(K::Models, inventory::models),
        )
        .route(
            "/v1/ingest/device_models",
            post_batch(K::DeviceModels, inventory::device_models),
        )
        .route(
            "/v1/ingest/meters",
            post_batch(K::Meters, inventory::meters),
        )
        .route("/v1/ingest/samples", post_samples(samples::samples_batch))
        .route("/v1/ingest/jobs", post_batch(K::Jobs, jobs::jobs_batch))
        .route(
            "/v1/ingest/tokens",
            post_batch(K::Tokens, tokens::tokens_batch),
        )
        .route(
            "/v1/ingest/signals",
            post_batch(K::Signals, signals::signals_batch),
        )
        .route(
            "/v1/ingest/clean-energy",
            post_batch(K::CleanEnergy, clean_energy::clean_energy_batch),
        )
}

/// One ingest request in flight, held until it is answered. The server takes
/// [`crate::config::Config::max_ingest_in_flight`] at once: one more is answered 429 with
/// `Retry-After` before its body is read, so that a fleet catching up after an outage backs
/// off instead of queueing on the database's connections until its requests time out.
pub struct Slot {
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl axum::extract::FromRequestParts<AppState> for Slot {
    type Rejection = ApiError;

    async fn from_request_parts(
        _: &mut axum::http::request::Parts,
        state: &AppState,
    ) -> Result<Self, ApiError> {
        state
            .ingest_slots
            .clone()
            .try_acquire_owned()
            .map(|_permit| Slot { _permit })
            .map_err(|_| ApiError::Overloaded)
    }
}

/// The answers every ingest endpoint documents.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
enum IngestResponses {
    /// The batch was written; records already stored are counted, not written again.
    #[response(status = 200)]
    Written(IngestOutcome),
    /// The body is not JSON of the form {"records": [...]}.
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// No valid bearer token.
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// The token's role may not send this.
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// The body or the number of records is over the limit.
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// The body is not application/json.
    #[response(status = 415)]
    UnsupportedMediaType(ErrorBody),
    /// Records are invalid: each one's index, field and reason; nothing was written.
    #[response(status = 422)]
    Invalid(ErrorBody),
    /// Nothing was read: as many ingest batches are in flight as the server takes. Send the
    /// same batch again after `Retry-After` seconds.
    #[response(status = 429, headers(("Retry-After" = u32, description = "Seconds to wait")))]
    Overloaded(ErrorBody),
    /// Nothing was written: the database was out of reach, or this batch's transaction gave
    /// way to another's on the same rows. Send the same batch again after `Retry-After`
    /// seconds.
    #[response(status = 503, headers(("Retry-After" = u32, description = "Seconds to wait")))]
    Unavailable(ErrorBody),
}

/// What a batch did.
#[derive(Debug, Serialize, ToSchema)]
pub struct IngestOutcome {
    /// Records in the batch.
    pub received: usize,
    /// Rows inserted or changed.
    pub written: u64,
    /// Records already stored with the same values (no change).
    pub duplicates: u64,
    /// Records already stored with other values: the stored ones stand.
    pub conflicts: Vec<ConflictOut>,
    /// For jobs: the allocations they carried, counted the same way (a job's `written`
    /// counts the job alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocations: Option<Counts>,
    /// Records written with a caveat, each with its index, field and what was done: a job
    /// naming a model that is not registered is kept without one, and takes it once the
    /// model is registered (`POST /v1/ingest/models`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<FieldError>,
}

/// Records received, written (inserted or changed), and already stored unchanged.
#[derive(Debug, Serialize, ToSchema)]
pub struct Counts {
    pub received: usize,
    pub written: u64,
    pub duplicates: u64,
}

impl Counts {
    pub fn of(received: usize, written: u64) -> Counts {
        Counts {
            received,
            written,
            duplicates: received as u64 - written.min(received as u64),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ConflictOut {
    pub index: usize,
    pub reason: String,
}

impl IngestOutcome {
    fn upserted(received: usize, written: u64) -> Self {
        let c = Counts::of(received, written);
        IngestOutcome {
            received: c.received,
            written: c.written,
            duplicates: c.duplicates,
            conflicts: Vec::new(),
            allocations: None,
            warnings: Vec::new(),
        }
    }
}

/// A batch as it is sent. The samples' fast path reads it whole; the other endpoints read
/// each record on its own ([`ReadBatch`]).
#[derive(ToSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Records<T: ToSchema> {
    records: Vec<T>,
}

fn latest(state: &AppState) -> DateTime<Utc> {
    Utc::now() + Duration::seconds(state.config.max_clock_skew_s)
}

/// Accepts each record of a batch that reads with `accept`, which checks and looks it up;
/// refuses the whole batch, listing every record's errors, if any record is wrong.
fn accept_all<T: Record, O>(
    batch: ReadBatch<T>,
    accept: impl FnMut(T, &mut Findings) -> Option<O>,
) -> ApiResult<Vec<O>> {
    batch.accept(accept).map_err(ApiError::Validation)
}

fn reject_repeats(keys: impl Iterator<Item = String>, field: &str) -> ApiResult<()> {
    let mut seen = HashSet::new();
    let errors: Vec<FieldError> = keys
        .enumerate()
        .filter(|(_, k)| !seen.insert(k.clone()))
        .map(|(i, _)| FieldError::new(i, field, "appears twice in this batch"))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::Validation(errors))
    }
}

fn distinct<'a>(keys: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut v: Vec<String> = keys.map(str::to_owned).collect();
    v.sort_unstable();
    v.dedup();
    v
}
