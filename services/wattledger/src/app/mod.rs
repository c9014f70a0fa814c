//! The application layer: what the server does, one use case a module, between the requests
//! that ask for it (`crate::http`, `crate::dashboard`, the worker) and the store and domain
//! that hold and compute it. A use case holds its transaction: it loads through the store,
//! computes with the domain, and writes through the store.

pub mod attribution;
pub mod budget_alerts;
pub mod ingest;
pub mod month_close;
