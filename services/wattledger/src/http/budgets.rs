//! Budgets over the API: admin and finance write them (`PUT` creates or replaces by key),
//! a tenant reads its own. Each read says what the ledger counts against the budget this
//! period, what remains, when the 7-day burn rate runs it out, and the alerts raised.

use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{Caller, RawBatch};
use super::validate::Record;
use crate::auth::Role;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, Duration, Utc};
use rust_decimal::Decimal;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use wattledger_domain::budget::{BudgetMetric, BudgetPeriod};
use wattledger_domain::budget_alerts::runs_out_at;
use wattledger_domain::input;
use wattledger_store::budgets::{self as store, BudgetSpec, BudgetState};
use wattledger_store::inventory::{ids_by_key, KeyedTable};
use wattledger_store::Scope;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/budgets", get(list))
        .route("/v1/budgets/{key}", get(show).put(put).delete(remove))
}

const READERS: [Role; 4] = [Role::Finance, Role::Operator, Role::Scheduler, Role::Tenant];
const WRITERS: [Role; 1] = [Role::Finance];

#[derive(Debug, Serialize, ToSchema)]
pub struct MetricView {
    pub metric: BudgetMetric,
    #[schema(value_type = String)]
    pub limit: Decimal,
    /// Counted by the ledger this period.
    #[schema(value_type = String)]
    pub used: Decimal,
    #[schema(value_type = String)]
    pub remaining: Decimal,
    #[schema(value_type = String)]
    pub used_pct: Decimal,
    /// At the last seven days' rate, when the limit is reached (only if within the period).
    pub projected_exhausted_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AlertView {
    pub metric: BudgetMetric,
    /// A percent of the limit, or `projected`.
    pub threshold: String,
    #[schema(value_type = String)]
    pub used: Decimal,
    pub projected_at: Option<DateTime<Utc>>,
    pub raised_at: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BudgetView {
    pub key: String,
    pub tenant: String,
    pub model: Option<String>,
    pub period: BudgetPeriod,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
    /// A hard cap makes admission reject jobs that would exceed it; a soft one warns.
    pub hard: bool,
    pub thresholds_pct: Vec<i32>,
    /// For the cost limit.
    pub currency: Option<String>,
    pub metrics: Vec<MetricView>,
    /// Alerts raised this period.
    pub alerts: Vec<AlertView>,
}

async fn view(
    state: &AppState,
    scope: &Scope,
    b: BudgetState,
    now: DateTime<Utc>,
) -> ApiResult<BudgetView> {
    let metrics = b
        .usages(now)
        .into_iter()
        .map(|(name, u)| MetricView {
            metric: name,
            limit: u.limit.normalize(),
            used: u.used.round_dp(6),
            remaining: (u.limit - u.used).round_dp(6),
            used_pct: (u.used * Decimal::ONE_HUNDRED / u.limit).round_dp(2),
            projected_exhausted_at: runs_out_at(&u, now).filter(|t| *t < b.period_end),
        })
        .collect();
    let alerts = store::events(&state.pool, scope, b.id, Some(b.period_start))
        .await?
        .into_iter()
        .map(|e| AlertView {
            metric: e.metric,
            threshold: e.threshold,
            used: e.used,
            projected_at: e.projected_at,
            raised_at: e.created_at,
        })
        .collect();
    Ok(BudgetView {
        key: b.key,
        tenant: b.tenant,
        model: b.model,
        period: b.period,
        period_start: b.period_start,
        period_end: b.period_end,
        hard: b.hard,
        thresholds_pct: b.thresholds_pct,
        currency: b.currency,
        metrics,
        alerts,
    })
}

/// Budgets the caller may see, each over its current period.
#[utoipa::path(get, path = "/v1/budgets", tag = "budgets", security(("bearer" = [])),
    responses((status = 200, body = Vec<BudgetView>), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<Vec<BudgetView>>> {
    caller.require(&READERS)?;
    let now = Utc::now();
    let mut out = Vec::new();
    for b in store::list(&state.pool, &caller.scope, None, now).await? {
        out.push(view(&state, &caller.scope, b, now).await?);
    }
    Ok(Json(out))
}

#[utoipa::path(get, path = "/v1/budgets/{key}", tag = "budgets",
    params(("key" = String, Path, description = "Budget key")), security(("bearer" = [])),
    responses((status = 200, body = BudgetView), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(key): Path<String>,
) -> ApiResult<Json<BudgetView>> {
    caller.require(&READERS)?;
    Ok(Json(one(&state, &caller, &key).await?))
}

/// The budget `key` as the caller may see it; another tenant's is not found.
async fn one(state: &AppState, caller: &Caller, key: &str) -> ApiResult<BudgetView> {
    let now = Utc::now();
    let b = store::list(&state.pool, &caller.scope, Some(key), now)
        .await?
        .into_iter()
        .next()
        .ok_or(ApiError::NotFound)?;
    view(state, &caller.scope, b, now).await
}

const FIELDS: [&str; 11] = [
    "tenant",
    "model",
    "period",
    "starts_at",
    "ends_at",
    "limit_kwh",
    "limit_cost",
    "currency",
    "limit_carbon_kg",
    "hard",
    "thresholds_pct",
];

/// Creates the budget `key` or replaces it (admin, finance). At least one limit; `cost` needs
/// its currency; `custom` periods need `starts_at` < `ends_at`. Thresholds default to
/// 50/80/100 %. Admission applies a hard cap at once.
#[utoipa::path(put, path = "/v1/budgets/{key}", tag = "budgets",
    params(("key" = String, Path, description = "Budget key")),
    request_body(content = Object, description = "tenant, model?, period (month|custom), starts_at?, ends_at?, limit_kwh?, limit_cost? + currency, limit_carbon_kg?, hard, thresholds_pct?"),
    security(("bearer" = [])),
    responses((status = 200, body = BudgetView), (status = 201, body = BudgetView),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
              (status = 422, body = ErrorBody)))]
pub async fn put(
    State(state): State<AppState>,
    caller: Caller,
    Path(key): Path<String>,
    RawBatch(body): RawBatch,
) -> ApiResult<(StatusCode, Json<BudgetView>)> {
    caller.require(&WRITERS)?;
    let value: Value = super::json::parse(&body)?;
    let mut r = Record::new(0, &value, &FIELDS);
    match input::text(&key, 128) {
        Ok(k) if !k.trim().is_empty() => {}
        Ok(_) => r.error("key", "must not be empty"),
        Err(e) => r.error("key", e.to_string()),
    }
    let tenant_key = r.key("tenant");
    let model_key = r.opt_key("model");
    let period = r.opt_named("period");
    // A refused period says what is wrong; the rules of a period's times would only guess.
    let period_refused = period.is_none() && r.errors.iter().any(|e| e.field == "period");
    let period = period.unwrap_or(BudgetPeriod::Month);
    let far = Utc::now() + Duration::days(3650);
    let starts_at = r.opt_time("starts_at", far);
    let ends_at = r.opt_time("ends_at", far);
    match (period, starts_at, ends_at) {
        _ if period_refused => {}
        (BudgetPeriod::Custom, Some(s), Some(e)) if s < e => {}
        (BudgetPeriod::Custom, _, _) => {
            r.error("ends_at", "a custom period needs starts_at before ends_at")
        }
        (BudgetPeriod::Month, None, None) => {}
        (BudgetPeriod::Month, _, _) => r.error(
            "starts_at",
            "a monthly budget takes no starts_at or ends_at",
        ),
    }
    // The columns are numeric(20, 6): a millionth is the finest limit that is stored as sent.
    let limit = |r: &mut Record, field: &str| {
        r.opt_decimal_in(
            field,
            6,
            Decimal::new(1, 6),
            Decimal::from(1_000_000_000_000i64),
        )
    };
    let limit_kwh = limit(&mut r, "limit_kwh");
    let limit_cost = limit(&mut r, "limit_cost");
    let limit_carbon_kg = limit(&mut r, "limit_carbon_kg");
    // A limit that was refused already says what is wrong; the rules between fields below
    // would only repeat it.
    let refused_limit = r.errors.iter().any(|e| e.field.starts_with("limit_"));
    if limit_kwh.is_none() && limit_cost.is_none() && limit_carbon_kg.is_none() && !refused_limit {
        r.error(
            "limit_kwh",
            "at least one of limit_kwh, limit_cost, limit_carbon_kg is required",
        );
    }
    let currency = r.opt_str("currency", 3);
    match (&limit_cost, &currency) {
        (Some(_), Some(c)) if c.len() == 3 && c.chars().all(|c| c.is_ascii_uppercase()) => {}
        (Some(_), _) => r.error("currency", "a cost limit needs an ISO 4217 currency (EUR)"),
        (None, Some(_)) if !refused_limit => r.error("currency", "only with limit_cost"),
        (None, Some(_)) => {}
        (None, None) => {}
    }
    let hard = r.opt_bool("hard").unwrap_or(false);
    let thresholds: Vec<i32> = match r.array("thresholds_pct") {
        None => vec![50, 80, 100],
        Some(a) => {
            let t: Vec<i32> = a
                .iter()
                .filter_map(|v| v.as_i64())
                .filter(|p| (1..=1000).contains(p))
                .map(|p| p as i32)
                .collect();
            if t.len() != a.len() || t.is_empty() || t.len() > 10 {
                r.error(
                    "thresholds_pct",
                    "1 to 10 whole percents between 1 and 1000",
                );
            }
            t
        }
    };
    let tenant_id = match &tenant_key {
        Some(k) => {
            let id = state.tenant_id(k).await?;
            if id.is_none() {
                r.error("tenant", format!("unknown tenant '{k}'"));
            }
            id
        }
        None => None,
    };
    let model_id = match &model_key {
        Some(m) => {
            let ids = ids_by_key(&state.pool, KeyedTable::Models, std::slice::from_ref(m)).await?;
            let id = ids.get(m).copied();
            if id.is_none() {
                r.error("model", format!("unknown model '{m}'"));
            }
            id
        }
        None => None,
    };
    if !r.errors.is_empty() {
        return Err(ApiError::Validation(r.errors));
    }
    let spec = BudgetSpec {
        key: key.clone(),
        tenant_id: tenant_id.ok_or(ApiError::NotFound)?,
        model_id,
        period,
        starts_at,
        ends_at,
        limit_kwh,
        limit_cost,
        currency: limit_cost.and(currency),
        limit_carbon_kg,
        hard,
        thresholds_pct: thresholds,
    };
    let new = store::upsert(&state.pool, &spec).await?;
    state.admission.poke();
    let budget = one(&state, &caller, &key).await?;
    let status = if new {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(budget)))
}

/// Deletes a budget and its alerts (admin, finance).
#[utoipa::path(delete, path = "/v1/budgets/{key}", tag = "budgets",
    params(("key" = String, Path, description = "Budget key")), security(("bearer" = [])),
    responses((status = 204), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody)))]
pub async fn remove(
    State(state): State<AppState>,
    caller: Caller,
    Path(key): Path<String>,
) -> ApiResult<StatusCode> {
    caller.require(&WRITERS)?;
    if !store::delete(&state.pool, &key).await? {
        return Err(ApiError::NotFound);
    }
    state.admission.poke();
    Ok(StatusCode::NO_CONTENT)
}
