//! Badput: the energy of work that was thrown away (DESIGN.md "Attribution", badput).
//!
//! A job's end state comes from its scheduler. A training or batch job produces its result
//! at the end, saving progress at checkpoints: when it does not complete, everything it did
//! after its last checkpoint is lost, and everything it did at all if it had none. That
//! energy is badput; the rest is goodput. The rule only says *from when* a job's energy is
//! lost; the attribution core measures the energy after that instant like any other
//! ([`crate::attribution::Job::lost_from_ms`]), and costing splits a row's cost and carbon
//! by the same energy ([`share`]).
//!
//! Serving and interactive work is delivered while it runs (tokens answered, a notebook's
//! cells): how it ends loses nothing already delivered, so its energy is never badput.

use crate::job_kind::JobKind;
use crate::split::split;
use chrono::{DateTime, Utc};

crate::names::names! {
    /// How a job ended, as its scheduler reports it. The names are the API's and the
    /// database's (migration 0030's CHECK).
    pub enum EndState {
        /// Ran to the end and succeeded.
        Completed = "completed",
        /// Exited with an error.
        Failed = "failed",
        /// Cancelled by its owner or an operator.
        Cancelled = "cancelled",
        /// Killed at its time limit (Slurm TIMEOUT and DEADLINE; Kubernetes DeadlineExceeded).
        Timeout = "timeout",
        /// Stopped for a higher-priority job (Slurm PREEMPTED; a Kubernetes preemption or
        /// eviction).
        Preempted = "preempted",
        /// Lost with its node (Slurm NODE_FAIL, BOOT_FAIL).
        NodeFail = "node_fail",
        /// Killed for exceeding its memory (Slurm OUT_OF_MEMORY; Kubernetes OOMKilled).
        OutOfMemory = "out_of_memory",
        /// An attempt the scheduler put back in the queue (Slurm REQUEUED); the next attempt
        /// is its own job, linked to this one.
        Requeued = "requeued",
    }
}

impl EndState {
    /// Whether the job's work (after its last checkpoint) was thrown away.
    pub fn loses_work(self) -> bool {
        self != EndState::Completed
    }

    /// The end state of a Slurm state as `sacct` prints it (`State`: `COMPLETED`,
    /// `CANCELLED by 1000`, `TIMEOUT`, …); `None` for a job still pending or running, or
    /// a state this list does not name (it stays unknown rather than guessed).
    pub fn of_slurm(state: &str) -> Option<EndState> {
        let base = state.split_whitespace().next().unwrap_or("");
        Some(match base.trim_end_matches('+') {
            "COMPLETED" => EndState::Completed,
            "FAILED" => EndState::Failed,
            "CANCELLED" => EndState::Cancelled,
            "TIMEOUT" | "DEADLINE" => EndState::Timeout,
            "PREEMPTED" => EndState::Preempted,
            "NODE_FAIL" | "BOOT_FAIL" => EndState::NodeFail,
            "OUT_OF_MEMORY" => EndState::OutOfMemory,
            "REQUEUED" => EndState::Requeued,
            _ => return None,
        })
    }
}

/// The instant from which a job's energy is badput, or `None` when none of it is: a job
/// still running or of unknown end, one that completed, and serving or interactive work.
/// A checkpoint before the job started (an earlier attempt's) saves nothing of this one.
pub fn lost_from(
    kind: JobKind,
    end: Option<EndState>,
    last_checkpoint: Option<DateTime<Utc>>,
    start: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let produces_at_end = matches!(kind, JobKind::Training | JobKind::Batch);
    if !produces_at_end || !end.is_some_and(EndState::loses_work) {
        return None;
    }
    Some(last_checkpoint.map_or(start, |c| c.max(start)))
}

/// The part of a row's `amount` (cost or carbon, in the ledger's smallest unit) that its
/// badput energy carries: the amount split by energy, as costing splits a site-hour's
/// amount over rows, so goodput and badput add up to the row's amount exactly.
pub fn share(amount: i64, total_mj: i64, badput_mj: i64) -> i64 {
    if badput_mj <= 0 || total_mj <= 0 {
        return 0;
    }
    let bad = badput_mj.min(total_mj);
    split(amount, &[bad as u128, (total_mj - bad) as u128])[0]
}

/// The part of `mj` spent at or after `lost_from_ms` in a step `[t0, t1)`: none before, all
/// after, and for the step that holds the instant, its energy split by the step's time
/// either side (within a step the meters give one figure, so time is the only weight).
pub fn lost_in_step(mj: i64, t0: i64, t1: i64, lost_from_ms: i64) -> i64 {
    if lost_from_ms >= t1 || mj == 0 {
        0
    } else if lost_from_ms <= t0 {
        mj
    } else {
        split(
            mj,
            &[(t1 - lost_from_ms) as u128, (lost_from_ms - t0) as u128],
        )[0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn t(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 10, 5, h, m, 0).unwrap()
    }

    #[test]
    fn a_failed_training_job_loses_what_it_did_after_its_last_checkpoint() {
        let lost = lost_from(
            JobKind::Training,
            Some(EndState::Failed),
            Some(t(10, 40)),
            t(9, 0),
        );
        assert_eq!(lost, Some(t(10, 40)));
    }

    #[test]
    fn without_a_checkpoint_all_of_it_is_lost_and_an_earlier_attempts_saves_nothing() {
        let start = t(9, 0);
        for checkpoint in [None, Some(t(8, 0))] {
            assert_eq!(
                lost_from(JobKind::Batch, Some(EndState::Timeout), checkpoint, start),
                Some(start)
            );
        }
    }

    #[test]
    fn completed_running_and_serving_work_is_never_badput() {
        let start = t(9, 0);
        assert_eq!(
            lost_from(JobKind::Training, Some(EndState::Completed), None, start),
            None
        );
        assert_eq!(lost_from(JobKind::Training, None, None, start), None);
        for kind in [JobKind::Inference, JobKind::Interactive] {
            assert_eq!(
                lost_from(kind, Some(EndState::Failed), None, start),
                None,
                "{kind}"
            );
        }
        for end in EndState::ALL {
            assert_eq!(
                lost_from(JobKind::Training, Some(end), None, start).is_some(),
                end != EndState::Completed
            );
        }
    }

    #[test]
    fn slurm_states_read_as_sacct_prints_them() {
        assert_eq!(EndState::of_slurm("COMPLETED"), Some(EndState::Completed));
        assert_eq!(
            EndState::of_slurm("CANCELLED by 1000"),
            Some(EndState::Cancelled)
        );
        assert_eq!(EndState::of_slurm("TIMEOUT"), Some(EndState::Timeout));
        assert_eq!(EndState::of_slurm("DEADLINE"), Some(EndState::Timeout));
        assert_eq!(EndState::of_slurm("NODE_FAIL"), Some(EndState::NodeFail));
        assert_eq!(EndState::of_slurm("BOOT_FAIL"), Some(EndState::NodeFail));
        assert_eq!(
            EndState::of_slurm("OUT_OF_MEMORY"),
            Some(EndState::OutOfMemory)
        );
        assert_eq!(EndState::of_slurm("PREEMPTED"), Some(EndState::Preempted));
        assert_eq!(EndState::of_slurm("REQUEUED"), Some(EndState::Requeued));
        for running in ["RUNNING", "PENDING", "COMPLETING", "SUSPENDED", ""] {
            assert_eq!(EndState::of_slurm(running), None, "{running}");
        }
    }

    #[test]
    fn a_step_holding_the_checkpoint_is_split_by_its_time_either_side() {
        // 60 s step, lost from 45 s: a quarter of 1001 mJ, rounded by largest remainder.
        assert_eq!(lost_in_step(1001, 0, 60_000, 45_000), 250);
        assert_eq!(lost_in_step(1001, 0, 60_000, 0), 1001);
        assert_eq!(lost_in_step(1001, 0, 60_000, 60_000), 0);
        assert_eq!(lost_in_step(1001, 60_000, 120_000, i64::MAX), 0);
    }

    #[test]
    fn a_rows_amount_splits_by_its_badput_energy() {
        // 3 of 4 kWh lost: 3/4 of 1.000001 (micro-units) is 750_000.75 → 750_001.
        assert_eq!(share(1_000_001, 4_000, 3_000), 750_001);
        assert_eq!(share(1_000_001, 4_000, 0), 0);
        assert_eq!(share(1_000_001, 4_000, 4_000), 1_000_001);
        assert_eq!(share(1_000_001, 0, 0), 0);
    }

    proptest! {
        #[test]
        fn badput_never_exceeds_what_it_is_part_of(
            mj in 0i64..1_000_000_000,
            t0 in 0i64..10_000_000,
            len in 1i64..3_600_000,
            at in 0i64..20_000_000,
            amount in 0i64..1_000_000_000,
        ) {
            let lost = lost_in_step(mj, t0, t0 + len, at);
            prop_assert!((0..=mj).contains(&lost));
            let part = share(amount, mj, lost);
            prop_assert!((0..=amount).contains(&part));
            // Energy and amount are split by the same weights: a row with all of its energy
            // lost has all of its amount lost, and none with none.
            if lost == mj && mj > 0 { prop_assert_eq!(part, amount); }
            if lost == 0 { prop_assert_eq!(part, 0); }
        }
    }
}
