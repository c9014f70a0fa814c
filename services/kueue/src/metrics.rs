//! The controller's counts and its `/healthz` + `/metrics` listener (Prometheus text format).

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::decision::{State as CheckState, Verdict};

#[derive(Debug, Default)]
pub struct Metrics {
    /// Decisions wattledger answered, by verdict: admit, defer, reject.
    decisions: [AtomicU64; 3],
    /// Check states written, by state: Ready, Retry, Rejected.
    updates: [AtomicU64; 3],
    /// Questions wattledger did not answer (unreachable, 5xx, a refused token).
    server_failures: AtomicU64,
    /// Kubernetes API calls that failed.
    kube_errors: AtomicU64,
    /// Reconcile passes finished, and when the last one did (Unix seconds).
    passes: AtomicU64,
    last_pass_unix: AtomicI64,
}

const VERDICTS: [Verdict; 3] = [Verdict::Admit, Verdict::Defer, Verdict::Reject];
const STATES: [CheckState; 3] = [CheckState::Ready, CheckState::Retry, CheckState::Rejected];

impl Metrics {
    pub fn decision(&self, v: Verdict) {
        let i = VERDICTS.iter().position(|x| *x == v).unwrap_or(0);
        self.decisions[i].fetch_add(1, Ordering::Relaxed);
    }

    pub fn update(&self, s: CheckState) {
        let i = STATES.iter().position(|x| *x == s).unwrap_or(0);
        self.updates[i].fetch_add(1, Ordering::Relaxed);
    }

    pub fn server_failure(&self) {
        self.server_failures.fetch_add(1, Ordering::Relaxed);
    }

    pub fn kube_error(&self) {
        self.kube_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub fn pass_done(&self, unix: i64) {
        self.passes.fetch_add(1, Ordering::Relaxed);
        self.last_pass_unix.store(unix, Ordering::Relaxed);
    }

    pub fn decisions(&self, v: Verdict) -> u64 {
        let i = VERDICTS.iter().position(|x| *x == v).unwrap_or(0);
        self.decisions[i].load(Ordering::Relaxed)
    }

    pub fn server_failures(&self) -> u64 {
        self.server_failures.load(Ordering::Relaxed)
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let _ = writeln!(out, "# HELP wattledger_kueue_decisions_total Admission decisions wattledger answered, by decision.");
        let _ = writeln!(out, "# TYPE wattledger_kueue_decisions_total counter");
        for (v, n) in VERDICTS.iter().zip(&self.decisions) {
            let _ = writeln!(
                out,
                "wattledger_kueue_decisions_total{{decision=\"{}\"}} {}",
                v.as_str(),
                load(n)
            );
        }
        let _ = writeln!(out, "# HELP wattledger_kueue_check_updates_total Admission check states written on Workloads, by state.");
        let _ = writeln!(out, "# TYPE wattledger_kueue_check_updates_total counter");
        for (s, n) in STATES.iter().zip(&self.updates) {
            let _ = writeln!(
                out,
                "wattledger_kueue_check_updates_total{{state=\"{}\"}} {}",
                s.as_str(),
                load(n)
            );
        }
        let simple = [
            (
                "wattledger_kueue_server_failures_total",
                "Questions wattledger did not answer (unreachable, failing, token refused).",
                &self.server_failures,
            ),
            (
                "wattledger_kueue_kube_errors_total",
                "Kubernetes API calls that failed.",
                &self.kube_errors,
            ),
            (
                "wattledger_kueue_passes_total",
                "Reconcile passes finished.",
                &self.passes,
            ),
        ];
        for (name, help, n) in simple {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            let _ = writeln!(out, "{name} {}", load(n));
        }
        let _ = writeln!(out, "# HELP wattledger_kueue_last_pass_timestamp_seconds When the last reconcile pass finished.");
        let _ = writeln!(
            out,
            "# TYPE wattledger_kueue_last_pass_timestamp_seconds gauge"
        );
        let _ = writeln!(
            out,
            "wattledger_kueue_last_pass_timestamp_seconds {}",
            self.last_pass_unix.load(Ordering::Relaxed)
        );
        out
    }
}

#[derive(Clone)]
struct Health {
    metrics: Arc<Metrics>,
    stale_after: Duration,
    started_unix: i64,
}

/// `/healthz` is 200 while a reconcile pass has finished (whatever its outcome) within
/// `stale_after` (or the process is younger than that), else 503: a loop that stopped
/// turning is what a restart fixes; an unreachable wattledger or API server is not.
async fn healthz(State(h): State<Health>) -> impl IntoResponse {
    let now = chrono::Utc::now().timestamp();
    let last = h
        .metrics
        .last_pass_unix
        .load(Ordering::Relaxed)
        .max(h.started_unix);
    let stale = i64::try_from(h.stale_after.as_secs()).unwrap_or(i64::MAX);
    if now.saturating_sub(last) <= stale {
        (StatusCode::OK, "ok\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "the reconcile loop is stuck\n",
        )
    }
}

async fn metrics(State(h): State<Health>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        h.metrics.render(),
    )
}

pub fn router(metrics: Arc<Metrics>, stale_after: Duration) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(self::metrics))
        .with_state(Health {
            metrics,
            stale_after,
            started_unix: chrono::Utc::now().timestamp(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_render_as_prometheus_text() {
        let m = Metrics::default();
        m.decision(Verdict::Defer);
        m.decision(Verdict::Defer);
        m.update(CheckState::Retry);
        m.server_failure();
        let text = m.render();
        assert!(text.contains("wattledger_kueue_decisions_total{decision=\"defer\"} 2\n"));
        assert!(text.contains("wattledger_kueue_decisions_total{decision=\"admit\"} 0\n"));
        assert!(text.contains("wattledger_kueue_check_updates_total{state=\"Retry\"} 1\n"));
        assert!(text.contains("wattledger_kueue_server_failures_total 1\n"));
        assert!(text.contains("# TYPE wattledger_kueue_passes_total counter\n"));
    }
}
