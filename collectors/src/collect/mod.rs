//! The I/O edge of each source: fetch its wire format on an interval, hand the text to the
//! source's pure parser (`crate::sources`), and turn the readings into ingest records.

pub mod dcgm;
pub mod exporter;
pub mod grid;
pub mod nvml;
pub mod podresources;
pub mod redfish;
pub mod slurm;
pub mod snmp;
pub mod tokens;

use crate::records::Batch;
use chrono::{DateTime, Utc};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What one collection cycle produced: batches in send order, and the source's state after
/// them (spooled with them, so it is recovered exactly as far as they were).
#[derive(Debug, Default)]
pub struct Collected {
    pub batches: Vec<Batch>,
    pub state: Option<serde_json::Value>,
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The peer could not be reached or answered with an error: retried next interval.
    #[error("fetching {what}: {reason}")]
    Fetch { what: String, reason: String },
    /// The peer answered something this source cannot read.
    #[error("reading {what}: {reason}")]
    Parse { what: String, reason: String },
    /// The source cannot work on this machine (no NVIDIA driver, no `sacct`): said once,
    /// then retried quietly at a slower pace.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl Collected {
    /// A cycle's batches in send order, the empty ones left out.
    pub fn new(batches: impl IntoIterator<Item = Batch>, state: Option<serde_json::Value>) -> Self {
        Collected {
            batches: batches.into_iter().filter(|b| !b.is_empty()).collect(),
            state,
        }
    }
}

pub trait Source: Send {
    fn name(&self) -> String;
    fn interval(&self) -> Duration;
    /// Takes back the state spooled by an earlier run.
    fn restore(&mut self, _state: serde_json::Value) {}
    fn collect(&mut self, now: DateTime<Utc>) -> BoxFuture<'_, Result<Collected, SourceError>>;
}

/// Seconds from the config to a `Duration`, at least 100 ms.
pub(crate) fn interval(seconds: f64) -> Duration {
    Duration::from_secs_f64(seconds.max(0.1))
}

/// How a GET authenticates.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Auth<'a> {
    None,
    Basic(&'a str, &'a str),
    Bearer(&'a str),
    /// A header of the API's own (`auth-token`, `X-Auth-Token`).
    Header(&'static str, &'a str),
}

/// What a GET answered: the text, or that the credentials were refused (so a caller holding
/// a session or token can log in again once).
pub(crate) enum Answer {
    Text(String),
    Unauthorized,
}

/// GETs a text document with `auth`; a 401 is [`Answer::Unauthorized`], any other non-2xx
/// answer an error with the start of the body.
pub(crate) async fn get_answer(
    client: &reqwest::Client,
    url: &str,
    auth: Auth<'_>,
) -> Result<Answer, SourceError> {
    let req = client.get(url);
    let req = match auth {
        Auth::None => req,
        Auth::Basic(user, password) => req.basic_auth(user, Some(password)),
        Auth::Bearer(token) => req.bearer_auth(token),
        Auth::Header(name, value) => req.header(name, value),
    };
    let fetch = |reason: String| SourceError::Fetch {
        what: url.to_owned(),
        reason,
    };
    let resp = req.send().await.map_err(|e| fetch(error_chain(&e)))?;
    let status = resp.status();
    if status == reqwest::StatusCode::UNAUTHORIZED && !matches!(auth, Auth::None) {
        return Ok(Answer::Unauthorized);
    }
    let text = resp.text().await.map_err(|e| fetch(error_chain(&e)))?;
    if !status.is_success() {
        let snippet: String = text.chars().take(200).collect();
        return Err(fetch(format!("HTTP {status}: {snippet}")));
    }
    Ok(Answer::Text(text))
}

/// GETs a text document, failing on a non-2xx answer (a 401 included).
pub(crate) async fn get_text(
    client: &reqwest::Client,
    url: &str,
    auth: Auth<'_>,
) -> Result<String, SourceError> {
    match get_answer(client, url, auth).await? {
        Answer::Text(t) => Ok(t),
        Answer::Unauthorized => Err(SourceError::Fetch {
            what: url.to_owned(),
            reason: "HTTP 401 Unauthorized: the credentials were refused".into(),
        }),
    }
}

/// An error with its causes, so "error sending request" says why.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// An HTTP client for a source, trusting `ca_file` beside the system roots.
pub(crate) fn http_client(
    ca_file: Option<&std::path::Path>,
    timeout: Duration,
) -> Result<reqwest::Client, String> {
    let mut b = reqwest::Client::builder()
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none());
    if let Some(path) = ca_file {
        let pem = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let cert = reqwest::Certificate::from_pem(&pem)
            .map_err(|e| format!("{}: not a PEM certificate: {e}", path.display()))?;
        b = b.add_root_certificate(cert);
    }
    b.build().map_err(|e| error_chain(&e))
}
