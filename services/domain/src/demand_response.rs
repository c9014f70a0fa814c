//! Demand response: a grid event asks a site to keep its draw under a cap, or to shed a
//! reduction below its baseline, over a window of whole hours. Afterwards the site's metered
//! energy in the window is set against a baseline computed by a named method, the reduction
//! achieved is credited at the event's price, and the credit is shared among the tenants
//! whose flexible jobs admission moved out of the window, by the energy each moved.
//!
//! Baseline methods (the "X of Y" family US ISOs use; the method is stated on every report):
//! - `weekdays-N` (default `weekdays-10`): per hour of the window, the average of the same
//!   hours on the previous N weekdays that had no event at the site and were fully metered;
//! - `days-N`: the same over the previous N days, weekends included (sites that run alike
//!   every day of the week).
//!
//! A baseline looks back at most [`LOOKBACK_DAYS`]; with fewer qualifying days it is not
//! stated (the report says how many it found) rather than computed from too few.

use crate::split::split;
use chrono::{DateTime, Datelike, Duration, NaiveDate, Utc, Weekday};
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;
use std::collections::{BTreeMap, BTreeSet};

/// How far back a baseline's days are searched.
pub const LOOKBACK_DAYS: i64 = 60;
/// Millijoules per kWh.
const MJ_PER_KWH: i64 = 3_600_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BaselineMethod {
    /// The previous N non-event weekdays.
    Weekdays(u32),
    /// The previous N non-event days.
    Days(u32),
}

/// What a method that is not one says.
pub const BASELINE_METHOD_EXPECTED: &str =
    "weekdays-N or days-N, N from 1 to 30 (default weekdays-10)";

/// Written and read by its label (`weekdays-10`): in the API, and in its `text` column.
impl serde::Serialize for BaselineMethod {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.label())
    }
}

impl<'de> serde::Deserialize<'de> for BaselineMethod {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        BaselineMethod::parse(&s).ok_or_else(|| serde::de::Error::custom(BASELINE_METHOD_EXPECTED))
    }
}

impl crate::input::field::Field for BaselineMethod {
    fn read(v: Option<&serde_json::Value>) -> Result<Self, Vec<crate::input::record::Problem>> {
        let s = <String as crate::input::field::Field>::read(v)?;
        BaselineMethod::parse(&s).map_or_else(
            || crate::input::field::refused(BASELINE_METHOD_EXPECTED),
            Ok,
        )
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for BaselineMethod {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some("^(weekdays|days)-([1-9]|[12][0-9]|30)$"))
            .examples([serde_json::json!("weekdays-10")])
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for BaselineMethod {}

#[cfg(feature = "sqlx")]
impl sqlx::Type<sqlx::Postgres> for BaselineMethod {
    fn type_info() -> sqlx::postgres::PgTypeInfo {
        <&str as sqlx::Type<sqlx::Postgres>>::type_info()
    }
    fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
        <&str as sqlx::Type<sqlx::Postgres>>::compatible(ty)
    }
}

#[cfg(feature = "sqlx")]
impl<'q> sqlx::Encode<'q, sqlx::Postgres> for BaselineMethod {
    fn encode_by_ref(
        &self,
        buf: &mut sqlx::postgres::PgArgumentBuffer,
    ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        <String as sqlx::Encode<sqlx::Postgres>>::encode(self.label(), buf)
    }
}

/// A stored label that is no method is a decode error naming it, not a default.
#[cfg(feature = "sqlx")]
impl<'r> sqlx::Decode<'r, sqlx::Postgres> for BaselineMethod {
    fn decode(value: sqlx::postgres::PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        let s = <&str as sqlx::Decode<sqlx::Postgres>>::decode(value)?;
        BaselineMethod::parse(s).ok_or_else(|| format!("'{s}' is not a baseline method").into())
    }
}

impl Default for BaselineMethod {
    fn default() -> Self {
        BaselineMethod::Weekdays(10)
    }
}

impl BaselineMethod {
    /// `weekdays-N` or `days-N`, N from 1 to 30.
    pub fn parse(s: &str) -> Option<BaselineMethod> {
        let (kind, n) = s.split_once('-')?;
        let n: u32 = n.parse().ok().filter(|n| (1..=30).contains(n))?;
        match kind {
            "weekdays" => Some(BaselineMethod::Weekdays(n)),
            "days" => Some(BaselineMethod::Days(n)),
            _ => None,
        }
    }

    pub fn label(&self) -> String {
        match self {
            BaselineMethod::Weekdays(n) => format!("weekdays-{n}"),
            BaselineMethod::Days(n) => format!("days-{n}"),
        }
    }

    /// The method in words, as reports state it.
    pub fn describe(&self) -> String {
        match self {
            BaselineMethod::Weekdays(n) => format!(
                "the average of the same hours on the previous {n} weekdays without an event"
            ),
            BaselineMethod::Days(n) => {
                format!("the average of the same hours on the previous {n} days without an event")
            }
        }
    }

    fn days(&self) -> u32 {
        match self {
            BaselineMethod::Weekdays(n) | BaselineMethod::Days(n) => *n,
        }
    }

    fn counts(&self, day: NaiveDate) -> bool {
        match self {
            BaselineMethod::Weekdays(_) => !matches!(day.weekday(), Weekday::Sat | Weekday::Sun),
            BaselineMethod::Days(_) => true,
        }
    }
}

/// What the event asks of the site over its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Keep site power at or under this, W.
    CapW(i64),
    /// Draw this much less than the baseline, W (on average over the window).
    ReductionW(i64),
}

/// The baseline of a window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Baseline {
    /// The days averaged (the day each one's window started on), most recent first.
    pub days: Vec<NaiveDate>,
    /// Per hour of the window, the average of those days' same hour, mJ (rounded half up).
    pub hours_mj: Vec<i64>,
    /// The window's baseline energy: the sum over days and hours / days, rounded half up
    /// (once, so it is not the sum of the rounded hours).
    pub total_mj: i64,
}

/// Fewer qualifying days than the method needs within [`LOOKBACK_DAYS`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the baseline needs {wanted} days without an event and fully metered in the {LOOKBACK_DAYS} before; {found} found")]
pub struct TooFewDays {
    pub wanted: u32,
    pub found: usize,
}

/// The baseline of the `hours` hours from `start` (on the hour) from the site's metered
/// energy per hour (`energy`: hour start → mJ) and the days on which the site had an event.
pub fn baseline(
    method: BaselineMethod,
    start: DateTime<Utc>,
    hours: u32,
    energy: &BTreeMap<DateTime<Utc>, i64>,
    event_days: &BTreeSet<NaiveDate>,
) -> Result<Baseline, TooFewDays> {
    let wanted = method.days();
    let mut days = Vec::new();
    let mut sums = vec![0i128; hours as usize];
    for back in 1..=LOOKBACK_DAYS {
        if days.len() == wanted as usize {
            break;
        }
        let from = start - Duration::days(back);
        let day = from.date_naive();
        if !method.counts(day) || event_days.contains(&day) {
            continue;
        }
        let same: Option<Vec<i64>> = (0..hours)
            .map(|h| energy.get(&(from + Duration::hours(i64::from(h)))).copied())
            .collect();
        let Some(same) = same else {
            continue;
        };
        for (s, mj) in sums.iter_mut().zip(same) {
            *s += i128::from(mj);
        }
        days.push(day);
    }
    if days.len() < wanted as usize {
        return Err(TooFewDays {
            wanted,
            found: days.len(),
        });
    }
    let n = days.len() as i128;
    let avg = |sum: i128| i64::try_from((2 * sum + n).div_euclid(2 * n)).unwrap_or(i64::MAX);
    Ok(Baseline {
        days,
        hours_mj: sums.iter().map(|s| avg(*s)).collect(),
        total_mj: avg(sums.iter().sum()),
    })
}

/// What the site did against the event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Metered site energy in the window, mJ.
    pub actual_mj: i64,
    /// Baseline − actual: positive when the site drew less than its baseline.
    pub reduction_mj: i64,
    /// What the event asked to shed, mJ: the reduction × the window, or the baseline above
    /// the cap × the window.
    pub requested_mj: i64,
    /// Whether the site did what was asked: shed at least the requested energy, or (a cap)
    /// stayed at or under it every minute where the peak is known, every hour on average
    /// where it is not.
    pub met: bool,
    /// The reduction credited: what was achieved, never negative.
    pub credited_mj: i64,
    /// `credited_mj` in kWh × the event's price per kWh, to the millionth.
    pub credit: Option<Decimal>,
}

/// The event's outcome from the window's metered energy per hour (`None` for an hour not
/// yet attributed: no outcome is stated until every hour is) and its peak, mW.
pub fn outcome(
    target: Target,
    baseline: &Baseline,
    actual_hours_mj: &[Option<i64>],
    peak_mw: Option<i64>,
    price_per_kwh: Option<Decimal>,
) -> Option<Outcome> {
    let actual: Vec<i64> = actual_hours_mj.iter().copied().collect::<Option<_>>()?;
    let actual_mj: i64 = actual.iter().sum();
    let secs = 3600 * actual.len() as i64;
    let reduction_mj = baseline.total_mj - actual_mj;
    let (requested_mj, met) = match target {
        Target::ReductionW(w) => {
            let asked = w.saturating_mul(secs).saturating_mul(1000);
            (asked, reduction_mj >= asked)
        }
        Target::CapW(w) => {
            let cap_hour_mj = w.saturating_mul(3_600_000);
            let asked = (baseline.total_mj - cap_hour_mj * actual.len() as i64).max(0);
            let met = match peak_mw {
                Some(p) => p <= w.saturating_mul(1000),
                None => actual.iter().all(|mj| *mj <= cap_hour_mj),
            };
            (asked, met)
        }
    };
    let credited_mj = reduction_mj.max(0);
    let credit = price_per_kwh
        .map(|p| (Decimal::from(credited_mj) * p / Decimal::from(MJ_PER_KWH)).round_dp(6));
    Some(Outcome {
        actual_mj,
        reduction_mj,
        requested_mj,
        met,
        credited_mj,
        credit,
    })
}

/// A tenant's part in an event's reduction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contribution {
    pub tenant: String,
    /// The energy admission estimated its deferred jobs would have drawn in the window, mJ.
    pub moved_mj: i64,
    /// Its share of the credited reduction, mJ: the credited reduction split by the energy
    /// moved, never more than it moved.
    pub credited_mj: i64,
    /// Its share of the credit, in proportion.
    pub credit: Option<Decimal>,
}

/// The credited reduction and credit shared by the energy each tenant's deferred jobs moved
/// out of the window (`moved`: tenant → mJ, in a stable order). Where they moved less than was
/// achieved, each keeps what it moved and the rest is the site's own (no tenant's); exact
/// to the mJ and the millionth (largest remainder).
pub fn contributions(outcome: &Outcome, moved: &[(String, i64)]) -> Vec<Contribution> {
    let moved_total: i64 = moved.iter().map(|m| m.1.max(0)).sum();
    let weights: Vec<u128> = moved.iter().map(|m| m.1.max(0) as u128).collect();
    let credited: Vec<i64> = if moved_total >= outcome.credited_mj {
        split(outcome.credited_mj, &weights)
    } else {
        moved.iter().map(|m| m.1.max(0)).collect()
    };
    let credits: Option<Vec<Decimal>> = outcome.credit.map(|c| {
        // Micro-units of the credit, split by the mJ each is credited; the site's own part
        // last, so the parts add up to the whole.
        let micro = (c * Decimal::from(1_000_000)).trunc().to_i64().unwrap_or(0);
        let mut w: Vec<u128> = credited.iter().map(|c| *c as u128).collect();
        w.push((outcome.credited_mj - credited.iter().sum::<i64>()).max(0) as u128);
        split(micro, &w)
            .into_iter()
            .map(|m| Decimal::new(m, 6))
            .collect()
    });
    moved
        .iter()
        .zip(credited)
        .enumerate()
        .map(|(i, ((tenant, moved_mj), credited_mj))| Contribution {
            tenant: tenant.clone(),
            moved_mj: *moved_mj,
            credited_mj,
            credit: credits.as_ref().map(|c| c[i]),
        })
        .collect()
}

/// The mJ a job drawing `draw_w` would have used in the window had it run over
/// `[run_from, run_to)`: its draw over the overlap.
pub fn moved_mj(
    draw_w: i64,
    (run_from, run_to): (DateTime<Utc>, DateTime<Utc>),
    (window_from, window_to): (DateTime<Utc>, DateTime<Utc>),
) -> i64 {
    let from = run_from.max(window_from);
    let to = run_to.min(window_to);
    if to <= from {
        return 0;
    }
    draw_w.saturating_mul((to - from).num_milliseconds())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    /// Wednesday 2026-11-18, 14:00 UTC.
    fn event_start() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 18, 14, 0, 0).unwrap()
    }

    /// Two hours a day from 14:00 for the 20 days before: day `k` back draws
    /// (100 + k) kWh in its first hour and (200 + k) in its second.
    fn history() -> BTreeMap<DateTime<Utc>, i64> {
        let mut e = BTreeMap::new();
        for k in 1..=20i64 {
            let from = event_start() - Duration::days(k);
            e.insert(from, (100 + k) * MJ_PER_KWH);
            e.insert(from + Duration::hours(1), (200 + k) * MJ_PER_KWH);
        }
        e
    }

    #[test]
    fn the_weekday_baseline_averages_the_previous_ten_weekdays_without_an_event() {
        // Back from Wed 18 Nov (k days back): the weekdays are the 17th (k1), 16th (k2),
        // 13th (k5), 12th (k6), 11th (k7), 10th (k8), 9th (k9), 6th (k12), 5th (k13), 4th
        // (k14); the 11th had an event, so the 3rd (k15) comes in instead.
        let events: BTreeSet<NaiveDate> = [NaiveDate::from_ymd_opt(2026, 11, 11).unwrap()]
            .into_iter()
            .collect();
        let b = baseline(
            BaselineMethod::Weekdays(10),
            event_start(),
            2,
            &history(),
            &events,
        )
        .unwrap();
        let ks = [1, 2, 5, 6, 8, 9, 12, 13, 14, 15];
        assert_eq!(b.days.len(), 10);
        assert_eq!(b.days[0], NaiveDate::from_ymd_opt(2026, 11, 17).unwrap());
        assert_eq!(
            *b.days.last().unwrap(),
            NaiveDate::from_ymd_opt(2026, 11, 3).unwrap()
        );
        // Σk = 85: hour 1 averages 100 + 8.5 kWh, hour 2 200 + 8.5.
        assert_eq!(ks.iter().sum::<i64>(), 85);
        assert_eq!(b.hours_mj, [390_600_000_000, 750_600_000_000]);
        assert_eq!(b.total_mj, 317 * MJ_PER_KWH);
    }

    #[test]
    fn a_baseline_with_too_few_days_is_not_stated() {
        let mut e = history();
        e.retain(|t, _| *t > event_start() - Duration::days(6));
        let err = baseline(
            BaselineMethod::Weekdays(10),
            event_start(),
            2,
            &e,
            &BTreeSet::new(),
        )
        .unwrap_err();
        // Days 1–5 back: the 17th, 16th, 13th (weekdays); the 15th and 14th are a weekend.
        assert_eq!((err.wanted, err.found), (10, 3));
        // days-3 takes every day, weekends included.
        let b = baseline(
            BaselineMethod::Days(3),
            event_start(),
            2,
            &e,
            &BTreeSet::new(),
        );
        assert_eq!(
            b.unwrap().total_mj,
            (101 + 102 + 103 + 201 + 202 + 203) * MJ_PER_KWH / 3
        );
    }

    #[test]
    fn the_reduction_is_credited_at_the_price_and_shared_by_the_energy_moved() {
        let b = Baseline {
            days: Vec::new(),
            hours_mj: vec![100 * MJ_PER_KWH, 100 * MJ_PER_KWH],
            total_mj: 200 * MJ_PER_KWH,
        };
        // Drew 70 + 80 kWh: 50 kWh shed; 20 kW asked for 2 h = 40 kWh, so met.
        let o = outcome(
            Target::ReductionW(20_000),
            &b,
            &[Some(70 * MJ_PER_KWH), Some(80 * MJ_PER_KWH)],
            None,
            Some(d("0.30")),
        )
        .unwrap();
        assert_eq!(o.reduction_mj, 50 * MJ_PER_KWH);
        assert_eq!(o.requested_mj, 40 * MJ_PER_KWH);
        assert!(o.met);
        assert_eq!(o.credit, Some(d("15")));
        // Tenants moved 40 and 20 kWh: more than the 50 shed, so 50 split 2:1.
        let c = contributions(
            &o,
            &[("a".into(), 40 * MJ_PER_KWH), ("b".into(), 20 * MJ_PER_KWH)],
        );
        assert_eq!(c[0].credited_mj + c[1].credited_mj, 50 * MJ_PER_KWH);
        assert_eq!(
            (c[0].credited_mj, c[1].credited_mj),
            (120_000_000_000, 60_000_000_000)
        );
        assert_eq!((c[0].credit, c[1].credit), (Some(d("10")), Some(d("5"))));
        // Had they moved only 10 kWh, they keep 10 and the site the rest.
        let c = contributions(&o, &[("a".into(), 10 * MJ_PER_KWH)]);
        assert_eq!(
            (c[0].credited_mj, c[0].credit),
            (10 * MJ_PER_KWH, Some(d("3")))
        );
        // An hour not yet attributed: no outcome yet.
        assert!(outcome(Target::CapW(1), &b, &[Some(1), None], None, None).is_none());
    }

    #[test]
    fn a_cap_is_met_by_the_peak_where_it_is_known() {
        let b = Baseline {
            days: Vec::new(),
            hours_mj: vec![100 * MJ_PER_KWH],
            total_mj: 100 * MJ_PER_KWH,
        };
        let actual = [Some(60 * MJ_PER_KWH)];
        // A 70 kW cap asks the 30 kWh above it; 60 kWh in the hour is under it on average.
        let o = outcome(Target::CapW(70_000), &b, &actual, None, None).unwrap();
        assert_eq!(
            (o.requested_mj, o.met, o.credit),
            (30 * MJ_PER_KWH, true, None)
        );
        // But a minute at 75 kW broke it.
        let o = outcome(Target::CapW(70_000), &b, &actual, Some(75_000_000), None).unwrap();
        assert!(!o.met);
        assert_eq!(o.credited_mj, 40 * MJ_PER_KWH);
    }

    #[test]
    fn methods_are_named_and_parsed_alike() {
        for m in [BaselineMethod::Weekdays(10), BaselineMethod::Days(5)] {
            assert_eq!(BaselineMethod::parse(&m.label()), Some(m));
        }
        for bad in ["weekdays-0", "weekdays-31", "weekday-10", "days", "days-x"] {
            assert_eq!(BaselineMethod::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn moved_energy_is_the_draw_over_the_overlap() {
        let t = event_start();
        let w = (t, t + Duration::hours(2));
        assert_eq!(
            moved_mj(1000, (t - Duration::hours(1), t + Duration::hours(1)), w),
            3_600_000_000
        );
        assert_eq!(
            moved_mj(1000, (t + Duration::hours(3), t + Duration::hours(4)), w),
            0
        );
    }
}
