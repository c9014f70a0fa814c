//! The `wattledger` command: serve the API, migrate, run the demo, attribute, mint tokens.
//!
//! This crate (`wattledger-cli`) owns the binary and what only the binary runs: the command
//! line and the demo ([`demo`]). The server is the `wattledger` library (tests start it
//! in-process on port 0), which carries no demo code; the demo's simulated cluster is the
//! `wattledger-sim` crate.

mod demo;

use anyhow::Context;
use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand};
use demo::DemoArgs;
use std::path::PathBuf;
use tracing_subscriber::EnvFilter;
use wattledger::auth::Role;
use wattledger::config::Config;
use wattledger::progress::Progress;
use wattledger::{startup, worker};
use wattledger_domain::chargeback::{focus, prices, Export, Month};
use wattledger_store::chargeback as store;

#[derive(Parser)]
#[command(
    name = "wattledger",
    version,
    about = "Energy, cost and carbon metering for GPU clusters"
)]
struct Cli {
    #[command(flatten)]
    config: Config,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the API (and run the attribution worker).
    Serve,
    /// Apply database migrations and exit.
    Migrate,
    /// Simulate a cluster, attribute it, print a summary and serve it on --listen.
    Demo(DemoArgs),
    /// Attribute every dirty hour now; with --from/--to, recompute that range first.
    Attribute {
        #[arg(long, requires = "to")]
        from: Option<DateTime<Utc>>,
        #[arg(long, requires = "from")]
        to: Option<DateTime<Utc>>,
    },
    /// Create the meter data's partitions ahead and drop those past retention (the worker
    /// does this hourly); with --dry-run, only say what would go and what stays, and why.
    Retention {
        #[arg(long)]
        dry_run: bool,
    },
    /// Month close and chargeback exports.
    #[command(subcommand)]
    Chargeback(ChargebackCommand),
    /// Dashboard users.
    #[command(subcommand)]
    User(UserCommand),
    /// API tokens: mint (recorded, so it can be revoked), list, revoke.
    #[command(subcommand)]
    Token(TokenCommand),
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Mint an API token signed with the configured key and record its id; the token is
    /// printed once.
    Mint {
        #[arg(long, value_parser = role_names())]
        role: Role,
        /// Tenant key (required for, and only for, --role tenant).
        #[arg(long)]
        tenant: Option<String>,
        /// Subject: who or what the token is for.
        #[arg(long, default_value = "cli")]
        sub: String,
        /// Lifetime in seconds (default a day; at most WATTLEDGER_TOKEN_MAX_TTL, the default
        /// if shorter).
        #[arg(long)]
        ttl_s: Option<i64>,
        /// What the token is for, shown by `token list`.
        #[arg(long, default_value = "")]
        note: String,
        /// Who mints it, for the record.
        #[arg(long, default_value = "cli")]
        by: String,
    },
    /// List the live tokens (not expired, not revoked); with --all, every token recorded.
    List {
        #[arg(long)]
        all: bool,
    },
    /// Revoke a token by its id (the jti `token list` shows): every replica refuses it at
    /// once.
    Revoke {
        jti: uuid::Uuid,
        /// Who revokes it, for the record.
        #[arg(long, default_value = "cli")]
        by: String,
    },
}

#[derive(Subcommand)]
enum ChargebackCommand {
    /// List months with their close status.
    List,
    /// Close a month (YYYY-MM): finish its attribution, freeze its statements, write exports.
    Close {
        month: Month,
        /// Also write the exports here (default: WATTLEDGER_EXPORT_DIR, if set).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Who is closing, for the audit trail.
        #[arg(long, default_value = "cli")]
        actor: String,
    },
    /// Write a closed month's exports, byte for byte as frozen (FOCUS 1.4 rendered from the
    /// frozen close), with SHA256SUMS.
    Export {
        month: Month,
        #[arg(long, value_enum, default_value = "all")]
        format: ExportFormat,
        #[arg(long)]
        out: PathBuf,
    },
    /// Reopen the latest closed month (audited); closing it again issues the next version.
    Reopen {
        month: Month,
        #[arg(long)]
        reason: String,
        #[arg(long, default_value = "cli")]
        actor: String,
    },
}

#[derive(Subcommand)]
enum UserCommand {
    /// Create a dashboard user (or reset its password and role). The password is read from
    /// standard input with --password-stdin, or generated and printed once.
    Add {
        #[arg(long)]
        username: String,
        #[arg(long, value_parser = role_names())]
        role: Role,
        /// Tenant key (required for, and only for, --role tenant).
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long)]
        password_stdin: bool,
    },
}

/// `--role`: one of the role names (listed in the help), read as the role.
fn role_names() -> impl clap::builder::TypedValueParser<Value = Role> {
    use clap::builder::{PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(Role::NAMES)
        .try_map(|name: String| Role::parse(&name).ok_or("not a role"))
}

/// `chargeback export`'s name for FOCUS 1.4 (the stored exports are named by format alone).
const FOCUS_1_4: &str = "focus-1.4";

#[derive(Clone, Copy, clap::ValueEnum)]
enum ExportFormat {
    /// The statement lines (CSV).
    Csv,
    /// FOCUS 1.2, the file frozen with the close.
    Focus,
    /// FOCUS 1.4, rendered from the frozen close.
    #[value(name = "focus-1.4")]
    Focus14,
    Json,
    /// The month's price list (the SKU prices FOCUS 1.4's rows name), rendered from the
    /// frozen close.
    Prices,
    /// csv, focus, focus-1.4, prices and json.
    All,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // The demo seeds two months in bulk beside its own attribution, where a statement over
    // sqlx's one second is expected, not news: its warnings (each with the whole statement)
    // would bury the progress bars. A server keeps them.
    let default_filter = match cli.command {
        Command::Demo(_) => "warn,wattledger=info,sqlx::query=error",
        _ => "warn,wattledger=info",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter)),
        )
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, not in journald or a log file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let _stop = StopEmbedded;
    run(cli).await
}

/// An embedded PostgreSQL this process started stops with it (its data is kept): whoever
/// stops the program expects nothing of it left running. On drop, so also when a panic
/// unwinds (a closed stdout makes `println!` panic).
struct StopEmbedded;

impl Drop for StopEmbedded {
    fn drop(&mut self) {
        wattledger::embedded_pg::stop_started();
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve => {
            let listeners = startup::Listeners::bind(&cli.config).await?;
            let pool = wattledger::database(&cli.config, &[]).await?;
            let keys = wattledger::signing_key(&cli.config)?;
            tracing::info!(addr = %listeners.http.local_addr()?, "serving");
            if let Some((https, _)) = &listeners.https {
                tracing::info!(addr = %https.local_addr()?, "serving HTTPS");
            }
            startup::serve(
                pool,
                keys,
                cli.config,
                listeners,
                startup::shutdown_signal(),
            )
            .await
        }
        Command::Migrate => {
            wattledger::database(&cli.config, &[]).await?;
            eprintln!("migrations applied");
            Ok(())
        }
        Command::Demo(args) => demo::run(cli.config, args).await,
        Command::Attribute { from, to } => {
            let pool = wattledger::database(&cli.config, &[]).await?;
            if let (Some(from), Some(to)) = (from, to) {
                let mut tx = pool.begin().await?;
                let n = wattledger_store::dirty::mark_range(&mut tx, from, to).await?;
                tx.commit().await?;
                eprintln!("marked {n} site-hours for recomputation");
            }
            let pending = wattledger_store::dirty::count(&pool).await? as u64;
            let mut p = Progress::new("attribution", pending);
            let stats = worker::drain(&pool, |s| p.set(s.hours)).await?;
            p.finish();
            eprintln!(
                "attributed {} site-hours into {} ledger rows",
                stats.hours, stats.rows
            );
            Ok(())
        }
        Command::Retention { dry_run } => retention(cli.config, dry_run).await,
        Command::Chargeback(c) => chargeback(cli.config, c).await,
        Command::User(UserCommand::Add {
            username,
            role,
            tenant,
            password_stdin,
        }) => {
            let pool = wattledger::database(&cli.config, &[]).await?;
            let password = if password_stdin {
                let mut line = String::new();
                std::io::stdin().read_line(&mut line)?;
                line.trim_end_matches(['\r', '\n']).to_owned()
            } else {
                wattledger::dashboard::login::new_password()?
            };
            wattledger::dashboard::login::add_user(
                &pool,
                &username,
                role,
                tenant.as_deref(),
                &password,
            )
            .await?;
            if password_stdin {
                println!("user {username} ({}) saved", role.as_str());
            } else {
                println!(
                    "user {username} ({}) saved; password (shown once): {password}",
                    role.as_str()
                );
            }
            Ok(())
        }
        Command::Token(c) => token(cli.config, c).await,
    }
}

async fn chargeback(mut config: Config, command: ChargebackCommand) -> anyhow::Result<()> {
    let pool = wattledger::database(&config, &[]).await?;
    match command {
        ChargebackCommand::List => {
            println!(
                "{:<8}  {:<7}  {:>7}  {:>14}  closed",
                "month", "state", "version", "metered kWh"
            );
            for m in store::months(&pool).await? {
                let kwh = m.metered_mj as f64 / 3.6e9;
                println!(
                    "{:<8}  {:<7}  {:>7}  {:>14.3}  {}",
                    Month::of(m.month).to_string(),
                    if m.version.is_some() {
                        "closed"
                    } else {
                        "open"
                    },
                    m.version.map(|v| format!("v{v}")).unwrap_or_default(),
                    kwh,
                    m.closed_at
                        .map(|t| format!(
                            "{} by {}",
                            t.format("%Y-%m-%d %H:%M UTC"),
                            m.closed_by.unwrap_or_default()
                        ))
                        .unwrap_or_default()
                );
            }
            Ok(())
        }
        ChargebackCommand::Close { month, out, actor } => {
            if out.is_some() {
                config.export_dir = out;
            }
            let pending = store::pending_hours(&pool, month).await? as u64;
            let mut p = Progress::new("attribution", pending);
            let closed = wattledger::app::month_close::close(&pool, &config, month, &actor, |s| {
                p.set(s.hours)
            })
            .await;
            p.finish();
            let closed = closed?;
            print!("{}", demo::close_summary(&closed.close));
            if let Some(dir) = &config.export_dir {
                println!(
                    "exports in {}",
                    dir.join(month.to_string())
                        .join(format!("v{}", closed.close.version))
                        .display()
                );
            }
            Ok(())
        }
        ChargebackCommand::Export { month, format, out } => {
            let formats: &[&str] = match format {
                ExportFormat::Csv => &["csv"],
                ExportFormat::Focus => &["focus"],
                ExportFormat::Focus14 => &[FOCUS_1_4],
                ExportFormat::Json => &["json"],
                ExportFormat::Prices => &[prices::FORMAT],
                ExportFormat::All => &["csv", "focus", FOCUS_1_4, prices::FORMAT, "json"],
            };
            let not_closed =
                || format!("{month} is not closed: `wattledger chargeback close {month}` first");
            let all = wattledger_store::Scope::All;
            // Loaded once: FOCUS 1.4 and the price list are rendered from it, the others are
            // the files frozen with it.
            let close = store::load(&pool, month, &all)
                .await?
                .with_context(not_closed)?;
            let mut exports: Vec<Export> = Vec::new();
            for f in formats {
                exports.push(match *f {
                    FOCUS_1_4 => focus::export(&close, focus::Version::V1_4),
                    prices::FORMAT => prices::export(&close),
                    stored => {
                        store::export(&pool, &all, month, stored)
                            .await?
                            .with_context(not_closed)?
                            .1
                    }
                });
            }
            let folder =
                wattledger::app::month_close::write_exports(&out, month, close.version, &exports)?;
            for e in &exports {
                println!("{}  {}", e.sha256, folder.join(&e.file_name).display());
            }
            Ok(())
        }
        ChargebackCommand::Reopen {
            month,
            reason,
            actor,
        } => {
            anyhow::ensure!(!reason.trim().is_empty(), "--reason must say why");
            let v = wattledger::app::month_close::reopen(
                &pool,
                month,
                &actor,
                reason.trim(),
                chrono::Utc::now(),
            )
            .await?;
            println!(
                "{month} v{v} reopened; `wattledger chargeback close {month}` issues v{}",
                v + 1
            );
            Ok(())
        }
    }
}

/// `wattledger token …`: tokens are recorded in the database, so each command opens it.
async fn token(config: Config, command: TokenCommand) -> anyhow::Result<()> {
    use wattledger::auth::issue;
    let pool = wattledger::database(&config, &[]).await?;
    match command {
        TokenCommand::Mint {
            role,
            tenant,
            sub,
            ttl_s,
            note,
            by,
        } => {
            let keys = wattledger::signing_key(&config)?.with_max_ttl(config.token_max_ttl);
            let request = issue::Request {
                sub: &sub,
                role,
                tenant: tenant.as_deref(),
                ttl_s: ttl_s.unwrap_or(issue::DEFAULT_TTL_S.min(config.token_max_ttl)),
                minted_by: &by,
                note: &note,
            };
            let issued = issue::issue(&pool, &keys, &request).await?;
            eprintln!(
                "token {} ({}, {}) expires {}",
                issued.record.jti,
                issued.record.role,
                issued.record.sub,
                issued.record.expires_at.format("%Y-%m-%d %H:%M UTC")
            );
            println!("{}", issued.token);
            Ok(())
        }
        TokenCommand::List { all } => {
            let tokens = wattledger_store::api_tokens::list(&pool, all, Utc::now()).await?;
            println!(
                "{:<36}  {:<9}  {:<20}  {:<16}  {:<17}  {:<17}  state",
                "jti", "role", "subject", "tenant", "issued", "expires"
            );
            let when = |t: DateTime<Utc>| t.format("%Y-%m-%d %H:%M").to_string();
            let now = Utc::now();
            for t in tokens {
                let state = match (&t.revoked_at, &t.revoked_by) {
                    (Some(at), Some(by)) => format!("revoked {} by {by}", when(*at)),
                    _ => t.state(now).to_string(),
                };
                println!(
                    "{:<36}  {:<9}  {:<20}  {:<16}  {:<17}  {:<17}  {state}",
                    t.jti,
                    t.role.as_str(),
                    t.sub,
                    t.tenant.as_deref().unwrap_or("-"),
                    when(t.issued_at),
                    when(t.expires_at),
                );
            }
            Ok(())
        }
        TokenCommand::Revoke { jti, by } => {
            anyhow::ensure!(
                wattledger_domain::input::key(&by).is_ok(),
                "--by must be a name without control characters"
            );
            // The servers learn it from the database; this process refuses no token.
            match wattledger_store::api_tokens::revoke(&pool, jti, &by, Utc::now()).await {
                Ok(t) => {
                    println!(
                        "token {jti} ({}, {}) revoked; every server refuses it now",
                        t.role, t.sub
                    );
                    Ok(())
                }
                Err(wattledger_store::StoreError::NotFound) => {
                    anyhow::bail!("no token {jti} was minted here (`wattledger token list --all`)")
                }
                Err(e) => Err(e.into()),
            }
        }
    }
}

/// `wattledger retention`: one line per partition with its verdict, then what was done.
async fn retention(config: Config, dry_run: bool) -> anyhow::Result<()> {
    use wattledger_store::retention;
    let pool = wattledger::database(&config, &[]).await?;
    let policy = config.retention();
    let now = Utc::now();
    println!(
        "retention: step records {} days, raw readings {} days, unclosed months {}",
        policy.steps_days,
        policy.raw_days,
        if policy.keep_unclosed_months {
            "kept"
        } else {
            "not kept"
        }
    );
    let plan = retention::plan(&pool, &policy, now).await?;
    for (span, verdict) in &plan.partitions {
        println!(
            "{:<28} {} to {}  {verdict}",
            span.name, span.start, span.end
        );
    }
    let n = plan.to_drop().count();
    if dry_run {
        println!("dry run: {n} partition(s) would be dropped; nothing changed");
        return Ok(());
    }
    let created = wattledger_store::partitions::ensure_ahead(&pool, now).await?;
    let dropped = retention::apply(&pool, &policy, now, &plan).await?;
    println!(
        "created {created} partition(s) ahead; dropped {} of {n} ({})",
        dropped.len(),
        if dropped.len() == n {
            "all planned"
        } else {
            "the rest were held by a guard since the plan"
        }
    );
    Ok(())
}
