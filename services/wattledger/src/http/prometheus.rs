//! `GET /metrics`: the efficiency figures of every site's latest complete attributed hour
//! and the service's health, in the Prometheus text exposition format.
//!
//! Site-wide figures reveal the cluster's use together, so the endpoint wants an operator
//! (or admin) bearer token, which Prometheus sends with `authorization: {credentials}` in
//! its scrape config. No tenant-level series: their cardinality grows with jobs, and
//! tenants' figures belong to the ledger API.

use super::error::ApiResult;
use super::extract::Caller;
use super::AppState;
use crate::admission::WriterHealth;
use crate::auth::Role;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use rust_decimal::Decimal;
use std::collections::BTreeMap;
use std::fmt::Write;
use wattledger_domain::load_shape::LoadShape;
use wattledger_domain::metrics::{self, effectiveness, efficiency, EnergyTotals};
use wattledger_domain::units::{ratio, watts};
use wattledger_store::usage::{self, Backlog, LatestHour};

#[utoipa::path(get, path = "/metrics", tag = "service",
    responses((status = 200, description = "Prometheus text exposition format 0.0.4", content_type = "text/plain", body = String),
              (status = 401, body = super::error::ErrorBody), (status = 403, body = super::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_metrics(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<impl IntoResponse> {
    caller.require(&[Role::Operator])?;
    let sites = usage::latest_hours(&state.pool).await?;
    let shapes = super::power::latest_hour_shapes(&state.pool, &sites).await?;
    let backlog = usage::backlog(&state.pool).await?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        render(&sites, &shapes, &backlog, &state.admission.writer_health()),
    ))
}

/// One metric family: its help, type and samples (labels, value).
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: Vec<(Vec<(&'static str, String)>, String)>,
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn write_family(out: &mut String, f: &Family) {
    if f.samples.is_empty() {
        return;
    }
    let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
    let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
    for (labels, value) in &f.samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{} {value}", f.name);
        } else {
            let l: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            let _ = writeln!(out, "{}{{{}}} {value}", f.name, l.join(","));
        }
    }
}

/// A swing's samples by window, leaving out a window no two measured minutes fit in.
fn windows(one: Option<i64>, fifteen: Option<i64>) -> Vec<(&'static str, String)> {
    [("1m", one), ("15m", fifteen)]
        .into_iter()
        .filter_map(|(w, mw)| Some((w, num(watts(mw?)))))
        .collect()
}

fn num(d: Decimal) -> String {
    d.normalize().to_string()
}

/// The exposition text for these sites (with their latest hour's load shape) and this
/// backlog.
pub fn render(
    sites: &[LatestHour],
    shapes: &BTreeMap<String, LoadShape>,
    backlog: &Backlog,
    writer: &WriterHealth,
) -> String {
    let shape_family =
        |name, help, value: &dyn Fn(&LoadShape) -> Vec<(&'static str, String)>| Family {
            name,
            kind: "gauge",
            help,
            samples: shapes
                .iter()
                .flat_map(|(site, l)| {
                    value(l).into_iter().map(move |(window, v)| {
                        let mut labels = vec![("site", site.clone())];
                        if !window.is_empty() {
                            labels.push(("window", window.to_owned()));
                        }
                        (labels, v)
                    })
                })
                .collect(),
        };
    let site_family = |name, kind, help, value: &dyn Fn(&LatestHour) -> Option<String>| Family {
        name,
        kind,
        help,
        samples: sites
            .iter()
            .filter_map(|s| Some((vec![("site", s.site.clone())], value(s)?)))
            .collect(),
    };
    let eff = |s: &LatestHour| {
        efficiency(EnergyTotals {
            total_mj: s.site_mj,
            it_mj: s.it_mj,
            gpu_mj: s.gpu_mj,
            idle_mj: s.idle_mj,
            tokens: s.tokens,
            ..Default::default()
        })
    };
    let pues = |s: &LatestHour| effectiveness(s.site_mj, s.it_mj, s.gpu_mj);
    let families = [
        Family {
            name: "wattledger_build_info",
            kind: "gauge",
            help: "The running wattledger's version.",
            samples: vec![(
                vec![("version", env!("CARGO_PKG_VERSION").to_owned())],
                "1".into(),
            )],
        },
        Family {
            name: "wattledger_attribution_backlog",
            kind: "gauge",
            help: "Site-hours waiting for attribution.",
            samples: vec![(vec![], backlog.dirty_hours.to_string())],
        },
        Family {
            name: "wattledger_attribution_oldest_dirty_age_seconds",
            kind: "gauge",
            help: "How long the oldest waiting site-hour has waited (0 when none waits).",
            samples: vec![(
                vec![],
                format!("{:.3}", backlog.oldest_mark_age_s.unwrap_or(0.0)),
            )],
        },
        Family {
            name: "wattledger_attribution_last_run_timestamp_seconds",
            kind: "gauge",
            help: "When an attribution run last finished (Unix time).",
            samples: backlog
                .last_run_finished
                .map(|t| (vec![], t.timestamp().to_string()))
                .into_iter()
                .collect(),
        },
        Family {
            name: "wattledger_admission_decisions_stored_total",
            kind: "counter",
            help: "Admission decisions this process stored.",
            samples: vec![(vec![], writer.stored.to_string())],
        },
        Family {
            name: "wattledger_admission_decisions_dead_lettered_total",
            kind: "counter",
            help: "Admission decisions the database refused, kept in admission_dead_letters.",
            samples: vec![(vec![], writer.dead_lettered.to_string())],
        },
        Family {
            name: "wattledger_admission_decisions_queued",
            kind: "gauge",
            help: "Admission decisions answered and waiting to be stored.",
            samples: vec![(vec![], writer.queued.to_string())],
        },
        site_family(
            "wattledger_site_energy_joules_total",
            "counter",
            "Site energy over every attributed hour (facility meter or IT x static PUE).",
            &|s| Some(num(Decimal::from(s.energy_mj_total) / Decimal::from(1000))),
        ),
        site_family(
            "wattledger_site_latest_hour_timestamp_seconds",
            "gauge",
            "Start of the site's latest attributed hour, which the figures below describe.",
            &|s| Some(s.hour.timestamp().to_string()),
        ),
        site_family(
            "wattledger_site_power_watts",
            "gauge",
            "Mean site power over the latest attributed hour.",
            &|s| {
                Some(num(
                    (Decimal::from(s.site_mj) / Decimal::from(3_600_000)).round_dp(3)
                ))
            },
        ),
        site_family(
            "wattledger_site_pue_ratio",
            "gauge",
            "Power usage effectiveness: facility energy / IT energy.",
            &|s| pues(s).pue.map(num),
        ),
        site_family(
            "wattledger_site_itue_ratio",
            "gauge",
            "IT usage effectiveness: IT energy / accelerator energy.",
            &|s| pues(s).itue.map(num),
        ),
        site_family(
            "wattledger_site_tue_ratio",
            "gauge",
            "Total usage effectiveness: facility energy / accelerator energy.",
            &|s| pues(s).tue.map(num),
        ),
        site_family(
            "wattledger_site_idle_ratio",
            "gauge",
            "Share of the site's energy no job used.",
            &|s| ratio(s.idle_mj, s.site_mj).map(num),
        ),
        site_family(
            "wattledger_site_allocated_gpu_ratio",
            "gauge",
            "Share of GPU time held by jobs.",
            &|s| ratio(s.allocated_gpu_ms, s.capacity_gpu_ms).map(num),
        ),
        site_family(
            "wattledger_site_tokens_per_kwh",
            "gauge",
            "Tokens served per kWh of site energy.",
            &|s| eff(s).tokens_per_kwh.map(num),
        ),
        site_family(
            "wattledger_site_tokens_per_it_kwh",
            "gauge",
            "Tokens served per kWh of IT energy.",
            &|s| eff(s).tokens_per_kwh_it.map(num),
        ),
        site_family(
            "wattledger_site_peak_watts",
            "gauge",
            "Highest one-minute site draw in the latest attributed hour (facility meters, else IT meters x static PUE).",
            &|s| s.site_peak_mw.map(|mw| num(watts(mw))),
        ),
        site_family(
            "wattledger_site_tokens_per_second_per_megawatt_peak",
            "gauge",
            "Tokens per second per MW of the site's peak draw over the latest attributed hour.",
            &|s| s.site_peak_mw.and_then(|mw| metrics::tokens_per_s_per_mw(s.tokens, 1, mw)).map(num),
        ),
        site_family(
            "wattledger_site_tokens_per_second_per_megawatt_envelope",
            "gauge",
            "Tokens per second per MW of the site's power envelope over the latest attributed hour.",
            &|s| metrics::tokens_per_s_per_mw(s.tokens, 1, s.envelope_w.saturating_mul(1000)).map(num),
        ),
        shape_family(
            "wattledger_site_ramp_up_watts",
            "Largest rise of site power within the window (1m, 15m) in the latest attributed hour.",
            &|l| windows(l.rise_1m_mw, l.rise_15m_mw),
        ),
        shape_family(
            "wattledger_site_ramp_down_watts",
            "Largest fall of site power within the window (1m, 15m) in the latest attributed hour.",
            &|l| windows(l.fall_1m_mw, l.fall_15m_mw),
        ),
        shape_family(
            "wattledger_site_peak_to_average_ratio",
            "Peak minute over mean site power in the latest attributed hour.",
            &|l| l.peak_to_average.map(|r| ("", num(r))).into_iter().collect(),
        ),
        shape_family(
            "wattledger_site_over_envelope_seconds",
            "Time the site's power spent above its envelope in the latest attributed hour.",
            &|l| vec![("", (l.over_envelope * 60).to_string())],
        ),
        site_family(
            "wattledger_site_carbon_intensity_grams_per_kwh",
            "gauge",
            "Operational carbon per kWh the site ran at (location-based, average intensity).",
            &|s| metrics::g_co2e_per_kwh(s.carbon_g, s.carbon_mj).map(num),
        ),
    ];
    let mut out = String::new();
    for f in &families {
        write_family(&mut out, f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    #[test]
    fn families_are_written_once_with_escaped_labels_and_no_empty_families() {
        let site = |key: &str| LatestHour {
            site: key.into(),
            hour: Utc.with_ymd_and_hms(2026, 11, 2, 10, 0, 0).unwrap(),
            site_mj: 7_200_000_000,
            it_mj: 5_760_000_000,
            gpu_mj: 5_040_000_000,
            idle_mj: 675_000_000,
            allocated_gpu_ms: 9_000_000,
            capacity_gpu_ms: 10_800_000,
            tokens: 3750,
            carbon_g: None,
            carbon_mj: 0,
            energy_mj_total: 7_200_000_000,
            site_peak_mw: Some(2_000_000),
            envelope_w: 100_000,
            static_pue: Decimal::new(125, 2),
        };
        let shape = wattledger_domain::load_shape::load_shape(
            &[Some(2_000_000), Some(1_500_000), Some(2_100_000)],
            Some(2_000_000),
            2_050_000,
        )
        .unwrap();
        let text = render(
            &[site("fra1"), site("odd\"site")],
            &BTreeMap::from([("fra1".to_owned(), shape)]),
            &Backlog {
                dirty_hours: 0,
                oldest_mark_age_s: None,
                last_run_finished: None,
            },
            &WriterHealth {
                queued: 0,
                stored: 12,
                dead_lettered: 1,
                retrying: false,
            },
        );
        assert!(text.contains("wattledger_admission_decisions_dead_lettered_total 1\n"));
        assert_eq!(
            text.matches("# TYPE wattledger_site_pue_ratio gauge")
                .count(),
            1
        );
        assert!(
            text.contains("wattledger_site_pue_ratio{site=\"fra1\"} 1.25\n"),
            "{text}"
        );
        assert!(text.contains("site=\"odd\\\"site\""));
        assert!(text.contains("wattledger_site_power_watts{site=\"fra1\"} 2000\n"));
        assert!(text.contains("wattledger_site_peak_watts{site=\"fra1\"} 2000\n"));
        // 2.0 → 1.5 → 2.1 kW: a 600 W rise and 500 W fall, each within a minute.
        for line in [
            "wattledger_site_ramp_up_watts{site=\"fra1\",window=\"1m\"} 600\n",
            "wattledger_site_ramp_up_watts{site=\"fra1\",window=\"15m\"} 600\n",
            "wattledger_site_ramp_down_watts{site=\"fra1\",window=\"1m\"} 500\n",
            "wattledger_site_peak_to_average_ratio{site=\"fra1\"} 1.05\n",
            "wattledger_site_over_envelope_seconds{site=\"fra1\"} 60\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(text.contains(
            "wattledger_site_tokens_per_second_per_megawatt_peak{site=\"fra1\"} 520.833\n"
        ));
        assert!(text.contains(
            "wattledger_site_tokens_per_second_per_megawatt_envelope{site=\"fra1\"} 10.417\n"
        ));
        assert!(text.contains("wattledger_site_energy_joules_total{site=\"fra1\"} 7200000\n"));
        assert!(!text.contains("carbon_intensity"), "no carbon: no family");
        assert!(!text.contains("last_run"), "no run yet: no sample");
    }
}
