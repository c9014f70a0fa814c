//! Month close's statements: aggregate the ledger into statement entries, write a close,
//! read it back, mark it reopened. The rules of closing and reopening, and the transaction
//! they hold, are the use case's (`wattledger::app::month_close`).
//!
//! The ledger stays the live truth (late data recomputes its hours); a close freezes what a
//! month billed. Adjustments are what the ledger says now about an already closed month,
//! minus everything billed for it so far: they land in the next close, never in the closed
//! statement.

use crate::{Scope, StoreResult};
use chrono::{DateTime, NaiveDate, Utc};
use rust_decimal::Decimal;
use sqlx::{PgConnection, PgPool};
use std::collections::BTreeMap;
use wattledger_domain::chargeback::statement::{DeviceGpuTime, GpuTimePart};
use wattledger_domain::chargeback::{
    self, Amounts, Close, Directory, Entry, Export, Issuer, Line, LineClass, LineKey, Month,
    SiteReconciliation, Statement,
};

/// A month and where its close stands.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct MonthStatus {
    pub month: NaiveDate,
    /// The close in force, if any.
    pub version: Option<i32>,
    pub closed_at: Option<DateTime<Utc>>,
    pub closed_by: Option<String>,
    /// Closes of this month that were reopened.
    pub reopened: i64,
    /// Metered energy of the month, every site.
    pub metered_mj: i64,
}

/// Every month with metered energy or a close, newest first.
pub async fn months(pool: &PgPool) -> StoreResult<Vec<MonthStatus>> {
    Ok(sqlx::query_as!(
        MonthStatus,
        r#"WITH metered AS (
             SELECT (date_trunc('month', hour AT TIME ZONE 'UTC'))::date AS month,
                    sum(site_mj)::bigint AS mj
             FROM site_hours GROUP BY 1
         ), all_months AS (
             SELECT month FROM metered UNION SELECT month FROM month_closes
         )
         SELECT a.month AS "month!", c.version AS "version?", c.closed_at AS "closed_at?",
                c.closed_by AS "closed_by?",
                (SELECT count(*) FROM month_closes r
                 WHERE r.month = a.month AND r.reopened_at IS NOT NULL) AS "reopened!",
                coalesce(m.mj, 0) AS "metered_mj!"
         FROM all_months a
         LEFT JOIN metered m ON m.month = a.month
         LEFT JOIN month_closes c ON c.month = a.month AND c.reopened_at IS NULL
         ORDER BY a.month DESC"#,
    )
    .fetch_all(pool)
    .await?)
}

/// Site-hours up to the end of `month` still waiting for the attribution worker.
pub async fn pending_hours(pool: &PgPool, month: Month) -> StoreResult<i64> {
    Ok(sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM dirty_hours WHERE hour < $1"#,
        month.end(),
    )
    .fetch_one(pool)
    .await?)
}

/// Makes the transaction's reads one snapshot; the transaction's first statement.
pub async fn repeatable_read(conn: &mut PgConnection) -> StoreResult<()> {
    sqlx::query!("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(conn)
        .await?;
    Ok(())
}

/// One close or reopening at a time: what a transaction checked must still hold at commit.
pub async fn lock(conn: &mut PgConnection) -> StoreResult<()> {
    sqlx::query!("LOCK TABLE month_closes IN SHARE ROW EXCLUSIVE MODE")
        .execute(conn)
        .await?;
    Ok(())
}

/// The months whose close is in force, oldest first.
pub async fn closes_in_force(conn: &mut PgConnection) -> StoreResult<Vec<NaiveDate>> {
    Ok(sqlx::query_scalar!(
        "SELECT month FROM month_closes WHERE reopened_at IS NULL ORDER BY month"
    )
    .fetch_all(conn)
    .await?)
}

/// The earliest month before `before` with attributed hours and no close in force among
/// `closed`.
pub async fn earliest_open(
    conn: &mut PgConnection,
    before: DateTime<Utc>,
    closed: &[NaiveDate],
) -> StoreResult<Option<NaiveDate>> {
    Ok(sqlx::query_scalar!(
        "SELECT min((date_trunc('month', hour AT TIME ZONE 'UTC'))::date) FROM site_hours
         WHERE hour < $1
           AND (date_trunc('month', hour AT TIME ZONE 'UTC'))::date <> ALL($2)",
        before,
        closed,
    )
    .fetch_one(conn)
    .await?)
}

/// Site-hours before `before` waiting to be attributed.
pub async fn dirty_before(conn: &mut PgConnection, before: DateTime<Utc>) -> StoreResult<i64> {
    Ok(sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM dirty_hours WHERE hour < $1"#,
        before,
    )
    .fetch_one(conn)
    .await?)
}

/// Ledger rows of `month` with energy but no cost or no carbon: (rows, their mJ).
pub async fn unpriced(conn: &mut PgConnection, month: Month) -> StoreResult<(i64, Decimal)> {
    let r = sqlx::query!(
        r#"SELECT count(*) AS "rows!", sum(total_mj)::numeric AS mj FROM ledger
         WHERE hour >= $1 AND hour < $2 AND (cost IS NULL OR carbon_g IS NULL)
           -- Energy with no amount cannot be billed; no energy (GPU time held in a dark
           -- hour) costs nothing whatever the rate, known or not.
           AND total_mj <> 0"#,
        month.start(),
        month.end(),
    )
    .fetch_one(conn)
    .await?;
    Ok((r.rows, r.mj.unwrap_or_default()))
}

/// The version the next close of `month` takes.
pub async fn next_version(conn: &mut PgConnection, month: Month) -> StoreResult<i32> {
    Ok(sqlx::query_scalar!(
        r#"SELECT coalesce(max(version), 0) + 1 AS "version!" FROM month_closes WHERE month = $1"#,
        month.first_day(),
    )
    .fetch_one(conn)
    .await?)
}

/// Each site's metered energy over `month`, mJ.
pub async fn metered_by_site(
    conn: &mut PgConnection,
    month: Month,
) -> StoreResult<BTreeMap<String, i64>> {
    Ok(sqlx::query!(
        r#"SELECT s.key, sum(h.site_mj)::bigint AS "mj!"
           FROM site_hours h JOIN sites s ON s.id = h.site_id
           WHERE h.hour >= $1 AND h.hour < $2 GROUP BY s.key"#,
        month.start(),
        month.end(),
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(|r| (r.key, r.mj))
    .collect())
}

struct EntryRow {
    tenant: String,
    currency: String,
    site: String,
    class: LineClass,
    model: Option<String>,
    period: NaiveDate,
    energy_mj: i64,
    energy_cost: Decimal,
    gpu_time_cost: Decimal,
    carbon_g: Decimal,
    embodied_g: Decimal,
    prompt_tokens: i64,
    generated_tokens: i64,
    gpu_ms: i64,
    badput_mj: i64,
    carbon_free_mj: i64,
    cfe_mj: i64,
}

/// The [`Amounts`] of a row with the amount columns a ledger aggregate and a statement line
/// share (a macro: `query_as!` rows cannot hold a nested struct).
macro_rules! amounts_of {
    ($r:expr) => {
        Amounts {
            energy_mj: $r.energy_mj,
            energy_cost: $r.energy_cost,
            gpu_time_cost: $r.gpu_time_cost,
            carbon_g: $r.carbon_g,
            embodied_g: $r.embodied_g,
            prompt_tokens: $r.prompt_tokens,
            generated_tokens: $r.generated_tokens,
            gpu_ms: $r.gpu_ms,
            badput_mj: $r.badput_mj,
            carbon_free_mj: $r.carbon_free_mj,
            cfe_mj: $r.cfe_mj,
        }
    };
}

impl EntryRow {
    fn into_entry(self) -> Entry {
        let amounts = amounts_of!(self);
        (
            LineKey {
                tenant: self.tenant,
                currency: self.currency,
                site: self.site,
                class: self.class,
                model: self.model,
                period: Month::of(self.period),
            },
            amounts,
        )
    }
}

/// The ledger of `[from, to)` as statement entries. A job's row is its job kind's line, less
/// its idle share (proportional sites), which is a line of its own with a part of the row's
/// cost and carbon in proportion to energy, rounded to the ledger's scale; the rest stays with
/// the job, so the row's amounts are kept exactly. An idle row (no job) is the platform line.
pub async fn ledger_entries(
    conn: &mut PgConnection,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> StoreResult<Vec<Entry>> {
    let rows = sqlx::query_as!(
        EntryRow,
        r#"SELECT t.key AS "tenant!", s.currency::text AS "currency!", s.key AS "site!",
                c.class AS "class!: LineClass", c.model AS "model?",
                (date_trunc('month', l.hour AT TIME ZONE 'UTC'))::date AS "period!",
                sum(c.mj)::bigint AS "energy_mj!", sum(c.cost) AS "energy_cost!",
                sum(c.gpu_time) AS "gpu_time_cost!", sum(c.carbon) AS "carbon_g!",
                sum(c.embodied) AS "embodied_g!", sum(c.prompt)::bigint AS "prompt_tokens!",
                sum(c.gen)::bigint AS "generated_tokens!", sum(c.gpu_ms)::bigint AS "gpu_ms!",
                sum(c.badput)::bigint AS "badput_mj!", sum(c.cf)::bigint AS "carbon_free_mj!",
                sum(c.cfe)::bigint AS "cfe_mj!"
         FROM ledger l
         JOIN tenants t ON t.id = l.tenant_id
         JOIN sites s ON s.id = l.site_id
         LEFT JOIN models m ON m.id = l.model_id
         LEFT JOIN jobs j ON j.site_id = l.site_id AND j.id = l.job_id
         CROSS JOIN LATERAL (SELECT CASE WHEN l.job_id IS NULL THEN 0 ELSE l.idle_mj END AS mj) i
         CROSS JOIN LATERAL (
             SELECT CASE WHEN l.total_mj = 0 THEN 0
                         ELSE round(coalesce(l.cost, 0) * i.mj / l.total_mj, 6) END AS cost,
                    CASE WHEN l.total_mj = 0 THEN 0
                         ELSE round(coalesce(l.carbon_g, 0) * i.mj / l.total_mj, 3) END AS carbon,
                    -- The idle share's part of the row's carbon-free energy, by energy as
                    -- the hour's was split over its rows.
                    CASE WHEN l.total_mj = 0 THEN 0
                         ELSE round(coalesce(l.carbon_free_mj, 0)::numeric * i.mj / l.total_mj)::bigint
                    END AS cf,
                    CASE WHEN l.carbon_free_mj IS NULL THEN 0 ELSE i.mj END AS cfe
         ) idle
         CROSS JOIN LATERAL (VALUES
             (coalesce(j.kind, 'platform'), m.key, l.total_mj - i.mj,
              coalesce(l.cost, 0) - idle.cost, coalesce(l.gpu_time_cost, 0),
              coalesce(l.carbon_g, 0) - idle.carbon, coalesce(l.embodied_carbon_g, 0),
              l.prompt_tokens, l.generated_tokens, l.gpu_ms, l.badput_mj,
              coalesce(l.carbon_free_mj, 0) - idle.cf,
              CASE WHEN l.carbon_free_mj IS NULL THEN 0 ELSE l.total_mj END - idle.cfe),
             ('idle_share', NULL, i.mj, idle.cost, 0, idle.carbon, 0, 0, 0, 0, 0, idle.cf, idle.cfe)
         ) AS c(class, model, mj, cost, gpu_time, carbon, embodied, prompt, gen, gpu_ms, badput,
                cf, cfe)
         WHERE l.hour >= $1 AND l.hour < $2 AND (c.class <> 'idle_share' OR c.mj <> 0)
         GROUP BY 1, 2, 3, 4, 5, 6"#,
        from,
        to,
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(EntryRow::into_entry).collect())
}

/// The ledger's GPU time of `month` per statement line key and device model (migration
/// 0043): the parts of the month's usage lines. Keyed as [`ledger_entries`] keys the job and
/// platform lines (the idle share carries no GPU time).
pub async fn ledger_gpu_time(
    conn: &mut PgConnection,
    month: Month,
) -> StoreResult<Vec<DeviceGpuTime>> {
    let rows = sqlx::query!(
        r#"SELECT t.key AS "tenant!", s.currency::text AS "currency!", s.key AS "site!",
                coalesce(j.kind, 'platform') AS "class!: LineClass", m.key AS "model?",
                g.device_model AS "device_model?", sum(g.gpu_ms)::bigint AS "gpu_ms!",
                coalesce(sum(g.gpu_time_cost), 0) AS "gpu_time_cost!"
         FROM ledger_gpu_time g
         JOIN tenants t ON t.id = g.tenant_id
         JOIN sites s ON s.id = g.site_id
         LEFT JOIN models m ON m.id = g.model_id
         LEFT JOIN jobs j ON j.site_id = g.site_id AND j.id = g.job_id
         WHERE g.hour >= $1 AND g.hour < $2
         GROUP BY 1, 2, 3, 4, 5, 6"#,
        month.start(),
        month.end(),
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| DeviceGpuTime {
            key: LineKey {
                tenant: r.tenant,
                currency: r.currency,
                site: r.site,
                class: r.class,
                model: r.model,
                period: month,
            },
            device_model: r.device_model,
            gpu_ms: r.gpu_ms,
            gpu_time_cost: r.gpu_time_cost,
        })
        .collect())
}

/// Everything the closes in force billed for these periods of use, by line key.
pub async fn billed_entries(
    conn: &mut PgConnection,
    periods: &[NaiveDate],
) -> StoreResult<Vec<Entry>> {
    let rows = sqlx::query_as!(
        EntryRow,
        r#"SELECT st.tenant_key AS tenant, st.currency::text AS "currency!", sl.site_key AS site,
                sl.class AS "class: LineClass", sl.model_key AS model, sl.period,
                sum(sl.energy_mj)::bigint AS "energy_mj!", sum(sl.energy_cost) AS "energy_cost!",
                sum(sl.gpu_time_cost) AS "gpu_time_cost!", sum(sl.carbon_g) AS "carbon_g!",
                sum(sl.embodied_g) AS "embodied_g!",
                sum(sl.prompt_tokens)::bigint AS "prompt_tokens!",
                sum(sl.generated_tokens)::bigint AS "generated_tokens!",
                sum(sl.gpu_ms)::bigint AS "gpu_ms!", sum(sl.badput_mj)::bigint AS "badput_mj!",
                sum(sl.carbon_free_mj)::bigint AS "carbon_free_mj!",
                sum(sl.cfe_mj)::bigint AS "cfe_mj!"
         FROM statement_lines sl
         JOIN statements st ON st.id = sl.statement_id
         JOIN month_closes mc ON mc.id = st.close_id
         WHERE mc.reopened_at IS NULL AND sl.period = ANY($1)
         GROUP BY 1, 2, 3, 4, 5, 6"#,
        periods,
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(EntryRow::into_entry).collect())
}

/// Every tenant's and site's name, as statements print them.
pub async fn directory(conn: &mut PgConnection) -> StoreResult<Directory> {
    let tenants = sqlx::query!("SELECT key, name FROM tenants")
        .fetch_all(&mut *conn)
        .await?
        .into_iter()
        .map(|r| (r.key, r.name))
        .collect();
    let sites = sqlx::query!("SELECT key, name, grid_region FROM sites")
        .fetch_all(&mut *conn)
        .await?
        .into_iter()
        .map(|r| (r.key, (r.name, r.grid_region)))
        .collect();
    Ok(Directory { tenants, sites })
}

/// Writes a close: its record, each statement with its lines, the site reconciliations, the
/// exports and the audit row. Returns each statement's tenant id, in the close's order.
pub async fn write_close(
    conn: &mut PgConnection,
    close: &Close,
    actor: &str,
    exports: &[Export],
) -> StoreResult<Vec<i64>> {
    let month = close.month.first_day();
    let close_id: i64 = sqlx::query_scalar!(
        "INSERT INTO month_closes (month, version, closed_at, closed_by, issuer_name)
         VALUES ($1, $2, $3, $4, $5) RETURNING id",
        month,
        close.version as i32,
        close.closed_at,
        actor,
        &close.issuer.name,
    )
    .fetch_one(&mut *conn)
    .await?;
    let mut tenants = Vec::with_capacity(close.statements.len());
    for s in &close.statements {
        let tenant_id: i64 =
            sqlx::query_scalar!("SELECT id FROM tenants WHERE key = $1", &s.tenant)
                .fetch_one(&mut *conn)
                .await?;
        let statement_id: i64 = sqlx::query_scalar!(
            "INSERT INTO statements (close_id, tenant_id, tenant_key, tenant_name, currency, number,
                                     billed_cost, energy_kwh, gpu_hours)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
            close_id,
            tenant_id,
            &s.tenant,
            close.directory.tenant_name(&s.tenant),
            &s.currency,
            &s.number,
            s.billed_cost,
            s.energy_kwh,
            s.gpu_hours,
        )
        .fetch_one(&mut *conn)
        .await?;
        let col = |f: fn(&Line) -> Decimal| s.lines.iter().map(f).collect::<Vec<_>>();
        let int = |f: fn(&Line) -> i64| s.lines.iter().map(f).collect::<Vec<_>>();
        sqlx::query!(
            "INSERT INTO statement_lines (statement_id, line_no, period, site_id, site_key, model_key,
                 class, energy_mj, energy_cost, gpu_time_cost, carbon_g, embodied_g, prompt_tokens,
                 generated_tokens, gpu_ms, billed_energy_cost, billed_gpu_time_cost, energy_kwh, gpu_hours,
                 badput_mj, carbon_free_mj, cfe_mj)
             SELECT $1, t.no, t.period, s.id, t.site, t.model, t.class, t.mj, t.cost, t.gpu_time,
                    t.carbon, t.embodied, t.prompt, t.gen, t.gpu_ms, t.billed, t.billed_gpu, t.kwh, t.hours,
                    t.badput, t.cf, t.cfe
             FROM UNNEST($2::int[], $3::date[], $4::text[], $5::text[], $6::text[], $7::bigint[],
                         $8::numeric[], $9::numeric[], $10::numeric[], $11::numeric[], $12::bigint[],
                         $13::bigint[], $14::bigint[], $15::numeric[], $16::numeric[], $17::numeric[],
                         $18::numeric[], $19::bigint[], $20::bigint[], $21::bigint[])
                  AS t(no, period, site, model, class, mj, cost, gpu_time, carbon, embodied, prompt,
                       gen, gpu_ms, billed, billed_gpu, kwh, hours, badput, cf, cfe)
             JOIN sites s ON s.key = t.site",
            statement_id,
            &s.lines.iter().map(|l| l.no as i32).collect::<Vec<_>>(),
            &s.lines.iter().map(|l| l.key.period.first_day()).collect::<Vec<_>>(),
            &s.lines.iter().map(|l| l.key.site.clone()).collect::<Vec<_>>(),
            &s.lines.iter().map(|l| l.key.model.clone()).collect::<Vec<_>>() as &[Option<String>],
            &s.lines.iter().map(|l| l.key.class).collect::<Vec<_>>() as &[LineClass],
            &int(|l| l.amounts.energy_mj),
            &col(|l| l.amounts.energy_cost),
            &col(|l| l.amounts.gpu_time_cost),
            &col(|l| l.amounts.carbon_g),
            &col(|l| l.amounts.embodied_g),
            &int(|l| l.amounts.prompt_tokens),
            &int(|l| l.amounts.generated_tokens),
            &int(|l| l.amounts.gpu_ms),
            &col(|l| l.billed_energy_cost),
            &col(|l| l.billed_gpu_time_cost),
            &col(|l| l.energy_kwh),
            &col(|l| l.gpu_hours),
            &int(|l| l.amounts.badput_mj),
            &int(|l| l.amounts.carbon_free_mj),
            &int(|l| l.amounts.cfe_mj),
        )
        .execute(&mut *conn)
        .await?;
        write_gpu_time(conn, statement_id, s).await?;
        tenants.push(tenant_id);
    }
    for r in &close.reconciliation {
        let (name, region) = close.directory.site(&r.site);
        sqlx::query!(
            "INSERT INTO site_reconciliations (close_id, site_id, site_key, site_name, grid_region,
                 metered_mj, attributed_mj, unallocated_mj, adjustments_mj)
             SELECT $1, id, key, $3, $4, $5, $6, $7, $8 FROM sites WHERE key = $2",
            close_id,
            &r.site,
            name,
            region,
            r.metered_mj,
            r.attributed_mj,
            r.unallocated_mj,
            r.adjustments_mj,
        )
        .execute(&mut *conn)
        .await?;
    }
    for e in exports {
        sqlx::query!(
            "INSERT INTO chargeback_exports (close_id, format, file_name, content, sha256)
             VALUES ($1, $2, $3, $4, $5)",
            close_id,
            e.format,
            &e.file_name,
            &e.content,
            &e.sha256,
        )
        .execute(&mut *conn)
        .await?;
    }
    sqlx::query!(
        "INSERT INTO chargeback_audit (month, action, actor, version) VALUES ($1, 'closed', $2, $3)",
        month,
        actor,
        close.version as i32,
    )
    .execute(&mut *conn)
    .await?;
    Ok(tenants)
}

/// A statement's lines' GPU time by device model (migration 0043), as the close froze it.
async fn write_gpu_time(
    conn: &mut PgConnection,
    statement_id: i64,
    s: &Statement,
) -> StoreResult<()> {
    let parts: Vec<(&Line, &GpuTimePart)> = s
        .lines
        .iter()
        .flat_map(|l| l.gpu_time.iter().map(move |p| (l, p)))
        .collect();
    if parts.is_empty() {
        return Ok(());
    }
    let col = |f: fn(&GpuTimePart) -> Decimal| parts.iter().map(|p| f(p.1)).collect::<Vec<_>>();
    sqlx::query!(
        "INSERT INTO statement_line_gpu_time (statement_id, line_no, device_model, gpu_ms,
             gpu_time_cost, billed_gpu_time_cost, gpu_hours)
         SELECT $1, * FROM UNNEST($2::int[], $3::text[], $4::bigint[], $5::numeric[],
                                  $6::numeric[], $7::numeric[])",
        statement_id,
        &parts.iter().map(|p| p.0.no as i32).collect::<Vec<_>>(),
        &parts
            .iter()
            .map(|p| p.1.device_model.clone())
            .collect::<Vec<_>>() as &[Option<String>],
        &parts.iter().map(|p| p.1.gpu_ms).collect::<Vec<_>>(),
        &col(|p| p.gpu_time_cost),
        &col(|p| p.billed_gpu_time_cost),
        &col(|p| p.gpu_hours),
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The webhook event a close sends each tenant with a statement.
pub const CLOSED_EVENT: &str = "chargeback.closed";

/// The latest month after `month` with a close in force.
pub async fn later_close(conn: &mut PgConnection, month: Month) -> StoreResult<Option<NaiveDate>> {
    Ok(sqlx::query_scalar!(
        "SELECT max(month) FROM month_closes WHERE reopened_at IS NULL AND month > $1",
        month.first_day(),
    )
    .fetch_one(conn)
    .await?)
}

/// Marks the close in force of `month` reopened, with its audit row; the version reopened,
/// or none when no close of `month` is in force.
pub async fn mark_reopened(
    conn: &mut PgConnection,
    month: Month,
    actor: &str,
    reason: &str,
    now: DateTime<Utc>,
) -> StoreResult<Option<i32>> {
    let version: Option<i32> = sqlx::query_scalar!(
        "UPDATE month_closes SET reopened_at = $2, reopened_by = $3, reopen_reason = $4
         WHERE month = $1 AND reopened_at IS NULL RETURNING version",
        month.first_day(),
        now,
        actor,
        reason,
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(version) = version else {
        return Ok(None);
    };
    sqlx::query!(
        "INSERT INTO chargeback_audit (month, action, actor, reason, version, at)
         VALUES ($1, 'reopened', $2, $3, $4, $5)",
        month.first_day(),
        actor,
        reason,
        version,
        now,
    )
    .execute(conn)
    .await?;
    Ok(Some(version))
}

/// One audit entry.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AuditEntry {
    pub action: String,
    pub actor: String,
    pub reason: Option<String>,
    pub version: i32,
    pub at: DateTime<Utc>,
}

pub async fn audit(pool: &PgPool, month: Month) -> StoreResult<Vec<AuditEntry>> {
    Ok(sqlx::query_as!(
        AuditEntry,
        "SELECT action, actor, reason, version, at FROM chargeback_audit WHERE month = $1 ORDER BY id",
        month.first_day(),
    )
    .fetch_all(pool)
    .await?)
}

struct CloseRow {
    id: i64,
    version: i32,
    closed_at: DateTime<Utc>,
    issuer_name: String,
}

struct StatementRow {
    id: i64,
    tenant_key: String,
    tenant_name: String,
    currency: String,
    number: String,
    billed_cost: Decimal,
    energy_kwh: Decimal,
    gpu_hours: Decimal,
}

/// The close in force of `month` as it was frozen, with the statements `scope` may read. A
/// tenant sees its own statements and no site reconciliation; `None` if the month is not
/// closed.
pub async fn load(pool: &PgPool, month: Month, scope: &Scope) -> StoreResult<Option<Close>> {
    let Some(c) = sqlx::query_as!(
        CloseRow,
        "SELECT id, version, closed_at, issuer_name FROM month_closes
         WHERE month = $1 AND reopened_at IS NULL",
        month.first_day(),
    )
    .fetch_optional(pool)
    .await?
    else {
        return Ok(None);
    };
    let statements = sqlx::query_as!(
        StatementRow,
        r#"SELECT id, tenant_key, tenant_name, currency::text AS "currency!", number, billed_cost,
                energy_kwh, gpu_hours
         FROM statements WHERE close_id = $1 AND ($2::bigint IS NULL OR tenant_id = $2)
         ORDER BY tenant_key, currency"#,
        c.id,
        scope.tenant(),
    )
    .fetch_all(pool)
    .await?;
    let ids: Vec<i64> = statements.iter().map(|s| s.id).collect();
    let lines = sqlx::query!(
        r#"SELECT statement_id, line_no, period, site_key, model_key, class AS "class: LineClass", energy_mj, energy_cost,
                gpu_time_cost, carbon_g, embodied_g, prompt_tokens, generated_tokens, gpu_ms,
                billed_energy_cost, billed_gpu_time_cost, energy_kwh, gpu_hours, badput_mj,
                carbon_free_mj, cfe_mj
         FROM statement_lines WHERE statement_id = ANY($1) ORDER BY statement_id, line_no"#,
        &ids,
    )
    .fetch_all(pool)
    .await?;
    // In the order a close builds them (device model by byte, the unreported one first).
    let mut parts: BTreeMap<(i64, i32), Vec<GpuTimePart>> = BTreeMap::new();
    for p in sqlx::query!(
        "SELECT statement_id, line_no, device_model, gpu_ms, gpu_time_cost, billed_gpu_time_cost,
                gpu_hours
         FROM statement_line_gpu_time WHERE statement_id = ANY($1)
         ORDER BY statement_id, line_no, device_model COLLATE \"C\" NULLS FIRST",
        &ids,
    )
    .fetch_all(pool)
    .await?
    {
        parts
            .entry((p.statement_id, p.line_no))
            .or_default()
            .push(GpuTimePart {
                device_model: p.device_model,
                gpu_ms: p.gpu_ms,
                gpu_time_cost: p.gpu_time_cost,
                billed_gpu_time_cost: p.billed_gpu_time_cost,
                gpu_hours: p.gpu_hours,
            });
    }
    let sites = sqlx::query!(
        "SELECT site_key, site_name, grid_region, metered_mj, attributed_mj, unallocated_mj,
                adjustments_mj
         FROM site_reconciliations WHERE close_id = $1 ORDER BY site_key",
        c.id,
    )
    .fetch_all(pool)
    .await?;
    let mut directory = Directory::default();
    let mut by_id: BTreeMap<i64, Statement> = BTreeMap::new();
    for s in statements {
        directory
            .tenants
            .insert(s.tenant_key.clone(), s.tenant_name);
        by_id.insert(
            s.id,
            Statement {
                number: s.number,
                tenant: s.tenant_key,
                currency: s.currency,
                lines: Vec::new(),
                total: Amounts::default(),
                billed_cost: s.billed_cost,
                energy_kwh: s.energy_kwh,
                gpu_hours: s.gpu_hours,
            },
        );
    }
    for l in lines {
        let Some(s) = by_id.get_mut(&l.statement_id) else {
            continue;
        };
        let amounts = amounts_of!(l);
        s.total = s.total + amounts;
        s.lines.push(Line {
            no: l.line_no as u32,
            key: LineKey {
                tenant: s.tenant.clone(),
                currency: s.currency.clone(),
                site: l.site_key,
                class: l.class,
                model: l.model_key,
                period: Month::of(l.period),
            },
            amounts,
            billed_energy_cost: l.billed_energy_cost,
            billed_gpu_time_cost: l.billed_gpu_time_cost,
            energy_kwh: l.energy_kwh,
            gpu_hours: l.gpu_hours,
            gpu_time: parts
                .remove(&(l.statement_id, l.line_no))
                .unwrap_or_default(),
        });
    }
    let mut reconciliation = Vec::new();
    for r in sites {
        directory
            .sites
            .insert(r.site_key.clone(), (r.site_name, r.grid_region));
        if scope.tenant().is_none() {
            reconciliation.push(SiteReconciliation {
                site: r.site_key,
                metered_mj: r.metered_mj,
                attributed_mj: r.attributed_mj,
                unallocated_mj: r.unallocated_mj,
                adjustments_mj: r.adjustments_mj,
            });
        }
    }
    Ok(Some(Close {
        month,
        version: c.version as u32,
        closed_at: c.closed_at,
        issuer: Issuer {
            name: c.issuer_name,
        },
        statements: by_id.into_values().collect(),
        reconciliation,
        directory,
    }))
}

/// An export file of the close in force, as written at close, with that close's version.
/// It holds every tenant's lines: a tenant scope finds none.
pub async fn export(
    pool: &PgPool,
    scope: &Scope,
    month: Month,
    format: &str,
) -> StoreResult<Option<(u32, Export)>> {
    if *scope != Scope::All {
        return Ok(None);
    }
    let row = sqlx::query!(
        "SELECT c.version, e.format, e.file_name, e.content, e.sha256 FROM chargeback_exports e
         JOIN month_closes c ON c.id = e.close_id
         WHERE c.month = $1 AND c.reopened_at IS NULL AND e.format = $2",
        month.first_day(),
        format,
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.and_then(|r| {
        let (version, format, file_name, content, sha256) =
            (r.version, r.format, r.file_name, r.content, r.sha256);
        let format = chargeback::FORMATS.into_iter().find(|f| *f == format)?;
        Some((
            version as u32,
            Export {
                format,
                file_name,
                content,
                sha256,
            },
        ))
    }))
}
