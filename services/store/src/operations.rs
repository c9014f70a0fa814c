//! What operators watch: each site's draw against its envelope and its PUE, ITUE and TUE by
//! day (from `site_hours`), and the collectors' health per meter (from `samples`).

use crate::StoreResult;
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use wattledger_domain::meter_kind::MeterKind;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SiteDay {
    pub site: String,
    pub day: DateTime<Utc>,
    pub site_mj: i64,
    pub it_mj: i64,
    pub gpu_mj: i64,
    pub idle_mj: i64,
    /// The busiest hour's energy: its average power is the day's peak hourly draw.
    pub peak_hour_mj: i64,
    /// The day's highest one-minute IT draw from the step peaks (`site_hours.it_peak_mw`).
    pub it_peak_mw: Option<i64>,
    /// The day's highest one-minute site draw (`site_hours.site_peak_mw`).
    pub site_peak_mw: Option<i64>,
    /// Hours attributed, and tokens served that day (the usage rollup's, whole days).
    pub hours: i64,
    pub tokens: i64,
    pub allocated_gpu_ms: i64,
    pub capacity_gpu_ms: i64,
}

/// Site figures per day in `[from, to)`.
pub async fn site_days(
    pool: &PgPool,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> StoreResult<Vec<SiteDay>> {
    Ok(sqlx::query_as!(
        SiteDay,
        r#"WITH days AS (
             SELECT h.site_id, date_trunc('day', h.hour) AS day,
                    sum(h.site_mj)::bigint AS site_mj, sum(h.it_mj)::bigint AS it_mj,
                    sum(h.gpu_mj)::bigint AS gpu_mj, sum(h.idle_mj)::bigint AS idle_mj,
                    max(h.site_mj)::bigint AS peak_hour_mj, max(h.it_peak_mw)::bigint AS it_peak_mw,
                    max(h.site_peak_mw)::bigint AS site_peak_mw,
                    sum(h.allocated_gpu_ms)::bigint AS allocated_gpu_ms,
                    sum(h.capacity_gpu_ms)::bigint AS capacity_gpu_ms, count(*) AS hours
             FROM site_hours h WHERE h.hour >= $1 AND h.hour < $2
             GROUP BY 1, 2
         ), tokens AS (
             SELECT u.site_id, u.day, sum(u.prompt_tokens + u.generated_tokens)::bigint AS tokens
             FROM usage_days u WHERE u.day >= date_trunc('day', $1::timestamptz) AND u.day < $2
             GROUP BY 1, 2
         )
         SELECT s.key AS site, d.day AS "day!", d.site_mj AS "site_mj!", d.it_mj AS "it_mj!",
                d.gpu_mj AS "gpu_mj!", d.idle_mj AS "idle_mj!", d.peak_hour_mj AS "peak_hour_mj!",
                d.it_peak_mw, d.site_peak_mw, d.allocated_gpu_ms AS "allocated_gpu_ms!",
                d.capacity_gpu_ms AS "capacity_gpu_ms!", d.hours AS "hours!",
                coalesce(t.tokens, 0) AS "tokens!"
         FROM days d JOIN sites s ON s.id = d.site_id
         LEFT JOIN tokens t ON t.site_id = d.site_id AND t.day = d.day
         ORDER BY s.key, d.day"#,
        from,
        to,
    )
    .fetch_all(pool)
    .await?)
}

/// A meter's place in the tree and how its collector has been reporting.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct MeterHealth {
    pub site: String,
    pub key: String,
    pub kind: MeterKind,
    pub parent: Option<String>,
    pub device_model: Option<String>,
    pub last_sample: Option<DateTime<Utc>>,
    /// Samples since `since`.
    pub samples: i64,
    /// Intervals between them longer than the site's gap limit.
    pub gaps: i64,
    /// Energy counters that went backwards (a driver reload, a PDU reboot).
    pub resets: i64,
}

/// Every meter with its last sample and, since `since`, its samples, gaps and resets.
pub async fn meter_health(pool: &PgPool, since: DateTime<Utc>) -> StoreResult<Vec<MeterHealth>> {
    Ok(sqlx::query_as!(
        MeterHealth,
        // Each meter's counts on its site's shard (the window and the grouping name the
        // site), its newest sample from meter_heads (kept at every write, so no index probe
        // per meter), joined to the meters on the coordinator.
        r#"WITH per_meter AS MATERIALIZED (
             SELECT r.site_id, r.meter_id, count(*) AS samples,
                    count(*) FILTER (WHERE r.step > make_interval(secs => s.gap_limit_s)) AS gaps,
                    count(*) FILTER (WHERE r.reset) AS resets
             FROM (SELECT site_id, meter_id, ts - lag(ts) OVER w AS step,
                          counter_mj < lag(counter_mj) OVER w AS reset
                   FROM samples WHERE ts >= $1
                   WINDOW w AS (PARTITION BY site_id, meter_id ORDER BY ts)) r
             JOIN sites s ON s.id = r.site_id
             GROUP BY r.site_id, r.meter_id
         ), heads AS MATERIALIZED (
             SELECT site_id, meter_id, last_ts FROM meter_heads
         )
         SELECT s.key AS site, m.key, m.kind AS "kind: MeterKind", p.key AS "parent?", m.device_model,
                h.last_ts AS "last_sample?",
                coalesce(pm.samples, 0) AS "samples!", coalesce(pm.gaps, 0) AS "gaps!",
                coalesce(pm.resets, 0) AS "resets!"
         FROM meters m JOIN sites s ON s.id = m.site_id
         LEFT JOIN meters p ON p.id = m.parent_id
         LEFT JOIN per_meter pm ON pm.site_id = m.site_id AND pm.meter_id = m.id
         LEFT JOIN heads h ON h.site_id = m.site_id AND h.meter_id = m.id
         ORDER BY s.key, m.key"#,
        since,
    )
    .fetch_all(pool)
    .await?)
}
