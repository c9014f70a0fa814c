//! Inventory upserts and lookups: tenants, sites, models, meters.
//!
//! Upserts are batch statements over UNNEST arrays. Re-sending the same records changes
//! nothing (rows are only touched when a value differs), so collectors can resend freely.

use crate::StoreResult;
use rust_decimal::Decimal;
use sqlx::{PgConnection, PgExecutor, PgPool};
use std::collections::HashMap;
use wattledger_domain::attribution::IdlePolicy;
use wattledger_domain::meter_kind::MeterKind;

#[derive(Debug, Clone)]
pub struct TenantRecord {
    pub key: String,
    pub name: String,
}

#[derive(Debug, Clone)]
pub struct SiteRecord {
    pub key: String,
    pub name: String,
    pub grid_region: String,
    pub currency: String,
    pub power_envelope_w: i64,
    pub static_pue: Decimal,
    pub idle_policy: IdlePolicy,
    pub platform_tenant_id: i64,
    pub node_static_overhead_w: Decimal,
    pub gap_limit_s: i32,
    pub price_region: Option<String>,
    pub fallback_price: Option<Decimal>,
    pub fallback_intensity_g: Option<Decimal>,
}

#[derive(Debug, Clone)]
pub struct ModelRecord {
    pub key: String,
    pub name: String,
    pub prefill_weight: Decimal,
    pub decode_weight: Decimal,
}

#[derive(Debug, Clone)]
pub struct MeterRecord {
    pub key: String,
    pub site_id: i64,
    pub kind: MeterKind,
    pub parent_key: Option<String>,
    pub gpu_uuid: Option<String>,
    pub device_model: Option<String>,
    pub mig_profile: Option<String>,
}

/// A meter as validation and attribution need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeterRef {
    pub id: i64,
    pub site_id: i64,
    pub kind: MeterKind,
    pub parent_id: Option<i64>,
}

#[tracing::instrument(skip_all, fields(n = records.len()))]
pub async fn upsert_tenants(pool: &PgPool, records: &[TenantRecord]) -> StoreResult<u64> {
    let keys: Vec<&str> = records.iter().map(|r| r.key.as_str()).collect();
    let names: Vec<&str> = records.iter().map(|r| r.name.as_str()).collect();
    let done = sqlx::query!(
        "INSERT INTO tenants (key, name) SELECT * FROM UNNEST($1::text[], $2::text[])
         ON CONFLICT (key) DO UPDATE SET name = excluded.name, updated_at = excluded.updated_at
         WHERE tenants.name IS DISTINCT FROM excluded.name",
        &keys as &[&str],
        &names as &[&str],
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

#[tracing::instrument(skip_all, fields(n = records.len()))]
pub async fn upsert_sites(pool: &PgPool, records: &[SiteRecord]) -> StoreResult<u64> {
    let col = |f: fn(&SiteRecord) -> String| records.iter().map(f).collect::<Vec<_>>();
    let done = sqlx::query!(
        "INSERT INTO sites (key, name, grid_region, currency, power_envelope_w, static_pue,
                            idle_policy, platform_tenant_id, node_static_overhead_w, gap_limit_s,
                            price_region, fallback_price, fallback_intensity_g)
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[],
                              $6::numeric[], $7::text[], $8::bigint[], $9::numeric[], $10::int[],
                              $11::text[], $12::numeric[], $13::numeric[])
         ON CONFLICT (key) DO UPDATE SET
            name = excluded.name, grid_region = excluded.grid_region, currency = excluded.currency,
            power_envelope_w = excluded.power_envelope_w, static_pue = excluded.static_pue,
            idle_policy = excluded.idle_policy, platform_tenant_id = excluded.platform_tenant_id,
            node_static_overhead_w = excluded.node_static_overhead_w,
            gap_limit_s = excluded.gap_limit_s, price_region = excluded.price_region,
            fallback_price = excluded.fallback_price,
            fallback_intensity_g = excluded.fallback_intensity_g, updated_at = excluded.updated_at
         WHERE (sites.name, sites.grid_region, sites.currency, sites.power_envelope_w,
                sites.static_pue, sites.idle_policy, sites.platform_tenant_id,
                sites.node_static_overhead_w, sites.gap_limit_s, sites.price_region,
                sites.fallback_price, sites.fallback_intensity_g)
               IS DISTINCT FROM
               (excluded.name, excluded.grid_region, excluded.currency, excluded.power_envelope_w,
                excluded.static_pue, excluded.idle_policy, excluded.platform_tenant_id,
                excluded.node_static_overhead_w, excluded.gap_limit_s, excluded.price_region,
                excluded.fallback_price, excluded.fallback_intensity_g)",
        &col(|r| r.key.clone()),
        &col(|r| r.name.clone()),
        &col(|r| r.grid_region.clone()),
        &col(|r| r.currency.clone()),
        &records
            .iter()
            .map(|r| r.power_envelope_w)
            .collect::<Vec<_>>(),
        &records.iter().map(|r| r.static_pue).collect::<Vec<_>>(),
        &records
            .iter()
            .map(|r| r.idle_policy.as_str())
            .collect::<Vec<_>>() as &[&str],
        &records
            .iter()
            .map(|r| r.platform_tenant_id)
            .collect::<Vec<_>>(),
        &records
            .iter()
            .map(|r| r.node_static_overhead_w)
            .collect::<Vec<_>>(),
        &records.iter().map(|r| r.gap_limit_s).collect::<Vec<_>>(),
        &records
            .iter()
            .map(|r| r.price_region.clone())
            .collect::<Vec<_>>() as &[Option<String>],
        &records.iter().map(|r| r.fallback_price).collect::<Vec<_>>() as &[Option<Decimal>],
        &records
            .iter()
            .map(|r| r.fallback_intensity_g)
            .collect::<Vec<_>>() as &[Option<Decimal>],
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

#[tracing::instrument(skip_all, fields(n = records.len()))]
pub async fn upsert_models(
    db: impl sqlx::PgExecutor<'_>,
    records: &[ModelRecord],
) -> StoreResult<u64> {
    let done = sqlx::query!(
        "INSERT INTO models (key, name, prefill_weight, decode_weight)
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::numeric[], $4::numeric[])
         ON CONFLICT (key) DO UPDATE SET name = excluded.name,
            prefill_weight = excluded.prefill_weight, decode_weight = excluded.decode_weight,
            updated_at = excluded.updated_at
         WHERE (models.name, models.prefill_weight, models.decode_weight)
               IS DISTINCT FROM (excluded.name, excluded.prefill_weight, excluded.decode_weight)",
        &records.iter().map(|r| r.key.clone()).collect::<Vec<_>>(),
        &records.iter().map(|r| r.name.clone()).collect::<Vec<_>>(),
        &records.iter().map(|r| r.prefill_weight).collect::<Vec<_>>(),
        &records.iter().map(|r| r.decode_weight).collect::<Vec<_>>(),
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

#[derive(Debug, Clone)]
pub struct DeviceModelRecord {
    pub key: String,
    pub embodied_kg: Decimal,
    pub lifetime_hours: i32,
    pub source: Option<String>,
    /// A GPU-hour rate and its currency, for fully loaded cost.
    pub gpu_hour_rate: Option<(Decimal, String)>,
    /// Typical draw under load, W, for admission estimates.
    pub typical_power_w: Option<i32>,
    /// Every other name collectors report it by, replacing those stored; `None` keeps them.
    pub aliases: Option<Vec<String>>,
}

/// Device models apply to hours attributed from now on; `wattledger attribute --from --to`
/// recomputes history with a revised figure.
#[tracing::instrument(skip_all, fields(n = records.len()))]
pub async fn upsert_device_models(
    conn: &mut PgConnection,
    records: &[DeviceModelRecord],
) -> StoreResult<u64> {
    let done = sqlx::query!(
        "INSERT INTO device_models (key, embodied_kg, lifetime_hours, source, gpu_hour_rate,
                                    rate_currency, typical_power_w)
         SELECT * FROM UNNEST($1::text[], $2::numeric[], $3::int[], $4::text[], $5::numeric[],
                              $6::text[], $7::int[])
         ON CONFLICT (key) DO UPDATE SET embodied_kg = excluded.embodied_kg,
            lifetime_hours = excluded.lifetime_hours, source = excluded.source,
            gpu_hour_rate = excluded.gpu_hour_rate, rate_currency = excluded.rate_currency,
            typical_power_w = excluded.typical_power_w, updated_at = excluded.updated_at
         WHERE (device_models.embodied_kg, device_models.lifetime_hours, device_models.source,
                device_models.gpu_hour_rate, device_models.rate_currency,
                device_models.typical_power_w)
               IS DISTINCT FROM (excluded.embodied_kg, excluded.lifetime_hours, excluded.source,
                excluded.gpu_hour_rate, excluded.rate_currency, excluded.typical_power_w)",
        &records.iter().map(|r| r.key.clone()).collect::<Vec<_>>(),
        &records.iter().map(|r| r.embodied_kg).collect::<Vec<_>>(),
        &records.iter().map(|r| r.lifetime_hours).collect::<Vec<_>>(),
        &records.iter().map(|r| r.source.clone()).collect::<Vec<_>>() as &[Option<String>],
        &records
            .iter()
            .map(|r| r.gpu_hour_rate.as_ref().map(|x| x.0))
            .collect::<Vec<_>>() as &[Option<Decimal>],
        &records
            .iter()
            .map(|r| r.gpu_hour_rate.as_ref().map(|x| x.1.clone()))
            .collect::<Vec<_>>() as &[Option<String>],
        &records
            .iter()
            .map(|r| r.typical_power_w)
            .collect::<Vec<_>>() as &[Option<i32>],
    )
    .execute(&mut *conn)
    .await?;
    let listed: Vec<&DeviceModelRecord> = records.iter().filter(|r| r.aliases.is_some()).collect();
    let (mut alias, mut model) = (Vec::new(), Vec::new());
    for r in &listed {
        for a in r.aliases.iter().flatten() {
            alias.push(a.clone());
            model.push(r.key.clone());
        }
    }
    let dropped = sqlx::query!(
        "DELETE FROM device_model_aliases WHERE device_model = ANY($1) AND alias <> ALL($2)",
        &listed.iter().map(|r| r.key.clone()).collect::<Vec<_>>(),
        &alias,
    )
    .execute(&mut *conn)
    .await?;
    let set = sqlx::query!(
        "INSERT INTO device_model_aliases (alias, device_model)
         SELECT * FROM UNNEST($1::text[], $2::text[])
         ON CONFLICT (alias) DO UPDATE SET device_model = excluded.device_model
         WHERE device_model_aliases.device_model <> excluded.device_model",
        &alias,
        &model,
    )
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected() + dropped.rows_affected() + set.rows_affected())
}

/// The device model each of these names resolves to: a model's key to itself, an alias to
/// its model; unknown names are absent.
pub async fn device_model_names<'e>(
    db: impl PgExecutor<'e>,
    names: &[String],
) -> StoreResult<HashMap<String, String>> {
    let rows = sqlx::query!(
        r#"SELECT name AS "name!", device_model AS "device_model!" FROM device_model_names
           WHERE name = ANY($1)"#,
        names,
    )
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(|r| (r.name, r.device_model)).collect())
}

/// Upserts meters in order, so a batch may name a parent defined earlier in the same batch.
///
/// A GPU UUID names one device: a record that gives a UUID another meter of its site holds
/// takes it from that meter (an older AMD agent gave a board meter its partition 0's UUID).
/// An AMD board switched from SPX to CPX comes back as a board meter (`gpu`) with its
/// partition 0, once the whole GPU, now a `mig` meter under it; switched back, the partition
/// is the whole GPU again. A meter's kind and parent change with its record (the handler
/// checks the tree stays whole).
#[tracing::instrument(skip_all, fields(n = records.len()))]
pub async fn upsert_meters(conn: &mut PgConnection, records: &[MeterRecord]) -> StoreResult<u64> {
    let with_uuid: Vec<&MeterRecord> = records.iter().filter(|r| r.gpu_uuid.is_some()).collect();
    let released = sqlx::query!(
        "UPDATE meters m SET gpu_uuid = NULL, updated_at = now()
         FROM UNNEST($1::text[], $2::bigint[], $3::text[]) AS r(key, site_id, gpu_uuid)
         WHERE m.gpu_uuid = r.gpu_uuid AND m.key <> r.key AND m.site_id = r.site_id",
        &with_uuid.iter().map(|r| r.key.clone()).collect::<Vec<_>>(),
        &with_uuid.iter().map(|r| r.site_id).collect::<Vec<_>>(),
        &with_uuid
            .iter()
            .map(|r| r.gpu_uuid.clone())
            .collect::<Vec<_>>() as &[Option<String>],
    )
    .execute(&mut *conn)
    .await?;
    let mut changed = released.rows_affected();
    // Parents first (kinds sort outermost first). Within a kind the batch order is kept.
    let mut ordered: Vec<&MeterRecord> = records.iter().collect();
    ordered.sort_by_key(|r| r.kind);
    for chunk in ordered.chunk_by(|a, b| a.kind == b.kind) {
        let done = sqlx::query!(
            "INSERT INTO meters (key, site_id, kind, parent_id, gpu_uuid, device_model, mig_profile)
             SELECT r.key, r.site_id, r.kind, p.id, r.gpu_uuid, r.device_model, r.mig_profile
             FROM UNNEST($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])
                  AS r(key, site_id, kind, parent_key, gpu_uuid, device_model, mig_profile)
             LEFT JOIN meters p ON p.key = r.parent_key
             ON CONFLICT (key) DO UPDATE SET kind = excluded.kind,
                parent_id = excluded.parent_id, gpu_uuid = excluded.gpu_uuid,
                device_model = excluded.device_model, mig_profile = excluded.mig_profile,
                updated_at = excluded.updated_at
             WHERE (meters.kind, meters.parent_id, meters.gpu_uuid,
                    meters.device_model, meters.mig_profile)
                   IS DISTINCT FROM (excluded.kind, excluded.parent_id,
                    excluded.gpu_uuid, excluded.device_model, excluded.mig_profile)",
            &chunk.iter().map(|r| r.key.clone()).collect::<Vec<_>>(),
            &chunk.iter().map(|r| r.site_id).collect::<Vec<_>>(),
            &chunk.iter().map(|r| r.kind.as_str()).collect::<Vec<_>>() as &[&str],
            &chunk.iter().map(|r| r.parent_key.clone()).collect::<Vec<_>>() as &[Option<String>],
            &chunk.iter().map(|r| r.gpu_uuid.clone()).collect::<Vec<_>>() as &[Option<String>],
            &chunk.iter().map(|r| r.device_model.clone()).collect::<Vec<_>>() as &[Option<String>],
            &chunk.iter().map(|r| r.mig_profile.clone()).collect::<Vec<_>>() as &[Option<String>],
        )
        .execute(&mut *conn)
        .await?;
        changed += done.rows_affected();
    }
    Ok(changed)
}

/// Ids of the given keys in a keyed table; keys not found are absent from the map.
pub async fn ids_by_key<'e>(
    db: impl PgExecutor<'e>,
    table: KeyedTable,
    keys: &[String],
) -> StoreResult<HashMap<String, i64>> {
    // One statement per table, so that each is checked against the schema at build time.
    macro_rules! ids {
        ($sql:literal) => {
            sqlx::query!($sql, keys)
                .fetch_all(db)
                .await?
                .into_iter()
                .map(|r| (r.key, r.id))
                .collect()
        };
    }
    Ok(match table {
        KeyedTable::Tenants => ids!("SELECT key, id FROM tenants WHERE key = ANY($1)"),
        KeyedTable::Sites => ids!("SELECT key, id FROM sites WHERE key = ANY($1)"),
        KeyedTable::Models => ids!("SELECT key, id FROM models WHERE key = ANY($1)"),
    })
}

/// The inventory tables addressed by key.
#[derive(Debug, Clone, Copy)]
pub enum KeyedTable {
    Tenants,
    Sites,
    Models,
}

/// Meters by key, with what validation needs (kind, site, parent).
pub async fn meters_by_key<'e>(
    db: impl PgExecutor<'e>,
    keys: &[String],
) -> StoreResult<HashMap<String, MeterRef>> {
    let rows = sqlx::query!(
        r#"SELECT key, id, site_id, kind AS "kind: MeterKind", parent_id FROM meters WHERE key = ANY($1)"#,
        keys,
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            (
                r.key,
                MeterRef {
                    id: r.id,
                    site_id: r.site_id,
                    kind: r.kind,
                    parent_id: r.parent_id,
                },
            )
        })
        .collect())
}

/// Meters named by key or, for GPUs and MIG instances, by their UUID: the name the kubelet
/// and device plugins know a device by, whatever key template the site's collectors use.
/// A key wins over a UUID that happens to be spelled the same.
pub async fn meters_by_key_or_uuid<'e>(
    db: impl PgExecutor<'e>,
    names: &[String],
) -> StoreResult<HashMap<String, MeterRef>> {
    let rows = sqlx::query!(
        r#"SELECT key, gpu_uuid, id, site_id, kind AS "kind: MeterKind", parent_id FROM meters
         WHERE key = ANY($1) OR gpu_uuid = ANY($1)"#,
        names,
    )
    .fetch_all(db)
    .await?;
    let mut by_key = HashMap::new();
    let mut by_uuid = HashMap::new();
    for r in rows {
        let m = MeterRef {
            id: r.id,
            site_id: r.site_id,
            kind: r.kind,
            parent_id: r.parent_id,
        };
        if let Some(u) = r.gpu_uuid.filter(|u| names.contains(u)) {
            by_uuid.insert(u, m.clone());
        }
        by_key.insert(r.key, m);
    }
    by_uuid.extend(by_key);
    Ok(by_uuid)
}

/// A partition (MIG-kind meter) as its default share is worked out from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// Its GPU's device model (the partition's own where it reports one), an alias resolved
    /// to its model as attribution resolves it.
    pub device_model: Option<String>,
    pub profile: Option<String>,
    /// How many partitions of its profile its GPU has (the layout it is part of: an AMD
    /// board's partitions in one mode share the mode as their profile, and those of a mode it
    /// left keep the old one).
    pub partitions: i64,
}

/// Each partition (MIG-kind meter) among `meter_ids`, by id.
pub async fn partitions_of<'e>(
    db: impl PgExecutor<'e>,
    meter_ids: &[i64],
) -> StoreResult<HashMap<i64, Partition>> {
    let rows = sqlx::query!(
        r#"SELECT m.id, m.mig_profile,
                  coalesce(n.device_model, m.device_model, g.device_model) AS device_model,
                  (SELECT count(*) FROM meters s
                   WHERE s.parent_id = m.parent_id AND s.kind = 'mig'
                     AND s.mig_profile IS NOT DISTINCT FROM m.mig_profile) AS "partitions!"
           FROM meters m LEFT JOIN meters g ON g.id = m.parent_id
                LEFT JOIN device_model_names n ON n.name = coalesce(m.device_model, g.device_model)
           WHERE m.id = ANY($1) AND m.kind = 'mig'"#,
        meter_ids,
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let p = Partition {
                device_model: r.device_model,
                profile: r.mig_profile,
                partitions: r.partitions,
            };
            (r.id, p)
        })
        .collect())
}

/// The meters holding these GPU UUIDs, by UUID.
pub async fn uuid_holders<'e>(
    db: impl PgExecutor<'e>,
    uuids: &[String],
) -> StoreResult<HashMap<String, MeterRef>> {
    let rows = sqlx::query!(
        r#"SELECT gpu_uuid AS "gpu_uuid!", id, site_id, kind AS "kind: MeterKind", parent_id
           FROM meters WHERE gpu_uuid = ANY($1)"#,
        uuids,
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let m = MeterRef {
                id: r.id,
                site_id: r.site_id,
                kind: r.kind,
                parent_id: r.parent_id,
            };
            (r.gpu_uuid, m)
        })
        .collect())
}

/// The stored children of these meters: parent id → (key, kind) of each, in key order.
pub async fn children_of<'e>(
    db: impl PgExecutor<'e>,
    parent_ids: &[i64],
) -> StoreResult<HashMap<i64, Vec<(String, MeterKind)>>> {
    let rows = sqlx::query!(
        r#"SELECT parent_id AS "parent_id!", key, kind AS "kind: MeterKind" FROM meters
           WHERE parent_id = ANY($1) ORDER BY key"#,
        parent_ids,
    )
    .fetch_all(db)
    .await?;
    let mut children: HashMap<i64, Vec<(String, MeterKind)>> = HashMap::new();
    for r in rows {
        children
            .entry(r.parent_id)
            .or_default()
            .push((r.key, r.kind));
    }
    Ok(children)
}

/// A site, as the sites API lists it.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = SiteOut))]
pub struct SiteRow {
    #[serde(skip)]
    pub id: i64,
    pub key: String,
    pub name: String,
    pub grid_region: String,
    pub currency: String,
    pub power_envelope_w: i64,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub static_pue: Decimal,
    pub idle_policy: IdlePolicy,
}

pub async fn list_sites(pool: &PgPool) -> StoreResult<Vec<SiteRow>> {
    Ok(sqlx::query_as!(
        SiteRow,
        r#"SELECT id, key, name, grid_region, currency::text AS "currency!", power_envelope_w,
                static_pue, idle_policy AS "idle_policy: IdlePolicy" FROM sites ORDER BY key"#,
    )
    .fetch_all(pool)
    .await?)
}

/// Each site's gap limit by key, s: readings further apart than this are a gap (DESIGN.md
/// "From samples to energy"); closer, they are the meters' own resolution.
pub async fn gap_limits(pool: &PgPool) -> StoreResult<HashMap<String, i32>> {
    let rows: Vec<(String, i32)> = sqlx::query_as("SELECT key, gap_limit_s FROM sites")
        .fetch_all(pool)
        .await?;
    Ok(rows.into_iter().collect())
}

/// A tenant, as the tenants API lists it.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = TenantOut))]
pub struct TenantRow {
    #[serde(skip)]
    pub id: i64,
    pub key: String,
    pub name: String,
}

/// Tenants visible to `scope`.
pub async fn list_tenants(pool: &PgPool, scope: &crate::Scope) -> StoreResult<Vec<TenantRow>> {
    Ok(sqlx::query_as!(
        TenantRow,
        "SELECT id, key, name FROM tenants WHERE ($1::bigint IS NULL OR id = $1) ORDER BY key",
        scope.tenant(),
    )
    .fetch_all(pool)
    .await?)
}

/// Every model's key by its id.
pub async fn model_keys(pool: &PgPool) -> StoreResult<std::collections::HashMap<i64, String>> {
    let rows = sqlx::query!("SELECT id, key FROM models")
        .fetch_all(pool)
        .await?;
    Ok(rows.into_iter().map(|r| (r.id, r.key)).collect())
}

/// How many of `uuids` are registered as GPU meters (an agent registers its GPUs on its
/// first scrape).
pub async fn gpus_registered(pool: &PgPool, uuids: &[String]) -> StoreResult<usize> {
    let n: i64 = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM meters WHERE gpu_uuid = ANY($1)"#,
        uuids,
    )
    .fetch_one(pool)
    .await?;
    Ok(usize::try_from(n).unwrap_or(0))
}
