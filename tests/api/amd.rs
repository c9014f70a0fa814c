//! AMD GPUs on the server (issue 33): a partitioned MI300X's energy split over its
//! partitions' allocations, a counter the agent estimated counted as estimated energy,
//! device models named by aliases, a board switched between SPX and CPX re-registered, and the
//! default share of a MIG slice by its GPU's slices (an A30 has four).

use crate::scenario::{self, HOUR, NEXT_HOUR};
use serde_json::{json, Value};
use wattledger::auth::Role;
use wattledger_tests::TestApp;

const MI300X: &str = "AMD Instinct MI300X";
/// The board's draw: 700 W, 42 kJ a minute.
const BOARD_MJ_PER_MIN: i64 = 42_000_000;

fn errors(body: &Value) -> Vec<(u64, String)> {
    body["error"]["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("no errors in {body}"))
        .iter()
        .map(|e| {
            (
                e["index"].as_u64().unwrap(),
                e["field"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Node n1 with one MI300X in CPX mode: the board meter `n1-socket0` (as the AMD sources
/// register it, under `device_model`) and its eight partitions `n1-gpu0`–`n1-gpu7`.
fn cpx_meters(device_model: &str) -> Value {
    let mut meters = vec![
        json!({"key": "n1", "site": "s1", "kind": "node"}),
        json!({"key": "n1-socket0", "site": "s1", "kind": "gpu", "parent": "n1",
               "device_model": device_model}),
    ];
    for p in 0..8 {
        meters.push(
            json!({"key": format!("n1-gpu{p}"), "site": "s1", "kind": "mig",
                           "parent": "n1-socket0", "gpu_uuid": format!("GPU-P{p}"),
                           "device_model": device_model, "mig_profile": "cpx"}),
        );
    }
    Value::Array(meters)
}

/// An hour of the CPX board at 700 W (only partition 0 reports: the board's meter) and its
/// node at 1600 W, with a Slurm job per listed partition for the whole hour, no share given.
async fn cpx_hour(partitions: &[usize]) -> TestApp {
    let app = TestApp::start().await;
    let base = scenario::batches();
    let admin = app.token(Role::Admin);
    for (what, records) in [
        ("tenants", base.tenants),
        ("sites", base.sites),
        ("meters", cpx_meters(MI300X)),
    ] {
        let (status, body) = app.ingest(&admin, what, records).await;
        assert_eq!(status, 200, "{what}: {body}");
    }
    let jobs: Vec<Value> = partitions
        .iter()
        .map(|p| {
            json!({"key": format!("job-p{p}"), "tenant": "a", "kind": "batch",
                   "start_at": HOUR, "end_at": NEXT_HOUR,
                   "allocations": [{"meter": format!("n1-gpu{p}")}]})
        })
        .collect();
    let (status, body) = app
        .ingest(&app.token(Role::Scheduler), "jobs", json!(jobs))
        .await;
    assert_eq!(status, 200, "{body}");
    let mut samples = Vec::new();
    for i in 0..=60i64 {
        samples.push(
            json!({"meter": "n1", "ts": scenario::at(i), "counter_mj": 5_000_000 + i * 96_000_000}),
        );
        samples.push(json!({"meter": "n1-socket0", "ts": scenario::at(i),
                            "counter_mj": 7_000_000 + i * BOARD_MJ_PER_MIN}));
    }
    let (status, body) = app
        .ingest(&app.token(Role::Collector), "samples", json!(samples))
        .await;
    assert_eq!(status, 200, "{body}");
    app.attribute().await;
    app
}

/// Each job's GPU energy in the hour, and the GPU energy no job held (idle), mJ.
async fn gpu_energy(app: &TestApp) -> (Vec<(String, i64)>, i64) {
    let jobs: Vec<(String, i64)> = sqlx::query_as(
        "SELECT j.key, l.gpu_mj FROM ledger l JOIN jobs j ON j.site_id = l.site_id AND j.id = l.job_id ORDER BY j.key",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let held: i64 = jobs.iter().map(|j| j.1).sum();
    let (gpu,): (i64,) = sqlx::query_as("SELECT gpu_mj FROM site_hours")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    (jobs, gpu - held)
}

#[tokio::test]
async fn a_lone_job_on_one_of_eight_cpx_partitions_holds_an_eighth_of_the_board() {
    let app = cpx_hour(&[3]).await;
    let share: (String,) = sqlx::query_as("SELECT share::text FROM allocations")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(share.0.parse::<f64>().unwrap(), 0.125);
    let board = 60 * BOARD_MJ_PER_MIN;
    let (jobs, idle) = gpu_energy(&app).await;
    assert_eq!(jobs, [("job-p3".to_owned(), board / 8)]);
    assert_eq!(idle, board - board / 8, "the other seven partitions idle");
}

#[tokio::test]
async fn eight_jobs_on_the_eight_cpx_partitions_hold_an_eighth_each() {
    let app = cpx_hour(&[0, 1, 2, 3, 4, 5, 6, 7]).await;
    let board = 60 * BOARD_MJ_PER_MIN;
    let (jobs, idle) = gpu_energy(&app).await;
    assert_eq!(jobs.len(), 8);
    assert!(jobs.iter().all(|(_, mj)| *mj == board / 8), "{jobs:?}");
    assert_eq!(idle, 0);
}

#[tokio::test]
async fn a_mig_slice_without_a_share_holds_its_sevenths_and_a_share_given_stands() {
    let app = TestApp::start().await;
    let mut b = scenario::batches();
    // The scenario's notebook on g1-mig0 (3g.40gb), sent without a share.
    b.jobs[1]["allocations"][0]
        .as_object_mut()
        .unwrap()
        .remove("share");
    scenario::push(&app, &b).await;
    let shares: Vec<(String, String)> = sqlx::query_as(
        "SELECT j.key, a.share::text FROM allocations a JOIN jobs j ON j.site_id = a.site_id AND j.id = a.job_id ORDER BY j.key",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let share = |key: &str| -> f64 {
        shares
            .iter()
            .find(|s| s.0 == key)
            .unwrap()
            .1
            .parse()
            .unwrap()
    };
    assert_eq!(share("job-mig"), 0.428571, "3 of an H100's 7 slices");
    assert_eq!(share("job-train"), 1.0);
}

#[tokio::test]
async fn a_slice_of_an_a30_holds_quarters_by_its_gpus_model() {
    let app = TestApp::start().await;
    let base = scenario::batches();
    let admin = app.token(Role::Admin);
    // The A30's MIG instances report no model of their own: their GPU's holds.
    let mut meters = vec![
        json!({"key": "n1", "site": "s1", "kind": "node"}),
        json!({"key": "n1-gpu0", "site": "s1", "kind": "gpu", "parent": "n1",
               "device_model": "NVIDIA A30"}),
        json!({"key": "n1-mig0", "site": "s1", "kind": "mig", "parent": "n1-gpu0",
               "mig_profile": "2g.12gb"}),
    ];
    for i in 1..3 {
        meters.push(
            json!({"key": format!("n1-mig{i}"), "site": "s1", "kind": "mig",
                           "parent": "n1-gpu0", "mig_profile": "1g.6gb"}),
        );
    }
    // A second A30 reported by an alias of its model (its PCI device id) is an A30 too.
    meters.push(
        json!({"key": "n1-gpu1", "site": "s1", "kind": "gpu", "parent": "n1",
                       "device_model": "0x20b7"}),
    );
    meters.push(
        json!({"key": "n1-mig3", "site": "s1", "kind": "mig", "parent": "n1-gpu1",
                       "mig_profile": "1g.6gb"}),
    );
    let a30 = json!([{"key": "NVIDIA A30", "embodied_kg": "100", "aliases": ["0x20b7"]}]);
    for (what, records) in [
        ("tenants", base.tenants),
        ("sites", base.sites),
        ("device_models", a30),
        ("meters", Value::Array(meters)),
    ] {
        let (status, body) = app.ingest(&admin, what, records).await;
        assert_eq!(status, 200, "{what}: {body}");
    }
    let jobs: Vec<Value> = [0, 1, 3]
        .into_iter()
        .map(|i| {
            json!({"key": format!("job-mig{i}"), "tenant": "a", "kind": "interactive",
                   "start_at": HOUR, "allocations": [{"meter": format!("n1-mig{i}")}]})
        })
        .collect();
    let (status, body) = app
        .ingest(&app.token(Role::Scheduler), "jobs", json!(jobs))
        .await;
    assert_eq!(status, 200, "{body}");
    let shares: Vec<(String,)> = sqlx::query_as(
        "SELECT a.share::text FROM allocations a JOIN jobs j ON j.site_id = a.site_id AND j.id = a.job_id ORDER BY j.key",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let shares: Vec<f64> = shares.iter().map(|s| s.0.parse().unwrap()).collect();
    // 2 and 1 of the A30's four slices, not of an H100's seven (0.285714, 0.142857).
    assert_eq!(shares[..2], [0.5, 0.25]);
    assert_eq!(shares[2], 0.25, "the alias's A30");
}

#[tokio::test]
async fn a_counter_the_agent_estimated_counts_as_estimated_energy() {
    let app = TestApp::start().await;
    let mut b = scenario::batches();
    // g0's accumulator stuck for minutes 11–20; the agent counted its power readings.
    for s in b.samples.as_array_mut().unwrap() {
        let minute = (11..=20).find(|m| s["ts"] == scenario::at(*m).as_str());
        if s["meter"] == "g0" && minute.is_some() {
            s["counter_estimated"] = json!(true);
        }
    }
    scenario::push(&app, &b).await;
    app.attribute().await;
    let (status, job) = app
        .get(Some(&app.token(Role::Finance)), "/v1/jobs/job-train")
        .await;
    assert_eq!(status, 200, "{job}");
    let flags: Vec<&str> = job["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(flags.contains(&"counter_estimated"), "{job}");
    // Ten of g0's minutes, 42 kJ each, at least: the GPU energy the agent estimated.
    let (estimated,): (i64,) =
        sqlx::query_as("SELECT estimated_mj FROM ledger l JOIN jobs j ON j.site_id = l.site_id AND j.id = l.job_id WHERE j.key = 'job-train'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert!(estimated >= 10 * 42_000_000, "{estimated}");
    let (site,): (i64,) = sqlx::query_as("SELECT estimated_mj FROM site_hours")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert!(site >= 10 * 42_000_000, "{site}");
    // The energy is the same: the agent's estimate is what the counter carries.
    assert_eq!(
        scenario::tenant_totals(&app, &app.token(Role::Finance)).await,
        scenario::expected_totals()
    );

    // Without a counter there is nothing the agent estimated.
    let (status, body) = app
        .ingest(
            &app.token(Role::Collector),
            "samples",
            json!([{"meter": "g0", "ts": scenario::at(70), "power_w": 700.0, "counter_estimated": true}]),
        )
        .await;
    assert_eq!(
        (status, errors(&body)),
        (422, vec![(0, "counter_estimated".into())])
    );
}

#[tokio::test]
async fn a_board_named_by_its_part_number_is_priced_as_its_model() {
    let app = TestApp::start().await;
    let operator = app.token(Role::Operator);
    let model = json!({"key": MI300X, "embodied_kg": "215", "gpu_hour_rate": "2", "currency": "EUR",
                       "typical_power_w": 700, "aliases": ["102-G30211-00", "0x74a1"]});
    let (status, body) = app.ingest(&operator, "device_models", json!([model])).await;
    assert_eq!(status, 200, "{body}");
    // The exporter's part number is what the board meter carries.
    let app = {
        let base = scenario::batches();
        let admin = app.token(Role::Admin);
        for (what, records) in [
            ("tenants", base.tenants),
            ("sites", base.sites),
            ("meters", cpx_meters("102-G30211-00")),
        ] {
            let (status, body) = app.ingest(&admin, what, records).await;
            assert_eq!(status, 200, "{what}: {body}");
        }
        let jobs = json!([{"key": "job-p0", "tenant": "a", "kind": "batch", "start_at": HOUR,
                           "end_at": NEXT_HOUR, "allocations": [{"meter": "n1-gpu0"}]}]);
        let (status, body) = app.ingest(&app.token(Role::Scheduler), "jobs", jobs).await;
        assert_eq!(status, 200, "{body}");
        let samples: Vec<Value> = (0..=60i64)
            .flat_map(|i| {
                [
                    json!({"meter": "n1", "ts": scenario::at(i), "counter_mj": i * 96_000_000}),
                    json!({"meter": "n1-socket0", "ts": scenario::at(i), "counter_mj": i * BOARD_MJ_PER_MIN}),
                ]
            })
            .collect();
        let (status, body) = app
            .ingest(&app.token(Role::Collector), "samples", json!(samples))
            .await;
        assert_eq!(status, 200, "{body}");
        app.attribute().await;
        app
    };
    let (embodied, gpu_time_cost): (Option<String>, Option<String>) = sqlx::query_as(
        "SELECT l.embodied_carbon_g::text, l.gpu_time_cost::text FROM ledger l
         JOIN jobs j ON j.site_id = l.site_id AND j.id = l.job_id WHERE j.key = 'job-p0'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    // An eighth of the board for the hour: 2 EUR / 8, and 215 kg over 43 800 h / 8.
    let cost: f64 = gpu_time_cost.expect("priced by the alias").parse().unwrap();
    assert!((cost - 0.25).abs() < 1e-6, "{cost}");
    let grams: f64 = embodied.expect("embodied by the alias").parse().unwrap();
    assert!((grams - 215_000.0 / 43_800.0 / 8.0).abs() < 0.01, "{grams}");

    // Admission knows the typical draw under either name.
    let typical = wattledger_store::admission::typical_draw(&app.pool)
        .await
        .unwrap();
    assert_eq!(typical.get("0x74a1"), Some(&700));
    assert_eq!(typical.get(MI300X), Some(&700));
}

#[tokio::test]
async fn an_alias_names_one_model() {
    let app = TestApp::start().await;
    let operator = app.token(Role::Operator);
    let model =
        |key: &str, aliases: Value| json!({"key": key, "embodied_kg": "100", "aliases": aliases});
    let (status, body) = app
        .ingest(
            &operator,
            "device_models",
            json!([
                model(MI300X, json!(["0x74a1"])),
                model("AMD Instinct MI250X", json!([]))
            ]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = app
        .ingest(
            &operator,
            "device_models",
            json!([
                // Another model's alias; another model's key; twice in the batch; its own key.
                model("AMD Instinct MI250X", json!(["0x74a1", MI300X])),
                model(
                    "AMD Instinct MI210",
                    json!(["x", "x", "AMD Instinct MI210"])
                ),
                // A model whose key is an alias already.
                model("0x74a1", json!([])),
            ]),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        errors(&body),
        vec![
            (0, "aliases[0]".into()),
            (0, "aliases[1]".into()),
            (1, "aliases[1]".into()),
            (1, "aliases[2]".into()),
            (2, "key".into()),
        ],
        "{body}"
    );
    // Moved with the model that held it dropping it in the same batch, it is the other's.
    let (status, body) = app
        .ingest(
            &operator,
            "device_models",
            json!([
                model(MI300X, json!([])),
                model("AMD Instinct MI250X", json!(["0x74a1"]))
            ]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let held: Vec<(String, String)> =
        sqlx::query_as("SELECT alias, device_model FROM device_model_aliases")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(held, [("0x74a1".into(), "AMD Instinct MI250X".into())]);
}

/// What a meter is now: its kind, its parent's key and its UUID.
async fn meter(app: &TestApp, key: &str) -> (String, Option<String>, Option<String>) {
    sqlx::query_as(
        "SELECT m.kind, p.key, m.gpu_uuid FROM meters m LEFT JOIN meters p ON p.id = m.parent_id
         WHERE m.key = $1",
    )
    .bind(key)
    .fetch_one(&app.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_board_switched_between_spx_and_cpx_is_registered_again_each_way() {
    let app = TestApp::start().await;
    scenario::push_inventory(&app, &scenario::batches()).await;
    let collector = app.token(Role::Collector);
    let spx = json!([
        {"key": "n1", "site": "s1", "kind": "node"},
        {"key": "n1-gpu0", "site": "s1", "kind": "gpu", "parent": "n1", "gpu_uuid": "GPU-P0",
         "device_model": MI300X}
    ]);
    let (status, body) = app.ingest(&collector, "meters", spx.clone()).await;
    assert_eq!(status, 200, "{body}");
    // CPX: the whole GPU is now partition 0 of a board meter, with seven partitions beside it.
    let (status, body) = app.ingest(&collector, "meters", cpx_meters(MI300X)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        meter(&app, "n1-gpu0").await,
        (
            "mig".into(),
            Some("n1-socket0".into()),
            Some("GPU-P0".into())
        )
    );
    assert_eq!(
        meter(&app, "n1-socket0").await,
        ("gpu".into(), Some("n1".into()), None)
    );
    // Back to SPX: the partition is the whole GPU again.
    let (status, body) = app.ingest(&collector, "meters", spx).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        meter(&app, "n1-gpu0").await,
        ("gpu".into(), Some("n1".into()), Some("GPU-P0".into()))
    );
    // A board meter that took its partition 0's UUID (as an older agent sent it): the UUID
    // moves to the meter that names it now, and no conflict reaches the database.
    let (status, body) = app
        .ingest(
            &collector,
            "meters",
            json!([{"key": "n1-socket0", "site": "s1", "kind": "gpu", "parent": "n1",
                    "gpu_uuid": "GPU-P0"}]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(meter(&app, "n1-gpu0").await.2, None);
    assert_eq!(meter(&app, "n1-socket0").await.2, Some("GPU-P0".into()));
}

#[tokio::test]
async fn a_kind_change_that_would_orphan_children_or_take_another_sites_uuid_is_refused() {
    let app = TestApp::start().await;
    let b = scenario::batches();
    scenario::push_inventory(&app, &b).await;
    let mut other = b.sites[0].clone();
    other["key"] = json!("s2");
    let admin = app.token(Role::Admin);
    let (status, body) = app.ingest(&admin, "sites", json!([other])).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = app
        .ingest(
            &admin,
            "meters",
            json!([
                // g1 has the MIG instance g1-mig0 under it, which a node cannot hold.
                {"key": "g1", "site": "s1", "kind": "node"},
                // GPU-0 is g0's, at s1.
                {"key": "n9", "site": "s2", "kind": "node"},
                {"key": "g9", "site": "s2", "kind": "gpu", "parent": "n9", "gpu_uuid": "GPU-0"}
            ]),
        )
        .await;
    assert_eq!(
        (status, errors(&body)),
        (422, vec![(0, "kind".into()), (2, "gpu_uuid".into())]),
        "{body}"
    );
    // With the MIG instance moved in the same batch, g1 may become a node.
    let (status, body) = app
        .ingest(
            &admin,
            "meters",
            json!([
                {"key": "g1", "site": "s1", "kind": "node"},
                {"key": "g1-gpu", "site": "s1", "kind": "gpu", "parent": "g1"},
                {"key": "g1-mig0", "site": "s1", "kind": "mig", "parent": "g1-gpu"}
            ]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(meter(&app, "g1-mig0").await.1, Some("g1-gpu".into()));
}
