//! Sites' power policies over the API (operators): `GET /v1/power/policies` lists each
//! site's policy with the factors admission uses now (a measured class resolved against the
//! site's recent headroom), `PUT /v1/power/policies/{site}` replaces one site's policy and
//! has admission reload it at once.

use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{Caller, Query, RawBatch};
use super::validate;
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
use wattledger_domain::input::field::{self, Field};
use wattledger_domain::input::record::{Problem, Problems};
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

wattledger_domain::record! {
    /// A site's power policy as `PUT /v1/power/policies/{site}` writes it; what is left out
    /// keeps its default.
    #[derive(Debug, Deserialize, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct PolicyIn {
        #[serde(default)]
        pub oversubscription: Option<Oversubscription> => None,
        /// The most a measured factor may be: 1 to 4, up to 3 places (default 1.25).
        #[schema(value_type = Option<String>, example = "1.25")]
        #[serde(default)]
        pub measured_cap: Option<Decimal> => None,
        /// The percentile of a class's coincident draw its measured headroom is taken
        /// against: above 0 to 100, up to 3 places (default 99.9).
        #[schema(value_type = Option<String>, example = "99.9")]
        #[serde(default)]
        pub measured_percentile: Option<Decimal> => None,
        /// The site's recent days a measured factor is taken over: 1 to 90 (default 7).
        #[serde(default)]
        pub measured_days: Option<i64> => None,
        /// The per-GPU power limit (W) admission may set on a job that fits only capped: 50
        /// to 5000 (default none).
        #[serde(default)]
        pub power_cap_w: Option<i64> => None,
    }
}

/// Per workload class, its over-subscription: a factor from 1 to 4 (up to 3 places, as text
/// or a number) or `"measured"`. A class left out keeps its default.
#[derive(Debug, Default, Clone, PartialEq, ToSchema)]
pub struct Oversubscription {
    #[schema(value_type = Option<String>, example = "1.5")]
    pub training: Option<Setting>,
    #[schema(value_type = Option<String>, example = "measured")]
    pub inference: Option<Setting>,
    #[schema(value_type = Option<String>)]
    pub batch: Option<Setting>,
    #[schema(value_type = Option<String>)]
    pub interactive: Option<Setting>,
}

impl Oversubscription {
    fn class_mut(&mut self, k: JobKind) -> &mut Option<Setting> {
        match k {
            JobKind::Training => &mut self.training,
            JobKind::Inference => &mut self.inference,
            JobKind::Batch => &mut self.batch,
            JobKind::Interactive => &mut self.interactive,
        }
    }

    fn class(&self, k: JobKind) -> Option<Setting> {
        match k {
            JobKind::Training => self.training,
            JobKind::Inference => self.inference,
            JobKind::Batch => self.batch,
            JobKind::Interactive => self.interactive,
        }
    }
}

/// An object of class: setting, each class's problem named by its class
/// (`oversubscription.gpu`).
impl Field for Oversubscription {
    fn read(v: Option<&Value>) -> Result<Self, Vec<Problem>> {
        let classes = match field::present(v) {
            None => return field::refused("is required"),
            Some(Value::Object(classes)) => classes,
            Some(_) => return field::refused("must be an object of class: factor"),
        };
        let mut out = Oversubscription::default();
        let mut problems = Vec::new();
        for (name, v) in classes {
            match (JobKind::parse(name), setting(v)) {
                (None, _) => problems.push(Problem::new(
                    name.as_str(),
                    format!("unknown class; one of {}", JobKind::NAMES.join(", ")),
                )),
                (Some(_), Err(why)) => problems.push(Problem::new(name.as_str(), why)),
                (Some(k), Ok(s)) => *out.class_mut(k) = Some(s),
            }
        }
        if problems.is_empty() {
            Ok(out)
        } else {
            Err(problems)
        }
    }
}

/// By the same reading as the record's, so that serde and the field-by-field reader agree.
impl<'de> Deserialize<'de> for Oversubscription {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Oversubscription::read(Some(&v)).map_err(|problems| {
            let p = &problems[0];
            serde::de::Error::custom(format!("{}: {}", p.field, p.reason))
        })
    }
}

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

impl PolicyIn {
    /// Everything wrong with the policy (its classes are checked as they are read).
    fn check(&self) -> Vec<Problem> {
        let mut p = Problems::default();
        if let Some(cap) = self.measured_cap {
            p.decimal("measured_cap", cap, 3, Decimal::ONE, 4.into());
        }
        if let Some(pct) = self.measured_percentile {
            p.decimal(
                "measured_percentile",
                pct,
                3,
                Decimal::new(1, 3),
                100.into(),
            );
        }
        if self.measured_days.is_some_and(|n| !(1..=90).contains(&n)) {
            p.add("measured_days", "must be between 1 and 90");
        }
        if self.power_cap_w.is_some_and(|w| !(50..=5000).contains(&w)) {
            p.add("power_cap_w", "must be between 50 and 5000 W");
        }
        p.done()
    }

    /// The policy it sets, the defaults for what it leaves out; once checked.
    fn policy(&self) -> PowerPolicy {
        let d = PowerPolicy::default();
        let classes = self.oversubscription.clone().unwrap_or_default();
        PowerPolicy {
            classes: JobKind::ALL.map(|k| classes.class(k).unwrap_or(d.classes[k as usize])),
            measured_cap: self.measured_cap.map_or(d.measured_cap, |c| c.normalize()),
            measured_percentile: self
                .measured_percentile
                .map_or(d.measured_percentile, |p| p.normalize()),
            measured_days: self
                .measured_days
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(d.measured_days),
            power_cap_w: self.power_cap_w.and_then(|w| u32::try_from(w).ok()),
        }
    }
}

/// Replaces a site's power policy: `oversubscription` per class (`training`, `inference`,
/// `batch`, `interactive`: a factor from 1 to 4, or `measured`; a class left out keeps the
/// default), `measured_cap` (1.25), `measured_percentile` (99.9), `measured_days` (7),
/// `power_cap_w` (none). Admission applies it at once.
#[utoipa::path(put, path = "/v1/power/policies/{site}", tag = "power",
    params(("site" = String, Path, description = "Site key")),
    request_body = PolicyIn,
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
    let policy = validate::checked(&value, |p: &PolicyIn, _| p.check())
        .map_err(ApiError::Validation)?
        .policy();
    store::put(&state.pool, site_id, &policy).await?;
    state.admission.poke();
    tracing::info!(site = %site, "site power policy replaced");
    views(&state, Some(site_id))
        .await?
        .pop()
        .map(Json)
        .ok_or(ApiError::NotFound)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(v: Value) -> Result<PolicyIn, Vec<(String, String)>> {
        validate::checked(&v, |p: &PolicyIn, _| p.check())
            .map_err(|e| e.into_iter().map(|e| (e.field, e.reason)).collect())
    }

    #[test]
    fn each_class_is_named_by_its_place_in_oversubscription() {
        let bad = read(json!({"oversubscription": {"inference": "0.5", "gpu": "1"},
            "power_cap_w": 10}))
        .unwrap_err();
        let want = [
            (
                "oversubscription.gpu",
                "unknown class; one of training, inference, batch, interactive",
            ),
            ("oversubscription.inference", "must be between 1 and 4"),
            ("power_cap_w", "must be between 50 and 5000 W"),
        ];
        assert_eq!(
            bad,
            want.map(|(f, r)| (f.to_owned(), r.to_owned())).to_vec()
        );
        assert_eq!(
            read(json!({"oversubscription": 5, "measured_days": 91})).unwrap_err(),
            [
                (
                    "oversubscription".to_owned(),
                    "must be an object of class: factor".to_owned()
                ),
                (
                    "measured_days".to_owned(),
                    "must be between 1 and 90".to_owned()
                )
            ]
        );
    }

    #[test]
    fn what_a_policy_leaves_out_keeps_its_default() {
        let p = read(
            json!({"oversubscription": {"training": "measured", "batch": 2.5},
            "measured_days": 30, "measured_cap": "1.500"}),
        )
        .unwrap()
        .policy();
        let d = PowerPolicy::default();
        assert_eq!(
            p.classes,
            [
                Setting::Measured,
                d.classes[1],
                Setting::Fixed(Decimal::new(25, 1)),
                d.classes[3]
            ]
        );
        assert_eq!((p.measured_days, p.power_cap_w), (30, None));
        assert_eq!(p.measured_cap.to_string(), "1.5");
        assert_eq!(read(json!({})).unwrap().policy(), d);
    }

    #[test]
    fn serde_reads_a_policy_as_the_record_does() {
        let v = json!({"oversubscription": {"batch": "2.5", "inference": "measured"}});
        let p: PolicyIn = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(p.oversubscription, read(v).unwrap().oversubscription);
        for bad in [
            json!({"oversubscription": {"gpu": 1}}),
            json!({"colour": 1}),
        ] {
            assert!(
                serde_json::from_value::<PolicyIn>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }
}
