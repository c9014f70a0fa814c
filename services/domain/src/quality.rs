//! Data-quality flags carried from meter steps to ledger rows.
//!
//! A small bit set rather than an enum: one ledger row can draw on a reset GPU counter, a
//! gap and a facility fallback at once, and every flag must survive to the statement.

use std::fmt;
use std::ops::{BitOr, BitOrAssign};

#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Quality(u16);

impl Quality {
    pub const EMPTY: Quality = Quality(0);
    /// A counter went backwards (driver reload, PDU reboot) in this step.
    pub const RESET: Quality = Quality(1);
    /// A counter delta spanned a gap longer than the limit: placed by time, estimated.
    pub const GAP: Quality = Quality(1 << 1);
    /// No measurement covers (all of) this step.
    pub const MISSING: Quality = Quality(1 << 2);
    /// A parent meter read less than its children; the overhead was clamped to zero.
    pub const NEGATIVE_OVERHEAD: Quality = Quality(1 << 3);
    /// The facility meter had no data; the static PUE was used instead.
    pub const FACILITY_FALLBACK: Quality = Quality(1 << 4);
    /// The node had no meter reading; its overhead comes from the static node model.
    pub const NODE_MODEL: Quality = Quality(1 << 5);
    /// A counter reset inside the step lost the energy counted before it; the step's energy
    /// was estimated from the meter's power readings or its neighbouring steps.
    pub const RESET_ESTIMATED: Quality = Quality(1 << 6);
    /// The row's share of node (or facility) overhead was derived from another meter's
    /// estimated reading (a gap or reset on a GPU it shares the node with): its own readings
    /// were fine, the split of the overhead was not measured.
    pub const OVERHEAD_ESTIMATED: Quality = Quality(1 << 7);
    /// The agent estimated part of the counter's rise from the meter's power readings: the
    /// GPU's energy counter stuck (an AMD accumulator that stops moving under load) or was
    /// reset, and the agent counted the power readings' trapezoid instead.
    pub const COUNTER_ESTIMATED: Quality = Quality(1 << 8);

    const NAMES: [(Quality, &'static str); 9] = [
        (Quality::RESET, "counter_reset"),
        (Quality::GAP, "gap"),
        (Quality::MISSING, "missing"),
        (Quality::NEGATIVE_OVERHEAD, "negative_overhead"),
        (Quality::FACILITY_FALLBACK, "facility_fallback"),
        (Quality::NODE_MODEL, "node_model"),
        (Quality::RESET_ESTIMATED, "reset_estimated"),
        (Quality::OVERHEAD_ESTIMATED, "overhead_estimated"),
        (Quality::COUNTER_ESTIMATED, "counter_estimated"),
    ];

    pub fn contains(self, other: Quality) -> bool {
        self.0 & other.0 == other.0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Energy drawn from a step with these flags is an estimate, not a measurement.
    pub fn is_estimated(self) -> bool {
        const ESTIMATED: u16 = Quality::GAP.0
            | Quality::FACILITY_FALLBACK.0
            | Quality::NODE_MODEL.0
            | Quality::RESET_ESTIMATED.0
            | Quality::OVERHEAD_ESTIMATED.0
            | Quality::COUNTER_ESTIMATED.0;
        self.0 & ESTIMATED != 0
    }

    pub fn bits(self) -> u16 {
        self.0
    }

    /// Stable names, as stored in the ledger and shown to users.
    pub fn names(self) -> Vec<&'static str> {
        Self::NAMES
            .iter()
            .filter(|(q, _)| self.contains(*q))
            .map(|(_, n)| *n)
            .collect()
    }

    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Quality {
        let mut q = Quality::EMPTY;
        for name in names {
            if let Some((flag, _)) = Self::NAMES.iter().find(|(_, n)| *n == name) {
                q |= *flag;
            }
        }
        q
    }
}

impl BitOr for Quality {
    type Output = Quality;
    fn bitor(self, rhs: Quality) -> Quality {
        Quality(self.0 | rhs.0)
    }
}

impl BitOrAssign for Quality {
    fn bitor_assign(&mut self, rhs: Quality) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for Quality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Quality{:?}", self.names())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let q = Quality::RESET | Quality::FACILITY_FALLBACK;
        assert_eq!(q.names(), vec!["counter_reset", "facility_fallback"]);
        assert_eq!(Quality::from_names(q.names()), q);
        assert!(q.is_estimated());
        assert!(!Quality::RESET.is_estimated());
    }

    #[test]
    fn a_counter_the_agent_estimated_is_estimated_energy() {
        assert!(Quality::COUNTER_ESTIMATED.is_estimated());
        assert_eq!(
            Quality::COUNTER_ESTIMATED.names(),
            vec!["counter_estimated"]
        );
        assert_eq!(
            Quality::from_names(["counter_estimated"]),
            Quality::COUNTER_ESTIMATED
        );
    }
}
