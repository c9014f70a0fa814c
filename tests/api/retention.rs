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

/// Every step record as (meter, ts µs, counter, power, peak, estimated), from `samples` and
/// the packs together, in order; fails on an instant in both.
async fn all_steps(app: &TestApp) -> Vec<(i64, i64, Option<i64>, Option<i64>, Option<i64>, bool)> {
    type Row = (
        i64,
        DateTime<Utc>,
        Option<i64>,
        Option<i64>,
        Option<i64>,
        bool,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT meter_id, ts, counter_mj, power_mw, peak_mw, counter_estimated
         FROM samples WHERE NOT raw",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let mut out: Vec<_> = rows
        .into_iter()
        .map(|r| (r.0, r.1.timestamp_micros(), r.2, r.3, r.4, r.5))
        .collect();
    let packs: Vec<(i64, Vec<u8>)> = sqlx::query_as("SELECT meter_id, packed FROM step_packs")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    for (meter, packed) in packs {
        for s in wattledger_domain::step_pack::unpack(&packed).unwrap() {
            out.push((
                meter,
                s.ts_us,
                s.counter_mj,
                s.power_mw,
                s.peak_mw,
                s.counter_estimated,
            ));
        }
    }
    out.sort_unstable();
    let n = out.len();
    out.dedup_by_key(|r| (r.0, r.1));
    assert_eq!(out.len(), n, "an instant both in samples and in a pack");
    out
}

async fn ledger_rows(app: &TestApp) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT (to_jsonb(l) - ARRAY['id', 'run_id', 'computed_at'])::text FROM ledger l ORDER BY 1",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn closed_days_are_packed_read_the_same_and_take_late_data() {
    let app = TestApp::start().await;
    scenario::push(&app, &scenario::batches()).await;
    // Two days and more of step records, written as agents write them: every meter's record
    // for a step together.
    let collector = app.token(Role::Collector);
    let t0 = Utc.with_ymd_and_hms(2026, 11, 3, 0, 0, 0).unwrap();
    let minute = chrono::Duration::minutes(1);
    let mut records = Vec::new();
    for k in 0..3_000i64 {
        let ts = (t0 + minute * k as i32).to_rfc3339();
        for (m, meter) in ["g0", "g1", "g2", "n1"].iter().enumerate() {
            records.push(
                json!({"meter": meter, "ts": ts, "counter_mj": k * 1000 + m as i64,
                                "power_w": 16 + k % 7, "peak_w": 30, "step_s": 60}),
            );
        }
    }
    for chunk in records.chunks(10_000) {
        let (status, body) = app.ingest(&collector, "samples", json!(chunk)).await;
        assert_eq!(status, 200, "{body}");
    }
    app.attribute().await;
    let steps = all_steps(&app).await;
    let ledger = ledger_rows(&app).await;
    let compaction =
        |now| wattledger_store::compaction::run(&app.pool, now, std::time::Duration::MAX);

    // Not a day before it has been over for two: on Nov 6 at noon, Nov 3's (the scenario's
    // Nov 2 readings are raw: they stay where they are).
    let nov_6 = Utc.with_ymd_and_hms(2026, 11, 6, 12, 0, 0).unwrap();
    let pass = compaction(nov_6).await.unwrap();
    let days: Vec<String> = pass
        .packed
        .iter()
        .filter(|d| d.rows > 0)
        .map(|d| d.day.to_string())
        .collect();
    assert_eq!(days, ["2026-11-03"], "{pass:?}");
    assert!(pass.reindexed.is_empty(), "the month is not over");
    assert_eq!(
        all_steps(&app).await,
        steps,
        "every record in samples or a pack, once"
    );
    let left: Vec<(DateTime<Utc>,)> = sqlx::query_as("SELECT min(ts) FROM samples WHERE NOT raw")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert_eq!(
        left[0].0,
        Utc.with_ymd_and_hms(2026, 11, 4, 0, 0, 0).unwrap()
    );
    assert!(compaction(nov_6).await.unwrap().packed.is_empty(), "once");

    // Attributed again from the packs (and the rows of Nov 4 and 5): the same ledger.
    let pool = &app.pool;
    let mut conn = pool.acquire().await.unwrap();
    let site: i64 = sqlx::query_scalar("SELECT id FROM sites")
        .fetch_one(pool)
        .await
        .unwrap();
    let (from, to) = (
        t0 - chrono::Duration::days(1),
        t0 + chrono::Duration::days(3),
    );
    wattledger_store::dirty::mark_site_spans(&mut conn, &[site], &[from], &[to])
        .await
        .unwrap();
    drop(conn);
    app.attribute().await;
    assert_eq!(ledger_rows(&app).await, ledger);

    // Late data for a packed day: a resend is a duplicate, other values a conflict (the packed
    // ones stand, and are reported), a new instant is written and merged at the next pass.
    let at = |k: i64| (t0 + minute * k as i32).to_rfc3339();
    let (status, body) = app
        .ingest(&collector, "samples", json!([
            {"meter": "g0", "ts": at(10), "counter_mj": 10_000, "power_w": 19, "peak_w": 30, "step_s": 60},
            {"meter": "g1", "ts": at(10), "counter_mj": 5, "power_w": 19, "peak_w": 30, "step_s": 60},
        ]))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["written"].as_u64(), body["duplicates"].as_u64()),
        (Some(0), Some(1)),
        "{body}"
    );
    assert_eq!(body["conflicts"][0]["index"], 1, "{body}");
    let reason = body["conflicts"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("counter_mj=Some(10001)"), "{body}");
    // n1 sends a step record half a minute into a packed day's 01:00 minute... as a 30 s
    // step: a new instant.
    let new_ts = (t0 + chrono::Duration::seconds(3_630)).to_rfc3339();
    let (status, body) = app
        .ingest(
            &collector,
            "samples",
            json!([
                {"meter": "n1", "ts": new_ts, "counter_mj": 60_503, "step_s": 30},
            ]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["written"], 1, "{body}");
    let dirty: i64 = sqlx::query_scalar("SELECT count(*) FROM dirty_hours")
        .fetch_one(pool)
        .await
        .unwrap();
    assert!(dirty > 0, "the late record marks its hours");
    app.attribute().await;
    let mut with_late = steps.clone();
    let n1: i64 = sqlx::query_scalar("SELECT id FROM meters WHERE key = 'n1'")
        .fetch_one(pool)
        .await
        .unwrap();
    with_late.push((
        n1,
        (t0 + chrono::Duration::seconds(3_630)).timestamp_micros(),
        Some(60_503),
        None,
        None,
        false,
    ));
    with_late.sort_unstable();
    assert_eq!(all_steps(&app).await, with_late);
    let pass = compaction(nov_6).await.unwrap();
    assert_eq!(
        pass.packed
            .iter()
            .map(|d| (d.day.to_string(), d.rows))
            .collect::<Vec<_>>(),
        [("2026-11-03".to_owned(), 1)]
    );
    assert_eq!(all_steps(&app).await, with_late, "merged into its pack");
    let in_samples: i64 =
        sqlx::query_scalar("SELECT count(*) FROM samples WHERE NOT raw AND ts < '2026-11-04'")
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(in_samples, 0);

    // Once the month is over and its days packed, its index is rebuilt, once.
    let dec_3 = Utc.with_ymd_and_hms(2026, 12, 3, 0, 0, 0).unwrap();
    let pass = compaction(dec_3).await.unwrap();
    assert_eq!(
        pass.reindexed
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        ["samples_steps_y2026m11"]
    );
    assert!(compaction(dec_3).await.unwrap().is_empty());
    assert_eq!(all_steps(&app).await, with_late);

    // Retention drops the month's packs with its step partition.
    let policy = Policy {
        steps_days: 30,
        raw_days: 14,
        keep_unclosed_months: false,
    };
    let later = Utc.with_ymd_and_hms(2027, 1, 15, 0, 0, 0).unwrap();
    let plan = retention::plan(pool, &policy, later).await.unwrap();
    let dropped = retention::apply(pool, &policy, later, &plan).await.unwrap();
    assert!(
        dropped.iter().any(|s| s.name == "samples_steps_y2026m11"),
        "{dropped:?}"
    );
    let (partition, days): (bool, i64) = sqlx::query_as(
        "SELECT EXISTS (SELECT 1 FROM pg_class WHERE relname = 'step_packs_y2026m11'),
                (SELECT count(*) FROM step_pack_days WHERE day < '2026-12-01')",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!((partition, days), (false, 0));
    assert!(all_steps(&app).await.is_empty());
}
