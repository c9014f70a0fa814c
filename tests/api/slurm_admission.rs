//! deploy/slurm/job_submit.lua in the real Slurm 22.05 of `shared/slurm-lab` (tests/run
//! starts the lab with this plugin installed) against the real server: an over-budget
//! tenant is refused with the budget named by sbatch, a flexible job is held to the clean
//! slot (`BeginTime` in squeue), then runs and reaches sacct, and an unreachable server
//! admits (fail-open) or refuses (fail-closed) as configured.

use crate::scenario;
use chrono::{Duration, Utc};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::{Command, Output};
use wattledger::auth::Role;
use wattledger_tests::{peers, TestApp};

fn conf_path() -> PathBuf {
    let conf = std::env::var("SLURM_CONF").unwrap_or_else(|_| {
        panic!("SLURM_CONF is not set: start the Slurm lab with SLURM_LAB_JOB_SUBMIT_LUA=deploy/slurm/job_submit.lua (tests/run does)")
    });
    PathBuf::from(conf).with_file_name("wattledger-admission.conf")
}

/// Removes the plugin's config when the test ends, so other lab users are not asked.
struct Conf(PathBuf);
impl Drop for Conf {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn sbatch(args: &[&str]) -> Output {
    let dir = std::env::var("SLURM_LAB_JOBS_DIR").unwrap_or_else(|_| "/tmp".into());
    Command::new("sbatch")
        .current_dir(dir)
        .args(["--parsable", "--output=/dev/null"])
        .args(args)
        .output()
        .expect("sbatch runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn job_id(out: &Output) -> String {
    assert!(out.status.success(), "sbatch: {}", text(&out.stderr));
    text(&out.stdout)
        .trim()
        .split(';')
        .next()
        .unwrap()
        .to_owned()
}

// sbatch blocks its thread while slurmctld asks the server: the server needs another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurm_asks_wattledger_before_queueing_a_gpu_job() {
    if !peers::ready(
        std::env::var_os("SLURM_CONF").is_some() && peers::installed("sbatch"),
        "the Slurm lab is not running (SLURM_CONF is not set)",
        "start ../shared/slurm-lab with SLURM_LAB_JOB_SUBMIT_LUA=deploy/slurm/job_submit.lua",
    ) {
        return;
    }
    let conf = Conf(conf_path());
    let app = TestApp::start().await;
    let mut inventory = scenario::batches();
    inventory.tenants = json!([{"key": "platform", "name": "Platform"},
        {"key": "tenant-a", "name": "Tenant A"}, {"key": "tenant-b", "name": "Tenant B"}]);
    scenario::push_inventory(&app, &inventory).await;
    sqlx::query(
        "INSERT INTO budgets (key, tenant_id, limit_kwh, hard)
         SELECT 'tenant-b-gpu-energy', id, 0.01, true FROM tenants WHERE key = 'tenant-b'",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    // Dirty now until 40 s from now, clean after: a flexible job waits 40 s.
    let now = Utc::now();
    let clean_at = now + Duration::seconds(40);
    let point = |a: chrono::DateTime<Utc>, b: chrono::DateTime<Utc>, v: &str| {
        json!({"region": "DE", "signal": "carbon", "basis": "marginal", "status": "forecast",
               "source": "watttime", "start_at": a.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
               "end_at": b.format("%Y-%m-%dT%H:%M:%SZ").to_string(), "value": v})
    };
    let (status, body) = app
        .ingest(
            &app.token(Role::Collector),
            "signals",
            json!([
                point(now - Duration::hours(1), clean_at, "900"),
                point(clean_at, now + Duration::hours(2), "90")
            ]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // The budget was written behind the server's back: wait until admission has it.
    let scheduler = app.token(Role::Scheduler);
    let probe = json!({"tenant": "tenant-b", "gpus": 1, "duration_s": 60, "dry_run": true});
    let mut loaded = false;
    for _ in 0..100 {
        let (_, a) = app
            .post_raw(&scheduler, "/v1/admission", probe.to_string())
            .await;
        if a["reasons"][0]
            .as_str()
            .is_some_and(|r| r.contains("tenant-b-gpu-energy"))
        {
            loaded = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(loaded, "admission never loaded the budget");

    let token_file = conf.0.with_file_name("wattledger.token");
    std::fs::write(&token_file, &scheduler).unwrap();
    let write_conf = |url: &str, fail: &str| {
        std::fs::write(
            &conf.0,
            format!(
                "url={url}\ntoken_file={}\ntimeout=2\nfail={fail}\n",
                token_file.display()
            ),
        )
        .unwrap()
    };
    write_conf(&format!("{}/v1/admission", app.base), "closed");

    // Over budget: refused, with the budget named to the user.
    let out = sbatch(&[
        "--account=tenant-b",
        "--gres=gpu:1",
        "--time=1",
        "--job-name=over",
        "--wrap",
        "true",
    ]);
    assert!(!out.status.success(), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(
        err.contains("wattledger: rejected") && err.contains("'tenant-b-gpu-energy'"),
        "{err}"
    );

    // A CPU-only job is not asked about.
    let out = sbatch(&[
        "--account=tenant-b",
        "--time=1",
        "--job-name=cpu",
        "--wrap",
        "true",
    ]);
    job_id(&out);

    // Flexible (a deadline in the comment; Slurm 22.05 does not show --deadline to Lua):
    // held until the clean slot.
    let out = sbatch(&[
        "--account=Tenant-A",
        "--gres=gpu:1",
        "--time=1",
        "--job-name=flex",
        "--comment=wattledger:deadline=+30m wattledger:kind=training",
        "--wrap",
        "sleep 1",
    ]);
    let id = job_id(&out);
    let squeue = Command::new("squeue")
        .args(["-h", "-j", &id, "-o", "%T %r %S"])
        .output()
        .unwrap();
    let line = text(&squeue.stdout);
    assert!(line.starts_with("PENDING BeginTime"), "{line}");
    let begin = line.split_whitespace().nth(2).unwrap().to_owned();
    let expected = clean_at
        .with_timezone(&chrono::Local)
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string();
    assert_eq!(begin, expected, "held until the clean slot");

    // The decision is stored and joins the job as the agent reports it (name and submission).
    let (status, body) = app
        .ingest(
            &scheduler,
            "jobs",
            json!([{"key": format!("slurm:lab:{id}"), "name": "flex",
            "tenant": "tenant-a", "site": "s1", "kind": "batch", "submit_at": now, "start_at": Utc::now()}]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let mut joined = Value::Null;
    for _ in 0..50 {
        let (_, page) = app
            .get(Some(&scheduler), "/v1/admission/decisions?decision=defer")
            .await;
        if page["decisions"][0]["job"].is_string() {
            joined = page["decisions"][0].clone();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(joined["job"], format!("slurm:lab:{id}"), "{joined}");
    assert_eq!(joined["source"], "slurm", "the plugin says who asked");

    // wattledger away: fail-closed refuses, fail-open admits.
    write_conf("http://127.0.0.1:1/v1/admission", "closed");
    let out = sbatch(&[
        "--account=tenant-a",
        "--gres=gpu:1",
        "--time=1",
        "--job-name=down",
        "--wrap",
        "true",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("fails closed"),
        "{}",
        text(&out.stderr)
    );
    write_conf("http://127.0.0.1:1/v1/admission", "open");
    let out = sbatch(&[
        "--account=tenant-a",
        "--gres=gpu:1",
        "--time=1",
        "--job-name=down",
        "--wrap",
        "true",
    ]);
    job_id(&out);

    // The deferred job runs at its begin time and reaches sacct.
    let mut state = String::new();
    for _ in 0..120 {
        let sacct = Command::new("sacct")
            .args(["-n", "-X", "-P", "-j", &id, "-o", "State,Eligible"])
            .output()
            .unwrap();
        state = text(&sacct.stdout);
        if state.starts_with("COMPLETED") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    assert!(state.starts_with("COMPLETED"), "sacct: {state}");
    assert!(
        state.contains(&expected),
        "eligible at the clean slot: {state}"
    );

    // A power-bound site: s1 may cap GPUs at 350 W, and all but 500 W of its 100 kW is
    // reserved for the next two hours (8 × 9,950 W × PUE 1.25). A 1-GPU job (the server's
    // 700 W default × 1.25 = 875 W) fits only capped (438 W): admitted, and the admin comment
    // carries the cap for the prolog (deploy/slurm/power-cap.sh) to apply.
    write_conf(&format!("{}/v1/admission", app.base), "closed");
    let (status, body) = app
        .put(
            &app.token(Role::Operator),
            "/v1/power/policies/s1",
            json!({"power_cap_w": 350}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // The flexible job's reservation (rounded out to whole minutes) must be over first:
    // until the whole envelope is free, a what-if for all of it is not admitted.
    let whole = json!({"tenant": "tenant-a", "gpus": 8, "power_per_gpu_w": 10000,
                       "duration_s": 60, "dry_run": true});
    let mut free = false;
    for _ in 0..240 {
        let (_, a) = app
            .post_raw(&scheduler, "/v1/admission", whole.to_string())
            .await;
        if a["decision"] == "admit" && a["power_cap_w"].is_null() {
            free = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    assert!(free, "the envelope never came free");
    let (status, fill) = app
        .post_raw(
            &scheduler,
            "/v1/admission",
            json!({"tenant": "tenant-a", "gpus": 8, "power_per_gpu_w": 9950,
                   "duration_s": 7200})
            .to_string(),
        )
        .await;
    assert_eq!(
        (status, &fill["decision"]),
        (200, &json!("admit")),
        "{fill}"
    );
    let probe = json!({"tenant": "tenant-a", "gpus": 1, "duration_s": 60, "dry_run": true});
    let mut capped = false;
    for _ in 0..100 {
        let (_, a) = app
            .post_raw(&scheduler, "/v1/admission", probe.to_string())
            .await;
        if a["power_cap_w"] == 350 {
            capped = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(capped, "admission never loaded the power cap");
    let out = sbatch(&[
        "--account=tenant-a",
        "--gres=gpu:1",
        "--time=1",
        "--job-name=capped",
        "--wrap",
        "true",
    ]);
    let id = job_id(&out);
    assert!(
        text(&out.stderr).contains("admitted with its GPUs capped at 350 W"),
        "{}",
        text(&out.stderr)
    );
    let show = Command::new("scontrol")
        .args(["show", "job", &id])
        .output()
        .unwrap();
    let show = text(&show.stdout);
    assert!(show.contains("wattledger:power_cap_w=350"), "{show}");
}
