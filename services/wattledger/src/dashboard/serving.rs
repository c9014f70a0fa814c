//! Model serving on a page: the J per token of each phase of a disaggregated deployment (the
//! tenant's and the operator's view), and efficiency by GPU generation (the operator's).

use super::format::{count, energy, grouped};
use rust_decimal::Decimal;
use std::collections::BTreeMap;
use wattledger_domain::device_model;
use wattledger_domain::metrics::{joules_per_token, tokens_per_kwh};
use wattledger_domain::phase::Phase;
use wattledger_store::devices::DeviceUsage;
use wattledger_store::usage::UsageRow;

/// A model served in phases: each phase's energy, tokens and J per token, and the whole
/// deployment's.
pub struct PhaseRow {
    pub model: String,
    pub prefill: String,
    pub prompt_tokens: String,
    pub j_per_prompt_token: String,
    pub decode: String,
    pub generated_tokens: String,
    pub j_per_generated_token: String,
    /// Every pool of the model (a `both` pool too) over every token counted.
    pub j_per_token: String,
}

/// The models with a prefill or decode pool, from usage rows grouped by model and phase.
pub fn phase_rows(by_model_phase: &[UsageRow]) -> Vec<PhaseRow> {
    #[derive(Default)]
    struct Sums {
        phased: bool,
        // (mj, prompt, generated) per phase, and over every pool.
        prefill: (i64, i64, i64),
        decode: (i64, i64, i64),
        all: (i64, i64),
    }
    let mut models: BTreeMap<&str, Sums> = BTreeMap::new();
    for r in by_model_phase {
        let (Some(model), Some(phase)) = (r.model.as_deref(), r.phase.as_deref()) else {
            continue;
        };
        let Some(phase) = Phase::parse(phase) else {
            // A model's rows of jobs that are no pool (its training) are not its serving.
            continue;
        };
        let s = models.entry(model).or_default();
        let mj = r.energy.total_mj();
        let add = |t: &mut (i64, i64, i64)| {
            t.0 += mj;
            t.1 += r.prompt_tokens;
            t.2 += r.generated_tokens;
        };
        match phase {
            Phase::Prefill => add(&mut s.prefill),
            Phase::Decode => add(&mut s.decode),
            Phase::Both => {}
        }
        s.phased |= phase != Phase::Both;
        s.all.0 += mj;
        s.all.1 += r.tokens();
    }
    let j = |mj: i64, tokens: i64| {
        joules_per_token(mj, tokens).map_or_else(|| "–".into(), |j| format!("{} J", grouped(j, 2)))
    };
    models
        .into_iter()
        .filter(|(_, s)| s.phased)
        .map(|(model, s)| PhaseRow {
            model: model.to_owned(),
            prefill: energy(s.prefill.0),
            prompt_tokens: count(s.prefill.1),
            j_per_prompt_token: j(s.prefill.0, s.prefill.1),
            decode: energy(s.decode.0),
            generated_tokens: count(s.decode.2),
            j_per_generated_token: j(s.decode.0, s.decode.2),
            j_per_token: j(s.all.0, s.all.1),
        })
        .collect()
}

/// A model on one GPU device model, fleet-wide.
pub struct GenerationRow {
    pub model: String,
    pub generation: String,
    pub device: String,
    pub energy: String,
    pub tokens: String,
    pub tokens_per_kwh: String,
    pub j_per_token: String,
    /// Tokens per kWh of GPU energy alone.
    pub tokens_per_gpu_kwh: String,
    pub jobs: String,
}

/// The table's rows, a model's devices together, its most efficient first.
pub fn generation_rows(groups: &[DeviceUsage]) -> Vec<GenerationRow> {
    let mut rows: Vec<&DeviceUsage> = groups.iter().collect();
    let per_kwh =
        |d: &DeviceUsage| tokens_per_kwh(d.prompt_tokens + d.generated_tokens, d.total_mj);
    rows.sort_by(|a, b| {
        a.model
            .cmp(&b.model)
            .then_with(|| per_kwh(b).cmp(&per_kwh(a)))
            .then_with(|| a.device_model.cmp(&b.device_model))
    });
    let or_dash = |d: Option<Decimal>, dp| d.map_or_else(|| "–".into(), |d| grouped(d, dp));
    rows.into_iter()
        .map(|d| {
            let tokens = d.prompt_tokens + d.generated_tokens;
            let device = d.device_model.clone().unwrap_or_default();
            GenerationRow {
                model: d.model.clone().unwrap_or_default(),
                generation: device_model::generation(&device),
                device,
                energy: energy(d.total_mj),
                tokens: count(tokens),
                tokens_per_kwh: or_dash(per_kwh(d), 0),
                j_per_token: joules_per_token(d.total_mj, tokens)
                    .map_or_else(|| "–".into(), |j| format!("{} J", grouped(j, 2))),
                tokens_per_gpu_kwh: or_dash(tokens_per_kwh(tokens, d.gpu_mj), 0),
                jobs: count(d.jobs),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattledger_domain::breakdown::EnergyBreakdown;

    fn row(model: &str, phase: &str, gpu_mj: i64, prompt: i64, generated: i64) -> UsageRow {
        UsageRow {
            model: Some(model.into()),
            phase: Some(phase.into()),
            energy: EnergyBreakdown {
                gpu_mj,
                ..Default::default()
            },
            prompt_tokens: prompt,
            generated_tokens: generated,
            ..Default::default()
        }
    }

    #[test]
    fn a_deployment_shows_each_phase_and_the_whole() {
        let rows = [
            row("llama", "prefill", 2_700_000_000, 135_000, 0),
            row("llama", "decode", 3_600_000_000, 0, 120_000),
            // Training the model is not serving it.
            row("llama", "none", 9_000_000_000, 0, 0),
            // A model served on shared GPUs has no phases to show.
            row("mistral", "both", 1_000_000_000, 10, 10),
        ];
        let out = phase_rows(&rows);
        assert_eq!(out.len(), 1);
        let r = &out[0];
        assert_eq!(r.j_per_prompt_token, "20.00 J");
        assert_eq!(r.j_per_generated_token, "30.00 J");
        assert_eq!(r.j_per_token, "24.71 J");
        assert_eq!(
            (r.prefill.as_str(), r.decode.as_str()),
            ("0.8 kWh", "1.0 kWh")
        );
    }
}
