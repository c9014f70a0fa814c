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
use wattledger_domain::badput::EndState;

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

/// The lab's node has two CPUs: tests whose jobs ran side by side would queue each other's
/// past their deadlines, so they take turns.
static LAB: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn sbatch(account: &str, gpus: u32, seconds: u32) -> String {
    sbatch_script(account, gpus, &format!("sleep {seconds}"), &[])
}

/// Submits `script` as a batch job; its id.
fn sbatch_script(account: &str, gpus: u32, script: &str, extra: &[&str]) -> String {
    let (_, dir) = lab().expect("the test checked the lab");
    let out = std::process::Command::new("sbatch")
        .current_dir(dir)
        .args([
            "--parsable",
            &format!("--account={account}"),
            &format!("--gres=gpu:{gpus}"),
            "--job-name=wattledger-lab",
            "--output=/dev/null",
        ])
        .args(extra)
        .args(["--wrap", script])
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
    let _turn = LAB.lock().await;
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

/// Slurm's own end states: a job that exits non-zero is FAILED, one killed at its time limit
/// TIMEOUT; each arrives with its state once it has ended, and the checkpoint a job wrote in
/// its comment while it ran (`scontrol update … comment=checkpoint=<unix s>`, read from
/// squeue: the lab's accounting does not store comments) comes with it.
#[tokio::test]
async fn real_failed_and_timed_out_jobs_arrive_with_how_they_ended() {
    if lab().is_none() {
        return;
    }
    let _turn = LAB.lock().await;
    let checkpoint = Utc::now().timestamp();
    let failed = sbatch_script(
        "tenant-a",
        1,
        &format!(
            "scontrol update job=$SLURM_JOB_ID comment=checkpoint={checkpoint}; sleep 4; exit 3"
        ),
        &[],
    );
    // Slurm limits are whole minutes: the job is killed a minute (and a poll of the
    // controller) after it starts.
    let timed_out = sbatch_script("tenant-b", 1, "sleep 600", &["--time=1"]);
    let (key_f, key_t) = (
        format!("slurm:lab:{failed}"),
        format!("slurm:lab:{timed_out}"),
    );
    let mut s = source();
    let mut latest: BTreeMap<String, Job> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let (jobs, _) = poll(&mut s).await;
        for j in jobs {
            latest.insert(j.key.clone(), j);
        }
        let ended = |k: &str| latest.get(k).is_some_and(|j| j.end_state.is_some());
        if ended(&key_f) && ended(&key_t) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "jobs {failed} and {timed_out} did not end: {latest:?}"
        );
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    let (f, t) = (&latest[&key_f], &latest[&key_t]);
    assert_eq!(f.end_state, Some(EndState::Failed), "{f:?}");
    assert_eq!(
        f.last_checkpoint_at.map(|c| c.timestamp()),
        Some(checkpoint),
        "{f:?}"
    );
    assert_eq!(t.end_state, Some(EndState::Timeout), "{t:?}");
    assert_eq!(t.last_checkpoint_at, None);
    // Killed at its limit: it ran about a minute, not the ten it asked for.
    let ran = t.end_at.unwrap() - t.start_at;
    assert!(
        ran >= chrono::Duration::seconds(55) && ran < chrono::Duration::seconds(300),
        "{ran}"
    );
}
