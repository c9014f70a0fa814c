//! A signal over time as a step function (forecast or actual points), integrated exactly over
//! any interval in O(log n) through prefix sums, so that every start slot of a flexible job can
//! be priced without walking the points again.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;

/// One value held over `[start, end)`: g CO2e/kWh or currency/kWh.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub value: Decimal,
}

/// Points sorted by start, not overlapping (the later of two overlapping points is cut at the
/// next one's start), with the running integral at each point's start.
///
/// Points are held to the whole second (their fraction dropped): signals come in minutes and
/// hours, and seconds since the epoch are what a question's many integrals search and
/// subtract, cheaper than dates.
#[derive(Debug, Clone, Default)]
pub struct Forecast {
    points: Vec<Point>,
    /// Each point's start and end, seconds since the epoch.
    starts: Vec<i64>,
    ends: Vec<i64>,
    /// Σ value × seconds of the points before i.
    integral: Vec<Decimal>,
    /// Seconds covered by the points before i.
    covered: Vec<i64>,
}

fn whole_second(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(t.timestamp(), 0).unwrap_or(t)
}

impl Forecast {
    pub fn new(mut points: Vec<Point>) -> Self {
        for p in &mut points {
            (p.start, p.end) = (whole_second(p.start), whole_second(p.end));
        }
        points.retain(|p| p.end > p.start);
        points.sort_by_key(|p| p.start);
        let mut kept: Vec<Point> = Vec::with_capacity(points.len());
        for p in points {
            if let Some(last) = kept.last_mut() {
                if last.start == p.start {
                    *last = p;
                    continue;
                }
                if last.end > p.start {
                    last.end = p.start;
                }
            }
            kept.push(p);
        }
        let mut integral = Vec::with_capacity(kept.len() + 1);
        let mut covered = Vec::with_capacity(kept.len() + 1);
        let (mut sum, mut secs) = (Decimal::ZERO, 0i64);
        for p in &kept {
            integral.push(sum);
            covered.push(secs);
            let len = (p.end - p.start).num_seconds();
            sum += p.value * Decimal::from(len);
            secs += len;
        }
        integral.push(sum);
        covered.push(secs);
        Forecast {
            starts: kept.iter().map(|p| p.start.timestamp()).collect(),
            ends: kept.iter().map(|p| p.end.timestamp()).collect(),
            points: kept,
            integral,
            covered,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    pub fn points(&self) -> &[Point] {
        &self.points
    }

    /// The instants in `[from, to]` where the value changes (a point starts or ends), in
    /// order and each once: the candidate starts of a flexible job come from these, and a
    /// question should not sort every boundary of two days of signals to find a dozen.
    pub fn changes(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> impl Iterator<Item = DateTime<Utc>> + '_ {
        // Points do not overlap, so their ends are sorted too: skip those that end before `from`.
        let first = self.points.partition_point(|p| p.end < from);
        let points = &self.points[first..];
        points
            .iter()
            .enumerate()
            .take_while(move |(_, p)| p.start <= to)
            .flat_map(move |(k, p)| {
                // An end that is the next point's start is that start.
                let end = (points.get(k + 1).map(|n| n.start) != Some(p.end)).then_some(p.end);
                std::iter::once(p.start).chain(end)
            })
            .filter(move |t| *t >= from && *t <= to)
    }

    /// (integral, covered seconds) from the first point's start up to `t`, in seconds since
    /// the epoch.
    fn prefix(&self, t: i64) -> (Decimal, i64) {
        // The number of points starting at or before t.
        let i = self.starts.partition_point(|s| *s <= t);
        if i == 0 {
            return (Decimal::ZERO, 0);
        }
        let into = t.min(self.ends[i - 1]) - self.starts[i - 1];
        (
            self.integral[i - 1] + self.points[i - 1].value * Decimal::from(into),
            self.covered[i - 1] + into,
        )
    }

    /// ∫ value dt over `[from, to)` in value × seconds (both held to the whole second), or
    /// `None` where any second of it has no point: a slot that is not fully forecast is not a
    /// slot to choose.
    pub fn integral(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Option<Decimal> {
        let (from, to) = (from.timestamp(), to.timestamp());
        if to <= from {
            return Some(Decimal::ZERO);
        }
        let (a, ca) = self.prefix(from);
        let (b, cb) = self.prefix(to);
        (cb - ca == to - from).then_some(b - a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s, 0).unwrap()
    }
    fn pt(a: i64, b: i64, v: i64) -> Point {
        Point {
            start: t(a),
            end: t(b),
            value: Decimal::from(v),
        }
    }

    #[test]
    fn integrates_across_points_and_refuses_gaps() {
        let f = Forecast::new(vec![
            pt(0, 3600, 100),
            pt(3600, 7200, 300),
            pt(9000, 9600, 5),
        ]);
        assert_eq!(
            f.integral(t(1800), t(5400)),
            Some(Decimal::from(1800 * 100 + 1800 * 300))
        );
        assert_eq!(f.integral(t(0), t(7200)), Some(Decimal::from(3600 * 400)));
        assert_eq!(
            f.integral(t(7000), t(9100)),
            None,
            "7200..9000 is not forecast"
        );
        assert_eq!(f.integral(t(-10), t(10)), None);
        assert_eq!(f.integral(t(9000), t(9600)), Some(Decimal::from(3000)));
        assert_eq!(f.integral(t(9000), t(9601)), None);
    }

    #[test]
    fn overlapping_points_are_cut_and_a_restated_point_replaces() {
        let f = Forecast::new(vec![
            pt(0, 3600, 100),
            pt(1800, 3600, 200),
            pt(1800, 3600, 50),
        ]);
        assert_eq!(f.points().len(), 2);
        assert_eq!(
            f.integral(t(0), t(3600)),
            Some(Decimal::from(1800 * 100 + 1800 * 50))
        );
    }

    proptest! {
        /// The prefix-sum integral equals walking the points second by second.
        #[test]
        fn prefix_integral_equals_direct_sum(
            values in proptest::collection::vec(0i64..1000, 1..12),
            len in 60i64..4000,
            a in 0i64..40_000,
            d in 0i64..40_000,
        ) {
            let pts: Vec<Point> = values.iter().enumerate()
                .map(|(i, v)| pt(i as i64 * len, (i as i64 + 1) * len, *v)).collect();
            let f = Forecast::new(pts.clone());
            let (from, to) = (a, a + d);
            let end = values.len() as i64 * len;
            let direct: Option<i64> = (to <= end || d == 0).then(|| {
                pts.iter().map(|p| {
                    let (s, e) = ((p.start - t(0)).num_seconds(), (p.end - t(0)).num_seconds());
                    let o = (e.min(to) - s.max(from)).max(0);
                    o * p.value.mantissa() as i64
                }).sum()
            });
            prop_assert_eq!(f.integral(t(from), t(to)), direct.map(Decimal::from));
        }

        /// `changes` finds the boundaries in a range that sorting every boundary would,
        /// with gaps, overlaps and restated points among them.
        #[test]
        fn changes_are_the_boundaries_in_range(
            spans in proptest::collection::vec((0i64..100, 1i64..30), 0..20),
            from in -10i64..130,
            len in 0i64..80,
        ) {
            let f = Forecast::new(spans.iter().map(|(a, l)| pt(*a, a + l, 1)).collect());
            let (from, to) = (t(from), t(from + len));
            let mut all: Vec<_> = f.points().iter().flat_map(|p| [p.start, p.end])
                .filter(|b| *b >= from && *b <= to).collect();
            all.sort();
            all.dedup();
            prop_assert_eq!(f.changes(from, to).collect::<Vec<_>>(), all);
        }
    }
}
