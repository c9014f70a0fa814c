//! The batches the agent sends: records of one ingest endpoint, as the spool stores them and
//! the pusher sends them. The records themselves are the server's own types
//! (`wattledger_wire`), so agent and server cannot disagree on a field.

use serde::{Deserialize, Serialize};
pub use wattledger_wire::{Allocation, Job, Meter, Sample, SignalPoint, Tokens};

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
    /// Every path segment [`Batch::endpoint`] gives.
    pub const ENDPOINTS: [&'static str; 5] = ["meters", "jobs", "samples", "tokens", "signals"];

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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;

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
            counter_estimated: false,
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
