//! Monthly partitions of the raw `samples` table, created on demand before a write.

use crate::StoreResult;
use chrono::{DateTime, Datelike, NaiveDate, Utc};
use sqlx::{Postgres, Transaction};

/// First day of each month from `from` to `to`, inclusive.
pub fn months(from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<NaiveDate> {
    let mut out = Vec::new();
    let mut m = NaiveDate::from_ymd_opt(from.year(), from.month(), 1).expect("valid month");
    while m <= to.date_naive() {
        out.push(m);
        m = next_month(m);
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

/// Creates the partitions for these months if missing. Serialised by an advisory lock so
/// concurrent ingests of a new month do not race on `CREATE TABLE`.
pub async fn ensure(tx: &mut Transaction<'_, Postgres>, months: &[NaiveDate]) -> StoreResult<()> {
    sqlx::query("SELECT pg_advisory_xact_lock(7301001)")
        .execute(&mut **tx)
        .await?;
    for m in months {
        let name = format!("samples_y{:04}m{:02}", m.year(), m.month());
        let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM pg_class WHERE relname = $1")
            .bind(&name)
            .fetch_optional(&mut **tx)
            .await?;
        if exists.is_some() {
            continue;
        }
        // Identifiers cannot be bound; the name is built from integers only.
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS {name} PARTITION OF samples FOR VALUES FROM ('{}') TO ('{}')",
            m.format("%Y-%m-%d"),
            next_month(*m).format("%Y-%m-%d")
        );
        sqlx::query(&sql).execute(&mut **tx).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn months_span_year_end() {
        let from = Utc.with_ymd_and_hms(2025, 11, 30, 23, 0, 0).unwrap();
        let to = Utc.with_ymd_and_hms(2026, 1, 2, 0, 0, 0).unwrap();
        let m = months(from, to);
        assert_eq!(m.len(), 3);
        assert_eq!(m[2], NaiveDate::from_ymd_opt(2026, 1, 1).unwrap());
    }
}
