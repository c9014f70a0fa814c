//! Step records: one record per meter per UTC step, the energy counter at the step's end
//! boundary with the mean and peak power of the step (the agent's reducer builds them; the
//! ingest API checks them). This module owns what a step is.

use chrono::{DateTime, Utc};

/// The longest step: attribution works on hours, and a step must not straddle one.
pub const MAX_STEP_S: u32 = 3600;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    #[error("must divide an hour: 1, 2, 5, 10, 15, 30, 60, 120, 300, … or 3600 seconds")]
    Length,
    #[error(
        "is not on a boundary of its step (a multiple of step_s seconds since the epoch, UTC)"
    )]
    Boundary,
}

/// A step length: whole seconds that divide an hour, so every hour starts on a boundary.
pub fn length(step_s: u32) -> Result<u32, StepError> {
    if step_s == 0 || !MAX_STEP_S.is_multiple_of(step_s) {
        return Err(StepError::Length);
    }
    Ok(step_s)
}

/// A step record's time: on a boundary of its step.
pub fn boundary(step_s: u32, ts: DateTime<Utc>) -> Result<DateTime<Utc>, StepError> {
    let step_s = length(step_s)?;
    if ts.timestamp_subsec_nanos() != 0 || ts.timestamp().rem_euclid(i64::from(step_s)) != 0 {
        return Err(StepError::Boundary);
    }
    Ok(ts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn a_step_divides_an_hour() {
        assert!([1, 2, 5, 60, 300, 900, 3600]
            .iter()
            .all(|s| length(*s).is_ok()));
        assert!([0, 7, 7200, 61].iter().all(|s| length(*s).is_err()));
    }

    #[test]
    fn a_record_lies_on_its_boundary() {
        let t = Utc.with_ymd_and_hms(2026, 11, 24, 10, 5, 0).unwrap();
        assert!(boundary(60, t).is_ok());
        assert!(boundary(300, t).is_ok());
        assert_eq!(boundary(600, t), Err(StepError::Boundary));
        let late = t + chrono::Duration::milliseconds(1);
        assert_eq!(boundary(60, late), Err(StepError::Boundary));
        assert_eq!(boundary(7, t), Err(StepError::Length));
    }
}
