//! Token counters of inference servers (vLLM, SGLang, Triton's vLLM backend, TGI) to
//! per-interval token counts.
//!
//! Facts (shared/fixtures/inference/INFERENCE-NOTES.md): vLLM and SGLang expose
//! `*:prompt_tokens_total` and `*:generation_tokens_total` counters labelled `model_name`
//! (vLLM V1 adds `engine` per engine core: those add up); Triton's vLLM backend labels them
//! `model` and `version`; SGLang may label `tp_rank`/`pp_rank`, where every rank reports the
//! same tokens, so one rank is counted; TGI has histograms whose `_sum`s are token totals.
//! Values are floats, often in scientific notation, and counters restart at zero when the
//! server restarts.

use crate::sources::prom::{self, Sample};
use std::collections::BTreeMap;

/// Cumulative token counts of one model (and tenant, where the server labels one).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenTotals {
    /// The served model; `None` for servers that do not say (TGI serves one model).
    pub model: Option<String>,
    pub tenant: Option<String>,
    pub prompt: f64,
    pub generated: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("the scrape is not Prometheus text: {0}")]
    Format(#[from] prom::ParseError),
    #[error("no token counters found (vLLM, SGLang, Triton vLLM backend or TGI)")]
    NoCounters,
}

#[derive(Clone, Copy)]
enum Kind {
    Prompt,
    Generated,
}

fn kind_of(name: &str) -> Option<Kind> {
    match name {
        "vllm:prompt_tokens_total"
        | "sglang:prompt_tokens_total"
        | "tgi_request_input_length_sum" => Some(Kind::Prompt),
        "vllm:generation_tokens_total"
        | "sglang:generation_tokens_total"
        | "tgi_request_generated_tokens_sum" => Some(Kind::Generated),
        _ => None,
    }
}

/// Every rank of a tensor- or pipeline-parallel group reports the same tokens: count rank 0.
fn counted_rank(s: &Sample) -> bool {
    ["tp_rank", "pp_rank"]
        .iter()
        .all(|l| s.label(l).is_none_or(|r| r == "0"))
}

fn model_of(s: &Sample) -> Option<String> {
    if let Some(m) = s.label("model_name") {
        return Some(m.to_owned());
    }
    // Triton names models `model` with a `version`.
    s.label("model").map(|m| match s.label("version") {
        Some(v) if !v.is_empty() => format!("{m}/{v}"),
        _ => m.to_owned(),
    })
}

/// Reads the token counters of a scrape, summed per model and tenant. `tenant_label` names
/// the label that carries a tenant on shared endpoints, if the deployment adds one.
pub fn parse(text: &str, tenant_label: Option<&str>) -> Result<Vec<TokenTotals>, TokenError> {
    let scrape = prom::parse(text)?;
    let mut totals: BTreeMap<(Option<String>, Option<String>), (f64, f64)> = BTreeMap::new();
    let mut found = false;
    for s in &scrape.samples {
        let Some(kind) = kind_of(&s.name) else {
            continue;
        };
        found = true;
        if !counted_rank(s) || !s.value.is_finite() || s.value < 0.0 {
            continue;
        }
        let tenant = tenant_label.and_then(|l| s.label(l)).map(str::to_owned);
        let entry = totals.entry((model_of(s), tenant)).or_default();
        match kind {
            Kind::Prompt => entry.0 += s.value,
            Kind::Generated => entry.1 += s.value,
        }
    }
    if !found {
        return Err(TokenError::NoCounters);
    }
    Ok(totals
        .into_iter()
        .map(|((model, tenant), (prompt, generated))| TokenTotals {
            model,
            tenant,
            prompt,
            generated,
        })
        .collect())
}

/// Tokens served since the previous scrape, per model and tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenDelta {
    pub model: Option<String>,
    pub tenant: Option<String>,
    pub prompt: i64,
    pub generated: i64,
    /// The counters went backwards: the server restarted and counts from zero.
    pub reset: bool,
}

/// Turns successive totals into deltas. Integer deltas of rounded totals telescope: the sum
/// of the deltas is exactly the counter's growth, so no token is lost or invented between
/// intervals. The first scrape of a series sets its baseline and yields no delta.
#[derive(Debug, Default)]
pub struct DeltaTracker {
    last: BTreeMap<(Option<String>, Option<String>), (i64, i64)>,
}

/// One series' last totals, as the tracker keeps them between runs of the agent.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Baseline {
    pub model: Option<String>,
    pub tenant: Option<String>,
    pub prompt: i64,
    pub generated: i64,
}

impl DeltaTracker {
    /// The baselines to keep, so a restarted agent counts on from where it stopped.
    pub fn baselines(&self) -> Vec<Baseline> {
        self.last
            .iter()
            .map(|((model, tenant), (prompt, generated))| Baseline {
                model: model.clone(),
                tenant: tenant.clone(),
                prompt: *prompt,
                generated: *generated,
            })
            .collect()
    }

    pub fn from_baselines(baselines: Vec<Baseline>) -> Self {
        DeltaTracker {
            last: baselines
                .into_iter()
                .map(|b| ((b.model, b.tenant), (b.prompt, b.generated)))
                .collect(),
        }
    }

    pub fn observe(&mut self, totals: &[TokenTotals]) -> Vec<TokenDelta> {
        let mut out = Vec::new();
        for t in totals {
            let now = (t.prompt.round() as i64, t.generated.round() as i64);
            let key = (t.model.clone(), t.tenant.clone());
            if let Some(prev) = self.last.insert(key, now) {
                let reset = now.0 < prev.0 || now.1 < prev.1;
                // After a restart the counter holds what was served since: all of it is new.
                let (prompt, generated) = if reset {
                    now
                } else {
                    (now.0 - prev.0, now.1 - prev.1)
                };
                out.push(TokenDelta {
                    model: t.model.clone(),
                    tenant: t.tenant.clone(),
                    prompt,
                    generated,
                    reset,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use proptest::prelude::*;

    #[test]
    fn vllm_docs_example() {
        let t = parse(
            &fixtures::read("inference/vllm-metrics-docs-example.prom"),
            None,
        )
        .unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(
            t[0].model.as_deref(),
            Some("meta-llama/Llama-3.1-8B-Instruct")
        );
        // The doc example has no prompt counter line.
        assert_eq!((t[0].prompt, t[0].generated), (0.0, 27453.0));
    }

    #[test]
    fn sglang_scientific_notation() {
        let t = parse(
            &fixtures::read("inference/sglang-metrics-docs-example.prom"),
            None,
        )
        .unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!((t[0].prompt, t[0].generated), (8_128_902.0, 7_557_572.0));
    }

    #[test]
    fn triton_vllm_backend_uses_model_and_version() {
        let t = parse(
            &fixtures::read("inference/triton-vllm-backend-metrics.prom"),
            None,
        )
        .unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].model.as_deref(), Some("vllm_model/1"));
        assert_eq!((t[0].prompt, t[0].generated), (10.0, 16.0));
    }

    #[test]
    fn trtllm_has_no_lifetime_token_counters() {
        // Its token numbers are per-iteration gauges; rating them would be wrong.
        let err = parse(
            &fixtures::read("inference/triton-trtllm-backend-metrics.prom"),
            None,
        )
        .unwrap_err();
        assert!(matches!(err, TokenError::NoCounters));
    }

    #[test]
    fn engines_add_up_ranks_do_not_and_tenants_stay_apart() {
        let text = "\
vllm:prompt_tokens_total{engine=\"0\",model_name=\"m\",tenant=\"a\"} 100
vllm:prompt_tokens_total{engine=\"1\",model_name=\"m\",tenant=\"a\"} 50
vllm:prompt_tokens_total{engine=\"0\",model_name=\"m\",tenant=\"b\"} 7
sglang:generation_tokens_total{model_name=\"s\",tp_rank=\"0\"} 1.5e3
sglang:generation_tokens_total{model_name=\"s\",tp_rank=\"1\"} 1.5e3
tgi_request_input_length_sum 300
tgi_request_generated_tokens_sum 120
";
        let t = parse(text, Some("tenant")).unwrap();
        let get = |m: Option<&str>, tenant: Option<&str>| {
            t.iter()
                .find(|x| x.model.as_deref() == m && x.tenant.as_deref() == tenant)
                .unwrap()
        };
        assert_eq!(get(Some("m"), Some("a")).prompt, 150.0);
        assert_eq!(get(Some("m"), Some("b")).prompt, 7.0);
        assert_eq!(get(Some("s"), None).generated, 1500.0);
        assert_eq!(
            (get(None, None).prompt, get(None, None).generated),
            (300.0, 120.0)
        );
    }

    #[test]
    fn deltas_with_a_restart() {
        let totals = |p: f64, g: f64| {
            vec![TokenTotals {
                model: Some("m".into()),
                tenant: None,
                prompt: p,
                generated: g,
            }]
        };
        let mut d = DeltaTracker::default();
        assert!(d.observe(&totals(1000.0, 400.0)).is_empty());
        let x = d.observe(&totals(1500.0, 600.0));
        assert_eq!((x[0].prompt, x[0].generated, x[0].reset), (500, 200, false));
        let x = d.observe(&totals(30.0, 10.0));
        assert_eq!((x[0].prompt, x[0].generated, x[0].reset), (30, 10, true));
    }

    proptest! {
        /// Without restarts, the deltas add up to the counter's growth exactly, whatever
        /// rounding the exporter's float printing introduced.
        #[test]
        fn deltas_telescope(steps in proptest::collection::vec(0.0f64..1.0e6, 1..50), start in 0.0f64..1.0e9) {
            let mut d = DeltaTracker::default();
            let mut total = start;
            let obs = |v: f64| vec![TokenTotals { model: None, tenant: None, prompt: v, generated: 0.0 }];
            d.observe(&obs(total));
            let mut sum = 0;
            for s in steps {
                total += s;
                sum += d.observe(&obs(total))[0].prompt;
            }
            prop_assert_eq!(sum, total.round() as i64 - start.round() as i64);
        }
    }
}
