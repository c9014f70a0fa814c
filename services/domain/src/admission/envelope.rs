//! A site's power envelope over time (POLCA-style power-bound operation): the measured draw
//! now, the admitted jobs that will draw later, and whether one more job fits.
//!
//! The load nobody asked about (jobs not admitted through wattledger, idle nodes, cooling) is
//! the measured draw minus the reservations running now, held flat; reservations add their
//! draw over their own interval. So a site frees headroom exactly when admitted jobs are due
//! to end, and a reserved job that has started is not counted twice.

use chrono::{DateTime, Utc};

/// An admitted job's expected draw against the envelope (already scaled by its kind's
/// over-subscription factor) over `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub draw_w: i64,
}

#[derive(Debug, Clone)]
pub struct Envelope<'a> {
    pub limit_w: i64,
    /// Draw not covered by reservations, from the measurement at `now`.
    pub base_w: i64,
    pub reservations: &'a [Reservation],
}

impl<'a> Envelope<'a> {
    pub fn new(
        limit_w: i64,
        measured_w: Option<i64>,
        reservations: &'a [Reservation],
        now: DateTime<Utc>,
    ) -> Self {
        let reserved_now: i64 = reservations
            .iter()
            .filter(|r| r.start <= now && now < r.end)
            .map(|r| r.draw_w)
            .sum();
        Envelope {
            limit_w,
            base_w: measured_w.map_or(0, |m| (m - reserved_now).max(0)),
            reservations,
        }
    }

    /// Projected draw at instant `t`.
    pub fn draw_at(&self, t: DateTime<Utc>) -> i64 {
        self.base_w
            + self
                .reservations
                .iter()
                .filter(|r| r.start <= t && t < r.end)
                .map(|r| r.draw_w)
                .sum::<i64>()
    }

    /// The highest projected draw over `[from, to)`: it changes only where a reservation
    /// starts, so those instants and `from` are enough.
    pub fn peak(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> i64 {
        let mut peak = self.draw_at(from);
        for r in self.reservations {
            if r.start > from && r.start < to {
                peak = peak.max(self.draw_at(r.start));
            }
        }
        peak
    }

    /// Whether a job drawing `draw_w` over `[from, to)` stays within the envelope.
    pub fn fits(&self, draw_w: i64, from: DateTime<Utc>, to: DateTime<Utc>) -> bool {
        self.peak(from, to) + draw_w <= self.limit_w
    }

    /// Instants at which headroom can appear: the ends of reservations.
    pub fn releases(&self) -> impl Iterator<Item = DateTime<Utc>> + '_ {
        self.reservations.iter().map(|r| r.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Duration, TimeZone};

    fn t(m: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000, 0).unwrap() + Duration::minutes(m)
    }

    #[test]
    fn a_started_reservation_is_not_counted_twice_and_frees_headroom_at_its_end() {
        let res = [
            Reservation { start: t(-30), end: t(30), draw_w: 400 },
            Reservation { start: t(60), end: t(120), draw_w: 300 },
        ];
        // The meter already sees the running reservation: 700 W = 300 unmanaged + 400.
        let e = Envelope::new(1000, Some(700), &res, t(0));
        assert_eq!(e.base_w, 300);
        assert_eq!(e.draw_at(t(0)), 700);
        assert_eq!(e.draw_at(t(30)), 300);
        assert_eq!(e.draw_at(t(90)), 600);
        assert!(!e.fits(400, t(0), t(20)));
        assert!(e.fits(400, t(30), t(60)));
        assert!(!e.fits(500, t(30), t(70)), "runs into the 300 W reservation at 60");
        assert_eq!(e.peak(t(30), t(70)), 600);
    }

    #[test]
    fn no_measurement_counts_reservations_only() {
        let e = Envelope::new(1000, None, &[], t(0));
        assert!(e.fits(1000, t(0), t(10)));
        assert!(!e.fits(1001, t(0), t(10)));
    }
}
