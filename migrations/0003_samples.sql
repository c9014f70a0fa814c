-- Raw energy samples, partitioned by month. Partitions are created on demand by ingest
-- (store::partitions) and can be dropped whole after retention.
--
-- No foreign key to meters: the ingest API validates meter keys before writing, meters are
-- never deleted, and a per-row FK check would halve the COPY/UNNEST rate on this table.

CREATE TABLE samples (
    meter_id    bigint NOT NULL,
    ts          timestamptz NOT NULL,
    counter_mj  bigint CHECK (counter_mj >= 0),
    power_mw    bigint CHECK (power_mw >= 0),
    PRIMARY KEY (meter_id, ts),
    CHECK (counter_mj IS NOT NULL OR power_mw IS NOT NULL)
) PARTITION BY RANGE (ts);

-- A sample sent again with different values: the first one stands, the conflict is kept here.
CREATE TABLE sample_conflicts (
    id                  bigserial PRIMARY KEY,
    meter_id            bigint NOT NULL,
    ts                  timestamptz NOT NULL,
    stored_counter_mj   bigint,
    stored_power_mw     bigint,
    sent_counter_mj     bigint,
    sent_power_mw       bigint,
    received_at         timestamptz NOT NULL DEFAULT now()
);
