//! The agent itself: configuration, the disk spool, pushing, its own metrics, and the loop
//! that runs every source on its interval.

pub mod config;
pub mod dead_letter;
pub mod metrics;
pub mod push;
pub mod run;
pub mod spool;
pub mod stepped;
