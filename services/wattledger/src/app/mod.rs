//! The application layer: what the server does, one use case a module, between the requests
//! that ask for it (`crate::http`, `crate::dashboard`, the worker) and the store and domain
//! that hold and compute it.

pub mod ingest;
