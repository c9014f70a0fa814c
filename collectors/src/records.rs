//! The records the agent sends: the bodies of `/v1/ingest/{meters,jobs,samples,tokens}`.
//!
//! They are what the spool stores and the pusher sends, so their JSON is the server's ingest
//! schema (the top-level README); optional fields are left out rather than sent as null.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

/// A meter of the site's tree: `facility` ⊇ `node` ⊇ `gpu` ⊇ `mig`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meter {
    pub key: String,
    pub site: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_profile: Option<String>,
}

impl Meter {
    /// A meter of `kind` under `parent`, without GPU details.
    pub fn new(key: &str, site: &str, kind: &str, parent: Option<&str>) -> Self {
        Meter {
            key: key.to_owned(),
            site: site.to_owned(),
            kind: kind.to_owned(),
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
            ..Meter::new(key, site, "gpu", Some(node))
        }
    }
}

/// One reading of a meter: an energy counter in mJ and/or power in W. A step record
/// (`crate::steps`) is one at a step boundary: the counter there, and the mean (`power_w`)
/// and peak (`peak_w`) of the power readings of the step that ends there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub meter: String,
    #[serde(with = "rfc3339_ms")]
    pub ts: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counter_mj: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_w: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_w: Option<f64>,
    /// The step's length, for a step record (`ts` on its boundary); absent for a raw reading.
    /// The server keeps the two apart: raw readings expire sooner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_s: Option<u32>,
}

/// A share of a GPU (or MIG instance) a job held.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Allocation {
    pub meter: String,
    /// Decimal text (`"0.5"`), so shares stay exact on the wire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<DateTime<Utc>>,
}

/// A scheduler job with the GPUs it held.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub tenant: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submit_at: Option<DateTime<Utc>>,
    pub start_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allocations: Vec<Allocation>,
}

/// Tokens an inference job served in an interval, optionally to one tenant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tokens {
    pub job: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(with = "rfc3339_ms")]
    pub start_at: DateTime<Utc>,
    #[serde(with = "rfc3339_ms")]
    pub end_at: DateTime<Utc>,
    pub prompt_tokens: i64,
    pub generated_tokens: i64,
}

/// One value of a grid signal (carbon intensity or price) over an interval: the body of
/// `/v1/ingest/signals`, as `wattledger_domain::signals::Series::ingest_records` writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SignalPoint {
    pub region: String,
    pub signal: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basis: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    pub status: String,
    pub source: String,
    pub start_at: DateTime<Utc>,
    pub end_at: DateTime<Utc>,
    /// Decimal text, so values stay exact on the wire.
    pub value: String,
    #[serde(default)]
    pub estimated: bool,
}

/// A batch for one ingest endpoint. The variants are in the order a flush sends them:
/// meters before the samples and jobs that name them, jobs before the tokens that name them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "endpoint", content = "records", rename_all = "snake_case")]
pub enum Batch {
    Meters(Vec<Meter>),
    Jobs(Vec<Job>),
    Samples(Vec<Sample>),
    Tokens(Vec<Tokens>),
    Signals(Vec<SignalPoint>),
}

impl Batch {
    /// The path segment under `/v1/ingest/`.
    pub fn endpoint(&self) -> &'static str {
        match self {
            Batch::Meters(_) => "meters",
            Batch::Jobs(_) => "jobs",
            Batch::Samples(_) => "samples",
            Batch::Tokens(_) => "tokens",
            Batch::Signals(_) => "signals",
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Batch::Meters(r) => r.len(),
            Batch::Jobs(r) => r.len(),
            Batch::Samples(r) => r.len(),
            Batch::Tokens(r) => r.len(),
            Batch::Signals(r) => r.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The request body `{"records": [...]}`, written straight from the typed records.
    pub fn body(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Body<'a, T> {
            records: &'a [T],
        }
        fn write<T: Serialize>(records: &[T]) -> Vec<u8> {
            serde_json::to_vec(&Body { records }).expect("records serialize")
        }
        match self {
            Batch::Meters(r) => write(r),
            Batch::Jobs(r) => write(r),
            Batch::Samples(r) => write(r),
            Batch::Tokens(r) => write(r),
            Batch::Signals(r) => write(r),
        }
    }

    /// The records as JSON values, in order (for the dead-letter file).
    pub fn records_json(&self) -> Vec<serde_json::Value> {
        fn all<T: Serialize>(r: &[T]) -> Vec<serde_json::Value> {
            r.iter()
                .map(|x| serde_json::to_value(x).expect("records serialize"))
                .collect()
        }
        match self {
            Batch::Meters(r) => all(r),
            Batch::Jobs(r) => all(r),
            Batch::Samples(r) => all(r),
            Batch::Tokens(r) => all(r),
            Batch::Signals(r) => all(r),
        }
    }

    /// Keeps the records whose index `keep` accepts (used to resend a batch without the
    /// records the server refused).
    pub fn retain_indices(&mut self, keep: impl Fn(usize) -> bool) {
        fn go<T>(r: &mut Vec<T>, keep: impl Fn(usize) -> bool) {
            let mut i = 0;
            r.retain(|_| {
                let k = keep(i);
                i += 1;
                k
            });
        }
        match self {
            Batch::Meters(r) => go(r, keep),
            Batch::Jobs(r) => go(r, keep),
            Batch::Samples(r) => go(r, keep),
            Batch::Tokens(r) => go(r, keep),
            Batch::Signals(r) => go(r, keep),
        }
    }

    /// Appends `other` if it is for the same endpoint; gives it back otherwise.
    pub fn absorb(&mut self, other: Batch) -> Result<(), Batch> {
        match (self, other) {
            (Batch::Meters(a), Batch::Meters(b)) => a.extend(b),
            (Batch::Jobs(a), Batch::Jobs(b)) => a.extend(b),
            (Batch::Samples(a), Batch::Samples(b)) => a.extend(b),
            (Batch::Tokens(a), Batch::Tokens(b)) => a.extend(b),
            (Batch::Signals(a), Batch::Signals(b)) => a.extend(b),
            (_, other) => return Err(other),
        }
        Ok(())
    }

    /// Splits off the records from `at` on.
    pub fn split_off(&mut self, at: usize) -> Batch {
        match self {
            Batch::Meters(r) => Batch::Meters(r.split_off(at)),
            Batch::Jobs(r) => Batch::Jobs(r.split_off(at)),
            Batch::Samples(r) => Batch::Samples(r.split_off(at)),
            Batch::Tokens(r) => Batch::Tokens(r.split_off(at)),
            Batch::Signals(r) => Batch::Signals(r.split_off(at)),
        }
    }
}

/// Timestamps to the millisecond: sources read at sub-second intervals, and the server keys
/// samples by (meter, ts), so two readings a few ms apart must stay apart.
mod rfc3339_ms {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::Millis, true))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        let s = String::deserialize(d)?;
        DateTime::parse_from_rfc3339(&s)
            .map(|t| t.to_utc())
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_serialize_as_the_ingest_schema() {
        let b = Batch::Samples(vec![Sample {
            meter: "n1-gpu0".into(),
            ts: DateTime::parse_from_rfc3339("2026-11-02T10:00:00.250Z")
                .unwrap()
                .to_utc(),
            counter_mj: Some(5),
            power_w: None,
            peak_w: None,
            step_s: None,
        }]);
        assert_eq!(
            serde_json::to_string(&b).unwrap(),
            r#"{"endpoint":"samples","records":[{"meter":"n1-gpu0","ts":"2026-11-02T10:00:00.250Z","counter_mj":5}]}"#
        );
        let back: Batch = serde_json::from_str(&serde_json::to_string(&b).unwrap()).unwrap();
        assert_eq!(back, b);
        let body: serde_json::Value = serde_json::from_slice(&b.body()).unwrap();
        assert_eq!(body, serde_json::json!({"records": b.records_json()}));
    }

    #[test]
    fn retain_and_split_keep_order() {
        let t = |p| Tokens {
            job: "j".into(),
            tenant: None,
            start_at: DateTime::UNIX_EPOCH,
            end_at: DateTime::UNIX_EPOCH,
            prompt_tokens: p,
            generated_tokens: 0,
        };
        let mut b = Batch::Tokens((0..5).map(t).collect());
        b.retain_indices(|i| i != 1 && i != 3);
        let tail = b.split_off(2);
        let Batch::Tokens(head) = &b else { panic!() };
        let Batch::Tokens(tail) = &tail else { panic!() };
        assert_eq!(
            head.iter().map(|x| x.prompt_tokens).collect::<Vec<_>>(),
            [0, 2]
        );
        assert_eq!(
            tail.iter().map(|x| x.prompt_tokens).collect::<Vec<_>>(),
            [4]
        );
    }
}
