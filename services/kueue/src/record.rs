//! The decision record: the annotation `wattledger.io/admission-decision` on a Workload, a
//! small JSON object naming the check, the decision, its id and, for a deferral, its
//! `start_at`. It is written before the check's state, so the id of every decision is on
//! the Workload it was made for.
//!
//! Why an annotation and not the check's message: Kueue rewrites the message whenever it
//! puts a check back to `Pending` (after an eviction, or when a ClusterQueue's checks
//! change), and that is exactly when the controller must know whether it already asked. A
//! deferral recorded here whose `start_at` is still ahead is held (`Retry` for the rest of
//! the wait) instead of asked again; once `start_at` has passed, the Workload is asked once
//! more. Only deferrals are reused: anyone who may edit a Workload may edit its annotations,
//! and a forged deferral can only delay its own job, while a forged admission would bypass
//! the check.

use crate::objects::Workload;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use uuid::Uuid;
use wattledger_domain::admission::Verdict;

pub const ANNOTATION: &str = "wattledger.io/admission-decision";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// The AdmissionCheck the decision answered.
    pub check: String,
    pub decision: Verdict,
    pub id: Uuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<DateTime<Utc>>,
}

impl Record {
    /// The Workload's record for `check`; `None` when it has none, it is for another check,
    /// or it is not one this controller wrote.
    pub fn read(wl: &Workload, check: &str) -> Option<Record> {
        let text = wl.metadata.annotations.get(ANNOTATION)?;
        if text.len() > 1024 {
            return None;
        }
        serde_json::from_str::<Record>(text)
            .ok()
            .filter(|r| r.check == check)
    }

    /// A deferral whose start is still ahead of `now`: the time to hold the Workload until.
    pub fn holds_until(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.start_at
            .filter(|at| self.decision == Verdict::Defer && *at > now)
    }

    /// The server-side apply body that sets the annotation, and nothing else, on `wl`.
    /// `resourceVersion` makes it conditional: if the Workload changed since it was read
    /// (Kueue evicted it, say), the API server refuses it and nothing is written.
    pub fn apply_body(&self, wl: &Workload) -> Value {
        let mut metadata = json!({
            "name": wl.metadata.name,
            "namespace": wl.namespace(),
            "annotations": {ANNOTATION: serde_json::to_string(self).unwrap_or_default()},
        });
        if let Some(rv) = &wl.metadata.resource_version {
            metadata["resourceVersion"] = json!(rv);
        }
        json!({
            "apiVersion": crate::objects::KUEUE_API_VERSION,
            "kind": "Workload",
            "metadata": metadata,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;

    fn wl_with(annotation: &str) -> Workload {
        serde_json::from_value(json!({"metadata": {"name": "w", "namespace": "ml",
            "resourceVersion": "41", "annotations": {ANNOTATION: annotation}}}))
        .unwrap()
    }

    #[test]
    fn a_record_round_trips_through_its_apply_body() {
        let now = Utc::now();
        let r = Record {
            check: "wattledger".into(),
            decision: Verdict::Defer,
            id: Uuid::now_v7(),
            start_at: Some(now + Duration::hours(2)),
        };
        let body = r.apply_body(&wl_with("{}"));
        assert_eq!(body["metadata"]["resourceVersion"], "41");
        assert_eq!(body["metadata"]["namespace"], "ml");
        assert!(body.get("spec").is_none() && body.get("status").is_none());
        let text = body["metadata"]["annotations"][ANNOTATION]
            .as_str()
            .unwrap();
        let back = Record::read(&wl_with(text), "wattledger").unwrap();
        assert_eq!(back, r);
        assert_eq!(back.holds_until(now), r.start_at);
        assert_eq!(back.holds_until(now + Duration::hours(2)), None);
        assert_eq!(Record::read(&wl_with(text), "another-check"), None);
    }

    #[test]
    fn only_deferrals_hold_and_foreign_text_is_no_record() {
        let id = Uuid::now_v7();
        let admit = format!(
            r#"{{"check":"c","decision":"admit","id":"{id}","start_at":"2999-01-01T00:00:00Z"}}"#
        );
        let r = Record::read(&wl_with(&admit), "c").unwrap();
        assert_eq!(r.holds_until(Utc::now()), None);
        for junk in [
            "admit",
            r#"{"check":"c","decision":"defer"}"#,
            &format!(r#"{{"check":"c","decision":"defer","id":"{id}","extra":1}}"#),
        ] {
            assert_eq!(Record::read(&wl_with(junk), "c"), None, "{junk}");
        }
    }
}
