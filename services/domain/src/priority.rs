//! A job's priority: the scheduler's own QoS or priority class name (`normal`, `high`,
//! `urgent`, a site's own), which admission policies name in their bypass lists.
//!
//! Not an enum on purpose: every scheduler and site names its own classes. It is a checked
//! name instead, so a priority that exists was read through the one text rule, whichever
//! door it came in by (the ingest API, an admission question, a policy's bypass list, a row).

use crate::input::{self, InputError};
use std::fmt;

/// A priority class name: passes [`input::text`], at most [`Priority::MAX_LEN`] bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(value_type = String, example = "normal"))]
#[cfg_attr(feature = "sqlx", derive(sqlx::Type), sqlx(transparent))]
pub struct Priority(String);

impl Priority {
    /// Longest name, in bytes (a Kubernetes PriorityClass name is at most 253, a Slurm QoS
    /// name far less; 64 is what the API has always accepted).
    pub const MAX_LEN: usize = 64;

    pub fn parse(s: &str) -> Result<Priority, InputError> {
        input::text(s, Self::MAX_LEN).map(|s| Priority(s.to_owned()))
    }

    /// The priority of a job that names none.
    pub fn normal() -> Priority {
        Priority("normal".to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Priority {
    fn default() -> Self {
        Priority::normal()
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for Priority {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Priority::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_passes_the_text_rule_or_is_refused() {
        assert_eq!(Priority::parse("urgent").unwrap().as_str(), "urgent");
        assert_eq!(Priority::parse("a\0b"), Err(InputError::Nul));
        assert_eq!(
            Priority::parse(&"p".repeat(65)),
            Err(InputError::TooLong(64))
        );
        assert!(serde_json::from_str::<Priority>("\"x\\u0000\"").is_err());
        assert_eq!(
            serde_json::from_str::<Priority>("\"high\"").unwrap(),
            Priority::parse("high").unwrap()
        );
        assert_eq!(
            serde_json::to_string(&Priority::normal()).unwrap(),
            "\"normal\""
        );
    }
}
