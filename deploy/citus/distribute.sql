-- Every table of wattledger's schema, classified for Citus (a distributed PostgreSQL), in
-- the order the calls must run: on the coordinator, after `wattledger migrate` has built the
-- schema and before the server starts.
--
--   reference    copied to every node: small, read in joins everywhere, written rarely
--   distributed  sharded by site_id, all co-located: a site's samples, meters' heads, jobs,
--                allocations, tokens, ledger, site-hours and rollups live on one shard, so
--                ingest, dirty marking and an attribution run touch one shard
--   local        on the coordinator only: written once per decision, message, session or
--                close, never per sample
--
-- This file is the classification: tests/api/citus.rs reads it and holds the migrated
-- schema to Citus's rules for it (a distributed table's primary and unique keys include
-- site_id; a foreign key between distributed tables pairs site_id with site_id; nothing
-- refers to a distributed table from a reference or local table; every table classified).
-- A migration that adds a table adds it here.

-- Reference tables, parents first.
SELECT create_reference_table('tenants');
SELECT create_reference_table('sites');
SELECT create_reference_table('models');
SELECT create_reference_table('device_models');
SELECT create_reference_table('device_model_aliases');
SELECT create_reference_table('meters');
SELECT create_reference_table('admission_policies');
SELECT create_reference_table('budgets');
SELECT create_reference_table('signal_points');
SELECT create_reference_table('users');
SELECT create_reference_table('webhook_endpoints');
SELECT create_reference_table('site_power_policies');
SELECT create_reference_table('grid_events');

-- Distributed by site, all co-located. `samples` is partitioned (by raw, then
-- by time): Citus distributes its partitions with it, and the ones store::partitions
-- creates later.
SELECT create_distributed_table('jobs', 'site_id');
SELECT create_distributed_table('ledger', 'site_id', colocate_with => 'jobs');
SELECT create_distributed_table('samples', 'site_id', colocate_with => 'jobs');
SELECT create_distributed_table('sample_conflicts', 'site_id', colocate_with => 'jobs');
SELECT create_distributed_table('meter_heads', 'site_id', colocate_with => 'jobs');
SELECT create_distributed_table('dirty_hours', 'site_id', colocate_with => 'jobs');
SELECT create_distributed_table('site_hours', 'site_id', colocate_with => 'jobs');
SELECT create_distributed_table('site_hour_power', 'site_id', colocate_with => 'jobs');
SELECT create_distributed_table('usage_days', 'site_id', colocate_with => 'jobs');
SELECT create_distributed_table('allocations', 'site_id', colocate_with => 'jobs');
SELECT create_distributed_table('token_records', 'site_id', colocate_with => 'jobs');
SELECT create_distributed_table('site_clean_energy', 'site_id', colocate_with => 'jobs');
SELECT create_distributed_table('ledger_devices', 'site_id', colocate_with => 'jobs');

-- Local to the coordinator (in Citus's metadata, so that they may refer to reference tables).
SELECT citus_add_local_table_to_metadata('admission_decisions');
SELECT citus_add_local_table_to_metadata('admission_dead_letters');
SELECT citus_add_local_table_to_metadata('api_tokens');
SELECT citus_add_local_table_to_metadata('attribution_runs');
SELECT citus_add_local_table_to_metadata('budget_events');
SELECT citus_add_local_table_to_metadata('chargeback_audit');
SELECT citus_add_local_table_to_metadata('month_closes');
SELECT citus_add_local_table_to_metadata('chargeback_exports');
SELECT citus_add_local_table_to_metadata('statements');
SELECT citus_add_local_table_to_metadata('statement_lines');
SELECT citus_add_local_table_to_metadata('site_reconciliations');
SELECT citus_add_local_table_to_metadata('dashboard_sessions');
SELECT citus_add_local_table_to_metadata('login_failures');
SELECT citus_add_local_table_to_metadata('partition_compactions');
SELECT citus_add_local_table_to_metadata('retention_drops');
SELECT citus_add_local_table_to_metadata('webhook_messages');
SELECT citus_add_local_table_to_metadata('webhook_attempts');
