//! Grid signals fetched where the site runs: carbon intensity and electricity prices from
//! the providers' APIs (or a tariff the site states), parsed by the `wattledger-grid` crate
//! and pushed to `/v1/ingest/signals` through the spool like every other record.
//!
//! Every fetch sends the whole window the provider answered; the server keeps one value per
//! point and treats a changed value as the provider's revision (Electricity Maps re-estimates
//! recent hours), recomputing only the hours it touches.

pub mod parse;

use super::http::{get_answer, get_text, Answer, Auth};
use super::{
    client_for, BoxFuture, BuildError, Collected, Source, SourceConfig, SourceContext, SourceError,
};
use crate::records::Batch;
use chrono::{DateTime, Duration, Utc};
use serde::Deserialize;
use std::path::PathBuf;
use wattledger_domain::signals::Basis;
use wattledger_grid::tariff;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// Electricity Maps v3 (`auth-token` header): `carbon-intensity/latest|history|past-range`.
    Electricitymaps,
    /// WattTime v3 MOER (login with basic auth, then a bearer token).
    Watttime,
    /// The UK Carbon Intensity API (national or `/regional`), no key.
    Ukci,
    /// A Carbon Aware SDK WebAPI the site runs (`/emissions/…`).
    Casdk,
    /// ENTSO-E day-ahead prices (`securityToken` query parameter).
    Entsoe,
    /// A time-of-use tariff stated in this config: no fetch.
    Tariff,
    /// Prices as CSV at a URL (`start,[end,]price_per_kwh|price_per_mwh`).
    Csv,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GridConfig {
    pub name: Option<String>,
    pub provider: Provider,
    /// The full request URL with its query (zone, region, period…); none for `tariff`.
    pub url: Option<String>,
    /// Region the points are for, where the payload does not say (ENTSO-E, tariff, CSV) or
    /// to rename the provider's zone to the site's `grid_region`/`price_region`.
    pub region: Option<String>,
    /// API key (Electricity Maps, ENTSO-E) or password (WattTime), from a file.
    pub token_file: Option<PathBuf>,
    /// WattTime user name.
    pub username: Option<String>,
    /// WattTime's login URL.
    #[serde(default = "default_watttime_login")]
    pub login_url: String,
    /// Carbon Aware SDK: what its data source gives (`average` for Electricity Maps,
    /// `marginal` for WattTime).
    pub basis: Option<Basis>,
    /// CSV prices' currency.
    pub currency: Option<String>,
    pub tariff: Option<tariff::Tariff>,
    /// `tariff`: days of prices sent ahead of now.
    #[serde(default = "default_ahead_days")]
    pub ahead_days: i64,
    #[serde(default = "default_interval")]
    pub interval_s: f64,
}

fn default_watttime_login() -> String {
    "https://api.watttime.org/login".into()
}
fn default_ahead_days() -> i64 {
    2
}
fn default_interval() -> f64 {
    900.0
}

impl GridConfig {
    pub fn check(&self) -> Result<(), BuildError> {
        let name = self.name();
        // Each setting a provider needs, with what it is for: the first one missing is said.
        let need = |given: bool, setting: &'static str, why: &'static str| {
            if given {
                Ok(())
            } else {
                Err(BuildError::Missing {
                    name: name.clone(),
                    setting,
                    why: Some(why),
                })
            }
        };
        match self.provider {
            Provider::Tariff => {
                let t = self.tariff.as_ref().ok_or_else(|| BuildError::Missing {
                    name: name.clone(),
                    setting: "[grid.tariff]",
                    why: None,
                })?;
                t.check().map_err(|error| BuildError::Tariff {
                    name: name.clone(),
                    error,
                })?;
                need(
                    self.region.is_some(),
                    "`region`",
                    "a tariff needs the site's price_region",
                )?;
            }
            p => {
                if self.url.is_none() {
                    return Err(BuildError::Missing {
                        name,
                        setting: "`url`",
                        why: None,
                    });
                }
                let (region, token_file) = (self.region.is_some(), self.token_file.is_some());
                match p {
                    Provider::Electricitymaps => need(
                        token_file,
                        "`token_file`",
                        "Electricity Maps needs its API key",
                    )?,
                    Provider::Watttime => {
                        let why = "WattTime needs `username` and `token_file` (the password)";
                        need(self.username.is_some(), "`username`", why)?;
                        need(token_file, "`token_file`", why)?;
                    }
                    Provider::Entsoe => {
                        let why = "ENTSO-E needs `region` and `token_file` (the security token)";
                        need(region, "`region`", why)?;
                        need(token_file, "`token_file`", why)?;
                    }
                    Provider::Casdk => need(
                        self.basis.is_some(),
                        "`basis`",
                        "the Carbon Aware SDK needs average or marginal, per its data source",
                    )?,
                    Provider::Csv => {
                        let why = "CSV prices need `region` and `currency`";
                        need(region, "`region`", why)?;
                        need(self.currency.is_some(), "`currency`", why)?;
                    }
                    Provider::Ukci | Provider::Tariff => {}
                }
            }
        }
        Ok(())
    }

    fn secret(&self) -> Result<String, SourceError> {
        let f = self
            .token_file
            .as_ref()
            .ok_or_else(|| SourceError::Unavailable("no token_file".into()))?;
        std::fs::read_to_string(f)
            .map(|s| s.trim().to_owned())
            .map_err(|e| SourceError::Unavailable(format!("{}: {e}", f.display())))
    }
}

impl SourceConfig for GridConfig {
    fn name(&self) -> String {
        self.name.clone().unwrap_or_else(|| {
            format!(
                "grid {:?} {}",
                self.provider,
                self.url.as_deref().or(self.region.as_deref()).unwrap_or("")
            )
        })
    }

    fn interval(&self) -> std::time::Duration {
        super::interval(self.interval_s)
    }

    fn check(&self, _context: &SourceContext) -> Result<(), BuildError> {
        GridConfig::check(self)
    }

    fn build(&self, _context: &SourceContext) -> Result<Box<dyn Source>, BuildError> {
        // Providers answer slowly at times; a fetch may take up to 30 s whatever the interval.
        let client = client_for(None, 30.0)?;
        Ok(Box::new(GridSource::new(self.clone(), client)))
    }
}

pub struct GridSource {
    config: GridConfig,
    client: reqwest::Client,
    bearer: Option<String>,
}

impl GridSource {
    pub fn new(config: GridConfig, client: reqwest::Client) -> Self {
        GridSource {
            config,
            client,
            bearer: None,
        }
    }

    async fn watttime_get(&mut self, url: &str) -> Result<String, SourceError> {
        for _ in 0..2 {
            if self.bearer.is_none() {
                let password = self.config.secret()?;
                let login = self.config.login_url.clone();
                let user = self.config.username.clone().unwrap_or_default();
                let body = get_text(&self.client, &login, Auth::Basic(&user, &password)).await?;
                let token = serde_json::from_str::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v.get("token")?.as_str().map(str::to_owned))
                    .ok_or_else(|| SourceError::Parse {
                        what: login.clone(),
                        reason: "the login answer has no token".into(),
                    })?;
                self.bearer = Some(token);
            }
            let token = self.bearer.clone().unwrap_or_default();
            match get_answer(&self.client, url, Auth::Bearer(&token)).await? {
                Answer::Text(t) => return Ok(t),
                // WattTime tokens last 30 minutes: log in again, once.
                Answer::Unauthorized => self.bearer = None,
            }
        }
        Err(SourceError::Fetch {
            what: url.to_owned(),
            reason: "HTTP 401 after a fresh login: the credentials were refused".into(),
        })
    }

    async fn fetch(&mut self) -> Result<String, SourceError> {
        let url = self.config.url.clone().unwrap_or_default();
        match self.config.provider {
            Provider::Electricitymaps => {
                let key = self.config.secret()?;
                get_text(&self.client, &url, Auth::Header("auth-token", &key)).await
            }
            Provider::Watttime => self.watttime_get(&url).await,
            Provider::Entsoe => {
                let token = self.config.secret()?;
                let sep = if url.contains('?') { '&' } else { '?' };
                get_text(
                    &self.client,
                    &format!("{url}{sep}securityToken={token}"),
                    Auth::None,
                )
                .await
                .map_err(|e| match e {
                    // Never log the token with the URL.
                    SourceError::Fetch { reason, .. } => SourceError::Fetch {
                        what: url.clone(),
                        reason: reason.replace(&token, "…"),
                    },
                    other => other,
                })
            }
            Provider::Ukci | Provider::Casdk | Provider::Csv => {
                get_text(&self.client, &url, Auth::None).await
            }
            Provider::Tariff => Ok(String::new()),
        }
    }
}

impl Source for GridSource {
    fn collect(&mut self, now: DateTime<Utc>) -> BoxFuture<'_, Result<Collected, SourceError>> {
        Box::pin(async move {
            let series = if let Some(t) = &self.config.tariff {
                let region = self.config.region.clone().unwrap_or_default();
                let from = now - Duration::days(1);
                vec![t.series(&region, from, now + Duration::days(self.config.ahead_days))]
            } else {
                let body = self.fetch().await?;
                parse::parse(&self.config, &body).map_err(|e| SourceError::Parse {
                    what: self.config.url.clone().unwrap_or_default(),
                    reason: e.to_string(),
                })?
            };
            let p = parse::points(&series, self.config.region.as_deref());
            Ok(Collected::new([Batch::Signals(p)], None))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    pub(super) fn config(text: &str) -> GridConfig {
        let c: GridConfig = toml::from_str(text).unwrap();
        c.check().unwrap();
        c
    }

    #[test]
    fn a_tariff_needs_no_fetch_and_configs_say_what_they_lack() {
        let t = config(
            "provider = \"tariff\"\nregion = \"DE\"\n[tariff]\ncurrency = \"EUR\"\n\
             [[tariff.seasons]]\nmonths = [1,2,3,4,5,6,7,8,9,10,11,12]\nprice = \"0.25\"\n",
        );
        let mut s = GridSource::new(t, reqwest::Client::new());
        let now = DateTime::parse_from_rfc3339("2026-11-02T10:30:00Z")
            .unwrap()
            .to_utc();
        let c = futures_lite(s.collect(now));
        let Batch::Signals(p) = &c.batches[0] else {
            panic!()
        };
        // From the hour a day ago (09:00) through the hour two days ahead (10:00): 73 hours.
        assert_eq!(p.len(), 73);
        assert!(p
            .iter()
            .all(|p| p.value.to_string() == "0.25" && p.region == "DE"));

        let bad: GridConfig =
            toml::from_str("provider = \"watttime\"\nurl = \"https://x\"\n").unwrap();
        assert!(bad.check().unwrap_err().to_string().contains("username"));
        let bad: GridConfig =
            toml::from_str("provider = \"casdk\"\nurl = \"https://x\"\n").unwrap();
        assert!(bad.check().unwrap_err().to_string().contains("basis"));
    }

    /// A WattTime stand-in: `/login` checks basic auth and hands out numbered tokens; the
    /// data endpoint refuses the first token (expired) and serves the stored payload for the
    /// second. The source must log in again once, by itself.
    #[tokio::test]
    async fn watttime_logs_in_again_when_its_token_expires() {
        use axum::http::{HeaderMap, StatusCode};
        use std::sync::atomic::{AtomicU32, Ordering};
        use std::sync::Arc;
        let logins = Arc::new(AtomicU32::new(0));
        let l = logins.clone();
        let payload = fixtures::read("grid/watttime-v3-historical.json");
        let app = axum::Router::new()
            .route(
                "/login",
                axum::routing::get(move |h: HeaderMap| {
                    let l = l.clone();
                    async move {
                        // "u:pw" in base64.
                        if h.get("authorization").and_then(|v| v.to_str().ok())
                            != Some("Basic dTpwdw==")
                        {
                            return (StatusCode::FORBIDDEN, String::new());
                        }
                        let n = l.fetch_add(1, Ordering::SeqCst) + 1;
                        (StatusCode::OK, format!("{{\"token\": \"t{n}\"}}"))
                    }
                }),
            )
            .route(
                "/v3/historical",
                axum::routing::get(move |h: HeaderMap| {
                    let payload = payload.clone();
                    async move {
                        match h.get("authorization").and_then(|v| v.to_str().ok()) {
                            Some("Bearer t2") => (StatusCode::OK, payload),
                            _ => (StatusCode::UNAUTHORIZED, String::new()),
                        }
                    }
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let dir = std::env::temp_dir().join(format!("wl-wt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("pw"), "pw\n").unwrap();
        let c = config(&format!(
            "provider = \"watttime\"\nurl = \"{base}/v3/historical?region=CAISO_NORTH\"\n\
             username = \"u\"\ntoken_file = \"{}\"\nlogin_url = \"{base}/login\"\n",
            dir.join("pw").display()
        ));
        let mut s = GridSource::new(c, reqwest::Client::new());
        let out = s.collect(Utc::now()).await.unwrap();
        let Batch::Signals(p) = &out.batches[0] else {
            panic!()
        };
        assert_eq!(p.len(), 2);
        assert_eq!(
            logins.load(Ordering::SeqCst),
            2,
            "the expired token led to one new login"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn futures_lite<T>(f: BoxFuture<'_, Result<T, SourceError>>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
            .unwrap()
    }
}
