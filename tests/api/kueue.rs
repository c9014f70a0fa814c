//! The Kueue AdmissionCheck controller (`services/kueue`) against a fake Kubernetes API
//! server and the real wattledger server: the `Active` condition, the check states it
//! writes, a deferral retried exactly at its start, no second question after a restart, and
//! fail-open / fail-closed while wattledger is away.
//!
//! There is no kube-apiserver on this machine (and no Kueue), so the API server is a small
//! axum app here: it serves the real Kueue objects of `tests/fixtures/kueue/` (edited where
//! a test says so) on the paths the kube client calls, applies server-side apply patches the
//! way the API server does for these fields (`status.admissionChecks` and
//! `status.conditions` are maps keyed by `name` / `type`; a `resourceVersion` in the body is
//! a precondition), and records every patch.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use chrono::{DateTime, Duration, DurationRound, Utc};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use wattledger::auth::Role;
use wattledger_kueue::{client_at, Controller, Metrics, Wattledger};
use wattledger_tests::{peers, TestApp};

const KUEUE: &str = "/apis/kueue.x-k8s.io/v1beta2";
const PARAMS: &str = "/apis/wattledger.io/v1alpha1/admissioncheckparameters";

/// A patch as the fake API server received it.
#[derive(Debug, Clone)]
struct Patched {
    path: String,
    query: String,
    content_type: String,
    body: Value,
}

/// A change Kueue makes to a stored object.
type Change = fn(&mut Value);

#[derive(Default)]
struct Store {
    /// Objects by their URL path.
    objects: BTreeMap<String, Value>,
    patches: Vec<Patched>,
    version: u64,
    /// Changes made to stored objects right after the next list of Workloads is served, as
    /// Kueue may change a Workload while the controller is asking about it.
    after_list: Vec<(String, Change)>,
}

#[derive(Clone, Default)]
struct FakeApi(Arc<Mutex<Store>>);

fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code});
    (
        StatusCode::from_u16(code).unwrap(),
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn ok(v: &Value) -> Response {
    ([("content-type", "application/json")], v.to_string()).into_response()
}

/// Server-side apply for the fields the controller writes: objects merge key by key, the
/// keyed lists merge item by item (an applied item replaces the one with its key), anything
/// else is replaced.
fn apply(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                let key = match k.as_str() {
                    "admissionChecks" => Some("name"),
                    "conditions" => Some("type"),
                    _ => None,
                };
                let slot = t.entry(k.clone()).or_insert(Value::Null);
                match (key, v.as_array()) {
                    (Some(key), Some(items)) => {
                        if !slot.is_array() {
                            *slot = json!([]);
                        }
                        let list = slot.as_array_mut().unwrap();
                        for item in items {
                            match list.iter_mut().find(|x| x[key] == item[key]) {
                                Some(x) => *x = item.clone(),
                                None => list.push(item.clone()),
                            }
                        }
                    }
                    _ => apply(slot, v),
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

async fn serve_api(
    State(api): State<FakeApi>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    let mut store = api.0.lock().unwrap();
    if method == Method::GET {
        // A collection: every object directly under it (workloads: in every namespace).
        let all_workloads = path == format!("{KUEUE}/workloads");
        let items: Vec<Value> = store
            .objects
            .iter()
            .filter(|(k, _)| {
                if all_workloads {
                    k.starts_with(&format!("{KUEUE}/namespaces/")) && k.contains("/workloads/")
                } else {
                    k.strip_prefix(&format!("{path}/"))
                        .is_some_and(|rest| !rest.contains('/'))
                }
            })
            .map(|(_, v)| v.clone())
            .collect();
        if let Some(obj) = store.objects.get(&path) {
            return ok(obj);
        }
        let is_collection =
            all_workloads || path == format!("{KUEUE}/admissionchecks") || path == PARAMS;
        if is_collection {
            let rv = store.version.to_string();
            if all_workloads {
                for (path, change) in std::mem::take(&mut store.after_list) {
                    store.version += 1;
                    let version = store.version.to_string();
                    let obj = store.objects.get_mut(&path).unwrap();
                    change(obj);
                    obj["metadata"]["resourceVersion"] = json!(version);
                }
            }
            return ok(&json!({"apiVersion": "v1", "kind": "List",
                "metadata": {"resourceVersion": rv}, "items": items}));
        }
        return status(404, "NotFound", &format!("{path} not found"));
    }
    if method != Method::PATCH {
        return status(405, "MethodNotAllowed", "only GET and PATCH here");
    }
    let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
        return status(400, "BadRequest", "not JSON");
    };
    store.patches.push(Patched {
        path: path.clone(),
        query: uri.query().unwrap_or_default().to_owned(),
        content_type: headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
        body: patch.clone(),
    });
    let object_path = path.strip_suffix("/status").unwrap_or(&path).to_owned();
    store.version += 1;
    let version = store.version.to_string();
    let Some(obj) = store.objects.get_mut(&object_path) else {
        return status(404, "NotFound", &format!("{object_path} not found"));
    };
    if let Some(want) = patch["metadata"]["resourceVersion"].as_str() {
        if obj["metadata"]["resourceVersion"] != want {
            return status(409, "Conflict", "the object has been modified");
        }
    }
    // The status subresource changes only the status; the object itself, not the status.
    let mut part = patch.clone();
    let map = part.as_object_mut().unwrap();
    if path.ends_with("/status") {
        map.retain(|k, _| k == "status");
    } else {
        map.remove("status");
    }
    if let Some(m) = map.get_mut("metadata").and_then(Value::as_object_mut) {
        m.retain(|k, _| k == "annotations" || k == "labels");
    }
    apply(obj, &part);
    obj["metadata"]["resourceVersion"] = json!(version);
    ok(obj)
}

impl FakeApi {
    async fn start(&self) -> String {
        let app = Router::new().fallback(serve_api).with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        url
    }

    fn put(&self, mut obj: Value) {
        let kind = obj["kind"].as_str().unwrap().to_owned();
        let name = obj["metadata"]["name"].as_str().unwrap().to_owned();
        let path = match kind.as_str() {
            "AdmissionCheck" => format!("{KUEUE}/admissionchecks/{name}"),
            "AdmissionCheckParameters" => format!("{PARAMS}/{name}"),
            "Namespace" => format!("/api/v1/namespaces/{name}"),
            "Workload" => format!(
                "{KUEUE}/namespaces/{}/workloads/{name}",
                obj["metadata"]["namespace"].as_str().unwrap()
            ),
            other => panic!("no path for {other}"),
        };
        let mut store = self.0.lock().unwrap();
        store.version += 1;
        obj["metadata"]["resourceVersion"] = json!(store.version.to_string());
        store.objects.insert(path, obj);
    }

    fn get(&self, path: &str) -> Value {
        self.0.lock().unwrap().objects[path].clone()
    }

    fn workload(&self, ns: &str, name: &str) -> Value {
        self.get(&format!("{KUEUE}/namespaces/{ns}/workloads/{name}"))
    }

    /// The check entry `check` of a stored Workload.
    fn check(&self, ns: &str, name: &str, check: &str) -> Value {
        let wl = self.workload(ns, name);
        wl["status"]["admissionChecks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == check)
            .cloned()
            .unwrap_or(Value::Null)
    }

    /// Changes `ns/name` with `change` once the next list of Workloads has been served.
    fn change_after_list(&self, ns: &str, name: &str, change: Change) {
        let path = format!("{KUEUE}/namespaces/{ns}/workloads/{name}");
        self.0.lock().unwrap().after_list.push((path, change));
    }

    fn patches(&self) -> Vec<Patched> {
        self.0.lock().unwrap().patches.clone()
    }

    /// What Kueue does on eviction: every check back to `Pending`, with its own message,
    /// keeping `requeueAfterSeconds`.
    fn reset_to_pending(&self, ns: &str, name: &str) {
        let path = format!("{KUEUE}/namespaces/{ns}/workloads/{name}");
        let mut store = self.0.lock().unwrap();
        store.version += 1;
        let version = store.version.to_string();
        let wl = store.objects.get_mut(&path).unwrap();
        for c in wl["status"]["admissionChecks"].as_array_mut().unwrap() {
            let before = c["state"].as_str().unwrap().to_owned();
            c["state"] = json!("Pending");
            c["message"] = json!(format!(
                "Reset to Pending after eviction. Previously: {before}"
            ));
        }
        wl["metadata"]["resourceVersion"] = json!(version);
    }
}

fn fixture(name: &str) -> Value {
    let path = format!("{}/fixtures/kueue/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    serde_saphyr::from_str(&text).unwrap()
}

/// The fixture AdmissionCheck of Kueue's docs, made ours: controller name and parameters.
fn our_check(name: &str, params: &str) -> Value {
    let mut ac = fixture("admissioncheck-v1beta2.yaml");
    ac["metadata"]["name"] = json!(name);
    ac["metadata"]["generation"] = json!(1);
    ac["spec"] = json!({"controllerName": "wattledger.io/admission", "parameters":
        {"apiGroup": "wattledger.io", "kind": "AdmissionCheckParameters", "name": params}});
    ac
}

fn params(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "wattledger.io/v1alpha1", "kind": "AdmissionCheckParameters",
           "metadata": {"name": name}, "spec": spec})
}

fn namespace(name: &str, tenant: Option<&str>) -> Value {
    let labels = match tenant {
        Some(t) => json!({"kubernetes.io/metadata.name": name, "wattledger.io/tenant": t}),
        None => json!({"kubernetes.io/metadata.name": name}),
    };
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
}

/// The fixture Workload (quota reserved, one check `Pending`) as `ns/name`, waiting on
/// `check`, with `gpus` per pod (3 pods) and these annotations.
fn workload(ns: &str, name: &str, check: &str, gpus: u32, annotations: Value) -> Value {
    let mut wl = fixture("workload-v1beta2-pending-check.yaml");
    wl["metadata"]["name"] = json!(name);
    wl["metadata"]["namespace"] = json!(ns);
    wl["metadata"]["annotations"] = annotations;
    wl["status"]["admissionChecks"][0]["name"] = json!(check);
    if gpus > 0 {
        wl["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["limits"] =
            json!({"nvidia.com/gpu": gpus.to_string()});
    }
    wl
}

/// A URL where nothing listens.
async fn nowhere() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", l.local_addr().unwrap())
}

fn token_file(token: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("wattledger-kueue-{}", uuid::Uuid::now_v7()));
    std::fs::write(&path, format!("{token}\n")).unwrap();
    path
}

fn controller(api: &str, server: &str, token: Option<std::path::PathBuf>) -> Controller {
    Controller::new(
        client_at(api).unwrap(),
        Wattledger::new(server, token, std::time::Duration::from_secs(5)).unwrap(),
        Arc::new(Metrics::default()),
    )
}

#[tokio::test]
async fn the_check_is_kept_active_and_workloads_get_their_states_on_the_status() {
    let api = FakeApi::default();
    let url = api.start().await;
    api.put(our_check("wattledger", "wattledger"));
    api.put(our_check("wattledger-broken", "missing"));
    api.put(fixture("admissioncheck-v1beta2.yaml")); // Kueue's, not ours.
    api.put(params("wattledger", json!({"failurePolicy": "Closed"})));
    api.put(namespace("team-a", None));
    // The fixture Workload as it is (no GPUs), one with a bad deadline, one waiting on the
    // broken check, and the fixture Workload whose checks are all in Retry.
    api.put(workload("team-a", "sample-job", "wattledger", 0, json!({})));
    api.put(workload(
        "team-a",
        "bad-deadline",
        "wattledger",
        1,
        json!({"wattledger.io/deadline": "tomorrow"}),
    ));
    api.put(workload(
        "team-a",
        "on-broken",
        "wattledger-broken",
        1,
        json!({}),
    ));
    let mut retry = fixture("workload-v1beta2-retry.yaml");
    retry["status"]["admissionChecks"][0]["name"] = json!("wattledger");
    api.put(retry);

    // wattledger is nowhere: none of these needs a question.
    let c = controller(&url, &nowhere().await, None);
    let report = c.reconcile().await.unwrap();
    assert_eq!(
        (
            report.checks,
            report.usable_checks,
            report.asked,
            report.updated
        ),
        (2, 1, 0, 2),
        "{report:?}"
    );
    let patches = api.patches();
    for p in &patches {
        assert_eq!(p.content_type, "application/apply-patch+yaml", "{p:?}");
        assert!(
            p.query.contains("fieldManager=wattledger-kueue") && p.query.contains("force=true"),
            "{p:?}"
        );
    }
    let on = |path: &str| {
        patches
            .iter()
            .filter(|p| p.path == path)
            .collect::<Vec<_>>()
    };

    let active = on(&format!("{KUEUE}/admissionchecks/wattledger/status"));
    assert_eq!(active.len(), 1);
    let cond = &active[0].body["status"]["conditions"][0];
    assert_eq!(
        (
            &cond["type"],
            &cond["status"],
            &cond["reason"],
            &cond["observedGeneration"]
        ),
        (
            &json!("Active"),
            &json!("True"),
            &json!("Active"),
            &json!(1)
        )
    );
    let broken = on(&format!("{KUEUE}/admissionchecks/wattledger-broken/status"));
    let cond = &broken[0].body["status"]["conditions"][0];
    assert_eq!(
        (&cond["status"], &cond["reason"]),
        (&json!("False"), &json!("BadParametersRef"))
    );
    assert!(cond["message"]
        .as_str()
        .unwrap()
        .contains("'missing' does not exist"));
    assert!(on(&format!("{KUEUE}/admissionchecks/sample-prov/status")).is_empty());

    let sample = on(&format!(
        "{KUEUE}/namespaces/team-a/workloads/sample-job/status"
    ));
    assert_eq!(sample.len(), 1);
    let body = &sample[0].body;
    assert_eq!(body["kind"], "Workload");
    assert!(body["metadata"]["resourceVersion"].is_string(), "{body}");
    let entry = &body["status"]["admissionChecks"];
    assert_eq!(entry.as_array().unwrap().len(), 1, "only our entry: {body}");
    assert_eq!(entry[0]["state"], "Ready");
    assert!(entry[0]["message"]
        .as_str()
        .unwrap()
        .contains("no GPUs requested"));
    let bad = api.check("team-a", "bad-deadline", "wattledger");
    assert_eq!(bad["state"], "Rejected");
    assert!(
        bad["message"]
            .as_str()
            .unwrap()
            .contains("wattledger.io/deadline: 'tomorrow'"),
        "{bad}"
    );
    assert!(on(&format!(
        "{KUEUE}/namespaces/team-a/workloads/on-broken/status"
    ))
    .is_empty());
    assert!(on(&format!(
        "{KUEUE}/namespaces/research/workloads/ml-training-job/status"
    ))
    .is_empty());

    // A second pass finds everything as it should be and writes nothing.
    let before = api.patches().len();
    c.reconcile().await.unwrap();
    assert_eq!(api.patches().len(), before);
}

fn marginal(start: DateTime<Utc>, hours: i64, value: &str) -> Value {
    json!({"region": "DE", "signal": "carbon", "basis": "marginal", "status": "forecast",
           "source": "watttime", "start_at": start, "end_at": start + Duration::hours(hours),
           "value": value})
}

/// Every stored decision for the job named `name`, newest first.
async fn decisions_of(app: &TestApp, name: &str) -> Vec<Value> {
    let (status, page) = app
        .get(Some(&app.token(Role::Operator)), "/v1/admission/decisions")
        .await;
    assert_eq!(status, 200, "{page}");
    page["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["job_name"] == name)
        .cloned()
        .collect()
}

/// Waits until `n` decisions for `name` are stored (the server writes them asynchronously).
async fn stored(app: &TestApp, name: &str, n: usize) -> Vec<Value> {
    for _ in 0..100 {
        let d = decisions_of(app, name).await;
        if d.len() >= n {
            return d;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{name}: fewer than {n} decisions stored");
}

#[tokio::test]
async fn a_flexible_workload_is_deferred_to_the_clean_hour_and_asked_once_per_deferral() {
    let app = crate::admission::setup().await;
    let h = Utc::now().duration_trunc(Duration::hours(1)).unwrap();
    let (status, body) = app
        .ingest(
            &app.token(Role::Collector),
            "signals",
            json!([
                marginal(h, 2, "600"),
                marginal(h + Duration::hours(2), 2, "150")
            ]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let deadline = h + Duration::hours(4);
    // Wait (with dry runs, which store nothing) until admission has the forecasts.
    let probe = json!({"tenant": "a", "gpus": 3, "duration_s": 3600, "kind": "training",
        "deadline": deadline, "sites": ["s1"], "dry_run": true});
    let mut ready = false;
    for _ in 0..60 {
        let (s, a) = crate::admission::ask(&app, probe.clone()).await;
        if s == 200 && a["decision"] == "defer" {
            ready = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(ready, "admission never deferred the probe");

    let api = FakeApi::default();
    let url = api.start().await;
    api.put(our_check("wattledger", "wattledger"));
    api.put(params("wattledger", json!({"sites": ["s1"]})));
    api.put(namespace("ml", Some("a")));
    api.put(workload(
        "ml",
        "finetune",
        "wattledger",
        1,
        json!({"wattledger.io/deadline": deadline.to_rfc3339(), "wattledger.io/duration": "1h",
               "wattledger.io/kind": "training"}),
    ));
    api.put(workload(
        "ml",
        "notebook",
        "wattledger",
        1,
        json!({"wattledger.io/duration": "30m", "wattledger.io/kind": "interactive"}),
    ));
    // A namespace that is no tenant (no label, and its name is none).
    api.put(namespace("strangers", None));
    api.put(workload("strangers", "walk-in", "wattledger", 1, json!({})));
    let token = token_file(&app.token(Role::Scheduler));
    let c = controller(&url, &app.base, Some(token.clone()));
    let report = c.reconcile().await.unwrap();
    assert_eq!((report.asked, report.updated), (3, 3), "{report:?}");

    // The deferral: Retry until exactly the decision's start.
    let decision = stored(&app, "finetune", 1).await.remove(0);
    assert_eq!(decision["decision"], "defer", "{decision}");
    let start: DateTime<Utc> = decision["start_at"].as_str().unwrap().parse().unwrap();
    assert_eq!(start, h + Duration::hours(2), "{decision}");
    let id = decision["id"].as_str().unwrap();
    let check = api.check("ml", "finetune", "wattledger");
    assert_eq!(check["state"], "Retry", "{check}");
    let since: DateTime<Utc> = check["lastTransitionTime"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let wait = check["requeueAfterSeconds"].as_i64().unwrap();
    assert_eq!(since + Duration::seconds(wait), start, "{check}");
    // What the controller answered, for the record (`cargo test … kueue -- --nocapture`).
    eprintln!("decision {decision}\ncheck state {check}");
    let message = check["message"].as_str().unwrap();
    assert!(
        message.contains(id) && message.contains("deferred until"),
        "{message}"
    );
    let wl = api.workload("ml", "finetune");
    let record: Value = serde_json::from_str(
        wl["metadata"]["annotations"]["wattledger.io/admission-decision"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(record["id"], id);
    assert_eq!(record["decision"], "defer");
    assert_eq!(
        record["start_at"]
            .as_str()
            .map(|s| s.parse::<DateTime<Utc>>().unwrap()),
        Some(start)
    );

    // The stranger's question is refused by the server: rejected, naming why.
    let check = api.check("strangers", "walk-in", "wattledger");
    assert_eq!(check["state"], "Rejected", "{check}");
    assert!(
        check["message"]
            .as_str()
            .unwrap()
            .contains("unknown tenant 'strangers'"),
        "{check}"
    );

    // The inflexible one: admitted.
    let admitted = stored(&app, "notebook", 1).await.remove(0);
    assert_eq!(admitted["decision"], "admit", "{admitted}");
    let check = api.check("ml", "notebook", "wattledger");
    assert_eq!(check["state"], "Ready", "{check}");
    assert!(check["message"]
        .as_str()
        .unwrap()
        .contains(admitted["id"].as_str().unwrap()));

    // A restarted controller asks nothing: the checks are answered.
    let restarted = controller(&url, &app.base, Some(token.clone()));
    let report = restarted.reconcile().await.unwrap();
    assert_eq!((report.asked, report.updated), (0, 0), "{report:?}");
    // Kueue puts the checks back to Pending before the start (an eviction): the recorded
    // deferral is held for the rest of its wait, still without a question.
    api.reset_to_pending("ml", "finetune");
    let report = restarted.reconcile().await.unwrap();
    assert_eq!(
        (report.asked, report.held, report.updated),
        (0, 1, 1),
        "{report:?}"
    );
    let check = api.check("ml", "finetune", "wattledger");
    assert_eq!(check["state"], "Retry");
    let since: DateTime<Utc> = check["lastTransitionTime"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        since + Duration::seconds(check["requeueAfterSeconds"].as_i64().unwrap()),
        start
    );
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        decisions_of(&app, "finetune").await.len(),
        1,
        "one decision, not two"
    );

    // After the start Kueue retries the Workload: it is asked once more.
    api.reset_to_pending("ml", "finetune");
    let later = controller(&url, &app.base, Some(token.clone()))
        .with_clock(Arc::new(move || start + Duration::seconds(1)));
    let report = later.reconcile().await.unwrap();
    assert_eq!((report.asked, report.held), (1, 0), "{report:?}");
    let both = stored(&app, "finetune", 2).await;
    assert_eq!(both.len(), 2);
    assert_ne!(both[0]["id"], both[1]["id"]);
    let _ = std::fs::remove_file(token);
}

#[tokio::test]
async fn while_wattledger_is_away_the_failure_policy_decides() {
    let api = FakeApi::default();
    let url = api.start().await;
    api.put(our_check("open", "open"));
    api.put(our_check("closed", "closed"));
    api.put(params("open", json!({"failurePolicy": "Open"})));
    api.put(params(
        "closed",
        json!({"failurePolicy": "Closed", "retryAfterSeconds": 120}),
    ));
    api.put(namespace("team-a", Some("a")));
    api.put(workload("team-a", "runs", "open", 1, json!({})));
    api.put(workload("team-a", "waits", "closed", 1, json!({})));

    // Nothing listens.
    let c = controller(&url, &nowhere().await, None);
    let report = c.reconcile().await.unwrap();
    assert_eq!((report.asked, report.updated), (2, 2), "{report:?}");
    let open = api.check("team-a", "runs", "open");
    assert_eq!(open["state"], "Ready", "{open}");
    assert!(open["message"].as_str().unwrap().contains("unreachable"));
    assert!(open.get("requeueAfterSeconds").is_none());
    let closed = api.check("team-a", "waits", "closed");
    assert_eq!(closed["state"], "Retry", "{closed}");
    assert_eq!(closed["requeueAfterSeconds"], 120);
    assert!(closed["message"]
        .as_str()
        .unwrap()
        .contains("failure policy Closed"));
    // No decision was made, so none is recorded.
    assert!(api.workload("team-a", "waits")["metadata"]["annotations"]
        .get("wattledger.io/admission-decision")
        .is_none());

    // A server answering 503 is as good as away.
    let failing = Router::new().fallback(|| async {
        (StatusCode::SERVICE_UNAVAILABLE, r#"{"error": {"code": "unavailable", "message": "admission is still loading its state"}}"#)
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, failing).await.unwrap() });
    api.reset_to_pending("team-a", "waits");
    let metrics = Arc::new(Metrics::default());
    let c = Controller::new(
        client_at(&url).unwrap(),
        Wattledger::new(&base, None, std::time::Duration::from_secs(5)).unwrap(),
        Arc::clone(&metrics),
    );
    c.reconcile().await.unwrap();
    let closed = api.check("team-a", "waits", "closed");
    assert_eq!(closed["state"], "Retry");
    assert!(
        closed["message"]
            .as_str()
            .unwrap()
            .contains("HTTP 503: admission is still loading"),
        "{closed}"
    );
    assert_eq!(metrics.server_failures(), 1);

    // The counts on the controller's listener, linted by promtool.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let router = wattledger_kueue::metrics::router(metrics, std::time::Duration::from_secs(60));
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let http = reqwest::Client::new();
    let health = http.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("wattledger_kueue_server_failures_total 1\n"),
        "{text}"
    );
    assert!(text.contains("wattledger_kueue_check_updates_total{state=\"Retry\"} 1\n"));
    assert!(text.contains("wattledger_kueue_passes_total 1\n"));
    if peers::ready(
        peers::installed("promtool"),
        "promtool is not installed",
        "apt-get install prometheus",
    ) {
        let mut lint = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        lint.stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = lint.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "promtool: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// wattledger as a peer that admits everything with a fixed decision id: enough for the
/// Kubernetes side of the write path, which is what this test is about.
async fn admitting_server(id: uuid::Uuid) -> String {
    let answer = json!({"decision_id": id, "decided_at": Utc::now(), "decision": "admit",
        "start_at": Utc::now(), "reasons": [], "power_cap_w": 300});
    let app = Router::new().fallback(move || {
        let answer = answer.clone();
        async move { ok(&answer) }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

#[tokio::test]
async fn a_workload_that_changes_while_asked_is_written_on_its_new_version_or_left_alone() {
    let api = FakeApi::default();
    let url = api.start().await;
    api.put(our_check("wattledger", "wattledger"));
    api.put(params("wattledger", json!({})));
    api.put(namespace("ml", None));
    api.put(workload("ml", "touched", "wattledger", 2, json!({})));
    api.put(workload("ml", "evicted", "wattledger", 2, json!({})));
    // Kueue touches one (still waiting on the check) and evicts the other (quota released)
    // while wattledger is being asked.
    api.change_after_list("ml", "touched", |wl| {
        wl["status"]["conditions"][0]["message"] = json!("touched");
    });
    api.change_after_list("ml", "evicted", |wl| {
        wl["status"]["conditions"][0]["status"] = json!("False");
    });
    let id = uuid::Uuid::now_v7();
    let c = controller(&url, &admitting_server(id).await, None);
    let report = c.reconcile().await.unwrap();
    assert_eq!(
        (report.asked, report.updated, report.skipped),
        (2, 1, 1),
        "{report:?}"
    );

    let patches = api.patches();
    let on = |path: &str| {
        patches
            .iter()
            .filter(|p| p.path == path)
            .collect::<Vec<_>>()
    };
    // The touched one: the record is refused on the version listed, written on the new one,
    // and the state follows on the version that write returned.
    let record = on(&format!("{KUEUE}/namespaces/ml/workloads/touched"));
    assert_eq!(record.len(), 2, "{record:?}");
    let first = record[0].body["metadata"]["resourceVersion"].clone();
    let second = record[1].body["metadata"]["resourceVersion"].clone();
    assert_ne!(first, second);
    let state = on(&format!("{KUEUE}/namespaces/ml/workloads/touched/status"));
    assert_eq!(state.len(), 1);
    let wl = api.workload("ml", "touched");
    assert_eq!(
        state[0].body["metadata"]["resourceVersion"]
            .as_str()
            .unwrap(),
        (wl["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            - 1)
        .to_string()
    );
    let check = api.check("ml", "touched", "wattledger");
    assert_eq!(check["state"], "Ready");
    assert_eq!(
        check["podSetUpdates"],
        json!([{"name": "main", "annotations": {"wattledger.io/power-cap-w": "300"}}])
    );
    let stored: Value = serde_json::from_str(
        wl["metadata"]["annotations"]["wattledger.io/admission-decision"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(stored["id"], id.to_string());

    // The evicted one: its check is no longer waiting; nothing is written on it.
    assert_eq!(
        on(&format!("{KUEUE}/namespaces/ml/workloads/evicted")).len(),
        1
    );
    assert!(on(&format!("{KUEUE}/namespaces/ml/workloads/evicted/status")).is_empty());
    assert_eq!(api.check("ml", "evicted", "wattledger")["state"], "Pending");
}
