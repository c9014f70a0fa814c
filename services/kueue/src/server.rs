//! The wattledger server as this controller uses it: `POST /v1/admission` with a scheduler
//! token read from a file on every question (a rotated Secret takes effect without a
//! restart; the file is a few hundred bytes).

use crate::ask::Question;
use crate::decision::Answer;
use std::path::PathBuf;
use std::time::Duration;

/// The largest answer read, bytes: an answer is a few KiB; a larger body is not one.
const MAX_ANSWER: usize = 1 << 20;

/// The largest token file read, bytes.
const MAX_TOKEN: u64 = 16 * 1024;

/// What wattledger said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Answer(Answer),
    /// The question itself is wrong (422: an unknown tenant, a bad kind): the message. A 400
    /// is not this: the body is made here, so a malformed one is not the job's fault.
    Refused(String),
}

/// wattledger did not answer: the check's failure policy applies.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("token file {path}: {why}")]
    Token { path: String, why: String },
    #[error("{0}")]
    Transport(#[from] reqwest::Error),
    #[error("HTTP {status}: {message}")]
    Status { status: u16, message: String },
    #[error("the answer is not one: {0}")]
    Answer(String),
}

#[derive(Debug, Clone)]
pub struct Wattledger {
    http: reqwest::Client,
    ask_url: String,
    token_file: Option<PathBuf>,
}

/// The `error.message` of wattledger's error body, with its field errors; the raw text
/// (cut) when the body is not one.
fn error_message(body: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let mut msg = v["error"]["message"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned());
    if let Some(errors) = v["error"]["errors"].as_array() {
        let fields: Vec<String> = errors
            .iter()
            .map(|e| {
                format!(
                    "{} {}",
                    e["field"].as_str().unwrap_or("?"),
                    e["reason"].as_str().unwrap_or("")
                )
            })
            .collect();
        if !fields.is_empty() {
            msg = format!("{msg}: {}", fields.join("; "));
        }
    }
    msg
}

impl Wattledger {
    /// `base` is the server's URL (`http://wattledger.wattledger.svc:8080`).
    pub fn new(
        base: &str,
        token_file: Option<PathBuf>,
        timeout: Duration,
    ) -> Result<Wattledger, reqwest::Error> {
        Ok(Wattledger {
            http: reqwest::Client::builder()
                .timeout(timeout)
                .connect_timeout(timeout)
                .build()?,
            ask_url: format!("{}/v1/admission", base.trim_end_matches('/')),
            token_file,
        })
    }

    async fn token(&self) -> Result<Option<String>, ServerError> {
        let Some(path) = &self.token_file else {
            return Ok(None);
        };
        let bad = |why: String| ServerError::Token {
            path: path.display().to_string(),
            why,
        };
        let meta = tokio::fs::metadata(path)
            .await
            .map_err(|e| bad(e.to_string()))?;
        if meta.len() > MAX_TOKEN {
            return Err(bad(format!("larger than {MAX_TOKEN} bytes")));
        }
        let text = tokio::fs::read_to_string(path)
            .await
            .map_err(|e| bad(e.to_string()))?;
        let token = text.trim();
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(bad("not a bearer token".into()));
        }
        Ok(Some(token.to_owned()))
    }

    /// Asks under the idempotency `key` (see [`crate::ask::idempotency_key`]); a stored
    /// decision comes back as [`Reply::Answer`].
    pub async fn ask(&self, q: &Question, key: &str) -> Result<Reply, ServerError> {
        let mut req = self
            .http
            .post(&self.ask_url)
            .header("Idempotency-Key", key)
            .json(q);
        if let Some(t) = self.token().await? {
            req = req.bearer_auth(t);
        }
        let mut resp = req.send().await?;
        let status = resp.status().as_u16();
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await? {
            if body.len() + chunk.len() > MAX_ANSWER {
                return Err(ServerError::Answer(format!(
                    "larger than {MAX_ANSWER} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        match status {
            200 => serde_json::from_slice(&body)
                .map(Reply::Answer)
                .map_err(|e| ServerError::Answer(e.to_string())),
            422 => Ok(Reply::Refused(error_message(&body))),
            _ => Err(ServerError::Status {
                status,
                message: error_message(&body),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_name_their_fields() {
        let body = br#"{"error": {"code": "validation_failed", "message": "invalid request",
            "errors": [{"index": 0, "field": "tenant", "reason": "unknown tenant 'ml'"}]}}"#;
        assert_eq!(
            error_message(body),
            "invalid request: tenant unknown tenant 'ml'"
        );
        assert_eq!(error_message(b"bad gateway"), "bad gateway");
    }
}
