//! What every request passes before a handler sees it, and what every response carries.
//!
//! Requests: a declared body over the limit is refused at once, not after waiting for bytes
//! that may never come: 401 to an API request without a valid token (the size this server
//! takes is no business of a stranger's), 413 otherwise; the path and query, percent-decoded, pass the one text rule
//! (`wattledger_domain::input::text`), so no handler, extractor or query can meet a NUL byte
//! or a control character from a URL.
//!
//! Responses: `X-Content-Type-Options: nosniff` and a referrer policy on all; unless a handler
//! chose otherwise, `Cache-Control: no-store` (answers hold one tenant's figures), a content
//! security policy (the dashboard's for HTML; nothing at all may load or frame anything
//! else) and `X-Frame-Options: DENY`.

use crate::dashboard::PageError;
use crate::http::error::ApiError;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::header::{self, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use wattledger_domain::input;

/// The longest decoded path or query value accepted.
const MAX_URL_TEXT: usize = 4096;

/// The dashboard's policy: its own stylesheet, inline SVG charts, forms to itself.
pub const PAGE_CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self' data:; \
                            form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
/// For everything that is not a page: nothing loads, nothing frames it.
const DATA_CSP: &str = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'";

/// The API's paths answered without a token.
const PUBLIC: [&str; 2] = ["/health", "/v1/openapi.json"];

/// Whether a path is the API's (JSON errors) rather than the dashboard's (HTML pages).
pub fn is_api(path: &str) -> bool {
    path.starts_with("/v1/") || path == "/health" || path == "/metrics"
}

pub async fn requests(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    let refuse = |api: ApiError, page: PageError| {
        if is_api(&path) {
            api.into_response()
        } else {
            page.into_response()
        }
    };
    let limit = state.config.max_body_bytes;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        // Who may not send anything hears that first, not the size this server takes.
        if is_api(&path) && !PUBLIC.contains(&path.as_str()) {
            if let Err(e) = crate::http::extract::bearer_claims(&state.keys, req.headers()) {
                return e.into_response();
            }
        }
        return refuse(ApiError::PayloadTooLarge(limit), PageError::TooLarge(limit));
    }
    if let Err(why) = url_text(&req) {
        return refuse(
            ApiError::BadRequest(why.clone()),
            PageError::BadRequest(why),
        );
    }
    next.run(req).await
}

/// The percent-decoded path and every query name and value, checked by the text rule.
fn url_text(req: &Request) -> Result<(), String> {
    let path = percent_encoding::percent_decode_str(req.uri().path()).collect::<Vec<u8>>();
    input::text(&String::from_utf8_lossy(&path), MAX_URL_TEXT)
        .map_err(|e| format!("the path {e}"))?;
    if let Some(q) = req.uri().query() {
        for (k, v) in form_urlencoded::parse(q.as_bytes()) {
            input::text(&k, MAX_URL_TEXT).map_err(|e| format!("a query parameter's name {e}"))?;
            input::text(&v, MAX_URL_TEXT).map_err(|e| {
                let name: String = k.chars().filter(|c| !c.is_control()).take(40).collect();
                format!("{name} {e}")
            })?;
        }
    }
    Ok(())
}

pub async fn responses(req: Request, next: Next) -> Response {
    let mut r = next.run(req).await;
    let is_html = r
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html"));
    let h = r.headers_mut();
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    h.entry(header::CONTENT_SECURITY_POLICY)
        .or_insert(HeaderValue::from_static(if is_html {
            PAGE_CSP
        } else {
            DATA_CSP
        }));
    h.entry(header::X_FRAME_OPTIONS)
        .or_insert(HeaderValue::from_static("DENY"));
    // Every answer, a refusal included, tells the agent the server's time.
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    if let Ok(v) = HeaderValue::from_str(&now) {
        h.insert(wattledger_wire::SERVER_TIME_HEADER, v);
    }
    r
}
