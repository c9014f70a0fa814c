//! Redfish rack PDUs: each mapped outlet's power and energy register as samples of the node
//! meter it feeds (several outlets of one node summed, `crate::feeds`). Basic auth or a
//! Redfish session; TLS with a configurable CA.

pub mod parse;

use super::http::{error_chain, get_answer, get_text, Answer, Auth};
use super::{
    client_for, saved, BoxFuture, BuildError, Collected, Source, SourceConfig, SourceContext,
    SourceError, StateError,
};
use crate::feeds::{Feeds, OutletReading};
use crate::records::Batch;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedfishConfig {
    pub name: Option<String>,
    /// The RackPDU resource, e.g. `https://pdu1/redfish/v1/PowerEquipment/RackPDUs/1`.
    pub url: String,
    /// Outlet id (`A1`) → the meter key of the node it feeds.
    pub outlets: BTreeMap<String, String>,
    pub username: Option<String>,
    pub password: Option<String>,
    pub password_file: Option<PathBuf>,
    /// Log in through `SessionService` and send `X-Auth-Token` instead of basic auth.
    #[serde(default)]
    pub session: bool,
    /// PEM CA bundle for the PDU's certificate.
    pub ca_file: Option<PathBuf>,
    #[serde(default = "default_interval")]
    pub interval_s: f64,
    /// Send every reading as read instead of one record per meter per step (`agent.step_s`).
    #[serde(default)]
    pub raw: bool,
}

fn default_interval() -> f64 {
    30.0
}

impl RedfishConfig {
    fn password(&self) -> Result<Option<String>, SourceError> {
        match (&self.password, &self.password_file) {
            (Some(p), _) => Ok(Some(p.clone())),
            (None, Some(f)) => std::fs::read_to_string(f)
                .map(|p| Some(p.trim().to_owned()))
                .map_err(|e| SourceError::Unavailable(format!("{}: {e}", f.display()))),
            (None, None) => Ok(None),
        }
    }
}

impl SourceConfig for RedfishConfig {
    fn name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("redfish {}", self.url))
    }

    fn interval(&self) -> std::time::Duration {
        super::interval(self.interval_s)
    }

    fn stepped(&self) -> bool {
        !self.raw
    }

    fn check(&self, _context: &SourceContext) -> Result<(), BuildError> {
        if self.outlets.is_empty() {
            return Err(BuildError::Missing {
                name: format!("redfish {}", self.url),
                setting: "outlets mapped to meters",
                why: None,
            });
        }
        Ok(())
    }

    fn build(&self, _context: &SourceContext) -> Result<Box<dyn Source>, BuildError> {
        let client = client_for(self.ca_file.as_deref(), self.interval_s)?;
        Ok(Box::new(RedfishSource::new(self.clone(), client)))
    }
}

pub struct RedfishSource {
    config: RedfishConfig,
    client: reqwest::Client,
    session_token: Option<String>,
    feeds: Feeds,
}

impl RedfishSource {
    pub fn new(config: RedfishConfig, client: reqwest::Client) -> Self {
        RedfishSource {
            config,
            client,
            session_token: None,
            feeds: Feeds::default(),
        }
    }

    fn root(&self) -> String {
        // The service root, for SessionService: everything before `/redfish/v1`.
        match self.config.url.find("/redfish/v1") {
            Some(i) => self.config.url[..i].to_owned(),
            None => self.config.url.trim_end_matches('/').to_owned(),
        }
    }

    async fn login(&mut self) -> Result<String, SourceError> {
        let url = format!("{}/redfish/v1/SessionService/Sessions", self.root());
        let body = serde_json::json!({
            "UserName": self.config.username.clone().unwrap_or_default(),
            "Password": self.config.password()?.unwrap_or_default(),
        });
        let fetch = |reason: String| SourceError::Fetch {
            what: url.clone(),
            reason,
        };
        let resp = self
            .client
            .post(&url)
            .json(&body)
            .send()
            .await
            .map_err(|e| fetch(error_chain(&e)))?;
        if !resp.status().is_success() {
            return Err(fetch(format!("login answered HTTP {}", resp.status())));
        }
        resp.headers()
            .get("X-Auth-Token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or_else(|| fetch("the session answer has no X-Auth-Token".into()))
    }

    async fn get(&mut self, url: &str) -> Result<String, SourceError> {
        if !self.config.session {
            let password = self.config.password()?;
            let auth = match (&self.config.username, &password) {
                (Some(u), Some(p)) => Auth::Basic(u, p),
                _ => Auth::None,
            };
            return get_text(&self.client, url, auth).await;
        }
        for _ in 0..2 {
            if self.session_token.is_none() {
                self.session_token = Some(self.login().await?);
            }
            let token = self.session_token.clone().expect("logged in");
            match get_answer(&self.client, url, Auth::Header("X-Auth-Token", &token)).await? {
                Answer::Text(t) => return Ok(t),
                // The session expired: log in again, once.
                Answer::Unauthorized => self.session_token = None,
            }
        }
        Err(SourceError::Fetch {
            what: url.to_owned(),
            reason: "HTTP 401 after a fresh login: the credentials were refused".into(),
        })
    }
}

/// Outlet readings (metered ones) as the feeds of the mapped meters.
pub fn feed_readings(readings: &[(String, Option<parse::OutletReading>)]) -> Vec<OutletReading> {
    readings
        .iter()
        .filter_map(|(id, r)| {
            let r = r.as_ref()?;
            Some(OutletReading {
                outlet: id.clone(),
                power_w: r.power_w,
                energy_mj: r.energy_mj,
            })
        })
        .collect()
}

impl Source for RedfishSource {
    fn restore(&mut self, state: serde_json::Value) -> Result<(), StateError> {
        self.feeds = saved(state)?;
        Ok(())
    }

    fn collect(&mut self, now: DateTime<Utc>) -> BoxFuture<'_, Result<Collected, SourceError>> {
        Box::pin(async move {
            let base = self.config.url.trim_end_matches('/').to_owned();
            let ids: Vec<String> = self.config.outlets.keys().cloned().collect();
            let mut readings = Vec::new();
            for id in ids {
                let url = format!("{base}/Outlets/{id}");
                let text = self.get(&url).await?;
                let r = parse::parse_outlet(&text).map_err(|e| SourceError::Parse {
                    what: url.clone(),
                    reason: e.to_string(),
                })?;
                if r.is_none() {
                    tracing::debug!(%url, "outlet has no metering; skipped");
                }
                readings.push((id, r));
            }
            let s = self
                .feeds
                .samples(&feed_readings(&readings), &self.config.outlets, now);
            let state = serde_json::to_value(&self.feeds).expect("feeds serialize");
            Ok(Collected::new([Batch::Samples(s)], Some(state)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    #[test]
    fn mapped_metered_outlets_become_samples() {
        let dir = "pdu/redfish/public-pdu/PowerEquipment/RackPDUs/1/Outlets";
        let read = |id: &str| {
            let r =
                parse::parse_outlet(&fixtures::read(&format!("{dir}/{id}/index.json"))).unwrap();
            (id.to_owned(), r)
        };
        let readings = vec![read("A1"), read("A4"), read("A2")];
        let outlets = BTreeMap::from([
            ("A1".to_string(), "n1".to_string()),
            ("A4".to_string(), "n4".to_string()),
        ]);
        let now = DateTime::from_timestamp(1_790_000_000, 0).unwrap();
        let s = Feeds::default().samples(&feed_readings(&readings), &outlets, now);
        assert_eq!(s.len(), 1, "A4 has no metering, A2 is not mapped: {s:?}");
        assert_eq!(s[0].meter, "n1");
        assert!(s[0].counter_mj.is_some() && s[0].power_w.is_some());
    }
}
