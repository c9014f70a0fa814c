//! The kinds of meter in a site's tree, outermost first: a facility meter holds nodes, a node
//! its GPUs, a GPU its MIG instances. Ingest checks a meter's parent by it, attribution reads
//! the tree by it, and parents are written before their children in its order.

crate::names::names! {
    /// A meter's place in the tree facility ⊇ node ⊇ gpu ⊇ mig; ordered outermost first. The
    /// names are the API's and the database's (migration 0001's CHECK).
    pub enum MeterKind {
        Facility = "facility",
        Node = "node",
        Gpu = "gpu",
        Mig = "mig",
    }
}

impl MeterKind {
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

    /// A GPU or a slice of one: what an allocation may name.
    pub fn is_device(self) -> bool {
        matches!(self, MeterKind::Gpu | MeterKind::Mig)
    }
}

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
