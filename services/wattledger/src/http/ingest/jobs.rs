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
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use std::collections::HashSet;
use utoipa::ToSchema;
use wattledger_store::inventory::{self, KeyedTable};
use wattledger_store::jobs::{self, AllocationRecord, JobRecord};
/// A job with the GPUs it held.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct JobIn {
    /// Stable key, e.g. `slurm:<cluster>:<jobid>` or `k8s:<namespace>/<pod-uid>`.
    key: String,
    name: Option<String>,
    tenant: String,
    model: Option<String>,
    /// `training`, `inference`, `batch` or `interactive`.
    kind: String,
    priority: Option<String>,
    submit_at: Option<DateTime<Utc>>,
    start_at: DateTime<Utc>,
    end_at: Option<DateTime<Utc>>,
    allocations: Option<Vec<AllocationIn>>,
}

/// A share of one GPU (or MIG instance) over an interval; defaults to the job's.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct AllocationIn {
    meter: String,
    /// 0 < share ≤ 1; 1 for a whole GPU.
    #[schema(value_type = Option<f64>)]
    share: Option<Decimal>,
    start_at: Option<DateTime<Utc>>,
    end_at: Option<DateTime<Utc>>,
}

#[utoipa::path(post, path = "/v1/ingest/jobs", tag = "ingest",
    request_body = Records<JobIn>,
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
    let records = read_all(
        &batch,
        &[
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
        ],
        |r| {
            let key = r.key("key");
            let name = r.opt_str("name", 512).unwrap_or_default();
            let tenant = r.known("tenant", &tenants, "tenant");
            let model = r.opt_known("model", &models, "model");
            let kind = r.one_of("kind", &["training", "inference", "batch", "interactive"]);
            let priority = r.opt_str("priority", 64).unwrap_or_else(|| "normal".into());
            let submit_at = r.opt_time("submit_at", latest);
            let start_at = r.time("start_at", latest);
            let end_at = r.opt_time("end_at", latest);
            if let (Some(s), Some(e)) = (start_at, end_at) {
                if e < s {
                    r.error("end_at", "is before start_at");
                }
            }
            let mut allocations = Vec::new();
            let mut alloc_keys = HashSet::new();
            for (k, a) in r
                .array("allocations")
                .cloned()
                .unwrap_or_default()
                .iter()
                .enumerate()
            {
                let f = |name: &str| format!("allocations[{k}].{name}");
                let Some(obj) = a.as_object() else {
                    r.error(&format!("allocations[{k}]"), "must be an object");
                    continue;
                };
                for extra in obj
                    .keys()
                    .filter(|x| !["meter", "share", "start_at", "end_at"].contains(&x.as_str()))
                {
                    r.error(&f(extra), "unknown field");
                }
                let mut sub = Record::new(r.index(), a, &["meter", "share", "start_at", "end_at"]);
                let meter = sub.key("meter");
                let share = sub.opt_decimal("share").unwrap_or(Decimal::ONE);
                let a_start = sub.opt_time("start_at", latest).or(start_at);
                let a_end = sub.opt_time("end_at", far_future()).or(end_at);
                for e in sub.errors.drain(..) {
                    r.error(&f(&e.field), e.reason);
                }
                let meter_id = meter.and_then(|m| match meters.get(&m) {
                    Some(m) if m.kind == "gpu" || m.kind == "mig" => Some(m.id),
                    Some(_) => {
                        r.error(&f("meter"), "allocations are of GPU or MIG meters");
                        None
                    }
                    None => {
                        r.error(&f("meter"), "unknown meter");
                        None
                    }
                });
                if share <= Decimal::ZERO
                    || share > Decimal::ONE
                    || wattledger_domain::units::share_ppm(share).is_none()
                {
                    r.error(
                        &f("share"),
                        "must be greater than 0 (at least 0.000001) and at most 1",
                    );
                }
                if let (Some(s), Some(e)) = (a_start, a_end) {
                    if e <= s {
                        r.error(&f("end_at"), "must be after start_at");
                    }
                }
                if let (Some(m), Some(s)) = (meter_id, a_start) {
                    if !alloc_keys.insert((m, s)) {
                        r.error(
                            &f("meter"),
                            "the same GPU and start appear twice in this job",
                        );
                    }
                    allocations.push(AllocationRecord {
                        meter_id: m,
                        share,
                        start_at: s,
                        end_at: a_end,
                    });
                }
            }
            Some(JobRecord {
                key: key?,
                name,
                tenant_id: tenant?,
                model_id: model,
                kind: kind?,
                priority,
                submit_at,
                start_at: start_at?,
                end_at,
                allocations,
            })
        },
    )?;
    reject_repeats(records.iter().map(|r| r.key.clone()), "key")?;
    let written = jobs::upsert(&state.pool, &records, Utc::now()).await?;
    let allocations = records.iter().map(|r| r.allocations.len()).sum();
    Ok(Json(IngestOutcome {
        allocations: Some(Counts::of(allocations, written.allocations)),
        ..IngestOutcome::upserted(records.len(), written.jobs)
    }))
}
