//! The admission API: `POST /v1/admission` (a scheduler asks before starting a job),
//! `GET /v1/admission/decisions` (what was decided and, once the job ran, what it used), and
//! `POST /v1/admission/kubernetes` (an admission webhook speaking AdmissionReview v1).

use super::error::{ApiError, ApiResult, ErrorBody, FieldError};
use super::extract::{Caller, Query, RawBatch, RawJson, WebhookCaller};
use super::validate;
use crate::admission::idempotency::{self, Once, OnceError};
use crate::admission::{Answer, Ask, AskError};
use crate::auth::Role;
use crate::state::AppState;
use axum::extract::State;
use axum::http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;
use wattledger_domain::admission::Verdict;
use wattledger_domain::input;
use wattledger_domain::input::record::Record as _;
use wattledger_domain::job_kind::JobKind;
use wattledger_domain::priority::Priority;
use wattledger_store::admission::{self as store, DecisionFilter};
use wattledger_wire::parse_duration;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/admission", post(ask))
        .route("/v1/admission/decisions", get(decisions))
        .route("/v1/admission/kubernetes", post(kubernetes))
}

fn to_api(e: AskError) -> ApiError {
    match e {
        AskError::Fields(f) => ApiError::Validation(
            f.into_iter()
                .map(|(field, reason)| FieldError::new(0, field, reason))
                .collect(),
        ),
        AskError::NotReady => ApiError::Unavailable("admission is still loading its state".into()),
        AskError::Backlog => ApiError::Unavailable(
            "decisions are not being stored as fast as they are asked; retry shortly".into(),
        ),
    }
}

/// Parses the question; a body that does not fit the schema is a 422 naming each field, and
/// what the question's rules find wrong with the fields that did read.
fn parse_ask(bytes: &[u8]) -> ApiResult<Ask> {
    if let Ok(ask) = serde_json::from_slice::<Ask>(bytes) {
        return Ok(ask);
    }
    // Duplicate keys and NULs are named by the strict parse.
    let value = super::json::parse(bytes)?;
    if !value.is_object() {
        return Err(ApiError::BadRequest(
            "the body must be a JSON object".into(),
        ));
    }
    let (ask, mut f) = validate::read::<Ask>(0, &value);
    if let Some(ask) = &ask {
        for (field, reason) in crate::admission::validate(ask, Utc::now()) {
            f.error(field, reason);
        }
    }
    f.finish(ask, Ask::FIELDS).map_err(ApiError::Validation)
}

fn once_to_api(e: OnceError) -> ApiError {
    match e {
        OnceError::Ask(e) => to_api(e),
        OnceError::Reused => ApiError::Validation(vec![FieldError::new(
            0,
            IDEMPOTENCY_KEY,
            "was used for another question of this tenant",
        )]),
        e @ OnceError::InFlight => ApiError::Conflict {
            code: "idempotency_key_in_flight",
            message: e.to_string(),
        },
        OnceError::Store(e) => ApiError::Store(e),
    }
}

const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

/// The question's `Idempotency-Key`, if it has one: one header of 1 to 255 visible ASCII
/// characters.
fn idempotency_key(headers: &HeaderMap) -> ApiResult<Option<String>> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let refused =
        |reason: String| ApiError::Validation(vec![FieldError::new(0, IDEMPOTENCY_KEY, reason)]);
    if values.next().is_some() {
        return Err(refused("must be sent once".into()));
    }
    let key = value
        .to_str()
        .map_err(|_| refused("must be visible ASCII characters".into()))?;
    idempotency::check_key(key).map_err(refused)?;
    Ok(Some(key.to_owned()))
}

/// Ask whether a job may start: admit, defer to `start_at`, or reject, with the reasons
/// and the estimated energy, cost and carbon now and at `start_at`.
///
/// With an `Idempotency-Key`, a question asked again under the same key (by the same tenant)
/// gets the decision taken the first time, marked `Idempotent-Replayed: true`, and reserves
/// nothing again; the same key with another question is a 422, and while the first is being
/// decided a 409.
#[utoipa::path(post, path = "/v1/admission", tag = "admission", request_body = Ask,
    params(("Idempotency-Key" = Option<String>, Header,
            description = "1 to 255 visible ASCII characters, unique per question of a tenant")),
    security(("bearer" = [])),
    responses((status = 200, body = Answer), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 409, body = ErrorBody),
              (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
              (status = 422, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn ask(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    RawBatch(body): RawBatch,
) -> ApiResult<Response> {
    caller.require(&[Role::Scheduler])?;
    let key = idempotency_key(&headers)?;
    let ask = parse_ask(&body)?;
    let started = std::time::Instant::now();
    let source = ask.source.as_deref().unwrap_or("api");
    let once = state
        .admission
        .ask_once(&state.pool, &ask, source, Utc::now(), false, key.as_deref())
        .await
        .map_err(once_to_api)?;
    let json = HeaderValue::from_static("application/json");
    Ok(match once {
        Once::Decided(answered) => {
            state
                .telemetry
                .decided(answered.answer.decision, started.elapsed());
            // The JSON the decision is stored with, not a second serialisation of the answer.
            ([(CONTENT_TYPE, json)], answered.json).into_response()
        }
        Once::Replayed(answer) => (
            [
                (CONTENT_TYPE, json),
                (
                    HeaderName::from_static("idempotent-replayed"),
                    HeaderValue::from_static("true"),
                ),
            ],
            answer,
        )
            .into_response(),
    })
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DecisionParams {
    pub decision: Option<Verdict>,
    /// Tenant key (admin, finance, operator, scheduler only; a tenant sees its own).
    pub tenant: Option<String>,
    #[serde(default, deserialize_with = "input::de::opt_time")]
    pub from: Option<DateTime<Utc>>,
    #[serde(default, deserialize_with = "input::de::opt_time")]
    pub to: Option<DateTime<Utc>>,
    /// The `next` cursor of the previous page.
    pub before: Option<String>,
    /// At most 500; default 100.
    pub limit: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DecisionPage {
    pub decisions: Vec<store::DecisionRow>,
    /// Pass as `before` for the next (older) page; absent on the last page.
    pub next: Option<String>,
}

/// Stored decisions, newest first; a tenant sees its own.
#[utoipa::path(get, path = "/v1/admission/decisions", tag = "admission", params(DecisionParams),
    security(("bearer" = [])),
    responses((status = 200, body = DecisionPage), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 422, body = ErrorBody)))]
pub async fn decisions(
    State(state): State<AppState>,
    caller: Caller,
    Query(p): Query<DecisionParams>,
) -> ApiResult<Json<DecisionPage>> {
    caller.require(&[Role::Scheduler, Role::Operator, Role::Finance, Role::Tenant])?;
    let mut scope = caller.scope;
    if let Some(key) = &p.tenant {
        // An unknown tenant and another tenant's key look the same: not found.
        let id = state.tenant_id(key).await?.ok_or(ApiError::NotFound)?;
        scope = scope.narrow(id).ok_or(ApiError::NotFound)?;
    }
    let limit = p.limit.unwrap_or(100);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::InvalidQuery(
            "limit must be between 1 and 500".into(),
        ));
    }
    let before =
        match &p.before {
            None => None,
            Some(c) => Some(parse_cursor(c).ok_or_else(|| {
                ApiError::InvalidQuery("before: not a cursor from this API".into())
            })?),
        };
    let filter = DecisionFilter {
        decision: p.decision,
        from: p.from,
        to: p.to,
        before,
        limit,
    };
    let mut rows = store::list_decisions(&state.pool, scope, &filter).await?;
    let next = (rows.len() as i64 == limit)
        .then(|| {
            rows.last()
                .map(|r| format!("{}~{}", r.decided_at.to_rfc3339(), r.id))
        })
        .flatten();
    for r in &mut rows {
        r.actual_kwh = r.actual_kwh.map(|v| v.round_dp(6));
        r.actual_carbon_kg = r.actual_carbon_kg.map(|v| v.round_dp(6));
    }
    Ok(Json(DecisionPage {
        decisions: rows,
        next,
    }))
}

fn parse_cursor(c: &str) -> Option<(DateTime<Utc>, Uuid)> {
    let (t, id) = c.split_once('~')?;
    Some((
        DateTime::parse_from_rfc3339(t).ok()?.with_timezone(&Utc),
        id.parse().ok()?,
    ))
}

/// Annotations a pod may carry for the webhook.
pub use wattledger_wire::annotations;

/// Most GPUs one pod may ask for (as a question to `POST /v1/admission` may).
const MAX_POD_GPUS: i64 = 100_000;

/// One container's GPU limit: a whole number from 0 to [`MAX_POD_GPUS`] (Kubernetes writes
/// quantities as numbers or strings; the pod's author writes them, so nothing is assumed).
fn gpu_limit(name: &str, v: &Value) -> Result<i64, String> {
    let n = v
        .as_i64()
        .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
        .ok_or_else(|| format!("{name}: not a whole number"))?;
    if !(0..=MAX_POD_GPUS).contains(&n) {
        return Err(format!("{name}: {n} is not between 0 and {MAX_POD_GPUS}"));
    }
    Ok(n)
}

/// The extended resources that are GPUs: NVIDIA's whole GPUs and MIG slices, AMD's GPUs (the
/// resources the webhook's `matchConditions` send, deploy/kubernetes/components/webhook).
fn is_gpu_resource(name: &str) -> bool {
    name == "nvidia.com/gpu" || name.starts_with("nvidia.com/mig-") || name == "amd.com/gpu"
}

/// A pod's question, from its spec and annotations; `None` for a pod without GPUs.
fn pod_ask(req: &Value) -> Result<Option<Ask>, String> {
    let pod = &req["object"];
    let meta = &pod["metadata"];
    let ann = |k: &str| {
        meta["annotations"][k]
            .as_str()
            .or_else(|| meta["labels"][k].as_str())
            .map(str::to_owned)
    };
    let mut gpus: i64 = 0;
    for group in ["initContainers", "containers"] {
        let Some(cs) = pod["spec"][group].as_array() else {
            continue;
        };
        let mut in_group: i64 = 0;
        for c in cs {
            let resources = &c["resources"];
            // A container's count of a GPU resource is its limit, else its request (the API
            // server makes them equal for extended resources; the webhook sees either).
            let mut names: Vec<&String> = ["limits", "requests"]
                .iter()
                .filter_map(|k| resources[*k].as_object())
                .flat_map(|m| m.keys())
                .filter(|name| is_gpu_resource(name))
                .collect();
            names.sort();
            names.dedup();
            for name in names {
                let v = resources["limits"]
                    .get(name.as_str())
                    .unwrap_or(&resources["requests"][name.as_str()]);
                {
                    let n = gpu_limit(name, v)?;
                    in_group = if group == "initContainers" {
                        in_group.max(n)
                    } else {
                        in_group
                            .checked_add(n)
                            .filter(|t| *t <= MAX_POD_GPUS)
                            .ok_or_else(|| {
                                format!("the pod's GPU limits add up to more than {MAX_POD_GPUS}")
                            })?
                    };
                }
            }
        }
        gpus = gpus.max(in_group);
    }
    if gpus == 0 {
        return Ok(None);
    }
    let namespace = req["namespace"]
        .as_str()
        .or_else(|| meta["namespace"].as_str())
        .unwrap_or("default");
    let name = req["name"]
        .as_str()
        .filter(|s| !s.is_empty())
        .or_else(|| meta["name"].as_str().filter(|s| !s.is_empty()));
    let duration_s = match ann(annotations::DURATION) {
        Some(d) => parse_duration(&d).ok_or_else(|| {
            format!(
                "{}: '{d}' is not a duration (e.g. 90m, 2h, 3600)",
                annotations::DURATION
            )
        })?,
        None => pod["spec"]["activeDeadlineSeconds"]
            .as_i64()
            .unwrap_or(3600),
    };
    let deadline = match ann(annotations::DEADLINE) {
        Some(d) => {
            Some(input::parse_time(&d).map_err(|e| format!("{}: {e}", annotations::DEADLINE))?)
        }
        None => None,
    };
    let kind = match ann(annotations::KIND) {
        None => JobKind::Batch,
        Some(k) => JobKind::parse(&k).ok_or_else(|| {
            format!(
                "{}: must be one of {}",
                annotations::KIND,
                JobKind::NAMES.join(", ")
            )
        })?,
    };
    Ok(Some(Ask {
        tenant: ann(annotations::TENANT).unwrap_or_else(|| namespace.to_owned()),
        job_name: name
            .map(str::to_owned)
            .or_else(|| meta["generateName"].as_str().map(str::to_owned))
            .unwrap_or_default(),
        job_key: name.map(|n| format!("k8s:{namespace}/{n}")),
        gpus,
        gpu_model: ann(annotations::GPU_MODEL),
        model: ann(annotations::MODEL),
        kind,
        duration_s,
        power_per_gpu_w: None,
        earliest_start: None,
        deadline,
        priority: match pod["spec"]["priorityClassName"].as_str() {
            Some(name) => {
                Priority::parse(name).map_err(|e| format!("the pod's priorityClassName {e}"))?
            }
            None => Priority::normal(),
        },
        sites: ann(annotations::SITES)
            .map(|s| {
                s.split(',')
                    .map(|x| x.trim().to_owned())
                    .filter(|x| !x.is_empty())
                    .collect()
            })
            .unwrap_or_default(),
        dry_run: false,
        source: Some("kubernetes".into()),
    }))
}

/// An admission webhook (AdmissionReview v1): pods requesting GPUs (`nvidia.com/gpu`, MIG
/// slices, `amd.com/gpu`) are
/// put to `POST /v1/admission`; reject and defer deny the pod with the reasons (a deferral
/// names the time to create it again), admit allows it with any warnings, and admit at a
/// power cap adds the `wattledger.io/power-cap-w` annotation (a JSONPatch).
#[utoipa::path(post, path = "/v1/admission/kubernetes", tag = "admission",
    security(("bearer" = [])),
    request_body(content = Object, description = "AdmissionReview v1"),
    responses((status = 200, description = "AdmissionReview v1 with the response"),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 413, body = ErrorBody),
              (status = 415, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn kubernetes(
    State(state): State<AppState>,
    _caller: WebhookCaller,
    RawJson(body): RawJson,
) -> ApiResult<Json<Value>> {
    let review: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("not an AdmissionReview: {e}")))?;
    let req = &review["request"];
    let uid = req["uid"].as_str().ok_or_else(|| {
        ApiError::BadRequest("not an AdmissionReview: request.uid is missing".into())
    })?;
    let api_version = review["apiVersion"]
        .as_str()
        .unwrap_or("admission.k8s.io/v1");
    let reply = |response: Value| {
        Json(json!({"apiVersion": api_version, "kind": "AdmissionReview", "response": response}))
    };
    let is_pod_create = req["kind"]["kind"].as_str() == Some("Pod")
        && req["operation"].as_str().unwrap_or("CREATE") == "CREATE";
    if !is_pod_create {
        return Ok(reply(json!({"uid": uid, "allowed": true})));
    }
    let ask = match pod_ask(req) {
        Ok(None) => return Ok(reply(json!({"uid": uid, "allowed": true}))),
        Ok(Some(a)) => a,
        Err(why) => {
            return Ok(reply(json!({"uid": uid, "allowed": false,
                "status": {"code": 400, "message": format!("wattledger: {why}")}})))
        }
    };
    // A dry run must not reserve anything: answer from a decision that is not kept.
    let dry_run = req["dryRun"].as_bool().unwrap_or(false);
    let started = std::time::Instant::now();
    // The review's uid as the idempotency key: an API server that sends the same review
    // again (its retry of a call whose answer it lost) gets the decision already taken.
    let key = Some(uid).filter(|u| idempotency::check_key(u).is_ok());
    let asked = match state
        .admission
        .ask_once(&state.pool, &ask, "kubernetes", Utc::now(), dry_run, key)
        .await
    {
        // Another pod under a uid already answered is another review (an API server sends
        // none such): it is decided as a review without a uid would be.
        Err(OnceError::Reused) => {
            state
                .admission
                .ask_once(&state.pool, &ask, "kubernetes", Utc::now(), dry_run, None)
                .await
        }
        asked => asked,
    };
    let answer = match asked {
        Ok(Once::Decided(a)) => {
            state
                .telemetry
                .decided(a.answer.decision, started.elapsed());
            Decided::from(&a.answer)
        }
        // A replay is the stored answer's JSON: read back what the reply needs of it.
        Ok(Once::Replayed(json)) => serde_json::from_str(&json).map_err(|e| {
            ApiError::Unavailable(format!("a stored answer could not be read: {e}"))
        })?,
        Err(OnceError::Ask(AskError::Fields(f))) => {
            let why: Vec<String> = f.into_iter().map(|(k, r)| format!("{k} {r}")).collect();
            return Ok(reply(json!({"uid": uid, "allowed": false,
                "status": {"code": 422, "message": format!("wattledger: {}", why.join("; "))}})));
        }
        Err(e) => return Err(once_to_api(e)),
    };
    let reasons = answer.reasons.join("; ");
    let response = match answer.decision {
        Verdict::Admit => {
            let warnings: Vec<String> = answer
                .reasons
                .iter()
                .filter(|r| r.contains("soft cap") || r.contains("cannot be estimated"))
                .map(|r| r.chars().take(120).collect())
                .collect();
            let mut response = json!({"uid": uid, "allowed": true, "warnings": warnings,
                   "auditAnnotations": {"wattledger.io/decision": answer.decision_id.to_string()}});
            if let Some(cap) = answer.power_cap_w {
                response["auditAnnotations"][annotations::POWER_CAP] = json!(cap.to_string());
                response["patchType"] = json!("JSONPatch");
                response["patch"] = json!(power_cap_patch(&req["object"], cap));
            }
            response
        }
        Verdict::Defer => json!({"uid": uid, "allowed": false,
            "status": {"code": 429, "reason": "TooManyRequests", "message": format!(
                "wattledger: deferred; create this pod again at or after {} (decision {}): {reasons}",
                answer.start_at.map(|t| t.to_rfc3339()).unwrap_or_default(), answer.decision_id)},
            "auditAnnotations": {"wattledger.io/decision": answer.decision_id.to_string()}}),
        Verdict::Reject => json!({"uid": uid, "allowed": false,
            "status": {"code": 403, "reason": "Forbidden", "message": format!(
                "wattledger: rejected (decision {}): {reasons}", answer.decision_id)},
            "auditAnnotations": {"wattledger.io/decision": answer.decision_id.to_string()}}),
    };
    Ok(reply(response))
}

/// What the webhook's reply needs of an answer: decided now, or read from a stored answer's
/// JSON.
#[derive(Debug, Deserialize)]
struct Decided {
    decision_id: Uuid,
    decision: Verdict,
    start_at: Option<DateTime<Utc>>,
    reasons: Vec<String>,
    power_cap_w: Option<u32>,
}

impl From<&Answer> for Decided {
    fn from(a: &Answer) -> Self {
        Decided {
            decision_id: a.decision_id,
            decision: a.decision,
            start_at: a.start_at,
            reasons: a.reasons.clone(),
            power_cap_w: a.power_cap_w,
        }
    }
}

/// The JSONPatch (base64, as AdmissionReview carries it) that sets the power-cap
/// annotation on the pod, creating its annotations where it has none.
fn power_cap_patch(pod: &Value, cap: u32) -> String {
    use base64::Engine;
    let key = annotations::POWER_CAP.replace('~', "~0").replace('/', "~1");
    let mut ops = Vec::new();
    if !pod["metadata"]["annotations"].is_object() {
        ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": {}}));
    }
    ops.push(
        json!({"op": "add", "path": format!("/metadata/annotations/{key}"),
                    "value": cap.to_string()}),
    );
    base64::engine::general_purpose::STANDARD.encode(Value::Array(ops).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_power_cap_patch_adds_the_annotation_and_its_map_where_missing() {
        use base64::Engine;
        let decode = |p: String| -> Value {
            let bytes = base64::engine::general_purpose::STANDARD.decode(p).unwrap();
            serde_json::from_slice(&bytes).unwrap()
        };
        let bare = decode(power_cap_patch(&json!({"metadata": {"name": "p"}}), 300));
        assert_eq!(
            bare,
            json!([{"op": "add", "path": "/metadata/annotations", "value": {}},
                   {"op": "add", "path": "/metadata/annotations/wattledger.io~1power-cap-w",
                    "value": "300"}])
        );
        let annotated = decode(power_cap_patch(
            &json!({"metadata": {"annotations": {"a": "b"}}}),
            300,
        ));
        assert_eq!(annotated.as_array().unwrap().len(), 1);
    }

    #[test]
    fn hostile_gpu_limits_are_refused() {
        let pod = |limits: Vec<Value>| {
            let containers: Vec<Value> = limits
                .into_iter()
                .map(|l| json!({"resources": {"limits": {"nvidia.com/gpu": l}}}))
                .collect();
            json!({"namespace": "x", "name": "p", "object": {"spec": {"containers": containers}}})
        };
        let refused = |limits: Vec<Value>| pod_ask(&pod(limits)).unwrap_err();
        assert!(refused(vec![json!(-4)]).contains("-4 is not between 0"));
        assert!(refused(vec![json!(8), json!(-8)]).contains("-8"));
        assert!(refused(vec![json!(i64::MAX), json!(i64::MAX)]).contains("not between"));
        assert!(refused(vec![json!(100_000), json!(1)]).contains("add up to more than"));
        assert!(refused(vec![json!("2.5")]).contains("not a whole number"));
        assert_eq!(
            pod_ask(&pod(vec![json!("2"), json!(2)]))
                .unwrap()
                .unwrap()
                .gpus,
            4
        );
        assert!(pod_ask(&pod(vec![json!(0)])).unwrap().is_none());
    }

    #[test]
    fn gpus_from_limits_sum_over_containers_and_take_the_max_init_container() {
        let req = json!({"namespace": "serving", "name": "llama-0", "object": {
            "metadata": {"annotations": {"wattledger.io/tenant": "acme", "wattledger.io/duration": "2h"}},
            "spec": {"priorityClassName": "prod",
                "initContainers": [{"resources": {"limits": {"nvidia.com/gpu": 4}}}],
                "containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}},
                               {"resources": {"limits": {"nvidia.com/mig-1g.10gb": 1, "cpu": "2"}}}]}}});
        let a = pod_ask(&req).unwrap().unwrap();
        assert_eq!(a.gpus, 4);
        assert_eq!(a.tenant, "acme");
        assert_eq!(a.duration_s, 7200);
        assert_eq!(a.job_key.as_deref(), Some("k8s:serving/llama-0"));
        assert_eq!(a.priority.as_str(), "prod");
        let no_gpu =
            json!({"namespace": "x", "object": {"spec": {"containers": [{"resources": {}}]}}});
        assert!(pod_ask(&no_gpu).unwrap().is_none());
    }
    #[test]
    fn amd_gpus_and_requests_without_limits_count_as_the_webhook_sends_them() {
        let pod = |resources: Value| json!({"namespace": "x", "object": {"spec": {"containers": [{"resources": resources}]}}});
        let gpus = |resources: Value| pod_ask(&pod(resources)).unwrap().map(|a| a.gpus);
        assert_eq!(gpus(json!({"limits": {"amd.com/gpu": 2}})), Some(2));
        assert_eq!(gpus(json!({"requests": {"nvidia.com/gpu": "3"}})), Some(3));
        // Both given: counted once, from the limit.
        assert_eq!(
            gpus(json!({"limits": {"nvidia.com/gpu": 2}, "requests": {"nvidia.com/gpu": 2}})),
            Some(2)
        );
        assert_eq!(
            gpus(json!({"requests": {"cpu": "8", "memory": "1Gi"}})),
            None
        );
        assert!(pod_ask(&pod(json!({"requests": {"amd.com/gpu": -1}})))
            .unwrap_err()
            .contains("not between"));
    }

    /// The fields a question is refused for, in order.
    fn refused(v: Value) -> Vec<String> {
        match parse_ask(v.to_string().as_bytes()) {
            Err(ApiError::Validation(e)) => e.into_iter().map(|e| e.field).collect(),
            other => panic!("{v}: {other:?}"),
        }
    }

    #[test]
    fn a_question_serde_refuses_is_read_field_by_field() {
        assert_eq!(refused(json!({"tenant": "a"})), ["gpus", "duration_s"]);
        assert_eq!(
            refused(json!({"colour": "red", "tenant": "a", "gpus": "eight", "duration_s": 60})),
            ["colour", "gpus"]
        );
        // The question's own rules, about the fields that did read, come with them.
        assert_eq!(
            refused(
                json!({"tenant": "a", "gpus": 0, "duration_s": 60, "kind": "mining",
                "sites": ["s1", 2]})
            ),
            ["gpus", "kind", "sites[1]"]
        );
        assert_eq!(
            refused(json!({"tenant": "a", "gpus": 1, "duration_s": 60,
                "earliest_start": "+262142-12-31T23:59:59Z", "deadline": "2026-11-23T09:00:00Z"})),
            ["earliest_start"]
        );
        // A null is a field left out, as everywhere in the API.
        let ask =
            parse_ask(br#"{"tenant": "a", "gpus": 1, "duration_s": 60, "kind": null}"#).unwrap();
        assert_eq!(ask.kind, JobKind::Batch);
        assert!(matches!(
            parse_ask(b"[1]"),
            Err(ApiError::BadRequest(m)) if m.contains("JSON object")
        ));
    }
}
