//! Token ingest: what inference jobs served, per interval and optionally per tenant.

use super::{accept_all, latest, IngestOutcome};
use super::{ConflictOut, IngestResponses, Records};
use crate::app;
use crate::auth::Role;
use crate::http::error::{ApiError, ApiResult, FieldError};
use crate::http::extract::{Batch, Caller};
use crate::http::validate::ReadBatch;
use crate::state::AppState;
use axum::extract::State;
use axum::Json;
use std::collections::HashSet;
use wattledger_store::inventory::{self, KeyedTable};
use wattledger_store::tokens::TokenRow;
use wattledger_wire::Tokens;

#[utoipa::path(post, path = "/v1/ingest/tokens", tag = "ingest",
    request_body = Records<Tokens>,
    responses(IngestResponses),
    security(("bearer" = [])))]
pub async fn tokens_batch(
    State(state): State<AppState>,
    caller: Caller,
    Batch(batch): Batch,
) -> ApiResult<Json<IngestOutcome>> {
    caller.require(&[Role::Collector])?;
    let read = ReadBatch::<Tokens>::of(&batch);
    let job_keys: Vec<String> = read.records().map(|t| t.job.clone()).collect();
    let tenant_keys: Vec<String> = read.records().filter_map(|t| t.tenant.clone()).collect();
    let jobs = wattledger_store::jobs::by_key(&state.pool, &job_keys).await?;
    let tenants = inventory::ids_by_key(&state.pool, KeyedTable::Tenants, &tenant_keys).await?;
    let latest = latest(&state);
    let rows = accept_all(read, |t, r| {
        r.problems(t.check(latest));
        let job = r.resolve("job", &t.job, &jobs, "job");
        let tenant_id =
            (t.tenant.as_ref()).and_then(|k| r.resolve("tenant", k, &tenants, "tenant"));
        let job = job?;
        Some(TokenRow {
            site_id: job.site_id,
            job_id: job.id,
            tenant_id,
            start_at: t.start_at,
            end_at: t.end_at,
            prompt_tokens: t.prompt_tokens,
            generated_tokens: t.generated_tokens,
        })
    })?;
    let mut seen = HashSet::new();
    let repeats: Vec<FieldError> = rows
        .iter()
        .enumerate()
        .filter(|(_, t)| !seen.insert((t.job_id, t.tenant_id, t.start_at)))
        .map(|(i, _)| {
            FieldError::new(
                i,
                "start_at",
                "the same job, tenant and start appear twice in this batch",
            )
        })
        .collect();
    if !repeats.is_empty() {
        return Err(ApiError::Validation(repeats));
    }
    let outcome = app::ingest::tokens::write(&state.pool, &rows).await?;
    Ok(Json(IngestOutcome {
        received: rows.len(),
        written: outcome.inserted,
        duplicates: outcome.duplicates,
        conflicts: outcome
            .conflicts
            .iter()
            .map(|&index| ConflictOut {
                index,
                reason: "already stored with other counts; the stored record stands".into(),
            })
            .collect(),
        allocations: None,
        warnings: Vec::new(),
    }))
}
