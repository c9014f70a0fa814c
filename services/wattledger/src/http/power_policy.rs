//! Sites' power policies over the API (operators): `GET /v1/power/policies` lists each
//! site's policy with the factors admission uses now (a measured class resolved against the
//! site's recent headroom), `PUT /v1/power/policies/{site}` replaces one site's policy and
//! has admission reload it at once.

use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{Caller, Query, RawBatch};
use super::validate::Record;
use crate::auth::Role;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::Json;
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::str::FromStr;
use utoipa::{IntoParams, ToSchema};
use wattledger_domain::admission::oversubscription::{Factors, PowerPolicy, Setting};
use wattledger_domain::input;
use wattledger_domain::job_kind::JobKind;
use wattledger_store::power_policy::{self as store, SitePolicy};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PolicyParams {
    /// Site key; default every site.
    pub site: Option<String>,
}

/// One workload class's over-subscription at a site.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClassFactor {
    /// As configured: a fixed factor, or `measured`.
    pub setting: String,
    /// What admission counts now: a job of this class counts at its draw / factor.
    #[schema(value_type = String)]
    pub factor: Decimal,
    /// `fixed`, or the measured headroom it came from.
    pub why: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PolicyView {
    pub site: String,
    /// Whether the site has its own policy (else the defaults apply).
    pub configured: bool,
    /// The site's power envelope, W (set with the site's inventory).
    pub envelope_w: i64,
    /// Per class: `training`, `inference`, `batch`, `interactive`.
    pub oversubscription: BTreeMap<String, ClassFactor>,
    /// The most a measured factor may be.
    #[schema(value_type = String)]
    pub measured_cap: Decimal,
    #[schema(value_type = String)]
    pub measured_percentile: Decimal,
    pub measured_days: u32,
    /// The per-GPU power limit (W) admission may set on a job that fits now only capped.
    pub power_cap_w: Option<u32>,
    pub updated_at: Option<DateTime<Utc>>,
}

fn view(p: &SitePolicy, f: &Factors, envelope_w: i64) -> PolicyView {
    PolicyView {
        site: p.site.clone(),
        configured: p.configured,
        envelope_w,
        oversubscription: JobKind::ALL
            .into_iter()
            .map(|k| {
                let r = f.of(k);
                (
                    k.as_str().to_owned(),
                    ClassFactor {
                        setting: p.policy.setting(k).label(),
                        factor: r.factor.normalize(),
                        why: r.why.clone(),
                    },
                )
            })
            .collect(),
        measured_cap: p.policy.measured_cap.normalize(),
        measured_percentile: p.policy.measured_percentile.normalize(),
        measured_days: p.policy.measured_days,
        power_cap_w: p.policy.power_cap_w,
        updated_at: p.updated_at,
    }
}

async fn views(state: &AppState, site_id: Option<i64>) -> ApiResult<Vec<PolicyView>> {
    let policies = store::list(&state.pool, site_id).await?;
    let factors = store::factors(&state.pool, &policies, Utc::now()).await?;
    let envelopes: BTreeMap<String, i64> = wattledger_store::inventory::list_sites(&state.pool)
        .await?
        .into_iter()
        .map(|s| (s.key, s.power_envelope_w))
        .collect();
    Ok(policies
        .iter()
        .map(|p| {
            let f = factors.get(&p.site_id).cloned().unwrap_or_default();
            view(p, &f, envelopes.get(&p.site).copied().unwrap_or_default())
        })
        .collect())
}

/// Each site's power policy and the over-subscription factors admission uses now.
#[utoipa::path(get, path = "/v1/power/policies", tag = "power", params(PolicyParams),
    responses((status = 200, body = Vec<PolicyView>), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn list_policies(
    State(state): State<AppState>,
    caller: Caller,
    Query(p): Query<PolicyParams>,
) -> ApiResult<Json<Vec<PolicyView>>> {
    caller.require(&[Role::Operator])?;
    let site_id = super::extract::site_filter(&state.pool, p.site.as_ref()).await?;
    Ok(Json(views(&state, site_id).await?))
}

const FIELDS: [&str; 5] = [
    "oversubscription",
    "measured_cap",
    "measured_percentile",
    "measured_days",
    "power_cap_w",
];

/// A class's setting: `"measured"`, or a factor from 1 to 4 with at most 3 places.
fn setting(v: &Value) -> Result<Setting, String> {
    if v.as_str() == Some("measured") {
        return Ok(Setting::Measured);
    }
    let text = match v {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        _ => return Err("must be \"measured\" or a factor from 1 to 4".into()),
    };
    let d = Decimal::from_str(&text)
        .map_err(|_| "must be \"measured\" or a factor from 1 to 4".to_owned())?;
    input::decimal(d, 3, Decimal::ONE, Decimal::from(4))
        .map(Setting::Fixed)
        .map_err(|e| e.to_string())
}

/// Replaces a site's power policy: `oversubscription` per class (`training`, `inference`,
/// `batch`, `interactive`: a factor from 1 to 4, or `measured`; a class left out keeps the
/// default), `measured_cap` (1.25), `measured_percentile` (99.9), `measured_days` (7),
/// `power_cap_w` (none). Admission applies it at once.
#[utoipa::path(put, path = "/v1/power/policies/{site}", tag = "power",
    params(("site" = String, Path, description = "Site key")),
    request_body(content = Object, description = "oversubscription? {training|inference|batch|interactive: factor | \"measured\"}, measured_cap?, measured_percentile?, measured_days?, power_cap_w?"),
    security(("bearer" = [])),
    responses((status = 200, body = PolicyView), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 413, body = ErrorBody),
              (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn put_policy(
    State(state): State<AppState>,
    caller: Caller,
    Path(site): Path<String>,
    RawBatch(body): RawBatch,
) -> ApiResult<Json<PolicyView>> {
    caller.require(&[Role::Operator])?;
    let site_id = super::extract::site_filter(&state.pool, Some(&site))
        .await?
        .ok_or(ApiError::NotFound)?;
    let value: Value = super::json::parse(&body)?;
    let mut r = Record::new(0, &value, &FIELDS);
    let mut policy = PowerPolicy::default();
    match value.get("oversubscription") {
        None | Some(Value::Null) => {}
        Some(Value::Object(classes)) => {
            for (name, v) in classes {
                let field = format!("oversubscription.{name}");
                match (JobKind::parse(name), setting(v)) {
                    (None, _) => r.error(
                        &field,
                        format!("unknown class; one of {}", JobKind::NAMES.join(", ")),
                    ),
                    (Some(_), Err(why)) => r.error(&field, why),
                    (Some(k), Ok(s)) => policy.classes[k as usize] = s,
                }
            }
        }
        Some(_) => r.error("oversubscription", "must be an object of class: factor"),
    }
    let d = PowerPolicy::default();
    policy.measured_cap = r
        .opt_decimal_in("measured_cap", 3, Decimal::ONE, Decimal::from(4))
        .unwrap_or(d.measured_cap);
    policy.measured_percentile = r
        .opt_decimal_in(
            "measured_percentile",
            3,
            Decimal::new(1, 3),
            Decimal::ONE_HUNDRED,
        )
        .unwrap_or(d.measured_percentile);
    policy.measured_days = match r.opt_i64("measured_days") {
        None => d.measured_days,
        Some(n @ 1..=90) => n as u32,
        Some(_) => {
            r.error("measured_days", "must be between 1 and 90");
            d.measured_days
        }
    };
    policy.power_cap_w = match r.opt_i64("power_cap_w") {
        None => None,
        Some(w @ 50..=5000) => Some(w as u32),
        Some(_) => {
            r.error("power_cap_w", "must be between 50 and 5000 W");
            None
        }
    };
    if !r.errors.is_empty() {
        return Err(ApiError::Validation(r.errors));
    }
    store::put(&state.pool, site_id, &policy).await?;
    state.admission.poke();
    tracing::info!(site = %site, "site power policy replaced");
    views(&state, Some(site_id))
        .await?
        .pop()
        .map(Json)
        .ok_or(ApiError::NotFound)
}
