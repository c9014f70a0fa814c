//! Grid signals: carbon intensity (gCO2e/kWh) and electricity price (currency/kWh) over
//! time, each series labelled with what it measures — average or marginal, actual or
//! forecast, and where it came from — because SCI counts location-based *average*
//! intensity while admission decisions want the *marginal* one, and a forecast must never
//! be billed as an actual.
//!
//! This module owns those types, which the server stores, prices with and reasons about.
//! The parsers of the providers' formats (Electricity Maps, WattTime, UK Carbon Intensity,
//! Carbon Aware SDK, ENTSO-E, tariffs and CSV) that produce them live in the
//! `wattledger-grid` crate (`collectors/grid`), shared by the agent and the simulator.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

crate::names::names! {
    /// What a carbon intensity averages over. The names are the API's and the database's
    /// (migration 0006's and 0009's CHECKs).
    pub enum Basis {
        /// The grid mix's average emissions (location-based, what SCI and reports count).
        Average = "average",
        /// The emissions of the marginal generator (MOER): what one more kWh causes.
        Marginal = "marginal",
    }
}

crate::names::names! {
    /// Whether a value was measured or forecast.
    #[cfg_attr(feature = "openapi", schema(as = SignalStatus))]
    pub enum Status {
        /// Measured (possibly estimated and later revised).
        Actual = "actual",
        Forecast = "forecast",
    }
}

crate::names::names! {
    /// The quantity a series carries, by name: [`Signal`] without its basis or currency.
    pub enum SignalKind {
        /// Grams CO2e per kWh.
        Carbon = "carbon",
        /// Currency units per kWh.
        Price = "price",
        /// The grid's carbon-free (fossil-free: renewables and nuclear) share of generation,
        /// a fraction from 0 to 1: the grid's part of a site's hourly CFE score
        /// ([`crate::cfe`]).
        CarbonFree = "carbon_free",
    }
}

/// What a carbon-free share is of: the one basis it has, kept in the store's basis column.
pub const CARBON_FREE_BASIS: &str = "fossil_free";

/// The quantity a series carries.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "signal", rename_all = "lowercase")]
pub enum Signal {
    /// Grams CO2e per kWh.
    Carbon { basis: Basis },
    /// Currency units per kWh.
    Price { currency: String },
    /// The grid's carbon-free share of generation, 0 to 1.
    #[serde(rename = "carbon_free")]
    CarbonFree,
}

impl Signal {
    pub fn kind(&self) -> SignalKind {
        match self {
            Signal::Carbon { .. } => SignalKind::Carbon,
            Signal::Price { .. } => SignalKind::Price,
            Signal::CarbonFree => SignalKind::CarbonFree,
        }
    }

    /// What tells series of one kind apart: a carbon intensity's basis, a price's currency
    /// (one column holds either in the store).
    pub fn basis_or_currency(&self) -> &str {
        match self {
            Signal::Carbon { basis } => basis.as_str(),
            Signal::Price { currency } => currency,
            Signal::CarbonFree => CARBON_FREE_BASIS,
        }
    }

    /// The signal of `kind` told apart by `basis_or_currency` (see above); none for a carbon
    /// intensity whose basis is not a [`Basis`].
    pub fn of(kind: SignalKind, basis_or_currency: &str) -> Option<Signal> {
        Some(match kind {
            SignalKind::Carbon => Signal::Carbon {
                basis: Basis::parse(basis_or_currency)?,
            },
            SignalKind::Price => Signal::Price {
                currency: basis_or_currency.to_owned(),
            },
            SignalKind::CarbonFree if basis_or_currency == CARBON_FREE_BASIS => Signal::CarbonFree,
            SignalKind::CarbonFree => return None,
        })
    }
}

/// One value over `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Point {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub value: Decimal,
    /// The provider says this value is an estimate (it may be revised later).
    #[serde(default)]
    pub estimated: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Series {
    pub signal: Signal,
    pub status: Status,
    /// The provider's zone or region (`DE`, `CAISO_NORTH`, `GB`, `eastus`).
    pub region: String,
    /// Who published it (`electricitymaps`, `watttime`, `ukci`, `casdk`, `tariff`, …).
    pub source: String,
    pub points: Vec<Point>,
}
