//! Efficiency by GPU generation: the model-serving ledger's energy and tokens per device
//! model (migration 0035's `ledger_devices`), grouped by model, device model and site.

use crate::StoreResult;
use chrono::{DateTime, Utc};
use sqlx::PgPool;

/// What the rows are grouped by: any of the three.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceGrouping {
    pub model: bool,
    pub device: bool,
    pub site: bool,
}

/// A group's energy and tokens; the keys not grouped by are `None`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct DeviceUsage {
    pub model: Option<String>,
    pub device_model: Option<String>,
    pub site: Option<String>,
    pub gpu_mj: i64,
    pub total_mj: i64,
    pub prompt_tokens: i64,
    pub generated_tokens: i64,
    /// Jobs that ran on the group's devices, and tenants they served.
    pub jobs: i64,
    pub tenants: i64,
}

/// The groups over `[from, to)`, at one site if given, in key order.
#[tracing::instrument(skip_all)]
pub async fn usage(
    pool: &PgPool,
    by: DeviceGrouping,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    site_id: Option<i64>,
) -> StoreResult<Vec<DeviceUsage>> {
    let key = |on: bool, expr: &str, alias: &str| {
        if on {
            format!("{expr} AS {alias}")
        } else {
            format!("NULL::text AS {alias}")
        }
    };
    // The keys are a closed set of expressions, never user text.
    let sql = format!(
        "SELECT {}, {}, {},
                sum(d.gpu_mj)::bigint AS gpu_mj, sum(d.total_mj)::bigint AS total_mj,
                sum(d.prompt_tokens)::bigint AS prompt_tokens,
                sum(d.generated_tokens)::bigint AS generated_tokens,
                count(DISTINCT (d.site_id, d.job_id)) AS jobs,
                count(DISTINCT d.tenant_id) AS tenants
         FROM ledger_devices d
         JOIN models m ON m.id = d.model_id
         JOIN sites s ON s.id = d.site_id
         WHERE d.hour >= $1 AND d.hour < $2 AND ($3::bigint IS NULL OR d.site_id = $3)
         GROUP BY 1, 2, 3
         ORDER BY 1, 2, 3",
        key(by.model, "m.key", "model"),
        key(by.device, "d.device_model", "device_model"),
        key(by.site, "s.key", "site"),
    );
    Ok(sqlx::query_as(&sql)
        .bind(from)
        .bind(to)
        .bind(site_id)
        .fetch_all(pool)
        .await?)
}
