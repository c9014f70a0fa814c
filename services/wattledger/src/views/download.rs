//! A closed month's export as a file download, the same from the API and the dashboard: its
//! content type, its name, and its checksum as `X-Checksum-SHA256` and `ETag`.

use axum::http::header::{self, HeaderValue};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use wattledger_domain::chargeback;

/// An export as a download: its content type, file name and checksum.
pub fn export_file(e: chargeback::Export) -> Response {
    let content_type = if e.format == "json" {
        "application/json"
    } else {
        "text/csv; charset=utf-8"
    };
    file(e.content, content_type, &e.file_name, Some(&e.sha256))
}

/// Any file as a download; with a checksum, also its `ETag`.
pub fn file(
    body: Vec<u8>,
    content_type: &'static str,
    name: &str,
    sha256: Option<&str>,
) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{name}\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    if let Some(sum) = sha256.and_then(|s| HeaderValue::from_str(s).ok()) {
        h.insert("x-checksum-sha256", sum.clone());
        if let Ok(etag) = HeaderValue::from_str(&format!("\"{}\"", sum.to_str().unwrap_or(""))) {
            h.insert(header::ETAG, etag);
        }
    }
    r
}
