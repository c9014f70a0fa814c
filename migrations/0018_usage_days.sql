-- Per tenant-day rollups of the ledger, so that budgets, the dashboard and /v1/usage over a
-- month read one row per (site, day, tenant, model) instead of every job-hour of the month.
--
-- Exact by construction: the attribution transaction that rewrites a site's hours also
-- rebuilds that site's rollup rows for the days those hours fall in, from the ledger rows
-- it has just written (store::attribution). Every figure is a plain sum of the ledger's, so a
-- sum over rollup rows equals the sum over the ledger rows they stand for. The rebuild costs
-- the touched days' ledger rows of one site, read through the ledger's (site_id, hour) key.

-- The ledger with the per-row coverage figures the usage queries sum: the energy of a row
-- that is priced, counted for carbon, or counted for marginal carbon (all or nothing per row).
CREATE VIEW ledger_rows AS
SELECT l.*,
       CASE WHEN l.cost IS NOT NULL THEN l.total_mj ELSE 0 END AS priced_mj,
       CASE WHEN l.carbon_g IS NOT NULL THEN l.total_mj ELSE 0 END AS carbon_mj,
       CASE WHEN l.carbon_marginal_g IS NOT NULL THEN l.total_mj ELSE 0 END AS marginal_mj
FROM ledger l;

CREATE TABLE usage_days (
    day                     timestamptz NOT NULL,
    site_id                 bigint NOT NULL REFERENCES sites (id),
    tenant_id               bigint NOT NULL REFERENCES tenants (id),
    model_id                bigint REFERENCES models (id),
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
    UNIQUE NULLS NOT DISTINCT (site_id, day, tenant_id, model_id),
    CHECK (day = date_bin('1 day', day, timestamptz 'epoch'))
);
CREATE INDEX usage_days_tenant_day ON usage_days (tenant_id, day);
CREATE INDEX usage_days_day ON usage_days (day);

-- Rebuilds the rollup rows of one site's days from its ledger rows (the attribution
-- transaction calls it after writing hours; a migration calls it for what is there).
CREATE FUNCTION usage_days_rebuild(p_site bigint, p_days timestamptz[]) RETURNS void
LANGUAGE sql AS $$
    DELETE FROM usage_days WHERE site_id = p_site AND day = ANY(p_days);
    INSERT INTO usage_days
    SELECT d.day, l.site_id, l.tenant_id, l.model_id, count(*),
           sum(l.gpu_mj), sum(l.node_overhead_mj), sum(l.idle_mj), sum(l.facility_overhead_mj),
           sum(l.total_mj), sum(l.estimated_mj), sum(l.prompt_tokens), sum(l.generated_tokens),
           sum(l.gpu_ms), sum(l.priced_mj), sum(l.price_fallback_mj), sum(l.carbon_mj),
           sum(l.carbon_fallback_mj), sum(l.marginal_mj), sum(l.cost), sum(l.gpu_time_cost),
           sum(l.carbon_g), sum(l.carbon_marginal_g), sum(l.embodied_carbon_g),
           flags_union_agg(l.flags)
    FROM unnest(p_days) AS d(day)
    JOIN ledger_rows l ON l.site_id = p_site AND l.hour >= d.day
                      AND l.hour < d.day + interval '1 day'
    GROUP BY d.day, l.site_id, l.tenant_id, l.model_id;
$$;

-- The ledger of [p_from, p_to), optionally of one tenant, as rows a usage query can sum:
-- whole UTC days from the rollup, the hours before the first and after the last whole day
-- from the ledger itself. Rollup rows have no job (job_id NULL) and stand at their day.
-- A query that groups or filters by job reads ledger_rows instead.
CREATE FUNCTION ledger_span(p_tenant bigint, p_from timestamptz, p_to timestamptz)
RETURNS TABLE (
    hour timestamptz, site_id bigint, tenant_id bigint, model_id bigint, job_id bigint,
    gpu_mj bigint, node_overhead_mj bigint, idle_mj bigint, facility_overhead_mj bigint,
    total_mj bigint, estimated_mj bigint, prompt_tokens bigint, generated_tokens bigint,
    gpu_ms bigint, priced_mj bigint, price_fallback_mj bigint, carbon_mj bigint,
    carbon_fallback_mj bigint, marginal_mj bigint, cost numeric, gpu_time_cost numeric,
    carbon_g numeric, carbon_marginal_g numeric, embodied_carbon_g numeric, flags text[]
)
LANGUAGE sql STABLE AS $$
    WITH span AS (
        -- The whole days inside the range: from the first midnight at or after p_from to
        -- the last midnight at or before p_to (empty when d0 >= d1).
        SELECT CASE WHEN date_bin('1 day', p_from, timestamptz 'epoch') = p_from THEN p_from
                    ELSE date_bin('1 day', p_from, timestamptz 'epoch') + interval '1 day'
               END AS d0,
               date_bin('1 day', p_to, timestamptz 'epoch') AS d1
    )
    SELECT u.day, u.site_id, u.tenant_id, u.model_id, NULL::bigint, u.gpu_mj,
           u.node_overhead_mj, u.idle_mj, u.facility_overhead_mj, u.total_mj, u.estimated_mj,
           u.prompt_tokens, u.generated_tokens, u.gpu_ms, u.priced_mj, u.price_fallback_mj,
           u.carbon_mj, u.carbon_fallback_mj, u.marginal_mj, u.cost, u.gpu_time_cost,
           u.carbon_g, u.carbon_marginal_g, u.embodied_carbon_g, u.flags
    FROM usage_days u, span
    WHERE u.day >= span.d0 AND u.day < span.d1
      AND (p_tenant IS NULL OR u.tenant_id = p_tenant)
    -- The hours before the first whole day, and those after the last: two index ranges,
    -- so a month's query reads at most two days of ledger rows.
    UNION ALL
    SELECT l.hour, l.site_id, l.tenant_id, l.model_id, l.job_id, l.gpu_mj,
           l.node_overhead_mj, l.idle_mj, l.facility_overhead_mj, l.total_mj, l.estimated_mj,
           l.prompt_tokens, l.generated_tokens, l.gpu_ms, l.priced_mj, l.price_fallback_mj,
           l.carbon_mj, l.carbon_fallback_mj, l.marginal_mj, l.cost, l.gpu_time_cost,
           l.carbon_g, l.carbon_marginal_g, l.embodied_carbon_g, l.flags
    FROM ledger_rows l, span
    WHERE l.hour >= p_from AND l.hour < least(span.d0, p_to)
      AND (p_tenant IS NULL OR l.tenant_id = p_tenant)
    UNION ALL
    SELECT l.hour, l.site_id, l.tenant_id, l.model_id, l.job_id, l.gpu_mj,
           l.node_overhead_mj, l.idle_mj, l.facility_overhead_mj, l.total_mj, l.estimated_mj,
           l.prompt_tokens, l.generated_tokens, l.gpu_ms, l.priced_mj, l.price_fallback_mj,
           l.carbon_mj, l.carbon_fallback_mj, l.marginal_mj, l.cost, l.gpu_time_cost,
           l.carbon_g, l.carbon_marginal_g, l.embodied_carbon_g, l.flags
    FROM ledger_rows l, span
    WHERE l.hour >= greatest(span.d0, span.d1) AND l.hour < p_to
      AND (p_tenant IS NULL OR l.tenant_id = p_tenant)
$$;

SELECT usage_days_rebuild(s.site_id, s.days)
FROM (SELECT site_id, array_agg(DISTINCT date_bin('1 day', hour, timestamptz 'epoch')) AS days
      FROM ledger GROUP BY site_id) s;
