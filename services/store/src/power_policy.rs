//! Sites' power policies (migration 0025) and the measured headroom a `measured` factor
//! resolves against.

use crate::power::{self, PowerHour};
use crate::StoreResult;
use chrono::{DateTime, Duration, Utc};
use rust_decimal::Decimal;
use sqlx::PgPool;
use std::collections::HashMap;
use wattledger_domain::admission::oversubscription::{Factors, PowerPolicy, Setting};
use wattledger_domain::headroom::{self, PowerClass};
use wattledger_domain::job_kind::JobKind;

/// One site's policy: as stored, or the defaults where none is.
#[derive(Debug, Clone)]
pub struct SitePolicy {
    pub site_id: i64,
    pub site: String,
    pub policy: PowerPolicy,
    /// Whether the site has a stored policy (else the defaults apply).
    pub configured: bool,
    pub updated_at: Option<DateTime<Utc>>,
}

struct Row {
    site_id: i64,
    site: String,
    configured: Option<bool>,
    training_factor: Option<Decimal>,
    inference_factor: Option<Decimal>,
    batch_factor: Option<Decimal>,
    interactive_factor: Option<Decimal>,
    measured_cap: Option<Decimal>,
    measured_percentile: Option<Decimal>,
    measured_days: Option<i32>,
    power_cap_w: Option<i32>,
    updated_at: Option<DateTime<Utc>>,
}

impl Row {
    fn policy(self) -> SitePolicy {
        let configured = self.configured.unwrap_or(false);
        let d = PowerPolicy::default();
        let policy = if configured {
            let setting = |f: Option<Decimal>| f.map_or(Setting::Measured, Setting::Fixed);
            PowerPolicy {
                classes: [
                    setting(self.training_factor),
                    setting(self.inference_factor),
                    setting(self.batch_factor),
                    setting(self.interactive_factor),
                ],
                measured_cap: self.measured_cap.unwrap_or(d.measured_cap),
                measured_percentile: self.measured_percentile.unwrap_or(d.measured_percentile),
                measured_days: self
                    .measured_days
                    .and_then(|n| u32::try_from(n).ok())
                    .unwrap_or(d.measured_days),
                power_cap_w: self.power_cap_w.and_then(|w| u32::try_from(w).ok()),
            }
        } else {
            d
        };
        SitePolicy {
            site_id: self.site_id,
            site: self.site,
            policy,
            configured,
            updated_at: self.updated_at,
        }
    }
}

/// Every site's policy, or one site's, in site key order.
pub async fn list(pool: &PgPool, site_id: Option<i64>) -> StoreResult<Vec<SitePolicy>> {
    Ok(sqlx::query_as!(
        Row,
        r#"SELECT s.id AS site_id, s.key AS site, p.site_id IS NOT NULL AS configured,
                  p.training_factor, p.inference_factor, p.batch_factor, p.interactive_factor,
                  p.measured_cap AS "measured_cap?", p.measured_percentile AS "measured_percentile?",
                  p.measured_days AS "measured_days?", p.power_cap_w,
                  p.updated_at AS "updated_at?"
           FROM sites s LEFT JOIN site_power_policies p ON p.site_id = s.id
           WHERE $1::bigint IS NULL OR s.id = $1
           ORDER BY s.key"#,
        site_id,
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(Row::policy)
    .collect())
}

/// Stores a site's policy whole (a class not fixed is measured).
pub async fn put(pool: &PgPool, site_id: i64, p: &PowerPolicy) -> StoreResult<()> {
    let fixed = |k: JobKind| match p.setting(k) {
        Setting::Fixed(f) => Some(f),
        Setting::Measured => None,
    };
    sqlx::query!(
        "INSERT INTO site_power_policies (site_id, training_factor, inference_factor,
             batch_factor, interactive_factor, measured_cap, measured_percentile, measured_days,
             power_cap_w, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, now())
         ON CONFLICT (site_id) DO UPDATE SET training_factor = excluded.training_factor,
             inference_factor = excluded.inference_factor, batch_factor = excluded.batch_factor,
             interactive_factor = excluded.interactive_factor,
             measured_cap = excluded.measured_cap,
             measured_percentile = excluded.measured_percentile,
             measured_days = excluded.measured_days, power_cap_w = excluded.power_cap_w,
             updated_at = excluded.updated_at",
        site_id,
        fixed(JobKind::Training),
        fixed(JobKind::Inference),
        fixed(JobKind::Batch),
        fixed(JobKind::Interactive),
        p.measured_cap,
        p.measured_percentile,
        i32::try_from(p.measured_days).unwrap_or(i32::MAX),
        p.power_cap_w.map(|w| i32::try_from(w).unwrap_or(i32::MAX)),
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Each policy's factors, its measured classes resolved against the headroom of the site's
/// last `measured_days` before `now`: one read of the profiles of every measured class.
pub async fn factors(
    pool: &PgPool,
    policies: &[SitePolicy],
    now: DateTime<Utc>,
) -> StoreResult<HashMap<i64, Factors>> {
    let measured: Vec<&str> = JobKind::ALL
        .into_iter()
        .filter(|k| {
            policies
                .iter()
                .any(|p| p.policy.setting(*k) == Setting::Measured)
        })
        .map(JobKind::as_str)
        .collect();
    let longest = policies
        .iter()
        .map(|p| p.policy.measured_days)
        .max()
        .unwrap_or(0);
    let hours = if measured.is_empty() || longest == 0 {
        Vec::new()
    } else {
        let site = match policies {
            [one] => Some(one.site_id),
            _ => None,
        };
        power::hours(
            pool,
            site,
            now - Duration::days(i64::from(longest)),
            now,
            Some(&measured),
        )
        .await?
    };
    Ok(policies
        .iter()
        .map(|p| (p.site_id, resolve(p, &hours, now)))
        .collect())
}

/// One site's factors from the profile hours read (any sites', any span covering its days).
pub fn resolve(p: &SitePolicy, hours: &[PowerHour], now: DateTime<Utc>) -> Factors {
    let from = now - Duration::days(i64::from(p.policy.measured_days));
    p.policy.resolve(|kind| {
        let profiles = hours.iter().filter(|h| {
            h.site == p.site && h.class == PowerClass::Job(kind) && h.hour >= from && h.hour < now
        });
        headroom::headroom(profiles.map(|h| &h.profile), p.policy.measured_percentile)
    })
}
