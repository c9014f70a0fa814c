//! Outgoing webhooks, the pure part: Standard Webhooks signatures and secrets
//! (`signature`), when to try a delivery again (`retry`) and which destination addresses
//! are refused (`ssrf`). Sending, resolving names and storing attempts live at the edge.

pub mod retry;
pub mod signature;
pub mod ssrf;

pub use retry::{Outcome, RETRY_SCHEDULE};

crate::names::names! {
    /// Where a message of the outbox stands. The names are the API's and the database's
    /// (migration 0011's CHECK).
    pub enum MessageState {
        /// Waiting for its next attempt.
        Pending = "pending",
        Delivered = "delivered",
        /// Given up: after the last attempt, or on a 410 from the receiver.
        Dead = "dead",
        /// Its endpoint was deleted before it was delivered.
        Cancelled = "cancelled",
    }
}
pub use signature::{Secret, SignatureError};
pub use ssrf::{Destination, DestinationError, Reach};
