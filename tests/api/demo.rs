//! The demo's data, made once per test run by the real `wattledger demo --no-serve` (a
//! simulated month and a half, attributed, chargeback closed up to the last full month) and
//! shared by the tests that need a realistic cluster: the FOCUS validator's and the browser's.

use crate::agent::{binary, free_port};
use std::path::PathBuf;
use std::process::Command;
use tokio::sync::OnceCell;
use wattledger_tests::fresh_db;

pub(crate) struct Demo {
    pub(crate) db_url: String,
    /// Its data directory: exports under `exports/`.
    pub(crate) dir: PathBuf,
    pub(crate) stdout: String,
}

static DEMO: OnceCell<Demo> = OnceCell::const_new();

pub(crate) async fn demo() -> &'static Demo {
    DEMO.get_or_init(|| async {
        let (_pool, db_url) = fresh_db().await;
        let dir = std::env::temp_dir().join(format!("wl-demo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = tokio::task::spawn_blocking({
            let (db_url, dir) = (db_url.clone(), dir.clone());
            move || {
                Command::new(binary("wattledger"))
                    .args(["--database-url", &db_url])
                    .args(["--listen", &format!("127.0.0.1:{}", free_port())])
                    .arg("--data-dir")
                    .arg(&dir)
                    .args(["demo", "--no-serve"])
                    .env("RUST_LOG", "warn")
                    .output()
                    .unwrap()
            }
        })
        .await
        .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "demo failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Demo {
            db_url,
            dir,
            stdout,
        }
    })
    .await
}
