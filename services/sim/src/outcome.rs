//! How the simulated jobs end: most complete, some training runs fail, lose their node or are
//! preempted, some batch jobs fail, run out of memory, time out or are cancelled. Training
//! checkpoints every two hours (what it did after the last one is lost when it fails);
//! batch jobs keep nothing, so a failed one loses all it drew. Rates are those operators
//! report: a few percent of a fleet's GPU time lost.

use super::{rng, HOUR, MINUTE};
use wattledger_domain::badput::EndState;

/// Training saves its state this often.
pub const CHECKPOINT_EVERY: i64 = 2 * HOUR;

/// A job's end, how it ended and its last checkpoint (ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub end: i64,
    pub state: EndState,
    pub checkpoint: Option<i64>,
}

/// A training run of `len` ms from `start` (its `id` seeds the draw).
pub fn training(seed: u64, id: u64, start: i64, len: i64) -> Outcome {
    let u = rng::unit(seed, 13, id, 0);
    let state = match u {
        u if u < 0.10 => EndState::Failed,
        u if u < 0.15 => EndState::NodeFail,
        u if u < 0.20 => EndState::Preempted,
        _ => EndState::Completed,
    };
    let end = ended(seed, id, start, len, state, 0.3);
    let saved = (end - start) / CHECKPOINT_EVERY * CHECKPOINT_EVERY;
    Outcome {
        end,
        state,
        checkpoint: (saved > 0).then_some(start + saved),
    }
}

/// A batch job of `len` ms from `start`.
pub fn batch(seed: u64, id: u64, start: i64, len: i64) -> Outcome {
    let u = rng::unit(seed, 14, id, 0);
    let state = match u {
        u if u < 0.04 => EndState::Failed,
        u if u < 0.06 => EndState::OutOfMemory,
        u if u < 0.08 => EndState::Timeout,
        u if u < 0.10 => EndState::Cancelled,
        _ => EndState::Completed,
    };
    Outcome {
        end: ended(seed, id, start, len, state, 0.2),
        state,
        checkpoint: None,
    }
}

/// When a job that ends as `state` stops: at its planned end if it completes or runs into
/// its limit, else somewhere after `earliest` of the way, to the minute.
fn ended(seed: u64, id: u64, start: i64, len: i64, state: EndState, earliest: f64) -> i64 {
    if matches!(state, EndState::Completed | EndState::Timeout) {
        return start + len;
    }
    let f = rng::range(seed, 15, id, 0, earliest, 0.95);
    (start + ((len as f64 * f) as i64 / MINUTE).max(1) * MINUTE).min(start + len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn training_loses_only_what_it_did_after_its_last_checkpoint() {
        let mut states = std::collections::BTreeMap::new();
        for id in 0..2000 {
            let o = training(7, id, 0, 40 * HOUR);
            *states.entry(o.state).or_insert(0) += 1;
            assert!(o.end > 0 && o.end <= 40 * HOUR);
            if let Some(c) = o.checkpoint {
                assert_eq!(c % CHECKPOINT_EVERY, 0);
                assert!(c <= o.end && o.end - c < CHECKPOINT_EVERY);
            }
            assert_eq!(o.state == EndState::Completed, o.end == 40 * HOUR);
        }
        // Every kind of loss happens, and most runs complete.
        assert_eq!(states.len(), 4, "{states:?}");
        assert!(states[&EndState::Completed] > 1500, "{states:?}");
    }

    #[test]
    fn batch_jobs_keep_nothing_and_time_out_at_their_limit() {
        for id in 0..500 {
            let o = batch(7, id, 0, 3 * HOUR);
            assert_eq!(o.checkpoint, None);
            if o.state == EndState::Timeout || o.state == EndState::Completed {
                assert_eq!(o.end, 3 * HOUR);
            }
        }
    }
}
