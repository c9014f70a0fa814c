-- Closed days' step records packed (issue 47): one row per meter and UTC day, the day's
-- step records in `packed` (domain::step_pack: columns of zigzag varints, about six bytes a
-- minute), its first and last instants beside it for range reads. `crate::step_packs` moves
-- a day's rows out of `samples` into here once the day has been closed for two days; late
-- records for a packed day land in `samples` as usual and are merged at the next pass.
--
-- Monthly partitions by day, `step_packs_yYYYYmMM`, each the month of
-- `samples_steps_yYYYYmMM` and dropped with it by retention. Sharded by site with the rest.
CREATE TABLE step_packs (
    site_id  bigint NOT NULL,
    meter_id bigint NOT NULL,
    day      date NOT NULL,
    first_ts timestamptz NOT NULL,
    last_ts  timestamptz NOT NULL,
    steps    integer NOT NULL CHECK (steps > 0),
    packed   bytea NOT NULL,
    PRIMARY KEY (site_id, meter_id, day),
    CHECK (first_ts <= last_ts)
) PARTITION BY RANGE (day);

-- A pack is some 8 KB: over the TOAST threshold, so stored out of line and compressed; lz4
-- (where the server has it) takes the regular columns (times, flags) down to almost nothing
-- at a fraction of pglz's cost.
DO $$
BEGIN
    ALTER TABLE step_packs ALTER COLUMN packed SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN
    RAISE NOTICE 'lz4 not available: packs compressed with pglz';
END $$;

-- Which site-days are packed: a day with no row here (or `pending`) is packed at the next
-- pass once it is due; ingest sets `pending` when it writes into a packed day.
CREATE TABLE step_pack_days (
    site_id   bigint NOT NULL,
    day       date NOT NULL,
    pending   boolean NOT NULL,
    packed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (site_id, day)
);
