//! What a scheduler asks admission and what it answers: the request and answer types of
//! `POST /v1/admission`, and every check that needs the question alone.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;
use wattledger_domain::admission::budget::Remaining;
use wattledger_domain::admission::{Estimate, Verdict};
use wattledger_domain::input;
use wattledger_domain::job_kind::JobKind;
use wattledger_domain::priority::Priority;

// Read by serde at once; a question serde refuses is read again field by field, so that the
// refusal names every field (`http::admission`). A refused field's stand-in leaves a question
// whose other fields `validate` can check; `earliest_start` has none, as `deadline`'s rule
// would only guess at it.
wattledger_domain::record! {
    /// A scheduler's question.
    #[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct Ask {
        /// Tenant key (a Slurm account, a Kubernetes namespace's tenant).
        pub tenant: String => String::new(),
        #[serde(default)]
        pub job_name: String = String::new() => String::new(),
        /// The scheduler's job key where it is known before the job starts (Kubernetes:
        /// `k8s:<namespace>/<pod>`), to join the decision to the job.
        #[serde(default)]
        pub job_key: Option<String> => None,
        pub gpus: i64 => 1,
        /// GPU device model (e.g. `NVIDIA H100 80GB HBM3`), for its typical draw.
        #[serde(default)]
        pub gpu_model: Option<String> => None,
        /// The AI model key the job trains or serves, for learning its draw.
        #[serde(default)]
        pub model: Option<String> => None,
        /// What the job does; `batch` when absent.
        #[serde(default = "default_kind")]
        pub kind: JobKind = default_kind() => default_kind(),
        /// Expected run time, seconds.
        pub duration_s: i64 => 1,
        /// Expected draw per GPU (W, node share included). Without it, learned from the
        /// tenant's history for this model and kind, else the device's typical draw.
        #[serde(default)]
        pub power_per_gpu_w: Option<i64> => None,
        /// Default: now.
        #[serde(default, deserialize_with = "input::de::opt_time")]
        pub earliest_start: Option<DateTime<Utc>>,
        /// Must have finished by then. Without a deadline the job is not flexible.
        #[serde(default, deserialize_with = "input::de::opt_time")]
        pub deadline: Option<DateTime<Utc>> => None,
        /// `normal` when absent.
        #[serde(default)]
        pub priority: Priority = Priority::default() => Priority::default(),
        /// Candidate site keys, in order of preference. Default: every site.
        #[serde(default)]
        pub sites: Vec<String> => Vec::new(),
        /// Answer without reserving or storing anything ("what if").
        #[serde(default)]
        pub dry_run: bool = false => false,
        /// Who asks, as the stored decision names it: `slurm`, a scheduler's own name, or
        /// `api` (default). Lowercase letters, digits, `-` and `_`, at most 32.
        #[serde(default)]
        pub source: Option<String> => None,
    }
}

fn default_kind() -> JobKind {
    JobKind::Batch
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PowerSource {
    pub gpu_draw_w: u32,
    /// `request`, `learned`, `device_typical` or `default`, with what it was learned from.
    pub source: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Savings {
    #[schema(value_type = Option<String>)]
    pub carbon_marginal_kg: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub carbon_average_kg: Option<Decimal>,
    #[schema(value_type = Option<String>)]
    pub cost: Option<Decimal>,
}

/// The answer: what to do, and the numbers behind it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Answer {
    pub decision_id: Uuid,
    pub decided_at: DateTime<Utc>,
    /// `admit`, `defer` or `reject`.
    #[schema(value_type = String)]
    pub decision: Verdict,
    /// When the job should start (for `defer`, the time to hold it until).
    pub start_at: Option<DateTime<Utc>>,
    /// `start_at` in seconds since the epoch (Slurm's `begin_time`).
    pub start_at_unix: Option<i64>,
    pub site: Option<String>,
    pub reasons: Vec<String>,
    /// Started as early as it may (kWh, cost in the site's currency, kg CO2e average and
    /// marginal, `cfe_share`: the expected carbon-free fraction of its energy, 0 to 1).
    #[schema(value_type = Option<Object>)]
    pub estimate_now: Option<Estimate>,
    #[schema(value_type = Option<Object>)]
    pub estimate_at_start: Option<Estimate>,
    /// What starting at `start_at` saves against now.
    pub savings: Option<Savings>,
    /// Each budget's limit and what would remain after this job.
    #[schema(value_type = Vec<Object>)]
    pub budgets: Vec<Remaining>,
    /// Set when the job fits now only with its GPUs held to this power limit (W): the
    /// scheduler applies it (Slurm: the job's admin comment `wattledger:power_cap_w=N` for
    /// the prolog's `nvidia-smi -pl`; Kubernetes: the pod annotation
    /// `wattledger.io/power-cap-w`). The estimates are at that cap, with its longer `run_s`.
    pub power_cap_w: Option<u32>,
    pub power: PowerSource,
}

/// An answer and its JSON, written once: the asker's response body and the stored record.
#[derive(Debug)]
pub struct Answered {
    pub answer: Answer,
    pub json: String,
}

#[derive(Debug, thiserror::Error)]
pub enum AskError {
    #[error("invalid request")]
    Fields(Vec<(&'static str, String)>),
    #[error("admission is still loading its state")]
    NotReady,
    #[error("decisions are not being stored as fast as they are asked")]
    Backlog,
}

/// Longest text of each field of a question, in bytes.
const TEXT_LIMITS: [(&str, usize); 6] = [
    ("tenant", 256),
    ("job_name", 512),
    ("job_key", 256),
    ("gpu_model", 128),
    ("model", 256),
    ("sites", 256),
];

/// What can be checked on the question alone. Every text passes the one input rule: a NUL
/// would be answered but could never be stored, and the decision must be stored.
pub(crate) fn validate(ask: &Ask, now: DateTime<Utc>) -> Vec<(&'static str, String)> {
    let mut bad: Vec<(&'static str, String)> = Vec::new();
    let texts = [
        ("tenant", Some(&ask.tenant)),
        ("job_name", Some(&ask.job_name)),
        ("job_key", ask.job_key.as_ref()),
        ("gpu_model", ask.gpu_model.as_ref()),
        ("model", ask.model.as_ref()),
    ];
    for (field, value) in texts
        .into_iter()
        .chain(ask.sites.iter().map(|s| ("sites", Some(s))))
    {
        let max = TEXT_LIMITS
            .iter()
            .find(|(f, _)| *f == field)
            .map_or(256, |(_, n)| *n);
        if let Some(Err(e)) = value.map(|v| input::text(v, max)) {
            if !bad.iter().any(|(f, _)| *f == field) {
                bad.push((field, e.to_string()));
            }
        }
    }
    if ask.sites.len() > 64 {
        bad.push(("sites", "at most 64 sites".into()));
    }
    if ask.gpus < 1 || ask.gpus > 100_000 {
        bad.push(("gpus", "must be between 1 and 100000".into()));
    }
    if ask.duration_s < 1 || ask.duration_s > 90 * 86_400 {
        bad.push(("duration_s", "must be between 1 s and 90 days".into()));
    }
    if let Some(w) = ask.power_per_gpu_w {
        if !(1..=10_000).contains(&w) {
            bad.push(("power_per_gpu_w", "must be between 1 and 10000 W".into()));
        }
    }
    if ask.tenant.trim().is_empty() {
        bad.push(("tenant", "must not be empty".into()));
    }
    if let Some(src) = &ask.source {
        let ok = (1..=32).contains(&src.len())
            && src
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !ok {
            bad.push((
                "source",
                "lowercase letters, digits, - and _, at most 32".into(),
            ));
        }
    }
    let earliest = ask.earliest_start.unwrap_or(now);
    if let Some(deadline) = ask.deadline {
        if deadline <= earliest {
            bad.push(("deadline", "must be after earliest_start".into()));
        }
    }
    bad
}
