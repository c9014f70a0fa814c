//! Grid events (migration 0026): their rows, and what their outcome is measured from — the
//! site's metered energy per hour, its event days, and the energy admission moved out of the
//! window per tenant.

use crate::StoreResult;
use chrono::{DateTime, NaiveDate, Utc};
use rust_decimal::Decimal;
use sqlx::PgPool;
use std::collections::{BTreeMap, BTreeSet};
use wattledger_domain::demand_response::BaselineMethod;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GridEvent {
    pub id: i64,
    pub key: String,
    pub site_id: i64,
    pub site: String,
    /// The site's currency: the price's.
    pub currency: String,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub target_cap_w: Option<i64>,
    pub reduction_w: Option<i64>,
    pub price_per_kwh: Option<Decimal>,
    pub baseline_method: BaselineMethod,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
}

/// An event as posted.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub key: String,
    pub site_id: i64,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub target_cap_w: Option<i64>,
    pub reduction_w: Option<i64>,
    pub price_per_kwh: Option<Decimal>,
    pub baseline_method: BaselineMethod,
    pub created_by: String,
}

impl NewEvent {
    /// Whether `e` is this event as stored (a repost of the same key).
    pub fn same_as(&self, e: &GridEvent) -> bool {
        (
            self.site_id,
            self.starts_at,
            self.ends_at,
            self.target_cap_w,
            self.reduction_w,
            self.price_per_kwh.map(|p| p.normalize()),
            self.baseline_method,
        ) == (
            e.site_id,
            e.starts_at,
            e.ends_at,
            e.target_cap_w,
            e.reduction_w,
            e.price_per_kwh.map(|p| p.normalize()),
            e.baseline_method,
        )
    }
}

/// Stores the event; `Ok((stored, true))` when it is new, `(existing, false)` when its key
/// was stored before (the caller compares).
pub async fn insert(pool: &PgPool, e: &NewEvent) -> StoreResult<(GridEvent, bool)> {
    let id = sqlx::query_scalar!(
        "INSERT INTO grid_events (key, site_id, starts_at, ends_at, target_cap_w, reduction_w,
             price_per_kwh, baseline_method, created_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (key) DO NOTHING RETURNING id",
        e.key,
        e.site_id,
        e.starts_at,
        e.ends_at,
        e.target_cap_w,
        e.reduction_w,
        e.price_per_kwh,
        e.baseline_method.label(),
        e.created_by,
    )
    .fetch_optional(pool)
    .await?;
    let stored = get(pool, &e.key).await?.ok_or(sqlx::Error::RowNotFound)?;
    Ok((stored, id.is_some()))
}

pub async fn get(pool: &PgPool, key: &str) -> StoreResult<Option<GridEvent>> {
    Ok(sqlx::query_as!(
        GridEvent,
        r#"SELECT g.id, g.key, g.site_id, s.key AS site, s.currency::text AS "currency!",
                  g.starts_at, g.ends_at, g.target_cap_w, g.reduction_w, g.price_per_kwh,
                  g.baseline_method AS "baseline_method: BaselineMethod", g.created_at, g.created_by
           FROM grid_events g JOIN sites s ON s.id = g.site_id WHERE g.key = $1"#,
        key,
    )
    .fetch_optional(pool)
    .await?)
}

/// Events overlapping `[from, to)`, of one site or all, by start.
pub async fn overlapping(
    pool: &PgPool,
    site_id: Option<i64>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> StoreResult<Vec<GridEvent>> {
    Ok(sqlx::query_as!(
        GridEvent,
        r#"SELECT g.id, g.key, g.site_id, s.key AS site, s.currency::text AS "currency!",
                  g.starts_at, g.ends_at, g.target_cap_w, g.reduction_w, g.price_per_kwh,
                  g.baseline_method AS "baseline_method: BaselineMethod", g.created_at, g.created_by
           FROM grid_events g JOIN sites s ON s.id = g.site_id
           WHERE g.ends_at > $1 AND g.starts_at < $2 AND ($3::bigint IS NULL OR g.site_id = $3)
           ORDER BY g.starts_at, g.key"#,
        from,
        to,
        site_id,
    )
    .fetch_all(pool)
    .await?)
}

/// The UTC days on which the site had an event in `[from, to)` (a day an event touches).
pub async fn event_days(
    pool: &PgPool,
    site_id: i64,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> StoreResult<BTreeSet<NaiveDate>> {
    let mut days = BTreeSet::new();
    for e in overlapping(pool, Some(site_id), from, to).await? {
        // Windows are at most a day (the table's CHECK): its first and its last day.
        let last = (e.ends_at - chrono::Duration::milliseconds(1)).date_naive();
        days.extend([e.starts_at.date_naive(), last]);
    }
    Ok(days)
}

/// The site's metered energy per attributed hour in `[from, to)`, mJ.
pub async fn site_energy(
    pool: &PgPool,
    site_id: i64,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> StoreResult<BTreeMap<DateTime<Utc>, i64>> {
    Ok(sqlx::query!(
        "SELECT hour, site_mj FROM site_hours WHERE site_id = $1 AND hour >= $2 AND hour < $3",
        site_id,
        from,
        to,
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|r| (r.hour, r.site_mj))
    .collect())
}

/// The window's site peak (mW, where every hour has one) and whether any of its hours
/// waits to be attributed again (its figures are not final).
pub async fn window_state(
    pool: &PgPool,
    site_id: i64,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> StoreResult<(Option<i64>, bool)> {
    let r = sqlx::query!(
        r#"SELECT (SELECT CASE WHEN count(*) = count(site_peak_mw) THEN max(site_peak_mw) END
                   FROM site_hours WHERE site_id = $1 AND hour >= $2 AND hour < $3) AS peak_mw,
                  EXISTS (SELECT 1 FROM dirty_hours
                          WHERE site_id = $1 AND hour >= $2 AND hour < $3) AS "pending!""#,
        site_id,
        from,
        to,
    )
    .fetch_one(pool)
    .await?;
    Ok((r.peak_mw, r.pending))
}

/// Per tenant (in key order), the energy admission moved out of the event's window and
/// how many jobs it moved.
pub async fn moved(pool: &PgPool, event_id: i64) -> StoreResult<Vec<(String, i64, i64)>> {
    Ok(sqlx::query!(
        r#"SELECT t.key AS tenant, sum(d.moved_mj)::bigint AS "moved_mj!", count(*) AS "jobs!"
           FROM admission_decisions d JOIN tenants t ON t.id = d.tenant_id
           WHERE d.grid_event_id = $1 GROUP BY t.key ORDER BY t.key"#,
        event_id,
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|r| (r.tenant, r.moved_mj, r.jobs))
    .collect())
}
