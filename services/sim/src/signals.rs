//! The demo's grid signals, in the formats operators actually receive: an Electricity Maps
//! v3 `/carbon-intensity/history`-shaped document per grid zone (hourly gCO2eq/kWh, the
//! newest hours `isEstimated`), and a time-of-use tariff per site. The demo parses them with
//! the same parsers a site's would go through and sends the points to the ingest API.

use rust_decimal::Decimal;
use serde_json::{json, Value};
use wattledger_domain::signals::Series;
use wattledger_grid::tariff::{Band, Season, Tariff};
use wattledger_grid::{electricitymaps, SignalError};

use super::rng;

const HOUR_MS: i64 = 3_600_000;

/// The zones of the simulated sites, with a daily intensity shape: Germany's mix dips at
/// midday with solar; the Pacific Northwest is hydro-heavy and flat, higher at night.
fn intensity(zone: &str, seed: u64, hour_ms: i64) -> i64 {
    let h = (hour_ms / HOUR_MS).rem_euclid(24) as f64;
    let k = (hour_ms / HOUR_MS) as u64;
    let noise = rng::range(seed, 90, k, 0, -25.0, 25.0);
    let v = match zone {
        "DE" => 420.0 - 170.0 * (-((h - 12.5) / 3.5).powi(2)).exp() + noise,
        _ => 95.0 + 35.0 * ((h - 4.0) / 24.0 * std::f64::consts::TAU).cos() + noise * 0.4,
    };
    v.round().max(10.0) as i64
}

fn iso(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// `GET /v3/carbon-intensity/history?zone=…` as Electricity Maps would answer it for the
/// hours `[from_ms, to_ms)`; the last three hours are still estimates.
pub fn electricitymaps_history(zone: &str, seed: u64, from_ms: i64, to_ms: i64) -> String {
    let first = from_ms.div_euclid(HOUR_MS) * HOUR_MS;
    let hours: Vec<Value> = (0..)
        .map(|i| first + i * HOUR_MS)
        .take_while(|t| *t < to_ms)
        .map(|t| {
            let estimated = t + 3 * HOUR_MS >= to_ms;
            json!({
                "zone": zone,
                "carbonIntensity": intensity(zone, seed, t),
                "datetime": iso(t),
                "updatedAt": iso(t + HOUR_MS + 17 * 60_000),
                "createdAt": iso(t - 2 * 24 * HOUR_MS),
                "emissionFactorType": "lifecycle",
                "isEstimated": estimated,
                "estimationMethod": if estimated { Value::from("TIME_SLICER_AVERAGE") } else { Value::Null },
            })
        })
        .collect();
    json!({ "zone": zone, "history": hours }).to_string()
}

/// The zone's fossil-free share of consumption in an hour, percent: Germany's follows its
/// intensity (solar at midday lowers one and raises the other); the Pacific Northwest is
/// mostly hydro.
fn fossil_free_percent(zone: &str, seed: u64, hour_ms: i64) -> i64 {
    let g = intensity(zone, seed, hour_ms) as f64;
    let v = match zone {
        "DE" => 100.0 - g / 6.5,
        _ => 100.0 - g / 2.2,
    };
    v.round().clamp(0.0, 100.0) as i64
}

/// `GET /v3/power-breakdown/history?zone=…` as Electricity Maps would answer it (the fields
/// the carbon-free share reads, and the renewable share beside it).
pub fn electricitymaps_power_breakdown(zone: &str, seed: u64, from_ms: i64, to_ms: i64) -> String {
    let first = from_ms.div_euclid(HOUR_MS) * HOUR_MS;
    let hours: Vec<Value> = (0..)
        .map(|i| first + i * HOUR_MS)
        .take_while(|t| *t < to_ms)
        .map(|t| {
            let estimated = t + 3 * HOUR_MS >= to_ms;
            let fossil_free = fossil_free_percent(zone, seed, t);
            // Nuclear is a few percent in both zones now.
            let renewable = (fossil_free - 3).max(0);
            json!({
                "zone": zone,
                "datetime": iso(t),
                "updatedAt": iso(t + HOUR_MS + 17 * 60_000),
                "createdAt": iso(t - 2 * 24 * HOUR_MS),
                "fossilFreePercentage": fossil_free,
                "renewablePercentage": renewable,
                "isEstimated": estimated,
                "estimationMethod": if estimated { Value::from("TIME_SLICER_AVERAGE") } else { Value::Null },
            })
        })
        .collect();
    json!({ "zone": zone, "history": hours }).to_string()
}

/// The zone's carbon-free share, through the real parser.
pub fn carbon_free_series(
    zone: &str,
    seed: u64,
    from_ms: i64,
    to_ms: i64,
) -> Result<Series, SignalError> {
    electricitymaps::parse_power_breakdown(&electricitymaps_power_breakdown(
        zone, seed, from_ms, to_ms,
    ))
}

/// A site's own clean energy per hour, MWh to 6 places: Frankfurt's rooftop solar (peaking
/// near 0.12 MWh an hour at noon UTC, more in summer than in winter); Oregon has none.
pub fn solar_mwh(site: &str, seed: u64, hour_ms: i64) -> Option<Decimal> {
    if site != "fra1" {
        return None;
    }
    let h = (hour_ms / HOUR_MS).rem_euclid(24) as f64 + 0.5;
    let day_of_year = (hour_ms / (24 * HOUR_MS)).rem_euclid(365) as f64;
    let season = 0.55 + 0.45 * ((day_of_year - 172.0) / 365.0 * std::f64::consts::TAU).cos();
    let sun = (-((h - 12.0) / 3.2).powi(2)).exp();
    let cloud = rng::range(seed, 91, (hour_ms / HOUR_MS) as u64, 0, 0.4, 1.0);
    let mwh = 0.12 * season * sun * cloud;
    (mwh >= 0.000_5).then(|| Decimal::new((mwh * 1e6).round() as i64, 6))
}

/// The zone's series, through the real parser.
pub fn carbon_series(
    zone: &str,
    seed: u64,
    from_ms: i64,
    to_ms: i64,
) -> Result<Series, SignalError> {
    electricitymaps::parse(&electricitymaps_history(zone, seed, from_ms, to_ms))
}

fn d(s: &str) -> Decimal {
    s.parse().expect("a literal price")
}

/// A commercial time-of-use tariff per site: Frankfurt in EUR at CET with a weekday peak and
/// a cheap night; Oregon in USD at PST with an evening peak.
pub fn tariff(site: &str) -> Tariff {
    let all_year = (1..=12).collect::<Vec<u32>>();
    match site {
        "fra1" => Tariff {
            currency: "EUR".into(),
            utc_offset_minutes: 60,
            seasons: vec![Season {
                months: all_year,
                price: d("0.21"),
                bands: vec![
                    Band {
                        days: vec!["weekdays".into()],
                        hours: [8, 20],
                        price: d("0.29"),
                    },
                    Band {
                        days: vec!["all".into()],
                        hours: [22, 6],
                        price: d("0.16"),
                    },
                ],
            }],
        },
        _ => Tariff {
            currency: "USD".into(),
            utc_offset_minutes: -480,
            seasons: vec![Season {
                months: all_year,
                price: d("0.082"),
                bands: vec![Band {
                    days: vec!["all".into()],
                    hours: [17, 21],
                    price: d("0.141"),
                }],
            }],
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattledger_domain::signals::{Basis, Signal};

    #[test]
    fn the_history_is_electricity_maps_shaped_and_parses() {
        let day = 1_790_000_000_000i64 / HOUR_MS * HOUR_MS;
        let s = carbon_series("DE", 7, day, day + 24 * HOUR_MS).unwrap();
        assert_eq!(s.points.len(), 24);
        assert_eq!(
            s.signal,
            Signal::Carbon {
                basis: Basis::Average
            }
        );
        assert!(s.points[23].estimated && !s.points[0].estimated);
        let r = wattledger_wire::SignalPoint::from_series(&s);
        assert_eq!(r[0].basis.map(Basis::as_str), Some("average"));
        for site in ["fra1", "ore1"] {
            tariff(site).check().unwrap();
        }
    }
}
