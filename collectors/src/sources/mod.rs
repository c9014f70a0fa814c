//! One module per source; each parses its wire format in a pure function.

pub mod dcgm;
pub mod tokens;
