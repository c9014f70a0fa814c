//! Job ingest: jobs with the GPUs (or MIG instances) they held.

use super::{far_future, IngestResponses, Records};
use super::{latest, read_all, reject_repeats, Counts, IngestOutcome};
use crate::app;
use crate::app::ingest::jobs::WriteError;
use crate::auth::Role;
use crate::http::error::{ApiError, ApiResult};
use crate::http::extract::{Batch, Caller};
use crate::http::validate::Record;
use crate::state::AppState;
use axum::extract::State;
use axum::Json;
use chrono::Utc;
use std::collections::HashSet;
use wattledger_domain::job_kind::JobKind;
use wattledger_domain::priority::Priority;
use wattledger_store::inventory::{self, KeyedTable};
use wattledger_store::jobs::{self, AllocationRecord, JobRecord};
use wattledger_wire::{Allocation, Job};

const FIELDS: [&str; 11] = [
    "key",
    "name",
    "tenant",
    "site",
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
    let sites = inventory::ids_by_key(&state.pool, KeyedTable::Sites, &field("site")).await?;
    let stored = jobs::by_key(&state.pool, &field("key")).await?;
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
        let named_site = (job.site.as_ref()).and_then(|s| r.resolve("site", s, &sites, "site"));
        let mut gpu_sites = HashSet::new();
        let mut allocations = Vec::new();
        let mut seen = HashSet::new();
        for (k, a) in job.allocations.iter().enumerate() {
            let field = format!("allocations[{k}].meter");
            let meter_id = match meters.get(&a.meter) {
                Some(m) if m.kind.is_device() => {
                    gpu_sites.insert(m.site_id);
                    m.id
                }
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
        let site_id = job_site(
            r,
            named_site,
            &gpu_sites,
            stored.get(&job.key).map(|j| j.site_id),
        );
        Some(JobRecord {
            key: job.key,
            site_id: site_id?,
            name: job.name.unwrap_or_default(),
            tenant_id: tenant?,
            model_id: model,
            kind: job.kind,
            priority: job.priority.unwrap_or_default(),
            submit_at: job.submit_at,
            start_at: job.start_at,
            end_at: job.end_at,
            allocations,
        })
    })?;
    reject_repeats(records.iter().map(|r| r.key.clone()), "key")?;
    let written = match app::ingest::jobs::write(&state.pool, &records, Utc::now()).await {
        // Another batch placed these keys at another site since they were checked above.
        Err(e @ WriteError::AtAnotherSite(_)) => {
            return Err(ApiError::Conflict {
                code: "job_at_another_site",
                message: e.to_string(),
            })
        }
        Err(WriteError::Store(e)) => return Err(e.into()),
        Ok(written) => written,
    };
    let allocations = records.iter().map(|r| r.allocations.len()).sum();
    Ok(Json(IngestOutcome {
        allocations: Some(Counts::of(allocations, written.allocations)),
        ..IngestOutcome::upserted(records.len(), written.jobs)
    }))
}

/// The site a job runs at: its GPUs' (which must be one site), the one its record names
/// (which must agree with its GPUs'), and the one it was stored at (which cannot change);
/// `None`, with the error recorded, when they disagree or none is known.
fn job_site(
    r: &mut Record<'_>,
    named: Option<i64>,
    gpus: &HashSet<i64>,
    stored: Option<i64>,
) -> Option<i64> {
    if gpus.len() > 1 {
        r.error(
            "allocations",
            "the GPUs are at several sites: report one job per site",
        );
        return None;
    }
    let of_gpus = gpus.iter().next().copied();
    let site = match (named, of_gpus) {
        (Some(n), Some(g)) if n != g => {
            r.error("site", "the job's GPUs are at another site");
            return None;
        }
        (n, g) => n.or(g).or(stored),
    };
    match (site, stored) {
        (Some(s), Some(was)) if s != was => {
            r.error(
                "site",
                "the job is registered at another site; a job's site cannot change",
            );
            None
        }
        (None, _) => {
            if r.errors.is_empty() {
                r.error("site", "needed for a new job sent without allocations");
            }
            None
        }
        (site, _) => site,
    }
}

/// The record's fields by type, as a wire job for its `check`; `None` (with the errors
/// recorded) when a field has the wrong type or a required one is missing.
fn read_job(r: &mut Record<'_>) -> Option<Job> {
    let key = r.string("key");
    let name = r.opt_string("name");
    let tenant = r.string("tenant");
    let site = r.opt_string("site");
    let model = r.opt_string("model");
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
    if !r.errors.is_empty() {
        return None;
    }
    // A kind outside the set or a priority past its rule is refused like what `check`
    // finds: recorded, with the rest of the record still read and checked (under a stand-in
    // kind), so the refusal lists all that is wrong with it.
    let kind = r.named("kind");
    let priority = r.opt_parsed("priority", Priority::parse);
    Some(Job {
        key: key?,
        name,
        tenant: tenant?,
        site,
        model,
        kind: kind.unwrap_or(JobKind::Batch),
        priority,
        submit_at,
        start_at: start_at?,
        end_at,
        allocations,
    })
}
