//! Measured over-subscription headroom: how much more provisioned peak power a site, or one
//! workload class on it, could take inside the same envelope, from what its meters' step
//! peaks show of how their peaks coincide.
//!
//! Per hour, a set of meters has a [`HourProfile`]: per minute, the sum across the meters of
//! each one's highest reading in that minute (their coincident draw), and the parts' peak:
//! what an envelope that counts every part present at its own peak provisions — the highest,
//! over the minutes, of the sum of the own peaks (over the hour) of the meters reporting in
//! that minute. (A meter counts only with the minutes it is there: GPUs that held a class one
//! after the other, or a node that joined mid-hour, never needed provisioning together;
//! summing them all inflated the headroom.) Over a span of hours ([`headroom`]):
//! - the **coincident peak** is the highest minute;
//! - the **parts' peak** is the highest hour's parts' peak. A meter's own peak is taken over
//!   an hour, never longer, so this errs low, and the headroom with it: the safe side for
//!   admitting more than the parts' peaks add up to;
//! - the **percentile peak** is the given percentile of the minutes, nearest rank (P99.9 by
//!   default: the draw the site exceeds one minute in a thousand);
//! - the **coincidence factor** is coincident peak / parts' peak: 1 when the parts peak
//!   together (synchronous training), lower the less they do;
//! - the **headroom** is parts' peak / percentile peak − 1: how much more parts' peak fits
//!   in the power the parts draw at that percentile. 0 when they peak together.

use crate::job_kind::JobKind;
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;
use std::collections::BTreeMap;

pub const MINUTES_PER_HOUR: usize = 60;
const MINUTE_US: i64 = 60_000_000;
pub(crate) const HOUR_US: i64 = 3_600_000_000;
pub(crate) const DAY_US: i64 = 24 * HOUR_US;

/// The percentile of the minutes the headroom is stated at, unless asked otherwise.
pub const DEFAULT_PERCENTILE: Decimal = Decimal::from_parts(999, 0, 0, false, 1);

/// Which meters a profile sums: the site's facility meters, its IT meters (its node meters,
/// or its GPUs where it has none, as the site's IT peak counts them), or the GPUs held by
/// jobs of one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PowerClass {
    Facility,
    It,
    Job(JobKind),
}

impl PowerClass {
    /// `facility`, `it` or the job kind's name, as the API and the database spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            PowerClass::Facility => "facility",
            PowerClass::It => "it",
            PowerClass::Job(k) => k.as_str(),
        }
    }

    pub fn parse(s: &str) -> Option<PowerClass> {
        match s {
            "facility" => Some(PowerClass::Facility),
            "it" => Some(PowerClass::It),
            _ => JobKind::parse(s).map(PowerClass::Job),
        }
    }
}

/// As its name: `facility`, `it` or a job kind.
impl serde::Serialize for PowerClass {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

crate::names::text_column!(PowerClass);

/// One hour of a set of meters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HourProfile {
    /// Per minute of the hour (the minute ending 1, 2 … 60 minutes after its start), the
    /// coincident draw in mW; `None` where none of the meters reported.
    pub minutes_mw: Vec<Option<i64>>,
    /// The parts' peak, mW: the highest, over the hour's minutes, of the sum of the own peaks
    /// (each one's highest minute in the hour) of the meters reporting in that minute. A
    /// meter counts with the minutes it is there: two GPUs that held the class one after the
    /// other within the hour never had to be provisioned together.
    pub parts_peak_mw: i64,
}

impl HourProfile {
    /// The hour's coincident peak: its highest minute, mW (the site's IT peak for `it`).
    pub fn peak_mw(&self) -> Option<i64> {
        self.minutes_mw.iter().flatten().copied().max()
    }
}

/// One meter's highest reading in each minute of an hour it reported in, mW.
type MeterMinutes = [Option<i64>; MINUTES_PER_HOUR];

/// Per (hour start µs, class), the profile of the meters `class_of` puts in that class.
///
/// `readings` are `(meter, ts_us, mw)` in (meter, ts) order, as
/// [`crate::peaks::power_readings`] gives them; each counts toward the minute `ts − 1 µs`
/// falls in, and only those in `(from_us, to_us]` count (as for the site's IT peak).
/// `class_of(meter)` gives, once per meter, what says which classes each of its minutes
/// (`minute_us`) counts toward, none or several (a GPU changes class with the job that holds
/// it; where a site has no node meters its GPUs are also its IT meters). One pass for every
/// class; a meter's minutes are gathered apart and added to the shared maps once per meter,
/// hour and class, not once per reading: a fleet's site-day is millions of them.
pub fn hour_profiles<C, I, F>(
    readings: &[(i64, i64, i64)],
    (from_us, to_us): (i64, i64),
    class_of: impl Fn(i64) -> F,
) -> BTreeMap<(i64, C), HourProfile>
where
    C: Ord + Copy,
    I: IntoIterator<Item = C>,
    F: Fn(i64) -> I,
{
    let mut out: BTreeMap<(i64, C), HourProfile> = BTreeMap::new();
    let mut parts: BTreeMap<(i64, C), [i64; MINUTES_PER_HOUR]> = BTreeMap::new();
    // The current meter's highest reading per minute, per (hour, class) it counted toward.
    let mut mine: Vec<((i64, C), MeterMinutes)> = Vec::new();
    for run in readings.chunk_by(|a, b| a.0 == b.0) {
        let classes = class_of(run[0].0);
        mine.clear();
        let mut last = 0;
        let mut close = |minute: i64, mw: i64| {
            let hour = minute.div_euclid(HOUR_US) * HOUR_US;
            let index = usize::try_from((minute - hour) / MINUTE_US).unwrap_or(0);
            for class in classes(minute) {
                let key = (hour, class);
                if mine.get(last).is_none_or(|m| m.0 != key) {
                    last = match mine.iter().position(|m| m.0 == key) {
                        Some(i) => i,
                        None => {
                            mine.push((key, [None; MINUTES_PER_HOUR]));
                            mine.len() - 1
                        }
                    };
                }
                mine[last].1[index] = Some(mw);
            }
        };
        // The minute being gathered: (minute start, highest reading so far).
        let mut open: Option<(i64, i64)> = None;
        for &(_, ts, mw) in run {
            if ts <= from_us || ts > to_us {
                continue;
            }
            let minute = (ts - 1).div_euclid(MINUTE_US) * MINUTE_US;
            match open {
                Some((start, peak)) if start == minute => open = Some((start, peak.max(mw))),
                Some((start, peak)) => {
                    close(start, peak);
                    open = Some((minute, mw));
                }
                None => open = Some((minute, mw)),
            }
        }
        if let Some((start, peak)) = open {
            close(start, peak);
        }
        for (key, minutes) in &mine {
            let profile = out.entry(*key).or_insert_with(|| HourProfile {
                minutes_mw: vec![None; MINUTES_PER_HOUR],
                parts_peak_mw: 0,
            });
            let own_peak = minutes.iter().flatten().copied().max().unwrap_or(0);
            let per_minute = parts.entry(*key).or_insert([0; MINUTES_PER_HOUR]);
            for ((slot, sum), mw) in profile.minutes_mw.iter_mut().zip(per_minute).zip(minutes) {
                if let Some(mw) = mw {
                    *slot = Some(slot.unwrap_or(0) + mw);
                    *sum += own_peak;
                }
            }
        }
    }
    for (key, per_minute) in parts {
        if let Some(p) = out.get_mut(&key) {
            p.parts_peak_mw = per_minute.into_iter().max().unwrap_or(0);
        }
    }
    out
}

/// What a span of hour profiles says of over-subscription (the module doc defines each).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Headroom {
    /// Minutes with a reading.
    pub minutes: usize,
    pub coincident_peak_mw: i64,
    pub percentile_peak_mw: i64,
    pub parts_peak_mw: i64,
    /// Coincident peak / parts' peak, 4 decimal places.
    pub coincidence_factor: Decimal,
    /// Parts' peak / percentile peak − 1, 4 decimal places.
    pub headroom: Decimal,
}

/// The headroom over `profiles` at `percentile` (in (0, 100]); `None` when no minute has a
/// reading, or the percentile's draw is zero (no ratio to state).
pub fn headroom<'a>(
    profiles: impl IntoIterator<Item = &'a HourProfile>,
    percentile: Decimal,
) -> Option<Headroom> {
    let mut minutes: Vec<i64> = Vec::new();
    let mut parts_peak_mw = 0;
    for p in profiles {
        minutes.extend(p.minutes_mw.iter().flatten());
        parts_peak_mw = parts_peak_mw.max(p.parts_peak_mw);
    }
    minutes.sort_unstable();
    let coincident_peak_mw = *minutes.last()?;
    let percentile_peak_mw = minutes[nearest_rank(minutes.len(), percentile)? - 1];
    if percentile_peak_mw <= 0 || parts_peak_mw <= 0 {
        return None;
    }
    let ratio = |a: i64, b: i64| (Decimal::from(a) / Decimal::from(b)).round_dp(4);
    Some(Headroom {
        minutes: minutes.len(),
        coincident_peak_mw,
        percentile_peak_mw,
        parts_peak_mw,
        coincidence_factor: ratio(coincident_peak_mw, parts_peak_mw),
        headroom: (ratio(parts_peak_mw, percentile_peak_mw) - Decimal::ONE).max(Decimal::ZERO),
    })
}

/// The headroom per UTC day (its start, µs) and class, and over all of `hours` (day `None`),
/// of hours given as `(hour start µs, class, profile)`.
pub fn daily(
    hours: &[(i64, PowerClass, HourProfile)],
    percentile: Decimal,
) -> BTreeMap<(Option<i64>, PowerClass), Headroom> {
    let mut groups: BTreeMap<(Option<i64>, PowerClass), Vec<&HourProfile>> = BTreeMap::new();
    for (hour, class, p) in hours {
        let day = hour.div_euclid(DAY_US) * DAY_US;
        groups.entry((Some(day), *class)).or_default().push(p);
        groups.entry((None, *class)).or_default().push(p);
    }
    groups
        .into_iter()
        .filter_map(|(k, ps)| Some((k, headroom(ps, percentile)?)))
        .collect()
}

/// The nearest rank (1-based) of `percentile` among `n` values: ⌈p/100 × n⌉, at least 1.
fn nearest_rank(n: usize, percentile: Decimal) -> Option<usize> {
    if n == 0 || percentile <= Decimal::ZERO || percentile > Decimal::ONE_HUNDRED {
        return None;
    }
    let rank = (percentile * Decimal::from(n) / Decimal::ONE_HUNDRED).ceil();
    rank.to_usize().map(|r| r.clamp(1, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: i64 = MINUTE_US;

    /// Readings of `meters` over the first `hours` hours: meter `i`'s step ending at minute
    /// `m` reads `f(i, m)` mW.
    fn readings(meters: i64, hours: i64, f: impl Fn(i64, i64) -> i64) -> Vec<(i64, i64, i64)> {
        (1..=hours * 60)
            .flat_map(|m| (0..meters).map(move |i| (i, m)))
            .map(|(i, m)| (i, m * M, f(i, m)))
            .collect()
    }

    fn profiles(r: Vec<(i64, i64, i64)>, hours: i64) -> Vec<HourProfile> {
        hour_profiles(&sorted(r), (0, hours * HOUR_US), |_| |_| Some(()))
            .into_values()
            .collect()
    }

    /// In (meter, ts) order, as the readings come.
    fn sorted(mut r: Vec<(i64, i64, i64)>) -> Vec<(i64, i64, i64)> {
        r.sort_unstable();
        r
    }

    /// Two meters whose square waves (100 W, 300 W) rise and fall together: they draw their
    /// peaks together, so nothing is left to over-subscribe.
    #[test]
    fn parts_that_peak_together_leave_no_headroom() {
        let wave = |_, m: i64| if m % 2 == 0 { 300_000 } else { 100_000 };
        let h = headroom(&profiles(readings(2, 1, wave), 1), DEFAULT_PERCENTILE).unwrap();
        assert_eq!(h.minutes, 60);
        assert_eq!(
            (h.coincident_peak_mw, h.percentile_peak_mw, h.parts_peak_mw),
            (600_000, 600_000, 600_000)
        );
        assert_eq!(h.coincidence_factor, Decimal::ONE);
        assert_eq!(h.headroom, Decimal::ZERO);
    }

    /// The same waves in antiphase: every minute draws 100 + 300 = 400 W while the parts'
    /// peaks add up to 600 W, so 600 / 400 − 1 = 50 % more fits; they coincide at 2/3.
    #[test]
    fn parts_in_antiphase_leave_the_difference() {
        let wave = |i: i64, m: i64| if (m + i) % 2 == 0 { 300_000 } else { 100_000 };
        let h = headroom(&profiles(readings(2, 1, wave), 1), DEFAULT_PERCENTILE).unwrap();
        assert_eq!(
            (h.coincident_peak_mw, h.percentile_peak_mw, h.parts_peak_mw),
            (400_000, 400_000, 600_000)
        );
        assert_eq!(h.coincidence_factor, Decimal::new(6667, 4));
        assert_eq!(h.headroom, Decimal::new(5, 1));
    }

    /// Seventeen hours (1,020 minutes) at 400 W but one minute at 1 kW: P99.9 is the 1,019th
    /// of the sorted minutes (⌈0.999 × 1020⌉), so the lone spike sets the coincident peak but
    /// not the percentile; P100 takes it.
    #[test]
    fn the_percentile_leaves_out_the_rarest_minutes() {
        let r = readings(1, 17, |_, m| if m == 500 { 1_000_000 } else { 400_000 });
        let p = profiles(r, 17);
        assert_eq!(p.len(), 17);
        let h = headroom(&p, DEFAULT_PERCENTILE).unwrap();
        assert_eq!(h.minutes, 1_020);
        assert_eq!(
            (h.coincident_peak_mw, h.percentile_peak_mw),
            (1_000_000, 400_000)
        );
        // One meter: its own peak is the parts' peak, 1.5 × the percentile's draw.
        assert_eq!(
            (h.parts_peak_mw, h.headroom),
            (1_000_000, Decimal::new(15, 1))
        );
        let all = headroom(&p, Decimal::ONE_HUNDRED).unwrap();
        assert_eq!(
            (all.percentile_peak_mw, all.headroom),
            (1_000_000, Decimal::ZERO)
        );
    }

    /// A meter counts toward the class its minute is in: a GPU that moves from a training
    /// job to an inference job at minute 30 adds to each class only while it is in it.
    #[test]
    fn a_meter_counts_toward_the_class_of_each_minute() {
        let r = readings(1, 1, |_, m| m * 1_000);
        let classes = hour_profiles(&sorted(r), (0, HOUR_US), |_| {
            |minute| {
                Some(if minute < 30 * M {
                    PowerClass::Job(JobKind::Training)
                } else {
                    PowerClass::Job(JobKind::Inference)
                })
            }
        });
        let training = &classes[&(0, PowerClass::Job(JobKind::Training))];
        let inference = &classes[&(0, PowerClass::Job(JobKind::Inference))];
        // The minute starting at 0 is the one whose step ends at minute 1.
        assert_eq!(training.minutes_mw[0], Some(1_000));
        assert_eq!(training.minutes_mw[30], None);
        assert_eq!(training.parts_peak_mw, 30_000);
        assert_eq!(inference.minutes_mw[30], Some(31_000));
        assert_eq!(inference.parts_peak_mw, 60_000);
    }

    /// Two days: the first in antiphase (50 %), the second in phase (0 %); over both, the
    /// parts' peak is still 600 W and P100 the in-phase day's 600 W minute, so 0 %.
    #[test]
    fn each_day_and_the_span_have_their_own_headroom() {
        let anti = |i: i64, m: i64| -> i64 {
            if (m + i) % 2 == 0 {
                300_000
            } else {
                100_000
            }
        };
        let together = |_: i64, m: i64| -> i64 {
            if m % 2 == 0 {
                300_000
            } else {
                100_000
            }
        };
        let class = PowerClass::Job(JobKind::Inference);
        let day = 24 * HOUR_US;
        let mut hours: Vec<(i64, PowerClass, HourProfile)> = Vec::new();
        for (start, wave) in [(0, &anti as &dyn Fn(i64, i64) -> i64), (day, &together)] {
            let r = readings(2, 1, wave)
                .into_iter()
                .map(|(i, t, mw)| (i, t + start, mw))
                .collect();
            for ((h, ()), p) in
                hour_profiles(&sorted(r), (start, start + HOUR_US), |_| |_| Some(()))
            {
                hours.push((h, class, p));
            }
        }
        let d = daily(&hours, Decimal::ONE_HUNDRED);
        assert_eq!(d[&(Some(0), class)].headroom, Decimal::new(5, 1));
        assert_eq!(d[&(Some(day), class)].headroom, Decimal::ZERO);
        assert_eq!(d[&(None, class)].headroom, Decimal::ZERO);
        assert_eq!(d[&(None, class)].minutes, 120);
    }

    /// The definition: per (minute start, meter), the meter's highest reading in it.
    fn minute_peaks(r: &[(i64, i64, i64)], (from, to): (i64, i64)) -> BTreeMap<(i64, i64), i64> {
        let mut out: BTreeMap<(i64, i64), i64> = BTreeMap::new();
        for &(meter, ts, mw) in r.iter().filter(|r| r.1 > from && r.1 <= to) {
            let peak = out.entry(((ts - 1).div_euclid(M) * M, meter)).or_insert(mw);
            *peak = (*peak).max(mw);
        }
        out
    }

    /// Two nodes whose peaks fall in different minutes, then in the same one: the hour's
    /// peak is the coincident minute's sum, not the sum of the two meters' own peaks, which
    /// is the parts' peak. A reading on the hour belongs to the hour it ends.
    #[test]
    fn the_peak_is_the_busiest_minutes_sum_across_meters() {
        let readings = sorted(vec![
            // Minute ending at 1: node 1 peaks alone (the reading at the boundary).
            (1, M, 900),
            (2, M, 100),
            // Minute ending at 2: both high, node 1 twice (its highest counts).
            (1, M + M / 2, 700),
            (1, 2 * M, 800),
            (2, 2 * M, 600),
            // On the next hour: the last minute of this one.
            (2, HOUR_US, 5),
            // Next hour, one reading.
            (1, HOUR_US + M, 50),
            // Outside (from, to]: ignored.
            (1, 0, 10_000),
        ]);
        let p = hour_profiles(&readings, (0, HOUR_US + M), |_| |_| Some(()));
        let (first, next) = (&p[&(0, ())], &p[&(HOUR_US, ())]);
        assert_eq!(
            (first.peak_mw(), first.parts_peak_mw),
            (Some(1_400), 900 + 600)
        );
        assert_eq!(first.minutes_mw[59], Some(5));
        assert_eq!((next.peak_mw(), next.parts_peak_mw), (Some(50), 50));
    }

    proptest::proptest! {
        /// The one-pass profiles equal the definition: each meter's highest reading per
        /// minute (`peaks::minute_peaks`), summed per minute and class, and the parts' peak
        /// the highest minute's sum of the own peaks (per hour and class) of the meters in it.
        #[test]
        fn one_pass_profiles_match_the_definition(
            raw in proptest::collection::vec((0i64..4, 0i64..(2 * HOUR_US + 2 * M), 0i64..5_000), 0..200)
        ) {
            let r = sorted(raw);
            let window = (M / 2, 2 * HOUR_US);
            let class_of = |meter: i64, minute: i64| (meter != 3).then_some((meter + minute / M) % 2);
            let got = hour_profiles(&r, window, |meter| move |minute| class_of(meter, minute));
            let mut want: BTreeMap<(i64, i64), HourProfile> = BTreeMap::new();
            let mut own: BTreeMap<(i64, i64, i64), i64> = BTreeMap::new();
            let mut present: Vec<(i64, i64, i64, usize)> = Vec::new();
            for ((minute, meter), mw) in minute_peaks(&r, window) {
                let Some(c) = class_of(meter, minute) else { continue };
                let hour = minute.div_euclid(HOUR_US) * HOUR_US;
                let p = want.entry((hour, c)).or_insert_with(|| HourProfile {
                    minutes_mw: vec![None; MINUTES_PER_HOUR],
                    parts_peak_mw: 0,
                });
                let i = ((minute - hour) / M) as usize;
                p.minutes_mw[i] = Some(p.minutes_mw[i].unwrap_or(0) + mw);
                let o = own.entry((hour, c, meter)).or_insert(mw);
                *o = (*o).max(mw);
                present.push((hour, c, meter, i));
            }
            let mut sums: BTreeMap<(i64, i64, usize), i64> = BTreeMap::new();
            for (hour, c, meter, i) in present {
                *sums.entry((hour, c, i)).or_default() += own[&(hour, c, meter)];
            }
            for ((hour, c, _), sum) in sums {
                let p = want.get_mut(&(hour, c)).unwrap();
                p.parts_peak_mw = p.parts_peak_mw.max(sum);
            }
            proptest::prop_assert_eq!(got, want);
        }
    }

    /// Two meters that each report half the hour, one after the other, were never there
    /// together: the parts' peak is the larger own peak, not their sum, so they show no
    /// headroom (a class whose GPUs change hands is not over-subscribable by that).
    #[test]
    fn meters_that_are_never_there_together_are_not_provisioned_together() {
        let r = readings(2, 1, |meter, minute| {
            let present = if meter == 0 {
                minute <= 30
            } else {
                minute > 30
            };
            if present {
                1_000
            } else {
                -1
            }
        });
        let r: Vec<_> = r.into_iter().filter(|x| x.2 >= 0).collect();
        let p = &profiles(r, 1)[0];
        assert_eq!((p.peak_mw(), p.parts_peak_mw), (Some(1_000), 1_000));
        let h = headroom([p], DEFAULT_PERCENTILE).unwrap();
        assert_eq!(h.headroom, Decimal::ZERO);
    }

    /// A GPU of a site without node meters is an IT meter and a job's GPU at once: its
    /// minutes count in full toward both classes.
    #[test]
    fn a_meter_may_count_toward_several_classes() {
        let r = readings(1, 1, |_, m| m * 1_000);
        let training = PowerClass::Job(JobKind::Training);
        let classes = hour_profiles(&sorted(r), (0, HOUR_US), |_| |_| [PowerClass::It, training]);
        assert_eq!(classes.len(), 2);
        assert_eq!(classes[&(0, PowerClass::It)], classes[&(0, training)]);
        assert_eq!(classes[&(0, PowerClass::It)].parts_peak_mw, 60_000);
    }

    #[test]
    fn nothing_measured_states_nothing() {
        assert_eq!(headroom(&[], DEFAULT_PERCENTILE), None);
        let idle = profiles(readings(1, 1, |_, _| 0), 1);
        assert_eq!(headroom(&idle, DEFAULT_PERCENTILE), None);
        assert_eq!(nearest_rank(10, Decimal::ZERO), None);
        assert_eq!(nearest_rank(10, Decimal::new(1001, 1)), None);
        assert_eq!(nearest_rank(10, Decimal::ONE), Some(1));
        assert_eq!(nearest_rank(10, Decimal::new(999, 1)), Some(10));
    }

    #[test]
    fn classes_are_spelled_as_the_api_spells_them() {
        for c in [PowerClass::Facility, PowerClass::It]
            .into_iter()
            .chain(JobKind::ALL.map(PowerClass::Job))
        {
            assert_eq!(PowerClass::parse(c.as_str()), Some(c));
        }
        assert_eq!(PowerClass::parse("node"), None);
    }
}
