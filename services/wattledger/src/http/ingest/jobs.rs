//! Job ingest: jobs with the GPUs (or MIG instances) they held.

use super::{accept_all, latest, reject_repeats, Counts, IngestOutcome};
use super::{IngestResponses, Records};
use crate::app;
use crate::app::ingest::jobs::WriteError;
use crate::auth::Role;
use crate::http::error::{ApiError, ApiResult, FieldError};
use crate::http::extract::{Batch, Caller};
use crate::http::validate::{Findings, ReadBatch};
use crate::state::AppState;
use axum::extract::State;
use axum::Json;
use chrono::Utc;
use rust_decimal::Decimal;
use std::collections::{HashMap, HashSet};
use wattledger_domain::device_model;
use wattledger_domain::meter_kind::MeterKind;
use wattledger_store::inventory::{self, ids_by_key, KeyedTable, Partition};
use wattledger_store::jobs::{self, AllocationRecord, JobRecord};
use wattledger_wire::Job;

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
    let read = ReadBatch::<Job>::of(&batch);
    let keys = |f: fn(&Job) -> Option<&String>| -> Vec<String> {
        read.records().filter_map(f).cloned().collect()
    };
    let tenants = ids_by_key(&state.pool, KeyedTable::Tenants, &keys(|j| Some(&j.tenant))).await?;
    let sites = ids_by_key(&state.pool, KeyedTable::Sites, &keys(|j| j.site.as_ref())).await?;
    let mut job_keys = keys(|j| Some(&j.key));
    job_keys.extend(keys(|j| j.requeue_of.as_ref()));
    let stored = jobs::by_key(&state.pool, &job_keys).await?;
    // Jobs accepted so far in this batch, by key: an attempt may name one as its original.
    let mut earlier: HashMap<String, i64> = HashMap::new();
    let models = ids_by_key(&state.pool, KeyedTable::Models, &keys(|j| j.model.as_ref())).await?;
    let meter_keys: Vec<String> = read
        .records()
        .flat_map(|j| j.allocations.iter().map(|a| a.meter.clone()))
        .collect();
    let meters = inventory::meters_by_key_or_uuid(&state.pool, &meter_keys).await?;
    let partition_ids: Vec<i64> = (meters.values())
        .filter(|m| m.kind == MeterKind::Mig)
        .map(|m| m.id)
        .collect();
    let partitions = inventory::partitions_of(&state.pool, &partition_ids).await?;
    let latest = latest(&state);
    let mut warnings = Vec::new();
    let records = accept_all(read, |job, r| {
        r.problems(job.check(latest));
        let tenant = r.resolve("tenant", &job.tenant, &tenants, "tenant");
        // A model not registered does not refuse the job (a pod labelled with a model nobody
        // registered yet would lose its whole job, its energy left to the platform): the job
        // is kept with the name alone, flagged, and takes the model once it is registered.
        let model = job.model.as_ref().and_then(|m| models.get(m).copied());
        let unknown_model = match (&job.model, model) {
            (Some(m), None) if !r.refused("model") => {
                warnings.push(FieldError::new(
                    r.index(),
                    "model",
                    format!("unknown model '{m}': the job is kept without it, and takes it once it is registered"),
                ));
                Some(m.clone())
            }
            _ => None,
        };
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
                share: a
                    .share
                    .unwrap_or_else(|| default_share(partitions.get(&meter_id))),
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
        if let (Some(original), Some(site)) = (&job.requeue_of, site_id) {
            let original_site = (earlier.get(original).copied())
                .or_else(|| stored.get(original).map(|j| j.site_id));
            match original_site {
                None => r.error("requeue_of", "unknown job"),
                Some(s) if s != site => r.error("requeue_of", "the job is at another site"),
                Some(_) => {}
            }
        }
        let site_id = site_id?;
        earlier.insert(job.key.clone(), site_id);
        Some(JobRecord {
            key: job.key,
            site_id,
            name: job.name.unwrap_or_default(),
            tenant_id: tenant?,
            model_id: model,
            unknown_model,
            phase: job.phase,
            kind: job.kind,
            priority: job.priority.unwrap_or_default(),
            submit_at: job.submit_at,
            start_at: job.start_at,
            end_at: job.end_at,
            end_state: job.end_state,
            last_checkpoint_at: job.last_checkpoint_at,
            requeue_of: job.requeue_of,
            restarts: job.restarts.unwrap_or(0),
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
        warnings,
        ..IngestOutcome::upserted(records.len(), written.jobs)
    }))
}

/// The share an allocation holds when the scheduler gave none: a whole GPU, or a
/// partition's part of its GPU (`device_model::partition_share_ppm`). A lone job on one of an
/// MI300X's eight CPX partitions holds an eighth of the board, not all of it; one on an A30's
/// `1g.6gb` a quarter.
fn default_share(partition: Option<&Partition>) -> Decimal {
    match partition {
        None => Decimal::ONE,
        Some(p) => {
            let n = u32::try_from(p.partitions).unwrap_or(u32::MAX);
            let ppm = device_model::partition_share_ppm(
                p.device_model.as_deref(),
                p.profile.as_deref(),
                n,
            );
            Decimal::new(i64::from(ppm), 6).normalize()
        }
    }
}

/// The site a job runs at: its GPUs' (which must be one site), the one its record names
/// (which must agree with its GPUs'), and the one it was stored at (which cannot change);
/// `None`, with the error recorded, when they disagree or none is known.
fn job_site(
    r: &mut Findings,
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
            if r.is_empty() {
                r.error("site", "needed for a new job sent without allocations");
            }
            None
        }
        (site, _) => site,
    }
}
