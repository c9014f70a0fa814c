//! What the demo prints: the simulated range's figures from the ledger, each closed month,
//! the budgets and their alerts.

use chrono::{DateTime, Utc};
use wattledger_domain::chargeback::Close;
use wattledger_domain::metrics::{effectiveness, efficiency};
use wattledger_domain::units::kwh;
use wattledger_store::usage::{self, GroupBy, UsageFilter};
use wattledger_store::{budgets, Scope};

/// A closed month in a few lines: each statement's total, and each site's reconciliation.
pub fn close_summary(close: &Close) -> String {
    use std::fmt::Write;
    let kwh = |mj: i64| mj as f64 / 3.6e9;
    let mut out = format!(
        "Chargeback {} closed (v{}): {} statements\n",
        close.month,
        close.version,
        close.statements.len()
    );
    let _ = writeln!(
        out,
        "  {:<16} {:>4} {:>6} {:>12} {:>12} {:>10}",
        "tenant", "cur", "lines", "kWh", "billed", "kgCO2e"
    );
    for s in &close.statements {
        let adjustments = s.adjustments(close.month).count();
        let _ = writeln!(
            out,
            "  {:<16} {:>4} {:>6} {:>12.1} {:>12} {:>10}{}",
            s.tenant,
            s.currency,
            s.lines.len(),
            kwh(s.total.energy_mj),
            s.billed_cost.to_string(),
            wattledger_domain::chargeback::csv::fixed(
                s.total.carbon_g / rust_decimal::Decimal::ONE_THOUSAND,
                1
            ),
            if adjustments > 0 {
                format!("  ({adjustments} adjustment lines)")
            } else {
                String::new()
            }
        );
    }
    for r in &close.reconciliation {
        let _ = writeln!(
            out,
            "  site {:<10} metered {:>10.1} kWh = attributed {:>10.1} + unallocated {:>8.1}{}; adjustments {:.1}",
            r.site,
            kwh(r.metered_mj),
            kwh(r.attributed_mj),
            kwh(r.unallocated_mj),
            if r.balances() { " (to the mJ)" } else { " (UNBALANCED)" },
            kwh(r.adjustments_mj)
        );
    }
    out
}

/// This month's budgets and every alert they raised (last month's included).
pub(super) async fn budget_summary(pool: &sqlx::PgPool) -> anyhow::Result<()> {
    let now = Utc::now();
    let budgets = wattledger_store::budgets::list(pool, &Scope::All, None, now).await?;
    println!("\nBudgets this month (alerts raised since the start of last month)");
    for b in &budgets {
        let (limit, used, unit) = match (b.limit_kwh, b.limit_cost, b.limit_carbon_kg) {
            (Some(l), _, _) => (l, b.used_kwh, "kWh".to_owned()),
            (_, Some(l), _) => (l, b.used_cost, b.currency.clone().unwrap_or_default()),
            (_, _, Some(l)) => (l, b.used_carbon_kg, "kgCO2e".to_owned()),
            _ => continue,
        };
        let alerts: Vec<String> = budgets::events(pool, &Scope::All, b.id, None)
            .await?
            .iter()
            .map(|e| {
                let t = if e.threshold == "projected" {
                    e.threshold.clone()
                } else {
                    format!("{}%", e.threshold)
                };
                format!("{} {t}", e.period_start.format("%b"))
            })
            .collect();
        println!(
            "  {:<22} {:>9} of {:>7} {:<6} {:>6.1}% {:<4}  alerts: {}",
            b.key,
            used.round_dp(1),
            limit.normalize(),
            unit,
            (used * rust_decimal::Decimal::ONE_HUNDRED / limit).round_dp(1),
            if b.hard { "hard" } else { "soft" },
            if alerts.is_empty() {
                "-".into()
            } else {
                alerts.join(", ")
            }
        );
    }
    Ok(())
}

/// The simulated range's complete hours: the summary's range, which later data (the live
/// node's, in the hour under way) does not change.
pub fn summary_range(from: DateTime<Utc>, to: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
    (
        wattledger_store::attribution::hour_of(from),
        wattledger_store::attribution::hour_of(to),
    )
}

pub async fn summary(
    pool: &sqlx::PgPool,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> anyhow::Result<()> {
    let (from, to) = summary_range(from, to);
    let filter = UsageFilter {
        from: Some(from),
        to: Some(to),
        ..Default::default()
    };
    let tenants = usage::usage(pool, &Scope::All, &[GroupBy::Tenant], &filter).await?;
    let total: i64 = tenants.iter().map(|r| r.energy.total_mj()).sum();
    let iso = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    println!(
        "Energy per tenant, {} to {} UTC (complete hours; the API gives the same figures:\n  GET /v1/usage?group_by=tenant&from={}&to={} )",
        from.format("%Y-%m-%d %H:%M"),
        to.format("%Y-%m-%d %H:%M"),
        iso(from),
        iso(to)
    );
    println!(
        "  {:<16} {:>12} {:>7} {:>10} {:>10} {:>8}  energy cost",
        "tenant", "kWh", "share", "idle kWh", "kgCO2e", "goodput"
    );
    for r in &tenants {
        let cost: Vec<String> = r
            .cost_currencies
            .iter()
            .flatten()
            .zip(r.cost_amounts.iter().flatten())
            .map(|(c, a)| format!("{c} {}", a.round_dp(2)))
            .collect();
        println!(
            "  {:<16} {:>12} {:>6.1}% {:>10} {:>10} {:>7.1}%  {}",
            r.tenant.as_deref().unwrap_or("-"),
            kwh(r.energy.total_mj()).round_dp(1),
            r.energy.total_mj() as f64 * 100.0 / total.max(1) as f64,
            kwh(r.energy.idle_mj).round_dp(1),
            r.carbon_g
                .map(|g| (g / rust_decimal::Decimal::from(1000))
                    .round_dp(1)
                    .to_string())
                .unwrap_or_else(|| "-".into()),
            // The share of its energy that went into work that was kept (`badput_kwh` in
            // the API's answer is the rest).
            (r.energy.total_mj() - r.badput_mj) as f64 * 100.0 / r.energy.total_mj().max(1) as f64,
            if cost.is_empty() {
                "-".into()
            } else {
                cost.join(" + ")
            }
        );
    }
    println!("  {:<16} {:>12}", "total", kwh(total).round_dp(1));

    let models = usage::usage(pool, &Scope::All, &[GroupBy::Model], &filter).await?;
    println!("\nTokens per kWh per model (SCI: operational + embodied gCO2e per 1k tokens)");
    println!(
        "  {:<16} {:>14} {:>12} {:>14} {:>10} {:>12}",
        "model", "tokens", "kWh", "tokens/kWh", "J/token", "SCI g/1k tok"
    );
    for r in models.iter().filter(|r| r.tokens() > 0) {
        let e = efficiency(r.totals());
        let tokens = r.tokens();
        let sci = e
            .sci_g_per_1k_tokens
            .map_or_else(|| "-".into(), |g| g.to_string());
        println!(
            "  {:<16} {:>14} {:>12} {:>14} {:>10} {:>12}",
            r.model.as_deref().unwrap_or("-"),
            tokens,
            kwh(r.energy.total_mj()).round_dp(1),
            e.tokens_per_kwh
                .map_or_else(|| "-".into(), |d| d.round().to_string()),
            e.joules_per_token
                .map_or_else(|| "-".into(), |d| d.round_dp(3).to_string()),
            sci
        );
    }

    let sites = usage::site_totals(pool, &filter, None).await?;
    println!("\nSites");
    println!(
        "  {:<8} {:>12} {:>8} {:>8} {:>8} {:>8} {:>10} {:>9}",
        "site", "kWh", "PUE", "ITUE", "TUE", "idle", "GPU alloc", "CFE 24/7"
    );
    for s in &sites {
        let e = effectiveness(s.site_mj, s.it_mj, s.gpu_mj);
        let show = |d: Option<rust_decimal::Decimal>| {
            d.map(|d| d.round_dp(3).to_string())
                .unwrap_or_else(|| "-".into())
        };
        // Hour by hour: contracted clean energy first, then the grid's carbon-free share.
        let cfe = wattledger_domain::cfe::score(s.carbon_free_mj, s.cfe_mj)
            .map(|f| format!("{}%", (f * rust_decimal::Decimal::ONE_HUNDRED).round_dp(1)))
            .unwrap_or_else(|| "-".into());
        println!(
            "  {:<8} {:>12} {:>8} {:>8} {:>8} {:>7.1}% {:>9.1}% {:>9}",
            s.site,
            kwh(s.site_mj).round_dp(1),
            show(e.pue),
            show(e.itue),
            show(e.tue),
            s.idle_mj as f64 * 100.0 / s.site_mj.max(1) as f64,
            s.allocated_gpu_ms as f64 * 100.0 / s.capacity_gpu_ms.max(1) as f64,
            cfe
        );
    }
    Ok(())
}
