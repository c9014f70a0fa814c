//! Clean energy delivered to sites (migration 0031): stored by site, source and start, a
//! revision replacing what was there.

use crate::StoreResult;
use chrono::{DateTime, Utc};
use sqlx::PgConnection;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleanEnergyRow {
    pub site_id: i64,
    pub source: String,
    pub start_at: DateTime<Utc>,
    pub end_at: DateTime<Utc>,
    pub energy_mj: i64,
}

/// A delivery the write inserted or changed: its site and the span it covers now or covered
/// before (the hours to recompute).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    pub site_id: i64,
    pub start_at: DateTime<Utc>,
    pub end_at: DateTime<Utc>,
}

/// Inserts the deliveries, or replaces those that differ; what changed.
pub async fn upsert(conn: &mut PgConnection, rows: &[CleanEnergyRow]) -> StoreResult<Vec<Changed>> {
    Ok(sqlx::query_as!(
        Changed,
        r#"WITH old AS (
               SELECT c.site_id, c.source, c.start_at, c.end_at
               FROM site_clean_energy c
               JOIN UNNEST($1::bigint[], $2::text[], $3::timestamptz[]) AS t(site_id, source, start_at)
                 ON c.site_id = t.site_id AND c.source = t.source AND c.start_at = t.start_at
           ), up AS (
               INSERT INTO site_clean_energy (site_id, source, start_at, end_at, energy_mj)
               SELECT * FROM UNNEST($1::bigint[], $2::text[], $3::timestamptz[], $4::timestamptz[],
                                    $5::bigint[])
               ON CONFLICT (site_id, source, start_at) DO UPDATE
                   SET end_at = excluded.end_at, energy_mj = excluded.energy_mj, received_at = now()
               WHERE (site_clean_energy.end_at, site_clean_energy.energy_mj)
                     IS DISTINCT FROM (excluded.end_at, excluded.energy_mj)
               RETURNING site_id, source, start_at, end_at
           )
           SELECT up.site_id AS "site_id!", up.start_at AS "start_at!",
                  greatest(up.end_at, old.end_at) AS "end_at!"
           FROM up LEFT JOIN old USING (site_id, source, start_at)
           ORDER BY 1, 2"#,
        &rows.iter().map(|r| r.site_id).collect::<Vec<_>>(),
        &rows.iter().map(|r| r.source.clone()).collect::<Vec<_>>(),
        &rows.iter().map(|r| r.start_at).collect::<Vec<_>>(),
        &rows.iter().map(|r| r.end_at).collect::<Vec<_>>(),
        &rows.iter().map(|r| r.energy_mj).collect::<Vec<_>>(),
    )
    .fetch_all(conn)
    .await?)
}
