//! A meter of a site's tree.

use crate::{Problem, Problems};
use serde::{Deserialize, Serialize};
use wattledger_domain::meter_kind::MeterKind;

wattledger_domain::record! {
    /// A meter in the tree facility ⊇ node ⊇ gpu ⊇ mig.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
    #[serde(deny_unknown_fields)]
    pub struct Meter {
        pub key: String,
        /// The site's key.
        pub site: String,
        // Refused, it is read on as a node: the one kind with no rule on whether it has a
        // parent, so the rest of the meter is still checked.
        pub kind: MeterKind => MeterKind::Node,
        /// Key of the parent meter: a node's facility (optional), a GPU's node, a MIG's GPU.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub parent: Option<String>,
        /// A GPU's UUID (allocations may name the GPU by it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub gpu_uuid: Option<String>,
        /// The device's model name, e.g. `NVIDIA H100 80GB HBM3`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub device_model: Option<String>,
        /// A MIG instance's profile, e.g. `3g.40gb`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub mig_profile: Option<String>,
    }
}

impl Meter {
    /// A meter of `kind` under `parent`, without GPU details.
    pub fn new(key: &str, site: &str, kind: MeterKind, parent: Option<&str>) -> Self {
        Meter {
            key: key.to_owned(),
            site: site.to_owned(),
            kind,
            parent: parent.map(str::to_owned),
            gpu_uuid: None,
            device_model: None,
            mig_profile: None,
        }
    }

    /// A GPU under its node meter.
    pub fn gpu(key: &str, site: &str, node: &str, uuid: &str, model: Option<&str>) -> Self {
        Meter {
            gpu_uuid: Some(uuid.to_owned()),
            device_model: model.map(str::to_owned),
            ..Meter::new(key, site, MeterKind::Gpu, Some(node))
        }
    }

    /// Everything wrong with the meter on its own; the parent's kind and site are the
    /// server's to check against what it stores.
    pub fn check(&self) -> Vec<Problem> {
        let mut p = Problems::default();
        p.key("key", &self.key);
        p.key("site", &self.site);
        if let Some(parent) = &self.parent {
            p.key("parent", parent);
        }
        for (field, value, max) in [
            ("gpu_uuid", &self.gpu_uuid, 128),
            ("device_model", &self.device_model, 128),
            ("mig_profile", &self.mig_profile, 64),
        ] {
            if let Some(v) = value {
                p.text(field, v, max);
            }
        }
        match (self.kind, &self.parent) {
            (MeterKind::Facility, Some(_)) => p.add("parent", "a facility meter has no parent"),
            (MeterKind::Gpu | MeterKind::Mig, None) => {
                p.add("parent", format!("a {} meter needs a parent", self.kind))
            }
            (_, Some(parent)) if *parent == self.key => {
                p.add("parent", "a meter cannot be its own parent")
            }
            _ => {}
        }
        p.done()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(m: &Meter) -> Vec<String> {
        m.check().into_iter().map(|p| p.field).collect()
    }

    #[test]
    fn the_tree_rules_a_meter_can_check_alone() {
        assert!(fields(&Meter::gpu("n1-gpu0", "fra", "n1", "GPU-1", None)).is_empty());
        assert!(fields(&Meter::new("n1", "fra", MeterKind::Node, None)).is_empty());
        assert_eq!(
            fields(&Meter::new("f", "fra", MeterKind::Facility, Some("x"))),
            ["parent"]
        );
        assert_eq!(
            fields(&Meter::new("g", "fra", MeterKind::Gpu, None)),
            ["parent"]
        );
        assert_eq!(
            fields(&Meter::new("n", "fra", MeterKind::Node, Some("n"))),
            ["parent"]
        );
        let rack = r#"{"key": "r", "site": "fra", "kind": "rack"}"#;
        assert!(serde_json::from_str::<Meter>(rack).is_err());
        let long = Meter {
            device_model: Some("x".repeat(129)),
            ..Meter::gpu("g", "fra", "n", "GPU-1", None)
        };
        assert_eq!(fields(&long), ["device_model"]);
    }
}
