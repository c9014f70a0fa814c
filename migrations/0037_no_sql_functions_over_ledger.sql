-- The tenant-day rollup's rebuild and the usage span are built by the store as statements
-- (store::attribution::rebuild_days, store::usage::span_rows) rather than kept as SQL
-- functions: a distributed PostgreSQL (Citus) cannot plan a SQL function over its sharded
-- tables when it is called with parameters, as every statement of the server is.
DROP FUNCTION usage_days_rebuild(bigint, timestamptz[]);
DROP FUNCTION ledger_span(bigint, timestamptz, timestamptz);
