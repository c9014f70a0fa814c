//! The finance pages: every month with its close status, and a closed month's per-tenant
//! chargeback, site reconciliation and export downloads (admin and finance).

use super::format::{count, energy, grouped};
use super::table::{Column, Header, Key, Sort};
use super::{html, Nav, PageError, Session};
use crate::http::chargeback::{closed_export, export_version, is_export_format};
use crate::state::AppState;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use rust_decimal::Decimal;
use wattledger_domain::chargeback::focus::Version as FocusVersion;
use wattledger_domain::chargeback::Month;
use wattledger_store::chargeback as store;
use wattledger_store::Scope;

pub struct MonthRow {
    pub month: String,
    pub state: String,
    pub closed: bool,
    pub version: String,
    pub closed_at: String,
    pub energy: String,
    pub reopened: i64,
}

const MONTH_COLUMNS: [Column; 4] = [
    Column::text("month", "Month"),
    Column::text("status", "Status"),
    Column::num("metered", "Metered"),
    Column::num("closed", "Closed"),
];

const SITE_COLUMNS: [Column; 6] = [
    Column::text("site", "Site"),
    Column::num("metered", "Metered"),
    Column::num("attributed", "Attributed"),
    Column::num("unallocated", "Unallocated"),
    Column::num("adjustments", "Adjustments"),
    Column::text("balance", "Balance"),
];

#[derive(serde::Deserialize)]
pub struct MonthsView {
    sort: Option<String>,
}

#[derive(Template)]
#[template(path = "finance.html")]
struct MonthsPage {
    nav: Nav,
    headers: Vec<Header>,
    months: Vec<MonthRow>,
}

fn require_finance(session: &Session) -> Result<(), PageError> {
    if session.is_finance() {
        Ok(())
    } else if session.tenant.is_some() {
        // A tenant does not learn that the page exists.
        Err(PageError::NotFound)
    } else {
        Err(PageError::Forbidden)
    }
}

pub async fn months(
    State(state): State<AppState>,
    session: Session,
    Query(view): Query<MonthsView>,
) -> Result<Response, PageError> {
    require_finance(&session)?;
    let sort = Sort::parse("sort", view.sort.as_deref(), &MONTH_COLUMNS, 0);
    // Newest month first unless asked otherwise.
    let sort = if view.sort.is_none() {
        Sort {
            descending: true,
            ..sort
        }
    } else {
        sort
    };
    let mut months: Vec<(Vec<Key>, MonthRow)> = store::months(&state.pool)
        .await?
        .into_iter()
        .map(|m| {
            let keys = vec![
                Key::Text(m.month.to_string()),
                Key::Text(
                    if m.version.is_some() {
                        "closed"
                    } else {
                        "open"
                    }
                    .into(),
                ),
                Key::Num(Decimal::from(m.metered_mj)),
                Key::Num(Decimal::from(m.closed_at.map_or(0, |t| t.timestamp()))),
            ];
            (keys, m)
        })
        .map(|(keys, m)| {
            (
                keys,
                MonthRow {
                    month: Month::of(m.month).to_string(),
                    state: if m.version.is_some() {
                        "Closed"
                    } else {
                        "Open"
                    }
                    .into(),
                    closed: m.version.is_some(),
                    version: m.version.map(|v| format!("v{v}")).unwrap_or_default(),
                    closed_at: m
                        .closed_at
                        .map(|t| {
                            format!(
                                "{} by {}",
                                t.format("%b %-d, %Y"),
                                m.closed_by.unwrap_or_default()
                            )
                        })
                        .unwrap_or_default(),
                    energy: energy(m.metered_mj),
                    reopened: m.reopened,
                },
            )
        })
        .collect();
    sort.apply(&mut months);
    Ok(html(
        MonthsPage {
            nav: Nav::new(&session, "/finance"),
            headers: sort.headers(&MONTH_COLUMNS, ""),
            months: months.into_iter().map(|m| m.1).collect(),
        }
        .render(),
    ))
}

pub struct StatementRow {
    pub number: String,
    pub tenant: String,
    pub tenant_name: String,
    pub currency: String,
    pub lines: usize,
    pub adjustments: usize,
    pub energy: String,
    pub billed: String,
    pub carbon: String,
    pub tokens: String,
    pub gpu_hours: String,
}

pub struct SiteRow {
    pub site: String,
    pub metered: String,
    pub attributed: String,
    pub unallocated: String,
    pub adjustments: String,
    pub balanced: bool,
}

pub struct ExportRow {
    pub label: String,
    pub href: String,
    pub file_name: String,
    pub sha256: String,
}

const STATEMENT_COLUMNS: [Column; 8] = [
    Column::text("tenant", "Tenant"),
    Column::text("statement", "Statement"),
    Column::num("lines", "Lines"),
    Column::num("energy", "Energy"),
    Column::num("billed", "Billed"),
    Column::num("carbon", "kgCO2e"),
    Column::num("tokens", "Tokens"),
    Column::num("gpu_hours", "GPU-hours"),
];

#[derive(serde::Deserialize)]
pub struct MonthView {
    sort: Option<String>,
    rsort: Option<String>,
}

#[derive(Template)]
#[template(path = "finance_month.html")]
struct MonthPage {
    nav: Nav,
    headers: Vec<Header>,
    site_headers: Vec<Header>,
    month: String,
    version: u32,
    closed_at: String,
    issuer: String,
    statements: Vec<StatementRow>,
    totals: Vec<(String, String)>,
    sites: Vec<SiteRow>,
    exports: Vec<ExportRow>,
}

pub async fn month(
    State(state): State<AppState>,
    session: Session,
    Path(month): Path<String>,
    Query(view): Query<MonthView>,
) -> Result<Response, PageError> {
    require_finance(&session)?;
    let month: Month = month.parse().map_err(|_| PageError::NotFound)?;
    let close = store::load(&state.pool, month, &Scope::All)
        .await?
        .ok_or(PageError::NotFound)?;
    let mut totals: std::collections::BTreeMap<String, Decimal> = Default::default();
    let sort = Sort::parse("sort", view.sort.as_deref(), &STATEMENT_COLUMNS, 0);
    let mut statements: Vec<(Vec<Key>, StatementRow)> = close
        .statements
        .iter()
        .map(|s| {
            *totals.entry(s.currency.clone()).or_default() += s.billed_cost;
            let tokens = s.total.prompt_tokens + s.total.generated_tokens;
            (
                vec![
                    Key::Text(close.directory.tenant_name(&s.tenant)),
                    Key::Text(s.number.clone()),
                    Key::Num(Decimal::from(s.lines.len() as i64)),
                    Key::Num(Decimal::from(s.total.energy_mj)),
                    Key::Num(s.billed_cost),
                    Key::Num(s.total.carbon_g),
                    Key::Num(Decimal::from(tokens)),
                    Key::Num(s.gpu_hours),
                ],
                StatementRow {
                    number: s.number.clone(),
                    tenant: s.tenant.clone(),
                    tenant_name: close.directory.tenant_name(&s.tenant),
                    currency: s.currency.clone(),
                    lines: s.lines.len(),
                    adjustments: s.adjustments(month).count(),
                    energy: energy(s.total.energy_mj),
                    billed: grouped(s.billed_cost, 2),
                    carbon: grouped(s.total.carbon_g / Decimal::ONE_THOUSAND, 1),
                    tokens: count(tokens),
                    gpu_hours: grouped(s.gpu_hours, 1),
                },
            )
        })
        .collect();
    sort.apply(&mut statements);
    let statements = statements.into_iter().map(|s| s.1).collect();
    let site_sort = Sort::parse("rsort", view.rsort.as_deref(), &SITE_COLUMNS, 0);
    let mut sites: Vec<(Vec<Key>, SiteRow)> = close
        .reconciliation
        .iter()
        .map(|r| {
            let n = |v: i64| Key::Num(Decimal::from(v));
            (
                vec![
                    Key::Text(r.site.clone()),
                    n(r.metered_mj),
                    n(r.attributed_mj),
                    n(r.unallocated_mj),
                    n(r.adjustments_mj),
                    Key::Text(r.balances().to_string()),
                ],
                SiteRow {
                    site: format!("{} ({})", close.directory.site(&r.site).0, r.site),
                    metered: energy(r.metered_mj),
                    attributed: energy(r.attributed_mj),
                    unallocated: energy(r.unallocated_mj),
                    adjustments: energy(r.adjustments_mj),
                    balanced: r.balances(),
                },
            )
        })
        .collect();
    site_sort.apply(&mut sites);
    let sites = sites.into_iter().map(|s| s.1).collect();
    let keep = |name: &str, value: &Option<String>| {
        value
            .as_ref()
            .map(|v| format!("{name}={}", super::segment(v)))
            .unwrap_or_default()
    };
    let mut exports = Vec::new();
    // FOCUS 1.4 first: the ratified version finance tools read now; 1.2 stays for the tools
    // that have not moved yet.
    for (format, version, label) in [
        ("csv", None, "Statement CSV"),
        ("focus", Some(FocusVersion::V1_4), "FOCUS 1.4 CSV"),
        (
            "focus",
            Some(FocusVersion::V1_2),
            "FOCUS 1.2 CSV (for tools not yet on 1.4)",
        ),
        ("json", None, "JSON"),
        (
            "prices",
            None,
            "Price list CSV (the SKU prices FOCUS 1.4 names)",
        ),
    ] {
        let export = closed_export(&state, &session.scope, month, format, version).await?;
        if let Some(e) = export {
            let query = version.map(|v| format!("?version={v}")).unwrap_or_default();
            exports.push(ExportRow {
                label: label.into(),
                href: format!("/finance/{month}/exports/{format}{query}"),
                file_name: e.file_name,
                sha256: e.sha256,
            });
        }
    }
    Ok(html(
        MonthPage {
            nav: Nav::new(&session, "/finance"),
            headers: sort.headers(&STATEMENT_COLUMNS, &keep("rsort", &view.rsort)),
            site_headers: site_sort.headers(&SITE_COLUMNS, &keep("sort", &view.sort)),
            month: month.to_string(),
            version: close.version,
            closed_at: close.closed_at.format("%b %-d, %Y %H:%M UTC").to_string(),
            issuer: close.issuer.name.clone(),
            statements,
            totals: totals
                .into_iter()
                .map(|(c, t)| (c, grouped(t, 2)))
                .collect(),
            sites,
            exports,
        }
        .render(),
    ))
}

#[derive(serde::Deserialize)]
pub struct DownloadParams {
    /// For `focus`: `1.2` (the default) or `1.4`.
    version: Option<String>,
}

/// An export of a closed month, the same bytes as the API's.
pub async fn download(
    State(state): State<AppState>,
    session: Session,
    Path((month, format)): Path<(String, String)>,
    Query(p): Query<DownloadParams>,
) -> Result<Response, PageError> {
    require_finance(&session)?;
    let month: Month = month.parse().map_err(|_| PageError::NotFound)?;
    if !is_export_format(&format) {
        return Err(PageError::NotFound);
    }
    let version = export_version(&format, p.version.as_deref()).map_err(|_| PageError::NotFound)?;
    let e = closed_export(&state, &session.scope, month, &format, version)
        .await?
        .ok_or(PageError::NotFound)?;
    Ok(crate::views::download::export_file(e))
}
