//! Token records of inference jobs, idempotent on (job, tenant, start).

use crate::StoreResult;
use chrono::{DateTime, Utc};
use sqlx::PgPool;

#[derive(Debug, Clone)]
pub struct TokenRow {
    /// The job's site.
    pub site_id: i64,
    pub job_id: i64,
    pub tenant_id: Option<i64>,
    pub start_at: DateTime<Utc>,
    pub end_at: DateTime<Utc>,
    pub prompt_tokens: i64,
    pub generated_tokens: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenOutcome {
    pub inserted: u64,
    pub duplicates: u64,
    /// Indexes of records whose key was stored with other counts (the stored ones stand).
    pub conflicts: Vec<usize>,
}

#[tracing::instrument(skip_all, fields(n = rows.len()))]
pub async fn insert(pool: &PgPool, rows: &[TokenRow]) -> StoreResult<TokenOutcome> {
    let mut tx = pool.begin().await?;
    let existing = sqlx::query!(
        r#"WITH input AS (
             SELECT * FROM UNNEST($7::bigint[], $1::bigint[], $2::bigint[], $3::timestamptz[],
                                  $4::timestamptz[], $5::bigint[], $6::bigint[])
                 WITH ORDINALITY AS t(site_id, job_id, tenant_id, start_at, end_at, prompt_tokens,
                                      generated_tokens, idx)
         ), ins AS (
             INSERT INTO token_records (site_id, job_id, tenant_id, start_at, end_at, prompt_tokens,
                                        generated_tokens)
             SELECT site_id, job_id, tenant_id, start_at, end_at, prompt_tokens, generated_tokens
             FROM input
             ON CONFLICT (site_id, job_id, tenant_id, start_at) DO NOTHING
         )
         SELECT (i.idx - 1)::int AS "idx!",
                (r.end_at, r.prompt_tokens, r.generated_tokens)
                    = (i.end_at, i.prompt_tokens, i.generated_tokens) AS "same!"
         FROM input i JOIN token_records r ON r.site_id = i.site_id AND r.job_id = i.job_id
              AND r.tenant_id IS NOT DISTINCT FROM i.tenant_id AND r.start_at = i.start_at"#,
        &rows.iter().map(|r| r.job_id).collect::<Vec<_>>(),
        // Tenant ids may be null (a job's own tenant), which the parameter's check does not allow.
        &rows.iter().map(|r| r.tenant_id).collect::<Vec<_>>() as &[Option<i64>],
        &rows.iter().map(|r| r.start_at).collect::<Vec<_>>(),
        &rows.iter().map(|r| r.end_at).collect::<Vec<_>>(),
        &rows.iter().map(|r| r.prompt_tokens).collect::<Vec<_>>(),
        &rows.iter().map(|r| r.generated_tokens).collect::<Vec<_>>(),
        &rows.iter().map(|r| r.site_id).collect::<Vec<_>>(),
    )
    .fetch_all(&mut *tx)
    .await?;
    let mut out = TokenOutcome::default();
    for r in existing {
        if r.same {
            out.duplicates += 1;
        } else {
            out.conflicts.push(r.idx as usize);
        }
    }
    out.inserted = rows.len() as u64 - out.duplicates - out.conflicts.len() as u64;
    if out.inserted > 0 {
        // Tokens change the split of their jobs' hours, at the job's site.
        sqlx::query!(
            "INSERT INTO dirty_hours (site_id, hour)
             SELECT DISTINCT t.site_id, h
             FROM UNNEST($1::bigint[], $2::timestamptz[], $3::timestamptz[]) AS t(site_id, lo, hi),
             generate_series(date_trunc('hour', t.lo), date_trunc('hour', t.hi), interval '1 hour') h
             ORDER BY 1, 2
             ON CONFLICT (site_id, hour) DO UPDATE SET marked_at = clock_timestamp()",
            &rows.iter().map(|r| r.site_id).collect::<Vec<_>>(),
            &rows.iter().map(|r| r.start_at).collect::<Vec<_>>(),
            &rows.iter().map(|r| r.end_at).collect::<Vec<_>>(),
        )
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(out)
}
