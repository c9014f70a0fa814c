//! Chargeback over the API: finance closes a month and downloads its exports; a tenant reads
//! its own statements (another tenant's, or an open month, is not found); an admin reopens
//! the latest close, with a reason that the audit trail keeps.

use super::error::{ApiError, ApiResult, ErrorBody, FieldError};
use super::extract::{Caller, Query, RawBatch};
use crate::app::month_close::{self, CloseError};
use crate::auth::Role;
use crate::state::AppState;
use crate::views::download;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use wattledger_domain::chargeback::focus::{self, Version as FocusVersion};
use wattledger_domain::chargeback::prices;
use wattledger_domain::chargeback::statement::minor_units;
use wattledger_domain::chargeback::{
    self, AllocationMethod, Close, Export, Line, LineClass, Month, Statement, MJ_PER_KWH,
};
use wattledger_store::chargeback as store;
use wattledger_store::Scope;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/chargeback/months", get(list))
        .route("/v1/chargeback/months/{month}", get(show))
        .route("/v1/chargeback/months/{month}/close", post(close))
        .route("/v1/chargeback/months/{month}/reopen", post(reopen))
        .route(
            "/v1/chargeback/months/{month}/statements/{tenant}",
            get(statement),
        )
        .route(
            "/v1/chargeback/months/{month}/exports/{format}",
            get(export),
        )
}

const FINANCE: [Role; 1] = [Role::Finance];
const READERS: [Role; 2] = [Role::Finance, Role::Tenant];

/// Whether a month is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum MonthState {
    Closed,
    Open,
}

/// What a statement line bills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum LineKind {
    /// Energy used in the statement's month.
    Usage,
    /// Energy used in an earlier, closed month.
    Adjustment,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MonthView {
    /// `YYYY-MM`.
    pub month: String,
    pub state: MonthState,
    /// The close in force.
    pub version: Option<i32>,
    pub closed_at: Option<DateTime<Utc>>,
    pub closed_by: Option<String>,
    /// Earlier closes of this month that were reopened.
    pub reopened_closes: i64,
    /// Metered energy of the month at every site, kWh.
    #[schema(value_type = String)]
    pub metered_kwh: Decimal,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LineView {
    pub line: u32,
    pub kind: LineKind,
    /// The month the energy was used, `YYYY-MM`.
    pub usage_period: String,
    pub site: String,
    pub model: Option<String>,
    /// A job's kind, `idle_share`, `platform`, or `demand_response_credit` (a tenant's share
    /// of a grid event's credit: a negative cost, no energy).
    pub job_class: LineClass,
    pub allocation_method: AllocationMethod,
    pub energy_mj: i64,
    #[schema(value_type = String)]
    pub energy_kwh: Decimal,
    /// Exact, to 1e-6 of the currency.
    #[schema(value_type = String)]
    pub energy_cost: Decimal,
    #[schema(value_type = String)]
    pub gpu_time_cost: Decimal,
    /// What the line bills, in the currency's minor unit.
    #[schema(value_type = String)]
    pub billed_cost: Decimal,
    #[schema(value_type = String)]
    pub carbon_kg: Decimal,
    #[schema(value_type = String)]
    pub embodied_carbon_kg: Decimal,
    pub prompt_tokens: i64,
    pub generated_tokens: i64,
    #[schema(value_type = String)]
    pub gpu_hours: Decimal,
    /// The part of the energy that was badput: spent by training and batch jobs after their
    /// last checkpoint before they failed, timed out, were preempted, cancelled or requeued.
    pub badput_mj: i64,
    /// The energy's hourly carbon-free part (contracted clean energy first, then the grid's
    /// carbon-free share, hour by hour), and its share of the energy whose hours have one
    /// (0 to 1 to 4 places; absent where none has).
    pub carbon_free_mj: i64,
    #[schema(value_type = Option<String>)]
    pub cfe_score: Option<Decimal>,
    /// The line's GPU time by device model, what the month's GPU-hour prices are per (the
    /// `prices` export); a model of `null` is GPUs that reported none.
    pub gpu_time: Vec<GpuTimeView>,
}

/// A line's GPU time on one device model.
#[derive(Debug, Serialize, ToSchema)]
pub struct GpuTimeView {
    pub device_model: Option<String>,
    pub gpu_ms: i64,
    /// Rounded so that a line's parts add up to its `gpu_hours`.
    #[schema(value_type = String)]
    pub gpu_hours: Decimal,
    /// Exact, to 1e-6 of the currency.
    #[schema(value_type = String)]
    pub gpu_time_cost: Decimal,
    /// In the currency's minor unit; a line's parts add up to what it bills for GPU time.
    #[schema(value_type = String)]
    pub billed_cost: Decimal,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct StatementView {
    pub number: String,
    pub month: String,
    pub version: u32,
    pub tenant: String,
    pub tenant_name: String,
    pub currency: String,
    /// The sum of the lines' billed cost.
    #[schema(value_type = String)]
    pub billed_cost: Decimal,
    #[schema(value_type = String)]
    pub adjustments_billed_cost: Decimal,
    pub energy_mj: i64,
    #[schema(value_type = String)]
    pub energy_kwh: Decimal,
    #[schema(value_type = String)]
    pub carbon_kg: Decimal,
    #[schema(value_type = String)]
    pub embodied_carbon_kg: Decimal,
    pub prompt_tokens: i64,
    pub generated_tokens: i64,
    #[schema(value_type = String)]
    pub gpu_hours: Decimal,
    /// The part of the energy that was badput: spent by training and batch jobs after their
    /// last checkpoint before they failed, timed out, were preempted, cancelled or requeued.
    pub badput_mj: i64,
    /// The energy's hourly carbon-free part (contracted clean energy first, then the grid's
    /// carbon-free share, hour by hour), and its share of the energy whose hours have one
    /// (0 to 1 to 4 places; absent where none has).
    pub carbon_free_mj: i64,
    #[schema(value_type = Option<String>)]
    pub cfe_score: Option<Decimal>,
    pub lines: Vec<LineView>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ReconciliationView {
    pub site: String,
    pub site_name: String,
    /// What the site's meters recorded in the month.
    pub metered_mj: i64,
    /// This month's lines for energy jobs used (idle shares included).
    pub attributed_mj: i64,
    /// Idle energy carried by the platform tenant.
    pub unallocated_mj: i64,
    /// Lines billed this month for energy used in earlier months.
    pub adjustments_mj: i64,
    /// metered = attributed + unallocated, to the mJ.
    pub balanced: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ExportView {
    /// `csv`, `focus`, `json` or `prices`.
    pub format: String,
    /// For `focus`: the FOCUS version of the file (1.2 is frozen with the close; 1.4 is
    /// rendered from the frozen close when asked for).
    pub focus_version: Option<FocusVersion>,
    pub file_name: String,
    pub sha256: String,
    pub bytes: usize,
    pub url: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AuditView {
    /// `closed` or `reopened`.
    pub action: String,
    pub actor: String,
    pub reason: Option<String>,
    pub version: i32,
    pub at: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CloseView {
    pub month: String,
    pub version: u32,
    pub closed_at: DateTime<Utc>,
    pub issuer: String,
    /// The statements the caller may read (a tenant: its own).
    pub statements: Vec<StatementView>,
    /// Finance only.
    pub reconciliation: Vec<ReconciliationView>,
    /// Finance only.
    pub exports: Vec<ExportView>,
    /// Finance only: closes and reopenings of this month.
    pub audit: Vec<AuditView>,
}

fn kg(g: Decimal) -> Decimal {
    (g / Decimal::ONE_THOUSAND).normalize()
}

/// The amounts' hourly carbon-free score.
fn cfe_score(a: &wattledger_domain::chargeback::Amounts) -> Option<Decimal> {
    wattledger_domain::cfe::score(a.carbon_free_mj, a.cfe_mj)
}

fn line_view(month: Month, currency: &str, l: &Line) -> LineView {
    let mut billed = l.billed_cost();
    billed.rescale(minor_units(currency));
    LineView {
        line: l.no,
        kind: if l.is_adjustment(month) {
            LineKind::Adjustment
        } else {
            LineKind::Usage
        },
        usage_period: l.key.period.to_string(),
        site: l.key.site.clone(),
        model: l.key.model.clone(),
        job_class: l.key.class,
        allocation_method: l.key.class.allocation_method(),
        energy_mj: l.amounts.energy_mj,
        energy_kwh: l.energy_kwh,
        energy_cost: l.amounts.energy_cost,
        gpu_time_cost: l.amounts.gpu_time_cost,
        billed_cost: billed,
        carbon_kg: kg(l.amounts.carbon_g),
        embodied_carbon_kg: kg(l.amounts.embodied_g),
        prompt_tokens: l.amounts.prompt_tokens,
        generated_tokens: l.amounts.generated_tokens,
        gpu_hours: l.gpu_hours,
        badput_mj: l.amounts.badput_mj,
        carbon_free_mj: l.amounts.carbon_free_mj,
        cfe_score: cfe_score(&l.amounts),
        gpu_time: l
            .gpu_time_parts()
            .iter()
            .map(|p| {
                let mut billed = p.billed_gpu_time_cost;
                billed.rescale(minor_units(currency));
                GpuTimeView {
                    device_model: p.device_model.clone(),
                    gpu_ms: p.gpu_ms,
                    gpu_hours: p.gpu_hours,
                    gpu_time_cost: p.gpu_time_cost,
                    billed_cost: billed,
                }
            })
            .collect(),
    }
}

fn statement_view(close: &Close, s: &Statement) -> StatementView {
    let mut billed = s.billed_cost;
    billed.rescale(minor_units(&s.currency));
    StatementView {
        number: s.number.clone(),
        month: close.month.to_string(),
        version: close.version,
        tenant: s.tenant.clone(),
        tenant_name: close.directory.tenant_name(&s.tenant),
        currency: s.currency.clone(),
        billed_cost: billed,
        adjustments_billed_cost: s.adjustments(close.month).map(Line::billed_cost).sum(),
        energy_mj: s.total.energy_mj,
        energy_kwh: s.energy_kwh,
        carbon_kg: kg(s.total.carbon_g),
        embodied_carbon_kg: kg(s.total.embodied_g),
        prompt_tokens: s.total.prompt_tokens,
        generated_tokens: s.total.generated_tokens,
        gpu_hours: s.gpu_hours,
        badput_mj: s.total.badput_mj,
        carbon_free_mj: s.total.carbon_free_mj,
        cfe_score: cfe_score(&s.total),
        lines: s
            .lines
            .iter()
            .map(|l| line_view(close.month, &s.currency, l))
            .collect(),
    }
}

async fn close_view(state: &AppState, close: &Close, scope: &Scope) -> ApiResult<CloseView> {
    let finance = scope.tenant().is_none();
    let mut exports = Vec::new();
    let mut audit = Vec::new();
    if finance {
        let url = |format: &str| format!("/v1/chargeback/months/{}/exports/{format}", close.month);
        for format in chargeback::FORMATS {
            if let Some((_, e)) = store::export(&state.pool, scope, close.month, format).await? {
                exports.push(ExportView {
                    format: format.into(),
                    focus_version: (format == "focus").then_some(FocusVersion::V1_2),
                    url: url(format),
                    file_name: e.file_name,
                    sha256: e.sha256,
                    bytes: e.content.len(),
                });
            }
        }
        let e = focus::export(close, FocusVersion::V1_4);
        exports.push(ExportView {
            format: "focus".into(),
            focus_version: Some(FocusVersion::V1_4),
            url: format!("{}?version={}", url("focus"), FocusVersion::V1_4),
            file_name: e.file_name,
            sha256: e.sha256,
            bytes: e.content.len(),
        });
        let e = prices::export(close);
        exports.push(ExportView {
            format: prices::FORMAT.into(),
            focus_version: None,
            url: url(prices::FORMAT),
            file_name: e.file_name,
            sha256: e.sha256,
            bytes: e.content.len(),
        });
        audit = store::audit(&state.pool, close.month)
            .await?
            .into_iter()
            .map(|a| AuditView {
                action: a.action,
                actor: a.actor,
                reason: a.reason,
                version: a.version,
                at: a.at,
            })
            .collect();
    }
    Ok(CloseView {
        month: close.month.to_string(),
        version: close.version,
        closed_at: close.closed_at,
        issuer: close.issuer.name.clone(),
        statements: close
            .statements
            .iter()
            .map(|s| statement_view(close, s))
            .collect(),
        reconciliation: close
            .reconciliation
            .iter()
            .map(|r| ReconciliationView {
                site: r.site.clone(),
                site_name: close.directory.site(&r.site).0,
                metered_mj: r.metered_mj,
                attributed_mj: r.attributed_mj,
                unallocated_mj: r.unallocated_mj,
                adjustments_mj: r.adjustments_mj,
                balanced: r.balances(),
            })
            .collect(),
        exports,
        audit,
    })
}

fn parse_month(s: &str) -> ApiResult<Month> {
    s.parse::<Month>()
        .map_err(|e| ApiError::BadRequest(e.to_string()))
}

fn conflict(e: CloseError) -> ApiError {
    let message = e.to_string();
    let code = match e {
        CloseError::Store(s) => return ApiError::Store(s),
        CloseError::NotEnded(_) => "month_not_ended",
        CloseError::AlreadyClosed(_) => "month_closed",
        CloseError::EarlierOpen(_) => "earlier_month_open",
        CloseError::Pending { .. } => "attribution_pending",
        CloseError::Unpriced { .. } => "unpriced_energy",
        CloseError::Unbalanced(_) => "unbalanced",
        CloseError::NotClosed(_) => "month_not_closed",
        CloseError::LaterClosed { .. } => "later_month_closed",
    };
    ApiError::Conflict { code, message }
}

/// Every month with metered energy or a close, newest first, with its close status.
#[utoipa::path(get, path = "/v1/chargeback/months", tag = "chargeback", security(("bearer" = [])),
    responses((status = 200, body = Vec<MonthView>), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<Vec<MonthView>>> {
    caller.require(&FINANCE)?;
    Ok(Json(
        store::months(&state.pool)
            .await?
            .into_iter()
            .map(|m| MonthView {
                month: Month::of(m.month).to_string(),
                state: if m.version.is_some() {
                    MonthState::Closed
                } else {
                    MonthState::Open
                },
                version: m.version,
                closed_at: m.closed_at,
                closed_by: m.closed_by,
                reopened_closes: m.reopened,
                metered_kwh: (Decimal::from(m.metered_mj) / Decimal::from(MJ_PER_KWH)).round_dp(6),
            })
            .collect(),
    ))
}

/// A closed month: the statements the caller may read; for finance also the site
/// reconciliation, the exports with their SHA-256 and the audit trail.
#[utoipa::path(get, path = "/v1/chargeback/months/{month}", tag = "chargeback",
    params(("month" = String, Path, description = "YYYY-MM")), security(("bearer" = [])),
    responses((status = 200, body = CloseView), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody)))]
pub async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(month): Path<String>,
) -> ApiResult<Json<CloseView>> {
    caller.require(&READERS)?;
    let month = parse_month(&month)?;
    let close = store::load(&state.pool, month, &caller.scope)
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(Json(close_view(&state, &close, &caller.scope).await?))
}

/// Closes a month: attribution up to its end is finished first, then its statements,
/// reconciliation and exports are frozen; data arriving later for it is billed as adjustment
/// lines in the next month closed. Each tenant with a statement gets a `chargeback.closed`
/// webhook event.
#[utoipa::path(post, path = "/v1/chargeback/months/{month}/close", tag = "chargeback",
    params(("month" = String, Path, description = "YYYY-MM")), security(("bearer" = [])),
    responses((status = 201, body = CloseView), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 409, body = ErrorBody, description = "month_not_ended, month_closed, earlier_month_open, attribution_pending, unpriced_energy")))]
pub async fn close(
    State(state): State<AppState>,
    caller: Caller,
    Path(month): Path<String>,
) -> ApiResult<(StatusCode, Json<CloseView>)> {
    caller.require(&FINANCE)?;
    let month = parse_month(&month)?;
    let closed =
        crate::app::month_close::close(&state.pool, &state.config, month, &caller.subject, |_| {})
            .await
            .map_err(conflict)?;
    let view = close_view(&state, &closed.close, &Scope::All).await?;
    Ok((StatusCode::CREATED, Json(view)))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReopenBody {
    /// Why the month is reopened; kept in the audit trail.
    pub reason: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Reopened {
    pub month: String,
    /// The close that was reopened; closing again makes the next version.
    pub reopened_version: u32,
}

/// Reopens the latest closed month (admin only). Its statements are kept, marked reopened;
/// closing again issues the next version.
#[utoipa::path(post, path = "/v1/chargeback/months/{month}/reopen", tag = "chargeback",
    params(("month" = String, Path, description = "YYYY-MM")), request_body = ReopenBody,
    security(("bearer" = [])),
    responses((status = 200, body = Reopened), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 409, body = ErrorBody, description = "month_not_closed, later_month_closed"),
              (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn reopen(
    State(state): State<AppState>,
    caller: Caller,
    Path(month): Path<String>,
    RawBatch(body): RawBatch,
) -> ApiResult<Json<Reopened>> {
    caller.require(&[])?;
    let month = parse_month(&month)?;
    let b: ReopenBody = serde_json::from_slice(&body).map_err(|e| super::json::typed_error(&e))?;
    let reason = b.reason.trim();
    if let Err(e) = wattledger_domain::input::text(reason, 4000) {
        return Err(ApiError::Validation(vec![FieldError::new(
            0,
            "reason",
            e.to_string(),
        )]));
    }
    if reason.is_empty() || reason.chars().count() > 1000 {
        return Err(ApiError::Validation(vec![FieldError::new(
            0,
            "reason",
            "must say why, in 1 to 1000 characters",
        )]));
    }
    let version = month_close::reopen(&state.pool, month, &caller.subject, reason, Utc::now())
        .await
        .map_err(conflict)?;
    Ok(Json(Reopened {
        month: month.to_string(),
        reopened_version: version,
    }))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StatementParams {
    /// `json` (default) or `csv` (the statement CSV's columns, this tenant's rows).
    pub format: Option<String>,
}

/// A tenant's statements for a closed month (one per currency), as JSON or CSV.
#[utoipa::path(get, path = "/v1/chargeback/months/{month}/statements/{tenant}", tag = "chargeback",
    params(("month" = String, Path, description = "YYYY-MM"), ("tenant" = String, Path, description = "Tenant key"),
           StatementParams),
    security(("bearer" = [])),
    responses((status = 200, body = Vec<StatementView>, content_type = "application/json"),
              (status = 200, body = String, content_type = "text/csv"),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 422, body = ErrorBody)))]
pub async fn statement(
    State(state): State<AppState>,
    caller: Caller,
    Path((month, tenant)): Path<(String, String)>,
    Query(p): Query<StatementParams>,
) -> ApiResult<Response> {
    caller.require(&READERS)?;
    let month = parse_month(&month)?;
    let csv = match p.format.as_deref() {
        None | Some("json") => false,
        Some("csv") => true,
        Some(other) => {
            return Err(ApiError::InvalidQuery(format!(
                "format: '{}' is not json or csv",
                other.chars().take(20).collect::<String>()
            )))
        }
    };
    let scope = match state.tenant_id(&tenant).await? {
        Some(id) => caller.scope.narrow(id).ok_or(ApiError::NotFound)?,
        None => return Err(ApiError::NotFound),
    };
    let close = store::load(&state.pool, month, &scope)
        .await?
        .ok_or(ApiError::NotFound)?;
    if close.statements.is_empty() {
        return Err(ApiError::NotFound);
    }
    if csv {
        let body = chargeback::csv::render(&close);
        let name = format!("wattledger-{month}-v{}-{tenant}.csv", close.version);
        return Ok(download::file(
            body.into_bytes(),
            "text/csv; charset=utf-8",
            &name,
            None,
        ));
    }
    let views: Vec<StatementView> = close
        .statements
        .iter()
        .map(|s| statement_view(&close, s))
        .collect();
    Ok(Json(views).into_response())
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ExportParams {
    /// For `focus` only: the FOCUS version, `1.2` (the default: the file frozen with the
    /// close, as this address has always served) or `1.4` (the current ratified version,
    /// rendered from the frozen close).
    pub version: Option<String>,
}

/// An export file of a closed month: the statement CSV, FOCUS 1.2 and JSON byte for byte as
/// written at close, FOCUS 1.4 (`?version=1.4`) and the month's price list (`prices`: the
/// SKU prices FOCUS 1.4's rows name) rendered from that close;
/// `X-Checksum-SHA256` and the ETag carry its SHA-256.
#[utoipa::path(get, path = "/v1/chargeback/months/{month}/exports/{format}", tag = "chargeback",
    params(("month" = String, Path, description = "YYYY-MM"),
           ("format" = String, Path, description = "csv, focus, json or prices"), ExportParams),
    security(("bearer" = [])),
    responses((status = 200, body = String, content_type = "text/csv"),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 422, body = ErrorBody, description = "a version other than 1.2 or 1.4, or a version for csv or json")))]
pub async fn export(
    State(state): State<AppState>,
    caller: Caller,
    Path((month, format)): Path<(String, String)>,
    Query(p): Query<ExportParams>,
) -> ApiResult<Response> {
    caller.require(&FINANCE)?;
    let month = parse_month(&month)?;
    if !is_export_format(&format) {
        return Err(ApiError::NotFound);
    }
    let version = export_version(&format, p.version.as_deref())?;
    let e = closed_export(&state, &caller.scope, month, &format, version)
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(download::export_file(e))
}

/// Whether a closed month has an export of this name: the files frozen with the close, and
/// the price list rendered from it.
pub fn is_export_format(format: &str) -> bool {
    chargeback::FORMATS.contains(&format) || format == prices::FORMAT
}

/// The FOCUS version an export request asks for: `None` for csv and json, which have none.
pub fn export_version(format: &str, version: Option<&str>) -> ApiResult<Option<FocusVersion>> {
    match (format, version) {
        ("focus", None) => Ok(Some(FocusVersion::DEFAULT)),
        ("focus", Some(v)) => FocusVersion::parse(v).map(Some).ok_or_else(|| {
            ApiError::InvalidQuery(format!(
                "version: '{}' is not {}",
                v.chars().take(20).collect::<String>(),
                FocusVersion::NAMES.join(" or ")
            ))
        }),
        (_, None) => Ok(None),
        (_, Some(_)) => Err(ApiError::InvalidQuery(format!(
            "version: only the focus export has versions, not {format}"
        ))),
    }
}

/// A closed month's export (the API's and the dashboard's): FOCUS 1.4 and the price list
/// rendered from the frozen close, the others as stored at close. `None` if the month is
/// not closed or the scope may not read exports (they hold every tenant's lines).
pub async fn closed_export(
    state: &AppState,
    scope: &Scope,
    month: Month,
    format: &str,
    version: Option<FocusVersion>,
) -> wattledger_store::StoreResult<Option<Export>> {
    let rendered = version == Some(FocusVersion::V1_4) || format == prices::FORMAT;
    if rendered {
        if *scope != Scope::All {
            return Ok(None);
        }
        let close = store::load(&state.pool, month, scope).await?;
        return Ok(close.map(|c| match version {
            Some(v) => focus::export(&c, v),
            None => prices::export(&c),
        }));
    }
    Ok(store::export(&state.pool, scope, month, format)
        .await?
        .map(|(_, e)| e))
}
