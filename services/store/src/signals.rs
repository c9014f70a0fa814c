//! Grid signal points: stored idempotently, revised in place, and read back for the hours
//! the ledger prices.
//!
//! A point's key is (region, signal, basis, status, source, start). Sending the same value
//! again changes nothing; a different value is a provider's revision (Electricity Maps
//! re-estimates recent hours, WattTime reissues) and replaces the stored one. The points
//! that are new or revised are returned, for their hours to be marked dirty
//! ([`crate::dirty::mark_regions`]).

use crate::StoreResult;
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use sqlx::{PgConnection, PgPool};
use wattledger_domain::cfe::Delivery;
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

/// A point that was new or revised: the span of its region's hours it may change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    pub region: String,
    pub signal: SignalKind,
    pub start_at: DateTime<Utc>,
    pub end_at: DateTime<Utc>,
}

/// Inserts new points and revises stored ones whose value changed; the points that did
/// either (a point stored with the same value is a resend).
#[tracing::instrument(skip_all, fields(n = rows.len()))]
pub async fn upsert(conn: &mut PgConnection, rows: &[SignalRow]) -> StoreResult<Vec<Changed>> {
    let col = |f: fn(&SignalRow) -> &str| rows.iter().map(f).collect::<Vec<_>>();
    let changed = sqlx::query_as!(
        Changed,
        r#"INSERT INTO signal_points (region, signal, basis, status, source, start_at, end_at, value, estimated)
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
                              $6::timestamptz[], $7::timestamptz[], $8::numeric[], $9::bool[])
         ON CONFLICT (region, signal, basis, status, source, start_at) DO UPDATE
             SET end_at = excluded.end_at, value = excluded.value, estimated = excluded.estimated,
                 received_at = excluded.received_at
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
    .fetch_all(conn)
    .await?;
    Ok(changed)
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
    let clean_energy = sqlx::query!(
        "SELECT start_at, end_at, energy_mj FROM site_clean_energy
         WHERE site_id = $1 AND start_at < $3 AND end_at > $2 ORDER BY start_at, source",
        site_id,
        from,
        to,
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|r| Delivery {
        from_ms: r.start_at.timestamp_millis(),
        to_ms: r.end_at.timestamp_millis(),
        mj: r.energy_mj,
    })
    .collect();
    Ok(SiteRates {
        price: rates(overlapping(pool, &price_region, &price, from, to).await?),
        price_fallback: site.fallback_price,
        carbon: rates(overlapping(pool, &grid, &carbon(Basis::Average), from, to).await?),
        carbon_fallback: site.fallback_intensity_g,
        marginal: rates(overlapping(pool, &grid, &carbon(Basis::Marginal), from, to).await?),
        carbon_free: rates(overlapping(pool, &grid, &Signal::CarbonFree, from, to).await?),
        clean_energy,
    })
}
