//! Job ingest: jobs with the GPUs (or MIG instances) they held.

use super::{far_future, IngestResponses, Records};
use super::{latest, read_all, reject_repeats, Counts, IngestOutcome};
use crate::auth::Role;
use crate::http::error::ApiResult;
use crate::http::extract::{Batch, Caller};
use crate::http::validate::Record;
use crate::http::AppState;
use axum::extract::State;
use axum::Json;
use chrono::Utc;
use std::collections::HashSet;
use wattledger_store::inventory::{self, KeyedTable};
use wattledger_store::jobs::{self, AllocationRecord, JobRecord};
use wattledger_wire::{Allocation, Job};

const FIELDS: [&str; 10] = [
    "key",
    "name",
    "tenant",
    "model",
    "kind",
    "priority",
    "submit_at",
    "start_at",
    "end_at",
    "allocations",
];
const ALLOCATION_FIELDS: [&str; 4] = ["meter", "share", "start_at", "end_at"];

#[utoipa::path(post, path = "/v1/ingest/jobs", tag = "ingest",
    request_body = Records<Job>,
    responses(IngestResponses),
    security(("bearer" = [])))]
pub async fn jobs_batch(
    State(state): State<AppState>,
    caller: Caller,
    Batch(batch): Batch,
) -> ApiResult<Json<IngestOutcome>> {
    caller.require(&[Role::Scheduler, Role::Collector])?;
    let field = |f: &str| -> Vec<String> {
        batch
            .iter()
            .filter_map(|v| v.get(f)?.as_str().map(str::to_owned))
            .collect()
    };
    let tenants = inventory::ids_by_key(&state.pool, KeyedTable::Tenants, &field("tenant")).await?;
    let models = inventory::ids_by_key(&state.pool, KeyedTable::Models, &field("model")).await?;
    let meter_keys: Vec<String> = batch
        .iter()
        .filter_map(|v| v.get("allocations")?.as_array())
        .flatten()
        .filter_map(|a| a.get("meter")?.as_str().map(str::to_owned))
        .collect();
    let meters = inventory::meters_by_key_or_uuid(&state.pool, &meter_keys).await?;
    let latest = latest(&state);
    let records = read_all(&batch, &FIELDS, |r| {
        let job = read_job(r)?;
        r.problems(job.check(latest));
        let tenant = r.resolve("tenant", &job.tenant, &tenants, "tenant");
        // An unknown model is an error recorded, so the record is refused all the same.
        let model = (job.model.as_ref()).and_then(|m| r.resolve("model", m, &models, "model"));
        let mut allocations = Vec::new();
        let mut seen = HashSet::new();
        for (k, a) in job.allocations.iter().enumerate() {
            let field = format!("allocations[{k}].meter");
            let meter_id = match meters.get(&a.meter) {
                Some(m) if m.kind == "gpu" || m.kind == "mig" => m.id,
                Some(_) => {
                    r.error(&field, "allocations are of GPU or MIG meters");
                    continue;
                }
                None => {
                    r.error(&field, "unknown meter");
                    continue;
                }
            };
            // A GPU named once by key and once by UUID is the same GPU.
            let start_at = a.start_at.unwrap_or(job.start_at);
            if !seen.insert((meter_id, start_at)) {
                r.error(&field, "the same GPU and start appear twice in this job");
            }
            allocations.push(AllocationRecord {
                meter_id,
                share: a.share_or_whole(),
                start_at,
                end_at: a.end_at.or(job.end_at),
            });
        }
        Some(JobRecord {
            key: job.key,
            name: job.name.unwrap_or_default(),
            tenant_id: tenant?,
            model_id: model,
            kind: job.kind,
            priority: job.priority.unwrap_or_else(|| "normal".into()),
            submit_at: job.submit_at,
            start_at: job.start_at,
            end_at: job.end_at,
            allocations,
        })
    })?;
    reject_repeats(records.iter().map(|r| r.key.clone()), "key")?;
    let written = jobs::upsert(&state.pool, &records, Utc::now()).await?;
    let allocations = records.iter().map(|r| r.allocations.len()).sum();
    Ok(Json(IngestOutcome {
        allocations: Some(Counts::of(allocations, written.allocations)),
        ..IngestOutcome::upserted(records.len(), written.jobs)
    }))
}

/// The record's fields by type, as a wire job for its `check`; `None` (with the errors
/// recorded) when a field has the wrong type.
fn read_job(r: &mut Record<'_>) -> Option<Job> {
    let key = r.string("key");
    let name = r.opt_string("name");
    let tenant = r.string("tenant");
    let model = r.opt_string("model");
    let kind = r.string("kind");
    let priority = r.opt_string("priority");
    let submit_at = r.opt_time("submit_at", far_future());
    let start_at = r.time("start_at", far_future());
    let end_at = r.opt_time("end_at", far_future());
    let mut allocations = Vec::new();
    for (k, a) in r
        .array("allocations")
        .cloned()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let mut sub = Record::new(r.index(), a, &ALLOCATION_FIELDS);
        let meter = sub.string("meter");
        let share = sub.opt_decimal("share");
        let start_at = sub.opt_time("start_at", far_future());
        let end_at = sub.opt_time("end_at", far_future());
        for e in sub.errors.drain(..) {
            let field = if e.field.is_empty() {
                format!("allocations[{k}]")
            } else {
                format!("allocations[{k}].{}", e.field)
            };
            r.error(&field, e.reason);
        }
        if let Some(meter) = meter {
            allocations.push(Allocation {
                meter,
                share,
                start_at,
                end_at,
            });
        }
    }
    let job = Job {
        key: key?,
        name,
        tenant: tenant?,
        model,
        kind: kind?,
        priority,
        submit_at,
        start_at: start_at?,
        end_at,
        allocations,
    };
    r.errors.is_empty().then_some(job)
}
