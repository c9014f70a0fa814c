//! A scheduler job and the GPUs it held.

use crate::{Problem, Problems};
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use wattledger_domain::badput::EndState;
use wattledger_domain::job_kind::JobKind;
use wattledger_domain::phase::Phase;
use wattledger_domain::priority::Priority;
use wattledger_domain::{input, units};

const MAX_NAME_LEN: usize = 512;

wattledger_domain::record! {
    /// A job with the GPUs it held.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
    #[serde(deny_unknown_fields)]
    pub struct Job {
        /// Stable key, e.g. `slurm:<cluster>:<jobid>` or `k8s:<namespace>/<pod-uid>`.
        pub key: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub name: Option<String>,
        /// The tenant's key.
        pub tenant: String,
        /// The key of the site the job runs at. By default the site of its allocations' GPUs,
        /// which must all be at one site (a job on two sites' GPUs is reported as two jobs);
        /// needed for a new job sent without allocations. A job's site cannot change.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub site: Option<String>,
        /// The model's key, for a job that serves or trains one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub model: Option<String>,
        /// For a serving pool of a disaggregated deployment (prompt processing and generation
        /// on separate GPUs), the phase it runs; needs `model`. Its tokens count only in its
        /// phase: prompt tokens in a `prefill` pool, generated tokens in a `decode` pool.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub phase: Option<Phase> => None,
        pub kind: JobKind => JobKind::Batch,
        /// The scheduler's priority or QoS name; `normal` when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub priority: Option<Priority> => None,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub submit_at: Option<DateTime<Utc>>,
        pub start_at: DateTime<Utc>,
        /// Absent while the job runs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub end_at: Option<DateTime<Utc>>,
        /// How the job ended, as its scheduler says; with `end_at`. A training or batch job
        /// that did not complete lost what it did after `last_checkpoint_at` (all of it
        /// without one): that energy is badput.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub end_state: Option<EndState> => None,
        /// When the job last saved its state (a checkpoint it can resume from), as the job
        /// reports it: a Slurm comment, a pod annotation, or this field sent again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub last_checkpoint_at: Option<DateTime<Utc>>,
        /// The key of the job this one repeats (an attempt after a requeue, a replacement
        /// pod), at the same site: sent in this batch before it, or stored.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub requeue_of: Option<String>,
        /// Times the job's containers restarted (Kubernetes `restartCount`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub restarts: Option<i32>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub allocations: Vec<Allocation>,
    }
}

wattledger_domain::record! {
    /// A share of one GPU (or MIG instance) over an interval; the interval defaults to the
    /// job's.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
    #[serde(deny_unknown_fields)]
    pub struct Allocation {
        /// The GPU's or MIG instance's meter key, or a GPU's UUID.
        pub meter: String,
        /// 0 < share ≤ 1 of the GPU in steps of 0.000001. When absent: 1 (the whole GPU) for
        /// a GPU, and for a partition its part of its GPU (a MIG profile `3g.40gb`: 3/7; an
        /// AMD compute partition: 1/N of its board's N partitions). Decimal text (`"0.5"`) on
        /// the wire, so shares stay exact; a JSON number is read exactly too.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, example = "0.5"))]
        pub share: Option<Decimal>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub start_at: Option<DateTime<Utc>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub end_at: Option<DateTime<Utc>>,
    }
}

impl Job {
    /// Everything wrong with the job and its allocations on their own; `latest` bounds the
    /// times that have happened (an allocation's end may be scheduled ahead).
    pub fn check(&self, latest: DateTime<Utc>) -> Vec<Problem> {
        let mut p = Problems::default();
        p.key("key", &self.key);
        if let Some(name) = &self.name {
            p.text("name", name, MAX_NAME_LEN);
        }
        p.key("tenant", &self.tenant);
        if let Some(site) = &self.site {
            p.key("site", site);
        }
        if let Some(model) = &self.model {
            p.key("model", model);
        }
        if self.phase.is_some() && self.model.is_none() {
            p.add("phase", "needs the model the pool serves");
        }
        if let Some(t) = self.submit_at {
            p.time("submit_at", t, latest);
        }
        p.time("start_at", self.start_at, latest);
        if let Some(end) = self.end_at {
            p.time("end_at", end, latest);
            if end < self.start_at {
                p.add("end_at", "is before start_at");
            }
        }
        if self.end_state.is_some() && self.end_at.is_none() {
            p.add("end_state", "needs the job's end_at");
        }
        if let Some(at) = self.last_checkpoint_at {
            let ok = p.time("last_checkpoint_at", at, latest);
            if ok && self.end_at.is_some_and(|end| at > end) {
                p.add("last_checkpoint_at", "is after end_at");
            }
        }
        if let Some(original) = &self.requeue_of {
            if p.key("requeue_of", original) && *original == self.key {
                p.add("requeue_of", "names the job itself");
            }
        }
        if let Some(n) = self.restarts {
            p.within("restarts", i64::from(n), 0..=i64::from(i32::MAX));
        }
        for (k, a) in self.allocations.iter().enumerate() {
            p.nested(&format!("allocations[{k}]"), a.check(self, latest));
        }
        p.done()
    }
}

impl Allocation {
    /// The allocation's problems within `job`, whose interval it defaults to.
    fn check(&self, job: &Job, latest: DateTime<Utc>) -> Vec<Problem> {
        let mut p = Problems::default();
        p.key("meter", &self.meter);
        if let Some(share) = self.share {
            if share <= Decimal::ZERO || share > Decimal::ONE || units::share_ppm(share).is_none() {
                p.add(
                    "share",
                    "must be greater than 0 (at least 0.000001) and at most 1",
                );
            }
        }
        if let Some(t) = self.start_at {
            p.time("start_at", t, latest);
        }
        if let Some(t) = self.end_at {
            p.time("end_at", t, input::latest());
        }
        let start = self.start_at.unwrap_or(job.start_at);
        if self.end_at.or(job.end_at).is_some_and(|end| end <= start) {
            p.add("end_at", "must be after start_at");
        }
        p.done()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(h: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 2, h, 0, 0).unwrap()
    }

    fn job() -> Job {
        Job {
            key: "slurm:c1:42".into(),
            name: Some("train".into()),
            tenant: "acme".into(),
            site: None,
            model: None,
            phase: None,
            kind: JobKind::Training,
            priority: None,
            submit_at: Some(t(9)),
            start_at: t(10),
            end_at: Some(t(12)),
            end_state: None,
            last_checkpoint_at: None,
            requeue_of: None,
            restarts: None,
            allocations: vec![Allocation {
                meter: "n1-gpu0".into(),
                share: None,
                start_at: None,
                end_at: None,
            }],
        }
    }

    fn fields(j: &Job) -> Vec<String> {
        j.check(t(13)).into_iter().map(|p| p.field).collect()
    }

    #[test]
    fn a_valid_job_has_no_problems() {
        assert!(fields(&job()).is_empty());
    }

    #[test]
    fn allocation_problems_name_their_place_in_the_job() {
        let mut j = job();
        j.allocations.push(Allocation {
            meter: "n1-gpu1".into(),
            share: Some(Decimal::new(5, 7)),
            start_at: Some(t(12)),
            end_at: None,
        });
        assert_eq!(
            fields(&j),
            ["allocations[1].share", "allocations[1].end_at"]
        );
    }

    #[test]
    fn how_a_job_ended_is_checked_against_its_times() {
        let ended = Job {
            end_state: Some(EndState::Failed),
            last_checkpoint_at: Some(t(11)),
            requeue_of: Some("slurm:c1:41".into()),
            restarts: Some(2),
            ..job()
        };
        assert!(fields(&ended).is_empty());
        let bad = Job {
            end_at: None,
            last_checkpoint_at: Some(t(12) + chrono::Duration::seconds(1)),
            requeue_of: Some("slurm:c1:42".into()),
            restarts: Some(-1),
            ..ended.clone()
        };
        // Open-ended: the checkpoint after "end" is not checked, the end state is.
        assert_eq!(fields(&bad), ["end_state", "requeue_of", "restarts"]);
        let late = Job {
            last_checkpoint_at: Some(t(12) + chrono::Duration::seconds(1)),
            ..ended
        };
        assert_eq!(fields(&late), ["last_checkpoint_at"]);
    }

    #[test]
    fn shares_travel_as_exact_text() {
        let a = Allocation {
            meter: "g".into(),
            share: Some(Decimal::new(1, 1)),
            start_at: None,
            end_at: None,
        };
        let text = serde_json::to_string(&a).unwrap();
        assert_eq!(text, r#"{"meter":"g","share":"0.1"}"#);
        assert_eq!(serde_json::from_str::<Allocation>(&text).unwrap(), a);
    }
}
