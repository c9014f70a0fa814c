-- The ledger, its device parts and the two usage rollups are projections: attribution alone
-- writes them, replacing a claim's hours, from ids it has just read from `sites`, `tenants`,
-- `models` and `jobs`, and nothing deletes a row of those four. Their foreign keys checked
-- each written row against each referenced table (a lookup and a row lock per key per row):
-- at 10,240 GPUs a site-day writes ~49,000 ledger rows and as many device parts, and the
-- checks were 55-60 % of the writes' time (BENCHMARKS.md, the 10,240-GPU fleet-day profiled).
-- The tables they project keep theirs: every input row is checked as it arrives.
ALTER TABLE ledger
    DROP CONSTRAINT IF EXISTS ledger_site_id_fkey,
    DROP CONSTRAINT IF EXISTS ledger_tenant_id_fkey,
    DROP CONSTRAINT IF EXISTS ledger_model_id_fkey,
    DROP CONSTRAINT IF EXISTS ledger_site_id_job_id_fkey,
    DROP CONSTRAINT IF EXISTS ledger_job_id_fkey;
ALTER TABLE ledger_devices
    DROP CONSTRAINT IF EXISTS ledger_devices_site_id_fkey,
    DROP CONSTRAINT IF EXISTS ledger_devices_tenant_id_fkey,
    DROP CONSTRAINT IF EXISTS ledger_devices_model_id_fkey,
    DROP CONSTRAINT IF EXISTS ledger_devices_site_id_job_id_fkey;
ALTER TABLE usage_job_days
    DROP CONSTRAINT IF EXISTS usage_job_days_site_id_fkey,
    DROP CONSTRAINT IF EXISTS usage_job_days_tenant_id_fkey,
    DROP CONSTRAINT IF EXISTS usage_job_days_model_id_fkey;
ALTER TABLE usage_days
    DROP CONSTRAINT IF EXISTS usage_days_site_id_fkey,
    DROP CONSTRAINT IF EXISTS usage_days_tenant_id_fkey,
    DROP CONSTRAINT IF EXISTS usage_days_model_id_fkey;
