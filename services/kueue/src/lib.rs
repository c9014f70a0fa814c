//! wattledger's Kueue AdmissionCheck controller. For every AdmissionCheck whose
//! `spec.controllerName` is `wattledger.io/admission` it keeps the `Active` condition, and for
//! every Workload holding quota whose check of ours is `Pending` it asks wattledger's
//! `POST /v1/admission` and sets the check's state: `Ready` to admit (with a power cap as a
//! pod annotation), `Retry` until `start_at` to defer, `Rejected` to reject.
//!
//! The pure part: `objects` (the Kueue objects as read), `params` (our
//! `AdmissionCheckParameters`), `ask` (a Workload as a question), `decision` (an answer as a
//! check state and the bodies that write it), `record` (the decision recorded on the
//! Workload). The I/O: `server` (the wattledger client), `controller` (one reconcile pass
//! against the Kubernetes API), `metrics` (counts, `/healthz`, `/metrics`).

pub mod ask;
pub mod controller;
pub mod decision;
pub mod metrics;
pub mod objects;
pub mod params;
pub mod record;
pub mod server;

pub use controller::{client_at, Controller, PassReport};
pub use metrics::Metrics;
pub use server::Wattledger;
