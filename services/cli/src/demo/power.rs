//! The demo's power-bound site: Frankfurt runs with a tight envelope and a power policy
//! (inference over-subscribed by its measured headroom, GPUs cappable at 450 W), admission is
//! asked for more inference replicas and a training run there, and last week's
//! demand-response event is recorded with the batch jobs admission moved out of it; what
//! each shows is printed.

use super::seed::Client;
use chrono::{DateTime, Utc};
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;
use serde_json::{json, Value};
use sqlx::PgPool;
use wattledger::grid_events;
use wattledger_domain::admission::Verdict;
use wattledger_domain::job_kind::JobKind;
use wattledger_domain::units::kwh;
use wattledger_sim::demand_response::{self, Event, PRICE_PER_KWH, REDUCTION_KW};
use wattledger_sim::Simulation;
use wattledger_store::admission::{self as decisions, NewDecision};
use wattledger_store::Scope;

const SITE: &str = "fra1";
/// Per GPU, W: what a replica of the 70B model draws under load, and the cap the site may set.
const REPLICA_GPUS: i64 = 4;
const REPLICA_W: i64 = 600;
const CAP_W: i64 = 450;
const TRAINING_W: i64 = 650;
/// How long the demo waits for admission to count a changed power policy.
const POLICY_WAIT: std::time::Duration = std::time::Duration::from_secs(120);
/// The largest training run the demo sizes against the room.
const MAX_TRAINING_GPUS: i64 = 512;

fn time(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

fn kw(w: i64) -> String {
    format!("{:.1} kW", w as f64 / 1000.0)
}

pub(super) async fn power_bound(
    client: &Client,
    pool: &PgPool,
    sim: &Simulation,
) -> anyhow::Result<()> {
    let policy = client
        .put(
            &client.admin,
            &format!("/v1/power/policies/{SITE}"),
            json!({"oversubscription": {"inference": "measured", "training": "1", "batch": "1",
                                         "interactive": "1"},
                   "measured_cap": "1.25", "power_cap_w": CAP_W}),
        )
        .await?;
    let inference = &policy["oversubscription"]["inference"];
    let envelope_w = policy["envelope_w"].as_i64().unwrap_or_default();
    println!(
        "\nPower-bound site {SITE} (envelope {}): inference counts at 1/{} of its draw ({}); training and batch in full; GPUs may be capped at {CAP_W} W.",
        kw(envelope_w),
        inference["factor"].as_str().unwrap_or("1"),
        inference["why"].as_str().unwrap_or("")
    );
    load_shape(pool).await?;
    if let Some(event) = sim.grid_event {
        grid_event(client, pool, sim, &event).await?;
    }
    ask(client, pool, envelope_w).await
}

/// The site's load as the grid sees it over the last 7 days: its peaks against the
/// envelope, peak-to-average and the training runs' swings within 15 minutes.
async fn load_shape(pool: &PgPool) -> anyhow::Result<()> {
    let now = Utc::now();
    let sites: Vec<_> = wattledger_store::inventory::list_sites(pool)
        .await?
        .into_iter()
        .filter(|s| s.key == SITE)
        .collect();
    let rows = wattledger_store::power::hours(
        pool,
        sites.first().map(|s| s.id),
        now - chrono::Duration::days(7),
        now,
        Some(&["facility", "it"]),
    )
    .await?;
    let days: Vec<_> = wattledger::views::power::load_shapes(&rows, &sites)
        .into_iter()
        .flat_map(|(_, _, days)| days.into_values())
        .map(|d| d.shape)
        .collect();
    let kw_of = |mw: i64| kw(mw / 1000);
    let max = |f: fn(&wattledger_domain::load_shape::LoadShape) -> Option<i64>| {
        days.iter().filter_map(f).max()
    };
    let par: Vec<Decimal> = days.iter().filter_map(|d| d.peak_to_average).collect();
    println!(
        "  load over the last 7 days: peak {}, peak-to-average {}–{}, largest 15-min rise {} and fall {} (the training runs' synchronous swings and checkpoints), {} minutes over the envelope",
        max(|d| Some(d.peak_mw)).map_or("–".into(), kw_of),
        par.iter().min().map_or("–".into(), |p| p.round_dp(2).to_string()),
        par.iter().max().map_or("–".into(), |p| p.round_dp(2).to_string()),
        max(|d| d.rise_15m_mw).map_or("–".into(), kw_of),
        max(|d| d.fall_15m_mw).map_or("–".into(), kw_of),
        days.iter().map(|d| d.over_envelope).sum::<usize>()
    );
    Ok(())
}

/// More inference replicas until one is not admitted, then a training run, all at fra1.
async fn ask(client: &Client, pool: &PgPool, envelope_w: i64) -> anyhow::Result<()> {
    let replica = json!({"tenant": "nimbus-ai", "job_name": "llama-3.1-70b-replica",
        "model": "llama-3.1-70b", "kind": "inference", "gpus": REPLICA_GPUS,
        "power_per_gpu_w": REPLICA_W, "duration_s": 6 * 3600, "priority": "normal",
        "sites": [SITE], "source": "demo"});
    // Admission reloads the policy when it changes; ask what-if until it counts it. The
    // reload reads a week of the site's meters, which on a loaded machine takes seconds:
    // everything below (the factor, the cap) needs the policy, so it waits, and says so if
    // it never comes rather than printing sizes without it.
    let mut dry = replica.clone();
    dry["dry_run"] = json!(true);
    let asked = std::time::Instant::now();
    loop {
        let a = client
            .post(&client.scheduler, "/v1/admission", dry.clone())
            .await?;
        if reasons(&a).contains("over-subscription") {
            tracing::info!(
                waited_ms = asked.elapsed().as_millis() as u64,
                "admission counts the power policy"
            );
            break;
        }
        if asked.elapsed() > POLICY_WAIT {
            anyhow::bail!(
                "admission did not count site {SITE}'s power policy within {} s",
                POLICY_WAIT.as_secs()
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let Some(site) = wattledger_store::inventory::list_sites(pool)
        .await?
        .into_iter()
        .find(|s| s.key == SITE)
    else {
        return Ok(());
    };
    let draw_w = decisions::site_draw(pool, Utc::now())
        .await?
        .get(&site.id)
        .copied();
    // Facility-level draw of `gpus` at `w` each, as admission counts it before any factor.
    let at_site = |gpus: i64, w: i64| {
        (Decimal::from(gpus * w) * site.static_pue)
            .round()
            .to_i64()
            .unwrap_or(0)
    };
    let nameplate_w = at_site(REPLICA_GPUS, REPLICA_W);
    let pue = site.static_pue.normalize();
    let (mut plain, mut capped) = (0, 0);
    let mut last = Value::Null;
    for _ in 0..16 {
        let a = client
            .post(&client.scheduler, "/v1/admission", replica.clone())
            .await?;
        let admitted = a["decision"] == "admit";
        if admitted && a["power_cap_w"].is_null() {
            plain += 1;
        } else if admitted {
            capped += 1;
        }
        last = a;
        if !admitted {
            break;
        }
    }
    let room = draw_w.map(|d| (envelope_w - d).max(0));
    println!(
        "  admission, nimbus-ai inference replicas of {REPLICA_GPUS} GPUs × {REPLICA_W} W ({} of nameplate at PUE {pue} each){}:",
        kw(nameplate_w),
        room.map_or(String::new(), |r| format!(
            ", with {} of the envelope free now ({} at nameplate)",
            kw(r),
            r / nameplate_w.max(1)
        ))
    );
    println!(
        "    {plain} admitted as asked ({} of nameplate){}; then {} {}",
        kw(plain * nameplate_w),
        if capped > 0 {
            format!(", {capped} more admitted with GPUs capped at {CAP_W} W")
        } else {
            String::new()
        },
        last["decision"].as_str().unwrap_or("?"),
        last["start_at"]
            .as_str()
            .map_or(String::new(), |t| format!("to {t}"))
    );
    // A fine-tune from tonight, once the replicas have ended, on the fewest GPUs that overrun
    // the room at full power but fit it capped: sized by asking admission what-if (its own
    // view of the room, not this process's reading of the meters a moment apart). The room
    // ahead depends on the hour the demo runs (which runs are active, what admission has
    // reserved), so the first start, every two hours from 7 h ahead, where some size fits only
    // capped is shown: a single fixed hour had none when the demo ran at 23:00 UTC.
    let ask_at = |start: DateTime<Utc>| {
        move |gpus: i64| {
            json!({"tenant": "orbit-labs", "job_name": "orbit-vision-8b-finetune",
                "model": "orbit-vision-8b", "kind": "training", "gpus": gpus,
                "power_per_gpu_w": TRAINING_W, "duration_s": 8 * 3600, "earliest_start": start,
                "sites": [SITE], "source": "demo"})
        }
    };
    let mut found = None;
    let mut missed = Value::Null;
    for hours in (7..=23).step_by(2) {
        let start = Utc::now() + chrono::Duration::hours(hours);
        match fits_only_capped(client, &ask_at(start)).await? {
            Ok(gpus) => {
                found = Some((start, gpus));
                break;
            }
            Err(last) => missed = last,
        }
    }
    let Some((start, gpus)) = found else {
        match missed {
            Value::Null => println!("  admission, orbit-labs training: every size up to {MAX_TRAINING_GPUS} GPUs fits site {SITE}'s room in full"),
            last => println!(
                "  admission, orbit-labs training: no size fits site {SITE}'s room only capped (at {} GPUs: {} {})",
                last["gpus"],
                last["decision"].as_str().unwrap_or("?"),
                reasons(&last)
            ),
        }
        return Ok(());
    };
    let training = ask_at(start);
    let t = client
        .post(&client.scheduler, "/v1/admission", training(gpus))
        .await?;
    let est = &t["estimate_at_start"];
    println!(
        "  admission, orbit-labs training on {gpus} GPUs × {TRAINING_W} W for 8 h from {} ({} counted in full: more than the envelope has free then, with the jobs admitted before it): {}{}",
        start.format("%H:%M UTC"),
        kw(at_site(gpus, TRAINING_W)),
        t["decision"].as_str().unwrap_or("?"),
        match t["power_cap_w"].as_i64() {
            Some(c) => format!(
                " with its GPUs capped at {c} W, running {:.1} h for the same {} kWh",
                est["run_s"].as_f64().unwrap_or_default() / 3600.0,
                est["kwh"]
                    .as_str()
                    .and_then(|k| k.parse::<Decimal>().ok())
                    .map_or("?".into(), |k| k.normalize().to_string())
            ),
            None => t["start_at"]
                .as_str()
                .filter(|_| t["decision"] == "defer")
                .map_or(String::new(), |s| format!(" to {s}")),
        }
    );
    Ok(())
}

/// The fewest GPUs of `job(gpus)` that admission, asked what-if, admits now only with its
/// GPUs capped: past every size that fits in full, before the sizes that fit not at all.
/// Admission re-reads the site's measured draw every half minute, and the demo's site has no
/// new readings after the seed, so the room can change between two sizes; a pass that meets
/// a size admitted neither way is asked again. `Err` holds the last answer, with the size
/// asked (none when every size fits in full).
async fn fits_only_capped(
    client: &Client,
    job: &impl Fn(i64) -> Value,
) -> anyhow::Result<Result<i64, Value>> {
    let mut missed = Value::Null;
    for _ in 0..3 {
        match sizing_pass(client, job).await? {
            Ok(gpus) => return Ok(Ok(gpus)),
            // Every size fits in full: asking again would only say so again.
            Err(Value::Null) => return Ok(Err(Value::Null)),
            Err(answer) => missed = answer,
        }
    }
    Ok(Err(missed))
}

/// One pass of [`fits_only_capped`]: sizes from 1 GPU up until one is admitted capped (`Ok`)
/// or admitted neither way (`Err` with that answer and its size); `Err(Null)` past the largest.
async fn sizing_pass(
    client: &Client,
    job: &impl Fn(i64) -> Value,
) -> anyhow::Result<Result<i64, Value>> {
    for gpus in 1..=MAX_TRAINING_GPUS {
        let mut ask = job(gpus);
        ask["dry_run"] = json!(true);
        let mut a = client.post(&client.scheduler, "/v1/admission", ask).await?;
        match (a["decision"].as_str(), a["power_cap_w"].as_i64()) {
            (Some("admit"), Some(_)) => return Ok(Ok(gpus)),
            (Some("admit"), None) => continue,
            _ => {
                a["gpus"] = json!(gpus);
                return Ok(Err(a));
            }
        }
    }
    Ok(Err(Value::Null))
}

fn reasons(a: &Value) -> String {
    a["reasons"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_default()
}

/// Records last week's event and the decisions admission took on the batch jobs it moved,
/// and prints the event's outcome.
async fn grid_event(
    client: &Client,
    pool: &PgPool,
    sim: &Simulation,
    event: &Event,
) -> anyhow::Result<()> {
    let key = event.key();
    client
        .post(
            &client.admin,
            "/v1/grid-events",
            json!({"key": key, "site": SITE, "starts_at": time(event.start),
                   "ends_at": time(event.end), "reduction_kw": REDUCTION_KW,
                   "price_per_kwh": PRICE_PER_KWH}),
        )
        .await?;
    let stored = wattledger_store::grid_events::get(pool, &key)
        .await?
        .ok_or_else(|| anyhow::anyhow!("grid event {key} not stored"))?;
    let tenants = decisions::tenants(pool, &Scope::All).await?;
    let rows: Vec<NewDecision> = sim
        .moved
        .iter()
        .filter_map(|m| Some(moved_decision(m, *tenants.get(m.tenant)?, &stored, event)))
        .collect();
    decisions::insert_decisions(pool, &rows).await?;
    let r = grid_events::report(pool, stored, Utc::now()).await?;
    println!(
        "  grid event {key}: {} to {} UTC, {REDUCTION_KW} kW below baseline asked at {PRICE_PER_KWH} EUR/kWh; {} flexible batch jobs moved out of it",
        time(event.start).format("%a %Y-%m-%d %H:%M"),
        time(event.end).format("%H:%M"),
        rows.len()
    );
    match (&r.baseline, &r.outcome) {
        (Ok(b), Some(o)) => {
            println!(
                "    baseline {} kWh ({}, {} days), metered {} kWh: reduction {} kWh ({} of {} kWh asked), credit {} EUR",
                kwh(b.total_mj).round_dp(1),
                r.method.label(),
                b.days.len(),
                kwh(o.actual_mj).round_dp(1),
                kwh(o.reduction_mj).round_dp(1),
                if o.met { "met" } else { "not met" },
                kwh(o.requested_mj).round_dp(1),
                o.credit.unwrap_or_default().round_dp(2)
            );
            for (c, jobs) in &r.contributions {
                println!(
                    "    {:<14} {jobs:>3} jobs moved, {} kWh moved, {} kWh credited, {} EUR",
                    c.tenant,
                    kwh(c.moved_mj).round_dp(1),
                    kwh(c.credited_mj).round_dp(1),
                    c.credit.unwrap_or_default().round_dp(2)
                );
            }
        }
        (Err(e), _) => println!("    no baseline: {e}"),
        (Ok(_), None) => println!("    its hours are not all attributed yet"),
    }
    Ok(())
}

/// The decision admission took on a moved batch job, as it stored it.
fn moved_decision(
    m: &demand_response::Moved,
    tenant_id: i64,
    e: &wattledger_store::grid_events::GridEvent,
    event: &Event,
) -> NewDecision {
    let asked = time(m.asked);
    let request = json!({"tenant": m.tenant, "job_name": m.key, "gpus": m.gpus, "kind": "batch",
        "duration_s": (m.end - m.start) / 1000, "earliest_start": asked,
        "deadline": time(m.end + 12 * 3_600_000), "sites": [SITE], "source": "slurm"});
    let reason = format!(
        "site {SITE}: grid event {} from {} to {} (demand response): flexible work runs outside it",
        e.key,
        time(event.start).format("%Y-%m-%dT%H:%M:%SZ"),
        time(event.end).format("%Y-%m-%dT%H:%M:%SZ")
    );
    let answer = json!({"decision": "defer", "start_at": time(m.start), "site": SITE,
        "reasons": [reason]});
    let ws = Decimal::from(m.draw_w) * Decimal::from((m.end - m.start) / 1000);
    NewDecision {
        id: uuid::Uuid::now_v7(),
        decided_at: asked - chrono::Duration::minutes(7),
        tenant_id,
        source: "slurm".into(),
        job_name: m.key.clone(),
        job_key: Some(m.key.clone()),
        kind: JobKind::Batch,
        priority: wattledger_domain::priority::Priority::normal(),
        gpus: m.gpus as i32,
        decision: Verdict::Defer,
        site_id: Some(e.site_id),
        start_at: Some(time(m.start)),
        end_at: Some(time(m.end)),
        reserved_w: Some(m.draw_w),
        model: None,
        est_kwh: Some((ws / Decimal::from(3_600_000)).round_dp(6)),
        est_cost: None,
        est_currency: Some(e.currency.clone()),
        est_carbon_kg: None,
        grid_event_id: Some(e.id),
        moved_mj: Some(m.moved_mj),
        request: request.to_string(),
        answer: answer.to_string(),
        idempotency_key: None,
    }
}
