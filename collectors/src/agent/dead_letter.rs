//! Records the server refused, one JSON line each with the reason, so an operator can see
//! what was not ingested and resend it after fixing the cause (e.g. a missing tenant).

use chrono::Utc;
use serde_json::{json, Value};
use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;

pub struct DeadLetter {
    path: PathBuf,
}

impl DeadLetter {
    pub fn new(path: PathBuf) -> Self {
        DeadLetter { path }
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Appends one line per refused record and syncs the file.
    pub fn write(
        &self,
        endpoint: &str,
        status: u16,
        refused: &[(Value, String)],
    ) -> std::io::Result<()> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        let at = Utc::now().to_rfc3339();
        let mut buf = Vec::new();
        for (record, reason) in refused {
            serde_json::to_writer(
                &mut buf,
                &json!({"at": at, "endpoint": endpoint, "status": status, "reason": reason, "record": record}),
            )?;
            buf.push(b'\n');
        }
        f.write_all(&buf)?;
        f.sync_data()
    }
}
