//! The step reducer on real readings: the 1 Hz readings an agent took of an H100 under load
//! (tests/fixtures/nvml-h100, NOTES.md there), reduced here as the agent reduces them, give
//! the board's energy per step as NVIDIA's own binding read it at 10 Hz, and the step records
//! the agent sent.

use std::collections::BTreeMap;
use wattledger_agent::records::Sample;
use wattledger_agent::steps::Reducer;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/nvml-h100");

/// The samples pushed for one meter, in time order.
fn pushed(meter: &str) -> Vec<Sample> {
    let text = std::fs::read_to_string(format!("{DIR}/agent-pushes.jsonl")).unwrap();
    let mut out: Vec<Sample> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|p| p["path"] == "/v1/ingest/samples")
        .flat_map(|p| p["body"]["records"].as_array().unwrap().clone())
        .map(|r| serde_json::from_value::<Sample>(r).unwrap())
        .filter(|s| s.meter == meter)
        .collect();
    out.sort_by_key(|s| s.ts);
    out
}

/// pynvml's reads: (Unix ms, counter mJ).
fn reference_reads() -> Vec<(f64, f64)> {
    let text = std::fs::read_to_string(format!("{DIR}/pynvml-10hz.csv")).unwrap();
    text.lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[0].parse::<f64>().unwrap() * 1000.0, f[1].parse().unwrap())
        })
        .collect()
}

/// pynvml's counter (mJ) at an instant, interpolated between its 10 Hz reads.
fn at(reads: &[(f64, f64)], ms: i64) -> f64 {
    let t = ms as f64;
    let w = reads
        .windows(2)
        .find(|w| w[0].0 <= t && t <= w[1].0)
        .expect("inside the reference reads");
    let ((t0, e0), (t1, e1)) = (w[0], w[1]);
    e0 + (e1 - e0) * (t - t0) / (t1 - t0)
}

#[test]
fn reduced_real_readings_match_the_boards_own_counter_and_the_agents_steps() {
    let raw = pushed("h100-n0-raw-gpu0");
    assert_eq!(raw.len(), 175);
    let mut reducer = Reducer::new(10_000, 50_000);
    let steps: BTreeMap<i64, i64> = reducer
        .push(raw)
        .into_iter()
        .map(|s| (s.ts.timestamp_millis(), s.counter_mj.unwrap()))
        .collect();
    let sent: BTreeMap<i64, i64> = pushed("h100-n0-gpu0")
        .into_iter()
        .map(|s| (s.ts.timestamp_millis(), s.counter_mj.unwrap()))
        .collect();
    assert_eq!(sent.len(), 17);
    assert!(steps.len() >= 16, "{} boundaries", steps.len());
    let reads = reference_reads();
    let reference = |ms: i64| at(&reads, ms);

    for (&at, &mj) in &steps {
        // At up to 700 W, 50 J is 71 ms of a reading's timing.
        let off = mj as f64 - reference(at);
        assert!(off.abs() < 50_000.0, "{at}: {off:.0} mJ from pynvml");
        if let Some(&other) = sent.get(&at) {
            assert!((mj - other).abs() < 50_000, "{at}: {mj} here, {other} sent");
        }
    }
    // Over the whole load the boundaries' errors cancel: the energy between the first and
    // the last boundary is the board's to within 1 J of 47 kJ and more.
    let (first, last) = (
        steps.first_key_value().unwrap(),
        steps.last_key_value().unwrap(),
    );
    let rise = (last.1 - first.1) as f64;
    let board = reference(*last.0) - reference(*first.0);
    assert!(rise > 47_000_000.0, "{rise}");
    assert!((rise - board).abs() < 1_000.0, "{rise} vs {board}");
}
