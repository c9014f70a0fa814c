//! The agent itself: configuration, the disk spool, pushing (with its token, read again as it
//! rotates), its own metrics, and the loop that runs every source on its interval.

pub mod clock;
pub mod config;
pub mod dead_letter;
pub mod metrics;
pub mod push;
pub mod run;
pub mod spool;
pub mod stepped;
pub mod token;
