//! A Kubernetes Pod object (the kubelet's `/pods` answers a `PodList` of them) to what the
//! badput rule needs of it: how the pod ended, how often its containers restarted, and the
//! last checkpoint it reports. Pure: no I/O.
//!
//! The end state follows what Kubernetes writes, never a guess:
//! - `status.phase` (<https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-phase>):
//!   `Succeeded` is completed, `Failed` ended otherwise, `Pending`/`Running`/`Unknown`
//!   have not ended.
//! - `status.reason` of a failed pod, set by the kubelet: `DeadlineExceeded` past
//!   `activeDeadlineSeconds` (`pkg/kubelet/active_deadline.go`); `Evicted` by node-pressure
//!   eviction (`pkg/kubelet/eviction`, <https://kubernetes.io/docs/concepts/scheduling-eviction/node-pressure-eviction/>);
//!   `Preempting` when the kubelet preempts it for a critical pod (`pkg/kubelet/preemption`);
//!   `Terminated` (1.22 on; `Shutdown` before) by graceful node shutdown, `NodeShutdown`
//!   when refused while the node shuts down (`pkg/kubelet/nodeshutdown`,
//!   <https://kubernetes.io/docs/concepts/cluster-administration/node-shutdown/>);
//!   `NodeLost` from the node controller of old releases.
//! - The `DisruptionTarget` condition
//!   (<https://kubernetes.io/docs/concepts/workloads/pods/disruptions/#pod-disruption-conditions>),
//!   set before a pod is stopped for a disruption: `PreemptionByScheduler`
//!   (`PreemptionByKubeScheduler` in 1.26), `EvictionByEvictionAPI` (a drain),
//!   `DeletionByTaintManager` (a `NoExecute` taint, as a node that is not ready or
//!   unreachable gets), `DeletionByPodGC` (its node is gone), `TerminationByKubelet`
//!   (node-pressure eviction, node shutdown or critical-pod preemption, told apart by the
//!   `status.reason` above).
//! - A container `terminated` as `OOMKilled`: killed by the kernel for its memory limit.

use crate::sources::checkpoint::checkpoint_time;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use wattledger_domain::badput::EndState;
use wattledger_domain::input;
use wattledger_domain::phase::Phase;

/// The annotation a pod sets (`kubectl annotate --overwrite pod $POD_NAME
/// wattledger.io/last-checkpoint=$(date +%s)`, or through the API) after each checkpoint.
pub const CHECKPOINT_ANNOTATION: &str = "wattledger.io/last-checkpoint";

/// What one Pod object says of how it runs or ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PodStatus {
    /// Its phase is `Succeeded` or `Failed`: it has ended and never runs again.
    pub terminal: bool,
    /// How it ended; for a pod that has not ended yet, how it is being stopped where a
    /// `DisruptionTarget` condition says so (the pod may be deleted before the kubelet
    /// writes its final phase), else none.
    pub end_state: Option<EndState>,
    /// The sum of its containers' `restartCount`.
    pub restarts: i32,
    /// Its last checkpoint, from [`CHECKPOINT_ANNOTATION`].
    pub last_checkpoint_at: Option<DateTime<Utc>>,
    /// The model it serves or trains: [`MODEL_LABELS`], the first that is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Its phase in a disaggregated deployment: [`PHASE_LABELS`], the first that is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
}

/// The labels (or annotations) naming a pod's model, in order of precedence: wattledger's own,
/// then llm-d's (its model service labels every pod of a deployment with the model).
pub const MODEL_LABELS: [&str; 2] = ["wattledger.io/model", "llm-d.ai/model"];
/// The labels naming a pod's serving phase: wattledger's (`prefill`, `decode`, `both`), then
/// llm-d's role (`prefill`, `decode`, `both`).
pub const PHASE_LABELS: [&str; 2] = ["wattledger.io/phase", "llm-d.ai/role"];

#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("not a PodList: {0}")]
    Json(#[from] serde_json::Error),
}

/// The pods of a `PodList`, by namespace and name; pods without a name are left out.
pub fn parse_pod_list(text: &str) -> Result<BTreeMap<(String, String), PodStatus>, ParseError> {
    let list: PodList = serde_json::from_str(text)?;
    Ok(list
        .items
        .into_iter()
        .filter(|p| !p.metadata.name.is_empty())
        .map(|p| {
            let status = status_of(&p);
            ((p.metadata.namespace, p.metadata.name), status)
        })
        .collect())
}

/// One Pod object's status.
pub fn parse_pod(text: &str) -> Result<PodStatus, ParseError> {
    Ok(status_of(&serde_json::from_str(text)?))
}

// The few fields read; everything else a Pod holds is skipped, and a missing field is its
// API default (an empty list, a zero count).
#[derive(Deserialize)]
struct PodList {
    #[serde(default)]
    items: Vec<Pod>,
}

#[derive(Deserialize)]
struct Pod {
    #[serde(default)]
    metadata: Metadata,
    #[serde(default)]
    status: Status,
}

#[derive(Default, Deserialize)]
struct Metadata {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

impl Metadata {
    /// The first of `keys` set on the pod, as a label or else an annotation.
    fn first(&self, keys: &[&str]) -> Option<&str> {
        keys.iter().find_map(|k| {
            (self.labels.get(*k).or_else(|| self.annotations.get(*k)))
                .map(|v| v.trim())
                .filter(|v| !v.is_empty())
        })
    }

    /// The pod's model key, where it is one by the server's rule for keys (an annotation's
    /// value is not bounded as a label's is), else none: the pod's job is then sent without a
    /// model rather than refused.
    fn model(&self) -> Option<String> {
        self.first(&MODEL_LABELS)
            .and_then(|m| input::key(m).ok())
            .map(str::to_owned)
    }

    /// The pod's phase; a role that is not a serving phase (llm-d's routers) is none.
    fn phase(&self) -> Option<Phase> {
        self.first(&PHASE_LABELS).and_then(Phase::parse)
    }
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    #[serde(default)]
    phase: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    conditions: Vec<Condition>,
    #[serde(default)]
    container_statuses: Vec<ContainerStatus>,
    #[serde(default)]
    init_container_statuses: Vec<ContainerStatus>,
}

#[derive(Deserialize)]
struct Condition {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    reason: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerStatus {
    #[serde(default)]
    restart_count: i32,
    #[serde(default)]
    state: ContainerState,
}

#[derive(Default, Deserialize)]
struct ContainerState {
    terminated: Option<Terminated>,
}

#[derive(Deserialize)]
struct Terminated {
    #[serde(default)]
    reason: String,
}

fn status_of(pod: &Pod) -> PodStatus {
    let s = &pod.status;
    let disruption = s
        .conditions
        .iter()
        .find(|c| c.kind == "DisruptionTarget" && c.status == "True")
        .map(|c| c.reason.as_str());
    let end_state = match s.phase.as_str() {
        "Succeeded" => Some(EndState::Completed),
        "Failed" => Some(failed_as(s, disruption)),
        _ => disruption.and_then(disrupted_as),
    };
    let restarts = s
        .container_statuses
        .iter()
        .map(|c| i64::from(c.restart_count.max(0)))
        .sum::<i64>()
        .min(i64::from(i32::MAX)) as i32;
    PodStatus {
        terminal: matches!(s.phase.as_str(), "Succeeded" | "Failed"),
        end_state,
        restarts,
        last_checkpoint_at: pod
            .metadata
            .annotations
            .get(CHECKPOINT_ANNOTATION)
            .and_then(|v| checkpoint_time(v)),
        model: pod.metadata.model(),
        // A phase binds a pool to one model: without one it says nothing.
        phase: pod.metadata.model().and(pod.metadata.phase()),
    }
}

/// Why a failed pod failed: the kubelet's reason for the whole pod first, then the
/// disruption that stopped it, then a container the kernel killed for memory; a pod that
/// says none of these exited with an error.
fn failed_as(s: &Status, disruption: Option<&str>) -> EndState {
    match s.reason.as_str() {
        "DeadlineExceeded" => return EndState::Timeout,
        // Stopped to free the node's resources for others: the domain's "preemption or
        // eviction".
        "Evicted" | "Preempting" => return EndState::Preempted,
        // The node went down under it.
        "Terminated" | "Shutdown" | "NodeShutdown" | "NodeLost" => return EndState::NodeFail,
        _ => {}
    }
    if let Some(end) = disruption.and_then(disrupted_as) {
        return end;
    }
    let oom = s
        .container_statuses
        .iter()
        .chain(&s.init_container_statuses)
        .filter_map(|c| c.state.terminated.as_ref())
        .any(|t| t.reason == "OOMKilled");
    if oom {
        EndState::OutOfMemory
    } else {
        EndState::Failed
    }
}

/// The end a `DisruptionTarget` reason announces; an unknown reason stays unknown.
fn disrupted_as(reason: &str) -> Option<EndState> {
    Some(match reason {
        "PreemptionByScheduler" | "PreemptionByKubeScheduler" | "EvictionByEvictionAPI" => {
            EndState::Preempted
        }
        // The node is unreachable, not ready or gone (a `NoExecute` taint others set by hand
        // is rarer than the node lifecycle controller's).
        "DeletionByTaintManager" | "DeletionByPodGC" => EndState::NodeFail,
        // Node-pressure eviction or critical-pod preemption (a node shutdown carries its
        // own `status.reason`, read first).
        "TerminationByKubelet" => EndState::Preempted,
        _ => return None,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::fixtures;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    fn real(name: &str) -> PodStatus {
        parse_pod(&fixtures::kubernetes(name)).unwrap()
    }

    fn of(pod: Value) -> PodStatus {
        parse_pod(&pod.to_string()).unwrap()
    }

    #[test]
    fn a_pods_model_and_phase_are_read_from_llm_d_or_wattledger_labels() {
        let labelled = |labels: Value, annotations: Value| {
            let mut pod: Value =
                serde_json::from_str(&fixtures::kubernetes("argo-pod-succeeded.json")).unwrap();
            pod["metadata"]["labels"] = labels;
            pod["metadata"]["annotations"] = annotations;
            of(pod)
        };
        // llm-d's model service labels a decode pool's pods so.
        let s = labelled(
            json!({"llm-d.ai/model": "llama-3-2-3b-instruct", "llm-d.ai/role": "decode"}),
            json!({}),
        );
        assert_eq!(
            (s.model.as_deref(), s.phase),
            (Some("llama-3-2-3b-instruct"), Some(Phase::Decode))
        );
        // wattledger's own label wins over llm-d's, and may be an annotation.
        let s = labelled(
            json!({"llm-d.ai/model": "llama-3-2-3b-instruct", "llm-d.ai/role": "both"}),
            json!({"wattledger.io/model": "llama-3.2-3b", "wattledger.io/phase": "prefill"}),
        );
        assert_eq!(
            (s.model.as_deref(), s.phase),
            (Some("llama-3.2-3b"), Some(Phase::Prefill))
        );
        // A role that is not a phase (a router), a phase without a model, a model the server
        // could not hold: none of them.
        let s = labelled(
            json!({"llm-d.ai/model": "m", "llm-d.ai/role": "epp"}),
            json!({}),
        );
        assert_eq!((s.model.as_deref(), s.phase), (Some("m"), None));
        let s = labelled(json!({"llm-d.ai/role": "decode"}), json!({}));
        assert_eq!((s.model, s.phase), (None, None));
        let s = labelled(json!({}), json!({"wattledger.io/model": "bad\u{1}name"}));
        assert_eq!(s.model, None);
        let s = labelled(json!({}), json!({"wattledger.io/model": "x".repeat(300)}));
        assert_eq!(s.model, None);
        // Unlabelled, as most pods are.
        assert_eq!(real("argo-pod-succeeded.json").model, None);
    }

    #[test]
    fn real_pods_read_as_they_ended() {
        let failed = real("argo-pod-failed.json");
        assert_eq!(
            (failed.terminal, failed.end_state, failed.restarts),
            (true, Some(EndState::Failed), 0),
            "a container exited 1 with reason Error"
        );
        assert_eq!(
            real("argo-pod-succeeded.json").end_state,
            Some(EndState::Completed)
        );
        // A Job's pod that completed and is being deleted is still completed.
        let deleted = real("ish-pod-terminating-stuck.json");
        assert_eq!(
            (deleted.terminal, deleted.end_state),
            (true, Some(EndState::Completed))
        );
        let evicted = real("ish-pod-evicted.json");
        assert_eq!(
            (evicted.terminal, evicted.end_state),
            (true, Some(EndState::Preempted)),
            "node-pressure eviction"
        );
    }

    #[test]
    fn running_pods_have_not_ended_and_count_their_restarts() {
        let crashing = real("argo-pod-crashloop.json");
        assert_eq!(
            (crashing.terminal, crashing.end_state, crashing.restarts),
            (false, None, 3)
        );
        // Restarted nine times after OOM kills: the pod runs on; an earlier kill is not
        // its end. The fixture's `@now-2h` in place of a time is not read.
        let oom = real("ish-pod-oomkilled-unhealthy.json");
        assert_eq!(
            (oom.terminal, oom.end_state, oom.restarts),
            (false, None, 9)
        );
    }

    /// A failed pod built by hand (no captured one with these fields was found; see
    /// shared/fixtures/kubernetes/pods/SOURCES.md) from the fields the kubelet and controllers
    /// write.
    pub(crate) fn failed_pod(reason: &str, disruption: &str, container_reason: &str) -> Value {
        let mut status = json!({
            "phase": "Failed",
            "containerStatuses": [
                {"name": "sidecar", "restartCount": 1,
                 "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                {"name": "trainer", "restartCount": 2,
                 "state": {"terminated": {"exitCode": 137, "reason": container_reason,
                                          "finishedAt": "2026-10-05T12:00:00Z"}},
                 "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
            ]
        });
        if !reason.is_empty() {
            status["reason"] = json!(reason);
        }
        if !disruption.is_empty() {
            status["conditions"] =
                json!([{"type": "DisruptionTarget", "status": "True", "reason": disruption}]);
        }
        json!({"metadata": {"name": "train-0", "namespace": "research"}, "status": status})
    }

    #[test]
    fn a_failed_pod_says_why_it_failed() {
        use EndState::*;
        let cases = [
            ("DeadlineExceeded", "", "Error", Timeout),
            ("Evicted", "TerminationByKubelet", "Error", Preempted),
            ("Preempting", "TerminationByKubelet", "Error", Preempted),
            ("Terminated", "TerminationByKubelet", "Error", NodeFail),
            ("Shutdown", "", "Error", NodeFail),
            ("NodeShutdown", "", "", NodeFail),
            ("", "PreemptionByScheduler", "Error", Preempted),
            ("", "PreemptionByKubeScheduler", "Error", Preempted),
            ("", "EvictionByEvictionAPI", "Error", Preempted),
            ("", "DeletionByTaintManager", "Error", NodeFail),
            ("", "DeletionByPodGC", "Error", NodeFail),
            ("", "", "OOMKilled", OutOfMemory),
            // The kill before the last restart is not the end (lastState is OOMKilled).
            ("", "", "Error", Failed),
            ("UnexpectedAdmissionError", "", "", Failed),
            ("", "SomeFutureReason", "Error", Failed),
        ];
        for (reason, disruption, container, want) in cases {
            let got = of(failed_pod(reason, disruption, container));
            assert_eq!(
                (got.terminal, got.end_state, got.restarts),
                (true, Some(want), 3),
                "{reason}/{disruption}/{container}"
            );
        }
    }

    #[test]
    fn a_running_pod_being_disrupted_says_how_it_is_ending() {
        let mut pod = failed_pod("", "PreemptionByScheduler", "Error");
        pod["status"]["phase"] = json!("Running");
        let s = of(pod.clone());
        assert_eq!(
            (s.terminal, s.end_state),
            (false, Some(EndState::Preempted))
        );
        pod["status"]["conditions"][0]["status"] = json!("False");
        assert_eq!(
            of(pod).end_state,
            None,
            "a condition that is not True says nothing"
        );
    }

    #[test]
    fn the_checkpoint_annotation_is_a_time_or_nothing() {
        let with = |v: &str| {
            of(
                json!({"metadata": {"name": "p", "annotations": {CHECKPOINT_ANNOTATION: v}},
                      "status": {"phase": "Running"}}),
            )
            .last_checkpoint_at
        };
        assert_eq!(
            with("1791201600"),
            DateTime::from_timestamp(1_791_201_600, 0)
        );
        assert_eq!(
            with("2026-10-05T14:00:00+02:00"),
            DateTime::from_timestamp(1_791_201_600, 0)
        );
        assert_eq!(with("epoch 12"), None);
    }

    #[test]
    fn a_pod_list_is_keyed_by_namespace_and_name() {
        let list = json!({"kind": "PodList", "apiVersion": "v1", "items": [
            serde_json::from_str::<Value>(&fixtures::kubernetes("argo-pod-failed.json")).unwrap(),
            {"metadata": {}, "status": {}},
        ]});
        let pods = parse_pod_list(&list.to_string()).unwrap();
        assert_eq!(
            pods.keys().collect::<Vec<_>>(),
            [&("argocd".to_owned(), "my-pod".to_owned())]
        );
        assert!(parse_pod_list("{\"items\": 3}").is_err());
    }

    proptest! {
        /// Whatever a pod's status holds, the end state is one only an ended (or disrupted)
        /// pod has, completed only for a pod that succeeded, and restarts never negative.
        #[test]
        fn end_states_follow_the_phase(
            phase in prop::sample::select(vec!["Pending", "Running", "Succeeded", "Failed", "Unknown", ""]),
            reason in prop::sample::select(vec!["", "Evicted", "DeadlineExceeded", "Terminated", "x"]),
            disruption in prop::sample::select(vec!["", "PreemptionByScheduler", "DeletionByPodGC", "y"]),
            container in prop::sample::select(vec!["", "Error", "OOMKilled", "Completed"]),
            restarts in prop::collection::vec(-3i32..i32::MAX, 0..4),
        ) {
            let mut pod = failed_pod(reason, disruption, container);
            pod["status"]["phase"] = json!(phase);
            pod["status"]["containerStatuses"] = restarts.iter()
                .map(|n| json!({"restartCount": n, "state": {"terminated": {"reason": container}}}))
                .collect();
            let s = of(pod);
            prop_assert!(s.restarts >= 0);
            prop_assert_eq!(s.terminal, phase == "Succeeded" || phase == "Failed");
            prop_assert_eq!(s.end_state == Some(EndState::Completed), phase == "Succeeded");
            if !s.terminal {
                prop_assert!(s.end_state.is_none() || !disruption.is_empty());
            }
        }
    }
}
