//! The ingest endpoints, counted: what each batch did with its records (written, already
//! stored, in conflict, or refused with the batch) goes to the `/metrics` series
//! `wattledger_ingest_records_total`. The handlers stay as they are; the router wraps them.
//!
//! A body that never became a batch (not JSON, too large, no token) has no records to
//! count: `wattledger_http_requests_total` counts those requests by status.

use super::{IngestOutcome, Slot};
use crate::http::error::ApiResult;
use crate::http::extract::{Batch, Caller, RawBatch};
use crate::state::AppState;
use crate::telemetry::{RecordKind, RecordOutcome, Telemetry};
use axum::extract::State;
use axum::routing::{post, MethodRouter};
use axum::Json;
use std::future::Future;

type Answer = ApiResult<Json<IngestOutcome>>;

/// `POST` to a batch handler, its records counted as `kind`.
pub fn post_batch<F, Fut>(kind: RecordKind, handler: F) -> MethodRouter<AppState>
where
    F: FnOnce(State<AppState>, Caller, Batch) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Answer> + Send + 'static,
{
    post(
        move |state: State<AppState>, caller: Caller, _slot: Slot, batch: Batch| async move {
            let telemetry = state.telemetry.clone();
            let received = batch.0.len();
            let answer = handler(state, caller, batch).await;
            count(&telemetry, kind, || received, &answer);
            answer
        },
    )
}

/// `POST` to the samples handler, which takes the raw body (its typed fast path parses it
/// itself): the size of a refused batch is read from the body again, which only a refused
/// batch costs.
pub fn post_samples<F, Fut>(handler: F) -> MethodRouter<AppState>
where
    F: FnOnce(State<AppState>, Caller, RawBatch) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Answer> + Send + 'static,
{
    post(
        move |state: State<AppState>, caller: Caller, _slot: Slot, raw: RawBatch| async move {
            let telemetry = state.telemetry.clone();
            let bytes = raw.0.clone();
            let answer = handler(state, caller, raw).await;
            let received = || Batch::parse(&bytes, usize::MAX).map_or(0, |b| b.0.len());
            count(&telemetry, RecordKind::Samples, received, &answer);
            answer
        },
    )
}

fn count(t: &Telemetry, kind: RecordKind, received: impl FnOnce() -> usize, answer: &Answer) {
    match answer {
        Ok(Json(o)) => {
            t.records(kind, RecordOutcome::Written, o.written);
            t.records(kind, RecordOutcome::Duplicate, o.duplicates);
            t.records(kind, RecordOutcome::Conflict, o.conflicts.len() as u64);
            if let Some(a) = &o.allocations {
                t.records(RecordKind::Allocations, RecordOutcome::Written, a.written);
                t.records(
                    RecordKind::Allocations,
                    RecordOutcome::Duplicate,
                    a.duplicates,
                );
            }
        }
        // A server error refused nothing: the client sends the batch again.
        Err(e) if e.is_client_error() => t.records(kind, RecordOutcome::Refused, received() as u64),
        Err(_) => {}
    }
}
