//! Admission in the server: the hot state every decision reads (held in memory, refreshed from
//! Postgres in the background), the decision itself, and the writer that stores decisions
//! off the request path.
//!
//! Several replicas: each keeps its own reservations the moment it decides and writes them
//! asynchronously; each reloads every replica's reservations every `refresh` (2 s by
//! default), so two replicas can over-admit against one envelope only within that window.
//! Sites, forecasts, budgets, policies and learned draw reload every 15 refreshes, or at
//! once when this replica changes them.

pub mod hot;
pub mod writer;

pub use hot::{Admission, Answer, Ask, AskError, PowerSource};
