//! Kubernetes pods seen holding GPUs, as jobs: a pod that appears is sent open from the
//! moment it was first seen, a pod that changes devices is resent with its new set, and a
//! pod that is no longer seen is sent closed at that moment.
//!
//! Used by the sources that see pods on devices (dcgm-exporter's pod labels, the kubelet's
//! PodResources API). The open pods are the source's state, spooled with its records, so a
//! restarted agent closes a pod that ended while it was down instead of forgetting it.

use crate::records::{Allocation, Job};
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use wattledger_domain::job_kind::JobKind;

/// What one observation says about a pod: its tenant and the devices it holds, each with
/// its share (`None` = the whole device).
#[derive(Debug, Clone, PartialEq)]
pub struct PodUse {
    pub tenant: String,
    pub devices: BTreeMap<String, Option<Decimal>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct OpenPod {
    tenant: String,
    start_at: DateTime<Utc>,
    #[serde(alias = "meters", deserialize_with = "devices_or_list")]
    devices: BTreeMap<String, Option<Decimal>>,
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
    /// Folds one observation (job key → use) into jobs to send: new, changed and gone pods.
    pub fn observe(
        &mut self,
        seen: BTreeMap<String, PodUse>,
        kind: JobKind,
        now: DateTime<Utc>,
    ) -> Vec<Job> {
        let mut jobs = Vec::new();
        let gone: Vec<String> = self
            .open
            .keys()
            .filter(|k| !seen.contains_key(*k))
            .cloned()
            .collect();
        for key in gone {
            let pod = self.open.remove(&key).expect("present");
            jobs.push(job(&key, &pod, kind, Some(now)));
        }
        for (key, usage) in seen {
            match self.open.get_mut(&key) {
                Some(open) if open.devices == usage.devices => {}
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

fn job(key: &str, pod: &OpenPod, kind: JobKind, end_at: Option<DateTime<Utc>>) -> Job {
    Job {
        key: key.to_owned(),
        name: Some(key.trim_start_matches("k8s:").to_owned()),
        tenant: pod.tenant.clone(),
        // The pod's GPUs say where it runs.
        site: None,
        model: None,
        kind,
        priority: None,
        submit_at: None,
        start_at: pod.start_at,
        end_at,
        // A device observation does not say how the pod ended.
        end_state: None,
        last_checkpoint_at: None,
        requeue_of: None,
        restarts: None,
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
                JobKind::Inference,
                at(10)
            )
            .is_empty());
        let moved = p.observe(
            seen(&[("k8s:a/p", &[("g1", None)])]),
            JobKind::Inference,
            at(20),
        );
        assert_eq!(
            (moved[0].start_at, moved[0].allocations[0].meter.as_str()),
            (at(0), "g1")
        );
        let gone = p.observe(BTreeMap::new(), JobKind::Inference, at(30));
        assert_eq!(gone[0].end_at, Some(at(30)));
        assert!(p.is_empty());
    }

    #[test]
    fn state_spooled_before_shares_existed_still_reads() {
        let old = serde_json::json!({"k8s:a/p": {"tenant": "t", "start_at": "2026-09-21T00:00:00Z", "meters": ["g0"]}});
        let mut p: Pods = serde_json::from_value(old).unwrap();
        let gone = p.observe(BTreeMap::new(), JobKind::Inference, at(0));
        assert_eq!(gone[0].allocations[0].meter, "g0");
        assert_eq!(gone[0].allocations[0].share, None);
    }
}
