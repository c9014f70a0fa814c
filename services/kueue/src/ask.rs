//! A Workload as a question to `POST /v1/admission`, by the rules the pod admission webhook
//! uses for one pod (`services/wattledger/src/http/admission.rs`), applied to each pod set
//! and multiplied by its count:
//!
//! - GPUs: per pod, the containers' `nvidia.com/gpu` and `nvidia.com/mig-*` limits (a
//!   request where a container names no limit) added up, or the largest init container's if
//!   that is more; each MIG slice counts as one GPU.
//! - Run time: the annotation `wattledger.io/duration` (`90m`, `2h`, `3600`), else
//!   `spec.maximumExecutionTimeSeconds`, else the check's `defaultDurationSeconds`.
//! - Tenant: the namespace's label named by the check's `tenantLabel`, else the namespace.
//!   Not an annotation: whoever submits a job writes its annotations, and the tenant is
//!   who pays.
//! - `wattledger.io/model`, `/kind`, `/deadline`, `/sites`, `/gpu-model` from the
//!   Workload's annotations (or its pod templates'); sites default to the check's.
//! - The job key `kueue:<namespace>/<workload>`, the source `kueue`.

use crate::objects::{Container, Workload};
use crate::params::{Parameters, MAX_DURATION_S};
use crate::record::Record;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use wattledger_domain::input::InputError;
use wattledger_domain::job_kind::JobKind;
use wattledger_domain::priority::Priority;
use wattledger_wire::parse_duration;

/// Annotations a Workload (or its pod templates) may carry: the names the pod webhook reads.
pub use wattledger_wire::annotations;

/// Most GPUs one question may name (the admission API's bound).
pub const MAX_GPUS: i64 = 100_000;

/// The body of `POST /v1/admission`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Question {
    pub tenant: String,
    pub job_name: String,
    pub job_key: String,
    pub gpus: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub kind: JobKind,
    pub duration_s: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline: Option<DateTime<Utc>>,
    pub priority: Priority,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sites: Vec<String>,
    pub source: &'static str,
}

/// The `Idempotency-Key` of the question a Workload puts to `check` now: the Workload, the
/// check, and the decision it last recorded for the check (none before the first). A
/// controller that crashes after the answer and before its record asks again under the same
/// key and gets the same decision; once a deferral it recorded runs out, the next question
/// has a key of its own and is decided anew.
pub fn idempotency_key(wl: &Workload, check: &str) -> String {
    let workload = match &wl.metadata.uid {
        Some(uid) if !uid.is_empty() => uid.clone(),
        _ => format!("{}/{}", wl.namespace(), wl.metadata.name),
    };
    let after = Record::read(wl, check).map_or_else(|| "first".to_owned(), |r| r.id.to_string());
    let key = format!("kueue/{workload}/{:016x}/{after}", fnv1a(check.as_bytes()));
    // The server takes 1 to 255 visible ASCII characters; a name is at most 253 of them,
    // and a uid 36.
    key.chars()
        .filter(char::is_ascii_graphic)
        .take(255)
        .collect()
}

/// A stable 64-bit hash (FNV-1a): the check's name can be long, and `std`'s hasher may
/// change between builds, which would change a key across an upgrade.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Why a Workload cannot be put as a question (the check rejects it, naming this).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuestionError {
    #[error("pod set {pod_set}: {resource} is not a whole number from 0 to {MAX_GPUS}")]
    GpuQuantity { pod_set: String, resource: String },
    #[error("pod set {0}: count must not be negative")]
    NegativeCount(String),
    #[error("the pod sets ask for more than {MAX_GPUS} GPUs")]
    TooManyGpus,
    #[error("wattledger.io/duration: '{0}' is not a duration (e.g. 90m, 2h, 3600)")]
    Duration(String),
    #[error("the run time must be 1 s to 90 days, not {0} s")]
    DurationBounds(i64),
    #[error("wattledger.io/deadline: '{0}' is not an RFC 3339 time")]
    Deadline(String),
    #[error("wattledger.io/kind: '{0}' is not a job kind ({names})", names = JobKind::NAMES.join(", "))]
    Kind(String),
    #[error("the priority class name {0}")]
    Priority(InputError),
}

/// One container's GPUs: its limits, else its requests, of `nvidia.com/gpu` and every
/// `nvidia.com/mig-*` resource.
fn container_gpus(c: &Container, pod_set: &str) -> Result<i64, QuestionError> {
    let is_gpu = |name: &str| name == "nvidia.com/gpu" || name.starts_with("nvidia.com/mig-");
    let names = c
        .resources
        .limits
        .keys()
        .chain(c.resources.requests.keys())
        .filter(|n| is_gpu(n));
    let mut seen: Vec<&String> = Vec::new();
    let mut total: i64 = 0;
    for name in names {
        if seen.contains(&name) {
            continue;
        }
        seen.push(name);
        let v = c
            .resources
            .limits
            .get(name)
            .or_else(|| c.resources.requests.get(name))
            .unwrap_or(&Value::Null);
        let n = quantity(v)
            .filter(|n| (0..=MAX_GPUS).contains(n))
            .ok_or_else(|| QuestionError::GpuQuantity {
                pod_set: pod_set.to_owned(),
                resource: name.clone(),
            })?;
        total = total
            .checked_add(n)
            .filter(|t| *t <= MAX_GPUS)
            .ok_or(QuestionError::TooManyGpus)?;
    }
    Ok(total)
}

/// A whole-number quantity, as a JSON number or string (`"2"`); anything else is `None`.
fn quantity(v: &Value) -> Option<i64> {
    v.as_i64()
        .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
}

/// GPUs of all the Workload's pods: each pod set's per-pod GPUs times its count.
pub fn gpus(wl: &Workload) -> Result<i64, QuestionError> {
    let mut total: i64 = 0;
    for ps in &wl.spec.pod_sets {
        let mut in_containers: i64 = 0;
        for c in &ps.template.spec.containers {
            in_containers = in_containers
                .checked_add(container_gpus(c, &ps.name)?)
                .filter(|t| *t <= MAX_GPUS)
                .ok_or(QuestionError::TooManyGpus)?;
        }
        let mut in_init: i64 = 0;
        for c in &ps.template.spec.init_containers {
            in_init = in_init.max(container_gpus(c, &ps.name)?);
        }
        if ps.count < 0 {
            return Err(QuestionError::NegativeCount(ps.name.clone()));
        }
        let per_pod = in_containers.max(in_init);
        total = per_pod
            .checked_mul(ps.count)
            .and_then(|n| total.checked_add(n))
            .filter(|t| *t <= MAX_GPUS)
            .ok_or(QuestionError::TooManyGpus)?;
    }
    Ok(total)
}

/// The question for a Workload; `Ok(None)` when it asks for no GPU (admitted without one,
/// as the pod webhook allows GPU-less pods).
pub fn question(
    wl: &Workload,
    namespace_labels: &BTreeMap<String, String>,
    params: &Parameters,
) -> Result<Option<Question>, QuestionError> {
    let gpus = gpus(wl)?;
    if gpus == 0 {
        return Ok(None);
    }
    let namespace = wl.namespace();
    let duration_s = match wl.annotation(annotations::DURATION) {
        Some(d) => parse_duration(d).ok_or_else(|| QuestionError::Duration(d.to_owned()))?,
        None => wl
            .spec
            .maximum_execution_time_seconds
            .unwrap_or(params.default_duration_seconds),
    };
    if !(1..=MAX_DURATION_S).contains(&duration_s) {
        return Err(QuestionError::DurationBounds(duration_s));
    }
    let deadline = match wl.annotation(annotations::DEADLINE) {
        Some(d) => Some(
            DateTime::parse_from_rfc3339(d.trim())
                .map_err(|_| QuestionError::Deadline(d.to_owned()))?
                .with_timezone(&Utc),
        ),
        None => None,
    };
    let sites = match wl.annotation(annotations::SITES) {
        Some(s) => s
            .split(',')
            .map(|x| x.trim().to_owned())
            .filter(|x| !x.is_empty())
            .collect(),
        None => params.sites.clone(),
    };
    let priority = wl
        .spec
        .priority_class_ref
        .as_ref()
        .map(|r| r.name.clone())
        .or_else(|| {
            wl.spec
                .pod_sets
                .iter()
                .find_map(|p| p.template.spec.priority_class_name.clone())
        })
        .filter(|p| !p.is_empty())
        .map_or(Ok(Priority::normal()), |p| Priority::parse(&p))
        .map_err(QuestionError::Priority)?;
    let kind = match wl.annotation(annotations::KIND) {
        Some(k) => JobKind::parse(k).ok_or_else(|| QuestionError::Kind(k.to_owned()))?,
        None => JobKind::Batch,
    };
    Ok(Some(Question {
        tenant: namespace_labels
            .get(&params.tenant_label)
            .filter(|t| !t.trim().is_empty())
            .cloned()
            .unwrap_or_else(|| namespace.to_owned()),
        job_name: wl.metadata.name.clone(),
        job_key: format!("kueue:{namespace}/{}", wl.metadata.name),
        gpus,
        gpu_model: wl.annotation(annotations::GPU_MODEL).map(str::to_owned),
        model: wl.annotation(annotations::MODEL).map(str::to_owned),
        kind,
        duration_s,
        deadline,
        priority,
        sites,
        source: "kueue",
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn workload(v: Value) -> Workload {
        serde_json::from_value(v).unwrap()
    }

    fn with_limits(pod_sets: Value) -> Workload {
        workload(
            json!({"metadata": {"name": "w", "namespace": "ml"}, "spec": {"podSets": pod_sets}}),
        )
    }

    #[test]
    fn a_question_asked_again_keeps_its_key_until_a_decision_is_recorded() {
        let uid = "5f3c2a1e-7d2b-4c1e-9f00-0a1b2c3d4e5f";
        let wl = workload(json!({"metadata": {"name": "w", "namespace": "ml", "uid": uid}}));
        let first = idempotency_key(&wl, "wattledger");
        // Asked again (a crash between the answer and the record): the same key.
        assert_eq!(idempotency_key(&wl, "wattledger"), first);
        assert!(first.starts_with(&format!("kueue/{uid}/")) && first.ends_with("/first"));
        // Another check on the same Workload asks a question of its own.
        assert_ne!(idempotency_key(&wl, "wattledger-gpu"), first);
        // Once a deferral is recorded (and has run out), the next question is a new one.
        let id = uuid::Uuid::now_v7();
        let record = format!(
            r#"{{"check":"wattledger","decision":"defer","id":"{id}","start_at":"2020-01-01T00:00:00Z"}}"#
        );
        let deferred = workload(
            json!({"metadata": {"name": "w", "namespace": "ml", "uid": uid,
            "annotations": {crate::record::ANNOTATION: record}}}),
        );
        let next = idempotency_key(&deferred, "wattledger");
        assert_ne!(next, first);
        assert!(next.ends_with(&id.to_string()), "{next}");
        // Within the server's bound whatever the check's name.
        let long = idempotency_key(&wl, &"c".repeat(253));
        assert!(long.len() <= 255 && long.bytes().all(|b| b.is_ascii_graphic()));
    }

    #[test]
    fn a_real_workload_without_gpus_is_not_asked_and_with_them_is() {
        let fixture = crate::objects::fixture("workload-v1beta2-pending-check.yaml");
        let wl = workload(fixture.clone());
        assert_eq!(
            question(&wl, &BTreeMap::new(), &Parameters::default()),
            Ok(None)
        );
        // The same Workload with a GPU limit on its container (3 pods × 2 GPUs).
        let mut with_gpus = fixture;
        with_gpus["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]
            ["limits"] = json!({"nvidia.com/gpu": "2"});
        let q = question(
            &workload(with_gpus),
            &BTreeMap::new(),
            &Parameters::default(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(q.gpus, 6);
        assert_eq!(q.tenant, "team-a");
        assert_eq!(q.job_key, "kueue:team-a/sample-job");
        assert_eq!(q.duration_s, 3600);
        assert_eq!(q.priority, Priority::normal());
        assert_eq!(q.deadline, None);
    }

    #[test]
    fn gpus_add_over_containers_take_the_largest_init_container_and_multiply_by_count() {
        let wl = with_limits(json!([
            {"name": "driver", "count": 1, "template": {"spec": {
                "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "2"}}}]}}},
            {"name": "workers", "count": 4, "template": {"spec": {
                "initContainers": [{"resources": {"limits": {"nvidia.com/gpu": 8}}}],
                "containers": [
                    {"resources": {"limits": {"nvidia.com/gpu": 2}}},
                    {"resources": {"requests": {"nvidia.com/mig-1g.10gb": "1"}}}]}}}
        ]));
        // 1 + 4 × max(2 + 1, 8) = 33.
        assert_eq!(gpus(&wl).unwrap(), 33);
        let cpu_only = with_limits(json!([{"template": {"spec": {"containers": [
            {"resources": {"limits": {"cpu": "4"}}}]}}}]));
        assert_eq!(gpus(&cpu_only).unwrap(), 0);
        assert_eq!(
            question(&cpu_only, &BTreeMap::new(), &Parameters::default()),
            Ok(None)
        );
    }

    #[test]
    fn a_limit_wins_over_a_request_of_the_same_resource() {
        let wl = with_limits(json!([{"template": {"spec": {"containers": [
            {"resources": {"limits": {"nvidia.com/gpu": 2}, "requests": {"nvidia.com/gpu": 2}}}]}}}]));
        assert_eq!(gpus(&wl).unwrap(), 2);
    }

    #[test]
    fn hostile_quantities_and_counts_are_refused() {
        let one = |limit: Value, count: Value| {
            gpus(&with_limits(
                json!([{"name": "p", "count": count, "template": {"spec": {
                "containers": [{"resources": {"limits": {"nvidia.com/gpu": limit}}}]}}}]),
            ))
        };
        assert!(matches!(
            one(json!("2.5"), json!(1)),
            Err(QuestionError::GpuQuantity { .. })
        ));
        assert!(matches!(
            one(json!(-1), json!(1)),
            Err(QuestionError::GpuQuantity { .. })
        ));
        assert_eq!(
            one(json!(8), json!(-2)),
            Err(QuestionError::NegativeCount("p".into()))
        );
        assert_eq!(
            one(json!(100_000), json!(2)),
            Err(QuestionError::TooManyGpus)
        );
        assert_eq!(
            one(json!(8), json!(i64::MAX)),
            Err(QuestionError::TooManyGpus)
        );
        assert_eq!(one(json!(8), json!(0)), Ok(0));
    }

    #[test]
    fn the_question_reads_annotations_labels_and_parameters() {
        let wl = workload(json!({
            "metadata": {"name": "job-train-1a2b3", "namespace": "ml",
                "annotations": {"wattledger.io/deadline": "2026-01-02T03:00:00Z",
                                "wattledger.io/kind": "training"}},
            "spec": {"maximumExecutionTimeSeconds": 5400,
                "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "low"},
                "podSets": [{"name": "main", "count": 2, "template": {
                    "metadata": {"annotations": {"wattledger.io/model": "llama-3-8b",
                                                 "wattledger.io/sites": "s1, s2,"}},
                    "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}}]}}));
        let labels = BTreeMap::from([("wattledger.io/tenant".to_owned(), "acme".to_owned())]);
        let q = question(&wl, &labels, &Parameters::default())
            .unwrap()
            .unwrap();
        assert_eq!(q.tenant, "acme");
        assert_eq!(q.job_key, "kueue:ml/job-train-1a2b3");
        assert_eq!(q.gpus, 8);
        assert_eq!(q.duration_s, 5400);
        assert_eq!(q.kind, JobKind::Training);
        assert_eq!(q.model.as_deref(), Some("llama-3-8b"));
        assert_eq!(q.sites, ["s1", "s2"]);
        assert_eq!(q.priority.as_str(), "low");
        assert_eq!(
            q.deadline.unwrap().to_rfc3339(),
            "2026-01-02T03:00:00+00:00"
        );
        let body = serde_json::to_value(&q).unwrap();
        assert_eq!(body["source"], "kueue");
        assert!(body.get("gpu_model").is_none(), "{body}");

        // No label: the namespace; no run time anywhere: the parameters' default; the
        // duration annotation wins over maximumExecutionTimeSeconds.
        let mut params = Parameters {
            default_duration_seconds: 600,
            sites: vec!["s9".into()],
            ..Parameters::default()
        };
        let mut bare = wl.clone();
        bare.metadata.annotations.clear();
        bare.spec.pod_sets[0].template.metadata.annotations.clear();
        bare.spec.maximum_execution_time_seconds = None;
        let q = question(&bare, &BTreeMap::new(), &params).unwrap().unwrap();
        assert_eq!((q.tenant.as_str(), q.duration_s), ("ml", 600));
        assert_eq!(q.sites, ["s9"]);
        assert_eq!(q.kind, JobKind::Batch);
        params.tenant_label = "team".into();
        bare.metadata
            .annotations
            .insert("wattledger.io/duration".into(), "2h".into());
        bare.spec.maximum_execution_time_seconds = Some(60);
        let q = question(&bare, &labels, &params).unwrap().unwrap();
        assert_eq!((q.tenant.as_str(), q.duration_s), ("ml", 7200));
    }

    #[test]
    fn bad_annotations_are_named() {
        let wl = |k: &str, v: &str| {
            workload(
                json!({"metadata": {"name": "w", "namespace": "ml", "annotations": {k: v}},
                "spec": {"podSets": [{"template": {"spec": {"containers": [
                    {"resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}]}}),
            )
        };
        let err = |w: Workload| {
            question(&w, &BTreeMap::new(), &Parameters::default())
                .unwrap_err()
                .to_string()
        };
        assert!(err(wl("wattledger.io/duration", "soon")).contains("'soon' is not a duration"));
        assert!(err(wl("wattledger.io/duration", "91d")).contains("90 days"));
        assert!(err(wl("wattledger.io/deadline", "tomorrow")).contains("RFC 3339"));
        assert!(err(wl("wattledger.io/kind", "mining")).contains("'mining' is not a job kind"));
    }
}
