//! A site's load as the grid sees it, per day: its peak, how peaky it is against its mean
//! (peak-to-average ratio), how fast it swings (the largest rise and fall within 1 and 15
//! minutes, as grid operators now ask of large loads), and how many minutes it spent above
//! its power envelope. Read from the site's minutes: the facility meters' per-minute draw
//! where it has them, else its IT meters' × static PUE (`headroom` profiles), and its mean
//! from metered energy.

use crate::headroom::{HourProfile, DAY_US, HOUR_US, MINUTES_PER_HOUR};
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;
use std::collections::BTreeMap;

/// What a day's (or any span's) minutes say of a site's load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadShape {
    /// Minutes with a reading.
    pub minutes: usize,
    pub peak_mw: i64,
    /// Mean power from metered energy over the hours measured, mW.
    pub mean_mw: Option<i64>,
    /// Peak / mean, 3 places.
    pub peak_to_average: Option<Decimal>,
    /// The largest rise and fall between two measured minutes at most 1 and 15 minutes
    /// apart, mW (0 when the load never rose, or never fell); `None` when no two minutes
    /// that close were measured (readings 5 minutes apart say nothing of a minute's swing).
    pub rise_1m_mw: Option<i64>,
    pub fall_1m_mw: Option<i64>,
    pub rise_15m_mw: Option<i64>,
    pub fall_15m_mw: Option<i64>,
    /// Minutes above the envelope.
    pub over_envelope: usize,
}

/// An hour's site minutes: the facility profile's where there is one, else the IT profile's
/// × `static_pue`, rounded half away from zero.
pub fn site_minutes(
    facility: Option<&HourProfile>,
    it: Option<&HourProfile>,
    static_pue: Decimal,
) -> Option<Vec<Option<i64>>> {
    if let Some(f) = facility {
        return Some(f.minutes_mw.clone());
    }
    let scaled = |mw: i64| (Decimal::from(mw) * static_pue).round().to_i64();
    Some(it?.minutes_mw.iter().map(|m| m.and_then(scaled)).collect())
}

/// An hour's site peak: its highest site minute ([`site_minutes`]), mW.
pub fn site_peak_mw(
    facility: Option<&HourProfile>,
    it: Option<&HourProfile>,
    static_pue: Decimal,
) -> Option<i64> {
    site_minutes(facility, it, static_pue)?
        .into_iter()
        .flatten()
        .max()
}

/// The shape of `minutes` (in time order, `None` where unmeasured; the swings never span a
/// gap longer than the window), with `mean_mw` from energy, against `envelope_mw`.
pub fn load_shape(
    minutes: &[Option<i64>],
    mean_mw: Option<i64>,
    envelope_mw: i64,
) -> Option<LoadShape> {
    let peak_mw = minutes.iter().flatten().copied().max()?;
    let (rise_1m_mw, fall_1m_mw) = swings(minutes, 1);
    let (rise_15m_mw, fall_15m_mw) = swings(minutes, 15);
    let mean_mw = mean_mw.filter(|m| *m > 0);
    Some(LoadShape {
        minutes: minutes.iter().flatten().count(),
        peak_mw,
        mean_mw,
        peak_to_average: mean_mw.map(|m| {
            (Decimal::from(peak_mw) / Decimal::from(m))
                .round_dp(3)
                .normalize()
        }),
        rise_1m_mw,
        fall_1m_mw,
        rise_15m_mw,
        fall_15m_mw,
        over_envelope: minutes
            .iter()
            .flatten()
            .filter(|m| **m > envelope_mw)
            .count(),
    })
}

/// One site-hour for [`daily`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteHour {
    pub hour_us: i64,
    /// The site's draw per minute ([`site_minutes`]).
    pub minutes_mw: Vec<Option<i64>>,
    /// Metered site energy of the hour.
    pub site_mj: Option<i64>,
}

/// A day of a site's load: its 1,440 minutes in order (`None` where unmeasured) and their
/// shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DayLoad {
    pub minutes_mw: Vec<Option<i64>>,
    pub shape: LoadShape,
}

/// Per UTC day (its start, µs), the load of `hours`, each hour's minutes at their place in
/// the day; the mean is the energy of those hours over their length.
pub fn daily(hours: &[SiteHour], envelope_mw: i64) -> BTreeMap<i64, DayLoad> {
    let mut days: BTreeMap<i64, (Vec<Option<i64>>, i64, i64)> = BTreeMap::new();
    for SiteHour {
        hour_us: hour,
        minutes_mw: minutes,
        site_mj: mj,
    } in hours
    {
        let day = hour.div_euclid(DAY_US) * DAY_US;
        let (all, energy, n) = days
            .entry(day)
            .or_insert_with(|| (vec![None; 24 * MINUTES_PER_HOUR], 0, 0));
        let at = usize::try_from((hour - day) / HOUR_US).unwrap_or(0) * MINUTES_PER_HOUR;
        for (slot, m) in all[at..].iter_mut().zip(minutes) {
            *slot = *m;
        }
        if let Some(mj) = mj {
            *energy += mj;
            *n += 1;
        }
    }
    days.into_iter()
        .filter_map(|(day, (minutes, mj, n))| {
            // mJ over n hours as mW: mJ / (n × 3,600,000 ms) × 1,000.
            let mean = (n > 0).then(|| mj / (n * 3_600));
            let shape = load_shape(&minutes, mean, envelope_mw)?;
            Some((
                day,
                DayLoad {
                    minutes_mw: minutes,
                    shape,
                },
            ))
        })
        .collect()
}

/// The largest rise and fall between measured minutes at most `window` apart, if any two
/// were.
fn swings(minutes: &[Option<i64>], window: usize) -> (Option<i64>, Option<i64>) {
    let mut out: Option<(i64, i64)> = None;
    for (j, later) in minutes.iter().enumerate() {
        let Some(later) = later else { continue };
        for earlier in minutes[j.saturating_sub(window)..j].iter().flatten() {
            let (rise, fall) = out.get_or_insert((0, 0));
            *rise = (*rise).max(later - earlier);
            *fall = (*fall).max(earlier - later);
        }
    }
    (out.map(|o| o.0), out.map(|o| o.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A training run's load: 1 MW, a checkpoint dip to 400 kW for two minutes, then a ramp
    /// back by 200 kW a minute. By hand: the 1-minute fall is 600 kW (1000 → 400), the
    /// largest 1-minute rise 200 kW; within 15 minutes the rise is 400 → 1000 = 600 kW too.
    #[test]
    fn a_checkpoint_dip_falls_at_once_and_ramps_back() {
        let kw = |k: i64| Some(k * 1_000_000);
        let minutes = [
            kw(1000),
            kw(1000),
            kw(400),
            kw(400),
            kw(600),
            kw(800),
            kw(1000),
            kw(1000),
        ];
        let s = load_shape(&minutes, Some(850_000_000), 950_000_000).unwrap();
        assert_eq!(s.peak_mw, 1_000_000_000);
        assert_eq!(
            (s.rise_1m_mw, s.fall_1m_mw),
            (Some(200_000_000), Some(600_000_000))
        );
        assert_eq!(
            (s.rise_15m_mw, s.fall_15m_mw),
            (Some(600_000_000), Some(600_000_000))
        );
        // 1000 / 850 = 1.176…
        assert_eq!(s.peak_to_average, Some(Decimal::new(1176, 3)));
        // Above 950 kW: the four 1 MW minutes.
        assert_eq!((s.minutes, s.over_envelope), (8, 4));
    }

    /// A gap is not a swing: minutes on either side of an unmeasured hour are not compared
    /// within 15 minutes; across a short gap they are; minutes 5 apart say nothing of a
    /// 1-minute swing, and a flat load swings by 0.
    #[test]
    fn swings_do_not_span_longer_gaps_than_their_window() {
        let mut minutes = vec![Some(100); 3];
        minutes.extend([None; 20]);
        minutes.push(Some(900));
        let s = load_shape(&minutes, None, i64::MAX).unwrap();
        assert_eq!((s.rise_15m_mw, s.fall_15m_mw), (Some(0), Some(0)));
        assert_eq!(s.peak_to_average, None);
        let s = load_shape(&[Some(100), None, Some(900)], None, i64::MAX).unwrap();
        assert_eq!((s.rise_1m_mw, s.rise_15m_mw), (None, Some(800)));
        let mut five_apart = vec![None; 16];
        (five_apart[0], five_apart[5], five_apart[10]) = (Some(1), Some(5), Some(2));
        let s = load_shape(&five_apart, None, i64::MAX).unwrap();
        assert_eq!((s.rise_1m_mw, s.fall_1m_mw), (None, None));
        assert_eq!((s.rise_15m_mw, s.fall_15m_mw), (Some(4), Some(3)));
        assert_eq!(load_shape(&[None, None], None, 0), None);
    }

    /// Two hours of one day, at 1 kW and 3 kW, with 7.2 MJ metered in each (2 kW means): the
    /// first hour's minutes sit before the second's, so the step from its last minute into
    /// the next hour's first is a 1-minute rise.
    #[test]
    fn a_day_joins_its_hours_in_order() {
        let hour = 3_600_000_000i64;
        let h = |hour_us, mw, site_mj| SiteHour {
            hour_us,
            minutes_mw: vec![Some(mw); 60],
            site_mj,
        };
        let hours = [
            h(10 * hour, 1_000_000, Some(7_200_000_000)),
            h(11 * hour, 3_000_000, Some(7_200_000_000)),
            // The next day.
            h(24 * hour, 5, None),
        ];
        let d = daily(&hours, 2_000_000);
        let first = &d[&0].shape;
        assert_eq!(d[&0].minutes_mw.len(), 1_440);
        assert_eq!(d[&0].minutes_mw[10 * 60], Some(1_000_000));
        assert_eq!((first.minutes, first.peak_mw), (120, 3_000_000));
        assert_eq!(first.rise_1m_mw, Some(2_000_000));
        // 14.4 MJ over two hours: 2 kW.
        assert_eq!(first.mean_mw, Some(2_000_000));
        assert_eq!(first.peak_to_average, Some(Decimal::new(15, 1)));
        assert_eq!(first.over_envelope, 60);
        assert_eq!(d[&(24 * hour)].shape.mean_mw, None);
    }

    #[test]
    fn the_site_peak_is_the_facility_meters_else_it_times_pue() {
        let pue = Decimal::new(125, 2);
        let p = |mw: i64| HourProfile {
            minutes_mw: vec![Some(mw), None],
            parts_peak_mw: mw,
        };
        assert_eq!(
            site_peak_mw(Some(&p(2_100)), Some(&p(1_600)), pue),
            Some(2_100)
        );
        assert_eq!(
            site_peak_mw(None, Some(&p(1_600_001)), pue),
            Some(2_000_001)
        );
        assert_eq!(site_peak_mw(None, None, pue), None);
    }

    #[test]
    fn site_minutes_are_the_facility_meters_else_it_times_pue() {
        let p = |m: Vec<Option<i64>>| HourProfile {
            minutes_mw: m,
            parts_peak_mw: 0,
        };
        let (f, it) = (p(vec![Some(7), None]), p(vec![Some(1_000), None]));
        let pue = Decimal::new(125, 2);
        assert_eq!(
            site_minutes(Some(&f), Some(&it), pue),
            Some(vec![Some(7), None])
        );
        assert_eq!(
            site_minutes(None, Some(&it), pue),
            Some(vec![Some(1_250), None])
        );
        assert_eq!(site_minutes(None, None, pue), None);
    }
}
