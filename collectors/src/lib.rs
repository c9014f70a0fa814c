//! The wattledger agent's sources. Each source parses its real wire format in a pure
//! function beside it, fed real payloads by its tests; the I/O that fetches the payloads
//! lives at the edges.

pub mod prom;
pub mod sources;

#[cfg(test)]
pub(crate) mod fixtures {
    //! Real payloads live in `../shared/fixtures` beside the checkout (see its SOURCES.md);
    //! tests read them from there rather than copying them into the repository.

    use std::path::PathBuf;

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
