//! The records of the ingest API, as agent and server both see them.
//!
//! Each record is one type here: the agent builds and spools it, the server reads it, the
//! OpenAPI document describes it (feature `openapi`), and one `check` per record holds every
//! rule about it that needs no database: ranges, lengths, times, step boundaries. The
//! server's fast path (a typed parse of the whole batch) and its slow path (field by field,
//! to explain a refusal) both call that `check`, so the two cannot drift apart, and neither
//! can the agent's idea of a record from the server's. What needs the database (does the
//! meter exist, is the tenant known) stays with the server.
//!
//! Optional fields are left out of the JSON rather than sent as null; unknown fields are
//! refused. Schedulers' annotations share one grammar for a run time (`parse_duration`),
//! read by the server's pod webhook and the Kueue controller alike.

pub mod annotations;
mod clean_energy;
mod job;
mod meter;
mod sample;
mod signal;
mod time;
mod tokens;

pub use clean_energy::CleanEnergy;
pub use job::{Allocation, Job};
pub use meter::Meter;
pub use sample::Sample;
pub use signal::{SignalPoint, MAX_AHEAD_DAYS};
pub use time::{parse_duration, SERVER_TIME_HEADER};
pub use tokens::Tokens;

pub use wattledger_domain::input::record::{self, Problem, Problems, Record};

/// The two readers of a record agree: what the agent sends (serde) the field-by-field
/// reader reads back whole, with no problem.
#[cfg(test)]
mod readers_agree {
    use super::*;
    use chrono::{DateTime, TimeZone, Utc};
    use proptest::prelude::*;
    use rust_decimal::Decimal;
    use wattledger_domain::badput::EndState;
    use wattledger_domain::job_kind::JobKind;
    use wattledger_domain::priority::Priority;
    use wattledger_domain::signals::{Basis, SignalKind, Status};

    fn time(ms: i64) -> DateTime<Utc> {
        Utc.timestamp_millis_opt(1_767_225_600_000 + ms).unwrap()
    }

    fn read_back<T: Record + serde::Serialize + PartialEq + std::fmt::Debug>(x: &T) {
        let json = serde_json::to_value(x).unwrap();
        let (back, problems) = record::read::<T>(&json);
        assert_eq!(problems, vec![], "{json}");
        assert_eq!(back.as_ref(), Some(x), "{json}");
    }

    proptest! {
        #[test]
        fn a_job_with_its_allocations(
            start in 0i64..10_000_000_000, len in prop::option::of(1i64..1_000_000_000),
            kind in 0usize..4, priority in prop::option::of("[a-z]{1,8}"),
            shares in prop::collection::vec(prop::option::of(1i64..=1_000_000), 0..4),
        ) {
            read_back(&Job {
                key: "slurm:c:1".into(),
                name: Some("train \u{e9}".into()),
                tenant: "a".into(),
                site: None,
                model: Some("m".into()),
                phase: Some(wattledger_domain::phase::Phase::ALL[kind % 3]),
                kind: JobKind::ALL[kind],
                priority: priority.map(|p| Priority::parse(&p).unwrap()),
                submit_at: Some(time(start - 1000)),
                start_at: time(start),
                end_at: len.map(|l| time(start + l)),
                end_state: len.map(|l| EndState::ALL[l as usize % EndState::ALL.len()]),
                last_checkpoint_at: len.map(|l| time(start + l / 2)),
                requeue_of: len.map(|_| "slurm:c:0".into()),
                restarts: len.map(|l| (l % 3) as i32),
                allocations: shares
                    .iter()
                    .enumerate()
                    .map(|(i, s)| Allocation {
                        meter: format!("g{i}"),
                        share: s.map(|s| Decimal::new(s, 6).normalize()),
                        start_at: None,
                        end_at: Some(time(start + 1)),
                    })
                    .collect(),
            });
        }

        #[test]
        fn a_sample(
            ms in 0i64..10_000_000_000, counter in prop::option::of(0i64..i64::MAX),
            power in prop::option::of(0.0f64..10_000_000.0), step in prop::option::of(1u32..3601),
        ) {
            read_back(&Sample {
                meter: "n1/gpu0".into(),
                ts: time(ms),
                counter_mj: counter,
                power_w: power,
                peak_w: power.map(|p| p * 1.5),
                step_s: step,
                counter_estimated: false,
            });
        }

        #[test]
        fn a_signal_point(
            units in -99_999_999_999_000_000_000i128..99_999_999_999_000_000_000,
            carbon in any::<bool>(), estimated in any::<bool>(),
        ) {
            read_back(&SignalPoint {
                region: "DE".into(),
                signal: if carbon { SignalKind::Carbon } else { SignalKind::Price },
                basis: carbon.then_some(Basis::Marginal),
                currency: (!carbon).then(|| "EUR".into()),
                status: Status::Forecast,
                source: "entsoe".into(),
                start_at: time(0),
                end_at: time(3_600_000),
                value: Decimal::from_i128_with_scale(units, 9).normalize(),
                estimated,
            });
        }
    }
}
