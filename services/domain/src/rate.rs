//! A signal's value over an interval, as the ledger's stages read it: a price or an
//! intensity per kWh for costing, a carbon-free share for the hourly CFE match.

use rust_decimal::Decimal;

/// A value over `[from_ms, to_ms)`: currency or grams per kWh, or a share.
#[derive(Debug, Clone, PartialEq)]
pub struct Rate {
    pub from_ms: i64,
    pub to_ms: i64,
    pub value: Decimal,
    /// The provider marked it as an estimate, or it is a forecast used for want of an actual.
    pub estimated: bool,
}
