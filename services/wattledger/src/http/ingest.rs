//! The ingest API: inventory, samples, jobs with allocations, token records.
//!
//! Every endpoint takes `{"records": [...]}`, validates every record, and either refuses the
//! whole batch with a 422 listing each bad record's index, field and reason, or writes it in
//! one statement. Resending a batch changes nothing.

use super::error::{ApiError, ApiResult, ErrorBody, FieldError};
use super::extract::{Batch, Caller, RawBatch};
use super::validate::{all_or_errors, Record};
use super::AppState;
use crate::auth::Role;
use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use chrono::{DateTime, Duration, Utc};
use rust_decimal::Decimal;
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use utoipa::ToSchema;
use wattledger_store::inventory::{
    self, KeyedTable, MeterRecord, ModelRecord, SiteRecord, TenantRecord,
};
use wattledger_store::jobs::{self, AllocationRecord, JobRecord};
use wattledger_store::samples::{self, SampleRow};
use wattledger_store::tokens::{self, TokenRow};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/ingest/tenants", post(tenants))
        .route("/v1/ingest/sites", post(sites))
        .route("/v1/ingest/models", post(models))
        .route("/v1/ingest/meters", post(meters))
        .route("/v1/ingest/samples", post(samples_batch))
        .route("/v1/ingest/jobs", post(jobs_batch))
        .route("/v1/ingest/tokens", post(tokens_batch))
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
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ConflictOut {
    pub index: usize,
    pub reason: String,
}

impl IngestOutcome {
    fn upserted(received: usize, written: u64) -> Self {
        IngestOutcome {
            received,
            written,
            duplicates: received as u64 - written.min(received as u64),
            conflicts: Vec::new(),
        }
    }
}

// ---- wire types (documentation of the records; parsing is field by field) ----

/// A tenant: a team or customer that is charged.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct TenantIn {
    key: String,
    name: String,
}

/// A site: one power and grid domain.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct SiteIn {
    key: String,
    name: String,
    /// Grid region for carbon and prices, e.g. `DE`, `US-CAL-CISO`.
    grid_region: String,
    /// ISO 4217, e.g. `EUR`.
    currency: String,
    power_envelope_w: i64,
    /// Used without a facility meter (and when it misses a step); 1 to 5.
    #[schema(value_type = f64)]
    static_pue: Decimal,
    /// `platform` or `proportional`.
    idle_policy: String,
    /// Key of the tenant that carries idle energy under the `platform` policy.
    platform_tenant: String,
    #[schema(value_type = Option<f64>)]
    node_static_overhead_w: Option<Decimal>,
    gap_limit_s: Option<i32>,
}

/// A model served or trained, with token weights for shared endpoints.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ModelIn {
    key: String,
    name: Option<String>,
    #[schema(value_type = Option<f64>)]
    prefill_weight: Option<Decimal>,
    #[schema(value_type = Option<f64>)]
    decode_weight: Option<Decimal>,
}

/// A meter in the tree facility ⊇ node ⊇ gpu ⊇ mig.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct MeterIn {
    key: String,
    site: String,
    /// `facility`, `node`, `gpu` or `mig`.
    kind: String,
    /// Key of the parent meter: a node's facility (optional), a GPU's node, a MIG's GPU.
    parent: Option<String>,
    gpu_uuid: Option<String>,
    device_model: Option<String>,
    mig_profile: Option<String>,
}

/// One reading: an energy counter (mJ since some origin) and/or a power reading (W).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct SampleIn {
    meter: String,
    /// RFC 3339.
    ts: DateTime<Utc>,
    counter_mj: Option<i64>,
    power_w: Option<f64>,
}

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

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct Records<T: ToSchema> {
    records: Vec<T>,
}

fn latest(state: &AppState) -> DateTime<Utc> {
    Utc::now() + Duration::seconds(state.config.max_clock_skew_s)
}

fn far_future() -> DateTime<Utc> {
    DateTime::<Utc>::MAX_UTC - Duration::days(1)
}

fn check<T>(parsed: Vec<Result<T, Vec<FieldError>>>) -> ApiResult<Vec<T>> {
    all_or_errors(parsed).map_err(ApiError::Validation)
}

fn finish<T>(r: Record<'_>, v: Option<T>) -> Result<T, Vec<FieldError>> {
    match v {
        Some(v) if r.errors.is_empty() => Ok(v),
        _ => Err(r.errors),
    }
}

#[utoipa::path(post, path = "/v1/ingest/tenants", tag = "ingest",
    request_body = Records<TenantIn>,
    responses(IngestResponses),
    security(("bearer" = [])))]
pub async fn tenants(
    State(state): State<AppState>,
    caller: Caller,
    Batch(batch): Batch,
) -> ApiResult<Json<IngestOutcome>> {
    caller.require(&[Role::Operator])?;
    let parsed = batch
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut r = Record::new(i, v, &["key", "name"]);
            let key = r.key("key");
            let name = r.str("name", 256);
            let rec = key.zip(name).map(|(key, name)| TenantRecord { key, name });
            finish(r, rec)
        })
        .collect();
    let records = check(parsed)?;
    reject_repeats(records.iter().map(|r| r.key.clone()), "key")?;
    let written = inventory::upsert_tenants(&state.pool, &records).await?;
    state.forget_tenants();
    Ok(Json(IngestOutcome::upserted(records.len(), written)))
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

#[utoipa::path(post, path = "/v1/ingest/sites", tag = "ingest",
    request_body = Records<SiteIn>,
    responses(IngestResponses),
    security(("bearer" = [])))]
pub async fn sites(
    State(state): State<AppState>,
    caller: Caller,
    Batch(batch): Batch,
) -> ApiResult<Json<IngestOutcome>> {
    caller.require(&[Role::Operator])?;
    let tenant_keys: Vec<String> = batch
        .iter()
        .filter_map(|v| v.get("platform_tenant")?.as_str().map(str::to_owned))
        .collect();
    let tenants = inventory::ids_by_key(&state.pool, KeyedTable::Tenants, &tenant_keys).await?;
    let parsed = batch
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut r = Record::new(
                i,
                v,
                &[
                    "key",
                    "name",
                    "grid_region",
                    "currency",
                    "power_envelope_w",
                    "static_pue",
                    "idle_policy",
                    "platform_tenant",
                    "node_static_overhead_w",
                    "gap_limit_s",
                ],
            );
            let key = r.key("key");
            let name = r.str("name", 256);
            let grid_region = r.str("grid_region", 64);
            let currency = r.str("currency", 3);
            if let Some(c) = &currency {
                if c.len() != 3 || !c.chars().all(|ch| ch.is_ascii_uppercase()) {
                    r.error("currency", "must be an ISO 4217 code such as EUR");
                }
            }
            let envelope = r.i64("power_envelope_w");
            if envelope.is_some_and(|w| w <= 0) {
                r.error("power_envelope_w", "must be positive");
            }
            let pue = r.decimal("static_pue");
            if pue.is_some_and(|p| p < Decimal::ONE || p > Decimal::from(5)) {
                r.error("static_pue", "must be between 1 and 5");
            }
            let policy = r.one_of("idle_policy", &["platform", "proportional"]);
            let platform = r.key("platform_tenant");
            let platform_id = platform.as_ref().and_then(|k| tenants.get(k).copied());
            if platform.is_some() && platform_id.is_none() {
                r.error("platform_tenant", "unknown tenant");
            }
            let node_w = r.opt_decimal("node_static_overhead_w").unwrap_or_default();
            if node_w < Decimal::ZERO || node_w > Decimal::from(1_000_000) {
                r.error("node_static_overhead_w", "must be between 0 and 1000000");
            }
            let gap = r.opt_i64("gap_limit_s").unwrap_or(600);
            if !(60..=86_400).contains(&gap) {
                r.error("gap_limit_s", "must be between 60 and 86400");
            }
            let rec = (|| {
                Some(SiteRecord {
                    key: key?,
                    name: name?,
                    grid_region: grid_region?,
                    currency: currency?,
                    power_envelope_w: envelope?,
                    static_pue: pue?,
                    idle_policy: policy?,
                    platform_tenant_id: platform_id?,
                    node_static_overhead_w: node_w,
                    gap_limit_s: gap as i32,
                })
            })();
            finish(r, rec)
        })
        .collect();
    let records = check(parsed)?;
    reject_repeats(records.iter().map(|r| r.key.clone()), "key")?;
    let written = inventory::upsert_sites(&state.pool, &records).await?;
    Ok(Json(IngestOutcome::upserted(records.len(), written)))
}

#[utoipa::path(post, path = "/v1/ingest/models", tag = "ingest",
    request_body = Records<ModelIn>,
    responses(IngestResponses),
    security(("bearer" = [])))]
pub async fn models(
    State(state): State<AppState>,
    caller: Caller,
    Batch(batch): Batch,
) -> ApiResult<Json<IngestOutcome>> {
    caller.require(&[Role::Operator])?;
    let parsed = batch
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut r = Record::new(i, v, &["key", "name", "prefill_weight", "decode_weight"]);
            let key = r.key("key");
            let name = r.opt_str("name", 256);
            let weight = |r: &mut Record, field: &str, default: i64| {
                let w = r.opt_decimal(field).unwrap_or(Decimal::from(default));
                if w < Decimal::ZERO || w > Decimal::from(1000) {
                    r.error(field, "must be between 0 and 1000");
                }
                w
            };
            let prefill_weight = weight(&mut r, "prefill_weight", 1);
            let decode_weight = weight(&mut r, "decode_weight", 4);
            let rec = key.map(|key| ModelRecord {
                name: name.unwrap_or_else(|| key.clone()),
                key,
                prefill_weight,
                decode_weight,
            });
            finish(r, rec)
        })
        .collect();
    let records = check(parsed)?;
    reject_repeats(records.iter().map(|r| r.key.clone()), "key")?;
    let written = inventory::upsert_models(&state.pool, &records).await?;
    Ok(Json(IngestOutcome::upserted(records.len(), written)))
}

#[utoipa::path(post, path = "/v1/ingest/meters", tag = "ingest",
    request_body = Records<MeterIn>,
    responses(IngestResponses),
    security(("bearer" = [])))]
pub async fn meters(
    State(state): State<AppState>,
    caller: Caller,
    Batch(batch): Batch,
) -> ApiResult<Json<IngestOutcome>> {
    caller.require(&[Role::Operator, Role::Collector])?;
    let str_field = |f: &str| -> Vec<String> {
        batch
            .iter()
            .filter_map(|v| v.get(f)?.as_str().map(str::to_owned))
            .collect()
    };
    let sites = inventory::ids_by_key(&state.pool, KeyedTable::Sites, &str_field("site")).await?;
    let stored = inventory::meters_by_key(&state.pool, &str_field("parent")).await?;
    // Parents may be defined in the same batch.
    let in_batch: HashMap<String, (String, Option<String>)> = batch
        .iter()
        .filter_map(|v| {
            Some((
                v.get("key")?.as_str()?.to_owned(),
                (
                    v.get("kind")?.as_str()?.to_owned(),
                    v.get("site")?.as_str().map(str::to_owned),
                ),
            ))
        })
        .collect();
    let site_keys: HashMap<i64, String> = sites.iter().map(|(k, v)| (*v, k.clone())).collect();
    let parsed = batch
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut r = Record::new(
                i,
                v,
                &[
                    "key",
                    "site",
                    "kind",
                    "parent",
                    "gpu_uuid",
                    "device_model",
                    "mig_profile",
                ],
            );
            let key = r.key("key");
            let site = r.key("site");
            let site_id = site.as_ref().and_then(|s| sites.get(s).copied());
            if site.is_some() && site_id.is_none() {
                r.error("site", "unknown site");
            }
            let kind = r.one_of("kind", &["facility", "node", "gpu", "mig"]);
            let parent = r.opt_key("parent");
            let gpu_uuid = r.opt_str("gpu_uuid", 128);
            let device_model = r.opt_str("device_model", 128);
            let mig_profile = r.opt_str("mig_profile", 64);
            if let Some(kind) = &kind {
                let wanted = match kind.as_str() {
                    "facility" => None,
                    "node" => Some("facility"),
                    "gpu" => Some("node"),
                    _ => Some("gpu"),
                };
                let parent_info = parent
                    .as_ref()
                    .map(|p| match (stored.get(p), in_batch.get(p)) {
                        (_, Some((k, s))) => Some((k.clone(), s.clone())),
                        (Some(m), None) => Some((
                            m.kind.clone(),
                            site_keys.get(&m.site_id).cloned().or(Some(String::new())),
                        )),
                        (None, None) => None,
                    });
                match (wanted, &parent, parent_info) {
                    (None, Some(_), _) => r.error("parent", "a facility meter has no parent"),
                    (Some(_), None, _) if kind != "node" => {
                        r.error("parent", format!("a {kind} meter needs a parent"))
                    }
                    (_, Some(_), Some(None)) => r.error("parent", "unknown meter"),
                    (Some(w), Some(_), Some(Some((pk, psite)))) => {
                        if pk != w {
                            r.error(
                                "parent",
                                format!("the parent of a {kind} meter must be a {w} meter"),
                            );
                        } else if psite.is_some()
                            && psite != site
                            && !psite.as_deref().is_some_and(str::is_empty)
                        {
                            r.error("parent", "the parent is at another site");
                        }
                    }
                    _ => {}
                }
                if parent.as_deref() == key.as_deref() && parent.is_some() {
                    r.error("parent", "a meter cannot be its own parent");
                }
            }
            let rec = (|| {
                Some(MeterRecord {
                    key: key?,
                    site_id: site_id?,
                    kind: kind?,
                    parent_key: parent,
                    gpu_uuid,
                    device_model,
                    mig_profile,
                })
            })();
            finish(r, rec)
        })
        .collect();
    let records = check(parsed)?;
    reject_repeats(records.iter().map(|r| r.key.clone()), "key")?;
    reject_repeats(
        records.iter().filter_map(|r| r.gpu_uuid.clone()),
        "gpu_uuid",
    )?;
    let mut tx = state
        .pool
        .begin()
        .await
        .map_err(wattledger_store::StoreError::from)?;
    let written = inventory::upsert_meters(&mut tx, &records).await?;
    tx.commit()
        .await
        .map_err(wattledger_store::StoreError::from)?;
    Ok(Json(IngestOutcome::upserted(records.len(), written)))
}

#[utoipa::path(post, path = "/v1/ingest/samples", tag = "ingest",
    request_body = Records<SampleIn>,
    responses(IngestResponses),
    security(("bearer" = [])))]
pub async fn samples_batch(
    State(state): State<AppState>,
    caller: Caller,
    RawBatch(bytes): RawBatch,
) -> ApiResult<Json<IngestOutcome>> {
    caller.require(&[Role::Collector])?;
    let latest = latest(&state);
    // The common case, a well-formed batch, is read straight into typed records; anything
    // else takes the field-by-field path, which is the one that explains what is wrong.
    if let Ok(strict) = serde_json::from_slice::<StrictSamples>(&bytes) {
        if strict.records.len() <= state.config.max_batch_records {
            let keys = distinct(strict.records.iter().map(|r| r.meter.as_ref()));
            let meters = inventory::meters_by_key(&state.pool, &keys).await?;
            if let Some(rows) = fast_samples(&strict.records, &meters, latest) {
                return store_samples(&state, rows.len(), rows).await;
            }
        }
    }
    let Batch(batch) = Batch::parse(&bytes, state.config.max_batch_records)?;
    let keys = distinct(batch.iter().filter_map(|v| v.get("meter")?.as_str()));
    let meters = inventory::meters_by_key(&state.pool, &keys).await?;
    let parsed: Vec<Result<SampleRow, Vec<FieldError>>> = batch
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut r = Record::new(i, v, &["meter", "ts", "counter_mj", "power_w"]);
            let meter = r.key("meter").and_then(|k| match meters.get(&k) {
                None => {
                    r.error("meter", "unknown meter");
                    None
                }
                Some(m) if m.kind == "mig" => {
                    r.error(
                        "meter",
                        "a MIG instance has no energy counter; send its GPU's samples",
                    );
                    None
                }
                Some(m) => Some(m.id),
            });
            let ts = r.time("ts", latest);
            let counter = r.opt_i64("counter_mj");
            if counter.is_some_and(|c| c < 0) {
                r.error("counter_mj", "must not be negative");
            }
            let power = r.opt_f64("power_w");
            let power_mw = match power {
                Some(p) if p < 0.0 => {
                    r.error("power_w", "must not be negative");
                    None
                }
                Some(p) if p > 10_000_000.0 => {
                    r.error("power_w", "is above 10 MW: not a plausible meter reading");
                    None
                }
                // The edge of the float world: readings arrive as W, the ledger keeps integer mW.
                Some(p) => Some((p * 1000.0).round() as i64),
                None => None,
            };
            if counter.is_none() && power.is_none() && r.errors.is_empty() {
                r.error("counter_mj", "a sample needs counter_mj or power_w");
            }
            let rec = meter.zip(ts).map(|(meter_id, ts)| SampleRow {
                meter_id,
                ts,
                counter_mj: counter,
                power_mw,
            });
            finish(r, rec)
        })
        .collect();
    let rows = check(parsed)?;
    store_samples(&state, batch.len(), rows).await
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StrictSamples<'a> {
    #[serde(borrow)]
    records: Vec<StrictSample<'a>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StrictSample<'a> {
    #[serde(borrow)]
    meter: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    ts: std::borrow::Cow<'a, str>,
    counter_mj: Option<i64>,
    power_w: Option<f64>,
}

fn distinct<'a>(keys: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut v: Vec<String> = keys.map(str::to_owned).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Typed records to rows if every one is valid; `None` sends the batch to the slow path.
fn fast_samples(
    records: &[StrictSample<'_>],
    meters: &HashMap<String, inventory::MeterRef>,
    latest: DateTime<Utc>,
) -> Option<Vec<SampleRow>> {
    let earliest = DateTime::parse_from_rfc3339("2000-01-01T00:00:00Z")
        .ok()?
        .to_utc();
    records
        .iter()
        .map(|r| {
            let meter = meters.get(r.meter.as_ref()).filter(|m| m.kind != "mig")?;
            let ts = DateTime::parse_from_rfc3339(&r.ts).ok()?.to_utc();
            let power_ok = r
                .power_w
                .is_none_or(|p| p.is_finite() && (0.0..=10_000_000.0).contains(&p));
            let ok = (earliest..=latest).contains(&ts)
                && r.counter_mj.is_none_or(|c| c >= 0)
                && power_ok
                && (r.counter_mj.is_some() || r.power_w.is_some());
            ok.then(|| SampleRow {
                meter_id: meter.id,
                ts,
                counter_mj: r.counter_mj,
                power_mw: r.power_w.map(|p| (p * 1000.0).round() as i64),
            })
        })
        .collect()
}

/// Writes valid rows: identical copies in the batch collapse, different ones are refused,
/// conflicts with stored samples are reported.
async fn store_samples(
    state: &AppState,
    received: usize,
    rows: Vec<SampleRow>,
) -> ApiResult<Json<IngestOutcome>> {
    let mut seen: HashMap<(i64, DateTime<Utc>), usize> = HashMap::with_capacity(rows.len());
    let mut errors = Vec::new();
    let mut unique = Vec::with_capacity(rows.len());
    let mut positions = Vec::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        match seen.get(&(row.meter_id, row.ts)) {
            Some(&j) if rows[j] == *row => {}
            Some(_) => errors.push(FieldError::new(
                i,
                "ts",
                "another record in this batch has this meter and time with other values",
            )),
            None => {
                seen.insert((row.meter_id, row.ts), i);
                unique.push(*row);
                positions.push(i);
            }
        }
    }
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let outcome = samples::insert(&state.pool, &unique).await?;
    if !outcome.conflicts.is_empty() {
        tracing::warn!(
            conflicts = outcome.conflicts.len(),
            "conflicting duplicate samples kept as stored"
        );
    }
    Ok(Json(IngestOutcome {
        received,
        written: outcome.inserted,
        duplicates: outcome.duplicates + (rows.len() - unique.len()) as u64,
        conflicts: outcome
            .conflicts
            .iter()
            .map(|c| ConflictOut {
                index: positions[c.index],
                reason: format!(
                    "already stored with counter_mj={:?} power_mw={:?}; the stored sample stands",
                    c.stored_counter_mj, c.stored_power_mw
                ),
            })
            .collect(),
    }))
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
    let meters = inventory::meters_by_key(&state.pool, &meter_keys).await?;
    let latest = latest(&state);
    let parsed = batch
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut r = Record::new(
                i,
                v,
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
            );
            let key = r.key("key");
            let name = r.opt_str("name", 512).unwrap_or_default();
            let tenant = r.key("tenant").and_then(|t| {
                let id = tenants.get(&t).copied();
                if id.is_none() {
                    r.error("tenant", "unknown tenant");
                }
                id
            });
            let model = r.opt_key("model").and_then(|m| {
                let id = models.get(&m).copied();
                if id.is_none() {
                    r.error("model", "unknown model");
                }
                id
            });
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
            let rec = (|| {
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
            })();
            finish(r, rec)
        })
        .collect();
    let records = check(parsed)?;
    reject_repeats(records.iter().map(|r| r.key.clone()), "key")?;
    let written = jobs::upsert(&state.pool, &records, Utc::now()).await?;
    Ok(Json(IngestOutcome::upserted(records.len(), written)))
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
    let parsed = batch
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut r = Record::new(
                i,
                v,
                &[
                    "job",
                    "tenant",
                    "start_at",
                    "end_at",
                    "prompt_tokens",
                    "generated_tokens",
                ],
            );
            let job = r.key("job").and_then(|k| {
                let id = jobs.get(&k).copied();
                if id.is_none() {
                    r.error("job", "unknown job");
                }
                id
            });
            let tenant = r.opt_key("tenant").map(|k| {
                let id = tenants.get(&k).copied();
                if id.is_none() {
                    r.error("tenant", "unknown tenant");
                }
                id
            });
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
            let prompt = count(&mut r, "prompt_tokens");
            let generated = count(&mut r, "generated_tokens");
            let rec = (|| {
                Some(TokenRow {
                    job_id: job?,
                    tenant_id: match tenant {
                        Some(t) => Some(t?),
                        None => None,
                    },
                    start_at: start?,
                    end_at: end?,
                    prompt_tokens: prompt?,
                    generated_tokens: generated?,
                })
            })();
            finish(r, rec)
        })
        .collect();
    let rows = check(parsed)?;
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
    }))
}
