//! Admission in the server: the hot state every decision reads (held in memory, refreshed from
//! Postgres in the background), the decision itself, and the writer that stores decisions
//! off the request path.
//!
//! Several replicas: each counts its own reservations the moment it decides and writes them
//! asynchronously; every `refresh` (2 s by default) each adds the reservations the others
//! decided since its last look (reaching back a minute, for decisions still being written),
//! so two replicas can over-admit against one envelope only within that window (plus the
//! writer's delay). Every 15 refreshes, or at once when this replica changes one of them,
//! sites, forecasts, budgets, policies and learned draw reload and the state is rebuilt from
//! every stored reservation, which also catches any decision written later than a minute.

pub mod hot;
pub mod writer;

pub use hot::{Admission, Answer, Ask, AskError, PowerSource};
