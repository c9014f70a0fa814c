//! The rule for end-to-end tests that need a real peer installed or running (headless
//! Chromium, Prometheus and promtool, the Slurm lab of `../shared`): `tests/run` installs and
//! starts them and sets `WATTLEDGER_PEERS=required`, so there a missing peer fails the test;
//! a bare `cargo test` on a machine without them skips those tests instead, saying what is
//! missing and how to get it. The agent's lab tests follow the same rule
//! (`collectors/tests/peers/mod.rs`).

/// Whether a test needing a peer can run: `true` when `present`; otherwise a note on stderr
/// and `false`, or, when peers are required, a panic with the same words.
pub fn ready(present: bool, what: &str, how: &str) -> bool {
    if present {
        return true;
    }
    let msg = format!("{what}; {how} (tests/run does)");
    if std::env::var("WATTLEDGER_PEERS").is_ok_and(|v| v == "required") {
        panic!("{msg}");
    }
    eprintln!("skipped: {msg}");
    false
}

/// Whether `program` is on the `PATH`.
pub fn installed(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}
