//! Processes a test starts, stopped when the test ends, also when it fails: each is started
//! as the leader of its own process group, and dropping its guard ends the whole group, with
//! what it started in turn (a demo's agent, chromedriver's browser, a receiver's interpreter).
//! A killed leader alone would leave those running after the test run.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// A child process that is stopped, with its process group, when dropped.
pub struct Killed(pub Child);

/// How long a process group asked to stop (SIGTERM) has before it is killed.
const GRACE: Duration = Duration::from_secs(5);

impl Killed {
    /// Starts `command` as the leader of a new process group.
    pub fn spawn(command: &mut Command) -> Killed {
        Killed(
            command
                .process_group(0)
                .spawn()
                .unwrap_or_else(|e| panic!("starting {:?}: {e}", command.get_program())),
        )
    }

    /// Asks the process alone to stop (SIGTERM), as Ctrl-C or a service manager would, and
    /// waits up to `within` for it: its exit status, or `None` if it is still running. What
    /// it started is left to it, so a test can see what it stopped itself.
    pub fn terminate(&mut self, within: Duration) -> Option<ExitStatus> {
        signal("TERM", &self.0.id().to_string());
        self.wait_for(within)
    }

    fn wait_for(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.0.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        let group = format!("-{}", self.0.id());
        // Asked first (a server drains, a demo stops its agent and its PostgreSQL), then
        // killed, the leader and anything of its group still there. A child not started by
        // `spawn` leads no group: the signal fails and it is killed at once.
        if signal("TERM", &group) {
            self.wait_for(GRACE);
            signal("KILL", &group);
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `kill -s SIG -- target` (a pid, or a process group as `-pgid`): whether it was delivered.
fn signal(sig: &str, target: &str) -> bool {
    Command::new("kill")
        .args(["-s", sig, "--", target])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The processes whose command line mentions `needle` (a data directory, a config file),
/// as `pid: command line`, this process excepted.
pub fn mentioning(needle: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_string_lossy().into_owned();
            if pid == me || !pid.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let raw = std::fs::read(e.path().join("cmdline")).ok()?;
            let line = String::from_utf8_lossy(&raw).replace('\0', " ");
            line.contains(needle)
                .then(|| format!("{pid}: {}", line.trim_end()))
        })
        .collect()
}
