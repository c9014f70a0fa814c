//! The agent's clock: the server's time, carried between its answers by the monotonic clock.
//!
//! A reading's time is the agent's to give (a counter is read now), and a machine's wall clock
//! can be wrong: the server refuses a reading from more than its allowed skew ahead, and files
//! one from a slow clock in the wrong minutes and hours. So the agent stamps readings with the
//! server's time. Every answer from the server carries it ([`SERVER_TIME_HEADER`]); between
//! answers the agent adds the monotonic clock's elapsed time to the last one. The machine's
//! wall clock is used only until the first answer, and a step of it afterwards (an NTP
//! correction, `date -s`) changes nothing: the monotonic clock does not step.
//!
//! The server stamps an answer when it has built it, so the agent's estimate is late by the
//! answer's one-way trip (milliseconds on a datacenter network), never by the time the server
//! spent on the request. The clock does not go back by a trip's jitter: a new estimate up to
//! a second behind the carried one waits for it, so readings stay in order. A larger step back
//! is a correction (the machine's clock was fast before the first answer) and is taken.
//!
//! How far the machine's clock was off is kept in the spool directory (`clock-offset-ms`), so
//! an agent restarted while the server is out of reach stamps its first readings with the
//! machine's clock corrected by it, until an answer comes.

use chrono::{DateTime, Utc};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;
pub use wattledger_wire::SERVER_TIME_HEADER;

/// The server's time at a moment of the monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Anchor {
    at: Instant,
    server: DateTime<Utc>,
}

impl Anchor {
    /// The server's time at `now`, carried from the anchor.
    fn carried(self, now: Instant) -> DateTime<Utc> {
        let elapsed = now.saturating_duration_since(self.at);
        self.server + chrono::Duration::from_std(elapsed).unwrap_or_default()
    }
}

#[derive(Debug, Default)]
struct State {
    anchor: Option<Anchor>,
    /// How far the machine's clock was behind the server's when last known (a previous run's,
    /// until an answer comes): what corrects it before the first answer.
    behind: chrono::Duration,
    /// What the offset file holds.
    saved: Option<chrono::Duration>,
    /// The latest time handed out: none later is earlier by less than [`JITTER`].
    last: Option<DateTime<Utc>>,
}

/// The time readings are stamped with; shared by the sources and the pusher.
#[derive(Debug, Default)]
pub struct Clock {
    state: Mutex<State>,
    /// Where the offset is kept across restarts; none in tests.
    file: Option<PathBuf>,
}

/// How far back a new estimate may be and still wait for the carried time: more than any
/// answer's trip on a network the agent can push over.
const JITTER: chrono::Duration = chrono::Duration::seconds(1);

/// The offset file's name in the spool directory.
const OFFSET_FILE: &str = "clock-offset-ms";

impl Clock {
    /// The clock of an agent spooling in `spool_dir`, corrected by the offset its last run
    /// kept there until the server answers.
    pub fn in_spool(spool_dir: &Path) -> Clock {
        let file = spool_dir.join(OFFSET_FILE);
        let saved = std::fs::read_to_string(&file)
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
            .map(chrono::Duration::milliseconds);
        if let Some(behind) = saved {
            tracing::info!(
                behind_ms = behind.num_milliseconds(),
                "until the server answers, readings carry this machine's clock corrected by the offset it had when last known"
            );
        }
        Clock {
            state: Mutex::new(State {
                behind: saved.unwrap_or_default(),
                saved,
                ..State::default()
            }),
            file: Some(file),
        }
    }

    /// Now, by the server's clock once an answer has given it, by this machine's before.
    pub fn now(&self) -> DateTime<Utc> {
        self.at(Instant::now(), Utc::now())
    }

    fn at(&self, now: Instant, wall: DateTime<Utc>) -> DateTime<Utc> {
        let mut s = self.state.lock().expect("clock lock");
        let t = s.anchor.map_or(wall + s.behind, |a| a.carried(now));
        let t = match s.last {
            Some(last) if t < last && last - t < JITTER => last,
            _ => t,
        };
        s.last = Some(t);
        t
    }

    /// Takes the server's time from an answer received at `received` (when this machine's
    /// wall clock read `wall`). Returns how far this machine's wall clock is behind the
    /// server's (negative: ahead).
    pub fn observe(
        &self,
        server: DateTime<Utc>,
        received: Instant,
        wall: DateTime<Utc>,
    ) -> chrono::Duration {
        let behind = server - wall;
        let mut s = self.state.lock().expect("clock lock");
        s.anchor = Some(Anchor {
            at: received,
            server,
        });
        s.behind = behind;
        // Kept when it moved by a second or more: a restart needs it to that, not to the ms.
        let moved = s
            .saved
            .is_none_or(|saved| (saved - behind).abs() >= chrono::Duration::seconds(1));
        if let (true, Some(file)) = (moved, &self.file) {
            match save(file, behind) {
                Ok(()) => s.saved = Some(behind),
                Err(e) => {
                    tracing::warn!(file = %file.display(), error = %e, "could not keep the clock's offset for the next start")
                }
            }
        }
        behind
    }

    /// Whether an answer has given the server's time yet.
    pub fn synced(&self) -> bool {
        self.state.lock().expect("clock lock").anchor.is_some()
    }
}

/// Writes the offset whole or not at all: a temporary file renamed over the old one.
fn save(file: &Path, behind: chrono::Duration) -> std::io::Result<()> {
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, behind.num_milliseconds().to_string())?;
    std::fs::rename(&tmp, file)
}

/// The server's time in an answer's headers, if it sent one that reads.
pub fn from_headers(headers: &reqwest::header::HeaderMap) -> Option<DateTime<Utc>> {
    let v = headers.get(SERVER_TIME_HEADER)?.to_str().ok()?;
    DateTime::parse_from_rfc3339(v)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn the_wall_clock_serves_until_the_server_answers_then_the_servers_time_is_carried() {
        let clock = Clock::default();
        let start = Instant::now();
        // Ten minutes fast: before any answer, that is all there is.
        let wall = t("2026-11-02T10:10:00Z");
        assert_eq!(clock.at(start, wall), wall);
        assert!(!clock.synced());
        let behind = clock.observe(t("2026-11-02T10:00:00.250Z"), start, wall);
        assert_eq!(behind, chrono::Duration::milliseconds(-599_750));
        assert!(clock.synced());
        // 1.5 s later by the monotonic clock, whatever the wall clock says now (it stepped);
        // ten minutes back from the reading before the answer, which was fast.
        let later = start + Duration::from_millis(1_500);
        assert_eq!(
            clock.at(later, t("2030-01-01T00:00:00Z")),
            t("2026-11-02T10:00:01.750Z")
        );
    }

    #[test]
    fn the_clock_never_goes_back() {
        let clock = Clock::default();
        let start = Instant::now();
        clock.observe(t("2026-11-02T10:00:00Z"), start, t("2026-11-02T10:00:00Z"));
        let a = clock.at(start + Duration::from_millis(100), Utc::now());
        // A later answer a few ms behind the carried time: the clock waits for it.
        clock.observe(
            t("2026-11-02T10:00:00.090Z"),
            start + Duration::from_millis(100),
            Utc::now(),
        );
        let b = clock.at(start + Duration::from_millis(105), Utc::now());
        assert_eq!((a, b), (t("2026-11-02T10:00:00.100Z"), a));
        let c = clock.at(start + Duration::from_millis(200), Utc::now());
        assert_eq!(c, t("2026-11-02T10:00:00.190Z"));
    }

    #[test]
    fn the_offset_is_kept_for_the_next_start_and_corrects_the_machines_clock_until_an_answer() {
        let dir = std::env::temp_dir().join(format!("wl-clock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let _ = std::fs::remove_file(dir.join(OFFSET_FILE));
        let start = Instant::now();
        let wall = t("2026-11-02T10:10:00Z");
        let first = Clock::in_spool(&dir);
        assert_eq!(first.at(start, wall), wall, "nothing known yet");
        first.observe(t("2026-11-02T10:00:00Z"), start, wall);
        assert_eq!(
            std::fs::read_to_string(dir.join(OFFSET_FILE)).unwrap(),
            "-600000"
        );
        // The next run, the server out of reach: the machine's clock, corrected.
        let next = Clock::in_spool(&dir);
        assert!(!next.synced());
        assert_eq!(
            next.at(start, t("2026-11-02T11:10:00Z")),
            t("2026-11-02T11:00:00Z")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_header_reads_as_rfc_3339() {
        let mut h = reqwest::header::HeaderMap::new();
        assert_eq!(from_headers(&h), None);
        h.insert(
            SERVER_TIME_HEADER,
            "2026-11-02T10:00:00.123Z".parse().unwrap(),
        );
        assert_eq!(from_headers(&h), Some(t("2026-11-02T10:00:00.123Z")));
        h.insert(SERVER_TIME_HEADER, "yesterday".parse().unwrap());
        assert_eq!(from_headers(&h), None);
    }
}
