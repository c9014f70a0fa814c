//! The `wattledger` command: serve the API, migrate, run the demo, attribute, mint tokens.

use anyhow::Context;
use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;
use wattledger::auth::Role;
use wattledger::config::Config;
use wattledger::demo::{self, DemoArgs};
use wattledger::progress::Progress;
use wattledger::{startup, worker};

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
    /// Mint an API token signed with the configured key.
    Token {
        #[arg(long, value_enum)]
        role: Role,
        /// Tenant key (required for, and only for, --role tenant).
        #[arg(long)]
        tenant: Option<String>,
        /// Subject: who or what the token is for.
        #[arg(long, default_value = "cli")]
        sub: String,
        /// Lifetime in seconds.
        #[arg(long, default_value_t = 86_400)]
        ttl_s: i64,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("warn,wattledger=info")),
        )
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, not in journald or a log file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Serve => {
            let pool = wattledger::database(&cli.config, &[]).await?;
            let keys = wattledger::signing_key(&cli.config)?;
            let listener = tokio::net::TcpListener::bind(cli.config.listen)
                .await
                .with_context(|| format!("binding {}", cli.config.listen))?;
            tracing::info!(addr = %listener.local_addr()?, "serving");
            startup::serve(pool, keys, cli.config, listener, startup::shutdown_signal()).await
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
        Command::Token {
            role,
            tenant,
            sub,
            ttl_s,
        } => {
            let keys = wattledger::signing_key(&cli.config)?;
            println!("{}", keys.mint(&sub, role, tenant.as_deref(), ttl_s)?);
            Ok(())
        }
    }
}
