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
    let site_ids: Vec<i64> = rows.iter().map(|r| r.site_id).collect();
    let sources: Vec<String> = rows.iter().map(|r| r.source.clone()).collect();
    let starts: Vec<DateTime<Utc>> = rows.iter().map(|r| r.start_at).collect();
    // What was stored is read before the upsert, in a statement of its own: a distributed
    // PostgreSQL runs a writing CTE before the rest of its statement.
    let old = sqlx::query!(
        r#"SELECT c.site_id, c.source, c.start_at, c.end_at
           FROM site_clean_energy c
           JOIN UNNEST($1::bigint[], $2::text[], $3::timestamptz[]) AS t(site_id, source, start_at)
             ON c.site_id = t.site_id AND c.source = t.source AND c.start_at = t.start_at"#,
        &site_ids,
        &sources,
        &starts,
    )
    .fetch_all(&mut *conn)
    .await?;
    let old: std::collections::HashMap<(i64, String, DateTime<Utc>), DateTime<Utc>> = old
        .into_iter()
        .map(|o| ((o.site_id, o.source, o.start_at), o.end_at))
        .collect();
    let up = sqlx::query!(
        "INSERT INTO site_clean_energy (site_id, source, start_at, end_at, energy_mj)
         SELECT * FROM UNNEST($1::bigint[], $2::text[], $3::timestamptz[], $4::timestamptz[],
                              $5::bigint[])
         ON CONFLICT (site_id, source, start_at) DO UPDATE
             SET end_at = excluded.end_at, energy_mj = excluded.energy_mj, received_at = excluded.received_at
         WHERE (site_clean_energy.end_at, site_clean_energy.energy_mj)
               IS DISTINCT FROM (excluded.end_at, excluded.energy_mj)
         RETURNING site_id, source, start_at, end_at",
        &site_ids,
        &sources,
        &starts,
        &rows.iter().map(|r| r.end_at).collect::<Vec<_>>(),
        &rows.iter().map(|r| r.energy_mj).collect::<Vec<_>>(),
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut changed: Vec<Changed> = up
        .into_iter()
        .map(|u| {
            let before = old.get(&(u.site_id, u.source, u.start_at)).copied();
            Changed {
                site_id: u.site_id,
                start_at: u.start_at,
                end_at: before.map_or(u.end_at, |b| b.max(u.end_at)),
            }
        })
        .collect();
    changed.sort_by_key(|c| (c.site_id, c.start_at));
    Ok(changed)
}
