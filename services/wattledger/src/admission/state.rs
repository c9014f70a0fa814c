//! The admission state held in memory: sites with their envelopes, reservations, forecasts
//! (carbon, price, carbon-free share) and contracted clean energy, tenants with their
//! policies and budgets, learned draw. Built from what [`load_slow`] reads and the stored
//! reservations; changed only by [`Hot::apply`] (this replica's decisions) and
//! [`Hot::count`] (stored ones).

use chrono::{DateTime, Duration, Utc};
use rust_decimal::Decimal;
use sqlx::PgPool;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;
use uuid::Uuid;
use wattledger_domain::admission::budget::{Budget, JobAmounts, Metric};
use wattledger_domain::admission::carbon_free::CleanSupply;
use wattledger_domain::admission::envelope::{Reservation, Reserved, MEASURED_OVER};
use wattledger_domain::admission::forecast::{Forecast, Point};
use wattledger_domain::admission::oversubscription::Factors;
use wattledger_domain::admission::{GridWindow, Policy, Site};
use wattledger_domain::cfe::Delivery;
use wattledger_domain::job_kind::JobKind;
use wattledger_domain::signals::{Basis, Signal};
use wattledger_store::admission as store;
use wattledger_store::grid_events;
use wattledger_store::power_policy::{self, SitePolicy};
use wattledger_store::{Scope, StoreResult};

/// Forecasts are loaded this far ahead (and the envelope searched as far).
pub(super) const HORIZON_DAYS: i64 = 7;
/// History the learned draw is taken from.
pub(super) const LEARN_DAYS: i64 = 30;

pub(super) struct SiteHot {
    pub(super) id: i64,
    pub(super) site: Site,
}

pub(super) struct BudgetHot {
    pub(super) model: Option<String>,
    pub(super) starts_at: DateTime<Utc>,
    pub(super) ends_at: DateTime<Utc>,
    pub(super) budget: Budget,
}

pub(super) struct TenantHot {
    pub(super) id: i64,
    pub(super) policy: Policy,
    pub(super) budgets: Vec<BudgetHot>,
}

/// A decision of this replica the database may not show yet.
pub(super) struct Pending {
    pub(super) id: Uuid,
    pub(super) made: Instant,
    pub(super) site: usize,
    pub(super) tenant: String,
    pub(super) model: Option<String>,
    pub(super) reservation: Reservation,
    pub(super) amounts: JobAmounts,
    pub(super) start_at: DateTime<Utc>,
}

#[derive(Default)]
pub(super) struct Hot {
    pub(super) ready: bool,
    /// Changes with every reservation and refresh: a decision taken on an older state is
    /// taken again before it reserves.
    pub(super) generation: u64,
    pub(super) sites: Vec<SiteHot>,
    pub(super) site_by_key: HashMap<String, usize>,
    pub(super) tenants: HashMap<String, TenantHot>,
    pub(super) learned: HashMap<(i64, Option<String>, JobKind), i64>,
    pub(super) typical: HashMap<String, i64>,
    pub(super) pending: Vec<Pending>,
    /// Decisions counted in this state (from the database or taken here).
    pub(super) known: HashSet<Uuid>,
    /// When the database was last read for decisions.
    pub(super) looked_at: DateTime<Utc>,
    pub(super) site_by_id: HashMap<i64, usize>,
    pub(super) tenant_by_id: HashMap<i64, String>,
    pub(super) model_by_id: Arc<HashMap<i64, String>>,
}

/// What reloads every `SLOW_EVERY` refreshes.
pub(super) struct Slow {
    pub(super) sites: Vec<store::SiteRow>,
    pub(super) draw: HashMap<i64, i64>,
    pub(super) points: Vec<store::SignalPoint>,
    pub(super) budgets: Vec<wattledger_store::budgets::BudgetState>,
    pub(super) models: Arc<HashMap<i64, String>>,
    pub(super) policies: HashMap<i64, store::PolicyRow>,
    pub(super) learned: Vec<store::LearnedDraw>,
    pub(super) typical: HashMap<String, i64>,
    pub(super) power: HashMap<i64, (SitePolicy, Factors)>,
    /// Grid events from an hour ago to the horizon, per site.
    pub(super) grid_events: HashMap<i64, Vec<GridWindow>>,
    /// Contracted clean energy from an hour ago to the horizon, per site.
    pub(super) clean_energy: HashMap<i64, Vec<Delivery>>,
}

impl Hot {
    /// Counts a decision against its site's envelope and its tenant's budgets.
    pub(super) fn apply(&mut self, p: Pending) {
        if let Some(s) = self.sites.get_mut(p.site) {
            s.site.reserved.add(p.reservation);
        }
        if let Some(t) = self.tenants.get_mut(&p.tenant) {
            add_to_budgets(&mut t.budgets, p.model.as_deref(), p.start_at, &p.amounts);
        }
        self.known.insert(p.id);
        self.pending.push(p);
        self.generation = self.generation.wrapping_add(1);
    }

    /// Counts a stored decision, once: its reservation against its site's envelope while it
    /// lasts, its estimate against its tenant's budgets until it is joined to its job.
    pub(super) fn count(&mut self, r: &store::ReservationRow, now: DateTime<Utc>) {
        if !self.known.insert(r.id) {
            return;
        }
        if r.end_at > now {
            if let Some(&i) = self.site_by_id.get(&r.site_id) {
                self.sites[i].site.reserved.add(Reservation {
                    start: r.start_at,
                    end: r.end_at,
                    draw_w: r.reserved_w,
                });
            }
        }
        if !r.joined {
            let model = r.model_id.and_then(|m| self.model_by_id.get(&m)).cloned();
            let tenant = self.tenant_by_id.get(&r.tenant_id).cloned();
            if let Some(t) = tenant.and_then(|k| self.tenants.get_mut(&k)) {
                let amounts = JobAmounts {
                    kwh: r.kwh.unwrap_or_default(),
                    cost: r.cost.zip(r.currency.clone()),
                    carbon_kg: r.carbon_kg,
                };
                add_to_budgets(&mut t.budgets, model.as_deref(), r.start_at, &amounts);
            }
        }
        self.generation = self.generation.wrapping_add(1);
    }
}

fn add_to_budgets(
    budgets: &mut [BudgetHot],
    model: Option<&str>,
    at: DateTime<Utc>,
    a: &JobAmounts,
) {
    for b in budgets {
        if b.starts_at > at || at >= b.ends_at || (b.model.is_some() && b.model.as_deref() != model)
        {
            continue;
        }
        b.budget.used += a.of(&b.budget.metric).unwrap_or_default();
    }
}

pub(super) async fn load_slow(pool: &PgPool, now: DateTime<Utc>) -> StoreResult<Slow> {
    let policies = power_policy::list(pool, None).await?;
    let mut factors = power_policy::factors(pool, &policies, now).await?;
    let mut grid_events: HashMap<i64, Vec<GridWindow>> = HashMap::new();
    for e in grid_events::overlapping(
        pool,
        None,
        now - Duration::hours(1),
        now + Duration::days(HORIZON_DAYS),
    )
    .await?
    {
        grid_events.entry(e.site_id).or_default().push(GridWindow {
            id: e.id,
            key: e.key,
            start: e.starts_at,
            end: e.ends_at,
        });
    }
    Ok(Slow {
        grid_events,
        clean_energy: store::clean_energy(
            pool,
            now - Duration::hours(1),
            now + Duration::days(HORIZON_DAYS),
        )
        .await?,
        power: policies
            .into_iter()
            .map(|p| {
                let f = factors.remove(&p.site_id).unwrap_or_default();
                (p.site_id, (p, f))
            })
            .collect(),
        sites: store::sites(pool).await?,
        draw: store::site_draw(pool, now).await?,
        points: store::signal_points(
            pool,
            now - Duration::hours(1),
            now + Duration::days(HORIZON_DAYS),
        )
        .await?,
        // Every budget over its period containing now (a custom one: its own range); a
        // question counts against those its job's start falls in.
        budgets: wattledger_store::budgets::list(pool, &Scope::All, None, now).await?,
        models: Arc::new(wattledger_store::inventory::model_keys(pool).await?),
        policies: store::policies(pool, &Scope::All)
            .await?
            .into_iter()
            .map(|p| (p.tenant_id, p))
            .collect(),
        learned: store::learned_draw(pool, &Scope::All, now - Duration::days(LEARN_DAYS)).await?,
        typical: store::typical_draw(pool).await?,
    })
}

pub(super) fn build(
    slow: &Slow,
    tenants: &HashMap<String, i64>,
    reservations: &[store::ReservationRow],
    now: DateTime<Utc>,
) -> Hot {
    // One forecast per (region, signal), shared by the sites on it.
    let mut series: HashMap<(&str, &Signal), Vec<Point>> = HashMap::new();
    for p in &slow.points {
        series
            .entry((&p.region, &p.signal))
            .or_default()
            .push(Point {
                start: p.start_at,
                end: p.end_at,
                value: p.value,
            });
    }
    let forecasts: HashMap<(&str, &Signal), Arc<Forecast>> = series
        .into_iter()
        .map(|(k, v)| (k, Arc::new(Forecast::new(v))))
        .collect();
    let forecast = |region: &str, signal: Signal| -> Arc<Forecast> {
        forecasts
            .get(&(region, &signal))
            .cloned()
            .unwrap_or_default()
    };
    let carbon = |basis| Signal::Carbon { basis };
    let mut hot = Hot {
        ready: true,
        ..Hot::default()
    };
    for s in &slow.sites {
        let power = slow.power.get(&s.id);
        hot.site_by_key.insert(s.key.clone(), hot.sites.len());
        hot.site_by_id.insert(s.id, hot.sites.len());
        hot.sites.push(SiteHot {
            id: s.id,
            site: Site {
                oversubscription: power.map(|p| p.1.clone()).unwrap_or_default(),
                power_cap_w: power.and_then(|p| p.0.policy.power_cap_w),
                grid_events: slow.grid_events.get(&s.id).cloned().unwrap_or_default(),
                key: s.key.clone(),
                envelope_w: s.envelope_w,
                draw_w: slow.draw.get(&s.id).copied(),
                pue: s.pue,
                currency: s.currency.clone(),
                reserved: Reserved::default(),
                carbon_average: forecast(&s.grid_region, carbon(Basis::Average)),
                carbon_marginal: forecast(&s.grid_region, carbon(Basis::Marginal)),
                price: forecast(
                    &s.price_region,
                    Signal::Price {
                        currency: s.currency.clone(),
                    },
                ),
                carbon_free: forecast(&s.grid_region, Signal::CarbonFree),
                clean_supply: Arc::new(CleanSupply::new(
                    slow.clean_energy.get(&s.id).map_or(&[][..], Vec::as_slice),
                )),
            },
        });
    }
    for (key, id) in tenants {
        let policy = slow
            .policies
            .get(id)
            .map(|p| Policy {
                threshold_pct: p.threshold_pct,
                carbon_weight: p.carbon_weight,
                cfe_weight: p.cfe_weight,
                marginal: p.basis == Basis::Marginal,
                bypass: p.bypass_priorities.clone(),
                bypass_budget: p.budget_bypass_priorities.clone(),
                horizon: Duration::days(HORIZON_DAYS),
            })
            .unwrap_or_default();
        hot.tenants.insert(
            key.clone(),
            TenantHot {
                id: *id,
                policy,
                budgets: Vec::new(),
            },
        );
    }
    for b in &slow.budgets {
        let Some(t) = hot.tenants.get_mut(&b.tenant) else {
            continue;
        };
        let mut push = |metric: Metric, limit: Option<Decimal>, used: Decimal| {
            if let Some(limit) = limit {
                t.budgets.push(BudgetHot {
                    model: b.model.clone(),
                    starts_at: b.period_start,
                    ends_at: b.period_end,
                    budget: Budget {
                        name: b.key.clone(),
                        metric,
                        limit,
                        used,
                        hard: b.hard,
                    },
                });
            }
        };
        push(Metric::EnergyKwh, b.limit_kwh, b.used_kwh);
        if let Some(c) = &b.currency {
            push(
                Metric::Cost {
                    currency: c.clone(),
                },
                b.limit_cost,
                b.used_cost,
            );
        }
        push(Metric::CarbonKg, b.limit_carbon_kg, b.used_carbon_kg);
    }
    hot.tenant_by_id = tenants.iter().map(|(k, id)| (*id, k.clone())).collect();
    hot.model_by_id = Arc::clone(&slow.models);
    for r in reservations {
        hot.count(r, now);
    }
    for s in &mut hot.sites {
        // Kept from the measurement's start: the envelope reads what was reserved then.
        s.site.reserved.prune(now - MEASURED_OVER);
    }
    for l in &slow.learned {
        hot.learned
            .insert((l.tenant_id, l.model.clone(), l.kind), l.gpu_draw_w);
    }
    hot.typical = slow.typical.clone();
    hot
}
