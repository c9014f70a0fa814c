//! Inventory ingest: tenants, sites, models and the meter tree.

use super::{read_all, reject_repeats, IngestOutcome};
use super::{IngestResponses, Records};
use crate::auth::Role;
use crate::http::error::ApiResult;
use crate::http::extract::{Batch, Caller};
use crate::http::validate::Record;
use crate::state::AppState;
use axum::extract::State;
use axum::Json;
use rust_decimal::Decimal;
use std::collections::HashMap;
use utoipa::ToSchema;
use wattledger_domain::attribution::IdlePolicy;
use wattledger_domain::meter_kind::MeterKind;
use wattledger_store::inventory::{
    self, DeviceModelRecord, KeyedTable, MeterRecord, ModelRecord, SiteRecord, TenantRecord,
};
use wattledger_wire::Meter;
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
    idle_policy: IdlePolicy,
    /// Key of the tenant that carries idle energy under the `platform` policy.
    platform_tenant: String,
    #[schema(value_type = Option<f64>)]
    node_static_overhead_w: Option<Decimal>,
    gap_limit_s: Option<i32>,
    /// Region of the site's electricity prices (a bidding zone such as `DE-LU`) when it is
    /// not `grid_region`.
    price_region: Option<String>,
    /// Price per kWh for hours no price signal covers (the rows are flagged).
    #[schema(value_type = Option<String>)]
    fallback_price: Option<Decimal>,
    /// g CO2e per kWh for hours no carbon signal covers (the rows are flagged).
    #[schema(value_type = Option<String>)]
    fallback_intensity_g: Option<Decimal>,
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
    let records = read_all(&batch, &["key", "name"], |r| {
        let key = r.key("key");
        let name = r.str("name", 256);
        key.zip(name).map(|(key, name)| TenantRecord { key, name })
    })?;
    reject_repeats(records.iter().map(|r| r.key.clone()), "key")?;
    let written = inventory::upsert_tenants(&state.pool, &records).await?;
    state.admission.poke();
    state.forget_tenants();
    Ok(Json(IngestOutcome::upserted(records.len(), written)))
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
    let records = read_all(
        &batch,
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
            "price_region",
            "fallback_price",
            "fallback_intensity_g",
        ],
        |r| {
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
            let pue = r.decimal_in("static_pue", 4, Decimal::ONE, Decimal::from(5));
            let policy = r.named::<IdlePolicy>("idle_policy");
            let platform_id = r.known("platform_tenant", &tenants, "tenant");
            let node_w = r
                .opt_decimal_in(
                    "node_static_overhead_w",
                    3,
                    Decimal::ZERO,
                    Decimal::from(1_000_000),
                )
                .unwrap_or_default();
            let gap = r.opt_i64("gap_limit_s").unwrap_or(600);
            if !(60..=86_400).contains(&gap) {
                r.error("gap_limit_s", "must be between 60 and 86400");
            }
            let price_region = r.opt_str("price_region", 64);
            let rate = |r: &mut crate::http::validate::Record, f: &str| {
                r.opt_decimal_in(f, 9, Decimal::ZERO, Decimal::from(99_999_999_999i64))
            };
            let fallback_price = rate(r, "fallback_price");
            let fallback_intensity_g = rate(r, "fallback_intensity_g");
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
                price_region,
                fallback_price,
                fallback_intensity_g,
            })
        },
    )?;
    reject_repeats(records.iter().map(|r| r.key.clone()), "key")?;
    let written = inventory::upsert_sites(&state.pool, &records).await?;
    state.admission.poke();
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
    let records = read_all(
        &batch,
        &["key", "name", "prefill_weight", "decode_weight"],
        |r| {
            let key = r.key("key");
            let name = r.opt_str("name", 256);
            let weight = |r: &mut Record, field: &str, default: i64| {
                r.opt_decimal_in(field, 4, Decimal::ZERO, Decimal::from(1000))
                    .unwrap_or(Decimal::from(default))
            };
            let prefill_weight = weight(r, "prefill_weight", 1);
            let decode_weight = weight(r, "decode_weight", 4);
            key.map(|key| ModelRecord {
                name: name.unwrap_or_else(|| key.clone()),
                key,
                prefill_weight,
                decode_weight,
            })
        },
    )?;
    reject_repeats(records.iter().map(|r| r.key.clone()), "key")?;
    let written = inventory::upsert_models(&state.pool, &records).await?;
    Ok(Json(IngestOutcome::upserted(records.len(), written)))
}

/// A GPU model's embodied (manufacturing) carbon, for SCI's M.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct DeviceModelIn {
    /// The model name GPU meters carry in `device_model`, e.g. `NVIDIA H100 80GB HBM3`.
    key: String,
    /// kg CO2e to make the device (an LCA or the vendor's product carbon footprint).
    #[schema(value_type = String, example = "150")]
    embodied_kg: Decimal,
    /// Expected life; default 5 years (43 800 h).
    lifetime_hours: Option<i32>,
    /// Where the figure comes from.
    source: Option<String>,
    /// A GPU-hour rate (amortised hardware, hosting) for fully loaded cost; with `currency`.
    #[schema(value_type = Option<String>)]
    gpu_hour_rate: Option<Decimal>,
    /// ISO 4217 currency of `gpu_hour_rate`: it applies at sites billing in it.
    #[schema(pattern = "^[A-Z]{3}$")]
    currency: Option<String>,
    /// Typical draw under load, W: admission's estimate for a job with no history.
    typical_power_w: Option<i32>,
}

#[utoipa::path(post, path = "/v1/ingest/device_models", tag = "ingest",
    request_body = Records<DeviceModelIn>,
    responses(IngestResponses),
    security(("bearer" = [])))]
pub async fn device_models(
    State(state): State<AppState>,
    caller: Caller,
    Batch(batch): Batch,
) -> ApiResult<Json<IngestOutcome>> {
    caller.require(&[Role::Operator])?;
    let records = read_all(
        &batch,
        &[
            "key",
            "embodied_kg",
            "lifetime_hours",
            "source",
            "gpu_hour_rate",
            "currency",
            "typical_power_w",
        ],
        |r| {
            let key = r.key("key");
            let kg = r.decimal_in("embodied_kg", 3, Decimal::ZERO, Decimal::from(999_999_999));
            let hours = r.opt_i64("lifetime_hours").unwrap_or(43_800);
            if !(1..=1_000_000).contains(&hours) {
                r.error("lifetime_hours", "must be between 1 and 1000000");
            }
            let source = r.opt_str("source", 512);
            let rate = r.opt_decimal_in("gpu_hour_rate", 6, Decimal::ZERO, Decimal::from(999_999));
            let currency = r.opt_str("currency", 8);
            if currency
                .as_ref()
                .is_some_and(|c| c.len() != 3 || !c.chars().all(|x| x.is_ascii_uppercase()))
            {
                r.error("currency", "must be an ISO 4217 code such as EUR");
            }
            let gpu_hour_rate = match (rate, currency) {
                (Some(v), Some(c)) => Some((v, c)),
                (None, None) => None,
                (Some(_), None) => {
                    r.error("currency", "is required with gpu_hour_rate");
                    None
                }
                (None, Some(_)) => {
                    r.error("gpu_hour_rate", "is required with currency");
                    None
                }
            };
            let typical = r.opt_i64("typical_power_w");
            if typical.is_some_and(|w| !(1..=10_000).contains(&w)) {
                r.error("typical_power_w", "must be between 1 and 10000");
            }
            Some(DeviceModelRecord {
                key: key?,
                embodied_kg: kg?,
                lifetime_hours: hours as i32,
                source,
                gpu_hour_rate,
                typical_power_w: typical.map(|w| w as i32),
            })
        },
    )?;
    reject_repeats(records.iter().map(|r| r.key.clone()), "key")?;
    let written = inventory::upsert_device_models(&state.pool, &records).await?;
    state.admission.poke();
    Ok(Json(IngestOutcome::upserted(records.len(), written)))
}

const METER_FIELDS: [&str; 7] = [
    "key",
    "site",
    "kind",
    "parent",
    "gpu_uuid",
    "device_model",
    "mig_profile",
];

#[utoipa::path(post, path = "/v1/ingest/meters", tag = "ingest",
    request_body = Records<Meter>,
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
    // The stored parents, and the stored meters themselves: a meter's site cannot change.
    let stored = inventory::meters_by_key(
        &state.pool,
        &[str_field("parent"), str_field("key")].concat(),
    )
    .await?;
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
    let records = read_all(&batch, &METER_FIELDS, |r| {
        let key = r.string("key");
        let site = r.string("site");
        let kind = r.named::<MeterKind>("kind");
        let parent = r.opt_string("parent");
        let gpu_uuid = r.opt_string("gpu_uuid");
        let device_model = r.opt_string("device_model");
        let mig_profile = r.opt_string("mig_profile");
        // A meter whose kind is refused is still checked for all else, as a node: the one
        // kind with no rule on whether it has a parent.
        let m = Meter {
            key: key?,
            site: site?,
            kind: kind.unwrap_or(MeterKind::Node),
            parent,
            gpu_uuid,
            device_model,
            mig_profile,
        };
        let problems = m.check();
        if kind.is_none() || !problems.is_empty() {
            r.problems(problems);
            return None;
        }
        let site_id = r.resolve("site", &m.site, &sites, "site");
        // A meter's samples are keyed by its site (and sharded by it on a distributed
        // PostgreSQL): a meter moved to another site is a new meter.
        if let (Some(id), Some(was)) = (site_id, stored.get(&m.key)) {
            if was.site_id != id {
                let at = site_keys
                    .get(&was.site_id)
                    .map_or("another site", String::as_str);
                r.error(
                    "site",
                    format!("the meter is registered at site {at}; a meter's site cannot change (register it under a new key)"),
                );
            }
        }
        // The parent's kind and site, from this batch or from what is stored.
        let kind = m.kind;
        if let (Some(parent), Some(wanted)) = (&m.parent, kind.parent()) {
            let found = match (in_batch.get(parent), stored.get(parent)) {
                (Some((kind, site)), _) => Some((MeterKind::parse(kind), site.clone())),
                (None, Some(s)) => Some((Some(s.kind), site_keys.get(&s.site_id).cloned())),
                (None, None) => None,
            };
            match found {
                None => r.error("parent", "unknown meter"),
                Some((kind_found, _)) if kind_found != Some(wanted) => r.error(
                    "parent",
                    format!("the parent of a {kind} meter must be a {wanted} meter"),
                ),
                Some((_, Some(site))) if site != m.site => {
                    r.error("parent", "the parent is at another site")
                }
                Some(_) => {}
            }
        }
        Some(MeterRecord {
            key: m.key,
            site_id: site_id?,
            kind,
            parent_key: m.parent,
            gpu_uuid: m.gpu_uuid,
            device_model: m.device_model,
            mig_profile: m.mig_profile,
        })
    })?;
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
    state.meters.clear();
    Ok(Json(IngestOutcome::upserted(records.len(), written)))
}
