//! Inventory ingest: tenants, sites, models and the meter tree.

use super::{accept_all, reject_repeats, IngestOutcome};
use super::{IngestResponses, Records};
use crate::app;
use crate::auth::Role;
use crate::http::error::ApiResult;
use crate::http::extract::{Batch, Caller};
use crate::http::validate::ReadBatch;
use crate::state::AppState;
use axum::extract::State;
use axum::Json;
use chrono::Utc;
use rust_decimal::Decimal;
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use utoipa::ToSchema;
use wattledger_domain::attribution::IdlePolicy;
use wattledger_domain::meter_kind::MeterKind;
use wattledger_store::inventory::{
    self, DeviceModelRecord, KeyedTable, MeterRecord, ModelRecord, SiteRecord, TenantRecord,
};
use wattledger_wire::{Meter, Problem, Problems};

const MAX_NAME_LEN: usize = 256;
const MAX_REGION_LEN: usize = 64;
wattledger_domain::record! {
    /// A tenant: a team or customer that is charged.
    #[derive(ToSchema, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct TenantIn {
        key: String,
        name: String,
    }
}

impl TenantIn {
    fn check(&self) -> Vec<Problem> {
        let mut p = Problems::default();
        p.key("key", &self.key);
        p.text("name", &self.name, MAX_NAME_LEN);
        p.done()
    }
}

wattledger_domain::record! {
    /// A site: one power and grid domain.
    #[derive(ToSchema, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct SiteIn {
        key: String,
        name: String,
        /// Grid region for carbon and prices, e.g. `DE`, `US-CAL-CISO`.
        grid_region: String,
        /// ISO 4217, e.g. `EUR`.
        #[schema(pattern = "^[A-Z]{3}$")]
        currency: String,
        /// The most the site may draw, W.
        power_envelope_w: i64,
        /// Used without a facility meter (and when it misses a step); 1 to 5.
        #[schema(value_type = f64)]
        static_pue: Decimal,
        idle_policy: IdlePolicy,
        /// Key of the tenant that carries idle energy under the `platform` policy.
        platform_tenant: String,
        /// A node's draw its GPU meters do not see, W; 0 when absent.
        #[schema(value_type = Option<f64>)]
        node_static_overhead_w: Option<Decimal>,
        /// The longest gap between samples that is filled, s: 60 to 86400, 600 when absent.
        gap_limit_s: Option<i64>,
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
}

/// What a `numeric(20, 9)` rate column holds.
const MAX_RATE: i64 = 99_999_999_999;

impl SiteIn {
    fn check(&self) -> Vec<Problem> {
        let mut p = Problems::default();
        p.key("key", &self.key);
        p.text("name", &self.name, MAX_NAME_LEN);
        p.text("grid_region", &self.grid_region, MAX_REGION_LEN);
        p.currency("currency", &self.currency);
        if self.power_envelope_w <= 0 {
            p.add("power_envelope_w", "must be positive");
        }
        p.decimal(
            "static_pue",
            self.static_pue,
            4,
            Decimal::ONE,
            Decimal::from(5),
        );
        p.key("platform_tenant", &self.platform_tenant);
        if let Some(w) = self.node_static_overhead_w {
            p.decimal(
                "node_static_overhead_w",
                w,
                3,
                Decimal::ZERO,
                Decimal::from(1_000_000),
            );
        }
        if let Some(gap) = self.gap_limit_s {
            p.within("gap_limit_s", gap, 60..=86_400);
        }
        if let Some(r) = &self.price_region {
            p.text("price_region", r, MAX_REGION_LEN);
        }
        for (field, rate) in [
            ("fallback_price", self.fallback_price),
            ("fallback_intensity_g", self.fallback_intensity_g),
        ] {
            if let Some(rate) = rate {
                p.decimal(field, rate, 9, Decimal::ZERO, Decimal::from(MAX_RATE));
            }
        }
        p.done()
    }
}

wattledger_domain::record! {
    /// A model served or trained, with token weights for shared endpoints.
    #[derive(ToSchema, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct ModelIn {
        key: String,
        /// The key when absent.
        name: Option<String>,
        /// A prompt token's weight in a shared endpoint's split, 0 to 1000; 1 when absent.
        #[schema(value_type = Option<f64>)]
        prefill_weight: Option<Decimal>,
        /// A generated token's weight, 0 to 1000; 4 when absent.
        #[schema(value_type = Option<f64>)]
        decode_weight: Option<Decimal>,
    }
}

impl ModelIn {
    fn check(&self) -> Vec<Problem> {
        let mut p = Problems::default();
        p.key("key", &self.key);
        if let Some(name) = &self.name {
            p.text("name", name, MAX_NAME_LEN);
        }
        for (field, w) in [
            ("prefill_weight", self.prefill_weight),
            ("decode_weight", self.decode_weight),
        ] {
            if let Some(w) = w {
                p.decimal(field, w, 4, Decimal::ZERO, Decimal::from(1000));
            }
        }
        p.done()
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
    let records = accept_all(ReadBatch::of(&batch), |t: TenantIn, r| {
        r.problems(t.check());
        Some(TenantRecord {
            key: t.key,
            name: t.name,
        })
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
    let read = ReadBatch::<SiteIn>::of(&batch);
    let tenant_keys: Vec<String> = read.records().map(|s| s.platform_tenant.clone()).collect();
    let tenants = inventory::ids_by_key(&state.pool, KeyedTable::Tenants, &tenant_keys).await?;
    let records = accept_all(read, |site, r| {
        r.problems(site.check());
        let platform_id = r.resolve("platform_tenant", &site.platform_tenant, &tenants, "tenant");
        Some(SiteRecord {
            key: site.key,
            name: site.name,
            grid_region: site.grid_region,
            currency: site.currency,
            power_envelope_w: site.power_envelope_w,
            static_pue: site.static_pue,
            idle_policy: site.idle_policy,
            platform_tenant_id: platform_id?,
            node_static_overhead_w: site.node_static_overhead_w.unwrap_or_default(),
            gap_limit_s: site.gap_limit_s.unwrap_or(600) as i32,
            price_region: site.price_region,
            fallback_price: site.fallback_price,
            fallback_intensity_g: site.fallback_intensity_g,
        })
    })?;
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
    let records = accept_all(ReadBatch::of(&batch), |m: ModelIn, r| {
        r.problems(m.check());
        Some(ModelRecord {
            name: m.name.unwrap_or_else(|| m.key.clone()),
            key: m.key,
            prefill_weight: m.prefill_weight.unwrap_or(Decimal::ONE),
            decode_weight: m.decode_weight.unwrap_or(Decimal::from(4)),
        })
    })?;
    reject_repeats(records.iter().map(|r| r.key.clone()), "key")?;
    let written = app::ingest::models::write(&state.pool, &records, Utc::now()).await?;
    Ok(Json(IngestOutcome::upserted(records.len(), written.models)))
}

wattledger_domain::record! {
    /// A GPU model's embodied (manufacturing) carbon, for SCI's M.
    #[derive(ToSchema, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct DeviceModelIn {
        /// The model name GPU meters carry in `device_model`, e.g. `NVIDIA H100 80GB HBM3`.
        key: String,
        /// kg CO2e to make the device (an LCA or the vendor's product carbon footprint).
        #[schema(value_type = String, example = "150")]
        embodied_kg: Decimal,
        /// Expected life, 1 to 1000000 hours; 5 years (43 800 h) when absent.
        lifetime_hours: Option<i64>,
        /// Where the figure comes from.
        source: Option<String>,
        /// A GPU-hour rate (amortised hardware, hosting) for fully loaded cost; with `currency`.
        #[schema(value_type = Option<String>)]
        gpu_hour_rate: Option<Decimal>,
        /// ISO 4217 currency of `gpu_hour_rate`: it applies at sites billing in it.
        #[schema(pattern = "^[A-Z]{3}$")]
        currency: Option<String>,
        /// Typical draw under load, 1 to 10000 W: admission's estimate for a job with no
        /// history.
        typical_power_w: Option<i64>,
        /// Other names collectors report the model by, up to 32 (the AMD device metrics
        /// exporter's `card_model` part number, e.g. `102-G30211-00`): a meter carrying one
        /// is priced and given embodied carbon as this model. Replaces the aliases stored;
        /// absent keeps them. An alias is no device model's key and no other model's alias.
        aliases: Option<Vec<String>>,
    }
}

impl DeviceModelIn {
    fn check(&self) -> Vec<Problem> {
        let mut p = Problems::default();
        p.key("key", &self.key);
        p.decimal(
            "embodied_kg",
            self.embodied_kg,
            3,
            Decimal::ZERO,
            Decimal::from(999_999_999),
        );
        if let Some(h) = self.lifetime_hours {
            p.within("lifetime_hours", h, 1..=1_000_000);
        }
        if let Some(source) = &self.source {
            p.text("source", source, 512);
        }
        if let Some(rate) = self.gpu_hour_rate {
            p.decimal(
                "gpu_hour_rate",
                rate,
                6,
                Decimal::ZERO,
                Decimal::from(999_999),
            );
        }
        if let Some(c) = &self.currency {
            p.currency("currency", c);
        }
        match (self.gpu_hour_rate, &self.currency) {
            (Some(_), None) => p.add("currency", "is required with gpu_hour_rate"),
            (None, Some(_)) => p.add("gpu_hour_rate", "is required with currency"),
            _ => {}
        }
        if let Some(w) = self.typical_power_w {
            p.within("typical_power_w", w, 1..=10_000);
        }
        let aliases = self.aliases.as_deref().unwrap_or_default();
        if aliases.len() > 32 {
            p.add("aliases", "at most 32");
        }
        for (i, a) in aliases.iter().enumerate() {
            let field = format!("aliases[{i}]");
            // The same bound a meter's device_model has: an alias names what meters carry.
            p.text(&field, a, 64);
            if a.trim().is_empty() {
                p.add(&field, "must not be empty");
            } else if *a == self.key {
                p.add(&field, "is the model's own key");
            }
        }
        p.done()
    }
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
    let read = ReadBatch::<DeviceModelIn>::of(&batch);
    // What the batch's keys and aliases name now, and what the batch itself lists.
    let mut names: Vec<String> = read.records().map(|d| d.key.clone()).collect();
    names.extend(
        read.records()
            .flat_map(|d| d.aliases.clone().unwrap_or_default()),
    );
    let stored = inventory::device_model_names(&state.pool, &names).await?;
    let listing: HashMap<String, Vec<String>> = read
        .records()
        .filter_map(|d| Some((d.key.clone(), d.aliases.clone()?)))
        .collect();
    let keys: HashSet<String> = read.records().map(|d| d.key.clone()).collect();
    let mut seen: HashSet<String> = HashSet::new();
    let records = accept_all(read, |d: DeviceModelIn, r| {
        r.problems(d.check());
        if let Some(model) = stored.get(&d.key).filter(|m| **m != d.key) {
            r.error("key", format!("is an alias of device model {model}"));
        }
        for (i, a) in d.aliases.iter().flatten().enumerate() {
            let field = format!("aliases[{i}]");
            match stored.get(a) {
                // Its own key: `check` said so.
                _ if *a == d.key => {}
                _ if !seen.insert(a.clone()) => r.error(&field, "appears twice in this batch"),
                _ if keys.contains(a) => r.error(&field, "is a device model's key"),
                Some(model) if model == a => r.error(&field, "is a device model's key"),
                // Another model's alias moves only where this batch drops it from that one.
                Some(model)
                    if *model != d.key
                        && listing.get(model).is_none_or(|kept| kept.contains(a)) =>
                {
                    r.error(&field, format!("is an alias of device model {model}"))
                }
                _ => {}
            }
        }
        Some(DeviceModelRecord {
            key: d.key,
            embodied_kg: d.embodied_kg,
            lifetime_hours: d.lifetime_hours.unwrap_or(43_800) as i32,
            source: d.source,
            gpu_hour_rate: d.gpu_hour_rate.zip(d.currency),
            typical_power_w: d.typical_power_w.map(|w| w as i32),
            aliases: d.aliases,
        })
    })?;
    reject_repeats(records.iter().map(|r| r.key.clone()), "key")?;
    let written = crate::app::ingest::device_models::write(&state.pool, &records).await?;
    state.admission.poke();
    Ok(Json(IngestOutcome::upserted(records.len(), written)))
}

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
    let read = ReadBatch::<Meter>::of(&batch);
    let site_keys: Vec<String> = read.records().map(|m| m.site.clone()).collect();
    let sites = inventory::ids_by_key(&state.pool, KeyedTable::Sites, &site_keys).await?;
    // The stored parents, and the stored meters themselves: a meter's site cannot change.
    let keys: Vec<String> = read
        .records()
        .flat_map(|m| [Some(&m.key), m.parent.as_ref()])
        .flatten()
        .cloned()
        .collect();
    let stored = inventory::meters_by_key(&state.pool, &keys).await?;
    let uuids: Vec<String> = read.records().filter_map(|m| m.gpu_uuid.clone()).collect();
    let uuid_holders = inventory::uuid_holders(&state.pool, &uuids).await?;
    // The stored children of meters whose kind changes: the tree must stay whole.
    let changing: Vec<i64> = read
        .records()
        .filter_map(|m| stored.get(&m.key).filter(|s| s.kind != m.kind))
        .map(|s| s.id)
        .collect();
    let children = inventory::children_of(&state.pool, &changing).await?;
    // Parents may be defined in the same batch.
    let in_batch: HashMap<String, (MeterKind, String)> = read
        .records()
        .map(|m| (m.key.clone(), (m.kind, m.site.clone())))
        .collect();
    let site_keys: HashMap<i64, String> = sites.iter().map(|(k, v)| (*v, k.clone())).collect();
    let records = accept_all(read, |m, r| {
        // A meter whose kind is refused is read on as a node (see `Meter`), and its other
        // fields checked; its tree is not looked up.
        r.problems(m.check());
        if !r.is_empty() {
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
        // A UUID another meter of this site holds moves to this one (the upsert takes it);
        // one held at another site names a device that site has.
        if let (Some(uuid), Some(site)) = (&m.gpu_uuid, site_id) {
            let own = stored.get(&m.key).map(|s| s.id);
            if let Some(holder) = uuid_holders.get(uuid) {
                if Some(holder.id) != own && holder.site_id != site {
                    r.error(
                        "gpu_uuid",
                        "the GPU UUID is registered to a meter at another site",
                    );
                }
            }
        }
        // A meter that changes kind (an AMD board switched between SPX and CPX) keeps only
        // children that may sit under its new kind, unless this batch moves them.
        if let Some(was) = stored.get(&m.key).filter(|s| s.kind != m.kind) {
            for (child, child_kind) in children.get(&was.id).into_iter().flatten() {
                let moved = in_batch.contains_key(child);
                if !moved && child_kind.parent() != Some(m.kind) {
                    r.error(
                        "kind",
                        format!("the meter was a {} with the {child_kind} meter {child} under it, which a {} meter cannot hold: send {child} under its new parent in the same batch", was.kind, m.kind),
                    );
                }
            }
        }
        // The parent's kind and site, from this batch or from what is stored.
        let kind = m.kind;
        if let (Some(parent), Some(wanted)) = (&m.parent, kind.parent()) {
            let found = match (in_batch.get(parent), stored.get(parent)) {
                (Some((kind, site)), _) => Some((*kind, Some(site.clone()))),
                (None, Some(s)) => Some((s.kind, site_keys.get(&s.site_id).cloned())),
                (None, None) => None,
            };
            match found {
                None => r.error("parent", "unknown meter"),
                Some((kind_found, _)) if kind_found != wanted => r.error(
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
    let written = crate::app::ingest::meters::write(&state.pool, &records).await?;
    state.meters.clear();
    Ok(Json(IngestOutcome::upserted(records.len(), written)))
}
