//! The Slurm source against the real single-node Slurm 22.05 of `shared/slurm-lab`
//! (slurmctld, slurmd, slurmdbd on MariaDB): real `sbatch` jobs, read back through the real
//! `squeue --json` and `sacct --json`.
//!
//! `tests/run` starts the lab and exports `SLURM_CONF` (and `SLURM_LAB_*`); without it these
//! tests skip (fail under `tests/run`) and say how to start it.

use chrono::Utc;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use wattledger_agent::records::{Batch, Job};
use wattledger_agent::sources::slurm::{SlurmConfig, SlurmSource};
use wattledger_agent::sources::Source;

mod peers;

/// The lab's `SLURM_CONF` and jobs folder, or `None` (the test skips) when it is not running.
fn lab() -> Option<(String, String)> {
    let Ok(conf) = std::env::var("SLURM_CONF") else {
        return peers::missing(
            "SLURM_CONF is not set",
            "start the Slurm lab with `eval \"$(bash ../shared/slurm-lab/start.sh)\"`",
        );
    };
    let jobs = std::env::var("SLURM_LAB_JOBS_DIR").unwrap_or_else(|_| "/tmp".into());
    Some((conf, jobs))
}

fn sbatch(account: &str, gpus: u32, seconds: u32) -> String {
    let (_, dir) = lab().expect("the test checked the lab");
    let out = std::process::Command::new("sbatch")
        .current_dir(dir)
        .args([
            "--parsable",
            &format!("--account={account}"),
            &format!("--gres=gpu:{gpus}"),
            "--job-name=wattledger-lab",
            "--output=/dev/null",
            "--wrap",
            &format!("sleep {seconds}"),
        ])
        .output()
        .expect("sbatch runs");
    assert!(
        out.status.success(),
        "sbatch: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    // `--parsable` prints `id` or `id;cluster`.
    id.split(';').next().unwrap().to_owned()
}

fn source() -> SlurmSource {
    let config: SlurmConfig = toml::from_str(
        "interval_s = 1\nlookback_s = 600\n\
         accounts = { tenant-a = \"acme\" }\n\
         partition_kinds = { lab = \"training\" }\n\
         node_meters = { localhost = \"lab-node\" }\n",
    )
    .unwrap();
    SlurmSource::new(config, "lab")
}

async fn poll(source: &mut SlurmSource) -> (Vec<Job>, serde_json::Value) {
    let c = source
        .collect(Utc::now())
        .await
        .expect("sacct and squeue answer");
    let jobs = c
        .batches
        .into_iter()
        .flat_map(|b| match b {
            Batch::Jobs(j) => j,
            other => panic!("the Slurm source sent {other:?}"),
        })
        .collect();
    (jobs, c.state.expect("the Slurm source keeps state"))
}

fn meters(j: &Job) -> Vec<String> {
    let mut m: Vec<String> = j.allocations.iter().map(|a| a.meter.clone()).collect();
    m.sort();
    m
}

#[tokio::test]
async fn real_jobs_arrive_with_tenants_kinds_and_the_gpus_they_held() {
    if lab().is_none() {
        return;
    }
    let a = sbatch("tenant-a", 2, 3);
    let b = sbatch("tenant-b", 1, 3);
    let (key_a, key_b) = (format!("slurm:lab:{a}"), format!("slurm:lab:{b}"));
    let mut s = source();
    let mut latest: BTreeMap<String, Job> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut restarted = false;
    loop {
        let (jobs, state) = poll(&mut s).await;
        for j in jobs {
            latest.insert(j.key.clone(), j);
        }
        if !restarted && latest.contains_key(&key_a) {
            // The agent restarts while the jobs run: the spooled state carries the GPU
            // indices squeue showed, which sacct alone does not have.
            s = source();
            s.restore(state).unwrap();
            restarted = true;
        }
        let done = |k: &str| latest.get(k).is_some_and(|j| j.end_at.is_some());
        if done(&key_a) && done(&key_b) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "jobs {a} and {b} did not finish: {latest:?}"
        );
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    let (ja, jb) = (&latest[&key_a], &latest[&key_b]);
    assert_eq!(ja.tenant, "acme", "account mapped to its tenant");
    assert_eq!(
        jb.tenant, "tenant-b",
        "an unmapped account is its own tenant"
    );
    assert_eq!(
        (ja.kind.as_str(), ja.name.as_deref()),
        ("training", Some("wattledger-lab"))
    );
    assert!(ja.start_at < ja.end_at.unwrap());
    let (ma, mb) = (meters(ja), meters(jb));
    assert_eq!(ma.len(), 2, "{ma:?}");
    assert_eq!(mb.len(), 1, "{mb:?}");
    assert!(ma.iter().chain(&mb).all(|m| m.starts_with("lab-node-gpu")));
    assert!(
        ma.iter().all(|m| !mb.contains(m)),
        "two running jobs never share a GPU"
    );

    // Nothing changed since: nothing is sent again.
    let (again, _) = poll(&mut s).await;
    assert!(
        again.iter().all(|j| j.key != key_a && j.key != key_b),
        "unchanged jobs are not resent: {again:?}"
    );
}
