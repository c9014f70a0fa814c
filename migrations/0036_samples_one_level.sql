-- `samples` partitioned on one level, by (raw, ts), instead of by raw and then by time:
-- a distributed PostgreSQL (Citus) distributes a partitioned table and its partitions, but not
-- one whose partitions are partitioned again. Each partition still holds one kind for one
-- span, so retention still drops them whole and their names do not change:
--   samples_steps_yYYYYmMM      FOR VALUES FROM (false, 'YYYY-MM-01') TO (false, <next month>)
--   samples_raw_yYYYYmMMdDD     FOR VALUES FROM (true, 'YYYY-MM-DD')  TO (true, <next day>)
-- A row (raw, ts) falls in such a range exactly when its raw matches and ts is in the span
-- (ranges compare column by column), and a query naming `raw` and a time range is pruned to
-- the same partitions as before.
--
-- The new parent puts its two booleans last, side by side: each new partition's rows are
-- 8 bytes shorter than with `raw` padded to 8 before `site_id` (old partitions keep theirs).
--
-- Upgrade cost: each stored partition is detached and attached again, which scans it once to
-- check its bounds (under a lock that blocks writes to it); its indexes are kept.

ALTER TABLE samples RENAME TO samples_v35;
ALTER INDEX samples_pkey RENAME TO samples_v35_pkey;

CREATE TABLE samples (
    site_id           bigint NOT NULL,
    meter_id          bigint NOT NULL,
    ts                timestamptz NOT NULL,
    counter_mj        bigint CONSTRAINT samples_counter_mj_check CHECK (counter_mj >= 0),
    power_mw          bigint CONSTRAINT samples_power_mw_check CHECK (power_mw >= 0),
    peak_mw           bigint CONSTRAINT samples_peak_mw_check CHECK (peak_mw >= 0),
    raw               boolean NOT NULL,
    counter_estimated boolean NOT NULL DEFAULT false,
    PRIMARY KEY (site_id, meter_id, ts, raw),
    CONSTRAINT samples_check CHECK (counter_mj IS NOT NULL OR power_mw IS NOT NULL)
) PARTITION BY RANGE (raw, ts);

DO $$
DECLARE
    p record;
BEGIN
    FOR p IN
        SELECT c.relname AS name, k.raw, pg_get_expr(c.relpartbound, c.oid) AS bound
        FROM (VALUES ('samples_steps', false), ('samples_raw', true)) AS k(parent, raw)
        JOIN pg_inherits i ON i.inhparent = k.parent::regclass
        JOIN pg_class c ON c.oid = i.inhrelid
    LOOP
        -- The bound reads "FOR VALUES FROM ('…') TO ('…')": the same instants, with raw first.
        EXECUTE format('ALTER TABLE %I DETACH PARTITION %I',
                       CASE WHEN p.raw THEN 'samples_raw' ELSE 'samples_steps' END, p.name);
        EXECUTE format('ALTER TABLE samples ATTACH PARTITION %I %s', p.name,
                       regexp_replace(p.bound, '\(''([^'']*)''\)', format('(%s, ''\1'')', CASE WHEN p.raw THEN 'true' ELSE 'false' END), 'g'));
    END LOOP;
END $$;

DROP TABLE samples_v35;
