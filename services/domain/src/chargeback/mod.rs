//! Monthly chargeback: what a closed month bills each tenant, and how it is written down.
//!
//! The store aggregates the ledger into [`Entry`]s (tenant × site × class × model × period of
//! use); this module turns them into statements whose lines add up to their totals to the
//! cent ([`statement`]), works out the adjustments late data calls for ([`statement::adjustments`]),
//! checks every site's lines against its meters to the millijoule ([`reconcile`]), publishes
//! each site's month as unit prices ([`prices`]) and writes the exports ([`csv`], [`focus`] in FOCUS 1.2 and 1.4). A [`Close`] is everything a closed month
//! froze: the exports are a pure function of it, so the same close always gives the same bytes.

pub mod csv;
pub mod focus;
mod month;
pub mod prices;
pub mod reconcile;
pub mod statement;

pub use month::{Month, MonthError};
pub use reconcile::SiteReconciliation;
pub use statement::{Line, Statement};

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::Serialize;
use std::collections::BTreeMap;
use std::ops::{Add, Sub};

crate::names::names! {
    /// What a statement line is for: the job kinds (a job's line is named by its kind, as the
    /// ledger's jobs are), a job's share of idle capacity, the idle energy a site gives its
    /// platform tenant, and a grid event's credit. Declared in this order, which is the order
    /// of a statement's lines.
    pub enum LineClass {
        Training = "training",
        Inference = "inference",
        Batch = "batch",
        Interactive = "interactive",
        /// Idle energy a proportional site spread over its jobs (facility overhead included).
        IdleShare = "idle_share",
        /// Idle energy no job used, carried by the site's platform tenant.
        Platform = "platform",
        /// A tenant's share of a demand-response event's credit (`domain::demand_response`):
        /// a negative cost with no energy, so metered energy is never changed by it.
        GridCredit = "demand_response_credit",
    }
}

crate::names::names! {
    /// How a line's energy reached its tenant: FOCUS 1.4's `AllocatedMethodId` (FOCUS 1.2
    /// has none; its export carries this in an `x_` column).
    pub enum AllocationMethod {
        /// The GPU steps its jobs held, by share.
        MeteredGpuShare = "metered-gpu-share",
        /// Idle energy spread over the site's jobs in proportion to their IT energy.
        IdleProportional = "idle-proportional-to-it-energy",
        /// Idle energy no job used, to the site's platform tenant.
        IdleToPlatform = "idle-to-platform-tenant",
        /// A grid event's credit, by the energy each tenant moved.
        DemandResponse = "demand-response-by-energy-moved",
    }
}

impl LineClass {
    /// How the line's energy reached the tenant.
    pub fn allocation_method(self) -> AllocationMethod {
        match self {
            LineClass::IdleShare => AllocationMethod::IdleProportional,
            LineClass::Platform => AllocationMethod::IdleToPlatform,
            LineClass::GridCredit => AllocationMethod::DemandResponse,
            _ => AllocationMethod::MeteredGpuShare,
        }
    }

    /// Whether the line is energy no job used (the reconciliation's unallocated column).
    pub fn is_unallocated(self) -> bool {
        self == LineClass::Platform
    }
}

/// The dimensions of a line. Keys, not ids: a statement names what it bills.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct LineKey {
    pub tenant: String,
    pub currency: String,
    pub site: String,
    pub class: LineClass,
    pub model: Option<String>,
    /// The month the energy was used: the statement's month, or an earlier one for an
    /// adjustment.
    pub period: Month,
}

/// Sums of the ledger for one key. Exact: integer mJ, ms and tokens; money to the ledger's
/// 1e-6, carbon to its milligram.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Amounts {
    pub energy_mj: i64,
    pub energy_cost: Decimal,
    pub gpu_time_cost: Decimal,
    pub carbon_g: Decimal,
    pub embodied_g: Decimal,
    pub prompt_tokens: i64,
    pub generated_tokens: i64,
    pub gpu_ms: i64,
    /// The part of `energy_mj` that was badput (`crate::badput`).
    pub badput_mj: i64,
    /// The energy's hourly carbon-free part (`crate::cfe`), and the energy of the hours whose
    /// carbon-free figure is known: the line's CFE score is the one over the other.
    pub carbon_free_mj: i64,
    pub cfe_mj: i64,
}

impl Amounts {
    pub fn is_zero(&self) -> bool {
        *self == Amounts::default()
            || (self.energy_mj == 0
                && self.energy_cost.is_zero()
                && self.gpu_time_cost.is_zero()
                && self.carbon_g.is_zero()
                && self.embodied_g.is_zero()
                && self.prompt_tokens == 0
                && self.generated_tokens == 0
                && self.gpu_ms == 0
                && self.badput_mj == 0
                && self.carbon_free_mj == 0
                && self.cfe_mj == 0)
    }

    /// Energy and GPU time together.
    pub fn cost(&self) -> Decimal {
        self.energy_cost + self.gpu_time_cost
    }
}

impl Add for Amounts {
    type Output = Amounts;
    fn add(self, o: Amounts) -> Amounts {
        Amounts {
            energy_mj: self.energy_mj + o.energy_mj,
            energy_cost: self.energy_cost + o.energy_cost,
            gpu_time_cost: self.gpu_time_cost + o.gpu_time_cost,
            carbon_g: self.carbon_g + o.carbon_g,
            embodied_g: self.embodied_g + o.embodied_g,
            prompt_tokens: self.prompt_tokens + o.prompt_tokens,
            generated_tokens: self.generated_tokens + o.generated_tokens,
            gpu_ms: self.gpu_ms + o.gpu_ms,
            badput_mj: self.badput_mj + o.badput_mj,
            carbon_free_mj: self.carbon_free_mj + o.carbon_free_mj,
            cfe_mj: self.cfe_mj + o.cfe_mj,
        }
    }
}

impl Sub for Amounts {
    type Output = Amounts;
    fn sub(self, o: Amounts) -> Amounts {
        Amounts {
            energy_mj: self.energy_mj - o.energy_mj,
            energy_cost: self.energy_cost - o.energy_cost,
            gpu_time_cost: self.gpu_time_cost - o.gpu_time_cost,
            carbon_g: self.carbon_g - o.carbon_g,
            embodied_g: self.embodied_g - o.embodied_g,
            prompt_tokens: self.prompt_tokens - o.prompt_tokens,
            generated_tokens: self.generated_tokens - o.generated_tokens,
            gpu_ms: self.gpu_ms - o.gpu_ms,
            badput_mj: self.badput_mj - o.badput_mj,
            carbon_free_mj: self.carbon_free_mj - o.carbon_free_mj,
            cfe_mj: self.cfe_mj - o.cfe_mj,
        }
    }
}

/// One aggregated piece of the ledger (or of what was already billed).
pub type Entry = (LineKey, Amounts);

/// Names a statement prints beside keys, as they were when the month closed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Directory {
    /// Tenant key → name.
    pub tenants: BTreeMap<String, String>,
    /// Site key → (name, grid region).
    pub sites: BTreeMap<String, (String, String)>,
}

impl Directory {
    pub fn tenant_name(&self, tenant: &str) -> String {
        self.tenants.get(tenant).cloned().unwrap_or_default()
    }

    /// A site's name and grid region.
    pub fn site(&self, site: &str) -> (String, String) {
        self.sites.get(site).cloned().unwrap_or_default()
    }
}

/// Who issues the statements: the organisation running the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Issuer {
    pub name: String,
}

/// Everything one close of a month froze; exports are a pure function of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Close {
    pub month: Month,
    pub version: u32,
    pub closed_at: DateTime<Utc>,
    pub issuer: Issuer,
    pub statements: Vec<Statement>,
    pub reconciliation: Vec<SiteReconciliation>,
    pub directory: Directory,
}

pub use crate::units::{MJ_PER_KWH, MS_PER_HOUR};

/// One export file of a close.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    /// `csv`, `focus` or `json`.
    pub format: &'static str,
    pub file_name: String,
    pub content: Vec<u8>,
    /// Lowercase hex SHA-256 of `content`.
    pub sha256: String,
}

pub const FORMATS: [&str; 3] = ["csv", "focus", "json"];

/// The three exports frozen with a close: the statement CSV, FOCUS 1.2 and JSON. (FOCUS 1.4
/// is rendered from the frozen close when asked for: [`focus::export`].)
pub fn exports(close: &Close) -> Vec<Export> {
    let stem = format!("wattledger-{}-v{}", close.month, close.version);
    let json = serde_json::to_string_pretty(close).expect("a close serialises") + "\n";
    let text = |format, file_name, content: String| Export {
        format,
        file_name,
        sha256: sha256_hex(content.as_bytes()),
        content: content.into_bytes(),
    };
    vec![
        text("csv", format!("{stem}-statements.csv"), csv::render(close)),
        focus::export(close, focus::Version::V1_2),
        text("json", format!("{stem}.json"), json),
    ]
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The `sha256sum -c` file for a set of exports.
pub fn checksums(exports: &[Export]) -> String {
    exports
        .iter()
        .map(|e| format!("{}  {}\n", e.sha256, e.file_name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job_kind::JobKind;

    #[test]
    fn every_job_kind_is_billed_under_a_class_of_its_name() {
        for k in JobKind::ALL {
            let class = LineClass::parse(k.as_str()).expect("a class for every job kind");
            assert_eq!(class.as_str(), k.as_str());
            assert_eq!(class.allocation_method(), AllocationMethod::MeteredGpuShare);
        }
    }
}
