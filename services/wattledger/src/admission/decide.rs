//! The decision on one question: checked against the state, decided by the domain's
//! policy under a shared lock, reserved under the state's own lock only when it takes
//! power, and handed to the writer.

use super::api::{validate, Answer, Answered, Ask, AskError, PowerSource, Savings};
use super::state::{Hot, Pending, LEARN_DAYS};
use super::{writer, Admission};
use chrono::{DateTime, Duration, Utc};
use rust_decimal::Decimal;
use std::time::Instant;
use uuid::Uuid;
use wattledger_domain::admission::budget::Budget;
use wattledger_domain::admission::envelope::Reservation;
use wattledger_domain::admission::{decide, Estimate, Job, Site, Verdict};
use wattledger_store::admission as store;

impl Admission {
    /// Decides on one job: validated here, decided on the hot state, reserved at once, and
    /// handed to the writer; a dry run (the question's, or Kubernetes `dryRun`) answers the
    /// same but reserves and stores nothing.
    pub fn ask_maybe_dry(
        &self,
        ask: &Ask,
        source: &str,
        now: DateTime<Utc>,
        dry_run: bool,
    ) -> Result<Answered, AskError> {
        self.ask_keyed(ask, source, now, dry_run, None)
    }

    /// As `ask_maybe_dry`, the decision stored under the asker's idempotency key (see
    /// `idempotency`, which looks the key up first).
    pub(super) fn ask_keyed(
        &self,
        ask: &Ask,
        source: &str,
        now: DateTime<Utc>,
        dry_run: bool,
        key: Option<&str>,
    ) -> Result<Answered, AskError> {
        let dry_run = dry_run || ask.dry_run;
        let bad = validate(ask, now);
        // Decided under a shared lock, so decisions run side by side; only a decision that
        // reserves takes the state for itself, and decides again if another reservation or a
        // refresh changed the state meanwhile.
        let (mut p, seen) = {
            let hot = self.hot.read();
            (
                hot.prepare(ask, bad.clone(), now, self.default_gpu_w)?,
                hot.generation,
            )
        };
        // A place in the writer's queue first: a decision is stored, or not taken.
        let permit = if dry_run {
            None
        } else {
            Some(self.tx.try_reserve().map_err(|_| AskError::Backlog)?)
        };
        let id = Uuid::now_v7();
        let mut site_id = None;
        if !dry_run && p.reserves().is_some() {
            let mut hot = self.hot.write();
            if hot.generation != seen {
                p = hot.prepare(ask, bad, now, self.default_gpu_w)?;
            }
            if let Some((i, r)) = p.reserves() {
                let amounts =
                    p.d.at_start
                        .as_ref()
                        .map(Estimate::amounts)
                        .unwrap_or_default();
                hot.apply(Pending {
                    id,
                    made: Instant::now(),
                    site: i,
                    tenant: ask.tenant.clone(),
                    model: ask.model.clone(),
                    reservation: r,
                    amounts,
                    start_at: p.d.start_at.unwrap_or(now),
                });
                site_id = Some(hot.sites[i].id);
            }
        }
        let reservation = site_id.and(p.d.reservation);
        let Prepared {
            d,
            power,
            tenant_id,
            ..
        } = p;
        let savings = match (&d.now, &d.at_start) {
            (Some(a), Some(b)) if d.verdict == Verdict::Defer || a.site != b.site => {
                let diff = |x: Option<Decimal>, y: Option<Decimal>| Some(x? - y?);
                Some(Savings {
                    carbon_marginal_kg: diff(a.carbon_marginal_kg, b.carbon_marginal_kg),
                    carbon_average_kg: diff(a.carbon_average_kg, b.carbon_average_kg),
                    cost: (a.currency == b.currency)
                        .then(|| diff(a.cost, b.cost))
                        .flatten(),
                })
            }
            _ => None,
        };
        let answer = Answer {
            decision_id: id,
            decided_at: now,
            decision: d.verdict,
            start_at: d.start_at,
            start_at_unix: d.start_at.map(|t| t.timestamp()),
            site: d.site,
            reasons: d.reasons,
            estimate_now: d.now,
            estimate_at_start: d.at_start,
            savings,
            budgets: d.budgets,
            power_cap_w: d.power_cap_w,
            power,
        };
        let json = answer_json(&answer);
        // Only a decision that is stored needs its record: a what-if builds none.
        if let Some(permit) = permit {
            permit.send(writer::Decided {
                record: store::NewDecision {
                    id,
                    decided_at: now,
                    tenant_id,
                    source: source.into(),
                    job_name: ask.job_name.clone(),
                    job_key: ask.job_key.clone(),
                    kind: ask.kind,
                    priority: ask.priority.clone(),
                    gpus: i32::try_from(ask.gpus).unwrap_or(i32::MAX),
                    decision: answer.decision,
                    site_id,
                    start_at: reservation.map(|r| r.start),
                    end_at: reservation.map(|r| r.end),
                    reserved_w: reservation.map(|r| r.draw_w),
                    model: ask.model.clone(),
                    est_kwh: answer.estimate_at_start.as_ref().map(|e| e.kwh),
                    est_cost: answer.estimate_at_start.as_ref().and_then(|e| e.cost),
                    est_currency: answer
                        .estimate_at_start
                        .as_ref()
                        .map(|e| e.currency.clone()),
                    est_carbon_kg: answer
                        .estimate_at_start
                        .as_ref()
                        .and_then(|e| e.carbon_average_kg),
                    grid_event_id: d.moved.map(|m| m.event_id),
                    moved_mj: d.moved.map(|m| m.mj),
                    // The question is serialised by the writer, off the request path; the
                    // answer is the body just written for the asker.
                    request: String::new(),
                    answer: json.clone(),
                    idempotency_key: key.map(str::to_owned),
                },
                ask: ask.clone(),
            });
        }
        Ok(Answered { answer, json })
    }
}

/// Room for an answer's JSON (reasons, two estimates, budgets: 1–2 KB), so that writing it
/// seldom grows the buffer.
const ANSWER_JSON_CAPACITY: usize = 2048;

fn answer_json(answer: &Answer) -> String {
    let mut out = Vec::with_capacity(ANSWER_JSON_CAPACITY);
    // An answer holds only strings, numbers, times and decimals: writing it cannot fail, and
    // serde_json writes UTF-8.
    let _ = serde_json::to_writer(&mut out, answer);
    String::from_utf8(out).unwrap_or_default()
}

/// A decision taken on the state, not yet applied to it.
struct Prepared {
    d: wattledger_domain::admission::Decision,
    power: PowerSource,
    tenant_id: i64,
    /// The chosen site's index in the state.
    site: Option<usize>,
}

impl Prepared {
    /// The site and reservation this decision takes, if it takes one.
    fn reserves(&self) -> Option<(usize, Reservation)> {
        match (self.site, self.d.reservation) {
            (Some(i), Some(r)) if self.d.verdict != Verdict::Reject => Some((i, r)),
            _ => None,
        }
    }
}

impl Hot {
    /// Checks what needs the state (tenant, sites) and decides, without changing anything.
    fn prepare(
        &self,
        ask: &Ask,
        mut bad: Vec<(&'static str, String)>,
        now: DateTime<Utc>,
        default_gpu_w: u32,
    ) -> Result<Prepared, AskError> {
        if !self.ready {
            return Err(AskError::NotReady);
        }
        let tenant = self.tenants.get(&ask.tenant);
        if tenant.is_none() && !ask.tenant.trim().is_empty() {
            bad.push(("tenant", format!("unknown tenant '{}'", ask.tenant)));
        }
        let mut candidates: Vec<usize> = Vec::new();
        if ask.sites.is_empty() {
            candidates.extend(0..self.sites.len());
        } else {
            for key in &ask.sites {
                match self.site_by_key.get(key) {
                    Some(i) => candidates.push(*i),
                    None => bad.push(("sites", format!("unknown site '{key}'"))),
                }
            }
        }
        let Some(tenant) = tenant.filter(|_| bad.is_empty()) else {
            return Err(AskError::Fields(bad));
        };
        let earliest = ask.earliest_start.unwrap_or(now);
        let power = self.power(ask, tenant.id, default_gpu_w);
        let mut budgets: Vec<Budget> = tenant
            .budgets
            .iter()
            .filter(|b| b.model.is_none() || b.model == ask.model)
            .filter(|b| b.starts_at <= earliest.max(now) && earliest.max(now) < b.ends_at)
            .map(|b| b.budget.clone())
            .collect();
        budgets.sort_by_key(|b| std::cmp::Reverse(b.hard));
        let job = Job {
            gpus: u32::try_from(ask.gpus).unwrap_or(u32::MAX),
            gpu_draw_w: power.gpu_draw_w,
            duration: Duration::seconds(ask.duration_s),
            kind: ask.kind,
            earliest_start: earliest,
            deadline: ask.deadline,
            priority: ask.priority.clone(),
        };
        let sites: Vec<&Site> = candidates.iter().map(|i| &self.sites[*i].site).collect();
        let d = decide(&job, &sites, &budgets, &tenant.policy, now);
        let site = d
            .site
            .as_ref()
            .and_then(|k| self.site_by_key.get(k).copied());
        Ok(Prepared {
            d,
            power,
            tenant_id: tenant.id,
            site,
        })
    }

    /// The draw per GPU: asked, learned from the tenant's history (same model and kind, then
    /// any model of that kind), the device's typical draw, or the server default.
    fn power(&self, ask: &Ask, tenant: i64, default_w: u32) -> PowerSource {
        if let Some(w) = ask.power_per_gpu_w {
            return PowerSource {
                gpu_draw_w: w as u32,
                source: "request".into(),
            };
        }
        let learned = |model: Option<String>| self.learned.get(&(tenant, model, ask.kind)).copied();
        if let Some(m) = &ask.model {
            if let Some(w) = learned(Some(m.clone())) {
                return PowerSource {
                    gpu_draw_w: w.clamp(1, 10_000) as u32,
                    source: format!(
                        "learned: {}'s {} jobs of {m} over {LEARN_DAYS} days",
                        ask.tenant, ask.kind
                    ),
                };
            }
        }
        if let Some(w) = learned(None) {
            return PowerSource {
                gpu_draw_w: w.clamp(1, 10_000) as u32,
                source: format!(
                    "learned: {}'s {} jobs over {LEARN_DAYS} days",
                    ask.tenant, ask.kind
                ),
            };
        }
        if let Some(w) = ask.gpu_model.as_ref().and_then(|m| self.typical.get(m)) {
            return PowerSource {
                gpu_draw_w: (*w).clamp(1, 10_000) as u32,
                source: format!("device_typical: {}", ask.gpu_model.as_deref().unwrap_or("")),
            };
        }
        PowerSource {
            gpu_draw_w: default_w,
            source: "default: no history and no typical draw for this device".into(),
        }
    }
}
