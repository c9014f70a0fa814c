//! End-to-end tests: the real server against a real PostgreSQL (a fresh database per test).

mod admission;
mod agent;
mod auth;
mod browser;
mod budgets;
mod chargeback;
mod citus;
mod dashboard;
mod demo;
mod grid_events;
mod ingest;
mod kueue;
mod ledger;
mod openapi;
mod power;
mod prometheus;
mod quality;
mod retention;
mod scenario;
mod security;
mod signals;
mod slurm_admission;
mod tls;
mod tokens;
mod webhooks;
mod worker;
