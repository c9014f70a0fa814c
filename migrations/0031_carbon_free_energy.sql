-- Hourly carbon-free energy (domain::cfe): the grid's carbon-free share as a signal, the
-- clean energy contracted for a site (a PPA's or on-site generation's delivery per hour),
-- and each site-hour's and ledger row's carbon-free energy, computed with its cost and
-- carbon. Rows written before this migration have none (NULL, "not known"): re-attribute a
-- range to count it.

ALTER TABLE signal_points DROP CONSTRAINT signal_points_signal_check;
ALTER TABLE signal_points ADD CONSTRAINT signal_points_signal_check
    CHECK (signal IN ('carbon', 'price', 'carbon_free'));
-- The grid's fossil-free share of generation, a fraction.
ALTER TABLE signal_points ADD CONSTRAINT signal_points_carbon_free_check
    CHECK (signal <> 'carbon_free' OR (basis = 'fossil_free' AND value >= 0 AND value <= 1));

-- Clean energy delivered to a site over [start_at, end_at) under a contract (a PPA) or from
-- its own generation, as its source reports it; a revision replaces it (same key) and
-- dirties the hours it touches.
CREATE TABLE site_clean_energy (
    site_id     bigint NOT NULL REFERENCES sites (id),
    source      text NOT NULL,
    start_at    timestamptz NOT NULL,
    end_at      timestamptz NOT NULL CHECK (end_at > start_at),
    energy_mj   bigint NOT NULL CHECK (energy_mj >= 0),
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (site_id, source, start_at)
);

-- The hour's load matched by the contract first, then by the grid's carbon-free share of
-- the rest; NULL where neither a share nor a contract covers the hour's energy.
ALTER TABLE site_hours
    ADD COLUMN carbon_free_mj  bigint,
    ADD COLUMN contract_mj     bigint;
-- A row's share of its hour's carbon-free energy, by its energy.
ALTER TABLE ledger
    ADD COLUMN carbon_free_mj  bigint,
    ADD CONSTRAINT ledger_carbon_free_within CHECK (carbon_free_mj >= 0 AND carbon_free_mj <= total_mj);
ALTER TABLE usage_days
    ADD COLUMN carbon_free_mj  bigint,
    -- The energy of the rows that have a carbon-free figure (the score's denominator).
    ADD COLUMN cfe_mj          bigint NOT NULL DEFAULT 0;

DROP VIEW ledger_rows;
CREATE VIEW ledger_rows AS
SELECT l.*,
       CASE WHEN l.cost IS NOT NULL THEN l.total_mj ELSE 0 END AS priced_mj,
       CASE WHEN l.carbon_g IS NOT NULL THEN l.total_mj ELSE 0 END AS carbon_mj,
       CASE WHEN l.carbon_marginal_g IS NOT NULL THEN l.total_mj ELSE 0 END AS marginal_mj,
       CASE WHEN l.carbon_free_mj IS NOT NULL THEN l.total_mj ELSE 0 END AS cfe_mj
FROM ledger l;

CREATE OR REPLACE FUNCTION usage_days_rebuild(p_site bigint, p_days timestamptz[]) RETURNS void
LANGUAGE sql AS $$
    DELETE FROM usage_days WHERE site_id = p_site AND day = ANY(p_days);
    INSERT INTO usage_days
    SELECT d.day, l.site_id, l.tenant_id, l.model_id, count(*),
           sum(l.gpu_mj), sum(l.node_overhead_mj), sum(l.idle_mj), sum(l.facility_overhead_mj),
           sum(l.total_mj), sum(l.estimated_mj), sum(l.prompt_tokens), sum(l.generated_tokens),
           sum(l.gpu_ms), sum(l.priced_mj), sum(l.price_fallback_mj), sum(l.carbon_mj),
           sum(l.carbon_fallback_mj), sum(l.marginal_mj), sum(l.cost), sum(l.gpu_time_cost),
           sum(l.carbon_g), sum(l.carbon_marginal_g), sum(l.embodied_carbon_g),
           flags_union_agg(l.flags), sum(l.badput_mj), sum(l.badput_cost), sum(l.badput_carbon_g),
           sum(l.carbon_free_mj), sum(l.cfe_mj)
    FROM unnest(p_days) AS d(day)
    JOIN ledger_rows l ON l.site_id = p_site AND l.hour >= d.day
                      AND l.hour < d.day + interval '1 day'
    GROUP BY d.day, l.site_id, l.tenant_id, l.model_id;
$$;

-- As migration 0030's, with the carbon-free columns.
DROP FUNCTION ledger_span(bigint, timestamptz, timestamptz);
CREATE FUNCTION ledger_span(p_tenant bigint, p_from timestamptz, p_to timestamptz)
RETURNS TABLE (
    hour timestamptz, site_id bigint, tenant_id bigint, model_id bigint, job_id bigint,
    gpu_mj bigint, node_overhead_mj bigint, idle_mj bigint, facility_overhead_mj bigint,
    total_mj bigint, estimated_mj bigint, prompt_tokens bigint, generated_tokens bigint,
    gpu_ms bigint, priced_mj bigint, price_fallback_mj bigint, carbon_mj bigint,
    carbon_fallback_mj bigint, marginal_mj bigint, cost numeric, gpu_time_cost numeric,
    carbon_g numeric, carbon_marginal_g numeric, embodied_carbon_g numeric, flags text[],
    badput_mj bigint, badput_cost numeric, badput_carbon_g numeric,
    carbon_free_mj bigint, cfe_mj bigint
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
           u.carbon_g, u.carbon_marginal_g, u.embodied_carbon_g, u.flags,
           u.badput_mj, u.badput_cost, u.badput_carbon_g, u.carbon_free_mj, u.cfe_mj
    FROM usage_days u, span
    WHERE u.day >= span.d0 AND u.day < span.d1
      AND u.tenant_id BETWEEN coalesce(p_tenant, (-9223372036854775808)::bigint)
                          AND coalesce(p_tenant, 9223372036854775807)
    -- The hours before the first whole day, and those after the last: two index ranges,
    -- so a month's query reads at most two days of ledger rows.
    UNION ALL
    SELECT l.hour, l.site_id, l.tenant_id, l.model_id, l.job_id, l.gpu_mj,
           l.node_overhead_mj, l.idle_mj, l.facility_overhead_mj, l.total_mj, l.estimated_mj,
           l.prompt_tokens, l.generated_tokens, l.gpu_ms, l.priced_mj, l.price_fallback_mj,
           l.carbon_mj, l.carbon_fallback_mj, l.marginal_mj, l.cost, l.gpu_time_cost,
           l.carbon_g, l.carbon_marginal_g, l.embodied_carbon_g, l.flags,
           l.badput_mj, l.badput_cost, l.badput_carbon_g, l.carbon_free_mj, l.cfe_mj
    FROM ledger_rows l, span
    WHERE l.hour >= p_from AND l.hour < least(span.d0, p_to)
      AND l.tenant_id BETWEEN coalesce(p_tenant, (-9223372036854775808)::bigint)
                          AND coalesce(p_tenant, 9223372036854775807)
    UNION ALL
    SELECT l.hour, l.site_id, l.tenant_id, l.model_id, l.job_id, l.gpu_mj,
           l.node_overhead_mj, l.idle_mj, l.facility_overhead_mj, l.total_mj, l.estimated_mj,
           l.prompt_tokens, l.generated_tokens, l.gpu_ms, l.priced_mj, l.price_fallback_mj,
           l.carbon_mj, l.carbon_fallback_mj, l.marginal_mj, l.cost, l.gpu_time_cost,
           l.carbon_g, l.carbon_marginal_g, l.embodied_carbon_g, l.flags,
           l.badput_mj, l.badput_cost, l.badput_carbon_g, l.carbon_free_mj, l.cfe_mj
    FROM ledger_rows l, span
    WHERE l.hour >= greatest(span.d0, span.d1) AND l.hour < p_to
      AND l.tenant_id BETWEEN coalesce(p_tenant, (-9223372036854775808)::bigint)
                          AND coalesce(p_tenant, 9223372036854775807)
$$;
