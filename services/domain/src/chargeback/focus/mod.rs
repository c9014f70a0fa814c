//! The FOCUS exports (FinOps Open Cost and Usage Specification, Cost and Usage dataset): the
//! same close as FOCUS 1.2 ([`v1_2`]) and as FOCUS 1.4 ([`v1_4`]), one row per charge.
//!
//! FOCUS 1.2 is the file frozen with the close (its bytes and checksum are stored, and the
//! `SHA256SUMS` of the close lists it). FOCUS 1.4 is rendered from the frozen close when asked
//! for: the close is immutable, so the same close always gives the same 1.4 bytes too.

pub mod v1_2;
pub mod v1_4;

use super::{sha256_hex, Close, Export, Line, LineClass};
use chrono::{DateTime, Utc};

crate::names::names! {
    /// A FOCUS version the chargeback exports.
    pub enum Version {
        /// Ratified 2025-05-29; the file frozen with each close.
        V1_2 = "1.2",
        /// Ratified 2026-06-04: allocation columns, `ServiceProviderName` and
        /// `HostProviderName`, `InvoiceDetailId`; no `ProviderName` or `PublisherName`.
        V1_4 = "1.4",
    }
}

impl Version {
    /// What `/exports/focus` gives when no version is asked for: 1.2, the file frozen and
    /// checksummed with the close that integrations already read from that address. A
    /// version change is a change of columns (1.4 drops `ProviderName` and `PublisherName`),
    /// so a reader gets 1.4 by asking for it, never by surprise.
    pub const DEFAULT: Version = Version::V1_2;

    /// The header of this version's export.
    pub fn columns(self) -> Vec<&'static str> {
        match self {
            Version::V1_2 => v1_2::COLUMNS.to_vec(),
            Version::V1_4 => v1_4::COLUMNS.iter().map(|(name, _)| *name).collect(),
        }
    }
}

/// The export of `close` in FOCUS `version`.
pub fn render(close: &Close, version: Version) -> String {
    match version {
        Version::V1_2 => v1_2::render(close),
        Version::V1_4 => v1_4::render(close),
    }
}

/// The export as a file whose name carries the FOCUS version:
/// `wattledger-2026-10-v1-focus-1.4.csv`.
pub fn export(close: &Close, version: Version) -> Export {
    let content = render(close, version).into_bytes();
    Export {
        format: "focus",
        file_name: format!(
            "wattledger-{}-v{}-focus-{version}.csv",
            close.month, close.version
        ),
        sha256: sha256_hex(&content),
        content,
    }
}

/// What a line bills, for `ChargeDescription` and the like.
fn description(l: &Line) -> String {
    match (l.key.class, &l.key.model) {
        (LineClass::IdleShare, _) => "idle capacity share".to_owned(),
        (LineClass::Platform, _) => "unallocated idle capacity".to_owned(),
        (LineClass::GridCredit, _) => "demand response".to_owned(),
        (c, Some(m)) => format!("{} jobs, model {m}", c.as_str()),
        (c, None) => format!("{} jobs", c.as_str()),
    }
}

/// FOCUS ServiceName and its one ServiceSubcategory (the validator holds a service to one).
fn service(class: LineClass) -> (&'static str, &'static str) {
    match class {
        LineClass::Training => ("GPU Training", "Machine Learning"),
        LineClass::Inference => ("GPU Inference", "Generative AI"),
        _ => ("GPU Compute", "Other (AI and Machine Learning)"),
    }
}

/// FOCUS date/time: `YYYY-MM-DDTHH:mm:ssZ`.
pub(crate) fn time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::chargeback::statement::{statements, DeviceGpuTime};
    use crate::chargeback::{Amounts, Directory, Issuer, LineKey, Month};
    use rust_decimal::Decimal;

    /// A small close: two tenants at two sites in two currencies, a correction for the
    /// month before, GPU time at a rate, and an idle share; its GPU time of no device model
    /// (as a close frozen before device models were kept reads).
    pub(crate) fn sample() -> Close {
        sample_with(|_| Vec::new())
    }

    /// [`sample`] with the training line's GPU time on two device models: 2,000 H100 hours
    /// for 800.00 and the rest (857.142857… h) on H200s for 400.50.
    pub(crate) fn sample_with_devices() -> Close {
        sample_with(|training| {
            let part = |device: &str, gpu_ms, cost: &str| DeviceGpuTime {
                key: training.clone(),
                device_model: Some(device.into()),
                gpu_ms,
                gpu_time_cost: cost.parse().unwrap(),
            };
            vec![
                part("NVIDIA H100 80GB HBM3", 7_200_000_000, "800"),
                part("NVIDIA H200", 3_085_714_285, "400.5"),
            ]
        })
    }

    fn sample_with(gpu_time: impl FnOnce(&LineKey) -> Vec<DeviceGpuTime>) -> Close {
        let month: Month = "2026-10".parse().unwrap();
        let key = |tenant: &str, site: &str, currency: &str, class, model: Option<&str>, period| {
            LineKey {
                tenant: tenant.into(),
                currency: currency.into(),
                site: site.into(),
                class,
                model: model.map(Into::into),
                period,
            }
        };
        let a = |mj: i64, cost: &str, gpu: &str| Amounts {
            energy_mj: mj,
            energy_cost: cost.parse().unwrap(),
            gpu_time_cost: gpu.parse().unwrap(),
            carbon_g: Decimal::new(mj / 10_000, 3),
            embodied_g: Decimal::new(mj / 50_000, 3),
            prompt_tokens: mj / 1_000_000,
            generated_tokens: mj / 4_000_000,
            gpu_ms: mj / 700,
            badput_mj: mj / 20,
            carbon_free_mj: mj / 3,
            cfe_mj: mj,
        };
        let entries = vec![
            (
                key(
                    "acme",
                    "fra",
                    "EUR",
                    LineClass::Training,
                    Some("llama-70b"),
                    month,
                ),
                a(7_200_000_000_000, "441.123456", "1200.5"),
            ),
            (
                key("acme", "fra", "EUR", LineClass::IdleShare, None, month),
                a(360_000_000_000, "22.000001", "0"),
            ),
            (
                key(
                    "acme",
                    "fra",
                    "EUR",
                    LineClass::Inference,
                    Some("mistral, 7b \"instruct\""),
                    month.prev(),
                ),
                a(-3_600_000_000, "-0.21", "0"),
            ),
            (
                key("platform", "iad", "USD", LineClass::Platform, None, month),
                a(900_000_000_000, "20.5", "0"),
            ),
        ];
        let mut directory = Directory::default();
        directory
            .tenants
            .insert("acme".into(), "Acme Research".into());
        directory
            .tenants
            .insert("platform".into(), "Platform Engineering".into());
        directory
            .sites
            .insert("fra".into(), ("Frankfurt".into(), "DE".into()));
        directory
            .sites
            .insert("iad".into(), ("Ashburn".into(), "US-MIDA-PJM".into()));
        Close {
            month,
            version: 1,
            closed_at: month.end(),
            issuer: Issuer {
                name: "Example GPU Platform".into(),
            },
            statements: {
                let gpu_time = gpu_time(&entries[0].0);
                statements(month, 1, entries, gpu_time)
            },
            reconciliation: Vec::new(),
            directory,
        }
    }

    #[test]
    fn the_file_name_carries_the_version() {
        let close = sample();
        for v in Version::ALL {
            let e = export(&close, v);
            assert_eq!(e.file_name, format!("wattledger-2026-10-v1-focus-{v}.csv"));
            assert_eq!(e.sha256, sha256_hex(render(&close, v).as_bytes()));
            // For a validator run by hand: WATTLEDGER_FOCUS_SAMPLE=/tmp/x writes both.
            if let Ok(stem) = std::env::var("WATTLEDGER_FOCUS_SAMPLE") {
                std::fs::write(format!("{stem}-{v}.csv"), &e.content).unwrap();
            }
        }
        assert_eq!(Version::parse("1.3"), None, "1.3 is not exported");
    }
}
