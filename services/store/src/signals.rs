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
use wattledger_domain::signals::{Basis, Signal, SignalKind, Status};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignalRow {
    pub region: String,
    /// Carbon on its basis or price in its currency: the columns `signal` and `basis` (which
    /// holds a price's currency).
    pub signal: Signal,
    pub status: Status,
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
    let col = |f: fn(&SignalRow) -> &str| rows.iter().map(f).collect::<Vec<_>>();
    let mut tx = pool.begin().await?;
    let changed = sqlx::query!(
        r#"INSERT INTO signal_points (region, signal, basis, status, source, start_at, end_at, value, estimated)
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
                              $6::timestamptz[], $7::timestamptz[], $8::numeric[], $9::bool[])
         ON CONFLICT (region, signal, basis, status, source, start_at) DO UPDATE
             SET end_at = excluded.end_at, value = excluded.value, estimated = excluded.estimated,
                 received_at = now()
             WHERE (signal_points.end_at, signal_points.value, signal_points.estimated)
                   IS DISTINCT FROM (excluded.end_at, excluded.value, excluded.estimated)
         RETURNING region, signal AS "signal: SignalKind", start_at, end_at"#,
        &col(|r| r.region.as_str()) as &[&str],
        &col(|r| r.signal.kind().as_str()) as &[&str],
        &col(|r| r.signal.basis_or_currency()) as &[&str],
        &col(|r| r.status.as_str()) as &[&str],
        &col(|r| r.source.as_str()) as &[&str],
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
            &changed.iter().map(|c| c.signal.as_str()).collect::<Vec<_>>() as &[&str],
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
    signal: &Signal,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> StoreResult<Vec<SignalRow>> {
    let rows = sqlx::query!(
        r#"SELECT region, status AS "status: Status", source, start_at, end_at, value, estimated
           FROM signal_points
           WHERE region = $1 AND signal = $2 AND basis = $3 AND start_at < $5 AND end_at > $4
           ORDER BY status = 'forecast', received_at DESC, start_at"#,
        region,
        signal.kind().as_str(),
        signal.basis_or_currency(),
        from,
        to,
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| SignalRow {
            region: r.region,
            signal: signal.clone(),
            status: r.status,
            source: r.source,
            start_at: r.start_at,
            end_at: r.end_at,
            value: r.value,
            estimated: r.estimated,
        })
        .collect())
}

/// The signal a row's `signal` and `basis` columns name; a carbon row whose basis is not a
/// [`Basis`] is a decode error, as a name outside its set is.
pub(crate) fn signal_of(kind: SignalKind, basis: &str) -> Result<Signal, sqlx::Error> {
    Signal::of(kind, basis)
        .ok_or_else(|| sqlx::Error::Decode(format!("'{basis}' is not a Basis").into()))
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
                estimated: r.estimated || r.status == Status::Forecast,
            })
            .collect()
    };
    let price = Signal::Price { currency };
    let carbon = |basis| Signal::Carbon { basis };
    Ok(SiteRates {
        price: rates(overlapping(pool, &price_region, &price, from, to).await?),
        price_fallback: site.fallback_price,
        carbon: rates(overlapping(pool, &grid, &carbon(Basis::Average), from, to).await?),
        carbon_fallback: site.fallback_intensity_g,
        marginal: rates(overlapping(pool, &grid, &carbon(Basis::Marginal), from, to).await?),
    })
}
