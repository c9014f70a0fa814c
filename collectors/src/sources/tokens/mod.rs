//! Inference servers' token counters (vLLM, SGLang, Triton, TGI) as token records of the job
//! the endpoint is bound to, per tenant where the server labels one.
//!
//! The baselines of the counters travel with the spooled records, so after a crash the agent
//! counts on from the last spooled scrape: no token is lost or counted twice.

pub mod parse;

use super::http::{get_text, Auth};
use super::{
    client_for, saved, BoxFuture, BuildError, Collected, Source, SourceConfig, SourceContext,
    SourceError, StateError,
};
use crate::records::{Batch, Tokens};
use chrono::{DateTime, Utc};
use parse::{Baseline, DeltaTracker};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokensConfig {
    pub name: Option<String>,
    /// The server's metrics URL, e.g. `http://127.0.0.1:8000/metrics`.
    pub url: String,
    /// The job (deployment) this endpoint serves, e.g. `k8s:serving/llama-70b`.
    pub job: String,
    /// The label that names a tenant on a shared endpoint, if the deployment adds one.
    pub tenant_label: Option<String>,
    /// Label value → tenant key, where they differ.
    #[serde(default)]
    pub tenants: BTreeMap<String, String>,
    #[serde(default = "default_interval")]
    pub interval_s: f64,
}

fn default_interval() -> f64 {
    15.0
}

#[derive(Debug, Serialize, Deserialize)]
struct State {
    at: DateTime<Utc>,
    baselines: Vec<Baseline>,
}

impl SourceConfig for TokensConfig {
    fn name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("tokens {}", self.url))
    }

    fn interval(&self) -> std::time::Duration {
        super::interval(self.interval_s)
    }

    fn build(&self, _context: &SourceContext) -> Result<Box<dyn Source>, BuildError> {
        let client = client_for(None, self.interval_s)?;
        Ok(Box::new(TokensSource::new(self.clone(), client)))
    }
}

pub struct TokensSource {
    config: TokensConfig,
    client: reqwest::Client,
    tracker: DeltaTracker,
    last_at: Option<DateTime<Utc>>,
}

impl TokensSource {
    pub fn new(config: TokensConfig, client: reqwest::Client) -> Self {
        TokensSource {
            config,
            client,
            tracker: DeltaTracker::default(),
            last_at: None,
        }
    }

    /// One scrape's totals to token records over (last scrape, now].
    fn records(&mut self, totals: &[parse::TokenTotals], now: DateTime<Utc>) -> Collected {
        let deltas = self.tracker.observe(totals);
        let start_at = self.last_at.replace(now);
        let mut per_tenant: BTreeMap<Option<String>, (i64, i64)> = BTreeMap::new();
        for d in &deltas {
            if d.reset {
                tracing::info!(source = %self.config.name(), model = ?d.model,
                    "token counters went backwards: the server restarted; counting from zero");
            }
            let tenant = d.tenant.as_ref().map(|t| {
                self.config
                    .tenants
                    .get(t)
                    .cloned()
                    .unwrap_or_else(|| t.clone())
            });
            let e = per_tenant.entry(tenant).or_default();
            e.0 += d.prompt;
            e.1 += d.generated;
        }
        let mut records = Vec::new();
        if let Some(start_at) = start_at.filter(|s| *s < now) {
            records = per_tenant
                .into_iter()
                .filter(|(_, (p, g))| *p > 0 || *g > 0)
                .map(|(tenant, (prompt_tokens, generated_tokens))| Tokens {
                    job: self.config.job.clone(),
                    tenant,
                    start_at,
                    end_at: now,
                    prompt_tokens,
                    generated_tokens,
                })
                .collect::<Vec<Tokens>>();
        }
        let state = State {
            at: now,
            baselines: self.tracker.baselines(),
        };
        Collected::new(
            [Batch::Tokens(records)],
            Some(serde_json::to_value(state).expect("state serializes")),
        )
    }
}

impl Source for TokensSource {
    fn restore(&mut self, state: serde_json::Value) -> Result<(), StateError> {
        let s: State = saved(state)?;
        self.last_at = Some(s.at);
        self.tracker = DeltaTracker::from_baselines(s.baselines);
        Ok(())
    }

    fn collect(&mut self, now: DateTime<Utc>) -> BoxFuture<'_, Result<Collected, SourceError>> {
        Box::pin(async move {
            let text = get_text(&self.client, &self.config.url, Auth::None).await?;
            let totals = parse::parse(&text, self.config.tenant_label.as_deref()).map_err(|e| {
                SourceError::Parse {
                    what: self.config.url.clone(),
                    reason: e.to_string(),
                }
            })?;
            Ok(self.records(&totals, now))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> TokensSource {
        let config: TokensConfig = toml::from_str(
            "url = \"http://x/metrics\"\njob = \"k8s:serving/llm\"\ntenant_label = \"tenant\"\ntenants = { a = \"acme\" }",
        )
        .unwrap();
        TokensSource::new(config, reqwest::Client::new())
    }

    fn scrape(a: (f64, f64), b: (f64, f64)) -> Vec<parse::TokenTotals> {
        let text = format!(
            "vllm:prompt_tokens_total{{model_name=\"m\",tenant=\"a\"}} {}\n\
             vllm:generation_tokens_total{{model_name=\"m\",tenant=\"a\"}} {}\n\
             vllm:prompt_tokens_total{{model_name=\"m\",tenant=\"b\"}} {:e}\n\
             vllm:generation_tokens_total{{model_name=\"m\",tenant=\"b\"}} {}\n",
            a.0, a.1, b.0, b.1
        );
        parse::parse(&text, Some("tenant")).unwrap()
    }

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_790_000_000 + s, 0).unwrap()
    }

    fn sum(cs: &[Collected]) -> (i64, i64) {
        let mut t = (0, 0);
        for c in cs {
            for b in &c.batches {
                if let Batch::Tokens(r) = b {
                    for x in r {
                        t.0 += x.prompt_tokens;
                        t.1 += x.generated_tokens;
                    }
                }
            }
        }
        t
    }

    #[test]
    fn per_tenant_deltas_over_the_scrape_interval() {
        let mut s = source();
        assert!(s
            .records(&scrape((10.0, 5.0), (100.0, 7.0)), at(0))
            .batches
            .is_empty());
        let c = s.records(&scrape((15.0, 9.0), (250.0, 7.0)), at(15));
        let Batch::Tokens(r) = &c.batches[0] else {
            panic!()
        };
        assert_eq!(r.len(), 2);
        assert_eq!(
            (
                r[0].tenant.as_deref(),
                r[0].prompt_tokens,
                r[0].generated_tokens
            ),
            (Some("acme"), 5, 4)
        );
        assert_eq!(
            (
                r[1].tenant.as_deref(),
                r[1].prompt_tokens,
                r[1].generated_tokens
            ),
            (Some("b"), 150, 0)
        );
        assert_eq!((r[0].start_at, r[0].end_at), (at(0), at(15)));
    }

    #[test]
    fn a_restart_from_spooled_state_counts_every_token_once() {
        let mut s = source();
        let mut out = vec![s.records(&scrape((10.0, 5.0), (0.0, 0.0)), at(0))];
        out.push(s.records(&scrape((20.0, 8.0), (0.0, 0.0)), at(15)));
        let state = out.last().unwrap().state.clone().unwrap();
        // The agent dies; a new one takes the spooled state back.
        let mut s = source();
        s.restore(state).unwrap();
        out.push(s.records(&scrape((50.0, 30.0), (1.0, 1.0)), at(60)));
        assert_eq!(sum(&out), (40 + 1, 25 + 1));
        let Batch::Tokens(r) = &out[2].batches[0] else {
            panic!()
        };
        assert_eq!(
            r[0].start_at,
            at(15),
            "the interval continues from the last spooled scrape"
        );
    }
}
