-- Per job-day rollups of the ledger (issue 47): one row per (site, day, tenant, model, job),
-- the job NULL for the energy of no job (idle). What a question by job, by how jobs ended or
-- by serving phase over a month reads for its whole days, where it read every job-hour of the
-- month: the tenant page's four such reads each summed the tenant's month of ledger rows
-- (9,279 rows on ~7,000 heap pages at 1,280 GPUs) and joined them to every job.
--
-- Exact by construction, as usage_days (migration 0018): the attribution transaction that
-- rewrites a site's hours rebuilds this table's rows for the days those hours fall in from the
-- ledger rows it has just written, and then usage_days from these rows (a sum of sums: the
-- tenant-day rollup reads the few job-day rows rather than the day's ledger rows again).
-- store::attribution::rebuild_days does both; store::usage reads whole days from here and the
-- hours at a range's edges from the ledger.
--
-- No foreign key to jobs: the ledger row each figure is summed from holds it.
CREATE TABLE usage_job_days (
    day                     timestamptz NOT NULL,
    site_id                 bigint NOT NULL REFERENCES sites (id),
    tenant_id               bigint NOT NULL REFERENCES tenants (id),
    model_id                bigint REFERENCES models (id),
    job_id                  bigint,
    ledger_rows             bigint NOT NULL,
    gpu_mj                  bigint NOT NULL,
    node_overhead_mj        bigint NOT NULL,
    idle_mj                 bigint NOT NULL,
    facility_overhead_mj    bigint NOT NULL,
    total_mj                bigint NOT NULL,
    estimated_mj            bigint NOT NULL,
    prompt_tokens           bigint NOT NULL,
    generated_tokens        bigint NOT NULL,
    gpu_ms                  bigint NOT NULL,
    priced_mj               bigint NOT NULL,
    price_fallback_mj       bigint NOT NULL,
    carbon_mj               bigint NOT NULL,
    carbon_fallback_mj      bigint NOT NULL,
    marginal_mj             bigint NOT NULL,
    -- NULL where none of the day's rows has the figure, as a sum over those rows would be.
    cost                    numeric,
    gpu_time_cost           numeric,
    carbon_g                numeric,
    carbon_marginal_g       numeric,
    embodied_carbon_g       numeric,
    flags                   text[] NOT NULL,
    badput_mj               bigint NOT NULL,
    badput_cost             numeric,
    badput_carbon_g         numeric,
    carbon_free_mj          bigint,
    cfe_mj                  bigint NOT NULL,
    UNIQUE NULLS NOT DISTINCT (site_id, day, tenant_id, model_id, job_id),
    CHECK (day = date_bin('1 day', day, timestamptz 'epoch'))
);
CREATE INDEX usage_job_days_tenant_day ON usage_job_days (tenant_id, day);
CREATE INDEX usage_job_days_day ON usage_job_days (day);

-- What the ledger holds now, summed as the attribution transaction will sum it from here on.
INSERT INTO usage_job_days (
    day, site_id, tenant_id, model_id, job_id, ledger_rows, gpu_mj, node_overhead_mj, idle_mj,
    facility_overhead_mj, total_mj, estimated_mj, prompt_tokens, generated_tokens, gpu_ms,
    priced_mj, price_fallback_mj, carbon_mj, carbon_fallback_mj, marginal_mj, cost,
    gpu_time_cost, carbon_g, carbon_marginal_g, embodied_carbon_g, flags, badput_mj,
    badput_cost, badput_carbon_g, carbon_free_mj, cfe_mj)
SELECT date_bin('1 day', l.hour, timestamptz 'epoch'), l.site_id, l.tenant_id, l.model_id,
       l.job_id, count(*), sum(l.gpu_mj), sum(l.node_overhead_mj), sum(l.idle_mj),
       sum(l.facility_overhead_mj), sum(l.total_mj), sum(l.estimated_mj), sum(l.prompt_tokens),
       sum(l.generated_tokens), sum(l.gpu_ms), sum(l.priced_mj), sum(l.price_fallback_mj),
       sum(l.carbon_mj), sum(l.carbon_fallback_mj), sum(l.marginal_mj), sum(l.cost),
       sum(l.gpu_time_cost), sum(l.carbon_g), sum(l.carbon_marginal_g),
       sum(l.embodied_carbon_g), flags_union_agg(l.flags), sum(l.badput_mj), sum(l.badput_cost),
       sum(l.badput_carbon_g), sum(l.carbon_free_mj), sum(l.cfe_mj)
FROM ledger_rows l
GROUP BY 1, l.site_id, l.tenant_id, l.model_id, l.job_id;
