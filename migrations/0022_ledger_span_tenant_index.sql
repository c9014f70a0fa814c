-- ledger_span's tenant filter as a range the (tenant_id, day) and (tenant_id, hour) indexes
-- can take. `p_tenant IS NULL OR tenant_id = p_tenant` is folded away when the tenant is a
-- constant, but not when it is another row's column, as in the budget list (a lateral call
-- per budget): there each budget read every tenant's rollup rows of its period, a cost that
-- grew with tenants x budgets (at 320 tenants, 1,738 rows filtered out per budget for one
-- day of data). A range on the column is an index condition either way; for all tenants
-- (NULL) it spans every id. Same rows, same sums.
CREATE OR REPLACE FUNCTION ledger_span(p_tenant bigint, p_from timestamptz, p_to timestamptz)
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
      AND u.tenant_id BETWEEN coalesce(p_tenant, (-9223372036854775808)::bigint)
                          AND coalesce(p_tenant, 9223372036854775807)
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
      AND l.tenant_id BETWEEN coalesce(p_tenant, (-9223372036854775808)::bigint)
                          AND coalesce(p_tenant, 9223372036854775807)
    UNION ALL
    SELECT l.hour, l.site_id, l.tenant_id, l.model_id, l.job_id, l.gpu_mj,
           l.node_overhead_mj, l.idle_mj, l.facility_overhead_mj, l.total_mj, l.estimated_mj,
           l.prompt_tokens, l.generated_tokens, l.gpu_ms, l.priced_mj, l.price_fallback_mj,
           l.carbon_mj, l.carbon_fallback_mj, l.marginal_mj, l.cost, l.gpu_time_cost,
           l.carbon_g, l.carbon_marginal_g, l.embodied_carbon_g, l.flags
    FROM ledger_rows l, span
    WHERE l.hour >= greatest(span.d0, span.d1) AND l.hour < p_to
      AND l.tenant_id BETWEEN coalesce(p_tenant, (-9223372036854775808)::bigint)
                          AND coalesce(p_tenant, 9223372036854775807)
$$;
