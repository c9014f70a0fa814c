//! One decision, rule by rule, in the order the module's documentation gives them: the
//! budgets ([`budgets`]), the deadline ([`latest_start`]), the priority bypass ([`bypass`]),
//! then every start each site allows ([`Candidates::site`]: the envelope, grid events, a power
//! cap), the choice among them on carbon, price and carbon-free share ([`choose`]), and the
//! answer ([`answer`]).

use super::envelope::Envelope;
use super::*;

/// Decides on one job. `sites` are the candidates in the caller's order of preference;
/// `budgets` are the tenant's, with what they have used so far.
pub fn decide(
    job: &Job,
    sites: &[&Site],
    budgets: &[Budget],
    policy: &Policy,
    now: DateTime<Utc>,
) -> Decision {
    let start0 = job.earliest_start.max(now);
    let Some(first) = sites.first() else {
        return reject(vec!["no candidate site".into()], None, Vec::new());
    };
    let now_first = job.estimate(first, start0);
    let (checked, remaining) = self::budgets(job, budgets, policy, &now_first);
    let mut reasons = match checked {
        Ok(reasons) => reasons,
        Err(why) => return reject(vec![why], Some(now_first), remaining),
    };
    let latest = match latest_start(job, start0, policy) {
        Ok(latest) => latest,
        Err(why) => return reject(vec![why], Some(now_first), remaining),
    };
    if policy.bypass.contains(&job.priority) {
        return bypass(job, first, start0, now_first, reasons, remaining);
    }
    let mut candidates = Candidates::default();
    for (i, site) in sites.iter().enumerate() {
        candidates.site(job, i, site, start0, latest, policy, now);
    }
    if candidates.options.is_empty() {
        let mut why: Vec<String> = candidates.blocked.into_iter().map(|b| b.1).collect();
        why.push(match job.deadline {
            Some(_) => "no window with power headroom before the deadline".into(),
            None => format!(
                "no window with power headroom within {} h",
                policy.horizon.num_hours()
            ),
        });
        return reject(why, Some(now_first), remaining);
    }
    let chosen = choose(&mut candidates, job, sites, policy, start0, &mut reasons);
    answer(job, sites, &candidates, chosen, start0, budgets, reasons)
}

fn reject(reasons: Vec<String>, now: Option<Estimate>, budgets: Vec<Remaining>) -> Decision {
    Decision {
        verdict: Verdict::Reject,
        site: None,
        start_at: None,
        reasons,
        now,
        at_start: None,
        budgets,
        reservation: None,
        power_cap_w: None,
        moved: None,
    }
}

/// Rule 1, on the job started as early as possible at the first site: the reasons so far
/// (its budget warnings, or that its priority is not held to budgets), or the reason a hard
/// budget refuses it; and what the budgets have left.
fn budgets(
    job: &Job,
    budgets: &[Budget],
    policy: &Policy,
    now_first: &Estimate,
) -> (Result<Vec<String>, String>, Vec<Remaining>) {
    let verdict = budget::check(budgets, &now_first.amounts());
    let checked = if policy.bypass_budget.contains(&job.priority) {
        Ok(vec![format!(
            "priority '{}' is not held to budgets",
            job.priority
        )])
    } else {
        verdict.reject.map_or(Ok(verdict.warnings), Err)
    };
    (checked, verdict.remaining)
}

/// The latest start the job may take: before its deadline less its run, or, without one,
/// within the policy's horizon; `Err` when the deadline leaves no start at all.
fn latest_start(
    job: &Job,
    start0: DateTime<Utc>,
    policy: &Policy,
) -> Result<DateTime<Utc>, String> {
    let Some(deadline) = job.deadline else {
        return Ok(start0 + policy.horizon);
    };
    let latest = deadline - job.duration;
    if latest < start0 {
        return Err(format!(
            "the deadline {} is too close: the job needs {} min, and may start no earlier than {}",
            iso(deadline),
            job.duration.num_minutes(),
            iso(start0)
        ));
    }
    Ok(latest)
}

/// Rule 4: a bypassing priority starts at the first site at once, whatever its envelope and
/// the forecasts say.
fn bypass(
    job: &Job,
    first: &Site,
    start0: DateTime<Utc>,
    now_first: Estimate,
    mut reasons: Vec<String>,
    remaining: Vec<Remaining>,
) -> Decision {
    reasons.push(format!(
        "priority '{}' bypasses the power envelope and the carbon/price window",
        job.priority
    ));
    let draw = job.envelope_draw_w(first);
    Decision {
        verdict: Verdict::Admit,
        site: Some(first.key.clone()),
        start_at: Some(start0),
        reasons,
        now: Some(now_first.clone()),
        at_start: Some(now_first),
        budgets: remaining,
        reservation: Some(reservation(start0, job.duration, draw)),
        power_cap_w: None,
        moved: None,
    }
}

/// One (site, start) the job may take.
struct Candidate<'s> {
    site: usize,
    start: DateTime<Utc>,
    priced: Priced<'s>,
    /// How long it would run there, and its draw counted against the envelope: as asked,
    /// or at the cap.
    run: Duration,
    counted_w: i64,
    cap: Option<u32>,
    moved: Option<Moved>,
}

/// Rules 2 and 3 over every site: the starts each allows, why a site could not take the job
/// now, and what its grid events did to it, by the site's index, so the chosen site's own
/// can be told apart.
#[derive(Default)]
struct Candidates<'s> {
    options: Vec<Candidate<'s>>,
    blocked: Vec<(usize, String)>,
    event_notes: Vec<(usize, String)>,
}

impl<'s> Candidates<'s> {
    /// Every start site `i` allows: as early as possible, whenever an admitted job ends
    /// (headroom), and for a flexible job wherever a forecast value changes, at the job's
    /// start or its end (an optimum of a step function lies there); kept out of the site's
    /// grid events where it can be; and, rather than wait, now with its GPUs capped.
    #[allow(clippy::too_many_arguments)]
    fn site(
        &mut self,
        job: &Job,
        i: usize,
        site: &'s Site,
        start0: DateTime<Utc>,
        latest: DateTime<Utc>,
        policy: &Policy,
        now: DateTime<Utc>,
    ) {
        let env = Envelope::new(site.envelope_w, site.draw_w, &site.reserved, now);
        let draw = job.envelope_draw_w(site);
        // Flexible work keeps out of the site's grid events (and may start as each ends).
        let events: Vec<&GridWindow> = if job.deadline.is_some() {
            site.grid_events
                .iter()
                .filter(|e| e.end > start0 && e.start < latest + job.duration)
                .collect()
        } else {
            Vec::new()
        };
        let mut fits = fitting_starts(job, site, &env, draw, &events, start0, latest, policy);
        // Blocked now: until the first fit, or past the last start allowed.
        let until = match fits.first() {
            None => Some(latest),
            Some(first_fit) if *first_fit > start0 => Some(*first_fit),
            Some(_) => None,
        };
        if let Some(until) = until {
            self.blocked.push((
                i,
                format!(
                    "site {}: {} + this job's {} exceed its {} envelope until {}",
                    site.key,
                    kw(env.peak(start0, start0 + job.duration)),
                    kw(draw),
                    kw(site.envelope_w),
                    iso(until)
                ),
            ));
        }
        let moved = self.keep_out_of_events(job, i, site, &events, &mut fits, start0);
        let fits_now = fits.first() == Some(&start0);
        let site_w = job.site_draw_w(site);
        for s in fits {
            self.options.push(Candidate {
                site: i,
                start: s,
                priced: job.priced(site, site_w, s, policy),
                run: job.duration,
                counted_w: draw,
                cap: None,
                moved,
            });
        }
        if !fits_now {
            // A job moved out of an event must stay out of it capped too.
            let events = if moved.is_some() { &events[..] } else { &[] };
            self.capped_now(job, i, site, &env, events, start0, policy);
        }
    }

    /// Moved: what the job would have drawn in the first event it overlaps at its earliest
    /// start, when a start clear of the events is left before its deadline (the starts that
    /// are not clear go); where none is, it runs through them, and says so.
    fn keep_out_of_events(
        &mut self,
        job: &Job,
        i: usize,
        site: &Site,
        events: &[&GridWindow],
        fits: &mut Vec<DateTime<Utc>>,
        start0: DateTime<Utc>,
    ) -> Option<Moved> {
        let e = events.iter().find(|e| !clear_of(e, start0, job.duration))?;
        let clear = |s: DateTime<Utc>| events.iter().all(|e| clear_of(e, s, job.duration));
        let event = format!(
            "site {}: grid event {} from {} to {}",
            site.key,
            e.key,
            iso(e.start),
            iso(e.end)
        );
        if !fits.iter().any(|s| clear(*s)) {
            self.event_notes.push((
                i,
                format!("{event}: no start clear of it before the deadline, so the job may run through it"),
            ));
            return None;
        }
        fits.retain(|s| clear(*s));
        let w = oversubscription::counted_w(job.site_draw_w(site), Decimal::ONE);
        self.event_notes.push((
            i,
            format!("{event} (demand response): flexible work runs outside it"),
        ));
        Some(Moved {
            event_id: e.id,
            mj: demand_response::moved_mj(w, (start0, start0 + job.duration), (e.start, e.end)),
        })
    }

    /// Rather than wait: now, with the GPUs held to the site's power cap, if that fits (for
    /// the longer run, before the deadline, and clear of `events`).
    #[allow(clippy::too_many_arguments)]
    fn capped_now(
        &mut self,
        job: &Job,
        i: usize,
        site: &'s Site,
        env: &Envelope,
        events: &[&GridWindow],
        start0: DateTime<Utc>,
        policy: &Policy,
    ) {
        let Some((cap, capped)) = site.power_cap_w.and_then(|c| Some((c, job.capped(c)?))) else {
            return;
        };
        let end = start0 + capped.duration;
        let in_time = job.deadline.is_none_or(|d| end <= d);
        let clear_now = events.iter().all(|e| clear_of(e, start0, capped.duration));
        let counted_w = capped.envelope_draw_w(site);
        if in_time && clear_now && env.fits(counted_w, start0, end) {
            self.options.push(Candidate {
                site: i,
                start: start0,
                priced: capped.priced(site, capped.site_draw_w(site), start0, policy),
                run: capped.duration,
                counted_w,
                cap: Some(cap),
                moved: None,
            });
        }
    }
}

/// The starts at which the job fits the site's envelope, in order. A job without a deadline
/// takes its first window: the candidates in order, until one fits. Only a flexible one
/// shops, over every candidate.
#[allow(clippy::too_many_arguments)]
fn fitting_starts(
    job: &Job,
    site: &Site,
    env: &Envelope,
    draw: i64,
    events: &[&GridWindow],
    start0: DateTime<Utc>,
    latest: DateTime<Utc>,
    policy: &Policy,
) -> Vec<DateTime<Utc>> {
    if job.deadline.is_none() {
        let releases = env
            .releases_within(start0, latest)
            .filter(move |r| *r > start0);
        return env
            .fitting(draw, std::iter::once(start0).chain(releases), job.duration)
            .take(1)
            .collect();
    }
    let mut starts: Vec<DateTime<Utc>> = vec![start0];
    starts.extend(env.releases_within(start0, latest));
    starts.extend(events.iter().map(|e| e.end));
    // A start at a change, or that ends at one: from `start0` to `latest`.
    let until = latest + job.duration;
    let mut changes: Vec<DateTime<Utc>> = Vec::new();
    for signal in [&site.carbon_average, &site.carbon_marginal, &site.price] {
        changes.extend(signal.changes(start0, until));
    }
    // The carbon-free share changes where its signal does and at the hours the contract
    // delivers in; only a policy that weighs it looks there.
    if policy.cfe_weight > Decimal::ZERO {
        changes.extend(site.carbon_free.changes(start0, until));
        changes.extend(site.clean_supply.changes(start0, until));
    }
    for b in changes {
        starts.extend([b, b - job.duration]);
    }
    starts.retain(|s| *s >= start0 && *s <= latest);
    starts.sort_unstable();
    starts.dedup();
    env.fitting(draw, starts, job.duration).collect()
}

/// The earliest option (ties: the caller's site order) is the baseline; a flexible job, or
/// one with several sites, takes the option that saves the most on carbon, price and the
/// carbon-free share as the policy weighs them ([`saving_pct`]) when it saves more than the
/// threshold. Says why, and returns the index of the option taken.
fn choose(
    candidates: &mut Candidates,
    job: &Job,
    sites: &[&Site],
    policy: &Policy,
    start0: DateTime<Utc>,
    reasons: &mut Vec<String>,
) -> usize {
    let options = &mut candidates.options;
    options.sort_by_key(|o| (o.start, o.site));
    let base = &options[0];
    if base.start > start0 {
        reasons.extend(candidates.blocked.iter().map(|b| b.1.clone()));
    }
    if job.deadline.is_none() && sites.len() <= 1 {
        return 0;
    }
    let mut best: Option<(Decimal, usize)> = None;
    for (k, o) in options.iter().enumerate().skip(1) {
        if let Some(s) = saving_pct(&base.priced, &o.priced, policy) {
            if best.as_ref().is_none_or(|(b, _)| s > *b) {
                best = Some((s, k));
            }
        }
    }
    match best {
        Some((s, k)) if s > policy.threshold_pct => {
            let o = &options[k];
            reasons.push(format!(
                "starting at {} on site {} saves {}% ({}) against {} on site {}, above the {}% threshold",
                iso(o.start),
                sites[o.site].key,
                s.round_dp(1).normalize(),
                basis_label(policy),
                iso(base.start),
                sites[base.site].key,
                policy.threshold_pct.normalize()
            ));
            k
        }
        Some((s, _)) => {
            reasons.push(format!(
                "the best other slot saves {}% ({}), not above the {}% threshold",
                s.round_dp(1).normalize(),
                basis_label(policy),
                policy.threshold_pct.normalize()
            ));
            0
        }
        None => {
            let signals = if policy.cfe_weight > Decimal::ZERO {
                "carbon, price or carbon-free"
            } else {
                "carbon or price"
            };
            reasons.push(format!(
                "no {signals} forecast covers {} to {} on site {}: nothing to compare, started as early as possible",
                iso(base.start),
                iso(base.start + job.duration),
                sites[base.site].key
            ));
            0
        }
    }
}

/// The decision on the option taken: admitted at the earliest start or deferred to a later
/// one, with the chosen site's own notes, the cap and over-subscription it runs under, its
/// estimates now and at its start, and what the budgets have left after it.
fn answer(
    job: &Job,
    sites: &[&Site],
    candidates: &Candidates,
    chosen: usize,
    start0: DateTime<Utc>,
    budgets: &[Budget],
    mut reasons: Vec<String>,
) -> Decision {
    let chosen = &candidates.options[chosen];
    let site = sites[chosen.site];
    let own = |notes: &[(usize, String)]| -> Vec<String> {
        notes
            .iter()
            .filter(|n| n.0 == chosen.site)
            .map(|n| n.1.clone())
            .collect()
    };
    reasons.extend(own(&candidates.event_notes));
    if let Some(cap) = chosen.cap {
        reasons.extend(own(&candidates.blocked));
        reasons.push(format!(
            "fits site {}'s envelope now with its GPUs capped at {cap} W (from {} W): about {} min instead of {} min, for the same energy",
            site.key,
            job.gpu_draw_w,
            chosen.run.num_minutes(),
            job.duration.num_minutes()
        ));
    }
    let factor = site.oversubscription.of(job.kind);
    if factor.factor > Decimal::ONE {
        reasons.push(format!(
            "{} counts against site {}'s envelope at 1/{} of its draw (over-subscription {}, {})",
            job.kind,
            site.key,
            factor.factor.normalize(),
            factor.factor.normalize(),
            factor.why
        ));
    }
    let verdict = if chosen.start > start0 {
        Verdict::Defer
    } else {
        Verdict::Admit
    };
    if verdict == Verdict::Admit && reasons.is_empty() {
        reasons.push(format!(
            "fits site {}'s {} envelope; no budget limits it",
            site.key,
            kw(site.envelope_w)
        ));
    }
    let at = match chosen.cap.and_then(|cap| job.capped(cap)) {
        Some(capped) => capped.estimate(site, chosen.start),
        None => job.estimate(site, chosen.start),
    };
    // Capped, it starts now: as early as it may is when it starts.
    let now_est = if chosen.cap.is_some() {
        at.clone()
    } else {
        job.estimate(site, start0)
    };
    let remaining = budget::check(budgets, &at.amounts()).remaining;
    Decision {
        verdict,
        site: Some(site.key.clone()),
        start_at: Some(chosen.start),
        reasons,
        now: Some(now_est),
        at_start: Some(at),
        budgets: remaining,
        reservation: Some(reservation(chosen.start, chosen.run, chosen.counted_w)),
        power_cap_w: chosen.cap,
        moved: chosen.moved.filter(|_| chosen.start > start0),
    }
}
