//! Retention of meter data: whole time partitions of `samples` (a step partition with its
//! month of `step_packs`) dropped once older than the policy's days (step records and raw
//! readings apart), never with a DELETE, and never while an hour they could feed is still to
//! be attributed or, when the policy says so, while a month they touch is not closed. The ledger, site hours and statements are never touched.
//!
//! [`decide`] is the rule, pure; [`plan`] gathers what it needs; [`apply`] drops under the
//! partition lock, checking the guards again in the same transaction.

use crate::partitions::{self, Kind, Span};
use crate::StoreResult;
use chrono::{DateTime, Datelike, Duration, NaiveDate, Utc};
use sqlx::PgPool;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Days step records are kept (the default 400: a year and its month close).
    pub steps_days: u32,
    /// Days raw readings are kept.
    pub raw_days: u32,
    /// Keep a partition while any month it touches has no close in force.
    pub keep_unclosed_months: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            steps_days: 400,
            raw_days: 14,
            keep_unclosed_months: true,
        }
    }
}

impl Policy {
    fn days(&self, kind: Kind) -> u32 {
        match kind {
            Kind::Steps => self.steps_days,
            Kind::Raw => self.raw_days,
        }
    }
}

/// What retention does with a partition, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Drop,
    /// Not older than the policy's days.
    Young,
    /// Hours its samples feed (its own, and the hour on either side, whose interpolation
    /// reads its first or last samples) are still to be attributed.
    Dirty {
        hours: i64,
    },
    /// A month it touches has no close in force.
    MonthOpen {
        month: NaiveDate,
    },
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verdict::Drop => f.write_str("drop"),
            Verdict::Young => f.write_str("keep: within retention"),
            Verdict::Dirty { hours } => write!(f, "keep: {hours} hour(s) still to attribute"),
            Verdict::MonthOpen { month } => {
                write!(f, "keep: month {} not closed", month.format("%Y-%m"))
            }
        }
    }
}

/// What a partition's verdict rests on, read from the database.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Guards {
    /// Dirty hours in `[start - 1 h, end + 1 h)`.
    pub dirty_hours: i64,
    /// Months overlapping `[start, end + 1 h)` with no close in force, oldest first.
    pub open_months: Vec<NaiveDate>,
}

/// The rule: a partition goes when all of it is older than the policy's days and no guard
/// holds it.
pub fn decide(span: &Span, policy: &Policy, now: DateTime<Utc>, guards: &Guards) -> Verdict {
    let cutoff = now - Duration::days(i64::from(policy.days(span.kind)));
    if span.end_utc() > cutoff {
        return Verdict::Young;
    }
    if guards.dirty_hours > 0 {
        return Verdict::Dirty {
            hours: guards.dirty_hours,
        };
    }
    if policy.keep_unclosed_months {
        if let Some(month) = guards.open_months.first() {
            return Verdict::MonthOpen { month: *month };
        }
    }
    Verdict::Drop
}

/// Every partition with its verdict, oldest first within each kind.
#[derive(Debug, Clone)]
pub struct Plan {
    pub partitions: Vec<(Span, Verdict)>,
}

impl Plan {
    pub fn to_drop(&self) -> impl Iterator<Item = &Span> {
        self.partitions
            .iter()
            .filter(|(_, v)| *v == Verdict::Drop)
            .map(|(s, _)| s)
    }
}

/// The months overlapping `[from, to)`.
fn months_of(from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<NaiveDate> {
    let mut out = Vec::new();
    let mut m = NaiveDate::from_ymd_opt(from.year(), from.month(), 1).expect("valid month");
    while m.and_hms_opt(0, 0, 0).expect("midnight").and_utc() < to {
        out.push(m);
        m = Span::containing(Kind::Steps, m).end;
    }
    out
}

async fn guards(db: &mut sqlx::PgConnection, span: &Span) -> StoreResult<Guards> {
    let (start, end) = (span.start_utc(), span.end_utc());
    let dirty_hours: i64 = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM dirty_hours WHERE hour >= $1 AND hour < $2"#,
        start - Duration::hours(1),
        end + Duration::hours(1),
    )
    .fetch_one(&mut *db)
    .await?;
    let months = months_of(start, end + Duration::hours(1));
    let closed: Vec<NaiveDate> = sqlx::query_scalar!(
        "SELECT month FROM month_closes WHERE month = ANY($1) AND reopened_at IS NULL",
        &months,
    )
    .fetch_all(&mut *db)
    .await?;
    Ok(Guards {
        dirty_hours,
        open_months: months.into_iter().filter(|m| !closed.contains(m)).collect(),
    })
}

/// What retention would do now.
pub async fn plan(pool: &PgPool, policy: &Policy, now: DateTime<Utc>) -> StoreResult<Plan> {
    let mut partitions = Vec::new();
    let mut conn = pool.acquire().await?;
    for span in partitions::existing(pool).await? {
        let g = guards(&mut conn, &span).await?;
        let verdict = decide(&span, policy, now, &g);
        partitions.push((span, verdict));
    }
    Ok(Plan { partitions })
}

/// Drops what the plan drops, each in its own transaction under the partition lock, after
/// checking its guards again there (an hour marked dirty since the plan keeps it). Returns
/// the partitions dropped.
pub async fn apply(
    pool: &PgPool,
    policy: &Policy,
    now: DateTime<Utc>,
    plan: &Plan,
) -> StoreResult<Vec<Span>> {
    let mut dropped = Vec::new();
    for span in plan.to_drop() {
        let mut tx = pool.begin().await?;
        // A month of step records drops two partitions in this transaction (its records and
        // its packs): on a distributed PostgreSQL, run over one connection per node, as two
        // DDL commands over parallel connections deadlock against each other there
        // ("involved in a distributed deadlock"). A setting of no meaning elsewhere.
        sqlx::query("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
            .execute(&mut *tx)
            .await?;
        sqlx::query!("SELECT pg_advisory_xact_lock(7301001)")
            .execute(&mut *tx)
            .await?;
        // Marks made from here on wait for this transaction (they insert samples into the
        // partition, or read its rows to find neighbours), so the check below is final.
        sqlx::query(&format!(
            "LOCK TABLE {} IN ACCESS EXCLUSIVE MODE",
            span.name
        ))
        .execute(&mut *tx)
        .await?;
        let g = guards(&mut tx, span).await?;
        if decide(span, policy, now, &g) != Verdict::Drop {
            continue;
        }
        // Identifiers cannot be bound; names come from `partitions::existing`, which only
        // returns names it has parsed back to a span.
        sqlx::query(&format!("DROP TABLE {}", span.name))
            .execute(&mut *tx)
            .await?;
        if span.kind == Kind::Steps {
            // The month's packed days go with its step records (the same name, built from
            // the span's integers).
            sqlx::query(&format!(
                "DROP TABLE IF EXISTS {}",
                crate::step_packs::partition_name(span.start)
            ))
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query!(
            "INSERT INTO retention_drops (partition, raw, range_start, range_end)
             VALUES ($1, $2, $3, $4)",
            &span.name,
            span.kind.is_raw(),
            span.start_utc(),
            span.end_utc(),
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        if span.kind == Kind::Steps {
            // The record of which of its days were packed, after the drop (a sharded table's
            // rows are not deleted in the transaction of a distributed DDL): a crash between
            // the two leaves records of days that no longer exist, which nothing reads.
            sqlx::query!(
                "DELETE FROM step_pack_days WHERE day >= $1 AND day < $2",
                span.start,
                span.end
            )
            .execute(pool)
            .await?;
        }
        // The caller reports the whole pass (the worker logs it, the CLI prints it).
        tracing::debug!(partition = %span.name, "retention dropped a partition");
        dropped.push(span.clone());
    }
    Ok(dropped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn span(kind: Kind, y: i32, m: u32, d: u32) -> Span {
        Span::containing(kind, NaiveDate::from_ymd_opt(y, m, d).unwrap())
    }

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 24, 12, 0, 0).unwrap()
    }

    #[test]
    fn raw_days_go_after_their_days_and_steps_after_theirs() {
        let p = Policy::default();
        let clear = Guards::default();
        // 2026-11-09 ends at 11-10 00:00, 14.5 days before now.
        assert_eq!(
            decide(&span(Kind::Raw, 2026, 11, 9), &p, now(), &clear),
            Verdict::Drop
        );
        assert_eq!(
            decide(&span(Kind::Raw, 2026, 11, 10), &p, now(), &clear),
            Verdict::Young
        );
        // A month of steps goes when its end is 400 days old.
        assert_eq!(
            decide(&span(Kind::Steps, 2025, 9, 1), &p, now(), &clear),
            Verdict::Drop
        );
        assert_eq!(
            decide(&span(Kind::Steps, 2025, 10, 1), &p, now(), &clear),
            Verdict::Young
        );
    }

    #[test]
    fn dirty_hours_and_open_months_keep_an_old_partition() {
        let old = span(Kind::Raw, 2026, 10, 31);
        let p = Policy::default();
        let dirty = Guards {
            dirty_hours: 2,
            open_months: vec![],
        };
        assert_eq!(decide(&old, &p, now(), &dirty), Verdict::Dirty { hours: 2 });
        let open = Guards {
            dirty_hours: 0,
            open_months: vec![NaiveDate::from_ymd_opt(2026, 11, 1).unwrap()],
        };
        assert!(matches!(
            decide(&old, &p, now(), &open),
            Verdict::MonthOpen { .. }
        ));
        let lax = Policy {
            keep_unclosed_months: false,
            ..p
        };
        assert_eq!(decide(&old, &lax, now(), &open), Verdict::Drop);
    }

    #[test]
    fn a_last_day_touches_the_next_month_through_its_neighbour_hour() {
        let s = span(Kind::Raw, 2026, 10, 31);
        let months = months_of(s.start_utc(), s.end_utc() + Duration::hours(1));
        assert_eq!(
            months,
            [
                NaiveDate::from_ymd_opt(2026, 10, 1).unwrap(),
                NaiveDate::from_ymd_opt(2026, 11, 1).unwrap()
            ]
        );
    }
}
