//! Grid signal points: stored idempotently, revised in place, and read back for the hours
//! the ledger prices.
//!
//! A point's key is (region, signal, basis, status, source, start). Sending the same value
//! again changes nothing; a different value is a provider's revision (Electricity Maps
//! re-estimates recent hours, WattTime reissues) and replaces the stored one. Every point
//! that is new or revised dirties the already-attributed hours it overlaps at the sites in
//! its region, so the ledger is recomputed exactly where the signal changed.

use crate::StoreResult;
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use sqlx::PgPool;
use wattledger_domain::costing::{Rate, SiteRates};

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SignalRow {
    pub region: String,
    /// `carbon` or `price`.
    pub signal: String,
    /// `average` / `marginal` for carbon; the currency for price.
    pub basis: String,
    /// `actual` or `forecast`.
    pub status: String,
    pub source: String,
    pub start_at: DateTime<Utc>,
    pub end_at: DateTime<Utc>,
    pub value: Decimal,
    pub estimated: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SignalOutcome {
    /// Points inserted or revised.
    pub written: u64,
    /// Points already stored with the same value.
    pub duplicates: u64,
    /// Site-hours marked for recomputation.
    pub dirtied: u64,
}

#[tracing::instrument(skip_all, fields(n = rows.len()))]
pub async fn upsert(pool: &PgPool, rows: &[SignalRow]) -> StoreResult<SignalOutcome> {
    let col = |f: fn(&SignalRow) -> String| rows.iter().map(f).collect::<Vec<_>>();
    let mut tx = pool.begin().await?;
    let changed = sqlx::query!(
        "INSERT INTO signal_points (region, signal, basis, status, source, start_at, end_at, value, estimated)
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
                              $6::timestamptz[], $7::timestamptz[], $8::numeric[], $9::bool[])
         ON CONFLICT (region, signal, basis, status, source, start_at) DO UPDATE
             SET end_at = excluded.end_at, value = excluded.value, estimated = excluded.estimated,
                 received_at = now()
             WHERE (signal_points.end_at, signal_points.value, signal_points.estimated)
                   IS DISTINCT FROM (excluded.end_at, excluded.value, excluded.estimated)
         RETURNING region, signal, start_at, end_at",
        &col(|r| r.region.clone()),
        &col(|r| r.signal.clone()),
        &col(|r| r.basis.clone()),
        &col(|r| r.status.clone()),
        &col(|r| r.source.clone()),
        &rows.iter().map(|r| r.start_at).collect::<Vec<_>>(),
        &rows.iter().map(|r| r.end_at).collect::<Vec<_>>(),
        &rows.iter().map(|r| r.value).collect::<Vec<_>>(),
        &rows.iter().map(|r| r.estimated).collect::<Vec<_>>(),
    )
    .fetch_all(&mut *tx)
    .await?;
    let mut dirtied = 0;
    if !changed.is_empty() {
        let r = sqlx::query!(
            "INSERT INTO dirty_hours (site_id, hour)
             SELECT DISTINCT sh.site_id, sh.hour
             FROM UNNEST($1::text[], $2::text[], $3::timestamptz[], $4::timestamptz[]) AS c(region, signal, lo, hi)
             JOIN sites s ON (c.signal = 'carbon' AND s.grid_region = c.region)
                          OR (c.signal = 'price' AND coalesce(s.price_region, s.grid_region) = c.region)
             JOIN site_hours sh ON sh.site_id = s.id
                  AND sh.hour >= date_trunc('hour', c.lo) AND sh.hour < c.hi
             ORDER BY 1, 2
             ON CONFLICT (site_id, hour) DO UPDATE SET marked_at = clock_timestamp()",
            &changed.iter().map(|c| c.region.clone()).collect::<Vec<_>>(),
            &changed.iter().map(|c| c.signal.clone()).collect::<Vec<_>>(),
            &changed.iter().map(|c| c.start_at).collect::<Vec<_>>(),
            &changed.iter().map(|c| c.end_at).collect::<Vec<_>>(),
        )
        .execute(&mut *tx)
        .await?;
        dirtied = r.rows_affected();
    }
    tx.commit().await?;
    Ok(SignalOutcome {
        written: changed.len() as u64,
        duplicates: rows.len() as u64 - changed.len() as u64,
        dirtied,
    })
}

/// The points of one signal overlapping `[from, to)`, for the ledger to choose from: actuals
/// before forecasts, then the newest received first.
pub async fn overlapping(
    pool: &PgPool,
    region: &str,
    signal: &str,
    basis: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> StoreResult<Vec<SignalRow>> {
    Ok(sqlx::query_as!(
        SignalRow,
        "SELECT region, signal, basis, status, source, start_at, end_at, value, estimated
         FROM signal_points
         WHERE region = $1 AND signal = $2 AND basis = $3 AND start_at < $5 AND end_at > $4
         ORDER BY status = 'forecast', received_at DESC, start_at",
        region,
        signal,
        basis,
        from,
        to,
    )
    .fetch_all(pool)
    .await?)
}

/// A site's rates over `[from, to)` for the ledger: its price in its own currency from its
/// price region, average and marginal carbon from its grid region, and its fallbacks.
pub async fn site_rates(
    pool: &PgPool,
    site_id: i64,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> StoreResult<SiteRates> {
    let site = sqlx::query!(
        r#"SELECT grid_region, coalesce(price_region, grid_region) AS "price_region!",
                  currency::text AS "currency!", fallback_price, fallback_intensity_g
           FROM sites WHERE id = $1"#,
        site_id,
    )
    .fetch_one(pool)
    .await?;
    let (grid, price_region, currency) = (site.grid_region, site.price_region, site.currency);
    let rates = |rows: Vec<SignalRow>| -> Vec<Rate> {
        rows.into_iter()
            .map(|r| Rate {
                from_ms: r.start_at.timestamp_millis(),
                to_ms: r.end_at.timestamp_millis(),
                value: r.value,
                estimated: r.estimated || r.status == "forecast",
            })
            .collect()
    };
    Ok(SiteRates {
        price: rates(overlapping(pool, &price_region, "price", &currency, from, to).await?),
        price_fallback: site.fallback_price,
        carbon: rates(overlapping(pool, &grid, "carbon", "average", from, to).await?),
        carbon_fallback: site.fallback_intensity_g,
        marginal: rates(overlapping(pool, &grid, "carbon", "marginal", from, to).await?),
    })
}
