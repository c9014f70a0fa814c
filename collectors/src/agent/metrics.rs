//! The agent's own counters and gauges, served as Prometheus text on `/metrics`.
//!
//! A handful of families with a `source` label: a map behind a mutex is all this needs, and
//! it keeps the agent free of a metrics framework.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

/// The families, with their help and type, in exposition order.
const FAMILIES: &[(&str, &str, &str)] = &[
    (
        "wattledger_agent_source_reads_total",
        "counter",
        "Collection cycles a source completed.",
    ),
    (
        "wattledger_agent_source_errors_total",
        "counter",
        "Collection cycles a source failed (see the log for why).",
    ),
    (
        "wattledger_agent_source_state_unreadable_total",
        "counter",
        "Spooled source states a restart could not read back (the source started afresh).",
    ),
    (
        "wattledger_agent_records_read_total",
        "counter",
        "Records a source produced (samples, jobs, tokens, meters).",
    ),
    (
        "wattledger_agent_records_pushed_total",
        "counter",
        "Records the server acknowledged.",
    ),
    (
        "wattledger_agent_records_dead_lettered_total",
        "counter",
        "Records the server refused, written to the dead-letter file.",
    ),
    (
        "wattledger_agent_records_dropped_total",
        "counter",
        "Records not spooled because the spool was full.",
    ),
    (
        "wattledger_agent_sample_conflicts_total",
        "counter",
        "Samples the server already held with other values.",
    ),
    (
        "wattledger_agent_push_failures_total",
        "counter",
        "Push attempts that failed and will be retried.",
    ),
    (
        "wattledger_agent_spool_pending_bytes",
        "gauge",
        "Bytes spooled and not yet acknowledged.",
    ),
    (
        "wattledger_agent_source_last_success_timestamp_seconds",
        "gauge",
        "When a source last completed a cycle.",
    ),
    (
        "wattledger_agent_clock_synced",
        "gauge",
        "1 once an answer from the server gave its time (readings carry it); 0 while readings carry this machine's clock.",
    ),
    (
        "wattledger_agent_clock_offset_seconds",
        "gauge",
        "How far this machine's clock is behind the server's (negative: ahead), at the server's last answer.",
    ),
];

/// Counters whose `source` label names a configured source.
const PER_SOURCE: &[&str] = &[
    "wattledger_agent_source_reads_total",
    "wattledger_agent_source_errors_total",
    "wattledger_agent_source_state_unreadable_total",
    "wattledger_agent_records_read_total",
    "wattledger_agent_records_dropped_total",
];
/// Counters whose `source` label names the ingest endpoint a push went to.
const PER_ENDPOINT: &[&str] = &[
    "wattledger_agent_records_pushed_total",
    "wattledger_agent_records_dead_lettered_total",
    "wattledger_agent_sample_conflicts_total",
];

#[derive(Default)]
pub struct Metrics {
    values: Mutex<BTreeMap<(&'static str, String), f64>>,
}

impl Metrics {
    /// Every counter at 0, for each source and endpoint, before anything happened. A series
    /// that first appears at 1 has no increase for `increase()` or `rate()` to see, so an
    /// alert on a source's first error, or a push's first failure, would never fire.
    pub fn starting(sources: &[String], endpoints: &[&str]) -> Metrics {
        let mut values = BTreeMap::new();
        for (families, labels) in [
            (PER_SOURCE, sources.to_vec()),
            (
                PER_ENDPOINT,
                endpoints.iter().map(|e| e.to_string()).collect(),
            ),
        ] {
            for family in families {
                for label in &labels {
                    values.insert((*family, label.clone()), 0.0);
                }
            }
        }
        values.insert(("wattledger_agent_push_failures_total", String::new()), 0.0);
        values.insert(("wattledger_agent_clock_synced", String::new()), 0.0);
        Metrics {
            values: Mutex::new(values),
        }
    }

    /// Adds `by` to a counter; `label` is the source name, or empty for none.
    pub fn add(&self, family: &'static str, label: &str, by: u64) {
        debug_assert!(FAMILIES.iter().any(|f| f.0 == family), "{family}");
        let mut v = self.values.lock().expect("metrics lock");
        *v.entry((family, label.to_owned())).or_default() += by as f64;
    }

    pub fn set(&self, family: &'static str, label: &str, value: f64) {
        debug_assert!(FAMILIES.iter().any(|f| f.0 == family), "{family}");
        let mut v = self.values.lock().expect("metrics lock");
        v.insert((family, label.to_owned()), value);
    }

    pub fn get(&self, family: &'static str, label: &str) -> f64 {
        let v = self.values.lock().expect("metrics lock");
        v.get(&(family, label.to_owned())).copied().unwrap_or(0.0)
    }

    /// Prometheus text exposition format 0.0.4.
    pub fn render(&self) -> String {
        let v = self.values.lock().expect("metrics lock");
        let mut out = String::new();
        for (family, kind, help) in FAMILIES {
            let _ = writeln!(out, "# HELP {family} {help}\n# TYPE {family} {kind}");
            for ((_, label), value) in v
                .range((*family, String::new())..)
                .take_while(|((f, _), _)| f == family)
            {
                if label.is_empty() {
                    let _ = writeln!(out, "{family} {value}");
                } else {
                    let escaped = label
                        .replace('\\', r"\\")
                        .replace('"', "\\\"")
                        .replace('\n', r"\n");
                    let _ = writeln!(out, "{family}{{source=\"{escaped}\"}} {value}");
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_families_with_escaped_labels() {
        let m = Metrics::default();
        m.add("wattledger_agent_records_read_total", "dcgm \"a\"", 3);
        m.add("wattledger_agent_records_read_total", "dcgm \"a\"", 2);
        m.set("wattledger_agent_spool_pending_bytes", "", 42.0);
        let text = m.render();
        assert!(text.contains("wattledger_agent_records_read_total{source=\"dcgm \\\"a\\\"\"} 5\n"));
        assert!(text.contains("wattledger_agent_spool_pending_bytes 42\n"));
        // It is valid exposition text by our own parser too.
        let parsed = crate::sources::prom::parse(&text).unwrap();
        assert_eq!(parsed.samples.len(), 2);
    }

    /// Before the first cycle every counter a dashboard or alert rates is there at 0.
    #[test]
    fn counters_start_at_zero_for_every_source_and_endpoint() {
        let m = Metrics::starting(&["nvml".into()], &crate::records::Batch::ENDPOINTS);
        let text = m.render();
        for line in [
            "wattledger_agent_source_errors_total{source=\"nvml\"} 0\n",
            "wattledger_agent_records_dropped_total{source=\"nvml\"} 0\n",
            "wattledger_agent_records_dead_lettered_total{source=\"samples\"} 0\n",
            "wattledger_agent_records_pushed_total{source=\"signals\"} 0\n",
            "wattledger_agent_push_failures_total 0\n",
            "wattledger_agent_clock_synced 0\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        let parsed = crate::sources::prom::parse(&text).unwrap();
        assert_eq!(
            parsed.samples.len(),
            PER_SOURCE.len() + 5 * PER_ENDPOINT.len() + 2
        );
        // No gauge is invented: a last success that never happened is absent, not 0.
        assert!(!text.contains("wattledger_agent_source_last_success_timestamp_seconds{"));
    }
}
