//! The partitions of `samples` (migration 0036), one level by (raw, ts): monthly for step
//! records, daily for raw readings. Created ahead of time by the worker ([`ensure_ahead`]) and, as a fallback,
//! before a write that reaches past them ([`ensure`]); dropped whole by `crate::retention`.

use crate::StoreResult;
use chrono::{DateTime, Datelike, Duration, NaiveDate, Utc};
use sqlx::{PgPool, Postgres, Transaction};

/// Which kind of partition of `samples`: step records or raw readings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Steps,
    Raw,
}

impl Kind {
    pub fn of(raw: bool) -> Kind {
        if raw {
            Kind::Raw
        } else {
            Kind::Steps
        }
    }

    pub fn is_raw(self) -> bool {
        self == Kind::Raw
    }
}

/// One time partition: its table name and the range `[start, end)` it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub kind: Kind,
    pub name: String,
    pub start: NaiveDate,
    pub end: NaiveDate,
}

impl Span {
    /// The partition of `kind` that holds `day`.
    pub fn containing(kind: Kind, day: NaiveDate) -> Span {
        let (start, end) = match kind {
            Kind::Steps => {
                let start = day.with_day(1).expect("every month has a first day");
                (start, next_month(start))
            }
            Kind::Raw => (day, day + Duration::days(1)),
        };
        let name = match kind {
            Kind::Steps => format!("samples_steps_y{:04}m{:02}", start.year(), start.month()),
            Kind::Raw => format!(
                "samples_raw_y{:04}m{:02}d{:02}",
                start.year(),
                start.month(),
                start.day()
            ),
        };
        Span {
            kind,
            name,
            start,
            end,
        }
    }

    pub fn start_utc(&self) -> DateTime<Utc> {
        self.start.and_hms_opt(0, 0, 0).expect("midnight").and_utc()
    }

    pub fn end_utc(&self) -> DateTime<Utc> {
        self.end.and_hms_opt(0, 0, 0).expect("midnight").and_utc()
    }
}

/// Analyzes the partitions covering `[from, to)` that hold data but were never analyzed: a
/// partition filled since autovacuum last looked (it looks once a minute, and a new month's
/// or day's partition can take a whole fleet's push before then) has no statistics, and the
/// planner then guesses the plan of a window's read blind. Measured on a fleet-day's month
/// partition just written (1,280 GPUs): an index scan of the step records in meter order,
/// twice the time of the bitmap scan it chooses once the partition is analyzed. The
/// partitions analyzed.
///
/// Nothing on a distributed PostgreSQL: the coordinator's partitions hold no rows (their
/// shards' statistics are the workers', kept by the workers' autovacuum).
pub async fn analyze_unmeasured(
    pool: &PgPool,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> StoreResult<Vec<String>> {
    let last = to - Duration::microseconds(1);
    let names: Vec<String> = [Kind::Steps, Kind::Raw]
        .into_iter()
        .flat_map(|k| spans(k, from, last))
        .map(|s| s.name)
        .collect();
    // Under a megabyte the blind plan costs nothing worth an ANALYZE.
    let unmeasured = sqlx::query_scalar!(
        r#"SELECT c.relname AS "name!" FROM pg_class c
           WHERE c.relname = ANY($1) AND c.relkind = 'r' AND c.reltuples < 0
             AND pg_relation_size(c.oid) > 1048576
             AND NOT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')
           ORDER BY 1"#,
        &names
    )
    .fetch_all(pool)
    .await?;
    for name in &unmeasured {
        // A name from the catalog that matched one of ours: letters, digits and `_` only.
        sqlx::query(&format!("ANALYZE {name}"))
            .execute(pool)
            .await?;
    }
    Ok(unmeasured)
}

/// The partitions of `kind` covering `from` to `to`, inclusive.
pub fn spans(kind: Kind, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<Span> {
    let mut out = Vec::new();
    let mut day = from.date_naive();
    while day <= to.date_naive() {
        let span = Span::containing(kind, day);
        day = span.end;
        out.push(span);
    }
    out
}

fn next_month(m: NaiveDate) -> NaiveDate {
    if m.month() == 12 {
        NaiveDate::from_ymd_opt(m.year() + 1, 1, 1)
    } else {
        NaiveDate::from_ymd_opt(m.year(), m.month() + 1, 1)
    }
    .expect("valid month")
}

/// How far ahead the worker keeps partitions: the next two months of step records and the
/// next week of raw readings, so ingest at a month's or a day's turn never waits on DDL.
pub fn ahead(now: DateTime<Utc>) -> Vec<Span> {
    let mut out = spans(Kind::Steps, now, now + Duration::days(62));
    out.extend(spans(Kind::Raw, now, now + Duration::days(7)));
    out
}

/// Creates the partitions ahead of `now` that are missing ([`ahead`]).
pub async fn ensure_ahead(pool: &PgPool, now: DateTime<Utc>) -> StoreResult<usize> {
    let mut tx = pool.begin().await?;
    let created = ensure(&mut tx, &ahead(now)).await?;
    tx.commit().await?;
    Ok(created)
}

/// Creates these partitions if missing; returns how many it created. Serialised by an
/// advisory lock so concurrent ingests of a new day do not race on `CREATE TABLE`.
pub async fn ensure(tx: &mut Transaction<'_, Postgres>, spans: &[Span]) -> StoreResult<usize> {
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    let existing: Vec<String> = sqlx::query_scalar!(
        r#"SELECT relname::text AS "name!" FROM pg_class WHERE relname = ANY($1)"#,
        &names as &[&str],
    )
    .fetch_all(&mut **tx)
    .await?;
    let missing: Vec<&Span> = spans
        .iter()
        .filter(|s| !existing.contains(&s.name))
        .collect();
    if missing.is_empty() {
        return Ok(0);
    }
    sqlx::query!("SELECT pg_advisory_xact_lock(7301001)")
        .execute(&mut **tx)
        .await?;
    for s in &missing {
        // Identifiers cannot be bound; the name and bounds are built from integers only.
        let raw = s.kind.is_raw();
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS {} PARTITION OF samples \
             FOR VALUES FROM ({raw}, '{}') TO ({raw}, '{}')",
            s.name,
            s.start.format("%Y-%m-%d"),
            s.end.format("%Y-%m-%d")
        );
        sqlx::query(&sql).execute(&mut **tx).await?;
    }
    Ok(missing.len())
}

/// The partitions that exist, with their ranges read back from their names.
pub async fn existing(pool: &PgPool) -> StoreResult<Vec<Span>> {
    let names: Vec<String> = sqlx::query_scalar!(
        r#"SELECT c.relname::text AS "name!" FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'samples'::regclass
         ORDER BY 1"#,
    )
    .fetch_all(pool)
    .await?;
    Ok(names.iter().filter_map(|n| parse_name(n)).collect())
}

/// The span a partition name stands for, if it is one of ours.
pub fn parse_name(name: &str) -> Option<Span> {
    let num = |s: &str| s.parse::<u32>().ok();
    if let Some(rest) = name.strip_prefix("samples_steps_y") {
        let (y, m) = rest.split_once('m')?;
        let day = NaiveDate::from_ymd_opt(num(y)? as i32, num(m)?, 1)?;
        Some(Span::containing(Kind::Steps, day)).filter(|s| s.name == name)
    } else if let Some(rest) = name.strip_prefix("samples_raw_y") {
        let (y, rest) = rest.split_once('m')?;
        let (m, d) = rest.split_once('d')?;
        let day = NaiveDate::from_ymd_opt(num(y)? as i32, num(m)?, num(d)?)?;
        Some(Span::containing(Kind::Raw, day)).filter(|s| s.name == name)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn step_partitions_are_months_and_span_a_year_end() {
        let from = Utc.with_ymd_and_hms(2025, 11, 30, 23, 0, 0).unwrap();
        let to = Utc.with_ymd_and_hms(2026, 1, 2, 0, 0, 0).unwrap();
        let s = spans(Kind::Steps, from, to);
        let names: Vec<&str> = s.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "samples_steps_y2025m11",
                "samples_steps_y2025m12",
                "samples_steps_y2026m01"
            ]
        );
        assert_eq!(s[1].end, NaiveDate::from_ymd_opt(2026, 1, 1).unwrap());
    }

    #[test]
    fn raw_partitions_are_days() {
        let from = Utc.with_ymd_and_hms(2026, 2, 28, 23, 0, 0).unwrap();
        let s = spans(Kind::Raw, from, from + Duration::hours(2));
        assert_eq!(s.len(), 2);
        assert_eq!(s[1].name, "samples_raw_y2026m03d01");
        assert_eq!(s[1].end, NaiveDate::from_ymd_opt(2026, 3, 2).unwrap());
    }

    #[test]
    fn names_read_back_to_their_spans() {
        for kind in [Kind::Steps, Kind::Raw] {
            let s = Span::containing(kind, NaiveDate::from_ymd_opt(2026, 12, 31).unwrap());
            assert_eq!(parse_name(&s.name), Some(s));
        }
        assert_eq!(parse_name("samples_steps_y2026m13"), None);
        assert_eq!(parse_name("samples_raw_y2026m01d1"), None);
        assert_eq!(parse_name("ledger"), None);
    }

    #[test]
    fn ahead_covers_the_next_month_and_week() {
        let now = Utc.with_ymd_and_hms(2026, 11, 24, 12, 0, 0).unwrap();
        let a = ahead(now);
        assert!(a.iter().any(|s| s.name == "samples_steps_y2027m01"));
        assert!(a.iter().any(|s| s.name == "samples_raw_y2026m12d01"));
        assert!(!a.iter().any(|s| s.name == "samples_raw_y2026m11d23"));
    }
}
