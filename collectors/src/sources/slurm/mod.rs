//! Slurm: jobs and the GPUs they held, from `sacct --json` over a sliding time window, with
//! the GPU indices of running jobs from `squeue --json` (accounting keeps only GPU counts).
//!
//! Indices seen while a job runs are kept in the source's spooled state, so a job that ends
//! between two polls, or across an agent restart, is still sent with its GPUs.

pub mod parse;

use super::gpu_meter::meter_key;
use super::{
    saved, BoxFuture, BuildError, Collected, Source, SourceConfig, SourceContext, SourceError,
    StateError,
};
use crate::records::{Allocation, Batch, Job};
use chrono::{DateTime, Duration, Utc};
use parse::{NodeGpus, SlurmJob};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use wattledger_domain::badput::EndState;
use wattledger_domain::job_kind::JobKind;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmConfig {
    pub name: Option<String>,
    /// Overrides the cluster name Slurm reports (the middle of `slurm:<cluster>:<jobid>`).
    pub cluster: Option<String>,
    #[serde(default = "default_sacct")]
    pub sacct: String,
    /// `squeue`, for the GPU indices of running jobs; empty to skip.
    #[serde(default = "default_squeue")]
    pub squeue: String,
    #[serde(default = "default_interval")]
    pub interval_s: f64,
    /// How far back the first poll reaches.
    #[serde(default = "default_lookback")]
    pub lookback_s: i64,
    /// Account → tenant key; an unmapped account is its own tenant key.
    #[serde(default)]
    pub accounts: BTreeMap<String, String>,
    /// Partition → job kind; others are `default_kind`.
    #[serde(default)]
    pub partition_kinds: BTreeMap<String, JobKind>,
    #[serde(default = "default_kind")]
    pub default_kind: JobKind,
    /// Slurm node name → node meter key; unmapped nodes keep their name.
    #[serde(default)]
    pub node_meters: BTreeMap<String, String>,
    #[serde(default = "super::gpu_meter::default_gpu_meter")]
    pub gpu_meter: String,
    /// GPUs per node, so an exclusive job whose indices were never seen still gets its GPUs.
    pub gpus_per_node: Option<u32>,
}

fn default_sacct() -> String {
    "sacct".into()
}
fn default_squeue() -> String {
    "squeue".into()
}
fn default_interval() -> f64 {
    60.0
}
fn default_lookback() -> i64 {
    86_400
}
fn default_kind() -> JobKind {
    JobKind::Batch
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct State {
    /// Where the next window starts.
    since: Option<DateTime<Utc>>,
    /// GPU indices per job key and node, seen while the job ran.
    indices: BTreeMap<String, BTreeMap<String, Vec<u32>>>,
    /// What was last sent per job, so an unchanged job is not sent again.
    sent: BTreeMap<String, String>,
    /// The start (unix s) of each attempt of a job id, in the order seen: Slurm keeps one id
    /// across requeues, the ledger keeps each attempt as its own job.
    #[serde(default)]
    attempts: BTreeMap<String, Vec<i64>>,
    /// The last checkpoint each attempt (`<key>@<start>`) wrote in its comment, as squeue
    /// showed it, also just after it ended: accounting keeps a job's comment only with
    /// `AccountingStoreFlags=job_comment`.
    #[serde(default)]
    checkpoints: BTreeMap<String, DateTime<Utc>>,
}

impl SourceConfig for SlurmConfig {
    fn name(&self) -> String {
        self.name.clone().unwrap_or_else(|| "slurm".into())
    }

    fn interval(&self) -> std::time::Duration {
        super::interval(self.interval_s)
    }

    fn build(&self, context: &SourceContext) -> Result<Box<dyn Source>, BuildError> {
        Ok(Box::new(SlurmSource::new(self.clone(), &context.site)))
    }
}

pub struct SlurmSource {
    config: SlurmConfig,
    /// The agent's site: a job is sent with it, since one sent before its GPUs are known
    /// (or without any) has no other way to say where it runs.
    site: String,
    state: State,
    warned_no_indices: std::collections::BTreeSet<String>,
    /// Jobs squeue listed in this poll.
    live: std::collections::BTreeSet<String>,
}

impl SlurmSource {
    pub fn new(config: SlurmConfig, site: &str) -> Self {
        SlurmSource {
            config,
            site: site.to_owned(),
            state: State::default(),
            warned_no_indices: Default::default(),
            live: Default::default(),
        }
    }

    fn key(&self, j: &SlurmJob) -> String {
        match &self.config.cluster {
            Some(c) => format!("slurm:{c}:{}", j.job_id),
            None => j.key(),
        }
    }

    /// Remembers the GPU indices live jobs hold.
    fn learn(&mut self, live: &[SlurmJob]) {
        for j in live {
            // The job (whose attempts are kept) and the attempt running now.
            self.live.insert(self.key(j));
            let Some(start) = j.start else { continue };
            if let Some(at) = parse::checkpoint_in_comment(&j.comment) {
                let attempt = format!("{}@{start}", self.key(j));
                self.live.insert(attempt.clone());
                self.state.checkpoints.insert(attempt, at);
            }
            // A pending job's start is the controller's estimate, not an attempt.
            if !j.state.contains("RUNNING") {
                continue;
            }
            let (key, _) = self.attempt(j, start);
            self.live.insert(key.clone());
            // Indices belong to the attempt that holds them (a requeued job may restart on
            // other GPUs).
            if j.gpus.is_empty() {
                continue;
            }
            let per_node = j
                .gpus
                .iter()
                .map(|g: &NodeGpus| (g.node.clone(), g.indices.clone()))
                .collect();
            self.state.indices.insert(key, per_node);
        }
    }

    /// The key of the attempt of `j` that started at `start`, and the key of the attempt it
    /// repeats: the first attempt has the job's key, the n-th after it `<key>+<n>`.
    fn attempt(&mut self, j: &SlurmJob, start: i64) -> (String, Option<String>) {
        let base = self.key(j);
        let starts = self.state.attempts.entry(base.clone()).or_default();
        let n = match starts.iter().position(|s| *s == start) {
            Some(n) => n,
            None => {
                starts.push(start);
                starts.len() - 1
            }
        };
        let key_of = |n: usize| match n {
            0 => base.clone(),
            n => format!("{base}+{n}"),
        };
        (key_of(n), n.checked_sub(1).map(key_of))
    }

    /// The accounting jobs as records: started jobs only, unchanged ones left out.
    fn records(&mut self, jobs: &[SlurmJob], polled_from: DateTime<Utc>) -> Collected {
        let mut out = Vec::new();
        let mut seen = BTreeMap::new();
        let mut jobs: Vec<&SlurmJob> = jobs.iter().collect();
        // Attempts of one id in the order they ran, so each gets its number.
        jobs.sort_by_key(|j| (j.job_id, j.start));
        let mut bases = std::collections::BTreeSet::new();
        for j in jobs {
            let (Some(start), false) = (j.start, j.account.is_empty()) else {
                continue;
            };
            let base = self.key(j);
            bases.insert(base.clone());
            let (key, requeue_of) = self.attempt(j, start);
            let start_at = at(start);
            let end_at = j.end.map(at);
            // A job has an end state once it has ended; a state this source does not know
            // stays unknown (no badput) rather than guessed.
            let end_state = end_at.and_then(|_| EndState::of_slurm(&j.state));
            let last_checkpoint_at = parse::checkpoint_in_comment(&j.comment).max(
                self.state
                    .checkpoints
                    .get(&format!("{base}@{start}"))
                    .copied(),
            );
            let mut gpus: Vec<(String, u32)> = Vec::new();
            let known = self.state.indices.get(&key).cloned().or_else(|| {
                (!j.gpus.is_empty()).then(|| {
                    j.gpus
                        .iter()
                        .map(|g| (g.node.clone(), g.indices.clone()))
                        .collect()
                })
            });
            match (known, j.gpu_count, self.config.gpus_per_node) {
                (Some(per_node), _, _) => {
                    for (node, idx) in per_node {
                        gpus.extend(idx.into_iter().map(|i| (node.clone(), i)));
                    }
                }
                (None, Some(n), Some(per)) if n > 0 && n == per * j.nodes.len() as u32 => {
                    for node in &j.nodes {
                        gpus.extend((0..per).map(|i| (node.clone(), i)));
                    }
                }
                (None, Some(n), _) if n > 0 && self.warned_no_indices.insert(key.clone()) => {
                    tracing::warn!(job = %key, gpus = n,
                        "no GPU indices known for this job (it was never seen running by squeue); sent without allocations");
                }
                _ => {}
            }
            let allocations = gpus
                .iter()
                .map(|(node, i)| {
                    let node_key = self.config.node_meters.get(node).unwrap_or(node);
                    Allocation {
                        meter: meter_key(&self.config.gpu_meter, node_key, *i, "", None),
                        share: None,
                        start_at: None,
                        end_at: None,
                    }
                })
                .collect();
            let job = Job {
                key: key.clone(),
                name: Some(j.name.clone()).filter(|n| !n.is_empty()),
                tenant: self
                    .config
                    .accounts
                    .get(&j.account)
                    .cloned()
                    .unwrap_or_else(|| j.account.clone()),
                site: Some(self.site.clone()),
                model: None,
                phase: None,
                kind: self
                    .config
                    .partition_kinds
                    .get(&j.partition)
                    .copied()
                    .unwrap_or(self.config.default_kind),
                priority: None,
                submit_at: j.submit.map(at),
                start_at,
                end_at,
                end_state,
                last_checkpoint_at,
                requeue_of,
                restarts: None,
                allocations,
            };
            let fingerprint = serde_json::to_string(&job).expect("jobs serialize");
            if self.state.sent.get(&key) != Some(&fingerprint) {
                out.push(job);
            }
            seen.insert(key, fingerprint);
        }
        // A finished job stays in the sliding window for a while and is compared with what
        // was sent every poll, so its indices are kept until it leaves the window (dropping
        // them at its end would resend it without GPUs). Jobs squeue showed that accounting
        // does not list yet (its row lags submission) keep theirs too.
        let live = std::mem::take(&mut self.live);
        self.state
            .indices
            .retain(|k, _| seen.contains_key(k) || live.contains(k));
        self.state
            .attempts
            .retain(|k, _| bases.contains(k) || live.contains(k));
        self.state.checkpoints.retain(|k, _| {
            let base = k.rsplit_once('@').map_or(k.as_str(), |(b, _)| b);
            bases.contains(base) || live.contains(k)
        });
        self.state.sent = seen;
        // The next window overlaps this one, so a job that changes at the edge is not missed.
        self.state.since = Some(polled_from);
        Collected::new(
            [Batch::Jobs(out)],
            Some(serde_json::to_value(&self.state).expect("state serializes")),
        )
    }
}

fn at(unix: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(unix, 0).unwrap_or(DateTime::UNIX_EPOCH)
}

async fn run_json(program: &str, args: &[String]) -> Result<String, SourceError> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .env("TZ", "UTC")
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                SourceError::Unavailable(format!("{program} is not installed or not on PATH"))
            } else {
                SourceError::Fetch {
                    what: program.to_owned(),
                    reason: e.to_string(),
                }
            }
        })?;
    if !out.status.success() {
        return Err(SourceError::Fetch {
            what: format!("{program} {}", args.join(" ")),
            reason: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    String::from_utf8(out.stdout).map_err(|e| SourceError::Parse {
        what: program.to_owned(),
        reason: e.to_string(),
    })
}

impl Source for SlurmSource {
    fn restore(&mut self, state: serde_json::Value) -> Result<(), StateError> {
        self.state = saved(state)?;
        Ok(())
    }

    fn collect(&mut self, now: DateTime<Utc>) -> BoxFuture<'_, Result<Collected, SourceError>> {
        Box::pin(async move {
            let parse = |what: &str, e: parse::SlurmError| SourceError::Parse {
                what: what.to_owned(),
                reason: e.to_string(),
            };
            if !self.config.squeue.is_empty() {
                let text = run_json(&self.config.squeue, &["--json".into(), "-a".into()]).await?;
                let live = parse::parse_jobs(&text).map_err(|e| parse("squeue --json", e))?;
                self.learn(&live);
            }
            let since = self
                .state
                .since
                .unwrap_or(now - Duration::seconds(self.config.lookback_s));
            let fmt = |t: DateTime<Utc>| t.format("%Y-%m-%dT%H:%M:%S").to_string();
            // `-D`: every attempt of a requeued job, each with its own times and state.
            let args = vec![
                "--json".into(),
                "-a".into(),
                "-D".into(),
                "-S".into(),
                fmt(since),
                "-E".into(),
                fmt(now + Duration::seconds(60)),
            ];
            let text = run_json(&self.config.sacct, &args).await?;
            let jobs = parse::parse_jobs(&text).map_err(|e| parse("sacct --json", e))?;
            // Running jobs stay in every window (sacct selects jobs active in it), so the
            // window may start shortly before this poll.
            Ok(self.records(&jobs, now - Duration::seconds(300)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn source() -> SlurmSource {
        SlurmSource::new(
            toml::from_str("accounts = { \"tenant-a\" = \"acme\" }\npartition_kinds = { debug = \"interactive\" }")
                .unwrap(),
            "s1",
        )
    }

    #[test]
    fn running_jobs_get_their_gpus_from_squeue_and_keep_them_after_the_end() {
        let live = parse::parse_jobs(&fixtures::read(
            "slurm/slurmctld-v0.0.44-job-gpus-running.json",
        ))
        .unwrap();
        let mut s = source();
        s.learn(&live);
        // Accounting shows the running job without an end (slurmctld gives the projected one).
        let mut running = live.clone();
        running[0].end = None;
        let c = s.records(&running, at(0));
        let Batch::Jobs(jobs) = &c.batches[0] else {
            panic!()
        };
        let j = &jobs[0];
        let l = &live[0];
        assert_eq!(j.key, format!("slurm:{}:{}", l.cluster, l.job_id));
        let want: usize = l.gpus.iter().map(|g| g.indices.len()).sum();
        assert!(want > 0);
        assert_eq!(j.allocations.len(), want);
        assert_eq!(
            j.allocations[0].meter,
            format!("{}-gpu{}", l.gpus[0].node, l.gpus[0].indices[0])
        );
        // Nothing changed: nothing is sent again.
        assert!(s.records(&running, at(0)).batches.is_empty());
        // The agent restarts and sees the job finished in accounting, without gres_detail.
        let state = c.state.unwrap();
        let mut s = source();
        s.restore(state).unwrap();
        let mut done = l.clone();
        done.gpus.clear();
        done.end = Some(l.start.unwrap() + 3600);
        let c = s.records(&[done.clone()], at(0));
        let Batch::Jobs(jobs) = &c.batches[0] else {
            panic!()
        };
        assert_eq!(jobs[0].allocations.len(), want);
        assert!(jobs[0].end_at.is_some());
        // The finished job is still in the next window: not resent (found by the Slurm lab
        // test, where it came back without its GPUs).
        assert!(s.records(&[done.clone()], at(0)).batches.is_empty());
        // Once it leaves the window, its indices go.
        s.records(&[], at(0));
        assert!(s.state.indices.is_empty());
    }

    fn sent(c: &Collected) -> Vec<Job> {
        match c.batches.first() {
            Some(Batch::Jobs(j)) => j.clone(),
            _ => vec![],
        }
    }

    #[test]
    fn how_jobs_ended_comes_from_accounting_and_each_requeued_attempt_is_a_job() {
        let jobs = parse::parse_jobs(&fixtures::read("slurm/sacct-22.05.json")).unwrap();
        let mut s = source();
        let out = sent(&s.records(&jobs, at(0)));
        let state_of = |id: u64| {
            let key = format!("slurm:{}:{id}", jobs[0].cluster);
            out.iter().find(|j| j.key == key).unwrap().end_state
        };
        assert_eq!(state_of(1), Some(EndState::Completed));
        assert_eq!(state_of(6), Some(EndState::Failed));
        assert_eq!(state_of(7), Some(EndState::Cancelled));
        assert_eq!(state_of(8), Some(EndState::Timeout));

        // Job 6 was requeued: `sacct -D` lists the first attempt REQUEUED and the second
        // (which wrote a checkpoint in its comment) FAILED, with the same id.
        let mut first = jobs.iter().find(|j| j.job_id == 6).unwrap().clone();
        first.state = "REQUEUED".into();
        let mut second = first.clone();
        second.state = "FAILED".into();
        second.start = first.end.map(|e| e + 30);
        second.end = second.start.map(|s| s + 600);
        second.comment = format!("checkpoint={}", second.start.unwrap() + 300);
        let out = sent(&s.records(&[second.clone(), first.clone()], at(0)));
        let base = format!("slurm:{}:6", first.cluster);
        let (a, b) = (&out[0], &out[1]);
        assert_eq!(
            (a.key.as_str(), a.end_state),
            (base.as_str(), Some(EndState::Requeued))
        );
        assert_eq!(b.key, format!("{base}+1"));
        assert_eq!(b.requeue_of.as_deref(), Some(base.as_str()));
        assert_eq!(b.end_state, Some(EndState::Failed));
        assert_eq!(
            b.last_checkpoint_at.map(|t| t.timestamp()),
            Some(second.start.unwrap() + 300)
        );
        // The numbering survives a restart of the agent.
        let state = s
            .records(&[first.clone(), second.clone()], at(0))
            .state
            .unwrap();
        let mut s = source();
        s.restore(state).unwrap();
        second.end = second.end.map(|e| e + 1);
        let out = sent(&s.records(&[first, second], at(0)));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].key, format!("{base}+1"));
    }

    #[test]
    fn accounting_jobs_map_accounts_and_skip_the_unstarted() {
        let jobs = parse::parse_jobs(&fixtures::read("slurm/sacct-22.05.json")).unwrap();
        let mut s = source();
        let c = s.records(&jobs, at(0));
        let started = jobs
            .iter()
            .filter(|j| j.start.is_some() && !j.account.is_empty())
            .count();
        let sent = match c.batches.first() {
            Some(Batch::Jobs(j)) => j.clone(),
            _ => vec![],
        };
        assert_eq!(sent.len(), started);
        for j in &sent {
            assert!(j.key.starts_with("slurm:"));
            assert_ne!(j.tenant, "tenant-a", "mapped to acme");
        }
    }
}
