//! A job's own report of its last checkpoint, as a scheduler carries it (a Slurm comment's
//! `checkpoint=<time>`, a pod's `wattledger.io/last-checkpoint` annotation): one rule for
//! every source, so a job reports it the same way wherever it runs.

use chrono::{DateTime, Utc};

/// The time a checkpoint value names: RFC 3339 (`2026-10-05T12:00:00+02:00`) or unix
/// seconds (`$(date +%s)`). A value that is not a time, or is outside the times the server
/// accepts, is no checkpoint: ignored, never guessed.
pub fn checkpoint_time(value: &str) -> Option<DateTime<Utc>> {
    let value = value.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(value) {
        return Some(t.with_timezone(&Utc));
    }
    let secs: i64 = value.parse().ok()?;
    DateTime::from_timestamp(secs, 0).filter(|t| wattledger_domain::input::time(*t).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_and_unix_seconds_are_times_and_nothing_else_is() {
        let t = DateTime::from_timestamp(1_791_201_600, 0);
        assert_eq!(checkpoint_time("1791201600"), t);
        assert_eq!(checkpoint_time(" 2026-10-05T14:00:00+02:00 "), t);
        for none in ["", "soon", "1", "@now-2h", "2026-10-05"] {
            assert_eq!(checkpoint_time(none), None, "{none}");
        }
    }
}
