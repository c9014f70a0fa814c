//! What a job does: the one list of job kinds the ingest API accepts, admission treats
//! differently (each kind at its site's over-subscription factor) and chargeback bills as classes.
//!
//! A job's priority is not an enum on purpose: it is the scheduler's own QoS or priority
//! class name (`normal`, `high`, `urgent`, a site's own), which admission policies name in
//! their bypass lists; it passes the text rule like any name.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum JobKind {
    Training,
    Inference,
    Batch,
    Interactive,
}

impl JobKind {
    pub const ALL: [JobKind; 4] = [
        JobKind::Training,
        JobKind::Inference,
        JobKind::Batch,
        JobKind::Interactive,
    ];

    /// The names as the API, the database (migration 0002's CHECK) and the statements
    /// spell them, in [`JobKind::ALL`]'s order.
    pub const NAMES: [&'static str; 4] = ["training", "inference", "batch", "interactive"];

    pub fn as_str(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    pub fn parse(s: &str) -> Option<JobKind> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl std::fmt::Display for JobKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

crate::text_column::text_column!(JobKind);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_reads_back_from_its_name_and_serialises_as_it() {
        for k in JobKind::ALL {
            assert_eq!(JobKind::parse(k.as_str()), Some(k));
            assert_eq!(
                serde_json::to_value(k).unwrap(),
                serde_json::json!(k.as_str())
            );
        }
        assert_eq!(JobKind::parse("Training"), None);
        assert_eq!(JobKind::parse(""), None);
    }
}
