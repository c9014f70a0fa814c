//! The OpenAPI 3 document, generated from the handlers' types and `#[utoipa::path]`s.

use super::{
    admission, budgets, chargeback, efficiency, error, ingest, prometheus, usage, webhooks,
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
        ingest::samples::samples_batch, ingest::jobs::jobs_batch, ingest::tokens::tokens_batch, ingest::signals::signals_batch,
        usage::get_usage, usage::list_jobs, usage::get_job, usage::list_sites, usage::list_tenants,
        efficiency::get_efficiency,
        admission::ask, admission::decisions, admission::kubernetes,
        webhooks::create, webhooks::list, webhooks::show, webhooks::update, webhooks::remove,
        webhooks::rotate, webhooks::test, webhooks::messages, webhooks::redeliver,
        budgets::list, budgets::show, budgets::put, budgets::remove,
        chargeback::list, chargeback::show, chargeback::close, chargeback::reopen,
        chargeback::statement, chargeback::export,
    ),
    components(schemas(error::ErrorBody, error::ErrorDetail, error::FieldError)),
    modifiers(&Bearer),
    tags((name = "ingest", description = "Collectors and schedulers push data"),
         (name = "query", description = "Usage, jobs and inventory"),
         (name = "admission", description = "Schedulers ask before starting a job"),
         (name = "budgets", description = "Limits on energy, cost and carbon per tenant and period"),
         (name = "chargeback", description = "Month close, statements, CSV and FOCUS exports"),
         (name = "webhooks", description = "Signed alert deliveries to tenants' endpoints"),
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

pub async fn serve() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
