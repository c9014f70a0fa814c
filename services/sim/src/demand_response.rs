//! The simulated cluster's demand-response event: last week, Frankfurt's grid operator asked
//! for 10 kW less than baseline over two hours, at 0.25 EUR per kWh shed. The site's batch
//! schedulers are flexible: admission moved every batch job that would have run into the
//! window to its end, so the batch GPUs idled through it. The simulator schedules them so,
//! and keeps what each moved job would have drawn in the window, as admission stored it.

use super::{Job, Workload, DAY, HOUR, SITES};
use wattledger_domain::job_kind::JobKind;

/// The site asked to shed.
pub const SITE: usize = 0;
pub const REDUCTION_KW: &str = "10";
pub const PRICE_PER_KWH: &str = "0.25";
const LENGTH: i64 = 2 * HOUR;
/// History the event needs before it: its weekdays-10 baseline looks back two weeks.
const HISTORY: i64 = 15 * DAY;

/// The event's window, ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    pub start: i64,
    pub end: i64,
}

impl Event {
    pub fn key(&self) -> String {
        let day = chrono::DateTime::from_timestamp_millis(self.start).unwrap_or_default();
        format!("{}-dr-{}", SITES[SITE].key, day.format("%Y%m%d"))
    }

    pub fn overlap(&self, start: i64, end: i64) -> i64 {
        (end.min(self.end) - start.max(self.start)).max(0)
    }
}

/// A batch job admission moved out of the window.
#[derive(Debug, Clone)]
pub struct Moved {
    pub key: String,
    pub tenant: &'static str,
    pub gpus: usize,
    /// When it asked to start, and where it ran instead, ms.
    pub asked: i64,
    pub start: i64,
    pub end: i64,
    /// Its facility-level draw as admission estimated it, W.
    pub draw_w: i64,
    /// What it would have drawn in the window, mJ.
    pub moved_mj: i64,
}

/// Last week's weekday (a week before `to`, a weekend moved back to Friday), at the first of
/// a few afternoon hours in which the site's training runs all run through (the event
/// measures what flexible work shed, not a training run's maintenance gap). None when the
/// simulated range is too short to give it a baseline.
pub(super) fn window(from: i64, to: i64, training: &[Job]) -> Option<Event> {
    let week_ago = to - 7 * DAY;
    let mut day = week_ago - week_ago.rem_euclid(DAY);
    // 1970-01-01 was a Thursday: Monday is 0.
    match (day / DAY + 3).rem_euclid(7) {
        5 => day -= DAY,
        6 => day -= 2 * DAY,
        _ => {}
    }
    let runs_through = |s: i64, e: i64| {
        training
            .iter()
            .filter(|j| j.kind == JobKind::Training && j.workload == Workload::Training)
            .filter(|j| j.key.contains(&format!(":{}:", SITES[SITE].key)))
            .filter(|j| j.start < e && j.end > s)
            .all(|j| j.start <= s && j.end >= e)
    };
    let start = [15, 13, 17, 11, 19, 9]
        .into_iter()
        .map(|h| day + h * HOUR)
        .find(|s| runs_through(*s, s + LENGTH))
        .unwrap_or(day + 15 * HOUR);
    let event = Event {
        start,
        end: start + LENGTH,
    };
    (event.start - HISTORY >= from && event.end + HOUR <= to).then_some(event)
}

/// Moves a batch job that would overlap the window to its end: the lane's next start.
/// Returns the moved record, and where the job starts now.
pub(super) fn moved(
    event: &Event,
    key: &str,
    tenant: &'static str,
    gpus: usize,
    gpu_w: f64,
    start: i64,
    len: i64,
) -> Option<(Moved, i64)> {
    let overlap = event.overlap(start, start + len);
    if overlap == 0 {
        return None;
    }
    let pue: f64 = SITES[SITE].pue.parse().unwrap_or(1.0);
    let draw_w = (gpu_w * gpus as f64 * pue).round() as i64;
    let new_start = event.end;
    Some((
        Moved {
            key: key.to_owned(),
            tenant,
            gpus,
            asked: start,
            start: new_start,
            end: new_start + len,
            draw_w,
            moved_mj: draw_w * overlap,
        },
        new_start,
    ))
}
