//! The rule for tests that need a real peer (`../shared/pdu-lab`, `../shared/slurm-lab`):
//! `tests/run` starts the labs and sets `WATTLEDGER_PEERS=required`, so there a missing peer
//! fails the test; a bare `cargo test -p wattledger-agent` skips those tests instead, saying
//! what is missing and how to start it.

/// `None` after a note on stderr when the peer is missing and not required; a panic with the
/// same words when it is.
pub fn missing<T>(what: &str, how: &str) -> Option<T> {
    let msg = format!("{what}; {how} (tests/run does)");
    if std::env::var("WATTLEDGER_PEERS").is_ok_and(|v| v == "required") {
        panic!("{msg}");
    }
    eprintln!("skipped: {msg}");
    None
}
