//! Read models: what the API and the dashboard both show, computed once from what the store
//! returns (each view a module), so a figure cannot differ between a page and its endpoint.

pub mod download;
pub mod power;
pub mod site_efficiency;
