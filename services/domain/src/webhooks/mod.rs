//! Outgoing webhooks, the pure part: Standard Webhooks signatures and secrets
//! (`signature`), when to try a delivery again (`retry`) and which destination addresses
//! are refused (`ssrf`). Sending, resolving names and storing attempts live at the edge.

pub mod retry;
pub mod signature;
pub mod ssrf;

pub use retry::{Outcome, RETRY_SCHEDULE};
pub use signature::{Secret, SignatureError};
pub use ssrf::{Destination, DestinationError, Reach};
