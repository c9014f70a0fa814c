//! Slurm accounting to jobs and their GPUs: `sacct --json` / slurmrestd `/slurmdb/v0.0.4x/jobs`
//! (finished and running jobs) and slurmctld `/slurm/v0.0.4x/jobs` (live jobs).
//!
//! Facts (shared/fixtures/slurm/SLURM-NOTES.md): the two endpoints return different job
//! objects; numbers that may be unset are `{set, infinite, number}`; `state.current` is a
//! string in 22.05 and a list later; GPUs appear as `gres/gpu` TRES only where the site tracks
//! them, otherwise in `tres_per_job` and `gres_detail` (`gpu:h100:4(IDX:0-3)`, one entry per
//! node); energy TRES is joules, with -2 or null for "not gathered". Slurm's energy is
//! node-level (IPMI, RAPL), kept for reconciliation only.

use chrono::{DateTime, Utc};
use serde_json::Value;

/// A job as a meter needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmJob {
    pub cluster: String,
    pub job_id: u64,
    pub name: String,
    pub user: String,
    pub account: String,
    pub partition: String,
    pub state: String,
    /// Unix seconds; `None` while not set (a running job has no end).
    pub submit: Option<i64>,
    pub start: Option<i64>,
    pub end: Option<i64>,
    /// Hostnames, the hostlist expanded.
    pub nodes: Vec<String>,
    /// GPU indices per node, from `gres_detail` (aligned with `nodes`).
    pub gpus: Vec<NodeGpus>,
    /// GPUs allocated in all, from TRES or `tres_per_job`, where known.
    pub gpu_count: Option<u32>,
    /// `ConsumedEnergyRaw`: node-level joules, for reconciliation only.
    pub consumed_energy_j: Option<i64>,
    /// The job's own comment (`--comment`, `scontrol update … comment=`): where a job that
    /// checkpoints says when it last did ([`checkpoint_in_comment`]).
    pub comment: String,
}

impl SlurmJob {
    /// The stable key the ledger uses: `slurm:<cluster>:<jobid>`.
    pub fn key(&self) -> String {
        format!("slurm:{}:{}", self.cluster, self.job_id)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeGpus {
    pub node: String,
    pub model: Option<String>,
    pub indices: Vec<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("no \"jobs\" array: not a sacct/slurmrestd jobs response")]
    NoJobs,
    #[error("job {index}: {reason}")]
    Job { index: usize, reason: String },
}

/// A number that may be a plain number or `{set, infinite, number}`; unset, infinite and
/// Slurm's NO_VAL sentinels (negative) are `None`.
fn number(v: Option<&Value>) -> Option<i64> {
    let v = v?;
    let n = match v {
        Value::Object(o) => {
            if o.get("set") == Some(&Value::Bool(false))
                || o.get("infinite") == Some(&Value::Bool(true))
            {
                return None;
            }
            o.get("number")?.as_i64()?
        }
        other => other.as_i64()?,
    };
    (n >= 0).then_some(n)
}

/// A time in unix seconds; 0 means "not yet".
fn time(v: Option<&Value>) -> Option<i64> {
    number(v).filter(|t| *t > 0)
}

fn text(j: &Value, key: &str) -> String {
    j.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Parses a jobs response of either endpoint.
pub fn parse_jobs(json: &str) -> Result<Vec<SlurmJob>, SlurmError> {
    let doc: Value = serde_json::from_str(json)?;
    let jobs = doc
        .get("jobs")
        .and_then(Value::as_array)
        .ok_or(SlurmError::NoJobs)?;
    jobs.iter().enumerate().map(|(i, j)| job(i, j)).collect()
}

fn job(index: usize, j: &Value) -> Result<SlurmJob, SlurmError> {
    let err = |reason: &str| SlurmError::Job {
        index,
        reason: reason.to_owned(),
    };
    let job_id = j
        .get("job_id")
        .and_then(Value::as_u64)
        .ok_or_else(|| err("no job_id"))?;
    // slurmdbd: state.current (string or list) and time.{submission,start,end};
    // slurmctld: job_state (list) and {submit,start,end}_time.
    let state = match (
        j.get("state").and_then(|s| s.get("current")),
        j.get("job_state"),
    ) {
        // 22.05's slurmctld (and squeue) writes job_state as a string.
        (Some(Value::String(s)), _) | (None, Some(Value::String(s))) => s.clone(),
        (Some(Value::Array(a)), _) | (None, Some(Value::Array(a))) => a
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(","),
        _ => String::new(),
    };
    let t = j.get("time");
    let field =
        |dbd: &str, ctld: &str| time(t.and_then(|t| t.get(dbd))).or_else(|| time(j.get(ctld)));
    // sacct writes "None assigned" for a job that never got nodes (pending, cancelled early).
    let hostlist = j
        .get("nodes")
        .and_then(Value::as_str)
        .filter(|n| *n != "None assigned");
    let nodes =
        expand_hostlist(hostlist.unwrap_or_default()).map_err(|e| err(&format!("nodes: {e}")))?;
    let gpus: Vec<NodeGpus> = j
        .get("gres_detail")
        .and_then(Value::as_array)
        .map(|details| {
            details
                .iter()
                .zip(&nodes)
                .filter_map(|(d, node)| {
                    let (model, indices) = parse_gres_detail(d.as_str()?)?;
                    Some(NodeGpus {
                        node: node.clone(),
                        model,
                        indices,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let tres = |kind: &str, name: &str| {
        j.get("tres")
            .and_then(|t| t.get("allocated"))
            .and_then(Value::as_array)
            .and_then(|a| {
                a.iter().find(|x| {
                    x.get("type").and_then(Value::as_str) == Some(kind)
                        && (name.is_empty() || x.get("name").and_then(Value::as_str) == Some(name))
                })
            })
            .and_then(|x| number(x.get("count")))
    };
    let gpu_count = tres("gres", "gpu")
        .map(|n| n as u32)
        .or_else(|| {
            j.get("tres_per_job")
                .and_then(Value::as_str)
                .and_then(gpus_in_tres_per_job)
        })
        .or_else(|| (!gpus.is_empty()).then(|| gpus.iter().map(|g| g.indices.len() as u32).sum()));
    Ok(SlurmJob {
        cluster: text(j, "cluster"),
        job_id,
        name: text(j, "name"),
        user: j
            .get("user")
            .or_else(|| j.get("user_name"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        account: text(j, "account"),
        partition: text(j, "partition"),
        state,
        submit: field("submission", "submit_time"),
        start: field("start", "start_time"),
        end: field("end", "end_time"),
        nodes,
        gpus,
        gpu_count,
        consumed_energy_j: tres("energy", ""),
        // slurmdbd: comment.job; slurmctld: comment (a string).
        comment: match j.get("comment") {
            Some(Value::String(c)) => c.clone(),
            Some(c) => c
                .get("job")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            None => String::new(),
        },
    })
}

/// The last checkpoint a job wrote in its comment, as `checkpoint=<time>` among other
/// words: RFC 3339 or unix seconds ([`crate::sources::checkpoint`]). A job sets it with
/// `scontrol update job=$SLURM_JOB_ID comment=checkpoint=$(date +%s)` after each save. A
/// value that is not a time is ignored (the job keeps no checkpoint), never guessed.
pub fn checkpoint_in_comment(comment: &str) -> Option<DateTime<Utc>> {
    let value = comment
        .split(|c: char| c.is_whitespace() || c == ',' || c == ';')
        .filter_map(|word| word.strip_prefix("checkpoint="))
        .next_back()?;
    crate::sources::checkpoint::checkpoint_time(value)
}

/// `gres/gpu:4` or `gres/gpu:h100:4` → 4.
fn gpus_in_tres_per_job(s: &str) -> Option<u32> {
    s.split(',')
        .filter(|p| p.starts_with("gres/gpu") || p.starts_with("gres:gpu"))
        .filter_map(|p| p.rsplit(':').next()?.parse::<u32>().ok())
        .reduce(|a, b| a + b)
}

/// `gpu:h100:4(IDX:0-3)`, `gpu:2(IDX:0,2)` or `gpu:a100:3(IDX:0-1,3)` → (model, indices).
pub fn parse_gres_detail(s: &str) -> Option<(Option<String>, Vec<u32>)> {
    let (head, rest) = s.split_once("(IDX:")?;
    let idx = rest.strip_suffix(')')?;
    let parts: Vec<&str> = head.split(':').collect();
    if parts.first() != Some(&"gpu") {
        return None;
    }
    let model = (parts.len() == 3).then(|| parts[1].to_owned());
    let mut indices = Vec::new();
    for r in idx.split(',').filter(|r| !r.is_empty() && *r != "N/A") {
        match r.split_once('-') {
            Some((a, b)) => indices.extend(a.parse::<u32>().ok()?..=b.parse::<u32>().ok()?),
            None => indices.push(r.parse().ok()?),
        }
    }
    Some((model, indices))
}

/// A hostlist that does not expand.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostlistError {
    #[error("unbalanced brackets in '{0}'")]
    Unbalanced(String),
    /// A bracket group that does not close (`gpu[1-`).
    #[error("bad hostlist '{0}'")]
    Item(String),
    /// A range that is not numbers, runs backwards, or names more than 100,000 hosts.
    #[error("bad range '{0}'")]
    Range(String),
}

/// Expands a Slurm hostlist: `gpu[1-3,7],cpu01` → gpu1 gpu2 gpu3 gpu7 cpu01 (zero padding
/// kept: `n[08-10]` → n08 n09 n10).
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, HostlistError> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    let bytes = list.as_bytes();
    for i in 0..=bytes.len() {
        let c = bytes.get(i).copied();
        match c {
            Some(b'[') => depth += 1,
            Some(b']') => depth -= 1,
            Some(b',') | None if depth == 0 => {
                let item = list[start..i].trim();
                if !item.is_empty() {
                    expand_one(item, &mut out)?;
                }
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(HostlistError::Unbalanced(list.to_owned()));
    }
    Ok(out)
}

fn expand_one(item: &str, out: &mut Vec<String>) -> Result<(), HostlistError> {
    let Some((prefix, rest)) = item.split_once('[') else {
        out.push(item.to_owned());
        return Ok(());
    };
    let (ranges, suffix) = rest
        .split_once(']')
        .ok_or_else(|| HostlistError::Item(item.to_owned()))?;
    for r in ranges.split(',') {
        let bad = || HostlistError::Range(r.to_owned());
        let (a, b) = r.split_once('-').unwrap_or((r, r));
        let (lo, hi) = (
            a.parse::<u64>().map_err(|_| bad())?,
            b.parse::<u64>().map_err(|_| bad())?,
        );
        if hi < lo || hi - lo > 100_000 {
            return Err(bad());
        }
        for n in lo..=hi {
            let mut rest_out = Vec::new();
            // A suffix may hold another bracket group (`rack[1-2]n[1-2]`).
            expand_one(
                &format!("{prefix}{n:0width$}{suffix}", width = a.len()),
                &mut rest_out,
            )?;
            out.extend(rest_out);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    #[test]
    fn sacct_22_05_reports_how_each_job_ended_and_its_comment() {
        let jobs = parse_jobs(&fixtures::read("slurm/sacct-22.05.json")).unwrap();
        let states: Vec<(u64, &str)> = jobs.iter().map(|j| (j.job_id, j.state.as_str())).collect();
        assert!(states.contains(&(6, "FAILED")));
        assert!(states.contains(&(7, "CANCELLED")));
        assert!(states.contains(&(8, "TIMEOUT")));
        // Its comments are null: no checkpoint.
        assert!(jobs.iter().all(|j| j.comment.is_empty()));
    }

    #[test]
    fn a_checkpoint_is_read_from_the_jobs_comment() {
        let at = |s| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        assert_eq!(
            checkpoint_in_comment("checkpoint=1791201600"),
            Some(at("2026-10-05T12:00:00Z"))
        );
        assert_eq!(
            checkpoint_in_comment("run 7, checkpoint=2026-10-05T12:00:00+02:00 step=900"),
            Some(at("2026-10-05T10:00:00Z"))
        );
        // The last one counts; what is not a time (or is out of range) is no checkpoint.
        assert_eq!(
            checkpoint_in_comment("checkpoint=1 checkpoint=1791201600"),
            Some(at("2026-10-05T12:00:00Z"))
        );
        for none in [
            "",
            "checkpoint=",
            "checkpoint=soon",
            "checkpoint=1",
            "nocheckpoint=5",
        ] {
            assert_eq!(checkpoint_in_comment(none), None, "{none}");
        }
    }

    #[test]
    fn slurmctld_running_job_with_gpus() {
        let jobs = parse_jobs(&fixtures::read(
            "slurm/slurmctld-v0.0.44-job-gpus-running.json",
        ))
        .unwrap();
        let j = &jobs[0];
        assert_eq!(j.key(), "slurm:hpc:5557");
        assert_eq!(
            (j.account.as_str(), j.user.as_str(), j.state.as_str()),
            ("biology", "jbeck", "RUNNING")
        );
        assert_eq!(j.nodes, vec!["gpu2"]);
        assert_eq!(
            j.gpus,
            vec![NodeGpus {
                node: "gpu2".into(),
                model: Some("h100".into()),
                indices: vec![0, 1, 2, 3]
            }]
        );
        assert_eq!(j.gpu_count, Some(4));
        assert_eq!((j.start, j.end), (Some(1_762_784_646), Some(1_762_784_706)));
    }

    #[test]
    fn slurmdbd_completed_job_energy_not_gathered() {
        let jobs = parse_jobs(&fixtures::read("slurm/slurmdb-v0.0.44-job-completed.json")).unwrap();
        let j = &jobs[0];
        assert_eq!(j.key(), "slurm:hpc:5141");
        assert_eq!(j.state, "COMPLETED");
        assert_eq!((j.start, j.end), (Some(1_762_784_359), Some(1_762_784_390)));
        assert_eq!(
            j.consumed_energy_j, None,
            "-2 is NO_VAL: no energy gathered"
        );
    }

    #[test]
    fn sacct_22_05_finished_and_inflight() {
        let jobs = parse_jobs(&fixtures::read("slurm/sacct-22.05.json")).unwrap();
        assert_eq!(jobs.len(), 14);
        assert!(jobs.iter().all(|j| j.cluster == "lab"));
        assert_eq!(jobs[0].account, "tenant-a");
        assert_eq!(jobs[0].nodes, vec!["localhost"]);
        let never_ran = jobs.iter().find(|j| j.job_id == 7).unwrap();
        assert_eq!(
            (never_ran.state.as_str(), never_ran.nodes.len()),
            ("CANCELLED", 0)
        );
        let inflight = parse_jobs(&fixtures::read("slurm/sacct-22.05-inflight.json")).unwrap();
        // Running jobs have no end yet.
        let running = inflight.iter().find(|j| j.state == "RUNNING").unwrap();
        assert_eq!((running.start, running.end), (Some(1_795_334_923), None));
        let pending = inflight.iter().find(|j| j.state == "PENDING").unwrap();
        assert_eq!((pending.start, pending.nodes.len()), (None, 0));
    }

    #[test]
    fn gres_details_and_hostlists() {
        assert_eq!(
            parse_gres_detail("gpu:h100:4(IDX:0-3)"),
            Some((Some("h100".into()), vec![0, 1, 2, 3]))
        );
        assert_eq!(
            parse_gres_detail("gpu:3(IDX:0-1,5)"),
            Some((None, vec![0, 1, 5]))
        );
        assert_eq!(parse_gres_detail("gpu:0(IDX:N/A)"), Some((None, vec![])));
        assert_eq!(parse_gres_detail("mps:100"), None);
        assert_eq!(
            expand_hostlist("gpu[1-3,7],cpu01").unwrap(),
            vec!["gpu1", "gpu2", "gpu3", "gpu7", "cpu01"]
        );
        assert_eq!(
            expand_hostlist("n[08-10]").unwrap(),
            vec!["n08", "n09", "n10"]
        );
        assert_eq!(
            expand_hostlist("r[1-2]n[1-2]").unwrap(),
            vec!["r1n1", "r1n2", "r2n1", "r2n2"]
        );
        assert_eq!(
            expand_hostlist("gpu[1-"),
            Err(HostlistError::Unbalanced("gpu[1-".into()))
        );
        assert_eq!(
            expand_hostlist("n[3-1]").unwrap_err().to_string(),
            "bad range '3-1'"
        );
        assert_eq!(gpus_in_tres_per_job("gres/gpu:h100:2,gres/gpu:2"), Some(4));
    }
}
