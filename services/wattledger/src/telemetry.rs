//! What this process did, counted in memory for `/metrics`: requests by route and status
//! with their latency, ingested records by kind and outcome, and admission decisions with
//! the time each took to decide.
//!
//! The counts are per replica (Prometheus sums them over replicas) and start at zero with
//! the process, as counters may. They sit on every request, so they are atomics: a route's
//! counters are found under a shared lock and created once, the first time the route
//! answers (a write lock then, once per route).
//! Labels come from closed sets only (the router's path templates, status codes, record
//! kinds, verdicts), never from what a client sent.

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wattledger_domain::admission::Verdict;

/// Request latency buckets, seconds: 1 ms to 10 s.
const REQUEST_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Decision latency buckets, seconds: 10 µs to 100 ms (a decision is in memory: µs).
const DECISION_BUCKETS: &[f64] = &[
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1,
];

/// The route label of a request no route matched (the fallback): unknown paths are the
/// client's text, so they are never a label.
pub const UNMATCHED: &str = "unmatched";

/// A latency histogram with fixed upper bounds (seconds).
pub struct Histogram {
    bounds: &'static [f64],
    /// Per bucket, not cumulative; the last one is `+Inf`.
    counts: Box<[AtomicU64]>,
    sum_ns: AtomicU64,
}

/// A histogram read at one instant: cumulative counts per upper bound, `+Inf` last.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    pub buckets: Vec<(f64, u64)>,
    pub count: u64,
    pub sum_s: f64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_ns: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = self
            .bounds
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Relaxed);
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_ns.fetch_add(ns, Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut total = 0;
        let mut buckets = Vec::with_capacity(self.counts.len());
        for (i, c) in self.counts.iter().enumerate() {
            total += c.load(Relaxed);
            buckets.push((self.bounds.get(i).copied().unwrap_or(f64::INFINITY), total));
        }
        HistogramSnapshot {
            buckets,
            count: total,
            sum_s: self.sum_ns.load(Relaxed) as f64 / 1e9,
        }
    }
}

/// A route's counters: answers by status code (100–599) and their latency.
struct RouteStats {
    by_status: Box<[AtomicU64]>,
    latency: Histogram,
}

const FIRST_STATUS: u16 = 100;
const STATUSES: usize = 500;

impl RouteStats {
    fn new() -> Self {
        RouteStats {
            by_status: (0..STATUSES).map(|_| AtomicU64::new(0)).collect(),
            latency: Histogram::new(REQUEST_BUCKETS),
        }
    }

    fn count(&self, status: u16, took: Duration) {
        let slot =
            (status.checked_sub(FIRST_STATUS)).and_then(|i| self.by_status.get(usize::from(i)));
        if let Some(c) = slot {
            c.fetch_add(1, Relaxed);
        }
        self.latency.observe(took);
    }
}

/// The kind of record an ingest endpoint takes (a job's allocations are counted apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    Tenants,
    Sites,
    Models,
    DeviceModels,
    Meters,
    Samples,
    Jobs,
    Allocations,
    Tokens,
    Signals,
    CleanEnergy,
}

impl RecordKind {
    pub const ALL: [RecordKind; 11] = [
        RecordKind::Tenants,
        RecordKind::Sites,
        RecordKind::Models,
        RecordKind::DeviceModels,
        RecordKind::Meters,
        RecordKind::Samples,
        RecordKind::Jobs,
        RecordKind::Allocations,
        RecordKind::Tokens,
        RecordKind::Signals,
        RecordKind::CleanEnergy,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RecordKind::Tenants => "tenants",
            RecordKind::Sites => "sites",
            RecordKind::Models => "models",
            RecordKind::DeviceModels => "device_models",
            RecordKind::Meters => "meters",
            RecordKind::Samples => "samples",
            RecordKind::Jobs => "jobs",
            RecordKind::Allocations => "allocations",
            RecordKind::Tokens => "tokens",
            RecordKind::Signals => "signals",
            RecordKind::CleanEnergy => "clean_energy",
        }
    }
}

/// What became of an ingested record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordOutcome {
    /// Inserted or changed.
    Written,
    /// Already stored with the same values.
    Duplicate,
    /// Already stored with other values: the stored one stands.
    Conflict,
    /// In a batch refused as a whole (4xx): nothing of it was written.
    Refused,
}

impl RecordOutcome {
    pub const ALL: [RecordOutcome; 4] = [
        RecordOutcome::Written,
        RecordOutcome::Duplicate,
        RecordOutcome::Conflict,
        RecordOutcome::Refused,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RecordOutcome::Written => "written",
            RecordOutcome::Duplicate => "duplicate",
            RecordOutcome::Conflict => "conflict",
            RecordOutcome::Refused => "refused",
        }
    }
}

const VERDICTS: [Verdict; 3] = [Verdict::Admit, Verdict::Defer, Verdict::Reject];

/// This process's counters.
pub struct Telemetry {
    routes: RwLock<HashMap<String, RouteStats>>,
    records: [[AtomicU64; 4]; RecordKind::ALL.len()],
    decisions: [AtomicU64; 3],
    decision_latency: Histogram,
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry {
            routes: RwLock::default(),
            records: Default::default(),
            decisions: Default::default(),
            decision_latency: Histogram::new(DECISION_BUCKETS),
        }
    }
}

impl Telemetry {
    /// Counts a request to `route` (a path template, or [`UNMATCHED`]) answered with
    /// `status` after `took`.
    pub fn request(&self, route: &str, status: u16, took: Duration) {
        if let Some(stats) = self.routes.read().get(route) {
            return stats.count(status, took);
        }
        (self.routes.write())
            .entry(route.to_owned())
            .or_insert_with(RouteStats::new)
            .count(status, took);
    }

    pub fn records(&self, kind: RecordKind, outcome: RecordOutcome, n: u64) {
        if n > 0 {
            self.records[kind as usize][outcome as usize].fetch_add(n, Relaxed);
        }
    }

    /// Counts a decision and the time its decide call took.
    pub fn decided(&self, verdict: Verdict, took: Duration) {
        let i = VERDICTS.iter().position(|v| *v == verdict).unwrap_or(0);
        self.decisions[i].fetch_add(1, Relaxed);
        self.decision_latency.observe(took);
    }

    /// Requests so far: per route, per status code, the count; and per route the latency.
    pub fn requests(&self) -> BTreeMap<String, (Vec<(u16, u64)>, HistogramSnapshot)> {
        self.routes
            .read()
            .iter()
            .map(|(route, s)| {
                let statuses = (s.by_status.iter().enumerate())
                    .map(|(i, c)| (FIRST_STATUS + i as u16, c.load(Relaxed)))
                    .filter(|(_, n)| *n > 0)
                    .collect();
                (route.clone(), (statuses, s.latency.snapshot()))
            })
            .collect()
    }

    /// Records so far, every kind × outcome (zeros included, so a rate is defined from the
    /// first scrape).
    pub fn record_counts(&self) -> Vec<(RecordKind, RecordOutcome, u64)> {
        RecordKind::ALL
            .into_iter()
            .flat_map(|k| {
                RecordOutcome::ALL
                    .into_iter()
                    .map(move |o| (k, o, self.records[k as usize][o as usize].load(Relaxed)))
            })
            .collect()
    }

    /// Decisions so far by verdict (zeros included), and their decide-call latency.
    pub fn decisions(&self) -> (Vec<(Verdict, u64)>, HistogramSnapshot) {
        (
            VERDICTS
                .iter()
                .zip(&self.decisions)
                .map(|(v, c)| (*v, c.load(Relaxed)))
                .collect(),
            self.decision_latency.snapshot(),
        )
    }
}

/// Middleware: counts every request by its route template and status, with its latency.
pub async fn track(State(t): State<Arc<Telemetry>>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = req.extensions().get::<MatchedPath>().cloned();
    let response = next.run(req).await;
    t.request(
        route.as_ref().map_or(UNMATCHED, MatchedPath::as_str),
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_with_the_edge_in_its_bucket() {
        let h = Histogram::new(&[0.001, 0.01]);
        h.observe(Duration::from_micros(1000));
        h.observe(Duration::from_millis(5));
        h.observe(Duration::from_secs(2));
        let s = h.snapshot();
        assert_eq!(s.buckets, vec![(0.001, 1), (0.01, 2), (f64::INFINITY, 3)]);
        assert_eq!(s.count, 3);
        assert!((s.sum_s - 2.006).abs() < 1e-9);
    }

    #[test]
    fn requests_are_counted_per_route_and_status() {
        let t = Telemetry::default();
        t.request("/v1/ingest/samples", 200, Duration::from_millis(3));
        t.request("/v1/ingest/samples", 200, Duration::from_millis(4));
        t.request("/v1/ingest/samples", 422, Duration::from_millis(1));
        t.request(UNMATCHED, 404, Duration::from_micros(50));
        let r = t.requests();
        assert_eq!(r["/v1/ingest/samples"].0, vec![(200, 2), (422, 1)]);
        assert_eq!(r["/v1/ingest/samples"].1.count, 3);
        assert_eq!(r[UNMATCHED].0, vec![(404, 1)]);
    }

    #[test]
    fn records_and_decisions_keep_their_labels_apart() {
        let t = Telemetry::default();
        t.records(RecordKind::Jobs, RecordOutcome::Written, 3);
        t.records(RecordKind::Allocations, RecordOutcome::Duplicate, 2);
        t.decided(Verdict::Defer, Duration::from_micros(30));
        let counts = t.record_counts();
        assert_eq!(counts.len(), RecordKind::ALL.len() * 4);
        let get = |k, o| counts.iter().find(|c| c.0 == k && c.1 == o).unwrap().2;
        assert_eq!(get(RecordKind::Jobs, RecordOutcome::Written), 3);
        assert_eq!(get(RecordKind::Allocations, RecordOutcome::Duplicate), 2);
        assert_eq!(get(RecordKind::Jobs, RecordOutcome::Duplicate), 0);
        let (by, latency) = t.decisions();
        assert_eq!(
            by,
            vec![
                (Verdict::Admit, 0),
                (Verdict::Defer, 1),
                (Verdict::Reject, 0)
            ]
        );
        // 30 µs: in the 50 µs bucket, not the 25 µs one.
        assert_eq!(latency.buckets[1], (0.000025, 0));
        assert_eq!(latency.buckets[2], (0.00005, 1));
    }
}
