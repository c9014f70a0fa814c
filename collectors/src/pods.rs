//! Kubernetes pods seen holding GPUs, as jobs: a pod that appears is sent open from the
//! moment it was first seen, a pod that changes devices is resent with its new set, and a
//! pod that is no longer seen is sent closed at that moment.
//!
//! Used by the sources that see pods on devices (dcgm-exporter's pod labels, the kubelet's
//! PodResources API). The open pods are the source's state, spooled with its records, so a
//! restarted agent closes a pod that ended while it was down instead of forgetting it.
//!
//! With the kubelet's view of its pods (`sources::kubelet`), a pod also carries its restarts
//! and its last checkpoint (resent when the checkpoint moves), and is closed with the end
//! state its status gives:
//! - a pod the kubelet shows ended (`Succeeded`, `Failed`) is closed, even while a device
//!   observation lags behind and still lists it;
//! - a pod gone from the devices that the kubelet still shows running is held for up to
//!   [`END_STATE_WAIT`], since the kubelet writes the final phase a moment after the
//!   containers stop; it is closed at the time it went;
//! - a pod the kubelet no longer lists (deleted) ends as its last status said: the end
//!   its `DisruptionTarget` condition announced, else unknown.
//!
//! Without the view (none configured, or the kubelet did not answer this time) a pod gone
//! from the devices is closed at once, its end state unknown unless an earlier view said.

use crate::records::{Allocation, Job};
use crate::sources::kubelet::parse::PodStatus;
use chrono::{DateTime, Duration, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use wattledger_domain::job_kind::JobKind;
use wattledger_domain::phase::Phase;

/// What one observation says about a pod: its tenant and the devices it holds, each with
/// its share (`None` = the whole device).
#[derive(Debug, Clone, PartialEq)]
pub struct PodUse {
    pub tenant: String,
    pub devices: BTreeMap<String, Option<Decimal>>,
}

/// How long a pod gone from the devices waits for the kubelet to show how it ended.
pub const END_STATE_WAIT: Duration = Duration::seconds(60);

/// The key of a pod's job.
pub fn job_key(namespace: &str, pod: &str) -> String {
    format!("k8s:{namespace}/{pod}")
}

/// The kubelet's pods by the keys of their jobs.
pub type PodStatuses = BTreeMap<String, PodStatus>;

/// The kubelet's pods (by namespace and name) by the keys of their jobs.
pub fn by_job_key(pods: BTreeMap<(String, String), PodStatus>) -> PodStatuses {
    pods.into_iter()
        .map(|((ns, name), s)| (job_key(&ns, &name), s))
        .collect()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct OpenPod {
    tenant: String,
    start_at: DateTime<Utc>,
    #[serde(alias = "meters", deserialize_with = "devices_or_list")]
    devices: BTreeMap<String, Option<Decimal>>,
    /// The kubelet's last word on the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<PodStatus>,
    /// When it was first missing from the devices, while the kubelet says it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gone_at: Option<DateTime<Utc>>,
}

/// State spooled by earlier agents listed a pod's meters without shares.
fn devices_or_list<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, Option<Decimal>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Map(BTreeMap<String, Option<Decimal>>),
        List(Vec<String>),
    }
    Ok(match Either::deserialize(d)? {
        Either::Map(m) => m,
        Either::List(l) => l.into_iter().map(|k| (k, None)).collect(),
    })
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Pods {
    open: BTreeMap<String, OpenPod>,
}

impl Pods {
    /// Folds one observation (job key → use) into jobs to send: new, changed and ended pods.
    /// `kubelet` is the kubelet's view of its pods this time, if the source has one.
    pub fn observe(
        &mut self,
        mut seen: BTreeMap<String, PodUse>,
        kubelet: Option<&PodStatuses>,
        kind: JobKind,
        now: DateTime<Utc>,
    ) -> Vec<Job> {
        let status_of = |key: &str| kubelet.and_then(|v| v.get(key));
        // An ended pod never runs again: a device view that still lists it lags behind.
        seen.retain(|key, _| !status_of(key).is_some_and(|s| s.terminal));
        let mut jobs = Vec::new();
        let mut ended = Vec::new();
        // Pods to send again while they run: a new checkpoint, or a model or phase the
        // kubelet's view now gives that the last send did not carry (the view was missing).
        let mut resend = BTreeSet::new();
        for (key, pod) in &mut self.open {
            let fresh = status_of(key);
            if seen.contains_key(key) {
                pod.gone_at = None;
                if checkpoint(fresh) > checkpoint(pod.status.as_ref())
                    || fresh.is_some_and(|f| {
                        labelled(f) != pod.status.as_ref().map_or((None, None), labelled)
                    })
                {
                    resend.insert(key.clone());
                }
                pod.remember(fresh);
                continue;
            }
            let gone_at = *pod.gone_at.get_or_insert(now);
            let close = match (kubelet, fresh) {
                (Some(_), Some(s)) if !s.terminal => now - gone_at >= END_STATE_WAIT,
                _ => true,
            };
            pod.remember(fresh);
            if close {
                ended.push(key.clone());
            }
        }
        for key in ended {
            let pod = self.open.remove(&key).expect("present");
            jobs.push(job(&key, &pod, kind, pod.gone_at));
        }
        for (key, usage) in seen {
            match self.open.get_mut(&key) {
                Some(open) if open.devices == usage.devices => {
                    // A new checkpoint is sent while the pod runs, not only at its end.
                    if resend.contains(&key) {
                        jobs.push(job(&key, open, kind, None));
                    }
                }
                Some(open) => {
                    // Moved to other devices: the allocations follow (same start, new set).
                    open.devices = usage.devices;
                    jobs.push(job(&key, open, kind, None));
                }
                None => {
                    let open = OpenPod {
                        tenant: usage.tenant,
                        start_at: now,
                        devices: usage.devices,
                        status: status_of(&key).cloned(),
                        gone_at: None,
                    };
                    jobs.push(job(&key, &open, kind, None));
                    self.open.insert(key, open);
                }
            }
        }
        jobs
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }
}

impl OpenPod {
    /// Takes the kubelet's newest word on the pod, keeping the newest checkpoint should the
    /// annotation have been removed.
    fn remember(&mut self, fresh: Option<&PodStatus>) {
        if let Some(s) = fresh {
            let last = checkpoint(fresh).max(checkpoint(self.status.as_ref()));
            self.status = Some(PodStatus {
                last_checkpoint_at: last,
                ..s.clone()
            });
        }
    }
}

/// The model and phase the pod's labels give.
fn labelled(status: &PodStatus) -> (Option<&str>, Option<Phase>) {
    (status.model.as_deref(), status.phase)
}

fn checkpoint(status: Option<&PodStatus>) -> Option<DateTime<Utc>> {
    status.and_then(|s| s.last_checkpoint_at)
}

/// The pod as a job: open (`end_at` none) or ended at `end_at`, with what the kubelet last
/// said of it.
fn job(key: &str, pod: &OpenPod, kind: JobKind, end_at: Option<DateTime<Utc>>) -> Job {
    let status = pod.status.as_ref();
    Job {
        key: key.to_owned(),
        name: Some(key.trim_start_matches("k8s:").to_owned()),
        tenant: pod.tenant.clone(),
        // The pod's GPUs say where it runs.
        site: None,
        // From its labels (llm-d's or wattledger's): a model the server does not know is
        // kept there with the name alone, not refused.
        model: status.and_then(|s| s.model.clone()),
        phase: status.and_then(|s| s.phase),
        kind,
        priority: None,
        submit_at: None,
        start_at: pod.start_at,
        end_at,
        // Only an ended job has an end state; a device observation alone does not say it.
        end_state: end_at.and(status.and_then(|s| s.end_state)),
        // A checkpoint after the end (a clock ahead of the node's) is not the pod's.
        last_checkpoint_at: checkpoint(status).filter(|c| end_at.is_none_or(|end| *c <= end)),
        // A replacement pod has a name of its own; which one it replaces is the
        // controller's to say, not the node's.
        requeue_of: None,
        restarts: status.map(|s| s.restarts),
        allocations: pod
            .devices
            .iter()
            .map(|(m, share)| Allocation {
                meter: m.clone(),
                share: *share,
                start_at: Some(pod.start_at),
                end_at,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattledger_domain::badput::EndState;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_790_000_000 + s, 0).unwrap()
    }

    /// A pod's key and its devices with their shares.
    type Observed<'a> = (&'a str, &'a [(&'a str, Option<&'a str>)]);

    fn seen(pods: &[Observed]) -> BTreeMap<String, PodUse> {
        pods.iter()
            .map(|(k, d)| {
                (
                    k.to_string(),
                    PodUse {
                        tenant: "acme".into(),
                        devices: d
                            .iter()
                            .map(|(m, s)| (m.to_string(), s.map(|s| s.parse().unwrap())))
                            .collect(),
                    },
                )
            })
            .collect()
    }

    #[test]
    fn pods_open_move_and_close() {
        let mut p = Pods::default();
        let j = p.observe(
            seen(&[("k8s:a/p", &[("g0", Some("0.25"))])]),
            None,
            JobKind::Inference,
            at(0),
        );
        assert_eq!(j.len(), 1);
        assert_eq!(
            (j[0].end_at, j[0].allocations[0].share),
            (None, Some(Decimal::new(25, 2)))
        );
        assert!(p
            .observe(
                seen(&[("k8s:a/p", &[("g0", Some("0.25"))])]),
                None,
                JobKind::Inference,
                at(10)
            )
            .is_empty());
        let moved = p.observe(
            seen(&[("k8s:a/p", &[("g1", None)])]),
            None,
            JobKind::Inference,
            at(20),
        );
        assert_eq!(
            (moved[0].start_at, moved[0].allocations[0].meter.as_str()),
            (at(0), "g1")
        );
        let gone = p.observe(BTreeMap::new(), None, JobKind::Inference, at(30));
        assert_eq!(gone[0].end_at, Some(at(30)));
        assert!(p.is_empty());
    }

    #[test]
    fn state_spooled_before_shares_existed_still_reads() {
        let old = serde_json::json!({"k8s:a/p": {"tenant": "t", "start_at": "2026-09-21T00:00:00Z", "meters": ["g0"]}});
        let mut p: Pods = serde_json::from_value(old).unwrap();
        let gone = p.observe(BTreeMap::new(), None, JobKind::Inference, at(0));
        assert_eq!(gone[0].allocations[0].meter, "g0");
        assert_eq!(gone[0].allocations[0].share, None);
    }

    fn status(
        terminal: bool,
        end: Option<EndState>,
        restarts: i32,
        ckpt: Option<i64>,
    ) -> PodStatus {
        PodStatus {
            terminal,
            end_state: end,
            restarts,
            last_checkpoint_at: ckpt.map(at),
            model: None,
            phase: None,
        }
    }

    fn view(pods: &[(&str, PodStatus)]) -> PodStatuses {
        pods.iter()
            .map(|(k, s)| (k.to_string(), s.clone()))
            .collect()
    }

    const POD: &str = "k8s:research/train-0";

    fn on_gpu() -> BTreeMap<String, PodUse> {
        seen(&[(POD, &[("g0", None)])])
    }

    #[test]
    fn a_pod_that_ends_is_closed_with_how_it_ended_its_restarts_and_checkpoint() {
        let mut p = Pods::default();
        let running = status(false, None, 0, None);
        let open = p.observe(
            on_gpu(),
            Some(&view(&[(POD, running)])),
            JobKind::Training,
            at(0),
        );
        assert_eq!((open[0].restarts, open[0].end_state), (Some(0), None));
        // A checkpoint while it runs is sent at once; an unchanged one is not resent.
        let saved = status(false, None, 1, Some(300));
        let j = p.observe(
            on_gpu(),
            Some(&view(&[(POD, saved.clone())])),
            JobKind::Training,
            at(310),
        );
        assert_eq!(
            (j.len(), j[0].last_checkpoint_at, j[0].end_at),
            (1, Some(at(300)), None)
        );
        assert!(p
            .observe(
                on_gpu(),
                Some(&view(&[(POD, saved)])),
                JobKind::Training,
                at(320)
            )
            .is_empty());
        // The annotation removed while it runs: nothing to send, the checkpoint kept.
        let cleared = status(false, None, 2, None);
        assert!(p
            .observe(
                on_gpu(),
                Some(&view(&[(POD, cleared)])),
                JobKind::Training,
                at(330)
            )
            .is_empty());
        // OOM-killed: the kubelet shows it Failed while the device view still lists it.
        let oom = status(true, Some(EndState::OutOfMemory), 2, None);
        let end = p.observe(
            on_gpu(),
            Some(&view(&[(POD, oom)])),
            JobKind::Training,
            at(400),
        );
        let j = &end[0];
        assert_eq!(
            (j.end_at, j.end_state, j.restarts, j.last_checkpoint_at),
            (
                Some(at(400)),
                Some(EndState::OutOfMemory),
                Some(2),
                Some(at(300))
            ),
            "the annotation's checkpoint survives a status without it"
        );
        assert_eq!(j.allocations[0].end_at, Some(at(400)));
        assert!(j.check(at(1_000)).is_empty(), "{:?}", j.check(at(1_000)));
        assert!(p.is_empty());
        // The device view lags one more time: the ended pod is not opened again.
        let again = status(true, Some(EndState::OutOfMemory), 2, None);
        assert!(p
            .observe(
                on_gpu(),
                Some(&view(&[(POD, again)])),
                JobKind::Training,
                at(410)
            )
            .is_empty());
    }

    #[test]
    fn a_pods_model_and_phase_come_from_its_labels_and_are_sent_once_the_kubelet_gives_them() {
        let mut p = Pods::default();
        // First seen without the kubelet's view (it did not answer): no model yet.
        let j = p.observe(on_gpu(), None, JobKind::Inference, at(0));
        assert_eq!((j[0].model.as_deref(), j[0].phase), (None, None));
        // The view arrives with the pod's labels: the job is sent again, with them.
        let labelled = PodStatus {
            model: Some("llama-3-70b".into()),
            phase: Some(Phase::Decode),
            ..status(false, None, 0, None)
        };
        let v = view(&[(POD, labelled)]);
        let j = p.observe(on_gpu(), Some(&v), JobKind::Inference, at(60));
        assert_eq!(j.len(), 1);
        assert_eq!(
            (j[0].model.as_deref(), j[0].phase, j[0].start_at),
            (Some("llama-3-70b"), Some(Phase::Decode), at(0))
        );
        // Nothing changed: nothing sent; and it ends with them.
        assert!(p
            .observe(on_gpu(), Some(&v), JobKind::Inference, at(120))
            .is_empty());
        let j = p.observe(BTreeMap::new(), None, JobKind::Inference, at(180));
        assert_eq!(j[0].model.as_deref(), Some("llama-3-70b"));
        assert_eq!(j[0].end_at, Some(at(180)));
    }

    #[test]
    fn a_pod_gone_from_the_devices_waits_for_the_kubelet_to_say_how_it_ended() {
        let mut p = Pods::default();
        let running = status(false, None, 0, None);
        p.observe(
            on_gpu(),
            Some(&view(&[(POD, running.clone())])),
            JobKind::Batch,
            at(0),
        );
        // Gone from the devices, still Running at the kubelet: held, nothing sent.
        let none = BTreeMap::new();
        assert!(p
            .observe(
                none.clone(),
                Some(&view(&[(POD, running.clone())])),
                JobKind::Batch,
                at(100)
            )
            .is_empty());
        // The phase arrives: closed at the time it went, as it ended.
        let timeout = status(true, Some(EndState::Timeout), 0, None);
        let j = p.observe(
            none.clone(),
            Some(&view(&[(POD, timeout)])),
            JobKind::Batch,
            at(110),
        );
        assert_eq!(
            (j[0].end_at, j[0].end_state),
            (Some(at(100)), Some(EndState::Timeout))
        );

        // A pod the kubelet keeps showing as running is closed after the wait, end unknown.
        let mut p = Pods::default();
        p.observe(
            on_gpu(),
            Some(&view(&[(POD, running.clone())])),
            JobKind::Batch,
            at(0),
        );
        let v = view(&[(POD, running)]);
        assert!(p
            .observe(none.clone(), Some(&v), JobKind::Batch, at(100))
            .is_empty());
        let j = p.observe(none, Some(&v), JobKind::Batch, at(100) + END_STATE_WAIT);
        assert_eq!((j[0].end_at, j[0].end_state), (Some(at(100)), None));
    }

    #[test]
    fn a_deleted_pod_ends_as_its_disruption_announced() {
        let mut p = Pods::default();
        let preempting = status(false, Some(EndState::Preempted), 0, None);
        let open = p.observe(
            on_gpu(),
            Some(&view(&[(POD, preempting)])),
            JobKind::Training,
            at(0),
        );
        assert_eq!(open[0].end_state, None, "an open job has no end state");
        // Deleted: neither the devices nor the kubelet list it any more.
        let j = p.observe(BTreeMap::new(), Some(&view(&[])), JobKind::Training, at(50));
        assert_eq!(
            (j[0].end_at, j[0].end_state),
            (Some(at(50)), Some(EndState::Preempted))
        );
    }

    #[test]
    fn without_the_kubelet_a_pod_closes_at_once_as_before() {
        let mut p = Pods::default();
        p.observe(on_gpu(), None, JobKind::Training, at(0));
        let j = p.observe(BTreeMap::new(), None, JobKind::Training, at(10));
        assert_eq!(
            (
                j[0].end_at,
                j[0].end_state,
                j[0].restarts,
                j[0].last_checkpoint_at
            ),
            (Some(at(10)), None, None, None)
        );
    }
}
