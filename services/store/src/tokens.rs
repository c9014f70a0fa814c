//! Token records of inference jobs, idempotent on (job, tenant, start).

use crate::StoreResult;
use chrono::{DateTime, Utc};
use sqlx::PgConnection;

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

/// A record whose key was already stored: its index in the batch, and whether the stored
/// one has the same counts (a resend) or others (a conflict).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    pub index: usize,
    pub same: bool,
}

/// Inserts the records not yet stored (keyed by job, tenant and start); every record whose
/// key was already stored, as it was before.
pub async fn insert(conn: &mut PgConnection, rows: &[TokenRow]) -> StoreResult<Vec<Stored>> {
    // The stored records are read first, then the others inserted: two statements, not one
    // with a writing CTE, whose snapshot a distributed PostgreSQL does not keep (it runs the
    // CTE's insert before the join that reads, and every record would look stored). A record
    // of a tenant and one of the job's own tenant (none) are matched apart, each on the whole
    // unique key: matched in one join by `IS NOT DISTINCT FROM`, which no index serves, each
    // record read every stored record of its job (a serving job has thousands; about 1 s per
    // batch of 10,000 at 1,280 GPUs × 30 days).
    let existing = sqlx::query!(
        r#"WITH input AS (
             SELECT * FROM UNNEST($7::bigint[], $1::bigint[], $2::bigint[], $3::timestamptz[],
                                  $4::timestamptz[], $5::bigint[], $6::bigint[])
                 WITH ORDINALITY AS t(site_id, job_id, tenant_id, start_at, end_at, prompt_tokens,
                                      generated_tokens, idx)
         )
         SELECT (i.idx - 1)::int AS "idx!",
                (r.end_at, r.prompt_tokens, r.generated_tokens)
                    = (i.end_at, i.prompt_tokens, i.generated_tokens) AS "same!"
         FROM input i JOIN token_records r ON r.site_id = i.site_id AND r.job_id = i.job_id
              AND r.tenant_id = i.tenant_id AND r.start_at = i.start_at
         UNION ALL
         SELECT (i.idx - 1)::int,
                (r.end_at, r.prompt_tokens, r.generated_tokens)
                    = (i.end_at, i.prompt_tokens, i.generated_tokens)
         FROM input i JOIN token_records r ON r.site_id = i.site_id AND r.job_id = i.job_id
              AND r.tenant_id IS NULL AND r.start_at = i.start_at
         WHERE i.tenant_id IS NULL"#,
        &rows.iter().map(|r| r.job_id).collect::<Vec<_>>(),
        // Tenant ids may be null (a job's own tenant), which the parameter's check does not allow.
        &rows.iter().map(|r| r.tenant_id).collect::<Vec<_>>() as &[Option<i64>],
        &rows.iter().map(|r| r.start_at).collect::<Vec<_>>(),
        &rows.iter().map(|r| r.end_at).collect::<Vec<_>>(),
        &rows.iter().map(|r| r.prompt_tokens).collect::<Vec<_>>(),
        &rows.iter().map(|r| r.generated_tokens).collect::<Vec<_>>(),
        &rows.iter().map(|r| r.site_id).collect::<Vec<_>>(),
    )
    .fetch_all(&mut *conn)
    .await?;
    let stored: std::collections::HashSet<usize> =
        existing.iter().map(|e| e.idx as usize).collect();
    let new: Vec<&TokenRow> = rows
        .iter()
        .enumerate()
        .filter(|(i, _)| !stored.contains(i))
        .map(|(_, r)| r)
        .collect();
    if !new.is_empty() {
        sqlx::query!(
        "INSERT INTO token_records (site_id, job_id, tenant_id, start_at, end_at, prompt_tokens,
                                    generated_tokens)
         SELECT * FROM UNNEST($7::bigint[], $1::bigint[], $2::bigint[], $3::timestamptz[],
                              $4::timestamptz[], $5::bigint[], $6::bigint[])
         ON CONFLICT (site_id, job_id, tenant_id, start_at) DO NOTHING",
        &new.iter().map(|r| r.job_id).collect::<Vec<_>>(),
        &new.iter().map(|r| r.tenant_id).collect::<Vec<_>>() as &[Option<i64>],
        &new.iter().map(|r| r.start_at).collect::<Vec<_>>(),
        &new.iter().map(|r| r.end_at).collect::<Vec<_>>(),
        &new.iter().map(|r| r.prompt_tokens).collect::<Vec<_>>(),
        &new.iter().map(|r| r.generated_tokens).collect::<Vec<_>>(),
        &new.iter().map(|r| r.site_id).collect::<Vec<_>>(),
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(existing
        .into_iter()
        .map(|r| Stored {
            index: r.idx as usize,
            same: r.same,
        })
        .collect())
}
