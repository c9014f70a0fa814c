//! Tokens an inference job served.

use crate::{time::rfc3339_ms, Problem, Problems};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

wattledger_domain::record! {
    /// Tokens an inference job served in `[start_at, end_at]`, optionally to one tenant (a
    /// shared endpoint's per-tenant counts).
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
    #[serde(deny_unknown_fields)]
    pub struct Tokens {
        /// The job's key.
        pub job: String,
        /// The tenant's key, for a shared endpoint.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub tenant: Option<String>,
        #[serde(with = "rfc3339_ms")]
        pub start_at: DateTime<Utc>,
        /// Not before `start_at`.
        #[serde(with = "rfc3339_ms")]
        pub end_at: DateTime<Utc>,
        /// Not negative.
        pub prompt_tokens: i64,
        /// Not negative.
        pub generated_tokens: i64,
    }
}

impl Tokens {
    /// Everything wrong with the record on its own.
    pub fn check(&self, latest: DateTime<Utc>) -> Vec<Problem> {
        let mut p = Problems::default();
        p.key("job", &self.job);
        if let Some(t) = &self.tenant {
            p.key("tenant", t);
        }
        p.time("start_at", self.start_at, latest);
        p.time("end_at", self.end_at, latest);
        if self.end_at < self.start_at {
            p.add("end_at", "is before start_at");
        }
        for (field, n) in [
            ("prompt_tokens", self.prompt_tokens),
            ("generated_tokens", self.generated_tokens),
        ] {
            if n < 0 {
                p.add(field, "must not be negative");
            }
        }
        p.done()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn counts_are_not_negative_and_the_interval_runs_forward() {
        let t0 = Utc.with_ymd_and_hms(2026, 11, 2, 10, 0, 0).unwrap();
        let ok = Tokens {
            job: "vllm:llama".into(),
            tenant: Some("acme".into()),
            start_at: t0,
            end_at: t0,
            prompt_tokens: 0,
            generated_tokens: 7,
        };
        assert!(ok.check(t0).is_empty());
        let bad = Tokens {
            tenant: Some(String::new()),
            end_at: t0 - chrono::Duration::seconds(1),
            prompt_tokens: -1,
            ..ok
        };
        let fields: Vec<_> = bad.check(t0).into_iter().map(|p| p.field).collect();
        assert_eq!(fields, ["tenant", "end_at", "prompt_tokens"]);
    }
}
