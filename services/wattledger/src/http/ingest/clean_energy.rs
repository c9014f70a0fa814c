//! Clean-energy ingest: what a site's power purchase agreement or on-site generation
//! delivered, per hour, for its hourly carbon-free score (`domain::cfe`).

use super::{accept_all, IngestOutcome, IngestResponses, Records};
use crate::app;
use crate::auth::Role;
use crate::http::error::{ApiError, ApiResult, FieldError};
use crate::http::extract::{Batch, Caller};
use crate::http::validate::ReadBatch;
use crate::state::AppState;
use axum::extract::State;
use axum::Json;
use chrono::Utc;
use std::collections::HashSet;
use wattledger_store::clean_energy::CleanEnergyRow;
use wattledger_store::inventory::{ids_by_key, KeyedTable};
use wattledger_wire::CleanEnergy;

#[utoipa::path(post, path = "/v1/ingest/clean-energy", tag = "ingest",
    request_body = Records<CleanEnergy>,
    responses(IngestResponses),
    security(("bearer" = [])))]
pub async fn clean_energy_batch(
    State(state): State<AppState>,
    caller: Caller,
    Batch(batch): Batch,
) -> ApiResult<Json<IngestOutcome>> {
    caller.require(&[Role::Collector, Role::Admin])?;
    let read = ReadBatch::<CleanEnergy>::of(&batch);
    let site_keys: Vec<String> = read.records().map(|d| d.site.clone()).collect();
    let sites = ids_by_key(&state.pool, KeyedTable::Sites, &site_keys).await?;
    // Delivered energy has happened: nothing after now.
    let latest = Utc::now();
    let rows = accept_all(read, |d: CleanEnergy, r| {
        r.problems(d.check(latest));
        let site_id = r.resolve("site", &d.site, &sites, "site")?;
        Some(CleanEnergyRow {
            site_id,
            energy_mj: d.mj(),
            source: d.source,
            start_at: d.start_at,
            end_at: d.end_at,
        })
    })?;
    let mut seen = HashSet::new();
    let repeats: Vec<FieldError> = (rows.iter().enumerate())
        .filter(|(_, d)| !seen.insert((d.site_id, d.source.clone(), d.start_at)))
        .map(|(i, _)| {
            FieldError::new(
                i,
                "start_at",
                "the same delivery appears twice in this batch",
            )
        })
        .collect();
    if !repeats.is_empty() {
        return Err(ApiError::Validation(repeats));
    }
    let written = app::ingest::clean_energy::write(&state.pool, &rows).await?;
    Ok(Json(IngestOutcome {
        received: rows.len(),
        written,
        duplicates: rows.len() as u64 - written,
        conflicts: Vec::new(),
        allocations: None,
        warnings: Vec::new(),
    }))
}
