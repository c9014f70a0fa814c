//! Demand response over the API. `POST /v1/grid-events` (operator) records a grid event at
//! a site — a window of whole hours and a target cap or a reduction below baseline, with an
//! optional price per kWh shed — after which admission keeps flexible work out of the window;
//! `GET /v1/grid-events` and `GET /v1/grid-events/{key}` (operator, finance) report each
//! event's baseline, the energy metered in its window, the reduction and credit, and the
//! tenants whose deferred jobs contributed (`crate::grid_events`).

use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{Caller, Query, RawBatch};
use super::validate::{self, Findings};
use crate::auth::Role;
use crate::grid_events::{self as report, Report, Status};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, Duration, NaiveDate, Timelike, Utc};
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use wattledger_domain::demand_response::{BaselineMethod, Target};
use wattledger_domain::input;
use wattledger_domain::input::record::{Problem, Problems, Record as _};
use wattledger_domain::units::watts;
use wattledger_store::grid_events::{self as store, NewEvent};
use wattledger_store::inventory::{self, KeyedTable};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/grid-events", get(list_events).post(record_event))
        .route("/v1/grid-events/{key}", get(show_event))
}

const READERS: [Role; 2] = [Role::Operator, Role::Finance];

#[derive(Debug, Serialize, ToSchema)]
pub struct HourOut {
    pub hour: DateTime<Utc>,
    #[schema(value_type = Option<String>)]
    pub baseline_kwh: Option<Decimal>,
    /// Metered site energy; null until the hour is attributed.
    #[schema(value_type = Option<String>)]
    pub actual_kwh: Option<Decimal>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ContributionOut {
    pub tenant: String,
    /// Its flexible jobs admission moved out of the window.
    pub jobs: i64,
    /// What they would have drawn in the window had they started when they asked.
    #[schema(value_type = String)]
    pub moved_kwh: Decimal,
    /// Its share of the credited reduction (by energy moved, never more than it moved).
    #[schema(value_type = String)]
    pub credited_kwh: Decimal,
    #[schema(value_type = Option<String>)]
    pub credit: Option<Decimal>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct GridEventView {
    pub key: String,
    pub site: String,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    #[schema(value_type = Option<String>)]
    pub target_cap_kw: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub reduction_kw: Option<Decimal>,
    /// Per kWh shed, in `currency`.
    #[schema(value_type = Option<String>)]
    pub price_per_kwh: Option<Decimal>,
    pub currency: String,
    pub baseline_method: BaselineMethod,
    /// The method in words.
    pub baseline_description: String,
    /// `upcoming`, `open` (the window runs or is not all attributed), `provisional` (some
    /// hour waits to be attributed again) or `final`.
    pub status: Status,
    /// The days the baseline averaged; empty when there were too few.
    pub baseline_days: Vec<NaiveDate>,
    /// Why there is no baseline, when there is none.
    pub baseline_error: Option<String>,
    #[schema(value_type = Option<String>)]
    pub baseline_kwh: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub actual_kwh: Option<Decimal>,
    /// Baseline − actual (negative: the site drew more than its baseline).
    #[schema(value_type = Option<String>)]
    pub reduction_kwh: Option<Decimal>,
    /// What the event asked to shed.
    #[schema(value_type = Option<String>)]
    pub requested_kwh: Option<Decimal>,
    pub met: Option<bool>,
    #[schema(value_type = Option<String>)]
    pub credited_kwh: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub credit: Option<Decimal>,
    /// The window's highest minute of site power, W.
    #[schema(value_type = Option<String>)]
    pub peak_w: Option<Decimal>,
    pub hours: Vec<HourOut>,
    pub contributions: Vec<ContributionOut>,
}

/// kWh of mJ, without trailing zeros.
fn kwh(mj: i64) -> Decimal {
    wattledger_domain::units::kwh(mj).normalize()
}

pub(crate) fn view(r: &Report) -> GridEventView {
    let e = &r.event;
    let o = r.outcome.as_ref();
    GridEventView {
        key: e.key.clone(),
        site: e.site.clone(),
        starts_at: e.starts_at,
        ends_at: e.ends_at,
        target_cap_kw: e.target_cap_w.map(|w| Decimal::new(w, 3).normalize()),
        reduction_kw: e.reduction_w.map(|w| Decimal::new(w, 3).normalize()),
        price_per_kwh: e.price_per_kwh.map(|p| p.normalize()),
        currency: e.currency.clone(),
        baseline_method: r.method,
        baseline_description: r.method.describe(),
        status: r.status,
        baseline_days: r.baseline_days().to_vec(),
        baseline_error: r.baseline.as_ref().err().map(|e| e.to_string()),
        baseline_kwh: r.baseline.as_ref().ok().map(|b| kwh(b.total_mj)),
        actual_kwh: o.map(|o| kwh(o.actual_mj)),
        reduction_kwh: o.map(|o| kwh(o.reduction_mj)),
        requested_kwh: o.map(|o| kwh(o.requested_mj)),
        met: o.map(|o| o.met),
        credited_kwh: o.map(|o| kwh(o.credited_mj)),
        credit: o.and_then(|o| o.credit).map(|c| c.normalize()),
        peak_w: r.peak_mw.map(watts),
        hours: r
            .hours
            .iter()
            .map(|h| HourOut {
                hour: h.hour,
                baseline_kwh: h.baseline_mj.map(kwh),
                actual_kwh: h.actual_mj.map(kwh),
            })
            .collect(),
        contributions: r
            .contributions
            .iter()
            .map(|(c, jobs)| ContributionOut {
                tenant: c.tenant.clone(),
                jobs: *jobs,
                moved_kwh: kwh(c.moved_mj),
                credited_kwh: kwh(c.credited_mj),
                credit: c.credit.map(|c| c.normalize()),
            })
            .collect(),
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Site key; default every site.
    pub site: Option<String>,
    /// Events whose window ends after this (RFC 3339); default 30 days before `to`.
    #[serde(default, deserialize_with = "input::de::opt_time")]
    pub from: Option<DateTime<Utc>>,
    /// Events whose window starts before this; default now + 7 days.
    #[serde(default, deserialize_with = "input::de::opt_time")]
    pub to: Option<DateTime<Utc>>,
}

/// The grid events overlapping a range, each with its report.
#[utoipa::path(get, path = "/v1/grid-events", tag = "power", params(ListParams),
    responses((status = 200, body = Vec<GridEventView>), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn list_events(
    State(state): State<AppState>,
    caller: Caller,
    Query(p): Query<ListParams>,
) -> ApiResult<Json<Vec<GridEventView>>> {
    caller.require(&READERS)?;
    let now = Utc::now();
    let to = p.to.unwrap_or(now + Duration::days(7));
    let (from, to) = super::extract::span_of(p.from, Some(to), Duration::days(30))?;
    let site_id = super::extract::site_filter(&state.pool, p.site.as_ref()).await?;
    let mut out = Vec::new();
    for e in store::overlapping(&state.pool, site_id, from, to).await? {
        out.push(view(&report::report(&state.pool, e, now).await?));
    }
    Ok(Json(out))
}

/// One grid event's report.
#[utoipa::path(get, path = "/v1/grid-events/{key}", tag = "power",
    params(("key" = String, Path, description = "Event key")),
    responses((status = 200, body = GridEventView), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn show_event(
    State(state): State<AppState>,
    caller: Caller,
    Path(key): Path<String>,
) -> ApiResult<Json<GridEventView>> {
    caller.require(&READERS)?;
    let e = store::get(&state.pool, &key)
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(Json(view(
        &report::report(&state.pool, e, Utc::now()).await?,
    )))
}

wattledger_domain::record! {
    /// A grid event as `POST /v1/grid-events` records it.
    #[derive(Debug, Deserialize, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct GridEventIn {
        /// The grid operator's event id.
        pub key: String => String::new(),
        /// The site's key.
        pub site: String => String::new(),
        /// On the hour, at most a year ahead.
        pub starts_at: DateTime<Utc> => DateTime::<Utc>::UNIX_EPOCH,
        /// On the hour, after `starts_at` by at most 24 hours.
        pub ends_at: DateTime<Utc> => DateTime::<Utc>::UNIX_EPOCH,
        /// The site's draw to stay under, kW (up to 3 places); this or `reduction_kw`.
        #[serde(default)]
        #[schema(value_type = Option<String>, example = "800")]
        pub target_cap_kw: Option<Decimal> => None,
        /// The draw to shed below the baseline, kW (up to 3 places).
        #[serde(default)]
        #[schema(value_type = Option<String>)]
        pub reduction_kw: Option<Decimal> => None,
        /// Per kWh shed, in the site's currency (up to 6 places).
        #[serde(default)]
        #[schema(value_type = Option<String>)]
        pub price_per_kwh: Option<Decimal> => None,
        /// `weekdays-N` or `days-N`, N from 1 to 30; `weekdays-10` by default.
        #[serde(default)]
        pub baseline_method: Option<BaselineMethod> => None,
    }
}

fn watts_of(kw: Option<Decimal>) -> Option<i64> {
    kw.and_then(|kw| (kw * Decimal::ONE_THOUSAND).to_i64())
}

impl GridEventIn {
    /// Everything wrong with the event on its own, `now` bounding how far ahead it may be.
    /// `refused` names the fields the reading refused already, about which the rules between
    /// fields would only guess.
    fn check(&self, refused: impl Fn(&str) -> bool, now: DateTime<Utc>) -> Vec<Problem> {
        let mut p = Problems::default();
        p.key("key", &self.key);
        p.key("site", &self.site);
        let latest = now + Duration::days(366);
        let time = |p: &mut Problems, field: &str, t: DateTime<Utc>, latest| {
            (!refused(field) && p.time(field, t, latest)).then_some(t)
        };
        let starts_at = time(&mut p, "starts_at", self.starts_at, latest);
        let ends_at = time(&mut p, "ends_at", self.ends_at, latest + Duration::days(1));
        for (field, t) in [("starts_at", starts_at), ("ends_at", ends_at)] {
            if t.is_some_and(|t| t.minute() != 0 || t.second() != 0 || t.nanosecond() != 0) {
                p.add(
                    field,
                    "must be on the hour (events are metered by the hour)",
                );
            }
        }
        if let (Some(s), Some(e)) = (starts_at, ends_at) {
            if e <= s || e - s > Duration::hours(24) {
                p.add("ends_at", "must be after starts_at, by at most 24 hours");
            }
        }
        let mut refused_kw = false;
        let mut kw = |p: &mut Problems, field: &str, v: Option<Decimal>| {
            refused_kw |= refused(field);
            v.filter(|&kw| {
                // Whole watts: at most 3 places of kW, up to 10 GW.
                let ok = p.decimal(field, kw, 3, Decimal::new(1, 3), 10_000_000.into());
                refused_kw |= !ok;
                ok
            })
        };
        let cap = kw(&mut p, "target_cap_kw", self.target_cap_kw);
        let reduction = kw(&mut p, "reduction_kw", self.reduction_kw);
        if cap.is_some() == reduction.is_some() && !refused_kw {
            p.add(
                "target_cap_kw",
                "exactly one of target_cap_kw and reduction_kw is required",
            );
        }
        if let Some(price) = self.price_per_kwh {
            p.decimal("price_per_kwh", price, 6, Decimal::ZERO, 1_000_000.into());
        }
        p.done()
    }

    /// The event to store, once checked and its site found.
    fn event(self, site_id: i64, created_by: String) -> NewEvent {
        NewEvent {
            key: self.key,
            site_id,
            starts_at: self.starts_at,
            ends_at: self.ends_at,
            target_cap_w: watts_of(self.target_cap_kw),
            reduction_w: watts_of(self.reduction_kw),
            price_per_kwh: self.price_per_kwh.map(|p| p.normalize()),
            baseline_method: self.baseline_method.unwrap_or_default(),
            created_by,
        }
    }
}

/// The id of the event's site; an unknown one is the field's error. A site refused already
/// (its reading, its key's rule) is not looked up.
async fn site_id(state: &AppState, e: &GridEventIn, f: &mut Findings) -> ApiResult<Option<i64>> {
    if f.refused("site") {
        return Ok(None);
    }
    let ids = inventory::ids_by_key(
        &state.pool,
        KeyedTable::Sites,
        std::slice::from_ref(&e.site),
    )
    .await?;
    let id = ids.get(&e.site).copied();
    if id.is_none() {
        f.error("site", format!("unknown site '{}'", e.site));
    }
    Ok(id)
}

/// Records a grid event (operator): `key` (the grid operator's event id), `site`,
/// `starts_at` and `ends_at` (on the hour, at most 24 h apart), one of `target_cap_kw` and
/// `reduction_kw`, optionally `price_per_kwh` (the site's currency) and `baseline_method`
/// (`weekdays-10` by default, or `weekdays-N`, `days-N`). Posting the same event again
/// answers 200; the same key with other values, 409. Admission keeps flexible work out of
/// the window at once.
#[utoipa::path(post, path = "/v1/grid-events", tag = "power",
    request_body = GridEventIn,
    security(("bearer" = [])),
    responses((status = 201, body = GridEventView), (status = 200, body = GridEventView),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 409, body = ErrorBody),
              (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
              (status = 422, body = ErrorBody)))]
pub async fn record_event(
    State(state): State<AppState>,
    caller: Caller,
    RawBatch(body): RawBatch,
) -> ApiResult<(StatusCode, Json<GridEventView>)> {
    caller.require(&[Role::Operator])?;
    let value: Value = super::json::parse(&body)?;
    let (event, mut f) = validate::read::<GridEventIn>(0, &value);
    let mut new = None;
    if let Some(e) = event {
        let problems = e.check(|field| f.refused(field), Utc::now());
        f.problems(problems);
        let site_id = site_id(&state, &e, &mut f).await?;
        new = site_id.map(|id| e.event(id, caller.subject.clone()));
    }
    let new = f
        .finish(new, GridEventIn::FIELDS)
        .map_err(ApiError::Validation)?;
    let (stored, created) = store::insert(&state.pool, &new).await?;
    if !created && !new.same_as(&stored) {
        return Err(ApiError::Conflict {
            code: "grid_event_exists",
            message: format!(
                "grid event '{}' exists with other values; an event is not changed once recorded",
                stored.key
            ),
        });
    }
    if created {
        state.admission.poke();
        let target = match report::target(&stored) {
            Target::CapW(w) => format!("cap {w} W"),
            Target::ReductionW(w) => format!("reduction {w} W"),
        };
        tracing::info!(event = %stored.key, site = %stored.site, %target, "grid event recorded");
    }
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let r = report::report(&state.pool, stored, Utc::now()).await?;
    Ok((status, Json(view(&r))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What the reading and the check find wrong with `v` (the site's lookup aside), by
    /// field; the event when nothing is.
    fn read(v: Value) -> Result<GridEventIn, Vec<String>> {
        let now = "2026-11-18T12:00:00Z".parse().unwrap();
        validate::checked(&v, |e: &GridEventIn, refused| e.check(refused, now))
            .map_err(|e| e.into_iter().map(|e| e.field).collect())
    }

    #[test]
    fn every_rule_names_its_field_in_field_order() {
        assert_eq!(
            read(
                json!({"key": "x", "site": "s", "starts_at": "2026-11-18T14:30:00Z",
                "ends_at": "2026-11-20T14:00:00Z", "baseline_method": "weekdays-99"})
            )
            .unwrap_err(),
            ["starts_at", "ends_at", "target_cap_kw", "baseline_method"]
        );
    }

    #[test]
    fn a_refused_field_is_not_also_blamed_by_the_rules_between_fields() {
        assert_eq!(
            read(json!({"key": "x", "site": "s", "starts_at": 5,
                "ends_at": "2026-11-18T10:00:00Z", "reduction_kw": "1"}))
            .unwrap_err(),
            ["starts_at"]
        );
        assert_eq!(
            read(
                json!({"key": "x", "site": "s", "starts_at": "2026-11-18T14:00:00Z",
                "ends_at": "2026-11-18T16:00:00Z", "target_cap_kw": "0.0001"})
            )
            .unwrap_err(),
            ["target_cap_kw"]
        );
    }

    #[test]
    fn an_event_is_stored_in_watts_with_its_method() {
        let e = read(
            json!({"key": "x", "site": "s", "starts_at": "2026-11-18T14:00:00Z",
            "ends_at": "2026-11-18T16:00:00Z", "target_cap_kw": "800.5", "price_per_kwh": "0.250"}),
        )
        .unwrap()
        .event(7, "op".into());
        assert_eq!((e.target_cap_w, e.reduction_w), (Some(800_500), None));
        assert_eq!(e.price_per_kwh.map(|p| p.to_string()), Some("0.25".into()));
        assert_eq!(e.baseline_method, BaselineMethod::default());
    }
}
