//! The Kueue objects this controller reads (`kueue.x-k8s.io/v1beta2` Workload and
//! AdmissionCheck), as typed views over the JSON the API server returns: only the fields the
//! controller uses, everything else ignored, nothing assumed about values (a container's GPU
//! limit may be a number or a string; the count and the annotations come from whoever wrote
//! the job).

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// Kueue's API group and the version this controller speaks.
pub const KUEUE_GROUP: &str = "kueue.x-k8s.io";
pub const KUEUE_VERSION: &str = "v1beta2";
pub const KUEUE_API_VERSION: &str = "kueue.x-k8s.io/v1beta2";

/// The `spec.controllerName` of the AdmissionChecks this controller answers for.
pub const CONTROLLER_NAME: &str = "wattledger.io/admission";

/// The parts of `metadata` the controller reads.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Meta {
    pub name: String,
    pub namespace: Option<String>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub generation: Option<i64>,
    pub deletion_timestamp: Option<String>,
    pub annotations: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
}

/// A `metav1.Condition`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    pub last_transition_time: Option<String>,
    pub observed_generation: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Workload {
    #[serde(default)]
    pub metadata: Meta,
    #[serde(default)]
    pub spec: WorkloadSpec,
    #[serde(default)]
    pub status: WorkloadStatus,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkloadSpec {
    pub pod_sets: Vec<PodSet>,
    pub maximum_execution_time_seconds: Option<i64>,
    pub priority_class_ref: Option<PriorityClassRef>,
    /// `false` once deactivated (by a user, or by Kueue after a `Rejected` check).
    pub active: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct PriorityClassRef {
    pub name: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSet {
    #[serde(default = "default_pod_set_name")]
    pub name: String,
    /// Kueue's default is 1; a negative count (which the CRD refuses) is checked where used.
    #[serde(default = "default_count")]
    pub count: i64,
    #[serde(default)]
    pub template: PodTemplate,
}

fn default_pod_set_name() -> String {
    "main".into()
}

fn default_count() -> i64 {
    1
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct PodTemplate {
    pub metadata: Meta,
    pub spec: PodSpec,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodSpec {
    pub containers: Vec<Container>,
    pub init_containers: Vec<Container>,
    pub priority_class_name: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Container {
    pub resources: Resources,
}

/// Quantities as written: a number or a string.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Resources {
    pub limits: BTreeMap<String, Value>,
    pub requests: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkloadStatus {
    pub conditions: Vec<Condition>,
    pub admission_checks: Vec<CheckState>,
}

/// One entry of `status.admissionChecks[]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CheckState {
    pub name: String,
    /// `Pending`, `Ready`, `Retry` or `Rejected`.
    pub state: String,
    pub message: String,
    pub last_transition_time: Option<String>,
    pub requeue_after_seconds: Option<i64>,
}

impl Workload {
    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or("default")
    }

    /// Whether Kueue holds quota for it now (condition `QuotaReserved` True): only then are
    /// its admission checks evaluated, and only then may a controller set their state.
    pub fn quota_reserved(&self) -> bool {
        self.status
            .conditions
            .iter()
            .any(|c| c.kind == "QuotaReserved" && c.status == "True")
    }

    /// The state of the check `name` on this Workload, if Kueue put it there.
    pub fn check(&self, name: &str) -> Option<&CheckState> {
        self.status.admission_checks.iter().find(|c| c.name == name)
    }

    /// The checks named in `ours` that wait for an answer: the Workload holds quota, is
    /// active and not being deleted, and the check is `Pending`.
    pub fn pending_checks<'a>(&'a self, ours: &[&str]) -> Vec<&'a str> {
        if !self.quota_reserved()
            || self.spec.active == Some(false)
            || self.metadata.deletion_timestamp.is_some()
        {
            return Vec::new();
        }
        self.status
            .admission_checks
            .iter()
            .filter(|c| c.state == "Pending" && ours.contains(&c.name.as_str()))
            .map(|c| c.name.as_str())
            .collect()
    }

    /// An annotation of the Workload or, where it has none, of its first pod set that has
    /// one: Kueue builds the Workload from the job, and a job's author writes annotations on
    /// the pod template, which Kueue copies into the pod sets.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .get(key)
            .map(String::as_str)
            .or_else(|| {
                self.spec
                    .pod_sets
                    .iter()
                    .find_map(|p| p.template.metadata.annotations.get(key))
                    .map(String::as_str)
            })
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct AdmissionCheck {
    #[serde(default)]
    pub metadata: Meta,
    #[serde(default)]
    pub spec: AdmissionCheckSpec,
    #[serde(default)]
    pub status: AdmissionCheckStatus,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AdmissionCheckSpec {
    pub controller_name: String,
    pub parameters: Option<ParametersRef>,
}

/// `spec.parameters` of an AdmissionCheck.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ParametersRef {
    pub api_group: String,
    pub kind: String,
    pub name: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct AdmissionCheckStatus {
    pub conditions: Vec<Condition>,
}

impl AdmissionCheck {
    pub fn is_ours(&self) -> bool {
        self.spec.controller_name == CONTROLLER_NAME
    }

    pub fn condition(&self, kind: &str) -> Option<&Condition> {
        self.status.conditions.iter().find(|c| c.kind == kind)
    }
}

/// The Kueue objects in `tests/fixtures/kueue/` (real v1beta2 objects from Kueue's docs and
/// KEPs; their NOTES.md says where each comes from), as JSON.
#[cfg(test)]
pub(crate) fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/../../tests/fixtures/kueue/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_with_quota_and_a_pending_check_waits_on_that_check_only() {
        let wl: Workload =
            serde_json::from_value(fixture("workload-v1beta2-pending-check.yaml")).unwrap();
        assert_eq!(wl.namespace(), "team-a");
        assert!(wl.quota_reserved());
        assert_eq!(wl.spec.pod_sets[0].count, 3);
        assert_eq!(wl.pending_checks(&["dws-prov", "other"]), ["dws-prov"]);
        assert!(wl.pending_checks(&["other"]).is_empty());

        // Deactivated, being deleted, or without quota: nothing to answer.
        let mut off = wl.clone();
        off.spec.active = Some(false);
        assert!(off.pending_checks(&["dws-prov"]).is_empty());
        let mut deleting = wl.clone();
        deleting.metadata.deletion_timestamp = Some("2024-05-03T20:05:00Z".into());
        assert!(deleting.pending_checks(&["dws-prov"]).is_empty());
        let mut released = wl.clone();
        released.status.conditions[0].status = "False".into();
        assert!(released.pending_checks(&["dws-prov"]).is_empty());
    }

    #[test]
    fn checks_in_retry_are_not_pending() {
        let wl: Workload = serde_json::from_value(fixture("workload-v1beta2-retry.yaml")).unwrap();
        assert_eq!(wl.status.admission_checks.len(), 3);
        let budget = wl.check("budget-check").unwrap();
        assert_eq!(
            (budget.state.as_str(), budget.requeue_after_seconds),
            ("Retry", Some(50_400))
        );
        assert_eq!(
            wl.check("license-check").unwrap().requeue_after_seconds,
            None
        );
        assert!(wl
            .pending_checks(&["budget-check", "gpu-availability", "license-check"])
            .is_empty());
    }

    #[test]
    fn admission_checks_are_ours_only_by_controller_name() {
        let ac: AdmissionCheck =
            serde_json::from_value(fixture("admissioncheck-v1beta2.yaml")).unwrap();
        assert_eq!(
            ac.spec.controller_name,
            "kueue.x-k8s.io/provisioning-request"
        );
        assert!(!ac.is_ours());
        assert_eq!(
            ac.spec.parameters.as_ref().unwrap().kind,
            "ProvisioningRequestConfig"
        );
        assert!(ac.condition("Active").is_none());
        let mut mine = ac.clone();
        mine.spec.controller_name = CONTROLLER_NAME.into();
        assert!(mine.is_ours());
    }
}
