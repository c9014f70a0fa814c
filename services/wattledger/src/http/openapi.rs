//! The OpenAPI 3 document, generated from the handlers' types and `#[utoipa::path]`s.

use super::{
    admission, admission_policy, budgets, chargeback, efficiency, error, grid_events, ingest,
    power, power_policy, prometheus, tokens, usage, webhooks,
};
use axum::Json;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(title = "wattledger", description = "Energy, cost and carbon metering for GPU clusters."),
    paths(
        super::health, prometheus::get_metrics,
        ingest::inventory::tenants, ingest::inventory::sites, ingest::inventory::models, ingest::inventory::device_models, ingest::inventory::meters,
        ingest::samples::samples_batch, ingest::jobs::jobs_batch, ingest::tokens::tokens_batch, ingest::signals::signals_batch, ingest::clean_energy::clean_energy_batch,
        usage::get_usage, usage::list_jobs, usage::get_job, usage::list_sites, usage::list_tenants,
        efficiency::get_efficiency, power::get_headroom, power::get_grid,
        power_policy::list_policies, power_policy::put_policy,
        grid_events::record_event, grid_events::list_events, grid_events::show_event,
        admission::ask, admission::decisions, admission::kubernetes,
        admission_policy::get_policy, admission_policy::put_policy,
        webhooks::create, webhooks::list, webhooks::show, webhooks::update, webhooks::remove,
        webhooks::rotate, webhooks::test, webhooks::messages, webhooks::redeliver,
        budgets::list, budgets::show, budgets::put, budgets::remove,
        chargeback::list, chargeback::show, chargeback::close, chargeback::reopen,
        chargeback::statement, chargeback::export,
        tokens::list, tokens::mint, tokens::revoke,
    ),
    components(schemas(error::ErrorBody, error::ErrorDetail, error::FieldError,
        ingest::IngestOutcome, ingest::ConflictOut, ingest::Counts)),
    modifiers(&Bearer, &UrlText, &OperationIds),
    tags((name = "ingest", description = "Collectors and schedulers push data"),
         (name = "query", description = "Usage, jobs and inventory"),
         (name = "admission", description = "Schedulers ask before starting a job"),
         (name = "budgets", description = "Limits on energy, cost and carbon per tenant and period"),
         (name = "power", description = "Sites' measured power (headroom, peaks and swings), power policies and grid events (demand response)"),
         (name = "chargeback", description = "Month close, statements, CSV and FOCUS exports"),
         (name = "webhooks", description = "Signed alert deliveries to tenants' endpoints"),
         (name = "tokens", description = "API tokens: mint (shown once), list, revoke (admin)"),
         (name = "service", description = "Health"))
)]
pub struct ApiDoc;

struct Bearer;

impl Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            ),
        );
    }
}

/// Every operation may answer 400: its path and query pass the one text rule before any
/// handler (http::guard), whatever the operation.
struct UrlText;

impl Modify for UrlText {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
        let response = ResponseBuilder::new()
            .description("The path or a query parameter holds text the input rule refuses (a NUL or control character).")
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("ErrorBody")))
                    .build(),
            )
            .build();
        for op in operations(openapi) {
            op.responses
                .responses
                .entry("400".into())
                .or_insert_with(|| response.clone().into());
        }
    }
}

/// Operation ids are the handlers' names, which repeat across resources (`list`, `show`):
/// each becomes `<tag>_<name>`, unique as OpenAPI requires and readable in generated clients.
struct OperationIds;

impl Modify for OperationIds {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for op in operations(openapi) {
            let tag = op.tags.as_ref().and_then(|t| t.first()).cloned();
            if let (Some(tag), Some(id)) = (tag, op.operation_id.as_mut()) {
                *id = format!("{tag}_{id}");
            }
        }
    }
}

/// Every operation of the document, whatever its method.
fn operations(
    openapi: &mut utoipa::openapi::OpenApi,
) -> impl Iterator<Item = &mut utoipa::openapi::path::Operation> {
    openapi.paths.paths.values_mut().flat_map(|item| {
        [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
    })
}

pub async fn serve() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
