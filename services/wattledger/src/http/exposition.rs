//! The Prometheus text exposition format (0.0.4): metric families with their help and type,
//! samples with escaped label values, and histograms as their `_bucket`, `_sum` and
//! `_count` samples. What the families hold is `prometheus.rs`'s.

use crate::telemetry::HistogramSnapshot;
use rust_decimal::Decimal;
use std::fmt::Write;

pub type Labels = Vec<(&'static str, String)>;

/// One sample: its name's suffix (`_bucket`, `_sum`, `_count` in a histogram, else empty),
/// labels and value.
pub struct Sample {
    pub suffix: &'static str,
    pub labels: Labels,
    pub value: String,
}

impl From<(Labels, String)> for Sample {
    fn from((labels, value): (Labels, String)) -> Self {
        Sample {
            suffix: "",
            labels,
            value,
        }
    }
}

/// One metric family: its help, type and samples. A family without samples is not written.
pub struct Family {
    pub name: &'static str,
    pub kind: &'static str,
    pub help: &'static str,
    pub samples: Vec<Sample>,
}

impl Family {
    pub fn new(
        name: &'static str,
        kind: &'static str,
        help: &'static str,
        samples: impl IntoIterator<Item = (Labels, String)>,
    ) -> Self {
        Family {
            name,
            kind,
            help,
            samples: samples.into_iter().map(Sample::from).collect(),
        }
    }

    /// A histogram family: one histogram per label set.
    pub fn histogram(
        name: &'static str,
        help: &'static str,
        histograms: impl IntoIterator<Item = (Labels, HistogramSnapshot)>,
    ) -> Self {
        let mut samples = Vec::new();
        for (labels, h) in histograms {
            for (le, n) in &h.buckets {
                let mut l = labels.clone();
                l.push(("le", float(*le)));
                samples.push(Sample {
                    suffix: "_bucket",
                    labels: l,
                    value: n.to_string(),
                });
            }
            samples.push(Sample {
                suffix: "_sum",
                labels: labels.clone(),
                value: float(h.sum_s),
            });
            samples.push(Sample {
                suffix: "_count",
                labels,
                value: h.count.to_string(),
            });
        }
        Family {
            name,
            kind: "histogram",
            help,
            samples,
        }
    }
}

/// A float as the format writes it (`+Inf` for infinity).
fn float(v: f64) -> String {
    if v == f64::INFINITY {
        "+Inf".into()
    } else {
        v.to_string()
    }
}

/// An exact figure, without trailing zeros.
pub fn num(d: Decimal) -> String {
    d.normalize().to_string()
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

pub fn write_family(out: &mut String, f: &Family) {
    if f.samples.is_empty() {
        return;
    }
    let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
    let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
    for s in &f.samples {
        let _ = write!(out, "{}{}", f.name, s.suffix);
        if !s.labels.is_empty() {
            let l: Vec<String> = (s.labels.iter())
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            let _ = write!(out, "{{{}}}", l.join(","));
        }
        let _ = writeln!(out, " {}", s.value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_writes_cumulative_buckets_sum_and_count() {
        let f = Family::histogram(
            "x_seconds",
            "X.",
            [(
                vec![("route", "/a\"b".to_owned())],
                HistogramSnapshot {
                    buckets: vec![(0.005, 1), (1.0, 3), (f64::INFINITY, 4)],
                    count: 4,
                    sum_s: 12.5,
                },
            )],
        );
        let mut out = String::new();
        write_family(&mut out, &f);
        assert_eq!(
            out,
            "# HELP x_seconds X.\n# TYPE x_seconds histogram\n\
             x_seconds_bucket{route=\"/a\\\"b\",le=\"0.005\"} 1\n\
             x_seconds_bucket{route=\"/a\\\"b\",le=\"1\"} 3\n\
             x_seconds_bucket{route=\"/a\\\"b\",le=\"+Inf\"} 4\n\
             x_seconds_sum{route=\"/a\\\"b\"} 12.5\n\
             x_seconds_count{route=\"/a\\\"b\"} 4\n"
        );
    }
}
