-- Badput: the energy of work that was thrown away (domain::badput).
--
-- A job's end state, its last checkpoint and the attempt it repeats, as its scheduler reports
-- them; the attribution core counts the part of each ledger row's energy spent after the
-- checkpoint of a job that then lost its work, and costing splits the row's cost and carbon
-- by it. Rows written before this migration have no badput (0, and amounts of 0 where the
-- row has one): re-attribute a range (dirty its hours) to count it for old jobs.

ALTER TABLE jobs
    ADD COLUMN end_state          text CHECK (end_state IN ('completed', 'failed', 'cancelled',
                                   'timeout', 'preempted', 'node_fail', 'out_of_memory', 'requeued')),
    ADD COLUMN last_checkpoint_at timestamptz,
    -- The attempt this job repeats (a Slurm requeue, a replacement pod), at the same site.
    ADD COLUMN requeue_of         bigint,
    -- Container restarts inside the job (Kubernetes restartCount), as reported.
    ADD COLUMN restarts           integer NOT NULL DEFAULT 0 CHECK (restarts >= 0),
    ADD CONSTRAINT jobs_requeue_of_fkey FOREIGN KEY (site_id, requeue_of) REFERENCES jobs (site_id, id),
    ADD CONSTRAINT jobs_requeue_not_self CHECK (requeue_of IS NULL OR requeue_of <> id);

ALTER TABLE ledger
    ADD COLUMN badput_mj       bigint NOT NULL DEFAULT 0,
    ADD COLUMN badput_cost     numeric(20, 6),
    ADD COLUMN badput_carbon_g numeric(20, 3),
    ADD CONSTRAINT ledger_badput_within CHECK (badput_mj >= 0 AND badput_mj <= total_mj);
UPDATE ledger SET badput_cost = 0 WHERE cost IS NOT NULL;
UPDATE ledger SET badput_carbon_g = 0 WHERE carbon_g IS NOT NULL;

ALTER TABLE usage_days
    ADD COLUMN badput_mj       bigint NOT NULL DEFAULT 0,
    ADD COLUMN badput_cost     numeric,
    ADD COLUMN badput_carbon_g numeric;
UPDATE usage_days SET badput_cost = 0 WHERE cost IS NOT NULL;
UPDATE usage_days SET badput_carbon_g = 0 WHERE carbon_g IS NOT NULL;

-- The view's `l.*` was expanded when it was made: made again, it carries the new columns.
DROP VIEW ledger_rows;
CREATE VIEW ledger_rows AS
SELECT l.*,
       CASE WHEN l.cost IS NOT NULL THEN l.total_mj ELSE 0 END AS priced_mj,
       CASE WHEN l.carbon_g IS NOT NULL THEN l.total_mj ELSE 0 END AS carbon_mj,
       CASE WHEN l.carbon_marginal_g IS NOT NULL THEN l.total_mj ELSE 0 END AS marginal_mj
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
           flags_union_agg(l.flags), sum(l.badput_mj), sum(l.badput_cost), sum(l.badput_carbon_g)
    FROM unnest(p_days) AS d(day)
    JOIN ledger_rows l ON l.site_id = p_site AND l.hour >= d.day
                      AND l.hour < d.day + interval '1 day'
    GROUP BY d.day, l.site_id, l.tenant_id, l.model_id;
$$;

-- As migration 0022's, with the badput columns (a function's result type cannot change in
-- place).
DROP FUNCTION ledger_span(bigint, timestamptz, timestamptz);
CREATE FUNCTION ledger_span(p_tenant bigint, p_from timestamptz, p_to timestamptz)
RETURNS TABLE (
    hour timestamptz, site_id bigint, tenant_id bigint, model_id bigint, job_id bigint,
    gpu_mj bigint, node_overhead_mj bigint, idle_mj bigint, facility_overhead_mj bigint,
    total_mj bigint, estimated_mj bigint, prompt_tokens bigint, generated_tokens bigint,
    gpu_ms bigint, priced_mj bigint, price_fallback_mj bigint, carbon_mj bigint,
    carbon_fallback_mj bigint, marginal_mj bigint, cost numeric, gpu_time_cost numeric,
    carbon_g numeric, carbon_marginal_g numeric, embodied_carbon_g numeric, flags text[],
    badput_mj bigint, badput_cost numeric, badput_carbon_g numeric
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
           u.badput_mj, u.badput_cost, u.badput_carbon_g
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
           l.badput_mj, l.badput_cost, l.badput_carbon_g
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
           l.badput_mj, l.badput_cost, l.badput_carbon_g
    FROM ledger_rows l, span
    WHERE l.hour >= greatest(span.d0, span.d1) AND l.hour < p_to
      AND l.tenant_id BETWEEN coalesce(p_tenant, (-9223372036854775808)::bigint)
                          AND coalesce(p_tenant, 9223372036854775807)
$$;
