-- What a ledger row's figures rest on, for the API to say: the share of its energy priced
-- at the site's fallback price (and counted at its fallback intensity) rather than by a
-- signal. Together with `cost IS NULL`, `carbon_g IS NULL`, `estimated_mj` and `flags`, a
-- reader can tell measured, signal-priced figures from assumed ones.
ALTER TABLE ledger
    ADD COLUMN price_fallback_mj  bigint NOT NULL DEFAULT 0,
    ADD COLUMN carbon_fallback_mj bigint NOT NULL DEFAULT 0;

-- The union of the data-quality flags of the rows a query sums, kept sorted. The common
-- case (a row whose flags the union has already) costs one containment test.
CREATE FUNCTION flags_union(a text[], b text[]) RETURNS text[]
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT CASE WHEN b <@ a THEN a
                      ELSE ARRAY(SELECT DISTINCT f FROM unnest(a || b) AS f ORDER BY f) END $$;

CREATE AGGREGATE flags_union_agg(text[]) (
    SFUNC = flags_union,
    STYPE = text[],
    INITCOND = '{}',
    COMBINEFUNC = flags_union,
    PARALLEL = SAFE
);

-- Hours attributed before these columns: their fallback shares are recomputed by the
-- worker (their figures do not change; only what they rest on becomes visible).
INSERT INTO dirty_hours (site_id, hour)
SELECT DISTINCT site_id, hour FROM ledger
ON CONFLICT (site_id, hour) DO UPDATE SET marked_at = clock_timestamp();
