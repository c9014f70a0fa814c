//! A private PostgreSQL cluster for the demo and tests when no `DATABASE_URL` is given.
//!
//! Started from the installed binaries (`initdb`, `pg_ctl`) in a data directory, on a free
//! loopback port remembered in the directory, and reused while it runs. As root, the server
//! runs as the `postgres` user (PostgreSQL refuses to run as root).
//!
//! A server this process started stops with it: the command calls [`stop_started`] on its
//! way out (Ctrl-C and SIGTERM included), a fast shutdown that keeps the data for the next
//! start. One it found running belongs to whoever started it and is left alone.

use anyhow::{bail, Context};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// The servers this process started, to stop on its way out.
static STARTED: Mutex<Vec<EmbeddedPostgres>> = Mutex::new(Vec::new());

#[derive(Clone)]
pub struct EmbeddedPostgres {
    pub dir: PathBuf,
    pub port: u16,
    bin: PathBuf,
    root: bool,
}

/// Where the PostgreSQL server binaries are, newest version first.
fn find_bindir() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("initdb").exists())
        .collect();
    candidates.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    if let Some(p) = candidates.pop() {
        return Some(p);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .find(|p| p.join("initdb").exists() && p.join("pg_ctl").exists())
    })
}

/// Whether the `postgres` user can search `dir` (and so every directory above it).
fn postgres_can_enter(dir: &Path) -> bool {
    Command::new("runuser")
        .args(["-u", "postgres", "--", "test", "-x"])
        .arg(dir)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// A stable name for a path (FNV-1a), so the fallback directory is reused run after run.
fn path_hash(p: &Path) -> u64 {
    p.to_string_lossy()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

impl EmbeddedPostgres {
    /// Starts (or reuses) the cluster in `dir`. `settings` are extra `-c name=value` options.
    pub fn start(dir: &Path, settings: &[&str]) -> anyhow::Result<Self> {
        let Some(bin) = find_bindir() else {
            bail!(
                "no DATABASE_URL is set and no PostgreSQL server is installed to start one.\n\
                 Install it with:   apt-get install -y postgresql\n\
                 or point wattledger at a server:   export DATABASE_URL=postgres://user:pass@host/db"
            );
        };
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut dir = dir.canonicalize()?;
        let root = is_root();
        if root && !postgres_can_enter(&dir) {
            // A checkout under a private home (/root is 0700): the server, running as the
            // postgres user, could not reach it.
            let fallback =
                std::env::temp_dir().join(format!("wattledger-{:016x}", path_hash(&dir)));
            tracing::warn!(
                wanted = %dir.display(),
                using = %fallback.display(),
                "the postgres user cannot reach the data directory; using a temporary one"
            );
            std::fs::create_dir_all(&fallback)?;
            dir = fallback;
        }
        let pg = EmbeddedPostgres {
            port: 0,
            dir: dir.join("postgres"),
            bin,
            root,
        };
        if !pg.dir.join("PG_VERSION").exists() {
            std::fs::create_dir_all(&pg.dir)?;
            if root {
                pg.chown_to_postgres()?;
            }
            tracing::info!(dir = %pg.dir.display(), "creating a private PostgreSQL cluster");
            pg.run(
                root,
                "initdb",
                &[
                    "-D",
                    &pg.dir.to_string_lossy(),
                    "-U",
                    "wattledger",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--no-locale",
                ],
            )?;
        }
        let port_file = dir.join("postgres.port");
        let port = match std::fs::read_to_string(&port_file)
            .ok()
            .and_then(|p| p.trim().parse().ok())
        {
            Some(p) => p,
            None => {
                let p = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
                std::fs::write(&port_file, p.to_string())?;
                p
            }
        };
        let pg = EmbeddedPostgres { port, ..pg };
        let data = pg.dir.to_string_lossy().to_string();
        let running = pg
            .command(root, "pg_ctl", &["-D", &data, "status"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if !running {
            let mut options = format!("-p {port} -k {data} -c listen_addresses=127.0.0.1");
            for s in settings {
                options.push_str(&format!(" -c {s}"));
            }
            let log = pg.dir.join("server.log").to_string_lossy().to_string();
            pg.run(
                root,
                "pg_ctl",
                &[
                    "-D", &data, "-o", &options, "-l", &log, "-w", "-t", "60", "start",
                ],
            )
            .with_context(|| format!("starting PostgreSQL; its log is {log}"))?;
            STARTED
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(pg.clone());
        }
        Ok(pg)
    }

    /// A fast shutdown (`pg_ctl stop -m fast`): sessions are ended, the data is kept.
    pub fn stop(&self) -> anyhow::Result<()> {
        let data = self.dir.to_string_lossy().to_string();
        self.run(
            self.root,
            "pg_ctl",
            &["-D", &data, "-m", "fast", "-w", "-t", "60", "stop"],
        )
    }

    pub fn url(&self, database: &str) -> String {
        format!("postgres://wattledger@127.0.0.1:{}/{database}", self.port)
    }

    fn chown_to_postgres(&self) -> anyhow::Result<()> {
        let status = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&self.dir)
            .status()?;
        if !status.success() {
            bail!(
                "could not give {} to the postgres user (does the user exist?)",
                self.dir.display()
            );
        }
        Ok(())
    }

    fn command(&self, root: bool, tool: &str, args: &[&str]) -> Command {
        let exe = self.bin.join(tool);
        if root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(exe).args(args);
            c
        } else {
            let mut c = Command::new(exe);
            c.args(args);
            c
        }
    }

    fn run(&self, root: bool, tool: &str, args: &[&str]) -> anyhow::Result<()> {
        let out = self
            .command(root, tool, args)
            .output()
            .with_context(|| format!("running {tool}"))?;
        if !out.status.success() {
            bail!(
                "{tool} failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }
}

/// Stops every server this process started, each once; says on stderr what it could not stop
/// and how to.
pub fn stop_started() {
    let started = std::mem::take(&mut *STARTED.lock().unwrap_or_else(|e| e.into_inner()));
    for pg in started {
        if let Err(e) = pg.stop() {
            eprintln!(
                "The embedded PostgreSQL in {} did not stop ({e:#}); stop it with\n  pg_ctl -D {} -m fast stop",
                pg.dir.display(),
                pg.dir.display()
            );
        }
    }
}

/// Creates `name` on the server at `admin_url` (a database that exists) if it is missing.
pub async fn ensure_database(admin_url: &str, name: &str) -> anyhow::Result<()> {
    Ok(wattledger_store::databases::ensure(admin_url, name).await?)
}
