//! The wattledger agent: reads GPUs, PDUs, BMCs, inference servers and schedulers and pushes
//! what it read to the ingest API, through a disk spool that loses nothing.
//!
//! - `sources/<name>/`: one folder per source: its config and I/O edge in `mod.rs`, its pure
//!   parser of the peer's wire format in `parse.rs`, fed real payloads by its tests;
//!   `sources/` itself holds the traits, the registry of sources and the context a source
//!   is built in, and imports nothing of `agent/`;
//! - `feeds.rs`: PDU outlets summed into one counter per node meter;
//! - `pods.rs`: Kubernetes pods on GPUs as jobs that open, move and close;
//! - `steps.rs`: fast readings reduced to one record per meter per step;
//! - `records.rs`: the ingest API's record types; `units.rs`: register units to W and mJ;
//! - `agent/`: configuration, spool, push, metrics and the run loop: it builds the sources
//!   the registry lists from its TOML, each with the context its `[agent]` section gives.

pub mod agent;
pub mod feeds;
pub mod pods;
pub mod records;
pub mod sources;
pub mod steps;
pub mod units;

#[cfg(test)]
pub(crate) mod fixtures {
    //! Real payloads live in `../shared/fixtures` beside the checkout (see its SOURCES.md);
    //! tests read them from there rather than copying them into the repository.

    use std::path::PathBuf;

    /// The AMD outputs of `shared/fixtures/amd` (sources in its SOURCES.md).
    pub fn amd(name: &str) -> String {
        read(&format!("amd/{name}"))
    }

    /// A Kubernetes Pod from public test data (`shared/fixtures/kubernetes/pods/`, sources in
    /// its SOURCES.md).
    pub fn kubernetes(name: &str) -> String {
        read(&format!("kubernetes/pods/{name}"))
    }

    pub fn read(path: &str) -> String {
        let full = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/fixtures")
            .join(path);
        std::fs::read_to_string(&full).unwrap_or_else(|e| {
            panic!(
                "fixture {} (shared/ must sit beside the checkout): {e}",
                full.display()
            )
        })
    }
}
