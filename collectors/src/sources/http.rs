//! The HTTP edge the sources share: a client trusting a site's CA, GETs with the peers'
//! kinds of authentication, and errors that say why.

use super::SourceError;
use std::path::{Path, PathBuf};
use std::time::Duration;

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

/// Why an HTTP client (a source's, or the agent's for pushing) could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The CA bundle could not be read.
    #[error("{}: {error}", .path.display())]
    ReadCa {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}: not a PEM certificate: {error}", .path.display())]
    NotPem {
        path: PathBuf,
        error: reqwest::Error,
    },
    /// The client builder refused (its TLS backend could not start): said with its causes.
    #[error("{}", error_chain(.0))]
    Build(reqwest::Error),
}

/// An HTTP client for a source, trusting `ca_file` beside the system roots.
pub(crate) fn http_client(
    ca_file: Option<&Path>,
    timeout: Duration,
) -> Result<reqwest::Client, ClientError> {
    let mut b = reqwest::Client::builder()
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none());
    if let Some(path) = ca_file {
        let pem = std::fs::read(path).map_err(|error| ClientError::ReadCa {
            path: path.to_owned(),
            error,
        })?;
        let cert = reqwest::Certificate::from_pem(&pem).map_err(|error| ClientError::NotPem {
            path: path.to_owned(),
            error,
        })?;
        b = b.add_root_certificate(cert);
    }
    b.build().map_err(ClientError::Build)
}
