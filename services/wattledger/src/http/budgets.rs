//! Budgets over the API: admin and finance write them (`PUT` creates or replaces by key),
//! a tenant reads its own. Each read says what the ledger counts against the budget this
//! period, what remains, when the 7-day burn rate runs it out, and the alerts raised.

use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{Caller, RawBatch};
use super::validate::{self, Findings};
use crate::auth::Role;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, Duration, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use wattledger_domain::budget::{BudgetMetric, BudgetPeriod};
use wattledger_domain::budget_alerts::runs_out_at;
use wattledger_domain::input::field::{self, Field};
use wattledger_domain::input::record::{Problem, Problems, Record as _};
use wattledger_domain::input::{self, InputError};
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

/// A limit's places: the columns are numeric(20, 6), so a millionth is the finest limit that
/// is stored as sent.
const LIMIT_SCALE: u32 = 6;
/// The largest limit, far below what the columns hold.
const LIMIT_MAX: i64 = 1_000_000_000_000;

wattledger_domain::record! {
    /// A budget as `PUT /v1/budgets/{key}` writes it.
    #[derive(Debug, Deserialize, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct BudgetIn {
        /// The tenant's key.
        pub tenant: String => String::new(),
        /// A model's key: the budget then counts the tenant's use of that model only.
        #[serde(default)]
        pub model: Option<String> => None,
        /// `month` (the default) or `custom`.
        #[serde(default = "month")]
        pub period: BudgetPeriod = BudgetPeriod::Month => BudgetPeriod::Month,
        /// A custom period's start, before `ends_at`; a monthly budget takes none.
        #[serde(default)]
        pub starts_at: Option<DateTime<Utc>> => None,
        #[serde(default)]
        pub ends_at: Option<DateTime<Utc>> => None,
        /// kWh, up to 6 places. At least one of the three limits is required.
        #[serde(default)]
        #[schema(value_type = Option<String>, example = "1500")]
        pub limit_kwh: Option<Decimal> => None,
        /// In `currency`, up to 6 places.
        #[serde(default)]
        #[schema(value_type = Option<String>, example = "2000.50")]
        pub limit_cost: Option<Decimal> => None,
        /// ISO 4217 (`EUR`): with `limit_cost`, and only with it.
        #[serde(default)]
        pub currency: Option<String> => None,
        /// kg CO2e, up to 6 places.
        #[serde(default)]
        #[schema(value_type = Option<String>)]
        pub limit_carbon_kg: Option<Decimal> => None,
        /// A hard cap makes admission reject jobs that would exceed it; a soft one (the
        /// default) warns.
        #[serde(default)]
        pub hard: bool = false => false,
        /// The percents of a limit at which an alert is raised; 50, 80 and 100 by default.
        #[serde(default)]
        #[schema(value_type = Option<Vec<i32>>, example = json!([50, 80, 100]))]
        pub thresholds_pct: Option<Thresholds> => None,
    }
}

fn month() -> BudgetPeriod {
    BudgetPeriod::Month
}

/// The percents of a limit at which a budget alerts: 1 to 10 whole percents from 1 to 1000.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Vec<i64>")]
pub struct Thresholds(Vec<i32>);

const THRESHOLDS_RULE: &str = "1 to 10 whole percents between 1 and 1000";

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds(vec![50, 80, 100])
    }
}

impl TryFrom<Vec<i64>> for Thresholds {
    type Error = &'static str;

    fn try_from(pcts: Vec<i64>) -> Result<Self, Self::Error> {
        let t: Vec<i32> = pcts
            .iter()
            .filter_map(|p| i32::try_from(*p).ok())
            .filter(|p| (1..=1000).contains(p))
            .collect();
        if t.len() != pcts.len() || t.is_empty() || t.len() > 10 {
            return Err(THRESHOLDS_RULE);
        }
        Ok(Thresholds(t))
    }
}

/// An array whose every item is a threshold; any other item refuses the whole field with the
/// rule, as one list is what a budget alerts by.
impl Field for Thresholds {
    fn read(v: Option<&Value>) -> Result<Self, Vec<Problem>> {
        let items = match field::present(v) {
            None => return field::refused("is required"),
            Some(Value::Array(items)) => items,
            Some(_) => return field::refused("must be an array"),
        };
        let pcts: Option<Vec<i64>> = items.iter().map(Value::as_i64).collect();
        pcts.ok_or(THRESHOLDS_RULE)
            .and_then(Thresholds::try_from)
            .or_else(field::refused)
    }
}

impl BudgetIn {
    /// Everything wrong with the budget on its own, `now` bounding how far ahead a period may
    /// be. `refused` names the fields the reading refused already: a refused period or limit
    /// says what is wrong, and the rules between fields would only repeat it.
    fn check(&self, refused: impl Fn(&str) -> bool, now: DateTime<Utc>) -> Vec<Problem> {
        let mut p = Problems::default();
        p.key("tenant", &self.tenant);
        if let Some(m) = &self.model {
            p.key("model", m);
        }
        let far = now + Duration::days(3650);
        let starts_at = self.starts_at.filter(|&t| p.time("starts_at", t, far));
        let ends_at = self.ends_at.filter(|&t| p.time("ends_at", t, far));
        match (self.period, starts_at, ends_at) {
            _ if refused("period") => {}
            (BudgetPeriod::Custom, Some(s), Some(e)) if s < e => {}
            (BudgetPeriod::Custom, _, _) => {
                p.add("ends_at", "a custom period needs starts_at before ends_at")
            }
            (BudgetPeriod::Month, None, None) => {}
            (BudgetPeriod::Month, _, _) => p.add(
                "starts_at",
                "a monthly budget takes no starts_at or ends_at",
            ),
        }
        let mut refused_limit = false;
        let mut limit = |p: &mut Problems, field: &str, d: Option<Decimal>| {
            refused_limit |= refused(field);
            d.filter(|&d| {
                let ok = p.decimal(field, d, LIMIT_SCALE, Decimal::new(1, 6), LIMIT_MAX.into());
                refused_limit |= !ok;
                ok
            })
        };
        let limit_kwh = limit(&mut p, "limit_kwh", self.limit_kwh);
        let limit_cost = limit(&mut p, "limit_cost", self.limit_cost);
        let limit_carbon_kg = limit(&mut p, "limit_carbon_kg", self.limit_carbon_kg);
        if limit_kwh.is_none()
            && limit_cost.is_none()
            && limit_carbon_kg.is_none()
            && !refused_limit
        {
            p.add(
                "limit_kwh",
                "at least one of limit_kwh, limit_cost, limit_carbon_kg is required",
            );
        }
        let currency = self
            .currency
            .as_deref()
            .filter(|c| p.text("currency", c, 3));
        match (limit_cost, currency) {
            (Some(_), Some(c)) if c.len() == 3 && c.chars().all(|c| c.is_ascii_uppercase()) => {}
            (Some(_), _) => p.add("currency", "a cost limit needs an ISO 4217 currency (EUR)"),
            (None, Some(_)) if !refused_limit => p.add("currency", "only with limit_cost"),
            (None, _) => {}
        }
        p.done()
    }

    /// The budget to store as `key`, once checked and its tenant and model found.
    fn spec(self, key: String, tenant_id: i64, model_id: Option<i64>) -> BudgetSpec {
        let limit = |d: Option<Decimal>| d.map(|d| d.normalize());
        BudgetSpec {
            key,
            tenant_id,
            model_id,
            period: self.period,
            starts_at: self.starts_at,
            ends_at: self.ends_at,
            limit_kwh: limit(self.limit_kwh),
            limit_cost: limit(self.limit_cost),
            currency: self.limit_cost.and(self.currency),
            limit_carbon_kg: limit(self.limit_carbon_kg),
            hard: self.hard,
            thresholds_pct: self.thresholds_pct.unwrap_or_default().0,
        }
    }
}

/// A budget's key, from the path: text of at most 128 bytes that is not blank.
fn check_key(key: &str) -> Result<(), String> {
    match input::text(key, 128) {
        Ok(k) if !k.trim().is_empty() => Ok(()),
        Ok(_) => Err(InputError::Empty.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// The ids of the budget's tenant and model; one that is not known is its field's error.
/// A key its check refuses is not looked up.
async fn lookup(
    state: &AppState,
    b: &BudgetIn,
    f: &mut Findings,
) -> ApiResult<(Option<i64>, Option<i64>)> {
    let mut tenant_id = None;
    if !f.refused("tenant") {
        tenant_id = state.tenant_id(&b.tenant).await?;
        if tenant_id.is_none() {
            f.error("tenant", format!("unknown tenant '{}'", b.tenant));
        }
    }
    let mut model_id = None;
    if let Some(m) = b.model.as_ref().filter(|_| !f.refused("model")) {
        let ids = ids_by_key(&state.pool, KeyedTable::Models, std::slice::from_ref(m)).await?;
        model_id = ids.get(m).copied();
        if model_id.is_none() {
            f.error("model", format!("unknown model '{m}'"));
        }
    }
    Ok((tenant_id, model_id))
}

/// Creates the budget `key` or replaces it (admin, finance). At least one limit; `cost` needs
/// its currency; `custom` periods need `starts_at` < `ends_at`. Thresholds default to
/// 50/80/100 %. Admission applies a hard cap at once.
#[utoipa::path(put, path = "/v1/budgets/{key}", tag = "budgets",
    params(("key" = String, Path, description = "Budget key")),
    request_body = BudgetIn,
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
    let (budget, mut f) = validate::read::<BudgetIn>(0, &value);
    if let Err(reason) = check_key(&key) {
        f.outside("key", reason);
    }
    let mut spec = None;
    if let Some(b) = budget {
        let problems = b.check(|field| f.refused(field), Utc::now());
        f.problems(problems);
        let (tenant_id, model_id) = lookup(&state, &b, &mut f).await?;
        spec = tenant_id.map(|t| b.spec(key.clone(), t, model_id));
    }
    let spec = f
        .finish(spec, BudgetIn::FIELDS)
        .map_err(ApiError::Validation)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> DateTime<Utc> {
        "2026-11-18T12:00:00Z".parse().unwrap()
    }

    /// What the reading and the check find wrong with `v` (the lookups aside), as
    /// `(field, reason)`; the budget when nothing is.
    fn read(v: Value) -> Result<BudgetIn, Vec<(String, String)>> {
        validate::checked(&v, |b: &BudgetIn, refused| b.check(refused, now()))
            .map_err(|e| e.into_iter().map(|e| (e.field, e.reason)).collect())
    }

    fn fields(v: Value) -> Vec<String> {
        read(v).unwrap_err().into_iter().map(|(f, _)| f).collect()
    }

    #[test]
    fn every_problem_is_named_once_in_field_order() {
        let bad = read(
            json!({"tenant": "nobody", "period": "custom", "limit_cost": "-3",
            "thresholds_pct": [0], "colour": "red"}),
        )
        .unwrap_err();
        let want = [
            ("colour", "unknown field"),
            ("ends_at", "a custom period needs starts_at before ends_at"),
            ("limit_cost", "must be between 0.000001 and 1000000000000"),
            ("thresholds_pct", THRESHOLDS_RULE),
        ];
        assert_eq!(
            bad,
            want.map(|(f, r)| (f.to_owned(), r.to_owned())).to_vec()
        );
    }

    #[test]
    fn a_refused_period_or_limit_is_not_also_blamed_by_the_rules_between_fields() {
        assert_eq!(
            fields(json!({"tenant": "a", "period": "weekly", "limit_kwh": 1,
                "starts_at": "2026-11-01T00:00:00Z"})),
            ["period"]
        );
        assert_eq!(
            fields(json!({"tenant": "a", "limit_kwh": "x", "currency": "EUR"})),
            ["limit_kwh"]
        );
        assert_eq!(
            fields(json!({"tenant": "a", "limit_cost": "1e-28", "currency": "EUR"})),
            ["limit_cost"]
        );
        assert_eq!(
            read(json!({"tenant": "a"})).unwrap_err(),
            [(
                "limit_kwh".to_owned(),
                "at least one of limit_kwh, limit_cost, limit_carbon_kg is required".to_owned()
            )]
        );
    }

    #[test]
    fn a_cost_limit_and_its_currency_go_together() {
        let reason = |v| read(v).unwrap_err()[0].1.clone();
        assert_eq!(
            reason(json!({"tenant": "a", "limit_kwh": 1, "currency": "EUR"})),
            "only with limit_cost"
        );
        assert_eq!(
            reason(json!({"tenant": "a", "limit_cost": 5})),
            "a cost limit needs an ISO 4217 currency (EUR)"
        );
        assert_eq!(
            reason(json!({"tenant": "a", "limit_cost": 5, "currency": "eur"})),
            "a cost limit needs an ISO 4217 currency (EUR)"
        );
        assert!(read(json!({"tenant": "a", "limit_cost": 5, "currency": "EUR"})).is_ok());
    }

    #[test]
    fn periods_take_their_times_or_none() {
        assert_eq!(
            fields(json!({"tenant": "a", "limit_kwh": 1, "ends_at": "2026-12-01T00:00:00Z"})),
            ["starts_at"]
        );
        assert_eq!(
            fields(json!({"tenant": "a", "limit_kwh": 1, "period": "custom",
                "starts_at": "2026-12-01T00:00:00Z", "ends_at": "2026-11-01T00:00:00Z"})),
            ["ends_at"]
        );
        // Too far ahead: the time says so, and the period's rule does not count on it.
        assert_eq!(
            fields(json!({"tenant": "a", "limit_kwh": 1, "period": "custom",
                "starts_at": "2026-12-01T00:00:00Z", "ends_at": "2099-01-01T00:00:00Z"})),
            ["ends_at", "ends_at"]
        );
        let b = read(
            json!({"tenant": "a", "limit_kwh": "1.500", "period": "custom",
            "starts_at": "2026-11-01T00:00:00Z", "ends_at": "2026-12-01T00:00:00Z"}),
        )
        .unwrap();
        let spec = b.spec("k".into(), 1, None);
        assert_eq!(spec.limit_kwh, Some(Decimal::new(15, 1)));
        assert_eq!(spec.limit_kwh.unwrap().scale(), 1);
        assert_eq!(spec.thresholds_pct, [50, 80, 100]);
    }

    #[test]
    fn thresholds_are_one_list_of_whole_percents() {
        let t = |v: Value| read(json!({"tenant": "a", "limit_kwh": 1, "thresholds_pct": v}));
        assert_eq!(
            t(json!([10, 200])).unwrap().thresholds_pct,
            Some(Thresholds(vec![10, 200]))
        );
        for bad in [
            json!([]),
            json!([50, "x"]),
            json!([1001]),
            json!([1.5]),
            json!(vec![1; 11]),
        ] {
            assert_eq!(
                t(bad.clone()).unwrap_err(),
                [("thresholds_pct".to_owned(), THRESHOLDS_RULE.to_owned())],
                "{bad}"
            );
        }
        assert_eq!(t(json!(50)).unwrap_err()[0].1, "must be an array");
        assert!(serde_json::from_value::<Thresholds>(json!([0])).is_err());
    }

    #[test]
    fn the_key_in_the_path_is_text_that_is_not_blank() {
        assert_eq!(check_key("a-monthly"), Ok(()));
        assert_eq!(check_key(" "), Err("must not be empty".into()));
        assert_eq!(
            check_key(&"k".repeat(129)),
            Err("must be at most 128 bytes".into())
        );
    }
}
