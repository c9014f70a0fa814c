//! `AdmissionCheckParameters` (`wattledger.io/v1alpha1`, cluster-scoped), the object an
//! AdmissionCheck's `spec.parameters` names: what the check does when wattledger cannot be
//! asked, and the defaults of its questions. Read and checked here; the CRD
//! (`deploy/kubernetes/kueue/crd.yaml`) validates the same bounds at the API server, but an
//! object stored before a schema change, or a cluster without the CRD's validation, is read
//! by the same rules.

use crate::objects::ParametersRef;
use serde::Deserialize;
use serde_json::Value;

pub const GROUP: &str = "wattledger.io";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "AdmissionCheckParameters";
pub const PLURAL: &str = "admissioncheckparameters";

/// The longest run a question may name (the admission API's own bound: 90 days).
pub const MAX_DURATION_S: i64 = 90 * 86_400;

/// What a check answers while wattledger is unreachable or failing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum FailurePolicy {
    /// `Ready`: the job runs unmetered by admission (the message says why).
    Open,
    /// `Retry` after `retryAfterSeconds`: the job waits until wattledger answers.
    Closed,
}

/// One check's parameters, defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parameters {
    pub failure_policy: FailurePolicy,
    /// Seconds a fail-closed `Retry` holds the Workload, 1 to 86400.
    pub retry_after_seconds: u32,
    /// The namespace label naming the tenant; without it, the namespace is the tenant.
    pub tenant_label: String,
    /// The run time asked for when the Workload names none, seconds.
    pub default_duration_seconds: i64,
    /// Candidate sites when the Workload names none; empty: every site.
    pub sites: Vec<String>,
}

impl Default for Parameters {
    fn default() -> Self {
        Parameters {
            failure_policy: FailurePolicy::Closed,
            retry_after_seconds: 60,
            tenant_label: "wattledger.io/tenant".into(),
            default_duration_seconds: 3600,
            sites: Vec::new(),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParamsError {
    #[error("spec.parameters must name a {GROUP} {KIND}, not {api_group} {kind}")]
    WrongKind { api_group: String, kind: String },
    #[error("{KIND} '{0}' does not exist")]
    Missing(String),
    #[error("{KIND} '{name}': {why}")]
    Invalid { name: String, why: String },
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
struct Spec {
    failure_policy: Option<FailurePolicy>,
    retry_after_seconds: Option<i64>,
    tenant_label: Option<String>,
    default_duration_seconds: Option<i64>,
    sites: Option<Vec<String>>,
}

/// Whether `key` is a Kubernetes label key: an optional DNS-subdomain prefix and `/`, then
/// a name of 1 to 63 alphanumerics, `-`, `_` and `.` that starts and ends alphanumeric.
fn is_label_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let name_ok = (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    let prefix_ok = prefix.is_none_or(|p| {
        (1..=253).contains(&p.len())
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            })
    });
    name_ok && prefix_ok
}

impl Parameters {
    /// The parameters of a check: defaults without a reference, else the named object
    /// (`find` looks one up by name among those listed).
    pub fn resolve<'a>(
        reference: Option<&ParametersRef>,
        find: impl Fn(&str) -> Option<&'a Value>,
    ) -> Result<Parameters, ParamsError> {
        let Some(r) = reference else {
            return Ok(Parameters::default());
        };
        if r.api_group != GROUP || r.kind != KIND {
            return Err(ParamsError::WrongKind {
                api_group: r.api_group.clone(),
                kind: r.kind.clone(),
            });
        }
        let object = find(&r.name).ok_or_else(|| ParamsError::Missing(r.name.clone()))?;
        Parameters::from_object(&r.name, object)
    }

    /// Reads one object's `spec`, applies the defaults and checks the bounds.
    pub fn from_object(name: &str, object: &Value) -> Result<Parameters, ParamsError> {
        let invalid = |why: String| ParamsError::Invalid {
            name: name.to_owned(),
            why,
        };
        let spec = match object.get("spec") {
            None | Some(Value::Null) => Spec::default(),
            Some(s) => Spec::deserialize(s).map_err(|e| invalid(format!("spec: {e}")))?,
        };
        let mut p = Parameters::default();
        if let Some(f) = spec.failure_policy {
            p.failure_policy = f;
        }
        if let Some(s) = spec.retry_after_seconds {
            p.retry_after_seconds = u32::try_from(s)
                .ok()
                .filter(|s| (1..=86_400).contains(s))
                .ok_or_else(|| invalid(format!("retryAfterSeconds {s} is not 1 to 86400")))?;
        }
        if let Some(l) = spec.tenant_label {
            if !is_label_key(&l) {
                return Err(invalid(format!("tenantLabel '{l}' is not a label key")));
            }
            p.tenant_label = l;
        }
        if let Some(d) = spec.default_duration_seconds {
            if !(1..=MAX_DURATION_S).contains(&d) {
                return Err(invalid(format!(
                    "defaultDurationSeconds {d} is not 1 to {MAX_DURATION_S}"
                )));
            }
            p.default_duration_seconds = d;
        }
        if let Some(sites) = spec.sites {
            if sites.len() > 64 || sites.iter().any(|s| s.is_empty() || s.len() > 256) {
                return Err(invalid(
                    "sites: at most 64 site keys of 1 to 256 characters".into(),
                ));
            }
            p.sites = sites;
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_empty_spec_takes_every_default() {
        let p = Parameters::from_object("x", &json!({"spec": {}})).unwrap();
        assert_eq!(p, Parameters::default());
        assert_eq!(p.failure_policy, FailurePolicy::Closed);
        assert_eq!(p.retry_after_seconds, 60);
        assert_eq!(p.tenant_label, "wattledger.io/tenant");
        assert_eq!(p.default_duration_seconds, 3600);
    }

    #[test]
    fn a_full_spec_is_read() {
        let p = Parameters::from_object(
            "x",
            &json!({"spec": {"failurePolicy": "Open", "retryAfterSeconds": 300,
                "tenantLabel": "example.com/team", "defaultDurationSeconds": 7200,
                "sites": ["s1", "s2"]}}),
        )
        .unwrap();
        assert_eq!(p.failure_policy, FailurePolicy::Open);
        assert_eq!(p.retry_after_seconds, 300);
        assert_eq!(p.tenant_label, "example.com/team");
        assert_eq!(p.default_duration_seconds, 7200);
        assert_eq!(p.sites, ["s1", "s2"]);
    }

    #[test]
    fn out_of_bounds_and_unknown_fields_are_refused_by_name() {
        let bad = |spec: Value| {
            Parameters::from_object("p", &json!({ "spec": spec }))
                .unwrap_err()
                .to_string()
        };
        assert!(bad(json!({"retryAfterSeconds": 0})).contains("retryAfterSeconds 0"));
        assert!(bad(json!({"retryAfterSeconds": 86_401})).contains("86401"));
        assert!(bad(json!({"retryAfterSeconds": -5})).contains("-5"));
        assert!(bad(json!({"defaultDurationSeconds": 0})).contains("defaultDurationSeconds"));
        assert!(bad(json!({"failurePolicy": "Sometimes"})).contains("spec:"));
        assert!(bad(json!({"tenantLabel": "-bad"})).contains("tenantLabel"));
        assert!(bad(json!({"tenantLabel": "Bad_Prefix/x"})).contains("tenantLabel"));
        assert!(bad(json!({"colour": "red"})).contains("colour"));
        assert!(bad(json!({"sites": [""]})).contains("sites"));
    }

    #[test]
    fn references_must_name_an_existing_object_of_our_kind() {
        let stored = json!({"spec": {"failurePolicy": "Open"}});
        let find = |n: &str| (n == "wattledger").then_some(&stored);
        assert_eq!(
            Parameters::resolve(None, find).unwrap(),
            Parameters::default()
        );
        let ours = |name: &str| ParametersRef {
            api_group: GROUP.into(),
            kind: KIND.into(),
            name: name.into(),
        };
        assert_eq!(
            Parameters::resolve(Some(&ours("wattledger")), find)
                .unwrap()
                .failure_policy,
            FailurePolicy::Open
        );
        assert_eq!(
            Parameters::resolve(Some(&ours("other")), find),
            Err(ParamsError::Missing("other".into()))
        );
        let foreign = ParametersRef {
            api_group: "kueue.x-k8s.io".into(),
            kind: "ProvisioningRequestConfig".into(),
            name: "wattledger".into(),
        };
        assert!(matches!(
            Parameters::resolve(Some(&foreign), find),
            Err(ParamsError::WrongKind { .. })
        ));
    }

    #[test]
    fn label_keys() {
        assert!(is_label_key("team"));
        assert!(is_label_key("wattledger.io/tenant"));
        assert!(!is_label_key(""));
        assert!(!is_label_key("a/"));
        assert!(!is_label_key("/a"));
        assert!(!is_label_key(&"a".repeat(64)));
        assert!(!is_label_key("ex ample/a"));
    }
}
