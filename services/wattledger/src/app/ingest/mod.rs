//! Ingest: how pushed records reach the database. Sample batches are committed in groups
//! (`group_commit`) against the meters this server has already looked up (`meter_cache`);
//! jobs are written with their allocations and the hours they re-dirty (`jobs`), token
//! records with the hours whose split they change (`tokens`), meters a tree at a time
//! (`meters`), models with the jobs that named them before they were registered (`models`),
//! device models with their aliases (`device_models`), grid signal points with
//! the hours a revision re-dirties (`signals`), a site's clean-energy deliveries likewise
//! (`clean_energy`).

pub mod clean_energy;
pub mod device_models;
pub mod group_commit;
pub mod jobs;
pub mod meter_cache;
pub mod meters;
pub mod models;
pub mod signals;
pub mod tokens;
