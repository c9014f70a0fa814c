-- Step records and raw readings, kept for different times (retention: steps 400 days, raw
-- readings 14 days by default), so each lives in partitions of its own that retention drops
-- whole: `samples` is partitioned by `raw`, then by time, monthly for step records
-- (samples_steps_yYYYYmMM) and daily for raw readings (samples_raw_yYYYYmMMdDD).
-- store::partitions creates them ahead of time; store::retention drops them.
--
-- A meter sends one or the other; if it switched, a step record and a raw reading at the
-- same instant are both kept (the key includes `raw`) and attribution reads the step record.
--
-- The samples stored so far are kept as step records: whether they were raw is not known,
-- and the longer retention never loses what was measured.

ALTER TABLE samples RENAME TO samples_v17;
ALTER INDEX samples_pkey RENAME TO samples_v17_pkey;

-- The checks are named as the old table's were: a partition attaches only with the same.
CREATE TABLE samples (
    meter_id    bigint NOT NULL,
    ts          timestamptz NOT NULL,
    counter_mj  bigint CONSTRAINT samples_counter_mj_check CHECK (counter_mj >= 0),
    power_mw    bigint CONSTRAINT samples_power_mw_check CHECK (power_mw >= 0),
    peak_mw     bigint CONSTRAINT samples_peak_mw_check CHECK (peak_mw >= 0),
    raw         boolean NOT NULL,
    PRIMARY KEY (meter_id, ts, raw),
    CONSTRAINT samples_check CHECK (counter_mj IS NOT NULL OR power_mw IS NOT NULL)
) PARTITION BY LIST (raw);
CREATE TABLE samples_steps PARTITION OF samples FOR VALUES IN (false) PARTITION BY RANGE (ts);
CREATE TABLE samples_raw PARTITION OF samples FOR VALUES IN (true) PARTITION BY RANGE (ts);

DO $$
DECLARE
    p record;
    renamed text;
BEGIN
    FOR p IN
        SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'samples_v17'::regclass
    LOOP
        renamed := replace(p.name, 'samples_', 'samples_steps_');
        EXECUTE format('ALTER TABLE samples_v17 DETACH PARTITION %I', p.name);
        EXECUTE format('ALTER TABLE %I ADD COLUMN raw boolean NOT NULL DEFAULT false', p.name);
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', p.name, p.name || '_pkey');
        EXECUTE format('ALTER TABLE %I RENAME TO %I', p.name, renamed);
        EXECUTE format('ALTER TABLE samples_steps ATTACH PARTITION %I %s', renamed, p.bound);
    END LOOP;
END $$;
DROP TABLE samples_v17;

ALTER TABLE sample_conflicts ADD COLUMN raw boolean;

-- Retention's log: what was dropped, when, and what it covered.
CREATE TABLE retention_drops (
    id          bigserial PRIMARY KEY,
    partition   text NOT NULL,
    raw         boolean NOT NULL,
    range_start timestamptz NOT NULL,
    range_end   timestamptz NOT NULL,
    dropped_at  timestamptz NOT NULL DEFAULT now()
);
