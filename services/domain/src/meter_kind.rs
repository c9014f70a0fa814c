//! The kinds of meter in a site's tree, outermost first: a facility meter holds nodes, a node
//! its GPUs, a GPU its MIG instances. Ingest checks a meter's parent by it, attribution reads
//! the tree by it, and parents are written before their children in its order.

use serde::{Deserialize, Serialize};

/// A meter's place in the tree facility ⊇ node ⊇ gpu ⊇ mig; ordered outermost first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum MeterKind {
    Facility,
    Node,
    Gpu,
    Mig,
}

impl MeterKind {
    pub const ALL: [MeterKind; 4] = [
        MeterKind::Facility,
        MeterKind::Node,
        MeterKind::Gpu,
        MeterKind::Mig,
    ];

    /// The names as the API and the database (migration 0001's CHECK) spell them, in
    /// [`MeterKind::ALL`]'s order.
    pub const NAMES: [&'static str; 4] = ["facility", "node", "gpu", "mig"];

    pub fn as_str(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    pub fn parse(s: &str) -> Option<MeterKind> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// The kind a meter of this kind hangs from: none for a facility meter; a node's parent
    /// (a facility meter) is optional, a GPU's and a MIG instance's are required.
    pub fn parent(self) -> Option<MeterKind> {
        match self {
            MeterKind::Facility => None,
            MeterKind::Node => Some(MeterKind::Facility),
            MeterKind::Gpu => Some(MeterKind::Node),
            MeterKind::Mig => Some(MeterKind::Gpu),
        }
    }

    /// Whether a meter of this kind must name its parent.
    pub fn needs_parent(self) -> bool {
        matches!(self, MeterKind::Gpu | MeterKind::Mig)
    }

    /// A GPU or a slice of one: what an allocation may name.
    pub fn is_device(self) -> bool {
        matches!(self, MeterKind::Gpu | MeterKind::Mig)
    }
}

impl std::fmt::Display for MeterKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

crate::text_column::text_column!(MeterKind);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_reads_back_from_its_name_and_serialises_as_it() {
        for k in MeterKind::ALL {
            assert_eq!(MeterKind::parse(k.as_str()), Some(k));
            assert_eq!(
                serde_json::to_value(k).unwrap(),
                serde_json::json!(k.as_str())
            );
        }
        assert_eq!(MeterKind::parse("GPU"), None);
        assert_eq!(MeterKind::parse("pdu"), None);
    }

    #[test]
    fn parents_come_before_their_children() {
        let mut kinds = MeterKind::ALL;
        kinds.reverse();
        kinds.sort();
        assert_eq!(kinds, MeterKind::ALL);
        for k in MeterKind::ALL {
            if let Some(p) = k.parent() {
                assert!(p < k, "{p} sorts after its child {k}");
            }
        }
    }
}
