//! From an answer (or its absence) to the check's state on the Workload, and the
//! server-side apply bodies that write it and the AdmissionCheck's `Active` condition.
//!
//! | answer | check state |
//! |---|---|
//! | admit | `Ready`; at a power cap, a `podSetUpdates` entry per pod set adding `wattledger.io/power-cap-w` |
//! | defer | `Retry` with `requeueAfterSeconds` = the seconds from `lastTransitionTime` to `start_at` |
//! | reject | `Rejected` with the reasons (Kueue then deactivates the Workload) |
//! | no GPUs | `Ready` without a question |
//! | a Workload that cannot be asked | `Rejected` naming why |
//! | wattledger unreachable, failing or refusing the token | `Ready` (failure policy `Open`) or `Retry` after `retryAfterSeconds` (`Closed`) |
//!
//! Kueue adds the Workload back to its queue at `lastTransitionTime + requeueAfterSeconds`;
//! `lastTransitionTime` is written in whole seconds (as Kubernetes stores it) and the delay
//! rounded up, so the Workload never comes back before `start_at`.

use crate::ask::annotations::POWER_CAP;
use crate::objects::{AdmissionCheck, Workload, KUEUE_API_VERSION};
use crate::params::{FailurePolicy, Parameters};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

/// The longest message written on a check state or condition, in bytes. Kueue's schema
/// allows 32768; the message is read by people in `kubectl describe`, and the reasons behind
/// a decision are a few short sentences (the full answer is stored by wattledger under its id).
pub const MAX_MESSAGE: usize = 1024;

/// What `POST /v1/admission` answers, as far as the check needs it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Answer {
    pub decision_id: Uuid,
    pub decision: Verdict,
    #[serde(default)]
    pub start_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub reasons: Vec<String>,
    #[serde(default)]
    pub power_cap_w: Option<u32>,
}

/// The server's verdict, as the domain defines it.
pub use wattledger_domain::admission::Verdict;

/// A check state Kueue acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Ready,
    Retry,
    Rejected,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Ready => "Ready",
            State::Retry => "Retry",
            State::Rejected => "Rejected",
        }
    }
}

/// When Kueue should bring a `Retry` Workload back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    /// At this time (a deferral's start): the delay is counted from the
    /// `lastTransitionTime` written, so the two always agree.
    At(DateTime<Utc>),
    /// After this many seconds (fail-closed).
    After(u32),
}

/// The state to write on one check of one Workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckUpdate {
    pub state: State,
    pub message: String,
    /// For `Retry`: when Kueue should try again.
    pub requeue: Option<Requeue>,
    /// For `Ready` at a power cap: W per GPU, added to every pod set as an annotation.
    pub power_cap_w: Option<u32>,
}

/// `now` in whole seconds: the `lastTransitionTime` written and the base of every delay.
pub fn whole_seconds(now: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(now.timestamp(), 0).unwrap_or(now)
}

/// Seconds from `from` to `at`, rounded up, within `requeueAfterSeconds`' range (0 to
/// `i32::MAX`).
fn seconds_until(from: DateTime<Utc>, at: DateTime<Utc>) -> i32 {
    let ms = (at - from).num_milliseconds().max(0);
    i32::try_from((ms + 999) / 1000).unwrap_or(i32::MAX)
}

/// `text` cut to at most [`MAX_MESSAGE`] bytes on a character boundary, with `…` where cut.
pub fn bounded(text: &str) -> String {
    if text.len() <= MAX_MESSAGE {
        return text.to_owned();
    }
    let mut end = MAX_MESSAGE - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

fn with_reasons(head: String, reasons: &[String]) -> String {
    if reasons.is_empty() {
        head
    } else {
        format!("{head}: {}", reasons.join("; "))
    }
}

impl CheckUpdate {
    /// The state for wattledger's answer.
    pub fn from_answer(a: &Answer) -> CheckUpdate {
        let id = a.decision_id;
        match a.decision {
            Verdict::Admit => {
                let head = match a.power_cap_w {
                    Some(w) => format!(
                        "wattledger: admitted at a power cap of {w} W per GPU (decision {id})"
                    ),
                    None => format!("wattledger: admitted (decision {id})"),
                };
                CheckUpdate {
                    state: State::Ready,
                    message: bounded(&with_reasons(head, &a.reasons)),
                    requeue: None,
                    power_cap_w: a.power_cap_w,
                }
            }
            Verdict::Defer => {
                // A deferral always names its start; without one, retry at once rather than
                // hold the job for a time nobody chose.
                let (head, requeue) = match a.start_at {
                    Some(at) => (
                        format!(
                            "wattledger: deferred until {} (decision {id})",
                            at.to_rfc3339_opts(SecondsFormat::Secs, true)
                        ),
                        Requeue::At(at),
                    ),
                    None => (
                        format!("wattledger: deferred (decision {id})"),
                        Requeue::After(0),
                    ),
                };
                CheckUpdate {
                    state: State::Retry,
                    message: bounded(&with_reasons(head, &a.reasons)),
                    requeue: Some(requeue),
                    power_cap_w: None,
                }
            }
            Verdict::Reject => CheckUpdate {
                state: State::Rejected,
                message: bounded(&with_reasons(
                    format!("wattledger: rejected (decision {id})"),
                    &a.reasons,
                )),
                requeue: None,
                power_cap_w: None,
            },
        }
    }

    /// A recorded deferral still ahead: `Retry` for the rest of the wait, not asked again.
    pub fn held(id: Uuid, until: DateTime<Utc>) -> CheckUpdate {
        CheckUpdate {
            state: State::Retry,
            message: format!(
                "wattledger: deferred until {} (decision {id}); still waiting",
                until.to_rfc3339_opts(SecondsFormat::Secs, true)
            ),
            requeue: Some(Requeue::At(until)),
            power_cap_w: None,
        }
    }

    /// No GPU asked for: nothing to meter or defer.
    pub fn no_gpus() -> CheckUpdate {
        CheckUpdate {
            state: State::Ready,
            message: "wattledger: no GPUs requested; admitted without a question".into(),
            requeue: None,
            power_cap_w: None,
        }
    }

    /// The Workload cannot be put as a question (a bad annotation), or wattledger refused
    /// the question as invalid: rejected, naming why, so its author can fix it.
    pub fn invalid(why: &str) -> CheckUpdate {
        CheckUpdate {
            state: State::Rejected,
            message: bounded(&format!("wattledger: cannot ask: {why}")),
            requeue: None,
            power_cap_w: None,
        }
    }

    /// wattledger could not answer: the check's failure policy decides.
    pub fn unreachable(params: &Parameters, why: &str) -> CheckUpdate {
        match params.failure_policy {
            FailurePolicy::Open => CheckUpdate {
                state: State::Ready,
                message: bounded(&format!(
                    "wattledger was unreachable ({why}); admitted by failure policy Open"
                )),
                requeue: None,
                power_cap_w: None,
            },
            FailurePolicy::Closed => CheckUpdate {
                state: State::Retry,
                message: bounded(&format!(
                    "wattledger was unreachable ({why}); retrying in {} s (failure policy Closed)",
                    params.retry_after_seconds
                )),
                requeue: Some(Requeue::After(params.retry_after_seconds)),
                power_cap_w: None,
            },
        }
    }

    /// The seconds Kueue waits, counted from `now` (the `lastTransitionTime` written).
    pub fn requeue_after_seconds(&self, now: DateTime<Utc>) -> Option<i32> {
        self.requeue.map(|r| match r {
            Requeue::At(at) => seconds_until(now, at),
            Requeue::After(s) => i32::try_from(s).unwrap_or(i32::MAX),
        })
    }

    /// The server-side apply body for `status.admissionChecks[check]` of `wl`, conditional
    /// on `resource_version`, written at `now` (whole seconds). Only this controller's entry is sent: the list is a map keyed
    /// by name, so the other checks' entries and Kueue's own fields (`retryCount`) stay.
    pub fn apply_body(
        &self,
        wl: &Workload,
        check: &str,
        resource_version: Option<&str>,
        now: DateTime<Utc>,
    ) -> Value {
        let mut entry = json!({
            "name": check,
            "state": self.state.as_str(),
            "message": self.message,
            "lastTransitionTime": now.to_rfc3339_opts(SecondsFormat::Secs, true),
        });
        if let Some(s) = self.requeue_after_seconds(now) {
            entry["requeueAfterSeconds"] = json!(s);
        }
        if let Some(w) = self.power_cap_w {
            let updates: Vec<Value> = wl
                .spec
                .pod_sets
                .iter()
                .map(|p| json!({"name": p.name, "annotations": {POWER_CAP: w.to_string()}}))
                .collect();
            entry["podSetUpdates"] = json!(updates);
        }
        let mut metadata = json!({"name": wl.metadata.name, "namespace": wl.namespace()});
        if let Some(rv) = resource_version {
            metadata["resourceVersion"] = json!(rv);
        }
        json!({
            "apiVersion": KUEUE_API_VERSION,
            "kind": "Workload",
            "metadata": metadata,
            "status": {"admissionChecks": [entry]},
        })
    }
}

/// The `Active` condition a check of ours should carry: True while its parameters resolve,
/// False naming the problem (Kueue then keeps the ClusterQueues using it inactive, so no
/// Workload waits on a check that cannot be answered as configured). Reasons and the active
/// message are those Kueue's own check controllers write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Active {
    pub status: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Active {
    pub fn ok() -> Active {
        Active {
            status: true,
            reason: "Active",
            message: "The admission check is active".into(),
        }
    }

    pub fn bad_parameters(why: &str) -> Active {
        Active {
            status: false,
            reason: "BadParametersRef",
            message: bounded(why),
        }
    }

    fn status_text(&self) -> &'static str {
        if self.status {
            "True"
        } else {
            "False"
        }
    }

    /// Whether `ac` already carries this condition (for its current generation): then
    /// nothing is written.
    pub fn is_current(&self, ac: &AdmissionCheck) -> bool {
        ac.condition("Active").is_some_and(|c| {
            c.status == self.status_text()
                && c.reason == self.reason
                && c.message == self.message
                && c.observed_generation == ac.metadata.generation
        })
    }

    /// The server-side apply body for the condition; the transition time is kept while the
    /// status does not change.
    pub fn apply_body(&self, ac: &AdmissionCheck, now: DateTime<Utc>) -> Value {
        let since = ac
            .condition("Active")
            .filter(|c| c.status == self.status_text())
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| now.to_rfc3339_opts(SecondsFormat::Secs, true));
        let mut condition = json!({
            "type": "Active",
            "status": self.status_text(),
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": since,
        });
        if let Some(g) = ac.metadata.generation {
            condition["observedGeneration"] = json!(g);
        }
        json!({
            "apiVersion": KUEUE_API_VERSION,
            "kind": "AdmissionCheck",
            "metadata": {"name": ac.metadata.name},
            "status": {"conditions": [condition]},
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;

    fn answer(v: Value) -> Answer {
        serde_json::from_value(v).unwrap()
    }

    fn workload() -> Workload {
        serde_json::from_value(json!({"metadata": {"name": "w", "namespace": "ml"},
            "spec": {"podSets": [{"name": "launcher"}, {"name": "workers", "count": 4}]}}))
        .unwrap()
    }

    #[test]
    fn a_deferral_retries_exactly_at_its_start() {
        let now = whole_seconds(Utc::now());
        let start = now + Duration::seconds(5400) + Duration::milliseconds(250);
        let id = Uuid::now_v7();
        let a = answer(
            json!({"decision_id": id, "decision": "defer", "start_at": start,
            "reasons": ["a cleaner window saves 75%"], "estimate_now": {}}),
        );
        let u = CheckUpdate::from_answer(&a);
        assert_eq!(u.state, State::Retry);
        // Rounded up: Kueue never requeues before the start.
        assert_eq!(u.requeue_after_seconds(now), Some(5401));
        assert!(u.message.contains(&id.to_string()), "{}", u.message);
        assert!(u.message.ends_with("a cleaner window saves 75%"));
        let body = u.apply_body(&workload(), "wattledger", Some("7"), now);
        let entry = &body["status"]["admissionChecks"][0];
        assert_eq!(entry["state"], "Retry");
        assert_eq!(entry["requeueAfterSeconds"], 5401);
        let ltt: DateTime<Utc> = entry["lastTransitionTime"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(ltt, now);
        assert_eq!(body["metadata"]["resourceVersion"], "7");
        assert!(entry.get("podSetUpdates").is_none());
    }

    #[test]
    fn an_admission_at_a_power_cap_annotates_every_pod_set() {
        let a = answer(json!({"decision_id": Uuid::now_v7(), "decision": "admit",
            "power_cap_w": 350, "reasons": []}));
        let u = CheckUpdate::from_answer(&a);
        assert_eq!(u.state, State::Ready);
        assert!(u.message.contains("power cap of 350 W"));
        let body = u.apply_body(&workload(), "wattledger", None, Utc::now());
        let entry = &body["status"]["admissionChecks"][0];
        assert_eq!(
            entry["podSetUpdates"],
            json!([{"name": "launcher", "annotations": {"wattledger.io/power-cap-w": "350"}},
                   {"name": "workers", "annotations": {"wattledger.io/power-cap-w": "350"}}])
        );
        assert!(entry.get("requeueAfterSeconds").is_none());
        assert!(body["metadata"].get("resourceVersion").is_none());
    }

    #[test]
    fn a_rejection_carries_its_reasons_bounded() {
        let long = "x".repeat(5000);
        let a = answer(json!({"decision_id": Uuid::now_v7(), "decision": "reject",
            "reasons": ["hard budget of tenant a exceeded", long]}));
        let u = CheckUpdate::from_answer(&a);
        assert_eq!(u.state, State::Rejected);
        assert!(u.message.contains("hard budget of tenant a exceeded"));
        assert!(u.message.len() <= MAX_MESSAGE && u.message.ends_with('…'));
        // Cut on a character boundary.
        let wide = bounded(&"é".repeat(2000));
        assert!(wide.len() <= MAX_MESSAGE && wide.ends_with('…'));
    }

    #[test]
    fn unreachable_follows_the_failure_policy() {
        let closed = Parameters {
            retry_after_seconds: 120,
            ..Parameters::default()
        };
        let now = Utc::now();
        let u = CheckUpdate::unreachable(&closed, "connection refused");
        assert_eq!(
            (u.state, u.requeue_after_seconds(now)),
            (State::Retry, Some(120))
        );
        assert!(u.message.contains("connection refused") && u.message.contains("Closed"));
        let open = Parameters {
            failure_policy: FailurePolicy::Open,
            ..Parameters::default()
        };
        let u = CheckUpdate::unreachable(&open, "HTTP 503");
        assert_eq!(
            (u.state, u.requeue_after_seconds(now)),
            (State::Ready, None)
        );
        assert!(u.message.contains("unreachable") && u.message.contains("Open"));
    }

    #[test]
    fn a_held_deferral_waits_the_rest() {
        let now = whole_seconds(Utc::now());
        let u = CheckUpdate::held(Uuid::nil(), now + Duration::seconds(90));
        assert_eq!(
            (u.state, u.requeue_after_seconds(now)),
            (State::Retry, Some(90))
        );
        // Written later, the delay is what is left.
        assert_eq!(
            u.requeue_after_seconds(now + Duration::seconds(30)),
            Some(60)
        );
        // A start in the past (a stale record) retries at once.
        assert_eq!(seconds_until(now, now - Duration::hours(1)), 0);
    }

    #[test]
    fn kueues_own_active_condition_reads_as_current() {
        // The condition Kueue's provisioning controller writes, on a real AdmissionCheck:
        // ours writes the same, so a check already marked needs no write.
        let ac: AdmissionCheck = serde_json::from_value(crate::objects::fixture(
            "admissioncheck-v1beta2-active.yaml",
        ))
        .unwrap();
        assert!(Active::ok().is_current(&ac));
        let body = Active::ok().apply_body(&ac, Utc::now());
        assert_eq!(
            body["status"]["conditions"][0]["lastTransitionTime"], "2024-05-03T20:00:00Z",
            "the transition time stays while the status does not change"
        );
        assert!(!Active::bad_parameters("x").is_current(&ac));
    }

    #[test]
    fn the_active_condition_is_written_only_when_it_changes() {
        let mut ac: AdmissionCheck = serde_json::from_value(json!({
            "metadata": {"name": "wattledger", "generation": 2},
            "spec": {"controllerName": "wattledger.io/admission"}}))
        .unwrap();
        let want = Active::ok();
        assert!(!want.is_current(&ac));
        let now = Utc::now();
        let body = want.apply_body(&ac, now);
        let c = &body["status"]["conditions"][0];
        assert_eq!(
            (
                &c["type"],
                &c["status"],
                &c["reason"],
                &c["observedGeneration"]
            ),
            (
                &json!("Active"),
                &json!("True"),
                &json!("Active"),
                &json!(2)
            )
        );
        ac.status.conditions = vec![serde_json::from_value(c.clone()).unwrap()];
        assert!(want.is_current(&ac));
        // A changed spec (new generation) or a parameter problem is written again.
        ac.metadata.generation = Some(3);
        assert!(!want.is_current(&ac));
        let bad = Active::bad_parameters("AdmissionCheckParameters 'x' does not exist");
        assert!(!bad.is_current(&ac));
        let c = &bad.apply_body(&ac, now)["status"]["conditions"][0];
        assert_eq!(
            (&c["status"], &c["reason"]),
            (&json!("False"), &json!("BadParametersRef"))
        );
    }
}
