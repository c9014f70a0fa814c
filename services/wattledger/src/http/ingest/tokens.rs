//! Token ingest: what inference jobs served, per interval and optionally per tenant.

use super::{far_future, latest, read_all, IngestOutcome};
use super::{ConflictOut, IngestResponses, Records};
use crate::app;
use crate::auth::Role;
use crate::http::error::{ApiError, ApiResult, FieldError};
use crate::http::extract::{Batch, Caller};
use crate::state::AppState;
use axum::extract::State;
use axum::Json;
use std::collections::HashSet;
use wattledger_store::inventory::{self, KeyedTable};
use wattledger_store::tokens::TokenRow;
use wattledger_wire::Tokens;

const FIELDS: [&str; 6] = [
    "job",
    "tenant",
    "start_at",
    "end_at",
    "prompt_tokens",
    "generated_tokens",
];

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
    let field = |f: &str| -> Vec<String> {
        batch
            .iter()
            .filter_map(|v| v.get(f)?.as_str().map(str::to_owned))
            .collect()
    };
    let jobs = wattledger_store::jobs::by_key(&state.pool, &field("job")).await?;
    let tenants = inventory::ids_by_key(&state.pool, KeyedTable::Tenants, &field("tenant")).await?;
    let latest = latest(&state);
    let rows = read_all(&batch, &FIELDS, |r| {
        let job = r.string("job");
        let tenant = r.opt_string("tenant");
        let start_at = r.time("start_at", far_future());
        let end_at = r.time("end_at", far_future());
        let prompt_tokens = r.i64("prompt_tokens");
        let generated_tokens = r.i64("generated_tokens");
        let t = Tokens {
            job: job?,
            tenant,
            start_at: start_at?,
            end_at: end_at?,
            prompt_tokens: prompt_tokens?,
            generated_tokens: generated_tokens?,
        };
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
    }))
}
