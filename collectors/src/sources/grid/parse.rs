//! A grid provider's payload as ingest points: the provider's parser in `wattledger_grid`
//! chosen by the configured provider and URL, the points renamed to the site's region where
//! the config says so.

use super::{GridConfig, Provider};
use crate::records::SignalPoint;
use chrono::Duration;
use wattledger_domain::signals::{Basis, Series};
use wattledger_grid::{casdk, electricitymaps, entsoe, tariff, ukci, watttime, SignalError};

/// Parsed series to ingest records, the zone renamed to the configured region if one is set.
pub fn points(series: &[Series], region: Option<&str>) -> Vec<SignalPoint> {
    series
        .iter()
        .flat_map(SignalPoint::from_series)
        .map(|mut p| {
            if let Some(region) = region {
                p.region = region.to_owned();
            }
            p
        })
        .collect()
}

/// Parses one provider's payload.
pub fn parse(config: &GridConfig, body: &str) -> Result<Vec<Series>, SignalError> {
    let url = config.url.as_deref().unwrap_or("");
    Ok(match config.provider {
        // The grid's carbon-free share for hourly CFE matching.
        Provider::Electricitymaps if url.contains("/power-breakdown") => {
            vec![electricitymaps::parse_power_breakdown(body)?]
        }
        Provider::Electricitymaps => vec![electricitymaps::parse(body)?],
        Provider::Watttime => vec![watttime::parse(body)?],
        Provider::Ukci if url.contains("/regional") => ukci::parse_regional(body)?,
        Provider::Ukci if url.contains("/generation") => vec![ukci::parse_generation(body)?],
        Provider::Ukci => ukci::parse_national(body)?,
        Provider::Casdk => {
            let basis = config.basis.unwrap_or(Basis::Average);
            if url.contains("/forecasts") {
                casdk::parse_forecasts(body, basis)?
            } else {
                casdk::parse_emissions(body, basis, Duration::minutes(5))?
            }
        }
        Provider::Entsoe => vec![entsoe::parse(body, config.region.as_deref().unwrap_or(""))?],
        Provider::Csv => vec![tariff::parse_csv(
            body,
            config.region.as_deref().unwrap_or(""),
            config.currency.as_deref().unwrap_or("EUR"),
            Duration::hours(1),
        )?],
        Provider::Tariff => Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use crate::sources::grid::tests::config;

    #[test]
    fn carbon_free_shares_come_from_the_power_breakdown_and_the_generation_mix() {
        let em = config("provider = \"electricitymaps\"\nurl = \"https://api.electricitymaps.com/v3/power-breakdown/history?zone=DE\"\ntoken_file = \"/k\"\nregion = \"DE-LU\"\n");
        let s = parse(
            &em,
            &fixtures::read("grid/cfe/electricitymaps-power-breakdown-history-DE.json"),
        )
        .unwrap();
        let p = points(&s, em.region.as_deref());
        assert_eq!(p.len(), 24);
        assert_eq!(
            (p[0].signal.as_str(), p[0].basis, p[0].region.as_str()),
            ("carbon_free", None, "DE-LU")
        );
        assert_eq!(p[0].value, "0.42".parse().unwrap());
        let uk = config("provider = \"ukci\"\nurl = \"https://api.carbonintensity.org.uk/generation/2018-01-20T12:00Z/pt24h\"\n");
        let p = points(
            &parse(
                &uk,
                &fixtures::read("grid/cfe/ukci-generation-docs-example.json"),
            )
            .unwrap(),
            None,
        );
        assert_eq!(
            (p[0].signal.as_str(), p[0].region.as_str()),
            ("carbon_free", "GB")
        );
    }

    #[test]
    fn every_provider_payload_becomes_ingest_points() {
        let em = config("provider = \"electricitymaps\"\nurl = \"https://api.electricitymaps.com/v3/carbon-intensity/history?zone=DE\"\ntoken_file = \"/k\"\n");
        let s = parse(
            &em,
            &fixtures::read("grid/electricitymaps-v3-carbon-intensity-history.json"),
        )
        .unwrap();
        let p = points(&s, None);
        assert_eq!(p.len(), 24);
        assert_eq!(
            (p[0].signal.as_str(), p[0].basis.map(Basis::as_str)),
            ("carbon", Some("average"))
        );

        let wt = config("provider = \"watttime\"\nurl = \"https://api.watttime.org/v3/historical?region=CAISO_NORTH\"\nusername = \"u\"\ntoken_file = \"/p\"\nregion = \"US-CAL-CISO\"\n");
        let p = points(
            &parse(&wt, &fixtures::read("grid/watttime-v3-historical.json")).unwrap(),
            wt.region.as_deref(),
        );
        assert_eq!(
            (
                p[0].region.as_str(),
                p[0].basis.map(Basis::as_str),
                p[0].value.to_string().as_str()
            ),
            ("US-CAL-CISO", Some("marginal"), "394.6253619")
        );

        let uk =
            config("provider = \"ukci\"\nurl = \"https://api.carbonintensity.org.uk/intensity\"\n");
        let p = points(
            &parse(&uk, &fixtures::read("grid/ukci-intensity.json")).unwrap(),
            None,
        );
        assert_eq!(
            p.iter().map(|p| p.status.as_str()).collect::<Vec<_>>(),
            ["actual", "forecast"]
        );

        let sdk = config("provider = \"casdk\"\nurl = \"http://casdk:8080/emissions/average-carbon-intensity?location=eastus\"\nbasis = \"marginal\"\n");
        let p = points(
            &parse(
                &sdk,
                &fixtures::read("sci/casdk-emissions-average-carbon-intensity.json"),
            )
            .unwrap(),
            None,
        );
        assert_eq!(
            (p[0].region.as_str(), p[0].basis.map(Basis::as_str)),
            ("eastus", Some("marginal"))
        );

        let csv = config("provider = \"csv\"\nurl = \"https://utility.example/prices.csv\"\nregion = \"DE-LU\"\ncurrency = \"EUR\"\n");
        let p = points(
            &parse(&csv, "start,price_per_mwh\n2026-11-02T00:00:00Z,91\n").unwrap(),
            None,
        );
        assert_eq!(
            (p[0].currency.as_deref(), p[0].value.to_string().as_str()),
            (Some("EUR"), "0.091")
        );
    }
}
