//! Token ingest: what inference jobs served, per interval and optionally per tenant.

use super::{latest, read_all, IngestOutcome};
use super::{ConflictOut, IngestResponses, Records};
use crate::auth::Role;
use crate::http::error::{ApiError, ApiResult, FieldError};
use crate::http::extract::{Batch, Caller};
use crate::http::validate::Record;
use crate::http::AppState;
use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Utc};
use std::collections::HashSet;
use utoipa::ToSchema;
use wattledger_store::inventory::{self, KeyedTable};
use wattledger_store::tokens::{self, TokenRow};
/// Tokens an inference job served in an interval, optionally to one tenant.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct TokenIn {
    job: String,
    tenant: Option<String>,
    start_at: DateTime<Utc>,
    end_at: DateTime<Utc>,
    prompt_tokens: i64,
    generated_tokens: i64,
}

#[utoipa::path(post, path = "/v1/ingest/tokens", tag = "ingest",
    request_body = Records<TokenIn>,
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
    let jobs = inventory::ids_by_key(&state.pool, KeyedTable::Jobs, &field("job")).await?;
    let tenants = inventory::ids_by_key(&state.pool, KeyedTable::Tenants, &field("tenant")).await?;
    let latest = latest(&state);
    let rows = read_all(
        &batch,
        &[
            "job",
            "tenant",
            "start_at",
            "end_at",
            "prompt_tokens",
            "generated_tokens",
        ],
        |r| {
            let job = r.known("job", &jobs, "job");
            let tenant = r.opt_known("tenant", &tenants, "tenant");
            let start = r.time("start_at", latest);
            let end = r.time("end_at", latest);
            if let (Some(s), Some(e)) = (start, end) {
                if e < s {
                    r.error("end_at", "is before start_at");
                }
            }
            let count = |r: &mut Record, f: &str| {
                let n = r.i64(f);
                if n.is_some_and(|n| n < 0) {
                    r.error(f, "must not be negative");
                }
                n
            };
            let prompt = count(r, "prompt_tokens");
            let generated = count(r, "generated_tokens");
            Some(TokenRow {
                job_id: job?,
                tenant_id: tenant,
                start_at: start?,
                end_at: end?,
                prompt_tokens: prompt?,
                generated_tokens: generated?,
            })
        },
    )?;
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
    let outcome = tokens::insert(&state.pool, &rows).await?;
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
