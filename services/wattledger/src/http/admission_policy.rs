//! Tenants' admission policies over the API: `GET /v1/admission/policies/{tenant}` shows the
//! policy admission decides a tenant's jobs on (the defaults where it has none), and
//! `PUT /v1/admission/policies/{tenant}` (admin) replaces it and has admission reload it at
//! once. The policy weighs three signals when a flexible job shops for a slot: carbon
//! (`basis`), price, and the carbon-free share of its run (`cfe_weight`).

use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{Caller, RawBatch};
use super::validate;
use crate::auth::Role;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::Json;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use wattledger_domain::admission::Policy;
use wattledger_domain::input::record::{Problem, Problems};
use wattledger_domain::priority::Priority;
use wattledger_domain::signals::Basis;
use wattledger_store::admission::{self as store, PolicyRow};
use wattledger_store::Scope;

/// Places the policy's weights and threshold are stored to (`numeric(4, 3)`, `numeric(6, 3)`).
const PLACES: u32 = 3;
/// Most priority classes a policy names in each list.
const MAX_PRIORITIES: usize = 32;

/// A tenant's admission policy as admission applies it.
#[derive(Debug, Serialize, ToSchema)]
pub struct AdmissionPolicyView {
    pub tenant: String,
    /// Whether the tenant has its own policy (else the defaults apply).
    pub configured: bool,
    /// Defer a flexible job only when the best slot saves more than this, percent.
    #[schema(value_type = String, example = "10")]
    pub threshold_pct: Decimal,
    /// Weight of carbon against price in the saving: 1 carbon only, 0 price only.
    #[schema(value_type = String, example = "1")]
    pub carbon_weight: Decimal,
    /// Weight of the carbon-free share of the job's run (the grid's carbon-free share and
    /// the site's contracted clean energy, hour by hour) against carbon and price together:
    /// carbon weighs (1 − cfe_weight) × carbon_weight, price (1 − cfe_weight) ×
    /// (1 − carbon_weight). 0 leaves it out.
    #[schema(value_type = String, example = "0")]
    pub cfe_weight: Decimal,
    /// The carbon intensity slots are compared on: `marginal` or `average`.
    #[schema(value_type = String)]
    pub basis: Basis,
    /// Priority classes that skip the power envelope and the carbon/price window.
    #[schema(value_type = Vec<String>)]
    pub bypass_priorities: Vec<Priority>,
    /// Priority classes that also skip budgets.
    #[schema(value_type = Vec<String>)]
    pub budget_bypass_priorities: Vec<Priority>,
}

impl AdmissionPolicyView {
    fn of(tenant: &str, row: Option<PolicyRow>) -> AdmissionPolicyView {
        let d = Policy::default();
        let configured = row.is_some();
        let row = row.unwrap_or(PolicyRow {
            tenant_id: 0,
            threshold_pct: d.threshold_pct,
            carbon_weight: d.carbon_weight,
            cfe_weight: d.cfe_weight,
            basis: if d.marginal {
                Basis::Marginal
            } else {
                Basis::Average
            },
            bypass_priorities: d.bypass,
            budget_bypass_priorities: d.bypass_budget,
        });
        AdmissionPolicyView {
            tenant: tenant.to_owned(),
            configured,
            threshold_pct: row.threshold_pct.normalize(),
            carbon_weight: row.carbon_weight.normalize(),
            cfe_weight: row.cfe_weight.normalize(),
            basis: row.basis,
            bypass_priorities: row.bypass_priorities,
            budget_bypass_priorities: row.budget_bypass_priorities,
        }
    }
}

wattledger_domain::record! {
    /// A tenant's admission policy as `PUT /v1/admission/policies/{tenant}` writes it; what
    /// is left out keeps its default.
    #[derive(Debug, Deserialize, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct AdmissionPolicyIn {
        /// Percent a slot must save to defer a job: 0 to 100, up to 3 places (default 10).
        #[schema(value_type = Option<String>, example = "10")]
        #[serde(default)]
        pub threshold_pct: Option<Decimal> => None,
        /// Weight of carbon against price: 0 to 1, up to 3 places (default 1).
        #[schema(value_type = Option<String>, example = "1")]
        #[serde(default)]
        pub carbon_weight: Option<Decimal> => None,
        /// Weight of the carbon-free share against carbon and price: 0 to 1, up to 3 places
        /// (default 0).
        #[schema(value_type = Option<String>, example = "0.5")]
        #[serde(default)]
        pub cfe_weight: Option<Decimal> => None,
        /// `marginal` (default) or `average`.
        #[schema(value_type = Option<String>)]
        #[serde(default)]
        pub basis: Option<Basis> => None,
        /// Priority classes that skip the envelope and the window (default none).
        #[schema(value_type = Vec<String>)]
        #[serde(default)]
        pub bypass_priorities: Vec<Priority> => Vec::new(),
        /// Priority classes that also skip budgets (default none).
        #[schema(value_type = Vec<String>)]
        #[serde(default)]
        pub budget_bypass_priorities: Vec<Priority> => Vec::new(),
    }
}

impl AdmissionPolicyIn {
    /// Everything wrong with the policy: each number fits its column and range (a finer
    /// value would be rounded by the database, and could round to one its checks refuse).
    fn check(&self) -> Vec<Problem> {
        let mut p = Problems::default();
        if let Some(t) = self.threshold_pct {
            p.decimal("threshold_pct", t, PLACES, Decimal::ZERO, 100.into());
        }
        for (field, w) in [
            ("carbon_weight", self.carbon_weight),
            ("cfe_weight", self.cfe_weight),
        ] {
            if let Some(w) = w {
                p.decimal(field, w, PLACES, Decimal::ZERO, Decimal::ONE);
            }
        }
        for (field, list) in [
            ("bypass_priorities", &self.bypass_priorities),
            ("budget_bypass_priorities", &self.budget_bypass_priorities),
        ] {
            if list.len() > MAX_PRIORITIES {
                p.add(field, format!("at most {MAX_PRIORITIES} priority classes"));
            }
        }
        p.done()
    }

    /// The row it stores for `tenant_id`, the defaults for what it leaves out; once checked.
    fn row(self, tenant_id: i64) -> PolicyRow {
        let d = Policy::default();
        let basis = self.basis.unwrap_or(if d.marginal {
            Basis::Marginal
        } else {
            Basis::Average
        });
        PolicyRow {
            tenant_id,
            threshold_pct: self.threshold_pct.unwrap_or(d.threshold_pct),
            carbon_weight: self.carbon_weight.unwrap_or(d.carbon_weight),
            cfe_weight: self.cfe_weight.unwrap_or(d.cfe_weight),
            basis,
            bypass_priorities: dedup(self.bypass_priorities),
            budget_bypass_priorities: dedup(self.budget_bypass_priorities),
        }
    }
}

/// The classes in their first order, each once.
fn dedup(list: Vec<Priority>) -> Vec<Priority> {
    let mut out: Vec<Priority> = Vec::with_capacity(list.len());
    for p in list {
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// A tenant's admission policy (the defaults where it has none).
#[utoipa::path(get, path = "/v1/admission/policies/{tenant}", tag = "admission",
    params(("tenant" = String, Path, description = "Tenant key")),
    security(("bearer" = [])),
    responses((status = 200, body = AdmissionPolicyView), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn get_policy(
    State(state): State<AppState>,
    caller: Caller,
    Path(tenant): Path<String>,
) -> ApiResult<Json<AdmissionPolicyView>> {
    caller.require(&[Role::Scheduler, Role::Operator])?;
    let id = state.tenant_id(&tenant).await?.ok_or(ApiError::NotFound)?;
    let row = store::policies(&state.pool, &Scope::Tenant(id))
        .await?
        .pop();
    Ok(Json(AdmissionPolicyView::of(&tenant, row)))
}

/// Replaces a tenant's admission policy: `threshold_pct` (10), `carbon_weight` (1),
/// `cfe_weight` (0), `basis` (`marginal`), `bypass_priorities` and
/// `budget_bypass_priorities` (none). Admission applies it at once.
#[utoipa::path(put, path = "/v1/admission/policies/{tenant}", tag = "admission",
    params(("tenant" = String, Path, description = "Tenant key")),
    request_body = AdmissionPolicyIn,
    security(("bearer" = [])),
    responses((status = 200, body = AdmissionPolicyView), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 413, body = ErrorBody),
              (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn put_policy(
    State(state): State<AppState>,
    caller: Caller,
    Path(tenant): Path<String>,
    RawBatch(body): RawBatch,
) -> ApiResult<Json<AdmissionPolicyView>> {
    caller.require(&[Role::Admin])?;
    let id = state.tenant_id(&tenant).await?.ok_or(ApiError::NotFound)?;
    let value: Value = super::json::parse(&body)?;
    let row = validate::checked(&value, |p: &AdmissionPolicyIn, _| p.check())
        .map_err(ApiError::Validation)?
        .row(id);
    let stored = store::put_policy(&state.pool, &row).await?;
    state.admission.poke();
    tracing::info!(tenant = %tenant, "tenant admission policy replaced");
    Ok(Json(AdmissionPolicyView::of(&tenant, Some(stored))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(v: Value) -> Result<AdmissionPolicyIn, Vec<(String, String)>> {
        validate::checked(&v, |p: &AdmissionPolicyIn, _| p.check())
            .map_err(|e| e.into_iter().map(|e| (e.field, e.reason)).collect())
    }

    #[test]
    fn left_out_fields_keep_their_defaults() {
        let row = read(json!({"cfe_weight": "0.5"})).unwrap().row(7);
        assert_eq!(row.cfe_weight, Decimal::new(5, 1));
        assert_eq!(row.carbon_weight, Decimal::ONE);
        assert_eq!(row.threshold_pct, Decimal::from(10));
        assert_eq!(row.basis, Basis::Marginal);
        let row = read(json!({})).unwrap().row(7);
        assert_eq!(row.cfe_weight, Decimal::ZERO);
    }

    #[test]
    fn each_bad_field_is_named() {
        let fields = |v| {
            let mut f: Vec<String> = read(v).unwrap_err().into_iter().map(|e| e.0).collect();
            f.sort();
            f
        };
        assert_eq!(
            fields(json!({"cfe_weight": "1.5", "carbon_weight": -0.1, "threshold_pct": 101})),
            ["carbon_weight", "cfe_weight", "threshold_pct"]
        );
        // A fourth place would be rounded by the column.
        assert_eq!(fields(json!({"cfe_weight": "0.1234"})), ["cfe_weight"]);
        assert_eq!(fields(json!({"cfe_weight": "x"})), ["cfe_weight"]);
        assert_eq!(fields(json!({"basis": "median"})), ["basis"]);
        assert_eq!(fields(json!({"cfe": 1})), ["cfe"]);
        assert!(
            read(json!({"cfe_weight": 1, "carbon_weight": 0, "threshold_pct": "0.001"})).is_ok()
        );
    }

    #[test]
    fn priorities_are_kept_once_in_their_order() {
        let row = read(json!({"bypass_priorities": ["urgent", "high", "urgent"]}))
            .unwrap()
            .row(1);
        let names: Vec<&str> = row.bypass_priorities.iter().map(Priority::as_str).collect();
        assert_eq!(names, ["urgent", "high"]);
    }
}
