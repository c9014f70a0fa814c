//! Goodput and badput on a page (the tenant's and, per site, the operator's): the share of
//! the energy that went into work that was kept, the badput by how jobs ended, and the jobs
//! that lost the most.

use super::format::{carbon_kg, energy, money, pct};
use rust_decimal::Decimal;
use wattledger_store::badput::Loss;
use wattledger_store::usage::UsageRow;

pub struct BadputView {
    /// Goodput's share of the energy, e.g. "96.2%"; "–" without energy.
    pub goodput_share: String,
    pub badput: String,
    pub badput_cost: String,
    pub badput_carbon: String,
    /// Badput by how the jobs ended, most first: (end state, energy, share of the badput).
    pub by_state: Vec<(String, String, String)>,
    pub losses: Vec<LossRow>,
}

pub struct LossRow {
    pub job: String,
    pub href: String,
    pub tenant: String,
    pub end_state: String,
    pub checkpoint: String,
    pub badput: String,
    /// The badput's share of the job's energy in the range.
    pub share: String,
    pub cost: String,
    pub carbon: String,
}

impl BadputView {
    /// From the range's total, its rows grouped by end state, and its largest losses.
    pub fn of(total: Option<&UsageRow>, by_state: &[UsageRow], losses: &[Loss]) -> BadputView {
        let (total_mj, badput_mj) = total.map_or((0, 0), |t| (t.energy.total_mj(), t.badput_mj));
        let badput_cost: Vec<String> = total
            .into_iter()
            .flat_map(|t| {
                (t.cost_currencies.iter().flatten()).zip(t.badput_cost_amounts.iter().flatten())
            })
            .map(|(c, a)| money(*a, c))
            .collect();
        let mut states: Vec<&UsageRow> = by_state.iter().filter(|r| r.badput_mj > 0).collect();
        states.sort_by_key(|r| std::cmp::Reverse(r.badput_mj));
        BadputView {
            goodput_share: pct(Decimal::from(total_mj - badput_mj), Decimal::from(total_mj)),
            badput: energy(badput_mj),
            badput_cost: if badput_cost.is_empty() {
                "–".into()
            } else {
                badput_cost.join(" + ")
            },
            badput_carbon: total
                .and_then(|t| t.badput_carbon_g)
                .map_or_else(|| "–".into(), carbon_kg),
            by_state: states
                .iter()
                .map(|r| {
                    (
                        r.end_state.clone().unwrap_or_default().replace('_', " "),
                        energy(r.badput_mj),
                        pct(Decimal::from(r.badput_mj), Decimal::from(badput_mj)),
                    )
                })
                .collect(),
            losses: losses.iter().map(loss_row).collect(),
        }
    }
}

fn loss_row(l: &Loss) -> LossRow {
    LossRow {
        href: format!("/jobs/{}", super::segment(&l.job)),
        job: l.job.clone(),
        tenant: l.tenant.clone(),
        end_state: l
            .end_state
            .map_or("–".into(), |s| s.as_str().replace('_', " ")),
        checkpoint: l.last_checkpoint_at.map_or_else(
            || "none".into(),
            |c| c.format("%b %-d, %H:%M UTC").to_string(),
        ),
        badput: energy(l.badput_mj),
        share: pct(Decimal::from(l.badput_mj), Decimal::from(l.total_mj)),
        cost: l
            .badput_cost
            .map_or_else(|| "–".into(), |c| money(c, &l.currency)),
        carbon: l.badput_carbon_g.map_or_else(|| "–".into(), carbon_kg),
    }
}
