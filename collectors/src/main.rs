//! `wattledger-agent`: runs the sources in a TOML config and pushes to the server.

use anyhow::Context;
use clap::Parser;
use std::path::PathBuf;
use wattledger_agent::agent::{config::Config, run};

#[derive(Parser)]
#[command(
    version,
    about = "Reads GPUs, PDUs, BMCs, inference servers and schedulers; pushes to wattledger."
)]
struct Cli {
    /// The TOML configuration (see deploy/agent/agent.toml).
    #[arg(
        long,
        env = "WATTLEDGER_AGENT_CONFIG",
        default_value = "/etc/wattledger/agent.toml"
    )]
    config: PathBuf,
    /// Check the configuration, print the sources it defines, and exit.
    #[arg(long)]
    check_config: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, not in journald or a log file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let cli = Cli::parse();
    let config = Config::load(&cli.config)?;
    if cli.check_config {
        config.token().context("the collector token")?;
        run::sources(&config)?;
        println!("{}: ok", cli.config.display());
        println!("site {} → {}", config.agent.site, config.agent.server);
        for source in config.sources() {
            println!("  source: {}", source.name());
        }
        return Ok(());
    }
    run::run(config, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}
