//! A site's power envelope over time (POLCA-style power-bound operation): the measured draw
//! now, the admitted jobs that will draw later, and whether one more job fits.
//!
//! The load nobody asked about (jobs not admitted through wattledger, idle nodes, cooling) is
//! the measured draw minus the reservations the measurement already holds, held flat;
//! reservations add their draw over their own interval. So a site frees headroom exactly when
//! admitted jobs are due to end, and a reserved job that has started is not counted twice.
//! The measurement is the highest draw of the last [`MEASURED_OVER`]: a reservation counts as
//! measured only if it was running at that window's start and still is now. One that began
//! since (a job admitted a minute ago, not yet on the meters) is counted on top: the safe
//! side, where subtracting it would let every new job hide in the draw of the last.
//!
//! Reservations are kept as a step function at whole-minute resolution (each rounded out to
//! the minutes it touches, which only ever over-counts): however many jobs are admitted, a
//! query touches at most the minutes of its own window, so a decision stays cheap at
//! thousands of reservations.

use chrono::{DateTime, Duration, Utc};
use std::collections::{BTreeMap, VecDeque};

/// How far back a site's measured draw reaches (the store's `site_draw` takes each meter's
/// highest reading over this).
pub const MEASURED_OVER: Duration = Duration::minutes(10);

/// An admitted job's expected draw against the envelope (already scaled by its kind's
/// over-subscription factor) over `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub draw_w: i64,
}

/// The reserved draw as a step function: the level from each minute where it changes until
/// the next. Levels rather than changes, so the draw at an instant is one lookup, not a sum
/// over every reservation before it; adding a reservation touches the minutes it spans.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reserved {
    /// Draw reserved before the first key.
    before: i64,
    /// Minute since the epoch → reserved draw from its start, W. No key repeats the level
    /// before it, so equal functions compare equal.
    levels: BTreeMap<i64, i64>,
}

fn minute_floor(t: DateTime<Utc>) -> i64 {
    t.timestamp().div_euclid(60)
}
/// Counts sub-second parts: an end at 20:13:00.3 reaches into the minute from 20:13.
fn minute_ceil(t: DateTime<Utc>) -> i64 {
    -(-t.timestamp_millis()).div_euclid(60_000)
}
fn at_minute(m: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(m * 60, 0).unwrap_or_default()
}

impl Reserved {
    pub fn add(&mut self, r: Reservation) {
        let (a, b) = (minute_floor(r.start), minute_ceil(r.end));
        if b <= a || r.draw_w == 0 {
            return;
        }
        // Both ends become steps (at their current level), then the span rises.
        for m in [a, b] {
            let level = self.level(m);
            self.levels.entry(m).or_insert(level);
        }
        for (_, level) in self.levels.range_mut(a..b) {
            *level += r.draw_w;
        }
        // Only the ends can now repeat the level before them.
        self.coalesce(a);
        self.coalesce(b);
    }

    fn level(&self, minute: i64) -> i64 {
        self.levels
            .range(..=minute)
            .next_back()
            .map_or(self.before, |(_, l)| *l)
    }

    fn coalesce(&mut self, minute: i64) {
        let Some(&level) = self.levels.get(&minute) else {
            return;
        };
        if self.level(minute - 1) == level {
            self.levels.remove(&minute);
        }
    }

    /// Folds every step before `now`'s minute into the base: they can no longer matter.
    pub fn prune(&mut self, now: DateTime<Utc>) {
        let m = minute_floor(now);
        let keep = self.levels.split_off(&m);
        if let Some((_, last)) = self.levels.last_key_value() {
            self.before = *last;
        }
        self.levels = keep;
        if let Some((&first, _)) = self.levels.first_key_value() {
            self.coalesce(first);
        }
    }

    /// Reserved draw at instant `t`.
    pub fn at(&self, t: DateTime<Utc>) -> i64 {
        self.level(minute_floor(t))
    }

    /// The highest reserved draw over `[from, to)`.
    pub fn peak(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> i64 {
        let (a, b) = (minute_floor(from), minute_ceil(to));
        self.levels
            .range(a + 1..b)
            .map(|(_, l)| *l)
            .fold(self.level(a), i64::max)
    }

    /// The highest reserved draw over each of `windows`, whose ends must never move back (the
    /// runs of one job from sorted starts): one pass over the steps they span, keeping the
    /// falling levels ahead in a queue, where [`Reserved::peak`] per window would walk every
    /// window's steps again. A flexible job at a site with thousands of admitted jobs has
    /// as many candidate starts as the site has releases. Lazy, so that a job that takes the
    /// first window it fits stops there. Yields each window's start with its peak.
    pub fn peaks<'s, I>(&'s self, windows: I) -> impl Iterator<Item = (DateTime<Utc>, i64)> + 's
    where
        I: IntoIterator<Item = (DateTime<Utc>, DateTime<Utc>)>,
        I::IntoIter: 's,
    {
        let mut windows = windows.into_iter().peekable();
        let first = windows.peek().map_or(0, |(from, _)| minute_floor(*from));
        let mut at_start = self.level(first);
        let mut behind = self.levels.range(first + 1..).peekable();
        let mut ahead = self.levels.range(first + 1..).peekable();
        // Steps inside the current window, (minute, level), levels strictly falling.
        let mut queue: VecDeque<(i64, i64)> = VecDeque::new();
        let mut last = (i64::MIN, i64::MIN);
        windows.map(move |(from, to)| {
            let (a, b) = (minute_floor(from), minute_ceil(to));
            debug_assert!(a >= last.0 && b >= last.1, "windows move back");
            last = (a, b);
            while let Some((_, l)) = behind.next_if(|(m, _)| **m <= a) {
                at_start = *l;
            }
            while let Some((m, l)) = ahead.next_if(|(m, _)| **m < b) {
                while queue.back().is_some_and(|(_, q)| q <= l) {
                    queue.pop_back();
                }
                queue.push_back((*m, *l));
            }
            while queue.front().is_some_and(|(m, _)| *m <= a) {
                queue.pop_front();
            }
            (
                from,
                queue.front().map_or(at_start, |(_, l)| at_start.max(*l)),
            )
        })
    }

    /// Instants at which reserved draw falls, i.e. headroom can appear.
    pub fn releases(&self) -> impl Iterator<Item = DateTime<Utc>> + '_ {
        self.releases_from(None)
    }

    /// Releases at or after `from`, in order, from the steps there on only.
    fn releases_from(
        &self,
        from: Option<DateTime<Utc>>,
    ) -> impl Iterator<Item = DateTime<Utc>> + '_ {
        let (mut previous, steps) = match from {
            None => (self.before, self.levels.range(..)),
            Some(from) => {
                let m = minute_ceil(from);
                (self.level(m - 1), self.levels.range(m..))
            }
        };
        steps
            .filter_map(move |(m, l)| {
                let falls = *l < previous;
                previous = *l;
                falls.then(|| at_minute(*m))
            })
            // Within a millisecond after a minute, `minute_ceil` still names that minute.
            .filter(move |r| from.is_none_or(|from| *r >= from))
    }

    /// Steps kept.
    pub fn len(&self) -> usize {
        self.levels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.levels.is_empty() && self.before == 0
    }
}

impl FromIterator<Reservation> for Reserved {
    fn from_iter<I: IntoIterator<Item = Reservation>>(iter: I) -> Self {
        let mut r = Reserved::default();
        for x in iter {
            r.add(x);
        }
        r
    }
}

#[derive(Debug, Clone)]
pub struct Envelope<'a> {
    pub limit_w: i64,
    /// Draw not covered by reservations, from the measurement at `now`.
    pub base_w: i64,
    pub reserved: &'a Reserved,
}

impl<'a> Envelope<'a> {
    pub fn new(
        limit_w: i64,
        measured_w: Option<i64>,
        reserved: &'a Reserved,
        now: DateTime<Utc>,
    ) -> Self {
        Envelope {
            limit_w,
            base_w: measured_w.map_or(0, |m| {
                let held = reserved.at(now).min(reserved.at(now - MEASURED_OVER));
                (m - held).max(0)
            }),
            reserved,
        }
    }

    /// Projected draw at instant `t`.
    pub fn draw_at(&self, t: DateTime<Utc>) -> i64 {
        self.base_w + self.reserved.at(t)
    }

    /// The highest projected draw over `[from, to)`.
    pub fn peak(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> i64 {
        self.base_w + self.reserved.peak(from, to)
    }

    /// Those of `starts` (sorted) a job drawing `draw_w` for `run` fits at, lazily.
    pub fn fitting<I>(
        &self,
        draw_w: i64,
        starts: I,
        run: Duration,
    ) -> impl Iterator<Item = DateTime<Utc>> + 'a
    where
        I: IntoIterator<Item = DateTime<Utc>>,
        I::IntoIter: 'a,
    {
        let (base, limit) = (self.base_w, self.limit_w);
        self.reserved
            .peaks(starts.into_iter().map(move |s| (s, s + run)))
            .filter_map(move |(s, peak)| (base + peak + draw_w <= limit).then_some(s))
    }

    /// Whether a job drawing `draw_w` over `[from, to)` stays within the envelope.
    pub fn fits(&self, draw_w: i64, from: DateTime<Utc>, to: DateTime<Utc>) -> bool {
        self.peak(from, to) + draw_w <= self.limit_w
    }

    /// Releases in `[from, to]`, reading only the steps from `from` on.
    pub fn releases_within(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> impl Iterator<Item = DateTime<Utc>> + 'a {
        self.reserved
            .releases_from(Some(from))
            .take_while(move |r| *r <= to)
    }
}

/// A job's reservation rounded to the minutes the envelope keeps.
pub fn rounded(start: DateTime<Utc>, duration: Duration) -> (DateTime<Utc>, DateTime<Utc>) {
    (
        at_minute(minute_floor(start)),
        at_minute(minute_ceil(start + duration)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn t(m: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000, 0).unwrap() + Duration::minutes(m)
    }

    #[test]
    fn a_started_reservation_is_not_counted_twice_and_frees_headroom_at_its_end() {
        let res: Reserved = [
            Reservation {
                start: t(-30),
                end: t(30),
                draw_w: 400,
            },
            Reservation {
                start: t(60),
                end: t(120),
                draw_w: 300,
            },
        ]
        .into_iter()
        .collect();
        // The meter already sees the running reservation: 700 W = 300 unmanaged + 400.
        let e = Envelope::new(1000, Some(700), &res, t(0));
        assert_eq!(e.base_w, 300);
        assert_eq!(e.draw_at(t(0)), 700);
        assert_eq!(e.draw_at(t(30)), 300);
        assert_eq!(e.draw_at(t(90)), 600);
        assert!(!e.fits(400, t(0), t(20)));
        assert!(e.fits(400, t(30), t(60)));
        assert!(
            !e.fits(500, t(30), t(70)),
            "runs into the 300 W reservation at 60"
        );
        assert_eq!(e.peak(t(30), t(70)), 600);
        assert_eq!(res.releases().collect::<Vec<_>>(), vec![t(30), t(120)]);
    }

    #[test]
    fn a_reservation_younger_than_the_measurement_is_counted_on_top_of_it() {
        // 700 W measured; 400 W reserved from two minutes ago: the meters have not seen it.
        let res: Reserved = [Reservation {
            start: t(-2),
            end: t(60),
            draw_w: 400,
        }]
        .into_iter()
        .collect();
        let e = Envelope::new(1000, Some(700), &res, t(0));
        assert_eq!(e.draw_at(t(0)), 1100);
        assert!(!e.fits(1, t(0), t(10)));
    }

    #[test]
    fn seconds_round_out_to_whole_minutes() {
        let s = t(0) + Duration::seconds(10);
        let res: Reserved = [Reservation {
            start: s,
            end: s + Duration::seconds(30),
            draw_w: 5,
        }]
        .into_iter()
        .collect();
        assert_eq!(res.at(t(0)), 5);
        assert_eq!(res.at(t(1)), 0);
        assert_eq!(rounded(s, Duration::seconds(60)), (t(0), t(2)));
    }

    /// A job admitted at 18:13:00.3 for two hours still runs at 20:13:00.1: its minute
    /// from 20:13 is reserved (the next job waits until 20:14, not 0.3 s too early).
    #[test]
    fn a_fraction_of_a_second_rounds_out_too() {
        let s = t(0) + Duration::milliseconds(300);
        assert_eq!(rounded(s, Duration::minutes(120)), (t(0), t(121)));
        let res: Reserved = [Reservation {
            start: s,
            end: s + Duration::minutes(120),
            draw_w: 5,
        }]
        .into_iter()
        .collect();
        assert_eq!(res.at(t(120)), 5);
        assert_eq!(res.at(t(121)), 0);
    }

    #[test]
    fn no_measurement_counts_reservations_only() {
        let none = Reserved::default();
        let e = Envelope::new(1000, None, &none, t(0));
        assert!(e.fits(1000, t(0), t(10)));
        assert!(!e.fits(1001, t(0), t(10)));
    }

    proptest! {
        /// The step function answers as a walk over every reservation would, before and
        /// after pruning the past.
        #[test]
        fn step_function_equals_direct_sum(
            rs in proptest::collection::vec((-100i64..100, 1i64..100, 1i64..1000), 0..40),
            from_off in 0i64..200, len in 1i64..120, prune_at in -120i64..0,
        ) {
            let from = prune_at + from_off;
            let list: Vec<Reservation> = rs.iter().map(|(a, l, w)| Reservation {
                start: t(*a), end: t(a + l), draw_w: *w }).collect();
            let mut res: Reserved = list.iter().copied().collect();
            res.prune(t(prune_at));
            let direct = |m: i64| list.iter().filter(|r| r.start <= t(m) && t(m) < r.end)
                .map(|r| r.draw_w).sum::<i64>();
            prop_assert_eq!(res.at(t(from)), direct(from));
            let peak = (from..from + len).map(direct).max().unwrap();
            prop_assert_eq!(res.peak(t(from), t(from + len)), peak);
            // One pass over sorted windows of one length peaks as each window alone does,
            // seconds into a minute included.
            let starts: Vec<_> = (0..12).map(|k| t(from + k * k) + Duration::seconds(k * 7)).collect();
            let windows: Vec<_> = starts.iter().map(|s| (*s, *s + Duration::minutes(len))).collect();
            let each: Vec<_> = windows.iter().map(|(a, b)| res.peak(*a, *b)).collect();
            prop_assert_eq!(res.peaks(windows).map(|(_, p)| p).collect::<Vec<_>>(), each);
            // Releases from an instant on are those of all releases at or after it, a
            // fraction of a millisecond after a minute included.
            let after = t(from) + Duration::seconds(len % 60) + Duration::nanoseconds(len % 2 * 500);
            prop_assert_eq!(
                res.releases_from(Some(after)).collect::<Vec<_>>(),
                res.releases().filter(|r| *r >= after).collect::<Vec<_>>()
            );
            // Releases are exactly the minutes where the direct sum falls.
            let falls: Vec<_> = (prune_at..300).filter(|m| direct(*m) < direct(m - 1))
                .map(t).collect();
            prop_assert_eq!(res.releases().collect::<Vec<_>>(), falls);
            // The same reservations added in reverse order give the same steps.
            let mut rev: Reserved = list.iter().rev().copied().collect();
            rev.prune(t(prune_at));
            prop_assert_eq!(rev, res);
        }
    }
}
