//! Retention: step records and raw readings in partitions of their own, dropped whole after
//! their days, never while an hour they feed is dirty or their month is open; the ledger
//! untouched.

use crate::scenario::{self, HOUR};
use chrono::{DateTime, TimeZone, Utc};
use serde_json::json;
use wattledger::auth::Role;
use wattledger_store::partitions;
use wattledger_store::retention::{self, Policy, Verdict};
use wattledger_tests::TestApp;

async fn partition_names(app: &TestApp) -> Vec<String> {
    partitions::existing(&app.pool)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect()
}

async fn ledger_sum(app: &TestApp) -> (i64, i64) {
    sqlx::query_as("SELECT count(*), sum(total_mj)::bigint FROM ledger")
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

fn verdict_of<'a>(plan: &'a retention::Plan, name: &str) -> &'a Verdict {
    &plan
        .partitions
        .iter()
        .find(|(s, _)| s.name == name)
        .unwrap_or_else(|| panic!("no partition {name}"))
        .1
}

#[tokio::test]
async fn step_records_and_raw_readings_land_in_partitions_of_their_own() {
    let app = TestApp::start().await;
    scenario::push_inventory(&app, &scenario::batches()).await;
    let collector = app.token(Role::Collector);
    let (status, body) = app
        .ingest(
            &collector,
            "samples",
            json!([
                {"meter": "g0", "ts": "2026-11-02T10:01:00Z", "counter_mj": 5, "power_w": 700, "peak_w": 720, "step_s": 60},
                {"meter": "g0", "ts": "2026-11-02T10:01:00.500Z", "counter_mj": 6, "power_w": 700},
                // The same instant as a raw reading and a step record: both kept.
                {"meter": "g1", "ts": "2026-11-02T10:05:00Z", "counter_mj": 9, "step_s": 300},
                {"meter": "g1", "ts": "2026-11-02T10:05:00Z", "counter_mj": 9}
            ]),
        )
        .await;
    assert_eq!((status, &body["written"]), (200, &json!(4)), "{body}");
    let placed: Vec<(String, bool)> = sqlx::query_as(
        "SELECT tableoid::regclass::text, raw FROM samples ORDER BY meter_id, ts, raw",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    // On a Citus cluster a row is read from its shard, named after the partition and the
    // shard's number (`samples_steps_y2026m11_102455`).
    let placed: Vec<(String, bool)> = placed
        .into_iter()
        .map(|(name, raw)| match wattledger_tests::citus() {
            Some(_) => (name.rsplit_once('_').unwrap().0.to_owned(), raw),
            None => (name, raw),
        })
        .collect();
    assert_eq!(
        placed,
        [
            ("samples_steps_y2026m11".to_owned(), false),
            ("samples_raw_y2026m11d02".to_owned(), true),
            ("samples_steps_y2026m11".to_owned(), false),
            ("samples_raw_y2026m11d02".to_owned(), true),
        ]
    );

    // A step must divide an hour, and its record lie on a boundary.
    for (record, field) in [
        (
            json!({"meter": "g0", "ts": "2026-11-02T11:00:00Z", "counter_mj": 7, "step_s": 7}),
            "step_s",
        ),
        (
            json!({"meter": "g0", "ts": "2026-11-02T11:00:30Z", "counter_mj": 7, "step_s": 60}),
            "ts",
        ),
        (
            json!({"meter": "g0", "ts": "2026-11-02T11:00:00Z", "counter_mj": 7, "step_s": -60}),
            "step_s",
        ),
    ] {
        let (status, body) = app.ingest(&collector, "samples", json!([record])).await;
        assert_eq!(status, 422, "{body}");
        assert_eq!(body["error"]["errors"][0]["field"], field, "{body}");
    }
}

#[tokio::test]
async fn old_partitions_go_whole_unless_an_hour_is_dirty_or_the_month_open() {
    let app = TestApp::start().await;
    // The scenario's hour (2026-11-02 10:00) as raw readings, and a month earlier the same
    // meters as step records.
    scenario::push(&app, &scenario::batches()).await;
    let steps: Vec<serde_json::Value> = (0..=60i64)
        .map(|i| {
            json!({"meter": "n1", "ts": scenario::at_from("2026-10-02T10:00:00Z", i),
                   "counter_mj": 1_000 + i * 96_000_000, "step_s": 60})
        })
        .collect();
    let (status, body) = app
        .ingest(&app.token(Role::Collector), "samples", json!(steps))
        .await;
    assert_eq!(status, 200, "{body}");
    app.attribute().await;
    let ledger = ledger_sum(&app).await;
    assert!(ledger.0 > 0);

    // Partitions ahead of need: two months of steps and a week of raw days.
    let now = Utc.with_ymd_and_hms(2026, 11, 24, 12, 0, 0).unwrap();
    let created = partitions::ensure_ahead(&app.pool, now).await.unwrap();
    assert!(created >= 8, "{created}");
    let names = partition_names(&app).await;
    for name in ["samples_steps_y2027m01", "samples_raw_y2026m11d30"] {
        assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
    }

    let raw_day = "samples_raw_y2026m11d02";
    let october = "samples_steps_y2026m10";
    let policy = Policy {
        steps_days: 30,
        raw_days: 14,
        keep_unclosed_months: true,
    };
    let plan = retention::plan(&app.pool, &policy, now).await.unwrap();
    // Old enough, but November is not closed; October's steps are within 30 days' end.
    assert!(matches!(
        verdict_of(&plan, raw_day),
        Verdict::MonthOpen { .. }
    ));
    assert_eq!(verdict_of(&plan, october), &Verdict::Young);
    assert_eq!(
        verdict_of(&plan, "samples_raw_y2026m11d30"),
        &Verdict::Young
    );
    assert_eq!(plan.to_drop().count(), 0);

    // Closing November lets the raw day go; a dirty hour in it holds it again.
    sqlx::query(
        "INSERT INTO month_closes (month, version, closed_at, closed_by, issuer_name)
         VALUES ('2026-11-01', 1, now(), 'test', 'GPU Platform')",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    let hour: DateTime<Utc> = DateTime::parse_from_rfc3339(HOUR).unwrap().to_utc();
    let mut tx = app.pool.begin().await.unwrap();
    wattledger_store::dirty::mark_range(&mut tx, hour, hour + chrono::Duration::hours(1))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let plan = retention::plan(&app.pool, &policy, now).await.unwrap();
    assert_eq!(verdict_of(&plan, raw_day), &Verdict::Dirty { hours: 1 });
    app.attribute().await;
    assert_eq!(ledger_sum(&app).await, ledger);

    let plan = retention::plan(&app.pool, &policy, now).await.unwrap();
    assert_eq!(verdict_of(&plan, raw_day), &Verdict::Drop);
    let dropped = retention::apply(&app.pool, &policy, now, &plan)
        .await
        .unwrap();
    let dropped: Vec<&str> = dropped.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(dropped, [raw_day]);
    assert!(!partition_names(&app).await.iter().any(|n| n == raw_day));
    let raw_left: i64 = sqlx::query_scalar("SELECT count(*) FROM samples WHERE raw")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(raw_left, 0);
    // October's step records are still there; the ledger is as it was.
    let steps_left: i64 = sqlx::query_scalar("SELECT count(*) FROM samples WHERE NOT raw")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(steps_left, 61);
    assert_eq!(ledger_sum(&app).await, ledger);
    let logged: Vec<String> = sqlx::query_scalar("SELECT partition FROM retention_drops")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert_eq!(logged, [raw_day]);

    // Months later, October's steps go too, with the month open only if the policy keeps it.
    let later = Utc.with_ymd_and_hms(2027, 1, 15, 0, 0, 0).unwrap();
    let plan = retention::plan(&app.pool, &policy, later).await.unwrap();
    assert!(matches!(
        verdict_of(&plan, october),
        Verdict::MonthOpen { .. }
    ));
    let lax = Policy {
        keep_unclosed_months: false,
        ..policy
    };
    let plan = retention::plan(&app.pool, &lax, later).await.unwrap();
    assert_eq!(verdict_of(&plan, october), &Verdict::Drop);
}

#[tokio::test]
async fn an_ended_months_step_index_is_packed_once_and_reads_the_same() {
    let app = TestApp::start().await;
    scenario::push(&app, &scenario::batches()).await;
    app.attribute().await;
    // More of November's step records, written as agents write them: every meter's record
    // for a step together, so each lands in the middle of the (meter, ts) index.
    let collector = app.token(Role::Collector);
    let t0 = Utc.with_ymd_and_hms(2026, 11, 3, 0, 0, 0).unwrap();
    let mut records = Vec::new();
    for k in 0..3_000i64 {
        let ts = (t0 + chrono::Duration::minutes(k)).to_rfc3339();
        for (m, meter) in ["g0", "g1", "g2", "n1"].iter().enumerate() {
            records.push(
                json!({"meter": meter, "ts": ts, "counter_mj": k * 1000 + m as i64, "step_s": 60}),
            );
        }
    }
    for chunk in records.chunks(10_000) {
        let (status, body) = app.ingest(&collector, "samples", json!(chunk)).await;
        assert_eq!(status, 200, "{body}");
    }
    app.attribute().await;
    let before_rows: Vec<(i64, DateTime<Utc>, Option<i64>)> =
        sqlx::query_as("SELECT meter_id, ts, counter_mj FROM samples ORDER BY 1, 2")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    let ledger = ledger_sum(&app).await;
    let compaction = wattledger_store::compaction::run;
    // Not while the month can still take late data.
    let dec_2 = Utc.with_ymd_and_hms(2026, 12, 2, 12, 0, 0).unwrap();
    assert!(compaction(&app.pool, dec_2).await.unwrap().is_empty());
    let dec_3 = Utc.with_ymd_and_hms(2026, 12, 3, 0, 0, 0).unwrap();
    let done = compaction(&app.pool, dec_3).await.unwrap();
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0].name, "samples_steps_y2026m11");
    assert!(
        done[0].index_bytes_after < done[0].index_bytes_before,
        "{done:?}"
    );
    // Once only; and nothing read differs.
    assert!(compaction(&app.pool, dec_3).await.unwrap().is_empty());
    let after_rows: Vec<(i64, DateTime<Utc>, Option<i64>)> =
        sqlx::query_as("SELECT meter_id, ts, counter_mj FROM samples ORDER BY 1, 2")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(before_rows, after_rows);
    assert_eq!(ledger_sum(&app).await, ledger);
}
