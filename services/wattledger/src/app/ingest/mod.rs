//! Ingest: how pushed records reach the database. Sample batches are committed in groups
//! (`group_commit`) against the meters this server has already looked up (`meter_cache`).

pub mod group_commit;
pub mod meter_cache;
